//! Gemini computer use over the Gemini API's `generateContent`: one
//! conversation per task, driven through [`ComputerModel`].
//!
//! Each request carries the whole conversation to
//! `POST {base}/v1beta/models/{model}:generateContent` (key in
//! `x-goog-api-key`) with the `computerUse` tool in the desktop environment
//! and an `ask_human` function beside it. The model answers with function
//! calls of its predefined functions ([`actions`]), on a 1000×1000 grid of
//! normalized points that the step loop maps onto the sandbox's screen.
//!
//! - every model content goes back exactly as received (thought parts and
//!   their signatures included); each call of a turn is answered by its own
//!   `functionResponse`, in order, with the screen after it as an inline
//!   PNG part (an error as `{"error": …}`); the newest turns keep their
//!   screenshots as the config's [`ImageHistory`] says: Google's reference
//!   client keeps [`KEPT_SCREENSHOT_TURNS`], dropping one each turn, while
//!   dropping them a chunk at a time keeps the prefix the implicit cache
//!   reads the same for several turns.
//! - a call whose `safety_decision` is `require_confirmation` raises a
//!   [`SafetyCheck`]; once acknowledged its response says
//!   `safety_acknowledgement`.
//! - thought parts and each call's `intent` are reasoning; the text parts
//!   of a turn without calls are the final answer.
//! - usage: prompt tokens in, candidate and thought tokens out.
//!
//! A turn that failed leaves the conversation at an end: start a new one.
//! The conversation carries over to another attempt whole ([`checkpoint`]).
//! Plain text requests (no tools) are [`GeminiText`]'s.

pub mod actions;
mod checkpoint;
mod text;

use base64::prelude::{Engine as _, BASE64_STANDARD};
use futures::future::BoxFuture;
use reqwest::header::HeaderMap;
use serde_json::{json, Map, Value};

use super::browser::PageState;
use super::history::ImageHistory;
use super::http::{Endpoint, ModelHttp};
use super::{
    ask_human_question, ask_human_schema, CallResult, ComputerModel, ModelAction, ModelError, SafetyCheck, Screen, ToolCall,
    Turn, Usage, ASK_HUMAN, ASK_HUMAN_DESCRIPTION,
};
pub use actions::GRID;
pub use text::GeminiText;

/// How many of the newest user turns keep their screenshots.
pub const KEPT_SCREENSHOT_TURNS: usize = 3;
/// The safety decision that asks a human first.
const REQUIRE_CONFIRMATION: &str = "require_confirmation";

/// How to reach Gemini and which model to use.
#[derive(Debug, Clone)]
pub struct GeminiConfig {
    /// Base URL like `https://generativelanguage.googleapis.com` (no version).
    pub endpoint: Endpoint,
    pub model: String,
    /// Which user turns keep their screenshots.
    pub history: ImageHistory,
    /// Whether the conversation drives a browser tab
    /// (`ENVIRONMENT_BROWSER`, whose replies carry the page's `url`).
    pub browser: bool,
}

impl GeminiConfig {
    /// The newest [`KEPT_SCREENSHOT_TURNS`] turns keep their screenshots,
    /// one dropped a turn.
    pub fn new(endpoint: Endpoint, model: impl Into<String>) -> Self {
        Self { endpoint, model: model.into(), history: ImageHistory::new(KEPT_SCREENSHOT_TURNS, 1), browser: false }
    }
}

/// A call of the last answer that the next request must answer.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Pending {
    id: Option<String>,
    /// The key results are matched by: the call's id, or a made-up one.
    key: String,
    name: String,
    /// Whether the model asked for confirmation before this call.
    confirm: bool,
}

/// One task's conversation with a Gemini computer-use model.
pub struct GeminiComputerUse {
    http: ModelHttp,
    headers: HeaderMap,
    config: GeminiConfig,
    system: Option<String>,
    contents: Vec<Value>,
    pending: Vec<Pending>,
    /// Answers so far, to make up call ids that the model left out.
    turns: usize,
    /// The page a browser shows, for the replies' `url`.
    page: Option<PageState>,
}

impl GeminiComputerUse {
    pub fn new(config: GeminiConfig, system: Option<String>) -> Result<Self, ModelError> {
        let http = ModelHttp::new(config.endpoint.clone())?;
        let headers = key_headers(&http)?;
        Ok(Self { http, headers, config, system, contents: Vec::new(), pending: Vec::new(), turns: 0, page: None })
    }

