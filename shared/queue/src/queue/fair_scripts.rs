//! The scheduler's Lua scripts: queueing into a tenant's lanes, taking
//! turns between tenants, settling acknowledged entries, reclaiming,
//! promoting due tasks and trimming. Each runs on one scheduler shard: every
//! key it touches carries the shard's hash tag (see [`crate::keys`]), and the
//! shard's key base `<prefix>:{fN}:` comes in as an argument, from which the
//! script builds the tenant keys (`<base>t:<tenant>`,
//! `<base>t:<tenant>:lane:<lane>:<route>`, `<base>active:<route>`).
//! `KEYS[1]` is always the shard's `sched` hash, so a cluster routes the
//! call to the shard's slot.
//!
//! Lanes are per (tenant, route, priority): a route is the canonical string
//! of what a task needs of its worker (see [`flotilla_types::route`]). Counters of a
//! tenant (hash `<base>t:<tenant>`): `queued` (entries in its lanes not yet
//! delivered), `running` (entries delivered and not yet acknowledged, which
//! is at least the tasks running: an entry is acknowledged only after its
//! task's end or hand-back is written), `delayed` (tasks in the due set),
//! `vt` (its virtual time), `weight` and `max` (max_running, 0 for none),
//! `busy` (`1` while it is in the shard's `busy` set),
//! `sandboxed` (entries running on routes that hold a sandbox, plus the
//! tenant's kept-alive sandboxes, see [`super::kept`]) and `maxsb`
//! (max_sandboxes, absent for none), `paused` (epoch ms until which the
//! tenant takes no turn: it spent its `max_tokens_per_day`; the shard's
//! `paused` set holds the same times, and the promoter lifts them);
//! in the same hash, so a turn reads the tenant in one call, the queued
//! entries per lane as `<lane index>:<route>`: a field exists exactly for
//! the lanes the tenant has (reclaim, trim and upkeep iterate them). The shard's `sched` hash has
//! `clock` (the virtual time of the last turn) and the shard's totals
//! `queued`, `running` and `delayed`; its `routes` hash the queued entries
//! per route (the claim looks only at routes with queued entries).
//!
//! Invariants: a tenant is in `active:<route>` exactly when it has queued
//! entries on that route, is below its `max`, is not `paused`, and, when
//! the route holds a sandbox, is below its `maxsb` (a tenant held back is
//! simply not given a turn); every such score is the tenant's `vt`, so the claim takes
//! the lowest-vt tenant over the routes the worker serves, reading only
//! those routes' heads (cost O(routes served), never O(tenants)). `running`
//! changes only in the claim (up, by the entries read) and in
//! [`SETTLE_FN`] (down, by what `XACK` really acknowledged), so a reclaimed
//! entry keeps its slot and an entry acknowledged twice frees it once;
//! `sandboxed` likewise, for the entries of routes that hold a sandbox.

use std::fmt::Display;
use std::sync::LazyLock;

use redis::Script;

use super::scripts::{FINISH_FN, PRELUDE, START_FN};
use crate::redis_lua::{self, arg_group};

/// One unit of virtual time: a task of a tenant of weight `w` advances the
/// tenant's virtual time by `STRIDE_UNIT / w`.
pub const STRIDE_UNIT: u32 = 10_000;

/// How many tasks past its fair share a turn may take: a turn ends within
/// `TURN_TASKS` of the tenant's strides past the next tenant's virtual time
/// (deficit round-robin's quantum). Larger turns cost Redis less per task
/// (a turn's reads and writes, and an acknowledgement's per-tenant writes,
/// serve more tasks) and loosen fairness by as many tasks per tenant. A
/// claim never asks for more than its worker's free slots, so where tasks
/// run for seconds a turn is that small whatever this is; it matters in
/// fast drains, where 16 costs Redis about a sixth less per task than 4
/// with 100 backlogged tenants.
pub const TURN_TASKS: u32 = 16;

