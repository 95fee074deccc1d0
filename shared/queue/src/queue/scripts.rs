//! The Lua scripts that change a task. Each runs atomically inside Redis and
//! touches only the key of one task (its hash) or only keys of the queue
//! (`{q}`), except the two single-server scripts that say so.
//!
//! A task is one hash: its fields, and its event history, event `n` under
//! the field `e:<n>` beside `seq`, the last one's number. Keeping the
//! history in the hash means a change and the event reporting it are one
//! `HSET`, and a finished task expires with one `PEXPIRE`; Redis spends far
//! more on each command a script calls than on its arguments.
//!
//! Task scripts share a prelude. `ARGV[1]` is always the channel prefix
//! (`<prefix>:events:`), with a `+` after it on a single server, where each
//! event also goes to its tenant's feed stream (`<prefix>:events:feed:{tenant}`). Scripts on one task take `KEYS[1]` the task hash,
//! `ARGV[2]` the task id, `ARGV[3]` the event draft (`{"ts": …, "type": …,
//! …}`) and `ARGV[4]` now in epoch ms. The hot-path scripts (create, start,
//! finish) take many tasks at once: a key per task and a fixed group of
//! arguments per task, so one call serves a whole batch. The task hash keeps
//! `hdr`, the JSON fields every event of the task repeats (`task_id`,
//! `batch_id`, `tenant`).
//!
//! Fencing: a worker's write carries its attempt number and worker id; the
//! script refuses it unless the task's current `attempt` and `owner` are
//! still the caller's. A worker that was presumed dead and comes back can
//! therefore change nothing.

use std::sync::LazyLock;

use redis::Script;

use crate::redis_lua::{self, arg_group};

/// Shared helpers of the task scripts. A task comes as two arguments, its
/// hash `key` and its `id` (a table per task would cost Redis an allocation
/// and its collection). `record` sets the field, value pairs it is given
/// after `body` (as arguments, not a table, for the same reason), `seq` and the
/// event `{"seq":<seq>,<body>` in one `HSET`, appends it to the tenant's
/// feed stream when `ARGV[1]` ends in `+` (see `Keys::script_channels`),
/// then publishes the event on the task's, batch's and tenant's channels
/// (inside `holding_feed` only on those someone can hear: `heard`);
/// `body` is the header and the draft's fields (`with_hdr`). Inside
/// `holding_feed` the appends wait for the end of the call and go in as one
/// entry per tenant, one event a field (see `super::feed`). Sequence and
/// attempt numbers stay strings in the scripts: turning a Lua number into
/// text costs more than it seems.
pub(super) const PRELUDE: &str = include_str!("lua/prelude.lua");

/// The helper the scripts that wake a parked task share (`give_input`,
/// `takeover`, `cancel`; see [`super::park`]).
const UNPARK_FN: &str = include_str!("lua/unpark_fn.lua");

/// Starting one task's next attempt, shared by [`START`] and the
/// scheduler's claim (`fair_scripts::CLAIM_AND_START`). Reads `ARGV[2..7]` as [`START`] documents them.
/// `reclaimed` says the entry was taken over from a worker presumed dead:
/// only then does a running task get a new attempt. A new entry of a
/// running task is a second one (a retry's promotion raced the reclaim of
/// the first), and the attempt holding the first entry runs the task.
/// `tenant` is the task's tenant when the caller knows it (the claim
/// read its lane), else `nil`. Returns its reply (see [`START`]) as several
/// values, not a table, so a caller puts it into the table it makes anyway.
pub(super) const START_FN: &str = include_str!("lua/start_fn.lua");

/// A script of one task after the [`PRELUDE`].
fn task_script(body: &str) -> Script {
    redis_lua::script(&[PRELUDE, body], &[])
}

arg_group! {
    /// One task's arguments of [`CREATE`] (see [`CREATE_FN`]).
    pub(super) struct CreateGroup<'a> {
        id: &'a str,
        header: &'a str,
        spec: &'a str,
        tenant: &'a str,
        /// Empty for none.
        batch: &'a str,
        max_attempts: u32,
    }
}

/// Arguments per task of [`CREATE`].
pub const CREATE_GROUP: usize = CreateGroup::WIDTH;

/// Creating one task with its `queued` event, shared by [`CREATE`] and
/// `super::singles::SUBMIT_SINGLES`: `t` the task, then its `hdr`, `spec`,
/// `tenant`, `batch` (empty for none) and `max_attempts`, `draft` the event
/// draft (the same for every task of a call: it is cut once), `now` epoch
/// ms, `trace` the W3C `traceparent` of the request that made it (or
/// empty). The event is `record`'s, made in one concatenation.
pub(super) const CREATE_FN: &str = include_str!("lua/create_fn.lua");

/// Creates tasks with their `queued` event ([`CREATE_FN`]). `ARGV[2]` the
/// draft, `ARGV[3]` now, `ARGV[4]` the W3C `traceparent` of the request
/// that made them (or empty); then per task `id, hdr, spec, tenant, batch,
/// max_attempts` ([`CREATE_GROUP`] values per task, starting at `ARGV[5]`).
/// Returns how many were created (an existing id is skipped).
pub static CREATE: LazyLock<Script> = LazyLock::new(|| {
    redis_lua::script(&[PRELUDE, CREATE_FN, include_str!("lua/create.lua")], &[("CREATE_GROUP", &CREATE_GROUP)])
});

