//! Who a local sandbox is on the host, and which display it owns.
//!
//! **No sandbox process is ever host uid 0.** A worker that is not root
//! maps its sandboxes onto its own uid (`unshare --map-root-user`), as
//! rootless containers do. A worker that is root maps each sandbox onto one
//! uid and gid of its own from a subordinate range that `/etc/subuid` and
//! `/etc/subgid` give `root` (`scripts/setup.sh` adds
//! `root:1000000000:65536` where none is set); without such a range a root
//! worker refuses to run sandboxes. The worker starts the sandbox's
//! namespaces as that uid, so their root is that uid, and the sandbox's
//! programs run as uid 1000 on top of it without capabilities: host files
//! owned by root are other people's files to them.
//!
//! Each sandbox holds a **slot** for its life: an exclusive `flock` on a
//! file under [`SLOT_DIR`], taken by the process that owns the desktop and
//! released by the kernel when that process dies. The slot picks the
//! sandbox's uid (root workers) and its display number, so two sandboxes on
//! one host, of one worker or of several, never share either. A free lock
//! does not make a free uid: a worker that crashed released its locks while
//! its sandboxes' processes may still run until the next sweep. A root
//! worker's claim therefore passes over a slot while any process of its uid
//! runs, and kills those leftovers so the slot is free for a later claim.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use flotilla_sandbox::SandboxError;

use super::process::{self, Signal};

/// Where slot locks live: shared by every worker on the host.
pub(crate) const SLOT_DIR: &str = "/tmp/.flotilla-slots";
/// The first display number a slot hands out (far above the numbers
/// people's own X servers take).
const FIRST_DISPLAY: u32 = 1000;
/// How many slots there are at most: displays `:1000` to `:4999`.
const MAX_SLOTS: u32 = 4000;
/// The range `scripts/setup.sh` gives root when it has none.
pub(crate) const DEFAULT_BASE: u32 = 1_000_000_000;
pub(crate) const DEFAULT_COUNT: u32 = 65536;

/// A range of host ids set aside for one user's namespaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SubordinateRange {
    pub uid: u32,
    pub gid: u32,
    pub count: u32,
}

/// How the worker's user maps onto its sandboxes'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostUser {
    /// The worker is not root: a sandbox's root is the worker's own uid.
    Unprivileged,
    /// The worker is root: each sandbox's root is one uid of this range.
    Root(SubordinateRange),
}

impl HostUser {
    /// The worker's case, read from its effective uid and, for root, the
    /// subordinate ranges; a root worker without one is refused with the fix.
    pub fn detect() -> Result<Self, String> {
        if effective_uid()? != 0 {
            return Ok(Self::Unprivileged);
        }
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let uid = subordinate(&read("/etc/subuid"));
        let gid = subordinate(&read("/etc/subgid"));
        match (uid, gid) {
            (Some((uid, uid_count)), Some((gid, gid_count))) => {
                Ok(Self::Root(SubordinateRange { uid, gid, count: uid_count.min(gid_count) }))
            }
            _ => Err(format!(
                "the worker runs as root, so sandboxes need a subordinate uid and gid range of their own, and /etc/subuid or \
                 /etc/subgid has none for root; run scripts/setup.sh or add 'root:{DEFAULT_BASE}:{DEFAULT_COUNT}' to both"
            )),
        }
    }

    /// How many sandboxes may run on this host at once.
    fn slots(self) -> u32 {
        match self {
            Self::Unprivileged => MAX_SLOTS,
            Self::Root(range) => range.count.min(MAX_SLOTS),
        }
    }

    /// The host uid and gid that are root inside the sandbox of `slot`, for
    /// a root worker; `None` when the worker's own uid is.
    pub fn ids(self, slot: &Slot) -> Option<(u32, u32)> {
        match self {
            Self::Unprivileged => None,
            Self::Root(range) => Some((range.uid + slot.number, range.gid + slot.number)),
        }
    }
}

/// The effective uid of this process (the owner of `/proc/self`).
fn effective_uid() -> Result<u32, String> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map(|m| m.uid()).map_err(|e| format!("cannot read /proc/self: {e}"))
}

/// The first range of `root` (by name or uid) in a `subuid`-style file:
/// `name:first:count` lines.
fn subordinate(text: &str) -> Option<(u32, u32)> {
    text.lines().find_map(|line| {
        let mut fields = line.trim().split(':');
        let (name, first, count) = (fields.next()?, fields.next()?, fields.next()?);
        if !matches!(name, "root" | "0") || fields.next().is_some() {
            return None;
        }
        let (first, count) = (first.parse::<u32>().ok()?, count.parse::<u32>().ok()?);
        (count > 0 && first > 0 && first.checked_add(count).is_some()).then_some((first, count))
    })
}

/// One sandbox's hold on its uid and display; released when dropped or when
/// the holding process dies.
#[derive(Debug)]
pub(crate) struct Slot {
    pub number: u32,
    _lock: File,
}

impl Slot {
    /// The display number this slot owns.
    pub fn display(&self) -> u32 {
        FIRST_DISPLAY + self.number
    }

    /// Takes a free slot for `user` whose display `usable` says may be
    /// taken (its socket path is free), starting at a random one.
    pub fn claim(user: HostUser, usable: impl Fn(u32) -> bool) -> Result<Self, SandboxError> {
        Self::claim_from(user, rand::random::<u32>(), usable)
    }

