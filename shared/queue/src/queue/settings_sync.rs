//! The scheduler's copy of each tenant's limits follows the config file a
//! process starts with, also for what the file no longer says.
//!
//! The scheduler reads a tenant's `weight`, `max` (max_running) and `maxsb`
//! (max_sandboxes) from its hash, and holds a tenant back for the day once
//! it spent its `max_tokens_per_day` or `max_cost_usd_per_day` (`paused`, see
//! [`super::fair_scripts::PAUSE`]). At a process's start,
//! [`Housekeeper::write_tenant_settings`] writes the configured tenants' limits;
//! this module adds every other tenant the shard knows (its `tenants` set),
//! with the defaults, so a limit taken out of the file (or a tenant's whole
//! table) is not left in force by a stale copy; and it lifts the hold of
//! each tenant whose current `max_tokens_per_day` and
//! `max_cost_usd_per_day` are each gone or now above what it spent today.
//!
//! Invariant: after a process's start, every tenant's limits in the
//! scheduler are the ones its config file gives (the defaults for a tenant
//! it does not name), and a tenant is `paused` only while it has spent at
//! least its current `max_tokens_per_day` or `max_cost_usd_per_day` of
//! today.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use redis::Script;

use super::fair_scripts::fair_script;
use super::Queue;
use crate::error::QueueError;
use crate::keys::Shard;
use flotilla_types::clock;
use flotilla_types::ids::TenantId;
use flotilla_types::usage::{COST_FIELD, TOKENS_FIELD};

/// Lets a tenant held back for its day's tokens take turns again.
/// `KEYS[1]` the shard's `sched`; `ARGV[1]` the shard base, `ARGV[2]` the
/// tenant. Returns 1 when it was held back.
pub(crate) static LIFT: LazyLock<Script> = LazyLock::new(|| fair_script(include_str!("lua/lift_pause.lua")));

impl Queue {
    /// The tenants the shard knows of (every tenant that queued a task in
    /// it) that the config file does not name.
    pub(super) async fn unnamed_tenants(&self, shard: Shard) -> Result<Vec<TenantId>, QueueError> {
        let read = redis::Cmd::smembers(format!("{}tenants", self.keys.shard_base(shard)));
        let known: Vec<BTreeSet<String>> = self.redis.query_many(vec![read]).await?;
        let named: BTreeSet<&str> = self.settings.tenants.iter().map(|(t, _)| t.as_str()).collect();
        Ok(known.into_iter().flatten().filter(|t| !named.contains(t.as_str())).filter_map(|t| TenantId::parse(&t).ok()).collect())
    }

    /// Lifts the day's hold of every tenant whose current
    /// `max_tokens_per_day` and `max_cost_usd_per_day` are each gone or
    /// above what it spent today.
    pub(super) async fn lift_stale_holds(&self) -> Result<(), QueueError> {
        let today = clock::utc_day(self.now_ms());
        for shard in self.keys.shards() {
            let read = redis::Cmd::zrange(format!("{}paused", self.keys.shard_base(shard)), 0, -1);
            let held: Vec<Vec<String>> = self.redis.query_many(vec![read]).await?;
            for tenant in held.into_iter().flatten().filter_map(|t| TenantId::parse(&t).ok()) {
                let settings = self.settings.tenants.get(&tenant);
                let limits = [
                    (TOKENS_FIELD, settings.max_tokens_per_day),
                    (COST_FIELD, settings.max_cost_usd_per_day.map(|usd| usd.micros())),
                ];
                let mut spent_a_limit = false;
                for (field, max) in limits {
                    let Some(max) = max else { continue };
                    let read = redis::Cmd::hget(self.keys.usage_day(&tenant, &today), field);
                    let spent: Vec<Option<u64>> = self.redis.query_many(vec![read]).await?;
                    spent_a_limit |= spent.into_iter().flatten().next().unwrap_or(0) >= max;
                }
                if spent_a_limit {
                    continue;
                }
                let mut conn = self.redis.shared();
                let _: i64 = self.shard_call(&LIFT, shard).arg(tenant.as_str()).invoke_async(&mut conn).await?;
            }
        }
        Ok(())
    }
}
