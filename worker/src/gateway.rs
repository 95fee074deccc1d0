//! The model gateway: the one way a sandbox reaches the model provider.
//!
//! Agents that run inside a sandbox (the `claude` CLI) need an API endpoint
//! and a key, and a sandbox runs whatever its task asked for, so it must
//! never hold the fleet's real key. Each such task gets a random token
//! instead, scoped to that task: valid only while the task runs (revoked
//! when its [`TaskToken`] drops, whether the task succeeded, failed or was
//! cancelled) and never longer than the task may run. The sandbox points
//! the agent at this gateway with that token; the gateway checks it, swaps
//! in the real key and forwards the call to the configured provider,
//! streaming the answer (server-sent events) back unchanged.
//!
//! A jailed local sandbox has no network path to the worker: its token is
//! granted on a Unix socket of its own (bind-mounted into that sandbox
//! alone, relayed by a forwarder inside), and the token is valid on that
//! socket only, so it is bound to its sandbox. Other sandboxes (E2B) call
//! the TCP listener, which speaks [TLS](tls) only: each token granted there
//! comes with a client certificate of the gateway's own authority and is
//! valid only on connections that present that certificate, so it is bound
//! to the sandbox it was handed to. The listener is on a loopback port by
//! default; set `FLOTILLA_GATEWAY_ADDR` to listen elsewhere and
//! `FLOTILLA_GATEWAY_URL` to the `https://` URL they should call. It starts
//! with the first task that needs it and stops when the worker drops it.
//!
//! Each token carries limits ([`GrantLimits`]): the models it may call,
//! how many requests and how many tokens (input plus output, counted from
//! the provider's `usage` as answers stream through) it may spend, and how
//! many calls it may have open at once; past a limit the gateway answers
//! 429. What each call spent (model, input and output tokens) is also
//! reported, once its answer has been read, to the token's holder
//! ([`TaskToken::calls`]), which counts it on the task. While the holder
//! takes the reports, a call waits until every answer before it is
//! counted ([`CallReports::counted`]), and once the holder says stop (the
//! tenant spent its tokens of today) none goes out: the call that crossed
//! is the last one answered, however fast the agent asks again. Only an exact allowlist of (method, path) pairs is forwarded, checked
//! on the raw path before anything normalises it ([`policy`]); bodies are
//! capped at [`MAX_REQUEST_BYTES`].

#[cfg(test)]
mod limits_tests;
mod policy;
mod tls;
mod usage;

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use flotilla_config::Config;
use flotilla_config::Secret;
use flotilla_types::ids::TaskId;
use futures::StreamExt;
use rand::Rng;
use tokio::sync::{mpsc, Notify, OnceCell};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::sandbox::GatewayBridge;
pub use tls::ClientCredentials;

/// The largest request body forwarded (a long conversation with images).
pub const MAX_REQUEST_BYTES: usize = 8 * 1024 * 1024;
/// How many calls one token may have open at once.
pub const MAX_CONCURRENT_PER_TOKEN: u32 = 4;
/// How many requests a token may make when its grant names no limit.
pub const DEFAULT_MAX_REQUESTS: u32 = 2_000;
/// How long connecting to the provider may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// What every task token starts with, so one is recognisable in a log.
const TOKEN_PREFIX: &str = "flt-task-";
/// Headers that describe one connection, not the message, and the
/// credentials the gateway replaces: never forwarded either way.
const NOT_FORWARDED: &[&str] = &[
    "host",
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "accept-encoding",
    "x-api-key",
    "authorization",
];

/// Where the gateway listens and what it forwards to.
#[derive(Clone)]
pub struct GatewayConfig {
    /// The provider's base URL, e.g. `https://api.anthropic.com`.
    pub upstream: String,
    /// The real key, sent to the provider as `x-api-key`.
    pub api_key: Secret,
    /// Where to listen; port 0 picks a free one.
    pub listen: SocketAddr,
    /// The URL sandboxes call (`https://`); `https://<bound address>` when
    /// unset.
    pub public_url: Option<String>,
    /// How long a grant lasts before its holder must refresh it
    /// ([`TaskToken::refresh`]); a task that stops refreshing loses it then.
    pub token_ttl: Duration,
}

/// The default [`GatewayConfig::token_ttl`].
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(600);

