//! envd's directory watching over Connect: `Filesystem/WatchDir` streams a
//! `start` event once the directory is watched, then a `filesystem` event
//! for each change (and `keepalive`s while idle, as often as the caller's
//! `Keepalive-Ping-Interval` asks) until the caller goes away or its
//! `Connect-Timeout-Ms` passes; `CreateWatcher`, `GetWatcherEvents` and
//! `RemoveWatcher` are the same watch polled (the Python SDK's
//! `files.watch_dir`): events gather in the sandbox's table of
//! [`Watchers`](super::watchers::Watchers) until they are fetched. A sandbox keeps at most
//! [`MAX_WATCHERS`] polled watchers; each holds at most
//! [`MAX_PENDING`] unread events, and one that overflows answers
//! `resource_exhausted` from then on. What is watched is [`watch`](super::watch).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State as Shared;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use flotilla_e2b::connect::{self, ConnectError, EndOfStream, FLAG_END_STREAM, FLAG_MESSAGE};
use serde::Deserialize;
use serde_json::json;

use super::calls::{unary, Refusal};
use super::host::{Entry, Host};
use super::stream::{self, stream_error, streaming_response};
use super::sync::lock;
use super::watch::{DirWatch, FsEvent, WatchError};
use super::watchers::{Polled, Watcher};

/// The most polled watchers one sandbox keeps.
pub(crate) const MAX_WATCHERS: usize = 64;
/// The most unread events one polled watcher keeps.
pub(crate) const MAX_PENDING: usize = 10_000;

/// `WatchDirRequest` and `CreateWatcherRequest`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WatchRequest {
    path: String,
    #[serde(default)]
    recursive: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WatcherRequest {
    watcher_id: String,
}

