//! A task's steps: counted against its limits (`max_steps`,
//! `max_duration_s`, the tenant's tokens of today), each announced with
//! `action` and `action_completed` events, guarded against cancellation and
//! a lost sandbox, paused while a person holds the desktop, and the waits
//! for a person's input.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_queue::QueueError;
use flotilla_types::action::Action;
use flotilla_types::event::EventKind;
use flotilla_types::task::{HumanInput, StopCode};
use flotilla_types::usage::{Amount, DayTokens};
use tokio_util::sync::CancellationToken;
use tracing::{warn, Instrument};

use super::super::budget::{self, SandboxClock};
use super::super::error::PipelineError;
use super::super::handle::TaskHandle;
use super::super::journal::JournaledWait;
use super::super::TaskRun;
use crate::metrics::WorkerMetrics;
use crate::model::browser::BrowserCall;
use crate::sandbox::{KeepAlive, SandboxLost};

/// How often a waiting task looks for a human's input.
const INPUT_POLL: Duration = Duration::from_millis(250);

/// Steps a task may take when it sets no `max_steps`.
pub const DEFAULT_MAX_STEPS: u32 = 200;
/// How long a task may run when it sets no `max_duration_s`.
pub const DEFAULT_MAX_DURATION: Duration = Duration::from_secs(3600);

/// The stopping points of one attempt.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_steps: u32,
    pub deadline: Instant,
}

impl Limits {
    /// The task's own limits, or the defaults, counted from now.
    pub fn of(run: &TaskRun) -> Self {
        let spec = run.task.spec();
        let duration = spec.max_duration_s.map_or(DEFAULT_MAX_DURATION, Duration::from_secs);
        Self { max_steps: spec.max_steps.unwrap_or(DEFAULT_MAX_STEPS), deadline: Instant::now() + duration }
    }
}

/// A task's steps: counted against its limits, each announced with an
/// `action` event before and an `action_completed` event after, traced in a
/// `step` span and timed by action type.
pub struct Steps {
    pub(super) task: Arc<dyn TaskHandle>,
    pub(super) cancel: CancellationToken,
    pub(super) limits: Limits,
    taken: u32,
    /// The keeper of the task's sandbox, once it has one.
    pub(super) keeper: Option<Arc<KeepAlive>>,
    /// The time the task's sandbox was held and not yet counted.
    pub(super) sandbox_clock: Option<SandboxClock>,
    metrics: WorkerMetrics,
    /// Who drives the desktop now, as far as the steps know.
    hand: Hand,
    /// Where the tenant's tokens of today stood at the last count.
    day: std::sync::Mutex<DayTokens>,
    /// For a run that journals its steps: cancelled when the worker stops,
    /// so a wait for a person hands the task back rather than holding the
    /// worker until its drain deadline.
    hand_back: Option<CancellationToken>,
    /// How this run's waits for a person park, when they may.
    pub(super) parking: Option<super::parking::Parking>,
}

/// Who drives a task's desktop: its agent, or a person who took it over
/// through the API. Steps pause while a person holds it; the hand-back
/// (the person's message) stays here until the pipeline takes it up.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Hand {
    /// The agent drives; nothing was handed back since it last looked.
    #[default]
    Agent,
    /// A person held the desktop and handed it back with this message; the
    /// agent has not taken it up yet.
    HandedBack(Option<String>),
}

impl Steps {
    pub fn new(run: &TaskRun) -> Self {
        Self {
            task: Arc::clone(&run.task),
            cancel: run.cancel.clone(),
            limits: Limits::of(run),
            taken: 0,
            keeper: None,
            sandbox_clock: None,
            metrics: run.metrics.clone(),
            hand: Hand::Agent,
            day: std::sync::Mutex::new(DayTokens::Left),
            hand_back: None,
            parking: None,
        }
    }

    /// The run journals its steps: a worker's stop (`hand_back`) ends a
    /// wait for a person with [`PipelineError::HandedBack`].
    pub fn journaled(&mut self, hand_back: CancellationToken) {
        self.hand_back = Some(hand_back);
    }

