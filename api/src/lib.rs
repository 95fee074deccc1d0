//! The Flotilla HTTP API: takes tasks, serves their state, streams their
//! events and exposes the queue to operators.
//!
//! [`run`] is the one entry point, called by the binary and by tests alike
//! with a listener bound beforehand and a shutdown token; [`router`] builds
//! the whole application so tests can drive it without a socket.
//!
//! Code map: `routes/*` translate HTTP to queue calls; `extract` and `auth`
//! turn requests into typed values (or errors), `keys` holds the API keys
//! in force and reloads the keys file; `error` is the only place
//! that knows which status each error gets; `hub` is the process's one
//! subscription to events, fanned out to every stream (and, on a cluster,
//! to `relay`, which fills the tenant feeds); `feed` orders event streams;
//! `metrics` and `openapi` render the operator pages; `presign` links a
//! task's stored screenshots and artifacts; `dashboard` serves the page at
//! `/` that people watch the fleet with; `limits` bounds every request's
//! time; `routes::views` hands out live views of tasks' desktops and
//! bridges their WebSockets to workers, beside the noVNC page served under
//! `/novnc`; `routes::mcp` serves the MCP server (`flotilla-mcp`) at `/mcp`.

mod api_keys;
mod auth;
mod dashboard;
mod error;
mod extract;
mod feed;
pub mod hub;
mod limits;
pub mod metrics;
mod openapi;
mod presign;
mod relay;
mod routes;
mod state;

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, MatchedPath, State};
use axum::http::Request;
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{delete, get, post};
use axum::Router;
use flotilla_blobstore::{BlobConfig, BlobStore};
use flotilla_config::Config;
use flotilla_queue::queue::Queue;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::limit::GlobalConcurrencyLimitLayer;
use tower_http::services::ServeDir;
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tracing::Level;

pub use error::{ApiError, ErrorBody};
pub use openapi::ApiDoc;
pub use state::AppState;

/// How long open connections may finish after shutdown is asked for.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Serves the API on `listener` until `shutdown` is cancelled.
pub async fn run(config: Config, listener: TcpListener, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::connect(&config).await.map_err(|e| anyhow::anyhow!("FLOTILLA_REDIS_URL: cannot connect to redis: {e}"))?;
    let blobs = match config.s3.bucket {
        Some(_) => Some(BlobStore::new(BlobConfig::from_process_env(&config)?)),
        None => None,
    };
    serve(AppState::with_blobs(config, queue, blobs, shutdown.clone()), listener, shutdown).await
}

/// Serves the API with this state on `listener` until `shutdown` is cancelled.
pub async fn serve(state: AppState, listener: TcpListener, shutdown: CancellationToken) -> anyhow::Result<()> {
    tokio::spawn(Arc::clone(state.keys()).watch(shutdown.clone()));
    let addr = listener.local_addr().context("listener has no address")?;
    state.listening_on(addr);
    if state.config().live_view.public_url.is_none() && addr.ip().is_unspecified() {
        tracing::warn!(%addr, "FLOTILLA_PUBLIC_URL is unset: view links name this host's loopback address");
    }
    let app = router(state);
    tracing::info!(%addr, "api listening");
    let server = axum::serve(listener, app).with_graceful_shutdown(shutdown.clone().cancelled_owned()).into_future();
    let deadline = async {
        shutdown.cancelled().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        served = server => served.context("http server failed")?,
        () = deadline => tracing::warn!(grace_s = SHUTDOWN_GRACE.as_secs(), "connections still open after the grace period; closing them"),
    }
    tracing::info!("api stopped");
    Ok(())
}

/// The whole application: every route, the body limits (a larger one for
/// batches), a time limit on every route but the event streams, the live
/// view's socket and the noVNC files, MCP at `/mcp` (whose calls wait as
/// long as a task may), the cap on requests served at once, and request
/// tracing.
pub fn router(state: AppState) -> Router {
    let body_limit = state.config().api.body_limit;
    let limits = &state.config().limits;
    let streams = Router::new()
        .route("/v1/tasks/{id}/view/socket", get(routes::views::socket))
        .nest_service(routes::views::NOVNC_PATH, ServeDir::new(&state.config().live_view.novnc_dir))
        .route("/v1/tasks/{id}/events", get(routes::events::stream))
        .route("/v1/batches/{id}/events", get(routes::batch_events::stream))
        .route("/v1/events", get(routes::feed_events::stream))
        .merge(routes::mcp::routes(&state));
    // One layer per route, as each layer costs every request a clone of
    // the route's service and a boxed future.
    timed_routes(state.config().api.batch_body_limit)
        .route_layer(axum::middleware::from_fn_with_state(limits.request_timeout, timed))
        .merge(streams.route_layer(axum::middleware::from_fn(record_matched_route)))
        .fallback(routes::no_route)
        .method_not_allowed_fallback(routes::wrong_method)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(GlobalConcurrencyLimitLayer::new(limits.api_concurrency))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_response(DefaultOnResponse::new().level(Level::INFO))
                .on_failure(()),
        )
        .with_state(state)
}

