//! Counting usage in Redis: the fenced script that adds an attempt's amounts
//! to its task and its tenant's day, the outcome counts, and reading a
//! tenant's days back. What the counters mean is [`flotilla_types::usage`].

use std::collections::BTreeMap;
use std::sync::LazyLock;

use redis::Script;

use super::Queue;
use super::{Reader, Runner};
use crate::error::QueueError;
use crate::redis_lua;
use flotilla_types::clock;
use flotilla_types::ids::TenantId;
use flotilla_types::usage::{Added, Amount, Counted, DayTokens, Meter, COST_FIELD, MAX_USAGE_DAYS, TOKENS_FIELD, USAGE_TTL_S};

/// Adds amounts to a running attempt's task and to its tenant's day.
/// `KEYS[1]` the task hash, `KEYS[2]` (when given) the day hash, `KEYS[3]`
/// (when given) the tenant's all-time totals; `ARGV[1]`
/// attempt, `ARGV[2]` worker id, `ARGV[3]` the day hash's TTL in seconds,
/// `ARGV[4]` the tenant's max tokens per day (0 for none), `ARGV[5]` its
/// max cost per day in micro-dollars (0 for none), then counter, amount
/// pairs. Returns the task's counters as JSON, the tenant's tokens and
/// cost of the day (each -1 when not read: no day hash or no limit), or
/// `{'fenced', -1, -1}` (and counts nothing).
pub(crate) static ADD: LazyLock<Script> = LazyLock::new(|| redis_lua::script(&[include_str!("lua/add_usage.lua")], &[]));

impl Queue {
    /// On a cluster, where the day hash lies in another slot than the
    /// task's: adds the counters to it (and to the tenant's totals, when
    /// kept) in calls of their own, and reads the day's tokens and cost
    /// (as `[tokens, cost]`) when `read`.
    async fn count_day_apart(
        &self,
        tenant: &TenantId,
        day_key: &str,
        counters: &[(String, u64)],
        read: bool,
    ) -> Result<Option<[u64; 2]>, QueueError> {
        if !counters.is_empty() {
            let mut cmds: Vec<redis::Cmd> = counters.iter().map(|(f, n)| redis::Cmd::hincr(day_key, f, *n)).collect();
            cmds.push(redis::Cmd::expire(day_key, USAGE_TTL_S as i64));
            if self.settings().tenant_totals {
                let total = self.keys().usage_total(tenant);
                cmds.extend(counters.iter().map(|(f, n)| redis::Cmd::hincr(&total, f, *n)));
            }
            let _: Vec<redis::Value> = self.redis().query_many(cmds).await?;
        }
        if !read {
            return Ok(None);
        }
        let mut fields = redis::cmd("HMGET");
        fields.arg(day_key).arg(TOKENS_FIELD).arg(COST_FIELD);
        let spent: Vec<Vec<Option<u64>>> = self.redis().query_many(vec![fields]).await?;
        let spent = spent.into_iter().next().unwrap_or_default();
        Ok(Some([spent.first().copied().flatten().unwrap_or(0), spent.get(1).copied().flatten().unwrap_or(0)]))
    }

    /// Sets the TTL of the day keys a count of outcomes made.
    async fn expire_made_days(&self, keys: &[(String, i64)], totals: &[i64]) -> Result<(), QueueError> {
        // A day key is made by the first count of some field; only a count
        // that made its field can have made the key, so only then is its
        // TTL set (the other writer of day keys sets it each time).
        let made: Vec<redis::Cmd> = keys
            .iter()
            .zip(totals)
            .filter(|((_, n), total)| **total == *n)
            .map(|((key, _), _)| redis::Cmd::expire(key, USAGE_TTL_S as i64))
            .collect();
        if !made.is_empty() {
            let _: Vec<redis::Value> = self.redis().query_many(made).await?;
        }
        Ok(())
    }
}

