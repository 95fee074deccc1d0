//! What an agent leaves for its user: the regular files in `~/outbox/`
//! and `~/Downloads/` (the browser's download folder) once it stops, each
//! stored as an artifact of the task (at its path below the home
//! directory, say `outbox/report.ods`) and announced with a `file` event.
//!
//! The folders are listed inside the sandbox with `find -P`, which follows
//! no symbolic link (not even a folder that is one), and only regular
//! files are taken, so a link to anything outside the home directory is
//! never read. The take is bounded: at most [`MAX_OUTPUT_FILES`] files,
//! none over [`MAX_OUTPUT_FILE_BYTES`], [`MAX_OUTPUT_BYTES`] in all (in
//! path order); what is past a bound is not stored, and the worker logs it.

use std::time::Duration;

use flotilla_blobstore::{BlobError, BlobStore};
use flotilla_types::event::{EventKind, FileOp};

use super::{blob_failure, PipelineError};
use crate::pipeline::handle::TaskHandle;
use crate::sandbox::{SandboxError, SandboxId, SandboxProvider};

/// The folders below the home directory whose files are the task's outputs.
pub const OUTPUT_DIRS: [&str; 2] = ["outbox", "Downloads"];
/// The most output files one task stores.
pub const MAX_OUTPUT_FILES: usize = 100;
/// The largest output file stored.
pub const MAX_OUTPUT_FILE_BYTES: u64 = 64 * 1024 * 1024;
/// The most bytes of output files one task stores.
pub const MAX_OUTPUT_BYTES: u64 = 256 * 1024 * 1024;
/// How long listing the folders may take.
const LIST_TIMEOUT: Duration = Duration::from_secs(60);

/// A regular file in an output folder: its path below the home directory
/// and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub path: String,
    pub bytes: u64,
}

/// The files to store and those left out (with why), as the bounds decide.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Selection {
    pub stored: Vec<Listed>,
    pub left_out: Vec<(Listed, &'static str)>,
}

/// Makes `~/outbox/`, so the agent finds it there.
pub async fn make_outbox(provider: &dyn SandboxProvider, id: &SandboxId) -> Result<(), PipelineError> {
    let output = provider.run(id, &format!("mkdir -p {}", OUTPUT_DIRS[0]), LIST_TIMEOUT).await.map_err(PipelineError::from)?;
    if !output.success() {
        return Err(PipelineError::Retryable(format!("could not make the outbox: {}", output.stderr.trim())));
    }
    Ok(())
}

/// Lists, stores and announces the task's outputs; returns how many were
/// stored.
pub async fn store_outputs(
    provider: &dyn SandboxProvider,
    id: &SandboxId,
    blobs: &BlobStore,
    task: &dyn TaskHandle,
) -> Result<usize, PipelineError> {
    let listed = list(provider, id).await?;
    let selection = select(listed);
    for (file, why) in &selection.left_out {
        tracing::warn!(path = %file.path, bytes = file.bytes, why, "an output file was not stored");
    }
    let mut stored = 0;
    for file in &selection.stored {
        let bytes = match provider.read_file(id, &file.path).await {
            Ok(bytes) => bytes,
            Err(SandboxError::File { message, .. }) => {
                tracing::warn!(path = %file.path, %message, "an output file could not be read");
                continue;
            }
            Err(e) => return Err(PipelineError::from(e)),
        };
        let artifact = match blobs.put_artifact(task.task_id(), &file.path, bytes).await {
            Ok(artifact) => artifact,
            Err(error @ BlobError::InvalidPath { .. }) => {
                tracing::warn!(path = %file.path, %error, "an output file's path cannot be a key");
                continue;
            }
            Err(error) => return Err(blob_failure(error)),
        };
        let event =
            EventKind::File { path: file.path.clone(), op: FileOp::Write, hash: Some(artifact.hash), bytes: artifact.bytes };
        task.emit(event, &[]).await?;
        stored += 1;
    }
    Ok(stored)
}

/// The regular files below the output folders, found without following a
/// symbolic link.
async fn list(provider: &dyn SandboxProvider, id: &SandboxId) -> Result<Vec<Listed>, PipelineError> {
    let command = format!("find -P {} -type f -printf '%s %p\\0' 2>/dev/null; true", OUTPUT_DIRS.join(" "));
    let output = provider.run(id, &command, LIST_TIMEOUT).await.map_err(PipelineError::from)?;
    Ok(parse_listing(&output.stdout))
}

/// Reads `find -printf '%s %p\0'` output: NUL-ended `<size> <path>`.
fn parse_listing(listing: &str) -> Vec<Listed> {
    listing
        .split('\0')
        .filter_map(|record| {
            let (size, path) = record.split_once(' ')?;
            let bytes = size.parse().ok()?;
            let inside = OUTPUT_DIRS.iter().any(|dir| path.strip_prefix(dir).is_some_and(|rest| rest.starts_with('/')));
            inside.then(|| Listed { path: path.to_owned(), bytes })
        })
        .collect()
}

/// Applies the bounds in path order.
fn select(mut listed: Vec<Listed>) -> Selection {
    listed.sort_by(|a, b| a.path.cmp(&b.path));
    let mut selection = Selection::default();
    let mut total = 0;
    for file in listed {
        let why = if file.bytes > MAX_OUTPUT_FILE_BYTES {
            Some("larger than the largest output file stored")
        } else if selection.stored.len() >= MAX_OUTPUT_FILES {
            Some("past the most output files stored")
        } else if total + file.bytes > MAX_OUTPUT_BYTES {
            Some("past the most bytes of output files stored")
        } else {
            None
        };
        match why {
            Some(why) => selection.left_out.push((file, why)),
            None => {
                total += file.bytes;
                selection.stored.push(file);
            }
        }
    }
    selection
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(path: &str, bytes: u64) -> Listed {
        Listed { path: path.to_owned(), bytes }
    }

    #[test]
    fn listings_keep_odd_names_and_only_the_output_folders() {
        let listing = ["12 outbox/a b.txt", "7 Downloads/x\ny.pdf", "3 elsewhere/z", "5 outboxed/w", ""].join("\0");
        assert_eq!(parse_listing(&listing), vec![listed("outbox/a b.txt", 12), listed("Downloads/x\ny.pdf", 7)]);
    }

    #[test]
    fn outputs_past_a_bound_are_left_out_in_path_order() {
        let mut files: Vec<Listed> = (0..MAX_OUTPUT_FILES + 2).map(|i| listed(&format!("outbox/{i:04}"), 1)).collect();
        files.push(listed("Downloads/huge", MAX_OUTPUT_FILE_BYTES + 1));
        let selection = select(files);
        assert_eq!(selection.stored.len(), MAX_OUTPUT_FILES);
        assert_eq!(selection.stored[0].path, "outbox/0000");
        let left: Vec<&str> = selection.left_out.iter().map(|(f, _)| f.path.as_str()).collect();
        assert_eq!(left, ["Downloads/huge", "outbox/0100", "outbox/0101"]);

        let big = MAX_OUTPUT_FILE_BYTES;
        let selection = select((0..5).map(|i| listed(&format!("outbox/{i}"), big)).collect());
        assert_eq!(selection.stored.len() as u64, MAX_OUTPUT_BYTES / big);
    }
}
