//! One x11vnc attached to a task's display, on a loopback port it picks
//! itself. It is started through `setpriv --pdeathsig KILL`, so it dies with
//! the worker even when the worker is killed outright, and it carries the
//! task id in [`TASK_VAR`] so its processes can be found by task.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use flotilla_shared::TaskId;

/// The environment variable naming the task a VNC server shows.
pub const TASK_VAR: &str = "FLOTILLA_LIVE_VIEW_TASK";
/// How long x11vnc may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// The first port x11vnc tries; it probes upwards for a free one.
const FIRST_PORT: u16 = 5900;

/// The X display a VNC server attaches to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct X11Display {
    /// The display number (`:n`).
    pub number: u32,
    /// The X authority file that lets a client in, when the display wants one.
    pub xauthority: Option<PathBuf>,
}

/// Why a VNC server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum VncError {
    #[error("cannot start x11vnc (is it installed?): {0}")]
    Spawn(std::io::Error),
    #[error("x11vnc did not start listening: {0}")]
    NotListening(String),
}

/// A running x11vnc; killed when dropped.
#[derive(Debug)]
pub struct VncServer {
    child: Child,
    /// The loopback port it serves RFB on.
    pub port: u16,
}

impl VncServer {
    /// Starts x11vnc on `display` for `task` and waits until it listens.
    pub async fn start(task: &TaskId, display: &X11Display) -> Result<Self, VncError> {
        let mut command = command(task, display);
        let mut child = command.spawn().map_err(VncError::Spawn)?;
        let stdout = child.stdout.take();
        match tokio::time::timeout(START_TIMEOUT, listening_port(stdout)).await {
            Ok(Some(port)) => Ok(Self { child, port }),
            Ok(None) => Err(VncError::NotListening(exit_text(&mut child).await)),
            Err(_) => {
                let _ = child.start_kill();
                Err(VncError::NotListening("no port after 10 s".into()))
            }
        }
    }

    /// Kills the server and waits for it to be gone.
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }
}

fn command(task: &TaskId, display: &X11Display) -> Command {
    let mut command = Command::new("setpriv");
    command
        .args(["--pdeathsig", "KILL", "--", "x11vnc"])
        .args(["-display", &format!(":{}", display.number)])
        .args(["-autoport", &FIRST_PORT.to_string(), "-localhost", "-noipv6"])
        .args(["-shared", "-forever", "-nopw", "-norc", "-nosel", "-nobell", "-noxrecord", "-nowf"])
        .args(["-wait", "5", "-defer", "5", "-nonap"])
        // No MIT-SHM: the server is ended with SIGKILL, which would leave
        // its SysV segments behind until the host's limit (shmmni) is spent.
        .arg("-noshm")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env(TASK_VAR, task.as_str())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    if let Some(auth) = &display.xauthority {
        command.args(["-auth"]).arg(auth);
        command.env("XAUTHORITY", auth);
    }
    command
}

/// Reads x11vnc's `PORT=n` line; later output keeps being drained so the
/// server never blocks on a full pipe.
async fn listening_port(stdout: Option<tokio::process::ChildStdout>) -> Option<u16> {
    let mut lines = BufReader::new(stdout?).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(port) = line.trim().strip_prefix("PORT=").and_then(|p| p.parse().ok()) {
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return Some(port);
        }
    }
    None
}

async fn exit_text(child: &mut Child) -> String {
    match child.wait().await {
        Ok(status) => format!("x11vnc exited ({status})"),
        Err(e) => e.to_string(),
    }
}
