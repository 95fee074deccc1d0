//! `flotilla schedules`: lists schedules, or creates, shows, pauses, resumes
//! or deletes one.

use serde_json::{json, Value};

use super::{Format, Outcome};
use crate::args::{CreateScheduleArgs, ScheduleAction};
use crate::client::{ApiResponse, Client};
use crate::display::{aligned, cell, out, truncate, warn};
use crate::spec::read_spec_file;

/// Longest prompt in the schedule table.
const MAX_PROMPT: usize = 40;

pub async fn run(client: &Client, action: Option<&ScheduleAction>, format: Format) -> anyhow::Result<Outcome> {
    let response = match action {
        None => return list(client, format).await,
        Some(ScheduleAction::Create(args)) => create(client, args).await?,
        Some(ScheduleAction::Show(args)) => client.get(&["v1", "schedules", &args.id], &[]).await?,
        Some(ScheduleAction::Pause(args)) => set_paused(client, &args.id, true).await?,
        Some(ScheduleAction::Resume(args)) => set_paused(client, &args.id, false).await?,
        Some(ScheduleAction::Delete(args)) => {
            client.delete(&["v1", "schedules", &args.id]).await?;
            match format {
                Format::Json => out(&json!({"id": args.id, "deleted": true}).to_string())?,
                Format::Human => out(&format!("{} deleted", args.id))?,
            }
            return Ok(Outcome::Success);
        }
    };
    match (format, action) {
        (Format::Json, _) => out(&response.raw)?,
        (Format::Human, Some(ScheduleAction::Show(_))) => out(&serde_json::to_string_pretty(&response.value)?)?,
        (Format::Human, _) => out(&summary(&response.value))?,
    }
    Ok(Outcome::Success)
}

async fn create(client: &Client, args: &CreateScheduleArgs) -> anyhow::Result<ApiResponse> {
    let task = read_spec_file(&args.spec)?;
    let body = json!({
        "cron": args.cron,
        "timezone": args.timezone,
        "task": task,
        "overlap": args.overlap,
        "paused": args.paused,
    });
    Ok(client.post(&["v1", "schedules"], Some(&body)).await?)
}

async fn set_paused(client: &Client, id: &str, paused: bool) -> anyhow::Result<ApiResponse> {
    Ok(client.patch(&["v1", "schedules", id], &json!({ "paused": paused })).await?)
}

async fn list(client: &Client, format: Format) -> anyhow::Result<Outcome> {
    let schedules = client.get_all(&["v1", "schedules"], "schedules").await?;
    if format == Format::Json {
        out(&json!({ "schedules": schedules }).to_string())?;
        return Ok(Outcome::Success);
    }
    if schedules.is_empty() {
        warn("no schedules");
        return Ok(Outcome::Success);
    }
    for line in schedule_table(&schedules) {
        out(&line)?;
    }
    Ok(Outcome::Success)
}

/// `sch_…  */5 * * * * UTC  next 2026-07-01T07:00:00Z` (or `paused`).
fn summary(schedule: &Value) -> String {
    let text = |field: &str| schedule.get(field).and_then(Value::as_str).unwrap_or("-").to_owned();
    let next = match schedule.get("next_run_at").and_then(Value::as_str) {
        Some(at) => format!("next {at}"),
        None => "paused".to_owned(),
    };
    format!("{}  {} {}  {next}", text("id"), text("cron"), text("timezone"))
}

/// The schedules as aligned lines: ID, CRON, TIMEZONE, OVERLAP, NEXT RUN, LAST TASK, PROMPT.
fn schedule_table(schedules: &[Value]) -> Vec<String> {
    aligned(["ID", "CRON", "TIMEZONE", "OVERLAP", "NEXT RUN", "LAST TASK", "PROMPT"], schedules.iter().map(schedule_row))
}

fn schedule_row(schedule: &Value) -> [String; 7] {
    let next = if schedule.get("paused").and_then(Value::as_bool) == Some(true) {
        "paused".to_owned()
    } else {
        cell(schedule.get("next_run_at"))
    };
    [
        cell(schedule.get("id")),
        cell(schedule.get("cron")),
        cell(schedule.get("timezone")),
        cell(schedule.get("overlap")),
        next,
        cell(schedule.get("last_run").and_then(|run| run.get("task_id"))),
        truncate(&cell(schedule.get("task").and_then(|task| task.get("prompt"))), MAX_PROMPT),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schedule_reads_as_one_line_and_a_table_row() {
        let schedule = json!({
            "id": "sch_1", "cron": "0 9 * * *", "timezone": "Europe/Berlin", "overlap": "skip", "paused": false,
            "next_run_at": "2026-07-01T07:00:00Z", "last_run": null, "task": {"prompt": "file the report"}
        });
        assert_eq!(summary(&schedule), "sch_1  0 9 * * * Europe/Berlin  next 2026-07-01T07:00:00Z");
        let table = schedule_table(&[schedule]);
        assert_eq!(table.len(), 2);
        assert!(table[0].starts_with("ID"));
        assert!(table[1].contains("2026-07-01T07:00:00Z") && table[1].ends_with("file the report"), "{}", table[1]);
        let paused = json!({"id": "sch_2", "cron": "* * * * *", "timezone": "UTC", "paused": true, "next_run_at": null});
        assert!(summary(&paused).ends_with("paused"));
        assert_eq!(schedule_row(&paused)[4], "paused");
    }
}