impl GatewayConfig {
    /// The gateway to the Anthropic API the configuration names, when it
    /// has a key for it.
    pub fn anthropic(config: &Config) -> Option<Self> {
        Some(Self {
            upstream: config.model.anthropic_base_url.clone(),
            api_key: config.model.anthropic_api_key.clone()?,
            listen: config.worker.gateway_addr,
            public_url: config.worker.gateway_url.clone(),
            token_ttl: DEFAULT_TOKEN_TTL,
        })
    }
}

/// Why the gateway could not hand out a token.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("the model gateway cannot listen on {addr} (FLOTILLA_GATEWAY_ADDR): {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("the model gateway cannot listen on the sandbox's socket {path}: {source}")]
    BindSocket { path: PathBuf, source: std::io::Error },
    #[error("the model gateway cannot build its HTTP client: {0}")]
    Client(String),
    #[error("the model gateway cannot set up TLS: {0}")]
    Tls(#[from] tls::TlsError),
}

/// A worker's model gateway. Cheap to clone; the server stops when the last
/// clone drops.
#[derive(Clone)]
pub struct ModelGateway {
    inner: Arc<Inner>,
}

struct Inner {
    listen: SocketAddr,
    public_url: Option<String>,
    upstream: String,
    api_key: Secret,
    grants: Arc<Grants>,
    forwarder: OnceCell<Arc<Forwarder>>,
    server: OnceCell<Server>,
    /// Numbers the per-sandbox listeners.
    next_listener: AtomicU64,
    stop: CancellationToken,
    token_ttl: Duration,
}

/// What one task's token may spend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantLimits {
    /// The models it may name; any when `None`.
    pub models: Option<Vec<String>>,
    /// Requests in all.
    pub max_requests: u32,
    /// Input plus output tokens in all; no limit when `None`.
    pub max_tokens: Option<u64>,
}

impl Default for GrantLimits {
    fn default() -> Self {
        Self { models: None, max_requests: DEFAULT_MAX_REQUESTS, max_tokens: None }
    }
}

/// Where a token is valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listener {
    /// The TLS listener, on connections with this client certificate.
    Client(tls::Fingerprint),
    /// One sandbox's Unix socket.
    Socket(u64),
}

/// The running TLS listener, as sandboxes reach it.
struct Server {
    url: String,
    authority: tls::Authority,
}

/// What a request handler knows: the shared forwarder and which listener
/// the request came in on.
#[derive(Clone)]
struct Route {
    forwarder: Arc<Forwarder>,
    listener: Listener,
}

/// What the request handlers share.
struct Forwarder {
    upstream: String,
    api_key: Secret,
    client: reqwest::Client,
    grants: Arc<Grants>,
}

/// Live tokens by their text.
#[derive(Default)]
struct Grants {
    live: Mutex<HashMap<String, Grant>>,
}

#[derive(Debug, Clone)]
struct Grant {
    task: TaskId,
    expires: Instant,
    listener: Listener,
    limits: GrantLimits,
    spent: Arc<Spent>,
    /// Where each call's usage goes once its answer is read.
    calls: mpsc::UnboundedSender<CallUsage>,
}

/// What one model call through the gateway spent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallUsage {
    /// The model, as the answer names it.
    pub model: String,
    pub tokens: flotilla_types::cost::TokenCounts,
}

/// What a token has spent so far, and how far its holder has counted it.
#[derive(Debug, Default)]
struct Spent {
    requests: AtomicU32,
    tokens: AtomicU64,
    open: AtomicU32,
    /// Whether the holder took the reports ([`TaskToken::calls`]): only
    /// then do calls wait for them to be counted.
    counting: AtomicBool,
    /// Answers reported to the holder, and how many of them it counted.
    reported: AtomicU32,
    counted: AtomicU32,
    /// The holder said no call may go out any more.
    stopped: AtomicBool,
    /// Woken when the holder counts or stops.
    settled: Notify,
}

impl Spent {
    /// Waits (at most [`COUNT_WAIT`]) until the holder counted every answer
    /// reported; false when it said stop.
    async fn wait_counted(&self) -> bool {
        if self.counting.load(Ordering::Acquire) {
            let _ = tokio::time::timeout(COUNT_WAIT, async {
                loop {
                    let settled = self.settled.notified();
                    if self.stopped.load(Ordering::Acquire)
                        || self.counted.load(Ordering::Acquire) >= self.reported.load(Ordering::Acquire)
                    {
                        return;
                    }
                    settled.await;
                }
            })
            .await;
        }
        !self.stopped.load(Ordering::Acquire)
    }
}

