//! The MCP server against the official MCP Python client (PyPI `mcp`,
//! installed by `scripts/setup.sh`), over stdio (`flotilla mcp` started by
//! the client) and over streamable HTTP (the API's `/mcp`), driven by
//! `tests/mcp/mcp_check.py`: the client lists the contract's tools, submits
//! a scripted task that runs on a real desktop, receives a progress
//! notification per event until the task ends, and gets its last
//! screenshot as an image (and the task and the screenshot as resources).
//! A call without a key, or for another tenant's task, fails as the API
//! fails it: the same status and error body.

use std::path::PathBuf;
use std::time::Duration;

use flotilla_blobstore::UploaderOptions;
use flotilla_tests::desktop::{DesktopFleet, DesktopOptions};
use flotilla_tests::fleet::binary;
use flotilla_tests::python::venv_python;
use flotilla_tests::s3_server::S3Server;
use flotilla_tests::{
    api_key, globex_key, spawn_api, spawn_api_with_blobs, test_config, unique_prefix, ApiClient, ApiServer, RedisServer,
};
use serde_json::{json, Value};

/// The tools the contract names.
const TOOLS: [&str; 11] = [
    "approve_task",
    "cancel_task",
    "deny_task",
    "get_screenshot",
    "get_task",
    "get_usage",
    "list_tasks",
    "submit_batch",
    "submit_task",
    "take_over",
    "wait_for_task",
];

/// How the client reaches the server.
#[derive(Clone, Copy, Debug)]
enum Transport {
    Stdio,
    Http,
}

/// Runs the client against `api` with `key` (none: no key at all), doing
/// what `job` adds (`spec`, `foreign`), and returns what it saw.
async fn client_sees(transport: Transport, api: &ApiServer, key: Option<&str>, mut job: Value) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp/mcp_check.py");
    job["api"] = json!(api.base_url);
    job["key"] = json!(key);
    job["command"] = json!(binary("flotilla"));
    job["url"] = json!(api.url("/mcp"));
    let mode = match transport {
        Transport::Stdio => "stdio",
        Transport::Http => "http",
    };
    let run = tokio::process::Command::new(venv_python()).arg(&script).arg(mode).arg(job.to_string()).kill_on_drop(true).output();
    let output = tokio::time::timeout(Duration::from_secs(180), run).await.expect("the MCP client ends").expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "mcp_check.py {mode} failed:\n{stdout}\n{stderr}");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"))
}

/// A scripted task whose actions change the screen, so it stores screenshots.
fn typing_task() -> Value {
    json!({
        "prompt": "type into the terminal",
        "pipeline": "scripted",
        "actions": [
            {"type": "click", "x": 512, "y": 384},
            {"type": "type", "text": "echo mcp\n"},
            {"type": "wait", "ms": 200}
        ]
    })
}

