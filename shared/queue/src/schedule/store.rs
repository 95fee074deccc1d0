//! Schedules as stored: one hash each (rule, task spec, firing state), the
//! due set, and each tenant's index, all under the `{s}` hash tag so every
//! change is one script.
//!
//! Hash fields: `tenant`, `cron`, `timezone`, `overlap`, `task` (the spec as
//! JSON), `paused` (`1` or `0`), `created_at`, `updated_at`, `next_due` (epoch
//! ms, empty while paused), `pending` (a due time claimed and not yet turned
//! into a task), `last_due` and `last_task` (the last run), `skipped` and
//! `last_skipped_due` (runs left out by `overlap: skip`).

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::{AsyncCommands, Script};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::CronRule;
use crate::error::QueueError;
use crate::page::{lex_page, Order, Page};
use crate::queue::Queue;
use crate::redis_lua;
use flotilla_types::clock;
use flotilla_types::ids::{ScheduleId, TaskId, TenantId};
use flotilla_types::task::{Pipeline, TaskSpec};
use flotilla_types::ValidationError;

/// What to do when a schedule comes due while its previous task still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Overlap {
    /// Leave this run out.
    #[default]
    Skip,
    /// Start another task anyway.
    Allow,
}

impl Overlap {
    pub fn as_str(self) -> &'static str {
        match self {
            Overlap::Skip => "skip",
            Overlap::Allow => "allow",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [Overlap::Skip, Overlap::Allow].into_iter().find(|o| o.as_str() == text)
    }
}

fn utc() -> String {
    "UTC".to_owned()
}

/// A schedule as a user creates it.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewSchedule {
    /// Five fields: minute hour day-of-month month day-of-week.
    pub cron: String,
    /// An IANA time zone; default `UTC`.
    #[serde(default = "utc")]
    pub timezone: String,
    /// The task each run enqueues.
    #[serde(deserialize_with = "flotilla_types::json_object::required")]
    pub task: TaskSpec,
    #[serde(default)]
    pub overlap: Overlap,
    #[serde(default)]
    pub paused: bool,
}

/// Changes to a schedule; absent fields stay as they are.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SchedulePatch {
    pub paused: Option<bool>,
    pub cron: Option<String>,
    pub timezone: Option<String>,
    pub overlap: Option<Overlap>,
}

/// A schedule's checked settings.
#[derive(Debug, Clone)]
pub struct Settings {
    rule: CronRule,
    cron: String,
    overlap: Overlap,
    paused: bool,
}

impl NewSchedule {
    /// Checks the rule and the task (given the configured default pipeline).
    pub fn check(self, pipeline: Pipeline) -> Result<(Settings, TaskSpec), ValidationError> {
        let rule = CronRule::parse(&self.cron, &self.timezone)?;
        let task = self.task.with_default_pipeline(pipeline);
        if task.idempotency_key.is_some() {
            return Err(ValidationError::at("task.idempotency_key", "a schedule gives each run its own idempotency key"));
        }
        if task.not_before.is_some() {
            return Err(ValidationError::at("task.not_before", "a schedule decides when its tasks start"));
        }
        task.validate().map_err(|e| e.under("task"))?;
        Ok((Settings { rule, cron: self.cron.trim().to_owned(), overlap: self.overlap, paused: self.paused }, task))
    }
}

impl SchedulePatch {
    /// The settings of `current` with this patch applied, checked.
    pub fn check(&self, current: &Schedule) -> Result<Settings, ValidationError> {
        let cron = self.cron.as_deref().unwrap_or(&current.cron);
        let timezone = self.timezone.as_deref().unwrap_or(&current.timezone);
        let rule = CronRule::parse(cron, timezone)?;
        Ok(Settings {
            rule,
            cron: cron.trim().to_owned(),
            overlap: self.overlap.unwrap_or(current.overlap),
            paused: self.paused.unwrap_or(current.paused),
        })
    }
}

/// The last task a schedule made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct LastRun {
    /// The due time it was made for, RFC 3339.
    pub due_at: String,
    /// `null` when the run could not make a task.
    pub task_id: Option<TaskId>,
}

