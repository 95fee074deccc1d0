//! `/v1/webhooks`: a tenant's webhook endpoints, their secrets and their
//! delivery logs. Delivery itself runs in the workers; see
//! `flotilla_queue::webhooks`.

use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use flotilla_queue::webhooks::{Delivery, Endpoint, EndpointPatch, NewEndpoint, Webhooks};
use flotilla_types::clock;
use flotilla_types::{MessageId, ValidationError, WebhookId};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{path_error, path_id, JsonBody, QueryParams};
use crate::routes::paging::PageParams;
use crate::state::AppState;

/// How long a rotated-out secret keeps signing when `grace_s` is not given.
const DEFAULT_GRACE_S: i64 = 24 * 3600;
/// The longest grace a rotation may give the previous secret.
const MAX_GRACE_S: u32 = 30 * 24 * 3600;

/// A new endpoint and its secret (shown only here and on rotation).
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointCreated {
    #[serde(flatten)]
    pub endpoint: Endpoint,
    /// `whsec_<base64>`: the key is the bytes of the base64.
    pub secret: String,
}

/// A page of endpoints.
#[derive(Debug, Serialize, ToSchema)]
pub struct EndpointPage {
    pub webhooks: Vec<Endpoint>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<String>,
}

/// A page of an endpoint's delivery log, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryPage {
    pub deliveries: Vec<Delivery>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<String>,
}

/// A new secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct SecretRotated {
    pub secret: String,
    /// RFC 3339: until then the previous secret signs too.
    pub previous_valid_until: String,
}

/// Parameters of a rotation.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct RotateParams {
    /// How long the previous secret keeps signing beside the new one, seconds, at most 30 days (default 86400).
    #[param(minimum = 0, maximum = 2592000)]
    pub grace_s: Option<u32>,
}

/// The `{id}` segment of a path, as a webhook id.
#[derive(Debug, Clone)]
pub struct WebhookIdPath(pub WebhookId);

impl<S: Send + Sync> FromRequestParts<S> for WebhookIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Ok(WebhookIdPath(path_id(parts, state, WebhookId::parse, "no such webhook").await?))
    }
}

fn store(state: &AppState) -> &Webhooks {
    state.webhooks()
}

