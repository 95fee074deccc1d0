//! `flotilla task ID` for a person: one labelled line per part of the task
//! that is there (its state, what it was asked, its timing, its sandbox, its
//! result or error, its screenshots, what it waits for), instead of the
//! whole record as JSON (`--json` prints that).
//!
//! Like the rest of the display, it reads a `serde_json::Value` and leaves out
//! what is missing or null, so a newer API never breaks it.

use serde_json::Value;

use crate::display::{cell, one_line, short_time, truncate};

/// Longest prompt, result or error text shown.
const MAX_TEXT: usize = 200;
/// Width of the label column.
const LABEL_WIDTH: usize = 12;

/// The summary's lines, label first.
pub fn lines(task: &Value) -> Vec<String> {
    let rows = [
        ("task", text(task.get("id"))),
        ("status", status(task)),
        ("batch", text(task.get("batch_id"))),
        ("prompt", long_text(task.pointer("/spec/prompt").or_else(|| task.get("prompt")))),
        ("pipeline", text(task.pointer("/spec/pipeline"))),
        ("model", text(task.pointer("/spec/model"))),
        ("priority", text(task.get("priority"))),
        ("attempts", text(task.get("attempts"))),
        ("steps", steps(task)),
        ("times", times(task)),
        ("sandbox", sandbox(task.get("sandbox"))),
        ("waiting for", waiting_for(task.get("waiting_for"))),
        ("result", result(task.get("result"))),
        ("artifacts", artifacts(task.get("result"))),
        ("error", long_text(task.get("error"))),
        ("screenshots", screenshots(task.get("screenshots"))),
        ("usage", usage(task.get("usage"))),
    ];
    rows.into_iter()
        .filter_map(|(label, value)| value.filter(|v| !v.is_empty()).map(|v| format!("{label:<LABEL_WIDTH$}{v}")))
        .collect()
}

/// A present, non-null value as one line.
fn text(value: Option<&Value>) -> Option<String> {
    value.filter(|v| !v.is_null()).map(|v| cell(Some(v)))
}

fn long_text(value: Option<&Value>) -> Option<String> {
    text(value).map(|t| truncate(&t, MAX_TEXT))
}

/// `succeeded (done)`.
fn status(task: &Value) -> Option<String> {
    let status = text(task.get("status"))?;
    Some(match text(task.get("code")) {
        Some(code) => format!("{status} ({code})"),
        None => status,
    })
}

/// `3 taken, now #4 of a 5-step plan`.
fn steps(task: &Value) -> Option<String> {
    let taken = task.get("steps_taken").and_then(Value::as_u64)?;
    let mut line = format!("{taken} taken");
    if let Some(current) = task.get("current_step").and_then(Value::as_u64) {
        line.push_str(&format!(", now #{}", current + 1));
    }
    if let Some(plan) = task.get("plan").and_then(Value::as_array) {
        line.push_str(&format!(", a {}-step plan", plan.len()));
    }
    Some(line)
}

/// `created 12:00:01  started 12:00:02  finished 12:00:09` (UTC).
fn times(task: &Value) -> Option<String> {
    let parts: Vec<String> = [("created", "created_at"), ("started", "started_at"), ("finished", "finished_at")]
        .into_iter()
        .filter_map(|(label, field)| task.get(field).filter(|v| !v.is_null()).map(|v| format!("{label} {}", short_time(Some(v)))))
        .collect();
    (!parts.is_empty()).then(|| format!("{} UTC", parts.join("  ")))
}

/// `local sbx-1  stream http://…`.
fn sandbox(sandbox: Option<&Value>) -> Option<String> {
    let sandbox = sandbox.filter(|s| !s.is_null())?;
    let parts: Vec<String> = [text(sandbox.get("provider")), text(sandbox.get("id"))].into_iter().flatten().collect();
    let mut line = parts.join(" ");
    if let Some(url) = text(sandbox.get("stream_url")) {
        line.push_str(&format!("  stream {url}"));
    }
    Some(line)
}

fn waiting_for(needs: Option<&Value>) -> Option<String> {
    let needs: Vec<String> = needs?.as_array()?.iter().map(|n| cell(Some(n))).collect();
    Some(needs.join(", "))
}

/// The result's text, or the result as JSON when it has none.
fn result(result: Option<&Value>) -> Option<String> {
    let result = result.filter(|r| !r.is_null())?;
    let shown = result.get("text").filter(|t| !t.is_null()).unwrap_or(result);
    Some(truncate(&one_line(&cell(Some(shown))), MAX_TEXT))
}

/// `2: report.txt, data.csv`.
fn artifacts(result: Option<&Value>) -> Option<String> {
    let artifacts = result?.get("artifacts")?.as_array().filter(|a| !a.is_empty())?;
    let names: Vec<String> = artifacts
        .iter()
        .map(|a| {
            a.get("path").or_else(|| a.get("name")).or_else(|| a.get("key")).map_or_else(|| cell(Some(a)), |n| cell(Some(n)))
        })
        .collect();
    Some(truncate(&format!("{}: {}", artifacts.len(), names.join(", ")), MAX_TEXT))
}

/// `3, the last at https://…`.
fn screenshots(shots: Option<&Value>) -> Option<String> {
    let shots = shots?.as_array().filter(|s| !s.is_empty())?;
    let last = shots.last().and_then(|s| text(s.get("url")).or_else(|| text(s.get("key"))));
    Some(match last {
        Some(last) => format!("{}, the last at {last}", shots.len()),
        None => shots.len().to_string(),
    })
}

/// `input 1200, output 80 tokens  12 steps  sandbox 30.5 s`: the usage's
/// non-zero numbers.
fn usage(usage: Option<&Value>) -> Option<String> {
    let usage = usage?.as_object()?;
    let number = |name: &str| usage.get(name).and_then(Value::as_u64).filter(|n| *n > 0);
    let mut parts = Vec::new();
    if let (Some(input), output) = (number("input_tokens"), number("output_tokens")) {
        parts.push(format!("input {input}, output {} tokens", output.unwrap_or(0)));
    }
    if let Some(steps) = number("steps") {
        parts.push(format!("{steps} steps"));
    }
    if let Some(sandbox) = usage.get("sandbox_ms").and_then(Value::as_object) {
        let ms: u64 = sandbox.values().filter_map(Value::as_u64).sum();
        if ms > 0 {
            parts.push(format!("sandbox {:.1} s", ms as f64 / 1000.0));
        }
    }
    Some(parts.join("  "))
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

    #[test]
    fn missing_or_odd_fields_are_left_out() {
        assert_eq!(lines(&json!({"id": "tsk_4"})), ["task        tsk_4"]);
        assert_eq!(lines(&json!([])), Vec::<String>::new());
    }
}
