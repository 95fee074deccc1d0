//! Bringing up a sandbox's desktop. A template may start its display itself;
//! the stock `desktop` template does not (the Desktop SDK starts it after
//! the REST create). So a new sandbox is probed first (`xdotool
//! getdisplaygeometry`, which also reads the screen's size); only when
//! nothing answers are Xvfb at the requested size, the session and a
//! maximized terminal started, and the probe repeated until the deadline.

use std::time::{Duration, Instant};

use super::envd::{Envd, EnvdError, EnvdTarget};

/// The display every E2B desktop uses, given to the sandbox as `DISPLAY`.
pub(crate) const DISPLAY: &str = ":0";
/// Asks the display for its size; fails while no display answers.
const PROBE_COMMAND: &str = "xdotool getdisplaygeometry";
/// How long one probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long starting the desktop's programs may take (they go to the background).
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// The pause between probes while the desktop comes up.
const PROBE_INTERVAL: Duration = Duration::from_millis(250);

/// The screen size if the display answers, `None` if it does not.
pub(crate) async fn probe(envd: &Envd, target: &EnvdTarget) -> Result<Option<(u32, u32)>, EnvdError> {
    let output = envd.run(target, PROBE_COMMAND, PROBE_TIMEOUT).await?;
    if output.exit_code != 0 {
        return Ok(None);
    }
    Ok(parse_geometry(&String::from_utf8_lossy(&output.stdout)))
}

/// `"1024 768\n"` as `(1024, 768)`.
fn parse_geometry(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.split_whitespace().map(str::parse::<u32>);
    match (parts.next(), parts.next()) {
        (Some(Ok(width)), Some(Ok(height))) => Some((width, height)),
        _ => None,
    }
}

/// Starts Xvfb at `width`x`height`, waits for it, then the session and a
/// maximized terminal, all detached so the command returns at once.
fn start_command((width, height): (u32, u32)) -> String {
    let detach = ">/dev/null 2>&1 </dev/null &";
    format!(
        "setsid Xvfb {DISPLAY} -ac -screen 0 {width}x{height}x24 -retro -dpi 96 -nolisten tcp {detach}\n\
         for _ in $(seq 100); do xdpyinfo -display {DISPLAY} >/dev/null 2>&1 && break; sleep 0.1; done\n\
         setsid startxfce4 {detach}\n\
         setsid xfce4-terminal --maximize {detach}\n"
    )
}

/// Waits until the display answers, starting the desktop if nothing does
/// at first; the screen's size once it answers.
pub(crate) async fn wait_until_ready(
    envd: &Envd,
    target: &EnvdTarget,
    resolution: (u32, u32),
    timeout: Duration,
) -> Result<(u32, u32), EnvdError> {
    let deadline = Instant::now() + timeout;
    if let Some(size) = probe(envd, target).await? {
        return Ok(size);
    }
    let started = envd.run(target, &start_command(resolution), START_TIMEOUT).await?;
    if started.exit_code != 0 {
        let stderr = String::from_utf8_lossy(&started.stderr);
        tracing::warn!(exit_code = started.exit_code, stderr = %stderr.trim(), "starting the e2b desktop failed");
    }
    loop {
        if let Some(size) = probe(envd, target).await? {
            return Ok(size);
        }
        if Instant::now() >= deadline {
            return Err(EnvdError::Unavailable(format!("the desktop did not answer within {timeout:?}")));
        }
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_is_parsed() {
        assert_eq!(parse_geometry("1024 768\n"), Some((1024, 768)));
        assert_eq!(parse_geometry("1024\n"), None);
        assert_eq!(parse_geometry("wide tall"), None);
    }

    #[test]
    fn the_start_command_uses_the_requested_size() {
        let command = start_command((800, 600));
        assert!(command.contains("Xvfb :0 -ac -screen 0 800x600x24"), "{command}");
        assert!(command.lines().all(|l| !l.starts_with("setsid") || l.ends_with('&')), "{command}");
    }
}
