//! Workers run inside the test process, on the real worker loop, until
//! stopped or dropped.

use flotilla_config::Config;
use flotilla_worker::tools::Tools;
use flotilla_worker::Registry;
use tokio_util::sync::CancellationToken;

/// A worker running in this process until the guard drops.
pub struct InProcessWorker {
    shutdown: CancellationToken,
    handle: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

impl InProcessWorker {
    pub fn start(config: Config, registry: Registry) -> Self {
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(flotilla_worker::run_with(config, registry, shutdown.clone()));
        Self { shutdown, handle: Some(handle) }
    }

    /// A worker with these sandboxes and store instead of the configured ones.
    pub fn start_with_tools(config: Config, registry: Registry, tools: Tools) -> Self {
        let shutdown = CancellationToken::new();
        let handle = tokio::spawn(flotilla_worker::run_with_tools(config, registry, tools, shutdown.clone()));
        Self { shutdown, handle: Some(handle) }
    }

    /// Stops the worker and waits until it has drained.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(handle) = self.handle.take() {
            handle.await.expect("worker task").expect("worker ran");
        }
    }
}

impl Drop for InProcessWorker {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
