//! The host's envd, behind its [edge](super::edge): the sandbox is named by
//! `E2b-Sandbox-Id` and `E2b-Sandbox-Port` or by a `Host` of
//! `49983-<id>.<domain>` (unknown, paused or dead sandboxes get the edge's
//! `502`), and `X-Access-Token` must match ([`calls`](super::calls)).
//! `process.Process/Start` runs the requested program inside the sandbox's
//! local desktop (in its working directory, with the create's variables and
//! then the call's) and streams `start`, `data` and `end` events as Connect
//! envelopes; `Connect-Timeout-Ms` kills the process at its deadline, and
//! the stream then ends with `deadline_exceeded`. With `pty` the program
//! runs on a [terminal](super::terminal) and its output streams as `pty`
//! data. `Connect` is a further
//! reader of a running process's stream ([`process_connect`](super::process_connect)). `SendSignal` kills a
//! process it started and everything that process started. The unary
//! process calls and the filesystem service are
//! [`process_calls`](super::process_calls) and
//! [`filesystem`](super::filesystem), streamed input
//! [`process_input`](super::process_input), directory watching
//! [`watch_calls`](super::watch_calls). `/files` reads and writes through the sandbox,
//! for the access token's header or a URL signed with it ([`signed`](super::signed));
//! uploads come raw (`application/octet-stream` with `path`) or as
//! `multipart/form-data` (each part's filename its destination), as envd
//! takes them.

use std::convert::Infallible;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Query, State as Shared};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use futures::StreamExt as _;
use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::{broadcast, mpsc};

use super::calls::{error, route, route_file};
use super::host::{Entry, Host};
use super::processes::{Processes, Streams};
use super::signed::FileAccess;
use super::stream::{self, event_frame, stream_error, streaming_response};
use super::terminal::{self, window_size, Terminal};
use super::{filesystem, process_calls, process_connect, process_input, watch_calls};
use flotilla_desktop::process::{self, SandboxChild, Signal};
use flotilla_e2b::connect::{self, ConnectError, EndOfStream, FLAG_END_STREAM};
use flotilla_e2b::envd::{
    DataEvent, EndEvent, ProcessEvent, SignalRequest, StartEvent, StartRequest, FILES_PATH, SIGNAL_PATH, START_PATH,
};
use flotilla_e2b::DEFAULT_USER;
use flotilla_sandbox::{SandboxError, SandboxProvider};
use rustix::termios::Winsize;

/// The largest request body (a file upload).
const MAX_BODY: usize = 64 * 1024 * 1024;
/// How long output may still arrive after a process exits.
const OUTPUT_GRACE: Duration = Duration::from_millis(100);
/// How many envelopes may wait for a slow reader.
const STREAM_BUFFER: usize = 64;
/// How many envelopes a connected reader may fall behind before it skips some.
const WATCH_BUFFER: usize = 256;

/// envd's routes, and Flotilla's desktop extension with `extension`.
pub(super) fn router(host: Arc<Host>, extension: bool) -> Router {
    let extension = if extension { super::extension::routes() } else { Router::new() };
    Router::new()
        .route(START_PATH, post(start_process))
        .route(SIGNAL_PATH, post(send_signal))
        .route("/process.Process/Connect", post(process_connect::connect))
        .route("/process.Process/List", post(process_calls::list))
        .route("/process.Process/SendInput", post(process_calls::send_input))
        .route("/process.Process/CloseStdin", post(process_calls::close_stdin))
        .route("/process.Process/Update", post(process_calls::update))
        .route("/process.Process/StreamInput", post(process_input::stream_input))
        .route("/filesystem.Filesystem/Stat", post(filesystem::stat))
        .route("/filesystem.Filesystem/ListDir", post(filesystem::list_dir))
        .route("/filesystem.Filesystem/MakeDir", post(filesystem::make_dir))
        .route("/filesystem.Filesystem/Move", post(filesystem::move_entry))
        .route("/filesystem.Filesystem/Remove", post(filesystem::remove))
        .route("/filesystem.Filesystem/WatchDir", post(watch_calls::watch_dir))
        .route("/filesystem.Filesystem/CreateWatcher", post(watch_calls::create_watcher))
        .route("/filesystem.Filesystem/GetWatcherEvents", post(watch_calls::get_watcher_events))
        .route("/filesystem.Filesystem/RemoveWatcher", post(watch_calls::remove_watcher))
        .route(FILES_PATH, get(read_file).post(write_file))
        .route("/health", get(|| async { StatusCode::NO_CONTENT }))
        .merge(extension)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(host)
}

