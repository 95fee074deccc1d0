//! The queue's errors. They say what went wrong in the terms of the task model
//! and the queue; the API alone decides which HTTP status each one becomes.

/// What the queue can answer besides success.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("redis is unreachable: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("redis pool: {0}")]
    Pool(String),
    #[error("task not found")]
    NotFound,
    #[error("idempotency key was used with a different request body")]
    IdempotencyConflict,
    #[error("task is {0}; this needs another status")]
    WrongStatus(String),
    #[error("this attempt no longer owns the task")]
    Fenced,
    /// The task was cancelled while it waited parked; the attempt that
    /// took it up ends it.
    #[error("the task was cancelled")]
    Cancelled,
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// A task came to the queue with no pipeline: whatever accepts a task
    /// decides its pipeline before it is queued (the API from
    /// `FLOTILLA_DEFAULT_PIPELINE`), so no worker ever guesses one.
    #[error("the task names no pipeline; one is decided before a task is queued")]
    NoPipeline,
    /// The object store holding finished tasks past their hot window
    /// (`queue::archive`) failed.
    #[error("task archive: {0}")]
    Archive(String),
}

impl From<deadpool_redis::PoolError> for QueueError {
    fn from(e: deadpool_redis::PoolError) -> Self {
        match e {
            deadpool_redis::PoolError::Backend(inner) => QueueError::Redis(inner),
            other => QueueError::Pool(other.to_string()),
        }
    }
}
