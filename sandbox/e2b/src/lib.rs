//! The E2B sandbox provider: desktops in E2B's Firecracker sandboxes, driven
//! the way the E2B Desktop SDK drives them, over plain HTTP.
//!
//! - The control plane (`api`) creates, finds, extends and kills sandboxes
//!   with the account's API key.
//! - envd inside each sandbox (`envd`) runs commands (`process.Process/Start`
//!   over the Connect protocol, `connect`) and reads and writes files, with
//!   the sandbox's own access token.
//! - Every action is an xdotool command (`xdo`); a screenshot is a `scrot`
//!   capture read back as a file (`capture`); a new sandbox's desktop is
//!   probed and, if need be, started (`desktop`). A Flotilla sandbox host
//!   serves both in one call each (`fast`, asked once per host).
//! - A live stream runs in the sandbox as the Desktop SDK runs it: x11vnc
//!   behind a key and noVNC on port 6080 (`stream`).
//! - Any other port inside a sandbox (Chromium's DevTools) is reached
//!   through the routing address's edge (`ports`).
//! - A Flotilla sandbox host (`flotilla-sandboxd`) is reached from its
//!   control plane's URL alone: it says where its edge is (`host`), and
//!   the provider then serves the fleet's `local` sandboxes; a worker's
//!   own host and any other its tasks were recorded on are one provider
//!   (`hosts`).
//!
//! The provider remembers, per sandbox it has seen, how to reach its envd,
//! its screen size and its deadline, so one action is one envd round trip;
//! any worker can rebuild that from `GET /sandboxes/{id}` (`connect`).
//! Deadlines: a call on a sandbox whose known deadline has passed kills it
//! and reports [`SandboxError::Expired`], as every provider does; a sandbox
//! that vanished before its deadline (killed elsewhere) is `NotFound`.
//! Neither the API key nor an access token is ever logged.

pub mod api;
mod capture;
mod config;
pub mod connect;
mod desktop;
pub mod envd;
pub mod fast;
pub mod host;
pub mod hosts;
mod ports;
pub mod stream;
#[cfg(test)]
mod unit_tests;
mod xdo;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use flotilla_types::action::Action;
use futures::future::BoxFuture;
use futures::FutureExt;
use reqwest::header::HeaderValue;
use reqwest::Url;
use time::OffsetDateTime;

use self::api::{ApiError, ControlPlane, NewSandbox, RateLimitPolicy, SandboxDetail, SandboxState};
use self::envd::{Envd, EnvdError, EnvdTarget, ENVD_PORT};
use flotilla_sandbox::{
    CommandOutput, Sandbox, SandboxError, SandboxId, SandboxProvider, SandboxRequest, SandboxStatus, Screenshot, Settle,
    SettledShot,
};

pub use self::config::{E2bConfig, EnvdAddress, DEFAULT_DOMAIN, DEFAULT_TEMPLATE, DEFAULT_USER};
pub use self::hosts::SandboxHosts;
pub use self::stream::{SandboxStream, StreamKey, StreamSocket};

/// The smallest and largest screens a sandbox may ask for.
/// The metadata key that records the requested screen size.
pub const RESOLUTION_METADATA: &str = "flotilla-resolution";
/// How long a screenshot's capture may take.
const CAPTURE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long removing a read capture may take.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(10);
/// How many ids of expired sandboxes are remembered, to answer `Expired`.
const MAX_TOMBSTONES: usize = 4096;

/// What the provider knows of one sandbox.
#[derive(Debug, Clone)]
struct Known {
    target: EnvdTarget,
    resolution: (u32, u32),
    expires_at: OffsetDateTime,
}

/// Runs sandboxes in E2B. Killing is explicit: dropping the provider leaves
/// its sandboxes to their deadlines.
pub struct E2bProvider {
    config: E2bConfig,
    api: ControlPlane,
    envd: Envd,
    known: Mutex<HashMap<SandboxId, Known>>,
    /// Ids of sandboxes this provider saw expire, with when.
    expired: Mutex<HashMap<SandboxId, Instant>>,
    /// Whether the host serves Flotilla's desktop extension.
    fast: fast::Support,
    /// TLS towards an `https` edge, for ports.
    edge_tls: tokio_rustls::TlsConnector,
    /// The client of live streams (see [`host::stream_client`]).
    stream_client: reqwest::Client,
}

