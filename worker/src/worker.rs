//! The claim loop and the worker's life: it claims entries while it has free
//! slots (up to `FLOTILLA_WORKER_CONCURRENCY`), takes over the entries of
//! workers presumed dead, and on shutdown stops claiming, lets running tasks
//! finish within the drain deadline and hands the rest back.
//!
//! Redis going away is not fatal: every loop logs, backs off and tries again,
//! and the shared connection reconnects by itself.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_shared::ids::TaskId;
use flotilla_shared::live::LiveViews;
use flotilla_shared::queue::{Delivery, Queue, StartOutcome};
use flotilla_shared::{Config, QueueError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::acker::Acker;
use crate::execute::Executor;
use crate::housekeeping;
use crate::http;
use crate::live::LiveDesktops;
use crate::metrics::WorkerMetrics;
use crate::pipeline::Registry;
use crate::tools::Tools;
use crate::webhooks;

/// How long one blocking read waits before the loop looks around again.
const BLOCK_FOR: Duration = Duration::from_millis(250);
/// With fewer free slots than lanes, the loop polls at this pace instead of
/// blocking (a blocking read may hand over one entry per lane).
const NEARLY_FULL_POLL: Duration = Duration::from_millis(5);

/// Runs a worker with the standard pipelines until `shutdown` is cancelled.
pub async fn run(config: Config, shutdown: CancellationToken) -> anyhow::Result<()> {
    let registry = Registry::for_config(&config);
    run_with(config, registry, shutdown).await
}

/// Runs a worker with these pipelines, and the sandboxes and store the
/// configuration names, until `shutdown` is cancelled.
pub async fn run_with(config: Config, registry: Registry, shutdown: CancellationToken) -> anyhow::Result<()> {
    let env: Vec<(String, String)> = std::env::vars().collect();
    let tools = Tools::from_config(&config, env).await?;
    run_with_tools(config, registry, tools, shutdown).await
}

/// Runs a worker with these pipelines and tools until `shutdown` is cancelled.
pub async fn run_with_tools(config: Config, registry: Registry, tools: Tools, shutdown: CancellationToken) -> anyhow::Result<()> {
    let metrics = WorkerMetrics::with_tools(&tools);
    let mut tools = tools;
    let queue = connect_patiently(&config, &shutdown).await?;
    let http = match config.worker.http_addr {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| anyhow::anyhow!("FLOTILLA_WORKER_HTTP_ADDR: cannot listen on {addr}: {e}"))?;
            if tools.live.is_none() {
                tools.live = live_desktops(&config, &listener, &queue);
            }
            let live = tools.live.clone();
            Some(tokio::spawn(http::serve(listener, queue.clone(), metrics.clone(), live, shutdown.clone())))
        }
        None => None,
    };
    let tools = Arc::new(tools);
    let (acker, acker_task) = Acker::spawn(queue.clone(), metrics.clone());
    let executor = Executor {
        queue: queue.clone(),
        registry,
        tools: Arc::clone(&tools),
        acker,
        worker_id: config.worker.id.clone(),
        heartbeat: config.queue.heartbeat,
        default_pipeline: config.api.default_pipeline,
        metrics,
    };
    let housekeeping = tokio::spawn(housekeeping::run(queue.clone(), shutdown.clone()));
    let webhooks =
        tokio::spawn(webhooks::run(queue.clone(), config.webhooks.clone(), config.worker.id.clone(), shutdown.clone()));
    let slots = Arc::new(Semaphore::new(config.worker.concurrency));
    let tracker = TaskTracker::new();
    let abandon = CancellationToken::new();
    info!(worker = %config.worker.id, concurrency = config.worker.concurrency, "worker started");

    let claimer = Claimer {
        queue,
        executor,
        slots,
        tracker: tracker.clone(),
        abandon: abandon.clone(),
        running: Arc::default(),
        lease: config.queue.lease,
    };
    claimer.claim_until(&shutdown).await;

    info!(running = tracker.len(), deadline_s = config.worker.drain_deadline.as_secs(), "stopping: draining running tasks");
    tracker.close();
    if tokio::time::timeout(config.worker.drain_deadline, tracker.wait()).await.is_err() {
        warn!(running = tracker.len(), "drain deadline passed; handing running tasks back");
        abandon.cancel();
        tracker.wait().await;
    }
    drop(claimer);
    tools.shutdown().await;
    housekeeping.await.ok();
    webhooks.await.ok();
    acker_task.await.ok();
    if let Some(http) = http {
        http.await.ok();
    }
    info!("worker stopped");
    Ok(())
}

