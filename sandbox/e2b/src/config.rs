//! Settings of the E2B provider: where the API and each sandbox's envd are,
//! the key, the template, and the time limits. The defaults are those of
//! the hosted service (`e2b.app`) and its Desktop SDK.

use std::time::Duration;

use flotilla_config::{E2bAccount, Secret};
use flotilla_types::task::SandboxProviderKind;

/// The hosted service's domain.
pub const DEFAULT_DOMAIN: &str = "e2b.app";
/// The Desktop SDK's template.
pub const DEFAULT_TEMPLATE: &str = "desktop";
/// The Linux user of the desktop template.
pub const DEFAULT_USER: &str = "user";

/// How requests reach envd inside a sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum EnvdAddress {
    /// Each sandbox's own host, `https://49983-<id>.<domain>`, with the
    /// domain the API names for the sandbox (or [`E2bConfig::domain`]).
    #[default]
    SandboxHost,
    /// One base URL for every sandbox (`https://sandbox.<domain>`, a
    /// self-hosted proxy, a local server), which routes by the
    /// `E2b-Sandbox-Id` and `E2b-Sandbox-Port` headers.
    Routed { base_url: String },
}

/// Settings of [`super::E2bProvider`].
#[derive(Debug, Clone)]
pub struct E2bConfig {
    /// The control plane, e.g. `https://api.e2b.app`.
    pub api_url: String,
    pub api_key: Secret,
    /// The sandbox domain used when the API names none.
    pub domain: String,
    pub envd: EnvdAddress,
    /// The template of sandboxes whose request names none.
    pub template: String,
    /// The Linux user commands and files act as.
    pub user: String,
    /// How long one API or file request may take.
    pub request_timeout: Duration,
    /// How long a new sandbox's desktop may take to answer.
    pub start_timeout: Duration,
    /// How many times a `429` is waited out before a call fails.
    pub rate_limit_retries: u32,
    /// The longest `Retry-After` waited out; a longer one fails at once.
    pub max_retry_after: Duration,
    /// The pause between typed keystrokes.
    pub key_delay: Duration,
    /// What the sandboxes are to the fleet: E2B's (hosted or self-hosted)
    /// or local desktops of a Flotilla sandbox host (`local`).
    pub kind: SandboxProviderKind,
    /// A PEM bundle of CAs trusted beside the system's roots (a sandbox
    /// host's private CA).
    pub extra_roots_pem: Option<Vec<u8>>,
}

impl E2bConfig {
    /// The account's service: the hosted one at its domain, or wherever
    /// `E2B_API_URL` and `E2B_SANDBOX_URL` point (self-hosted or local E2B,
    /// plain http included).
    pub fn for_account(api_key: Secret, account: &E2bAccount) -> Self {
        let mut config = Self::hosted(api_key, &account.domain);
        if let Some(api_url) = &account.api_url {
            config.api_url = api_url.trim_end_matches('/').to_owned();
        }
        if let Some(sandbox_url) = &account.sandbox_url {
            config.envd = EnvdAddress::Routed { base_url: sandbox_url.trim_end_matches('/').to_owned() };
        }
        config
    }

    /// The hosted service at `domain` (`e2b.app` unless self-hosted).
    pub fn hosted(api_key: Secret, domain: &str) -> Self {
        Self {
            api_url: format!("https://api.{domain}"),
            api_key,
            domain: domain.to_owned(),
            envd: EnvdAddress::SandboxHost,
            template: DEFAULT_TEMPLATE.to_owned(),
            user: DEFAULT_USER.to_owned(),
            request_timeout: Duration::from_secs(60),
            start_timeout: Duration::from_secs(60),
            rate_limit_retries: 3,
            max_retry_after: Duration::from_secs(60),
            key_delay: Duration::from_millis(12),
            kind: SandboxProviderKind::E2b,
            extra_roots_pem: None,
        }
    }
}
