//! Claude computer use over the Anthropic Messages API: one conversation per
//! task, driven through [`ComputerModel`].
//!
//! The Messages API is stateless, so this client keeps the conversation and
//! sends all of it each turn, to `POST {base}/v1/messages` with the
//! `computer` tool of the chosen version ([`ComputerTool`]) and its
//! `anthropic-beta` header. Only the newest screenshot travels: before each
//! request every older image block is replaced by a short text placeholder,
//! so the history holds no image bytes but the newest screen's.
//!
//! How an answer becomes a [`Turn`]:
//! - `thinking` blocks are reasoning. `text` blocks in a turn that also calls
//!   the tool are the model narrating its next step, so they are reasoning
//!   too; in a turn without tool calls, the text blocks together are the
//!   final answer ([`Turn::text`]).
//! - each `computer` `tool_use` becomes a [`ToolCall`] (see [`actions`] for
//!   how every action of the tool maps to ours); a tool of another name is
//!   malformed.
//! - `stop_reason` `end_turn` or `stop_sequence` without tool calls: the
//!   model is done. `max_tokens` (the answer was cut off), `refusal`,
//!   `pause_turn` and `model_context_window_exceeded` cannot be carried on
//!   from here, so they fail the turn as [`ModelError::Malformed`] with a
//!   message that says which one it was.
//! - `redacted_thinking` and other blocks add nothing to the turn but go
//!   back to the API with the rest of the message.
//! - token usage counts cache writes and reads as input tokens.
//!
//! A turn that failed leaves the conversation at an end: start a new one.
//! Plain text requests (no tools) are [`AnthropicText`]'s.

mod actions;
mod text;
mod xdotool;

use base64::prelude::{Engine as _, BASE64_STANDARD};
use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{json, Value};

use super::http::{Endpoint, ModelHttp};
use super::{
    ask_human_question, ask_human_schema, CallResult, ComputerModel, ModelAction, ModelError, SafetyCheck, Screen, ToolCall,
    Turn, Usage, ASK_HUMAN, ASK_HUMAN_DESCRIPTION,
};
use actions::Pointer;
pub use text::AnthropicText;

/// The Messages API version every request names.
const API_VERSION: &str = "2023-06-01";
/// The path of the Messages API under the base URL.
const MESSAGES_PATH: &str = "/v1/messages";
/// The name the computer tool always has.
const TOOL_NAME: &str = "computer";
/// What an older screenshot becomes in the history.
const OLDER_SCREENSHOT: &str = "[an earlier screenshot, no longer shown]";
/// The answer for a call of the previous turn the caller did not carry out.
const NOT_CARRIED_OUT: &str = "this action was not carried out";

/// The version of the computer tool, which fixes its `type`, its beta
/// header and the actions it offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComputerTool {
    /// `computer_20250124`: Sonnet 4.5, Haiku 4.5, Opus 4.1, Sonnet 4, Opus 4.
    V20250124,
    /// `computer_20251124`: adds `zoom`. Opus 4.5 and later, Sonnet 4.6.
    V20251124,
}

impl ComputerTool {
    /// The tool's `type` in the request.
    pub fn tool_type(self) -> &'static str {
        match self {
            Self::V20250124 => "computer_20250124",
            Self::V20251124 => "computer_20251124",
        }
    }

    /// The `anthropic-beta` header value this version needs.
    pub fn beta(self) -> &'static str {
        match self {
            Self::V20250124 => "computer-use-2025-01-24",
            Self::V20251124 => "computer-use-2025-11-24",
        }
    }

    /// Whether the model may ask to `zoom` (advertised with `enable_zoom`).
    pub fn zooms(self) -> bool {
        matches!(self, Self::V20251124)
    }
}

/// How to reach Claude and which model and tool to use.
#[derive(Debug, Clone)]
pub struct AnthropicConfig {
    /// Base URL like `https://api.anthropic.com` (without `/v1`) and key.
    pub endpoint: Endpoint,
    pub model: String,
    pub tool: ComputerTool,
    /// The most tokens one answer may have, thinking included.
    pub max_tokens: u32,
    /// Extended thinking with this budget (below `max_tokens`); off when `None`.
    pub thinking_budget: Option<u32>,
}