/// A schedule and its state.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Schedule {
    pub id: ScheduleId,
    #[serde(skip)]
    pub tenant: TenantId,
    pub cron: String,
    pub timezone: String,
    pub overlap: Overlap,
    pub paused: bool,
    pub task: TaskSpec,
    /// RFC 3339; `null` while paused.
    pub next_run_at: Option<String>,
    pub last_run: Option<LastRun>,
    /// Runs left out because the previous task was still active.
    pub skipped_runs: u64,
    pub created_at: String,
    pub updated_at: String,
    #[serde(skip)]
    pub next_due_ms: Option<i64>,
    /// A due time claimed by a scheduler that has not yet recorded its task.
    #[serde(skip)]
    pub pending_ms: Option<i64>,
    #[serde(skip)]
    pub last_task: Option<TaskId>,
}

impl Schedule {
    /// Reads a schedule hash; `None` when it is empty (no such schedule).
    pub(super) fn from_hash(id: &ScheduleId, h: &HashMap<String, String>) -> Result<Option<Self>, QueueError> {
        if h.is_empty() {
            return Ok(None);
        }
        let corrupt = |what: &str| QueueError::Corrupt(format!("schedule {id}: {what}"));
        let text = |field: &str| h.get(field).map(String::as_str).unwrap_or("");
        let ms = |field: &str| h.get(field).and_then(|v| v.parse::<i64>().ok());
        let task: TaskSpec = serde_json::from_str(text("task")).map_err(|e| corrupt(&format!("task: {e}")))?;
        let last_task = Some(text("last_task")).filter(|t| !t.is_empty()).and_then(|t| TaskId::parse(t).ok());
        let last_run = ms("last_due").map(|due| LastRun { due_at: clock::rfc3339(due), task_id: last_task.clone() });
        let paused = text("paused") == "1";
        let next_due_ms = ms("next_due").filter(|_| !paused);
        Ok(Some(Self {
            id: id.clone(),
            tenant: TenantId::parse(text("tenant")).map_err(|_| corrupt("tenant"))?,
            cron: text("cron").to_owned(),
            timezone: text("timezone").to_owned(),
            overlap: Overlap::parse(text("overlap")).ok_or_else(|| corrupt("overlap"))?,
            paused,
            task,
            next_run_at: next_due_ms.map(clock::rfc3339),
            last_run,
            skipped_runs: ms("skipped").and_then(|n| u64::try_from(n).ok()).unwrap_or(0),
            created_at: ms("created_at").map(clock::rfc3339).unwrap_or_default(),
            updated_at: ms("updated_at").map(clock::rfc3339).unwrap_or_default(),
            next_due_ms,
            pending_ms: ms("pending"),
            last_task,
        }))
    }

    /// The rule as stored.
    pub(super) fn rule(&self) -> Result<CronRule, QueueError> {
        CronRule::parse(&self.cron, &self.timezone).map_err(|e| QueueError::Corrupt(format!("schedule {}: {e}", self.id)))
    }
}

/// Creates a schedule. `KEYS`: hash, due set, tenant index. `ARGV[1]` id,
/// `ARGV[2]` next due ms (empty while paused), then field/value pairs.
pub(crate) static CREATE: LazyLock<Script> = LazyLock::new(|| redis_lua::script(&[include_str!("lua/create.lua")], &[]));

/// Changes a tenant's schedule. `KEYS`: hash, due set. `ARGV[1]` id,
/// `ARGV[2]` tenant, `ARGV[3]` next due ms (empty while paused), then
/// field/value pairs. While a run is pending the due set keeps its retry
/// time; recording the run puts the new due time there.
/// Returns 0 when there is no such schedule for the tenant.
pub(crate) static UPDATE: LazyLock<Script> = LazyLock::new(|| redis_lua::script(&[include_str!("lua/update.lua")], &[]));

/// Deletes a tenant's schedule. `KEYS`: hash, due set, tenant index;
/// `ARGV[1]` id, `ARGV[2]` tenant. Returns 0 when there is none.
pub(crate) static DELETE: LazyLock<Script> = LazyLock::new(|| redis_lua::script(&[include_str!("lua/delete.lua")], &[]));

/// The schedules of one queue.
#[derive(Debug, Clone, Copy)]
pub struct Schedules<'a> {
    pub(super) queue: &'a Queue,
}

