//! Durable runs of `plan: true` tasks: the step journal carries the plan,
//! the plan step under way and the answers of the steps done, so a task
//! whose worker is SIGKILLed in the middle of a plan step is taken up by
//! another worker in the same desktop without planning again, going on
//! with that step's conversation and running each step once. On the same
//! stand as `durable_runs` (sandboxd desktops through the E2B provider, a
//! real Redis with a 5 s lease, s3s-fs, one scripted model server logging
//! every call); Claude's Messages API, whose requests carry the whole
//! conversation, so the step each request is about can be read from it.
//! A plan step's wait for a person parks the task like any journaled
//! run's, and the answer goes back to that step.

use std::time::Duration;

use flotilla_tests::desktop::{eventually, sandbox_ids};
use flotilla_tests::fakes::{anthropic, Recorded, Reply};
use flotilla_tests::fleet::WorkerProcess;
use flotilla_tests::tasks::{record, tenant};
use flotilla_types::event::{Event, EventKind};
use flotilla_types::task::{Decision, HumanInput, TaskStatus};
use serde_json::{json, Value};

use crate::durable_runs::{is_waiting_action, resumed, terminal_count, Stand};

/// The plan the planner answers with.
const STEPS: [&str; 3] = ["write one", "write two and three", "write four"];

fn typing(id: &str, line: &str) -> Reply {
    anthropic::action_turn(id, json!({"action": "type", "text": format!("echo {line} >> outbox/log.txt\n")}))
}

/// The first user message of a Messages request: the step's prompt (or,
/// for the planner, its request).
fn opening(request: &Recorded) -> String {
    request.body["messages"][0]["content"].to_string()
}

fn is_planner(request: &Recorded) -> bool {
    request.body.get("tools").is_none()
}

