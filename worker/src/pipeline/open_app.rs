//! The planner's application, opened before the executor's first step:
//! found in the task's template's app list (the planner's names and their
//! common aliases), then started or focused in the sandbox and its window
//! waited for ([`crate::sandbox::apps`]). An application the template
//! lacks, or one whose window never appears, ends the task with code
//! `app-unavailable` and a message naming the app and the template's apps.
//! A template this worker does not know (an E2B template named by its id)
//! has no app list: nothing is opened.

use flotilla_config::Template;
use flotilla_types::task::StopCode;

use super::error::PipelineError;
use super::session::Session;
use super::TaskRun;
use crate::sandbox::apps::{self, OpenAppError};

/// The template of `run`'s task, when this worker knows it.
fn template(run: &TaskRun) -> Option<&Template> {
    let named = run.task.spec().sandbox.as_ref().and_then(|s| s.template.as_deref());
    run.tools.templates.resolve(named)
}

/// The names of the task's template's apps, for the planner to choose from.
pub(crate) fn app_names(run: &TaskRun) -> Vec<String> {
    template(run).map(|t| t.apps.iter().map(|a| a.name.clone()).collect()).unwrap_or_default()
}

/// Opens (or focuses) `application` in the session's sandbox.
pub(crate) async fn open_planned(run: &TaskRun, session: &Session, application: &str) -> Result<(), PipelineError> {
    let Some(template) = template(run) else {
        tracing::debug!(application, "the task's template is not known here; no app is opened");
        return Ok(());
    };
    let app = apps::find_app(template, application).map_err(unavailable)?;
    let (provider, id) = session.sandbox()?;
    let window = session.guard(async { apps::open_app(provider.as_ref(), id, app).await.map_err(unavailable) }).await?;
    tracing::debug!(app = %app.name, window, "the planner's application is open");
    Ok(())
}

fn unavailable(error: OpenAppError) -> PipelineError {
    match error {
        OpenAppError::Sandbox(error) => PipelineError::from(error),
        other => PipelineError::Fatal { code: StopCode::AppUnavailable, message: other.to_string() },
    }
}
