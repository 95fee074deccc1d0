//! What a watcher knows of a task's progress, shown as `[step k/n] status`.
//!
//! Steps count two ways. A planned task announces its steps (`plan`) and
//! starts them in order (`step_started` with a 0-based `index`). Otherwise
//! the task resource reports `steps_taken` against the spec's `max_steps`;
//! the stream replays the history first, so that snapshot is applied only
//! once the replay reaches the task's `last_seq`, and any later event that
//! carries `steps_taken` or `max_steps` updates it. When neither is known,
//! only the status is shown.

use serde_json::Value;

use crate::record::Task;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Progress {
    status: Option<String>,
    step: Option<u64>,
    total: Option<u64>,
    /// The total is the number of planned steps, so only `step_started` moves `step`.
    planned: bool,
    /// `steps_taken` of the task resource, waiting for the replay to reach `at_seq`.
    snapshot: Option<Snapshot>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Snapshot {
    steps_taken: u64,
    at_seq: u64,
}

impl Progress {
    /// Starts from a task resource (`GET /v1/tasks/{id}`): its step limit and
    /// its steps taken so far; statuses come from the replayed events.
    pub fn from_task(task: &Task) -> Self {
        let total = task.spec.as_ref().and_then(|spec| spec.max_steps);
        let snapshot = task
            .steps_taken
            .map(u64::from)
            .filter(|steps| *steps > 0)
            .map(|steps_taken| Snapshot { steps_taken, at_seq: task.last_seq.unwrap_or(0) });
        let mut progress = Self { total, snapshot, ..Self::default() };
        progress.apply_snapshot(0);
        progress
    }

    /// Takes an event into account; returns whether the change is worth a
    /// progress line: the steps moved, or the status changed on an event
    /// whose own line does not already say so (an action after `waiting`).
    pub fn observe(&mut self, event: &Value) -> bool {
        let before = self.clone();
        let kind = event.get("type").and_then(Value::as_str).unwrap_or("");
        if let Some(status) = status_after(kind) {
            self.status = Some(status.to_owned());
        }
        match kind {
            "plan" => self.observe_plan(event),
            "step_started" => {
                if let Some(index) = event.get("index").and_then(Value::as_u64) {
                    self.step = Some(index + 1);
                }
            }
            _ => {}
        }
        if !self.planned {
            self.observe_counts(event);
            self.apply_snapshot(event.get("seq").and_then(Value::as_u64).unwrap_or(0));
        }
        let steps_moved = self.step_text() != before.step_text();
        let status_changed = self.status != before.status && !announces_status(kind);
        steps_moved || status_changed
    }

    /// Takes the snapshot's step count once the replay has caught up with it.
    fn apply_snapshot(&mut self, seq: u64) {
        let Some(snapshot) = self.snapshot.filter(|s| seq >= s.at_seq) else {
            return;
        };
        self.snapshot = None;
        self.step = Some(self.step.unwrap_or(0).max(snapshot.steps_taken));
    }

    fn observe_plan(&mut self, event: &Value) {
        if let Some(total) = event.get("steps").and_then(step_count) {
            self.total = Some(total);
            self.step = None;
            self.planned = true;
            self.snapshot = None;
        }
    }

    fn observe_counts(&mut self, event: &Value) {
        if let Some(total) = event.get("max_steps").and_then(Value::as_u64) {
            self.total = Some(total);
        }
        if let Some(step) = event.get("steps_taken").and_then(Value::as_u64) {
            self.step = Some(step);
        }
    }

    /// `[step k/n] status`, `[step k] status`, or the status alone.
    pub fn line(&self) -> String {
        let status = self.status.as_deref().unwrap_or("unknown");
        match self.step_text() {
            Some(steps) => format!("{steps} {status}"),
            None => status.to_owned(),
        }
    }

    fn step_text(&self) -> Option<String> {
        match (self.step, self.total) {
            (Some(step), Some(total)) => Some(format!("[step {step}/{total}]")),
            (None, Some(total)) if self.planned => Some(format!("[step 0/{total}]")),
            (Some(step), None) => Some(format!("[step {step}]")),
            _ => None,
        }
    }
}

/// The status an event type implies, if it implies one.
fn status_after(kind: &str) -> Option<&'static str> {
    match kind {
        "queued" => Some("queued"),
        "waiting" => Some("waiting"),
        "retrying" => Some("retrying"),
        "succeeded" => Some("succeeded"),
        "failed" => Some("failed"),
        "cancelled" => Some("cancelled"),
        "started" | "resumed" | "sandbox_ready" | "plan" | "step_started" | "reasoning" | "action" | "action_completed"
        | "screenshot" | "block" => Some("running"),
        _ => None,
    }
}

/// Whether an event's own line already names the status it leads to.
fn announces_status(kind: &str) -> bool {
    matches!(kind, "queued" | "started" | "waiting" | "retrying" | "succeeded" | "failed" | "cancelled")
}

/// How many steps a plan has: a list of steps, `{"steps": [...]}`, or a number.
fn step_count(plan: &Value) -> Option<u64> {
    match plan {
        Value::Array(steps) => u64::try_from(steps.len()).ok(),
        Value::Number(n) => n.as_u64(),
        Value::Object(fields) => fields.get("steps").and_then(step_count),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn task(value: Value) -> Task {
        Task::read(&value).expect("a task record")
    }

    #[test]
    fn a_planned_task_counts_started_steps() {
        let mut progress = Progress::from_task(&task(json!({"status": "running", "steps_taken": 0})));
        assert!(!progress.observe(&json!({"type": "queued", "attempt": 1})), "the event line says it");
        assert_eq!(progress.line(), "queued");
        assert!(!progress.observe(&json!({"type": "started", "attempt": 1, "worker": "w1"})));
        assert_eq!(progress.line(), "running");
        assert!(progress.observe(&json!({"type": "plan", "steps": ["open", "search", "save"]})));
        assert_eq!(progress.line(), "[step 0/3] running");
        assert!(progress.observe(&json!({"type": "step_started", "index": 1, "text": "search"})));
        assert_eq!(progress.line(), "[step 2/3] running");
        assert!(!progress.observe(&json!({"type": "reasoning", "text": "hm"})));
    }

    #[test]
    fn an_unplanned_task_uses_steps_taken_once_the_replay_catches_up() {
        let task = json!({"status": "running", "steps_taken": 4, "last_seq": 3, "spec": {"prompt": "x", "max_steps": 20}});
        let mut progress = Progress::from_task(&self::task(task));
        progress.observe(&json!({"seq": 1, "type": "queued"}));
        assert_eq!(progress.line(), "queued");
        progress.observe(&json!({"seq": 2, "type": "started"}));
        assert_eq!(progress.line(), "running");
        progress.observe(&json!({"seq": 3, "type": "action"}));
        assert_eq!(progress.line(), "[step 4/20] running");
        progress.observe(&json!({"seq": 4, "type": "action_completed", "steps_taken": 5}));
        assert_eq!(progress.line(), "[step 5/20] running");
        assert!(!progress.observe(&json!({"type": "waiting", "code": "sensitive-action"})));
        assert_eq!(progress.line(), "[step 5/20] waiting");
        assert!(progress.observe(&json!({"type": "action"})), "resumed without a status event");
        assert_eq!(progress.line(), "[step 5/20] running");
    }

    #[test]
    fn without_step_information_only_the_status_shows() {
        let mut progress = Progress::default();
        progress.observe(&json!({"type": "action", "action": {"type": "wait", "ms": 5}}));
        assert_eq!(progress.line(), "running");
    }
}
