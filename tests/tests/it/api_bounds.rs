//! The API's bounds on every request, end to end against a real
//! redis-server: a request past `FLOTILLA_REQUEST_TIMEOUT_MS` gets `503`
//! with the JSON error `timeout`, an event stream is not cut at that time,
//! and past `FLOTILLA_API_CONCURRENCY` requests wait their turn.

use std::time::{Duration, Instant};

use flotilla_tests::sse::SseReader;
use flotilla_tests::{api_key, spawn_api, test_config, unique_prefix, ApiClient, RedisServer};
use serde_json::{json, Value};

/// With a 400 ms time limit and one request served at once: while Redis
/// is paused, a task listing (which reads Redis) answers `503 timeout`
/// after about the limit, a health check sent meanwhile is answered only
/// after it (it waited for the one slot), and the tenant's event stream,
/// opened before, stays open past the limit and carries the event of a
/// task submitted once Redis is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_request_times_out_a_stream_does_not_and_requests_past_the_concurrency_wait() {
    let redis = RedisServer::start();
    let config =
        test_config(&redis, &unique_prefix(), &[("FLOTILLA_REQUEST_TIMEOUT_MS", "400"), ("FLOTILLA_API_CONCURRENCY", "1")]);
    let api = spawn_api(config).await;
    let client = ApiClient::new(&api, api_key());
    let began = Instant::now();
    while client.get("/readyz").await.0 != 200 {
        assert!(began.elapsed() < Duration::from_secs(10), "the api never became ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("client");
    let stream = reqwest::Client::new().get(api.url("/v1/events")).bearer_auth(api_key()).send().await.expect("stream opens");
    assert_eq!(stream.status().as_u16(), 200);
    let mut events = SseReader::new(stream, Duration::from_secs(10));

    assert_eq!(redis.cli(&["CLIENT", "PAUSE", "1500", "ALL"]).trim(), "OK");
    let paused_at = Instant::now();
    // A PING sent now is answered when Redis serves again: the signal that
    // the pause is over.
    let back = {
        let port = redis.port.to_string();
        tokio::task::spawn_blocking(move || {
            let out = std::process::Command::new("redis-cli").args(["-p", &port, "PING"]).output().expect("redis-cli runs");
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "PONG");
            paused_at.elapsed()
        })
    };
    let slow = {
        let http = http.clone();
        let url = api.url("/v1/tasks?limit=1");
        tokio::spawn(async move {
            let answer = http.get(url).bearer_auth(api_key()).send().await.expect("answers");
            let status = answer.status().as_u16();
            (status, answer.json::<Value>().await.expect("json body"), paused_at.elapsed())
        })
    };
    // A head start, so the slow request holds the one slot when the health
    // check comes: nothing outside the API shows a request holding it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let health = http.get(api.url("/healthz")).send().await.expect("answers");
    let health_done = paused_at.elapsed();
    let (status, body, slow_done) = slow.await.expect("slow request");
    assert_eq!((status, body["error"]["code"].as_str()), (503, Some("timeout")), "{body}");
    assert!(slow_done >= Duration::from_millis(380), "{slow_done:?}, health {health_done:?}");
    assert_eq!(health.status().as_u16(), 200);
    // Sent 100 ms in, answered in a moment on its own: it waited for the
    // one slot until the slow request's time ran out.
    assert!(health_done >= Duration::from_millis(380), "the health check waited for the one slot: {health_done:?}");

    let back_at = back.await.expect("ping");
    // The slow request was answered at its time limit, while Redis still
    // held its read: before Redis served again.
    assert!(slow_done < back_at, "the slow request waited for Redis ({slow_done:?}), back at {back_at:?}");
    let task = json!({"prompt": "wait", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 1}]});
    let (status, created) = client.post("/v1/tasks", &task).await;
    assert_eq!(status, 202, "{created}");
    let id = created["id"].as_str().expect("task id").to_owned();
    let frame = events.next().await.expect("the stream is still open past the time limit");
    assert!(frame.data.contains(&id), "{frame:?}");
    assert!(paused_at.elapsed() > Duration::from_millis(1_500));
}
