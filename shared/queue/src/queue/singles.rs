//! The single-task submit (`POST /v1/tasks` without an idempotency key, on
//! a single server): admission, create, index and enqueue in one atomic
//! script call ([`SUBMIT_SINGLES`]), which takes every single-task submit
//! of the same tenant that arrived while its previous call ran.
//!
//! A submit of one task is the API's hottest path, and most of what Redis
//! spends on it is per call, not per task: the call itself, the script's
//! helpers, the tenant's reads (its hash, the clock, the rate, the room
//! reserved), its counters, turn sets and the `wake` signal. Submits of one
//! tenant that meet here share those; each task is still judged on its
//! own, in arrival order, with its own verdict (a rate's token, a full
//! queue). No submit waits for a timer: one that finds no call under way
//! for its tenant starts one at once, and those arriving meanwhile go
//! together in the next call, right after it. Being one atomic call, it
//! needs no reservation: a task counts as queued in the step that admits
//! it. On a cluster the task's hash, its tenant's index and its shard lie
//! in different slots, so the submit there keeps its separate calls
//! (admission with a reservation, create, index, enqueue, drop).
//!
//! Invariant: a tenant's line has a call under way (`calling`) exactly
//! while it holds submits or a call of it runs; the call's task, not the
//! request, owns it, so a request that goes away (a client hanging up)
//! never strands the ones behind it.

use std::collections::{HashMap, VecDeque};
use std::sync::{LazyLock, Mutex, MutexGuard, PoisonError};

use redis::Script;
use tokio::sync::oneshot;

use super::admission::{Verdict, ADMIT_FN};
use super::fair_scripts::{ENQUEUE_FN, ENQUEUE_GROUP, FAIR_CONSTANTS, FAIR_FN};
use super::scripts::{CREATE_FN, PRELUDE};
use super::Submitter;
use super::{origin, Queue, Submitted};
use crate::error::QueueError;
use crate::keys::GROUP;
use crate::redis_lua::{self, arg_group};
use flotilla_config::TenantSettings;
use flotilla_types::clock;
use flotilla_types::event::{draft, EventKind};
use flotilla_types::ids::{TaskId, TenantId};
use flotilla_types::route::Route;
use flotilla_types::task::TaskSpec;

/// The most tasks one call takes.
const MOST_PER_CALL: usize = 64;

arg_group! {
    /// One task's arguments of [`SUBMIT_SINGLES`].
    struct SingleGroup<'a> {
        id: &'a str,
        header: &'a str,
        spec: &'a str,
        max_attempts: u32,
        trace: &'a str,
        lane: usize,
        /// 0 for now.
        due_ms: i64,
        route: &'a str,
    }
}

/// Arguments per task of [`SUBMIT_SINGLES`].
pub const SINGLE_GROUP: usize = SingleGroup::WIDTH;

/// Admits single tasks of one tenant one by one, in order ([`ADMIT_FN`]
/// against one read, no reservation), and creates each admitted one with
/// its `queued` event (`CREATE_FN`); then lists them in the tenant's index
/// and the set of tenants and queues them (`ENQUEUE_FN`), all in one call
/// on a single server. `KEYS[1]` the shard's `sched`, `KEYS[2]` the
/// tenant's hash in its shard, `KEYS[3]` its rate key, `KEYS[4]` its
/// reservations, `KEYS[5]` its task index, `KEYS[6]` the set of tenants,
/// `KEYS[7]` its usage hash of today, then each task's hash. `ARGV[1..3]`
/// as `CREATE` reads them (channels, draft, now), `ARGV[4]` the tenant,
/// `ARGV[5..8]` the rate's interval (µs, 0 none), burst, `max_queued`,
/// `max_tokens_per_day` (empty for none), `ARGV[9]` the shard base,
/// `ARGV[10]` the group, `ARGV[11..12]` weight and `max_running` (0 none);
/// then per task from `ARGV[13]` its id, header, spec, max attempts,
/// `traceparent`, lane index, due ms (0 now) and route ([`SINGLE_GROUP`]
/// values; the tenant is `ARGV[4]` for all, and none has a batch).
/// Returns each task's verdict.
pub static SUBMIT_SINGLES: LazyLock<Script> = LazyLock::new(|| {
    redis_lua::script(
        &[PRELUDE, CREATE_FN, FAIR_FN, ENQUEUE_FN, ADMIT_FN, include_str!("lua/submit_singles.lua")],
        &[FAIR_CONSTANTS, &[("ENQUEUE_GROUP", &ENQUEUE_GROUP), ("SINGLE_GROUP", &SINGLE_GROUP)]].concat(),
    )
});

