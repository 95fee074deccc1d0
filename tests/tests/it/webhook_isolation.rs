//! One webhook endpoint cannot hold up anything else: an endpoint that
//! never answers holds a few attempts at a time while its tenant's batch
//! drains and another tenant's endpoint gets its deliveries at once; and an
//! endpoint's delivery log keeps only its newest messages.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::Router;
use flotilla_queue::webhooks::due::PER_ENDPOINT;
use flotilla_tests::fleet::test_env;
use flotilla_tests::{api_key, globex_key, spawn_api, test_config, unique_prefix, ApiClient, RedisServer, WorkerProcess};
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;

/// Accepts connections, reads what comes and never answers; counts the
/// connections open now and at most.
#[derive(Clone, Default)]
struct Silent {
    open: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl Silent {
    async fn start() -> (Self, String) {
        let silent = Self::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        let counts = silent.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let now = counts.open.fetch_add(1, Ordering::SeqCst) + 1;
                counts.most.fetch_max(now, Ordering::SeqCst);
                let open = counts.open.clone();
                tokio::spawn(async move {
                    let mut sink = [0_u8; 4096];
                    while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        (silent, url)
    }
}

/// Answers 204 to every post and keeps the bodies.
async fn answering() -> (Arc<Mutex<Vec<String>>>, String) {
    let got: Arc<Mutex<Vec<String>>> = Arc::default();
    async fn keep(State(got): State<Arc<Mutex<Vec<String>>>>, body: String) -> StatusCode {
        got.lock().expect("lock").push(body);
        StatusCode::NO_CONTENT
    }
    let app = Router::new().route("/hook", post(keep)).with_state(got.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    (got, url)
}

async fn wait_ready(api: &ApiClient) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while api.get("/readyz").await.0 != 200 {
        assert!(Instant::now() < deadline, "the api never became ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn scripted(n: usize) -> Value {
    let tasks: Vec<Value> = (0..n).map(|i| json!({"prompt": format!("row {i}")})).collect();
    json!({"defaults": {"pipeline": "scripted", "actions": [{"type": "wait", "ms": 5}]}, "tasks": tasks})
}

async fn hook(api: &ApiClient, url: &str) -> String {
    let (status, body) = api.post("/v1/webhooks", &json!({"url": url, "events": ["task.succeeded"]})).await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().expect("id").to_owned()
}

/// Waits until every task of `batch` has succeeded; returns when that was seen.
async fn drained(api: &ApiClient, batch: &Value, limit: Duration) -> Instant {
    let path = format!("/v1/batches/{}", batch["id"].as_str().expect("batch id"));
    let total = batch["task_ids"].as_array().expect("ids").len() as u64;
    let deadline = Instant::now() + limit;
    loop {
        let (_, record) = api.get(&path).await;
        if record["counts"]["succeeded"].as_u64() == Some(total) {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "the batch did not drain: {record}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_silent_endpoint_holds_a_few_attempts_and_slows_neither_the_drain_nor_another_tenants_deliveries() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let extra =
        [("FLOTILLA_WEBHOOK_ALLOW_HTTP", "1"), ("FLOTILLA_WEBHOOK_ALLOW_PRIVATE", "1"), ("FLOTILLA_WORKER_CONCURRENCY", "16")];
    let api = spawn_api(test_config(&redis, &prefix, &extra)).await;
    let acme = ApiClient::new(&api, api_key());
    let globex = ApiClient::new(&api, globex_key());
    wait_ready(&acme).await;
    let _worker = WorkerProcess::spawn(&test_env(&redis, &prefix, &extra), "hooks-silent");
    let (silent, silent_url) = Silent::start().await;
    let (got, answering_url) = answering().await;
    hook(&acme, &silent_url).await;
    hook(&globex, &answering_url).await;

    let (status, first) = acme.post("/v1/batches", &scripted(300)).await;
    assert_eq!(status, 202, "{first}");
    drained(&acme, &first, Duration::from_secs(60)).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while silent.open.load(Ordering::SeqCst) < PER_ENDPOINT {
        assert!(Instant::now() < deadline, "the silent endpoint never held its attempts");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // With acme's endpoint holding every slot it may take and 300 messages
    // waiting for it, acme's next batch drains and globex hears at once.
    let submitted = Instant::now();
    let (status, second) = acme.post("/v1/batches", &scripted(300)).await;
    assert_eq!(status, 202, "{second}");
    let (status, theirs) = globex.post("/v1/batches", &scripted(20)).await;
    assert_eq!(status, 202, "{theirs}");
    let acme_drained = drained(&acme, &second, Duration::from_secs(60)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.lock().expect("lock").len() < 20 {
        assert!(Instant::now() < deadline, "globex's deliveries waited behind acme's silent endpoint");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let globex_heard = submitted.elapsed();
    eprintln!(
        "acme's second batch drained in {:?}; globex's 20 deliveries in {globex_heard:?}",
        acme_drained.duration_since(submitted)
    );
    assert!(globex_heard < Duration::from_secs(10), "{globex_heard:?}: far less than one 15 s delivery timeout");
    assert!(
        silent.most.load(Ordering::SeqCst) <= PER_ENDPOINT,
        "the silent endpoint held {} connections at once, more than {PER_ENDPOINT}",
        silent.most.load(Ordering::SeqCst)
    );
    let bodies = got.lock().expect("lock").clone();
    let theirs_ids: Vec<&str> = theirs["task_ids"].as_array().expect("ids").iter().filter_map(Value::as_str).collect();
    for body in &bodies {
        let body: Value = serde_json::from_str(body).expect("json");
        assert!(theirs_ids.contains(&body["data"]["id"].as_str().unwrap_or("")), "globex hears only its own tasks: {body}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoints_delivery_log_keeps_only_its_newest_messages() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let extra =
        [("FLOTILLA_WEBHOOK_ALLOW_HTTP", "1"), ("FLOTILLA_WEBHOOK_ALLOW_PRIVATE", "1"), ("FLOTILLA_WEBHOOK_LOG_MAX", "5")];
    let api = spawn_api(test_config(&redis, &prefix, &extra)).await;
    let acme = ApiClient::new(&api, api_key());
    wait_ready(&acme).await;
    let _worker = WorkerProcess::spawn(&test_env(&redis, &prefix, &extra), "hooks-log");
    let (got, url) = answering().await;
    let id = hook(&acme, &url).await;
    let (status, batch) = acme.post("/v1/batches", &scripted(12)).await;
    assert_eq!(status, 202, "{batch}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while got.lock().expect("lock").len() < 12 {
        assert!(Instant::now() < deadline, "not every message was delivered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, log) = acme.get(&format!("/v1/webhooks/{id}/deliveries?limit=100")).await;
    assert_eq!(status, 200, "{log}");
    let listed: Vec<String> =
        log["deliveries"].as_array().expect("deliveries").iter().map(|d| d["msg_id"].as_str().expect("id").to_owned()).collect();
    assert_eq!(listed.len(), 5, "the log is bounded: {log}");
    let mut newest: Vec<String> = listed.clone();
    newest.sort();
    newest.reverse();
    assert_eq!(listed, newest, "newest first");
    let mut conn = redis.connection();
    let held: u64 = redis::cmd("ZCARD").arg(format!("{prefix}:{{w}}:deliveries:{id}")).query(&mut conn).expect("zcard");
    assert_eq!(held, 5, "Redis holds no more than the bound either");
}
