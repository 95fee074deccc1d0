//! Batches: many tasks accepted in one request, then counted, followed and
//! cancelled together.
//!
//! A batch is a hash (`tenant`, `created_at`, `total`) and the list of its
//! task ids, both under the batch's own hash tag. Its tasks are ordinary
//! tasks whose `batch` field names it, so their events carry `batch_id` and
//! are published on the batch channel too.
//!
//! Counts are read, not kept: one `HMGET status finished_at` per task,
//! pipelined a thousand at a time. Counters kept beside the batch would have
//! to change in the same script as each task's status, and a task's hash and
//! its batch live in different cluster slots, so no script may touch both;
//! reading 10 000 small fields takes a few milliseconds and is exact by
//! construction.
//!
//! Retention: a batch stays in the open set until every task has ended; then
//! it is sealed (`finished_at` set, the open entry dropped) and its keys
//! expire after the same retention as its tasks. Reading a batch seals it
//! when it can, and the janitor looks over the open set in small passes.

use std::collections::HashMap;

use redis::AsyncCommands;
use serde::Serialize;
use utoipa::ToSchema;

use super::batch_runs::PlannedRuns;
use super::{scripts, NewTask, Queue};
use super::{Housekeeper, Reader, Submitter};
use crate::error::QueueError;
use flotilla_types::clock;
use flotilla_types::event::{draft, EventKind};
use flotilla_types::ids::{BatchId, TaskId, TenantId};
use flotilla_types::task::{TaskSpec, TaskStatus};

/// How many tasks one round of reads covers.
const READ_CHUNK: usize = 1_000;
/// How many cancel calls are in flight at once.
const CANCEL_CHUNK: usize = 500;
/// How many open batches one janitor pass looks at.
const SEAL_PASS: usize = 50;

/// A batch as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchRecord {
    pub id: BatchId,
    pub tenant: TenantId,
    pub created_at_ms: i64,
    pub total: u64,
    /// When its last task ended, once every task has.
    pub finished_at_ms: Option<i64>,
}

/// A batch's tasks by status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct BatchCounts {
    pub queued: u64,
    pub running: u64,
    pub waiting: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub cancelled: u64,
}

impl BatchCounts {
    fn add(&mut self, status: TaskStatus) {
        let slot = match status {
            TaskStatus::Queued => &mut self.queued,
            TaskStatus::Running => &mut self.running,
            TaskStatus::Waiting => &mut self.waiting,
            TaskStatus::Succeeded => &mut self.succeeded,
            TaskStatus::Failed => &mut self.failed,
            TaskStatus::Cancelled => &mut self.cancelled,
        };
        *slot += 1;
    }

    /// Tasks that have ended.
    pub fn ended(&self) -> u64 {
        self.succeeded + self.failed + self.cancelled
    }

    /// Every task counted.
    pub fn sum(&self) -> u64 {
        self.queued + self.running + self.waiting + self.ended()
    }
}

/// What cancelling a batch did, task by task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct BatchCancel {
    /// Queued tasks, now cancelled.
    pub cancelled: u64,
    /// Running or waiting tasks, which stop within a heartbeat.
    pub cancelling: u64,
    /// Tasks that had already ended (or expired).
    pub already_ended: u64,
}

/// A task's status and, once ended, when.
type TaskState = Option<(TaskStatus, Option<i64>)>;

impl Queue {
    /// Marks a batch whose tasks have all ended: it expires after the retention.
    async fn seal_batch(&self, id: &BatchId, finished_at_ms: i64) -> Result<(), QueueError> {
        let retention = self.retention_ms() as i64;
        let writes = vec![
            redis::Cmd::hset(self.keys.batch(id), "finished_at", finished_at_ms),
            redis::Cmd::pexpire(self.keys.batch(id), retention),
            redis::Cmd::pexpire(self.keys.batch_tasks(id), retention),
            redis::Cmd::pexpire(self.keys.batch_runs(id), retention),
            redis::Cmd::zrem(self.keys.open_batches(), id.as_str()),
        ];
        let _: Vec<redis::Value> = self.redis.query_many(writes).await?;
        Ok(())
    }
}

