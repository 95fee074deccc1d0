//! Task budgets on real local desktops against the protocol-faithful model
//! servers: a task whose model turn takes it past `budget.max_tokens` (on
//! the OpenAI and the Anthropic pipelines), or whose steps take it past
//! `budget.max_sandbox_s`, or whose model calls cost more than
//! `budget.max_cost_usd`, stops right after the crossing step, `failed`
//! with code `budget`; its usage shows the tokens, cost and sandbox time it
//! spent (each call's also in a `usage` event), and its desktop is
//! released.

use std::time::Duration;

use flotilla_queue::queue::TaskRecord;
use flotilla_tests::desktop::{eventually, performed, DesktopFleet, DesktopOptions};
use flotilla_tests::fakes::{anthropic, openai, ScriptedServer};
use flotilla_tests::tasks::record;
use flotilla_types::event::{Event, EventKind};
use flotilla_types::task::{StopCode, TaskStatus};
use serde_json::{json, Value};

fn task(pipeline: &str, budget: Value) -> Value {
    json!({
        "prompt": "click twice then stop",
        "pipeline": pipeline,
        "retry": {"max_attempts": 1},
        "budget": budget,
    })
}

/// Asserts the task ended on its budget, its usage counted, its desktop given back.
async fn ended_on_budget(fleet: &DesktopFleet, done: &TaskRecord, events: &[Event]) {
    assert_eq!((done.status, done.code), (TaskStatus::Failed, Some(StopCode::Budget)), "{events:?}");
    assert!(done.error.as_deref().is_some_and(|e| e.contains("budget")), "{:?}", done.error);
    let usage = done.usage.as_ref().expect("usage");
    assert!(usage.sandbox_ms.get("local").is_some_and(|ms| *ms > 0), "sandbox time is counted: {usage:?}");
    eventually("the desktop is released", Duration::from_secs(10), async || fleet.pool.live() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_an_openai_task_stops_at_the_turn_that_crosses_its_token_budget() {
    let server = ScriptedServer::start().await;
    server.push(openai::reply("resp_1", vec![openai::computer_call("call_1", openai::click(100, 100, "left"))]));
    server.push(openai::reply("resp_2", vec![openai::computer_call("call_2", openai::click(200, 200, "left"))]));
    server.push(openai::reply("resp_3", vec![openai::message("done")]));
    let env = vec![("OPENAI_BASE_URL", format!("{}/v1", server.url())), ("OPENAI_API_KEY", "sk-test-openai-secret".to_owned())];
    let fleet = DesktopFleet::start(DesktopOptions { env, ..DesktopOptions::default() }).await;
    // Each scripted turn costs 1 000 tokens in and 50 out: the second crosses 1 500.
    let (id, events) = fleet.run_to_end(task("openai-cua", json!({"max_tokens": 1500}))).await;

    let done = record(&fleet.queue, &id).await;
    ended_on_budget(&fleet, &done, &events).await;
    let usage = done.usage.as_ref().expect("usage");
    assert_eq!((usage.input_tokens, usage.output_tokens), (2000, 100), "both turns counted");
    assert_eq!(usage.models.len(), 1, "{usage:?}");
    assert_eq!(performed(&events).len(), 1, "the crossing turn's action is not carried out");
    assert_eq!(usage.steps, 1);
    assert_eq!(server.received().len(), 2, "no model call after the crossing turn");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_claude_task_stops_at_the_turn_that_crosses_its_token_budget() {
    let server = ScriptedServer::start().await;
    server.push(anthropic::action_turn("toolu_1", json!({"action": "left_click", "coordinate": [100, 100]})));
    server.push(anthropic::action_turn("toolu_2", json!({"action": "left_click", "coordinate": [200, 200]})));
    server.push(anthropic::final_answer("done"));
    let env = vec![("ANTHROPIC_BASE_URL", server.url()), ("ANTHROPIC_API_KEY", "sk-ant-test-secret".to_owned())];
    let fleet = DesktopFleet::start(DesktopOptions { env, ..DesktopOptions::default() }).await;
    let per_turn = anthropic::INPUT_TOKENS + anthropic::CACHE_READ_INPUT_TOKENS + anthropic::OUTPUT_TOKENS;
    let mut spec = task("claude-computer-use", json!({"max_tokens": per_turn + 1}));
    spec["model"] = json!("claude-sonnet-4-6");
    let (id, events) = fleet.run_to_end(spec).await;

    let done = record(&fleet.queue, &id).await;
    ended_on_budget(&fleet, &done, &events).await;
    let usage = done.usage.as_ref().expect("usage");
    assert_eq!(usage.input_tokens + usage.output_tokens, 2 * per_turn, "both turns counted, cache reads as input: {usage:?}");
    assert_eq!(performed(&events).len(), 1, "the crossing turn's action is not carried out");
    assert_eq!(server.received().len(), 2, "no model call after the crossing turn");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_task_stops_after_the_step_that_crosses_its_sandbox_seconds() {
    let fleet = DesktopFleet::start(DesktopOptions::default()).await;
    let mut actions = vec![json!({"type": "move", "x": 10, "y": 10})];
    actions.extend(std::iter::repeat_n(json!({"type": "wait", "ms": 400}), 10));
    let spec = json!({
        "prompt": "wait on a desktop",
        "pipeline": "scripted",
        "actions": actions,
        "retry": {"max_attempts": 1},
        "budget": {"max_sandbox_s": 1},
    });
    let (id, events) = fleet.run_to_end(spec).await;

    let done = record(&fleet.queue, &id).await;
    ended_on_budget(&fleet, &done, &events).await;
    let usage = done.usage.as_ref().expect("usage");
    let held = usage.sandbox_ms["local"];
    assert!(held > 1000, "past one second: {held} ms");
    assert!(usage.steps >= 2 && usage.steps < 11, "stopped after the crossing step, not at the end: {usage:?}");
    assert_eq!(u64::from(done.steps_taken), usage.steps);
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_task_past_its_money_budget_stops_at_the_crossing_step_with_code_budget() {
    let server = ScriptedServer::start().await;
    server.push(anthropic::action_turn("toolu_1", json!({"action": "left_click", "coordinate": [100, 100]})));
    server.push(anthropic::action_turn("toolu_2", json!({"action": "left_click", "coordinate": [200, 200]})));
    server.push(anthropic::final_answer("done"));
    let env = vec![("ANTHROPIC_BASE_URL", server.url()), ("ANTHROPIC_API_KEY", "sk-ant-test-secret".to_owned())];
    let fleet = DesktopFleet::start(DesktopOptions { env, ..DesktopOptions::default() }).await;
    // claude-sonnet-4-6 at $3 in, $0.30 cached, $15 out a million: each
    // scripted turn (1 520 in, 200 read from the cache, 87 out) costs
    // 4 560 + 60 + 1 305 = 5 925 micro-dollars, so the second crosses $0.006.
    let per_turn_micros = 5_925;
    let mut spec = task("claude-computer-use", json!({"max_cost_usd": 0.006}));
    spec["model"] = json!("claude-sonnet-4-6");
    let (id, events) = fleet.run_to_end(spec).await;

    let done = record(&fleet.queue, &id).await;
    ended_on_budget(&fleet, &done, &events).await;
    let usage = done.usage.as_ref().expect("usage");
    assert_eq!(usage.cost_usd, 2.0 * per_turn_micros as f64 / 1e6, "both turns' cost counted: {usage:?}");
    assert_eq!(usage.cache_read_tokens, 2 * anthropic::CACHE_READ_INPUT_TOKENS);
    assert_eq!(usage.models["claude-sonnet-4-6"].cost_usd, Some(usage.cost_usd));
    assert_eq!(performed(&events).len(), 1, "the crossing turn's action is not carried out");
    assert_eq!(server.received().len(), 2, "no model call after the crossing turn");
    let calls: Vec<(u32, Option<f64>, u64)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Usage { step, cost_usd, cache_read_tokens, .. } => Some((*step, *cost_usd, *cache_read_tokens)),
            _ => None,
        })
        .collect();
    let per_turn = Some(per_turn_micros as f64 / 1e6);
    let read = anthropic::CACHE_READ_INPUT_TOKENS;
    assert_eq!(calls, [(0, per_turn, read), (1, per_turn, read)], "each call's usage on its step: {events:?}");
    fleet.stop().await;
}
