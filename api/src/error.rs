//! The one place where errors become HTTP responses.
//!
//! The domain errors (`ValidationError`, `QueueError`) know nothing of HTTP,
//! and the problems the API finds by itself (a missing key, a body that is not
//! JSON, an unknown route) join them in [`ApiError`]. [`ApiError::reply`]
//! gives each one its status, stable code and message in a single `match`, so
//! a new domain error cannot reach a client without a decision here.
//!
//! Every error body has one shape, `{"error": {"code", "message", "field"}}`.
//! A 5xx other than 503 is a bug: its body says nothing and its cause is
//! logged once, here.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use flotilla_queue::queue::PlanError;
use flotilla_queue::quota::{QuotaError, RateState};
use flotilla_queue::QueueError;
use flotilla_types::task::TaskStatus;
use flotilla_types::ValidationError;
use serde::Serialize;
use utoipa::ToSchema;

use crate::hub::HubError;
use flotilla_queue::webhooks::WebhookError;

/// Everything a request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Hub(#[from] HubError),
    #[error("missing or unknown API key")]
    Unauthorized,
    #[error("this API key may only read")]
    ReadOnlyKey,
    #[error("{0}")]
    NotFound(&'static str),
    #[error("task already {0}")]
    AlreadyFinished(TaskStatus),
    #[error("request body is over the limit of {0} bytes")]
    PayloadTooLarge(usize),
    #[error(transparent)]
    BatchTooLarge(PlanError),
    #[error("content-type must be application/json")]
    UnsupportedMediaType,
    #[error("method not allowed on this path")]
    MethodNotAllowed,
    #[error("redis is unreachable")]
    Unavailable,
    #[error(transparent)]
    Quota(QuotaError),
    #[error("the request took longer than {0} ms")]
    TimedOut(u128),
    #[error("the task holds no desktop that can be shown now: it is not running, or its worker serves no live views (FLOTILLA_WORKER_HTTP_ADDR=off) and its sandbox streams none")]
    NotViewable,
    #[error("the view token or ticket is unknown, expired, revoked, used already or for another task")]
    ViewTokenRefused,
    #[error("the worker holding the task cannot be reached: {0}")]
    WorkerUnreachable(String),
    #[error(transparent)]
    Store(flotilla_blobstore::BlobError),
    #[error("{0}")]
    Internal(String),
}

/// The JSON body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong, for programs (`code`, `field`) and people (`message`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable: `invalid_request`, `unauthorized`, `forbidden`, `not_found`,
    /// `idempotency_conflict`, `already_finished`, `conflict`,
    /// `payload_too_large`, `unsupported_media_type`, `method_not_allowed`,
    /// `rate_limited`, `quota_exceeded`, `timeout`, `unavailable` or
    /// `internal`.
    pub code: &'static str,
    pub message: String,
    /// The JSON path of the offending field, like `sandbox.resolution`.
    pub field: Option<String>,
}

/// An error's place in HTTP.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub field: Option<String>,
}

impl Reply {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self { status, code, message: message.into(), field: None }
    }
}

const INTERNAL_MESSAGE: &str = "internal error";
const UNAVAILABLE_MESSAGE: &str = "redis is unreachable; retry shortly";

impl ApiError {
    /// A rejection of one of axum's own extractors, by its status and text.
    pub fn from_rejection(status: StatusCode, text: String) -> Self {
        match status {
            StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::UnsupportedMediaType,
            s if s.is_client_error() => ApiError::Invalid(ValidationError::new(text)),
            _ => ApiError::Internal(text),
        }
    }

