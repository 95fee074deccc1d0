//! Storing a task's screenshots beside its step loop.
//!
//! The step loop hands each new screenshot to [`Uploader::enqueue`] and goes
//! on: the PNG is hashed at once (the hash is the task's record of it), then
//! queued on a bounded channel and stored in the background, a few at a time,
//! each retried with exponential backoff while the failure is transient.
//! Uploads may finish out of order; the task's list stays in step order,
//! because every screenshot keeps the sequence number it was queued with.
//!
//! A full queue makes `enqueue` wait, so a store that falls behind slows the
//! loop instead of filling memory. Before a task may end `succeeded` it calls
//! [`Uploader::flush`], which waits until everything queued so far is stored
//! or says why not: a screenshot the store refused for good, or a store that
//! stayed unreachable past the deadline. Dropping the uploader stops its
//! uploads.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::error::BlobError;
use super::object_keys::{content_hash, looks_like_png};
use super::{BlobStore, StoredImage};

/// How an uploader queues, retries and waits.
#[derive(Debug, Clone)]
pub struct UploaderOptions {
    /// Screenshots that may wait to be stored before `enqueue` blocks.
    pub queue: usize,
    /// Uploads in flight at once.
    pub parallel: usize,
    /// First and longest pause between tries of one screenshot.
    pub min_backoff: Duration,
    pub max_backoff: Duration,
    /// Total pause after which one screenshot's transient failures count as
    /// final.
    pub give_up_after: Duration,
    /// How long `flush`, or an `enqueue` on a full queue, waits.
    pub deadline: Duration,
}

impl Default for UploaderOptions {
    fn default() -> Self {
        Self {
            queue: 8,
            parallel: 4,
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            give_up_after: Duration::from_secs(600),
            deadline: Duration::from_secs(30),
        }
    }
}

/// A screenshot accepted by `enqueue`: its place in the task's list and its
/// content address, known before it is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    pub seq: u64,
    pub hash: String,
    pub key: String,
    pub bytes: u64,
}

/// Why a task's screenshots are not all stored.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UploadError {
    /// The store refused one screenshot for good (bad credentials, no such
    /// bucket), or kept failing past `give_up_after`.
    #[error("screenshot {seq} was not stored: {source}")]
    Failed { seq: u64, source: BlobError },
    /// The deadline passed with screenshots still waiting, usually because
    /// the store is unreachable.
    #[error(
        "{pending} screenshots still not stored after {} ms: {}",
        .waited.as_millis(),
        .last_error.as_ref().map_or_else(|| "no error seen yet".to_owned(), ToString::to_string)
    )]
    NotStored { pending: usize, waited: Duration, last_error: Option<BlobError> },
    /// The uploader's background task is gone.
    #[error("the screenshot uploader has stopped")]
    Stopped,
}

impl UploadError {
    /// Whether another attempt of the task may store its screenshots.
    pub fn is_retryable(&self) -> bool {
        match self {
            UploadError::Failed { source, .. } => source.is_retryable(),
            UploadError::NotStored { .. } | UploadError::Stopped => true,
        }
    }
}

struct Job {
    seq: u64,
    hash: String,
    png: Bytes,
}

/// What the background uploads have done, watched by `flush` and feeds.
#[derive(Default)]
struct State {
    /// By sequence number; `None` until stored.
    images: Vec<Option<StoredImage>>,
    /// `images[..stored]` are all stored.
    stored: usize,
    failed: Option<(u64, BlobError)>,
    last_error: Option<BlobError>,
    retries: u64,
}

impl State {
    fn record(&mut self, seq: u64, image: StoredImage) {
        let index = seq as usize;
        if self.images.len() <= index {
            self.images.resize(index + 1, None);
        }
        self.images[index] = Some(image);
        while self.images.get(self.stored).is_some_and(Option::is_some) {
            self.stored += 1;
        }
    }
}

/// Stores one task's screenshots in the background, in step order.
pub struct Uploader {
    jobs: mpsc::Sender<Job>,
    state: Arc<watch::Sender<State>>,
    next_seq: AtomicU64,
    store: BlobStore,
    deadline: Duration,
    stop: CancellationToken,
}

impl Uploader {
    /// Starts the background uploads into `store`.
    pub fn spawn(store: BlobStore, options: UploaderOptions) -> Self {
        let (jobs, queue) = mpsc::channel(options.queue.max(1));
        let (state, _) = watch::channel(State::default());
        let state = Arc::new(state);
        let stop = CancellationToken::new();
        let deadline = options.deadline;
        tokio::spawn(drive(store.clone(), queue, state.clone(), options, stop.clone()));
        Self { jobs, state, next_seq: AtomicU64::new(0), store, deadline, stop }
    }