/// What a call needs of a tenant's settings; submits with the same ones go
/// in one call.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Limits {
    /// The rate's interval in µs (0 for none) and burst.
    interval_us: u64,
    burst: u64,
    max_queued: u64,
    max_tokens: Option<u64>,
    weight: u32,
    max_running: u32,
}

impl Limits {
    fn of(quota: &TenantSettings) -> Self {
        let (interval_us, burst) = quota.rate.map_or((0, 0), |r| ((1_000_000.0 / r.per_second).ceil() as u64, r.burst));
        Self {
            interval_us,
            burst,
            max_queued: quota.max_queued,
            max_tokens: quota.max_tokens_per_day,
            weight: quota.weight,
            max_running: quota.max_running.unwrap_or(0),
        }
    }
}

/// One single-task submit waiting for its call.
struct Single {
    limits: Limits,
    id: TaskId,
    header: String,
    spec: String,
    max_attempts: u32,
    trace: String,
    lane: usize,
    due_ms: i64,
    route: String,
    answer: oneshot::Sender<Result<(Verdict, i64), QueueError>>,
}

/// The single-task submits of each tenant waiting for a call.
#[derive(Default)]
pub(super) struct Waiting(Mutex<HashMap<TenantId, Line>>);

#[derive(Default)]
struct Line {
    singles: VecDeque<Single>,
    calling: bool,
}

impl Waiting {
    fn lines(&self) -> MutexGuard<'_, HashMap<TenantId, Line>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next call's submits: the first waiting and those after it with
    /// the same limits, at most [`MOST_PER_CALL`]. None ends the tenant's
    /// calls (the line is dropped).
    fn next_call(&self, tenant: &TenantId) -> Option<Vec<Single>> {
        let mut lines = self.lines();
        let line = lines.get_mut(tenant)?;
        let Some(first) = line.singles.front().map(|s| s.limits) else {
            lines.remove(tenant);
            return None;
        };
        let mut call = Vec::new();
        while call.len() < MOST_PER_CALL && line.singles.front().is_some_and(|s| s.limits == first) {
            call.extend(line.singles.pop_front());
        }
        Some(call)
    }
}

/// The same error for every submit of a failed call.
fn shared_error(e: &QueueError) -> QueueError {
    match e {
        QueueError::Redis(e) => QueueError::Redis(e.clone()),
        other => QueueError::Corrupt(other.to_string()),
    }
}

impl Queue {
    /// Calls [`SUBMIT_SINGLES`] for `tenant`'s waiting submits until none
    /// is left, answering each.
    async fn call_singles(self, tenant: TenantId) {
        while let Some(call) = self.singles.next_call(&tenant) {
            let now = clock::now_ms();
            match self.submit_singles(&tenant, &call, now).await {
                Ok(verdicts) => {
                    for (single, verdict) in call.into_iter().zip(verdicts) {
                        let _ = single.answer.send(Ok((verdict, now)));
                    }
                }
                Err(e) => {
                    for single in call {
                        let _ = single.answer.send(Err(shared_error(&e)));
                    }
                }
            }
        }
    }

