//! When a screen counts as settled after an action: programs get
//! [`Settle::first`] to react, then the screen must stay unchanged for
//! [`Settle::poll`], and no wait lasts past [`Settle::max`]. One rule for
//! every place that waits: a worker over a provider that reports its
//! screen's changes ([`quiet_screen`]), and a sandbox host answering a
//! settled capture for a worker elsewhere
//! ([`SandboxProvider::settled_screenshot`]).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{SandboxId, SandboxProvider, Screenshot};

/// The three times of a settle wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settle {
    /// How long programs get to react to an action before the screen is read.
    #[serde(with = "millis", rename = "first_ms")]
    pub first: Duration,
    /// How long the screen must stay unchanged to count as settled (for a
    /// provider that cannot tell, the gap between two captures that must match).
    #[serde(with = "millis", rename = "poll_ms")]
    pub poll: Duration,
    /// The longest wait for a screen to settle.
    #[serde(with = "millis", rename = "max_ms")]
    pub max: Duration,
}

/// The wait every step uses.
pub const SETTLE: Settle =
    Settle { first: Duration::from_millis(100), poll: Duration::from_millis(50), max: Duration::from_millis(1_000) };

/// The longest wait a settle may ask for, so no caller holds a host's
/// capture open for long.
pub const MAX_SETTLE_WAIT: Duration = Duration::from_secs(10);

impl Settle {
    /// The same wait with no time past [`MAX_SETTLE_WAIT`].
    pub fn bounded(self) -> Self {
        let cap = |d: Duration| d.min(MAX_SETTLE_WAIT);
        Self { first: cap(self.first), poll: cap(self.poll), max: cap(self.max) }
    }
}

/// A capture of a settled screen, with how long the wait for it took.
#[derive(Debug, Clone)]
pub struct SettledShot {
    pub shot: Screenshot,
    pub waited: Duration,
}

/// Sleeps until `provider` says sandbox `id`'s screen is quiet: at least
/// `settle.first` after `started` and `settle.poll` after its last change,
/// or `settle.max` after `started`. Returns the time it slept until, or
/// `None` at once when the provider does not report changes.
pub async fn quiet_screen(provider: &dyn SandboxProvider, id: &SandboxId, started: Instant, settle: Settle) -> Option<Instant> {
    let (earliest, latest) = (started + settle.first, started + settle.max);
    loop {
        let changed = provider.screen_changed_at(id)?;
        let due = earliest.max(changed + settle.poll).min(latest);
        if Instant::now() >= due {
            return Some(due);
        }
        tokio::time::sleep_until(due.into()).await;
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_settle_travels_in_milliseconds_and_is_bounded() {
        let json = serde_json::to_value(SETTLE).expect("serializes");
        assert_eq!(json, serde_json::json!({"first_ms": 100, "poll_ms": 50, "max_ms": 1000}));
        let asked: Settle =
            serde_json::from_value(serde_json::json!({"first_ms": 5, "poll_ms": 1, "max_ms": 86_400_000})).expect("deserializes");
        assert_eq!(asked.bounded().max, MAX_SETTLE_WAIT);
        assert_eq!(asked.bounded().first, Duration::from_millis(5));
    }
}