impl E2bProvider {
    pub fn new(config: E2bConfig) -> Result<Self, SandboxError> {
        if config.template.is_empty() || config.user.is_empty() {
            return Err(SandboxError::InvalidRequest("the e2b template and user must not be empty".into()));
        }
        if let EnvdAddress::Routed { base_url } = &config.envd {
            Url::parse(base_url).map_err(|e| SandboxError::InvalidRequest(format!("the envd base URL is not a URL: {e}")))?;
        }
        let client = host::http_client(config.request_timeout, config.extra_roots_pem.as_deref())?;
        let policy = RateLimitPolicy { retries: config.rate_limit_retries, max_wait: config.max_retry_after };
        let api = ControlPlane::new(client.clone(), &config.api_url, &config.api_key, policy).map_err(|e| from_api(None, e))?;
        let envd = Envd::new(client, &config.user);
        let (known, expired) = (Mutex::new(HashMap::new()), Mutex::new(HashMap::new()));
        let edge_tls = ports::connector(config.extra_roots_pem.as_deref())?;
        let stream_client = host::stream_client(config.extra_roots_pem.as_deref())?;
        Ok(Self { config, api, envd, known, expired, fast: fast::Support::default(), edge_tls, stream_client })
    }

    async fn create_sandbox(&self, request: &SandboxRequest) -> Result<Sandbox, SandboxError> {
        request.check(Duration::MAX)?;
        let (width, height) = request.resolution;
        let body = NewSandbox {
            template_id: request.template.clone().unwrap_or_else(|| self.config.template.clone()),
            timeout: request.timeout.as_secs_f64().ceil() as u64,
            secure: true,
            auto_pause: false,
            metadata: HashMap::from([(RESOLUTION_METADATA.to_owned(), format!("{width}x{height}"))]),
            env_vars: HashMap::from([("DISPLAY".to_owned(), desktop::DISPLAY.to_owned())]),
        };
        let created = self.api.create(&body).await.map_err(|e| from_api(None, e))?;
        let id = SandboxId::parse(&created.sandbox_id)?;
        let started = Instant::now();
        match self.finish_create(&id, created.envd_access_token.as_deref(), created.domain.as_deref(), request).await {
            Ok(sandbox) => {
                tracing::debug!(sandbox = %id, ms = started.elapsed().as_millis() as u64, "e2b sandbox created");
                Ok(sandbox)
            }
            Err(error) => {
                if let Err(kill_error) = self.api.delete(id.as_str()).await {
                    tracing::warn!(sandbox = %id, error = %kill_error, "cannot kill an e2b sandbox whose desktop failed");
                }
                Err(error)
            }
        }
    }

    /// Waits for a new sandbox's desktop and reads its deadline.
    async fn finish_create(
        &self,
        id: &SandboxId,
        token: Option<&str>,
        domain: Option<&str>,
        request: &SandboxRequest,
    ) -> Result<Sandbox, SandboxError> {
        let target = self.target(id, token, domain)?;
        let resolution = desktop::wait_until_ready(&self.envd, &target, request.resolution, self.config.start_timeout)
            .await
            .map_err(|e| match e {
                EnvdError::Unavailable(message) => SandboxError::Unavailable(format!("sandbox {id}: {message}")),
                other => self.envd_failure(id, None, other),
            })?;
        if resolution != request.resolution {
            tracing::warn!(sandbox = %id, ?resolution, requested = ?request.resolution, "e2b desktop has another size than asked");
        }
        let detail = self.api.get(id.as_str()).await.map_err(|e| from_api(Some(id), e))?;
        let known = Known { target, resolution, expires_at: detail.end_at };
        self.remember(id, known.clone());
        Ok(Sandbox { id: id.clone(), resolution, expires_at: known.expires_at })
    }

    /// What is known of `id` and still within its deadline: `None` when the
    /// provider has not seen it; `Expired` (after killing it) when its
    /// deadline passed.
    async fn check_deadline(&self, id: &SandboxId) -> Result<Option<Known>, SandboxError> {
        if lock(&self.expired).contains_key(id) {
            return Err(SandboxError::Expired(id.clone()));
        }
        let known = lock(&self.known).get(id).cloned();
        match known {
            Some(known) if known.expires_at <= OffsetDateTime::now_utc() => {
                self.expire(id).await;
                Err(SandboxError::Expired(id.clone()))
            }
            other => Ok(other),
        }
    }

