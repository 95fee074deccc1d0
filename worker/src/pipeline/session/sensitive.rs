//! Sensitive actions, cleared as the task's `sensitive_actions` says:
//! `allow` goes on, `deny` fails the task with code `sensitive-action`, and
//! `pause` (the default) puts it in `waiting` with that code until a person
//! approves (it goes on) or denies (it fails). One gate for every pipeline:
//! a model's safety checks and a script's `confirm` steps.

use flotilla_types::task::{Decision, HumanInput, SensitiveActions, StopCode};

use super::super::error::PipelineError;
use super::super::journal::WaitKind;
use super::Steps;

impl Steps {
    /// Clears the sensitive action `what`, which `asker` wants to take (for
    /// the error a refusal gives, e.g. "the model asked to go past a safety
    /// check"). With `park`, a wait for a person may be parked as that
    /// (see [`super::parking`]).
    pub async fn clear_sensitive(&self, asker: &str, what: &str, park: Option<WaitKind>) -> Result<(), PipelineError> {
        match self.task.spec().sensitive_actions.unwrap_or_default() {
            SensitiveActions::Allow => Ok(()),
            SensitiveActions::Deny => Err(refused(format!("{asker} and the task denies that: {what}"))),
            SensitiveActions::Pause => {
                let message = format!("approve or deny: {what}");
                let input = match park {
                    Some(kind) => self.wait_parkable(StopCode::SensitiveAction, &message, kind).await?,
                    None => self.wait_for_human(StopCode::SensitiveAction, &message).await?,
                };
                sensitive_answer(input, what)
            }
        }
    }
}

/// A person's answer to a sensitive action `what`: approved goes on, denied
/// ends the task with code `sensitive-action`.
pub fn sensitive_answer(input: HumanInput, what: &str) -> Result<(), PipelineError> {
    match input.decision {
        Decision::Approve => Ok(()),
        Decision::Deny => {
            Err(refused(format!("a human denied the action: {}", input.message.unwrap_or_else(|| what.to_owned()))))
        }
    }
}

fn refused(message: String) -> PipelineError {
    PipelineError::Fatal { code: StopCode::SensitiveAction, message }
}
