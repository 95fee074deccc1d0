//! The blob store's behaviour suite, run here against a real `s3s-fs`.
//!
//! The suite is written against a [`Backend`]: anything that can hand out
//! stores under a fresh prefix, with good credentials, a wrong secret, or a
//! bucket that does not exist. Another S3-compatible server (or AWS itself)
//! passes the same suite by implementing it.

use std::time::{Duration, Instant};

use flotilla_blobstore::{content_hash, BlobError, BlobStore, KnownHashes, KNOWN_HASH_TTL};
use flotilla_tests::s3_server::{S3Server, ACCESS_KEY, BUCKET};
use flotilla_tests::{unique_prefix, RedisServer};
use flotilla_types::ids::TaskId;

/// Where the suite gets its stores.
trait Backend {
    /// A store under `prefix` with working credentials.
    fn store(&self, prefix: &str) -> BlobStore;
    /// A store under `prefix` whose secret key is wrong.
    fn store_with_wrong_secret(&self, prefix: &str) -> BlobStore;
    /// A store pointed at a bucket that does not exist.
    fn store_without_bucket(&self, prefix: &str) -> BlobStore;
}

impl Backend for S3Server {
    fn store(&self, prefix: &str) -> BlobStore {
        S3Server::store(self, prefix)
    }

    fn store_with_wrong_secret(&self, prefix: &str) -> BlobStore {
        BlobStore::new(self.config_with(prefix, BUCKET, ACCESS_KEY, "not-the-secret"))
    }

    fn store_without_bucket(&self, prefix: &str) -> BlobStore {
        let mut config = self.config(prefix);
        config.bucket = "no-such-bucket".to_owned();
        BlobStore::new(config)
    }
}

/// A PNG-signed blob unique to `seed`, the size of a small screenshot.
fn png(seed: u32) -> Vec<u8> {
    let mut bytes = vec![0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];
    bytes.extend((0..4096u32).map(|i| (i.wrapping_mul(31).wrapping_add(seed.wrapping_mul(7919)) % 251) as u8));
    bytes.extend(seed.to_le_bytes());
    bytes
}

/// The URL with the first hex digit of its signature changed.
fn tamper_signature(url: &str) -> String {
    let at = url.find("X-Amz-Signature=").expect("a SigV4 presigned URL") + "X-Amz-Signature=".len();
    let digit = if url[at..].starts_with('0') { "1" } else { "0" };
    format!("{}{digit}{}", &url[..at], &url[at + 1..])
}

mod suite {
    use super::*;

    pub async fn put_get_exists(backend: &impl Backend) {
        let store = backend.store(&unique_prefix());
        let image = png(1);
        let stored = store.put_screenshot(image.clone()).await.expect("put");
        assert_eq!(stored.hash, content_hash(&image));
        assert_eq!(stored.key, store.layout().screenshot(&stored.hash));
        assert!(stored.key.ends_with(&format!("screenshots/{}.png", stored.hash)), "{}", stored.key);
        assert_eq!(stored.bytes, image.len() as u64);
        assert!(!stored.dedup, "the first put stores the bytes");
        assert!(store.exists(&stored.key).await.expect("exists"));
        assert_eq!(store.get(&stored.key).await.expect("get"), image);

        let missing = store.layout().screenshot(&content_hash(b"never stored"));
        assert!(!store.exists(&missing).await.expect("exists of a missing key"));
        let err = store.get(&missing).await.expect_err("get of a missing key");
        assert!(matches!(err, BlobError::NotFound { .. }), "{err}");
        assert!(!err.is_retryable());

        let err = store.put_screenshot(b"GIF89a not a png".to_vec()).await.expect_err("not a png");
        assert!(matches!(err, BlobError::NotPng { .. }), "{err}");
    }

