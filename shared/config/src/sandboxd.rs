//! The sandbox host's settings (`flotilla-sandboxd`): where its control
//! plane (`FLOTILLA_SANDBOXD_ADDR`) and its sandbox edge
//! (`FLOTILLA_SANDBOXD_EDGE_ADDR`) listen, the domain of per-sandbox hosts
//! (`FLOTILLA_SANDBOXD_DOMAIN`), the keys clients present
//! (`FLOTILLA_SANDBOXD_KEYS`, comma-separated, kept only as digests), how
//! many sandboxes run at once (`FLOTILLA_SANDBOXD_CAPACITY`), how many
//! desktops wait started per template (`FLOTILLA_SANDBOXD_POOL`), the
//! longest life a sandbox may be given (`FLOTILLA_SANDBOXD_MAX_TIMEOUT_S`)
//! and where its desktops keep their files (`FLOTILLA_SANDBOXD_ROOT`).
//! With a certificate and its key (`FLOTILLA_SANDBOXD_TLS_CERT`,
//! `FLOTILLA_SANDBOXD_TLS_KEY`, PEM files) both listeners speak TLS and may
//! listen beyond loopback; without, they serve plain HTTP on loopback only.
//! The jail's settings are the isolation section's, as for a worker.
//!
//! A worker's side is [`SandboxdClient`]: the host its `local` provider
//! takes desktops from (`FLOTILLA_SANDBOXD_URL`, `FLOTILLA_SANDBOXD_KEY`,
//! and `FLOTILLA_SANDBOXD_CA_CERT`, a PEM file of the CA that signed a
//! host's certificate, trusted beside the system's roots).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::apikey::{KeyDigest, KeyHasher};
use super::{ConfigError, Secret, Settings};

/// The sandbox host's settings.
#[derive(Debug, Clone)]
pub struct SandboxdConfig {
    /// The control plane's address (E2B's `E2B_API_URL`).
    pub addr: SocketAddr,
    /// The edge's address: envd and every sandbox port (E2B's `E2B_SANDBOX_URL`).
    pub edge_addr: SocketAddr,
    /// Per-sandbox hosts are `<port>-<id>.<domain>`.
    pub domain: String,
    /// Digests of the keys clients present in `X-API-Key`.
    pub keys: Vec<KeyDigest>,
    /// What digested the keys (a secret of this process alone).
    pub hasher: KeyHasher,
    /// Running sandboxes at once; a create past it answers 429.
    pub capacity: usize,
    /// Desktops kept started per template.
    pub pool: usize,
    pub max_timeout: Duration,
    pub root: PathBuf,
    /// The certificate chain and key both listeners serve TLS with.
    pub tls: Option<TlsFiles>,
}

/// PEM files of a certificate chain and its private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl SandboxdConfig {
    pub(super) fn load(s: &Settings) -> Result<Self, ConfigError> {
        let hasher = KeyHasher::ephemeral();
        let keys = s
            .get("FLOTILLA_SANDBOXD_KEYS")
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|key| !key.is_empty())
            .map(|key| check_key(key).map(|()| hasher.digest(key)))
            .collect::<Result<Vec<_>, _>>()?;
        let address = |var: &str, default: &str| s.parsed::<SocketAddr>(var, default, "an address such as 127.0.0.1:3000");
        let domain = s.text("FLOTILLA_SANDBOXD_DOMAIN", "localhost").trim().to_ascii_lowercase();
        if domain.is_empty() || !domain.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.')) {
            return Err(ConfigError::new(
                "FLOTILLA_SANDBOXD_DOMAIN",
                "must be a host name such as localhost or sandboxes.example",
            ));
        }
        let max_timeout = s.positive("FLOTILLA_SANDBOXD_MAX_TIMEOUT_S", 24 * 3600)?;
        if max_timeout > 24 * 3600 {
            return Err(ConfigError::new("FLOTILLA_SANDBOXD_MAX_TIMEOUT_S", "is at most 86400 (a day)"));
        }
        Ok(Self {
            addr: address("FLOTILLA_SANDBOXD_ADDR", "127.0.0.1:49982")?,
            edge_addr: address("FLOTILLA_SANDBOXD_EDGE_ADDR", "127.0.0.1:49983")?,
            domain,
            keys,
            hasher,
            capacity: s.positive("FLOTILLA_SANDBOXD_CAPACITY", 8)?,
            pool: s.count("FLOTILLA_SANDBOXD_POOL", 1)?,
            max_timeout: Duration::from_secs(max_timeout as u64),
            root: PathBuf::from(s.text("FLOTILLA_SANDBOXD_ROOT", "/tmp/flotilla-sandboxd")),
            tls: tls_files(s)?,
        })
    }

    /// Whether `key` is one of the configured keys.
    pub fn accepts(&self, key: &str) -> bool {
        let presented = self.hasher.digest(key);
        self.keys.iter().any(|known| known.matches(&presented))
    }

    /// The host refuses to start without a key.
    pub fn require_keys(&self) -> Result<(), ConfigError> {
        if self.keys.is_empty() {
            return Err(ConfigError::new("FLOTILLA_SANDBOXD_KEYS", "is required: one or more keys such as e2b_0123abcd"));
        }
        Ok(())
    }
}

