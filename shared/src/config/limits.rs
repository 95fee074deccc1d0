//! The limits that keep the API and each tenant within bounds: how long a
//! request may take, how many the API serves at once, and each tenant's
//! quotas (`[tenants.<name>]` in the config file): tasks queued, submits per
//! second, tokens per UTC day, sandboxes held and schedules kept.
//!
//! Everything is bounded by default: a tenant nobody configured still has
//! [`DEFAULT_MAX_QUEUED`] and [`DEFAULT_MAX_SCHEDULES`], because Redis runs
//! `noeviction` and a full Redis would refuse every tenant's writes.

use std::collections::HashMap;
use std::time::Duration;

use super::{ConfigError, Settings};
use crate::ids::TenantId;

/// Tasks a tenant may have queued when its settings name no `max_queued`.
pub const DEFAULT_MAX_QUEUED: u64 = 100_000;
/// Schedules a tenant may keep when its settings name no `max_schedules`.
pub const DEFAULT_MAX_SCHEDULES: u64 = 100;
/// How long a request (other than an event stream) may take by default.
pub const DEFAULT_REQUEST_TIMEOUT_MS: usize = 30_000;
/// Requests the API serves at once by default; more wait their turn.
pub const DEFAULT_API_CONCURRENCY: usize = 1_024;

/// A token bucket: `per_second` submits on average, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub per_second: f64,
    pub burst: u64,
}

/// One tenant's quotas; `None` means no limit of that kind.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantQuota {
    pub max_queued: u64,
    pub rate: Option<Rate>,
    pub max_tokens_per_day: Option<u64>,
    pub max_sandboxes: Option<u64>,
    pub max_schedules: u64,
}

impl Default for TenantQuota {
    fn default() -> Self {
        Self {
            max_queued: DEFAULT_MAX_QUEUED,
            rate: None,
            max_tokens_per_day: None,
            max_sandboxes: None,
            max_schedules: DEFAULT_MAX_SCHEDULES,
        }
    }
}

/// The API's bounds and every tenant's quotas.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// How long any request but an event stream may take.
    pub request_timeout: Duration,
    /// Requests served at once, API-wide.
    pub api_concurrency: usize,
    /// Prometheus counters per tenant on `/metrics` (off by default: tenant
    /// labels can be many).
    pub tenant_metrics: bool,
    /// Quotas of the tenants the config file names.
    pub tenants: HashMap<TenantId, TenantQuota>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_millis(DEFAULT_REQUEST_TIMEOUT_MS as u64),
            api_concurrency: DEFAULT_API_CONCURRENCY,
            tenant_metrics: false,
            tenants: HashMap::new(),
        }
    }
}

impl Limits {
    /// Reads the limits from the settings and the config file's `tenants` table.
    pub(super) fn from_settings(s: &Settings, tenants: Option<&toml::Table>) -> Result<Self, ConfigError> {
        Ok(Self {
            request_timeout: s.millis("FLOTILLA_REQUEST_TIMEOUT_MS", DEFAULT_REQUEST_TIMEOUT_MS as u64)?,
            api_concurrency: s.positive("FLOTILLA_API_CONCURRENCY", DEFAULT_API_CONCURRENCY)?,
            tenant_metrics: match s.get("FLOTILLA_TENANT_METRICS").map(str::trim) {
                None | Some("0" | "false") => false,
                Some("1" | "true") => true,
                Some(other) => return Err(ConfigError::new("FLOTILLA_TENANT_METRICS", format!("{other:?} is not 1 or 0"))),
            },
            tenants: match tenants {
                Some(table) => parse_tenants(table)?,
                None => HashMap::new(),
            },
        })
    }

    /// The quotas of `tenant`: its own, or the defaults.
    pub fn quota(&self, tenant: &TenantId) -> TenantQuota {
        self.tenants.get(tenant).cloned().unwrap_or_default()
    }
}

/// The error of a bad tenant setting, named as in the config file.
fn bad(tenant: &str, key: &str, problem: &str) -> ConfigError {
    ConfigError::new("FLOTILLA_CONFIG", format!("tenants.{tenant}.{key}: {problem}"))
}

/// Keys of `[tenants.<name>]` that other parts of the fleet read.
const OTHER_TENANT_KEYS: &[&str] = &["weight", "max_running"];

