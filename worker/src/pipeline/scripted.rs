//! The scripted pipeline: runs the task's own list of actions in order, with
//! an `action` and an `action_completed` event for each. Without a sandbox it
//! can run only `wait`; any other action ends the task with code `problem`.

use std::time::{Duration, Instant};

use flotilla_shared::action::Action;
use flotilla_shared::event::EventKind;
use flotilla_shared::task::StopCode;
use futures::future::BoxFuture;
use futures::FutureExt;

use super::{Outcome, Pipeline, PipelineError, TaskRun};

/// Runs a fixed list of actions.
pub struct Scripted;

impl Pipeline for Scripted {
    fn run<'a>(&'a self, run: &'a TaskRun) -> BoxFuture<'a, Result<Outcome, PipelineError>> {
        async move {
            let actions = run.attempt.spec.actions.clone().unwrap_or_default();
            if let Some(action) = actions.iter().find(|a| a.needs_sandbox()) {
                return Err(PipelineError::Fatal {
                    code: StopCode::Problem,
                    message: format!("action {:?} needs a sandbox, and this worker has no sandbox provider", action_name(action)),
                });
            }
            for (index, action) in actions.iter().enumerate() {
                run.attempt.emit(EventKind::Action { action: action.clone() }, &[]).await?;
                let started = Instant::now();
                perform(action, run).await?;
                let ms = started.elapsed().as_millis() as u64;
                let steps = (index + 1).to_string();
                run.attempt.emit(EventKind::ActionCompleted { action: action.clone(), ms }, &[("steps_taken", steps)]).await?;
            }
            Ok(Outcome::Succeeded(serde_json::json!({ "text": format!("ran {} actions", actions.len()) })))
        }
        .boxed()
    }
}

async fn perform(action: &Action, run: &TaskRun) -> Result<(), PipelineError> {
    match action {
        Action::Wait { ms } => {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(*ms)) => Ok(()),
                () = run.cancel.cancelled() => Err(PipelineError::Cancelled),
            }
        }
        other => Err(PipelineError::Fatal { code: StopCode::Problem, message: format!("cannot perform {:?} here", action_name(other)) }),
    }
}

fn action_name(action: &Action) -> String {
    serde_json::to_value(action)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_str()).map(str::to_owned))
        .unwrap_or_default()
}
