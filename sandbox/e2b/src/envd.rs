//! envd, the daemon inside every E2B sandbox: commands through the Connect
//! RPC `process.Process/Start` (JSON messages, streamed back as envelopes:
//! `start` with the pid, `data` with base64 output, `end` with the exit),
//! and files through `GET`/`POST /files`. Every request carries the
//! sandbox's `X-Access-Token`; with header routing it also names the
//! sandbox and port (`E2b-Sandbox-Id`, `E2b-Sandbox-Port`).
//!
//! A command's `Connect-Timeout-Ms` makes envd kill it at the deadline. The
//! client also stops reading a little after it and sends `SIGKILL` itself,
//! so a sandbox that stops answering cannot hang a caller. A `502` from the
//! edge in front of envd means the sandbox is gone.

use std::collections::HashMap;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{RequestBuilder, StatusCode, Url};
use serde::{Deserialize, Serialize};

use super::api::describe_send_error;
use super::connect::{self, ConnectError, Decoder, Frame, FLAG_MESSAGE};
use flotilla_sandbox::http::excerpt;

/// The port envd listens on inside a sandbox.
pub const ENVD_PORT: u16 = 49983;
/// The header carrying the sandbox's envd access token.
pub const ACCESS_TOKEN_HEADER: &str = "x-access-token";
/// The headers that route a request to a sandbox and port behind one host.
pub const SANDBOX_ID_HEADER: &str = "e2b-sandbox-id";
pub const SANDBOX_PORT_HEADER: &str = "e2b-sandbox-port";
/// How often envd should send a keepalive on an idle stream, in seconds.
const KEEPALIVE_HEADER: &str = "keepalive-ping-interval";
const KEEPALIVE_SECONDS: &str = "50";
/// The RPC paths used.
pub const START_PATH: &str = "/process.Process/Start";
pub const SIGNAL_PATH: &str = "/process.Process/SendSignal";
pub const FILES_PATH: &str = "/files";
/// How long after a command's deadline the client gives up on envd.
const DEADLINE_GRACE: Duration = Duration::from_secs(3);
/// How long the kill sent after a missed deadline may take.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(5);
/// The most output kept from one stream of a command; the rest is dropped.
const MAX_OUTPUT: usize = 16 * 1024 * 1024;

/// `process.Process/Start`'s request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StartRequest {
    pub process: ProcessConfig,
    #[serde(default)]
    pub stdin: bool,
    /// A name to find the process by later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Run on a pseudo-terminal of this size instead of pipes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<Pty>,
}

/// A pseudo-terminal a process runs on (`process.PTY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pty {
    pub size: PtySize,
}

/// A terminal's size in character cells; proto3 JSON leaves out zeros.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PtySize {
    #[serde(default)]
    pub cols: u32,
    #[serde(default)]
    pub rows: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcessConfig {
    pub cmd: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub envs: HashMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

/// One message of `Start`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StartResponse {
    pub event: ProcessEvent,
}

/// Exactly one of the fields is set.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProcessEvent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<StartEvent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<DataEvent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<EndEvent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StartEvent {
    #[serde(default)]
    pub pid: u32,
}

/// Output bytes, base64 as proto3 JSON writes bytes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DataEvent {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// What a process on a pseudo-terminal printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<String>,
}

/// How the process ended; proto3 JSON leaves out zero values.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndEvent {
    #[serde(default)]
    pub exit_code: i32,
    #[serde(default)]
    pub exited: bool,
    #[serde(default)]
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `process.Process/SendSignal`'s request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SignalRequest {
    pub process: ProcessSelector,
    pub signal: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProcessSelector {
    pub pid: u32,
}

/// What a finished command printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcessOutput {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Whether a signal, not an exit, ended the process.
    pub signaled: bool,
}

/// Why an envd call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EnvdError {
    #[error("the sandbox is gone: {0}")]
    Gone(String),
    #[error("envd refused the access token ({status}): {message}")]
    Unauthorized { status: u16, message: String },
    #[error("the command ran past its deadline")]
    Timeout,
    #[error("not found: {0}")]
    NotFound(String),
    #[error("envd rejected the request ({status}): {message}")]
    Rejected { status: u16, message: String },
    #[error("envd failed the call ({code}): {message}")]
    Rpc { code: String, message: String },
    #[error("envd is unavailable: {0}")]
    Unavailable(String),
    #[error("envd answered something unexpected: {0}")]
    Malformed(String),
}

