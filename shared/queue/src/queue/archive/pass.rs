//! The archive pass: housekeeping that moves each tenant's finished tasks
//! and old feed entries from Redis to the object store once they are past
//! the hot window, and deletes them from the store after the retention.
//!
//! A tenant's feed holds every event in commit order, terminal events
//! included, so the pass finds the tasks to move in the part of the feed
//! older than the hot window (and already read by every consumer group,
//! the webhook dispatcher's): each task whose terminal event lies there
//! ended before the window. For each it writes the task's object, then one
//! script moves it (adds it to the `archived` set and deletes its hash,
//! only if its `seq` is still the one written); then it writes the feed
//! segment and one script advances the feed's archived mark and trims the
//! stream to it. Killed anywhere, the next pass reads the same entries
//! again and repeats only what did not happen.

use std::collections::HashMap;

use futures::StreamExt;
use redis::streams::{StreamInfoGroupsReply, StreamPendingReply, StreamRangeReply};
use redis::Script;
use std::sync::LazyLock;

use super::{archived_score, store_failed, ArchivedTask};
use crate::error::QueueError;
use crate::queue::feed::events_of;
use crate::queue::Housekeeper;
use crate::queue::{FeedEntry, FeedId, Queue};
use crate::redis_lua;
use flotilla_types::ids::{TaskId, TenantId};
use flotilla_types::task::TaskStatus;

/// Most feed entries one segment holds.
const SEGMENT_MAX: usize = 5_000;
/// A tenant's old entries wait for this many before a segment is written,
/// unless the oldest is past twice the hot window.
const SEGMENT_MIN: usize = 1_000;
/// Segments one tenant writes in one pass at most.
const SEGMENTS_PER_PASS: usize = 40;
/// Tasks moved at once.
const TASKS_AT_ONCE: usize = 32;
/// How long one pass holds the turn (a killed pass's turn lapses).
const TURN_MS: u64 = 120_000;
/// Archived tasks deleted per tenant and round after the retention.
const EXPIRE_BATCH: isize = 500;

/// What a pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArchivePass {
    /// Tasks moved to the store.
    pub tasks: u64,
    /// Feed entries moved to the store.
    pub entries: u64,
    /// Feed segments written.
    pub segments: u64,
}

/// Moves one task out of Redis once its object is written: `KEYS[1]` the
/// task, `KEYS[2]` the tenant's `archived` set; `ARGV[1]` the `seq` the
/// object holds, `ARGV[2]` its score, `ARGV[3]` the task id. Returns 1
/// when moved, 0 when the task changed since (it stays).
pub(crate) static MOVE_TASK: LazyLock<Script> = LazyLock::new(|| redis_lua::script(&[include_str!("lua/move_task.lua")], &[]));

/// Advances a feed's archived mark (`KEYS[1]`) to position `ARGV[1]`-`ARGV[2]`
/// if it is further, and trims the stream (`KEYS[2]`) to what lies after
/// the mark. Returns how many entries left the stream.
pub(crate) static MARK_FEED: LazyLock<Script> = LazyLock::new(|| redis_lua::script(&[include_str!("lua/mark_feed.lua")], &[]));

/// Gives the turn back if it is still this pass's.
pub(crate) static END_TURN: LazyLock<Script> = LazyLock::new(|| redis_lua::script(&[include_str!("lua/end_turn.lua")], &[]));

impl Queue {
    async fn archive_every_tenant(&self) -> Result<ArchivePass, QueueError> {
        let mut conn = self.redis.shared();
        let tenants: Vec<String> = redis::cmd("SMEMBERS").arg(self.keys.tenants()).query_async(&mut conn).await?;
        let mut total = ArchivePass::default();
        for tenant in tenants.iter().filter_map(|t| TenantId::parse(t).ok()) {
            for _ in 0..SEGMENTS_PER_PASS {
                let (tasks, entries) = self.archive_segment(&tenant).await?;
                total.tasks += tasks;
                total.entries += entries as u64;
                total.segments += u64::from(entries > 0);
                if entries < SEGMENT_MAX {
                    break;
                }
            }
        }
        Ok(total)
    }

