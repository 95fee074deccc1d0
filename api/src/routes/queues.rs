//! `/v1/queues` and `/v1/dead`: the queue's figures and the dead-letter list.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use flotilla_shared::queue::{QueueStats, TaskRecord};
use flotilla_shared::task::TaskStatus;
use flotilla_shared::TaskId;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{parse_limit, QueryParams, TaskIdPath};
use crate::routes::tasks::{DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT};
use crate::state::AppState;

/// The tenant's dead-lettered tasks.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadTasks {
    pub tasks: Vec<TaskRecord>,
}

/// The answer to a dead-letter retry.
#[derive(Debug, Serialize, ToSchema)]
pub struct Requeued {
    pub id: TaskId,
    pub status: TaskStatus,
}

/// Parameters of `GET /v1/dead`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeadParams {
    /// At most this many tasks, 1 to 500; default 50.
    #[param(value_type = Option<u32>)]
    pub limit: Option<String>,
}

/// The caller's own figures: depth, pending, delay and age of its lanes, its
/// queued and running tasks and settings, and its dead count.
#[utoipa::path(
    get,
    path = "/v1/queues",
    tag = "queues",
    responses(
        (status = 200, description = "The queue's figures", body = QueueStats),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn stats(State(state): State<AppState>, Tenant(tenant): Tenant) -> Result<Json<QueueStats>, ApiError> {
    Ok(Json(state.queue().stats(&tenant).await?))
}

/// The caller's tasks whose attempts are spent, newest first.
#[utoipa::path(
    get,
    path = "/v1/dead",
    tag = "queues",
    params(DeadParams),
    responses(
        (status = 200, description = "Dead-lettered tasks", body = DeadTasks),
        (status = 400, description = "Bad limit", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn dead(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    QueryParams(params): QueryParams<DeadParams>,
) -> Result<Json<DeadTasks>, ApiError> {
    let limit = parse_limit(params.limit.as_deref(), DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT)?;
    Ok(Json(DeadTasks { tasks: state.queue().dead(&tenant, limit).await? }))
}

/// Queue a dead-lettered task again, with fresh attempts.
#[utoipa::path(
    post,
    path = "/v1/dead/{id}/retry",
    tag = "queues",
    params(("id" = String, Path, description = "Task id")),
    responses(
        (status = 202, description = "Queued again", body = Requeued),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "Not a dead-lettered task of this tenant", body = ErrorBody),
        (status = 409, description = "The task is not in a state to retry (`conflict`)", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn retry(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    TaskIdPath(id): TaskIdPath,
) -> Result<(StatusCode, Json<Requeued>), ApiError> {
    state.queue().revive(&tenant, &id).await?;
    tracing::info!("dead task queued again");
    Ok((StatusCode::ACCEPTED, Json(Requeued { id, status: TaskStatus::Queued })))
}