arg_group! {
    /// One task's arguments of [`START`].
    pub(super) struct StartGroup<'a> {
        id: &'a str,
        /// `1` when its entry was reclaimed, else empty.
        reclaimed: &'a str,
        /// The lane entry the attempt comes from.
        entry: &'a str,
    }
}

/// Arguments per task of [`START`].
pub const START_GROUP: usize = StartGroup::WIDTH;

/// Starts the next attempt of delivered tasks. `ARGV[2]` the `started`
/// draft, `ARGV[3]` now, `ARGV[4]` worker id, `ARGV[5]` draft of the
/// `cancelled` event, `ARGV[6]` draft of the `failed` event for spent
/// attempts, `ARGV[7]` retention ms; then per task from `ARGV[8]` its id,
/// `1` when its entry was reclaimed (else empty), and the entry's id (kept
/// on the task as `entry`, the entry its running attempt came from).
/// Returns, per task, `{'started', attempt, spec, tenant, batch, traceparent}`, or
/// `{'gone'}`, `{'terminal', status, entry of the attempt that ended it}`, `{'duplicate'}`, `{'cancelled'}`,
/// `{'dead', attempt, tenant}`.
pub static START: LazyLock<Script> =
    LazyLock::new(|| redis_lua::script(&[PRELUDE, START_FN, include_str!("lua/start.lua")], &[("START_GROUP", &START_GROUP)]));

arg_group! {
    /// One ending's arguments of [`FINISH`] (see [`FINISH_FN`]).
    pub(super) struct FinishGroup<'a> {
        id: &'a str,
        attempt: u32,
        owner: &'a str,
        /// The event after its seq.
        body: &'a str,
        status: &'a str,
        code: &'a str,
        /// `result` or `error`, or empty.
        field: &'a str,
        value: &'a str,
        finished_at: i64,
        tenant: &'a str,
        /// Empty for none.
        batch: &'a str,
    }
}

/// Arguments per task of [`FINISH`].
pub const FINISH_GROUP: usize = FinishGroup::WIDTH;

/// Ending one owning attempt's task, shared by [`FINISH`] and
/// `fair_scripts::FINISH_AND_ACK` (each reads its own layout of
/// arguments): `key` and `id` the task, `attempt` and `owner` the attempt
/// that ends it, `body` the event after its seq, `status`, `code`,
/// `field` (`result` or `error`, or empty) and its `value`, `at` the
/// `finished_at`, the task's `tenant` and `batch`. With `expire`, the task
/// expires after `ARGV[2]`, the retention ms.
/// Returns the terminal event's seq, or -1 when fenced.
pub(super) const FINISH_FN: &str = include_str!("lua/finish_fn.lua");

/// Ends owning attempts and their tasks. `ARGV[2]` retention ms; then
/// [`FINISH_GROUP`] values per task from `ARGV[3]`: `id, attempt, worker
/// id, body, status, code, field, value, finished_at, tenant, batch` (see
/// `finish`).
/// Returns per task the terminal event's seq, or -1 when fenced.
pub static FINISH: LazyLock<Script> = LazyLock::new(|| {
    redis_lua::script(&[PRELUDE, FINISH_FN, include_str!("lua/finish.lua")], &[("FINISH_GROUP", &FINISH_GROUP)])
});

/// Checks that a running attempt still owns its task (the lease itself is
/// its stream entry's idle time, which the caller resets next). `KEYS[1]`
/// the task hash; `ARGV[1]` attempt, `ARGV[2]` worker id.
/// Returns `ok`, `cancel` (a cancel was asked for) or `fenced`.
pub static HEARTBEAT: LazyLock<Script> = LazyLock::new(|| redis_lua::script(&[include_str!("lua/heartbeat.lua")], &[]));

/// Appends a progress event of the owning attempt. `ARGV[5]` attempt,
/// `ARGV[6]` worker id, `ARGV[7..]` field/value pairs to set.
/// Returns the event's seq, or -1 when fenced.
pub static EMIT: LazyLock<Script> = LazyLock::new(|| task_script(include_str!("lua/emit.lua")));

/// Hands the owning attempt's task back to be retried later. `ARGV[5]`
/// attempt, `ARGV[6]` worker id, `ARGV[7..]` field/value pairs.
/// Returns the `retrying` event's seq, or -1 when fenced.
pub static RETRY: LazyLock<Script> = LazyLock::new(|| task_script(include_str!("lua/retry.lua")));

/// Hands the owning attempt's task back to wait for its tenant's next UTC
/// day (the tenant spent its `max_tokens_per_day`): `queued` again, with
/// one more attempt allowed, since an attempt stopped for the tenant's
/// tokens is not a failure. `ARGV[5]` attempt, `ARGV[6]` worker id.
/// Returns the `queued` event's seq, or -1 when fenced.
pub static REQUEUE: LazyLock<Script> = LazyLock::new(|| task_script(include_str!("lua/requeue.lua")));

