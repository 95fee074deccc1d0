//! Taking a model-driven task up where an interrupted attempt stopped
//! (its worker was killed, restarted or redeployed, or the attempt failed
//! in a way worth retrying while its sandbox lived): the attempt reads the
//! task's step journal, and the task's `on_interrupt` decides.
//!
//! - `resume` (the default): reconnect to the same sandbox by id, announce
//!   `resumed`, and continue the conversation from its checkpoint with a
//!   fresh screenshot as the result of each call of the last turn. A call
//!   that was in flight is not run again: the model is told it may or may
//!   not have happened; one not yet started is not carried out and the
//!   model is told so. If the sandbox is gone, the task ends with code
//!   `problem` (starting over could repeat what the world already saw).
//! - `ask`: as `resume`, but when an action was in flight, or the sandbox
//!   is gone, the task waits (code `human-intervention`) for a person:
//!   approving goes on (or starts over in a new sandbox), denying ends it.
//! - `restart`: start over in a new sandbox, as a fresh attempt would, with
//!   a `retrying` event that says so.
//!
//! A journal without a conversation (the worker stopped before the first
//! turn was answered), or one that cannot be restored (a screenshot it
//! names is gone from the blob store), continues in the same sandbox with
//! a new conversation told how many actions were already taken.

use flotilla_types::event::EventKind;
use flotilla_types::task::{Decision, OnInterrupt, StopCode};
use tracing::info;

use super::super::journal::{CallState, Journal, Journaler, WaitKind};
use super::super::{PipelineError, Session, Steps, TaskRun};
use super::parked::{self, Answer};
use crate::model::{CallResult, ComputerModel, Screen};
use crate::sandbox::SandboxId;

/// What a model hears for a call that was in flight when the previous
/// attempt stopped.
pub(super) const MAY_HAVE_HAPPENED: &str = "The run was interrupted while this action was being carried out: it may or \
     may not have happened. The screenshot shows the screen as it is now; check it before going on.";

/// What a model hears for a call the previous attempt had not started.
pub(super) const NOT_STARTED: &str =
    "Not carried out: the run was interrupted before this action. The screenshot shows the screen as it is now.";

/// How a run begins.
pub(in crate::pipeline) enum Start {
    /// As a new attempt: a new sandbox and conversation.
    Fresh(Steps),
    /// In the interrupted (or parked) attempt's sandbox, from its journal,
    /// with the answer a parked task was woken by.
    Resumed(Box<Session>, Journal, Option<Answer>),
}

/// The journal an interrupted earlier attempt left, when there is one to
/// take up.
pub(in crate::pipeline) async fn journal_of(run: &TaskRun) -> Result<Option<Journal>, PipelineError> {
    if run.task.attempt_number() <= 1 {
        return Ok(None);
    }
    Ok(run.task.journal().await?.as_deref().and_then(Journal::parse))
}

/// Decides how a run with `journal` begins, by the task's `on_interrupt`;
/// a task parked waiting for a person is no interruption: it goes on in
/// its sandbox with the answer that woke it (see [`parked`](super::parked)).
pub(in crate::pipeline) async fn start(run: &TaskRun, steps: Steps, mut journal: Journal) -> Result<Start, PipelineError> {
    let policy = run.task.spec().on_interrupt.unwrap_or_default();
    let attempt = run.task.attempt_number();
    let sandbox = journal.sandbox.id.clone();
    let parked = journal.wait.is_some();
    if policy == OnInterrupt::Restart && !parked {
        end_old_sandbox(run, &sandbox).await;
        let error = format!("the previous attempt was interrupted; starting over in a new sandbox (on_interrupt: restart, the old one was {sandbox})");
        return restart(run, steps, attempt, error).await;
    }
    let id = SandboxId::parse(&sandbox).map_err(|e| PipelineError::Retryable(format!("the journaled sandbox id: {e}")))?;
    let host = journal.sandbox.host.clone();
    let Some(mut session) = Session::reopen(run, steps_again(run), &id, host.as_deref()).await? else {
        return sandbox_gone(run, steps, policy, attempt, &sandbox).await;
    };
    session.steps_mut().resume_from(journal.steps);
    // A worker's stop during a wait below hands the task back with this
    // sandbox kept, as at any later step.
    session.steps_mut().journaled(run.hand_back.clone());
    session.allow_parking(run);
    let interrupted = !parked && journal.interrupted();
    info!(sandbox = %sandbox, from_step = journal.steps, interrupted, parked, "taking the task up where it stopped");
    let resumed = EventKind::Resumed { attempt, from_step: journal.steps, sandbox_id: sandbox, interrupted };
    run.task.emit(resumed, &[]).await?;
    if parked {
        return match parked::take_answer(&session, run, &mut journal).await {
            Ok(answer) => Ok(Start::Resumed(Box::new(session), journal, answer)),
            Err(e) => session.close(Err(e)).await,
        };
    }
    if interrupted && policy == OnInterrupt::Ask {
        let question = "The run was interrupted while an action was being carried out: it may or may not have \
                        happened. Approve to go on from the screen as it is now, or deny to end the task.";
        let input = match session.steps().wait_parkable(StopCode::HumanIntervention, question, WaitKind::Interrupted).await {
            Ok(input) => input,
            Err(e) => return session.close(Err(e)).await,
        };
        if input.decision == Decision::Deny {
            let result = Err(denied(input.message, "a person chose not to go on after the interruption"));
            return session.close(result).await;
        }
    }
    Ok(Start::Resumed(Box::new(session), journal, None))
}

/// A second `Steps` for the reopened session: the first one stays with the
/// caller for the sandbox-gone path.
fn steps_again(run: &TaskRun) -> Steps {
    Steps::new(run)
}

