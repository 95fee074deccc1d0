//! Tasks that act on a real desktop: a worker with local sandboxes (Xvfb,
//! a window manager, a terminal) and a real S3-protocol store runs scripted
//! tasks end to end. Each test checks what a user relies on: the sandbox is
//! announced and released, every step has its events, every screenshot is
//! stored once and listed on the task with a working presigned link, and
//! limits, cancels and a broken store end the task as the contract says.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_shared::blobstore::{content_hash, BlobStore, UploaderOptions};
use flotilla_shared::event::{Event, EventKind};
use flotilla_shared::ids::TaskId;
use flotilla_shared::queue::Queue;
use flotilla_shared::task::{StopCode, TaskSpec, TaskStatus};
use flotilla_tests::s3_server::S3Server;
use flotilla_tests::tasks::{events, queue, record, tenant, wait_all_ended};
use flotilla_tests::{api_key, spawn_api_with_blobs, test_config, unique_prefix, ApiClient, InProcessWorker, RedisServer};
use flotilla_worker::sandbox::{LocalConfig, LocalProvider, PoolConfig, SandboxPool};
use flotilla_worker::tools::Tools;
use flotilla_worker::Registry;
use serde_json::{json, Value};

const TASK_TIMEOUT: Duration = Duration::from_secs(60);

/// A fleet of one in-process worker with local desktops.
struct DesktopFleet {
    _redis: RedisServer,
    queue: Queue,
    pool: SandboxPool,
    config: flotilla_shared::Config,
    worker: Option<InProcessWorker>,
}

impl DesktopFleet {
    fn start(warm: usize, blobs: Option<BlobStore>, uploads: UploaderOptions) -> impl std::future::Future<Output = Self> {
        async move {
            let redis = RedisServer::start();
            let config = test_config(&redis, &unique_prefix(), &[("FLOTILLA_HEARTBEAT_MS", "200")]);
            let provider = Arc::new(LocalProvider::new(LocalConfig::default()));
            let pool = SandboxPool::new(provider, PoolConfig { warm, max_live: 4, ..PoolConfig::default() });
            let tools = Tools { sandboxes: Some(pool.clone()), blobs, uploads, gateway: None };
            let worker = InProcessWorker::start_with_tools(config.clone(), Registry::standard(), tools);
            Self { queue: queue(&config).await, _redis: redis, pool, config, worker: Some(worker) }
        }
    }

    async fn submit(&self, spec: Value) -> TaskId {
        let spec = TaskSpec::from_json(spec.to_string().as_bytes()).expect("valid spec");
        self.queue.submit(&tenant(), spec).await.expect("submit").id
    }

    async fn run_to_end(&self, spec: Value) -> (TaskId, Vec<Event>) {
        let id = self.submit(spec).await;
        wait_all_ended(&self.queue, std::slice::from_ref(&id), TASK_TIMEOUT).await;
        let events = events(&self.queue, &id).await;
        (id, events)
    }

    async fn stop(mut self) {
        if let Some(worker) = self.worker.take() {
            worker.stop().await;
        }
        self.pool.shutdown().await;
    }
}

fn quick_uploads() -> UploaderOptions {
    UploaderOptions {
        min_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(200),
        give_up_after: Duration::from_secs(2),
        deadline: Duration::from_secs(3),
        ..UploaderOptions::default()
    }
}

fn screenshots(events: &[Event]) -> Vec<(String, String, bool)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Screenshot { hash, key, dedup, .. } => Some((hash.clone(), key.clone(), *dedup)),
            _ => None,
        })
        .collect()
}

fn count(events: &[Event], name: &str) -> usize {
    events.iter().filter(|e| e.kind.name() == name).count()
}

/// Width and height from a PNG's header.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert!(bytes.len() > 24 && bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let word = |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    (word(16), word(20))
}

