//! The dashboard's batches panel in a real headless Chromium: a batch's bar
//! has a segment per status, as wide as its share and counting its tasks
//! (as `GET /v1/batches/{id}` does), with the counts in words; it follows
//! the fleet without a reload, and a click lists only that batch's tasks.
//! A PNG of the page is kept under `<target>/test-artifacts/`.

use std::path::PathBuf;
use std::time::Duration;

use flotilla_tests::browser::Browser;
use flotilla_tests::{api_key, spawn_api, test_config, unique_prefix, ApiClient, InProcessWorker, RedisServer};
use flotilla_worker::Registry;
use serde_json::json;

/// How long the page may take to show what the API already knows (as in
/// the other dashboard tests, for a loaded 2-core machine).
const SHOWN: Duration = Duration::from_secs(45);

/// `count` tasks of `status` in the bar of `batch`, its segment as wide as their share of `total`.
fn segment_shows(batch: &str, status: &str, count: u32, total: u32) -> String {
    format!(
        "(s => !!s && s.dataset.count === '{count}' && \
           Math.abs(s.getBoundingClientRect().width / s.parentElement.getBoundingClientRect().width - {count} / {total}) < 0.02)\
         (document.querySelector('#batches tr[data-batch-id=\"{batch}\"] .segment.{status}'))"
    )
}

fn counts_text(batch: &str) -> String {
    format!("document.querySelector('#batches tr[data-batch-id=\"{batch}\"] .batch-counts').textContent")
}

#[tokio::test(flavor = "multi_thread")]
async fn in_a_browser_a_batch_shows_a_bar_of_its_tasks_by_status_that_follows_the_fleet() {
    let redis = RedisServer::start();
    let config = test_config(&redis, &unique_prefix(), &[]);
    let api = spawn_api(config.clone()).await;
    let client = ApiClient::new(&api, api_key());
    let wait = |ms: u64| json!({"prompt": format!("wait {ms} ms"), "actions": [{"type": "wait", "ms": ms}]});
    let batch = json!({"tasks": [wait(100), wait(150), wait(200), wait(60_000)], "defaults": {"pipeline": "scripted"}});
    let (status, body) = client.post("/v1/batches", &batch).await;
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_str().expect("batch id").to_owned();
    let long = body["task_ids"][3].as_str().expect("task id").to_owned();

    let mut browser = Browser::launch(1280, 900).await.expect("start chromium");
    browser.navigate(&api.url("/")).await.expect("open the dashboard");
    browser.type_into("#key-input", api_key()).await.expect("type the key");
    browser.click("#key-submit").await.expect("sign in");
    browser.wait_for("the batch's tasks are all queued", &segment_shows(&id, "queued", 4, 4), SHOWN).await.expect("queued");
    let text = browser.evaluate(&counts_text(&id)).await.expect("counts");
    assert_eq!(text, json!("4 queued"));

    // A worker takes them: three end, one runs on; the bar follows.
    let worker = InProcessWorker::start(config, Registry::standard());
    let moved = format!("{} && {}", segment_shows(&id, "succeeded", 3, 4), segment_shows(&id, "running", 1, 4));
    browser.wait_for("three succeeded, one running", &moved, SHOWN).await.expect("progress");
    let text = browser.evaluate(&counts_text(&id)).await.expect("counts");
    assert_eq!(text, json!("3 succeeded · 1 running"));
    let ended = browser
        .evaluate(&format!("document.querySelector('#batches tr[data-batch-id=\"{id}\"] td:nth-child(2)').textContent"))
        .await
        .expect("ended");
    assert_eq!(ended, json!("3/4"));
    let png = browser.screenshot_png().await.expect("screenshot of the page");
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.parent().map_or_else(|| tmp.clone(), PathBuf::from).join("test-artifacts");
    std::fs::create_dir_all(&dir).expect("create the artifact dir");
    std::fs::write(dir.join("dashboard-batches.png"), png).expect("write the screenshot");

    // The one left is cancelled: the bar counts it so.
    let (status, body) = client.post_empty(&format!("/v1/tasks/{long}/cancel")).await;
    assert_eq!(status, 202, "{body}");
    let done = format!("{} && {}", segment_shows(&id, "succeeded", 3, 4), segment_shows(&id, "cancelled", 1, 4));
    browser.wait_for("three succeeded, one cancelled", &done, SHOWN).await.expect("cancelled");

    // A click on the batch lists only its tasks.
    let other = client
        .post("/v1/tasks", &json!({"prompt": "alone", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 1}]}))
        .await;
    let other = other.1["id"].as_str().expect("task id").to_owned();
    browser
        .wait_for("the other task is listed", &format!("!!document.querySelector('#tasks tr[data-task-id=\"{other}\"]')"), SHOWN)
        .await
        .expect("listed");
    browser.click(&format!("#batches tr[data-batch-id=\"{id}\"]")).await.expect("click the batch");
    let only_batch = format!(
        "document.getElementById('task-batch').value === '{id}' && document.querySelectorAll('#tasks tbody tr').length === 4 && \
         !document.querySelector('#tasks tr[data-task-id=\"{other}\"]')"
    );
    browser.wait_for("only the batch's tasks are listed", &only_batch, SHOWN).await.expect("filtered");
    browser.close().await;
    worker.stop().await;
}
