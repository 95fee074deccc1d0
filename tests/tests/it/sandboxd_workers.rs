//! Sandboxes outlive workers: a `flotilla-worker` whose local desktops come
//! from a flotilla-sandboxd (`FLOTILLA_SANDBOXD_URL`) is SIGKILLed
//! while its task acts; the task's record names the desktop and the host
//! it lives on; the desktop stays up, a second worker runs a task in it by
//! id, and at its deadline the host kills it and leaves no
//! process of it.

use std::path::Path;
use std::time::Duration;

use flotilla_sandboxd::{Sandboxd, TestOptions};
use flotilla_tests::desktop::{eventually, sandbox_ids};
use flotilla_tests::fleet::{test_env, WorkerProcess};
use flotilla_tests::tasks::{events, queue, record, tenant};
use flotilla_tests::{test_config, unique_prefix, RedisServer};
use flotilla_types::action::Action;
use flotilla_types::event::EventKind;
use flotilla_types::task::{TaskSpec, TaskStatus};
use serde_json::{json, Value};

/// `(pid, start time)` of every process the host's desktop records name.
fn recorded_processes(root: &Path) -> Vec<(u32, u64)> {
    let Ok(entries) = std::fs::read_dir(root) else { return Vec::new() };
    entries
        .filter_map(|entry| std::fs::read(entry.ok()?.path().join("record.json")).ok())
        .filter_map(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        .flat_map(|r| r["processes"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| Some((u32::try_from(p["pid"].as_u64()?).ok()?, p["started"].as_u64()?)))
        .collect()
}

/// Whether the very process `(pid, started)` still runs (a zombie does not).
fn running(&(pid, started): &(u32, u64)) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let Some(close) = text.rfind(')') else { return false };
    let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
    let state = fields.first().and_then(|f| f.chars().next());
    let start = fields.get(19).and_then(|f| f.parse::<u64>().ok());
    start == Some(started) && !matches!(state, Some('Z' | 'X' | 'x') | None)
}

/// The host's answer to `GET /sandboxes/{id}`: its status and body.
pub(crate) async fn detail(host: &Sandboxd, id: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .get(format!("{}/sandboxes/{id}", host.api_url()))
        .header("X-API-Key", host.test_key())
        .send()
        .await
        .expect("detail");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_outlives_its_sigkilled_worker_and_a_second_worker_continues_in_it() {
    let host = Sandboxd::start().await;
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let extra = [
        ("FLOTILLA_SANDBOX_PROVIDER", "local"),
        ("FLOTILLA_SANDBOXD_URL", host.api_url()),
        ("FLOTILLA_SANDBOXD_KEY", host.test_key()),
        ("FLOTILLA_HEARTBEAT_MS", "200"),
    ];
    let env = test_env(&redis, &prefix, &extra);
    let q = queue(&test_config(&redis, &prefix, &extra)).await;
    let mut doomed = WorkerProcess::spawn(&env, "doomed");

    let busy = json!({
        "prompt": "hold a desktop", "pipeline": "scripted", "retry": {"max_attempts": 1},
        "actions": [{"type": "type", "text": "echo before > mark.txt\n"}, {"type": "wait", "ms": 60000}]
    });
    let spec = TaskSpec::from_json(busy.to_string().as_bytes()).expect("valid spec");
    let first = q.submitter().submit(&tenant(), spec).await.expect("submit").id;
    eventually("the task acts on its desktop", Duration::from_secs(60), async || {
        events(&q, &first).await.iter().any(|e| e.kind.name() == "action_completed")
    })
    .await;
    let sandbox = sandbox_ids(&events(&q, &first).await).remove(0);
    let held = record(&q, &first).await.sandbox.expect("the task records its sandbox");
    assert_eq!((held["id"].as_str(), held["host"].as_str()), (Some(sandbox.as_str()), Some(host.api_url())), "{held}");
    let processes = recorded_processes(host.root());
    assert!(!processes.is_empty() && processes.iter().all(running), "the desktop runs: {processes:?}");

    doomed.signal("KILL");
    assert!(doomed.wait_exit(5), "SIGKILL ends the worker");
    let (status, body) = detail(&host, &sandbox).await;
    assert_eq!((status, body["state"].as_str()), (200, Some("running")), "the desktop outlives its worker: {body}");
    assert!(processes.iter().all(running), "every process of the desktop still runs");

    // A second worker continues in it by id: what the first typed is there.
    let second_worker = WorkerProcess::spawn(&env, "second");
    let next = json!({
        "prompt": "continue", "pipeline": "scripted",
        "actions": [{"type": "type", "text": "cat mark.txt > seen.txt; echo after >> seen.txt\n"}, {"type": "wait", "ms": 500}],
        "sandbox": {"id": sandbox}
    });
    let spec = TaskSpec::from_json(next.to_string().as_bytes()).expect("valid spec");
    let second = q.submitter().submit(&tenant(), spec).await.expect("submit").id;
    eventually("the second task ends", Duration::from_secs(60), async || record(&q, &second).await.status.is_terminal()).await;
    let history = events(&q, &second).await;
    assert_eq!(record(&q, &second).await.status, TaskStatus::Succeeded, "{history:?}");
    assert_eq!(sandbox_ids(&history), std::slice::from_ref(&sandbox), "the second task ran in the first one's desktop");
    let provider = flotilla_worker::sandbox::E2bProvider::new(host.config()).expect("a client of the host");
    let id = flotilla_worker::sandbox::SandboxId::parse(&sandbox).expect("an id");
    eventually("both lines are in the desktop's file", Duration::from_secs(20), async || {
        let seen = flotilla_worker::sandbox::SandboxProvider::read_file(&provider, &id, "seen.txt").await;
        seen.is_ok_and(|bytes| bytes == b"before\nafter\n")
    })
    .await;

    // At its deadline the host kills it, and nothing of it is left.
    let shortened = reqwest::Client::new()
        .post(format!("{}/sandboxes/{sandbox}/timeout", host.api_url()))
        .header("X-API-Key", host.test_key())
        .json(&json!({"timeout": 1}))
        .send()
        .await
        .expect("timeout");
    assert_eq!(shortened.status(), 204);
    eventually("the host ends the sandbox at its deadline", Duration::from_secs(20), async || {
        detail(&host, &sandbox).await.0 == 404
    })
    .await;
    eventually("no process of the desktop is left", Duration::from_secs(10), async || !processes.iter().any(running)).await;
    drop(second_worker);
    host.shutdown().await;
}

/// Each node of a cluster has its own host and its workers take desktops
/// from it; a task whose worker dies goes on in its desktop on a worker of
/// another node, which reaches the host the task recorded (with the fleet's
/// one key), not its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_goes_on_in_its_desktop_on_a_worker_whose_own_host_is_another() {
    let key = format!("e2b_{:032x}", rand::random::<u128>());
    let options = TestOptions { key: Some(key.clone()), ..TestOptions::default() };
    let (first_host, second_host) = (Sandboxd::start_with(options.clone()).await, Sandboxd::start_with(options).await);
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let node = |host: &Sandboxd| {
        let extra = [
            ("FLOTILLA_SANDBOX_PROVIDER", "local"),
            ("FLOTILLA_SANDBOXD_URL", host.api_url()),
            ("FLOTILLA_SANDBOXD_KEY", key.as_str()),
            ("FLOTILLA_HEARTBEAT_MS", "200"),
            ("FLOTILLA_LEASE_MS", "2000"),
        ];
        (test_env(&redis, &prefix, &extra), test_config(&redis, &prefix, &extra))
    };
    let (first_env, config) = node(&first_host);
    let (second_env, _) = node(&second_host);
    let q = queue(&config).await;
    let mut doomed = WorkerProcess::spawn(&first_env, "first-node");
    let task = json!({
        "prompt": "two lines", "pipeline": "scripted",
        "actions": [
            {"type": "type", "text": "echo one >> lines.txt\n"},
            {"type": "wait", "ms": 6000},
            {"type": "type", "text": "echo two >> lines.txt\n"},
            {"type": "wait", "ms": 500}
        ]
    });
    let spec = TaskSpec::from_json(task.to_string().as_bytes()).expect("valid spec");
    let id = q.submitter().submit(&tenant(), spec).await.expect("submit").id;
    eventually("the first line is typed", Duration::from_secs(60), async || {
        events(&q, &id).await.iter().any(|e| e.kind.name() == "action_completed")
    })
    .await;
    doomed.signal("KILL");
    assert!(doomed.wait_exit(5), "SIGKILL ends the worker");
    let sandbox = sandbox_ids(&events(&q, &id).await).remove(0);

    let _other_node = WorkerProcess::spawn(&second_env, "second-node");
    eventually("the task ends", Duration::from_secs(90), async || record(&q, &id).await.status.is_terminal()).await;
    let history = events(&q, &id).await;
    assert_eq!(record(&q, &id).await.status, TaskStatus::Succeeded, "{history:?}");
    assert!(history.iter().any(|e| e.kind.name() == "resumed"), "the second node's worker took the task up: {history:?}");
    assert!(sandbox_ids(&history).iter().all(|s| *s == sandbox), "every attempt ran in the first node's desktop: {history:?}");
    let held = record(&q, &id).await.sandbox.expect("the task records its sandbox");
    assert_eq!(held["host"].as_str(), Some(first_host.api_url()), "recorded with the host it lives on: {held}");
    assert_eq!(detail(&second_host, &sandbox).await.0, 404, "the second node's host never had it");
    for line in ["one", "two"] {
        let typed = history
            .iter()
            .filter(
                |e| matches!(&e.kind, EventKind::ActionCompleted { action: Action::Type { text }, .. } if text.contains(line)),
            )
            .count();
        assert_eq!(typed, 1, "echo {line} was typed once: {history:?}");
    }
    first_host.shutdown().await;
    second_host.shutdown().await;
}
