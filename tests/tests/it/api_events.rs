//! `GET /v1/tasks/{id}/events` over TCP against a real redis-server: the
//! stored history first (after `Last-Event-ID`), then live events, each seq
//! exactly once and in order, with the stored JSON as the data, and the
//! stream closed right after the terminal event, also across a gap on the
//! channel and a Redis restart. Every stream shares the API's one pattern
//! subscription, held only while a stream is open, and a client that
//! leaves frees its place under the cap.
//!
//! Events past `queued` are written here the way the queue's scripts write
//! them (bump the task's seq, append to its list, publish on its channel), so
//! no worker is needed and the test decides what reaches the channel.

use std::time::Duration;

use flotilla_queue::keys::{event_field, Keys};
use flotilla_tests::{api_key, spawn_api, test_config, unique_prefix, ApiServer, RedisServer, SseFrame, SseReader};
use flotilla_types::{clock, TaskId, TenantId};
use redis::aio::MultiplexedConnection;
use serde_json::{json, Value};

/// How long any one step may take before the test fails instead of hanging.
const STEP: Duration = Duration::from_secs(15);

fn client() -> reqwest::Client {
    reqwest::Client::builder().build().expect("http client")
}

/// Opens the event stream of `id`, resuming after `last_event_id` if given.
async fn open(api: &ApiServer, id: &str, last_event_id: Option<u64>) -> SseReader {
    let mut request =
        client().get(api.url(&format!("/v1/tasks/{id}/events"))).header("authorization", format!("Bearer {}", api_key()));
    if let Some(seq) = last_event_id {
        request = request.header("last-event-id", seq.to_string());
    }
    let response = request.send().await.expect("open events");
    assert_eq!(response.status().as_u16(), 200, "events answer 200");
    let content_type = response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    assert!(content_type.starts_with("text/event-stream"), "{content_type}");
    SseReader::new(response, STEP)
}

async fn submit(api: &ApiServer) -> String {
    let response = client()
        .post(api.url("/v1/tasks"))
        .header("authorization", format!("Bearer {}", api_key()))
        .json(&json!({"prompt": "file the expense report", "pipeline": "openai-cua"}))
        .send()
        .await
        .expect("submit");
    assert_eq!(response.status().as_u16(), 202);
    let body: Value = response.json().await.expect("submit body");
    body["id"].as_str().expect("id").to_owned()
}

async fn cancel(api: &ApiServer, id: &str) -> u16 {
    let response = client()
        .post(api.url(&format!("/v1/tasks/{id}/cancel")))
        .header("authorization", format!("Bearer {}", api_key()))
        .send()
        .await
        .expect("cancel");
    response.status().as_u16()
}

/// A fresh Redis and API with one task of acme's submitted, and a Redis
/// connection of the test's own.
struct Fleet {
    redis: RedisServer,
    keys: Keys,
    api: ApiServer,
    id: String,
    conn: MultiplexedConnection,
}

impl Fleet {
    async fn with_a_task() -> Self {
        let redis = RedisServer::start();
        let prefix = unique_prefix();
        let keys = Keys::new(prefix.clone());
        let api = spawn_api(test_config(&redis, &prefix, &[])).await;
        let id = submit(&api).await;
        let conn = connect(&redis).await;
        Self { redis, keys, api, id, conn }
    }
}

async fn connect(redis: &RedisServer) -> MultiplexedConnection {
    let client = redis::Client::open(redis.url()).expect("redis client");
    client.get_multiplexed_async_connection().await.expect("redis connection")
}

/// The stored events of a task, as stored.
async fn stored(conn: &mut MultiplexedConnection, keys: &Keys, id: &str) -> Vec<String> {
    let id = TaskId::parse(id).expect("task id");
    let last: Option<u64> = redis::cmd("HGET").arg(keys.task(&id)).arg("seq").query_async(conn).await.expect("HGET");
    let fields: Vec<String> = (1..=last.unwrap_or(0)).map(event_field).collect();
    if fields.is_empty() {
        return Vec::new();
    }
    let events: Vec<Option<String>> =
        redis::cmd("HMGET").arg(keys.task(&id)).arg(&fields).query_async(conn).await.expect("HMGET");
    events.into_iter().flatten().collect()
}