    fn request_body(&self) -> Value {
        let mut body = json!({
            "contents": self.contents,
            "tools": [
                {"computerUse": {"environment": if self.config.browser { "ENVIRONMENT_BROWSER" } else { "ENVIRONMENT_DESKTOP" }}},
                {"functionDeclarations": [{
                    "name": ASK_HUMAN, "description": ASK_HUMAN_DESCRIPTION, "parameters": ask_human_schema(),
                }]},
            ],
            "generationConfig": {"thinkingConfig": {"includeThoughts": true}},
        });
        if let Some(system) = &self.system {
            body["systemInstruction"] = json!({"parts": [{"text": system}]});
        }
        body
    }

    fn path(&self) -> String {
        generate_path(&self.config.model)
    }

    async fn exchange(&mut self) -> Result<Turn, ModelError> {
        let answer = self.http.post_json(&self.path(), &self.headers, &self.request_body()).await?;
        let content = model_content(&answer)?;
        self.turns += 1;
        let parsed = parse_content(&content, &answer, self.turns, self.config.browser)?;
        self.pending = parsed.pending;
        self.contents.push(content);
        Ok(parsed.turn)
    }

    /// Adds a user content, keeping screenshots only in the newest turns.
    fn push_user(&mut self, parts: Vec<Value>) {
        self.contents.push(json!({"role": "user", "parts": parts}));
        let showing: Vec<usize> =
            self.contents.iter().enumerate().filter(|(_, c)| c["role"] == "user" && shows_screen(c)).map(|(i, _)| i).collect();
        let drop = self.config.history.to_drop(showing.len());
        for &index in &showing[..drop] {
            forget_screenshots(&mut self.contents[index]);
        }
    }

    /// One `functionResponse` per pending call, in order.
    fn responses(&mut self, results: &[CallResult], acknowledged: &[SafetyCheck]) -> Vec<Value> {
        std::mem::take(&mut self.pending)
            .into_iter()
            .map(|call| {
                let result = results.iter().find(|r| r.call_id == call.key);
                let mut response = Map::new();
                let mut parts = Vec::new();
                match result {
                    Some(result) if result.is_error => {
                        response.insert("error".into(), json!(result.text.clone().unwrap_or_default()));
                        parts.push(inline_png(&result.screen));
                    }
                    Some(result) if call.name == ASK_HUMAN => {
                        response.insert("answer".into(), json!(result.text.clone().unwrap_or_default()));
                    }
                    Some(result) => {
                        if let Some(text) = &result.text {
                            response.insert("output".into(), json!(text));
                        }
                        parts.push(inline_png(&result.screen));
                    }
                    None => {
                        response.insert("error".into(), json!("this action was not carried out"));
                    }
                }
                if let (Some(page), false) = (&self.page, call.name == ASK_HUMAN) {
                    response.insert("url".into(), json!(page.url));
                }
                if call.confirm && acknowledged.iter().any(|check| check.id == call.key) {
                    response.insert("safety_acknowledgement".into(), json!("true"));
                }
                let mut function_response = json!({"name": call.name, "response": response});
                if let Some(id) = &call.id {
                    function_response["id"] = json!(id);
                }
                if !parts.is_empty() {
                    function_response["parts"] = json!(parts);
                }
                json!({"functionResponse": function_response})
            })
            .collect()
    }
}

impl ComputerModel for GeminiComputerUse {
    fn start<'a>(&'a mut self, prompt: &'a str, screen: &'a Screen) -> BoxFuture<'a, Result<Turn, ModelError>> {
        Box::pin(async move {
            self.contents.clear();
            self.pending.clear();
            self.push_user(vec![json!({"text": prompt}), inline_png(screen)]);
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

    fn resume<'a>(
        &'a mut self,
        results: Vec<CallResult>,
        acknowledged: &'a [SafetyCheck],
    ) -> BoxFuture<'a, Result<Turn, ModelError>> {
        Box::pin(async move {
            if self.pending.is_empty() {
                return Err(ModelError::Rejected { status: 0, message: "no function call of the model awaits a result".into() });
            }
            let parts = self.responses(&results, acknowledged);
            self.push_user(parts);
            self.exchange().await
        })
    }
}

