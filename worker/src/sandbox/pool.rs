//! The worker's sandboxes: a provider with a warm pool in front of it.
//!
//! Starting a desktop takes from a fraction of a second (local) to several
//! seconds (hosted), so the pool keeps `warm` ready sandboxes of the
//! default shape, and a count of its own for each further shape it is given
//! (a warm pool per template), and hands one out at once when a task asks
//! for a pooled shape; any other shape is started cold. A task's template
//! named as the default (`desktop`) is the default shape. A used sandbox is never handed to
//! another task: releasing kills it, and the pool starts a fresh one in the
//! background. `max_live` caps the sandboxes this worker holds at once,
//! pooled ones included, so a burst cannot exceed a provider's concurrency
//! limit. Pooled sandboxes are replaced before their deadline runs out.
//!
//! When tasks of a pooled shape arrive faster than replacements start,
//! its `warm` is not enough: the pool then keeps as many ready as recent
//! demand and start times call for (see `demand`), up to half of
//! `max_live`, and kills the extra ones again once demand falls. A shape
//! with `warm` = 0 never keeps any. Each shape has its own ready sandboxes
//! and demand; `max_live` and the fleet cap are shared. The filling is in
//! `pool_fill.rs`.
//! With a [`FleetCap`], every sandbox held (ready, starting or in use) also
//! takes a fleet-wide slot in Redis, so all workers together stay under the
//! provider's limit; a task waits for a slot (bounded, cancellable) when the
//! fleet is at its cap. A sandbox handed over with [`SandboxPool::keep`]
//! outlives its task: it is not killed, and its slot stays taken until the
//! sandbox's deadline.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_config::DEFAULT_TEMPLATE;
use time::OffsetDateTime;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info_span, warn, Instrument};

use super::demand::Demand;
use super::fleet::{FleetCap, FleetSlot};
use super::{Sandbox, SandboxError, SandboxId, SandboxProvider, SandboxRequest};

/// How the pool is sized.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Ready sandboxes to keep of the default shape.
    pub warm: usize,
    /// Sandboxes this worker may hold at once, in use or ready.
    pub max_live: usize,
    /// The shape pooled sandboxes have; a task asking for it gets a warm one.
    pub default_request: SandboxRequest,
    /// Further shapes kept warm beside the default one, each with its own
    /// count (one per template the worker is told to keep warm).
    pub more_shapes: Vec<PooledShape>,
    /// A pooled sandbox with less life left than this is replaced, not handed out.
    pub min_life_left: Duration,
    /// The fleet-wide cap every sandbox of this pool counts against; none
    /// when only `max_live` applies.
    pub fleet: Option<FleetCap>,
}

/// A shape of sandbox the pool keeps ready, and how many at least.
#[derive(Debug, Clone)]
pub struct PooledShape {
    pub request: SandboxRequest,
    pub warm: usize,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            warm: 0,
            max_live: 8,
            default_request: SandboxRequest { timeout: Duration::from_secs(1800), ..SandboxRequest::default() },
            more_shapes: Vec::new(),
            min_life_left: Duration::from_secs(120),
            fleet: None,
        }
    }
}

impl PoolConfig {
    /// Every pooled shape, the default one first.
    fn shapes(&self) -> impl Iterator<Item = PooledShape> + '_ {
        let default = PooledShape { request: self.default_request.clone(), warm: self.warm };
        std::iter::once(default).chain(self.more_shapes.iter().cloned())
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
pub(super) struct Ready {
    pub(super) sandbox: Sandbox,
    pub(super) permit: OwnedSemaphorePermit,
    pub(super) fleet: Option<FleetSlot>,
}

/// A provider with a warm pool. Cheap to clone; clones share the pool.
#[derive(Clone)]
pub struct SandboxPool {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) provider: Arc<dyn SandboxProvider>,
    pub(super) config: PoolConfig,
    pub(super) live: Arc<Semaphore>,
    /// The pooled shapes, the default one first.
    pub(super) shapes: Vec<Shape>,
    pub(super) stop: CancellationToken,
}

/// One pooled shape: its ready sandboxes, those starting and its demand.
pub(super) struct Shape {
    pub(super) request: SandboxRequest,
    pub(super) warm: usize,
    pub(super) ready: Mutex<VecDeque<Ready>>,
    /// Sandboxes being started for this shape now.
    pub(super) filling: Mutex<usize>,
    /// Recent arrivals of this shape and start times, for sizing.
    pub(super) demand: Mutex<Demand>,
}

