//! Which sandbox a task runs in, and what becomes of it afterwards.
//!
//! The task's `sandbox` field decides:
//! - no `id`: a new sandbox from the pool (a warm one when its shape
//!   allows), killed when the task ends, unless `keep_alive` is set and the
//!   task ended for good (succeeded, or failed in a way a retry would not
//!   mend): then it is left running and its id stays on the task, so a
//!   later task can name it. An attempt that will be retried, or a
//!   cancelled one, never keeps its sandbox: the retry starts clean.
//! - `id` (and `url`): the user's existing sandbox, found through the
//!   provider by id; it is the user's, so it is never killed here. Providers
//!   find sandboxes by id alone, so `url` is only carried along.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_shared::task::{SandboxSpec, StopCode};
use tokio_util::sync::CancellationToken;

use super::error::PipelineError;
use crate::sandbox::{Lease, Sandbox, SandboxError, SandboxId, SandboxPool, SandboxProvider, SandboxRequest};

/// What the task's `sandbox` field asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SandboxChoice {
    /// A sandbox started (or taken warm) for this task.
    New { request: SandboxRequest, keep_alive: bool },
    /// The sandbox the task names.
    Existing { id: SandboxId, stretch: Duration },
}

impl SandboxChoice {
    /// The choice the task's `sandbox` field makes, checked against this
    /// worker's provider.
    pub(crate) fn of(spec: Option<&SandboxSpec>, provider: &str) -> Result<Self, PipelineError> {
        let mut request = SandboxRequest::default();
        let Some(spec) = spec else {
            return Ok(Self::New { request, keep_alive: false });
        };
        check_provider(spec, provider)?;
        if let Some(seconds) = spec.timeout_s {
            request.timeout = Duration::from_secs(seconds);
        }
        if let Some(id) = &spec.id {
            let id = SandboxId::parse(id).map_err(|e| problem(format!("sandbox.id: {e}")))?;
            return Ok(Self::Existing { id, stretch: request.timeout });
        }
        request.template.clone_from(&spec.template);
        if let Some([w, h]) = spec.resolution {
            request.resolution = (w, h);
        }
        Ok(Self::New { request, keep_alive: spec.keep_alive.unwrap_or(false) })
    }

    /// How long each extension of the sandbox asks for.
    pub(crate) fn stretch(&self) -> Duration {
        match self {
            Self::New { request, .. } => request.timeout,
            Self::Existing { stretch, .. } => *stretch,
        }
    }
}

/// The sandbox a session acts on.
pub(crate) enum Held {
    /// Taken from the pool for this task.
    Leased { lease: Lease, keep_alive: bool },
    /// The user's own sandbox, found by id.
    Existing { sandbox: Sandbox, waited: Duration },
}

impl Held {
    /// Gets the sandbox `choice` asks for; waits for the pool (and the fleet
    /// cap) unless `cancel` fires.
    pub(crate) async fn take(
        pool: &SandboxPool,
        choice: &SandboxChoice,
        cancel: &CancellationToken,
    ) -> Result<Self, PipelineError> {
        match choice {
            SandboxChoice::New { request, keep_alive } => {
                let lease = pool.acquire(request, cancel).await.map_err(PipelineError::from)?;
                Ok(Self::Leased { lease, keep_alive: *keep_alive })
            }
            SandboxChoice::Existing { id, .. } => {
                let began = Instant::now();
                let sandbox = pool.provider().connect(id).await.map_err(|e| existing_failure(id, e))?;
                Ok(Self::Existing { sandbox, waited: began.elapsed() })
            }
        }
    }

    pub(crate) fn sandbox(&self) -> &Sandbox {
        match self {
            Self::Leased { lease, .. } => &lease.sandbox,
            Self::Existing { sandbox, .. } => sandbox,
        }
    }

    /// Taken ready from the pool.
    pub(crate) fn warm(&self) -> bool {
        matches!(self, Self::Leased { lease, .. } if lease.warm)
    }

    /// How long getting the sandbox took.
    pub(crate) fn waited(&self) -> Duration {
        match self {
            Self::Leased { lease, .. } => lease.waited,
            Self::Existing { waited, .. } => *waited,
        }
    }

