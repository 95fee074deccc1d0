//! The fleet-wide cap on live sandboxes of one provider.
//!
//! A hosted provider limits how many sandboxes one account runs at once
//! (E2B answers `429` past it), and every worker of the fleet shares that
//! account, so the count lives in Redis, where all workers see it.
//!
//! Layout: one sorted set per provider ([`Keys::sandbox_slots`]). Each
//! sandbox a worker holds (starting, ready in its pool or in use) is one
//! member, a slot, scored by the epoch milliseconds at which the holder's
//! lease on it ends. A taking script drops expired members, then adds one
//! only while fewer than `max` remain, all in one atomic step, with Redis's
//! own clock so workers' clocks never matter. The holder renews the leases
//! of its slots every third of their time to live; a worker that dies stops
//! renewing, and its slots free themselves once their leases run out.
//! Releasing removes the member. A sandbox handed over to outlive its task
//! (`keep_alive`) keeps its slot until the sandbox's own deadline, unrenewed.
//! A sandbox a task names by id is the user's, started outside the fleet,
//! and takes no slot.
//!
//! [`Keys::sandbox_slots`]: flotilla_queue::keys::Keys::sandbox_slots

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::{Duration, Instant};

use flotilla_config::RedisTarget;
use flotilla_queue::redis_conn::Redis;
use redis::Script;
use time::OffsetDateTime;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::SandboxError;

/// Takes a slot if fewer than the cap are live. KEYS[1] the slot set;
/// ARGV: member, cap, lease ms. Returns 1 when taken (or already held), 0
/// when the fleet is at its cap.
static TAKE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/fleet_take.lua")));

/// Renews the leases of slots. KEYS[1] the slot set; ARGV: lease ms, then
/// the members. Returns how many members had expired and were added back.
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/fleet_renew.lua")));

/// Counts the live slots. KEYS[1] the slot set.
static COUNT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/fleet_count.lua")));

/// The longest pause between two tries while the fleet is at its cap.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// How the cap behaves.
#[derive(Debug, Clone)]
pub struct FleetCapConfig {
    /// Sandboxes the whole fleet may hold at once.
    pub max: usize,
    /// How long a slot stays taken without renewal: how soon a dead
    /// worker's slots come back.
    pub slot_ttl: Duration,
    /// How long taking a slot may wait while the fleet is at its cap before
    /// it fails with [`SandboxError::Unavailable`].
    pub max_wait: Duration,
}

impl FleetCapConfig {
    /// A cap of `max` with the default lease and wait.
    pub fn new(max: usize) -> Self {
        Self { max, slot_ttl: Duration::from_secs(30), max_wait: Duration::from_secs(300) }
    }
}

/// The fleet-wide count of one provider's sandboxes. Cheap to clone; clones
/// share the slots they hold and one renewal task.
#[derive(Clone)]
pub struct FleetCap {
    inner: Arc<CapInner>,
}

struct CapInner {
    target: RedisTarget,
    redis: OnceCell<Redis>,
    key: String,
    /// Names this process's slots, so a look at the set shows who holds what.
    owner: String,
    config: FleetCapConfig,
    /// Members this process holds and renews.
    held: Mutex<HashSet<String>>,
    renewing: AtomicBool,
    stop: CancellationToken,
}

/// One taken slot. Dropping it gives the slot back (in the background);
/// [`FleetSlot::release`] does so and waits.
pub struct FleetSlot {
    cap: Weak<CapInner>,
    member: String,
    settled: bool,
}

impl FleetCap {
    /// A cap counted in the sorted set `key` of the Redis at `target`,
    /// connected on first use; `owner` (a worker id) names its slots.
    pub fn new(target: RedisTarget, key: String, owner: &str, config: FleetCapConfig) -> Self {
        let inner = CapInner {
            target,
            redis: OnceCell::new(),
            key,
            owner: owner.to_owned(),
            config,
            held: Mutex::new(HashSet::new()),
            renewing: AtomicBool::new(false),
            stop: CancellationToken::new(),
        };
        Self { inner: Arc::new(inner) }
    }

    pub fn max(&self) -> usize {
        self.inner.config.max
    }

    /// Takes a slot, waiting while the fleet is at its cap, until one comes
    /// free, `cancel` fires or `max_wait` passes.
    pub async fn acquire(&self, cancel: &CancellationToken) -> Result<FleetSlot, SandboxError> {
        let began = Instant::now();
        let mut pause = Duration::from_millis(50);
        let mut last_error = None;
        loop {
            match self.try_acquire().await {
                Ok(Some(slot)) => return Ok(slot),
                Ok(None) => {}
                Err(e) => last_error = Some(e),
            }
            if began.elapsed() >= self.inner.config.max_wait {
                return Err(self.gave_up(last_error));
            }
            tokio::select! {
                () = cancel.cancelled() => return Err(SandboxError::Unavailable("cancelled while waiting for a fleet sandbox slot".into())),
                () = tokio::time::sleep(jittered(pause)) => {}
            }
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }

    /// Takes a slot if the fleet is under its cap now.
    pub async fn try_acquire(&self) -> Result<Option<FleetSlot>, SandboxError> {
        let member = format!("{}:{:016x}", self.inner.owner, rand::random::<u64>());
        let ttl_ms = millis(self.inner.config.slot_ttl);
        let mut conn = self.inner.connection().await?.shared();
        let taken: i64 = TAKE
            .key(&self.inner.key)
            .arg(&member)
            .arg(self.inner.config.max)
            .arg(ttl_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(redis_failure)?;
        if taken == 0 {
            return Ok(None);
        }
        lock(&self.inner.held).insert(member.clone());
        self.start_renewing();
        debug!(slot = %member, "took a fleet sandbox slot");
        Ok(Some(FleetSlot { cap: Arc::downgrade(&self.inner), member, settled: false }))
    }

    /// Live slots fleet-wide now.
    pub async fn live(&self) -> Result<usize, SandboxError> {
        let mut conn = self.inner.connection().await?.shared();
        let count: usize = COUNT.key(&self.inner.key).invoke_async(&mut conn).await.map_err(redis_failure)?;
        Ok(count)
    }

    /// Stops renewing. Slots still held lapse after their time to live, as
    /// a dead worker's do.
    pub fn stop(&self) {
        self.inner.stop.cancel();
    }

    fn gave_up(&self, last_error: Option<SandboxError>) -> SandboxError {
        let waited = self.inner.config.max_wait;
        match last_error {
            Some(error) => SandboxError::Unavailable(format!("could not take a fleet sandbox slot within {waited:?}: {error}")),
            None => SandboxError::Unavailable(format!(
                "the fleet holds all {} sandboxes it may (FLOTILLA_SANDBOX_FLEET_MAX); none came free within {waited:?}",
                self.inner.config.max
            )),
        }
    }

    /// Starts the renewal task once, inside a runtime.
    fn start_renewing(&self) {
        if self.inner.renewing.swap(true, Ordering::SeqCst) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(renew_until_gone(Arc::downgrade(&self.inner)));
            }
            Err(_) => self.inner.renewing.store(false, Ordering::SeqCst),
        }
    }
}