impl AnthropicConfig {
    /// A config with 4096 answer tokens and thinking off.
    pub fn new(endpoint: Endpoint, model: impl Into<String>, tool: ComputerTool) -> Self {
        Self { endpoint, model: model.into(), tool, max_tokens: 4096, thinking_budget: None }
    }
}

/// One task's conversation with Claude using the computer tool.
pub struct AnthropicComputerUse {
    http: ModelHttp,
    headers: HeaderMap,
    config: AnthropicConfig,
    display: (u32, u32),
    system: Option<String>,
    /// The messages so far; only the newest image block is kept inline.
    messages: Vec<Value>,
    /// The tool_use ids of the last answer, which the next turn must answer.
    pending: Vec<String>,
    /// Where the model's own actions last left the pointer.
    pointer: Pointer,
}

impl AnthropicComputerUse {
    /// A conversation in which the model sees a `display` of (width, height)
    /// pixels: every [`Screen`] given to it must be scaled to that size.
    /// `system` is an optional system prompt.
    pub fn new(config: AnthropicConfig, display: (u32, u32), system: Option<String>) -> Result<Self, ModelError> {
        let http = ModelHttp::new(config.endpoint.clone())?;
        let headers = request_headers(&http, config.tool)?;
        Ok(Self { http, headers, config, display, system, messages: Vec::new(), pending: Vec::new(), pointer: None })
    }

    /// The body of the next request: the whole conversation and the tool.
    fn request_body(&self) -> Value {
        let mut body = json!({
            "model": self.config.model,
            "max_tokens": self.config.max_tokens,
            "tools": [
                tool_definition(self.config.tool, self.display),
                json!({ "name": ASK_HUMAN, "description": ASK_HUMAN_DESCRIPTION, "input_schema": ask_human_schema() }),
            ],
            "messages": self.messages,
        });
        if let Some(system) = &self.system {
            body["system"] = json!(system);
        }
        if let Some(budget) = self.config.thinking_budget {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        }
        body
    }

    /// Adds a user message carrying a new screenshot, dropping older ones.
    fn push_user(&mut self, content: Vec<Value>) {
        self.messages.iter_mut().for_each(forget_images);
        self.messages.push(json!({"role": "user", "content": content}));
    }

    /// Sends the conversation and turns the answer into a [`Turn`], keeping
    /// the assistant's message for the next request.
    async fn exchange(&mut self) -> Result<Turn, ModelError> {
        let answer = self.http.post_json(MESSAGES_PATH, &self.headers, &self.request_body()).await?;
        let content = answer.get("content").and_then(Value::as_array).ok_or_else(|| malformed("content must be an array"))?;
        let parsed = parse_answer(content, &answer, self.config.tool, self.display, self.pointer)?;
        self.pending = parsed.turn.calls.iter().map(|call| call.id.clone()).collect();
        self.pointer = parsed.pointer;
        self.messages.push(json!({"role": "assistant", "content": content}));
        Ok(parsed.turn)
    }

    fn warn_if_screen_differs(&self, screen: &Screen) {
        if (screen.width, screen.height) != self.display {
            tracing::warn!(
                screen_width = screen.width,
                screen_height = screen.height,
                display_width = self.display.0,
                display_height = self.display.1,
                "screenshot size differs from the display the model was told about"
            );
        }
    }

    /// The tool_result blocks answering the last turn: one per pending call,
    /// in the calls' order; a call without a result is answered as not
    /// carried out, a result for no pending call is dropped. The last result
    /// given holds the newest screen, the only one sent as an image.
    fn tool_results(&mut self, mut results: Vec<CallResult>) -> Vec<Value> {
        results.retain(|result| {
            let known = self.pending.contains(&result.call_id);
            if !known {
                tracing::warn!(call_id = %result.call_id, "dropping a result for no pending tool call");
            }
            known
        });
        let newest_image = results.len().checked_sub(1);
        let mut blocks = Vec::with_capacity(self.pending.len());
        for id in std::mem::take(&mut self.pending) {
            let block = match results.iter().position(|r| r.call_id == id) {
                Some(index) => tool_result(&results[index], Some(index) == newest_image),
                None => json!({"type": "tool_result", "tool_use_id": id, "is_error": true, "content": NOT_CARRIED_OUT}),
            };
            blocks.push(block);
        }
        blocks
    }
}

