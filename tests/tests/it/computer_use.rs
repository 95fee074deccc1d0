//! The model-driven pipelines end to end: a worker with real local desktops
//! talks to local servers that speak the OpenAI Responses and Anthropic
//! Messages wire formats, scripted per test. The model sees the screen
//! scaled to 1024×768 and its coordinates land on the 1280×960 desktop
//! scaled back; a safety check waits for a human's answer through the API;
//! a 429 is waited out; a malformed answer ends the attempt with a clear
//! error.

use base64::Engine;
use flotilla_tests::desktop::{count, performed, png_size, DesktopFleet, DesktopOptions};
use flotilla_tests::fakes::{anthropic, openai, Recorded, Reply, ScriptedServer};
use flotilla_tests::fleet::binary;
use flotilla_tests::tasks::{events, record};
use flotilla_tests::{api_key, spawn_api, ApiClient};
use flotilla_types::action::{Action, MouseButton};
use flotilla_types::event::EventKind;
use flotilla_types::task::{StopCode, TaskStatus};
use serde_json::{json, Value};

/// The desktop size: larger than what the model sees, so scaling shows.
const SCREEN: [u32; 2] = [1280, 960];

async fn openai_fleet(server: &ScriptedServer) -> DesktopFleet {
    let env = vec![("OPENAI_BASE_URL", format!("{}/v1", server.url())), ("OPENAI_API_KEY", "sk-test-openai-secret".to_owned())];
    DesktopFleet::start(DesktopOptions { env, ..DesktopOptions::default() }).await
}

async fn anthropic_fleet(server: &ScriptedServer) -> DesktopFleet {
    let env = vec![("ANTHROPIC_BASE_URL", server.url()), ("ANTHROPIC_API_KEY", "sk-ant-test-secret".to_owned())];
    DesktopFleet::start(DesktopOptions { env, ..DesktopOptions::default() }).await
}

