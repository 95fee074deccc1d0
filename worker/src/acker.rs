//! Acknowledges finished stream entries in batches: one pipelined round trip
//! acknowledges, deletes and counts every entry that finished since the last
//! one, which keeps Redis work per task low under load.

use std::time::Duration;

use flotilla_shared::queue::{Delivery, Queue};
use tokio::sync::mpsc;
use tracing::warn;

/// The most entries one round trip acknowledges.
const MAX_BATCH: usize = 512;
/// How long a failing acknowledgement is retried before the entries are left
/// pending; a later reclaim sees the task finished and acknowledges it then.
const GIVE_UP_AFTER: Duration = Duration::from_secs(30);

/// A finished entry and the outcome to count (`None`: count nothing).
pub type Done = (Delivery, Option<&'static str>);

/// Where finished entries are sent.
#[derive(Clone)]
pub struct Acker {
    tx: mpsc::UnboundedSender<Done>,
}

impl Acker {
    /// Starts the batching task; it ends once every sender is dropped and the
    /// backlog is flushed.
    pub fn spawn(queue: Queue) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = tokio::spawn(flush_forever(queue, rx));
        (Self { tx }, handle)
    }

    pub fn done(&self, delivery: Delivery, outcome: Option<&'static str>) {
        if self.tx.send((delivery, outcome)).is_err() {
            warn!("acknowledger stopped; entry left to be reclaimed");
        }
    }
}

async fn flush_forever(queue: Queue, mut rx: mpsc::UnboundedReceiver<Done>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        flush(&queue, &batch).await;
        batch.clear();
    }
}

async fn flush(queue: &Queue, batch: &[Done]) {
    let started = tokio::time::Instant::now();
    let mut delay = Duration::from_millis(20);
    loop {
        match queue.ack(batch).await {
            Ok(()) => return,
            Err(e) if started.elapsed() < GIVE_UP_AFTER => {
                warn!(error = %e, entries = batch.len(), "acknowledging failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
            Err(e) => {
                warn!(error = %e, entries = batch.len(), "acknowledging failed; entries left to be reclaimed");
                return;
            }
        }
    }
}
