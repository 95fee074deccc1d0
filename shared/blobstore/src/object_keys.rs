//! Where things live in the bucket, in one place:
//!
//! ```text
//! <prefix>screenshots/<blake3 hex>.png          one object per distinct image, fleet-wide
//! <prefix>tasks/<task id>/artifacts/<path>      files one task produced
//! <prefix>tasks/<task id>/session/<path>        an agent's own session files, kept so a
//!                                               follow-up task can resume the session
//! <prefix>inputs/<tenant>/<path>                input files a tenant's tasks may name
//! <prefix>profiles/<tenant>/<name>.sealed       a tenant's saved browser profile, sealed
//! <prefix>probe/conditional-put                 written by `BlobStore::check`
//! ```
//!
//! The prefix (`FLOTILLA_S3_PREFIX`) is normalised to end with `/` when it is
//! not empty, so `flotilla` and `flotilla/` name the same place.

use flotilla_types::ids::{TaskId, TenantId};

use super::error::BlobError;

/// Longest artifact path accepted, in bytes; S3 keys stop at 1024.
const MAX_ARTIFACT_PATH: usize = 512;

/// The PNG file signature.
const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

/// The blake3 hash of `bytes`, as 64 lowercase hex digits.
pub fn content_hash(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// Whether `bytes` start like a PNG file.
pub fn looks_like_png(bytes: &[u8]) -> bool {
    bytes.starts_with(&PNG_SIGNATURE)
}

/// The key layout under one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyLayout {
    prefix: String,
}

impl KeyLayout {
    /// A layout under `raw` (as configured), normalised; `Err` says what is
    /// wrong with it.
    pub fn new(raw: &str) -> Result<Self, String> {
        let trimmed = raw.trim().trim_start_matches('/');
        if trimmed.is_empty() {
            return Ok(Self { prefix: String::new() });
        }
        let prefix = if trimmed.ends_with('/') { trimmed.to_owned() } else { format!("{trimmed}/") };
        if prefix.len() > 256 {
            return Err("is longer than 256 bytes".into());
        }
        if prefix.chars().any(char::is_control) {
            return Err("contains a control character".into());
        }
        let parts: Vec<&str> = prefix.trim_end_matches('/').split('/').collect();
        if parts.iter().any(|p| p.is_empty() || *p == "." || *p == "..") {
            return Err("has an empty, . or .. component".into());
        }
        Ok(Self { prefix })
    }

    /// The normalised prefix: empty, or ending with `/`.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Prefix of every screenshot.
    pub fn screenshots(&self) -> String {
        format!("{}screenshots/", self.prefix)
    }

    /// The key of the screenshot with this content hash.
    pub fn screenshot(&self, hash: &str) -> String {
        format!("{}screenshots/{hash}.png", self.prefix)
    }

    /// Prefix of one task's artifacts.
    pub fn task_artifacts(&self, task: &TaskId) -> String {
        format!("{}tasks/{}/artifacts/", self.prefix, task.as_str())
    }

    /// The key of one artifact, once `path` is shown to stay under the
    /// task's artifact prefix.
    pub fn artifact(&self, task: &TaskId, path: &str) -> Result<String, BlobError> {
        validate_artifact_path(path)?;
        Ok(format!("{}{path}", self.task_artifacts(task)))
    }

    /// Prefix of one task's session files.
    pub fn task_session(&self, task: &TaskId) -> String {
        format!("{}tasks/{}/session/", self.prefix, task.as_str())
    }

    /// The key of one session file, once `path` is shown to stay under the
    /// task's session prefix.
    pub fn session_file(&self, task: &TaskId, path: &str) -> Result<String, BlobError> {
        validate_artifact_path(path)?;
        Ok(format!("{}{path}", self.task_session(task)))
    }

    /// Prefix of the input files one tenant's tasks may name.
    pub fn tenant_inputs(&self, tenant: &TenantId) -> String {
        format!("{}inputs/{}/", self.prefix, tenant.as_str())
    }

    /// The full key prefix of `relative` (a task's `files.s3_prefix`) in the
    /// tenant's inputs, once it is shown to stay there.
    pub fn tenant_input_prefix(&self, tenant: &TenantId, relative: &str) -> Result<String, BlobError> {
        let trimmed = relative.trim_matches('/');
        if trimmed.is_empty() {
            return Ok(self.tenant_inputs(tenant));
        }
        validate_artifact_path(trimmed)?;
        Ok(format!("{}{trimmed}/", self.tenant_inputs(tenant)))
    }

