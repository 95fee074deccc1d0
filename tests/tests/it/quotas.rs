//! Per-tenant quotas at the API, against a real redis-server: `max_queued`
//! refuses a submit or a whole batch that would go past it (and enqueues
//! nothing), the submit rate is one bucket shared by two API replicas,
//! `Retry-After` and `RateLimit-*` say when to come back, a tenant past its
//! daily tokens is refused and its queued tasks wait for the next UTC day
//! (on a clock the test moves), and the other tenant is never affected.

use std::sync::Arc;
use std::time::Duration;

use flotilla_config::Config;
use flotilla_tests::desktop::{eventually, DesktopFleet, DesktopOptions};
use flotilla_tests::fakes::{openai, Reply, ScriptedServer};
use flotilla_tests::in_process::InProcessWorker;
use flotilla_tests::{config_file, spawn_api, test_config, unique_prefix, ApiClient, ApiServer, RedisServer};
use flotilla_types::task::TaskStatus;
use flotilla_types::{clock, TaskId, TenantId};
use flotilla_worker::sandbox::MemoryProvider;
use flotilla_worker::Registry;
use serde_json::{json, Value};

fn config(redis: &RedisServer, prefix: &str, tenants: &str) -> Config {
    let path = config_file(tenants);
    test_config(redis, prefix, &[("FLOTILLA_CONFIG", path.to_str().expect("utf-8 path"))])
}

async fn ready(api: &ApiServer) -> ApiClient {
    ApiClient::when_ready(api, flotilla_tests::api_key()).await
}

fn task() -> Value {
    json!({"prompt": "wait", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 1}]})
}

fn batch(n: usize) -> Value {
    json!({"tasks": vec![task(); n]})
}

/// A raw submit: status, headers and JSON body.
async fn submit(api: &ApiServer, key: &str, path: &str, body: &Value) -> (u16, reqwest::header::HeaderMap, Value) {
    let response = reqwest::Client::new().post(api.url(path)).bearer_auth(key).json(body).send().await.expect("answers");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    (status, headers, response.json().await.expect("json body"))
}

fn header(headers: &reqwest::header::HeaderMap, name: &str) -> Option<u64> {
    headers.get(name).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok())
}

/// The tenant's tasks as the API lists them.
async fn task_count(client: &ApiClient) -> usize {
    let (status, page) = client.get("/v1/tasks?limit=500").await;
    assert_eq!(status, 200, "{page}");
    page["tasks"].as_array().expect("tasks").len()
}

#[tokio::test]
async fn max_queued_refuses_a_submit_or_a_whole_batch_past_it_and_enqueues_nothing() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let config = config(&redis, &prefix, "[tenants.acme]\nmax_queued = 5\n");
    let api = spawn_api(config.clone()).await;
    let acme = ready(&api).await;
    let key = flotilla_tests::api_key();
    for _ in 0..3 {
        assert_eq!(submit(&api, key, "/v1/tasks", &task()).await.0, 202);
    }

    let (status, headers, body) = submit(&api, key, "/v1/batches", &batch(3)).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "quota_exceeded", "{body}");
    assert!(body["error"]["message"].as_str().expect("message").contains("max_queued"), "{body}");
    assert_eq!(header(&headers, "retry-after"), Some(1));
    assert_eq!(task_count(&acme).await, 3, "a refused batch enqueues none of its tasks");

    assert_eq!(submit(&api, key, "/v1/batches", &batch(2)).await.0, 202, "a batch that fits is taken whole");
    let (status, headers, body) = submit(&api, key, "/v1/tasks", &task()).await;
    assert_eq!((status, body["error"]["code"].as_str()), (429, Some("quota_exceeded")), "{body}");
    assert!(header(&headers, "retry-after").is_some());
    assert_eq!(task_count(&acme).await, 5);

    let (status, _, _) = submit(&api, flotilla_tests::globex_key(), "/v1/batches", &batch(10)).await;
    assert_eq!(status, 202, "another tenant has its own room");

    let (status, usage) = acme.get("/v1/usage").await;
    assert_eq!(status, 200, "{usage}");
    assert_eq!(usage["limits"]["max_queued"], 5);
    assert_eq!(usage["limits"]["queued"], 5);
    assert_eq!(usage["limits"]["queued_left"], 0);

    // Workers drain the queue; after Retry-After the refused submit passes.
    let retry_after = header(&headers, "retry-after").expect("Retry-After");
    let worker = InProcessWorker::start(config.clone(), Registry::standard());
    // Waiting out Retry-After is what a client is told to do: the test.
    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    let (status, _, body) = submit(&api, key, "/v1/tasks", &task()).await;
    assert_eq!(status, 202, "after Retry-After a submit passes: {body}");
    worker.stop().await;
}

