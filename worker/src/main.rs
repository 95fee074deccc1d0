//! `flotilla-worker`: reads the configuration, starts tracing, runs the
//! worker until SIGTERM or Ctrl-C, flushes its traces, and exits non-zero
//! on a fatal error.

use std::process::ExitCode;

use flotilla_config::Config;
use flotilla_telemetry as telemetry;
use flotilla_telemetry::LogOutput;
use tokio_util::sync::CancellationToken;

/// mimalloc: claiming, running and ending tasks allocate many small,
/// short-lived blocks across the runtime's threads, where glibc's allocator
/// took about 40 % of the worker's CPU in a drain of no-op tasks.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let config = match Config::from_process_env() {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let telemetry = match telemetry::init("flotilla-worker", &config.telemetry, LogOutput::Stderr) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let ran = flotilla_worker::run(config, shutdown).await;
    telemetry.shutdown();
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Cancels `shutdown` on the first SIGTERM or SIGINT.
async fn cancel_on_signal(shutdown: CancellationToken) {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return,
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    shutdown.cancel();
}
