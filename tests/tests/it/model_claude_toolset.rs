//! The Claude client with `computer_toolset_20260801` against a scripted
//! stand-in of the Messages API: no beta header, no `tool_choice`,
//! adaptive thinking; member calls mapped onto our actions and answered
//! in order with `toolset_name`, later calls of a failed batch as not
//! executed; thinking blocks sent back unchanged in an append-only
//! history; and the step-down to `computer_20251124` on a 400 naming the
//! toolset, remembered per model, never on a 500 or a 429.

use std::time::Duration;

use axum::body::Bytes;
use flotilla_config::Secret;
use flotilla_tests::fakes::anthropic::{
    error, final_answer, member, message, signed_thinking, text, thinking, tool_use, unsupported_tool,
};
use flotilla_tests::fakes::{Reply, ScriptedServer};
use flotilla_types::action::{Action, MouseButton};
use flotilla_worker::model::anthropic::{AnthropicComputerUse, AnthropicConfig, ComputerTool, Member, ToolMemory};
use flotilla_worker::model::http::Endpoint;
use flotilla_worker::model::{CallResult, ComputerModel, ModelAction, ModelError, Screen, NOT_EXECUTED};
use serde_json::{json, Value};

const MODEL: &str = "claude-opus-5-5";
const DISPLAY: (u32, u32) = (1024, 768);

fn endpoint(server: &ScriptedServer) -> Endpoint {
    Endpoint {
        min_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(40),
        max_retries: 3,
        ..Endpoint::new(server.url(), Secret::new("sk-ant-test"))
    }
}

fn config(server: &ScriptedServer, model: &str, memory: &ToolMemory) -> AnthropicConfig {
    let mut config = AnthropicConfig::new(endpoint(server), model, ComputerTool::for_model(model));
    config.memory = memory.clone();
    config
}

fn client(server: &ScriptedServer) -> AnthropicComputerUse {
    AnthropicComputerUse::new(config(server, MODEL, &ToolMemory::default()), DISPLAY, None).expect("a client")
}

fn screen(png: &'static [u8]) -> Screen {
    Screen { png: Bytes::from_static(png), width: DISPLAY.0, height: DISPLAY.1 }
}

fn ok(call_id: &str, png: &'static [u8]) -> CallResult {
    CallResult { call_id: call_id.to_owned(), screen: screen(png), text: None, is_error: false }
}

fn failed(call_id: &str, png: &'static [u8], text: &str) -> CallResult {
    CallResult { call_id: call_id.to_owned(), screen: screen(png), text: Some(text.to_owned()), is_error: true }
}

fn batch_turn() -> Value {
    message(
        vec![
            signed_thinking("", "EqoBCkgIARABGAIiQHx5empty"),
            thinking("Click the field, scroll, then type."),
            text("Working on it."),
            member("toolu_1", "left_click", json!({"coordinate": [100, 200]})),
            member("toolu_2", "scroll", json!({"scroll_direction": "down", "scroll_amount": 3, "coordinate": [10, 10]})),
            member("toolu_3", "type", json!({"text": "hello"})),
        ],
        "tool_use",
    )
}