    pub async fn same_bytes_are_stored_once(backend: &impl Backend) {
        let prefix = unique_prefix();
        let first_worker = backend.store(&prefix);
        let second_worker = backend.store(&prefix);
        let image = png(2);
        let first = first_worker.put_screenshot(image.clone()).await.expect("first put");
        let again = first_worker.put_screenshot(image.clone()).await.expect("same worker again");
        let elsewhere = second_worker.put_screenshot(image.clone()).await.expect("another worker");
        assert!(!first.dedup);
        assert!(again.dedup, "a repeat is a duplicate");
        assert!(elsewhere.dedup, "another worker learns from the store that the bytes are there");
        assert_eq!((first.key.as_str(), first.hash.as_str()), (elsewhere.key.as_str(), elsewhere.hash.as_str()));
        assert_eq!(first_worker.stats().put_requests, 1, "the repeat cost no request");
        assert_eq!(first_worker.stats().dedup_local, 1);
        assert_eq!(second_worker.stats().uploads, 0);
        assert_eq!(second_worker.stats().dedup_store, 1);

        let other = first_worker.put_screenshot(png(3)).await.expect("other image");
        assert!(!other.dedup);
        let listed = first_worker.list(&first_worker.layout().screenshots()).await.expect("list");
        let mut keys: Vec<String> = listed.into_iter().map(|o| o.key).collect();
        keys.sort();
        let mut expected = vec![first.key, other.key];
        expected.sort();
        assert_eq!(keys, expected, "one object per distinct image");
    }

    pub async fn artifacts_live_under_their_task(backend: &impl Backend) {
        let store = backend.store(&unique_prefix());
        let task = TaskId::generate();
        let report = b"# Report\n\nall done\n".to_vec();
        let stored = store.put_artifact(&task, "out/report.md", report.clone()).await.expect("artifact");
        assert_eq!(stored.key, format!("{}tasks/{}/artifacts/out/report.md", store.layout().prefix(), task.as_str()));
        assert_eq!(stored.bytes, report.len() as u64);
        assert_eq!(stored.hash, content_hash(&report));
        assert_eq!(store.get(&stored.key).await.expect("get"), report);

        let rewritten = store.put_artifact(&task, "out/report.md", b"second attempt".to_vec()).await.expect("rewrite");
        assert_eq!(rewritten.key, stored.key);
        assert_eq!(store.get(&stored.key).await.expect("get"), b"second attempt".as_slice());

        for bad in ["../escape.txt", "/etc/passwd", "a/../../b", "a//b", ""] {
            let err = store.put_artifact(&task, bad, b"x".to_vec()).await.expect_err(bad);
            assert!(matches!(err, BlobError::InvalidPath { .. }), "{bad:?}: {err}");
        }
        let under_task = store.list(&store.layout().task_artifacts(&task)).await.expect("list");
        assert_eq!(under_task.len(), 1, "{under_task:?}");
        let everything = store.list(store.layout().prefix()).await.expect("list prefix");
        assert_eq!(everything.len(), 1, "nothing escaped the task's prefix: {everything:?}");
    }

    pub async fn presigned_urls_work_then_expire(backend: &impl Backend) {
        let store = backend.store(&unique_prefix());
        let image = png(4);
        let stored = store.put_screenshot(image.clone()).await.expect("put");
        let http = reqwest::Client::new();

        let long = store.presigned_get(&stored.key, Duration::from_secs(300)).await.expect("presign");
        let answer = http.get(&long.url).send().await.expect("GET");
        assert_eq!(answer.status(), 200, "{}", long.url);
        assert_eq!(answer.bytes().await.expect("body").as_ref(), image.as_slice());

        let tampered = tamper_signature(&long.url);
        assert_eq!(http.get(&tampered).send().await.expect("GET").status(), 403, "a tampered URL is refused");
        let plain = long.url.split('?').next().expect("path").to_owned();
        assert_eq!(http.get(&plain).send().await.expect("GET").status(), 403, "an unsigned GET is refused");

        // S3 dates are in whole seconds, so a 2 s URL is good for at least 1 s.
        let short = store.presigned_get(&stored.key, Duration::from_secs(2)).await.expect("presign");
        assert_eq!(http.get(&short.url).send().await.expect("GET").status(), 200, "valid before it expires");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let status = http.get(&short.url).send().await.expect("GET").status();
            if status == 403 {
                break;
            }
            assert_eq!(status, 200);
            assert!(Instant::now() < deadline, "the URL still worked 10 s after a 2 s expiry");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        for ttl in [Duration::ZERO, Duration::from_secs(8 * 24 * 3600)] {
            let err = store.presigned_get(&stored.key, ttl).await.expect_err("ttl out of range");
            assert!(matches!(err, BlobError::Config(_)), "{err}");
        }
    }

