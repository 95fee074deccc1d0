//! The claim loop and the worker's life: it claims entries while it has free
//! slots (up to `FLOTILLA_WORKER_CONCURRENCY`), takes over the entries of
//! workers presumed dead, and on shutdown stops claiming, lets running tasks
//! finish within the drain deadline and hands the rest back.
//!
//! Redis going away is not fatal: every loop logs, backs off and tries again,
//! and the shared connection reconnects by itself.

use std::sync::Arc;
use std::time::Duration;

use flotilla_config::Config;
use flotilla_queue::queue::{Claim, Claimer, Delivery, Queue, StartOutcome, ADVERTISE_EVERY};
use flotilla_queue::QueueError;
use flotilla_types::route::Capabilities;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::acker::Acker;
use crate::execute::{Executor, Stopping};
use crate::housekeeping;
use crate::http;
use crate::live::LiveDesktops;
use crate::metrics::WorkerMetrics;
use crate::pipeline::Registry;
use crate::tools::Tools;
use crate::webhooks;

/// How long the loop first waits when there was nothing to claim (unless
/// new tasks wake it first, see `Claimer::wait_for_work`); each empty claim
/// doubles it, up to [`IDLE_MAX`].
const IDLE_MIN: Duration = Duration::from_millis(2);
/// The longest wait between claims when there is nothing to run.
const IDLE_MAX: Duration = Duration::from_millis(25);
/// How many times a claim waits for ending tasks' slots at most
/// (`ClaimLoop::free_slots_once_settled`).
const SETTLE_YIELDS: usize = 3;

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
    // With a store, finished tasks move there after the hot window.
    let queue = match &tools.blobs {
        Some(store) => queue.with_archive(store.clone()),
        None => queue,
    };
    let http = match config.worker.http_addr {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| anyhow::anyhow!("FLOTILLA_WORKER_HTTP_ADDR: cannot listen on {addr}: {e}"))?;
            if tools.live.is_none() {
                tools.live = live_desktops(&config, &listener, &queue);
            }
            let live = tools.live.clone();
            let access = http::MetricsAccess::from_config(&config.auth);
            Some(tokio::spawn(http::serve(listener, queue.clone(), metrics.clone(), access, live, shutdown.clone())))
        }
        None => None,
    };
    let caps = capabilities(&config, &registry, &tools);
    info!(sandbox = ?caps.sandbox, labels = ?caps.labels, "worker capabilities");
    let advertiser = tokio::spawn(advertise(queue.clone(), config.worker.id.clone(), caps.clone(), shutdown.clone()));
    // Kept up until the running tasks are drained or handed back, so no
    // other worker takes them while this one still hands them back.
    let drained = CancellationToken::new();
    let marker = tokio::spawn(mark_alive(queue.clone(), config.worker.id.clone(), drained.clone()));
    let tools = Arc::new(tools);
    let (acker, acker_task) = Acker::spawn(queue.clone(), metrics.clone());
    let executor = Executor {
        queue: queue.clone(),
        registry,
        tools: Arc::clone(&tools),
        acker,
        worker_id: config.worker.id.clone(),
        heartbeat: config.queue.heartbeat,
        metrics,
    };
    let housekeeping = tokio::spawn(housekeeping::run(queue.clone(), shutdown.clone()));
    let webhooks = tokio::spawn(webhooks::run(
        queue.clone(),
        config.redis.clone(),
        config.webhooks.clone(),
        config.worker.id.clone(),
        shutdown.clone(),
    ));
    let slots = Arc::new(Semaphore::new(config.worker.concurrency));
    let tracker = TaskTracker::new();
    let stopping = Stopping::default();
    info!(worker = %config.worker.id, concurrency = config.worker.concurrency, "worker started");

    let mut source = queue.claimer(config.worker.id.clone(), caps);
    let claim_loop = ClaimLoop { executor, slots, tracker: tracker.clone(), stopping: stopping.clone() };
    claim_loop.claim_until(&mut source, &shutdown).await;

    info!(running = tracker.len(), deadline_s = config.worker.drain_deadline.as_secs(), "stopping: draining running tasks");
    stopping.hand_back.cancel();
    tracker.close();
    if tokio::time::timeout(config.worker.drain_deadline, tracker.wait()).await.is_err() {
        warn!(running = tracker.len(), "drain deadline passed; handing running tasks back");
        stopping.abandon.cancel();
        tracker.wait().await;
    }
    drained.cancel();
    marker.await.ok();
    drop(claim_loop);
    tools.shutdown().await;
    housekeeping.await.ok();
    advertiser.await.ok();
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
    Some(LiveDesktops::new(endpoint, queue.live_views()))
}

