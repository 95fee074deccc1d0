//! The walls around one local sandbox. A sandbox's programs, its X server
//! among them, reach their own desktop and, when egress is on, the public
//! internet, and nothing else:
//!
//! - **Namespaces**: a holder process (`unshare --user --net --mount --ipc
//!   --pid`) owns the sandbox's user, network, mount, IPC and pid namespaces
//!   for its whole life; every program of the sandbox joins all five
//!   (`nsenter`), so they share one IPC namespace (the X server's MIT-SHM
//!   sees the sandbox's segments and no host segment) and one pid namespace
//!   (nothing of the host is in view). In the holder's mount namespace the
//!   home and `/tmp` are size-limited tmpfs mounts.
//! - **Identity** ([`identity`](super::identity)): the namespace's root is the
//!   worker's uid when the worker is not root, and a subordinate uid of the
//!   sandbox's own when it is: no sandbox process is host uid 0. On top of it
//!   bubblewrap runs each program as uid 1000 with every capability dropped
//!   (bounding set included), no further user namespaces, a UTS and cgroup
//!   namespace of its own, a new session, and the
//!   [seccomp filter](super::seccomp). The pid namespace is the sandbox's,
//!   shared by all its programs, as on one machine: a command sees and
//!   signals what an earlier one started (`pgrep x11vnc`), and `/proc` is
//!   the holder's, of that namespace.
//! - **Network** ([`egress`](super::egress)): with egress on, `slirp4netns`
//!   (user-mode TCP/IP, `--disable-host-loopback`, its own sandbox and
//!   seccomp, running as the sandbox's root) is the only way out, and routes
//!   make every non-public range and this host's own addresses and links
//!   unreachable. Offline, the namespace has a loopback and nothing else.
//! - **Files**: a read-only view of `/usr` (and the `/bin`, `/lib` links), a
//!   curated `/etc` (generated `passwd`, `group`, `hosts`, `resolv.conf`,
//!   plus read-only CA certificates, fonts and the like; never
//!   `/etc/ssl/private`), its own `/tmp`, home, X socket and cookie, and the
//!   directory its gateway socket appears in. The root is read-only; `/proc`
//!   is the sandbox's own, with `/proc/sys`, `/proc/sysrq-trigger` and the
//!   like read-only and `/proc/kcore`, `/proc/keys` and the like masked, as
//!   container runtimes do.
//! - **Limits** ([`limits`](super::limits)): every process joins the
//!   sandbox's control group and starts under its resource limits.

use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use super::egress::{host_path, Ipv4Net, Network};
use super::identity::{HostUser, Slot};
use super::limits::{Cgroup, Confinement, Hierarchy, SandboxLimits};
use super::process::{self, MARKER_VAR};
use super::seccomp;
use flotilla_sandbox::SandboxError;

/// The uid and gid a sandbox's programs run as, inside their user namespace.
pub(crate) const SANDBOX_UID: u32 = 1000;
/// Where the X cookie appears inside a sandbox.
pub(crate) const XAUTHORITY_PATH: &str = "/run/flotilla/Xauthority";
/// Where the sandbox's own run directory (the gateway socket) appears.
pub(crate) const RUN_DIR: &str = "/run/flotilla/run";
/// Where X sockets are, inside a sandbox and on the host.
pub(crate) const X_SOCKET_DIR: &str = "/tmp/.X11-unix";
/// Where a sandbox's resolver is, in its own network namespace.
const SANDBOX_DNS: &str = "127.0.0.1";
/// The device slirp4netns makes the sandbox's tap interface with.
const TUN_DEVICE: &str = "/dev/net/tun";
/// How long one setup command (routes, probes) may take.
pub(crate) const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Host files a sandbox may read under `/etc`: CA certificates, fonts, the
/// dynamic linker's cache, alternatives links, time zone, desktop settings,
/// the template apps' own settings (Chromium, Firefox ESR, LibreOffice).
const HOST_ETC: &[&str] = &[
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "chromium",
    "chromium.d",
    "firefox-esr",
    "fonts",
    "gai.conf",
    "gtk-3.0",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "libreoffice",
    "localtime",
    "magic",
    "mime.types",
    "protocols",
    "services",
    "ssl/certs",
    "ssl/openssl.cnf",
    "terminfo",
    "timezone",
    "X11",
    "xdg",
];

