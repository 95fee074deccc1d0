//! The host's control plane, E2B's REST API: `POST /sandboxes` (and
//! `/v2/sandboxes`), `GET /v2/sandboxes` (and the older `GET /sandboxes`),
//! `GET`/`DELETE /sandboxes/{id}`, `POST /sandboxes/{id}/timeout` (sets the
//! deadline), `/refreshes` (only lengthens), `/pause`, `/connect` (resumes
//! a paused sandbox, `201`; a running one `200`), `/resume`, behind an
//! `X-API-Key` check, beside Flotilla's `GET /flotilla/v1/host` (where the
//! edge listens); `GET /health` and `GET /metrics` without one. Every
//! refusal carries the API's `{code, message}` body; [`HostError`] is
//! mapped to status codes here alone.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, Request, State as Shared};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use flotilla_e2b::api::{NewSandbox, TimeoutBody, API_KEY_HEADER};
use flotilla_e2b::host::HOST_PATH;
use flotilla_e2b::RESOLUTION_METADATA;
use flotilla_sandbox::SandboxRequest;
use serde::Deserialize;
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::calls::error;
use super::host::{Entry, Host, HostError, NewEntry, OnTimeout};
use super::metrics;

/// The envd version the host claims.
const ENVD_VERSION: &str = "0.6.13";
/// The most a page of the list holds, and what it holds by default.
const MAX_PAGE: usize = 100;
/// The longest `/refreshes` may lengthen a life, as the hosted API allows.
const MAX_REFRESH: Duration = Duration::from_secs(3600);

pub(super) fn router(host: Arc<Host>) -> Router {
    let keyed = Router::new()
        .route("/sandboxes", post(create).get(list))
        .route("/v2/sandboxes", post(create).get(list))
        .route("/sandboxes/{id}", get(detail).delete(kill))
        .route("/sandboxes/{id}/timeout", post(set_timeout))
        .route("/sandboxes/{id}/refreshes", post(refresh))
        .route("/sandboxes/{id}/pause", post(pause))
        .route("/sandboxes/{id}/connect", post(connect))
        .route("/v2/sandboxes/{id}/connect", post(connect))
        .route("/sandboxes/{id}/resume", post(resume))
        .route(HOST_PATH, get(where_sandboxes_are))
        .layer(middleware::from_fn_with_state(Arc::clone(&host), check_api_key));
    Router::new()
        .route("/health", get(|| async { StatusCode::NO_CONTENT }))
        .route("/metrics", get(metrics_page))
        .merge(keyed)
        .with_state(host)
}

impl IntoResponse for HostError {
    fn into_response(self) -> Response {
        let message = self.to_string();
        match self {
            HostError::NotFound(_) | HostError::UnknownTemplate(_) => error(StatusCode::NOT_FOUND, message),
            HostError::BadRequest(_) => error(StatusCode::BAD_REQUEST, message),
            HostError::AlreadyPaused(_) | HostError::AlreadyRunning(_) => error(StatusCode::CONFLICT, message),
            HostError::Capacity(_) => {
                let body = json!({"code": 429, "message": message, "error_code": "sandbox_capacity_unavailable"});
                (StatusCode::TOO_MANY_REQUESTS, Json(body)).into_response()
            }
            HostError::Desktop(_) => {
                let body = json!({"code": 500, "message": message, "error_code": "sandbox_create_failed"});
                (StatusCode::INTERNAL_SERVER_ERROR, Json(body)).into_response()
            }
        }
    }
}

/// Counts every request and refuses those without a configured key.
async fn check_api_key(Shared(host): Shared<Arc<Host>>, request: Request, next: Next) -> Response {
    host.control_requests.fetch_add(1, Ordering::SeqCst);
    let key = request.headers().get(API_KEY_HEADER).and_then(|v| v.to_str().ok());
    if !key.is_some_and(|key| host.settings.accepts(key)) {
        return error(StatusCode::UNAUTHORIZED, "Invalid API key");
    }
    next.run(request).await
}

/// Flotilla's own call on the control plane, so a client given only its
/// URL (a worker's `FLOTILLA_SANDBOXD_URL`) reaches every sandbox's envd
/// and ports: `{edge_port, tls, domain}`, the edge listens on the control
/// plane's host name at `edge_port`, over TLS when `tls`.
async fn where_sandboxes_are(Shared(host): Shared<Arc<Host>>) -> Response {
    let settings = &host.settings;
    Json(json!({"edge_port": settings.edge_addr.port(), "tls": settings.tls.is_some(), "domain": settings.domain}))
        .into_response()
}

async fn metrics_page(Shared(host): Shared<Arc<Host>>) -> Response {
    let mut sandboxes = Vec::new();
    for (id, entry) in host.all().await {
        let memory_bytes = host.local.memory_bytes(&entry.local_id).await.ok();
        sandboxes.push(metrics::SandboxFigures { id, state: entry.state(), memory_bytes });
    }
    let page = metrics::render(&host.metrics, sandboxes, host.pool.ready());
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], page).into_response()
}

