//! The tenant feed (`GET /v1/events`), batch streams resumed with
//! `Last-Event-ID`, and the API's one event subscription under thousands of
//! open streams, against a real redis-server. Events come from submitting
//! and cancelling tasks, which the API does itself, so no worker is needed.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use flotilla_queue::queue::{FeedId, NewTask};
use flotilla_tests::{api_key, spawn_api, test_config, unique_prefix, ApiClient, ApiServer, RedisServer, SseFrame, SseReader};
use flotilla_types::TaskId;
use futures::future::join_all;
use serde_json::{json, Value};

const GLOBEX: &str = flotilla_tests::fleet::globex_key();
/// How long one wait for a frame may take before the test fails.
const STEP: Duration = Duration::from_secs(60);

/// Opens an event stream at `path` with `key`, resuming after `last` if given.
async fn open(http: &reqwest::Client, api: &ApiServer, key: &str, path: &str, last: Option<&str>) -> reqwest::Response {
    let mut request = http.get(api.url(path)).bearer_auth(key);
    if let Some(id) = last {
        request = request.header("last-event-id", id);
    }
    request.send().await.expect("open event stream")
}

async fn reader(http: &reqwest::Client, api: &ApiServer, key: &str, path: &str, last: Option<&str>) -> SseReader {
    let response = open(http, api, key, path, last).await;
    assert_eq!(response.status().as_u16(), 200, "{path}");
    SseReader::new(response, STEP)
}

async fn submit(api: &ApiClient, prompt: &str) -> String {
    let (status, body) = api.post("/v1/tasks", &json!({"prompt": prompt, "pipeline": "openai-cua"})).await;
    assert_eq!(status, 202, "{body}");
    body["id"].as_str().expect("id").to_owned()
}

async fn cancel(api: &ApiClient, id: &str) {
    let (status, body) = api.post_empty(&format!("/v1/tasks/{id}/cancel")).await;
    assert!(status < 300, "{status} {body}");
}

async fn batch(api: &ApiClient, size: usize) -> (String, Vec<String>) {
    let tasks: Vec<Value> = (0..size).map(|i| json!({"prompt": format!("row {i}")})).collect();
    let (status, body) = api.post("/v1/batches", &json!({"defaults": {"pipeline": "openai-cua"}, "tasks": tasks})).await;
    assert_eq!(status, 202, "{body}");
    let ids = body["task_ids"].as_array().expect("task_ids").iter().map(|t| t.as_str().expect("id").to_owned()).collect();
    (body["id"].as_str().expect("id").to_owned(), ids)
}

/// The (task, seq) of a frame, checking its tenant.
fn key_of(frame: &SseFrame, tenant: &str) -> (String, u64) {
    let data: Value = serde_json::from_str(&frame.data).expect("frame data is JSON");
    assert_eq!(data["tenant"], tenant, "a tenant sees only its own events: {data}");
    (data["task_id"].as_str().expect("task_id").to_owned(), data["seq"].as_u64().expect("seq"))
}

/// A frame's feed position, to check the order.
fn position(frame: &SseFrame) -> FeedId {
    frame.id.as_deref().expect("frames carry an id").parse().expect("<ms>-<n> or <ms>-<n>.<i>")
}

/// Submits and cancels `n` tasks of acme, with globex doing the same in
/// between; returns acme's expected (task, seq) pairs.
async fn traffic(acme: &ApiClient, globex: &ApiClient, n: usize) -> BTreeSet<(String, u64)> {
    let mut expected = BTreeSet::new();
    for i in 0..n {
        let mine = submit(acme, &format!("acme {i}")).await;
        let theirs = submit(globex, &format!("globex {i}")).await;
        cancel(acme, &mine).await;
        cancel(globex, &theirs).await;
        expected.insert((mine.clone(), 1));
        expected.insert((mine, 2));
    }
    expected
}

