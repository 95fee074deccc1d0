//! A provider of sandboxes without screens, held in memory: for testing what
//! sits above providers (pools, the fleet-wide cap, keeping sandboxes
//! alive, sessions) quickly and without a display server.
//!
//! Sandboxes have ids, sizes and deadlines like real ones: a call on one
//! past its deadline reports [`SandboxError::Expired`], a killed one is
//! [`SandboxError::NotFound`]. Actions change nothing, screenshots are
//! black, commands succeed with no output, and files live in a map. Tests
//! can slow creates down, refuse extensions, and read counters (creates,
//! extensions, the most sandboxes live at once). Its name is `memory` (in
//! logs and usage); it gives sandboxes of the `local` kind, so tasks that ask
//! for a local sandbox run on it.
//!
//! A test fake: compiled only for the worker's own tests and with the
//! `memory-sandbox` feature, which only the end-to-end test crate turns on;
//! the shipped worker has no way to choose it.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use flotilla_types::action::Action;
use flotilla_types::task::SandboxProviderKind;
use futures::future::BoxFuture;
use futures::FutureExt;
use time::OffsetDateTime;

use super::{CommandOutput, Sandbox, SandboxError, SandboxId, SandboxProvider, SandboxRequest, SandboxStatus, Screenshot};

#[derive(Debug, Clone)]
struct Entry {
    sandbox: Sandbox,
    deadline: Instant,
}

#[derive(Debug, Default)]
struct State {
    sandboxes: HashMap<SandboxId, Entry>,
    expired: HashSet<SandboxId>,
    files: HashMap<(SandboxId, String), Vec<u8>>,
    created: usize,
    extensions: usize,
    most_live: usize,
    create_delay: Duration,
    refuse_extensions: Option<String>,
}

/// Sandboxes in memory. See the module docs.
#[derive(Debug, Default)]
pub struct MemoryProvider {
    state: Mutex<State>,
}

impl MemoryProvider {
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes every create take `delay`, so overlapping holders overlap.
    pub fn set_create_delay(&self, delay: Duration) {
        self.lock().create_delay = delay;
    }

    /// Makes every extension fail with [`SandboxError::InvalidRequest`].
    pub fn refuse_extensions(&self, message: &str) {
        self.lock().refuse_extensions = Some(message.to_owned());
    }

    /// Sandboxes created so far.
    pub fn created(&self) -> usize {
        self.lock().created
    }

    /// Extension requests so far, refused ones included.
    pub fn extensions(&self) -> usize {
        self.lock().extensions
    }

    /// Sandboxes live now.
    pub fn live(&self) -> usize {
        self.lock().sandboxes.len()
    }