    /// Prefix of one tenant's saved browser profiles.
    pub fn tenant_profiles(&self, tenant: &TenantId) -> String {
        format!("{}profiles/{}/", self.prefix, tenant.as_str())
    }

    /// Prefix of one tenant's archive: its finished tasks and its feed,
    /// moved out of Redis after the hot window (`queue::archive`). The
    /// tenant names the prefix, so a read made for one tenant can only
    /// ever reach that tenant's objects.
    pub fn tenant_archive(&self, tenant: &TenantId) -> String {
        format!("{}archive/{}/", self.prefix, tenant.as_str())
    }

    /// The archived record and events of one of `tenant`'s tasks.
    pub fn archived_task(&self, tenant: &TenantId, task: &TaskId) -> String {
        format!("{}tasks/{}.json", self.tenant_archive(tenant), task.as_str())
    }

    /// Prefix of `tenant`'s archived feed segments, each named by its last
    /// position so that keys sort as positions do.
    pub fn archived_feed(&self, tenant: &TenantId) -> String {
        format!("{}feed/", self.tenant_archive(tenant))
    }

    /// The object `BlobStore::check` writes to learn whether the store
    /// honours `If-None-Match: *`.
    pub fn probe(&self) -> String {
        format!("{}probe/conditional-put", self.prefix)
    }
}

/// Accepts only plain relative paths made of named components, so the key
/// built from one can never leave the prefix it is appended to (and a file
/// written at one never leaves the directory it is joined to).
pub fn validate_artifact_path(path: &str) -> Result<(), BlobError> {
    let reject = |reason: &'static str| Err(BlobError::InvalidPath { path: path.to_owned(), reason });
    if path.is_empty() {
        return reject("is empty");
    }
    if path.len() > MAX_ARTIFACT_PATH {
        return reject("is longer than 512 bytes");
    }
    if path.starts_with('/') {
        return reject("is absolute");
    }
    if path.contains('\\') {
        return reject("contains a backslash");
    }
    if path.chars().any(char::is_control) {
        return reject("contains a control character");
    }
    for part in path.split('/') {
        match part {
            "" => return reject("has an empty component"),
            "." | ".." => return reject("has a . or .. component"),
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> TaskId {
        TaskId::generate()
    }

    #[test]
    fn the_prefix_is_normalised() {
        assert_eq!(KeyLayout::new("").expect("empty").prefix(), "");
        assert_eq!(KeyLayout::new("fleet").expect("plain").prefix(), "fleet/");
        assert_eq!(KeyLayout::new("/fleet/a/").expect("slashes").prefix(), "fleet/a/");
        assert!(KeyLayout::new("fleet/../x").is_err());
        assert!(KeyLayout::new("fleet//x").is_err());
    }

    #[test]
    fn screenshots_are_keyed_by_hash() {
        let layout = KeyLayout::new("p").expect("layout");
        let hash = content_hash(b"pixels");
        assert_eq!(hash.len(), 64);
        assert_eq!(layout.screenshot(&hash), format!("p/screenshots/{hash}.png"));
    }

    #[test]
    fn artifact_paths_stay_under_the_task() {
        let layout = KeyLayout::new("p/").expect("layout");
        let id = task();
        let key = layout.artifact(&id, "out/report.md").expect("plain path");
        assert_eq!(key, format!("p/tasks/{}/artifacts/out/report.md", id.as_str()));
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "a/./b", "a//b", "a/", "a\\b", "a\0b", "a\nb"] {
            let err = layout.artifact(&id, bad).expect_err(bad);
            assert!(matches!(err, BlobError::InvalidPath { .. }), "{bad:?}: {err}");
            assert!(!err.is_retryable());
        }
        assert!(layout.artifact(&id, &"a".repeat(600)).is_err());
        assert!(layout.artifact(&id, "...").is_ok(), "three dots is a plain name");
    }

    #[test]
    fn png_bytes_are_recognised() {
        assert!(looks_like_png(&[0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n', 0]));
        assert!(!looks_like_png(b"GIF89a"));
    }
}
