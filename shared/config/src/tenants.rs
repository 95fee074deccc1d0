//! Per-tenant settings: the `[tenants.<name>]` tables of the config file and
//! the `FLOTILLA_TENANT_WEIGHTS=acme=3,beta=1` shorthand.
//!
//! A tenant without a table gets [`TenantSettings::default`]: weight 1, no
//! running limit, and the bounded defaults of `max_queued` and
//! `max_schedules` (Redis runs `noeviction`: one tenant must be stopped
//! well before Redis is full). Each table is read into [`TenantSettings`] with unknown keys
//! refused, so a typo stops the process at start with one line naming the
//! setting (`tenants.acme.wieght: unknown setting`). The shorthand sets
//! weights only and wins over the file, like every environment variable.
//!
//! To add a setting: a field with `#[serde(default)]` (an `Option` for a
//! limit that is off unless set), and, if it has a range, a check in
//! [`TenantSettings::validate`].

use std::collections::BTreeMap;

use serde::Deserialize;

use super::ConfigError;
use flotilla_types::ids::TenantId;

/// The largest weight: keeps the scheduler's virtual-time steps in range.
pub const MAX_WEIGHT: u32 = 10_000;
/// Tasks a tenant may have queued when its table names no `max_queued`.
pub const DEFAULT_MAX_QUEUED: u64 = 100_000;
/// Schedules a tenant may keep when its table names no `max_schedules`.
pub const DEFAULT_MAX_SCHEDULES: u64 = 100;

/// A token bucket: `per_second` submits on average, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rate {
    pub per_second: f64,
    pub burst: u64,
}

/// What one tenant may use of the fleet.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantSettings {
    /// The tenant's share of turns against other tenants with ready tasks.
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Tasks of the tenant running at once, fleet-wide; no limit when unset.
    #[serde(default)]
    pub max_running: Option<u32>,
    /// Tasks of the tenant queued at once; a submit past it is refused.
    #[serde(default = "default_max_queued")]
    pub max_queued: u64,
    /// Submits per second; no limit when unset.
    #[serde(default)]
    pub rate: Option<Rate>,
    /// Model tokens (in and out) per UTC day; no limit when unset.
    #[serde(default)]
    pub max_tokens_per_day: Option<u64>,
    /// US dollars of model calls (at the configured prices) per UTC day;
    /// no limit when unset.
    #[serde(default)]
    pub max_cost_usd_per_day: Option<flotilla_types::cost::Usd>,
    /// Sandboxes the tenant's tasks hold at once, fleet-wide.
    #[serde(default)]
    pub max_sandboxes: Option<u64>,
    /// Schedules the tenant keeps.
    #[serde(default = "default_max_schedules")]
    pub max_schedules: u64,
    /// Sandbox templates the tenant's tasks may name in `sandbox.template`;
    /// none unless listed (tasks then get the provider's default desktop).
    #[serde(default)]
    pub sandbox_templates: Vec<String>,
}

fn default_weight() -> u32 {
    1
}

fn default_max_queued() -> u64 {
    DEFAULT_MAX_QUEUED
}

fn default_max_schedules() -> u64 {
    DEFAULT_MAX_SCHEDULES
}

impl Default for TenantSettings {
    fn default() -> Self {
        Self {
            weight: default_weight(),
            max_running: None,
            max_queued: DEFAULT_MAX_QUEUED,
            rate: None,
            max_tokens_per_day: None,
            max_cost_usd_per_day: None,
            max_sandboxes: None,
            max_schedules: DEFAULT_MAX_SCHEDULES,
            sandbox_templates: Vec::new(),
        }
    }
}

impl TenantSettings {
    /// The defaults with this weight.
    pub fn weighted(weight: u32) -> Self {
        Self { weight, ..Self::default() }
    }

    /// Whether the tenant's tasks may ask for sandbox template `template`.
    pub fn allows_template(&self, template: &str) -> bool {
        self.sandbox_templates.iter().any(|t| t == template)
    }