/// Create a webhook endpoint.
#[utoipa::path(
    post,
    path = "/v1/webhooks",
    tag = "webhooks",
    request_body = NewEndpoint,
    responses(
        (status = 201, description = "Created; the only answer besides a rotation that shows the secret", body = EndpointCreated),
        (status = 400, description = "Bad url (not https://, or a non-public address), no events, unknown field", body = ErrorBody),
        (status = 404, description = "`batch_id` names no batch of this tenant", body = ErrorBody),
        (status = 413, description = "Body over the size limit", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    JsonBody(new): JsonBody<NewEndpoint>,
) -> Result<Response, ApiError> {
    if let Some(batch) = &new.batch_id {
        state.queue().reader().batch(&tenant, batch).await?.ok_or(ApiError::NotFound("no such batch"))?;
    }
    let (endpoint, secret) = store(&state).create(&tenant, new).await?;
    Ok((StatusCode::CREATED, Json(EndpointCreated { endpoint, secret })).into_response())
}

/// List the tenant's webhook endpoints, oldest first.
#[utoipa::path(
    get,
    path = "/v1/webhooks",
    tag = "webhooks",
    params(PageParams, ("cursor" = Option<String>, Query, description = "The `next_cursor` of the previous page; empty or absent for the first", pattern = r"^(whk_[0-7][0-9a-hjkmnp-tv-z]{25})?$")),
    responses(
        (status = 200, description = "One page; follow `next_cursor` until it is absent", body = EndpointPage),
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
) -> Result<Json<EndpointPage>, ApiError> {
    let cursor = params.cursor(|c| WebhookId::parse(c).ok())?;
    let page = store(&state).list(&tenant, params.limit()?, cursor.as_ref().map(WebhookId::as_str)).await?;
    Ok(Json(EndpointPage { webhooks: page.items, next_cursor: page.next_cursor }))
}

/// Read one webhook endpoint.
#[utoipa::path(
    get,
    path = "/v1/webhooks/{id}",
    tag = "webhooks",
    params(("id" = WebhookId, Path, description = "Webhook id")),
    responses(
        (status = 200, description = "The endpoint", body = Endpoint),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such webhook for this tenant", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn get(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    WebhookIdPath(id): WebhookIdPath,
) -> Result<Json<Endpoint>, ApiError> {
    Ok(Json(store(&state).get(&tenant, &id).await?))
}

/// Change a webhook endpoint's `url`, `events` or `disabled`.
#[utoipa::path(
    patch,
    path = "/v1/webhooks/{id}",
    tag = "webhooks",
    params(("id" = WebhookId, Path, description = "Webhook id")),
    request_body = EndpointPatch,
    responses(
        (status = 200, description = "The endpoint as changed", body = Endpoint),
        (status = 400, description = "Bad url or events, unknown field", body = ErrorBody),
        (status = 413, description = "Body over the size limit", body = ErrorBody),
        (status = 415, description = "Body is not JSON", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such webhook for this tenant", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn patch(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    WebhookIdPath(id): WebhookIdPath,
    JsonBody(patch): JsonBody<EndpointPatch>,
) -> Result<Json<Endpoint>, ApiError> {
    Ok(Json(store(&state).patch(&tenant, &id, patch).await?))
}

/// Delete a webhook endpoint; its pending messages fail.
#[utoipa::path(
    delete,
    path = "/v1/webhooks/{id}",
    tag = "webhooks",
    params(("id" = WebhookId, Path, description = "Webhook id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such webhook for this tenant", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn delete(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    WebhookIdPath(id): WebhookIdPath,
) -> Result<StatusCode, ApiError> {
    store(&state).delete(&tenant, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Give an endpoint a new secret; the previous one keeps signing beside it for `grace_s`.
#[utoipa::path(
    post,
    path = "/v1/webhooks/{id}/rotate-secret",
    tag = "webhooks",
    params(("id" = WebhookId, Path, description = "Webhook id"), RotateParams),
    responses(
        (status = 200, description = "The new secret; until `previous_valid_until` each message carries two signatures", body = SecretRotated),
        (status = 400, description = "Malformed id or `grace_s`", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such webhook for this tenant", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn rotate(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    WebhookIdPath(id): WebhookIdPath,
    QueryParams(params): QueryParams<RotateParams>,
) -> Result<Json<SecretRotated>, ApiError> {
    if params.grace_s.is_some_and(|g| g > MAX_GRACE_S) {
        return Err(ApiError::Invalid(ValidationError::at("grace_s", "grace_s is at most 2592000 (30 days)")));
    }
    let grace_ms = params.grace_s.map_or(DEFAULT_GRACE_S, i64::from) * 1000;
    let secret = store(&state).rotate(&tenant, &id, grace_ms).await?;
    Ok(Json(SecretRotated { secret, previous_valid_until: clock::rfc3339(clock::now_ms() + grace_ms) }))
}

/// An endpoint's delivery log, newest first.
#[utoipa::path(
    get,
    path = "/v1/webhooks/{id}/deliveries",
    tag = "webhooks",
    params(
        ("id" = WebhookId, Path, description = "Webhook id"),
        PageParams,
        ("cursor" = Option<String>, Query, description = "The `next_cursor` of the previous page; empty or absent for the first", pattern = r"^(msg_[0-7][0-9a-hjkmnp-tv-z]{25})?$"),
    ),
    responses(
        (status = 200, description = "One page of messages with status, attempts, last response code, latency and error; follow `next_cursor` until it is absent", body = DeliveryPage),
        (status = 400, description = "Malformed id, `limit` or `cursor`", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such webhook for this tenant", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn deliveries(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    WebhookIdPath(id): WebhookIdPath,
    QueryParams(params): QueryParams<PageParams>,
) -> Result<Json<DeliveryPage>, ApiError> {
    let cursor = params.cursor(|c| MessageId::parse(c).ok())?;
    let page = store(&state).deliveries(&tenant, &id, params.limit()?, cursor.as_ref().map(MessageId::as_str)).await?;
    Ok(Json(DeliveryPage { deliveries: page.items, next_cursor: page.next_cursor }))
}

/// Send a message again now.
#[utoipa::path(
    post,
    path = "/v1/webhooks/{id}/deliveries/{msg_id}/retry",
    tag = "webhooks",
    params(("id" = WebhookId, Path, description = "Webhook id"), ("msg_id" = MessageId, Path, description = "Message id")),
    responses(
        (status = 202, description = "Due now; the message as it stands", body = Delivery),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such webhook or message for this tenant", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn retry(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    Path((id, msg)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let id = WebhookId::parse(&id).map_err(|e| path_error(&id, e.under("id"), "no such webhook"))?;
    let msg = MessageId::parse(&msg).map_err(|e| path_error(&msg, e.under("msg_id"), "no such message"))?;
    let delivery = store(&state).retry(&tenant, &id, &msg).await?;
    Ok((StatusCode::ACCEPTED, Json(delivery)).into_response())
}