/// What the client saw of a task it submitted and followed, checked
/// against the API's own record of it.
async fn check_followed(transport: Transport, seen: &Value, acme: &ApiClient) {
    let tools: Vec<&str> = seen["tools"].as_array().expect("tools listed").iter().filter_map(Value::as_str).collect();
    assert_eq!(tools, TOOLS, "{transport:?}: the contract's tools");

    let id = seen["submitted"]["structuredContent"]["id"].as_str().expect("submit_task answers the task's id");
    let (status, record) = acme.get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["status"], "succeeded", "{transport:?}: {record}");

    let waited = &seen["waited"];
    assert_ne!(waited["isError"], true, "{waited}");
    assert_eq!(waited["structuredContent"]["status"], "succeeded", "wait_for_task answers the ended record");
    assert_eq!(waited["structuredContent"]["steps_taken"], record["steps_taken"]);
    let text: Value = serde_json::from_str(waited["content"][0]["text"].as_str().expect("text")).expect("the text is the JSON");
    assert_eq!(text, waited["structuredContent"], "the same JSON as text and as structured content");

    // One notification per event, in order, the last the terminal one.
    let progress = seen["progress"].as_array().expect("progress");
    assert!(progress.len() >= 5, "{transport:?}: queued, started, actions, screenshots, succeeded: {progress:?}");
    let values: Vec<f64> = progress.iter().filter_map(|p| p["progress"].as_f64()).collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "progress only increases: {values:?}");
    for notice in progress {
        assert_eq!(notice["message"]["task_id"], id, "each message is one of the task's events");
        assert_eq!(notice["message"]["seq"].as_f64(), notice["progress"].as_f64(), "progress is the event's seq");
    }
    assert_eq!(progress.last().map(|p| &p["message"]["type"]), Some(&json!("succeeded")));

    // The last screenshot, as an image.
    let shot = &seen["screenshot"];
    assert_eq!(shot["is_error"], false, "{shot}");
    let listed = record["screenshots"].as_array().expect("screenshots listed");
    assert!(!listed.is_empty(), "{record}");
    assert_eq!(shot["listed"]["seq"], listed[listed.len() - 1]["seq"], "the latest screenshot");
    assert_eq!(shot["listed"]["hash"], listed[listed.len() - 1]["hash"]);
    assert_eq!(shot["images"], json!([{"mime": "image/png", "png": true}]));

    assert_eq!(seen["resource"]["id"], id, "the task as a resource is its record");
    assert_eq!(seen["resource"]["status"], "succeeded");
    assert_eq!(seen["screenshot_resource"], json!({"mime": "image/png", "png": true}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_mcp_clients_over_stdio_and_http_submit_follow_and_see_a_task() {
    let s3 = S3Server::start();
    let store = s3.store(&unique_prefix());
    let options = DesktopOptions { blobs: Some(store.clone()), uploads: UploaderOptions::default(), ..DesktopOptions::default() };
    let fleet = DesktopFleet::start(options).await;
    let api = spawn_api_with_blobs(fleet.config.clone(), store).await;
    let acme = ApiClient::when_ready(&api, api_key()).await;

    for transport in [Transport::Stdio, Transport::Http] {
        let seen = client_sees(transport, &api, Some(api_key()), json!({ "spec": typing_task() })).await;
        assert!(seen.get("refused").is_none(), "{transport:?}: {seen}");
        check_followed(transport, &seen, &acme).await;
    }
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_calls_without_a_key_or_for_another_tenants_task_fail_as_the_api_would() {
    let redis = RedisServer::start();
    let api = spawn_api(test_config(&redis, &unique_prefix(), &[])).await;
    let acme = ApiClient::when_ready(&api, api_key()).await;
    let (status, task) = acme
        .post("/v1/tasks", &json!({"prompt": "stays queued", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 10}]}))
        .await;
    assert_eq!(status, 202, "{task}");
    let id = task["id"].as_str().expect("id");

    // Over HTTP, /mcp answers a request without a key as every route does.
    let http = reqwest::Client::new();
    let mcp =
        http.post(api.url("/mcp")).json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})).send().await.expect("post");
    let tasks = http.get(api.url("/v1/tasks")).send().await.expect("get");
    assert_eq!((mcp.status().as_u16(), tasks.status().as_u16()), (401, 401));
    let (mcp, tasks): (Value, Value) = (mcp.json().await.expect("json"), tasks.json().await.expect("json"));
    assert_eq!(mcp, tasks, "the API's own error body");
    let seen = client_sees(Transport::Http, &api, None, json!({})).await;
    assert!(seen["refused"].is_string(), "the client cannot connect without a key: {seen}");

    // Over stdio the server starts, and the API answers each call as it answers any call without a key.
    let seen = client_sees(Transport::Stdio, &api, None, json!({ "foreign": id })).await;
    assert_eq!(seen["tools"].as_array().map(Vec::len), Some(TOOLS.len()), "{seen}");
    assert_eq!(seen["foreign"]["isError"], true, "{seen}");
    assert_eq!(seen["foreign"]["structuredContent"]["status"], 401);
    assert_eq!(seen["foreign"]["structuredContent"]["error"], tasks["error"]);

    // Another tenant's task is one that does not exist, as on the API.
    let globex = ApiClient::new(&api, globex_key());
    let (status, refused) = globex.get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(status, 404, "{refused}");
    for transport in [Transport::Stdio, Transport::Http] {
        let seen = client_sees(transport, &api, Some(globex_key()), json!({ "foreign": id })).await;
        let answer = &seen["foreign"];
        assert_eq!(answer["isError"], true, "{transport:?}: {seen}");
        assert_eq!(answer["structuredContent"]["status"], 404, "{transport:?}");
        assert_eq!(answer["structuredContent"]["error"], refused["error"], "{transport:?}: the API's body");
    }
    let (_, still) = acme.get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(still["status"], "queued", "nothing happened to the task");
}

/// `/mcp` over plain HTTP, as a client that is not an MCP SDK sends it: a
/// request naming no `Accept` type is answered (any type will do for it),
/// a body that is not one JSON-RPC message gets the API's 400 naming what
/// is wrong, and an `Accept` that names neither of MCP's types gets 406.
#[tokio::test(flavor = "multi_thread")]
async fn plain_http_requests_to_mcp_get_answers_or_clear_refusals() {
    let redis = RedisServer::start();
    let api = spawn_api(test_config(&redis, &unique_prefix(), &[])).await;
    ApiClient::when_ready(&api, api_key()).await;
    let http = reqwest::Client::new();
    let post = |body: Value, accept: Option<&'static str>| {
        let mut request = http.post(api.url("/mcp")).bearer_auth(api_key()).json(&body);
        if let Some(accept) = accept {
            request = request.header("Accept", accept);
        }
        request.send()
    };
    let ping = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"});
    for accept in [None, Some("*/*")] {
        let answer = post(ping.clone(), accept).await.expect("post");
        assert_eq!(answer.status().as_u16(), 200, "Accept {accept:?}");
        let text = answer.text().await.expect("body");
        assert!(text.contains("\"id\":7") && text.contains("\"result\""), "Accept {accept:?}: {text}");
    }
    for (body, names) in [
        (json!({"jsonrpc": "1.0", "id": 1, "method": "ping"}), "jsonrpc"),
        (json!({"jsonrpc": "2.0", "id": null, "method": "ping"}), "id"),
        (json!({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]}), "params"),
        (json!([ping.clone()]), "one JSON-RPC message"),
    ] {
        let answer = post(body.clone(), None).await.expect("post");
        assert_eq!(answer.status().as_u16(), 400, "{body}");
        let error: Value = answer.json().await.expect("the API's error body");
        assert_eq!(error["error"]["code"], "invalid_request", "{error}");
        assert!(error["error"]["message"].as_str().is_some_and(|m| m.contains(names)), "{body}: {error}");
    }
    let refused = post(ping, Some("text/html")).await.expect("post");
    assert_eq!(refused.status().as_u16(), 406);
}
