//! A task as stored: its Redis hash read back into the shape users see.

use std::collections::HashMap;

use serde::Serialize;
use utoipa::ToSchema;

use crate::error::QueueError;
use flotilla_types::clock;
use flotilla_types::ids::{BatchId, TaskId, TenantId};
use flotilla_types::route::Need;
use flotilla_types::task::{Priority, StopCode, TaskSpec, TaskStatus};
use flotilla_types::usage::{Meter, UsageView};

/// A task's spec and state.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TaskRecord {
    pub id: TaskId,
    pub batch_id: Option<BatchId>,
    #[serde(skip)]
    pub tenant: TenantId,
    pub status: TaskStatus,
    pub code: Option<StopCode>,
    pub attempts: u32,
    pub priority: Priority,
    pub spec: TaskSpec,
    pub current_step: Option<u32>,
    pub steps_taken: u32,
    #[schema(value_type = Option<Object>)]
    pub plan: Option<serde_json::Value>,
    #[schema(value_type = Option<Object>)]
    pub sandbox: Option<serde_json::Value>,
    #[schema(value_type = Vec<Object>)]
    pub screenshots: Vec<serde_json::Value>,
    #[schema(value_type = Option<Object>)]
    pub result: Option<serde_json::Value>,
    pub error: Option<String>,
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
    #[schema(value_type = Option<Vec<String>>, example = json!(["label:eu"]))]
    pub waiting_for: Option<Vec<Need>>,
}

impl TaskRecord {
    /// The hash fields a record is read from: the event history stays
    /// behind.
    pub const FIELDS: [&'static str; 18] = [
        "spec",
        "tenant",
        "status",
        "batch",
        "code",
        "attempt",
        "current_step",
        "steps_taken",
        "plan",
        "sandbox",
        "screenshots",
        "result",
        "error",
        "meter",
        "created_at",
        "started_at",
        "finished_at",
        "seq",
    ];

    /// The values of [`TaskRecord::FIELDS`], in order, as a hash to read
    /// with [`TaskRecord::from_hash`].
    pub fn fields_hash(values: Vec<Option<String>>) -> HashMap<String, String> {
        Self::FIELDS.iter().zip(values).filter_map(|(field, value)| Some(((*field).to_owned(), value?))).collect()
    }

    /// Reads a task hash; `None` when the hash is empty (no such task).
    pub fn from_hash(id: &TaskId, mut h: HashMap<String, String>) -> Result<Option<Self>, QueueError> {
        if h.is_empty() {
            return Ok(None);
        }
        let corrupt = |what: &str| QueueError::Corrupt(format!("task {id}: {what}"));
        let spec: TaskSpec =
            serde_json::from_str(h.get("spec").ok_or_else(|| corrupt("no spec"))?).map_err(|e| corrupt(&format!("spec: {e}")))?;
        let tenant = TenantId::parse(h.get("tenant").map_or("", String::as_str)).map_err(|_| corrupt("tenant"))?;
        let status = TaskStatus::parse(h.get("status").map_or("", String::as_str)).ok_or_else(|| corrupt("status"))?;
        let json = |h: &mut HashMap<String, String>, field: &str| h.remove(field).and_then(|v| serde_json::from_str(&v).ok());
        let time = |h: &HashMap<String, String>, field: &str| h.get(field).and_then(|v| v.parse().ok()).map(clock::rfc3339);
        let number = |h: &HashMap<String, String>, field: &str| h.get(field).and_then(|v| v.parse::<u64>().ok());
        Ok(Some(Self {
            id: id.clone(),
            batch_id: h.get("batch").filter(|b| !b.is_empty()).and_then(|b| BatchId::parse(b).ok()),
            tenant,
            status,
            code: h.get("code").and_then(|c| StopCode::parse(c)),
            attempts: number(&h, "attempt").unwrap_or(0) as u32,
            priority: spec.priority(),
            current_step: number(&h, "current_step").map(|n| n as u32),
            steps_taken: number(&h, "steps_taken").unwrap_or(0) as u32,
            plan: json(&mut h, "plan"),
            sandbox: json(&mut h, "sandbox"),
            screenshots: json(&mut h, "screenshots").and_then(|v: serde_json::Value| v.as_array().cloned()).unwrap_or_default(),
            result: json(&mut h, "result"),
            error: h.get("error").cloned(),
            usage: h.get("meter").map(|m| Meter::from_json(m).view()),
            created_at: time(&h, "created_at").unwrap_or_default(),
            started_at: time(&h, "started_at"),
            finished_at: time(&h, "finished_at"),
            last_seq: number(&h, "seq").unwrap_or(0),
            waiting_for: None,
            spec,
        }))
    }
}
