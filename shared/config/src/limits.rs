//! The bounds every API request runs under: how long a request may take
//! and how many the API serves at once, and whether `/metrics` shows
//! per-tenant counters. Each tenant's own quotas are in
//! [`super::TenantSettings`].

use std::time::Duration;

use super::{ConfigError, Settings};

/// How long a request (other than an event stream) may take by default.
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 30_000;
/// Requests the API serves at once by default; more wait their turn.
pub const DEFAULT_API_CONCURRENCY: usize = 1_024;

/// The API's bounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// How long any request but an event stream may take.
    pub request_timeout: Duration,
    /// Requests served at once, API-wide.
    pub api_concurrency: usize,
    /// Prometheus counters per tenant on `/metrics` (off by default: tenant
    /// labels can be many).
    pub tenant_metrics: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_millis(DEFAULT_REQUEST_TIMEOUT_MS),
            api_concurrency: DEFAULT_API_CONCURRENCY,
            tenant_metrics: false,
        }
    }
}

impl Limits {
    pub(super) fn from_settings(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            request_timeout: s.millis("FLOTILLA_REQUEST_TIMEOUT_MS", DEFAULT_REQUEST_TIMEOUT_MS)?,
            api_concurrency: s.positive("FLOTILLA_API_CONCURRENCY", DEFAULT_API_CONCURRENCY)?,
            tenant_metrics: match s.get("FLOTILLA_TENANT_METRICS").map(str::trim) {
                None | Some("0" | "false") => false,
                Some("1" | "true") => true,
                Some(other) => return Err(ConfigError::new("FLOTILLA_TENANT_METRICS", format!("{other:?} is not 1 or 0"))),
            },
        })
    }
}
