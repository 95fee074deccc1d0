//! The task model: the spec a user submits, its validation, and the state a
//! task moves through. The spec is stored as given (after validation) so a
//! task always shows what was asked of it.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::action::Action;
use crate::clock;
use crate::error::ValidationError;
use crate::eval::{TaskCheck, TaskSetup};
use crate::ids::TaskId;
use crate::json_read;

pub const MAX_PROMPT_CHARS: usize = 20_000;
pub const MAX_METADATA_BYTES: usize = 16 * 1024;
pub const MAX_ACTIONS: usize = 10_000;
pub const MAX_STEPS: u32 = 10_000;
pub const MAX_DURATION_S: u64 = 24 * 3600;
pub const MAX_ATTEMPTS: u32 = 20;
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
const MAX_IDEMPOTENCY_KEY: usize = 255;

/// Which agent pipeline runs a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum Pipeline {
    OpenaiCua,
    ClaudeComputerUse,
    GeminiComputerUse,
    ClaudeCode,
    Scripted,
    /// Chromium in the sandbox driven over DevTools, with the browser tools
    /// of the provider the task's `model` names.
    Browser,
}

impl Pipeline {
    /// Every pipeline.
    pub const ALL: [Pipeline; 6] = [
        Pipeline::OpenaiCua,
        Pipeline::ClaudeComputerUse,
        Pipeline::GeminiComputerUse,
        Pipeline::ClaudeCode,
        Pipeline::Scripted,
        Pipeline::Browser,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Pipeline::OpenaiCua => "openai-cua",
            Pipeline::ClaudeComputerUse => "claude-computer-use",
            Pipeline::GeminiComputerUse => "gemini-computer-use",
            Pipeline::ClaudeCode => "claude-code",
            Pipeline::Scripted => "scripted",
            Pipeline::Browser => "browser",
        }
    }
}

impl FromStr for Pipeline {
    type Err = ValidationError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        serde_json::from_value(serde_json::Value::String(s.to_owned()))
            .map_err(|_| ValidationError::at("pipeline", format!("unknown pipeline {s:?}")))
    }
}

/// Which lane a task waits in: workers read high before normal before low.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Priority {
    High,
    #[default]
    Normal,
    Low,
}

impl Priority {
    /// Lanes in the order workers read them.
    pub const ALL: [Priority; 3] = [Priority::High, Priority::Normal, Priority::Low];

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::High => "high",
            Priority::Normal => "normal",
            Priority::Low => "low",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == text)
    }

    /// The lane's place in [`Priority::ALL`], counted from 1 as the lane
    /// scripts count their `KEYS`.
    pub fn lane_number(self) -> usize {
        Self::ALL.iter().position(|p| *p == self).map_or(0, |i| i + 1)
    }

    /// The lane at this place in [`Priority::ALL`], counted from 1.
    pub fn from_lane_number(number: &str) -> Option<Self> {
        let i = number.parse::<usize>().ok()?.checked_sub(1)?;
        Self::ALL.get(i).copied()
    }
}

/// What to do when an agent wants to take a sensitive action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SensitiveActions {
    #[default]
    Pause,
    Deny,
    Allow,
}

/// What a new attempt does when the previous one ended mid-step (its
/// worker was killed, restarted or redeployed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum OnInterrupt {
    /// Reconnect to the same sandbox and continue from the last recorded
    /// step; an action that was in flight is not run again, the model is
    /// told it may or may not have happened (a script goes on with the
    /// action after it, and runs again only a `wait` or `screenshot`).
    #[default]
    Resume,
    /// As `resume`, but a person decides first whether to go on when an
    /// action was in flight or the sandbox is gone.
    Ask,
    /// Start over in a new sandbox.
    Restart,
}

/// A human's answer to a task that is `waiting`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct HumanInput {
    pub decision: Decision,
    /// Free text for the task: a clarification, or why it was denied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 4000))]
    pub message: Option<String>,
}