    /// Checks the ranges; the error names the setting as `tenants.<name>.<key>`.
    fn validate(&self, tenant: &str) -> Result<(), ConfigError> {
        if self.weight == 0 || self.weight > MAX_WEIGHT {
            return Err(ConfigError::new(
                &format!("tenants.{tenant}.weight"),
                format!("{} is not a whole number from 1 to {MAX_WEIGHT}", self.weight),
            ));
        }
        let positive = [
            ("max_running", self.max_running.map(u64::from)),
            ("max_queued", Some(self.max_queued)),
            ("max_tokens_per_day", self.max_tokens_per_day),
            ("max_sandboxes", self.max_sandboxes),
            ("max_schedules", Some(self.max_schedules)),
        ];
        for (key, value) in positive {
            if value == Some(0) {
                return Err(ConfigError::new(&format!("tenants.{tenant}.{key}"), "must be a positive whole number"));
            }
        }
        if let Some(rate) = self.rate {
            if !(rate.per_second > 0.0 && rate.per_second.is_finite()) || rate.burst == 0 {
                return Err(ConfigError::new(
                    &format!("tenants.{tenant}.rate"),
                    "must be { per_second = <positive number>, burst = <positive whole number> }",
                ));
            }
        }
        Ok(())
    }
}

/// Every tenant's settings; tenants not named have the defaults.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TenantsConfig {
    tenants: BTreeMap<TenantId, TenantSettings>,
}

impl TenantsConfig {
    /// Reads the file's `tenants` table (if any), then applies the
    /// `FLOTILLA_TENANT_WEIGHTS` shorthand (if set).
    pub(super) fn load(table: Option<toml::Value>, weights: Option<&str>) -> Result<Self, ConfigError> {
        let mut config = match table {
            Some(value) => Self::from_table(value)?,
            None => Self::default(),
        };
        if let Some(raw) = weights {
            config.apply_weights(raw)?;
        }
        Ok(config)
    }

    /// Settings given directly, for tests and tools.
    pub fn from_settings(tenants: impl IntoIterator<Item = (TenantId, TenantSettings)>) -> Self {
        Self { tenants: tenants.into_iter().collect() }
    }

    fn from_table(value: toml::Value) -> Result<Self, ConfigError> {
        let toml::Value::Table(table) = value else {
            return Err(ConfigError::new("tenants", "must be a table of [tenants.<name>] tables"));
        };
        let mut tenants = BTreeMap::new();
        for (name, value) in table {
            let tenant = TenantId::parse(&name).map_err(|e| ConfigError::new(&format!("tenants.{name}"), e.to_string()))?;
            let settings = parse_settings(&name, value)?;
            settings.validate(&name)?;
            tenants.insert(tenant, settings);
        }
        Ok(Self { tenants })
    }

    fn apply_weights(&mut self, raw: &str) -> Result<(), ConfigError> {
        const VAR: &str = "FLOTILLA_TENANT_WEIGHTS";
        for pair in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((name, weight)) = pair.split_once('=') else {
                return Err(ConfigError::new(VAR, format!("{pair:?} is not tenant=weight")));
            };
            let tenant = TenantId::parse(name.trim()).map_err(|e| ConfigError::new(VAR, e.to_string()))?;
            let weight = match weight.trim().parse::<u32>() {
                Ok(w) if (1..=MAX_WEIGHT).contains(&w) => w,
                _ => {
                    return Err(ConfigError::new(
                        VAR,
                        format!("{pair:?}: the weight must be a whole number from 1 to {MAX_WEIGHT}"),
                    ))
                }
            };
            self.tenants.entry(tenant).or_default().weight = weight;
        }
        Ok(())
    }

    /// One tenant's settings (the defaults when it has none).
    pub fn get(&self, tenant: &TenantId) -> TenantSettings {
        self.tenants.get(tenant).cloned().unwrap_or_default()
    }

    /// The tenants with settings of their own.
    pub fn iter(&self) -> impl Iterator<Item = (&TenantId, &TenantSettings)> {
        self.tenants.iter()
    }
}

