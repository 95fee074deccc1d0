//! The shape of envd's server-streaming calls (`Process/Start`,
//! `Process/Connect`, `Filesystem/WatchDir`) in Connect's JSON protocol:
//! the one request envelope read, each event sent as a message envelope, a
//! `keepalive` event whenever a process stream was idle as long as the
//! caller's `Keepalive-Ping-Interval` asks (envd's 90 s without one), and
//! a stream that is only an end-of-stream error.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use flotilla_e2b::connect::{self, ConnectError, Decoder, EndOfStream, Frame, FLAG_END_STREAM, FLAG_MESSAGE};
use flotilla_e2b::envd::{ProcessEvent, StartResponse};
use futures::{Stream, StreamExt as _};

use super::calls::{error, route};
use super::host::{Entry, Host};

/// What every streaming call checks first: its sandbox (as every envd
/// call), a Connect streaming body, and its one request; or the answer
/// that refuses it.
pub(super) async fn open<T: serde::de::DeserializeOwned>(
    host: &Arc<Host>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(Entry, T), Response> {
    let sandbox = route(host, headers).await?;
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    if content_type != Some(connect::STREAMING_JSON) {
        return Err(error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "expected application/connect+json"));
    }
    let request = streaming_request(body).map_err(|message| stream_error("invalid_argument", message))?;
    Ok((sandbox, request))
}

/// A Connect stream that is only an end-of-stream error.
pub(super) fn stream_error(code: &str, message: String) -> Response {
    let end = EndOfStream { error: Some(ConnectError { code: code.into(), message }) };
    let payload = serde_json::to_vec(&end).unwrap_or_default();
    streaming_response(Body::from(connect::envelope(FLAG_END_STREAM, &payload)))
}

pub(super) fn streaming_response(body: Body) -> Response {
    ([(header::CONTENT_TYPE, connect::STREAMING_JSON)], body).into_response()
}

/// The one request envelope of a streaming call, parsed.
fn streaming_request<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let mut decoder = Decoder::default();
    decoder.push(body);
    match decoder.next_frame() {
        Ok(Some(Frame::Message(payload))) => serde_json::from_slice(&payload).map_err(|e| format!("invalid request: {e}")),
        Ok(_) => Err("the request holds no message".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// One event as a message envelope (`Start` and `Connect` answer alike).
pub(super) fn event_frame(event: ProcessEvent) -> Vec<u8> {
    let payload = serde_json::to_vec(&StartResponse { event }).unwrap_or_default();
    connect::envelope(FLAG_MESSAGE, &payload)
}

/// The header naming how often an idle stream should say it is alive, in seconds.
const KEEPALIVE_HEADER: &str = "keepalive-ping-interval";
/// envd's interval without the header.
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(90);

/// How often an idle stream of this call says it is alive.
pub(super) fn keepalive_interval(headers: &HeaderMap) -> Duration {
    let seconds = headers.get(KEEPALIVE_HEADER).and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok());
    seconds.filter(|s| *s > 0).map_or(DEFAULT_KEEPALIVE, Duration::from_secs)
}

/// A process stream's `frames` with a `keepalive` event whenever none came for `interval`.
pub(super) fn with_keepalives(
    frames: impl Stream<Item = Vec<u8>> + Send + 'static,
    interval: Duration,
) -> impl Stream<Item = Vec<u8>> + Send + 'static {
    let frames: Pin<Box<dyn Stream<Item = Vec<u8>> + Send>> = Box::pin(frames);
    futures::stream::unfold(frames, move |mut frames| async move {
        let frame = match tokio::time::timeout(interval, frames.next()).await {
            Ok(Some(frame)) => frame,
            Ok(None) => return None,
            Err(_idle) => event_frame(ProcessEvent { keepalive: Some(serde_json::json!({})), ..ProcessEvent::default() }),
        };
        Some((frame, frames))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_idle_process_stream_says_it_is_alive_and_ends_with_its_frames() {
        let (sender, receiver) = tokio::sync::mpsc::channel::<Vec<u8>>(4);
        let frames = futures::stream::unfold(receiver, |mut r| async move { r.recv().await.map(|f| (f, r)) });
        let mut stream = Box::pin(with_keepalives(frames, Duration::from_millis(50)));
        let idle = stream.next().await.expect("a keepalive");
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&idle[5..]).ok(),
            Some(serde_json::json!({"event": {"keepalive": {}}}))
        );
        sender.send(b"frame".to_vec()).await.expect("sent");
        assert_eq!(stream.next().await, Some(b"frame".to_vec()));
        drop(sender);
        assert_eq!(stream.next().await, None, "the stream ends with its frames");
        let mut headers = HeaderMap::new();
        assert_eq!(keepalive_interval(&headers), DEFAULT_KEEPALIVE);
        headers.insert(KEEPALIVE_HEADER, "50".parse().expect("a value"));
        assert_eq!(keepalive_interval(&headers), Duration::from_secs(50));
    }
}
