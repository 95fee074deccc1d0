//! How things look to a person: event lines, the task table, the error line,
//! and writing to the terminal without panicking when a pipe closes.
//!
//! Event lines read `serde_json::Value`s and the task table reads task
//! records as [`Task`]; both tolerate missing or unexpected fields, so a
//! newer API never breaks an older client's display.
//!
//! Every line goes out through [`printable`]: text from the API (prompts,
//! model reasoning, error messages) is written by tasks and models, and an
//! escape sequence in it must not reach the terminal, where it could retitle
//! the window, rewrite earlier lines or hide what is shown.

use std::io::{self, Write};

use serde_json::Value;

use crate::record::Task;

/// Fields every event repeats; not worth a column on each line.
const ENVELOPE: [&str; 6] = ["task_id", "batch_id", "tenant", "seq", "ts", "type"];
/// Action fields in the order a person reads them; any others follow.
const ACTION_FIELDS: [&str; 9] = ["x", "y", "button", "scroll_x", "scroll_y", "text", "keys", "ms", "path"];
/// Longest value shown inside an event line.
const MAX_VALUE: usize = 80;
/// Longest prompt in the task table.
const MAX_PROMPT: usize = 40;

/// Writes one line to stdout, without control characters; a closed pipe
/// comes back as an error.
pub fn out(line: &str) -> io::Result<()> {
    writeln!(io::stdout().lock(), "{}", printable(line))
}

/// Writes lines to stdout as one block, none of another writer's between
/// them, each without control characters.
pub fn out_block(lines: &[String]) -> io::Result<()> {
    let mut stdout = io::stdout().lock();
    lines.iter().try_for_each(|line| writeln!(stdout, "{}", printable(line)))
}

/// Writes one line to stderr, without control characters, ignoring
/// failures: there is nowhere left to report them.
pub fn warn(line: &str) {
    let _ = writeln!(io::stderr().lock(), "{}", printable(line));
}

/// `text` safe for a terminal: every control character (C0 such as ESC and
/// BEL, DEL, C1 such as CSI) and every bidirectional override becomes
/// U+FFFD; only newlines and tabs stay.
pub fn printable(text: &str) -> String {
    text.chars().map(|c| if matches!(c, '\n' | '\t') || !is_unsafe(c) { c } else { '\u{fffd}' }).collect()
}

fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
}

/// The one line a failed command prints.
pub fn error_line(err: &anyhow::Error) -> String {
    format!("error: {err:#}")
}

/// Whether an error is only stdout's reader going away (`flotilla tasks | head`).
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().filter_map(|cause| cause.downcast_ref::<io::Error>()).any(|io| io.kind() == io::ErrorKind::BrokenPipe)
}

/// One event as `HH:MM:SS  type  key fields`.
pub fn event_line(event: &Value) -> String {
    let kind = event.get("type").and_then(Value::as_str).unwrap_or("event");
    let line = format!("{}  {kind:<16} {}", short_time(event.get("ts")), event_details(kind, event));
    line.trim_end().to_owned()
}

fn event_details(kind: &str, event: &Value) -> String {
    match kind {
        "queued" | "started" => fields(event, &["attempt", "worker"]),
        "sandbox_ready" => fields(event, &["sandbox_id", "warm", "ms"]),
        "plan" => plan_summary(event.get("steps")),
        "step_started" => step_summary(event),
        "reasoning" => text_of(event.get("text")),
        "action" => action_summary(event.get("action")),
        "action_completed" => join(&[action_summary(event.get("action")), took(event.get("ms"))]),
        "screenshot" => screenshot_summary(event),
        "block" => block_summary(event.get("block")),
        "waiting" => fields(event, &["code", "message"]),
        "resumed" => fields(event, &["attempt", "from_step", "sandbox_id", "interrupted"]),
        "retrying" => fields(event, &["attempt", "delay_ms", "error"]),
        "checked" => fields(event, &["verdict", "score", "stage", "reason"]),
        "succeeded" => join(&[fields(event, &["code"]), result_summary(event.get("result"))]),
        "failed" => fields(event, &["code", "error"]),
        "cancelled" => fields(event, &["code"]),
        _ => other_fields(event, &ENVELOPE),
    }
}

