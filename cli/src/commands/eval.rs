//! `flotilla eval run SUITE`: submits a suite as one batch (each task as
//! given, OSWorld tasks imported, with `--matrix`, `--repeat`, `--best-of`
//! and `--stop-on-pass` as the batch's run plan), shows the batch's
//! progress bar until every run has ended, then prints its report
//! (`GET /v1/batches/{id}/report`) as a table per model and pipeline and
//! the tasks that did not pass. `flotilla eval report BATCH` prints the
//! report of a batch run before.

use std::path::Path;

use anyhow::Context;
use serde_json::{json, Map, Value};

use super::batch::{follow, on_its_line, read_jsonl};
use super::{Format, Outcome};
use crate::args::{EvalAction, EvalRunArgs};
use crate::client::Client;
use crate::display::{aligned, out, truncate};
use crate::osworld;

pub async fn run(client: &Client, action: &EvalAction, format: Format) -> anyhow::Result<Outcome> {
    match action {
        EvalAction::Run(args) => run_suite(client, args, format).await,
        EvalAction::Report(args) => show_report(client, &args.batch, format).await,
    }
}

async fn run_suite(client: &Client, args: &EvalRunArgs, format: Format) -> anyhow::Result<Outcome> {
    let shown = args.suite.display().to_string();
    let (lines, tasks) = read_suite(&args.suite, args.reference)?;
    let body = batch_body(tasks, args);
    let accepted = client.post(&["v1", "batches"], Some(&body)).await.map_err(|err| on_its_line(err, &shown, &lines))?;
    let id = accepted.value.get("id").and_then(Value::as_str).context("the API's answer has no batch id")?.to_owned();
    if format == Format::Human {
        out(&id)?;
    }
    if args.no_wait {
        if format == Format::Json {
            out(&accepted.raw)?;
        }
        return Ok(Outcome::Success);
    }
    follow(client, &id, format).await?;
    show_report(client, &id, format).await
}

async fn show_report(client: &Client, batch: &str, format: Format) -> anyhow::Result<Outcome> {
    let report = client.get(&["v1", "batches", batch, "report"], &[]).await?;
    match format {
        Format::Json => out(&report.raw)?,
        Format::Human => {
            for line in report_lines(&report.value) {
                out(&line)?;
            }
        }
    }
    let cells = report.value.get("cells").and_then(Value::as_array).cloned().unwrap_or_default();
    let all_passed = cells.iter().all(|c| c.get("passed") == c.get("groups"));
    Ok(if all_passed { Outcome::Success } else { Outcome::Unsuccessful })
}

/// The batch a suite runs as.
fn batch_body(tasks: Vec<Value>, args: &EvalRunArgs) -> Value {
    let mut body = json!({ "tasks": tasks });
    if let Some(defaults) = &args.defaults {
        body["defaults"] = defaults.clone();
    }
    if let Some(repeat) = args.repeat {
        body["repeat"] = repeat.into();
    }
    if let Some(best_of) = args.best_of {
        body["best_of"] = best_of.into();
    }
    if args.stop_on_pass {
        body["stop_on_pass"] = true.into();
    }
    if !args.matrix.is_empty() {
        let matrix: Map<String, Value> = args.matrix.iter().map(|(key, values)| (key.clone(), json!(values))).collect();
        body["matrix"] = Value::Object(matrix);
    }
    body
}

/// The suite's tasks and the line (or file number) each came from: a
/// JSON Lines file, one JSON file (a task or a list of tasks), or a folder
/// of JSON files in name order; OSWorld tasks are imported (with
/// `reference`, to run their scripted reference solutions).
fn read_suite(path: &Path, reference: bool) -> anyhow::Result<(Vec<usize>, Vec<Value>)> {
    let shown = path.display();
    let (dir, items): (&Path, Vec<(usize, Value)>) = if path.is_dir() {
        let mut files: Vec<_> = std::fs::read_dir(path)
            .with_context(|| format!("cannot read {shown}"))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        let items = files.iter().enumerate().map(|(i, file)| Ok((i + 1, read_json(file)?))).collect::<anyhow::Result<_>>()?;
        (path, items)
    } else if path.extension().is_some_and(|x| x == "json") {
        let items = match read_json(path)? {
            Value::Array(items) => items.into_iter().enumerate().map(|(i, v)| (i + 1, v)).collect(),
            one => vec![(1, one)],
        };
        (path.parent().unwrap_or(Path::new(".")), items)
    } else {
        (path.parent().unwrap_or(Path::new(".")), read_jsonl(path)?)
    };
    if items.is_empty() {
        anyhow::bail!("{shown}: no tasks in it");
    }
    let mut lines = Vec::with_capacity(items.len());
    let mut tasks = Vec::with_capacity(items.len());
    for (line, item) in items {
        let Value::Object(task) = item else { anyhow::bail!("{shown}, task {line}: a task must be a JSON object") };
        let task = if osworld::is_osworld(&task) {
            let imported = osworld::import(&task, dir, reference);
            imported.map_err(|problem| anyhow::anyhow!("{shown}, task {line}: {problem}"))?
        } else {
            Value::Object(task)
        };
        lines.push(line);
        tasks.push(task);
    }
    Ok((lines, tasks))
}

