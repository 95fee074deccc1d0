//! flotilla-sandboxd's terminals, streamed input and directory watching,
//! driven by the official E2B SDKs unmodified (`tests/sdk/sandboxd_terminal.py`
//! with PyPI `e2b`, `tests/sdk/sandboxd_terminal.mjs` with npm `e2b`) on
//! real desktops: a PTY made at a size and read back with `stty size`,
//! resized (the foreground program gets SIGWINCH), typed input echoed,
//! input streamed, killed; a directory watched (polled and streamed, flat
//! and recursive) while files come and go. `Process/StreamInput` is also
//! sent by hand in Connect's envelopes, with the refusals a client can meet,
//! to a process whose idle stream sends keepalives.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use flotilla_sandboxd::{Sandboxd, TestOptions};
use flotilla_tests::python::{node_sdk_dir, venv_python};
use serde_json::{json, Value};

/// How long one SDK run may take.
const RUN_LIMIT: Duration = Duration::from_secs(180);

/// Runs an SDK script (`program script`) against `host`; the JSON line it ends with.
async fn run_sdk(host: &Sandboxd, program: &std::path::Path, script: &std::path::Path) -> Value {
    let sdk = tokio::process::Command::new(program)
        .arg(script)
        .env("E2B_API_KEY", host.test_key())
        .env("E2B_API_URL", host.api_url())
        .env("E2B_SANDBOX_URL", host.sandbox_url())
        .env("E2B_DOMAIN", host.domain())
        // A Python run that dies on a signal says where.
        .env("PYTHONFAULTHANDLER", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(RUN_LIMIT, sdk).await.expect("the SDK run ends").expect("the SDK script runs");
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{} failed ({}):\n{stderr}\n{stdout}", script.display(), output.status);
    let last = stdout.lines().last().unwrap_or_else(|| panic!("no output; stderr:\n{stderr}"));
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {last}\n{stderr}"))
}

/// What both SDKs must have seen of a terminal.
fn assert_the_terminal_worked(seen: &Value) {
    assert_eq!(seen["pty_size"], "24 80", "stty size on the PTY made 80x24: {seen}");
    assert_eq!(seen["pty_size_after_resize"], "40 120", "the foreground program saw SIGWINCH and the new size: {seen}");
    assert_eq!(seen["typed_echoed"], true, "the terminal echoed what was typed: {seen}");
    assert_eq!(seen["pty_listed"], true, "{seen}");
    assert_eq!(seen["pty_killed"], true, "{seen}");
    assert_eq!(seen["pty_exit_code"], -1, "the killed terminal ended by a signal: {seen}");
    assert_eq!(seen["pty_listed_after_kill"], false, "{seen}");
}

/// Whether `events` holds `[name, type]`.
fn has(events: &Value, name: &str, kind: &str) -> bool {
    events.as_array().is_some_and(|all| all.iter().any(|e| e == &json!([name, kind])))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_python_sdk_drives_a_terminal_and_watches_directories_on_sandboxd() {
    let host = Sandboxd::start_with(TestOptions { pool: 1, ..TestOptions::default() }).await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sdk").join("sandboxd_terminal.py");
    let seen = run_sdk(&host, &venv_python(), &script).await;
    assert_the_terminal_worked(&seen);
    assert_eq!(seen["streamed_input"], true, "Process/StreamInput typed its chunks in order: {seen}");
    assert_eq!(seen["stream_input_unknown_pid"], "NotFoundException", "{seen}");
    assert_eq!(seen["resize_unknown_pid"], "not_found", "{seen}");
    let polled = &seen["polled"];
    for (name, kind) in [("a.txt", "create"), ("a.txt", "write"), ("a.txt", "remove"), ("sub", "create")] {
        assert!(has(polled, name, kind), "the sync watcher saw {kind} of {name}: {seen}");
    }
    assert!(!has(polled, "sub/b.txt", "create"), "a flat watch sees no deeper: {seen}");
    let deep = &seen["polled_recursive"];
    assert!(has(deep, "sub/b.txt", "create") && has(deep, "sub/b.txt", "write"), "the recursive watcher: {seen}");
    let streamed = &seen["streamed"];
    assert!(has(streamed, "a.txt", "create") && has(streamed, "a.txt", "remove"), "the async SDK's WatchDir: {seen}");
    assert_eq!(seen["watch_missing"], "FileNotFoundException", "{seen}");
    assert_eq!(seen["watch_a_file"], "InvalidArgumentException", "{seen}");
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_javascript_sdk_drives_a_terminal_and_watches_directories_on_sandboxd() {
    let host = Sandboxd::start_with(TestOptions { pool: 1, ..TestOptions::default() }).await;
    // Node resolves an ES module's imports beside it.
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sdk").join("sandboxd_terminal.mjs");
    let script = node_sdk_dir().join(format!("sandboxd_terminal-{:016x}.mjs", rand::random::<u64>()));
    std::fs::copy(&source, &script).expect("the script beside the SDKs");
    let seen = run_sdk(&host, std::path::Path::new("node"), &script).await;
    let _ = std::fs::remove_file(&script);
    assert_the_terminal_worked(&seen);
    assert_eq!(seen["resize_unknown_pid"], "NotFoundError", "{seen}");
    let watched = &seen["watched"];
    for (name, kind) in [("a.txt", "create"), ("a.txt", "write"), ("a.txt", "remove"), ("sub", "create"), ("sub/b.txt", "write")]
    {
        assert!(has(watched, name, kind), "watchDir saw {kind} of {name}: {seen}");
    }
    assert_eq!(seen["watch_missing"], "FileNotFoundError", "{seen}");
    assert_eq!(seen["watch_a_file"], "InvalidArgumentError", "{seen}");
    host.shutdown().await;
}

/// One Connect envelope of `message`.
fn envelope(message: &Value) -> Vec<u8> {
    let payload = message.to_string().into_bytes();
    let mut framed = vec![0u8];
    framed.extend_from_slice(&u32::try_from(payload.len()).expect("small").to_be_bytes());
    framed.extend_from_slice(&payload);
    framed
}

/// The JSON of each whole envelope in `bytes`, and whether each ends the stream.
fn envelopes(mut bytes: &[u8]) -> Vec<(bool, Value)> {
    let mut all = Vec::new();
    while bytes.len() >= 5 {
        let length = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
        if bytes.len() < 5 + length {
            break;
        }
        let end = bytes[0] & 0x02 != 0;
        all.push((end, serde_json::from_slice(&bytes[5..5 + length]).expect("JSON")));
        bytes = &bytes[5 + length..];
    }
    all
}

/// A sandbox's envd, reached through the host's edge.
struct Envd {
    client: reqwest::Client,
    base: String,
    id: String,
    token: String,
}

impl Envd {
    async fn create(host: &Sandboxd) -> Self {
        let client = reqwest::Client::new();
        let body = json!({"templateID": "desktop", "timeout": 120});
        let created: Value = client
            .post(format!("{}/sandboxes", host.api_url()))
            .header("X-API-Key", host.test_key())
            .json(&body)
            .send()
            .await
            .expect("create")
            .json()
            .await
            .expect("JSON");
        let id = created["sandboxID"].as_str().expect("an id").to_owned();
        let token = created["envdAccessToken"].as_str().expect("a token").to_owned();
        Self { client, base: host.sandbox_url().to_owned(), id, token }
    }

    fn post(&self, path: &str, content_type: &str) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}{path}", self.base))
            .header("E2b-Sandbox-Id", &self.id)
            .header("E2b-Sandbox-Port", "49983")
            .header("X-Access-Token", &self.token)
            .header("Content-Type", content_type)
    }

    /// A client-streaming `StreamInput` of `messages`; the envelopes it answers.
    async fn stream_input(&self, messages: &[Value]) -> Vec<(bool, Value)> {
        let body: Vec<u8> = messages.iter().flat_map(envelope).collect();
        let answer = self.post("/process.Process/StreamInput", "application/connect+json").body(body).send().await;
        let answer = answer.expect("StreamInput answers");
        assert_eq!(answer.status(), 200, "a streaming call answers its errors in the stream");
        envelopes(&answer.bytes().await.expect("the answer"))
    }

    /// A unary call; its status and JSON.
    async fn unary(&self, path: &str, body: Value) -> (u16, Value) {
        let answer = self.post(path, "application/json").body(body.to_string()).send().await.expect("answers");
        (answer.status().as_u16(), answer.json().await.expect("JSON"))
    }
}

/// The Connect error code that ends `stream`, if one does.
fn end_code(stream: &[(bool, Value)]) -> Option<String> {
    let (_, end) = stream.iter().find(|(end, _)| *end)?;
    end["error"]["code"].as_str().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread")]
async fn sandboxd_takes_stream_input_in_connect_envelopes_in_order_and_refuses_what_cannot_land() {
    let host = Sandboxd::start_with(TestOptions { pool: 1, ..TestOptions::default() }).await;
    let envd = Envd::create(&host).await;
    let start = json!({"process": {"cmd": "cat", "args": []}, "stdin": true});
    let starting = envd.post("/process.Process/Start", "application/connect+json").header("Keepalive-Ping-Interval", "1");
    let mut cat = starting.body(envelope(&start)).send().await.expect("Start");
    let mut read = Vec::new();
    // An idle process's stream says it is alive as often as the caller asked.
    let kept_alive = async {
        while !envelopes(&read).iter().any(|(_, event)| event["event"]["keepalive"].is_object()) {
            read.extend_from_slice(&cat.chunk().await.expect("the stream").expect("a start event, then a keepalive"));
        }
    };
    tokio::time::timeout(Duration::from_secs(10), kept_alive).await.expect("a keepalive within 10 s");
    let pid = envelopes(&read)[0].1["event"]["start"]["pid"].as_u64().expect("a pid");

    let chunk = |text: &str| json!({"data": {"input": {"stdin": BASE64.encode(text)}}});
    let sent = [json!({"start": {"process": {"pid": pid}}}), chunk("first,"), json!({"keepalive": {}}), chunk("second")];
    let answered = envd.stream_input(&sent).await;
    assert_eq!(answered, vec![(false, json!({})), (true, json!({}))], "one empty message, then a clean end");

    assert_eq!(
        end_code(&envd.stream_input(&[json!({"start": {"process": {"pid": 999_999}}})]).await).as_deref(),
        Some("not_found")
    );
    let early = envd.stream_input(&[chunk("too soon")]).await;
    assert_eq!(end_code(&early).as_deref(), Some("invalid_argument"), "data before the start: {early:?}");
    let neither = envd.stream_input(&[json!({"start": {"process": {"pid": pid}}}), json!({})]).await;
    assert_eq!(end_code(&neither).as_deref(), Some("invalid_argument"), "a message of no kind: {neither:?}");
    let typed =
        envd.stream_input(&[json!({"start": {"process": {"pid": pid}}}), json!({"data": {"input": {"pty": "eA=="}}})]).await;
    assert_eq!(end_code(&typed).as_deref(), Some("failed_precondition"), "terminal input for a process on pipes: {typed:?}");

    let (status, body) =
        envd.unary("/process.Process/Update", json!({"process": {"pid": pid}, "pty": {"size": {"cols": 100, "rows": 30}}})).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("failed_precondition")), "no terminal to resize: {body}");
    let (status, body) = envd
        .unary("/process.Process/Update", json!({"process": {"pid": 999_999}, "pty": {"size": {"cols": 100, "rows": 30}}}))
        .await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")), "{body}");
    let (status, body) = envd.unary("/process.Process/Update", json!({"process": {"pid": "x"}})).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("invalid_argument")), "{body}");
    let (status, body) = envd.unary("/filesystem.Filesystem/GetWatcherEvents", json!({"watcherId": "wnone"})).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("not_found")), "{body}");

    let (status, _) = envd.unary("/process.Process/CloseStdin", json!({"process": {"pid": pid}})).await;
    assert_eq!(status, 200);
    while let Some(more) = cat.chunk().await.expect("the stream") {
        read.extend_from_slice(&more);
    }
    let printed: Vec<u8> = envelopes(&read)
        .iter()
        .filter_map(|(_, event)| event["event"]["data"]["stdout"].as_str().map(|b| BASE64.decode(b).expect("base64")))
        .flatten()
        .collect();
    assert_eq!(String::from_utf8_lossy(&printed), "first,second", "the streamed chunks reached cat in order");
    host.shutdown().await;
}
