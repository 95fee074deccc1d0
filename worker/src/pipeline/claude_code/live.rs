//! Claude Code's work as it happens: while the CLI runs, its work directory
//! is listed every [`EVERY`]; each file new or changed since the last look
//! is stored at its artifact key and reported as a `file` event (`op`
//! `write`, its hash and size), each one gone as a `file` event with `op`
//! `delete`. A last look once the CLI has ended reports what its final
//! moments wrote, so every `file` event comes before the task ends, and each
//! written file is readable in the store when its event is published.
//!
//! Beside it, the task's gateway token, granted for the gateway's short
//! token lifetime, is refreshed every third of it until the CLI ends, and
//! never past the task's deadline; the pipeline drops (revokes) it then.

use std::time::{Duration, Instant};

use flotilla_blobstore::BlobStore;
use flotilla_types::event::{EventKind, FileOp};
use tokio_util::sync::CancellationToken;

use super::workdir::{self, Sandbox, Snapshot};
use super::TOKEN_GRACE;
use crate::gateway::TaskToken;
use crate::pipeline::{PipelineError, TaskRun};

/// How often the work directory is listed while the CLI runs.
const EVERY: Duration = Duration::from_millis(300);

/// What the last look at the work directory saw.
pub(super) struct LiveFiles<'a> {
    run: &'a TaskRun,
    sandbox: Sandbox<'a>,
    blobs: &'a BlobStore,
    last: Snapshot,
}

impl<'a> LiveFiles<'a> {
    /// Starts from `before`, the work directory as the CLI found it.
    pub fn new(run: &'a TaskRun, sandbox: Sandbox<'a>, blobs: &'a BlobStore, before: Snapshot) -> Self {
        Self { run, sandbox, blobs, last: before }
    }

    /// Looks every [`EVERY`] until `stop`, then once more. A look that
    /// fails is logged and tried again at the next one.
    pub async fn follow(&mut self, stop: &CancellationToken) {
        loop {
            let stopped = tokio::select! {
                () = stop.cancelled() => true,
                () = tokio::time::sleep(EVERY) => false,
            };
            if let Err(error) = self.look().await {
                tracing::warn!(%error, "looking at the work directory failed");
            }
            if stopped {
                return;
            }
        }
    }

    /// Stores and reports what changed since the last look.
    async fn look(&mut self) -> Result<(), PipelineError> {
        let now = workdir::snapshot(self.sandbox).await?;
        let changed = workdir::changed(&self.last, &now);
        let task = &self.run.task;
        let (stored, _skipped) = workdir::store_artifacts(self.sandbox, self.blobs, task.task_id(), &changed).await?;
        for file in stored {
            let event = EventKind::File { path: file.path, op: FileOp::Write, hash: Some(file.hash), bytes: file.bytes };
            task.emit(event, &[]).await?;
        }
        for path in self.last.keys().filter(|path| !now.contains_key(*path)) {
            let event = EventKind::File { path: path.clone(), op: FileOp::Delete, hash: None, bytes: 0 };
            task.emit(event, &[]).await?;
        }
        self.last = now;
        Ok(())
    }
}

/// Refreshes `token` for `ttl` every third of it until `stop`, never past
/// `deadline` and its grace.
pub(super) async fn keep_fresh(token: &TaskToken, ttl: Duration, deadline: Instant, stop: &CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(ttl / 3) => {}
        }
        let left = deadline.saturating_duration_since(Instant::now()) + TOKEN_GRACE;
        if !token.refresh(ttl.min(left)) {
            tracing::warn!("the task's gateway token lapsed before it was refreshed");
            return;
        }
    }
}
