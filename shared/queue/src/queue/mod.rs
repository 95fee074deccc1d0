//! The task queue on Redis Streams.
//!
//! Layout (see [`crate::keys`]): each tenant has one stream per route and
//! priority lane, read by the consumer group `workers`; a stream entry carries only a
//! task id, and the task's spec and state live in its own hash beside its
//! events. A shard's due set holds tasks waiting for a time (retry backoff,
//! `not_before`) until the promoter moves them into their lanes.
//!
//! Delivery: tenants take turns by weight ([`fair_scripts`]); a turn reads
//! the tenant's lanes high → normal → low with `XREADGROUP`, only on the
//! routes the claiming worker serves ([`flotilla_types::route`]). Workers ask for
//! work through one seam, [`Claimer::next`]. A running attempt renews its
//! lease every heartbeat; an entry idle in the pending list for longer than
//! the lease belongs to a worker presumed dead and is taken over with
//! `XAUTOCLAIM`. Taking over starts a new attempt, and
//! every write of the old one is refused by the fenced scripts of
//! [`scripts`]. An entry is acknowledged and deleted only after the task's
//! terminal state (or its hand-back for retry) is written, so a crash at any
//! point leaves the entry pending and some worker finishes the task.
//!
//! Retention: a finished task's hash and events expire after the configured
//! retention; the tenant index forgets ids whose hash is gone.

mod admission;
mod archive;
mod attempt;
mod batch;
mod batch_runs;
mod batch_spec;
mod claim;
pub mod fair_scripts;
pub(crate) mod feed;
mod feed_relay;
mod journal;
mod kept;
mod liveness;
mod next;
mod park;
mod record;
mod roles;
mod routing;
mod screens;
pub mod scripts;
mod settings_sync;
mod singles;
mod stats;
mod stored_files;
mod submit;
mod takeover;
mod usage;

use std::sync::Arc;
use std::time::Duration;

pub use admission::Verdict;
pub(crate) use admission::ADMIT_FN;
pub use archive::ArchivePass;
pub use attempt::{Attempt, Ending, HeartbeatOutcome, Outcome, Skipped, StartOutcome, Terminal};
pub use batch::{BatchCancel, BatchCounts, BatchRecord};
pub use batch_runs::{expand_tasks, place_error, plan_batch, PlanError, PlanRequest, PlannedRuns};
pub use batch_spec::{batch_specs, check_batch_templates, MAX_BATCH_TASKS};
pub use claim::Delivery;
pub use feed::{BadFeedId, FeedEntry, FeedId, FEED_READ};
pub use feed_relay::Heard;
pub use flotilla_types::record::TaskRecord;
pub use journal::JOURNAL_MAX_BYTES;
pub use next::{Claim, Claimer};
pub use park::Parked;
pub use record::StoredRecord;
pub use roles::{Housekeeper, Reader, Runner, Submitter};
pub use routing::{CapabilityWait, ADVERTISE_EVERY};
pub use singles::SUBMIT_SINGLES;
pub use stats::{FleetStats, LaneStats, QueueStats, TenantLoad};
pub use stored_files::FileRef;
pub use submit::{CancelOutcome, ListFilter, NewTask, ScreenshotRef, Submitted, MAX_LIST_LIMIT};
pub use takeover::Takeover;

use crate::error::QueueError;
use crate::keys::{Keys, CLUSTER_SHARDS};
use crate::redis_conn::Redis;
use flotilla_config::{Config, TenantsConfig};
use flotilla_types::event::EventOrigin;
use flotilla_types::ids::{BatchId, TaskId, TenantId};

/// Timing rules of the queue.
#[derive(Debug, Clone)]
pub struct QueueSettings {
    pub lease: Duration,
    /// How long a worker's liveness mark lasts: twice its heartbeat, at
    /// most the lease. A worker whose mark ran out is presumed dead and its
    /// tasks are taken at once (see `liveness`).
    pub liveness: Duration,
    pub retention: Duration,
    /// The hot window: how long a finished task stays in Redis before the
    /// archive pass moves it to the object store (`None`: never).
    pub archive_after: Option<Duration>,
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// Each tenant's weight and limits.
    pub tenants: Arc<TenantsConfig>,
    /// The clock of usage days, the daily token limit and due tasks.
    pub clock: flotilla_types::clock::Clock,
    /// Whether usage also goes into each tenant's all-time totals, which
    /// the API's per-tenant metrics show (`FLOTILLA_TENANT_METRICS`).
    pub tenant_totals: bool,
}

