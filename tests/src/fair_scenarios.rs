//! Scenarios of a fleet shared by tenants, with workers as real processes:
//! a noisy neighbour does not delay a quiet tenant, weights set shares,
//! priorities order a tenant's own tasks, and `max_running` holds
//! fleet-wide, also across a killed worker. Each takes the Redis to run
//! against, so the same scenario runs on one server and on a cluster.

use std::time::{Duration, Instant};

use flotilla_queue::queue::{NewTask, Queue, TaskRecord};
use flotilla_types::clock;
use flotilla_types::ids::{TaskId, TenantId};
use flotilla_types::task::{Priority, TaskSpec, TaskStatus};

use crate::fleet::{api_key, test_config, test_env, unique_prefix, FileFleet, WorkerProcess};
use crate::redis_server::RedisUnderTest;
use crate::tasks::{assert_history_whole, events, queue, wait_all_ended, wait_spec};
use crate::wait::eventually;

fn tenant(name: &str) -> TenantId {
    TenantId::parse(name).expect("tenant")
}

/// Queues `n` tasks of `tenant` with this spec in one batch of writes.
async fn submit_batch(q: &Queue, tenant: &TenantId, spec: &TaskSpec, n: usize) -> Vec<TaskId> {
    let tasks: Vec<NewTask> =
        (0..n).map(|_| NewTask { id: TaskId::generate(), tenant: tenant.clone(), batch: None, spec: spec.clone() }).collect();
    let ids = tasks.iter().map(|t| t.id.clone()).collect();
    q.submitter().create_tasks(tasks).await.expect("create tasks");
    ids
}

/// Waits until every task of `tenant` with these ids has ended.
async fn wait_ended(q: &Queue, tenant: &TenantId, ids: &[TaskId], timeout: Duration) -> Vec<TaskRecord> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut records = Vec::with_capacity(ids.len());
        for id in ids {
            records.push(q.reader().get(tenant, id).await.expect("get").unwrap_or_else(|| panic!("task {id} vanished")));
        }
        if records.iter().all(|r| r.status.is_terminal()) {
            return records;
        }
        assert!(Instant::now() < deadline, "tasks did not all end in time");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn ms(text: Option<&String>) -> i64 {
    text.and_then(|t| clock::parse_rfc3339(t)).expect("timestamp")
}

/// One worker of 4 slots per worker given, tasks of 200 ms: tenant A
/// queues 2 000, then tenant B 10; every B task starts within a few rounds
/// of the fleet's slots (counted in A's tasks started meanwhile, not in
/// time), never behind A's backlog.
pub async fn a_quiet_tenant_starts_at_once_beside_a_noisy_one(redis: impl RedisUnderTest, workers: usize) {
    let prefix = unique_prefix();
    let extra = [("FLOTILLA_WORKER_CONCURRENCY", "4")];
    let slots = 4 * workers;
    let env = test_env(&redis, &prefix, &extra);
    let q = queue(&test_config(&redis, &prefix, &extra)).await;
    let fleet: Vec<WorkerProcess> = (0..workers).map(|n| WorkerProcess::spawn(&env, &format!("w{n}"))).collect();
    let noisy = submit_batch(&q, &tenant("acme"), &wait_spec(200), 2_000).await;
    eventually("the fleet works through the noisy backlog", Duration::from_secs(30), async || {
        let stats = q.reader().fleet_stats().await.expect("stats");
        stats.outcomes.get("succeeded").copied().unwrap_or(0) >= 2 * slots as u64
    })
    .await;
    let quiet = submit_batch(&q, &tenant("globex"), &wait_spec(200), 10).await;
    let records = wait_ended(&q, &tenant("globex"), &quiet, Duration::from_secs(30)).await;
    let mut noisy_starts = Vec::new();
    for id in &noisy {
        let task = crate::tasks::record(&q, id).await;
        if let Some(started) = task.started_at.as_ref() {
            noisy_starts.push(ms(Some(started)));
        }
    }
    // Five rounds of the fleet's slots: what 1 s of 200 ms tasks is.
    let rounds = 5 * slots;
    for task in &records {
        assert_eq!(task.status, TaskStatus::Succeeded);
        let (queued, started) = (ms(Some(&task.created_at)), ms(task.started_at.as_ref()));
        let overtaken = noisy_starts.iter().filter(|&&at| at > queued && at < started).count();
        assert!(overtaken <= rounds, "task {} of the quiet tenant waited while {overtaken} noisy tasks started", task.id);
    }
    let noisy_done = crate::tasks::record(&q, &noisy[noisy.len() - 1]).await;
    assert_eq!(
        noisy_done.status,
        TaskStatus::Queued,
        "the noisy tenant's backlog is still there: the quiet one did not wait for it"
    );
    drop(fleet);
}

