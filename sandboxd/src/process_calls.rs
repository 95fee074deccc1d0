//! envd's unary process calls: `Process/List` (every process envd started
//! and still running, with its command and tag), `Process/SendInput` (bytes
//! to a process's standard input, kept open when its start asked) and
//! `Process/CloseStdin`. Processes are named by pid or by tag.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State as Shared;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::json;

use super::calls::{parse_unary as parse, route, Refusal};
use super::host::{Entry, Host};
use super::processes::InputError;

/// A process named by pid or by tag.
#[derive(Debug, Deserialize)]
pub(super) struct Selector {
    pid: Option<u32>,
    tag: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Input {
    stdin: Option<String>,
    pty: Option<String>,
}

#[derive(Debug, Deserialize)]
struct SendInputRequest {
    process: Selector,
    input: Input,
}

#[derive(Debug, Deserialize)]
struct CloseStdinRequest {
    process: Selector,
}

/// The pid `selector` names in `sandbox`, or envd's `not_found`.
pub(super) fn pid_of(sandbox: &Entry, selector: &Selector) -> Result<u32, Refusal> {
    let pid = match (&selector.pid, &selector.tag) {
        (Some(pid), _) => Some(*pid).filter(|pid| sandbox.running.contains(*pid)),
        (None, Some(tag)) => sandbox.running.by_tag(tag),
        (None, None) => None,
    };
    pid.ok_or_else(|| Refusal::new(StatusCode::NOT_FOUND, "not_found", "process not found"))
}

fn input_refused(error: InputError) -> Response {
    let refusal = match error {
        InputError::NotFound => Refusal::new(StatusCode::NOT_FOUND, "not_found", "process not found"),
        InputError::Closed => {
            Refusal::new(StatusCode::BAD_REQUEST, "failed_precondition", "the process's standard input is not open")
        }
    };
    refusal.into_response()
}

pub(super) async fn list(Shared(host): Shared<Arc<Host>>, headers: HeaderMap) -> Response {
    let sandbox = match route(&host, &headers).await {
        Ok(sandbox) => sandbox,
        Err(refused) => return refused,
    };
    let processes: Vec<_> = sandbox
        .running
        .list()
        .into_iter()
        .map(|(pid, started)| json!({"config": started.config, "pid": pid, "tag": started.tag}))
        .collect();
    Json(json!({ "processes": processes })).into_response()
}

pub(super) async fn send_input(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, body: Bytes) -> Response {
    let sandbox = match route(&host, &headers).await {
        Ok(sandbox) => sandbox,
        Err(refused) => return refused,
    };
    let request: SendInputRequest = match parse(&body) {
        Ok(request) => request,
        Err(refused) => return refused.into_response(),
    };
    let pid = match pid_of(&sandbox, &request.process) {
        Ok(pid) => pid,
        Err(refused) => return refused.into_response(),
    };
    let Some(encoded) = request.input.stdin.or(request.input.pty) else {
        return Json(json!({})).into_response();
    };
    let Ok(bytes) = BASE64.decode(encoded) else {
        return Refusal::new(StatusCode::BAD_REQUEST, "invalid_argument", "input is not base64").into_response();
    };
    match sandbox.running.write_input(pid, &bytes).await {
        Ok(()) => Json(json!({})).into_response(),
        Err(e) => input_refused(e),
    }
}

pub(super) async fn close_stdin(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, body: Bytes) -> Response {
    let sandbox = match route(&host, &headers).await {
        Ok(sandbox) => sandbox,
        Err(refused) => return refused,
    };
    let request: CloseStdinRequest = match parse(&body) {
        Ok(request) => request,
        Err(refused) => return refused.into_response(),
    };
    let pid = match pid_of(&sandbox, &request.process) {
        Ok(pid) => pid,
        Err(refused) => return refused.into_response(),
    };
    match sandbox.running.close_input(pid).await {
        Ok(()) => Json(json!({})).into_response(),
        Err(e) => input_refused(e),
    }
}
