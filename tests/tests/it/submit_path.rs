//! The single-task submit's path through Redis, against a real
//! redis-server: on a single server `POST /v1/tasks` is one script call
//! (admission, create, index and enqueue together), reserves nothing, and
//! still counts the room other requests' reservations hold against
//! `max_queued`, while the task it makes is queued, listed and announced
//! as before.

use flotilla_config::Config;
use flotilla_queue::keys::Keys;
use flotilla_queue::queue::{FeedId, Verdict};
use flotilla_tests::{spawn_api, test_config, unique_prefix, ApiClient, ApiServer, RedisServer};
use flotilla_types::{clock, TenantId};
use serde_json::{json, Value};

fn config(redis: &RedisServer, prefix: &str, tenants: &str) -> Config {
    let path = flotilla_tests::config_file(tenants);
    test_config(redis, prefix, &[("FLOTILLA_CONFIG", path.to_str().expect("utf-8 path"))])
}

async fn ready(api: &ApiServer) -> ApiClient {
    ApiClient::when_ready(api, flotilla_tests::api_key()).await
}

fn task() -> Value {
    json!({"prompt": "wait", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 1}]})
}

fn acme() -> TenantId {
    TenantId::parse("acme").expect("tenant")
}

#[tokio::test]
async fn a_single_task_submit_is_one_script_call_and_its_task_is_queued_listed_and_announced() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let config = config(
        &redis,
        &prefix,
        "[tenants.acme]\nmax_queued = 100\nrate = { per_second = 1000, burst = 1000 }\nmax_tokens_per_day = 1000000\n",
    );
    let keys = Keys::new(config.key_prefix.clone());
    let api = spawn_api(config).await;
    let client = ready(&api).await;
    // The first call loads the script (`NOSCRIPT`, `SCRIPT LOAD`, again).
    let (status, first) = client.post("/v1/tasks", &task()).await;
    assert_eq!(status, 202, "{first}");
    redis.cli(&["CONFIG", "RESETSTAT"]);
    let mut ids = Vec::new();
    for _ in 0..20 {
        let (status, body) = client.post("/v1/tasks", &task()).await;
        assert_eq!(status, 202, "{body}");
        assert_eq!(body["status"], "queued");
        ids.push(body["id"].as_str().expect("id").to_owned());
    }
    let calls = redis.command_calls();
    assert_eq!(calls.get("evalsha"), Some(&20), "one script call per submit: {calls:?}");
    for absent in ["zrem", "pexpire", "exists", "zremrangebyscore"] {
        assert!(!calls.contains_key(absent), "a one-call submit makes no reservation and checks no id: {calls:?}");
    }
    assert_eq!(redis.cli(&["EXISTS", &keys.tenant_admitting(&acme())]).trim(), "0", "no reservation is left");
    assert_eq!(redis.cli(&["ZCARD", &keys.tenant_tasks(&acme())]).trim(), "21", "every task is in the tenant's index");
    assert_eq!(redis.cli(&["HGET", &keys.tenant_state(&acme()), "queued"]).trim(), "21", "every task is counted as queued");
    let (status, page) = client.get("/v1/tasks?limit=50").await;
    assert_eq!(status, 200, "{page}");
    let listed: Vec<&str> = page["tasks"].as_array().expect("tasks").iter().filter_map(|t| t["id"].as_str()).collect();
    for id in &ids {
        assert!(listed.contains(&id.as_str()), "{id} is listed");
        let (status, record) = client.get(&format!("/v1/tasks/{id}")).await;
        assert_eq!(status, 200, "{record}");
        assert_eq!(record["status"], "queued");
    }
    let feed = redis.cli(&["XLEN", &keys.tenant_feed(&acme())]);
    assert_eq!(feed.trim(), "21", "each task's queued event is in the tenant's feed");
}

#[tokio::test]
async fn a_single_task_submit_counts_the_room_other_requests_reserved() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let config = config(&redis, &prefix, "[tenants.acme]\nmax_queued = 5\n");
    let admitting = Keys::new(config.key_prefix.clone()).tenant_admitting(&acme());
    let api = spawn_api(config).await;
    let client = ready(&api).await;
    let now = clock::now_ms();
    // A batch's live reservation of 3 tasks, and one that lapsed.
    redis.cli(&["ZADD", &admitting, &(now + 60_000).to_string(), "live:3", &(now - 1_000).to_string(), "lapsed:4"]);
    for _ in 0..2 {
        let (status, body) = client.post("/v1/tasks", &task()).await;
        assert_eq!(status, 202, "{body}");
    }
    let response = reqwest::Client::new()
        .post(api.url("/v1/tasks"))
        .bearer_auth(flotilla_tests::api_key())
        .json(&task())
        .send()
        .await
        .expect("answers");
    assert_eq!(response.status().as_u16(), 429, "2 queued + 3 reserved + 1 is past max_queued 5");
    assert!(response.headers().get("retry-after").is_some(), "a refusal says when to come back");
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["error"]["code"], "quota_exceeded", "{body}");
    redis.cli(&["ZREM", &admitting, "live:3"]);
    let (status, body) = client.post("/v1/tasks", &task()).await;
    assert_eq!(status, 202, "room again once the reservation is gone: {body}");
}