    /// The most sandboxes that were live at once.
    pub fn most_live(&self) -> usize {
        self.lock().most_live
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn create_sandbox(&self, request: &SandboxRequest) -> Result<Sandbox, SandboxError> {
        if request.timeout.is_zero() {
            return Err(SandboxError::InvalidRequest("timeout must be above zero".into()));
        }
        let delay = self.lock().create_delay;
        tokio::time::sleep(delay).await;
        let mut state = self.lock();
        state.created += 1;
        let id = SandboxId::parse(&format!("mem-{:06}-{:08x}", state.created, rand::random::<u32>()))?;
        let sandbox =
            Sandbox { id: id.clone(), resolution: request.resolution, expires_at: OffsetDateTime::now_utc() + request.timeout };
        state.sandboxes.insert(id, Entry { sandbox: sandbox.clone(), deadline: Instant::now() + request.timeout });
        state.most_live = state.most_live.max(state.sandboxes.len());
        Ok(sandbox)
    }

    /// The live sandbox `id`, or why there is none; one past its deadline
    /// is ended on the way.
    fn get(&self, id: &SandboxId) -> Result<Entry, SandboxError> {
        let mut state = self.lock();
        let Some(entry) = state.sandboxes.get(id).cloned() else {
            if state.expired.contains(id) {
                return Err(SandboxError::Expired(id.clone()));
            }
            return Err(SandboxError::NotFound(id.clone()));
        };
        if entry.deadline <= Instant::now() {
            state.sandboxes.remove(id);
            state.expired.insert(id.clone());
            return Err(SandboxError::Expired(id.clone()));
        }
        Ok(entry)
    }

    fn extend_sandbox(&self, id: &SandboxId, by: Duration) -> Result<OffsetDateTime, SandboxError> {
        self.get(id)?;
        let mut state = self.lock();
        state.extensions += 1;
        if let Some(message) = &state.refuse_extensions {
            return Err(SandboxError::InvalidRequest(message.clone()));
        }
        let entry = state.sandboxes.get_mut(id).ok_or_else(|| SandboxError::NotFound(id.clone()))?;
        if Instant::now() + by > entry.deadline {
            entry.deadline = Instant::now() + by;
            entry.sandbox.expires_at = OffsetDateTime::now_utc() + by;
        }
        Ok(entry.sandbox.expires_at)
    }

    fn kill_sandbox(&self, id: &SandboxId) -> Result<(), SandboxError> {
        let mut state = self.lock();
        if state.sandboxes.remove(id).is_some() || state.expired.contains(id) {
            state.files.retain(|(owner, _), _| owner != id);
            return Ok(());
        }
        Err(SandboxError::NotFound(id.clone()))
    }

    fn black_screen(&self, id: &SandboxId) -> Result<Screenshot, SandboxError> {
        let (width, height) = self.get(id)?.sandbox.resolution;
        let mut png = Vec::new();
        let mut encoder = png::Encoder::new(&mut png, width, height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let encoded =
            encoder.write_header().and_then(|mut writer| writer.write_image_data(&vec![0; width as usize * height as usize * 3]));
        encoded.map_err(|e| SandboxError::Display(format!("cannot encode a screenshot: {e}")))?;
        Ok(Screenshot { png: png.into(), width, height, rgb: None })
    }
}

impl SandboxProvider for MemoryProvider {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn kind(&self) -> SandboxProviderKind {
        SandboxProviderKind::Local
    }

    fn create<'a>(&'a self, request: &'a SandboxRequest) -> BoxFuture<'a, Result<Sandbox, SandboxError>> {
        self.create_sandbox(request).boxed()
    }

    fn connect<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<Sandbox, SandboxError>> {
        async move { Ok(self.get(id)?.sandbox) }.boxed()
    }

    fn status<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<SandboxStatus, SandboxError>> {
        async move {
            let entry = self.get(id)?;
            Ok(SandboxStatus { alive: true, expires_at: entry.sandbox.expires_at })
        }
        .boxed()
    }

    fn extend<'a>(&'a self, id: &'a SandboxId, by: Duration) -> BoxFuture<'a, Result<OffsetDateTime, SandboxError>> {
        async move { self.extend_sandbox(id, by) }.boxed()
    }

    fn kill<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<(), SandboxError>> {
        async move { self.kill_sandbox(id) }.boxed()
    }

    fn run<'a>(
        &'a self,
        id: &'a SandboxId,
        _command: &'a str,
        _timeout: Duration,
    ) -> BoxFuture<'a, Result<CommandOutput, SandboxError>> {
        async move {
            self.get(id)?;
            Ok(CommandOutput { exit_code: 0, stdout: String::new(), stderr: String::new() })
        }
        .boxed()
    }

    fn read_file<'a>(&'a self, id: &'a SandboxId, path: &'a str) -> BoxFuture<'a, Result<Vec<u8>, SandboxError>> {
        async move {
            self.get(id)?;
            let bytes = self.lock().files.get(&(id.clone(), path.to_owned())).cloned();
            bytes.ok_or_else(|| SandboxError::File { path: path.to_owned(), message: "no such file".into() })
        }
        .boxed()
    }

    fn write_file<'a>(&'a self, id: &'a SandboxId, path: &'a str, bytes: &'a [u8]) -> BoxFuture<'a, Result<(), SandboxError>> {
        async move {
            self.get(id)?;
            self.lock().files.insert((id.clone(), path.to_owned()), bytes.to_vec());
            Ok(())
        }
        .boxed()
    }

    fn screenshot<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<Screenshot, SandboxError>> {
        async move { self.black_screen(id) }.boxed()
    }

    fn act<'a>(&'a self, id: &'a SandboxId, action: &'a Action) -> BoxFuture<'a, Result<(), SandboxError>> {
        async move {
            self.get(id)?;
            if let Action::Wait { ms } = action {
                tokio::time::sleep(Duration::from_millis(*ms)).await;
            }
            Ok(())
        }
        .boxed()
    }
}
