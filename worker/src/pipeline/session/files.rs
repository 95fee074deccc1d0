//! What a session brings into its sandbox before the agent starts and
//! takes out once it stops: the task's input `files` (into the home
//! directory; a claude-code task places its own, in its work directory),
//! its saved browser profile (`sandbox.profile`), and, at the end, the
//! files the agent left in `~/outbox/` or `~/Downloads/` (stored as
//! artifacts with `file` events) and the profile, saved back when the task
//! succeeded.

use std::sync::Arc;

use flotilla_types::task::{Pipeline, StopCode};
use tracing::warn;

use super::{PipelineError, Session};
use crate::pipeline::files::{self, outputs, Place};
use crate::pipeline::profile::{BrowserControl, ProfileSlot};

impl Session {
    /// Makes the outbox, places the task's input files, then loads its
    /// saved browser profile.
    pub(super) async fn bring_in(&self) -> Result<(), PipelineError> {
        let spec = self.task.spec();
        let (provider, id) = self.sandbox()?;
        let (provider, id) = (Arc::clone(provider), id.clone());
        self.guard(outputs::make_outbox(provider.as_ref(), &id)).await?;
        if let Some(task_files) = spec.files.as_ref().filter(|_| spec.pipeline != Some(Pipeline::ClaudeCode)) {
            let place = Place { provider: provider.as_ref(), id: &id, dir: "" };
            self.guard(files::place_inputs(place, task_files, self.tools.blobs.as_ref(), self.task.tenant())).await?;
        }
        if self.profile_name().is_some() {
            let browser = self.browser_control();
            self.guard(async { self.profile_slot(provider.as_ref(), &id, &browser)?.load().await }).await?;
        }
        Ok(())
    }

    /// Stores the agent's outputs when it stopped on its own, and saves the
    /// browser profile when the task succeeded. On a success, a fault here
    /// is the task's outcome; after a failure it is only logged.
    pub(super) async fn take_out<T>(&self, result: Result<T, PipelineError>) -> Result<T, PipelineError> {
        if !matches!(result, Ok(_) | Err(PipelineError::Fatal { .. } | PipelineError::Refused(_))) {
            return result;
        }
        let Ok((provider, id)) = self.sandbox() else { return result };
        let (provider, id) = (Arc::clone(provider), id.clone());
        let stored = match &self.tools.blobs {
            Some(blobs) => self.guard(outputs::store_outputs(provider.as_ref(), &id, blobs, self.task.as_ref())).await.map(drop),
            None => Ok(()),
        };
        let taken = match (&result, stored) {
            (Ok(_), Ok(())) if self.profile_name().is_some() => {
                let kept = self.task.spec().sandbox.as_ref().and_then(|s| s.keep_alive).unwrap_or(false);
                let mut browser = self.browser_control();
                // A sandbox that ends with its task needs no browser back.
                browser.reopen &= kept;
                self.guard(async { self.profile_slot(provider.as_ref(), &id, &browser)?.save().await }).await
            }
            (_, stored) => stored,
        };
        match (result, taken) {
            (Ok(value), Ok(())) => Ok(value),
            (Ok(_), Err(e)) => Err(e),
            (Err(e), taken) => {
                if let Err(fault) = taken {
                    warn!(error = %fault, "could not store a failed task's output files");
                }
                Err(e)
            }
        }
    }

    fn profile_name(&self) -> Option<&str> {
        self.task.spec().sandbox.as_ref().and_then(|s| s.profile.as_deref())
    }

    /// The task's profile in the store and its sandbox; a worker without a
    /// store or a profile key cannot keep profiles.
    fn profile_slot<'a>(
        &'a self,
        provider: &'a dyn crate::sandbox::SandboxProvider,
        id: &'a crate::sandbox::SandboxId,
        browser: &'a BrowserControl,
    ) -> Result<ProfileSlot<'a>, PipelineError> {
        let name = self.profile_name().unwrap_or_default();
        let (Some(blobs), Some(key)) = (self.tools.blobs.as_ref(), self.tools.profile_key.as_ref()) else {
            return Err(PipelineError::Fatal {
                code: StopCode::Problem,
                message: "sandbox.profile needs a blob store and a profile key on the worker (set FLOTILLA_S3_BUCKET and FLOTILLA_PROFILE_KEY)"
                    .into(),
            });
        };
        Ok(ProfileSlot { provider, id, blobs, key, tenant: self.task.tenant(), name, browser })
    }

    /// The Chromium of the task's template.
    fn browser_control(&self) -> BrowserControl {
        let template = self.task.spec().sandbox.as_ref().and_then(|s| s.template.as_deref());
        BrowserControl::of(self.tools.templates.resolve(template))
    }
}
