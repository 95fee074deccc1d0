//! `flotilla queues`: the caller's queue figures from `GET /v1/queues`:
//! queued, running and delayed tasks per tenant, the lanes, and the queued
//! tasks waiting for a capability no live worker offers.

use serde_json::Value;

use super::{print_answer, Format, Outcome};
use crate::client::Client;
use crate::display::{aligned, cell};

pub async fn run(client: &Client, format: Format) -> anyhow::Result<Outcome> {
    let response = client.get(&["v1", "queues"], &[]).await?;
    print_answer(&response, format, lines)
}

/// The figures as tables for a person.
fn lines(stats: &Value) -> Vec<String> {
    let list = |name: &str| stats.get(name).and_then(Value::as_array).cloned().unwrap_or_default();
    let tenants = list("tenants")
        .into_iter()
        .map(|t| ["tenant", "queued", "running", "delayed", "weight", "max_running"].map(|field| cell(t.get(field))));
    let mut lines = aligned(["TENANT", "QUEUED", "RUNNING", "DELAYED", "WEIGHT", "MAX_RUNNING"], tenants);
    lines.push(String::new());
    let lanes = list("lanes")
        .into_iter()
        .map(|l| ["lane", "depth", "pending", "delayed", "oldest_age_ms", "consumers"].map(|field| cell(l.get(field))));
    lines.extend(aligned(["LANE", "WAITING", "RUNNING", "DELAYED", "OLDEST_WAITING_MS", "WORKERS"], lanes));
    let waits = list("waiting_for");
    if !waits.is_empty() {
        lines.push(String::new());
        let rows = waits.into_iter().map(|w| [cell(w.get("capability")), cell(w.get("queued"))]);
        lines.extend(aligned(["WAITING FOR", "QUEUED"], rows));
    }
    lines.push(format!("dead letters: {}", cell(stats.get("dead"))));
    lines
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::lines;

    #[test]
    fn the_figures_print_per_tenant_lane_and_missing_capability() {
        let stats = json!({
            "tenants": [{"tenant": "acme", "queued": 12, "running": 3, "delayed": 0, "weight": 2, "max_running": null}],
            "lanes": [{"lane": "high", "depth": 2, "pending": 1, "delayed": 0, "oldest_age_ms": 40, "consumers": 2}],
            "waiting_for": [{"capability": "label:eu", "queued": 1}],
            "dead": 0
        });
        let text = lines(&stats).join("\n");
        assert!(
            text.starts_with(
                "TENANT  QUEUED  RUNNING  DELAYED  WEIGHT  MAX_RUNNING\nacme    12      3        0        2       -"
            ),
            "{text}"
        );
        assert!(text.contains("WAITING FOR  QUEUED\nlabel:eu     1"), "{text}");
        assert!(text.ends_with("dead letters: 0"), "{text}");
    }
}
