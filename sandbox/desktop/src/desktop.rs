//! Bringing up and tearing down one local desktop. Xvfb picks a free display
//! itself (`-displayfd`) and says so once it accepts connections; it listens
//! on no TCP port and admits only clients with the sandbox's
//! [cookie](super::xauth). It keeps its abstract socket: that is what makes
//! `-displayfd`'s choice safe (without it, a starting server unlinks a live
//! server's path socket while it probes a number), and abstract sockets
//! belong to a network namespace, so no jailed sandbox can reach one. With
//! isolation, the [jail](super::jail)'s namespace holder and network come up
//! while Xvfb starts. openbox says it is ready through its `--startup`
//! command; meanwhile the template's files are placed and its start-up
//! [apps](super::apps)' jails are built, and the apps start on a word from
//! the worker once openbox runs; the desktop is ready once openbox manages a
//! mapped window of each app's class. Every wait is for a signal, with a
//! deadline. All processes join the Xvfb's process group and carry the
//! sandbox's marker, so teardown finds them all.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

use super::apps;
use super::display::Display;
use super::dns::DnsServer;
use super::identity::{HostUser, Slot};
use super::jail::{self, JailSettings};
use super::launch::{self, log_tail, Launcher};
use super::limits::Cgroup;
use super::network;
use super::process::{self, Signal};
use super::record::RecordFile;
use super::spawn::{self, Spawner};
use super::xauth::Cookie;
use flotilla_config::Template;
use flotilla_sandbox::SandboxError;

/// What openbox prints once it manages the screen.
const WM_READY: &str = "flotilla-wm-ready";
/// How long teardown keeps killing before it gives up on a process.
const KILL_TIMEOUT: Duration = Duration::from_secs(3);
/// The most one stream of a sandbox program adds to its log on the host.
pub(crate) const MAX_LOG_BYTES: u64 = 1 << 20;
/// How often teardown looks for what is left.
const SWEEP_POLL: Duration = Duration::from_millis(10);

/// A desktop that is up: its processes, its display, and how to start more.
pub(crate) struct Desktop {
    pub processes: Processes,
    pub display: Arc<Display>,
    pub launcher: Launcher,
}

/// Starts the jail (with `jail` settings) or nothing (without), Xvfb,
/// openbox and `template`'s start-up apps for sandbox `marker` in `dir`.
pub(crate) async fn start(
    marker: &str,
    dir: &Path,
    resolution: (u32, u32),
    jail: Option<&JailSettings>,
    template: &Template,
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
    let slot = Slot::claim(jail.map_or(HostUser::Unprivileged, |s| s.user), launch::display_is_free)?;
    let display_number = slot.display();
    if let Some(settings) = jail {
        jail::prepare_files(dir, &home, settings.network, settings.user.ids(&slot))?;
    }
    let record = RecordFile::create(dir, marker)?;
    let deadline = Instant::now() + timeout;
    let mut processes = Processes {
        marker: marker.to_owned(),
        dir: dir.to_owned(),
        pgid: None,
        display_number: Some(display_number),
        xvfb: None,
        children: Vec::new(),
        record,
        cgroup: None,
        slot: Some(slot),
        dns: None,
        stopped: false,
    };
    note(processes.record.set_display(display_number));
    let started = Instant::now();
    let walls = match jail {
        Some(settings) => match hold_jail(&mut processes, settings, marker, dir, &home, deadline).await {
            Ok(walls) => Some(walls),
            Err(error) => {
                processes.stop(Duration::ZERO).await;
                return Err(error);
            }
        },
        None => None,
    };
    let jail_took = started.elapsed();
    let env = apps::environment(template);
    let mut launcher =
        Launcher { marker: marker.to_owned(), home, tmp, display: display_number, xauthority, jail: walls, env, spawner: None };
    // The display server starts while the network comes up: it needs the
    // namespaces, not the routes.
    let mut network = Vec::new();
    let pgid = processes.pgid;
    let up = async {
        let connected = async {
            match (jail, &launcher.jail, processes.slot.as_ref()) {
                (Some(settings), Some(walls), Some(slot)) => {
                    let site = jail::Site { slot, marker, dir, home: &launcher.home, deadline };
                    network::connect(settings, &site, walls, &mut network).await
                }
                _ => Ok(None),
            }
        };
        let (xvfb, connected) = tokio::join!(start_xvfb(&launcher, pgid, resolution, &logs, deadline), connected);
        (xvfb, connected)
    };
    let (xvfb, connected) = up.await;
    for child in network {
        processes.adopt(child);
    }
    let up = match (xvfb, connected) {
        (Ok(xvfb), Ok(dns)) => {
            processes.dns = dns;
            processes.adopt_server(xvfb);
            let spawner = start_spawner(&launcher, processes.pgid, &logs, deadline);
            let (up, spawner) = tokio::join!(bring_up(&mut processes, &launcher, template, &cookie, &logs, deadline), spawner);
            match spawner {
                Ok(Some((child, spawner))) => {
                    processes.adopt(child);
                    launcher.spawner = Some(spawner);
                    up
                }
                Ok(None) => up,
                Err(error) => up.and(Err(error)),
            }
        }
        (Ok(xvfb), Err(error)) => {
            processes.adopt_server(xvfb);
            Err(error)
        }
        (Err(error), _) => Err(error),
    };
    tracing::debug!(
        sandbox = marker,
        jail_ms = jail_took.as_millis() as u64,
        total_ms = started.elapsed().as_millis() as u64,
        "desktop start"
    );
    match up {
        Ok(display) => Ok(Desktop { processes, display, launcher }),
        Err(error) => {
            processes.stop(Duration::ZERO).await;
            Err(error)
        }
    }
}

