//! The worker's end of a live view: `GET /live/{task}?token=…`, a WebSocket
//! the API opens on a viewer's behalf. The token is checked again here, the
//! viewer attached (its desktop's VNC server started if it is the first),
//! and RFB bytes carried both ways until either side closes or the task
//! lets its desktop go. A `view` token's input goes through
//! [`ViewOnlyFilter`] on its way to the desktop. For a desktop whose stream
//! is elsewhere, the worker authenticates to it itself ([`RemoteRfb`]) and
//! offers the viewer RFB without authentication ([`ViewerHandshake`]), so
//! the desktop's key never reaches a viewer.

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use flotilla_shared::live::ViewMode;
use flotilla_shared::TaskId;
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::{debug, warn};

use super::remote::{RemoteDesktop, RemoteRfb, RFB_VERSION};
use super::rfb::ViewOnlyFilter;
use super::{LiveDesktops, LiveError, ViewTarget, Viewer};

/// The WebSocket subprotocol noVNC may ask for.
pub const SUBPROTOCOL: &str = "binary";
/// The most RFB bytes read from the desktop at once.
const READ_CHUNK: usize = 256 * 1024;

/// The live-view routes, with their state.
pub fn router(live: LiveDesktops) -> Router {
    Router::new().route("/live/{task}", get(open)).with_state(live)
}

#[derive(Deserialize)]
struct TokenQuery {
    token: String,
}

async fn open(
    State(live): State<LiveDesktops>,
    Path(task): Path<String>,
    Query(query): Query<TokenQuery>,
    upgrade: WebSocketUpgrade,
) -> Response {
    let Ok(task) = TaskId::parse(&task) else { return StatusCode::NOT_FOUND.into_response() };
    let mode = match live.views().redeem(&query.token).await {
        Ok(Some(grant)) if grant.task == task => grant.mode,
        Ok(_) => return StatusCode::FORBIDDEN.into_response(),
        Err(e) => {
            warn!(error = %e, "cannot check a view token");
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
    };
    let viewer = match live.attach(&task).await {
        Ok(viewer) => viewer,
        Err(LiveError::NotShown) => return StatusCode::NOT_FOUND.into_response(),
        Err(e) => {
            warn!(error = %e, task_id = %task, "cannot start the live view");
            return StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
    };
    upgrade.protocols([SUBPROTOCOL]).on_upgrade(move |socket| bridge(socket, viewer, mode))
}

/// Carries RFB between the viewer's socket and the desktop's VNC server.
async fn bridge(socket: WebSocket, viewer: Viewer, mode: ViewMode) {
    match viewer.target.clone() {
        ViewTarget::Local(port) => bridge_local(socket, viewer, mode, port).await,
        ViewTarget::Remote(desktop) => bridge_remote(socket, viewer, mode, desktop).await,
    }
}

/// The viewer's bytes as they may reach the desktop: all of them, or
/// through the view-only filter; `None` once the viewer must be closed.
fn pass<'a>(filter: Option<&mut ViewOnlyFilter>, data: &'a [u8], passed: &'a mut Vec<u8>) -> Option<&'a [u8]> {
    match filter {
        None => Some(data),
        Some(filter) => {
            passed.clear();
            if let Err(e) = filter.feed(data, passed) {
                debug!(error = %e, "closing a view-only viewer");
                return None;
            }
            Some(&passed[..])
        }
    }
}

/// Carries RFB between the viewer and a local x11vnc.
async fn bridge_local(mut socket: WebSocket, viewer: Viewer, mode: ViewMode, port: u16) {
    let gone = viewer.gone();
    let mut desktop = match TcpStream::connect(("127.0.0.1", port)).await {
        Ok(stream) => stream,
        Err(e) => {
            warn!(error = %e, "cannot reach the desktop's VNC server");
            viewer.leave().await;
            return;
        }
    };
    let _ = desktop.set_nodelay(true);
    let mut filter = (mode == ViewMode::View).then(ViewOnlyFilter::default);
    let mut buf = vec![0u8; READ_CHUNK];
    let mut passed = Vec::new();
    loop {
        tokio::select! {
            message = socket.recv() => {
                let data = match from_viewer(message) {
                    FromViewer::Bytes(data) => data,
                    FromViewer::Nothing => continue,
                    FromViewer::Gone => break,
                };
                let Some(out) = pass(filter.as_mut(), &data, &mut passed) else { break };
                if !out.is_empty() && desktop.write_all(out).await.is_err() {
                    break;
                }
            }
            read = desktop.read(&mut buf) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if socket.send(Message::Binary(Bytes::copy_from_slice(&buf[..n]))).await.is_err() {
                        break;
                    }
                }
            },
            () = gone.cancelled() => break,
        }
    }
    let _ = socket.send(Message::Close(None)).await;
    viewer.leave().await;
}