impl ComputerModel for AnthropicComputerUse {
    fn start<'a>(&'a mut self, prompt: &'a str, screen: &'a Screen) -> BoxFuture<'a, Result<Turn, ModelError>> {
        Box::pin(async move {
            self.warn_if_screen_differs(screen);
            self.messages.clear();
            self.pending.clear();
            self.pointer = None;
            self.push_user(vec![image_block(screen), json!({"type": "text", "text": prompt})]);
            self.exchange().await
        })
    }

    /// Anthropic has no safety checks to acknowledge: `acknowledged` is unused.
    fn resume<'a>(
        &'a mut self,
        results: Vec<CallResult>,
        _acknowledged: &'a [SafetyCheck],
    ) -> BoxFuture<'a, Result<Turn, ModelError>> {
        Box::pin(async move {
            if self.pending.is_empty() {
                return Err(ModelError::Rejected { status: 0, message: "no tool call of the model awaits a result".into() });
            }
            if let Some(last) = results.last() {
                self.warn_if_screen_differs(&last.screen);
            }
            let blocks = self.tool_results(results);
            self.push_user(blocks);
            self.exchange().await
        })
    }
}

/// `x-api-key`, `anthropic-version` and the tool's `anthropic-beta`.
fn request_headers(http: &ModelHttp, tool: ComputerTool) -> Result<HeaderMap, ModelError> {
    let mut headers = version_headers(http)?;
    headers.insert(HeaderName::from_static("anthropic-beta"), HeaderValue::from_static(tool.beta()));
    Ok(headers)
}

/// `x-api-key` and `anthropic-version`: what every request carries.
fn version_headers(http: &ModelHttp) -> Result<HeaderMap, ModelError> {
    let mut headers = HeaderMap::new();
    let (name, value) = http.key("x-api-key", "")?;
    headers.insert(name, value);
    headers.insert(HeaderName::from_static("anthropic-version"), HeaderValue::from_static(API_VERSION));
    Ok(headers)
}

/// The computer tool as the request advertises it, with the display size
/// the model's coordinates refer to.
fn tool_definition(tool: ComputerTool, (width, height): (u32, u32)) -> Value {
    let mut definition = json!({
        "type": tool.tool_type(),
        "name": TOOL_NAME,
        "display_width_px": width,
        "display_height_px": height,
    });
    if tool.zooms() {
        definition["enable_zoom"] = json!(true);
    }
    definition
}

/// A screen as a base64 PNG image block.
fn image_block(screen: &Screen) -> Value {
    json!({
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": BASE64_STANDARD.encode(&screen.png)},
    })
}

/// The tool_result for one call: its text, then its screen when it is the
/// newest one (older screens are never sent).
fn tool_result(result: &CallResult, with_image: bool) -> Value {
    let mut content = Vec::new();
    if let Some(text) = &result.text {
        content.push(json!({"type": "text", "text": text}));
    }
    content.push(if with_image { image_block(&result.screen) } else { older_screenshot() });
    json!({"type": "tool_result", "tool_use_id": result.call_id, "is_error": result.is_error, "content": content})
}

fn older_screenshot() -> Value {
    json!({"type": "text", "text": OLDER_SCREENSHOT})
}

/// Replaces every image block of a message, also those nested in
/// tool_results, by the placeholder text.
fn forget_images(message: &mut Value) {
    let Some(blocks) = message.get_mut("content").and_then(Value::as_array_mut) else {
        return;
    };
    for block in blocks {
        if is_image(block) {
            *block = older_screenshot();
        } else if let Some(Value::Array(nested)) = block.get_mut("content") {
            nested.iter_mut().filter(|b| is_image(b)).for_each(|b| *b = older_screenshot());
        }
    }
}

fn is_image(block: &Value) -> bool {
    block.get("type").and_then(Value::as_str) == Some("image")
}

/// A turn parsed from an answer, and where its actions leave the pointer.
struct ParsedAnswer {
    turn: Turn,
    pointer: Pointer,
}

