//! The host's sandboxes: each one a local desktop with its E2B face (id,
//! access token, template, metadata, deadline) and its state, running or
//! paused. The invariants live here: a create past the capacity is refused
//! before anything starts; a paused sandbox counts against nothing and
//! reaches no process; a sandbox past its deadline is killed (or paused,
//! when it asked for `autoPause`) by the reaper, and any call that finds it
//! first does the same.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_config::SandboxdConfig;
use flotilla_desktop::Desktops;
use flotilla_sandbox::{SandboxError, SandboxId, SandboxProvider, SandboxRequest};
use time::OffsetDateTime;

use super::metrics::Metrics;
use super::pool::Pool;
use super::processes::Processes;
use super::sync::lock;
use super::watchers::Watchers;

/// How long the desktop behind a sandbox may live by the local provider's
/// own clock: a backstop, since the host's deadline ends it first (and
/// moves it along; see [`Host::keep_backstop_ahead`]).
pub(crate) const LOCAL_LIFETIME: Duration = flotilla_desktop::MAX_TIMEOUT;
/// How far past the host's deadline the backstop stays.
const BACKSTOP_MARGIN: Duration = Duration::from_secs(60);

/// What happens to a sandbox at its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnTimeout {
    Kill,
    Pause,
}

/// One sandbox as the host knows it.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub local_id: SandboxId,
    pub template: String,
    pub started_at: OffsetDateTime,
    pub end_at: OffsetDateTime,
    pub access_token: String,
    pub metadata: HashMap<String, String>,
    /// Variables every process started through envd gets (the create's `envVars`).
    pub env_vars: HashMap<String, String>,
    /// The processes started through envd and still running.
    pub running: Arc<Processes>,
    /// The directories envd's polled watchers watch.
    pub watchers: Arc<Watchers>,
    /// Since when it is paused, if it is.
    pub paused_since: Option<Instant>,
    pub on_timeout: OnTimeout,
}

impl Entry {
    pub fn state(&self) -> &'static str {
        if self.paused_since.is_some() {
            "paused"
        } else {
            "running"
        }
    }
}

/// What a create asks for, once its body is read.
#[derive(Debug, Clone)]
pub(crate) struct NewEntry {
    pub template: String,
    pub resolution: (u32, u32),
    pub timeout: Duration,
    pub metadata: HashMap<String, String>,
    pub env_vars: HashMap<String, String>,
    pub on_timeout: OnTimeout,
}

/// Why a call on the host failed; mapped to E2B's answers in one place
/// ([`control`](super::control)).
#[derive(Debug, thiserror::Error)]
pub(crate) enum HostError {
    #[error("sandbox \"{0}\" doesn't exist or you don't have access to it")]
    NotFound(String),
    #[error("sandbox \"{0}\" is already paused")]
    AlreadyPaused(String),
    #[error("sandbox \"{0}\" is already running")]
    AlreadyRunning(String),
    #[error("this host runs {0} sandboxes at once; all are taken")]
    Capacity(usize),
    #[error("failed to create sandbox: {0}")]
    Desktop(#[from] SandboxError),
    #[error("{0}")]
    BadRequest(String),
    #[error("template '{0}' not found")]
    UnknownTemplate(String),
}

/// `429`s to answer before the next creates succeed (a test's lever).
#[derive(Debug, Default)]
pub(crate) struct RateLimit {
    pub remaining: u32,
    pub retry_after: Duration,
}

/// Everything the control plane, envd and the edge share.
pub(crate) struct Host {
    pub(crate) settings: SandboxdConfig,
    pub(crate) local: Desktops,
    sandboxes: Mutex<HashMap<String, Entry>>,
    /// Creates under way, counted against the capacity.
    creating: AtomicUsize,
    pub(crate) pool: Pool,
    pub(crate) metrics: Metrics,
    pub(crate) rate_limit: Mutex<RateLimit>,
    pub(crate) control_requests: AtomicUsize,
}

impl Host {
    pub fn new(settings: SandboxdConfig, local: Desktops) -> Self {
        Self {
            pool: Pool::new(settings.pool),
            settings,
            local,
            sandboxes: Mutex::new(HashMap::new()),
            creating: AtomicUsize::new(0),
            metrics: Metrics::default(),
            rate_limit: Mutex::new(RateLimit::default()),
            control_requests: AtomicUsize::new(0),
        }
    }

    /// Sandbox `id` in whatever state, once its deadline has been applied.
    pub async fn get(&self, id: &str) -> Option<Entry> {
        let found = lock(&self.sandboxes).get(id).cloned()?;
        if found.paused_since.is_some() || found.end_at > OffsetDateTime::now_utc() {
            return Some(found);
        }
        self.on_deadline(id, &found).await;
        lock(&self.sandboxes).get(id).cloned()
    }