    /// Moves the oldest segment of `tenant`'s feed, and the tasks that
    /// ended in it, if it is past the hot window. Returns the tasks moved
    /// and the entries.
    async fn archive_segment(&self, tenant: &TenantId) -> Result<(u64, usize), QueueError> {
        let Some(archive) = &self.archive else { return Ok((0, 0)) };
        let now = self.now_ms().max(0) as u64;
        let hot_ms = archive.hot.as_millis() as u64;
        let bound = self.feed_read_by_all(tenant, FeedId::at_ms(now.saturating_sub(hot_ms))).await?;
        let mut conn = self.redis.shared();
        let reply: StreamRangeReply = redis::cmd("XRANGE")
            .arg(self.keys.tenant_feed(tenant))
            .arg("-")
            .arg(format!("({bound}"))
            .arg("COUNT")
            .arg(SEGMENT_MAX)
            .query_async(&mut conn)
            .await?;
        let entries: Vec<FeedEntry> = events_of(reply).collect();
        let Some(first) = entries.first() else { return Ok((0, 0)) };
        let oldest_waited = first.id.ms < now.saturating_sub(2 * hot_ms);
        if entries.len() < SEGMENT_MIN && !oldest_waited {
            return Ok((0, 0));
        }
        let ended = ended_tasks(&entries);
        let moves: Vec<_> = ended.iter().map(|id| self.archive_task(tenant, id)).collect();
        let moved: Vec<Result<bool, QueueError>> = futures::stream::iter(moves).buffer_unordered(TASKS_AT_ONCE).collect().await;
        let mut tasks = 0;
        for one in moved {
            tasks += u64::from(one?);
        }
        self.write_feed_segment(tenant, &entries).await?;
        let last = entries.last().map_or(FeedId::START, |e| e.id);
        let _: u64 = MARK_FEED
            .key(self.keys.feed_archived(tenant))
            .key(self.keys.tenant_feed(tenant))
            .arg(last.ms)
            .arg(last.n)
            .invoke_async(&mut conn)
            .await?;
        Ok((tasks, entries.len()))
    }

    /// The position before which every consumer group of `tenant`'s feed
    /// (the webhook dispatcher's) has read and acknowledged everything,
    /// and at most `bound`: the entries the pass may move.
    async fn feed_read_by_all(&self, tenant: &TenantId, bound: FeedId) -> Result<FeedId, QueueError> {
        let feed = self.keys.tenant_feed(tenant);
        let mut conn = self.redis.shared();
        let exists: bool = redis::cmd("EXISTS").arg(&feed).query_async(&mut conn).await?;
        if !exists {
            return Ok(bound);
        }
        let groups: StreamInfoGroupsReply = redis::cmd("XINFO").arg("GROUPS").arg(&feed).query_async(&mut conn).await?;
        let mut bound = bound;
        for group in groups.groups {
            let delivered: FeedId = group.last_delivered_id.parse().unwrap_or(FeedId::START);
            bound = bound.min(FeedId::entry(delivered.ms, delivered.n + 1));
            if group.pending > 0 {
                let pending: StreamPendingReply =
                    redis::cmd("XPENDING").arg(&feed).arg(&group.name).query_async(&mut conn).await?;
                if let StreamPendingReply::Data(data) = pending {
                    bound = bound.min(data.start_id.parse().unwrap_or(FeedId::START));
                }
            }
        }
        Ok(bound)
    }

    /// Writes one ended task's object and moves it out of Redis. Returns
    /// whether it moved: a task gone already, not ended any more, another
    /// tenant's or dead-lettered (kept in Redis to be revived) stays.
    async fn archive_task(&self, tenant: &TenantId, id: &TaskId) -> Result<bool, QueueError> {
        let Some(archive) = &self.archive else { return Ok(false) };
        let mut conn = self.redis.shared();
        let key = self.keys.task(id);
        let fields: HashMap<String, String> = redis::cmd("HGETALL").arg(&key).query_async(&mut conn).await?;
        let status = fields.get("status").and_then(|s| TaskStatus::parse(s));
        let finished_at = fields.get("finished_at").and_then(|f| f.parse::<i64>().ok());
        let (Some(status), Some(finished_at), Some(seq)) = (status, finished_at, fields.get("seq").cloned()) else {
            return Ok(false);
        };
        let Some(score) = archived_score(finished_at, status) else { return Ok(false) };
        if fields.get("tenant").map(String::as_str) != Some(tenant.as_str()) {
            return Ok(false);
        }
        let dead: Option<f64> = redis::cmd("ZSCORE").arg(self.keys.dead(tenant)).arg(id.as_str()).query_async(&mut conn).await?;
        if dead.is_some() {
            return Ok(false);
        }
        let body = serde_json::to_vec(&ArchivedTask { v: 1, fields }).map_err(|e| QueueError::Corrupt(e.to_string()))?;
        archive.store.put_json(&archive.store.layout().archived_task(tenant, id), body).await.map_err(store_failed)?;
        let moved: i64 = MOVE_TASK
            .key(key)
            .key(self.keys.archived(tenant))
            .arg(seq)
            .arg(score)
            .arg(id.as_str())
            .invoke_async(&mut conn)
            .await?;
        Ok(moved == 1)
    }
}

