//! `/v1/tasks`: submitting, reading, listing and cancelling tasks, and
//! answering one that waits for a human.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use flotilla_queue::queue::{CancelOutcome, ListFilter, TaskRecord};
use flotilla_queue::quota::Admitted;
use flotilla_queue::QueueError;
use flotilla_types::clock;
use flotilla_types::eval::Verdict;
use flotilla_types::task::{HumanInput, TaskSpec, TaskStatus};
use flotilla_types::{BatchId, TaskId, ValidationError};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Tenant;
use crate::error::{rate_limit_headers, ApiError, ErrorBody};
use crate::extract::{parse_limit, JsonBody, QueryParams, TaskIdPath};
use crate::state::AppState;

/// Tasks one list call returns unless asked otherwise.
pub const DEFAULT_LIST_LIMIT: usize = 50;
pub use flotilla_queue::queue::MAX_LIST_LIMIT;

/// The answer to a submit.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskAccepted {
    pub id: TaskId,
    /// `queued` for a new task; a replayed idempotent submit shows the task's
    /// current status.
    pub status: TaskStatus,
    /// RFC 3339.
    pub created_at: String,
    pub links: TaskLinks,
}

/// Where to find a task.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskLinks {
    #[serde(rename = "self")]
    pub self_: String,
    pub events: String,
}

impl TaskLinks {
    pub fn of(id: &TaskId) -> Self {
        Self { self_: format!("/v1/tasks/{id}"), events: format!("/v1/tasks/{id}/events") }
    }
}

/// One page of tasks.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskPage {
    pub tasks: Vec<TaskRecord>,
    /// Pass as `cursor` for the next page; `null` on the last one.
    pub next_cursor: Option<TaskId>,
}

/// Where a cancel left a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum CancelState {
    /// It was queued and is now cancelled.
    Cancelled,
    /// A worker runs it and stops it within seconds.
    Cancelling,
}

/// The answer to a cancel.
#[derive(Debug, Serialize, ToSchema)]
pub struct Cancelled {
    pub id: TaskId,
    pub status: CancelState,
}

/// Filters of `GET /v1/tasks`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListParams {
    /// Only tasks with this status.
    #[param(value_type = Option<TaskStatus>)]
    pub status: Option<String>,
    /// Only tasks whose check gave this verdict (`passed`, `failed`, `error`).
    #[param(value_type = Option<Verdict>)]
    pub verdict: Option<String>,
    /// Only tasks of this batch; empty for any.
    #[param(value_type = Option<String>, pattern = r"^(bat_[0-7][0-9a-hjkmnp-tv-z]{25})?$")]
    pub batch: Option<String>,
    /// At most this many tasks, 1 to 500; default 50.
    #[param(value_type = Option<u32>, minimum = 1, maximum = 500)]
    pub limit: Option<String>,
    /// The `next_cursor` of the previous page; empty or absent for the first.
    #[param(value_type = Option<String>, pattern = r"^(tsk_[0-7][0-9a-hjkmnp-tv-z]{25})?$")]
    pub cursor: Option<String>,
}

impl ListParams {
    fn filter(&self) -> Result<ListFilter, ValidationError> {
        let given = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
        let status = match given(&self.status) {
            None => None,
            Some(s) => Some(TaskStatus::parse(&s).ok_or_else(|| {
                ValidationError::at("status", "status must be one of queued, running, waiting, succeeded, failed, cancelled")
            })?),
        };
        let verdict = match given(&self.verdict) {
            None => None,
            Some(v) => Some(
                Verdict::parse(&v)
                    .ok_or_else(|| ValidationError::at("verdict", "verdict must be one of passed, failed, error"))?,
            ),
        };
        let batch = given(&self.batch).map(|b| BatchId::parse(&b).map_err(|e| e.under("batch"))).transpose()?;
        let cursor = given(&self.cursor).map(|c| TaskId::parse(&c).map_err(|e| e.under("cursor"))).transpose()?;
        let limit = parse_limit(self.limit.as_deref(), DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT)?;
        Ok(ListFilter { status, verdict, batch, limit, cursor })
    }
}

