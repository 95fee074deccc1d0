//! The ways out of a sandbox that a security review found, tried from inside
//! as an agent would (commands typed into the sandbox's own terminal), each
//! now closed: the kernel's settings under `/proc/sys` (a writable
//! `core_pattern` ran a script as host root), host root's files, the X
//! server's shared memory, the host's own links and the documentation
//! ranges, and one sandbox starving the others. These run as whatever user
//! runs the tests (root on CI), where a root worker's sandboxes get uids of
//! their own.

use std::time::Duration;

use super::jail_fixture::{typed, Fixture, TRY_TCP};
use super::{LocalConfig, Network, SandboxLimits};
use flotilla_sandbox::{jail_suite, suite, SandboxError, SandboxProvider};

/// The ids of every process of a sandbox, as the host sees them:
/// `(pid, [real, effective, saved, filesystem uid])`.
fn sandbox_uids(pgid: Option<u32>, marker: &str) -> Vec<(u32, Vec<u32>)> {
    super::process::live_processes(pgid, marker)
        .into_iter()
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let line = status.lines().find(|l| l.starts_with("Uid:"))?;
            Some((pid, line.split_whitespace().skip(1).filter_map(|n| n.parse().ok()).collect()))
        })
        .collect()
}

#[tokio::test]
async fn sandbox_cannot_write_proc_sys_read_private_keys_or_be_host_root() {
    cannot_write_proc_sys_read_private_keys_or_be_host_root().await;
}

/// Run again as `nobody` by `isolation_tests::sandbox_jail_holds_when_the_worker_is_not_root`.
pub(super) async fn cannot_write_proc_sys_read_private_keys_or_be_host_root() {
    let fixture = Fixture::new(Network::Egress, Vec::new());
    let provider = fixture.provider();
    let sandbox = suite::create(provider, (800, 600)).await;
    jail_suite::cannot_write_proc_sys_or_read_private_keys(provider, &sandbox, &fixture.root).await;

    let pgid = provider.process_group(&sandbox.id).await.expect("group");
    let uids = sandbox_uids(pgid, sandbox.id.as_str());
    assert!(uids.len() >= 4, "the holder, the X server, the window manager and the terminal at least: {uids:?}");
    for (pid, ids) in &uids {
        assert!(ids.len() == 4 && ids.iter().all(|id| *id != 0), "process {pid} is host uid 0: {ids:?}");
    }
    provider.kill(&sandbox.id).await.expect("kill");
}

/// A SysV shared-memory segment of the host, made with `ipcmk`
/// (util-linux) and removed when dropped.
struct HostSegment(u32);

impl HostSegment {
    fn make() -> Self {
        let out = std::process::Command::new("ipcmk").args(["-M", "4096", "-p", "0600"]).output().expect("ipcmk runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let id = text.split(':').nth(1).and_then(|n| n.trim().parse().ok()).unwrap_or_else(|| panic!("ipcmk said {text:?}"));
        Self(id)
    }
}

impl Drop for HostSegment {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ipcrm").args(["-m", &self.0.to_string()]).status();
    }
}

/// The namespace `kind` of `pid`, as `kind:[inode]`.
fn namespace(pid: &str, kind: &str) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/{kind}")).map(|p| p.display().to_string()).unwrap_or_default()
}

#[tokio::test]
async fn the_x_server_is_inside_the_sandbox_and_cannot_attach_host_memory() {
    x_server_is_inside_and_cannot_attach_host_memory().await;
}