async fn start_process(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, body: Bytes) -> Response {
    let (sandbox, request): (_, StartRequest) = match stream::open(&host, &headers, &body).await {
        Ok(opened) => opened,
        Err(refused) => return refused,
    };
    let timeout =
        headers.get(connect::TIMEOUT_HEADER).and_then(|v| v.to_str().ok()?.parse::<u64>().ok()).map(Duration::from_millis);
    let size = match request.pty.map(|pty| window_size(pty.size)).transpose() {
        Ok(size) => size,
        Err(refused) => return stream_error("invalid_argument", refused.to_string()),
    };
    let (mut child, terminal) = match start_in_sandbox(&host, &sandbox, &request, size).await {
        Ok(started) => started,
        Err(SandboxError::Command(message)) => return stream_error("internal", message),
        Err(SandboxError::Io(e)) => return stream_error("internal", format!("cannot open a terminal: {e}")),
        Err(e) => return stream_error("unavailable", e.to_string()),
    };
    host.metrics.process_starts.inc();
    let pid = child.id();
    let (sender, receiver) = mpsc::channel(STREAM_BUFFER);
    let (watchers, _) = broadcast::channel(WATCH_BUFFER);
    let streams = match &terminal {
        Some(terminal) => Streams::Terminal(Arc::clone(terminal)),
        None => Streams::Pipes(child.stdin.take()),
    };
    sandbox.running.insert(pid, request.process.clone(), request.tag.clone(), streams, watchers.clone());
    let outlet = Outlet { starter: sender, watchers };
    tokio::spawn(drive(child, terminal, timeout, sandbox.running, outlet));
    let frames = futures::stream::unfold(receiver, |mut receiver| async move { receiver.recv().await.map(|f| (f, receiver)) });
    let frames = stream::with_keepalives(frames, stream::keepalive_interval(&headers));
    streaming_response(Body::from_stream(frames.map(|frame| Ok::<_, Infallible>(Bytes::from(frame)))))
}