#[tokio::test(flavor = "multi_thread")]
async fn the_tenant_feed_resumed_after_a_disconnect_misses_nothing_repeats_nothing_and_shows_no_other_tenant() {
    let redis = RedisServer::start();
    let api = spawn_api(test_config(&redis, &unique_prefix(), &[])).await;
    let (acme, globex) = (ApiClient::new(&api, api_key()), ApiClient::new(&api, GLOBEX));
    let http = reqwest::Client::new();

    let mut feed = reader(&http, &api, api_key(), "/v1/events", None).await;
    let mut expected = traffic(&acme, &globex, 10).await;
    let mut seen = Vec::new();
    for _ in 0..7 {
        seen.push(feed.next().await.expect("an event"));
    }
    drop(feed);

    expected.extend(traffic(&acme, &globex, 10).await);
    let last = seen.last().and_then(|f| f.id.clone()).expect("last id");
    let mut feed = reader(&http, &api, api_key(), "/v1/events", Some(&last)).await;
    while seen.len() < expected.len() {
        seen.push(feed.next().await.expect("an event"));
    }
    let extra = tokio::time::timeout(Duration::from_millis(1_500), feed.next()).await;
    assert!(extra.is_err(), "nothing beyond acme's events comes: {extra:?}");

    let got: Vec<(String, u64)> = seen.iter().map(|f| key_of(f, "acme")).collect();
    let unique: BTreeSet<_> = got.iter().cloned().collect();
    assert_eq!(unique.len(), got.len(), "no event repeats");
    assert_eq!(unique, expected, "every event of acme arrives");
    let positions: Vec<_> = seen.iter().map(position).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "positions increase: {positions:?}");

    let (status, body) = acme.get("/v1/events?after=nope").await;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("after")), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_stream_resumed_with_last_event_id_sends_the_rest_once_and_a_stream_ends_at_its_lifetime() {
    let redis = RedisServer::start();
    let api = spawn_api(test_config(&redis, &unique_prefix(), &[("FLOTILLA_STREAM_MAX_LIFETIME_S", "2")])).await;
    let acme = ApiClient::new(&api, api_key());
    let http = reqwest::Client::new();
    let (id, tasks) = batch(&acme, 8).await;
    let path = format!("/v1/batches/{id}/events");

    let mut first = reader(&http, &api, api_key(), &path, None).await;
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(first.next().await.expect("a queued event"));
    }
    drop(first);
    let (status, body) = acme.post_empty(&format!("/v1/batches/{id}/cancel")).await;
    assert!(status < 300, "{status} {body}");
    let last = seen.last().and_then(|f| f.id.clone()).expect("id");
    let mut resumed = reader(&http, &api, api_key(), &path, Some(&last)).await;
    seen.extend(resumed.rest().await);

    let got: Vec<(String, u64)> = seen.iter().map(|f| key_of(f, "acme")).collect();
    let expected: BTreeSet<(String, u64)> = tasks.iter().flat_map(|t| [(t.clone(), 1), (t.clone(), 2)]).collect();
    assert_eq!(got.len(), expected.len(), "no event repeats: {got:?}");
    assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), expected, "every event of the batch, then the stream closes");

    // A feed that follows nothing that ends is closed at its lifetime, and resumes.
    let started = std::time::Instant::now();
    let mut feed = reader(&http, &api, api_key(), "/v1/events", Some("0-0")).await;
    let replayed = feed.rest().await;
    assert!(started.elapsed() < Duration::from_secs(10), "the stream ended at its lifetime");
    assert_eq!(replayed.len(), 16, "the whole stored feed replays from the start");
    let last = replayed.last().and_then(|f| f.id.clone()).expect("id");
    let resumed = tokio::time::timeout(
        Duration::from_secs(10),
        reader(&http, &api, api_key(), "/v1/events", Some(&last)).await.rest_owned(),
    )
    .await
    .expect("closes again at its lifetime");
    assert!(resumed.is_empty(), "nothing new: {resumed:?}");
}

/// How many clients Redis has connected.
fn clients(redis: &RedisServer) -> usize {
    redis.cli(&["CLIENT", "LIST"]).lines().filter(|l| l.starts_with("id=")).count()
}

