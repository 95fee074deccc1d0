//! Tasks that act on a real desktop: a worker with local sandboxes (Xvfb,
//! a window manager, a terminal) and a real S3-protocol store runs scripted
//! tasks end to end. Each test checks what a user relies on: the sandbox is
//! announced and released, every step has its events, every screenshot is
//! stored once and listed on the task with a working presigned link, and
//! limits, cancels and a broken store end the task as the contract says;
//! a desktop killed from outside is replaced on the next attempt, a
//! desktop the task names by id is used and left running, and one tenant
//! naming another tenant's kept desktop gets the answer an unknown id gets,
//! leaving that desktop untouched.

use std::time::{Duration, Instant};

use flotilla_blobstore::{content_hash, BlobStore, UploaderOptions};
use flotilla_tests::desktop::{count, eventually, png_size, sandbox_ids, DesktopFleet, DesktopOptions};
use flotilla_tests::fleet::{test_config, test_env};
use flotilla_tests::s3_server::{S3Server, ACCESS_KEY, SECRET_KEY};
use flotilla_tests::tasks::{events, record, tenant, wait_all_ended};
use flotilla_tests::{api_key, spawn_api_with_blobs, unique_prefix, ApiClient, RedisServer, WorkerProcess};
use flotilla_types::event::{Event, EventKind};
use flotilla_types::ids::TenantId;
use flotilla_types::task::{StopCode, TaskStatus};
use flotilla_worker::sandbox::{SandboxId, SandboxRequest};
use serde_json::{json, Value};

