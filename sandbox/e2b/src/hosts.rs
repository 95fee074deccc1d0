//! The sandbox hosts of a fleet as one worker sees them: its own host,
//! where its new sandboxes start, and any other a task's record names,
//! reached when a task that began on another worker's host goes on here (a
//! worker on another node of a cluster, each node with a host of its own).
//! Another host is asked where its edge is with the worker's own key and
//! trust, once, without waiting for it (a host that does not answer holds
//! none of its sandboxes any more); the sandboxes found there are served
//! by that host's client from then on, and recorded with that host.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_config::SandboxdClient;
use flotilla_sandbox::{
    CommandOutput, GatewayBridge, PortStream, Sandbox, SandboxError, SandboxId, SandboxProvider, SandboxRequest, SandboxStatus,
    Screenshot, Settle, SettledShot, X11Display,
};
use flotilla_types::action::Action;
use flotilla_types::task::SandboxProviderKind;
use futures::future::BoxFuture;
use futures::FutureExt;
use time::OffsetDateTime;
use tokio::sync::mpsc::UnboundedSender;

use super::host::{sandboxd_config, sandboxd_config_now, HostError};
use super::E2bProvider;

/// A worker's `local` provider over the fleet's sandbox hosts.
pub struct SandboxHosts {
    own: Arc<E2bProvider>,
    /// How this worker reaches its own host: the key and trust it presents
    /// to the others too.
    client: SandboxdClient,
    others: tokio::sync::Mutex<HashMap<String, Arc<E2bProvider>>>,
    /// The sandboxes reached on another host, by id.
    placed: Mutex<HashMap<SandboxId, Arc<E2bProvider>>>,
}

impl SandboxHosts {
    /// Reaches the worker's own host (waiting for it a while, as at start).
    pub async fn start(client: SandboxdClient) -> Result<Self, HostError> {
        let config = sandboxd_config(&client).await?;
        let own = E2bProvider::new(config).map_err(|e| HostError::Client(e.to_string()))?;
        Ok(Self { own: Arc::new(own), client, others: Default::default(), placed: Default::default() })
    }

    fn of(&self, id: &SandboxId) -> Arc<E2bProvider> {
        let placed = self.placed.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        placed.get(id).cloned().unwrap_or_else(|| Arc::clone(&self.own))
    }

    /// The client of host `url`, made on first use.
    async fn other(&self, url: &str, id: &SandboxId) -> Result<Arc<E2bProvider>, SandboxError> {
        let mut others = self.others.lock().await;
        if let Some(provider) = others.get(url) {
            return Ok(Arc::clone(provider));
        }
        let client = SandboxdClient { url: url.to_owned(), ..self.client.clone() };
        let config = match sandboxd_config_now(&client).await {
            Ok(config) => config,
            Err(HostError::KeyRefused { url }) => return Err(SandboxError::Unauthorized(format!("the sandbox host at {url}"))),
            Err(error) => {
                tracing::warn!(sandbox = %id, %error, "the host a sandbox was recorded on does not answer");
                return Err(SandboxError::NotFound(id.clone()));
            }
        };
        let provider = Arc::new(E2bProvider::new(config)?);
        others.insert(url.to_owned(), Arc::clone(&provider));
        Ok(provider)
    }

    async fn connect_on(&self, host: Option<&str>, id: &SandboxId) -> Result<Sandbox, SandboxError> {
        let own = self.own.host();
        let Some(host) = host.filter(|host| Some(*host) != own.as_deref()) else { return self.own.connect(id).await };
        let provider = self.other(host, id).await?;
        let sandbox = provider.connect(id).await?;
        self.placed.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(id.clone(), provider);
        Ok(sandbox)
    }

    async fn kill_sandbox(&self, id: &SandboxId) -> Result<(), SandboxError> {
        let result = self.of(id).kill(id).await;
        self.placed.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).remove(id);
        result
    }
}

