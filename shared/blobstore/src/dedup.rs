//! Knowing, as cheaply as possible, that a screenshot is already stored.
//!
//! Three layers, cheapest first; each answers "stored" only for a hash whose
//! object was seen stored, never for one merely being uploaded:
//!
//! 1. [`RecentHashes`]: this process's memory of hashes it stored or found
//!    stored. An idle desktop repeats one frame for many steps, and every
//!    repeat is answered here with no request at all.
//! 2. [`InflightUploads`]: concurrent puts of one hash in one process wait
//!    for the first instead of racing it, so twenty tasks that see the same
//!    frame at once cost one upload.
//! 3. [`KnownHashes`] (optional): a fleet-wide record in Redis, written only
//!    after a successful upload, so another worker skips even the store's
//!    conditional request. It is a cache: losing it costs requests, not
//!    correctness, and a Redis failure falls through to the store.
//!
//! Behind them the store itself decides, with a conditional `PUT`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;

/// A bounded, time-limited set of hashes known to be stored.
pub(crate) struct RecentHashes {
    capacity: usize,
    ttl: Duration,
    order: VecDeque<(String, Instant)>,
    members: HashSet<String>,
}

impl RecentHashes {
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        Self { capacity, ttl, order: VecDeque::new(), members: HashSet::new() }
    }

    pub fn contains(&mut self, hash: &str) -> bool {
        self.expire(Instant::now());
        self.members.contains(hash)
    }

    pub fn insert(&mut self, hash: &str) {
        if self.capacity == 0 || self.members.contains(hash) {
            return;
        }
        self.expire(Instant::now());
        while self.order.len() >= self.capacity {
            if let Some((old, _)) = self.order.pop_front() {
                self.members.remove(&old);
            }
        }
        self.order.push_back((hash.to_owned(), Instant::now()));
        self.members.insert(hash.to_owned());
    }

    fn expire(&mut self, now: Instant) {
        while let Some((hash, at)) = self.order.front() {
            if now.duration_since(*at) < self.ttl {
                break;
            }
            self.members.remove(hash);
            self.order.pop_front();
        }
    }
}

/// One async lock per hash being uploaded in this process.
#[derive(Default)]
pub(crate) struct InflightUploads {
    gates: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl InflightUploads {
    /// The gate of `hash`; whoever holds its lock is the one uploading it.
    pub fn gate(&self, hash: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut gates = self.gates.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        gates.entry(hash.to_owned()).or_default().clone()
    }

    /// Forgets `gate` once its upload is over. A waiter that already holds a
    /// clone still takes the lock, then finds the hash in `RecentHashes`.
    pub fn release(&self, hash: &str, gate: &Arc<tokio::sync::Mutex<()>>) {
        let mut gates = self.gates.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if gates.get(hash).is_some_and(|g| Arc::ptr_eq(g, gate)) {
            gates.remove(hash);
        }
    }
}

/// The fleet-wide record of stored screenshot hashes, in Redis.
///
/// One string key per hash, `<key prefix>:shot:<place>:<hash>`, set only
/// after the object was stored (or found stored), with a TTL. `<place>` is a
/// short hash of the endpoint, bucket and S3 prefix the store writes to, so
/// two fleets sharing a Redis but not a bucket never vouch for each other's
/// objects. Keys rather than one big set, so the record's memory is bounded
/// by the TTL and a hash is forgotten before a bucket lifecycle rule can
/// delete its object: keep the TTL shorter than any expiry rule on the
/// screenshots prefix.
#[derive(Clone)]
pub struct KnownHashes {
    conn: ConnectionManager,
    prefix: String,
    place: String,
    ttl: Duration,
    timeout: Duration,
}

/// How long a stored hash is remembered fleet-wide by default.
pub const KNOWN_HASH_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

impl KnownHashes {
    /// The record under `key_prefix` (the fleet's `FLOTILLA_KEY_PREFIX`).
    pub fn new(conn: ConnectionManager, key_prefix: &str, ttl: Duration) -> Self {
        Self { conn, prefix: key_prefix.to_owned(), place: String::new(), ttl, timeout: Duration::from_millis(250) }
    }

    /// The same record, scoped to the objects of one endpoint, bucket and
    /// prefix; `BlobStore` scopes the record it is given.
    pub fn scoped(mut self, endpoint: &str, bucket: &str, prefix: &str) -> Self {
        let place = blake3::hash(format!("{endpoint}\n{bucket}\n{prefix}").as_bytes()).to_hex();
        self.place = place[..12].to_owned();
        self
    }

    /// The key recording `hash`.
    pub fn key(&self, hash: &str) -> String {
        format!("{}:shot:{}:{hash}", self.prefix, self.place)
    }

    /// Whether `hash` is recorded as stored; `None` when Redis did not answer
    /// in time (the caller then asks the store).
    pub async fn contains(&self, hash: &str) -> Option<bool> {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("EXISTS");
        cmd.arg(self.key(hash));
        let query = cmd.query_async::<i64>(&mut conn);
        match tokio::time::timeout(self.timeout, query).await {
            Ok(Ok(n)) => Some(n > 0),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "known-hash lookup failed");
                None
            }
            Err(_) => {
                tracing::warn!("known-hash lookup timed out");
                None
            }
        }
    }

    /// Records `hash` as stored. Failures are logged and otherwise ignored.
    pub async fn insert(&self, hash: &str) {
        let mut conn = self.conn.clone();
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.key(hash)).arg(1).arg("EX").arg(self.ttl.as_secs().max(1));
        let query = cmd.query_async::<()>(&mut conn);
        match tokio::time::timeout(self.timeout, query).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "known-hash record failed"),
            Err(_) => tracing::warn!("known-hash record timed out"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_hashes_are_bounded() {
        let mut recent = RecentHashes::new(2, Duration::from_secs(60));
        recent.insert("a");
        recent.insert("b");
        recent.insert("c");
        assert!(!recent.contains("a"), "the oldest is dropped");
        assert!(recent.contains("b") && recent.contains("c"));
    }

    #[test]
    fn recent_hashes_expire() {
        let mut recent = RecentHashes::new(8, Duration::ZERO);
        recent.insert("a");
        assert!(!recent.contains("a"));
        let mut off = RecentHashes::new(0, Duration::from_secs(60));
        off.insert("a");
        assert!(!off.contains("a"), "capacity 0 remembers nothing");
    }

    #[test]
    fn a_gate_is_shared_until_released() {
        let inflight = InflightUploads::default();
        let first = inflight.gate("h");
        let second = inflight.gate("h");
        assert!(Arc::ptr_eq(&first, &second));
        inflight.release("h", &first);
        assert!(!Arc::ptr_eq(&first, &inflight.gate("h")));
    }
}
