//! `/v1/usage`: what the caller's tenant used per UTC day, and its limits
//! with what is left of them. Only the caller's own tenant is ever read.

use axum::extract::State;
use axum::Json;
use flotilla_types::clock;
use flotilla_types::cost::usd;
use flotilla_types::usage::{Meter, UsageView, MAX_USAGE_DAYS};
use flotilla_types::ValidationError;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::extract::QueryParams;
use crate::state::AppState;

/// Days a usage read covers when `from` is not given: today and the 29 before.
const DEFAULT_DAYS: i64 = 30;

/// The range of `GET /v1/usage`.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct UsageParams {
    /// First UTC day, `YYYY-MM-DD` (or an RFC 3339 time on it); default 29
    /// days before `to`. At most 100 days are read: an earlier `from` is
    /// moved up to the 100th day before `to` (the answer's `from` says where
    /// the range starts). A `from` after `to` is an empty range.
    pub from: Option<String>,
    /// Last UTC day, `YYYY-MM-DD` (or an RFC 3339 time on it); default today.
    pub to: Option<String>,
    /// Only `day`, the default.
    pub group_by: Option<String>,
}

/// One UTC day of usage.
#[derive(Debug, Serialize, ToSchema)]
pub struct UsageDay {
    /// `YYYY-MM-DD`.
    pub day: String,
    #[serde(flatten)]
    pub usage: UsageView,
}

/// The tenant's submit rate.
#[derive(Debug, Serialize, ToSchema)]
pub struct RateLimit {
    pub per_second: f64,
    pub burst: u64,
}

/// The tenant's limits and what is left of them now.
#[derive(Debug, Serialize, ToSchema)]
pub struct UsageLimits {
    pub max_queued: u64,
    /// Tasks queued now.
    pub queued: u64,
    pub queued_left: u64,
    pub rate: Option<RateLimit>,
    pub max_tokens_per_day: Option<u64>,
    /// Tokens spent today (UTC).
    pub tokens_today: u64,
    pub tokens_left_today: Option<u64>,
    /// US dollars of model calls per UTC day; `null` for no limit.
    pub max_cost_usd_per_day: Option<f64>,
    /// What the tenant's model calls cost today (UTC), in US dollars.
    pub cost_today_usd: f64,
    pub cost_left_today_usd: Option<f64>,
    pub max_sandboxes: Option<u64>,
    /// Sandboxes the tenant holds now, fleet-wide: its running tasks' and
    /// its kept-alive ones, as `max_sandboxes` counts them.
    pub sandboxes: u64,
    pub sandboxes_left: Option<u64>,
    pub max_schedules: u64,
}

/// The answer of `GET /v1/usage`.
#[derive(Debug, Serialize, ToSchema)]
pub struct UsageReport {
    pub from: String,
    pub to: String,
    pub group_by: String,
    /// Days with anything counted, oldest first.
    pub days: Vec<UsageDay>,
    /// The sum of `days`.
    pub total: UsageView,
    pub limits: UsageLimits,
}

impl UsageParams {
    /// The first and last day's midnights (epoch ms).
    fn range(&self, now_ms: i64) -> Result<(i64, i64), ValidationError> {
        if self.group_by.as_deref().is_some_and(|g| g != "day") {
            return Err(ValidationError::at("group_by", "group_by must be day"));
        }
        let today = now_ms - now_ms.rem_euclid(clock::DAY_MS);
        let to = day_param("to", self.to.as_deref())?.unwrap_or(today);
        let from = day_param("from", self.from.as_deref())?.unwrap_or(to - (DEFAULT_DAYS - 1) * clock::DAY_MS);
        Ok((from.max(to - (MAX_USAGE_DAYS - 1) * clock::DAY_MS), to))
    }
}

/// A day parameter: `YYYY-MM-DD`, or an RFC 3339 time taken as its UTC day.
fn day_param(field: &str, raw: Option<&str>) -> Result<Option<i64>, ValidationError> {
    let Some(raw) = raw else { return Ok(None) };
    let day = clock::parse_utc_day(raw).or_else(|| clock::parse_rfc3339(raw).map(|ms| ms - ms.rem_euclid(clock::DAY_MS)));
    day.map(Some).ok_or_else(|| ValidationError::at(field, format!("{field} must be a day like 2026-01-31")))
}

