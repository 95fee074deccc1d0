//! The OpenAI computer-use client against a scripted Responses API on
//! loopback: what it sends each turn, how it reads answers into actions,
//! and how it behaves when the API refuses, limits or fails.

use std::time::{Duration, Instant};

use axum::body::Bytes;
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use flotilla_config::Secret;
use flotilla_tests::fakes::openai::{
    click, computer_call, computer_call_batch, error, keypress, message, reasoning, reply, response, scroll, type_text,
    with_safety_check,
};
use flotilla_tests::fakes::{Recorded, Reply, ScriptedServer};
use flotilla_types::action::{Action, MouseButton};
use flotilla_worker::model::http::Endpoint;
use flotilla_worker::model::openai::{OpenAiConfig, OpenAiCua, OpenAiTool};
use flotilla_worker::model::{CallResult, ComputerModel, ModelAction, ModelError, SafetyCheck, Screen, ToolCall, Usage};
use serde_json::json;

const KEY: &str = "sk-test-4f9a0c2e7b1d";

/// A real PNG of `width` × `height` pixels, all of one grey `shade`.
fn png(width: u32, height: u32, shade: u8) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Grayscale);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().expect("png header");
    writer.write_image_data(&vec![shade; (width * height) as usize]).expect("png data");
    writer.finish().expect("png end");
    out
}

fn screen(shade: u8) -> Screen {
    Screen { png: Bytes::from(png(4, 3, shade)), width: 4, height: 3 }
}

fn data_url(screen: &Screen) -> String {
    format!("data:image/png;base64,{}", BASE64.encode(&screen.png))
}

fn endpoint(server: &ScriptedServer) -> Endpoint {
    let mut endpoint = Endpoint::new(format!("{}/v1", server.url()), Secret::new(KEY));
    endpoint.timeout = Duration::from_secs(10);
    endpoint.max_retries = 3;
    endpoint.min_delay = Duration::from_millis(10);
    endpoint.max_delay = Duration::from_millis(50);
    endpoint
}

fn client(server: &ScriptedServer, tool: OpenAiTool) -> OpenAiCua {
    OpenAiCua::new(OpenAiConfig::new(endpoint(server), tool), (1024, 768), Some("Work carefully.".into())).expect("client")
}

fn after(call_id: &str, screen: Screen) -> CallResult {
    CallResult { call_id: call_id.into(), screen, text: None, is_error: false }
}

/// The screen actions of a call, failing on any other kind.
fn acts(call: &ToolCall) -> Vec<Action> {
    call.actions
        .iter()
        .map(|a| match a {
            ModelAction::Act(act) => act.clone(),
            other => panic!("not a screen action: {other:?}"),
        })
        .collect()
}

