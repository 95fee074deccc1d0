//! A task's time on a screen: the sandbox it holds, the screenshots it
//! takes and the actions it performs, with the events and limits that go
//! with each. Every pipeline that needs a desktop acts through a
//! [`Session`], so `sandbox_ready`, `action`, `action_completed` and
//! `screenshot` events, `max_steps`, `max_duration_s` and cancellation work
//! the same for all of them.
//!
//! Which sandbox a session holds and what becomes of it at the end is
//! [`held`](super::held)'s business. While the session runs, a
//! [`KeepAlive`] extends the sandbox before its deadline; when it cannot,
//! every guarded step ends at once: with code `problem` when the sandbox
//! could not be extended, as retryable when it was ended from outside (the
//! next attempt gets a new sandbox).
//!
//! A desktop the worker can show goes on show for live views while the
//! session holds it (`stream_url` names where to ask for a view).
//!
//! Screenshots go to the [`Uploader`] the moment they are taken and the loop
//! goes on; a background feed emits each `screenshot` event once its image
//! is stored, in step order. Closing a session that succeeded waits until
//! every screenshot is stored, so no task ends `succeeded` pointing at an
//! image the store does not have.

mod evaluate;
mod files;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_blobstore::{BlobStore, UploadError, Uploader, UploaderOptions};
use flotilla_queue::QueueError;
use flotilla_types::action::Action;
use flotilla_types::event::EventKind;
use flotilla_types::task::{HumanInput, SandboxSpec, StopCode};
use flotilla_types::usage::{Amount, DayTokens};
use flotilla_types::TaskId;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{warn, Instrument};

use super::budget::{self, SandboxClock};
use super::error::PipelineError;
use super::handle::TaskHandle;
use super::held::{Claimant, Held, SandboxChoice};
use super::{TaskRun, Tools};
use crate::live::{LiveSource, ShowGuard};
use crate::metrics::WorkerMetrics;
use crate::sandbox::{KeepAlive, KeepAlivePolicy, SandboxId, SandboxLost, SandboxPool, SandboxProvider, Screenshot};

/// How long programs get to react to an action before the screen is read.
pub(crate) const SETTLE_FIRST: Duration = Duration::from_millis(100);
/// How long the screen must stay unchanged to count as settled (for a
/// provider that cannot tell, the gap between two captures that must match).
pub(crate) const SETTLE_POLL: Duration = Duration::from_millis(50);
/// The longest wait for a screen to settle.
pub(crate) const SETTLE_MAX: Duration = Duration::from_millis(1_000);

/// How often a waiting task looks for a human's input.
const INPUT_POLL: Duration = Duration::from_millis(250);

/// Steps a task may take when it sets no `max_steps`.
pub const DEFAULT_MAX_STEPS: u32 = 200;
/// How long a task may run when it sets no `max_duration_s`.
pub const DEFAULT_MAX_DURATION: Duration = Duration::from_secs(3600);

