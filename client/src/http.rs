//! The HTTP side of a client: one place that builds URLs, adds the bearer
//! key and turns every failure into a [`ClientError`] whose `Display` is the
//! single line a user reads.

use std::fmt;
use std::time::Duration;

use reqwest::{header, RequestBuilder, Response, StatusCode, Url};
use serde_json::Value;

/// How long a plain request may take; event streams have no such limit.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Items asked for per page when a command reads a whole list.
const PAGE: usize = 500;
/// The most pages a command reads of one list.
const MAX_PAGES: usize = 200;
/// Lets the OS notice a dead peer on a long, quiet event stream.
const TCP_KEEPALIVE: Duration = Duration::from_secs(30);
/// How much of a non-JSON error body is worth showing.
const MAX_BODY_IN_MESSAGE: usize = 200;

/// An API key; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Never fails: an empty key (say `FLOTILLA_API_KEY=`) counts as no key
    /// when a call needs one, which gives the clearer message.
    pub fn parse(text: &str) -> Result<Self, std::convert::Infallible> {
        Ok(Self(text.trim().to_owned()))
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

/// An error answer of the API: `{"error": {"code", "message", "field"}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub code: String,
    pub message: String,
    pub field: Option<String>,
    /// Seconds from a `Retry-After` header (429).
    pub retry_after: Option<String>,
}

impl ApiError {
    /// Reads an error body, falling back to the HTTP status when it is not the API's JSON.
    pub fn from_body(status: StatusCode, retry_after: Option<String>, body: &str) -> Self {
        let parsed = serde_json::from_str::<Value>(body).ok();
        let error = parsed.as_ref().and_then(|v| v.get("error")).filter(|e| e.is_object());
        let text = |key: &str| error.and_then(|e| e.get(key)).and_then(Value::as_str).map(str::to_owned);
        let code = text("code").unwrap_or_else(|| format!("http_{}", status.as_u16()));
        let message = text("message").unwrap_or_else(|| fallback_message(status, body));
        Self { status: status.as_u16(), code, message, field: text("field"), retry_after }
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)?;
        if let Some(field) = &self.field {
            write!(f, " (field {field})")?;
        }
        if let Some(seconds) = &self.retry_after {
            write!(f, " (retry after {seconds} s)")?;
        }
        Ok(())
    }
}

fn fallback_message(status: StatusCode, body: &str) -> String {
    let first_line = body.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    if first_line.is_empty() {
        return status.canonical_reason().unwrap_or("no message").to_lowercase();
    }
    first_line.chars().take(MAX_BODY_IN_MESSAGE).collect()
}

/// Why a call failed.
#[derive(Debug)]
pub enum ClientError {
    /// No `--key` / `FLOTILLA_API_KEY` for a /v1 call.
    MissingKey,
    /// `--api` is not a usable base URL.
    BadBaseUrl { url: String, reason: String },
    /// Nothing answered at the base URL.
    Unreachable { url: String, reason: String },
    /// The API answered with an error.
    Api(ApiError),
    /// The connection broke or a body could not be read.
    Transport { url: String, reason: String },
    /// An event stream closed before its terminal event.
    StreamEnded,
    /// A 2xx answer that is not JSON.
    NotJson { reason: String },
}

impl ClientError {
    /// Whether trying again later may help (used by the event stream).
    pub fn is_transient(&self) -> bool {
        match self {
            ClientError::Unreachable { .. } | ClientError::Transport { .. } | ClientError::StreamEnded => true,
            ClientError::Api(err) => err.status == 429 || err.status >= 500,
            _ => false,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::MissingKey => f.write_str("no API key: pass --key or set FLOTILLA_API_KEY"),
            ClientError::BadBaseUrl { url, reason } => write!(f, "invalid API URL {url}: {reason}"),
            ClientError::Unreachable { url, reason } => {
                write!(f, "the API at {url} is unreachable ({reason})")
            }
            ClientError::Api(err) => err.fmt(f),
            ClientError::Transport { url, reason } => {
                write!(f, "lost the connection to the API at {url} ({reason})")
            }
            ClientError::StreamEnded => f.write_str("the event stream closed before the task finished"),
            ClientError::NotJson { reason } => write!(f, "the API answered with something other than JSON ({reason})"),
        }
    }
}

