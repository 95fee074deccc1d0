//! Watching a kept-alive sandbox: a sandbox left running after its task
//! holds one of its tenant's `max_sandboxes` slots until its deadline, but
//! one that dies sooner (killed from outside, its host gone) should not.
//! The worker that kept it asks its provider about it every
//! [`CHECK_EVERY`] until the deadline, and gives the slot back as soon as
//! the provider no longer knows it or says it is not alive.
//!
//! Invariant: a watch ends by its sandbox's deadline at the latest (the
//! deadline it was kept with; a later task that runs in the sandbox holds
//! the slot on its own, and keeps the sandbox again when it leaves it).
//! A provider that cannot answer leaves the slot as it is (the deadline
//! bounds it).

use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;
use tracing::{debug, warn};

use super::handle::TaskHandle;
use crate::sandbox::{SandboxError, SandboxId, SandboxProvider};

/// How often a kept sandbox is looked at.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(5);

/// One kept sandbox to watch.
pub(crate) struct KeptSandbox {
    pub provider: Arc<dyn SandboxProvider>,
    /// The handle of the task that kept it, through which its tenant's
    /// slot is given back.
    pub task: Arc<dyn TaskHandle>,
    /// The name the scheduler counts it by (`<provider>:<id>`).
    pub name: String,
    pub id: SandboxId,
    pub until: OffsetDateTime,
}

/// Watches `kept` in the background until its deadline or its end.
pub(crate) fn spawn(kept: KeptSandbox) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(watch(kept));
    }
}

async fn watch(kept: KeptSandbox) {
    loop {
        let left = Duration::try_from(kept.until - OffsetDateTime::now_utc()).unwrap_or(Duration::ZERO);
        if left.is_zero() {
            return;
        }
        tokio::time::sleep(CHECK_EVERY.min(left)).await;
        let gone = match kept.provider.status(&kept.id).await {
            Ok(status) => !status.alive,
            Err(SandboxError::NotFound(_) | SandboxError::Expired(_)) => true,
            Err(e) => {
                debug!(sandbox = %kept.id, error = %e, "could not look at a kept sandbox");
                false
            }
        };
        if gone {
            if let Err(e) = kept.task.forget_kept_sandbox(&kept.name).await {
                warn!(sandbox = %kept.id, error = %e, "could not give back the slot of a kept sandbox found gone");
            }
            debug!(sandbox = %kept.id, "a kept sandbox is gone before its deadline");
            return;
        }
    }
}