/// The path of `generateContent` for `model`.
fn generate_path(model: &str) -> String {
    format!("/v1beta/models/{model}:generateContent")
}

/// `x-goog-api-key`: what every request carries.
fn key_headers(http: &ModelHttp) -> Result<HeaderMap, ModelError> {
    let mut headers = HeaderMap::new();
    let (name, value) = http.key("x-goog-api-key", "")?;
    headers.insert(name, value);
    Ok(headers)
}

fn inline_png(screen: &Screen) -> Value {
    json!({"inlineData": {"mimeType": "image/png", "data": BASE64_STANDARD.encode(&screen.png)}})
}

/// Whether a user content still holds a screenshot.
fn shows_screen(content: &Value) -> bool {
    content["parts"].as_array().is_some_and(|parts| {
        parts.iter().any(|part| part.get("inlineData").is_some() || part.pointer("/functionResponse/parts").is_some())
    })
}

/// Drops the screenshot parts of a user content's function responses and
/// images, leaving their text.
fn forget_screenshots(content: &mut Value) {
    let Some(parts) = content.get_mut("parts").and_then(Value::as_array_mut) else {
        return;
    };
    parts.retain(|part| part.get("inlineData").is_none());
    for part in parts {
        if let Some(response) = part.get_mut("functionResponse").and_then(Value::as_object_mut) {
            response.remove("parts");
        }
    }
}

/// The first candidate's content, after the checks that end a turn.
fn model_content(answer: &Value) -> Result<Value, ModelError> {
    if let Some(reason) = answer.pointer("/promptFeedback/blockReason").and_then(Value::as_str) {
        return Err(malformed(format!("the prompt was blocked ({reason})")));
    }
    let candidate = answer.pointer("/candidates/0").ok_or_else(|| malformed("candidates must hold a candidate"))?;
    let finish = candidate.get("finishReason").and_then(Value::as_str).unwrap_or("STOP");
    match finish {
        "STOP" | "FINISH_REASON_UNSPECIFIED" => {}
        "MALFORMED_FUNCTION_CALL" => {
            return Err(malformed("finishReason is MALFORMED_FUNCTION_CALL: the model wrote a bad call"))
        }
        "MAX_TOKENS" => return Err(malformed("finishReason is MAX_TOKENS: the answer was cut off")),
        other => return Err(malformed(format!("finishReason {other}: the model stopped without an answer to carry on from"))),
    }
    let mut content = candidate.get("content").cloned().ok_or_else(|| malformed("candidates[0].content is missing"))?;
    if content.get("parts").and_then(Value::as_array).is_none() {
        return Err(malformed("candidates[0].content.parts must be an array"));
    }
    content["role"] = json!("model");
    Ok(content)
}

struct Parsed {
    turn: Turn,
    pending: Vec<Pending>,
}

/// The parts of a model content as a [`Turn`].
fn parse_content(content: &Value, answer: &Value, turn_number: usize, browser: bool) -> Result<Parsed, ModelError> {
    let mut turn = Turn { usage: parse_usage(answer), ..Turn::default() };
    let mut pending = Vec::new();
    let mut texts = Vec::new();
    let parts = content["parts"].as_array().map(Vec::as_slice).unwrap_or_default();
    for (index, part) in parts.iter().enumerate() {
        let at = format!("candidates[0].content.parts[{index}]");
        if let Some(call) = part.get("functionCall") {
            let key_fallback = format!("gemini-{turn_number}-{index}");
            let (call, waiting) = parse_call(call, &at, key_fallback, browser)?;
            if let Some(check) = waiting.check {
                turn.safety_checks.push(check);
            }
            if let Some(intent) = waiting.intent {
                turn.reasoning.push(intent);
            }
            pending.push(waiting.pending);
            turn.calls.push(call);
        } else if let Some(text) = part.get("text").and_then(Value::as_str) {
            if part.get("thought").and_then(Value::as_bool) == Some(true) {
                turn.reasoning.push(text.to_owned());
            } else {
                texts.push(text.to_owned());
            }
        }
    }
    if turn.calls.is_empty() {
        turn.text = (!texts.is_empty()).then(|| texts.join("\n"));
    } else {
        turn.reasoning.extend(texts);
    }
    Ok(Parsed { turn, pending })
}

