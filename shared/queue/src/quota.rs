//! Admission: whether a tenant may add tasks now, decided in one Redis
//! script so every API replica shares the same limits.
//!
//! One call of [`ADMIT`], in the tenant's scheduler shard, checks the
//! tenant's tokens spent today against `max_tokens_per_day` (spending
//! happens while tasks run, not at submit), then its submit rate (a GCRA
//! token bucket whose state is one timestamp, read against Redis's own
//! clock so replicas never disagree), then its waiting tasks against
//! `max_queued`. Only when all pass does it take the rate's token and
//! reserve room for the new tasks; a refused request changes nothing. On a
//! single server the day's usage hash goes into the same call, so a
//! request is admitted in one round trip whatever limits its tenant has;
//! on a cluster the day's hash lies in the tenant's own slot, so its tokens
//! are read first, in a call of their own. A tenant with a
//! `max_cost_usd_per_day` has its cost of today (micro-dollars, the day
//! hash's `cost_micros`) read first, in a call of its own: spending, and
//! the hold of its queued tasks by the count that crosses the limit, happen
//! while tasks run (`queue/usage.rs`), so that read never admits what the
//! count has stopped.
//!
//! Invariant: a tenant's waiting tasks (the shard's exact `queued` and
//! `delayed` counts, which the scheduler's scripts keep) plus the room held
//! by live reservations never exceed `max_queued` when a request is
//! admitted. A reservation is dropped once its request has queued its tasks
//! (or made none), and lapses by itself if the API process dies midway, so
//! room never leaks; between a request's enqueue and the drop its tasks
//! count twice, which only ever refuses early, never admits past the limit.

use std::sync::LazyLock;

use redis::Script;

use crate::error::QueueError;
use crate::queue::{Queue, Submitted, Verdict, ADMIT_FN};
use crate::queue::{Reader, Submitter};
use crate::redis_lua;
use flotilla_config::TenantSettings;
use flotilla_types::clock;
use flotilla_types::ids::TenantId;
use flotilla_types::task::TaskSpec;
use flotilla_types::usage::{COST_FIELD, TOKENS_FIELD};

/// Retry-After of a tenant whose queue is full: its tasks start within
/// moments when workers are free.
const QUEUE_FULL_RETRY_S: u64 = 1;

/// Retry-After of a tenant that keeps all the schedules it may: only
/// deleting one makes room.
const SCHEDULES_FULL_RETRY_S: u64 = 60;

/// How long a reservation holds room when its request never drops it.
const RESERVATION_MS: u64 = 120_000;

