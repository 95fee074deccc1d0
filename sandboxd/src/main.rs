//! `flotilla-sandboxd`: serves this machine's local desktops over E2B's
//! protocol until SIGINT or SIGTERM, then kills them all. Settings come
//! from the environment (`FLOTILLA_SANDBOXD_*` and the isolation settings).

use flotilla_config::Config;
use flotilla_sandboxd::Sandboxd;
use flotilla_telemetry::LogOutput;
use tokio::signal::unix::{signal, SignalKind};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let config = match Config::from_process_env() {
        Ok(config) => config,
        Err(e) => return fail(&e),
    };
    let telemetry = match flotilla_telemetry::init("flotilla-sandboxd", &config.telemetry, LogOutput::Stderr) {
        Ok(telemetry) => telemetry,
        Err(e) => return fail(&e),
    };
    let host = match Sandboxd::serve(&config).await {
        Ok(host) => host,
        Err(e) => return fail(&e),
    };
    println!(
        "flotilla-sandboxd: E2B_API_URL={} E2B_SANDBOX_URL={} E2B_DOMAIN={}",
        host.api_url(),
        host.sandbox_url(),
        host.domain()
    );
    let (Ok(mut terminate), Ok(mut interrupt)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        return fail(&"cannot listen for signals");
    };
    tokio::select! {
        _ = terminate.recv() => {}
        _ = interrupt.recv() => {}
    }
    host.shutdown().await;
    telemetry.shutdown();
    std::process::ExitCode::SUCCESS
}

/// One line naming the problem, and a failing exit.
fn fail(problem: &dyn std::fmt::Display) -> std::process::ExitCode {
    eprintln!("flotilla-sandboxd: {problem}");
    std::process::ExitCode::FAILURE
}