impl Queue {
    /// This queue's schedules.
    pub fn schedules(&self) -> Schedules<'_> {
        Schedules { queue: self }
    }
}

impl Schedules<'_> {
    /// Stores a new schedule, due first at the first time after `now_ms`.
    pub async fn create(
        &self,
        tenant: &TenantId,
        settings: Settings,
        task: &TaskSpec,
        now_ms: i64,
    ) -> Result<Schedule, QueueError> {
        let id = ScheduleId::generate();
        let keys = self.queue.keys();
        let next_due = due_after(&settings, now_ms);
        let task_json = serde_json::to_string(task).map_err(|e| QueueError::Corrupt(e.to_string()))?;
        let mut inv = CREATE.prepare_invoke();
        inv.key(keys.schedule(&id)).key(keys.schedules_due()).key(keys.tenant_schedules(tenant));
        inv.arg(id.as_str()).arg(next_due.map(|d| d.to_string()).unwrap_or_default());
        inv.arg("tenant").arg(tenant.as_str()).arg("task").arg(task_json).arg("created_at").arg(now_ms);
        add_settings(&mut inv, &settings, next_due, now_ms);
        let mut conn = self.queue.redis().shared();
        let _: i64 = inv.invoke_async(&mut conn).await?;
        self.get(tenant, &id).await?.ok_or_else(|| QueueError::Corrupt(format!("schedule {id} vanished")))
    }

    /// A tenant's schedule, or `None` if it does not exist or is another tenant's.
    pub async fn get(&self, tenant: &TenantId, id: &ScheduleId) -> Result<Option<Schedule>, QueueError> {
        Ok(self.load(id).await?.filter(|s| &s.tenant == tenant))
    }

    /// A schedule of any tenant.
    pub(super) async fn load(&self, id: &ScheduleId) -> Result<Option<Schedule>, QueueError> {
        let mut conn = self.queue.redis().shared();
        let hash: HashMap<String, String> = conn.hgetall(self.queue.keys().schedule(id)).await?;
        Schedule::from_hash(id, &hash)
    }

    /// A page of a tenant's schedules, newest first, after `cursor` (a
    /// schedule id).
    pub async fn list(&self, tenant: &TenantId, limit: usize, cursor: Option<&ScheduleId>) -> Result<Page<Schedule>, QueueError> {
        let keys = self.queue.keys();
        let index = keys.tenant_schedules(tenant);
        let page = lex_page(self.queue.redis(), &index, limit, cursor.map(ScheduleId::as_str), Order::Newest).await?;
        let ids: Vec<ScheduleId> = page.items.iter().filter_map(|i| ScheduleId::parse(i).ok()).collect();
        let reads = ids.iter().map(|id| redis::Cmd::hgetall(keys.schedule(id))).collect();
        let hashes: Vec<HashMap<String, String>> = self.queue.redis().query_many(reads).await?;
        let mut schedules = Vec::with_capacity(ids.len());
        for (id, hash) in ids.iter().zip(hashes) {
            if let Some(schedule) = Schedule::from_hash(id, &hash)?.filter(|s| &s.tenant == tenant) {
                schedules.push(schedule);
            }
        }
        Ok(Page { items: schedules, next_cursor: page.next_cursor })
    }

    /// Applies checked settings to a schedule. A new rule, a new time zone or
    /// a resume counts from `now_ms`: runs missed while paused are not made
    /// up. Returns `None` when the schedule is gone.
    pub async fn update(&self, current: &Schedule, settings: Settings, now_ms: i64) -> Result<Option<Schedule>, QueueError> {
        let keys = self.queue.keys();
        let same_rule = settings.cron == current.cron && settings.rule.zone_name() == current.timezone;
        let next_due = match current.next_due_ms {
            Some(due) if same_rule && !settings.paused => Some(due),
            _ => due_after(&settings, now_ms),
        };
        let mut inv = UPDATE.prepare_invoke();
        inv.key(keys.schedule(&current.id)).key(keys.schedules_due());
        inv.arg(current.id.as_str()).arg(current.tenant.as_str()).arg(next_due.map(|d| d.to_string()).unwrap_or_default());
        add_settings(&mut inv, &settings, next_due, now_ms);
        let mut conn = self.queue.redis().shared();
        let changed: i64 = inv.invoke_async(&mut conn).await?;
        if changed == 0 {
            return Ok(None);
        }
        self.get(&current.tenant, &current.id).await
    }

    /// Deletes a tenant's schedule; tasks it made stay. Returns whether it existed.
    pub async fn delete(&self, tenant: &TenantId, id: &ScheduleId) -> Result<bool, QueueError> {
        let keys = self.queue.keys();
        let mut inv = DELETE.prepare_invoke();
        inv.key(keys.schedule(id)).key(keys.schedules_due()).key(keys.tenant_schedules(tenant));
        inv.arg(id.as_str()).arg(tenant.as_str());
        let mut conn = self.queue.redis().shared();
        let deleted: i64 = inv.invoke_async(&mut conn).await?;
        Ok(deleted == 1)
    }
}

