//! What every event-stream endpoint shares: who subscribes ([`Subscriber`]:
//! the caller's tenant, the request's headers and its `?after=`), reading
//! the client's position (`Last-Event-ID`, else `?after=`, each of the
//! stream's [`Position`] kind), opening the stream ([`respond`]): its place
//! under the tenant's cap, its client, and serving its feed as Server-Sent
//! Events while the place is held; and what every stream documents alike:
//! its position parameters ([`SeqResume`], [`FeedResume`]) and its answers
//! ([`Answers`]: the frames and the refusals).

use std::convert::Infallible;
use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use flotilla_types::{TenantId, ValidationError};
use futures::StreamExt;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tracing::Instrument;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::{ObjectBuilder, Required, Type};
use utoipa::{IntoParams, IntoResponses, ToSchema};

use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::extract::QueryParams;
use crate::feed::Client;
use crate::hub::StreamPermit;
use crate::state::AppState;

/// How often an idle stream sends a comment, so proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Events buffered for a client that reads slowly.
const BUFFER: usize = 256;

/// One frame of an event stream as a client reads it: what the `200`
/// answer of every SSE endpoint describes, frame by frame.
#[derive(Debug, ToSchema)]
#[allow(dead_code)]
pub struct SseFrame {
    /// The frame's position: resume after it with `Last-Event-ID`.
    pub id: String,
    /// The event's type (`queued`, `started`, … `succeeded`).
    pub event: String,
    /// One Event as JSON.
    #[schema(content_media_type = "application/json")]
    pub data: String,
}

/// The answers every event stream gives alike: its frames, and its refusals
/// to open, as the document lists them beside each stream's own (a stream's
/// operation description says when it starts and ends).
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum Answers {
    #[response(
        status = 200,
        description = "Server-Sent Events: `id` the frame's position (resume after it with `Last-Event-ID`), `event` the event's type, `data` one Event as JSON. A stream also ends after its maximum lifetime (`FLOTILLA_STREAM_MAX_LIFETIME_S`), when the client resumes with `Last-Event-ID`",
        content_type = "text/event-stream"
    )]
    Frames(SseFrame),
    #[response(status = 401, description = "Missing or unknown API key")]
    Unauthorized(ErrorBody),
    #[response(
        status = 429,
        description = "The tenant holds as many open event streams as it may (`rate_limited`, with `Retry-After`)"
    )]
    TooManyStreams(ErrorBody),
    #[response(status = 503, description = "Redis unreachable")]
    Unavailable(ErrorBody),
}

/// The kind of position a stream resumes after: how the document states it
/// and how an error describes it.
pub struct Position {
    pattern: &'static str,
    /// What `Last-Event-ID` carries, for the document.
    header: &'static str,
    /// What `?after=` does, for the document.
    after: &'static str,
    /// What a position looks like, for errors.
    what: &'static str,
}

/// A task's stream: the seq of its last event.
pub const SEQ: Position = Position {
    pattern: r"^([0-9]{1,19})?$",
    header: "Resume after this seq",
    after: "Send only events with a greater seq; `Last-Event-ID` wins when both are given.",
    what: "the seq of an event, a whole number",
};

/// A tenant's feed (and a batch's view of it): the `id` of a frame.
pub const FEED: Position = Position {
    pattern: r"^([0-9]{1,19}-[0-9]{1,19}(\.[0-9]{1,9})?)?$",
    header: "Resume after this position (the `id` of the last frame received)",
    after: "Send only events after this position; `Last-Event-ID` wins when both are given.",
    what: "the id of a frame of this feed, like 1732500000000-0 or 1732500000000-0.3",
};

impl Position {
    /// `Last-Event-ID` and `after`, as the document lists them.
    fn params(&self) -> Vec<Parameter> {
        let param = |name: &str, place: ParameterIn, description: &str| {
            ParameterBuilder::new()
                .name(name)
                .parameter_in(place)
                .required(Required::False)
                .description(Some(description))
                .schema(Some(ObjectBuilder::new().schema_type(Type::String).pattern(Some(self.pattern))))
                .build()
        };
        vec![param("Last-Event-ID", ParameterIn::Header, self.header), param("after", ParameterIn::Query, self.after)]
    }
}

/// The position parameters of a task's stream, for the document.
pub struct SeqResume;

impl IntoParams for SeqResume {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        SEQ.params()
    }
}

/// The position parameters of a feed's stream, for the document.
pub struct FeedResume;

impl IntoParams for FeedResume {
    fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
        FEED.params()
    }
}

/// The query every stream takes: nothing but `after`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResumeQuery {
    after: Option<String>,
}

/// The caller of an event stream: the application's state, its tenant (a
/// bad key is a 401 before anything else is read), the request's headers,
/// where `Last-Event-ID` is, and its `?after=` (any other query parameter
/// is a 400).
pub struct Subscriber {
    pub state: AppState,
    pub tenant: TenantId,
    headers: HeaderMap,
    after: Option<String>,
}

impl FromRequestParts<AppState> for Subscriber {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let Tenant(tenant) = Tenant::from_request_parts(parts, state).await?;
        let QueryParams(query) = QueryParams::<ResumeQuery>::from_request_parts(parts, state).await?;
        Ok(Self { state: state.clone(), tenant, headers: parts.headers.clone(), after: query.after })
    }
}

impl Subscriber {
    /// The position the client already has, of this kind; see [`resume_at`].
    pub fn resume_at<T: FromStr>(&self, kind: &Position) -> Result<Option<T>, ValidationError> {
        resume_at(&self.headers, self.after.as_deref(), kind.what)
    }
}

