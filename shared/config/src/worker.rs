//! The worker's section: its id, how many tasks it runs at once, where it
//! serves its probes and its model gateway, and how long a stopping worker
//! lets running tasks finish.

use std::net::SocketAddr;
use std::time::Duration;

use super::{ConfigError, Settings};

/// The settings only a worker reads.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// `FLOTILLA_WORKER_ID`: a fresh id per process when unset.
    pub id: String,
    /// `FLOTILLA_WORKER_CONCURRENCY`.
    pub concurrency: usize,
    /// `FLOTILLA_WORKER_HTTP_ADDR`: where a worker serves `/metrics`,
    /// `/healthz`, `/readyz` and its desktops' live views; by default a
    /// loopback port of the system's choosing (the worker advertises it to
    /// the API), none when `off`.
    pub http_addr: Option<SocketAddr>,
    /// `FLOTILLA_DRAIN_DEADLINE_S`: how long a stopping worker lets running
    /// tasks finish.
    pub drain_deadline: Duration,
    /// `FLOTILLA_GATEWAY_ADDR`: where a worker's model gateway listens: the
    /// address sandboxes call instead of the model provider, with a token
    /// scoped to their task.
    pub gateway_addr: SocketAddr,
    /// `FLOTILLA_GATEWAY_URL`: the gateway's URL as sandboxes reach it; by
    /// default `https://<gateway_addr>`. Remote sandboxes need an address
    /// they can reach. Always `https://`: the gateway's TCP listener speaks
    /// TLS only.
    pub gateway_url: Option<String>,
    /// `FLOTILLA_PARK_WAITING_AFTER_MS`: how long a task that waits for a
    /// person keeps its worker slot and running sandbox before it is parked
    /// (journaled, its sandbox paused, handed back to the queue until the
    /// answer comes); only where the provider can pause a sandbox.
    pub park_waiting_after: Duration,
}

impl WorkerConfig {
    pub(super) fn load(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            id: parse_worker_id(s.get("FLOTILLA_WORKER_ID"))?,
            concurrency: s.positive("FLOTILLA_WORKER_CONCURRENCY", 4)?,
            http_addr: match s.get("FLOTILLA_WORKER_HTTP_ADDR") {
                Some("off") => None,
                _ => {
                    Some(s.parsed("FLOTILLA_WORKER_HTTP_ADDR", "127.0.0.1:0", "a socket address like 127.0.0.1:9090, or off")?)
                }
            },
            drain_deadline: Duration::from_secs(s.positive("FLOTILLA_DRAIN_DEADLINE_S", 25)? as u64),
            gateway_addr: s.parsed("FLOTILLA_GATEWAY_ADDR", "127.0.0.1:0", "a socket address like 127.0.0.1:0")?,
            gateway_url: https_only(s.url("FLOTILLA_GATEWAY_URL")?)?,
            park_waiting_after: s.millis("FLOTILLA_PARK_WAITING_AFTER_MS", 60_000)?,
        })
    }
}

fn https_only(url: Option<String>) -> Result<Option<String>, ConfigError> {
    match url {
        Some(url) if !url.starts_with("https://") => Err(ConfigError::new(
            "FLOTILLA_GATEWAY_URL",
            format!("{url:?} must be an https:// URL (the gateway speaks TLS only)"),
        )),
        url => Ok(url),
    }
}

fn parse_worker_id(raw: Option<&str>) -> Result<String, ConfigError> {
    match raw {
        Some(id) if id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) => {
            Ok(id.to_owned())
        }
        Some(_) => Err(ConfigError::new("FLOTILLA_WORKER_ID", "must be at most 64 of A-Z a-z 0-9 - _ .")),
        None => Ok(format!("w-{}-{}", std::process::id(), &ulid::Ulid::new().to_string()[20..]).to_lowercase()),
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;

    #[test]
    fn the_http_side_is_on_a_loopback_port_unless_turned_off() {
        let config = Config::from_env([("FLOTILLA_API_KEYS", "")]).expect("defaults");
        assert_eq!(config.worker.http_addr, Some("127.0.0.1:0".parse().expect("address")));
        let config = Config::from_env([("FLOTILLA_WORKER_HTTP_ADDR", "off")]).expect("off");
        assert_eq!(config.worker.http_addr, None);
        let err = Config::from_env([("FLOTILLA_WORKER_HTTP_ADDR", "nowhere")]).expect_err("not an address");
        assert_eq!(err.var, "FLOTILLA_WORKER_HTTP_ADDR");
    }

    #[test]
    fn the_gateway_url_must_be_https() {
        let config = Config::from_env([("FLOTILLA_GATEWAY_URL", "https://gw.example.com:4780/")]).expect("https");
        assert_eq!(config.worker.gateway_url.as_deref(), Some("https://gw.example.com:4780"));
        let err = Config::from_env([("FLOTILLA_GATEWAY_URL", "http://gw.example.com:4780")]).expect_err("plain HTTP");
        assert_eq!(err.var, "FLOTILLA_GATEWAY_URL");
        assert!(err.to_string().contains("https://"), "{err}");
    }
}