/// Makes the sandbox's group and namespaces; its processes and group
/// become the desktop's.
async fn hold_jail(
    processes: &mut Processes,
    settings: &JailSettings,
    marker: &str,
    dir: &Path,
    home: &Path,
    deadline: Instant,
) -> Result<jail::Jail, SandboxError> {
    let Some(slot) = processes.slot.as_ref() else {
        return Err(SandboxError::Unavailable("the sandbox holds no slot".into()));
    };
    let site = jail::Site { slot, marker, dir, home, deadline };
    let mut setup = Vec::new();
    let mut cgroup = None;
    let walls = jail::hold(settings, &site, &mut setup, &mut cgroup).await;
    if let Some(group) = &cgroup {
        note(processes.record.set_cgroup(group.dirs().to_vec()));
    }
    processes.cgroup = cgroup;
    for child in setup {
        processes.pgid = processes.pgid.or(child.id());
        processes.adopt(child);
    }
    walls
}

/// Starts Xvfb on the slot's display (in the jail when there is one, where
/// its socket appears in the sandbox's own directory and is linked from the
/// host's socket directory) and waits until it accepts connections. Without
/// a jail it leads the desktop's process group.
async fn start_xvfb(
    launcher: &Launcher,
    pgid: Option<u32>,
    (width, height): (u32, u32),
    logs: &Path,
    deadline: Instant,
) -> Result<Child, SandboxError> {
    let number = launcher.display;
    let screen = format!("{width}x{height}x24");
    let display = format!(":{number}");
    let log = logs.join("xvfb.log");
    let mut args = vec![display.as_str(), "-displayfd", "1", "-screen", "0", &screen, "-nolisten", "tcp", "-noreset"];
    // GLX is nothing a desktop needs and a way into the server. (RECORD
    // cannot go without XTEST going too; in the sandbox's own server it
    // hears only the sandbox's own clients and the person who takes over.)
    args.extend(["-extension", "GLX"]);
    let auth = launcher.xauthority.display().to_string();
    let mut command = match &launcher.jail {
        Some(_) => {
            args.extend(["-auth", jail::XAUTHORITY_PATH]);
            launcher.server_command("Xvfb", &args)
        }
        None => {
            args.extend(["-auth", &auth]);
            launcher.command("Xvfb", &args)
        }
    };
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    command.process_group(pgid.and_then(|g| i32::try_from(g).ok()).unwrap_or(0));
    // Killed when dropped on a failure below; the teardown finds the rest.
    let mut xvfb =
        command.spawn().map_err(|e| SandboxError::Unavailable(format!("cannot start Xvfb (is xvfb installed?): {e}")))?;
    let announced = xvfb.stdout.take();
    drain_to_log(xvfb.stderr.take(), &log);
    let shown = wait_for_display(announced, &log, deadline).await?;
    if shown != number {
        return Err(SandboxError::Unavailable(format!("Xvfb took display :{shown}, not :{number}")));
    }
    if let Some(walls) = &launcher.jail {
        link_socket(&walls.dir, number)?;
    }
    Ok(xvfb)
}

