//! A drained task's path through Redis, against a real redis-server: on a
//! single server one claim call starts many tasks and one acknowledgement
//! call ends them, each task costing the calls ARCHITECTURE.md's command
//! budget lists, each call appending one feed entry per tenant, and the
//! ended tasks counted in their tenants' usage by that same call. Their
//! events go out on every channel someone subscribes to, directly, by
//! pattern or on a replica, and no `PUBLISH` is spent on a channel nobody
//! hears.

use std::time::Duration;

use futures::StreamExt;

use flotilla_queue::keys::Keys;
use flotilla_queue::queue::{Attempt, Claimer, Ending, FeedId, NewTask, Queue, StartOutcome, Terminal};
use flotilla_tests::tasks::{plain_worker, wait_spec};
use flotilla_tests::{test_config, unique_prefix, RedisServer};
use flotilla_types::task::{StopCode, TaskStatus};
use flotilla_types::{clock, TaskId, TenantId};

const PER_TENANT: usize = 20;

/// `n` new tasks of `tenants` in turn, created in one call; their ids.
async fn create_at_once(queue: &Queue, tenants: &[TenantId], n: usize) -> Vec<TaskId> {
    let spec = wait_spec(1);
    let tasks: Vec<NewTask> = (0..n)
        .map(|i| NewTask { id: TaskId::generate(), tenant: tenants[i % tenants.len()].clone(), batch: None, spec: spec.clone() })
        .collect();
    let ids = tasks.iter().map(|t| t.id.clone()).collect();
    queue.submitter().create_tasks(tasks).await.expect("created");
    ids
}

/// A queue on `redis` under a prefix of its own, its keys, and a claimer
/// of worker `w1`.
async fn queue_on(redis: &RedisServer) -> (Queue, Keys, Claimer) {
    let config = test_config(redis, &unique_prefix(), &[]);
    let queue = flotilla_tests::tasks::queue(&config).await;
    let claimer = queue.claimer("w1", plain_worker());
    (queue, Keys::new(config.key_prefix.clone()), claimer)
}

fn tenant(name: &str) -> TenantId {
    TenantId::parse(name).expect("tenant")
}

/// A subscriber on `url`: to `channels`, and to `pattern` when given.
async fn subscriber(url: &str, channels: &[String], pattern: Option<&str>) -> redis::aio::PubSub {
    let mut pubsub = redis::Client::open(url).expect("url").get_async_pubsub().await.expect("subscriber connects");
    for channel in channels {
        pubsub.subscribe(channel).await.expect("subscribed");
    }
    if let Some(pattern) = pattern {
        pubsub.psubscribe(pattern).await.expect("subscribed to the pattern");
    }
    pubsub
}

/// The next `n` messages the subscriber hears, as (channel, event type).
async fn heard(pubsub: &mut redis::aio::PubSub, n: usize) -> Vec<(String, String)> {
    let mut messages = pubsub.on_message();
    let mut got = Vec::new();
    while got.len() < n {
        let message = tokio::time::timeout(Duration::from_secs(10), messages.next())
            .await
            .unwrap_or_else(|_| panic!("only {} of {n} messages heard: {got:?}", got.len()))
            .expect("subscription open");
        let event: serde_json::Value = serde_json::from_str(&message.get_payload::<String>().expect("text")).expect("json");
        got.push((message.get_channel_name().to_owned(), event["type"].as_str().unwrap_or_default().to_owned()));
    }
    got
}

/// Nothing more arrives within a moment.
async fn hears_nothing_more(pubsub: &mut redis::aio::PubSub) {
    let more = tokio::time::timeout(Duration::from_millis(300), pubsub.on_message().next()).await;
    assert!(
        more.is_err(),
        "heard more than was published for it: {:?}",
        more.ok().flatten().map(|m| m.get_channel_name().to_owned())
    );
}

/// The attempts one claim of up to `most` tasks started.
async fn claim_started(claimer: &mut Claimer, most: usize) -> Vec<Box<Attempt>> {
    claimer
        .next(most)
        .await
        .expect("claims")
        .into_iter()
        .filter_map(|c| match c.outcome {
            Ok(StartOutcome::Started(attempt)) => Some(attempt),
            _ => None,
        })
        .collect()
}

/// Claims up to `most` tasks in one call and ends them in another.
async fn drain_once(queue: &Queue, claimer: &mut Claimer, most: usize) -> usize {
    let attempts = claim_started(claimer, most).await;
    let ends: Vec<Ending<'_>> =
        attempts.iter().map(|a| (a.as_ref(), Terminal::Succeeded(serde_json::Value::Null), clock::now_ms())).collect();
    let written = queue.runner().finish_and_ack(&ends, &[]).await.expect("ended");
    assert!(written.iter().all(Result::is_ok), "{written:?}");
    attempts.len()
}

