//! A task as stored: its Redis hash read back into the shape users see, the
//! [`TaskRecord`] of `flotilla-types`.

use std::collections::HashMap;

use crate::error::QueueError;
use flotilla_types::clock;
use flotilla_types::eval::{CheckStage, Verdict};
use flotilla_types::ids::{BatchId, TaskId, TenantId};
use flotilla_types::record::TaskRecord;
use flotilla_types::task::{StopCode, TaskSpec, TaskStatus};
use flotilla_types::usage::Meter;

/// How a [`TaskRecord`] is read from its task's hash. The record is a
/// plain type of `flotilla-types`, which knows no Redis; reading it is the
/// queue's.
pub trait StoredRecord: Sized {
    /// The hash fields a record is read from: the event history stays
    /// behind.
    const FIELDS: [&'static str; 22];

    /// The values of [`StoredRecord::FIELDS`], in order, as a hash to read
    /// with [`StoredRecord::from_hash`].
    fn fields_hash(values: Vec<Option<String>>) -> HashMap<String, String>;

    /// Reads a task hash; `None` when the hash is empty (no such task).
    fn from_hash(id: &TaskId, h: HashMap<String, String>) -> Result<Option<Self>, QueueError>;
}

impl StoredRecord for TaskRecord {
    const FIELDS: [&'static str; 22] = [
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
        "verdict",
        "score",
        "reason",
        "check_stage",
    ];

    fn fields_hash(values: Vec<Option<String>>) -> HashMap<String, String> {
        Self::FIELDS.iter().zip(values).filter_map(|(field, value)| Some(((*field).to_owned(), value?))).collect()
    }

    fn from_hash(id: &TaskId, mut h: HashMap<String, String>) -> Result<Option<Self>, QueueError> {
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
            files: Vec::new(),
            result: json(&mut h, "result"),
            error: h.get("error").cloned(),
            verdict: h.get("verdict").and_then(|v| Verdict::parse(v)),
            score: h.get("score").and_then(|v| v.parse().ok()),
            reason: h.get("reason").cloned(),
            check_stage: h.get("check_stage").and_then(|v| CheckStage::parse(v)),
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
