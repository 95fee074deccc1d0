//! How a program starts inside a local sandbox. With isolation (the
//! default), it runs inside the sandbox's [jail](super::jail): its own
//! network, user, pid, IPC, UTS and cgroup namespaces, no capabilities, the
//! seccomp filter, and a minimal read-only view of the host. Without (the
//! development-only `FLOTILLA_SANDBOX_ISOLATION=none`) it is a plain process
//! in the sandbox's home. Either way the environment is built from scratch,
//! so no secret of the worker leaks in, and carries the sandbox's marker, so
//! a sweep of `/proc` finds everything the sandbox started, even what left
//! its process group.

use std::path::PathBuf;
use std::process::Stdio;

use tokio::process::Command;

use super::jail::{Jail, XAUTHORITY_PATH};
use super::process::{self, MARKER_VAR};

/// The `PATH` inside a sandbox.
const SANDBOX_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How local sandboxes are kept apart from the host and from each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// The jail, or no sandbox at all: a provider whose jail does not work
    /// here refuses to start, and never falls back.
    #[default]
    Full,
    /// Plain processes in their own process group and home, sharing the
    /// worker's user, network and files. For development only.
    None,
}

/// Where one sandbox's processes live and how they start.
#[derive(Debug, Clone)]
pub(crate) struct Launcher {
    pub marker: String,
    pub home: PathBuf,
    pub tmp: PathBuf,
    pub display: u32,
    /// The display's cookie file on the host.
    pub xauthority: PathBuf,
    /// The walls, or none with `Isolation::None`.
    pub jail: Option<Jail>,
}

impl Launcher {
    /// A command that runs `program args` inside the sandbox, in its home,
    /// with stdin closed. The caller picks the process group and output.
    pub fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut command = match &self.jail {
            Some(jail) => {
                let socket = x_socket(self.display);
                let (wrapper, argv) = jail.wrap(&self.home, &self.tmp, Some(&socket), program, args);
                let mut command = process::tied_to_worker(wrapper);
                command.args(argv);
                command
            }
            None => {
                let mut command = process::tied_to_worker(program);
                command.args(args);
                command
            }
        };
        let (tmp, xauthority) = match &self.jail {
            Some(_) => (PathBuf::from("/tmp"), PathBuf::from(XAUTHORITY_PATH)),
            None => (self.tmp.clone(), self.xauthority.clone()),
        };
        command
            .env_clear()
            .env("PATH", SANDBOX_PATH)
            .env("HOME", &self.home)
            .env("TMPDIR", tmp)
            .env("LANG", "C.UTF-8")
            .env("DISPLAY", format!(":{}", self.display))
            .env("XAUTHORITY", xauthority)
            .env(MARKER_VAR, &self.marker)
            .current_dir(&self.home)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
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
