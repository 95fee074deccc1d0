//! `GET /v1/tasks/{id}/events`: a task's progress as Server-Sent Events,
//! replaying the stored history after `Last-Event-ID` (or `?after=`) and then
//! following live until the terminal event. The ordering rules live in
//! [`crate::feed`].

use axum::response::Response;
use flotilla_shared::{QueueError, TaskId};
use serde::Deserialize;
use utoipa::IntoParams;

use super::sse::{self, Subscriber};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{QueryParams, TaskIdPath};
use crate::feed::TaskFeed;
use crate::hub::Topic;

/// What a task's position looks like, for errors.
const SEQ: &str = "the seq of an event, a whole number";

/// Parameters of the event stream.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsParams {
    /// Send only events with a greater seq; `Last-Event-ID` wins when both are given.
    #[param(pattern = r"^([0-9]{1,19})?$")]
    pub after: Option<String>,
}

/// Stream a task's events.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}/events",
    tag = "tasks",
    params(
        ("id" = TaskId, Path, description = "Task id"),
        ("Last-Event-ID" = Option<String>, Header, nullable = false, pattern = r"^([0-9]{1,19})?$", description = "Resume after this seq"),
        EventsParams,
    ),
    responses(
        (status = 200, description = "Server-Sent Events: `id` the seq, `event` the type, `data` one Event as JSON; the stream closes after the terminal event, or after its maximum lifetime (`FLOTILLA_STREAM_MAX_LIFETIME_S`), when the client resumes with `Last-Event-ID`", body = sse::SseFrame, content_type = "text/event-stream"),
        (status = 400, description = "Malformed id, `Last-Event-ID` or `after`", body = ErrorBody),
        (status = 404, description = "No such task for this tenant", body = ErrorBody),
        sse::Refusals,
    ),
    security(("bearer" = []))
)]
pub async fn stream(
    subscriber: Subscriber,
    TaskIdPath(id): TaskIdPath,
    QueryParams(params): QueryParams<EventsParams>,
) -> Result<Response, ApiError> {
    let after = subscriber.resume_at(params.after.as_deref(), SEQ)?.unwrap_or(0);
    let Subscriber { state, tenant, .. } = &subscriber;
    sse::respond(state, tenant, format!("task {id}"), |client| async {
        let task = state.queue().get(tenant, &id).await?.ok_or(QueueError::NotFound)?;
        let live = state.hub().subscribe(Topic::Task(id.clone())).await?;
        let history = state.queue().events_after(&id, after).await?;
        let feed = TaskFeed::new(state.queue().clone(), tenant.clone(), id.clone(), after, client);
        Ok(feed.run(live, history, task.status.is_terminal()))
    })
    .await
}