    pub async fn bad_credentials_are_a_clear_final_error(backend: &impl Backend) {
        let prefix = unique_prefix();
        let store = backend.store_with_wrong_secret(&prefix);
        let err = store.put_screenshot(png(5)).await.expect_err("wrong secret");
        assert!(matches!(err, BlobError::BadCredentials { .. }), "{err:?}");
        assert!(!err.is_retryable(), "{err}");
        assert!(err.to_string().contains("credentials"), "{err}");
        let err = store.check().await.expect_err("check with a wrong secret");
        assert!(!err.is_retryable(), "{err}");

        let err = backend.store_without_bucket(&prefix).check().await.expect_err("missing bucket");
        assert!(matches!(err, BlobError::NoSuchBucket { .. }), "{err:?}");
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("FLOTILLA_S3_BUCKET"), "{err}");
    }

    pub async fn check_learns_conditional_put(backend: &impl Backend) {
        let store = backend.store(&unique_prefix());
        let support = store.check().await.expect("check");
        assert!(support.conditional_put, "the store honours If-None-Match: *");
        let again = store.check().await.expect("check twice");
        assert_eq!(again, support);
    }
}

#[tokio::test]
async fn s3s_fs_put_get_exists() {
    suite::put_get_exists(&S3Server::start()).await;
}

#[tokio::test]
async fn s3s_fs_same_bytes_are_stored_once() {
    suite::same_bytes_are_stored_once(&S3Server::start()).await;
}

#[tokio::test]
async fn s3s_fs_artifacts_live_under_their_task() {
    suite::artifacts_live_under_their_task(&S3Server::start()).await;
}

#[tokio::test]
async fn s3s_fs_presigned_urls_work_then_expire() {
    suite::presigned_urls_work_then_expire(&S3Server::start()).await;
}

#[tokio::test]
async fn s3s_fs_bad_credentials_are_a_clear_final_error() {
    suite::bad_credentials_are_a_clear_final_error(&S3Server::start()).await;
}

#[tokio::test]
async fn s3s_fs_check_learns_conditional_put() {
    suite::check_learns_conditional_put(&S3Server::start()).await;
}

#[tokio::test]
async fn s3s_fs_head_then_put_dedups_too() {
    let server = S3Server::start();
    let prefix = unique_prefix();
    let mut config = server.config(&prefix);
    config.dedup = flotilla_blobstore::DedupStrategy::HeadThenPut;
    config.recent_hashes = 0;
    let store = BlobStore::new(config);
    let first = store.put_screenshot(png(6)).await.expect("first");
    let second = store.put_screenshot(png(6)).await.expect("second");
    assert!(!first.dedup && second.dedup);
    let stats = store.stats();
    assert_eq!((stats.head_requests, stats.put_requests), (2, 1), "{stats:?}");
}

/// The fleet-wide record in Redis answers for hashes another worker stored,
/// and never for one whose upload failed.
#[tokio::test]
async fn known_hashes_in_redis_spare_other_workers_a_request() {
    let server = S3Server::start();
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).expect("redis url");
    let conn = redis::aio::ConnectionManager::new(client).await.expect("redis");
    let prefix = unique_prefix();
    let known = KnownHashes::new(conn.clone(), &prefix, KNOWN_HASH_TTL);
    let image = png(7);
    let hash = content_hash(&image);

    let refused = BlobStore::with_known_hashes(server.config_with(&prefix, BUCKET, ACCESS_KEY, "wrong"), known.clone());
    refused.put_screenshot(image.clone()).await.expect_err("wrong secret");
    let mut check = conn.clone();
    let record = refused.known_hashes().expect("scoped record").key(&hash);
    let recorded: i64 = redis::cmd("EXISTS").arg(&record).query_async(&mut check).await.expect("exists");
    assert_eq!(recorded, 0, "a failed upload records nothing");

    let first_worker = BlobStore::with_known_hashes(server.config(&prefix), known.clone());
    let second_worker = BlobStore::with_known_hashes(server.config(&prefix), known.clone());
    assert!(!first_worker.put_screenshot(image.clone()).await.expect("first").dedup);
    let ttl: i64 = redis::cmd("TTL").arg(&record).query_async(&mut check).await.expect("ttl");
    assert!(ttl > 0, "the record expires (ttl {ttl})");
    let second = second_worker.put_screenshot(image).await.expect("second");
    assert!(second.dedup);
    let stats = second_worker.stats();
    assert_eq!((stats.put_requests, stats.head_requests, stats.dedup_known), (0, 0, 1), "{stats:?}");

    let elsewhere = BlobStore::with_known_hashes(server.config(&unique_prefix()), known);
    let moved = elsewhere.put_screenshot(png(7)).await.expect("same bytes under another prefix");
    assert!(!moved.dedup, "the record of one prefix does not vouch for another");
    assert_eq!(elsewhere.stats().uploads, 1);
}
