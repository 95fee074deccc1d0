//! `flotilla watch`: follows one or more tasks' event streams at once, then
//! a summary when several were watched.
//!
//! By default it says what matters: a task's milestones (started, waiting,
//! taken over and handed back, retried, resumed, checked, ended) and, at its
//! end, how many actions and screenshots it took. With several tasks each
//! task's lines are printed together once it ends, in its events' order;
//! only what needs a person (`waiting`, `takeover`) is printed at once, so
//! nobody waits on a task asking for approval unseen. `--verbose` prints one
//! line per event as it comes, and a progress line when a task's progress
//! changes (lines of different tasks interleave as their events arrive);
//! with `--json` each line is one event's JSON, which names its task.

use anyhow::bail;
use futures::future::join_all;

use super::{Format, Outcome};
use crate::client::Client;
use crate::display::{event_line, is_broken_pipe, out, out_block, warn};
use crate::feed::{EventFeed, Reconnect, TaskEvent};
use crate::progress::Progress;
use crate::record::Task;

/// The events a default (not `--verbose`) watch prints.
const MILESTONES: [&str; 12] = [
    "started",
    "plan",
    "waiting",
    "input",
    "takeover",
    "released",
    "resumed",
    "retrying",
    "checked",
    "succeeded",
    "failed",
    "cancelled",
];

/// Events printed at once even while a task's lines are kept for its end:
/// the task waits for a person.
const NEEDS_A_PERSON: [&str; 2] = ["waiting", "takeover"];

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
pub async fn run(client: &Client, ids: &[String], format: Format, verbose: bool) -> anyhow::Result<Outcome> {
    if let [id] = ids {
        let end = follow(client, id, Shown { format, verbose, prefix: None }).await?;
        return Ok(outcome(&[end]));
    }
    let width = ids.iter().map(|id| id.chars().count()).max().unwrap_or(0);
    let prefixes: Vec<String> = ids.iter().map(|id| format!("{id:<width$}")).collect();
    let watches = ids
        .iter()
        .zip(&prefixes)
        .map(|(id, prefix)| follow_reporting(client, id, Shown { format, verbose, prefix: Some(prefix) }));
    let ends = join_all(watches).await.into_iter().collect::<anyhow::Result<Vec<End>>>()?;
    if format == Format::Human {
        out(&summary(&ends))?;
    }
    Ok(outcome(&ends))
}

/// How a watch shows one task's events.
#[derive(Debug, Clone, Copy)]
struct Shown<'a> {
    format: Format,
    verbose: bool,
    /// Tells tasks apart when several are watched.
    prefix: Option<&'a str>,
}

impl Shown<'_> {
    /// The line as printed: after the task's prefix, for a person (JSON
    /// lines carry their `task_id` and stay bare JSON).
    fn line(&self, line: &str) -> String {
        match self.prefix.filter(|_| self.format == Format::Human) {
            Some(prefix) => format!("{prefix}  {line}"),
            None => line.to_owned(),
        }
    }

    /// Whether the task's lines are kept and printed together at its end.
    fn grouped(&self) -> bool {
        self.format == Format::Human && !self.verbose && self.prefix.is_some()
    }
}

/// Follows one of several tasks; its error is printed at once so the others go on.
async fn follow_reporting(client: &Client, id: &str, shown: Shown<'_>) -> anyhow::Result<End> {
    match follow(client, id, shown).await {
        Ok(end) => Ok(end),
        Err(err) if is_broken_pipe(&err) => Err(err),
        Err(err) => {
            warn(&shown.line(&format!("error: {err:#}")));
            Ok(End::Lost)
        }
    }
}

/// Prints one task's events until its terminal one, as `shown` says.
async fn follow(client: &Client, id: &str, shown: Shown<'_>) -> anyhow::Result<End> {
    let mut progress = match (shown.format, shown.verbose) {
        (Format::Human, true) => {
            let task = client.get(&["v1", "tasks", id], &[]).await?;
            Some(Progress::from_task(&Task::read(&task.value).unwrap_or_default()))
        }
        _ => None,
    };
    let mut kept = Vec::new();
    let mut tally = Tally::default();
    let mut feed = EventFeed::new(client, id, Reconnect::default());
    while let Some(event) = feed.next().await? {
        if shown.format == Format::Json {
            out(&compact(&event))?;
        } else if let Some(progress) = progress.as_mut() {
            out(&shown.line(&event_line(&event.value)))?;
            if progress.observe(&event.value) && !event.is_terminal() {
                out(&shown.line(&format!("          {}", progress.line())))?;
            }
        } else {
            tally.count(event.kind());
            if MILESTONES.contains(&event.kind()) {
                let line = shown.line(&event_line(&event.value));
                if !shown.grouped() || NEEDS_A_PERSON.contains(&event.kind()) {
                    out(&line)?;
                }
                if shown.grouped() {
                    kept.push(line);
                }
            }
            if event.is_terminal() {
                kept.push(shown.line(&format!("          {}", tally.line())));
                out_block(&kept)?;
            }
        }
        if event.is_terminal() {
            return Ok(End::of(&event));
        }
    }
    bail!("the event stream of {id} ended without a final event")
}

/// What a task did, counted for the line a quiet watch ends it with.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Tally {
    actions: usize,
    screenshots: usize,
}

impl Tally {
    fn count(&mut self, kind: &str) {
        match kind {
            "action_completed" => self.actions += 1,
            "screenshot" => self.screenshots += 1,
            _ => {}
        }
    }

    /// `3 actions, 1 screenshot`.
    fn line(&self) -> String {
        format!("{}, {}", plural(self.actions, "action"), plural(self.screenshots, "screenshot"))
    }
}

/// `1 action`, `2 actions`.
fn plural(count: usize, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else {
        format!("{count} {noun}s")
    }
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
    fn a_tally_counts_actions_and_screenshots_and_pluralises() {
        let mut tally = Tally::default();
        assert_eq!(tally.line(), "0 actions, 0 screenshots");
        for kind in ["action", "action_completed", "screenshot", "started"] {
            tally.count(kind);
        }
        assert_eq!(tally.line(), "1 action, 1 screenshot");
        tally.count("action_completed");
        assert_eq!(tally.line(), "2 actions, 1 screenshot");
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