fn keys(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

fn request(server: &ScriptedServer, index: usize) -> Recorded {
    server.received().get(index).cloned().unwrap_or_else(|| panic!("no request {index}"))
}

#[tokio::test]
async fn turns_chain_by_response_id_and_send_only_the_newest_screenshot() {
    let server = ScriptedServer::start().await;
    server.push(Reply::json(response(
        "resp_1",
        vec![reasoning("The browser is open; click the address bar."), computer_call("call_1", click(100, 40, "left"))],
        1_200,
        80,
    )));
    server.push(reply("resp_2", vec![message("The page is open.")]));
    let mut cua = client(&server, OpenAiTool::Preview);
    let first_screen = screen(10);
    let second_screen = screen(200);

    let turn = cua.start("Open example.com", &first_screen).await.expect("first turn");
    assert_eq!(turn.reasoning, ["The browser is open; click the address bar."]);
    assert_eq!(turn.calls.len(), 1);
    assert_eq!(turn.calls[0].id, "call_1");
    assert_eq!(acts(&turn.calls[0]), [Action::Click { x: 100, y: 40, button: MouseButton::Left }]);
    assert_eq!(turn.usage, Usage { input_tokens: 1_200, output_tokens: 80, ..Usage::default() });

    let first = request(&server, 0);
    assert_eq!(first.path, "/v1/responses");
    assert_eq!(first.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(first.body["model"], "computer-use-preview");
    assert_eq!(
        first.body["tools"][0],
        json!({"type": "computer_use_preview", "display_width": 1024, "display_height": 768, "environment": "linux"})
    );
    assert_eq!(first.body["tools"][1]["type"], "function");
    assert_eq!(first.body["tools"][1]["name"], "ask_human", "the model can ask the person behind the task");
    assert_eq!(first.body["instructions"], "Work carefully.");
    assert!(first.body.get("previous_response_id").is_none());
    let content = &first.body["input"][0]["content"];
    assert_eq!(content[0], json!({"type": "input_text", "text": "Open example.com"}));
    assert_eq!(content[1]["type"], "input_image");
    assert_eq!(content[1]["image_url"], data_url(&first_screen));

    let turn = cua.resume(vec![after("call_1", second_screen.clone())], &[]).await.expect("second turn");
    assert_eq!(turn.text.as_deref(), Some("The page is open."));
    assert!(turn.calls.is_empty());

    let second = request(&server, 1);
    assert_eq!(second.body["previous_response_id"], "resp_1");
    assert_eq!(second.body["instructions"], "Work carefully.");
    assert_eq!(
        second.body["input"],
        json!([{
            "type": "computer_call_output",
            "call_id": "call_1",
            "output": {"type": "computer_screenshot", "image_url": data_url(&second_screen)},
            "acknowledged_safety_checks": [],
        }])
    );
    let sent = second.body.to_string();
    assert!(!sent.contains(&BASE64.encode(&first_screen.png)), "the older screenshot was sent again");
}

#[tokio::test]
async fn a_ga_batch_maps_to_one_call_with_its_actions_in_order() {
    let server = ScriptedServer::start().await;
    let batch = vec![
        click(10, 20, "left"),
        type_text("flotilla"),
        keypress(&["ENTER"]),
        json!({"type": "wait"}),
        scroll(500, 400, 0, 300),
        json!({"type": "drag", "path": [{"x": 1, "y": 2}, {"x": 30, "y": 40}], "keys": ["SHIFT"]}),
        json!({"type": "screenshot"}),
    ];
    server.push(reply("resp_ga", vec![computer_call_batch("call_ga", batch)]));
    let mut cua = client(&server, OpenAiTool::Ga);

    let turn = cua.start("Search for flotilla", &screen(0)).await.expect("turn");
    assert_eq!(turn.calls.len(), 1);
    assert_eq!(turn.calls[0].id, "call_ga");
    assert_eq!(
        acts(&turn.calls[0]),
        [
            Action::Click { x: 10, y: 20, button: MouseButton::Left },
            Action::Type { text: "flotilla".into() },
            Action::Keypress { keys: keys(&["enter"]) },
            Action::Wait { ms: 1_000 },
            Action::Scroll { x: 500, y: 400, scroll_x: 0, scroll_y: 3 },
            Action::KeyDown { keys: keys(&["shift"]) },
            Action::Drag { path: vec![[1, 2], [30, 40]] },
            Action::KeyUp { keys: keys(&["shift"]) },
            Action::Screenshot {},
        ]
    );
    let sent = request(&server, 0);
    assert_eq!(sent.body["tools"][0], json!({"type": "computer"}));
    assert_eq!(sent.body["model"], "gpt-6-astra", "today's documented computer-use model");
}

#[tokio::test]
async fn openai_key_names_become_the_names_the_sandbox_presses() {
    let server = ScriptedServer::start().await;
    let batch = vec![keypress(&["CTRL", "ARROWLEFT"]), keypress(&["ESC"]), keypress(&["CMD", "c"]), keypress(&["ALT", "F4"])];
    server.push(reply("resp_keys", vec![computer_call_batch("call_keys", batch)]));
    let mut cua = client(&server, OpenAiTool::Ga);

    let turn = cua.start("Use the keyboard", &screen(0)).await.expect("turn");
    assert_eq!(
        acts(&turn.calls[0]),
        [
            Action::Keypress { keys: keys(&["ctrl", "left"]) },
            Action::Keypress { keys: keys(&["esc"]) },
            Action::Keypress { keys: keys(&["super", "c"]) },
            Action::Keypress { keys: keys(&["alt", "F4"]) },
        ]
    );
}

#[tokio::test]
async fn safety_checks_are_surfaced_then_acknowledged_in_the_next_request() {
    let server = ScriptedServer::start().await;
    let call = with_safety_check(
        computer_call("call_pay", click(300, 200, "left")),
        "cu_sc_1",
        "malicious_instructions",
        "The page may hold instructions that are not yours.",
    );
    server.push(reply("resp_1", vec![call]));
    server.push(reply("resp_2", vec![message("Paid.")]));
    let mut cua = client(&server, OpenAiTool::Preview);

    let turn = cua.start("Pay the invoice", &screen(0)).await.expect("turn");
    let expected = SafetyCheck {
        id: "cu_sc_1".into(),
        code: "malicious_instructions".into(),
        message: "The page may hold instructions that are not yours.".into(),
    };
    assert_eq!(turn.safety_checks, std::slice::from_ref(&expected));

    cua.resume(vec![after("call_pay", screen(1))], &turn.safety_checks).await.expect("approved turn");
    let second = request(&server, 1);
    assert_eq!(
        second.body["input"][0]["acknowledged_safety_checks"],
        json!([{"id": expected.id, "code": expected.code, "message": expected.message}])
    );
}

#[tokio::test]
async fn a_rate_limit_waits_as_long_as_retry_after_says_then_succeeds() {
    let server = ScriptedServer::start().await;
    server.push(error(429, "rate_limit_exceeded", "Rate limit reached").header("retry-after", "1"));
    server.push(reply("resp_1", vec![message("ok")]));
    let mut cua = client(&server, OpenAiTool::Preview);

    let started = Instant::now();
    let turn = cua.start("Wait your turn", &screen(0)).await.expect("success after the wait");
    assert_eq!(turn.text.as_deref(), Some("ok"));
    assert!(started.elapsed() >= Duration::from_millis(950), "retried after {:?}", started.elapsed());
    assert_eq!(server.received().len(), 2);
}

#[tokio::test]
async fn server_errors_are_retried_then_succeed() {
    let server = ScriptedServer::start().await;
    server.push(error(500, "server_error", "The server had an error"));
    server.push(Reply::raw(503, "upstream connect error"));
    server.push(reply("resp_1", vec![message("ok")]));
    let mut cua = client(&server, OpenAiTool::Preview);

    let turn = cua.start("Try again", &screen(0)).await.expect("success after retries");
    assert_eq!(turn.text.as_deref(), Some("ok"));
    assert_eq!(server.received().len(), 3);
}

#[tokio::test]
async fn a_refused_key_fails_at_once_and_the_error_never_shows_it() {
    let server = ScriptedServer::start().await;
    server.push(error(401, "invalid_request_error", &format!("Incorrect API key provided: {KEY}.")));
    let mut cua = client(&server, OpenAiTool::Preview);

    let error = cua.start("Anything", &screen(0)).await.expect_err("refused");
    assert!(matches!(error, ModelError::Unauthorized { status: 401, .. }), "{error:?}");
    assert_eq!(server.received().len(), 1, "a refused key is not retried");
    assert!(!error.to_string().contains(KEY), "{error}");
    assert!(!format!("{error:?}").contains(KEY), "{error:?}");
}

#[tokio::test]
async fn other_errors_never_show_the_key_either() {
    let server = ScriptedServer::start().await;
    server.push(error(400, "invalid_request_error", &format!("Bad request from {KEY}")));
    for _ in 0..4 {
        server.push(error(500, "server_error", &format!("Failed for {KEY}")));
    }
    server.push(Reply::raw(200, &format!("not json {KEY}")));
    let mut cua = client(&server, OpenAiTool::Preview);

    for expected in ["refused the request", "unavailable", "malformed"] {
        let error = cua.start("Anything", &screen(0)).await.expect_err("fails");
        assert!(error.to_string().contains(expected), "{error}");
        assert!(!error.to_string().contains(KEY), "{error}");
    }
}

#[tokio::test]
async fn a_malformed_answer_names_the_field_that_is_wrong() {
    let server = ScriptedServer::start().await;
    let missing_x = json!({"type": "click", "y": 40, "button": "left"});
    server.push(reply("resp_1", vec![reasoning("Clicking."), computer_call("call_1", missing_x)]));
    server.push(reply("resp_2", vec![computer_call("call_2", json!({"type": "teleport", "x": 1, "y": 1}))]));
    server.push(reply("resp_3", vec![computer_call("call_3", click(1, 1, "back"))]));
    let mut cua = client(&server, OpenAiTool::Preview);

    for expected in [
        "output[1].action.x is missing",
        "output[0].action.type is not an action type we know: \"teleport\"",
        "output[0].action.button is a browser history button",
    ] {
        match cua.start("Anything", &screen(0)).await {
            Err(ModelError::Malformed(message)) => assert!(message.starts_with(expected), "{message}"),
            other => panic!("expected a malformed answer, got {other:?}"),
        }
    }
}