    /// As [`Slot::claim`], looking from slot `start` (modulo the count) on.
    fn claim_from(user: HostUser, start: u32, usable: impl Fn(u32) -> bool) -> Result<Self, SandboxError> {
        let dir = Path::new(SLOT_DIR);
        make_shared_dir(dir)?;
        let count = user.slots();
        for offset in 0..count {
            let number = (start % count + offset) % count;
            if let Some(lock) = try_lock(&slot_path(dir, number))? {
                let slot = Self { number, _lock: lock };
                if usable(slot.display()) && !slot.has_leftovers(user) {
                    return Ok(slot);
                }
            }
        }
        Err(SandboxError::Unavailable(format!("all {count} sandbox slots of this host are taken")))
    }

    /// Whether processes of a previous holder still run as this slot's uid
    /// (a root worker's slot only; others have no uid of their own). They
    /// are sent SIGKILL, and the slot is passed over this time: no new
    /// sandbox shares a uid with a process it does not own.
    fn has_leftovers(&self, user: HostUser) -> bool {
        let Some((uid, _)) = user.ids(self) else {
            return false;
        };
        let pids = process::processes_of_uid(uid);
        if pids.is_empty() {
            return false;
        }
        tracing::warn!(slot = self.number, uid, processes = pids.len(), "killing the leftovers of a sandbox slot's last holder");
        process::signal(Signal::Kill, None, &pids);
        true
    }
}

fn slot_path(dir: &Path, number: u32) -> PathBuf {
    dir.join(format!("{number}.lock"))
}

/// The slot directory, world-writable and sticky like `/tmp`, so workers of
/// any user share it.
fn make_shared_dir(dir: &Path) -> Result<(), SandboxError> {
    match std::fs::create_dir(dir) {
        Ok(()) => std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777))?,
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// The lock on `path` if nobody holds it. A file another user made is locked
/// through a read-only handle.
fn try_lock(path: &Path) -> Result<Option<File>, SandboxError> {
    let file = match OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::PermissionDenied => File::open(path)?,
        Err(e) => return Err(e.into()),
    };
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_ranges_are_read_by_name_or_uid_and_bad_lines_skipped() {
        assert_eq!(subordinate("alice:100000:65536\nroot:200000:1000\n"), Some((200000, 1000)));
        assert_eq!(subordinate("0:300000:5\n"), Some((300000, 5)));
        for bad in ["root:x:5", "root:1:0", "root:0:5", "root:4294967295:5", "root:1:2:3", "", "alice:1:2"] {
            assert_eq!(subordinate(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_held_slot_is_not_handed_out_again_until_dropped() {
        let first = Slot::claim(HostUser::Unprivileged, |_| true).expect("a slot");
        let refused = std::cell::Cell::new(0);
        let other = Slot::claim(HostUser::Unprivileged, |_| {
            refused.set(refused.get() + 1);
            refused.get() > 3
        })
        .expect("a slot past the unusable ones");
        assert_eq!(refused.get(), 4, "a display that is not usable is passed over");
        drop(other);
        let path = slot_path(Path::new(SLOT_DIR), first.number);
        assert!(try_lock(&path).expect("lockable").is_none(), "the slot is held");
        let number = first.number;
        drop(first);
        assert!(try_lock(&path).expect("lockable").is_some(), "the slot is free again");
        let range = SubordinateRange { uid: 5000, gid: 7000, count: 10 };
        let slot = Slot { number, _lock: File::open(&path).expect("open") };
        assert_eq!(HostUser::Root(range).ids(&slot), Some((5000 + number, 7000 + number)));
        assert_eq!(HostUser::Unprivileged.ids(&slot), None);
        assert_eq!(slot.display(), FIRST_DISPLAY + number);
    }

    /// A process left running as a slot's uid, as a crashed root worker's
    /// sandbox leaves one: no claim hands that slot out while it runs, and
    /// the claim kills it so the slot is free again afterwards.
    #[test]
    fn a_slot_whose_uid_still_runs_a_leftover_is_not_handed_out() {
        if effective_uid() != Ok(0) {
            eprintln!("only a root worker gives slots uids of their own; as non-root each sandbox is the worker's uid");
            return;
        }
        let range = SubordinateRange { uid: DEFAULT_BASE, gid: DEFAULT_BASE, count: DEFAULT_COUNT };
        let user = HostUser::Root(range);
        let free = Slot::claim(user, |_| true).expect("a slot");
        let (number, (uid, gid)) = (free.number, user.ids(&free).expect("a root worker's slot has ids"));
        drop(free);
        let mut leftover = std::process::Command::new("setpriv")
            .args([format!("--reuid={uid}"), format!("--regid={gid}"), "--clear-groups".into(), "--".into()])
            .args(["sleep", "120"])
            .spawn()
            .expect("setpriv starts");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while process::processes_of_uid(uid) != [leftover.id()] {
            assert!(std::time::Instant::now() < deadline, "the leftover never ran as uid {uid}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }

        let claimed = Slot::claim_from(user, number, |_| true).expect("another slot");
        assert_ne!(claimed.number, number, "the slot of a live leftover was handed out");
        let claimed_uid = user.ids(&claimed).expect("ids").0;
        assert_eq!(process::processes_of_uid(claimed_uid), Vec::<u32>::new(), "the new sandbox's uid is its own");
        let status = leftover.wait().expect("the leftover ends");
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "the leftover was killed");
        assert_eq!(process::processes_of_uid(uid), Vec::<u32>::new());

        drop(claimed);
        let again = Slot::claim_from(user, number, |_| true).expect("the freed slot");
        assert_eq!(again.number, number, "with its leftover gone the slot is handed out again");
    }
}
