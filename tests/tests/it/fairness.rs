//! A fleet shared by tenants: the must-show scenarios on one server and on a
//! local three-master cluster, and property tests of the scheduler against
//! a real Redis (random arrivals, weights, limits, claims and
//! acknowledgements).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use flotilla_config::{TenantSettings, TenantsConfig};
use flotilla_queue::keys::Keys;
use flotilla_queue::queue::fair_scripts::TURN_TASKS;
use flotilla_queue::queue::{Delivery, NewTask, Queue, QueueSettings};
use flotilla_queue::redis_conn::Redis;
use flotilla_tests::fair_scenarios;
use flotilla_tests::tasks::{plain_worker, wait_spec};
use flotilla_tests::{test_config, unique_prefix, RedisCluster, RedisServer};
use flotilla_types::ids::{TaskId, TenantId};
use proptest::prelude::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_quiet_tenant_starts_within_a_second_beside_a_noisy_one() {
    fair_scenarios::a_quiet_tenant_starts_at_once_beside_a_noisy_one(RedisServer::start(), 1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_cluster_a_quiet_tenant_starts_within_a_second_beside_a_noisy_one() {
    fair_scenarios::a_quiet_tenant_starts_at_once_beside_a_noisy_one(RedisCluster::start(), 2).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn weights_set_shares_and_a_tenants_high_tasks_go_first() {
    fair_scenarios::weights_set_shares_and_priorities_order_a_tenants_own_tasks(RedisServer::start()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn max_running_holds_fleet_wide_while_a_worker_is_killed() {
    let dir = std::env::temp_dir().join(format!("flotilla-fair-{}", ulid::Ulid::new()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    fair_scenarios::max_running_holds_fleet_wide_across_a_killed_worker(RedisServer::start(), &dir).await;
    std::fs::remove_dir_all(dir).ok();
}

/// One tenant of a generated case: weight, max_running, tasks.
type TenantCase = (u32, Option<u32>, usize);

fn tenant(n: usize) -> TenantId {
    TenantId::parse(&format!("t{n}")).expect("tenant")
}

/// A queue on `redis` under a fresh prefix with these tenants' settings.
async fn queue_for(redis: &RedisServer, tenants: &[TenantCase]) -> Queue {
    let config = test_config(redis, &unique_prefix(), &[]);
    let settings = tenants.iter().enumerate().map(|(n, (weight, max, _))| {
        let mut settings = TenantSettings::weighted(*weight);
        settings.max_running = *max;
        (tenant(n), settings)
    });
    let settings =
        QueueSettings { tenants: Arc::new(TenantsConfig::from_settings(settings)), ..QueueSettings::from_config(&config) };
    let conn = Redis::connect(&config.redis).await.expect("redis");
    Queue::new(conn, Keys::new(config.key_prefix.clone()), settings)
}

async fn submit(q: &Queue, tenant: &TenantId, n: usize) -> Vec<TaskId> {
    let tasks: Vec<NewTask> =
        (0..n).map(|_| NewTask { id: TaskId::generate(), tenant: tenant.clone(), batch: None, spec: wait_spec(1) }).collect();
    let ids = tasks.iter().map(|t| t.id.clone()).collect();
    q.submitter().create_tasks(tasks).await.expect("create");
    ids
}

/// What the model of a case saw: each task claimed once, and per tenant
/// the entries held (claimed and not yet acknowledged).
#[derive(Default)]
struct Seen {
    claimed: HashSet<TaskId>,
    held: HashMap<TenantId, Vec<Delivery>>,
}

impl Seen {
    fn take(&mut self, got: Vec<Delivery>, limits: &HashMap<TenantId, Option<u32>>) -> Result<(), TestCaseError> {
        for delivery in got {
            let id = delivery.task_id.clone().expect("task id");
            prop_assert!(self.claimed.insert(id.clone()), "task {} handed out twice", id);
            let held = self.held.entry(delivery.tenant.clone()).or_default();
            held.push(delivery.clone());
            if let Some(max) = limits[&delivery.tenant] {
                prop_assert!(held.len() <= max as usize, "tenant {} holds {} > max_running {}", delivery.tenant, held.len(), max);
            }
        }
        Ok(())
    }
}

/// Random arrivals, claims and acknowledgements, then a drain: no task is
/// lost or handed out twice, and no tenant ever holds more than its
/// `max_running`; the scheduler's running counts match what is held.
async fn arrivals_claims_and_acks(
    redis: &RedisServer,
    tenants: Vec<TenantCase>,
    steps: Vec<(u8, usize)>,
) -> Result<(), TestCaseError> {
    let q = queue_for(redis, &tenants).await;
    let limits: HashMap<TenantId, Option<u32>> = tenants.iter().enumerate().map(|(n, t)| (tenant(n), t.1)).collect();
    let mut left: Vec<usize> = tenants.iter().map(|t| t.2).collect();
    let mut submitted = HashSet::new();
    let mut seen = Seen::default();
    let shard = Keys::new("x").shard_of(&tenant(0));
    for (action, n) in steps {
        match action % 3 {
            0 => {
                let who = n % tenants.len();
                let k = left[who].min(1 + n % 7);
                left[who] -= k;
                submitted.extend(submit(&q, &tenant(who), k).await);
            }
            1 => seen.take(
                q.runner().claim_turns(shard, &format!("w{}", n % 3), &plain_worker(), 1 + n % 5).await.expect("claim"),
                &limits,
            )?,
            _ => {
                let acks: Vec<_> =
                    seen.held.values_mut().flat_map(|h| h.drain(..h.len().min(1 + n % 3))).map(|d| (d, None)).collect();
                q.runner().ack(&acks).await.expect("ack");
            }
        }
        for (t, held) in &seen.held {
            let stats = q.reader().stats(t).await.expect("stats");
            prop_assert_eq!(stats.tenants[0].running, held.len() as u64, "running count of {}", t);
        }
    }
    for (who, k) in left.iter().enumerate() {
        submitted.extend(submit(&q, &tenant(who), *k).await);
    }
    for _ in 0..10_000 {
        let got = q.runner().claim_turns(shard, "drain", &plain_worker(), 8).await.expect("claim");
        let acks: Vec<_> = seen.held.values_mut().flat_map(|h| h.drain(..)).map(|d| (d, None)).collect();
        q.runner().ack(&acks).await.expect("ack");
        if got.is_empty() && seen.claimed.len() == submitted.len() {
            break;
        }
        seen.take(got, &limits)?;
    }
    prop_assert_eq!(&seen.claimed, &submitted, "every task handed out exactly once");
    Ok(())
}

/// Every tenant backlogged, no limits: over a long run each tenant's share
/// of claims is its weight's share, within a turn's granularity (a turn
/// runs up to `TURN_TASKS` of its tenant's strides past the next tenant).
async fn shares_follow_weights(redis: &RedisServer, weights: Vec<u32>, batch: usize) -> Result<(), TestCaseError> {
    let total_weight: u32 = weights.iter().sum();
    let rounds = 30 * total_weight as usize;
    let tenants: Vec<TenantCase> = weights.iter().map(|w| (*w, None, rounds + 10)).collect();
    let q = queue_for(redis, &tenants).await;
    for (n, case) in tenants.iter().enumerate() {
        submit(&q, &tenant(n), case.2).await;
    }
    let shard = Keys::new("x").shard_of(&tenant(0));
    let mut counts: HashMap<TenantId, usize> = HashMap::new();
    let mut claimed = 0;
    while claimed < rounds {
        let got = q.runner().claim_turns(shard, "w", &plain_worker(), batch.min(rounds - claimed)).await.expect("claim");
        prop_assert!(!got.is_empty(), "backlogged tenants always have a turn");
        claimed += got.len();
        for d in &got {
            *counts.entry(d.tenant.clone()).or_default() += 1;
        }
        q.runner().ack(&got.into_iter().map(|d| (d, None)).collect::<Vec<_>>()).await.expect("ack");
    }
    let heaviest = f64::from(weights.iter().copied().max().unwrap_or(1));
    for (n, weight) in weights.iter().enumerate() {
        let expected = claimed as f64 * f64::from(*weight) / f64::from(total_weight);
        let got = counts.get(&tenant(n)).copied().unwrap_or(0) as f64;
        prop_assert!(
            (got - expected).abs() <= 1.0 + f64::from(TURN_TASKS) * heaviest + batch as f64,
            "tenant {} of weight {} got {} of {}, expected {:.1}",
            n,
            weight,
            got,
            claimed,
            expected
        );
    }
    Ok(())
}

/// A claim serves a lone tenant in one turn, and its virtual time advances
/// by exactly one stride per task started, however the claim splits its
/// turns (a turn order kept in memory must never serve a stale score).
#[tokio::test]
async fn a_tenants_virtual_time_advances_one_stride_per_task_started() {
    let redis = RedisServer::start();
    let q = queue_for(&redis, &[(1, None, 30), (4, None, 30)]).await;
    submit(&q, &tenant(0), 30).await;
    let shard = q.keys().shard_of(&tenant(0));
    let got = q.runner().claim_turns(shard, "w", &plain_worker(), 20).await.expect("claim");
    assert_eq!(got.len(), 20, "a lone tenant's claim takes all it asks for");
    let vt = |t: TenantId| {
        let q = q.clone();
        async move {
            let mut conn = q.redis().shared();
            let vt: f64 = redis::AsyncCommands::hget(&mut conn, q.keys().tenant_state(&t), "vt").await.expect("vt");
            vt
        }
    };
    assert_eq!(vt(tenant(0)).await, 20.0 * 10_000.0, "20 tasks of weight 1");
    submit(&q, &tenant(1), 30).await;
    let mut started = [0_usize; 2];
    for _ in 0..5 {
        for d in q.runner().claim_turns(shard, "w", &plain_worker(), 7).await.expect("claim") {
            started[usize::from(d.tenant == tenant(1))] += 1;
        }
    }
    let expected = |n: usize, stride: f64| n as f64 * stride;
    assert_eq!(vt(tenant(0)).await, expected(20 + started[0], 10_000.0), "{started:?}");
    let joined_at = vt(tenant(1)).await - expected(started[1], 2_500.0);
    assert!((0.0..=200_000.0).contains(&joined_at), "tenant 1 joined at {joined_at}, started {started:?}");
}

/// An idle worker waiting for work wakes when a task is submitted, not at
/// the end of its wait; with nothing submitted it waits the whole time.
#[tokio::test]
async fn an_idle_worker_wakes_when_a_task_is_submitted() {
    let redis = RedisServer::start();
    let q = queue_for(&redis, &[(1, None, 1)]).await;
    let mut idle = q.claimer("w", plain_worker());
    let quiet = std::time::Instant::now();
    idle.wait_for_work(Duration::from_millis(300)).await;
    assert!(quiet.elapsed() >= Duration::from_millis(250), "woke after {:?} with nothing submitted", quiet.elapsed());

    let submitter = q.clone();
    let submit_later = tokio::spawn(async move {
        // The submit lands while the worker already waits: the scenario.
        tokio::time::sleep(Duration::from_millis(100)).await;
        submit(&submitter, &tenant(0), 1).await
    });
    let waiting = std::time::Instant::now();
    idle.wait_for_work(Duration::from_secs(20)).await;
    let woke_after = waiting.elapsed();
    let submitted = submit_later.await.expect("submitter");
    assert!(woke_after < Duration::from_secs(10), "an idle worker slept {woke_after:?} past a submit");
    let claimed = idle.next(4).await.expect("claim");
    let started: Vec<_> = claimed.iter().filter_map(|c| c.delivery.task_id.clone()).collect();
    assert_eq!(started, submitted, "the woken worker claims the new task");
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn scheduler_loses_nothing_starts_nothing_twice_and_keeps_max_running(
        tenants in prop::collection::vec((1_u32..=5, prop::option::of(1_u32..=4), 0_usize..=25), 1..=4),
        steps in prop::collection::vec((any::<u8>(), any::<usize>()), 1..=60),
    ) {
        let redis = RedisServer::start();
        runtime().block_on(arrivals_claims_and_acks(&redis, tenants, steps))?;
    }

    #[test]
    fn scheduler_shares_follow_weights_in_the_long_run(
        weights in prop::collection::vec(1_u32..=5, 1..=4),
        batch in 1_usize..=6,
    ) {
        let redis = RedisServer::start();
        runtime().block_on(shares_follow_weights(&redis, weights, batch))?;
    }
}
