//! Usage per tenant after a mixed run, on in-memory sandboxes with a real
//! S3 store and redis-server: succeeded, failed, cancelled (queued and
//! running) and retried tasks of two tenants. Each tenant's
//! `GET /v1/usage` equals exactly the sum of its own tasks' `usage` (steps,
//! sandbox time, screenshot bytes stored and saved) and counts its tasks by
//! outcome; neither tenant sees the other's figures. A running task's
//! tokens show before it ends. Its cost per model and day is the sum of its
//! tasks' costs, and a model without a price shows an unknown cost.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_queue::queue::TaskRecord;
use flotilla_tests::desktop::{eventually, DesktopFleet, DesktopOptions};
use flotilla_tests::s3_server::S3Server;
use flotilla_tests::tasks::{events, wait_all_ended};
use flotilla_tests::{spawn_api, unique_prefix, ApiClient};
use flotilla_types::clock;
use flotilla_types::event::EventKind;
use flotilla_types::task::{TaskSpec, TaskStatus};
use flotilla_types::usage::UsageView;
use flotilla_types::{TaskId, TenantId};
use flotilla_worker::sandbox::MemoryProvider;
use flotilla_worker::sandbox::SandboxId;
use redis::AsyncCommands;
use serde_json::{json, Value};

fn tenant(name: &str) -> TenantId {
    TenantId::parse(name).expect("tenant")
}

fn spec(value: Value) -> TaskSpec {
    TaskSpec::from_json(value.to_string().as_bytes()).expect("valid spec")
}

/// A scripted task on a sandbox: a move, then `waits` waits of `ms`.
fn on_screen(waits: usize, ms: u64, extra: Value) -> TaskSpec {
    let mut actions = vec![json!({"type": "move", "x": 5, "y": 5})];
    actions.extend(std::iter::repeat_n(json!({"type": "wait", "ms": ms}), waits));
    let mut body = json!({"prompt": "usage", "pipeline": "scripted", "actions": actions, "retry": {"max_attempts": 2}});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    spec(body)
}

/// The sum of the tasks' own usage.
fn sum(records: &[TaskRecord]) -> UsageView {
    let mut total = UsageView::default();
    for usage in records.iter().filter_map(|r| r.usage.as_ref()) {
        total.input_tokens += usage.input_tokens;
        total.output_tokens += usage.output_tokens;
        total.steps += usage.steps;
        total.screenshot_bytes += usage.screenshot_bytes;
        total.screenshot_bytes_saved += usage.screenshot_bytes_saved;
        for (provider, ms) in &usage.sandbox_ms {
            *total.sandbox_ms.entry(provider.clone()).or_default() += ms;
        }
        for (model, tokens) in &usage.models {
            let entry = total.models.entry(model.clone()).or_default();
            entry.input_tokens += tokens.input_tokens;
            entry.output_tokens += tokens.output_tokens;
        }
    }
    for record in records {
        *total.tasks.entry(record.status.as_str().to_owned()).or_default() += 1;
    }
    total
}

/// The tenant's usage over the API, as one value to compare.
async fn reported(api: &ApiClient) -> Value {
    let (status, usage) = api.get("/v1/usage").await;
    assert_eq!(status, 200, "{usage}");
    let mut total = usage["total"].clone();
    let days = usage["days"].as_array().expect("days");
    assert!(!days.is_empty(), "{usage}");
    total.as_object_mut().expect("object").entry("tasks").or_insert(json!({}));
    total
}

