//! The worker's end of a live view: `GET /live/{task}` with a one-time
//! ticket for the view's token in the [`VIEW_TICKET_HEADER`] header (never
//! in the URL), a WebSocket the API opens on a viewer's behalf. The token's
//! grant is checked again here, the
//! viewer attached (its desktop's VNC server started if it is the first),
//! and RFB bytes carried both ways until either side closes or the task
//! lets its desktop go (or, for a `control` token, until the token is
//! revoked by a release or a new takeover). A `view` token's input goes through
//! [`ViewOnlyFilter`] on its way to the desktop. For a desktop whose stream
//! is elsewhere, the worker authenticates to it itself ([`RemoteRfb`]) and
//! offers the viewer RFB without authentication ([`ViewerHandshake`]), so
//! the desktop's key never reaches a viewer.

use std::path::PathBuf;

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use flotilla_queue::live::{LiveViews, ViewGrant, ViewMode, REVOCATION_CHECK, VIEW_TICKET_HEADER};
use flotilla_types::TaskId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::{debug, warn};

use super::remote::{RemoteDesktop, RemoteRfb, RFB_VERSION};
use super::rfb::{viewer_version_allowed, RfbError, ViewOnlyFilter, SECURITY_NONE};
use super::{LiveDesktops, LiveError, ViewTarget, Viewer};

/// The WebSocket subprotocol noVNC may ask for.
pub const SUBPROTOCOL: &str = "binary";
/// The most RFB bytes read from the desktop at once.
const READ_CHUNK: usize = 256 * 1024;

/// The live-view routes, with their state.
pub fn router(live: LiveDesktops) -> Router {
    Router::new().route("/live/{task}", get(open)).with_state(live)
}

