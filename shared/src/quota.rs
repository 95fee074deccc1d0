//! Admission: whether a tenant may add tasks now, decided in one Redis
//! script so every API replica shares the same limits.
//!
//! One call of [`ADMIT`] checks, in this order, the tenant's submit rate (a
//! GCRA token bucket whose state is one timestamp, read against Redis's own
//! clock so replicas never disagree), its tokens spent today against
//! `max_tokens_per_day`, and its queued tasks against `max_queued`. Only when
//! all pass does it take the rate's token and reserve room for the new tasks
//! in the tenant's queued counter; a refused request changes nothing.
//!
//! Invariant: the queued counter ([`crate::keys::Keys::tenant_queued`]) goes
//! up when a request is admitted (or a schedule fires, a task is retried or
//! revived) and down when a queued task starts or is cancelled, or when an
//! admitted request made no task after all.

use std::sync::LazyLock;

use redis::Script;

use crate::clock;
use crate::config::TenantSettings;
use crate::error::QueueError;
use crate::ids::TenantId;
use crate::queue::Queue;
use crate::usage::TOKENS_FIELD;

/// Retry-After of a tenant whose queue is full: its tasks start within
/// moments when workers are free.
const QUEUE_FULL_RETRY_S: u64 = 1;

/// Retry-After of a tenant that keeps all the schedules it may: only
/// deleting one makes room.
const SCHEDULES_FULL_RETRY_S: u64 = 60;

/// `KEYS[1]` the rate key, `KEYS[2]` the queued counter, `KEYS[3]` today's
/// usage hash; `ARGV[1]` tasks asked for, `ARGV[2]` the rate's emission
/// interval in µs (0: no rate), `ARGV[3]` burst, `ARGV[4]` max queued,
/// `ARGV[5]` max tokens today (0: none), `ARGV[6]` the usage field of
/// tokens. Returns `{'ok', remaining, reset_s}`, `{'rate', retry_after_s,
/// reset_s}`, `{'tokens', spent, 0}` or `{'queued', queued, 0}`.
static ADMIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local n = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local now, new_tat
if interval > 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
  if tat < now then tat = now end
  new_tat = tat + interval
  local allow_at = new_tat - burst * interval
  if allow_at > now then
    return {'rate', math.ceil((allow_at - now) / 1000000), math.ceil((tat - now) / 1000000)}
  end
end
local max_tokens = tonumber(ARGV[5])
if max_tokens > 0 then
  local spent = tonumber(redis.call('HGET', KEYS[3], ARGV[6]) or '0')
  if spent >= max_tokens then return {'tokens', spent, 0} end
end
local queued = tonumber(redis.call('GET', KEYS[2]) or '0')
if queued + n > tonumber(ARGV[4]) then return {'queued', queued, 0} end
redis.call('INCRBY', KEYS[2], n)
if interval > 0 then
  redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1)
  return {'ok', math.floor((burst * interval - (new_tat - now)) / interval), math.ceil((new_tat - now) / 1000000)}
end
return {'ok', -1, 0}
"#,
    )
});

/// Where a tenant's submit-rate bucket stands, for the `RateLimit-*` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateState {
    /// The bucket's size (`burst`).
    pub limit: u64,
    /// Submits that would pass now.
    pub remaining: u64,
    /// Seconds until the bucket is full again.
    pub reset_s: u64,
}

/// Why a tenant may not add tasks now.
#[derive(Debug, thiserror::Error)]
pub enum QuotaError {
    #[error("this key's tenant submits faster than its rate of {per_second}/s (burst {})", .state.limit)]
    RateLimited { per_second: f64, retry_after_s: u64, state: RateState },
    #[error("this would take the tenant past its max_queued of {max_queued} tasks ({queued} queued now)")]
    QueueFull { max_queued: u64, queued: u64 },
    #[error("the tenant spent its max_tokens_per_day of {max}; submits resume at the next UTC day")]
    TokensSpent { max: u64, retry_after_s: u64 },
    #[error("the tenant keeps its max_schedules of {max} schedules")]
    SchedulesFull { max: u64 },
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl QuotaError {
    /// Whole seconds after which the same request may pass.
    pub fn retry_after_s(&self) -> Option<u64> {
        match self {
            QuotaError::RateLimited { retry_after_s, .. } | QuotaError::TokensSpent { retry_after_s, .. } => Some(*retry_after_s),
            QuotaError::QueueFull { .. } => Some(QUEUE_FULL_RETRY_S),
            QuotaError::SchedulesFull { .. } => Some(SCHEDULES_FULL_RETRY_S),
            QuotaError::Queue(_) => None,
        }
    }
}

impl From<redis::RedisError> for QuotaError {
    fn from(e: redis::RedisError) -> Self {
        QuotaError::Queue(e.into())
    }
}

/// An admitted request: room for its tasks is reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted {
    /// The rate bucket after this request, when the tenant has a rate.
    pub rate: Option<RateState>,
}

