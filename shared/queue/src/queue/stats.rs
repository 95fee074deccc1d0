//! Queue figures: a tenant's own (`GET /v1/queues`) and the fleet's (the
//! metrics page, autoscaling).

use std::collections::HashMap;

use redis::AsyncCommands;
use serde::Serialize;
use utoipa::ToSchema;

use super::Reader;
use super::{CapabilityWait, Queue};
use crate::error::QueueError;
use crate::keys::{lane_field, GROUP};
use flotilla_types::clock;
use flotilla_types::ids::TenantId;
use flotilla_types::route::{Capabilities, Route};
use flotilla_types::task::Priority;

/// One of the caller's lanes.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LaneStats {
    pub lane: Priority,
    /// Waiting: tasks not yet handed to any worker.
    pub depth: u64,
    /// Running: tasks handed to a worker and not yet ended or handed back.
    pub pending: u64,
    /// Tasks waiting for a retry backoff or their `not_before`.
    pub delayed: u64,
    /// Age in ms of the oldest waiting task (running ones do not count); 0
    /// when none waits.
    pub oldest_age_ms: u64,
    /// Live workers that can run the lane's tasks.
    pub consumers: u64,
}

/// A tenant's load and settings.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TenantLoad {
    pub tenant: TenantId,
    /// Tasks ready to run, waiting for a turn (or a free slot under `max_running`).
    pub queued: u64,
    /// Tasks handed to workers and not yet ended or handed back.
    pub running: u64,
    /// Tasks waiting for a retry backoff or their `not_before`.
    pub delayed: u64,
    pub weight: u32,
    /// Tasks of the tenant running at once, fleet-wide; none when unset.
    pub max_running: Option<u32>,
}

/// The caller's queue figures: `GET /v1/queues`. Nothing in it is another
/// tenant's.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct QueueStats {
    /// The caller's lanes.
    pub lanes: Vec<LaneStats>,
    /// Queued and running tasks per tenant: the caller's only.
    pub tenants: Vec<TenantLoad>,
    /// The caller's dead-lettered tasks.
    pub dead: u64,
    /// The caller's queued tasks per capability no live worker offers
    /// (a task needing several missing ones counts under each).
    pub waiting_for: Vec<CapabilityWait>,
}

/// Fleet-wide figures for operators (the metrics page, autoscaling).
#[derive(Debug, Clone, Default)]
pub struct FleetStats {
    /// Tasks ready to run, every tenant's.
    pub queued: u64,
    /// Tasks handed to workers and not yet ended or handed back.
    pub running: u64,
    /// Tasks waiting for a retry backoff or their `not_before`.
    pub delayed: u64,
    /// Finished tasks by outcome since the queue was created.
    pub outcomes: HashMap<String, u64>,
}

impl Queue {
    /// One priority's figures summed over the tenant's routes' lanes
    /// (`routes`); the oldest age is the largest, the consumers are the live
    /// workers that serve any of the routes.
    async fn lane_stats(
        &self,
        tenant: &TenantId,
        routes: &[&str],
        lane: Priority,
        delayed: u64,
        live: &[Capabilities],
    ) -> Result<LaneStats, QueueError> {
        let mut total = LaneStats { lane, depth: 0, pending: 0, delayed, oldest_age_ms: 0, consumers: 0 };
        for route in routes {
            let one = self.one_lane_stats(&self.keys.lane(tenant, route, lane)).await?;
            total.depth += one.depth;
            total.pending += one.pending;
            total.oldest_age_ms = total.oldest_age_ms.max(one.oldest_age_ms);
        }
        let routes: Vec<Route> = routes.iter().filter_map(|r| Route::parse(r)).collect();
        total.consumers = live.iter().filter(|w| routes.iter().any(|r| w.serves(r))).count() as u64;
        Ok(total)
    }

