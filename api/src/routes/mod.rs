//! The HTTP endpoints, one module per resource. Handlers only translate:
//! HTTP in, a call to the queue, HTTP out; the rules live in `flotilla-types` and `flotilla-queue`.

pub mod batch_events;
pub mod batch_report;
pub mod batches;
pub mod events;
pub mod feed_events;
pub mod mcp;
pub mod ops;
pub mod paging;
pub mod profiles;
pub mod queues;
pub mod schedules;
pub mod sse;
pub mod takeover;
pub mod tasks;
pub mod usage;
pub mod views;
pub mod webhook_listen;
pub mod webhooks;

/// Answers a path no route matches.
pub async fn no_route() -> crate::error::ApiError {
    crate::error::ApiError::NotFound("no such route")
}

/// Answers a known path asked with the wrong method.
pub async fn wrong_method() -> crate::error::ApiError {
    crate::error::ApiError::MethodNotAllowed
}