/// Starts what `request` asks inside the sandbox: in its working directory
/// (changed to inside, where the path means what the sandbox sees), with
/// the create's variables and then the call's, leading a process group of
/// its own; its output piped and its input a pipe when the call keeps it,
/// or, with a terminal `size`, all three on a new
/// [terminal](super::terminal), which is returned too.
async fn start_in_sandbox(
    host: &Host,
    sandbox: &Entry,
    request: &StartRequest,
    size: Option<Winsize>,
) -> Result<(SandboxChild, Option<Arc<Terminal>>), SandboxError> {
    let process = &request.process;
    let mut argv: Vec<&str> = Vec::with_capacity(process.args.len() + 5);
    if let Some(cwd) = &process.cwd {
        argv.extend(["/bin/sh", "-c", r#"cd -- "$0" && exec "$@""#, cwd.as_str()]);
    }
    argv.push(&process.cmd);
    argv.extend(process.args.iter().map(String::as_str));
    let mut env: Vec<(String, String)> = sandbox.env_vars.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    env.extend(process.envs.iter().map(|(k, v)| (k.clone(), v.clone())));
    let Some(size) = size else {
        let child = host.local.spawn(&sandbox.local_id, argv[0], &argv[1..], &env, request.stdin).await?;
        return Ok((child, None));
    };
    let (terminal, program_side) = Terminal::open(size)?;
    let (program, args) = terminal::on_terminal(argv[0], &argv[1..]);
    let child = host.local.spawn_on_terminal(&sandbox.local_id, program, &args, &env, program_side).await?;
    Ok((child, Some(Arc::new(terminal))))
}

/// Streams one process's events until it ends, killing it at `timeout`.
/// A reader that went away does not stop the process, as with envd.
async fn drive(
    mut child: SandboxChild,
    terminal: Option<Arc<Terminal>>,
    timeout: Option<Duration>,
    running: Arc<Processes>,
    outlet: Outlet,
) {
    let pid = child.id();
    outlet.send(event_frame(ProcessEvent { start: Some(StartEvent { pid }), ..ProcessEvent::default() })).await;
    let stdout = tokio::spawn(pump(child.stdout.take(), outlet.clone(), Output::Stdout));
    let stderr = tokio::spawn(pump(child.stderr.take(), outlet.clone(), Output::Stderr));
    let typed = tokio::spawn(pump_terminal(terminal, outlet.clone()));
    let waited = match timeout {
        Some(limit) => tokio::time::timeout(limit, child.wait()).await,
        None => Ok(child.wait().await),
    };
    let (status, late) = match waited {
        Ok(status) => (status.ok(), false),
        Err(_) => {
            process::signal(Signal::Kill, Some(pid), &process::descendants(pid));
            (child.wait().await.ok(), true)
        }
    };
    for pump in [stdout, stderr, typed] {
        let _ = tokio::time::timeout(OUTPUT_GRACE, pump).await;
    }
    running.remove(pid);
    outlet.send(event_frame(ProcessEvent { end: Some(end_event(status)), ..ProcessEvent::default() })).await;
    let end = if late {
        EndOfStream {
            error: Some(ConnectError { code: "deadline_exceeded".into(), message: "the process ran past its deadline".into() }),
        }
    } else {
        EndOfStream::default()
    };
    outlet.send(connect::envelope(FLAG_END_STREAM, &serde_json::to_vec(&end).unwrap_or_default())).await;
}

/// Which of a process's outputs a `data` event carries.
#[derive(Debug, Clone, Copy)]
enum Output {
    Stdout,
    Stderr,
    Pty,
}

/// A `data` event of `bytes` from `output`.
fn data_frame(output: Output, bytes: &[u8]) -> Vec<u8> {
    let encoded = Some(BASE64.encode(bytes));
    let data = match output {
        Output::Stdout => DataEvent { stdout: encoded, ..DataEvent::default() },
        Output::Stderr => DataEvent { stderr: encoded, ..DataEvent::default() },
        Output::Pty => DataEvent { pty: encoded, ..DataEvent::default() },
    };
    event_frame(ProcessEvent { data: Some(data), ..ProcessEvent::default() })
}

/// Sends what a process prints on its terminal as `pty` events until
/// every program holding it has closed it.
async fn pump_terminal(terminal: Option<Arc<Terminal>>, outlet: Outlet) {
    let Some(terminal) = terminal else { return };
    let mut chunk = vec![0u8; 32 * 1024];
    while let Ok(n @ 1..) = terminal.read(&mut chunk).await {
        outlet.send(data_frame(Output::Pty, &chunk[..n])).await;
    }
}

/// Sends one pipe's output as `data` events until it closes.
async fn pump(pipe: Option<impl AsyncRead + Unpin>, outlet: Outlet, output: Output) {
    let Some(mut pipe) = pipe else { return };
    let mut chunk = vec![0u8; 32 * 1024];
    while let Ok(n @ 1..) = pipe.read(&mut chunk).await {
        outlet.send(data_frame(output, &chunk[..n])).await;
    }
}

/// Where a process's frames go: the stream of the call that started it
/// (while its reader stays) and every reader that connected since.
#[derive(Clone)]
struct Outlet {
    starter: mpsc::Sender<Vec<u8>>,
    watchers: broadcast::Sender<Vec<u8>>,
}

impl Outlet {
    async fn send(&self, frame: Vec<u8>) {
        // Nobody connected is no fault, nor a starter that went away.
        let _ = self.watchers.send(frame.clone());
        let _ = self.starter.send(frame).await;
    }
}

/// The `end` event as Go's `os.ProcessState` describes an exit.
fn end_event(status: Option<ExitStatus>) -> EndEvent {
    match status.map(|s| (s.code(), s.signal())) {
        Some((Some(code), _)) => EndEvent { exit_code: code, exited: true, status: format!("exit status {code}"), error: None },
        Some((None, Some(signal))) => {
            EndEvent { exit_code: -1, exited: false, status: format!("signal: {}", signal_name(signal)), error: None }
        }
        _ => {
            EndEvent { exit_code: -1, exited: false, status: "unknown".into(), error: Some("cannot wait for the process".into()) }
        }
    }
}

fn signal_name(signal: i32) -> String {
    match signal {
        1 => "hangup".into(),
        2 => "interrupt".into(),
        9 => "killed".into(),
        15 => "terminated".into(),
        other => format!("signal {other}"),
    }
}

async fn send_signal(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, body: Bytes) -> Response {
    let sandbox = match route(&host, &headers).await {
        Ok(sandbox) => sandbox,
        Err(refused) => return refused,
    };
    let Ok(request) = serde_json::from_slice::<SignalRequest>(&body) else {
        return (StatusCode::BAD_REQUEST, Json(json!({"code": "invalid_argument", "message": "invalid request"})))
            .into_response();
    };
    let pid = request.process.pid;
    if !sandbox.running.contains(pid) {
        let body = json!({"code": "not_found", "message": format!("process with pid {pid} not found")});
        return (StatusCode::NOT_FOUND, Json(body)).into_response();
    }
    let signal = if request.signal == "SIGNAL_SIGTERM" { Signal::Term } else { Signal::Kill };
    // The process, its group and everything it started, wherever they went
    // (a program of the sandbox runs in a session of its own).
    process::signal(signal, Some(pid), &process::descendants(pid));
    Json(json!({})).into_response()
}

/// The query of a download; a URL signed for it carries `signature` (and
/// `signature_expiration`) instead of the access token's header.
#[derive(Debug, Deserialize)]
struct FileQuery {
    path: String,
    username: Option<String>,
    signature: Option<String>,
    signature_expiration: Option<i64>,
}

/// What a `/files` request asks, for its access check.
fn access<'a>(
    operation: &'static str,
    path: &'a str,
    username: Option<&'a str>,
    signature: Option<&'a str>,
    expiration: Option<i64>,
) -> FileAccess<'a> {
    FileAccess { path, operation, user: username.unwrap_or_default(), signature, expiration }
}