    /// How to reach `id`: what is known, else what the API says of it.
    async fn session(&self, id: &SandboxId) -> Result<Known, SandboxError> {
        match self.check_deadline(id).await? {
            Some(known) => Ok(known),
            None => self.load(id, None).await,
        }
    }

    /// Learns `id` from the API (resuming it if paused) and its desktop.
    async fn load(&self, id: &SandboxId, cached: Option<&Known>) -> Result<Known, SandboxError> {
        let mut detail = self.api.get(id.as_str()).await.map_err(|e| self.api_failure(id, cached, e))?;
        if detail.state == SandboxState::Paused {
            let seconds = SandboxRequest::default().timeout.as_secs();
            self.api.connect(id.as_str(), seconds).await.map_err(|e| self.api_failure(id, cached, e))?;
            detail = self.api.get(id.as_str()).await.map_err(|e| self.api_failure(id, cached, e))?;
        }
        let known = self.known_from(id, &detail, cached).await?;
        self.remember(id, known.clone());
        Ok(known)
    }

    /// `detail` with the screen size already known, or probed.
    async fn known_from(&self, id: &SandboxId, detail: &SandboxDetail, cached: Option<&Known>) -> Result<Known, SandboxError> {
        let target = self.target(id, detail.envd_access_token.as_deref(), detail.domain.as_deref())?;
        let resolution = match cached {
            Some(known) => known.resolution,
            None => desktop::probe(&self.envd, &target)
                .await
                .map_err(|e| self.envd_failure(id, None, e))?
                .ok_or_else(|| SandboxError::Unavailable(format!("the desktop of sandbox {id} does not answer")))?,
        };
        Ok(Known { target, resolution, expires_at: detail.end_at })
    }

    async fn status_of(&self, id: &SandboxId) -> Result<SandboxStatus, SandboxError> {
        let cached = self.check_deadline(id).await?;
        let detail = self.api.get(id.as_str()).await.map_err(|e| self.api_failure(id, cached.as_ref(), e))?;
        let target = match &cached {
            Some(known) => known.target.clone(),
            None => self.target(id, detail.envd_access_token.as_deref(), detail.domain.as_deref())?,
        };
        let answers = detail.state == SandboxState::Running && matches!(desktop::probe(&self.envd, &target).await, Ok(Some(_)));
        if let Some(mut known) = cached {
            known.expires_at = detail.end_at;
            self.remember(id, known);
        }
        Ok(SandboxStatus { alive: answers, expires_at: detail.end_at })
    }

    /// Pauses `id` through the API and forgets what was known of it: its
    /// deadline and envd token change when it is resumed, by whichever
    /// worker resumes it.
    async fn pause_sandbox(&self, id: &SandboxId) -> Result<bool, SandboxError> {
        let cached = self.check_deadline(id).await?;
        self.api.pause(id.as_str()).await.map_err(|e| self.api_failure(id, cached.as_ref(), e))?;
        lock(&self.known).remove(id);
        Ok(true)
    }

    async fn connect_to(&self, id: &SandboxId) -> Result<Sandbox, SandboxError> {
        let cached = self.check_deadline(id).await?;
        let known = self.load(id, cached.as_ref()).await?;
        Ok(Sandbox { id: id.clone(), resolution: known.resolution, expires_at: known.expires_at })
    }

    /// Moves the deadline to `by` from now unless it is later already; the
    /// API's own timeout call may shorten, so it is only made to lengthen.
    async fn extend_by(&self, id: &SandboxId, by: Duration) -> Result<OffsetDateTime, SandboxError> {
        let cached = self.check_deadline(id).await?;
        let detail = self.api.get(id.as_str()).await.map_err(|e| self.api_failure(id, cached.as_ref(), e))?;
        let wanted = OffsetDateTime::now_utc() + by;
        let expires_at = if wanted <= detail.end_at {
            detail.end_at
        } else {
            let seconds = by.as_secs_f64().ceil() as u64;
            self.api.set_timeout(id.as_str(), seconds).await.map_err(|e| self.api_failure(id, cached.as_ref(), e))?;
            self.api.get(id.as_str()).await.map_err(|e| self.api_failure(id, cached.as_ref(), e))?.end_at
        };
        if let Some(mut known) = cached {
            known.expires_at = expires_at;
            self.remember(id, known);
        }
        Ok(expires_at)
    }

