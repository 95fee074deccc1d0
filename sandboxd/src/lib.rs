//! The sandbox host: it owns local desktops (the jail, its network, the X
//! isolation of `flotilla-desktop`) and serves them over E2B's wire
//! protocol, so the official E2B SDKs and the worker's E2B client drive
//! them unchanged: the [control plane](control) on one address (create,
//! detail, list, kill, timeout, refresh, pause, connect, health, metrics;
//! `X-API-Key`; E2B's error bodies) and an [edge](edge) on another that
//! routes by the `E2b-Sandbox-Id` and `E2b-Sandbox-Port` headers or by a
//! `Host` of `<port>-<id>.<domain>`: envd's port to the host's
//! [envd](envd) (`X-Access-Token` per sandbox, Connect RPC process calls,
//! `/files`), any other port into the sandbox's own network (the Desktop
//! SDK's stream on 6080).
//!
//! Sandboxes outlive the clients that made them: they end at their deadline
//! (killed, or paused with `autoPause`), by a kill, or with the host, whose
//! desktops die with it; a restarted host sweeps what a previous life left
//! and knows none of its ids. Creates are answered from a warm
//! [pool](pool) when one of the kind waits there.

mod calls;
mod control;
mod edge;
mod envd;
mod extension;
mod filesystem;
mod host;
mod metrics;
mod pool;
mod process_calls;
mod process_connect;
mod process_input;
mod processes;
mod signed;
mod stream;
mod sync;
mod terminal;
mod tls;
#[cfg(test)]
mod tls_tests;
mod watch;
mod watch_calls;
mod watchers;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use flotilla_config::{Config, Secret};
use flotilla_desktop::{LocalConfig, LocalProvider};
use flotilla_e2b::{E2bConfig, EnvdAddress, DEFAULT_TEMPLATE, DEFAULT_USER};
use flotilla_sandbox::SandboxId;
use time::OffsetDateTime;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use flotilla_desktop::Desktops;
use host::{Host, RateLimit};
use sync::lock;

/// The sandbox domain of a host started for tests: per-port hosts are
/// `<port>-<id>.localhost`, which browsers resolve to loopback by themselves.
pub const SANDBOX_DOMAIN: &str = "localhost";
/// How often sandboxes past their deadline are ended.
const REAP_INTERVAL: Duration = Duration::from_millis(100);

/// Why the host did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Config(#[from] flotilla_config::ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Listen { addr: SocketAddr, source: std::io::Error },
    #[error(
        "{var}: {addr} is not a loopback address; without FLOTILLA_SANDBOXD_TLS_CERT and _KEY this host serves plain HTTP, so it listens on loopback only"
    )]
    NotLoopback { var: &'static str, addr: SocketAddr },
    #[error("{0}")]
    Tls(String),
    #[error("local desktops cannot start here: {0}")]
    Desktops(String),
}

/// A running host; dropping it stops its servers and kills every desktop.
pub struct Sandboxd {
    host: Arc<Host>,
    api_url: String,
    sandbox_url: String,
    /// The key a host started for tests made for itself.
    test_key: Option<String>,
    shutdown: CancellationToken,
}

/// What a host started for tests may differ in.
#[derive(Debug, Clone, Default)]
pub struct TestOptions {
    /// Desktops kept started (none by default).
    pub pool: usize,
    /// Running sandboxes at once (8 by default).
    pub capacity: Option<usize>,
    /// Addresses of this host that sandboxes reach as a hosted sandbox
    /// reaches public ones, through its own network's way out.
    pub internet: Vec<Ipv4Addr>,
    /// A certificate chain and key to serve TLS with.
    pub tls: Option<flotilla_config::TlsFiles>,
    /// Serve E2B's calls alone, without Flotilla's desktop extension, as
    /// hosted E2B does.
    pub standard_only: bool,
    /// The key it takes (a fresh one when none): hosts of one fleet share it.
    pub key: Option<String>,
}

impl Sandboxd {
    /// Serves what `config` says: its `sandboxd` section for the host, its
    /// isolation section for the desktops. What a previous life of the host
    /// left under its root is swept first.
    pub async fn serve(config: &Config) -> Result<Self, StartError> {
        let settings = config.sandboxd.clone();
        settings.require_keys()?;
        check_listen_addresses(&settings)?;
        let leftovers = LocalProvider::sweep(&settings.root).await;
        tracing::info!(?leftovers, root = %settings.root.display(), "swept what a previous host left");
        let local_config = LocalConfig {
            root: settings.root.clone(),
            templates: config.templates.clone(),
            ..LocalConfig::from_settings(&config.isolation)
        };
        let local = LocalProvider::start(local_config).await.map_err(|e| StartError::Desktops(e.to_string()))?;
        let root = settings.root.clone();
        Self::listen(settings, Desktops::new(local, root, false), None, true).await
    }

