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
        let groups: Vec<HashMap<String, redis::Value>> = redis::cmd("XINFO").arg("GROUPS").arg(&key).query_async(&mut conn).await?;
        let group = groups.iter().find(|g| g.get("name").and_then(as_text).as_deref() == Some(GROUP));
        let number = |field: &str| group.and_then(|g| g.get(field)).and_then(as_number);
        let len: u64 = conn.xlen(&key).await?;
        let pending = number("pending").unwrap_or(0);
        let depth = number("lag").unwrap_or_else(|| len.saturating_sub(pending));
        let first: redis::streams::StreamRangeReply = conn.xrange_count(&key, "-", "+", 1).await?;
        let oldest_age_ms = first
            .ids
            .first()
            .and_then(|e| e.id.split('-').next()?.parse::<i64>().ok())
            .map_or(0, |ts| (clock::now_ms() - ts).max(0) as u64);
        let delayed: u64 = conn.zcard(self.keys.due(lane)).await?;
        Ok(LaneStats { lane, depth, pending, delayed, oldest_age_ms, consumers: number("consumers").unwrap_or(0) })
    }
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