#[tokio::test]
async fn two_api_replicas_share_one_submit_rate() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let tenants = "[tenants.acme]\nrate = { per_second = 0.5, burst = 3 }\n";
    let first = spawn_api(config(&redis, &prefix, tenants)).await;
    let second = spawn_api(config(&redis, &prefix, tenants)).await;
    let acme = ready(&first).await;
    ready(&second).await;
    let key = flotilla_tests::api_key();

    let mut passed = 0;
    let mut refused = None;
    for i in 0..6 {
        let api = if i % 2 == 0 { &first } else { &second };
        let (status, headers, body) = submit(api, key, "/v1/tasks", &task()).await;
        match status {
            202 => {
                passed += 1;
                assert_eq!(header(&headers, "ratelimit-limit"), Some(3), "a passing submit shows the bucket");
                assert_eq!(header(&headers, "ratelimit-remaining"), Some(3 - passed));
            }
            429 => refused = Some((headers, body)),
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(passed, 3, "two replicas give the burst once, not twice");
    let (headers, body) = refused.expect("submits past the burst are refused");
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    let retry_after = header(&headers, "retry-after").expect("Retry-After in whole seconds");
    assert!((1..=2).contains(&retry_after), "one token comes back every 2 s: {retry_after}");
    assert_eq!(header(&headers, "ratelimit-limit"), Some(3));
    assert_eq!(header(&headers, "ratelimit-remaining"), Some(0));
    assert!(header(&headers, "ratelimit-reset").is_some());
    assert_eq!(task_count(&acme).await, 3, "refused submits enqueue nothing");

    assert_eq!(submit(&first, flotilla_tests::globex_key(), "/v1/tasks", &task()).await.0, 202, "another tenant is not limited");
    // Waiting out Retry-After is what a client is told to do: the test.
    tokio::time::sleep(Duration::from_secs(retry_after)).await;
    assert_eq!(submit(&second, key, "/v1/tasks", &task()).await.0, 202, "after Retry-After a submit passes");
}

#[tokio::test]
async fn a_tenant_past_its_daily_tokens_is_refused_until_the_day_turns() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let config = config(&redis, &prefix, "[tenants.acme]\nmax_tokens_per_day = 1000\n");
    let api = spawn_api(config.clone()).await;
    let acme = ready(&api).await;
    let key = flotilla_tests::api_key();
    assert_eq!(submit(&api, key, "/v1/tasks", &task()).await.0, 202);

    // The tenant's tokens of today, as workers count them.
    let queue = flotilla_tests::tasks::queue(&config).await;
    let now = clock::now_ms();
    let day = queue.keys().usage_day(&TenantId::parse("acme").expect("tenant"), &clock::utc_day(now));
    redis.cli(&["HINCRBY", &day, "tokens", "1000"]);

    let (status, headers, body) = submit(&api, key, "/v1/batches", &batch(2)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (429, Some("quota_exceeded")), "{body}");
    let retry_after = header(&headers, "retry-after").expect("Retry-After");
    let to_midnight_s = (clock::ms_to_next_utc_day(now) as u64).div_ceil(1000);
    assert!(retry_after >= 1 && retry_after <= to_midnight_s + 1, "{retry_after} s, midnight in {to_midnight_s} s");
    assert_eq!(task_count(&acme).await, 1, "nothing enqueued");
    assert_eq!(submit(&api, flotilla_tests::globex_key(), "/v1/tasks", &task()).await.0, 202, "another tenant is unaffected");

    let (_, usage) = acme.get("/v1/usage").await;
    assert_eq!(usage["limits"]["tokens_today"], 1000);
    assert_eq!(usage["limits"]["tokens_left_today"], 0);

    // Retry-After is the time to the next UTC day: once the clock passed
    // it, the same request passes.
    config.clock.advance(clock::ms_to_next_utc_day(queue.now_ms()) - 3_000);
    let (status, headers, _) = submit(&api, key, "/v1/tasks", &task()).await;
    assert_eq!(status, 429, "moments before midnight the tenant is still past its tokens");
    assert!(header(&headers, "retry-after").is_some_and(|s| (1..=4).contains(&s)), "{headers:?}");
    config.clock.advance(i64::try_from(header(&headers, "retry-after").expect("Retry-After")).expect("seconds") * 1000);
    let (status, _, body) = submit(&api, key, "/v1/batches", &batch(2)).await;
    assert_eq!(status, 202, "after Retry-After a submit passes: {body}");
}

#[tokio::test]
async fn a_tenant_keeps_at_most_its_max_schedules() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let api = spawn_api(config(&redis, &prefix, "[tenants.acme]\nmax_schedules = 1\n")).await;
    let acme = ready(&api).await;
    let schedule = json!({"cron": "0 0 1 1 *", "task": task()});
    assert_eq!(acme.post("/v1/schedules", &schedule).await.0, 201);
    let (status, body) = acme.post("/v1/schedules", &schedule).await;
    assert_eq!((status, body["error"]["code"].as_str()), (429, Some("quota_exceeded")), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn racing_submits_through_two_replicas_never_pass_max_queued() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let first = spawn_api(config(&redis, &prefix, "[tenants.acme]\nmax_queued = 7\n")).await;
    let second = spawn_api(config(&redis, &prefix, "[tenants.acme]\nmax_queued = 7\n")).await;
    let acme = ready(&first).await;
    ready(&second).await;
    let key = flotilla_tests::api_key();
    let sends = (0..40).map(|i| {
        let (api, body) = if i % 2 == 0 { (&first, task()) } else { (&second, batch(2)) };
        let path = if i % 2 == 0 { "/v1/tasks" } else { "/v1/batches" };
        async move { (i % 2, submit(api, key, path, &body).await.0) }
    });
    let answers = futures::future::join_all(sends).await;
    let admitted: usize =
        answers.iter().filter(|(_, status)| *status == 202).map(|(kind, _)| if *kind == 0 { 1 } else { 2 }).sum();
    assert!(answers.iter().all(|(_, status)| *status == 202 || *status == 429), "{answers:?}");
    assert!((6..=7).contains(&admitted), "every room is taken and none past it: {admitted} tasks admitted");
    assert_eq!(task_count(&acme).await, admitted, "what was admitted is exactly what is queued");
}

