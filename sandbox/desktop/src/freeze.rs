//! Pausing a desktop: every process of the sandbox is stopped (SIGSTOP),
//! found by its process group, its marker and its control group, until a
//! pass finds none still running, so a process forked during the pass is
//! stopped too. A stopped process keeps its memory and uses no CPU;
//! resuming sends SIGCONT to the same set. Blocking; run off the runtime.

use std::time::{Duration, Instant};

use super::limits::Cgroup;
use super::process::{self, Signal};

/// How long a pause may take to catch every process.
const FREEZE_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause between passes.
const PASS_PAUSE: Duration = Duration::from_millis(2);

/// Every live process of the sandbox.
pub(crate) fn members(pgid: Option<u32>, marker: &str, cgroup: Option<&Cgroup>) -> Vec<u32> {
    let mut pids = process::live_processes(pgid, marker);
    pids.extend(cgroup.map(Cgroup::pids).unwrap_or_default());
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Whether `pid` is stopped (or gone, which is as good).
fn stopped(pid: u32) -> bool {
    process::stat(pid).is_none_or(|(state, _)| matches!(state, 'T' | 't' | 'Z' | 'X' | 'x'))
}

/// Stops every process of the sandbox; how many it stopped, or the pids
/// still running when [`FREEZE_TIMEOUT`] passed.
pub(crate) fn freeze(pgid: Option<u32>, marker: &str, cgroup: Option<&Cgroup>) -> Result<usize, Vec<u32>> {
    let give_up = Instant::now() + FREEZE_TIMEOUT;
    loop {
        let pids = members(pgid, marker, cgroup);
        let running: Vec<u32> = pids.iter().copied().filter(|&pid| !stopped(pid)).collect();
        if running.is_empty() {
            return Ok(pids.len());
        }
        if Instant::now() >= give_up {
            return Err(running);
        }
        process::signal(Signal::Stop, None, &running);
        std::thread::sleep(PASS_PAUSE);
    }
}

/// Lets every process of the sandbox run again.
pub(crate) fn thaw(pgid: Option<u32>, marker: &str, cgroup: Option<&Cgroup>) {
    let pids = members(pgid, marker, cgroup);
    process::signal(Signal::Continue, None, &pids);
}