fn parse_tenants(table: &toml::Table) -> Result<HashMap<TenantId, TenantQuota>, ConfigError> {
    let mut tenants = HashMap::new();
    for (name, value) in table {
        let tenant = TenantId::parse(name).map_err(|e| bad(name, "", &e.to_string()))?;
        let toml::Value::Table(settings) = value else {
            return Err(bad(name, "", "must be a table"));
        };
        tenants.insert(tenant, parse_quota(name, settings)?);
    }
    Ok(tenants)
}

fn parse_quota(name: &str, settings: &toml::Table) -> Result<TenantQuota, ConfigError> {
    let mut quota = TenantQuota::default();
    for (key, value) in settings {
        let count = || match value.as_integer() {
            Some(n) if n > 0 => Ok(n as u64),
            _ => Err(bad(name, key, "must be a positive whole number")),
        };
        match key.as_str() {
            "max_queued" => quota.max_queued = count()?,
            "max_tokens_per_day" => quota.max_tokens_per_day = Some(count()?),
            "max_sandboxes" => quota.max_sandboxes = Some(count()?),
            "max_schedules" => quota.max_schedules = count()?,
            "rate" => quota.rate = Some(parse_rate(name, value)?),
            other if OTHER_TENANT_KEYS.contains(&other) => {}
            other => return Err(bad(name, other, "unknown setting")),
        }
    }
    Ok(quota)
}

fn parse_rate(name: &str, value: &toml::Value) -> Result<Rate, ConfigError> {
    let problem = "must be { per_second = <positive number>, burst = <positive whole number> }";
    let Some(table) = value.as_table() else { return Err(bad(name, "rate", problem)) };
    let per_second = match table.get("per_second") {
        Some(toml::Value::Integer(n)) => *n as f64,
        Some(toml::Value::Float(f)) => *f,
        _ => return Err(bad(name, "rate", problem)),
    };
    let burst = table.get("burst").and_then(toml::Value::as_integer).unwrap_or(0);
    if !(per_second > 0.0 && per_second.is_finite()) || burst <= 0 || table.len() != 2 {
        return Err(bad(name, "rate", problem));
    }
    Ok(Rate { per_second, burst: burst as u64 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenants(text: &str) -> Result<HashMap<TenantId, TenantQuota>, ConfigError> {
        let table: toml::Table = text.parse().expect("toml");
        parse_tenants(table["tenants"].as_table().expect("tenants"))
    }

    #[test]
    fn a_tenant_table_sets_its_quotas_and_leaves_the_rest_default() {
        let parsed = tenants(
            "[tenants.acme]\nweight = 3\nmax_queued = 5\nrate = { per_second = 2, burst = 4 }\nmax_tokens_per_day = 1000\n",
        )
        .expect("valid");
        let acme = &parsed[&TenantId::parse("acme").expect("tenant")];
        assert_eq!(acme.max_queued, 5);
        assert_eq!(acme.rate, Some(Rate { per_second: 2.0, burst: 4 }));
        assert_eq!(acme.max_tokens_per_day, Some(1000));
        assert_eq!(acme.max_schedules, DEFAULT_MAX_SCHEDULES);
        assert_eq!(acme.max_sandboxes, None);
    }

    #[test]
    fn a_bad_tenant_setting_is_named() {
        for (text, named) in [
            ("[tenants.acme]\nmax_queued = 0\n", "tenants.acme.max_queued"),
            ("[tenants.acme]\nrate = { per_second = 2 }\n", "tenants.acme.rate"),
            ("[tenants.acme]\nrate = { per_second = -1, burst = 3 }\n", "tenants.acme.rate"),
            ("[tenants.acme]\ncolour = 1\n", "tenants.acme.colour"),
        ] {
            let err = tenants(text).expect_err("refused");
            assert!(err.problem.contains(named), "{text}: {err}");
        }
    }

    #[test]
    fn an_unnamed_tenant_is_bounded_by_default() {
        let limits = Limits::default();
        let quota = limits.quota(&TenantId::parse("anyone").expect("tenant"));
        assert_eq!(quota.max_queued, DEFAULT_MAX_QUEUED);
        assert_eq!(quota.max_schedules, DEFAULT_MAX_SCHEDULES);
    }
}
