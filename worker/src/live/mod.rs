//! Live views of the desktops this worker's tasks hold. A session that
//! holds a desktop it can show registers it here ([`LiveDesktops::show`]);
//! the registration's guard, dropped when the session lets the desktop go,
//! takes it away again. The first viewer of a desktop starts its VNC server
//! (an x11vnc on a local display, [`vnc`], or the desktop's own stream
//! elsewhere, [`remote`]), each viewer's connection is bridged to it
//! ([`socket`], with [`rfb`] keeping a view-only viewer's input off the
//! desktop), and it stops [`LINGER`] after the last viewer left, unless one
//! came back by then (a page reloaded, a view switched to control), which
//! finds it running.
//!
//! Invariant: a VNC server runs for a task only while that task holds its
//! desktop here and a viewer is attached or left less than [`LINGER`] ago;
//! ending the task (or the worker) stops it.

/// Live views of desktops a sandbox serves itself, over RFB on a WebSocket.
pub mod remote {
    pub use flotilla_sandbox::remote::*;
}
pub mod rfb;
pub mod socket;
pub mod vnc;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flotilla_queue::live::LiveViews;
use flotilla_types::TaskId;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use self::remote::{RemoteDesktop, RemoteStream};
use self::vnc::VncServer;
pub use self::vnc::{VncError, X11Display, TASK_VAR};

/// How long a VNC server outlives its last viewer: a viewer that comes back
/// by then (a reloaded page, a view switched to control) finds it running,
/// instead of waiting for a stop and a fresh start.
pub const LINGER: Duration = Duration::from_secs(8);

/// What a shown desktop's viewers are bridged to.
#[derive(Clone)]
pub enum LiveSource {
    /// A display on this host: an x11vnc is started on it.
    X11(X11Display),
    /// A desktop that serves its own stream elsewhere (an E2B sandbox).
    Remote(Arc<dyn RemoteStream>),
}

/// Where an attached viewer's bytes go.
#[derive(Clone)]
pub enum ViewTarget {
    /// The Unix socket of the desktop's x11vnc.
    Local(PathBuf),
    /// The desktop's own stream.
    Remote(RemoteDesktop),
}

/// A VNC server while viewers watch.
enum Running {
    Local(VncServer),
    Remote(RemoteDesktop),
}

/// The desktops this worker can show, and where the API reaches them.
#[derive(Clone)]
pub struct LiveDesktops {
    inner: Arc<Inner>,
}

struct Inner {
    /// This worker's HTTP side as the API reaches it.
    endpoint: String,
    views: LiveViews,
    desktops: Mutex<HashMap<TaskId, Arc<Shown>>>,
}

/// One desktop on show: its display, its VNC server while viewers watch,
/// and a token cancelled when it is taken away.
struct Shown {
    source: LiveSource,
    server: tokio::sync::Mutex<Serving>,
    gone: CancellationToken,
}

#[derive(Default)]
struct Serving {
    server: Option<Running>,
    viewers: usize,
    /// Counts the times the last viewer left: a stop scheduled then goes
    /// ahead only if no viewer came and left again since.
    emptied: u64,
}

/// Why a viewer could not be attached.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error("this worker shows no desktop of that task")]
    NotShown,
    #[error(transparent)]
    Vnc(#[from] VncError),
    #[error("cannot start the desktop's stream: {0}")]
    Remote(String),
}

impl LiveDesktops {
    /// Desktops reached at `endpoint` (`http://host:port`), routed through `views`.
    pub fn new(endpoint: String, views: LiveViews) -> Self {
        Self { inner: Arc::new(Inner { endpoint, views, desktops: Mutex::new(HashMap::new()) }) }
    }

    /// Puts `task`'s desktop on show until the returned guard is dropped,
    /// and records where the API finds it.
    pub async fn show(&self, task: &TaskId, source: LiveSource) -> ShowGuard {
        let shown = Arc::new(Shown { source, server: Default::default(), gone: CancellationToken::new() });
        if let Some(old) = self.lock().insert(task.clone(), Arc::clone(&shown)) {
            old.gone.cancel();
        }
        if let Err(e) = self.inner.views.set_route(task, &self.inner.endpoint).await {
            warn!(error = %e, "could not record where the task's live view is");
        }
        ShowGuard { desktops: self.clone(), task: task.clone(), shown }
    }

    /// The shared view tokens and routes.
    pub fn views(&self) -> &LiveViews {
        &self.inner.views
    }

