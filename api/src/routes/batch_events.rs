//! `GET /v1/batches/{id}/events`: every event of a batch's tasks as
//! Server-Sent Events, closing once every task has ended.
//!
//! Each task's events arrive in order; events of different tasks interleave
//! in the order they happened. Frames carry `id` (the position in the
//! tenant's feed, as on `GET /v1/events`), `event` (the type) and `data`
//! (the stored JSON, with `task_id` and `seq`); a client resumes with
//! `Last-Event-ID`. The ordering rules live in [`crate::feed`].

use axum::response::Response;
use flotilla_queue::queue::FeedId;
use flotilla_types::BatchId;

use super::batches::BatchIdPath;
use super::sse::{self, Subscriber};
use crate::error::{ApiError, ErrorBody};
use crate::feed::BatchFeed;

/// Stream the events of every task of a batch.
///
/// Each frame's `id` is its position in the tenant's feed (`<ms>-<n>` or
/// `<ms>-<n>.<i>`). The
/// batch's stored events after the position come first (from the batch's
/// start without one), then live events; the stream closes once every task
/// has ended.
#[utoipa::path(get, path = "/v1/batches/{id}/events", tag = "batches", security(("bearer" = [])),
    params(("id" = BatchId, Path, description = "Batch id"), sse::FeedResume),
    responses(sse::Answers, (status = 400, description = "Malformed id, `Last-Event-ID` or `after`", body = ErrorBody),
        (status = 404, description = "No such batch for this tenant", body = ErrorBody)))]
pub async fn stream(subscriber: Subscriber, BatchIdPath(id): BatchIdPath) -> Result<Response, ApiError> {
    let cursor = subscriber.resume_at::<FeedId>(&sse::FEED)?;
    let Subscriber { state, tenant, .. } = &subscriber;
    sse::respond(state, tenant, format!("batch {id}"), |client| async {
        let batch = state.queue().reader().batch(tenant, &id).await?.ok_or(ApiError::NotFound("no such batch"))?;
        let feed = BatchFeed::prepare(state.queue().clone(), &batch, cursor, client).await?;
        let live = state.tails().follow(tenant).await?;
        Ok(feed.run(live))
    })
    .await
}
