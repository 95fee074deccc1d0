//! What one local sandbox may use of the host: memory, processes and CPU
//! through a control group of its own, the size of its home and `/tmp`
//! (tmpfs mounts made in the sandbox's [jail](super::jail)), and the largest
//! file and core dump through resource limits.
//!
//! The group is made where the worker may make one: under cgroup v2, below a
//! `flotilla-sandboxes` group at the root of the hierarchy with the
//! controllers enabled; under v1, below the worker's own group in each of
//! the `memory`, `pids` and `cpu` hierarchies. Every process of the sandbox
//! joins it before it runs anything (see [`Confinement::command`]), so
//! nothing it starts escapes it. A sandbox whose group ran out of memory or
//! processes is [`Cgroup::exceeded`] and is killed whole by its provider; the
//! others, the worker and everything else on the host go on.
//!
//! A worker that cannot make groups (not root, nothing delegated) still
//! bounds each sandbox's processes and memory, with resource limits and a
//! watch of its own ([`Confinement::exceeded_without_group`]):
//! - `RLIMIT_NPROC`, set inside the sandbox's user namespace, where the
//!   kernel counts processes per namespace (ucounts, Linux 5.14 on): the
//!   sandbox's tasks, not the worker user's;
//! - `oom_score_adj` 1000 on every sandbox process, so a host short of
//!   memory kills sandbox processes before the worker or Redis;
//! - the reaper counts the tasks and the anonymous memory of the sandbox's
//!   pid namespace and kills a sandbox at its process limit (within a
//!   sixteenth) or past its memory, as a group's events would have it killed.
//!
//! (No `RLIMIT_DATA` or `RLIMIT_AS`: Chromium maps far more than it uses;
//! under a data limit of twice the default memory its window never came up.)

use std::path::{Path, PathBuf};

use flotilla_sandbox::SandboxError;

/// Where cgroup hierarchies are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The v2 group every sandbox group goes below.
const V2_PARENT: &str = "flotilla-sandboxes";
/// The v1 hierarchies a sandbox's group is made in.
const V1_CONTROLLERS: &[&str] = &["memory", "pids", "cpu"];
/// The CPU accounting period, in microseconds.
const CPU_PERIOD_US: u64 = 100_000;

/// What each sandbox may use; from the worker's configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SandboxLimits {
    /// Memory of all its processes together (and its tmpfs files), bytes.
    pub memory_bytes: u64,
    /// Processes and threads at once.
    pub pids: u32,
    /// CPU time, in cores (1.5 is one and a half cores).
    pub cpus: f64,
    /// The size of its home, bytes.
    pub home_bytes: u64,
    /// The size of its `/tmp`, bytes.
    pub tmp_bytes: u64,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self { memory_bytes: 4 << 30, pids: 1024, cpus: 1.0, home_bytes: 2 << 30, tmp_bytes: 1 << 30 }
    }
}

impl SandboxLimits {
    /// The largest file one process may write: no more than fits at home.
    fn file_bytes(&self) -> u64 {
        self.home_bytes.max(self.tmp_bytes)
    }

    /// Why these limits cannot be used, if they cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.memory_bytes < 64 << 20 {
            return Err("a sandbox needs at least 64 MiB of memory".into());
        }
        if self.pids < 32 {
            return Err("a sandbox needs at least 32 processes".into());
        }
        if !(self.cpus.is_finite() && self.cpus >= 0.05) {
            return Err("a sandbox needs at least 0.05 cores".into());
        }
        if self.home_bytes < 1 << 20 || self.tmp_bytes < 1 << 20 {
            return Err("a sandbox's home and /tmp need at least 1 MiB each".into());
        }
        Ok(())
    }
}

