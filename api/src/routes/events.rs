//! `GET /v1/tasks/{id}/events`: a task's progress as Server-Sent Events,
//! replaying the stored history after `Last-Event-ID` (or `?after=`) and then
//! following live until the terminal event. The ordering rules live in
//! [`crate::feed`].

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use flotilla_shared::{QueueError, ValidationError};
use futures::StreamExt;
use serde::Deserialize;
use tokio_stream::wrappers::ReceiverStream;
use tracing::Instrument;
use utoipa::IntoParams;

use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{QueryParams, TaskIdPath};
use crate::feed::TaskFeed;
use crate::state::AppState;

/// How often an idle stream sends a comment, so proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Events buffered for a client that reads slowly.
const BUFFER: usize = 64;

/// Parameters of the event stream.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct EventsParams {
    /// Send only events with a greater seq; `Last-Event-ID` wins when both are given.
    #[param(value_type = Option<u64>)]
    pub after: Option<String>,
}

/// Stream a task's events.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}/events",
    tag = "tasks",
    params(
        ("id" = String, Path, description = "Task id"),
        ("Last-Event-ID" = Option<u64>, Header, description = "Resume after this seq"),
        EventsParams,
    ),
    responses(
        (status = 200, description = "Server-Sent Events: `id` the seq, `event` the type, `data` one Event as JSON; the stream closes after the terminal event", body = String, content_type = "text/event-stream"),
        (status = 400, description = "Malformed id, `Last-Event-ID` or `after`", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such task for this tenant", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn stream(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    TaskIdPath(id): TaskIdPath,
    QueryParams(params): QueryParams<EventsParams>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let after = resume_after(&headers, &params)?;
    let task = state.queue().get(&tenant, &id).await?.ok_or(QueueError::NotFound)?;
    let live = TaskFeed::subscribe(state.queue(), &id).await?;
    let history = state.queue().events_after(&id, after).await?;
    let (tx, rx) = tokio::sync::mpsc::channel(BUFFER);
    let feed = TaskFeed::new(state.queue().clone(), tenant, id, after, tx, state.shutdown().clone());
    tokio::spawn(feed.run(live, history, task.status.is_terminal()).instrument(tracing::Span::current()));
    let events = ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    let sse = Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE));
    Ok(([("x-accel-buffering", "no")], sse).into_response())
}

/// The seq the client already has: `Last-Event-ID`, else `?after=`, else 0.
fn resume_after(headers: &HeaderMap, params: &EventsParams) -> Result<u64, ValidationError> {
    if let Some(value) = headers.get("last-event-id") {
        let text = value.to_str().unwrap_or("-").trim();
        if !text.is_empty() {
            return text
                .parse()
                .map_err(|_| ValidationError::at("Last-Event-ID", "Last-Event-ID must be the seq of an event, a whole number"));
        }
    }
    match params.after.as_deref().map(str::trim).filter(|a| !a.is_empty()) {
        None => Ok(0),
        Some(text) => text.parse().map_err(|_| ValidationError::at("after", "after must be the seq of an event, a whole number")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_header(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("last-event-id", HeaderValue::from_str(value).expect("header"));
        headers
    }

    fn after(value: &str) -> EventsParams {
        EventsParams { after: Some(value.to_owned()) }
    }

    #[test]
    fn last_event_id_wins_over_after() {
        assert_eq!(resume_after(&with_header("7"), &after("3")), Ok(7));
        assert_eq!(resume_after(&HeaderMap::new(), &after("3")), Ok(3));
        assert_eq!(resume_after(&HeaderMap::new(), &EventsParams::default()), Ok(0));
        assert_eq!(resume_after(&with_header(""), &after("2")), Ok(2));
    }

    #[test]
    fn a_non_numeric_position_is_refused_with_its_name() {
        let err = resume_after(&with_header("abc"), &EventsParams::default()).expect_err("refused");
        assert_eq!(err.field.as_deref(), Some("Last-Event-ID"));
        let err = resume_after(&HeaderMap::new(), &after("-1")).expect_err("refused");
        assert_eq!(err.field.as_deref(), Some("after"));
    }
}