/// `name=value` for each present, non-null field.
fn fields(object: &Value, names: &[&str]) -> String {
    let parts: Vec<String> = names
        .iter()
        .filter_map(|name| object.get(*name).filter(|v| !v.is_null()).map(|v| format!("{name}={}", value_text(v))))
        .collect();
    parts.join(" ")
}

/// `name=value` for every field but `skip`.
fn other_fields(object: &Value, skip: &[&str]) -> String {
    let Some(map) = object.as_object() else {
        return value_text(object);
    };
    let parts: Vec<String> = map
        .iter()
        .filter(|(name, value)| !skip.contains(&name.as_str()) && !value.is_null())
        .map(|(name, value)| format!("{name}={}", value_text(value)))
        .collect();
    parts.join(" ")
}

/// A value on one line: bare words as they are, other strings quoted, the rest as compact JSON.
fn value_text(value: &Value) -> String {
    let text = match value {
        Value::String(s) if !s.is_empty() && !s.contains(char::is_whitespace) && !s.contains('"') => s.clone(),
        other => other.to_string(),
    };
    truncate(&text, MAX_VALUE)
}

fn join(parts: &[String]) -> String {
    let parts: Vec<&str> = parts.iter().map(String::as_str).filter(|p| !p.is_empty()).collect();
    parts.join(" ")
}

fn text_of(text: Option<&Value>) -> String {
    text.and_then(Value::as_str).map(|t| truncate(&one_line(t), MAX_VALUE)).unwrap_or_default()
}

fn plan_summary(steps: Option<&Value>) -> String {
    match steps {
        Some(Value::Array(steps)) => {
            let texts: Vec<String> = steps.iter().map(|s| s.as_str().map_or_else(|| s.to_string(), one_line)).collect();
            truncate(&format!("{} steps: {}", steps.len(), texts.join("; ")), MAX_VALUE)
        }
        Some(other) => value_text(other),
        None => String::new(),
    }
}

fn step_summary(event: &Value) -> String {
    let index = event.get("index").and_then(Value::as_u64).map(|i| format!("#{}", i + 1));
    join(&[index.unwrap_or_default(), text_of(event.get("text"))])
}

/// `click x=10 y=20 button=left`.
fn action_summary(action: Option<&Value>) -> String {
    let Some(action) = action else {
        return String::new();
    };
    let kind = action.get("type").and_then(Value::as_str).unwrap_or("action");
    let mut known = vec!["type"];
    known.extend(ACTION_FIELDS);
    join(&[kind.to_owned(), fields(action, &ACTION_FIELDS), other_fields(action, &known)])
}

/// `(35 ms)`: how long an action took.
fn took(ms: Option<&Value>) -> String {
    ms.and_then(Value::as_u64).map(|ms| format!("({ms} ms)")).unwrap_or_default()
}

fn screenshot_summary(event: &Value) -> String {
    let hash = event.get("hash").and_then(Value::as_str).map(|h| format!("hash={}", truncate_plain(h, 12)));
    join(&[hash.unwrap_or_default(), fields(event, &["bytes", "dedup"])])
}

fn block_summary(block: Option<&Value>) -> String {
    match block {
        Some(block) => match block.get("type").and_then(Value::as_str) {
            Some(kind) => format!("type={kind}"),
            None => value_text(block),
        },
        None => String::new(),
    }
}

/// `result="…"` from the result's text, or the result as compact JSON.
fn result_summary(result: Option<&Value>) -> String {
    let Some(result) = result.filter(|r| !r.is_null()) else {
        return String::new();
    };
    let text = result.get("text").filter(|t| !t.is_null());
    let artifacts = result.get("artifacts").and_then(Value::as_array).map_or(0, Vec::len);
    let mut parts = vec![format!("result={}", value_text(text.unwrap_or(result)))];
    if artifacts > 0 {
        parts.push(format!("artifacts={artifacts}"));
    }
    parts.join(" ")
}