/// The layout of this host's control groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Hierarchy {
    /// cgroup v2: one tree.
    Unified,
    /// cgroup v1: the worker's own group in each controller's tree.
    Legacy(Vec<(&'static str, PathBuf)>),
    /// No group can be made here.
    None(String),
}

impl Hierarchy {
    /// Finds how this host's groups are laid out and whether the worker can
    /// make groups in them.
    pub fn detect() -> Self {
        let root = Path::new(CGROUP_ROOT);
        if root.join("cgroup.controllers").exists() {
            return match prepare_v2_parent(root) {
                Ok(()) => Self::Unified,
                Err(why) => Self::None(why),
            };
        }
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mut groups = Vec::new();
        for controller in V1_CONTROLLERS {
            let Some(path) = v1_own_group(&own, controller) else {
                return Self::None(format!("no cgroup v1 {controller} hierarchy is mounted"));
            };
            // A container may see its own group as the top of the tree.
            let own = root.join(controller).join(path.trim_start_matches('/'));
            let dir = if own.is_dir() { own } else { root.join(controller) };
            if let Err(e) = probe_writable(&dir) {
                return Self::None(format!("cannot make a group in {}: {e}", dir.display()));
            }
            groups.push((*controller, dir));
        }
        Self::Legacy(groups)
    }
}

/// This process's group in v1 `controller`'s tree, from `/proc/self/cgroup`.
fn v1_own_group(text: &str, controller: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers.split(',').any(|c| c == controller).then(|| path.to_owned())
    })
}

/// Makes and removes a group in `dir` to see that the worker may.
fn probe_writable(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!("flotilla-probe-{:08x}", rand::random::<u32>()));
    std::fs::create_dir(&probe)?;
    std::fs::remove_dir(&probe)
}

/// The v2 parent group with the memory, pids and cpu controllers handed down.
fn prepare_v2_parent(root: &Path) -> Result<(), String> {
    let parent = root.join(V2_PARENT);
    let enable = |dir: &Path| {
        std::fs::write(dir.join("cgroup.subtree_control"), "+memory +pids +cpu")
            .map_err(|e| format!("cannot enable the memory, pids and cpu controllers in {}: {e}", dir.display()))
    };
    enable(root)?;
    match std::fs::create_dir(&parent) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot make {}: {e}", parent.display())),
    }
    enable(&parent)
}

/// One sandbox's control group (one directory under v2, one per controller
/// under v1).
#[derive(Debug, Clone)]
pub(crate) struct Cgroup {
    dirs: Vec<PathBuf>,
    unified: bool,
}

impl Cgroup {
    /// Makes the group `name` with `limits` set; fails closed when a limit
    /// cannot be written.
    pub fn create(hierarchy: &Hierarchy, name: &str, limits: &SandboxLimits) -> Result<Option<Self>, SandboxError> {
        let group = match hierarchy {
            Hierarchy::None(_) => return Ok(None),
            Hierarchy::Unified => Self { dirs: vec![Path::new(CGROUP_ROOT).join(V2_PARENT).join(name)], unified: true },
            Hierarchy::Legacy(parents) => {
                Self { dirs: parents.iter().map(|(_, parent)| parent.join(name)).collect(), unified: false }
            }
        };
        for dir in &group.dirs {
            std::fs::create_dir_all(dir)?;
        }
        if let Err(e) = group.write_limits(limits) {
            group.remove();
            return Err(SandboxError::Unavailable(format!("cannot set the sandbox's limits: {e}")));
        }
        Ok(Some(group))
    }