#[tokio::test]
async fn a_toolset_turn_runs_member_calls_and_answers_each_with_the_toolset_name() {
    let server = ScriptedServer::start().await;
    let first_answer = batch_turn();
    server.push(Reply::json(first_answer.clone()));
    server.push(final_answer("Done."));
    let mut model = client(&server);
    assert_eq!(model.tool(), ComputerTool::Toolset20260801, "Opus 5.5 takes the toolset");

    let turn = model.start("fill the form", &screen(b"one")).await.expect("a turn");
    let actions: Vec<&ModelAction> = turn.calls.iter().flat_map(|c| &c.actions).collect();
    assert_eq!(
        actions,
        [
            &ModelAction::Act(Action::Click { x: 100, y: 200, button: MouseButton::Left }),
            &ModelAction::Act(Action::Scroll { x: 10, y: 10, scroll_x: 0, scroll_y: 3 }),
            &ModelAction::Act(Action::Type { text: "hello".into() }),
        ]
    );
    assert_eq!(turn.reasoning, ["", "Click the field, scroll, then type.", "Working on it."]);
    let results = vec![
        ok("toolu_1", b"two"),
        failed("toolu_2", b"three", "a scroll is at most 1000 wheel clicks"),
        failed("toolu_3", b"three", NOT_EXECUTED),
    ];
    let done = model.resume(results, &[]).await.expect("the final turn");
    assert_eq!(done.text.as_deref(), Some("Done."));

    let requests = server.received();
    for request in &requests {
        assert_eq!(request.header("anthropic-beta"), None, "the toolset is GA: no beta header");
        assert_eq!(request.body["tools"][0], json!({"type": "computer_toolset_20260801"}));
        assert_eq!(request.body["thinking"], json!({"type": "adaptive", "display": "summarized"}));
        for refused in ["tool_choice", "temperature", "top_p", "top_k", "context_management"] {
            assert!(request.body.get(refused).is_none(), "{refused} is not sent");
        }
    }
    let second = requests[1].body["messages"].as_array().expect("messages");
    assert_eq!(second[..1], requests[0].body["messages"].as_array().expect("messages")[..], "the history is append-only");
    assert_eq!(second[1]["content"], first_answer["content"], "the assistant turn goes back exactly as received");
    let answers = second[2]["content"].as_array().expect("tool results");
    assert_eq!(answers.len(), 3);
    for (answer, id) in answers.iter().zip(["toolu_1", "toolu_2", "toolu_3"]) {
        assert_eq!((answer["type"].as_str(), answer["tool_use_id"].as_str()), (Some("tool_result"), Some(id)));
        assert_eq!(answer["toolset_name"], "computer");
    }
    assert_eq!(answers[0].get("is_error"), None);
    assert_eq!(answers[0]["content"], json!([{"type": "text", "text": "OK"}]));
    assert_eq!(answers[1]["is_error"], true);
    assert_eq!(answers[1]["content"][0]["text"], "a scroll is at most 1000 wheel clicks");
    assert_eq!(answers[1]["content"][1]["type"], "image", "the last call that ran carries the screen");
    assert_eq!(
        (answers[2]["is_error"].as_bool(), answers[2]["content"].clone()),
        (Some(true), json!([{"type": "text", "text": NOT_EXECUTED}]))
    );
}

#[tokio::test]
async fn disabled_and_malformed_member_calls_are_refused_to_the_model_not_fatal() {
    let server = ScriptedServer::start().await;
    server.push(Reply::json(message(
        vec![
            member("toolu_1", "zoom", json!({"region": [0, 0, 10, 10]})),
            member("toolu_2", "left_click", json!({"coordinate": [5000, 1]})),
            member("toolu_3", "key", json!({"text": "Down", "repeat": 3})),
            tool_use("toolu_4", "ask_human", json!({"question": "Which one?"})),
        ],
        "tool_use",
    )));
    let mut config = config(&server, MODEL, &ToolMemory::default());
    config.disabled = vec![Member::Zoom];
    let mut model = AnthropicComputerUse::new(config, DISPLAY, None).expect("a client");
    let turn = model.start("go", &screen(b"one")).await.expect("a turn");
    assert!(matches!(&turn.calls[0].actions[..], [ModelAction::Refuse { reason }] if reason.contains("zoom is disabled")));
    assert!(matches!(&turn.calls[1].actions[..], [ModelAction::Refuse { reason }] if reason.contains("outside the 1024x768")));
    assert_eq!(turn.calls[2].actions.len(), 3, "key with repeat presses the chord that many times");
    assert!(matches!(&turn.calls[3].actions[..], [ModelAction::AskHuman { .. }]));
    let request = &server.received()[0];
    assert_eq!(request.body["tools"][0], json!({"type": "computer_toolset_20260801", "configs": {"zoom": {"enabled": false}}}));
}