/// A tenant whose tasks spend its `max_tokens_per_day` (against the
/// protocol-faithful OpenAI server, on in-memory sandboxes): its other
/// queued tasks stay `queued` (not failed) while another tenant's run, new
/// submits get 429 `quota_exceeded`, and once the fleet's clock passes the
/// next UTC midnight the queued tasks run and submits pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_past_its_daily_tokens_keeps_its_tasks_queued_until_the_day_turns() {
    let server = ScriptedServer::start().await;
    // 1 050 tokens a turn: the first task's two turns cross 1 500.
    server.push(openai::reply("resp_1", vec![openai::computer_call("call_1", openai::click(10, 10, "left"))]));
    server.push(openai::reply("resp_2", vec![openai::message("done")]));
    let file = config_file("[tenants.acme]\nmax_tokens_per_day = 1500\n");
    let env = vec![
        ("OPENAI_BASE_URL", format!("{}/v1", server.url())),
        ("OPENAI_API_KEY", "sk-test-openai-secret".to_owned()),
        ("FLOTILLA_CONFIG", file.to_string_lossy().into_owned()),
        ("FLOTILLA_WORKER_CONCURRENCY", "1".to_owned()),
    ];
    let provider = Arc::new(MemoryProvider::new());
    let fleet = DesktopFleet::start(DesktopOptions { env, provider: Some(provider), ..DesktopOptions::default() }).await;
    let api = spawn_api(fleet.config.clone()).await;
    let acme_api = ready(&api).await;
    let key = flotilla_tests::api_key();
    let model_task = json!({"prompt": "click then stop", "pipeline": "openai-cua", "retry": {"max_attempts": 1}});
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (status, _, body) = submit(&api, key, "/v1/tasks", &model_task).await;
        assert_eq!(status, 202, "{body}");
        ids.push(TaskId::parse(body["id"].as_str().expect("id")).expect("task id"));
    }
    let acme = TenantId::parse("acme").expect("tenant");
    let status_of = async |id: &TaskId| fleet.queue.reader().get(&acme, id).await.expect("get").expect("task").status;
    eventually("the first task ends", Duration::from_secs(30), async || status_of(&ids[0]).await.is_terminal()).await;
    assert_eq!(status_of(&ids[0]).await, TaskStatus::Succeeded);

    let (status, headers, body) = submit(&api, key, "/v1/tasks", &task()).await;
    assert_eq!((status, body["error"]["code"].as_str()), (429, Some("quota_exceeded")), "{body}");
    assert!(header(&headers, "retry-after").is_some_and(|s| s >= 1));
    let globex = TenantId::parse("globex").expect("tenant");
    let mut others = Vec::new();
    for _ in 0..3 {
        let (status, _, body) = submit(&api, flotilla_tests::globex_key(), "/v1/tasks", &task()).await;
        assert_eq!(status, 202, "{body}");
        others.push(TaskId::parse(body["id"].as_str().expect("id")).expect("task id"));
    }
    eventually("the other tenant's tasks run", Duration::from_secs(30), async || {
        let mut done = true;
        for id in &others {
            done &= fleet.queue.reader().get(&globex, id).await.expect("get").is_some_and(|r| r.status == TaskStatus::Succeeded);
        }
        done
    })
    .await;
    // The sleep is what is tested: for half a second more, they stay queued.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for id in &ids[1..] {
        assert_eq!(status_of(id).await, TaskStatus::Queued, "a task of a tenant past its tokens waits, not fails");
    }
    assert_eq!(server.received().len(), 2, "no model call while the tenant is past its tokens");

    for id in ["resp_3", "resp_4"] {
        server.push(Reply::json(openai::response(id, vec![openai::message("done")], 100, 10)));
    }
    let now = fleet.queue.now_ms();
    fleet.config.clock.advance(clock::ms_to_next_utc_day(now) + 1_000);
    eventually("the waiting tasks run on the next day", Duration::from_secs(30), async || {
        status_of(&ids[1]).await.is_terminal() && status_of(&ids[2]).await.is_terminal()
    })
    .await;
    for id in &ids[1..] {
        assert_eq!(status_of(id).await, TaskStatus::Succeeded);
    }
    assert_eq!(submit(&api, key, "/v1/tasks", &task()).await.0, 202, "submits pass on the new day");
    let (_, usage) = acme_api.get("/v1/usage").await;
    assert_eq!(usage["limits"]["tokens_today"], 220, "the new day counts afresh: {usage}");
    fleet.stop().await;
}

