//! Waiting releases the slot: a model-driven task that waits for a person
//! past the grace period is parked — its wait journaled, its desktop
//! paused at the sandbox host, its worker slot and lane entry given back —
//! and the answer wakes it for whichever worker is free, which resumes the
//! same desktop and goes on from the step it waited at. Real parts as in
//! `durable_runs`: worker processes, Redis, S3, desktops from a
//! flotilla-sandboxd reached through the E2B provider, and a local server
//! speaking the OpenAI Responses protocol.

use std::time::Duration;

use flotilla_tests::desktop::{eventually, sandbox_ids};
use flotilla_tests::fakes::openai;
use flotilla_tests::fleet::WorkerProcess;
use flotilla_tests::tasks::{record, tenant};
use flotilla_types::event::EventKind;
use flotilla_types::task::{Decision, HumanInput, TaskStatus};
use serde_json::json;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::durable_runs::{resumed, terminal_count, Stand};

/// A model turn that types `command` and a newline in the terminal.
fn typing(call: &str, command: &str) -> serde_json::Value {
    openai::computer_call_batch(call, vec![openai::type_text(&format!("{command}\n"))])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waiting_for_approval_is_parked_and_goes_on_in_the_same_desktop_on_another_worker() {
    let mut stand = Stand::start().await;
    stand.env.push(("FLOTILLA_WORKER_CONCURRENCY".into(), "1".into()));
    stand.env.push(("FLOTILLA_PARK_WAITING_AFTER_MS".into(), "500".into()));
    stand.model.push(openai::reply("resp_1", vec![typing("c1", "echo before >> log.txt")]));
    let sensitive =
        openai::with_safety_check(typing("c2", "echo approved >> log.txt"), "sc_1", "malicious_instructions", "Submit?");
    stand.model.push(openai::reply("resp_2", vec![sensitive]));
    stand.model.push(openai::reply("resp_other", vec![openai::message("other done")]));
    stand.model.push(openai::reply("resp_3", vec![openai::message("done")]));
    let mut first = WorkerProcess::spawn(&stand.env, "first");
    let spec = json!({
        "prompt": "type a line, then submit it once approved",
        "pipeline": "openai-cua",
        "sandbox": {"keep_alive": true}
    });
    let id = stand.submit(spec).await;

    // Parked: the task says so in its hash once its sandbox is paused.
    eventually("the task is parked", Duration::from_secs(90), async || stand.task_field(&id, "parked") == "1").await;
    let waiting = record(&stand.queue, &id).await;
    assert_eq!((waiting.status, waiting.code.map(|c| c.as_str())), (TaskStatus::Waiting, Some("sensitive-action")));
    let history = stand.events(&id).await;
    let sandbox = sandbox_ids(&history).remove(0);
    assert_eq!(stand.sandbox_detail(&sandbox).await["state"], "paused", "the desktop is paused at the host");
    assert_eq!(stand.task_field(&id, "owner"), "", "no attempt owns the parked task");
    let journal = stand.journal(&id);
    assert!(
        journal.contains(r#""kind":"sensitive""#) && journal.contains(r#""code":"sensitive-action""#),
        "the wait is journaled: {journal}"
    );

    // /v1/queues's figures: the parked task is neither queued nor running.
    eventually("the parked task leaves the running count", Duration::from_secs(10), async || {
        let stats = stand.queue.reader().stats(&tenant()).await.expect("stats");
        let load = &stats.tenants[0];
        load.running == 0 && load.queued == 0 && stats.lanes.iter().all(|l| l.pending == 0 && l.depth == 0)
    })
    .await;

    // The worker's one slot is free: another task runs on it meanwhile.
    let other = stand.submit(json!({"prompt": "say done", "pipeline": "openai-cua"})).await;
    eventually("the other task ends", Duration::from_secs(90), async || record(&stand.queue, &other).await.status.is_terminal())
        .await;
    let other_history = stand.events(&other).await;
    assert_eq!(record(&stand.queue, &other).await.status, TaskStatus::Succeeded, "{other_history:?}");
    assert!(
        other_history.iter().any(|e| matches!(&e.kind, EventKind::Started { worker, .. } if worker == "first")),
        "the worker with one slot ran it while the first task waited: {other_history:?}"
    );
    assert_eq!(record(&stand.queue, &id).await.status, TaskStatus::Waiting, "still waiting for its person");

    // Ten minutes pass for the paused desktop: its deadline runs out (the
    // keeper would have moved it on by a few minutes at a time), and a
    // paused sandbox outlives it until it is resumed.
    stand.set_sandbox_timeout(&sandbox, 1).await;
    eventually("the paused desktop's deadline passes", Duration::from_secs(10), async || {
        let detail = stand.sandbox_detail(&sandbox).await;
        let end = detail["endAt"].as_str().and_then(|t| OffsetDateTime::parse(t, &Rfc3339).ok());
        end.is_some_and(|end| end < OffsetDateTime::now_utc())
    })
    .await;
    assert_eq!(stand.sandbox_detail(&sandbox).await["state"], "paused");

    // The first worker goes away; the answer comes; another worker goes on.
    first.signal("TERM");
    assert!(first.wait_exit(10), "the first worker stops");
    let _second = WorkerProcess::spawn(&stand.env, "second");
    let approve = HumanInput { decision: Decision::Approve, message: None };
    stand.queue.submitter().give_input(&tenant(), &id, &approve).await.expect("input");
    let again = stand.queue.submitter().give_input(&tenant(), &id, &approve).await;
    assert!(again.is_err(), "a second answer finds the task woken already: {again:?}");
    let history = stand.wait_ended(&id).await;

    assert_eq!(record(&stand.queue, &id).await.status, TaskStatus::Succeeded, "{history:?}");
    assert_eq!(terminal_count(&history), 1, "{history:?}");
    assert_eq!(resumed(&history), vec![(2, 1, sandbox.clone(), false)], "taken up at the step it waited at: {history:?}");
    assert!(
        history.iter().any(|e| matches!(&e.kind, EventKind::Started { worker, attempt } if worker == "second" && *attempt == 2)),
        "the second worker took it up: {history:?}"
    );
    assert!(sandbox_ids(&history).iter().all(|s| *s == sandbox), "one desktop throughout: {history:?}");
    assert_eq!(stand.log(&sandbox).await, "before\napproved\n", "the line typed before the wait is still there, each once");
    let calls: Vec<_> = stand.model.received().into_iter().filter(|r| r.path == "/v1/responses").collect();
    assert_eq!(calls.len(), 4, "the approved action ran without asking the model again");
    let last = &calls[3];
    assert_eq!(last.body["previous_response_id"], "resp_2", "the conversation goes on from the turn that waited");
    let input = last.body["input"].to_string();
    assert!(input.contains("acknowledged_safety_checks") && input.contains("sc_1"), "the approval is acknowledged: {input}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_question_cancelled_ends_the_task_and_its_desktop() {
    let mut stand = Stand::start().await;
    stand.env.push(("FLOTILLA_PARK_WAITING_AFTER_MS".into(), "300".into()));
    let ask = openai::function_call("ask_1", "ask_human", json!({"question": "Which account should I use?"}));
    stand.model.push(openai::reply("resp_1", vec![ask]));
    let _worker = WorkerProcess::spawn(&stand.env, "only");
    let id = stand.submit(json!({"prompt": "ask which account", "pipeline": "openai-cua"})).await;
    eventually("the question is parked", Duration::from_secs(90), async || stand.task_field(&id, "parked") == "1").await;
    let sandbox = sandbox_ids(&stand.events(&id).await).remove(0);
    assert_eq!(stand.sandbox_detail(&sandbox).await["state"], "paused");
    let journal = stand.journal(&id);
    assert!(journal.contains(r#""kind":"ask""#) && journal.contains(r#""call":"ask_1""#), "{journal}");

    stand.queue.submitter().cancel(&tenant(), &id).await.expect("cancel");
    let history = stand.wait_ended(&id).await;
    assert_eq!(record(&stand.queue, &id).await.status, TaskStatus::Cancelled, "{history:?}");
    assert_eq!(terminal_count(&history), 1, "{history:?}");
    eventually("the desktop is ended", Duration::from_secs(20), async || {
        reqwest::Client::new()
            .get(format!("{}/sandboxes/{sandbox}", stand.host_api_url()))
            .header("X-API-Key", stand.host_key())
            .send()
            .await
            .is_ok_and(|r| r.status() == 404)
    })
    .await;
    let calls = stand.model.received().into_iter().filter(|r| r.path == "/v1/responses").count();
    assert_eq!(calls, 1, "the cancelled task asks the model nothing more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_task_taken_over_is_resumed_for_the_person_and_their_hand_back_answers_it() {
    let mut stand = Stand::start().await;
    stand.env.push(("FLOTILLA_PARK_WAITING_AFTER_MS".into(), "300".into()));
    let sensitive = openai::with_safety_check(typing("c1", "echo approved >> log.txt"), "sc_1", "irreversible", "Send?");
    stand.model.push(openai::reply("resp_1", vec![sensitive]));
    stand.model.push(openai::reply("resp_2", vec![openai::message("done")]));
    let _worker = WorkerProcess::spawn(&stand.env, "only");
    let spec = json!({"prompt": "send it once approved", "pipeline": "openai-cua", "sandbox": {"keep_alive": true}});
    let id = stand.submit(spec).await;
    eventually("the task is parked", Duration::from_secs(90), async || stand.task_field(&id, "parked") == "1").await;
    let sandbox = sandbox_ids(&stand.events(&id).await).remove(0);

    // A takeover wakes it: a worker resumes the desktop for the person and
    // waits, holding it (a held desktop is not paused), for their hand-back.
    stand.queue.submitter().take_over(&tenant(), &id).await.expect("takeover");
    eventually("a worker holds the desktop for the person", Duration::from_secs(30), async || {
        stand.task_field(&id, "owner") == "only" && stand.task_field(&id, "status") == "waiting"
    })
    .await;
    assert_eq!(stand.sandbox_detail(&sandbox).await["state"], "running", "the person's desktop runs");
    stand.queue.submitter().hand_back(&tenant(), &id, Some("all yours".into())).await.expect("hand back");
    let history = stand.wait_ended(&id).await;

    assert_eq!(record(&stand.queue, &id).await.status, TaskStatus::Succeeded, "{history:?}");
    assert_eq!(resumed(&history), vec![(2, 0, sandbox.clone(), false)], "{history:?}");
    assert_eq!(stand.log(&sandbox).await, "approved\n", "the hand-back approved the action, carried out once");
}
