//! Malformed and hostile requests against the real API over TCP, backed by a
//! real redis-server. Each row of the table states the request (method,
//! path, headers, body) and the answer it must get (status, `error.code`,
//! and the field when one is named). Every row must also leave Redis exactly
//! as it was: the test compares a fingerprint of every key under the test's
//! prefix before and after each request.

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_tests::{api_key, spawn_api, test_config, unique_prefix, ApiServer, RedisServer};
use flotilla_types::TaskId;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use reqwest::Method;
use serde_json::{json, Value};

const GLOBEX_KEY: &str = flotilla_tests::fleet::globex_key();

/// What a row must get back.
#[derive(Debug)]
enum Expect {
    /// An error with this status and code, naming `field` when given.
    Error { status: u16, code: &'static str, field: Option<&'static str> },
    /// 200 and the id of the task an earlier identical request made.
    Replay { id: String },
}

/// One request of the table.
#[derive(Debug)]
struct Row {
    name: &'static str,
    method: Method,
    path: String,
    headers: Vec<(&'static str, String)>,
    body: Option<Vec<u8>>,
    expect: Expect,
}

impl Row {
    /// A request with the acme key and no body.
    fn new(name: &'static str, method: Method, path: impl Into<String>) -> Self {
        Self {
            name,
            method,
            path: path.into(),
            headers: vec![("authorization", format!("Bearer {}", api_key()))],
            body: None,
            expect: Expect::Error { status: 0, code: "", field: None },
        }
    }

    fn get(name: &'static str, path: impl Into<String>) -> Self {
        Self::new(name, Method::GET, path)
    }

    fn post(name: &'static str, path: impl Into<String>) -> Self {
        Self::new(name, Method::POST, path)
    }

    /// A JSON body, as text (so it may be malformed).
    fn json_text(self, text: impl Into<String>) -> Self {
        self.body_with_type("application/json", text.into().into_bytes())
    }

    fn json(self, value: Value) -> Self {
        self.json_text(value.to_string())
    }

    fn body_with_type(mut self, content_type: &str, body: Vec<u8>) -> Self {
        self.headers.retain(|(name, _)| *name != "content-type");
        self.headers.push(("content-type", content_type.to_owned()));
        self.body = Some(body);
        self
    }

    fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.retain(|(n, _)| *n != name);
        self.headers.push((name, value.into()));
        self
    }

    fn without_header(mut self, name: &'static str) -> Self {
        self.headers.retain(|(n, _)| *n != name);
        self
    }

    fn by_globex(self) -> Self {
        self.header("authorization", format!("Bearer {GLOBEX_KEY}"))
    }

    fn expect(mut self, status: u16, code: &'static str) -> Self {
        self.expect = Expect::Error { status, code, field: None };
        self
    }

    fn expect_field(mut self, status: u16, code: &'static str, field: &'static str) -> Self {
        self.expect = Expect::Error { status, code, field: Some(field) };
        self
    }

    fn expect_replay_of(mut self, id: &str) -> Self {
        self.expect = Expect::Replay { id: id.to_owned() };
        self
    }
}

/// A spec every check accepts.
fn valid_spec() -> Value {
    json!({"prompt": "open the settings and turn on dark mode", "pipeline": "openai-cua"})
}

/// `valid_spec` with `changes` merged in at the top level.
fn spec_with(changes: Value) -> Value {
    let mut spec = valid_spec();
    for (k, v) in changes.as_object().expect("changes are an object") {
        spec[k] = v.clone();
    }
    spec
}

/// A scripted spec with these actions.
fn scripted(actions: Value) -> Value {
    json!({"prompt": "replay the login", "pipeline": "scripted", "actions": actions})
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(20)).build().expect("http client")
}

async fn send(api: &ApiServer, row: &Row) -> reqwest::Response {
    let mut headers = HeaderMap::new();
    for (name, value) in &row.headers {
        headers.insert(HeaderName::from_static(name), HeaderValue::from_str(value).expect("header value"));
    }
    let mut request = client().request(row.method.clone(), api.url(&row.path)).headers(headers);
    if let Some(body) = &row.body {
        request = request.body(body.clone());
    }
    request.send().await.unwrap_or_else(|e| panic!("{}: request failed: {e}", row.name))
}

