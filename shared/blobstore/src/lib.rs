//! The blob store: screenshots and artifacts in S3 (or any S3-compatible
//! store).
//!
//! Screenshots are content-addressed: the blake3 hash of the PNG names the
//! object, so the same image is stored once however many tasks and workers
//! saw it, and a task keeps only its ordered list of hashes. Whether an image
//! is new is settled as cheaply as possible (see `dedup.rs`): this process's
//! memory of recent hashes, an optional fleet-wide record in Redis, and
//! finally the store itself through a create-only `PUT` (`If-None-Match: *`,
//! where `412` means "already stored"), or `HEAD` then `PUT` for stores that
//! ignore that header.
//!
//! Artifacts live under their task's own prefix, at paths checked never to
//! leave it. Saved browser profiles are sealed before they are stored
//! (`profiles.rs`). Objects are handed out through presigned `GET` URLs that
//! expire. The [`Uploader`] runs beside a task's step loop and stores its
//! screenshots in the background, in order, riding out store outages.

mod config;
mod dedup;
mod error;
mod object_keys;
mod profiles;
mod s3;
mod uploader;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flotilla_types::ids::TaskId;
use serde::Serialize;

pub use bytes::Bytes;
pub use config::{BlobConfig, DedupStrategy, S3Credentials, DEFAULT_REGION};
pub use dedup::{KnownHashes, KNOWN_HASH_TTL};
pub use error::BlobError;
pub use object_keys::{content_hash, looks_like_png, validate_artifact_path, KeyLayout};
pub use profiles::{ProfileError, ProfileInfo};
pub use s3::{Delivery, ObjectInfo, MAX_PRESIGN_TTL};
pub use uploader::{Queued, StoredFeed, UploadError, Uploader, UploaderOptions};

use dedup::{InflightUploads, RecentHashes};
use s3::{PutOutcome, S3Bucket};

/// A screenshot as stored: what the `screenshot` event carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoredImage {
    /// blake3 of the PNG bytes, 64 lowercase hex digits.
    pub hash: String,
    pub key: String,
    pub bytes: u64,
    /// True when the bytes were already stored, by this task or another.
    pub dedup: bool,
}

/// An artifact as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoredArtifact {
    pub key: String,
    pub bytes: u64,
    pub hash: String,
}

/// A presigned `GET` URL and how long it stays valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresignedUrl {
    pub url: String,
    pub expires_in: Duration,
}

/// What `check` learned about the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreSupport {
    /// The store answers `412` to a create-only `PUT` of an existing key.
    pub conditional_put: bool,
}

/// Counters of what the store did since it was made, for metrics and the
/// benchmark.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct BlobStats {
    /// Screenshots handed to `put_screenshot`.
    pub screenshots: u64,
    /// Their bytes.
    pub bytes_seen: u64,
    /// Screenshots that created a new object.
    pub uploads: u64,
    /// Bytes sent in `PUT` bodies, including those refused with `412`.
    pub bytes_sent: u64,
    pub put_requests: u64,
    pub head_requests: u64,
    /// Duplicates answered from this process's memory, with no request.
    pub dedup_local: u64,
    /// Duplicates answered by the fleet-wide record in Redis.
    pub dedup_known: u64,
    /// Duplicates the store itself reported (`412`, or found by `HEAD`).
    pub dedup_store: u64,
    pub known_lookups: u64,
}

#[derive(Default)]
struct Counters {
    screenshots: AtomicU64,
    bytes_seen: AtomicU64,
    uploads: AtomicU64,
    bytes_sent: AtomicU64,
    put_requests: AtomicU64,
    head_requests: AtomicU64,
    dedup_local: AtomicU64,
    dedup_known: AtomicU64,
    dedup_store: AtomicU64,
    known_lookups: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

/// Content type of a screenshot.
const PNG: &str = "image/png";

/// Where screenshots and artifacts are stored. Cheap to clone; clones share
/// the connection pool, the memory of recent hashes and the counters.
#[derive(Clone)]
pub struct BlobStore {
    inner: Arc<Inner>,
}

struct Inner {
    bucket: S3Bucket,
    bucket_name: String,
    origin: String,
    layout: KeyLayout,
    conditional_put: AtomicBool,
    recent: Mutex<RecentHashes>,
    inflight: InflightUploads,
    known: Option<KnownHashes>,
    counters: Counters,
}

impl BlobStore {
    /// A store with these settings. Makes no request: call [`check`] to learn
    /// at start whether the bucket answers.
    ///
    /// [`check`]: BlobStore::check
    pub fn new(config: BlobConfig) -> Self {
        Self::build(config, None)
    }