    /// The same group, found again from the directories a record kept.
    pub fn from_dirs(dirs: Vec<PathBuf>) -> Self {
        let unified = dirs.len() == 1;
        Self { dirs, unified }
    }

    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    fn write_limits(&self, limits: &SandboxLimits) -> std::io::Result<()> {
        let quota = ((limits.cpus * CPU_PERIOD_US as f64) as u64).max(1000);
        if self.unified {
            let dir = &self.dirs[0];
            std::fs::write(dir.join("memory.max"), limits.memory_bytes.to_string())?;
            std::fs::write(dir.join("memory.swap.max"), "0").or_else(ignore_missing)?;
            std::fs::write(dir.join("pids.max"), limits.pids.to_string())?;
            return std::fs::write(dir.join("cpu.max"), format!("{quota} {CPU_PERIOD_US}"));
        }
        for dir in &self.dirs {
            match controller_of(dir) {
                Some("memory") => {
                    std::fs::write(dir.join("memory.limit_in_bytes"), limits.memory_bytes.to_string())?;
                    std::fs::write(dir.join("memory.memsw.limit_in_bytes"), limits.memory_bytes.to_string())
                        .or_else(ignore_missing)?;
                }
                Some("pids") => std::fs::write(dir.join("pids.max"), limits.pids.to_string())?,
                Some("cpu") => {
                    std::fs::write(dir.join("cpu.cfs_period_us"), CPU_PERIOD_US.to_string())?;
                    std::fs::write(dir.join("cpu.cfs_quota_us"), quota.to_string())?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The files a process writes its pid to, to join the group.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|dir| dir.join("cgroup.procs")).collect()
    }

    /// The processes in the group now.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self
            .procs_files()
            .iter()
            .filter_map(|file| std::fs::read_to_string(file).ok())
            .flat_map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect::<Vec<_>>())
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// Which limit the group ran into, if it did: the kernel killed a
    /// process for memory, or refused one a new process.
    pub fn exceeded(&self) -> Option<&'static str> {
        let count = |file: PathBuf, key: &str| -> u64 {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            text.lines().find_map(|l| l.strip_prefix(key).and_then(|rest| rest.trim().parse().ok())).unwrap_or(0)
        };
        let (memory, pids) = if self.unified {
            let dir = &self.dirs[0];
            (count(dir.join("memory.events"), "oom_kill "), count(dir.join("pids.events"), "max "))
        } else {
            let of = |name: &str| self.dirs.iter().find(|d| controller_of(d) == Some(name));
            (
                of("memory").map_or(0, |d| count(d.join("memory.oom_control"), "oom_kill ")),
                of("pids").map_or(0, |d| count(d.join("pids.events"), "max ")),
            )
        };
        if memory > 0 {
            Some("memory")
        } else if pids > 0 {
            Some("processes")
        } else {
            None
        }
    }