/// Run again as `nobody` by `isolation_tests::sandbox_jail_holds_when_the_worker_is_not_root`.
pub(super) async fn x_server_is_inside_and_cannot_attach_host_memory() {
    let fixture = Fixture::new(Network::Offline, Vec::new());
    let provider = fixture.provider();
    let sandbox = suite::create(provider, (800, 600)).await;
    let segment = HostSegment::make();
    // A client asks the server to attach the host's segment, as a jailed
    // agent did through MIT-SHM: the server looks it up in the sandbox's own
    // IPC namespace, where it does not exist.
    let attached = provider.attaches_segment(&sandbox.id, segment.0).await.expect("asked");
    assert!(!attached, "the X server attached host segment {}", segment.0);

    let pgid = provider.process_group(&sandbox.id).await.expect("group");
    let server = super::process::live_processes(pgid, sandbox.id.as_str())
        .into_iter()
        .find(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "Xvfb"))
        .expect("the sandbox's X server");
    let server = server.to_string();
    for kind in ["pid", "ipc", "net", "user"] {
        assert_ne!(namespace(&server, kind), namespace("self", kind), "the X server shares the host's {kind} namespace");
    }
    let status = std::fs::read_to_string(format!("/proc/{server}/status")).expect("status");
    let levels = status.lines().find(|l| l.starts_with("NSpid:")).map_or(0, |l| l.split_whitespace().count() - 1);
    assert!(levels >= 2, "the X server's pid is not inside a pid namespace: {status}");
    provider.kill(&sandbox.id).await.expect("kill");
}

fn small_limits() -> SandboxLimits {
    SandboxLimits { memory_bytes: 384 << 20, pids: 128, cpus: 0.5, home_bytes: 8 << 20, tmp_bytes: 8 << 20 }
}

/// A provider of `limits`, under its own root.
fn limited(limits: SandboxLimits) -> Fixture {
    let root = std::env::temp_dir().join(format!("flotilla-limits-test-{:016x}", rand::random::<u64>()));
    Fixture::with_config(LocalConfig { root: root.clone(), network: Network::Offline, limits, ..LocalConfig::default() }, root)
}

#[tokio::test]
async fn a_sandbox_past_its_limits_is_killed_alone_and_its_disk_is_bounded() {
    past_its_limits_killed_alone_and_disk_bounded().await;
}

/// The same as a worker that is not root, with no control group to make:
/// the resource limits counted in each sandbox's own namespaces and the
/// reaper's watch hold the sandbox to its limits, and the others go on.
#[tokio::test]
async fn a_sandbox_past_its_limits_is_killed_alone_when_the_worker_is_not_root() {
    if super::jail_fixture::effective_uid() != 0 {
        past_its_limits_killed_alone_and_disk_bounded().await;
        return;
    }
    super::jail_fixture::run_as_unprivileged(&format!("{}::limits_as_unprivileged_user", module_path!())).await;
}

#[tokio::test]
#[ignore = "run as an unprivileged user by a_sandbox_past_its_limits_is_killed_alone_when_the_worker_is_not_root"]
async fn limits_as_unprivileged_user() {
    assert_ne!(super::jail_fixture::effective_uid(), 0, "runs as an unprivileged user");
    past_its_limits_killed_alone_and_disk_bounded().await;
}

/// A memory hog that holds what it got: it grows a mebibyte at a time and,
/// refused more, keeps it.
const BALLOON: &str = "python3 -c 'exec(\"import time\\nb = []\\ntry:\\n while 1: b.append(bytearray(1 << 20))\\nexcept MemoryError:\\n time.sleep(600)\")'";

async fn past_its_limits_killed_alone_and_disk_bounded() {
    let fixture = limited(small_limits());
    let provider = fixture.provider();
    let (bomb, balloon, steady) = tokio::join!(
        suite::create(provider, (800, 600)),
        suite::create(provider, (800, 600)),
        suite::create(provider, (800, 600))
    );

    // Writing past the home's size fails with ENOSPC, and nothing else breaks.
    let full = provider.run(&steady.id, "head -c 20000000 /dev/zero > big; echo \"exit $?\"", Duration::from_secs(30)).await;
    let full = full.expect("runs");
    assert!(full.stderr.contains("No space left on device"), "{full:?}");
    provider.run(&steady.id, "rm -f big", Duration::from_secs(30)).await.expect("removed");

    suite::type_line(provider, &bomb, "f() { f | f & }; f").await;
    suite::type_line(provider, &balloon, BALLOON).await;

    // The steady sandbox keeps doing its steps while the others go under.
    for step in 0..10 {
        let echoed = provider.run(&steady.id, &format!("echo step-{step}"), Duration::from_secs(30)).await.expect("a step");
        assert_eq!(echoed.stdout.trim(), format!("step-{step}"));
        provider.screenshot(&steady.id).await.expect("a screenshot");
    }
    for (sandbox, limit) in [(&bomb, "processes"), (&balloon, "memory")] {
        let error = suite::eventually(&format!("the sandbox past its {limit} limit to be killed"), || async {
            match provider.status(&sandbox.id).await {
                Err(error @ SandboxError::LimitExceeded { .. }) => Some(error),
                _ => None,
            }
        })
        .await;
        assert_eq!(error.to_string(), format!("sandbox {} was killed: it went past its {limit} limit", sandbox.id));
    }
    let status = provider.status(&steady.id).await.expect("the steady sandbox is there");
    assert!(status.alive, "the steady sandbox still runs");
    provider.kill(&steady.id).await.expect("kill");
}