/// Live views over the worker's HTTP side, reached at
/// `FLOTILLA_WORKER_VIEW_URL` or the address it listens on; none when that
/// address is a wildcard and no URL is set.
fn live_desktops(config: &Config, listener: &tokio::net::TcpListener, queue: &Queue) -> Option<LiveDesktops> {
    let endpoint = match &config.live_view.worker_view_url {
        Some(url) => url.clone(),
        None => {
            let addr = listener.local_addr().ok()?;
            if addr.ip().is_unspecified() {
                warn!("live views are off: set FLOTILLA_WORKER_VIEW_URL to the address the API reaches this worker at");
                return None;
            }
            format!("http://{addr}")
        }
    };
    Some(LiveDesktops::new(endpoint, LiveViews::new(queue.redis().clone(), queue.keys().clone())))
}

/// Connects, retrying while Redis is not there yet, until shutdown.
async fn connect_patiently(config: &Config, shutdown: &CancellationToken) -> anyhow::Result<Queue> {
    let mut delay = Duration::from_millis(100);
    loop {
        match Queue::connect(config).await {
            Ok(queue) => return Ok(queue),
            Err(e) => warn!(error = %e, "cannot reach redis yet; retrying"),
        }
        tokio::select! {
            () = shutdown.cancelled() => anyhow::bail!("stopped before redis was reachable"),
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

/// What one claim brought.
enum Claimed {
    /// Entries whose attempts are still to start.
    Entries(Vec<Delivery>),
    /// Entries claimed and started in the same round trip.
    Started(Vec<(Delivery, Result<StartOutcome, QueueError>)>),
}

/// Claims entries and hands each to an executor under a slot.
#[derive(Clone)]
struct Claimer {
    queue: Queue,
    executor: Executor,
    slots: Arc<Semaphore>,
    tracker: TaskTracker,
    abandon: CancellationToken,
    /// Tasks this worker runs now, so a second delivery of one is not started twice here.
    running: Arc<Mutex<HashSet<TaskId>>>,
    lease: Duration,
}

impl Claimer {
    async fn claim_until(&self, shutdown: &CancellationToken) {
        let mut last_reclaim = Instant::now() - self.lease;
        let mut backoff = Duration::from_millis(50);
        loop {
            let first = tokio::select! {
                () = shutdown.cancelled() => return,
                permit = self.slots.clone().acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => return,
                },
            };
            // Let tasks that are just ending give their slots back first, so
            // one claim serves them all.
            tokio::task::yield_now().await;
            let free = 1 + self.slots.available_permits();
            let claimed = if last_reclaim.elapsed() >= self.lease / 4 {
                last_reclaim = Instant::now();
                self.reclaim_then_claim(free, shutdown).await
            } else {
                self.claim(free, shutdown).await
            };
            match claimed {
                Ok(Claimed::Entries(deliveries)) => {
                    backoff = Duration::from_millis(50);
                    if !deliveries.is_empty() {
                        self.dispatch(first, deliveries);
                    }
                }
                Ok(Claimed::Started(started)) => {
                    backoff = Duration::from_millis(50);
                    self.run_started(first, started);
                }
                Err(e) => {
                    self.executor.metrics.redis_error();
                    warn!(error = %e, "claiming failed; retrying");
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
    }

    /// Takes over entries of workers presumed dead, or, when there are none,
    /// claims new ones.
    async fn reclaim_then_claim(&self, free: usize, shutdown: &CancellationToken) -> Result<Claimed, QueueError> {
        let reclaimed = self.queue.reclaim(&self.executor.worker_id, free).await?;
        if reclaimed.is_empty() {
            return self.claim(free, shutdown).await;
        }
        Ok(Claimed::Entries(reclaimed))
    }

    /// Claims new entries: on a single server claimed and started in one
    /// round trip; when the lanes are empty, waits for one with a blocking
    /// read.
    async fn claim(&self, free: usize, shutdown: &CancellationToken) -> Result<Claimed, QueueError> {
        let worker = &self.executor.worker_id;
        if self.queue.redis().is_cluster() {
            let got = self.queue.claim_now(worker, free).await?;
            if !got.is_empty() {
                return Ok(Claimed::Entries(got));
            }
        } else {
            let started = self.queue.claim_and_start(worker, free).await?;
            if !started.is_empty() {
                return Ok(Claimed::Started(started));
            }
        }
        if free < 3 {
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = tokio::time::sleep(NEARLY_FULL_POLL) => {}
            }
            return Ok(Claimed::Entries(Vec::new()));
        }
        tokio::select! {
            () = shutdown.cancelled() => Ok(Claimed::Entries(Vec::new())),
            got = self.queue.claim_blocking(worker, BLOCK_FOR) => got.map(Claimed::Entries),
        }
    }

    /// Runs attempts the claim already started, each under a slot.
    fn run_started(&self, first: OwnedSemaphorePermit, started: Vec<(Delivery, Result<StartOutcome, QueueError>)>) {
        let mut first = Some(first);
        for (delivery, outcome) in started {
            // Only the claim loop takes slots, so there is one for each claimed entry.
            let Some(permit) = first.take().or_else(|| self.slots.clone().try_acquire_owned().ok()) else {
                warn!(entry = %delivery.entry_id, "no free slot for a started task; it will be reclaimed");
                continue;
            };
            if let Some(id) = &delivery.task_id {
                self.running.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone());
            }
            self.run_outcome(&delivery, outcome, permit);
        }
    }

    /// Starts the claimed entries' attempts in one round trip and runs each
    /// under a slot of its own. The round trip runs beside the claim loop,
    /// so the next claim does not wait for it.
    fn dispatch(&self, first: OwnedSemaphorePermit, deliveries: Vec<Delivery>) {
        let mut permits = vec![first];
        let mut fresh = Vec::with_capacity(deliveries.len());
        {
            let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
            for delivery in deliveries {
                // A task already running here keeps its entry by its heartbeat.
                if delivery.task_id.as_ref().is_none_or(|id| running.insert(id.clone())) {
                    fresh.push(delivery);
                }
            }
        }
        // Only the claim loop takes slots, so there is one for each claimed entry.
        while permits.len() < fresh.len() {
            match self.slots.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        let this = self.clone();
        self.tracker.spawn(async move { this.start_and_run(fresh, permits).await });
    }

    async fn start_and_run(&self, fresh: Vec<Delivery>, permits: Vec<OwnedSemaphorePermit>) {
        let started = match self.queue.start_many(&fresh, &self.executor.worker_id).await {
            Ok(started) => started,
            Err(e) => {
                warn!(error = %e, entries = fresh.len(), "could not start claimed tasks; they will be reclaimed");
                self.forget_running(&fresh);
                return;
            }
        };
        for ((delivery, outcome), permit) in fresh.iter().zip(started).zip(permits) {
            self.run_outcome(delivery, outcome, permit);
        }
    }

    /// Runs a started attempt under its slot, or settles an entry with
    /// nothing to run.
    fn run_outcome(&self, delivery: &Delivery, outcome: Result<StartOutcome, QueueError>, permit: OwnedSemaphorePermit) {
        match outcome {
            Ok(StartOutcome::Started(attempt)) => {
                let this = self.clone();
                this.executor.metrics.task_started();
                self.tracker.spawn(async move {
                    let task_id = attempt.task_id().clone();
                    this.executor.execute(*attempt, this.abandon.clone()).await;
                    this.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&task_id);
                    this.executor.metrics.task_left();
                    drop(permit);
                });
            }
            Ok(StartOutcome::AlreadyEnded(outcome)) => {
                debug!(outcome, entry = %delivery.entry_id, "task had ended; acknowledging its entry");
                self.forget_running(std::slice::from_ref(delivery));
                self.executor.acker.ack(delivery.clone(), None);
            }
            Ok(StartOutcome::Nothing(reason)) => {
                debug!(reason, entry = %delivery.entry_id, "nothing to run for entry");
                self.forget_running(std::slice::from_ref(delivery));
                self.executor.acker.ack(delivery.clone(), None);
            }
            Err(e) => {
                warn!(error = %e, entry = %delivery.entry_id, "could not start task; it will be reclaimed");
                self.forget_running(std::slice::from_ref(delivery));
            }
        }
    }

    fn forget_running(&self, deliveries: &[Delivery]) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        for id in deliveries.iter().filter_map(|d| d.task_id.as_ref()) {
            running.remove(id);
        }
    }
}
