//! The worker's own figures, for its `/metrics` page: attempts by outcome and
//! how long they ran, tasks running now, Redis errors met by the claim loop
//! and the acknowledger; how long steps, model calls and sandbox acquires
//! take; and, read from the tools at each scrape, the sandbox pool's size
//! and how many screenshots the store did not have to upload again.
//!
//! Labels are only small fixed sets: outcome names, action types, model
//! providers, and `warm` or `cold`.

use std::sync::Arc;
use std::time::Duration;

use flotilla_blobstore::{BlobStats, BlobStore};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::sandbox::SandboxPool;
use crate::tools::Tools;

/// How an attempt ended, as a label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    pub outcome: &'static str,
}

/// The type of a step's action (`click`, `type`, `wait`, …).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabel {
    pub action: &'static str,
}

/// A model call's provider and how it ended (`ok` or the error's kind).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelCallLabel {
    pub provider: &'static str,
    pub outcome: &'static str,
}

/// Whether a sandbox came ready from the pool (`warm`) or was started for
/// the task (`cold`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StartLabel {
    pub start: &'static str,
}

/// The worker's metrics, shared by every part that counts.
#[derive(Clone)]
pub struct WorkerMetrics {
    registry: Arc<Registry>,
    attempts: Family<OutcomeLabel, Counter>,
    attempt_seconds: Histogram,
    running: Gauge,
    redis_errors: Counter,
    step_seconds: Family<ActionLabel, Histogram>,
    model_call_seconds: Family<ModelCallLabel, Histogram>,
    sandbox_acquire_seconds: Family<StartLabel, Histogram>,
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkerMetrics {
    /// Metrics of the worker alone, with no tools to read.
    pub fn new() -> Self {
        Self::build(None)
    }

    /// Metrics that also read `tools` at each scrape: pool sizes and
    /// screenshot deduplication.
    pub fn with_tools(tools: &Tools) -> Self {
        Self::build(Some(ToolsCollector { pool: tools.sandboxes.clone(), blobs: tools.blobs.clone() }))
    }

    fn build(tools: Option<ToolsCollector>) -> Self {
        let metrics = Self {
            registry: Arc::new(Registry::default()),
            attempts: Family::default(),
            attempt_seconds: Histogram::new(exponential_buckets(0.001, 4.0, 12)),
            running: Gauge::default(),
            redis_errors: Counter::default(),
            step_seconds: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.005, 2.5, 10))),
            model_call_seconds: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.05, 2.0, 12))),
            sandbox_acquire_seconds: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 4.0, 10))),
        };
        let mut registry = Registry::with_prefix("flotilla_worker");
        metrics.register(&mut registry);
        if let Some(tools) = tools {
            registry.register_collector(Box::new(tools));
        }
        Self { registry: Arc::new(registry), ..metrics }
    }

    fn register(&self, registry: &mut Registry) {
        registry.register("attempts", "Attempts this worker ended, by outcome", self.attempts.clone());
        registry.register("attempt_seconds", "How long attempts ran, from start to outcome", self.attempt_seconds.clone());
        registry.register("running_tasks", "Tasks this worker runs now", self.running.clone());
        registry.register("redis_errors", "Redis errors met while claiming and acknowledging", self.redis_errors.clone());
        registry.register("step_seconds", "How long completed steps took, by action type", self.step_seconds.clone());
        registry.register(
            "model_call_seconds",
            "How long model calls took, retries included, by provider and outcome",
            self.model_call_seconds.clone(),
        );
        registry.register(
            "sandbox_acquire_seconds",
            "How long tasks waited for a sandbox, warm from the pool or started cold",
            self.sandbox_acquire_seconds.clone(),
        );
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

    /// A step of type `action` completed in `took`.
    pub fn step_completed(&self, action: &'static str, took: Duration) {
        self.step_seconds.get_or_create(&ActionLabel { action }).observe(took.as_secs_f64());
    }

    /// A call to `provider`'s model ended with `outcome` after `took`.
    pub fn model_called(&self, provider: &'static str, outcome: &'static str, took: Duration) {
        self.model_call_seconds.get_or_create(&ModelCallLabel { provider, outcome }).observe(took.as_secs_f64());
    }

    /// A task got a sandbox after `waited`.
    pub fn sandbox_acquired(&self, warm: bool, waited: Duration) {
        let start = if warm { "warm" } else { "cold" };
        self.sandbox_acquire_seconds.get_or_create(&StartLabel { start }).observe(waited.as_secs_f64());
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

/// Reads the sandbox pool and the blob store's counters at each scrape, so
/// the figures are exactly theirs and nothing has to keep them in step.
struct ToolsCollector {
    pool: Option<SandboxPool>,
    blobs: Option<BlobStore>,
}

impl std::fmt::Debug for ToolsCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolsCollector").field("pool", &self.pool.is_some()).field("blobs", &self.blobs.is_some()).finish()
    }
}

impl Collector for ToolsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(pool) = &self.pool {
            gauge(&mut encoder, "sandboxes_ready", "Sandboxes ready in the warm pool.", pool.ready() as i64)?;
            gauge(&mut encoder, "sandboxes_live", "Sandboxes this worker holds, in use, ready or starting.", pool.live() as i64)?;
        }
        if let Some(blobs) = &self.blobs {
            encode_dedup(&mut encoder, &blobs.stats())?;
        }
        Ok(())
    }
}

/// Screenshots seen, uploaded and found already stored, and the share of
/// them that needed no upload.
fn encode_dedup(encoder: &mut DescriptorEncoder, stats: &BlobStats) -> Result<(), std::fmt::Error> {
    let deduplicated = stats.dedup_local + stats.dedup_known + stats.dedup_store;
    counter(encoder, "screenshots", "Screenshots handed to the blob store.", stats.screenshots)?;
    counter(encoder, "screenshot_uploads", "Screenshots that created a new object.", stats.uploads)?;
    counter(encoder, "screenshot_dedup", "Screenshots the store already had, so not uploaded again.", deduplicated)?;
    let ratio = if stats.screenshots == 0 { 0.0 } else { deduplicated as f64 / stats.screenshots as f64 };
    let metric = ConstGauge::new(ratio);
    metric.encode(encoder.encode_descriptor(
        "screenshot_dedup_ratio",
        "Share of screenshots not uploaded again.",
        None,
        metric.metric_type(),
    )?)
}

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: i64) -> Result<(), std::fmt::Error> {
    let metric = ConstGauge::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}

fn counter(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> Result<(), std::fmt::Error> {
    let metric = ConstCounter::new(value);
    metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
}
