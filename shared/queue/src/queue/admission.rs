//! The queue's side of admission: the Lua that decides whether a tenant may
//! add tasks now ([`ADMIT_FN`], run by `crate::quota`'s admission script
//! and by the single-task submit, `super::singles`), and its verdict.

use crate::error::QueueError;

/// Admission of `n` tasks for one tenant: its tokens spent today against
/// `max_tokens` (when `usage` is given), then its submit rate (a GCRA token
/// bucket whose state is one timestamp, read against Redis's own clock so
/// replicas never disagree; `interval` µs, 0 for none, and `burst`), then
/// its waiting tasks (`state`'s `queued` and `delayed`, plus the room live
/// reservations in `admitting` hold) against `max_queued`. Only when all
/// pass does it take the rate's token and, when given a `ticket`, reserve
/// room for `n` tasks for `hold_ms`; a refusal changes nothing. Returns
/// `{'ok', remaining, reset_s}`, `{'tokens', spent, 0}`,
/// `{'rate', retry_after_s, reset_s}` or `{'queued', waiting, 0}`.
///
/// In three steps, so one call can judge several requests against one
/// read: `admission_read` (Redis's clock, the day's tokens, the rate's
/// time, the room reserved), `judge` (one request of `n` tasks with
/// `waiting` tasks waiting, in memory; an admission takes the rate's token
/// in the read state) and `admission_write` (the rate's time, once).
pub(crate) const ADMIT_FN: &str = include_str!("lua/admit_fn.lua");

/// What admission decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Admitted; `remaining` submits pass now and the bucket is full again
    /// in `reset_s` (both meaningful only when the tenant has a rate).
    Admitted { remaining: i64, reset_s: i64 },
    /// The tenant spent its tokens of today.
    TokensSpent,
    /// Over the submit rate: retry after `retry_after_s`.
    RateLimited { retry_after_s: i64, reset_s: i64 },
    /// Past `max_queued`, with `waiting` tasks waiting now.
    QueueFull { waiting: i64 },
}

impl Verdict {
    /// The verdict of an admission script's reply.
    pub(crate) fn of_reply((verdict, a, b): (String, i64, i64)) -> Result<Self, QueueError> {
        match verdict.as_str() {
            "ok" => Ok(Verdict::Admitted { remaining: a, reset_s: b }),
            "tokens" => Ok(Verdict::TokensSpent),
            "rate" => Ok(Verdict::RateLimited { retry_after_s: a, reset_s: b }),
            "queued" => Ok(Verdict::QueueFull { waiting: a }),
            _ => Err(QueueError::Corrupt(format!("admit answered {verdict}"))),
        }
    }
}