/// Where one sandbox's envd is and how to authenticate to it.
#[derive(Debug, Clone)]
pub(crate) struct EnvdTarget {
    /// The base URL: the sandbox's own host, or the shared routing host.
    pub base: Url,
    /// The sandbox id, when requests are routed by header.
    pub route_to: Option<String>,
    /// The access token, marked sensitive.
    pub access_token: Option<HeaderValue>,
}

/// A client for envd in any number of sandboxes.
#[derive(Debug, Clone)]
pub(crate) struct Envd {
    client: reqwest::Client,
    /// The Linux user commands and files act as.
    user: String,
}

impl Envd {
    pub fn new(client: reqwest::Client, user: &str) -> Self {
        Self { client, user: user.to_owned() }
    }

    /// Starts `command` with `/bin/bash -l -c` as the Desktop SDK does and
    /// returns the stream of its process events; with a `deadline`, envd
    /// kills the process then, and the request gives up a little after.
    async fn start(
        &self,
        target: &EnvdTarget,
        command: &str,
        deadline: Option<Duration>,
    ) -> Result<reqwest::Response, EnvdError> {
        let request = StartRequest {
            process: ProcessConfig {
                cmd: "/bin/bash".into(),
                args: vec!["-l".into(), "-c".into(), command.into()],
                envs: HashMap::new(),
                cwd: None,
            },
            stdin: false,
            tag: None,
            pty: None,
        };
        let payload = serde_json::to_vec(&request).map_err(|e| EnvdError::Malformed(e.to_string()))?;
        let mut builder = self
            .post(target, START_PATH)?
            .header(CONTENT_TYPE, connect::STREAMING_JSON)
            .header(KEEPALIVE_HEADER, KEEPALIVE_SECONDS)
            .header(AUTHORIZATION, self.basic_user());
        if let Some(deadline) = deadline {
            builder = builder
                .header(connect::TIMEOUT_HEADER, deadline.as_millis().max(1).to_string())
                .timeout(deadline + DEADLINE_GRACE * 2);
        }
        let response = builder
            .body(connect::envelope(FLAG_MESSAGE, &payload))
            .send()
            .await
            .map_err(|e| EnvdError::Unavailable(describe_send_error(&e)))?;
        check_status(response).await
    }

    /// Runs `command` with `/bin/bash -l -c` as the Desktop SDK does, and
    /// collects its output; envd kills it after `timeout`.
    pub async fn run(&self, target: &EnvdTarget, command: &str, timeout: Duration) -> Result<ProcessOutput, EnvdError> {
        let response = self.start(target, command, Some(timeout)).await?;
        let started = std::time::Instant::now();
        let mut reader = ProcessReader::default();
        let read = tokio::time::timeout(timeout + DEADLINE_GRACE, reader.read(response)).await;
        match read {
            // envd may end a process killed at its deadline with a plain
            // `end` event rather than `deadline_exceeded`.
            Ok(Ok(output)) if output.signaled && started.elapsed() >= timeout => Err(EnvdError::Timeout),
            Ok(result) => result,
            Err(_) => {
                if let Some(pid) = reader.pid {
                    self.kill(target, pid).await;
                }
                Err(EnvdError::Timeout)
            }
        }
    }

    /// Starts `command` with `/bin/bash -l -c` as a background process with
    /// no deadline (the SDK's `background: true, timeoutMs: 0`) and returns
    /// its pid once envd reports it started; the process keeps running
    /// after the stream is let go, until it ends or is killed.
    pub async fn spawn(&self, target: &EnvdTarget, command: &str) -> Result<u32, EnvdError> {
        let mut frames = Frames::of(self.start(target, command, None).await?);
        while let Some(frame) = frames.next().await? {
            match frame {
                Frame::Message(payload) => {
                    if let Some(start) = process_event(&payload)?.start {
                        return Ok(start.pid);
                    }
                }
                Frame::End(payload) => {
                    let error = connect::parse_end(&payload).error;
                    return Err(
                        error.map_or_else(|| EnvdError::Malformed("the process ended before it started".into()), rpc_error)
                    );
                }
            }
        }
        Err(EnvdError::Unavailable("the command's stream ended before the process started".into()))
    }

