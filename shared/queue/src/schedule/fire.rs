//! Firing due schedules, with no leader: every worker's housekeeping calls
//! [`Schedules::fire_due`] about once a second, and any number may do so at
//! once. The time is a parameter, so tests drive the clock.
//!
//! For a schedule whose due time has come, a replica:
//! 1. works out the due time to fire: the latest time the rule matches at
//!    or before now (after an outage, that is the last missed one; the
//!    others are not made up), and the next due time, the first strictly
//!    after now;
//! 2. claims it with one script that moves `next_due` on only if it still
//!    holds the value the replica read, marks the due time `pending` and
//!    parks the schedule in the due set at a retry time a few seconds away.
//!    Of several replicas racing, one claims; the others see the change and
//!    leave it. With `overlap: skip` and the previous task not ended, the
//!    claim records a skipped run instead;
//! 3. submits the task with the idempotency key `schedule:<id>:<due ms>`,
//!    then records it as the last run, clears `pending` and puts the next
//!    due time in the due set.
//!
//! A replica that dies between 2 and 3 leaves `pending` set; when the retry
//! time comes, whichever replica sees it submits again with the same key,
//! which gives back the same task if one was made: each due time yields
//! exactly one task.

use std::sync::LazyLock;

use rand::seq::SliceRandom;
use redis::{AsyncCommands, Script};

use super::store::{Overlap, Schedule, Schedules};
use crate::error::QueueError;
use crate::redis_lua;
use flotilla_types::ids::{ScheduleId, TaskId};
use flotilla_types::task::TaskStatus;

/// How long a claimed due time may stay pending before another replica
/// submits its task instead.
const PENDING_RETRY_MS: i64 = 10_000;
/// The most due schedules one pass handles; the rest wait for the next.
const FIRE_BATCH: isize = 1_000;

/// Claims a due time. `KEYS`: hash, due set. `ARGV[1]` id, `ARGV[2]` the
/// `next_due` read, `ARGV[3]` the new next due (empty if the rule never
/// matches again), `ARGV[4]` the due time
/// fired, `ARGV[5]` `1` to skip it, `ARGV[6]` the retry time. Returns 1 when
/// claimed, 0 when the schedule changed meanwhile (another replica claimed
/// it, it was paused, edited or deleted).
pub(crate) static CLAIM: LazyLock<Script> = LazyLock::new(|| redis_lua::script(&[include_str!("lua/claim_due.lua")], &[]));

/// Records the task of a pending due time. `KEYS`: hash, due set. `ARGV[1]`
/// id, `ARGV[2]` the due time, `ARGV[3]` the task id (empty when none could
/// be made). Returns 1 when recorded, 0 when another replica did first.
pub(crate) static RECORD: LazyLock<Script> = LazyLock::new(|| redis_lua::script(&[include_str!("lua/record_run.lua")], &[]));

/// A task a schedule made for one due time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    pub schedule: ScheduleId,
    pub due_ms: i64,
    pub task: TaskId,
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FireReport {
    pub fired: Vec<Fired>,
    /// Due times left out by `overlap: skip`.
    pub skipped: Vec<(ScheduleId, i64)>,
    /// Schedules that failed (logged); they are tried again next pass.
    pub failed: usize,
}

