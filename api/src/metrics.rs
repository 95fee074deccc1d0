//! The Prometheus text page: the fleet's queue figures as gauges, finished
//! tasks as counters. Computed from Redis on each scrape (the scheduler
//! shards' totals), so every API replica reports the same fleet-wide
//! numbers; no tenant is named, and the only labels are the four outcomes.
//! `flotilla_queue_depth` is the backlog autoscaling follows.
//!
//! With `FLOTILLA_TENANT_METRICS=1` (off by default: tenant labels can be
//! many) the page adds counters per tenant, read from each tenant's
//! all-time usage totals, which the queue keeps only while the switch is
//! on: tokens per model and direction, sandbox seconds per provider,
//! steps, screenshot bytes stored and saved, and tasks by outcome.

use std::fmt::Write;

use flotilla_queue::queue::FleetStats;
use flotilla_types::usage::{Meter, UsageView};
use flotilla_types::TenantId;

/// The content type of the Prometheus text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// Outcomes always printed, zero when none happened yet.
const OUTCOMES: [&str; 4] = ["succeeded", "failed", "cancelled", "dead"];

type FleetValue = fn(&FleetStats) -> u64;

/// Fleet-wide gauges: name, help, value.
const GAUGES: [(&str, &str, FleetValue); 3] = [
    ("flotilla_queue_depth", "Tasks ready to run and not yet handed to any worker, fleet-wide.", |f| f.queued),
    ("flotilla_queue_running", "Tasks handed to a worker and not yet ended or handed back.", |f| f.running),
    ("flotilla_queue_delayed", "Tasks waiting for a retry backoff or their not_before time.", |f| f.delayed),
];

/// Renders the metrics page.
pub fn render(stats: &FleetStats) -> String {
    let mut out = String::new();
    for (name, help, value) in GAUGES {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {}", value(stats));
    }
    let name = "flotilla_tasks_total";
    let _ = writeln!(out, "# HELP {name} Finished tasks by outcome, fleet-wide.\n# TYPE {name} counter");
    for outcome in OUTCOMES {
        let count = stats.outcomes.get(outcome).copied().unwrap_or(0);
        let _ = writeln!(out, "{name}{{outcome=\"{outcome}\"}} {count}");
    }
    out
}

/// A counter family's samples of one tenant: extra labels (each starting
/// with a comma) and value.
type TenantSamples = dyn Fn(&TenantId, &UsageView) -> Vec<(String, String)>;

/// The per-tenant counters, appended to the page when the switch is on.
pub fn render_tenants(out: &mut String, tenants: &[(TenantId, Meter)]) {
    let views: Vec<(&TenantId, UsageView)> = tenants.iter().map(|(t, m)| (t, m.view())).collect();
    let mut family = |name: &str, help: &str, samples: &TenantSamples| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (tenant, view) in &views {
            for (labels, value) in samples(tenant, view) {
                let _ = writeln!(out, "{name}{{tenant=\"{tenant}\"{labels}}} {value}");
            }
        }
    };
    family("flotilla_tenant_tokens_total", "Model tokens a tenant's tasks used, by model and direction.", &|_, v| {
        v.models
            .iter()
            .flat_map(|(model, t)| {
                let model = escape(model);
                [
                    (format!(",model=\"{model}\",direction=\"input\""), t.input_tokens.to_string()),
                    (format!(",model=\"{model}\",direction=\"output\""), t.output_tokens.to_string()),
                ]
            })
            .collect()
    });
    family("flotilla_tenant_sandbox_seconds_total", "Seconds a tenant's tasks held sandboxes, by provider.", &|_, v| {
        v.sandbox_ms
            .iter()
            .map(|(p, ms)| (format!(",provider=\"{}\"", escape(p)), format!("{:.3}", *ms as f64 / 1000.0)))
            .collect()
    });
    family("flotilla_tenant_steps_total", "Actions a tenant's tasks took.", &|_, v| vec![(String::new(), v.steps.to_string())]);
    family("flotilla_tenant_screenshot_bytes_total", "Bytes of screenshots a tenant's tasks stored.", &|_, v| {
        vec![(String::new(), v.screenshot_bytes.to_string())]
    });
    family(
        "flotilla_tenant_screenshot_bytes_saved_total",
        "Bytes of a tenant's screenshots not stored again, already there.",
        &|_, v| vec![(String::new(), v.screenshot_bytes_saved.to_string())],
    );
    family("flotilla_tenant_tasks_total", "A tenant's finished tasks, by outcome.", &|_, v| {
        OUTCOMES[..3].iter().map(|o| (format!(",outcome=\"{o}\""), v.tasks.get(*o).copied().unwrap_or(0).to_string())).collect()
    });
}

/// A label value as the text format wants it.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats() -> FleetStats {
        FleetStats { queued: 7, running: 3, delayed: 2, outcomes: [("succeeded".to_owned(), 12)].into_iter().collect() }
    }

    #[test]
    fn the_fleet_totals_are_gauges() {
        let text = render(&stats());
        assert!(text.contains("# TYPE flotilla_queue_depth gauge\nflotilla_queue_depth 7\n"), "{text}");
        assert!(text.contains("flotilla_queue_running 3\n"), "{text}");
        assert!(text.contains("flotilla_queue_delayed 2\n"), "{text}");
    }

    #[test]
    fn every_outcome_is_printed_even_at_zero() {
        let text = render(&stats());
        assert!(text.contains("# TYPE flotilla_tasks_total counter\n"), "{text}");
        assert!(text.contains("flotilla_tasks_total{outcome=\"succeeded\"} 12\n"), "{text}");
        for outcome in ["failed", "cancelled", "dead"] {
            assert!(text.contains(&format!("flotilla_tasks_total{{outcome=\"{outcome}\"}} 0\n")), "{text}");
        }
    }

    #[test]
    fn tenant_counters_carry_the_tenant_and_escape_labels() {
        let meter = Meter(
            [
                ("in:m\"x".to_owned(), 7),
                ("out:m\"x".to_owned(), 2),
                ("sandbox_ms:local".to_owned(), 1500),
                ("tasks:failed".to_owned(), 3),
            ]
            .into_iter()
            .collect(),
        );
        let mut text = String::new();
        render_tenants(&mut text, &[(TenantId::parse("acme").expect("tenant"), meter)]);
        assert!(
            text.contains("flotilla_tenant_tokens_total{tenant=\"acme\",model=\"m\\\"x\",direction=\"input\"} 7\n"),
            "{text}"
        );
        assert!(text.contains("flotilla_tenant_sandbox_seconds_total{tenant=\"acme\",provider=\"local\"} 1.500\n"), "{text}");
        assert!(text.contains("flotilla_tenant_tasks_total{tenant=\"acme\",outcome=\"failed\"} 3\n"), "{text}");
        assert!(text.contains("flotilla_tenant_tasks_total{tenant=\"acme\",outcome=\"succeeded\"} 0\n"), "{text}");
    }

    #[test]
    fn every_sample_line_has_a_name_and_a_number() {
        for line in render(&stats()).lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').expect("sample");
            assert!(series.starts_with("flotilla_"), "{line}");
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
