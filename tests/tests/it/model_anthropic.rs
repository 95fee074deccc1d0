//! The Claude computer-use client against a scripted stand-in of the
//! Messages API: what it sends (tool version, beta header, display size,
//! history with only the newest screenshot, tool_results by id), how every
//! action of the tool becomes ours, and how it retries and fails.

use std::time::{Duration, Instant};

use axum::body::Bytes;
use base64::prelude::{Engine as _, BASE64_STANDARD};
use flotilla_config::Secret;
use flotilla_tests::fakes::anthropic::{
    action_turn, computer, error, final_answer, message, text, thinking, tool_use, CACHE_READ_INPUT_TOKENS, INPUT_TOKENS,
    OUTPUT_TOKENS,
};
use flotilla_tests::fakes::{Recorded, Reply, ScriptedServer};
use flotilla_types::action::{Action, MouseButton};
use flotilla_worker::model::anthropic::{AnthropicComputerUse, AnthropicConfig, ComputerTool};
use flotilla_worker::model::http::Endpoint;
use flotilla_worker::model::{CallResult, ComputerModel, ModelAction, ModelError, Screen, ToolCall, Usage};
use serde_json::{json, Value};

const KEY: &str = "sk-ant-api03-test-key-that-must-never-print";
const MODEL: &str = "claude-sonnet-4-5";
const SYSTEM: &str = "You operate a Linux desktop.";
const PROMPT: &str = "Open the settings and turn on dark mode";
const DISPLAY: (u32, u32) = (1280, 800);

fn endpoint(server: &ScriptedServer) -> Endpoint {
    Endpoint {
        min_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(40),
        max_retries: 3,
        ..Endpoint::new(server.url(), Secret::new(KEY))
    }
}

fn client(server: &ScriptedServer, tool: ComputerTool) -> AnthropicComputerUse {
    let config = AnthropicConfig::new(endpoint(server), MODEL, tool);
    AnthropicComputerUse::new(config, DISPLAY, Some(SYSTEM.to_owned())).expect("a client")
}

fn screen(png: &'static [u8]) -> Screen {
    Screen { png: Bytes::from_static(png), width: DISPLAY.0, height: DISPLAY.1 }
}

fn result(call_id: &str, png: &'static [u8], text: Option<&str>) -> CallResult {
    CallResult { call_id: call_id.to_owned(), screen: screen(png), text: text.map(str::to_owned), is_error: false }
}

fn b64(png: &[u8]) -> String {
    BASE64_STANDARD.encode(png)
}

/// The base64 data of every image block anywhere in a request body.
fn images(body: &Value) -> Vec<String> {
    match body {
        Value::Object(map) if map.get("type") == Some(&json!("image")) => {
            vec![map.get("source").and_then(|s| s.get("data")).and_then(Value::as_str).unwrap_or_default().to_owned()]
        }
        Value::Object(map) => map.values().flat_map(images).collect(),
        Value::Array(items) => items.iter().flat_map(images).collect(),
        _ => Vec::new(),
    }
}

fn act(action: Action) -> ModelAction {
    ModelAction::Act(action)
}

fn keys(names: &[&str]) -> Vec<String> {
    names.iter().map(|k| (*k).to_owned()).collect()
}

fn assert_key_hidden(error: &ModelError) {
    let shown = format!("{error} {error:?}");
    assert!(!shown.contains(KEY), "the key leaked into an error: {shown}");
}

/// The only request the server got.
fn only_request(server: &ScriptedServer) -> Recorded {
    let received = server.received();
    assert_eq!(received.len(), 1, "exactly one request");
    received.into_iter().next().expect("one request")
}

