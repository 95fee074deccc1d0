//! Webhooks end to end: the API, `flotilla-worker` processes and a real
//! redis-server, posting to a receiver written here. Signatures are checked
//! by the Standard Webhooks reference library (PyPI `standardwebhooks`),
//! not by Flotilla's code.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use flotilla_queue::queue::Queue;
use flotilla_queue::webhooks::target::Lookup;
use flotilla_queue::webhooks::Webhooks;
use flotilla_tests::fleet::{spawn_api_with_lookup, test_env};
use flotilla_tests::python::venv_python;
use flotilla_tests::{api_key, spawn_api, test_config, unique_prefix, ApiClient, RedisServer, WorkerProcess};
use futures::future::BoxFuture;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// How the receiver answers.
const OK: u8 = 0;
const FLAKY: u8 = 1;
const REDIRECT: u8 = 2;
/// `410 Gone`.
const GONE: u8 = 3;
/// `200` with a body that never ends.
const ENDLESS: u8 = 4;

/// One request the receiver got, and whether it answered 2xx.
#[derive(Debug, Clone)]
struct Received {
    id: String,
    timestamp: String,
    signature: String,
    body: String,
    accepted: bool,
}

#[derive(Clone)]
struct Receiver {
    got: Arc<Mutex<Vec<Received>>>,
    mode: Arc<AtomicU8>,
}