    /// Sends `SIGKILL` to process `pid`; a failure is only logged, since the
    /// process may be gone already.
    pub async fn kill(&self, target: &EnvdTarget, pid: u32) {
        let body = SignalRequest { process: ProcessSelector { pid }, signal: "SIGNAL_SIGKILL".into() };
        let sent = match self.post(target, SIGNAL_PATH) {
            Ok(request) => request
                .header(connect::TIMEOUT_HEADER, SIGNAL_TIMEOUT.as_millis().to_string())
                .header(AUTHORIZATION, self.basic_user())
                .timeout(SIGNAL_TIMEOUT)
                .json(&body)
                .send()
                .await
                .map(|r| r.status()),
            Err(_) => return,
        };
        match sent {
            Ok(status) if status.is_success() => {}
            Ok(status) => tracing::debug!(pid, status = status.as_u16(), "envd did not kill a late command"),
            Err(error) => tracing::debug!(pid, error = describe_send_error(&error), "cannot ask envd to kill a late command"),
        }
    }

    /// Reads a file; relative paths start at the user's home.
    pub async fn read_file(&self, target: &EnvdTarget, path: &str) -> Result<Vec<u8>, EnvdError> {
        let url = self.files_url(target, path);
        let response = self
            .client
            .get(url)
            .headers(self.headers(target)?)
            .send()
            .await
            .map_err(|e| EnvdError::Unavailable(describe_send_error(&e)))?;
        let response = check_status(response).await?;
        let bytes = response.bytes().await.map_err(|e| EnvdError::Unavailable(describe_send_error(&e)))?;
        Ok(bytes.to_vec())
    }

    /// Writes a file as a raw body (envd 0.5.7 and later), creating parents.
    pub async fn write_file(&self, target: &EnvdTarget, path: &str, bytes: &[u8]) -> Result<(), EnvdError> {
        let url = self.files_url(target, path);
        let response = self
            .client
            .post(url)
            .headers(self.headers(target)?)
            .header(CONTENT_TYPE, "application/octet-stream")
            .body(bytes.to_vec())
            .send()
            .await
            .map_err(|e| EnvdError::Unavailable(describe_send_error(&e)))?;
        check_status(response).await?;
        Ok(())
    }

    fn files_url(&self, target: &EnvdTarget, path: &str) -> Url {
        let mut url = target.base.clone();
        url.set_path(FILES_PATH);
        url.query_pairs_mut().append_pair("path", path).append_pair("username", &self.user);
        url
    }

    pub(crate) fn post(&self, target: &EnvdTarget, path: &str) -> Result<RequestBuilder, EnvdError> {
        let mut url = target.base.clone();
        url.set_path(path);
        Ok(self
            .client
            .post(url)
            .headers(self.headers(target)?)
            .header(connect::PROTOCOL_VERSION_HEADER, connect::PROTOCOL_VERSION))
    }

    /// The access token and routing headers of `target`.
    fn headers(&self, target: &EnvdTarget) -> Result<HeaderMap, EnvdError> {
        let mut headers = HeaderMap::new();
        if let Some(token) = &target.access_token {
            headers.insert(HeaderName::from_static(ACCESS_TOKEN_HEADER), token.clone());
        }
        if let Some(id) = &target.route_to {
            let id = HeaderValue::from_str(id).map_err(|_| EnvdError::Malformed("the sandbox id cannot be a header".into()))?;
            headers.insert(HeaderName::from_static(SANDBOX_ID_HEADER), id);
            headers.insert(HeaderName::from_static(SANDBOX_PORT_HEADER), HeaderValue::from(ENVD_PORT));
        }
        Ok(headers)
    }

    /// `Authorization: Basic base64("user:")`, which picks the Linux user.
    fn basic_user(&self) -> String {
        format!("Basic {}", BASE64.encode(format!("{}:", self.user)))
    }
}

/// A `2xx` response, or the error its status and body mean.
async fn check_status(response: reqwest::Response) -> Result<reqwest::Response, EnvdError> {
    if response.status().is_success() {
        return Ok(response);
    }
    Err(status_error(response).await)
}

