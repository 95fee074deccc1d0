//! The HTTP transport every model client shares: one JSON `POST` with the
//! provider's headers, retried the way model APIs ask to be retried. A `429`
//! waits as long as its `Retry-After` says (seconds or an HTTP date); a 5xx,
//! a timeout or a dropped connection retries with exponential backoff and
//! jitter; a `401`/`403` or another 4xx fails at once; a body that is not
//! JSON is a malformed answer. Keys travel only in headers and never appear
//! in errors or logs.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use flotilla_config::Secret;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::StatusCode;
use serde_json::Value;
use tracing::Instrument;

use super::ModelError;
use crate::provider_http::{excerpt, retry_after};

/// The longest `Retry-After` honoured; a longer one fails the call.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(120);

/// Where a model API is and how to call it.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The API's base URL, e.g. `https://api.openai.com/v1` (no trailing slash).
    pub base_url: String,
    pub api_key: Secret,
    /// How long one request may take, answer included.
    pub timeout: Duration,
    /// Retries after the first try, for 429s and transient faults alike.
    pub max_retries: usize,
    /// The first backoff delay; it doubles up to `max_delay`.
    pub min_delay: Duration,
    pub max_delay: Duration,
}

impl Endpoint {
    pub fn new(base_url: impl Into<String>, api_key: Secret) -> Self {
        Self {
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key,
            timeout: Duration::from_secs(120),
            max_retries: 4,
            min_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(20),
        }
    }
}

/// A client for one model API. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ModelHttp {
    client: reqwest::Client,
    endpoint: Endpoint,
}

/// One failed try, before the retry policy has decided.
#[derive(Debug)]
enum Attempt {
    RateLimited(Option<Duration>),
    Transient(String),
    Final(ModelError),
}

impl ModelHttp {
    pub fn new(endpoint: Endpoint) -> Result<Self, ModelError> {
        let client = reqwest::Client::builder()
            .timeout(endpoint.timeout)
            .build()
            .map_err(|e| ModelError::Unavailable(format!("cannot build an HTTP client: {e}")))?;
        Ok(Self { client, endpoint })
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// `POST`s `body` to `path` (under the base URL) with `headers`, which
    /// carry the key as the provider wants it (see [`ModelHttp::key`]), and
    /// returns the JSON answer. Traced in a `model_call` span with the path,
    /// the last status and the retries; never the URL's host, headers or body.
    pub async fn post_json(&self, path: &str, headers: &HeaderMap, body: &Value) -> Result<Value, ModelError> {
        let span = tracing::info_span!("model_call", path, status = tracing::field::Empty, retries = tracing::field::Empty);
        self.post_json_untraced(path, headers, body).instrument(span).await
    }

    async fn post_json_untraced(&self, path: &str, headers: &HeaderMap, body: &Value) -> Result<Value, ModelError> {
        let url = format!("{}{}", self.endpoint.base_url, path);
        let backoff = ExponentialBuilder::default()
            .with_min_delay(self.endpoint.min_delay)
            .with_max_delay(self.endpoint.max_delay)
            .with_max_times(self.endpoint.max_retries)
            .with_jitter();
        let mut retries = 0u32;
        let result = (|| self.try_once(&url, headers, body))
            .retry(backoff)
            .when(|e| !matches!(e, Attempt::Final(_)))
            .adjust(|e, planned| match e {
                Attempt::RateLimited(Some(wait)) => planned.map(|_| *wait),
                _ => planned,
            })
            .notify(|e, after| {
                retries += 1;
                let error = mask(format!("{e:?}"), self.endpoint.api_key.expose());
                tracing::warn!(%error, ?after, "model call failed; retrying");
            })
            .await;
        tracing::Span::current().record("retries", retries);
        result.map_err(|e| {
            let error = match e {
                Attempt::RateLimited(retry_after) => ModelError::RateLimited { retry_after },
                Attempt::Transient(message) => ModelError::Unavailable(message),
                Attempt::Final(error) => error,
            };
            redact(error, self.endpoint.api_key.expose())
        })
    }

    /// A header carrying the key, marked sensitive so it is never printed.
    pub fn key(&self, name: &'static str, prefix: &str) -> Result<(HeaderName, HeaderValue), ModelError> {
        let mut value = HeaderValue::from_str(&format!("{prefix}{}", self.endpoint.api_key.expose())).map_err(|_| {
            ModelError::Unauthorized { status: 0, message: "the API key holds characters a header cannot".into() }
        })?;
        value.set_sensitive(true);
        Ok((HeaderName::from_static(name), value))
    }

    async fn try_once(&self, url: &str, headers: &HeaderMap, body: &Value) -> Result<Value, Attempt> {
        let response = self
            .client
            .post(url)
            .headers(headers.clone())
            .json(body)
            .send()
            .await
            .map_err(|e| Attempt::Transient(describe_send_error(e)))?;
        let status = response.status();
        tracing::Span::current().record("status", status.as_u16());
        let retry_after = retry_after(response.headers());
        let text = response.text().await.map_err(|e| Attempt::Transient(format!("reading the answer failed: {e}")))?;
        if status.is_success() {
            return serde_json::from_str(&text)
                .map_err(|e| Attempt::Final(ModelError::Malformed(format!("the body is not JSON ({e}): {}", excerpt(&text)))));
        }
        let message = error_message(&text);
        Err(match status {
            StatusCode::TOO_MANY_REQUESTS => match retry_after {
                Some(wait) if wait > MAX_RETRY_AFTER => Attempt::Final(ModelError::RateLimited { retry_after: Some(wait) }),
                wait => Attempt::RateLimited(wait),
            },
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                Attempt::Final(ModelError::Unauthorized { status: status.as_u16(), message })
            }
            StatusCode::REQUEST_TIMEOUT | StatusCode::CONFLICT => Attempt::Transient(format!("{status}: {message}")),
            s if s.is_server_error() || s.as_u16() == 529 => Attempt::Transient(format!("{status}: {message}")),
            _ => Attempt::Final(ModelError::Rejected { status: status.as_u16(), message }),
        })
    }
}

