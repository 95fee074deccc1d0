//! A fleet whose worker runs tasks on real local desktops: one in-process
//! worker whose `local` sandboxes come from a sandbox host of the test's own
//! (`flotilla-sandboxd`, reached over E2B's protocol as a worker given
//! `FLOTILLA_SANDBOXD_URL` reaches one), or another provider a test gives,
//! and optionally a blob store,
//! on its own `redis-server`, with helpers to submit a task and wait for its
//! end.

use std::sync::Arc;
use std::time::Duration;

use flotilla_blobstore::{BlobStore, UploaderOptions};
use flotilla_config::Config;
use flotilla_queue::queue::Queue;
use flotilla_sandboxd::Sandboxd;
use flotilla_types::action::Action;
use flotilla_types::event::{Event, EventKind};
use flotilla_types::ids::{TaskId, TenantId};
use flotilla_types::task::SandboxProviderKind;
use flotilla_types::task::{TaskSpec, TaskStatus};
use flotilla_worker::sandbox::{E2bConfig, E2bProvider, LocalConfig, LocalProvider, SandboxOwners, SandboxPool, SandboxProvider};
use flotilla_worker::tools::Tools;
use flotilla_worker::Registry;
use serde_json::Value;

use crate::tasks::{events, queue, record, tenant, wait_all_ended};
use crate::{test_config, unique_prefix, InProcessWorker, RedisServer};

/// How long a desktop task may take in a test.
pub const TASK_TIMEOUT: Duration = Duration::from_secs(60);

/// What a desktop fleet is started with.
#[derive(Default)]
pub struct DesktopOptions {
    /// Ready desktops the pool keeps.
    pub warm: usize,
    pub blobs: Option<BlobStore>,
    pub uploads: UploaderOptions,
    /// Settings beside the test defaults (model endpoints and keys, …).
    pub env: Vec<(&'static str, String)>,
    /// The sandboxes' provider; local desktops of a sandbox host of the
    /// fleet's own when none.
    pub provider: Option<Arc<dyn SandboxProvider>>,
}

/// One in-process worker with local desktops, and its queue.
pub struct DesktopFleet {
    pub queue: Queue,
    pub pool: SandboxPool,
    pub config: Config,
    worker: Option<InProcessWorker>,
    /// The sandbox host the desktops live on, when the test gave no provider.
    pub host: Option<Sandboxd>,
    _redis: RedisServer,
}

/// Local desktops a worker with no sandbox host named starts itself.
pub fn in_process_desktops() -> Arc<dyn SandboxProvider> {
    Arc::new(LocalProvider::new(LocalConfig::default()))
}

/// The worker's `local` provider on `host`, as `FLOTILLA_SANDBOXD_URL` makes it.
pub fn local_provider_on(host: &Sandboxd) -> Arc<dyn SandboxProvider> {
    let config = E2bConfig { kind: SandboxProviderKind::Local, ..host.config() };
    Arc::new(E2bProvider::new(config).expect("a provider for the test's sandbox host"))
}

impl DesktopFleet {
    /// Starts Redis and a worker with every configured pipeline.
    pub async fn start(options: DesktopOptions) -> Self {
        let redis = RedisServer::start();
        let mut extra: Vec<(&str, &str)> = vec![("FLOTILLA_HEARTBEAT_MS", "200")];
        extra.extend(options.env.iter().map(|(k, v)| (*k, v.as_str())));
        let config = test_config(&redis, &unique_prefix(), &extra);
        let (provider, host) = match options.provider {
            Some(provider) => (provider, None),
            None => {
                let host = Sandboxd::start().await;
                (local_provider_on(&host), Some(host))
            }
        };
        // Warm counts as the worker reads them (`FLOTILLA_SANDBOX_WARM`), or `warm` for the default shape.
        let mut pool_config = flotilla_worker::tools::pool_config(&config, provider.kind(), provider.name());
        pool_config.max_live = 4;
        pool_config.warm = pool_config.warm.max(options.warm);
        let pool = SandboxPool::new(provider, pool_config);
        let tools = Tools {
            sandboxes: Some(pool.clone()),
            blobs: options.blobs,
            uploads: options.uploads,
            gateway: None,
            live: None,
            pricing: Default::default(),
            profile_key: config.s3.profile_key.clone(),
            park_waiting_after: config.worker.park_waiting_after,
            templates: Arc::new(config.templates.clone()),
        };
        let worker = InProcessWorker::start_with_tools(config.clone(), Registry::for_config(&config), tools);
        Self { queue: queue(&config).await, pool, config, worker: Some(worker), host, _redis: redis }
    }

    pub async fn submit(&self, spec: Value) -> TaskId {
        self.submit_as(&tenant(), spec).await
    }

    /// Submits a task of `tenant`.
    pub async fn submit_as(&self, tenant: &TenantId, spec: Value) -> TaskId {
        let spec = TaskSpec::from_json(spec.to_string().as_bytes()).expect("valid spec");
        self.queue.submitter().submit(tenant, spec).await.expect("submit").id
    }

    /// Submits a task, waits for its end and returns its events.
    pub async fn run_to_end(&self, spec: Value) -> (TaskId, Vec<Event>) {
        self.run_to_end_as(&tenant(), spec).await
    }

    /// Submits a task of `tenant`, waits for its end and returns its events.
    pub async fn run_to_end_as(&self, tenant: &TenantId, spec: Value) -> (TaskId, Vec<Event>) {
        let id = self.submit_as(tenant, spec).await;
        eventually("the task ends", TASK_TIMEOUT, async || {
            self.queue.reader().get(tenant, &id).await.ok().flatten().is_some_and(|r| r.status.is_terminal())
        })
        .await;
        let events = events(&self.queue, &id).await;
        (id, events)
    }

    /// The fleet's records of which tenant owns which sandbox.
    pub fn owners(&self) -> SandboxOwners {
        self.queue.sandbox_owners()
    }

    pub async fn wait_ended(&self, id: &TaskId) {
        wait_all_ended(&self.queue, std::slice::from_ref(id), TASK_TIMEOUT).await;
    }

    /// Waits until the task waits for a human.
    pub async fn wait_until_waiting(&self, id: &TaskId) {
        eventually("the task waits for a human", TASK_TIMEOUT, async || {
            record(&self.queue, id).await.status == TaskStatus::Waiting
        })
        .await;
    }

    /// Stops the worker and ends every pooled desktop, and the fleet's
    /// sandbox host with whatever still runs on it.
    pub async fn stop(mut self) {
        if let Some(worker) = self.worker.take() {
            worker.stop().await;
        }
        self.pool.shutdown().await;
        if let Some(host) = self.host.take() {
            host.shutdown().await;
        }
    }
}

pub use crate::wait::eventually;

/// The ids of the sandboxes a task's `sandbox_ready` events announced, in order.
pub fn sandbox_ids(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            flotilla_types::event::EventKind::SandboxReady { sandbox_id, .. } => Some(sandbox_id.clone()),
            _ => None,
        })
        .collect()
}

/// How many of `events` are of type `name`.
pub fn count(events: &[Event], name: &str) -> usize {
    events.iter().filter(|e| e.kind.name() == name).count()
}

/// The actions a task performed, as the sandbox got them.
pub fn performed(events: &[Event]) -> Vec<Action> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ActionCompleted { action, .. } => Some(action.clone()),
            _ => None,
        })
        .collect()
}

/// Width and height from a PNG's header.
pub fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert!(bytes.len() > 24 && bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    let word = |at: usize| u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    (word(16), word(20))
}