/// The sandbox host a worker's `local` provider takes desktops from.
#[derive(Debug, Clone)]
pub struct SandboxdClient {
    /// The host's control plane (`FLOTILLA_SANDBOXD_URL`); its edge is
    /// found by asking it.
    pub url: String,
    /// `FLOTILLA_SANDBOXD_KEY`, one of the host's `FLOTILLA_SANDBOXD_KEYS`.
    pub key: Secret,
    /// `FLOTILLA_SANDBOXD_CA_CERT`: a PEM file of the CA that signed the
    /// host's certificate, trusted beside the system's roots.
    pub ca_cert: Option<PathBuf>,
}

impl SandboxdClient {
    /// `None` when no host is named; a key or CA without a URL, or a URL
    /// without a key, is refused.
    pub(super) fn load(s: &Settings) -> Result<Option<Self>, ConfigError> {
        let url = s.url("FLOTILLA_SANDBOXD_URL")?;
        let key = s.get("FLOTILLA_SANDBOXD_KEY").map(str::trim);
        let ca_cert = s.get("FLOTILLA_SANDBOXD_CA_CERT").map(|path| PathBuf::from(path.trim()));
        let Some(url) = url else {
            return match (key, &ca_cert) {
                (None, None) => Ok(None),
                (Some(_), _) => Err(ConfigError::new("FLOTILLA_SANDBOXD_KEY", "is set but FLOTILLA_SANDBOXD_URL is not")),
                (None, Some(_)) => Err(ConfigError::new("FLOTILLA_SANDBOXD_CA_CERT", "is set but FLOTILLA_SANDBOXD_URL is not")),
            };
        };
        let Some(key) = key else {
            return Err(ConfigError::new(
                "FLOTILLA_SANDBOXD_KEY",
                "is required with FLOTILLA_SANDBOXD_URL: one of the host's FLOTILLA_SANDBOXD_KEYS",
            ));
        };
        check_key(key).map_err(|_| {
            ConfigError::new("FLOTILLA_SANDBOXD_KEY", "is e2b_ and at least 16 lowercase hex digits, as the host's keys are")
        })?;
        if let Some(path) = &ca_cert {
            if !path.is_file() {
                return Err(ConfigError::new("FLOTILLA_SANDBOXD_CA_CERT", format!("{} is not a readable file", path.display())));
            }
        }
        Ok(Some(Self { url, key: Secret::new(key), ca_cert }))
    }
}

/// Both TLS files or neither.
fn tls_files(s: &Settings) -> Result<Option<TlsFiles>, ConfigError> {
    match (s.get("FLOTILLA_SANDBOXD_TLS_CERT"), s.get("FLOTILLA_SANDBOXD_TLS_KEY")) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => Ok(Some(TlsFiles { cert: PathBuf::from(cert.trim()), key: PathBuf::from(key.trim()) })),
        (Some(_), None) => Err(ConfigError::new("FLOTILLA_SANDBOXD_TLS_KEY", "is required with FLOTILLA_SANDBOXD_TLS_CERT")),
        (None, Some(_)) => Err(ConfigError::new("FLOTILLA_SANDBOXD_TLS_CERT", "is required with FLOTILLA_SANDBOXD_TLS_KEY")),
    }
}