/// What this worker can run: its sandbox provider (from its tools), its
/// pipelines and its labels.
pub fn capabilities(config: &Config, registry: &Registry, tools: &Tools) -> Capabilities {
    let sandbox = tools.sandboxes.as_ref().map(|pool| pool.provider().kind());
    Capabilities { sandbox, pipelines: registry.kinds().collect(), labels: config.routing.worker_labels.clone() }
}

/// Keeps the worker's capabilities in the fleet's registry of live workers
/// until shutdown (what waiting tasks wait for is told from it).
async fn advertise(queue: Queue, worker_id: String, caps: Capabilities, shutdown: CancellationToken) {
    loop {
        if let Err(e) = queue.runner().advertise(&worker_id, &caps).await {
            debug!(error = %e, "could not advertise capabilities");
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(ADVERTISE_EVERY) => {}
        }
    }
}

/// Keeps this worker's liveness mark up (four times per mark's life)
/// until `drained`, then marks it gone: either way, once it runs out,
/// other workers take what this worker handed back or left at once.
async fn mark_alive(queue: Queue, worker_id: String, drained: CancellationToken) {
    let every = queue.settings().liveness / 4;
    loop {
        if let Err(e) = queue.mark_alive(&worker_id).await {
            warn!(error = %e, "could not renew this worker's liveness mark");
        }
        tokio::select! {
            () = drained.cancelled() => break,
            () = tokio::time::sleep(every) => {}
        }
    }
    if let Err(e) = queue.mark_gone(&worker_id).await {
        warn!(error = %e, "could not mark this worker gone; its handed-back tasks wait for the lease");
    }
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

/// Claims work through the queue's seam and runs each attempt under a slot.
#[derive(Clone)]
struct ClaimLoop {
    executor: Executor,
    slots: Arc<Semaphore>,
    tracker: TaskTracker,
    stopping: Stopping,
}

impl ClaimLoop {
    async fn claim_until(&self, source: &mut Claimer, shutdown: &CancellationToken) {
        let mut backoff = Duration::from_millis(50);
        let mut idle = IDLE_MIN;
        loop {
            let first = tokio::select! {
                () = shutdown.cancelled() => return,
                permit = self.slots.clone().acquire_owned() => match permit {
                    Ok(p) => p,
                    Err(_) => return,
                },
            };
            let free = self.free_slots_once_settled().await;
            match source.next(free).await {
                Ok(claims) if claims.is_empty() => {
                    drop(first);
                    backoff = Duration::from_millis(50);
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = source.wait_for_work(idle) => {}
                    }
                    idle = (idle * 2).min(IDLE_MAX);
                }
                Ok(claims) => {
                    backoff = Duration::from_millis(50);
                    idle = IDLE_MIN;
                    self.run_claims(first, claims);
                }
                Err(e) => {
                    drop(first);
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

    /// The free slots (the one held included) once tasks that are just
    /// ending have given theirs back: yields while the count still grows,
    /// a few times at most, so one claim serves them all. Bigger claims
    /// keep Redis busier for fewer calls: in a drain of no-op tasks about
    /// 5 % more tasks a second than with a single yield (docs/benchmarks-history.md).
    async fn free_slots_once_settled(&self) -> usize {
        let mut free = 1 + self.slots.available_permits();
        for _ in 0..SETTLE_YIELDS {
            tokio::task::yield_now().await;
            let now = 1 + self.slots.available_permits();
            if now == free {
                break;
            }
            free = now;
        }
        free
    }

    /// Runs the started attempts, each under a slot.
    fn run_claims(&self, first: OwnedSemaphorePermit, claims: Vec<Claim>) {
        let mut first = Some(first);
        for Claim { delivery, outcome } in claims {
            // Only the claim loop takes slots, so there is one for each claimed entry.
            let Some(permit) = first.take().or_else(|| self.slots.clone().try_acquire_owned().ok()) else {
                warn!(entry = %delivery.entry_id, "no free slot for a started task; it will be reclaimed");
                continue;
            };
            self.run_outcome(&delivery, outcome, permit);
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
                    this.executor.execute(*attempt, this.stopping.clone()).await;
                    this.executor.metrics.task_left();
                    drop(permit);
                });
            }
            Ok(StartOutcome::AlreadyEnded { outcome, from_this_entry }) => {
                debug!(outcome = outcome.as_str(), from_this_entry, entry = %delivery.entry_id, "task had ended; acknowledging its entry");
                self.executor.acker.ack(delivery.clone(), from_this_entry.then_some(outcome));
            }
            Ok(StartOutcome::Nothing(reason)) => {
                debug!(?reason, entry = %delivery.entry_id, "nothing to run for entry");
                self.executor.acker.ack(delivery.clone(), None);
            }
            Err(e) => {
                warn!(error = %e, entry = %delivery.entry_id, "could not start task; it will be reclaimed");
            }
        }
    }
}
