//! The worker's side of the lanes below the claim seam: taking turns on a
//! shard, taking over entries of workers presumed dead, promoting due
//! tasks, acknowledging finished ones, and the lanes' upkeep. Every call
//! runs one of [`fair_scripts`] on one scheduler shard.

use std::collections::BTreeMap;

use super::{fair_scripts, scripts, Queue};
use crate::error::QueueError;
use crate::keys::{Shard, GROUP};
use flotilla_types::clock;
use flotilla_types::ids::{TaskId, TenantId};
use flotilla_types::route::Capabilities;
use flotilla_types::task::Priority;

use super::attempt::Outcome;
use super::{Housekeeper, Runner};

/// How many due tasks one promoter pass moves per shard.
const PROMOTE_BATCH: usize = 500;
/// How many tasks of the earlier versions' finished index one sweep call
/// deletes at most.
const SWEEP_BATCH: usize = 500;
/// How many entries of the ended stream one sweep call takes at most (an
/// entry holds the tasks one acknowledgement ended, at most a worker's
/// concurrency).
const SWEEP_ENTRIES: usize = 20;
/// Tenants whose settings one call writes.
const SETTINGS_CHUNK: usize = 500;
/// The most sweep calls one pass makes (so a pass keeps up with 10 000
/// ended tasks per pass).
const SWEEP_ROUNDS: usize = 20;

/// One stream entry handed to a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The tenant whose lane holds the entry.
    pub tenant: TenantId,
    /// The route of the lane (see [`flotilla_types::route`]), as its canonical string.
    pub route: String,
    pub lane: Priority,
    pub entry_id: String,
    /// `None` when the entry is malformed; it is acknowledged and dropped.
    pub task_id: Option<TaskId>,
    /// Taken over from a worker presumed dead, rather than read new. A new
    /// entry of a task that is already running is a second entry of that
    /// task (its running attempt holds the first) and starts nothing.
    pub reclaimed: bool,
}

impl Delivery {
    /// An entry as the scheduler scripts report it: lane index, entry id,
    /// task id, tenant, route.
    pub(super) fn from_reply(
        (lane, entry_id, task, tenant, route): (&str, String, &str, &str, String),
        reclaimed: bool,
    ) -> Option<Self> {
        Some(Self {
            tenant: TenantId::parse(tenant).ok()?,
            route,
            lane: Priority::from_lane_number(lane)?,
            entry_id,
            task_id: TaskId::parse(task).ok(),
            reclaimed,
        })
    }
}

impl Queue {
    /// A scheduler script call on one shard: `KEYS[1]` its `sched`,
    /// `ARGV[1]` its key base.
    pub(super) fn shard_call<'a>(&self, script: &'a redis::Script, shard: Shard) -> redis::ScriptInvocation<'a> {
        let mut inv = script.prepare_invoke();
        inv.key(self.keys.sched(shard)).arg(self.keys.shard_base(shard));
        inv
    }

    async fn set_idle(&self, consumer: &str, delivery: &Delivery, idle_ms: u64) -> Result<(), QueueError> {
        let mut conn = self.redis.shared();
        let _: redis::Value = redis::cmd("XCLAIM")
            .arg(self.keys.lane(&delivery.tenant, &delivery.route, delivery.lane))
            .arg(GROUP)
            .arg(consumer)
            .arg(0)
            .arg(&delivery.entry_id)
            .arg("IDLE")
            .arg(idle_ms)
            .arg("JUSTID")
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// Runs a sweep script on `index` until it takes fewer than `batch`
    /// entries, at most [`SWEEP_ROUNDS`] times.
    async fn sweep_rounds(&self, script: &redis::Script, index: String, cutoff: i64, batch: usize) -> Result<usize, QueueError> {
        let mut conn = self.redis.shared();
        let mut swept = 0;
        for _ in 0..SWEEP_ROUNDS {
            let n: usize = script.key(&index).arg(cutoff).arg(batch).arg(self.keys.task_prefix()).invoke_async(&mut conn).await?;
            swept += n;
            if n < batch {
                break;
            }
        }
        Ok(swept)
    }
}