/// A user's cancel. `ARGV[5]` the caller's tenant, `ARGV[6]` retention ms.
/// Returns `missing`, `now-cancelled` (it was queued and now is cancelled),
/// `cancelling` (a worker holds it and will stop it), or the terminal status
/// it already had.
/// A parked task is woken for the attempt that takes it up to end it
/// (`unparked:<lane>:<route>`, see [`super::park`]), as is one woken
/// already (`cancelling`).
pub static CANCEL: LazyLock<Script> =
    LazyLock::new(|| redis_lua::script(&[PRELUDE, UNPARK_FN, include_str!("lua/cancel.lua")], &[]));

/// Sets fields of the owning attempt's task. `KEYS[1]` the task hash;
/// `ARGV[1]` attempt, `ARGV[2]` worker id, `ARGV[3..]` field/value pairs.
/// Returns `ok` or `fenced`.
pub static SET_FIELDS: LazyLock<Script> = LazyLock::new(|| redis_lua::script(&[include_str!("lua/set_fields.lua")], &[]));

/// A human's input to a waiting task. `KEYS[1]` the task hash; `ARGV[1]`
/// the caller's tenant, `ARGV[2]` the input as JSON. Returns `accepted`,
/// `missing`, or the status the task has when it is not waiting; for a
/// parked task, `unparked:<lane>:<route>` (it is claimable again, see
/// [`super::park`]).
pub static GIVE_INPUT: LazyLock<Script> =
    LazyLock::new(|| redis_lua::script(&[UNPARK_FN, include_str!("lua/give_input.lua")], &[]));

/// Takes the input a human gave the owning attempt's waiting task, and
/// marks it running again; none while a person holds the desktop.
/// `KEYS[1]` the task hash; `ARGV[1]` attempt, `ARGV[2]` worker id. Returns
/// `{kind, input JSON}`: kind `none` (no input yet), `fenced`, `input` (an
/// answer through `/input`), `release` (a person handed the desktop
/// back; its `released` event is recorded already) or `cancel` (the task
/// was cancelled while parked; `cancel` is set for the heartbeat too).
pub static TAKE_INPUT: LazyLock<Script> = LazyLock::new(|| redis_lua::script(&[include_str!("lua/take_input.lua")], &[]));

/// A person takes a tenant's running or waiting task's desktop: the task
/// waits with code `human-intervention` (its worker pauses after its
/// current action) and a `takeover` event is recorded. `ARGV[5]` the
/// caller's tenant. Returns `missing`, `taken`, `held` (a person holds it
/// already; nothing changes) or the status that does not allow it; for a
/// parked task, `unparked:<lane>:<route>` (a worker takes it up in its
/// sandbox for the person to see, see [`super::park`]).
pub static TAKEOVER: LazyLock<Script> =
    LazyLock::new(|| redis_lua::script(&[PRELUDE, UNPARK_FN, include_str!("lua/takeover.lua")], &[]));

/// A person hands a taken-over task back: a `released` event is recorded
/// and the message waits for the worker as the task's input. `ARGV[5]` the
/// caller's tenant, `ARGV[6]` the input JSON. Returns `missing`,
/// `released`, `not taken over`, or the status that does not allow it.
pub static RELEASE: LazyLock<Script> = LazyLock::new(|| task_script(include_str!("lua/release.lua")));

/// Puts a dead-lettered task back in the queue with fresh attempts. `ARGV[5]`
/// the caller's tenant. Returns `requeued`, `missing`, or the status it had.
pub static REVIVE: LazyLock<Script> = LazyLock::new(|| task_script(include_str!("lua/revive.lua")));

/// Deletes the task `id` (its key made from the prefix `ARGV[3]`) when it
/// ended at or before `cutoff`. A task that was revived since is not ended
/// any more, or ended later: it stays, and its index entry goes, until it
/// ends again.
const DELETE_IF_EXPIRED_FN: &str = include_str!("lua/delete_if_expired_fn.lua");

/// Deletes the tasks of the ended stream (`KEYS[1]`) whose entries were
/// written at or before `ARGV[1]` (epoch ms) and that ended by then, taking
/// at most `ARGV[2]` entries from the stream, on a single server (the task
/// keys are made from the prefix `ARGV[3]`). Returns how many entries went.
pub static SWEEP_ENDED: LazyLock<Script> =
    LazyLock::new(|| redis_lua::script(&[DELETE_IF_EXPIRED_FN, include_str!("lua/sweep_ended.lua")], &[]));

/// Deletes tasks of the finished index of earlier versions (`KEYS[1]`, a
/// sorted set by end time) that ended at or before `ARGV[1]` (epoch ms),
/// at most `ARGV[2]` of them, as [`SWEEP_ENDED`] does. Returns how many
/// entries were taken from the index.
pub static SWEEP_FINISHED: LazyLock<Script> =
    LazyLock::new(|| redis_lua::script(&[DELETE_IF_EXPIRED_FN, include_str!("lua/sweep_finished.lua")], &[]));