impl Receiver {
    async fn start(mode: u8) -> (Self, SocketAddr) {
        let receiver = Self { got: Arc::default(), mode: Arc::new(AtomicU8::new(mode)) };
        let app = Router::new().route("/hook", post(receive)).with_state(receiver.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind receiver");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await.ok() });
        (receiver, addr)
    }

    fn received(&self) -> Vec<Received> {
        self.got.lock().expect("lock").clone()
    }
}

async fn receive(State(receiver): State<Receiver>, headers: HeaderMap, body: String) -> Response {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let answer = match receiver.mode.load(Ordering::Relaxed) {
        FLAKY if rand::random::<f64>() < 0.3 => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        REDIRECT => (StatusCode::FOUND, [("location", "http://127.0.0.1:1/elsewhere")]).into_response(),
        GONE => StatusCode::GONE.into_response(),
        ENDLESS => {
            let chunks = futures::stream::unfold((), |()| async {
                // A slow, endless body: the endpoint's behaviour, not a wait.
                tokio::time::sleep(Duration::from_millis(5)).await;
                Some((Ok::<_, std::io::Error>(vec![b'x'; 1024]), ()))
            });
            (StatusCode::OK, axum::body::Body::from_stream(chunks)).into_response()
        }
        _ => StatusCode::NO_CONTENT.into_response(),
    };
    let accepted = answer.status().is_success();
    let got = Received {
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp"),
        signature: header("webhook-signature"),
        body,
        accepted,
    };
    receiver.got.lock().expect("lock").push(got);
    answer
}

/// Checks deliveries with the reference library: how many verify under
/// `secret`, how many a wrong secret rejects, and how many re-signed with a
/// timestamp six minutes old are rejected.
fn verify(secret: &str, deliveries: &[Received]) -> Value {
    const SCRIPT: &str = r#"
import datetime, json, sys
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
req = json.load(sys.stdin)
wh, wrong = Webhook(req["secret"]), Webhook(req["wrong"])
out = {"verified": 0, "wrong_rejected": 0, "old_rejected": 0, "errors": []}
old = datetime.datetime.now(tz=datetime.timezone.utc) - datetime.timedelta(minutes=6)
for d in req["deliveries"]:
    h = {"webhook-id": d["id"], "webhook-timestamp": d["ts"], "webhook-signature": d["sig"]}
    try:
        wh.verify(d["body"], h)
        out["verified"] += 1
    except WebhookVerificationError as e:
        out["errors"].append(str(e))
    try:
        wrong.verify(d["body"], h)
    except WebhookVerificationError:
        out["wrong_rejected"] += 1
    stale = {"webhook-id": d["id"], "webhook-timestamp": str(int(old.timestamp())), "webhook-signature": wh.sign(d["id"], old, d["body"])}
    try:
        wh.verify(d["body"], stale)
    except WebhookVerificationError:
        out["old_rejected"] += 1
print(json.dumps(out))
"#;
    let deliveries: Vec<Value> =
        deliveries.iter().map(|d| json!({"id": d.id, "ts": d.timestamp, "sig": d.signature, "body": d.body})).collect();
    let input = json!({"secret": secret, "wrong": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "deliveries": deliveries});
    let mut child = Command::new(venv_python())
        .arg("-c")
        .arg(SCRIPT)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python runs");
    child.stdin.take().expect("stdin").write_all(input.to_string().as_bytes()).expect("write");
    let out = child.wait_with_output().expect("python ends");
    serde_json::from_slice(&out.stdout).expect("verifier prints JSON")
}

async fn eventually(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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

async fn create_hook(api: &ApiClient, url: &str, events: Value) -> (String, String) {
    let (status, body) = api.post("/v1/webhooks", &json!({"url": url, "events": events})).await;
    assert_eq!(status, 201, "{body}");
    (body["id"].as_str().expect("id").to_owned(), body["secret"].as_str().expect("secret").to_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn deliveries_verify_with_the_reference_library_and_the_log_shows_them() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let extra = [("FLOTILLA_WEBHOOK_ALLOW_HTTP", "1"), ("FLOTILLA_WEBHOOK_ALLOW_PRIVATE", "1")];
    let api = spawn_api(test_config(&redis, &prefix, &extra)).await;
    let acme = ApiClient::new(&api, api_key());
    let globex = ApiClient::new(&api, flotilla_tests::globex_key());
    wait_ready(&acme).await;
    let _worker = WorkerProcess::spawn(&test_env(&redis, &prefix, &extra), "hooks-1");
    let (receiver, addr) = Receiver::start(OK).await;
    let url = format!("http://{addr}/hook");
    let (id, secret) = create_hook(&acme, &url, json!(["task.succeeded", "batch.completed"])).await;
    assert!(id.starts_with("whk_") && secret.starts_with("whsec_"), "{id} {secret}");
    assert_eq!(globex.get(&format!("/v1/webhooks/{id}")).await.0, 404, "another tenant does not see it");

    let (status, batch) = acme.post("/v1/batches", &scripted(5)).await;
    assert_eq!(status, 202, "{batch}");
    eventually("six deliveries", Duration::from_secs(60), || receiver.received().len() >= 6).await;
    let got = receiver.received();
    let types: Vec<String> = got
        .iter()
        .map(|d| serde_json::from_str::<Value>(&d.body).expect("json")["type"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(types.iter().filter(|t| *t == "task.succeeded").count(), 5, "{types:?}");
    assert_eq!(types.iter().filter(|t| *t == "batch.completed").count(), 1, "{types:?}");
    let completed: Value =
        serde_json::from_str(&got[types.iter().position(|t| t == "batch.completed").expect("completed")].body).expect("json");
    assert_eq!(completed["data"]["id"], batch["id"]);
    assert_eq!(completed["data"]["counts"]["succeeded"], 5);
    // Deliveries run side by side: the batch's may arrive before a task's.
    let task: Value = serde_json::from_str(&got[types.iter().position(|t| t == "task.succeeded").expect("a task delivery")].body)
        .expect("json");
    assert_eq!(task["data"]["status"], "succeeded", "data is the task as GET shows it: {task}");

    let checked = verify(&secret, &got);
    assert_eq!(checked["verified"], 6, "{checked}");
    assert_eq!(checked["wrong_rejected"], 6, "a wrong secret fails: {checked}");
    assert_eq!(checked["old_rejected"], 6, "a timestamp 6 minutes old fails: {checked}");

    let (status, log) = acme.get(&format!("/v1/webhooks/{id}/deliveries?limit=4")).await;
    assert_eq!(status, 200, "{log}");
    let first = log["deliveries"].as_array().expect("deliveries").clone();
    assert_eq!(first.len(), 4);
    let cursor = log["next_cursor"].as_str().expect("a second page");
    let (_, rest) = acme.get(&format!("/v1/webhooks/{id}/deliveries?limit=4&cursor={cursor}")).await;
    let all: Vec<Value> = first.into_iter().chain(rest["deliveries"].as_array().expect("deliveries").clone()).collect();
    assert_eq!(all.len(), 6);
    assert!(rest["next_cursor"].is_null());
    for d in &all {
        assert_eq!(
            (d["status"].as_str(), d["attempts"].as_u64(), d["response_code"].as_u64()),
            (Some("succeeded"), Some(1), Some(204)),
            "{d}"
        );
        assert!(d["latency_ms"].is_u64(), "{d}");
    }

    // A rotated secret: both sign during the grace period.
    let (status, rotated) = acme.post_empty(&format!("/v1/webhooks/{id}/rotate-secret?grace_s=600")).await;
    assert_eq!(status, 200, "{rotated}");
    let new_secret = rotated["secret"].as_str().expect("secret").to_owned();
    let msg = all[0]["msg_id"].as_str().expect("msg id");
    let (status, _) = acme.post_empty(&format!("/v1/webhooks/{id}/deliveries/{msg}/retry")).await;
    assert_eq!(status, 202);
    eventually("the retried delivery", Duration::from_secs(30), || receiver.received().len() >= 7).await;
    let again = receiver.received()[6].clone();
    assert_eq!(again.id, msg, "a retry keeps its webhook-id");
    assert_eq!(verify(&new_secret, std::slice::from_ref(&again))["verified"], 1);
    assert_eq!(verify(&secret, std::slice::from_ref(&again))["verified"], 1, "the old secret still signs in its grace");

    // A redirect is not followed, and the log says so.
    receiver.mode.store(REDIRECT, Ordering::Relaxed);
    let (status, _) = acme.post_empty(&format!("/v1/webhooks/{id}/deliveries/{msg}/retry")).await;
    assert_eq!(status, 202);
    let path = format!("/v1/webhooks/{id}/deliveries?limit=500");
    let mut error = String::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !error.contains("not followed") {
        assert!(Instant::now() < deadline, "no redirect in the log: {error}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (_, log) = acme.get(&path).await;
        let entry = log["deliveries"].as_array().expect("log").iter().find(|d| d["msg_id"] == msg).cloned().unwrap_or_default();
        error = entry["error"].as_str().unwrap_or("").to_owned();
    }
    assert!(error.contains("127.0.0.1:1"), "{error}");

    let (status, page) = acme.get("/v1/webhooks?limit=1").await;
    assert_eq!((status, page["webhooks"][0]["id"].as_str()), (200, Some(id.as_str())), "{page}");
    assert_eq!(acme.delete(&format!("/v1/webhooks/{id}")).await.0, 204);
    assert_eq!(acme.get(&format!("/v1/webhooks/{id}")).await.0, 404);
}

/// The delivery log entry of message `msg` of endpoint `hook`, once it
/// satisfies `done`.
async fn log_entry(api: &ApiClient, hook: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, log) = api.get(&format!("/v1/webhooks/{hook}/deliveries?limit=500")).await;
        if let Some(entry) = log["deliveries"].as_array().and_then(|all| all.iter().find(|d| done(d))) {
            return entry.clone();
        }
        assert!(Instant::now() < deadline, "{what}: {log}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A `410 Gone` disables the endpoint (the log and the endpoint say why)
/// and nothing more is posted to it; `PATCH` changes its events and
/// enables it again; an answer whose body never ends is a success once its
/// status is in, its body read only up to a small limit.
#[tokio::test(flavor = "multi_thread")]
async fn a_410_disables_the_endpoint_patch_enables_it_with_new_events_and_an_endless_answer_body_is_not_read() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let extra =
        [("FLOTILLA_WEBHOOK_ALLOW_HTTP", "1"), ("FLOTILLA_WEBHOOK_ALLOW_PRIVATE", "1"), ("FLOTILLA_WEBHOOK_RETRY_MS", "50")];
    let api = spawn_api(test_config(&redis, &prefix, &extra)).await;
    let acme = ApiClient::new(&api, api_key());
    wait_ready(&acme).await;
    let _worker = WorkerProcess::spawn(&test_env(&redis, &prefix, &extra), "hooks-gone");
    let (receiver, addr) = Receiver::start(GONE).await;
    let (id, _) = create_hook(&acme, &format!("http://{addr}/hook"), json!(["task.succeeded"])).await;
    let run = json!({"prompt": "quick", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 5}]});

    assert_eq!(acme.post("/v1/tasks", &run).await.0, 202);
    let gone = log_entry(&acme, &id, "a failed delivery", |d| d["status"] == "failed").await;
    assert_eq!((gone["response_code"].as_u64(), gone["attempts"].as_u64()), (Some(410), Some(1)), "not retried: {gone}");
    let (_, endpoint) = acme.get(&format!("/v1/webhooks/{id}")).await;
    assert_eq!(endpoint["disabled"], true, "{endpoint}");
    assert!(endpoint["disabled_reason"].as_str().is_some_and(|r| r.contains("410")), "{endpoint}");

    receiver.mode.store(ENDLESS, Ordering::Relaxed);
    let (_, second) = acme.post("/v1/tasks", &run).await;
    let second = second["id"].as_str().expect("id").to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    while acme.get(&format!("/v1/tasks/{second}")).await.1["status"] != "succeeded" {
        assert!(Instant::now() < deadline, "the second task never ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The dispatcher reads the feed every 100 ms: ten rounds. The sleep is
    // what is tested: in them, no message for the disabled endpoint.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, log) = acme.get(&format!("/v1/webhooks/{id}/deliveries")).await;
    assert_eq!(log["deliveries"].as_array().map(Vec::len), Some(1), "no message for a disabled endpoint: {log}");
    assert_eq!(receiver.received().len(), 1, "nothing was posted to the disabled endpoint");

    let (status, patched) =
        acme.patch(&format!("/v1/webhooks/{id}"), &json!({"disabled": false, "events": ["task.cancelled"]})).await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!((patched["disabled"].as_bool(), patched["events"].clone()), (Some(false), json!(["task.cancelled"])), "{patched}");
    assert!(patched["disabled_reason"].is_null(), "{patched}");
    assert_eq!(acme.post("/v1/tasks", &run).await.0, 202, "a succeeded task it no longer wants");
    let (_, parked) = acme
        .post("/v1/tasks", &json!({"prompt": "never runs", "pipeline": "openai-cua", "not_before": "2999-01-01T00:00:00Z"}))
        .await;
    let parked = parked["id"].as_str().expect("id").to_owned();
    assert!(acme.post_empty(&format!("/v1/tasks/{parked}/cancel")).await.0 < 300);
    let started = Instant::now();
    let done = log_entry(&acme, &id, "the cancelled task's delivery", |d| d["status"] == "succeeded").await;
    assert_eq!(done["response_code"].as_u64(), Some(200), "{done}");
    assert!(started.elapsed() < Duration::from_secs(10), "an endless body does not hold the attempt to its timeout");
    let bodies: Vec<Value> = receiver.received().iter().map(|d| serde_json::from_str(&d.body).expect("json")).collect();
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    assert_eq!((bodies[1]["type"].as_str(), bodies[1]["data"]["id"].as_str()), (Some("task.cancelled"), Some(parked.as_str())));
}

#[tokio::test(flavor = "multi_thread")]
async fn non_public_targets_are_refused_when_an_endpoint_is_made_or_changed() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let api = spawn_api(test_config(&redis, &prefix, &[])).await;
    let acme = ApiClient::new(&api, api_key());
    wait_ready(&acme).await;
    let (status, body) = acme.post("/v1/webhooks", &json!({"url": "http://example.com/", "events": ["task.cancelled"]})).await;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("url")), "plain http needs the operator's consent: {body}");

    let api_http = spawn_api(test_config(&redis, &prefix, &[("FLOTILLA_WEBHOOK_ALLOW_HTTP", "1")])).await;
    let acme = ApiClient::new(&api_http, api_key());
    wait_ready(&acme).await;
    let cases = [
        ("http://127.0.0.1:9/hook", "127.0.0.1 is a loopback address"),
        ("http://10.0.0.1/hook", "10.0.0.1 is a private address"),
        ("http://169.254.169.254/latest/meta-data", "169.254.169.254 is a link-local address"),
        ("http://[::1]:9/hook", "::1 is a loopback address"),
        ("http://[::ffff:127.0.0.1]:9/hook", "is a loopback address"),
        ("http://[64:ff9b::a9fe:a9fe]/", "is a link-local address"),
        ("http://2130706433:9/hook", "127.0.0.1 is a loopback address"),
        ("http://localhost:9/hook", "is a loopback address"),
    ];
    for (url, reason) in cases {
        let (status, body) = acme.post("/v1/webhooks", &json!({"url": url, "events": ["task.cancelled"]})).await;
        let message = body["error"]["message"].as_str().unwrap_or("");
        assert_eq!((status, body["error"]["field"].as_str()), (400, Some("url")), "{url}: {body}");
        assert!(message.contains(reason), "{url}: {body}");
    }
    let (id, _) = create_hook(&acme, "https://hooks.invalid/in", json!(["task.cancelled"])).await;
    let (status, body) = acme.patch(&format!("/v1/webhooks/{id}"), &json!({"url": "http://127.0.0.1:9/"})).await;
    assert_eq!((status, body["error"]["field"].as_str()), (400, Some("url")), "a change is checked too: {body}");
}

/// Resolves each host from a script: the first lookup of a host answers
/// `first`, every later one `then` (the test's own DNS, never the system's).
struct Rebinding {
    answers: HashMap<String, (Vec<IpAddr>, Vec<IpAddr>)>,
    lookups: Mutex<HashMap<String, usize>>,
}

impl Rebinding {
    fn lookups(&self, host: &str) -> usize {
        self.lookups.lock().expect("lock").get(host).copied().unwrap_or(0)
    }
}

impl Lookup for Rebinding {
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        let seen = {
            let mut lookups = self.lookups.lock().expect("lock");
            let n = lookups.entry(host.to_owned()).or_default();
            *n += 1;
            *n
        };
        let answer = match self.answers.get(host) {
            Some((first, _)) if seen == 1 => Ok(first.clone()),
            Some((_, then)) => Ok(then.clone()),
            None => Err(std::io::Error::new(std::io::ErrorKind::NotFound, "no such host")),
        };
        Box::pin(async move { answer })
    }
}

/// Accepts connections on loopback and counts them; never answers.
async fn counting_listener() -> (Arc<AtomicUsize>, u16) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let count = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&count);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    (count, port)
}

