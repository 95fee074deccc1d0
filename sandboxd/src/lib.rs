//! A local stand-in for E2B that speaks its wire protocol, for tests: the
//! control plane on one loopback port (same paths, `POST /v2/sandboxes`
//! beside `/sandboxes`, `X-API-Key`, JSON and status codes as the hosted
//! API) and an [edge](edge) on another that
//! routes by the `E2b-Sandbox-Id` and `E2b-Sandbox-Port` headers or by a
//! `Host` of `<port>-<id>.<domain>`: envd's port to the fake envd
//! (`X-Access-Token` checked, `process.Process/Start` answered with Connect
//! envelopes, `/files` raw bytes), any other port into the sandbox's own
//! network (the Desktop SDK's stream on 6080). Each sandbox is a real local
//! desktop from [`LocalProvider`], so commands really run, actions really
//! land on an Xvfb screen, and x11vnc and noVNC really serve it.
//!
//! Where the hosted service differs: the template's desktop is already up
//! when the create answers (at the size the create's metadata asks for),
//! and the fake's own clock kills sandboxes at their `endAt`. Tests can make
//! the next creates answer `429` and kill a sandbox behind the client's back.

mod control;
mod edge;
mod envd;

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flotilla_config::Secret;
use time::OffsetDateTime;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use flotilla_desktop::{Isolation, LocalConfig, LocalProvider};
use flotilla_e2b::{E2bConfig, EnvdAddress, DEFAULT_TEMPLATE, DEFAULT_USER};
use flotilla_sandbox::{SandboxId, SandboxProvider};

/// The envd version the fake claims.
const ENVD_VERSION: &str = "0.6.13";
/// The sandbox domain: per-port hosts are `<port>-<id>.localhost`, which
/// browsers resolve to loopback by themselves.
pub const SANDBOX_DOMAIN: &str = "localhost";
/// How often sandboxes past their `endAt` are killed.
const REAP_INTERVAL: Duration = Duration::from_millis(100);

/// One fake sandbox and the local desktop behind it.
#[derive(Debug, Clone)]
struct FakeSandbox {
    local_id: SandboxId,
    template: String,
    started_at: OffsetDateTime,
    end_at: OffsetDateTime,
    access_token: String,
    metadata: HashMap<String, String>,
    /// Pids of processes started through envd and still running.
    running: Arc<Mutex<HashSet<u32>>>,
}

/// `429`s to answer before the next creates succeed.
#[derive(Debug, Default)]
struct RateLimit {
    remaining: u32,
    retry_after: Duration,
}

/// Local desktops with their own root directory, removed once they are gone.
struct Desktops {
    provider: Option<LocalProvider>,
    root: PathBuf,
}

