//! Bringing up and tearing down one local desktop. Xvfb picks a free display
//! itself (`-displayfd`) and says so once it accepts connections; it listens
//! on no TCP port and admits only clients with the sandbox's
//! [cookie](super::xauth). It keeps its abstract socket: that is what makes
//! `-displayfd`'s choice safe (without it, a starting server unlinks a live
//! server's path socket while it probes a number), and abstract sockets
//! belong to a network namespace, so no jailed sandbox can reach one. With isolation, the
//! [jail](super::jail)'s namespace holder and network come up next; openbox
//! says it is ready through its `--startup` command; the terminal is ready
//! once openbox manages a mapped window with its title. Every wait is for a
//! signal, with a deadline. All processes join the Xvfb's process group and
//! carry the sandbox's marker, so teardown finds them all.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};

use super::display::Display;
use super::jail::{self, Jail, JailSettings};
use super::launch::{self, Launcher};
use super::process::{self, Signal, MARKER_VAR};
use super::record::RecordFile;
use super::xauth::Cookie;
use crate::sandbox::SandboxError;

/// The title of the terminal every desktop starts with.
pub const TERMINAL_TITLE: &str = "flotilla-terminal";
/// What openbox prints once it manages the screen.
const WM_READY: &str = "flotilla-wm-ready";
/// How often the terminal's window is looked for.
const WINDOW_POLL: Duration = Duration::from_millis(10);
/// How long teardown keeps killing before it gives up on a process.
const KILL_TIMEOUT: Duration = Duration::from_secs(3);
/// How often teardown looks for what is left.
const SWEEP_POLL: Duration = Duration::from_millis(10);

/// A desktop that is up: its processes, its display, and how to start more.
pub(crate) struct Desktop {
    pub processes: Processes,
    pub display: Arc<Display>,
    pub launcher: Launcher,
}

/// Starts Xvfb, the jail (with `jail` settings) or nothing (without),
/// openbox and a terminal for sandbox `marker` in `dir`.
pub(crate) async fn start(
    marker: &str,
    dir: &Path,
    resolution: (u32, u32),
    jail: Option<&JailSettings>,
    timeout: Duration,
) -> Result<Desktop, SandboxError> {
    let home = dir.join("home");
    let tmp = dir.join("tmp");
    let logs = dir.join("logs");
    for path in [&home, &tmp, &logs] {
        tokio::fs::create_dir_all(path).await?;
    }
    let cookie = Cookie::generate();
    let xauthority = dir.join("Xauthority");
    cookie.write(&xauthority)?;
    if let Some(settings) = jail {
        jail::prepare_files(dir, &home, settings.network)?;
    }
    let mut record = RecordFile::create(dir, marker)?;
    let deadline = Instant::now() + timeout;
    let (xvfb, display_number) = match start_xvfb(marker, dir, &xauthority, resolution, deadline).await {
        Ok(started) => started,
        Err(error) => {
            let _ = std::fs::remove_dir_all(dir);
            return Err(error);
        }
    };
    let pgid = xvfb.id();
    note(record.add(pgid));
    note(record.set_display(display_number));
    let mut processes = Processes {
        marker: marker.to_owned(),
        dir: dir.to_owned(),
        pgid,
        display_number,
        xvfb: Some(xvfb),
        children: Vec::new(),
        record,
        stopped: false,
    };
    let walls = match jail {
        Some(settings) => match build_jail(&mut processes, marker, dir, settings, deadline).await {
            Ok(walls) => Some(walls),
            Err(error) => {
                processes.stop(Duration::ZERO).await;
                return Err(error);
            }
        },
        None => None,
    };
    let launcher = Launcher { marker: marker.to_owned(), home, tmp, display: display_number, xauthority, jail: walls };
    match bring_up(&mut processes, &launcher, &cookie, &logs, deadline).await {
        Ok(display) => Ok(Desktop { processes, display, launcher }),
        Err(error) => {
            processes.stop(Duration::ZERO).await;
            Err(error)
        }
    }
}

/// The namespace holder, the network and the routes of one sandbox; its
/// processes join the desktop's group and `processes`.
async fn build_jail(
    processes: &mut Processes,
    marker: &str,
    dir: &Path,
    settings: &JailSettings,
    deadline: Instant,
) -> Result<Jail, SandboxError> {
    let tools = &settings.tools;
    let (holder, pid) = jail::start_holder(tools, marker, processes.pgid, deadline).await?;
    processes.adopt(holder);
    if settings.network == jail::Network::Egress {
        processes.adopt(jail::start_egress(tools, marker, processes.pgid, pid, deadline).await?);
    }
    jail::apply_routes(tools, pid, settings.network, &settings.exceptions).await?;
    Ok(Jail { tools: Arc::clone(tools), holder: pid, dir: dir.to_owned() })
}

