//! Progress events: the one JSON shape every subscriber sees, whether it reads
//! a task's stored history, a Redis pub/sub channel or the SSE stream.
//!
//! A producer builds an [`EventDraft`]; the fenced Redis script that stores it
//! assigns `seq` (and, for `started`, the attempt number), so numbering and
//! ownership are decided in the same atomic step.

use serde::{Deserialize, Serialize};

use crate::action::Action;
use crate::clock;
use crate::eval::{CheckStage, Verdict};
use crate::ids::{BatchId, TaskId, TenantId};
use crate::task::Decision;

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    Queued {
        attempt: u32,
        worker: Option<String>,
    },
    Started {
        /// Zero in a draft: the start script fills in the attempt it grants.
        #[serde(default, skip_serializing_if = "is_zero")]
        attempt: u32,
        worker: String,
    },
    SandboxReady {
        sandbox_id: String,
        stream_url: Option<String>,
        warm: bool,
        ms: u64,
    },
    Plan {
        steps: Vec<String>,
    },
    StepStarted {
        index: u32,
        text: String,
    },
    Reasoning {
        text: String,
    },
    Action {
        action: Action,
    },
    ActionCompleted {
        action: Action,
        ms: u64,
    },
    Screenshot {
        hash: String,
        key: String,
        bytes: u64,
        dedup: bool,
        /// How many actions the task had taken when the screen was
        /// captured: the actions numbered above it were done on this
        /// screen (what a trajectory player draws on it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<u32>,
    },
    /// What one model call of the task used and cost, reported when its
    /// answer arrives, before the actions it asks for.
    Usage {
        /// How many actions the task had taken when the model answered:
        /// the answer asks for the actions numbered above it.
        step: u32,
        model: String,
        /// Every input token, those read from or written to the cache
        /// included.
        input_tokens: u64,
        output_tokens: u64,
        /// Input tokens read from the prompt cache.
        cache_read_tokens: u64,
        /// Input tokens written to the prompt cache.
        cache_write_tokens: u64,
        /// What the call cost in US dollars; `null` when the model has no
        /// price.
        cost_usd: Option<f64>,
    },
    Block {
        #[cfg_attr(feature = "openapi", schema(value_type = Object))]
        block: serde_json::Value,
    },
    /// A file a `claude-code` task wrote or deleted in its work directory,
    /// reported as it happened; a written one is in the store by then (at
    /// the task's artifact key for `path`). A deleted one has no `hash`.
    File {
        path: String,
        op: FileOp,
        hash: Option<String>,
        bytes: u64,
    },
    Waiting {
        code: String,
        message: String,
    },
    /// A human answered a waiting task; it runs again (or ends, on deny).
    Input {
        decision: Decision,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A person took the task's desktop over; the agent pauses.
    Takeover {},
    /// The person handed the desktop back, with a message for the agent.
    Released {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// The task was judged: by its check after the agent stopped, or, with
    /// verdict `error`, by a set-up that failed before it started.
    Checked {
        verdict: Verdict,
        score: Option<f64>,
        reason: String,
        stage: CheckStage,
    },
    /// A new attempt took the task up where the previous one was
    /// interrupted, in the same sandbox, after `from_step` actions;
    /// `interrupted`: an action was in flight when the previous attempt
    /// stopped (it may or may not have happened; it is not run again,
    /// unless it is a script's `wait` or `screenshot`, which repeated
    /// change nothing).
    Resumed {
        attempt: u32,
        from_step: u32,
        sandbox_id: String,
        interrupted: bool,
    },
    Retrying {
        attempt: u32,
        delay_ms: u64,
        error: String,
    },
    Succeeded {
        code: String,
        #[cfg_attr(feature = "openapi", schema(value_type = Object))]
        result: serde_json::Value,
    },
    Failed {
        code: String,
        error: String,
    },
    Cancelled {
        code: String,
    },
}

/// What happened to a file (`file` events).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum FileOp {
    /// Written or edited: new content.
    Write,
    Delete,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl EventKind {
    /// The `type` field as it appears on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::Queued { .. } => "queued",
            EventKind::Started { .. } => "started",
            EventKind::SandboxReady { .. } => "sandbox_ready",
            EventKind::Plan { .. } => "plan",
            EventKind::StepStarted { .. } => "step_started",
            EventKind::Reasoning { .. } => "reasoning",
            EventKind::Action { .. } => "action",
            EventKind::ActionCompleted { .. } => "action_completed",
            EventKind::Screenshot { .. } => "screenshot",
            EventKind::Usage { .. } => "usage",
            EventKind::Block { .. } => "block",
            EventKind::File { .. } => "file",
            EventKind::Waiting { .. } => "waiting",
            EventKind::Input { .. } => "input",
            EventKind::Takeover {} => "takeover",
            EventKind::Released { .. } => "released",
            EventKind::Checked { .. } => "checked",
            EventKind::Resumed { .. } => "resumed",
            EventKind::Retrying { .. } => "retrying",
            EventKind::Succeeded { .. } => "succeeded",
            EventKind::Failed { .. } => "failed",
            EventKind::Cancelled { .. } => "cancelled",
        }
    }

    /// Terminal events end a task's stream.
    pub fn is_terminal(&self) -> bool {
        matches!(self, EventKind::Succeeded { .. } | EventKind::Failed { .. } | EventKind::Cancelled { .. })
    }
}

