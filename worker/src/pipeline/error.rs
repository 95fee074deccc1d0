//! How a pipeline ends badly, and how the faults of the parts it uses (the
//! queue, a model, a sandbox) become such an end: whether another attempt may
//! help, or the task cannot succeed as asked. Every pipeline file maps faults
//! through these `From` impls, so the policy lives in one place.

use flotilla_queue::QueueError;
use flotilla_types::task::StopCode;

use crate::model::ModelError;
use crate::sandbox::SandboxError;

/// How a pipeline ended badly.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// A fault that another attempt may not hit (a model 5xx, Redis blip).
    #[error("{0}")]
    Retryable(String),
    /// The task cannot succeed as asked; retrying would not help.
    #[error("{message}")]
    Fatal { code: StopCode, message: String },
    /// The sandbox refused an action as given (a key it does not know, a
    /// point off the screen). Ends the task with code `problem`, unless the
    /// pipeline can tell its model instead.
    #[error("{0}")]
    Refused(String),
    /// The run noticed its cancel token.
    #[error("cancelled")]
    Cancelled,
    /// Another attempt owns the task now.
    #[error("this attempt no longer owns the task")]
    Fenced,
    /// The task's tenant spent its `max_tokens_per_day` or
    /// `max_cost_usd_per_day`: the task stops after its current step and
    /// waits, queued, until `resume_at_ms` (epoch ms, the next UTC day by
    /// the queue's clock).
    #[error(
        "the tenant spent its daily limit (max_tokens_per_day or max_cost_usd_per_day); the task waits for the next UTC day"
    )]
    DayTokensSpent { resume_at_ms: i64 },
    /// The worker is stopping: the run stopped at a step boundary with its
    /// journal written and its sandbox left running, for another worker to
    /// take it up at once.
    #[error("the worker is stopping; the task is handed back at a step boundary")]
    HandedBack,
    /// The task waited for a person past the grace period: its wait is
    /// journaled, its sandbox paused and the task handed back to the queue
    /// parked, for any worker to take up once the answer comes.
    #[error("the task waits for a person, parked: its sandbox is paused and it holds no worker slot")]
    Parked,
}

impl From<QueueError> for PipelineError {
    fn from(e: QueueError) -> Self {
        match e {
            QueueError::Fenced => PipelineError::Fenced,
            QueueError::Cancelled => PipelineError::Cancelled,
            other => PipelineError::Retryable(other.to_string()),
        }
    }
}

/// A model fault: throttling, an outage or a garbled answer is worth another
/// attempt; a refused key or request is not.
impl From<ModelError> for PipelineError {
    fn from(error: ModelError) -> Self {
        match error {
            ModelError::RateLimited { .. } | ModelError::Unavailable(_) | ModelError::Malformed(_) => {
                PipelineError::Retryable(error.to_string())
            }
            ModelError::Unauthorized { .. } | ModelError::Rejected { .. } => {
                PipelineError::Fatal { code: StopCode::Problem, message: error.to_string() }
            }
        }
    }
}

/// A sandbox fault: a bad action is the task's fault; a gone or failing
/// sandbox is worth another attempt on a new one.
impl From<SandboxError> for PipelineError {
    fn from(error: SandboxError) -> Self {
        match error {
            SandboxError::InvalidAction(_) => PipelineError::Refused(error.to_string()),
            SandboxError::InvalidRequest(_) | SandboxError::Unauthorized(_) => {
                PipelineError::Fatal { code: StopCode::Problem, message: error.to_string() }
            }
            other => PipelineError::Retryable(other.to_string()),
        }
    }
}
