//! Schedule scenarios over any Redis (one server or a cluster): several
//! scheduler replicas fire on one Redis with a clock the test drives, and
//! each due time yields exactly one task; `overlap: skip`, pausing, time
//! zones, daylight-saving days and an outage.

use std::collections::BTreeMap;

use flotilla_config::Config;
use flotilla_queue::queue::{ListFilter, Queue};
use flotilla_queue::schedule::{NewSchedule, Schedule, SchedulePatch};
use flotilla_types::task::Pipeline;
use flotilla_types::{clock, ScheduleId, TaskId};
use serde_json::{json, Value};

use crate::redis_server::RedisUnderTest;
use crate::tasks::{queue, tenant};
use crate::{test_config, unique_prefix};

pub const MINUTE: i64 = 60_000;

pub fn at(text: &str) -> i64 {
    clock::parse_rfc3339(text).unwrap_or_else(|| panic!("{text} is not a time"))
}

pub fn task() -> Value {
    json!({"prompt": "scheduled", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 1}]})
}

/// A config under a fresh prefix on `redis`, and `n` scheduler replicas,
/// each with connections of its own.
pub async fn replicas(redis: &dyn RedisUnderTest, n: usize) -> (Config, Vec<Queue>) {
    let config = test_config(redis, &unique_prefix(), &[]);
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        all.push(queue(&config).await);
    }
    (config, all)
}

pub async fn create(q: &Queue, body: Value, now: i64) -> Schedule {
    let new: NewSchedule = serde_json::from_value(body).expect("a schedule");
    let (settings, task) = new.check(Pipeline::Scripted).expect("valid");
    q.schedules().create(&tenant(), settings, &task, now).await.expect("create")
}

pub async fn view(q: &Queue, id: &ScheduleId) -> Schedule {
    q.schedules().get(&tenant(), id).await.expect("get").expect("exists")
}

pub async fn patch(q: &Queue, id: &ScheduleId, change: Value, now: i64) -> Schedule {
    let change: SchedulePatch = serde_json::from_value(change).expect("a patch");
    let current = view(q, id).await;
    let settings = change.check(&current).expect("valid");
    q.schedules().update(&current, settings, now).await.expect("update").expect("exists")
}

/// Every replica fires at once, each clock a few ms off the others', as
/// real clocks are. Returns how many runs were recorded and skipped.
pub async fn fire_all(replicas: &[Queue], now: i64) -> (usize, usize) {
    let passes = replicas.iter().enumerate().map(|(i, q)| async move { q.schedules().fire_due(now + i as i64 * 3).await });
    let mut fired = 0;
    let mut skipped = 0;
    for report in futures::future::join_all(passes).await {
        let report = report.expect("fire");
        assert_eq!(report.failed, 0, "{report:?}");
        fired += report.fired.len();
        skipped += report.skipped.len();
    }
    (fired, skipped)
}

/// Fires every `step_ms` from `from` to `to`; returns the runs recorded.
pub async fn run_clock(replicas: &[Queue], from: i64, to: i64, step_ms: i64) -> usize {
    let mut fired = 0;
    let mut now = from;
    while now <= to {
        fired += fire_all(replicas, now).await.0;
        now += step_ms;
    }
    fired
}

/// The tasks a schedule made, by the due time in their idempotency key.
pub async fn runs(q: &Queue, id: &ScheduleId) -> BTreeMap<i64, Vec<TaskId>> {
    let prefix = format!("schedule:{id}:");
    let mut found: BTreeMap<i64, Vec<TaskId>> = BTreeMap::new();
    let mut cursor = None;
    loop {
        let filter = ListFilter { limit: 500, cursor, ..Default::default() };
        let (page, next) = q.reader().list(&tenant(), &filter).await.expect("list");
        for task in page {
            if let Some(due) = task.spec.idempotency_key.as_deref().and_then(|k| k.strip_prefix(&prefix)) {
                found.entry(due.parse().expect("due ms")).or_default().push(task.id);
            }
        }
        match next {
            Some(next) => cursor = Some(next),
            None => return found,
        }
    }
}

/// The due times of `runs`, as RFC 3339, each checked to have one task.
pub fn due_times(runs: &BTreeMap<i64, Vec<TaskId>>) -> Vec<String> {
    for (due, tasks) in runs {
        assert_eq!(tasks.len(), 1, "due time {} made {} tasks", clock::rfc3339(*due), tasks.len());
    }
    runs.keys().map(|due| clock::rfc3339(*due)).collect()
}