    /// Whether a later attempt can take the run up from its journal.
    pub fn is_journaled(&self) -> bool {
        self.hand_back.is_some()
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn taken(&self) -> u32 {
        self.taken
    }

    /// Counts `taken` actions as already done, by an interrupted attempt
    /// this run takes up: `max_steps` counts them.
    pub fn resume_from(&mut self, taken: u32) {
        self.taken = taken;
    }

    /// Runs `work` unless the task is cancelled, out of time or without
    /// its sandbox first.
    pub async fn guard<T>(&self, work: impl Future<Output = Result<T, PipelineError>>) -> Result<T, PipelineError> {
        tokio::select! {
            result = work => result,
            () = self.cancel.cancelled() => Err(PipelineError::Cancelled),
            lost = sandbox_lost(self.keeper.as_deref()) => Err(lost_failure(lost)),
            () = tokio::time::sleep_until(self.limits.deadline.into()) => Err(PipelineError::Fatal {
                code: StopCode::Problem,
                message: "the task reached its max_duration_s".into(),
            }),
        }
    }

    /// Counts what the task spent, and ends it when that takes it past its
    /// budget. Also learns whether the tenant spent its tokens of today,
    /// for [`Steps::between_steps`].
    pub async fn count(&self, amounts: &[Amount]) -> Result<(), PipelineError> {
        let counted = self.task.add_usage(amounts).await?;
        *self.day.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = counted.day;
        budget::check(self.task.spec(), &counted.meter)
    }

    /// Where one step ends and the next begins (an action, a model call): a
    /// task whose tenant spent its `max_tokens_per_day` (as its last count
    /// found) stops here, its current step finished, to wait for the next
    /// UTC day.
    pub fn between_steps(&self) -> Result<(), PipelineError> {
        match *self.day.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) {
            DayTokens::Left => Ok(()),
            DayTokens::Spent { resume_at_ms } => Err(PipelineError::DayTokensSpent { resume_at_ms }),
        }
    }

    /// The task the steps belong to, for events of its own.
    pub fn task(&self) -> &dyn TaskHandle {
        self.task.as_ref()
    }

    /// Puts the task in `waiting` with `code` and waits, under the guard,
    /// until a human answers through the API.
    pub async fn wait_for_human(&self, code: StopCode, message: &str) -> Result<HumanInput, PipelineError> {
        self.task.wait_for_human(code, message).await?;
        self.next_input_or_park(None).await
    }

