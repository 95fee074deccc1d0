//! Ends tasks and acknowledges their stream entries in batches: one round
//! trip (on a cluster, one per task and one for the lanes) writes the
//! terminal state of every attempt that finished since the last flush
//! through the fenced script, acknowledges their entries and counts their
//! outcomes. Entries whose write was refused (another attempt owns the
//! task) are left alone. Batching keeps Redis work per task low under load.

use std::sync::Arc;
use std::time::Duration;

use flotilla_queue::queue::{Attempt, Delivery, Ending, Outcome, Queue, Terminal};
use flotilla_queue::QueueError;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::metrics::WorkerMetrics;

/// How often a flush yields first (taking what came meanwhile into its
/// batch): the tasks that just ended freed their slots, and the claim loop
/// then sends the claim that fills them before this flush. Redis answers a
/// connection's calls in order, so the claim is not stuck behind the
/// flush: slots wait less, and Redis always has the next call queued
/// (busy 0.98 of a no-op drain instead of 0.90, about 8 % more tasks a
/// second; docs/benchmarks-history.md). Finishing waits a few scheduler turns more.
const ACK_YIELDS: usize = 4;
/// The most items one flush handles.
const MAX_BATCH: usize = 256;
/// How long a failing flush is retried before its entries are left pending;
/// a later reclaim sees each task's state and finishes the job then.
const GIVE_UP_AFTER: Duration = Duration::from_secs(30);

/// Work for the acknowledger.
enum Work {
    /// Write this terminal state, reached at this epoch ms, then acknowledge
    /// the entry.
    Finish(Arc<Attempt>, Terminal, i64),
    /// Only acknowledge the entry, counting this outcome if any.
    Ack(Delivery, Option<Outcome>),
}

/// Where finished work is sent.
#[derive(Clone)]
pub struct Acker {
    tx: mpsc::UnboundedSender<Work>,
}

impl Acker {
    /// Starts the batching task; it ends once every sender is dropped and the
    /// backlog is flushed.
    pub fn spawn(queue: Queue, metrics: WorkerMetrics) -> (Self, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let handle = tokio::spawn(flush_forever(queue, rx, metrics));
        (Self { tx }, handle)
    }

    /// Ends the attempt's task and then acknowledges its entry.
    pub fn finish(&self, attempt: Arc<Attempt>, terminal: Terminal) {
        self.send(Work::Finish(attempt, terminal, flotilla_types::clock::now_ms()));
    }

    /// Acknowledges an entry whose task needs nothing more.
    pub fn ack(&self, delivery: Delivery, outcome: Option<Outcome>) {
        self.send(Work::Ack(delivery, outcome));
    }

    fn send(&self, work: Work) {
        if self.tx.send(work).is_err() {
            warn!("acknowledger stopped; entry left to be reclaimed");
        }
    }
}

async fn flush_forever(queue: Queue, mut rx: mpsc::UnboundedReceiver<Work>, metrics: WorkerMetrics) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        for _ in 0..ACK_YIELDS {
            tokio::task::yield_now().await;
        }
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(work) => batch.push(work),
                Err(_) => break,
            }
        }
        let started = tokio::time::Instant::now();
        let mut delay = Duration::from_millis(20);
        loop {
            match flush(&queue, &batch).await {
                Ok(()) => break,
                Err(e) if started.elapsed() < GIVE_UP_AFTER => {
                    metrics.redis_error();
                    warn!(error = %e, items = batch.len(), "ending tasks failed; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
                Err(e) => {
                    warn!(error = %e, items = batch.len(), "ending tasks failed; entries left to be reclaimed");
                    break;
                }
            }
        }
        batch.clear();
    }
}

/// Writes the batch's terminal states and acknowledges what may be (see
/// [`Runner::finish_and_ack`]). Repeating a flush is safe: a terminal write
/// that already happened is refused the second time, and its entry is then
/// left for a reclaim, which finds the task ended and acknowledges it.
async fn flush(queue: &Queue, batch: &[Work]) -> Result<(), QueueError> {
    let mut ends: Vec<Ending<'_>> = Vec::new();
    let mut acks: Vec<(Delivery, Option<Outcome>)> = Vec::new();
    for work in batch {
        match work {
            Work::Finish(attempt, terminal, at_ms) => ends.push((attempt.as_ref(), terminal.clone(), *at_ms)),
            Work::Ack(delivery, outcome) => acks.push((delivery.clone(), *outcome)),
        }
    }
    let written = queue.runner().finish_and_ack(&ends, &acks).await?;
    for ((attempt, ..), result) in ends.iter().zip(written) {
        if result.is_err() {
            info!(task_id = %attempt.task_id(), "another attempt owns the task; its outcome was not written");
        }
    }
    Ok(())
}