/// How many tasks ahead of the clock a tenant that comes back from idle may
/// start: it joins at `max(its own virtual time, clock - HEAD_START_TURNS
/// strides)`. Bounded and never accumulated while idle, it lets a quiet
/// tenant's few tasks start at once beside a backlogged one.
pub const HEAD_START_TURNS: u32 = 4;

/// Helpers of every scheduler script. `LANES` are the lane names in
/// priority order; `with_group` runs a consumer-group command on a lane and,
/// when Redis lost the group (restarted without persistence) or the lane,
/// makes both again and retries: the one place that recovers from NOGROUP.
/// Counter changes of the shard's totals are summed in `SHARD_ACC` and
/// `ROUTE_ACC` and written once, by `flush`, at the end of each script.
/// `serves` is the script side of `Capabilities::serves`.
pub(super) const FAIR_FN: &str = include_str!("lua/fair_fn.lua");

/// Acknowledging entries of one shard: `settle` acknowledges the entries
/// gathered with `add_ack` (tenant, route, lane index, entry id), a lane's
/// at once. Each tenant's `running` goes down by what `XACK` acknowledged;
/// a tenant that was at its limit may take turns again; its lanes are
/// marked for trimming. `freed` (optional) holds slots already
/// acknowledged by `ack_counting`.
///
/// `ack_counting` acknowledges, one at a time, the entries of
/// `{tenant, route, lane index, entry id, outcome}` that carry an outcome
/// and adds the outcome to `counts` only when `XACK` acknowledged the entry
/// (it was still pending), so an entry's outcome is counted once whoever
/// acknowledges it; it adds the entries without an outcome to the
/// gathered ones and returns the slots freed.
const SETTLE_FN: &str = include_str!("lua/settle_fn.lua");

/// Taking turns on one shard: reads up to `wanted` new entries for
/// `consumer` with capabilities `c`, a turn at a time to the tenant of
/// lowest virtual time over the routes `c` serves, each turn reading the
/// tenant's lanes of those routes high → normal → low, skipping lanes whose
/// count says they are empty. A turn takes as many entries as keep the
/// tenant's virtual time within one stride of the next tenant's (all of
/// them with one tenant), and never more than its `max` leaves room for.
/// With `start`, each entry's task is started in the same step (single
/// server only: the task keys are made from `task_prefix`). Returns
/// `{entry, …}` with each `{lane index, entry id, task id, tenant, route}`;
/// with `start`, one flat list instead, each entry's five values followed
/// by the start's reply as six (`'malformed'` for an entry without a task
/// id; see [`CLAIM_ROW`]).
///
/// The turn order is read once per call: each served route's first
/// `wanted / TURN_TASKS + 2` tenants (at most `wanted + 2`, see `window`)
/// go into an in-memory heap (`order_of`), a tenant
/// goes back into it with its new virtual time after its turn, and the
/// active sets and the clock are written once at the end (`write_order`).
/// Tenants beyond a route's window have at least its last score (`edge`):
/// while the heap's lowest is not above the edge it is the true lowest;
/// otherwise the order is written and read again.
const TURNS_FN: &str = include_str!("lua/turns_fn.lua");

/// The Rust constants the scheduler's Lua names (see [`crate::redis_lua`]).
pub(super) const FAIR_CONSTANTS: &[(&str, &dyn Display)] =
    &[("STRIDE_UNIT", &STRIDE_UNIT), ("HEAD_START_TURNS", &HEAD_START_TURNS), ("TURN_TASKS", &TURN_TASKS)];

/// A scheduler script: its body after [`FAIR_FN`].
pub(super) fn fair_script(body: &str) -> Script {
    redis_lua::script(&[FAIR_FN, body], FAIR_CONSTANTS)
}

/// Puts tasks into their tenants' lanes (or the due set) on one shard and
/// lets those tenants take turns, shared by [`ENQUEUE`] and
/// `super::singles::SUBMIT_SINGLES`: `S` the shard base, `group` the group,
/// `now` epoch ms, then from `args[first]` per task `tenant, weight,
/// max_running (0 none), lane index, task id, due ms (0 now), route`
/// ([`ENQUEUE_GROUP`] values). A tenant's settings are written with its
/// tasks, so a restart with new settings takes effect at the next submit.
/// Returns how many went into lanes.
pub(super) const ENQUEUE_FN: &str = include_str!("lua/enqueue_fn.lua");

