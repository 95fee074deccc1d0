//! The worker's own figures, for its `/metrics` page: attempts by outcome and
//! how long they ran, tasks running now, and Redis errors met by the claim
//! loop and the acknowledger. Labels are only the few outcome names.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// How an attempt ended, as a label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

/// The worker's metrics, shared by every part that counts.
#[derive(Clone)]
pub struct WorkerMetrics {
    registry: Arc<Registry>,
    attempts: Family<OutcomeLabel, Counter>,
    attempt_seconds: Histogram,
    running: Gauge,
    redis_errors: Counter,
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkerMetrics {
    pub fn new() -> Self {
        let attempts = Family::<OutcomeLabel, Counter>::default();
        let attempt_seconds = Histogram::new(exponential_buckets(0.001, 4.0, 12));
        let running = Gauge::default();
        let redis_errors = Counter::default();
        let mut registry = Registry::with_prefix("flotilla_worker");
        registry.register("attempts", "Attempts this worker ended, by outcome", attempts.clone());
        registry.register("attempt_seconds", "How long attempts ran, from start to outcome", attempt_seconds.clone());
        registry.register("running_tasks", "Tasks this worker runs now", running.clone());
        registry.register("redis_errors", "Redis errors met while claiming and acknowledging", redis_errors.clone());
        Self { registry: Arc::new(registry), attempts, attempt_seconds, running, redis_errors }
    }

    /// An attempt ended: `succeeded`, `failed`, `cancelled`, `retrying`,
    /// `fenced` or `abandoned`.
    pub fn attempt_ended(&self, outcome: &'static str, ran: Duration) {
        self.attempts.get_or_create(&OutcomeLabel { outcome }).inc();
        self.attempt_seconds.observe(ran.as_secs_f64());
    }

    pub fn task_started(&self) {
        self.running.inc();
    }

    pub fn task_left(&self) {
        self.running.dec();
    }

    pub fn redis_error(&self) {
        self.redis_errors.inc();
    }

    /// The Prometheus text page.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
