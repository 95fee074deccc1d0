//! When a schedule is due: a five-field cron pattern read in an IANA time
//! zone (`croner` for the pattern, `jiff` and the time zone database for the
//! zone).
//!
//! Daylight-saving transitions follow the Open Cron Pattern Specification,
//! which `croner` implements: a job at one fixed time of day whose time does
//! not exist that day (02:30 when clocks jump from 02:00 to 03:00) runs once,
//! at the first instant after the gap; one whose time occurs twice runs once,
//! at the first occurrence. Interval patterns (`*/15 * * * *`, or several
//! hours) keep their pace in real time, so they run in both copies of a
//! repeated hour and not in the missing one.

use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use jiff::tz::TimeZone;
use jiff::Timestamp;

use flotilla_types::error::ValidationError;

/// The longest pattern accepted.
const MAX_PATTERN: usize = 256;

/// A regular expression for the document: patterns it matches are cron
/// patterns [`CronRule::parse`] accepts (a subset: numbers, lists of up to
/// four, `*` with a step, nicknames; days of the month up to 28, so every
/// pattern matches some date). The parser accepts more (ranges, names, `L`,
/// `W`, `#`); the document states what is certain.
pub const CRON_PATTERN: &str = r"^(@(yearly|monthly|weekly|daily|hourly)|(\*(/[1-5])?|[1-5]?[0-9](,[1-5]?[0-9]){0,3}) (\*(/[1-5])?|(1?[0-9]|2[0-3])(,(1?[0-9]|2[0-3])){0,3}) (\*(/[1-5])?|([1-9]|1[0-9]|2[0-8])(,([1-9]|1[0-9]|2[0-8])){0,3}) (\*(/[1-5])?|([1-9]|1[0-2])(,([1-9]|1[0-2])){0,3}) (\*(/[1-5])?|[0-6](,[0-6]){0,3}))$";

/// Every time zone name [`CronRule::parse`] knows, sorted.
pub fn zone_names() -> Vec<String> {
    let mut names: Vec<String> =
        jiff::tz::db().available().map(|name| name.to_string()).filter(|name| TimeZone::get(name).is_ok()).collect();
    names.sort_unstable();
    names
}

/// A cron pattern in a time zone.
#[derive(Debug, Clone)]
pub struct CronRule {
    cron: Cron,
    zone: TimeZone,
    /// The zone's IANA name, as the database spells it.
    zone_name: String,
}

impl CronRule {
    /// Parses a pattern (`minute hour day-of-month month day-of-week`, or a
    /// nickname like `@daily`) in a time zone (`UTC`, `Europe/Berlin`). Errors
    /// name the field `cron` or `timezone`.
    pub fn parse(pattern: &str, timezone: &str) -> Result<Self, ValidationError> {
        let zone = TimeZone::get(timezone.trim())
            .map_err(|_| ValidationError::at("timezone", "not a known time zone: give an IANA name like UTC or Europe/Berlin"))?;
        let zone_name = zone.iana_name().unwrap_or(timezone.trim()).to_owned();
        if pattern.len() > MAX_PATTERN {
            return Err(ValidationError::at("cron", format!("a cron pattern is at most {MAX_PATTERN} characters")));
        }
        let cron =
            CronParser::builder().seconds(Seconds::Disallowed).year(Year::Disallowed).build().parse(pattern).map_err(|e| {
                let reason = e.to_string().trim_end_matches('.').to_lowercase();
                ValidationError::at(
                    "cron",
                    format!("not a cron pattern of five fields (minute hour day-of-month month day-of-week): {reason}"),
                )
            })?;
        let rule = Self { cron, zone, zone_name };
        // Without a year field a pattern that matches once matches for ever,
        // so one that has no time after 1970 has none at all.
        if rule.next_after(0).is_none() {
            return Err(ValidationError::at("cron", "the pattern matches no date"));
        }
        Ok(rule)
    }

    /// The time zone's IANA name.
    pub fn zone_name(&self) -> &str {
        &self.zone_name
    }

    /// The first due time strictly after `ms` (epoch milliseconds), if the
    /// pattern matches any.
    pub fn next_after(&self, ms: i64) -> Option<i64> {
        let start = Timestamp::from_millisecond(ms).ok()?.to_zoned(self.zone.clone());
        let next = self.cron.find_next_occurrence(&start, false).ok()?;
        Some(next.timestamp().as_millisecond())
    }

