//! The task record as this client reads it: the fields of
//! `flotilla_types::record::TaskRecord`, read so that a server of another
//! version never breaks the reading. A field it does not know is ignored, a
//! status, priority, stop code or pipeline it does not know is kept as its
//! name ([`Open`]), a field an older server leaves out is `None`, and a
//! nested part whose shape it cannot read (sandbox, result, screenshots,
//! plan, usage) is left out rather than failing the whole record.

use flotilla_types::open::Open;
use flotilla_types::task::{Pipeline, Priority, StopCode, TaskStatus};
use flotilla_types::usage::UsageView;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// A task record (`GET /v1/tasks/{id}`, an item of `GET /v1/tasks`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Task {
    /// The id as sent: shown, never checked here.
    pub id: Option<String>,
    pub batch_id: Option<String>,
    pub status: Option<Open<TaskStatus>>,
    pub code: Option<Open<StopCode>>,
    pub attempts: Option<u32>,
    pub priority: Option<Open<Priority>>,
    #[serde(deserialize_with = "or_none")]
    pub spec: Option<Spec>,
    /// The prompt at the top of the record, where an older API's listing put it.
    pub prompt: Option<String>,
    pub current_step: Option<u32>,
    pub steps_taken: Option<u32>,
    #[serde(deserialize_with = "or_none")]
    pub plan: Option<Plan>,
    #[serde(deserialize_with = "or_none")]
    pub sandbox: Option<Sandbox>,
    #[serde(deserialize_with = "or_none")]
    pub screenshots: Option<Vec<Screenshot>>,
    /// The files the latest attempt stored, as the server lists them.
    #[serde(deserialize_with = "or_none")]
    pub files: Option<Vec<Value>>,
    #[serde(deserialize_with = "or_none")]
    pub result: Option<TaskResult>,
    pub error: Option<String>,
    /// The check's verdict, as named by the server.
    pub verdict: Option<String>,
    pub score: Option<f64>,
    pub reason: Option<String>,
    /// Which part gave the verdict (`setup` or `check`), as named by the server.
    pub check_stage: Option<String>,
    #[serde(deserialize_with = "or_none")]
    pub usage: Option<UsageView>,
    pub created_at: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub last_seq: Option<u64>,
    /// What a queued task waits for, named as the server names it
    /// (`flotilla_types::route::Need`).
    #[serde(deserialize_with = "or_none")]
    pub waiting_for: Option<Vec<String>>,
}

impl Task {
    /// Reads a record; `None` when the answer is not an object.
    pub fn read(value: &Value) -> Option<Self> {
        value.is_object().then(|| Self::deserialize(value).ok()).flatten()
    }

    /// The prompt, from the spec or the top of the record.
    pub fn prompt(&self) -> Option<&str> {
        self.spec.as_ref().and_then(|s| s.prompt.as_deref()).or(self.prompt.as_deref())
    }
}

/// The parts of the spec this client shows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Spec {
    pub prompt: Option<String>,
    pub pipeline: Option<Open<Pipeline>>,
    pub model: Option<String>,
    pub max_steps: Option<u64>,
}

/// The planner's plan: `{"application", "steps"}`, or its steps alone.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Plan {
    Described { steps: Vec<Value> },
    Steps(Vec<Value>),
}

impl Plan {
    pub fn len(&self) -> usize {
        match self {
            Plan::Described { steps } | Plan::Steps(steps) => steps.len(),
        }
    }
}

/// The sandbox a task holds or held.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Sandbox {
    pub provider: Option<String>,
    pub id: Option<String>,
    pub stream_url: Option<String>,
}

/// One stored screenshot and its link.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Screenshot {
    pub seq: Option<u64>,
    pub hash: Option<String>,
    pub key: Option<String>,
    pub url: Option<String>,
}

/// What the pipeline answered: its text and stored artifacts; `whole` is
/// the result as sent, shown when it has no text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskResult {
    pub text: Option<String>,
    pub artifacts: Vec<Artifact>,
    pub whole: Value,
}

impl<'de> Deserialize<'de> for TaskResult {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Default, Deserialize)]
        #[serde(default)]
        struct Parts {
            #[serde(deserialize_with = "or_none")]
            text: Option<String>,
            #[serde(deserialize_with = "or_none")]
            artifacts: Option<Vec<Artifact>>,
        }
        let whole = Value::deserialize(deserializer)?;
        let parts = Parts::deserialize(&whole).unwrap_or_default();
        Ok(Self { text: parts.text, artifacts: parts.artifacts.unwrap_or_default(), whole })
    }
}

/// A file a task stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Artifact {
    pub path: Option<String>,
    pub name: Option<String>,
    pub key: Option<String>,
    pub url: Option<String>,
}

impl Artifact {
    /// What a person knows it by: its path, name or key.
    pub fn label(&self) -> Option<&str> {
        self.path.as_deref().or(self.name.as_deref()).or(self.key.as_deref())
    }
}

/// Reads a field as `T`, or as `None` when it is null or of a shape this
/// client cannot read.
fn or_none<'de, D: Deserializer<'de>, T: DeserializeOwned>(deserializer: D) -> Result<Option<T>, D::Error> {
    let value = Value::deserialize(deserializer)?;
    Ok(serde_json::from_value(value).ok())
}

#[cfg(test)]
mod tests {
    use flotilla_types::ids::{TaskId, TenantId};
    use flotilla_types::record::TaskRecord;
    use flotilla_types::task::TaskSpec;
    use serde_json::json;

