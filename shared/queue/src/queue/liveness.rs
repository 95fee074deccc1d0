//! Dead-worker detection faster than the lease: each worker keeps a short
//! liveness mark in every shard (`alive`, a sorted set of expiry times by
//! the server's clock), refreshed well within [`QueueSettings::liveness`],
//! and a claiming worker takes the pending entries of any worker whose
//! mark ran out at once, instead of waiting for them to sit idle a whole
//! lease. A worker that never wrote a mark (an older version) is only ever
//! reclaimed by the lease.
//!
//! Invariant: a taken entry is fenced as every reclaim is — its new
//! attempt supersedes the old one, whose writes are refused from then on
//! (the same start script as every claim) — so a worker wrongly presumed
//! dead (a pause longer than its liveness) loses its task, never doubles
//! it. Guarded by `durable_runs::a_sigkilled_worker_costs_one_step_and_no_done_action_runs_twice`
//! and `liveness::a_worker_whose_liveness_ran_out_loses_its_entries_at_once`.
//!
//! [`QueueSettings::liveness`]: super::QueueSettings::liveness

use std::sync::LazyLock;

use redis::Script;

use super::fair_scripts::fair_script;
use super::{Delivery, Queue};
use crate::error::QueueError;
use crate::keys::GROUP;
use crate::redis_lua;
use flotilla_types::route::Capabilities;

/// Marks a worker alive. `KEYS[1]` the shard's `sched`; `ARGV[1]` the
/// shard base, `ARGV[2]` the worker, `ARGV[3]` how long the mark lasts (ms).
static ALIVE: LazyLock<Script> = LazyLock::new(|| redis_lua::script(&[include_str!("lua/alive.lua")], &[]));

/// Takes, for `ARGV[3]`, up to `ARGV[4]` pending entries of workers whose
/// liveness ran out, on routes the consumer serves (capabilities in
/// `ARGV[5..7]`). `KEYS[1]` the shard's `sched`; `ARGV[1]` the shard base,
/// `ARGV[2]` the group. Returns `{lane index, entry id, task id, tenant,
/// route}` per entry, as the lease's reclaim does.
static RECLAIM_DEAD: LazyLock<Script> = LazyLock::new(|| fair_script(include_str!("lua/reclaim_dead.lua")));

impl Queue {
    /// Marks `worker` alive for [`QueueSettings::liveness`](super::QueueSettings::liveness) in every shard.
    pub async fn mark_alive(&self, worker: &str) -> Result<(), QueueError> {
        self.mark_until(worker, self.settings.liveness.as_millis() as u64).await
    }

    /// Marks `worker` gone: what it handed back (or left) is taken by the
    /// next claiming worker's check, without waiting for the lease.
    pub async fn mark_gone(&self, worker: &str) -> Result<(), QueueError> {
        self.mark_until(worker, 0).await
    }

    async fn mark_until(&self, worker: &str, lasts: u64) -> Result<(), QueueError> {
        let mut conn = self.redis.shared();
        for shard in self.keys.shards() {
            let mut inv = self.shard_call(&ALIVE, shard);
            inv.arg(worker).arg(lasts);
            let _: String = inv.invoke_async(&mut conn).await?;
        }
        Ok(())
    }

    /// Takes over up to `count` entries of workers whose liveness ran out,
    /// on routes `caps` serves. They keep their tenant's running slot.
    pub async fn reclaim_dead(&self, consumer: &str, caps: &Capabilities, count: usize) -> Result<Vec<Delivery>, QueueError> {
        let mut conn = self.redis.shared();
        let mut got = Vec::new();
        for shard in self.keys.shards() {
            let wanted = count - got.len();
            if wanted == 0 {
                break;
            }
            let mut inv = self.shard_call(&RECLAIM_DEAD, shard);
            inv.arg(GROUP).arg(consumer).arg(wanted).arg(&caps.script_args());
            let taken: Vec<(String, String, String, String, String)> = inv.invoke_async(&mut conn).await?;
            got.extend(taken.into_iter().filter_map(|(lane, entry, task, tenant, route)| {
                Delivery::from_reply((&lane, entry, &task, &tenant, route), true)
            }));
        }
        Ok(got)
    }
}