    /// Settles the sandbox once the attempt ended with `outcome`: kills a
    /// leased one, or leaves it running for a later task when it was asked
    /// to be kept and the task ended for good. `expires_at` is its deadline
    /// as last extended.
    pub(crate) async fn settle<T>(
        self,
        pool: &SandboxPool,
        outcome: &Result<T, PipelineError>,
        expires_at: Option<time::OffsetDateTime>,
    ) {
        match self {
            Self::Leased { mut lease, keep_alive: true } if ends_for_good(outcome) => {
                if let Some(at) = expires_at {
                    lease.sandbox.expires_at = at;
                }
                pool.keep(lease).await;
            }
            Self::Leased { lease, .. } => pool.release(lease).await,
            Self::Existing { .. } => {}
        }
    }

    /// Gives a leased sandbox back in the background, for a session
    /// dropped mid-step; the user's own sandbox is left alone.
    pub(crate) fn release_in_background(self, pool: &SandboxPool) {
        let Self::Leased { lease, .. } = self else { return };
        let pool = pool.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { pool.release(lease).await });
        }
    }

    pub(crate) fn provider_and_id<'a>(&'a self, pool: &'a SandboxPool) -> (&'a Arc<dyn SandboxProvider>, &'a SandboxId) {
        (pool.provider(), &self.sandbox().id)
    }
}

/// Whether the task ends with this attempt: a retry or a cancel does not
/// count, so neither keeps a sandbox.
fn ends_for_good<T>(outcome: &Result<T, PipelineError>) -> bool {
    matches!(outcome, Ok(_) | Err(PipelineError::Fatal { .. } | PipelineError::Refused(_)))
}

fn check_provider(spec: &SandboxSpec, provider: &str) -> Result<(), PipelineError> {
    let Some(kind) = spec.provider else { return Ok(()) };
    let wanted = serde_json::to_value(kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
    if wanted != provider {
        return Err(problem(format!("the task asks for a {wanted} sandbox and this worker provides {provider}")));
    }
    Ok(())
}

/// A named sandbox that cannot be reached will not appear by retrying.
fn existing_failure(id: &SandboxId, error: SandboxError) -> PipelineError {
    match error {
        SandboxError::NotFound(_) | SandboxError::Expired(_) => {
            problem(format!("the sandbox {id} named by sandbox.id does not exist or has ended"))
        }
        other => PipelineError::from(other),
    }
}

fn problem(message: String) -> PipelineError {
    PipelineError::Fatal { code: StopCode::Problem, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> SandboxSpec {
        serde_json::from_value(json).expect("spec")
    }

    #[test]
    fn no_sandbox_field_asks_for_a_default_sandbox() {
        let choice = SandboxChoice::of(None, "local").expect("choice");
        assert_eq!(choice, SandboxChoice::New { request: SandboxRequest::default(), keep_alive: false });
    }

    #[test]
    fn an_id_names_an_existing_sandbox() {
        let choice =
            SandboxChoice::of(Some(&spec(serde_json::json!({"id": "local-1", "timeout_s": 60}))), "local").expect("choice");
        let id = SandboxId::parse("local-1").expect("id");
        assert_eq!(choice, SandboxChoice::Existing { id, stretch: Duration::from_secs(60) });
    }

    #[test]
    fn keep_alive_and_the_shape_are_read() {
        let spec = spec(serde_json::json!({"resolution": [800, 600], "keep_alive": true}));
        let SandboxChoice::New { request, keep_alive } = SandboxChoice::of(Some(&spec), "local").expect("choice") else {
            panic!("a new sandbox");
        };
        assert!(keep_alive);
        assert_eq!(request.resolution, (800, 600));
    }

    #[test]
    fn a_bad_id_or_another_provider_is_a_problem() {
        for (json, provider) in [(serde_json::json!({"id": "../x"}), "local"), (serde_json::json!({"provider": "e2b"}), "local")]
        {
            let result = SandboxChoice::of(Some(&spec(json)), provider);
            assert!(matches!(result, Err(PipelineError::Fatal { code: StopCode::Problem, .. })), "{result:?}");
        }
    }

    #[test]
    fn only_an_attempt_that_ends_the_task_keeps_its_sandbox() {
        assert!(ends_for_good::<()>(&Ok(())));
        assert!(ends_for_good::<()>(&Err(PipelineError::Fatal { code: StopCode::Problem, message: String::new() })));
        assert!(!ends_for_good::<()>(&Err(PipelineError::Retryable(String::new()))));
        assert!(!ends_for_good::<()>(&Err(PipelineError::Cancelled)));
    }
}
