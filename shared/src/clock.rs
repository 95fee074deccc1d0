//! Wall-clock helpers: every timestamp Flotilla stores is milliseconds since
//! the Unix epoch, and every timestamp it shows is RFC 3339 in UTC.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    let nanos = OffsetDateTime::now_utc().unix_timestamp_nanos();
    i64::try_from(nanos / 1_000_000).unwrap_or(i64::MAX)
}

/// Formats epoch milliseconds as RFC 3339 (UTC, millisecond precision).
pub fn rfc3339(ms: i64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    OffsetDateTime::from_unix_timestamp_nanos(nanos).ok().and_then(|t| t.format(&Rfc3339).ok()).unwrap_or_default()
}

/// Parses an RFC 3339 time into epoch milliseconds.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let t = OffsetDateTime::parse(text, &Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips_milliseconds() {
        let ms = 1_764_000_000_123;
        assert_eq!(parse_rfc3339(&rfc3339(ms)), Some(ms));
    }

    #[test]
    fn garbage_is_not_a_time() {
        assert_eq!(parse_rfc3339("tomorrow"), None);
    }
}
