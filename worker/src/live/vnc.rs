//! One x11vnc attached to a task's display, listening only on a Unix
//! socket in a directory of its own that only the worker's user may enter
//! (0700): x11vnc asks no password (`-nopw`), so nothing but the worker may
//! reach it, and no TCP port is opened at all.
//! It is started through `setpriv --pdeathsig KILL`, so it dies with the
//! worker even when the worker is killed outright, and it carries the task
//! id in [`TASK_VAR`] so its processes can be found by task.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use flotilla_types::TaskId;

/// The environment variable naming the task a VNC server shows.
pub const TASK_VAR: &str = "FLOTILLA_LIVE_VIEW_TASK";
/// How long x11vnc may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// What x11vnc writes (to stderr) once its Unix socket listens.
const LISTENING: &str = "listening on unix socket:";
/// The socket's name in its private directory.
const SOCKET_NAME: &str = "rfb.sock";

pub use flotilla_sandbox::X11Display;

/// Why a VNC server could not be started.
#[derive(Debug, thiserror::Error)]
pub enum VncError {
    #[error("cannot start x11vnc (is it installed?): {0}")]
    Spawn(std::io::Error),
    #[error("cannot make the VNC server's private directory: {0}")]
    Directory(std::io::Error),
    #[error("x11vnc did not start listening: {0}")]
    NotListening(String),
}

/// A running x11vnc; killed, and its directory removed, when dropped.
#[derive(Debug)]
pub struct VncServer {
    child: Child,
    dir: PrivateDir,
    /// The Unix socket it serves RFB on.
    pub socket: PathBuf,
}

impl VncServer {
    /// Starts x11vnc on `display` for `task` and waits until it listens.
    pub async fn start(task: &TaskId, display: &X11Display) -> Result<Self, VncError> {
        let dir = PrivateDir::create().map_err(VncError::Directory)?;
        let socket = dir.path.join(SOCKET_NAME);
        let mut command = command(task, display, &socket);
        let mut child = command.spawn().map_err(VncError::Spawn)?;
        let stderr = child.stderr.take();
        match tokio::time::timeout(START_TIMEOUT, listening(stderr)).await {
            Ok(true) => Ok(Self { child, dir, socket }),
            Ok(false) => Err(VncError::NotListening(exit_text(&mut child).await)),
            Err(_) => {
                let _ = child.start_kill();
                Err(VncError::NotListening("no socket after 10 s".into()))
            }
        }
    }

    /// Kills the server and waits for it to be gone.
    pub async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
        drop(self.dir);
    }
}

/// What the private directories' names start with, before the worker's pid.
const DIR_PREFIX: &str = "flotilla-vnc-";

/// A directory only the worker's user may enter, made afresh (never one
/// that was there before) and removed with what is in it when dropped. Its
/// name carries the worker's pid, so that what a worker killed outright
/// left behind is removed when another starts a VNC server on the host.
#[derive(Debug)]
struct PrivateDir {
    path: PathBuf,
}

impl PrivateDir {
    fn create() -> std::io::Result<Self> {
        let parent = std::env::temp_dir();
        sweep_dead(&parent);
        let name = format!("{DIR_PREFIX}{}-{:016x}", std::process::id(), rand::random::<u64>());
        let path = parent.join(name);
        std::fs::DirBuilder::new().mode(0o700).create(&path)?;
        Ok(Self { path })
    }
}

/// Removes the private directories in `parent` of processes of this user
/// that are gone.
fn sweep_dead(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else { continue };
        let Some(pid) = rest.split_once('-').and_then(|(pid, _)| pid.parse::<u32>().ok()) else { continue };
        let ours = entry.metadata().is_ok_and(|m| m.is_dir() && Some(m.uid()) == me);
        if ours && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn command(task: &TaskId, display: &X11Display, socket: &Path) -> Command {
    let mut command = Command::new("setpriv");
    command
        .args(["--pdeathsig", "KILL", "--", "x11vnc"])
        .args(["-display", &format!(":{}", display.number)])
        .arg("-unixsock")
        .arg(socket)
        // No TCP port at all: `-rfbport 0` ends IPv4's, `-rfbportv6 0`
        // IPv6's (which `-noipv6` alone leaves on); `-localhost` is left out
        // as it refuses Unix socket clients too.
        .args(["-rfbport", "0", "-rfbportv6", "0", "-listen", "127.0.0.1", "-noipv6"])
        .args(["-shared", "-forever", "-nopw", "-norc", "-nosel", "-nobell", "-noxrecord", "-nowf"])
        .args(["-wait", "5", "-defer", "5", "-nonap"])
        // No MIT-SHM: the server is ended with SIGKILL, which would leave
        // its SysV segments behind until the host's limit (shmmni) is spent.
        .arg("-noshm")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env(TASK_VAR, task.as_str())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(auth) = &display.xauthority {
        command.args(["-auth"]).arg(auth);
        command.env("XAUTHORITY", auth);
    }
    command
}

/// Waits for x11vnc's line saying its socket listens; later output keeps
/// being drained so the server never blocks on a full pipe.
async fn listening(stderr: Option<tokio::process::ChildStderr>) -> bool {
    let Some(stderr) = stderr else { return false };
    let mut lines = BufReader::new(stderr).split(b'\n');
    while let Ok(Some(line)) = lines.next_segment().await {
        if String::from_utf8_lossy(&line).contains(LISTENING) {
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_segment().await {} });
            return true;
        }
    }
    false
}

async fn exit_text(child: &mut Child) -> String {
    match child.wait().await {
        Ok(status) => format!("x11vnc exited ({status})"),
        Err(e) => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_of_gone_processes_are_swept_and_live_ones_kept() {
        let parent = std::env::temp_dir().join(format!("flotilla-vnc-sweep-test-{:016x}", rand::random::<u64>()));
        std::fs::create_dir(&parent).expect("parent");
        let mut gone = std::process::Command::new("true").spawn().expect("a process that ends");
        gone.wait().expect("it ends");
        let dead = parent.join(format!("{DIR_PREFIX}{}-00", gone.id()));
        let alive = parent.join(format!("{DIR_PREFIX}{}-00", std::process::id()));
        let other = parent.join("flotilla-vnc-notapid");
        for dir in [&dead, &alive, &other] {
            std::fs::create_dir(dir).expect("dir");
        }
        std::fs::write(dead.join(SOCKET_NAME), b"").expect("a file in it");
        sweep_dead(&parent);
        assert!(!dead.exists(), "a gone worker's directory is removed");
        assert!(alive.exists() && other.exists(), "a live worker's, and what is not ours, stay");
        std::fs::remove_dir_all(parent).expect("clean up");
    }
}
