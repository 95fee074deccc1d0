//! The queue's promises, driven through the real worker loop in process
//! against a real redis-server: order, retries, dead letters, fencing,
//! cancellation, delays, idempotency, retention and draining.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_config::Config;
use flotilla_queue::queue::StartOutcome;
use flotilla_queue::QueueError;
use flotilla_tests::tasks::{
    assert_history_whole, events, plain_worker, queue, record, submit_many, tenant, wait_all_ended, wait_spec,
};
use flotilla_tests::{eventually, test_config, unique_prefix, InProcessWorker, RedisServer};
use flotilla_types::clock;
use flotilla_types::event::EventKind;
use flotilla_types::task::{Pipeline, TaskStatus};
use flotilla_worker::{Outcome, PipelineError, PipelineRunner, Registry, TaskRun};
use futures::future::BoxFuture;
use futures::FutureExt;

/// A pipeline that fails retryably every time, counting its runs.
struct AlwaysFlaky(Arc<AtomicU32>);

impl PipelineRunner for AlwaysFlaky {
    fn run<'a>(&'a self, _run: &'a TaskRun) -> BoxFuture<'a, Result<Outcome, PipelineError>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        async { Err(PipelineError::Retryable("model answered 503".into())) }.boxed()
    }
}

fn fleet(extra: &[(&str, &str)]) -> (RedisServer, Config) {
    let redis = RedisServer::start();
    let config = test_config(&redis, &unique_prefix(), extra);
    (redis, config)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scripted_task_runs_to_success_with_a_whole_history() {
    let (_redis, config) = fleet(&[]);
    let q = queue(&config).await;
    let id = q.submitter().submit(&tenant(), wait_spec(50)).await.expect("submit").id;
    let worker = InProcessWorker::start(config, Registry::standard());
    let records = wait_all_ended(&q, std::slice::from_ref(&id), Duration::from_secs(10)).await;
    assert_eq!(records[0].status, TaskStatus::Succeeded);
    assert_eq!(records[0].attempts, 1);
    assert_eq!(records[0].steps_taken, 1);
    let history = events(&q, &id).await;
    assert_history_whole(&id, &history);
    let types: Vec<&str> = history.iter().map(|e| e.kind.name()).collect();
    assert_eq!(types, ["queued", "started", "action", "action_completed", "succeeded"]);
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn higher_lanes_are_read_first() {
    let (_redis, config) = fleet(&[]);
    let q = queue(&config).await;
    let mut low = wait_spec(1);
    low.priority = Some(flotilla_types::task::Priority::Low);
    let mut high = wait_spec(1);
    high.priority = Some(flotilla_types::task::Priority::High);
    let low_id = q.submitter().submit(&tenant(), low).await.expect("submit").id;
    let normal_id = q.submitter().submit(&tenant(), wait_spec(1)).await.expect("submit").id;
    let high_id = q.submitter().submit(&tenant(), high).await.expect("submit").id;
    let order: Vec<_> = q
        .runner()
        .claim_turns(q.keys().shard_of(&tenant()), "reader", &plain_worker(), 3)
        .await
        .expect("claim")
        .into_iter()
        .filter_map(|d| d.task_id)
        .collect();
    assert_eq!(order, [high_id, normal_id, low_id]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retryable_failure_retries_with_backoff_then_dead_letters_and_can_be_revived() {
    let (_redis, config) = fleet(&[]);
    let q = queue(&config).await;
    let runs = Arc::new(AtomicU32::new(0));
    let mut registry = Registry::standard();
    registry.register(Pipeline::Scripted, Arc::new(AlwaysFlaky(runs.clone())));
    let mut spec = wait_spec(1);
    spec.retry = Some(flotilla_types::task::RetryPolicy { max_attempts: 3 });
    let id = q.submitter().submit(&tenant(), spec).await.expect("submit").id;
    let worker = InProcessWorker::start(config, registry);
    let records = wait_all_ended(&q, std::slice::from_ref(&id), Duration::from_secs(15)).await;
    assert_eq!(records[0].status, TaskStatus::Failed);
    assert_eq!(records[0].attempts, 3);
    assert_eq!(runs.load(Ordering::SeqCst), 3, "exactly max_attempts runs");
    let history = events(&q, &id).await;
    assert_history_whole(&id, &history);
    let retries: Vec<(u32, u64)> = history
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Retrying { attempt, delay_ms, .. } => Some((*attempt, *delay_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(retries.iter().map(|r| r.0).collect::<Vec<_>>(), [2, 3]);
    assert!(retries.iter().all(|(_, d)| *d <= 500), "delays stay under the configured maximum: {retries:?}");
    let dead = q.reader().dead(&tenant(), 10, None).await.expect("dead").items;
    assert_eq!(dead.iter().map(|t| &t.id).collect::<Vec<_>>(), [&id]);

    let runs_before = runs.load(Ordering::SeqCst);
    q.submitter().revive(&tenant(), &id).await.expect("revive");
    assert!(
        q.reader().dead(&tenant(), 10, None).await.expect("dead").items.is_empty(),
        "revived tasks leave the dead-letter list"
    );
    wait_all_ended(&q, std::slice::from_ref(&id), Duration::from_secs(15)).await;
    assert_eq!(runs.load(Ordering::SeqCst), runs_before + 3, "a revived task gets fresh attempts");
    let history = events(&q, &id).await;
    let second_life = history.iter().rposition(|e| e.kind.name() == "queued").expect("queued again");
    assert_history_whole(&id, &history[..second_life]);
    assert_eq!(history.iter().filter(|e| e.kind.is_terminal()).count(), 2, "one end per life");
    assert!(history.last().is_some_and(|e| e.kind.is_terminal()));
    for (i, e) in history.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1, "no gap across the revival");
    }
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stale_attempt_cannot_write_after_another_took_over() {
    let (_redis, config) = fleet(&[("FLOTILLA_LEASE_MS", "200")]);
    let q = queue(&config).await;
    let id = q.submitter().submit(&tenant(), wait_spec(1)).await.expect("submit").id;
    let delivery =
        q.runner().claim_turns(q.keys().shard_of(&tenant()), "old-worker", &plain_worker(), 1).await.expect("claim").remove(0);
    let StartOutcome::Started(stale) = q.runner().start(&delivery, "old-worker").await.expect("start") else {
        panic!("first delivery starts")
    };
    // Time for the 200 ms lease to pass: an entry's idle time is Redis's
    // own clock, which no test clock moves.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let taken = q.runner().reclaim("new-worker", &plain_worker(), 10).await.expect("reclaim");
    assert_eq!(taken.len(), 1, "an entry idle past its lease is reclaimed");
    let StartOutcome::Started(fresh) = q.runner().start(&taken[0], "new-worker").await.expect("start") else {
        panic!("reclaimed delivery starts a new attempt")
    };
    assert_eq!((stale.number, fresh.number), (1, 2));

    assert!(matches!(stale.emit(EventKind::Reasoning { text: "late".into() }, &[]).await, Err(QueueError::Fenced)));
    assert!(matches!(stale.succeed(serde_json::json!({"text": "stale"})).await, Err(QueueError::Fenced)));
    assert!(matches!(stale.fail(flotilla_types::task::StopCode::Problem, "stale").await, Err(QueueError::Fenced)));
    assert!(matches!(stale.retry_or_dead_letter("stale").await, Err(QueueError::Fenced)));
    assert_eq!(stale.heartbeat().await.expect("heartbeat"), flotilla_queue::queue::HeartbeatOutcome::Fenced);

    fresh.succeed(serde_json::json!({"text": "fresh"})).await.expect("owner writes");
    let task = record(&q, &id).await;
    assert_eq!(task.status, TaskStatus::Succeeded);
    assert_eq!(task.result, Some(serde_json::json!({"text": "fresh"})));
    assert!(
        matches!(stale.succeed(serde_json::json!({"text": "stale"})).await, Err(QueueError::Fenced)),
        "still refused after the end"
    );
    assert_history_whole(&id, &events(&q, &id).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_queued_task_ends_it_and_no_worker_runs_it() {
    let (_redis, config) = fleet(&[]);
    let q = queue(&config).await;
    let id = q.submitter().submit(&tenant(), wait_spec(1)).await.expect("submit").id;
    let outcome = q.submitter().cancel(&tenant(), &id).await.expect("cancel");
    assert_eq!(outcome, flotilla_queue::queue::CancelOutcome::Cancelled);
    // A task queued behind it: once that one has run, the worker has read
    // past the cancelled one's entry.
    let behind = q.submitter().submit(&tenant(), wait_spec(1)).await.expect("submit").id;
    let worker = InProcessWorker::start(config, Registry::standard());
    wait_all_ended(&q, std::slice::from_ref(&behind), Duration::from_secs(10)).await;
    let history = events(&q, &id).await;
    assert_history_whole(&id, &history);
    assert!(history.iter().all(|e| e.kind.name() != "started"), "a cancelled task never starts");
    eventually("every entry is acknowledged", Duration::from_secs(10), async || {
        let stats = q.reader().stats(&tenant()).await.expect("stats");
        stats.lanes.iter().all(|l| l.pending == 0 && l.depth == 0)
    })
    .await;
    let outcomes = q.reader().fleet_stats().await.expect("stats").outcomes;
    assert_eq!(outcomes.get("cancelled"), Some(&1), "counted once, when it was cancelled: {outcomes:?}");
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_running_task_stops_it_within_five_seconds() {
    let (_redis, config) = fleet(&[]);
    let q = queue(&config).await;
    let id = q.submitter().submit(&tenant(), wait_spec(60_000)).await.expect("submit").id;
    let worker = InProcessWorker::start(config, Registry::standard());
    eventually("the task starts", Duration::from_secs(10), async || record(&q, &id).await.status == TaskStatus::Running).await;
    let asked = Instant::now();
    assert_eq!(q.submitter().cancel(&tenant(), &id).await.expect("cancel"), flotilla_queue::queue::CancelOutcome::Cancelling);
    let records = wait_all_ended(&q, std::slice::from_ref(&id), Duration::from_secs(10)).await;
    assert!(asked.elapsed() < Duration::from_secs(10), "stopped long before its 60 s: {:?}", asked.elapsed());
    assert_eq!(records[0].status, TaskStatus::Cancelled);
    assert_history_whole(&id, &events(&q, &id).await);
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_does_not_start_before_not_before() {
    let (_redis, config) = fleet(&[]);
    let q = queue(&config).await;
    let mut spec = wait_spec(1);
    let start_at = clock::now_ms() + 1_500;
    spec.not_before = Some(clock::rfc3339(start_at));
    let id = q.submitter().submit(&tenant(), spec).await.expect("submit").id;
    let worker = InProcessWorker::start(config, Registry::standard());
    wait_all_ended(&q, std::slice::from_ref(&id), Duration::from_secs(10)).await;
    let started = events(&q, &id).await.into_iter().find(|e| e.kind.name() == "started").expect("started");
    let started_ms = clock::parse_rfc3339(&started.ts).expect("ts");
    assert!(started_ms >= start_at, "started {} ms early", start_at - started_ms);
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idempotency_key_returns_the_same_task_or_a_conflict() {
    let (_redis, config) = fleet(&[]);
    let q = queue(&config).await;
    let mut spec = wait_spec(1);
    spec.idempotency_key = Some("order-42".into());
    let first = q.submitter().submit(&tenant(), spec.clone()).await.expect("submit");
    let again = q.submitter().submit(&tenant(), spec.clone()).await.expect("replay");
    assert_eq!(again.id, first.id);
    assert!(again.replayed && !first.replayed);
    let mut changed = spec;
    changed.prompt = "something else".into();
    assert!(matches!(q.submitter().submit(&tenant(), changed).await, Err(QueueError::IdempotencyConflict)));
    let (listed, _) =
        q.reader().list(&tenant(), &flotilla_queue::queue::ListFilter { limit: 10, ..Default::default() }).await.expect("list");
    assert_eq!(listed.len(), 1, "a replay creates nothing");
}

#[tokio::test(flavor = "multi_thread")]
async fn finished_tasks_expire_after_the_retention_and_leave_the_index() {
    let (_redis, config) = fleet(&[("FLOTILLA_RETENTION_S", "1")]);
    let q = queue(&config).await;
    let id = q.submitter().submit(&tenant(), wait_spec(1)).await.expect("submit").id;
    let worker = InProcessWorker::start(config, Registry::standard());
    wait_all_ended(&q, std::slice::from_ref(&id), Duration::from_secs(10)).await;
    eventually("the task expired", Duration::from_secs(10), async || {
        q.reader().get(&tenant(), &id).await.expect("get").is_none()
    })
    .await;
    assert!(events(&q, &id).await.is_empty(), "its events expired");
    q.housekeeper().prune_indexes().await.expect("prune");
    let (listed, _) =
        q.reader().list(&tenant(), &flotilla_queue::queue::ListFilter { limit: 10, ..Default::default() }).await.expect("list");
    assert!(listed.is_empty());
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn each_finished_task_is_kept_for_the_retention_after_its_own_end() {
    let (_redis, config) = fleet(&[("FLOTILLA_RETENTION_S", "2")]);
    let q = queue(&config).await;
    let worker = InProcessWorker::start(config, Registry::standard());
    let early = q.submitter().submit(&tenant(), wait_spec(1)).await.expect("submit").id;
    wait_all_ended(&q, std::slice::from_ref(&early), Duration::from_secs(10)).await;
    // The sleep is what is tested: the two tasks end at least 1.2 s apart,
    // so the late one outlives the early one by as much.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let late = q.submitter().submit(&tenant(), wait_spec(1)).await.expect("submit").id;
    wait_all_ended(&q, std::slice::from_ref(&late), Duration::from_secs(10)).await;
    eventually("the early task is gone two seconds after its end", Duration::from_secs(10), async || {
        q.reader().get(&tenant(), &early).await.expect("get").is_none()
    })
    .await;
    assert!(events(&q, &early).await.is_empty(), "its history went with it");
    let kept = q.reader().get(&tenant(), &late).await.expect("get").expect("the late task is still kept");
    assert_eq!(kept.status, TaskStatus::Succeeded);
    assert_eq!(events(&q, &late).await.len(), 5, "with its whole history");
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_retention_sweep_leaves_a_task_that_is_not_ended() {
    let (_redis, config) = fleet(&[("FLOTILLA_RETENTION_S", "1")]);
    let q = queue(&config).await;
    let id = q.submitter().submit(&tenant(), wait_spec(1)).await.expect("submit").id;
    let mut conn = q.redis().shared();
    let long_ago = clock::now_ms() - 60_000;
    let _: i64 =
        redis::cmd("ZADD").arg(q.keys().finished()).arg(long_ago).arg(id.as_str()).query_async(&mut conn).await.expect("ZADD");
    assert_eq!(q.housekeeper().sweep_finished().await.expect("sweep"), 1, "the entry left the index");
    assert_eq!(record(&q, &id).await.status, TaskStatus::Queued, "the queued task is untouched");
    let left: i64 = redis::cmd("ZCARD").arg(q.keys().finished()).query_async(&mut conn).await.expect("ZCARD");
    assert_eq!(left, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_retention_sweep_takes_an_ended_entry_and_leaves_its_task_that_is_not_ended() {
    let (_redis, config) = fleet(&[("FLOTILLA_RETENTION_S", "1")]);
    let q = queue(&config).await;
    let queued = q.submitter().submit(&tenant(), wait_spec(1)).await.expect("submit").id;
    let mut conn = q.redis().shared();
    let long_ago = format!("{}-0", clock::now_ms() - 60_000);
    let _: String = redis::cmd("XADD")
        .arg(q.keys().ended())
        .arg(long_ago)
        .arg("t")
        .arg(queued.as_str())
        .query_async(&mut conn)
        .await
        .expect("XADD");
    assert_eq!(q.housekeeper().sweep_finished().await.expect("sweep"), 1, "the entry left the ended stream");
    assert_eq!(record(&q, &queued).await.status, TaskStatus::Queued, "the queued task is untouched");
    let left: i64 = redis::cmd("XLEN").arg(q.keys().ended()).query_async(&mut conn).await.expect("XLEN");
    assert_eq!(left, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_delivery_after_the_end_is_acknowledged_and_not_counted_again() {
    let (_redis, config) = fleet(&[]);
    let q = queue(&config).await;
    let id = q.submitter().submit(&tenant(), wait_spec(1)).await.expect("submit").id;
    let worker = InProcessWorker::start(config, Registry::standard());
    wait_all_ended(&q, std::slice::from_ref(&id), Duration::from_secs(10)).await;
    // The entry a retry's promotion adds while the earlier one is reclaimed.
    queue_entry_again(&q, &id).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stats = q.reader().stats(&tenant()).await.expect("stats");
        if stats.lanes.iter().all(|l| l.pending == 0 && l.depth == 0) {
            let outcomes = q.reader().fleet_stats().await.expect("stats").outcomes;
            assert_eq!(outcomes.get("succeeded"), Some(&1), "counted once: {outcomes:?}");
            break;
        }
        assert!(Instant::now() < deadline, "the second entry was acknowledged: {stats:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let history = events(&q, &id).await;
    assert_history_whole(&id, &history);
    assert_eq!(history.iter().filter(|e| e.kind.name() == "started").count(), 1, "it ran once");
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_new_entry_of_a_running_task_starts_no_second_attempt() {
    let (_redis, config) = fleet(&[]);
    let q = queue(&config).await;
    let id = q.submitter().submit(&tenant(), wait_spec(300)).await.expect("submit").id;
    // The entry a retry's promotion adds while the earlier one is reclaimed.
    queue_entry_again(&q, &id).await;
    let worker = InProcessWorker::start(config, Registry::standard());
    let records = wait_all_ended(&q, std::slice::from_ref(&id), Duration::from_secs(10)).await;
    assert_eq!(records[0].status, TaskStatus::Succeeded);
    assert_eq!(records[0].attempts, 1, "one attempt");
    let history = events(&q, &id).await;
    assert_history_whole(&id, &history);
    assert_eq!(history.iter().filter(|e| e.kind.name() == "started").count(), 1, "it ran once");
    let stats = q.reader().stats(&tenant()).await.expect("stats");
    assert!(stats.lanes.iter().all(|l| l.pending == 0 && l.depth == 0), "both entries acknowledged: {stats:?}");
    assert_eq!(stats.tenants[0].running, 0, "both slots given back: {stats:?}");
    let outcomes = q.reader().fleet_stats().await.expect("stats").outcomes;
    assert_eq!(outcomes.get("succeeded"), Some(&1), "counted once: {outcomes:?}");
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopping_worker_lets_running_tasks_finish() {
    let (_redis, config) = fleet(&[("FLOTILLA_DRAIN_DEADLINE_S", "10")]);
    let q = queue(&config).await;
    let ids = submit_many(&q, &wait_spec(800), 2).await;
    let worker = InProcessWorker::start(config, Registry::standard());
    let deadline = Instant::now() + Duration::from_secs(10);
    while record(&q, &ids[1]).await.status != TaskStatus::Running {
        assert!(Instant::now() < deadline, "tasks never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    worker.stop().await;
    for id in &ids {
        assert_eq!(record(&q, id).await.status, TaskStatus::Succeeded, "drained, not abandoned");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_runs_at_most_its_concurrency() {
    let (_redis, config) = fleet(&[("FLOTILLA_WORKER_CONCURRENCY", "2")]);
    let q = queue(&config).await;
    let ids = submit_many(&q, &wait_spec(200), 6).await;
    let worker = InProcessWorker::start(config, Registry::standard());
    wait_all_ended(&q, &ids, Duration::from_secs(15)).await;
    let mut spans = Vec::new();
    for id in &ids {
        let history = events(&q, id).await;
        let at =
            |name: &str| history.iter().find(|e| e.kind.name() == name).and_then(|e| clock::parse_rfc3339(&e.ts)).expect("ts");
        spans.push((at("started"), at("succeeded")));
    }
    let most = spans.iter().map(|(s, _)| spans.iter().filter(|(s2, e2)| s2 <= s && s < e2).count()).max().unwrap_or(0);
    assert!(most <= 2, "{most} tasks ran at once");
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_gone_for_good_is_forgotten_only_after_its_tasks_were_taken_over() {
    let (_redis, config) = fleet(&[("FLOTILLA_LEASE_MS", "200")]);
    let q = queue(&config).await;
    let id = q.submitter().submit(&tenant(), wait_spec(1)).await.expect("submit").id;
    let held = q.runner().claim_turns(q.keys().shard_of(&tenant()), "vanished", &plain_worker(), 1).await.expect("claim");
    assert_eq!(held.len(), 1);
    // Time for the consumer to be gone (ten leases of 200 ms): its idle time
    // is Redis's own clock, which no test clock moves.
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    assert!(q.housekeeper().forget_gone_consumers().await.expect("forget").is_empty(), "a consumer holding an entry stays");
    let taken = q.runner().reclaim("survivor", &plain_worker(), 10).await.expect("reclaim");
    assert_eq!(taken.len(), 1, "the vanished worker's entry is taken over first");
    let forgotten = q.housekeeper().forget_gone_consumers().await.expect("forget");
    assert_eq!(forgotten, ["vanished"], "then its consumer entry goes; the live one stays");
    let StartOutcome::Started(attempt) = q.runner().start(&taken[0], "survivor").await.expect("start") else { panic!("starts") };
    attempt.succeed(serde_json::json!({})).await.expect("finish");
    assert_eq!(record(&q, &id).await.status, TaskStatus::Succeeded);
}

/// Adds a second lane entry for a task, as a retry's promotion does while
/// the earlier entry is reclaimed.
async fn queue_entry_again(q: &flotilla_queue::queue::Queue, id: &flotilla_types::TaskId) {
    let shard = q.keys().shard_of(&tenant());
    let mut conn = q.redis().shared();
    let _: i64 = flotilla_queue::queue::fair_scripts::ENQUEUE
        .key(q.keys().sched(shard))
        .arg(q.keys().shard_base(shard))
        .arg(flotilla_queue::keys::GROUP)
        .arg(0)
        .arg(tenant().as_str())
        .arg(1)
        .arg(0)
        .arg(flotilla_types::task::Priority::Normal.lane_number())
        .arg(id.as_str())
        .arg(0)
        .arg("scripted|none|")
        .invoke_async(&mut conn)
        .await
        .expect("ENQUEUE");
}

/// A pipeline whose errors quote secrets: a retryable one, then a final one.
struct LeakyErrors(Arc<AtomicU32>);

impl PipelineRunner for LeakyErrors {
    fn run<'a>(&'a self, _run: &'a TaskRun) -> BoxFuture<'a, Result<Outcome, PipelineError>> {
        let run = self.0.fetch_add(1, Ordering::SeqCst);
        async move {
            Err(match run {
                0 => PipelineError::Retryable(
                    "cannot reach redis://:hunter2@10.0.0.5:6379: refused; E2B said {\"envdAccessToken\":\"tok-9f8e7d\"}".into(),
                ),
                _ => PipelineError::Fatal {
                    code: flotilla_types::task::StopCode::Problem,
                    message: "model refused key sk-ant-api03-AbCdEf0123456789 with Bearer ftk_secret".into(),
                },
            })
        }
        .boxed()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn errors_stored_on_a_task_and_in_its_events_have_their_secrets_masked() {
    let (_redis, config) = fleet(&[]);
    let q = queue(&config).await;
    let mut registry = Registry::standard();
    registry.register(Pipeline::Scripted, Arc::new(LeakyErrors(Arc::new(AtomicU32::new(0)))));
    let id = q.submitter().submit(&tenant(), wait_spec(1)).await.expect("submit").id;
    let worker = InProcessWorker::start(config, registry);
    let records = wait_all_ended(&q, std::slice::from_ref(&id), Duration::from_secs(20)).await;
    worker.stop().await;
    assert_eq!((records[0].status, records[0].attempts), (TaskStatus::Failed, 2));
    let stored = records[0].error.clone().unwrap_or_default();
    let raw: Vec<String> = q.reader().events_after(&tenant(), &id, 0).await.expect("events");
    let all = format!("{stored}\n{}", raw.join("\n"));
    for secret in ["hunter2", "tok-9f8e7d", "AbCdEf0123456789", "ftk_secret"] {
        assert!(!all.contains(secret), "{secret} leaked:\n{all}");
    }
    assert!(raw.iter().any(|e| e.contains("redis://:***@10.0.0.5:6379")), "the retry event keeps what is not secret:\n{all}");
    assert!(stored.contains("sk-ant-***") && stored.contains("Bearer ***"), "{stored}");
}

/// The pipeline is decided where a task enters the queue (the API fills
/// the configured default): the queue refuses a task that names none, for
/// one task or a whole call, before writing anything, so no worker is ever
/// left to guess one.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_without_a_pipeline_is_refused_and_nothing_is_written() {
    let (_redis, config) = fleet(&[]);
    let q = queue(&config).await;
    let mut unnamed = wait_spec(1);
    unnamed.pipeline = None;
    let refused = q.submitter().submit(&tenant(), unnamed.clone()).await.expect_err("refused");
    assert!(matches!(refused, QueueError::NoPipeline), "{refused:?}");
    let new = |spec| flotilla_queue::queue::NewTask {
        id: flotilla_types::ids::TaskId::generate(),
        tenant: tenant(),
        batch: None,
        spec,
    };
    let refused = q.submitter().create_tasks(vec![new(wait_spec(1)), new(unnamed)]).await.expect_err("refused");
    assert!(matches!(refused, QueueError::NoPipeline), "{refused:?}");
    let filter = flotilla_queue::queue::ListFilter { limit: 10, ..Default::default() };
    let (listed, _) = q.reader().list(&tenant(), &filter).await.expect("list");
    assert!(listed.is_empty(), "nothing was created: {listed:?}");
    let stats = q.reader().stats(&tenant()).await.expect("stats");
    assert!(stats.lanes.iter().all(|l| l.depth == 0), "nothing was queued: {stats:?}");
}
