//! The claude-code pipeline: the real `claude` CLI, headless, in the task's
//! sandbox.
//!
//! A task takes a sandbox, gets its input files written into a work
//! directory there, and runs `claude -p --output-format stream-json` in it.
//! Every output line becomes a `block` event while the CLI runs (on
//! providers that cannot stream a command's output, all of them in order
//! once it ends). The final `result` line decides the outcome: its
//! `is_error` fails the task with the CLI's own message. Files the CLI
//! wrote in the work directory (new or changed) are stored as the task's
//! artifacts, and its session transcript as the task's session files, so a
//! later task with `continue_task` can resume the session in a new sandbox.
//!
//! While the CLI runs, each file it writes, edits or deletes is stored and
//! reported as a `file` event as it happens ([`live`]).
//!
//! The sandbox never sees the fleet's model key: the CLI calls the worker's
//! model gateway with a token that is valid only while this task runs
//! (granted for a short lifetime, refreshed until the CLI ends, revoked
//! then). On the gateway's TLS listener the token is bound to a client
//! certificate written into the sandbox with it ([`gateway_tls`]).
//! Cancellation and `max_duration_s` stop the CLI through the session's
//! guard, which kills it with its sandbox.
//!
//! A run is journaled: a task whose worker is killed or stopped mid-run is
//! taken up in the same sandbox by the next attempt, which resumes the
//! CLI's session there ([`durable`]); a stopping worker hands its running
//! CLI tasks back at once.
//!
//! Each model call the CLI makes is counted on the task as the gateway
//! reports it (tokens in and out, per model), and held against the task's
//! `budget`: the call that crosses it ends the task `failed` with code
//! `budget`, the CLI stopped with its sandbox; the gateway refuses the
//! token any call past the budget meanwhile.

mod cli;
mod durable;
mod gateway_tls;
mod live;
mod resume;
mod workdir;

use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_blobstore::BlobStore;
use flotilla_types::task::StopCode;
use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use self::cli::{Finished, Invocation};
use self::live::LiveFiles;
use self::resume::Earlier;
use self::workdir::{Sandbox, WORK_DIR};
use super::computer_use::close_journaled;
use super::computer_use::resume as take_up;
use super::journal::Journal;
use super::pricing::Pricing;
use super::{Outcome, PipelineError, PipelineRunner, Session, Steps, TaskRun};
use crate::gateway::{CallReports, GrantLimits, ModelGateway, TaskToken};
use crate::sandbox::GatewayBridge;

/// How much longer than the task's time a gateway token stays valid, so
/// that the task's own limit, not the token, is what stops it.
pub(super) const TOKEN_GRACE: Duration = Duration::from_secs(60);

/// Runs the `claude` CLI on the task's prompt.
pub struct ClaudeCode;

impl PipelineRunner for ClaudeCode {
    fn run<'a>(&'a self, run: &'a TaskRun) -> BoxFuture<'a, Result<Outcome, PipelineError>> {
        async move {
            let (gateway, blobs) = requirements(run)?;
            let earlier = match &run.task.spec().continue_task {
                Some(id) => Some(resume::earlier(run.task.as_ref(), id).await?),
                None => None,
            };
            let steps = Steps::new(run);
            let start = match take_up::journal_of(run).await?.filter(|journal| journal.cli.is_some()) {
                Some(journal) => take_up::start(run, steps, journal).await?,
                None => take_up::Start::Fresh(steps),
            };
            let (mut session, journal) = match start {
                // The only wait of its take-up that parks is the one after an
                // interruption, whose approval just goes on.
                take_up::Start::Resumed(session, journal, _) => (*session, Some(journal)),
                take_up::Start::Fresh(steps) => (Session::open_with(run, steps, run.task.spec().sandbox.as_ref()).await?, None),
            };
            let result = run_in_sandbox(run, &mut session, gateway, blobs, earlier.as_ref(), journal).await;
            close_journaled(run, session, result).await.map(Outcome::Succeeded)
        }
        .boxed()
    }
}

/// The gateway and the store this pipeline cannot work without.
fn requirements(run: &TaskRun) -> Result<(&ModelGateway, &BlobStore), PipelineError> {
    let missing = |message: &str| PipelineError::Fatal { code: StopCode::Problem, message: message.to_owned() };
    let gateway = run
        .tools
        .gateway
        .as_ref()
        .ok_or_else(|| missing("claude-code tasks need a model key on the worker (set ANTHROPIC_API_KEY)"))?;
    let blobs = run
        .tools
        .blobs
        .as_ref()
        .ok_or_else(|| missing("claude-code tasks keep their files in the blob store (set FLOTILLA_S3_BUCKET)"))?;
    Ok((gateway, blobs))
}