#[tokio::test(flavor = "multi_thread")]
async fn five_thousand_streams_share_one_subscription_a_tenant_past_its_cap_gets_429_and_every_stream_gets_every_event() {
    const TASK_STREAMS: usize = 2_000;
    const BATCH_STREAMS: usize = 2_000;
    const FEEDS: usize = 1_000;
    const TOTAL: usize = TASK_STREAMS + BATCH_STREAMS + FEEDS;
    let redis = RedisServer::start();
    let cap = TOTAL.to_string();
    let api = spawn_api(test_config(&redis, &unique_prefix(), &[("FLOTILLA_STREAMS_PER_TENANT", &cap)])).await;
    let acme = ApiClient::new(&api, api_key());
    let (id, tasks) = batch(&acme, 50).await;
    // One stream first, so the API's own connections are all up.
    let http = reqwest::Client::new();
    drop(reader(&http, &api, api_key(), "/v1/events", None).await);
    let before = clients(&redis);

    let mut paths = Vec::with_capacity(TOTAL);
    paths.extend((0..TASK_STREAMS).map(|i| format!("/v1/tasks/{}/events", tasks[i % tasks.len()])));
    paths.extend((0..BATCH_STREAMS).map(|_| format!("/v1/batches/{id}/events")));
    paths.extend((0..FEEDS).map(|_| "/v1/events".to_owned()));
    let mut readers = Vec::with_capacity(TOTAL);
    for chunk in paths.chunks(250) {
        let opened = join_all(chunk.iter().map(|p| reader(&http, &api, api_key(), p, None))).await;
        readers.extend(chunk.iter().cloned().zip(opened));
    }
    let during = clients(&redis);
    eprintln!("redis clients: {before} before, {during} with {TOTAL} streams open");
    assert!(during <= before + 1, "{TOTAL} streams hold Redis connections constant: {before} before, {during} after");

    let refused = open(&http, &api, api_key(), "/v1/events", None).await;
    assert_eq!(refused.status().as_u16(), 429, "past the cap");
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = refused.json().await.expect("json error");
    assert_eq!(body["error"]["code"], "rate_limited");
    let other = open(&http, &api, GLOBEX, "/v1/events", None).await;
    assert_eq!(other.status().as_u16(), 200, "another tenant is not limited by acme's streams");
    drop(other);

    let (status, body) = acme.post_empty(&format!("/v1/batches/{id}/cancel")).await;
    assert!(status < 300, "{status} {body}");
    let reads = readers.into_iter().map(|(path, mut reader)| async move {
        let wanted = if path == "/v1/events" { 50 } else { usize::MAX };
        let mut frames = Vec::new();
        while frames.len() < wanted {
            match reader.next().await {
                Some(frame) => frames.push(frame),
                None => break,
            }
        }
        (path, frames)
    });
    let results = join_all(reads).await;
    let mut by_kind: HashMap<&str, usize> = HashMap::new();
    for (path, frames) in &results {
        let keys: Vec<(String, u64)> = frames.iter().map(|f| key_of(f, "acme")).collect();
        let unique: BTreeSet<_> = keys.iter().cloned().collect();
        assert_eq!(unique.len(), keys.len(), "{path}: no repeats");
        let (kind, expected) = if path.starts_with("/v1/tasks/") {
            ("task", 2)
        } else if path.starts_with("/v1/batches/") {
            ("batch", 100)
        } else {
            ("tenant", 50)
        };
        assert_eq!(keys.len(), expected, "{path}: every event");
        if kind == "tenant" {
            assert!(keys.iter().all(|(_, seq)| *seq == 2), "the feed from now holds the cancels");
        }
        *by_kind.entry(kind).or_default() += 1;
    }
    assert_eq!(by_kind.values().sum::<usize>(), TOTAL);
}

/// The tasks a call creates at once, as a batch or a bench would.
async fn create_at_once(queue: &flotilla_queue::queue::Queue, n: usize) -> Vec<flotilla_types::TaskId> {
    let tenant = flotilla_tests::tasks::tenant();
    let spec = flotilla_tests::tasks::wait_spec(1);
    let tasks: Vec<NewTask> =
        (0..n).map(|_| NewTask { id: TaskId::generate(), tenant: tenant.clone(), batch: None, spec: spec.clone() }).collect();
    let ids = tasks.iter().map(|t| t.id.clone()).collect();
    queue.submitter().create_tasks(tasks).await.expect("created");
    ids
}

