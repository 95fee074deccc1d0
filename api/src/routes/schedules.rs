//! `/v1/schedules`: cron rules that enqueue a task at each due time. The
//! workers fire them; see `flotilla_queue::schedule`.

use axum::extract::{FromRequestParts, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use flotilla_queue::schedule::{NewSchedule, Schedule, SchedulePatch};
use flotilla_types::clock;
use flotilla_types::ScheduleId;
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{path_id, JsonBody, QueryParams};
use crate::routes::paging::PageParams;
use crate::state::AppState;

const NOT_FOUND: ApiError = ApiError::NotFound("no such schedule");

/// A page of the tenant's schedules, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct ScheduleList {
    pub schedules: Vec<Schedule>,
    /// Pass as `cursor` for the next page; `null` on the last one.
    #[schema(value_type = Option<ScheduleId>)]
    pub next_cursor: Option<String>,
}

/// The `{id}` segment of a path, as a schedule id.
#[derive(Debug, Clone)]
pub struct ScheduleIdPath(pub ScheduleId);

impl<S: Send + Sync> FromRequestParts<S> for ScheduleIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Ok(ScheduleIdPath(path_id(parts, state, ScheduleId::parse, "no such schedule").await?))
    }
}

/// Create a schedule.
#[utoipa::path(
    post,
    path = "/v1/schedules",
    tag = "schedules",
    request_body = NewSchedule,
    responses(
        (status = 201, description = "Created; `next_run_at` is its first due time", body = Schedule),
        (status = 400, description = "Bad cron pattern, time zone or task spec (the field names it), or a `task.sandbox.template` that is not among the tenant's `sandbox_templates`", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 413, description = "Body over the size limit", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
        (status = 429, description = "The tenant keeps its `max_schedules` (`quota_exceeded`, with `Retry-After`)", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    JsonBody(body): JsonBody<NewSchedule>,
) -> Result<Response, ApiError> {
    let (settings, task) = body.check(state.config().api.default_pipeline)?;
    let limits = state.config().tenants.get(&tenant);
    task.check_template(&limits.sandbox_templates).map_err(|e| e.under("task"))?;
    state.queue().submitter().check_schedules(&tenant, &limits).await?;
    let schedule = state.queue().schedules().create(&tenant, settings, &task, clock::now_ms()).await?;
    tracing::info!(schedule_id = %schedule.id, cron = %schedule.cron, timezone = %schedule.timezone, "schedule created");
    let location = format!("/v1/schedules/{}", schedule.id);
    Ok((StatusCode::CREATED, [(header::LOCATION, location)], Json(schedule)).into_response())
}

/// The tenant's schedules, newest first, a page at a time.
#[utoipa::path(
    get,
    path = "/v1/schedules",
    tag = "schedules",
    params(PageParams, ("cursor" = Option<String>, Query, description = "The `next_cursor` of the previous page; empty or absent for the first", pattern = r"^(sch_[0-7][0-9a-hjkmnp-tv-z]{25})?$")),
    responses(
        (status = 200, description = "One page; follow `next_cursor` until it is null", body = ScheduleList),
        (status = 400, description = "Bad `limit` or `cursor`", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    QueryParams(params): QueryParams<PageParams>,
) -> Result<Json<ScheduleList>, ApiError> {
    let cursor = params.cursor(|c| ScheduleId::parse(c).ok())?;
    let page = state.queue().schedules().list(&tenant, params.limit()?, cursor.as_ref()).await?;
    Ok(Json(ScheduleList { schedules: page.items, next_cursor: page.next_cursor }))
}

/// A schedule, with its next and last run.
#[utoipa::path(
    get,
    path = "/v1/schedules/{id}",
    tag = "schedules",
    params(("id" = ScheduleId, Path, description = "Schedule id, `sch_` and 26 characters")),
    responses(
        (status = 200, description = "The schedule", body = Schedule),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such schedule for this tenant", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ScheduleIdPath(id): ScheduleIdPath,
) -> Result<Json<Schedule>, ApiError> {
    Ok(Json(state.queue().schedules().get(&tenant, &id).await?.ok_or(NOT_FOUND)?))
}

/// Pause, resume or change a schedule.
#[utoipa::path(
    patch,
    path = "/v1/schedules/{id}",
    tag = "schedules",
    params(("id" = ScheduleId, Path, description = "Schedule id")),
    request_body = SchedulePatch,
    responses(
        (status = 200, description = "The changed schedule; a new rule or a resume counts from now", body = Schedule),
        (status = 400, description = "Malformed id, bad cron pattern or time zone", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such schedule for this tenant", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn patch(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ScheduleIdPath(id): ScheduleIdPath,
    JsonBody(patch): JsonBody<SchedulePatch>,
) -> Result<Json<Schedule>, ApiError> {
    let schedules = state.queue().schedules();
    let current = schedules.get(&tenant, &id).await?.ok_or(NOT_FOUND)?;
    let settings = patch.check(&current)?;
    let changed = schedules.update(&current, settings, clock::now_ms()).await?.ok_or(NOT_FOUND)?;
    tracing::info!(schedule_id = %id, paused = changed.paused, "schedule changed");
    Ok(Json(changed))
}

/// Delete a schedule; the tasks it made stay.
#[utoipa::path(
    delete,
    path = "/v1/schedules/{id}",
    tag = "schedules",
    params(("id" = ScheduleId, Path, description = "Schedule id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such schedule for this tenant", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn delete(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ScheduleIdPath(id): ScheduleIdPath,
) -> Result<StatusCode, ApiError> {
    if !state.queue().schedules().delete(&tenant, &id).await? {
        return Err(NOT_FOUND);
    }
    tracing::info!(schedule_id = %id, "schedule deleted");
    Ok(StatusCode::NO_CONTENT)
}