/// What the human decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Approve,
    Deny,
}

/// The longest message a human may send with a decision.
pub const MAX_INPUT_MESSAGE_CHARS: usize = 4_000;

impl HumanInput {
    pub fn validate(&self) -> Result<(), ValidationError> {
        match &self.message {
            Some(text) if text.chars().count() > MAX_INPUT_MESSAGE_CHARS => {
                Err(ValidationError::at("message", format!("message must be at most {MAX_INPUT_MESSAGE_CHARS} characters")))
            }
            _ => Ok(()),
        }
    }
}

/// Where a task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SandboxProviderKind {
    Local,
    E2b,
}

impl SandboxProviderKind {
    /// The name tasks spell it with (`sandbox.provider`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::E2b => "e2b",
        }
    }
}

/// The sandbox a task asks for.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SandboxSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<SandboxProviderKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<[u32; 2]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_alive: Option<bool>,
    /// A saved browser profile of the task's tenant: loaded into the
    /// browser before the agent starts (a new one when the tenant has none
    /// by this name) and saved back when the task succeeds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "openapi",
        schema(min_length = 1, max_length = 64, pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}(?![\s\S])", example = "work")
    )]
    pub profile: Option<String>,
}

/// The longest saved browser profile name.
pub const MAX_PROFILE_NAME: usize = 64;

/// Checks a saved browser profile's name: 1 to 64 ASCII letters, digits,
/// `.`, `_` or `-`, not starting with `.` (it is part of a store key).
pub fn validate_profile_name(name: &str) -> Result<(), ValidationError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_PROFILE_NAME
        && !name.starts_with('.')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(ValidationError::at(
            "profile",
            format!("profile must be 1 to {MAX_PROFILE_NAME} letters, digits, '.', '_' or '-', not starting with '.'"),
        ))
    }
}

/// How often a task may be attempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RetryPolicy {
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 20))]
    pub max_attempts: u32,
}

/// What a task may spend before it ends `failed` with code `budget`, after
/// the step that crossed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Model tokens, input and output together, over every attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Seconds of holding a sandbox, over every attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sandbox_s: Option<u64>,
    /// US dollars of model calls at the configured prices, over every
    /// attempt (calls of a model without a price count nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<f64>, example = 2.5))]
    pub max_cost_usd: Option<crate::cost::Usd>,
}

/// Input files of a task, placed in its sandbox before the agent starts (in
/// the home directory; a claude-code task's in its work directory): inline
/// contents, or a prefix in S3.
/// An object whose one key is `s3_prefix` names a prefix; any other object
/// is inline contents by path (so `{"s3_prefix": "a", "b.txt": "…"}` is two
/// inline files, never a prefix with a field ignored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged, deny_unknown_fields)]
pub enum TaskFiles {
    S3 { s3_prefix: String },
    Inline(BTreeMap<String, String>),
}

/// What a user submits.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    /// What to do: 1 to 20 000 characters, not only white space (the
    /// pattern lists Unicode's `White_Space` characters).
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 20000,
            pattern = r"[^\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"
        )
    )]
    pub prompt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline: Option<Pipeline>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 128, pattern = r"^[^\x00-\x1f\x7f-\x9f]+(?![\s\S])"))]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actions: Option<Vec<Action>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<TaskFiles>,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::json_object::optional")]
    pub sandbox: Option<SandboxSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 10000))]
    pub max_steps: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 86400))]
    pub max_duration_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<Priority>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_length = 255, pattern = r"^[^\x00-\x1f\x7f-\x9f]+(?![\s\S])"))]
    pub idempotency_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::json_object::optional")]
    pub retry: Option<RetryPolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sensitive_actions: Option<SensitiveActions>,
    /// What a new attempt does when the previous one ended mid-step:
    /// `resume` (the default), `ask` or `restart`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_interrupt: Option<OnInterrupt>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(format = DateTime))]
    pub not_before: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<TaskId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continue_task: Option<TaskId>,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::json_object::optional")]
    pub budget: Option<Budget>,
    /// Labels a worker must carry (`FLOTILLA_WORKER_LABELS`) to run the
    /// task; while no live worker does, the task stays `queued`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_items = 16, example = json!(["eu"])))]
    pub requires: Option<Vec<String>>,
    /// Files and commands run in the task's sandbox before its agent
    /// starts; a failure ends the task with code `problem`, verdict
    /// `error`, before any model call.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::json_object::optional")]
    pub setup: Option<TaskSetup>,
    /// A command run in the task's sandbox after its agent stops, whose
    /// outcome is the task's `verdict`, `score` and `reason`.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "crate::json_object::optional")]
    pub check: Option<TaskCheck>,
}

