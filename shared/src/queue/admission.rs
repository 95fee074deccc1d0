//! The queue's side of admission: the Lua that decides whether a tenant may
//! add tasks now ([`ADMIT_FN`], run by `crate::quota`'s admission script),
//! and the single-task submit that admits, creates, lists and queues a task
//! in one script call on a single server ([`SUBMIT_ONE`]).
//!
//! A submit of one task is the API's hottest path, and every Redis round
//! trip costs the API a write and a read and Redis a command to parse, so
//! on a single server it is one `EVALSHA`. Being one atomic call, it needs
//! no reservation: the task counts as queued in the same step that admits
//! it. On a cluster the task's hash, its tenant's index and its shard lie
//! in different slots, so the submit there keeps its separate calls
//! (admission with a reservation, create, index, enqueue, drop).

use std::sync::LazyLock;

use redis::Script;

use super::fair_scripts::{ENQUEUE_FN, FAIR_FN};
use super::scripts::{CREATE_FN, PRELUDE};
use super::{origin, Queue, Submitted};
use crate::clock;
use crate::config::TenantSettings;
use crate::error::QueueError;
use crate::event::{draft, EventKind};
use crate::ids::{TaskId, TenantId};
use crate::keys::GROUP;
use crate::route::Route;
use crate::task::TaskSpec;

/// Admission of `n` tasks for one tenant: its tokens spent today against
/// `max_tokens` (when `usage` is given), then its submit rate (a GCRA token
/// bucket whose state is one timestamp, read against Redis's own clock so
/// replicas never disagree; `interval` µs, 0 for none, and `burst`), then
/// its waiting tasks (`state`'s `queued` and `delayed`, plus the room live
/// reservations in `admitting` hold) against `max_queued`. Only when all
/// pass does it take the rate's token and, when given a `ticket`, reserve
/// room for `n` tasks for `hold_ms`; a refusal changes nothing. `counts`
/// (optional) are `state`'s `queued` and `delayed` when the caller read
/// them already. Returns
/// `{'ok', remaining, reset_s}`, `{'tokens', spent, 0}`,
/// `{'rate', retry_after_s, reset_s}` or `{'queued', waiting, 0}`.
pub(crate) const ADMIT_FN: &str = r#"
local function admit(state, rate, admitting, usage, n, interval, burst, max_queued, max_tokens, ticket, hold_ms, counts)
  if usage then
    local spent = tonumber(redis.call('HGET', usage, 'tokens') or '0')
    if spent >= max_tokens then return {'tokens', spent, 0} end
  end
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local now_ms = math.floor(now / 1000)
  local new_tat
  if interval > 0 then
    local tat = tonumber(redis.call('GET', rate) or '0')
    if tat < now then tat = now end
    new_tat = tat + interval
    local allow_at = new_tat - burst * interval
    if allow_at > now then
      return {'rate', math.ceil((allow_at - now) / 1000000), math.ceil((tat - now) / 1000000)}
    end
  end
  local held = 0
  for _, r in ipairs(redis.call('ZRANGE', admitting, '(' .. string.format('%.0f', now_ms), '+inf', 'BYSCORE')) do
    held = held + tonumber(string.match(r, ':(%d+)$'))
  end
  counts = counts or redis.call('HMGET', state, 'queued', 'delayed')
  local waiting = math.max(tonumber(counts[1] or '0'), 0) + math.max(tonumber(counts[2] or '0'), 0) + held
  if waiting + n > max_queued then return {'queued', waiting, 0} end
  if ticket then
    redis.call('ZREMRANGEBYSCORE', admitting, '-inf', now_ms)
    redis.call('ZADD', admitting, now_ms + hold_ms, ticket .. ':' .. n)
    redis.call('PEXPIRE', admitting, hold_ms)
  end
  if interval > 0 then
    redis.call('SET', rate, string.format('%.0f', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1)
    return {'ok', math.floor((burst * interval - (new_tat - now)) / interval), math.ceil((new_tat - now) / 1000000)}
  end
  return {'ok', -1, 0}
end
"#;

/// Admits one task ([`ADMIT_FN`], no reservation) and, when admitted,
/// creates it with its `queued` event (`CREATE_FN`), lists it in its
/// tenant's index and the set of tenants, and queues it (`ENQUEUE_FN`), in
/// that order, all in one call on a single server.
/// `KEYS[1]` the shard's `sched`, `KEYS[2]` the task hash, `KEYS[3]` the
/// tenant's hash in its shard, `KEYS[4]` its rate key, `KEYS[5]` its
/// reservations, `KEYS[6]` its task index, `KEYS[7]` the set of tenants,
/// `KEYS[8]` (when given) its usage hash of today. `ARGV[1..4]` as
/// `CREATE` reads them (channels, draft, now, traceparent), `ARGV[5..10]`
/// the task's create group, `ARGV[11..14]` the rate's interval (µs, 0
/// none), burst, `max_queued`, `max_tokens_per_day` (read only with
/// `KEYS[8]`), `ARGV[15]` the shard base, `ARGV[16]` the group,
/// `ARGV[17..23]` the task's enqueue group. Returns the admission's reply.
pub static SUBMIT_ONE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{PRELUDE}\n{CREATE_FN}\n{FAIR_FN}\n{ENQUEUE_FN}\n{ADMIT_FN}\n{}",
        r#"
-- The tenant's hash (`KEYS[3]`), read once for admission and the enqueue.
local st, lanes = state_of(ARGV[15], ARGV[17])
local verdict = admit(KEYS[3], KEYS[4], KEYS[5], KEYS[8], 1, tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13]),
  tonumber(ARGV[14]), nil, nil, {st.queued, st.delayed})
