//! Schedules against a real redis-server: several scheduler replicas fire
//! on one Redis with a clock the test drives, and each due time yields
//! exactly one task; `overlap: skip`, pausing, time zones, daylight-saving
//! days, an outage and a replica that died mid-run; then the HTTP
//! endpoints, and workers firing on their own clock.

use std::time::{Duration, Instant};

use flotilla_queue::keys::Keys;
use flotilla_tests::schedule_scenarios::{self, at, create, due_times, fire_all, replicas, runs, task, view, MINUTE};
use flotilla_tests::tasks::tenant;
use flotilla_tests::{spawn_api, test_config, unique_prefix, ApiClient, InProcessWorker, RedisServer};
use flotilla_types::clock;
use flotilla_types::task::TaskStatus;
use flotilla_worker::Registry;
use serde_json::{json, Value};

#[tokio::test(flavor = "multi_thread")]
async fn each_due_time_yields_exactly_one_task_however_many_replicas_race() {
    schedule_scenarios::each_due_time_yields_exactly_one_task_however_many_replicas_race(RedisServer::start()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn overlap_skip_leaves_out_runs_while_the_previous_task_is_active() {
    schedule_scenarios::overlap_skip_leaves_out_runs_while_the_previous_task_is_active(RedisServer::start()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_schedule_fires_nothing_and_a_resumed_one_counts_from_now() {
    schedule_scenarios::a_paused_schedule_fires_nothing_and_a_resumed_one_counts_from_now(RedisServer::start()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_time_zone_is_honoured_in_summer_and_in_winter() {
    schedule_scenarios::a_time_zone_is_honoured_in_summer_and_in_winter(RedisServer::start()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn daylight_saving_days_fire_a_daily_run_once() {
    schedule_scenarios::daylight_saving_days_fire_a_daily_run_once(RedisServer::start()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn after_an_outage_only_the_latest_missed_run_fires() {
    schedule_scenarios::after_an_outage_only_the_latest_missed_run_fires(RedisServer::start()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_claimed_by_a_replica_that_died_is_finished_by_another_with_the_same_task() {
    let redis = RedisServer::start();
    let (config, qs) = replicas(&redis, 3).await;
    let keys = Keys::new(config.key_prefix.clone());
    let schedule =
        create(&qs[0], json!({"cron": "* * * * *", "overlap": "allow", "task": task()}), at("2026-05-01T10:00:30Z")).await;
    let due = at("2026-05-01T10:01:00Z");
    // The dead replica had claimed 10:01 and even made its task, but never recorded it.
    let mut spec = schedule.task.clone();
    spec.idempotency_key = Some(format!("schedule:{}:{due}", schedule.id));
    let made = qs[0].submitter().submit(&tenant(), spec).await.expect("submit").id;
    let retry_at = due + 10_000;
    let mut conn = redis.connection();
    let () = redis::pipe()
        .cmd("HSET")
        .arg(keys.schedule(&schedule.id))
        .arg("pending")
        .arg(due)
        .arg("next_due")
        .arg(due + MINUTE)
        .ignore()
        .cmd("ZADD")
        .arg(keys.schedules_due())
        .arg(retry_at)
        .arg(schedule.id.as_str())
        .ignore()
        .query(&mut conn)
        .expect("write the dead replica's claim");

    assert_eq!(fire_all(&qs, due + 5_000).await.0, 0, "not before the retry time");
    assert_eq!(fire_all(&qs, retry_at).await.0, 1, "then another replica finishes it");
    let after = view(&qs[0], &schedule.id).await;
    assert_eq!(after.last_run.and_then(|r| r.task_id), Some(made.clone()), "with the task already made");
    assert_eq!(after.next_run_at.as_deref(), Some("2026-05-01T10:02:00Z"));
    assert_eq!(fire_all(&qs, at("2026-05-01T10:02:00Z")).await.0, 1);
    let made_runs = runs(&qs[0], &schedule.id).await;
    assert_eq!(due_times(&made_runs), ["2026-05-01T10:01:00Z", "2026-05-01T10:02:00Z"]);
    assert_eq!(made_runs[&due], [made]);
}

#[tokio::test(flavor = "multi_thread")]
async fn schedules_over_http_are_created_listed_changed_and_deleted_per_tenant() {
    let redis = RedisServer::start();
    let config = test_config(&redis, &unique_prefix(), &[]);
    let api = spawn_api(config).await;
    let acme = ApiClient::new(&api, flotilla_tests::api_key());
    let globex = ApiClient::new(&api, flotilla_tests::fleet::globex_key());
    let deadline = Instant::now() + Duration::from_secs(10);
    while acme.get("/readyz").await.0 != 200 {
        assert!(Instant::now() < deadline, "the api never became ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let (status, created) =
        acme.post("/v1/schedules", &json!({"cron": "*/5 * * * *", "timezone": "UTC", "task": task(), "overlap": "skip"})).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("id").to_owned();
    assert!(id.starts_with("sch_"));
    let next = clock::parse_rfc3339(created["next_run_at"].as_str().expect("next_run_at")).expect("a time");
    let now = clock::now_ms();
    assert!(next > now && next <= now + 5 * MINUTE && next % (5 * MINUTE) == 0, "{created}");
    assert_eq!((created["paused"].as_bool(), created["overlap"].as_str()), (Some(false), Some("skip")));

    let (_, listed) = acme.get("/v1/schedules").await;
    assert_eq!(listed["schedules"].as_array().map(Vec::len), Some(1));
    assert_eq!(listed["schedules"][0]["id"], json!(id));
    let (_, none) = globex.get("/v1/schedules").await;
    assert_eq!(none["schedules"], json!([]));
    let path = format!("/v1/schedules/{id}");
    for (status, body) in
        [globex.get(&path).await, globex.patch(&path, &json!({"paused": true})).await, globex.delete(&path).await]
    {
        assert_eq!((status, body["error"]["code"].as_str()), (404, Some("not_found")), "{body}");
    }

    let (status, paused) = acme.patch(&path, &json!({"paused": true})).await;
    assert_eq!((status, paused["paused"].as_bool(), &paused["next_run_at"]), (200, Some(true), &Value::Null), "{paused}");
    let (status, hourly) = acme.patch(&path, &json!({"paused": false, "cron": "0 * * * *", "timezone": "Asia/Kolkata"})).await;
    assert_eq!(status, 200, "{hourly}");
    let next = clock::parse_rfc3339(hourly["next_run_at"].as_str().expect("next_run_at")).expect("a time");
    assert_eq!(next % (30 * MINUTE), 0, "on the hour in UTC+05:30: {hourly}");
    assert_eq!(next % (60 * MINUTE), 30 * MINUTE, "which is half past in UTC: {hourly}");

    let bad = [
        (acme.post("/v1/schedules", &json!({"cron": "*/5 * * *", "task": task()})).await, "cron"),
        (acme.post("/v1/schedules", &json!({"cron": "* * * * *", "timezone": "Nowhere/City", "task": task()})).await, "timezone"),
        (acme.post("/v1/schedules", &json!({"cron": "* * * * *", "task": {"prompt": ""}})).await, "task.prompt"),
        (acme.post("/v1/schedules", &json!({"cron": "* * * * *", "task": task(), "overlap": "queue"})).await, "overlap"),
        (acme.post("/v1/schedules", &json!({"cron": "* * * * *", "task": task(), "colour": "red"})).await, ""),
        (acme.patch(&path, &json!({"cron": "every day"})).await, "cron"),
        (acme.patch(&path, &json!({"task": task()})).await, ""),
    ];
    for ((status, body), field) in bad {
        assert_eq!((status, body["error"]["code"].as_str()), (400, Some("invalid_request")), "{body}");
        assert!(body["error"]["field"].as_str().unwrap_or("").starts_with(field), "want {field:?}: {body}");
    }
    let (_, unchanged) = acme.get(&path).await;
    assert_eq!(unchanged["cron"], "0 * * * *", "a refused change changes nothing");

    let (status, _) = acme.delete(&path).await;
    assert_eq!(status, 204);
    assert_eq!(acme.get(&path).await.0, 404);
    assert_eq!(acme.delete(&path).await.0, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn workers_fire_due_schedules_on_their_own_and_run_the_task() {
    let redis = RedisServer::start();
    let (config, qs) = replicas(&redis, 1).await;
    // A yearly schedule created as if 400 days ago is due now, once: its
    // latest due time, last 1 January.
    let schedule = create(
        &qs[0],
        json!({"cron": "0 0 1 1 *", "overlap": "allow", "task": task()}),
        clock::now_ms() - 400 * 24 * 60 * MINUTE,
    )
    .await;
    let workers: Vec<InProcessWorker> = (0..3)
        .map(|i| {
            let mut config = config.clone();
            config.worker.id = format!("scheduler-{i}");
            InProcessWorker::start(config, Registry::standard())
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    let task = loop {
        let now = view(&qs[0], &schedule.id).await;
        if let Some(task) = now.last_run.and_then(|r| r.task_id) {
            let record = qs[0].reader().get(&tenant(), &task).await.expect("get").expect("task");
            if record.status == TaskStatus::Succeeded {
                break task;
            }
        }
        assert!(Instant::now() < deadline, "no worker fired the schedule and ran its task");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // The sleep is what is tested: for 1.5 s more of the three workers'
    // ticks, none fires the schedule again.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let made = runs(&qs[0], &schedule.id).await;
    assert_eq!(made.values().flatten().collect::<Vec<_>>(), [&task], "three workers, one task");
    let due = *made.keys().next().expect("a due time");
    assert!(clock::rfc3339(due).ends_with("-01-01T00:00:00Z"), "the latest 1 January: {}", clock::rfc3339(due));
    for worker in workers {
        worker.stop().await;
    }
}
