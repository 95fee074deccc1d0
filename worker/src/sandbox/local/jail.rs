//! The walls around one local sandbox. A sandbox's programs reach their own
//! desktop and, when egress is on, the internet, and nothing else:
//!
//! - **Network**: a namespace holder (`unshare --user --map-root-user
//!   --net`) owns the sandbox's network namespace for its whole life; every
//!   sandbox program joins it (`nsenter`). With egress on, `slirp4netns`
//!   (user-mode TCP/IP, `--disable-host-loopback`, its own sandbox and
//!   seccomp) is the only way out, and the namespace's routing table makes the
//!   host's loopback, private ranges (RFC 1918, 100.64/10), link-local
//!   (169.254/16, the metadata address), multicast, reserved ranges and the
//!   host's own addresses unreachable. There is no IPv6 route at all.
//!   Offline, the namespace has a loopback and nothing else.
//! - **Identity**: bubblewrap makes a user namespace in which the program runs
//!   as uid 1000 with every capability dropped (bounding set included), no
//!   further user namespaces, its own pid, IPC, UTS and cgroup namespaces, a
//!   new session, and the [seccomp filter](super::seccomp).
//! - **Files**: a read-only view of `/usr` (and the `/bin`, `/lib` links), a
//!   curated `/etc` (generated `passwd`, `group`, `hosts`, `resolv.conf`,
//!   plus read-only certificates, fonts and the like), its own `/tmp`, home,
//!   X socket and cookie, and the directory its gateway socket appears in.
//!   The root is read-only; the host's `/root`, `/home`, `/proc` of other
//!   processes, configuration and keys are not in view.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use super::process::{self, MARKER_VAR};
use super::seccomp;
use crate::sandbox::SandboxError;

/// The uid and gid a sandbox's programs run as, inside their user namespace.
pub(crate) const SANDBOX_UID: u32 = 1000;
/// Where the X cookie appears inside a sandbox.
pub(crate) const XAUTHORITY_PATH: &str = "/run/flotilla/Xauthority";
/// Where the sandbox's own run directory (the gateway socket) appears.
pub(crate) const RUN_DIR: &str = "/run/flotilla/run";
/// The user-mode network's gateway (slirp4netns' fixed layout).
const SLIRP_GATEWAY: &str = "10.0.2.2";
/// The user-mode network's DNS forwarder.
const SLIRP_DNS: &str = "10.0.2.3";
/// The device slirp4netns makes the sandbox's tap interface with.
const TUN_DEVICE: &str = "/dev/net/tun";
/// How long one setup command (routes, probes) may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// IPv4 ranges a sandbox never reaches: loopback, "this network", private
/// (RFC 1918), shared (100.64/10), link-local with the metadata address,
/// benchmarking, multicast and reserved.
pub(crate) const BLOCKED_V4: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "224.0.0.0/4",
    "240.0.0.0/4",
];

/// Host files a sandbox may read under `/etc`: certificates, fonts, the
/// dynamic linker's cache, alternatives links, time zone, desktop settings.
const HOST_ETC: &[&str] = &[
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "chromium",
    "chromium.d",
    "fonts",
    "gai.conf",
    "gtk-3.0",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "magic",
    "mime.types",
    "protocols",
    "services",
    "ssl",
    "terminfo",
    "timezone",
    "X11",
    "xdg",
];

/// The top-level names that are `/usr` links on a merged-`/usr` system,
/// mirrored as they are on the host.
const USR_LINKS: &[&str] = &["bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// Whether a sandbox reaches the internet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Network {
    /// Out through slirp4netns to public addresses only.
    #[default]
    Egress,
    /// No route anywhere: a loopback alone.
    Offline,
}

/// How a provider builds its sandboxes' jails.
#[derive(Debug, Clone)]
pub(crate) struct JailSettings {
    pub tools: Arc<HostTools>,
    pub network: Network,
    /// Addresses reachable through egress even though they are blocked.
    pub exceptions: Vec<Ipv4Addr>,
}

