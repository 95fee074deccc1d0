//! Continuing an earlier task's session (`continue_task`).
//!
//! The CLI keeps a session as a transcript under its config directory,
//! `~/.claude/projects/<work dir, every character but letters and digits
//! turned into '-'>/<session id>.jsonl` (with a `<session id>/` directory
//! beside it when sub-agents ran), and `--resume <id>` finds it only there,
//! for the same working directory. A sandbox does not outlive its task, so
//! at the end of each task those files are stored as the task's session
//! files; a follow-up writes them back under the project directory of its
//! own work directory, along with the earlier task's input files and
//! artifacts so the files the transcript talks about are there too, and
//! then resumes. Only the transcript is needed; the rest of `~/.claude` is
//! rebuilt by the CLI.

use flotilla_blobstore::BlobStore;
use flotilla_types::ids::TaskId;
use flotilla_types::task::{Pipeline, StopCode, TaskFiles, TaskStatus};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::cli::quoted;
use super::workdir::{self, blob_failure, Artifact, Sandbox, WORK_DIR};
use crate::pipeline::{PipelineError, TaskHandle};

/// The CLI's config directory, relative to the sandbox's home.
const CONFIG_DIR: &str = ".claude";

/// A stored file: where it goes, relative to some directory, and its key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct StoredFile {
    pub path: String,
    pub key: String,
}

/// What a follow-up takes from the task it continues.
#[derive(Debug, Clone)]
pub(super) struct Earlier {
    pub task: TaskId,
    pub session_id: String,
    /// The transcript files, relative to the project directory.
    pub session_files: Vec<StoredFile>,
    /// The earlier task's own inputs.
    pub inputs: Option<TaskFiles>,
    /// The files it wrote, relative to the work directory.
    pub artifacts: Vec<StoredFile>,
}

/// Looks up the task `id` continues: a succeeded claude-code task of the
/// same tenant that recorded its session.
pub(super) async fn earlier(task: &dyn TaskHandle, id: &TaskId) -> Result<Earlier, PipelineError> {
    let not_resumable =
        |why: &str| PipelineError::Fatal { code: StopCode::Problem, message: format!("continue_task {id}: {why}") };
    let Some(record) = task.task_record(id).await? else {
        return Err(not_resumable("no such task"));
    };
    if record.spec.pipeline != Some(Pipeline::ClaudeCode) {
        return Err(not_resumable("not a claude-code task"));
    }
    if record.status != TaskStatus::Succeeded {
        return Err(not_resumable(&format!("the task is {}, only a succeeded task can be continued", record.status)));
    }
    let result = record.result.unwrap_or(Value::Null);
    let Some(session_id) = result.get("session_id").and_then(Value::as_str).filter(|s| is_session_id(s)) else {
        return Err(not_resumable("the task recorded no session"));
    };
    Ok(Earlier {
        task: id.clone(),
        session_id: session_id.to_owned(),
        session_files: stored_files(result.pointer("/session/files")),
        inputs: record.spec.files,
        artifacts: stored_files(result.get("artifacts")),
    })
}

fn stored_files(list: Option<&Value>) -> Vec<StoredFile> {
    let items = list.and_then(Value::as_array).cloned().unwrap_or_default();
    items.into_iter().filter_map(|item| serde_json::from_value(item).ok()).collect()
}

