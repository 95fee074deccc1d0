//! flotilla-sandboxd driven by the official E2B SDKs, unmodified
//! (`tests/sdk/sandboxd_check.py` with PyPI `e2b` and `e2b-desktop`,
//! `tests/sdk/sandboxd_check.mjs` with npm `e2b` and `@e2b/desktop`), on real
//! desktops: a create at a resolution, commands with exit codes and
//! streamed output, a background command reattached by pid, files,
//! screenshot, pointer and keyboard, the SDK's
//! stream opened in headless Chromium, timeout, pause and connect with a
//! process's memory intact, list and kill.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use flotilla_sandboxd::{Sandboxd, TestOptions};
use flotilla_tests::browser::Browser;
use flotilla_tests::python::{node_sdk_dir, venv_python};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// How long the whole SDK run may take.
const RUN_LIMIT: Duration = Duration::from_secs(240);
/// How long the stream may take to show the desktop.
const SHOWN: Duration = Duration::from_secs(30);

/// The SDK's stream URL (`https://6080-<id>.<domain>/vnc.html?…`) on the
/// host's plain-http edge: same host name, path and query.
fn on_edge(sdk_url: &str, edge_url: &str) -> String {
    let port = edge_url.rsplit(':').next().expect("the edge's port");
    let rest = sdk_url.strip_prefix("https://").expect("the SDK builds https URLs");
    let (host, path) = rest.split_once('/').expect("a path");
    format!("http://{host}:{port}/{path}")
}

/// Runs an SDK check script (`program script`) against `host`: opens the
/// stream it announces in headless Chromium, then returns the JSON line it
/// ends with.
async fn drive(host: &Sandboxd, program: &std::path::Path, script: &std::path::Path) -> Value {
    let mut sdk = tokio::process::Command::new(program)
        .arg(script)
        .env("E2B_API_KEY", host.test_key())
        .env("E2B_API_URL", host.api_url())
        .env("E2B_SANDBOX_URL", host.sandbox_url())
        .env("E2B_DOMAIN", host.domain())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the SDK check starts");
    let mut lines = BufReader::new(sdk.stdout.take().expect("stdout")).lines();
    let run = async {
        let mut seen = None;
        while let Some(line) = lines.next_line().await.expect("the script's output") {
            if let Some(url) = line.strip_prefix("STREAM ") {
                let mut browser = Browser::launch(900, 700).await.expect("chromium");
                browser.navigate(&on_edge(url, host.sandbox_url())).await.expect("the stream page");
                let canvas = "(document.querySelector('#noVNC_container canvas') || {}).width";
                let width = browser.wait_for("the desktop in the canvas", &format!("{canvas} === 800"), SHOWN).await;
                browser.close().await;
                width.expect("the stream shows the 800-pixel-wide desktop");
                sdk.stdin.as_mut().expect("stdin").write_all(b"viewed\n").await.expect("tell the script");
            } else {
                seen = Some(line);
            }
        }
        seen
    };
    let last = tokio::time::timeout(RUN_LIMIT, run).await.expect("the SDK run ends");
    let status = sdk.wait().await.expect("the script exits");
    let mut stderr = String::new();
    if let Some(mut pipe) = sdk.stderr.take() {
        let _ = tokio::io::AsyncReadExt::read_to_string(&mut pipe, &mut stderr).await;
    }
    assert!(status.success(), "{} failed:\n{stderr}", script.display());
    serde_json::from_str(&last.expect("a JSON line")).expect("JSON")
}

