//! `flotilla usage`: what the caller's tenant used per UTC day, from
//! `GET /v1/usage`, as a table of days (tasks, tokens, sandbox seconds,
//! steps, screenshot bytes) with the total, then its limits and what is
//! left of them.

use serde_json::Value;

use super::{print_answer, Format, Outcome};
use crate::args::UsageArgs;
use crate::client::Client;
use crate::display::{aligned, cell};

pub async fn run(client: &Client, args: &UsageArgs, format: Format) -> anyhow::Result<Outcome> {
    let query = [("from", args.from.clone()), ("to", args.to.clone())];
    let response = client.get(&["v1", "usage"], &query).await?;
    print_answer(&response, format, lines)
}

/// One day's (or the total's) figures as table cells.
fn row(label: String, usage: &Value) -> [String; 8] {
    let number = |field: &str| usage.get(field).and_then(Value::as_u64).unwrap_or(0);
    let tasks: u64 = usage.get("tasks").and_then(Value::as_object).map_or(0, |t| t.values().filter_map(Value::as_u64).sum());
    let sandbox_ms: u64 =
        usage.get("sandbox_ms").and_then(Value::as_object).map_or(0, |p| p.values().filter_map(Value::as_u64).sum());
    [
        label,
        tasks.to_string(),
        number("input_tokens").to_string(),
        number("output_tokens").to_string(),
        format!("{:.1}", sandbox_ms as f64 / 1000.0),
        number("steps").to_string(),
        number("screenshot_bytes").to_string(),
        number("screenshot_bytes_saved").to_string(),
    ]
}

/// The report as tables for a person.
fn lines(report: &Value) -> Vec<String> {
    let days = report.get("days").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut rows: Vec<[String; 8]> = days.iter().map(|d| row(cell(d.get("day")), d)).collect();
    rows.push(row("total".into(), report.get("total").unwrap_or(&Value::Null)));
    let header = ["DAY", "TASKS", "TOKENS_IN", "TOKENS_OUT", "SANDBOX_S", "STEPS", "SCREENSHOT_BYTES", "BYTES_SAVED"];
    let mut lines = vec![format!("{} to {}", cell(report.get("from")), cell(report.get("to")))];
    lines.extend(aligned(header, rows.into_iter()));
    let limits = report.get("limits").cloned().unwrap_or_default();
    lines.push(String::new());
    let rate = limits
        .get("rate")
        .filter(|r| !r.is_null())
        .map_or("-".to_owned(), |r| format!("{}/s, burst {}", cell(r.get("per_second")), cell(r.get("burst"))));
    let limit_rows = [
        [
            "max_queued".to_owned(),
            cell(limits.get("max_queued")),
            format!("{} queued, {} left", cell(limits.get("queued")), cell(limits.get("queued_left"))),
        ],
        ["rate".to_owned(), rate, String::new()],
        [
            "max_tokens_per_day".to_owned(),
            cell(limits.get("max_tokens_per_day")),
            format!("{} today, {} left", cell(limits.get("tokens_today")), cell(limits.get("tokens_left_today"))),
        ],
        ["max_sandboxes".to_owned(), cell(limits.get("max_sandboxes")), String::new()],
        ["max_schedules".to_owned(), cell(limits.get("max_schedules")), String::new()],
    ];
    lines.extend(aligned(["LIMIT", "VALUE", "NOW"], limit_rows.into_iter()));
    lines
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::lines;

    #[test]
    fn days_the_total_and_the_limits_are_printed() {
        let day = json!({"day": "2026-03-02", "tasks": {"succeeded": 3, "failed": 1}, "input_tokens": 2000, "output_tokens": 100,
            "models": {}, "sandbox_ms": {"local": 1500, "e2b": 500}, "steps": 7, "screenshot_bytes": 900, "screenshot_bytes_saved": 300});
        let report = json!({
            "from": "2026-03-01", "to": "2026-03-02", "group_by": "day", "days": [day.clone()], "total": day,
            "limits": {"max_queued": 10, "queued": 4, "queued_left": 6, "rate": null, "max_tokens_per_day": 5000,
                "tokens_today": 2100, "tokens_left_today": 2900, "max_sandboxes": 2, "max_schedules": 100}
        });
        let text = lines(&report).join("\n");
        assert!(text.starts_with("2026-03-01 to 2026-03-02\nDAY         TASKS  TOKENS_IN"), "{text}");
        assert!(text.contains("2026-03-02  4      2000       100         2.0        7      900               300"), "{text}");
        assert!(text.contains("total       4      2000"), "{text}");
        assert!(text.contains("max_tokens_per_day  5000   2100 today, 2900 left"), "{text}");
        assert!(text.contains("max_sandboxes       2"), "{text}");
    }
}
