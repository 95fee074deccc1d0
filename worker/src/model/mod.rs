//! Computer-use model clients: one conversation per task with a model that
//! looks at a screen and answers with actions. Each provider's wire protocol
//! lives in its own module; the step loop (`pipeline::steps`) drives any of
//! them through the [`ComputerModel`] trait, so observing, acting, events,
//! limits and screenshots are written once.
//!
//! A model sees the screen scaled to fit its target size and answers in
//! those coordinates (or, for Gemini, on a normalized grid); the step loop
//! maps them back to the sandbox's. Each client decides what its history
//! keeps of older screenshots (see each module).
//!
//! Besides conversations about a screen, each provider answers one plain
//! text request without tools through [`TextModel`]: what the planner asks.

pub mod anthropic;
pub mod browser;
pub mod gemini;
pub mod history;
pub mod http;
pub mod openai;

use std::time::Duration;

use bytes::Bytes;
use flotilla_types::action::Action;
use flotilla_types::cost::TokenCounts;
use futures::future::BoxFuture;

/// The screen as the model sees it: a PNG already scaled to `width` ×
/// `height`, the size the model's coordinates refer to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Screen {
    pub png: Bytes,
    pub width: u32,
    pub height: u32,
}

/// Tokens one model call used, as its provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Every input token, those read from or written to the prompt cache
    /// included.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to the prompt cache.
    pub cache_write_tokens: u64,
}

impl Usage {
    /// The counts as the price table takes them.
    pub fn counts(&self) -> TokenCounts {
        TokenCounts {
            input: self.input_tokens,
            output: self.output_tokens,
            cache_read: self.cache_read_tokens,
            cache_write: self.cache_write_tokens,
        }
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Self) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }
}

/// A check the model provider wants a human to acknowledge before the
/// actions of a turn are performed (OpenAI's `pending_safety_checks`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SafetyCheck {
    pub id: String,
    pub code: String,
    pub message: String,
}

/// One step the model asked for, in model (scaled) coordinates.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelAction {
    /// An action on the screen.
    Act(Action),
    /// Show the model this region (`[x1, y1, x2, y2]`) of the screen at
    /// full detail (Anthropic's `zoom`).
    Zoom { region: [u32; 4] },
    /// Tell the model where the pointer is (Anthropic's `cursor_position`).
    CursorPosition,
    /// Ask the person behind the task (the `ask_human` tool both clients
    /// offer beside the computer tool); their answer goes back as the
    /// call's text.
    AskHuman { question: String },
    /// Nothing to carry out: the call cannot be done as asked (a member
    /// tool that is disabled, a parameter out of range). The call fails
    /// with `reason`, which goes back to the model.
    Refuse { reason: String },
    /// A browser call (the `browser` pipeline's): going to a page, reading
    /// it, filling or clicking an element by reference; its answer goes
    /// back as the call's text.
    Browse(browser::BrowserCall),
}

/// The answer for a call that was not run because an earlier one of the
/// same turn failed, in the words of Anthropic's batch protocol.
pub const NOT_EXECUTED: &str = "Not executed: an earlier computer action in this turn failed.";

/// The client switched the computer tool it offers a model, because the
/// endpoint said the model does not take the one it sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolChange {
    pub model: String,
    pub from: &'static str,
    pub to: &'static str,
    /// The endpoint's message.
    pub reason: String,
}

/// The name of the tool through which a model asks the person behind the
/// task for something only they can give.
pub const ASK_HUMAN: &str = "ask_human";

/// What the `ask_human` tool is for, as the models are told.
pub const ASK_HUMAN_DESCRIPTION: &str = "Ask the person who gave you this task a question, when you cannot go on \
     without their answer: missing information, a decision only they can make, or something they must do \
     themselves such as a login or a CAPTCHA. Their answer comes back as the result.";

/// The JSON schema of the `ask_human` tool's input.
pub fn ask_human_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "properties": { "question": { "type": "string", "description": "what to ask, in one or two sentences" } },
        "required": ["question"]
    })
}

/// The question of an `ask_human` call's input, or what is wrong with it.
pub fn ask_human_question(input: &serde_json::Value, at: &str) -> Result<String, ModelError> {
    match input.get("question").and_then(serde_json::Value::as_str).map(str::trim) {
        Some(question) if !question.is_empty() => Ok(question.to_owned()),
        _ => Err(ModelError::Malformed(format!("{at}.question must be a non-empty string"))),
    }
}

/// One tool call of a turn: the id the model gave it and what it asks.
/// OpenAI's GA tool may batch several actions in one call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub actions: Vec<ModelAction>,
}