impl TaskSpec {
    /// Parses a spec from JSON, naming the offending field on failure.
    pub fn from_json(bytes: &[u8]) -> Result<Self, ValidationError> {
        parse_json(bytes)
    }

    /// Checks every rule of the contract that the types alone do not.
    pub fn validate(&self) -> Result<(), ValidationError> {
        self.validate_fields()?;
        self.validate_pipeline_fields()
    }

    /// Checks each field on its own (values and bounds), not the rules
    /// between fields (which pipeline takes which).
    pub fn validate_fields(&self) -> Result<(), ValidationError> {
        let prompt_chars = self.prompt.chars().count();
        if prompt_chars == 0 || prompt_chars > MAX_PROMPT_CHARS || self.prompt.trim().is_empty() {
            return Err(ValidationError::at("prompt", format!("prompt must be 1 to {MAX_PROMPT_CHARS} characters")));
        }
        if let Some(model) = &self.model {
            check_model("model", model)?;
        }
        if let Some(actions) = &self.actions {
            if actions.len() > MAX_ACTIONS {
                return Err(ValidationError::at("actions", format!("at most {MAX_ACTIONS} actions")));
            }
            for (i, action) in actions.iter().enumerate() {
                action.validate().map_err(|e| e.under(&format!("[{i}]")).under("actions"))?;
            }
        }
        if let Some(sandbox) = &self.sandbox {
            validate_sandbox(sandbox).map_err(|e| e.under("sandbox"))?;
        }
        check_range("max_steps", self.max_steps.map(u64::from), 1, u64::from(MAX_STEPS))?;
        check_range("max_duration_s", self.max_duration_s, 1, MAX_DURATION_S)?;
        if let Some(budget) = &self.budget {
            check_range("budget.max_tokens", budget.max_tokens, 1, u64::MAX)?;
            check_range("budget.max_sandbox_s", budget.max_sandbox_s, 1, MAX_DURATION_S * u64::from(MAX_ATTEMPTS))?;
        }
        if let Some(labels) = &self.requires {
            check_requires(labels)?;
        }
        if let Some(setup) = &self.setup {
            setup.validate().map_err(|e| e.under("setup"))?;
        }
        if let Some(check) = &self.check {
            check.validate().map_err(|e| e.under("check"))?;
        }
        if let Some(retry) = &self.retry {
            check_range("retry.max_attempts", Some(u64::from(retry.max_attempts)), 1, u64::from(MAX_ATTEMPTS))?;
        }
        if let Some(key) = &self.idempotency_key {
            check_label("idempotency_key", key, MAX_IDEMPOTENCY_KEY)?;
        }
        if let Some(metadata) = &self.metadata {
            let size = serde_json::to_vec(metadata).map(|v| v.len()).unwrap_or(usize::MAX);
            if size > MAX_METADATA_BYTES {
                return Err(ValidationError::at("metadata", format!("metadata is at most {MAX_METADATA_BYTES} bytes of JSON")));
            }
        }
        if let Some(not_before) = &self.not_before {
            if clock::parse_rfc3339(not_before).is_none() {
                return Err(ValidationError::at("not_before", "not an RFC 3339 time like 2026-01-02T03:04:05Z"));
            }
        }
        if let Some(TaskFiles::Inline(files)) = &self.files {
            if files.keys().any(|p| p.is_empty() || p.starts_with('/') || p.split('/').any(|part| part == "..")) {
                return Err(ValidationError::at("files", "file paths must be relative and stay inside the task's folder"));
            }
        }
        Ok(())
    }