impl SandboxPool {
    /// A pool over `provider`; starts filling at once when a shape's `warm` > 0.
    pub fn new(provider: Arc<dyn SandboxProvider>, config: PoolConfig) -> Self {
        let shapes = config
            .shapes()
            .map(|shape| Shape {
                request: shape.request,
                warm: shape.warm,
                ready: Mutex::new(VecDeque::new()),
                filling: Mutex::new(0),
                demand: Mutex::new(Demand::new(now())),
            })
            .collect();
        let inner = Inner {
            live: Arc::new(Semaphore::new(config.max_live.max(1))),
            provider,
            config,
            shapes,
            stop: CancellationToken::new(),
        };
        let pool = Self { inner: Arc::new(inner) };
        pool.refill();
        if pool.inner.shapes.iter().any(|shape| shape.warm > 0) {
            pool.spawn_keeper();
        }
        pool
    }

    pub fn provider(&self) -> &Arc<dyn SandboxProvider> {
        &self.inner.provider
    }

    /// Ready sandboxes now, of every shape.
    pub fn ready(&self) -> usize {
        self.inner.shapes.iter().map(|shape| lock(&shape.ready).len()).sum()
    }

    /// Ready sandboxes now of the pooled shape `request` asks for (0 for a
    /// shape the pool does not keep).
    pub fn ready_for(&self, request: &SandboxRequest) -> usize {
        self.shape_of(request).map_or(0, |i| lock(&self.inner.shapes[i].ready).len())
    }

    /// Sandboxes held now, in use, ready or starting.
    pub fn live(&self) -> usize {
        self.inner.config.max_live.max(1) - self.inner.live.available_permits()
    }

    /// A sandbox of the shape `request` asks for: a ready one when the shape
    /// is pooled, else a new one. Waits while `max_live` are held, unless
    /// `cancel` fires. Traced in a `sandbox_acquire` span that says which.
    pub async fn acquire(&self, request: &SandboxRequest, cancel: &CancellationToken) -> Result<Lease, SandboxError> {
        let span = info_span!("sandbox_acquire", provider = self.inner.provider.name(), warm = tracing::field::Empty);
        let lease = self.acquire_untraced(request, cancel).instrument(span.clone()).await?;
        span.record("warm", lease.warm);
        Ok(lease)
    }

    async fn acquire_untraced(&self, request: &SandboxRequest, cancel: &CancellationToken) -> Result<Lease, SandboxError> {
        let began = Instant::now();
        let pooled = self.shape_of(request);
        if let Some(shape) = pooled {
            lock(&self.inner.shapes[shape].demand).arrived(now());
            if let Some(ready) = self.take_ready(shape) {
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
        if let Some(shape) = pooled {
            lock(&self.inner.shapes[shape].demand).started(now() - starting);
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
    pub async fn adopt(&self, host: Option<&str>, id: &SandboxId, cancel: &CancellationToken) -> Result<Lease, SandboxError> {
        let began = Instant::now();
        let sandbox = self.inner.provider.connect_at(host, id).await?;
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

    /// Lets go of a task's paused sandbox, parked with its task: it is not
    /// killed, and it holds neither a fleet slot nor a place under
    /// `max_live` (it runs nothing) until a worker resumes it.
    pub async fn let_go_paused(&self, mut lease: Lease) {
        if let Some(slot) = lease.fleet.take() {
            slot.release().await;
        }
        debug!(sandbox = %lease.sandbox.id, "a paused sandbox waits with its parked task");
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
        let drained: Vec<Ready> =
            self.inner.shapes.iter().flat_map(|shape| lock(&shape.ready).drain(..).collect::<Vec<_>>()).collect();
        for ready in drained {
            self.inner.provider.kill(&ready.sandbox.id).await.ok();
            if let Some(slot) = ready.fleet {
                slot.release().await;
            }
        }
    }

    /// The pooled shape `request` asks for: the same template (none and the
    /// default template's name are one), screen and no longer a life.
    fn shape_of(&self, request: &SandboxRequest) -> Option<usize> {
        self.inner.shapes.iter().position(|shape| {
            let pooled = &shape.request;
            template_name(request) == template_name(pooled)
                && request.resolution == pooled.resolution
                && request.timeout <= pooled.timeout
        })
    }

    /// The first ready sandbox of `shape` with enough life left; ones too
    /// close to their deadline are killed on the way.
    fn take_ready(&self, shape: usize) -> Option<Ready> {
        let min_left = self.inner.config.min_life_left;
        loop {
            let ready = lock(&self.inner.shapes[shape].ready).pop_front()?;
            let left = ready.sandbox.expires_at - OffsetDateTime::now_utc();
            if left > min_left {
                return Some(ready);
            }
            self.kill_in_background(ready);
        }
    }
}

fn template_name(request: &SandboxRequest) -> &str {
    request.template.as_deref().unwrap_or(DEFAULT_TEMPLATE)
}

/// The time demand is measured in: Tokio's clock, which tests can pause.
pub(super) fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

pub(super) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
