//! A worker's own HTTP side: its metrics count what it ran and time its
//! steps, model calls and sandbox acquires, report its pool and how many
//! screenshots needed no upload, to the admin key only; its health and
//! readiness endpoints answer anyone, for Kubernetes probes.

use std::time::Duration;

use flotilla_tests::desktop::{eventually, DesktopFleet, DesktopOptions};
use flotilla_tests::fakes::{openai, ScriptedServer};
use flotilla_tests::redis_server::free_port;
use flotilla_tests::s3_server::S3Server;
use flotilla_tests::tasks::{queue, record, submit_many, wait_all_ended, wait_spec};
use flotilla_tests::{admin_key, api_key, test_config, unique_prefix, RedisServer};
use flotilla_types::task::TaskStatus;
use flotilla_worker::Registry;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The metrics page at `url`, read with the admin key.
async fn admin_metrics(url: &str) -> String {
    let response = reqwest::Client::new().get(url).bearer_auth(admin_key()).send().await.expect("metrics");
    assert_eq!(response.status(), 200, "the admin key reads the figures");
    response.text().await.expect("body")
}

/// The value of one series (`name{labels}`) on a metrics page.
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// As [`sample`], failing the test when the series is missing.
fn value(page: &str, series: &str) -> f64 {
    sample(page, series).unwrap_or_else(|| panic!("{series} is missing from:\n{page}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_serves_metrics_of_what_it_ran_and_answers_probes() {
    let redis = RedisServer::start();
    let addr = format!("127.0.0.1:{}", free_port());
    let config = test_config(&redis, &unique_prefix(), &[("FLOTILLA_WORKER_HTTP_ADDR", &addr)]);
    let q = queue(&config).await;
    let ids = submit_many(&q, &wait_spec(20), 3).await;
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(flotilla_worker::run_with(config, Registry::standard(), shutdown.clone()));
    wait_all_ended(&q, &ids, Duration::from_secs(15)).await;

    let http = reqwest::Client::new();
    let base = format!("http://{addr}");
    // Issue 34: the worker's figures answered anyone; only the admin key reads them now.
    for refused in [http.get(format!("{base}/metrics")), http.get(format!("{base}/metrics")).bearer_auth(api_key())] {
        let response = refused.send().await.expect("metrics");
        assert_eq!(response.status(), 401, "no key, or a tenant's key");
        assert!(!response.text().await.expect("body").contains("flotilla_worker"), "nothing of the figures");
    }
    let page = admin_metrics(&format!("{base}/metrics")).await;
    assert!(page.contains(r#"flotilla_worker_attempts_total{outcome="succeeded"} 3"#), "{page}");
    assert!(page.contains("flotilla_worker_attempt_seconds_count 3"), "{page}");
    assert!(page.contains("flotilla_worker_running_tasks 0"), "{page}");
    assert_eq!(value(&page, r#"flotilla_worker_step_seconds_count{action="wait"}"#), 3.0);
    assert!(value(&page, r#"flotilla_worker_step_seconds_sum{action="wait"}"#) >= 0.06, "three waits of 20 ms");
    assert!(!page.contains("sandboxes_ready") && !page.contains("screenshot"), "no pool, no store: {page}");
    assert_eq!(http.get(format!("{base}/healthz")).send().await.expect("healthz").status(), 200);
    assert_eq!(http.get(format!("{base}/readyz")).send().await.expect("readyz").status(), 200);

    drop(redis);
    let not_ready = http.get(format!("{base}/readyz")).send().await.expect("readyz").status();
    assert_eq!(not_ready, 503, "not ready once Redis is gone");
    shutdown.cancel();
    worker.await.expect("joins").expect("stops cleanly");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_refuses_to_start_on_an_address_it_cannot_use() {
    let redis = RedisServer::start();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr").to_string();
    let config = test_config(&redis, &unique_prefix(), &[("FLOTILLA_WORKER_HTTP_ADDR", &addr)]);
    let err = flotilla_worker::run_with(config, Registry::standard(), CancellationToken::new()).await.expect_err("refused");
    assert!(err.to_string().starts_with("FLOTILLA_WORKER_HTTP_ADDR: cannot listen on"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_worker_times_steps_model_calls_and_acquires_and_reports_its_pool_and_dedup() {
    let model = ScriptedServer::start().await;
    model.push(openai::reply("resp_1", vec![openai::computer_call("call_1", openai::click(100, 100, "left"))]));
    model.push(openai::reply("resp_2", vec![openai::message("done")]));
    let s3 = S3Server::start();
    let addr = format!("127.0.0.1:{}", free_port());
    let env = vec![
        ("OPENAI_BASE_URL", format!("{}/v1", model.url())),
        ("OPENAI_API_KEY", "sk-test-metrics".to_owned()),
        ("FLOTILLA_WORKER_HTTP_ADDR", addr.clone()),
    ];
    let options = DesktopOptions { warm: 1, blobs: Some(s3.store(&unique_prefix())), env, ..DesktopOptions::default() };
    let fleet = DesktopFleet::start(options).await;
    eventually("the pool has a ready desktop", Duration::from_secs(20), async || fleet.pool.ready() == 1).await;

    // A model-driven task on the pool's desktop, then a scripted one on a
    // desktop of another size, started for it, whose screen never changes.
    let (cua, events) =
        fleet.run_to_end(json!({"prompt": "click", "pipeline": "openai-cua", "retry": {"max_attempts": 1}})).await;
    assert_eq!(record(&fleet.queue, &cua).await.status, TaskStatus::Succeeded, "{events:?}");
    let still = json!({
        "prompt": "look twice", "pipeline": "scripted", "sandbox": {"resolution": [800, 600]},
        "actions": [{"type": "screenshot"}, {"type": "screenshot"}]
    });
    let (scripted, events) = fleet.run_to_end(still).await;
    assert_eq!(record(&fleet.queue, &scripted).await.status, TaskStatus::Succeeded, "{events:?}");
    eventually("the pool is back to one ready desktop", Duration::from_secs(20), async || {
        fleet.pool.ready() == 1 && fleet.pool.live() == 1
    })
    .await;

    let page = admin_metrics(&format!("http://{addr}/metrics")).await;
    assert_eq!(value(&page, r#"flotilla_worker_step_seconds_count{action="click"}"#), 1.0);
    assert_eq!(value(&page, r#"flotilla_worker_step_seconds_count{action="screenshot"}"#), 2.0);
    assert_eq!(value(&page, r#"flotilla_worker_model_call_seconds_count{provider="openai",outcome="ok"}"#), 2.0);
    assert!(value(&page, r#"flotilla_worker_model_call_seconds_sum{provider="openai",outcome="ok"}"#) > 0.0);
    assert_eq!(value(&page, r#"flotilla_worker_sandbox_acquire_seconds_count{start="warm"}"#), 1.0);
    assert_eq!(value(&page, r#"flotilla_worker_sandbox_acquire_seconds_count{start="cold"}"#), 1.0);
    let (warm, cold) = (
        value(&page, r#"flotilla_worker_sandbox_acquire_seconds_sum{start="warm"}"#),
        value(&page, r#"flotilla_worker_sandbox_acquire_seconds_sum{start="cold"}"#),
    );
    assert!(warm < cold, "a warm desktop is handed out faster than one is started ({warm} s vs {cold} s)");
    assert_eq!(value(&page, "flotilla_worker_sandboxes_ready"), 1.0);
    assert_eq!(value(&page, "flotilla_worker_sandboxes_live"), 1.0);

    // Two screenshots for the model task, three for the scripted one.
    let seen = value(&page, "flotilla_worker_screenshots_total");
    let uploaded = value(&page, "flotilla_worker_screenshot_uploads_total");
    let deduplicated = value(&page, "flotilla_worker_screenshot_dedup_total");
    assert_eq!(seen, 5.0, "{page}");
    assert_eq!(uploaded + deduplicated, seen, "each screenshot is uploaded or found stored: {page}");
    assert!(deduplicated >= 1.0, "an unchanged screen is not uploaded again: {page}");
    assert!((value(&page, "flotilla_worker_screenshot_dedup_ratio") - deduplicated / seen).abs() < 1e-9, "{page}");
    fleet.stop().await;
}
