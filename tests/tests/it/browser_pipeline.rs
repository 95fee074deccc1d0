//! The `browser` pipeline end to end on a real desktop of the `browser`
//! template, against each of the three protocol-faithful model servers: a
//! scripted model goes to a sign-up form the test serves (reached through
//! the sandbox's egress exception, as the internet would be), fills its two
//! fields and submits it in five steps; the test's server receives exactly
//! that submission (and, while the browser runs, nothing on the host's
//! network answers on its debugging port), and each provider's requests
//! carry its browser tool
//! shapes (Claude's `browser_toolset_20260801` with `toolset_name` and
//! `browser_state`, Gemini's `ENVIRONMENT_BROWSER` with the page's `url`,
//! OpenAI's computer tool beside a `navigate` function). The same task runs
//! on a sandbox host's desktop through the E2B provider, its DevTools port
//! reached through the host's edge.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::routing::{get, post};
use axum::Router;
use flotilla_sandbox::suite::host_address;
use flotilla_sandboxd::Sandboxd;
use flotilla_tests::desktop::{count, DesktopFleet, DesktopOptions};
use flotilla_tests::fakes::{anthropic, gemini, openai, Recorded, Reply, ScriptedServer};
use flotilla_tests::tasks::record;
use flotilla_types::event::{Event, EventKind};
use flotilla_types::task::{StopCode, TaskStatus};
use flotilla_worker::sandbox::{E2bProvider, LocalConfig, LocalProvider, MemoryProvider};
use serde_json::{json, Value};

/// The form: three bands of the viewport (name 5–30 %, email 36–61 %,
/// submit 67–95 % of its height), so a point a model names lands on the
/// field whatever the window's exact size.
const FORM: &str = r#"<!doctype html><html><head><title>Sign-up</title><style>
body { margin: 0; font: 24px sans-serif }
input, button { position: fixed; left: 5vw; width: 90vw; box-sizing: border-box; font-size: 5vh }
#name { top: 5vh; height: 25vh } #email { top: 36vh; height: 25vh } button { top: 67vh; height: 28vh }
</style></head><body><form method="post" action="/submit">
<input id="name" name="name" aria-label="Name">
<input id="email" name="email" type="email" aria-label="Email">
<button type="submit">Sign up</button>
</form></body></html>"#;

/// What the form posts when filled as the scripts fill it.
const SUBMISSION: &str = "name=Ada+Lovelace&email=ada%40example.com";

/// The test's web site: the form, and every submission it received with
/// whether, at that moment (the browser up and driven), the host's own
/// network had anything on the debugging port.
struct FormSite {
    url: String,
    submissions: Arc<Mutex<Vec<(String, bool)>>>,
}