/// Single submits of one tenant made while its call is under way go
/// together in one script call, and each is still judged on its own, in
/// order: with a burst of 10, the first submit and 9 of the 40 made at once
/// pass the rate, the rest are refused, and only the admitted ones are
/// created, listed, counted and announced.
#[tokio::test]
async fn single_submits_made_at_once_share_a_call_and_are_each_judged() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let config = config(&redis, &prefix, "[tenants.acme]\nmax_queued = 25\nrate = { per_second = 0.001, burst = 10 }\n");
    let keys = Keys::new(config.key_prefix.clone());
    let quota = config.tenants.get(&acme());
    let queue = flotilla_tests::tasks::queue(&config).await;
    let spec = flotilla_tests::tasks::wait_spec(1);
    assert!(queue.submitter().submits_in_one_call(&spec));
    // The first call loads the script (`NOSCRIPT`, `SCRIPT LOAD`, again).
    let (first, _) = queue.submitter().submit_one(&acme(), &spec, &quota).await.expect("first submit");
    assert!(matches!(first, Verdict::Admitted { .. }), "{first:?}");
    redis.cli(&["CONFIG", "RESETSTAT"]);
    // On the test's one thread every submit is waiting before the call runs.
    let tenant = acme();
    let answers = futures::future::join_all((0..40).map(|_| queue.submitter().submit_one(&tenant, &spec, &quota))).await;
    let calls = redis.command_calls();
    assert_eq!(calls.get("evalsha"), Some(&1), "40 waiting submits in one call: {calls:?}");
    let mut admitted = Vec::new();
    for (n, answer) in answers.into_iter().enumerate() {
        let (verdict, submitted) = answer.expect("submit");
        if n < 9 {
            assert!(matches!(verdict, Verdict::Admitted { remaining, .. } if remaining == 8 - n as i64), "{n}: {verdict:?}");
            admitted.push(submitted.expect("an admitted submit makes a task").id);
        } else {
            assert!(matches!(verdict, Verdict::RateLimited { .. }), "{n}: {verdict:?}");
            assert!(submitted.is_none(), "{n}: a refused submit makes no task");
        }
    }
    assert_eq!(redis.cli(&["ZCARD", &keys.tenant_tasks(&acme())]).trim(), "10", "the admitted tasks are listed");
    assert_eq!(redis.cli(&["HGET", &keys.tenant_state(&acme()), "queued"]).trim(), "10", "and counted as queued");
    let feed = queue.reader().feed_after(&acme(), FeedId::START).await.expect("the feed reads");
    let announced: Vec<&str> = feed.iter().filter_map(|e| e.event.split("\"task_id\":\"").nth(1)?.split('"').next()).collect();
    assert_eq!(announced.len(), 10, "and announced in the feed, each once: {feed:?}");
    for id in &admitted {
        assert!(announced.contains(&id.as_str()), "{id} is announced");
    }
    assert_eq!(
        redis.cli(&["XLEN", &keys.tenant_feed(&acme())]).trim(),
        "2",
        "the first submit's event is one feed entry, the call's nine are another"
    );
    for id in &admitted {
        let task = queue.reader().get(&acme(), id).await.expect("read").expect("the admitted task exists");
        assert_eq!(task.status, flotilla_types::task::TaskStatus::Queued);
    }
}

/// A request that goes away while its tenant's call is under way strands
/// no submit behind it: the call belongs to a task of its own, which still
/// makes the gone request's task and answers every submit that waited
/// behind it.
#[tokio::test]
async fn a_submit_whose_request_goes_away_strands_none_behind_it() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let config = config(&redis, &prefix, "");
    let keys = Keys::new(config.key_prefix.clone());
    let quota = config.tenants.get(&acme());
    let queue = flotilla_tests::tasks::queue(&config).await;
    let spec = flotilla_tests::tasks::wait_spec(1);
    assert!(queue.submitter().submits_in_one_call(&spec));
    let tenant = acme();
    let mut gone = Box::pin(queue.submitter().submit_one(&tenant, &spec, &quota));
    assert!(futures::poll!(gone.as_mut()).is_pending(), "the first submit starts its tenant's call and waits for it");
    let behind: Vec<_> = (0..5).map(|_| queue.submitter().submit_one(&tenant, &spec, &quota)).collect();
    drop(gone);
    let answers = tokio::time::timeout(std::time::Duration::from_secs(30), futures::future::join_all(behind))
        .await
        .expect("the submits behind a request that went away are answered");
    for answer in answers {
        let (verdict, submitted) = answer.expect("submit");
        assert!(matches!(verdict, Verdict::Admitted { .. }), "{verdict:?}");
        assert!(submitted.is_some(), "an admitted submit makes a task");
    }
    assert_eq!(redis.cli(&["ZCARD", &keys.tenant_tasks(&acme())]).trim(), "6", "the gone request's task is made too");
}
