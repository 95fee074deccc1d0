//! `flotilla task ID` for a person: one labelled line per part of the task
//! that is there (its state, what it was asked, its timing, its sandbox, its
//! result or error, its screenshots, what it waits for), instead of the
//! whole record as JSON (`--json` prints that).
//!
//! It reads the record as [`Task`] (`record.rs`), which leaves out what is
//! missing, null or not understood, so a newer API never breaks it.

use serde_json::Value;

use crate::display::{clock_time, one_line, truncate};
use crate::record::{Sandbox, Screenshot, Task, TaskResult};

/// Longest prompt, result or error text shown.
const MAX_TEXT: usize = 200;
/// Width of the label column.
const LABEL_WIDTH: usize = 12;

/// The summary's lines of an answer; none when it is not a task record.
pub fn lines(answer: &Value) -> Vec<String> {
    Task::read(answer).map(|task| task_lines(&task)).unwrap_or_default()
}

/// The summary's lines, label first.
pub fn task_lines(task: &Task) -> Vec<String> {
    let spec = task.spec.as_ref();
    let rows = [
        ("task", task.id.as_deref().map(one_line)),
        ("status", status(task)),
        ("batch", task.batch_id.as_deref().map(one_line)),
        ("prompt", long_text(task.prompt())),
        ("pipeline", spec.and_then(|s| s.pipeline.as_ref()).map(|p| one_line(p.name()))),
        ("model", spec.and_then(|s| s.model.as_deref()).map(one_line)),
        ("priority", task.priority.as_ref().map(|p| one_line(p.name()))),
        ("attempts", task.attempts.map(|n| n.to_string())),
        ("steps", steps(task)),
        ("times", times(task)),
        ("sandbox", task.sandbox.as_ref().map(sandbox)),
        ("waiting for", task.waiting_for.as_ref().map(|needs| one_line(&needs.join(", ")))),
        ("result", task.result.as_ref().map(result)),
        ("artifacts", task.result.as_ref().and_then(artifacts)),
        ("error", long_text(task.error.as_deref())),
        ("screenshots", task.screenshots.as_deref().and_then(screenshots)),
        ("usage", task.usage.as_ref().map(usage)),
    ];
    rows.into_iter()
        .filter_map(|(label, value)| value.filter(|v| !v.is_empty()).map(|v| format!("{label:<LABEL_WIDTH$}{v}")))
        .collect()
}

fn long_text(text: Option<&str>) -> Option<String> {
    text.map(|t| truncate(&one_line(t), MAX_TEXT))
}

/// `succeeded (done)`.
fn status(task: &Task) -> Option<String> {
    let status = one_line(task.status.as_ref()?.name());
    Some(match &task.code {
        Some(code) => format!("{status} ({})", one_line(code.name())),
        None => status,
    })
}

/// `3 taken, now #4 of a 5-step plan`.
fn steps(task: &Task) -> Option<String> {
    let taken = task.steps_taken?;
    let mut line = format!("{taken} taken");
    if let Some(current) = task.current_step {
        line.push_str(&format!(", now #{}", u64::from(current) + 1));
    }
    if let Some(plan) = &task.plan {
        line.push_str(&format!(", a {}-step plan", plan.len()));
    }
    Some(line)
}

/// `created 12:00:01  started 12:00:02  finished 12:00:09` (UTC).
fn times(task: &Task) -> Option<String> {
    let parts: Vec<String> = [("created", &task.created_at), ("started", &task.started_at), ("finished", &task.finished_at)]
        .into_iter()
        .filter_map(|(label, time)| time.as_deref().map(|t| format!("{label} {}", clock_time(t))))
        .collect();
    (!parts.is_empty()).then(|| format!("{} UTC", parts.join("  ")))
}

/// `local sbx-1  stream http://…`.
fn sandbox(sandbox: &Sandbox) -> String {
    let parts: Vec<String> = [&sandbox.provider, &sandbox.id].into_iter().flatten().map(|p| one_line(p)).collect();
    let mut line = parts.join(" ");
    if let Some(url) = &sandbox.stream_url {
        line.push_str(&format!("  stream {}", one_line(url)));
    }
    line
}

/// The result's text, or the result as JSON when it has none.
fn result(result: &TaskResult) -> String {
    let shown = match (&result.text, &result.whole) {
        (Some(text), _) => one_line(text),
        (None, Value::String(text)) => one_line(text),
        (None, whole) => one_line(&whole.to_string()),
    };
    truncate(&shown, MAX_TEXT)
}