impl fmt::Debug for FleetCap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetCap").field("key", &self.inner.key).field("max", &self.inner.config.max).finish_non_exhaustive()
    }
}

impl CapInner {
    async fn connection(&self) -> Result<&Redis, SandboxError> {
        self.redis
            .get_or_try_init(|| Redis::connect(&self.target))
            .await
            .map_err(|e| SandboxError::Unavailable(format!("redis: {e}")))
    }

    fn members(&self) -> Vec<String> {
        lock(&self.held).iter().cloned().collect()
    }

    async fn renew(&self) -> Result<(), SandboxError> {
        let members = self.members();
        if members.is_empty() {
            return Ok(());
        }
        let mut conn = self.connection().await?.shared();
        let lost: i64 = RENEW
            .key(&self.key)
            .arg(millis(self.config.slot_ttl))
            .arg(&members)
            .invoke_async(&mut conn)
            .await
            .map_err(redis_failure)?;
        if lost > 0 {
            warn!(lost, "fleet sandbox slots had lapsed before renewal and were taken back");
        }
        Ok(())
    }

    async fn remove(&self, member: &str) {
        lock(&self.held).remove(member);
        let removed = match self.connection().await {
            Ok(redis) => {
                let mut conn = redis.shared();
                redis::cmd("ZREM").arg(&self.key).arg(member).query_async::<i64>(&mut conn).await.map_err(redis_failure)
            }
            Err(e) => Err(e),
        };
        if let Err(error) = removed {
            warn!(slot = member, %error, "could not give back a fleet sandbox slot; it lapses by itself");
        }
    }

    /// Stops renewing `member` and keeps it taken until `until`.
    async fn hand_over(&self, member: &str, until: OffsetDateTime) {
        lock(&self.held).remove(member);
        let until_ms = until.unix_timestamp_nanos() / 1_000_000;
        let handed = match self.connection().await {
            Ok(redis) => {
                let mut conn = redis.shared();
                redis::cmd("ZADD")
                    .arg(&self.key)
                    .arg("XX")
                    .arg(until_ms as i64)
                    .arg(member)
                    .query_async::<i64>(&mut conn)
                    .await
                    .map_err(redis_failure)
            }
            Err(e) => Err(e),
        };
        if let Err(error) = handed {
            warn!(slot = member, %error, "could not hand over a fleet sandbox slot; it lapses by itself");
        }
    }
}

impl FleetSlot {
    /// Gives the slot back and waits until Redis has it.
    pub async fn release(mut self) {
        self.settled = true;
        if let Some(cap) = self.cap.upgrade() {
            cap.remove(&self.member).await;
        }
    }

    /// Keeps the slot taken, unrenewed, until `until` (the deadline of a
    /// sandbox that outlives its task).
    pub async fn hand_over(mut self, until: OffsetDateTime) {
        self.settled = true;
        if let Some(cap) = self.cap.upgrade() {
            cap.hand_over(&self.member, until).await;
        }
    }
}

impl fmt::Debug for FleetSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("FleetSlot").field(&self.member).finish()
    }
}

impl Drop for FleetSlot {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let Some(cap) = self.cap.upgrade() else { return };
        let member = std::mem::take(&mut self.member);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move { cap.remove(&member).await });
            }
            // Without a runtime the slot lapses by itself; stop renewing it.
            Err(_) => {
                lock(&cap.held).remove(&member);
            }
        }
    }
}

/// Renews the held slots every third of their time to live, until the cap
/// is stopped or dropped.
async fn renew_until_gone(cap: Weak<CapInner>) {
    let Some(period) = cap.upgrade().map(|c| c.config.slot_ttl / 3) else { return };
    let stop = match cap.upgrade() {
        Some(c) => c.stop.clone(),
        None => return,
    };
    let mut ticks = tokio::time::interval(period.max(Duration::from_millis(10)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let Some(cap) = cap.upgrade() else { return };
        if let Err(error) = cap.renew().await {
            warn!(%error, "could not renew fleet sandbox slots; trying again");
        }
    }
}

fn redis_failure(error: redis::RedisError) -> SandboxError {
    SandboxError::Unavailable(format!("redis: {error}"))
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// `pause` give or take a quarter, so waiting workers do not try in step.
fn jittered(pause: Duration) -> Duration {
    let quarter = pause / 4;
    pause - quarter + quarter.mul_f64(2.0 * rand::random::<f64>())
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