    /// The next input a human gives the waiting task (an answer or a
    /// hand-back), polled under the guard; with `park`, the task is parked
    /// in that wait once the grace period passes (see [`super::parking`]).
    pub(super) async fn next_input_or_park(&self, park: Option<JournaledWait>) -> Result<HumanInput, PipelineError> {
        let stopping = async {
            match &self.hand_back {
                Some(token) => token.cancelled().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            input = self.poll_input(park) => input,
            () = stopping => Err(PipelineError::HandedBack),
        }
    }

    /// Polls, under the guard, for the input a human gives the task; parks
    /// it in `park` once the grace period passed without one. The park is
    /// a step of the same loop, so an answer is never taken while the
    /// sandbox is being paused.
    async fn poll_input(&self, park: Option<JournaledWait>) -> Result<HumanInput, PipelineError> {
        let grace = park.as_ref().and(self.park_after());
        let mut park_at = grace.map(|after| Instant::now() + after);
        self.guard(async {
            loop {
                match self.task.take_input().await {
                    Ok(Some(input)) => return Ok(input),
                    Ok(None) => {}
                    Err(QueueError::Fenced) => return Err(PipelineError::Fenced),
                    Err(QueueError::Cancelled) => return Err(PipelineError::Cancelled),
                    Err(e) => warn!(error = %e, "could not look for a human's input; trying again"),
                }
                if let (Some(at), Some(wait), Some(after)) = (park_at, &park, grace) {
                    if Instant::now() >= at {
                        park_at = Some(Instant::now() + after);
                        if self.may_park().await {
                            if let Some(parked) = self.park(wait.clone()).await? {
                                return Err(parked);
                            }
                            park_at = None;
                        }
                    }
                }
                tokio::time::sleep(INPUT_POLL).await;
            }
        })
        .await
    }

    /// Waits, under the guard, while a person holds the desktop; once they
    /// hand it back, their message is kept as [`Hand::HandedBack`]. A
    /// moment's trouble reading Redis is not a takeover: the steps go on.
    pub async fn pause_while_held(&mut self) -> Result<(), PipelineError> {
        match self.task.held_by_person().await {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            Err(e) => {
                warn!(error = %e, "could not learn whether a person holds the desktop; going on");
                return Ok(());
            }
        }
        let input = self.next_input_or_park(None).await?;
        self.hand = Hand::HandedBack(input.message);
        Ok(())
    }

    /// Whether a hand-back came that the pipeline has not taken up.
    pub fn handed_back(&self) -> bool {
        matches!(self.hand, Hand::HandedBack(_))
    }

    /// Takes up a hand-back, if one came since the last call.
    pub fn take_hand_back(&mut self) -> Option<Option<String>> {
        match std::mem::take(&mut self.hand) {
            Hand::Agent => None,
            Hand::HandedBack(message) => Some(message),
        }
    }

    /// Whether another step may start: not cancelled or handed back, under
    /// `max_steps`, and (after waiting out a person's hold) the agent's.
    async fn may_start_step(&mut self) -> Result<(), PipelineError> {
        self.between_steps()?;
        if self.taken >= self.limits.max_steps {
            return Err(PipelineError::Fatal {
                code: StopCode::Problem,
                message: format!("the task reached its max_steps ({})", self.limits.max_steps),
            });
        }
        self.pause_while_held().await?;
        Ok(())
    }

    /// Takes one step: checks `max_steps`, emits `action`, runs `perform`
    /// under the guard, and emits `action_completed` with the step count.
    pub async fn take(
        &mut self,
        action: &Action,
        perform: impl Future<Output = Result<(), PipelineError>>,
    ) -> Result<(), PipelineError> {
        self.may_start_step().await?;
        let span = tracing::info_span!("step", action = action.kind(), step = self.taken + 1);
        self.take_traced(action, perform).instrument(span).await
    }

    /// Takes one browser call as a step: as [`Steps::take`], reported once
    /// done with a `block` event naming the call (browser calls are not
    /// screen actions), and returns what `perform` gave.
    pub async fn take_browser_call<T>(
        &mut self,
        call: &BrowserCall,
        perform: impl Future<Output = Result<T, PipelineError>>,
    ) -> Result<T, PipelineError> {
        self.may_start_step().await?;
        let started = Instant::now();
        let value = self.guard(perform).await?;
        let took = started.elapsed();
        self.taken += 1;
        self.metrics.step_completed(call.kind(), took);
        let block = serde_json::json!({ "type": "browser_call", "call": call, "ms": took.as_millis() as u64 });
        self.task.emit(EventKind::Block { block }, &[("steps_taken", self.taken.to_string())]).await?;
        let mut spent = vec![Amount::Step];
        spent.extend(self.sandbox_clock.as_mut().map(SandboxClock::lap));
        self.count(&spent).await?;
        Ok(value)
    }

    async fn take_traced(
        &mut self,
        action: &Action,
        perform: impl Future<Output = Result<(), PipelineError>>,
    ) -> Result<(), PipelineError> {
        self.task.emit(EventKind::Action { action: action.clone() }, &[]).await?;
        let started = Instant::now();
        self.guard(perform).await?;
        let took = started.elapsed();
        self.taken += 1;
        self.metrics.step_completed(action.kind(), took);
        let done = EventKind::ActionCompleted { action: action.clone(), ms: took.as_millis() as u64 };
        self.task.emit(done, &[("steps_taken", self.taken.to_string())]).await?;
        let mut spent = vec![Amount::Step];
        spent.extend(self.sandbox_clock.as_mut().map(SandboxClock::lap));
        self.count(&spent).await
    }
}

/// Resolves once the sandbox could not be kept; never without a keeper.
async fn sandbox_lost(keeper: Option<&KeepAlive>) -> SandboxLost {
    match keeper {
        Some(keeper) => keeper.lost().await,
        None => std::future::pending().await,
    }
}

/// A sandbox ended from outside is worth another attempt on a new one; one
/// that could not be extended ends the task.
fn lost_failure(lost: SandboxLost) -> PipelineError {
    match lost {
        SandboxLost::Gone(_) => PipelineError::Retryable(lost.to_string()),
        SandboxLost::NotExtended(_) => PipelineError::Fatal { code: StopCode::Problem, message: lost.to_string() },
    }
}
