//! `/mcp`: the MCP server over streamable HTTP (`flotilla-mcp`), for MCP
//! clients that reach the fleet over the network.
//!
//! A request must carry a tenant's key (of any scope), checked here as
//! every route checks it: without one it gets the API's 401. The key is
//! then handed to the MCP service, whose tools call this API's own routes
//! with it over loopback, so each call is scoped, limited and refused
//! exactly as the same call made directly (a read-only key may read, a
//! task of another tenant is not found).

use axum::body::Body;
use axum::extract::State;
use axum::http::header::ACCEPT;
use axum::http::{HeaderValue, Request};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use flotilla_client::{ApiKey, Client};
use flotilla_mcp::CallerKey;
use flotilla_types::ValidationError;

use crate::auth::tenant_key;
use crate::error::{ApiError, ErrorBody};
use crate::extract::json_bytes;
use crate::routes::views::listen_base;
use crate::state::AppState;

/// Where MCP clients connect.
pub const PATH: &str = "/mcp";

/// The `/mcp` route, calling the API where it listens.
pub fn routes(state: &AppState) -> Router<AppState> {
    let client = match Client::new(&listen_base(state.listen_addr()), None) {
        Ok(client) => client,
        Err(err) => {
            tracing::error!(error = %err, "cannot call the API over loopback: /mcp is not served");
            return Router::new();
        }
    };
    let limit = state.config().api.batch_body_limit;
    let service = flotilla_mcp::http_service(client, limit, state.shutdown().child_token());
    Router::new().route_service(PATH, service).route_layer(axum::middleware::from_fn_with_state(state.clone(), with_caller_key))
}

/// Lets a request with a tenant's key and one well-formed message through,
/// with the key on it. The messages and answers are MCP's (JSON-RPC 2.0
/// over streamable HTTP, no sessions); the key check and the envelope's
/// (`flotilla_mcp::message_schema`, laid over the document) are the API's.
#[utoipa::path(
    post,
    path = "/mcp",
    tag = "mcp",
    request_body(content = Object, content_type = "application/json",
        description = "One JSON-RPC message of the Model Context Protocol (tools: submit_task, submit_batch, get_task, \
                       list_tasks, wait_for_task, cancel_task, approve_task, deny_task, take_over, get_screenshot, \
                       get_usage; resources flotilla://tasks/{id} and flotilla://tasks/{id}/screenshots/{seq})"),
    responses(
        (status = 200, description = "The JSON-RPC answer: JSON, or an event stream carrying the call's progress \
                                      notifications before its answer (send `Accept: application/json, text/event-stream`)"),
        (status = 202, description = "A notification was taken"),
        (status = 400, description = "The body is not one JSON-RPC message of the envelope stated", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 406, description = "`Accept` names neither `application/json` nor `text/event-stream` (send both, \
                                      or none)"),
        (status = 413, description = "The body is over the batch body limit", body = ErrorBody),
        (status = 415, description = "The body is not JSON", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn with_caller_key(State(state): State<AppState>, request: Request<Body>, next: Next) -> Response {
    match checked(&state, request).await {
        Ok(request) => next.run(request).await,
        Err(err) => err.into_response(),
    }
}

/// The request as the MCP service takes it: its key checked and put on it,
/// its body one message of the documented envelope, and an `Accept` that
/// names no type (absent, or `*/*`: any type will do) made the two types
/// the service answers in.
async fn checked(state: &AppState, request: Request<Body>) -> Result<Request<Body>, ApiError> {
    let key = tenant_key(state, request.headers())?.to_owned();
    let Ok(key) = ApiKey::parse(&key);
    let (mut parts, body) = request.into_parts();
    let any_type = parts.headers.get(ACCEPT).and_then(|v| v.to_str().ok()).is_none_or(|v| v.trim() == "*/*");
    if any_type {
        parts.headers.insert(ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
    }
    let limit = state.config().api.batch_body_limit;
    let bytes = json_bytes(Request::from_parts(parts.clone(), body), limit).await?;
    flotilla_mcp::check_message(&bytes).map_err(|message| ApiError::Invalid(ValidationError::new(message)))?;
    let mut request = Request::from_parts(parts, Body::from(bytes));
    request.extensions_mut().insert(CallerKey(key));
    Ok(request)
}
