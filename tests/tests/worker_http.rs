//! A worker's own HTTP side: its metrics count what it ran, and its health
//! and readiness endpoints answer for Kubernetes probes.

use std::time::Duration;

use flotilla_tests::redis_server::free_port;
use flotilla_tests::tasks::{queue, submit_many, wait_all_ended, wait_spec};
use flotilla_tests::{test_config, unique_prefix, RedisServer};
use flotilla_worker::Registry;
use tokio_util::sync::CancellationToken;

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
    let page = http.get(format!("{base}/metrics")).send().await.expect("metrics").text().await.expect("body");
    assert!(page.contains(r#"flotilla_worker_attempts_total{outcome="succeeded"} 3"#), "{page}");
    assert!(page.contains("flotilla_worker_attempt_seconds_count 3"), "{page}");
    assert!(page.contains("flotilla_worker_running_tasks 0"), "{page}");
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