/// DNS rebinding: names that answer a public address when their endpoint is
/// made (so it is accepted) and a non-public one at delivery. The check
/// runs on the answer the delivery connects with, so each attempt is
/// refused, the delivery log gives the reason, and no connection reaches
/// the loopback listener the names point at.
#[tokio::test(flavor = "multi_thread")]
async fn names_that_resolve_public_when_made_and_private_at_delivery_are_refused_in_the_delivery_log() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let extra = [("FLOTILLA_WEBHOOK_ALLOW_HTTP", "1"), ("FLOTILLA_WEBHOOK_RETRY_MS", "60000")];
    let config = test_config(&redis, &prefix, &extra);
    let (connections, port) = counting_listener().await;
    let public: Vec<IpAddr> = vec!["93.184.216.34".parse().expect("ip")];
    let ip = |s: &str| -> IpAddr { s.parse().expect("ip") };
    let cases: Vec<(&str, Vec<IpAddr>, &str)> = vec![
        ("to-loopback.test", vec![ip("127.0.0.1")], "127.0.0.1 is a loopback address"),
        ("to-private.test", vec![ip("10.0.0.1")], "10.0.0.1 is a private address"),
        ("to-metadata.test", vec![ip("169.254.169.254")], "169.254.169.254 is a link-local address"),
        ("to-v6-loopback.test", vec![ip("::1")], "::1 is a loopback address"),
        ("to-mapped.test", vec![ip("::ffff:127.0.0.1")], "::ffff:127.0.0.1 is a loopback address"),
        ("to-mixed.test", vec![public[0], ip("127.0.0.1")], "127.0.0.1 is a loopback address"),
    ];
    let lookup = Arc::new(Rebinding {
        answers: cases.iter().map(|(host, then, _)| ((*host).to_owned(), (public.clone(), then.clone()))).collect(),
        lookups: Mutex::default(),
    });
    let api = spawn_api_with_lookup(config.clone(), lookup.clone()).await;
    let acme = ApiClient::new(&api, api_key());
    wait_ready(&acme).await;
    let queue = Queue::connect(&config).await.expect("redis");
    let hooks = Webhooks::of_queue(&queue, config.webhooks.clone()).with_lookup(lookup.clone());
    let stop = CancellationToken::new();
    let deliveries = tokio::spawn(flotilla_worker::webhooks::run_with(queue, hooks, "hooks-rebind".into(), stop.clone()));

    let mut made = Vec::new();
    for (host, _, _) in &cases {
        let (id, _) = create_hook(&acme, &format!("http://{host}:{port}/hook"), json!(["task.cancelled"])).await;
        assert_eq!(lookup.lookups(host), 1, "{host}: checked when made, with a public answer");
        made.push(id);
    }
    let (_, task) = acme
        .post("/v1/tasks", &json!({"prompt": "never runs", "pipeline": "openai-cua", "not_before": "2999-01-01T00:00:00Z"}))
        .await;
    let task = task["id"].as_str().expect("id");
    assert!(acme.post_empty(&format!("/v1/tasks/{task}/cancel")).await.0 < 300);

    for (hook, (host, _, reason)) in made.iter().zip(&cases) {
        let path = format!("/v1/webhooks/{hook}/deliveries");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (_, log) = acme.get(&path).await;
            let entry = &log["deliveries"][0];
            let error = entry["error"].as_str().unwrap_or("").to_owned();
            if !error.is_empty() {
                assert!(error.starts_with("refused: ") && error.contains(reason), "{host}: {error}");
                assert_eq!((entry["attempts"].as_u64(), entry["response_code"].as_u64()), (Some(1), None), "{host}: {entry}");
                assert_eq!(entry["status"], "pending", "{host}: tried again later, and checked again then");
                break;
            }
            assert!(Instant::now() < deadline, "{host}: no attempt logged");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(lookup.lookups(host) >= 2, "{host}: resolved again at delivery");
    }
    stop.cancel();
    deliveries.await.expect("the deliverer ends");
    assert_eq!(connections.load(Ordering::SeqCst), 0, "no connection reached the loopback listener");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_terminal_event_of_500_tasks_arrives_through_a_flaky_endpoint_a_killed_worker_and_a_redis_restart() {
    let mut redis = RedisServer::start_with_aof();
    let prefix = unique_prefix();
    let extra = [
        ("FLOTILLA_WEBHOOK_ALLOW_HTTP", "1"),
        ("FLOTILLA_WEBHOOK_ALLOW_PRIVATE", "1"),
        ("FLOTILLA_WEBHOOK_RETRY_MS", "50,100,200,400,800,1000,1000,1000,1000,1000"),
        ("FLOTILLA_LEASE_MS", "3000"),
        ("FLOTILLA_WORKER_CONCURRENCY", "16"),
    ];
    let api = spawn_api(test_config(&redis, &prefix, &extra)).await;
    let acme = ApiClient::new(&api, api_key());
    wait_ready(&acme).await;
    let env = test_env(&redis, &prefix, &extra);
    let mut doomed = WorkerProcess::spawn(&env, "hooks-doomed");
    let _survivor = WorkerProcess::spawn(&env, "hooks-survivor");
    let (receiver, addr) = Receiver::start(FLAKY).await;
    create_hook(&acme, &format!("http://{addr}/hook"), json!(["task.succeeded", "task.failed"])).await;

    let body = {
        let tasks: Vec<Value> = (0..500).map(|i| json!({"prompt": format!("row {i}")})).collect();
        json!({"defaults": {"pipeline": "scripted", "actions": [{"type": "wait", "ms": 20}]}, "tasks": tasks})
    };
    let (status, batch) = acme.post("/v1/batches", &body).await;
    assert_eq!(status, 202, "{batch}");
    let tasks: BTreeSet<String> =
        batch["task_ids"].as_array().expect("ids").iter().map(|t| t.as_str().expect("id").to_owned()).collect();
    let accepted_tasks = |receiver: &Receiver| -> BTreeSet<String> {
        receiver
            .received()
            .iter()
            .filter(|d| d.accepted)
            .filter_map(|d| serde_json::from_str::<Value>(&d.body).ok()?["data"]["id"].as_str().map(str::to_owned))
            .collect()
    };
    eventually("some deliveries", Duration::from_secs(60), || accepted_tasks(&receiver).len() >= 50).await;
    doomed.signal("KILL");
    assert!(doomed.wait_exit(5), "the worker died");
    eventually("more deliveries", Duration::from_secs(60), || accepted_tasks(&receiver).len() >= 150).await;
    redis.restart();
    eventually("every task's terminal event", Duration::from_secs(240), || accepted_tasks(&receiver) == tasks).await;

    let mut ids_by_task: HashMap<String, BTreeSet<String>> = HashMap::new();
    let mut bodies_by_id: HashMap<String, BTreeSet<String>> = HashMap::new();
    let received = receiver.received();
    for d in &received {
        let body: Value = serde_json::from_str(&d.body).expect("json");
        let task = body["data"]["id"].as_str().expect("task id").to_owned();
        ids_by_task.entry(task).or_default().insert(d.id.clone());
        bodies_by_id.entry(d.id.clone()).or_default().insert(d.body.clone());
    }
    assert!(ids_by_task.values().all(|ids| ids.len() == 1), "each task's event has one webhook-id however often it came");
    assert!(bodies_by_id.values().all(|b| b.len() == 1), "a webhook-id always carries the same body");
    let retried = received.len() - tasks.len();
    eprintln!("{} requests for {} tasks ({retried} repeats: failures answered and redeliveries)", received.len(), tasks.len());
    assert!(received.iter().any(|d| !d.accepted), "the endpoint did fail some");
}

