//! The task's work directory in the sandbox: the input files written into
//! it before the CLI runs (by [`crate::pipeline::files`]), and the files the CLI wrote there (new, or with
//! changed contents) stored as the task's artifacts afterwards. What
//! changed is found by listing every file with its SHA-256 before and after
//! the run, inside the sandbox.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_blobstore::{BlobError, BlobStore, StoredArtifact};
use flotilla_types::ids::TaskId;
use serde::Serialize;

pub(super) use crate::pipeline::files::blob_failure;
use crate::pipeline::files::{self, Place};
use crate::pipeline::PipelineError;
use crate::sandbox::{CommandOutput, SandboxError, SandboxId, SandboxProvider};

/// The work directory, relative to the sandbox's home.
pub(super) const WORK_DIR: &str = "work";

/// The most artifacts one task stores; the rest are listed as skipped.
const MAX_ARTIFACTS: usize = 1000;
/// How long listing or preparing the work directory may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(120);

/// The task's sandbox, with its faults turned into pipeline outcomes.
#[derive(Clone, Copy)]
pub(super) struct Sandbox<'a> {
    pub provider: &'a Arc<dyn SandboxProvider>,
    pub id: &'a SandboxId,
}

impl Sandbox<'_> {
    /// Runs a bash command that must succeed.
    pub async fn run(&self, command: &str) -> Result<CommandOutput, PipelineError> {
        let output = self.provider.run(self.id, command, LIST_TIMEOUT).await.map_err(PipelineError::from)?;
        if !output.success() {
            return Err(PipelineError::Retryable(format!(
                "a command in the sandbox failed with status {}: {}",
                output.exit_code,
                output.stderr.trim()
            )));
        }
        Ok(output)
    }

    pub async fn read(&self, path: &str) -> Result<Vec<u8>, PipelineError> {
        self.provider.read_file(self.id, path).await.map_err(PipelineError::from)
    }

    pub async fn write(&self, path: &str, bytes: &[u8]) -> Result<(), PipelineError> {
        self.provider.write_file(self.id, path, bytes).await.map_err(PipelineError::from)
    }
}

/// Creates the work directory; returns its absolute path as the sandbox
/// sees it, links resolved (the path the CLI names its project after).
pub(super) async fn prepare(sandbox: Sandbox<'_>) -> Result<String, PipelineError> {
    let output = sandbox.run(&format!("mkdir -p {WORK_DIR} && cd {WORK_DIR} && pwd -P")).await?;
    Ok(output.stdout.trim().to_owned())
}

/// Writes the task's input files into the work directory.
pub(super) async fn write_inputs(
    sandbox: Sandbox<'_>,
    task_files: &flotilla_types::task::TaskFiles,
    blobs: &BlobStore,
    tenant: &flotilla_types::ids::TenantId,
) -> Result<usize, PipelineError> {
    let place = Place { provider: sandbox.provider.as_ref(), id: sandbox.id, dir: WORK_DIR };
    files::place_inputs(place, task_files, Some(blobs), tenant).await
}

/// Every file under the work directory by its path there, with the SHA-256
/// of its contents.
pub(super) type Snapshot = BTreeMap<String, String>;

/// Lists the work directory's files with their hashes.
pub(super) async fn snapshot(sandbox: Sandbox<'_>) -> Result<Snapshot, PipelineError> {
    let command = format!("cd {WORK_DIR} && find . -type f -print0 | LC_ALL=C xargs -0 -r sha256sum -z");
    let output = sandbox.run(&command).await?;
    Ok(parse_listing(&output.stdout))
}

/// Reads `sha256sum -z` output: NUL-ended records of `<hash>  ./<path>`.
fn parse_listing(listing: &str) -> Snapshot {
    listing
        .split('\0')
        .filter_map(|record| {
            let (hash, path) = record.split_once("  ")?;
            let path = path.strip_prefix("./").unwrap_or(path);
            (!path.is_empty() && hash.len() == 64).then(|| (path.to_owned(), hash.to_owned()))
        })
        .collect()
}

/// The files that are new in `after`, or whose contents changed, in path
/// order.
pub(super) fn changed(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    after.iter().filter(|(path, hash)| before.get(*path) != Some(*hash)).map(|(path, _)| path.clone()).collect()
}

/// A file the CLI wrote, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct Artifact {
    pub path: String,
    pub key: String,
    pub bytes: u64,
    pub hash: String,
}

impl Artifact {
    /// The record of `path`, stored as `stored`.
    pub fn stored(path: &str, stored: StoredArtifact) -> Self {
        Self { path: path.to_owned(), key: stored.key, bytes: stored.bytes, hash: stored.hash }
    }
}

/// A file that was not stored, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct Skipped {
    pub path: String,
    pub reason: String,
}

/// Stores each changed file of the work directory as an artifact of `task`.
/// Files that cannot be read back or whose path cannot be a key, and those
/// past [`MAX_ARTIFACTS`], are skipped and listed.
pub(super) async fn store_artifacts(
    sandbox: Sandbox<'_>,
    blobs: &BlobStore,
    task: &TaskId,
    paths: &[String],
) -> Result<(Vec<Artifact>, Vec<Skipped>), PipelineError> {
    let mut stored = Vec::new();
    let mut skipped = Vec::new();
    for path in paths {
        if stored.len() >= MAX_ARTIFACTS {
            skipped.push(Skipped { path: path.clone(), reason: format!("more than {MAX_ARTIFACTS} files changed") });
            continue;
        }
        let bytes = match sandbox.provider.read_file(sandbox.id, &format!("{WORK_DIR}/{path}")).await {
            Ok(bytes) => bytes,
            Err(SandboxError::File { message, .. }) => {
                skipped.push(Skipped { path: path.clone(), reason: message });
                continue;
            }
            Err(error) => return Err(PipelineError::from(error)),
        };
        match blobs.put_artifact(task, path, bytes).await {
            Ok(artifact) => stored.push(Artifact::stored(path, artifact)),
            Err(error @ BlobError::InvalidPath { .. }) => skipped.push(Skipped { path: path.clone(), reason: error.to_string() }),
            Err(error) => return Err(blob_failure(error)),
        }
    }
    Ok((stored, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    #[test]
    fn listings_are_read_with_odd_names_intact() {
        let listing = format!("{A}  ./notes.txt\0{B}  ./dir/with  two spaces\nand a newline\0");
        let snapshot = parse_listing(&listing);
        assert_eq!(snapshot.get("notes.txt").map(String::as_str), Some(A));
        assert_eq!(snapshot.get("dir/with  two spaces\nand a newline").map(String::as_str), Some(B));
        assert_eq!(snapshot.len(), 2);
    }

    #[test]
    fn new_and_rewritten_files_count_as_changed() {
        let before: Snapshot = [("kept.txt", A), ("edited.txt", A)].into_iter().map(|(p, h)| (p.into(), h.into())).collect();
        let after: Snapshot =
            [("kept.txt", A), ("edited.txt", B), ("new.txt", A)].into_iter().map(|(p, h)| (p.into(), h.into())).collect();
        assert_eq!(changed(&before, &after), vec!["edited.txt".to_owned(), "new.txt".to_owned()]);
    }
}
