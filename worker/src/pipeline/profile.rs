//! Saved browser profiles in a task's sandbox (`sandbox.profile`): the
//! tenant's saved Chromium state (cookies, local storage: the user-data-dir
//! `~/.config/chromium`) unpacked into the sandbox before the agent starts,
//! and packed and saved back when the task succeeds.
//!
//! Loading stops the browser, replaces its user-data-dir with the saved one
//! and starts it again (a name the tenant has not saved yet starts from the
//! template's own profile). Saving stops the browser first, so Chromium
//! writes its cookies out, then packs the user-data-dir without its caches
//! and locks and hands it to the store, which seals it (see
//! `flotilla_blobstore::profiles`); a sandbox kept alive after its task
//! gets its start-up browser back. The archive passes through the
//! sandbox's `~/.cache/flotilla/` and is removed from there at once.
//!
//! A profile's contents never go into an event, a log line or a
//! screenshot's metadata: only its size is logged, at debug level.

use flotilla_blobstore::{BlobStore, ProfileError};
use flotilla_config::{App, ProfileKey, Template, TemplatesConfig};
use flotilla_types::ids::TenantId;
use flotilla_types::task::StopCode;
use std::time::Duration;

use super::files::blob_failure;
use super::PipelineError;
use crate::sandbox::apps::{open_app, stop_app, OpenAppError};
use crate::sandbox::{SandboxId, SandboxProvider};

/// The app whose profile is saved.
const BROWSER_APP: &str = "chromium";

/// Chromium's user-data-dir, relative to the sandbox's home.
pub const PROFILE_DIR: &str = ".config/chromium";
/// Where the archive passes through in the sandbox, relative to its home.
const ARCHIVE: &str = ".cache/flotilla/profile.tar.gz";
/// The largest packed profile saved.
pub const MAX_PROFILE_BYTES: u64 = 64 * 1024 * 1024;
/// What is left out of a saved profile: caches Chromium rebuilds, crash
/// reports, and the locks of the running browser.
const LEFT_OUT: [&str; 16] = [
    "Cache",
    "Code Cache",
    "GPUCache",
    "GrShaderCache",
    "GraphiteDawnCache",
    "DawnCache",
    "ShaderCache",
    "CacheStorage",
    "ScriptCache",
    "component_crx_cache",
    "Crashpad",
    "BrowserMetrics*",
    "Singleton*",
    "optimization_guide_model_store",
    "Safe Browsing",
    "segmentation_platform",
];
/// How long the browser may take to exit once its windows are closed.
const CLOSE_WAIT_S: u32 = 10;
/// How long packing or unpacking may take.
const PACK_TIMEOUT: Duration = Duration::from_secs(60);

/// The sandbox's browser, as the profile needs it stopped and started.
#[derive(Debug, Clone)]
pub struct BrowserControl {
    /// The template's Chromium app (the built-in one when the template has
    /// none: a task may start Chromium itself).
    pub app: App,
    /// Whether it is opened again once the profile is in place, or after
    /// it was saved: when the template starts it with the desktop (and,
    /// after a save, only in a sandbox that outlives its task).
    pub reopen: bool,
}

impl BrowserControl {
    /// The Chromium of `template`.
    pub fn of(template: Option<&Template>) -> Self {
        match template.and_then(|t| t.app(BROWSER_APP)) {
            Some(app) => Self { app: app.clone(), reopen: app.start },
            None => {
                let builtin = TemplatesConfig::default();
                let app = builtin.get("browser").and_then(|t| t.app(BROWSER_APP)).cloned();
                Self { app: app.expect("the built-in browser template has Chromium"), reopen: false }
            }
        }
    }
}

/// One task's saved profile: where it lives and where it goes.
pub struct ProfileSlot<'a> {
    pub provider: &'a dyn SandboxProvider,
    pub id: &'a SandboxId,
    pub blobs: &'a BlobStore,
    pub key: &'a ProfileKey,
    pub tenant: &'a TenantId,
    pub name: &'a str,
    pub browser: &'a BrowserControl,
}