/// A tenant's running tasks, once it passes its `max_tokens_per_day` (one
/// model turn of a computer-use task against the protocol-faithful OpenAI
/// server crosses it, while a scripted task of the same tenant is midway
/// through its actions): each finishes the step it is on, takes no further
/// step and no further model call, and goes back to `queued` with a
/// `queued` event, its sandbox released and its attempt not counted
/// against its retries; `GET /v1/tasks/{id}` says it waits for
/// `max_tokens_per_day`. Another tenant's tasks run meanwhile. Once the
/// fleet's clock passes the next UTC midnight both run again, from the
/// start, to success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_tasks_of_a_tenant_past_its_daily_tokens_finish_their_step_and_wait_for_the_day() {
    let server = ScriptedServer::start().await;
    // 2 000 tokens in the first turn: past the tenant's 1 500 at once.
    let crossing = openai::response("resp_1", vec![openai::computer_call("call_1", openai::click(10, 10, "left"))], 1_900, 100);
    server.push(Reply::json(crossing));
    let file = config_file("[tenants.acme]\nmax_tokens_per_day = 1500\n");
    let env = vec![
        ("OPENAI_BASE_URL", format!("{}/v1", server.url())),
        ("OPENAI_API_KEY", "sk-test-openai-secret".to_owned()),
        ("FLOTILLA_CONFIG", file.to_string_lossy().into_owned()),
        ("FLOTILLA_WORKER_CONCURRENCY", "2".to_owned()),
    ];
    let provider = Arc::new(MemoryProvider::new());
    let fleet = DesktopFleet::start(DesktopOptions { env, provider: Some(provider.clone()), ..DesktopOptions::default() }).await;
    let api = spawn_api(fleet.config.clone()).await;
    let acme_api = ready(&api).await;
    let key = flotilla_tests::api_key();
    let acme = TenantId::parse("acme").expect("tenant");
    let record = async |id: &TaskId| fleet.queue.reader().get(&acme, id).await.expect("get").expect("task");

    const WAITS: u32 = 30;
    let waits = json!({"prompt": "wait a while", "pipeline": "scripted", "retry": {"max_attempts": 1},
        "actions": vec![json!({"type": "wait", "ms": 150}); WAITS as usize]});
    let (status, _, body) = submit(&api, key, "/v1/tasks", &waits).await;
    assert_eq!(status, 202, "{body}");
    let scripted = TaskId::parse(body["id"].as_str().expect("id")).expect("task id");
    eventually("the scripted task is under way", Duration::from_secs(30), async || record(&scripted).await.steps_taken >= 2)
        .await;
    let model_task = json!({"prompt": "click then stop", "pipeline": "openai-cua", "retry": {"max_attempts": 1}});
    let (status, _, body) = submit(&api, key, "/v1/tasks", &model_task).await;
    assert_eq!(status, 202, "{body}");
    let model = TaskId::parse(body["id"].as_str().expect("id")).expect("task id");

    let both_queued = async || {
        let (a, b) = (record(&model).await, record(&scripted).await);
        a.status == TaskStatus::Queued && a.attempts == 1 && b.status == TaskStatus::Queued && b.attempts == 1
    };
    eventually("both running tasks go back to waiting", Duration::from_secs(30), both_queued).await;
    let first_pass = record(&scripted).await.steps_taken;
    assert!(first_pass < WAITS, "the scripted task stopped midway ({first_pass} of {WAITS} steps)");
    for id in [&model, &scripted] {
        let events = flotilla_tests::tasks::events(&fleet.queue, id).await;
        let names: Vec<&str> = events.iter().map(|e| e.kind.name()).collect();
        assert_eq!(names.last(), Some(&"queued"), "{names:?}");
        assert!(!names.iter().any(|n| ["failed", "retrying", "succeeded"].contains(n)), "{names:?}");
        if id == &scripted {
            assert_eq!(names[names.len() - 2], "action_completed", "it finished its current step, then took no other: {names:?}");
        }
    }
    let model_events = flotilla_tests::tasks::events(&fleet.queue, &model).await;
    assert_eq!(flotilla_tests::desktop::count(&model_events, "action"), 0, "the crossing turn's click is not carried out");
    assert_eq!(server.received().len(), 1, "no model call after the tenant passed its tokens");
    eventually("the waiting task's sandbox is released", Duration::from_secs(10), async || provider.live() == 0).await;
    let (_, shown) = acme_api.get(&format!("/v1/tasks/{model}")).await;
    assert_eq!(shown["status"], "queued", "{shown}");
    assert!(shown["waiting_for"].as_array().is_some_and(|w| w.contains(&json!("max_tokens_per_day"))), "{shown}");

    let (status, _, body) = submit(&api, flotilla_tests::globex_key(), "/v1/tasks", &task()).await;
    assert_eq!(status, 202, "{body}");
    let other = TaskId::parse(body["id"].as_str().expect("id")).expect("task id");
    let globex = TenantId::parse("globex").expect("tenant");
    eventually("the other tenant's task runs", Duration::from_secs(30), async || {
        fleet.queue.reader().get(&globex, &other).await.expect("get").is_some_and(|r| r.status == TaskStatus::Succeeded)
    })
    .await;
    // The sleep is what is tested: for half a second more, it stays queued.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(record(&model).await.status, TaskStatus::Queued, "still waiting for the day");
    assert_eq!(record(&scripted).await.steps_taken, first_pass, "no step taken while waiting");

    server.push(Reply::json(openai::response("resp_2", vec![openai::message("done")], 100, 10)));
    let now = fleet.queue.now_ms();
    fleet.config.clock.advance(clock::ms_to_next_utc_day(now) + 1_000);
    eventually("both run again on the next day", Duration::from_secs(40), async || {
        record(&model).await.status.is_terminal() && record(&scripted).await.status.is_terminal()
    })
    .await;
    for id in [&model, &scripted] {
        let done = record(id).await;
        assert_eq!((done.status, done.attempts), (TaskStatus::Succeeded, 2), "{id}: waiting spent no retry");
    }
    assert_eq!(record(&scripted).await.steps_taken, WAITS, "the second attempt ran every action");
    let (_, usage) = acme_api.get("/v1/usage").await;
    assert_eq!(usage["limits"]["tokens_today"], 110, "the new day counts afresh: {usage}");
    fleet.stop().await;
}

