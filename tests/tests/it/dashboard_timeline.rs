//! A task's timeline in the dashboard, in a real headless Chromium: a
//! computer-use task (a model served by the local OpenAI-protocol server,
//! sandboxes held in memory) calls its model, stops at a safety check until
//! it is approved through the API, acts, and ends. Its pane draws lanes on
//! one time axis: two model calls, one action, one wait spanning from the
//! `waiting` event to the person's answer, and the attempt, with the counts
//! in words. A PNG of the page is kept under `<target>/test-artifacts/`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use flotilla_tests::browser::Browser;
use flotilla_tests::desktop::{DesktopFleet, DesktopOptions};
use flotilla_tests::fakes::{openai, ScriptedServer};
use flotilla_tests::{api_key, spawn_api, ApiClient};
use flotilla_worker::sandbox::MemoryProvider;
use serde_json::json;

/// How long the page may take to show what the API already knows (as in
/// the other dashboard tests, for a loaded 2-core machine).
const SHOWN: Duration = Duration::from_secs(45);

/// How many marks the lane `lane` of the timeline has.
fn lane_count(lane: &str) -> String {
    format!("(document.querySelector('#timeline .lane[data-lane=\"{lane}\"]') || {{dataset: {{}}}}).dataset.count")
}

#[tokio::test(flavor = "multi_thread")]
async fn in_a_browser_a_tasks_timeline_shows_its_model_calls_actions_and_waits() {
    let model = ScriptedServer::start().await;
    let call = openai::with_safety_check(
        openai::computer_call("call_1", openai::click(10, 10, "left")),
        "sc_1",
        "malicious_instructions",
        "Check before clicking.",
    );
    model.push(openai::reply("resp_1", vec![call]));
    model.push(openai::reply("resp_2", vec![openai::message("Clicked after approval.")]));
    let env = vec![("OPENAI_BASE_URL", format!("{}/v1", model.url())), ("OPENAI_API_KEY", "sk-timeline-test".to_owned())];
    let provider = Arc::new(MemoryProvider::new());
    let fleet = DesktopFleet::start(DesktopOptions { env, provider: Some(provider), ..DesktopOptions::default() }).await;
    let api = spawn_api(fleet.config.clone()).await;
    let client = ApiClient::new(&api, api_key());
    let id = fleet.submit(json!({"prompt": "click the corner", "pipeline": "openai-cua", "retry": {"max_attempts": 1}})).await;
    fleet.wait_until_waiting(&id).await;

    let mut browser = Browser::launch(1280, 1000).await.expect("start chromium");
    browser.navigate(&api.url(&format!("/#{id}"))).await.expect("open the dashboard on the task");
    browser.type_into("#key-input", api_key()).await.expect("type the key");
    browser.click("#key-submit").await.expect("sign in");
    let waiting =
        format!("{} === '1' && {} === '1' && {} === '0'", lane_count("waits"), lane_count("model"), lane_count("actions"));
    browser.wait_for("the timeline shows the open wait", &waiting, SHOWN).await.expect("waiting");

    let (status, body) = client.post(&format!("/v1/tasks/{id}/input"), &json!({"decision": "approve"})).await;
    assert_eq!(status, 202, "{body}");
    let ended = format!(
        "document.getElementById('detail-status').textContent === 'succeeded' && {} === '2' && {} === '1' && {} === '1' && {} === '1'",
        lane_count("model"),
        lane_count("actions"),
        lane_count("waits"),
        lane_count("attempts")
    );
    browser.wait_for("the timeline shows the whole run", &ended, SHOWN).await.expect("ended");
    let summary = browser.evaluate("document.querySelector('#timeline .timeline-summary').textContent").await.expect("summary");
    let summary = summary.as_str().unwrap_or_default().to_owned();
    assert!(summary.starts_with("0 steps · 2 model calls · 1 action · 1 wait ("), "{summary}");
    // The wait spans from the `waiting` event to the answer: it starts
    // after the first model call and ends before the action.
    let order = browser
        .evaluate(
            "(() => { const x = (sel) => parseFloat(document.querySelector(sel).style.left); \
               const wait = document.querySelector('#timeline .lane[data-lane=\"waits\"] .span'); \
               const calls = Array.from(document.querySelectorAll('#timeline .lane[data-lane=\"model\"] .point'), p => parseFloat(p.style.left)); \
               return [calls[0], x('#timeline .lane[data-lane=\"waits\"] .span'), parseFloat(wait.style.left) + parseFloat(wait.style.width), \
                       x('#timeline .lane[data-lane=\"actions\"] .point')]; })()",
        )
        .await
        .expect("positions");
    let at: Vec<f64> = serde_json::from_value(order.clone()).expect("numbers");
    assert!(at.windows(2).all(|w| w[0] <= w[1] + 0.5), "model call, wait start, wait end, action in order: {order}");
    let png = browser.screenshot_png().await.expect("screenshot of the page");
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.parent().map_or_else(|| tmp.clone(), PathBuf::from).join("test-artifacts");
    std::fs::create_dir_all(&dir).expect("create the artifact dir");
    std::fs::write(dir.join("dashboard-timeline.png"), png).expect("write the screenshot");
    browser.close().await;
    fleet.stop().await;
}