impl Drop for Desktops {
    fn drop(&mut self) {
        drop(self.provider.take());
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// What both servers share.
struct State {
    api_key: String,
    desktops: Desktops,
    sandboxes: Mutex<HashMap<String, FakeSandbox>>,
    rate_limit: Mutex<RateLimit>,
    control_requests: AtomicUsize,
}

impl State {
    fn local(&self) -> &LocalProvider {
        self.desktops.provider.as_ref().expect("the desktops live as long as the state")
    }

    /// The live sandbox `id`; one past its `endAt` is killed first.
    async fn live(&self, id: &str) -> Option<FakeSandbox> {
        let found = lock(&self.sandboxes).get(id).cloned()?;
        if found.end_at > OffsetDateTime::now_utc() {
            return Some(found);
        }
        self.remove(id).await;
        None
    }

    /// Removes sandbox `id` and kills its desktop; whether it was there.
    async fn remove(&self, id: &str) -> bool {
        let removed = lock(&self.sandboxes).remove(id);
        let Some(sandbox) = removed else { return false };
        if let Err(error) = self.local().kill(&sandbox.local_id).await {
            tracing::debug!(%error, "the fake's desktop was gone already");
        }
        true
    }

    fn expired_ids(&self) -> Vec<String> {
        let now = OffsetDateTime::now_utc();
        lock(&self.sandboxes).iter().filter(|(_, s)| s.end_at <= now).map(|(id, _)| id.clone()).collect()
    }
}

/// A running fake; dropping it stops both servers and every desktop.
pub struct Sandboxd {
    state: Arc<State>,
    api_url: String,
    envd_url: String,
    shutdown: CancellationToken,
}

impl Sandboxd {
    /// Starts both servers on free loopback ports with a fresh API key.
    pub async fn start() -> Self {
        Self::start_with_internet(Vec::new()).await
    }

    /// The same, with sandboxes that reach `internet` (addresses of this
    /// host, which a sandbox's jail otherwise blocks) as a hosted sandbox
    /// reaches public addresses: through its own network's way out.
    pub async fn start_with_internet(internet: Vec<Ipv4Addr>) -> Self {
        let root = std::env::temp_dir().join(format!("flotilla-e2b-fake-{:016x}", rand::random::<u64>()));
        let local = LocalProvider::new(LocalConfig {
            root: root.clone(),
            isolation: Isolation::Full,
            egress_exceptions: internet,
            ..LocalConfig::default()
        });
        let state = Arc::new(State {
            api_key: format!("e2b_{:032x}", rand::random::<u128>()),
            desktops: Desktops { provider: Some(local), root },
            sandboxes: Mutex::new(HashMap::new()),
            rate_limit: Mutex::new(RateLimit::default()),
            control_requests: AtomicUsize::new(0),
        });
        let shutdown = CancellationToken::new();
        let api_url = serve(control::router(Arc::clone(&state)), &shutdown).await;
        let envd = serve(envd::router(Arc::clone(&state)), &shutdown).await;
        let envd_url = edge::serve(Arc::clone(&state), address_of(&envd), &shutdown).await;
        tokio::spawn(reap(Arc::downgrade(&state), shutdown.clone()));
        Self { state, api_url, envd_url, shutdown }
    }

    /// A provider configuration that reaches this fake with the right key.
    pub fn config(&self) -> E2bConfig {
        self.config_with_key(&self.state.api_key)
    }

    /// The same with any key.
    pub fn config_with_key(&self, api_key: &str) -> E2bConfig {
        E2bConfig {
            api_url: self.api_url.clone(),
            api_key: Secret::new(api_key),
            domain: SANDBOX_DOMAIN.into(),
            envd: EnvdAddress::Routed { base_url: self.envd_url.clone() },
            template: DEFAULT_TEMPLATE.into(),
            user: DEFAULT_USER.into(),
            request_timeout: Duration::from_secs(30),
            start_timeout: Duration::from_secs(20),
            rate_limit_retries: 3,
            max_retry_after: Duration::from_secs(10),
            key_delay: Duration::from_millis(12),
        }
    }

    /// The next `count` creates answer `429` with `Retry-After` in seconds.
    pub fn rate_limit_creates(&self, count: u32, retry_after: Duration) {
        *lock(&self.state.rate_limit) = RateLimit { remaining: count, retry_after };
    }

    /// How many control-plane requests arrived, answered or refused.
    pub fn control_requests(&self) -> usize {
        self.state.control_requests.load(Ordering::SeqCst)
    }

    /// Kills sandbox `id` as if from the dashboard; whether it was there.
    pub async fn kill_from_outside(&self, id: &SandboxId) -> bool {
        self.state.remove(id.as_str()).await
    }

    /// When sandbox `id` dies, as the fake sees it.
    pub fn end_at(&self, id: &SandboxId) -> Option<OffsetDateTime> {
        lock(&self.state.sandboxes).get(id.as_str()).map(|s| s.end_at)
    }
}

impl Drop for Sandboxd {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Serves `router` on a free loopback port until `shutdown`; its base URL.
async fn serve(router: axum::Router, shutdown: &CancellationToken) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let address = listener.local_addr().expect("the bound address");
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let served = axum::serve(listener, router).with_graceful_shutdown(stop.cancelled_owned()).await;
        if let Err(error) = served {
            tracing::warn!(%error, "the fake e2b server stopped");
        }
    });
    format!("http://{address}")
}

/// The socket address of a `http://host:port` URL this fake made.
fn address_of(url: &str) -> std::net::SocketAddr {
    url.trim_start_matches("http://").parse().expect("a URL this fake made")
}

/// Kills sandboxes past their `endAt`, as the hosted service does.
async fn reap(state: std::sync::Weak<State>, shutdown: CancellationToken) {
    let mut ticks = tokio::time::interval(REAP_INTERVAL);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let Some(state) = state.upgrade() else { return };
        for id in state.expired_ids() {
            state.remove(&id).await;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