/// Links the host's socket path of display `number` to the one the jailed
/// server made, so host programs reach `:number` as any display. A link
/// left by a desktop whose worker died goes first; anything else there is
/// another server's, and the display is refused.
fn link_socket(dir: &Path, number: u32) -> Result<(), SandboxError> {
    let host = launch::x_socket(number);
    let target = dir.join("x11").join(format!("X{number}"));
    if let Ok(meta) = std::fs::symlink_metadata(&host) {
        if !meta.file_type().is_symlink() {
            return Err(SandboxError::Unavailable(format!("{} belongs to another X server", host.display())));
        }
        std::fs::remove_file(&host)?;
    }
    if let Some(parent) = host.parent() {
        if std::fs::create_dir(parent).is_ok() {
            std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o1777))?;
        }
    }
    std::os::unix::fs::symlink(&target, &host)?;
    Ok(())
}

/// The display number Xvfb announces once it is ready.
async fn wait_for_display(announced: Option<ChildStdout>, log: &Path, deadline: Instant) -> Result<u32, SandboxError> {
    let line = read_line_until(announced, |line| !line.trim().is_empty(), deadline).await;
    line.as_deref()
        .and_then(|l| l.trim().parse::<u32>().ok())
        .ok_or_else(|| SandboxError::Unavailable(format!("Xvfb did not start: {}", log_tail(log))))
}

async fn bring_up(
    processes: &mut Processes,
    launcher: &Launcher,
    template: &Template,
    cookie: &Cookie,
    logs: &Path,
    deadline: Instant,
) -> Result<Arc<Display>, SandboxError> {
    let number = launcher.display;
    let cookie = cookie.clone();
    // The worker's own connection opens while the window manager starts.
    let connect = async move {
        tokio::task::spawn_blocking(move || Display::connect(number, &cookie))
            .await
            .map_err(|e| SandboxError::Display(e.to_string()))?
    };
    let startup = format!("echo {WM_READY}");
    let mut openbox = launcher.command("openbox", &["--startup", &startup]);
    let mut openbox = spawn_in_group(&mut openbox, processes.pgid, &logs.join("openbox.log"), true)?;
    let stdout = openbox.stdout.take();
    processes.adopt(openbox);
    // The apps' jails are built and the template's files placed while the
    // window manager starts; the apps themselves wait for their word, so
    // the window manager places their windows as it would any other.
    let mut waiting = Vec::new();
    for startup in apps::startup_commands(launcher, template, logs) {
        let apps::Startup { mut command, log, app } = startup;
        command.stdin(Stdio::piped());
        let mut child = spawn_in_group(&mut command, processes.pgid, &log, false)?;
        waiting.push(apps::Waiting { go: child.stdin.take(), log, app });
        processes.adopt(child);
    }
    let wm_ready = read_line_until(stdout, |line| line.trim() == WM_READY, deadline);
    let (display, ready, placed) = tokio::join!(connect, wm_ready, apps::place_files(launcher, template));
    let display = Arc::new(display?);
    placed?;
    if ready.is_none() {
        return Err(SandboxError::Unavailable(format!("openbox did not start: {}", log_tail(&logs.join("openbox.log")))));
    }
    apps::release_and_wait(&display, waiting, deadline).await?;
    Ok(display)
}