/// The error a response's non-`2xx` status and body mean.
pub(crate) async fn status_error(response: reqwest::Response) -> EnvdError {
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    let message = error_message(&text);
    match status {
        StatusCode::BAD_GATEWAY => EnvdError::Gone(message),
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => EnvdError::Unauthorized { status: status.as_u16(), message },
        StatusCode::NOT_FOUND => EnvdError::NotFound(message),
        s if s.is_client_error() => EnvdError::Rejected { status: s.as_u16(), message },
        s => EnvdError::Unavailable(format!("{s}: {message}")),
    }
}

/// The `message` of envd's and the edge's JSON errors, else the body's start.
fn error_message(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
        .unwrap_or_else(|| excerpt(body))
}

/// The state of one `Start` stream as it is read.
/// The Connect frames of a streamed answer, as they arrive.
struct Frames {
    decoder: Decoder,
    body: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
}

impl Frames {
    fn of(response: reqwest::Response) -> Self {
        Self { decoder: Decoder::default(), body: response.bytes_stream().boxed() }
    }

    /// The next whole frame; `None` once the stream has ended cleanly.
    async fn next(&mut self) -> Result<Option<Frame>, EnvdError> {
        loop {
            if let Some(frame) = self.decoder.next_frame().map_err(|e| EnvdError::Malformed(e.to_string()))? {
                return Ok(Some(frame));
            }
            match self.body.next().await {
                Some(chunk) => {
                    let chunk = chunk.map_err(|e| {
                        EnvdError::Unavailable(format!("the command's stream broke: {}", describe_send_error(&e)))
                    })?;
                    self.decoder.push(&chunk);
                }
                None => {
                    self.decoder.finish().map_err(|e| EnvdError::Malformed(e.to_string()))?;
                    return Ok(None);
                }
            }
        }
    }
}

/// One process event of `process.Process/Start`'s stream.
fn process_event(payload: &[u8]) -> Result<ProcessEvent, EnvdError> {
    let message: StartResponse =
        serde_json::from_slice(payload).map_err(|e| EnvdError::Malformed(format!("a process event: {e}")))?;
    Ok(message.event)
}

#[derive(Debug, Default)]
struct ProcessReader {
    pid: Option<u32>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    end: Option<EndEvent>,
}

impl ProcessReader {
    async fn read(&mut self, response: reqwest::Response) -> Result<ProcessOutput, EnvdError> {
        let mut frames = Frames::of(response);
        while let Some(frame) = frames.next().await? {
            match frame {
                Frame::Message(payload) => self.take_event(&payload)?,
                Frame::End(payload) => return self.finish(connect::parse_end(&payload).error),
            }
        }
        Err(EnvdError::Unavailable("the command's stream ended without an end-of-stream message".into()))
    }

    fn take_event(&mut self, payload: &[u8]) -> Result<(), EnvdError> {
        let event = process_event(payload)?;
        if let Some(start) = event.start {
            self.pid = Some(start.pid);
        }
        if let Some(data) = event.data {
            append_base64(&mut self.stdout, data.stdout.as_deref())?;
            append_base64(&mut self.stderr, data.stderr.as_deref())?;
        }
        if let Some(end) = event.end {
            self.end = Some(end);
        }
        Ok(())
    }

    fn finish(&mut self, error: Option<ConnectError>) -> Result<ProcessOutput, EnvdError> {
        match (error, self.end.take()) {
            (Some(error), _) if error.code == "deadline_exceeded" => Err(EnvdError::Timeout),
            (Some(error), _) => Err(rpc_error(error)),
            (None, None) => Err(EnvdError::Malformed("the command's stream ended without an end event".into())),
            (None, Some(end)) => Ok(ProcessOutput {
                exit_code: exit_code(&end),
                signaled: !end.exited && end.status.starts_with("signal: "),
                stdout: std::mem::take(&mut self.stdout),
                stderr: std::mem::take(&mut self.stderr),
            }),
        }
    }
}

/// A Connect error as an envd error: `unavailable` means the sandbox went
/// away mid-call; `unauthenticated`, `permission_denied` are auth failures.
fn rpc_error(error: ConnectError) -> EnvdError {
    match error.code.as_str() {
        "unavailable" => EnvdError::Gone(error.message),
        "unauthenticated" | "permission_denied" => EnvdError::Unauthorized { status: 401, message: error.message },
        _ => EnvdError::Rpc { code: error.code, message: error.message },
    }
}