/// The E2B SDKs accept only keys of `e2b_` and lowercase hex digits.
fn check_key(key: &str) -> Result<(), ConfigError> {
    let hex = key.strip_prefix("e2b_").unwrap_or("");
    if hex.len() < 16 || !hex.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)) {
        return Err(ConfigError::new(
            "FLOTILLA_SANDBOXD_KEYS",
            "each key is e2b_ and at least 16 lowercase hex digits (the E2B SDKs refuse any other)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::Config;

    fn load(pairs: &[(&str, &str)]) -> Result<Config, crate::ConfigError> {
        Config::from_env(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn a_workers_host_needs_a_url_and_a_well_formed_key() {
        let key = "e2b_0123456789abcdef";
        let config =
            load(&[("FLOTILLA_SANDBOXD_URL", "http://127.0.0.1:49982/"), ("FLOTILLA_SANDBOXD_KEY", key)]).expect("config");
        let client = config.sandboxd_client.expect("a host");
        assert_eq!(client.url, "http://127.0.0.1:49982");
        assert!(!format!("{client:?}").contains(key), "no key in the debug form");
        assert!(load(&[]).expect("config").sandboxd_client.is_none());
        let refused = |pairs: &[(&str, &str)], var: &str| {
            let error = load(pairs).expect_err("refused").to_string();
            assert!(error.contains(var), "{error}");
        };
        refused(&[("FLOTILLA_SANDBOXD_URL", "http://127.0.0.1:49982")], "FLOTILLA_SANDBOXD_KEY");
        refused(&[("FLOTILLA_SANDBOXD_KEY", key)], "FLOTILLA_SANDBOXD_KEY");
        refused(&[("FLOTILLA_SANDBOXD_CA_CERT", "/etc/hostname")], "FLOTILLA_SANDBOXD_CA_CERT");
        refused(&[("FLOTILLA_SANDBOXD_URL", "127.0.0.1:49982"), ("FLOTILLA_SANDBOXD_KEY", key)], "FLOTILLA_SANDBOXD_URL");
        refused(&[("FLOTILLA_SANDBOXD_URL", "http://127.0.0.1:1"), ("FLOTILLA_SANDBOXD_KEY", "nokey")], "FLOTILLA_SANDBOXD_KEY");
        let missing = [
            ("FLOTILLA_SANDBOXD_URL", "https://h:1"),
            ("FLOTILLA_SANDBOXD_KEY", key),
            ("FLOTILLA_SANDBOXD_CA_CERT", "/nonexistent/ca.pem"),
        ];
        refused(&missing, "FLOTILLA_SANDBOXD_CA_CERT");
    }

    #[test]
    fn keys_are_kept_as_digests_and_checked() {
        let config = load(&[("FLOTILLA_SANDBOXD_KEYS", "e2b_0123456789abcdef, e2b_fedcba9876543210")]).expect("config");
        let sandboxd = &config.sandboxd;
        assert!(sandboxd.accepts("e2b_0123456789abcdef") && sandboxd.accepts("e2b_fedcba9876543210"));
        assert!(!sandboxd.accepts("e2b_0123456789abcdee"));
        assert!(!format!("{sandboxd:?}").contains("0123456789abcdef"), "no key in the debug form");
        let error = load(&[("FLOTILLA_SANDBOXD_KEYS", "secret")]).expect_err("not an E2B key");
        assert_eq!(error.var, "FLOTILLA_SANDBOXD_KEYS");
        assert!(load(&[]).expect("config").sandboxd.require_keys().is_err());
    }

    #[test]
    fn addresses_domain_and_counts_are_checked() {
        let config = load(&[]).expect("defaults");
        assert_eq!(config.sandboxd.addr.to_string(), "127.0.0.1:49982");
        assert_eq!(config.sandboxd.domain, "localhost");
        for (var, value) in [
            ("FLOTILLA_SANDBOXD_ADDR", "everywhere"),
            ("FLOTILLA_SANDBOXD_DOMAIN", "a/b"),
            ("FLOTILLA_SANDBOXD_CAPACITY", "0"),
            ("FLOTILLA_SANDBOXD_POOL", "-1"),
            ("FLOTILLA_SANDBOXD_MAX_TIMEOUT_S", "90000"),
        ] {
            let error = load(&[(var, value)]).expect_err(value);
            assert_eq!(error.var, var, "{error:?}");
        }
    }
}
