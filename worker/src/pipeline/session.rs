//! A task's time on a screen: the sandbox it holds, the screenshots it
//! takes and the actions it performs, with the events and limits that go
//! with each. Every pipeline that needs a desktop acts through a
//! [`Session`], so `sandbox_ready`, `action`, `action_completed` and
//! `screenshot` events, `max_steps`, `max_duration_s` and cancellation work
//! the same for all of them.
//!
//! Screenshots go to the [`Uploader`] the moment they are taken and the loop
//! goes on; a background feed emits each `screenshot` event once its image
//! is stored, in step order. Closing a session that succeeded waits until
//! every screenshot is stored, so no task ends `succeeded` pointing at an
//! image the store does not have.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_shared::action::Action;
use flotilla_shared::blobstore::{BlobStore, Uploader, UploaderOptions, UploadError};
use flotilla_shared::event::EventKind;
use flotilla_shared::queue::Attempt;
use flotilla_shared::task::{HumanInput, SandboxSpec, StopCode};
use flotilla_shared::QueueError;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::{PipelineError, TaskRun};
use crate::sandbox::{Lease, SandboxError, SandboxPool, SandboxRequest, Screenshot};

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
        let spec = &run.attempt.spec;
        let duration = spec.max_duration_s.map_or(DEFAULT_MAX_DURATION, Duration::from_secs);
        Self { max_steps: spec.max_steps.unwrap_or(DEFAULT_MAX_STEPS), deadline: Instant::now() + duration }
    }
}

/// A task's steps: counted against its limits, each announced with an
/// `action` event before and an `action_completed` event after.
pub struct Steps {
    attempt: Arc<Attempt>,
    cancel: CancellationToken,
    limits: Limits,
    taken: u32,
}

