//! Durable scripted runs: a scripted task journals each action as the
//! model-driven ones do, so a worker killed mid-run costs no action done
//! and runs none twice (another worker goes on in the same desktop), and a
//! `confirm` step that waits for a person is parked: its worker slot given
//! back, its desktop paused, and the approval lets any worker go on with
//! the actions after it in the same desktop. Real parts as in
//! `durable_runs`: worker processes, Redis with a 5 s lease, S3, desktops
//! from a flotilla-sandboxd reached through the E2B provider; the desktop's
//! terminal appends each typed command's line to `log.txt`, so an action
//! run twice shows as a repeated line.

use std::time::Duration;

use flotilla_tests::desktop::{eventually, sandbox_ids};
use flotilla_tests::fleet::WorkerProcess;
use flotilla_tests::tasks::{record, tenant};
use flotilla_types::action::Action;
use flotilla_types::event::{Event, EventKind};
use flotilla_types::task::{Decision, HumanInput, TaskStatus};
use serde_json::{json, Value};

use crate::durable_runs::{
    is_waiting_action, kill_and_end_their_sandboxes, resumed, started_over_or_asked, terminal_count, Stand,
};

/// An action that types `command` and a newline in the terminal.
fn typing(command: &str) -> Value {
    json!({"type": "type", "text": format!("echo {command} >> log.txt\n")})
}

/// A scripted task of `actions`, its desktop kept after it ends so the
/// test can read it.
fn script(actions: Vec<Value>) -> Value {
    script_on_interrupt("resume", actions)
}

fn script_on_interrupt(on_interrupt: &str, actions: Vec<Value>) -> Value {
    json!({
        "prompt": "append lines to log.txt in the terminal",
        "pipeline": "scripted",
        "actions": actions,
        "on_interrupt": on_interrupt,
        "retry": {"max_attempts": 3},
        "sandbox": {"keep_alive": true}
    })
}

fn wait(ms: u64) -> Value {
    json!({"type": "wait", "ms": ms})
}

