//! A drained task's path through Redis, against a real redis-server: on a
//! single server one claim call starts many tasks and one acknowledgement
//! call ends them, each task costing the calls ARCHITECTURE.md's command
//! budget lists, each call appending one feed entry per tenant, and the
//! ended tasks counted in their tenants' usage by that same call.

use flotilla_shared::keys::Keys;
use flotilla_shared::queue::{Claimer, Ending, FeedId, NewTask, Queue, StartOutcome, Terminal};
use flotilla_shared::{clock, TaskId, TenantId};
use flotilla_tests::tasks::{plain_worker, wait_spec};
use flotilla_tests::{test_config, unique_prefix, RedisServer};

const PER_TENANT: usize = 20;

/// `n` new tasks of `tenants` in turn, created in one call.
async fn create_at_once(queue: &Queue, tenants: &[TenantId], n: usize) {
    let spec = wait_spec(1);
    let tasks = (0..n).map(|i| NewTask {
        id: TaskId::generate(),
        tenant: tenants[i % tenants.len()].clone(),
        batch: None,
        spec: spec.clone(),
    });
    queue.create_tasks(tasks.collect()).await.expect("created");
}

/// Claims up to `most` tasks in one call and ends them in another.
async fn drain_once(queue: &Queue, claimer: &mut Claimer, most: usize) -> usize {
    let attempts: Vec<_> = claimer
        .next(most)
        .await
        .expect("claims")
        .into_iter()
        .filter_map(|c| match c.outcome {
            Ok(StartOutcome::Started(attempt)) => Some(attempt),
            _ => None,
        })
        .collect();
    let ends: Vec<Ending<'_>> =
        attempts.iter().map(|a| (a.as_ref(), Terminal::Succeeded(serde_json::Value::Null), clock::now_ms())).collect();
    let written = queue.finish_and_ack(&ends, &[]).await.expect("ended");
    assert!(written.iter().all(Result::is_ok), "{written:?}");
    attempts.len()
}

#[tokio::test]
async fn a_drained_task_costs_the_budgeted_calls_and_a_call_appends_one_feed_entry_per_tenant() {
    let redis = RedisServer::start();
    let config = test_config(&redis, &unique_prefix(), &[]);
    let queue = flotilla_tests::tasks::queue(&config).await;
    let keys = Keys::new(config.key_prefix.clone());
    let tenant = |name: &str| TenantId::parse(name).expect("tenant");
    let mut claimer = queue.claimer("w1", plain_worker());
    // A first task loads the scripts and makes the first claim's look for
    // entries of workers presumed dead.
    create_at_once(&queue, &[tenant("initech")], 1).await;
    assert_eq!(drain_once(&queue, &mut claimer, 1).await, 1);

    let tenants = [tenant("acme"), tenant("globex")];
    create_at_once(&queue, &tenants, 2 * PER_TENANT).await;
    redis.cli(&["CONFIG", "RESETSTAT"]);
    let n = drain_once(&queue, &mut claimer, 2 * PER_TENANT).await;
    assert_eq!(n, 2 * PER_TENANT, "every task starts in one claim");

    let calls = redis.command_calls();
    let count = |name: &str| calls.get(name).copied().unwrap_or(0) as usize;
    assert_eq!(count("evalsha"), 2, "one claim and one acknowledgement: {calls:?}");
    assert_eq!(count("publish"), 4 * n, "each of two events on the task's and the tenant's channel: {calls:?}");
    assert!(count("hmget") <= 2 * n + 1, "a start and an end read each task once: {calls:?}");
    assert_eq!(count("xadd"), 2 + 2 + 1, "per call one feed entry per tenant, and the ended stream's entry: {calls:?}");
    let today = clock::utc_day(clock::now_ms());
    for tenant in &tenants {
        let entries = redis.cli(&["XLEN", &keys.tenant_feed(tenant)]);
        assert_eq!(entries.trim(), "3", "{tenant}: created, started, ended, an entry each");
        let events = queue.feed_after(tenant, FeedId::START).await.expect("the feed reads");
        let of = |kind: &str| events.iter().filter(|e| e.event.contains(&format!("\"type\":\"{kind}\""))).count();
        assert_eq!((of("queued"), of("started"), of("succeeded")), (PER_TENANT, PER_TENANT, PER_TENANT), "{tenant}");
        let used = redis.cli(&["HGET", &keys.usage_day(tenant, &today), "tasks:succeeded"]);
        assert_eq!(used.trim(), PER_TENANT.to_string(), "{tenant}'s ended tasks are in its usage as the call returns");
    }
}
