//! One watched directory of a sandbox, for envd's `WatchDir` and its
//! polled watchers: inotify on the host, on the very directory the sandbox
//! sees, with events named as envd names them (the path relative to the
//! watched directory).
//!
//! Paths are the sandbox's: a relative one (or `~/…`) is under its home,
//! and every path is resolved beneath the sandbox's own file tree (a
//! handle from [`LocalProvider::file_tree`](flotilla_desktop::LocalProvider::file_tree))
//! with `openat2` and `RESOLVE_IN_ROOT`: `..` and links stop at the
//! sandbox's root, so no path of a sandbox names a host directory.
//! Recursive watching adds each subdirectory by name beneath the watched
//! one without following any link (`RESOLVE_BENEATH`, `RESOLVE_NO_SYMLINKS`),
//! including directories created or moved in later. The watch is added
//! through the resolved handle (`/proc/self/fd/N`), never by a path that
//! could be swapped meanwhile.
//!
//! inotify's events map as fsnotify's do for envd: create and moved-in are
//! `CREATE`, modify `WRITE`, delete `REMOVE`, moved-out `RENAME`, attribute
//! changes `CHMOD`; the watched directory's own removal or move is named
//! `.`, and ends the watch.

use std::collections::HashMap;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
use rustix::fs::{openat2, Dir, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use serde::Serialize;
use tokio::net::unix::pipe;

/// The most directories one watch covers.
const MAX_DIRECTORIES: usize = 4096;
/// The events asked of inotify for each directory.
const ASKED: WatchFlags = WatchFlags::CREATE
    .union(WatchFlags::MODIFY)
    .union(WatchFlags::ATTRIB)
    .union(WatchFlags::DELETE)
    .union(WatchFlags::DELETE_SELF)
    .union(WatchFlags::MOVED_FROM)
    .union(WatchFlags::MOVED_TO)
    .union(WatchFlags::MOVE_SELF)
    .union(WatchFlags::ONLYDIR)
    .union(WatchFlags::EXCL_UNLINK);

/// What happened to an entry, as envd's `EventType` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum EventType {
    #[serde(rename = "EVENT_TYPE_CREATE")]
    Create,
    #[serde(rename = "EVENT_TYPE_WRITE")]
    Write,
    #[serde(rename = "EVENT_TYPE_REMOVE")]
    Remove,
    #[serde(rename = "EVENT_TYPE_RENAME")]
    Rename,
    #[serde(rename = "EVENT_TYPE_CHMOD")]
    Chmod,
}

/// One event, as envd's `FilesystemEvent`: `name` is relative to the
/// watched directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct FsEvent {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: EventType,
}

/// Why a directory cannot be watched, or a watch stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WatchError {
    #[error("path '{0}' does not exist")]
    NotFound(String),
    #[error("path '{0}' is not a directory")]
    NotADirectory(String),
    #[error("path '{0}' cannot be watched: {1}")]
    Unwatchable(String, String),
    #[error("more than {MAX_DIRECTORIES} directories under the watched one")]
    TooManyDirectories,
    #[error("events came faster than they were read, and some were lost")]
    Overflow,
    #[error("watching failed: {0}")]
    Io(String),
}

impl WatchError {
    /// Its Connect code.
    pub fn code(&self) -> &'static str {
        match self {
            WatchError::NotFound(_) => "not_found",
            WatchError::NotADirectory(_) | WatchError::Unwatchable(..) => "invalid_argument",
            WatchError::TooManyDirectories | WatchError::Overflow => "resource_exhausted",
            WatchError::Io(_) => "internal",
        }
    }
}

impl From<io::Error> for WatchError {
    fn from(e: io::Error) -> Self {
        WatchError::Io(e.to_string())
    }
}

/// `path` as the sandbox means it: absolute, `~` and relative paths under `home`.
pub(crate) fn sandbox_path(path: &str, home: &Path) -> PathBuf {
    match path.strip_prefix('~') {
        Some("") => home.to_path_buf(),
        Some(rest) if rest.starts_with('/') => home.join(rest.trim_start_matches('/')),
        _ if path.starts_with('/') => PathBuf::from(path),
        _ => home.join(path),
    }
}

