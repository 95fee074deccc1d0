//! Live views of a task's desktop: `GET /v1/tasks/{id}/view` hands out a
//! URL of the view page (served by the API at `/view`) with a token scoped
//! to the task and a mode, in the URL's fragment (which a browser never
//! sends: not to the server, not in a `Referer`). The page exchanges the
//! token for a one-time ticket (`POST /v1/tasks/{id}/view/ticket`, the token
//! in the `x-flotilla-view-token` header) and opens noVNC (`/novnc`) on
//! `GET /v1/tasks/{id}/view/socket?ticket=…`, which is bridged here to the
//! worker that holds the task (with a ticket of its own, in a header), so
//! browsers need no route to workers and no URL holds a token.

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message as AxumMessage, WebSocket, WebSocketUpgrade};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use flotilla_config::apikey::Scope;
use flotilla_queue::live::{LiveViews, ViewGrant, ViewMode, VIEW_TICKET_HEADER, VIEW_TOKEN_HEADER};
use flotilla_queue::QueueError;
use flotilla_types::task::TaskStatus;
use flotilla_types::{clock, TaskId, ValidationError};
use futures::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message as WireMessage;
use utoipa::{IntoParams, ToSchema};

use crate::auth::{scope_of, Tenant};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{QueryParams, TaskIdPath};
use crate::state::AppState;

/// Where the noVNC page is served.
pub const NOVNC_PATH: &str = "/novnc";
/// Where the view page is served: it trades the token in its fragment for
/// a ticket and opens noVNC on it.
pub const VIEW_PAGE_PATH: &str = "/view";
/// The view page: no token ever reaches a URL that is sent anywhere.
const VIEW_PAGE: &str = include_str!("view_page.html");
/// The WebSocket subprotocol noVNC may ask for.
const SUBPROTOCOL: &str = "binary";

/// A view of a task's desktop.
#[derive(Debug, Serialize, ToSchema)]
pub struct ViewLink {
    /// The noVNC page, with a token for this task and mode.
    pub url: String,
    pub mode: ViewMode,
    /// RFC 3339: after this the token opens nothing; an open view stays open.
    pub expires_at: String,
}

/// The query of `GET /v1/tasks/{id}/view`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ViewParams {
    /// `view` (the default: input is ignored) or `control`.
    #[param(value_type = Option<ViewMode>)]
    pub mode: Option<String>,
}

/// The query of the view's WebSocket.
#[derive(Debug, Deserialize)]
pub struct SocketParams {
    /// A one-time ticket from `POST /v1/tasks/{id}/view/ticket`.
    pub ticket: String,
}

/// A one-time ticket that opens one view socket of a task.
#[derive(Debug, Serialize, ToSchema)]
pub struct ViewTicket {
    /// For `GET /v1/tasks/{id}/view/socket?ticket=…`: opens one connection.
    pub ticket: String,
    /// RFC 3339: after this the ticket opens nothing.
    pub expires_at: String,
}

