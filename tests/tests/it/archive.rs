//! Finished tasks past the hot window move to the object store (a real
//! `s3s-fs`) and stay readable through the API exactly as before, for their
//! tenant only: the record, the event replay, listings, batch views and the
//! tenant feed resumed across the archived/hot boundary. A pass killed
//! half-way loses and repeats nothing, and the retention deletes what was
//! archived.

use std::time::Duration;

use flotilla_config::Config;
use flotilla_queue::queue::Queue;
use flotilla_tests::s3_server::S3Server;
use flotilla_tests::tasks::{tenant, wait_all_ended};
use flotilla_tests::{
    api_key, spawn_api_with_blobs, test_config, unique_prefix, ApiClient, InProcessWorker, RedisServer, SseReader,
};
use flotilla_types::TaskId;
use flotilla_worker::Registry;
use serde_json::{json, Value};

const GLOBEX: &str = flotilla_tests::fleet::globex_key();
const STEP: Duration = Duration::from_secs(30);
/// The hot window the tests set.
const HOT_S: i64 = 60;

struct Setup {
    _redis: RedisServer,
    s3: S3Server,
    prefix: String,
    config: Config,
    api: flotilla_tests::ApiServer,
    acme: ApiClient,
    globex: ApiClient,
}

async fn setup() -> Setup {
    let redis = RedisServer::start();
    let s3 = S3Server::start();
    let prefix = unique_prefix();
    let config = test_config(&redis, &prefix, &[("FLOTILLA_ARCHIVE_AFTER_S", &HOT_S.to_string())]);
    let api = spawn_api_with_blobs(config.clone(), s3.store(&prefix)).await;
    let acme = ApiClient::when_ready(&api, api_key()).await;
    let globex = ApiClient::new(&api, GLOBEX);
    Setup { _redis: redis, s3, prefix, config, api, acme, globex }
}

impl Setup {
    /// The queue housekeeping runs the archive pass with.
    async fn archiver(&self) -> Queue {
        Queue::connect(&self.config).await.expect("queue").with_archive(self.s3.store(&self.prefix))
    }

    /// A batch of `n` scripted tasks and `single` more tasks, run to their
    /// end by a worker; returns the batch id and every task id.
    async fn finished_tasks(&self, n: usize, single: usize) -> (String, Vec<String>) {
        let tasks: Vec<Value> =
            (0..n).map(|i| json!({"prompt": format!("row {i}"), "actions": [{"type": "wait", "ms": 1}]})).collect();
        let (status, body) = self.acme.post("/v1/batches", &json!({"defaults": {"pipeline": "scripted"}, "tasks": tasks})).await;
        assert_eq!(status, 202, "{body}");
        let batch = body["id"].as_str().expect("batch id").to_owned();
        let mut ids: Vec<String> =
            body["task_ids"].as_array().expect("task_ids").iter().map(|t| t.as_str().expect("id").to_owned()).collect();
        for i in 0..single {
            let spec = json!({"prompt": format!("alone {i}"), "pipeline": "scripted", "actions": [{"type": "wait", "ms": 1}]});
            let (status, body) = self.acme.post("/v1/tasks", &spec).await;
            assert_eq!(status, 202, "{body}");
            ids.push(body["id"].as_str().expect("id").to_owned());
        }
        let worker = InProcessWorker::start(self.config.clone(), Registry::standard());
        let parsed: Vec<TaskId> = ids.iter().map(|i| TaskId::parse(i).expect("id")).collect();
        wait_all_ended(&Queue::connect(&self.config).await.expect("queue"), &parsed, STEP).await;
        worker.stop().await;
        (batch, ids)
    }

