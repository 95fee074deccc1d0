//! Processes of local sandboxes: signalling a whole process group, finding
//! every live process a sandbox started (its group, or its marker in the
//! environment, which survives `setsid`), and running one command with a
//! time limit and bounded output. Signals go through `kill(1)`, since the
//! workspace forbids `unsafe` and std can signal only its own children.

use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

use flotilla_sandbox::{CommandOutput, SandboxError};

pub use super::spawn::SandboxChild;

/// The environment variable every sandbox process carries, set to the id.
pub(crate) const MARKER_VAR: &str = "FLOTILLA_SANDBOX";

/// The most output kept from one stream of a command; the rest is dropped.
pub(crate) const MAX_OUTPUT: usize = 16 * 1024 * 1024;

/// How long output may still arrive after a command exits (from children it
/// left running with the pipe open).
const OUTPUT_GRACE: Duration = Duration::from_millis(100);

/// A signal `kill(1)` can send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Term,
    Kill,
    /// Stops a process where it is (a pause).
    Stop,
    /// Lets a stopped process go on.
    Continue,
}

impl Signal {
    fn name(self) -> &'static str {
        match self {
            Signal::Term => "TERM",
            Signal::Kill => "KILL",
            Signal::Stop => "STOP",
            Signal::Continue => "CONT",
        }
    }
}

/// Sends `signal` to every process of group `pgid` and to each of `pids`.
/// Processes that are already gone are not an error.
pub fn signal(signal: Signal, pgid: Option<u32>, pids: &[u32]) {
    let mut targets: Vec<String> = pgid.map(|g| format!("-{g}")).into_iter().collect();
    targets.extend(pids.iter().map(u32::to_string));
    if targets.is_empty() {
        return;
    }
    let result = std::process::Command::new("kill")
        .args(["-s", signal.name(), "--"])
        .args(&targets)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if let Err(error) = result {
        tracing::warn!(%error, "cannot run kill");
    }
}

/// The live (not zombie) processes in group `pgid` or carrying `marker` in
/// their environment, other than this process.
pub(crate) fn live_processes(pgid: Option<u32>, marker: &str) -> Vec<u32> {
    let needle = format!("{MARKER_VAR}={marker}");
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me)
        .filter(|&pid| {
            let Some((state, group)) = stat(pid) else {
                return false;
            };
            if matches!(state, 'Z' | 'X' | 'x') {
                return false;
            }
            Some(group) == pgid || has_env(pid, &needle)
        })
        .collect()
}

/// The live (not zombie) processes that have host uid `uid` as any of their
/// real, effective, saved or filesystem uids (the `Uid:` line of
/// `/proc/PID/status`).
pub(crate) fn processes_of_uid(uid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                return false;
            };
            let field = |key: &str| status.lines().find_map(|l| l.strip_prefix(key)).map(str::trim);
            let zombie = field("State:").is_some_and(|state| state.starts_with('Z') || state.starts_with('X'));
            let uids = field("Uid:").unwrap_or_default();
            !zombie && uids.split_whitespace().any(|n| n.parse() == Ok(uid))
        })
        .collect()
}

/// What the processes of one pid namespace use together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NamespaceUsage {
    /// Processes and threads.
    pub tasks: u32,
    /// Private anonymous memory resident (`RssAnon`), bytes.
    pub anonymous_bytes: u64,
}

/// What the processes in the pid namespace that `parent` makes its children
/// in (`/proc/PARENT/ns/pid_for_children`) use; `None` when `parent` is gone.
pub(crate) fn namespace_usage(parent: u32) -> Option<NamespaceUsage> {
    let namespace = std::fs::read_link(format!("/proc/{parent}/ns/pid_for_children")).ok()?;
    let mut usage = NamespaceUsage::default();
    for pid in std::fs::read_dir("/proc").ok()?.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok()) {
        if std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok().as_ref() != Some(&namespace) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else { continue };
        let field = |key: &str| -> u64 {
            status.lines().find_map(|l| l.strip_prefix(key)?.split_whitespace().next()?.parse().ok()).unwrap_or(0)
        };
        usage.tasks = usage.tasks.saturating_add(u32::try_from(field("Threads:")).unwrap_or(u32::MAX));
        usage.anonymous_bytes = usage.anonymous_bytes.saturating_add(field("RssAnon:") * 1024);
    }
    Some(usage)
}

