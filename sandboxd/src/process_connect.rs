//! envd's `process.Process/Connect`: another reader of a running process's
//! stream, named by pid or tag, as an SDK reattaches to a command it
//! started in the background (or another client's). The reader gets the
//! process's `start` event, then every `data` and `end` event from the
//! moment it connected and the end of the stream; a process that is gone
//! (or was never started here) ends the stream with `not_found`. A reader
//! that falls far behind skips output rather than slow the process.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State as Shared;
use axum::http::HeaderMap;
use axum::response::Response;
use flotilla_e2b::connect::FLAG_END_STREAM;
use flotilla_e2b::envd::{ProcessEvent, StartEvent};
use futures::StreamExt as _;
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::broadcast::Receiver;

use super::host::Host;
use super::process_calls::{pid_of, Selector};
use super::stream::{self, event_frame, stream_error, streaming_response};

#[derive(Debug, Deserialize)]
struct ConnectRequest {
    process: Selector,
}

pub(super) async fn connect(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, body: Bytes) -> Response {
    let (sandbox, request): (_, ConnectRequest) = match stream::open(&host, &headers, &body).await {
        Ok(opened) => opened,
        Err(refused) => return refused,
    };
    let watched = pid_of(&sandbox, &request.process).ok().and_then(|pid| Some((pid, sandbox.running.watch(pid)?)));
    let Some((pid, frames)) = watched else {
        return stream_error("not_found", "process not found".into());
    };
    let start = event_frame(ProcessEvent { start: Some(StartEvent { pid }), ..ProcessEvent::default() });
    let rest = futures::stream::unfold(Some(frames), next_frame);
    let frames =
        stream::with_keepalives(futures::stream::once(async move { start }).chain(rest), stream::keepalive_interval(&headers));
    streaming_response(Body::from_stream(frames.map(|frame| Ok::<_, Infallible>(Bytes::from(frame)))))
}

/// The next frame for a connected reader, until the end of the stream.
async fn next_frame(frames: Option<Receiver<Vec<u8>>>) -> Option<(Vec<u8>, Option<Receiver<Vec<u8>>>)> {
    let mut frames = frames?;
    loop {
        match frames.recv().await {
            Ok(frame) if frame.first().is_some_and(|flags| flags & FLAG_END_STREAM != 0) => return Some((frame, None)),
            Ok(frame) => return Some((frame, Some(frames))),
            Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => return None,
        }
    }
}
