//! Settings of live views: how long a view token lasts, where the API finds
//! the noVNC page it serves, how it names itself in view URLs, and how the
//! API reaches a worker's live views.

use std::path::PathBuf;
use std::time::Duration;

use super::{ConfigError, Settings};

/// The longest a view token may be made to last.
const MAX_TOKEN_TTL_S: usize = 3600;

/// What live views are set up with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveViewConfig {
    /// How long a view URL's token opens the view (`FLOTILLA_VIEW_TOKEN_TTL_S`).
    pub token_ttl: Duration,
    /// Where noVNC's files are (`FLOTILLA_NOVNC_DIR`, Debian's `novnc` by default).
    pub novnc_dir: PathBuf,
    /// The API's address as browsers reach it (`FLOTILLA_PUBLIC_URL`); by
    /// default `http://` and the address the API listens on (never a
    /// request's `Host`).
    pub public_url: Option<String>,
    /// The worker's HTTP side as the API reaches it
    /// (`FLOTILLA_WORKER_VIEW_URL`); by default `http://` and the address
    /// `FLOTILLA_WORKER_HTTP_ADDR` bound, unless that is a wildcard.
    pub worker_view_url: Option<String>,
}

impl LiveViewConfig {
    pub(super) fn from_settings(s: &Settings) -> Result<Self, ConfigError> {
        let ttl = s.positive("FLOTILLA_VIEW_TOKEN_TTL_S", 300)?;
        if ttl > MAX_TOKEN_TTL_S {
            return Err(ConfigError::new("FLOTILLA_VIEW_TOKEN_TTL_S", format!("must be at most {MAX_TOKEN_TTL_S}")));
        }
        Ok(Self {
            token_ttl: Duration::from_secs(ttl as u64),
            novnc_dir: PathBuf::from(s.text("FLOTILLA_NOVNC_DIR", "/usr/share/novnc")),
            public_url: s.url("FLOTILLA_PUBLIC_URL")?,
            worker_view_url: s.url("FLOTILLA_WORKER_VIEW_URL")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::Config;

    #[test]
    fn defaults_and_bad_values() {
        let config = Config::from_env([("FLOTILLA_API_KEYS", "")]).expect("defaults");
        assert_eq!(config.live_view.token_ttl.as_secs(), 300);
        assert_eq!(config.live_view.novnc_dir.to_str(), Some("/usr/share/novnc"));
        let err = Config::from_env([("FLOTILLA_VIEW_TOKEN_TTL_S", "99999")]).expect_err("too long");
        assert_eq!(err.var, "FLOTILLA_VIEW_TOKEN_TTL_S");
        let err = Config::from_env([("FLOTILLA_WORKER_VIEW_URL", "10.0.0.1:9090")]).expect_err("not a URL");
        assert_eq!(err.var, "FLOTILLA_WORKER_VIEW_URL");
    }
}