impl QueueSettings {
    pub fn from_config(config: &Config) -> Self {
        Self {
            lease: config.queue.lease,
            liveness: (config.queue.heartbeat * 2).min(config.queue.lease),
            retention: config.queue.retention,
            archive_after: config.queue.archive_after,
            retry_base: config.queue.retry_base,
            retry_max: config.queue.retry_max,
            tenants: Arc::new(config.tenants.clone()),
            clock: config.clock.clone(),
            tenant_totals: config.limits.tenant_metrics,
        }
    }
}

/// The queue: every read and write of tasks goes through here.
#[derive(Clone)]
pub struct Queue {
    redis: Redis,
    keys: Keys,
    settings: QueueSettings,
    /// Where finished tasks go after the hot window, when there is a store.
    archive: Option<archive::Archive>,
    /// Single-task submits waiting for their tenant's next script call.
    singles: Arc<singles::Waiting>,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("prefix", &self.keys.prefix()).finish_non_exhaustive()
    }
}

impl Queue {
    /// The queue on this connection; on a cluster its keys are split over
    /// [`CLUSTER_SHARDS`] scheduler shards.
    pub fn new(redis: Redis, keys: Keys, settings: QueueSettings) -> Self {
        let keys = keys.with_shards(if redis.is_cluster() { CLUSTER_SHARDS } else { 1 });
        Self { redis, keys, settings, archive: None, singles: Arc::default() }
    }

    /// The same queue over another connection, for work beside the task
    /// path that should not share the task path's connection.
    pub fn on(&self, redis: Redis) -> Self {
        Self { archive: self.archive.clone(), ..Self::new(redis, self.keys.clone(), self.settings.clone()) }
    }

    /// The same queue reading finished tasks past the hot window from
    /// `store` too, and (with [`Housekeeper::archive_finished`]) moving them there;
    /// unchanged when the hot window is off.
    pub fn with_archive(self, store: flotilla_blobstore::BlobStore) -> Self {
        let archive = self.settings.archive_after.map(|hot| archive::Archive::new(store, hot));
        Self { archive, ..self }
    }

    /// Connects to Redis as configured and writes the configured tenants'
    /// settings where the scheduler reads them.
    pub async fn connect(config: &Config) -> Result<Self, QueueError> {
        let redis = Redis::connect(&config.redis).await?;
        let queue = Self::new(redis, Keys::new(config.key_prefix.clone()), QueueSettings::from_config(config));
        queue.housekeeper().write_tenant_settings().await?;
        Ok(queue)
    }

    /// The queue's key names: the crate's own, and tests' and benchmarks'
    /// (the `testing` feature); the binaries go through the queue's methods.
    #[cfg(feature = "testing")]
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    #[cfg(not(feature = "testing"))]
    pub(crate) fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The queue's connection, seen as [`Queue::keys`] is.
    #[cfg(feature = "testing")]
    pub fn redis(&self) -> &Redis {
        &self.redis
    }

    #[cfg(not(feature = "testing"))]
    pub(crate) fn redis(&self) -> &Redis {
        &self.redis
    }

    /// Whether Redis answers a `PING` now (the readiness probes).
    pub async fn ping(&self) -> bool {
        self.redis.ping().await
    }

    /// A new subscription connection, for a process's one fan-out of live
    /// events (see [`Queue::event_channel_pattern`]).
    pub async fn event_pubsub(&self) -> Result<redis::aio::PubSub, QueueError> {
        self.redis.pubsub().await
    }

    /// The pattern that matches every tenant's event channel.
    pub fn event_channel_pattern(&self) -> String {
        self.keys.tenant_channel_pattern()
    }

    /// The live views' tokens and control generations.
    pub fn live_views(&self) -> crate::live::LiveViews {
        crate::live::LiveViews::new(self.redis.clone(), self.keys.clone())
    }

    /// The records of which tenant owns which sandbox.
    pub fn sandbox_owners(&self) -> crate::sandbox_owners::SandboxOwners {
        crate::sandbox_owners::SandboxOwners::new(self.redis.clone(), self.keys.clone())
    }

    pub fn settings(&self) -> &QueueSettings {
        &self.settings
    }

