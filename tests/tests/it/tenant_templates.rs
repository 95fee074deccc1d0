//! Sandbox templates per tenant at the API, against a real redis-server: a
//! task, batch or schedule naming a `sandbox.template` that is not among its
//! tenant's `sandbox_templates` gets a 400 naming the field and queues
//! nothing; a listed template is accepted; another tenant's list does not
//! count.

use std::path::PathBuf;

use flotilla_tests::{spawn_api, test_config, unique_prefix, ApiClient, ApiServer, RedisServer};
use serde_json::{json, Value};

/// The tenants' settings: `acme` may use `desktop-chrome`, `globex` `desktop-office`.
const TENANTS: &str =
    "[tenants.acme]\nsandbox_templates = [\"desktop-chrome\"]\n\n[tenants.globex]\nsandbox_templates = [\"desktop-office\"]\n";

fn config_file() -> PathBuf {
    flotilla_tests::config_file(TENANTS)
}

async fn ready(api: &ApiServer, key: &str) -> ApiClient {
    ApiClient::when_ready(api, key).await
}

fn task(template: Option<&str>) -> Value {
    let mut task = json!({"prompt": "wait", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 1}]});
    if let Some(template) = template {
        task["sandbox"] = json!({"template": template});
    }
    task
}

/// The tenant's tasks and schedules as the API lists them.
async fn queued(client: &ApiClient) -> (usize, usize) {
    let (status, tasks) = client.get("/v1/tasks?limit=500").await;
    assert_eq!(status, 200, "{tasks}");
    let (status, schedules) = client.get("/v1/schedules").await;
    assert_eq!(status, 200, "{schedules}");
    (tasks["tasks"].as_array().map_or(0, Vec::len), schedules["schedules"].as_array().map_or(0, Vec::len))
}

/// Asserts a 400 `invalid_request` whose field is `field`.
fn assert_refused(status: u16, body: &Value, field: &str) {
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_request", "{body}");
    assert_eq!(body["error"]["field"], field, "{body}");
    assert!(body["error"]["message"].as_str().is_some_and(|m| m.contains("sandbox templates")), "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_template_the_tenant_may_not_use_is_refused_at_submit_and_nothing_is_queued() {
    let redis = RedisServer::start();
    let path = config_file();
    let config = test_config(&redis, &unique_prefix(), &[("FLOTILLA_CONFIG", path.to_str().expect("utf-8 path"))]);
    let api = spawn_api(config).await;
    let acme = ready(&api, flotilla_tests::api_key()).await;
    let globex = ready(&api, flotilla_tests::fleet::globex_key()).await;

    let (status, body) = acme.post("/v1/tasks", &task(Some("desktop-office"))).await;
    assert_refused(status, &body, "sandbox.template");
    let batch = json!({"tasks": [task(None), task(Some("desktop-chrome")), task(Some("desktop-evil"))]});
    let (status, body) = acme.post("/v1/batches", &batch).await;
    assert_refused(status, &body, "tasks[2].sandbox.template");
    let batch = json!({"defaults": {"sandbox": {"template": "desktop-evil"}}, "tasks": [task(None)]});
    let (status, body) = acme.post("/v1/batches", &batch).await;
    assert_refused(status, &body, "defaults.sandbox.template");
    let schedule = json!({"cron": "*/5 * * * *", "timezone": "UTC", "task": task(Some("desktop-evil")), "overlap": "skip"});
    let (status, body) = acme.post("/v1/schedules", &schedule).await;
    assert_refused(status, &body, "task.sandbox.template");
    assert_eq!(queued(&acme).await, (0, 0), "nothing was queued or scheduled");

    let (status, body) = acme.post("/v1/tasks", &task(Some("desktop-chrome"))).await;
    assert_eq!(status, 202, "a listed template is accepted: {body}");
    let (status, body) = acme.post("/v1/batches", &json!({"tasks": [task(None), task(Some("desktop-chrome"))]})).await;
    assert_eq!(status, 202, "{body}");
    let schedule = json!({"cron": "*/5 * * * *", "timezone": "UTC", "task": task(Some("desktop-chrome")), "overlap": "skip"});
    let (status, body) = acme.post("/v1/schedules", &schedule).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(queued(&acme).await, (3, 1));

    let (status, body) = globex.post("/v1/tasks", &task(Some("desktop-chrome"))).await;
    assert_refused(status, &body, "sandbox.template");
    let (status, body) = globex.post("/v1/tasks", &task(Some("desktop-office"))).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(queued(&globex).await, (1, 0));
}

/// The template names `/openapi.json` states for `sandbox.template`.
async fn documented_templates(api: &ApiServer, key: Option<&str>) -> Value {
    let mut request = reqwest::Client::new().get(api.url("/openapi.json"));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let doc: Value = request.send().await.expect("document").json().await.expect("json");
    doc["components"]["schemas"]["SandboxSpec"]["properties"]["template"].clone()
}

/// The document names only the calling tenant's templates: acme's key
/// reads acme's, globex's reads globex's, and without a key it lists none.
#[tokio::test(flavor = "multi_thread")]
async fn the_document_lists_only_the_callers_templates() {
    let redis = RedisServer::start();
    let path = config_file();
    let config = test_config(&redis, &unique_prefix(), &[("FLOTILLA_CONFIG", path.to_str().expect("utf-8 path"))]);
    let api = spawn_api(config).await;
    ready(&api, flotilla_tests::api_key()).await;
    let acme = documented_templates(&api, Some(flotilla_tests::api_key())).await;
    assert_eq!(acme["enum"], json!(["desktop-chrome", null]), "{acme}");
    let globex = documented_templates(&api, Some(flotilla_tests::fleet::globex_key())).await;
    assert_eq!(globex["enum"], json!(["desktop-office", null]), "{globex}");
    let anonymous = documented_templates(&api, None).await;
    assert!(anonymous.get("enum").is_none(), "{anonymous}");
    assert!(!anonymous.to_string().contains("desktop-"), "{anonymous}");
}