fn steps_started(events: &[Event]) -> Vec<u32> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::StepStarted { index, .. } => Some(*index),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_task_killed_mid_step_goes_on_at_that_step_without_planning_again() {
    let stand = Stand::start().await;
    stand.model.push(anthropic::final_answer(&json!({"application": "xterm", "steps": STEPS}).to_string()));
    stand.model.push(typing("toolu_1", "one"));
    stand.model.push(anthropic::final_answer("Wrote one."));
    stand.model.push(typing("toolu_2", "two"));
    stand.model.push(anthropic::action_turn("toolu_3", json!({"action": "wait", "duration": 30})));
    stand.model.push(typing("toolu_4", "three"));
    stand.model.push(anthropic::final_answer("Wrote two and three."));
    stand.model.push(typing("toolu_5", "four"));
    stand.model.push(anthropic::final_answer("Wrote four."));
    let mut doomed = WorkerProcess::spawn(&stand.env, "doomed");
    let id = stand
        .submit(json!({
            "prompt": "write the numbers one to four into outbox/log.txt in the terminal",
            "pipeline": "claude-computer-use",
            "model": "claude-sonnet-4-5",
            "plan": true,
            "on_interrupt": "resume",
            "sandbox": {"resolution": [640, 480]},
            "retry": {"max_attempts": 3}
        }))
        .await;

    // Killed while the second plan step waits, after it typed `two`.
    stand.wait_for("the second step's wait starts", &id, 90, is_waiting_action).await;
    let journal = stand.journal(&id);
    assert!(
        journal.contains(r#""step":1"#) && journal.contains("Wrote one."),
        "the journal holds the plan's progress: {journal}"
    );
    doomed.signal("KILL");
    assert!(doomed.wait_exit(5), "SIGKILL ends the worker");
    let before_kill = stand.model.received().len();
    assert_eq!(before_kill, 5, "the planner, step 1's two turns, step 2's first two");

    let _second = WorkerProcess::spawn(&stand.env, "second");
    let history = stand.wait_ended(&id).await;
    let task = record(&stand.queue, &id).await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{history:?}");
    assert_eq!(terminal_count(&history), 1, "the task ends once: {history:?}");
    let sandbox = sandbox_ids(&history).remove(0);
    assert!(sandbox_ids(&history).iter().all(|s| *s == sandbox), "every attempt ran in the same desktop: {history:?}");
    assert_eq!(resumed(&history), vec![(2, 2, sandbox, true)], "resumed after two actions, the wait in flight");
    assert_eq!(steps_started(&history), vec![0, 1, 2], "each plan step started once: {history:?}");
    let result = task.result.unwrap_or_default();
    assert_eq!(result["steps"], json!(["Wrote one.", "Wrote two and three.", "Wrote four."]), "{result}");
    assert_eq!(stand.output(&id, "outbox/log.txt").await, "one\ntwo\nthree\nfour\n", "each command ran once, in order");

    let calls = stand.model.received();
    assert_eq!(calls.len(), 9, "no model call is made twice");
    assert_eq!(calls.iter().filter(|c| is_planner(c)).count(), 1, "the task is planned once");
    let resumed_call = &calls[before_kill];
    assert!(
        opening(resumed_call).contains("Now do step 2 of 3"),
        "the resumed attempt's first call is about the step under way: {}",
        opening(resumed_call)
    );
    let earlier = calls[before_kill - 1].body["messages"].as_array().expect("a history").len();
    let messages = resumed_call.body["messages"].as_array().expect("a history");
    assert_eq!(messages.len(), earlier + 2, "the step's earlier turns, the interrupted one and its answer");
    let last = messages.last().map(Value::to_string).unwrap_or_default();
    assert!(last.contains("may or may not have happened"), "the model hears the wait may not have finished: {last}");
    assert!(opening(&calls[before_kill + 2]).contains("Now do step 3 of 3"), "then the last step, in a conversation of its own");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_task_parked_in_a_step_goes_on_in_that_step_with_the_answer() {
    let mut stand = Stand::start().await;
    stand.env.push(("FLOTILLA_PARK_WAITING_AFTER_MS".into(), "500".into()));
    let plan = ["write one", "ask which word comes next and write it"];
    stand.model.push(anthropic::final_answer(&json!({"application": "xterm", "steps": plan}).to_string()));
    stand.model.push(typing("toolu_1", "one"));
    stand.model.push(anthropic::final_answer("Wrote one."));
    let ask = anthropic::tool_use("toolu_ask", "ask_human", json!({"question": "Which word comes next?"}));
    stand.model.push(Reply::json(anthropic::message(vec![ask], "tool_use")));
    stand.model.push(typing("toolu_2", "two"));
    stand.model.push(anthropic::final_answer("Wrote two."));
    let mut first = WorkerProcess::spawn(&stand.env, "first");
    let id = stand
        .submit(json!({
            "prompt": "write one, then the word a person names, into outbox/log.txt in the terminal",
            "pipeline": "claude-computer-use",
            "model": "claude-sonnet-4-5",
            "plan": true,
            "sandbox": {"resolution": [640, 480]}
        }))
        .await;

    eventually("the task is parked", Duration::from_secs(90), async || stand.task_field(&id, "parked") == "1").await;
    let journal = stand.journal(&id);
    assert!(
        journal.contains(r#""kind":"ask""#) && journal.contains(r#""step":1"#) && journal.contains("Wrote one."),
        "the wait is journaled beside the plan's progress: {journal}"
    );
    assert_eq!(stand.model.received().len(), 4, "the planner, step 1's two turns, step 2's question");
    first.signal("TERM");
    assert!(first.wait_exit(10), "the first worker stops");

    let _second = WorkerProcess::spawn(&stand.env, "second");
    let answer = HumanInput { decision: Decision::Approve, message: Some("The word is two.".into()) };
    stand.queue.submitter().give_input(&tenant(), &id, &answer).await.expect("input");
    let history = stand.wait_ended(&id).await;
    let task = record(&stand.queue, &id).await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{history:?}");
    assert_eq!(terminal_count(&history), 1, "{history:?}");
    let sandbox = sandbox_ids(&history).remove(0);
    assert!(sandbox_ids(&history).iter().all(|s| *s == sandbox), "one desktop throughout: {history:?}");
    assert_eq!(resumed(&history), vec![(2, 1, sandbox, false)], "taken up at the step it waited at: {history:?}");
    assert_eq!(steps_started(&history), vec![0, 1], "each plan step started once: {history:?}");
    let result = task.result.unwrap_or_default();
    assert_eq!(result["steps"], json!(["Wrote one.", "Wrote two."]), "{result}");
    assert_eq!(stand.output(&id, "outbox/log.txt").await, "one\ntwo\n", "each command ran once, in order");

    let calls = stand.model.received();
    assert_eq!(calls.len(), 6, "no model call is made twice");
    assert_eq!(calls.iter().filter(|c| is_planner(c)).count(), 1, "the task is planned once");
    let woken = &calls[4];
    assert!(opening(woken).contains("Now do step 2 of 2"), "the woken step goes on: {}", opening(woken));
    let last = woken.body["messages"].as_array().and_then(|m| m.last()).map(Value::to_string).unwrap_or_default();
    assert!(
        last.contains("toolu_ask") && last.contains("The word is two."),
        "the person's answer is the question's result: {last}"
    );
}
