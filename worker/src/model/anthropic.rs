//! Claude computer use over the Anthropic Messages API: one conversation per
//! task, driven through [`ComputerModel`].
//!
//! The Messages API is stateless, so this client keeps the conversation and
//! sends all of it each turn, to `POST {base}/v1/messages`, with the
//! computer tool of the model's version ([`ComputerTool`], chosen and
//! stepped down as [`tools`] says):
//!
//! - **`computer_toolset_20260801`** (GA, no beta header): one tool entry
//!   whose member tools ([`members`]) the model calls by name with
//!   `toolset_name`, several in one turn; every `tool_result` echoes
//!   `toolset_name`, and a call that was not run is answered with
//!   [`NOT_EXECUTED`](crate::model::NOT_EXECUTED). Thinking is adaptive
//!   with `display: "summarized"`, so the notes between tool calls reach the
//!   `reasoning` events; no `tool_choice` or sampling setting is sent. The
//!   history is append-only (every assistant message goes back exactly as
//!   received, thinking blocks included, and nothing earlier is edited):
//!   the documented server-side tool-result clearing drops older results
//!   as the [`ImageHistory`] says (see [`cache`]). Screenshots are checked against the toolset's size
//!   limits, since the API refuses larger ones rather than scaling them.
//! - **`computer_20251124`, `computer_20250124`** (beta headers): one
//!   `computer` tool with the display size; the history keeps the newest
//!   screenshots as its [`ImageHistory`] says, older image blocks being
//!   replaced by a short placeholder a chunk at a time, so the cached
//!   prefix stays the same for several turns.
//!
//! Prompt caching (unless [`AnthropicConfig::caching`] is off): breakpoints
//! on the system prompt and tools and on the newest turns ([`cache`]).
//!
//! How an answer becomes a [`Turn`]:
//! - `thinking` blocks are reasoning. `text` blocks in a turn that also calls
//!   a tool are the model narrating its next step, so they are reasoning
//!   too; in a turn without tool calls, the text blocks together are the
//!   final answer ([`Turn::text`]).
//! - each computer `tool_use` becomes a [`ToolCall`] (see [`actions`] for
//!   how every action maps to ours); a tool this client did not offer is
//!   malformed. A toolset member call that cannot be done as asked becomes
//!   [`ModelAction::Refuse`], answered as an error.
//! - `stop_reason` `end_turn` or `stop_sequence` without tool calls: the
//!   model is done. `max_tokens` (the answer was cut off), `refusal`,
//!   `pause_turn` and `model_context_window_exceeded` cannot be carried on
//!   from here, so they fail the turn as [`ModelError::Malformed`] with a
//!   message that says which one it was.
//! - `redacted_thinking` and other blocks add nothing to the turn but go
//!   back to the API with the rest of the message.
//! - token usage counts cache writes and reads as input tokens, and
//!   reports each apart (`cache_creation_input_tokens`,
//!   `cache_read_input_tokens`).
//!
//! A turn that failed leaves the conversation at an end: start a new one.
//! The conversation carries over to another attempt whole ([`checkpoint`]).
//! Plain text requests (no tools) are [`AnthropicText`]'s.

mod actions;
pub mod browser;
pub mod cache;
mod checkpoint;
pub mod members;
mod text;
pub mod tools;
mod xdotool;

use base64::prelude::{Engine as _, BASE64_STANDARD};
use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{json, Value};

use super::browser::PageState;
use super::history::ImageHistory;
use super::http::{Endpoint, ModelHttp};
use super::{
    ask_human_question, ask_human_schema, CallResult, ComputerModel, ModelAction, ModelError, SafetyCheck, Screen, ToolCall,
    ToolChange, Turn, Usage, ASK_HUMAN, ASK_HUMAN_DESCRIPTION, NOT_EXECUTED,
};
use actions::Pointer;
pub use browser::BROWSER_TOOLSET;
pub use cache::MAX_BREAKPOINTS;
use cache::{add_breakpoints, clearing_edit, count_images, forget_oldest_images, older_screenshot, TOOLSET_CLEARING};
pub use members::{Member, TOOLSET_NAME};
pub use text::AnthropicText;
pub use tools::{ComputerTool, ToolMemory};