    /// A host on free loopback ports with a fresh key and no pool, for tests.
    pub async fn start() -> Self {
        Self::start_with(TestOptions::default()).await
    }

    /// The same, whose sandboxes reach `internet` (see [`TestOptions`]).
    pub async fn start_with_internet(internet: Vec<Ipv4Addr>) -> Self {
        Self::start_with(TestOptions { internet, ..TestOptions::default() }).await
    }

    /// A host for tests with `options`.
    pub async fn start_with(options: TestOptions) -> Self {
        let key = options.key.clone().unwrap_or_else(|| format!("e2b_{:032x}", rand::random::<u128>()));
        let root = std::env::temp_dir().join(format!("flotilla-sandboxd-{:016x}", rand::random::<u64>()));
        let capacity = options.capacity.unwrap_or(8).to_string();
        let vars = [
            ("FLOTILLA_SANDBOXD_KEYS", key.clone()),
            ("FLOTILLA_SANDBOXD_ADDR", "127.0.0.1:0".into()),
            ("FLOTILLA_SANDBOXD_EDGE_ADDR", "127.0.0.1:0".into()),
            ("FLOTILLA_SANDBOXD_POOL", options.pool.to_string()),
            ("FLOTILLA_SANDBOXD_CAPACITY", capacity),
            ("FLOTILLA_SANDBOXD_ROOT", root.display().to_string()),
        ];
        let mut vars = vars.to_vec();
        if let Some(files) = &options.tls {
            vars.push(("FLOTILLA_SANDBOXD_TLS_CERT", files.cert.display().to_string()));
            vars.push(("FLOTILLA_SANDBOXD_TLS_KEY", files.key.display().to_string()));
        }
        let config = Config::from_env(vars).expect("a test host's settings");
        let local = LocalProvider::new(LocalConfig {
            root: root.clone(),
            egress_exceptions: options.internet,
            templates: config.templates.clone(),
            ..LocalConfig::from_settings(&config.isolation)
        });
        let extension = !options.standard_only;
        Self::listen(config.sandboxd, Desktops::new(local, root, true), Some(key), extension).await.expect("a test host starts")
    }

    async fn listen(
        settings: flotilla_config::SandboxdConfig,
        local: Desktops,
        test_key: Option<String>,
        extension: bool,
    ) -> Result<Self, StartError> {
        let tls = settings.tls.as_ref().map(tls::acceptor).transpose().map_err(StartError::Tls)?;
        let bind =
            |addr: SocketAddr| async move { TcpListener::bind(addr).await.map_err(|source| StartError::Listen { addr, source }) };
        let control_listener = bind(settings.addr).await?;
        let edge_listener = bind(settings.edge_addr).await?;
        // The edge's bound port (a test host's is chosen by the system) is
        // what `/flotilla/v1/host` tells clients.
        let mut settings = settings;
        settings.edge_addr =
            edge_listener.local_addr().map_err(|source| StartError::Listen { addr: settings.edge_addr, source })?;
        let envd_listener = bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await?;
        let host = Arc::new(Host::new(settings, local));
        host.refill_pool();
        let shutdown = CancellationToken::new();
        let control = control::router(Arc::clone(&host));
        let api_url = match &tls {
            Some(acceptor) => tls::serve(control_listener, acceptor.clone(), control, &shutdown),
            None => serve(control_listener, control, &shutdown),
        };
        let envd = envd_listener.local_addr().map_err(|source| StartError::Listen { addr: host.settings.addr, source })?;
        serve(envd_listener, envd::router(Arc::clone(&host), extension), &shutdown);
        let sandbox_url = edge::serve(Arc::clone(&host), edge_listener, envd, tls, &shutdown);
        tokio::spawn(reap(Arc::downgrade(&host), shutdown.clone()));
        Ok(Self { host, api_url, sandbox_url, test_key, shutdown })
    }

    /// The control plane's base URL (what `E2B_API_URL` names).
    pub fn api_url(&self) -> &str {
        &self.api_url
    }

    /// The edge's base URL (what `E2B_SANDBOX_URL` names).
    pub fn sandbox_url(&self) -> &str {
        &self.sandbox_url
    }

    /// The domain of per-sandbox hosts (what `E2B_DOMAIN` names).
    pub fn domain(&self) -> &str {
        &self.host.settings.domain
    }

    /// Where the host's desktops keep their files (`<root>/<desktop>/`,
    /// each with its `record.json` of processes).
    pub fn root(&self) -> &std::path::Path {
        &self.host.settings.root
    }

