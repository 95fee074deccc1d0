//! The queue's side of admission: the Lua that decides whether a tenant may
//! add tasks now ([`ADMIT_FN`], run by `crate::quota`'s admission script
//! and by the single-task submit, `super::singles`), and its verdict.

use crate::error::QueueError;

/// Admission of `n` tasks for one tenant: its tokens spent today against
/// `max_tokens` (when `usage` is given), then its submit rate (a GCRA token
/// bucket whose state is one timestamp, read against Redis's own clock so
/// replicas never disagree; `interval` µs, 0 for none, and `burst`), then
/// its waiting tasks (`state`'s `queued` and `delayed`, plus the room live
/// reservations in `admitting` hold) against `max_queued`. Only when all
/// pass does it take the rate's token and, when given a `ticket`, reserve
/// room for `n` tasks for `hold_ms`; a refusal changes nothing. Returns
/// `{'ok', remaining, reset_s}`, `{'tokens', spent, 0}`,
/// `{'rate', retry_after_s, reset_s}` or `{'queued', waiting, 0}`.
///
/// In three steps, so one call can judge several requests against one
/// read: `admission_read` (Redis's clock, the day's tokens, the rate's
/// time, the room reserved), `judge` (one request of `n` tasks with
/// `waiting` tasks waiting, in memory; an admission takes the rate's token
/// in the read state) and `admission_write` (the rate's time, once).
pub(crate) const ADMIT_FN: &str = r#"
local function admission_read(rate, admitting, usage, interval)
  local a = {}
  if usage then a.spent = tonumber(redis.call('HGET', usage, 'tokens') or '0') end
  local t = redis.call('TIME')
  a.now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  a.now_ms = math.floor(a.now / 1000)
  if interval > 0 then a.tat = math.max(tonumber(redis.call('GET', rate) or '0'), a.now) end
  a.held = 0
  for _, r in ipairs(redis.call('ZRANGE', admitting, '(' .. string.format('%.0f', a.now_ms), '+inf', 'BYSCORE')) do
    a.held = a.held + tonumber(string.match(r, ':(%d+)$'))
  end
  return a
end
local function judge(a, n, interval, burst, max_queued, max_tokens, waiting)
  if a.spent and a.spent >= max_tokens then return {'tokens', a.spent, 0} end
  local new_tat
  if interval > 0 then
    new_tat = a.tat + interval
    local allow_at = new_tat - burst * interval
    if allow_at > a.now then
      return {'rate', math.ceil((allow_at - a.now) / 1000000), math.ceil((a.tat - a.now) / 1000000)}
    end
  end
  waiting = waiting + a.held
  if waiting + n > max_queued then return {'queued', waiting, 0} end
  if interval > 0 then
    a.tat = new_tat
    a.taken = true
    return {'ok', math.floor((burst * interval - (new_tat - a.now)) / interval), math.ceil((new_tat - a.now) / 1000000)}
  end
  return {'ok', -1, 0}
end
local function admission_write(a, rate)
  if a.taken then
    redis.call('SET', rate, string.format('%.0f', a.tat), 'PX', math.ceil((a.tat - a.now) / 1000) + 1)
  end
end
local function waiting_of(queued, delayed)
  return math.max(tonumber(queued or '0'), 0) + math.max(tonumber(delayed or '0'), 0)
end
local function admit(state, rate, admitting, usage, n, interval, burst, max_queued, max_tokens, ticket, hold_ms)
  local a = admission_read(rate, admitting, usage, interval)
  local counts = redis.call('HMGET', state, 'queued', 'delayed')
  local verdict = judge(a, n, interval, burst, max_queued, max_tokens, waiting_of(counts[1], counts[2]))
  if verdict[1] ~= 'ok' then return verdict end
  if ticket then
    redis.call('ZREMRANGEBYSCORE', admitting, '-inf', a.now_ms)
    redis.call('ZADD', admitting, a.now_ms + hold_ms, ticket .. ':' .. n)
    redis.call('PEXPIRE', admitting, hold_ms)
  end
  admission_write(a, rate)
  return verdict
end
"#;

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
