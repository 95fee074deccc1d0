//! Endpoints for operators and tools: liveness, readiness, metrics and the
//! OpenAPI document. None needs an API key.

use std::sync::LazyLock;

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;
use utoipa::{OpenApi, ToSchema};

use crate::error::{ApiError, ErrorBody};
use crate::metrics;
use crate::openapi::ApiDoc;
use crate::state::AppState;

/// `{"status": "ok"}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    pub status: &'static str,
}

/// The process is alive.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "Alive", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health { status: "ok" })
}

/// Redis answers, so requests can be served.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Ready", body = Health),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    )
)]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    if state.queue().redis().ping().await {
        Ok(Json(Health { status: "ok" }))
    } else {
        Err(ApiError::Unavailable)
    }
}

/// Queue figures in the Prometheus text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses(
        (status = 200, description = "Prometheus text format 0.0.4", body = String, content_type = "text/plain; version=0.0.4"),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    )
)]
pub async fn metrics(State(state): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    let stats = state.queue().fleet_stats().await?;
    Ok(([(CONTENT_TYPE, metrics::CONTENT_TYPE)], metrics::render(&stats)))
}

/// The document, rendered once.
static DOCUMENT: LazyLock<String> = LazyLock::new(|| ApiDoc::openapi().to_json().unwrap_or_else(|_| "{}".to_owned()));

/// This API's OpenAPI 3.1 document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    responses((status = 200, description = "OpenAPI document", body = Object, content_type = "application/json"))
)]
pub async fn openapi() -> impl IntoResponse {
    ([(CONTENT_TYPE, "application/json")], DOCUMENT.as_str())
}