impl Housekeeper<'_> {
    /// Writes the configured tenants' weights and limits where the
    /// scheduler reads them, and the defaults for every other tenant the
    /// scheduler knows (each tenant's settings are also written with its
    /// tasks); then lifts day holds the current limits no longer call for
    /// (see [`super::settings_sync`]).
    pub async fn write_tenant_settings(self) -> Result<(), QueueError> {
        let mut by_shard: BTreeMap<Shard, Vec<(TenantId, u32, u32, u64)>> = BTreeMap::new();
        for (tenant, settings) in self.settings.tenants.iter() {
            let entry = (tenant.clone(), settings.weight, settings.max_running.unwrap_or(0), settings.max_sandboxes.unwrap_or(0));
            by_shard.entry(self.keys.shard_of(tenant)).or_default().push(entry);
        }
        for shard in self.keys.shards() {
            for tenant in self.unnamed_tenants(shard).await? {
                let settings = self.settings.tenants.get(&tenant);
                let entry = (tenant, settings.weight, settings.max_running.unwrap_or(0), settings.max_sandboxes.unwrap_or(0));
                by_shard.entry(shard).or_default().push(entry);
            }
        }
        let mut conn = self.redis.shared();
        for (shard, tenants) in by_shard {
            for chunk in tenants.chunks(SETTINGS_CHUNK) {
                let mut inv = self.shard_call(&fair_scripts::SET_SETTINGS, shard);
                for (tenant, weight, max_running, max_sandboxes) in chunk {
                    let (weight, max_running, max_sandboxes) = (*weight, *max_running, *max_sandboxes);
                    inv.arg(fair_scripts::SettingsGroup { tenant: tenant.as_str(), weight, max_running, max_sandboxes });
                }
                let _: i64 = inv.invoke_async(&mut conn).await?;
            }
        }
        self.lift_stale_holds().await
    }

    /// Drops acknowledged entries from the head of the lanes that had
    /// acknowledgements since the last pass (see [`fair_scripts::TRIM`]).
    /// Returns how many entries went.
    pub async fn trim_lanes(self) -> Result<usize, QueueError> {
        let mut conn = self.redis.shared();
        let mut trimmed = 0;
        for shard in self.keys.shards() {
            let n: usize = self.shard_call(&fair_scripts::TRIM, shard).arg(GROUP).invoke_async(&mut conn).await?;
            trimmed += n;
        }
        Ok(trimmed)
    }

    /// Removes the consumer entries of workers gone for good: idle for ten
    /// leases and holding nothing (their entries were reclaimed first).
    /// Returns the names removed.
    pub async fn forget_gone_consumers(self) -> Result<Vec<String>, QueueError> {
        let mut conn = self.redis.shared();
        let gone_after_ms = self.settings.lease.as_millis() as u64 * 10;
        let mut removed = Vec::new();
        for shard in self.keys.shards() {
            let names: Vec<String> = self
                .shard_call(&fair_scripts::FORGET_GONE_CONSUMERS, shard)
                .arg(GROUP)
                .arg(gone_after_ms)
                .invoke_async(&mut conn)
                .await?;
            removed.extend(names);
        }
        removed.sort();
        removed.dedup();
        Ok(removed)
    }

    /// Deletes the ended tasks whose retention has passed (see
    /// [`scripts::SWEEP_ENDED`], and [`scripts::SWEEP_FINISHED`] for the
    /// index of earlier versions); returns how many index entries went.
    /// Nothing to do on a cluster, where every ended task has a TTL.
    pub async fn sweep_finished(self) -> Result<usize, QueueError> {
        if self.redis.is_cluster() {
            return Ok(0);
        }
        let cutoff = clock::now_ms() - self.retention_ms() as i64;
        let ended = self.sweep_rounds(&scripts::SWEEP_ENDED, self.keys.ended(), cutoff, SWEEP_ENTRIES).await?;
        let finished = self.sweep_rounds(&scripts::SWEEP_FINISHED, self.keys.finished(), cutoff, SWEEP_BATCH).await?;
        Ok(ended + finished)
    }

    /// Moves tasks whose time has come from the due sets into their lanes,
    /// and lets tenants held back until now (see [`Runner::hold_back_until`])
    /// take turns again. Returns how many tasks moved.
    pub async fn promote_due(self) -> Result<usize, QueueError> {
        let mut conn = self.redis.shared();
        let now = self.now_ms();
        let mut moved = 0;
        for shard in self.keys.shards() {
            let n: usize = self
                .shard_call(&fair_scripts::PROMOTE, shard)
                .arg(GROUP)
                .arg(now)
                .arg(PROMOTE_BATCH)
                .invoke_async(&mut conn)
                .await?;
            moved += n;
        }
        Ok(moved)
    }
}

