//! Dead-worker detection by liveness mark, against a real redis-server: a
//! worker whose mark ran out loses its entries to the next claim at once,
//! long before the lease would give them up, and its attempt is fenced; a
//! worker alive, or one that never marked itself (an older version), keeps
//! its entries until the lease.

use std::time::{Duration, Instant};

use flotilla_queue::queue::{Attempt, Claimer, HeartbeatOutcome, NewTask, Queue, StartOutcome};
use flotilla_tests::desktop::eventually;
use flotilla_tests::tasks::{plain_worker, tenant, wait_spec};
use flotilla_tests::{test_config, unique_prefix, RedisServer};
use flotilla_types::TaskId;

/// The attempts one claim of up to `most` tasks started, with whether each
/// was taken over.
async fn claim_started(claimer: &mut Claimer, most: usize) -> Vec<(Box<Attempt>, bool)> {
    claimer
        .next(most)
        .await
        .expect("claims")
        .into_iter()
        .filter_map(|c| match c.outcome {
            Ok(StartOutcome::Started(attempt)) => Some((attempt, c.delivery.reclaimed)),
            _ => None,
        })
        .collect()
}

async fn create(queue: &Queue) -> TaskId {
    let task = NewTask { id: TaskId::generate(), tenant: tenant(), batch: None, spec: wait_spec(1) };
    let id = task.id.clone();
    queue.submitter().create_tasks(vec![task]).await.expect("created");
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_liveness_ran_out_loses_its_entries_at_once() {
    let redis = RedisServer::start();
    // A 30 s lease; a 100 ms heartbeat makes the liveness mark last 200 ms.
    let config = test_config(&redis, &unique_prefix(), &[("FLOTILLA_LEASE_MS", "30000"), ("FLOTILLA_HEARTBEAT_MS", "100")]);
    let queue = flotilla_tests::tasks::queue(&config).await;
    assert_eq!(queue.settings().liveness, Duration::from_millis(200));

    let marked = create(&queue).await;
    let mut dying = queue.claimer("dying", plain_worker());
    queue.mark_alive("dying").await.expect("marked");
    let (old, _) = claim_started(&mut dying, 1).await.pop().expect("the dying worker starts its task");
    assert_eq!(old.task_id(), &marked);
    let unmarked = create(&queue).await;
    let mut older_version = queue.claimer("older-version", plain_worker());
    let (kept, _) = claim_started(&mut older_version, 1).await.pop().expect("a worker without a mark starts the other");
    assert_eq!(kept.task_id(), &unmarked);

    let mut taker = queue.claimer("taker", plain_worker());
    queue.mark_alive("taker").await.expect("marked");
    assert!(claim_started(&mut taker, 2).await.is_empty(), "a worker alive keeps its task");

    // The dying worker marks itself no more.
    let last_mark = Instant::now();
    let mut taken = Vec::new();
    eventually("the dead worker's task is taken", Duration::from_secs(5), async || {
        taken.append(&mut claim_started(&mut taker, 2).await);
        !taken.is_empty()
    })
    .await;
    let waited = last_mark.elapsed();
    assert_eq!(taken.len(), 1, "only the dead worker's task");
    let (new, reclaimed) = &taken[0];
    assert_eq!(new.task_id(), &marked);
    assert!(*reclaimed, "taken over, not read new");
    assert_eq!(new.number, old.number + 1, "a new attempt");
    assert!(waited < Duration::from_secs(2), "taken within a few liveness periods, not the 30 s lease: {waited:?}");
    assert!(matches!(old.heartbeat().await.expect("heartbeat"), HeartbeatOutcome::Fenced), "the old attempt is fenced");
    assert!(
        matches!(kept.heartbeat().await.expect("heartbeat"), HeartbeatOutcome::Renewed),
        "the unmarked worker keeps its task"
    );
}