/// The API's `/metrics` page, with the admin key.
async fn metrics_page(api: &ApiServer) -> String {
    let response = reqwest::Client::new().get(api.url("/metrics")).bearer_auth(flotilla_tests::fleet::admin_key());
    let response = response.send().await.expect("answers");
    assert_eq!(response.status().as_u16(), 200);
    response.text().await.expect("text")
}

/// A sample's value on a metrics page, by its full series name.
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Per-tenant Prometheus counters: off by default (no tenant is named on
/// `/metrics`); with `FLOTILLA_TENANT_METRICS=1` the page counts each
/// tenant's tokens per model, sandbox seconds, steps and tasks by outcome,
/// equal to what `GET /v1/usage` shows for it, and another tenant's figures
/// apart from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_tenant_counters_on_metrics_only_when_switched_on() {
    for switched_on in [false, true] {
        let server = ScriptedServer::start().await;
        server.push(openai::reply("resp_1", vec![openai::computer_call("call_1", openai::click(10, 10, "left"))]));
        server.push(Reply::json(openai::response("resp_2", vec![openai::message("done")], 300, 20)));
        let mut env = vec![
            ("OPENAI_BASE_URL", format!("{}/v1", server.url())),
            ("OPENAI_API_KEY", "sk-test-openai-secret".to_owned()),
            ("FLOTILLA_WORKER_CONCURRENCY", "1".to_owned()),
        ];
        if switched_on {
            env.push(("FLOTILLA_TENANT_METRICS", "1".to_owned()));
        }
        let provider = Arc::new(MemoryProvider::new());
        let fleet = DesktopFleet::start(DesktopOptions { env, provider: Some(provider), ..DesktopOptions::default() }).await;
        let api = spawn_api(fleet.config.clone()).await;
        let acme_api = ready(&api).await;
        let (status, _, body) =
            submit(&api, flotilla_tests::api_key(), "/v1/tasks", &json!({"prompt": "click", "pipeline": "openai-cua"})).await;
        assert_eq!(status, 202, "{body}");
        let model = TaskId::parse(body["id"].as_str().expect("id")).expect("task id");
        let (status, _, body) = submit(&api, flotilla_tests::globex_key(), "/v1/tasks", &task()).await;
        assert_eq!(status, 202, "{body}");
        let other = TaskId::parse(body["id"].as_str().expect("id")).expect("task id");
        let (acme, globex) = (TenantId::parse("acme").expect("tenant"), TenantId::parse("globex").expect("tenant"));
        eventually("both tasks end", Duration::from_secs(30), async || {
            let a = fleet.queue.reader().get(&acme, &model).await.expect("get").is_some_and(|r| r.status.is_terminal());
            a && fleet.queue.reader().get(&globex, &other).await.expect("get").is_some_and(|r| r.status.is_terminal())
        })
        .await;

        let page = metrics_page(&api).await;
        assert!(page.contains("flotilla_tasks_total{outcome=\"succeeded\"}"), "{page}");
        if !switched_on {
            assert!(!page.contains("flotilla_tenant_") && !page.contains("tenant=\""), "no tenant is named by default: {page}");
            fleet.stop().await;
            continue;
        }
        let (_, usage) = acme_api.get("/v1/usage").await;
        let total = &usage["total"];
        let acme_series = |name: &str, labels: &str| sample(&page, &format!("{name}{{tenant=\"acme\"{labels}}}"));
        let model_name = total["models"].as_object().and_then(|m| m.keys().next().cloned()).expect("a model in usage");
        let input = format!(",model=\"{model_name}\",direction=\"input\"");
        assert_eq!(acme_series("flotilla_tenant_tokens_total", &input), total["input_tokens"].as_f64(), "{page}\n{usage}");
        assert_eq!(acme_series("flotilla_tenant_tokens_total", &input), Some(1_300.0), "{page}");
        let output = format!(",model=\"{model_name}\",direction=\"output\"");
        assert_eq!(acme_series("flotilla_tenant_tokens_total", &output), Some(70.0), "{page}");
        assert_eq!(acme_series("flotilla_tenant_steps_total", ""), total["steps"].as_f64(), "{page}\n{usage}");
        let sandbox_ms = total["sandbox_ms"]["memory"].as_f64().expect("sandbox time in usage");
        let seconds = acme_series("flotilla_tenant_sandbox_seconds_total", ",provider=\"memory\"").expect("sandbox seconds");
        assert!((seconds * 1000.0 - sandbox_ms).abs() < 1.0, "{seconds} s against {sandbox_ms} ms");
        assert_eq!(acme_series("flotilla_tenant_tasks_total", ",outcome=\"succeeded\""), Some(1.0), "{page}");
        let globex_steps = sample(&page, "flotilla_tenant_steps_total{tenant=\"globex\"}");
        assert_eq!(globex_steps, Some(1.0), "the other tenant's own figures: {page}");
        fleet.stop().await;
    }
}