    /// The last due time at or before `ms`, if there is one within a year.
    pub fn latest_at_or_before(&self, ms: i64) -> Option<i64> {
        let start = Timestamp::from_millisecond(ms).ok()?.to_zoned(self.zone.clone());
        let previous = self.cron.find_previous_occurrence(&start, true).ok()?;
        Some(previous.timestamp().as_millisecond())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_types::clock::{parse_rfc3339, rfc3339};
    use proptest::prelude::*;

    /// A pattern without its anchors, to generate from.
    fn unanchored(pattern: &str) -> &str {
        pattern.trim_start_matches('^').trim_end_matches('$')
    }

    proptest! {
        /// What the document promises the server accepts, it accepts.
        #[test]
        fn every_pattern_the_document_allows_parses(cron in proptest::string::string_regex(unanchored(CRON_PATTERN)).expect("regex")) {
            prop_assert!(CronRule::parse(&cron, "UTC").is_ok(), "{}", cron);
        }
    }

    #[test]
    fn every_listed_zone_parses_and_the_usual_ones_are_listed() {
        let names = zone_names();
        for name in ["UTC", "Europe/Berlin", "Asia/Kolkata", "America/New_York"] {
            assert!(names.iter().any(|n| n == name), "{name}");
        }
        for name in &names {
            assert!(CronRule::parse("0 9 * * *", name).is_ok(), "{name}");
        }
    }

    fn ms(text: &str) -> i64 {
        parse_rfc3339(text).expect("time")
    }

    fn next(rule: &CronRule, after: &str) -> String {
        rfc3339(rule.next_after(ms(after)).expect("a next time"))
    }

    #[test]
    fn a_zone_moves_the_wall_clock_time_to_utc() {
        let rule = CronRule::parse("0 9 * * *", "Europe/Berlin").expect("valid");
        assert_eq!(next(&rule, "2026-07-01T00:00:00Z"), "2026-07-01T07:00:00Z", "summer: UTC+2");
        assert_eq!(next(&rule, "2026-01-15T00:00:00Z"), "2026-01-15T08:00:00Z", "winter: UTC+1");
        assert_eq!(rule.zone_name(), "Europe/Berlin");
    }

    #[test]
    fn a_time_that_does_not_exist_runs_once_after_the_gap() {
        // 2026-03-29 in Berlin: 02:00 CET becomes 03:00 CEST.
        let rule = CronRule::parse("30 2 * * *", "Europe/Berlin").expect("valid");
        assert_eq!(next(&rule, "2026-03-28T02:00:00Z"), "2026-03-29T01:00:00Z", "03:00 CEST, right after the gap");
        assert_eq!(next(&rule, "2026-03-29T01:00:00Z"), "2026-03-30T00:30:00Z", "then 02:30 CEST the next day");
    }

    #[test]
    fn a_time_that_occurs_twice_runs_once() {
        // 2026-10-25 in Berlin: 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
        let rule = CronRule::parse("30 2 * * *", "Europe/Berlin").expect("valid");
        assert_eq!(next(&rule, "2026-10-24T12:00:00Z"), "2026-10-25T00:30:00Z", "the first 02:30, CEST");
        assert_eq!(next(&rule, "2026-10-25T00:30:00Z"), "2026-10-26T01:30:00Z", "not the second; next is 02:30 CET a day later");
    }

    #[test]
    fn the_latest_due_time_is_found_looking_back() {
        let rule = CronRule::parse("*/5 * * * *", "UTC").expect("valid");
        assert_eq!(rule.latest_at_or_before(ms("2026-05-01T10:52:30Z")), Some(ms("2026-05-01T10:50:00Z")));
        assert_eq!(rule.latest_at_or_before(ms("2026-05-01T10:50:00Z")), Some(ms("2026-05-01T10:50:00Z")), "inclusive");
        assert_eq!(rule.next_after(ms("2026-05-01T10:50:00Z")), Some(ms("2026-05-01T10:55:00Z")), "strictly after");
    }

    #[test]
    fn bad_patterns_and_zones_name_their_field() {
        for bad in ["", "* * * *", "61 * * * *", "0 0 * * * *", "0 0 1 1 * 2030", "every day"] {
            let err = CronRule::parse(bad, "UTC").expect_err(bad);
            assert_eq!(err.field.as_deref(), Some("cron"), "{bad}: {err:?}");
        }
        let err = CronRule::parse("* * * * *", "Mars/Olympus").expect_err("unknown zone");
        assert_eq!(err.field.as_deref(), Some("timezone"));
        let err = CronRule::parse("0 0 30 2 *", "UTC").expect_err("30 February");
        assert_eq!((err.field.as_deref(), err.message.as_str()), (Some("cron"), "the pattern matches no date"));
        let leap = CronRule::parse("0 0 29 2 *", "UTC").expect("29 February");
        assert_eq!(next(&leap, "2026-03-01T00:00:00Z"), "2028-02-29T00:00:00Z");
        assert!(CronRule::parse("@daily", "UTC").is_ok());
        assert!(CronRule::parse("0 9 * * MON-FRI", "America/New_York").is_ok());
    }
}