fn parse_settings(name: &str, value: toml::Value) -> Result<TenantSettings, ConfigError> {
    let table = match value {
        toml::Value::Table(table) => table,
        other => return Err(ConfigError::new(&format!("tenants.{name}"), format!("must be a table, not {}", other.type_str()))),
    };
    serde_path_to_error::deserialize(toml::Value::Table(table.clone())).map_err(|e| {
        let message = e.inner().message().trim().to_owned();
        // The path names a key whose value is wrong; an unknown key is named
        // only in the message.
        let path = e.path().to_string();
        let key = match path.as_str() {
            "" | "." => table.keys().find(|k| message.contains(&format!("`{k}`"))).cloned(),
            _ => Some(path),
        };
        match key {
            Some(key) => ConfigError::new(&format!("tenants.{name}.{key}"), message),
            None => ConfigError::new(&format!("tenants.{name}"), message),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> Option<toml::Value> {
        let parsed: toml::Table = text.parse().expect("toml");
        parsed.get("tenants").cloned()
    }

    fn tenant(name: &str) -> TenantId {
        TenantId::parse(name).expect("tenant")
    }

    #[test]
    fn tenants_without_a_table_have_weight_one_and_no_limit() {
        let config = TenantsConfig::load(None, None).expect("loads");
        assert_eq!(config.get(&tenant("acme")), TenantSettings::default());
        assert_eq!(config.get(&tenant("acme")).max_queued, DEFAULT_MAX_QUEUED, "bounded by default");
    }

    #[test]
    fn tables_set_weight_and_max_running() {
        let config =
            TenantsConfig::load(table("[tenants.acme]\nweight = 3\nmax_running = 20\n[tenants.beta]\n"), None).expect("loads");
        assert_eq!(config.get(&tenant("acme")), TenantSettings { weight: 3, max_running: Some(20), ..TenantSettings::default() });
        assert_eq!(config.get(&tenant("beta")), TenantSettings::default());
    }

    #[test]
    fn the_shorthand_sets_weights_over_the_file() {
        let config =
            TenantsConfig::load(table("[tenants.acme]\nweight = 2\nmax_running = 5\n"), Some("acme=3, beta=1")).expect("loads");
        assert_eq!(config.get(&tenant("acme")), TenantSettings { weight: 3, max_running: Some(5), ..TenantSettings::default() });
        assert_eq!(config.get(&tenant("beta")).weight, 1);
    }

    #[test]
    fn tables_set_quotas() {
        let text = "[tenants.acme]\nmax_queued = 5\nrate = { per_second = 0.5, burst = 4 }\nmax_tokens_per_day = 1000\n";
        let acme = TenantsConfig::load(table(text), None).expect("loads").get(&tenant("acme"));
        assert_eq!(acme.max_queued, 5);
        assert_eq!(acme.rate, Some(Rate { per_second: 0.5, burst: 4 }));
        assert_eq!(acme.max_tokens_per_day, Some(1000));
        assert_eq!(acme.max_schedules, DEFAULT_MAX_SCHEDULES);
        for (text, named) in [
            ("[tenants.acme]\nmax_queued = 0\n", "tenants.acme.max_queued"),
            ("[tenants.acme]\nrate = { per_second = 2 }\n", "tenants.acme.rate"),
            ("[tenants.acme]\nrate = { per_second = -1.0, burst = 3 }\n", "tenants.acme.rate"),
        ] {
            assert_eq!(TenantsConfig::load(table(text), None).expect_err("refused").var, named, "{text}");
        }
    }

    #[test]
    fn sandbox_templates_are_allowed_only_when_listed() {
        let config =
            TenantsConfig::load(table("[tenants.acme]\nsandbox_templates = [\"desktop-chrome\"]\n"), None).expect("loads");
        assert!(config.get(&tenant("acme")).allows_template("desktop-chrome"));
        assert!(!config.get(&tenant("acme")).allows_template("desktop-other"));
        assert!(!config.get(&tenant("beta")).allows_template("desktop-chrome"), "no template without a list");
    }

    #[test]
    fn a_bad_setting_is_named() {
        let err = TenantsConfig::load(table("[tenants.acme]\nwieght = 3\n"), None).expect_err("refused");
        assert_eq!(err.var, "tenants.acme.wieght");
        let err = TenantsConfig::load(table("[tenants.acme]\nweight = 0\n"), None).expect_err("refused");
        assert_eq!(err.var, "tenants.acme.weight");
        let err = TenantsConfig::load(table("[tenants.acme]\nmax_running = -1\n"), None).expect_err("refused");
        assert_eq!(err.var, "tenants.acme.max_running");
        let err = TenantsConfig::load(table("[tenants.acme]\nmax_running = 0\n"), None).expect_err("refused");
        assert_eq!(err.var, "tenants.acme.max_running");
        let err = TenantsConfig::load(table("[tenants.Acme]\n"), None).expect_err("refused");
        assert_eq!(err.var, "tenants.Acme");
        let err = TenantsConfig::load(table("tenants = 3\n"), None).expect_err("refused");
        assert_eq!(err.var, "tenants");
        let err = TenantsConfig::load(None, Some("acme")).expect_err("refused");
        assert_eq!(err.var, "FLOTILLA_TENANT_WEIGHTS");
        let err = TenantsConfig::load(None, Some("acme=0")).expect_err("refused");
        assert_eq!(err.var, "FLOTILLA_TENANT_WEIGHTS");
    }
}