pub async fn each_due_time_yields_exactly_one_task_however_many_replicas_race(redis: impl RedisUnderTest) {
    let (_config, qs) = replicas(&redis, 6).await;
    let schedule =
        create(&qs[0], json!({"cron": "*/5 * * * *", "overlap": "allow", "task": task()}), at("2026-05-01T10:00:30Z")).await;
    assert_eq!(schedule.next_run_at.as_deref(), Some("2026-05-01T10:05:00Z"));
    let fired = run_clock(&qs, at("2026-05-01T10:00:30Z"), at("2026-05-01T11:00:10Z"), 20_000).await;
    let made = runs(&qs[0], &schedule.id).await;
    let want: Vec<String> = (1..=12).map(|k| clock::rfc3339(at("2026-05-01T10:00:00Z") + k * 5 * MINUTE)).collect();
    assert_eq!(due_times(&made), want);
    assert_eq!(fired, 12, "each run was recorded by exactly one replica");
    let after = view(&qs[0], &schedule.id).await;
    assert_eq!(after.next_run_at.as_deref(), Some("2026-05-01T11:05:00Z"));
    let last = after.last_run.expect("a last run");
    assert_eq!(
        (last.due_at.as_str(), last.task_id.as_ref()),
        ("2026-05-01T11:00:00Z", made.values().last().and_then(|t| t.first()))
    );
}

pub async fn overlap_skip_leaves_out_runs_while_the_previous_task_is_active(redis: impl RedisUnderTest) {
    let (_config, qs) = replicas(&redis, 3).await;
    let schedule = create(&qs[0], json!({"cron": "* * * * *", "task": task()}), at("2026-05-01T10:00:30Z")).await;
    assert_eq!(fire_all(&qs, at("2026-05-01T10:01:00Z")).await, (1, 0));
    let first = runs(&qs[0], &schedule.id).await.values().next().and_then(|t| t.first().cloned()).expect("first run");

    assert_eq!(fire_all(&qs, at("2026-05-01T10:02:00Z")).await, (0, 1), "skipped: the first task is still queued");
    let skipped = view(&qs[0], &schedule.id).await;
    assert_eq!(skipped.skipped_runs, 1);
    assert_eq!(skipped.next_run_at.as_deref(), Some("2026-05-01T10:03:00Z"));

    qs[0].submitter().cancel(&tenant(), &first).await.expect("cancel");
    assert_eq!(fire_all(&qs, at("2026-05-01T10:03:00Z")).await, (1, 0), "the previous task ended, so this run goes ahead");
    assert_eq!(due_times(&runs(&qs[0], &schedule.id).await), ["2026-05-01T10:01:00Z", "2026-05-01T10:03:00Z"]);

    let allowing =
        create(&qs[0], json!({"cron": "* * * * *", "overlap": "allow", "task": task()}), at("2026-05-01T10:03:30Z")).await;
    run_clock(&qs, at("2026-05-01T10:04:00Z"), at("2026-05-01T10:06:00Z"), MINUTE).await;
    assert_eq!(runs(&qs[0], &allowing.id).await.len(), 3, "overlap: allow runs every time");
}

pub async fn a_paused_schedule_fires_nothing_and_a_resumed_one_counts_from_now(redis: impl RedisUnderTest) {
    let (_config, qs) = replicas(&redis, 3).await;
    let created_paused = create(
        &qs[0],
        json!({"cron": "* * * * *", "overlap": "allow", "paused": true, "task": task()}),
        at("2026-05-01T10:00:30Z"),
    )
    .await;
    assert_eq!(created_paused.next_run_at, None);
    let schedule =
        create(&qs[0], json!({"cron": "* * * * *", "overlap": "allow", "task": task()}), at("2026-05-01T10:00:30Z")).await;
    let paused = patch(&qs[0], &schedule.id, json!({"paused": true}), at("2026-05-01T10:00:40Z")).await;
    assert!(paused.paused && paused.next_run_at.is_none());
    assert_eq!(run_clock(&qs, at("2026-05-01T10:01:00Z"), at("2026-05-01T10:10:00Z"), MINUTE).await, 0);

    let resumed = patch(&qs[0], &schedule.id, json!({"paused": false}), at("2026-05-01T10:10:30Z")).await;
    assert_eq!(resumed.next_run_at.as_deref(), Some("2026-05-01T10:11:00Z"), "runs missed while paused are not made up");
    assert_eq!(fire_all(&qs, at("2026-05-01T10:11:00Z")).await.0, 1);
    patch(&qs[0], &schedule.id, json!({"paused": true}), at("2026-05-01T10:11:30Z")).await;
    run_clock(&qs, at("2026-05-01T10:12:00Z"), at("2026-05-01T10:20:00Z"), MINUTE).await;
    assert_eq!(due_times(&runs(&qs[0], &schedule.id).await), ["2026-05-01T10:11:00Z"]);
    assert!(runs(&qs[0], &created_paused.id).await.is_empty());
}