    /// Running sandbox `id`, as envd and the edge reach it.
    pub async fn live(&self, id: &str) -> Option<Entry> {
        self.get(id).await.filter(|entry| entry.paused_since.is_none())
    }

    /// Every sandbox, deadlines applied.
    pub async fn all(&self) -> Vec<(String, Entry)> {
        let ids: Vec<String> = lock(&self.sandboxes).keys().cloned().collect();
        let mut all = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(entry) = self.get(&id).await {
                all.push((id, entry));
            }
        }
        all
    }

    /// Running sandboxes, the ones that count against the capacity.
    pub fn running_count(&self) -> usize {
        lock(&self.sandboxes).values().filter(|entry| entry.paused_since.is_none()).count()
    }

    /// Starts a sandbox (from the pool when one of its kind waits there).
    pub async fn create(self: &Arc<Self>, new: NewEntry) -> Result<(String, Entry), HostError> {
        let _slot = self.reserve()?;
        let started = Instant::now();
        let local_id = match self.pool.take(&new.template, new.resolution) {
            Some(warm) => {
                self.metrics.pool_hits.inc();
                warm
            }
            None => {
                let template = Some(new.template.clone());
                let request = SandboxRequest { template, resolution: new.resolution, timeout: LOCAL_LIFETIME };
                let desktop = self.local.create(&request).await?;
                self.metrics.cold_start_seconds.observe(started.elapsed().as_secs_f64());
                desktop.id
            }
        };
        self.refill_pool();
        self.metrics.creates.inc();
        let now = OffsetDateTime::now_utc();
        let entry = Entry {
            local_id,
            template: new.template,
            started_at: now,
            end_at: now + new.timeout,
            access_token: format!("{:032x}", rand::random::<u128>()),
            metadata: new.metadata,
            env_vars: new.env_vars,
            running: Arc::new(Processes::default()),
            watchers: Arc::new(Watchers::default()),
            paused_since: None,
            on_timeout: new.on_timeout,
        };
        let id = format!("i{:019x}", rand::random::<u64>());
        self.keep_backstop_ahead(&entry).await;
        lock(&self.sandboxes).insert(id.clone(), entry.clone());
        Ok((id, entry))
    }

    /// Starts desktops for the pool in the background until it is full again.
    pub fn refill_pool(self: &Arc<Self>) {
        if self.pool.start_refill() {
            tokio::spawn(fill_pool(Arc::downgrade(self)));
        }
    }