/// The interrupted attempt's sandbox is gone.
async fn sandbox_gone(
    run: &TaskRun,
    steps: Steps,
    policy: OnInterrupt,
    attempt: u32,
    sandbox: &str,
) -> Result<Start, PipelineError> {
    let gone = format!("the sandbox {sandbox} the interrupted attempt ran in is gone");
    match policy {
        OnInterrupt::Ask => {
            let question = format!("{gone}. Approve to start over in a new sandbox, or deny to end the task.");
            let input = steps.wait_for_human(StopCode::HumanIntervention, &question).await?;
            match input.decision {
                Decision::Approve => restart(run, steps, attempt, format!("{gone}; starting over in a new sandbox")).await,
                Decision::Deny => Err(denied(input.message, &gone)),
            }
        }
        OnInterrupt::Resume | OnInterrupt::Restart => Err(PipelineError::Fatal {
            code: StopCode::Problem,
            message: format!("{gone}; on_interrupt resume does not start over (set restart to allow it)"),
        }),
    }
}

/// Ends the sandbox an interrupted attempt left running, when it is the
/// tenant's, before the task starts over elsewhere (best effort: what is
/// left ends at its deadline).
async fn end_old_sandbox(run: &TaskRun, sandbox: &str) {
    if run.task.spec().sandbox.as_ref().is_some_and(|s| s.id.is_some()) {
        return; // the user's own sandbox is never ended here
    }
    let (Some(pool), Ok(id)) = (run.tools.sandboxes.as_ref(), SandboxId::parse(sandbox)) else { return };
    let provider = pool.provider();
    if !run.task.owns_sandbox(provider.name(), &id).await.unwrap_or(false) {
        return;
    }
    if let Err(e) = provider.kill(&id).await {
        tracing::warn!(sandbox = %id, error = %e, "could not end the interrupted attempt's sandbox");
    }
    if let Err(e) = run.task.forget_sandbox_owner(provider.name(), &id).await {
        tracing::warn!(sandbox = %id, error = %e, "could not drop the owner record of the interrupted attempt's sandbox");
    }
}

/// Starts over: the journal goes, and a `retrying` event says why.
async fn restart(run: &TaskRun, steps: Steps, attempt: u32, error: String) -> Result<Start, PipelineError> {
    run.task.write_journal("").await?;
    run.task.emit(EventKind::Retrying { attempt, delay_ms: 0, error }, &[]).await?;
    Ok(Start::Fresh(steps))
}

fn denied(message: Option<String>, fallback: &str) -> PipelineError {
    PipelineError::Fatal {
        code: StopCode::HumanIntervention,
        message: format!("a human declined to go on: {}", message.unwrap_or_else(|| fallback.to_owned())),
    }
}

/// The journal whose conversation `model` has taken up, when the journal
/// holds one it can (screenshots fetched back from the blob store); `None`
/// when the model starts a new conversation instead (logged when one was
/// journaled but could not be restored).
pub(super) async fn restored<'j>(model: &mut dyn ComputerModel, journaler: &'j Journaler) -> Option<&'j Journal> {
    let checkpoint = journaler.conversation().await?;
    match model.restore(&checkpoint) {
        Ok(()) => Some(journaler.journal()),
        Err(e) => {
            tracing::warn!(error = %e, "the journaled conversation cannot be taken up; starting a new one in the same sandbox");
            None
        }
    }
}

/// The prompt of a new conversation in a sandbox where an interrupted
/// attempt already took `steps` actions, for a model whose conversation
/// could not be carried over: it is told to go on from the screen, not to
/// start over.
pub(super) fn without_history(prompt: &str, steps: u32) -> String {
    format!(
        "{prompt}\n\nThis task was interrupted after {steps} actions had been carried out on this computer, and the \
         conversation about them is lost. The screenshot shows where the task stands now: go on from there rather \
         than starting over, and do not repeat what is already done."
    )
}

/// The results of the journaled turn's calls, each with the screen as it
/// is now: a call done gets it plain, one in flight or not started gets it
/// with a note saying so.
pub(super) fn results_of(journal: &Journal, screen: &Screen) -> Vec<CallResult> {
    journal
        .calls
        .iter()
        .map(|call| {
            let (text, is_error) = match call.state {
                CallState::Done => (None, false),
                CallState::Intent => (Some(MAY_HAVE_HAPPENED.to_owned()), false),
                CallState::Pending => (Some(NOT_STARTED.to_owned()), true),
            };
            CallResult { call_id: call.id.clone(), screen: screen.clone(), text, is_error }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::journal::{JournaledCall, JournaledSandbox};

    #[test]
    fn a_call_in_flight_is_reported_as_uncertain_and_one_not_started_as_not_done() {
        let mut journal = Journal::new(JournaledSandbox { provider: "e2b".into(), id: "sb".into(), host: None });
        journal.calls = vec![
            JournaledCall { id: "a".into(), state: CallState::Done, actions: None },
            JournaledCall { id: "b".into(), state: CallState::Intent, actions: None },
            JournaledCall { id: "c".into(), state: CallState::Pending, actions: None },
        ];
        let screen = Screen { png: bytes::Bytes::from_static(b"png"), width: 2, height: 2 };
        let results = results_of(&journal, &screen);
        let seen: Vec<_> = results.iter().map(|r| (r.call_id.as_str(), r.text.as_deref(), r.is_error)).collect();
        assert_eq!(seen, vec![("a", None, false), ("b", Some(MAY_HAVE_HAPPENED), false), ("c", Some(NOT_STARTED), true)]);
        assert!(results.iter().all(|r| r.screen == screen), "every call gets the fresh screen");
    }
}