    use super::*;

    /// A newer server: a field this client does not know, and names it does
    /// not know for the status, the priority, the stop code and the pipeline.
    #[test]
    fn a_newer_servers_record_reads() {
        let value = json!({
            "id": "tsk_9", "status": "paused", "code": "quota", "priority": "urgent", "attempts": 1,
            "spec": {"prompt": "p", "pipeline": "robot-arm", "new_spec_field": true},
            "brand_new_field": {"nested": [1, 2]}, "steps_taken": 2, "usage": {"steps": 2, "gpu_ms": 5},
            "waiting_for": ["label:gpu", {"kind": "new"}], "sandbox": "not an object"
        });
        let task = Task::read(&value).expect("reads");
        assert_eq!(task.status, Some(Open::Unknown("paused".into())));
        assert_eq!(task.code.as_ref().map(Open::name), Some("quota"));
        assert_eq!(task.priority.as_ref().map(Open::name), Some("urgent"));
        assert_eq!(task.spec.as_ref().and_then(|s| s.pipeline.as_ref()).map(Open::name), Some("robot-arm"));
        assert_eq!(task.usage.map(|u| u.steps), Some(2));
        assert_eq!(task.waiting_for, None, "a list this client cannot read is left out");
        assert_eq!(task.sandbox, None);
    }

    /// Every field the server serves reads back: the reading keeps up with
    /// `TaskRecord`.
    #[test]
    fn a_served_record_reads_back_whole() {
        let spec =
            TaskSpec::from_json(br#"{"prompt": "go", "pipeline": "scripted", "actions": [], "max_steps": 9}"#).expect("spec");
        let served = TaskRecord {
            id: TaskId::generate(),
            batch_id: None,
            tenant: TenantId::parse("acme").expect("tenant"),
            status: TaskStatus::Running,
            code: Some(StopCode::Done),
            attempts: 2,
            priority: Priority::High,
            spec,
            current_step: Some(1),
            steps_taken: 3,
            plan: Some(json!({"application": "xterm", "steps": ["a", "b"]})),
            sandbox: Some(json!({"provider": "local", "id": "sbx-1", "stream_url": null})),
            screenshots: vec![json!({"seq": 4, "hash": "h", "key": "k", "url": "http://s3/k"})],
            files: vec![json!({"path": "outbox/a.txt", "hash": "h2", "bytes": 3, "key": "k3", "url": "http://s3/k3"})],
            result: Some(json!({"text": "done", "artifacts": [{"path": "a.txt", "key": "k2"}]})),
            error: Some("none".into()),
            verdict: Some(flotilla_types::eval::Verdict::Passed),
            score: Some(1.0),
            reason: Some("ok".into()),
            check_stage: Some(flotilla_types::eval::CheckStage::Check),
            usage: Some(UsageView { steps: 3, ..UsageView::default() }),
            created_at: "2026-01-01T00:00:00Z".into(),
            started_at: Some("2026-01-01T00:00:01Z".into()),
            finished_at: None,
            last_seq: 7,
            waiting_for: Some(Vec::new()),
        };
        let value = serde_json::to_value(&served).expect("writes");
        let task = Task::read(&value).expect("reads");
        assert_eq!(task.id.as_deref(), Some(served.id.as_str()));
        assert_eq!(task.status, Some(Open::Known(TaskStatus::Running)));
        assert_eq!(task.code, Some(Open::Known(StopCode::Done)));
        assert_eq!(task.priority, Some(Open::Known(Priority::High)));
        assert_eq!((task.attempts, task.current_step, task.steps_taken, task.last_seq), (Some(2), Some(1), Some(3), Some(7)));
        let spec = task.spec.as_ref().expect("spec");
        assert_eq!((spec.pipeline.as_ref().and_then(Open::known), spec.max_steps), (Some(Pipeline::Scripted), Some(9)));
        assert_eq!(task.plan.as_ref().map(Plan::len), Some(2));
        assert_eq!(task.sandbox.and_then(|s| s.id).as_deref(), Some("sbx-1"));
        assert_eq!(task.screenshots.unwrap_or_default()[0].url.as_deref(), Some("http://s3/k"));
        let result = task.result.expect("result");
        assert_eq!((result.text.as_deref(), result.artifacts[0].label()), (Some("done"), Some("a.txt")));
        assert_eq!(task.usage.map(|u| u.steps), Some(3));
        assert_eq!(task.error.as_deref(), Some("none"));
        assert_eq!((task.verdict.as_deref(), task.score), (Some("passed"), Some(1.0)));
        assert_eq!(task.started_at.as_deref(), Some("2026-01-01T00:00:01Z"));
        assert_eq!(task.waiting_for, Some(Vec::new()));
        let known: Vec<&str> = vec![
            "id",
            "batch_id",
            "status",
            "code",
            "attempts",
            "priority",
            "spec",
            "current_step",
            "steps_taken",
            "plan",
            "sandbox",
            "screenshots",
            "files",
            "result",
            "error",
            "verdict",
            "score",
            "reason",
            "check_stage",
            "usage",
            "created_at",
            "started_at",
            "finished_at",
            "last_seq",
            "waiting_for",
        ];
        let served_fields: Vec<&str> = value.as_object().expect("object").keys().map(String::as_str).collect();
        assert!(served_fields.iter().all(|f| known.contains(f)), "a served field this reading does not name: {served_fields:?}");
    }
}
