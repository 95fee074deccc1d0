//! The host's warm pool: desktops started ahead, per template and screen
//! size, so a create (from a worker or from anyone's SDK) is answered
//! without starting one. A taken desktop is replaced in the background (by
//! the [host](super::host)); a pool of size zero keeps nothing. Pooled
//! desktops do not count against the capacity: they run nothing of
//! anyone's yet.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use flotilla_sandbox::{SandboxId, SandboxRequest};

use super::sync::lock;

/// The template the pool keeps desktops of.
pub(crate) const POOLED_TEMPLATE: &str = flotilla_e2b::DEFAULT_TEMPLATE;

/// A kind of pooled desktop: its template and screen size.
type Kind = (String, (u32, u32));

/// Desktops waiting to be handed out.
pub(crate) struct Pool {
    /// How many desktops to keep started.
    size: usize,
    /// The screen they are started at.
    resolution: (u32, u32),
    ready: Mutex<HashMap<Kind, Vec<SandboxId>>>,
    refilling: AtomicBool,
}

impl Pool {
    pub fn new(size: usize) -> Self {
        Self {
            size,
            resolution: SandboxRequest::default().resolution,
            ready: Mutex::new(HashMap::new()),
            refilling: AtomicBool::new(false),
        }
    }

    /// A started desktop of `template` at `resolution`, if one waits.
    pub fn take(&self, template: &str, resolution: (u32, u32)) -> Option<SandboxId> {
        lock(&self.ready).get_mut(&(template.to_owned(), resolution))?.pop()
    }

    /// How many desktops wait now.
    pub fn ready(&self) -> usize {
        lock(&self.ready).values().map(Vec::len).sum()
    }

    /// Whether a refill should start now: the pool wants desktops and no
    /// refill runs; the caller then runs one and calls [`Pool::refilled`].
    pub fn start_refill(&self) -> bool {
        self.size > 0 && !self.refilling.swap(true, Ordering::SeqCst)
    }

    /// Whether the pool holds fewer desktops than its size.
    pub fn wants_more(&self) -> bool {
        self.ready() < self.size
    }

    /// The screen pooled desktops are started at.
    pub fn resolution(&self) -> (u32, u32) {
        self.resolution
    }

    /// Takes in a started desktop.
    pub fn put(&self, id: SandboxId) {
        lock(&self.ready).entry((POOLED_TEMPLATE.to_owned(), self.resolution)).or_default().push(id);
    }

    /// The refill that [`Pool::start_refill`] allowed has ended.
    pub fn refilled(&self) {
        self.refilling.store(false, Ordering::SeqCst);
    }

    /// The desktops still waiting, taken out (to kill them at shutdown).
    pub fn drain(&self) -> Vec<SandboxId> {
        lock(&self.ready).drain().flat_map(|(_, ids)| ids).collect()
    }
}
