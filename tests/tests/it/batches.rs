//! Batches through the API against a real redis-server, with workers in
//! process: defaults under each task, counts that add up as tasks finish,
//! the batch's event stream, cancelling a whole batch, tenants kept apart,
//! a bad task refused before anything is written, the larger body limit,
//! and 10 000 tasks accepted at once and run to the end.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use flotilla_config::Config;
use flotilla_tests::tasks::{queue, tenant};
use flotilla_tests::{spawn_api, test_config, unique_prefix, ApiClient, ApiServer, InProcessWorker, RedisServer};
use flotilla_types::task::Pipeline;
use flotilla_types::TaskId;
use flotilla_worker::Registry;
use serde_json::{json, Value};

/// The other tenant's key (see `test_env`).
const GLOBEX_KEY: &str = flotilla_tests::fleet::globex_key();

struct Fleet {
    redis: RedisServer,
    prefix: String,
    config: Config,
    _api: ApiServer,
    acme: ApiClient,
    globex: ApiClient,
}

async fn fleet(extra: &[(&str, &str)]) -> Fleet {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let config = test_config(&redis, &prefix, extra);
    let api = spawn_api(config.clone()).await;
    let acme = ApiClient::new(&api, flotilla_tests::api_key());
    let globex = ApiClient::new(&api, GLOBEX_KEY);
    wait_ready(&acme).await;
    Fleet { redis, prefix, config, _api: api, acme, globex }
}

