//! The tools' arguments, named as the API names them. Their JSON Schemas
//! are derived from these types (field docs become descriptions); values
//! are checked by the API, which answers a bad one with its usual 400.

use rmcp::schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

/// A task, by id.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct TaskRef {
    /// The task's id (`tsk_…`), as submit_task answered it.
    pub id: String,
}

/// `submit_batch`: the body of `POST /v1/batches`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct BatchArguments {
    /// 1 to 10 000 task specs (the fields submit_task takes). Each is laid
    /// over `defaults` as a JSON merge patch: its fields win, objects merge
    /// key by key, null removes a default.
    pub tasks: Vec<Map<String, Value>>,
    /// Spec fields every task of the batch starts from.
    #[serde(default)]
    pub defaults: Option<Map<String, Value>>,
}

/// `list_tasks`: the query of `GET /v1/tasks`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ListArguments {
    /// Only tasks in this status: queued, running, waiting, succeeded, failed or cancelled.
    #[serde(default)]
    pub status: Option<String>,
    /// Only the tasks of this batch (`bat_…`).
    #[serde(default)]
    pub batch: Option<String>,
    /// Tasks per page (the API's default when left out).
    #[serde(default)]
    pub limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `wait_for_task`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct WaitArguments {
    /// The task's id.
    pub id: String,
    /// How long to wait for the task to end, in seconds (default 300, at most 3600); the task's
    /// record is answered either way, so a task still running shows its status.
    #[serde(default)]
    pub timeout_s: Option<u64>,
}

/// `approve_task` and `deny_task`: the body of `POST /v1/tasks/{id}/input`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct InputArguments {
    /// The waiting task's id.
    pub id: String,
    /// A message for the task's agent (what to do, or why not).
    #[serde(default)]
    pub message: Option<String>,
}

/// `get_screenshot`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ScreenshotArguments {
    /// The task's id.
    pub id: String,
    /// The seq of the screenshot's event (listed in the task's `screenshots`); the latest when left out.
    #[serde(default)]
    pub seq: Option<u64>,
}

/// `get_usage`: the query of `GET /v1/usage`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct UsageArguments {
    /// First UTC day, YYYY-MM-DD (default: 29 days before `to`).
    #[serde(default)]
    pub from: Option<String>,
    /// Last UTC day, YYYY-MM-DD (default: today).
    #[serde(default)]
    pub to: Option<String>,
}
