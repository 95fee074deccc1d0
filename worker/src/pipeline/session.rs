//! A task's time on a screen: the sandbox it holds, the screenshots it
//! takes and the actions it performs, with the events and limits that go
//! with each. Every pipeline that needs a desktop acts through a
//! [`Session`], so `sandbox_ready`, `action`, `action_completed` and
//! `screenshot` events, `max_steps`, `max_duration_s` and cancellation work
//! the same for all of them.
//!
//! Its steps (limits, events, the guard, waits for a person) are
//! [`steps`]'s.
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
mod parking;
mod sensitive;
pub use sensitive::sensitive_answer;
mod steps;

pub use parking::Parking;
pub use steps::{Hand, Limits, Steps, DEFAULT_MAX_DURATION, DEFAULT_MAX_STEPS};

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_blobstore::{BlobStore, UploadError, Uploader, UploaderOptions};
use flotilla_types::action::Action;
use flotilla_types::event::EventKind;
use flotilla_types::task::{SandboxSpec, StopCode};
use flotilla_types::usage::Amount;
use flotilla_types::TaskId;
use tokio::task::JoinHandle;
use tracing::warn;

use super::budget::SandboxClock;
use super::error::PipelineError;
use super::handle::TaskHandle;
use super::held::{Claimant, Held, SandboxChoice};
use super::journal::JournaledSandbox;
use super::{TaskRun, Tools};
use crate::live::{LiveSource, ShowGuard};
use crate::sandbox::settle::{quiet_screen, SETTLE};
use crate::sandbox::{KeepAlive, KeepAlivePolicy, SandboxError, SandboxId, SandboxPool, SandboxProvider, Screenshot};

