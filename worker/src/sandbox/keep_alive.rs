//! Keeping a task's sandbox alive while the task runs.
//!
//! A sandbox lives until its deadline unless extended, and a task may run
//! longer than the sandbox was started for. A [`KeepAlive`] watches one
//! sandbox in the background: when its life left drops under a margin (60 s,
//! or half an extension for short-lived sandboxes), it extends the sandbox
//! by one more stretch, never past the task's own deadline (plus the
//! margin, so its last steps still find it), so a sandbox whose worker died is not kept running long.
//!
//! When the sandbox cannot be kept, the keeper says why, once, through
//! [`KeepAlive::lost`]: the provider no longer knows it (killed from
//! outside: worth another attempt on a new sandbox), or it refused to
//! extend it (a plan's maximum lifetime, a broken provider: the task ends
//! with code `problem`). A transient failure is tried again a few times, a
//! second apart, before giving up; nothing is retried beyond that.

use std::sync::Arc;
use std::time::{Duration, Instant};

use time::OffsetDateTime;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use super::{SandboxError, SandboxId, SandboxProvider};

/// The most life left at which a sandbox is extended.
const MAX_MARGIN: Duration = Duration::from_secs(60);
/// Tries of one extension when the provider is briefly unavailable.
const EXTEND_TRIES: u32 = 3;
/// Pause between those tries.
const TRY_PAUSE: Duration = Duration::from_secs(1);

/// How a sandbox is kept alive.
#[derive(Debug, Clone, Copy)]
pub struct KeepAlivePolicy {
    /// The life each extension asks for: the sandbox's own timeout.
    pub stretch: Duration,
    /// When the task must end; the sandbox is never kept much past it.
    pub until: Instant,
}

impl KeepAlivePolicy {
    /// The life left under which the sandbox is extended.
    pub fn margin(&self) -> Duration {
        MAX_MARGIN.min(self.stretch / 2)
    }
}

/// Why a sandbox could not be kept alive.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxLost {
    /// The provider no longer knows the sandbox: it was ended from outside.
    #[error("the sandbox is gone: {0}")]
    Gone(String),
    /// The sandbox nears its deadline and could not be extended.
    #[error("the sandbox nears its deadline and could not be extended: {0}")]
    NotExtended(String),
}

#[derive(Debug, Clone)]
struct State {
    expires_at: OffsetDateTime,
    lost: Option<SandboxLost>,
}

/// Keeps one sandbox alive until dropped.
pub struct KeepAlive {
    state: watch::Receiver<State>,
    task: JoinHandle<()>,
}

impl KeepAlive {
    /// Starts keeping sandbox `id`, whose deadline is now `expires_at`.
    pub fn spawn(provider: Arc<dyn SandboxProvider>, id: SandboxId, expires_at: OffsetDateTime, policy: KeepAlivePolicy) -> Self {
        let (sender, state) = watch::channel(State { expires_at, lost: None });
        let task = tokio::spawn(async move {
            keep(provider.as_ref(), &id, &sender, policy).await;
            // The sender lives on, so waiters on `lost` wait, not fail.
            std::future::pending::<()>().await;
        });
        Self { state, task }
    }

    /// The sandbox's deadline as last extended.
    pub fn expires_at(&self) -> OffsetDateTime {
        self.state.borrow().expires_at
    }

    /// Whether the provider no longer knows the sandbox.
    pub fn is_gone(&self) -> bool {
        matches!(self.state.borrow().lost, Some(SandboxLost::Gone(_)))
    }