/// How many of `events` completed typing `command`.
fn typed(events: &[Event], command: &str) -> usize {
    let typing = Action::Type { text: format!("echo {command} >> log.txt\n") };
    events.iter().filter(|e| matches!(&e.kind, EventKind::ActionCompleted { action, .. } if *action == typing)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_workers_scripted_task_goes_on_in_the_same_desktop_and_runs_each_action_once() {
    let stand = Stand::start().await;
    let mut doomed = WorkerProcess::spawn(&stand.env, "doomed");
    let actions = vec![typing("one"), typing("two"), wait(8000), typing("three"), typing("four")];
    let id = stand.submit(script(actions)).await;

    // Killed while its third action (a wait) is under way, journaled as such.
    stand.wait_for("the wait starts", &id, 90, is_waiting_action).await;
    doomed.signal("KILL");
    assert!(doomed.wait_exit(5), "SIGKILL ends the worker");
    let journal = stand.journal(&id);
    assert!(journal.contains(r#""script":{"action":2,"state":"intent"}"#), "the wait is in flight: {journal}");
    let sandbox = sandbox_ids(&stand.events(&id).await).remove(0);
    assert_eq!(stand.log(&sandbox).await, "one\ntwo\n", "the first two commands ran once before the kill");

    let _second = WorkerProcess::spawn(&stand.env, "second");
    let history = stand.wait_ended(&id).await;

    let ended = record(&stand.queue, &id).await;
    assert_eq!(ended.status, TaskStatus::Succeeded, "{history:?}");
    assert_eq!(terminal_count(&history), 1, "the task ends once: {history:?}");
    assert_eq!(ended.result.as_ref().map(|r| r["text"].clone()), Some(json!("ran 5 actions")), "{ended:?}");
    assert_eq!(resumed(&history), vec![(2, 2, sandbox.clone(), true)], "resumed after two steps, the wait in flight");
    assert!(sandbox_ids(&history).iter().all(|s| *s == sandbox), "every attempt ran in the same desktop: {history:?}");
    for command in ["one", "two", "three", "four"] {
        assert_eq!(typed(&history, command), 1, "{command} was typed once: {history:?}");
    }
    let settled = async || stand.log(&sandbox).await.ends_with("four\n");
    eventually("the desktop ran the last command", Duration::from_secs(10), settled).await;
    assert_eq!(stand.log(&sandbox).await, "one\ntwo\nthree\nfour\n", "each command ran once, in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_confirm_is_parked_and_the_actions_after_it_run_once_on_another_worker_in_the_same_desktop() {
    let mut stand = Stand::start().await;
    stand.env.push(("FLOTILLA_WORKER_CONCURRENCY".into(), "1".into()));
    stand.env.push(("FLOTILLA_PARK_WAITING_AFTER_MS".into(), "300".into()));
    let mut first = WorkerProcess::spawn(&stand.env, "first");
    let confirm = json!({"type": "confirm", "message": "submit the form"});
    let id = stand.submit(script(vec![typing("before"), confirm, typing("approved")])).await;

    eventually("the task is parked", Duration::from_secs(90), async || stand.task_field(&id, "parked") == "1").await;
    let waiting = record(&stand.queue, &id).await;
    assert_eq!((waiting.status, waiting.code.map(|c| c.as_str())), (TaskStatus::Waiting, Some("sensitive-action")));
    let sandbox = sandbox_ids(&stand.events(&id).await).remove(0);
    assert_eq!(stand.sandbox_detail(&sandbox).await["state"], "paused", "the desktop is paused at the host");
    assert_eq!(stand.task_field(&id, "owner"), "", "no attempt owns the parked task");
    let journal = stand.journal(&id);
    assert!(
        journal.contains(r#""script":{"action":1,"state":"pending"}"#) && journal.contains(r#""kind":"sensitive""#),
        "the confirm's wait is journaled: {journal}"
    );
    eventually("the parked task holds no running place", Duration::from_secs(10), async || {
        let stats = stand.queue.reader().stats(&tenant()).await.expect("stats");
        stats.tenants[0].running == 0 && stats.tenants[0].queued == 0
    })
    .await;
    assert_eq!(stand.log(&sandbox).await, "before\n", "nothing after the confirm ran");

    first.signal("TERM");
    assert!(first.wait_exit(10), "the first worker stops");
    let _second = WorkerProcess::spawn(&stand.env, "second");
    let approve = HumanInput { decision: Decision::Approve, message: None };
    stand.queue.submitter().give_input(&tenant(), &id, &approve).await.expect("input");
    let history = stand.wait_ended(&id).await;

    assert_eq!(record(&stand.queue, &id).await.status, TaskStatus::Succeeded, "{history:?}");
    assert_eq!(terminal_count(&history), 1, "{history:?}");
    assert_eq!(resumed(&history), vec![(2, 1, sandbox.clone(), false)], "taken up at the confirm: {history:?}");
    assert!(
        history.iter().any(|e| matches!(&e.kind, EventKind::Started { worker, attempt } if worker == "second" && *attempt == 2)),
        "the second worker took it up: {history:?}"
    );
    assert!(sandbox_ids(&history).iter().all(|s| *s == sandbox), "one desktop throughout: {history:?}");
    let waits = history.iter().filter(|e| matches!(e.kind, EventKind::Waiting { .. })).count();
    assert_eq!(waits, 1, "the person was asked once: {history:?}");
    let settled = async || stand.log(&sandbox).await.ends_with("approved\n");
    eventually("the desktop ran the command after the confirm", Duration::from_secs(10), settled).await;
    assert_eq!(stand.log(&sandbox).await, "before\napproved\n", "the line typed before the wait is still there, each once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigtermed_worker_hands_its_scripted_task_back_between_two_actions() {
    let stand = Stand::start().await;
    let mut stopping = WorkerProcess::spawn(&stand.env, "stopping");
    let id = stand.submit(script(vec![typing("one"), wait(2000), typing("two"), typing("three")])).await;
    stand.wait_for("the wait starts", &id, 90, is_waiting_action).await;
    let _other = WorkerProcess::spawn(&stand.env, "other");

    // Stopped during the wait: the wait ends, and the task is handed back
    // before the next action.
    stopping.signal("TERM");
    assert!(stopping.wait_exit(10), "the worker hands its task back and exits");
    let history = stand.wait_ended(&id).await;

    assert_eq!(record(&stand.queue, &id).await.status, TaskStatus::Succeeded, "{history:?}");
    assert_eq!(terminal_count(&history), 1, "{history:?}");
    let sandbox = sandbox_ids(&history).remove(0);
    assert_eq!(resumed(&history), vec![(2, 2, sandbox.clone(), false)], "handed back after the wait, nothing in flight");
    assert!(
        history.iter().any(|e| matches!(&e.kind, EventKind::Started { worker, attempt } if worker == "other" && *attempt == 2)),
        "the other worker took it up: {history:?}"
    );
    let settled = async || stand.log(&sandbox).await.ends_with("three\n");
    eventually("the desktop ran the last command", Duration::from_secs(10), settled).await;
    assert_eq!(stand.log(&sandbox).await, "one\ntwo\nthree\n", "each command ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_task_whose_sandbox_is_gone_at_resume_ends_waits_or_starts_over_by_its_policy() {
    let stand = Stand::start().await;
    let doomed = WorkerProcess::spawn(&stand.env, "doomed");
    let actions = || vec![typing("start"), wait(8_000), typing("end")];
    let resume = stand.submit(script_on_interrupt("resume", actions())).await;
    let ask = stand.submit(script_on_interrupt("ask", actions())).await;
    let restart = stand.submit(script_on_interrupt("restart", actions())).await;
    for id in [&resume, &ask, &restart] {
        stand.wait_for("the task waits on its desktop", id, 90, is_waiting_action).await;
    }
    let first_sandboxes = kill_and_end_their_sandboxes(&stand, doomed, [&resume, &ask, &restart]).await;
    let _second = WorkerProcess::spawn(&stand.env, "second");

    // resume: ends with `problem`, naming the sandbox; nothing runs again.
    let history = stand.wait_ended(&resume).await;
    let failed = record(&stand.queue, &resume).await;
    assert_eq!((failed.status, failed.code.map(|c| c.as_str())), (TaskStatus::Failed, Some("problem")), "{history:?}");
    assert!(failed.error.as_deref().is_some_and(|e| e.contains(&first_sandboxes[0]) && e.contains("is gone")), "{failed:?}");
    assert_eq!(typed(&history, "start"), 1, "{history:?}");

    // restart: the whole script again in a new desktop; ask: a person
    // approves starting over.
    started_over_or_asked(&stand, &restart, &ask, &first_sandboxes).await;
}