#[tokio::test]
async fn events_written_by_one_call_share_a_feed_entry_and_reading_after_any_of_them_gives_exactly_the_rest() {
    let redis = RedisServer::start();
    let config = test_config(&redis, &unique_prefix(), &[]);
    let queue = flotilla_tests::tasks::queue(&config).await;
    let tenant = flotilla_tests::tasks::tenant();
    let first = create_at_once(&queue, 5).await;
    let second = create_at_once(&queue, 3).await;

    let feed_key = flotilla_queue::keys::Keys::new(config.key_prefix.clone()).tenant_feed(&tenant);
    assert_eq!(redis.cli(&["XLEN", &feed_key]).trim(), "2", "each call's queued events are one entry");
    let all = queue.reader().feed_after(&tenant, FeedId::START).await.expect("reads");
    let announced: Vec<String> = all.iter().map(|e| key_of_event(&e.event)).collect();
    let created: Vec<String> = first.iter().chain(&second).map(ToString::to_string).collect();
    assert_eq!(announced, created, "every event once, in the order written");
    let positions: Vec<String> = all.iter().map(|e| e.id.to_string()).collect();
    assert!(all.windows(2).all(|w| w[0].id < w[1].id), "positions increase: {positions:?}");
    let entry_ids: BTreeSet<String> = all.iter().map(|e| e.id.entry_id()).collect();
    assert_eq!(entry_ids.len(), 2, "{positions:?}");
    assert!(positions[4].parse::<FeedId>().is_ok_and(|p| !p.is_inside_entry()), "an entry's last event is named by the entry id");
    assert!(positions[..4].iter().all(|p| p.contains('.')), "earlier events carry their place: {positions:?}");

    for (k, at) in all.iter().enumerate() {
        let after: FeedId = at.id.to_string().parse().expect("a printed position parses");
        let rest = queue.reader().feed_after(&tenant, after).await.expect("reads");
        assert_eq!(rest, all[k + 1..], "after {after}: exactly the events that follow");
    }
}

#[tokio::test]
async fn entries_of_one_event_a_field_read_back_in_order_beside_an_older_entry_of_lines() {
    let redis = RedisServer::start();
    let config = test_config(&redis, &unique_prefix(), &[]);
    let queue = flotilla_tests::tasks::queue(&config).await;
    let tenant = flotilla_tests::tasks::tenant();
    let feed_key = flotilla_queue::keys::Keys::new(config.key_prefix.clone()).tenant_feed(&tenant);
    let older = [r#"{"seq":1,"task_id":"tsk_a","type":"queued"}"#, r#"{"seq":1,"task_id":"tsk_b","type":"queued"}"#];
    redis.cli(&["XADD", &feed_key, "*", "e", &older.join("\n")]);
    let created = create_at_once(&queue, 1_001).await;

    assert_eq!(redis.cli(&["XLEN", &feed_key]).trim(), "4", "the entry of lines, then a call's entry per 500 created");
    let all = queue.reader().feed_after(&tenant, FeedId::START).await.expect("reads");
    let announced: Vec<String> = all.iter().map(|e| key_of_event(&e.event)).collect();
    let expected: Vec<String> =
        ["tsk_a", "tsk_b"].into_iter().map(str::to_owned).chain(created.iter().map(ToString::to_string)).collect();
    assert_eq!(announced, expected, "every event once, in the order written");
    assert!(all.windows(2).all(|w| w[0].id < w[1].id), "positions increase");
    let after_older = queue.reader().feed_after(&tenant, all[1].id).await.expect("reads");
    assert_eq!(after_older, all[2..], "after the older entry: the new ones");
    let in_second_entry = queue.reader().feed_after(&tenant, all[700].id).await.expect("reads");
    assert_eq!(in_second_entry, all[701..], "from inside the second call's entry: the rest");
}

fn key_of_event(event: &str) -> String {
    let data: Value = serde_json::from_str(event).expect("an event is JSON");
    data["task_id"].as_str().expect("task_id").to_owned()
}