    fn validate_pipeline_fields(&self) -> Result<(), ValidationError> {
        let pipeline = self.pipeline;
        if self.replay_of.is_some() && pipeline != Some(Pipeline::Scripted) {
            return Err(ValidationError::at("replay_of", "replay_of needs pipeline \"scripted\""));
        }
        if self.replay_of.is_some() && self.actions.is_some() {
            return Err(ValidationError::at("actions", "give either actions or replay_of, not both"));
        }
        if self.continue_task.is_some() && pipeline != Some(Pipeline::ClaudeCode) {
            return Err(ValidationError::at("continue_task", "continue_task needs pipeline \"claude-code\""));
        }
        if self.actions.is_some() && pipeline != Some(Pipeline::Scripted) {
            return Err(ValidationError::at("actions", "actions are for pipeline \"scripted\""));
        }
        if pipeline == Some(Pipeline::Scripted) && self.actions.is_none() && self.replay_of.is_none() {
            return Err(ValidationError::at("actions", "a scripted task needs actions or replay_of"));
        }
        Ok(())
    }

    pub fn priority(&self) -> Priority {
        self.priority.unwrap_or_default()
    }

    pub fn max_attempts(&self) -> u32 {
        self.retry.map_or(DEFAULT_MAX_ATTEMPTS, |r| r.max_attempts)
    }

    /// Epoch milliseconds before which the task must not start.
    pub fn not_before_ms(&self) -> Option<i64> {
        self.not_before.as_deref().and_then(clock::parse_rfc3339)
    }

    /// Fills the pipeline from the configured default when the spec names none.
    pub fn with_default_pipeline(mut self, default: Pipeline) -> Self {
        if self.pipeline.is_none() {
            self.pipeline = Some(default);
        }
        self
    }

    /// Checks that the sandbox template the task names, if any, is one of
    /// `allowed` (its tenant's `sandbox_templates`).
    pub fn check_template(&self, allowed: &[String]) -> Result<(), ValidationError> {
        match self.sandbox.as_ref().and_then(|s| s.template.as_deref()) {
            Some(template) if !allowed.iter().any(|a| a == template) => Err(ValidationError::at(
                "sandbox.template",
                format!("template {template:?} is not one of this tenant's sandbox templates"),
            )),
            _ => Ok(()),
        }
    }
}

/// The most labels a task may require or a worker may carry.
pub const MAX_LABELS: usize = 16;
/// The longest label.
pub const MAX_LABEL_CHARS: usize = 64;

/// Checks one free label: 1 to 64 of `A-Z a-z 0-9 - _ .`.
pub fn check_worker_label(label: &str) -> Result<(), String> {
    let ok = !label.is_empty()
        && label.len() <= MAX_LABEL_CHARS
        && label.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!("label {label:?} must be 1 to {MAX_LABEL_CHARS} of A-Z a-z 0-9 - _ ."))
    }
}

/// Checks a task's `requires`.
/// A model's name: 1 to 128 printable characters; the error names `field`.
pub fn check_model(field: &str, model: &str) -> Result<(), ValidationError> {
    check_label(field, model, 128)
}

pub fn check_requires(labels: &[String]) -> Result<(), ValidationError> {
    if labels.len() > MAX_LABELS {
        return Err(ValidationError::at("requires", format!("at most {MAX_LABELS} labels")));
    }
    for (i, label) in labels.iter().enumerate() {
        check_worker_label(label).map_err(|m| ValidationError::at(format!("requires[{i}]"), m))?;
    }
    Ok(())
}

