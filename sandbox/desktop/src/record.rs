//! The record a worker keeps on disk of each local desktop's processes, so
//! that no desktop outlives its worker.
//!
//! Two walls, one behind the other:
//! - **Dying together.** Every process a desktop starts directly runs under
//!   `setpriv --pdeathsig KILL` ([`process::tied_to_worker`]), so the kernel
//!   kills it the moment the worker dies, even by SIGKILL; jailed programs
//!   also run under bubblewrap's `--die-with-parent` in a pid namespace of
//!   their own, whose processes die with its first one.
//! - **The sweep.** What that cannot catch (a process started in the instant
//!   the worker died, a child that left its group without a jail) the next
//!   worker on the host kills at start. Each desktop's directory holds
//!   `record.json`: the owning worker (pid and start time, so a reused pid is
//!   never taken for it), the desktop's marker, its display, and the pid and
//!   start time of every process it started, written before the first one
//!   starts and after each. A desktop whose owner is gone has its recorded
//!   processes and every process carrying its marker killed, its X lock and
//!   its files removed. Nothing is found by process name.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::launch;
use super::limits::Cgroup;
use super::process::{self, Signal};

/// The record's file name in a desktop's directory.
pub(crate) const RECORD_FILE: &str = "record.json";
/// How long the sweep keeps killing one desktop's leftovers before it gives up.
const SWEEP_TIMEOUT: Duration = Duration::from_secs(3);
/// How often the sweep looks again for what is left.
const SWEEP_POLL: Duration = Duration::from_millis(10);

/// One process, told apart from a later one that got the same pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProcessStamp {
    pub pid: u32,
    /// When it started, in clock ticks after boot (`/proc/PID/stat` field 22).
    pub started: u64,
}

impl ProcessStamp {
    /// The stamp of the live process `pid`.
    pub fn of(pid: u32) -> Option<Self> {
        process::start_time(pid).map(|started| Self { pid, started })
    }

    /// Whether this very process still runs (not a zombie, not a newer one with its pid).
    pub fn is_alive(&self) -> bool {
        let running = process::stat(self.pid).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X' | 'x'));
        running && process::start_time(self.pid) == Some(self.started)
    }
}

/// What one desktop's `record.json` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DesktopRecord {
    /// The worker that owns the desktop.
    pub owner: ProcessStamp,
    /// The value of the desktop's marker variable.
    pub marker: String,
    /// The display number, once Xvfb chose it.
    pub display: Option<u32>,
    /// Every process the desktop started directly, in order.
    pub processes: Vec<ProcessStamp>,
    /// The directories of the desktop's control group, once made.
    #[serde(default)]
    pub cgroup: Option<Vec<PathBuf>>,
}

/// A desktop's record and where it is kept; every change is written at once.
#[derive(Debug)]
pub(crate) struct RecordFile {
    path: PathBuf,
    record: DesktopRecord,
}

impl RecordFile {
    /// Writes the record of a desktop of this process with no process yet.
    pub fn create(dir: &Path, marker: &str) -> std::io::Result<Self> {
        let owner =
            ProcessStamp::of(std::process::id()).ok_or_else(|| std::io::Error::other("cannot read this process's stat"))?;
        let file = Self {
            path: dir.join(RECORD_FILE),
            record: DesktopRecord { owner, marker: marker.to_owned(), display: None, processes: Vec::new(), cgroup: None },
        };
        file.save()?;
        Ok(file)
    }

    /// Notes the display number.
    pub fn set_display(&mut self, display: u32) -> std::io::Result<()> {
        self.record.display = Some(display);
        self.save()
    }

    /// Notes the desktop's control group.
    pub fn set_cgroup(&mut self, dirs: Vec<PathBuf>) -> std::io::Result<()> {
        self.record.cgroup = Some(dirs);
        self.save()
    }

    /// Notes a process the desktop started; one already gone is not noted.
    pub fn add(&mut self, pid: Option<u32>) -> std::io::Result<()> {
        let Some(stamp) = pid.and_then(ProcessStamp::of) else {
            return Ok(());
        };
        self.record.processes.push(stamp);
        self.save()
    }

    /// Written beside and renamed over, so a reader never sees half a record.
    fn save(&self) -> std::io::Result<()> {
        let text = serde_json::to_vec(&self.record).map_err(std::io::Error::other)?;
        let partial = self.path.with_extension("json.partial");
        std::fs::write(&partial, text)?;
        std::fs::rename(&partial, &self.path)
    }
}

/// What a sweep found of workers that are gone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Leftovers {
    /// Desktops whose owner is gone (their files are now removed).
    pub desktops: usize,
    /// Processes of theirs that were still running, and were killed.
    pub processes: usize,
}

impl Leftovers {
    /// One log line: a warning when processes had outlived their worker.
    pub fn report(&self) {
        let Leftovers { desktops, processes } = *self;
        if processes > 0 {
            tracing::warn!(desktops, processes, "killed the leftover desktops of a worker that is gone");
        } else {
            tracing::info!(desktops, processes, "no leftover desktop process");
        }
    }
}