if verdict[1] ~= 'ok' then return verdict end
create({KEYS[2], ARGV[5]}, 5, ARGV[2], ARGV[3], ARGV[4])
redis.call('ZADD', KEYS[6], 0, ARGV[5])
-- A tenant with a lane was listed with its first task.
if #lanes == 0 then redis.call('SADD', KEYS[7], ARGV[8]) end
enqueue(ARGV[15], ARGV[16], tonumber(ARGV[3]), ARGV, 17, {[ARGV[17]] = {st, lanes}})
return verdict
"#
    ))
});

/// What admission decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Admitted; `remaining` submits pass now and the bucket is full again
    /// in `reset_s` (both meaningful only when the tenant has a rate).
    Admitted { remaining: i64, reset_s: i64 },
    /// The tenant spent its tokens of today.
    TokensSpent,
    /// Over the submit rate: retry after `retry_after_s`.
    RateLimited { retry_after_s: i64, reset_s: i64 },
    /// Past `max_queued`, with `waiting` tasks waiting now.
    QueueFull { waiting: i64 },
}

impl Verdict {
    /// The verdict of an admission script's reply.
    pub(crate) fn of_reply((verdict, a, b): (String, i64, i64)) -> Result<Self, QueueError> {
        match verdict.as_str() {
            "ok" => Ok(Verdict::Admitted { remaining: a, reset_s: b }),
            "tokens" => Ok(Verdict::TokensSpent),
            "rate" => Ok(Verdict::RateLimited { retry_after_s: a, reset_s: b }),
            "queued" => Ok(Verdict::QueueFull { waiting: a }),
            _ => Err(QueueError::Corrupt(format!("admit answered {verdict}"))),
        }
    }
}

impl Queue {
    /// Whether [`Queue::submit_one`] can take this task: a single server
    /// (one call may span slots) and no idempotency key (whose record is
    /// claimed before the task is made).
    pub fn submits_in_one_call(&self, spec: &TaskSpec) -> bool {
        !self.redis.is_cluster() && spec.idempotency_key.is_none()
    }

    /// Admits one task of `tenant` under `quota` and, when admitted,
    /// creates and queues it, in one script call ([`SUBMIT_ONE`]). Only for
    /// a task [`Queue::submits_in_one_call`] accepts. Nothing is written
    /// when the verdict is a refusal.
    pub async fn submit_one(
        &self,
        tenant: &TenantId,
        spec: &TaskSpec,
        quota: &TenantSettings,
    ) -> Result<(Verdict, Option<Submitted>), QueueError> {
        let route = Route::of(spec).ok_or(QueueError::NoPipeline)?.key();
        let spec_json = serde_json::to_string(spec).map_err(|e| QueueError::Corrupt(e.to_string()))?;
        let id = TaskId::generate();
        let now = clock::now_ms();
        let keys = &self.keys;
        let shard = keys.shard_of(tenant);
        let max_tokens = quota.max_tokens_per_day;
        let (interval_us, burst) = quota.rate.map_or((0, 0), |r| ((1_000_000.0 / r.per_second).ceil() as u64, r.burst));
        let mut inv = SUBMIT_ONE.prepare_invoke();
        inv.key(keys.sched(shard))
            .key(keys.task(&id))
            .key(keys.tenant_state(tenant))
            .key(keys.tenant_rate(tenant))
            .key(keys.tenant_admitting(tenant))
            .key(keys.tenant_tasks(tenant))
            .key(keys.tenants());
        if max_tokens.is_some() {
            inv.key(keys.usage_day(tenant, &clock::utc_day(self.now_ms())));
        }
        let traceparent = crate::telemetry::current_traceparent().unwrap_or_default();
        inv.arg(self.script_channels()).arg(draft(EventKind::Queued { attempt: 0, worker: None })).arg(now).arg(traceparent);
        inv.arg(id.as_str()).arg(origin(&id, None, tenant).header()).arg(spec_json).arg(tenant.as_str()).arg("");
        inv.arg(spec.max_attempts());
        inv.arg(interval_us).arg(burst).arg(quota.max_queued).arg(max_tokens.unwrap_or(0));
        inv.arg(keys.shard_base(shard)).arg(GROUP);
        inv.arg(tenant.as_str()).arg(quota.weight).arg(quota.max_running.unwrap_or(0)).arg(spec.priority().lane_number());
        inv.arg(id.as_str()).arg(spec.not_before_ms().filter(|due| *due > now).unwrap_or(0)).arg(route);
        let mut conn = self.redis.shared();
        let verdict = Verdict::of_reply(inv.invoke_async(&mut conn).await?)?;
        let submitted =
            matches!(verdict, Verdict::Admitted { .. }).then(|| Submitted { id, created_at_ms: now, replayed: false });
        Ok((verdict, submitted))
    }
}
