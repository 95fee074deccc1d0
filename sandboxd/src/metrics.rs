//! The host's figures for its `/metrics` page: sandboxes by state, creates,
//! creates answered from the pool, the cold-start histogram, seconds spent
//! paused, processes envd started, calls of Flotilla's desktop extension,
//! and the resident memory of each sandbox, read at each scrape.

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// A sandbox's state, as a label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

/// One sandbox, as a label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SandboxLabel {
    sandbox: String,
}

/// The counters the host moves as it goes.
#[derive(Debug)]
pub(crate) struct Metrics {
    pub creates: Counter,
    pub pool_hits: Counter,
    pub pauses: Counter,
    pub paused_seconds: Counter<f64, std::sync::atomic::AtomicU64>,
    pub cold_start_seconds: Histogram,
    pub process_starts: Counter,
    pub desktop_calls: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            creates: Counter::default(),
            pool_hits: Counter::default(),
            pauses: Counter::default(),
            paused_seconds: Counter::default(),
            cold_start_seconds: Histogram::new(exponential_buckets(0.05, 2.0, 10)),
            process_starts: Counter::default(),
            desktop_calls: Counter::default(),
        }
    }
}

/// One sandbox as the page shows it: its id, state and resident memory.
pub(crate) struct SandboxFigures {
    pub id: String,
    pub state: &'static str,
    pub memory_bytes: Option<u64>,
}

/// The page: the counters, then the sandboxes as read now and the pool's size.
pub(crate) fn render(metrics: &Metrics, sandboxes: Vec<SandboxFigures>, pooled: usize) -> String {
    let mut registry = Registry::with_prefix("flotilla_sandboxd");
    registry.register("creates", "Sandboxes created", metrics.creates.clone());
    registry.register("pool_hits", "Creates answered with a pooled desktop", metrics.pool_hits.clone());
    registry.register("pauses", "Sandboxes paused", metrics.pauses.clone());
    registry.register("paused_seconds", "Seconds sandboxes spent paused, counted at resume", metrics.paused_seconds.clone());
    registry.register("cold_start_seconds", "How long a desktop took to start", metrics.cold_start_seconds.clone());
    registry.register("process_starts", "Processes envd started in sandboxes", metrics.process_starts.clone());
    registry.register("desktop_calls", "Captures and actions served by the desktop extension", metrics.desktop_calls.clone());
    let by_state = Family::<StateLabel, Gauge>::default();
    let memory = Family::<SandboxLabel, Gauge>::default();
    for sandbox in sandboxes {
        by_state.get_or_create(&StateLabel { state: sandbox.state }).inc();
        if let Some(bytes) = sandbox.memory_bytes {
            memory.get_or_create(&SandboxLabel { sandbox: sandbox.id }).set(i64::try_from(bytes).unwrap_or(i64::MAX));
        }
    }
    let pool = Gauge::<i64>::default();
    pool.set(i64::try_from(pooled).unwrap_or(i64::MAX));
    registry.register("sandboxes", "Sandboxes by state", by_state);
    registry.register("pooled", "Desktops waiting in the pool", pool);
    registry.register("sandbox_memory_bytes", "Resident memory of each sandbox's processes", memory);
    let mut page = String::new();
    if let Err(error) = encode(&mut page, &registry) {
        tracing::warn!(%error, "the metrics page could not be written");
    }
    page
}