fn append_base64(buffer: &mut Vec<u8>, data: Option<&str>) -> Result<(), EnvdError> {
    let Some(data) = data else { return Ok(()) };
    let bytes = BASE64.decode(data).map_err(|e| EnvdError::Malformed(format!("process output is not base64: {e}")))?;
    let room = MAX_OUTPUT.saturating_sub(buffer.len());
    buffer.extend_from_slice(&bytes[..bytes.len().min(room)]);
    Ok(())
}

/// The exit status, with 128 + the signal number for a process a signal
/// ended (envd reports those as exit code -1 and `signal: <name>`).
fn exit_code(end: &EndEvent) -> i32 {
    if end.exited || (end.exit_code >= 0 && !end.status.starts_with("signal: ")) {
        return end.exit_code;
    }
    let signal = end.status.strip_prefix("signal: ").and_then(signal_number);
    signal.map_or(end.exit_code, |n| 128 + n)
}

/// The number of a signal by the name Go's `os.ProcessState` prints.
fn signal_number(name: &str) -> Option<i32> {
    let number = match name {
        "hangup" => 1,
        "interrupt" => 2,
        "quit" => 3,
        "aborted" => 6,
        "killed" => 9,
        "segmentation fault" => 11,
        "broken pipe" => 13,
        "alarm clock" => 14,
        "terminated" => 15,
        _ => return None,
    };
    Some(number)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(exit_code: i32, exited: bool, status: &str) -> EndEvent {
        EndEvent { exit_code, exited, status: status.into(), error: None }
    }

    #[test]
    fn exit_codes_follow_the_shell_convention() {
        assert_eq!(exit_code(&end(0, true, "exit status 0")), 0);
        assert_eq!(exit_code(&end(7, true, "exit status 7")), 7);
        assert_eq!(exit_code(&EndEvent::default()), 0);
        assert_eq!(exit_code(&end(-1, false, "signal: killed")), 137);
        assert_eq!(exit_code(&end(-1, false, "signal: interrupt")), 130);
        assert_eq!(exit_code(&end(-1, false, "signal: user defined signal 1")), -1);
    }

    #[test]
    fn events_fill_the_output() {
        let mut reader = ProcessReader::default();
        reader.take_event(br#"{"event": {"start": {"pid": 42}}}"#).expect("start");
        reader.take_event(br#"{"event": {"data": {"stdout": "aGk="}}}"#).expect("stdout");
        reader.take_event(br#"{"event": {"data": {"stderr": "bm8="}}}"#).expect("stderr");
        reader.take_event(br#"{"event": {"keepalive": {}}}"#).expect("keepalive");
        reader.take_event(br#"{"event": {"end": {"exitCode": 3, "exited": true, "status": "exit status 3"}}}"#).expect("end");
        assert_eq!(reader.pid, Some(42));
        let output = reader.finish(None).expect("output");
        assert_eq!(output, ProcessOutput { exit_code: 3, stdout: b"hi".to_vec(), stderr: b"no".to_vec(), signaled: false });
    }

    #[test]
    fn stream_errors_are_classified() {
        let deadline = ConnectError { code: "deadline_exceeded".into(), message: String::new() };
        assert_eq!(ProcessReader::default().finish(Some(deadline)), Err(EnvdError::Timeout));
        let gone = ConnectError { code: "unavailable".into(), message: "sandbox timeout".into() };
        assert!(matches!(ProcessReader::default().finish(Some(gone)), Err(EnvdError::Gone(_))));
        assert!(matches!(ProcessReader::default().finish(None), Err(EnvdError::Malformed(_))));
        let mut reader = ProcessReader::default();
        assert!(reader.take_event(br#"{"event": {"data": {"stdout": "***"}}}"#).is_err());
    }

    #[test]
    fn the_user_travels_as_basic_auth() {
        let envd = Envd::new(reqwest::Client::new(), "user");
        assert_eq!(envd.basic_user(), "Basic dXNlcjo=");
        let target =
            EnvdTarget { base: Url::parse("http://127.0.0.1:9").expect("url"), route_to: Some("i1".into()), access_token: None };
        assert_eq!(envd.files_url(&target, "a b/c.txt").as_str(), "http://127.0.0.1:9/files?path=a+b%2Fc.txt&username=user");
        let headers = envd.headers(&target).expect("headers");
        assert_eq!(headers[SANDBOX_ID_HEADER], "i1");
        assert_eq!(headers[SANDBOX_PORT_HEADER], "49983");
    }
}
