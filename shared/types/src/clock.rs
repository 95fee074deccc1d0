//! Wall-clock helpers: every timestamp Flotilla stores is milliseconds since
//! the Unix epoch, and every timestamp it shows is RFC 3339 in UTC.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    let nanos = OffsetDateTime::now_utc().unix_timestamp_nanos();
    i64::try_from(nanos / 1_000_000).unwrap_or(i64::MAX)
}

/// The clock the queue reads for what turns with the UTC day (usage days,
/// the daily token limit, due tasks): the system's, moved by an offset that
/// only tests set ([`Clock::advance`]). Clones share one offset, so a test
/// moves the clock of every API and worker made from one config at once.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    offset_ms: std::sync::Arc<std::sync::atomic::AtomicI64>,
}

impl Clock {
    /// Milliseconds since the Unix epoch, now, by this clock.
    pub fn now_ms(&self) -> i64 {
        now_ms().saturating_add(self.offset_ms.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Moves this clock (and its clones) `ms` forward.
    pub fn advance(&self, ms: i64) {
        self.offset_ms.fetch_add(ms, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Formats epoch milliseconds as RFC 3339 (UTC, millisecond precision).
pub fn rfc3339(ms: i64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    OffsetDateTime::from_unix_timestamp_nanos(nanos).ok().and_then(|t| t.format(&Rfc3339).ok()).unwrap_or_default()
}

/// Milliseconds in a day.
pub const DAY_MS: i64 = 24 * 3600 * 1000;

/// The UTC day of epoch milliseconds, as `YYYY-MM-DD`.
pub fn utc_day(ms: i64) -> String {
    let date = OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000)).map(|t| t.date()).unwrap_or(time::Date::MIN);
    format!("{:04}-{:02}-{:02}", date.year(), u8::from(date.month()), date.day())
}

/// Milliseconds from `ms` until the next UTC midnight.
pub fn ms_to_next_utc_day(ms: i64) -> i64 {
    DAY_MS - ms.rem_euclid(DAY_MS)
}

/// Parses a `YYYY-MM-DD` day into the epoch ms of its UTC midnight.
pub fn parse_utc_day(text: &str) -> Option<i64> {
    let format = time::macros::format_description!("[year]-[month]-[day]");
    let date = time::Date::parse(text, &format).ok()?;
    Some(date.midnight().assume_utc().unix_timestamp() * 1000)
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
    fn days_are_utc_and_turn_at_midnight() {
        let ms = parse_rfc3339("2026-03-04T23:59:59.500Z").expect("time");
        assert_eq!(utc_day(ms), "2026-03-04");
        assert_eq!(ms_to_next_utc_day(ms), 500);
        assert_eq!(utc_day(ms + 500), "2026-03-05");
        assert_eq!(parse_utc_day("2026-03-05"), Some(ms + 500));
        assert_eq!(parse_utc_day("2026-3-5x"), None);
    }

    #[test]
    fn a_moved_clock_moves_its_clones() {
        let clock = Clock::default();
        let other = clock.clone();
        clock.advance(DAY_MS);
        assert!(other.now_ms() - now_ms() >= DAY_MS - 1000);
    }

    #[test]
    fn garbage_is_not_a_time() {
        assert_eq!(parse_rfc3339("tomorrow"), None);
    }
}