    /// Status, code, message and field of this error.
    pub fn reply(&self) -> Reply {
        match self {
            ApiError::Invalid(e) => {
                Reply { field: e.field.clone(), ..Reply::new(StatusCode::BAD_REQUEST, "invalid_request", &e.message) }
            }
            ApiError::Queue(QueueError::NotFound) => Reply::new(StatusCode::NOT_FOUND, "not_found", "no such task"),
            ApiError::NotFound(what) => Reply::new(StatusCode::NOT_FOUND, "not_found", *what),
            ApiError::Unauthorized => {
                Reply::new(StatusCode::UNAUTHORIZED, "unauthorized", "send Authorization: Bearer <API key> with a known key")
            }
            ApiError::ReadOnlyKey => {
                Reply::new(StatusCode::FORBIDDEN, "forbidden", "this API key has scope read: it may only GET")
            }
            ApiError::Queue(e @ QueueError::IdempotencyConflict) => {
                Reply::new(StatusCode::CONFLICT, "idempotency_conflict", e.to_string())
            }
            ApiError::AlreadyFinished(_) => Reply::new(StatusCode::CONFLICT, "already_finished", self.to_string()),
            ApiError::Queue(QueueError::WrongStatus(status)) => {
                Reply::new(StatusCode::CONFLICT, "conflict", format!("task is {status}; this needs another status"))
            }
            ApiError::PayloadTooLarge(_) | ApiError::BatchTooLarge(_) => {
                Reply::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", self.to_string())
            }
            ApiError::UnsupportedMediaType => {
                Reply::new(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", self.to_string())
            }
            ApiError::MethodNotAllowed => Reply::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", self.to_string()),
            ApiError::Quota(e @ QuotaError::RateLimited { .. }) => {
                Reply::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", e.to_string())
            }
            ApiError::Quota(
                e @ (QuotaError::QueueFull { .. }
                | QuotaError::TokensSpent { .. }
                | QuotaError::CostSpent { .. }
                | QuotaError::SchedulesFull { .. }),
            ) => Reply::new(StatusCode::TOO_MANY_REQUESTS, "quota_exceeded", e.to_string()),
            ApiError::TimedOut(_) => Reply::new(StatusCode::SERVICE_UNAVAILABLE, "timeout", self.to_string()),
            ApiError::NotViewable => Reply::new(StatusCode::CONFLICT, "conflict", self.to_string()),
            ApiError::ViewTokenRefused => Reply::new(StatusCode::UNAUTHORIZED, "unauthorized", self.to_string()),
            ApiError::WorkerUnreachable(cause) => {
                tracing::warn!(%cause, "cannot reach the worker of a live view");
                Reply::new(StatusCode::BAD_GATEWAY, "unavailable", "the worker holding the task cannot be reached")
            }
            ApiError::Hub(HubError::TooManyStreams(_)) => {
                Reply::new(StatusCode::TOO_MANY_REQUESTS, "rate_limited", format!("{self}; close one or retry later"))
            }
            ApiError::Store(e) if e.is_retryable() => {
                Reply::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "the blob store is unreachable; retry shortly")
            }
            ApiError::Store(e) => {
                tracing::error!(error = %e, "the blob store refused a request");
                Reply::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", INTERNAL_MESSAGE)
            }
            ApiError::Unavailable
            | ApiError::Queue(QueueError::Pool(_) | QueueError::Archive(_))
            | ApiError::Hub(HubError::NotConnected) => {
                Reply::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", UNAVAILABLE_MESSAGE)
            }
            ApiError::Queue(QueueError::Redis(e)) if redis_unavailable(e) => {
                Reply::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", UNAVAILABLE_MESSAGE)
            }
            // `From<QuotaError>` turns a quota's queue error into `ApiError::Queue`.
            ApiError::Queue(
                QueueError::Redis(_)
                | QueueError::Fenced
                | QueueError::Cancelled
                | QueueError::Corrupt(_)
                | QueueError::NoPipeline,
            )
            | ApiError::Quota(QuotaError::Queue(_))
            | ApiError::Internal(_) => Reply::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", INTERNAL_MESSAGE),
        }
    }
}

/// `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` of a
/// tenant's submit-rate bucket.
pub fn rate_limit_headers(headers: &mut axum::http::HeaderMap, state: &RateState) {
    for (name, value) in
        [("ratelimit-limit", state.limit), ("ratelimit-remaining", state.remaining), ("ratelimit-reset", state.reset_s)]
    {
        headers.insert(name, HeaderValue::from(value));
    }
}

