//! The Prometheus text page: the fleet's queue figures as gauges, finished
//! tasks as counters. Computed from Redis on each scrape (the scheduler
//! shards' totals), so every API replica reports the same fleet-wide
//! numbers; no tenant is named, and the only labels are the four outcomes.
//! `flotilla_queue_depth` is the backlog autoscaling follows.

use std::fmt::Write;

use flotilla_shared::queue::FleetStats;

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
    fn every_sample_line_has_a_name_and_a_number() {
        for line in render(&stats()).lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').expect("sample");
            assert!(series.starts_with("flotilla_"), "{line}");
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
