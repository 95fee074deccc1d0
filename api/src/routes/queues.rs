//! `/v1/queues` and `/v1/dead`: the queue's figures and the dead-letter list.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use flotilla_queue::page::ScoreCursor;
use flotilla_queue::queue::{QueueStats, TaskRecord};
use flotilla_types::task::TaskStatus;
use flotilla_types::TaskId;
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{QueryParams, TaskIdPath};
use crate::routes::paging::PageParams;
use crate::state::AppState;

/// A page of the tenant's dead-lettered tasks, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeadTasks {
    pub tasks: Vec<TaskRecord>,
    /// Pass as `cursor` for the next page (`<ms>:<task id>`); `null` on the last one.
    pub next_cursor: Option<String>,
}

/// Reads a dead-letter cursor.
fn dead_cursor(text: &str) -> Option<ScoreCursor> {
    ScoreCursor::parse(text).filter(|c| c.score >= 0 && TaskId::parse(&c.member).is_ok())
}

/// The answer to a dead-letter retry.
#[derive(Debug, Serialize, ToSchema)]
pub struct Requeued {
    pub id: TaskId,
    pub status: TaskStatus,
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
    Ok(Json(state.queue().reader().stats(&tenant).await?))
}

/// The caller's tasks whose attempts are spent, newest first, a page at a time.
#[utoipa::path(
    get,
    path = "/v1/dead",
    tag = "queues",
    params(PageParams, ("cursor" = Option<String>, Query, description = "The `next_cursor` of the previous page; empty or absent for the first", pattern = r"^([0-9]{1,15}:tsk_[0-7][0-9a-hjkmnp-tv-z]{25})?$")),
    responses(
        (status = 200, description = "One page; follow `next_cursor` until it is null", body = DeadTasks),
        (status = 400, description = "Bad `limit` or `cursor`", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn dead(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    QueryParams(params): QueryParams<PageParams>,
) -> Result<Json<DeadTasks>, ApiError> {
    let cursor = params.cursor(dead_cursor)?;
    let page = state.queue().reader().dead(&tenant, params.limit()?, cursor.as_ref()).await?;
    Ok(Json(DeadTasks { tasks: page.items, next_cursor: page.next_cursor }))
}

/// Queue a dead-lettered task again, with fresh attempts.
#[utoipa::path(
    post,
    path = "/v1/dead/{id}/retry",
    tag = "queues",
    params(("id" = TaskId, Path, description = "Task id")),
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
    state.queue().submitter().revive(&tenant, &id).await?;
    tracing::info!("dead task queued again");
    Ok((StatusCode::ACCEPTED, Json(Requeued { id, status: TaskStatus::Queued })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_dead_cursor_is_the_one_the_server_reads() {
        let id = TaskId::generate();
        assert!(dead_cursor(&format!("1732500000000:{id}")).is_some());
        for bad in ["1732500000000", "-1:x", &format!("-5:{id}"), &format!("x:{id}"), "12:tsk_"] {
            assert!(dead_cursor(bad).is_none(), "{bad}");
        }
        let pattern = format!("^([0-9]{{1,15}}:{})?$", TaskId::PATTERN.trim_start_matches('^').trim_end_matches('$'));
        assert_eq!(pattern, r"^([0-9]{1,15}:tsk_[0-7][0-9a-hjkmnp-tv-z]{25})?$", "the pattern the document states");
    }
}