/// `HH:MM:SS` (UTC) from an RFC 3339 string or epoch milliseconds.
pub fn short_time(ts: Option<&Value>) -> String {
    const UNKNOWN: &str = "--:--:--";
    match ts {
        Some(Value::String(text)) => clock_time(text),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(ms) => {
                let seconds = (ms / 1000) % 86_400;
                format!("{:02}:{:02}:{:02}", seconds / 3600, seconds / 60 % 60, seconds % 60)
            }
            None => UNKNOWN.to_owned(),
        },
        _ => UNKNOWN.to_owned(),
    }
}

/// `HH:MM:SS` from an RFC 3339 string.
pub fn clock_time(text: &str) -> String {
    text.split_once('T')
        .and_then(|(_, time)| time.get(..8))
        .filter(|t| t.len() == 8 && t.as_bytes()[2] == b':' && t.as_bytes()[5] == b':')
        .map_or_else(|| "--:--:--".to_owned(), str::to_owned)
}

/// Newlines and tabs become spaces.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// At most `max` characters, the last being `…` when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{kept}\u{2026}")
}

fn truncate_plain(text: &str, max: usize) -> String {
    text.chars().take(max).collect()
}

/// The task list as aligned lines: ID, STATUS, CODE, ATTEMPTS, CREATED, PROMPT.
pub fn task_table(tasks: &[Task]) -> Vec<String> {
    aligned(["ID", "STATUS", "CODE", "ATTEMPTS", "CREATED", "PROMPT"], tasks.iter().map(task_row))
}

/// A header and rows as lines whose columns line up, two spaces apart.
pub fn aligned<const N: usize>(header: [&str; N], rows: impl Iterator<Item = [String; N]>) -> Vec<String> {
    let rows: Vec<[String; N]> = std::iter::once(header.map(str::to_owned)).chain(rows).collect();
    let mut widths = [0usize; N];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    rows.iter()
        .map(|row| {
            let cells: Vec<String> = row.iter().zip(&widths).map(|(cell, width)| format!("{cell:<width$}")).collect();
            cells.join("  ").trim_end().to_owned()
        })
        .collect()
}

/// A JSON value as one table cell: strings on one line, `-` for none.
pub fn cell(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => one_line(s),
        Some(Value::Null) | None => "-".to_owned(),
        Some(other) => other.to_string(),
    }
}

fn task_row(task: &Task) -> [String; 6] {
    let text = |text: Option<&str>| text.map_or_else(|| "-".to_owned(), one_line);
    [
        text(task.id.as_deref()),
        text(task.status.as_ref().map(|s| s.name())),
        text(task.code.as_ref().map(|c| c.name())),
        task.attempts.map_or_else(|| "-".to_owned(), |n| n.to_string()),
        task.created_at.as_deref().map_or_else(|| "-".to_owned(), created),
        truncate(&text(task.prompt()), MAX_PROMPT),
    ]
}