async fn start_xvfb(
    marker: &str,
    dir: &Path,
    xauthority: &Path,
    (width, height): (u32, u32),
    deadline: Instant,
) -> Result<(Child, u32), SandboxError> {
    let log = dir.join("logs").join("xvfb.log");
    let mut command = process::tied_to_worker("Xvfb");
    command
        .args(["-displayfd", "1", "-screen", "0", &format!("{width}x{height}x24"), "-nolisten", "tcp"])
        .args(["-noreset", "-auth"])
        .arg(xauthority)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env(MARKER_VAR, marker)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file(&log)?)
        .process_group(0)
        .kill_on_drop(true);
    let mut xvfb =
        command.spawn().map_err(|e| SandboxError::Unavailable(format!("cannot start Xvfb (is xvfb installed?): {e}")))?;
    let stdout = xvfb.stdout.take();
    let line = read_line_until(stdout, |line| !line.trim().is_empty(), deadline).await;
    let number = line.as_deref().and_then(|l| l.trim().parse::<u32>().ok());
    match number {
        Some(number) => Ok((xvfb, number)),
        None => {
            let _ = xvfb.start_kill();
            let _ = xvfb.wait().await;
            Err(SandboxError::Unavailable(format!("Xvfb did not start: {}", log_tail(&log))))
        }
    }
}

async fn bring_up(
    processes: &mut Processes,
    launcher: &Launcher,
    cookie: &Cookie,
    logs: &Path,
    deadline: Instant,
) -> Result<Arc<Display>, SandboxError> {
    let number = launcher.display;
    let cookie = cookie.clone();
    let display = tokio::task::spawn_blocking(move || Display::connect(number, &cookie))
        .await
        .map_err(|e| SandboxError::Display(e.to_string()))??;
    let display = Arc::new(display);

    let startup = format!("echo {WM_READY}");
    let mut openbox = launcher.command("openbox", &["--startup", &startup]);
    let mut openbox = spawn_in_group(&mut openbox, processes.pgid, &logs.join("openbox.log"), true)?;
    let stdout = openbox.stdout.take();
    processes.adopt(openbox);
    let ready = read_line_until(stdout, |line| line.trim() == WM_READY, deadline).await;
    if ready.is_none() {
        return Err(SandboxError::Unavailable(format!("openbox did not start: {}", log_tail(&logs.join("openbox.log")))));
    }

    let mut xterm = launcher.command(
        "xterm",
        &[
            "-title",
            TERMINAL_TITLE,
            "-maximized",
            "+bc",
            "-fa",
            "Monospace",
            "-fs",
            "11",
            "-sl",
            "2000",
            "-e",
            "bash",
            "--noprofile",
            "--norc",
            "-i",
        ],
    );
    processes.adopt(spawn_in_group(&mut xterm, processes.pgid, &logs.join("xterm.log"), false)?);
    loop {
        let probe = Arc::clone(&display);
        let found = tokio::task::spawn_blocking(move || probe.find_client(TERMINAL_TITLE))
            .await
            .map_err(|e| SandboxError::Display(e.to_string()))??;
        if found.is_some() {
            return Ok(display);
        }
        if Instant::now() >= deadline {
            return Err(SandboxError::Unavailable(format!("the terminal did not appear: {}", log_tail(&logs.join("xterm.log")))));
        }
        tokio::time::sleep(WINDOW_POLL).await;
    }
}

pub(crate) fn spawn_in_group(
    command: &mut Command,
    pgid: Option<u32>,
    log: &Path,
    pipe_stdout: bool,
) -> Result<Child, SandboxError> {
    command.stdout(if pipe_stdout { Stdio::piped() } else { log_file(log)?.into() }).stderr(log_file(log)?);
    if let Some(pgid) = pgid {
        command.process_group(i32::try_from(pgid).unwrap_or(0));
    }
    command
        .spawn()
        .map_err(|e| SandboxError::Unavailable(format!("cannot start {}: {e}", command.as_std().get_program().to_string_lossy())))
}

/// A record that cannot be updated only weakens the sweep after a crash
/// (which still finds the process by its marker): said, not fatal.
fn note(written: std::io::Result<()>) {
    if let Err(error) = written {
        tracing::warn!(%error, "cannot update the desktop's record of its processes");
    }
}