/// `/proc` entries a sandbox may read but not write.
const PROC_READ_ONLY: &[&str] = &["sys", "sysrq-trigger", "irq", "bus", "fs"];
/// `/proc` files a sandbox sees as empty.
const PROC_MASKED_FILES: &[&str] = &["kcore", "keys", "key-users", "timer_list", "sched_debug", "latency_stats", "timer_stats"];
/// `/proc` directories a sandbox sees as empty.
const PROC_MASKED_DIRS: &[&str] = &["acpi", "scsi", "asound"];

/// The top-level names that are `/usr` links on a merged-`/usr` system,
/// mirrored as they are on the host.
const USR_LINKS: &[&str] = &["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// How a provider builds its sandboxes' jails.
#[derive(Debug, Clone)]
pub(crate) struct JailSettings {
    pub tools: Arc<HostTools>,
    pub network: Network,
    /// Addresses reachable through egress even though they are blocked.
    pub exceptions: Vec<Ipv4Addr>,
    /// Prefixes the operator blocks besides the non-public ones.
    pub deny: Vec<Ipv4Net>,
    pub user: HostUser,
    pub hierarchy: Hierarchy,
    pub limits: SandboxLimits,
    /// The resolvers the sandboxes' queries go to.
    pub dns_upstream: Vec<std::net::SocketAddr>,
}

/// The host programs that build jails, found on the worker's `PATH` once.
#[derive(Debug)]
pub(crate) struct HostTools {
    bwrap: PathBuf,
    pub nsenter: PathBuf,
    unshare: PathBuf,
    pub slirp4netns: Option<PathBuf>,
    pub ip: PathBuf,
}

impl HostTools {
    /// Finds every program the jail needs (slirp4netns only for egress), or
    /// names the first that is missing.
    pub fn find(network: Network) -> Result<Self, String> {
        let need = |name: &str, package: &str| {
            which(name).ok_or_else(|| format!("{name} is not installed or not on PATH (Debian package {package})"))
        };
        need("prlimit", "util-linux")?;
        Ok(Self {
            bwrap: need("bwrap", "bubblewrap")?,
            nsenter: need("nsenter", "util-linux")?,
            unshare: need("unshare", "util-linux")?,
            slirp4netns: match network {
                Network::Egress => {
                    let slirp = need("slirp4netns", "slirp4netns")?;
                    check_tun()?;
                    Some(slirp)
                }
                Network::Offline => None,
            },
            ip: need("ip", "iproute2")?,
        })
    }
}

/// Whether this user may open `/dev/net/tun`, as slirp4netns does to make
/// the sandbox's tap device (mode 0666, as Debian's udev rules set it).
fn check_tun() -> Result<(), String> {
    std::fs::OpenOptions::new().read(true).write(true).open(TUN_DEVICE).map(drop).map_err(|e| {
        format!(
            "slirp4netns cannot open {TUN_DEVICE} as this user ({e}); make it mode 0666 as Debian does \
             (scripts/setup.sh), or set FLOTILLA_SANDBOX_NETWORK=offline"
        )
    })
}

/// The first executable file called `name` on the worker's `PATH`.
fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| std::fs::metadata(candidate).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// What an X program of the sandbox gets of the display.
#[derive(Debug, Clone, Copy)]
pub(crate) enum XAccess<'a> {
    /// Nothing (the probe).
    None,
    /// A client: the display's socket.
    Client(&'a Path),
    /// The server: the directory its socket is made in.
    Server,
}

/// What the walls of one sandbox are made of, known once it is up.
#[derive(Debug, Clone)]
pub(crate) struct Jail {
    pub tools: Arc<HostTools>,
    /// The namespace holder's pid: `/proc/<pid>/ns/*`.
    pub holder: u32,
    /// The sandbox's directory on the host.
    pub dir: PathBuf,
    pub user: HostUser,
    /// The sandbox's own host uid and gid, for a root worker.
    pub ids: Option<(u32, u32)>,
    pub confinement: Confinement,
}

impl Jail {
    pub fn seccomp_file(&self) -> PathBuf {
        self.dir.join("seccomp.bpf")
    }

    /// The program and arguments that run `program args` inside: join the
    /// sandbox's group and limits, then its namespaces, then bubblewrap with
    /// the seccomp filter on fd 9 (opened by a one-line `sh`, since std
    /// passes no other descriptors). `bind` shows one more host file,
    /// read-only, at a path inside (the spawner's program).
    pub fn wrap(
        &self,
        home: &Path,
        x: XAccess<'_>,
        bind: Option<(&Path, &str)>,
        program: &str,
        args: &[&str],
    ) -> (String, Vec<String>) {
        let (entry, mut argv) = enter(self.user, self.ids, &self.tools.nsenter, self.holder, true);
        argv.extend(["--".into(), "/bin/sh".into(), "-c".into(), r#"f=$1; shift; exec "$0" --seccomp 9 "$@" 9<"$f""#.into()]);
        argv.push(self.tools.bwrap.display().to_string());
        argv.push(self.seccomp_file().display().to_string());
        argv.extend(bwrap_args(&self.dir, home, x, bind));
        argv.push("--".into());
        argv.push(program.into());
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        ("sh".into(), self.confinement.wrap(&entry, &argv))
    }
}

/// `setpriv`'s arguments that make a process the sandbox's own uid and gid.
/// The kernel forgets a process's parent-death signal when its uid changes,
/// so it is set again after: the process still dies with the worker.
fn become_owner(uid: u32, gid: u32) -> [String; 5] {
    [format!("--reuid={uid}"), format!("--regid={gid}"), "--clear-groups".into(), "--pdeathsig=KILL".into(), "--".into()]
}

/// The program and arguments that run `nsenter` as the sandbox's owner —
/// the worker's uid, or a root worker's subordinate uid for the sandbox
/// (`setpriv`) — joining the holder's user namespace (where that uid is
/// root) and, with `all`, its network, mount, IPC and pid namespaces. No
/// process of the chain stays host uid 0 once it is inside.
pub(crate) fn enter(user: HostUser, ids: Option<(u32, u32)>, nsenter: &Path, holder: u32, all: bool) -> (String, Vec<String>) {
    let mut argv = Vec::with_capacity(12);
    let program = match (user, ids) {
        (HostUser::Root(_), Some((uid, gid))) => {
            argv.extend(become_owner(uid, gid));
            argv.push(nsenter.display().to_string());
            "setpriv".to_owned()
        }
        _ => nsenter.display().to_string(),
    };
    argv.push("--preserve-credentials".to_owned());
    let ns = |name: &str| format!("/proc/{holder}/ns/{name}");
    argv.push(format!("--user={}", ns("user")));
    if all {
        argv.push(format!("--net={}", ns("net")));
        argv.push(format!("--mount={}", ns("mnt")));
        argv.push(format!("--ipc={}", ns("ipc")));
        argv.push(format!("--pid={}", ns("pid_for_children")));
    }
    (program, argv)
}

/// Where Debian installs noVNC.
const NOVNC_DIR: &str = "/usr/share/novnc";

/// bubblewrap's arguments for one program of the sandbox in `dir`.
fn bwrap_args(dir: &Path, home: &Path, x: XAccess<'_>, bind: Option<(&Path, &str)>) -> Vec<String> {
    let mut args: Vec<String> = Vec::with_capacity(128);
    let mut push = |items: &[&str]| args.extend(items.iter().map(|s| (*s).to_owned()));
    let uid = SANDBOX_UID.to_string();
    push(&["--unshare-user", "--uid", &uid, "--gid", &uid, "--disable-userns", "--cap-drop", "ALL"]);
    push(&["--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]);
    push(&["--die-with-parent", "--new-session"]);
    push(&["--ro-bind", "/usr", "/usr"]);
    for name in USR_LINKS {
        let host = Path::new("/").join(name);
        match std::fs::read_link(&host) {
            Ok(target) => push(&["--symlink", &target.display().to_string(), &host.display().to_string()]),
            Err(_) if host.is_dir() => push(&["--ro-bind", &host.display().to_string(), &host.display().to_string()]),
            Err(_) => {}
        }
    }
    push(&["--dir", "/etc"]);
    for name in HOST_ETC {
        let host = Path::new("/etc").join(name);
        push(&["--ro-bind-try", &host.display().to_string(), &host.display().to_string()]);
    }
    for (name, _) in etc_files(Network::Offline, home) {
        let generated = dir.join("etc").join(name).display().to_string();
        push(&["--ro-bind", &generated, &format!("/etc/{name}")]);
    }
    push(&["--ro-bind-try", "/var/cache/fontconfig", "/var/cache/fontconfig", "--tmpfs", "/var/tmp"]);
    // noVNC where E2B's desktop template keeps it, for the Desktop SDK's stream.
    push(&["--ro-bind-try", NOVNC_DIR, "/opt/noVNC"]);
    push(&["--dev", "/dev"]);
    args.extend(proc_args());
    let mut push = |items: &[&str]| args.extend(items.iter().map(|s| (*s).to_owned()));
    // The holder's tmpfs mounts: /tmp first, as the home may live below it.
    let home = home.display().to_string();
    push(&["--bind", &dir.join("tmp").display().to_string(), "/tmp"]);
    match x {
        XAccess::None => {}
        XAccess::Client(socket) => {
            let socket = socket.display().to_string();
            push(&["--bind", &socket, &socket]);
        }
        XAccess::Server => push(&["--bind", &dir.join("x11").display().to_string(), X_SOCKET_DIR]),
    }
    push(&["--bind", &home, &home, "--chdir", &home]);
    let xauthority = dir.join("Xauthority").display().to_string();
    push(&["--ro-bind-try", &xauthority, XAUTHORITY_PATH]);
    push(&["--bind", &dir.join("run").display().to_string(), RUN_DIR]);
    if let Some((host, inside)) = bind {
        push(&["--ro-bind", &host.display().to_string(), inside]);
    }
    push(&["--remount-ro", "/"]);
    args
}

/// The sandbox's own `/proc` (the holder's, of the pid namespace every
/// program of the sandbox shares), with what a container runtime masks masked.
fn proc_args() -> Vec<String> {
    let mut args = vec!["--bind".to_owned(), "/proc".to_owned(), "/proc".to_owned()];
    for name in PROC_READ_ONLY {
        let path = format!("/proc/{name}");
        args.extend(["--ro-bind-try".to_owned(), path.clone(), path]);
    }
    for name in PROC_MASKED_FILES {
        if Path::new("/proc").join(name).exists() {
            args.extend(["--ro-bind".to_owned(), "/dev/null".to_owned(), format!("/proc/{name}")]);
        }
    }
    for name in PROC_MASKED_DIRS {
        if Path::new("/proc").join(name).is_dir() {
            let path = format!("/proc/{name}");
            args.extend(["--tmpfs".to_owned(), path.clone(), "--remount-ro".to_owned(), path]);
        }
    }
    args
}

/// The generated files of a sandbox's `/etc`, by name.
fn etc_files(network: Network, home: &Path) -> Vec<(&'static str, String)> {
    let home = home.display();
    let resolv = match network {
        Network::Egress => format!("nameserver {SANDBOX_DNS}\n"),
        Network::Offline => String::new(),
    };
    vec![
        (
            "passwd",
            format!(
                "root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:{home}:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
            ),
        ),
        ("group", format!("root:x:0:\nsandbox:x:{SANDBOX_UID}:\nnogroup:x:65534:\n")),
        ("hosts", "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost ip6-loopback\n".into()),
        ("hostname", "sandbox\n".into()),
        ("resolv.conf", resolv),
        ("nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n".into()),
    ]
}

/// Writes the sandbox's generated `/etc`, its seccomp filter and the
/// directories its programs write to into `dir`; with a uid of its own
/// (`ids`), those directories and the X cookie become the sandbox's.
pub(crate) fn prepare_files(dir: &Path, home: &Path, network: Network, ids: Option<(u32, u32)>) -> Result<(), SandboxError> {
    let etc = dir.join("etc");
    std::fs::create_dir_all(&etc)?;
    for name in ["run", "x11", "tmp"] {
        std::fs::create_dir_all(dir.join(name))?;
    }
    std::fs::create_dir_all(home)?;
    for (name, text) in etc_files(network, home) {
        std::fs::write(etc.join(name), text)?;
    }
    let program = seccomp::program().map_err(SandboxError::Unavailable)?;
    std::fs::write(dir.join("seccomp.bpf"), program)?;
    if let Some((uid, gid)) = ids {
        for owned in [dir.join("x11"), dir.join("Xauthority")] {
            if owned.exists() {
                std::os::unix::fs::chown(&owned, Some(uid), Some(gid))?;
            }
        }
    }
    Ok(())
}

/// Where one sandbox's jail is built: its slot, marker, directory and home,
/// and by when.
pub(crate) struct Site<'a> {
    pub slot: &'a Slot,
    pub marker: &'a str,
    pub dir: &'a Path,
    pub home: &'a Path,
    pub deadline: Instant,
}

/// The holder's script: mounts the home and `/tmp` in the sandbox's mount
/// namespace, says so, and holds the namespaces. It is the pid namespace's
/// init, so every orphan of the sandbox becomes its child: `wait` on a job
/// that never ends reaps each of them as it exits (no zombie is left).
const HOLDER_SCRIPT: &str = r#"mount -t tmpfs -o "size=$3,mode=0755,uid=0,gid=0,nosuid,nodev" sandbox-home "$1" || exit 1
mount -t tmpfs -o "size=$4,mode=1777,uid=0,gid=0,nosuid,nodev" sandbox-tmp "$2" || exit 1
echo ready
sleep infinity &
while :; do wait; done"#;

/// Starts the namespace holder (the leader of the sandbox's process group)
/// and waits until its namespaces and mounts exist. A root worker starts it
/// as the sandbox's own uid (`setpriv`), so the namespaces belong to that
/// uid and map their root onto it, as an unprivileged worker's map theirs
/// onto its own uid: nothing of the sandbox is host uid 0.
async fn start_holder(settings: &JailSettings, confinement: &Confinement, site: &Site<'_>) -> Result<(Child, u32), SandboxError> {
    let Site { slot, marker, dir, home, deadline } = *site;
    let mut argv = Vec::new();
    if let Some((uid, gid)) = settings.user.ids(slot) {
        argv.push("setpriv".to_owned());
        argv.extend(become_owner(uid, gid));
    }
    argv.push(settings.tools.unshare.display().to_string());
    argv.extend(
        ["--user", "--map-root-user", "--net", "--mount", "--ipc", "--pid", "--fork", "--mount-proc", "--kill-child", "--"]
            .map(String::from),
    );
    argv.extend(confinement.nproc_inside());
    argv.extend(["sh", "-c", HOLDER_SCRIPT, "holder"].map(String::from));
    argv.extend([home.display().to_string(), dir.join("tmp").display().to_string()]);
    argv.extend([settings.limits.home_bytes.to_string(), settings.limits.tmp_bytes.to_string()]);
    let mut command = process::tied_to_worker("sh");
    command.args(confinement.wrap_without_nproc(&argv[0], &argv[1..]));
    let mut holder = spawn_setup(command, marker, None, "unshare (util-linux)")?;
    let pid = holder.id().ok_or_else(|| SandboxError::Unavailable("the namespace holder exited at once".into()))?;
    let mut stdout = holder.stdout.take();
    let ready = tokio::time::timeout_at(deadline.into(), expect_line(stdout.as_mut(), "ready")).await;
    if ready.ok().flatten().is_none() {
        let _ = holder.start_kill();
        return Err(SandboxError::Unavailable(
            "cannot make the sandbox's namespaces and mounts (unshare --user --net --mount --ipc --pid failed; are user \
             namespaces enabled?)"
                .into(),
        ));
    }
    Ok((holder, pid))
}

/// Reads exactly `word` and a newline from `out`.
async fn expect_line(out: Option<&mut tokio::process::ChildStdout>, word: &str) -> Option<()> {
    let mut line = vec![0u8; word.len() + 1];
    out?.read_exact(&mut line).await.ok()?;
    (line[..word.len()] == *word.as_bytes() && line[word.len()] == b'\n').then_some(())
}

/// Makes the sandbox's control group and its namespaces (the holder, the
/// leader of the sandbox's process group): enough to start programs in.
pub(crate) async fn hold(
    settings: &JailSettings,
    site: &Site<'_>,
    children: &mut Vec<Child>,
    cgroup: &mut Option<Cgroup>,
) -> Result<Jail, SandboxError> {
    *cgroup = Cgroup::create(&settings.hierarchy, site.marker, &settings.limits)?;
    // With a group, its own limit comes first and is seen; the resource
    // limit stays a backstop. Without one it is the limit, counted in the
    // sandbox's own user namespace whoever the worker is.
    let backstop = if cgroup.is_some() { 2 } else { 1 };
    let nproc = Some(settings.limits.pids.saturating_mul(backstop));
    let confinement = Confinement { cgroup: cgroup.clone(), limits: settings.limits, nproc };
    let (holder, pid) = start_holder(settings, &confinement, site).await?;
    children.push(holder);
    let ids = settings.user.ids(site.slot);
    Ok(Jail { tools: Arc::clone(&settings.tools), holder: pid, dir: site.dir.to_owned(), user: settings.user, ids, confinement })
}

/// Spawns a setup process of the sandbox (holder, slirp4netns) with its
/// marker, in its group (a new one when `pgid` is `None`), stdout piped.
pub(crate) fn spawn_setup(mut command: Command, marker: &str, pgid: Option<u32>, what: &str) -> Result<Child, SandboxError> {
    command
        .env_clear()
        .env("PATH", host_path())
        .env(MARKER_VAR, marker)
        .current_dir("/")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    command.process_group(pgid.and_then(|g| i32::try_from(g).ok()).unwrap_or(0));
    command.spawn().map_err(|e| SandboxError::Unavailable(format!("cannot start {what}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_see_no_private_keys_and_a_masked_proc() {
        let args = bwrap_args(Path::new("/s"), Path::new("/s/home"), XAccess::Server, None).join(" ");
        assert!(args.contains("--ro-bind-try /etc/ssl/certs /etc/ssl/certs"), "{args}");
        assert!(!args.contains("/etc/ssl "), "never the whole /etc/ssl: {args}");
        assert!(args.contains("--bind /proc /proc --ro-bind-try /proc/sys /proc/sys"), "the holder's /proc, masked: {args}");
        assert!(!args.contains("--unshare-pid"), "one pid namespace per sandbox, the holder's: {args}");
        assert!(args.contains("--bind /s/x11 /tmp/.X11-unix"), "the server makes its socket on the host: {args}");
        assert!(!args.contains("--unshare-ipc"), "one IPC namespace per sandbox, the holder's: {args}");
    }

    #[test]
    fn a_root_worker_enters_as_the_sandboxes_uid_and_others_as_themselves() {
        let range = super::super::identity::SubordinateRange { uid: 7, gid: 9, count: 1 };
        let nsenter = Path::new("/usr/bin/nsenter");
        let (program, root) = enter(HostUser::Root(range), Some((7, 9)), nsenter, 42, true);
        assert_eq!(program, "setpriv");
        assert_eq!(root[..6], ["--reuid=7", "--regid=9", "--clear-groups", "--pdeathsig=KILL", "--", "/usr/bin/nsenter"]);
        assert!(
            root.contains(&"--pid=/proc/42/ns/pid_for_children".to_owned())
                && root.contains(&"--mount=/proc/42/ns/mnt".to_owned())
        );
        let (program, own) = enter(HostUser::Unprivileged, None, nsenter, 42, false);
        assert_eq!(
            (program.as_str(), own),
            ("/usr/bin/nsenter", vec!["--preserve-credentials".to_owned(), "--user=/proc/42/ns/user".to_owned()])
        );
    }
}
