//! Files in and out of a task's sandbox, for every pipeline and provider
//! (through the provider's own file calls): the task's input `files`
//! placed before the agent starts ([`place_inputs`]), and what the agent
//! leaves in `~/outbox/` or downloads to `~/Downloads/` stored as the
//! task's artifacts once it stops ([`outputs`]).
//!
//! Invariant: an input lands inside the folder it was meant for (a path or
//! an S3 key that would climb out ends the task with code `problem`), and
//! an output is a regular file found without following a symbolic link, so
//! nothing outside the home directory is ever stored; guarded by
//! `files::tests::input_objects_land_inside_their_folder_or_end_the_task`
//! and `desktop_files::sandbox_outputs_are_stored_with_file_events_and_links_are_not_followed`.

pub mod outputs;

use flotilla_blobstore::{validate_artifact_path, BlobError, BlobStore};
use flotilla_types::ids::TenantId;
use flotilla_types::task::{StopCode, TaskFiles};

use super::PipelineError;
use crate::sandbox::{SandboxId, SandboxProvider};

/// The most input files an `s3_prefix` may hold.
const MAX_INPUT_FILES: usize = 1000;
/// The most bytes the input files under an `s3_prefix` may add up to.
const MAX_INPUT_BYTES: u64 = 256 * 1024 * 1024;

/// Where a task's files go in its sandbox: the sandbox, and the folder
/// below its home directory (empty: the home directory itself).
#[derive(Clone, Copy)]
pub struct Place<'a> {
    pub provider: &'a dyn SandboxProvider,
    pub id: &'a SandboxId,
    pub dir: &'a str,
}

impl Place<'_> {
    /// `path` below the folder, as the provider's file calls take it.
    fn path(&self, path: &str) -> String {
        if self.dir.is_empty() {
            path.to_owned()
        } else {
            format!("{}/{path}", self.dir)
        }
    }

    async fn write(&self, path: &str, bytes: &[u8]) -> Result<(), PipelineError> {
        self.provider.write_file(self.id, &self.path(path), bytes).await.map_err(PipelineError::from)
    }
}

/// Writes the task's input files into the folder; returns how many. Files
/// under an `s3_prefix` need the store.
pub async fn place_inputs(
    place: Place<'_>,
    files: &TaskFiles,
    blobs: Option<&BlobStore>,
    tenant: &TenantId,
) -> Result<usize, PipelineError> {
    match files {
        TaskFiles::Inline(files) => {
            for (path, content) in files {
                place.write(path, content.as_bytes()).await?;
            }
            Ok(files.len())
        }
        TaskFiles::S3 { s3_prefix } => {
            let blobs =
                blobs.ok_or_else(|| problem("files.s3_prefix needs the blob store on the worker (set FLOTILLA_S3_BUCKET)"))?;
            copy_from_store(place, s3_prefix, blobs, tenant).await
        }
    }
}

/// Copies every object under the tenant's input prefix `relative` into the
/// folder, at its path below that prefix.
async fn copy_from_store(place: Place<'_>, relative: &str, blobs: &BlobStore, tenant: &TenantId) -> Result<usize, PipelineError> {
    let prefix = blobs.layout().tenant_input_prefix(tenant, relative).map_err(|e| problem(&e.to_string()))?;
    let objects = blobs.list(&prefix).await.map_err(blob_failure)?;
    let total: u64 = objects.iter().map(|o| o.size).sum();
    if objects.len() > MAX_INPUT_FILES || total > MAX_INPUT_BYTES {
        return Err(problem(&format!(
            "files.s3_prefix holds {} objects of {total} bytes; at most {MAX_INPUT_FILES} objects of {MAX_INPUT_BYTES} bytes are copied: name a narrower prefix",
            objects.len()
        )));
    }
    let mut copied = 0;
    for object in &objects {
        let Some(path) = input_path(&object.key, &prefix)? else {
            continue;
        };
        let bytes = blobs.get(&object.key).await.map_err(blob_failure)?;
        place.write(path, &bytes).await?;
        copied += 1;
    }
    Ok(copied)
}

/// Where the object `key` under `prefix` lands in the folder: its path
/// below the prefix, which must be a plain relative path like an
/// artifact's (no `..`, `.` or empty component, not absolute), so a crafted
/// key cannot write outside the folder. `None` for the prefix itself and
/// folder markers.
fn input_path<'a>(key: &'a str, prefix: &str) -> Result<Option<&'a str>, PipelineError> {
    let Some(path) = key.strip_prefix(prefix).filter(|p| !p.is_empty() && !p.ends_with('/')) else {
        return Ok(None);
    };
    validate_artifact_path(path).map_err(|e| problem(&format!("files.s3_prefix: the object {key:?}: {e}")))?;
    Ok(Some(path))
}

/// A store fault as the attempt's outcome.
pub fn blob_failure(error: BlobError) -> PipelineError {
    if error.is_retryable() {
        PipelineError::Retryable(error.to_string())
    } else {
        PipelineError::Fatal { code: StopCode::Problem, message: error.to_string() }
    }
}

fn problem(message: &str) -> PipelineError {
    PipelineError::Fatal { code: StopCode::Problem, message: message.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_objects_land_inside_their_folder_or_end_the_task() {
        let prefix = "p/inputs/acme/data/";
        assert_eq!(input_path("p/inputs/acme/data/a/b.txt", prefix).expect("plain"), Some("a/b.txt"));
        assert_eq!(input_path("p/inputs/acme/data/dir/", prefix).expect("folder marker"), None);
        assert_eq!(input_path(prefix, prefix).expect("the prefix itself"), None);
        for key in [
            "p/inputs/acme/data/../../.bashrc",
            "p/inputs/acme/data/a/../../b",
            "p/inputs/acme/data//etc/passwd",
            "p/inputs/acme/data/./x",
            "p/inputs/acme/data/a\\..\\b",
        ] {
            let refused = input_path(key, prefix);
            assert!(
                matches!(&refused, Err(PipelineError::Fatal { code: StopCode::Problem, message }) if message.contains("files.s3_prefix")),
                "{key}: {refused:?}"
            );
        }
    }
}