async fn wait_ready(api: &ApiClient) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while api.get("/readyz").await.0 != 200 {
        assert!(Instant::now() < deadline, "the api never became ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn wait_task(prompt: &str, ms: u64) -> Value {
    json!({"prompt": prompt, "pipeline": "scripted", "actions": [{"type": "wait", "ms": ms}]})
}

async fn submit(api: &ApiClient, body: &Value) -> (String, Vec<String>) {
    let (status, answer) = api.post("/v1/batches", body).await;
    assert_eq!(status, 202, "{answer}");
    let id = answer["id"].as_str().expect("id").to_owned();
    let tasks = answer["task_ids"].as_array().expect("task_ids").iter().map(|t| t.as_str().expect("id").to_owned()).collect();
    (id, tasks)
}

/// The batch's counts; asserts they add up to its total.
async fn counts(api: &ApiClient, id: &str) -> BTreeMap<String, u64> {
    let (status, batch) = api.get(&format!("/v1/batches/{id}")).await;
    assert_eq!(status, 200, "{batch}");
    let counts: BTreeMap<String, u64> = serde_json::from_value(batch["counts"].clone()).expect("counts");
    assert_eq!(counts.values().sum::<u64>(), batch["total"].as_u64().expect("total"), "counts add up: {batch}");
    counts
}

/// Polls the batch until `done` holds for its counts, checking each read adds up.
async fn wait_counts(
    api: &ApiClient,
    id: &str,
    limit: Duration,
    done: impl Fn(&BTreeMap<String, u64>) -> bool,
) -> BTreeMap<String, u64> {
    let deadline = Instant::now() + limit;
    loop {
        let now = counts(api, id).await;
        if done(&now) {
            return now;
        }
        assert!(Instant::now() < deadline, "batch {id} still at {now:?} after {limit:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every key under the test's prefix.
fn keys_under(redis: &RedisServer, prefix: &str) -> Vec<String> {
    let mut conn = redis.connection();
    let mut keys: Vec<String> = redis::cmd("KEYS").arg(format!("{prefix}:*")).query(&mut conn).expect("KEYS");
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_with_defaults_runs_its_counts_add_up_and_its_stream_ends_with_every_task() {
    let fleet = fleet(&[("FLOTILLA_WORKER_CONCURRENCY", "2")]).await;
    let body = json!({
        "defaults": {"pipeline": "scripted", "actions": [{"type": "wait", "ms": 150}], "metadata": {"suite": "batches"}},
        "tasks": [
            {"prompt": "first"},
            {"prompt": "second", "metadata": {"row": 2}},
            {"prompt": "third", "priority": "high", "actions": [{"type": "wait", "ms": 1}]},
            {"prompt": "fourth"},
            {"prompt": "fifth"},
        ],
    });
    let (id, tasks) = submit(&fleet.acme, &body).await;
    assert!(id.starts_with("bat_"), "{id}");
    assert_eq!(tasks.len(), 5);
    assert_eq!(counts(&fleet.acme, &id).await.get("queued"), Some(&5), "nothing runs yet");

    let (_, second) = fleet.acme.get(&format!("/v1/tasks/{}", tasks[1])).await;
    assert_eq!(second["batch_id"], json!(id));
    assert_eq!(second["spec"]["pipeline"], "scripted", "a default");
    assert_eq!(second["spec"]["metadata"], json!({"suite": "batches", "row": 2}), "objects merge");
    let (_, third) = fleet.acme.get(&format!("/v1/tasks/{}", tasks[2])).await;
    assert_eq!(third["spec"]["actions"], json!([{"type": "wait", "ms": 1}]), "the task's own field wins");
    let (_, listed) = fleet.acme.get(&format!("/v1/tasks?batch={id}")).await;
    assert_eq!(listed["tasks"].as_array().map(Vec::len), Some(5));

    // The stream is opened before any task runs, so it sees history and live events.
    let stream = {
        let path = format!("/v1/batches/{id}/events");
        let opened = fleet.acme.open_events(&path).await;
        tokio::spawn(async move { flotilla_tests::api_client::until_closed(&path, opened, Duration::from_secs(30)).await })
    };
    let worker = InProcessWorker::start(fleet.config.clone(), Registry::standard());
    let done = wait_counts(&fleet.acme, &id, Duration::from_secs(30), |c| c.get("succeeded") == Some(&5)).await;
    assert_eq!(done.get("succeeded"), Some(&5));

    let frames = stream.await.expect("stream task");
    let mut by_task: HashMap<String, Vec<(u64, String)>> = HashMap::new();
    for frame in &frames {
        let event: Value = serde_json::from_str(&frame.data).expect("event JSON");
        assert_eq!(event["batch_id"], json!(id));
        assert_eq!(frame.event.as_deref(), event["type"].as_str());
        let task = event["task_id"].as_str().expect("task_id").to_owned();
        by_task
            .entry(task)
            .or_default()
            .push((event["seq"].as_u64().expect("seq"), event["type"].as_str().expect("type").to_owned()));
    }
    assert_eq!(by_task.len(), 5, "every task's events came");
    for (task, events) in &by_task {
        let seqs: Vec<u64> = events.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "task {task}: each event once, in order");
        assert_eq!(events.last().map(|(_, t)| t.as_str()), Some("succeeded"), "task {task} ends with its terminal event");
    }

    let (_, batch) = fleet.acme.get(&format!("/v1/batches/{id}")).await;
    assert!(batch["finished_at"].is_string(), "a finished batch says when: {batch}");
    let ttl: i64 =
        redis::cmd("PTTL").arg(format!("{}:batch:{{{id}}}", fleet.prefix)).query(&mut fleet.redis.connection()).expect("PTTL");
    assert!(ttl > 0, "a finished batch expires like its tasks");
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_a_batch_cancels_queued_tasks_at_once_and_stops_running_ones() {
    let fleet = fleet(&[("FLOTILLA_WORKER_CONCURRENCY", "2")]).await;
    let tasks: Vec<Value> = (0..6).map(|i| wait_task(&format!("long {i}"), 60_000)).collect();
    let (id, _) = submit(&fleet.acme, &json!({"tasks": tasks})).await;
    let worker = InProcessWorker::start(fleet.config.clone(), Registry::standard());
    wait_counts(&fleet.acme, &id, Duration::from_secs(10), |c| c.get("running") == Some(&2)).await;

    let asked = Instant::now();
    let (status, answer) = fleet.acme.post_empty(&format!("/v1/batches/{id}/cancel")).await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!((answer["cancelled"].as_u64(), answer["cancelling"].as_u64()), (Some(4), Some(2)), "{answer}");
    let done = wait_counts(&fleet.acme, &id, Duration::from_secs(10), |c| c.get("cancelled") == Some(&6)).await;
    assert!(asked.elapsed() < Duration::from_secs(10), "running tasks stop long before their 60 s: {:?}", asked.elapsed());
    assert_eq!(done.get("cancelled"), Some(&6));

    let frames = fleet.acme.events_until_closed(&format!("/v1/batches/{id}/events"), Duration::from_secs(10)).await;
    let cancelled = frames.iter().filter(|f| f.event.as_deref() == Some("cancelled")).count();
    assert_eq!(cancelled, 6, "a finished batch replays every terminal event and closes");
    let (_, again) = fleet.acme.post_empty(&format!("/v1/batches/{id}/cancel")).await;
    assert_eq!(again["already_ended"].as_u64(), Some(6), "{again}");
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn another_tenant_gets_not_found_for_every_batch_call() {
    let fleet = fleet(&[]).await;
    let (id, tasks) = submit(&fleet.acme, &json!({"tasks": [wait_task("mine", 1)]})).await;
    for path in [format!("/v1/batches/{id}"), format!("/v1/batches/{id}/events")] {
        let (status, body) = fleet.globex.get(&path).await;
        assert_eq!((status, body["error"]["code"].as_str()), (404, Some("not_found")), "{path}: {body}");
    }
    let (status, _) = fleet.globex.post_empty(&format!("/v1/batches/{id}/cancel")).await;
    assert_eq!(status, 404);
    let (status, _) = fleet.globex.get(&format!("/v1/tasks/{}", tasks[0])).await;
    assert_eq!(status, 404);
    let (_, listed) = fleet.globex.get(&format!("/v1/tasks?batch={id}")).await;
    assert_eq!(listed["tasks"], json!([]));
    assert_eq!(counts(&fleet.acme, &id).await.get("queued"), Some(&1), "the other tenant's cancel changed nothing");

    let (status, body) = fleet.acme.get("/v1/batches/bat_01jc0000000000000000000000").await;
    assert_eq!((status, body["error"]["message"].as_str()), (404, Some("no such batch")));
    // A task's id names no batch: 404, as an unknown batch; a malformed id is a 400.
    let (status, body) = fleet.acme.get("/v1/batches/tsk_01jc0000000000000000000000").await;
    assert_eq!((status, body["error"]["message"].as_str()), (404, Some("no such batch")));
    let (status, body) = fleet.acme.get("/v1/batches/bat_x").await;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("id")));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_task_is_refused_with_its_index_and_nothing_is_written() {
    let fleet = fleet(&[]).await;
    let before = keys_under(&fleet.redis, &fleet.prefix);
    let good = wait_task("fine", 1);
    let cases = [
        (json!({"tasks": [good, good, good, {"prompt": ""}, good]}), "tasks[3].prompt"),
        (json!({"tasks": [good, good, good, {"prompt": "x", "colour": "red"}]}), "tasks[3]"),
        (json!({"tasks": [good, good, good, {"prompt": "x", "idempotency_key": "k"}]}), "tasks[3].idempotency_key"),
        (json!({"tasks": [good, good, good, {"prompt": "x", "pipeline": "scripted"}]}), "tasks[3].actions"),
        (json!({"tasks": [{"prompt": "x"}], "defaults": {"sandbox": {"resolution": [1, 1]}}}), "defaults.sandbox.resolution"),
        (json!({"tasks": []}), "tasks"),
        (json!({"tasks": [good], "colour": "red"}), ""),
        (
            json!({"tasks": [good, {"prompt": "x", "pipeline": "bogus"}], "matrix": {"pipeline": ["openai-cua"]}}),
            "tasks[1].pipeline",
        ),
    ];
    for (body, field) in cases {
        let (status, answer) = fleet.acme.post("/v1/batches", &body).await;
        assert_eq!((status, answer["error"]["code"].as_str()), (400, Some("invalid_request")), "{answer}");
        let got = answer["error"]["field"].as_str().unwrap_or("");
        assert!(got.starts_with(field), "want field {field:?}, got {answer}");
    }
    // A plan over the run cap is a batch too large, not a malformed one.
    let over_cap = json!({"tasks": vec![good; 200], "repeat": 51});
    let (status, answer) = fleet.acme.post("/v1/batches", &over_cap).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (413, Some("payload_too_large")), "{answer}");
    assert!(answer["error"]["message"].as_str().is_some_and(|m| m.contains("10200") && m.contains("10000")), "{answer}");
    assert_eq!(keys_under(&fleet.redis, &fleet.prefix), before, "a refused batch writes nothing");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_body_may_exceed_the_task_limit_up_to_its_own() {
    let fleet = fleet(&[("FLOTILLA_BATCH_BODY_LIMIT", "4194304")]).await;
    let prompt = "p".repeat(1_000);
    let tasks: Vec<Value> = (0..2_000).map(|_| json!({"prompt": prompt})).collect();
    let body = json!({"defaults": {"pipeline": "openai-cua"}, "tasks": tasks});
    assert!(body.to_string().len() > 1024 * 1024, "over the 1 MiB task limit");
    let (_, ids) = submit(&fleet.acme, &body).await;
    assert_eq!(ids.len(), 2_000);

    let huge: Vec<Value> = (0..5_000).map(|_| json!({"prompt": prompt})).collect();
    let (status, answer) = fleet.acme.post("/v1/batches", &json!({"tasks": huge})).await;
    assert_eq!((status, answer["error"]["code"].as_str()), (413, Some("payload_too_large")), "{answer}");
    assert!(answer["error"]["message"].as_str().is_some_and(|m| m.contains("4194304")), "{answer}");
    let (status, _) = fleet.acme.post("/v1/tasks", &json!({"prompt": "q".repeat(1_100_000)})).await;
    assert_eq!(status, 413, "other routes keep their limit");
}

#[tokio::test(flavor = "multi_thread")]
async fn ten_thousand_tasks_are_accepted_at_once_and_all_accounted_for() {
    const N: usize = 10_000;
    let fleet = fleet(&[("FLOTILLA_WORKER_CONCURRENCY", "100")]).await;
    let tasks: Vec<Value> = (0..N).map(|i| json!({"prompt": format!("task {i}")})).collect();
    let body = json!({"defaults": {"pipeline": "scripted", "actions": [{"type": "wait", "ms": 1}]}, "tasks": tasks});
    let workers: Vec<InProcessWorker> = (0..2)
        .map(|i| {
            let mut config = fleet.config.clone();
            config.worker.id = format!("bulk-{i}");
            InProcessWorker::start(config, Registry::standard())
        })
        .collect();

    let asked = Instant::now();
    let (id, ids) = submit(&fleet.acme, &body).await;
    let accept = asked.elapsed();
    assert_eq!(ids.len(), N);
    let distinct: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), N, "every task has its own id");

    let count_started = Instant::now();
    counts(&fleet.acme, &id).await;
    let one_count = count_started.elapsed();
    let done =
        wait_counts(&fleet.acme, &id, Duration::from_secs(180), |c| c.get("succeeded").copied().unwrap_or(0) == N as u64).await;
    let total = asked.elapsed();
    assert_eq!(done.get("succeeded"), Some(&(N as u64)), "{done:?}");
    let count_started = Instant::now();
    counts(&fleet.acme, &id).await;
    let idle_count = count_started.elapsed();
    eprintln!(
        "10000-task batch: accepted in {} ms; all succeeded {} ms after the request ({:.0} tasks/s through 2 in-process workers of concurrency 100); GET /v1/batches/{{id}} took {} ms while they ran, {} ms after",
        accept.as_millis(),
        total.as_millis(),
        N as f64 / total.as_secs_f64(),
        one_count.as_millis(),
        idle_count.as_millis()
    );

    let q = queue(&fleet.config).await;
    let sample: Vec<TaskId> = ids.iter().step_by(997).map(|i| TaskId::parse(i).expect("id")).collect();
    for id in &sample {
        let record = q.reader().get(&tenant(), id).await.expect("get").expect("exists");
        assert_eq!(record.spec.pipeline, Some(Pipeline::Scripted));
    }
    for worker in workers {
        worker.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_janitor_seals_a_finished_batch_so_it_expires_with_its_tasks() {
    let fleet = fleet(&[]).await;
    let (id, _) = submit(&fleet.acme, &json!({"tasks": [wait_task("a", 1), wait_task("b", 1)]})).await;
    let q = queue(&fleet.config).await;
    let open = format!("{}:{{q}}:batches:open", fleet.prefix);
    let batch_key = format!("{}:batch:{{{id}}}", fleet.prefix);
    assert_eq!(q.housekeeper().seal_finished_batches().await.expect("seal"), 0, "its tasks are still queued");
    let ttl: i64 = redis::cmd("PTTL").arg(&batch_key).query(&mut fleet.redis.connection()).expect("PTTL");
    assert_eq!(ttl, -1, "an open batch does not expire");

    let batch =
        q.reader().batch(&tenant(), &flotilla_types::BatchId::parse(&id).expect("id")).await.expect("batch").expect("exists");
    assert_eq!(q.submitter().cancel_batch(&batch).await.expect("cancel").cancelled, 2);
    assert_eq!(q.housekeeper().seal_finished_batches().await.expect("seal"), 1);
    let mut conn = fleet.redis.connection();
    let ttl: i64 = redis::cmd("PTTL").arg(&batch_key).query(&mut conn).expect("PTTL");
    assert!(ttl > 0, "a sealed batch expires");
    let still_open: i64 = redis::cmd("ZCARD").arg(&open).query(&mut conn).expect("ZCARD");
    assert_eq!(still_open, 0);
    let (_, view) = fleet.acme.get(&format!("/v1/batches/{id}")).await;
    assert!(view["finished_at"].is_string(), "{view}");
}

/// Whole specs `POST /v1/tasks` takes, each with nested objects to split.
fn whole_specs() -> Vec<Value> {
    vec![
        json!({"prompt": "p", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 1}], "retry": {"max_attempts": 2},
            "budget": {"max_tokens": 1000, "max_sandbox_s": 60}, "metadata": {"a": "b", "c": "d"}, "max_steps": 4}),
        json!({"prompt": "p", "pipeline": "openai-cua", "not_before": "2999-01-01T00:00:00Z",
            "sandbox": {"resolution": [1280, 800], "timeout_s": 60}, "priority": "low", "model": "m"}),
    ]
}

/// `spec` cut in two at random: the defaults get some fields (of a nested
/// object, some of its keys), the task the rest; sometimes the defaults
/// also get a field the spec lacks, which the task removes with `null`.
fn split(spec: &Value, rng: &mut impl rand::Rng) -> (Value, Value) {
    let (mut defaults, mut task) = (serde_json::Map::new(), serde_json::Map::new());
    for (field, value) in spec.as_object().expect("object") {
        match value.as_object() {
            Some(nested) if nested.len() > 1 && rng.random_bool(0.5) => {
                let (mut d, mut t) = (serde_json::Map::new(), serde_json::Map::new());
                for (key, inner) in nested {
                    if rng.random_bool(0.5) {
                        d.insert(key.clone(), inner.clone())
                    } else {
                        t.insert(key.clone(), inner.clone())
                    };
                }
                defaults.insert(field.clone(), Value::Object(d));
                task.insert(field.clone(), Value::Object(t));
            }
            _ if rng.random_bool(0.5) => drop(defaults.insert(field.clone(), value.clone())),
            _ => drop(task.insert(field.clone(), value.clone())),
        }
    }
    if spec.get("max_duration_s").is_none() && rng.random_bool(0.3) {
        defaults.insert("max_duration_s".into(), json!(30));
        task.insert("max_duration_s".into(), Value::Null);
    }
    (Value::Object(defaults), Value::Object(task))
}

/// Positive cases of the merge: every way of cutting a valid spec between
/// `defaults` and a task (nested objects key by key, a default removed
/// with `null`) is accepted, and each task is stored as the whole spec.
#[tokio::test(flavor = "multi_thread")]
async fn every_split_of_a_valid_spec_between_defaults_and_task_is_accepted_as_that_spec() {
    use rand::SeedableRng;
    let fleet = fleet(&[]).await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(18);
    for spec in whole_specs() {
        let (status, body) = fleet.acme.post("/v1/tasks", &spec).await;
        assert_eq!(status, 202, "the whole spec is valid alone: {body}");
        for _ in 0..25 {
            let (defaults, task) = split(&spec, &mut rng);
            let batch = json!({"defaults": defaults, "tasks": [task.clone(), task]});
            let (status, body) = fleet.acme.post("/v1/batches", &batch).await;
            assert_eq!(status, 202, "{batch}: {body}");
            let first = body["task_ids"][0].as_str().expect("id");
            let (_, stored) = fleet.acme.get(&format!("/v1/tasks/{first}")).await;
            for (field, value) in spec.as_object().expect("object") {
                assert_eq!(&stored["spec"][field], value, "{field} of {batch}: {stored}");
            }
            assert!(stored["spec"]["max_duration_s"].is_null(), "a default removed with null stays removed: {stored}");
        }
    }
}

/// The document's examples of `POST /v1/batches` are each accepted.
#[tokio::test(flavor = "multi_thread")]
async fn the_documents_batch_examples_are_each_accepted() {
    let fleet = fleet(&[]).await;
    let (status, doc) = fleet.acme.get("/openapi.json").await;
    assert_eq!(status, 200);
    let examples = doc["paths"]["/v1/batches"]["post"]["requestBody"]["content"]["application/json"]["examples"]
        .as_object()
        .expect("the document has batch examples")
        .clone();
    assert!(examples.len() >= 4, "{examples:?}");
    for (name, example) in examples {
        let (status, body) = fleet.acme.post("/v1/batches", &example["value"]).await;
        assert_eq!(status, 202, "example {name}: {body}");
    }
}

/// Values a sampled field takes: `None` leaves the key out.
type Pool = &'static [Option<&'static str>];

/// The fields of sampled `defaults`, each with the values it may hold
/// (JSON text); those marked `!` are refused on their own.
const DEFAULTS_POOL: [(&str, Pool); 13] = [
    (
        "pipeline",
        &[
            None,
            None,
            Some("null"),
            Some(r#""scripted""#),
            Some(r#""claude-code""#),
            Some(r#""openai-cua""#),
            Some(r#""gemini-computer-use""#),
        ],
    ),
    ("actions", &[None, None, Some("null"), Some(r#"[{"type": "wait", "ms": 1}]"#), Some("[]")]),
    ("replay_of", &[None, None, None, Some("null"), Some(r#""tsk_00000000000000000000000000""#)]),
    (
        "files",
        &[
            None,
            None,
            Some("null"),
            Some(r#"{"s3_prefix": "in/"}"#),
            Some(r#"{"a.txt": "x"}"#),
            Some("{}"),
            Some(r#"!{"s3_prefix": "in/", "b": 1}"#),
        ],
    ),
    ("continue_task", &[None, None, None, Some("null"), Some(r#""tsk_00000000000000000000000000""#)]),
    ("prompt", &[None, Some(r#""shared""#), Some(r#"!" ""#)]),
    ("retry", &[None, None, Some("null"), Some(r#"{"max_attempts": 2}"#), Some("!{}")]),
    ("sandbox", &[None, None, Some(r#"{"resolution": [1280, 800]}"#), Some(r#"{"resolution": null}"#)]),
    ("budget", &[None, None, Some(r#"{"max_sandbox_s": 60}"#)]),
    ("metadata", &[None, None, Some(r#"{"k": "v", "n": null}"#)]),
    ("idempotency_key", &[None, None, None, Some("null"), Some(r#"!"k""#)]),
    ("max_steps", &[None, None, None, Some("3"), Some("!0")]),
    (
        "check",
        &[
            None,
            None,
            Some("null"),
            Some(r#"{"command": "true"}"#),
            Some(r#"{"actions": [{"type": "wait", "ms": 1}]}"#),
            Some(r#"{"command": "true", "actions": [{"type": "wait", "ms": 1}]}"#),
            Some(r#"!{"timeout_s": 5}"#),
            Some(r#"!{"actions": null}"#),
        ],
    ),
];

/// The fields of a sampled task (a merge patch): given, removed with
/// `null`, or left to inherit, nested keys alike.
const TASK_POOL: [(&str, Pool); 16] = [
    (
        "pipeline",
        &[
            None,
            None,
            None,
            Some("null"),
            Some(r#""scripted""#),
            Some(r#""claude-code""#),
            Some(r#""openai-cua""#),
            Some(r#""claude-computer-use""#),
            Some(r#"!"bogus""#),
        ],
    ),
    ("model", &[None, None, Some("null"), Some(r#""m2""#), Some(r#"!"""#), Some("!7")]),
    ("actions", &[None, None, Some("null"), Some(r#"[{"type": "wait", "ms": 2}]"#)]),
    ("replay_of", &[None, None, None, Some("null"), Some(r#""tsk_00000000000000000000000001""#)]),
    (
        "files",
        &[
            None,
            None,
            None,
            Some("null"),
            Some(r#"{"b.txt": "y"}"#),
            Some(r#"{"s3_prefix": "p"}"#),
            Some(r#"{"s3_prefix": null}"#),
            Some(r#"{"s3_prefix": null, "c.txt": "z"}"#),
            Some(r#"{"../x": null}"#),
            Some(r#"!{"../x": "bad"}"#),
            Some(r#"!{"": "e"}"#),
            Some(r#"{"a.txt": null, "b": null}"#),
            Some(r#"!{"a.txt": 5}"#),
            Some(r#"!{"a.txt": {"x": "y"}}"#),
            Some("{}"),
        ],
    ),
    ("continue_task", &[None, None, None, Some("null"), Some(r#""tsk_00000000000000000000000002""#)]),
    ("prompt", &[None, None, Some(r#""own""#), Some(r#""own""#), Some("null")]),
    (
        "retry",
        &[
            None,
            None,
            Some("null"),
            Some("{}"),
            Some(r#"{"max_attempts": null}"#),
            Some(r#"{"max_attempts": 3}"#),
            Some(r#"{"x": null}"#),
            Some(r#"!{"max_attempts": 0}"#),
        ],
    ),
    (
        "sandbox",
        &[
            None,
            None,
            Some("null"),
            Some(r#"{"resolution": null}"#),
            Some(r#"{"colour": null}"#),
            Some(r#"!{"colour": "red"}"#),
            Some(r#"!{"timeout_s": 5}"#),
        ],
    ),
    ("budget", &[None, None, Some(r#"{"max_tokens": null}"#), Some(r#"{"max_tokens": 10, "max_sandbox_s": null}"#)]),
    ("metadata", &[None, None, Some(r#"{"k": null}"#), Some(r#"{"k": {"n": null}}"#), Some("![1]")]),
    ("idempotency_key", &[None, None, None, Some("null"), Some(r#"!"k""#)]),
    ("colour", &[None, None, None, Some("null"), Some(r#"!"red""#), Some("!{}")]),
    ("max_steps", &[None, None, None, Some("null"), Some("4"), Some("!0")]),
    ("not_before", &[None, None, Some(r#""2999-01-01T00:00:00Z""#)]),
    (
        "check",
        &[
            None,
            None,
            Some("null"),
            Some("{}"),
            Some(r#"{"command": null}"#),
            Some(r#"{"actions": null}"#),
            Some(r#"{"command": "x"}"#),
            Some(r#"{"actions": [{"type": "wait", "ms": 2}]}"#),
            Some(r#"{"actions": []}"#),
            Some(r#"{"command": null, "actions": null}"#),
            Some(r#"{"timeout_s": 3}"#),
        ],
    ),
];

/// An object of fields drawn from `pool`; values marked `!` (refused on
/// their own) only for the field `bad`, if any.
fn sampled(pool: &[(&str, Pool)], bad: Option<usize>, rng: &mut impl rand::Rng) -> serde_json::Map<String, Value> {
    let mut object = serde_json::Map::new();
    for (i, (field, values)) in pool.iter().enumerate() {
        let allowed: Vec<Option<&str>> =
            values.iter().copied().filter(|v| bad == Some(i) || !v.is_some_and(|t| t.starts_with('!'))).collect();
        if let Some(text) = allowed[rng.random_range(0..allowed.len())] {
            let value = serde_json::from_str(text.trim_start_matches('!')).expect("pool values are JSON");
            object.insert((*field).to_owned(), value);
        }
    }
    object
}

/// A field index of `pool` to draw a bad value for, one time in `n`.
fn bad_field(pool: &[(&str, Pool)], n: usize, rng: &mut impl rand::Rng) -> Option<usize> {
    (rng.random_range(0..n) == 0).then(|| rng.random_range(0..pool.len()))
}

/// A sampled batch body: no `defaults`, `null` or an object, and one or
/// two tasks.
fn sampled_body(rng: &mut impl rand::Rng) -> Value {
    let mut body = serde_json::Map::new();
    match rng.random_range(0..20) {
        0 => {}
        1 => drop(body.insert("defaults".into(), Value::Null)),
        _ => {
            let bad = bad_field(&DEFAULTS_POOL, 8, rng);
            body.insert("defaults".into(), Value::Object(sampled(&DEFAULTS_POOL, bad, rng)));
        }
    }
    let tasks = (0..if rng.random_bool(0.2) { 2 } else { 1 })
        .map(|_| {
            let bad = bad_field(&TASK_POOL, 12, rng);
            Value::Object(sampled(&TASK_POOL, bad, rng))
        })
        .collect();
    body.insert("tasks".into(), Value::Array(tasks));
    let matrices = [
        r#"{"pipeline": ["scripted"]}"#,
        r#"{"pipeline": ["claude-code"]}"#,
        r#"{"pipeline": ["openai-cua", "gemini-computer-use"]}"#,
        r#"{"pipeline": ["claude-code", "openai-cua"]}"#,
        r#"{"pipeline": ["scripted", "openai-cua"]}"#,
        r#"{"pipeline": null, "model": ["m"]}"#,
        "null",
    ];
    if rng.random_bool(0.3) {
        let matrix = matrices[rng.random_range(0..matrices.len())];
        body.insert("matrix".into(), serde_json::from_str(matrix).expect("matrices are JSON"));
    }
    Value::Object(body)
}

/// Whether the server takes `body` as `POST /v1/batches` reads it: its
/// plan (the matrix's cells laid over each task), then each merged spec.
fn taken_by_server(body: &Value, default: Pipeline) -> Result<(), String> {
    let tasks = body["tasks"].as_array().expect("tasks");
    let matrix: Option<flotilla_types::eval_plan::Matrix> =
        body.get("matrix").and_then(|m| serde_json::from_value(m.clone()).expect("sampled matrices are well formed"));
    let asked = flotilla_queue::queue::PlanRequest { repeat: None, best_of: None, stop_on_pass: None, matrix: matrix.as_ref() };
    let (tasks, _) = flotilla_queue::queue::plan_batch(tasks, asked).map_err(|e| e.to_string())?;
    flotilla_queue::queue::batch_specs(&tasks, body["defaults"].as_object(), default).map(drop).map_err(|e| e.to_string())
}

/// Which of `bodies` the document's `BatchRequest` schema admits, by
/// `jsonschema_rs` (a third-party validator, installed with schemathesis by
/// `scripts/setup.sh`).
fn valid_by_document(doc: &Value, bodies: &[Value]) -> Vec<bool> {
    let dir = std::env::temp_dir().join(format!("batch-schema-{}", unique_prefix()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let schema = json!({"$ref": "#/components/schemas/BatchRequest", "components": doc["components"]});
    std::fs::write(dir.join("schema.json"), schema.to_string()).expect("write schema");
    let lines: Vec<String> = bodies.iter().map(Value::to_string).collect();
    std::fs::write(dir.join("bodies.jsonl"), lines.join("\n")).expect("write bodies");
    let script = "import json, sys, jsonschema_rs\n\
        v = jsonschema_rs.Draft202012Validator(json.load(open(sys.argv[1])))\n\
        print(''.join('1' if v.is_valid(json.loads(l)) else '0' for l in open(sys.argv[2])))";
    let output = std::process::Command::new(flotilla_tests::python::venv_python())
        .args(["-c", script])
        .arg(dir.join("schema.json"))
        .arg(dir.join("bodies.jsonl"))
        .output()
        .expect("the venv's python runs: `bash scripts/setup.sh`");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let verdicts: Vec<bool> = String::from_utf8_lossy(&output.stdout).trim().chars().map(|c| c == '1').collect();
    assert_eq!(verdicts.len(), bodies.len());
    verdicts
}

/// The document states exactly which batches the server takes, though a
/// task's validity depends on what `defaults` holds: for each default
/// pipeline, thousands of sampled bodies (`defaults` in every state of the
/// merge rules, tasks giving, removing or inheriting each field, nested
/// keys too, some values bad on their own, a check's command and actions
/// given, kept or removed, matrices of pipelines that suit a spec together
/// and of some that do not) are valid by the document's schema exactly when
/// the server takes them.
#[tokio::test(flavor = "multi_thread")]
async fn the_batch_schema_agrees_with_the_server() {
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(1807);
    for default in [Pipeline::Scripted, Pipeline::OpenaiCua, Pipeline::ClaudeCode] {
        let fleet = fleet(&[("FLOTILLA_DEFAULT_PIPELINE", default.as_str())]).await;
        let (status, doc) = fleet.acme.get("/openapi.json").await;
        assert_eq!(status, 200);
        let bodies: Vec<Value> = (0..4000).map(|_| sampled_body(&mut rng)).collect();
        let documented = valid_by_document(&doc, &bodies);
        let mut taken = 0;
        for (body, documented) in bodies.iter().zip(documented) {
            let server = taken_by_server(body, default);
            assert_eq!(documented, server.is_ok(), "default {default:?}, {body}: the server says {server:?}");
            taken += usize::from(documented);
        }
        assert!((100..=3900).contains(&taken), "{taken} of 4000 taken with default {default:?}: sample both sides");
    }
}