/// Stores event `seq` of task `id` the way the queue does, and publishes it
/// on the tenant's channel (where the API listens) when `publish` is set.
/// Returns its JSON.
async fn append(conn: &mut MultiplexedConnection, keys: &Keys, id: &str, seq: u64, kind: Value, publish: bool) -> String {
    let task = TaskId::parse(id).expect("task id");
    let mut event = json!({"seq": seq, "task_id": id, "batch_id": null, "tenant": "acme", "ts": clock::rfc3339(clock::now_ms())});
    for (k, v) in kind.as_object().expect("event fields") {
        event[k] = v.clone();
    }
    let event = event.to_string();
    let mut pipe = redis::pipe();
    pipe.atomic().cmd("HINCRBY").arg(keys.task(&task)).arg("seq").arg(1).ignore();
    pipe.cmd("HSET").arg(keys.task(&task)).arg(event_field(seq)).arg(&event).ignore();
    if publish {
        pipe.cmd("PUBLISH").arg(keys.tenant_channel(&acme())).arg(&event).ignore();
    }
    let () = pipe.query_async(conn).await.expect("append event");
    event
}

/// Publishes an event again without storing it, as a duplicate delivery would.
async fn republish(conn: &mut MultiplexedConnection, keys: &Keys, event: &str) {
    let _: i64 = redis::cmd("PUBLISH").arg(keys.tenant_channel(&acme())).arg(event).query_async(conn).await.expect("PUBLISH");
}

/// How many pattern subscriptions the server holds (`PUBSUB NUMPAT`).
async fn patterns(conn: &mut MultiplexedConnection) -> u64 {
    redis::cmd("PUBSUB").arg("NUMPAT").query_async(conn).await.expect("NUMPAT")
}

fn acme() -> TenantId {
    TenantId::parse("acme").expect("tenant")
}