/// What went wrong sending, without the URL's query or any header.
fn describe_send_error(error: reqwest::Error) -> String {
    if error.is_timeout() {
        "the request timed out".to_owned()
    } else if error.is_connect() {
        "could not connect".to_owned()
    } else {
        format!("the request failed: {}", error.without_url())
    }
}

/// The provider's own error message (`{"error": {"message"}}`, as both
/// OpenAI and Anthropic send it), else the start of the body.
fn error_message(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v.pointer("/error/message").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| excerpt(body))
}

/// `error` with the key masked wherever a provider's message echoed it.
fn redact(error: ModelError, key: &str) -> ModelError {
    let mask = |message: String| mask(message, key);
    match error {
        ModelError::Unauthorized { status, message } => ModelError::Unauthorized { status, message: mask(message) },
        ModelError::Rejected { status, message } => ModelError::Rejected { status, message: mask(message) },
        ModelError::Unavailable(message) => ModelError::Unavailable(mask(message)),
        ModelError::Malformed(message) => ModelError::Malformed(mask(message)),
        rate_limited @ ModelError::RateLimited { .. } => rate_limited,
    }
}

/// `text` with `key` masked wherever it appears.
fn mask(text: String, key: &str) -> String {
    if key.is_empty() {
        return text;
    }
    text.replace(key, "***")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_come_from_the_provider_body() {
        assert_eq!(error_message(r#"{"error": {"type": "x", "message": "bad tool"}}"#), "bad tool");
        assert_eq!(error_message("<html>oops</html>"), "<html>oops</html>");
        assert!(excerpt(&"a".repeat(500)).ends_with('…'));
    }

    #[test]
    fn echoed_keys_are_masked() {
        let error = redact(ModelError::Unauthorized { status: 401, message: "bad key sk-test here".into() }, "sk-test");
        assert_eq!(error.to_string(), "the model API refused the credentials (401): bad key *** here");
    }

    #[test]
    fn the_key_header_is_sensitive() {
        let http = ModelHttp::new(Endpoint::new("http://127.0.0.1:1/", Secret::new("sk-test"))).expect("client");
        let (name, value) = http.key("authorization", "Bearer ").expect("header");
        assert_eq!(name, "authorization");
        assert!(value.is_sensitive());
        assert_eq!(http.endpoint().base_url, "http://127.0.0.1:1");
    }
}