/// How long a call waits for the answers before it to be counted; past it
/// the call goes out (a holder that stopped counting is a task ending).
const COUNT_WAIT: Duration = Duration::from_secs(10);

/// The reports of what each call of a token spent ([`TaskToken::calls`]).
#[derive(Debug)]
pub struct CallReports {
    reports: mpsc::UnboundedReceiver<CallUsage>,
    spent: Arc<Spent>,
}

impl CallReports {
    /// The next call's usage, once its answer has been read.
    pub async fn next(&mut self) -> Option<CallUsage> {
        self.reports.recv().await
    }

    /// A report already sent, if any, without waiting.
    pub fn try_next(&mut self) -> Option<CallUsage> {
        self.reports.try_recv().ok()
    }

    /// The report [`next`](Self::next) gave is counted; with `stop`, the
    /// token's further calls are refused (429).
    pub fn counted(&self, stop: bool) {
        if stop {
            self.spent.stopped.store(true, Ordering::Release);
        }
        self.spent.counted.fetch_add(1, Ordering::AcqRel);
        self.spent.settled.notify_waiters();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl ModelGateway {
    /// A gateway with these settings; it listens from the first
    /// [`grant`](ModelGateway::grant) on.
    pub fn new(config: GatewayConfig) -> Self {
        let inner = Inner {
            listen: config.listen,
            public_url: config.public_url.map(|url| url.trim_end_matches('/').to_owned()),
            upstream: config.upstream.trim_end_matches('/').to_owned(),
            api_key: config.api_key,
            grants: Arc::default(),
            forwarder: OnceCell::new(),
            server: OnceCell::new(),
            next_listener: AtomicU64::new(1),
            stop: CancellationToken::new(),
            token_ttl: config.token_ttl,
        };
        Self { inner: Arc::new(inner) }
    }

    /// A token for `task`, valid until it drops or `ttl` passes, whichever
    /// comes first. Starts the server if it is not running yet.
    pub async fn grant(&self, task: &TaskId, ttl: Duration) -> Result<TaskToken, GatewayError> {
        self.grant_with(task, ttl, GrantLimits::default(), None).await
    }

    /// A token for `task` with `limits`. With a `bridge`, the gateway
    /// listens on the bridge's socket for this token alone (and the token is
    /// valid nowhere else) until the token drops; without, the token is
    /// valid on the TCP listener, started if it is not running yet.
    pub async fn grant_with(
        &self,
        task: &TaskId,
        ttl: Duration,
        limits: GrantLimits,
        bridge: Option<&GatewayBridge>,
    ) -> Result<TaskToken, GatewayError> {
        let token = new_token();
        let (listener, base_url, socket, client) = match bridge {
            None => {
                let server = self.inner.server.get_or_try_init(|| self.start()).await?;
                let (credentials, fingerprint) = server.authority.issue(&format!("flotilla task {task}"))?;
                (Listener::Client(fingerprint), server.url.clone(), None, Some(credentials))
            }
            Some(bridge) => {
                let id = self.inner.next_listener.fetch_add(1, Ordering::Relaxed);
                let stop = self.serve_socket(bridge, Listener::Socket(id)).await?;
                (Listener::Socket(id), bridge.url.clone(), Some((stop, bridge.socket.clone())), None)
            }
        };
        let (calls, reports) = mpsc::unbounded_channel();
        let spent = Arc::<Spent>::default();
        let grant =
            Grant { task: task.clone(), expires: Instant::now() + ttl, listener, limits, spent: Arc::clone(&spent), calls };
        self.inner.grants.insert(&token, grant);
        debug!(task_id = %task, ttl_s = ttl.as_secs(), bridged = socket.is_some(), "model gateway token granted");
        let calls = Some(CallReports { reports, spent });
        Ok(TaskToken { token, base_url, grants: Arc::clone(&self.inner.grants), socket, client, calls })
    }

    /// Serves the gateway on `bridge`'s Unix socket as `listener` until the
    /// returned token is cancelled (or the gateway stops).
    async fn serve_socket(&self, bridge: &GatewayBridge, listener: Listener) -> Result<CancellationToken, GatewayError> {
        let forwarder = self.forwarder()?;
        let path = &bridge.socket;
        let bind_error = |source| GatewayError::BindSocket { path: path.clone(), source };
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(bind_error(e)),
            _ => {}
        }
        let socket = tokio::net::UnixListener::bind(path).map_err(bind_error)?;
        // The directory is the one sandbox's own; its programs run as a uid
        // other than the worker's and must be able to connect.
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o666)).map_err(bind_error)?;
        let app = axum::Router::new().fallback(forward).with_state(Route { forwarder, listener });
        let stop = self.inner.stop.child_token();
        let until = stop.clone();
        tokio::spawn(async move {
            if let Err(e) = axum::serve(socket, app).with_graceful_shutdown(until.cancelled_owned()).await {
                warn!(error = %e, "model gateway socket stopped");
            }
        });
        Ok(stop)
    }

    fn forwarder(&self) -> Result<Arc<Forwarder>, GatewayError> {
        let inner = &self.inner;
        if let Some(forwarder) = inner.forwarder.get() {
            return Ok(Arc::clone(forwarder));
        }
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| GatewayError::Client(e.to_string()))?;
        let forwarder = Arc::new(Forwarder {
            upstream: inner.upstream.clone(),
            api_key: inner.api_key.clone(),
            client,
            grants: Arc::clone(&inner.grants),
        });
        let _ = inner.forwarder.set(Arc::clone(&forwarder));
        Ok(inner.forwarder.get().map_or(forwarder, Arc::clone))
    }

    /// The URL sandboxes call, once the server runs.
    pub fn url(&self) -> Option<&str> {
        self.inner.server.get().map(|s| s.url.as_str())
    }

    /// How long a grant lasts unless refreshed.
    pub fn token_ttl(&self) -> Duration {
        self.inner.token_ttl
    }

    /// How many tokens are valid now.
    pub fn live_tokens(&self) -> usize {
        self.inner.grants.sweep();
        self.inner.grants.len()
    }

    async fn start(&self) -> Result<Server, GatewayError> {
        let inner = &self.inner;
        let listener = tokio::net::TcpListener::bind(inner.listen)
            .await
            .map_err(|source| GatewayError::Bind { addr: inner.listen, source })?;
        let bound = listener.local_addr().map_err(|source| GatewayError::Bind { addr: inner.listen, source })?;
        let forwarder = self.forwarder()?;
        let authority = tls::Authority::new(&tls::server_names(bound.ip(), inner.public_url.as_deref()))?;
        let app = move |client| {
            let route = Route { forwarder: Arc::clone(&forwarder), listener: Listener::Client(client) };
            axum::Router::new().fallback(forward).with_state(route)
        };
        tokio::spawn(tls::serve(listener, authority.acceptor(), app, inner.stop.clone()));
        let url = inner.public_url.clone().unwrap_or_else(|| format!("https://{bound}"));
        info!(addr = %bound, url = %url, upstream = %inner.upstream, "model gateway listening (TLS)");
        Ok(Server { url, authority })
    }
}