/// What a call leaves besides itself.
struct CallState {
    pending: Pending,
    check: Option<SafetyCheck>,
    intent: Option<String>,
}

fn parse_call(call: &Value, at: &str, key_fallback: String, browser: bool) -> Result<(ToolCall, CallState), ModelError> {
    let name =
        call.get("name").and_then(Value::as_str).ok_or_else(|| malformed(format!("{at}.functionCall.name must be a string")))?;
    let id = call.get("id").and_then(Value::as_str).map(str::to_owned);
    let key = id.clone().unwrap_or(key_fallback);
    let empty = Map::new();
    let args = match call.get("args") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(args)) => args,
        Some(_) => return Err(malformed(format!("{at}.functionCall.args must be an object"))),
    };
    let actions = if name == ASK_HUMAN {
        vec![ModelAction::AskHuman {
            question: ask_human_question(&Value::Object(args.clone()), &format!("{at}.functionCall.args"))?,
        }]
    } else {
        actions::model_actions(name, args, browser)
    };
    let decision = args.get("safety_decision");
    let confirm = decision.and_then(|d| d.get("decision")).and_then(Value::as_str) == Some(REQUIRE_CONFIRMATION);
    let check = confirm.then(|| SafetyCheck {
        id: key.clone(),
        code: REQUIRE_CONFIRMATION.to_owned(),
        message: decision
            .and_then(|d| d.get("explanation"))
            .and_then(Value::as_str)
            .map_or_else(|| format!("the model wants confirmation before {name}"), str::to_owned),
    });
    let intent = args.get("intent").and_then(Value::as_str).map(str::to_owned);
    let pending = Pending { id, key: key.clone(), name: name.to_owned(), confirm };
    Ok((ToolCall { id: key, actions }, CallState { pending, check, intent }))
}

/// `usageMetadata`: prompt tokens in (of them `cachedContentTokenCount`
/// read from the implicit cache; writing it costs nothing extra),
/// candidate and thought tokens out.
fn parse_usage(answer: &Value) -> Usage {
    let count = |name: &str| answer.pointer(&format!("/usageMetadata/{name}")).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input_tokens: count("promptTokenCount"),
        output_tokens: count("candidatesTokenCount") + count("thoughtsTokenCount"),
        cache_read_tokens: count("cachedContentTokenCount"),
        cache_write_tokens: 0,
    }
}

fn malformed(message: impl Into<String>) -> ModelError {
    ModelError::Malformed(message.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confirmation_raises_a_check_and_intents_are_reasoning() {
        let content = json!({"role": "model", "parts": [
            {"text": "Looking at the screen", "thought": true},
            {"functionCall": {"name": "click", "args": {"x": 500, "y": 500, "intent": "press Buy",
                "safety_decision": {"decision": "require_confirmation", "explanation": "This buys something."}}}},
        ]});
        let answer = json!({"usageMetadata": {"promptTokenCount": 10, "cachedContentTokenCount": 4, "candidatesTokenCount": 3, "thoughtsTokenCount": 2}});
        let parsed = parse_content(&content, &answer, 1, false).expect("parsed");
        assert_eq!(parsed.turn.reasoning, ["Looking at the screen", "press Buy"]);
        assert_eq!(parsed.turn.safety_checks[0].message, "This buys something.");
        assert_eq!(parsed.turn.safety_checks[0].id, "gemini-1-1");
        assert_eq!(parsed.turn.calls[0].id, "gemini-1-1");
        assert_eq!(parsed.turn.usage, Usage { input_tokens: 10, output_tokens: 5, cache_read_tokens: 4, cache_write_tokens: 0 });
    }

    #[test]
    fn old_screenshots_are_dropped_from_all_but_the_newest_turns() {
        let mut content = json!({"role": "user", "parts": [
            {"functionResponse": {"name": "click", "response": {}, "parts": [{"inlineData": {"data": "x"}}]}},
            {"inlineData": {"data": "y"}},
        ]});
        forget_screenshots(&mut content);
        assert_eq!(content, json!({"role": "user", "parts": [{"functionResponse": {"name": "click", "response": {}}}]}));
    }
}
