//! Queue figures for operators: `GET /v1/queues` and the metrics page.

use std::collections::HashMap;

use redis::AsyncCommands;
use serde::Serialize;
use utoipa::ToSchema;

use super::Queue;
use crate::clock;
use crate::error::QueueError;
use crate::ids::TenantId;
use crate::keys::GROUP;
use crate::task::Priority;

/// One lane's figures.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LaneStats {
    pub lane: Priority,
    /// Entries not yet handed to any worker.
    pub depth: u64,
    /// Entries handed to a worker and not yet acknowledged.
    pub pending: u64,
    /// Tasks waiting for a retry backoff or their `not_before`.
    pub delayed: u64,
    /// Age in ms of the oldest entry still in the lane.
    pub oldest_age_ms: u64,
    pub consumers: u64,
}

/// The queue's figures.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct QueueStats {
    pub lanes: Vec<LaneStats>,
    /// The caller's dead-lettered tasks.
    pub dead: u64,
    /// Finished tasks by outcome, fleet-wide, since the queue was created.
    pub outcomes: HashMap<String, u64>,
}

impl Queue {
    /// Figures for every lane, and `tenant`'s dead letters.
    pub async fn stats(&self, tenant: Option<&TenantId>) -> Result<QueueStats, QueueError> {
        let mut lanes = Vec::new();
        for lane in Priority::ALL {
            lanes.push(self.lane_stats(lane).await?);
        }
        let mut conn = self.redis.shared();
        let dead: u64 = match tenant {
            Some(t) => conn.zcard(self.keys.dead(t)).await?,
            None => 0,
        };
        let outcomes: HashMap<String, u64> = conn.hgetall(self.keys.outcomes()).await?;
        Ok(QueueStats { lanes, dead, outcomes })
    }

    async fn lane_stats(&self, lane: Priority) -> Result<LaneStats, QueueError> {
        let mut conn = self.redis.shared();
        let key = self.keys.lane(lane);
        let groups: Vec<HashMap<String, redis::Value>> =
            redis::cmd("XINFO").arg("GROUPS").arg(&key).query_async(&mut conn).await?;
        let group = groups.iter().find(|g| g.get("name").and_then(as_text).as_deref() == Some(GROUP));
        let number = |field: &str| group.and_then(|g| g.get(field)).and_then(as_number);
        let len: u64 = conn.xlen(&key).await?;
        let pending = number("pending").unwrap_or(0);
        let depth = number("lag").unwrap_or_else(|| len.saturating_sub(pending));
        let oldest_age_ms = self.oldest_open_entry_ms(&key, group).await?.map_or(0, |ts| (clock::now_ms() - ts).max(0) as u64);
        let delayed: u64 = conn.zcard(self.keys.due(lane)).await?;
        Ok(LaneStats { lane, depth, pending, delayed, oldest_age_ms, consumers: number("consumers").unwrap_or(0) })
    }
}

impl Queue {
    /// When the oldest entry still to finish was added: the oldest pending
    /// one or the first not yet delivered, whichever is older. Acknowledged
    /// entries waiting to be trimmed do not count.
    async fn oldest_open_entry_ms(
        &self,
        key: &str,
        group: Option<&HashMap<String, redis::Value>>,
    ) -> Result<Option<i64>, QueueError> {
        let mut conn = self.redis.shared();
        let summary: redis::streams::StreamPendingReply = match conn.xpending(key, GROUP).await {
            Ok(reply) => reply,
            Err(e) if e.code() == Some("NOGROUP") => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let oldest_pending = match summary {
            redis::streams::StreamPendingReply::Data(data) => entry_ms(&data.start_id),
            _ => None,
        };
        let last_delivered = group.and_then(|g| g.get("last-delivered-id")).and_then(as_text).unwrap_or_else(|| "0-0".into());
        let next: redis::streams::StreamRangeReply = conn.xrange_count(key, format!("({last_delivered}"), "+", 1).await?;
        let first_undelivered = next.ids.first().and_then(|e| entry_ms(&e.id));
        Ok(match (oldest_pending, first_undelivered) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }
}

/// The epoch ms an entry id was made at.
fn entry_ms(id: &str) -> Option<i64> {
    id.split('-').next()?.parse().ok()
}

fn as_text(v: &redis::Value) -> Option<String> {
    match v {
        redis::Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        redis::Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

fn as_number(v: &redis::Value) -> Option<u64> {
    match v {
        redis::Value::Int(n) => u64::try_from(*n).ok(),
        other => as_text(other)?.parse().ok(),
    }
}