    /// What a user reads of these tasks and their batch (the tenant feed apart).
    async fn views(&self, batch: &str, ids: &[String]) -> Value {
        let mut views = serde_json::Map::new();
        for id in ids {
            let (status, record) = self.acme.get(&format!("/v1/tasks/{id}")).await;
            assert_eq!(status, 200, "{record}");
            let events = self.acme.events_until_closed(&format!("/v1/tasks/{id}/events"), STEP).await;
            let events: Vec<Value> = events.iter().map(|f| serde_json::from_str(&f.data).expect("event JSON")).collect();
            let resumed = self.acme.events_until_closed(&format!("/v1/tasks/{id}/events?after=2"), STEP).await;
            views.insert(id.clone(), json!({"record": record, "events": events, "resumed_after_2": resumed.len()}));
        }
        for path in [
            "/v1/tasks?limit=100".to_owned(),
            "/v1/tasks?limit=2".to_owned(),
            "/v1/tasks?status=succeeded&limit=100".to_owned(),
            "/v1/tasks?status=queued&limit=100".to_owned(),
            format!("/v1/tasks?batch={batch}&limit=100"),
            format!("/v1/batches/{batch}"),
        ] {
            let (status, body) = self.acme.get(&path).await;
            assert_eq!(status, 200, "{path}: {body}");
            views.insert(path, body);
        }
        let batch_events = self.acme.events_until_closed(&format!("/v1/batches/{batch}/events"), STEP).await;
        views.insert(
            "batch events".into(),
            json!(batch_events.iter().map(|f| (f.id.clone(), f.data.clone())).collect::<Vec<_>>()),
        );
        Value::Object(views)
    }

    /// The first `n` frames of the caller's tenant feed after `last`, as
    /// (position, event).
    async fn feed(&self, key: &str, last: &str, n: usize) -> Vec<(String, String)> {
        let response = reqwest::Client::new()
            .get(self.api.url("/v1/events"))
            .bearer_auth(key)
            .header("last-event-id", last)
            .send()
            .await
            .expect("open the feed");
        assert_eq!(response.status().as_u16(), 200);
        let mut reader = SseReader::new(response, STEP);
        let mut frames = Vec::new();
        while frames.len() < n {
            let frame = reader.next().await.expect("a frame");
            if frame.data.is_empty() {
                continue;
            }
            frames.push((frame.id.expect("an id"), frame.data));
        }
        frames
    }

    async fn redis_holds(&self, queue: &Queue, id: &str) -> bool {
        let mut conn = queue.redis().shared();
        let task = TaskId::parse(id).expect("id");
        redis::cmd("EXISTS").arg(queue.keys().task(&task)).query_async(&mut conn).await.expect("EXISTS")
    }

