//! A claude-code run taken up where an interrupted attempt stopped (its
//! worker was killed, or stopped and handed the task back): the step
//! journal holds the sandbox, the CLI's session id (chosen before the CLI
//! starts and passed as `--session-id`, or the continued task's) and the
//! work directory's files before the CLI first ran. The attempt that takes the task up (by its `on_interrupt`, as a
//! model-driven task, see [`resume`](crate::pipeline::computer_use::resume))
//! reconnects to the same sandbox, stops the CLI the earlier attempt left
//! there, and runs it again with `--resume <session id>` in the same work
//! directory, where the CLI keeps its transcript: the model gets every
//! earlier turn, and is told the run was interrupted. Input files are not
//! written again, and artifacts are what changed since the first run.

use std::sync::Arc;

use flotilla_queue::queue::JOURNAL_MAX_BYTES;

use flotilla_blobstore::BlobStore;

use super::cli::quoted;
use super::resume::{self, Earlier};
use super::workdir::{self, Sandbox, Snapshot};
use crate::pipeline::journal::{CliProgress, Journal, Journaler};
use crate::pipeline::{PipelineError, Session, TaskRun};

/// Where the running CLI's process id is kept, relative to the sandbox's
/// home (the command writes it before it becomes the CLI).
pub(super) const PID_FILE: &str = ".flotilla/claude.pid";

/// What the resumed CLI is told.
pub(super) const CONTINUE_PROMPT: &str = "The run was interrupted and has been taken up again in the same \
     workspace. The last action may or may not have completed: check the state of the files, then go on with \
     the task from where it stopped, without redoing what is already done.";

/// The largest work-directory listing journaled; past it the run is not
/// journaled (a later attempt starts over).
const MAX_SNAPSHOT_BYTES: usize = JOURNAL_MAX_BYTES / 2;

/// How the CLI starts: in which session, whether it resumes it, on what
/// prompt, and the work directory's files before its first run.
pub(super) struct CliStart<'a> {
    pub before: Snapshot,
    /// Whether the run is journaled (a later attempt can take it up).
    pub journaled: bool,
    pub prompt: &'a str,
    pub session_id: String,
    /// Whether the CLI resumes `session_id` (`--resume`) rather than
    /// starting it (`--session-id`).
    pub resume: bool,
}

/// Readies the work directory for the CLI: for a run taken up from
/// `journal`, stops the earlier attempt's CLI and resumes its session
/// (when its transcript is there; else starts it again on the task's
/// prompt); for a fresh run, writes the continued task's files and the
/// inputs, lists the work directory and journals it with the session the
/// CLI is to run in (the continued task's, or a new one).
pub(super) async fn prepare<'a>(
    run: &'a TaskRun,
    session: &Session,
    sandbox: Sandbox<'_>,
    blobs: &BlobStore,
    earlier: Option<&Earlier>,
    journal: Option<Journal>,
    cwd: &str,
) -> Result<CliStart<'a>, PipelineError> {
    let task = run.task.as_ref();
    let spec = task.spec();
    if let Some(progress) = journal.and_then(|journal| journal.cli) {
        session.guard(stop_earlier_cli(sandbox)).await?;
        let resume = session.guard(has_transcript(sandbox, cwd, &progress.session_id)).await?;
        let prompt = if resume { CONTINUE_PROMPT } else { spec.prompt.as_str() };
        return Ok(CliStart { before: progress.before, journaled: true, prompt, session_id: progress.session_id, resume });
    }
    if let Some(earlier) = earlier {
        session.guard(resume::restore(sandbox, blobs, task, earlier, cwd)).await?;
    }
    if let Some(files) = &spec.files {
        session.guard(workdir::write_inputs(sandbox, files, blobs, task.tenant())).await?;
    }
    let before = session.guard(workdir::snapshot(sandbox)).await?;
    let session_id = earlier.map_or_else(new_session_id, |e| e.session_id.clone());
    let journaled = begin(run, session, &before, &session_id).await?;
    Ok(CliStart { before, journaled, prompt: spec.prompt.as_str(), session_id, resume: earlier.is_some() })
}

/// Journals a fresh run whose work directory held `before` and whose CLI
/// runs in `session_id`; not when the listing is too large to journal.
async fn begin(run: &TaskRun, session: &Session, before: &Snapshot, session_id: &str) -> Result<bool, PipelineError> {
    let listed = serde_json::to_string(before).map_or(usize::MAX, |text| text.len());
    if listed > MAX_SNAPSHOT_BYTES {
        tracing::warn!(bytes = listed, "the work directory's listing is too large to journal; an interrupted run starts over");
        return Ok(false);
    }
    let cli = CliProgress { session_id: session_id.to_owned(), before: before.clone() };
    let journal = Journal { cli: Some(cli), ..Journal::new(session.journaled_sandbox()?) };
    Journaler::begin(Arc::clone(&run.task), None, journal).await?;
    Ok(true)
}

/// Whether the CLI's transcript of `session_id` is in the project
/// directory of `cwd` (a CLI stopped before it wrote one left none).
async fn has_transcript(sandbox: Sandbox<'_>, cwd: &str, session_id: &str) -> Result<bool, PipelineError> {
    let path = format!("{}/{session_id}.jsonl", resume::project_dir(cwd));
    let output = sandbox.run(&format!("if [ -f \"$HOME\"/{} ]; then echo found; fi", quoted(&path))).await?;
    Ok(output.stdout.trim() == "found")
}

/// A new session id: a random (version 4) UUID, as the CLI takes it.
fn new_session_id() -> String {
    let bits = (rand::random::<u128>() & !(0xf << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62);
    let hex = format!("{bits:032x}");
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// Stops the CLI an earlier attempt started in this sandbox, if it still
/// runs (it would go on writing the transcript the resumed one reads): the
/// process its id file names, when that is still a `claude` process.
pub(super) async fn stop_earlier_cli(sandbox: Sandbox<'_>) -> Result<(), PipelineError> {
    let command = format!(
        "p=$(cat \"$HOME\"/{PID_FILE} 2>/dev/null); if [ -n \"$p\" ] && grep -qa claude /proc/\"$p\"/cmdline; then \
         pkill -KILL -P \"$p\"; kill -KILL \"$p\"; fi 2>/dev/null; exit 0"
    );
    sandbox.run(&command).await.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_session_ids_are_version_4_uuids() {
        let id = new_session_id();
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(parts.iter().map(|p| p.len()).collect::<Vec<_>>(), [8, 4, 4, 4, 12], "{id}");
        assert!(parts[2].starts_with('4'), "version 4: {id}");
        assert!(matches!(parts[3].chars().next(), Some('8' | '9' | 'a' | 'b')), "the RFC 4122 variant: {id}");
        assert_ne!(new_session_id(), id);
    }
}
