//! `/v1/batches`: many tasks in one request, counted and cancelled together.
//! The batch's event stream is in [`super::batch_events`].

use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use flotilla_queue::queue::{batch_specs, check_batch_templates, place_error, plan_batch, BatchCounts, PlanRequest};
use flotilla_types::clock;
use flotilla_types::eval_plan::Matrix;
use flotilla_types::task::TaskSpec;
use flotilla_types::{BatchId, TaskId, ValidationError};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

use crate::auth::Tenant;
use crate::error::{rate_limit_headers, ApiError, ErrorBody};
use crate::extract::{path_id, JsonBody};
use crate::state::AppState;

/// What a batch submit carries.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    /// 1 to 10 000 task specs. Each is laid over `defaults` as a JSON merge
    /// patch (RFC 7386): its fields win, objects merge key by key, `null`
    /// removes a default. `idempotency_key` is not accepted in a batch.
    #[schema(value_type = Vec<TaskSpec>)]
    pub tasks: Vec<Value>,
    /// Spec fields every task starts from.
    #[schema(value_type = Option<Object>)]
    pub defaults: Option<Map<String, Value>>,
    /// Runs each task this many times, independently, each in its own
    /// sandbox (1 to 100; default 1).
    pub repeat: Option<u32>,
    /// Runs each task (each repeat) this many times; the best run by its
    /// check's score counts (1 to 100; default 1).
    pub best_of: Option<u32>,
    /// With `best_of`: once one run passes its check, the others of its
    /// group are cancelled.
    pub stop_on_pass: Option<bool>,
    /// Expands the batch over models and pipelines: each task runs once in
    /// each combination (times `repeat` and `best_of`).
    #[serde(default, deserialize_with = "matrix_object")]
    pub matrix: Option<Matrix>,
}

/// Reads `matrix` from a JSON object only (a derived reader would also take
/// an array of its fields in order, which the document does not allow).
fn matrix_object<'de, D: serde::Deserializer<'de>>(reader: D) -> Result<Option<Matrix>, D::Error> {
    use serde::de::Error;
    let Some(fields) = Option::<Map<String, Value>>::deserialize(reader)? else { return Ok(None) };
    serde_json::from_value(Value::Object(fields)).map(Some).map_err(D::Error::custom)
}

/// The answer to a batch submit.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchAccepted {
    pub id: BatchId,
    /// The tasks' ids, in the order they were given.
    pub task_ids: Vec<TaskId>,
    pub total: u64,
    /// RFC 3339.
    pub created_at: String,
    pub links: BatchLinks,
}

/// Where to find a batch.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchLinks {
    #[serde(rename = "self")]
    pub self_: String,
    pub events: String,
    /// The batch's tasks: `GET /v1/tasks?batch=`.
    pub tasks: String,
}

impl BatchLinks {
    fn of(id: &BatchId) -> Self {
        Self {
            self_: format!("/v1/batches/{id}"),
            events: format!("/v1/batches/{id}/events"),
            tasks: format!("/v1/tasks?batch={id}"),
        }
    }
}

/// A batch and its tasks by status.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchView {
    pub id: BatchId,
    /// RFC 3339.
    pub created_at: String,
    pub total: u64,
    /// Exact counts by status; they add up to `total` until finished tasks
    /// expire after the retention.
    pub counts: BatchCounts,
    /// RFC 3339, once every task has ended.
    pub finished_at: Option<String>,
}

/// The answer to a batch cancel.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchCancelled {
    pub id: BatchId,
    /// Queued tasks, now cancelled.
    pub cancelled: u64,
    /// Running or waiting tasks, which stop within seconds.
    pub cancelling: u64,
    /// Tasks that had already ended.
    pub already_ended: u64,
}

/// A batch body, under the larger limit of this route.
#[derive(Debug)]
pub struct BatchBody(pub BatchRequest);

impl FromRequest<AppState> for BatchBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let JsonBody(body) = JsonBody::<BatchRequest>::read(request, state.config().api.batch_body_limit).await?;
        Ok(BatchBody(body))
    }
}

/// The `{id}` segment of a path, as a batch id.
#[derive(Debug, Clone)]
pub struct BatchIdPath(pub BatchId);

impl<S: Send + Sync> FromRequestParts<S> for BatchIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Ok(BatchIdPath(path_id(parts, state, BatchId::parse, "no such batch").await?))
    }
}

