//! The task resource commands: `tasks` (list), `task` (show one), `cancel`,
//! and `approve`/`deny` for a task that waits for a human.

use serde_json::Value;

use super::{print_answer, Format, Outcome};
use crate::args::{InputArgs, TasksArgs};
use crate::client::Client;
use crate::display::{out, task_table, warn};
use crate::record::Task;
use crate::task_summary;

/// `GET /v1/tasks`: a table, and how to get the next page.
pub async fn list(client: &Client, args: &TasksArgs, format: Format) -> anyhow::Result<Outcome> {
    let query = [
        ("status", args.status.map(|s| s.as_str().to_owned())),
        ("batch", args.batch.clone()),
        ("limit", args.limit.map(|n| n.to_string())),
        ("cursor", args.cursor.clone()),
    ];
    let response = client.get(&["v1", "tasks"], &query).await?;
    if format == Format::Json {
        out(&response.raw)?;
        return Ok(Outcome::Success);
    }
    let listed = response.value.get("tasks").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    let tasks: Vec<Task> = listed.iter().filter_map(Task::read).collect();
    if tasks.is_empty() {
        warn("no tasks");
    } else {
        for line in task_table(&tasks) {
            out(&line)?;
        }
    }
    if let Some(cursor) = response.value.get("next_cursor").and_then(Value::as_str) {
        warn(&format!("more: flotilla tasks --cursor {cursor}"));
    }
    Ok(Outcome::Success)
}

/// `GET /v1/tasks/{id}`: a summary for a person, the record as sent with `--json`.
pub async fn show(client: &Client, id: &str, format: Format) -> anyhow::Result<Outcome> {
    let response = client.get(&["v1", "tasks", id], &[]).await?;
    print_answer(&response, format, task_summary::lines)
}

/// `POST /v1/tasks/{id}/cancel`.
pub async fn cancel(client: &Client, id: &str, format: Format) -> anyhow::Result<Outcome> {
    let response = client.post(&["v1", "tasks", id, "cancel"], None).await?;
    match (format, response.value.get("status").and_then(Value::as_str)) {
        (Format::Json, _) => out(&response.raw)?,
        (Format::Human, Some(status)) => out(&format!("{id} {status}"))?,
        (Format::Human, None) => out(&format!("{id} cancel requested"))?,
    }
    Ok(Outcome::Success)
}

/// `POST /v1/tasks/{id}/input` with `decision` (`approve` or `deny`).
pub async fn answer(client: &Client, args: &InputArgs, decision: &str, format: Format) -> anyhow::Result<Outcome> {
    let mut body = serde_json::json!({ "decision": decision });
    if let Some(message) = &args.message {
        body["message"] = Value::String(message.clone());
    }
    let response = client.post(&["v1", "tasks", &args.id, "input"], Some(&body)).await?;
    match format {
        Format::Json => out(&response.raw)?,
        Format::Human => out(&format!("{} {}", args.id, if decision == "deny" { "denied" } else { "approved" }))?,
    }
    Ok(Outcome::Success)
}