/// What the model answered in one turn.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Turn {
    /// Reasoning summaries or thinking text, in order.
    pub reasoning: Vec<String>,
    /// Assistant text (the final answer when `calls` is empty).
    pub text: Option<String>,
    /// Tool calls to carry out, in order. Empty: the model is done.
    pub calls: Vec<ToolCall>,
    /// Checks to acknowledge before carrying out `calls`.
    pub safety_checks: Vec<SafetyCheck>,
    pub usage: Usage,
    /// Tool switches made while getting this turn.
    pub tool_changes: Vec<ToolChange>,
}

/// What carrying out one tool call gave, for the next turn.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    /// The `ToolCall::id` this answers.
    pub call_id: String,
    /// The screen after the call (for `Zoom`, the zoomed region).
    pub screen: Screen,
    /// Text to return beside the screen (the pointer position, or what went
    /// wrong when `is_error`).
    pub text: Option<String>,
    pub is_error: bool,
}

/// Why a model call failed, after the client's own retries.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The key was refused (401/403): no retry can help.
    #[error("the model API refused the credentials ({status}): {message}")]
    Unauthorized { status: u16, message: String },
    /// Still rate limited after waiting as told.
    #[error("the model API is rate limiting (retry after {retry_after:?})")]
    RateLimited { retry_after: Option<Duration> },
    /// 5xx, timeouts or connection failures, after retrying with backoff.
    #[error("the model API is unavailable: {0}")]
    Unavailable(String),
    /// Another 4xx: the request itself was refused.
    #[error("the model API refused the request ({status}): {message}")]
    Rejected { status: u16, message: String },
    /// The answer did not parse; says what was wrong.
    #[error("the model's answer is malformed: {0}")]
    Malformed(String),
}

impl ModelError {
    /// A short name of the failure, for metric labels.
    pub fn kind(&self) -> &'static str {
        match self {
            ModelError::Unauthorized { .. } => "unauthorized",
            ModelError::RateLimited { .. } => "rate_limited",
            ModelError::Unavailable(_) => "unavailable",
            ModelError::Rejected { .. } => "rejected",
            ModelError::Malformed(_) => "malformed",
        }
    }
}

/// A conversation with a computer-use model about one task.
pub trait ComputerModel: Send {
    /// The first turn: the task's prompt and the screen as it is now.
    fn start<'a>(&'a mut self, prompt: &'a str, screen: &'a Screen) -> BoxFuture<'a, Result<Turn, ModelError>>;

    /// The next turn: what the previous turn's calls gave, and the safety
    /// checks a human acknowledged for them (empty when there were none).
    fn resume<'a>(
        &'a mut self,
        results: Vec<CallResult>,
        acknowledged: &'a [SafetyCheck],
    ) -> BoxFuture<'a, Result<Turn, ModelError>>;

    /// What a later attempt needs to continue this conversation after its
    /// last turn (a task's step journal keeps it); `None` before the first
    /// turn or when this provider's conversation cannot be carried over.
    /// A provider that keeps the conversation (OpenAI) names it; one whose
    /// API keeps nothing (Anthropic, Gemini) puts its whole history under
    /// `history`: the opening user message first, then pairs of a model
    /// answer and the user message answering its calls, the newest answer
    /// last — so whole pairs after the first message can be left out to
    /// bound its size. Screenshots in it are base64 PNG image blocks
    /// (`media_type` or `mimeType` `image/png` beside `data`), which the
    /// journal swaps for blob-store hashes.
    fn checkpoint(&self) -> Option<serde_json::Value> {
        None
    }

    /// Takes up the conversation a [`ComputerModel::checkpoint`] described,
    /// so that the next call is [`ComputerModel::resume`] with the results
    /// of the last turn's calls.
    fn restore(&mut self, checkpoint: &serde_json::Value) -> Result<(), ModelError> {
        let _ = checkpoint;
        Err(ModelError::Malformed("this model's conversations cannot be carried over to another attempt".into()))
    }

    /// The page a browser shows now, told before [`start`](Self::start) and
    /// each [`resume`](Self::resume) of a `browser` task, for the clients
    /// whose results carry it (the toolset's `browser_state`, Gemini's
    /// `url`, OpenAI's `current_url`). Desktop conversations never hear it.
    fn page_shown(&mut self, page: &browser::PageState) {
        let _ = page;
    }
}

/// A model's plain text answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub text: String,
    pub usage: Usage,
}

/// One-shot text requests to a model: no tools, no screen, no history.
pub trait TextModel: Send + Sync {
    /// Asks `prompt` under the system-level `instructions` and returns the
    /// answer's text.
    fn complete<'a>(&'a self, instructions: &'a str, prompt: &'a str) -> BoxFuture<'a, Result<Completion, ModelError>>;
}