/// Submit many tasks at once.
#[utoipa::path(
    post,
    path = "/v1/batches",
    tag = "batches",
    request_body = BatchRequest,
    responses(
        (status = 202, description = "Every task accepted and queued", body = BatchAccepted),
        (status = 400, description = "A task is invalid (the field names it, like `tasks[3].prompt`), or names a `sandbox.template` that is not among the tenant's `sandbox_templates`; nothing was created", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 413, description = "Body over the batch size limit (default 8 MiB), or a plan that would run more than 10 000 tasks (tasks × matrix cells × `repeat` × `best_of`); nothing was created", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
        (status = 429, description = "Over the tenant's submit rate (`rate_limited`), or its tasks would go past `max_queued`, or it spent `max_tokens_per_day` (`quota_exceeded`); no task was queued. `Retry-After` says when to try again", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Whole seconds"))),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    BatchBody(body): BatchBody,
) -> Result<Response, ApiError> {
    let asked =
        PlanRequest { repeat: body.repeat, best_of: body.best_of, stop_on_pass: body.stop_on_pass, matrix: body.matrix.as_ref() };
    let (tasks, runs) = plan_batch(&body.tasks, asked)?;
    let placed = |e: ValidationError| place_error(e, runs.as_ref());
    let specs = batch_specs(&tasks, body.defaults.as_ref(), state.config().api.default_pipeline).map_err(placed)?;
    let settings = state.config().tenants.get(&tenant);
    check_batch_templates(&specs, &tasks, body.defaults.as_ref(), &settings.sandbox_templates).map_err(placed)?;
    let count = specs.len() as u64;
    let admitted = state.queue().submitter().admit(&tenant, count, &settings).await?;
    let made = state.queue().submitter().create_batch(&tenant, specs, runs).await;
    super::tasks::release(&state, &admitted).await;
    let (batch, task_ids) = made?;
    tracing::info!(batch_id = %batch.id, tasks = task_ids.len(), "batch queued");
    let links = BatchLinks::of(&batch.id);
    let location = links.self_.clone();
    let body =
        BatchAccepted { id: batch.id, total: batch.total, task_ids, created_at: clock::rfc3339(batch.created_at_ms), links };
    let mut response = (StatusCode::ACCEPTED, [(header::LOCATION, location)], Json(body)).into_response();
    if let Some(rate) = admitted.rate {
        rate_limit_headers(response.headers_mut(), &rate);
    }
    Ok(response)
}

/// A batch's tasks counted by status.
#[utoipa::path(
    get,
    path = "/v1/batches/{id}",
    tag = "batches",
    params(("id" = BatchId, Path, description = "Batch id, `bat_` and 26 characters")),
    responses(
        (status = 200, description = "The batch", body = BatchView),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such batch for this tenant", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    BatchIdPath(id): BatchIdPath,
) -> Result<Json<BatchView>, ApiError> {
    let batch = state.queue().reader().batch(&tenant, &id).await?.ok_or(ApiError::NotFound("no such batch"))?;
    let (counts, finished_at) = state.queue().reader().batch_counts(&batch).await?;
    Ok(Json(BatchView {
        id,
        created_at: clock::rfc3339(batch.created_at_ms),
        total: batch.total,
        counts,
        finished_at: finished_at.map(clock::rfc3339),
    }))
}

/// Cancel every task of a batch.
#[utoipa::path(
    post,
    path = "/v1/batches/{id}/cancel",
    tag = "batches",
    params(("id" = BatchId, Path, description = "Batch id")),
    responses(
        (status = 202, description = "Queued tasks cancelled, running ones stopping", body = BatchCancelled),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such batch for this tenant", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn cancel(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    BatchIdPath(id): BatchIdPath,
) -> Result<(StatusCode, Json<BatchCancelled>), ApiError> {
    let batch = state.queue().reader().batch(&tenant, &id).await?.ok_or(ApiError::NotFound("no such batch"))?;
    let done = state.queue().submitter().cancel_batch(&batch).await?;
    tracing::info!(batch_id = %id, cancelled = done.cancelled, cancelling = done.cancelling, "batch cancel asked");
    let body = BatchCancelled { id, cancelled: done.cancelled, cancelling: done.cancelling, already_ended: done.already_ended };
    Ok((StatusCode::ACCEPTED, Json(body)))
}