/// A task's token for the gateway. Revoked when dropped.
pub struct TaskToken {
    token: String,
    base_url: String,
    grants: Arc<Grants>,
    /// The sandbox's own listener, stopped (and its socket removed) on drop.
    socket: Option<(CancellationToken, PathBuf)>,
    /// On the TLS listener: the client certificate the token is bound to.
    client: Option<ClientCredentials>,
    /// What the token's calls spent, one report per call.
    calls: Option<CallReports>,
}

impl TaskToken {
    /// The token, for the sandbox's `ANTHROPIC_API_KEY`.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The gateway's URL, for the sandbox's `ANTHROPIC_BASE_URL`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// What the sandbox presents with the token on the TLS listener (the
    /// token is refused without it); `None` on a sandbox's own socket.
    pub fn client_credentials(&self) -> Option<&ClientCredentials> {
        self.client.as_ref()
    }

    /// The reports of what each call of this token spent, sent once the
    /// call's answer has been read (the first caller takes them). From
    /// then on each call waits for the ones before it to be counted.
    pub fn calls(&mut self) -> Option<CallReports> {
        let calls = self.calls.take()?;
        calls.spent.counting.store(true, Ordering::Release);
        Some(calls)
    }

    /// Keeps the token valid for `ttl` from now; false when it had already
    /// lapsed (or was revoked), which no refresh undoes.
    pub fn refresh(&self, ttl: Duration) -> bool {
        self.grants.extend(&self.token, Instant::now() + ttl)
    }
}

