//! Capability routing: a mixed fleet runs each task only on a worker that
//! can run it, and a task no live worker can run stays `queued`, says what
//! it waits for and is counted in `/v1/queues` until a worker that can
//! joins and runs it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_tests::tasks::{events, queue, record, tenant, wait_all_ended, wait_spec};
use flotilla_tests::{api_key, spawn_api, test_config, unique_prefix, ApiClient, InProcessWorker, RedisServer};
use flotilla_types::event::EventKind;
use flotilla_types::ids::TaskId;
use flotilla_types::task::{TaskSpec, TaskStatus};
use flotilla_worker::sandbox::{LocalConfig, LocalProvider, PoolConfig, SandboxPool};
use flotilla_worker::tools::Tools;
use flotilla_worker::Registry;
use serde_json::{json, Value};

/// The worker that ran a task's last attempt.
async fn ran_on(q: &flotilla_queue::queue::Queue, id: &TaskId) -> String {
    events(q, id)
        .await
        .into_iter()
        .rev()
        .find_map(|e| match e.kind {
            EventKind::Started { worker, .. } => Some(worker),
            _ => None,
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_mixed_fleet_runs_sandbox_tasks_only_on_the_worker_with_desktops() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let desk_config = test_config(&redis, &prefix, &[("FLOTILLA_WORKER_ID", "desk"), ("FLOTILLA_HEARTBEAT_MS", "200")]);
    let plain_config = test_config(&redis, &prefix, &[("FLOTILLA_WORKER_ID", "plain")]);
    let provider = Arc::new(LocalProvider::new(LocalConfig::default()));
    let pool = SandboxPool::new(provider, PoolConfig { warm: 2, max_live: 4, ..PoolConfig::default() });
    let tools = Tools { sandboxes: Some(pool), ..Tools::default() };
    let desk = InProcessWorker::start_with_tools(desk_config, Registry::standard(), tools);
    let plain = InProcessWorker::start(plain_config.clone(), Registry::standard());
    let q = queue(&plain_config).await;

    let on_screen = json!({"prompt": "move", "pipeline": "scripted", "actions": [{"type": "move", "x": 20, "y": 20}]});
    let on_screen = TaskSpec::from_json(on_screen.to_string().as_bytes()).expect("spec");
    let mut desktop_ids = Vec::new();
    let mut plain_ids = Vec::new();
    for n in 0..40 {
        if n % 2 == 0 {
            desktop_ids.push(q.submitter().submit(&tenant(), on_screen.clone()).await.expect("submit").id);
        } else {
            plain_ids.push(q.submitter().submit(&tenant(), wait_spec(50)).await.expect("submit").id);
        }
    }
    let all: Vec<TaskId> = desktop_ids.iter().chain(&plain_ids).cloned().collect();
    let records = wait_all_ended(&q, &all, Duration::from_secs(120)).await;
    for r in &records {
        assert_eq!(r.status, TaskStatus::Succeeded, "task {} ended {:?}: {:?}", r.id, r.status, r.error);
        assert_eq!(r.attempts, 1, "task {} ran once", r.id);
    }
    for id in &desktop_ids {
        assert_eq!(ran_on(&q, id).await, "desk", "desktop task {id} ran on the worker with desktops");
    }
    let mut plain_ran = 0;
    for id in &plain_ids {
        plain_ran += usize::from(ran_on(&q, id).await == "plain");
    }
    assert!(plain_ran > 0, "the worker without desktops ran some of the tasks it can run");
    plain.stop().await;
    desk.stop().await;
}

/// Polls `path` until `done` holds, for up to ten seconds.
async fn poll_until(client: &ApiClient, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = client.get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
        if done(&body) || Instant::now() > deadline {
            return body;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_requiring_a_label_waits_counted_until_a_labelled_worker_joins() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let config = test_config(&redis, &prefix, &[("FLOTILLA_WORKER_ID", "plain")]);
    let api = spawn_api(config.clone()).await;
    let client = ApiClient::new(&api, api_key());
    let plain = InProcessWorker::start(config.clone(), Registry::standard());

    let (status, body) =
        client.post("/v1/tasks", &json!({"prompt": "x", "pipeline": "scripted", "actions": [], "requires": ["no way"]})).await;
    assert_eq!(status, 400, "a bad label is refused: {body}");
    assert_eq!(body["error"]["field"], "requires[0]", "{body}");

    let waits = json!({"prompt": "wait", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 1}]});
    let mut in_eu = waits.clone();
    in_eu["requires"] = json!(["eu"]);
    let (status, body) = client.post("/v1/tasks", &in_eu).await;
    assert_eq!(status, 202, "{body}");
    let eu_id = body["id"].as_str().expect("id").to_owned();
    let (_, body) = client.post("/v1/tasks", &waits).await;
    let plain_id = body["id"].as_str().expect("id").to_owned();
    let plain_task = poll_until(&client, &format!("/v1/tasks/{plain_id}"), |t| t["status"] == "succeeded").await;
    assert_eq!(plain_task["status"], "succeeded", "the live worker runs what it can: {plain_task}");

    // The plain worker has claimed since, and never takes the task it cannot
    // run: the sleep is what is tested, 300 ms more of its claims.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, task) = client.get(&format!("/v1/tasks/{eu_id}")).await;
    assert_eq!(task["status"], "queued", "{task}");
    assert_eq!(task["attempts"], 0, "{task}");
    assert_eq!(task["waiting_for"], json!(["label:eu"]), "{task}");
    let (_, queues) = client.get("/v1/queues").await;
    assert_eq!(queues["waiting_for"], json!([{"capability": "label:eu", "queued": 1}]), "{queues}");
    assert_eq!(queues["tenants"][0]["queued"], 1, "{queues}");

    let eu_config = test_config(&redis, &prefix, &[("FLOTILLA_WORKER_ID", "eu-worker"), ("FLOTILLA_WORKER_LABELS", "eu")]);
    let started = Instant::now();
    let eu = InProcessWorker::start(eu_config, Registry::standard());
    let task = poll_until(&client, &format!("/v1/tasks/{eu_id}"), |t| t["status"] == "succeeded").await;
    assert_eq!(task["status"], "succeeded", "the labelled worker runs it: {task}");
    assert!(started.elapsed() < Duration::from_secs(10), "at once: {:?}", started.elapsed());
    assert!(task.get("waiting_for").is_none(), "an ended task waits for nothing: {task}");
    let q = queue(&config).await;
    let id = TaskId::parse(&eu_id).expect("id");
    assert_eq!(ran_on(&q, &id).await, "eu-worker");
    assert_eq!(record(&q, &id).await.attempts, 1);
    let queues = poll_until(&client, "/v1/queues", |q| q["waiting_for"] == json!([])).await;
    assert_eq!(queues["waiting_for"], json!([]), "{queues}");
    eu.stop().await;
    plain.stop().await;
}

/// `/v1/queues` against a fleet with known tasks: three live workers of one
/// slot each, five long tasks → three running, two waiting, the oldest
/// waiting one's age (running ones do not count), and three workers that
/// can take the lane's tasks; once they are cancelled nothing waits or runs,
/// and a stopped worker stops counting.
#[tokio::test(flavor = "multi_thread")]
async fn the_queue_figures_count_waiting_running_and_live_workers_apart() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let config = test_config(&redis, &prefix, &[]);
    let api = spawn_api(config.clone()).await;
    let client = ApiClient::new(&api, api_key());
    let mut workers = Vec::new();
    for n in 1..=3 {
        let id = format!("figures-{n}");
        let settings = [("FLOTILLA_WORKER_ID", id.as_str()), ("FLOTILLA_WORKER_CONCURRENCY", "1")];
        workers.push(InProcessWorker::start(test_config(&redis, &prefix, &settings), Registry::standard()));
    }
    let long = json!({"prompt": "hold", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 120_000}]});
    let first_submitted = Instant::now();
    let mut ids = Vec::new();
    for _ in 0..5 {
        let (status, body) = client.post("/v1/tasks", &long).await;
        assert_eq!(status, 202, "{body}");
        ids.push(body["id"].as_str().expect("id").to_owned());
    }
    let normal =
        |q: &Value| q["lanes"].as_array().and_then(|l| l.iter().find(|l| l["lane"] == "normal")).cloned().unwrap_or_default();
    // The lanes and the tenants' counters are read apart: a response taken
    // while a claim lands may show one before the other, so both are waited for.
    let settled = |q: &Value| {
        let lane = normal(q);
        let tenant = &q["tenants"][0];
        lane["pending"] == 3 && lane["depth"] == 2 && lane["consumers"] == 3 && tenant["running"] == 3 && tenant["queued"] == 2
    };
    let queues = poll_until(&client, "/v1/queues", settled).await;
    let lane = normal(&queues);
    assert!(settled(&queues), "three running, two waiting, three workers: {queues}");
    assert_eq!(
        (queues["tenants"][0]["running"].as_u64(), queues["tenants"][0]["queued"].as_u64()),
        (Some(3), Some(2)),
        "{queues}"
    );
    let oldest = lane["oldest_age_ms"].as_u64().expect("oldest age");
    assert!(oldest > 0 && u128::from(oldest) <= first_submitted.elapsed().as_millis(), "the oldest waiting task's age: {queues}");

    for id in &ids {
        let (status, body) = client.post(&format!("/v1/tasks/{id}/cancel"), &json!({})).await;
        assert!((200..300).contains(&status), "cancel {id}: {status} {body}");
    }
    let idle = |q: &Value| {
        let lane = normal(q);
        lane["pending"] == 0 && lane["depth"] == 0 && lane["oldest_age_ms"] == 0
    };
    let queues = poll_until(&client, "/v1/queues", idle).await;
    assert!(idle(&queues), "nothing waits or runs once cancelled: {queues}");

    workers.pop().expect("a worker").stop().await;
    let q = queue(&config).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while q.reader().live_capabilities().await.expect("registry").len() != 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(q.reader().live_capabilities().await.expect("registry").len(), 2, "a stopped worker stops counting");
    for worker in workers {
        worker.stop().await;
    }
}
