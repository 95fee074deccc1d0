//! What every envd call does first: find the live sandbox the routing
//! headers name and check its access token (the edge's and envd's refusals
//! otherwise), and how a unary call reads its body and says no.

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use flotilla_e2b::envd::{ACCESS_TOKEN_HEADER, ENVD_PORT};
use serde_json::json;

use subtle::ConstantTimeEq;

use super::edge;
use super::host::{Entry, Host};
use super::signed::FileAccess;

/// A JSON error with `status` and a numeric code, as E2B's control plane,
/// envd and the edge send.
pub(super) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"code": status.as_u16(), "message": message.into()}))).into_response()
}

/// The live sandbox the routing headers name, with a valid access token;
/// the edge's or envd's refusal otherwise.
pub(super) async fn route(host: &Host, headers: &HeaderMap) -> Result<Entry, Response> {
    let sandbox = find(host, headers).await?;
    if !token_matches(headers, &sandbox) {
        return Err(unauthorized());
    }
    Ok(sandbox)
}

/// The live sandbox a `/files` request names, with a valid access token
/// or a URL signed with it for this very access ([`signed`](super::signed)).
pub(super) async fn route_file(host: &Host, headers: &HeaderMap, access: &FileAccess<'_>) -> Result<Entry, Response> {
    let sandbox = find(host, headers).await?;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    if !token_matches(headers, &sandbox) && !access.signed_with(&sandbox.access_token, now) {
        return Err(unauthorized());
    }
    Ok(sandbox)
}

fn token_matches(headers: &HeaderMap, sandbox: &Entry) -> bool {
    let given = headers.get(ACCESS_TOKEN_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
    given.ct_eq(sandbox.access_token.as_bytes()).into()
}

fn unauthorized() -> Response {
    error(StatusCode::UNAUTHORIZED, "unauthorized access, please provide a valid access token")
}

/// The live sandbox the routing headers name, on envd's port.
async fn find(host: &Host, headers: &HeaderMap) -> Result<Entry, Response> {
    let to = edge::destination(|name| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned));
    let id = to.as_ref().map(|d| d.id.clone()).unwrap_or_default();
    let Some(sandbox) = host.live(&id).await else {
        let body = json!({"sandboxId": id, "message": "The sandbox was not found", "code": 502});
        return Err((StatusCode::BAD_GATEWAY, Json(body)).into_response());
    };
    if to.is_none_or(|d| d.port != ENVD_PORT) {
        let body = json!({"sandboxId": id, "message": "The sandbox is running but port is not open", "code": 502});
        return Err((StatusCode::BAD_GATEWAY, Json(body)).into_response());
    }
    Ok(sandbox)
}

/// Why a unary call was refused: its HTTP status, Connect code and message.
#[derive(Debug)]
pub(super) struct Refusal {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl Refusal {
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        let code = match code {
            "not_found" => "not_found",
            "already_exists" => "already_exists",
            "invalid_argument" => "invalid_argument",
            "failed_precondition" => "failed_precondition",
            "resource_exhausted" => "resource_exhausted",
            _ => "internal",
        };
        Self { status, code, message: message.into() }
    }

    /// Its Connect code and message, for a streaming call's end.
    pub fn parts(self) -> (&'static str, String) {
        (self.code, self.message)
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (self.status, Json(json!({"code": self.code, "message": self.message}))).into_response()
    }
}

/// A unary call's JSON body of type `T`.
/// A unary call's sandbox, checked as [`route`] checks it, and its parsed
/// request; or the answer that refuses the call.
pub(super) async fn unary<T: serde::de::DeserializeOwned>(
    host: &Host,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<(Entry, T), Response> {
    let sandbox = route(host, headers).await?;
    let request = parse_unary(body).map_err(IntoResponse::into_response)?;
    Ok((sandbox, request))
}

pub(super) fn parse_unary<T: serde::de::DeserializeOwned>(body: &Bytes) -> Result<T, Refusal> {
    serde_json::from_slice(body)
        .map_err(|e| Refusal::new(StatusCode::BAD_REQUEST, "invalid_argument", format!("invalid request: {e}")))
}