/// A capture of a settled screen, with what it took to settle.
#[derive(Debug, Clone)]
pub struct Settled {
    pub shot: Screenshot,
    /// The time spent asleep on purpose, giving programs time to draw
    /// (not work: from the action's end to when the screen counted as
    /// settled, or the settle's first wait and each of its polls between captures).
    pub waited: Duration,
    /// How many captures it took.
    pub captures: u32,
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
        let pool = sandbox_pool(run)?;
        let choice = SandboxChoice::of(spec, pool.provider().kind(), &run.task.tenant_settings(), &run.tools.templates)?;
        let claimant = Claimant { task: &run.task };
        let (policy, runs_until) = keep_alive_policy(choice.stretch(), &steps);
        let held = steps.guard(Held::take(&pool, &choice, claimant, &run.cancel, runs_until)).await?;
        let session = Self::hold(run, steps, pool, policy, held).await?;
        session.bring_in().await?;
        session.set_up().await?;
        Ok(session)
    }

    /// Takes up sandbox `id`, left running by an interrupted attempt of
    /// the task, with `steps` already taken; `None` when it is gone. The
    /// task's `setup` is not run again.
    pub async fn reopen(run: &TaskRun, steps: Steps, id: &SandboxId, host: Option<&str>) -> Result<Option<Self>, PipelineError> {
        let pool = sandbox_pool(run)?;
        let spec = run.task.spec().sandbox.as_ref();
        let choice = SandboxChoice::of(spec, pool.provider().kind(), &run.task.tenant_settings(), &run.tools.templates)?;
        let (policy, runs_until) = keep_alive_policy(choice.stretch(), &steps);
        let claimant = Claimant { task: &run.task };
        let held = match &choice {
            // The user's own sandbox is taken as the task names it, and
            // stays the user's.
            SandboxChoice::Existing { .. } => steps.guard(Held::take(&pool, &choice, claimant, &run.cancel, runs_until)).await?,
            SandboxChoice::New { keep_alive, .. } => {
                match steps.guard(Held::adopt(&pool, (host, id), *keep_alive, claimant, &run.cancel)).await? {
                    Some(held) => held,
                    None => return Ok(None),
                }
            }
        };
        Ok(Some(Self::hold(run, steps, pool, policy, held).await?))
    }

    /// A session over `held`: keeps it alive, shows it live, announces it.
    async fn hold(
        run: &TaskRun,
        mut steps: Steps,
        pool: SandboxPool,
        policy: KeepAlivePolicy,
        held: Held,
    ) -> Result<Self, PipelineError> {
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
        Ok(session)
    }

    /// Where the sandbox is, for the task's step journal.
    pub fn journaled_sandbox(&self) -> Result<JournaledSandbox, PipelineError> {
        let provider = self.pool.provider();
        let id = &self.held()?.sandbox().id;
        Ok(JournaledSandbox { provider: provider.name().to_owned(), id: id.to_string(), host: provider.host_of(id) })
    }

    async fn announce(&self, held: &Held) -> Result<(), PipelineError> {
        let sandbox = held.sandbox();
        let stream_url = self.live.as_ref().map(|_| stream_url(self.task.task_id()));
        let provider = self.pool.provider();
        let record = serde_json::json!({
            "provider": provider.name(), "id": sandbox.id.as_str(), "host": provider.host_of(&sandbox.id), "stream_url": stream_url
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

    /// Hands a screenshot captured some other way (a browser's viewport)
    /// to the store, as [`Session::observe`] does its own.
    pub async fn store_screenshot(&self, shot: &Screenshot) -> Result<(), PipelineError> {
        if let Some(log) = &self.screenshots {
            log.steps.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(self.steps.taken());
            let png = shot.png.clone();
            self.guard(async { log.uploader.enqueue(png).await.map_err(upload_failure) }).await?;
        }
        Ok(())
    }

    /// As [`Session::observe`], with how the screen settled.
    pub async fn observe_settled(&self) -> Result<Settled, PipelineError> {
        let settled = self.guard(self.settled_screen()).await?;
        self.store_screenshot(&settled.shot).await?;
        Ok(settled)
    }

    /// The screen once programs have caught up with the last action, by
    /// [`SETTLE`]: at least its first wait after it, once the screen has not
    /// changed for its poll time, or after its longest wait for a screen
    /// that never stops changing. A provider that settles where the sandbox
    /// lives answers in one call; one that reports its screen's changes is
    /// captured once, when they have stopped; any other is captured every
    /// poll time until two captures match.
    async fn settled_screen(&self) -> Result<Settled, PipelineError> {
        let id = &self.held()?.sandbox().id;
        let provider = self.pool.provider();
        let started = Instant::now();
        if let Some(settled) = provider.settled_screenshot(id, SETTLE).await.map_err(PipelineError::from)? {
            return Ok(Settled { shot: settled.shot, waited: settled.waited, captures: 1 });
        }
        if let Some(quiet) = quiet_screen(provider.as_ref(), id, started, SETTLE).await {
            let shot = provider.screenshot(id).await.map_err(PipelineError::from)?;
            return Ok(Settled { shot, waited: quiet - started, captures: 1 });
        }
        let deadline = started + SETTLE.max;
        let mut waited = SETTLE.first;
        tokio::time::sleep(SETTLE.first).await;
        let mut shot = provider.screenshot(id).await.map_err(PipelineError::from)?;
        let mut captures = 1;
        while Instant::now() < deadline {
            tokio::time::sleep(SETTLE.poll).await;
            waited += SETTLE.poll;
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
    pub async fn close<T>(self, result: Result<T, PipelineError>) -> Result<T, PipelineError> {
        self.close_journaled(result).await.0
    }

    /// [`Session::close`], saying also whether the next attempt takes the
    /// task up in this sandbox from its journal (see
    /// [`Session::carries_over`]); when it does not, the journal is the
    /// caller's to drop.
    pub async fn close_journaled<T>(mut self, result: Result<T, PipelineError>) -> (Result<T, PipelineError>, bool) {
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
        let parked = matches!(result, Err(PipelineError::Parked));
        if let Some(mut clock) = self.steps.sandbox_clock.take().filter(|_| !parked) {
            if let Err(e) = self.task.add_usage(&[clock.lap()]).await {
                warn!(error = %e, "could not count the last of the sandbox's time");
            }
        }
        drop(self.live.take());
        let keeper = self.steps.keeper.take();
        let expires_at = keeper.as_ref().map(|keeper| keeper.expires_at());
        let gone = keeper.as_ref().is_some_and(|keeper| keeper.is_gone());
        let carried_over = self.carries_over(&result, gone || self.found_gone(&result).await);
        if let Some(held) = self.held.take() {
            held.settle(&self.pool, &result, expires_at, gone, carried_over, Claimant { task: &self.task }).await;
        }
        (result, carried_over)
    }

    /// Whether a journaled run that failed in a way worth retrying finds
    /// its sandbox ended from outside, though its keeper has not seen it
    /// yet (an action found it gone first): its retry then starts clean in
    /// a new sandbox rather than looking for this one.
    async fn found_gone<T>(&self, result: &Result<T, PipelineError>) -> bool {
        if !self.steps.is_journaled() || !matches!(result, Err(PipelineError::Retryable(_))) {
            return false;
        }
        let Some(held) = self.held.as_ref() else { return false };
        let (provider, id) = held.provider_and_id(&self.pool);
        matches!(provider.status(id).await, Err(SandboxError::NotFound(_) | SandboxError::Expired(_)))
    }

    /// Whether the next attempt takes the task up in this sandbox from its
    /// journal once this one ends with `result`: a journaled run handed
    /// back by a stopping worker, taken over by another attempt or parked
    /// waiting for a person (its sandbox paused, see [`parking`]), or one
    /// that failed in a way worth retrying while its sandbox lives (not
    /// `gone`) and the task has attempts left. Any other end starts over.
    pub(crate) fn carries_over<T>(&self, result: &Result<T, PipelineError>, gone: bool) -> bool {
        if !self.steps.is_journaled() {
            return false;
        }
        match result {
            Err(PipelineError::HandedBack | PipelineError::Fenced | PipelineError::Parked) => true,
            Err(PipelineError::Retryable(_)) => !gone && self.task.attempt_number() < self.task.spec().max_attempts(),
            // Waiting for its tenant's next day, paused where it can be.
            Err(PipelineError::DayTokensSpent { .. }) => !gone && self.pool.provider().can_pause(),
            _ => false,
        }
    }
}

/// The worker's sandbox pool, or why the task cannot run here.
fn sandbox_pool(run: &TaskRun) -> Result<SandboxPool, PipelineError> {
    run.tools.sandboxes.clone().ok_or_else(|| PipelineError::Fatal {
        code: StopCode::Problem,
        message: "this task needs a sandbox, and this worker has no sandbox provider (set FLOTILLA_SANDBOX_PROVIDER)".into(),
    })
}

/// How the sandbox is kept alive (each extension `stretch` long, until the
/// task's deadline), and the latest the task may keep it.
fn keep_alive_policy(stretch: Duration, steps: &Steps) -> (KeepAlivePolicy, time::OffsetDateTime) {
    let policy = KeepAlivePolicy { stretch, until: steps.limits.deadline };
    let runs_until = time::OffsetDateTime::now_utc() + (policy.until + policy.margin()).saturating_duration_since(Instant::now());
    (policy, runs_until)
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

/// Screenshots that could not be stored: retried while the store may come
/// back, fatal when it refused for good.
fn upload_failure(error: UploadError) -> PipelineError {
    if error.is_retryable() {
        PipelineError::Retryable(error.to_string())
    } else {
        PipelineError::Fatal { code: StopCode::Problem, message: error.to_string() }
    }
}
