//! Runs one delivered entry to its end: starts the attempt, keeps its lease
//! with a heartbeat (which also hears cancels and takeovers), runs the
//! pipeline, writes the outcome through the fenced scripts, and only then
//! acknowledges the entry.

use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use flotilla_shared::queue::{Attempt, Delivery, HeartbeatOutcome, Queue, StartOutcome};
use flotilla_shared::task::{Pipeline as PipelineKind, StopCode};
use flotilla_shared::QueueError;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn, Instrument};

use crate::acker::Acker;
use crate::pipeline::{Outcome, PipelineError, Registry, TaskRun};

/// What every execution shares.
#[derive(Clone)]
pub struct Executor {
    pub queue: Queue,
    pub registry: Registry,
    pub acker: Acker,
    pub worker_id: String,
    pub heartbeat: Duration,
    pub default_pipeline: PipelineKind,
}

/// Why a running attempt was stopped from outside the pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopReason {
    CancelRequested,
    Fenced,
    /// The worker is shutting down past its drain deadline.
    Abandoned,
}

impl Executor {
    /// Handles one delivery. `abandon` is cancelled when the worker gives up
    /// on its running tasks at shutdown.
    pub async fn execute(&self, delivery: Delivery, abandon: CancellationToken) {
        let started = match self.queue.start(&delivery, &self.worker_id).await {
            Ok(started) => started,
            Err(e) => {
                warn!(error = %e, entry = %delivery.entry_id, "could not start task; it will be reclaimed");
                return;
            }
        };
        match started {
            StartOutcome::Nothing(reason) => {
                debug!(reason, entry = %delivery.entry_id, "nothing to run for entry");
                self.acker.done(delivery, None);
            }
            StartOutcome::Started(attempt) => {
                let span = tracing::info_span!("task", task_id = %attempt.task_id(), attempt = attempt.number);
                self.run_attempt(Arc::new(*attempt), abandon).instrument(span).await;
            }
        }
    }

    async fn run_attempt(&self, attempt: Arc<Attempt>, abandon: CancellationToken) {
        let cancel = CancellationToken::new();
        let (reason_tx, mut reason_rx) = tokio::sync::watch::channel(None);
        let heartbeat = tokio::spawn(heartbeat_loop(attempt.clone(), self.heartbeat, cancel.clone(), abandon, reason_tx));
        let result = self.run_pipeline(&attempt, cancel.clone()).await;
        heartbeat.abort();
        let reason = *reason_rx.borrow_and_update();
        let outcome = match (result, reason) {
            (_, Some(StopReason::Fenced)) | (Err(PipelineError::Fenced), _) => {
                info!("another attempt took the task over; stopping without writing");
                return;
            }
            (_, Some(StopReason::Abandoned)) => {
                info!("shutdown deadline passed; leaving the task to be reclaimed");
                self.release(&attempt).await;
                return;
            }
            (_, Some(StopReason::CancelRequested)) | (Err(PipelineError::Cancelled), _) => {
                self.write(|| attempt.cancelled()).await.map(|_| Some("cancelled"))
            }
            (Ok(Outcome::Succeeded(result)), None) => {
                self.write(|| attempt.succeed(result.clone())).await.map(|_| Some("succeeded"))
            }
            (Err(PipelineError::Fatal { code, message }), None) => {
                warn!(error = %message, "task failed");
                self.write(|| attempt.fail(code, &message)).await.map(|_| Some("failed"))
            }
            (Err(PipelineError::Retryable(error)), None) => {
                warn!(%error, "attempt failed; retrying or dead-lettering");
                self.write(|| attempt.retry_or_dead_letter(&error))
                    .await
                    .map(|delay| if delay.is_some() { None } else { Some("failed") })
            }
        };
        match outcome {
            Ok(counted) => self.acker.done(attempt.delivery.clone(), counted),
            Err(QueueError::Fenced) => info!("another attempt took the task over before the outcome was written"),
            Err(e) => warn!(error = %e, "could not write the outcome; the task will be reclaimed"),
        }
    }

    async fn run_pipeline(&self, attempt: &Arc<Attempt>, cancel: CancellationToken) -> Result<Outcome, PipelineError> {
        let kind = attempt.spec.pipeline.unwrap_or(self.default_pipeline);
        let Some(pipeline) = self.registry.get(kind) else {
            return Err(PipelineError::Fatal {
                code: StopCode::Problem,
                message: format!("pipeline {:?} is not available on this worker", kind.as_str()),
            });
        };
        let run = TaskRun { attempt: attempt.clone(), cancel: cancel.clone() };
        tokio::select! {
            result = pipeline.run(&run) => result,
            () = cancel.cancelled() => Err(PipelineError::Cancelled),
        }
    }

    /// Writes an outcome, retrying while Redis is unreachable (it may be
    /// restarting); a fenced refusal is final.
    async fn write<T, F, Fut>(&self, op: F) -> Result<T, QueueError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, QueueError>>,
    {
        op.retry(
            ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(50))
                .with_max_delay(Duration::from_secs(2))
                .with_max_times(20)
                .with_jitter(),
        )
        .when(|e| !matches!(e, QueueError::Fenced | QueueError::Corrupt(_)))
        .notify(|e, after| warn!(error = %e, ?after, "writing the outcome failed; retrying"))
        .await
    }

    /// Hands an abandoned attempt's entry back for another worker at once.
    async fn release(&self, attempt: &Attempt) {
        if let Err(e) = self.queue.release(&self.worker_id, &attempt.delivery).await {
            warn!(error = %e, "could not hand the entry back; it will be reclaimed after the lease");
        }
    }
}

/// Renews the lease until aborted; stops the run on a cancel, a takeover or
/// an abandoning shutdown, recording why.
async fn heartbeat_loop(
    attempt: Arc<Attempt>,
    every: Duration,
    cancel: CancellationToken,
    abandon: CancellationToken,
    reason: tokio::sync::watch::Sender<Option<StopReason>>,
) {
    let mut ticker = tokio::time::interval(every);
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = abandon.cancelled() => {
                reason.send_replace(Some(StopReason::Abandoned));
                cancel.cancel();
                return;
            }
        }
        match attempt.heartbeat().await {
            Ok(HeartbeatOutcome::Renewed) => {}
            Ok(HeartbeatOutcome::CancelRequested) => {
                reason.send_replace(Some(StopReason::CancelRequested));
                cancel.cancel();
                return;
            }
            Ok(HeartbeatOutcome::Fenced) => {
                reason.send_replace(Some(StopReason::Fenced));
                cancel.cancel();
                return;
            }
            Err(e) => warn!(error = %e, "heartbeat failed; will try again"),
        }
    }
}