/// Runs the `flotilla` command line against `api` with acme's key.
fn flotilla(api: &flotilla_tests::ApiServer, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(flotilla_tests::fleet::binary("flotilla"))
        .args(["--api", &api.base_url, "--key", api_key()])
        .args(args)
        .output()
        .expect("run flotilla");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cli_adds_lists_shows_deliveries_retries_and_removes_a_webhook() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let extra = [("FLOTILLA_WEBHOOK_ALLOW_HTTP", "1"), ("FLOTILLA_WEBHOOK_ALLOW_PRIVATE", "1")];
    let api = spawn_api(test_config(&redis, &prefix, &extra)).await;
    let acme = ApiClient::new(&api, api_key());
    wait_ready(&acme).await;
    let _worker = WorkerProcess::spawn(&test_env(&redis, &prefix, &extra), "hooks-cli");
    let (receiver, addr) = Receiver::start(OK).await;
    let url = format!("http://{addr}/hook");

    let (ok, added, stderr) = flotilla(&api, &["webhooks", "add", &url, "--events", "task.succeeded,batch.completed"]);
    assert!(ok, "{stderr}");
    let mut words = added.split_whitespace();
    let id = words.next().expect("an id").to_owned();
    assert!(id.starts_with("whk_") && added.contains("secret whsec_"), "{added}");
    assert!(stderr.contains("not shown again"), "{stderr}");

    let (ok, listed, _) = flotilla(&api, &["webhooks", "ls"]);
    assert!(ok && listed.contains(&id) && listed.contains("task.succeeded,batch.completed") && listed.contains(&url), "{listed}");
    let (ok, json_list, _) = flotilla(&api, &["--json", "webhooks"]);
    let parsed: Value = serde_json::from_str(json_list.trim()).expect("json");
    assert!(ok && parsed["webhooks"][0]["id"] == json!(id), "{json_list}");

    let (status, batch) = acme.post("/v1/batches", &scripted(2)).await;
    assert_eq!(status, 202, "{batch}");
    eventually("three deliveries", Duration::from_secs(60), || receiver.received().len() >= 3).await;
    let (ok, json_log, _) = flotilla(&api, &["--json", "webhooks", "deliveries", &id]);
    let log: Value = serde_json::from_str(json_log.trim()).expect("json");
    let deliveries = log["deliveries"].as_array().expect("deliveries");
    assert!(ok && deliveries.len() == 3, "{json_log}");
    let (ok, table, _) = flotilla(&api, &["webhooks", "deliveries", &id]);
    assert!(ok && table.starts_with("MSG ID") && table.lines().count() == 4 && table.contains("succeeded"), "{table}");

    let msg = deliveries[0]["msg_id"].as_str().expect("msg id");
    let (ok, retried, stderr) = flotilla(&api, &["webhooks", "retry", &id, msg]);
    assert!(ok && retried.contains(msg), "{retried}{stderr}");
    eventually("the retried message arrives again", Duration::from_secs(30), || receiver.received().len() >= 4).await;
    let ids: Vec<String> = receiver.received().iter().map(|d| d.id.clone()).collect();
    assert_eq!(ids.iter().filter(|i| *i == msg).count(), 2, "a retry resends the same message: {ids:?}");

    let (ok, _, stderr) = flotilla(&api, &["webhooks", "retry", &id, "msg_nosuchmessage"]);
    assert!(!ok && stderr.lines().count() == 1, "a bad message id is one line: {stderr}");
    let (ok, removed, _) = flotilla(&api, &["webhooks", "rm", &id]);
    assert!(ok && removed.contains("removed"), "{removed}");
    let (ok, _, stderr) = flotilla(&api, &["webhooks", "ls"]);
    assert!(ok && stderr.contains("no webhooks"), "{stderr}");
}