/// [`ADMIT_FN`] as a script of its own, with a reservation. `KEYS[1]` the
/// tenant's hash in its shard (`queued`, `delayed`), `KEYS[2]` the rate
/// key, `KEYS[3]` the reservations, `KEYS[4]` (when given) the tenant's
/// usage hash of today; `ARGV[1]` tasks asked for, `ARGV[2]` the rate's
/// emission interval in µs (0: no rate), `ARGV[3]` burst, `ARGV[4]` max
/// queued, `ARGV[5]` the reservation's ticket, `ARGV[6]` how long it holds
/// (ms), `ARGV[7]` max tokens per day (read only with `KEYS[4]`).
pub(crate) static ADMIT: LazyLock<Script> = LazyLock::new(|| redis_lua::script(&[ADMIT_FN, include_str!("lua/admit.lua")], &[]));

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
    #[error("the tenant spent its max_cost_usd_per_day of ${max_usd}; submits resume at the next UTC day")]
    CostSpent { max_usd: f64, retry_after_s: u64 },
    #[error("the tenant keeps its max_schedules of {max} schedules")]
    SchedulesFull { max: u64 },
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl QuotaError {
    /// Whole seconds after which the same request may pass.
    pub fn retry_after_s(&self) -> Option<u64> {
        match self {
            QuotaError::RateLimited { retry_after_s, .. }
            | QuotaError::TokensSpent { retry_after_s, .. }
            | QuotaError::CostSpent { retry_after_s, .. } => Some(*retry_after_s),
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

/// An admitted request: room for its tasks is reserved until
/// [`Submitter::release_admission`] drops the reservation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    /// The rate bucket after this request, when the tenant has a rate.
    pub rate: Option<RateState>,
    tenant: TenantId,
    reservation: String,
}

/// The refusal of a tenant that spent its `max` tokens of today, until
/// the next UTC day.
fn tokens_spent(max: u64, now: i64) -> QuotaError {
    QuotaError::TokensSpent { max, retry_after_s: (clock::ms_to_next_utc_day(now) as u64).div_ceil(1000).max(1) }
}

/// What admission's `verdict` means for a tenant with `quota` whose
/// daily token limit read was `max_tokens`: the rate bucket's state (when
/// it has a rate) or the refusal.
fn judged(verdict: Verdict, quota: &TenantSettings, max_tokens: u64, now: i64) -> Result<Option<RateState>, QuotaError> {
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    match (verdict, quota.rate) {
        (Verdict::Admitted { remaining, reset_s }, rate) => {
            Ok(rate.map(|r| RateState { limit: r.burst, remaining: count(remaining), reset_s: count(reset_s) }))
        }
        (Verdict::RateLimited { retry_after_s, reset_s }, Some(rate)) => Err(QuotaError::RateLimited {
            per_second: rate.per_second,
            retry_after_s: count(retry_after_s).max(1),
            state: RateState { limit: rate.burst, remaining: 0, reset_s: count(reset_s).max(1) },
        }),
        (Verdict::QueueFull { waiting }, _) => {
            Err(QuotaError::QueueFull { max_queued: quota.max_queued, queued: count(waiting) })
        }
        (Verdict::TokensSpent, _) => Err(tokens_spent(max_tokens, now)),
        (Verdict::RateLimited { .. }, None) => {
            Err(QueueError::Corrupt("admit answered rate for a tenant without one".into()).into())
        }
    }
}

impl Queue {
    /// Refuses a request once the tenant spent its `max_cost_usd_per_day`.
    async fn check_cost_today(&self, tenant: &TenantId, quota: &TenantSettings, now: i64) -> Result<(), QuotaError> {
        let Some(max) = quota.max_cost_usd_per_day else { return Ok(()) };
        let read = redis::Cmd::hget(self.keys().usage_day(tenant, &clock::utc_day(now)), COST_FIELD);
        let spent: Vec<Option<u64>> = self.redis().query_many(vec![read]).await?;
        if spent.into_iter().flatten().next().unwrap_or(0) >= max.micros() {
            let retry_after_s = (clock::ms_to_next_utc_day(now) as u64).div_ceil(1000).max(1);
            return Err(QuotaError::CostSpent { max_usd: f64::from(max), retry_after_s });
        }
        Ok(())
    }

    /// Refuses a request once the tenant spent its `max_tokens_per_day`.
    async fn check_tokens_today(&self, tenant: &TenantId, quota: &TenantSettings, now: i64) -> Result<(), QuotaError> {
        let Some(max) = quota.max_tokens_per_day else { return Ok(()) };
        let read = redis::Cmd::hget(self.keys().usage_day(tenant, &clock::utc_day(now)), TOKENS_FIELD);
        let spent: Vec<Option<u64>> = self.redis().query_many(vec![read]).await?;
        if spent.into_iter().flatten().next().unwrap_or(0) >= max {
            return Err(tokens_spent(max, now));
        }
        Ok(())
    }
}

impl Submitter<'_> {
    /// Admits a request that adds `tasks` tasks for `tenant` under `quota`,
    /// reserving room for them, or says why not (and changes nothing).
    pub async fn admit(self, tenant: &TenantId, tasks: u64, quota: &TenantSettings) -> Result<Admitted, QuotaError> {
        let now = self.now_ms();
        self.check_cost_today(tenant, quota, now).await?;
        let tokens_in_call = !self.redis().is_cluster();
        if !tokens_in_call {
            self.check_tokens_today(tenant, quota, now).await?;
        }
        let keys = self.keys();
        let (interval_us, burst) = quota.rate.map_or((0, 0), |r| ((1_000_000.0 / r.per_second).ceil() as u64, r.burst));
        let ticket = ulid::Ulid::new().to_string();
        let mut inv = ADMIT.prepare_invoke();
        inv.key(keys.tenant_state(tenant)).key(keys.tenant_rate(tenant)).key(keys.tenant_admitting(tenant));
        let max_tokens = quota.max_tokens_per_day.filter(|_| tokens_in_call);
        if max_tokens.is_some() {
            inv.key(keys.usage_day(tenant, &clock::utc_day(now)));
        }
        inv.arg(tasks).arg(interval_us).arg(burst).arg(quota.max_queued).arg(&ticket).arg(RESERVATION_MS);
        inv.arg(max_tokens.unwrap_or(0));
        let mut conn = self.redis().shared();
        let verdict = Verdict::of_reply(inv.invoke_async(&mut conn).await?)?;
        let rate = judged(verdict, quota, max_tokens.unwrap_or(0), now)?;
        Ok(Admitted { rate, tenant: tenant.clone(), reservation: format!("{ticket}:{tasks}") })
    }

    /// Admits and queues one task of `tenant` under `quota`: on a single
    /// server in one script call ([`Submitter::submit_one`]); otherwise (or with
    /// an idempotency key) admission with a reservation, the submit, and the
    /// reservation's drop. Returns the task and, when the tenant has a
    /// rate, where its bucket stands.
    pub async fn submit_admitted(
        self,
        tenant: &TenantId,
        spec: TaskSpec,
        quota: &TenantSettings,
    ) -> Result<(Submitted, Option<RateState>), QuotaError> {
        if !self.submits_in_one_call(&spec) {
            let admitted = self.admit(tenant, 1, quota).await?;
            let submitted = self.submit(tenant, spec).await;
            if let Err(e) = self.release_admission(&admitted).await {
                tracing::warn!(error = %e, "could not drop a queue reservation; it lapses by itself");
            }
            return Ok((submitted?, admitted.rate));
        }
        self.check_cost_today(tenant, quota, self.now_ms()).await?;
        let (verdict, submitted) = self.submit_one(tenant, &spec, quota).await?;
        let rate = judged(verdict, quota, quota.max_tokens_per_day.unwrap_or(0), self.now_ms())?;
        let submitted = submitted.ok_or_else(|| QueueError::Corrupt("an admitted submit made no task".into()))?;
        Ok((submitted, rate))
    }

    /// Drops an admitted request's reservation once its tasks are queued
    /// (they count as queued from then on) or it made none after all.
    pub async fn release_admission(self, admitted: &Admitted) -> Result<(), QueueError> {
        let drop = redis::Cmd::zrem(self.keys().tenant_admitting(&admitted.tenant), &admitted.reservation);
        let _: Vec<i64> = self.redis().query_many(vec![drop]).await?;
        Ok(())
    }

    /// Refuses a new schedule when the tenant keeps its `max_schedules`.
    pub async fn check_schedules(self, tenant: &TenantId, quota: &TenantSettings) -> Result<(), QuotaError> {
        let kept: Vec<u64> = self.redis().query_many(vec![redis::Cmd::zcard(self.keys().tenant_schedules(tenant))]).await?;
        if kept.first().copied().unwrap_or(0) >= quota.max_schedules {
            return Err(QuotaError::SchedulesFull { max: quota.max_schedules });
        }
        Ok(())
    }
}

impl Reader<'_> {
    /// The sandboxes a tenant holds fleet-wide (its running tasks' and its
    /// kept-alive ones), as `max_sandboxes` counts them.
    pub async fn sandboxes_held(self, tenant: &TenantId) -> Result<u64, QueueError> {
        let read = redis::Cmd::hget(self.keys().tenant_state(tenant), "sandboxed");
        let got: Vec<Option<i64>> = self.redis().query_many(vec![read]).await?;
        Ok(got.into_iter().flatten().next().map_or(0, |n| u64::try_from(n).unwrap_or(0)))
    }

    /// A tenant's waiting tasks (`queued` and `delayed`), as admission counts them.
    pub async fn queued_count(self, tenant: &TenantId) -> Result<u64, QueueError> {
        let mut read = redis::cmd("HMGET");
        read.arg(self.keys().tenant_state(tenant)).arg("queued").arg("delayed");
        let got: Vec<Vec<Option<i64>>> = self.redis().query_many(vec![read]).await?;
        Ok(got.into_iter().flatten().flatten().map(|n| u64::try_from(n).unwrap_or(0)).sum())
    }
}

/// Admission's Redis script by name (see `crate::testing`).
#[cfg(feature = "testing")]
pub(crate) fn lua_scripts() -> Vec<(&'static str, &'static Script)> {
    vec![("quota/admit", &ADMIT)]
}