/// A JSON body of type `T`, or the API's `400`.
fn body<T: serde::de::DeserializeOwned>(bytes: &Bytes) -> Result<T, HostError> {
    serde_json::from_slice(bytes).map_err(|e| HostError::BadRequest(format!("invalid body: {e}")))
}

/// A lifetime of `seconds`, checked against the host's longest.
fn lifetime(host: &Host, seconds: u64) -> Result<Duration, HostError> {
    let max = host.settings.max_timeout;
    if seconds == 0 {
        return Err(HostError::BadRequest("Timeout must be greater than 0".into()));
    }
    if Duration::from_secs(seconds) > max {
        return Err(HostError::BadRequest(format!("Timeout cannot be greater than {} seconds", max.as_secs())));
    }
    Ok(Duration::from_secs(seconds))
}

async fn create(Shared(host): Shared<Arc<Host>>, bytes: Bytes) -> Response {
    if let Some(wait) = host.take_rate_limit() {
        let mut response =
            error(StatusCode::TOO_MANY_REQUESTS, "You have reached the maximum number of concurrent E2B sandboxes");
        response.headers_mut().insert(header::RETRY_AFTER, wait.as_secs().into());
        return response;
    }
    let request: NewSandbox = match body(&bytes) {
        Ok(request) => request,
        Err(refused) => return refused.into_response(),
    };
    if !host.local.knows_template(&request.template_id) {
        return HostError::UnknownTemplate(request.template_id).into_response();
    }
    let timeout = match lifetime(&host, request.timeout) {
        Ok(timeout) => timeout,
        Err(refused) => return refused.into_response(),
    };
    // A create that names its screen (as Flotilla's E2B client does) gets
    // the host's desktop at that size, and its programs that desktop's
    // display; any other (the Desktop SDK's) keeps the `DISPLAY` it sends
    // for the X server it starts itself.
    let mut env_vars = request.env_vars;
    if request.metadata.contains_key(RESOLUTION_METADATA) {
        env_vars.remove("DISPLAY");
    }
    let new = NewEntry {
        resolution: requested_resolution(&request.metadata),
        template: request.template_id,
        timeout,
        metadata: request.metadata,
        env_vars,
        on_timeout: if request.auto_pause { OnTimeout::Pause } else { OnTimeout::Kill },
    };
    match host.create(new).await {
        Ok((id, entry)) => (StatusCode::CREATED, Json(created_json(&id, &entry))).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The size the create's metadata asks for, else the default.
fn requested_resolution(metadata: &HashMap<String, String>) -> (u32, u32) {
    metadata
        .get(RESOLUTION_METADATA)
        .and_then(|text| text.split_once('x'))
        .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)))
        .unwrap_or(SandboxRequest::default().resolution)
}

fn created_json(id: &str, entry: &Entry) -> Value {
    json!({
        "sandboxID": id,
        "templateID": entry.template,
        "clientID": "flotilla",
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": entry.access_token,
        "trafficAccessToken": null,
        "domain": null,
    })
}

fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}

/// The fields the list and the detail share.
fn listed_json(id: &str, entry: &Entry) -> Value {
    json!({
        "sandboxID": id,
        "templateID": entry.template,
        "clientID": "flotilla",
        "startedAt": rfc3339(entry.started_at),
        "endAt": rfc3339(entry.end_at),
        "cpuCount": 1,
        "memoryMB": 1024,
        "diskSizeMB": 2048,
        "state": entry.state(),
        "envdVersion": ENVD_VERSION,
        "metadata": entry.metadata,
    })
}

async fn detail(Shared(host): Shared<Arc<Host>>, Path(id): Path<String>) -> Response {
    let Some(entry) = host.get(&id).await else {
        return HostError::NotFound(id).into_response();
    };
    let mut body = listed_json(&id, &entry);
    body["envdAccessToken"] = json!(entry.access_token);
    body["domain"] = Value::Null;
    let on_timeout = match entry.on_timeout {
        OnTimeout::Kill => "kill",
        OnTimeout::Pause => "pause",
    };
    body["lifecycle"] = json!({"autoResume": false, "onTimeout": on_timeout});
    Json(body).into_response()
}

/// The list's filters, from its query string.
#[derive(Debug, Default)]
struct ListQuery {
    states: Vec<String>,
    metadata: Vec<(String, String)>,
    limit: usize,
    next_token: Option<String>,
}

impl ListQuery {
    /// Reads `state` (`running,paused`, or repeated), `metadata` (itself
    /// `k=v&k2=v2`, URL-encoded), `limit` (1 to 100) and `nextToken`.
    fn parse(query: Option<&str>) -> Result<Self, String> {
        let mut parsed = Self { limit: MAX_PAGE, ..Self::default() };
        for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match key.as_ref() {
                "state" => parsed.states.extend(value.split(',').map(str::to_owned)),
                "metadata" => parsed.metadata.extend(form_urlencoded::parse(value.as_bytes()).into_owned()),
                "limit" => {
                    parsed.limit = value.parse().ok().filter(|n| (1..=MAX_PAGE).contains(n)).ok_or("limit must be 1 to 100")?;
                }
                "nextToken" => parsed.next_token = Some(value.into_owned()),
                _ => {}
            }
        }
        if let Some(bad) = parsed.states.iter().find(|s| !matches!(s.as_str(), "running" | "paused")) {
            return Err(format!("unknown state {bad:?}: running or paused"));
        }
        Ok(parsed)
    }

    fn admits(&self, entry: &Entry) -> bool {
        (self.states.is_empty() || self.states.iter().any(|s| s == entry.state()))
            && self.metadata.iter().all(|(k, v)| entry.metadata.get(k) == Some(v))
    }
}

