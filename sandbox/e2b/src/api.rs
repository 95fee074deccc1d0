//! The E2B control plane: the REST API that creates, finds, extends and
//! kills sandboxes (`POST /sandboxes`, `GET /sandboxes/{id}`,
//! `POST /sandboxes/{id}/timeout`, `POST /sandboxes/{id}/connect`,
//! `DELETE /sandboxes/{id}`), authenticated by the `X-API-Key` header.
//!
//! Retry policy: only a `429` is retried, after its `Retry-After` (or one
//! second when it names none), a bounded number of times; a `Retry-After`
//! longer than the configured ceiling fails at once. A `401`/`403` fails at
//! once, since the same key will be refused again. Nothing else is retried
//! here: a create that timed out may still have made a sandbox, so a blind
//! retry could make two. The key is a sensitive header and never appears in
//! errors or logs.

use std::collections::HashMap;
use std::time::Duration;

use flotilla_config::Secret;
use reqwest::header::{HeaderValue, CONTENT_LENGTH};
use reqwest::{Method, StatusCode, Url};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use flotilla_sandbox::http::{excerpt, retry_after};

/// The header that carries the API key.
pub const API_KEY_HEADER: &str = "x-api-key";
/// The wait after a `429` that names no `Retry-After`.
const DEFAULT_RATE_LIMIT_WAIT: Duration = Duration::from_secs(1);

/// The body of `POST /sandboxes`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSandbox {
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Time to live in seconds.
    pub timeout: u64,
    #[serde(default)]
    pub secure: bool,
    #[serde(default)]
    pub auto_pause: bool,
    #[serde(default)]
    pub metadata: HashMap<String, String>,
    #[serde(default)]
    pub env_vars: HashMap<String, String>,
}

/// What `POST /sandboxes` and `POST /sandboxes/{id}/connect` answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreatedSandbox {
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(default)]
    pub envd_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envd_access_token: Option<String>,
    #[serde(default)]
    pub domain: Option<String>,
}

/// A sandbox's state as `GET /sandboxes/{id}` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum SandboxState {
    Running,
    Paused,
}

/// What `GET /sandboxes/{id}` answers (the fields used here).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SandboxDetail {
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// When the sandbox will be killed unless extended.
    #[serde(with = "time::serde::rfc3339")]
    pub end_at: OffsetDateTime,
    pub state: SandboxState,
    #[serde(default)]
    pub envd_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envd_access_token: Option<String>,
    #[serde(default)]
    pub domain: Option<String>,
    #[serde(default)]
    pub metadata: HashMap<String, String>,
}

/// The body of `POST /sandboxes/{id}/timeout` and `/connect`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct TimeoutBody {
    /// Seconds from now.
    pub timeout: u64,
}

/// The API's error body.
#[derive(Debug, Deserialize)]
struct ErrorBody {
    message: String,
}

/// Why a control-plane call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ApiError {
    #[error("the E2B API refused the API key ({status}): {message}")]
    Unauthorized { status: u16, message: String },
    #[error("no such sandbox")]
    NotFound,
    #[error("the E2B API is rate limiting (retry after {retry_after:?})")]
    RateLimited { retry_after: Option<Duration> },
    #[error("the E2B API rejected the request ({status}): {message}")]
    Rejected { status: u16, message: String },
    #[error("the E2B API is unavailable: {0}")]
    Unavailable(String),
    #[error("the E2B API answered something unexpected: {0}")]
    Malformed(String),
}

/// How often and how long a `429` is waited out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RateLimitPolicy {
    /// Retries after the first try.
    pub retries: u32,
    /// The longest `Retry-After` honoured.
    pub max_wait: Duration,
}

/// A client for one E2B API with one key.
#[derive(Debug, Clone)]
pub(crate) struct ControlPlane {
    client: reqwest::Client,
    base: Url,
    api_key: HeaderValue,
    policy: RateLimitPolicy,
}

impl ControlPlane {
    pub fn new(client: reqwest::Client, api_url: &str, api_key: &Secret, policy: RateLimitPolicy) -> Result<Self, ApiError> {
        let base = Url::parse(api_url.trim_end_matches('/'))
            .map_err(|e| ApiError::Rejected { status: 0, message: format!("the API URL is not a URL: {e}") })?;
        let mut api_key = HeaderValue::from_str(api_key.expose())
            .map_err(|_| ApiError::Unauthorized { status: 0, message: "the API key holds characters a header cannot".into() })?;
        api_key.set_sensitive(true);
        Ok(Self { client, base, api_key, policy })
    }

    pub async fn create(&self, body: &NewSandbox) -> Result<CreatedSandbox, ApiError> {
        let answer = self.call(Method::POST, &["sandboxes"], Some(body)).await?;
        parse(&answer)
    }

    pub async fn get(&self, id: &str) -> Result<SandboxDetail, ApiError> {
        let answer = self.call::<()>(Method::GET, &["sandboxes", id], None).await?;
        parse(&answer)
    }

    /// Sets the sandbox to die `seconds` from now (which may shorten its life).
    pub async fn set_timeout(&self, id: &str, seconds: u64) -> Result<(), ApiError> {
        self.call(Method::POST, &["sandboxes", id, "timeout"], Some(&TimeoutBody { timeout: seconds })).await?;
        Ok(())
    }

    /// Resumes a paused sandbox (its life only ever extended to `seconds`).
    pub async fn connect(&self, id: &str, seconds: u64) -> Result<CreatedSandbox, ApiError> {
        let answer = self.call(Method::POST, &["sandboxes", id, "connect"], Some(&TimeoutBody { timeout: seconds })).await?;
        parse(&answer)
    }