impl Steps {
    pub fn new(run: &TaskRun) -> Self {
        Self { attempt: Arc::clone(&run.attempt), cancel: run.cancel.clone(), limits: Limits::of(run), taken: 0 }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn taken(&self) -> u32 {
        self.taken
    }

    /// Runs `work` unless the task is cancelled or out of time first.
    pub async fn guard<T>(&self, work: impl Future<Output = Result<T, PipelineError>>) -> Result<T, PipelineError> {
        tokio::select! {
            result = work => result,
            () = self.cancel.cancelled() => Err(PipelineError::Cancelled),
            () = tokio::time::sleep_until(self.limits.deadline.into()) => Err(PipelineError::Fatal {
                code: StopCode::Problem,
                message: "the task reached its max_duration_s".into(),
            }),
        }
    }

    /// The attempt the steps belong to, for events of its own.
    pub fn attempt(&self) -> &Arc<Attempt> {
        &self.attempt
    }

    /// Puts the task in `waiting` with `code` and waits, under the guard,
    /// until a human answers through the API.
    pub async fn wait_for_human(&self, code: StopCode, message: &str) -> Result<HumanInput, PipelineError> {
        self.attempt.wait_for_human(code, message).await?;
        self.guard(async {
            loop {
                match self.attempt.take_input().await {
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

    /// Takes one step: checks `max_steps`, emits `action`, runs `perform`
    /// under the guard, and emits `action_completed` with the step count.
    pub async fn take(&mut self, action: &Action, perform: impl Future<Output = Result<(), PipelineError>>) -> Result<(), PipelineError> {
        if self.taken >= self.limits.max_steps {
            return Err(PipelineError::Fatal {
                code: StopCode::Problem,
                message: format!("the task reached its max_steps ({})", self.limits.max_steps),
            });
        }
        self.attempt.emit(EventKind::Action { action: action.clone() }, &[]).await?;
        let started = Instant::now();
        self.guard(perform).await?;
        self.taken += 1;
        let done = EventKind::ActionCompleted { action: action.clone(), ms: started.elapsed().as_millis() as u64 };
        self.attempt.emit(done, &[("steps_taken", self.taken.to_string())]).await?;
        Ok(())
    }
}

/// A task holding a sandbox.
pub struct Session {
    attempt: Arc<Attempt>,
    pool: SandboxPool,
    lease: Option<Lease>,
    screenshots: Option<ScreenshotLog>,
    steps: Steps,
}

/// The task's screenshots on their way to the store, and the feed that
/// turns each stored one into a `screenshot` event.
struct ScreenshotLog {
    uploader: Uploader,
    events: JoinHandle<()>,
}

impl Session {
    /// Takes a sandbox for the task (a warm one when its shape allows),
    /// announces it with `sandbox_ready`, and records it on the task.
    pub async fn open(run: &TaskRun) -> Result<Self, PipelineError> {
        let Some(pool) = run.tools.sandboxes.clone() else {
            return Err(PipelineError::Fatal {
                code: StopCode::Problem,
                message: "this task needs a sandbox, and this worker has no sandbox provider (set FLOTILLA_SANDBOX_PROVIDER)".into(),
            });
        };
        let steps = Steps::new(run);
        let request = sandbox_request(run.attempt.spec.sandbox.as_ref(), pool.provider().name())?;
        let lease = steps.guard(async { pool.acquire(&request, &run.cancel).await.map_err(sandbox_failure) }).await?;
        let mut session = Self {
            attempt: Arc::clone(&run.attempt),
            pool,
            lease: None,
            screenshots: run.tools.blobs.as_ref().map(|store| ScreenshotLog::start(store, &run.tools.uploads, &run.attempt)),
            steps,
        };
        let announced = session.announce(&lease).await;
        session.lease = Some(lease);
        announced.map(|()| session)
    }

    async fn announce(&self, lease: &Lease) -> Result<(), PipelineError> {
        let sandbox = &lease.sandbox;
        let record = serde_json::json!({ "provider": self.pool.provider().name(), "id": sandbox.id.as_str(), "stream_url": null });
        let ready = EventKind::SandboxReady {
            sandbox_id: sandbox.id.to_string(),
            stream_url: None,
            warm: lease.warm,
            ms: lease.waited.as_millis() as u64,
        };
        self.attempt.emit(ready, &[("sandbox", record.to_string())]).await?;
        Ok(())
    }

    /// The screen size of the sandbox.
    pub fn resolution(&self) -> (u32, u32) {
        self.lease.as_ref().map_or((0, 0), |l| l.sandbox.resolution)
    }

    /// The task's step count and limits.
    pub fn steps(&self) -> &Steps {
        &self.steps
    }

    /// Runs `work` unless the task is cancelled or out of time first.
    pub async fn guard<T>(&self, work: impl Future<Output = Result<T, PipelineError>>) -> Result<T, PipelineError> {
        self.steps.guard(work).await
    }

    /// Captures the screen and hands it to the store; returns the capture.
    pub async fn observe(&self) -> Result<Screenshot, PipelineError> {
        let id = &self.lease()?.sandbox.id;
        let shot = self.guard(async { self.pool.provider().screenshot(id).await.map_err(sandbox_failure) }).await?;
        if let Some(log) = &self.screenshots {
            let png = shot.png.clone();
            self.guard(async { log.uploader.enqueue(png).await.map_err(upload_failure) }).await?;
        }
        Ok(shot)
    }

    /// Performs one action on the sandbox as a step.
    pub async fn act(&mut self, action: &Action) -> Result<(), PipelineError> {
        let id = self.lease()?.sandbox.id.clone();
        let provider = Arc::clone(self.pool.provider());
        self.steps.take(action, async { provider.act(&id, action).await.map_err(sandbox_failure) }).await
    }

    /// The sandbox's provider and id, for pipelines that run commands or
    /// move files in it.
    pub fn sandbox(&self) -> Result<(&Arc<dyn crate::sandbox::SandboxProvider>, &crate::sandbox::SandboxId), PipelineError> {
        Ok((self.pool.provider(), &self.lease()?.sandbox.id))
    }

    fn lease(&self) -> Result<&Lease, PipelineError> {
        self.lease.as_ref().ok_or_else(|| PipelineError::Retryable("the session has no sandbox".into()))
    }

    /// Ends the session. When `result` is a success, first waits until every
    /// screenshot is stored and its event emitted; a screenshot that cannot
    /// be stored turns the success into an error. The sandbox is released in
    /// every case.
    pub async fn close<T>(mut self, result: Result<T, PipelineError>) -> Result<T, PipelineError> {
        let result = match (result, self.screenshots.take()) {
            (Ok(value), Some(log)) => log.finish().await.map(|()| value),
            (result, Some(log)) => {
                log.abandon();
                result
            }
            (result, None) => result,
        };
        if let Some(lease) = self.lease.take() {
            self.pool.release(lease).await;
        }
        result
    }
}

/// A session dropped without `close` (its task was cancelled or taken over
/// mid-step) still gives its sandbox back, in the background.
impl Drop for Session {
    fn drop(&mut self) {
        if let Some(log) = self.screenshots.take() {
            log.abandon();
        }
        if let Some(lease) = self.lease.take() {
            let pool = self.pool.clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move { pool.release(lease).await });
            }
        }
    }
}

impl ScreenshotLog {
    fn start(store: &BlobStore, options: &UploaderOptions, attempt: &Arc<Attempt>) -> Self {
        let uploader = Uploader::spawn(store.clone(), options.clone());
        let mut feed = uploader.feed();
        let attempt = Arc::clone(attempt);
        let events = tokio::spawn(async move {
            while let Some((_, image)) = feed.next().await {
                let event = EventKind::Screenshot { hash: image.hash, key: image.key, bytes: image.bytes, dedup: image.dedup };
                if let Err(e) = attempt.emit(event, &[]).await {
                    warn!(error = %e, "could not record a stored screenshot");
                    return;
                }
            }
        });
        Self { uploader, events }
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

/// What the task's `sandbox` field asks for, checked against this worker's
/// provider.
fn sandbox_request(spec: Option<&SandboxSpec>, provider: &str) -> Result<SandboxRequest, PipelineError> {
    let mut request = SandboxRequest::default();
    let Some(spec) = spec else {
        return Ok(request);
    };
    if let Some(kind) = spec.provider {
        let wanted = serde_json::to_value(kind).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
        if wanted != provider {
            return Err(PipelineError::Fatal {
                code: StopCode::Problem,
                message: format!("the task asks for a {wanted} sandbox and this worker provides {provider}"),
            });
        }
    }
    if spec.id.is_some() {
        return Err(PipelineError::Fatal {
            code: StopCode::Problem,
            message: "running in an existing sandbox (sandbox.id) is not supported by this worker".into(),
        });
    }
    request.template.clone_from(&spec.template);
    if let Some([w, h]) = spec.resolution {
        request.resolution = (w, h);
    }
    if let Some(seconds) = spec.timeout_s {
        request.timeout = Duration::from_secs(seconds);
    }
    Ok(request)
}

/// A sandbox fault as the attempt's outcome: a bad action is the task's
/// fault; a gone or failing sandbox is worth another attempt on a new one.
pub(crate) fn sandbox_failure(error: SandboxError) -> PipelineError {
    match error {
        SandboxError::InvalidAction(_) => PipelineError::Refused(error.to_string()),
        SandboxError::InvalidRequest(_) | SandboxError::Unauthorized(_) => {
            PipelineError::Fatal { code: StopCode::Problem, message: error.to_string() }
        }
        other => PipelineError::Retryable(other.to_string()),
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