/// The position the client already has: `Last-Event-ID`, else `after`, else
/// none. `what` says what a position looks like, for the error.
/// A malformed `after` is refused even beside a `Last-Event-ID`, which wins.
pub fn resume_at<T: FromStr>(headers: &HeaderMap, after: Option<&str>, what: &str) -> Result<Option<T>, ValidationError> {
    let after = match after.filter(|a| !a.is_empty()) {
        None => None,
        Some(text) => Some(position::<T>(text).ok_or_else(|| ValidationError::at("after", format!("after must be {what}")))?),
    };
    if let Some(value) = headers.get("last-event-id") {
        let text = value.to_str().unwrap_or("-").trim();
        if !text.is_empty() {
            return position::<T>(text)
                .map(Some)
                .ok_or_else(|| ValidationError::at("Last-Event-ID", format!("Last-Event-ID must be {what}")));
        }
    }
    Ok(after)
}

/// A position as the document states it: whole numbers of at most 19
/// digits, joined by `-` for a feed, then for an event inside a feed entry
/// `.` and at most 9 digits (no sign, no space).
fn position<T: FromStr>(text: &str) -> Option<T> {
    let number = |n: &str, most: usize| (1..=most).contains(&n.len()) && n.bytes().all(|b| b.is_ascii_digit());
    let (id, inside) = match text.split_once('.') {
        Some((id, i)) => (id, Some(i)),
        None => (text, None),
    };
    let digits = id.split('-').all(|n| number(n, 19)) && inside.is_none_or(|i| number(i, 9));
    if digits {
        text.parse().ok()
    } else {
        None
    }
}

/// Opens an event stream of `tenant`: takes one of the tenant's stream
/// places (429 past its cap), gives `start` the stream's client to build
/// the feed with, then runs the feed in the background, holding the place
/// until it ends, and answers with its frames as they come. `label` names
/// the stream in logs. Every SSE endpoint answers through here.
pub async fn respond<Start, Starting, Feed>(
    state: &AppState,
    tenant: &TenantId,
    label: String,
    start: Start,
) -> Result<Response, ApiError>
where
    Start: FnOnce(Client) -> Starting,
    Starting: Future<Output = Result<Feed, ApiError>>,
    Feed: Future<Output = ()> + Send + 'static,
{
    let permit = state.hub().admit(tenant)?;
    let (tx, frames) = mpsc::channel(BUFFER);
    let client = Client::new(tx, state.shutdown().clone(), permit.expires(), label);
    let feed = start(client).await?;
    Ok(serve(permit, frames, feed))
}

/// Runs `feed` in the background, holding `permit` until it ends, and
/// answers with its frames as they come.
fn serve(permit: StreamPermit, frames: mpsc::Receiver<SseEvent>, feed: impl Future<Output = ()> + Send + 'static) -> Response {
    let run = async move {
        let _permit = permit;
        feed.await;
    };
    tokio::spawn(run.instrument(tracing::Span::current()));
    let events = ReceiverStream::new(frames).map(Ok::<_, Infallible>);
    let sse = Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE));
    ([("x-accel-buffering", "no")], sse).into_response()
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

    const SEQ: &str = "the seq of an event";

    #[test]
    fn last_event_id_wins_over_after() {
        assert_eq!(resume_at::<u64>(&with_header("7"), Some("3"), SEQ), Ok(Some(7)));
        assert_eq!(resume_at::<u64>(&HeaderMap::new(), Some("3"), SEQ), Ok(Some(3)));
        assert_eq!(resume_at::<u64>(&HeaderMap::new(), None, SEQ), Ok(None));
        assert_eq!(resume_at::<u64>(&with_header(""), Some("2"), SEQ), Ok(Some(2)));
    }

    #[test]
    fn a_malformed_position_is_refused_with_its_name() {
        let err = resume_at::<u64>(&with_header("abc"), None, SEQ).expect_err("refused");
        assert_eq!(err.field.as_deref(), Some("Last-Event-ID"));
        let err = resume_at::<u64>(&HeaderMap::new(), Some("-1"), SEQ).expect_err("refused");
        assert_eq!(err.field.as_deref(), Some("after"));
        let err = resume_at::<flotilla_queue::queue::FeedId>(&with_header("12"), None, "a feed position").expect_err("refused");
        assert_eq!(err.field.as_deref(), Some("Last-Event-ID"));
        for bad in ["+3", " 3", "3 ", "99999999999999999999", "1--2"] {
            assert!(resume_at::<u64>(&HeaderMap::new(), Some(bad), SEQ).is_err(), "{bad:?}");
        }
        let feed = resume_at::<flotilla_queue::queue::FeedId>(&HeaderMap::new(), Some("1732500000000-3"), "a feed position");
        assert!(matches!(feed, Ok(Some(_))));
        let inside = resume_at::<flotilla_queue::queue::FeedId>(&with_header("1732500000000-3.2"), None, "a feed position");
        assert_eq!(inside.map(|p| p.map(|p| p.to_string())), Ok(Some("1732500000000-3.2".to_owned())));
        for bad in ["1-2.", "1-2.1234567890", "1-2.3.4", "1.2-3", "3.5"] {
            let refused = resume_at::<flotilla_queue::queue::FeedId>(&HeaderMap::new(), Some(bad), "a feed position");
            assert!(refused.is_err(), "{bad:?}");
        }
        assert!(resume_at::<u64>(&HeaderMap::new(), Some("3.5"), SEQ).is_err(), "a seq has no place inside an entry");
    }
}