/// Submit a task.
#[utoipa::path(
    post,
    path = "/v1/tasks",
    tag = "tasks",
    request_body = TaskSpec,
    responses(
        (status = 202, description = "Accepted and queued", body = TaskAccepted),
        (status = 200, description = "An identical request with this idempotency key was accepted before", body = TaskAccepted),
        (status = 400, description = "Malformed or invalid spec, or a `sandbox.template` that is not among the tenant's `sandbox_templates`; nothing was queued", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 409, description = "Idempotency key reused with a different body", body = ErrorBody),
        (status = 413, description = "Body over the size limit", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
        (status = 429, description = "Over the tenant's submit rate (`rate_limited`), `max_queued` or `max_tokens_per_day` (`quota_exceeded`); nothing was queued. `Retry-After` says when to try again", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Whole seconds"))),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn submit(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    JsonBody(spec): JsonBody<TaskSpec>,
) -> Result<Response, ApiError> {
    let spec = spec.with_default_pipeline(state.config().api.default_pipeline);
    spec.validate()?;
    let settings = state.config().tenants.get(&tenant);
    spec.check_template(&settings.sandbox_templates)?;
    let (submitted, rate) = state.queue().submitter().submit_admitted(&tenant, spec, &settings).await?;
    tracing::Span::current().record("task_id", submitted.id.as_str());
    let (code, status) = if submitted.replayed {
        let current = state.queue().reader().get(&tenant, &submitted.id).await?.map_or(TaskStatus::Queued, |t| t.status);
        (StatusCode::OK, current)
    } else {
        tracing::info!("task queued");
        (StatusCode::ACCEPTED, TaskStatus::Queued)
    };
    let links = TaskLinks::of(&submitted.id);
    let location = links.self_.clone();
    let body = TaskAccepted { id: submitted.id, status, created_at: clock::rfc3339(submitted.created_at_ms), links };
    let mut response = (code, [(header::LOCATION, location)], Json(body)).into_response();
    if let Some(rate) = rate {
        rate_limit_headers(response.headers_mut(), &rate);
    }
    Ok(response)
}

/// Drops the room a request reserved once it has queued its tasks (or made
/// none); if that fails, the reservation lapses by itself.
pub async fn release(state: &AppState, admitted: &Admitted) {
    if let Err(e) = state.queue().submitter().release_admission(admitted).await {
        tracing::warn!(error = %e, "could not drop a queue reservation; it lapses by itself");
    }
}

/// A task's spec and state.
#[utoipa::path(
    get,
    path = "/v1/tasks/{id}",
    tag = "tasks",
    params(("id" = TaskId, Path, description = "Task id, `tsk_` and 26 characters")),
    responses(
        (status = 200, description = "The task", body = TaskRecord),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such task for this tenant", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    TaskIdPath(id): TaskIdPath,
) -> Result<Json<TaskRecord>, ApiError> {
    let mut task = state.queue().reader().get(&tenant, &id).await?.ok_or(QueueError::NotFound)?;
    crate::presign::attach_urls(&state, &mut task).await?;
    state.queue().reader().fill_waiting_for(&mut task).await?;
    Ok(Json(task))
}

/// The tenant's tasks, newest first.
#[utoipa::path(
    get,
    path = "/v1/tasks",
    tag = "tasks",
    params(ListParams),
    responses(
        (status = 200, description = "One page of tasks", body = TaskPage),
        (status = 400, description = "Bad filter", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    QueryParams(params): QueryParams<ListParams>,
) -> Result<Json<TaskPage>, ApiError> {
    let filter = params.filter()?;
    let (tasks, next_cursor) = state.queue().reader().list(&tenant, &filter).await?;
    Ok(Json(TaskPage { tasks, next_cursor }))
}

/// Cancel a queued or running task.
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/cancel",
    tag = "tasks",
    params(("id" = TaskId, Path, description = "Task id")),
    responses(
        (status = 202, description = "Cancelled, or being cancelled", body = Cancelled),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such task for this tenant", body = ErrorBody),
        (status = 409, description = "The task had already finished (`already_finished`)", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn cancel(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    TaskIdPath(id): TaskIdPath,
) -> Result<(StatusCode, Json<Cancelled>), ApiError> {
    // The queue answers "cancelled" both for a queued task it just cancelled
    // and for one cancelled earlier, so a finished task is refused here first.
    let task = state.queue().reader().get(&tenant, &id).await?.ok_or(QueueError::NotFound)?;
    if task.status.is_terminal() {
        return Err(ApiError::AlreadyFinished(task.status));
    }
    let status = match state.queue().submitter().cancel(&tenant, &id).await? {
        CancelOutcome::Cancelled => CancelState::Cancelled,
        CancelOutcome::Cancelling => CancelState::Cancelling,
        CancelOutcome::AlreadyEnded(status) => return Err(ApiError::AlreadyFinished(status)),
    };
    tracing::info!(?status, "cancel asked");
    Ok((StatusCode::ACCEPTED, Json(Cancelled { id, status })))
}

/// The answer to a human's input.
#[derive(Debug, Serialize, ToSchema)]
pub struct InputAccepted {
    pub id: TaskId,
    /// Always `accepted`: the task's worker picks the input up within a moment.
    pub status: &'static str,
}

/// Answer a task that is `waiting` for a human: approve to let it go on,
/// deny to end it.
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/input",
    tag = "tasks",
    params(("id" = TaskId, Path, description = "Task id")),
    request_body = HumanInput,
    responses(
        (status = 202, description = "Handed to the task", body = InputAccepted),
        (status = 400, description = "Malformed id or body", body = ErrorBody),
        (status = 413, description = "Body over the size limit", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such task for this tenant", body = ErrorBody),
        (status = 409, description = "The task is not waiting (`conflict`)", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn input(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    TaskIdPath(id): TaskIdPath,
    JsonBody(input): JsonBody<HumanInput>,
) -> Result<(StatusCode, Json<InputAccepted>), ApiError> {
    input.validate()?;
    state.queue().submitter().give_input(&tenant, &id, &input).await?;
    tracing::info!(decision = ?input.decision, "input handed to a waiting task");
    Ok((StatusCode::ACCEPTED, Json(InputAccepted { id, status: "accepted" })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(status: Option<&str>, batch: Option<&str>, limit: Option<&str>, cursor: Option<&str>) -> ListParams {
        ListParams {
            status: status.map(str::to_owned),
            verdict: None,
            batch: batch.map(str::to_owned),
            limit: limit.map(str::to_owned),
            cursor: cursor.map(str::to_owned),
        }
    }

    #[test]
    fn an_empty_query_lists_the_newest_fifty() {
        let filter = ListParams::default().filter().expect("valid");
        assert_eq!(filter.limit, DEFAULT_LIST_LIMIT);
        assert!(filter.status.is_none() && filter.batch.is_none() && filter.cursor.is_none());
    }

    #[test]
    fn every_bad_filter_names_its_parameter() {
        let cases = [
            (params(Some("finished"), None, None, None), "status"),
            (params(None, Some("tsk_01jc0000000000000000000000"), None, None), "batch"),
            (params(None, None, Some("9999"), None), "limit"),
            (params(None, None, None, Some("abc")), "cursor"),
            (ListParams { verdict: Some("maybe".into()), ..ListParams::default() }, "verdict"),
        ];
        for (p, field) in cases {
            let err = p.filter().expect_err("refused");
            assert_eq!(err.field.as_deref(), Some(field), "{p:?}");
        }
    }

    #[test]
    fn links_point_at_the_task() {
        let id = TaskId::generate();
        let body = serde_json::to_value(TaskLinks::of(&id)).expect("json");
        assert_eq!(body["self"], format!("/v1/tasks/{id}"));
        assert_eq!(body["events"], format!("/v1/tasks/{id}/events"));
    }
}
