//! Settings of webhook delivery: which targets are allowed and how often a
//! failed delivery is tried again.

use std::time::Duration;

use super::{ConfigError, Settings};

/// The default retry schedule: 5 s, 5 min, 30 min, 2 h, 5 h, 10 h.
const DEFAULT_RETRIES_MS: &str = "5000,300000,1800000,7200000,18000000,36000000";

/// The default bound of an endpoint's delivery log.
const DEFAULT_LOG_MAX: usize = 10_000;

/// How webhooks are delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhooksConfig {
    /// Plain `http://` targets are allowed (tests, local set-ups).
    pub allow_http: bool,
    /// Loopback, private, link-local and other non-public targets are allowed.
    pub allow_private: bool,
    /// The wait before each retry; a message is tried once more than this has
    /// entries, then it fails.
    pub retries: Vec<Duration>,
    /// The most messages an endpoint's delivery log keeps (the newest).
    pub log_max: usize,
}

impl WebhooksConfig {
    pub(super) fn from_settings(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            allow_http: flag(s, "FLOTILLA_WEBHOOK_ALLOW_HTTP")?,
            allow_private: flag(s, "FLOTILLA_WEBHOOK_ALLOW_PRIVATE")?,
            retries: retries(s.text("FLOTILLA_WEBHOOK_RETRY_MS", DEFAULT_RETRIES_MS))?,
            log_max: s.positive("FLOTILLA_WEBHOOK_LOG_MAX", DEFAULT_LOG_MAX)?,
        })
    }
}

fn flag(s: &Settings, var: &str) -> Result<bool, ConfigError> {
    match s.text(var, "0").trim() {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        other => Err(ConfigError::new(var, format!("{other:?} is not 0 or 1"))),
    }
}

fn retries(raw: &str) -> Result<Vec<Duration>, ConfigError> {
    raw.split(',')
        .map(|ms| match ms.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(Duration::from_millis(n)),
            _ => Err(ConfigError::new("FLOTILLA_WEBHOOK_RETRY_MS", format!("{raw:?} is not a list of positive milliseconds"))),
        })
        .collect()
}
