//! The Prometheus text page: the queue's figures as gauges, finished tasks
//! as counters. Computed from Redis on each scrape, so every API replica
//! reports the same fleet-wide numbers; labels are only the three lanes and
//! the four outcomes.

use std::fmt::Write;

use flotilla_shared::queue::{LaneStats, QueueStats};

/// The content type of the Prometheus text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// Outcomes always printed, zero when none happened yet.
const OUTCOMES: [&str; 4] = ["succeeded", "failed", "cancelled", "dead"];

type LaneValue = fn(&LaneStats) -> String;

/// Per-lane gauges: name, help, value.
const LANE_GAUGES: [(&str, &str, LaneValue); 5] = [
    ("flotilla_queue_depth", "Tasks in a lane not yet handed to any worker.", |l| l.depth.to_string()),
    ("flotilla_queue_pending", "Tasks handed to a worker and not yet acknowledged.", |l| l.pending.to_string()),
    ("flotilla_queue_delayed", "Tasks waiting for a retry backoff or their not_before time.", |l| l.delayed.to_string()),
    ("flotilla_queue_oldest_age_seconds", "Age of the oldest entry still in a lane.", |l| {
        format!("{}", l.oldest_age_ms as f64 / 1000.0)
    }),
    ("flotilla_queue_consumers", "Workers that have read from a lane.", |l| l.consumers.to_string()),
];

/// Renders the metrics page.
pub fn render(stats: &QueueStats) -> String {
    let mut out = String::new();
    for (name, help, value) in LANE_GAUGES {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for lane in &stats.lanes {
            let _ = writeln!(out, "{name}{{lane=\"{}\"}} {}", lane.lane.as_str(), value(lane));
        }
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
    use flotilla_shared::task::Priority;

    fn stats() -> QueueStats {
        let lane = |lane, depth| LaneStats { lane, depth, pending: 1, delayed: 2, oldest_age_ms: 1500, consumers: 3 };
        QueueStats {
            lanes: vec![lane(Priority::High, 7), lane(Priority::Normal, 0), lane(Priority::Low, 4)],
            dead: 0,
            outcomes: [("succeeded".to_owned(), 12)].into_iter().collect(),
        }
    }

    #[test]
    fn lanes_are_labelled_gauges() {
        let text = render(&stats());
        assert!(text.contains("# TYPE flotilla_queue_depth gauge\n"), "{text}");
        assert!(text.contains("flotilla_queue_depth{lane=\"high\"} 7\n"), "{text}");
        assert!(text.contains("flotilla_queue_depth{lane=\"low\"} 4\n"), "{text}");
        assert!(text.contains("flotilla_queue_pending{lane=\"normal\"} 1\n"), "{text}");
        assert!(text.contains("flotilla_queue_delayed{lane=\"normal\"} 2\n"), "{text}");
        assert!(text.contains("flotilla_queue_oldest_age_seconds{lane=\"high\"} 1.5\n"), "{text}");
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
    fn every_sample_line_has_a_name_labels_and_a_number() {
        for line in render(&stats()).lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').expect("sample");
            assert!(series.starts_with("flotilla_") && series.ends_with('}'), "{line}");
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }
}
