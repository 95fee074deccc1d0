//! Keeping the pool's shapes filled: each shape aims for its `warm` count,
//! or more while its demand calls for it (up to half of `max_live`),
//! starts what it lacks in the background as far as `max_live` and the
//! fleet cap allow, and kills what it no longer needs. A sandbox that
//! fails to start is tried again after a pause (a long one when the
//! provider refused the request, so a bad credential is not stormed).

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::fleet::FleetSlot;
use super::pool::{lock, now, Inner, Ready, SandboxPool};
use super::SandboxError;

/// Pause before trying again after a warm sandbox failed to start.
const FAILED_PAUSE: Duration = Duration::from_secs(2);
/// Pause after the provider refused the worker's credentials or request.
const REFUSED_PAUSE: Duration = Duration::from_secs(60);
/// Pause before a warm sandbox tries again for a fleet slot.
const FLEET_FULL_PAUSE: Duration = Duration::from_secs(2);
/// How often the pool checks its size while no task comes or goes.
const KEEP_EVERY: Duration = Duration::from_secs(5);

impl SandboxPool {
    pub(super) fn kill_in_background(&self, ready: Ready) {
        let provider = Arc::clone(&self.inner.provider);
        tokio::spawn(async move {
            provider.kill(&ready.sandbox.id).await.ok();
            drop(ready.permit);
        });
    }

    /// How many ready sandboxes `shape` aims for now: its `warm`, or more
    /// while its demand calls for it, up to half of `max_live`.
    fn target(&self, shape: usize) -> usize {
        let shape = &self.inner.shapes[shape];
        if shape.warm == 0 {
            return 0;
        }
        let wanted = lock(&shape.demand).wanted(now());
        wanted.min(self.inner.config.max_live / 2).max(shape.warm)
    }

    /// Kills ready sandboxes of `shape` beyond `target`, oldest first.
    fn trim(&self, shape: usize, target: usize) {
        loop {
            let extra = {
                let mut ready = lock(&self.inner.shapes[shape].ready);
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

    /// Starts as many sandboxes as each shape lacks, as far as `max_live`
    /// allows, and kills those no longer needed.
    pub(super) fn refill(&self) {
        if self.inner.stop.is_cancelled() || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        for shape in 0..self.inner.shapes.len() {
            self.refill_shape(shape);
        }
    }

    fn refill_shape(&self, shape: usize) {
        let target = self.target(shape);
        self.trim(shape, target);
        let pooled = &self.inner.shapes[shape];
        loop {
            let missing = {
                let filling = lock(&pooled.filling);
                target.saturating_sub(lock(&pooled.ready).len() + *filling)
            };
            if missing == 0 {
                return;
            }
            let Ok(permit) = Arc::clone(&self.inner.live).try_acquire_owned() else {
                return;
            };
            *lock(&pooled.filling) += 1;
            let pool = self.clone();
            tokio::spawn(async move { pool.start_one(shape, permit).await });
        }
    }

    async fn start_one(&self, shape: usize, permit: OwnedSemaphorePermit) {
        let inner = &self.inner;
        let pooled = &inner.shapes[shape];
        let Some(fleet) = self.pooled_fleet_slot().await else {
            *lock(&pooled.filling) -= 1;
            drop(permit);
            self.refill_later(FLEET_FULL_PAUSE).await;
            return;
        };
        let starting = now();
        let created = tokio::select! {
            created = inner.provider.create(&pooled.request) => created,
            () = inner.stop.cancelled() => Err(SandboxError::Unavailable("the pool is shutting down".into())),
        };
        *lock(&pooled.filling) -= 1;
        match created {
            Ok(sandbox) if inner.stop.is_cancelled() => {
                inner.provider.kill(&sandbox.id).await.ok();
            }
            Ok(sandbox) => {
                lock(&pooled.demand).started(now() - starting);
                debug!(sandbox = %sandbox.id, template = ?pooled.request.template, "a warm sandbox is ready");
                lock(&pooled.ready).push_back(Ready { sandbox, permit, fleet });
            }
            Err(e) => {
                let pause = refill_pause(&e);
                warn!(error = %e, template = ?pooled.request.template, pause_s = pause.as_secs(), "could not start a warm sandbox; trying again later");
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

impl SandboxPool {
    /// Starts checking the pool's size every [`KEEP_EVERY`] while it exists.
    pub(super) fn spawn_keeper(&self) {
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(keep(Arc::downgrade(&self.inner), self.inner.stop.clone()));
        }
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