/// The refusal of a file request for a user other than the desktop's one.
fn unknown_user(username: Option<&str>) -> Option<Response> {
    match username {
        None | Some(DEFAULT_USER) => None,
        Some(other) => Some(error(StatusCode::UNAUTHORIZED, format!("user '{other}' does not exist"))),
    }
}

async fn read_file(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, Query(query): Query<FileQuery>) -> Response {
    let asked = access("read", &query.path, query.username.as_deref(), query.signature.as_deref(), query.signature_expiration);
    let sandbox = match route_file(&host, &headers, &asked).await {
        Ok(sandbox) => sandbox,
        Err(refused) => return refused,
    };
    if let Some(refused) = unknown_user(query.username.as_deref()) {
        return refused;
    }
    match host.local.read_file(&sandbox.local_id, &query.path).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        Err(e) => file_error(&query.path, e),
    }
}

/// The query of an upload: `path` names the destination of a raw upload
/// (and of a one-part multipart upload); a multipart part's filename
/// names it otherwise.
#[derive(Debug, Deserialize)]
struct UploadQuery {
    path: Option<String>,
    username: Option<String>,
    signature: Option<String>,
    signature_expiration: Option<i64>,
}

async fn write_file(
    Shared(host): Shared<Arc<Host>>,
    headers: HeaderMap,
    Query(query): Query<UploadQuery>,
    body: Bytes,
) -> Response {
    let path = query.path.as_deref().unwrap_or_default();
    let asked = access("write", path, query.username.as_deref(), query.signature.as_deref(), query.signature_expiration);
    let sandbox = match route_file(&host, &headers, &asked).await {
        Ok(sandbox) => sandbox,
        Err(refused) => return refused,
    };
    if let Some(refused) = unknown_user(query.username.as_deref()) {
        return refused;
    }
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("application/octet-stream");
    let files = if content_type.starts_with("multipart/form-data") {
        match multipart_files(content_type, &body) {
            Some(mut files) => {
                if let (Some(path), [only]) = (&query.path, files.as_mut_slice()) {
                    only.0.clone_from(path);
                }
                files
            }
            None => return error(StatusCode::BAD_REQUEST, "malformed multipart/form-data upload"),
        }
    } else if content_type == "application/octet-stream" {
        match &query.path {
            Some(path) => vec![(path.clone(), body.to_vec())],
            None => return error(StatusCode::BAD_REQUEST, "a raw upload needs the path query parameter"),
        }
    } else {
        return error(StatusCode::BAD_REQUEST, format!("unsupported upload content type {content_type}"));
    };
    let mut written = Vec::new();
    for (path, bytes) in files {
        if let Err(e) = host.local.write_file(&sandbox.local_id, &path, &bytes).await {
            return file_error(&path, e);
        }
        let name = path.rsplit('/').next().unwrap_or_default().to_owned();
        written.push(json!({"path": path, "name": name, "type": "file"}));
    }
    Json(written).into_response()
}