/// The Messages API version every request names.
const API_VERSION: &str = "2023-06-01";
/// The path of the Messages API under the base URL.
const MESSAGES_PATH: &str = "/v1/messages";
/// The name the older computer tools always have.
const TOOL_NAME: &str = "computer";
/// The answer for a call of the previous turn the caller did not carry out
/// (older tools).
const NOT_CARRIED_OUT: &str = "this action was not carried out";
/// What a toolset call that ran well and shows nothing answers.
const DONE: &str = "OK";
/// The beta header of server-side context management (tool-result clearing).
const CONTEXT_MANAGEMENT_BETA: &str = "context-management-2025-06-27";
/// The fewest answer tokens a toolset request asks for: they cover the
/// adaptive thinking too.
const TOOLSET_MIN_MAX_TOKENS: u32 = 16_000;

/// How to reach Claude and which model and tool to use.
#[derive(Debug, Clone)]
pub struct AnthropicConfig {
    /// Base URL like `https://api.anthropic.com` (without `/v1`) and key.
    pub endpoint: Endpoint,
    pub model: String,
    /// The tool to offer, unless `memory` knows the model steps down.
    pub tool: ComputerTool,
    /// The most tokens one answer may have, thinking included.
    pub max_tokens: u32,
    /// Extended thinking with this budget (below `max_tokens`) for the
    /// older tools; off when `None`. Toolset models think adaptively.
    pub thinking_budget: Option<u32>,
    /// Toolset members sent disabled (their calls are answered as errors).
    pub disabled: Vec<Member>,
    /// The tools models stepped down to, shared by the process's clients.
    pub memory: ToolMemory,
    /// Whether requests carry prompt-cache breakpoints.
    pub caching: bool,
    /// Which screenshots the history keeps; `None`: the tool's own (the
    /// older tools only the newest, the toolset [`TOOLSET_CLEARING`]).
    pub history: Option<ImageHistory>,
}

impl AnthropicConfig {
    /// A config with 4096 answer tokens, thinking off for the older tools,
    /// every member on, a memory of its own, caching on and only the
    /// newest screenshot kept.
    pub fn new(endpoint: Endpoint, model: impl Into<String>, tool: ComputerTool) -> Self {
        Self {
            endpoint,
            model: model.into(),
            tool,
            max_tokens: 4096,
            thinking_budget: None,
            disabled: Vec::new(),
            memory: ToolMemory::default(),
            caching: true,
            history: None,
        }
    }
}

/// A tool call of the last answer that the next request must answer.
#[derive(Debug, Clone)]
struct Pending {
    id: String,
    /// The toolset of a member call (its result echoes `toolset_name`).
    toolset: Option<&'static str>,
    /// Whether its result is an image of its own (`screenshot`, `zoom`).
    shows: bool,
}

/// One task's conversation with Claude using the computer tool.
pub struct AnthropicComputerUse {
    http: ModelHttp,
    config: AnthropicConfig,
    /// The tool offered now: the config's, or what the model stepped down to.
    tool: ComputerTool,
    display: (u32, u32),
    system: Option<String>,
    /// The messages so far, as sent and received.
    messages: Vec<Value>,
    /// The tool calls of the last answer, which the next turn must answer.
    pending: Vec<Pending>,
    /// Where the model's own actions last left the pointer.
    pointer: Pointer,
    /// Tool switches not yet reported in a turn.
    changes: Vec<ToolChange>,
    /// The page a browser shows, for the browser toolset's `browser_state`.
    page: Option<PageState>,
}

impl AnthropicComputerUse {
    /// A conversation in which the model sees a `display` of (width, height)
    /// pixels: every [`Screen`] given to it must be scaled to that size.
    /// `system` is an optional system prompt.
    pub fn new(config: AnthropicConfig, display: (u32, u32), system: Option<String>) -> Result<Self, ModelError> {
        let http = ModelHttp::new(config.endpoint.clone())?;
        version_headers(&http)?;
        let tool = config.memory.get(&config.model).unwrap_or(config.tool);
        Ok(Self {
            http,
            config,
            tool,
            display,
            system,
            messages: Vec::new(),
            pending: Vec::new(),
            pointer: None,
            changes: Vec::new(),
            page: None,
        })
    }

    /// The tool this conversation offers now.
    pub fn tool(&self) -> ComputerTool {
        self.tool
    }

