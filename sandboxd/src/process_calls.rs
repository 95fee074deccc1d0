//! envd's unary process calls: `Process/List` (every process envd started
//! and still running, with its command and tag), `Process/SendInput` (bytes
//! to a process's standard input, kept open when its start asked, or typed
//! on its terminal), `Process/CloseStdin` and `Process/Update` (a new size
//! for a process's terminal). Processes are named by pid or by tag.

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

use super::calls::{route, unary, Refusal};
use super::host::{Entry, Host};
use super::processes::{Input, InputError};
use super::terminal::window_size;
use flotilla_e2b::envd::Pty;
use rustix::termios::Winsize;

/// A process named by pid or by tag.
#[derive(Debug, Deserialize)]
pub(super) struct Selector {
    pub pid: Option<u32>,
    pub tag: Option<String>,
}

/// `process.ProcessInput`: base64 bytes for standard input or the terminal.
#[derive(Debug, Default, Deserialize)]
pub(super) struct InputMessage {
    stdin: Option<String>,
    pty: Option<String>,
}

impl InputMessage {
    /// Its bytes, decoded, and where they go; `None` when it carries none.
    pub fn decode(&self) -> Result<Option<(Target, Vec<u8>)>, Refusal> {
        let (target, encoded) = match (&self.stdin, &self.pty) {
            (Some(_), Some(_)) => return Err(invalid("input names both stdin and pty")),
            (Some(bytes), None) => (Target::Stdin, bytes),
            (None, Some(bytes)) => (Target::Pty, bytes),
            (None, None) => return Ok(None),
        };
        let bytes = BASE64.decode(encoded).map_err(|_| invalid("input is not base64"))?;
        Ok(Some((target, bytes)))
    }
}

/// Where input goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    Stdin,
    Pty,
}

impl Target {
    pub fn input(self, bytes: &[u8]) -> Input<'_> {
        match self {
            Target::Stdin => Input::Stdin(bytes),
            Target::Pty => Input::Pty(bytes),
        }
    }
}

#[derive(Debug, Deserialize)]
struct SendInputRequest {
    process: Selector,
    #[serde(default)]
    input: InputMessage,
}

/// `process.UpdateRequest`: a process and, optionally, its terminal's new size.
#[derive(Debug, Deserialize)]
struct UpdateRequest {
    process: Selector,
    pty: Option<Pty>,
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

pub(super) fn invalid(message: impl Into<String>) -> Refusal {
    Refusal::new(StatusCode::BAD_REQUEST, "invalid_argument", message)
}

/// envd's answer to input (or a resize) that could not reach a process.
pub(super) fn input_refusal(error: InputError) -> Refusal {
    match error {
        InputError::NotFound => Refusal::new(StatusCode::NOT_FOUND, "not_found", "process not found"),
        InputError::Closed => {
            Refusal::new(StatusCode::BAD_REQUEST, "failed_precondition", "the process's standard input is not open")
        }
        InputError::NoTerminal => {
            Refusal::new(StatusCode::BAD_REQUEST, "failed_precondition", "the process does not run on a terminal")
        }
        InputError::Terminal(message) => Refusal::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message),
    }
}

fn input_refused(error: InputError) -> Response {
    input_refusal(error).into_response()
}

/// The window size an update asks for; `None` when it asks none.
fn new_size(request: &UpdateRequest) -> Result<Option<Winsize>, Refusal> {
    request.pty.map(|pty| window_size(pty.size)).transpose().map_err(|e| invalid(e.to_string()))
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
    let (sandbox, request) = match unary::<SendInputRequest>(&host, &headers, &body).await {
        Ok(call) => call,
        Err(refused) => return refused,
    };
    let pid = match pid_of(&sandbox, &request.process) {
        Ok(pid) => pid,
        Err(refused) => return refused.into_response(),
    };
    let (target, bytes) = match request.input.decode() {
        Ok(Some(decoded)) => decoded,
        Ok(None) => return Json(json!({})).into_response(),
        Err(refused) => return refused.into_response(),
    };
    match sandbox.running.write_input(pid, target.input(&bytes)).await {
        Ok(()) => Json(json!({})).into_response(),
        Err(e) => input_refused(e),
    }
}

