//! The worker's end of a live view: `GET /live/{task}?token=…`, a WebSocket
//! the API opens on a viewer's behalf. The token is checked again here, the
//! viewer attached (its desktop's VNC server started if it is the first),
//! and RFB bytes carried both ways until either side closes or the task
//! lets its desktop go. A `view` token's input goes through
//! [`ViewOnlyFilter`] on its way to the desktop.

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

use super::rfb::ViewOnlyFilter;
use super::{LiveDesktops, LiveError, Viewer};

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
async fn bridge(mut socket: WebSocket, viewer: Viewer, mode: ViewMode) {
    let gone = viewer.gone();
    let mut desktop = match TcpStream::connect(("127.0.0.1", viewer.port)).await {
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
                let data = match message {
                    Some(Ok(Message::Binary(data))) => data,
                    Some(Ok(Message::Text(text))) => Bytes::from(text.as_str().to_owned()),
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                };
                let out = match filter.as_mut() {
                    None => &data[..],
                    Some(filter) => {
                        passed.clear();
                        if let Err(e) = filter.feed(&data, &mut passed) {
                            debug!(error = %e, "closing a view-only viewer");
                            break;
                        }
                        &passed[..]
                    }
                };
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