    /// The body of the next request: the whole conversation and the tools.
    fn request_body(&self) -> Value {
        let computer = if self.tool.is_browser() {
            browser::definition()
        } else if self.tool.is_toolset() {
            members::definition(self.tool.tool_type(), &self.config.disabled)
        } else {
            tool_definition(self.tool, self.display)
        };
        let max_tokens =
            if self.tool.is_toolset() { self.config.max_tokens.max(TOOLSET_MIN_MAX_TOKENS) } else { self.config.max_tokens };
        let mut body = json!({
            "model": self.config.model,
            "max_tokens": max_tokens,
            "tools": [
                computer,
                json!({ "name": ASK_HUMAN, "description": ASK_HUMAN_DESCRIPTION, "input_schema": ask_human_schema() }),
            ],
            "messages": self.messages,
        });
        if let Some(system) = &self.system {
            body["system"] = json!(system);
        }
        if self.config.caching {
            add_breakpoints(&mut body);
        }
        if self.tool.is_toolset() {
            body["thinking"] = json!({"type": "adaptive", "display": "summarized"});
            if let Some(edit) = self.clearing() {
                body["context_management"] = json!({"edits": [edit]});
            }
        } else if let Some(budget) = self.config.thinking_budget {
            body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        }
        body
    }

    /// The screenshots the history keeps.
    fn history(&self) -> ImageHistory {
        let own = if self.tool.is_toolset() { TOOLSET_CLEARING } else { ImageHistory::NEWEST_ONLY };
        self.config.history.unwrap_or(own)
    }

    /// The tool-result clearing a toolset conversation asks for now, if any.
    fn clearing(&self) -> Option<Value> {
        if !self.tool.is_toolset() {
            return None;
        }
        clearing_edit(self.history(), tool_result_count(&self.messages))
    }

    /// `x-api-key`, `anthropic-version`, and the beta headers the request
    /// needs: the older tools' own, and context management once clearing.
    fn headers(&self) -> Result<HeaderMap, ModelError> {
        let mut headers = version_headers(&self.http)?;
        let clearing = self.clearing().is_some();
        let betas: Vec<&str> = self.tool.beta().into_iter().chain(clearing.then_some(CONTEXT_MANAGEMENT_BETA)).collect();
        if !betas.is_empty() {
            let value = HeaderValue::from_str(&betas.join(",")).map_err(|e| malformed(format!("a beta header: {e}")))?;
            headers.insert(HeaderName::from_static("anthropic-beta"), value);
        }
        Ok(headers)
    }

    /// Adds a user message. The older tools drop earlier screenshots as
    /// the [`ImageHistory`] says; the toolset's history is append-only.
    fn push_user(&mut self, content: Vec<Value>) {
        self.messages.push(json!({"role": "user", "content": content}));
        if !self.tool.is_toolset() {
            let drop = self.history().to_drop(count_images(&self.messages));
            forget_oldest_images(&mut self.messages, drop);
        }
    }

    /// Sends the conversation and turns the answer into a [`Turn`], keeping
    /// the assistant's message for the next request. Before the model has
    /// answered once, a 400 saying it does not take the tool steps down
    /// and tries again.
    async fn exchange(&mut self) -> Result<Turn, ModelError> {
        let answer = loop {
            match self.http.post_json(MESSAGES_PATH, &self.headers()?, &self.request_body()).await {
                Err(ModelError::Rejected { status: 400, message }) => match self.step_down(&message) {
                    Some(next) => self.switch(next, message),
                    None => return Err(ModelError::Rejected { status: 400, message }),
                },
                other => break other?,
            }
        };
        let content = answer.get("content").and_then(Value::as_array).ok_or_else(|| malformed("content must be an array"))?;
        let context = ParseContext { tool: self.tool, disabled: &self.config.disabled, display: self.display };
        let mut parsed = parse_answer(content, &answer, &context, self.pointer)?;
        self.pending = parsed.pending;
        self.pointer = parsed.pointer;
        self.messages.push(json!({"role": "assistant", "content": content}));
        parsed.turn.tool_changes = std::mem::take(&mut self.changes);
        Ok(parsed.turn)
    }