arg_group! {
    /// One task's arguments of [`ENQUEUE`] (see [`ENQUEUE_FN`]).
    pub(super) struct EnqueueGroup<'a> {
        tenant: &'a str,
        weight: u32,
        /// 0 for none.
        max_running: u32,
        lane: usize,
        id: &'a str,
        /// 0 for now.
        due_ms: i64,
        route: &'a str,
    }
}

/// Arguments per task of [`ENQUEUE`].
pub const ENQUEUE_GROUP: usize = EnqueueGroup::WIDTH;

/// Puts tasks into their tenants' lanes (or the due set) on one shard
/// ([`ENQUEUE_FN`]). `KEYS[1]` the shard's `sched`; `ARGV[1]` the shard
/// base, `ARGV[2]` the group, `ARGV[3]` now (epoch ms); then per task the
/// [`ENQUEUE_GROUP`] values. Returns how many went into lanes.
pub static ENQUEUE: LazyLock<Script> = LazyLock::new(|| {
    redis_lua::script(
        &[FAIR_FN, ENQUEUE_FN, include_str!("lua/enqueue.lua")],
        &[FAIR_CONSTANTS, &[("ENQUEUE_GROUP", &ENQUEUE_GROUP)]].concat(),
    )
});

/// Writes tenants' settings on one shard (at start, from the config file)
/// and lets a tenant whose limit rose take turns again. `KEYS[1]` the
/// shard's `sched`; `ARGV[1]` the shard base; then per tenant
/// `tenant, weight, max_running (0 none), max_sandboxes (0 none)`
/// ([`SETTINGS_GROUP`] values). Only here is `maxsb` written: it changes
/// with the config file, at a process's start.
pub static SET_SETTINGS: LazyLock<Script> = LazyLock::new(|| {
    redis_lua::script(
        &[FAIR_FN, include_str!("lua/set_settings.lua")],
        &[FAIR_CONSTANTS, &[("SETTINGS_GROUP", &SETTINGS_GROUP)]].concat(),
    )
});

arg_group! {
    /// One tenant's arguments of [`SET_SETTINGS`].
    pub(super) struct SettingsGroup<'a> {
        tenant: &'a str,
        weight: u32,
        /// 0 for none.
        max_running: u32,
        /// 0 for none.
        max_sandboxes: u64,
    }
}

/// Arguments per tenant of [`SET_SETTINGS`].
pub const SETTINGS_GROUP: usize = SettingsGroup::WIDTH;

/// Holds a tenant back from turns until a time (it spent its
/// `max_tokens_per_day`): its queued tasks stay queued, and the promoter's
/// pass at or after that time ([`PROMOTE`]) lets it take turns again.
/// `KEYS[1]` the shard's `sched`; `ARGV[1]` the shard base, `ARGV[2]` the
/// tenant, `ARGV[3]` until (epoch ms).
pub static PAUSE: LazyLock<Script> = LazyLock::new(|| fair_script(include_str!("lua/pause.lua")));

/// Takes turns on one shard without starting the tasks (a cluster starts
/// them on their own slots next). `KEYS[1]` the shard's `sched`; `ARGV[1]`
/// the shard base, `ARGV[2]` the group, `ARGV[3]` the consumer, `ARGV[4]`
/// the most entries, `ARGV[5..7]` the consumer's capabilities (sandbox,
/// pipelines, labels). Returns what `take_turns` returns.
pub static CLAIM_TURNS: LazyLock<Script> = LazyLock::new(|| {
    redis_lua::script(&[PRELUDE, START_FN, FAIR_FN, TURNS_FN, include_str!("lua/claim_turns.lua")], FAIR_CONSTANTS)
});

/// Values per entry in [`CLAIM_AND_START`]'s reply.
pub const CLAIM_ROW: usize = 11;

