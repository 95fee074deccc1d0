//! Runs one started attempt to its end: keeps its lease with a heartbeat
//! (which also hears cancels and takeovers), runs the pipeline, and hands the
//! outcome to the acknowledger, which writes it through the fenced script
//! and only then acknowledges the entry.
//!
//! The executor alone holds the [`Attempt`]: its pipeline gets a
//! [`TaskHandle`](crate::pipeline::TaskHandle) ([`AttemptHandle`]), which
//! reports progress but cannot end the task, so every terminal write, retry
//! and requeue is made here or in the acknowledger.

mod attempt_handle;

use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use flotilla_queue::queue::{Attempt, HeartbeatOutcome, Queue, Terminal};
use flotilla_queue::QueueError;
use flotilla_types::eval_plan::RunPlace;
use flotilla_types::task::StopCode;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

pub use attempt_handle::AttemptHandle;

use crate::acker::Acker;
use crate::metrics::WorkerMetrics;
use crate::pipeline::{Outcome, PipelineError, Registry, TaskHandle, TaskRun, Tools};

/// What every execution shares.
#[derive(Clone)]
pub struct Executor {
    pub queue: Queue,
    pub registry: Registry,
    pub tools: Arc<Tools>,
    pub acker: Acker,
    pub worker_id: String,
    pub heartbeat: Duration,
    pub metrics: WorkerMetrics,
}

/// The worker's stop, as a running attempt hears it.
#[derive(Clone, Default)]
pub struct Stopping {
    /// Cancelled as the worker begins to stop: journaled runs hand their
    /// task back at their next step boundary.
    pub hand_back: CancellationToken,
    /// Cancelled when the drain deadline passed: every run is left to be
    /// reclaimed.
    pub abandon: CancellationToken,
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
    /// Runs a started attempt. `hand_back` is cancelled when the worker
    /// begins to stop (pipelines that journal their steps hand their task
    /// back at the next step boundary), `abandon` when it gives up on its
    /// running tasks at shutdown.
    pub async fn execute(&self, attempt: Attempt, stopping: Stopping) {
        let span = tracing::info_span!("task", task_id = %attempt.task_id(), attempt = attempt.number);
        if let Some(traceparent) = &attempt.trace {
            flotilla_telemetry::continue_trace(&span, traceparent);
        }
        self.run_attempt(Arc::new(attempt), stopping).instrument(span).await;
    }

    async fn run_attempt(&self, attempt: Arc<Attempt>, stopping: Stopping) {
        let began = std::time::Instant::now();
        let outcome = self.settle_attempt(attempt, stopping).await;
        self.metrics.attempt_ended(outcome, began.elapsed());
    }

