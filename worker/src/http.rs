//! The worker's small HTTP side, when `FLOTILLA_WORKER_HTTP_ADDR` is set:
//! `/metrics` for Prometheus, `/healthz` (the process answers) and `/readyz`
//! (Redis answers) for Kubernetes probes, and `/live/{task}` for the API's
//! live views of the desktops this worker holds.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use flotilla_shared::queue::Queue;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::live::LiveDesktops;
use crate::metrics::WorkerMetrics;

#[derive(Clone)]
struct HttpState {
    queue: Queue,
    metrics: WorkerMetrics,
}

/// The routes.
fn router(queue: Queue, metrics: WorkerMetrics) -> Router {
    Router::new()
        .route("/metrics", get(metrics_page))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .with_state(HttpState { queue, metrics })
}

async fn metrics_page(State(state): State<HttpState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], state.metrics.render())
}

async fn ready(State(state): State<HttpState>) -> StatusCode {
    if state.queue.redis().ping().await {
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
    live: Option<LiveDesktops>,
    shutdown: CancellationToken,
) {
    let mut app = router(queue, metrics);
    if let Some(live) = live {
        app = app.merge(crate::live::socket::router(live));
    }
    let served = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await;
    if let Err(e) = served {
        warn!(error = %e, "the worker's HTTP server stopped");
    }
}