async fn records(fleet: &DesktopFleet, tenant: &TenantId, ids: &[TaskId]) -> Vec<TaskRecord> {
    let mut found = Vec::new();
    for id in ids {
        found.push(fleet.queue.reader().get(tenant, id).await.expect("get").expect("task"));
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_usage_is_exactly_the_sum_of_its_tasks_and_only_its_own() {
    let s3 = S3Server::start();
    let provider = Arc::new(MemoryProvider::new());
    let options =
        DesktopOptions { blobs: Some(s3.store(&unique_prefix())), provider: Some(provider.clone()), ..DesktopOptions::default() };
    let fleet = DesktopFleet::start(options).await;
    let api = spawn_api(fleet.config.clone()).await;
    let acme_api = ApiClient::new(&api, flotilla_tests::api_key());
    let globex_api = ApiClient::new(&api, flotilla_tests::globex_key());
    let (acme, globex) = (tenant("acme"), tenant("globex"));
    let submit = async |who: &TenantId, spec: TaskSpec| fleet.queue.submitter().submit(who, spec).await.expect("submit").id;

    let mut acme_ids = Vec::new();
    for _ in 0..3 {
        acme_ids.push(submit(&acme, on_screen(2, 20, json!({}))).await);
    }
    acme_ids.push(submit(&acme, on_screen(3, 20, json!({"max_steps": 2}))).await);
    let queued = submit(&acme, on_screen(1, 20, json!({"not_before": "2099-01-01T00:00:00Z"}))).await;
    acme_ids.push(queued.clone());
    let running = submit(&acme, on_screen(40, 50, json!({}))).await;
    acme_ids.push(running.clone());
    let retried = submit(&acme, on_screen(20, 50, json!({}))).await;
    acme_ids.push(retried.clone());
    let mut globex_ids = Vec::new();
    for _ in 0..2 {
        globex_ids.push(submit(&globex, on_screen(1, 20, json!({}))).await);
    }

    fleet.queue.submitter().cancel(&acme, &queued).await.expect("cancel a queued task");
    let sandbox_of = async |id: &TaskId| {
        events(&fleet.queue, id).await.iter().rev().find_map(|e| match &e.kind {
            EventKind::SandboxReady { sandbox_id, .. } => Some(sandbox_id.clone()),
            _ => None,
        })
    };
    eventually("the long tasks hold sandboxes", Duration::from_secs(30), async || {
        sandbox_of(&running).await.is_some() && sandbox_of(&retried).await.is_some()
    })
    .await;
    fleet.queue.submitter().cancel(&acme, &running).await.expect("cancel a running task");
    let first_sandbox = sandbox_of(&retried).await.expect("sandbox");
    let first = SandboxId::parse(&first_sandbox).expect("sandbox id");
    fleet.pool.provider().kill(&first).await.expect("killed from outside");

    wait_all_ended(&fleet.queue, &acme_ids, Duration::from_secs(60)).await;
    eventually("globex's tasks end", Duration::from_secs(30), async || {
        records(&fleet, &globex, &globex_ids).await.iter().all(|r| r.status.is_terminal())
    })
    .await;

    let acme_records = records(&fleet, &acme, &acme_ids).await;
    let globex_records = records(&fleet, &globex, &globex_ids).await;
    let by_status = |records: &[TaskRecord]| {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for r in records {
            *counts.entry(r.status.as_str()).or_default() += 1;
        }
        counts
    };
    assert_eq!(by_status(&acme_records), BTreeMap::from([("cancelled", 2), ("failed", 1), ("succeeded", 4)]));
    let retried_record = acme_records.iter().find(|r| r.id == retried).expect("retried task");
    assert_eq!((retried_record.status, retried_record.attempts), (TaskStatus::Succeeded, 2), "killed once, then ran again");

    let acme_sum = sum(&acme_records);
    assert!(acme_sum.steps > 0 && acme_sum.screenshot_bytes > 0 && acme_sum.screenshot_bytes_saved > 0, "{acme_sum:?}");
    assert!(acme_sum.sandbox_ms.get("memory").is_some_and(|ms| *ms > 0), "{acme_sum:?}");
    assert_eq!(reported(&acme_api).await, serde_json::to_value(&acme_sum).expect("json"), "acme: usage = sum of its tasks");
    let globex_sum = sum(&globex_records);
    assert_eq!(reported(&globex_api).await, serde_json::to_value(&globex_sum).expect("json"), "globex sees only its own");
    assert_ne!(acme_sum, globex_sum);
    let day = clock::utc_day(clock::now_ms());
    let mut conn = fleet.queue.redis().shared();
    for who in [&acme, &globex] {
        let ttl: i64 = conn.ttl(fleet.queue.keys().usage_day(who, &day)).await.expect("ttl");
        assert!(ttl >= 90 * 86_400, "{who}'s usage of today is kept at least 90 days, then expires (TTL {ttl})");
    }
    fleet.stop().await;
}

/// Usage is counted as it happens: a running task's model tokens (its
/// first turn against the protocol-faithful OpenAI server, the second turn
/// answered 4 s later) show in `GET /v1/usage` and in the task's own
/// `usage` while it still runs, and the rest once it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_tasks_tokens_show_in_usage_before_it_ends() {
    use flotilla_tests::fakes::{openai, Reply, ScriptedServer};
    let server = ScriptedServer::start().await;
    let click = vec![openai::computer_call("call_1", openai::click(10, 10, "left"))];
    server.push(Reply::json(openai::response("resp_1", click, 700, 50)));
    server.push(Reply::json(openai::response("resp_2", vec![openai::message("done")], 100, 10)).after(Duration::from_secs(4)));
    let env = vec![
        ("OPENAI_BASE_URL", format!("{}/v1", server.url())),
        ("OPENAI_API_KEY", "sk-test-openai-secret".to_owned()),
        ("FLOTILLA_WORKER_CONCURRENCY", "1".to_owned()),
    ];
    let provider = Arc::new(MemoryProvider::new());
    let fleet = DesktopFleet::start(DesktopOptions { env, provider: Some(provider), ..DesktopOptions::default() }).await;
    let api = spawn_api(fleet.config.clone()).await;
    let acme_api = ApiClient::new(&api, flotilla_tests::api_key());
    let acme = tenant("acme");
    let id = fleet.submit(json!({"prompt": "click then stop", "pipeline": "openai-cua", "retry": {"max_attempts": 1}})).await;
    let input_shown = async || {
        let (status, usage) = acme_api.get("/v1/usage").await;
        status == 200 && usage["total"]["input_tokens"] == 700
    };
    eventually("the first turn's tokens show while the task runs", Duration::from_secs(20), input_shown).await;
    let (_, usage) = acme_api.get("/v1/usage").await;
    assert_eq!(usage["total"]["output_tokens"], 50, "{usage}");
    let record = fleet.queue.reader().get(&acme, &id).await.expect("get").expect("task");
    assert_eq!(record.status, TaskStatus::Running, "the task has not ended yet");
    let own = record.usage.expect("the task's own usage so far");
    assert_eq!((own.input_tokens, own.output_tokens), (700, 50));

    wait_all_ended(&fleet.queue, std::slice::from_ref(&id), Duration::from_secs(30)).await;
    let (_, usage) = acme_api.get("/v1/usage").await;
    assert_eq!(
        (usage["total"]["input_tokens"].as_u64(), usage["total"]["output_tokens"].as_u64()),
        (Some(800), Some(60)),
        "{usage}"
    );
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tenant_cost_per_model_and_day_is_the_sum_of_its_tasks() {
    let server = flotilla_tests::fakes::ScriptedServer::start().await;
    let fake = flotilla_tests::fakes::openai::reply;
    let (click, message) = (flotilla_tests::fakes::openai::computer_call, flotilla_tests::fakes::openai::message);
    let mut turns = 0;
    for task in 0..3 {
        let call = click(&format!("call_{task}"), flotilla_tests::fakes::openai::click(10, 10, "left"));
        server.push(fake(&format!("resp_{task}a"), vec![call]));
        server.push(fake(&format!("resp_{task}b"), vec![message("done")]));
        turns += 2;
    }
    let env = vec![
        ("OPENAI_BASE_URL", format!("{}/v1", server.url())),
        ("OPENAI_API_KEY", "sk-test-openai-secret".to_owned()),
        ("FLOTILLA_WORKER_CONCURRENCY", "1".to_owned()),
    ];
    let provider = Arc::new(MemoryProvider::new());
    let fleet = DesktopFleet::start(DesktopOptions { env, provider: Some(provider), ..DesktopOptions::default() }).await;
    let api = spawn_api(fleet.config.clone()).await;
    let acme_api = ApiClient::new(&api, flotilla_tests::api_key());
    let acme = tenant("acme");
    let mut ids = Vec::new();
    for model in ["computer-use-preview", "gpt-6-astra", "a-model-nobody-priced"] {
        let body = json!({"prompt": "click", "pipeline": "openai-cua", "model": model, "retry": {"max_attempts": 1}});
        ids.push(fleet.queue.submitter().submit(&acme, spec(body)).await.expect("submit").id);
    }
    wait_all_ended(&fleet.queue, &ids, Duration::from_secs(60)).await;
    assert_eq!(server.received().len(), turns);

    let done = records(&fleet, &acme, &ids).await;
    let cost_of = |r: &TaskRecord| r.usage.as_ref().map_or(0.0, |u| u.cost_usd);
    // 1 000 tokens in and 50 out a turn, two turns a task.
    assert_eq!(cost_of(&done[0]), 2.0 * (1000.0 * 3.0 + 50.0 * 12.0) / 1e6, "computer-use-preview at $3 / $12");
    assert_eq!(cost_of(&done[1]), 2.0 * (1000.0 * 10.0 + 50.0 * 50.0) / 1e6, "gpt-6-astra at $10 / $50");
    assert_eq!(cost_of(&done[2]), 0.0, "an unpriced model adds nothing");
    let unpriced = done[2].usage.as_ref().expect("usage");
    assert_eq!(unpriced.models["a-model-nobody-priced"].cost_usd, None, "its cost is unknown");
    assert_eq!(unpriced.input_tokens, 2000, "its tokens are counted");

    let (status, usage) = acme_api.get("/v1/usage").await;
    assert_eq!(status, 200, "{usage}");
    let day = usage["days"].as_array().and_then(|d| d.last()).expect("today").clone();
    let sum: f64 = done.iter().map(cost_of).sum();
    assert!((usage["total"]["cost_usd"].as_f64().expect("cost") - sum).abs() < 1e-9, "total {usage} against {sum}");
    assert!((day["cost_usd"].as_f64().expect("cost") - sum).abs() < 1e-9, "the day's cost: {day}");
    for (record, model) in done.iter().zip(["computer-use-preview", "gpt-6-astra"]) {
        assert_eq!(day["models"][model]["cost_usd"].as_f64(), Some(cost_of(record)), "{model}: {day}");
    }
    assert!(day["models"]["a-model-nobody-priced"]["cost_usd"].is_null(), "{day}");
    fleet.stop().await;
}
