//! Sandbox templates end to end, on real jailed desktops: a scripted task on
//! the `browser` template navigates Chromium to a page this test serves (to
//! the sandbox through the egress exception, as the internet would be),
//! fills its form and submits it; the test's server receives exactly that
//! submission and the stored screenshots show the rendered page. A planned
//! task whose planner names `firefox` finds Firefox open and focused when
//! the executor's first model call arrives; an application the template
//! lacks ends the task with code `app-unavailable` before any step. A
//! worker whose template needs a program this host lacks stops at start
//! in one line.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::response::Html;
use flotilla_blobstore::BlobStore;
use flotilla_sandbox::suite::host_address;
use flotilla_tests::desktop::{count, eventually, sandbox_ids, DesktopFleet, DesktopOptions};
use flotilla_tests::fakes::{anthropic, Gate, ScriptedServer};
use flotilla_tests::s3_server::S3Server;
use flotilla_tests::tasks::{events, record};
use flotilla_tests::unique_prefix;
use flotilla_types::event::{Event, EventKind};
use flotilla_types::task::{StopCode, TaskStatus};
use flotilla_worker::sandbox::{LocalConfig, LocalProvider, PoolConfig, SandboxId, SandboxProvider, SandboxRequest};
use serde_json::{json, Value};

/// The tenant's settings: `acme` may use the built-in templates.
const TENANTS: &str = "[tenants.acme]\nsandbox_templates = [\"browser\", \"office\"]\n";
/// The page's background, which the screenshots must show.
const PAGE_COLOUR: [u8; 3] = [0x11, 0xaa, 0x55];
const FORM_PAGE: &str = "<!doctype html><html><head><title>Flotilla form</title></head>\
<body style=\"margin:0;background:#11aa55;height:100vh\">\
<form method=\"post\" action=\"/submit\" style=\"padding:40px\">\
<input name=\"name\" autofocus style=\"font-size:32px\"> <input name=\"city\" style=\"font-size:32px\">\
<button type=\"submit\" style=\"font-size:32px\">Send</button></form></body></html>";

/// The test site: the form at `/`, and every body posted to `/submit`.
struct Site {
    addr: SocketAddr,
    submissions: Arc<Mutex<Vec<String>>>,
}

async fn serve_site() -> Site {
    let submissions = Arc::new(Mutex::new(Vec::new()));
    let app = axum::Router::new()
        .route("/", axum::routing::get(|| async { Html(FORM_PAGE) }))
        .route(
            "/submit",
            axum::routing::post(|State(seen): State<Arc<Mutex<Vec<String>>>>, body: String| async move {
                seen.lock().unwrap_or_else(|p| p.into_inner()).push(body);
                Html("<!doctype html><html><body style=\"background:#ffffff\"><h1>Thank you</h1></body></html>")
            }),
        )
        .with_state(Arc::clone(&submissions));
    let listener = tokio::net::TcpListener::bind(SocketAddr::from((host_address(), 0))).await.expect("bind the site");
    let addr = listener.local_addr().expect("the site's address");
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    Site { addr, submissions }
}

/// A fleet of local desktops whose sandboxes reach `internet`, for tenants
/// allowed the built-in templates.
async fn fleet(internet: Vec<Ipv4Addr>, env: Vec<(&'static str, String)>, blobs: Option<BlobStore>) -> DesktopFleet {
    let config = flotilla_tests::config_file(TENANTS);
    let mut env = env;
    env.push(("FLOTILLA_CONFIG", config.to_string_lossy().into_owned()));
    let local = LocalConfig { egress_exceptions: internet, start_timeout: Duration::from_secs(30), ..LocalConfig::default() };
    let provider: Arc<dyn SandboxProvider> = Arc::new(LocalProvider::new(local));
    let options = DesktopOptions { env, provider: Some(provider), blobs, ..DesktopOptions::default() };
    DesktopFleet::start(options).await
}

/// The stored keys of a task's screenshots, in order.
fn screenshot_keys(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Screenshot { key, .. } => Some(key.clone()),
            _ => None,
        })
        .collect()
}