/// A plan too large is a batch too large (413); any other refusal is a bad
/// field (400).
impl From<PlanError> for ApiError {
    fn from(err: PlanError) -> Self {
        match err {
            PlanError::Invalid(err) => ApiError::Invalid(err),
            too_many @ PlanError::TooManyRuns(_) => ApiError::BatchTooLarge(too_many),
        }
    }
}

impl From<WebhookError> for ApiError {
    fn from(e: WebhookError) -> Self {
        match e {
            WebhookError::Invalid(e) => ApiError::Invalid(e),
            WebhookError::NotFound => ApiError::NotFound("no such webhook"),
            WebhookError::NoMessage => ApiError::NotFound("no such message"),
            WebhookError::Queue(e) => ApiError::Queue(e),
        }
    }
}

/// Whether a Redis error means Redis cannot serve now (as opposed to a bug
/// in what was asked of it).
fn redis_unavailable(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() || e.is_timeout() || e.is_cluster_error() {
        return true;
    }
    matches!(
        e.kind(),
        ErrorKind::ClusterConnectionNotFound
            | ErrorKind::AuthenticationFailed
            | ErrorKind::Server(
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
                    | ServerErrorKind::TryAgain
            )
    ) || e.is_unrecoverable_error()
}

impl From<QuotaError> for ApiError {
    fn from(e: QuotaError) -> Self {
        match e {
            QuotaError::Queue(inner) => ApiError::Queue(inner),
            other => ApiError::Quota(other),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let reply = self.reply();
        if reply.status == StatusCode::SERVICE_UNAVAILABLE {
            tracing::warn!(error = %self, "redis unavailable");
        } else if reply.status.is_server_error() {
            tracing::error!(error = %self, "request failed");
        }
        let body = ErrorBody { error: ErrorDetail { code: reply.code, message: reply.message, field: reply.field } };
        let mut response = (reply.status, Json(body)).into_response();
        let headers = response.headers_mut();
        if let ApiError::Quota(quota) = &self {
            if let Some(seconds) = quota.retry_after_s() {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds));
            }
            if let QuotaError::RateLimited { state, .. } = quota {
                rate_limit_headers(headers, state);
            }
            return response;
        }
        match reply.status {
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            }
            StatusCode::UNAUTHORIZED => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            _ => {}
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_json(response: Response) -> serde_json::Value {
        use http_body_util::BodyExt;
        let bytes = response.into_body().collect().await.expect("body").to_bytes();
        serde_json::from_slice(&bytes).expect("json body")
    }

    fn io_error() -> redis::RedisError {
        std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused").into()
    }

    #[test]
    fn every_error_has_its_status_and_code() {
        let cases: Vec<(ApiError, u16, &str)> = vec![
            (ValidationError::at("prompt", "too long").into(), 400, "invalid_request"),
            (ApiError::Unauthorized, 401, "unauthorized"),
            (ApiError::ReadOnlyKey, 403, "forbidden"),
            (QueueError::NotFound.into(), 404, "not_found"),
            (ApiError::NotFound("no such route"), 404, "not_found"),
            (QueueError::IdempotencyConflict.into(), 409, "idempotency_conflict"),
            (ApiError::AlreadyFinished(TaskStatus::Succeeded), 409, "already_finished"),
            (QueueError::WrongStatus("queued".into()).into(), 409, "conflict"),
            (ApiError::PayloadTooLarge(10), 413, "payload_too_large"),
            (ApiError::UnsupportedMediaType, 415, "unsupported_media_type"),
            (ApiError::MethodNotAllowed, 405, "method_not_allowed"),
            (QueueError::Redis(io_error()).into(), 503, "unavailable"),
            (QueueError::Pool("timed out".into()).into(), 503, "unavailable"),
            (ApiError::Unavailable, 503, "unavailable"),
            (HubError::TooManyStreams(3).into(), 429, "rate_limited"),
            (HubError::NotConnected.into(), 503, "unavailable"),
            (QueueError::Corrupt("bad hash".into()).into(), 500, "internal"),
            (QueueError::Fenced.into(), 500, "internal"),
            (QueueError::NoPipeline.into(), 500, "internal"),
            (ApiError::Internal("boom".into()), 500, "internal"),
            (ApiError::Quota(QuotaError::QueueFull { max_queued: 3, queued: 3 }), 429, "quota_exceeded"),
            (ApiError::Quota(QuotaError::TokensSpent { max: 10, retry_after_s: 5 }), 429, "quota_exceeded"),
            (ApiError::Quota(QuotaError::CostSpent { max_usd: 1.5, retry_after_s: 5 }), 429, "quota_exceeded"),
            (ApiError::Quota(rate_limited()), 429, "rate_limited"),
            (ApiError::TimedOut(10), 503, "timeout"),
        ];
        for (error, status, code) in cases {
            let reply = error.reply();
            assert_eq!((reply.status.as_u16(), reply.code), (status, code), "{error:?}");
        }
    }

