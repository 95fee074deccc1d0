//! Settings of the API's event streams (Server-Sent Events): how many one
//! tenant may hold open at once, and how long one may last before the
//! client is asked to resume with `Last-Event-ID`.

use std::time::Duration;

use super::{ConfigError, Settings};

/// Limits on open event streams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamsConfig {
    /// Streams one tenant may hold open on one API process; more → 429.
    pub per_tenant: usize,
    /// How long one stream lasts at most; the client then resumes.
    pub max_lifetime: Duration,
}

impl StreamsConfig {
    pub(super) fn from_settings(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            per_tenant: s.positive("FLOTILLA_STREAMS_PER_TENANT", 1_000)?,
            max_lifetime: Duration::from_secs(s.positive("FLOTILLA_STREAM_MAX_LIFETIME_S", 3_600)? as u64),
        })
    }
}