impl Runner<'_> {
    /// Adds `amounts` to a running attempt's task and to its tenant's day;
    /// the task's counters after, and where the tenant's tokens and cost of
    /// today stand (read in the same step on a single server). The count
    /// that takes the tenant to its `max_tokens_per_day` or
    /// `max_cost_usd_per_day` holds its queued tasks back until the next
    /// UTC day.
    pub async fn add_usage(
        self,
        task_key: String,
        tenant: &TenantId,
        attempt: u32,
        owner: &str,
        amounts: &[Amount],
    ) -> Result<Added, QueueError> {
        let counters: Vec<(String, u64)> = amounts.iter().flat_map(Amount::counters).filter(|(_, n)| *n > 0).collect();
        let now = self.now_ms();
        let day_key = self.keys().usage_day(tenant, &clock::utc_day(now));
        let settings = self.settings().tenants.get(tenant);
        let max = settings.max_tokens_per_day;
        let max_cost = settings.max_cost_usd_per_day.map(|usd| usd.micros());
        let cluster = self.redis().is_cluster();
        let mut inv = ADD.prepare_invoke();
        inv.key(task_key);
        if !cluster {
            inv.key(&day_key);
            if self.settings().tenant_totals {
                inv.key(self.keys().usage_total(tenant));
            }
        }
        inv.arg(attempt).arg(owner).arg(USAGE_TTL_S).arg(max.unwrap_or(0)).arg(max_cost.unwrap_or(0));
        for (field, n) in &counters {
            inv.arg(field).arg(n);
        }
        let mut conn = self.redis().shared();
        let (answer, day_tokens, day_cost): (String, i64, i64) = inv.invoke_async(&mut conn).await?;
        if answer == "fenced" {
            return Ok(Added::Fenced);
        }
        let mut spent_today = [u64::try_from(day_tokens).unwrap_or(0), u64::try_from(day_cost).unwrap_or(0)];
        if cluster {
            let read = self.count_day_apart(tenant, &day_key, &counters, max.is_some() || max_cost.is_some()).await?;
            spent_today = read.unwrap_or_default();
        }
        let tokens_spent = max.is_some_and(|max| spent_today[0] >= max);
        let cost_spent = max_cost.is_some_and(|max| spent_today[1] >= max);
        let mut day = DayTokens::Left;
        if tokens_spent || cost_spent {
            let resume_at_ms = now + clock::ms_to_next_utc_day(now);
            if counters.iter().any(|(field, _)| field == TOKENS_FIELD || field == COST_FIELD) {
                self.hold_back_until(tenant, resume_at_ms).await?;
            }
            day = DayTokens::Spent { resume_at_ms };
        }
        Ok(Added::Counted(Counted { meter: Meter::from_json(&answer), day }))
    }

    /// Counts ended tasks by outcome in their tenants' usage of today.
    pub async fn count_outcomes(self, ended: &[(&TenantId, &'static str)]) -> Result<(), QueueError> {
        if ended.is_empty() {
            return Ok(());
        }
        let day = clock::utc_day(self.now_ms());
        let mut per: BTreeMap<(&str, &str), i64> = BTreeMap::new();
        for (tenant, outcome) in ended {
            *per.entry((tenant.as_str(), outcome)).or_default() += 1;
        }
        let mut keys = Vec::new();
        let mut cmds = Vec::new();
        for ((tenant, outcome), n) in &per {
            let Ok(tenant) = TenantId::parse(tenant) else { continue };
            let key = self.keys().usage_day(&tenant, &day);
            cmds.push(redis::Cmd::hincr(&key, format!("tasks:{outcome}"), *n));
            keys.push((key, *n));
        }
        let days = keys.len();
        if self.settings().tenant_totals {
            for ((tenant, outcome), n) in &per {
                let Ok(tenant) = TenantId::parse(tenant) else { continue };
                cmds.push(redis::Cmd::hincr(self.keys().usage_total(&tenant), format!("tasks:{outcome}"), *n));
            }
        }
        let mut totals: Vec<i64> = self.redis().query_many(cmds).await?;
        totals.truncate(days);
        self.expire_made_days(&keys, &totals).await
    }
}

impl Reader<'_> {
    /// Every tenant's all-time totals (kept while per-tenant metrics are
    /// on), by tenant name; tenants with nothing counted are left out.
    pub async fn tenant_totals(self) -> Result<Vec<(TenantId, Meter)>, QueueError> {
        let names: Vec<Vec<String>> = self.redis().query_many(vec![redis::Cmd::smembers(self.keys().tenants())]).await?;
        let mut tenants: Vec<TenantId> = names.into_iter().flatten().filter_map(|t| TenantId::parse(&t).ok()).collect();
        tenants.sort();
        let reads = tenants.iter().map(|t| redis::Cmd::hgetall(self.keys().usage_total(t))).collect();
        let got: Vec<BTreeMap<String, u64>> = self.redis().query_many(reads).await?;
        Ok(tenants.into_iter().zip(got).filter(|(_, m)| !m.is_empty()).map(|(t, m)| (t, Meter(m))).collect())
    }

    /// A tenant's usage per UTC day from `from` to `to` (epoch ms of their
    /// midnights), oldest first; days with nothing counted are left out.
    pub async fn usage_days(self, tenant: &TenantId, from_ms: i64, to_ms: i64) -> Result<Vec<(String, Meter)>, QueueError> {
        let days: Vec<String> = (0..=(to_ms - from_ms) / clock::DAY_MS)
            .take(MAX_USAGE_DAYS as usize)
            .map(|i| clock::utc_day(from_ms + i * clock::DAY_MS))
            .collect();
        let reads = days.iter().map(|d| redis::Cmd::hgetall(self.keys().usage_day(tenant, d))).collect();
        let got: Vec<BTreeMap<String, u64>> = self.redis().query_many(reads).await?;
        Ok(days.into_iter().zip(got).filter(|(_, m)| !m.is_empty()).map(|(d, m)| (d, Meter(m))).collect())
    }
}
