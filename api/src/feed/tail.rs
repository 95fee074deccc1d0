//! One reader of a tenant's feed stream per API process and tenant, shared
//! by every stream that follows the tenant's feed (`GET /v1/events` and the
//! batches' streams).
//!
//! The reader follows the hub's tenant topic only as a wake-up call: on an
//! event (coalescing a burst) and once a second it reads the stream after
//! the last position it has read, and hands each entry, with its position,
//! to its followers. So a tenant with a thousand open streams costs one
//! `XRANGE` per burst, not a thousand.
//!
//! Invariant: [`Tails::follow`] returns once the reader has fixed its
//! starting position; every entry after it reaches the follower (or the
//! follower gets [`Tailed::Resync`] when it fell behind). A follower
//! therefore reads the stream itself up to the present after `follow`
//! returns, and drops entries at or before the last position it sent.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use flotilla_queue::queue::{FeedEntry, FeedId, Queue, FEED_READ};
use flotilla_types::TenantId;
use tokio::sync::{broadcast, watch};

use crate::hub::{Hub, HubError, Topic};

/// Entries buffered for a follower that is behind.
const BUFFER: usize = 4_096;
/// How often a reader reads even without a wake-up call, and checks
/// whether anyone still follows.
const TICK: Duration = Duration::from_secs(1);
/// How long [`Tails::follow`] waits for a new reader to start.
const START_WAIT: Duration = Duration::from_secs(5);

/// What a follower receives.
#[derive(Debug, Clone)]
pub enum Tailed {
    Entry(Arc<FeedEntry>),
    /// Entries were missed: read the stream again after the last one sent.
    Resync,
}

/// The readers of one API process.
#[derive(Clone)]
pub struct Tails {
    hub: Hub,
    queue: Queue,
    readers: Arc<Mutex<HashMap<TenantId, Reader>>>,
}

#[derive(Clone)]
struct Reader {
    tx: broadcast::Sender<Arc<FeedEntry>>,
    started: watch::Receiver<bool>,
}

/// One follower of a tenant's feed.
pub struct TailSub {
    rx: broadcast::Receiver<Arc<FeedEntry>>,
}

impl TailSub {
    /// The next entry; `None` once the reader has stopped.
    pub async fn recv(&mut self) -> Option<Tailed> {
        match self.rx.recv().await {
            Ok(entry) => Some(Tailed::Entry(entry)),
            Err(broadcast::error::RecvError::Lagged(_)) => Some(Tailed::Resync),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Tails {
    pub fn new(hub: Hub, queue: Queue) -> Self {
        Self { hub, queue, readers: Arc::default() }
    }

    /// Follows `tenant`'s feed, starting its reader if none runs.
    pub async fn follow(&self, tenant: &TenantId) -> Result<TailSub, HubError> {
        let (rx, mut started) = {
            let mut readers = lock(&self.readers);
            let reader = readers.entry(tenant.clone()).or_insert_with(|| self.start(tenant.clone()));
            (reader.tx.subscribe(), reader.started.clone())
        };
        let up = matches!(tokio::time::timeout(START_WAIT, started.wait_for(|s| *s)).await, Ok(Ok(_)));
        if up {
            Ok(TailSub { rx })
        } else {
            Err(HubError::NotConnected)
        }
    }

    fn start(&self, tenant: TenantId) -> Reader {
        let (tx, _) = broadcast::channel(BUFFER);
        let (started_tx, started) = watch::channel(false);
        let task = ReaderTask { tails: self.clone(), tenant, tx: tx.clone(), started: started_tx };
        tokio::spawn(task.run());
        Reader { tx, started }
    }

    /// Forgets `tenant`'s reader if nobody follows it; true when forgotten.
    fn release(&self, tenant: &TenantId, tx: &broadcast::Sender<Arc<FeedEntry>>) -> bool {
        let mut readers = lock(&self.readers);
        if tx.receiver_count() > 0 {
            return false;
        }
        readers.remove(tenant);
        true
    }
}

struct ReaderTask {
    tails: Tails,
    tenant: TenantId,
    tx: broadcast::Sender<Arc<FeedEntry>>,
    started: watch::Sender<bool>,
}

impl ReaderTask {
    async fn run(self) {
        let Some((mut live, mut last)) = self.begin().await else {
            lock(&self.tails.readers).remove(&self.tenant);
            return;
        };
        self.started.send_replace(true);
        loop {
            tokio::select! {
                message = live.recv() => if message.is_none() { break },
                () = tokio::time::sleep(TICK) => {}
            }
            while live.try_recv().is_some() {}
            if self.tails.release(&self.tenant, &self.tx) {
                return;
            }
            last = self.read_after(last).await;
        }
        lock(&self.tails.readers).remove(&self.tenant);
    }

    /// Subscribes to the tenant's topic and fixes the starting position.
    async fn begin(&self) -> Option<(crate::hub::Subscription, FeedId)> {
        let live = match self.tails.hub.subscribe(Topic::Tenant(self.tenant.clone())).await {
            Ok(live) => live,
            Err(error) => {
                tracing::warn!(tenant = %self.tenant, %error, "cannot follow the tenant's events");
                return None;
            }
        };
        match self.tails.queue.reader().feed_tip(&self.tenant).await {
            Ok(tip) => Some((live, tip)),
            Err(error) => {
                tracing::warn!(tenant = %self.tenant, %error, "cannot read the tenant's feed");
                None
            }
        }
    }

    /// Hands on every entry after `last`; returns the last one handed on.
    async fn read_after(&self, mut last: FeedId) -> FeedId {
        loop {
            let entries = match self.tails.queue.reader().feed_after(&self.tenant, last).await {
                Ok(entries) => entries,
                Err(error) => {
                    tracing::warn!(tenant = %self.tenant, %error, "reading the tenant's feed failed; retrying");
                    return last;
                }
            };
            let full = entries.len() >= FEED_READ;
            for entry in entries {
                last = entry.id;
                let _ = self.tx.send(Arc::new(entry));
            }
            if !full {
                return last;
            }
        }
    }
}
