//! A task record: a task's spec and state as the API serves it
//! (`GET /v1/tasks/{id}`, the task lists, the dead letters). The queue reads
//! it from the task's Redis hash (`flotilla_queue::queue::StoredRecord`);
//! clients read it back, a client of an older version through a reading
//! that is open to what it does not know (see [`crate::open`]).

use serde::Serialize;

use crate::eval::{CheckStage, Verdict};
use crate::ids::{BatchId, TaskId, TenantId};
use crate::route::Need;
use crate::task::{Priority, StopCode, TaskSpec, TaskStatus};
use crate::usage::UsageView;

/// A task's spec and state.
#[derive(Debug, Clone, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskRecord {
    pub id: TaskId,
    pub batch_id: Option<BatchId>,
    // Whose task it is: the server's to know, never sent.
    #[serde(skip)]
    pub tenant: TenantId,
    pub status: TaskStatus,
    pub code: Option<StopCode>,
    pub attempts: u32,
    pub priority: Priority,
    pub spec: TaskSpec,
    pub current_step: Option<u32>,
    pub steps_taken: u32,
    // The field comments below say the shapes of the JSON objects; they
    // stay out of the OpenAPI document, which describes them as objects.
    // The planner's plan: `{"application", "steps": [...]}`.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub plan: Option<serde_json::Value>,
    // The sandbox the task holds or held: `{"provider", "id", "host",
    // "stream_url"}`; `host` is where a worker anywhere reaches it by id
    // (an E2B or sandbox host API), `null` for a desktop of the worker's own.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub sandbox: Option<serde_json::Value>,
    // The stored screenshots of the latest attempt, each
    // `{"seq", "hash", "key", "url"}`.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub screenshots: Vec<serde_json::Value>,
    // The files the latest attempt stored (what the agent left in
    // `~/outbox/` or `~/Downloads/`, a claude-code task's written files),
    // each `{"path", "hash", "bytes", "key", "url"}`, by path.
    #[cfg_attr(feature = "openapi", schema(value_type = Vec<Object>))]
    pub files: Vec<serde_json::Value>,
    // What the pipeline answered: `text`, and the `artifacts` it stored
    // (each with its `path`, `key` and a presigned `url`).
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub result: Option<serde_json::Value>,
    pub error: Option<String>,
    /// What the task's check judged (`passed`, `failed`, `error`); `null`
    /// until it ran, or for a task without `setup` or `check`.
    pub verdict: Option<Verdict>,
    /// The check's score, 0 to 1.
    pub score: Option<f64>,
    /// Why the check judged so (or why the set-up failed).
    pub reason: Option<String>,
    /// Which part gave the verdict: `setup` (the set-up failed and the
    /// agent never ran) or `check`.
    pub check_stage: Option<CheckStage>,
    /// What the task spent so far, counted as it happened (every attempt).
    pub usage: Option<UsageView>,
    pub created_at: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// The last event's seq: how far the history goes.
    pub last_seq: u64,
    /// On `GET /v1/tasks/{id}` of a `queued` task: what no live worker
    /// offers that the task needs (`worker`, `sandbox`, `sandbox:local`,
    /// `sandbox:e2b`, `pipeline:<name>`, `label:<label>`), and
    /// `max_tokens_per_day` while its tenant is past its tokens of today;
    /// empty when it only waits for its turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Vec<String>>, example = json!(["label:eu"])))]
    pub waiting_for: Option<Vec<Need>>,
}
