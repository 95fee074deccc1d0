//! Schedules: a cron rule in a time zone that enqueues a task at each due
//! time, exactly once fleet-wide however many workers run.
//!
//! `rule` says when a schedule is due (time zones and daylight-saving
//! transitions included); `store` keeps schedules in Redis, all under one
//! hash tag so each change is one atomic script; `fire` turns due times into
//! tasks with no leader, any replica at any time, the clock a parameter.

mod fire;
mod rule;
mod store;

pub use fire::{FireReport, Fired};
pub use rule::{zone_names, CronRule, CRON_PATTERN};
pub use store::{LastRun, NewSchedule, Overlap, Schedule, SchedulePatch, Schedules, Settings};

/// The schedules' Redis scripts by name (see `crate::testing`).
#[cfg(feature = "testing")]
pub(crate) fn lua_scripts() -> Vec<(&'static str, &'static redis::Script)> {
    vec![
        ("schedule/create", &store::CREATE),
        ("schedule/update", &store::UPDATE),
        ("schedule/delete", &store::DELETE),
        ("schedule/claim_due", &fire::CLAIM),
        ("schedule/record_run", &fire::RECORD),
    ]
}