impl Housekeeper<'_> {
    /// Moves every tenant's tasks that ended before the hot window, and its
    /// feed entries older than it, to the object store. Nothing to do
    /// without a store or on a cluster, or while another worker's pass
    /// runs.
    pub async fn archive_finished(self) -> Result<ArchivePass, QueueError> {
        if self.archive.is_none() || self.redis.is_cluster() {
            return Ok(ArchivePass::default());
        }
        let mut conn = self.redis.shared();
        let token = TaskId::generate().as_str().to_owned();
        let turn: Option<String> = redis::cmd("SET")
            .arg(self.keys.archiving())
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(TURN_MS)
            .query_async(&mut conn)
            .await?;
        if turn.is_none() {
            return Ok(ArchivePass::default());
        }
        let done = self.archive_every_tenant().await;
        let _: i64 = END_TURN.key(self.keys.archiving()).arg(&token).invoke_async(&mut conn).await?;
        done
    }

    /// Deletes from the store, and then from the `archived` sets, the
    /// archived tasks whose retention has passed since they ended, and
    /// the feed segments older than the retention. Returns the tasks
    /// deleted.
    pub async fn expire_archive(self) -> Result<u64, QueueError> {
        let Some(archive) = &self.archive else { return Ok(0) };
        let mut conn = self.redis.shared();
        let tenants: Vec<String> = redis::cmd("SMEMBERS").arg(self.keys.tenants()).query_async(&mut conn).await?;
        let cutoff = self.now_ms() - self.retention_ms() as i64;
        let mut deleted = 0;
        for tenant in tenants.iter().filter_map(|t| TenantId::parse(t).ok()) {
            let index = self.keys.archived(&tenant);
            loop {
                let ids: Vec<String> = redis::cmd("ZRANGE")
                    .arg(&index)
                    .arg("-inf")
                    .arg(cutoff * 4 + 3)
                    .arg("BYSCORE")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(EXPIRE_BATCH)
                    .query_async(&mut conn)
                    .await?;
                let tasks: Vec<TaskId> = ids.iter().filter_map(|i| TaskId::parse(i).ok()).collect();
                let objects: Vec<String> = tasks.iter().map(|id| archive.store.layout().archived_task(&tenant, id)).collect();
                let deletes: Vec<_> = objects
                    .into_iter()
                    .map(|key| {
                        let store = archive.store.clone();
                        async move { store.delete(&key).await }
                    })
                    .collect();
                let done: Vec<Result<(), _>> = futures::stream::iter(deletes).buffer_unordered(TASKS_AT_ONCE).collect().await;
                done.into_iter().collect::<Result<Vec<()>, _>>().map_err(store_failed)?;
                if !ids.is_empty() {
                    let _: i64 = redis::cmd("ZREM").arg(&index).arg(&ids).query_async(&mut conn).await?;
                }
                deleted += ids.len() as u64;
                if ids.len() < EXPIRE_BATCH as usize {
                    break;
                }
            }
            self.expire_feed_segments(&tenant, FeedId::at_ms(cutoff.max(0) as u64)).await?;
        }
        Ok(deleted)
    }
}

/// The tasks whose terminal event is among `entries`, each once, in order.
fn ended_tasks(entries: &[FeedEntry]) -> Vec<TaskId> {
    #[derive(serde::Deserialize)]
    struct Peek {
        task_id: String,
        #[serde(rename = "type")]
        kind: String,
    }
    let mut seen = std::collections::HashSet::new();
    entries
        .iter()
        .filter_map(|e| serde_json::from_str::<Peek>(&e.event).ok())
        .filter(|p| matches!(p.kind.as_str(), "succeeded" | "failed" | "cancelled"))
        .filter_map(|p| TaskId::parse(&p.task_id).ok())
        .filter(|id| seen.insert(id.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_terminal_events_name_tasks_to_move_and_each_once() {
        let id = TaskId::generate();
        let other = TaskId::generate();
        let entry = |n: u64, task: &TaskId, kind: &str| FeedEntry {
            id: FeedId::entry(1, n),
            event: format!(r#"{{"task_id":"{task}","seq":{n},"type":"{kind}"}}"#),
        };
        let entries = [entry(1, &id, "queued"), entry(2, &id, "failed"), entry(3, &other, "started"), entry(4, &id, "succeeded")];
        assert_eq!(ended_tasks(&entries), vec![id]);
    }
}
