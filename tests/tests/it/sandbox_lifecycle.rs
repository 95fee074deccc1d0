//! What happens to sandboxes around tasks, on sandboxes without screens
//! (`MemoryProvider`) so the checks are quick and exact:
//! - the fleet-wide cap in a real Redis: pools of two workers on one Redis
//!   never hold more than the cap together; a crashed holder's slots come
//!   back once their leases lapse, and not before; waiting at the cap is
//!   bounded and cancellable; a sandbox kept past its task counts until its
//!   deadline;
//! - tasks: a sandbox kept alive serves a later task that names it, and is
//!   not killed by it; an expiring sandbox is extended for a long task; one
//!   that cannot be extended ends the task with code `problem`, after one
//!   refused request and no retries.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_config::RedisTarget;
use flotilla_queue::keys::Keys;
use flotilla_tests::desktop::{sandbox_ids, DesktopFleet, DesktopOptions};
use flotilla_tests::tasks::record;
use flotilla_tests::{unique_prefix, RedisServer};
use flotilla_types::task::{StopCode, TaskStatus};
use flotilla_worker::sandbox::{
    FleetCap, FleetCapConfig, MemoryProvider, PoolConfig, SandboxError, SandboxPool, SandboxProvider, SandboxRequest,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Two workers' views of one fleet-wide cap: separate `FleetCap`s on one key.
fn caps(redis: &RedisServer, config: &FleetCapConfig) -> (FleetCap, FleetCap) {
    let key = Keys::new(unique_prefix()).sandbox_slots("local");
    (cap_on(redis, &key, "worker-a", config), cap_on(redis, &key, "worker-b", config))
}

/// A worker's view of the cap counted under `key`.
fn cap_on(redis: &RedisServer, key: &str, owner: &str, config: &FleetCapConfig) -> FleetCap {
    FleetCap::new(RedisTarget::Single(redis.url()), key.to_owned(), owner, config.clone())
}

fn cap_config(max: usize, slot_ttl_ms: u64, max_wait_ms: u64) -> FleetCapConfig {
    FleetCapConfig { max, slot_ttl: Duration::from_millis(slot_ttl_ms), max_wait: Duration::from_millis(max_wait_ms) }
}

fn pool(provider: &Arc<MemoryProvider>, fleet: FleetCap) -> SandboxPool {
    let provider: Arc<dyn SandboxProvider> = provider.clone();
    SandboxPool::new(provider, PoolConfig { warm: 0, max_live: 4, fleet: Some(fleet), ..PoolConfig::default() })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_pools_on_one_redis_never_exceed_the_fleet_cap() {
    let redis = RedisServer::start();
    let (cap_a, cap_b) = caps(&redis, &cap_config(3, 5_000, 30_000));
    let provider = Arc::new(MemoryProvider::new());
    provider.set_create_delay(Duration::from_millis(30));
    let pools = [pool(&provider, cap_a.clone()), pool(&provider, cap_b)];
    let mut holders = Vec::new();
    for n in 0..10 {
        let pool = pools[n % 2].clone();
        holders.push(tokio::spawn(async move {
            let lease = pool.acquire(&SandboxRequest::default(), &CancellationToken::new()).await?;
            // Held a while, so the holders overlap: the scenario, not a wait.
            tokio::time::sleep(Duration::from_millis(150)).await;
            pool.release(lease).await;
            Ok::<_, SandboxError>(())
        }));
    }
    for holder in holders {
        holder.await.expect("holder ran").expect("every holder gets a sandbox in the end");
    }
    assert_eq!(provider.created(), 10);
    assert_eq!(provider.most_live(), 3, "the fleet held at most the cap, and reached it");
    assert_eq!(cap_a.live().await.expect("count"), 0, "every slot was given back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holders_slots_come_back_after_their_leases_lapse() {
    let redis = RedisServer::start();
    let (crashing, survivor) = caps(&redis, &cap_config(2, 600, 10_000));
    for _ in 0..2 {
        let slot = crashing.try_acquire().await.expect("redis").expect("under the cap");
        std::mem::forget(slot);
    }
    // While its holder lives, renewal keeps the slots taken past their lease:
    // the sleep is what is tested, two and a half leases of 600 ms passing.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(survivor.try_acquire().await.expect("redis").is_none(), "renewed slots stay taken");

    crashing.stop();
    // Within the survivor's 10 s wait, or it would be refused.
    let slot = survivor.acquire(&CancellationToken::new()).await.expect("a lapsed slot comes back");
    assert_eq!(survivor.live().await.expect("count"), 1, "one lapsed slot taken, the other gone");
    slot.release().await;
    assert_eq!(survivor.live().await.expect("count"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_at_the_fleet_cap_is_bounded_and_cancellable() {
    let redis = RedisServer::start();
    let key = Keys::new(unique_prefix()).sandbox_slots("local");
    let holder = cap_on(&redis, &key, "holder", &cap_config(1, 5_000, 400));
    let waiter = cap_on(&redis, &key, "waiter", &cap_config(1, 5_000, 400));
    let held = holder.try_acquire().await.expect("redis").expect("under the cap");

    let began = Instant::now();
    let refused = waiter.acquire(&CancellationToken::new()).await.expect_err("the fleet is full");
    assert!(began.elapsed() >= Duration::from_millis(400), "gave up after {:?}", began.elapsed());
    assert!(matches!(&refused, SandboxError::Unavailable(m) if m.contains("FLOTILLA_SANDBOX_FLEET_MAX")), "{refused}");

    let patient = cap_on(&redis, &key, "patient", &cap_config(1, 5_000, 60_000));
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        // Cancelled while it waits: the delay is the scenario, not a wait.
        tokio::time::sleep(Duration::from_millis(200)).await;
        canceller.cancel();
    });
    let began = Instant::now();
    let cancelled = patient.acquire(&cancel).await.expect_err("cancelled");
    assert!(began.elapsed() < Duration::from_secs(10), "long before its 60 s wait: {cancelled} after {:?}", began.elapsed());
    held.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_sandbox_holds_its_fleet_slot_until_its_deadline() {
    let redis = RedisServer::start();
    let (cap_a, cap_b) = caps(&redis, &cap_config(1, 5_000, 10_000));
    let provider = Arc::new(MemoryProvider::new());
    let pool = pool(&provider, cap_a);
    let request = SandboxRequest { timeout: Duration::from_millis(1_500), ..SandboxRequest::default() };
    let lease = pool.acquire(&request, &CancellationToken::new()).await.expect("sandbox");
    let id = lease.sandbox.id.clone();
    pool.keep(lease).await;
    assert!(provider.status(&id).await.expect("not killed").alive);
    assert!(cap_b.try_acquire().await.expect("redis").is_none(), "the kept sandbox still counts");
    let began = Instant::now();
    let slot = cap_b.acquire(&CancellationToken::new()).await.expect("free once the sandbox's deadline passed");
    assert!(began.elapsed() >= Duration::from_millis(800), "freed too early: {:?}", began.elapsed());
    slot.release().await;
}

/// A fleet whose sandboxes are `provider`'s.
async fn memory_fleet(provider: &Arc<MemoryProvider>) -> DesktopFleet {
    let provider: Arc<dyn SandboxProvider> = provider.clone();
    DesktopFleet::start(DesktopOptions { provider: Some(provider), ..DesktopOptions::default() }).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_sandbox_serves_a_later_task_that_names_it() {
    let provider = Arc::new(MemoryProvider::new());
    let fleet = memory_fleet(&provider).await;
    let (first, events) = fleet
        .run_to_end(json!({
            "prompt": "prepare", "pipeline": "scripted", "actions": [{"type": "move", "x": 1, "y": 1}],
            "sandbox": {"keep_alive": true}
        }))
        .await;
    let task = record(&fleet.queue, &first).await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{events:?}");
    let kept = task.sandbox.as_ref().and_then(|s| s["id"].as_str()).expect("the task keeps its sandbox id").to_owned();
    let kept_id = flotilla_worker::sandbox::SandboxId::parse(&kept).expect("id");
    assert!(provider.status(&kept_id).await.expect("kept, not killed").alive);

    let (second, events) = fleet
        .run_to_end(json!({
            "prompt": "continue", "pipeline": "scripted", "actions": [{"type": "move", "x": 2, "y": 2}],
            "sandbox": {"id": kept}
        }))
        .await;
    assert_eq!(record(&fleet.queue, &second).await.status, TaskStatus::Succeeded, "{events:?}");
    assert_eq!(sandbox_ids(&events), std::slice::from_ref(&kept), "the named sandbox was used");
    assert!(provider.status(&kept_id).await.expect("the user's sandbox is not killed").alive);
    assert_eq!(provider.created(), 1, "no other sandbox was started");

    let (third, events) = fleet
        .run_to_end(json!({
            "prompt": "gone", "pipeline": "scripted", "actions": [{"type": "move", "x": 2, "y": 2}],
            "sandbox": {"id": "mem-unknown"}
        }))
        .await;
    let task = record(&fleet.queue, &third).await;
    assert_eq!((task.status, task.code), (TaskStatus::Failed, Some(StopCode::Problem)), "{events:?}");
    assert_eq!(task.attempts, 1, "an unknown sandbox is not retried");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiring_sandbox_is_extended_for_a_long_task() {
    let provider = Arc::new(MemoryProvider::new());
    let fleet = memory_fleet(&provider).await;
    let (id, events) = fleet
        .run_to_end(json!({
            "prompt": "outlive the sandbox's timeout", "pipeline": "scripted",
            "actions": [{"type": "move", "x": 1, "y": 1}, {"type": "wait", "ms": 7000}, {"type": "wait", "ms": 7000}],
            "sandbox": {"timeout_s": 10}
        }))
        .await;
    let task = record(&fleet.queue, &id).await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{events:?}");
    assert_eq!(task.attempts, 1);
    assert!(provider.extensions() >= 1, "the sandbox was extended");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_that_cannot_be_extended_ends_the_task_with_problem() {
    let provider = Arc::new(MemoryProvider::new());
    provider.refuse_extensions("max instance length exceeded");
    let fleet = memory_fleet(&provider).await;
    let began = Instant::now();
    let (id, events) = fleet
        .run_to_end(json!({
            "prompt": "outlive the sandbox's timeout", "pipeline": "scripted",
            "actions": [{"type": "move", "x": 1, "y": 1}, {"type": "wait", "ms": 30000}],
            "sandbox": {"timeout_s": 10}
        }))
        .await;
    let task = record(&fleet.queue, &id).await;
    assert_eq!((task.status, task.code), (TaskStatus::Failed, Some(StopCode::Problem)), "{events:?}");
    let error = task.error.unwrap_or_default();
    assert!(error.contains("could not be extended") && error.contains("max instance length"), "{error}");
    assert_eq!(task.attempts, 1, "not retried");
    assert_eq!(provider.extensions(), 1, "one refused request, no storm");
    assert!(began.elapsed() < Duration::from_secs(10), "ended before the sandbox's deadline: {:?}", began.elapsed());
    assert_eq!(provider.live(), 0, "the sandbox was released");
    fleet.stop().await;
}