/// Everything from the work directory to the stored artifacts.
async fn run_in_sandbox(
    run: &TaskRun,
    session: &mut Session,
    gateway: &ModelGateway,
    blobs: &BlobStore,
    earlier: Option<&Earlier>,
    journal: Option<Journal>,
) -> Result<Value, PipelineError> {
    let (provider, id) = session.sandbox()?;
    let (provider, id) = (Arc::clone(provider), id.clone());
    let sandbox = Sandbox { provider: &provider, id: &id };
    let task = run.task.as_ref();
    let spec = task.spec();
    let cwd = session.guard(workdir::prepare(sandbox)).await?;
    let durable::CliStart { before, journaled, prompt, session_id, resume } =
        durable::prepare(run, session, sandbox, blobs, earlier, journal, &cwd).await?;
    if journaled {
        session.steps_mut().journaled(run.hand_back.clone());
    }
    session.guard(sandbox.write(cli::PROMPT_FILE, prompt.as_bytes())).await?;

    let deadline = session.steps().limits().deadline;
    let bridge = sandbox.provider.gateway_bridge(sandbox.id).await?;
    let mut token = grant(gateway, run, deadline, bridge.as_ref()).await?;
    session.guard(gateway_tls::install(sandbox, &token)).await?;
    let mut calls = token.calls();
    let invocation = Invocation {
        work_dir: WORK_DIR,
        model: spec.model.as_deref(),
        max_turns: spec.max_steps,
        resume: resume.then_some(session_id.as_str()),
        session_id: (!resume).then_some(session_id.as_str()),
        token: &token,
    };
    let mut live = LiveFiles::new(run, sandbox, blobs, before.clone());
    let stop = CancellationToken::new();
    let command = cli::command(&invocation);
    let cli = async {
        let finished = tokio::select! {
            finished = session.guard(run_cli(run, sandbox, &command, deadline)) => finished,
            crossed = count_calls(session, &run.tools.pricing, calls.as_mut()) => Err(crossed),
            // A stopping worker hands the task back at once, the CLI's
            // session journaled, its sandbox left running.
            () = run.hand_back.cancelled(), if journaled => Err(PipelineError::HandedBack),
        };
        stop.cancel();
        finished
    };
    let (finished, (), ()) =
        tokio::join!(cli, live.follow(&stop), live::keep_fresh(&token, gateway.token_ttl(), deadline, &stop));
    drop(token);
    let finished = finished?;
    if let Some(calls) = calls.as_mut() {
        while let Some(call) = calls.try_next() {
            session.steps().count(&[run.tools.pricing.tokens(&call.model, call.tokens)]).await?;
        }
    }

    let after = session.guard(workdir::snapshot(sandbox)).await?;
    let changed = workdir::changed(&before, &after);
    let (artifacts, skipped) = session.guard(workdir::store_artifacts(sandbox, blobs, task.task_id(), &changed)).await?;
    let saved = match &finished.session_id {
        Some(session_id) => Some(session.guard(resume::save(sandbox, blobs, task.task_id(), &cwd, session_id)).await?),
        None => None,
    };
    Ok(result_of(&finished, &artifacts, &skipped, saved.as_ref()))
}

/// A gateway token for the task, valid for the gateway's token lifetime
/// (refreshed while the CLI runs, see [`live::keep_fresh`]) and never a
/// little past its deadline, on the sandbox's own bridge when it has one,
/// for the task's model alone when it names one.
async fn grant(
    gateway: &ModelGateway,
    run: &TaskRun,
    deadline: Instant,
    bridge: Option<&GatewayBridge>,
) -> Result<TaskToken, PipelineError> {
    let ttl = gateway.token_ttl().min(deadline.saturating_duration_since(Instant::now()) + TOKEN_GRACE);
    let spec = run.task.spec();
    let limits = GrantLimits {
        models: spec.model.clone().map(|m| vec![m]),
        // Refused only once the budget is crossed (the call that crosses it is answered).
        max_tokens: spec.budget.and_then(|b| b.max_tokens).map(|max| max.saturating_add(1)),
        ..GrantLimits::default()
    };
    gateway.grant_with(run.task.task_id(), ttl, limits, bridge).await.map_err(|e| PipelineError::Retryable(e.to_string()))
}

/// Counts each model call on the task as the gateway reports it; returns
/// only when a count fails, crosses the task's budget or finds its tenant
/// past its tokens of today (the call that crossed was answered).
/// Each count is handed back to the gateway, which holds the next call
/// until then and refuses it once a count said stop.
async fn count_calls(session: &Session, pricing: &Pricing, calls: Option<&mut CallReports>) -> PipelineError {
    if let Some(calls) = calls {
        while let Some(call) = calls.next().await {
            let amount = pricing.tokens(&call.model, call.tokens);
            let counted = session.steps().count(&[amount]).await.and_then(|()| session.steps().between_steps());
            calls.counted(counted.is_err());
            if let Err(e) = counted {
                return e;
            }
        }
    }
    std::future::pending().await
}

/// Runs the CLI, relaying its output lines as `block` events as they come,
/// and judges how it ended.
async fn run_cli(run: &TaskRun, sandbox: Sandbox<'_>, command: &str, deadline: Instant) -> Result<Finished, PipelineError> {
    let timeout = deadline.saturating_duration_since(Instant::now());
    let (lines, received) = mpsc::unbounded_channel();
    let running =
        async { sandbox.provider.run_streaming(sandbox.id, command, timeout, lines).await.map_err(PipelineError::from) };
    let (output, stream) = tokio::try_join!(running, cli::relay_blocks(run.task.as_ref(), received))?;
    tracing::debug!(exit_code = output.exit_code, blocks = stream.blocks, "claude finished");
    cli::judge(&stream, &output)
}

/// The task's result: the CLI's answer, its session, the files it wrote.
fn result_of(
    finished: &Finished,
    artifacts: &[workdir::Artifact],
    skipped: &[workdir::Skipped],
    saved: Option<&resume::SavedSession>,
) -> Value {
    let line = &finished.result;
    let mut result = json!({
        "text": finished.text,
        "session_id": finished.session_id,
        "artifacts": artifacts,
        "session": saved,
        "num_turns": line.get("num_turns"),
        "duration_ms": line.get("duration_ms"),
        "total_cost_usd": line.get("total_cost_usd"),
        "usage": line.get("usage"),
    });
    if !skipped.is_empty() {
        result["artifacts_skipped"] = json!(skipped);
    }
    result
}