pub(super) async fn update(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, body: Bytes) -> Response {
    let (sandbox, request) = match unary::<UpdateRequest>(&host, &headers, &body).await {
        Ok(call) => call,
        Err(refused) => return refused,
    };
    let (pid, size) = match pid_of(&sandbox, &request.process).and_then(|pid| Ok((pid, new_size(&request)?))) {
        Ok(found) => found,
        Err(refused) => return refused.into_response(),
    };
    let Some(size) = size else {
        return Json(json!({})).into_response();
    };
    match sandbox.running.resize(pid, size) {
        Ok(()) => Json(json!({})).into_response(),
        Err(e) => input_refused(e),
    }
}

pub(super) async fn close_stdin(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, body: Bytes) -> Response {
    let (sandbox, request) = match unary::<CloseStdinRequest>(&host, &headers, &body).await {
        Ok(call) => call,
        Err(refused) => return refused,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calls::parse_unary as parse;

    fn update(json: &str) -> Result<Option<(u16, u16)>, String> {
        let request: UpdateRequest = parse(&Bytes::from(json.to_owned())).map_err(|r| format!("{r:?}"))?;
        new_size(&request).map(|size| size.map(|s| (s.ws_col, s.ws_row))).map_err(|r| format!("{r:?}"))
    }

    #[test]
    fn an_update_names_a_process_and_may_size_its_terminal() {
        assert_eq!(update(r#"{"process": {"pid": 7}, "pty": {"size": {"cols": 120, "rows": 40}}}"#), Ok(Some((120, 40))));
        assert_eq!(update(r#"{"process": {"pid": 7}}"#), Ok(None), "no pty asks nothing");
        let empty = update(r#"{"process": {"pid": 7}, "pty": {"size": {"cols": 120}}}"#).expect_err("no rows");
        assert!(empty.contains("invalid_argument") && empty.contains("at least one"), "{empty}");
        let large = update(r#"{"process": {"pid": 7}, "pty": {"size": {"cols": 70000, "rows": 3}}}"#).expect_err("too wide");
        assert!(large.contains("invalid_argument"), "{large}");
        let untyped = update(r#"{"process": {"pid": "seven"}}"#).expect_err("a pid is a number");
        assert!(untyped.contains("invalid_argument"), "{untyped}");
    }

    #[test]
    fn input_goes_to_stdin_or_the_terminal_and_must_be_base64() {
        let stdin = InputMessage { stdin: Some("aGk=".into()), pty: None };
        assert_eq!(stdin.decode().ok().flatten(), Some((Target::Stdin, b"hi".to_vec())));
        let typed = InputMessage { stdin: None, pty: Some("bHMK".into()) };
        assert_eq!(typed.decode().ok().flatten(), Some((Target::Pty, b"ls\n".to_vec())));
        assert!(InputMessage::default().decode().expect("nothing is no error").is_none());
        let both = InputMessage { stdin: Some("aGk=".into()), pty: Some("aGk=".into()) };
        assert!(format!("{:?}", both.decode()).contains("invalid_argument"));
        let garbled = InputMessage { stdin: None, pty: Some("not base64!".into()) };
        assert!(format!("{:?}", garbled.decode()).contains("invalid_argument"));
    }

    #[test]
    fn input_that_cannot_land_is_refused_with_connect_codes() {
        let answer = |error| format!("{:?}", input_refusal(error));
        assert!(answer(InputError::NotFound).contains("not_found"));
        assert!(answer(InputError::NoTerminal).contains("failed_precondition"));
        assert!(answer(InputError::Closed).contains("failed_precondition"));
        assert!(answer(InputError::Terminal("gone".into())).contains("internal"));
    }
}