#[tokio::test]
async fn a_400_naming_the_toolset_steps_down_and_later_tasks_on_the_model_start_there() {
    let server = ScriptedServer::start().await;
    let memory = ToolMemory::default();
    let model_name = "claude-opus-4-9-preview";
    server.push(unsupported_tool(model_name, "computer_toolset_20260801", &["computer_20251124", "computer_20250124"]));
    server.push(final_answer("first"));
    server.push(final_answer("second"));
    let mut first = AnthropicComputerUse::new(config(&server, model_name, &memory), DISPLAY, None).expect("a client");
    let turn = first.start("go", &screen(b"one")).await.expect("stepped down");
    assert_eq!(turn.text.as_deref(), Some("first"));
    assert_eq!(turn.tool_changes.len(), 1);
    assert_eq!((turn.tool_changes[0].from, turn.tool_changes[0].to), ("computer_toolset_20260801", "computer_20251124"));
    assert_eq!(memory.get(model_name), Some(ComputerTool::V20251124));

    let mut later = AnthropicComputerUse::new(config(&server, model_name, &memory), DISPLAY, None).expect("a client");
    assert_eq!(later.tool(), ComputerTool::V20251124, "the next task on the model starts where the last one ended");
    let turn = later.start("go", &screen(b"one")).await.expect("a turn");
    assert!(turn.tool_changes.is_empty());

    let requests = server.received();
    let sent: Vec<(&str, Option<&str>)> =
        requests.iter().map(|r| (r.body["tools"][0]["type"].as_str().unwrap_or(""), r.header("anthropic-beta"))).collect();
    assert_eq!(
        sent,
        [
            ("computer_toolset_20260801", None),
            ("computer_20251124", Some("computer-use-2025-11-24")),
            ("computer_20251124", Some("computer-use-2025-11-24")),
        ]
    );
    assert_eq!(requests[1].body["tools"][0]["display_width_px"], 1024);
    assert_eq!(requests[1].body["messages"], requests[0].body["messages"], "the same first message, another tool");
    let other = AnthropicComputerUse::new(config(&server, MODEL, &memory), DISPLAY, None).expect("a client");
    assert_eq!(other.tool(), ComputerTool::Toolset20260801, "remembered per model");
}

#[tokio::test]
async fn server_errors_rate_limits_and_other_400s_never_step_down() {
    let server = ScriptedServer::start().await;
    server.push(error(500, "api_error", "does not support tool types: computer_toolset_20260801"));
    server.push(
        error(429, "rate_limit_error", "does not support tool types: computer_toolset_20260801").header("retry-after", "0"),
    );
    server.push(final_answer("fine"));
    let memory = ToolMemory::default();
    let mut model = AnthropicComputerUse::new(config(&server, MODEL, &memory), DISPLAY, None).expect("a client");
    let turn = model.start("go", &screen(b"one")).await.expect("retried, same tool");
    assert!(turn.tool_changes.is_empty());
    let tools: Vec<Value> = server.received().iter().map(|r| r.body["tools"][0]["type"].clone()).collect();
    assert_eq!(tools, vec![json!("computer_toolset_20260801"); 3]);
    assert_eq!(memory.get(MODEL), None);

    server.push(error(400, "invalid_request_error", "tools.0: Extra inputs are not permitted"));
    let refused = model.start("go", &screen(b"one")).await.expect_err("a plain 400 fails");
    assert!(matches!(refused, ModelError::Rejected { status: 400, .. }), "{refused}");
    assert_eq!(server.received().len(), 4, "no second try with another tool");
    assert_eq!(model.tool(), ComputerTool::Toolset20260801);
}

#[tokio::test]
async fn long_toolset_conversations_turn_on_server_side_clearing_instead_of_pruning() {
    let server = ScriptedServer::start().await;
    let turns = 23;
    for i in 0..turns {
        server.push(Reply::json(message(vec![member(&format!("toolu_{i}"), "screenshot", json!({}))], "tool_use")));
    }
    server.push(final_answer("done"));
    let mut model = client(&server);
    model.start("go", &screen(b"first")).await.expect("a turn");
    for i in 0..turns {
        model.resume(vec![ok(&format!("toolu_{i}"), b"shot")], &[]).await.expect("a turn");
    }
    let requests = server.received();
    let images = |body: &Value| body.to_string().matches("\"type\":\"image\"").count();
    assert_eq!(images(&requests[turns].body), turns + 1, "nothing is pruned on the client");
    let first_clearing = requests.iter().position(|r| r.body.get("context_management").is_some()).expect("clearing turns on");
    assert_eq!(first_clearing, 21, "after more than 20 tool results");
    assert!(requests[..first_clearing].iter().all(|r| r.header("anthropic-beta").is_none()));
    assert_eq!(requests[first_clearing].header("anthropic-beta"), Some("context-management-2025-06-27"));
    assert_eq!(requests[first_clearing].body["context_management"]["edits"][0]["type"], "clear_tool_uses_20250919");
}

#[tokio::test]
async fn screenshots_past_the_toolset_limits_are_refused_before_sending() {
    let server = ScriptedServer::start().await;
    let mut model =
        AnthropicComputerUse::new(config(&server, MODEL, &ToolMemory::default()), (2880, 1800), None).expect("client");
    let big = Screen { png: Bytes::from_static(b"big"), width: 2880, height: 1800 };
    let refused = model.start("go", &big).await.expect_err("too big");
    assert!(refused.to_string().contains("2880x1800"), "{refused}");
    assert!(server.received().is_empty());
}