fn log_file(path: &Path) -> Result<std::fs::File, SandboxError> {
    Ok(std::fs::OpenOptions::new().create(true).append(true).open(path)?)
}

/// The last line of a log, to say why a program did not start.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output").trim().to_owned()
}

/// Reads lines from `pipe` until one satisfies `done`, the pipe closes, or
/// the deadline passes. Lines after it keep being read (and dropped) in the
/// background, so the writer never blocks or sees a broken pipe.
async fn read_line_until<R>(pipe: Option<R>, done: impl Fn(&str) -> bool, deadline: Instant) -> Option<String>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    let mut lines = BufReader::new(pipe?).lines();
    let wait = tokio::time::timeout_at(deadline.into(), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if done(&line) {
                return Some(line);
            }
        }
        None
    });
    let found = wait.await.ok().flatten();
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    found
}

/// Every process of one sandbox, and its directory; stops them all once,
/// on [`Processes::stop`] or, failing that, on drop.
pub(crate) struct Processes {
    marker: String,
    dir: PathBuf,
    /// The Xvfb's pid, which is also the process group of the desktop.
    pgid: Option<u32>,
    display_number: u32,
    xvfb: Option<Child>,
    children: Vec<Child>,
    /// The record on disk of these processes, for the sweep after a crash.
    record: RecordFile,
    stopped: bool,
}

impl Processes {
    /// Whether the display server still runs.
    pub fn alive(&self) -> bool {
        self.pgid.and_then(process::stat).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X' | 'x'))
    }

    pub fn pgid(&self) -> Option<u32> {
        self.pgid
    }

    /// Takes a process started later (in the group) into the sandbox's set
    /// and its record.
    pub fn adopt(&mut self, child: Child) {
        note(self.record.add(child.id()));
        self.children.push(child);
    }

    /// Sends TERM to everything, KILL to what is left after `grace`, reaps
    /// the direct children and removes the sandbox's files.
    pub async fn stop(&mut self, grace: Duration) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        let (pgid, marker) = (self.pgid, self.marker.clone());
        let _ = tokio::task::spawn_blocking(move || terminate(pgid, &marker, grace)).await;
        for child in self.xvfb.iter_mut().chain(self.children.iter_mut()) {
            let _ = child.start_kill();
            let _ = tokio::time::timeout(KILL_TIMEOUT, child.wait()).await;
        }
        self.remove_files();
    }

    /// The same as `stop` without a grace period or waiting to reap: for drop.
    pub fn stop_now(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        terminate(self.pgid, &self.marker, Duration::ZERO);
        for child in self.xvfb.iter_mut().chain(self.children.iter_mut()) {
            let _ = child.start_kill();
            let _ = child.try_wait();
        }
        self.remove_files();
    }

    fn remove_files(&self) {
        // A killed Xvfb leaves its socket and lock; remove them only while
        // the lock still names our Xvfb, so a newer server's stay.
        let lock = launch::x_lock(self.display_number);
        let owner = std::fs::read_to_string(&lock).ok().and_then(|t| t.trim().parse::<u32>().ok());
        if owner.is_some() && owner == self.pgid {
            let _ = std::fs::remove_file(launch::x_socket(self.display_number));
            let _ = std::fs::remove_file(&lock);
        }
        if let Err(error) = std::fs::remove_dir_all(&self.dir) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(%error, dir = %self.dir.display(), "cannot remove sandbox directory");
            }
        }
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// TERM to the group and to every marked process, KILL to what outlives
/// `grace`, until nothing is left or [`KILL_TIMEOUT`] passes. Blocking.
fn terminate(pgid: Option<u32>, marker: &str, grace: Duration) {
    let find = || process::live_processes(pgid, marker);
    let pids = find();
    if pids.is_empty() {
        return;
    }
    process::signal(Signal::Term, pgid, &pids);
    let grace_end = Instant::now() + grace;
    while Instant::now() < grace_end && !find().is_empty() {
        std::thread::sleep(SWEEP_POLL);
    }
    let give_up = Instant::now() + KILL_TIMEOUT;
    loop {
        let pids = find();
        if pids.is_empty() {
            return;
        }
        if Instant::now() >= give_up {
            tracing::warn!(?pids, "sandbox processes survive SIGKILL");
            return;
        }
        process::signal(Signal::Kill, pgid, &pids);
        std::thread::sleep(SWEEP_POLL);
    }
}
