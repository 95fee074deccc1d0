//! How local sandboxes are walled off: `FLOTILLA_SANDBOX_ISOLATION`
//! (`full`, the default, or `none` for development only) and
//! `FLOTILLA_SANDBOX_NETWORK` (`egress`, the default: the internet but no
//! private, link-local or host address; or `offline`: no network at all).

use super::ConfigError;

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

/// The isolation settings of local sandboxes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IsolationConfig {
    pub isolation: SandboxIsolation,
    pub network: SandboxNetwork,
}

impl IsolationConfig {
    /// Reads the two settings; the error names the variable.
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
        Ok(Self { isolation, network })
    }
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
}
