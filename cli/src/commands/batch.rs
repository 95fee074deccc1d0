//! `flotilla batch FILE.jsonl`: submits one batch (one spec per line, with
//! `--defaults` under each) and shows a progress bar over the batch's counts
//! until every task has ended; `--no-wait` prints the id and returns.

use std::io::{IsTerminal, Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use flotilla_types::task::TaskStatus;
use serde_json::{json, Value};

use super::{Format, Outcome};
use crate::args::BatchArgs;
use crate::client::{Client, ClientError};
use crate::display::{out, warn};
use crate::json_text::{self, Position};

/// How often the batch's counts are read while waiting.
const POLL_EVERY: Duration = Duration::from_millis(500);
/// Without a terminal, a progress line at most this often.
const LINE_EVERY: Duration = Duration::from_secs(5);
/// Width of the bar in characters.
const BAR_WIDTH: usize = 30;

pub async fn run(client: &Client, args: &BatchArgs, format: Format) -> anyhow::Result<Outcome> {
    let specs = read_jsonl(&args.file)?;
    let mut body = json!({ "tasks": specs.iter().map(|(_, spec)| spec).collect::<Vec<_>>() });
    if let Some(defaults) = &args.defaults {
        body["defaults"] = defaults.clone();
    }
    let lines: Vec<usize> = specs.iter().map(|(line, _)| *line).collect();
    let accepted = client
        .post(&["v1", "batches"], Some(&body))
        .await
        .map_err(|err| on_its_line(err, &args.file.display().to_string(), &lines))?;
    let id = accepted.value.get("id").and_then(Value::as_str).context("the API's answer has no batch id")?.to_owned();
    match format {
        Format::Json => out(&accepted.raw)?,
        Format::Human => out(&id)?,
    }
    if args.no_wait {
        return Ok(Outcome::Success);
    }
    let last = follow(client, &id, format).await?;
    if format == Format::Json {
        out(&last.raw)?;
    }
    let counts = Counts::of(&last.value);
    Ok(if counts.get(TaskStatus::Failed) + counts.get(TaskStatus::Cancelled) == 0 {
        Outcome::Success
    } else {
        Outcome::Unsuccessful
    })
}

/// Reads the batch until every task has ended, drawing progress on stderr
/// for a person. Returns the last answer.
pub(super) async fn follow(client: &Client, id: &str, format: Format) -> anyhow::Result<crate::client::ApiResponse> {
    let terminal = format == Format::Human && std::io::stderr().is_terminal();
    let started = Instant::now();
    let mut last_line: Option<Instant> = None;
    loop {
        let batch = client.get(&["v1", "batches", id], &[]).await?;
        let counts = Counts::of(&batch.value);
        let total = batch.value.get("total").and_then(Value::as_u64).unwrap_or(counts.sum());
        let done = counts.ended() >= total;
        if format == Format::Human {
            let line = progress_line(&counts, total, started.elapsed());
            if terminal {
                let mut err = std::io::stderr().lock();
                let _ = write!(err, "\r{line}\x1b[K");
                if done {
                    let _ = writeln!(err);
                }
            } else if done || last_line.is_none_or(|at| at.elapsed() >= LINE_EVERY) {
                warn(&line);
                last_line = Some(Instant::now());
            }
        }
        if done {
            return Ok(batch);
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// A batch's counts by status, in the order of [`TaskStatus::ALL`] (the
/// order the progress line shows them).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Counts(Vec<(TaskStatus, u64)>);

impl Counts {
    fn of(batch: &Value) -> Self {
        let counts = batch.get("counts");
        let count = |status: TaskStatus| counts.and_then(|c| c.get(status.as_str())).and_then(Value::as_u64).unwrap_or(0);
        Self(TaskStatus::ALL.into_iter().map(|status| (status, count(status))).collect())
    }

    fn get(&self, status: TaskStatus) -> u64 {
        self.0.iter().find(|(s, _)| *s == status).map_or(0, |(_, n)| *n)
    }

    fn ended(&self) -> u64 {
        self.0.iter().filter(|(status, _)| status.is_terminal()).map(|(_, n)| n).sum()
    }

    fn sum(&self) -> u64 {
        self.0.iter().map(|(_, n)| n).sum()
    }
}

/// `[#######-------]  420/1000  queued 300  running 280  succeeded 410  failed 10  12.3/s`
fn progress_line(counts: &Counts, total: u64, elapsed: Duration) -> String {
    let ended = counts.ended();
    let filled = if total == 0 { BAR_WIDTH } else { (ended.min(total) as usize * BAR_WIDTH) / total as usize };
    let bar = format!("{}{}", "#".repeat(filled), "-".repeat(BAR_WIDTH - filled));
    let mut line = format!("[{bar}] {ended}/{total}");
    for (status, n) in &counts.0 {
        if *n > 0 {
            line.push_str(&format!("  {status} {n}"));
        }
    }
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 && ended > 0 {
        line.push_str(&format!("  {:.1}/s", ended as f64 / secs));
    }
    line
}

/// An error of the API about `tasks[i]` told as one about the line of the
/// file the task came from: `FILE, line 4: invalid_request: … (field
/// priority)`; any other error as it is.
pub(super) fn on_its_line(err: ClientError, file: &str, lines: &[usize]) -> anyhow::Error {
    let ClientError::Api(api) = &err else { return err.into() };
    let Some((index, rest)) = api.field.as_deref().and_then(task_index) else { return err.into() };
    let Some(line) = lines.get(index) else { return err.into() };
    let mut message = format!("{file}, line {line}: {}: {}", api.code, api.message);
    if !rest.is_empty() {
        message.push_str(&format!(" (field {rest})"));
    }
    anyhow::anyhow!(message)
}

/// `tasks[3].prompt` → `(3, "prompt")`.
fn task_index(field: &str) -> Option<(usize, &str)> {
    let (index, rest) = field.strip_prefix("tasks[")?.split_once(']')?;
    Some((index.parse().ok()?, rest.trim_start_matches('.')))
}

/// The specs of a JSON Lines file (or stdin for `-`): one object per
/// non-blank line, each with its line number.
pub(super) fn read_jsonl(path: &Path) -> anyhow::Result<Vec<(usize, Value)>> {
    let shown = path.display();
    let text = if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).context("cannot read the specs from stdin")?;
        text
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {shown}"))?
    };
    parse_jsonl(&text).map_err(|problem| anyhow::anyhow!("{shown}{problem}"))
}

/// The specs of JSON Lines text; an error reads on from the file's name:
/// `, line 3: malformed JSON: …` or `: no specs in it`.
fn parse_jsonl(text: &str) -> Result<Vec<(usize, Value)>, String> {
    let mut specs = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let number = index + 1;
        match json_text::parse(line, Position::Column) {
            Ok(Value::Object(spec)) => specs.push((number, Value::Object(spec))),
            Ok(_) => return Err(format!(", line {number}: a spec must be a JSON object")),
            Err(problem) => return Err(format!(", line {number}: {problem}")),
        }
    }
    if specs.is_empty() {
        return Err(": no specs in it".to_owned());
    }
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ApiError;

    #[test]
    fn json_lines_skip_blanks_and_name_the_bad_line_once() {
        let specs = parse_jsonl("{\"prompt\": \"a\"}\n\n{\"prompt\": \"b\"}\n").expect("parses");
        assert_eq!(specs.iter().map(|(line, _)| *line).collect::<Vec<_>>(), [1, 3]);
        let err = parse_jsonl("{\"prompt\": \"a\"}\n[1]\n").expect_err("refused");
        assert_eq!(err, ", line 2: a spec must be a JSON object");
        let err = parse_jsonl("{\"prompt\": \"a\"}\n\n{\"prompt\": \n").expect_err("refused");
        assert!(err.starts_with(", line 3: malformed JSON: it ends too soon"), "{err}");
        assert_eq!(err.matches("line").count(), 1, "{err}");
        assert_eq!(parse_jsonl("\n \n").expect_err("empty"), ": no specs in it");
    }

    #[test]
    fn an_api_error_about_a_task_names_its_line() {
        let api = |field: Option<&str>| {
            ClientError::Api(ApiError {
                status: 400,
                code: "invalid_request".into(),
                message: "unknown variant".into(),
                field: field.map(str::to_owned),
                retry_after: None,
            })
        };
        let err = on_its_line(api(Some("tasks[1].priority")), "b.jsonl", &[1, 3, 4]);
        assert_eq!(err.to_string(), "b.jsonl, line 3: invalid_request: unknown variant (field priority)");
        let err = on_its_line(api(Some("tasks[2]")), "b.jsonl", &[1, 3, 4]);
        assert_eq!(err.to_string(), "b.jsonl, line 4: invalid_request: unknown variant");
        let err = on_its_line(api(Some("defaults.priority")), "b.jsonl", &[1]);
        assert_eq!(err.to_string(), "invalid_request: unknown variant (field defaults.priority)");
    }

    #[test]
    fn the_progress_line_shows_the_bar_the_counts_and_the_rate() {
        let counts = Counts::of(&json!({"counts": {"queued": 5, "running": 1, "succeeded": 3, "failed": 1}}));
        assert_eq!((counts.ended(), counts.sum()), (4, 10));
        let line = progress_line(&counts, 10, Duration::from_secs(2));
        assert_eq!(
            line,
            format!("[{}{}] 4/10  queued 5  running 1  succeeded 3  failed 1  2.0/s", "#".repeat(12), "-".repeat(18))
        );
        let none = progress_line(&Counts::default(), 10, Duration::ZERO);
        assert_eq!(none, format!("[{}] 0/10", "-".repeat(30)));
    }
}