/// A kept-alive sandbox holds one of its tenant's `max_sandboxes` slots
/// until its deadline (in-memory sandboxes, a worker running up to three
/// tasks): with `max_sandboxes = 2` and one sandbox kept, one more sandbox
/// task runs and the next waits `queued` until it ends, while another
/// tenant's sandbox task runs; a task naming the kept sandbox runs in it
/// (its slot passes to the task and back); once the deadline passes the
/// slot is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_sandbox_holds_one_of_the_tenants_max_sandboxes_until_its_deadline() {
    let file = config_file("[tenants.acme]\nmax_sandboxes = 2\n");
    let env = vec![("FLOTILLA_CONFIG", file.to_string_lossy().into_owned()), ("FLOTILLA_WORKER_CONCURRENCY", "3".to_owned())];
    let provider = Arc::new(MemoryProvider::new());
    let fleet = DesktopFleet::start(DesktopOptions { env, provider: Some(provider), ..DesktopOptions::default() }).await;
    let api = spawn_api(fleet.config.clone()).await;
    let acme_api = ready(&api).await;
    let acme = TenantId::parse("acme").expect("tenant");
    let record = async |id: &TaskId| fleet.queue.reader().get(&acme, id).await.expect("get").expect("task");
    let submit_as = async |key: &str, body: Value| {
        let (status, _, answer) = submit(&api, key, "/v1/tasks", &body).await;
        assert_eq!(status, 202, "{answer}");
        TaskId::parse(answer["id"].as_str().expect("id")).expect("task id")
    };
    let on_screen = |wait_ms: u64, sandbox: Value| {
        json!({"prompt": "hold a desktop", "pipeline": "scripted", "sandbox": sandbox,
            "actions": [{"type": "move", "x": 5, "y": 5}, {"type": "wait", "ms": wait_ms}]})
    };
    let key = flotilla_tests::api_key();
    let sandboxed = async || fleet_redis_field(&fleet, &fleet.queue.keys().tenant_state(&acme), "sandboxed").await;

    let kept = submit_as(key, on_screen(1, json!({"keep_alive": true, "timeout_s": 10}))).await;
    eventually("the keeping task ends", Duration::from_secs(30), async || record(&kept).await.status.is_terminal()).await;
    assert_eq!(record(&kept).await.status, TaskStatus::Succeeded);
    let (_, shown) = acme_api.get(&format!("/v1/tasks/{kept}")).await;
    let kept_id = shown["sandbox"]["id"].as_str().expect("the kept sandbox's id").to_owned();
    eventually("the kept sandbox holds a slot", Duration::from_secs(5), async || sandboxed().await == 1).await;
    let (_, usage) = acme_api.get("/v1/usage").await;
    assert_eq!(
        (usage["limits"]["sandboxes"].as_u64(), usage["limits"]["sandboxes_left"].as_u64()),
        (Some(1), Some(1)),
        "{usage}"
    );

    let holder = submit_as(key, on_screen(2_500, json!({}))).await;
    eventually("a second sandbox task runs", Duration::from_secs(30), async || record(&holder).await.steps_taken >= 1).await;
    let waiting = submit_as(key, on_screen(1, json!({}))).await;
    let other = submit_as(flotilla_tests::globex_key(), on_screen(1, json!({}))).await;
    let globex = TenantId::parse("globex").expect("tenant");
    eventually("another tenant's sandbox task runs", Duration::from_secs(30), async || {
        fleet.queue.reader().get(&globex, &other).await.expect("get").is_some_and(|r| r.status == TaskStatus::Succeeded)
    })
    .await;
    assert_eq!(record(&holder).await.status, TaskStatus::Running, "the second task still holds its sandbox");
    assert_eq!(record(&waiting).await.status, TaskStatus::Queued, "a third sandbox would pass max_sandboxes with the kept one");
    eventually("the waiting task runs once a slot is free", Duration::from_secs(30), async || {
        record(&waiting).await.status == TaskStatus::Succeeded
    })
    .await;

    let follow_up = submit_as(key, on_screen(1, json!({"id": kept_id, "timeout_s": 10}))).await;
    eventually("a task naming the kept sandbox runs in it", Duration::from_secs(30), async || {
        record(&follow_up).await.status.is_terminal()
    })
    .await;
    let (_, shown) = acme_api.get(&format!("/v1/tasks/{follow_up}")).await;
    assert_eq!(shown["status"], "succeeded", "{shown}");
    assert_eq!(shown["sandbox"]["id"].as_str(), Some(kept_id.as_str()), "{shown}");
    eventually("the kept sandbox counts once again", Duration::from_secs(5), async || sandboxed().await == 1).await;
    eventually("its deadline passed: the slot is free", Duration::from_secs(30), async || sandboxed().await == 0).await;
    fleet.stop().await;
}