/// The state letter and process group of `pid`, from `/proc/PID/stat`.
pub(crate) fn stat(pid: u32) -> Option<(char, u32)> {
    let fields = stat_fields(pid)?;
    let state = fields.first()?.chars().next()?;
    let group = fields.get(2)?.parse().ok()?;
    Some((state, group))
}

/// Every live descendant of `pid` (children, their children, …), from the
/// parent links in `/proc`: what a process started and still holds on to,
/// whatever session or process group it moved to.
pub fn descendants(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: Vec<(u32, u32)> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|child| Some((child, stat_fields(child)?.get(1)?.parse().ok()?)))
        .collect();
    let mut found = vec![pid];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        found.extend(parents.iter().filter(|(_, p)| *p == parent).map(|(child, _)| *child));
        next += 1;
    }
    found.remove(0);
    found
}

/// The resident memory of `pid`, in bytes (`/proc/PID/statm`).
pub(crate) fn resident_bytes(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * rustix::param::page_size() as u64)
}

/// When `pid` started, in clock ticks after boot (`/proc/PID/stat` field 22).
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    // Field 22 is the 20th after the command name (fields 1 and 2).
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// The fields of `/proc/PID/stat` after the command name (field 3 onwards).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses; fields follow the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// The program every process a desktop starts directly runs under: it sets
/// the parent-death signal to SIGKILL and execs the real program, so the
/// kernel kills the process when the worker dies, however it dies. (A
/// `pre_exec` hook would need `unsafe`, which the workspace forbids.) The
/// signal fires when the *thread* that started the process ends, so desktops
/// are started from async tasks, whose runtime threads live as long as the
/// worker, never from `spawn_blocking`.
const SETPRIV: &str = "setpriv";

/// A command that runs `program` and dies with the worker (see [`SETPRIV`]).
pub(crate) fn tied_to_worker(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(SETPRIV);
    command.args(["--pdeathsig", "KILL", "--"]).arg(program);
    command
}

fn has_env(pid: u32, needle: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|env| env.split(|b| *b == 0).any(|var| var == needle.as_bytes()))
        .unwrap_or(false)
}

/// What a finished command printed, as bytes.
#[derive(Debug)]
pub struct RawOutput {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Whether either stream passed the byte limit and was cut.
    pub truncated: bool,
}

impl RawOutput {
    pub fn into_command_output(self) -> CommandOutput {
        CommandOutput {
            exit_code: self.exit_code,
            stdout: String::from_utf8_lossy(&self.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&self.stderr).into_owned(),
        }
    }
}

/// Runs `command` in its own process group with `stdin` fed to it, and
/// collects up to `limit` bytes of each output stream; after `timeout`
/// kills the group and fails.
pub async fn run(command: Command, stdin: Option<&[u8]>, timeout: Duration, limit: usize) -> Result<RawOutput, SandboxError> {
    run_with_lines(command, stdin, timeout, limit, None).await
}

/// As [`run`], and hands each line of standard output to `lines` the moment
/// it is complete (the last one, without its newline, when the pipe closes).
pub async fn run_with_lines(
    mut command: Command,
    stdin: Option<&[u8]>,
    timeout: Duration,
    limit: usize,
    lines: Option<UnboundedSender<String>>,
) -> Result<RawOutput, SandboxError> {
    command
        .process_group(0)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().map_err(|e| SandboxError::Command(format!("cannot start: {e}")))?;
    run_child(SandboxChild::of_chain(child), stdin, timeout, limit, lines).await
}