    /// Pauses a running sandbox (`409`, already paused, counts as done).
    pub async fn pause(&self, id: &str) -> Result<(), ApiError> {
        match self.call::<()>(Method::POST, &["sandboxes", id, "pause"], None).await {
            Err(ApiError::Rejected { status: 409, .. }) | Ok(_) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub async fn delete(&self, id: &str) -> Result<(), ApiError> {
        self.call::<()>(Method::DELETE, &["sandboxes", id], None).await?;
        Ok(())
    }

    /// One call, with `429`s waited out; the successful answer's body.
    async fn call<B: Serialize>(&self, method: Method, segments: &[&str], body: Option<&B>) -> Result<String, ApiError> {
        let url = self.url(segments)?;
        let mut retries_left = self.policy.retries;
        loop {
            match self.try_once(method.clone(), url.clone(), body).await {
                Err(ApiError::RateLimited { retry_after }) if retries_left > 0 => {
                    let wait = retry_after.unwrap_or(DEFAULT_RATE_LIMIT_WAIT);
                    if wait > self.policy.max_wait {
                        return Err(ApiError::RateLimited { retry_after });
                    }
                    retries_left -= 1;
                    tracing::warn!(
                        path = url.path(),
                        wait_ms = wait.as_millis() as u64,
                        retries_left,
                        "e2b api rate limited; waiting"
                    );
                    tokio::time::sleep(wait).await;
                }
                other => return other,
            }
        }
    }

    async fn try_once<B: Serialize>(&self, method: Method, url: Url, body: Option<&B>) -> Result<String, ApiError> {
        let mut request = self.client.request(method, url).header(API_KEY_HEADER, self.api_key.clone());
        request = match body {
            Some(body) => request.json(body),
            None => request.header(CONTENT_LENGTH, 0),
        };
        let response = request.send().await.map_err(|e| ApiError::Unavailable(describe_send_error(&e)))?;
        let status = response.status();
        let wait = retry_after(response.headers());
        let text = response
            .text()
            .await
            .map_err(|e| ApiError::Unavailable(format!("reading the answer failed: {}", e.without_url())))?;
        if status.is_success() {
            return Ok(text);
        }
        let message = error_message(&text);
        Err(match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => ApiError::Unauthorized { status: status.as_u16(), message },
            StatusCode::NOT_FOUND => ApiError::NotFound,
            StatusCode::TOO_MANY_REQUESTS => ApiError::RateLimited { retry_after: wait },
            s if s.is_client_error() => ApiError::Rejected { status: s.as_u16(), message },
            s => ApiError::Unavailable(format!("{s}: {message}")),
        })
    }

    fn url(&self, segments: &[&str]) -> Result<Url, ApiError> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| ApiError::Rejected { status: 0, message: "the API URL cannot have a path".into() })?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }
}

fn parse<T: DeserializeOwned>(text: &str) -> Result<T, ApiError> {
    serde_json::from_str(text).map_err(|e| ApiError::Malformed(format!("{e}: {}", excerpt(text))))
}

/// The API's `message`, else the start of the body.
fn error_message(body: &str) -> String {
    serde_json::from_str::<ErrorBody>(body).map(|b| b.message).unwrap_or_else(|_| excerpt(body))
}

/// What went wrong sending, without the URL or any header.
pub(crate) fn describe_send_error(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        "the request timed out".to_owned()
    } else if error.is_connect() {
        "could not connect".to_owned()
    } else {
        "the request failed".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_json_uses_the_api_names() {
        let body = NewSandbox {
            template_id: "desktop".into(),
            timeout: 300,
            secure: true,
            auto_pause: false,
            metadata: HashMap::new(),
            env_vars: HashMap::from([("DISPLAY".into(), ":0".into())]),
        };
        let json = serde_json::to_value(&body).expect("json");
        assert_eq!(json["templateID"], "desktop");
        assert_eq!(json["envVars"]["DISPLAY"], ":0");
        assert_eq!(json["autoPause"], false);

        let detail: SandboxDetail = serde_json::from_str(
            r#"{"templateID": "desktop", "sandboxID": "i1", "clientID": "c", "startedAt": "2026-01-01T00:00:00Z",
                "endAt": "2026-01-01T00:05:00.5Z", "cpuCount": 2, "memoryMB": 512, "diskSizeMB": 1024,
                "state": "running", "envdVersion": "0.6.13", "envdAccessToken": "t", "domain": null}"#,
        )
        .expect("detail parses");
        assert_eq!(detail.state, SandboxState::Running);
        assert_eq!((detail.end_at - detail.started_at).whole_milliseconds(), 300_500);
        assert_eq!(detail.domain, None);
    }

    #[test]
    fn urls_keep_the_base_path_and_escape_ids() {
        let secret = Secret::new("e2b_00");
        let policy = RateLimitPolicy { retries: 0, max_wait: Duration::ZERO };
        let api = ControlPlane::new(reqwest::Client::new(), "http://127.0.0.1:9/v0/", &secret, policy).expect("api");
        assert_eq!(
            api.url(&["sandboxes", "a b", "timeout"]).expect("url").as_str(),
            "http://127.0.0.1:9/v0/sandboxes/a%20b/timeout"
        );
        assert!(api.api_key.is_sensitive());
    }

    #[test]
    fn error_messages_come_from_the_body() {
        assert_eq!(error_message(r#"{"code": 401, "message": "Invalid API key"}"#), "Invalid API key");
        assert_eq!(error_message("oops"), "oops");
    }
}