/// `2: report.txt, data.csv`.
fn artifacts(result: &TaskResult) -> Option<String> {
    let artifacts = &result.artifacts;
    if artifacts.is_empty() {
        return None;
    }
    let names: Vec<String> = artifacts.iter().map(|a| a.label().map_or_else(|| "-".to_owned(), one_line)).collect();
    Some(truncate(&format!("{}: {}", artifacts.len(), names.join(", ")), MAX_TEXT))
}

/// `3, the last at https://…`.
fn screenshots(shots: &[Screenshot]) -> Option<String> {
    let last = shots.last()?;
    Some(match last.url.as_deref().or(last.key.as_deref()) {
        Some(at) => format!("{}, the last at {}", shots.len(), one_line(at)),
        None => shots.len().to_string(),
    })
}

/// `input 1200, output 80 tokens  12 steps  sandbox 30.5 s`: the usage's
/// non-zero numbers.
fn usage(usage: &flotilla_types::usage::UsageView) -> String {
    let mut parts = Vec::new();
    if usage.input_tokens > 0 {
        parts.push(format!("input {}, output {} tokens", usage.input_tokens, usage.output_tokens));
    }
    if usage.steps > 0 {
        parts.push(format!("{} steps", usage.steps));
    }
    let ms: u64 = usage.sandbox_ms.values().sum();
    if ms > 0 {
        parts.push(format!("sandbox {:.1} s", ms as f64 / 1000.0));
    }
    parts.join("  ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_finished_task_reads_as_labelled_lines() {
        let task = json!({
            "id": "tsk_1", "status": "succeeded", "code": "done", "attempts": 1, "priority": "normal",
            "spec": {"prompt": "open\nthe page", "pipeline": "scripted"},
            "steps_taken": 3, "plan": ["a", "b", "c"], "current_step": null,
            "sandbox": {"provider": "local", "id": "sbx-1", "stream_url": null},
            "result": {"text": "all done", "artifacts": [{"path": "out.txt"}]},
            "screenshots": [{"seq": 1, "url": "http://s3/a"}, {"seq": 2, "url": "http://s3/b"}],
            "usage": {"input_tokens": 10, "output_tokens": 2, "steps": 3, "sandbox_ms": {"local": 1500}},
            "created_at": "2026-01-01T10:00:00.123Z", "started_at": "2026-01-01T10:00:01Z", "finished_at": "2026-01-01T10:00:09Z",
            "error": null, "batch_id": null
        });
        let lines = lines(&task);
        let expected = [
            "task        tsk_1",
            "status      succeeded (done)",
            "prompt      open the page",
            "pipeline    scripted",
            "priority    normal",
            "attempts    1",
            "steps       3 taken, a 3-step plan",
            "times       created 10:00:00  started 10:00:01  finished 10:00:09 UTC",
            "sandbox     local sbx-1",
            "result      all done",
            "artifacts   1: out.txt",
            "screenshots 2, the last at http://s3/b",
            "usage       input 10, output 2 tokens  3 steps  sandbox 1.5 s",
        ];
        assert_eq!(lines, expected);
    }

    #[test]
    fn a_waiting_or_failed_task_shows_why() {
        let queued =
            json!({"id": "tsk_2", "status": "queued", "waiting_for": ["sandbox:e2b", "label:gpu"], "spec": {"prompt": "p"}});
        assert!(lines(&queued).contains(&"waiting for sandbox:e2b, label:gpu".to_owned()), "{:?}", lines(&queued));
        let failed =
            json!({"id": "tsk_3", "status": "failed", "code": "problem", "error": "no such page", "spec": {"prompt": "p"}});
        let shown = lines(&failed);
        assert!(
            shown.contains(&"status      failed (problem)".to_owned()) && shown.contains(&"error       no such page".to_owned()),
            "{shown:?}"
        );
    }

    /// A newer server: a field this client does not know and a status it
    /// does not know; the record still reads and shows.
    #[test]
    fn a_newer_servers_record_shows_what_it_knows() {
        let task = json!({
            "id": "tsk_5", "status": "paused", "code": "operator-hold", "priority": "urgent",
            "spec": {"prompt": "p", "pipeline": "robot-arm", "grip": "firm"}, "steps_taken": 1,
            "brand_new": {"a": [1, 2, 3]}
        });
        let shown = lines(&task);
        assert_eq!(
            shown,
            [
                "task        tsk_5",
                "status      paused (operator-hold)",
                "prompt      p",
                "pipeline    robot-arm",
                "priority    urgent",
                "steps       1 taken",
            ]
        );
    }

    #[test]
    fn missing_or_odd_fields_are_left_out() {
        assert_eq!(lines(&json!({"id": "tsk_4"})), ["task        tsk_4"]);
        assert_eq!(lines(&json!([])), Vec::<String>::new());
    }
}