/// Takes turns and starts the tasks in one step, on a single server.
/// `ARGV[1..7]` as [`super::scripts::START`] reads them; `ARGV[8]` the
/// group, `ARGV[9]` the most entries, `ARGV[10]` the task key prefix,
/// `ARGV[11]` the shard base, `ARGV[12..14]` the consumer's capabilities.
/// `KEYS[1]` the shard's `sched`. Returns one flat list: per entry
/// [`CLAIM_ROW`] values, its lane index, entry id, task id, tenant and route,
/// then the start's reply with `''` after its last value.
pub static CLAIM_AND_START: LazyLock<Script> = LazyLock::new(|| {
    redis_lua::script(&[PRELUDE, START_FN, FAIR_FN, TURNS_FN, include_str!("lua/claim_and_start.lua")], FAIR_CONSTANTS)
});

arg_group! {
    /// One entry's arguments of [`ACK`], and of an entry [`FINISH_AND_ACK`]
    /// only acknowledges.
    pub(super) struct AckGroup<'a> {
        tenant: &'a str,
        route: &'a str,
        lane: usize,
        entry_id: &'a str,
        /// Empty for none.
        outcome: &'a str,
    }
}

/// Arguments per entry of [`ACK`] and per entry to acknowledge only of
/// [`FINISH_AND_ACK`].
pub const ACK_GROUP: usize = AckGroup::WIDTH;

/// Acknowledges entries of one shard and counts outcomes. `KEYS[1]` the
/// shard's `sched`, `KEYS[2]` the shard's outcome counts; `ARGV[1]` the
/// shard base, `ARGV[2]` the group; then per entry `tenant, route, lane
/// index, entry id, outcome (or empty)`. An outcome is counted only for an
/// entry this call acknowledged.
pub static ACK: LazyLock<Script> = LazyLock::new(|| {
    redis_lua::script(
        &[FAIR_FN, SETTLE_FN, include_str!("lua/ack.lua")],
        &[FAIR_CONSTANTS, &[("ACK_GROUP", &ACK_GROUP)]].concat(),
    )
});

/// Takes over, for `ARGV[3]`, up to `ARGV[5]` entries of one shard pending
/// longer than `ARGV[4]` ms on routes the consumer serves (capabilities in
/// `ARGV[6..8]`): their worker is presumed dead. Only tenants in `busy` are
/// looked at (every tenant with entries pending is; one with none leaves it
/// here). `KEYS[1]` the shard's `sched`; `ARGV[1]`
/// the shard base, `ARGV[2]` the group. The entries keep their slot of
/// `running`. Returns `{lane index, entry id, task id, tenant, route}` per
/// entry.
pub static RECLAIM: LazyLock<Script> = LazyLock::new(|| fair_script(include_str!("lua/reclaim.lua")));

/// Moves due tasks of one shard into their tenants' lanes, lets
/// tenants held back by [`PAUSE`] until now take turns again, and gives
/// back the sandbox slots of kept-alive sandboxes past their deadline (see
/// [`super::kept`]). `KEYS[1]` the
/// shard's `sched`; `ARGV[1]` the shard base, `ARGV[2]` the group,
/// `ARGV[3]` now, `ARGV[4]` the most to move. Returns how many moved.
pub static PROMOTE: LazyLock<Script> = LazyLock::new(|| fair_script(include_str!("lua/promote.lua")));

/// Drops acknowledged entries from the head of the lanes of tenants marked
/// since the last pass (everything before the oldest pending entry, or,
/// with none pending, everything delivered), whole listpack nodes at a
/// time. `KEYS[1]` the shard's `sched`; `ARGV[1]` the shard base,
/// `ARGV[2]` the group. Returns how many entries went.
pub static TRIM: LazyLock<Script> = LazyLock::new(|| fair_script(include_str!("lua/trim.lua")));

/// Removes, on one shard, the consumers idle longer than `ARGV[3]` ms that
/// hold no pending entry (workers gone for good) from every tenant's lanes.
/// `KEYS[1]` the shard's `sched`; `ARGV[1]` the shard base, `ARGV[2]` the
/// group. Returns the names removed.
pub static FORGET_GONE_CONSUMERS: LazyLock<Script> = LazyLock::new(|| fair_script(include_str!("lua/forget_gone_consumers.lua")));

