//! The shape of envd's server-streaming calls (`Process/Start`,
//! `Process/Connect`) in Connect's JSON protocol: the one request envelope
//! read, each event sent as a message envelope, and a stream that is only
//! an end-of-stream error.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use flotilla_e2b::connect::{self, ConnectError, Decoder, EndOfStream, Frame, FLAG_END_STREAM, FLAG_MESSAGE};
use flotilla_e2b::envd::{ProcessEvent, StartResponse};

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