    /// Now, by the queue's clock (epoch ms).
    pub fn now_ms(&self) -> i64 {
        self.settings.clock.now_ms()
    }

    fn retention_ms(&self) -> u64 {
        self.settings.retention.as_millis() as u64
    }

    /// How many tasks one script call may cover: all of a batch on a single
    /// server, one on a cluster (each task's keys are a slot of their own).
    fn tasks_per_call(&self, most: usize) -> usize {
        if self.redis.is_cluster() {
            1
        } else {
            most
        }
    }

    /// Runs script calls concurrently; one reply per call, in order.
    async fn invoke_each<R: redis::FromRedisValue>(&self, calls: &[redis::ScriptInvocation<'_>]) -> Result<Vec<R>, QueueError> {
        let conn = self.redis.shared();
        let sends = calls.iter().map(|inv| {
            let mut conn = conn.clone();
            async move { inv.invoke_async::<R>(&mut conn).await }
        });
        futures::future::join_all(sends).await.into_iter().map(|reply| reply.map_err(QueueError::from)).collect()
    }

    /// A task script invocation with the shared leading keys and arguments.
    fn task_invocation<'a>(
        &self,
        script: &'a redis::Script,
        task_id: &TaskId,
        draft: &str,
        now_ms: i64,
    ) -> redis::ScriptInvocation<'a> {
        let mut inv = script.prepare_invoke();
        inv.key(self.keys.task(task_id));
        inv.arg(self.script_channels()).arg(task_id.as_str()).arg(draft).arg(now_ms);
        inv
    }
}

/// The origin of events on a task whose batch and tenant are known.
pub fn origin(task_id: &TaskId, batch_id: Option<&BatchId>, tenant: &TenantId) -> EventOrigin {
    EventOrigin { task_id: task_id.clone(), batch_id: batch_id.cloned(), tenant: tenant.clone() }
}

/// The queue's Redis scripts by name (see `crate::testing`).
#[cfg(feature = "testing")]
pub(crate) fn lua_scripts() -> Vec<(&'static str, &'static redis::Script)> {
    use fair_scripts as f;
    use scripts as s;
    let mut all: Vec<(&'static str, &'static redis::Script)> = vec![
        ("queue/create", &s::CREATE),
        ("queue/start", &s::START),
        ("queue/finish", &s::FINISH),
        ("queue/heartbeat", &s::HEARTBEAT),
        ("queue/emit", &s::EMIT),
        ("queue/retry", &s::RETRY),
        ("queue/requeue", &s::REQUEUE),
        ("queue/cancel", &s::CANCEL),
        ("queue/set_fields", &s::SET_FIELDS),
        ("queue/journal", &journal::JOURNAL),
        ("queue/give_input", &s::GIVE_INPUT),
        ("queue/park", &park::PARK),
        ("queue/take_input", &s::TAKE_INPUT),
        ("queue/takeover", &s::TAKEOVER),
        ("queue/release", &s::RELEASE),
        ("queue/revive", &s::REVIVE),
        ("queue/sweep_ended", &s::SWEEP_ENDED),
        ("queue/sweep_finished", &s::SWEEP_FINISHED),
        ("queue/enqueue", &f::ENQUEUE),
        ("queue/set_settings", &f::SET_SETTINGS),
        ("queue/pause", &f::PAUSE),
        ("queue/claim_turns", &f::CLAIM_TURNS),
        ("queue/claim_and_start", &f::CLAIM_AND_START),
        ("queue/ack", &f::ACK),
        ("queue/reclaim", &f::RECLAIM),
        ("queue/promote", &f::PROMOTE),
        ("queue/trim", &f::TRIM),
        ("queue/forget_gone_consumers", &f::FORGET_GONE_CONSUMERS),
        ("queue/defer", &f::DEFER),
        ("queue/finish_and_ack", &f::FINISH_AND_ACK),
        ("queue/submit_singles", &singles::SUBMIT_SINGLES),
        ("queue/add_usage", &usage::ADD),
        ("queue/keep_sandbox", &kept::KEEP),
        ("queue/forget_sandbox", &kept::FORGET),
        ("queue/feed_append", &feed_relay::APPEND),
        ("queue/lift_pause", &settings_sync::LIFT),
    ];
    all.extend(archive::lua_scripts());
    all
}
