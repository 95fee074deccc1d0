//! What the model gateway lets a sandbox call, decided on the raw request
//! before anything is parsed or normalised: an exact (method, path)
//! allowlist, no dot segments, no percent-encoding, no empty segments or
//! backslashes (so no URL parser downstream can turn an allowed path into
//! another), a plain query, and only allowlisted `anthropic-beta` values.
//! The upstream URL is built from the checked path, never from the raw URI.

use axum::http::{HeaderMap, HeaderValue, Method};

/// The `anthropic-beta` features a sandbox may ask for, by prefix.
const ALLOWED_BETAS: &[&str] = &[
    "claude-code-",
    "computer-use-",
    "context-1m-",
    "context-management-",
    "fine-grained-tool-streaming-",
    "interleaved-thinking-",
    "output-128k-",
    "prompt-caching-",
    "token-efficient-tools-",
];

/// One call the gateway forwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Call {
    /// `POST /v1/messages`: a model call; its `model` is checked and its usage counted.
    Messages,
    /// `POST /v1/messages/count_tokens`.
    CountTokens,
    /// `GET /v1/models`.
    Models,
    /// `GET /v1/models/{id}`.
    Model(String),
}

impl Call {
    /// The checked call for `method` and the raw `path`, or `None`.
    pub fn of(method: &Method, path: &str) -> Option<Self> {
        if !path.starts_with('/') || path.contains(['%', '\\']) || path.contains("//") {
            return None;
        }
        let segments: Vec<&str> = path[1..].split('/').collect();
        if segments.iter().any(|s| s.is_empty() || *s == "." || *s == "..") {
            return None;
        }
        match (method, segments.as_slice()) {
            (&Method::POST, ["v1", "messages"]) => Some(Call::Messages),
            (&Method::POST, ["v1", "messages", "count_tokens"]) => Some(Call::CountTokens),
            (&Method::GET, ["v1", "models"]) => Some(Call::Models),
            (&Method::GET, ["v1", "models", id]) if is_model_id(id) => Some(Call::Model((*id).to_owned())),
            _ => None,
        }
    }

    /// The path sent upstream, rebuilt from what was checked.
    pub fn path(&self) -> String {
        match self {
            Call::Messages => "/v1/messages".into(),
            Call::CountTokens => "/v1/messages/count_tokens".into(),
            Call::Models => "/v1/models".into(),
            Call::Model(id) => format!("/v1/models/{id}"),
        }
    }

    /// Whether the call names a model in its body.
    pub fn has_model(&self) -> bool {
        matches!(self, Call::Messages | Call::CountTokens)
    }
}

fn is_model_id(id: &str) -> bool {
    id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'@'))
}

/// A query string the gateway passes on (`beta=true`, list paging), or why not.
pub(super) fn checked_query(query: Option<&str>) -> Option<Option<String>> {
    match query {
        None | Some("") => Some(None),
        Some(q) if q.len() <= 256 && q.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'=' | b'&' | b'_' | b'-')) => {
            Some(Some(q.to_owned()))
        }
        Some(_) => None,
    }
}

/// Keeps only the allowlisted `anthropic-beta` values.
pub(super) fn filter_betas(headers: &mut HeaderMap) {
    let asked: Vec<String> = headers
        .get_all("anthropic-beta")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect();
    headers.remove("anthropic-beta");
    let kept: Vec<String> = asked.into_iter().filter(|b| ALLOWED_BETAS.iter().any(|p| b.starts_with(p))).collect();
    if let Ok(value) = HeaderValue::from_str(&kept.join(",")) {
        if !kept.is_empty() {
            headers.insert("anthropic-beta", value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_exact_model_paths_pass() {
        assert_eq!(Call::of(&Method::POST, "/v1/messages"), Some(Call::Messages));
        assert_eq!(Call::of(&Method::POST, "/v1/messages/count_tokens"), Some(Call::CountTokens));
        assert_eq!(Call::of(&Method::GET, "/v1/models"), Some(Call::Models));
        assert_eq!(Call::of(&Method::GET, "/v1/models/claude-sonnet-4-6"), Some(Call::Model("claude-sonnet-4-6".into())));
        for (method, path) in [
            (Method::GET, "/v1/models/../organizations/api_keys"),
            (Method::GET, "/v1/models/%2e%2e/files"),
            (Method::GET, "/v1/models/%2E%2E/files"),
            (Method::GET, "/v1/models/..%2Ffiles"),
            (Method::GET, "/v1/models/./x"),
            (Method::GET, "/v1//models"),
            (Method::GET, "/v1/models\\..\\files"),
            (Method::GET, "/v1/messages"),
            (Method::POST, "/v1/models"),
            (Method::DELETE, "/v1/models/x"),
            (Method::POST, "/v1/messages/batches"),
            (Method::POST, "/v1/files"),
            (Method::GET, "/v1/organizations/api_keys"),
            (Method::POST, "/v1/messages/"),
        ] {
            assert_eq!(Call::of(&method, path), None, "{method} {path}");
        }
    }

    #[test]
    fn queries_and_betas_are_filtered() {
        assert_eq!(checked_query(Some("beta=true")), Some(Some("beta=true".into())));
        assert_eq!(checked_query(Some("x=%2e")), None);
        let mut headers = HeaderMap::new();
        headers.insert(
            "anthropic-beta",
            HeaderValue::from_static("claude-code-20250219, files-api-2025-04-14,prompt-caching-2024-07-31"),
        );
        filter_betas(&mut headers);
        assert_eq!(
            headers.get("anthropic-beta").and_then(|v| v.to_str().ok()),
            Some("claude-code-20250219,prompt-caching-2024-07-31")
        );
    }
}
