//! The OpenAI Responses API computer-use client: one conversation per task
//! with `computer-use-preview` (the `computer_use_preview` tool) or a newer
//! model with the GA `computer` tool, whose calls may batch several actions.
//!
//! Turns chain by `previous_response_id`, so the API keeps the history and
//! each request carries only what is new: the first the prompt and the
//! screen as an `input_image`, each later one a `computer_call_output` per
//! call with the newest screenshot, plus the safety checks a human approved.
//! Older screenshots are never sent again. Transport, retries and key
//! handling are [`ModelHttp`]'s. Plain text requests (no tools) are
//! [`OpenAiText`]'s.

mod actions;
mod json;
mod response;
mod text;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use futures::future::BoxFuture;
use reqwest::header::HeaderMap;
use serde::Serialize;
use serde_json::{json, Value};

pub use actions::{key_name, DEFAULT_WAIT_MS, PIXELS_PER_WHEEL_CLICK};
pub use text::OpenAiText;

use super::http::{Endpoint, ModelHttp};
use super::{
    ask_human_schema, CallResult, ComputerModel, ModelAction, ModelError, SafetyCheck, Screen, Turn, ASK_HUMAN,
    ASK_HUMAN_DESCRIPTION,
};
use response::read_answer;

/// The function a browser conversation goes to a page with, beside the
/// computer tool (which has no navigation action).
pub const NAVIGATE: &str = "navigate";

/// Where answers are created, under the base URL (`…/v1`).
const RESPONSES_PATH: &str = "/responses";

/// Which generation of OpenAI's computer tool to offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenAiTool {
    /// `computer_use_preview`, with the display size and environment, for
    /// the `computer-use-preview` model; one action per call.
    Preview,
    /// The GA `computer` tool (no fields); a call may batch `actions`.
    Ga,
}

impl OpenAiTool {
    /// The model this tool is usually offered to.
    pub fn default_model(self) -> &'static str {
        match self {
            OpenAiTool::Preview => "computer-use-preview",
            OpenAiTool::Ga => "gpt-6-astra",
        }
    }
}

/// The kind of machine the preview tool tells the model it is driving.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Environment {
    Windows,
    Mac,
    #[default]
    Linux,
    Ubuntu,
    Browser,
}

/// What the API does when the conversation outgrows the context window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Truncation {
    /// Drop the oldest items; a long task keeps going.
    #[default]
    Auto,
    /// Fail the request with a 400.
    Disabled,
}

/// How much of its reasoning the model summarises in `reasoning` items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningSummary {
    Auto,
    /// The one `computer-use-preview` supports.
    Concise,
    Detailed,
}

/// The detail the first screenshot is looked at with. `Original` (GA
/// models) keeps the image's own size, so coordinates match it exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageDetail {
    Auto,
    Low,
    High,
    Original,
}

/// How to talk to OpenAI, the same for every task a worker runs.
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    pub endpoint: Endpoint,
    pub model: String,
    pub tool: OpenAiTool,
    /// Told to the model by the preview tool; the GA tool has no field for it.
    pub environment: Environment,
    pub truncation: Truncation,
    /// `None` sends no `reasoning` setting (the model's default: none).
    pub reasoning_summary: Option<ReasoningSummary>,
    pub image_detail: ImageDetail,
    /// Whether the conversation drives a browser tab: the preview tool says
    /// `environment: "browser"`, and a `navigate` function is offered.
    pub browser: bool,
}

impl OpenAiConfig {
    /// The usual settings for `tool`: its default model, a Linux desktop,
    /// automatic truncation, summaries the model supports, and the image
    /// detail that keeps coordinates exact.
    pub fn new(endpoint: Endpoint, tool: OpenAiTool) -> Self {
        let (reasoning_summary, image_detail) = match tool {
            OpenAiTool::Preview => (ReasoningSummary::Concise, ImageDetail::Auto),
            OpenAiTool::Ga => (ReasoningSummary::Auto, ImageDetail::Original),
        };
        Self {
            endpoint,
            model: tool.default_model().to_owned(),
            tool,
            environment: Environment::default(),
            truncation: Truncation::default(),
            reasoning_summary: Some(reasoning_summary),
            image_detail,
            browser: false,
        }
    }
}

/// One task's conversation with an OpenAI computer-use model.
#[derive(Debug)]
pub struct OpenAiCua {
    http: ModelHttp,
    headers: HeaderMap,
    config: OpenAiConfig,
    /// The screen size the model sees and answers in: `(width, height)`.
    display: (u32, u32),
    instructions: Option<String>,
    /// The answer the next turn continues; `None` before the first.
    previous_response_id: Option<String>,
    /// The last answer's pending safety checks, by the call they hold up.
    pending_checks: Vec<(String, SafetyCheck)>,
    /// The last answer's `ask_human` calls.
    function_calls: Vec<String>,
}