    async fn one_lane_stats(&self, key: &str) -> Result<LaneStats, QueueError> {
        let mut conn = self.redis.shared();
        let lane = Priority::Normal;
        let exists: bool = conn.exists(key).await?;
        if !exists {
            return Ok(LaneStats { lane, depth: 0, pending: 0, delayed: 0, oldest_age_ms: 0, consumers: 0 });
        }
        let groups: Vec<HashMap<String, redis::Value>> =
            redis::cmd("XINFO").arg("GROUPS").arg(key).query_async(&mut conn).await?;
        let group = groups.iter().find(|g| g.get("name").and_then(as_text).as_deref() == Some(GROUP));
        let number = |field: &str| group.and_then(|g| g.get(field)).and_then(as_number);
        let len: u64 = conn.xlen(key).await?;
        let pending = number("pending").unwrap_or(0);
        let depth = number("lag").unwrap_or_else(|| len.saturating_sub(pending));
        let oldest_age_ms = match self.oldest_waiting_entry_ms(key, group, depth).await? {
            Some(ts) => (clock::now_ms() - ts).max(0) as u64,
            None => 0,
        };
        Ok(LaneStats { lane, depth, pending, delayed: 0, oldest_age_ms, consumers: 0 })
    }
}

impl Reader<'_> {
    /// The caller's figures: its lanes, its load and its dead letters.
    pub async fn stats(self, tenant: &TenantId) -> Result<QueueStats, QueueError> {
        let mut conn = self.redis.shared();
        let state: HashMap<String, String> = conn.hgetall(self.keys.tenant_state(tenant)).await?;
        let field = |name: &str| state.get(name).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0).max(0) as u64;
        let live = self.reader().live_capabilities().await?;
        let mut lanes = Vec::new();
        for lane in Priority::ALL {
            let routes: Vec<&str> = state
                .keys()
                .filter_map(|f| lane_field(f))
                .filter(|(priority, _)| *priority == lane)
                .map(|(_, route)| route)
                .collect();
            lanes.push(self.lane_stats(tenant, &routes, lane, field(&format!("delayed:{}", lane.as_str())), &live).await?);
        }
        let settings = self.settings.tenants.get(tenant);
        let load = TenantLoad {
            tenant: tenant.clone(),
            queued: field("queued"),
            running: field("running"),
            delayed: field("delayed"),
            weight: settings.weight,
            max_running: settings.max_running,
        };
        let dead: u64 = conn.zcard(self.keys.dead(tenant)).await?;
        let waiting_for = self.capability_waits(tenant).await?;
        Ok(QueueStats { lanes, tenants: vec![load], dead, waiting_for })
    }

    /// Every shard's totals, summed, and the outcome counts.
    pub async fn fleet_stats(self) -> Result<FleetStats, QueueError> {
        let cmds = self
            .keys
            .shards()
            .flat_map(|s| [redis::Cmd::hgetall(self.keys.sched(s)), redis::Cmd::hgetall(self.keys.outcomes(s))]);
        let replies: Vec<HashMap<String, String>> = self.redis.query_many(cmds.collect()).await?;
        let (shards, outcomes): (Vec<_>, Vec<_>) = replies.chunks(2).map(|pair| (&pair[0], &pair[1])).unzip();
        let mut fleet = FleetStats::default();
        for shard in &shards {
            let field = |name: &str| shard.get(name).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0).max(0) as u64;
            fleet.queued += field("queued");
            fleet.running += field("running");
            fleet.delayed += field("delayed");
        }
        for (outcome, n) in outcomes.iter().flat_map(|counts| counts.iter()) {
            *fleet.outcomes.entry(outcome.clone()).or_default() += n.parse::<u64>().unwrap_or(0);
        }
        Ok(fleet)
    }
}

impl Queue {
    /// The epoch ms of the lane's oldest entry not yet handed to a worker
    /// (`depth` of them wait), if any.
    async fn oldest_waiting_entry_ms(
        &self,
        key: &str,
        group: Option<&HashMap<String, redis::Value>>,
        depth: u64,
    ) -> Result<Option<i64>, QueueError> {
        if depth == 0 {
            return Ok(None);
        }
        let mut conn = self.redis.shared();
        let last_delivered = group.and_then(|g| g.get("last-delivered-id")).and_then(as_text).unwrap_or_else(|| "0-0".into());
        let next: redis::streams::StreamRangeReply = conn.xrange_count(key, format!("({last_delivered}"), "+", 1).await?;
        Ok(next.ids.first().and_then(|e| entry_ms(&e.id)))
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