impl Runner<'_> {
    /// Takes turns on one shard for `consumer`, which can run what `caps`
    /// says, without starting the tasks: up to `count` entries.
    pub async fn claim_turns(
        self,
        shard: Shard,
        consumer: &str,
        caps: &Capabilities,
        count: usize,
    ) -> Result<Vec<Delivery>, QueueError> {
        let mut inv = self.shard_call(&fair_scripts::CLAIM_TURNS, shard);
        inv.arg(GROUP).arg(consumer).arg(count).arg(&caps.script_args());
        let mut conn = self.redis.shared();
        let got: Vec<(String, String, String, String, String)> = inv.invoke_async(&mut conn).await?;
        Ok(got
            .into_iter()
            .filter_map(|(lane, entry, task, tenant, route)| Delivery::from_reply((&lane, entry, &task, &tenant, route), false))
            .collect())
    }

    /// Takes over up to `count` entries, on routes `caps` serves, that have
    /// been pending longer than the lease: their worker is presumed dead.
    /// They keep their tenant's running slot.
    pub async fn reclaim(self, consumer: &str, caps: &Capabilities, count: usize) -> Result<Vec<Delivery>, QueueError> {
        let mut conn = self.redis.shared();
        let min_idle = self.settings.lease.as_millis() as u64;
        let mut got = Vec::new();
        for shard in self.keys.shards() {
            let wanted = count - got.len();
            if wanted == 0 {
                break;
            }
            let mut inv = self.shard_call(&fair_scripts::RECLAIM, shard);
            inv.arg(GROUP).arg(consumer).arg(min_idle).arg(wanted).arg(&caps.script_args());
            let taken: Vec<(String, String, String, String, String)> = inv.invoke_async(&mut conn).await?;
            got.extend(taken.into_iter().filter_map(|(lane, entry, task, tenant, route)| {
                Delivery::from_reply((&lane, entry, &task, &tenant, route), true)
            }));
        }
        Ok(got)
    }

    /// Keeps an entry this worker still works on from looking idle.
    pub async fn touch(self, consumer: &str, delivery: &Delivery) -> Result<(), QueueError> {
        self.set_idle(consumer, delivery, 0).await
    }

    /// Hands an entry this worker gives up on back at once: it is marked as
    /// idle for a whole lease, so the next reclaim by any worker takes it.
    pub async fn release(self, consumer: &str, delivery: &Delivery) -> Result<(), QueueError> {
        self.set_idle(consumer, delivery, self.settings.lease.as_millis() as u64).await
    }

    /// Acknowledges finished entries and counts their outcomes
    /// (`succeeded`, `failed`, …) in one step per shard: an outcome is
    /// counted only when its entry was still pending, so a task is counted
    /// once whichever worker acknowledges it; each acknowledged entry frees
    /// its tenant's running slot.
    pub async fn ack(self, done: &[(Delivery, Option<Outcome>)]) -> Result<(), QueueError> {
        let mut by_shard: BTreeMap<Shard, Vec<&(Delivery, Option<Outcome>)>> = BTreeMap::new();
        for item in done {
            by_shard.entry(self.keys.shard_of(&item.0.tenant)).or_default().push(item);
        }
        let calls: Vec<_> = by_shard
            .into_iter()
            .map(|(shard, items)| {
                let mut inv = self.shard_call(&fair_scripts::ACK, shard);
                inv.key(self.keys.outcomes(shard));
                inv.arg(GROUP);
                for (delivery, outcome) in items {
                    inv.arg(super::attempt::ack_group(delivery, *outcome));
                }
                inv
            })
            .collect();
        let _: Vec<i64> = self.invoke_each(&calls).await?;
        Ok(())
    }

    /// Holds `tenant` back from turns until `until_ms` (epoch ms): its
    /// queued tasks wait, and the first promoter pass after lets it on.
    pub async fn hold_back_until(self, tenant: &TenantId, until_ms: i64) -> Result<(), QueueError> {
        let mut inv = self.shard_call(&fair_scripts::PAUSE, self.keys.shard_of(tenant));
        inv.arg(tenant.as_str()).arg(until_ms);
        let mut conn = self.redis.shared();
        let _: i64 = inv.invoke_async(&mut conn).await?;
        Ok(())
    }
}
