//! Helpers for the HTTP calls a worker makes to outside providers (the model
//! APIs, E2B): how long a `Retry-After` asks to wait, and a short excerpt of
//! a body for an error message. Shared by `model::http` and `sandbox::e2b`
//! so that neither borrows from the other.

use std::time::Duration;

use flotilla_types::redact::redact;
use reqwest::header::{HeaderMap, RETRY_AFTER};

/// `Retry-After` as a wait: delta seconds, or an HTTP date from now.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = jiff::fmt::rfc2822::parse(value).ok()?.timestamp();
    let wait = at.duration_since(jiff::Timestamp::now());
    Some(Duration::try_from(wait).unwrap_or(Duration::ZERO))
}

/// The first 200 characters of a body, for an error message, secrets
/// masked (an E2B answer carries `envdAccessToken`).
pub fn excerpt(text: &str) -> String {
    let text = redact(text);
    let mut cut: String = text.chars().take(200).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    cut
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(RETRY_AFTER, HeaderValue::from_str(value).expect("header"));
        map
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        assert_eq!(retry_after(&headers("3")), Some(Duration::from_secs(3)));
        assert_eq!(retry_after(&headers("Sun, 06 Nov 1994 08:49:37 GMT")), Some(Duration::ZERO));
        let later = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(30);
        let date = jiff::fmt::rfc2822::to_string(&later.to_zoned(jiff::tz::TimeZone::UTC)).expect("date");
        let wait = retry_after(&headers(&date)).expect("a date parses");
        assert!(wait > Duration::from_secs(25) && wait <= Duration::from_secs(30), "{wait:?}");
        assert_eq!(retry_after(&headers("soon")), None);
    }

    #[test]
    fn a_long_body_is_cut() {
        assert!(excerpt(&"a".repeat(500)).ends_with('…'));
        assert_eq!(excerpt("short"), "short");
    }
}