/// Submits `spec` as acme and returns the new task's id.
async fn submit(api: &ApiServer, spec: &Value) -> String {
    let response = client()
        .post(api.url("/v1/tasks"))
        .header(AUTHORIZATION, format!("Bearer {}", api_key()))
        .json(spec)
        .send()
        .await
        .expect("submit");
    assert_eq!(response.status().as_u16(), 202, "setup submit");
    let body: Value = response.json().await.expect("submit body");
    body["id"].as_str().expect("id").to_owned()
}

/// Everything under `prefix`: each key's type, contents and whether it expires.
async fn fingerprint(redis: &RedisServer, prefix: &str) -> BTreeMap<String, String> {
    let client = redis::Client::open(redis.url()).expect("redis client");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis connection");
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{prefix}:*")).query_async(&mut conn).await.expect("KEYS");
    let mut prints = BTreeMap::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE").arg(&key).query_async(&mut conn).await.expect("TYPE");
        let contents = match kind.as_str() {
            "string" => {
                let v: String = redis::cmd("GET").arg(&key).query_async(&mut conn).await.expect("GET");
                v
            }
            "hash" => {
                let v: BTreeMap<String, String> = redis::cmd("HGETALL").arg(&key).query_async(&mut conn).await.expect("HGETALL");
                format!("{v:?}")
            }
            "list" => {
                let v: Vec<String> = redis::cmd("LRANGE").arg(&key).arg(0).arg(-1).query_async(&mut conn).await.expect("LRANGE");
                format!("{v:?}")
            }
            "set" => {
                let mut v: Vec<String> = redis::cmd("SMEMBERS").arg(&key).query_async(&mut conn).await.expect("SMEMBERS");
                v.sort();
                format!("{v:?}")
            }
            "zset" => {
                let v: Vec<(String, f64)> =
                    redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1).arg("WITHSCORES").query_async(&mut conn).await.expect("ZRANGE");
                format!("{v:?}")
            }
            "stream" => {
                let entries: redis::Value =
                    redis::cmd("XRANGE").arg(&key).arg("-").arg("+").query_async(&mut conn).await.expect("XRANGE");
                let groups: redis::Value =
                    redis::cmd("XINFO").arg("GROUPS").arg(&key).query_async(&mut conn).await.expect("XINFO");
                format!("{entries:?} {groups:?}")
            }
            other => format!("unexpected type {other}"),
        };
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut conn).await.expect("PTTL");
        let expiry = if ttl >= 0 { "expiring" } else { "persistent" };
        prints.insert(key, format!("{kind} {expiry} {contents}"));
    }
    prints
}

/// The keys whose fingerprint differs between two snapshots.
fn changed_keys(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    let mut keys: Vec<String> = before.keys().chain(after.keys()).filter(|k| before.get(*k) != after.get(*k)).cloned().collect();
    keys.dedup();
    keys
}

/// Sends `row` and checks its answer; returns a description of any mismatch.
async fn check(api: &ApiServer, row: &Row) -> Option<String> {
    let response = send(api, row).await;
    let status = response.status().as_u16();
    let content_type = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let text = response.text().await.unwrap_or_default();
    let body: Value = match serde_json::from_str(&text) {
        Ok(body) => body,
        Err(_) => return Some(format!("{}: {status} body is not JSON: {text:?}", row.name)),
    };
    if !content_type.starts_with("application/json") {
        return Some(format!("{}: content-type {content_type:?}", row.name));
    }
    match &row.expect {
        Expect::Error { status: want_status, code, field } => {
            let got_code = body["error"]["code"].as_str().unwrap_or("");
            let got_field = body["error"]["field"].as_str();
            let message = body["error"]["message"].as_str().unwrap_or("");
            if status != *want_status || got_code != *code {
                return Some(format!("{}: want {want_status} {code}, got {status} {got_code}: {text}", row.name));
            }
            if field.is_some() && got_field != *field {
                return Some(format!("{}: want field {field:?}, got {got_field:?}: {text}", row.name));
            }
            if message.is_empty() || message.contains("panicked") || message.contains(".rs:") {
                return Some(format!("{}: message {message:?}", row.name));
            }
            None
        }
        Expect::Replay { id } => {
            if status != 200 || body["id"] != json!(id) {
                return Some(format!("{}: want 200 with id {id}, got {status}: {text}", row.name));
            }
            None
        }
    }
}