    /// Resolves once the sandbox could not be kept; never while it is.
    pub async fn lost(&self) -> SandboxLost {
        let mut state = self.state.clone();
        let lost = state.wait_for(|s| s.lost.is_some()).await.ok().and_then(|s| s.lost.clone());
        match lost {
            Some(lost) => lost,
            None => std::future::pending().await,
        }
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Extends the sandbox whenever its life left drops under the margin,
/// until it lives past the task's end or cannot be kept.
async fn keep(provider: &dyn SandboxProvider, id: &SandboxId, state: &watch::Sender<State>, policy: KeepAlivePolicy) {
    let needed_until = policy.until + policy.margin();
    loop {
        let expires_at = state.borrow().expires_at;
        let left = life_left(expires_at);
        if left >= needed_until.saturating_duration_since(Instant::now()) {
            debug!(sandbox = %id, "the sandbox outlives its task");
            return;
        }
        tokio::time::sleep(left.saturating_sub(policy.margin())).await;
        let by = policy.stretch.min(needed_until.saturating_duration_since(Instant::now()));
        match extend(provider, id, by, expires_at).await {
            Ok(later) => {
                debug!(sandbox = %id, by_s = by.as_secs(), "sandbox extended");
                state.send_modify(|s| s.expires_at = later);
            }
            Err(lost) => {
                warn!(sandbox = %id, error = %lost, "the sandbox cannot be kept alive");
                state.send_modify(|s| s.lost = Some(lost));
                return;
            }
        }
    }
}

/// One extension, tried again while the provider is briefly unavailable.
/// A deadline that did not move counts as refused, so the keeper never
/// spins on a provider that answers yes and does nothing.
async fn extend(
    provider: &dyn SandboxProvider,
    id: &SandboxId,
    by: Duration,
    before: OffsetDateTime,
) -> Result<OffsetDateTime, SandboxLost> {
    let mut tries = 1;
    loop {
        match provider.extend(id, by).await {
            Ok(later) if later > before => return Ok(later),
            Ok(_) => return Err(SandboxLost::NotExtended(format!("the provider did not move the deadline of sandbox {id}"))),
            Err(error @ SandboxError::NotFound(_)) => return Err(SandboxLost::Gone(error.to_string())),
            Err(error) if is_transient(&error) && tries < EXTEND_TRIES => {
                debug!(sandbox = %id, %error, "extending the sandbox failed; trying again");
            }
            Err(error) => return Err(SandboxLost::NotExtended(error.to_string())),
        }
        tries += 1;
        tokio::time::sleep(TRY_PAUSE).await;
    }
}

fn is_transient(error: &SandboxError) -> bool {
    matches!(error, SandboxError::Unavailable(_) | SandboxError::Io(_))
}

/// Life left until `expires_at`, zero once past.
fn life_left(expires_at: OffsetDateTime) -> Duration {
    Duration::try_from(expires_at - OffsetDateTime::now_utc()).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::{MemoryProvider, SandboxRequest};

    fn policy(stretch_ms: u64, task_ms: u64) -> KeepAlivePolicy {
        KeepAlivePolicy { stretch: Duration::from_millis(stretch_ms), until: Instant::now() + Duration::from_millis(task_ms) }
    }

    async fn short_lived(provider: &MemoryProvider, life_ms: u64) -> crate::sandbox::Sandbox {
        let request = SandboxRequest { timeout: Duration::from_millis(life_ms), ..SandboxRequest::default() };
        provider.create(&request).await.expect("created")
    }

    #[tokio::test]
    async fn a_sandbox_is_extended_before_its_deadline_until_the_task_ends() {
        let provider = Arc::new(MemoryProvider::new());
        let sandbox = short_lived(&provider, 1_000).await;
        let keeper = KeepAlive::spawn(provider.clone(), sandbox.id.clone(), sandbox.expires_at, policy(1_000, 2_500));
        // Time passing is the test: the keeper runs on the provider's wall
        // clock (deadlines are dates), which no test clock moves.
        tokio::time::sleep(Duration::from_millis(2_200)).await;
        let status = provider.status(&sandbox.id).await.expect("still alive past its first deadline");
        assert!(status.alive);
        assert!(keeper.expires_at() > sandbox.expires_at + time::Duration::seconds(1), "extended more than once");
        assert!(provider.extensions() >= 2, "{} extensions", provider.extensions());
        // Past the task's end (2.5 s), then a second in which nothing more
        // is extended.
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let last = provider.extensions();
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        assert_eq!(provider.extensions(), last, "not extended past the task's end");
    }

    #[tokio::test]
    async fn a_refused_extension_is_reported_once_not_retried() {
        let provider = Arc::new(MemoryProvider::new());
        provider.refuse_extensions("max instance length exceeded");
        let sandbox = short_lived(&provider, 1_000).await;
        let keeper = KeepAlive::spawn(provider.clone(), sandbox.id.clone(), sandbox.expires_at, policy(1_000, 60_000));
        let lost = tokio::time::timeout(Duration::from_secs(3), keeper.lost()).await.expect("reported before the deadline");
        assert!(matches!(&lost, SandboxLost::NotExtended(m) if m.contains("max instance length")), "{lost:?}");
        // The sleep is what is tested: in 500 ms, no second request.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(provider.extensions(), 1, "one refused request, no storm");
    }

    #[tokio::test]
    async fn a_sandbox_killed_from_outside_is_gone() {
        let provider = Arc::new(MemoryProvider::new());
        let sandbox = short_lived(&provider, 1_000).await;
        let keeper = KeepAlive::spawn(provider.clone(), sandbox.id.clone(), sandbox.expires_at, policy(1_000, 60_000));
        provider.kill(&sandbox.id).await.expect("killed");
        let lost = tokio::time::timeout(Duration::from_secs(3), keeper.lost()).await.expect("reported");
        assert!(matches!(lost, SandboxLost::Gone(_)), "{lost:?}");
    }

    #[tokio::test]
    async fn a_sandbox_that_outlives_the_task_is_left_alone() {
        let provider = Arc::new(MemoryProvider::new());
        let sandbox = short_lived(&provider, 60_000).await;
        let _keeper = KeepAlive::spawn(provider.clone(), sandbox.id.clone(), sandbox.expires_at, policy(60_000, 1_000));
        // The sleep is what is tested: in 300 ms, no extension.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(provider.extensions(), 0);
    }
}