    /// The key a host started for tests accepts.
    pub fn test_key(&self) -> &str {
        self.test_key.as_deref().expect("a host started for tests has its own key")
    }

    /// A client configuration that reaches this host with its test key.
    pub fn config(&self) -> E2bConfig {
        self.config_with_key(self.test_key())
    }

    /// The same with any key.
    pub fn config_with_key(&self, api_key: &str) -> E2bConfig {
        E2bConfig {
            api_url: self.api_url.clone(),
            api_key: Secret::new(api_key),
            domain: self.domain().to_owned(),
            envd: EnvdAddress::Routed { base_url: self.sandbox_url.clone() },
            template: DEFAULT_TEMPLATE.into(),
            user: DEFAULT_USER.into(),
            request_timeout: Duration::from_secs(30),
            start_timeout: Duration::from_secs(20),
            rate_limit_retries: 3,
            max_retry_after: Duration::from_secs(10),
            key_delay: Duration::from_millis(12),
            kind: flotilla_types::task::SandboxProviderKind::E2b,
            extra_roots_pem: None,
        }
    }

    /// The next `count` creates answer `429` with `Retry-After` in seconds.
    pub fn rate_limit_creates(&self, count: u32, retry_after: Duration) {
        *lock(&self.host.rate_limit) = RateLimit { remaining: count, retry_after };
    }

    /// How many control-plane requests arrived, answered or refused.
    pub fn control_requests(&self) -> usize {
        self.host.control_requests.load(Ordering::SeqCst)
    }

    /// Kills sandbox `id` as if from the dashboard; whether it was there.
    pub async fn kill_from_outside(&self, id: &SandboxId) -> bool {
        self.host.remove(id.as_str()).await
    }

    /// When sandbox `id` ends, as the host sees it.
    pub fn end_at(&self, id: &SandboxId) -> Option<OffsetDateTime> {
        self.host.end_at(id.as_str())
    }

    /// The pids of every process of sandbox `id`'s desktop (none if unknown).
    pub async fn desktop_pids(&self, id: &str) -> Vec<u32> {
        match self.host.get(id).await {
            Some(entry) => self.host.local.process_ids(&entry.local_id).await.unwrap_or_default(),
            None => Vec::new(),
        }
    }

    /// Processes envd started in sandboxes so far.
    pub fn process_starts(&self) -> u64 {
        self.host.metrics.process_starts.get()
    }

    /// Captures and actions the desktop extension served so far.
    pub fn desktop_calls(&self) -> u64 {
        self.host.metrics.desktop_calls.get()
    }

    /// Desktops waiting in the pool.
    pub fn pooled(&self) -> usize {
        self.host.pool.ready()
    }

    /// Waits until the host is asked to stop (for the binary).
    pub async fn stopped(&self) {
        self.shutdown.cancelled().await;
    }

    /// Stops serving and kills every sandbox and pooled desktop.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        for (id, _) in self.host.all().await {
            self.host.remove(&id).await;
        }
        for id in self.host.pool.drain() {
            let _ = flotilla_sandbox::SandboxProvider::kill(&*self.host.local, &id).await;
        }
    }
}

impl Drop for Sandboxd {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A host without TLS listens on loopback only.
fn check_listen_addresses(settings: &flotilla_config::SandboxdConfig) -> Result<(), StartError> {
    if settings.tls.is_some() {
        return Ok(());
    }
    for (var, addr) in [("FLOTILLA_SANDBOXD_ADDR", settings.addr), ("FLOTILLA_SANDBOXD_EDGE_ADDR", settings.edge_addr)] {
        if !addr.ip().is_loopback() {
            return Err(StartError::NotLoopback { var, addr });
        }
    }
    Ok(())
}

/// Serves `router` on `listener` until `shutdown`; its base URL. Small
/// writes go out at once (no Nagle delay): a process's stream is a few
/// small frames, and a client waiting on its end would otherwise wait for
/// the peer's delayed acknowledgement.
fn serve(listener: TcpListener, router: axum::Router, shutdown: &CancellationToken) -> String {
    use axum::serve::ListenerExt as _;
    let address = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let stop = shutdown.clone();
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move {
        let served = axum::serve(listener, router).with_graceful_shutdown(stop.cancelled_owned()).await;
        if let Err(error) = served {
            tracing::warn!(%error, "a sandbox host server stopped");
        }
    });
    format!("http://{address}")
}

/// Applies sandboxes' deadlines, as the hosted service does.
async fn reap(host: std::sync::Weak<Host>, shutdown: CancellationToken) {
    let mut ticks = tokio::time::interval(REAP_INTERVAL);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let Some(host) = host.upgrade() else { return };
        host.reap().await;
    }
}