/// Whether the wire `type` of an event ends the task.
pub fn is_terminal_type(kind: &str) -> bool {
    matches!(kind, "succeeded" | "failed" | "cancelled")
}

/// An event as stored and delivered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    pub seq: u64,
    pub task_id: TaskId,
    pub batch_id: Option<BatchId>,
    pub tenant: TenantId,
    /// RFC 3339 time the producer saw it happen.
    pub ts: String,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// The fields of an event its producer knows: its time and kind. The store
/// adds `seq` and the task's header fields.
#[derive(Debug, Clone, Serialize)]
struct DraftBody {
    ts: String,
    #[serde(flatten)]
    kind: EventKind,
}

/// The JSON of a new event, timestamped now, without `seq` or header.
pub fn draft(kind: EventKind) -> String {
    draft_at(kind, clock::now_ms())
}

/// The JSON of an event that happened at `at_ms`, without `seq` or header.
pub fn draft_at(kind: EventKind, at_ms: i64) -> String {
    serde_json::to_string(&DraftBody { ts: clock::rfc3339(at_ms), kind }).unwrap_or_else(|_| "{}".to_owned())
}

/// An event as the task scripts store it after its leading `{"seq":N,`:
/// the origin's header, then the draft's fields.
pub fn event_body(origin: &EventOrigin, draft: &str) -> String {
    format!("{},{}", origin.header(), draft.strip_prefix('{').unwrap_or(draft))
}

/// Whose task an event belongs to: what every event on one task repeats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventOrigin {
    pub task_id: TaskId,
    pub batch_id: Option<BatchId>,
    pub tenant: TenantId,
}

impl EventOrigin {
    /// The origin's fields as a JSON fragment (no braces), stored once per
    /// task and spliced into each of its events.
    pub fn header(&self) -> String {
        let json = serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned());
        json[1..json.len() - 1].to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_numbered_draft_reads_back_as_an_event() {
        let origin =
            EventOrigin { task_id: TaskId::generate(), batch_id: None, tenant: TenantId::parse("acme").expect("tenant") };
        let draft = draft(EventKind::Started { attempt: 0, worker: "w1".into() });
        assert!(!draft.contains("\"attempt\""), "the script fills the attempt in");
        let stored = format!("{{\"seq\":2,\"attempt\":1,{},{}", origin.header(), &draft[1..]);
        let event: Event = serde_json::from_str(&stored).expect("parses");
        assert_eq!(event.seq, 2);
        assert_eq!(event.kind, EventKind::Started { attempt: 1, worker: "w1".into() });
        assert_eq!(event.batch_id, None);
    }

    #[test]
    fn terminal_events_say_so() {
        assert!(EventKind::Cancelled { code: "cancelled".into() }.is_terminal());
        assert!(!EventKind::Reasoning { text: "hm".into() }.is_terminal());
        assert!(is_terminal_type("failed"));
    }
}
