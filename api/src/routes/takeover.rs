//! Taking a task's desktop over and handing it back:
//! `POST /v1/tasks/{id}/takeover` pauses the agent after its current action
//! (status `waiting`, code `human-intervention`, event `takeover`) and
//! answers with a `control` view; `POST /v1/tasks/{id}/release` hands the
//! desktop back with a message (event `released`), and the agent goes on
//! from a fresh screenshot with it. A task that waits on its own
//! (`ambiguity`, `sensitive-action`) is taken over the same way; its
//! release answers the question with the person's message.
//!
//! Only a task whose desktop can be shown now can be taken over: a person
//! must be able to drive what they hold.
//!
//! A release, and a new takeover, revoke every `control` token of the task
//! handed out before: they open nothing more, and the worker closes the
//! control views they opened. A release refused (the task was not taken
//! over) revokes them too: control ends at a release either way.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use flotilla_queue::live::ViewMode;
use flotilla_queue::queue::Takeover;
use flotilla_queue::QueueError;
use flotilla_types::task::MAX_INPUT_MESSAGE_CHARS;
use flotilla_types::{TaskId, ValidationError};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{JsonBody, TaskIdPath};
use crate::routes::views::{live_views, view_link, ViewLink};
use crate::state::AppState;

/// The answer to a takeover.
#[derive(Debug, Serialize, ToSchema)]
pub struct TakenOver {
    pub id: TaskId,
    /// Always `waiting`: the agent pauses after its current action.
    pub status: &'static str,
    /// Always `human-intervention`.
    pub code: &'static str,
    /// A `control` view of the desktop.
    pub view: ViewLink,
}

/// The body of a release.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Release {
    /// What the agent should know about what the person did; at most 4,000
    /// characters.
    #[serde(default)]
    #[schema(max_length = 4000)]
    pub message: Option<String>,
}

/// The answer to a release.
#[derive(Debug, Serialize, ToSchema)]
pub struct Released {
    pub id: TaskId,
    /// Always `released`: the agent goes on within a moment.
    pub status: &'static str,
}

/// Take a running or waiting task's desktop over.
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/takeover",
    tag = "tasks",
    params(("id" = TaskId, Path, description = "Task id")),
    responses(
        (status = 200, description = "The person holds the desktop (or held it already); a control view", body = TakenOver),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such task for this tenant", body = ErrorBody),
        (status = 409, description = "The task is not running or waiting, or holds no desktop that can be shown now (`conflict`)", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn takeover(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    TaskIdPath(id): TaskIdPath,
) -> Result<Json<TakenOver>, ApiError> {
    // Known to be this tenant's before anything is revoked.
    state.queue().reader().get(&tenant, &id).await?.ok_or(QueueError::NotFound)?;
    live_views(&state).revoke_control(&id).await?;
    let view = view_link(&state, &tenant, &id, ViewMode::Control).await?;
    let outcome = state.queue().submitter().take_over(&tenant, &id).await?;
    tracing::info!(already_held = outcome == Takeover::AlreadyHeld, "desktop taken over");
    Ok(Json(TakenOver { id, status: "waiting", code: "human-intervention", view }))
}

/// Hand a taken-over task's desktop back to its agent.
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/release",
    tag = "tasks",
    params(("id" = TaskId, Path, description = "Task id")),
    request_body = Release,
    responses(
        (status = 202, description = "Handed back; the agent goes on with the message", body = Released),
        (status = 400, description = "Malformed id or body", body = ErrorBody),
        (status = 413, description = "Body over the size limit", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such task for this tenant", body = ErrorBody),
        (status = 409, description = "The task is not taken over (`conflict`)", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn release(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    TaskIdPath(id): TaskIdPath,
    JsonBody(release): JsonBody<Release>,
) -> Result<(StatusCode, Json<Released>), ApiError> {
    if release.message.as_ref().is_some_and(|m| m.chars().count() > MAX_INPUT_MESSAGE_CHARS) {
        let problem = format!("message must be at most {MAX_INPUT_MESSAGE_CHARS} characters");
        return Err(ValidationError::at("message", problem).into());
    }
    // Known to be this tenant's before anything is revoked.
    state.queue().reader().get(&tenant, &id).await?.ok_or(QueueError::NotFound)?;
    live_views(&state).revoke_control(&id).await?;
    state.queue().submitter().hand_back(&tenant, &id, release.message).await?;
    tracing::info!("desktop handed back");
    Ok((StatusCode::ACCEPTED, Json(Released { id, status: "released" })))
}
