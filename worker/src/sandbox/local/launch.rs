//! How a program starts inside a local sandbox. Under bubblewrap, when it
//! works on this machine, a program sees a read-only root, the sandbox's own
//! `/tmp`, its writable home (at the same path as on the host) and the
//! display's socket, in its own pid namespace that dies with it. Without
//! bubblewrap it is a plain process in the sandbox's home. Either way the
//! environment is built from scratch, so no secret of the worker leaks in,
//! and carries the sandbox's marker, so a sweep of `/proc` finds everything
//! the sandbox started, even what left its process group.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

/// The environment variable every sandbox process carries, set to the id.
pub(crate) const MARKER_VAR: &str = "FLOTILLA_SANDBOX";

/// The `PATH` inside a sandbox.
const SANDBOX_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How long the bubblewrap probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// How local sandboxes are isolated from the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Bubblewrap if a probe shows it works here, plain processes otherwise.
    #[default]
    Auto,
    /// Bubblewrap or nothing: creating a sandbox fails if it does not work.
    Bubblewrap,
    /// Plain processes in their own process group and home.
    None,
}

/// Where one sandbox's processes live and how they start.
#[derive(Debug, Clone)]
pub(crate) struct Launcher {
    pub marker: String,
    pub home: PathBuf,
    pub tmp: PathBuf,
    pub display: u32,
    pub bubblewrap: bool,
}

impl Launcher {
    /// A command that runs `program args` inside the sandbox, in its home,
    /// with stdin closed. The caller picks the process group and output.
    pub fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut command = if self.bubblewrap {
            let mut command = Command::new("bwrap");
            command.args(self.bwrap_args()).arg("--").arg(program).args(args);
            command
        } else {
            let mut command = Command::new(program);
            command.args(args);
            command
        };
        let tmp: &Path = if self.bubblewrap { Path::new("/tmp") } else { &self.tmp };
        command
            .env_clear()
            .env("PATH", SANDBOX_PATH)
            .env("HOME", &self.home)
            .env("TMPDIR", tmp)
            .env("LANG", "C.UTF-8")
            .env("DISPLAY", format!(":{}", self.display))
            .env(MARKER_VAR, &self.marker)
            .current_dir(&self.home)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    }

    fn bwrap_args(&self) -> Vec<String> {
        let socket = x_socket(self.display).display().to_string();
        let home = self.home.display().to_string();
        let tmp = self.tmp.display().to_string();
        let mut args: Vec<String> = Vec::new();
        let mut push = |items: &[&str]| args.extend(items.iter().map(|s| (*s).to_owned()));
        push(&["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]);
        // /tmp first: the home may live under the host's /tmp.
        push(&["--bind", &tmp, "/tmp"]);
        push(&["--bind", &socket, &socket]);
        push(&["--bind", &home, &home, "--chdir", &home]);
        push(&["--unshare-pid", "--unshare-uts", "--hostname", "sandbox"]);
        push(&["--die-with-parent", "--new-session"]);
        args
    }
}

/// The Unix socket of display `:n` on the host.
pub(crate) fn x_socket(display: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/.X11-unix/X{display}"))
}

/// The lock file of display `:n` on the host.
pub(crate) fn x_lock(display: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/.X{display}-lock"))
}

/// Whether bubblewrap can make a pid namespace with a read-only root here.
pub(crate) async fn bubblewrap_works() -> bool {
    let mut command = Command::new("bwrap");
    command
        .args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--die-with-parent", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let Ok(mut child) = command.spawn() else {
        return false;
    };
    matches!(tokio::time::timeout(PROBE_TIMEOUT, child.wait()).await, Ok(Ok(status)) if status.success())
}
