//! The worker's sandboxes: a provider with a warm pool in front of it.
//!
//! Starting a desktop takes from a fraction of a second (local) to several
//! seconds (hosted), so the pool keeps `warm` ready sandboxes of the
//! default shape and hands one out at once when a task asks for that shape;
//! any other shape is started cold. A used sandbox is never handed to
//! another task: releasing kills it, and the pool starts a fresh one in the
//! background. `max_live` caps the sandboxes this worker holds at once,
//! pooled ones included, so a burst cannot exceed a provider's concurrency
//! limit. Pooled sandboxes are replaced before their deadline runs out.
//!
//! When tasks of the pooled shape arrive faster than replacements start,
//! `warm` is not enough: the pool then keeps as many ready as recent demand
//! and start times call for (see `demand`), up to half of `max_live`, and
//! kills the extra ones again once demand falls. A pool with `warm` = 0
//! never keeps any.
//! With a [`FleetCap`], every sandbox held (ready, starting or in use) also
//! takes a fleet-wide slot in Redis, so all workers together stay under the
//! provider's limit; a task waits for a slot (bounded, cancellable) when the
//! fleet is at its cap. A sandbox handed over with [`SandboxPool::keep`]
//! outlives its task: it is not killed, and its slot stays taken until the
//! sandbox's deadline.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use time::OffsetDateTime;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info_span, warn, Instrument};

use super::demand::Demand;
use super::fleet::{FleetCap, FleetSlot};
use super::{Sandbox, SandboxError, SandboxId, SandboxProvider, SandboxRequest};

/// Pause before trying again after a warm sandbox failed to start.
const FAILED_PAUSE: Duration = Duration::from_secs(2);
/// Pause after the provider refused the worker's credentials or request.
const REFUSED_PAUSE: Duration = Duration::from_secs(60);
/// Pause before a warm sandbox tries again for a fleet slot.
const FLEET_FULL_PAUSE: Duration = Duration::from_secs(2);
/// How often the pool checks its size while no task comes or goes.
const KEEP_EVERY: Duration = Duration::from_secs(5);

/// How the pool is sized.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Ready sandboxes to keep of the default shape.
    pub warm: usize,
    /// Sandboxes this worker may hold at once, in use or ready.
    pub max_live: usize,
    /// The shape pooled sandboxes have; a task asking for it gets a warm one.
    pub default_request: SandboxRequest,
    /// A pooled sandbox with less life left than this is replaced, not handed out.
    pub min_life_left: Duration,
    /// The fleet-wide cap every sandbox of this pool counts against; none
    /// when only `max_live` applies.
    pub fleet: Option<FleetCap>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            warm: 0,
            max_live: 8,
            default_request: SandboxRequest { timeout: Duration::from_secs(1800), ..SandboxRequest::default() },
            min_life_left: Duration::from_secs(120),
            fleet: None,
        }
    }
}

/// A sandbox a task holds; give it back with [`SandboxPool::release`].
pub struct Lease {
    pub sandbox: Sandbox,
    /// Taken ready from the pool rather than started for this task.
    pub warm: bool,
    /// How long getting it took.
    pub waited: Duration,
    _permit: OwnedSemaphorePermit,
    fleet: Option<FleetSlot>,
}

/// A ready sandbox waiting in the pool, with its share of `max_live` and
/// its fleet slot.
struct Ready {
    sandbox: Sandbox,
    permit: OwnedSemaphorePermit,
    fleet: Option<FleetSlot>,
}

/// A provider with a warm pool. Cheap to clone; clones share the pool.
#[derive(Clone)]
pub struct SandboxPool {
    inner: Arc<Inner>,
}

struct Inner {
    provider: Arc<dyn SandboxProvider>,
    config: PoolConfig,
    live: Arc<Semaphore>,
    ready: Mutex<VecDeque<Ready>>,
    /// Sandboxes being started for the pool now.
    filling: Mutex<usize>,
    /// Recent arrivals of the pooled shape and start times, for sizing.
    demand: Mutex<Demand>,
    stop: CancellationToken,
}

