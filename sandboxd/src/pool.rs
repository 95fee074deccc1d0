//! The host's warm pool: desktops started ahead, per template and screen
//! size, so a create (from a worker or from anyone's SDK) is answered
//! without starting one. A taken desktop is replaced in the background; a
//! pool of size zero keeps nothing. Pooled desktops do not count against
//! the capacity: they run nothing of anyone's yet.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use flotilla_sandbox::{SandboxId, SandboxProvider, SandboxRequest};

use super::host::{lock, Host, LOCAL_LIFETIME};

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

    /// Starts desktops in the background until the pool is full again.
    pub fn refill(&self, host: &Arc<Host>) {
        if self.size == 0 || self.refilling.swap(true, Ordering::SeqCst) {
            return;
        }
        tokio::spawn(fill(Arc::downgrade(host)));
    }

    /// The desktops still waiting, taken out (to kill them at shutdown).
    pub fn drain(&self) -> Vec<SandboxId> {
        lock(&self.ready).drain().flat_map(|(_, ids)| ids).collect()
    }
}

/// Starts one desktop at a time until the pool holds its size; a failed
/// start ends the round (the next take starts another).
async fn fill(host: Weak<Host>) {
    loop {
        let Some(host) = host.upgrade() else { return };
        let pool = &host.pool;
        if pool.ready() >= pool.size {
            pool.refilling.store(false, Ordering::SeqCst);
            return;
        }
        let request = SandboxRequest { template: None, resolution: pool.resolution, timeout: LOCAL_LIFETIME };
        match host.local.create(&request).await {
            Ok(desktop) => {
                let key = (POOLED_TEMPLATE.to_owned(), pool.resolution);
                lock(&pool.ready).entry(key).or_default().push(desktop.id);
            }
            Err(error) => {
                tracing::warn!(%error, "a pooled desktop did not start");
                pool.refilling.store(false, Ordering::SeqCst);
                return;
            }
        }
    }
}