/// The caller's tenant's usage per UTC day, and its limits.
#[utoipa::path(
    get,
    path = "/v1/usage",
    tag = "usage",
    params(UsageParams),
    responses(
        (status = 200, description = "Usage per day of the caller's tenant", body = UsageReport),
        (status = 400, description = "Bad range", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn usage(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    QueryParams(params): QueryParams<UsageParams>,
) -> Result<Json<UsageReport>, ApiError> {
    let queue = state.queue();
    let now = queue.now_ms();
    let (from, to) = params.range(now)?;
    let days = if from <= to { queue.reader().usage_days(&tenant, from, to).await? } else { Vec::new() };
    let today = queue.reader().usage_days(&tenant, now, now).await?.pop().map(|(_, m)| m).unwrap_or_default();
    let mut total = Meter::default();
    for (_, meter) in &days {
        total.add(meter);
    }
    let quota = state.config().tenants.get(&tenant);
    let queued = queue.reader().queued_count(&tenant).await?;
    let sandboxes = queue.reader().sandboxes_held(&tenant).await?;
    let limits = UsageLimits {
        max_queued: quota.max_queued,
        queued,
        queued_left: quota.max_queued.saturating_sub(queued),
        rate: quota.rate.map(|r| RateLimit { per_second: r.per_second, burst: r.burst }),
        max_tokens_per_day: quota.max_tokens_per_day,
        tokens_today: today.tokens(),
        tokens_left_today: quota.max_tokens_per_day.map(|m| m.saturating_sub(today.tokens())),
        max_cost_usd_per_day: quota.max_cost_usd_per_day.map(f64::from),
        cost_today_usd: usd(today.cost_micros()),
        cost_left_today_usd: quota.max_cost_usd_per_day.map(|m| usd(m.micros().saturating_sub(today.cost_micros()))),
        max_sandboxes: quota.max_sandboxes,
        sandboxes,
        sandboxes_left: quota.max_sandboxes.map(|m| m.saturating_sub(sandboxes)),
        max_schedules: quota.max_schedules,
    };
    Ok(Json(UsageReport {
        from: clock::utc_day(from),
        to: clock::utc_day(to),
        group_by: "day".into(),
        days: days.into_iter().map(|(day, meter)| UsageDay { day, usage: meter.view() }).collect(),
        total: total.view(),
        limits,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(from: Option<&str>, to: Option<&str>, group_by: Option<&str>) -> UsageParams {
        UsageParams { from: from.map(str::to_owned), to: to.map(str::to_owned), group_by: group_by.map(str::to_owned) }
    }

    #[test]
    fn the_default_range_is_the_last_thirty_days() {
        let now = clock::parse_rfc3339("2026-03-31T12:00:00Z").expect("time");
        let (from, to) = params(None, None, None).range(now).expect("valid");
        assert_eq!((clock::utc_day(from), clock::utc_day(to)), ("2026-03-02".into(), "2026-03-31".into()));
    }

    #[test]
    fn bad_ranges_name_their_parameter() {
        let now = clock::now_ms();
        for (p, field) in [
            (params(Some("yesterday"), None, None), "from"),
            (params(None, Some("2026-13-01"), None), "to"),
            (params(None, None, Some("week")), "group_by"),
            (params(Some(""), None, None), "from"),
            (params(None, None, Some("")), "group_by"),
        ] {
            assert_eq!(p.range(now).expect_err("refused").field.as_deref(), Some(field), "{p:?}");
        }
    }

    /// The rules the document cannot state between two parameters are not
    /// errors: `from` after `to` is an empty range, a range over 100 days is
    /// cut to the 100 days ending at `to`.
    #[test]
    fn ranges_are_read_as_given_or_cut_to_a_hundred_days() {
        let now = clock::now_ms();
        let day = |ms| clock::utc_day(ms);
        let (from, to) = params(Some("2026-03-02"), Some("2026-03-01"), None).range(now).expect("valid");
        assert!(from > to, "an empty range");
        let (from, to) = params(Some("2025-01-01"), Some("2026-01-01T10:00:00Z"), None).range(now).expect("valid");
        assert_eq!((day(from), day(to)), ("2025-09-24".to_owned(), "2026-01-01".to_owned()));
        assert_eq!((to - from) / clock::DAY_MS + 1, MAX_USAGE_DAYS);
    }
}