impl Queue {
    /// Admits a request that adds `tasks` tasks for `tenant` under `quota`,
    /// reserving room for them, or says why not (and changes nothing).
    pub async fn admit(&self, tenant: &TenantId, tasks: u64, quota: &TenantSettings) -> Result<Admitted, QuotaError> {
        let now = clock::now_ms();
        let keys = self.keys();
        let (interval_us, burst) = quota.rate.map_or((0, 0), |r| ((1_000_000.0 / r.per_second).ceil() as u64, r.burst));
        let mut inv = ADMIT.prepare_invoke();
        inv.key(keys.tenant_rate(tenant)).key(keys.tenant_queued(tenant)).key(keys.usage_day(tenant, &clock::utc_day(now)));
        inv.arg(tasks).arg(interval_us).arg(burst).arg(quota.max_queued).arg(quota.max_tokens_per_day.unwrap_or(0));
        inv.arg(TOKENS_FIELD);
        let mut conn = self.redis().shared();
        let (verdict, a, b): (String, i64, i64) = inv.invoke_async(&mut conn).await?;
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        match (verdict.as_str(), quota.rate) {
            ("ok", rate) => {
                Ok(Admitted { rate: rate.map(|r| RateState { limit: r.burst, remaining: count(a), reset_s: count(b) }) })
            }
            ("rate", Some(rate)) => Err(QuotaError::RateLimited {
                per_second: rate.per_second,
                retry_after_s: count(a).max(1),
                state: RateState { limit: rate.burst, remaining: 0, reset_s: count(b).max(1) },
            }),
            ("tokens", _) => Err(QuotaError::TokensSpent {
                max: quota.max_tokens_per_day.unwrap_or(0),
                retry_after_s: (clock::ms_to_next_utc_day(now) as u64).div_ceil(1000).max(1),
            }),
            ("queued", _) => Err(QuotaError::QueueFull { max_queued: quota.max_queued, queued: count(a) }),
            _ => Err(QueueError::Corrupt(format!("admit answered {verdict}")).into()),
        }
    }

    /// Changes a tenant's queued count by `delta`: gives back room an
    /// admitted request did not use, or counts tasks queued or started
    /// elsewhere than through [`Queue::admit`].
    pub async fn count_queued(&self, tenant: &TenantId, delta: i64) -> Result<(), QueueError> {
        if delta == 0 {
            return Ok(());
        }
        let _: Vec<i64> = self.redis().query_many(vec![redis::Cmd::incr(self.keys().tenant_queued(tenant), delta)]).await?;
        Ok(())
    }

    /// Refuses a new schedule when the tenant keeps its `max_schedules`.
    pub async fn check_schedules(&self, tenant: &TenantId, quota: &TenantSettings) -> Result<(), QuotaError> {
        let kept: Vec<u64> = self.redis().query_many(vec![redis::Cmd::zcard(self.keys().tenant_schedules(tenant))]).await?;
        if kept.first().copied().unwrap_or(0) >= quota.max_schedules {
            return Err(QuotaError::SchedulesFull { max: quota.max_schedules });
        }
        Ok(())
    }

    /// A tenant's queued count.
    pub async fn queued_count(&self, tenant: &TenantId) -> Result<u64, QueueError> {
        let got: Vec<Option<i64>> = self.redis().query_many(vec![redis::Cmd::get(self.keys().tenant_queued(tenant))]).await?;
        Ok(got.into_iter().flatten().next().map_or(0, |n| u64::try_from(n).unwrap_or(0)))
    }
}