    /// Queues a PNG screenshot, waiting while the queue is full (at most the
    /// deadline). Returns its sequence number and content address at once;
    /// whether it was a duplicate is known once stored.
    pub async fn enqueue(&self, png: impl Into<Bytes>) -> Result<Queued, UploadError> {
        let png = png.into();
        let seq = self.next_seq.fetch_add(1, Ordering::SeqCst);
        if !looks_like_png(&png) {
            let source = BlobError::NotPng { bytes: png.len() };
            self.state.send_modify(|s| {
                s.failed.get_or_insert((seq, source.clone()));
            });
            return Err(UploadError::Failed { seq, source });
        }
        if let Some((failed, source)) = self.state.borrow().failed.clone() {
            return Err(UploadError::Failed { seq: failed, source });
        }
        let hash = content_hash(&png);
        let queued = Queued { seq, key: self.store.layout().screenshot(&hash), bytes: png.len() as u64, hash: hash.clone() };
        let started = Instant::now();
        match tokio::time::timeout(self.deadline, self.jobs.send(Job { seq, hash, png })).await {
            Ok(Ok(())) => Ok(queued),
            Ok(Err(_)) => Err(UploadError::Stopped),
            Err(_) => Err(self.not_stored(seq as usize + 1, started)),
        }
    }

    /// Waits until every screenshot queued so far is stored and returns the
    /// task's list in step order; or returns why not, within the deadline.
    pub async fn flush(&self) -> Result<Vec<StoredImage>, UploadError> {
        let target = self.next_seq.load(Ordering::SeqCst) as usize;
        let started = Instant::now();
        let mut watcher = self.state.subscribe();
        let waited = tokio::time::timeout(self.deadline, watcher.wait_for(|s| s.stored >= target || s.failed.is_some())).await;
        match waited {
            Ok(Ok(state)) => {
                if let Some((seq, source)) = &state.failed {
                    return Err(UploadError::Failed { seq: *seq, source: source.clone() });
                }
                Ok(state.images[..target].iter().flatten().cloned().collect())
            }
            Ok(Err(_)) => Err(UploadError::Stopped),
            Err(_) => Err(self.not_stored(target, started)),
        }
    }

    /// Flushes, then stops the background uploads.
    pub async fn finish(self) -> Result<Vec<StoredImage>, UploadError> {
        self.flush().await
    }

    /// The screenshots stored so far without a gap, in step order.
    pub fn stored(&self) -> Vec<StoredImage> {
        let state = self.state.borrow();
        state.images[..state.stored].iter().flatten().cloned().collect()
    }

    /// How many tries failed transiently and were retried.
    pub fn retries(&self) -> u64 {
        self.state.borrow().retries
    }

    /// The stored screenshots in step order, as they become available: for
    /// emitting `screenshot` events in the order the steps took them.
    pub fn feed(&self) -> StoredFeed {
        StoredFeed { watcher: self.state.subscribe(), next: 0 }
    }

    fn not_stored(&self, target: usize, started: Instant) -> UploadError {
        let state = self.state.borrow();
        UploadError::NotStored {
            pending: target.saturating_sub(state.stored),
            waited: started.elapsed(),
            last_error: state.last_error.clone(),
        }
    }
}

impl Drop for Uploader {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Stored screenshots of one uploader, in step order.
pub struct StoredFeed {
    watcher: watch::Receiver<State>,
    next: usize,
}

impl StoredFeed {
    /// The next stored screenshot with its sequence number; `None` once one
    /// has failed for good or the uploader is gone.
    pub async fn next(&mut self) -> Option<(u64, StoredImage)> {
        let next = self.next;
        let state = self.watcher.wait_for(|s| s.stored > next || s.failed.is_some()).await.ok()?;
        if state.stored <= next {
            return None;
        }
        let image = state.images[next].clone()?;
        self.next += 1;
        Some((next as u64, image))
    }
}

/// Takes jobs off the queue while a slot is free and uploads each in its own
/// task, until the uploader is dropped.
async fn drive(
    store: BlobStore,
    mut queue: mpsc::Receiver<Job>,
    state: Arc<watch::Sender<State>>,
    options: UploaderOptions,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(options.parallel.max(1)));
    let mut running = JoinSet::new();
    loop {
        let slot = tokio::select! {
            _ = stop.cancelled() => return,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return,
            },
        };
        let job = tokio::select! {
            _ = stop.cancelled() => return,
            job = queue.recv() => match job {
                Some(job) => job,
                None => break,
            },
        };
        while running.try_join_next().is_some() {}
        running.spawn(upload(store.clone(), job, state.clone(), options.clone(), slot));
    }
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = async { while running.join_next().await.is_some() {} } => {}
    }
}

/// Stores one screenshot, retrying transient failures with backoff.
async fn upload(
    store: BlobStore,
    job: Job,
    state: Arc<watch::Sender<State>>,
    options: UploaderOptions,
    _slot: OwnedSemaphorePermit,
) {
    let Job { seq, hash, png } = job;
    let backoff = ExponentialBuilder::default()
        .with_min_delay(options.min_backoff)
        .with_max_delay(options.max_backoff)
        .with_jitter()
        .without_max_times()
        .with_total_delay(Some(options.give_up_after));
    let result = (|| store.put_screenshot_hashed(&hash, png.clone()))
        .retry(backoff)
        .when(BlobError::is_retryable)
        .notify(|error, delay| {
            tracing::warn!(seq, error = %error, kind = error.kind(), delay_ms = delay.as_millis() as u64, "screenshot upload failed, retrying");
            state.send_modify(|s| {
                s.last_error = Some(error.clone());
                s.retries += 1;
            });
        })
        .await;
    state.send_modify(|s| match result {
        Ok(image) => s.record(seq, image),
        Err(error) => {
            tracing::error!(seq, error = %error, kind = error.kind(), "screenshot not stored");
            s.last_error = Some(error.clone());
            s.failed.get_or_insert((seq, error));
        }
    });
}