/// Puts a task handed back for retry into one shard's due set.
/// `KEYS[1]` the shard's `sched`; `ARGV[1]` the shard base, `ARGV[2]` the
/// tenant, `ARGV[3]` lane index, `ARGV[4]` task id, `ARGV[5]` due ms,
/// `ARGV[6]` the task's route.
pub static DEFER: LazyLock<Script> = LazyLock::new(|| fair_script(include_str!("lua/defer.lua")));

arg_group! {
    /// One ended task's arguments of [`FINISH_AND_ACK`].
    pub(super) struct FinishAndAckGroup<'a> {
        /// Its context's number, from 1.
        context: usize,
        id: &'a str,
        attempt: u32,
        /// The event after its seq.
        body: &'a str,
        finished_at: i64,
        entry_id: &'a str,
        /// The value of its context's field.
        value: &'a str,
    }
}

/// Arguments per ended task of [`FINISH_AND_ACK`].
pub const FINISH_AND_ACK_GROUP: usize = FinishAndAckGroup::WIDTH;

arg_group! {
    /// What many ended tasks of one [`FINISH_AND_ACK`] call share, sent
    /// once as a context.
    #[derive(Clone, Copy, PartialEq, Eq)]
    pub(super) struct FinishContext<'a> {
        owner: &'a str,
        status: &'a str,
        code: &'a str,
        /// `result` or `error`, or empty.
        field: &'a str,
        tenant: &'a str,
        /// Empty for none.
        batch: &'a str,
        route: &'a str,
        lane: usize,
    }
}

/// Arguments per context of [`FINISH_AND_ACK`].
pub const FINISH_CONTEXT: usize = FinishContext::WIDTH;

/// Ends owning attempts, acknowledges their entries and counts their
/// outcomes in one step, so a task is counted exactly when it ends and its
/// tenant's slot frees with it; on a single server only (the tasks' keys
/// and the shard's are in one call). Each ended task's outcome is counted
/// in its tenant's usage of the day in the same step (and in its all-time
/// totals when those are kept). Instead of a TTL each, the ended tasks
/// go into the ended stream as one entry. `KEYS[1]` the shard's
/// `sched`, `KEYS[2]` the shard's outcome counts, `KEYS[3]` the ended stream,
/// then the key of each ended task. `ARGV[1]` the channel prefix,
/// `ARGV[2]` retention ms (unused here), `ARGV[3]` the group, `ARGV[4]` how
/// many tasks end, `ARGV[5]` the shard base, `ARGV[6]` and `ARGV[7]` a usage
/// day key's text before and after its tenant, `ARGV[8]` the day key's TTL
/// in seconds (set when a count makes the key), `ARGV[9]` the totals key's
/// text after its tenant (empty when totals are not kept), `ARGV[10]` the
/// number of contexts and from `ARGV[11]` [`FINISH_CONTEXT`] values each
/// (what many ended tasks share, so it is sent and read once); then
/// [`FINISH_AND_ACK_GROUP`] values per ended task; after them, entries to
/// acknowledge only, as `tenant, route, lane index, entry id, outcome (or
/// empty)`, whose outcome is counted only if this call acknowledged the
/// entry. An entry whose task another attempt owns is left pending.
/// Returns per ended task the terminal event's seq, or -1 when fenced.
pub static FINISH_AND_ACK: LazyLock<Script> = LazyLock::new(|| {
    redis_lua::script(
        &[PRELUDE, FINISH_FN, FAIR_FN, SETTLE_FN, include_str!("lua/finish_and_ack.lua")],
        &[
            FAIR_CONSTANTS,
            &[("FINISH_CONTEXT", &FINISH_CONTEXT), ("FINISH_AND_ACK_GROUP", &FINISH_AND_ACK_GROUP), ("ACK_GROUP", &ACK_GROUP)],
        ]
        .concat(),
    )
});
