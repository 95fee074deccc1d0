//! `GET /v1/tasks/{id}/events`: a task's progress as Server-Sent Events,
//! replaying the stored history after `Last-Event-ID` (or `?after=`) and then
//! following live until the terminal event. The ordering rules live in
//! [`crate::feed`].

use axum::response::Response;
use flotilla_queue::QueueError;
use flotilla_types::TaskId;

use super::sse::{self, Subscriber};
use crate::error::{ApiError, ErrorBody};
use crate::extract::TaskIdPath;
use crate::feed::TaskFeed;
use crate::hub::Topic;

/// Stream a task's events.
///
/// Each frame's `id` is the event's seq. The task's stored events after the
/// position come first (all of them without one), then live events; the
/// stream closes after the terminal event.
#[utoipa::path(get, path = "/v1/tasks/{id}/events", tag = "tasks", security(("bearer" = [])),
    params(("id" = TaskId, Path, description = "Task id"), sse::SeqResume),
    responses(sse::Answers, (status = 400, description = "Malformed id, `Last-Event-ID` or `after`", body = ErrorBody),
        (status = 404, description = "No such task for this tenant", body = ErrorBody)))]
pub async fn stream(subscriber: Subscriber, TaskIdPath(id): TaskIdPath) -> Result<Response, ApiError> {
    let after = subscriber.resume_at(&sse::SEQ)?.unwrap_or(0);
    let Subscriber { state, tenant, .. } = &subscriber;
    sse::respond(state, tenant, format!("task {id}"), |client| async {
        let task = state.queue().reader().get(tenant, &id).await?.ok_or(QueueError::NotFound)?;
        let live = state.hub().subscribe(Topic::Task(id.clone())).await?;
        let history = state.queue().reader().events_after(tenant, &id, after).await?;
        let feed = TaskFeed::new(state.queue().clone(), tenant.clone(), id.clone(), after, client);
        Ok(feed.run(live, history, task.status.is_terminal()))
    })
    .await
}
