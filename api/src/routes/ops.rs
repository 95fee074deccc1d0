//! Endpoints for operators and tools: liveness, readiness and metrics (the
//! OpenAPI document serves itself, [`crate::openapi::document`]). Only the metrics need a key: the admin key
//! (`FLOTILLA_ADMIN_KEY`), since they are the whole fleet's figures.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::Admin;
use crate::error::{ApiError, ErrorBody};
use crate::metrics;
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
    if state.queue().ping().await {
        Ok(Json(Health { status: "ok" }))
    } else {
        Err(ApiError::Unavailable)
    }
}

/// Fleet-wide queue figures in the Prometheus text format, for the admin key
/// only (no tenant key reads them).
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    security(("admin" = [])),
    responses(
        (status = 200, description = "Prometheus text format 0.0.4", body = String, content_type = "text/plain; version=0.0.4"),
        (status = 401, description = "Missing or not the admin key", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    )
)]
pub async fn metrics(_admin: Admin, State(state): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    let stats = state.queue().reader().fleet_stats().await?;
    let mut page = metrics::render(&stats);
    if state.config().limits.tenant_metrics {
        metrics::render_tenants(&mut page, &state.queue().reader().tenant_totals().await?);
    }
    Ok(([(CONTENT_TYPE, metrics::CONTENT_TYPE)], page))
}