/// What one message from a viewer's WebSocket means for the bridge.
enum FromViewer {
    /// Bytes for the desktop (text frames are taken as their bytes).
    Bytes(Bytes),
    /// A ping or pong: nothing to carry.
    Nothing,
    /// The viewer closed or the socket failed.
    Gone,
}

fn from_viewer(message: Option<Result<Message, axum::Error>>) -> FromViewer {
    match message {
        Some(Ok(Message::Binary(data))) => FromViewer::Bytes(data),
        Some(Ok(Message::Text(text))) => FromViewer::Bytes(Bytes::from(text.as_str().to_owned())),
        Some(Ok(Message::Ping(_) | Message::Pong(_))) => FromViewer::Nothing,
        Some(Ok(Message::Close(_)) | Err(_)) | None => FromViewer::Gone,
    }
}

/// Carries RFB between the viewer and a desktop's own stream elsewhere:
/// the worker authenticates with the desktop's key, then plays the
/// server's part of the handshake towards the viewer with no
/// authentication and carries the rest, `ClientInit` onwards.
async fn bridge_remote(mut socket: WebSocket, viewer: Viewer, mode: ViewMode, desktop: RemoteDesktop) {
    let gone = viewer.gone();
    let client = reqwest::Client::new();
    let mut remote = match RemoteRfb::open(&client, &desktop).await {
        Ok(remote) => remote,
        Err(e) => {
            warn!(error = %e, "cannot reach the desktop's stream");
            let _ = socket.send(Message::Close(None)).await;
            viewer.leave().await;
            return;
        }
    };
    let mut filter = (mode == ViewMode::View).then(ViewOnlyFilter::default);
    let mut handshake = ViewerHandshake::default();
    let mut passed = Vec::new();
    if socket.send(Message::Binary(Bytes::from_static(RFB_VERSION))).await.is_ok() {
        loop {
            tokio::select! {
                message = socket.recv() => {
                    let data = match from_viewer(message) {
                        FromViewer::Bytes(data) => data,
                        FromViewer::Nothing => continue,
                        FromViewer::Gone => break,
                    };
                    let Some(out) = pass(filter.as_mut(), &data, &mut passed) else { break };
                    let (replies, rest) = handshake.take(out);
                    let mut failed = false;
                    for reply in replies {
                        failed |= socket.send(Message::Binary(Bytes::from_static(reply))).await.is_err();
                    }
                    if failed || (!rest.is_empty() && remote.send(rest).await.is_err()) {
                        break;
                    }
                }
                data = remote.recv() => match data {
                    Some(data) => {
                        if socket.send(Message::Binary(data)).await.is_err() {
                            break;
                        }
                    }
                    None => break,
                },
                () = gone.cancelled() => break,
            }
        }
    }
    let _ = socket.send(Message::Close(None)).await;
    remote.close().await;
    viewer.leave().await;
}

/// The server's half of the RFB 3.8 handshake towards a viewer, after the
/// worker sent its version: the viewer's version (12 bytes) is answered
/// with one security type, none; its choice (1 byte) with success. What
/// follows goes to the desktop.
#[derive(Debug, Default)]
pub struct ViewerHandshake {
    seen: usize,
}

/// The viewer's version and security choice.
const VIEWER_HANDSHAKE: usize = 13;
/// One security type: none (RFC 6143 §7.1.2).
const SECURITY_TYPES: &[u8] = &[1, 1];
/// SecurityResult: OK.
const SECURITY_OK: &[u8] = &[0, 0, 0, 0];

impl ViewerHandshake {
    /// Takes the viewer's next bytes: the replies due, and what is left for the desktop.
    pub fn take<'a>(&mut self, mut data: &'a [u8]) -> (Vec<&'static [u8]>, &'a [u8]) {
        let mut replies = Vec::new();
        while self.seen < VIEWER_HANDSHAKE && !data.is_empty() {
            let step_end = if self.seen < 12 { 12 } else { VIEWER_HANDSHAKE };
            let take = (step_end - self.seen).min(data.len());
            self.seen += take;
            data = &data[take..];
            match self.seen {
                12 => replies.push(SECURITY_TYPES),
                VIEWER_HANDSHAKE => replies.push(SECURITY_OK),
                _ => {}
            }
        }
        (replies, data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_viewer_handshake_is_answered_and_the_rest_passes_on() {
        let mut whole = ViewerHandshake::default();
        let (replies, rest) = whole.take(b"RFB 003.008\n\x01\x01\x03");
        assert_eq!((replies, rest), (vec![SECURITY_TYPES, SECURITY_OK], &b"\x01\x03"[..]));
        assert_eq!(whole.take(b"\x05"), (vec![], &b"\x05"[..]));

        let mut split = ViewerHandshake::default();
        assert_eq!(split.take(b"RFB 003"), (vec![], &b""[..]));
        assert_eq!(split.take(b".008\n"), (vec![SECURITY_TYPES], &b""[..]));
        assert_eq!(split.take(b"\x01\x01"), (vec![SECURITY_OK], &b"\x01"[..]));
    }
}