fn read_json(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: malformed JSON", path.display()))
}

/// The report for a person: one row per model and pipeline, then the
/// suite tasks that did not pass everywhere.
fn report_lines(report: &Value) -> Vec<String> {
    let cells = report.get("cells").and_then(Value::as_array).cloned().unwrap_or_default();
    let rows = cells.iter().map(cell_row);
    let header = [
        "MODEL",
        "PIPELINE",
        "TASKS",
        "RUNS",
        "PASSED",
        "PASS_RATE",
        "MEAN_SCORE",
        "PASS@K",
        "STEPS/TASK",
        "S/TASK",
        "TOKENS/TASK",
        "COST/SUCCESS",
    ];
    let mut lines = aligned(header, rows);
    let failing: Vec<String> = report
        .get("tasks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|task| {
            let name = text(task.get("name"));
            task.get("cells").and_then(Value::as_array).cloned().unwrap_or_default().into_iter().filter_map(move |cell| {
                let verdict = cell.get("verdict").and_then(Value::as_str).unwrap_or("none");
                (verdict != "passed").then(|| format!("  {}  {}  {verdict}", truncate(&name, 60), cell_name(&cell)))
            })
        })
        .collect();
    if !failing.is_empty() {
        lines.push(String::new());
        lines.push("not passed:".to_owned());
        lines.extend(failing);
    }
    lines
}

fn cell_row(cell: &Value) -> [String; 12] {
    let number = |field: &str| cell.get(field).and_then(Value::as_f64).unwrap_or(0.0);
    let spend = |part: &str, field: &str| cell.get(part).and_then(|s| s.get(field)).and_then(Value::as_f64);
    let pass_at_k = cell
        .get("pass_at_k")
        .and_then(Value::as_object)
        .map(|ks| ks.iter().map(|(k, v)| format!("@{k} {:.0}%", v.as_f64().unwrap_or(0.0) * 100.0)).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    [
        text(cell.get("model")),
        text(cell.get("pipeline")),
        format!("{}", number("tasks")),
        format!("{}", number("runs")),
        format!("{}/{}", number("passed"), number("groups")),
        format!("{:.1}%", number("pass_rate") * 100.0),
        format!("{:.2}", number("mean_score")),
        pass_at_k,
        spend("per_task", "steps").map_or("-".into(), |v| format!("{v:.1}")),
        spend("per_task", "duration_s").map_or("-".into(), |v| format!("{v:.1}")),
        spend("per_task", "tokens").map_or("-".into(), |v| format!("{v:.0}")),
        spend("per_success", "cost_usd").map_or("-".into(), |v| format!("${v:.4}")),
    ]
}

fn cell_name(cell: &Value) -> String {
    format!("{} {}", text(cell.get("model")), text(cell.get("pipeline")))
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => "-".to_owned(),
        Some(other) => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_a_row_per_model_and_the_tasks_that_did_not_pass() {
        let report = json!({
            "cells": [
                {"model": "a", "pipeline": "openai-cua", "tasks": 2, "runs": 2, "groups": 2, "passed": 1, "pass_rate": 0.5,
                 "mean_score": 0.5, "pass_at_k": {"1": 0.5}, "per_task": {"steps": 3.0, "duration_s": 2.5, "tokens": 100.0, "cost_usd": null},
                 "per_success": null},
            ],
            "tasks": [
                {"task": 0, "name": "one", "cells": [{"model": "a", "pipeline": "openai-cua", "verdict": "passed"}]},
                {"task": 1, "name": "two", "cells": [{"model": "a", "pipeline": "openai-cua", "verdict": "failed"}]},
            ]
        });
        let lines = report_lines(&report);
        assert!(lines[0].starts_with("MODEL"), "{lines:?}");
        assert!(lines[1].contains("1/2") && lines[1].contains("50.0%") && lines[1].contains("@1 50%"), "{lines:?}");
        assert_eq!(lines.last().map(String::as_str), Some("  two  a openai-cua  failed"));
    }
}