impl Submitter<'_> {
    /// Accepts a batch: its record first, then its tasks. Returns the record
    /// and the task ids in the order of `specs`.
    /// With `runs`, the batch is an evaluation's: where each task sits in
    /// its run plan is kept beside it, for the worker and the report.
    pub async fn create_batch(
        self,
        tenant: &TenantId,
        specs: Vec<TaskSpec>,
        runs: Option<PlannedRuns>,
    ) -> Result<(BatchRecord, Vec<TaskId>), QueueError> {
        let id = BatchId::generate();
        let now = clock::now_ms();
        let tasks: Vec<NewTask> = specs
            .into_iter()
            .map(|spec| NewTask { id: TaskId::generate(), tenant: tenant.clone(), batch: Some(id.clone()), spec })
            .collect();
        let ids: Vec<TaskId> = tasks.iter().map(|t| t.id.clone()).collect();
        let record = BatchRecord {
            id: id.clone(),
            tenant: tenant.clone(),
            created_at_ms: now,
            total: ids.len() as u64,
            finished_at_ms: None,
        };
        let fields = [("tenant", tenant.to_string()), ("created_at", now.to_string()), ("total", ids.len().to_string())];
        let mut writes = vec![
            redis::Cmd::hset_multiple(self.keys.batch(&id), &fields),
            redis::Cmd::rpush(self.keys.batch_tasks(&id), ids.iter().map(TaskId::as_str).collect::<Vec<_>>()),
            redis::Cmd::zadd(self.keys.open_batches(), id.as_str(), now),
        ];
        if let Some(runs) = runs {
            writes.push(runs.write(&self.keys, &id, &ids)?);
        }
        let _: Vec<redis::Value> = self.redis.query_many(writes).await?;
        if let Err(e) = self.create_tasks(tasks).await {
            // Best effort: no record of a batch whose tasks were not all made.
            let undo = vec![
                redis::Cmd::del(vec![self.keys.batch(&id), self.keys.batch_tasks(&id), self.keys.batch_runs(&id)]),
                redis::Cmd::zrem(self.keys.open_batches(), id.as_str()),
            ];
            let _: Result<Vec<redis::Value>, _> = self.redis.query_many(undo).await;
            return Err(e);
        }
        Ok((record, ids))
    }

    /// Cancels every task of a batch: queued ones at once, running and
    /// waiting ones through their cancel flag.
    pub async fn cancel_batch(self, batch: &BatchRecord) -> Result<BatchCancel, QueueError> {
        let ids = self.reader().batch_task_ids(&batch.id).await?;
        let draft = draft(EventKind::Cancelled { code: "cancelled".into() });
        let now = clock::now_ms();
        let retention = self.retention_ms();
        let mut result = BatchCancel::default();
        for chunk in ids.chunks(CANCEL_CHUNK) {
            let calls: Vec<_> = chunk
                .iter()
                .map(|id| {
                    let mut inv = self.task_invocation(&scripts::CANCEL, id, &draft, now);
                    inv.arg(batch.tenant.as_str()).arg(retention);
                    inv
                })
                .collect();
            let conn = self.redis.shared();
            let sends = calls.iter().map(|inv| {
                let mut conn = conn.clone();
                async move { inv.invoke_async::<String>(&mut conn).await }
            });
            for outcome in futures::future::join_all(sends).await {
                match outcome?.as_str() {
                    "now-cancelled" => result.cancelled += 1,
                    "cancelling" => result.cancelling += 1,
                    _ => result.already_ended += 1,
                }
            }
        }
        if result.cancelled > 0 {
            let mut conn = self.redis.shared();
            let _: i64 = conn.hincr(self.keys.tenant_outcomes(&batch.tenant), "cancelled", result.cancelled).await?;
            let ended = vec![(&batch.tenant, "cancelled"); result.cancelled as usize];
            self.runner().count_outcomes(&ended).await?;
        }
        Ok(result)
    }
}