impl fmt::Debug for TaskToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskToken").field("base_url", &self.base_url).finish_non_exhaustive()
    }
}

impl Drop for TaskToken {
    fn drop(&mut self) {
        self.grants.revoke(&self.token);
        if let Some((stop, path)) = &self.socket {
            stop.cancel();
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Grants {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Grant>> {
        self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn insert(&self, token: &str, grant: Grant) {
        let mut live = self.lock();
        let now = Instant::now();
        live.retain(|_, g| g.expires > now);
        live.insert(token.to_owned(), grant);
    }

    fn revoke(&self, token: &str) {
        self.lock().remove(token);
    }

    /// Moves a live token's expiry to `until`; false when it is not live.
    fn extend(&self, token: &str, until: Instant) -> bool {
        let mut live = self.lock();
        match live.get_mut(token) {
            Some(grant) if grant.expires > Instant::now() => {
                grant.expires = until;
                true
            }
            _ => false,
        }
    }

    /// The grant of a token, if it is live.
    fn get(&self, token: &str) -> Option<Grant> {
        let live = self.lock();
        live.get(token).filter(|g| g.expires > Instant::now()).cloned()
    }

    fn sweep(&self) {
        let now = Instant::now();
        self.lock().retain(|_, g| g.expires > now);
    }

    fn len(&self) -> usize {
        self.lock().len()
    }
}

/// 256 random bits, hex-encoded, after [`TOKEN_PREFIX`].
fn new_token() -> String {
    let bytes: [u8; 32] = rand::rng().random();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{TOKEN_PREFIX}{hex}")
}

/// The token a request carries: `x-api-key`, or a bearer token.
fn presented_token(headers: &HeaderMap) -> Option<&str> {
    if let Some(key) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        return Some(key.trim());
    }
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok())?;
    auth.strip_prefix("Bearer ").map(str::trim)
}

/// Why a call was refused, before or instead of reaching the provider.
fn refusal(status: StatusCode, kind: &str, message: &str) -> Response {
    api_error(status, kind, message)
}

async fn forward(State(route): State<Route>, request: Request) -> Response {
    let forwarder = &route.forwarder;
    let (parts, body) = request.into_parts();
    if parts.uri.path() == "/" && matches!(parts.method, Method::HEAD | Method::GET) {
        // The CLI opens a connection to its base URL before the first call.
        return Response::new(Body::empty());
    }
    let Some(grant) = presented_token(&parts.headers).and_then(|t| forwarder.grants.get(t)) else {
        return refusal(StatusCode::UNAUTHORIZED, "authentication_error", "invalid x-api-key");
    };
    if grant.listener != route.listener {
        warn!(task_id = %grant.task, "a gateway token was presented outside its sandbox");
        return refusal(StatusCode::UNAUTHORIZED, "authentication_error", "invalid x-api-key");
    }
    let Some(call) = policy::Call::of(&parts.method, parts.uri.path()) else {
        return refusal(StatusCode::FORBIDDEN, "permission_error", "the model gateway does not forward this call");
    };
    let Some(query) = policy::checked_query(parts.uri.query()) else {
        return refusal(StatusCode::FORBIDDEN, "permission_error", "the model gateway does not forward this query");
    };
    let Ok(bytes) = axum::body::to_bytes(body, MAX_REQUEST_BYTES).await else {
        return refusal(StatusCode::PAYLOAD_TOO_LARGE, "request_too_large", "the request body is too large or was cut off");
    };
    if !grant.spent.wait_counted().await {
        return refusal(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", "this task's tenant spent its tokens of today");
    }
    if let Err(over) = check_limits(&grant, &call, &bytes) {
        return over.response();
    }
    let open = Open::enter(&grant.spent);
    if open.is_none() {
        return refusal(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", "too many calls of this task at once");
    }
    let url = match query {
        Some(query) => format!("{}{}?{query}", forwarder.upstream, call.path()),
        None => format!("{}{}", forwarder.upstream, call.path()),
    };
    debug!(task_id = %grant.task, method = %parts.method, path = %call.path(), "forwarding a model call");
    let mut headers = forwardable_headers(&parts.headers);
    policy::filter_betas(&mut headers);
    match HeaderValue::from_str(forwarder.api_key.expose()) {
        Ok(mut key) => {
            key.set_sensitive(true);
            headers.insert("x-api-key", key);
        }
        Err(_) => {
            return api_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "api_error",
                "the configured API key is not a valid header value",
            )
        }
    }
    let sent = forwarder.client.request(parts.method, url).headers(headers).body(bytes).send().await;
    match sent {
        Ok(answer) => {
            let meter = Meter::new(&grant, &answer);
            relay(answer, open, meter)
        }
        Err(e) => {
            warn!(task_id = %grant.task, error = %e.without_url(), "model provider unreachable");
            api_error(StatusCode::BAD_GATEWAY, "api_error", "the model gateway could not reach the model provider")
        }
    }
}

/// Which of a token's limits a call would pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OverLimit {
    Model,
    Tokens,
    Requests,
}

impl OverLimit {
    fn response(self) -> Response {
        match self {
            OverLimit::Model => refusal(StatusCode::FORBIDDEN, "permission_error", "this task may not call that model"),
            OverLimit::Tokens => refusal(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", "this task's token budget is spent"),
            OverLimit::Requests => {
                refusal(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", "this task's request budget is spent")
            }
        }
    }
}

/// Counts the request against the token's limits, or says which it passes.
fn check_limits(grant: &Grant, call: &policy::Call, body: &[u8]) -> Result<(), OverLimit> {
    let limits = &grant.limits;
    if let (Some(models), true) = (&limits.models, call.has_model()) {
        let named = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v.get("model").and_then(serde_json::Value::as_str).map(str::to_owned));
        if !named.as_ref().is_some_and(|m| models.contains(m)) {
            return Err(OverLimit::Model);
        }
    }
    if let Some(max) = limits.max_tokens {
        if grant.spent.tokens.load(Ordering::Relaxed) >= max {
            return Err(OverLimit::Tokens);
        }
    }
    let made = grant.spent.requests.fetch_add(1, Ordering::Relaxed);
    if made >= limits.max_requests {
        return Err(OverLimit::Requests);
    }
    Ok(())
}

/// One open call of a token; leaving (on drop) frees its place.
struct Open(Arc<Spent>);

impl Open {
    fn enter(spent: &Arc<Spent>) -> Option<Self> {
        let before = spent.open.fetch_add(1, Ordering::AcqRel);
        let open = Self(Arc::clone(spent));
        (before < MAX_CONCURRENT_PER_TOKEN).then_some(open)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Counts one answer's usage as it streams through: on the token's total
/// at once, and, when the answer is dropped (read to its end or cut off),
/// as one report to the token's holder.
struct Meter {
    counter: usage::Counter,
    spent: Arc<Spent>,
    calls: mpsc::UnboundedSender<CallUsage>,
}

impl Meter {
    fn new(grant: &Grant, answer: &reqwest::Response) -> Self {
        let counter = usage::Counter::new(usage::Format::of(answer.headers().get("content-type")));
        Self { counter, spent: Arc::clone(&grant.spent), calls: grant.calls.clone() }
    }

    fn push(&mut self, bytes: &[u8]) {
        let added = self.counter.push(bytes);
        self.spent.tokens.fetch_add(added, Ordering::Relaxed);
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        let (model, tokens) = self.counter.spent();
        if tokens.input + tokens.output > 0 {
            let model = model.unwrap_or("unknown").to_owned();
            // The holder may be gone (the task ended): nothing to count then.
            if self.calls.send(CallUsage { model, tokens }).is_ok() {
                self.spent.reported.fetch_add(1, Ordering::AcqRel);
            }
        }
    }
}

/// The provider's answer as the sandbox gets it: status, headers and a body
/// streamed through as it arrives, its `usage` counted on the way; the call
/// stays open until the body has been read.
fn relay(answer: reqwest::Response, open: Option<Open>, meter: Meter) -> Response {
    let status = answer.status();
    let headers = forwardable_headers(answer.headers());
    let mut meter = Some(meter);
    let mut chunks = answer.bytes_stream();
    // The answer's usage is reported before its end reaches the caller, so
    // a next call already finds it (`Spent::wait_counted`).
    let stream = futures::stream::poll_fn(move |cx| {
        let _open = &open;
        let next = futures::ready!(chunks.poll_next_unpin(cx));
        match (&next, meter.as_mut()) {
            (Some(Ok(bytes)), Some(meter)) => meter.push(bytes),
            (None, _) => drop(meter.take()),
            _ => {}
        }
        std::task::Poll::Ready(next)
    });
    let mut response = Response::new(Body::from_stream(stream));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

fn forwardable_headers(headers: &HeaderMap) -> HeaderMap {
    let mut kept = headers.clone();
    for name in NOT_FORWARDED {
        kept.remove(*name);
    }
    kept
}

/// An error in the shape the Anthropic API answers with.
fn api_error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = serde_json::json!({"type": "error", "error": {"type": kind, "message": message}});
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gateway(upstream: &str) -> ModelGateway {
        ModelGateway::new(GatewayConfig {
            upstream: upstream.into(),
            api_key: Secret::new("sk-real"),
            listen: "127.0.0.1:0".parse().expect("addr"),
            public_url: None,
            token_ttl: DEFAULT_TOKEN_TTL,
        })
    }

    fn task() -> TaskId {
        TaskId::generate()
    }

    #[tokio::test]
    async fn tokens_are_random_and_revoked_when_dropped() {
        let gateway = gateway("http://127.0.0.1:9");
        let id = task();
        let first = gateway.grant(&id, Duration::from_secs(60)).await.expect("granted");
        let second = gateway.grant(&id, Duration::from_secs(60)).await.expect("granted");
        assert_ne!(first.token(), second.token());
        assert!(first.token().starts_with(TOKEN_PREFIX) && first.token().len() == TOKEN_PREFIX.len() + 64);
        assert!(!format!("{first:?}").contains(first.token()), "a token never prints");
        assert_eq!(gateway.live_tokens(), 2);
        drop(first);
        assert_eq!(gateway.live_tokens(), 1);
        assert_eq!(gateway.url(), Some(second.base_url()));
    }

    #[tokio::test]
    async fn unknown_expired_and_revoked_tokens_get_an_anthropic_401() {
        let gateway = gateway("http://127.0.0.1:9");
        let id = task();
        let short = gateway.grant(&id, Duration::from_millis(1)).await.expect("granted");
        let revoked = gateway.grant(&id, Duration::from_secs(60)).await.expect("granted");
        let revoked_text = revoked.token().to_owned();
        drop(revoked);
        // Time for the 1 ms token to expire: its lifetime is the test.
        tokio::time::sleep(Duration::from_millis(5)).await;
        let client = short.client_credentials().expect("a TLS token").http_client().expect("client");
        let url = format!("{}/v1/messages", short.base_url());
        for token in ["nonsense", short.token(), revoked_text.as_str()] {
            let answer = client.post(&url).header("x-api-key", token).body("{}").send().await.expect("answers");
            assert_eq!(answer.status(), 401);
            let body: serde_json::Value = answer.json().await.expect("json");
            assert_eq!(body["error"]["type"], "authentication_error");
        }
    }

    #[tokio::test]
    async fn the_preconnect_is_answered_without_a_token() {
        let gateway = gateway("http://127.0.0.1:9");
        let token = gateway.grant(&task(), Duration::from_secs(60)).await.expect("granted");
        let client = token.client_credentials().expect("a TLS token").http_client().expect("client");
        let answer = client.head(format!("{}/", token.base_url())).send().await.expect("answers");
        assert_eq!(answer.status(), 200);
    }

    #[test]
    fn credentials_and_connection_headers_are_not_forwarded() {
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", HeaderValue::from_static("flt-task-1"));
        headers.insert("authorization", HeaderValue::from_static("Bearer x"));
        headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        headers.insert("host", HeaderValue::from_static("127.0.0.1:1"));
        let kept = forwardable_headers(&headers);
        assert_eq!(kept.len(), 1);
        assert!(kept.contains_key("anthropic-version"));
    }
}