fn table(acme_task: &str, cancelled_task: &str, idem_task: &str, idem_spec: &Value) -> Vec<Row> {
    let absent = TaskId::generate().to_string();
    let long_prompt = "x".repeat(20_001);
    let over_limit = format!(r#"{{"prompt":"{}","pipeline":"openai-cua"}}"#, "y".repeat(1024 * 1024));
    let big_metadata = json!({"blob": "z".repeat(16 * 1024)});
    let deep = format!("{}{}", "[".repeat(300), "]".repeat(300));
    let mut idem_changed = idem_spec.clone();
    idem_changed["prompt"] = json!("a different prompt under the same key");
    let events = format!("/v1/tasks/{acme_task}/events");
    vec![
        // Bodies that are not a JSON object.
        Row::post("not json", "/v1/tasks").json_text("prompt=hello").expect(400, "invalid_request"),
        Row::post("truncated json", "/v1/tasks")
            .json_text(r#"{"prompt": "open the sett"#)
            .expect(400, "invalid_request"),
        Row::post("array instead of object", "/v1/tasks").json(json!([valid_spec()])).expect(400, "invalid_request"),
        Row::post("json null", "/v1/tasks").json_text("null").expect(400, "invalid_request"),
        Row::post("empty body", "/v1/tasks").json_text("").expect(400, "invalid_request"),
        Row::post("nesting 300 deep", "/v1/tasks")
            .json_text(format!(r#"{{"prompt":"x","pipeline":"openai-cua","metadata":{{"a":{deep}}}}}"#))
            .expect(400, "invalid_request"),
        Row::post("duplicate field", "/v1/tasks")
            .json_text(r#"{"prompt":"a","prompt":"b","pipeline":"openai-cua"}"#)
            .expect(400, "invalid_request"),
        // Wrong types and unknown fields.
        Row::post("prompt is a number", "/v1/tasks").json(json!({"prompt": 5})).expect_field(
            400,
            "invalid_request",
            "prompt",
        ),
        Row::post("unknown top-level field", "/v1/tasks").json(spec_with(json!({"colour": "red"}))).expect_field(
            400,
            "invalid_request",
            "colour",
        ),
        Row::post("unknown nested field", "/v1/tasks")
            .json(spec_with(json!({"sandbox": {"provider": "local", "colour": "red"}})))
            .expect_field(400, "invalid_request", "sandbox.colour"),
        // serde reads a struct from an array too (fields by position): refused.
        Row::post("sandbox is an array", "/v1/tasks")
            .json(spec_with(json!({"sandbox": ["local", null, [1024, 768]]})))
            .expect_field(400, "invalid_request", "sandbox"),
        Row::post("retry is an array", "/v1/tasks").json(spec_with(json!({"retry": [3]}))).expect_field(
            400,
            "invalid_request",
            "retry",
        ),
        Row::post("budget is an array", "/v1/tasks").json(spec_with(json!({"budget": [1000, 60]}))).expect_field(
            400,
            "invalid_request",
            "budget",
        ),
        Row::post("batch task's sandbox is an array", "/v1/batches")
            .json(json!({"tasks": [spec_with(json!({"sandbox": [null, null, [1024, 768]]}))]}))
            .expect_field(400, "invalid_request", "tasks[0].sandbox"),
        Row::post("schedule's task is an array", "/v1/schedules")
            .json(json!({"cron": "0 * * * *", "task": ["hello"]}))
            .expect_field(400, "invalid_request", "task"),
        Row::post("max_steps is a string", "/v1/tasks").json(spec_with(json!({"max_steps": "ten"}))).expect_field(
            400,
            "invalid_request",
            "max_steps",
        ),
        // Values out of bounds.
        Row::post("missing prompt", "/v1/tasks").json(json!({"pipeline": "openai-cua"})).expect(400, "invalid_request"),
        Row::post("empty prompt", "/v1/tasks").json(spec_with(json!({"prompt": ""}))).expect_field(
            400,
            "invalid_request",
            "prompt",
        ),
        Row::post("blank prompt", "/v1/tasks").json(spec_with(json!({"prompt": " \n\t "}))).expect_field(
            400,
            "invalid_request",
            "prompt",
        ),
        Row::post("prompt of 20 001 characters", "/v1/tasks")
            .json(spec_with(json!({"prompt": long_prompt})))
            .expect_field(400, "invalid_request", "prompt"),
        Row::post("body over 1 MiB", "/v1/tasks").json_text(over_limit).expect(413, "payload_too_large"),
        Row::post("unknown pipeline", "/v1/tasks").json(spec_with(json!({"pipeline": "gpt-9"}))).expect_field(
            400,
            "invalid_request",
            "pipeline",
        ),
        Row::post("unknown priority", "/v1/tasks").json(spec_with(json!({"priority": "urgent"}))).expect_field(
            400,
            "invalid_request",
            "priority",
        ),
        Row::post("unknown action type", "/v1/tasks")
            .json(scripted(json!([{"type": "teleport", "x": 1, "y": 2}])))
            .expect_field(400, "invalid_request", "actions[0].type"),
        Row::post("action with unknown field", "/v1/tasks")
            .json(scripted(json!([{"type": "click", "x": 1, "y": 2, "colour": "red"}])))
            .expect(400, "invalid_request"),
        Row::post("negative coordinates", "/v1/tasks")
            .json(scripted(json!([{"type": "click", "x": -5, "y": 2}])))
            .expect(400, "invalid_request"),
        Row::post("coordinates off any screen", "/v1/tasks")
            .json(scripted(json!([{"type": "move", "x": 100000, "y": 2}])))
            .expect(400, "invalid_request"),
        Row::post("scripted without actions", "/v1/tasks")
            .json(json!({"prompt": "x", "pipeline": "scripted"}))
            .expect_field(400, "invalid_request", "actions"),
        Row::post("actions on a model pipeline", "/v1/tasks")
            .json(spec_with(json!({"actions": [{"type": "screenshot"}]})))
            .expect_field(400, "invalid_request", "actions"),
        Row::post("not_before is not a time", "/v1/tasks")
            .json(spec_with(json!({"not_before": "tomorrow"})))
            .expect_field(400, "invalid_request", "not_before"),
        Row::post("metadata over 16 KiB", "/v1/tasks").json(spec_with(json!({"metadata": big_metadata}))).expect_field(
            400,
            "invalid_request",
            "metadata",
        ),
        Row::post("metadata is not an object", "/v1/tasks").json(spec_with(json!({"metadata": [1, 2]}))).expect_field(
            400,
            "invalid_request",
            "metadata",
        ),
        Row::post("zero attempts", "/v1/tasks").json(spec_with(json!({"retry": {"max_attempts": 0}}))).expect_field(
            400,
            "invalid_request",
            "retry.max_attempts",
        ),
        Row::post("a thousand attempts", "/v1/tasks")
            .json(spec_with(json!({"retry": {"max_attempts": 1000}})))
            .expect_field(400, "invalid_request", "retry.max_attempts"),
        Row::post("tiny resolution", "/v1/tasks")
            .json(spec_with(json!({"sandbox": {"resolution": [1, 1]}})))
            .expect_field(400, "invalid_request", "sandbox.resolution"),
        Row::post("sandbox url is a file", "/v1/tasks")
            .json(spec_with(json!({"sandbox": {"url": "file:///etc/passwd"}})))
            .expect_field(400, "invalid_request", "sandbox.url"),
        Row::post("input file escapes its folder", "/v1/tasks")
            .json(json!({"prompt": "x", "pipeline": "claude-code", "files": {"../../etc/passwd": "x"}}))
            .expect_field(400, "invalid_request", "files"),
        Row::post("replay_of is not a task id", "/v1/tasks")
            .json(json!({"prompt": "x", "pipeline": "scripted", "replay_of": "../../etc"}))
            .expect_field(400, "invalid_request", "replay_of"),
        Row::post("replay_of beside actions", "/v1/tasks")
            .json(json!({"prompt": "x", "pipeline": "scripted", "replay_of": "tsk_01jr8z5v6n4q3m2k1h0g9f8e7d", "actions": [{"type": "screenshot"}]}))
            .expect_field(400, "invalid_request", "actions"),
        Row::post("replay_of on a model pipeline", "/v1/tasks")
            .json(spec_with(json!({"replay_of": "tsk_01jr8z5v6n4q3m2k1h0g9f8e7d"})))
            .expect_field(400, "invalid_request", "replay_of"),
        Row::post("idempotency key over 255 bytes", "/v1/tasks")
            .json(spec_with(json!({"idempotency_key": "k".repeat(256)})))
            .expect_field(400, "invalid_request", "idempotency_key"),
        // Content types.
        Row::post("text/plain body", "/v1/tasks")
            .body_with_type("text/plain", valid_spec().to_string().into_bytes())
            .expect(415, "unsupported_media_type"),
        Row::post("form body", "/v1/tasks")
            .body_with_type("application/x-www-form-urlencoded", b"prompt=hello".to_vec())
            .expect(415, "unsupported_media_type"),
        Row::post("no content type", "/v1/tasks")
            .json(valid_spec())
            .without_header("content-type")
            .expect(415, "unsupported_media_type"),
        // Idempotency.
        Row::post("idempotency key with another body", "/v1/tasks")
            .json(idem_changed)
            .expect(409, "idempotency_conflict"),
        Row::post("idempotency key with the same body", "/v1/tasks")
            .json(idem_spec.clone())
            .expect_replay_of(idem_task),
        // Ids in paths.
        Row::get("malformed task id", "/v1/tasks/not-a-task").expect_field(400, "invalid_request", "id"),
        Row::get("uppercase task id", format!("/v1/tasks/{}", acme_task.to_uppercase())).expect_field(
            400,
            "invalid_request",
            "id",
        ),
        Row::get("path traversal in id", "/v1/tasks/tsk_..%2F..%2Fetc%2Fpasswd").expect_field(
            400,
            "invalid_request",
            "id",
        ),
        // A well-formed id of another kind names nothing there, as an
        // unknown id does.
        Row::get("batch id as task id", "/v1/tasks/bat_01jc0000000000000000000000").expect(404, "not_found"),
        Row::get("task id as webhook id", format!("/v1/webhooks/{acme_task}")).expect(404, "not_found"),
        Row::post("batch id as task id to cancel", "/v1/tasks/bat_01jc0000000000000000000000/cancel").expect(404, "not_found"),
        Row::get("schedule id as batch id", "/v1/batches/sch_01jc0000000000000000000000/events").expect(404, "not_found"),
        Row::get("webhook id as schedule id", "/v1/schedules/whk_01jc0000000000000000000000").expect(404, "not_found"),
        Row::post("task id as message id", "/v1/webhooks/whk_01jc0000000000000000000000/deliveries/tsk_01jc0000000000000000000000/retry")
            .expect(404, "not_found"),
        Row::get("well-formed id that does not exist", format!("/v1/tasks/{absent}")).expect(404, "not_found"),
        Row::post("cancel with a malformed id", "/v1/tasks/tsk_x/cancel").expect_field(400, "invalid_request", "id"),
        Row::post("cancel a task that does not exist", format!("/v1/tasks/{absent}/cancel")).expect(404, "not_found"),
        Row::post("cancel a finished task", format!("/v1/tasks/{cancelled_task}/cancel"))
            .expect(409, "already_finished"),
        Row::post("retry a task that is not dead", format!("/v1/dead/{acme_task}/retry")).expect(404, "not_found"),
        Row::post("retry with a malformed id", "/v1/dead/nope/retry").expect_field(400, "invalid_request", "id"),
        // Authentication.
        Row::get("no Authorization", format!("/v1/tasks/{acme_task}"))
            .without_header("authorization")
            .expect(401, "unauthorized"),
        Row::get("unknown key", format!("/v1/tasks/{acme_task}"))
            .header("authorization", "Bearer test-key-nobody")
            .expect(401, "unauthorized"),
        Row::get("key without scheme", format!("/v1/tasks/{acme_task}"))
            .header("authorization", api_key())
            .expect(401, "unauthorized"),
        Row::get("Basic scheme", format!("/v1/tasks/{acme_task}"))
            .header("authorization", "Basic dGVzdC1rZXktYWNtZTo=")
            .expect(401, "unauthorized"),
        Row::get("empty bearer", format!("/v1/tasks/{acme_task}"))
            .header("authorization", "Bearer ")
            .expect(401, "unauthorized"),
        Row::post("submit without a key", "/v1/tasks")
            .json(valid_spec())
            .without_header("authorization")
            .expect(401, "unauthorized"),
        Row::get("list without a key", "/v1/tasks").without_header("authorization").expect(401, "unauthorized"),
        Row::get("events without a key", events.clone()).without_header("authorization").expect(401, "unauthorized"),
        // Another tenant's task is absent.
        Row::get("another tenant reads", format!("/v1/tasks/{acme_task}")).by_globex().expect(404, "not_found"),
        Row::post("another tenant cancels", format!("/v1/tasks/{acme_task}/cancel"))
            .by_globex()
            .expect(404, "not_found"),
        Row::get("another tenant follows events", events.clone()).by_globex().expect(404, "not_found"),
        Row::post("another tenant retries", format!("/v1/dead/{acme_task}/retry")).by_globex().expect(404, "not_found"),
        // Query parameters.
        Row::get("limit is not a number", "/v1/tasks?limit=abc").expect_field(400, "invalid_request", "limit"),
        Row::get("limit zero", "/v1/tasks?limit=0").expect_field(400, "invalid_request", "limit"),
        Row::get("limit over 500", "/v1/tasks?limit=501").expect_field(400, "invalid_request", "limit"),
        Row::get("unknown status", "/v1/tasks?status=finished").expect_field(400, "invalid_request", "status"),
        Row::get("malformed cursor", "/v1/tasks?cursor=garbage").expect_field(400, "invalid_request", "cursor"),
        Row::get("malformed batch", "/v1/tasks?batch=../x").expect_field(400, "invalid_request", "batch"),
        Row::get("unknown query parameter", "/v1/tasks?colour=red").expect(400, "invalid_request"),
        Row::get("negative dead limit", "/v1/dead?limit=-1").expect_field(400, "invalid_request", "limit"),
        Row::get("Last-Event-ID is not a number", events.clone()).header("last-event-id", "abc").expect_field(
            400,
            "invalid_request",
            "Last-Event-ID",
        ),
        Row::get("after is negative", format!("{events}?after=-1")).expect_field(400, "invalid_request", "after"),
        // Routes and methods.
        Row::get("unknown route", "/v1/nothing-here").expect(404, "not_found"),
        Row::new("wrong method", Method::DELETE, "/v1/tasks").expect(405, "method_not_allowed"),
        Row::get("cancel with GET", format!("/v1/tasks/{acme_task}/cancel")).expect(405, "method_not_allowed"),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_and_hostile_requests_are_refused_and_change_nothing() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let api = spawn_api(test_config(&redis, &prefix, &[])).await;
    wait_ready(&api).await;

    let acme_task = submit(&api, &valid_spec()).await;
    let cancelled_task = submit(&api, &valid_spec()).await;
    let cancel = client()
        .post(api.url(&format!("/v1/tasks/{cancelled_task}/cancel")))
        .header(AUTHORIZATION, format!("Bearer {}", api_key()))
        .send()
        .await
        .expect("cancel");
    assert_eq!(cancel.status().as_u16(), 202, "setup cancel");
    let idem_spec = spec_with(json!({"idempotency_key": "nightly-report-2026-01-02"}));
    let idem_task = submit(&api, &idem_spec).await;

    let rows = table(&acme_task, &cancelled_task, &idem_task, &idem_spec);
    assert!(rows.len() >= 25, "the table has {} rows", rows.len());
    let mut failures = Vec::new();
    for row in &rows {
        let before = fingerprint(&redis, &prefix).await;
        if let Some(failure) = check(&api, row).await {
            failures.push(failure);
        }
        let after = fingerprint(&redis, &prefix).await;
        let changed = changed_keys(&before, &after);
        if !changed.is_empty() {
            failures.push(format!("{}: changed redis keys {changed:?}", row.name));
        }
    }
    assert!(failures.is_empty(), "{} of {} rows failed:\n{}", failures.len(), rows.len(), failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_down_answers_503_with_retry_after_and_recovers() {
    let mut redis = RedisServer::start();
    let prefix = unique_prefix();
    let api = spawn_api(test_config(&redis, &prefix, &[])).await;
    wait_ready(&api).await;
    let task = submit(&api, &valid_spec()).await;

    redis.kill();
    let requests = [
        Row::get("read a task", format!("/v1/tasks/{task}")),
        Row::post("submit", "/v1/tasks").json(valid_spec()),
        Row::get("list", "/v1/tasks"),
        Row::get("queues", "/v1/queues"),
        Row::get("events", format!("/v1/tasks/{task}/events")),
        Row::get("readiness", "/readyz").without_header("authorization"),
        Row::get("metrics", "/metrics").header("authorization", format!("Bearer {}", flotilla_tests::admin_key())),
    ];
    for row in &requests {
        let response = send(&api, row).await;
        assert_eq!(response.status().as_u16(), 503, "{}", row.name);
        let retry_after = response.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_owned);
        assert_eq!(retry_after.as_deref(), Some("1"), "{}", row.name);
        let body: Value = response.json().await.expect("json error body");
        assert_eq!(body["error"]["code"], "unavailable", "{}", row.name);
    }
    let health = client().get(api.url("/healthz")).send().await.expect("healthz");
    assert_eq!(health.status().as_u16(), 200, "alive without redis");

    redis.restart();
    wait_ready(&api).await;
    let submitted = client()
        .post(api.url("/v1/tasks"))
        .header(AUTHORIZATION, format!("Bearer {}", api_key()))
        .json(&valid_spec())
        .send()
        .await
        .expect("submit after restart");
    assert_eq!(submitted.status().as_u16(), 202, "serves again once redis is back");
}

#[tokio::test(flavor = "multi_thread")]
async fn operator_endpoints_answer_in_their_formats() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let api = spawn_api(test_config(&redis, &prefix, &[])).await;
    wait_ready(&api).await;

    let metrics = client().get(api.url("/metrics")).bearer_auth(flotilla_tests::admin_key()).send().await.expect("metrics");
    assert_eq!(metrics.status().as_u16(), 200);
    let content_type = metrics.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    assert_eq!(content_type, "text/plain; version=0.0.4");
    let text = metrics.text().await.expect("metrics text");
    assert!(text.contains("\nflotilla_queue_depth 0\n"), "{text}");
    assert!(text.contains("flotilla_tasks_total{outcome=\"dead\"} 0\n"), "{text}");

    let stats = send(&api, &Row::get("queues", "/v1/queues")).await;
    assert_eq!(stats.status().as_u16(), 200);
    let stats: Value = stats.json().await.expect("stats json");
    assert_eq!(stats["lanes"].as_array().map(Vec::len), Some(3), "{stats}");
    let dead = send(&api, &Row::get("dead letters", "/v1/dead")).await;
    assert_eq!(dead.status().as_u16(), 200);
    assert_eq!(dead.json::<Value>().await.expect("dead json"), json!({"tasks": [], "next_cursor": null}));

    let doc: Value = client().get(api.url("/openapi.json")).send().await.expect("openapi").json().await.expect("openapi json");
    assert!(doc["paths"]["/v1/tasks/{id}/events"]["get"].is_object(), "events are documented");
    assert!(doc["components"]["schemas"]["ErrorBody"].is_object(), "the error body is documented");
}

#[tokio::test(flavor = "multi_thread")]
async fn only_a_failed_dead_letter_can_be_retried() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let api = spawn_api(test_config(&redis, &prefix, &[])).await;
    wait_ready(&api).await;
    let keys = flotilla_queue::keys::Keys::new(prefix.clone());
    let tenant = flotilla_types::TenantId::parse("acme").expect("tenant");
    let dead = submit(&api, &valid_spec()).await;
    let queued = submit(&api, &valid_spec()).await;
    let client = redis::Client::open(redis.url()).expect("redis client");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis connection");
    // What a worker leaves behind when the last attempt fails, and a dead
    // index entry for a task that is in fact still queued.
    let dead_id = TaskId::parse(&dead).expect("id");
    let mut pipe = redis::pipe();
    pipe.cmd("HSET").arg(keys.task(&dead_id)).arg("status").arg("failed").arg("code").arg("problem").ignore();
    pipe.cmd("ZADD").arg(keys.dead(&tenant)).arg(1).arg(&dead).ignore();
    pipe.cmd("ZADD").arg(keys.dead(&tenant)).arg(2).arg(&queued).ignore();
    let () = pipe.query_async(&mut conn).await.expect("dead letters");

    let listed: Value = send(&api, &Row::get("dead letters", "/v1/dead")).await.json().await.expect("dead json");
    let ids: Vec<&str> = listed["tasks"].as_array().expect("tasks").iter().filter_map(|t| t["id"].as_str()).collect();
    assert_eq!(ids, [queued.as_str(), dead.as_str()], "newest first");

    let conflict = Row::post("retry a queued task", format!("/v1/dead/{queued}/retry")).expect(409, "conflict");
    assert_eq!(check(&api, &conflict).await, None);
    let globex = Row::post("retry as another tenant", format!("/v1/dead/{dead}/retry")).by_globex().expect(404, "not_found");
    assert_eq!(check(&api, &globex).await, None);

    let retried = send(&api, &Row::post("retry", format!("/v1/dead/{dead}/retry"))).await;
    assert_eq!(retried.status().as_u16(), 202);
    assert_eq!(retried.json::<Value>().await.expect("retry json"), json!({"id": dead, "status": "queued"}));
    let again = Row::post("retry twice", format!("/v1/dead/{dead}/retry")).expect(404, "not_found");
    assert_eq!(check(&api, &again).await, None, "no longer a dead letter");
}

/// Waits until the API answers `/readyz` with 200.
async fn wait_ready(api: &ApiServer) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Ok(response) = client().get(api.url("/readyz")).send().await {
            if response.status().is_success() {
                return;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "the api did not become ready");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The measurement binaries answer `--help` with their usage, and a flag
/// without its value or an unknown one with one line naming it, before
/// they start anything (the benchmarks' own binaries are checked in
/// `benches/tests/usage.rs`).
#[test]
fn measurement_binaries_print_their_usage_and_name_a_bad_flag_in_one_line() {
    for (name, flag) in [("flotilla-chaos", "--tasks"), ("flotilla-cluster-spread", "--tenants")] {
        let run = |args: &[&str]| {
            std::process::Command::new(flotilla_tests::fleet::binary(name)).args(args).output().expect("binary runs")
        };
        let help = run(&["--help"]);
        assert!(help.status.success(), "{name} --help exits {:?}", help.status);
        assert!(String::from_utf8_lossy(&help.stdout).starts_with(name), "{name} --help prints its usage");

        let missing = run(&[flag]);
        let stderr = String::from_utf8_lossy(&missing.stderr);
        assert_eq!(missing.status.code(), Some(2), "{name} {flag} without a value");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{name}: one line, got {stderr:?}");
        assert!(stderr.contains(&format!("{flag} needs a value")), "{name}: {stderr:?}");

        let unknown = run(&["--frobnicate", "1"]);
        let stderr = String::from_utf8_lossy(&unknown.stderr);
        assert_eq!(unknown.status.code(), Some(2), "{name} with an unknown flag");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{name}: one line, got {stderr:?}");
        assert!(stderr.contains("--frobnicate"), "{name}: {stderr:?}");
    }
}
