//! Flotilla's desktop extension, on envd's address and behind the same
//! routing and access token ([`calls::route`](super::calls::route)): a
//! capture in one call — settled first when asked, by the display's own
//! change reports (X DAMAGE), with the same rule a worker applies
//! ([`flotilla_sandbox::settle`]) — and one action sent straight to the
//! display (XTEST), with no process started in the sandbox for either.
//! Its refusals never answer `404`, which tells a client the host does not
//! serve the extension (hosted E2B), so it keeps to the standard calls.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::State as Shared;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use flotilla_e2b::fast::{CaptureRequest, Refusal, ACT_PATH, CAPTURE_PATH, WAITED_HEADER};
use flotilla_sandbox::settle::quiet_screen;
use flotilla_sandbox::{SandboxError, SandboxProvider};
use flotilla_types::action::Action;

use super::calls::route;
use super::host::Host;

/// The extension's routes, for envd's router.
pub(super) fn routes() -> Router<Arc<Host>> {
    Router::new().route(CAPTURE_PATH, post(capture)).route(ACT_PATH, post(act))
}

async fn capture(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, body: Bytes) -> Response {
    let sandbox = match route(&host, &headers).await {
        Ok(sandbox) => sandbox,
        Err(refused) => return refused,
    };
    let request: CaptureRequest = if body.is_empty() {
        CaptureRequest::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(request) => request,
            Err(e) => return refuse(&SandboxError::InvalidRequest(format!("a capture request: {e}"))),
        }
    };
    let local: &dyn SandboxProvider = &*host.local;
    let started = Instant::now();
    if let Some(settle) = request.settle {
        // A display that stopped reporting its changes is captured at once.
        let _ = quiet_screen(local, &sandbox.local_id, started, settle.bounded()).await;
    }
    let waited = started.elapsed();
    host.metrics.desktop_calls.inc();
    match local.screenshot(&sandbox.local_id).await {
        Ok(shot) => {
            let waited = HeaderValue::from(u64::try_from(waited.as_millis()).unwrap_or(u64::MAX));
            (
                [
                    (header::CONTENT_TYPE, HeaderValue::from_static("image/png")),
                    (WAITED_HEADER.parse().expect("a header name"), waited),
                ],
                shot.png,
            )
                .into_response()
        }
        Err(error) => refuse(&error),
    }
}

async fn act(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, body: Bytes) -> Response {
    let sandbox = match route(&host, &headers).await {
        Ok(sandbox) => sandbox,
        Err(refused) => return refused,
    };
    let action: Action = match serde_json::from_slice(&body) {
        Ok(action) => action,
        Err(e) => return refuse(&SandboxError::InvalidAction(format!("not an action: {e}"))),
    };
    host.metrics.desktop_calls.inc();
    match host.local.act(&sandbox.local_id, &action).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(error) => refuse(&error),
    }
}

fn refuse(error: &SandboxError) -> Response {
    let (status, refusal) = Refusal::of(error);
    (StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), Json(refusal)).into_response()
}