impl std::error::Error for ClientError {}

/// A JSON answer: the body as sent (for `--json`) and parsed.
#[derive(Debug, Clone)]
pub struct ApiResponse {
    pub raw: String,
    pub value: Value,
}

/// A client of one API with one key.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    /// The base URL as shown in messages, without a trailing slash.
    shown: String,
    key: Option<ApiKey>,
    /// Calls without a key go out without one (the API answers them), rather
    /// than failing with [`ClientError::MissingKey`] before any request.
    keyless: bool,
}

impl Client {
    pub fn new(api: &str, key: Option<ApiKey>) -> Result<Self, ClientError> {
        let shown = api.trim().trim_end_matches('/').to_owned();
        let bad = |reason: String| ClientError::BadBaseUrl { url: shown.clone(), reason };
        let base = Url::parse(&shown).map_err(|err| bad(err.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(bad("expected an http:// or https:// URL".to_owned()));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_keepalive(TCP_KEEPALIVE)
            .user_agent(concat!("flotilla-client/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| bad(err.to_string()))?;
        Ok(Self { http, base, shown, key, keyless: false })
    }

    /// The same client (connections shared) acting with `key` instead.
    pub fn with_key(&self, key: Option<ApiKey>) -> Self {
        Self { key, ..self.clone() }
    }

    /// A client whose calls without a key are sent without one, so that the
    /// API's own answer (401) reaches the caller.
    pub fn keyless_allowed(self) -> Self {
        Self { keyless: true, ..self }
    }

    /// The base URL followed by `segments`, each percent-encoded as one path segment.
    pub fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// `GET` a JSON resource; `query` pairs with a `None` value are left out.
    pub async fn get(&self, segments: &[&str], query: &[(&str, Option<String>)]) -> Result<ApiResponse, ClientError> {
        let mut url = self.url(segments);
        for (name, value) in query {
            if let Some(value) = value {
                url.query_pairs_mut().append_pair(name, value);
            }
        }
        let request = self.authorized(self.http.get(url))?.timeout(REQUEST_TIMEOUT);
        read_json(self.send(request).await?).await
    }

    /// Every item of a list (`field` of each page), following `next_cursor`
    /// a full page at a time, up to [`MAX_PAGES`] pages.
    pub async fn get_all(&self, segments: &[&str], field: &str) -> Result<Vec<Value>, ClientError> {
        let mut items = Vec::new();
        let mut cursor = None;
        for _ in 0..MAX_PAGES {
            let query = [("limit", Some(PAGE.to_string())), ("cursor", cursor.take())];
            let page = self.get(segments, &query).await?.value;
            items.extend(page.get(field).and_then(Value::as_array).cloned().unwrap_or_default());
            cursor = page.get("next_cursor").and_then(Value::as_str).map(str::to_owned);
            if cursor.is_none() {
                break;
            }
        }
        Ok(items)
    }

    /// `POST` a JSON body, or none.
    pub async fn post(&self, segments: &[&str], body: Option<&Value>) -> Result<ApiResponse, ClientError> {
        let mut request = self.authorized(self.http.post(self.url(segments)))?.timeout(REQUEST_TIMEOUT);
        if let Some(body) = body {
            request = request.json(body);
        }
        read_json(self.send(request).await?).await
    }

    /// `PATCH` a JSON body.
    pub async fn patch(&self, segments: &[&str], body: &Value) -> Result<ApiResponse, ClientError> {
        let request = self.authorized(self.http.patch(self.url(segments)))?.timeout(REQUEST_TIMEOUT).json(body);
        read_json(self.send(request).await?).await
    }

    /// `DELETE` a resource; an empty answer reads as `{}`.
    pub async fn delete(&self, segments: &[&str]) -> Result<ApiResponse, ClientError> {
        let request = self.authorized(self.http.delete(self.url(segments)))?.timeout(REQUEST_TIMEOUT);
        read_json(self.send(request).await?).await
    }

    /// Opens a Server-Sent Events stream, resuming after `last_event_id` when given.
    pub async fn open_events(&self, segments: &[&str], last_event_id: Option<u64>) -> Result<Response, ClientError> {
        self.open_stream(self.url(segments), last_event_id).await
    }

    /// Opens the Server-Sent Events stream at `url` (one of [`Client::url`]'s,
    /// with a query), resuming after `last_event_id` when given.
    pub async fn open_stream(&self, url: Url, last_event_id: Option<u64>) -> Result<Response, ClientError> {
        let mut request = self
            .authorized(self.http.get(url))?
            .header(header::ACCEPT, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-cache");
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id.to_string());
        }
        self.send(request).await
    }

    /// Maps a failure while reading a body that had started.
    pub fn transport_error(&self, err: &reqwest::Error) -> ClientError {
        ClientError::Transport { url: self.shown.clone(), reason: root_cause(err) }
    }

    /// `GET` an absolute URL the API handed out (a presigned link to a
    /// stored screenshot): no key is sent, the body is read up to
    /// `max_bytes`. Answers the bytes and their `Content-Type`.
    pub async fn fetch_link(&self, url: &str, max_bytes: usize) -> Result<(Vec<u8>, Option<String>), ClientError> {
        let transport = |reason: String| ClientError::Transport { url: link_origin(url), reason };
        let link = Url::parse(url).map_err(|err| transport(err.to_string()))?;
        let request = self.http.get(link).timeout(REQUEST_TIMEOUT);
        let mut response = request.send().await.map_err(|err| transport(root_cause(&err)))?;
        if !response.status().is_success() {
            let status = response.status();
            return Err(ClientError::Api(ApiError::from_body(status, None, "")));
        }
        let content_type = response.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|err| transport(root_cause(&err)))? {
            if body.len() + chunk.len() > max_bytes {
                return Err(transport(format!("more than {max_bytes} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        Ok((body, content_type))
    }

    fn authorized(&self, request: RequestBuilder) -> Result<RequestBuilder, ClientError> {
        match self.key.as_ref().filter(|key| !key.0.is_empty()) {
            Some(key) => Ok(request.bearer_auth(&key.0)),
            None if self.keyless => Ok(request),
            None => Err(ClientError::MissingKey),
        }
    }

    /// Sends a request; a non-2xx answer becomes [`ClientError::Api`].
    async fn send(&self, request: RequestBuilder) -> Result<Response, ClientError> {
        let response = request.send().await.map_err(|err| self.request_error(&err))?;
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let retry_after = response.headers().get(header::RETRY_AFTER).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let body = response.text().await.unwrap_or_default();
        Err(ClientError::Api(ApiError::from_body(status, retry_after, &body)))
    }

    fn request_error(&self, err: &reqwest::Error) -> ClientError {
        let url = self.shown.clone();
        if err.is_connect() {
            return ClientError::Unreachable { url, reason: root_cause(err) };
        }
        if err.is_timeout() {
            return ClientError::Unreachable { url, reason: "no answer in time".to_owned() };
        }
        ClientError::Transport { url, reason: root_cause(err) }
    }
}

async fn read_json(response: Response) -> Result<ApiResponse, ClientError> {
    let raw = response.text().await.map_err(|err| ClientError::NotJson { reason: root_cause(&err) })?;
    if raw.trim().is_empty() {
        return Ok(ApiResponse { raw: "{}".to_owned(), value: Value::Object(Default::default()) });
    }
    let value = serde_json::from_str(&raw).map_err(|err| ClientError::NotJson { reason: err.to_string() })?;
    Ok(ApiResponse { raw: raw.trim().to_owned(), value })
}

/// A link's scheme, host and port, for messages: its path and query (a
/// presigned link's signature) are never shown.
fn link_origin(url: &str) -> String {
    match Url::parse(url) {
        Ok(link) => link.origin().ascii_serialization(),
        Err(_) => "a link".to_owned(),
    }
}

/// The innermost cause of an error, which is the one that says what happened
/// ("connection refused"), in lowercase.
fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = err;
    while let Some(next) = cause.source() {
        cause = next;
    }
    if let Some(io) = cause.downcast_ref::<std::io::Error>() {
        if io.kind() == std::io::ErrorKind::ConnectionRefused {
            return "connection refused".to_owned();
        }
    }
    let text = cause.to_string();
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => "unknown error".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_read_code_message_and_field() {
        let body = r#"{"error": {"code": "invalid_request", "message": "resolution too small", "field": "sandbox.resolution"}}"#;
        let err = ApiError::from_body(StatusCode::BAD_REQUEST, None, body);
        assert_eq!(err.to_string(), "invalid_request: resolution too small (field sandbox.resolution)");
        let err =
            ApiError::from_body(StatusCode::NOT_FOUND, None, r#"{"error": {"code": "not_found", "message": "no such task"}}"#);
        assert_eq!(err.to_string(), "not_found: no such task");
    }

    #[test]
    fn other_error_bodies_fall_back_to_the_status() {
        let err = ApiError::from_body(StatusCode::BAD_GATEWAY, None, "<html>\n  upstream down\n");
        assert_eq!(err.to_string(), "http_502: <html>");
        let err = ApiError::from_body(StatusCode::SERVICE_UNAVAILABLE, None, "");
        assert_eq!(err.to_string(), "http_503: service unavailable");
        let err = ApiError::from_body(
            StatusCode::TOO_MANY_REQUESTS,
            Some("3".into()),
            r#"{"error":{"code":"rate_limited","message":"slow down"}}"#,
        );
        assert_eq!(err.to_string(), "rate_limited: slow down (retry after 3 s)");
    }

    #[test]
    fn urls_keep_a_base_path_and_encode_ids() {
        let client = Client::new("http://localhost:8080/flotilla/", None).expect("client");
        assert_eq!(client.url(&["v1", "tasks", "a/b"]).as_str(), "http://localhost:8080/flotilla/v1/tasks/a%2Fb");
        let client = Client::new("http://localhost:8080", None).expect("client");
        assert_eq!(client.url(&["v1", "tasks"]).as_str(), "http://localhost:8080/v1/tasks");
        assert!(Client::new("localhost:8080", None).is_err());
    }

    #[test]
    fn keys_never_print() {
        let key = ApiKey::parse("secret").expect("key");
        assert!(!format!("{key:?}").contains("secret"));
    }

    #[tokio::test]
    async fn a_closed_port_is_reported_as_unreachable() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        drop(listener);
        let client = Client::new(&format!("http://127.0.0.1:{port}"), ApiKey::parse("k").ok()).expect("client");
        let err = client.get(&["v1", "tasks"], &[]).await.expect_err("nothing listens");
        assert_eq!(err.to_string(), format!("the API at http://127.0.0.1:{port} is unreachable (connection refused)"));
    }

    #[tokio::test]
    async fn a_missing_key_fails_before_any_request() {
        let client = Client::new("http://127.0.0.1:9", None).expect("client");
        let err = client.get(&["v1", "tasks"], &[]).await.expect_err("no key");
        assert!(matches!(err, ClientError::MissingKey));
        let client = Client::new("http://127.0.0.1:9", ApiKey::parse(" ").ok()).expect("client");
        let err = client.get(&["v1", "tasks"], &[]).await.expect_err("empty key");
        assert!(matches!(err, ClientError::MissingKey));
    }
}