/// The share of a PNG's pixels within a few levels of `colour`.
fn share_of(png_bytes: &[u8], colour: [u8; 3]) -> f64 {
    let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut pixels = vec![0; reader.output_buffer_size().expect("a buffer size")];
    let info = reader.next_frame(&mut pixels).expect("a frame");
    let channels = info.color_type.samples();
    let pixels = &pixels[..info.buffer_size()];
    let near = |p: &[u8]| p.iter().zip(colour).all(|(a, b)| a.abs_diff(b) <= 3);
    let total = pixels.len() / channels;
    let matching = pixels.chunks_exact(channels).filter(|p| near(&p[..3])).count();
    matching as f64 / total as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_browser_task_fills_and_submits_a_form_on_a_served_page() {
    let site = serve_site().await;
    let s3 = S3Server::start();
    let store = s3.store(&unique_prefix());
    let fleet = fleet(vec![host_address()], Vec::new(), Some(store.clone())).await;
    let url = format!("http://{}/", site.addr);
    let task = json!({
        "prompt": "fill in the form",
        "pipeline": "scripted",
        "sandbox": {"template": "browser", "resolution": [1024, 768]},
        "retry": {"max_attempts": 1},
        "actions": [
            {"type": "keypress", "keys": ["ctrl", "l"]},
            {"type": "type", "text": format!("{url}\n")},
            // The page loads from this host; its field takes the focus itself.
            {"type": "wait", "ms": 2000},
            {"type": "type", "text": "Ada Lovelace"},
            {"type": "keypress", "keys": ["Tab"]},
            {"type": "type", "text": "London"},
            {"type": "keypress", "keys": ["Return"]},
            {"type": "wait", "ms": 1000}
        ]
    });
    let (id, history) = fleet.run_to_end(task).await;
    let done = record(&fleet.queue, &id).await;
    assert_eq!(done.status, TaskStatus::Succeeded, "{:?} {history:?}", done.error);
    let submissions = site.submissions.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(submissions, ["name=Ada+Lovelace&city=London"], "exactly the submission the task made");

    let mut best = 0.0f64;
    for key in screenshot_keys(&history) {
        let png = store.get(&key).await.expect("the screenshot is stored");
        best = best.max(share_of(&png, PAGE_COLOUR));
    }
    assert!(best > 0.5, "a stored screenshot shows the rendered page (its colour covers {best:.2} of the screen at best)");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_template_given_a_warm_count_is_handed_out_warm_and_others_start_cold() {
    let fleet = fleet(Vec::new(), vec![("FLOTILLA_SANDBOX_WARM", "browser=1".into())], None).await;
    let browser = SandboxRequest { template: Some("browser".into()), ..PoolConfig::default().default_request };
    eventually("a browser desktop is ready in the pool", Duration::from_secs(60), async || fleet.pool.ready_for(&browser) == 1)
        .await;
    assert_eq!(fleet.pool.ready(), 1, "no desktop of the default template is kept without a count");
    let task = |template: &str| {
        json!({
            "prompt": "move the pointer", "pipeline": "scripted", "sandbox": {"template": template},
            "actions": [{"type": "move", "x": 10, "y": 10}]
        })
    };
    let mut handed_out = Vec::new();
    for template in ["browser", "office"] {
        let (id, history) = fleet.run_to_end(task(template)).await;
        assert_eq!(record(&fleet.queue, &id).await.status, TaskStatus::Succeeded, "{history:?}");
        let ready = history.iter().find_map(|e| match &e.kind {
            EventKind::SandboxReady { warm, ms, .. } => Some((*warm, *ms)),
            _ => None,
        });
        handed_out.push(ready.expect("sandbox_ready"));
    }
    assert_eq!((handed_out[0].0, handed_out[1].0), (true, false), "browser warm, office cold: {handed_out:?}");
    assert!(handed_out[0].1 < 1_000, "a warm browser desktop is handed out without a start ({} ms)", handed_out[0].1);
    eventually("the browser pool refills", Duration::from_secs(60), async || fleet.pool.ready_for(&browser) == 1).await;
    fleet.stop().await;
}

/// A model of the `computer_20251124` tool on the fake Anthropic server.
fn anthropic_env(server: &ScriptedServer) -> Vec<(&'static str, String)> {
    vec![
        ("ANTHROPIC_BASE_URL", server.url()),
        ("ANTHROPIC_API_KEY", "sk-ant-test-secret".to_owned()),
        ("FLOTILLA_ANTHROPIC_MODEL", "claude-sonnet-4-6".to_owned()),
    ]
}

fn planned_browser_task() -> Value {
    json!({
        "prompt": "look something up on the web",
        "pipeline": "claude-computer-use",
        "plan": true,
        "sandbox": {"template": "browser", "resolution": [1024, 768]},
        "retry": {"max_attempts": 1}
    })
}

/// The text of the first user message of an Anthropic request.
fn first_text(body: &Value) -> String {
    match &body["messages"][0]["content"] {
        Value::String(text) => text.clone(),
        blocks => blocks.as_array().into_iter().flatten().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("\n"),
    }
}

/// The `WM_CLASS` class of sandbox `id`'s active window, as `xdotool` and
/// `xprop` in the sandbox say.
async fn active_class(provider: &dyn SandboxProvider, id: &SandboxId) -> String {
    let command = r#"xprop -id "$(xdotool getactivewindow)" WM_CLASS"#;
    let out = provider.run(id, command, Duration::from_secs(10)).await.expect("run in the sandbox");
    out.stdout.rsplit('"').nth(1).unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_the_planners_firefox_is_open_and_focused_before_the_first_step() {
    let server = ScriptedServer::start().await;
    let plan = json!({"application": "firefox", "steps": ["read the page"]});
    server.push(anthropic::final_answer(&plan.to_string()));
    let gate = Gate::new();
    server.push(anthropic::final_answer("Firefox shows a blank page.").behind(&gate));
    let fleet = fleet(Vec::new(), anthropic_env(&server), None).await;
    let id = fleet.submit(planned_browser_task()).await;

    flotilla_tests::desktop::eventually("the executor's first model call", Duration::from_secs(90), async || {
        server.received().len() >= 2
    })
    .await;
    let history = events(&fleet.queue, &id).await;
    let sandbox = SandboxId::parse(&sandbox_ids(&history)[0]).expect("a sandbox id");
    let active = active_class(fleet.pool.provider().as_ref(), &sandbox).await;
    gate.open();
    assert_eq!(active.to_ascii_lowercase(), "firefox-esr", "Firefox has the focus when the first step starts");
    fleet.wait_ended(&id).await;
    let done = record(&fleet.queue, &id).await;
    assert_eq!(done.status, TaskStatus::Succeeded, "{:?}", done.error);
    let planning = first_text(&server.received()[0].body);
    assert!(planning.contains("chromium, firefox, terminal"), "the planner chooses among the template's apps: {planning}");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_an_application_the_template_lacks_ends_the_task_with_app_unavailable() {
    let server = ScriptedServer::start().await;
    let plan = json!({"application": "libreoffice", "steps": ["make a spreadsheet"]});
    server.push(anthropic::final_answer(&plan.to_string()));
    let fleet = fleet(Vec::new(), anthropic_env(&server), None).await;
    let (id, history) = fleet.run_to_end(planned_browser_task()).await;

    let done = record(&fleet.queue, &id).await;
    assert_eq!((done.status, done.code), (TaskStatus::Failed, Some(StopCode::AppUnavailable)), "{history:?}");
    let error = done.error.unwrap_or_default();
    assert!(error.contains("\"libreoffice\"") && error.contains("\"browser\"") && error.contains("firefox"), "{error}");
    assert_eq!(server.received().len(), 1, "no step ran: only the planning call");
    assert_eq!(count(&history, "step_started"), 0);
    fleet.stop().await;
}

#[test]
fn a_worker_whose_template_needs_a_missing_program_stops_at_start_in_one_line() {
    let redis = flotilla_tests::RedisServer::start();
    let config = flotilla_tests::config_file(
        "[templates.kiosk]\napps = [{ name = \"kiosk\", command = \"exec flotilla-no-such-browser\", window_class = \"kiosk\", start = true }]\n",
    );
    let env = flotilla_tests::fleet::test_env(
        &redis,
        &unique_prefix(),
        &[("FLOTILLA_SANDBOX_PROVIDER", "local"), ("FLOTILLA_CONFIG", config.to_str().expect("a UTF-8 path"))],
    );
    let mut worker = std::process::Command::new(flotilla_tests::fleet::binary("flotilla-worker"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn flotilla-worker (built by `cargo build --bins`)");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = worker.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = worker.kill();
            panic!("the worker did not stop at start");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut worker.stderr.take().expect("stderr"), &mut stderr).expect("read");
    assert!(!status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line says why:\n{stderr}");
    assert!(lines[0].contains("template \"kiosk\"") && lines[0].contains("flotilla-no-such-browser"), "{stderr}");
}
