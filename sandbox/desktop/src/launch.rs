//! How a program starts inside a local sandbox. With isolation (the
//! default), it runs inside the sandbox's [jail](super::jail): its own
//! network, user, pid, IPC, UTS and cgroup namespaces, no capabilities, the
//! seccomp filter, and a minimal read-only view of the host. Without (the
//! development-only `FLOTILLA_SANDBOX_ISOLATION=none`) it is a plain process
//! in the sandbox's home. Either way the environment is built from scratch,
//! so no secret of the worker leaks in, and carries the sandbox's marker, so
//! a sweep of `/proc` finds everything the sandbox started, even what left
//! its process group. Once a jailed desktop is up, [`Launcher::spawn`]
//! starts commands through the sandbox's [spawner](super::spawn) (a fork
//! inside the jail) instead of building the jail again for each.

use std::path::PathBuf;
use std::process::Stdio;

use tokio::process::Command;

use super::jail::{Jail, XAccess, XAUTHORITY_PATH, X_SOCKET_DIR};
use super::process::{self, MARKER_VAR};
use super::spawn::{SandboxChild, Spawner, Streams};
use flotilla_sandbox::SandboxError;

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
    /// What the sandbox's template adds to every program's environment
    /// (its locale, time zone and own variables), over the defaults.
    pub env: Vec<(String, String)>,
    /// The jail's spawner, once it is up: commands start through it.
    pub spawner: Option<Spawner>,
}

impl Launcher {
    /// A command that runs `program args` inside the sandbox, in its home,
    /// with stdin closed. The caller picks the process group and output.
    pub fn command(&self, program: &str, args: &[&str]) -> Command {
        let socket = x_socket(self.display);
        self.command_with(XAccess::Client(&socket), program, args)
    }

    /// The display server's command: inside the jail it makes its socket in
    /// the sandbox's own socket directory, which the host reaches.
    pub fn server_command(&self, program: &str, args: &[&str]) -> Command {
        self.command_with(XAccess::Server, program, args)
    }

    /// The spawner's command: the jail's whole chain with the spawner's
    /// program (`binary` on the host) bound read-only inside, as a client
    /// of the display. `None` without a jail.
    pub fn spawner_command(&self, binary: &std::path::Path) -> Option<Command> {
        let socket = x_socket(self.display);
        let bind = (binary, super::spawn::JAILED_PATH);
        self.jail.as_ref().map(|_| self.command_in(XAccess::Client(&socket), Some(bind), super::spawn::JAILED_PATH, &[]))
    }

    /// Starts `program args` inside the sandbox, in its home, with `extra`
    /// over its environment, leading a process group of its own, its
    /// standard streams as `streams` says: through the jail's spawner when
    /// it is up, else through the chain.
    pub async fn spawn(
        &self,
        program: &str,
        args: &[&str],
        extra: &[(String, String)],
        streams: Streams,
    ) -> Result<SandboxChild, SandboxError> {
        let cannot = |e: std::io::Error| SandboxError::Command(format!("cannot start {program}: {e}"));
        if let Some(spawner) = &self.spawner {
            let mut env = self.environment();
            env.extend(extra.iter().cloned());
            let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
            let cwd = self.home.display().to_string();
            return spawner.spawn(program, &args, env, cwd, streams).await.map_err(cannot);
        }
        let mut command = self.command(program, args);
        command.envs(extra.iter().map(|(k, v)| (k, v))).process_group(0);
        match streams {
            Streams::Pipes { stdin } => {
                command.stdin(if stdin { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::piped()).stderr(Stdio::piped());
            }
            Streams::Terminal(terminal) => {
                let (output, error) = (terminal.try_clone().map_err(cannot)?, terminal.try_clone().map_err(cannot)?);
                command.stdin(Stdio::from(terminal)).stdout(Stdio::from(output)).stderr(Stdio::from(error));
            }
        }
        // The command holds the child's ends until it is dropped: the host
        // then keeps none open.
        let child = command.spawn().map(SandboxChild::of_chain).map_err(cannot);
        drop(command);
        child
    }

    /// Every program's environment inside the sandbox, built from scratch.
    fn environment(&self) -> Vec<(String, String)> {
        let (tmp, xauthority) = match &self.jail {
            Some(_) => (PathBuf::from("/tmp"), PathBuf::from(XAUTHORITY_PATH)),
            None => (self.tmp.clone(), self.xauthority.clone()),
        };
        let mut env = vec![
            ("PATH".to_owned(), SANDBOX_PATH.to_owned()),
            ("HOME".to_owned(), self.home.display().to_string()),
            ("TMPDIR".to_owned(), tmp.display().to_string()),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
            ("DISPLAY".to_owned(), format!(":{}", self.display)),
            ("XAUTHORITY".to_owned(), xauthority.display().to_string()),
            (MARKER_VAR.to_owned(), self.marker.clone()),
        ];
        env.extend(self.env.iter().cloned());
        env
    }

    fn command_with(&self, x: XAccess<'_>, program: &str, args: &[&str]) -> Command {
        self.command_in(x, None, program, args)
    }

    fn command_in(&self, x: XAccess<'_>, bind: Option<(&std::path::Path, &str)>, program: &str, args: &[&str]) -> Command {
        let mut command = match &self.jail {
            Some(jail) => {
                let (wrapper, argv) = jail.wrap(&self.home, x, bind, program, args);
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
        command.env_clear().envs(self.environment()).current_dir(&self.home).stdin(Stdio::null()).kill_on_drop(true);
        command
    }
}

/// The Unix socket of display `:n` on the host.
pub(crate) fn x_socket(display: u32) -> PathBuf {
    PathBuf::from(format!("{X_SOCKET_DIR}/X{display}"))
}

/// The lock file of display `:n` on the host.
pub(crate) fn x_lock(display: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/.X{display}-lock"))
}

/// Whether display `:n` may be taken: nothing is at its socket path, or
/// only a link to a socket that is gone (left by a desktop whose worker
/// died), which is removed. Another user's link that cannot be removed, or
/// a live server's socket, keeps the display taken.
pub(crate) fn display_is_free(display: u32) -> bool {
    let socket = x_socket(display);
    match std::fs::symlink_metadata(&socket) {
        Err(_) => true,
        Ok(meta) if meta.file_type().is_symlink() && !socket.exists() => std::fs::remove_file(&socket).is_ok(),
        Ok(_) => false,
    }
}

/// Removes what a desktop in `dir` left of display `:n` on the host: the
/// link to a jailed server's socket, while it points into `dir`; an
/// unjailed server's socket and lock, while the lock names a process the
/// desktop started (`ours`). Another server's files stay.
pub(crate) fn remove_display_files(display: u32, dir: &std::path::Path, ours: impl Fn(u32) -> bool) {
    let socket = x_socket(display);
    if let Ok(target) = std::fs::read_link(&socket) {
        if target.starts_with(dir) {
            let _ = std::fs::remove_file(&socket);
        }
        return;
    }
    let lock = x_lock(display);
    let owner = std::fs::read_to_string(&lock).ok().and_then(|t| t.trim().parse::<u32>().ok());
    if owner.is_some_and(ours) {
        let _ = std::fs::remove_file(&socket);
        let _ = std::fs::remove_file(&lock);
    }
}

/// The last line of a log, to say why a program did not start.
pub(crate) fn log_tail(path: &std::path::Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output").trim().to_owned()
}