/// Reads the content blocks, stop reason and usage of one answer.
fn parse_answer(
    content: &[Value],
    answer: &Value,
    tool: ComputerTool,
    display: (u32, u32),
    mut pointer: Pointer,
) -> Result<ParsedAnswer, ModelError> {
    let mut turn = Turn { usage: parse_usage(answer), ..Turn::default() };
    let mut texts = Vec::new();
    for (index, block) in content.iter().enumerate() {
        let at = format!("content[{index}]");
        match block.get("type").and_then(Value::as_str) {
            Some("thinking") => turn.reasoning.push(string_field(block, "thinking", &at)?.to_owned()),
            Some("text") => texts.push(string_field(block, "text", &at)?.to_owned()),
            Some("tool_use") => {
                let call = parse_tool_use(block, &at, tool, display, &mut pointer)?;
                turn.calls.push(call);
            }
            Some(_) => {}
            None => return Err(malformed(format!("{at}.type must be a string"))),
        }
    }
    check_stop_reason(answer, &turn, &texts)?;
    if turn.calls.is_empty() {
        turn.text = (!texts.is_empty()).then(|| texts.join("\n"));
    } else {
        turn.reasoning.extend(texts);
    }
    Ok(ParsedAnswer { turn, pointer })
}

/// A `computer` tool_use as a [`ToolCall`].
fn parse_tool_use(
    block: &Value,
    at: &str,
    tool: ComputerTool,
    display: (u32, u32),
    pointer: &mut Pointer,
) -> Result<ToolCall, ModelError> {
    let id = string_field(block, "id", at)?;
    let name = string_field(block, "name", at)?;
    if name == ASK_HUMAN {
        let input = block.get("input").cloned().unwrap_or(Value::Null);
        let question = ask_human_question(&input, &format!("{at}.input"))?;
        return Ok(ToolCall { id: id.to_owned(), actions: vec![ModelAction::AskHuman { question }] });
    }
    if name != TOOL_NAME {
        return Err(malformed(format!("{at}.name is {name:?}, a tool this client did not offer")));
    }
    let input =
        block.get("input").and_then(Value::as_object).ok_or_else(|| malformed(format!("{at}.input must be an object")))?;
    let actions = actions::translate(input, &format!("{at}.input"), tool, display, pointer)?;
    Ok(ToolCall { id: id.to_owned(), actions })
}

/// Refuses the stop reasons that leave nothing to carry out or finish.
fn check_stop_reason(answer: &Value, turn: &Turn, texts: &[String]) -> Result<(), ModelError> {
    let reason = answer.get("stop_reason").and_then(Value::as_str).ok_or_else(|| malformed("stop_reason must be a string"))?;
    let said = || if texts.is_empty() { String::new() } else { format!(": {}", texts.join(" ")) };
    match reason {
        "tool_use" if turn.calls.is_empty() => Err(malformed("stop_reason is tool_use but content has no tool_use block")),
        "tool_use" | "end_turn" | "stop_sequence" => Ok(()),
        "max_tokens" => Err(malformed("stop_reason is max_tokens: the answer was cut off; raise max_tokens")),
        "refusal" => Err(malformed(format!("stop_reason is refusal: the model declined to go on{}", said()))),
        "model_context_window_exceeded" => {
            Err(malformed("stop_reason is model_context_window_exceeded: the conversation no longer fits the model"))
        }
        other => Err(malformed(format!("stop_reason {other:?} cannot be carried on"))),
    }
}

/// `usage`, counting cache writes and reads as input; zero when absent.
fn parse_usage(answer: &Value) -> Usage {
    let count = |name: &str| answer.pointer(&format!("/usage/{name}")).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input_tokens: count("input_tokens") + count("cache_creation_input_tokens") + count("cache_read_input_tokens"),
        output_tokens: count("output_tokens"),
    }
}

fn string_field<'v>(block: &'v Value, name: &str, at: &str) -> Result<&'v str, ModelError> {
    block.get(name).and_then(Value::as_str).ok_or_else(|| malformed(format!("{at}.{name} must be a string")))
}

fn malformed(message: impl Into<String>) -> ModelError {
    ModelError::Malformed(message.into())
}
