//! A task's evaluation on its sandbox: the `setup` that puts the sandbox
//! into a known state once the session holds it and before the agent's
//! first step or model call, and the `check` that judges the sandbox once
//! the agent has stopped, before the session gives the sandbox back.
//!
//! Both run through the sandbox provider's own calls (files written,
//! commands run with bash in the home directory, on the desktop's
//! display), so they work the same on a local desktop and on E2B. Their
//! commands see `FLOTILLA_TASK_ID` and `FLOTILLA_RUN` (the run's number in
//! its batch's plan, 1 outside one); a check also sees `FLOTILLA_OUTCOME`,
//! how the agent stopped (`done`, or the stop code it failed with: an
//! agent that declines an infeasible task ends otherwise than `done`). A set-up that fails records verdict
//! `error` (stage `setup`) and ends the task with code `problem`; a check
//! records its verdict, score and reason with a `checked` event and never
//! changes how the task ended. A check's actions go to the desktop as a
//! scripted task's do, without `action` events: they are the judge's, not
//! the agent's.

use std::sync::Arc;

use flotilla_types::eval::{judge, CheckStage, Judgement, TaskCheck, TaskSetup, Verdict};
use flotilla_types::event::EventKind;
use flotilla_types::task::StopCode;
use tracing::{info, warn};

use super::{PipelineError, Session};
use crate::sandbox::{SandboxError, SandboxId, SandboxProvider};

impl Session {
    /// Runs the task's `setup`, if it has one: files first, then commands
    /// in order, each under the session's guard.
    pub(super) async fn set_up(&self) -> Result<(), PipelineError> {
        let Some(setup) = self.task.spec().setup.clone() else { return Ok(()) };
        let (provider, id) = self.sandbox()?;
        let (provider, id) = (Arc::clone(provider), id.clone());
        match self.guard(run_setup(provider.as_ref(), &id, &setup, &self.env_prefix())).await? {
            Ok(()) => Ok(()),
            Err(reason) => {
                info!(%reason, "the task's set-up failed");
                self.record(&Judgement::error(reason.clone()), CheckStage::Setup).await;
                Err(PipelineError::Fatal { code: StopCode::Problem, message: format!("setup failed: {reason}") })
            }
        }
    }

    /// Runs the task's `check`, if it has one and the agent stopped on its
    /// own (succeeded or failed, not cancelled, handed back or fenced), and
    /// records its verdict. A cancel stops the check; nothing is recorded.
    pub(super) async fn check<T>(&self, result: &Result<T, PipelineError>) {
        let Some(check) = self.task.spec().check.clone() else { return };
        if !matches!(result, Ok(_) | Err(PipelineError::Fatal { .. } | PipelineError::Refused(_))) {
            return;
        }
        let Ok((provider, id)) = self.sandbox() else { return };
        let outcome = match result {
            Ok(_) => StopCode::Done,
            Err(PipelineError::Fatal { code, .. }) => *code,
            Err(_) => StopCode::Problem,
        };
        let env = format!("{}export FLOTILLA_OUTCOME={}\n", self.env_prefix(), outcome.as_str());
        let (provider, id) = (Arc::clone(provider), id.clone());
        let judged = tokio::select! {
            judged = run_check(provider.as_ref(), &id, &check, &env) => judged,
            () = self.steps.cancel.cancelled() => return,
        };
        self.record(&judged, CheckStage::Check).await;
    }

    /// The `checked` event, setting the record's `verdict`, `score` and
    /// `reason` in the same write.
    async fn record(&self, judged: &Judgement, stage: CheckStage) {
        let mut fields = vec![("verdict", judged.verdict.as_str().to_owned()), ("check_stage", stage.as_str().to_owned())];
        fields.extend(judged.score.map(|score| ("score", score.to_string())));
        if !judged.reason.is_empty() {
            fields.push(("reason", judged.reason.clone()));
        }
        let event = EventKind::Checked { verdict: judged.verdict, score: judged.score, reason: judged.reason.clone(), stage };
        if let Err(e) = self.task.emit(event, &fields).await {
            warn!(error = %e, "could not record the task's verdict");
        }
    }

    /// The variables the set-up and check commands see, as a bash prefix.
    fn env_prefix(&self) -> String {
        let run = self.task.run_place().map_or(1, |place| place.run);
        format!("export FLOTILLA_TASK_ID={} FLOTILLA_RUN={run}\n", self.task.task_id())
    }
}

/// Places the set-up's files and runs its commands; `Err` with the reason
/// when one could not be placed or exited non-zero. A sandbox that fails
/// under it is the pipeline's error, as for any step.
async fn run_setup(
    provider: &dyn SandboxProvider,
    id: &SandboxId,
    setup: &TaskSetup,
    env: &str,
) -> Result<Result<(), String>, PipelineError> {
    for (path, text) in setup.files.iter().flatten() {
        if let Err(e) = provider.write_file(id, path, text.as_bytes()).await {
            return match e {
                SandboxError::InvalidRequest(_) | SandboxError::File { .. } => Ok(Err(format!("could not write {path}: {e}"))),
                other => Err(PipelineError::from(other)),
            };
        }
    }
    for (i, command) in setup.commands.iter().flatten().enumerate() {
        let output = match provider.run(id, &format!("{env}{command}"), setup.timeout()).await {
            Ok(output) => output,
            Err(SandboxError::Timeout(_)) => return Ok(Err(format!("command {i} ran past its timeout_s"))),
            Err(e) => return Err(PipelineError::from(e)),
        };
        if !output.success() {
            let tail = output.stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_owned();
            return Ok(Err(format!("command {i} exited {}: {tail}", output.exit_code)));
        }
    }
    Ok(Ok(()))
}

/// Runs the check's actions, then its command, and reads its verdict; a
/// check that could not run is an `error`, and a check of actions alone
/// passes once they all ran.
async fn run_check(provider: &dyn SandboxProvider, id: &SandboxId, check: &TaskCheck, env: &str) -> Judgement {
    let actions = check.actions.as_deref().unwrap_or_default();
    for (i, action) in actions.iter().enumerate() {
        if let Err(e) = provider.act(id, action).await {
            return Judgement::error(format!("the check's action {i} ({}) could not run: {e}", action.kind()));
        }
    }
    let Some(command) = &check.command else {
        let noun = if actions.len() == 1 { "action" } else { "actions" };
        return Judgement { verdict: Verdict::Passed, score: None, reason: format!("the check's {} {noun} ran", actions.len()) };
    };
    match provider.run(id, &format!("{env}{command}"), check.timeout()).await {
        Ok(output) => judge(output.exit_code, &output.stdout, &output.stderr),
        Err(SandboxError::Timeout(_)) => Judgement::error("the check ran past its timeout_s"),
        Err(e) => Judgement::error(format!("the check could not run: {e}")),
    }
}