/// Parses JSON into `T`, turning serde's error into one that names the field.
/// Numbers are read as JSON Schema reads them (`8428.0` is an integer) and a
/// key named twice is refused: see [`json_read`].
pub fn parse_json<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, ValidationError> {
    let value = json_read::parse(bytes).map_err(|inner| match inner.classify() {
        serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
            ValidationError::new(format!("malformed JSON: {inner}"))
        }
        _ => ValidationError::new(strip_position(&inner.to_string())),
    })?;
    serde_path_to_error::deserialize(value).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        let message = match inner.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => format!("malformed JSON: {inner}"),
            _ => strip_position(&inner.to_string()),
        };
        if path == "." || path.is_empty() {
            ValidationError::new(message)
        } else {
            ValidationError::at(path, message)
        }
    })
}

fn strip_position(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

fn validate_sandbox(sandbox: &SandboxSpec) -> Result<(), ValidationError> {
    if let Some([w, h]) = sandbox.resolution {
        if !(320..=7680).contains(&w) || !(200..=4320).contains(&h) {
            return Err(ValidationError::at("resolution", "resolution must be [width, height] within 320x200 and 7680x4320"));
        }
    }
    if let Some(template) = &sandbox.template {
        check_label("template", template, 128)?;
    }
    if let Some(id) = &sandbox.id {
        check_label("id", id, 128)?;
    }
    if let Some(profile) = &sandbox.profile {
        validate_profile_name(profile)?;
    }
    if let Some(url) = &sandbox.url {
        if !(url.starts_with("http://") || url.starts_with("https://")) || url.chars().count() > 2048 {
            return Err(ValidationError::at("url", "url must be an http:// or https:// URL"));
        }
    }
    check_range("timeout_s", sandbox.timeout_s, 10, MAX_DURATION_S)
}

fn check_range(field: &str, value: Option<u64>, min: u64, max: u64) -> Result<(), ValidationError> {
    match value {
        Some(v) if v < min || v > max => Err(ValidationError::at(field, format!("{field} must be from {min} to {max}"))),
        _ => Ok(()),
    }
}

fn check_label(field: &str, value: &str, max: usize) -> Result<(), ValidationError> {
    if value.is_empty() || value.chars().count() > max || value.chars().any(char::is_control) {
        return Err(ValidationError::at(field, format!("{field} must be 1 to {max} printable characters")));
    }
    Ok(())
}

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    Queued,
    Running,
    Waiting,
    Succeeded,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 6] = [
        TaskStatus::Queued,
        TaskStatus::Running,
        TaskStatus::Waiting,
        TaskStatus::Succeeded,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Queued => "queued",
            TaskStatus::Running => "running",
            TaskStatus::Waiting => "waiting",
            TaskStatus::Succeeded => "succeeded",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, TaskStatus::Succeeded | TaskStatus::Failed | TaskStatus::Cancelled)
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a task stopped or waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "kebab-case")]
pub enum StopCode {
    Done,
    Ambiguity,
    HumanIntervention,
    SensitiveAction,
    Problem,
    Cancelled,
    /// The task crossed its `budget` (tokens, sandbox-seconds or dollars).
    Budget,
    /// The planner named an application the task's sandbox template does
    /// not have (or it would not open).
    AppUnavailable,
}