    /// A store that also keeps the fleet-wide record of stored hashes.
    pub fn with_known_hashes(config: BlobConfig, known: KnownHashes) -> Self {
        Self::build(config, Some(known))
    }

    fn build(config: BlobConfig, known: Option<KnownHashes>) -> Self {
        let known = known.map(|k| k.scoped(&config.endpoint_label(), &config.bucket, config.layout.prefix()));
        let inner = Inner {
            bucket: S3Bucket::new(&config),
            bucket_name: config.bucket.clone(),
            origin: config.origin(),
            layout: config.layout.clone(),
            conditional_put: AtomicBool::new(config.dedup == DedupStrategy::ConditionalPut),
            recent: Mutex::new(RecentHashes::new(config.recent_hashes, config.recent_ttl)),
            inflight: InflightUploads::default(),
            known,
            counters: Counters::default(),
        };
        Self { inner: Arc::new(inner) }
    }

    pub fn bucket(&self) -> &str {
        &self.inner.bucket_name
    }

    /// The origin presigned URLs point at (see [`BlobConfig::origin`]).
    pub fn origin(&self) -> &str {
        &self.inner.origin
    }

    pub fn layout(&self) -> &KeyLayout {
        &self.inner.layout
    }

    /// The fleet-wide record this store consults, scoped to its objects.
    pub fn known_hashes(&self) -> Option<&KnownHashes> {
        self.inner.known.as_ref()
    }

    /// How screenshots are written now.
    pub fn strategy(&self) -> DedupStrategy {
        if self.inner.conditional_put.load(Ordering::Relaxed) {
            DedupStrategy::ConditionalPut
        } else {
            DedupStrategy::HeadThenPut
        }
    }

    /// Proves the bucket exists and these credentials may use it, and learns
    /// whether the store honours `If-None-Match: *`; if it does not, a store
    /// set to conditional `PUT`s switches to `HEAD` then `PUT` (one set to
    /// `HEAD` then `PUT` stays so). Writes one small object,
    /// `<prefix>probe/conditional-put`, and leaves it there.
    pub async fn check(&self) -> Result<StoreSupport, BlobError> {
        let inner = &self.inner;
        inner.bucket.probe_bucket(inner.layout.prefix()).await?;
        let probe = inner.layout.probe();
        let first = inner.bucket.put(&probe, Bytes::from_static(b"flotilla"), "text/plain", true).await?;
        let second = match first {
            PutOutcome::AlreadyExists => PutOutcome::AlreadyExists,
            PutOutcome::Created => inner.bucket.put(&probe, Bytes::from_static(b"flotilla"), "text/plain", true).await?,
        };
        let conditional_put = second == PutOutcome::AlreadyExists;
        if !conditional_put && self.strategy() == DedupStrategy::ConditionalPut {
            tracing::warn!(bucket = %inner.bucket_name, "blob store ignores If-None-Match; using HEAD before PUT");
            inner.conditional_put.store(false, Ordering::Relaxed);
        }
        Ok(StoreSupport { conditional_put })
    }

    /// Stores a PNG screenshot under its content hash, unless some task
    /// already stored the same bytes (then `dedup` is true).
    pub async fn put_screenshot(&self, png: impl Into<Bytes>) -> Result<StoredImage, BlobError> {
        let png = png.into();
        let hash = content_hash(&png);
        self.put_screenshot_hashed(&hash, png).await
    }