    /// The tool to try after a 400 with `message`: only before the model
    /// has answered (a history with calls of one tool cannot switch).
    fn step_down(&self, message: &str) -> Option<ComputerTool> {
        let answered = self.messages.iter().any(|m| m["role"] == "assistant");
        if answered {
            return None;
        }
        self.tool.step_down(message)
    }

    fn switch(&mut self, next: ComputerTool, reason: String) {
        tracing::warn!(model = %self.config.model, from = self.tool.tool_type(), to = next.tool_type(), %reason, "the model does not take the computer tool; stepping down");
        self.config.memory.remember(&self.config.model, next);
        self.changes.push(ToolChange {
            model: self.config.model.clone(),
            from: self.tool.tool_type(),
            to: next.tool_type(),
            reason,
        });
        self.tool = next;
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

    /// Refuses a screen the API would refuse: past the long-edge or token
    /// limit of the tool's models, or past 2000 px a side once the request
    /// carries more than 20 images.
    fn check_screen(&self, screen: &Screen) -> Result<(), ModelError> {
        let images = count_images(&self.messages) + 1;
        image_fits(self.tool, (screen.width, screen.height), images)
            .map_err(|problem| ModelError::Rejected { status: 0, message: problem })
    }

    /// The tool_result blocks answering the last turn: one per pending call,
    /// in the calls' order; a call without a result is answered as not
    /// carried out, a result for no pending call is dropped.
    fn tool_results(&mut self, mut results: Vec<CallResult>) -> Vec<Value> {
        results.retain(|result| {
            let known = self.pending.iter().any(|p| p.id == result.call_id);
            if !known {
                tracing::warn!(call_id = %result.call_id, "dropping a result for no pending tool call");
            }
            known
        });
        let pending = std::mem::take(&mut self.pending);
        if self.tool.is_toolset() {
            return toolset_results(&pending, &results, self.page.as_ref());
        }
        let newest_image = results.len().checked_sub(1);
        let mut blocks = Vec::with_capacity(pending.len());
        for Pending { id, .. } in pending {
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
            self.check_screen(screen)?;
            self.push_user(vec![image_block(screen), json!({"type": "text", "text": prompt})]);
            self.exchange().await
        })
    }

    fn page_shown(&mut self, page: &PageState) {
        self.page = Some(page.clone());
    }

    /// The whole conversation (see [`checkpoint`]): the API keeps none.
    fn checkpoint(&self) -> Option<Value> {
        self.save()
    }

    fn restore(&mut self, checkpoint: &Value) -> Result<(), ModelError> {
        self.load(checkpoint)
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
                self.check_screen(&last.screen)?;
            }
            let blocks = self.tool_results(results);
            self.push_user(blocks);
            self.exchange().await
        })
    }
}

/// The toolset's answers to a turn's member calls, in order. Each result
/// echoes `toolset_name` (an `ask_human` result does not); the last call
/// that ran carries the screen after it, as do `screenshot` and `zoom`;
/// the others say `OK` or what went wrong; a call without a result was not
/// executed.
fn toolset_results(pending: &[Pending], results: &[CallResult], page: Option<&PageState>) -> Vec<Value> {
    let last_ran =
        pending.iter().rposition(|p| results.iter().any(|r| r.call_id == p.id && r.text.as_deref() != Some(NOT_EXECUTED)));
    pending
        .iter()
        .enumerate()
        .map(|(index, call)| {
            let result = results.iter().find(|r| r.call_id == call.id);
            let mut content = Vec::new();
            let is_error = match result {
                Some(result) => {
                    let text = result.text.clone().unwrap_or_else(|| DONE.to_owned());
                    content.push(json!({"type": "text", "text": text}));
                    if Some(index) == last_ran || call.shows {
                        content.push(image_block(&result.screen));
                    }
                    if let (Some(BROWSER_TOOLSET), Some(page), false) = (call.toolset, page, result.is_error) {
                        content.push(browser_state(page));
                    }
                    result.is_error
                }
                None => {
                    content.push(json!({"type": "text", "text": NOT_EXECUTED}));
                    true
                }
            };
            let mut block = json!({"type": "tool_result", "tool_use_id": call.id, "content": content});
            if is_error {
                block["is_error"] = json!(true);
            }
            if let Some(toolset) = call.toolset {
                block["toolset_name"] = json!(toolset);
            }
            block
        })
        .collect()
}

