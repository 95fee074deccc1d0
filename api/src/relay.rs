//! On a Redis Cluster, fills the tenants' feed streams from the events the
//! [`crate::hub`] hears (task scripts there cannot append to them; see
//! `flotilla_queue::queue::feed_relay`). On a single server the scripts
//! append themselves and nothing runs here.
//!
//! The hub hands each event over without waiting (a full queue of
//! [`BACKLOG`] events drops it, and the gap is filled when its task's next
//! event comes); one task takes what has arrived, up to [`BATCH`] events at
//! a time, and appends it, each task's events in order and different tasks'
//! side by side.

use std::sync::Arc;
use std::time::Duration;

use flotilla_queue::queue::{Heard, Queue};
use flotilla_types::TenantId;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Events waiting to be appended, at most.
const BACKLOG: usize = 65_536;
/// Events appended in one go, at most.
const BATCH: usize = 1_024;
/// Tries at appending one batch before its events are left to gap filling.
const TRIES: u32 = 5;
/// The wait after a failed try; it doubles each time.
const RETRY_BASE: Duration = Duration::from_millis(100);

/// Where the hub hands events to the relay.
#[derive(Clone)]
pub struct RelaySender {
    tx: mpsc::Sender<(TenantId, Arc<str>)>,
}

impl RelaySender {
    /// Hands over an event of `tenant` without waiting.
    pub fn send(&self, tenant: TenantId, event: Arc<str>) {
        if self.tx.try_send((tenant, event)).is_err() {
            tracing::warn!("the feed relay is behind; an event waits for its task's next one");
        }
    }
}

/// Starts the relay for `queue` when it is on a cluster; `None` otherwise.
pub fn start(queue: &Queue, shutdown: CancellationToken) -> Option<RelaySender> {
    if queue.scripts_append_feeds() {
        return None;
    }
    let (tx, rx) = mpsc::channel(BACKLOG);
    tokio::spawn(run(queue.clone(), rx, shutdown));
    Some(RelaySender { tx })
}

async fn run(queue: Queue, mut rx: mpsc::Receiver<(TenantId, Arc<str>)>, shutdown: CancellationToken) {
    let mut buffer = Vec::with_capacity(BATCH);
    loop {
        let got = tokio::select! {
            got = rx.recv_many(&mut buffer, BATCH) => got,
            () = shutdown.cancelled() => return,
        };
        if got == 0 {
            return;
        }
        append(&queue, &buffer).await;
        buffer.clear();
    }
}

async fn append(queue: &Queue, events: &[(TenantId, Arc<str>)]) {
    let mut delay = RETRY_BASE;
    for attempt in 1..=TRIES {
        let mut heard = Heard::default();
        for (tenant, event) in events {
            heard.add(tenant.clone(), event);
        }
        match queue.housekeeper().relay_to_feed(heard).await {
            Ok(()) => return,
            Err(error) => tracing::warn!(%error, attempt, "appending events to the tenant feeds failed"),
        }
        tokio::time::sleep(delay).await;
        delay *= 2;
    }
}