/// Each inotify event, read off the queue and owned.
#[derive(Debug)]
struct Raw {
    wd: i32,
    flags: ReadFlags,
    name: Option<String>,
}

/// The event types one inotify event means.
fn kinds(flags: ReadFlags) -> Vec<EventType> {
    let mut kinds = Vec::new();
    if flags.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO) {
        kinds.push(EventType::Create);
    }
    if flags.intersects(ReadFlags::MOVED_FROM | ReadFlags::MOVE_SELF) {
        kinds.push(EventType::Rename);
    }
    if flags.contains(ReadFlags::ATTRIB) {
        kinds.push(EventType::Chmod);
    }
    if flags.contains(ReadFlags::MODIFY) {
        kinds.push(EventType::Write);
    }
    if flags.intersects(ReadFlags::DELETE | ReadFlags::DELETE_SELF) {
        kinds.push(EventType::Remove);
    }
    kinds
}

/// `name` under `dir` (relative to the watched directory; `""` is itself).
fn joined(dir: &str, name: &str) -> String {
    match (dir.is_empty(), name.is_empty()) {
        (true, true) => ".".into(),
        (true, false) => name.into(),
        (false, true) => dir.into(),
        (false, false) => format!("{dir}/{name}"),
    }
}

/// Every event queued on `queue`; `WouldBlock` when there is none.
fn drain(queue: &pipe::Receiver, buffer: &mut [MaybeUninit<u8>]) -> io::Result<Vec<Raw>> {
    let mut raw = Vec::new();
    let mut reader = inotify::Reader::new(queue, buffer);
    loop {
        match reader.next() {
            Ok(event) => raw.push(Raw {
                wd: event.wd(),
                flags: event.events(),
                name: event.file_name().and_then(|n| n.to_str().ok()).map(str::to_owned),
            }),
            Err(Errno::WOULDBLOCK) if raw.is_empty() => return Err(io::ErrorKind::WouldBlock.into()),
            Err(Errno::WOULDBLOCK) => return Ok(raw),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// A watch on one directory (and, when recursive, those under it).
#[derive(Debug)]
pub(crate) struct DirWatch {
    /// The inotify queue (tokio's pipe end polls any descriptor).
    queue: pipe::Receiver,
    /// The watched directory (a path handle, for finding subdirectories).
    base: OwnedFd,
    recursive: bool,
    /// Each watch descriptor's directory, relative to the watched one.
    dirs: HashMap<i32, String>,
    ended: bool,
}

impl DirWatch {
    /// Watches `path` (as the sandbox means it, with its `home`) beneath `root`.
    pub fn start(root: &OwnedFd, home: &Path, path: &str, recursive: bool) -> Result<Self, WatchError> {
        let inside = sandbox_path(path, home);
        let resolve = ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS;
        let base =
            openat2(root, &inside, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty(), resolve).map_err(|e| {
                match e {
                    Errno::NOENT => WatchError::NotFound(path.into()),
                    Errno::NOTDIR => WatchError::NotADirectory(path.into()),
                    other => WatchError::Unwatchable(path.into(), other.to_string()),
                }
            })?;
        let queue = inotify::init(CreateFlags::NONBLOCK | CreateFlags::CLOEXEC).map_err(io::Error::from)?;
        let mut watch =
            Self { queue: pipe::Receiver::from_owned_fd_unchecked(queue)?, base, recursive, dirs: HashMap::new(), ended: false };
        watch.add_tree("")?;
        Ok(watch)
    }

    /// Watches directory `relative` (to the watched one) and, when
    /// recursive, every directory under it.
    fn add_tree(&mut self, relative: &str) -> Result<(), WatchError> {
        let mut pending = vec![relative.to_owned()];
        while let Some(dir) = pending.pop() {
            let Some(handle) = self.open_beneath(&dir, OFlags::PATH) else { continue };
            if self.dirs.len() >= MAX_DIRECTORIES {
                return Err(WatchError::TooManyDirectories);
            }
            let wd = inotify::add_watch(&self.queue, format!("/proc/self/fd/{}", handle.as_raw_fd()), ASKED)
                .map_err(|e| WatchError::Unwatchable(joined(&dir, ""), e.to_string()))?;
            self.dirs.insert(wd, dir.clone());
            if self.recursive {
                pending.extend(self.subdirectories(&dir).into_iter().map(|name| joined(&dir, &name)));
            }
        }
        Ok(())
    }

    /// A handle on directory `relative` beneath the watched one, reached
    /// by names alone (no link, no `..`); `None` once it is gone.
    fn open_beneath(&self, relative: &str, access: OFlags) -> Option<OwnedFd> {
        let path = if relative.is_empty() { "." } else { relative };
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        let flags = access | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        openat2(&self.base, path, flags, Mode::empty(), resolve).ok()
    }

    /// The names of the directories (not links to them) in `relative`.
    fn subdirectories(&self, relative: &str) -> Vec<String> {
        let Some(handle) = self.open_beneath(relative, OFlags::RDONLY) else { return Vec::new() };
        let Ok(entries) = Dir::read_from(&handle) else { return Vec::new() };
        entries
            .filter_map(Result::ok)
            .filter(|entry| entry.file_type() == FileType::Directory)
            .filter_map(|entry| entry.file_name().to_str().ok().map(str::to_owned))
            .filter(|name| name != "." && name != "..")
            .collect()
    }

    /// The next events, waiting until there are some; none once the
    /// watched directory is gone.
    pub async fn next_events(&mut self) -> Result<Vec<FsEvent>, WatchError> {
        loop {
            if self.ended {
                return Ok(Vec::new());
            }
            let raw = self.read_queue().await?;
            let events = self.interpret(raw)?;
            if !events.is_empty() || self.ended {
                return Ok(events);
            }
        }
    }

    /// Everything inotify has queued, once it has something.
    async fn read_queue(&self) -> Result<Vec<Raw>, WatchError> {
        let mut buffer = [MaybeUninit::<u8>::uninit(); 8192];
        loop {
            self.queue.readable().await?;
            match self.queue.try_io(|| drain(&self.queue, &mut buffer)) {
                Ok(raw) => return Ok(raw),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// envd's events for what inotify said, keeping the watched set in step.
    fn interpret(&mut self, raw: Vec<Raw>) -> Result<Vec<FsEvent>, WatchError> {
        let mut events = Vec::new();
        for Raw { wd, flags, name } in raw {
            if flags.contains(ReadFlags::QUEUE_OVERFLOW) {
                return Err(WatchError::Overflow);
            }
            let Some(dir) = self.dirs.get(&wd).cloned() else { continue };
            if flags.contains(ReadFlags::IGNORED) {
                self.dirs.remove(&wd);
                self.ended |= dir.is_empty();
                continue;
            }
            let about_itself = flags.intersects(ReadFlags::DELETE_SELF | ReadFlags::MOVE_SELF);
            if about_itself && !dir.is_empty() {
                // Its parent reported the same; only the watched directory's own counts.
                continue;
            }
            let name = joined(&dir, name.as_deref().unwrap_or_default());
            if about_itself {
                self.ended = true;
            }
            if self.recursive && flags.contains(ReadFlags::ISDIR) {
                self.follow_directory(&name, flags)?;
            }
            events.extend(kinds(flags).into_iter().map(|kind| FsEvent { name: name.clone(), kind }));
        }
        Ok(events)
    }

    /// Watches a directory that arrived; forgets one that left.
    fn follow_directory(&mut self, name: &str, flags: ReadFlags) -> Result<(), WatchError> {
        if flags.intersects(ReadFlags::CREATE | ReadFlags::MOVED_TO) {
            return self.add_tree(name);
        }
        if flags.intersects(ReadFlags::MOVED_FROM | ReadFlags::DELETE) {
            let inside = format!("{name}/");
            let gone: Vec<i32> =
                self.dirs.iter().filter(|(_, dir)| *dir == name || dir.starts_with(&inside)).map(|(wd, _)| *wd).collect();
            for wd in gone {
                self.dirs.remove(&wd);
                let _ = inotify::remove_watch(&self.queue, wd);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The watch's next events, failing after a bound rather than hanging.
    async fn next(watch: &mut DirWatch) -> Vec<FsEvent> {
        let events = tokio::time::timeout(std::time::Duration::from_secs(10), watch.next_events()).await;
        events.expect("events within 10 s").expect("events")
    }

    fn root() -> (OwnedFd, PathBuf) {
        let dir = std::env::temp_dir().join(format!("flotilla-watch-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(dir.join("home")).expect("a home");
        let fd = rustix::fs::open(&dir, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).expect("root");
        (fd, dir)
    }

    #[test]
    fn sandbox_paths_are_under_its_home_unless_absolute() {
        let home = Path::new("/home/user");
        assert_eq!(sandbox_path("notes", home), PathBuf::from("/home/user/notes"));
        assert_eq!(sandbox_path("~", home), PathBuf::from("/home/user"));
        assert_eq!(sandbox_path("~/a/b", home), PathBuf::from("/home/user/a/b"));
        assert_eq!(sandbox_path("/tmp/x", home), PathBuf::from("/tmp/x"));
    }

    #[test]
    fn inotify_flags_map_to_envds_event_types() {
        assert_eq!(kinds(ReadFlags::CREATE), vec![EventType::Create]);
        assert_eq!(kinds(ReadFlags::MOVED_TO | ReadFlags::ISDIR), vec![EventType::Create]);
        assert_eq!(kinds(ReadFlags::MODIFY), vec![EventType::Write]);
        assert_eq!(kinds(ReadFlags::DELETE), vec![EventType::Remove]);
        assert_eq!(kinds(ReadFlags::MOVED_FROM), vec![EventType::Rename]);
        assert_eq!(kinds(ReadFlags::ATTRIB), vec![EventType::Chmod]);
        assert_eq!(joined("", ""), ".");
        assert_eq!(joined("a/b", "c"), "a/b/c");
    }

    #[tokio::test]
    async fn a_path_resolves_inside_the_root_and_never_past_it() {
        let (root, dir) = root();
        std::fs::create_dir_all(dir.join("home/inner")).expect("a directory");
        std::os::unix::fs::symlink("/", dir.join("home/escape")).expect("a link to /");
        std::fs::write(dir.join("home/file"), b"x").expect("a file");
        let home = Path::new("/home");
        assert!(DirWatch::start(&root, home, "inner", false).is_ok());
        assert_eq!(DirWatch::start(&root, home, "missing", false).err(), Some(WatchError::NotFound("missing".into())));
        assert_eq!(DirWatch::start(&root, home, "file", false).err(), Some(WatchError::NotADirectory("file".into())));
        // Links and `..` stop at the root: `escape/home` is the sandbox's own /home.
        let mut through_link = DirWatch::start(&root, home, "escape/home", false).expect("the root's own home");
        let mut dotted = DirWatch::start(&root, home, "../../../../home", false).expect("the root's own home");
        std::fs::write(dir.join("home/seen"), b"").expect("a file");
        for watch in [&mut through_link, &mut dotted] {
            let events = next(watch).await;
            assert_eq!(events[0], FsEvent { name: "seen".into(), kind: EventType::Create }, "{events:?}");
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn a_recursive_watch_follows_new_directories_and_names_events_relative_to_it() {
        let (root, dir) = root();
        let home = Path::new("/home");
        let mut watch = DirWatch::start(&root, home, "~", true).expect("watched");
        std::fs::create_dir(dir.join("home/sub")).expect("a directory");
        let created = next(&mut watch).await;
        assert_eq!(created, vec![FsEvent { name: "sub".into(), kind: EventType::Create }]);
        std::fs::write(dir.join("home/sub/deep.txt"), b"data").expect("a file");
        let mut seen = Vec::new();
        while !seen.iter().any(|e: &FsEvent| e.kind == EventType::Write) {
            seen.extend(next(&mut watch).await);
        }
        assert_eq!(seen[0], FsEvent { name: "sub/deep.txt".into(), kind: EventType::Create }, "{seen:?}");
        std::fs::remove_file(dir.join("home/sub/deep.txt")).expect("removed");
        let removed = next(&mut watch).await;
        assert_eq!(removed, vec![FsEvent { name: "sub/deep.txt".into(), kind: EventType::Remove }]);
        let _ = std::fs::remove_dir_all(dir);
    }
}
