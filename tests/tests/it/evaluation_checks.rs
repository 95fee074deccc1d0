//! Evaluations' edges on real local desktops: a check made of scripted
//! actions (they go to the desktop after the agent stops and before the
//! check's command, so a check can finish what the judge needs without
//! counting as the agent's actions), and a set-up that fails before any
//! model call, the planner's too.

use std::time::Duration;

use flotilla_tests::desktop::{count, DesktopFleet, DesktopOptions};
use flotilla_tests::fakes::ScriptedServer;
use flotilla_tests::tasks::{events, record, wait_all_ended};
use flotilla_tests::{api_key, spawn_api, ApiClient};
use flotilla_types::eval::{CheckStage, Verdict};
use flotilla_types::ids::TaskId;
use flotilla_types::task::{StopCode, TaskStatus};
use serde_json::{json, Value};

/// The agent types a line into the terminal and leaves it unsent.
fn typed_unsent(check: Value) -> Value {
    json!({
        "prompt": "leave a line typed in the terminal",
        "actions": [
            {"type": "click", "x": 512, "y": 384},
            {"type": "type", "text": "echo draft > note.txt"}
        ],
        "check": check
    })
}

/// Waits up to 5 s for `note.txt`, then compares it.
const NOTE_IS_DRAFT: &str =
    "for _ in $(seq 50); do test -s note.txt && break; sleep 0.1; done; test \"$(cat note.txt 2>/dev/null)\" = draft";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_checks_actions_run_on_the_desktop_before_its_command_and_are_not_the_agents() {
    let fleet = DesktopFleet::start(DesktopOptions { warm: 2, ..DesktopOptions::default() }).await;
    let api = spawn_api(fleet.config.clone()).await;
    let client = ApiClient::new(&api, api_key());
    let tasks = [
        // The check presses Enter, then its command finds the file.
        typed_unsent(json!({"actions": [{"type": "keypress", "keys": ["Return"]}], "command": NOTE_IS_DRAFT})),
        // Without the check's Enter, the line was never run.
        typed_unsent(json!({"command": NOTE_IS_DRAFT, "timeout_s": 10})),
        // A check of actions alone passes once they ran.
        typed_unsent(json!({"actions": [{"type": "keypress", "keys": ["ctrl", "u"]}, {"type": "wait", "ms": 1}]})),
    ];
    let (status, accepted) = client
        .post("/v1/batches", &json!({"tasks": tasks, "defaults": {"pipeline": "scripted", "retry": {"max_attempts": 1}}}))
        .await;
    assert_eq!(status, 202, "{accepted}");
    let ids: Vec<TaskId> = accepted["task_ids"]
        .as_array()
        .expect("task ids")
        .iter()
        .map(|v| TaskId::parse(v.as_str().expect("id")).expect("id"))
        .collect();
    wait_all_ended(&fleet.queue, &ids, Duration::from_secs(120)).await;

    let wanted = [(Verdict::Passed, ""), (Verdict::Failed, "the check exited 1"), (Verdict::Passed, "the check's 2 actions ran")];
    for (id, (verdict, reason)) in ids.iter().zip(wanted) {
        let task = record(&fleet.queue, id).await;
        assert_eq!((task.status, task.verdict), (TaskStatus::Succeeded, Some(verdict)), "{task:?}");
        assert!(task.reason.as_deref().unwrap_or_default().starts_with(reason), "{task:?}");
        let history = events(&fleet.queue, id).await;
        assert_eq!(count(&history, "action"), 2, "only the agent's two actions are its own: {history:?}");
        assert_eq!(count(&history, "checked"), 1, "{history:?}");
    }

    // A check with nothing to do, or an action the desktop cannot take, is
    // refused at submit and changes nothing.
    for check in [json!({}), json!({"actions": []}), json!({"actions": [{"type": "type", "text": ""}]})] {
        let (status, body) = client.post("/v1/tasks", &typed_unsent(check.clone())).await;
        assert_eq!(status, 400, "{check}: {body}");
        assert!(body["error"]["field"].as_str().is_some_and(|f| f.starts_with("check")), "{body}");
    }
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_planned_tasks_failing_setup_ends_it_before_the_planners_call() {
    let server = ScriptedServer::start().await;
    let env = vec![("OPENAI_BASE_URL", format!("{}/v1", server.url())), ("OPENAI_API_KEY", "sk-test-openai-secret".to_owned())];
    let fleet = DesktopFleet::start(DesktopOptions { warm: 1, env, ..DesktopOptions::default() }).await;
    let api = spawn_api(fleet.config.clone()).await;
    let client = ApiClient::new(&api, api_key());
    let task = json!({
        "prompt": "plan, then act", "pipeline": "openai-cua", "plan": true, "retry": {"max_attempts": 1},
        "setup": {"commands": ["echo 'no fixture' >&2; exit 4"]}
    });
    let (status, accepted) = client.post("/v1/tasks", &task).await;
    assert_eq!(status, 202, "{accepted}");
    let id = TaskId::parse(accepted["id"].as_str().expect("id")).expect("id");
    wait_all_ended(&fleet.queue, std::slice::from_ref(&id), Duration::from_secs(60)).await;
    let task = record(&fleet.queue, &id).await;
    assert_eq!((task.status, task.code, task.verdict), (TaskStatus::Failed, Some(StopCode::Problem), Some(Verdict::Error)));
    assert!(task.reason.as_deref().is_some_and(|r| r.contains("command 0 exited 4: no fixture")), "{task:?}");
    assert_eq!(task.check_stage, Some(CheckStage::Setup), "the record says the set-up gave the verdict");
    assert!(server.received().is_empty(), "no model call, not even the planner's: {:?}", server.received());
    let history = events(&fleet.queue, &id).await;
    assert_eq!(count(&history, "plan"), 0, "{history:?}");
    fleet.stop().await;
}
