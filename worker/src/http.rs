//! The worker's small HTTP side (on a loopback port by default, pinned by
//! `FLOTILLA_WORKER_HTTP_ADDR`, none when that is `off`):
//! `/metrics` for Prometheus, `/healthz` (the process answers) and `/readyz`
//! (Redis answers) for Kubernetes probes, and `/live/{task}` for the API's
//! live views of the desktops this worker holds.
//!
//! `/metrics` answers only the admin key (`FLOTILLA_ADMIN_KEY`), as the
//! API's does: a worker's figures name its tasks' models, sandboxes and
//! timings. The probes stay open.

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use flotilla_config::apikey::{bearer_key, KeyDigest, KeyHasher};
use flotilla_config::AuthConfig;
use flotilla_queue::queue::Queue;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::live::LiveDesktops;
use crate::metrics::WorkerMetrics;

/// Who may read `/metrics`: whoever presents the admin key; nobody when
/// none is configured.
#[derive(Clone, Debug)]
pub struct MetricsAccess {
    hasher: KeyHasher,
    admin: Option<KeyDigest>,
}

impl MetricsAccess {
    /// The admin key of `auth` (`FLOTILLA_ADMIN_KEY`, kept as a digest).
    pub fn from_config(auth: &AuthConfig) -> Self {
        Self { hasher: auth.hasher.clone(), admin: auth.admin_key }
    }

    fn allows(&self, headers: &HeaderMap) -> bool {
        let Some(admin) = &self.admin else { return false };
        let presented = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(bearer_key);
        presented.is_some_and(|key| admin.matches(&self.hasher.digest(key)))
    }
}

#[derive(Clone)]
struct HttpState {
    queue: Queue,
    metrics: WorkerMetrics,
    access: MetricsAccess,
}

/// The routes.
fn router(queue: Queue, metrics: WorkerMetrics, access: MetricsAccess) -> Router {
    Router::new()
        .route("/metrics", get(metrics_page))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .with_state(HttpState { queue, metrics, access })
}

async fn metrics_page(State(state): State<HttpState>, headers: HeaderMap) -> Response {
    if !state.access.allows(&headers) {
        let refusal = "send Authorization: Bearer <admin key> (FLOTILLA_ADMIN_KEY)";
        return (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], refusal).into_response();
    }
    let content_type = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    ([(header::CONTENT_TYPE, content_type)], state.metrics.render()).into_response()
}

async fn ready(State(state): State<HttpState>) -> StatusCode {
    if state.queue.ping().await {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    }
}

/// Serves until `shutdown` is cancelled.
/// With `live`, it also serves the live views of the desktops this worker holds.
pub async fn serve(
    listener: tokio::net::TcpListener,
    queue: Queue,
    metrics: WorkerMetrics,
    access: MetricsAccess,
    live: Option<LiveDesktops>,
    shutdown: CancellationToken,
) {
    let mut app = router(queue, metrics, access);
    if let Some(live) = live {
        app = app.merge(crate::live::socket::router(live));
    }
    let served = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await;
    if let Err(e) = served {
        warn!(error = %e, "the worker's HTTP server stopped");
    }
}
