//! The queue's section, read by the API and the workers alike: how long a
//! claim lasts without a heartbeat, how often a worker beats, how long a
//! finished task is kept, and how failed attempts back off.

use std::time::Duration;

use super::{ConfigError, Settings};

/// The settings of the task queue.
#[derive(Debug, Clone)]
pub struct QueueConfig {
    /// `FLOTILLA_LEASE_MS`: how long a claimed task may go without a heartbeat
    /// before another worker reclaims it.
    pub lease: Duration,
    /// `FLOTILLA_HEARTBEAT_MS`: a third of the lease (at most a second) when unset.
    pub heartbeat: Duration,
    /// `FLOTILLA_RETENTION_S`: how long a finished task, its events and its
    /// idempotency record are kept.
    pub retention: Duration,
    /// `FLOTILLA_ARCHIVE_AFTER_S`: how long a finished task stays in Redis
    /// before its record, events and feed entries move to the object store
    /// (with `FLOTILLA_S3_BUCKET` set, on a single server); `0` keeps them
    /// in Redis for the whole retention.
    pub archive_after: Option<Duration>,
    /// `FLOTILLA_RETRY_BASE_MS`.
    pub retry_base: Duration,
    /// `FLOTILLA_RETRY_MAX_MS`.
    pub retry_max: Duration,
}

impl QueueConfig {
    pub(super) fn load(s: &Settings) -> Result<Self, ConfigError> {
        let lease = s.millis("FLOTILLA_LEASE_MS", 30_000)?;
        let heartbeat = match s.get("FLOTILLA_HEARTBEAT_MS") {
            Some(_) => s.millis("FLOTILLA_HEARTBEAT_MS", 1_000)?,
            None => (lease / 3).min(Duration::from_secs(1)),
        };
        if heartbeat >= lease {
            return Err(ConfigError::new("FLOTILLA_HEARTBEAT_MS", "must be shorter than FLOTILLA_LEASE_MS"));
        }
        let retry_base = s.millis("FLOTILLA_RETRY_BASE_MS", 1_000)?;
        let retry_max = s.millis("FLOTILLA_RETRY_MAX_MS", 60_000)?;
        if retry_max < retry_base {
            return Err(ConfigError::new("FLOTILLA_RETRY_MAX_MS", "must not be below FLOTILLA_RETRY_BASE_MS"));
        }
        let retention = Duration::from_secs(s.positive("FLOTILLA_RETENTION_S", 7 * 24 * 3600)? as u64);
        let archive_after = Some(Duration::from_secs(s.count("FLOTILLA_ARCHIVE_AFTER_S", 300)? as u64)).filter(|d| !d.is_zero());
        Ok(Self { lease, heartbeat, retention, archive_after, retry_base, retry_max })
    }
}
