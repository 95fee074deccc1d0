//! What every handler shares: the queue, the configuration, the API keys and
//! the process's shutdown token. Cloning it is cheap (one `Arc`).

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use flotilla_blobstore::BlobStore;
use flotilla_config::Config;
use flotilla_queue::queue::Queue;
use flotilla_queue::webhooks::target::{Lookup, SystemLookup};
use flotilla_queue::webhooks::Webhooks;
use tokio_util::sync::CancellationToken;

use crate::api_keys::LiveKeys;
use crate::feed::Tails;
use crate::hub::Hub;

/// The state of the API, handed to every handler.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    queue: Queue,
    keys: Arc<LiveKeys>,
    blobs: Option<BlobStore>,
    hub: Hub,
    tails: Tails,
    webhooks: Webhooks,
    shutdown: CancellationToken,
    /// The address [`crate::serve`] listens on, once it does.
    listening: OnceLock<SocketAddr>,
}

impl AppState {
    /// State for `config` over a connected `queue`. Long-lived responses (event
    /// streams) end when `shutdown` is cancelled.
    pub fn new(config: Config, queue: Queue, shutdown: CancellationToken) -> Self {
        Self::with_blobs(config, queue, None, shutdown)
    }

    /// State that also presigns links to what tasks stored in `blobs`.
    /// Starts the process's event [`Hub`], so it needs a Tokio runtime.
    pub fn with_blobs(config: Config, queue: Queue, blobs: Option<BlobStore>, shutdown: CancellationToken) -> Self {
        Self::with_lookup(config, queue, blobs, Arc::new(SystemLookup), shutdown)
    }

    /// State whose webhook targets' names are resolved by `lookup` when
    /// endpoints are made or changed.
    pub fn with_lookup(
        config: Config,
        queue: Queue,
        blobs: Option<BlobStore>,
        lookup: Arc<dyn Lookup>,
        shutdown: CancellationToken,
    ) -> Self {
        let keys = Arc::new(LiveKeys::new(&config.auth));
        // Finished tasks past the hot window are read from the store.
        let queue = match &blobs {
            Some(store) => queue.with_archive(store.clone()),
            None => queue,
        };
        let webhooks = Webhooks::of_queue(&queue, config.webhooks.clone()).with_lookup(lookup);
        let relay = crate::relay::start(&queue, shutdown.clone());
        let hub = Hub::start(queue.clone(), config.streams.clone(), relay, shutdown.clone());
        let tails = Tails::new(hub.clone(), queue.clone());
        let listening = OnceLock::new();
        Self { inner: Arc::new(Inner { config, queue, keys, blobs, hub, tails, webhooks, shutdown, listening }) }
    }

    /// The webhook store.
    pub fn webhooks(&self) -> &Webhooks {
        &self.inner.webhooks
    }

    /// The process's one subscription to events, and its stream limits.
    pub fn hub(&self) -> &Hub {
        &self.inner.hub
    }

    /// The readers of the tenants' feeds.
    pub fn tails(&self) -> &Tails {
        &self.inner.tails
    }

    /// Where screenshots and artifacts are, when configured.
    pub fn blobs(&self) -> Option<&BlobStore> {
        self.inner.blobs.as_ref()
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub fn queue(&self) -> &Queue {
        &self.inner.queue
    }

    /// The API keys in force (reloaded from the keys file while running).
    pub fn keys(&self) -> &Arc<LiveKeys> {
        &self.inner.keys
    }

    /// The address the API listens on: the one it bound, else the
    /// configured one (`FLOTILLA_API_ADDR`).
    pub fn listen_addr(&self) -> SocketAddr {
        self.inner.listening.get().copied().unwrap_or(self.inner.config.api.addr)
    }

    /// Records the address the API bound.
    pub(crate) fn listening_on(&self, addr: SocketAddr) {
        let _ = self.inner.listening.set(addr);
    }

    pub fn shutdown(&self) -> &CancellationToken {
        &self.inner.shutdown
    }
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState").field("queue", &self.inner.queue).finish_non_exhaustive()
    }
}