impl OpenAiCua {
    /// A conversation with the model of `config` about a screen of
    /// `display` (width, height) as the model sees it, with `instructions`
    /// sent as the system-level instructions of every turn.
    pub fn new(config: OpenAiConfig, display: (u32, u32), instructions: Option<String>) -> Result<Self, ModelError> {
        let http = ModelHttp::new(config.endpoint.clone())?;
        let headers = bearer_headers(&http)?;
        Ok(Self {
            http,
            headers,
            config,
            display,
            instructions,
            previous_response_id: None,
            pending_checks: Vec::new(),
            function_calls: Vec::new(),
        })
    }

    /// Sends `input` as the next turn and reads the answer.
    async fn exchange(&mut self, input: Value) -> Result<Turn, ModelError> {
        let body = self.request_body(input);
        let answer = read_answer(&self.http.post_json(RESPONSES_PATH, &self.headers, &body).await?)?;
        let browses = answer.turn.calls.iter().flat_map(|c| &c.actions).any(|a| matches!(a, ModelAction::Browse(_)));
        if browses && !self.config.browser {
            return Err(ModelError::Malformed(format!("the answer calls {NAVIGATE:?}, a function this client did not offer")));
        }
        tracing::debug!(response_id = %answer.id, calls = answer.turn.calls.len(), "model turn");
        self.previous_response_id = Some(answer.id);
        self.pending_checks = answer.checks_by_call;
        self.function_calls = answer.function_calls;
        Ok(answer.turn)
    }

    fn request_body(&self, input: Value) -> Value {
        let mut tools = vec![self.tool(), ask_human_function()];
        if self.config.browser {
            tools.push(navigate_function());
        }
        let mut body = json!({
            "model": self.config.model,
            "tools": tools,
            "input": input,
            "truncation": self.config.truncation,
        });
        if let Some(id) = &self.previous_response_id {
            body["previous_response_id"] = json!(id);
        }
        // Instructions are not carried over by `previous_response_id`.
        if let Some(instructions) = &self.instructions {
            body["instructions"] = json!(instructions);
        }
        if let Some(summary) = self.config.reasoning_summary {
            body["reasoning"] = json!({ "summary": summary });
        }
        body
    }

    fn tool(&self) -> Value {
        match self.config.tool {
            OpenAiTool::Preview => json!({
                "type": "computer_use_preview",
                "display_width": self.display.0,
                "display_height": self.display.1,
                "environment": if self.config.browser { Environment::Browser } else { self.config.environment },
            }),
            OpenAiTool::Ga => json!({ "type": "computer" }),
        }
    }

    /// The first turn's input: the prompt and the screen.
    fn first_input(&self, prompt: &str, screen: &Screen) -> Value {
        json!([{
            "role": "user",
            "content": [
                { "type": "input_text", "text": prompt },
                { "type": "input_image", "image_url": png_data_url(&screen.png), "detail": self.config.image_detail },
            ],
        }])
    }

    /// A later turn's input: a `computer_call_output` for each call, each
    /// with the newest screen (the API wants a screenshot for every call, and
    /// an older one would show a screen that is gone) at the GA tool's
    /// `original` detail, as the guide recommends, then any texts the
    /// results carry, such as what went wrong, as one user message.
    fn call_outputs(&self, results: &[CallResult], acknowledged: &[SafetyCheck]) -> Value {
        let Some(newest) = results.last() else {
            return json!([]);
        };
        let image_url = png_data_url(&newest.screen.png);
        let mut input: Vec<Value> = results
            .iter()
            .map(|result| {
                if self.function_calls.contains(&result.call_id) {
                    return json!({
                        "type": "function_call_output",
                        "call_id": result.call_id,
                        "output": result.text.clone().unwrap_or_default(),
                    });
                }
                let mut output = json!({ "type": "computer_screenshot", "image_url": image_url });
                if self.config.tool == OpenAiTool::Ga {
                    output["detail"] = json!(self.config.image_detail);
                }
                json!({
                    "type": "computer_call_output",
                    "call_id": result.call_id,
                    "output": output,
                    "acknowledged_safety_checks": self.acknowledged_for(&result.call_id, acknowledged),
                })
            })
            .collect();
        let computer_results: Vec<CallResult> =
            results.iter().filter(|r| !self.function_calls.contains(&r.call_id)).cloned().collect();
        if let Some(note) = result_notes(&computer_results) {
            input.push(json!({ "role": "user", "content": [{ "type": "input_text", "text": note }] }));
        }
        if self.config.browser && computer_results.is_empty() {
            // Only functions ran (a navigation): their outputs are text, so
            // the page they left goes along as an image of its own.
            let image = json!({ "type": "input_image", "image_url": image_url, "detail": self.config.image_detail });
            input.push(json!({ "role": "user", "content": [image] }));
        }
        Value::Array(input)
    }