/// Records the route a request matched on its span.
async fn record_matched_route(request: Request<Body>, next: Next) -> Response {
    record_route(&request);
    next.run(request).await
}

/// Records the route a request matched on its span and answers within the
/// request time limit ([`limits::time_limit`]).
async fn timed(State(limit): State<Duration>, request: Request<Body>, next: Next) -> Response {
    record_route(&request);
    limits::time_limit(State(limit), request, next).await
}

fn record_route(request: &Request<Body>) {
    if let Some(route) = request.extensions().get::<MatchedPath>() {
        tracing::Span::current().record("route", route.as_str());
    }
}

/// Every route that answers within the request time limit.
fn timed_routes(batch_body_limit: usize) -> Router<AppState> {
    Router::new()
        .route("/v1/tasks", post(routes::tasks::submit).get(routes::tasks::list))
        .route("/v1/tasks/{id}", get(routes::tasks::get))
        .route("/v1/tasks/{id}/cancel", post(routes::tasks::cancel))
        .route("/v1/tasks/{id}/input", post(routes::tasks::input))
        .route("/v1/tasks/{id}/takeover", post(routes::takeover::takeover))
        .route("/v1/tasks/{id}/release", post(routes::takeover::release))
        .route("/v1/tasks/{id}/view", get(routes::views::view))
        .route("/v1/tasks/{id}/view/ticket", post(routes::views::ticket))
        .route(routes::views::VIEW_PAGE_PATH, get(routes::views::page))
        .route("/v1/batches", post(routes::batches::create).layer(DefaultBodyLimit::max(batch_body_limit)))
        .route("/v1/batches/{id}", get(routes::batches::get))
        .route("/v1/batches/{id}/cancel", post(routes::batches::cancel))
        .route("/v1/batches/{id}/report", get(routes::batch_report::report))
        .route("/v1/usage", get(routes::usage::usage))
        .route("/v1/schedules", post(routes::schedules::create).get(routes::schedules::list))
        .route(
            "/v1/schedules/{id}",
            get(routes::schedules::get).patch(routes::schedules::patch).delete(routes::schedules::delete),
        )
        .route("/v1/webhooks", post(routes::webhooks::create).get(routes::webhooks::list))
        .route("/v1/webhooks/listen", get(routes::webhook_listen::listen))
        .route("/v1/webhooks/{id}", get(routes::webhooks::get).patch(routes::webhooks::patch).delete(routes::webhooks::delete))
        .route("/v1/webhooks/{id}/rotate-secret", post(routes::webhooks::rotate))
        .route("/v1/webhooks/{id}/deliveries", get(routes::webhooks::deliveries))
        .route("/v1/webhooks/{id}/deliveries/{msg_id}/retry", post(routes::webhooks::retry))
        .route("/v1/profiles", get(routes::profiles::list))
        .route("/v1/profiles/{name}", delete(routes::profiles::delete))
        .route("/v1/queues", get(routes::queues::stats))
        .route("/v1/dead", get(routes::queues::dead))
        .route("/v1/dead/{id}/retry", post(routes::queues::retry))
        .route("/healthz", get(routes::ops::healthz))
        .route("/readyz", get(routes::ops::readyz))
        .route("/metrics", get(routes::ops::metrics))
        .route("/openapi.json", get(openapi::document))
        .route("/", get(dashboard::page))
        .route(dashboard::SCRIPT_PATH, get(dashboard::script))
        .route(dashboard::BATCHES_SCRIPT_PATH, get(dashboard::batches_script))
        .route(dashboard::TIMELINE_SCRIPT_PATH, get(dashboard::timeline_script))
        .route(dashboard::STYLE_PATH, get(dashboard::style))
        .route(dashboard::CHART_SCRIPT_PATH, get(dashboard::chart_script))
        .route(dashboard::CHART_STYLE_PATH, get(dashboard::chart_style))
        .route(dashboard::evals::PAGE_PATH, get(dashboard::evals::page))
        .route(dashboard::evals::SCRIPT_PATH, get(dashboard::evals::script))
        .route(dashboard::evals::STYLE_PATH, get(dashboard::evals::style))
}

/// The span of one request; `route` (the matched route, such as
/// `/v1/tasks/{id}`: never the raw path, which holds ids), `tenant` and
/// `task_id` are filled in once known.
fn request_span(request: &Request<Body>) -> tracing::Span {
    tracing::info_span!(
        "request",
        method = %request.method(),
        route = tracing::field::Empty,
        tenant = tracing::field::Empty,
        key_id = tracing::field::Empty,
        task_id = tracing::field::Empty,
    )
}
