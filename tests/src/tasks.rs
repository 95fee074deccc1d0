//! Helpers that submit tasks through the real queue and read back what users
//! would: records, stored events, and the checks every "no task lost, none
//! finished twice" test makes.

use std::time::{Duration, Instant};

use flotilla_config::Config;
use flotilla_queue::queue::{Queue, TaskRecord};
use flotilla_types::event::Event;
use flotilla_types::ids::{TaskId, TenantId};
use flotilla_types::route::Capabilities;
use flotilla_types::task::{Pipeline, TaskSpec};

/// A worker with no sandbox, no labels and the standard pipelines: it runs
/// [`wait_spec`] tasks.
pub fn plain_worker() -> Capabilities {
    Capabilities { pipelines: [Pipeline::Scripted, Pipeline::ClaudeCode].into(), ..Capabilities::default() }
}

pub fn tenant() -> TenantId {
    TenantId::parse("acme").expect("tenant")
}

/// A scripted task that waits `ms` milliseconds.
pub fn wait_spec(ms: u64) -> TaskSpec {
    TaskSpec::from_json(
        format!(r#"{{"prompt": "wait {ms} ms", "pipeline": "scripted", "actions": [{{"type": "wait", "ms": {ms}}}]}}"#)
            .as_bytes(),
    )
    .expect("valid spec")
}

/// The queue of a test fleet, as the API would use it.
pub async fn queue(config: &Config) -> Queue {
    Queue::connect(config).await.expect("queue connects")
}

/// Submits `n` tasks with this spec and returns their ids in order.
pub async fn submit_many(queue: &Queue, spec: &TaskSpec, n: usize) -> Vec<TaskId> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        ids.push(queue.submitter().submit(&tenant(), spec.clone()).await.expect("submit").id);
    }
    ids
}

/// The stored events of a task, parsed.
pub async fn events(queue: &Queue, id: &TaskId) -> Vec<Event> {
    queue
        .reader()
        .events_after(&tenant(), id, 0)
        .await
        .expect("events")
        .iter()
        .map(|e| serde_json::from_str(e).unwrap_or_else(|err| panic!("event {e} does not parse: {err}")))
        .collect()
}

pub async fn record(queue: &Queue, id: &TaskId) -> TaskRecord {
    queue.reader().get(&tenant(), id).await.expect("get").expect("task exists")
}

/// Waits until every task has ended, or panics after `timeout` naming how
/// many had not.
pub async fn wait_all_ended(queue: &Queue, ids: &[TaskId], timeout: Duration) -> Vec<TaskRecord> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut records = Vec::with_capacity(ids.len());
        let mut open = 0;
        for id in ids {
            match queue.reader().get(&tenant(), id).await {
                Ok(Some(r)) => {
                    if !r.status.is_terminal() {
                        open += 1;
                    }
                    records.push(r);
                }
                Ok(None) => panic!("task {id} vanished"),
                Err(_) => open += 1,
            }
        }
        if open == 0 {
            return records;
        }
        assert!(Instant::now() < deadline, "{open} of {} tasks had not ended after {timeout:?}", ids.len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Asserts a task's history is whole: seq runs 1..=n with no gap, exactly
/// one terminal event, and it is the last.
pub fn assert_history_whole(id: &TaskId, events: &[Event]) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1, "task {id}: seq gap at position {i}: {events:?}");
        assert_eq!(&e.task_id, id);
    }
    let terminals = events.iter().filter(|e| e.kind.is_terminal()).count();
    assert_eq!(terminals, 1, "task {id}: {terminals} terminal events: {events:?}");
    assert!(events.last().is_some_and(|e| e.kind.is_terminal()), "task {id}: terminal event is not last");
}
