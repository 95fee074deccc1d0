//! `max_sandboxes` on real local desktops: four worker processes that each
//! keep a warm desktop, a tenant limited to 2 sandboxes, its tasks' holding
//! sampled through the API at ≥ 20 Hz: never more than 2 hold a desktop,
//! also while a worker holding one is SIGKILLed, and every slot comes back.
//! The same tenant's tasks without a sandbox and another tenant's desktop
//! tasks are not held back by the limit.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use flotilla_queue::queue::Queue;
use flotilla_tests::fleet::FileFleet;
use flotilla_tests::tasks::{events, wait_spec};
use flotilla_tests::{unique_prefix, RedisServer, WorkerProcess};
use flotilla_types::event::EventKind;
use flotilla_types::ids::{TaskId, TenantId};
use flotilla_types::task::{TaskSpec, TaskStatus};
use redis::AsyncCommands;
use serde_json::{json, Value};

fn tenant(name: &str) -> TenantId {
    TenantId::parse(name).expect("tenant")
}

/// A task on a desktop: a move, then a wait of `ms`.
fn on_screen(ms: u64) -> TaskSpec {
    let body = json!({
        "prompt": "hold a desktop", "pipeline": "scripted",
        "actions": [{"type": "move", "x": 5, "y": 5}, {"type": "wait", "ms": ms}]
    });
    TaskSpec::from_json(body.to_string().as_bytes()).expect("valid spec")
}

async fn submit(q: &Queue, who: &TenantId, spec: &TaskSpec, n: usize) -> Vec<TaskId> {
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(q.submitter().submit(who, spec.clone()).await.expect("submit").id);
    }
    ids
}

/// The ids of the tasks the API lists as running for `key`'s tenant.
async fn running(client: &reqwest::Client, url: &str, key: &str) -> HashSet<String> {
    let page: Value = client.get(url).bearer_auth(key).send().await.expect("list").json().await.expect("json");
    page["tasks"].as_array().into_iter().flatten().filter_map(|t| t["id"].as_str().map(str::to_owned)).collect()
}

/// The worker whose attempt last started the task.
async fn started_by(q: &Queue, id: &TaskId) -> Option<String> {
    events(q, id).await.into_iter().rev().find_map(|e| match e.kind {
        EventKind::Started { worker, .. } => Some(worker),
        _ => None,
    })
}

/// Whether the task has its desktop now (it ran an action on it).
async fn on_its_desktop(q: &Queue, id: &TaskId) -> bool {
    events(q, id).await.iter().any(|e| matches!(e.kind, EventKind::SandboxReady { .. }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_max_sandboxes_holds_fleet_wide_with_warm_desktops_and_a_killed_worker() {
    let redis = RedisServer::start();
    let dir = std::env::temp_dir().join(format!("flotilla-tenant-sandboxes-{}", unique_prefix()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let extra = [
        ("FLOTILLA_SANDBOX_PROVIDER", "local"),
        ("FLOTILLA_SANDBOX_WARM", "1"),
        ("FLOTILLA_SANDBOX_MAX", "3"),
        ("FLOTILLA_WORKER_CONCURRENCY", "3"),
        ("FLOTILLA_LEASE_MS", "2000"),
        ("FLOTILLA_HEARTBEAT_MS", "300"),
    ];
    let fleet = FileFleet::start(&redis, &unique_prefix(), &dir, "[tenants.acme]\nmax_sandboxes = 2\n", &extra).await;
    let FileFleet { env, queue: q, client, running_url: url, .. } = &fleet;
    let mut workers: Vec<WorkerProcess> = (0..4).map(|n| WorkerProcess::spawn(env, &format!("w{n}"))).collect();

    let (acme, globex) = (tenant("acme"), tenant("globex"));
    let desktop_ids = submit(q, &acme, &on_screen(1_500), 8).await;
    let plain_ids = submit(q, &acme, &wait_spec(300), 6).await;
    let other_ids = submit(q, &globex, &on_screen(1_500), 4).await;
    let desktop: HashSet<String> = desktop_ids.iter().map(|id| id.as_str().to_owned()).collect();

    let (mut most, mut samples, mut other_most) = (0, 0, 0);
    let mut killed = None;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let tick = Instant::now();
        let holding = running(client, url, flotilla_tests::api_key()).await.intersection(&desktop).count();
        most = most.max(holding);
        other_most = other_most.max(running(client, url, flotilla_tests::globex_key()).await.len());
        samples += 1;
        if killed.is_none() {
            for id in &desktop_ids {
                let record = q.reader().get(&acme, id).await.expect("get").expect("task");
                if record.status != TaskStatus::Running || !on_its_desktop(q, id).await {
                    continue;
                }
                if let Some(n) = started_by(q, id).await.and_then(|w| w.strip_prefix('w')?.parse::<usize>().ok()) {
                    workers[n].signal("KILL");
                    assert!(workers[n].wait_exit(5), "SIGKILL ends the worker");
                    killed = Some(n);
                    break;
                }
            }
        }
        let mut ended = true;
        for (who, ids) in [(&acme, &desktop_ids), (&acme, &plain_ids), (&globex, &other_ids)] {
            for id in ids.iter() {
                ended &= q.reader().get(who, id).await.expect("get").is_some_and(|r| r.status.is_terminal());
            }
        }
        if ended {
            break;
        }
        assert!(Instant::now() < deadline, "the tasks did not all end");
        tokio::time::sleep(Duration::from_millis(45).saturating_sub(tick.elapsed())).await;
    }
    assert!(killed.is_some(), "a worker holding a desktop of the tenant was killed");
    assert!(samples >= 20, "sampled {samples} times");
    assert!(most <= 2, "{most} tasks of the tenant held desktops at once");
    assert_eq!(most, 2, "the limit was reached, not just respected");
    assert!(other_most > 2, "another tenant is not held to the limit: {other_most} at most");

    for (who, ids) in [(&acme, &desktop_ids), (&acme, &plain_ids), (&globex, &other_ids)] {
        for id in ids.iter() {
            let record = q.reader().get(who, id).await.expect("get").expect("task");
            assert_eq!(record.status, TaskStatus::Succeeded, "{who} task {id}: {:?}", record.error);
        }
    }
    let mut conn = q.redis().shared();
    let state: std::collections::HashMap<String, String> = conn.hgetall(q.keys().tenant_state(&acme)).await.expect("tenant");
    assert_eq!(state.get("sandboxed").map(String::as_str), Some("0"), "every sandbox slot came back: {state:?}");
    assert_eq!(state.get("running").map(String::as_str), Some("0"), "{state:?}");
    drop(workers);
    std::fs::remove_dir_all(dir).ok();
}