impl StopCode {
    /// Every stop code.
    pub const ALL: [StopCode; 8] = [
        StopCode::Done,
        StopCode::Ambiguity,
        StopCode::HumanIntervention,
        StopCode::SensitiveAction,
        StopCode::Problem,
        StopCode::Cancelled,
        StopCode::Budget,
        StopCode::AppUnavailable,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StopCode::Done => "done",
            StopCode::Ambiguity => "ambiguity",
            StopCode::HumanIntervention => "human-intervention",
            StopCode::SensitiveAction => "sensitive-action",
            StopCode::Problem => "problem",
            StopCode::Cancelled => "cancelled",
            StopCode::Budget => "budget",
            StopCode::AppUnavailable => "app-unavailable",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        serde_json::from_value(serde_json::Value::String(text.to_owned())).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> Result<TaskSpec, ValidationError> {
        let spec = TaskSpec::from_json(json.as_bytes())?;
        spec.validate()?;
        Ok(spec)
    }

    #[test]
    fn a_scripted_wait_task_is_valid() {
        let s = spec(r#"{"prompt": "wait", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 200}]}"#).expect("valid");
        assert_eq!(s.priority(), Priority::Normal);
        assert_eq!(s.max_attempts(), DEFAULT_MAX_ATTEMPTS);
    }

    #[test]
    fn errors_name_the_field() {
        let err = spec(r#"{"prompt": "x", "sandbox": {"resolution": [1, 1]}}"#).expect_err("refused");
        assert_eq!(err.field.as_deref(), Some("sandbox.resolution"));
        let err = spec(r#"{"prompt": "x", "colour": "red"}"#).expect_err("refused");
        assert!(err.message.contains("unknown field `colour`"), "{}", err.message);
        let err = spec(r#"{"prompt": 5}"#).expect_err("refused");
        assert_eq!(err.field.as_deref(), Some("prompt"));
        let err = spec(r#"{"prompt": "x", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 5}, {"type": "wait", "ms": 999999999}]}"#).expect_err("refused");
        assert_eq!(err.field.as_deref(), Some("actions[1].ms"));
        let err = spec(r#"{"prompt": "#).expect_err("refused");
        assert!(err.message.starts_with("malformed JSON"), "{}", err.message);
    }

    /// `{"s3_prefix": …}` alone is a prefix; with other keys the object is
    /// inline files (no key is ignored), so every object of relative paths
    /// to strings is valid input files, whatever its keys.
    #[test]
    fn an_s3_prefix_takes_no_other_key() {
        let files = |json: &str| serde_json::from_str::<TaskFiles>(json);
        assert_eq!(files(r#"{"s3_prefix": "in/"}"#).expect("prefix"), TaskFiles::S3 { s3_prefix: "in/".to_owned() });
        let mixed = files(r#"{"s3_prefix": "in/", "a.txt": "x"}"#).expect("inline");
        assert!(matches!(&mixed, TaskFiles::Inline(map) if map.len() == 2), "{mixed:?}");
        assert!(files(r#"{"s3_prefix": "in/", "a.txt": 5}"#).is_err());
        assert_eq!(files("{}").expect("no files"), TaskFiles::Inline(BTreeMap::new()));
    }

    #[test]
    fn prompts_have_bounds() {
        assert!(spec(r#"{"prompt": ""}"#).is_err());
        let long = "a".repeat(MAX_PROMPT_CHARS + 1);
        assert!(spec(&format!(r#"{{"prompt": "{long}"}}"#)).is_err());
        let longest = "é".repeat(MAX_PROMPT_CHARS);
        assert!(spec(&format!(r#"{{"prompt": "{longest}"}}"#)).is_ok(), "characters, not bytes, are counted");
    }

    #[test]
    fn pipeline_specific_fields_need_their_pipeline() {
        assert!(spec(r#"{"prompt": "x", "pipeline": "openai-cua", "actions": []}"#).is_err());
        assert!(spec(r#"{"prompt": "x", "pipeline": "scripted"}"#).is_err());
        assert!(spec(r#"{"prompt": "x", "files": {"a.txt": "hi"}}"#).is_ok());
        assert!(spec(r#"{"prompt": "x", "pipeline": "claude-code", "files": {"../a": "hi"}}"#).is_err());
        assert!(spec(r#"{"prompt": "x", "pipeline": "claude-code", "files": {"a.txt": "hi"}}"#).is_ok());
    }

    #[test]
    fn not_before_must_be_a_time() {
        assert!(spec(r#"{"prompt": "x", "not_before": "soon"}"#).is_err());
        assert!(spec(r#"{"prompt": "x", "not_before": "2030-01-01T00:00:00Z"}"#).is_ok());
    }
}