    /// As [`put_screenshot`](BlobStore::put_screenshot), for bytes whose
    /// blake3 hash the caller already computed.
    pub async fn put_screenshot_hashed(&self, hash: &str, png: Bytes) -> Result<StoredImage, BlobError> {
        if !looks_like_png(&png) {
            return Err(BlobError::NotPng { bytes: png.len() });
        }
        let inner = &self.inner;
        let size = png.len() as u64;
        bump(&inner.counters.screenshots, 1);
        bump(&inner.counters.bytes_seen, size);
        let image = |dedup: bool| StoredImage { hash: hash.to_owned(), key: inner.layout.screenshot(hash), bytes: size, dedup };
        if self.recently_stored(hash) {
            bump(&inner.counters.dedup_local, 1);
            return Ok(image(true));
        }
        let gate = inner.inflight.gate(hash);
        let result = {
            let _uploading = gate.lock().await;
            let stored = if self.recently_stored(hash) {
                bump(&inner.counters.dedup_local, 1);
                Ok(true)
            } else {
                self.store_new(hash, png).await
            };
            if stored.is_ok() {
                self.remember(hash);
            }
            stored
        };
        inner.inflight.release(hash, &gate);
        Ok(image(result?))
    }

    /// Asks the fleet-wide record, then the store; returns whether the
    /// object already existed.
    async fn store_new(&self, hash: &str, png: Bytes) -> Result<bool, BlobError> {
        let inner = &self.inner;
        if let Some(known) = &inner.known {
            bump(&inner.counters.known_lookups, 1);
            if known.contains(hash).await == Some(true) {
                bump(&inner.counters.dedup_known, 1);
                return Ok(true);
            }
        }
        let key = inner.layout.screenshot(hash);
        let size = png.len() as u64;
        let existed = match self.strategy() {
            DedupStrategy::ConditionalPut => {
                bump(&inner.counters.put_requests, 1);
                bump(&inner.counters.bytes_sent, size);
                inner.bucket.put(&key, png, PNG, true).await? == PutOutcome::AlreadyExists
            }
            DedupStrategy::HeadThenPut => {
                bump(&inner.counters.head_requests, 1);
                if inner.bucket.head(&key).await?.is_some() {
                    true
                } else {
                    bump(&inner.counters.put_requests, 1);
                    bump(&inner.counters.bytes_sent, size);
                    inner.bucket.put(&key, png, PNG, false).await?;
                    false
                }
            }
        };
        if existed {
            bump(&inner.counters.dedup_store, 1);
        } else {
            bump(&inner.counters.uploads, 1);
        }
        if let Some(known) = &inner.known {
            known.insert(hash).await;
        }
        Ok(existed)
    }

    fn recently_stored(&self, hash: &str) -> bool {
        self.inner.recent.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).contains(hash)
    }

    fn remember(&self, hash: &str) {
        self.inner.recent.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(hash);
    }

    /// Stores a file a task produced at `path` under the task's artifact
    /// prefix, replacing an earlier version (a retried attempt writes its
    /// files again).
    pub async fn put_artifact(&self, task: &TaskId, path: &str, bytes: impl Into<Bytes>) -> Result<StoredArtifact, BlobError> {
        let key = self.inner.layout.artifact(task, path)?;
        self.put_task_file(key, path, bytes.into()).await
    }

    /// Stores one of an agent's own session files (say, a transcript) at
    /// `path` under the task's session prefix, replacing an earlier version.
    pub async fn put_session_file(
        &self,
        task: &TaskId,
        path: &str,
        bytes: impl Into<Bytes>,
    ) -> Result<StoredArtifact, BlobError> {
        let key = self.inner.layout.session_file(task, path)?;
        self.put_task_file(key, path, bytes.into()).await
    }

    async fn put_task_file(&self, key: String, path: &str, bytes: Bytes) -> Result<StoredArtifact, BlobError> {
        let hash = content_hash(&bytes);
        let size = bytes.len() as u64;
        bump(&self.inner.counters.put_requests, 1);
        bump(&self.inner.counters.bytes_sent, size);
        self.inner.bucket.put(&key, bytes, content_type_of(path), false).await?;
        Ok(StoredArtifact { key, bytes: size, hash })
    }

    /// A URL that lets its holder `GET` the object at `key` for `ttl`
    /// (1 s to 7 days). Signing is local: no request is made, and the URL is
    /// handed out whether or not the object exists. Anything but a raster
    /// image is signed to download as an opaque file, never to render on the
    /// store's origin.
    pub async fn presigned_get(&self, key: &str, ttl: Duration) -> Result<PresignedUrl, BlobError> {
        let url = self.inner.bucket.presign_get(key, ttl, delivery_of(key)).await?;
        Ok(PresignedUrl { url, expires_in: ttl })
    }