pub async fn a_time_zone_is_honoured_in_summer_and_in_winter(redis: impl RedisUnderTest) {
    let (_config, qs) = replicas(&redis, 3).await;
    let body = json!({"cron": "0 9 * * *", "timezone": "Europe/Berlin", "overlap": "allow", "task": task()});
    let summer = create(&qs[0], body.clone(), at("2026-06-30T12:00:00Z")).await;
    assert_eq!(summer.next_run_at.as_deref(), Some("2026-07-01T07:00:00Z"), "09:00 CEST is 07:00 UTC");
    run_clock(&qs, at("2026-06-30T12:00:00Z"), at("2026-07-02T12:00:00Z"), 10 * MINUTE).await;
    assert_eq!(due_times(&runs(&qs[0], &summer.id).await), ["2026-07-01T07:00:00Z", "2026-07-02T07:00:00Z"]);
    assert!(qs[0].schedules().delete(&tenant(), &summer.id).await.expect("delete"));

    let winter = create(&qs[0], body, at("2027-01-14T12:00:00Z")).await;
    assert_eq!(winter.next_run_at.as_deref(), Some("2027-01-15T08:00:00Z"), "09:00 CET is 08:00 UTC");
    run_clock(&qs, at("2027-01-14T12:00:00Z"), at("2027-01-16T12:00:00Z"), 10 * MINUTE).await;
    assert_eq!(due_times(&runs(&qs[0], &winter.id).await), ["2027-01-15T08:00:00Z", "2027-01-16T08:00:00Z"]);
}

pub async fn daylight_saving_days_fire_a_daily_run_once(redis: impl RedisUnderTest) {
    let (_config, qs) = replicas(&redis, 3).await;
    let body = json!({"cron": "30 2 * * *", "timezone": "Europe/Berlin", "overlap": "allow", "task": task()});
    // 2026-03-29: 02:00 CET jumps to 03:00 CEST, so 02:30 does not exist.
    let spring = create(&qs[0], body.clone(), at("2026-03-28T12:00:00Z")).await;
    run_clock(&qs, at("2026-03-28T12:00:00Z"), at("2026-03-30T06:00:00Z"), 5 * MINUTE).await;
    assert_eq!(
        due_times(&runs(&qs[0], &spring.id).await),
        ["2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"],
        "once at 03:00 CEST, right after the gap, then 02:30 CEST"
    );
    assert!(qs[0].schedules().delete(&tenant(), &spring.id).await.expect("delete"));

    // 2026-10-25: 03:00 CEST falls back to 02:00 CET, so 02:30 happens twice.
    let autumn = create(&qs[0], body, at("2026-10-24T12:00:00Z")).await;
    let every_half_hour = create(
        &qs[0],
        json!({"cron": "*/30 * * * *", "timezone": "Europe/Berlin", "overlap": "allow", "task": task()}),
        at("2026-10-24T21:50:00Z"),
    )
    .await;
    run_clock(&qs, at("2026-10-24T12:00:00Z"), at("2026-10-25T03:00:00Z"), 5 * MINUTE).await;
    qs[0].schedules().delete(&tenant(), &every_half_hour.id).await.expect("delete");
    run_clock(&qs, at("2026-10-25T03:05:00Z"), at("2026-10-26T06:00:00Z"), 5 * MINUTE).await;
    assert_eq!(
        due_times(&runs(&qs[0], &autumn.id).await),
        ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"],
        "once at the first 02:30 (CEST), not again at 02:30 CET"
    );
    let half_hours: Vec<String> = (0..=10).map(|k| clock::rfc3339(at("2026-10-24T22:00:00Z") + k * 30 * MINUTE)).collect();
    assert_eq!(due_times(&runs(&qs[0], &every_half_hour.id).await), half_hours, "an interval keeps its pace through both 02:00s");
}

pub async fn after_an_outage_only_the_latest_missed_run_fires(redis: impl RedisUnderTest) {
    let (_config, qs) = replicas(&redis, 4).await;
    let schedule =
        create(&qs[0], json!({"cron": "*/5 * * * *", "overlap": "allow", "task": task()}), at("2026-05-01T10:00:30Z")).await;
    assert_eq!(fire_all(&qs, at("2026-05-01T10:05:00Z")).await.0, 1);
    // Ten due times (10:10 … 10:55) pass with nobody firing.
    assert_eq!(fire_all(&qs, at("2026-05-01T10:57:00Z")).await.0, 1, "one run for the whole outage");
    assert_eq!(fire_all(&qs, at("2026-05-01T10:58:00Z")).await.0, 0);
    assert_eq!(view(&qs[0], &schedule.id).await.next_run_at.as_deref(), Some("2026-05-01T11:00:00Z"));
    assert_eq!(fire_all(&qs, at("2026-05-01T11:00:00Z")).await.0, 1);
    assert_eq!(
        due_times(&runs(&qs[0], &schedule.id).await),
        ["2026-05-01T10:05:00Z", "2026-05-01T10:55:00Z", "2026-05-01T11:00:00Z"]
    );
}