    /// Takes a place under the capacity for a create, or refuses.
    fn reserve(&self) -> Result<Reservation<'_>, HostError> {
        let creating = self.creating.fetch_add(1, Ordering::SeqCst);
        if self.running_count() + creating >= self.settings.capacity {
            self.creating.fetch_sub(1, Ordering::SeqCst);
            return Err(HostError::Capacity(self.settings.capacity));
        }
        Ok(Reservation(&self.creating))
    }

    /// Changes the deadline of sandbox `id` to `new(end, now)`.
    pub async fn set_deadline(
        &self,
        id: &str,
        new: impl FnOnce(OffsetDateTime, OffsetDateTime) -> OffsetDateTime,
    ) -> Result<Entry, HostError> {
        self.get(id).await.ok_or_else(|| HostError::NotFound(id.to_owned()))?;
        let entry = {
            let mut sandboxes = lock(&self.sandboxes);
            let entry = sandboxes.get_mut(id).ok_or_else(|| HostError::NotFound(id.to_owned()))?;
            entry.end_at = new(entry.end_at, OffsetDateTime::now_utc());
            entry.clone()
        };
        self.keep_backstop_ahead(&entry).await;
        Ok(entry)
    }

    /// Moves the local provider's own deadline for the sandbox's desktop
    /// past the host's, so only the host's ends it.
    async fn keep_backstop_ahead(&self, entry: &Entry) {
        let left = (entry.end_at - OffsetDateTime::now_utc()).max(time::Duration::ZERO);
        let by = Duration::try_from(left).unwrap_or_default() + BACKSTOP_MARGIN;
        if let Err(error) = self.local.extend(&entry.local_id, by.min(LOCAL_LIFETIME)).await {
            tracing::warn!(%error, "the desktop's own deadline could not be moved");
        }
    }

    /// Pauses sandbox `id`: every process stopped, memory kept.
    pub async fn pause(&self, id: &str) -> Result<(), HostError> {
        let entry = self.get(id).await.ok_or_else(|| HostError::NotFound(id.to_owned()))?;
        if entry.paused_since.is_some() {
            return Err(HostError::AlreadyPaused(id.to_owned()));
        }
        self.freeze(id, &entry).await
    }

    /// Stops every process of running sandbox `id` and marks it paused.
    async fn freeze(&self, id: &str, entry: &Entry) -> Result<(), HostError> {
        self.local.pause(&entry.local_id).await?;
        if let Some(entry) = lock(&self.sandboxes).get_mut(id) {
            entry.paused_since = Some(Instant::now());
        }
        self.metrics.pauses.inc();
        Ok(())
    }

    /// Resumes paused sandbox `id` with `timeout` to live from now; a
    /// running one only has its deadline lengthened. Whether it was paused.
    pub async fn resume(&self, id: &str, timeout: Duration) -> Result<(bool, Entry), HostError> {
        let entry = self.get(id).await.ok_or_else(|| HostError::NotFound(id.to_owned()))?;
        let was_paused = entry.paused_since.is_some();
        if was_paused {
            if self.running_count() >= self.settings.capacity {
                return Err(HostError::Capacity(self.settings.capacity));
            }
            self.local.resume(&entry.local_id).await?;
        }
        let entry = {
            let mut sandboxes = lock(&self.sandboxes);
            let entry = sandboxes.get_mut(id).ok_or_else(|| HostError::NotFound(id.to_owned()))?;
            if let Some(since) = entry.paused_since.take() {
                self.metrics.paused_seconds.inc_by(since.elapsed().as_secs_f64());
                entry.end_at = OffsetDateTime::now_utc() + timeout;
            } else {
                entry.end_at = entry.end_at.max(OffsetDateTime::now_utc() + timeout);
            }
            entry.clone()
        };
        self.keep_backstop_ahead(&entry).await;
        Ok((was_paused, entry))
    }

    /// Kills sandbox `id` and its desktop; whether it was there.
    pub async fn remove(&self, id: &str) -> bool {
        let removed = lock(&self.sandboxes).remove(id);
        let Some(entry) = removed else { return false };
        if let Err(error) = self.local.kill(&entry.local_id).await {
            tracing::debug!(%error, sandbox = id, "the desktop was gone already");
        }
        true
    }

    /// What the deadline does to sandbox `id`: kills it, or pauses it.
    async fn on_deadline(&self, id: &str, entry: &Entry) {
        match entry.on_timeout {
            OnTimeout::Pause => {
                if let Err(error) = self.freeze(id, entry).await {
                    tracing::warn!(%error, sandbox = id, "the sandbox could not be paused at its deadline; killing it");
                    self.remove(id).await;
                }
            }
            OnTimeout::Kill => {
                self.remove(id).await;
                tracing::info!(sandbox = id, "the sandbox reached its deadline and was killed");
            }
        }
    }

    /// Applies the deadline of every running sandbox past it.
    pub async fn reap(&self) {
        let now = OffsetDateTime::now_utc();
        let due: Vec<String> = lock(&self.sandboxes)
            .iter()
            .filter(|(_, entry)| entry.paused_since.is_none() && entry.end_at <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in due {
            self.get(&id).await;
        }
    }

    /// When sandbox `id` ends, as the host sees it now.
    pub fn end_at(&self, id: &str) -> Option<OffsetDateTime> {
        lock(&self.sandboxes).get(id).map(|entry| entry.end_at)
    }

    /// Takes one `429` off the test budget, if any is left; its `Retry-After`.
    pub fn take_rate_limit(&self) -> Option<Duration> {
        let mut limit = lock(&self.rate_limit);
        if limit.remaining == 0 {
            return None;
        }
        limit.remaining -= 1;
        Some(limit.retry_after)
    }
}

/// Starts one desktop at a time until the pool holds its size; a failed
/// start ends the round (the next take starts another).
async fn fill_pool(host: std::sync::Weak<Host>) {
    loop {
        let Some(host) = host.upgrade() else { return };
        if !host.pool.wants_more() {
            host.pool.refilled();
            return;
        }
        let request = SandboxRequest { template: None, resolution: host.pool.resolution(), timeout: LOCAL_LIFETIME };
        match host.local.create(&request).await {
            Ok(desktop) => host.pool.put(desktop.id),
            Err(error) => {
                tracing::warn!(%error, "a pooled desktop did not start");
                host.pool.refilled();
                return;
            }
        }
    }
}

/// A place under the capacity held while a create runs.
struct Reservation<'a>(&'a AtomicUsize);

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
