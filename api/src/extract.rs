//! Extractors that turn every malformed request into an [`ApiError`].
//!
//! axum's own extractors answer bad input with plain-text bodies; these wrap
//! them so a bad path, query or body gets the same JSON error as everything
//! else, with the offending field named where one can be.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use flotilla_types::ids::is_any_id;
use flotilla_types::task::parse_json;
use flotilla_types::{TaskId, ValidationError};
use futures::StreamExt;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::state::AppState;

/// A JSON request body, parsed strictly (unknown fields are refused by the
/// target type) with the offending field named on failure.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        Self::read(request, state.config().api.body_limit).await
    }
}

/// How much of an oversized body is still read (and thrown away) so the
/// client, which is still sending, gets the 413 instead of a reset
/// connection. Past this the connection is dropped.
const DRAIN_AT_MOST: usize = 64 * 1024 * 1024;

impl<T: DeserializeOwned> JsonBody<T> {
    /// Reads and parses a JSON body of at most `limit` bytes.
    pub async fn read(request: Request, limit: usize) -> Result<Self, ApiError> {
        let bytes = json_bytes(request, limit).await?;
        // Every body is an object; serde would also read a struct from an array.
        if bytes.iter().find(|b| !b.is_ascii_whitespace()).is_some_and(|b| *b != b'{') {
            return Err(ApiError::Invalid(ValidationError::new("the body must be a JSON object")));
        }
        parse_json(&bytes).map(JsonBody).map_err(ApiError::Invalid)
    }
}

/// The bytes of a body that says it is JSON and fits in `limit` (415 and
/// 413 otherwise), not yet parsed.
pub async fn json_bytes(request: Request, limit: usize) -> Result<Bytes, ApiError> {
    if !is_json(request.headers()) {
        return Err(ApiError::UnsupportedMediaType);
    }
    read_limited(request.into_body(), limit).await
}

/// The whole body if it fits in `limit`; otherwise 413, after draining what
/// the client still sends (up to [`DRAIN_AT_MOST`]).
async fn read_limited(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ApiError::Invalid(ValidationError::new(format!("the body could not be read: {e}"))))?;
        if bytes.len() + chunk.len() > limit {
            let mut drained = 0;
            while let Some(Ok(rest)) = stream.next().await {
                drained += rest.len();
                if drained > DRAIN_AT_MOST {
                    break;
                }
            }
            return Err(ApiError::PayloadTooLarge(limit));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(bytes))
}

/// Whether the request says its body is JSON (`application/json`, with any
/// parameters, or an `application/…+json` type).
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let mime = value.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

/// The first segment of a path with parameters (`{id}`), parsed by `parse`.
/// A well-formed id of another kind (a task's `tsk_…` in a webhook's path)
/// names nothing here: a 404 saying `missing`. Anything else that does not
/// parse is a 400 naming the field.
pub async fn path_id<T, S: Send + Sync>(
    parts: &mut Parts,
    state: &S,
    parse: fn(&str) -> Result<T, ValidationError>,
    missing: &'static str,
) -> Result<T, ApiError> {
    let Path(raw) = Path::<Vec<String>>::from_request_parts(parts, state)
        .await
        .map_err(|rejection| ApiError::Invalid(ValidationError::at("id", rejection.body_text())))?;
    let first = raw.first().map(String::as_str).unwrap_or_default();
    parse(first).map_err(|e| path_error(first, e.under("id"), missing))
}

/// The answer to a path segment `raw` that does not parse: 404 `missing`
/// for a well-formed id of another kind, else 400 with `error`.
pub fn path_error(raw: &str, error: ValidationError, missing: &'static str) -> ApiError {
    if is_any_id(raw) {
        ApiError::NotFound(missing)
    } else {
        ApiError::Invalid(error)
    }
}

/// The `{id}` segment of a path, as a task id.
#[derive(Debug, Clone)]
pub struct TaskIdPath(pub TaskId);

impl<S: Send + Sync> FromRequestParts<S> for TaskIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let id = path_id(parts, state, TaskId::parse, "no such task").await?;
        tracing::Span::current().record("task_id", id.as_str());
        Ok(TaskIdPath(id))
    }
}

/// Query parameters; an unknown or malformed one is a 400.
#[derive(Debug)]
pub struct QueryParams<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Query(params) = Query::<T>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::from_rejection(rejection.status(), rejection.body_text()))?;
        Ok(QueryParams(params))
    }
}

/// The `limit` query parameter: `default` when absent, else 1 to `max`.
pub fn parse_limit(raw: Option<&str>, default: usize, max: usize) -> Result<usize, ValidationError> {
    let Some(raw) = raw else {
        return Ok(default);
    };
    match raw.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(ValidationError::at("limit", format!("limit must be a whole number from 1 to {max}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(content_type: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_str(content_type).expect("header"));
        headers
    }

    #[test]
    fn json_content_types_are_recognised() {
        assert!(is_json(&headers("application/json")));
        assert!(is_json(&headers("Application/JSON; charset=utf-8")));
        assert!(is_json(&headers("application/merge-patch+json")));
        assert!(!is_json(&headers("text/plain")));
        assert!(!is_json(&headers("application/x-www-form-urlencoded")));
        assert!(!is_json(&HeaderMap::new()));
    }

    #[test]
    fn limits_default_and_stay_in_range() {
        assert_eq!(parse_limit(None, 50, 500), Ok(50));
        assert_eq!(parse_limit(Some("500"), 50, 500), Ok(500));
        for bad in ["0", "501", "-1", "ten", "1.5", ""] {
            let err = parse_limit(Some(bad), 50, 500).expect_err("refused");
            assert_eq!(err.field.as_deref(), Some("limit"), "{bad}");
        }
    }
}