/// A link on the host (one end of a veth pair, the kernel here may have no
/// dummy links) with a public prefix of its own, removed when dropped: a
/// neighbour of a fleet machine on a public address.
struct DummyLink(String);

impl DummyLink {
    fn add(address: &str) -> Self {
        let name = format!("fl{:08x}", rand::random::<u32>());
        let peer = format!("{name}p");
        let ip = |args: &[&str]| std::process::Command::new("ip").args(args).status().expect("ip runs").success();
        let made = ip(&["link", "add", &name, "type", "veth", "peer", "name", &peer]);
        assert!(made, "cannot make a veth pair (run the tests as root)");
        assert!(ip(&["addr", "add", address, "dev", &name]) && ip(&["link", "set", &name, "up"]));
        Self(name)
    }
}

impl Drop for DummyLink {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip").args(["link", "del", &self.0]).status();
    }
}

#[tokio::test]
async fn sandbox_reaches_neither_the_hosts_links_nor_documentation_ranges() {
    let _link = DummyLink::add("11.22.33.1/24");
    let fixture = Fixture::new(Network::Egress, Vec::new());
    let provider = fixture.provider();
    let sandbox = suite::create(provider, (800, 600)).await;
    let mut script = TRY_TCP.to_owned();
    for target in ["11.22.33.44", "11.22.33.1", "198.51.100.1", "203.0.113.9", "192.88.99.1"] {
        script.push_str(&format!("try {target} 80\n"));
    }
    let out = typed(provider, &sandbox, "links.sh", &script).await;
    for target in ["11.22.33.44", "11.22.33.1", "198.51.100.1", "203.0.113.9", "192.88.99.1"] {
        assert!(out.lines().any(|l| l == format!("{target}:80 closed")), "{target} was reached:\n{out}");
    }
    provider.kill(&sandbox.id).await.expect("kill");
}

#[tokio::test]
async fn sandbox_resolves_public_names_and_no_name_that_points_inside() {
    let _link = DummyLink::add("11.23.34.1/24");
    let names = [
        ("public.example", std::net::Ipv4Addr::new(93, 184, 216, 34)),
        ("internal.example", std::net::Ipv4Addr::new(10, 0, 0, 5)),
        ("metadata.example", std::net::Ipv4Addr::new(169, 254, 169, 254)),
        ("neighbour.example", std::net::Ipv4Addr::new(11, 23, 34, 7)),
    ];
    let upstream = super::dns::stand_in::serve(names.iter().map(|(n, ip)| ((*n).to_owned(), *ip)).collect()).await;
    let root = std::env::temp_dir().join(format!("flotilla-dns-test-{:016x}", rand::random::<u64>()));
    let config = LocalConfig { root: root.clone(), dns_upstream: Some(vec![upstream]), ..LocalConfig::default() };
    let fixture = Fixture::with_config(config, root);
    let provider = fixture.provider();
    let sandbox = suite::create(provider, (800, 600)).await;
    let mut script = String::new();
    for (name, _) in &names {
        script.push_str(&format!("echo \"udp {name}: $(getent ahostsv4 {name} | head -n 1 | cut -d' ' -f1)\"\n"));
        script.push_str(&format!(
            "echo \"tcp {name}: $(RES_OPTIONS=use-vc getent ahostsv4 {name} | head -n 1 | cut -d' ' -f1)\"\n"
        ));
    }
    let out = typed(provider, &sandbox, "dns.sh", &script).await;
    for transport in ["udp", "tcp"] {
        assert!(out.lines().any(|l| l == format!("{transport} public.example: 93.184.216.34")), "a public name resolves:\n{out}");
        for (name, _) in &names[1..] {
            assert!(out.lines().any(|l| l.trim_end() == format!("{transport} {name}:")), "{name} resolved:\n{out}");
        }
    }
    provider.kill(&sandbox.id).await.expect("kill");
}