impl SandboxPool {
    /// A pool over `provider`; starts filling at once when `warm` > 0.
    pub fn new(provider: Arc<dyn SandboxProvider>, config: PoolConfig) -> Self {
        let inner = Inner {
            live: Arc::new(Semaphore::new(config.max_live.max(1))),
            provider,
            config,
            ready: Mutex::new(VecDeque::new()),
            filling: Mutex::new(0),
            demand: Mutex::new(Demand::new(now())),
            stop: CancellationToken::new(),
        };
        let pool = Self { inner: Arc::new(inner) };
        pool.refill();
        if pool.inner.config.warm > 0 {
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(keep(Arc::downgrade(&pool.inner), pool.inner.stop.clone()));
            }
        }
        pool
    }

    pub fn provider(&self) -> &Arc<dyn SandboxProvider> {
        &self.inner.provider
    }

    /// Ready sandboxes now.
    pub fn ready(&self) -> usize {
        lock(&self.inner.ready).len()
    }

    /// Sandboxes held now, in use, ready or starting.
    pub fn live(&self) -> usize {
        self.inner.config.max_live.max(1) - self.inner.live.available_permits()
    }

    /// A sandbox of the shape `request` asks for: a ready one when the shape
    /// is the pool's, else a new one. Waits while `max_live` are held, unless
    /// `cancel` fires. Traced in a `sandbox_acquire` span that says which.
    pub async fn acquire(&self, request: &SandboxRequest, cancel: &CancellationToken) -> Result<Lease, SandboxError> {
        let span = info_span!("sandbox_acquire", provider = self.inner.provider.name(), warm = tracing::field::Empty);
        let lease = self.acquire_untraced(request, cancel).instrument(span.clone()).await?;
        span.record("warm", lease.warm);
        Ok(lease)
    }

    async fn acquire_untraced(&self, request: &SandboxRequest, cancel: &CancellationToken) -> Result<Lease, SandboxError> {
        let began = Instant::now();
        let pooled = self.fits_pool(request);
        if pooled {
            lock(&self.inner.demand).arrived(now());
            if let Some(ready) = self.take_ready() {
                self.refill();
                return Ok(Lease {
                    sandbox: ready.sandbox,
                    warm: true,
                    waited: began.elapsed(),
                    _permit: ready.permit,
                    fleet: ready.fleet,
                });
            }
        }
        let (permit, fleet) = self.slot(cancel).await?;
        let starting = now();
        let sandbox = self.inner.provider.create(request).await?;
        if pooled {
            lock(&self.inner.demand).started(now() - starting);
        }
        self.refill();
        Ok(Lease { sandbox, warm: false, waited: began.elapsed(), _permit: permit, fleet })
    }

    /// A slot under `max_live`, then under the fleet's cap when there is one.
    async fn slot(&self, cancel: &CancellationToken) -> Result<(OwnedSemaphorePermit, Option<FleetSlot>), SandboxError> {
        let permit = tokio::select! {
            permit = Arc::clone(&self.inner.live).acquire_owned() => permit.map_err(|_| SandboxError::Unavailable("the sandbox pool is closed".into()))?,
            () = cancel.cancelled() => return Err(SandboxError::Unavailable("cancelled while waiting for a sandbox".into())),
        };
        let fleet = match &self.inner.config.fleet {
            Some(cap) => Some(cap.acquire(cancel).await?),
            None => None,
        };
        Ok((permit, fleet))
    }

    /// Takes up sandbox `id`, which an interrupted attempt of the same task
    /// left running: connects to it by id (a gone one answers at once, with
    /// no wait for a slot), then holds it under `max_live` and the fleet cap
    /// as if started here, so it ends as any lease does.
    pub async fn adopt(&self, id: &SandboxId, cancel: &CancellationToken) -> Result<Lease, SandboxError> {
        let began = Instant::now();
        let sandbox = self.inner.provider.connect(id).await?;
        let (permit, fleet) = self.slot(cancel).await?;
        Ok(Lease { sandbox, warm: false, waited: began.elapsed(), _permit: permit, fleet })
    }

    /// Ends a task's sandbox (a used desktop is never reused) and tops the
    /// pool up again.
    pub async fn release(&self, mut lease: Lease) {
        if let Err(e) = self.inner.provider.kill(&lease.sandbox.id).await {
            warn!(sandbox = %lease.sandbox.id, error = %e, "could not kill a released sandbox");
        }
        if let Some(slot) = lease.fleet.take() {
            slot.release().await;
        }
        drop(lease);
        self.refill();
    }

    /// Lets a task's sandbox outlive the task (`keep_alive`): it is not
    /// killed and no longer counts against `max_live`; its fleet slot stays
    /// taken until `lease.sandbox.expires_at`, when the provider ends it.
    pub async fn keep(&self, mut lease: Lease) {
        if let Some(slot) = lease.fleet.take() {
            slot.hand_over(lease.sandbox.expires_at).await;
        }
        debug!(sandbox = %lease.sandbox.id, "a sandbox outlives its task");
        drop(lease);
        self.refill();
    }

    /// Kills every ready sandbox and stops refilling.
    pub async fn shutdown(&self) {
        self.inner.stop.cancel();
        let drained: Vec<Ready> = lock(&self.inner.ready).drain(..).collect();
        for ready in drained {
            self.inner.provider.kill(&ready.sandbox.id).await.ok();
            if let Some(slot) = ready.fleet {
                slot.release().await;
            }
        }
    }

    fn fits_pool(&self, request: &SandboxRequest) -> bool {
        let pooled = &self.inner.config.default_request;
        request.template == pooled.template && request.resolution == pooled.resolution && request.timeout <= pooled.timeout
    }

    /// The first ready sandbox with enough life left; ones too close to
    /// their deadline are killed on the way.
    fn take_ready(&self) -> Option<Ready> {
        let min_left = self.inner.config.min_life_left;
        loop {
            let ready = lock(&self.inner.ready).pop_front()?;
            let left = ready.sandbox.expires_at - OffsetDateTime::now_utc();
            if left > min_left {
                return Some(ready);
            }
            self.kill_in_background(ready);
        }
    }

    fn kill_in_background(&self, ready: Ready) {
        let provider = Arc::clone(&self.inner.provider);
        tokio::spawn(async move {
            provider.kill(&ready.sandbox.id).await.ok();
            drop(ready.permit);
        });
    }

    /// How many ready sandboxes the pool aims for now: `warm`, or more
    /// while demand calls for it, up to half of `max_live`.
    fn target(&self) -> usize {
        let config = &self.inner.config;
        if config.warm == 0 {
            return 0;
        }
        let wanted = lock(&self.inner.demand).wanted(now());
        wanted.min(config.max_live / 2).max(config.warm)
    }

    /// Kills ready sandboxes beyond `target`, oldest first.
    fn trim(&self, target: usize) {
        loop {
            let extra = {
                let mut ready = lock(&self.inner.ready);
                if ready.len() <= target {
                    return;
                }
                ready.pop_front()
            };
            if let Some(extra) = extra {
                self.kill_in_background(extra);
            }
        }
    }

    /// Starts as many sandboxes as the pool lacks, as far as `max_live`
    /// allows, and kills those it no longer needs.
    fn refill(&self) {
        if self.inner.stop.is_cancelled() || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let target = self.target();
        self.trim(target);
        loop {
            let missing = {
                let filling = lock(&self.inner.filling);
                target.saturating_sub(self.ready() + *filling)
            };
            if missing == 0 {
                return;
            }
            let Ok(permit) = Arc::clone(&self.inner.live).try_acquire_owned() else {
                return;
            };
            *lock(&self.inner.filling) += 1;
            let pool = self.clone();
            tokio::spawn(async move { pool.start_one(permit).await });
        }
    }

    async fn start_one(&self, permit: OwnedSemaphorePermit) {
        let inner = &self.inner;
        let Some(fleet) = self.pooled_fleet_slot().await else {
            *lock(&inner.filling) -= 1;
            drop(permit);
            self.refill_later(FLEET_FULL_PAUSE).await;
            return;
        };
        let starting = now();
        let created = tokio::select! {
            created = inner.provider.create(&inner.config.default_request) => created,
            () = inner.stop.cancelled() => Err(SandboxError::Unavailable("the pool is shutting down".into())),
        };
        *lock(&inner.filling) -= 1;
        match created {
            Ok(sandbox) if inner.stop.is_cancelled() => {
                inner.provider.kill(&sandbox.id).await.ok();
            }
            Ok(sandbox) => {
                lock(&inner.demand).started(now() - starting);
                debug!(sandbox = %sandbox.id, "a warm sandbox is ready");
                lock(&inner.ready).push_back(Ready { sandbox, permit, fleet });
            }
            Err(e) => {
                let pause = refill_pause(&e);
                warn!(error = %e, pause_s = pause.as_secs(), "could not start a warm sandbox; trying again later");
                drop(permit);
                drop(fleet);
                self.refill_later(pause).await;
            }
        }
    }

    /// A fleet slot for a sandbox the pool starts on its own: `Some(None)`
    /// without a fleet cap; `None` while the fleet is at its cap (a waiting
    /// task comes before a warm sandbox).
    async fn pooled_fleet_slot(&self) -> Option<Option<FleetSlot>> {
        let Some(cap) = &self.inner.config.fleet else { return Some(None) };
        match cap.try_acquire().await {
            Ok(Some(slot)) => Some(Some(slot)),
            Ok(None) => None,
            Err(e) => {
                warn!(error = %e, "could not take a fleet slot for a warm sandbox");
                None
            }
        }
    }

    async fn refill_later(&self, pause: Duration) {
        tokio::select! {
            () = tokio::time::sleep(pause) => self.refill(),
            () = self.inner.stop.cancelled() => {}
        }
    }
}

/// How long to wait after a warm sandbox could not be started: a refused
/// credential will be refused again, so it is tried rarely, not in a storm.
fn refill_pause(error: &SandboxError) -> Duration {
    match error {
        SandboxError::Unauthorized(_) | SandboxError::InvalidRequest(_) => REFUSED_PAUSE,
        _ => FAILED_PAUSE,
    }
}

/// Checks the pool's size every [`KEEP_EVERY`] while it exists, so extra
/// sandboxes go once demand falls even when no task comes or goes.
async fn keep(inner: Weak<Inner>, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(KEEP_EVERY) => {}
        }
        let Some(inner) = inner.upgrade() else { return };
        SandboxPool { inner }.refill();
    }
}

/// The time demand is measured in: Tokio's clock, which tests can pause.
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