/// The browser toolset's `browser_state` block: the one tab this client
/// drives, active.
fn browser_state(page: &PageState) -> Value {
    json!({"type": "browser_state", "tabs": [{"tab_id": "tab_1", "title": page.title, "url": page.url, "active": true}]})
}

/// Whether a `(width, height)` screenshot is within the documented limits
/// for `tool`'s models when the request carries `images` images.
fn image_fits(tool: ComputerTool, (width, height): (u32, u32), images: usize) -> Result<(), String> {
    let long_edge = width.max(height);
    let (max_edge, fits) = if tool.is_toolset() {
        let tokens = u64::from(width.div_ceil(28)) * u64::from(height.div_ceil(28));
        (2576, tokens <= 4784)
    } else {
        (1568, u64::from(width) * u64::from(height) <= 1_150_000)
    };
    if long_edge > max_edge || !fits {
        return Err(format!(
            "a {width}x{height} screenshot is past the size {} models accept (they refuse it rather than scale it): lower FLOTILLA_MODEL_SCREEN",
            tool.tool_type()
        ));
    }
    if images > 20 && long_edge > 2000 {
        return Err(format!("a {width}x{height} screenshot is past 2000 px a side in a request of more than 20 images"));
    }
    Ok(())
}

fn tool_result_count(messages: &[Value]) -> usize {
    messages.iter().filter_map(|m| m["content"].as_array()).flatten().filter(|block| block["type"] == "tool_result").count()
}

/// `x-api-key` and `anthropic-version`: what every request carries.
fn version_headers(http: &ModelHttp) -> Result<HeaderMap, ModelError> {
    let mut headers = HeaderMap::new();
    let (name, value) = http.key("x-api-key", "")?;
    headers.insert(name, value);
    headers.insert(HeaderName::from_static("anthropic-version"), HeaderValue::from_static(API_VERSION));
    Ok(headers)
}

/// An older computer tool as the request advertises it, with the display
/// size the model's coordinates refer to.
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

/// The tool_result for one call of an older tool: its text, then its
/// screen when it is the newest one (older screens are never sent).
fn tool_result(result: &CallResult, with_image: bool) -> Value {
    let mut content = Vec::new();
    if let Some(text) = &result.text {
        content.push(json!({"type": "text", "text": text}));
    }
    content.push(if with_image { image_block(&result.screen) } else { older_screenshot() });
    json!({"type": "tool_result", "tool_use_id": result.call_id, "is_error": result.is_error, "content": content})
}

/// What parsing an answer needs to know of the conversation.
struct ParseContext<'a> {
    tool: ComputerTool,
    disabled: &'a [Member],
    display: (u32, u32),
}

/// A turn parsed from an answer, the calls it leaves pending, and where
/// its actions leave the pointer.
struct ParsedAnswer {
    turn: Turn,
    pending: Vec<Pending>,
    pointer: Pointer,
}