#[tokio::test]
async fn a_drained_task_costs_the_budgeted_calls_and_a_call_appends_one_feed_entry_per_tenant() {
    let redis = RedisServer::start();
    let (queue, keys, mut claimer) = queue_on(&redis).await;
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
    assert_eq!(count("publish"), 0, "nobody subscribes, so no channel is published to: {calls:?}");
    assert!(count("hmget") <= 2 * n + 1, "a start and an end read each task once: {calls:?}");
    assert_eq!(count("xadd"), 2 + 2 + 1, "per call one feed entry per tenant, and the ended stream's entry: {calls:?}");
    let today = clock::utc_day(clock::now_ms());
    for tenant in &tenants {
        let entries = redis.cli(&["XLEN", &keys.tenant_feed(tenant)]);
        assert_eq!(entries.trim(), "3", "{tenant}: created, started, ended, an entry each");
        let events = queue.reader().feed_after(tenant, FeedId::START).await.expect("the feed reads");
        let of = |kind: &str| events.iter().filter(|e| e.event.contains(&format!("\"type\":\"{kind}\""))).count();
        assert_eq!((of("queued"), of("started"), of("succeeded")), (PER_TENANT, PER_TENANT, PER_TENANT), "{tenant}");
        let used = redis.cli(&["HGET", &keys.usage_day(tenant, &today), "tasks:succeeded"]);
        assert_eq!(used.trim(), PER_TENANT.to_string(), "{tenant}'s ended tasks are in its usage as the call returns");
    }
}

#[tokio::test]
async fn one_call_ends_tasks_of_many_tenants_and_outcomes_each_with_its_own() {
    let redis = RedisServer::start();
    let (queue, keys, mut claimer) = queue_on(&redis).await;
    let tenants = [tenant("acme"), tenant("globex")];
    create_at_once(&queue, &tenants, 6).await;
    let attempts = claim_started(&mut claimer, 6).await;
    assert_eq!(attempts.len(), 6, "every task starts");
    // Tasks of both tenants end in one call, in every way a task ends, so
    // the call's shared values differ from task to task.
    let terminal = |i: usize| match i % 3 {
        0 => Terminal::Succeeded(serde_json::json!({ "n": i })),
        1 => Terminal::Failed(StopCode::Problem, format!("broke at {i}")),
        _ => Terminal::Cancelled,
    };
    let ends: Vec<Ending<'_>> = attempts.iter().enumerate().map(|(i, a)| (a.as_ref(), terminal(i), clock::now_ms())).collect();
    let written = queue.runner().finish_and_ack(&ends, &[]).await.expect("ended");
    assert!(written.iter().all(Result::is_ok), "{written:?}");

    for (i, attempt) in attempts.iter().enumerate() {
        let task = queue.reader().get(attempt.tenant(), attempt.task_id()).await.expect("reads").expect("the task is there");
        let (status, code, result, error) = match terminal(i) {
            Terminal::Succeeded(result) => (TaskStatus::Succeeded, StopCode::Done, Some(result), None),
            Terminal::Failed(code, error) => (TaskStatus::Failed, code, None, Some(error)),
            Terminal::Cancelled => (TaskStatus::Cancelled, StopCode::Cancelled, None, None),
        };
        assert_eq!((task.status, task.code, task.result, task.error), (status, Some(code), result, error), "task {i}");
        assert_eq!(task.tenant, *attempt.tenant(), "task {i} keeps its tenant");
    }
    let today = clock::utc_day(clock::now_ms());
    for tenant in &tenants {
        let mine: Vec<usize> = (0..6).filter(|i| attempts[*i].tenant() == tenant).collect();
        for (outcome, rest) in [("succeeded", 0), ("failed", 1), ("cancelled", 2)] {
            let expected = mine.iter().filter(|i| *i % 3 == rest).count();
            let used = redis.cli(&["HGET", &keys.usage_day(tenant, &today), &format!("tasks:{outcome}")]);
            assert_eq!(used.trim().parse::<usize>().unwrap_or(0), expected, "{tenant}'s {outcome} tasks in its usage");
        }
    }
    for tenant in &tenants {
        let load = queue.reader().stats(tenant).await.expect("stats").tenants.remove(0);
        assert_eq!(load.running, 0, "{tenant}: every entry is acknowledged and its slot freed");
    }
}

#[tokio::test]
async fn a_call_publishes_each_event_on_the_channels_subscribed_to_and_on_no_other() {
    let redis = RedisServer::start();
    let (queue, keys, mut claimer) = queue_on(&redis).await;
    let (acme, globex) = (tenant("acme"), tenant("globex"));
    let mut acme_channel = subscriber(&redis.url(), &[keys.tenant_channel(&acme)], None).await;
    let ids = create_at_once(&queue, &[acme.clone(), globex.clone()], 2 * PER_TENANT).await;
    let globex_task = ids[1].clone();
    let mut task_channel = subscriber(&redis.url(), &[keys.task_channel(&globex_task)], None).await;

    redis.cli(&["CONFIG", "RESETSTAT"]);
    assert_eq!(drain_once(&queue, &mut claimer, 2 * PER_TENANT).await, 2 * PER_TENANT);

    let calls = redis.command_calls();
    assert_eq!(
        calls.get("publish").copied().unwrap_or(0),
        2 * PER_TENANT as u64 + 2,
        "started and ended on acme's channel for each of its tasks, and on the one task channel: {calls:?}"
    );
    let on_tenant = heard(&mut acme_channel, 3 * PER_TENANT).await;
    let of = |kind: &str| on_tenant.iter().filter(|(_, k)| k == kind).count();
    assert_eq!((of("queued"), of("started"), of("succeeded")), (PER_TENANT, PER_TENANT, PER_TENANT), "{on_tenant:?}");
    hears_nothing_more(&mut acme_channel).await;
    let on_task: Vec<String> = heard(&mut task_channel, 2).await.into_iter().map(|(_, kind)| kind).collect();
    assert_eq!(on_task, ["started", "succeeded"], "the task's channel, subscribed after its creation");
    hears_nothing_more(&mut task_channel).await;
}

