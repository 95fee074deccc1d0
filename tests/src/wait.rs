//! Waiting for something to happen: a test waits on the signal it cares
//! about (a condition polled to a deadline, an event on a stream), never on
//! a fixed sleep, so it passes on a loaded machine and fails with a message
//! that says what never happened.

use std::time::{Duration, Instant};

/// How often [`eventually`] looks again.
const POLL: Duration = Duration::from_millis(20);

/// Polls `check` until it holds, or panics with `what` after `timeout`.
pub async fn eventually(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting until {what}");
        tokio::time::sleep(POLL).await;
    }
}