impl ProfileSlot<'_> {
    /// Unpacks the saved profile into the sandbox's browser; a name not
    /// saved yet leaves the browser as the template made it.
    pub async fn load(&self) -> Result<(), PipelineError> {
        let Some(archive) = self.blobs.get_profile(self.key, self.tenant, self.name).await.map_err(profile_failure)? else {
            return Ok(());
        };
        tracing::debug!(bytes = archive.len(), "unpacking a saved browser profile");
        stop_app(self.provider, self.id, &self.browser.app).await.map_err(app_failure)?;
        self.provider.write_file(self.id, ARCHIVE, &archive).await.map_err(PipelineError::from)?;
        let unpack = format!(
            "rm -rf {PROFILE_DIR} && mkdir -p {PROFILE_DIR} && tar -xzf {ARCHIVE} -C {PROFILE_DIR} --no-same-owner; \
             status=$?; rm -f {ARCHIVE}; exit $status"
        );
        self.run(&unpack).await?;
        if self.browser.reopen {
            open_app(self.provider, self.id, &self.browser.app).await.map_err(app_failure)?;
        }
        Ok(())
    }

    /// Packs the sandbox's browser profile and saves it under the name;
    /// nothing is saved when the sandbox has no profile folder.
    pub async fn save(&self) -> Result<(), PipelineError> {
        self.run(&close_windows_script(&self.browser.app)).await?;
        stop_app(self.provider, self.id, &self.browser.app).await.map_err(app_failure)?;
        let excludes: String = LEFT_OUT.iter().map(|p| format!(" --exclude='{p}'")).collect();
        let pack = format!(
            "[ -d {PROFILE_DIR} ] || exit 0; mkdir -p \"$(dirname {ARCHIVE})\" && \
             tar -czf {ARCHIVE} -C {PROFILE_DIR}{excludes} . && stat -c %s {ARCHIVE}"
        );
        let packed = self.run(&pack).await?;
        let Ok(size) = packed.trim().parse::<u64>() else { return Ok(()) };
        let archive = if size > MAX_PROFILE_BYTES {
            None
        } else {
            Some(self.provider.read_file(self.id, ARCHIVE).await.map_err(PipelineError::from))
        };
        self.run(&format!("rm -f {ARCHIVE}")).await?;
        let Some(archive) = archive.transpose()? else {
            return Err(PipelineError::Fatal {
                code: StopCode::Problem,
                message: format!(
                    "the browser profile packs to {size} bytes, more than the {MAX_PROFILE_BYTES} a saved profile may hold"
                ),
            });
        };
        let sealed = self.blobs.put_profile(self.key, self.tenant, self.name, &archive).await.map_err(profile_failure)?;
        tracing::debug!(bytes = sealed, "saved a browser profile");
        if self.browser.reopen {
            open_app(self.provider, self.id, &self.browser.app).await.map_err(app_failure)?;
        }
        Ok(())
    }

    /// Runs a script that must succeed; returns its standard output.
    async fn run(&self, script: &str) -> Result<String, PipelineError> {
        let output = self.provider.run(self.id, script, PACK_TIMEOUT).await.map_err(PipelineError::from)?;
        if !output.success() {
            return Err(PipelineError::Retryable(format!(
                "handling the browser profile in the sandbox failed with status {}: {}",
                output.exit_code,
                output.stderr.trim()
            )));
        }
        Ok(output.stdout)
    }
}

/// A script that closes each of the browser's windows as a person would
/// (Ctrl+Shift+W), and waits up to [`CLOSE_WAIT_S`] for the browser to
/// exit: only a browser that shuts down this way writes its cookies out
/// (on a signal Chromium exits without writing them).
fn close_windows_script(app: &App) -> String {
    let class = app.window_class.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_' && c != '.', "");
    let program = app.required_programs().first().cloned().unwrap_or_default();
    let program = program.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '_' && c != '.', "");
    format!(
        "export DISPLAY=\"${{DISPLAY:-:0}}\"; \
         for w in $(xdotool search --onlyvisible --class '{class}' 2>/dev/null); do \
           xdotool windowactivate --sync \"$w\" 2>/dev/null; xdotool key --clearmodifiers ctrl+shift+w 2>/dev/null; \
         done; \
         i=0; while pgrep -x '{program}' >/dev/null 2>&1 && [ $i -lt {polls} ]; do sleep 0.1; i=$((i+1)); done; true",
        polls = CLOSE_WAIT_S * 10
    )
}

fn app_failure(error: OpenAppError) -> PipelineError {
    match error {
        OpenAppError::Sandbox(e) => PipelineError::from(e),
        other => PipelineError::Retryable(format!("the browser around a saved profile: {other}")),
    }
}

fn profile_failure(error: ProfileError) -> PipelineError {
    match error {
        ProfileError::Store(e) => blob_failure(e),
        other => PipelineError::Fatal { code: StopCode::Problem, message: other.to_string() },
    }
}