/// Kills and removes, under `root`, every desktop whose owning worker is
/// gone. Blocking: run it off the async threads.
pub(crate) fn sweep(root: &Path) -> Leftovers {
    let mut found = Leftovers::default();
    let Ok(entries) = std::fs::read_dir(root) else {
        return found;
    };
    for dir in entries.filter_map(|entry| Some(entry.ok()?.path())) {
        let Some(record) = load(&dir.join(RECORD_FILE)) else {
            continue;
        };
        if record.owner.is_alive() {
            continue;
        }
        found.desktops += 1;
        found.processes += kill_leftovers(&record);
        remove_x_files(&record, &dir);
        if let Some(dirs) = record.cgroup.clone() {
            Cgroup::from_dirs(dirs).remove();
        }
        if let Err(error) = std::fs::remove_dir_all(&dir) {
            tracing::warn!(%error, dir = %dir.display(), "cannot remove a leftover desktop's directory");
        }
    }
    found
}

/// The record in `path`, if there is a readable one.
pub(crate) fn load(path: &Path) -> Option<DesktopRecord> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// The desktop's live processes: those recorded that still run, and any
/// other carrying its marker.
fn live(record: &DesktopRecord) -> Vec<u32> {
    let mut pids: Vec<u32> = record.processes.iter().filter(|p| p.is_alive()).map(|p| p.pid).collect();
    let grouped = record.cgroup.clone().map(|dirs| Cgroup::from_dirs(dirs).pids()).unwrap_or_default();
    for pid in process::live_processes(None, &record.marker).into_iter().chain(grouped) {
        if !pids.contains(&pid) {
            pids.push(pid);
        }
    }
    pids
}

/// SIGKILLs what is left of a desktop until nothing is; how many there were.
fn kill_leftovers(record: &DesktopRecord) -> usize {
    let first = live(record);
    let give_up = Instant::now() + SWEEP_TIMEOUT;
    let mut pids = first.clone();
    while !pids.is_empty() {
        if Instant::now() >= give_up {
            tracing::warn!(?pids, marker = %record.marker, "leftover desktop processes survive SIGKILL");
            break;
        }
        process::signal(Signal::Kill, None, &pids);
        std::thread::sleep(SWEEP_POLL);
        pids = live(record);
    }
    first.len()
}

/// A killed Xvfb leaves its socket (or the link to it) and lock; they go
/// only while they are this desktop's, so another server's stay.
fn remove_x_files(record: &DesktopRecord, dir: &Path) {
    let Some(display) = record.display else { return };
    launch::remove_display_files(display, dir, |pid| record.processes.iter().any(|p| p.pid == pid));
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use super::*;

    /// A process in its own group carrying `marker`, as a desktop's would.
    fn marked_sleep(marker: &str) -> std::process::Child {
        std::process::Command::new("sleep")
            .arg("60")
            .env(process::MARKER_VAR, marker)
            .process_group(0)
            .spawn()
            .expect("sleep starts")
    }

    fn reaped_or_gone(child: &mut std::process::Child) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }

    /// A finished process's stamp: an owner that is gone.
    fn gone_owner() -> ProcessStamp {
        let mut child = std::process::Command::new("true").spawn().expect("true starts");
        let stamp = ProcessStamp::of(child.id()).unwrap_or(ProcessStamp { pid: child.id(), started: 1 });
        child.wait().expect("true ends");
        stamp
    }

    #[test]
    fn the_sweep_kills_the_processes_of_a_desktop_whose_worker_is_gone() {
        let root = std::env::temp_dir().join(format!("flotilla-sweep-{:016x}", rand::random::<u64>()));
        let dir = root.join("local-gone");
        std::fs::create_dir_all(&dir).expect("dir");
        let marker = format!("sweep-{:016x}", rand::random::<u64>());
        let mut recorded = marked_sleep(&marker);
        let mut unrecorded = marked_sleep(&marker);
        let mut file = RecordFile::create(&dir, &marker).expect("record");
        file.record.owner = gone_owner();
        file.add(Some(recorded.id())).expect("record");
        assert!(!file.record.owner.is_alive(), "the owner is gone");

        let leftovers = sweep(&root);
        assert_eq!(leftovers, Leftovers { desktops: 1, processes: 2 });
        assert!(reaped_or_gone(&mut recorded), "the recorded process was killed");
        assert!(reaped_or_gone(&mut unrecorded), "the process found by its marker was killed");
        assert!(!dir.exists(), "the desktop's files are gone");
        assert_eq!(sweep(&root), Leftovers::default(), "a second sweep finds nothing");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn the_sweep_leaves_desktops_of_a_live_worker_alone() {
        let root = std::env::temp_dir().join(format!("flotilla-sweep-{:016x}", rand::random::<u64>()));
        let dir = root.join("local-live");
        std::fs::create_dir_all(&dir).expect("dir");
        let marker = format!("sweep-{:016x}", rand::random::<u64>());
        let mut child = marked_sleep(&marker);
        let mut file = RecordFile::create(&dir, &marker).expect("record");
        file.add(Some(child.id())).expect("record");

        assert_eq!(sweep(&root), Leftovers::default());
        assert!(matches!(child.try_wait(), Ok(None)), "the live worker's process still runs");
        assert_eq!(load(&dir.join(RECORD_FILE)).as_ref(), Some(&file.record));
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_dir_all(&root);
    }

    #[test]
    fn a_stamp_does_not_match_a_newer_process_with_the_same_pid() {
        let me = ProcessStamp::of(std::process::id()).expect("own stamp");
        assert!(me.is_alive());
        assert!(!ProcessStamp { started: me.started + 1, ..me }.is_alive());
    }
}
