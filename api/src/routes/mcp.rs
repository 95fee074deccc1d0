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
use axum::http::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use flotilla_client::{ApiKey, Client};
use flotilla_mcp::CallerKey;

use crate::auth::tenant_key;
use crate::error::ErrorBody;
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

/// Lets a request with a tenant's key through, with the key on it. The
/// messages and answers are MCP's (JSON-RPC 2.0 over streamable HTTP, no
/// sessions); only the key check is the API's.
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
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn with_caller_key(State(state): State<AppState>, mut request: Request<Body>, next: Next) -> Response {
    let key = match tenant_key(&state, request.headers()) {
        Ok(key) => key.to_owned(),
        Err(err) => return err.into_response(),
    };
    let Ok(key) = ApiKey::parse(&key);
    request.extensions_mut().insert(CallerKey(key));
    next.run(request).await
}
