//! `GET /v1/batches/{id}/events`: every event of a batch's tasks as
//! Server-Sent Events, closing once every task has ended.
//!
//! Each task's events arrive in order; events of different tasks interleave.
//! Frames carry `event` (the type) and `data` (the stored JSON, with
//! `task_id` and `seq`), and no `id`: resuming is per task, through
//! `GET /v1/tasks/{id}/events`. The ordering rules live in [`crate::feed`].

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tracing::Instrument;

use super::batches::BatchIdPath;
use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::feed::BatchFeed;
use crate::state::AppState;

/// How often an idle stream sends a comment, so proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Events buffered for a client that reads slowly.
const BUFFER: usize = 256;

/// Stream the events of every task of a batch.
#[utoipa::path(
    get,
    path = "/v1/batches/{id}/events",
    tag = "batches",
    params(("id" = String, Path, description = "Batch id")),
    responses(
        (status = 200, description = "Server-Sent Events: `event` the type, `data` one Event as JSON; each task's history, then live events; the stream closes once every task has ended", body = String, content_type = "text/event-stream"),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such batch for this tenant", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn stream(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    BatchIdPath(id): BatchIdPath,
) -> Result<Response, ApiError> {
    let batch = state.queue().batch(&tenant, &id).await?.ok_or(ApiError::NotFound("no such batch"))?;
    let live = BatchFeed::subscribe(state.queue(), &batch.id).await?;
    let tasks = state.queue().batch_task_ids(&batch.id).await?;
    let (tx, rx) = mpsc::channel(BUFFER);
    let feed = BatchFeed::new(state.queue().clone(), batch.id, tasks, tx, state.shutdown().clone());
    tokio::spawn(feed.run(live).instrument(tracing::Span::current()));
    let events = ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    let sse = Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE));
    Ok(([("x-accel-buffering", "no")], sse).into_response())
}
