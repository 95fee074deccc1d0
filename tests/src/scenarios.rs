//! Fault scenarios of the fleet, with workers as real processes: a worker
//! killed mid-run, a worker frozen past its lease and then thawed, Redis
//! restarted under load, and a drain on SIGTERM. In every case each accepted
//! task ends exactly once. Each scenario takes the Redis to run against, so
//! the same scenario runs on one server and on a cluster.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::fleet::{test_config, test_env, unique_prefix, WorkerProcess};
use crate::redis_server::RedisUnderTest;
use crate::tasks::{assert_history_whole, events, queue, record, submit_many, wait_all_ended, wait_spec};
use crate::wait::eventually;
use flotilla_types::event::EventKind;
use flotilla_types::task::TaskStatus;

/// Two workers, 300 tasks of 200 ms, one worker SIGKILLed midway.
pub async fn a_killed_workers_tasks_are_reclaimed_and_each_task_ends_once(redis: impl RedisUnderTest) {
    let prefix = unique_prefix();
    let extra = [("FLOTILLA_WORKER_CONCURRENCY", "16"), ("FLOTILLA_LEASE_MS", "2000"), ("FLOTILLA_HEARTBEAT_MS", "300")];
    let env = test_env(&redis, &prefix, &extra);
    let q = queue(&test_config(&redis, &prefix, &extra)).await;
    let ids = submit_many(&q, &wait_spec(200), 300).await;

    let mut doomed = WorkerProcess::spawn(&env, "doomed");
    let survivor = WorkerProcess::spawn(&env, "survivor");
    eventually("a third of the tasks finished", Duration::from_secs(30), || async {
        let stats = q.reader().fleet_stats().await.expect("stats");
        stats.outcomes.get("succeeded").copied().unwrap_or(0) >= 100
    })
    .await;
    // On a loaded machine the doomed worker may start late: kill it only
    // once it is running tasks of its own.
    eventually("the doomed worker runs tasks", Duration::from_secs(30), || async {
        for id in &ids {
            if record(&q, id).await.status == TaskStatus::Running && last_starter(&events(&q, id).await) == Some("doomed".into())
            {
                return true;
            }
        }
        false
    })
    .await;
    doomed.signal("KILL");
    assert!(doomed.wait_exit(5), "SIGKILL ends the worker");

    let records = wait_all_ended(&q, &ids, Duration::from_secs(60)).await;
    let mut by_worker: HashMap<String, usize> = HashMap::new();
    let mut reclaimed = 0;
    for (id, task) in ids.iter().zip(&records) {
        assert_eq!(task.status, TaskStatus::Succeeded, "task {id}");
        let history = events(&q, id).await;
        assert_history_whole(id, &history);
        let starts: Vec<&str> = history
            .iter()
            .filter_map(|e| match &e.kind {
                EventKind::Started { worker, .. } => Some(worker.as_str()),
                _ => None,
            })
            .collect();
        if starts.len() > 1 {
            reclaimed += 1;
            assert_eq!(starts.last(), Some(&"survivor"), "task {id}: only the survivor can finish a reclaimed task");
        }
        *by_worker.entry(starts.last().copied().unwrap_or_default().to_owned()).or_default() += 1;
    }
    assert!(reclaimed > 0, "the killed worker held running tasks that were reclaimed");
    assert!(by_worker.get("doomed").copied().unwrap_or(0) > 0, "both workers did work: {by_worker:?}");
    // A task the killed worker ended but had not acknowledged is
    // acknowledged, and counted, by the survivor's reclaim a lease later (on
    // a cluster the counts live beside the lanes, not beside the tasks).
    let settle_by = Instant::now() + Duration::from_secs(15);
    loop {
        let stats = q.reader().fleet_stats().await.expect("stats");
        if stats.running == 0 && stats.queued == 0 && stats.outcomes.get("succeeded").copied() >= Some(300) {
            break;
        }
        assert!(Instant::now() < settle_by, "every entry acknowledged and every task counted: {stats:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The sleep is what is tested: for a lease and more, nothing is counted
    // again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let stats = q.reader().fleet_stats().await.expect("stats");
    assert_eq!(stats.outcomes.get("succeeded").copied(), Some(300), "counted once each, and no more a lease later");
    drop(survivor);
}

/// The worker that started a task's latest attempt.
fn last_starter(history: &[flotilla_types::event::Event]) -> Option<String> {
    history.iter().rev().find_map(|e| match &e.kind {
        EventKind::Started { worker, .. } => Some(worker.clone()),
        _ => None,
    })
}

/// A worker SIGSTOPped past its lease, its task finished by another, then
/// SIGCONTed.
pub async fn a_frozen_worker_cannot_overwrite_the_attempt_that_replaced_it(redis: impl RedisUnderTest) {
    let prefix = unique_prefix();
    let extra = [("FLOTILLA_WORKER_CONCURRENCY", "1"), ("FLOTILLA_LEASE_MS", "1000"), ("FLOTILLA_HEARTBEAT_MS", "200")];
    let env = test_env(&redis, &prefix, &extra);
    let q = queue(&test_config(&redis, &prefix, &extra)).await;
    let id = submit_many(&q, &wait_spec(2_000), 1).await.remove(0);

    let zombie = WorkerProcess::spawn(&env, "zombie");
    eventually("the first worker started the task", Duration::from_secs(15), || async {
        record(&q, &id).await.status == TaskStatus::Running
    })
    .await;
    zombie.signal("STOP");
    let rescuer = WorkerProcess::spawn(&env, "rescuer");
    let records = wait_all_ended(&q, std::slice::from_ref(&id), Duration::from_secs(20)).await;
    assert_eq!(records[0].status, TaskStatus::Succeeded);
    assert_eq!(records[0].attempts, 2, "the rescuer ran attempt 2");
    let before = events(&q, &id).await;
    let hash_before = record(&q, &id).await;

    zombie.signal("CONT");
    // The zombie's sleep is long over: it wakes, tries to write, and is
    // refused. A refused write leaves nothing to wait for, so the sleep is
    // what is tested: in 1.5 s after waking, the zombie changes nothing.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let after = events(&q, &id).await;
    assert_eq!(after, before, "the stale worker added no event");
    let hash_after = record(&q, &id).await;
    assert_eq!(
        (hash_after.status, hash_after.attempts, hash_after.result.clone()),
        (hash_before.status, hash_before.attempts, hash_before.result.clone())
    );
    assert_history_whole(&id, &after);
    let starts: Vec<(u32, String)> = after
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Started { attempt, worker } => Some((*attempt, worker.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(starts, [(1, "zombie".to_owned()), (2, "rescuer".to_owned())]);
    let completed_after_takeover = after.iter().skip_while(|e| !matches!(&e.kind, EventKind::Started { attempt: 2, .. })).count();
    assert!(completed_after_takeover >= 3, "the final events are the new attempt's: {after:?}");
    drop(rescuer);
}

/// Redis (with AOF) killed and restarted while tasks are queued and running.
pub async fn tasks_survive_a_redis_restart_and_workers_recover_by_themselves(mut redis: impl RedisUnderTest) {
    let prefix = unique_prefix();
    let extra = [("FLOTILLA_WORKER_CONCURRENCY", "8"), ("FLOTILLA_LEASE_MS", "5000"), ("FLOTILLA_HEARTBEAT_MS", "500")];
    let env = test_env(&redis, &prefix, &extra);
    let config = test_config(&redis, &prefix, &extra);
    let q = queue(&config).await;
    let ids = submit_many(&q, &wait_spec(300), 120).await;
    let workers = [WorkerProcess::spawn(&env, "w1"), WorkerProcess::spawn(&env, "w2")];

    eventually("some tasks finished and others are running", Duration::from_secs(20), || async {
        let stats = q.reader().fleet_stats().await.expect("stats");
        stats.outcomes.get("succeeded").copied().unwrap_or(0) >= 10
    })
    .await;
    redis.restart();
    let records = wait_all_ended(&q, &ids, Duration::from_secs(90)).await;
    for (id, task) in ids.iter().zip(&records) {
        assert_eq!(task.status, TaskStatus::Succeeded, "task {id}");
        assert_history_whole(id, &events(&q, id).await);
    }
    // The workers are still claiming: a task submitted now also runs.
    let late = submit_many(&q, &wait_spec(10), 5).await;
    wait_all_ended(&q, &late, Duration::from_secs(20)).await;
    drop(workers);
}

/// SIGTERM: running tasks finish, nothing new is claimed, the worker exits.
pub async fn sigterm_drains_running_tasks_then_exits(redis: impl RedisUnderTest) {
    let prefix = unique_prefix();
    let extra = [("FLOTILLA_WORKER_CONCURRENCY", "4"), ("FLOTILLA_DRAIN_DEADLINE_S", "10")];
    let env = test_env(&redis, &prefix, &extra);
    let q = queue(&test_config(&redis, &prefix, &extra)).await;
    let ids = submit_many(&q, &wait_spec(1_000), 4).await;
    let mut worker = WorkerProcess::spawn(&env, "draining");
    eventually("all four tasks run", Duration::from_secs(15), || async {
        let mut running = 0;
        for id in &ids {
            if record(&q, id).await.status == TaskStatus::Running {
                running += 1;
            }
        }
        running == 4
    })
    .await;
    let extra_ids = submit_many(&q, &wait_spec(10), 3).await;
    worker.signal("TERM");
    assert!(worker.wait_exit(15), "the worker exits after draining");
    for id in &ids {
        assert_eq!(record(&q, id).await.status, TaskStatus::Succeeded, "running tasks finished before exit");
    }
    for id in &extra_ids {
        assert_eq!(record(&q, id).await.status, TaskStatus::Queued, "a stopping worker claims nothing new");
    }
}
