//! Parking a task that waits for a person: past the grace period
//! (`FLOTILLA_PARK_WAITING_AFTER_MS`) the wait is journaled (what the
//! person was asked, at which step, and what their answer decides), the
//! sandbox paused through its provider, and the task handed back to the
//! queue parked (see `flotilla_queue::queue::Parked`): still `waiting`, in
//! no lane, holding no worker slot, no lease and no running place of its
//! tenant. The answer wakes it for any worker, which resumes the sandbox
//! and takes the answer up where the wait began.
//!
//! Only a journaled run whose sandbox is the pool's and whose provider can
//! pause parks (E2B and sandbox hosts); the in-process local desktop cannot
//! pause, so its tasks wait holding their slot, as does a wait while a
//! person holds the desktop (pausing it would freeze their view).
//!
//! Invariant: the sandbox is paused before the task is handed back, so the
//! attempt that takes the task up never finds it paused behind its back.
//! Guarded by
//! `durable_parking::a_task_waiting_for_approval_is_parked_and_goes_on_in_the_same_desktop_on_another_worker`.

use std::sync::Arc;
use std::time::Duration;

use flotilla_queue::queue::Parked;
use flotilla_types::task::StopCode;
use tracing::{info, warn};

use super::super::error::PipelineError;
use super::super::journal::{self, JournaledWait};
use super::super::TaskRun;
use super::{Session, Steps};
use crate::sandbox::{SandboxId, SandboxProvider};

/// How a run parks its waits: the sandbox to pause and the grace period.
#[derive(Clone)]
pub struct Parking {
    provider: Arc<dyn SandboxProvider>,
    sandbox: SandboxId,
    after: Duration,
}

impl Session {
    /// Lets the waits of this journaled run park, when its sandbox is the
    /// pool's and its provider can pause.
    pub fn allow_parking(&mut self, run: &TaskRun) {
        let Some(held) = self.held.as_ref().filter(|held| held.is_leased()) else { return };
        let (provider, id) = held.provider_and_id(&self.pool);
        if !provider.can_pause() {
            return;
        }
        let parking = Parking { provider: Arc::clone(provider), sandbox: id.clone(), after: run.tools.park_waiting_after };
        self.steps.parking = Some(parking);
    }
}

impl Steps {
    /// Puts the task in `waiting` with `code` and waits for a person's
    /// answer, as [`Steps::wait_for_human`]; past the grace period the task
    /// is parked with `wait` journaled (the run ends with
    /// [`PipelineError::Parked`]).
    pub async fn wait_parkable(
        &self,
        code: StopCode,
        message: &str,
        kind: journal::WaitKind,
    ) -> Result<flotilla_types::task::HumanInput, PipelineError> {
        self.task.wait_for_human(code, message).await?;
        let wait = JournaledWait { code: code.as_str().to_owned(), message: message.to_owned(), step: self.taken(), kind };
        self.next_input_or_park(Some(wait)).await
    }

    /// Waits again where a parked attempt waited (`code`), without a second
    /// `waiting` event: the answer that woke the task is taken at once.
    pub async fn rejoin_wait(&self, wait: &JournaledWait) -> Result<flotilla_types::task::HumanInput, PipelineError> {
        let code = StopCode::parse(&wait.code).unwrap_or(StopCode::HumanIntervention);
        self.task.rejoin_wait(code).await?;
        self.next_input_or_park(Some(wait.clone())).await
    }

    /// Whether the grace period of `wait` may end in a park now: a person
    /// holding the desktop keeps it running.
    pub(super) async fn may_park(&self) -> bool {
        !self.task.held_by_person().await.unwrap_or(true)
    }

    /// The grace period, when this run's waits may park.
    pub(super) fn park_after(&self) -> Option<Duration> {
        self.parking.as_ref().map(|p| p.after)
    }

    /// Parks the task in `wait`: journals it, pauses the sandbox, hands
    /// the task back. `Ok(None)` when the sandbox could not be paused (the
    /// wait goes on holding the slot).
    pub(super) async fn park(&self, wait: JournaledWait) -> Result<Option<PipelineError>, PipelineError> {
        let Some(parking) = &self.parking else { return Ok(None) };
        journal::journal_wait(self.task.as_ref(), wait).await?;
        match parking.provider.pause(&parking.sandbox).await {
            Ok(true) => {}
            Ok(false) => return Ok(None),
            Err(e) => {
                warn!(sandbox = %parking.sandbox, error = %e, "could not pause the sandbox; the task waits holding its slot");
                return Ok(None);
            }
        }
        info!(sandbox = %parking.sandbox, "the task waits for a person parked, its sandbox paused");
        // The sandbox's time is counted while the attempt still owns the
        // task; once parked, nothing more is counted by this run.
        if let Some(clock) = &self.sandbox_clock {
            self.count(&[clock.so_far()]).await?;
        }
        match self.task.park().await {
            Ok(Parked::Parked | Parked::Requeued) => Ok(Some(PipelineError::Parked)),
            Ok(Parked::CancelRequested) => Ok(Some(PipelineError::Cancelled)),
            Err(e) => Err(e.into()),
        }
    }
}