/// Why a watch call was refused.
fn refusal(error: &WatchError) -> Refusal {
    let status = match error.code() {
        "not_found" => StatusCode::NOT_FOUND,
        "invalid_argument" => StatusCode::BAD_REQUEST,
        "resource_exhausted" => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    Refusal::new(status, error.code(), error.to_string())
}

fn unknown_watcher(id: &str) -> Refusal {
    Refusal::new(StatusCode::NOT_FOUND, "not_found", format!("watcher with id {id} not found"))
}

/// Watches `request` in `sandbox`.
async fn start_watch(host: &Host, sandbox: &Entry, request: &WatchRequest) -> Result<DirWatch, WatchError> {
    let (root, home) = host.local.file_tree(&sandbox.local_id).await.map_err(|e| WatchError::Io(e.to_string()))?;
    DirWatch::start(&root, &home, &request.path, request.recursive)
}

pub(super) async fn watch_dir(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, body: Bytes) -> Response {
    let (sandbox, request): (_, WatchRequest) = match stream::open(&host, &headers, &body).await {
        Ok(opened) => opened,
        Err(refused) => return refused,
    };
    let watch = match start_watch(&host, &sandbox, &request).await {
        Ok(watch) => watch,
        Err(e) => return stream_error(e.code(), e.to_string()),
    };
    let keepalive = stream::keepalive_interval(&headers);
    let timeout = headers.get(connect::TIMEOUT_HEADER).and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    let deadline = timeout.map(|ms| tokio::time::Instant::now() + Duration::from_millis(ms));
    let stream = WatchStream { watch, keepalive, deadline, started: false, done: false };
    let frames = futures::stream::unfold(stream, |mut stream| async move {
        let frame = stream.next_frame().await?;
        Some((Ok::<_, Infallible>(Bytes::from(frame)), stream))
    });
    streaming_response(Body::from_stream(frames))
}

/// A `WatchDir` answer being sent.
struct WatchStream {
    watch: DirWatch,
    keepalive: Duration,
    deadline: Option<tokio::time::Instant>,
    started: bool,
    done: bool,
}

impl WatchStream {
    /// The next envelope to send; `None` after the end of the stream.
    async fn next_frame(&mut self) -> Option<Vec<u8>> {
        if self.done {
            return None;
        }
        if !self.started {
            self.started = true;
            return Some(message(&json!({"start": {}})));
        }
        let deadline = self.deadline;
        let outcome = tokio::select! {
            () = until(deadline) => Outcome::Late,
            () = tokio::time::sleep(self.keepalive) => Outcome::Idle,
            events = self.watch.next_events() => Outcome::Events(events),
        };
        Some(match outcome {
            Outcome::Late => self.end(Some(("deadline_exceeded", "the watch ran past its deadline".into()))),
            Outcome::Idle => message(&json!({"keepalive": {}})),
            Outcome::Events(Ok(events)) if events.is_empty() => self.end(None),
            Outcome::Events(Ok(events)) => events.iter().flat_map(|event| message(&json!({"filesystem": event}))).collect(),
            Outcome::Events(Err(e)) => self.end(Some((e.code(), e.to_string()))),
        })
    }

    fn end(&mut self, error: Option<(&str, String)>) -> Vec<u8> {
        self.done = true;
        let end = EndOfStream { error: error.map(|(code, message)| ConnectError { code: code.into(), message }) };
        connect::envelope(FLAG_END_STREAM, &serde_json::to_vec(&end).unwrap_or_default())
    }
}

/// What ended one wait of a `WatchDir` stream.
enum Outcome {
    Late,
    Idle,
    Events(Result<Vec<FsEvent>, WatchError>),
}

/// Waits until `deadline`, or forever without one.
async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn message(value: &serde_json::Value) -> Vec<u8> {
    connect::envelope(FLAG_MESSAGE, value.to_string().as_bytes())
}

pub(super) async fn create_watcher(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, body: Bytes) -> Response {
    let (sandbox, request) = match unary::<WatchRequest>(&host, &headers, &body).await {
        Ok(call) => call,
        Err(refused) => return refused,
    };
    if lock(&sandbox.watchers.by_id).len() >= MAX_WATCHERS {
        let message = format!("a sandbox keeps at most {MAX_WATCHERS} watchers");
        return Refusal::new(StatusCode::TOO_MANY_REQUESTS, "resource_exhausted", message).into_response();
    }
    let watch = match start_watch(&host, &sandbox, &request).await {
        Ok(watch) => watch,
        Err(e) => return refusal(&e).into_response(),
    };
    let id = format!("w{:016x}", rand::random::<u64>());
    let state = Arc::new(Mutex::new(Polled::default()));
    let task = tokio::spawn(gather(watch, Arc::clone(&state))).abort_handle();
    lock(&sandbox.watchers.by_id).insert(id.clone(), Watcher { state, task });
    Json(json!({ "watcherId": id })).into_response()
}

/// Keeps a polled watcher's events until it stops or overflows.
async fn gather(mut watch: DirWatch, state: Arc<Mutex<Polled>>) {
    loop {
        let (events, stopped) = match watch.next_events().await {
            Ok(events) if events.is_empty() => return,
            Ok(events) => (events, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        let mut polled = lock(&state);
        polled.events.extend(events);
        if polled.events.len() > MAX_PENDING {
            polled.events.clear();
            polled.error = Some(WatchError::Overflow);
        }
        if let Some(error) = stopped {
            polled.error.get_or_insert(error);
        }
        if polled.error.is_some() {
            return;
        }
    }
}

pub(super) async fn get_watcher_events(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, body: Bytes) -> Response {
    let (sandbox, request) = match unary::<WatcherRequest>(&host, &headers, &body).await {
        Ok(call) => call,
        Err(refused) => return refused,
    };
    let taken = lock(&sandbox.watchers.by_id).get(&request.watcher_id).map(|watcher| {
        let mut polled = lock(&watcher.state);
        match &polled.error {
            Some(error) => Err(refusal(error)),
            None => Ok(std::mem::take(&mut polled.events)),
        }
    });
    match taken {
        Some(Ok(events)) => Json(json!({ "events": events })).into_response(),
        Some(Err(refused)) => refused.into_response(),
        None => unknown_watcher(&request.watcher_id).into_response(),
    }
}

pub(super) async fn remove_watcher(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, body: Bytes) -> Response {
    let (sandbox, request) = match unary::<WatcherRequest>(&host, &headers, &body).await {
        Ok(call) => call,
        Err(refused) => return refused,
    };
    let removed = lock(&sandbox.watchers.by_id).remove(&request.watcher_id);
    match removed {
        Some(_stopped) => Json(json!({})).into_response(),
        None => unknown_watcher(&request.watcher_id).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::EventType;

    #[test]
    fn watch_refusals_carry_connect_codes_and_statuses() {
        let answer = |error: WatchError| format!("{:?}", refusal(&error));
        assert!(answer(WatchError::NotFound("x".into())).contains("not_found"));
        assert!(answer(WatchError::NotADirectory("x".into())).contains("invalid_argument"));
        assert!(answer(WatchError::Overflow).contains("resource_exhausted"));
        assert!(answer(WatchError::Io("x".into())).contains("internal"));
    }

    #[test]
    fn events_go_out_as_envds_filesystem_events() {
        let event = FsEvent { name: "sub/a.txt".into(), kind: EventType::Write };
        let frame = message(&json!({"filesystem": event}));
        assert_eq!(frame[0], FLAG_MESSAGE);
        let payload: serde_json::Value = serde_json::from_slice(&frame[5..]).expect("JSON");
        assert_eq!(payload, json!({"filesystem": {"name": "sub/a.txt", "type": "EVENT_TYPE_WRITE"}}));
        let request: WatchRequest = serde_json::from_str(r#"{"path": "/tmp", "recursive": true, "includeEntry": false}"#)
            .expect("a request with fields not used");
        assert!(request.recursive);
    }
}