/// As [`run_with_lines`], for a command already started (its own process
/// group's leader, its input a pipe when `stdin` is some).
pub async fn run_child(
    mut child: SandboxChild,
    stdin: Option<&[u8]>,
    timeout: Duration,
    limit: usize,
    lines: Option<UnboundedSender<String>>,
) -> Result<RawOutput, SandboxError> {
    let pid = child.id();
    let stdout = Capture::start(child.stdout.take(), limit, lines);
    let stderr = Capture::start(child.stderr.take(), limit, None);
    let pipe = child.stdin.take();
    let feed = async move {
        if let (Some(bytes), Some(mut pipe)) = (stdin, pipe) {
            // A command that does not read its input closes the pipe early; that is its business.
            let _ = pipe.write_all(bytes).await;
            let _ = pipe.shutdown().await;
        }
    };
    let finished = tokio::time::timeout(timeout, async {
        feed.await;
        child.wait().await
    })
    .await;
    let status = match finished {
        Ok(Ok(status)) => status,
        Ok(Err(e)) => return Err(SandboxError::Command(format!("cannot wait for the command: {e}"))),
        Err(_) => {
            signal(Signal::Kill, Some(pid), &[]);
            let _ = child.wait().await;
            return Err(SandboxError::Timeout(timeout));
        }
    };
    let (stdout, stdout_cut) = stdout.finish().await;
    let (stderr, stderr_cut) = stderr.finish().await;
    Ok(RawOutput { exit_code: exit_code(status), stdout, stderr, truncated: stdout_cut || stderr_cut })
}

fn exit_code(status: ExitStatus) -> i32 {
    status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(-1)
}

/// Output of one pipe, read in the background up to a limit; the rest is
/// read and dropped, so the writer never blocks.
struct Capture {
    buffer: Arc<Mutex<(Vec<u8>, bool)>>,
    task: Option<JoinHandle<()>>,
}

impl Capture {
    fn start<R: AsyncRead + Unpin + Send + 'static>(
        pipe: Option<R>,
        limit: usize,
        lines: Option<UnboundedSender<String>>,
    ) -> Self {
        let buffer = Arc::new(Mutex::new((Vec::new(), false)));
        let task = pipe.map(|mut pipe| {
            let buffer = Arc::clone(&buffer);
            let mut splitter = lines.map(LineSplitter::new);
            tokio::spawn(async move {
                let mut chunk = vec![0u8; 64 * 1024];
                while let Ok(n @ 1..) = pipe.read(&mut chunk).await {
                    if let Some(splitter) = &mut splitter {
                        splitter.push(&chunk[..n]);
                    }
                    let Ok(mut guard) = buffer.lock() else { return };
                    let (kept, cut) = &mut *guard;
                    let room = limit.saturating_sub(kept.len());
                    kept.extend_from_slice(&chunk[..n.min(room)]);
                    *cut |= n > room;
                }
                if let Some(splitter) = splitter {
                    splitter.finish();
                }
            })
        });
        Self { buffer, task }
    }

    /// What was read and whether some was cut, once the pipe closed or
    /// [`OUTPUT_GRACE`] passed.
    async fn finish(mut self) -> (Vec<u8>, bool) {
        if let Some(mut task) = self.task.take() {
            if tokio::time::timeout(OUTPUT_GRACE, &mut task).await.is_err() {
                task.abort();
            }
        }
        self.buffer.lock().map(|mut b| std::mem::take(&mut *b)).unwrap_or_default()
    }
}

/// Cuts a byte stream into lines and sends each one on as text.
struct LineSplitter {
    pending: Vec<u8>,
    sink: UnboundedSender<String>,
}

impl LineSplitter {
    fn new(sink: UnboundedSender<String>) -> Self {
        Self { pending: Vec::new(), sink }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            self.send(&line[..end]);
        }
    }

    fn finish(self) {
        if !self.pending.is_empty() {
            self.send(&self.pending);
        }
    }

    fn send(&self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        // A receiver that stopped listening has what it wanted.
        let _ = self.sink.send(String::from_utf8_lossy(line).into_owned());
    }
}

#[cfg(test)]
mod descendant_tests {
    use super::descendants;