/// The newest first; a page ends with `X-Next-Token` naming where the next begins.
async fn list(Shared(host): Shared<Arc<Host>>, RawQuery(query): RawQuery) -> Response {
    let filter = match ListQuery::parse(query.as_deref()) {
        Ok(filter) => filter,
        Err(message) => return error(StatusCode::BAD_REQUEST, message),
    };
    let all = host.all().await;
    let running = all.iter().filter(|(_, entry)| entry.paused_since.is_none()).count();
    let mut matching: Vec<(String, Entry)> = all.into_iter().filter(|(_, entry)| filter.admits(entry)).collect();
    matching.sort_by(|(a_id, a), (b_id, b)| b.started_at.cmp(&a.started_at).then_with(|| a_id.cmp(b_id)));
    let start = match &filter.next_token {
        Some(token) => matching.iter().position(|(id, _)| id == token).unwrap_or(matching.len()),
        None => 0,
    };
    let page: Vec<Value> = matching.iter().skip(start).take(filter.limit).map(|(id, entry)| listed_json(id, entry)).collect();
    let mut response = Json(page).into_response();
    if let Some((next, _)) = matching.get(start + filter.limit) {
        if let Ok(value) = HeaderValue::from_str(next) {
            response.headers_mut().insert("x-next-token", value);
        }
    }
    response.headers_mut().insert("x-total-running", running.into());
    response
}

async fn set_timeout(Shared(host): Shared<Arc<Host>>, Path(id): Path<String>, bytes: Bytes) -> Response {
    let timeout = match body::<TimeoutBody>(&bytes).and_then(|b| lifetime(&host, b.timeout)) {
        Ok(timeout) => timeout,
        Err(refused) => return refused.into_response(),
    };
    match host.set_deadline(&id, |_, now| now + timeout).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.into_response(),
    }
}

/// `/refreshes`' body.
#[derive(Debug, Deserialize)]
struct RefreshBody {
    #[serde(default)]
    duration: u64,
}

async fn refresh(Shared(host): Shared<Arc<Host>>, Path(id): Path<String>, bytes: Bytes) -> Response {
    let by = match body::<RefreshBody>(&bytes) {
        Ok(RefreshBody { duration }) if Duration::from_secs(duration) <= MAX_REFRESH => Duration::from_secs(duration),
        Ok(_) => return HostError::BadRequest("duration must be at most 3600 seconds".into()).into_response(),
        Err(refused) => return refused.into_response(),
    };
    match host.set_deadline(&id, |end, now| end.max(now + by)).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn pause(Shared(host): Shared<Arc<Host>>, Path(id): Path<String>) -> Response {
    match host.pause(&id).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.into_response(),
    }
}

/// `/connect`'s and `/resume`'s body; the SDKs leave the timeout out when
/// their caller does.
#[derive(Debug, Deserialize)]
struct WakeBody {
    #[serde(default)]
    timeout: Option<u64>,
}

/// The life a woken sandbox gets when its waker names none: the SDKs' default.
const DEFAULT_WAKE_TIMEOUT_S: u64 = 300;

/// `/connect` and `/resume`: a paused sandbox resumes (`201`); a running
/// one answers `200` from `/connect` and `409` from `/resume`.
async fn wake(host: &Host, id: &str, bytes: &Bytes, running_is_conflict: bool) -> Response {
    let requested = body::<WakeBody>(bytes).map(|b| b.timeout.unwrap_or(DEFAULT_WAKE_TIMEOUT_S));
    let timeout = match requested.and_then(|seconds| lifetime(host, seconds)) {
        Ok(timeout) => timeout,
        Err(refused) => return refused.into_response(),
    };
    if running_is_conflict && host.get(id).await.is_some_and(|entry| entry.paused_since.is_none()) {
        return HostError::AlreadyRunning(id.to_owned()).into_response();
    }
    match host.resume(id, timeout).await {
        Ok((true, entry)) => (StatusCode::CREATED, Json(created_json(id, &entry))).into_response(),
        Ok((false, entry)) => Json(created_json(id, &entry)).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn connect(Shared(host): Shared<Arc<Host>>, Path(id): Path<String>, bytes: Bytes) -> Response {
    wake(&host, &id, &bytes, false).await
}

async fn resume(Shared(host): Shared<Arc<Host>>, Path(id): Path<String>, bytes: Bytes) -> Response {
    wake(&host, &id, &bytes, true).await
}

async fn kill(Shared(host): Shared<Arc<Host>>, Path(id): Path<String>) -> Response {
    if host.get(&id).await.is_none() || !host.remove(&id).await {
        return HostError::NotFound(id).into_response();
    }
    StatusCode::NO_CONTENT.into_response()
}