    async fn kill_sandbox(&self, id: &SandboxId) -> Result<(), SandboxError> {
        let result = self.api.delete(id.as_str()).await;
        lock(&self.known).remove(id);
        match result {
            Ok(()) => {
                tracing::debug!(sandbox = %id, "e2b sandbox killed");
                Ok(())
            }
            Err(ApiError::NotFound) if lock(&self.expired).contains_key(id) => Ok(()),
            Err(error) => Err(from_api(Some(id), error)),
        }
    }

    async fn run_command(&self, id: &SandboxId, command: &str, timeout: Duration) -> Result<CommandOutput, SandboxError> {
        let known = self.session(id).await?;
        let output = self.envd.run(&known.target, command, timeout).await.map_err(|e| match e {
            EnvdError::Timeout => SandboxError::Timeout(timeout),
            other => self.envd_failure(id, Some(&known), other),
        })?;
        Ok(CommandOutput {
            exit_code: output.exit_code,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }

    async fn read(&self, id: &SandboxId, path: &str) -> Result<Vec<u8>, SandboxError> {
        check_path(path)?;
        let known = self.session(id).await?;
        self.envd.read_file(&known.target, path).await.map_err(|e| self.file_failure(id, &known, path, e))
    }

    async fn write(&self, id: &SandboxId, path: &str, bytes: &[u8]) -> Result<(), SandboxError> {
        check_path(path)?;
        let known = self.session(id).await?;
        self.envd.write_file(&known.target, path, bytes).await.map_err(|e| self.file_failure(id, &known, path, e))
    }

    async fn capture(&self, id: &SandboxId) -> Result<Screenshot, SandboxError> {
        let known = self.session(id).await?;
        if let Some(settled) = self.fast_capture(id, &known, None).await? {
            return Ok(settled.shot);
        }
        let path = capture::shot_path();
        let output = self
            .envd
            .run(&known.target, &capture::capture_command(&path), CAPTURE_TIMEOUT)
            .await
            .map_err(|e| self.envd_failure(id, Some(&known), e))?;
        if output.exit_code != 0 {
            return Err(SandboxError::Display(format!("scrot failed: {}", first_line(&output.stderr))));
        }
        let png = self.envd.read_file(&known.target, &path).await.map_err(|e| self.file_failure(id, &known, &path, e));
        self.remove_capture(known.target.clone(), path);
        capture::from_png(png?)
    }

    /// A capture through the host's extension (settled there by `settle`),
    /// or `None` where it is not served.
    async fn fast_capture(
        &self,
        id: &SandboxId,
        known: &Known,
        settle: Option<Settle>,
    ) -> Result<Option<SettledShot>, SandboxError> {
        if !self.fast.worth_trying() {
            return Ok(None);
        }
        let answer = self.envd.fast_capture(&self.fast, &known.target, settle).await;
        match answer.map_err(|e| self.envd_failure(id, Some(known), e))? {
            fast::Answer::Done((png, waited)) => Ok(Some(SettledShot { shot: capture::from_png(png)?, waited })),
            fast::Answer::Refused(error) => Err(error),
            fast::Answer::NotServed => Ok(None),
        }
    }

    async fn settled(&self, id: &SandboxId, settle: Settle) -> Result<Option<SettledShot>, SandboxError> {
        if !self.fast.worth_trying() {
            return Ok(None);
        }
        let known = self.session(id).await?;
        self.fast_capture(id, &known, Some(settle)).await
    }

    /// Removes a read capture in the background: nothing waits on it.
    fn remove_capture(&self, target: EnvdTarget, path: String) {
        let envd = self.envd.clone();
        tokio::spawn(async move {
            if let Err(error) = envd.run(&target, &capture::cleanup_command(&path), CLEANUP_TIMEOUT).await {
                tracing::debug!(%error, "cannot remove a screenshot file in an e2b sandbox");
            }
        });
    }

    async fn perform(&self, id: &SandboxId, action: &Action) -> Result<(), SandboxError> {
        let known = self.session(id).await?;
        match xdo::step(action, known.resolution, self.config.key_delay)? {
            xdo::Step::Nothing => Ok(()),
            xdo::Step::Sleep(duration) => {
                tokio::time::sleep(duration).await;
                Ok(())
            }
            xdo::Step::Run { command, timeout } => {
                if self.fast.worth_trying() {
                    let answer = self.envd.fast_act(&self.fast, &known.target, action).await;
                    match answer.map_err(|e| self.envd_failure(id, Some(&known), e))? {
                        fast::Answer::Done(()) => return Ok(()),
                        fast::Answer::Refused(error) => return Err(error),
                        fast::Answer::NotServed => {}
                    }
                }
                let output = self.envd.run(&known.target, &command, timeout).await.map_err(|e| match e {
                    EnvdError::Timeout => SandboxError::Display(format!("xdotool did not finish within {timeout:?}")),
                    other => self.envd_failure(id, Some(&known), other),
                })?;
                if output.exit_code != 0 {
                    return Err(SandboxError::Display(format!("xdotool failed: {}", first_line(&output.stderr))));
                }
                Ok(())
            }
        }
    }

    /// Where envd of sandbox `id` answers, with its access token.
    fn target(&self, id: &SandboxId, token: Option<&str>, domain: Option<&str>) -> Result<EnvdTarget, SandboxError> {
        let (base, route_to) = match &self.config.envd {
            EnvdAddress::SandboxHost => {
                let domain = domain.unwrap_or(&self.config.domain);
                (format!("https://{ENVD_PORT}-{id}.{domain}"), None)
            }
            EnvdAddress::Routed { base_url } => (base_url.clone(), Some(id.as_str().to_owned())),
        };
        let base = Url::parse(&base).map_err(|e| SandboxError::Unavailable(format!("no envd URL for sandbox {id}: {e}")))?;
        let access_token = token
            .map(|token| {
                let mut value = HeaderValue::from_str(token)
                    .map_err(|_| SandboxError::Unavailable(format!("the access token of sandbox {id} cannot be a header")))?;
                value.set_sensitive(true);
                Ok::<_, SandboxError>(value)
            })
            .transpose()?;
        Ok(EnvdTarget { base, route_to, access_token })
    }

    /// The one address every sandbox is reached through, when requests are
    /// routed by header.
    fn routing_base(&self) -> Option<&str> {
        match &self.config.envd {
            EnvdAddress::Routed { base_url } => Some(base_url),
            EnvdAddress::SandboxHost => None,
        }
    }

    fn remember(&self, id: &SandboxId, known: Known) {
        lock(&self.known).insert(id.clone(), known);
    }

    /// Kills `id` for expiry, remembering that it expired.
    async fn expire(&self, id: &SandboxId) {
        lock(&self.known).remove(id);
        {
            let mut expired = lock(&self.expired);
            if expired.len() >= MAX_TOMBSTONES {
                if let Some(oldest) = expired.iter().min_by_key(|(_, at)| **at).map(|(id, _)| id.clone()) {
                    expired.remove(&oldest);
                }
            }
            expired.insert(id.clone(), Instant::now());
        }
        match self.api.delete(id.as_str()).await {
            Ok(()) | Err(ApiError::NotFound) => tracing::info!(sandbox = %id, "e2b sandbox expired"),
            Err(error) => tracing::warn!(sandbox = %id, %error, "cannot kill an expired e2b sandbox"),
        }
    }

    /// The sandbox is gone: `Expired` if its deadline passed, else `NotFound`.
    fn gone(&self, id: &SandboxId, known: Option<&Known>) -> SandboxError {
        lock(&self.known).remove(id);
        if known.is_some_and(|k| k.expires_at <= OffsetDateTime::now_utc()) {
            lock(&self.expired).insert(id.clone(), Instant::now());
            return SandboxError::Expired(id.clone());
        }
        SandboxError::NotFound(id.clone())
    }

    fn api_failure(&self, id: &SandboxId, known: Option<&Known>, error: ApiError) -> SandboxError {
        match error {
            ApiError::NotFound => self.gone(id, known),
            other => from_api(Some(id), other),
        }
    }

    fn envd_failure(&self, id: &SandboxId, known: Option<&Known>, error: EnvdError) -> SandboxError {
        match error {
            EnvdError::Gone(_) => self.gone(id, known),
            EnvdError::Unauthorized { status, message } => {
                SandboxError::Unauthorized(format!("envd of sandbox {id} refused its access token ({status}): {message}"))
            }
            EnvdError::Unavailable(message) => SandboxError::Unavailable(format!("envd of sandbox {id}: {message}")),
            other => SandboxError::Command(other.to_string()),
        }
    }

    fn file_failure(&self, id: &SandboxId, known: &Known, path: &str, error: EnvdError) -> SandboxError {
        match error {
            EnvdError::NotFound(message) | EnvdError::Rejected { message, .. } => {
                SandboxError::File { path: path.to_owned(), message }
            }
            other => self.envd_failure(id, Some(known), other),
        }
    }
}

/// A control-plane error in the provider's terms.
fn from_api(id: Option<&SandboxId>, error: ApiError) -> SandboxError {
    match (error, id) {
        (ApiError::Unauthorized { status, message }, _) => {
            SandboxError::Unauthorized(format!("the E2B API refused the API key ({status}): {message}"))
        }
        (ApiError::NotFound, Some(id)) => SandboxError::NotFound(id.clone()),
        (ApiError::NotFound, None) => SandboxError::InvalidRequest("the E2B API does not know the template".into()),
        (ApiError::Rejected { status, message }, _) => {
            SandboxError::InvalidRequest(format!("the E2B API rejected the request ({status}): {message}"))
        }
        (error @ (ApiError::RateLimited { .. } | ApiError::Unavailable(_) | ApiError::Malformed(_)), _) => {
            SandboxError::Unavailable(error.to_string())
        }
    }
}

impl SandboxProvider for E2bProvider {
    fn name(&self) -> &'static str {
        self.config.kind.as_str()
    }

    fn kind(&self) -> flotilla_types::task::SandboxProviderKind {
        self.config.kind
    }

    fn host(&self) -> Option<String> {
        Some(self.config.api_url.clone())
    }

    fn create<'a>(&'a self, request: &'a SandboxRequest) -> BoxFuture<'a, Result<Sandbox, SandboxError>> {
        self.create_sandbox(request).boxed()
    }

    fn connect<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<Sandbox, SandboxError>> {
        self.connect_to(id).boxed()
    }

    fn status<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<SandboxStatus, SandboxError>> {
        self.status_of(id).boxed()
    }

    fn extend<'a>(&'a self, id: &'a SandboxId, by: Duration) -> BoxFuture<'a, Result<OffsetDateTime, SandboxError>> {
        self.extend_by(id, by).boxed()
    }

    fn kill<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<(), SandboxError>> {
        self.kill_sandbox(id).boxed()
    }

    fn pause<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<bool, SandboxError>> {
        self.pause_sandbox(id).boxed()
    }

    fn can_pause(&self) -> bool {
        true
    }

    fn run<'a>(
        &'a self,
        id: &'a SandboxId,
        command: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<CommandOutput, SandboxError>> {
        self.run_command(id, command, timeout).boxed()
    }

    fn read_file<'a>(&'a self, id: &'a SandboxId, path: &'a str) -> BoxFuture<'a, Result<Vec<u8>, SandboxError>> {
        self.read(id, path).boxed()
    }

    fn write_file<'a>(&'a self, id: &'a SandboxId, path: &'a str, bytes: &'a [u8]) -> BoxFuture<'a, Result<(), SandboxError>> {
        self.write(id, path, bytes).boxed()
    }

    fn screenshot<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<Screenshot, SandboxError>> {
        self.capture(id).boxed()
    }

    fn act<'a>(&'a self, id: &'a SandboxId, action: &'a Action) -> BoxFuture<'a, Result<(), SandboxError>> {
        self.perform(id, action).boxed()
    }

    fn settled_screenshot<'a>(
        &'a self,
        id: &'a SandboxId,
        settle: Settle,
    ) -> BoxFuture<'a, Result<Option<SettledShot>, SandboxError>> {
        self.settled(id, settle).boxed()
    }

    fn opens_ports(&self) -> bool {
        ports::carried(self.routing_base())
    }

    fn open_port<'a>(
        &'a self,
        id: &'a SandboxId,
        port: u16,
    ) -> BoxFuture<'a, Result<flotilla_sandbox::PortStream, SandboxError>> {
        ports::open(self.routing_base(), &self.edge_tls, id, port).boxed()
    }

    fn live_stream(&self, id: &SandboxId) -> Option<std::sync::Arc<dyn flotilla_sandbox::remote::RemoteStream>> {
        self.live_source(id)
    }
}

fn check_path(path: &str) -> Result<(), SandboxError> {
    if path.is_empty() || path.contains('\0') {
        return Err(SandboxError::File { path: path.to_owned(), message: "a path must be non-empty and without NUL".into() });
    }
    Ok(())
}

fn first_line(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    text.lines().next().unwrap_or("no message").trim().to_owned()
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