/// Starts the jail's [spawner](super::spawn) in the desktop's group (its
/// output in its log) and waits until it is ready; `None` without a jail,
/// or without the spawner's program (each command then starts through the
/// jail's chain, as walled in and slower).
async fn start_spawner(
    launcher: &Launcher,
    pgid: Option<u32>,
    logs: &Path,
    deadline: Instant,
) -> Result<Option<(Child, Spawner)>, SandboxError> {
    if launcher.jail.is_none() {
        return Ok(None);
    }
    let Some(binary) = spawn::binary() else {
        tracing::warn!(
            "{} is neither beside this program nor on PATH: every command starts through the whole jail",
            spawn::BINARY
        );
        return Ok(None);
    };
    // The sandbox's own uid reads the program where the jail binds it from:
    // a copy in the sandbox's directory, since the build's own may lie
    // where only its owner may look (a checkout under `/root`).
    let dir = logs.parent().unwrap_or(logs);
    let binary = {
        let copy = dir.join(spawn::BINARY);
        tokio::fs::copy(&binary, &copy).await.map_err(|e| {
            SandboxError::Unavailable(format!("cannot copy {} into the sandbox's directory: {e}", binary.display()))
        })?;
        copy
    };
    let Some(mut command) = launcher.spawner_command(&binary) else { return Ok(None) };
    let (host, inside) = spawn::control_pair()?;
    command.stdin(Stdio::from(inside));
    let log = logs.join("spawner.log");
    let child = spawn_in_group(&mut command, pgid, &log, false)?;
    match Spawner::connect(host, deadline).await {
        Ok(spawner) => Ok(Some((child, spawner))),
        Err(e) => Err(SandboxError::Unavailable(format!("the sandbox's spawner did not start ({e}): {}", log_tail(&log)))),
    }
}

pub(crate) fn spawn_in_group(
    command: &mut Command,
    pgid: Option<u32>,
    log: &Path,
    pipe_stdout: bool,
) -> Result<Child, SandboxError> {
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(pgid) = pgid {
        command.process_group(i32::try_from(pgid).unwrap_or(0));
    }
    let mut child = command.spawn().map_err(|e| {
        SandboxError::Unavailable(format!("cannot start {}: {e}", command.as_std().get_program().to_string_lossy()))
    })?;
    if !pipe_stdout {
        drain_to_log(child.stdout.take(), log);
    }
    drain_to_log(child.stderr.take(), log);
    Ok(child)
}

/// Copies what a sandbox program writes on `pipe` into its log on the host,
/// at most [`MAX_LOG_BYTES`]; the rest is read and dropped, so a program
/// cannot fill the host's disk through its output.
fn drain_to_log<R: AsyncRead + Unpin + Send + 'static>(pipe: Option<R>, log: &Path) -> Option<tokio::task::JoinHandle<()>> {
    let mut pipe = pipe?;
    let log = log.to_owned();
    Some(tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut file = tokio::fs::OpenOptions::new().create(true).append(true).open(&log).await.ok();
        let (mut written, mut chunk) = (0u64, vec![0u8; 8192]);
        while let Ok(n @ 1..) = pipe.read(&mut chunk).await {
            let room = usize::try_from(MAX_LOG_BYTES.saturating_sub(written)).unwrap_or(0).min(n);
            if let (Some(out), 1..) = (file.as_mut(), room) {
                if out.write_all(&chunk[..room]).await.is_err() {
                    file = None;
                }
                written += room as u64;
            }
        }
        // A tokio file's last write may still be in flight: the log is
        // whole only once it is flushed (readers look right after the end).
        if let Some(out) = file.as_mut() {
            let _ = out.flush().await;
        }
    }))
}

/// A record that cannot be updated only weakens the sweep after a crash
/// (which still finds the process by its marker): said, not fatal.
fn note(written: std::io::Result<()>) {
    if let Err(error) = written {
        tracing::warn!(%error, "cannot update the desktop's record of its processes");
    }
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
    /// The process group of the desktop: the jail's holder, or the Xvfb
    /// without a jail.
    pgid: Option<u32>,
    /// The display the desktop's slot owns.
    display_number: Option<u32>,
    xvfb: Option<Child>,
    children: Vec<Child>,
    /// The record on disk of these processes, for the sweep after a crash.
    record: RecordFile,
    /// The sandbox's control group, when it has one.
    cgroup: Option<Cgroup>,
    /// The sandbox's hold on its uid and display, let go after teardown.
    slot: Option<Slot>,
    /// The worker's side of the sandbox's resolver.
    dns: Option<DnsServer>,
    stopped: bool,
}

impl Processes {
    /// Whether the display server still runs.
    pub fn alive(&self) -> bool {
        let server = self.xvfb.as_ref().and_then(Child::id);
        server.and_then(process::stat).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X' | 'x'))
    }

    /// Takes the display server into the sandbox's set and its record; it
    /// leads the process group when nothing else does.
    fn adopt_server(&mut self, xvfb: Child) {
        self.pgid = self.pgid.or(xvfb.id());
        note(self.record.add(xvfb.id()));
        self.xvfb = Some(xvfb);
    }

