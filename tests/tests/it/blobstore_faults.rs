//! The screenshot uploader when the store fails: a store that is down for a
//! couple of seconds and comes back (everything is stored), one that never
//! comes back (`flush` says so within its deadline), and one that refuses
//! the credentials (`flush` says so at once).

use std::time::{Duration, Instant};

use flotilla_blobstore::{BlobError, BlobStore, UploadError, Uploader, UploaderOptions};
use flotilla_tests::s3_server::{S3Server, ACCESS_KEY, BUCKET};
use flotilla_tests::unique_prefix;

/// A PNG-signed blob unique to `seed`.
fn png(seed: u32) -> Vec<u8> {
    let mut bytes = vec![0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];
    bytes.extend((0..8_192u32).map(|i| (i.wrapping_mul(13).wrapping_add(seed.wrapping_mul(7_919)) % 241) as u8));
    bytes.extend(seed.to_le_bytes());
    bytes
}

fn options(deadline: Duration) -> UploaderOptions {
    UploaderOptions {
        queue: 8,
        parallel: 4,
        min_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(400),
        give_up_after: Duration::from_secs(60),
        deadline,
    }
}

/// Waits until `check` holds, polling, or panics with `what`.
async fn eventually(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_ride_out_a_store_restart() {
    let mut server = S3Server::start();
    let store = server.store(&unique_prefix());
    let uploader = Uploader::spawn(store.clone(), options(Duration::from_secs(30)));
    let mut hashes = Vec::new();
    for seed in 0..4 {
        hashes.push(uploader.enqueue(png(seed)).await.expect("enqueue").hash);
    }
    assert_eq!(uploader.flush().await.expect("flush before the outage").len(), 4);

    tokio::task::block_in_place(|| server.stop());
    let down_at = Instant::now();
    for seed in 4..14 {
        hashes.push(uploader.enqueue(png(seed)).await.expect("enqueue while down").hash);
    }
    eventually("uploads fail and are retried", Duration::from_secs(10), || uploader.retries() > 0).await;
    // The store stays down for 2 s at least: the outage is the scenario.
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(down_at.elapsed())).await;
    tokio::task::block_in_place(|| server.restart());

    let stored = uploader.flush().await.expect("everything is stored once the store is back");
    let listed: Vec<&str> = stored.iter().map(|s| s.hash.as_str()).collect();
    assert_eq!(listed, hashes.iter().map(String::as_str).collect::<Vec<_>>(), "in step order");
    assert!(uploader.retries() > 0);
    let objects = store.list(&store.layout().screenshots()).await.expect("list");
    assert_eq!(objects.len(), 14, "{objects:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_reports_a_store_gone_for_good_within_its_deadline() {
    let mut server = S3Server::start();
    let store = server.store(&unique_prefix());
    let deadline = Duration::from_secs(3);
    let uploader = Uploader::spawn(store, options(deadline));
    uploader.enqueue(png(1)).await.expect("enqueue");
    uploader.flush().await.expect("stored while up");

    tokio::task::block_in_place(|| server.stop());
    for seed in 2..5 {
        uploader.enqueue(png(seed)).await.expect("enqueue");
    }
    let started = Instant::now();
    let err = uploader.flush().await.expect_err("the store never comes back");
    let waited = started.elapsed();
    assert!(waited >= deadline - Duration::from_millis(50), "flush gave up early, after {waited:?}");
    assert!(waited < deadline + Duration::from_secs(10), "flush overran its deadline: {waited:?}");
    match &err {
        UploadError::NotStored { pending, last_error: Some(BlobError::Unreachable { .. }), .. } => assert_eq!(*pending, 3),
        other => panic!("expected NotStored with an unreachable store, got {other:?}"),
    }
    assert!(err.is_retryable());
    let text = err.to_string();
    assert!(text.contains("3 screenshots still not stored") && text.contains("unreachable"), "{text}");
    assert_eq!(uploader.stored().len(), 1, "only the first screenshot is stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_fails_at_once_when_the_credentials_are_refused() {
    let server = S3Server::start();
    let store = BlobStore::new(server.config_with(&unique_prefix(), BUCKET, ACCESS_KEY, "wrong-secret"));
    let uploader = Uploader::spawn(store, options(Duration::from_secs(20)));
    uploader.enqueue(png(1)).await.expect("enqueue");
    let started = Instant::now();
    let err = uploader.flush().await.expect_err("refused");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a final error does not wait for the 20 s deadline: {:?}",
        started.elapsed()
    );
    match &err {
        UploadError::Failed { seq: 0, source: BlobError::BadCredentials { .. } } => {}
        other => panic!("expected a credentials failure, got {other:?}"),
    }
    assert!(!err.is_retryable());
    assert_eq!(uploader.retries(), 0, "a final error is not retried");
    let mut feed = uploader.feed();
    assert!(feed.next().await.is_none(), "nothing stored comes out of the feed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_yields_stored_screenshots_in_step_order() {
    let server = S3Server::start();
    let store = server.store(&unique_prefix());
    let uploader = Uploader::spawn(store, options(Duration::from_secs(20)));
    let mut feed = uploader.feed();
    let mut hashes = Vec::new();
    for seed in [1, 2, 1, 3, 2] {
        hashes.push(uploader.enqueue(png(seed)).await.expect("enqueue").hash);
    }
    for (seq, hash) in hashes.iter().enumerate() {
        let (n, image) = feed.next().await.expect("next stored");
        assert_eq!((n as usize, &image.hash), (seq, hash));
    }
    let stored = uploader.finish().await.expect("finish");
    let dedup: Vec<bool> = stored.iter().map(|s| s.dedup).collect();
    assert_eq!(dedup.iter().filter(|d| !**d).count(), 3, "three distinct images: {dedup:?}");
}