async fn form_site() -> FormSite {
    let listener = tokio::net::TcpListener::bind(SocketAddr::from((host_address(), 0))).await.expect("binds");
    let addr = listener.local_addr().expect("addr");
    let submissions = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&submissions);
    let app = Router::new().route("/form", get(|| async { axum::response::Html(FORM) })).route(
        "/submit",
        post(move |body: String| async move {
            let devtools_on_host = tokio::net::TcpStream::connect(("127.0.0.1", 9222)).await.is_ok()
                || tokio::net::TcpStream::connect((host_address(), 9222)).await.is_ok();
            seen.lock().expect("lock").push((body, devtools_on_host));
            axum::response::Html("<!doctype html><title>Thanks</title><h1>Thanks for signing up</h1>")
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    FormSite { url: format!("http://{addr}/form"), submissions }
}

/// A fleet whose desktops reach the site's address, whose tenant may use
/// the `browser` template, with `env` for the model server.
async fn fleet(env: Vec<(&'static str, String)>) -> DesktopFleet {
    let config = flotilla_tests::config_file("[tenants.acme]\nsandbox_templates = [\"browser\"]\n");
    let mut env = env;
    env.push(("FLOTILLA_CONFIG", config.to_string_lossy().into_owned()));
    let provider = LocalProvider::new(LocalConfig { egress_exceptions: vec![host_address()], ..LocalConfig::default() });
    DesktopFleet::start(DesktopOptions { env, provider: Some(Arc::new(provider)), ..DesktopOptions::default() }).await
}

fn task(model: &str) -> Value {
    json!({
        "prompt": "sign up on the form as Ada Lovelace, ada@example.com",
        "pipeline": "browser",
        "model": model,
        "sandbox": {"template": "browser", "resolution": [1024, 768]},
        "retry": {"max_attempts": 1}
    })
}

/// Runs `model`'s task to its end and checks what every form task must
/// show: it succeeded and the site got exactly one submission, the one the
/// script typed, while the browser's debugging port was nowhere on the
/// host's network.
async fn run_form_task(fleet: &DesktopFleet, site: &FormSite, model: &str) -> Vec<Event> {
    let (id, events) = fleet.run_to_end(task(model)).await;
    let done = record(&fleet.queue, &id).await;
    assert_eq!(done.status, TaskStatus::Succeeded, "{:?}\n{events:#?}", done.error);
    let submissions = site.submissions.lock().expect("lock").clone();
    assert_eq!(
        submissions,
        [(SUBMISSION.to_owned(), false)],
        "exactly the scripted submission arrived, no DevTools port on the host"
    );
    events
}

/// The browser calls a task's events report, by name.
fn browser_calls(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Block { block } if block["type"] == "browser_call" => block["call"]["call"].as_str().map(str::to_owned),
            _ => None,
        })
        .collect()
}

fn tool_results(request: &Recorded) -> Vec<Value> {
    let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or_default();
    last["content"].as_array().cloned().unwrap_or_default().into_iter().filter(|b| b["type"] == "tool_result").collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_claude_browser_toolset_task_fills_and_submits_a_form() {
    let site = form_site().await;
    let server = ScriptedServer::start().await;
    let turn = |blocks: Vec<Value>| Reply::json(anthropic::message(blocks, "tool_use"));
    let by_ref = |reference: &str| json!({"type": "ref", "ref": reference});
    server.push(turn(vec![anthropic::browser_member("toolu_1", "navigate", json!({"url": site.url}))]));
    server.push(turn(vec![anthropic::browser_member("toolu_2", "read_page", json!({"filter": "interactive"}))]));
    server.push(turn(vec![
        anthropic::browser_member("toolu_3", "form_input", json!({"target": by_ref("ref_1"), "value": "Ada Lovelace"})),
        anthropic::browser_member("toolu_4", "form_input", json!({"target": by_ref("ref_2"), "value": "ada@example.com"})),
    ]));
    server.push(turn(vec![anthropic::browser_member("toolu_5", "left_click", json!({"target": by_ref("ref_3")}))]));
    server.push(anthropic::final_answer("Signed up."));
    let env = vec![("ANTHROPIC_BASE_URL", server.url()), ("ANTHROPIC_API_KEY", "sk-ant-test-secret".to_owned())];
    let fleet = fleet(env).await;

    let events = run_form_task(&fleet, &site, "claude-opus-5-5").await;
    assert_eq!(browser_calls(&events), ["navigate", "read_page", "form_input", "form_input", "click"]);
    let requests = server.received();
    assert_eq!(requests.len(), 5);
    assert_eq!(count(&events, "usage"), 5, "every model call's usage is counted, as in every pipeline");
    assert_eq!(requests[0].body["tools"][0]["type"], "browser_toolset_20260801");
    assert_eq!(requests[0].header("anthropic-beta"), None, "the browser toolset is GA");
    let navigated = &tool_results(&requests[1])[0];
    assert_eq!(navigated["toolset_name"], "browser");
    let state = navigated["content"].as_array().and_then(|c| c.iter().find(|b| b["type"] == "browser_state")).cloned();
    let state = state.expect("a successful browser call reports the browser's state");
    assert_eq!(state["tabs"][0]["url"], site.url.as_str());
    assert_eq!((state["tabs"][0]["title"].as_str(), state["tabs"][0]["active"].as_bool()), (Some("Sign-up"), Some(true)));
    let page = tool_results(&requests[2])[0]["content"][0]["text"].as_str().unwrap_or_default().to_owned();
    for line in [r#"[ref_1] textbox "Name""#, r#"[ref_2] textbox "Email""#, r#"[ref_3] button "Sign up""#] {
        assert!(page.contains(line), "read_page lists {line}: {page}");
    }
    assert_eq!(tool_results(&requests[3]).len(), 2, "both calls of the batch are answered");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_gemini_browser_environment_task_fills_and_submits_a_form() {
    let site = form_site().await;
    let server = ScriptedServer::start().await;
    let typed = |y: u32, text: &str| json!({"x": 500, "y": y, "text": text, "press_enter": false, "clear_before_typing": true});
    server.push(gemini::calls_turn(vec![gemini::call("navigate", json!({"url": site.url}))]));
    server.push(gemini::calls_turn(vec![gemini::call("type_text_at", typed(170, "Ada Lovelace"))]));
    server.push(gemini::calls_turn(vec![gemini::call("type_text_at", typed(480, "ada@example.com"))]));
    server.push(gemini::calls_turn(vec![gemini::call("click_at", json!({"x": 500, "y": 810}))]));
    server.push(gemini::final_answer("Signed up."));
    let env = vec![("GEMINI_BASE_URL", server.url()), ("GEMINI_API_KEY", "gemini-test-secret".to_owned())];
    let fleet = fleet(env).await;

    let events = run_form_task(&fleet, &site, "gemini-3.6-flash").await;
    assert_eq!(browser_calls(&events), ["navigate"]);
    let requests = server.received();
    assert_eq!(requests.len(), 5);
    assert_eq!(count(&events, "usage"), 5, "every model call's usage is counted, as in every pipeline");
    assert_eq!(requests[0].body["tools"][0], json!({"computerUse": {"environment": "ENVIRONMENT_BROWSER"}}));
    let contents = requests[1].body["contents"].as_array().cloned().unwrap_or_default();
    let reply = &contents.last().expect("a reply")["parts"][0]["functionResponse"];
    assert_eq!(reply["name"], "navigate");
    assert_eq!(reply["response"]["url"], site.url.as_str(), "the reply names the page, as the browser environment's do");
    fleet.stop().await;
}

/// The Gemini task on a `flotilla-sandboxd` desktop, as a fleet whose
/// workers use the E2B provider runs it: Chromium's DevTools port inside
/// the sandbox is reached through the host's edge, never on the host's
/// network.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_browser_task_on_a_sandbox_hosts_desktop_reaches_devtools_through_its_edge() {
    let site = form_site().await;
    let server = ScriptedServer::start().await;
    let typed = |y: u32, text: &str| json!({"x": 500, "y": y, "text": text, "press_enter": false, "clear_before_typing": true});
    server.push(gemini::calls_turn(vec![gemini::call("navigate", json!({"url": site.url}))]));
    server.push(gemini::calls_turn(vec![gemini::call("type_text_at", typed(170, "Ada Lovelace"))]));
    server.push(gemini::calls_turn(vec![gemini::call("type_text_at", typed(480, "ada@example.com"))]));
    server.push(gemini::calls_turn(vec![gemini::call("click_at", json!({"x": 500, "y": 810}))]));
    server.push(gemini::final_answer("Signed up."));
    let host = Sandboxd::start_with_internet(vec![host_address()]).await;
    let config = flotilla_tests::config_file("[tenants.acme]\nsandbox_templates = [\"browser\"]\n");
    let env = vec![
        ("GEMINI_BASE_URL", server.url()),
        ("GEMINI_API_KEY", "gemini-test-secret".to_owned()),
        ("FLOTILLA_CONFIG", config.to_string_lossy().into_owned()),
    ];
    let provider = E2bProvider::new(host.config()).expect("the E2B provider");
    let fleet =
        DesktopFleet::start(DesktopOptions { env, provider: Some(Arc::new(provider)), ..DesktopOptions::default() }).await;

    let events = run_form_task(&fleet, &site, "gemini-3.6-flash").await;
    assert_eq!(browser_calls(&events), ["navigate"]);
    assert_eq!(server.received().len(), 5);
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_an_openai_computer_tool_browser_task_fills_and_submits_a_form() {
    let site = form_site().await;
    let server = ScriptedServer::start().await;
    server.push(openai::reply("resp_1", vec![openai::function_call("call_1", "navigate", json!({"url": site.url}))]));
    let fill = openai::computer_call_batch(
        "call_2",
        vec![
            openai::click(500, 120, "left"),
            openai::type_text("Ada Lovelace"),
            openai::click(500, 340, "left"),
            openai::type_text("ada@example.com"),
        ],
    );
    server.push(openai::reply("resp_2", vec![fill]));
    server.push(openai::reply("resp_3", vec![openai::computer_call("call_3", openai::click(500, 560, "left"))]));
    server.push(openai::reply("resp_4", vec![openai::message("Signed up.")]));
    let env = vec![("OPENAI_BASE_URL", format!("{}/v1", server.url())), ("OPENAI_API_KEY", "sk-test-openai-secret".to_owned())];
    let fleet = fleet(env).await;

    let events = run_form_task(&fleet, &site, "gpt-6-astra").await;
    assert_eq!(browser_calls(&events), ["navigate"]);
    let requests = server.received();
    assert_eq!(requests.len(), 4);
    assert_eq!(count(&events, "usage"), 4, "every model call's usage is counted, as in every pipeline");
    let tools = requests[0].body["tools"].as_array().cloned().unwrap_or_default();
    assert_eq!(tools[0], json!({"type": "computer"}));
    assert!(tools.iter().any(|t| t["type"] == "function" && t["name"] == "navigate"), "{tools:?}");
    let input = requests[1].body["input"].as_array().cloned().unwrap_or_default();
    assert_eq!(input[0]["type"], "function_call_output");
    assert!(input[0]["output"].as_str().is_some_and(|o| o.contains(site.url.as_str())), "{input:?}");
    assert_eq!(input[1]["content"][0]["type"], "input_image", "the page after a navigation goes along as an image");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_task_on_a_provider_that_cannot_reach_the_browsers_port_ends_at_once_with_problem() {
    let server = ScriptedServer::start().await;
    let config = flotilla_tests::config_file("[tenants.acme]\nsandbox_templates = [\"browser\"]\n");
    let env = vec![
        ("ANTHROPIC_BASE_URL", server.url()),
        ("ANTHROPIC_API_KEY", "sk-ant-test-secret".to_owned()),
        ("FLOTILLA_CONFIG", config.to_string_lossy().into_owned()),
    ];
    // Screenless sandboxes that carry no port, as a provider without a relay.
    let provider = Arc::new(MemoryProvider::new());
    let fleet = DesktopFleet::start(DesktopOptions { env, provider: Some(provider), ..DesktopOptions::default() }).await;
    let mut spec = task("claude-opus-5-5");
    spec["retry"] = json!({"max_attempts": 3});
    let (id, events) = fleet.run_to_end(spec).await;
    let done = record(&fleet.queue, &id).await;
    assert_eq!(
        (done.status, done.attempts, done.code),
        (TaskStatus::Failed, 1, Some(StopCode::Problem)),
        "not retried: {events:#?}"
    );
    let message = done.error.unwrap_or_default();
    assert!(message.contains("memory provider cannot reach"), "the message names the provider: {message}");
    assert!(server.received().is_empty(), "no model call is made for a browser that cannot be driven");
    fleet.stop().await;
}