/// Reads the content blocks, stop reason and usage of one answer.
fn parse_answer(
    content: &[Value],
    answer: &Value,
    context: &ParseContext<'_>,
    mut pointer: Pointer,
) -> Result<ParsedAnswer, ModelError> {
    let mut turn = Turn { usage: parse_usage(answer), ..Turn::default() };
    let mut pending = Vec::new();
    let mut texts = Vec::new();
    for (index, block) in content.iter().enumerate() {
        let at = format!("content[{index}]");
        match block.get("type").and_then(Value::as_str) {
            Some("thinking") => turn.reasoning.push(string_field(block, "thinking", &at)?.to_owned()),
            Some("text") => texts.push(string_field(block, "text", &at)?.to_owned()),
            Some("tool_use") => {
                let (call, toolset, shows) = parse_tool_use(block, &at, context, &mut pointer)?;
                pending.push(Pending { id: call.id.clone(), toolset, shows });
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
    Ok(ParsedAnswer { turn, pending, pointer })
}

/// A tool_use as a [`ToolCall`], with the toolset it belongs to and
/// whether its result shows an image of its own; dispatched on
/// (`toolset_name`, `name`): `ask_human`, a member of the computer or the
/// browser toolset, or the older `computer` tool.
fn parse_tool_use(
    block: &Value,
    at: &str,
    context: &ParseContext<'_>,
    pointer: &mut Pointer,
) -> Result<(ToolCall, Option<&'static str>, bool), ModelError> {
    let id = string_field(block, "id", at)?.to_owned();
    let name = string_field(block, "name", at)?;
    let toolset = block.get("toolset_name").and_then(Value::as_str);
    let input = block.get("input").cloned().unwrap_or(Value::Null);
    match (toolset, name) {
        (None, ASK_HUMAN) => {
            let question = ask_human_question(&input, &format!("{at}.input"))?;
            Ok((ToolCall { id, actions: vec![ModelAction::AskHuman { question }] }, None, false))
        }
        (Some(BROWSER_TOOLSET), _) if context.tool.is_browser() => {
            let empty = serde_json::Map::new();
            let fields = input.as_object().unwrap_or(&empty);
            let actions = browser::translate(name, fields, &format!("{at}.input"), context.display, pointer)
                .unwrap_or_else(|reason| vec![ModelAction::Refuse { reason }]);
            Ok((ToolCall { id, actions }, Some(BROWSER_TOOLSET), browser::shows(name)))
        }
        (Some(TOOLSET_NAME), _) if context.tool.is_toolset() && !context.tool.is_browser() => {
            let (actions, member) = member_call(name, &input, &format!("{at}.input"), context, pointer);
            Ok((ToolCall { id, actions }, Some(TOOLSET_NAME), member.is_some_and(Member::shows)))
        }
        (None, TOOL_NAME) if !context.tool.is_toolset() => {
            let input = input.as_object().ok_or_else(|| malformed(format!("{at}.input must be an object")))?;
            let action = input
                .get("action")
                .and_then(Value::as_str)
                .ok_or_else(|| malformed(format!("{at}.input.action must be a string")))?;
            let actions = actions::translate(action, input, &format!("{at}.input"), context.tool, context.display, pointer)?;
            Ok((ToolCall { id, actions }, None, false))
        }
        _ => Err(malformed(format!(
            "{at} calls {name:?}{}, a tool this client did not offer",
            toolset.map(|t| format!(" of toolset {t:?}")).unwrap_or_default()
        ))),
    }
}

/// A toolset member call's actions. A member that is disabled or unknown,
/// or an input that does not hold, is refused: the call fails and the
/// model is told why, as the toolset wants.
fn member_call(
    name: &str,
    input: &Value,
    at: &str,
    context: &ParseContext<'_>,
    pointer: &mut Pointer,
) -> (Vec<ModelAction>, Option<Member>) {
    let refuse = |reason: String| vec![ModelAction::Refuse { reason }];
    let Some(member) = Member::from_name(name) else {
        return (refuse(format!("{name:?} is not a member of the computer toolset")), None);
    };
    if context.disabled.contains(&member) {
        return (refuse(format!("{name} is disabled in this sandbox")), Some(member));
    }
    let empty = serde_json::Map::new();
    let fields = match input {
        Value::Object(fields) => fields,
        Value::Null => &empty,
        _ => return (refuse(format!("{at} must be an object")), Some(member)),
    };
    match actions::translate(name, fields, at, context.tool, context.display, pointer) {
        Ok(actions) => (actions, Some(member)),
        Err(error) => (refuse(error.to_string()), Some(member)),
    }
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

/// `usage`, counting cache writes and reads as input too; zero when absent.
fn parse_usage(answer: &Value) -> Usage {
    let count = |name: &str| answer.pointer(&format!("/usage/{name}")).and_then(Value::as_u64).unwrap_or(0);
    let cache_write_tokens = count("cache_creation_input_tokens");
    let cache_read_tokens = count("cache_read_input_tokens");
    Usage {
        input_tokens: count("input_tokens") + cache_write_tokens + cache_read_tokens,
        output_tokens: count("output_tokens"),
        cache_read_tokens,
        cache_write_tokens,
    }
}

fn string_field<'v>(block: &'v Value, name: &str, at: &str) -> Result<&'v str, ModelError> {
    block.get(name).and_then(Value::as_str).ok_or_else(|| malformed(format!("{at}.{name} must be a string")))
}

fn malformed(message: impl Into<String>) -> ModelError {
    ModelError::Malformed(message.into())
}