    /// The sandbox's control group, when it has one.
    pub fn cgroup(&self) -> Option<&Cgroup> {
        self.cgroup.as_ref()
    }

    pub fn pgid(&self) -> Option<u32> {
        self.pgid
    }

    /// Stops every process of the sandbox (see [`freeze`](super::freeze)).
    pub async fn pause(&self) -> Result<usize, SandboxError> {
        let (pgid, marker, cgroup) = (self.pgid, self.marker.clone(), self.cgroup.clone());
        let frozen = tokio::task::spawn_blocking(move || super::freeze::freeze(pgid, &marker, cgroup.as_ref()))
            .await
            .map_err(|e| SandboxError::Unavailable(format!("the pause did not finish: {e}")))?;
        frozen.map_err(|running| SandboxError::Unavailable(format!("processes {running:?} would not stop")))
    }

    /// The pids of every live process of the sandbox.
    pub fn pids(&self) -> Vec<u32> {
        super::freeze::members(self.pgid, &self.marker, self.cgroup.as_ref())
    }

    /// The resident memory of all the sandbox's processes, in bytes.
    pub fn resident_bytes(&self) -> u64 {
        super::freeze::members(self.pgid, &self.marker, self.cgroup.as_ref())
            .into_iter()
            .filter_map(process::resident_bytes)
            .sum()
    }

    /// Lets every process of the sandbox run again.
    pub async fn resume(&self) {
        let (pgid, marker, cgroup) = (self.pgid, self.marker.clone(), self.cgroup.clone());
        let _ = tokio::task::spawn_blocking(move || super::freeze::thaw(pgid, &marker, cgroup.as_ref())).await;
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
        let (pgid, marker, cgroup) = (self.pgid, self.marker.clone(), self.cgroup.clone());
        let _ = tokio::task::spawn_blocking(move || terminate(pgid, &marker, cgroup.as_ref(), grace)).await;
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
        terminate(self.pgid, &self.marker, self.cgroup.as_ref(), Duration::ZERO);
        for child in self.xvfb.iter_mut().chain(self.children.iter_mut()) {
            let _ = child.start_kill();
            let _ = child.try_wait();
        }
        self.remove_files();
    }

    fn remove_files(&mut self) {
        if let Some(number) = self.display_number {
            let ours = |pid: u32| Some(pid) == self.xvfb.as_ref().and_then(Child::id) || Some(pid) == self.pgid;
            launch::remove_display_files(number, &self.dir, ours);
        }
        if let Some(cgroup) = &self.cgroup {
            cgroup.remove();
        }
        if let Err(error) = std::fs::remove_dir_all(&self.dir) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(%error, dir = %self.dir.display(), "cannot remove sandbox directory");
            }
        }
        self.slot = None;
        self.dns = None;
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        self.stop_now();
    }
}

/// TERM to the group, to every marked process and to every process in the
/// sandbox's control group, KILL to what outlives
/// `grace`, until nothing is left or [`KILL_TIMEOUT`] passes. Blocking.
fn terminate(pgid: Option<u32>, marker: &str, cgroup: Option<&Cgroup>, grace: Duration) {
    let find = || {
        let mut pids = process::live_processes(pgid, marker);
        pids.extend(cgroup.map(Cgroup::pids).unwrap_or_default());
        pids.sort_unstable();
        pids.dedup();
        pids
    };
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

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;

    #[tokio::test]
    async fn a_program_writing_past_the_bound_leaves_a_bounded_log_and_is_never_blocked() {
        let log = std::env::temp_dir().join(format!("flotilla-drain-test-{:016x}.log", rand::random::<u64>()));
        let (mut program, pipe) = tokio::io::duplex(64 * 1024);
        let drain = drain_to_log(Some(pipe), &log).expect("draining");
        let chunk = vec![b'x'; 64 * 1024];
        // Three times the bound: every write completes, so nothing the
        // program writes waits on the log.
        for _ in 0..(3 * MAX_LOG_BYTES as usize / chunk.len()) {
            program.write_all(&chunk).await.expect("the drain keeps reading");
        }
        drop(program);
        drain.await.expect("the drain ends with the pipe");
        let size = std::fs::metadata(&log).expect("the log").len();
        let _ = std::fs::remove_file(&log);
        assert_eq!(size, MAX_LOG_BYTES, "the log holds the bound and no more");
    }
}