/// Weights 3:1 and both tenants backlogged: over the first 400 completions
/// A:B is 3:1 within 10 %. A floods `high` on top of `normal`: A's `high`
/// tasks start before its `normal` ones (but for claims in flight at once),
/// and B still gets its share.
pub async fn weights_set_shares_and_priorities_order_a_tenants_own_tasks(redis: impl RedisUnderTest) {
    let prefix = unique_prefix();
    let extra = [("FLOTILLA_WORKER_CONCURRENCY", "8"), ("FLOTILLA_TENANT_WEIGHTS", "acme=3,globex=1")];
    let env = test_env(&redis, &prefix, &extra);
    let q = queue(&test_config(&redis, &prefix, &extra)).await;
    let mut high = wait_spec(20);
    high.priority = Some(Priority::High);
    let a_normal = submit_batch(&q, &tenant("acme"), &wait_spec(20), 300).await;
    let a_high = submit_batch(&q, &tenant("acme"), &high, 300).await;
    let b_normal = submit_batch(&q, &tenant("globex"), &wait_spec(20), 300).await;
    let fleet = [WorkerProcess::spawn(&env, "w0"), WorkerProcess::spawn(&env, "w1")];
    let a_all: Vec<TaskId> = a_normal.iter().chain(&a_high).cloned().collect();
    let mut records = wait_ended(&q, &tenant("acme"), &a_all, Duration::from_secs(120)).await;
    records.extend(wait_ended(&q, &tenant("globex"), &b_normal, Duration::from_secs(60)).await);
    assert!(records.iter().all(|r| r.status == TaskStatus::Succeeded));
    let mut by_end: Vec<&TaskRecord> = records.iter().collect();
    by_end.sort_by_key(|r| ms(r.finished_at.as_ref()));
    let first: Vec<&TaskRecord> = by_end.into_iter().take(400).collect();
    let a = first.iter().filter(|r| r.tenant.as_str() == "acme").count() as f64;
    let b = first.iter().filter(|r| r.tenant.as_str() == "globex").count() as f64;
    let ratio = a / b.max(1.0);
    assert!((2.7..=3.3).contains(&ratio), "A:B over 400 completions is {a}:{b} = {ratio:.2}, not 3:1 within 10 %");
    let started = |ids: &[TaskId]| -> Vec<i64> {
        records.iter().filter(|r| ids.contains(&r.id)).map(|r| ms(r.started_at.as_ref())).collect::<Vec<_>>()
    };
    // Start times are stamped by each worker's clock as it sends its claim,
    // so two workers' claims in flight at once may cross: at most the slots
    // of the fleet (2 workers × 8) A normal tasks start before A's last high
    // one. A scheduler that ignored priority would start about half of them
    // before it.
    let last_high = started(&a_high).into_iter().max().expect("high tasks");
    let normal_before_last_high = started(&a_normal).into_iter().filter(|s| *s < last_high).count();
    assert!(
        normal_before_last_high <= 16,
        "A high tasks go first: {normal_before_last_high} A normal tasks started before the last A high one"
    );
    drop(fleet);
}

/// How many of the caller's tasks the API lists as running.
async fn running_through_the_api(client: &reqwest::Client, url: &str) -> usize {
    let page: serde_json::Value =
        client.get(url).bearer_auth(api_key()).send().await.expect("list running").json().await.expect("list json");
    page["tasks"].as_array().map_or(0, Vec::len)
}

