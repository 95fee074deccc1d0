//! What a worker gives tasks beyond the queue, built from the typed
//! configuration: a sandbox pool over the configured provider, the blob
//! store for screenshots and artifacts (with a fleet-wide cap on live
//! sandboxes in Redis when `FLOTILLA_SANDBOX_FLEET_MAX` is set), and the model gateway through which
//! sandboxes reach the model provider. Any may be absent; a task that
//! needs a missing one ends with code `problem` and a message saying which
//! setting to add.

use std::sync::Arc;

use flotilla_blobstore::{BlobConfig, BlobStore, UploaderOptions};
use flotilla_config::{Config, ProfileKey, DEFAULT_TEMPLATE};
use flotilla_queue::keys::Keys;
use flotilla_types::task::SandboxProviderKind;
use tracing::{info, warn};

use crate::gateway::{GatewayConfig, ModelGateway};
use crate::live::LiveDesktops;
use crate::pipeline::held::provider_template;
use crate::pipeline::pricing::Pricing;
use crate::sandbox::{
    E2bConfig, E2bProvider, FleetCap, FleetCapConfig, LocalConfig, LocalProvider, PoolConfig, PooledShape, SandboxPool,
    SandboxProvider, SandboxRequest,
};

/// Sandboxes and storage for the tasks of one worker.
#[derive(Clone, Default)]
pub struct Tools {
    pub sandboxes: Option<SandboxPool>,
    pub blobs: Option<BlobStore>,
    pub uploads: UploaderOptions,
    /// The gateway sandboxed agents call models through; present when the
    /// configuration has a model provider key.
    pub gateway: Option<ModelGateway>,
    /// The desktops this worker shows live; present when its HTTP side runs.
    pub live: Option<LiveDesktops>,
    /// What model calls cost (the configured price table).
    pub pricing: Arc<Pricing>,
    /// The sandbox templates: which apps each has, and E2B's ids for them.
    pub templates: Arc<flotilla_config::TemplatesConfig>,
    /// The key saved browser profiles are sealed with (`FLOTILLA_PROFILE_KEY`).
    pub profile_key: Option<ProfileKey>,
    /// How long a task waits for a person before it is parked
    /// (`FLOTILLA_PARK_WAITING_AFTER_MS`).
    pub park_waiting_after: std::time::Duration,
}

impl Tools {
    /// The tools `config` asks for; AWS credentials come from `env`.
    pub async fn from_config<I, K, V>(config: &Config, env: I) -> anyhow::Result<Self>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let sandboxes = match config.sandbox.provider {
            None => None,
            Some(kind) => {
                let provider = provider(config, kind).await?;
                let pool_config = pool_config(config, kind, provider.name());
                Some(SandboxPool::new(provider, pool_config))
            }
        };
        let blobs = match &config.s3.bucket {
            None => None,
            Some(_) => Some(blob_store(BlobConfig::from_env(config, env)?).await),
        };
        if sandboxes.is_some() && blobs.is_none() {
            warn!("screenshots are not kept: set FLOTILLA_S3_BUCKET to store them");
        }
        let gateway = GatewayConfig::anthropic(config).map(ModelGateway::new);
        let pricing = Arc::new(Pricing::new(config.prices.clone()));
        let (templates, profile_key) = (Arc::new(config.templates.clone()), config.s3.profile_key.clone());
        Ok(Self {
            sandboxes,
            blobs,
            uploads: UploaderOptions::default(),
            gateway,
            live: None,
            pricing,
            templates,
            profile_key,
            park_waiting_after: config.worker.park_waiting_after,
        })
    }

    /// Ends every pooled sandbox.
    pub async fn shutdown(&self) {
        if let Some(live) = &self.live {
            live.shutdown().await;
        }
        if let Some(pool) = &self.sandboxes {
            pool.shutdown().await;
        }
    }
}

async fn provider(config: &Config, kind: SandboxProviderKind) -> anyhow::Result<Arc<dyn SandboxProvider>> {
    match kind {
        SandboxProviderKind::Local => match &config.sandboxd_client {
            Some(host) => Ok(Arc::new(flotilla_e2b::SandboxHosts::start(host.clone()).await?)),
            None => {
                let local = local_provider(config).await?;
                // Said once it works: a worker that cannot start says why in one line.
                tracing::warn!(
                    "local desktops run under this worker and end with it; a sandbox host (flotilla-sandboxd, \
                     FLOTILLA_SANDBOXD_URL) keeps them through a restart and lets any worker reach them"
                );
                Ok(Arc::new(local))
            }
        },
        SandboxProviderKind::E2b => {
            let key = config
                .e2b
                .api_key
                .clone()
                .ok_or_else(|| anyhow::anyhow!("E2B_API_KEY is required with FLOTILLA_SANDBOX_PROVIDER=e2b"))?;
            let e2b = E2bProvider::new(E2bConfig::for_account(key, &config.e2b)).map_err(|e| anyhow::anyhow!("E2B: {e}"))?;
            Ok(Arc::new(e2b))
        }
    }
}

/// The local provider, refused when its jail does not work here.
async fn local_provider(config: &Config) -> anyhow::Result<LocalProvider> {
    // A template whose apps are missing is named on its own, not as a jail problem.
    config.templates.check_installed(flotilla_config::program_on_path).map_err(anyhow::Error::msg)?;
    let config = LocalConfig { templates: config.templates.clone(), ..LocalConfig::from_settings(&config.isolation) };
    LocalProvider::start(config)
        .await
        .map_err(|e| anyhow::anyhow!("{e} (FLOTILLA_SANDBOX_ISOLATION=none runs sandboxes unisolated, for development only)"))
}

/// The pool: the default template's warm count on the default shape, and
/// a shape of its own for each other template given a count.
pub fn pool_config(config: &Config, kind: SandboxProviderKind, provider: &str) -> PoolConfig {
    let defaults = PoolConfig::default();
    let more_shapes = config
        .sandbox
        .warm
        .iter()
        .filter(|(name, warm)| name.as_str() != DEFAULT_TEMPLATE && **warm > 0)
        .map(|(name, warm)| {
            let template = Some(provider_template(name, kind, &config.templates));
            PooledShape { request: SandboxRequest { template, ..defaults.default_request.clone() }, warm: *warm }
        })
        .collect();
    PoolConfig {
        warm: config.sandbox.warm_of(DEFAULT_TEMPLATE),
        max_live: config.sandbox.max.max(config.sandbox.warm_total()),
        more_shapes,
        fleet: fleet_cap(config, provider),
        ..defaults
    }
}

/// The fleet-wide cap of `provider`'s sandboxes, when one is configured.
fn fleet_cap(config: &Config, provider: &str) -> Option<FleetCap> {
    let max = config.sandbox.fleet_max?;
    let key = Keys::new(config.key_prefix.clone()).sandbox_slots(provider);
    info!(provider, max, "sandboxes are capped fleet-wide");
    Some(FleetCap::new(config.redis.clone(), key, &config.worker.id, FleetCapConfig::new(max)))
}

/// The store, checked once: a store that does not answer yet is used
/// anyway, since uploads ride out outages.
async fn blob_store(config: BlobConfig) -> BlobStore {
    let store = BlobStore::new(config);
    match store.check().await {
        Ok(support) => info!(bucket = store.bucket(), conditional_put = support.conditional_put, "blob store ready"),
        Err(e) => warn!(bucket = store.bucket(), error = %e, "blob store does not answer yet; uploads will retry"),
    }
    store
}