#[tokio::test]
async fn each_tool_version_sends_its_type_beta_header_and_the_display_size() {
    let cases = [
        (
            ComputerTool::V20250124,
            json!({"type": "computer_20250124", "name": "computer", "display_width_px": 1280, "display_height_px": 800}),
            "computer-use-2025-01-24",
        ),
        (
            ComputerTool::V20251124,
            json!({"type": "computer_20251124", "name": "computer", "display_width_px": 1280, "display_height_px": 800, "enable_zoom": true}),
            "computer-use-2025-11-24",
        ),
    ];
    for (tool, definition, beta) in cases {
        let server = ScriptedServer::start().await;
        server.push(final_answer("Dark mode is on."));
        let mut model = client(&server, tool);
        let turn = model.start(PROMPT, &screen(b"first screen")).await.expect("a turn");
        assert_eq!(turn.text.as_deref(), Some("Dark mode is on."));
        assert!(turn.calls.is_empty(), "end_turn without tool_use is done");

        let request = only_request(&server);
        assert_eq!((request.method.as_str(), request.path.as_str()), ("POST", "/v1/messages"));
        assert_eq!(request.header("x-api-key"), Some(KEY));
        assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(request.header("anthropic-beta"), Some(beta), "{tool:?}");
        assert_eq!(request.body["tools"][0], definition, "{tool:?}");
        assert_eq!(request.body["tools"][1]["name"], "ask_human", "the model can ask the person behind the task");
        assert_eq!(request.body["model"], MODEL);
        let cached_system = json!([{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]);
        assert_eq!(request.body["system"], cached_system, "the system prompt (and the tools before it) is a cache breakpoint");
        assert!(request.body["max_tokens"].as_u64().is_some_and(|n| n > 0));
        let first = &request.body["messages"][0];
        assert_eq!(first["role"], "user");
        assert_eq!(images(first), [b64(b"first screen")]);
        let prompt = json!({"type": "text", "text": PROMPT, "cache_control": {"type": "ephemeral"}});
        assert!(first["content"].as_array().expect("blocks").contains(&prompt), "the newest turn is a breakpoint");
    }
}

#[tokio::test]
async fn a_conversation_answers_each_tool_use_by_id_and_sends_only_the_newest_screenshot() {
    let server = ScriptedServer::start().await;
    server.push(Reply::json(message(
        vec![
            thinking("The settings icon is top right."),
            text("I'll open the settings."),
            computer("toolu_01A", json!({"action": "left_click", "coordinate": [1200, 40]})),
        ],
        "tool_use",
    )));
    server.push(action_turn("toolu_01B", json!({"action": "type", "text": "dark"})));
    server.push(final_answer("Dark mode is on."));
    let mut model = client(&server, ComputerTool::V20250124);

    let first = model.start(PROMPT, &screen(b"screen one")).await.expect("first turn");
    assert_eq!(first.reasoning, ["The settings icon is top right.", "I'll open the settings."]);
    assert_eq!(first.text, None, "text beside a tool call is reasoning");
    assert_eq!(
        first.calls,
        [ToolCall { id: "toolu_01A".into(), actions: vec![act(Action::Click { x: 1200, y: 40, button: MouseButton::Left })] }]
    );
    let usage = Usage {
        input_tokens: INPUT_TOKENS + CACHE_READ_INPUT_TOKENS,
        output_tokens: OUTPUT_TOKENS,
        cache_read_tokens: CACHE_READ_INPUT_TOKENS,
        cache_write_tokens: 0,
    };
    assert_eq!(first.usage, usage);

    let second = model.resume(vec![result("toolu_01A", b"screen two", None)], &[]).await.expect("second turn");
    assert_eq!(second.calls[0].actions, [act(Action::Type { text: "dark".into() })]);
    let third = model.resume(vec![result("toolu_01B", b"screen three", Some("typed"))], &[]).await.expect("third turn");
    assert_eq!(third.text.as_deref(), Some("Dark mode is on."));
    assert!(third.calls.is_empty());

    let received = server.received();
    assert_eq!(received.len(), 3);
    let second_request = &received[1].body;
    assert_eq!(images(second_request), [b64(b"screen two")], "only the newest screenshot");
    let answer = &second_request["messages"][2];
    assert_eq!(answer["role"], "user");
    assert_eq!(answer["content"][0]["type"], "tool_result");
    assert_eq!(answer["content"][0]["tool_use_id"], "toolu_01A");
    assert_eq!(answer["content"][0]["is_error"], false);

    let last = &received[2].body;
    let messages = last["messages"].as_array().expect("messages");
    let roles: Vec<&str> = messages.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"]);
    assert_eq!(images(last), [b64(b"screen three")], "older screenshots are replaced");
    let text = last.to_string();
    assert!(!text.contains(&b64(b"screen one")) && !text.contains(&b64(b"screen two")));
    let prompt = json!({"type": "text", "text": PROMPT, "cache_control": {"type": "ephemeral"}});
    assert!(messages[0]["content"].as_array().expect("blocks").contains(&prompt));
    assert_eq!(messages[1]["content"][0]["signature"], thinking("")["signature"], "thinking goes back as it came");
    assert_eq!(messages[2]["content"][0]["tool_use_id"], "toolu_01A");
    let newest = &messages[4]["content"][0];
    assert_eq!(newest["tool_use_id"], "toolu_01B");
    assert_eq!(newest["content"][0], json!({"type": "text", "text": "typed"}));
    assert_eq!(newest["content"][1]["source"]["media_type"], "image/png");
}

#[tokio::test]
async fn several_calls_in_one_turn_are_answered_in_order_and_a_missing_one_as_an_error() {
    let server = ScriptedServer::start().await;
    server.push(Reply::json(message(
        vec![
            computer("toolu_a", json!({"action": "mouse_move", "coordinate": [10, 10]})),
            computer("toolu_b", json!({"action": "cursor_position"})),
            computer("toolu_c", json!({"action": "screenshot"})),
        ],
        "tool_use",
    )));
    server.push(final_answer("done"));
    let mut model = client(&server, ComputerTool::V20250124);
    let turn = model.start(PROMPT, &screen(b"one")).await.expect("turn");
    assert_eq!(turn.calls.len(), 3);

    let mut failed = result("toolu_c", b"three", Some("the screen did not answer"));
    failed.is_error = true;
    model.resume(vec![result("toolu_a", b"two", None), failed], &[]).await.expect("done");

    let body = &server.received()[1].body;
    let blocks = body["messages"][2]["content"].as_array().expect("results");
    let ids: Vec<&str> = blocks.iter().filter_map(|b| b["tool_use_id"].as_str()).collect();
    assert_eq!(ids, ["toolu_a", "toolu_b", "toolu_c"]);
    assert_eq!(blocks[1]["is_error"], true, "a call not carried out is answered as an error");
    assert_eq!(blocks[2]["is_error"], true);
    assert_eq!(blocks[2]["content"][0]["text"], "the screen did not answer");
    assert_eq!(images(body), [b64(b"three")], "only the newest screenshot of the turn");
}

/// Asks the model once per case and compares the actions it gets.
async fn assert_mappings(tool: ComputerTool, cases: Vec<(Value, Vec<ModelAction>)>) {
    let server = ScriptedServer::start().await;
    let mut model = client(&server, tool);
    for (input, expected) in cases {
        server.push(action_turn("toolu_x", input.clone()));
        let turn = model.start(PROMPT, &screen(b"screen")).await.unwrap_or_else(|e| panic!("{input}: {e}"));
        assert_eq!(turn.calls.len(), 1, "{input}");
        assert_eq!(turn.calls[0].actions, expected, "{input}");
    }
}

#[tokio::test]
async fn every_action_of_the_tool_maps_to_ours() {
    use Action::*;
    let left = MouseButton::Left;
    let cases = vec![
        (json!({"action": "screenshot"}), vec![act(Screenshot {})]),
        (json!({"action": "left_click", "coordinate": [10, 20]}), vec![act(Click { x: 10, y: 20, button: left })]),
        (json!({"action": "right_click", "coordinate": [10, 20]}), vec![act(Click { x: 10, y: 20, button: MouseButton::Right })]),
        (
            json!({"action": "middle_click", "coordinate": [10, 20]}),
            vec![act(Click { x: 10, y: 20, button: MouseButton::Middle })],
        ),
        (json!({"action": "double_click", "coordinate": [10, 20]}), vec![act(DoubleClick { x: 10, y: 20 })]),
        (json!({"action": "triple_click", "coordinate": [10, 20]}), vec![act(TripleClick { x: 10, y: 20 })]),
        (json!({"action": "left_click"}), vec![act(MouseDown { button: left }), act(MouseUp { button: left })]),
        (json!({"action": "mouse_move", "coordinate": [640, 400]}), vec![act(Move { x: 640, y: 400 })]),
        (
            json!({"action": "left_click_drag", "start_coordinate": [5, 6], "coordinate": [50, 60]}),
            vec![act(Drag { path: vec![[5, 6], [50, 60]] })],
        ),
        (
            json!({"action": "left_click_drag", "coordinate": [50, 60]}),
            vec![act(MouseDown { button: left }), act(Move { x: 50, y: 60 }), act(MouseUp { button: left })],
        ),
        (json!({"action": "left_mouse_down"}), vec![act(MouseDown { button: left })]),
        (
            json!({"action": "left_mouse_down", "coordinate": [7, 8]}),
            vec![act(Move { x: 7, y: 8 }), act(MouseDown { button: left })],
        ),
        (json!({"action": "left_mouse_up", "coordinate": [9, 9]}), vec![act(Move { x: 9, y: 9 }), act(MouseUp { button: left })]),
        (
            json!({"action": "scroll", "coordinate": [100, 200], "scroll_direction": "down", "scroll_amount": 3}),
            vec![act(Scroll { x: 100, y: 200, scroll_x: 0, scroll_y: 3 })],
        ),
        (
            json!({"action": "scroll", "coordinate": [100, 200], "scroll_direction": "up", "scroll_amount": 5}),
            vec![act(Scroll { x: 100, y: 200, scroll_x: 0, scroll_y: -5 })],
        ),
        (
            json!({"action": "scroll", "coordinate": [100, 200], "scroll_direction": "left", "scroll_amount": 2}),
            vec![act(Scroll { x: 100, y: 200, scroll_x: -2, scroll_y: 0 })],
        ),
        (
            json!({"action": "scroll", "coordinate": [100, 200], "scroll_direction": "right", "scroll_amount": 2}),
            vec![act(Scroll { x: 100, y: 200, scroll_x: 2, scroll_y: 0 })],
        ),
        (json!({"action": "type", "text": "hello world\n"}), vec![act(Type { text: "hello world\n".into() })]),
        (json!({"action": "key", "text": "ctrl+s"}), vec![act(Keypress { keys: keys(&["ctrl", "s"]) })]),
        (json!({"action": "key", "text": "Return"}), vec![act(Keypress { keys: keys(&["Return"]) })]),
        (
            json!({"action": "key", "text": "ctrl+a Delete"}),
            vec![act(Keypress { keys: keys(&["ctrl", "a"]) }), act(Keypress { keys: keys(&["Delete"]) })],
        ),
        (json!({"action": "key", "text": "KP_0"}), vec![act(Keypress { keys: keys(&["0"]) })]),
        (json!({"action": "key", "text": "ctrl+equal"}), vec![act(Keypress { keys: keys(&["ctrl", "="]) })]),
        (
            json!({"action": "hold_key", "text": "shift", "duration": 1.5}),
            vec![act(KeyDown { keys: keys(&["shift"]) }), act(Wait { ms: 1500 }), act(KeyUp { keys: keys(&["shift"]) })],
        ),
        (json!({"action": "wait", "duration": 2}), vec![act(Wait { ms: 2000 })]),
        (json!({"action": "cursor_position"}), vec![ModelAction::CursorPosition]),
        (json!({"action": "zoom", "region": [0, 0, 640, 400]}), vec![ModelAction::Zoom { region: [0, 0, 640, 400] }]),
    ];
    assert_mappings(ComputerTool::V20251124, cases).await;
}

#[tokio::test]
async fn modifier_keys_are_held_around_clicks_drags_and_scrolls() {
    use Action::*;
    let held =
        |names: &[&str], action: Action| vec![act(KeyDown { keys: keys(names) }), act(action), act(KeyUp { keys: keys(names) })];
    let cases = vec![
        (
            json!({"action": "left_click", "coordinate": [10, 20], "text": "shift"}),
            held(&["shift"], Click { x: 10, y: 20, button: MouseButton::Left }),
        ),
        (
            json!({"action": "left_click", "coordinate": [10, 20], "text": "ctrl+shift"}),
            held(&["ctrl", "shift"], Click { x: 10, y: 20, button: MouseButton::Left }),
        ),
        (
            json!({"action": "right_click", "coordinate": [10, 20], "text": "alt"}),
            held(&["alt"], Click { x: 10, y: 20, button: MouseButton::Right }),
        ),
        (
            json!({"action": "double_click", "coordinate": [10, 20], "text": "ctrl"}),
            held(&["ctrl"], DoubleClick { x: 10, y: 20 }),
        ),
        (
            json!({"action": "left_click_drag", "start_coordinate": [1, 2], "coordinate": [3, 4], "text": "shift"}),
            held(&["shift"], Drag { path: vec![[1, 2], [3, 4]] }),
        ),
        (
            json!({"action": "scroll", "coordinate": [5, 5], "scroll_direction": "down", "scroll_amount": 1, "text": "ctrl"}),
            held(&["ctrl"], Scroll { x: 5, y: 5, scroll_x: 0, scroll_y: 1 }),
        ),
        (
            json!({"action": "left_click", "coordinate": [10, 20], "text": ""}),
            vec![act(Click { x: 10, y: 20, button: MouseButton::Left })],
        ),
    ];
    assert_mappings(ComputerTool::V20250124, cases).await;
}

#[tokio::test]
async fn a_scroll_without_a_coordinate_scrolls_where_the_pointer_was_left() {
    let server = ScriptedServer::start().await;
    server.push(action_turn("toolu_1", json!({"action": "mouse_move", "coordinate": [300, 400]})));
    server.push(action_turn("toolu_2", json!({"action": "scroll", "scroll_direction": "down", "scroll_amount": 4})));
    let mut model = client(&server, ComputerTool::V20250124);
    model.start(PROMPT, &screen(b"one")).await.expect("move");
    let turn = model.resume(vec![result("toolu_1", b"two", None)], &[]).await.expect("scroll");
    assert_eq!(turn.calls[0].actions, [act(Action::Scroll { x: 300, y: 400, scroll_x: 0, scroll_y: 4 })]);
}

#[tokio::test]
async fn a_rate_limit_is_waited_out_as_retry_after_says() {
    let server = ScriptedServer::start().await;
    server.push(
        error(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit")
            .header("retry-after", "1"),
    );
    server.push(final_answer("done"));
    let mut model = client(&server, ComputerTool::V20250124);
    let started = Instant::now();
    let turn = model.start(PROMPT, &screen(b"one")).await.expect("success after the wait");
    assert!(started.elapsed() >= Duration::from_millis(950), "waited {:?}", started.elapsed());
    assert_eq!(turn.text.as_deref(), Some("done"));
    assert_eq!(server.received().len(), 2);
}

#[tokio::test]
async fn overloaded_and_server_errors_are_retried() {
    let server = ScriptedServer::start().await;
    server.push(error(529, "overloaded_error", "Overloaded"));
    server.push(error(500, "api_error", "Internal server error"));
    server.push(error(503, "api_error", "Service unavailable"));
    server.push(final_answer("done"));
    let mut model = client(&server, ComputerTool::V20250124);
    let turn = model.start(PROMPT, &screen(b"one")).await.expect("success after retries");
    assert_eq!(turn.text.as_deref(), Some("done"));
    assert_eq!(server.received().len(), 4);

    let server = ScriptedServer::start().await;
    (0..4).for_each(|_| {
        server.push(error(529, "overloaded_error", "Overloaded"));
    });
    let mut model = client(&server, ComputerTool::V20250124);
    let failure = model.start(PROMPT, &screen(b"one")).await.expect_err("still overloaded");
    assert!(matches!(&failure, ModelError::Unavailable(m) if m.contains("Overloaded")), "{failure:?}");
    assert_eq!(server.received().len(), 4, "the first try and three retries");
    assert_key_hidden(&failure);
}

#[tokio::test]
async fn a_refused_key_or_request_fails_at_once_without_showing_the_key() {
    let cases = [
        (error(401, "authentication_error", "invalid x-api-key"), "invalid x-api-key"),
        (error(400, "invalid_request_error", "messages: roles must alternate"), "messages: roles must alternate"),
    ];
    for (reply, expected) in cases {
        let server = ScriptedServer::start().await;
        server.push(reply);
        let mut model = client(&server, ComputerTool::V20250124);
        let failure = model.start(PROMPT, &screen(b"one")).await.expect_err(expected);
        let refused = match &failure {
            ModelError::Unauthorized { status: 401, message } | ModelError::Rejected { status: 400, message } => message,
            other => panic!("expected a refusal, got {other:?}"),
        };
        assert_eq!(refused, expected);
        only_request(&server);
        assert_key_hidden(&failure);
    }
}

#[tokio::test]
async fn a_malformed_answer_names_what_was_wrong() {
    let click = |input: Value| Reply::json(message(vec![text("Clicking."), computer("toolu_1", input)], "tool_use"));
    let cases = vec![
        (click(json!({"action": "left_click", "coordinate": [10]})), "content[1].input.coordinate must be [x, y]"),
        (click(json!({"action": "left_click", "coordinate": ["a", 2]})), "content[1].input.coordinate must be [x, y]"),
        (click(json!({"action": "left_click", "coordinate": [-3, 2]})), "content[1].input.coordinate must be [x, y]"),
        (
            click(json!({"action": "left_click", "coordinate": [5000, 2]})),
            "content[1].input.coordinate [5000, 2] is outside the 1280x800 display",
        ),
        (click(json!({"action": "mouse_move"})), "content[1].input.coordinate must be [x, y]"),
        (click(json!({"action": "left_click_drag", "start_coordinate": [1, 1]})), "content[1].input.coordinate must be [x, y]"),
        (click(json!({"coordinate": [1, 1]})), "content[1].input.action must be a string"),
        (click(json!({"action": "teleport"})), "content[1].input.action \"teleport\" is not an action"),
        (
            click(json!({"action": "zoom", "region": [0, 0, 10, 10]})),
            "content[1].input.action zoom is not offered by computer_20250124",
        ),
        (
            click(json!({"action": "scroll", "coordinate": [1, 1], "scroll_amount": 3})),
            "content[1].input.scroll_direction must be a string",
        ),
        (
            click(json!({"action": "scroll", "coordinate": [1, 1], "scroll_direction": "in", "scroll_amount": 3})),
            "content[1].input.scroll_direction must be up",
        ),
        (
            click(json!({"action": "scroll", "coordinate": [1, 1], "scroll_direction": "up", "scroll_amount": -1})),
            "content[1].input.scroll_amount must be a whole number",
        ),
        (
            click(json!({"action": "scroll", "scroll_direction": "up", "scroll_amount": 1})),
            "content[1].input.coordinate must be [x, y]",
        ),
        (click(json!({"action": "type"})), "content[1].input.text must be a string"),
        (click(json!({"action": "key", "text": "ctrl+warp"})), "content[1].input.text names the unknown key \"warp\""),
        (
            click(json!({"action": "left_click", "coordinate": [1, 1], "text": "hyper"})),
            "content[1].input.text names the unknown key",
        ),
        (click(json!({"action": "wait", "duration": "long"})), "content[1].input.duration must be a number of seconds"),
        (click(json!({"action": "wait", "duration": 100000})), "content[1].input asks for too much"),
        (click(json!({"action": "hold_key", "text": "shift"})), "content[1].input.duration must be a number of seconds"),
        (
            Reply::json(message(vec![tool_use("toolu_1", "bash", json!({"command": "ls"}))], "tool_use")),
            "content[0] calls \"bash\", a tool this client did not offer",
        ),
        (Reply::json(message(vec![text("I will click.")], "tool_use")), "no tool_use block"),
        (Reply::json(message(vec![text("Let me think about this carefu")], "max_tokens")), "max_tokens"),
        (
            Reply::json(message(vec![text("I can't help with that.")], "refusal")),
            "refusal: the model declined to go on: I can't help with that.",
        ),
        (Reply::json(json!({"type": "message", "stop_reason": "end_turn"})), "content must be an array"),
        (Reply::json(json!({"type": "message", "content": []})), "stop_reason must be a string"),
        (Reply::raw(200, "<html>gateway</html>"), "not JSON"),
    ];
    let server = ScriptedServer::start().await;
    let mut model = client(&server, ComputerTool::V20250124);
    for (reply, expected) in cases {
        server.push(reply);
        let failure = model.start(PROMPT, &screen(b"one")).await.expect_err(expected);
        assert!(matches!(&failure, ModelError::Malformed(m) if m.contains(expected)), "expected {expected:?}, got {failure}");
        assert_key_hidden(&failure);
    }
    assert_eq!(server.remaining(), 0);
}