    async fn submit_singles(&self, tenant: &TenantId, call: &[Single], now: i64) -> Result<Vec<Verdict>, QueueError> {
        let Some(limits) = call.first().map(|s| s.limits) else { return Ok(Vec::new()) };
        let keys = &self.keys;
        let shard = keys.shard_of(tenant);
        let mut inv = SUBMIT_SINGLES.prepare_invoke();
        inv.key(keys.sched(shard))
            .key(keys.tenant_state(tenant))
            .key(keys.tenant_rate(tenant))
            .key(keys.tenant_admitting(tenant))
            .key(keys.tenant_tasks(tenant))
            .key(keys.tenants())
            .key(keys.usage_day(tenant, &clock::utc_day(self.now_ms())));
        inv.arg(self.script_channels()).arg(draft(EventKind::Queued { attempt: 0, worker: None })).arg(now);
        inv.arg(tenant.as_str()).arg(limits.interval_us).arg(limits.burst).arg(limits.max_queued);
        inv.arg(limits.max_tokens.map_or_else(String::new, |n| n.to_string()));
        inv.arg(keys.shard_base(shard)).arg(GROUP).arg(limits.weight).arg(limits.max_running);
        for single in call {
            inv.key(keys.task(&single.id));
            inv.arg(SingleGroup {
                id: single.id.as_str(),
                header: &single.header,
                spec: &single.spec,
                max_attempts: single.max_attempts,
                trace: &single.trace,
                lane: single.lane,
                due_ms: single.due_ms,
                route: &single.route,
            });
        }
        let mut conn = self.redis.shared();
        let replies: Vec<(String, i64, i64)> = inv.invoke_async(&mut conn).await?;
        if replies.len() != call.len() {
            return Err(QueueError::Corrupt(format!("{} verdicts for {} submits", replies.len(), call.len())));
        }
        replies.into_iter().map(Verdict::of_reply).collect()
    }
}

impl Submitter<'_> {
    /// Whether [`Submitter::submit_one`] can take this task: a single server
    /// (one call may span slots) and no idempotency key (whose record is
    /// claimed before the task is made).
    pub fn submits_in_one_call(self, spec: &TaskSpec) -> bool {
        !self.redis.is_cluster() && spec.idempotency_key.is_none()
    }

    /// Admits one task of `tenant` under `quota` and, when admitted,
    /// creates and queues it, in its tenant's next call of
    /// [`SUBMIT_SINGLES`]. Only for a task [`Submitter::submits_in_one_call`]
    /// accepts. Nothing is written when the verdict is a refusal.
    pub async fn submit_one(
        self,
        tenant: &TenantId,
        spec: &TaskSpec,
        quota: &TenantSettings,
    ) -> Result<(Verdict, Option<Submitted>), QueueError> {
        let route = Route::of(spec).ok_or(QueueError::NoPipeline)?.key();
        let id = TaskId::generate();
        let (answer, answered) = oneshot::channel();
        let single = Single {
            limits: Limits::of(quota),
            header: origin(&id, None, tenant).header(),
            spec: serde_json::to_string(spec).map_err(|e| QueueError::Corrupt(e.to_string()))?,
            max_attempts: spec.max_attempts(),
            trace: flotilla_telemetry::current_traceparent().unwrap_or_default(),
            lane: spec.priority().lane_number(),
            due_ms: spec.not_before_ms().unwrap_or(0),
            route,
            id: id.clone(),
            answer,
        };
        let start = {
            let mut lines = self.singles.lines();
            let line = lines.entry(tenant.clone()).or_default();
            line.singles.push_back(single);
            !std::mem::replace(&mut line.calling, true)
        };
        if start {
            tokio::spawn(Queue::clone(&self).call_singles(tenant.clone()));
        }
        let (verdict, created_at_ms) =
            answered.await.map_err(|_| QueueError::Corrupt("the submit's call ended without an answer".into()))??;
        let submitted = matches!(verdict, Verdict::Admitted { .. }).then(|| Submitted { id, created_at_ms, replayed: false });
        Ok((verdict, submitted))
    }
}