/// A field of a hash in the fleet's Redis, as a number (0 when absent).
async fn fleet_redis_field(fleet: &DesktopFleet, key: &str, field: &str) -> i64 {
    let mut conn = fleet.queue.redis().shared();
    let value: Option<i64> = redis::AsyncCommands::hget(&mut conn, key, field).await.expect("hget");
    value.unwrap_or(0)
}

/// A tenant whose tasks' model calls cost its `max_cost_usd_per_day`
/// (gpt-6-astra at the shipped prices, against the
/// protocol-faithful OpenAI server): new submits get 429
/// `quota_exceeded` with `Retry-After` to the next UTC day, its other
/// queued tasks stay `queued` while another tenant's run, `/v1/usage`
/// shows the cost of today against the limit, and once the clock passes
/// midnight the queued tasks run and submits pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_past_its_daily_cost_is_refused_and_keeps_its_tasks_queued_until_the_day_turns() {
    let server = ScriptedServer::start().await;
    // 1 000 tokens in and 50 out a turn at $10 and $50 a million: 12 500
    // micro-dollars, so the first task's second turn crosses $0.02.
    server.push(openai::reply("resp_1", vec![openai::computer_call("call_1", openai::click(10, 10, "left"))]));
    server.push(openai::reply("resp_2", vec![openai::message("done")]));
    let file = config_file("[tenants.acme]\nmax_cost_usd_per_day = 0.02\n");
    let env = vec![
        ("OPENAI_BASE_URL", format!("{}/v1", server.url())),
        ("OPENAI_API_KEY", "sk-test-openai-secret".to_owned()),
        ("FLOTILLA_CONFIG", file.to_string_lossy().into_owned()),
        ("FLOTILLA_WORKER_CONCURRENCY", "1".to_owned()),
    ];
    let provider = Arc::new(MemoryProvider::new());
    let fleet = DesktopFleet::start(DesktopOptions { env, provider: Some(provider), ..DesktopOptions::default() }).await;
    let api = spawn_api(fleet.config.clone()).await;
    let acme_api = ready(&api).await;
    let key = flotilla_tests::api_key();
    let model_task = json!({"prompt": "click then stop", "pipeline": "openai-cua", "retry": {"max_attempts": 1}});
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (status, _, body) = submit(&api, key, "/v1/tasks", &model_task).await;
        assert_eq!(status, 202, "{body}");
        ids.push(TaskId::parse(body["id"].as_str().expect("id")).expect("task id"));
    }
    let acme = TenantId::parse("acme").expect("tenant");
    let status_of = async |id: &TaskId| fleet.queue.reader().get(&acme, id).await.expect("get").expect("task").status;
    eventually("the first task ends", Duration::from_secs(30), async || status_of(&ids[0]).await.is_terminal()).await;
    assert_eq!(status_of(&ids[0]).await, TaskStatus::Succeeded);

    let now = fleet.queue.now_ms();
    let (status, headers, body) = submit(&api, key, "/v1/batches", &batch(2)).await;
    assert_eq!((status, body["error"]["code"].as_str()), (429, Some("quota_exceeded")), "{body}");
    assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains("max_cost_usd_per_day")), "{body}");
    let retry_after = header(&headers, "retry-after").expect("Retry-After");
    let to_midnight_s = (clock::ms_to_next_utc_day(now) as u64).div_ceil(1000);
    assert!(retry_after >= 1 && retry_after <= to_midnight_s + 1, "{retry_after} s, midnight in {to_midnight_s} s");
    assert_eq!(submit(&api, key, "/v1/tasks", &task()).await.0, 429, "a single submit too");
    let (_, usage) = acme_api.get("/v1/usage").await;
    assert_eq!(usage["limits"]["cost_today_usd"], 0.025, "{usage}");
    assert_eq!(usage["limits"]["max_cost_usd_per_day"], 0.02, "{usage}");
    assert_eq!(usage["limits"]["cost_left_today_usd"], 0.0, "{usage}");

    let globex = TenantId::parse("globex").expect("tenant");
    let (status, _, body) = submit(&api, flotilla_tests::globex_key(), "/v1/tasks", &task()).await;
    assert_eq!(status, 202, "another tenant is unaffected: {body}");
    let other = TaskId::parse(body["id"].as_str().expect("id")).expect("task id");
    eventually("the other tenant's task runs", Duration::from_secs(30), async || {
        fleet.queue.reader().get(&globex, &other).await.expect("get").is_some_and(|r| r.status == TaskStatus::Succeeded)
    })
    .await;
    for id in &ids[1..] {
        assert_eq!(status_of(id).await, TaskStatus::Queued, "a task of a tenant past its cost waits, not fails");
    }
    assert_eq!(server.received().len(), 2, "no model call while the tenant is past its cost");

    for id in ["resp_3", "resp_4"] {
        server.push(Reply::json(openai::response(id, vec![openai::message("done")], 100, 10)));
    }
    fleet.config.clock.advance(clock::ms_to_next_utc_day(fleet.queue.now_ms()) + 1_000);
    eventually("the waiting tasks run on the next day", Duration::from_secs(30), async || {
        status_of(&ids[1]).await.is_terminal() && status_of(&ids[2]).await.is_terminal()
    })
    .await;
    for id in &ids[1..] {
        assert_eq!(status_of(id).await, TaskStatus::Succeeded);
    }
    assert_eq!(submit(&api, key, "/v1/tasks", &task()).await.0, 202, "submits pass on the new day");
    let (_, usage) = acme_api.get("/v1/usage").await;
    // 100 tokens in and 10 out a task: 1 500 micro-dollars each.
    assert_eq!(usage["limits"]["cost_today_usd"], 0.003, "the new day counts afresh: {usage}");
    fleet.stop().await;
}

