//! The scripted pipeline: runs a list of actions in order, with an `action`
//! and an `action_completed` event for each: the task's own `actions`, or
//! the trajectory an earlier task recorded (`replay_of`, see [`replay`]).
//! A list of waits alone runs without a sandbox; any other action takes a
//! sandbox for the task, with a screenshot before the first action and
//! after every one.
//!
//! [`replay`]: super::replay

use std::time::Duration;

use flotilla_types::action::Action;
use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::json;

use super::replay::{self, Trajectory};
use super::session::Steps;
use super::{Outcome, Pipeline, PipelineError, Session, TaskRun};

/// Runs a fixed list of actions.
pub struct Scripted;

impl Pipeline for Scripted {
    fn run<'a>(&'a self, run: &'a TaskRun) -> BoxFuture<'a, Result<Outcome, PipelineError>> {
        async move {
            let spec = &run.attempt.spec;
            let Trajectory { actions, sandbox } = match &spec.replay_of {
                Some(id) => replay::trajectory(&run.attempt, id).await?,
                None => Trajectory { actions: spec.actions.clone().unwrap_or_default(), sandbox: spec.sandbox.clone() },
            };
            if actions.iter().any(Action::needs_sandbox) {
                let mut session = Session::open_with(run, Steps::new(run), sandbox.as_ref()).await?;
                let result = run_on_screen(&mut session, &actions).await;
                session.close(result).await
            } else {
                run_waits(run, &actions).await
            }
        }
        .boxed()
    }
}

/// Runs actions on the task's sandbox, observing the screen before the
/// first and after each.
async fn run_on_screen(session: &mut Session, actions: &[Action]) -> Result<Outcome, PipelineError> {
    session.observe().await?;
    for action in actions {
        session.act(action).await?;
        session.observe().await?;
    }
    Ok(ran(actions.len()))
}

/// Runs a list of waits without a sandbox.
async fn run_waits(run: &TaskRun, actions: &[Action]) -> Result<Outcome, PipelineError> {
    let mut steps = Steps::new(run);
    for action in actions {
        let ms = match action {
            Action::Wait { ms } => *ms,
            _ => 0,
        };
        steps
            .take(action, async {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(())
            })
            .await?;
    }
    Ok(ran(actions.len()))
}

fn ran(count: usize) -> Outcome {
    Outcome::Succeeded(json!({ "text": format!("ran {count} actions") }))
}