fn fleet_options(warm: usize, blobs: Option<BlobStore>, uploads: UploaderOptions) -> DesktopOptions {
    DesktopOptions { warm, blobs, uploads, ..DesktopOptions::default() }
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
    let fleet = DesktopFleet::start(fleet_options(0, Some(store.clone()), quick_uploads())).await;
    let (id, events) = fleet.run_to_end(typing_task()).await;

    let task = record(&fleet.queue, &id).await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{events:?}");
    assert_eq!(task.steps_taken, 3);
    let ready: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::SandboxReady { sandbox_id, warm, .. } => Some((sandbox_id.clone(), *warm)),
            _ => None,
        })
        .collect();
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
    assert_ne!(shots[0].0, shots[2].0, "the screenshot after typing, taken once the screen settled, shows the typing");

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
    let fleet = DesktopFleet::start(fleet_options(1, None, UploaderOptions::default())).await;
    eventually("the pool has a ready desktop", Duration::from_secs(20), async || fleet.pool.ready() == 1).await;
    let (id, events) = fleet
        .run_to_end(json!({
            "prompt": "move the pointer", "pipeline": "scripted", "actions": [{"type": "move", "x": 10, "y": 10}]
        }))
        .await;
    assert_eq!(record(&fleet.queue, &id).await.status, TaskStatus::Succeeded, "{events:?}");
    let warm = events.iter().find_map(|e| match &e.kind {
        EventKind::SandboxReady { warm, ms, .. } => Some((*warm, *ms)),
        _ => None,
    });
    let (warm, ms) = warm.expect("sandbox_ready");
    assert!(warm, "taken from the pool");
    assert!(ms < 1_000, "a warm desktop is handed out without starting one ({ms} ms)");
    // The pool refills on its demand tick, seconds after the release (about
    // 8 s on an idle machine); the bound leaves room for a loaded one.
    eventually("the pool refills", Duration::from_secs(60), async || fleet.pool.ready() == 1).await;
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_cancel_stops_a_running_task_and_releases_its_desktop() {
    let fleet = DesktopFleet::start(fleet_options(0, None, UploaderOptions::default())).await;
    let id = fleet
        .submit(json!({
            "prompt": "wait on a desktop", "pipeline": "scripted",
            "actions": [{"type": "move", "x": 5, "y": 5}, {"type": "wait", "ms": 60000}]
        }))
        .await;
    eventually("the task is waiting on its desktop", Duration::from_secs(30), async || {
        events(&fleet.queue, &id).await.iter().any(|e| e.kind.name() == "action_completed")
    })
    .await;
    let asked = Instant::now();
    fleet.queue.submitter().cancel(&tenant(), &id).await.expect("cancel");
    wait_all_ended(&fleet.queue, std::slice::from_ref(&id), Duration::from_secs(10)).await;
    assert_eq!(record(&fleet.queue, &id).await.status, TaskStatus::Cancelled);
    eventually("the desktop is released", Duration::from_secs(10), async || fleet.pool.live() == 0).await;
    assert!(asked.elapsed() < Duration::from_secs(10), "stopped and released long before its 60 s wait: {:?}", asked.elapsed());
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_max_steps_ends_the_task_with_problem() {
    let fleet = DesktopFleet::start(fleet_options(0, None, UploaderOptions::default())).await;
    let (id, events) = fleet
        .run_to_end(json!({
            "prompt": "too many steps", "pipeline": "scripted", "max_steps": 2,
            "actions": [{"type": "move", "x": 1, "y": 1}, {"type": "move", "x": 2, "y": 2}, {"type": "move", "x": 3, "y": 3}]
        }))
        .await;
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
    let fleet = DesktopFleet::start(fleet_options(0, Some(store), quick_uploads())).await;
    let (id, events) = fleet
        .run_to_end(json!({
            "prompt": "a store that is gone", "pipeline": "scripted", "retry": {"max_attempts": 1},
            "actions": [{"type": "move", "x": 1, "y": 1}]
        }))
        .await;
    let task = record(&fleet.queue, &id).await;
    assert_eq!(task.status, TaskStatus::Failed, "{events:?}");
    assert!(task.error.as_deref().is_some_and(|e| e.contains("not stored")), "the error says why: {:?}", task.error);
    assert!(screenshots(&events).is_empty(), "no screenshot is announced that the store does not have");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_task_rides_out_a_store_outage_and_ends_with_every_screenshot_stored() {
    let mut s3 = S3Server::start();
    let store = s3.store(&unique_prefix());
    let uploads =
        UploaderOptions { deadline: Duration::from_secs(20), give_up_after: Duration::from_secs(20), ..quick_uploads() };
    let fleet = DesktopFleet::start(fleet_options(0, Some(store.clone()), uploads)).await;
    tokio::task::block_in_place(|| s3.stop());
    let id = fleet
        .submit(json!({
            "prompt": "keep working while the store is down", "pipeline": "scripted", "retry": {"max_attempts": 1},
            "actions": [{"type": "move", "x": 5, "y": 5}, {"type": "move", "x": 300, "y": 200}, {"type": "wait", "ms": 1500}]
        }))
        .await;
    eventually("the task is acting while the store is down", Duration::from_secs(20), async || {
        count(&events(&fleet.queue, &id).await, "action_completed") >= 2
    })
    .await;
    tokio::task::block_in_place(|| s3.restart());
    fleet.wait_ended(&id).await;

    let task = record(&fleet.queue, &id).await;
    let events = events(&fleet.queue, &id).await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{:?} {events:?}", task.error);
    let shots = screenshots(&events);
    assert_eq!(shots.len(), 4, "a screenshot before and after each action: {events:?}");
    for (hash, key, _) in &shots {
        assert_eq!(&content_hash(&store.get(key).await.expect("stored once the store is back")), hash);
    }
    fleet.stop().await;
}

/// A worker process given no AWS keys in its environment finds them the
/// standard AWS way, here in a shared credentials file, and stores its
/// task's screenshots with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_worker_without_keys_finds_them_through_the_standard_aws_chain() {
    let s3 = S3Server::start();
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let dir = std::env::temp_dir().join(format!("flotilla-aws-{prefix}"));
    std::fs::create_dir_all(&dir).expect("a profile dir");
    let credentials = dir.join("credentials");
    let profile = format!("[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n");
    std::fs::write(&credentials, profile).expect("write the credentials file");

    let mut env: Vec<(String, String)> = test_env(&redis, &prefix, &[("FLOTILLA_SANDBOX_PROVIDER", "local")]);
    env.extend(
        s3.worker_env("chain/").into_iter().filter(|(k, _)| !k.starts_with("AWS_ACCESS_KEY_ID") && !k.starts_with("AWS_SECRET")),
    );
    env.push(("AWS_SHARED_CREDENTIALS_FILE".into(), credentials.display().to_string()));
    env.push(("AWS_CONFIG_FILE".into(), dir.join("config").display().to_string()));
    env.push(("AWS_EC2_METADATA_DISABLED".into(), "true".into()));
    env.push(("HOME".into(), dir.display().to_string()));
    let _worker = WorkerProcess::spawn(&env, "chain-worker");

    let queue = flotilla_tests::tasks::queue(&test_config(&redis, &prefix, &[])).await;
    let spec = json!({"prompt": "one move", "pipeline": "scripted", "retry": {"max_attempts": 1}, "actions": [{"type": "move", "x": 3, "y": 3}]});
    let spec = flotilla_types::task::TaskSpec::from_json(spec.to_string().as_bytes()).expect("spec");
    let id = queue.submitter().submit(&tenant(), spec).await.expect("submit").id;
    wait_all_ended(&queue, std::slice::from_ref(&id), Duration::from_secs(60)).await;
    let task = record(&queue, &id).await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{:?}", task.error);
    let shots = screenshots(&events(&queue, &id).await);
    assert_eq!(shots.len(), 2);
    let store = s3.store("chain/");
    for (hash, key, _) in &shots {
        assert_eq!(&content_hash(&store.get(key).await.expect("stored with the profile's keys")), hash);
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_killed_from_outside_is_replaced_on_the_next_attempt() {
    let fleet = DesktopFleet::start(fleet_options(0, None, UploaderOptions::default())).await;
    let id = fleet
        .submit(json!({
            "prompt": "act while the desktop is killed", "pipeline": "scripted", "retry": {"max_attempts": 3},
            "actions": [{"type": "move", "x": 5, "y": 5}, {"type": "wait", "ms": 1500}, {"type": "move", "x": 9, "y": 9}]
        }))
        .await;
    eventually("the task acts on its first desktop", Duration::from_secs(30), async || {
        events(&fleet.queue, &id).await.iter().any(|e| e.kind.name() == "action_completed")
    })
    .await;
    let first = sandbox_ids(&events(&fleet.queue, &id).await).remove(0);
    let first_id = SandboxId::parse(&first).expect("sandbox id");
    fleet.pool.provider().kill(&first_id).await.expect("killed from outside");

    fleet.wait_ended(&id).await;
    let history = events(&fleet.queue, &id).await;
    let task = record(&fleet.queue, &id).await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{history:?}");
    assert_eq!(task.attempts, 2, "the attempt on the killed desktop was retried");
    let ids = sandbox_ids(&history);
    assert_eq!(ids.len(), 2, "{history:?}");
    assert_eq!(ids[0], first);
    assert_ne!(ids[1], first, "the retry got a new desktop");
    assert_eq!(task.sandbox.as_ref().and_then(|s| s["id"].as_str()), Some(ids[1].as_str()));
    eventually("the desktop is released", Duration::from_secs(5), async || fleet.pool.live() == 0).await;
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_named_by_id_is_used_and_left_running() {
    let fleet = DesktopFleet::start(fleet_options(0, None, UploaderOptions::default())).await;
    let provider = fleet.pool.provider().clone();
    let mine = provider.create(&SandboxRequest::default()).await.expect("a desktop of the user's own");
    // Recorded as the tenant's, as a sandbox started or kept for it is.
    fleet.owners().record(provider.name(), mine.id.as_str(), &tenant(), mine.expires_at).await.expect("owner recorded");
    let (id, events) = fleet
        .run_to_end(json!({
            "prompt": "use my desktop", "pipeline": "scripted",
            "actions": [{"type": "move", "x": 7, "y": 7}],
            "sandbox": {"id": mine.id.as_str()}
        }))
        .await;
    assert_eq!(record(&fleet.queue, &id).await.status, TaskStatus::Succeeded, "{events:?}");
    assert_eq!(sandbox_ids(&events), [mine.id.to_string()]);
    assert!(provider.status(&mine.id).await.expect("still there").alive, "the user's desktop is not killed");
    provider.kill(&mine.id).await.expect("kill");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_of_another_tenant_answers_as_an_unknown_id_and_is_left_untouched() {
    let fleet = DesktopFleet::start(fleet_options(0, None, UploaderOptions::default())).await;
    let provider = fleet.pool.provider().clone();
    let (a, b) = (tenant(), TenantId::parse("beta").expect("tenant"));
    let (first, events) = fleet
        .run_to_end_as(
            &a,
            json!({
                "prompt": "prepare", "pipeline": "scripted", "actions": [{"type": "move", "x": 5, "y": 5}],
                "sandbox": {"keep_alive": true}
            }),
        )
        .await;
    let task = record(&fleet.queue, &first).await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{events:?}");
    let kept = task.sandbox.as_ref().and_then(|s| s["id"].as_str()).expect("the task keeps its sandbox id").to_owned();
    let kept_id = SandboxId::parse(&kept).expect("id");
    let unknown = "local-00000000deadbeef";

    // B names A's desktop, then an id nobody has: the two answers are one.
    let intrude = |id: &str| {
        json!({
            "prompt": "take over", "pipeline": "scripted",
            "actions": [{"type": "click", "x": 400, "y": 300}, {"type": "type", "text": "echo intruder > intruder.txt\n"}],
            "sandbox": {"id": id}
        })
    };
    let mut answers = Vec::new();
    for id in [kept.as_str(), unknown] {
        let (task_id, events) = fleet.run_to_end_as(&b, intrude(id)).await;
        let task = fleet.queue.reader().get(&b, &task_id).await.expect("get").expect("b's task");
        assert_eq!((task.status, task.code), (TaskStatus::Failed, Some(StopCode::Problem)), "{events:?}");
        assert_eq!(task.attempts, 1, "{events:?}");
        assert!(task.sandbox.is_none(), "no sandbox is recorded on the task: {:?}", task.sandbox);
        assert_eq!(sandbox_ids(&events), Vec::<String>::new(), "no sandbox was announced");
        let kinds: Vec<&str> = events.iter().map(|e| e.kind.name()).collect();
        answers.push((kinds, task.error.unwrap_or_default().replace(id, "<id>")));
    }
    assert_eq!(answers[0], answers[1], "another tenant's sandbox answers as an unknown id");

    // A's desktop runs on, untyped into, and still serves A.
    assert!(provider.status(&kept_id).await.expect("still there").alive, "A's desktop is not killed");
    assert!(provider.read_file(&kept_id, "intruder.txt").await.is_err(), "B typed into A's desktop");
    let (again, events) = fleet
        .run_to_end_as(
            &a,
            json!({
                "prompt": "continue", "pipeline": "scripted",
                "actions": [{"type": "click", "x": 400, "y": 300}, {"type": "type", "text": "echo owner > owner.txt\n"}, {"type": "wait", "ms": 300}],
                "sandbox": {"id": kept}
            }),
        )
        .await;
    assert_eq!(record(&fleet.queue, &again).await.status, TaskStatus::Succeeded, "{events:?}");
    assert_eq!(sandbox_ids(&events), std::slice::from_ref(&kept), "the owner reaches its desktop");
    provider.kill(&kept_id).await.expect("kill");
    fleet.stop().await;
}