/// `max_running = 3`, two workers × 4 slots, 20 tasks of 500 ms, sampled
/// through the API at ≥ 20 Hz: never more than 3 running, also while a
/// worker holding 2 of them is SIGKILLed; all 20 succeed, each once.
pub async fn max_running_holds_fleet_wide_across_a_killed_worker(redis: impl RedisUnderTest, config_dir: &std::path::Path) {
    let extra = [("FLOTILLA_WORKER_CONCURRENCY", "4"), ("FLOTILLA_LEASE_MS", "2000"), ("FLOTILLA_HEARTBEAT_MS", "300")];
    let fleet = FileFleet::start(&redis, &unique_prefix(), config_dir, "[tenants.acme]\nmax_running = 3\n", &extra).await;
    let FileFleet { env, queue: q, client, running_url: url, .. } = &fleet;
    let ids = submit_batch(q, &tenant("acme"), &wait_spec(500), 20).await;
    // The survivor starts once the doomed worker holds two tasks: started
    // together, the survivor may take every turn while the doomed one
    // connects, and nothing would be left to kill it holding.
    let mut doomed = WorkerProcess::spawn(env, "doomed");
    let mut survivor = None;
    let mut most = 0;
    let mut samples = 0;
    let mut killed = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let tick = Instant::now();
        let running = running_through_the_api(client, url).await;
        most = most.max(running);
        samples += 1;
        if survivor.is_none() && doomed_holds(q, &ids, 2).await {
            survivor = Some(WorkerProcess::spawn(env, "survivor"));
        } else if survivor.is_some() && !killed && doomed_holds(q, &ids, 2).await {
            doomed.signal("KILL");
            assert!(doomed.wait_exit(5), "SIGKILL ends the worker");
            killed = true;
        }
        if all_succeeded(q, &ids).await {
            break;
        }
        assert!(Instant::now() < deadline, "the tasks did not all end");
        tokio::time::sleep(Duration::from_millis(45).saturating_sub(tick.elapsed())).await;
    }
    assert!(killed, "the doomed worker held two of the tasks beside a running survivor at some point");
    assert!(samples >= 20, "sampled {samples} times");
    assert!(most <= 3, "{most} tasks of the tenant ran at once");
    assert_eq!(most, 3, "the limit was reached, not just respected");
    let records = wait_all_ended(q, &ids, Duration::from_secs(5)).await;
    for (id, task) in ids.iter().zip(&records) {
        assert_eq!(task.status, TaskStatus::Succeeded, "task {id}");
        let history = events(q, id).await;
        assert_history_whole(id, &history);
        assert_eq!(history.iter().filter(|e| e.kind.is_terminal()).count(), 1, "task {id} ended once");
    }
    let stats = q.reader().stats(&tenant("acme")).await.expect("stats");
    assert_eq!((stats.tenants[0].running, stats.tenants[0].queued), (0, 0), "every slot came back once: {stats:?}");
    drop(survivor);
}

/// Whether worker `doomed` runs at least `n` of these tasks now.
async fn doomed_holds(q: &Queue, ids: &[TaskId], n: usize) -> bool {
    let mut held = 0;
    for id in ids {
        let task = q.reader().get(&tenant("acme"), id).await.expect("get").expect("task");
        if task.status == TaskStatus::Running
            && events(q, id).await.iter().rev().find_map(started_by).as_deref() == Some("doomed")
        {
            held += 1;
        }
    }
    held >= n
}

fn started_by(event: &flotilla_types::event::Event) -> Option<String> {
    match &event.kind {
        flotilla_types::event::EventKind::Started { worker, .. } => Some(worker.clone()),
        _ => None,
    }
}

async fn all_succeeded(q: &Queue, ids: &[TaskId]) -> bool {
    for id in ids {
        if q.reader().get(&tenant("acme"), id).await.expect("get").is_none_or(|t| t.status != TaskStatus::Succeeded) {
            return false;
        }
    }
    true
}