    /// Removes the group's directories (once it is empty); one that is not
    /// empty yet stays.
    pub fn remove(&self) {
        for dir in &self.dirs {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// The v1 controller whose tree `dir` is in.
fn controller_of(dir: &Path) -> Option<&'static str> {
    let relative = dir.strip_prefix(CGROUP_ROOT).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    V1_CONTROLLERS.iter().copied().find(|c| *c == first)
}

fn ignore_missing(e: std::io::Error) -> std::io::Result<()> {
    if e.kind() == std::io::ErrorKind::NotFound {
        Ok(())
    } else {
        Err(e)
    }
}

/// How a sandbox's processes are held to its limits: the group they join
/// and the resource limits they start with.
#[derive(Debug, Clone)]
pub(crate) struct Confinement {
    pub cgroup: Option<Cgroup>,
    pub limits: SandboxLimits,
    /// `RLIMIT_NPROC`, counted in the sandbox's user namespace. Only the
    /// programs that enter the namespace ([`Confinement::wrap`]) take it
    /// from outside; the holder, which makes the namespace, sets it inside
    /// ([`Confinement::nproc_inside`]), since a namespace made under a
    /// process limit holds its maker's whole uid to it.
    pub nproc: Option<u32>,
}

/// The one-line `sh` that writes its pid into each group file it is given,
/// marks itself first for the out-of-memory killer, then runs the rest of
/// its arguments.
const JOIN_SCRIPT: &str = r#"echo 1000 > /proc/self/oom_score_adj || exit 125; n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@""#;

/// How close to its process limit a sandbox without a group may come before
/// it counts as having reached it: a fork bomb at the limit loses and
/// regains a few processes all the time.
const NPROC_SLACK_DIVISOR: u32 = 16;

impl Confinement {
    /// The arguments of `sh` that run `program args` inside the group and
    /// under the resource limits: `-c JOIN n files… prlimit … -- program args`.
    pub fn wrap(&self, program: &str, args: &[String]) -> Vec<String> {
        self.wrap_with(self.nproc, program, args)
    }

    /// As [`Confinement::wrap`], with the process limit left for inside.
    pub fn wrap_without_nproc(&self, program: &str, args: &[String]) -> Vec<String> {
        self.wrap_with(None, program, args)
    }

    fn wrap_with(&self, nproc: Option<u32>, program: &str, args: &[String]) -> Vec<String> {
        let files = self.cgroup.as_ref().map(Cgroup::procs_files).unwrap_or_default();
        let mut argv = vec!["-c".to_owned(), JOIN_SCRIPT.into(), "join".into(), files.len().to_string()];
        argv.extend(files.iter().map(|f| f.display().to_string()));
        argv.extend(["prlimit".into(), format!("--fsize={}", self.limits.file_bytes()), "--core=0".into()]);
        if let Some(nproc) = nproc {
            argv.push(format!("--nproc={nproc}"));
        }
        argv.push("--".into());
        argv.push(program.to_owned());
        argv.extend(args.iter().cloned());
        argv
    }

    /// The command prefix that sets the process limit from inside the
    /// sandbox's user namespace: `prlimit --nproc=N --`.
    pub fn nproc_inside(&self) -> Vec<String> {
        match self.nproc {
            Some(nproc) => vec!["prlimit".into(), format!("--nproc={nproc}"), "--".into()],
            None => Vec::new(),
        }
    }

    /// Which limit a sandbox without a control group ran into, from what
    /// the processes of its pid namespace (the children of `holder`'s) use
    /// now: its tasks at the process limit, or their anonymous memory past
    /// the memory limit. `None` with a group: its own events say.
    pub fn exceeded_without_group(&self, holder: u32) -> Option<&'static str> {
        if self.cgroup.is_some() {
            return None;
        }
        let usage = super::process::namespace_usage(holder)?;
        let pids = self.limits.pids;
        if usage.anonymous_bytes > self.limits.memory_bytes {
            Some("memory")
        } else if usage.tasks >= pids - pids / NPROC_SLACK_DIVISOR {
            Some("processes")
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_own_v1_group_is_read_per_controller() {
        let text = "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/b3\n2:cpu,cpuacct:/x\n0::/\n";
        assert_eq!(v1_own_group(text, "memory").as_deref(), Some("/process_api/b3"));
        assert_eq!(v1_own_group(text, "cpu").as_deref(), Some("/x"));
        assert_eq!(v1_own_group(text, "pids").as_deref(), Some("/"));
        assert_eq!(v1_own_group(text, "blkio"), None);
    }

    #[test]
    fn limits_too_small_to_run_a_desktop_are_refused() {
        assert!(SandboxLimits::default().check().is_ok());
        for bad in [
            SandboxLimits { memory_bytes: 1 << 20, ..Default::default() },
            SandboxLimits { pids: 2, ..Default::default() },
            SandboxLimits { cpus: f64::NAN, ..Default::default() },
            SandboxLimits { home_bytes: 10, ..Default::default() },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_confined_command_joins_every_group_file_then_runs_under_prlimit() {
        let confinement = Confinement {
            cgroup: Some(Cgroup::from_dirs(vec!["/sys/fs/cgroup/pids/s".into(), "/sys/fs/cgroup/memory/s".into()])),
            limits: SandboxLimits::default(),
            nproc: Some(1024),
        };
        let argv = confinement.wrap("nsenter", &["-U".to_owned()]);
        assert_eq!(argv[..4], ["-c", JOIN_SCRIPT, "join", "2"]);
        assert_eq!(argv[4..6], ["/sys/fs/cgroup/pids/s/cgroup.procs", "/sys/fs/cgroup/memory/s/cgroup.procs"]);
        assert!(argv.contains(&"--nproc=1024".to_owned()) && argv.contains(&"--core=0".to_owned()));
        assert!(argv[1].starts_with("echo 1000 > /proc/self/oom_score_adj || exit 125;"), "{}", argv[1]);
        assert_eq!(argv[argv.len() - 2..], ["nsenter", "-U"]);
        let holder = confinement.wrap_without_nproc("unshare", &[]);
        assert!(!holder.iter().any(|a| a.starts_with("--nproc")), "{holder:?}");
        assert_eq!(confinement.nproc_inside(), ["prlimit", "--nproc=1024", "--"]);
    }
}