    #[test]
    fn descendants_are_found_through_sessions_and_groups() {
        // A shell that starts a child in a session of its own, which starts its own child.
        let mut shell =
            std::process::Command::new("sh").args(["-c", "setsid sh -c 'sleep 30 & wait' & wait"]).spawn().expect("sh runs");
        let pid = shell.id();
        let mut found = Vec::new();
        for _ in 0..200 {
            found = descendants(pid);
            if found.len() >= 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = std::process::Command::new("kill").arg("-KILL").args(found.iter().map(u32::to_string)).status();
        let _ = shell.kill();
        let _ = shell.wait();
        assert!(found.len() >= 2, "the child in its own session and its child: {found:?}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn run_captures_output_and_exit_code() {
        let mut command = Command::new("bash");
        command.args(["-c", "cat; echo err >&2; exit 3"]);
        let output = run(command, Some(b"in"), Duration::from_secs(10), MAX_OUTPUT).await.expect("runs");
        assert_eq!(output.into_command_output(), CommandOutput { exit_code: 3, stdout: "in".into(), stderr: "err\n".into() });
    }

    #[tokio::test]
    async fn run_cuts_output_at_the_limit() {
        let mut command = Command::new("bash");
        command.args(["-c", "printf 0123456789"]);
        let output = run(command, None, Duration::from_secs(10), 4).await.expect("runs");
        assert_eq!((output.stdout.as_slice(), output.truncated), (&b"0123"[..], true));
    }

    #[tokio::test]
    async fn run_with_lines_hands_over_each_line_before_the_command_ends() {
        let (sink, mut lines) = tokio::sync::mpsc::unbounded_channel();
        let mut command = Command::new("bash");
        command.args(["-c", "echo one; sleep 1; printf 'two\\r\\nthree'"]);
        let run = tokio::spawn(run_with_lines(command, None, Duration::from_secs(10), MAX_OUTPUT, Some(sink)));
        let first = tokio::time::timeout(Duration::from_millis(900), lines.recv()).await;
        assert_eq!(first.ok().flatten().as_deref(), Some("one"), "the first line arrives while the command still runs");
        let output = run.await.expect("joins").expect("runs");
        assert_eq!(output.stdout, b"one\ntwo\r\nthree");
        assert_eq!((lines.recv().await.as_deref(), lines.recv().await.as_deref()), (Some("two"), Some("three")));
        assert_eq!(lines.recv().await, None);
    }

    #[tokio::test]
    async fn run_kills_after_timeout() {
        let mut command = Command::new("sleep");
        command.arg("30");
        let started = std::time::Instant::now();
        let result = run(command, None, Duration::from_millis(200), MAX_OUTPUT).await;
        assert!(matches!(result, Err(SandboxError::Timeout(_))), "{result:?}");
        assert!(started.elapsed() < Duration::from_secs(10), "long before the 30 s sleep ended: {:?}", started.elapsed());
    }

    #[tokio::test]
    async fn run_does_not_wait_for_background_children() {
        let mut command = Command::new("bash");
        command.args(["-c", "sleep 30 & echo started"]);
        let started = std::time::Instant::now();
        let output = run(command, None, Duration::from_secs(20), MAX_OUTPUT).await.expect("runs");
        assert_eq!(output.stdout, b"started\n");
        assert!(started.elapsed() < Duration::from_secs(10), "long before the 30 s child ended: {:?}", started.elapsed());
    }

    #[tokio::test]
    async fn a_tied_command_runs_the_program_with_the_parent_death_signal_set() {
        let mut command = tied_to_worker("setpriv");
        command.arg("--dump");
        let output = run(command, None, Duration::from_secs(10), MAX_OUTPUT).await.expect("runs").into_command_output();
        assert!(output.stdout.lines().any(|l| l.trim() == "Parent death signal: KILL"), "{output:?}");
    }

    #[test]
    fn start_time_tells_processes_apart() {
        let me = start_time(std::process::id()).expect("own start time");
        let mut child = std::process::Command::new("sleep").arg("1").spawn().expect("sleep");
        let other = start_time(child.id()).expect("child's start time");
        assert!(other >= me);
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn stat_reads_this_process() {
        let (state, group) = stat(std::process::id()).expect("own stat");
        assert!(state.is_ascii_alphabetic());
        assert!(group > 0);
    }
}
