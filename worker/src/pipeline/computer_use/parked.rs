//! Taking up a task that was parked waiting for a person (see
//! [`session::parking`](super::super::session)): the attempt that the
//! answer woke has reconnected to (and so resumed) the paused sandbox; it
//! waits again where the parked one waited, takes the answer at once, and
//! goes on from the step it waited at. Approved safety checks let the
//! journaled turn's calls run, none of which had started; an `ask_human`
//! answer goes back to the model as that call's result; an approval after
//! an interruption goes on as a resume does. A denial ends the task as it
//! would have without the park.

use flotilla_types::task::{Decision, StopCode};

use super::super::journal::{Journal, WaitKind};
use super::super::session::sensitive_answer;
use super::super::{PipelineError, Session, TaskRun};
use super::ask_answer;
use crate::model::{CallResult, ModelAction, SafetyCheck, ToolCall, Turn};

/// What a person answered a parked task.
pub(in crate::pipeline) enum Answer {
    /// The journaled turn's safety checks are approved: its calls run.
    Approved(Vec<SafetyCheck>),
    /// The answer to the `ask_human` call `call`.
    Asked { call: String, text: String },
    /// Go on after an interruption, as a resume does.
    GoOn,
}

/// Waits where the parked attempt waited and takes the answer; the
/// journal's wait is dropped once it is taken. `None` when the task was
/// not parked.
pub(super) async fn take_answer(
    session: &Session,
    run: &TaskRun,
    journal: &mut Journal,
) -> Result<Option<Answer>, PipelineError> {
    let Some(wait) = journal.wait.clone() else { return Ok(None) };
    let input = session.steps().rejoin_wait(&wait).await?;
    journal.wait = None;
    super::super::journal::store(run.task.as_ref(), journal).await?;
    let answer = match wait.kind {
        WaitKind::Sensitive { checks } => {
            sensitive_answer(input, &wait.message)?;
            let checks = checks.into_iter().map(|c| SafetyCheck { id: c.id, code: c.code, message: c.message }).collect();
            Answer::Approved(checks)
        }
        WaitKind::Ask { call } => Answer::Asked { call, text: ask_answer(input, &wait.message)? },
        WaitKind::Interrupted => match input.decision {
            Decision::Approve => Answer::GoOn,
            Decision::Deny => {
                return Err(PipelineError::Fatal {
                    code: StopCode::HumanIntervention,
                    message: format!(
                        "a human declined to go on: {}",
                        input.message.unwrap_or_else(|| "a person chose not to go on after the interruption".into())
                    ),
                })
            }
        },
    };
    Ok(Some(answer))
}

/// The journaled turn whose safety checks a person approved, to carry out
/// as the model asked; `None` when a call's actions were not journaled
/// (not screen actions only).
pub(super) fn approved_turn(journal: &Journal, checks: &[SafetyCheck]) -> Option<Turn> {
    let calls = journal
        .calls
        .iter()
        .map(|call| {
            let actions = call.actions.clone()?;
            Some(ToolCall { id: call.id.clone(), actions: actions.into_iter().map(ModelAction::Act).collect() })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Turn { calls, safety_checks: checks.to_vec(), ..Turn::default() })
}

/// The journaled turn's `results` with `text` as the answer of its
/// `ask_human` call `call`.
pub(super) fn answer_call(mut results: Vec<CallResult>, call: &str, text: &str) -> Vec<CallResult> {
    if let Some(asked) = results.iter_mut().find(|r| r.call_id == call) {
        asked.text = Some(text.to_owned());
        asked.is_error = false;
    }
    results
}