/// A model-driven task on a sandbox host's desktop that crosses its
/// tenant's daily tokens waits for the next day in a paused desktop: the
/// host shows it paused while the task is queued, and on the next day (the
/// fleet's clock moved past midnight) the task goes on in that same desktop
/// from its journal — what it typed before the wait is still there, typed
/// once — and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waiting_for_its_tenants_next_day_waits_in_a_paused_desktop_and_goes_on_in_it() {
    use flotilla_worker::sandbox::SandboxProvider as _;
    let host = flotilla_sandboxd::Sandboxd::start().await;
    let server = ScriptedServer::start().await;
    let typing = |call: &str, line: &str| openai::computer_call_batch(call, vec![openai::type_text(&format!("{line}\n"))]);
    server.push(Reply::json(openai::response("resp_1", vec![typing("c1", "echo before >> log.txt")], 100, 10)));
    // 2 000 tokens in the second turn: past the tenant's 1 500.
    server.push(Reply::json(openai::response("resp_2", vec![typing("c2", "echo after >> log.txt")], 1_900, 100)));
    server.push(Reply::json(openai::response("resp_3", vec![openai::message("done")], 100, 10)));
    server.push(Reply::json(openai::response("resp_4", vec![openai::message("done")], 100, 10)));
    let file = config_file("[tenants.acme]\nmax_tokens_per_day = 1500\n");
    let env = vec![
        ("OPENAI_BASE_URL", format!("{}/v1", server.url())),
        ("OPENAI_API_KEY", "sk-test-openai-secret".to_owned()),
        ("FLOTILLA_CONFIG", file.to_string_lossy().into_owned()),
    ];
    let provider = Arc::new(flotilla_worker::sandbox::E2bProvider::new(host.config()).expect("the E2B provider"));
    let fleet = DesktopFleet::start(DesktopOptions { env, provider: Some(provider.clone()), ..DesktopOptions::default() }).await;
    let acme = TenantId::parse("acme").expect("tenant");
    let record = async |id: &TaskId| fleet.queue.reader().get(&acme, id).await.expect("get").expect("task");
    let spec = json!({"prompt": "type two lines", "pipeline": "openai-cua", "retry": {"max_attempts": 1},
        "sandbox": {"keep_alive": true}});
    let id = fleet.submit_as(&acme, spec).await;

    eventually("the task waits for the next day", Duration::from_secs(60), async || {
        let task = record(&id).await;
        task.status == TaskStatus::Queued && task.attempts == 1
    })
    .await;
    let events = flotilla_tests::tasks::events(&fleet.queue, &id).await;
    let sandbox = flotilla_tests::desktop::sandbox_ids(&events).remove(0);
    let state =
        async || crate::sandboxd_workers::detail(&host, &sandbox).await.1["state"].as_str().unwrap_or_default().to_owned();
    eventually("the desktop is paused at the host", Duration::from_secs(10), async || state().await == "paused").await;

    let now = fleet.queue.now_ms();
    fleet.config.clock.advance(clock::ms_to_next_utc_day(now) + 1_000);
    eventually("the task ends on the next day", Duration::from_secs(60), async || record(&id).await.status.is_terminal()).await;
    let done = record(&id).await;
    assert_eq!((done.status, done.attempts), (TaskStatus::Succeeded, 2), "{:?}", done.error);
    let events = flotilla_tests::tasks::events(&fleet.queue, &id).await;
    let used = flotilla_tests::desktop::sandbox_ids(&events);
    assert!(used.len() == 2 && used.iter().all(|s| s == &sandbox), "one desktop for both days' attempts: {used:?}");
    assert!(events.iter().any(|e| e.kind.name() == "resumed"), "the next day's attempt resumed the journal");
    let id_of_sandbox = flotilla_worker::sandbox::SandboxId::parse(&sandbox).expect("a sandbox id");
    let log = flotilla_sandbox::suite::eventually("the log in the desktop", || async {
        provider.read_file(&id_of_sandbox, "log.txt").await.ok()
    })
    .await;
    assert_eq!(String::from_utf8_lossy(&log).matches("before").count(), 1, "typed once, before the wait: {log:?}");
    fleet.stop().await;
}
