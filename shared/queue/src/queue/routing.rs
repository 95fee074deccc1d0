//! The queue's side of capability routing (see [`flotilla_types::route`]): the
//! fleet's registry of live workers' capabilities, and what a waiting task,
//! or a tenant's queue, waits for. The claim itself never reads the
//! registry: a worker is handed what its own capabilities serve, so one
//! that joins with a missing capability picks the waiting tasks up at its
//! first claim.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use redis::AsyncCommands;
use serde::Serialize;
use utoipa::ToSchema;

use super::{Queue, TaskRecord};
use super::{Reader, Runner};
use crate::error::QueueError;
use crate::keys::lane_field;
use flotilla_types::clock;
use flotilla_types::ids::TenantId;
use flotilla_types::route::{Capabilities, Need, Route};
use flotilla_types::task::TaskStatus;

/// How often a worker renews its capabilities in the registry.
pub const ADVERTISE_EVERY: Duration = Duration::from_secs(1);
/// How long an advertisement counts: a worker that stopped renewing (it
/// was killed) stops counting as live after this.
const LIVE_FOR_MS: i64 = 5_000;

/// What separates a registry entry's capabilities from its worker's id
/// (neither a capability list nor a worker id holds it).
const WORKER_ID_MARK: &str = "|@";

/// The capabilities of a registry entry (`<capabilities>|@<worker id>`).
fn capabilities_part(entry: &str) -> &str {
    entry.rsplit_once(WORKER_ID_MARK).map_or(entry, |(caps, _)| caps)
}

/// Queued tasks of the caller waiting for one capability no live worker
/// offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct CapabilityWait {
    /// `worker`, `sandbox`, `sandbox:local`, `sandbox:e2b`,
    /// `pipeline:<name>` or `label:<label>`.
    #[schema(value_type = String, example = "label:eu")]
    pub capability: Need,
    pub queued: u64,
}

impl Queue {
    /// The tenant's queued tasks per capability no live worker offers.
    pub(super) async fn capability_waits(&self, tenant: &TenantId) -> Result<Vec<CapabilityWait>, QueueError> {
        let mut conn = self.redis.shared();
        let state: HashMap<String, String> = conn.hgetall(self.keys.tenant_state(tenant)).await?;
        let mut per_route: BTreeMap<&str, u64> = BTreeMap::new();
        for (field, n) in &state {
            if let (Some((_, route)), Ok(n @ 1..)) = (lane_field(field), n.parse::<u64>()) {
                *per_route.entry(route).or_default() += n;
            }
        }
        if per_route.is_empty() {
            return Ok(Vec::new());
        }
        let live = self.reader().live_capabilities().await?;
        let mut waits: BTreeMap<Need, u64> = BTreeMap::new();
        for (route, n) in per_route {
            let Some(route) = Route::parse(route) else { continue };
            for need in route.missing(&live) {
                *waits.entry(need).or_default() += n;
            }
        }
        Ok(waits.into_iter().map(|(capability, queued)| CapabilityWait { capability, queued }).collect())
    }
}

impl Runner<'_> {
    /// Records that the worker `worker_id`, with these capabilities, is live
    /// (for [`LIVE_FOR_MS`]); workers call it every [`ADVERTISE_EVERY`].
    /// Each worker has its own entry, so the registry also counts them.
    pub async fn advertise(self, worker_id: &str, caps: &Capabilities) -> Result<(), QueueError> {
        let now = clock::now_ms();
        let mut conn = self.redis.shared();
        let key = self.keys.workers();
        let () = redis::pipe()
            .zadd(&key, format!("{}{WORKER_ID_MARK}{worker_id}", caps.encode()), now + LIVE_FOR_MS)
            .ignore()
            .zrembyscore(&key, "-inf", now)
            .ignore()
            .query_async(&mut conn)
            .await?;
        Ok(())
    }
}

impl Reader<'_> {
    /// The capabilities of the live workers, one entry per distinct set.
    pub async fn live_capabilities(self) -> Result<Vec<Capabilities>, QueueError> {
        let mut conn = self.redis.shared();
        let live: Vec<String> = conn.zrangebyscore(self.keys.workers(), clock::now_ms(), "+inf").await?;
        Ok(live.iter().filter_map(|entry| Capabilities::decode(capabilities_part(entry))).collect())
    }

    /// Fills in what a queued task waits for (see [`TaskRecord::waiting_for`]).
    pub async fn fill_waiting_for(self, record: &mut TaskRecord) -> Result<(), QueueError> {
        if record.status != TaskStatus::Queued {
            return Ok(());
        }
        let live = self.live_capabilities().await?;
        let Some(mut waits) = Route::of(&record.spec).map(|route| route.missing(&live)) else { return Ok(()) };
        let mut conn = self.redis.shared();
        let paused: Option<i64> = conn.hget(self.keys.tenant_state(&record.tenant), "paused").await?;
        if paused.is_some_and(|until| until > self.now_ms()) {
            waits.push(Need::DayTokens);
        }
        record.waiting_for = Some(waits);
        Ok(())
    }
}