/// The files of a `multipart/form-data` body: each part's filename and
/// bytes; `None` when the body is not one.
fn multipart_files(content_type: &str, body: &[u8]) -> Option<Vec<(String, Vec<u8>)>> {
    let boundary = content_type.split(';').find_map(|p| p.trim().strip_prefix("boundary="))?.trim_matches('"');
    let delimiter = format!("--{boundary}").into_bytes();
    let mut starts = Vec::new();
    let mut at = 0;
    while let Some(found) = find(&body[at..], &delimiter) {
        starts.push(at + found);
        at += found + delimiter.len();
    }
    let mut files = Vec::new();
    for pair in starts.windows(2) {
        let segment = &body[pair[0] + delimiter.len()..pair[1]];
        let segment = segment.strip_prefix(b"\r\n")?;
        let head_end = find(segment, b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&segment[..head_end]);
        let data = &segment[head_end + 4..];
        let data = data.strip_suffix(b"\r\n").unwrap_or(data);
        let filename = head.lines().filter(|l| l.to_ascii_lowercase().starts_with("content-disposition")).find_map(|l| {
            l.split(';').find_map(|p| p.trim().strip_prefix("filename=").map(|f| f.trim_matches('"').to_owned()))
        })?;
        files.push((filename, data.to_vec()));
    }
    (!files.is_empty()).then_some(files)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// envd's answer to a failed file operation.
fn file_error(path: &str, error: SandboxError) -> Response {
    match error {
        SandboxError::File { message, .. } if message.contains("Is a directory") => {
            self::error(StatusCode::BAD_REQUEST, format!("path '{path}' is a directory"))
        }
        SandboxError::File { message, .. } => self::error(StatusCode::NOT_FOUND, format!("path '{path}': {message}")),
        SandboxError::NotFound(_) | SandboxError::Expired(_) => self::error(StatusCode::BAD_GATEWAY, "The sandbox was not found"),
        other => self::error(StatusCode::INTERNAL_SERVER_ERROR, other.to_string()),
    }
}