    /// The number of feed entries a set of finished tasks made.
    async fn event_count(&self, ids: &[String]) -> usize {
        let mut n = 0;
        for id in ids {
            let (_, record) = self.acme.get(&format!("/v1/tasks/{id}")).await;
            n += record["last_seq"].as_u64().expect("last_seq") as usize;
        }
        n
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn archived_tasks_read_as_before_and_only_by_their_tenant() {
    let s = setup().await;
    let (batch, ids) = s.finished_tasks(4, 2).await;
    let before = s.views(&batch, &ids).await;
    let events = s.event_count(&ids).await;
    let feed_before = s.feed(api_key(), "0-0", events).await;

    s.config.clock.advance(10 * HOT_S * 1000);
    let archiver = s.archiver().await;
    let pass = archiver.housekeeper().archive_finished().await.expect("archive pass");
    assert_eq!((pass.tasks, pass.entries as usize), (ids.len() as u64, events), "{pass:?}");
    for id in &ids {
        assert!(!s.redis_holds(&archiver, id).await, "task {id} left Redis");
    }

    assert_eq!(s.views(&batch, &ids).await, before, "the API answers as before");
    assert_eq!(s.feed(api_key(), "0-0", events).await, feed_before, "the whole feed replays from the archive");
    // Resumed in the archived part, the feed crosses into the hot part.
    let middle = &feed_before[events / 2].0;
    let (status, body) = s.acme.post("/v1/tasks", &json!({"prompt": "hot", "pipeline": "scripted", "actions": []})).await;
    assert_eq!(status, 202, "{body}");
    let resumed = s.feed(api_key(), middle, events - events / 2).await;
    assert_eq!(resumed[..events - events / 2 - 1], feed_before[events / 2 + 1..], "archived entries after the position");
    let hot: Value = serde_json::from_str(&resumed.last().expect("hot").1).expect("JSON");
    assert_eq!((hot["task_id"].as_str(), hot["type"].as_str()), (body["id"].as_str(), Some("queued")), "then the hot ones");

    // Another tenant reads none of it.
    for id in &ids {
        assert_eq!(s.globex.get(&format!("/v1/tasks/{id}")).await.0, 404);
        assert_eq!(s.globex.get(&format!("/v1/tasks/{id}/events")).await.0, 404);
    }
    assert_eq!(s.globex.get(&format!("/v1/batches/{batch}")).await.0, 404);
    let (_, listed) = s.globex.get("/v1/tasks?limit=100").await;
    assert_eq!(listed["tasks"].as_array().map(Vec::len), Some(0), "{listed}");
    let (status, own) = s.globex.post("/v1/tasks", &json!({"prompt": "mine", "pipeline": "scripted", "actions": []})).await;
    assert_eq!(status, 202, "{own}");
    let globex_feed = s.feed(GLOBEX, "0-0", 1).await;
    let first: Value = serde_json::from_str(&globex_feed[0].1).expect("JSON");
    assert_eq!((first["tenant"].as_str(), first["task_id"].as_str()), (Some("globex"), own["id"].as_str()));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_archive_pass_loses_nothing_and_repeats_nothing() {
    let s = setup().await;
    let (batch, ids) = s.finished_tasks(40, 0).await;
    let before = s.views(&batch, &ids).await;
    let events = s.event_count(&ids).await;
    let feed_before = s.feed(api_key(), "0-0", events).await;
    s.config.clock.advance(10 * HOT_S * 1000);
    let archiver = s.archiver().await;
    let mut conn = archiver.redis().shared();
    let mut half_way = 0;
    // A kill every millisecond later than the last, so one lands inside the
    // pass's moves even when a loaded machine makes them quick or slow.
    for delay_ms in 0..150 {
        let pass = tokio::spawn({
            let archiver = archiver.clone();
            async move { archiver.housekeeper().archive_finished().await }
        });
        // The kill's moment is the scenario, not a wait.
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        pass.abort();
        let _ = pass.await;
        // A killed pass's turn would lapse after two minutes.
        let _: i64 = redis::cmd("DEL").arg(archiver.keys().archiving()).query_async(&mut conn).await.expect("DEL");
        for id in &ids {
            let (status, record) = s.acme.get(&format!("/v1/tasks/{id}")).await;
            assert_eq!((status, &record), (200, &before[id]["record"]), "after a pass killed at {delay_ms} ms");
        }
        let moved: usize =
            redis::cmd("ZCARD").arg(archiver.keys().archived(&tenant())).query_async(&mut conn).await.expect("ZCARD");
        half_way += usize::from(moved > 0 && moved < ids.len());
        if moved == ids.len() {
            break;
        }
    }
    assert!(half_way > 0, "some pass was killed with part of the tasks moved");
    archiver.housekeeper().archive_finished().await.expect("the last pass");
    for id in &ids {
        assert!(!s.redis_holds(&archiver, id).await, "task {id} left Redis");
    }
    let archived: usize =
        redis::cmd("ZCARD").arg(archiver.keys().archived(&tenant())).query_async(&mut conn).await.expect("ZCARD");
    assert_eq!(archived, ids.len());
    assert_eq!(s.views(&batch, &ids).await, before, "every task reads as before");
    assert_eq!(s.feed(api_key(), "0-0", events).await, feed_before, "each feed entry once, in order");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_retention_deletes_archived_tasks_and_feed_segments() {
    let s = setup().await;
    let (_, ids) = s.finished_tasks(3, 0).await;
    s.config.clock.advance(10 * HOT_S * 1000);
    let archiver = s.archiver().await;
    assert_eq!(archiver.housekeeper().archive_finished().await.expect("pass").tasks, 3);
    let store = s.s3.store(&s.prefix);
    let archive_prefix = store.layout().tenant_archive(&tenant());
    assert!(store.list(&archive_prefix).await.expect("list").len() >= 4, "three tasks and a feed segment");

    assert_eq!(archiver.housekeeper().expire_archive().await.expect("expire"), 0, "nothing is past the retention yet");
    s.config.clock.advance(8 * 24 * 3600 * 1000);
    assert_eq!(archiver.housekeeper().expire_archive().await.expect("expire"), 3);
    assert!(store.list(&archive_prefix).await.expect("list").is_empty(), "the store holds nothing of them");
    let mut conn = archiver.redis().shared();
    let archived: usize =
        redis::cmd("ZCARD").arg(archiver.keys().archived(&tenant())).query_async(&mut conn).await.expect("ZCARD");
    assert_eq!(archived, 0);
    for id in &ids {
        assert_eq!(s.acme.get(&format!("/v1/tasks/{id}")).await.0, 404, "task {id} is gone");
    }
    let (_, listed) = s.acme.get("/v1/tasks?limit=100").await;
    assert_eq!(listed["tasks"].as_array().map(Vec::len), Some(0), "{listed}");
}
