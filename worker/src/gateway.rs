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
//! The gateway listens on a loopback port by default, which local sandboxes
//! reach since they share the host's network. Sandboxes elsewhere need an
//! address they can reach: set `FLOTILLA_GATEWAY_ADDR` to listen there and
//! `FLOTILLA_GATEWAY_URL` to the URL they should call. It starts with the
//! first task that needs it and stops when the worker drops it.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::Response;
use flotilla_shared::config::Secret;
use flotilla_shared::ids::TaskId;
use flotilla_shared::Config;
use rand::Rng;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// The largest request body forwarded (a long conversation with images).
const MAX_REQUEST_BYTES: usize = 64 * 1024 * 1024;
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
    /// The URL sandboxes call; `http://<bound address>` when unset.
    pub public_url: Option<String>,
}

impl GatewayConfig {
    /// The gateway to the Anthropic API the configuration names, when it
    /// has a key for it.
    pub fn anthropic(config: &Config) -> Option<Self> {
        Some(Self {
            upstream: config.model.anthropic_base_url.clone(),
            api_key: config.model.anthropic_api_key.clone()?,
            listen: config.worker.gateway_addr,
            public_url: config.worker.gateway_url.clone(),
        })
    }
}

/// Why the gateway could not hand out a token.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("the model gateway cannot listen on {addr} (FLOTILLA_GATEWAY_ADDR): {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("the model gateway cannot build its HTTP client: {0}")]
    Client(String),
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
    server: OnceCell<Server>,
    stop: CancellationToken,
}

/// The running server, as sandboxes reach it.
struct Server {
    url: String,
}

/// What the request handler shares.
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
            server: OnceCell::new(),
            stop: CancellationToken::new(),
        };
        Self { inner: Arc::new(inner) }
    }

    /// A token for `task`, valid until it drops or `ttl` passes, whichever
    /// comes first. Starts the server if it is not running yet.
    pub async fn grant(&self, task: &TaskId, ttl: Duration) -> Result<TaskToken, GatewayError> {
        let server = self.inner.server.get_or_try_init(|| self.start()).await?;
        let token = new_token();
        let grant = Grant { task: task.clone(), expires: Instant::now() + ttl };
        self.inner.grants.insert(&token, grant);
        debug!(task_id = %task, ttl_s = ttl.as_secs(), "model gateway token granted");
        Ok(TaskToken { token, base_url: server.url.clone(), grants: Arc::clone(&self.inner.grants) })
    }

    /// The URL sandboxes call, once the server runs.
    pub fn url(&self) -> Option<&str> {
        self.inner.server.get().map(|s| s.url.as_str())
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
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| GatewayError::Client(e.to_string()))?;
        let forwarder = Forwarder {
            upstream: inner.upstream.clone(),
            api_key: inner.api_key.clone(),
            client,
            grants: Arc::clone(&inner.grants),
        };
        let app = axum::Router::new().fallback(forward).with_state(Arc::new(forwarder));
        let stop = inner.stop.clone();
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await {
                warn!(error = %e, "model gateway stopped");
            }
        });
        let url = inner.public_url.clone().unwrap_or_else(|| format!("http://{bound}"));
        info!(addr = %bound, url = %url, upstream = %inner.upstream, "model gateway listening");
        Ok(Server { url })
    }
}

/// A task's token for the gateway. Revoked when dropped.
pub struct TaskToken {
    token: String,
    base_url: String,
    grants: Arc<Grants>,
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
}

impl fmt::Debug for TaskToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskToken").field("base_url", &self.base_url).finish_non_exhaustive()
    }
}

impl Drop for TaskToken {
    fn drop(&mut self) {
        self.grants.revoke(&self.token);
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

    /// The task a token belongs to, if it is live.
    fn task_of(&self, token: &str) -> Option<TaskId> {
        let live = self.lock();
        live.get(token).filter(|g| g.expires > Instant::now()).map(|g| g.task.clone())
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

/// The provider paths a task may call: model calls and their helpers.
fn forwardable(path: &str) -> bool {
    path == "/v1/messages" || path == "/v1/messages/count_tokens" || path == "/v1/models" || path.starts_with("/v1/models/")
}

async fn forward(State(forwarder): State<Arc<Forwarder>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    if parts.uri.path() == "/" && matches!(parts.method, Method::HEAD | Method::GET) {
        // The CLI opens a connection to its base URL before the first call.
        return Response::new(Body::empty());
    }
    let Some(task) = presented_token(&parts.headers).and_then(|t| forwarder.grants.task_of(t)) else {
        return api_error(StatusCode::UNAUTHORIZED, "authentication_error", "invalid x-api-key");
    };
    if !forwardable(parts.uri.path()) {
        return api_error(StatusCode::NOT_FOUND, "not_found_error", "the model gateway does not forward this path");
    }
    let Ok(bytes) = axum::body::to_bytes(body, MAX_REQUEST_BYTES).await else {
        return api_error(StatusCode::PAYLOAD_TOO_LARGE, "request_too_large", "the request body is too large or was cut off");
    };
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let url = format!("{}{path_and_query}", forwarder.upstream);
    debug!(task_id = %task, method = %parts.method, path = parts.uri.path(), "forwarding a model call");
    let mut headers = forwardable_headers(&parts.headers);
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
        Ok(answer) => relay(answer),
        Err(e) => {
            warn!(task_id = %task, error = %e, "model provider unreachable");
            api_error(StatusCode::BAD_GATEWAY, "api_error", "the model gateway could not reach the model provider")
        }
    }
}

/// The provider's answer as the sandbox gets it: status, headers and a body
/// streamed through as it arrives.
fn relay(answer: reqwest::Response) -> Response {
    let status = answer.status();
    let headers = forwardable_headers(answer.headers());
    let mut response = Response::new(Body::from_stream(answer.bytes_stream()));
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
        tokio::time::sleep(Duration::from_millis(5)).await;
        let client = reqwest::Client::new();
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
        let answer = reqwest::Client::new().head(format!("{}/", token.base_url())).send().await.expect("answers");
        assert_eq!(answer.status(), 200);
    }

    #[test]
    fn only_model_paths_are_forwarded() {
        assert!(forwardable("/v1/messages"));
        assert!(forwardable("/v1/messages/count_tokens"));
        assert!(!forwardable("/v1/messages/batches"));
        assert!(!forwardable("/v1/organizations/api_keys"));
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