fn task(pipeline: &str, extra: Value) -> Value {
    let mut spec = json!({
        "prompt": "write a note in the terminal",
        "pipeline": pipeline,
        "sandbox": {"resolution": SCREEN},
        "retry": {"max_attempts": 1}
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    spec
}

/// Every base64 PNG in a request body, decoded.
fn images_in(body: &Value) -> Vec<Vec<u8>> {
    let mut found = Vec::new();
    collect_images(body, &mut found);
    found
}

fn collect_images(value: &Value, found: &mut Vec<Vec<u8>>) {
    match value {
        Value::String(text) => {
            let data = text.strip_prefix("data:image/png;base64,").unwrap_or(text);
            if data.starts_with("iVBORw0KGgo") {
                found.push(base64::engine::general_purpose::STANDARD.decode(data).expect("base64 image"));
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_images(v, found)),
        Value::Object(fields) => fields.values().for_each(|v| collect_images(v, found)),
        _ => {}
    }
}

fn to_responses(received: &[Recorded]) -> Vec<&Recorded> {
    received.iter().filter(|r| r.path == "/v1/responses").collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_openai_cua_task_acts_through_scaled_coordinates_until_the_model_is_done() {
    let server = ScriptedServer::start().await;
    server.push(openai::reply(
        "resp_1",
        vec![openai::reasoning("click the terminal"), openai::computer_call("call_1", openai::click(400, 300, "left"))],
    ));
    server.push(openai::reply(
        "resp_2",
        vec![openai::computer_call_batch("call_2", vec![openai::type_text("echo cua"), openai::keypress(&["ENTER"])])],
    ));
    server.push(openai::reply("resp_3", vec![openai::message("The note is written.")]));
    let fleet = openai_fleet(&server).await;
    let (id, events) = fleet.run_to_end(task("openai-cua", json!({}))).await;

    let done = record(&fleet.queue, &id).await;
    assert_eq!(done.status, TaskStatus::Succeeded, "{events:?}");
    assert_eq!(done.result.as_ref().and_then(|r| r["text"].as_str()), Some("The note is written."));
    let usage = done.usage.expect("usage");
    assert_eq!((usage.input_tokens, usage.output_tokens), (3000, 150), "usage adds up over the turns");
    assert_eq!(
        performed(&events),
        [
            Action::Click { x: 500, y: 375, button: MouseButton::Left },
            Action::Type { text: "echo cua".into() },
            Action::Keypress { keys: vec!["enter".into()] },
        ],
        "model coordinates scaled by 1280/1024, keys mapped"
    );
    assert!(events.iter().any(|e| matches!(&e.kind, EventKind::Reasoning { text } if text == "click the terminal")));

    let requests = server.received();
    let requests = to_responses(&requests);
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].header("authorization"), Some("Bearer sk-test-openai-secret"));
    assert_eq!(requests[1].body["previous_response_id"], "resp_1");
    assert_eq!(requests[2].body["previous_response_id"], "resp_2");
    for request in &requests {
        let images = images_in(&request.body);
        assert_eq!(images.len(), 1, "only the newest screen is sent");
        assert_eq!(png_size(&images[0]), (1024, 768), "the model sees the screen scaled");
    }
    let first = images_in(&requests[0].body).remove(0);
    let last = images_in(&requests[2].body).remove(0);
    assert_ne!(first, last, "typing into the terminal changed the screen the model saw");
    let stored = serde_json::to_string(&events).expect("events");
    assert!(!stored.contains("sk-test-openai-secret"), "the key never appears in events");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_safety_check_waits_for_a_human_and_goes_on_once_approved() {
    let server = ScriptedServer::start().await;
    let call = openai::with_safety_check(
        openai::computer_call("call_1", openai::click(10, 10, "left")),
        "sc_1",
        "malicious_instructions",
        "The page asks to transfer money.",
    );
    server.push(openai::reply("resp_1", vec![call]));
    server.push(openai::reply("resp_2", vec![openai::message("Done after approval.")]));
    let fleet = openai_fleet(&server).await;
    let api = spawn_api(fleet.config.clone()).await;
    let client = ApiClient::new(&api, api_key());
    let id = fleet.submit(task("openai-cua", json!({}))).await;

    fleet.wait_until_waiting(&id).await;
    let waiting = record(&fleet.queue, &id).await;
    assert_eq!(waiting.code, Some(StopCode::SensitiveAction));
    assert_eq!(count(&events(&fleet.queue, &id).await, "action"), 0, "nothing is done before the human answers");
    let (status, body) =
        client.post(&format!("/v1/tasks/{id}/input"), &json!({"decision": "approve", "message": "go ahead"})).await;
    assert_eq!(status, 202, "{body}");
    fleet.wait_ended(&id).await;

    let done = record(&fleet.queue, &id).await;
    let events = events(&fleet.queue, &id).await;
    assert_eq!(done.status, TaskStatus::Succeeded, "{events:?}");
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.name()).collect();
    let waited = kinds.iter().position(|k| *k == "waiting").expect("a waiting event");
    let answered = kinds.iter().position(|k| *k == "input").expect("an input event");
    let acted = kinds.iter().position(|k| *k == "action").expect("an action");
    assert!(waited < answered && answered < acted, "{kinds:?}");
    let requests = server.received();
    let second = &to_responses(&requests)[1].body;
    let acknowledged = json!([{"id": "sc_1", "code": "malicious_instructions", "message": "The page asks to transfer money."}]);
    let output = second["input"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["type"] == "computer_call_output"))
        .expect("a call output");
    assert_eq!(output["acknowledged_safety_checks"], acknowledged);

    let (status, body) = client.post(&format!("/v1/tasks/{id}/input"), &json!({"decision": "approve"})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (409, Some("conflict")), "only a waiting task takes input");
    fleet.stop().await;
}

/// Denied from the command line, as an operator would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_denied_safety_check_ends_the_task() {
    let server = ScriptedServer::start().await;
    let call = openai::with_safety_check(
        openai::computer_call("call_1", openai::click(10, 10, "left")),
        "sc_1",
        "irrelevant_domain",
        "Off-task site.",
    );
    server.push(openai::reply("resp_1", vec![call]));
    let fleet = openai_fleet(&server).await;
    let api = spawn_api(fleet.config.clone()).await;
    let id = fleet.submit(task("openai-cua", json!({}))).await;
    fleet.wait_until_waiting(&id).await;
    let cli = tokio::process::Command::new(binary("flotilla"))
        .args(["--api", &api.base_url, "--key", api_key(), "deny", id.as_str(), "--message", "not that site"])
        .output()
        .await
        .expect("run flotilla deny");
    assert!(cli.status.success(), "flotilla deny: {}", String::from_utf8_lossy(&cli.stderr));
    assert_eq!(String::from_utf8_lossy(&cli.stdout).trim(), format!("{id} denied"));
    fleet.wait_ended(&id).await;
    let done = record(&fleet.queue, &id).await;
    assert_eq!((done.status, done.code), (TaskStatus::Failed, Some(StopCode::SensitiveAction)));
    assert!(done.error.as_deref().is_some_and(|e| e.contains("not that site")), "{:?}", done.error);
    assert_eq!(count(&events(&fleet.queue, &id).await, "action"), 0);
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_rate_limited_model_is_waited_out_and_a_malformed_answer_ends_the_attempt() {
    let server = ScriptedServer::start().await;
    server.push(openai::error(429, "rate_limit_exceeded", "slow down").header("retry-after", "1"));
    server.push(openai::reply("resp_1", vec![openai::computer_call("call_1", openai::click(5, 5, "left"))]));
    server.push(openai::reply("resp_2", vec![openai::computer_call("call_2", json!({"type": "click", "y": 5}))]));
    let fleet = openai_fleet(&server).await;
    let (id, events) = fleet.run_to_end(task("openai-cua", json!({}))).await;

    let done = record(&fleet.queue, &id).await;
    assert_eq!(done.status, TaskStatus::Failed, "{events:?}");
    let error = done.error.clone().unwrap_or_default();
    assert!(error.contains("malformed") && error.contains("action.x"), "the error names what was wrong: {error}");
    assert_eq!(count(&events, "action_completed"), 1, "the step before the bad answer ran after the 429 was waited out");
    assert_eq!(to_responses(&server.received()).len(), 3);
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_claude_computer_use_runs_every_step_and_answers_each_tool_use() {
    let server = ScriptedServer::start().await;
    server.push(anthropic::action_turn("toolu_1", json!({"action": "left_click", "coordinate": [512, 384]})));
    server.push(anthropic::action_turn("toolu_2", json!({"action": "type", "text": "echo claude"})));
    server.push(anthropic::action_turn("toolu_3", json!({"action": "key", "text": "Return"})));
    server.push(anthropic::final_answer("Typed it."));
    let fleet = anthropic_fleet(&server).await;
    let (id, events) = fleet.run_to_end(task("claude-computer-use", json!({"model": "claude-sonnet-4-6"}))).await;

    let done = record(&fleet.queue, &id).await;
    assert_eq!(done.status, TaskStatus::Succeeded, "{events:?}");
    assert_eq!(done.result.as_ref().and_then(|r| r["text"].as_str()), Some("Typed it."));
    assert_eq!(
        performed(&events),
        [
            Action::Click { x: 640, y: 480, button: MouseButton::Left },
            Action::Type { text: "echo claude".into() },
            Action::Keypress { keys: vec!["Return".into()] },
        ]
    );
    let requests = server.received();
    assert_eq!(requests.len(), 4);
    for (i, request) in requests.iter().enumerate() {
        assert_eq!(request.path, "/v1/messages");
        assert_eq!(request.header("x-api-key"), Some("sk-ant-test-secret"));
        assert_eq!(request.header("anthropic-beta"), Some("computer-use-2025-11-24"));
        assert_eq!(request.body["tools"][0]["display_width_px"], 1024);
        assert_eq!(request.body["tools"][0]["display_height_px"], 768);
        let images = images_in(&request.body);
        // The default history keeps the newest 3 screens (and drops 10 at
        // a time), so a short task's requests carry each screen so far.
        assert_eq!(images.len(), i + 1, "request {i} carries the screens so far");
        assert!(images.iter().all(|image| png_size(image) == (1024, 768)));
        let breakpoints = request.body.to_string().matches("cache_control").count();
        assert_eq!(breakpoints, (i + 1).min(3) + 1, "request {i}: the tools and the newest user turns, 4 at most");
    }
    let last = requests[3].body["messages"].as_array().expect("messages");
    let result = last.last().and_then(|m| m["content"][0].as_object()).expect("a tool result");
    assert_eq!(result["tool_use_id"], "toolu_3");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_an_openai_model_asks_a_human_and_goes_on_with_the_answer() {
    let server = ScriptedServer::start().await;
    let ask = openai::function_call("call_ask", "ask_human", json!({"question": "Which account should I use?"}));
    server.push(openai::reply("resp_1", vec![ask]));
    server.push(openai::reply("resp_2", vec![openai::message("Used the work account.")]));
    let fleet = openai_fleet(&server).await;
    let api = spawn_api(fleet.config.clone()).await;
    let client = ApiClient::new(&api, api_key());
    let id = fleet.submit(task("openai-cua", json!({}))).await;

    fleet.wait_until_waiting(&id).await;
    let waiting = record(&fleet.queue, &id).await;
    assert_eq!(waiting.code, Some(StopCode::HumanIntervention));
    let asked = events(&fleet.queue, &id).await.into_iter().find_map(|e| match e.kind {
        EventKind::Waiting { code, message } => Some((code, message)),
        _ => None,
    });
    assert_eq!(asked, Some(("human-intervention".into(), "Which account should I use?".into())));
    let (status, body) =
        client.post(&format!("/v1/tasks/{id}/input"), &json!({"decision": "approve", "message": "the work one"})).await;
    assert_eq!(status, 202, "{body}");
    fleet.wait_ended(&id).await;

    let done = record(&fleet.queue, &id).await;
    assert_eq!(done.status, TaskStatus::Succeeded, "{:?}", done.error);
    let requests = server.received();
    let second = &to_responses(&requests)[1].body;
    let answer = second["input"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["type"] == "function_call_output"))
        .expect("a function output");
    assert_eq!((answer["call_id"].as_str(), answer["output"].as_str()), (Some("call_ask"), Some("the work one")));
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_claude_model_asks_a_human_who_declines_and_the_task_ends() {
    let server = ScriptedServer::start().await;
    server.push(Reply::json(anthropic::message(
        vec![anthropic::tool_use("toolu_ask", "ask_human", json!({"question": "May I delete the old files?"}))],
        "tool_use",
    )));
    let fleet = anthropic_fleet(&server).await;
    let api = spawn_api(fleet.config.clone()).await;
    let client = ApiClient::new(&api, api_key());
    let id = fleet.submit(task("claude-computer-use", json!({}))).await;

    fleet.wait_until_waiting(&id).await;
    assert_eq!(record(&fleet.queue, &id).await.code, Some(StopCode::HumanIntervention));
    let (status, _) = client.post(&format!("/v1/tasks/{id}/input"), &json!({"decision": "deny", "message": "keep them"})).await;
    assert_eq!(status, 202);
    fleet.wait_ended(&id).await;
    let done = record(&fleet.queue, &id).await;
    assert_eq!((done.status, done.code), (TaskStatus::Failed, Some(StopCode::HumanIntervention)));
    assert!(done.error.as_deref().is_some_and(|e| e.contains("keep them")), "{:?}", done.error);
    assert_eq!(server.received().len(), 1, "nothing more is asked of the model");
    fleet.stop().await;
}
