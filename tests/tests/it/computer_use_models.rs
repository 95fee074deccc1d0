//! Today's computer-use models end to end on real local desktops, against
//! local servers speaking the Messages and Gemini wire formats: a Claude
//! `computer_toolset_20260801` turn of three calls whose second fails; the
//! step-down to `computer_20251124` when an endpoint refuses the toolset,
//! announced and remembered for later tasks; and the `gemini-computer-use`
//! pipeline, whose normalized points land on the screen's own pixels and
//! whose confirmations wait for a human.

use flotilla_tests::desktop::{performed, png_size, DesktopFleet, DesktopOptions};
use flotilla_tests::fakes::{anthropic, gemini, Recorded, ScriptedServer};
use flotilla_tests::tasks::{events, record};
use flotilla_tests::{api_key, spawn_api, ApiClient};
use flotilla_types::action::{Action, MouseButton};
use flotilla_types::event::EventKind;
use flotilla_types::task::{StopCode, TaskStatus};
use flotilla_worker::model::NOT_EXECUTED;
use serde_json::{json, Value};

async fn fleet(env: Vec<(&'static str, String)>) -> DesktopFleet {
    DesktopFleet::start(DesktopOptions { env, ..DesktopOptions::default() }).await
}

fn anthropic_env(server: &ScriptedServer) -> Vec<(&'static str, String)> {
    vec![("ANTHROPIC_BASE_URL", server.url()), ("ANTHROPIC_API_KEY", "sk-ant-test-secret".to_owned())]
}

fn gemini_env(server: &ScriptedServer) -> Vec<(&'static str, String)> {
    vec![("GEMINI_BASE_URL", server.url()), ("GEMINI_API_KEY", "gemini-test-secret".to_owned())]
}

fn task(pipeline: &str, screen: [u32; 2], extra: Value) -> Value {
    let mut spec = json!({
        "prompt": "write a note in the terminal",
        "pipeline": pipeline,
        "sandbox": {"resolution": screen},
        "retry": {"max_attempts": 1}
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    spec
}

fn tool_type(request: &Recorded) -> &str {
    request.body["tools"][0]["type"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_claude_toolset_batch_stops_at_its_failing_call_and_answers_every_call() {
    let server = ScriptedServer::start().await;
    let batch = anthropic::message(
        vec![
            anthropic::signed_thinking("", "EqoBCkgIARABGAIiQO1m2n3o4p5q6r7s8t9u0vEmptyBlock"),
            anthropic::thinking("Click the terminal, scroll, then type."),
            anthropic::text("I'll do three things."),
            anthropic::member("toolu_1", "left_click", json!({"coordinate": [512, 384]})),
            anthropic::member(
                "toolu_2",
                "scroll",
                json!({"scroll_direction": "down", "scroll_amount": 5000, "coordinate": [10, 10]}),
            ),
            anthropic::member("toolu_3", "type", json!({"text": "echo never"})),
        ],
        "tool_use",
    );
    server.push(flotilla_tests::fakes::Reply::json(batch.clone()));
    server.push(anthropic::final_answer("The scroll failed; stopping."));
    let fleet = fleet(anthropic_env(&server)).await;
    let (id, events) = fleet.run_to_end(task("claude-computer-use", [1280, 960], json!({"model": "claude-opus-5-5"}))).await;

    let done = record(&fleet.queue, &id).await;
    assert_eq!(done.status, TaskStatus::Succeeded, "{events:?}");
    assert_eq!(performed(&events), [Action::Click { x: 640, y: 480, button: MouseButton::Left }], "the first call ran");
    let asked: Vec<&Action> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Action { action } => Some(action),
            _ => None,
        })
        .collect();
    assert_eq!(asked.len(), 2, "the click and the refused scroll were tried, the typing never: {asked:?}");
    assert!(!asked.iter().any(|a| matches!(a, Action::Type { .. })));
    assert!(events
        .iter()
        .any(|e| matches!(&e.kind, EventKind::Reasoning { text } if text == "Click the terminal, scroll, then type.")));

    let requests = server.received();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.header("anthropic-beta"), None, "no beta header");
        assert!(request.body.get("tool_choice").is_none(), "no forced tool_choice");
        assert_eq!(tool_type(request), "computer_toolset_20260801");
    }
    let messages = requests[1].body["messages"].as_array().expect("messages");
    let sent_back = serde_json::to_string(&messages[1]["content"]).expect("json");
    assert_eq!(sent_back, serde_json::to_string(&batch["content"]).expect("json"), "thinking blocks go back byte for byte");
    let results = messages[2]["content"].as_array().expect("tool results");
    let summary: Vec<(&str, bool, &str)> = results
        .iter()
        .map(|r| {
            assert_eq!(r["toolset_name"], "computer");
            (r["tool_use_id"].as_str().unwrap_or(""), r["is_error"] == true, r["content"][0]["text"].as_str().unwrap_or(""))
        })
        .collect();
    assert_eq!(summary[0], ("toolu_1", false, "OK"));
    assert_eq!((summary[1].0, summary[1].1), ("toolu_2", true));
    assert!(summary[1].2.contains("scroll"), "the failure says what went wrong: {}", summary[1].2);
    assert_eq!(summary[2], ("toolu_3", true, NOT_EXECUTED));
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_refused_toolset_steps_down_once_per_model_and_says_so() {
    let server = ScriptedServer::start().await;
    let model = "claude-opus-5-5";
    server.push(anthropic::unsupported_tool(model, "computer_toolset_20260801", &["computer_20251124"]));
    server.push(anthropic::action_turn("toolu_1", json!({"action": "left_click", "coordinate": [100, 100]})));
    server.push(anthropic::final_answer("first task done"));
    server.push(anthropic::final_answer("second task done"));
    let fleet = fleet(anthropic_env(&server)).await;
    let (first, first_events) = fleet.run_to_end(task("claude-computer-use", [1024, 768], json!({"model": model}))).await;
    assert_eq!(record(&fleet.queue, &first).await.status, TaskStatus::Succeeded, "{first_events:?}");
    let announced = first_events.iter().find_map(|e| match &e.kind {
        EventKind::Retrying { error, .. } => Some(error.clone()),
        _ => None,
    });
    let announced = announced.expect("a retrying event says the tool changed");
    assert!(announced.contains("computer_toolset_20260801") && announced.contains("computer_20251124"), "{announced}");
    assert_eq!(performed(&first_events), [Action::Click { x: 100, y: 100, button: MouseButton::Left }]);

    let (second, second_events) = fleet.run_to_end(task("claude-computer-use", [1024, 768], json!({"model": model}))).await;
    assert_eq!(record(&fleet.queue, &second).await.status, TaskStatus::Succeeded, "{second_events:?}");
    assert!(!second_events.iter().any(|e| e.kind.name() == "retrying"), "nothing to announce the second time");
    let requests = server.received();
    let tools: Vec<(&str, Option<&str>)> = requests.iter().map(|r| (tool_type(r), r.header("anthropic-beta"))).collect();
    assert_eq!(
        tools,
        [
            ("computer_toolset_20260801", None),
            ("computer_20251124", Some("computer-use-2025-11-24")),
            ("computer_20251124", Some("computer-use-2025-11-24")),
            ("computer_20251124", Some("computer-use-2025-11-24")),
        ],
        "the later task starts where the first ended"
    );
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_gemini_normalized_clicks_land_on_the_centre_pixel_of_each_desktop() {
    let server = ScriptedServer::start().await;
    let fleet = fleet(gemini_env(&server)).await;
    for (screen, centre, legacy) in [([1024, 768], (512, 384), false), ([1920, 1080], (960, 540), true)] {
        let name = if legacy { "click_at" } else { "click" };
        server.push(gemini::calls_turn(vec![
            gemini::thought("The terminal is in the middle."),
            gemini::call(name, json!({"x": 500, "y": 500, "intent": "focus the terminal"})),
        ]));
        server.push(gemini::final_answer("Clicked the centre."));
        let (id, events) = fleet.run_to_end(task("gemini-computer-use", screen, json!({}))).await;
        let done = record(&fleet.queue, &id).await;
        assert_eq!(done.status, TaskStatus::Succeeded, "{events:?}");
        assert_eq!(done.result.as_ref().and_then(|r| r["text"].as_str()), Some("Clicked the centre."));
        let expected = [Action::Click { x: centre.0, y: centre.1, button: MouseButton::Left }];
        assert_eq!(performed(&events), expected, "{name} at (500, 500) on {screen:?}");
        let (input, output) = (2 * gemini::PROMPT_TOKENS, 2 * (gemini::CANDIDATE_TOKENS + gemini::THOUGHT_TOKENS));
        let usage = done.usage.as_ref().expect("usage");
        assert_eq!((usage.input_tokens, usage.output_tokens), (input, output), "usage counted");
        assert!(events.iter().any(|e| matches!(&e.kind, EventKind::Reasoning { text } if text == "focus the terminal")));
    }
    let requests = server.received();
    assert_eq!(requests.len(), 4);
    for request in &requests {
        assert_eq!(request.path, "/v1beta/models/gemini-3.6-flash:generateContent");
        assert_eq!(request.header("x-goog-api-key"), Some("gemini-test-secret"));
        assert_eq!(request.body["tools"][0], json!({"computerUse": {"environment": "ENVIRONMENT_DESKTOP"}}));
    }
    let contents = requests[1].body["contents"].as_array().expect("contents");
    assert_eq!(contents[1]["parts"][1]["thoughtSignature"], gemini::THOUGHT_SIGNATURE, "the model turn goes back unchanged");
    let answer = &contents[2]["parts"][0]["functionResponse"];
    assert_eq!(answer["name"], "click");
    let png = answer["parts"][0]["inlineData"]["data"].as_str().expect("the screenshot");
    let png = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, png).expect("base64");
    assert_eq!(png_size(&png), (1024, 768), "the screen after the click");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_gemini_step_marked_for_confirmation_waits_and_runs_once_approved() {
    let server = ScriptedServer::start().await;
    let args = gemini::confirming(json!({"x": 250, "y": 250}), "This deletes a file.");
    server.push(gemini::calls_turn(vec![gemini::call("click", args)]));
    server.push(gemini::final_answer("Deleted after approval."));
    let fleet = fleet(gemini_env(&server)).await;
    let api = spawn_api(fleet.config.clone()).await;
    let client = ApiClient::new(&api, api_key());
    let id = fleet.submit(task("gemini-computer-use", [1024, 768], json!({}))).await;

    fleet.wait_until_waiting(&id).await;
    let waiting = record(&fleet.queue, &id).await;
    assert_eq!(waiting.code, Some(StopCode::SensitiveAction));
    assert!(performed(&events(&fleet.queue, &id).await).is_empty(), "nothing runs before the human answers");
    let (status, body) = client.post(&format!("/v1/tasks/{id}/input"), &json!({"decision": "approve"})).await;
    assert_eq!(status, 202, "{body}");
    fleet.wait_ended(&id).await;

    let done = record(&fleet.queue, &id).await;
    let history = events(&fleet.queue, &id).await;
    assert_eq!(done.status, TaskStatus::Succeeded, "{history:?}");
    assert_eq!(performed(&history), [Action::Click { x: 256, y: 192, button: MouseButton::Left }]);
    let requests = server.received();
    let response = &requests[1].body["contents"][2]["parts"][0]["functionResponse"]["response"];
    assert_eq!(response["safety_acknowledgement"], "true", "the approval goes back with the call's result");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_takes_and_documents_the_gemini_pipeline() {
    let redis = flotilla_tests::RedisServer::start();
    let config = flotilla_tests::test_config(&redis, &flotilla_tests::unique_prefix(), &[]);
    let api = spawn_api(config).await;
    let client = ApiClient::new(&api, api_key());
    let (status, body) = client.post("/v1/tasks", &json!({"prompt": "look", "pipeline": "gemini-computer-use"})).await;
    assert!(status == 201 || status == 202, "{status}: {body}");
    let (status, doc) = client.get("/openapi.json").await;
    assert_eq!(status, 200);
    let listed = doc.to_string();
    assert!(listed.contains("\"gemini-computer-use\""), "the OpenAPI enum lists the pipeline");
}