/// A URL of the task's live desktop.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}/view",
    tag = "tasks",
    params(("id" = TaskId, Path, description = "Task id"), ViewParams),
    responses(
        (status = 200, description = "A view URL and when its token expires", body = ViewLink),
        (status = 400, description = "Malformed id or mode", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 403, description = "`mode=control` with a read-only key: control needs a write key (`forbidden`)", body = ErrorBody),
        (status = 404, description = "No such task for this tenant", body = ErrorBody),
        (status = 409, description = "The task holds no desktop that can be shown now (`conflict`)", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn view(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    TaskIdPath(id): TaskIdPath,
    QueryParams(params): QueryParams<ViewParams>,
    headers: HeaderMap,
) -> Result<Json<ViewLink>, ApiError> {
    let mode = match params.mode.as_deref().filter(|m| !m.is_empty()) {
        None => ViewMode::View,
        Some(m) => ViewMode::parse(m).ok_or_else(|| ValidationError::at("mode", "mode must be view or control"))?,
    };
    // A control view types into the desktop: a write, though asked for with GET.
    if mode == ViewMode::Control && scope_of(&state, &headers) != Some(Scope::Write) {
        return Err(ApiError::ReadOnlyKey);
    }
    let link = view_link(&state, &tenant, &id, mode).await?;
    tracing::info!(mode = mode.as_str(), "view handed out");
    Ok(Json(link))
}

/// A tokened view URL of a task of `tenant` that shows its desktop now.
pub async fn view_link(
    state: &AppState,
    tenant: &flotilla_types::TenantId,
    id: &TaskId,
    mode: ViewMode,
) -> Result<ViewLink, ApiError> {
    let task = state.queue().reader().get(tenant, id).await?.ok_or(QueueError::NotFound)?;
    if !matches!(task.status, TaskStatus::Running | TaskStatus::Waiting) {
        return Err(QueueError::WrongStatus(task.status.as_str().to_owned()).into());
    }
    let views = live_views(state);
    if views.route(id).await?.is_none() {
        return Err(ApiError::NotViewable);
    }
    let expires_at_ms = clock::now_ms() + state.config().live_view.token_ttl.as_millis() as i64;
    let grant = ViewGrant { tenant: tenant.clone(), task: id.clone(), mode, expires_at_ms, generation: 0 };
    let token = views.mint(&grant).await?;
    let url = format!(
        "{}{VIEW_PAGE_PATH}?autoconnect=true&resize=scale&shared=true&view_only={}#task={id}&token={}",
        public_base(state),
        mode == ViewMode::View,
        token.expose()
    );
    Ok(ViewLink { url, mode, expires_at: clock::rfc3339(expires_at_ms) })
}

/// The view page (`GET /view`): HTML and a few lines of script.
pub async fn page() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-store")], VIEW_PAGE).into_response()
}

/// A one-time ticket for a view token.
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/view/ticket",
    tag = "tasks",
    params(
        ("id" = TaskId, Path, description = "Task id"),
        ("x-flotilla-view-token" = String, Header, description = "The token of a view URL (its fragment's `token`)"),
    ),
    responses(
        (status = 200, description = "A ticket for one connection of the view's socket", body = ViewTicket),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "No token, or one that is unknown, expired, revoked or for another task (`unauthorized`)", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(())
)]
pub async fn ticket(
    State(state): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    headers: HeaderMap,
) -> Result<Json<ViewTicket>, ApiError> {
    let token = headers.get(VIEW_TOKEN_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let (ticket, grant) = match live_views(&state).exchange(token).await? {
        Some((ticket, grant)) if grant.task == id => (ticket, grant),
        _ => return Err(ApiError::ViewTokenRefused),
    };
    let expires_ms = (clock::now_ms() + flotilla_queue::live::TICKET_TTL.as_millis() as i64).min(grant.expires_at_ms);
    Ok(Json(ViewTicket { ticket, expires_at: clock::rfc3339(expires_ms) }))
}

/// The WebSocket of a view page (`GET /v1/tasks/{id}/view/socket?ticket=…`
/// with an upgrade), bridged to the worker holding the task: RFB (VNC) in
/// binary messages. Not in the OpenAPI document, which cannot state an
/// upgrade; the view page finds its address. Answers 400 without an
/// upgrade, 401 for a ticket that is unknown, used, expired or another
/// task's (or whose token expired or was revoked since), 409 when the task
/// holds no desktop that can be shown now, 502 when its worker cannot be
/// reached.
pub async fn socket(
    State(state): State<AppState>,
    TaskIdPath(id): TaskIdPath,
    QueryParams(params): QueryParams<SocketParams>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let upgrade = upgrade.map_err(|rejection| ApiError::from_rejection(rejection.status(), rejection.body_text()))?;
    let views = live_views(&state);
    let ticketed = match views.redeem_ticket(&params.ticket).await? {
        Some(ticketed) if ticketed.grant.task == id => ticketed,
        _ => return Err(ApiError::ViewTokenRefused),
    };
    let endpoint = views.route(&id).await?.ok_or(ApiError::NotViewable)?;
    let worker_ticket = views.pass_on(&ticketed).await?;
    let worker = connect_worker(&endpoint, &id, &worker_ticket).await?;
    let shutdown = state.shutdown().clone();
    Ok(upgrade.protocols([SUBPROTOCOL]).on_upgrade(move |browser| async move {
        tokio::select! {
            () = bridge(browser, worker) => {}
            () = shutdown.cancelled() => {}
        }
    }))
}

type WorkerSocket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens the worker's end of the view.
async fn connect_worker(endpoint: &str, id: &TaskId, ticket: &str) -> Result<WorkerSocket, ApiError> {
    let base = endpoint.replacen("https://", "wss://", 1).replacen("http://", "ws://", 1);
    let mut request =
        format!("{base}/live/{id}").into_client_request().map_err(|e| ApiError::WorkerUnreachable(e.to_string()))?;
    request.headers_mut().insert(header::SEC_WEBSOCKET_PROTOCOL, header::HeaderValue::from_static(SUBPROTOCOL));
    // 64 hex digits: always a valid header value.
    let ticket = header::HeaderValue::from_str(ticket).map_err(|_| ApiError::ViewTokenRefused)?;
    request.headers_mut().insert(VIEW_TICKET_HEADER, ticket);
    let (socket, _) = tokio_tungstenite::connect_async(request).await.map_err(|e| match e {
        tokio_tungstenite::tungstenite::Error::Http(response) if response.status() == 404 => ApiError::NotViewable,
        tokio_tungstenite::tungstenite::Error::Http(response) => {
            ApiError::WorkerUnreachable(format!("status {}", response.status()))
        }
        other => ApiError::WorkerUnreachable(other.to_string()),
    })?;
    Ok(socket)
}

/// Carries messages both ways until either side closes.
async fn bridge(mut browser: WebSocket, mut worker: WorkerSocket) {
    loop {
        tokio::select! {
            message = browser.recv() => {
                let forward = match message {
                    Some(Ok(AxumMessage::Binary(data))) => WireMessage::Binary(data),
                    Some(Ok(AxumMessage::Text(text))) => WireMessage::Binary(Bytes::from(text.as_str().to_owned())),
                    Some(Ok(AxumMessage::Ping(_) | AxumMessage::Pong(_))) => continue,
                    Some(Ok(AxumMessage::Close(_)) | Err(_)) | None => break,
                };
                if worker.send(forward).await.is_err() {
                    break;
                }
            }
            message = worker.next() => {
                let forward = match message {
                    Some(Ok(WireMessage::Binary(data))) => AxumMessage::Binary(data),
                    Some(Ok(WireMessage::Text(text))) => AxumMessage::Binary(Bytes::from(text.as_str().to_owned())),
                    Some(Ok(WireMessage::Ping(_) | WireMessage::Pong(_) | WireMessage::Frame(_))) => continue,
                    Some(Ok(WireMessage::Close(_)) | Err(_)) | None => break,
                };
                if browser.send(forward).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = browser.send(AxumMessage::Close(None)).await;
    let _ = worker.close(None).await;
}

pub(crate) fn live_views(state: &AppState) -> LiveViews {
    state.queue().live_views()
}

/// The API's address as the browser reaches it: `FLOTILLA_PUBLIC_URL`, else
/// the address the API listens on (a wildcard as loopback). Never the
/// request's `Host`: whoever sends the request chooses it, and a link built
/// from it would hand the token to their host.
fn public_base(state: &AppState) -> String {
    if let Some(url) = &state.config().live_view.public_url {
        return url.clone();
    }
    listen_base(state.listen_addr())
}

/// `http://` and `addr`, a wildcard address as its family's loopback.
pub(crate) fn listen_base(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}", SocketAddr::new(ip, addr.port()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_name_the_listening_address_with_wildcards_as_loopback() {
        let base = |addr: &str| listen_base(addr.parse().expect("socket address"));
        assert_eq!(base("10.1.2.3:8080"), "http://10.1.2.3:8080");
        assert_eq!(base("0.0.0.0:8080"), "http://127.0.0.1:8080");
        assert_eq!(base("[::]:8080"), "http://[::1]:8080");
        assert_eq!(base("[fd00::7]:80"), "http://[fd00::7]:80");
    }
}