impl Reader<'_> {
    /// A tenant's batch, or `None` if it does not exist or is another tenant's.
    pub async fn batch(self, tenant: &TenantId, id: &BatchId) -> Result<Option<BatchRecord>, QueueError> {
        let mut conn = self.redis.shared();
        let hash: HashMap<String, String> = conn.hgetall(self.keys.batch(id)).await?;
        Ok(batch_from_hash(id, &hash)?.filter(|b| &b.tenant == tenant))
    }

    /// A batch's task ids, in the order they were given.
    pub async fn batch_task_ids(self, id: &BatchId) -> Result<Vec<TaskId>, QueueError> {
        let mut conn = self.redis.shared();
        let raw: Vec<String> = conn.lrange(self.keys.batch_tasks(id), 0, -1).await?;
        raw.iter().map(|t| TaskId::parse(t).map_err(|_| QueueError::Corrupt(format!("batch {id}: task id {t:?}")))).collect()
    }

    /// Counts a batch's tasks by status, and seals the batch when every task
    /// has ended. Returns the counts and when the batch finished, if it has.
    pub async fn batch_counts(self, batch: &BatchRecord) -> Result<(BatchCounts, Option<i64>), QueueError> {
        let ids = self.batch_task_ids(&batch.id).await?;
        let states = self.task_states(&batch.tenant, &ids).await?;
        let mut counts = BatchCounts::default();
        let mut open = false;
        let mut last_end = None;
        // A task that is gone expired after its retention: it ended long ago.
        for (status, ended_at) in states.iter().flatten() {
            counts.add(*status);
            open |= !status.is_terminal();
            last_end = last_end.max(*ended_at);
        }
        if open || batch.finished_at_ms.is_some() {
            return Ok((counts, batch.finished_at_ms));
        }
        let finished_at = last_end.unwrap_or_else(clock::now_ms);
        self.seal_batch(&batch.id, finished_at).await?;
        Ok((counts, Some(finished_at)))
    }

    /// Each of `tenant`'s tasks' status and end time, from Redis or, for an
    /// archived one, from its `archived` score (`None` for a task that is
    /// gone).
    pub async fn task_states(self, tenant: &TenantId, ids: &[TaskId]) -> Result<Vec<TaskState>, QueueError> {
        let mut states = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(READ_CHUNK) {
            let reads = chunk.iter().map(|id| redis::Cmd::hmget(self.keys.task(id), &["status", "finished_at"])).collect();
            let replies: Vec<(Option<String>, Option<i64>)> = self.redis.query_many(reads).await?;
            let gone: Vec<&TaskId> = chunk.iter().zip(&replies).filter(|(_, r)| r.0.is_none()).map(|(id, _)| id).collect();
            let mut archived = self.archived_states(tenant, &gone).await?.into_iter();
            states.extend(replies.into_iter().map(|(status, ended)| match status {
                Some(status) => Some((TaskStatus::parse(&status)?, ended)),
                None => archived.next().flatten().map(|(status, ended)| (status, Some(ended))),
            }));
        }
        Ok(states)
    }

    /// The stored events of each of `tenant`'s tasks, as JSON text.
    pub async fn events_of(self, tenant: &TenantId, ids: &[TaskId]) -> Result<Vec<Vec<String>>, QueueError> {
        let wanted: Vec<(&TaskId, u64)> = ids.iter().map(|id| (id, 0)).collect();
        self.histories(tenant, &wanted).await
    }
}

impl Housekeeper<'_> {
    /// Looks at the open batches not looked at for longest, sealing those
    /// whose tasks have all ended and putting the rest at the back of the
    /// line. Returns how many were sealed.
    pub async fn seal_finished_batches(self) -> Result<usize, QueueError> {
        let mut conn = self.redis.shared();
        let open: Vec<String> = conn.zrange(self.keys.open_batches(), 0, SEAL_PASS as isize - 1).await?;
        let mut sealed = 0;
        for raw in open {
            let Ok(id) = BatchId::parse(&raw) else {
                let _: i64 = conn.zrem(self.keys.open_batches(), &raw).await?;
                continue;
            };
            let hash: HashMap<String, String> = conn.hgetall(self.keys.batch(&id)).await?;
            let Some(batch) = batch_from_hash(&id, &hash)? else {
                let _: i64 = conn.zrem(self.keys.open_batches(), &raw).await?;
                continue;
            };
            let (_, finished_at) = self.reader().batch_counts(&batch).await?;
            if finished_at.is_some() {
                // Sealed now, or earlier by a reader whose last step failed.
                let _: i64 = conn.zrem(self.keys.open_batches(), &raw).await?;
                sealed += 1;
            } else {
                let _: i64 = conn.zadd(self.keys.open_batches(), &raw, clock::now_ms()).await?;
            }
        }
        Ok(sealed)
    }
}

fn batch_from_hash(id: &BatchId, hash: &HashMap<String, String>) -> Result<Option<BatchRecord>, QueueError> {
    if hash.is_empty() {
        return Ok(None);
    }
    let corrupt = |what: &str| QueueError::Corrupt(format!("batch {id}: {what}"));
    let number = |field: &str| hash.get(field).and_then(|v| v.parse::<i64>().ok());
    Ok(Some(BatchRecord {
        id: id.clone(),
        tenant: TenantId::parse(hash.get("tenant").map_or("", String::as_str)).map_err(|_| corrupt("tenant"))?,
        created_at_ms: number("created_at").ok_or_else(|| corrupt("created_at"))?,
        total: number("total").and_then(|n| u64::try_from(n).ok()).ok_or_else(|| corrupt("total"))?,
        finished_at_ms: number("finished_at"),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_by_status() {
        let mut counts = BatchCounts::default();
        for status in
            [TaskStatus::Queued, TaskStatus::Running, TaskStatus::Succeeded, TaskStatus::Succeeded, TaskStatus::Cancelled]
        {
            counts.add(status);
        }
        assert_eq!((counts.sum(), counts.ended(), counts.succeeded), (5, 3, 2));
    }

    #[test]
    fn a_batch_hash_reads_back() {
        let id = BatchId::generate();
        let hash: HashMap<String, String> = [("tenant", "acme"), ("created_at", "5"), ("total", "3")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let batch = batch_from_hash(&id, &hash).expect("reads").expect("exists");
        assert_eq!((batch.total, batch.created_at_ms, batch.finished_at_ms), (3, 5, None));
        assert!(batch_from_hash(&id, &HashMap::new()).expect("reads").is_none());
    }
}