/// Session ids are UUIDs; anything else is not passed to a shell or a path.
fn is_session_id(text: &str) -> bool {
    !text.is_empty() && text.len() <= 64 && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// The CLI's project directory for a working directory, relative to the
/// sandbox's home.
pub(super) fn project_dir(cwd: &str) -> String {
    let name: String = cwd.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    format!("{CONFIG_DIR}/projects/{name}")
}

/// Writes the earlier task's inputs, artifacts and transcript into this
/// sandbox, the transcript under the project directory of `cwd`.
pub(super) async fn restore(
    sandbox: Sandbox<'_>,
    blobs: &BlobStore,
    task: &dyn TaskHandle,
    earlier: &Earlier,
    cwd: &str,
) -> Result<(), PipelineError> {
    if let Some(inputs) = &earlier.inputs {
        workdir::write_inputs(sandbox, inputs, blobs, task.tenant()).await?;
    }
    let layout = blobs.layout();
    let artifacts = layout.task_artifacts(&earlier.task);
    copy_back(sandbox, blobs, &earlier.artifacts, &artifacts, WORK_DIR).await?;
    let session = layout.task_session(&earlier.task);
    copy_back(sandbox, blobs, &earlier.session_files, &session, &project_dir(cwd)).await
}

/// Writes stored files under `dir`; each key must lie under `prefix`, where
/// the earlier task stored it.
async fn copy_back(
    sandbox: Sandbox<'_>,
    blobs: &BlobStore,
    files: &[StoredFile],
    prefix: &str,
    dir: &str,
) -> Result<(), PipelineError> {
    for file in files {
        let inside = file.key.strip_prefix(prefix).is_some_and(|rest| rest == file.path);
        if !inside || file.path.split('/').any(|part| part.is_empty() || part == "." || part == "..") {
            return Err(PipelineError::Fatal {
                code: StopCode::Problem,
                message: format!("the continued task lists a file it did not store: {}", file.path),
            });
        }
        let bytes = blobs.get(&file.key).await.map_err(blob_failure)?;
        sandbox.write(&format!("{dir}/{}", file.path), &bytes).await?;
    }
    Ok(())
}

/// A task's stored session: its id and transcript files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct SavedSession {
    pub id: String,
    pub files: Vec<Artifact>,
}

/// Stores the transcript of `session_id` (as the CLI wrote it for `cwd`)
/// as `task`'s session files.
pub(super) async fn save(
    sandbox: Sandbox<'_>,
    blobs: &BlobStore,
    task: &TaskId,
    cwd: &str,
    session_id: &str,
) -> Result<SavedSession, PipelineError> {
    let mut saved = SavedSession { id: session_id.to_owned(), files: Vec::new() };
    if !is_session_id(session_id) {
        return Ok(saved);
    }
    let dir = project_dir(cwd);
    let list = format!(
        "cd \"$HOME\"/{} 2>/dev/null || exit 0; find {} {} -type f -print0 2>/dev/null; exit 0",
        quoted(&dir),
        quoted(&format!("{session_id}.jsonl")),
        quoted(session_id)
    );
    let output = sandbox.run(&list).await?;
    for path in output.stdout.split('\0').filter(|p| !p.is_empty()) {
        let bytes = sandbox.read(&format!("{dir}/{path}")).await?;
        let stored = blobs.put_session_file(task, path, bytes).await.map_err(blob_failure)?;
        saved.files.push(Artifact::stored(path, stored));
    }
    Ok(saved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_directories_are_named_as_the_cli_names_them() {
        assert_eq!(project_dir("/tmp/ccx/a_b.c-D"), ".claude/projects/-tmp-ccx-a-b-c-D");
        assert_eq!(
            project_dir("/tmp/flotilla-sandboxes/loc-1/home/work"),
            ".claude/projects/-tmp-flotilla-sandboxes-loc-1-home-work"
        );
    }

    #[test]
    fn only_uuid_like_session_ids_are_used() {
        assert!(is_session_id("3911ced2-8a32-49bd-8e1d-8169d1a5d03d"));
        assert!(!is_session_id("../x"));
        assert!(!is_session_id("a b"));
        assert!(!is_session_id(""));
    }

    #[test]
    fn stored_files_are_read_from_a_result() {
        let result =
            serde_json::json!({"session": {"files": [{"path": "s.jsonl", "key": "k", "bytes": 3, "hash": "h"}, {"bad": 1}]}});
        assert_eq!(stored_files(result.pointer("/session/files")), vec![StoredFile { path: "s.jsonl".into(), key: "k".into() }]);
    }
}