fn ids(frames: &[SseFrame]) -> Vec<&str> {
    frames.iter().map(|f| f.id.as_deref().unwrap_or("-")).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_finished_task_replays_its_history_and_closes() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let keys = Keys::new(prefix.clone());
    let api = spawn_api(test_config(&redis, &prefix, &[])).await;
    let id = submit(&api).await;
    assert_eq!(cancel(&api, &id).await, 202);

    let frames = open(&api, &id, None).await.rest().await;
    let mut conn = connect(&redis).await;
    let history = stored(&mut conn, &keys, &id).await;
    assert_eq!(ids(&frames), ["1", "2"]);
    let kinds: Vec<&str> = frames.iter().map(|f| f.event.as_deref().unwrap_or("-")).collect();
    assert_eq!(kinds, ["queued", "cancelled"]);
    let data: Vec<&str> = frames.iter().map(|f| f.data.as_str()).collect();
    assert_eq!(data, history.iter().map(String::as_str).collect::<Vec<_>>(), "data is the stored JSON");

    let resumed = open(&api, &id, Some(1)).await.rest().await;
    assert_eq!(ids(&resumed), ["2"], "Last-Event-ID 1 resumes after it");
    let at_end = open(&api, &id, Some(2)).await.rest().await;
    assert!(at_end.is_empty(), "a client that has the terminal event gets an empty, closed stream");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_follower_gets_each_event_once_in_order_and_the_stream_closes() {
    let Fleet { redis: _redis, keys, api, id, mut conn } = Fleet::with_a_task().await;

    let mut stream = open(&api, &id, None).await;
    let first = stream.next().await.expect("queued event");
    assert_eq!((first.id.as_deref(), first.event.as_deref()), (Some("1"), Some("queued")));

    let reasoning = append(&mut conn, &keys, &id, 2, json!({"type": "reasoning", "text": "the form is on page 2"}), true).await;
    let second = stream.next().await.expect("live event");
    assert_eq!((second.id.as_deref(), second.data.as_str()), (Some("2"), reasoning.as_str()));

    // Seq 3 is stored but never published; seq 4 shows the gap.
    append(&mut conn, &keys, &id, 3, json!({"type": "reasoning", "text": "scrolling"}), false).await;
    let fourth = append(&mut conn, &keys, &id, 4, json!({"type": "reasoning", "text": "found it"}), true).await;
    // A duplicate delivery of old events is dropped.
    republish(&mut conn, &keys, &reasoning).await;
    republish(&mut conn, &keys, &fourth).await;
    assert_eq!(cancel(&api, &id).await, 202, "the task is still queued, so cancel ends it");

    let rest = stream.rest().await;
    assert_eq!(ids(&rest), ["3", "4", "5"], "the gap is filled from history, duplicates dropped");
    assert_eq!(rest[2].event.as_deref(), Some("cancelled"), "the stream closed after the terminal event");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_stream_survives_a_redis_restart() {
    let mut redis = RedisServer::start_with_aof();
    let prefix = unique_prefix();
    let keys = Keys::new(prefix.clone());
    let api = spawn_api(test_config(&redis, &prefix, &[])).await;
    let id = submit(&api).await;

    let mut stream = open(&api, &id, None).await;
    assert_eq!(stream.next().await.expect("queued").id.as_deref(), Some("1"));

    redis.restart();
    let mut conn = connect(&redis).await;
    append(&mut conn, &keys, &id, 2, json!({"type": "reasoning", "text": "written while the feed was away"}), true).await;
    let rest = tokio::time::timeout(STEP, async {
        let second = stream.next().await.expect("event written across the restart");
        assert_eq!(second.id.as_deref(), Some("2"));
        append(&mut conn, &keys, &id, 3, json!({"type": "failed", "code": "problem", "error": "gave up"}), true).await;
        stream.rest().await
    })
    .await
    .expect("the feed came back after the restart");
    assert_eq!(ids(&rest), ["3"]);
    assert_eq!(rest[0].event.as_deref(), Some("failed"));
}

#[tokio::test(flavor = "multi_thread")]
async fn streams_share_one_pattern_subscription_and_a_client_that_leaves_frees_its_place() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let api = spawn_api(test_config(&redis, &prefix, &[("FLOTILLA_STREAMS_PER_TENANT", "2")])).await;
    let id = submit(&api).await;
    let mut conn = connect(&redis).await;

    let mut first = open(&api, &id, None).await;
    let mut second = open(&api, &id, None).await;
    assert!(first.next().await.is_some() && second.next().await.is_some());
    assert_eq!(patterns(&mut conn).await, 1, "one subscription for every stream");
    let refused = client()
        .get(api.url(&format!("/v1/tasks/{id}/events")))
        .header("authorization", format!("Bearer {}", api_key()))
        .send()
        .await
        .expect("third stream");
    assert_eq!(refused.status().as_u16(), 429, "a third stream is past the cap");
    drop(first);
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let response = client()
            .get(api.url(&format!("/v1/tasks/{id}/events")))
            .header("authorization", format!("Bearer {}", api_key()))
            .send()
            .await
            .expect("stream");
        if response.status().as_u16() == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the stream's place outlived its client");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_pattern_is_subscribed_only_while_a_stream_is_open() {
    let Fleet { redis: _redis, keys, api, id, mut conn } = Fleet::with_a_task().await;
    assert_eq!(patterns(&mut conn).await, 0, "submits alone keep no subscription");

    let mut stream = open(&api, &id, None).await;
    assert_eq!(stream.next().await.expect("queued").id.as_deref(), Some("1"));
    assert_eq!(patterns(&mut conn).await, 1, "an open stream holds the subscription");
    drop(stream);
    let deadline = tokio::time::Instant::now() + STEP;
    while patterns(&mut conn).await != 0 {
        assert!(tokio::time::Instant::now() < deadline, "the subscription outlived the last stream");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut stream = open(&api, &id, None).await;
    assert_eq!(stream.next().await.expect("queued again").id.as_deref(), Some("1"));
    let reasoning = append(&mut conn, &keys, &id, 2, json!({"type": "reasoning", "text": "heard again"}), true).await;
    let second = stream.next().await.expect("a live event once subscribed again");
    assert_eq!((second.id.as_deref(), second.data.as_str()), (Some("2"), reasoning.as_str()));
}

#[tokio::test(flavor = "multi_thread")]
async fn shutting_the_api_down_ends_open_streams() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let api = spawn_api(test_config(&redis, &prefix, &[])).await;
    let id = submit(&api).await;
    let mut stream = open(&api, &id, None).await;
    assert!(stream.next().await.is_some());
    drop(api);
    let rest = tokio::time::timeout(STEP, stream.remaining_text()).await.expect("the stream ended when the api shut down");
    assert!(!rest.contains("data:"), "no event after shutdown");
}