async fn eventually(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn typing_task() -> Value {
    json!({
        "prompt": "write a file from the terminal",
        "pipeline": "scripted",
        "actions": [
            {"type": "click", "x": 512, "y": 384},
            {"type": "type", "text": "echo flotilla > made.txt\n"},
            {"type": "wait", "ms": 300}
        ]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_scripted_task_acts_on_a_desktop_and_stores_every_screenshot() {
    let s3 = S3Server::start();
    let store = s3.store(&unique_prefix());
    let fleet = DesktopFleet::start(0, Some(store.clone()), quick_uploads()).await;
    let (id, events) = fleet.run_to_end(typing_task()).await;

    let task = record(&fleet.queue, &id).await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{events:?}");
    assert_eq!(task.steps_taken, 3);
    let ready: Vec<_> = events.iter().filter_map(|e| match &e.kind {
        EventKind::SandboxReady { sandbox_id, warm, .. } => Some((sandbox_id.clone(), *warm)),
        _ => None,
    }).collect();
    assert_eq!(ready.len(), 1, "one sandbox_ready: {events:?}");
    assert!(!ready[0].1, "no pool: the sandbox is started for the task");
    assert_eq!(task.sandbox.as_ref().and_then(|s| s["id"].as_str()), Some(ready[0].0.as_str()));
    assert_eq!((count(&events, "action"), count(&events, "action_completed")), (3, 3));

    // A screenshot before the first action and after each, all stored.
    let shots = screenshots(&events);
    assert_eq!(shots.len(), 4, "{events:?}");
    for (hash, key, _) in &shots {
        let bytes = store.get(key).await.expect("every screenshot is stored");
        assert_eq!(&content_hash(&bytes), hash);
        assert_eq!(png_size(&bytes), (1024, 768));
    }
    assert_ne!(shots[0].0, shots[2].0, "typing into the terminal changes the screen");

    // The task page lists them in step order, each with a link that works.
    let api = spawn_api_with_blobs(fleet.config.clone(), store.clone()).await;
    let client = ApiClient::new(&api, api_key());
    let (status, page) = client.get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(status, 200, "{page}");
    let listed = page["screenshots"].as_array().expect("screenshots listed");
    let listed_hashes: Vec<&str> = listed.iter().filter_map(|s| s["hash"].as_str()).collect();
    let event_hashes: Vec<&str> = shots.iter().map(|(h, _, _)| h.as_str()).collect();
    assert_eq!(listed_hashes, event_hashes);
    let seqs: Vec<u64> = listed.iter().filter_map(|s| s["seq"].as_u64()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in step order: {seqs:?}");
    let url = listed[1]["url"].as_str().expect("a presigned url");
    let fetched = reqwest::get(url).await.expect("fetch").bytes().await.expect("body");
    assert_eq!(content_hash(&fetched), listed_hashes[1]);

    eventually("the sandbox is released", Duration::from_secs(5), async || fleet.pool.live() == 0).await;
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_warm_pool_hands_out_a_ready_desktop() {
    let fleet = DesktopFleet::start(1, None, UploaderOptions::default()).await;
    eventually("the pool has a ready desktop", Duration::from_secs(20), async || fleet.pool.ready() == 1).await;
    let (id, events) = fleet.run_to_end(json!({
        "prompt": "move the pointer", "pipeline": "scripted", "actions": [{"type": "move", "x": 10, "y": 10}]
    })).await;
    assert_eq!(record(&fleet.queue, &id).await.status, TaskStatus::Succeeded, "{events:?}");
    let warm = events.iter().find_map(|e| match &e.kind {
        EventKind::SandboxReady { warm, ms, .. } => Some((*warm, *ms)),
        _ => None,
    });
    let (warm, ms) = warm.expect("sandbox_ready");
    assert!(warm, "taken from the pool");
    assert!(ms < 1_000, "a warm desktop is handed out without starting one ({ms} ms)");
    eventually("the pool refills", Duration::from_secs(20), async || fleet.pool.ready() == 1).await;
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_cancel_stops_a_running_task_and_releases_its_desktop() {
    let fleet = DesktopFleet::start(0, None, UploaderOptions::default()).await;
    let id = fleet.submit(json!({
        "prompt": "wait on a desktop", "pipeline": "scripted",
        "actions": [{"type": "move", "x": 5, "y": 5}, {"type": "wait", "ms": 60000}]
    })).await;
    eventually("the task is waiting on its desktop", Duration::from_secs(30), async || {
        events(&fleet.queue, &id).await.iter().any(|e| e.kind.name() == "action_completed")
    })
    .await;
    let asked = Instant::now();
    fleet.queue.cancel(&tenant(), &id).await.expect("cancel");
    wait_all_ended(&fleet.queue, std::slice::from_ref(&id), Duration::from_secs(5)).await;
    assert_eq!(record(&fleet.queue, &id).await.status, TaskStatus::Cancelled);
    eventually("the desktop is released", Duration::from_secs(5), async || fleet.pool.live() == 0).await;
    assert!(asked.elapsed() < Duration::from_secs(5), "stopped and released within 5 s");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_max_steps_ends_the_task_with_problem() {
    let fleet = DesktopFleet::start(0, None, UploaderOptions::default()).await;
    let (id, events) = fleet.run_to_end(json!({
        "prompt": "too many steps", "pipeline": "scripted", "max_steps": 2,
        "actions": [{"type": "move", "x": 1, "y": 1}, {"type": "move", "x": 2, "y": 2}, {"type": "move", "x": 3, "y": 3}]
    })).await;
    let task = record(&fleet.queue, &id).await;
    assert_eq!((task.status, task.code), (TaskStatus::Failed, Some(StopCode::Problem)), "{events:?}");
    assert!(task.error.as_deref().is_some_and(|e| e.contains("max_steps")), "{:?}", task.error);
    assert_eq!(count(&events, "action_completed"), 2);
    eventually("the desktop is released", Duration::from_secs(5), async || fleet.pool.live() == 0).await;
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_task_does_not_succeed_when_its_screenshots_cannot_be_stored() {
    let mut s3 = S3Server::start();
    let store = s3.store(&unique_prefix());
    tokio::task::block_in_place(|| s3.stop());
    let fleet = DesktopFleet::start(0, Some(store), quick_uploads()).await;
    let (id, events) = fleet.run_to_end(json!({
        "prompt": "a store that is gone", "pipeline": "scripted", "retry": {"max_attempts": 1},
        "actions": [{"type": "move", "x": 1, "y": 1}]
    })).await;
    let task = record(&fleet.queue, &id).await;
    assert_eq!(task.status, TaskStatus::Failed, "{events:?}");
    assert!(task.error.as_deref().is_some_and(|e| e.contains("not stored")), "the error says why: {:?}", task.error);
    assert!(screenshots(&events).is_empty(), "no screenshot is announced that the store does not have");
    fleet.stop().await;
}
