//! The fake's control plane: `POST /sandboxes`, `GET`/`DELETE
//! /sandboxes/{id}`, `POST /sandboxes/{id}/timeout` (sets the deadline,
//! shorter or longer) and `POST /sandboxes/{id}/connect` (only ever
//! lengthens), behind an `X-API-Key` check. Errors carry the API's
//! `{code, message}` body.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, Request, State as Shared};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::{lock, FakeSandbox, State, ENVD_VERSION};
use flotilla_e2b::api::{NewSandbox, TimeoutBody, API_KEY_HEADER};
use flotilla_e2b::RESOLUTION_METADATA;
use flotilla_sandbox::{SandboxProvider, SandboxRequest};

/// How long the desktop behind a fake sandbox may live; the fake's own
/// deadline ends it much sooner.
const LOCAL_LIFETIME: Duration = Duration::from_secs(6 * 3600);

pub(super) fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/sandboxes", post(create))
        // What the SDKs of 2.6x call to create.
        .route("/v2/sandboxes", post(create))
        .route("/sandboxes/{id}", get(detail).delete(kill))
        .route("/sandboxes/{id}/timeout", post(set_timeout))
        .route("/sandboxes/{id}/connect", post(connect))
        .layer(middleware::from_fn_with_state(Arc::clone(&state), check_api_key))
        .with_state(state)
}

/// The API's error body with `status`.
fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"code": status.as_u16(), "message": message.into()}))).into_response()
}

/// Counts every request and refuses those without the right key.
async fn check_api_key(Shared(state): Shared<Arc<State>>, request: Request, next: Next) -> Response {
    state.control_requests.fetch_add(1, Ordering::SeqCst);
    let key = request.headers().get(API_KEY_HEADER).and_then(|v| v.to_str().ok());
    if key != Some(state.api_key.as_str()) {
        return error(StatusCode::UNAUTHORIZED, "Invalid API key, please visit https://e2b.dev/docs to get your API key");
    }
    next.run(request).await
}

async fn create(Shared(state): Shared<Arc<State>>, body: Bytes) -> Response {
    if let Some(wait) = take_rate_limit(&state) {
        let mut response =
            error(StatusCode::TOO_MANY_REQUESTS, "You have reached the maximum number of concurrent E2B sandboxes");
        response.headers_mut().insert(header::RETRY_AFTER, wait.as_secs().into());
        return response;
    }
    let request: NewSandbox = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("invalid body: {e}")),
    };
    if request.template_id != super::DEFAULT_TEMPLATE {
        return error(StatusCode::NOT_FOUND, format!("template '{}' not found", request.template_id));
    }
    if request.timeout == 0 {
        return error(StatusCode::BAD_REQUEST, "Timeout must be greater than 0");
    }
    let resolution = requested_resolution(&request.metadata);
    let local = SandboxRequest { template: None, resolution, timeout: LOCAL_LIFETIME };
    let desktop = match state.local().create(&local).await {
        Ok(desktop) => desktop,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, format!("failed to create sandbox: {e}")),
    };
    let id = format!("i{:019x}", rand::random::<u64>());
    let now = OffsetDateTime::now_utc();
    let sandbox = FakeSandbox {
        local_id: desktop.id,
        template: request.template_id,
        started_at: now,
        end_at: now + Duration::from_secs(request.timeout),
        access_token: format!("{:032x}", rand::random::<u128>()),
        metadata: request.metadata,
        running: Arc::new(Mutex::new(HashSet::new())),
    };
    let body = created_json(&id, &sandbox);
    lock(&state.sandboxes).insert(id, sandbox);
    (StatusCode::CREATED, Json(body)).into_response()
}

/// Takes one `429` off the budget, if any is left; its `Retry-After`.
fn take_rate_limit(state: &State) -> Option<Duration> {
    let mut limit = lock(&state.rate_limit);
    if limit.remaining == 0 {
        return None;
    }
    limit.remaining -= 1;
    Some(limit.retry_after)
}

/// The size the create's metadata asks for, else the default.
fn requested_resolution(metadata: &HashMap<String, String>) -> (u32, u32) {
    metadata
        .get(RESOLUTION_METADATA)
        .and_then(|text| text.split_once('x'))
        .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)))
        .unwrap_or(SandboxRequest::default().resolution)
}

fn created_json(id: &str, sandbox: &FakeSandbox) -> Value {
    json!({
        "sandboxID": id,
        "templateID": sandbox.template,
        "clientID": "fake",
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": sandbox.access_token,
        "trafficAccessToken": null,
        "domain": null,
    })
}

fn rfc3339(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}

async fn detail(Shared(state): Shared<Arc<State>>, Path(id): Path<String>) -> Response {
    let Some(sandbox) = state.live(&id).await else {
        return not_found(&id);
    };
    let body = json!({
        "sandboxID": id,
        "templateID": sandbox.template,
        "clientID": "fake",
        "startedAt": rfc3339(sandbox.started_at),
        "endAt": rfc3339(sandbox.end_at),
        "cpuCount": 2,
        "memoryMB": 1024,
        "diskSizeMB": 4096,
        "state": "running",
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": sandbox.access_token,
        "domain": null,
        "metadata": sandbox.metadata,
    });
    Json(body).into_response()
}

fn not_found(id: &str) -> Response {
    error(StatusCode::NOT_FOUND, format!("sandbox \"{id}\" doesn't exist or you don't have access to it"))
}

async fn set_timeout(Shared(state): Shared<Arc<State>>, Path(id): Path<String>, body: Bytes) -> Response {
    let Ok(TimeoutBody { timeout }) = serde_json::from_slice(&body) else {
        return error(StatusCode::BAD_REQUEST, "invalid body");
    };
    change_deadline(&state, &id, |_, now| now + Duration::from_secs(timeout))
        .await
        .unwrap_or_else(|| StatusCode::NO_CONTENT.into_response())
}

async fn connect(Shared(state): Shared<Arc<State>>, Path(id): Path<String>, body: Bytes) -> Response {
    let Ok(TimeoutBody { timeout }) = serde_json::from_slice(&body) else {
        return error(StatusCode::BAD_REQUEST, "invalid body");
    };
    if let Some(refused) = change_deadline(&state, &id, |end, now| end.max(now + Duration::from_secs(timeout))).await {
        return refused;
    }
    match lock(&state.sandboxes).get(&id) {
        Some(sandbox) => Json(created_json(&id, sandbox)).into_response(),
        None => not_found(&id),
    }
}

/// Sets the deadline of live sandbox `id` to `new(end, now)`; the refusal
/// if it is not live.
async fn change_deadline(
    state: &State,
    id: &str,
    new: impl FnOnce(OffsetDateTime, OffsetDateTime) -> OffsetDateTime,
) -> Option<Response> {
    if state.live(id).await.is_none() {
        return Some(not_found(id));
    }
    let mut sandboxes = lock(&state.sandboxes);
    let Some(sandbox) = sandboxes.get_mut(id) else {
        return Some(not_found(id));
    };
    sandbox.end_at = new(sandbox.end_at, OffsetDateTime::now_utc());
    None
}

async fn kill(Shared(state): Shared<Arc<State>>, Path(id): Path<String>) -> Response {
    if state.live(&id).await.is_none() || !state.remove(&id).await {
        return not_found(&id);
    }
    StatusCode::NO_CONTENT.into_response()
}