#[tokio::test]
async fn with_a_pattern_subscribed_every_event_goes_out_on_all_its_channels() {
    let redis = RedisServer::start();
    let (queue, keys, mut claimer) = queue_on(&redis).await;
    let acme = tenant("acme");
    let ids = create_at_once(&queue, std::slice::from_ref(&acme), PER_TENANT).await;
    let mut everything = subscriber(&redis.url(), &[], Some(&format!("{}*", keys.channel_prefix()))).await;

    redis.cli(&["CONFIG", "RESETSTAT"]);
    assert_eq!(drain_once(&queue, &mut claimer, PER_TENANT).await, PER_TENANT);

    let publishes = redis.command_calls().get("publish").copied().unwrap_or(0);
    assert_eq!(publishes, 4 * PER_TENANT as u64, "two events, each on its task's and its tenant's channel");
    let messages = heard(&mut everything, 4 * PER_TENANT).await;
    for id in &ids {
        let on = |channel: String| messages.iter().filter(|(c, _)| *c == channel).map(|(_, k)| k.as_str()).collect::<Vec<_>>();
        assert_eq!(on(keys.task_channel(id)), ["started", "succeeded"], "{id}");
    }
    assert_eq!(messages.iter().filter(|(c, _)| *c == keys.tenant_channel(&acme)).count(), 2 * PER_TENANT);
}

#[tokio::test]
async fn a_subscriber_on_a_replica_hears_the_events() {
    let primary = RedisServer::start();
    let replica = RedisServer::start();
    replica.cli(&["REPLICAOF", "127.0.0.1", &primary.port.to_string()]);
    let linked = || replica.cli(&["INFO", "replication"]).contains("master_link_status:up");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !linked() {
        assert!(std::time::Instant::now() < deadline, "the replica did not link: {}", replica.cli(&["INFO", "replication"]));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (queue, keys, mut claimer) = queue_on(&primary).await;
    let ids = create_at_once(&queue, &[tenant("acme")], 2).await;
    // The `queued` events reach the replica before a write made after them.
    let mut conn = primary.connection();
    let _: () = redis::cmd("SET").arg(format!("{}:synced", keys.prefix())).arg(1).query(&mut conn).expect("SET");
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut conn).expect("WAIT");
    assert_eq!(acked, 1, "the replica caught up");
    let mut on_replica = subscriber(&replica.url(), &[keys.task_channel(&ids[0])], None).await;

    assert_eq!(drain_once(&queue, &mut claimer, 2).await, 2);

    let kinds: Vec<String> = heard(&mut on_replica, 2).await.into_iter().map(|(_, kind)| kind).collect();
    assert_eq!(kinds, ["started", "succeeded"], "published on the primary, heard through the replica");
}

#[tokio::test]
async fn a_finished_task_keeps_no_empty_field_and_reads_back_the_same() {
    let redis = RedisServer::start();
    let (queue, keys, mut claimer) = queue_on(&redis).await;
    let acme = tenant("acme");
    let ids = create_at_once(&queue, std::slice::from_ref(&acme), 1).await;
    assert_eq!(drain_once(&queue, &mut claimer, 1).await, 1);

    let key = keys.task(&ids[0]);
    let fields: Vec<String> = redis.cli(&["HKEYS", &key]).lines().map(str::to_owned).collect();
    for absent in ["batch", "result", "trace", "cancel"] {
        assert!(!fields.iter().any(|f| f == absent), "no {absent} field when the task has none: {fields:?}");
    }
    assert_eq!(redis.cli(&["HGET", &key, "owner"]).trim(), "w1", "the last owner stays; the terminal status fences");
    assert!(fields.len() <= 16, "a finished no-op task's hash stays within 16 fields: {fields:?}");

    let record = queue.reader().get(&acme, &ids[0]).await.expect("reads").expect("the task exists");
    let shown = serde_json::to_value(&record).expect("json");
    assert_eq!(shown["status"], "succeeded");
    assert_eq!((shown["batch_id"].clone(), shown["result"].clone()), (serde_json::Value::Null, serde_json::Value::Null));
    assert_eq!(shown["last_seq"], 3, "queued, started, succeeded");
}