async fn open(
    State(live): State<LiveDesktops>,
    Path(task): Path<String>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    let Ok(task) = TaskId::parse(&task) else { return StatusCode::NOT_FOUND.into_response() };
    let ticket = headers.get(VIEW_TICKET_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let grant = match live.views().redeem_ticket(ticket).await {
        Ok(Some(ticketed)) if ticketed.grant.task == task => ticketed.grant,
        Ok(_) => return StatusCode::FORBIDDEN.into_response(),
        Err(e) => {
            warn!(error = %e, "cannot check a view ticket");
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
    // Ends with the desktop's showing, or when a control grant is revoked.
    let ended = viewer.gone().child_token();
    if grant.mode == ViewMode::Control {
        tokio::spawn(end_when_revoked(live.views().clone(), grant.clone(), ended.clone()));
    }
    // Whether the connection is bridged or dropped unanswered, `ended` ends
    // with it, and the watch with that.
    let stop_watching = ended.clone().drop_guard();
    let mode = grant.mode;
    upgrade.protocols([SUBPROTOCOL]).on_upgrade(move |socket| bridge(socket, viewer, mode, ended, stop_watching))
}

/// Carries RFB between the viewer's socket and the desktop's VNC server
/// until either side closes or `ended` is cancelled.
async fn bridge(socket: WebSocket, viewer: Viewer, mode: ViewMode, ended: CancellationToken, _stop: DropGuard) {
    match viewer.target.clone() {
        ViewTarget::Local(path) => bridge_local(socket, viewer, mode, path, ended).await,
        ViewTarget::Remote(desktop) => bridge_remote(socket, viewer, mode, desktop, ended).await,
    }
}

/// Cancels `ended` once `grant` is revoked (a release or a new takeover),
/// checking every [`REVOCATION_CHECK`]; returns when `ended` is cancelled
/// otherwise. A check that fails keeps the view (Redis is briefly away).
async fn end_when_revoked(views: LiveViews, grant: ViewGrant, ended: CancellationToken) {
    let mut tick = tokio::time::interval(REVOCATION_CHECK);
    loop {
        tokio::select! {
            () = ended.cancelled() => return,
            _ = tick.tick() => {}
        }
        match views.in_force(&grant).await {
            Ok(true) => {}
            Ok(false) => {
                debug!(task_id = %grant.task, "closing a control view: its token was revoked");
                ended.cancel();
                return;
            }
            Err(e) => warn!(error = %e, "cannot check a control view's token"),
        }
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

/// Carries RFB between the viewer and a local x11vnc's Unix socket.
async fn bridge_local(mut socket: WebSocket, viewer: Viewer, mode: ViewMode, path: PathBuf, ended: CancellationToken) {
    let mut desktop = match UnixStream::connect(&path).await {
        Ok(stream) => stream,
        Err(e) => {
            warn!(error = %e, "cannot reach the desktop's VNC server");
            viewer.leave().await;
            return;
        }
    };
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
            () = ended.cancelled() => break,
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
async fn bridge_remote(mut socket: WebSocket, viewer: Viewer, mode: ViewMode, desktop: RemoteDesktop, ended: CancellationToken) {
    let mut remote = match RemoteRfb::open(&desktop).await {
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
                    let (replies, rest) = match handshake.take(out) {
                        Ok(taken) => taken,
                        Err(e) => {
                            debug!(error = %e, "closing a viewer");
                            break;
                        }
                    };
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
                () = ended.cancelled() => break,
            }
        }
    }
    let _ = socket.send(Message::Close(None)).await;
    remote.close().await;
    viewer.leave().await;
}

/// The server's half of the RFB handshake towards a viewer, after the
/// worker sent `RFB 003.008`: the viewer's version (12 bytes) is answered
/// with one security type, None; its choice (1 byte) with success (3.8; a
/// 3.7 viewer expects no result for None). What follows goes to the
/// desktop, which reads it as `ClientInit` onwards. Only the versions and
/// security type the view-only filter passes are accepted, so both always
/// agree on where the viewer's messages start.
#[derive(Debug, Default)]
pub struct ViewerHandshake {
    seen: Vec<u8>,
}

/// The viewer's version and security choice.
const VIEWER_HANDSHAKE: usize = 13;
/// One security type: none (RFC 6143 §7.1.2).
const SECURITY_TYPES: &[u8] = &[1, SECURITY_NONE];
/// SecurityResult: OK.
const SECURITY_OK: &[u8] = &[0, 0, 0, 0];

/// The replies a viewer's handshake bytes are due, and the rest of them.
type Taken<'a> = (Vec<&'static [u8]>, &'a [u8]);

impl ViewerHandshake {
    /// Takes the viewer's next bytes: the replies due, and what is left for
    /// the desktop; an error once the viewer must be closed.
    pub fn take<'a>(&mut self, mut data: &'a [u8]) -> Result<Taken<'a>, RfbError> {
        let mut replies = Vec::new();
        while self.seen.len() < VIEWER_HANDSHAKE && !data.is_empty() {
            let step_end = if self.seen.len() < 12 { 12 } else { VIEWER_HANDSHAKE };
            let take = (step_end - self.seen.len()).min(data.len());
            self.seen.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.seen.len() == 12 {
                if !viewer_version_allowed(&self.seen) {
                    return Err(RfbError::BadVersion(String::from_utf8_lossy(&self.seen).into_owned()));
                }
                replies.push(SECURITY_TYPES);
            } else if self.seen.len() == VIEWER_HANDSHAKE {
                if self.seen[12] != SECURITY_NONE {
                    return Err(RfbError::BadSecurity(self.seen[12]));
                }
                if self.seen[..12] == RFB_VERSION[..] {
                    replies.push(SECURITY_OK);
                }
            }
        }
        Ok((replies, data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_viewer_handshake_is_answered_and_the_rest_passes_on() {
        let mut whole = ViewerHandshake::default();
        let taken = whole.take(b"RFB 003.008\n\x01\x01\x03").expect("3.8");
        assert_eq!(taken, (vec![SECURITY_TYPES, SECURITY_OK], &b"\x01\x03"[..]));
        assert_eq!(whole.take(b"\x05"), Ok((vec![], &b"\x05"[..])));

        let mut split = ViewerHandshake::default();
        assert_eq!(split.take(b"RFB 003"), Ok((vec![], &b""[..])));
        assert_eq!(split.take(b".008\n"), Ok((vec![SECURITY_TYPES], &b""[..])));
        assert_eq!(split.take(b"\x01\x01"), Ok((vec![SECURITY_OK], &b"\x01"[..])));

        let mut older = ViewerHandshake::default();
        let taken = older.take(b"RFB 003.007\n\x01\x01").expect("3.7");
        assert_eq!(taken, (vec![SECURITY_TYPES], &b"\x01"[..]), "no security result for None in 3.7");
    }

    /// A 3.3 viewer sends no security choice: taking its `ClientInit` for one
    /// would put the desktop a byte out of step with the view-only filter.
    #[test]
    fn versions_and_security_types_the_filter_refuses_close_the_viewer() {
        for version in ["RFB 003.003\n", "RFB 003.005\n", "RFB 003.889\n"] {
            let mut stream = version.as_bytes().to_vec();
            stream.extend([1, 4, 1, 0, 0]);
            let refused = ViewerHandshake::default().take(&stream);
            assert_eq!(refused, Err(RfbError::BadVersion(version.to_owned())), "{version:?}");
        }
        let refused = ViewerHandshake::default().take(b"RFB 003.008\n\x02\x01");
        assert_eq!(refused, Err(RfbError::BadSecurity(2)));
    }
}
