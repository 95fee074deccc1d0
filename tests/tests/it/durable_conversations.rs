//! Durable runs of the pipelines whose model API keeps no conversation
//! (Claude's Messages API, Gemini's `generateContent`): the step journal
//! carries their whole message history, screenshots as blob-store hashes,
//! so a task whose worker is SIGKILLed mid-action goes on with every
//! earlier turn, the screenshots fetched back byte for byte. On the same
//! stand as `durable_runs` (sandboxd desktops through the E2B provider, a
//! real Redis with a 5 s lease, s3s-fs, one scripted model server logging
//! every call).

use std::time::Duration;

use flotilla_tests::desktop::{eventually, sandbox_ids};
use flotilla_tests::fakes::{anthropic, gemini, Recorded, Reply};
use flotilla_tests::fleet::WorkerProcess;
use flotilla_tests::tasks::record;
use flotilla_types::event::Event;
use flotilla_types::task::TaskStatus;
use serde_json::{json, Value};

use crate::durable_runs::{is_waiting_action, resumed, terminal_count, Stand};

/// One pipeline's side of the scenario: its task, its four scripted
/// answers (type `one`, a long wait, type `three`, done) and the path its
/// calls go to.
struct Pipeline {
    spec: Value,
    answers: [Reply; 4],
    path: &'static str,
}

/// What happened around the kill: the task's events, its desktop's log and
/// the model calls made.
struct Outcome {
    history: Vec<Event>,
    sandbox: String,
    log: String,
    calls: Vec<Recorded>,
}

/// Runs `pipeline`'s task on a worker that is SIGKILLed while the task's
/// second action (a 30 s wait) is under way, and another worker that takes
/// it up.
async fn killed_mid_action(pipeline: Pipeline) -> Outcome {
    let stand = Stand::start().await;
    for answer in pipeline.answers {
        stand.model.push(answer);
    }
    let mut doomed = WorkerProcess::spawn(&stand.env, "doomed");
    let id = stand.submit(pipeline.spec).await;
    stand.wait_for("the second action starts", &id, 90, is_waiting_action).await;
    let journal = stand.journal(&id);
    assert!(journal.contains("screen_hash"), "the journal names the conversation's screenshots by hash: {journal}");
    // A base64 PNG starts with the signature's encoding.
    assert!(!journal.contains("iVBORw0KGgo"), "the journal holds no screenshot bytes: {journal}");
    doomed.signal("KILL");
    assert!(doomed.wait_exit(5), "SIGKILL ends the worker");
    let sandbox = sandbox_ids(&stand.events(&id).await).remove(0);
    assert_eq!(stand.log(&sandbox).await, "one\n", "the first command ran once before the kill");

    let _second = WorkerProcess::spawn(&stand.env, "second");
    let history = stand.wait_ended(&id).await;
    assert_eq!(record(&stand.queue, &id).await.status, TaskStatus::Succeeded, "{history:?}");
    let settled = async || stand.log(&sandbox).await.ends_with("three\n");
    eventually("the desktop ran the resumed command", Duration::from_secs(10), settled).await;
    let log = stand.log(&sandbox).await;
    let calls = stand.model.received().into_iter().filter(|r| r.path.contains(pipeline.path)).collect();
    Outcome { history, sandbox, log, calls }
}

/// `value` without prompt-cache marks, which move to the newest turns.
fn without_cache_marks(mut value: Value) -> Value {
    strip(&mut value);
    value
}

fn strip(value: &mut Value) {
    match value {
        Value::Array(items) => items.iter_mut().for_each(strip),
        Value::Object(map) => {
            map.remove("cache_control");
            map.values_mut().for_each(strip);
        }
        _ => {}
    }
}

/// What every pipeline's run must show: one end, one resume from step 1
/// with the wait in flight, every command once, no model call made twice,
/// and the resumed call carrying the whole earlier conversation (its
/// screenshots as they were sent) plus the note on the interrupted wait.
fn assert_carried_over(outcome: &Outcome, history_field: &str) {
    let Outcome { history, sandbox, log, calls } = outcome;
    assert_eq!(terminal_count(history), 1, "the task ends once: {history:?}");
    assert_eq!(resumed(history), vec![(2, 1, sandbox.clone(), true)], "resumed after one step, the wait in flight");
    assert!(sandbox_ids(history).iter().all(|s| s == sandbox), "every attempt ran in the same desktop: {history:?}");
    assert_eq!(log, "one\nthree\n", "each command ran once");
    assert_eq!(calls.len(), 4, "no model call is made twice: {:?}", calls.iter().map(|c| &c.path).collect::<Vec<_>>());

    let before = calls[1].body[history_field].as_array().expect("a history").clone();
    let resumed = calls[2].body[history_field].as_array().expect("a history").clone();
    assert_eq!(resumed.len(), before.len() + 2, "the earlier turns, the interrupted one and its answer");
    assert_eq!(
        without_cache_marks(Value::Array(resumed[..before.len()].to_vec())),
        without_cache_marks(Value::Array(before)),
        "the resumed call carries the earlier conversation as it was sent, screenshots included"
    );
    let last = resumed.last().expect("an answer").to_string();
    assert!(last.contains("may or may not have happened"), "the model hears the wait may not have finished: {last}");
    let shown = resumed.iter().map(Value::to_string).filter(|m| m.contains("image/png")).count();
    assert_eq!(shown, 3, "the opening screen, the one after the first command and the one now");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_claude_task_goes_on_with_its_earlier_turns() {
    let typing = |id: &str, command: &str| anthropic::action_turn(id, json!({"action": "type", "text": format!("{command}\n")}));
    let pipeline = Pipeline {
        spec: json!({
            "prompt": "append lines to log.txt in the terminal",
            "pipeline": "claude-computer-use",
            "model": "claude-sonnet-4-5",
            "on_interrupt": "resume",
            "sandbox": {"keep_alive": true},
            "retry": {"max_attempts": 3}
        }),
        answers: [
            typing("toolu_1", "echo one >> log.txt"),
            anthropic::action_turn("toolu_2", json!({"action": "wait", "duration": 30})),
            typing("toolu_3", "echo three >> log.txt"),
            anthropic::final_answer("done"),
        ],
        path: "/v1/messages",
    };
    let outcome = killed_mid_action(pipeline).await;
    assert_carried_over(&outcome, "messages");
    let resumed = outcome.calls[2].body["messages"].to_string();
    assert!(resumed.contains("toolu_1") && resumed.contains("toolu_2"), "{resumed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_gemini_task_goes_on_with_its_earlier_turns() {
    let typing = |command: &str| gemini::calls_turn(vec![gemini::call("type", json!({"text": format!("{command}\n")}))]);
    let pipeline = Pipeline {
        spec: json!({
            "prompt": "append lines to log.txt in the terminal",
            "pipeline": "gemini-computer-use",
            "on_interrupt": "resume",
            "sandbox": {"keep_alive": true},
            "retry": {"max_attempts": 3}
        }),
        answers: [
            typing("echo one >> log.txt"),
            gemini::calls_turn(vec![gemini::call("wait", json!({"seconds": 30}))]),
            typing("echo three >> log.txt"),
            gemini::final_answer("done"),
        ],
        path: ":generateContent",
    };
    let outcome = killed_mid_action(pipeline).await;
    assert_carried_over(&outcome, "contents");
    let resumed = outcome.calls[2].body["contents"].to_string();
    assert!(resumed.contains("echo one") && resumed.contains(r#""name":"wait""#), "{resumed}");
}