impl SandboxProvider for SandboxHosts {
    fn name(&self) -> &'static str {
        self.own.name()
    }

    fn kind(&self) -> SandboxProviderKind {
        self.own.kind()
    }

    fn create<'a>(&'a self, request: &'a SandboxRequest) -> BoxFuture<'a, Result<Sandbox, SandboxError>> {
        self.own.create(request)
    }

    fn connect<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<Sandbox, SandboxError>> {
        self.connect_on(None, id).boxed()
    }

    fn connect_at<'a>(&'a self, host: Option<&'a str>, id: &'a SandboxId) -> BoxFuture<'a, Result<Sandbox, SandboxError>> {
        self.connect_on(host, id).boxed()
    }

    fn status<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<SandboxStatus, SandboxError>> {
        async move { self.of(id).status(id).await }.boxed()
    }

    fn extend<'a>(&'a self, id: &'a SandboxId, by: Duration) -> BoxFuture<'a, Result<OffsetDateTime, SandboxError>> {
        async move { self.of(id).extend(id, by).await }.boxed()
    }

    fn pause<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<bool, SandboxError>> {
        async move { self.of(id).pause(id).await }.boxed()
    }

    fn can_pause(&self) -> bool {
        self.own.can_pause()
    }

    fn kill<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<(), SandboxError>> {
        self.kill_sandbox(id).boxed()
    }

    fn run<'a>(
        &'a self,
        id: &'a SandboxId,
        command: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<CommandOutput, SandboxError>> {
        async move { self.of(id).run(id, command, timeout).await }.boxed()
    }

    fn run_streaming<'a>(
        &'a self,
        id: &'a SandboxId,
        command: &'a str,
        timeout: Duration,
        lines: UnboundedSender<String>,
    ) -> BoxFuture<'a, Result<CommandOutput, SandboxError>> {
        async move { self.of(id).run_streaming(id, command, timeout, lines).await }.boxed()
    }

    fn read_file<'a>(&'a self, id: &'a SandboxId, path: &'a str) -> BoxFuture<'a, Result<Vec<u8>, SandboxError>> {
        async move { self.of(id).read_file(id, path).await }.boxed()
    }

    fn write_file<'a>(&'a self, id: &'a SandboxId, path: &'a str, bytes: &'a [u8]) -> BoxFuture<'a, Result<(), SandboxError>> {
        async move { self.of(id).write_file(id, path, bytes).await }.boxed()
    }

    fn screenshot<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<Screenshot, SandboxError>> {
        async move { self.of(id).screenshot(id).await }.boxed()
    }

    fn act<'a>(&'a self, id: &'a SandboxId, action: &'a Action) -> BoxFuture<'a, Result<(), SandboxError>> {
        async move { self.of(id).act(id, action).await }.boxed()
    }

    fn settled_screenshot<'a>(
        &'a self,
        id: &'a SandboxId,
        settle: Settle,
    ) -> BoxFuture<'a, Result<Option<SettledShot>, SandboxError>> {
        async move { self.of(id).settled_screenshot(id, settle).await }.boxed()
    }

    fn screen_changed_at(&self, id: &SandboxId) -> Option<Instant> {
        self.of(id).screen_changed_at(id)
    }

    fn live_display(&self, id: &SandboxId) -> Option<X11Display> {
        self.of(id).live_display(id)
    }

    fn host_of(&self, id: &SandboxId) -> Option<String> {
        self.of(id).host()
    }

    fn host(&self) -> Option<String> {
        self.own.host()
    }

    fn live_stream(&self, id: &SandboxId) -> Option<Arc<dyn flotilla_sandbox::remote::RemoteStream>> {
        self.of(id).live_stream(id)
    }

    fn gateway_bridge<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<Option<GatewayBridge>, SandboxError>> {
        async move { self.of(id).gateway_bridge(id).await }.boxed()
    }

    fn opens_ports(&self) -> bool {
        self.own.opens_ports()
    }

    fn open_port<'a>(&'a self, id: &'a SandboxId, port: u16) -> BoxFuture<'a, Result<PortStream, SandboxError>> {
        async move { self.of(id).open_port(id, port).await }.boxed()
    }
}