/// What a running command printed so far, line by line, on each stream.
#[derive(Clone, Default)]
struct Printed(Arc<Mutex<Vec<String>>>);

impl Printed {
    fn follow(&self, stream: impl tokio::io::AsyncRead + Unpin + Send + 'static) {
        use tokio::io::AsyncBufReadExt;
        let lines = Arc::clone(&self.0);
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(stream).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                lines.lock().expect("lock").push(line);
            }
        });
    }

    fn lines(&self) -> Vec<String> {
        self.0.lock().expect("lock").clone()
    }

    fn count(&self, part: &str) -> usize {
        self.lines().iter().filter(|l| l.contains(part)).count()
    }
}

/// `flotilla webhooks listen` on a fleet with default settings (no plain
/// HTTP or private targets allowed): the deliveries of a batch reach it
/// through the API, each checked against its signature and printed, and
/// forwarded to a local receiver where the reference library verifies
/// them; a delivery with a forged signature is rejected; the temporary
/// endpoint goes when the command stops.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_listens_through_the_api_verifies_forwards_and_rejects_a_forged_delivery() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let api = spawn_api(test_config(&redis, &prefix, &[])).await;
    let acme = ApiClient::new(&api, api_key());
    wait_ready(&acme).await;
    let _worker = WorkerProcess::spawn(&test_env(&redis, &prefix, &[]), "hooks-listen");
    let (receiver, addr) = Receiver::start(OK).await;

    let mut listen = tokio::process::Command::new(flotilla_tests::fleet::binary("flotilla"))
        .args(["--api", &api.base_url, "--key", api_key(), "webhooks", "listen", "--forward-to"])
        .arg(format!("http://{addr}/hook"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run flotilla webhooks listen");
    let (stdout, stderr) = (Printed::default(), Printed::default());
    stdout.follow(listen.stdout.take().expect("stdout"));
    stderr.follow(listen.stderr.take().expect("stderr"));
    eventually("the listener is ready", Duration::from_secs(20), || stdout.count("listening as whk_") == 1).await;
    let lines = stdout.lines();
    let endpoint = lines[0].split_whitespace().nth(2).expect("the endpoint").trim_end_matches(':').to_owned();
    let secret = lines[1].split_whitespace().nth(2).expect("the secret").to_owned();
    assert!(secret.starts_with("whsec_"), "{lines:?}");

    let (status, batch) = acme.post("/v1/batches", &scripted(2)).await;
    assert_eq!(status, 202, "{batch}");
    eventually("the batch's deliveries are printed", Duration::from_secs(60), || {
        stdout.count("verified  task.succeeded") == 2 && stdout.count("verified  batch.completed") == 1
    })
    .await;
    eventually("and forwarded", Duration::from_secs(10), || receiver.received().len() == 3).await;
    let checked = verify(&secret, &receiver.received());
    assert_eq!(checked["verified"], 3, "the reference library verifies what was forwarded: {checked}");

    // A delivery the fleet did not sign never gets through.
    let tenant = flotilla_types::TenantId::parse("acme").expect("tenant");
    let relay = flotilla_queue::keys::Keys::new(prefix.clone()).webhook_relay(&tenant, &endpoint);
    let forged = r#"{"type":"task.succeeded","timestamp":"2026-01-01T00:00:00Z","data":{"task_id":"tsk_forged"}}"#;
    let now = (flotilla_types::clock::now_ms() / 1000).to_string();
    redis.cli(&["XADD", &relay, "*", "id", "msg_forged", "timestamp", &now, "signature", "v1,Zm9yZ2Vk", "body", forged]);
    eventually("the forged delivery is rejected", Duration::from_secs(20), || stderr.count("rejected msg_forged") == 1).await;
    assert_eq!(stdout.count("tsk_forged"), 0, "{:?}", stdout.lines());
    assert_eq!(receiver.received().len(), 3, "nothing forged is forwarded");

    listen.kill().await.expect("stop the listener");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, hooks) = acme.get("/v1/webhooks").await;
        if hooks["webhooks"].as_array().is_some_and(Vec::is_empty) {
            break;
        }
        assert!(Instant::now() < deadline, "the temporary endpoint outlived its listener: {hooks}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
