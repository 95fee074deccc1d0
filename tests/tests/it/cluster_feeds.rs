//! The tenant feed on a local three-master Redis Cluster, where the task
//! scripts cannot append to it themselves: `GET /v1/events` (resumed with
//! `Last-Event-ID`), a batch's stream and webhooks all carry every event,
//! once, and a tenant sees only its own.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use flotilla_tests::fleet::test_env;
use flotilla_tests::{
    api_key, globex_key, spawn_api, test_config, unique_prefix, ApiClient, ApiServer, RedisCluster, SseFrame, SseReader,
    WorkerProcess,
};
use serde_json::{json, Value};

const STEP: Duration = Duration::from_secs(60);

/// Answers 204 and keeps each `webhook-id` with its body.
async fn receiver() -> (Arc<Mutex<Vec<(String, Value)>>>, String) {
    type Got = Arc<Mutex<Vec<(String, Value)>>>;
    let got: Got = Arc::default();
    async fn keep(State(got): State<Got>, headers: HeaderMap, body: String) -> StatusCode {
        let id = headers.get("webhook-id").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
        got.lock().expect("lock").push((id, serde_json::from_str(&body).unwrap_or(Value::Null)));
        StatusCode::NO_CONTENT
    }
    let app = Router::new().route("/hook", post(keep)).with_state(got.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    (got, url)
}

async fn stream(api: &ApiServer, path: &str, last: Option<&str>) -> SseReader {
    let mut request = api.client().get(api.url(path)).bearer_auth(api_key());
    if let Some(id) = last {
        request = request.header("last-event-id", id);
    }
    let response = request.send().await.expect("open event stream");
    assert_eq!(response.status().as_u16(), 200, "{path}");
    SseReader::new(response, STEP)
}

/// The (task, seq) of a frame, checking it is acme's.
fn key_of(frame: &SseFrame) -> (String, u64) {
    let data: Value = serde_json::from_str(&frame.data).expect("frame data is JSON");
    assert_eq!(data["tenant"], "acme", "a tenant sees only its own events: {data}");
    (data["task_id"].as_str().expect("task_id").to_owned(), data["seq"].as_u64().expect("seq"))
}

async fn next_frames(reader: &mut SseReader, n: usize) -> Vec<SseFrame> {
    let mut frames = Vec::with_capacity(n);
    while frames.len() < n {
        frames.push(reader.next().await.expect("the stream goes on"));
    }
    frames
}

/// A batch of `n` tasks that would start only in 2999, so cancelling them
/// gives each exactly two events (created, cancelled).
async fn parked_batch(api: &ApiClient, n: usize) -> (String, Vec<String>) {
    let tasks: Vec<Value> = (0..n).map(|i| json!({"prompt": format!("row {i}")})).collect();
    let body = json!({"defaults": {"pipeline": "openai-cua", "not_before": "2999-01-01T00:00:00Z"}, "tasks": tasks});
    let (status, batch) = api.post("/v1/batches", &body).await;
    assert_eq!(status, 202, "{batch}");
    let ids = batch["task_ids"].as_array().expect("ids").iter().map(|t| t.as_str().expect("id").to_owned()).collect();
    (batch["id"].as_str().expect("id").to_owned(), ids)
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_cluster_the_tenant_feed_a_batch_stream_and_webhooks_carry_every_event_once() {
    let cluster = RedisCluster::start();
    let prefix = unique_prefix();
    let extra = [("FLOTILLA_WEBHOOK_ALLOW_HTTP", "1"), ("FLOTILLA_WEBHOOK_ALLOW_PRIVATE", "1")];
    let api = spawn_api(test_config(&cluster, &prefix, &extra)).await;
    let acme = ApiClient::new(&api, api_key());
    let globex = ApiClient::new(&api, globex_key());
    let deadline = Instant::now() + Duration::from_secs(20);
    while acme.get("/readyz").await.0 != 200 {
        assert!(Instant::now() < deadline, "the api never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _worker = WorkerProcess::spawn(&test_env(&cluster, &prefix, &extra), "cluster-hooks");
    let (got, url) = receiver().await;
    let (status, hook) = acme.post("/v1/webhooks", &json!({"url": url, "events": ["task.cancelled", "batch.completed"]})).await;
    assert_eq!(status, 201, "{hook}");

    let mut feed = stream(&api, "/v1/events", None).await;
    let (batch, tasks) = parked_batch(&acme, 10).await;
    let batch_stream = tokio::spawn({
        let acme = ApiClient::new(&api, api_key());
        let path = format!("/v1/batches/{batch}/events");
        async move { acme.events_until_closed(&path, STEP).await }
    });
    let (_, theirs) = parked_batch(&globex, 3).await;
    for task in tasks.iter().chain(&theirs) {
        let api = if tasks.contains(task) { &acme } else { &globex };
        let (status, body) = api.post_empty(&format!("/v1/tasks/{task}/cancel")).await;
        assert!(status < 300, "{status} {body}");
    }

    let expected: BTreeSet<(String, u64)> = tasks.iter().flat_map(|t| [(t.clone(), 1), (t.clone(), 2)]).collect();
    let frames = next_frames(&mut feed, 20).await;
    let keys: Vec<(String, u64)> = frames.iter().map(key_of).collect();
    assert_eq!(keys.iter().cloned().collect::<BTreeSet<_>>(), expected, "every event of acme's tasks, once");
    for task in &tasks {
        let seqs: Vec<u64> = keys.iter().filter(|(t, _)| t == task).map(|(_, s)| *s).collect();
        assert_eq!(seqs, [1, 2], "a task's events in order");
    }

    // Resumed after the tenth frame: the other ten, nothing more.
    let tenth = frames[9].id.clone().expect("frames carry an id");
    let mut resumed = stream(&api, "/v1/events", Some(&tenth)).await;
    let again = next_frames(&mut resumed, 10).await;
    let ids = |f: &[SseFrame]| f.iter().map(|f| f.id.clone().unwrap_or_default()).collect::<Vec<_>>();
    assert_eq!(ids(&again), ids(&frames[10..]), "resuming misses nothing and repeats nothing");

    let batch_frames = batch_stream.await.expect("batch stream");
    let batch_keys: BTreeSet<(String, u64)> = batch_frames.iter().map(key_of).collect();
    assert_eq!(batch_keys, expected, "the batch's stream carries every event of its tasks");
    assert_eq!(batch_frames.len(), 20, "each once");

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let received = got.lock().expect("lock").clone();
        let cancelled: BTreeSet<String> = received
            .iter()
            .filter(|(_, body)| body["type"] == "task.cancelled")
            .filter_map(|(_, body)| body["data"]["id"].as_str().map(str::to_owned))
            .collect();
        let completed = received.iter().filter(|(_, body)| body["type"] == "batch.completed").count();
        if cancelled == tasks.iter().cloned().collect() && completed == 1 {
            let ids: BTreeSet<&String> = received.iter().map(|(id, _)| id).collect();
            assert_eq!(ids.len(), received.len(), "each message delivered once");
            break;
        }
        assert!(Instant::now() < deadline, "webhooks on a cluster: got {received:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