impl Schedules<'_> {
    /// Fires every schedule due at `now_ms`.
    pub async fn fire_due(&self, now_ms: i64) -> Result<FireReport, QueueError> {
        let mut conn = self.queue.redis().shared();
        let mut due: Vec<String> =
            conn.zrangebyscore_limit(self.queue.keys().schedules_due(), "-inf", now_ms, 0, FIRE_BATCH).await?;
        // Replicas that go through the same due schedules in different
        // orders mostly claim different ones, so many fire in parallel.
        due.shuffle(&mut rand::rng());
        let mut report = FireReport::default();
        for raw in due {
            let Ok(id) = ScheduleId::parse(&raw) else {
                let _: i64 = conn.zrem(self.queue.keys().schedules_due(), &raw).await?;
                continue;
            };
            if let Err(error) = self.fire(&id, now_ms, &mut report).await {
                tracing::warn!(schedule_id = %id, %error, "firing a schedule failed");
                report.failed += 1;
            }
        }
        Ok(report)
    }

    async fn fire(&self, id: &ScheduleId, now_ms: i64, report: &mut FireReport) -> Result<(), QueueError> {
        let keys = self.queue.keys();
        let mut conn = self.queue.redis().shared();
        let Some(schedule) = self.load(id).await? else {
            let _: i64 = conn.zrem(keys.schedules_due(), id.as_str()).await?;
            return Ok(());
        };
        if let Some(due) = schedule.pending_ms {
            // Claimed by a replica that has not recorded its task by the retry time.
            let score: Option<f64> = conn.zscore(keys.schedules_due(), id.as_str()).await?;
            if score.is_some_and(|s| s <= now_ms as f64) {
                if let Some(fired) = self.submit(&schedule, due).await? {
                    report.fired.push(fired);
                }
            }
            return Ok(());
        }
        let Some(next_due) = schedule.next_due_ms else {
            // Paused: it has no place in the due set.
            let _: i64 = conn.zrem(keys.schedules_due(), id.as_str()).await?;
            return Ok(());
        };
        if next_due > now_ms {
            // The due set lags the hash (a write was cut short): catch it up.
            let _: i64 = conn.zadd(keys.schedules_due(), id.as_str(), next_due).await?;
            return Ok(());
        }
        let rule = schedule.rule()?;
        let due = rule.latest_at_or_before(now_ms).map_or(next_due, |latest| latest.max(next_due));
        let next = rule.next_after(now_ms);
        let skip = schedule.overlap == Overlap::Skip && self.previous_still_active(&schedule).await?;
        let mut claim = CLAIM.prepare_invoke();
        claim.key(keys.schedule(id)).key(keys.schedules_due());
        claim.arg(id.as_str()).arg(next_due).arg(next.map(|n| n.to_string()).unwrap_or_default()).arg(due);
        claim.arg(if skip { "1" } else { "0" }).arg(now_ms + PENDING_RETRY_MS);
        let claimed: i64 = claim.invoke_async(&mut conn).await?;
        if claimed == 0 {
            return Ok(());
        }
        if skip {
            tracing::info!(schedule_id = %id, due_ms = due, "schedule run skipped: the previous task is still active");
            report.skipped.push((id.clone(), due));
            return Ok(());
        }
        if let Some(fired) = self.submit(&schedule, due).await? {
            report.fired.push(fired);
        }
        Ok(())
    }

    /// Whether the schedule's last task has yet to end.
    async fn previous_still_active(&self, schedule: &Schedule) -> Result<bool, QueueError> {
        let Some(task) = &schedule.last_task else { return Ok(false) };
        let mut conn = self.queue.redis().shared();
        let status: Option<String> = conn.hget(self.queue.keys().task(task), "status").await?;
        Ok(status.as_deref().and_then(TaskStatus::parse).is_some_and(|s| !s.is_terminal()))
    }

    /// Makes (or finds) the task of a claimed due time and records it.
    /// Returns the task when this call recorded it.
    async fn submit(&self, schedule: &Schedule, due_ms: i64) -> Result<Option<Fired>, QueueError> {
        let mut spec = schedule.task.clone();
        spec.idempotency_key = Some(format!("schedule:{}:{due_ms}", schedule.id));
        let task = match self.queue.submitter().submit(&schedule.tenant, spec).await {
            Ok(submitted) => Some(submitted.id),
            Err(QueueError::IdempotencyConflict) => {
                tracing::warn!(schedule_id = %schedule.id, due_ms, "a task with this run's idempotency key and another body exists; no task made");
                None
            }
            Err(e) => return Err(e),
        };
        let keys = self.queue.keys();
        let mut record = RECORD.prepare_invoke();
        record.key(keys.schedule(&schedule.id)).key(keys.schedules_due());
        record.arg(schedule.id.as_str()).arg(due_ms).arg(task.as_ref().map(TaskId::as_str).unwrap_or(""));
        let mut conn = self.queue.redis().shared();
        let recorded: i64 = record.invoke_async(&mut conn).await?;
        match task {
            Some(task) if recorded == 1 => {
                tracing::info!(schedule_id = %schedule.id, task_id = %task, due_ms, "schedule fired");
                Ok(Some(Fired { schedule: schedule.id.clone(), due_ms, task }))
            }
            _ => Ok(None),
        }
    }
}
