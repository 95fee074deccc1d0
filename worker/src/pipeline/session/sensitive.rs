//! Sensitive actions, cleared as the task's `sensitive_actions` says:
//! `allow` goes on, `deny` fails the task with code `sensitive-action`, and
//! `pause` (the default) puts it in `waiting` with that code until a person
//! approves (it goes on) or denies (it fails). One gate for every pipeline:
//! a model's safety checks and a script's `confirm` steps.

use flotilla_types::task::{Decision, SensitiveActions, StopCode};

use super::super::error::PipelineError;
use super::Steps;

impl Steps {
    /// Clears the sensitive action `what`, which `asker` wants to take (for
    /// the error a refusal gives, e.g. "the model asked to go past a safety
    /// check").
    pub async fn clear_sensitive(&self, asker: &str, what: &str) -> Result<(), PipelineError> {
        let refused = |message: String| PipelineError::Fatal { code: StopCode::SensitiveAction, message };
        match self.task.spec().sensitive_actions.unwrap_or_default() {
            SensitiveActions::Allow => Ok(()),
            SensitiveActions::Deny => Err(refused(format!("{asker} and the task denies that: {what}"))),
            SensitiveActions::Pause => {
                let input = self.wait_for_human(StopCode::SensitiveAction, &format!("approve or deny: {what}")).await?;
                match input.decision {
                    Decision::Approve => Ok(()),
                    Decision::Deny => {
                        Err(refused(format!("a human denied the action: {}", input.message.unwrap_or_else(|| what.to_owned()))))
                    }
                }
            }
        }
    }
}
