//! How local sandboxes are walled off: `FLOTILLA_SANDBOX_ISOLATION`
//! (`full`, the default, or `none` for development only) and
//! `FLOTILLA_SANDBOX_NETWORK` (`egress`, the default: the internet but no
//! private, link-local or host address; or `offline`: no network at all),
//! what each sandbox may use (`FLOTILLA_SANDBOX_MEMORY_MB`, `_PIDS`,
//! `_CPUS`, `_HOME_MB`, `_TMP_MB`) and the operator's own egress deny list
//! (`FLOTILLA_SANDBOX_DENY`: comma-separated IPv4 addresses or prefixes, the
//! fleet's own services on public addresses).

use std::net::Ipv4Addr;

use super::{ConfigError, Settings};

/// Whether local sandboxes run in their jail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxIsolation {
    /// Own network, user, pid and IPC namespaces, no capabilities, seccomp,
    /// a minimal view of the host; a worker that cannot build this refuses
    /// to start.
    #[default]
    Full,
    /// Plain processes of the worker's user: development only, logged at
    /// error level.
    None,
}

/// What a local sandbox's network reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxNetwork {
    /// Public internet addresses, through a user-mode network stack.
    #[default]
    Egress,
    /// Nothing: a loopback alone.
    Offline,
}

/// What one local sandbox may use of its host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SandboxUse {
    pub memory_mb: u64,
    pub pids: u32,
    pub cpus: f64,
    pub home_mb: u64,
    pub tmp_mb: u64,
}

impl Default for SandboxUse {
    fn default() -> Self {
        Self { memory_mb: 4096, pids: 1024, cpus: 1.0, home_mb: 2048, tmp_mb: 1024 }
    }
}

/// The isolation settings of local sandboxes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct IsolationConfig {
    pub isolation: SandboxIsolation,
    pub network: SandboxNetwork,
    pub limits: SandboxUse,
    /// IPv4 prefixes sandboxes never reach, as `(network, prefix length)`.
    pub deny: Vec<(Ipv4Addr, u8)>,
}

impl IsolationConfig {
    /// Reads every setting; the error names the variable.
    pub(super) fn from_settings(s: &Settings) -> Result<Self, ConfigError> {
        let mut config = Self::load(s.get("FLOTILLA_SANDBOX_ISOLATION"), s.get("FLOTILLA_SANDBOX_NETWORK"))?;
        let defaults = SandboxUse::default();
        let at_least_one = |var: &str, default: u64| s.positive(var, default as usize).map(|n| n as u64);
        config.limits = SandboxUse {
            memory_mb: at_least_one("FLOTILLA_SANDBOX_MEMORY_MB", defaults.memory_mb)?,
            pids: u32::try_from(at_least_one("FLOTILLA_SANDBOX_PIDS", u64::from(defaults.pids))?)
                .map_err(|_| ConfigError::new("FLOTILLA_SANDBOX_PIDS", "is too large"))?,
            cpus: s.parsed("FLOTILLA_SANDBOX_CPUS", "1.0", "a number of cores such as 1 or 1.5")?,
            home_mb: at_least_one("FLOTILLA_SANDBOX_HOME_MB", defaults.home_mb)?,
            tmp_mb: at_least_one("FLOTILLA_SANDBOX_TMP_MB", defaults.tmp_mb)?,
        };
        if !(config.limits.cpus.is_finite() && config.limits.cpus > 0.0) {
            return Err(ConfigError::new("FLOTILLA_SANDBOX_CPUS", "must be a positive number of cores"));
        }
        config.deny = parse_deny(s.get("FLOTILLA_SANDBOX_DENY").unwrap_or(""))?;
        Ok(config)
    }

    /// Reads the isolation and network settings; the error names the variable.
    pub(super) fn load(isolation: Option<&str>, network: Option<&str>) -> Result<Self, ConfigError> {
        let isolation = match isolation.map(str::trim) {
            None | Some("full") => SandboxIsolation::Full,
            Some("none") => SandboxIsolation::None,
            Some(other) => {
                return Err(ConfigError::new("FLOTILLA_SANDBOX_ISOLATION", format!("{other:?} is not one of full, none")))
            }
        };
        let network = match network.map(str::trim) {
            None | Some("egress") => SandboxNetwork::Egress,
            Some("offline") => SandboxNetwork::Offline,
            Some(other) => {
                return Err(ConfigError::new("FLOTILLA_SANDBOX_NETWORK", format!("{other:?} is not one of egress, offline")))
            }
        };
        Ok(Self { isolation, network, ..Self::default() })
    }
}

/// `a.b.c.d[/n]` items, comma-separated.
fn parse_deny(raw: &str) -> Result<Vec<(Ipv4Addr, u8)>, ConfigError> {
    raw.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| {
            let (address, prefix) = item.split_once('/').unwrap_or((item, "32"));
            match (address.parse::<Ipv4Addr>(), prefix.parse::<u8>()) {
                (Ok(address), Ok(prefix)) if prefix <= 32 => Ok((address, prefix)),
                _ => Err(ConfigError::new("FLOTILLA_SANDBOX_DENY", format!("{item:?} is not an IPv4 address or prefix"))),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_to_full_isolation_with_egress() {
        assert_eq!(IsolationConfig::load(None, None).expect("loads"), IsolationConfig::default());
        let dev = IsolationConfig::load(Some("none"), Some("offline")).expect("loads");
        assert_eq!((dev.isolation, dev.network), (SandboxIsolation::None, SandboxNetwork::Offline));
        assert_eq!(IsolationConfig::load(Some("off"), None).expect_err("refused").var, "FLOTILLA_SANDBOX_ISOLATION");
        assert_eq!(IsolationConfig::load(None, Some("lan")).expect_err("refused").var, "FLOTILLA_SANDBOX_NETWORK");
    }

    #[test]
    fn the_deny_list_takes_addresses_and_prefixes_and_names_a_bad_item() {
        assert_eq!(parse_deny("").expect("empty"), vec![]);
        let deny = parse_deny(" 44.1.2.3, 52.0.0.0/8 ").expect("parses");
        assert_eq!(deny, vec![(Ipv4Addr::new(44, 1, 2, 3), 32), (Ipv4Addr::new(52, 0, 0, 0), 8)]);
        let error = parse_deny("44.1.2.3,52.0.0.0/33").expect_err("refused");
        assert!(error.var == "FLOTILLA_SANDBOX_DENY" && error.problem.contains("52.0.0.0/33"), "{error:?}");
    }
}
