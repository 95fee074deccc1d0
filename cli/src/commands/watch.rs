//! `flotilla watch`: follows one or more tasks' event streams at once, one
//! line per event plus a progress line when a task's progress changes, then
//! a summary when several were watched. Each task's lines come in the order
//! of its events (one reader per task, each line written whole), and lines
//! of different tasks interleave as their events arrive; with `--json` each
//! line is one event's JSON, which names its task.

use anyhow::bail;
use futures::future::join_all;

use super::{Format, Outcome};
use crate::client::Client;
use crate::display::{event_line, is_broken_pipe, out, warn};
use crate::feed::{EventFeed, Reconnect, TaskEvent};
use crate::progress::Progress;
use crate::record::Task;

/// How a watched task ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Succeeded,
    Failed,
    Cancelled,
    /// It could not be followed to its end (the error was printed).
    Lost,
}

impl End {
    fn of(event: &TaskEvent) -> Self {
        match event.kind() {
            "succeeded" => End::Succeeded,
            "cancelled" => End::Cancelled,
            _ => End::Failed,
        }
    }
}

/// Follows `ids` until each ends; success only if all succeeded.
pub async fn run(client: &Client, ids: &[String], format: Format) -> anyhow::Result<Outcome> {
    if let [id] = ids {
        let end = follow(client, id, format, None).await?;
        return Ok(outcome(&[end]));
    }
    let width = ids.iter().map(|id| id.chars().count()).max().unwrap_or(0);
    let prefixes: Vec<String> = ids.iter().map(|id| format!("{id:<width$}")).collect();
    let watches = ids.iter().zip(&prefixes).map(|(id, prefix)| follow_reporting(client, id, prefix, format));
    let ends = join_all(watches).await.into_iter().collect::<anyhow::Result<Vec<End>>>()?;
    if format == Format::Human {
        out(&summary(&ends))?;
    }
    Ok(outcome(&ends))
}

/// Follows one of several tasks; its error is printed at once so the others go on.
async fn follow_reporting(client: &Client, id: &str, prefix: &str, format: Format) -> anyhow::Result<End> {
    match follow(client, id, format, Some(prefix)).await {
        Ok(end) => Ok(end),
        Err(err) if is_broken_pipe(&err) => Err(err),
        Err(err) => {
            warn(&format!("{prefix}  error: {err:#}"));
            Ok(End::Lost)
        }
    }
}

/// Prints one task's events until its terminal one; `prefix` tells tasks
/// apart for a person (JSON lines carry their `task_id` and stay bare JSON).
async fn follow(client: &Client, id: &str, format: Format, prefix: Option<&str>) -> anyhow::Result<End> {
    let show = |line: &str| match prefix.filter(|_| format == Format::Human) {
        Some(prefix) => out(&format!("{prefix}  {line}")),
        None => out(line),
    };
    let mut progress = match format {
        Format::Human => {
            let task = client.get(&["v1", "tasks", id], &[]).await?;
            Some(Progress::from_task(&Task::read(&task.value).unwrap_or_default()))
        }
        Format::Json => None,
    };
    let mut feed = EventFeed::new(client, id, Reconnect::default());
    while let Some(event) = feed.next().await? {
        match progress.as_mut() {
            None => show(&compact(&event))?,
            Some(progress) => {
                show(&event_line(&event.value))?;
                if progress.observe(&event.value) && !event.is_terminal() {
                    show(&format!("          {}", progress.line()))?;
                }
            }
        }
        if event.is_terminal() {
            return Ok(End::of(&event));
        }
    }
    bail!("the event stream of {id} ended without a final event")
}

/// The event's JSON on one line, as sent unless the server spread it over several.
fn compact(event: &TaskEvent) -> String {
    if event.raw.contains('\n') {
        return event.value.to_string();
    }
    event.raw.clone()
}

fn outcome(ends: &[End]) -> Outcome {
    if ends.iter().all(|end| *end == End::Succeeded) {
        Outcome::Success
    } else {
        Outcome::Unsuccessful
    }
}

/// `3 tasks: 2 succeeded, 1 failed, 0 cancelled` (and how many were lost, if any).
fn summary(ends: &[End]) -> String {
    let count = |wanted: End| ends.iter().filter(|end| **end == wanted).count();
    let mut line = format!(
        "{} tasks: {} succeeded, {} failed, {} cancelled",
        ends.len(),
        count(End::Succeeded),
        count(End::Failed),
        count(End::Cancelled)
    );
    let lost = count(End::Lost);
    if lost > 0 {
        line.push_str(&format!(", {lost} not followed to the end"));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_all_succeeded_is_success() {
        assert_eq!(outcome(&[End::Succeeded, End::Succeeded]), Outcome::Success);
        assert_eq!(outcome(&[End::Succeeded, End::Cancelled]), Outcome::Unsuccessful);
        assert_eq!(outcome(&[End::Lost]), Outcome::Unsuccessful);
    }

    #[test]
    fn the_summary_counts_each_ending() {
        assert_eq!(summary(&[End::Succeeded, End::Failed, End::Succeeded]), "3 tasks: 2 succeeded, 1 failed, 0 cancelled");
        assert_eq!(
            summary(&[End::Cancelled, End::Lost]),
            "2 tasks: 0 succeeded, 0 failed, 1 cancelled, 1 not followed to the end"
        );
    }
}