    /// The bytes at `key`; [`BlobError::NotFound`] when there are none.
    pub async fn get(&self, key: &str) -> Result<Bytes, BlobError> {
        self.inner.bucket.get(key).await
    }

    /// Whether an object is stored at `key`.
    pub async fn exists(&self, key: &str) -> Result<bool, BlobError> {
        bump(&self.inner.counters.head_requests, 1);
        Ok(self.inner.bucket.head(key).await?.is_some())
    }

    /// Every object under `prefix` (a full key prefix, e.g. from
    /// [`KeyLayout::screenshots`]).
    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, BlobError> {
        self.inner.bucket.list(prefix).await
    }

    /// At most `max` objects under `prefix` whose keys sort after
    /// `start_after`, in key order.
    pub async fn list_after(&self, prefix: &str, start_after: &str, max: i32) -> Result<Vec<ObjectInfo>, BlobError> {
        self.inner.bucket.list_after(prefix, start_after, max).await
    }

    /// Writes `body` at `key` (JSON), replacing what was there; once this
    /// returns, the store holds it durably.
    pub async fn put_json(&self, key: &str, body: impl Into<Bytes>) -> Result<(), BlobError> {
        let body = body.into();
        bump(&self.inner.counters.put_requests, 1);
        bump(&self.inner.counters.bytes_sent, body.len() as u64);
        self.inner.bucket.put(key, body, "application/json", false).await.map(|_| ())
    }

    /// Deletes the object at `key`; one that is not there is no error.
    pub async fn delete(&self, key: &str) -> Result<(), BlobError> {
        self.inner.bucket.delete(key).await
    }

    /// What the store did so far.
    pub fn stats(&self) -> BlobStats {
        let c = &self.inner.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        BlobStats {
            screenshots: get(&c.screenshots),
            bytes_seen: get(&c.bytes_seen),
            uploads: get(&c.uploads),
            bytes_sent: get(&c.bytes_sent),
            put_requests: get(&c.put_requests),
            head_requests: get(&c.head_requests),
            dedup_local: get(&c.dedup_local),
            dedup_known: get(&c.dedup_known),
            dedup_store: get(&c.dedup_store),
            known_lookups: get(&c.known_lookups),
        }
    }
}

/// A content type for common artifact files, by extension.
/// Raster images are shown in place; everything else (HTML, SVG, text a
/// browser might sniff) downloads.
fn delivery_of(key: &str) -> Delivery {
    match content_type_of(key) {
        "image/png" | "image/jpeg" | "image/gif" | "image/webp" => Delivery::Inline,
        _ => Delivery::Download,
    }
}

fn content_type_of(path: &str) -> &'static str {
    let ext = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
    match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "pdf" => "application/pdf",
        "json" => "application/json",
        "html" | "htm" => "text/html; charset=utf-8",
        "md" => "text/markdown; charset=utf-8",
        "csv" => "text/csv; charset=utf-8",
        "txt" | "log" => "text/plain; charset=utf-8",
        "zip" => "application/zip",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Finding "Inline HTML artifacts": only raster images are presigned to
    /// show in place; HTML, SVG and the rest download.
    #[test]
    fn only_raster_images_are_shown_in_place() {
        for key in ["screenshots/ab.png", "a/photo.JPG", "a/b.gif", "a/c.webp"] {
            assert_eq!(delivery_of(key), Delivery::Inline, "{key}");
        }
        for key in ["a/page.html", "a/page.HTM", "a/logo.svg", "a/notes.txt", "a/data.json", "a/noext", "a/doc.pdf"] {
            assert_eq!(delivery_of(key), Delivery::Download, "{key}");
        }
    }

    #[test]
    fn artifact_content_types_follow_the_extension() {
        assert_eq!(content_type_of("out/report.MD"), "text/markdown; charset=utf-8");
        assert_eq!(content_type_of("chart.png"), "image/png");
        assert_eq!(content_type_of("Makefile"), "application/octet-stream");
    }
}