/// What both SDKs' runs must have seen.
async fn assert_the_sdk_saw_a_working_desktop(host: &Sandboxd, seen: &Value) {
    assert_eq!(seen["screen_size"], serde_json::json!([800, 600]), "{seen}");
    assert_eq!(seen["streamed"], serde_json::json!(["line 1", "line 2", "line 3"]), "{seen}");
    assert_eq!((seen["exit_code"].as_i64(), seen["stderr"].as_str()), (Some(3), Some("failing\n")), "{seen}");
    assert_eq!(seen["reattached"], serde_json::json!([4, "after connect\n"]), "Process/Connect: {seen}");
    assert_eq!(seen["unknown_pid"], "not_found", "connecting to a pid the sandbox never ran: {seen}");
    assert_eq!(seen["read"], "written by the sdk", "{seen}");
    if let Some(signed) = seen.get("signed") {
        assert_eq!(signed["read"], serde_json::json!([200, "read through a signed URL"]), "{signed}");
        assert_eq!(signed["read_expiring"], serde_json::json!([200, "read through a signed URL"]), "{signed}");
        assert_eq!(signed["another_path"][0], 401, "a signature opens its own path only: {signed}");
        assert_eq!(signed["tampered"][0], 401, "{signed}");
        assert_eq!(signed["upload"], 200, "{signed}");
        assert_eq!(signed["uploaded"], "written through a signed URL", "{signed}");
    }
    assert_eq!(seen["listed"], serde_json::json!(["sdk.txt"]), "{seen}");
    assert_eq!(seen["screenshot_png"], true, "{seen}");
    assert_eq!(seen["screenshot_size"], serde_json::json!([800, 600]), "{seen}");
    assert_eq!(seen["cursor"], serde_json::json!([150, 60]), "{seen}");
    assert_eq!(seen["typed"], "typed by the sdk", "typing and Enter reached the terminal: {seen}");
    let left = seen["end_after_set_timeout_s"].as_i64().expect("seconds left");
    assert!((595..=600).contains(&left), "set_timeout moved the end to 600 s from now: {seen}");
    assert_eq!(seen["state_paused"], "paused", "{seen}");
    assert_eq!(seen["listed_states"], serde_json::json!([[true, "paused"]]), "{seen}");
    let counts: Vec<i64> =
        seen["counter_at_pause_resume_later"].as_array().expect("counts").iter().filter_map(Value::as_i64).collect();
    let [at_pause, resumed, later] = counts[..] else { panic!("three counts: {seen}") };
    assert!(
        resumed >= at_pause && resumed - at_pause < 20,
        "the counter kept its value and did not run in two paused seconds: {seen}"
    );
    assert!(later > resumed, "the counter runs again after connect: {seen}");
    assert_eq!(seen["counter_pid_alive"], true, "the same process runs on: {seen}");
    assert_eq!(seen["state_resumed"], "running", "{seen}");
    assert_eq!(seen["listed_running"].as_array().map(Vec::len), Some(1), "{seen}");
    assert_eq!(seen["killed"], true, "{seen}");
    let id = flotilla_sandbox::SandboxId::parse(seen["sandbox_id"].as_str().expect("an id")).expect("a sandbox id");
    assert_eq!(host.end_at(&id), None, "the SDK's kill ended the sandbox");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_python_e2b_sdks_drive_a_sandboxd_desktop() {
    let host = Sandboxd::start_with(TestOptions { pool: 1, ..TestOptions::default() }).await;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sdk").join("sandboxd_check.py");
    let seen = drive(&host, &venv_python(), &script).await;
    assert_the_sdk_saw_a_working_desktop(&host, &seen).await;
    assert_eq!((seen["moved_exists"].as_bool(), seen["removed"].as_bool()), (Some(true), Some(true)), "{seen}");
    assert!(seen["signed"].is_object(), "the Python SDK's signed URLs were tried: {seen}");
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_javascript_e2b_sdks_drive_a_sandboxd_desktop() {
    let host = Sandboxd::start_with(TestOptions { pool: 1, ..TestOptions::default() }).await;
    // Node resolves an ES module's imports beside it: the script runs from
    // the directory the SDKs are installed in.
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sdk").join("sandboxd_check.mjs");
    let script = node_sdk_dir().join(format!("sandboxd_check-{:016x}.mjs", rand::random::<u64>()));
    std::fs::copy(&source, &script).expect("the script beside the SDKs");
    let seen = drive(&host, std::path::Path::new("node"), &script).await;
    let _ = std::fs::remove_file(&script);
    assert_the_sdk_saw_a_working_desktop(&host, &seen).await;
    host.shutdown().await;
}

/// A control-plane call with the host's key.
fn call(host: &Sandboxd, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
    reqwest::Client::new().request(method, format!("{}{path}", host.api_url())).header("X-API-Key", host.test_key())
}

/// Creates a desktop sandbox living `timeout` seconds; the response.
async fn create(host: &Sandboxd, timeout: u64) -> reqwest::Response {
    let body = serde_json::json!({"templateID": "desktop", "timeout": timeout, "autoPause": false});
    call(host, reqwest::Method::POST, "/sandboxes").json(&body).send().await.expect("create")
}

async fn sandbox_id(response: reqwest::Response) -> String {
    let body: Value = response.json().await.expect("JSON");
    body["sandboxID"].as_str().expect("an id").to_owned()
}

/// The host's running and paused counts and its pool, from `/metrics`.
async fn metric(host: &Sandboxd, line_start: &str) -> Option<f64> {
    let page = reqwest::get(format!("{}/metrics", host.api_url())).await.ok()?.text().await.ok()?;
    page.lines().find_map(|line| line.strip_prefix(line_start)?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_host_refuses_creates_a_paused_sandbox_frees_its_place_and_deadlines_end_sandboxes() {
    let host = Sandboxd::start_with(TestOptions { capacity: Some(1), ..TestOptions::default() }).await;
    let bad_key = reqwest::Client::new().get(format!("{}/v2/sandboxes", host.api_url())).header("X-API-Key", "e2b_00");
    assert_eq!(bad_key.send().await.expect("list").status(), 401);

    let first = create(&host, 60).await;
    assert_eq!(first.status(), 201);
    let first = sandbox_id(first).await;
    let refused = create(&host, 60).await;
    assert_eq!(refused.status(), 429, "past the capacity");
    let body: Value = refused.json().await.expect("JSON");
    assert_eq!((body["code"].as_i64(), body["error_code"].as_str()), (Some(429), Some("sandbox_capacity_unavailable")));

    let paused = call(&host, reqwest::Method::POST, &format!("/sandboxes/{first}/pause")).send().await.expect("pause");
    assert_eq!(paused.status(), 204);
    let again = call(&host, reqwest::Method::POST, &format!("/sandboxes/{first}/pause")).send().await.expect("pause");
    assert_eq!(again.status(), 409, "already paused");
    assert_eq!(metric(&host, "flotilla_sandboxd_sandboxes{state=\"paused\"}").await, Some(1.0));

    // The paused one counts against nothing: a second starts, and it lives one second.
    let second = create(&host, 1).await;
    assert_eq!(second.status(), 201, "a paused sandbox frees its place");
    let second = sandbox_id(second).await;
    let woken = call(&host, reqwest::Method::POST, &format!("/sandboxes/{first}/connect"))
        .json(&serde_json::json!({"timeout": 60}))
        .send()
        .await
        .expect("connect");
    assert_eq!(woken.status(), 429, "resuming would pass the capacity");

    flotilla_tests::wait::eventually("the one-second sandbox has ended", Duration::from_secs(20), async || {
        let detail = call(&host, reqwest::Method::GET, &format!("/sandboxes/{second}")).send().await;
        detail.is_ok_and(|d| d.status() == 404)
    })
    .await;
    let woken = call(&host, reqwest::Method::POST, &format!("/sandboxes/{first}/connect"))
        .json(&serde_json::json!({"timeout": 60}))
        .send()
        .await
        .expect("connect");
    assert_eq!(woken.status(), 201, "a paused sandbox resumes once there is room");
    let listed: Value =
        call(&host, reqwest::Method::GET, "/v2/sandboxes?state=running").send().await.expect("list").json().await.expect("JSON");
    assert_eq!(listed.as_array().map(Vec::len), Some(1));
    assert_eq!(listed[0]["sandboxID"], first.as_str());
    let bad = call(&host, reqwest::Method::GET, "/v2/sandboxes?state=sleeping").send().await.expect("list");
    assert_eq!(bad.status(), 400, "an unknown state is named");
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sandbox_reaches_neither_the_hosts_control_plane_nor_another_sandboxs_envd() {
    use flotilla_worker::sandbox::{E2bProvider, SandboxProvider, SandboxRequest};
    let host = Sandboxd::start().await;
    let provider = E2bProvider::new(host.config()).expect("a client of the host");
    let request = SandboxRequest::default();
    let (agent, other) = tokio::join!(provider.create(&request), provider.create(&request));
    let (agent, other) = (agent.expect("a sandbox"), other.expect("another"));
    let port = |url: &str| url.rsplit(':').next().expect("a port").trim_end_matches('/').to_owned();
    let (control, edge) = (port(host.api_url()), port(host.sandbox_url()));
    // Every address the host's servers could be met at, as an agent would try them.
    let mut targets = Vec::new();
    for address in ["127.0.0.1".to_owned(), "10.0.2.2".to_owned(), flotilla_sandbox::suite::host_address().to_string()] {
        targets.push(format!("{address}:{control}"));
        targets.push(format!("{address}:{edge}"));
    }
    for target in &targets {
        let (address, port) = target.split_once(':').expect("address:port");
        let probe = format!("timeout 3 bash -c 'exec 3<>/dev/tcp/{address}/{port}' && echo reached || echo refused");
        let output = provider.run(&agent.id, &probe, Duration::from_secs(20)).await.expect("the probe runs");
        assert_eq!(output.stdout.trim(), "refused", "{target} is reachable from inside a sandbox");
    }
    // The other sandbox's envd answers from outside, through the edge.
    let outside = provider.run(&other.id, "echo alive", Duration::from_secs(20)).await.expect("the other sandbox answers");
    assert_eq!(outside.stdout.trim(), "alive");
    provider.kill(&agent.id).await.expect("kill");
    provider.kill(&other.id).await.expect("kill");
    host.shutdown().await;
}