/// The host programs that build jails, found on the worker's `PATH` once.
#[derive(Debug)]
pub(crate) struct HostTools {
    bwrap: PathBuf,
    nsenter: PathBuf,
    unshare: PathBuf,
    slirp4netns: Option<PathBuf>,
    ip: PathBuf,
}

impl HostTools {
    /// Finds every program the jail needs (slirp4netns only for egress), or
    /// names the first that is missing.
    pub fn find(network: Network) -> Result<Self, String> {
        let need = |name: &str, package: &str| {
            which(name).ok_or_else(|| format!("{name} is not installed or not on PATH (Debian package {package})"))
        };
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
/// the sandbox's tap device (a worker that is not root needs mode 0666, as
/// Debian's udev rules set it).
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
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| std::fs::metadata(candidate).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// What the walls of one sandbox are made of, known once it is up.
#[derive(Debug, Clone)]
pub(crate) struct Jail {
    pub tools: Arc<HostTools>,
    /// The namespace holder's pid: `/proc/<pid>/ns/{user,net}`.
    pub holder: u32,
    /// The sandbox's directory on the host.
    pub dir: PathBuf,
}

impl Jail {
    pub fn seccomp_file(&self) -> PathBuf {
        self.dir.join("seccomp.bpf")
    }

    /// The program and arguments that run `program args` inside: join the
    /// holder's namespaces, then bubblewrap with the seccomp filter on fd 9
    /// (opened by a one-line `sh`, since std passes no other descriptors).
    pub fn wrap(&self, home: &Path, tmp: &Path, x_socket: Option<&Path>, program: &str, args: &[&str]) -> (String, Vec<String>) {
        let mut argv: Vec<String> = vec!["--preserve-credentials".into(), "-U".into(), "-n".into(), "-t".into()];
        argv.push(self.holder.to_string());
        argv.extend(["--".into(), "/bin/sh".into(), "-c".into(), r#"f=$1; shift; exec "$0" --seccomp 9 "$@" 9<"$f""#.into()]);
        argv.push(self.tools.bwrap.display().to_string());
        argv.push(self.seccomp_file().display().to_string());
        argv.extend(bwrap_args(&self.dir, home, tmp, x_socket));
        argv.push("--".into());
        argv.push(program.into());
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        (self.tools.nsenter.display().to_string(), argv)
    }
}

/// bubblewrap's arguments for one program of the sandbox in `dir`.
fn bwrap_args(dir: &Path, home: &Path, tmp: &Path, x_socket: Option<&Path>) -> Vec<String> {
    let mut args: Vec<String> = Vec::with_capacity(96);
    let mut push = |items: &[&str]| args.extend(items.iter().map(|s| (*s).to_owned()));
    let uid = SANDBOX_UID.to_string();
    push(&["--unshare-user", "--uid", &uid, "--gid", &uid, "--disable-userns", "--cap-drop", "ALL"]);
    push(&["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]);
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
    push(&["--proc", "/proc", "--dev", "/dev"]);
    // /tmp first: the home may live under the host's /tmp.
    push(&["--bind", &tmp.display().to_string(), "/tmp"]);
    if let Some(socket) = x_socket {
        let socket = socket.display().to_string();
        push(&["--bind", &socket, &socket]);
    }
    let home = home.display().to_string();
    push(&["--bind", &home, &home, "--chdir", &home]);
    let xauthority = dir.join("Xauthority").display().to_string();
    push(&["--ro-bind-try", &xauthority, XAUTHORITY_PATH]);
    push(&["--bind", &dir.join("run").display().to_string(), RUN_DIR]);
    push(&["--remount-ro", "/"]);
    args
}

/// The generated files of a sandbox's `/etc`, by name.
fn etc_files(network: Network, home: &Path) -> Vec<(&'static str, String)> {
    let home = home.display();
    let resolv = match network {
        Network::Egress => format!("nameserver {SLIRP_DNS}\n"),
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

/// Writes the sandbox's generated `/etc` and its seccomp filter into `dir`.
pub(crate) fn prepare_files(dir: &Path, home: &Path, network: Network) -> Result<(), SandboxError> {
    let etc = dir.join("etc");
    std::fs::create_dir_all(&etc)?;
    std::fs::create_dir_all(dir.join("run"))?;
    for (name, text) in etc_files(network, home) {
        std::fs::write(etc.join(name), text)?;
    }
    let program = seccomp::program().map_err(SandboxError::Unavailable)?;
    std::fs::write(dir.join("seccomp.bpf"), program)?;
    Ok(())
}

/// Starts the namespace holder in process group `pgid` and waits until its
/// namespaces exist.
async fn start_holder(
    tools: &HostTools,
    marker: &str,
    pgid: Option<u32>,
    deadline: Instant,
) -> Result<(Child, u32), SandboxError> {
    let mut command = process::tied_to_worker(&tools.unshare);
    command.args(["--user", "--map-root-user", "--net", "--", "sh", "-c", "echo ready && exec sleep infinity"]);
    let mut holder = spawn_setup(command, marker, pgid, "unshare (util-linux)")?;
    let pid = holder.id().ok_or_else(|| SandboxError::Unavailable("the namespace holder exited at once".into()))?;
    let mut stdout = holder.stdout.take();
    let ready = tokio::time::timeout_at(deadline.into(), async {
        let mut line = [0u8; 6];
        match stdout.as_mut() {
            Some(out) => out.read_exact(&mut line).await.is_ok() && &line == b"ready\n",
            None => false,
        }
    })
    .await;
    if ready != Ok(true) {
        let _ = holder.start_kill();
        return Err(SandboxError::Unavailable(
            "cannot make a network and user namespace (unshare --user --net failed; are user namespaces enabled?)".into(),
        ));
    }
    Ok((holder, pid))
}

/// Starts slirp4netns for the holder's namespace and waits until it has
/// configured the interface.
async fn start_egress(
    tools: &HostTools,
    marker: &str,
    pgid: Option<u32>,
    holder: u32,
    deadline: Instant,
) -> Result<Child, SandboxError> {
    let slirp = tools.slirp4netns.as_ref().ok_or_else(|| SandboxError::Unavailable("slirp4netns was not looked for".into()))?;
    // slirp4netns runs inside the holder's user namespace (where the worker
    // is root, without any privilege on the host), as rootless containers
    // start it: its own sandbox (`--enable-sandbox`) needs that when the
    // worker is not root. Its sockets stay in the host's network namespace.
    let mut command = process::tied_to_worker(&tools.nsenter);
    command.args(["--preserve-credentials", "-U", "-t", &holder.to_string(), "--"]).arg(slirp).args([
        "--configure",
        "--disable-host-loopback",
        "--mtu",
        "65520",
        "--enable-sandbox",
        "--enable-seccomp",
        "--ready-fd",
        "1",
        "--netns-type",
        "path",
        &format!("/proc/{holder}/ns/net"),
        "tap0",
    ]);
    let mut slirp = spawn_setup(command, marker, pgid, "slirp4netns")?;
    let mut stdout = slirp.stdout.take();
    // It writes "1" on its ready fd, after warnings (on the same stdout).
    let ready = tokio::time::timeout_at(deadline.into(), async {
        let Some(out) = stdout.as_mut() else { return false };
        let mut seen = Vec::new();
        let mut chunk = [0u8; 256];
        while let Ok(n @ 1..) = out.read(&mut chunk).await {
            seen.extend_from_slice(&chunk[..n]);
            if seen.rsplit(|b| *b == b'\n').next() == Some(b"1") {
                return true;
            }
        }
        false
    })
    .await;
    if ready != Ok(true) {
        let _ = slirp.start_kill();
        return Err(SandboxError::Unavailable("slirp4netns did not configure the sandbox's network".into()));
    }
    // Keep reading so slirp4netns never blocks on a full pipe.
    if let Some(mut out) = stdout {
        tokio::spawn(async move {
            let mut sink = [0u8; 256];
            while matches!(out.read(&mut sink).await, Ok(1..)) {}
        });
    }
    Ok(slirp)
}

/// Builds the walls of the sandbox in `dir`: the namespace holder, with
/// egress slirp4netns, and the routes. The host's addresses are read while
/// the holder starts. Every process started joins group `pgid` and
/// `children`, also when a later step fails.
pub(crate) async fn build(
    settings: &JailSettings,
    marker: &str,
    pgid: Option<u32>,
    dir: &Path,
    deadline: Instant,
    children: &mut Vec<Child>,
) -> Result<Jail, SandboxError> {
    let tools = &settings.tools;
    let namespaces = async {
        let (holder, pid) = start_holder(tools, marker, pgid, deadline).await?;
        children.push(holder);
        if settings.network == Network::Egress {
            children.push(start_egress(tools, marker, pgid, pid, deadline).await?);
        }
        Ok::<_, SandboxError>(pid)
    };
    let (host, pid) = tokio::join!(host_addresses(&tools.ip, settings.network), namespaces);
    let pid = pid?;
    let host = host?;
    apply_routes(tools, pid, settings.network, &host, &settings.exceptions).await?;
    Ok(Jail { tools: Arc::clone(tools), holder: pid, dir: dir.to_owned() })
}

/// Brings up the loopback and, with egress, makes every blocked range and
/// `host` (this machine's own addresses) unreachable, except `exceptions`
/// (which go out through the user-mode network: tests use one as "the
/// internet").
async fn apply_routes(
    tools: &HostTools,
    holder: u32,
    network: Network,
    host: &[Ipv4Addr],
    exceptions: &[Ipv4Addr],
) -> Result<(), SandboxError> {
    let script = route_script(network, host, exceptions);
    let mut command = Command::new(&tools.nsenter);
    command.args(["--preserve-credentials", "-U", "-n", "-t", &holder.to_string()]).arg(&tools.ip).args(["-batch", "-"]);
    command.env_clear().env("PATH", host_path());
    let output = process::run(command, Some(script.as_bytes()), SETUP_TIMEOUT, process::MAX_OUTPUT).await?;
    if output.exit_code != 0 {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(SandboxError::Unavailable(format!(
            "cannot set the sandbox's routes: {}",
            stderr.lines().next().unwrap_or("ip failed")
        )));
    }
    Ok(())
}

/// The `ip -batch` lines for a namespace.
fn route_script(network: Network, host: &[Ipv4Addr], exceptions: &[Ipv4Addr]) -> String {
    let mut script = String::from("link set lo up\n");
    if network == Network::Offline {
        return script;
    }
    for range in BLOCKED_V4 {
        script.push_str(&format!("route add unreachable {range}\n"));
    }
    for address in host.iter().filter(|a| !a.is_loopback() && !exceptions.contains(a)) {
        script.push_str(&format!("route add unreachable {address}/32\n"));
    }
    for address in exceptions {
        script.push_str(&format!("route add {address}/32 via {SLIRP_GATEWAY} dev tap0\n"));
    }
    script
}

/// This host's IPv4 addresses, from `ip -o -4 addr show` (none needed
/// offline). Fails closed: addresses that cannot be read cannot be blocked,
/// so a sandbox with egress is not built without them (a host always has
/// its loopback, so an answer without any address is a failure too).
async fn host_addresses(ip: &Path, network: Network) -> Result<Vec<Ipv4Addr>, SandboxError> {
    if network == Network::Offline {
        return Ok(Vec::new());
    }
    let failed = |why: String| {
        SandboxError::Unavailable(format!(
            "cannot read this host's addresses to block them in the sandbox ({} -o -4 addr show: {why})",
            ip.display()
        ))
    };
    let mut command = Command::new(ip);
    command.args(["-o", "-4", "addr", "show"]).env_clear().env("PATH", host_path());
    let output = process::run(command, None, SETUP_TIMEOUT, process::MAX_OUTPUT).await.map_err(|e| failed(e.to_string()))?;
    if output.exit_code != 0 {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(failed(stderr.lines().next().unwrap_or("it failed").to_owned()));
    }
    let addresses = parse_addresses(&String::from_utf8_lossy(&output.stdout));
    if addresses.is_empty() {
        return Err(failed("it named no address".into()));
    }
    Ok(addresses)
}

/// The `inet` addresses of `ip -o -4 addr show`'s lines.
fn parse_addresses(text: &str) -> Vec<Ipv4Addr> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            words.find(|w| *w == "inet")?;
            words.next()?.split('/').next()?.parse().ok()
        })
        .collect()
}

fn host_path() -> std::ffi::OsString {
    std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into())
}

/// Spawns a setup process of the sandbox (holder, slirp4netns) with its
/// marker, in its group, stdout piped.
fn spawn_setup(mut command: Command, marker: &str, pgid: Option<u32>, what: &str) -> Result<Child, SandboxError> {
    command
        .env_clear()
        .env("PATH", host_path())
        .env(MARKER_VAR, marker)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    if let Some(pgid) = pgid {
        command.process_group(i32::try_from(pgid).unwrap_or(0));
    }
    command.spawn().map_err(|e| SandboxError::Unavailable(format!("cannot start {what}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_block_private_ranges_and_the_host_but_not_exceptions() {
        let host = ["127.0.0.1".parse().expect("ip"), "192.0.2.2".parse().expect("ip"), "198.51.100.9".parse().expect("ip")];
        let exception: Ipv4Addr = "198.51.100.9".parse().expect("ip");
        let script = route_script(Network::Egress, &host, &[exception]);
        assert!(script.contains("route add unreachable 10.0.0.0/8\n"));
        assert!(script.contains("route add unreachable 169.254.0.0/16\n"));
        assert!(script.contains("route add unreachable 192.0.2.2/32\n"));
        assert!(!script.contains("unreachable 198.51.100.9"));
        assert!(script.contains("route add 198.51.100.9/32 via 10.0.2.2 dev tap0\n"));
        assert_eq!(route_script(Network::Offline, &host, &[exception]), "link set lo up\n");
    }

    /// A stand-in for `ip` that prints `stdout` and exits with `code`.
    fn fake_ip(dir: &Path, name: &str, stdout: &str, code: i32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(
            &path,
            format!("#!/bin/sh\nprintf '%s' '{stdout}'\necho 'ip: cannot talk to the kernel' >&2\nexit {code}\n"),
        )
        .expect("written");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("executable");
        path
    }

    #[tokio::test]
    async fn host_addresses_fail_closed_when_ip_fails_or_names_none() {
        let dir = std::env::temp_dir().join(format!("flotilla-ip-test-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).expect("dir");
        let listing = "1: lo    inet 127.0.0.1/8 scope host lo\n2: eth0    inet 192.0.2.7/24 brd 192.0.2.255 scope global eth0\n";
        let works = fake_ip(&dir, "ip-works", listing, 0);
        let fails = fake_ip(&dir, "ip-fails", listing, 1);
        let silent = fake_ip(&dir, "ip-silent", "", 0);
        let found = host_addresses(&works, Network::Egress).await.expect("read");
        assert_eq!(found, ["127.0.0.1".parse::<Ipv4Addr>().expect("ip"), "192.0.2.7".parse().expect("ip")]);
        for broken in [fails.clone(), silent, dir.join("no-such-ip")] {
            match host_addresses(&broken, Network::Egress).await {
                Err(SandboxError::Unavailable(why)) => assert!(why.contains("cannot read this host's addresses"), "{why}"),
                other => panic!("{} must fail closed, got {other:?}", broken.display()),
            }
        }
        let Err(SandboxError::Unavailable(why)) = host_addresses(&fails, Network::Egress).await else { panic!("fails") };
        assert!(why.contains("cannot talk to the kernel"), "the reason is quoted: {why}");
        assert_eq!(host_addresses(&fails, Network::Offline).await.expect("offline needs none"), Vec::<Ipv4Addr>::new());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