    fn rate_limited() -> QuotaError {
        QuotaError::RateLimited { per_second: 2.0, retry_after_s: 3, state: RateState { limit: 4, remaining: 0, reset_s: 7 } }
    }

    #[tokio::test]
    async fn a_refused_submit_says_when_to_come_back() {
        let response = ApiError::from(rate_limited()).into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
        assert_eq!(header("retry-after").as_deref(), Some("3"));
        assert_eq!(header("ratelimit-limit").as_deref(), Some("4"));
        assert_eq!(header("ratelimit-remaining").as_deref(), Some("0"));
        assert_eq!(header("ratelimit-reset").as_deref(), Some("7"));
        assert_eq!(body_json(response).await["error"]["code"], "rate_limited");
    }

    #[test]
    fn a_redis_reply_error_is_a_bug_not_an_outage() {
        let wrong_type: redis::RedisError = (redis::ErrorKind::UnexpectedReturnType, "response was nil").into();
        assert_eq!(ApiError::from(QueueError::Redis(wrong_type)).reply().status, StatusCode::INTERNAL_SERVER_ERROR);
    }

    #[tokio::test]
    async fn a_validation_error_names_its_field() {
        let response = ApiError::from(ValidationError::at("sandbox.resolution", "too small")).into_response();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let body = body_json(response).await;
        assert_eq!(
            body,
            serde_json::json!({"error": {"code": "invalid_request", "message": "too small", "field": "sandbox.resolution"}})
        );
    }

    #[tokio::test]
    async fn internal_errors_say_nothing_of_their_cause() {
        let response = ApiError::from(QueueError::Corrupt("task tsk_x: spec: secret detail".into())).into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let text = body_json(response).await.to_string();
        assert!(!text.contains("secret"), "{text}");
        assert!(text.contains("\"internal\""), "{text}");
    }

    #[tokio::test]
    async fn unavailable_asks_to_retry_after_a_second() {
        let response = ApiError::from(QueueError::Redis(io_error())).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers().get(header::RETRY_AFTER).map(HeaderValue::as_bytes), Some(&b"1"[..]));
        let body = body_json(response).await;
        assert_eq!(body["error"]["code"], "unavailable");
        assert!(body["error"]["field"].is_null());
    }

    #[tokio::test]
    async fn unauthorized_names_the_scheme() {
        let response = ApiError::Unauthorized.into_response();
        assert_eq!(response.headers().get(header::WWW_AUTHENTICATE).map(HeaderValue::as_bytes), Some(&b"Bearer"[..]));
    }

    #[test]
    fn rejections_map_by_status() {
        let bad_query = ApiError::from_rejection(StatusCode::BAD_REQUEST, "Failed to deserialize query string".into());
        assert_eq!(bad_query.reply().code, "invalid_request");
        let wrong_type = ApiError::from_rejection(StatusCode::UNSUPPORTED_MEDIA_TYPE, "x".into());
        assert_eq!(wrong_type.reply().code, "unsupported_media_type");
        let odd = ApiError::from_rejection(StatusCode::INTERNAL_SERVER_ERROR, "x".into());
        assert_eq!(odd.reply().code, "internal");
    }
}