    /// Attaches one viewer to `task`'s desktop, starting its VNC server if
    /// this is the first.
    pub async fn attach(&self, task: &TaskId) -> Result<Viewer, LiveError> {
        let shown = self.lock().get(task).cloned().ok_or(LiveError::NotShown)?;
        let mut serving = shown.server.lock().await;
        if shown.gone.is_cancelled() {
            return Err(LiveError::NotShown);
        }
        let target = match &serving.server {
            Some(Running::Local(server)) => ViewTarget::Local(server.socket.clone()),
            Some(Running::Remote(desktop)) => ViewTarget::Remote(desktop.clone()),
            None => {
                let (running, target) = start(task, &shown.source).await?;
                info!(task_id = %task, "live view started");
                serving.server = Some(running);
                target
            }
        };
        serving.viewers += 1;
        drop(serving);
        Ok(Viewer { shown: Some(shown), target, task: task.clone() })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TaskId, Arc<Shown>>> {
        self.inner.desktops.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes every desktop off show (the worker is stopping).
    pub async fn shutdown(&self) {
        let shown: Vec<Arc<Shown>> = self.lock().drain().map(|(_, s)| s).collect();
        for one in shown {
            one.take_down().await;
        }
    }
}

/// Starts the VNC server of `source`.
async fn start(task: &TaskId, source: &LiveSource) -> Result<(Running, ViewTarget), LiveError> {
    match source {
        LiveSource::X11(display) => {
            let server = VncServer::start(task, display).await?;
            let socket = server.socket.clone();
            Ok((Running::Local(server), ViewTarget::Local(socket)))
        }
        LiveSource::Remote(stream) => {
            let desktop = stream.start().await.map_err(LiveError::Remote)?;
            Ok((Running::Remote(desktop.clone()), ViewTarget::Remote(desktop)))
        }
    }
}

impl Shown {
    async fn take_down(&self) {
        self.gone.cancel();
        let running = self.server.lock().await.server.take();
        self.stop(running).await;
    }

    async fn stop(&self, running: Option<Running>) {
        match (running, &self.source) {
            (Some(Running::Local(server)), _) => server.stop().await,
            (Some(Running::Remote(_)), LiveSource::Remote(stream)) => stream.stop().await,
            _ => {}
        }
    }
}

/// Keeps a task's desktop on show; dropping it stops the view.
pub struct ShowGuard {
    desktops: LiveDesktops,
    task: TaskId,
    shown: Arc<Shown>,
}

impl Drop for ShowGuard {
    fn drop(&mut self) {
        {
            let mut desktops = self.desktops.lock();
            if desktops.get(&self.task).is_some_and(|s| Arc::ptr_eq(s, &self.shown)) {
                desktops.remove(&self.task);
            }
        }
        self.shown.gone.cancel();
        let (shown, views, task) = (Arc::clone(&self.shown), self.desktops.inner.views.clone(), self.task.clone());
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        runtime.spawn(async move {
            shown.take_down().await;
            if let Err(e) = views.clear_route(&task).await {
                warn!(error = %e, "could not clear the task's live view route");
            }
        });
    }
}

/// One attached viewer; leaving (or dropping it) stops the VNC server when
/// it was the last.
pub struct Viewer {
    shown: Option<Arc<Shown>>,
    /// Where the viewer's bytes go.
    pub target: ViewTarget,
    task: TaskId,
}

impl Viewer {
    /// Cancelled when the desktop is taken off show.
    pub fn gone(&self) -> CancellationToken {
        self.shown.as_ref().map(|s| s.gone.clone()).unwrap_or_default()
    }

    /// Detaches the viewer now.
    pub async fn leave(mut self) {
        if let Some(shown) = self.shown.take() {
            detach(shown, &self.task).await;
        }
    }
}

impl Drop for Viewer {
    fn drop(&mut self) {
        let Some(shown) = self.shown.take() else { return };
        let task = self.task.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move { detach(shown, &task).await });
        }
    }
}

async fn detach(shown: Arc<Shown>, task: &TaskId) {
    let emptied = {
        let mut serving = shown.server.lock().await;
        serving.viewers = serving.viewers.saturating_sub(1);
        if serving.viewers > 0 || serving.server.is_none() {
            return;
        }
        serving.emptied += 1;
        serving.emptied
    };
    let task = task.clone();
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
    runtime.spawn(async move {
        tokio::select! {
            () = tokio::time::sleep(LINGER) => {}
            // Taking the desktop off show stops its server itself.
            () = shown.gone.cancelled() => return,
        }
        let mut serving = shown.server.lock().await;
        if serving.viewers == 0 && serving.emptied == emptied {
            if let Some(running) = serving.server.take() {
                shown.stop(Some(running)).await;
                info!(task_id = %task, "live view stopped: no viewer left");
            }
        }
    });
}