    /// The approved checks that held up call `call_id`, as the API wants
    /// them back. A check the last answer did not raise is not sent.
    fn acknowledged_for(&self, call_id: &str, acknowledged: &[SafetyCheck]) -> Vec<Value> {
        self.pending_checks
            .iter()
            .filter(|(call, check)| call == call_id && acknowledged.iter().any(|a| a.id == check.id))
            .map(|(_, check)| json!({ "id": check.id, "code": check.code, "message": check.message }))
            .collect()
    }
}

impl ComputerModel for OpenAiCua {
    fn start<'a>(&'a mut self, prompt: &'a str, screen: &'a Screen) -> BoxFuture<'a, Result<Turn, ModelError>> {
        Box::pin(async move {
            self.previous_response_id = None;
            self.pending_checks.clear();
            let input = self.first_input(prompt, screen);
            self.exchange(input).await
        })
    }

    fn resume<'a>(
        &'a mut self,
        results: Vec<CallResult>,
        acknowledged: &'a [SafetyCheck],
    ) -> BoxFuture<'a, Result<Turn, ModelError>> {
        Box::pin(async move {
            if self.previous_response_id.is_none() {
                return Err(ModelError::Rejected { status: 0, message: "the conversation was resumed before it started".into() });
            }
            let input = self.call_outputs(&results, acknowledged);
            self.exchange(input).await
        })
    }

    /// The answer the next turn continues and which of its calls are
    /// `ask_human`'s: the API keeps the rest of the conversation.
    fn checkpoint(&self) -> Option<Value> {
        let id = self.previous_response_id.as_ref()?;
        let checks: Vec<Value> = self
            .pending_checks
            .iter()
            .map(|(call, c)| json!({ "call": call, "id": c.id, "code": c.code, "message": c.message }))
            .collect();
        let mut checkpoint = json!({ "previous_response_id": id, "function_calls": self.function_calls });
        if !checks.is_empty() {
            checkpoint["pending_checks"] = Value::Array(checks);
        }
        Some(checkpoint)
    }

    fn restore(&mut self, checkpoint: &Value) -> Result<(), ModelError> {
        let Some(id) = checkpoint["previous_response_id"].as_str() else {
            return Err(ModelError::Malformed("the checkpoint names no previous_response_id".into()));
        };
        self.previous_response_id = Some(id.to_owned());
        // The last answer's safety checks, for a task parked until a person
        // approved them: the approval goes back with their call.
        self.pending_checks = checkpoint["pending_checks"]
            .as_array()
            .map(|checks| {
                let text = |check: &Value, key: &str| check[key].as_str().unwrap_or_default().to_owned();
                checks
                    .iter()
                    .map(|c| {
                        (text(c, "call"), SafetyCheck { id: text(c, "id"), code: text(c, "code"), message: text(c, "message") })
                    })
                    .collect()
            })
            .unwrap_or_default();
        self.function_calls = checkpoint["function_calls"]
            .as_array()
            .map(|calls| calls.iter().filter_map(|c| c.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        Ok(())
    }
}

/// The headers of every request: the key as a bearer token.
fn bearer_headers(http: &ModelHttp) -> Result<HeaderMap, ModelError> {
    let (name, value) = http.key("authorization", "Bearer ")?;
    let mut headers = HeaderMap::new();
    headers.insert(name, value);
    Ok(headers)
}

/// The `navigate` function a browser conversation offers.
fn navigate_function() -> Value {
    json!({
        "type": "function",
        "name": NAVIGATE,
        "description": "Load a URL in the browser tab; the URL may also be back, forward or reload.",
        "parameters": {
            "type": "object",
            "properties": { "url": { "type": "string", "description": "the URL to open, or back, forward or reload" } },
            "required": ["url"],
        },
    })
}

/// The `ask_human` function, offered beside the computer tool.
fn ask_human_function() -> Value {
    json!({ "type": "function", "name": ASK_HUMAN, "description": ASK_HUMAN_DESCRIPTION, "parameters": ask_human_schema() })
}

fn png_data_url(png: &[u8]) -> String {
    format!("data:image/png;base64,{}", BASE64.encode(png))
}

/// The texts results carry, one line each, marked when they report an error.
fn result_notes(results: &[CallResult]) -> Option<String> {
    let lines: Vec<String> = results
        .iter()
        .filter_map(|result| {
            let text = result.text.as_deref()?;
            Some(if result.is_error { format!("Error: {text}") } else { text.to_owned() })
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use flotilla_config::Secret;

    use super::*;

    fn client(tool: OpenAiTool) -> OpenAiCua {
        let config = OpenAiConfig::new(Endpoint::new("http://127.0.0.1:1/v1", Secret::new("sk-test")), tool);
        OpenAiCua::new(config, (1024, 768), Some("Be careful.".into())).expect("client")
    }

    fn result(call_id: &str, png: &'static [u8], text: Option<&str>, is_error: bool) -> CallResult {
        let screen = Screen { png: Bytes::from_static(png), width: 1, height: 1 };
        CallResult { call_id: call_id.into(), screen, text: text.map(str::to_owned), is_error }
    }

    #[test]
    fn the_preview_tool_carries_the_display_and_environment() {
        let body = client(OpenAiTool::Preview).request_body(json!("hi"));
        assert_eq!(
            body["tools"][0],
            json!({"type": "computer_use_preview", "display_width": 1024, "display_height": 768, "environment": "linux"})
        );
        assert_eq!(body["model"], "computer-use-preview");
        assert_eq!(body["truncation"], "auto");
        assert_eq!(body["reasoning"], json!({"summary": "concise"}));
        assert_eq!(body["instructions"], "Be careful.");
        assert!(body.get("previous_response_id").is_none());
    }

    #[test]
    fn the_ga_tool_has_no_fields() {
        let cua = client(OpenAiTool::Ga);
        assert_eq!(cua.request_body(json!([]))["tools"][0], json!({"type": "computer"}));
        let screen = Screen { png: Bytes::from_static(b"png"), width: 1, height: 1 };
        assert_eq!(cua.first_input("go", &screen)[0]["content"][1]["detail"], "original");
    }

    #[test]
    fn every_call_output_shows_the_newest_screen_and_notes_follow() {
        let cua = client(OpenAiTool::Ga);
        let input = cua.call_outputs(&[result("a", b"old", None, false), result("b", b"new", Some("no such window"), true)], &[]);
        let newest = png_data_url(b"new");
        assert_eq!(input[0]["output"]["image_url"], newest);
        assert_eq!(input[1]["output"]["image_url"], newest);
        assert_eq!(input[1]["call_id"], "b");
        assert_eq!(input[1]["output"]["detail"], "original", "the guide's detail for computer use");
        assert_eq!(input[2]["content"][0]["text"], "Error: no such window");
        assert!(!input.to_string().contains(&BASE64.encode(b"old")));
    }

    #[test]
    fn acknowledged_checks_go_back_with_their_call() {
        let mut cua = client(OpenAiTool::Preview);
        let check = SafetyCheck { id: "sc_1".into(), code: "irrelevant_domain".into(), message: "Check the domain.".into() };
        let stranger = SafetyCheck { id: "sc_9".into(), code: String::new(), message: String::new() };
        cua.pending_checks = vec![("call_1".into(), check.clone())];
        let input = cua.call_outputs(&[result("call_1", b"x", None, false)], &[check, stranger]);
        assert_eq!(
            input[0]["acknowledged_safety_checks"],
            json!([{"id": "sc_1", "code": "irrelevant_domain", "message": "Check the domain."}])
        );
    }

    #[test]
    fn a_checkpoint_carries_the_conversation_to_another_client_without_screens() {
        let mut first = client(OpenAiTool::Ga);
        assert_eq!(first.checkpoint(), None, "nothing to carry before the first turn");
        first.previous_response_id = Some("resp_7".into());
        first.function_calls = vec!["ask_1".into()];
        let checkpoint = first.checkpoint().expect("a checkpoint");
        assert_eq!(checkpoint, json!({"previous_response_id": "resp_7", "function_calls": ["ask_1"]}));

        let mut second = client(OpenAiTool::Ga);
        second.restore(&checkpoint).expect("restores");
        assert_eq!(second.request_body(json!([]))["previous_response_id"], "resp_7");
        let input = second.call_outputs(&[result("ask_1", b"png", Some("yes"), false)], &[]);
        assert_eq!(input[0]["type"], "function_call_output", "the ask_human call is answered as a function");
        assert!(second.restore(&json!({})).is_err(), "a checkpoint without a response id is refused");
    }

    #[test]
    fn a_checkpoint_carries_the_last_answers_safety_checks_so_an_approval_goes_back_with_its_call() {
        let mut first = client(OpenAiTool::Ga);
        first.previous_response_id = Some("resp_2".into());
        let check = SafetyCheck { id: "sc_1".into(), code: "malicious_instructions".into(), message: "Submit?".into() };
        first.pending_checks = vec![("c2".into(), check.clone())];
        let checkpoint = first.checkpoint().expect("a checkpoint");

        let mut second = client(OpenAiTool::Ga);
        second.restore(&checkpoint).expect("restores");
        let input = second.call_outputs(&[result("c2", b"png", None, false)], &[check]);
        assert_eq!(
            input[0]["acknowledged_safety_checks"],
            json!([{"id": "sc_1", "code": "malicious_instructions", "message": "Submit?"}])
        );
    }
}