/// An RFC 3339 time without its fraction of a second, or the text as given.
fn created(text: &str) -> String {
    match (text.find('.'), text.find(['Z', '+']).or_else(|| text.rfind('-'))) {
        (Some(dot), Some(zone)) if dot < zone => format!("{}{}", &text[..dot], &text[zone..]),
        _ => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Finding "Terminal escapes": event text with ESC and other control
    /// characters reached the terminal as they were.
    #[test]
    fn control_characters_never_reach_the_terminal() {
        let event = serde_json::json!({
            "type": "reasoning", "ts": "2026-01-01T00:00:00Z",
            "text": "\u{1b}]0;owned\u{7}\u{1b}[2J\u{9b}31m\u{202e}evil\u{7f}"
        });
        let line = printable(&event_line(&event));
        assert!(!line.chars().any(is_unsafe), "{line:?}");
        assert!(line.contains("]0;owned") && line.contains("evil"), "the text stays readable: {line:?}");
        assert_eq!(printable("a\tb\nc"), "a\tb\nc", "tabs and newlines stay");
    }
    use crate::client::{ApiError, ClientError};
    use serde_json::json;

    #[test]
    fn api_errors_print_as_one_line() {
        let api = ApiError {
            status: 400,
            code: "invalid_request".into(),
            message: "prompt must be 1 to 20000 characters".into(),
            field: Some("prompt".into()),
            retry_after: None,
        };
        let err = anyhow::Error::new(ClientError::Api(api));
        assert_eq!(error_line(&err), "error: invalid_request: prompt must be 1 to 20000 characters (field prompt)");
        let err = anyhow::Error::new(ClientError::Unreachable {
            url: "http://127.0.0.1:8080".into(),
            reason: "connection refused".into(),
        });
        assert_eq!(error_line(&err), "error: the API at http://127.0.0.1:8080 is unreachable (connection refused)");
        let err = anyhow::Error::new(io::Error::from(io::ErrorKind::NotFound)).context("cannot read spec file a.json");
        assert!(!error_line(&err).contains('\n'));
        assert!(error_line(&err).starts_with("error: cannot read spec file a.json: "));
    }

    #[test]
    fn broken_pipes_are_recognised() {
        let err = anyhow::Error::new(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(is_broken_pipe(&err));
        assert!(!is_broken_pipe(&anyhow::anyhow!("other")));
    }

    #[test]
    fn event_lines_show_time_type_and_key_fields() {
        let base = json!({"task_id": "tsk_1", "tenant": "acme", "seq": 2, "ts": "2026-01-02T03:04:05.678Z"});
        let with = |extra: Value| {
            let mut event = base.clone();
            if let (Some(event), Some(extra)) = (event.as_object_mut(), extra.as_object()) {
                event.extend(extra.clone());
            }
            event_line(&event)
        };
        assert_eq!(
            with(json!({"type": "started", "attempt": 1, "worker": "w-1"})),
            "03:04:05  started          attempt=1 worker=w-1"
        );
        assert_eq!(
            with(json!({"type": "action_completed", "action": {"type": "wait", "ms": 200}, "ms": 201})),
            "03:04:05  action_completed wait ms=200 (201 ms)"
        );
        assert_eq!(
            with(json!({"type": "succeeded", "code": "done", "result": {"text": "all good", "artifacts": []}})),
            "03:04:05  succeeded        code=done result=\"all good\""
        );
        assert_eq!(
            with(json!({"type": "failed", "code": "problem", "error": "sandbox gone"})),
            "03:04:05  failed           code=problem error=\"sandbox gone\""
        );
        assert_eq!(with(json!({"type": "brand_new", "x": 1})), "03:04:05  brand_new        x=1");
    }

    #[test]
    fn times_come_from_strings_or_milliseconds() {
        assert_eq!(short_time(Some(&json!("2026-01-02T23:59:58+02:00"))), "23:59:58");
        assert_eq!(short_time(Some(&json!(3_723_000u64))), "01:02:03");
        assert_eq!(short_time(Some(&json!("soon"))), "--:--:--");
        assert_eq!(short_time(None), "--:--:--");
    }

    #[test]
    fn the_task_table_aligns_and_truncates() {
        let tasks = [
            json!({"id": "tsk_1", "status": "running", "code": null, "attempts": 1, "created_at": "2026-01-02T03:04:05.123Z", "spec": {"prompt": "a".repeat(50)}}),
            json!({"id": "tsk_22", "status": "succeeded", "code": "done", "attempts": 2, "prompt": "line one\nline two"}),
        ];
        let tasks: Vec<Task> = tasks.iter().filter_map(Task::read).collect();
        let lines = task_table(&tasks);
        assert_eq!(lines[0], "ID      STATUS     CODE  ATTEMPTS  CREATED               PROMPT");
        assert_eq!(lines[1], format!("tsk_1   running    -     1         2026-01-02T03:04:05Z  {}\u{2026}", "a".repeat(39)));
        assert_eq!(lines[2], "tsk_22  succeeded  done  2         -                     line one line two");
    }
}