    /// Runs the attempt and hands its outcome on; returns the outcome's name.
    async fn settle_attempt(&self, attempt: Arc<Attempt>, stopping: Stopping) -> &'static str {
        let cancel = CancellationToken::new();
        let result = tokio::select! {
            result = self.run_pipeline(&attempt, cancel.clone(), stopping.hand_back.clone()) => Ok(result),
            reason = keep_lease(&attempt, self.heartbeat, &stopping.abandon) => Err(reason),
        };
        cancel.cancel();
        let terminal = match result {
            Err(StopReason::Fenced) | Ok(Err(PipelineError::Fenced)) => {
                info!("another attempt took the task over; stopping without writing");
                return "fenced";
            }
            Err(StopReason::Abandoned) => {
                info!("shutdown deadline passed; leaving the task to be reclaimed");
                self.release(&attempt).await;
                return "abandoned";
            }
            Ok(Err(PipelineError::HandedBack)) => {
                info!("the worker is stopping; the task is journaled and handed back");
                self.release(&attempt).await;
                return "handed_back";
            }
            Ok(Err(PipelineError::Parked)) => {
                info!("the task waits for a person parked; its entry is acknowledged and its slot free");
                self.acker.ack(attempt.delivery.clone(), None);
                return "parked";
            }
            Err(StopReason::CancelRequested) | Ok(Err(PipelineError::Cancelled)) => Terminal::Cancelled,
            Ok(Ok(Outcome::Succeeded(result))) => Terminal::Succeeded(result),
            Ok(Err(PipelineError::Fatal { code, message })) => {
                warn!(error = %message, "task failed");
                Terminal::Failed(code, message)
            }
            Ok(Err(PipelineError::Refused(message))) => {
                warn!(error = %message, "task failed");
                Terminal::Failed(StopCode::Problem, message)
            }
            Ok(Err(PipelineError::Retryable(error))) => {
                warn!(%error, "attempt failed; retrying or dead-lettering");
                self.retry_later(&attempt, &error).await;
                return "retrying";
            }
            Ok(Err(PipelineError::DayTokensSpent { resume_at_ms })) => {
                info!(resume_at_ms, "the tenant spent its tokens of today; the task waits for the next day");
                self.wait_for_next_day(&attempt, resume_at_ms).await;
                return "waiting_for_day";
            }
        };
        let outcome = terminal.outcome().as_str();
        self.acker.finish(attempt, terminal);
        outcome
    }

    /// Hands the attempt's entry back for the next reclaim by any worker.
    async fn release(&self, attempt: &Attempt) {
        if let Err(e) = self.queue.runner().release(&self.worker_id, &attempt.delivery).await {
            warn!(error = %e, "could not hand the entry back; it will be reclaimed after the lease");
        }
    }

    async fn run_pipeline(
        &self,
        attempt: &Arc<Attempt>,
        cancel: CancellationToken,
        hand_back: CancellationToken,
    ) -> Result<Outcome, PipelineError> {
        let Some(kind) = attempt.spec.pipeline else {
            return Err(PipelineError::Fatal { code: StopCode::Problem, message: "the task names no pipeline".into() });
        };
        let Some(pipeline) = self.registry.get(kind) else {
            return Err(PipelineError::Fatal {
                code: StopCode::Problem,
                message: format!("pipeline {:?} is not available on this worker", kind.as_str()),
            });
        };
        let handle = Arc::new(AttemptHandle::new(Arc::clone(attempt), self.run_place(attempt).await));
        let task = Arc::clone(&handle) as Arc<dyn TaskHandle>;
        let run = TaskRun { task, cancel, tools: Arc::clone(&self.tools), metrics: self.metrics.clone(), hand_back };
        let result = pipeline.run(&run).await;
        if handle.passed() {
            self.stop_rivals(attempt, handle.run_place()).await;
        }
        result
    }

    /// Where an evaluated task of a batch sits in the batch's run plan
    /// (one read, only for a task with a `setup` or `check`).
    async fn run_place(&self, attempt: &Attempt) -> Option<RunPlace> {
        let spec = &attempt.spec;
        let batch = attempt.origin().batch_id.as_ref()?;
        if spec.setup.is_none() && spec.check.is_none() {
            return None;
        }
        match self.queue.reader().run_place(batch, attempt.task_id()).await {
            Ok(place) => place,
            Err(e) => {
                warn!(error = %e, "could not read the task's place in its batch's run plan");
                None
            }
        }
    }

    /// With `stop_on_pass`, cancels the other runs of a best-of group once
    /// this one passed: queued ones at once, running ones at their next
    /// heartbeat. Their usage so far stays counted.
    async fn stop_rivals(&self, attempt: &Attempt, place: Option<&RunPlace>) {
        for rival in place.map(|p| p.rivals.as_slice()).unwrap_or_default() {
            match self.queue.submitter().cancel(attempt.tenant(), rival).await {
                Ok(outcome) => info!(rival = %rival, ?outcome, "a rival run passed first; cancelling"),
                Err(e) => warn!(rival = %rival, error = %e, "could not cancel a run whose rival passed"),
            }
        }
    }

    /// Hands the task back for a later attempt (or dead-letters it), retrying
    /// while Redis is unreachable; a fenced refusal is final.
    async fn retry_later(&self, attempt: &Attempt, error: &str) {
        let written = while_reachable(|| attempt.retry_or_dead_letter(error)).await;
        match written {
            Ok(Some(_)) => self.acker.ack(attempt.delivery.clone(), None),
            Ok(None) => self.acker.ack(attempt.delivery.clone(), Some(flotilla_queue::queue::Outcome::Failed)),
            Err(QueueError::Fenced) => info!("another attempt took the task over before it was handed back"),
            Err(e) => warn!(error = %e, "could not hand the task back; it will be reclaimed"),
        }
    }

    /// Hands the task back to wait, queued, for its tenant's next UTC day,
    /// and acknowledges its entry; retried while Redis is unreachable.
    async fn wait_for_next_day(&self, attempt: &Attempt, resume_at_ms: i64) {
        match while_reachable(|| attempt.wait_for_next_day(resume_at_ms)).await {
            Ok(()) => self.acker.ack(attempt.delivery.clone(), None),
            Err(QueueError::Fenced) => info!("another attempt took the task over before it was handed back"),
            Err(e) => warn!(error = %e, "could not hand the task back; it will be reclaimed"),
        }
    }
}

/// Runs a queue write, again while Redis is unreachable (a fenced or
/// corrupt answer is final).
async fn while_reachable<T, F: std::future::Future<Output = Result<T, QueueError>>>(
    write: impl FnMut() -> F,
) -> Result<T, QueueError> {
    write
        .retry(
            ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(50))
                .with_max_delay(Duration::from_secs(2))
                .with_max_times(20)
                .with_jitter(),
        )
        .when(|e| !matches!(e, QueueError::Fenced | QueueError::Corrupt(_)))
        .notify(|e, after| warn!(error = %e, ?after, "handing the task back failed; retrying"))
        .await
}

/// Renews the lease every `every` until something stops the attempt: a
/// cancel, a takeover, or an abandoning shutdown. Never returns otherwise.
async fn keep_lease(attempt: &Attempt, every: Duration, abandon: &CancellationToken) -> StopReason {
    let mut ticker = tokio::time::interval(every);
    ticker.tick().await;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = abandon.cancelled() => return StopReason::Abandoned,
        }
        match attempt.heartbeat().await {
            Ok(HeartbeatOutcome::Renewed) => {}
            Ok(HeartbeatOutcome::CancelRequested) => return StopReason::CancelRequested,
            Ok(HeartbeatOutcome::Fenced) => return StopReason::Fenced,
            Err(e) => warn!(error = %e, "heartbeat failed; will try again"),
        }
    }
}