#[tokio::test]
async fn sandbox_output_reaches_the_host_only_as_a_bounded_log() {
    let fixture = Fixture::new(Network::Offline, Vec::new());
    let provider = fixture.provider();
    let sandbox = suite::create(provider, (800, 600)).await;
    // The terminal's processes hold the worker's end of its output; an
    // agent finds it under /proc and writes far past the log's bound.
    let script = "for fd in /proc/[0-9]*/fd/1 /proc/[0-9]*/fd/2; do case \"$(readlink \"$fd\")\" in pipe:*) head -c 3000000 /dev/zero | tr '\\0' x > \"$fd\" && echo \"wrote $fd\";; esac; done\n";
    typed(provider, &sandbox, "flood.sh", script).await;
    // Whatever reached a pipe (most of them are out of the agent's reach),
    // the host keeps at most the bound of each of the terminal's streams.
    let log = fixture.root.join(sandbox.id.as_str()).join("logs").join("xterm.log");
    let bound = 2 * super::desktop::MAX_LOG_BYTES;
    let size = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    assert!(size <= bound, "the host log grew to {size} bytes, past {bound}");
    provider.kill(&sandbox.id).await.expect("kill");
}

/// A program that asks for `io_uring` and then makes an x32 call, built
/// with the host's C compiler as an agent could bring one in.
const SYSCALLS_C: &str = r#"#include <errno.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/syscall.h>
int main(void) {
    char params[120] = {0};
    long ring = syscall(425, 4, params);
    printf("io_uring_setup %ld errno %d\n", ring, ring < 0 ? errno : 0);
    fflush(stdout);
    long pid = syscall(0x40000000 | 39);
    printf("x32 getpid answered %ld\n", pid);
    return 0;
}
"#;

#[tokio::test]
async fn io_uring_is_refused_and_an_x32_call_kills_its_caller() {
    if std::env::consts::ARCH != "x86_64" {
        return;
    }
    let dir = std::env::temp_dir().join(format!("flotilla-syscalls-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("syscalls.c"), SYSCALLS_C).expect("source");
    let built = std::process::Command::new("cc")
        .arg("-o")
        .arg(dir.join("syscalls"))
        .arg(dir.join("syscalls.c"))
        .status()
        .expect("the C compiler runs (gcc)");
    assert!(built.success(), "the test program builds");
    let program = std::fs::read(dir.join("syscalls")).expect("built");
    let _ = std::fs::remove_dir_all(&dir);

    let fixture = Fixture::new(Network::Offline, Vec::new());
    let provider = fixture.provider();
    let sandbox = suite::create(provider, (800, 600)).await;
    provider.write_file(&sandbox.id, "syscalls", &program).await.expect("copied in");
    let ran = provider.run(&sandbox.id, "chmod +x syscalls && ./syscalls", Duration::from_secs(30)).await.expect("runs");
    assert!(ran.stdout.contains(&format!("io_uring_setup -1 errno {}", libc::EPERM)), "io_uring was not refused: {ran:?}");
    assert!(!ran.stdout.contains("x32 getpid answered"), "an x32 call went through: {ran:?}");
    assert_ne!(ran.exit_code, 0, "the x32 call kills its caller: {ran:?}");
    provider.kill(&sandbox.id).await.expect("kill");
}