/// The next due time under `settings` after `now_ms`; `None` while paused
/// or for a pattern that never matches again.
fn due_after(settings: &Settings, now_ms: i64) -> Option<i64> {
    if settings.paused {
        return None;
    }
    settings.rule.next_after(now_ms)
}

fn add_settings(inv: &mut redis::ScriptInvocation<'_>, settings: &Settings, next_due: Option<i64>, now_ms: i64) {
    inv.arg("cron").arg(&settings.cron);
    inv.arg("timezone").arg(settings.rule.zone_name());
    inv.arg("overlap").arg(settings.overlap.as_str());
    inv.arg("paused").arg(if settings.paused { "1" } else { "0" });
    inv.arg("next_due").arg(next_due.map(|d| d.to_string()).unwrap_or_default());
    inv.arg("updated_at").arg(now_ms);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_schedule(json: serde_json::Value) -> Result<(Settings, TaskSpec), ValidationError> {
        let schedule: NewSchedule = serde_json::from_value(json).map_err(|e| ValidationError::new(e.to_string()))?;
        schedule.check(Pipeline::Scripted)
    }

    #[test]
    fn a_schedule_defaults_to_utc_and_skipping_overlaps() {
        let (settings, task) =
            new_schedule(serde_json::json!({"cron": "*/5 * * * *", "task": {"prompt": "x", "pipeline": "openai-cua"}}))
                .expect("valid");
        assert_eq!(settings.rule.zone_name(), "UTC");
        assert_eq!(settings.overlap, Overlap::Skip);
        assert!(!settings.paused);
        assert_eq!(task.pipeline, Some(Pipeline::OpenaiCua));
    }

    #[test]
    fn the_task_is_checked_and_errors_name_it() {
        let err = new_schedule(serde_json::json!({"cron": "* * * * *", "task": {"prompt": ""}})).expect_err("refused");
        assert_eq!(err.field.as_deref(), Some("task.prompt"));
        let err = new_schedule(serde_json::json!({"cron": "* * * * *", "task": {"prompt": "x", "idempotency_key": "k"}}))
            .expect_err("refused");
        assert_eq!(err.field.as_deref(), Some("task.idempotency_key"));
        let err = new_schedule(serde_json::json!({"cron": "nope", "task": {"prompt": "x"}})).expect_err("refused");
        assert_eq!(err.field.as_deref(), Some("cron"));
    }

    #[test]
    fn a_stored_hash_reads_back() {
        let id = ScheduleId::generate();
        let task = TaskId::generate();
        let hash: HashMap<String, String> = [
            ("tenant", "acme"),
            ("cron", "0 9 * * *"),
            ("timezone", "Europe/Berlin"),
            ("overlap", "allow"),
            ("paused", "0"),
            ("task", r#"{"prompt":"x"}"#),
            ("next_due", "1782889200000"),
            ("last_due", "1782802800000"),
            ("last_task", task.as_str()),
            ("created_at", "1"),
            ("updated_at", "2"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let schedule = Schedule::from_hash(&id, &hash).expect("reads").expect("exists");
        assert_eq!(schedule.next_run_at.as_deref(), Some("2026-07-01T07:00:00Z"));
        assert_eq!(schedule.last_run.as_ref().and_then(|r| r.task_id.clone()), Some(task));
        assert_eq!(schedule.overlap, Overlap::Allow);
        assert!(schedule.rule().is_ok());
    }
}