/// A capture of a settled screen, with what it took to settle.
#[derive(Debug, Clone)]
pub struct Settled {
    pub shot: Screenshot,
    /// The time spent asleep on purpose, giving programs time to draw
    /// (not work: from the action's end to when the screen counted as
    /// settled, or [`SETTLE_FIRST`] and each [`SETTLE_POLL`] between captures).
    pub waited: Duration,
    /// How many captures it took.
    pub captures: u32,
}

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
    task: Arc<dyn TaskHandle>,
    cancel: CancellationToken,
    limits: Limits,
    taken: u32,
    /// The keeper of the task's sandbox, once it has one.
    keeper: Option<Arc<KeepAlive>>,
    /// The time the task's sandbox was held and not yet counted.
    sandbox_clock: Option<SandboxClock>,
    metrics: WorkerMetrics,
    /// Who drives the desktop now, as far as the steps know.
    hand: Hand,
    /// Where the tenant's tokens of today stood at the last count.
    day: std::sync::Mutex<DayTokens>,
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
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn taken(&self) -> u32 {
        self.taken
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
        self.next_input().await
    }

    /// The next input a human gives the waiting task (an answer or a
    /// hand-back), polled under the guard.
    async fn next_input(&self) -> Result<HumanInput, PipelineError> {
        self.guard(async {
            loop {
                match self.task.take_input().await {
                    Ok(Some(input)) => return Ok(input),
                    Ok(None) => {}
                    Err(QueueError::Fenced) => return Err(PipelineError::Fenced),
                    Err(e) => warn!(error = %e, "could not look for a human's input; trying again"),
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
        let input = self.next_input().await?;
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

    /// Takes one step: checks `max_steps`, emits `action`, runs `perform`
    /// under the guard, and emits `action_completed` with the step count.
    pub async fn take(
        &mut self,
        action: &Action,
        perform: impl Future<Output = Result<(), PipelineError>>,
    ) -> Result<(), PipelineError> {
        self.between_steps()?;
        if self.taken >= self.limits.max_steps {
            return Err(PipelineError::Fatal {
                code: StopCode::Problem,
                message: format!("the task reached its max_steps ({})", self.limits.max_steps),
            });
        }
        self.pause_while_held().await?;
        let span = tracing::info_span!("step", action = action.kind(), step = self.taken + 1);
        self.take_traced(action, perform).instrument(span).await
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

/// A task holding a sandbox.
pub struct Session {
    task: Arc<dyn TaskHandle>,
    pool: SandboxPool,
    held: Option<Held>,
    screenshots: Option<ScreenshotLog>,
    steps: Steps,
    /// The desktop on show for live views, while the session holds it.
    live: Option<ShowGuard>,
    tools: Arc<Tools>,
}

/// The task's screenshots on their way to the store, and the feed that
/// turns each stored one into a `screenshot` event.
struct ScreenshotLog {
    uploader: Uploader,
    events: JoinHandle<()>,
    /// The steps taken when each screenshot was captured, in capture order
    /// (the uploader's sequence numbers).
    steps: Arc<std::sync::Mutex<Vec<u32>>>,
}

impl Session {
    /// Takes the sandbox the task asks for (a warm one when its shape
    /// allows, or the existing one it names), keeps it alive, announces it
    /// with `sandbox_ready`, and records it on the task.
    pub async fn open(run: &TaskRun) -> Result<Self, PipelineError> {
        Self::open_with(run, Steps::new(run), run.task.spec().sandbox.as_ref()).await
    }

    /// Like [`Session::open`], with steps already under way (their limits
    /// count from before the sandbox, as when a planner ran first) and the
    /// sandbox `spec` to take in place of the task's own (a replay runs on
    /// a desktop shaped like its original's).
    pub async fn open_with(run: &TaskRun, steps: Steps, spec: Option<&SandboxSpec>) -> Result<Self, PipelineError> {
        let Some(pool) = run.tools.sandboxes.clone() else {
            return Err(PipelineError::Fatal {
                code: StopCode::Problem,
                message: "this task needs a sandbox, and this worker has no sandbox provider (set FLOTILLA_SANDBOX_PROVIDER)"
                    .into(),
            });
        };
        let mut steps = steps;
        let choice = SandboxChoice::of(spec, pool.provider().kind(), &run.task.tenant_settings(), &run.tools.templates)?;
        let claimant = Claimant { task: &run.task };
        let policy = KeepAlivePolicy { stretch: choice.stretch(), until: steps.limits.deadline };
        let runs_until =
            time::OffsetDateTime::now_utc() + (policy.until + policy.margin()).saturating_duration_since(Instant::now());
        let held = steps.guard(Held::take(&pool, &choice, claimant, &run.cancel, runs_until)).await?;
        run.metrics.sandbox_acquired(held.warm(), held.waited());
        steps.sandbox_clock = Some(SandboxClock::start(pool.provider().name()));
        let sandbox = held.sandbox();
        steps.keeper =
            Some(Arc::new(KeepAlive::spawn(Arc::clone(pool.provider()), sandbox.id.clone(), sandbox.expires_at, policy)));
        let live = show_live(run, pool.provider(), &sandbox.id).await;
        let mut session = Self {
            task: Arc::clone(&run.task),
            pool,
            held: None,
            screenshots: run.tools.blobs.as_ref().map(|store| ScreenshotLog::start(store, &run.tools.uploads, &run.task)),
            steps,
            live,
            tools: Arc::clone(&run.tools),
        };
        let announced = session.announce(&held).await;
        session.held = Some(held);
        announced?;
        session.bring_in().await?;
        session.set_up().await?;
        Ok(session)
    }

    async fn announce(&self, held: &Held) -> Result<(), PipelineError> {
        let sandbox = held.sandbox();
        let stream_url = self.live.as_ref().map(|_| stream_url(self.task.task_id()));
        let provider = self.pool.provider();
        let record = serde_json::json!({
            "provider": provider.name(), "id": sandbox.id.as_str(), "host": provider.host(), "stream_url": stream_url
        });
        let ready = EventKind::SandboxReady {
            sandbox_id: sandbox.id.to_string(),
            stream_url,
            warm: held.warm(),
            ms: held.waited().as_millis() as u64,
        };
        self.task.emit(ready, &[("sandbox", record.to_string())]).await?;
        Ok(())
    }

    /// The screen size of the sandbox.
    pub fn resolution(&self) -> (u32, u32) {
        self.held.as_ref().map_or((0, 0), |h| h.sandbox().resolution)
    }

    /// The task's step count and limits.
    pub fn steps(&self) -> &Steps {
        &self.steps
    }

    /// The task's steps, to pause them for a person or take up a hand-back.
    pub fn steps_mut(&mut self) -> &mut Steps {
        &mut self.steps
    }

    /// Runs `work` unless the task is cancelled or out of time first.
    pub async fn guard<T>(&self, work: impl Future<Output = Result<T, PipelineError>>) -> Result<T, PipelineError> {
        self.steps.guard(work).await
    }

    /// Captures the screen once it has settled after the last action, and
    /// hands it to the store; returns the capture.
    pub async fn observe(&self) -> Result<Screenshot, PipelineError> {
        Ok(self.observe_settled().await?.shot)
    }

    /// As [`Session::observe`], with how the screen settled.
    pub async fn observe_settled(&self) -> Result<Settled, PipelineError> {
        let settled = self.guard(self.settled_screen()).await?;
        if let Some(log) = &self.screenshots {
            log.steps.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(self.steps.taken());
            let png = settled.shot.png.clone();
            self.guard(async { log.uploader.enqueue(png).await.map_err(upload_failure) }).await?;
        }
        Ok(settled)
    }

    /// The screen once programs have caught up with the last action: at
    /// least [`SETTLE_FIRST`] after it, once the screen has not changed for
    /// [`SETTLE_POLL`], or after [`SETTLE_MAX`] for a screen that never
    /// stops changing. A provider that reports its screen's changes is
    /// captured once, when they have stopped; any other is captured every
    /// [`SETTLE_POLL`] until two captures match.
    async fn settled_screen(&self) -> Result<Settled, PipelineError> {
        let id = &self.held()?.sandbox().id;
        let provider = self.pool.provider();
        let started = Instant::now();
        if let Some(quiet) = quiet_screen(provider.as_ref(), id, started).await {
            let shot = provider.screenshot(id).await.map_err(PipelineError::from)?;
            return Ok(Settled { shot, waited: quiet - started, captures: 1 });
        }
        let deadline = started + SETTLE_MAX;
        let mut waited = SETTLE_FIRST;
        tokio::time::sleep(SETTLE_FIRST).await;
        let mut shot = provider.screenshot(id).await.map_err(PipelineError::from)?;
        let mut captures = 1;
        while Instant::now() < deadline {
            tokio::time::sleep(SETTLE_POLL).await;
            waited += SETTLE_POLL;
            let next = provider.screenshot(id).await.map_err(PipelineError::from)?;
            captures += 1;
            let settled = next.png == shot.png;
            shot = next;
            if settled {
                break;
            }
        }
        Ok(Settled { shot, waited, captures })
    }

    /// Performs one action on the sandbox as a step.
    pub async fn act(&mut self, action: &Action) -> Result<(), PipelineError> {
        let id = self.held()?.sandbox().id.clone();
        let provider = Arc::clone(self.pool.provider());
        self.steps.take(action, async { provider.act(&id, action).await.map_err(PipelineError::from) }).await
    }

    /// The sandbox's provider and id, for pipelines that run commands or
    /// move files in it.
    pub fn sandbox(&self) -> Result<(&Arc<dyn SandboxProvider>, &SandboxId), PipelineError> {
        Ok(self.held()?.provider_and_id(&self.pool))
    }

    fn held(&self) -> Result<&Held, PipelineError> {
        self.held.as_ref().ok_or_else(|| PipelineError::Retryable("the session has no sandbox".into()))
    }

    /// Ends the session. When `result` is a success, first waits until every
    /// screenshot is stored and its event emitted; a screenshot that cannot
    /// be stored turns the success into an error. Then the sandbox is
    /// settled: released, or kept for a later task when the task asked so.
    /// Before any of it, the task's `check` judges the sandbox (see
    /// [`evaluate`]), then the agent's output files are stored and its
    /// browser profile saved (see [`files`]).
    pub async fn close<T>(mut self, result: Result<T, PipelineError>) -> Result<T, PipelineError> {
        self.check(&result).await;
        let result = self.take_out(result).await;
        let result = match (result, self.screenshots.take()) {
            (Ok(value), Some(log)) => log.finish().await.map(|()| value),
            (result, Some(log)) => {
                log.abandon();
                result
            }
            (result, None) => result,
        };
        if let Some(mut clock) = self.steps.sandbox_clock.take() {
            if let Err(e) = self.task.add_usage(&[clock.lap()]).await {
                warn!(error = %e, "could not count the last of the sandbox's time");
            }
        }
        drop(self.live.take());
        let keeper = self.steps.keeper.take();
        let expires_at = keeper.as_ref().map(|keeper| keeper.expires_at());
        let gone = keeper.as_ref().is_some_and(|keeper| keeper.is_gone());
        if let Some(held) = self.held.take() {
            held.settle(&self.pool, &result, expires_at, gone, Claimant { task: &self.task }).await;
        }
        result
    }
}

/// Sleeps until `provider` says sandbox `id`'s screen is quiet: at least
/// [`SETTLE_FIRST`] after `started` and [`SETTLE_POLL`] after its last
/// change, or [`SETTLE_MAX`] after `started`. Returns the time it slept
/// until, or `None` at once when the provider does not report changes.
pub(crate) async fn quiet_screen(provider: &dyn SandboxProvider, id: &SandboxId, started: Instant) -> Option<Instant> {
    let (earliest, latest) = (started + SETTLE_FIRST, started + SETTLE_MAX);
    loop {
        let changed = provider.screen_changed_at(id)?;
        let due = earliest.max(changed + SETTLE_POLL).min(latest);
        if Instant::now() >= due {
            return Some(due);
        }
        tokio::time::sleep_until(due.into()).await;
    }
}

/// A session dropped without `close` (its task was cancelled or taken over
/// mid-step) still gives its sandbox back, in the background.
impl Drop for Session {
    fn drop(&mut self) {
        if let Some(log) = self.screenshots.take() {
            log.abandon();
        }
        if let Some(held) = self.held.take() {
            held.release_in_background(&self.pool);
        }
    }
}

impl ScreenshotLog {
    fn start(store: &BlobStore, options: &UploaderOptions, task: &Arc<dyn TaskHandle>) -> Self {
        let uploader = Uploader::spawn(store.clone(), options.clone());
        let mut feed = uploader.feed();
        let task = Arc::clone(task);
        let steps = Arc::new(std::sync::Mutex::new(Vec::new()));
        let taken_at = Arc::clone(&steps);
        let events = tokio::spawn(async move {
            while let Some((seq, image)) = feed.next().await {
                let step = taken_at.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(seq as usize).copied();
                // `dedup` as the tenant sees it: true only when this tenant
                // stored these bytes before, never because another did.
                let seen = match task.tenant_stored_before(&image.hash).await {
                    Ok(seen) => seen,
                    Err(e) => {
                        warn!(error = %e, "could not record a tenant's stored screen");
                        false
                    }
                };
                let dedup = image.dedup && seen;
                let event = EventKind::Screenshot { hash: image.hash, key: image.key, bytes: image.bytes, dedup, step };
                let stored = Amount::Screenshot { bytes: image.bytes, dedup };
                if let Err(e) = task.emit(event, &[]).await {
                    warn!(error = %e, "could not record a stored screenshot");
                    return;
                }
                if let Err(e) = task.add_usage(&[stored]).await {
                    warn!(error = %e, "could not count a stored screenshot");
                    return;
                }
            }
        });
        Self { uploader, events, steps }
    }

    /// Waits for every screenshot to be stored and announced.
    async fn finish(self) -> Result<(), PipelineError> {
        let flushed = self.uploader.flush().await;
        drop(self.uploader);
        if flushed.is_err() {
            self.events.abort();
        }
        self.events.await.ok();
        flushed.map(|_| ()).map_err(upload_failure)
    }

    fn abandon(self) {
        self.events.abort();
    }
}

/// Puts the task's desktop on show for live views, when the worker serves
/// them and the provider can show this sandbox.
async fn show_live(run: &TaskRun, provider: &Arc<dyn SandboxProvider>, id: &SandboxId) -> Option<ShowGuard> {
    let live = run.tools.live.as_ref()?;
    let source = match provider.live_display(id) {
        Some(display) => LiveSource::X11(display),
        None => LiveSource::Remote(provider.live_stream(id)?),
    };
    Some(live.show(run.task.task_id(), source).await)
}

/// The stable form of a task's view URL: the API endpoint that hands out
/// its tokened URLs.
fn stream_url(task: &TaskId) -> String {
    format!("/v1/tasks/{task}/view")
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

/// Screenshots that could not be stored: retried while the store may come
/// back, fatal when it refused for good.
fn upload_failure(error: UploadError) -> PipelineError {
    if error.is_retryable() {
        PipelineError::Retryable(error.to_string())
    } else {
        PipelineError::Fatal { code: StopCode::Problem, message: error.to_string() }
    }
}
