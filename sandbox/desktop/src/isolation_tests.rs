//! The jail seen from inside, as an agent sees it: commands typed into a
//! sandbox's own terminal try to reach the fleet's ports, private and
//! link-local addresses, other sandboxes' displays and homes, the worker's
//! files and the host's `/etc`, and all of it fails; only the stand-in for
//! the internet answers, and only while egress is on. These run as whatever
//! user runs the tests (root on CI).

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use super::jail_fixture::{effective_uid, run_as_unprivileged, typed, Fixture, TRY_TCP};
use super::Network;
use flotilla_sandbox::suite::host_address;
use flotilla_sandbox::{suite, SandboxProvider};

/// A TCP server on `addr` that answers every connection with `body` over
/// HTTP/1.0, until the test ends.
async fn serve(addr: SocketAddr, body: String) -> SocketAddr {
    let listener = TcpListener::bind(addr).await.expect("binds");
    let bound = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let answer = format!("HTTP/1.0 200 OK\r\ncontent-length: {}\r\n\r\n{body}", body.len());
            let _ = stream.write_all(answer.as_bytes()).await;
        }
    });
    bound
}

async fn reachability(network: Network) {
    let host = host_address();
    let marker = format!("stand-in-{:08x}", rand::random::<u32>());
    let internet = serve(SocketAddr::from((host, 0)), marker.clone()).await;
    let mut fleet = Vec::new();
    for name in ["redis", "api", "worker"] {
        fleet.push((name, serve(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), name.to_owned()).await));
    }
    // The host reaches all of them: the closed answers below are the jail's doing.
    for (_, addr) in &fleet {
        tokio::net::TcpStream::connect(addr).await.expect("the host reaches its own loopback");
    }
    let fixture = Fixture::new(network, vec![host]);
    let provider = fixture.provider();
    let sandbox = suite::create(provider, (800, 600)).await;
    let mut script = TRY_TCP.to_owned();
    let mut closed = Vec::new();
    for (_, addr) in &fleet {
        let port = addr.port();
        for target in ["127.0.0.1".to_owned(), "10.0.2.2".to_owned(), "::1".to_owned(), host.to_string()] {
            script.push_str(&format!("try {target} {port}\n"));
            closed.push(format!("{target}:{port} closed"));
        }
    }
    for (target, port) in [("10.0.0.1", 80), ("10.0.0.1", 6379), ("169.254.169.254", 80), ("192.168.1.1", 80), ("172.17.0.1", 80)]
    {
        script.push_str(&format!("try {target} {port}\n"));
        closed.push(format!("{target}:{port} closed"));
    }
    script.push_str(&format!("echo \"internet: $(fetch {host} {})\"\n", internet.port()));
    let out = typed(provider, &sandbox, "net.sh", &script).await;
    for line in &closed {
        assert!(out.lines().any(|l| l == line), "expected {line:?} in:\n{out}");
    }
    assert!(!out.contains(" open"), "something answered from inside:\n{out}");
    let expected = match network {
        Network::Egress => format!("internet: {marker}"),
        Network::Offline => "internet: ".to_owned(),
    };
    assert!(out.lines().any(|l| l.trim_end() == expected.trim_end()), "expected {expected:?} in:\n{out}");
    provider.kill(&sandbox.id).await.expect("kill");
}

#[tokio::test]
async fn sandbox_reaches_the_internet_through_egress_and_nothing_of_the_host() {
    reachability(Network::Egress).await;
}

#[tokio::test]
async fn sandbox_offline_reaches_nothing() {
    reachability(Network::Offline).await;
}

/// The X socket numbers on this host other than `mine`.
fn other_displays(mine: u32) -> Vec<u32> {
    let entries = std::fs::read_dir("/tmp/.X11-unix").expect("the X socket directory");
    entries.filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix('X')?.parse().ok()).filter(|n| *n != mine).collect()
}

#[tokio::test]
async fn sandbox_cannot_see_or_drive_another_display() {
    cannot_see_or_drive_another_display().await;
}

async fn cannot_see_or_drive_another_display() {
    let fixture = Fixture::new(Network::Egress, Vec::new());
    let provider = fixture.provider();
    let (a, b) = tokio::join!(suite::create(provider, (800, 600)), suite::create(provider, (800, 600)));
    let (mine, theirs) = (provider.display_access(&a.id).await.expect("a"), provider.display_access(&b.id).await.expect("b"));
    let others = other_displays(mine.display);
    assert!(others.contains(&theirs.display), "b's display {} is on the host", theirs.display);
    let mut script = String::from(
        "xdotool getmouselocation >/dev/null 2>&1 && echo own-xdotool ok\nxwd -root -silent >/dev/null 2>&1 && echo own-xwd ok\n",
    );
    for n in &others {
        script.push_str(&format!(
            "DISPLAY=:{n} xdotool mousemove 1 1 >/dev/null 2>&1 && echo \"xdotool :{n} reached\"\n\
             DISPLAY=:{n} xdotool type x >/dev/null 2>&1 && echo \"type :{n} reached\"\n\
             xwd -display :{n} -root -silent >/dev/null 2>&1 && echo \"xwd :{n} reached\"\n"
        ));
    }
    let out = typed(provider, &a, "x.sh", &script).await;
    assert!(out.contains("own-xdotool ok") && out.contains("own-xwd ok"), "the tools work on the sandbox's own display:\n{out}");
    assert!(!out.contains("reached"), "another display answered:\n{out}");

    // On the host, the display wants its cookie: without it a client is
    // refused, with the provider's cookie file (as the worker's tools use
    // it) it gets in.
    let xwd = |auth: PathBuf| {
        std::process::Command::new("xwd")
            .args(["-display", &format!(":{}", theirs.display), "-root", "-silent"])
            .env("XAUTHORITY", auth)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("xwd runs")
            .success()
    };
    assert!(!xwd(PathBuf::from("/dev/null")), "b's display admits a client without its cookie");
    assert!(xwd(theirs.xauthority.clone()), "the worker attaches with the cookie file");
    provider.kill(&a.id).await.expect("kill a");
    provider.kill(&b.id).await.expect("kill b");
}

#[tokio::test]
async fn sandbox_as_root_cannot_mount_write_the_host_or_read_secrets() {
    assert_eq!(effective_uid(), 0, "this test shows the jail of a worker that runs as root; run the suite as root");
    cannot_mount_write_the_host_or_read_secrets().await;
}

/// `mount`, writes under `/etc` and `/usr`, the worker's configuration, its
/// environment, `/root`, another sandbox's home, new user namespaces and
/// `su` all fail inside a sandbox, which runs as uid 1000 without
/// capabilities under seccomp.
async fn cannot_mount_write_the_host_or_read_secrets() {
    let fixture = Fixture::new(Network::Egress, Vec::new());
    let provider = fixture.provider();
    let (a, b) = tokio::join!(suite::create(provider, (800, 600)), suite::create(provider, (800, 600)));
    provider.write_file(&b.id, "secret.txt", b"b-secret").await.expect("b writes");
    let b_home = provider.run(&b.id, "pwd", Duration::from_secs(10)).await.expect("pwd").stdout.trim().to_owned();
    // A file the worker can read, standing in for its configuration with
    // keys: beside the sandboxes' own directories.
    let config = fixture.root.join(format!("flotilla-secret-{:08x}.toml", rand::random::<u32>()));
    std::fs::write(&config, "anthropic_api_key = \"sk-test\"\n").expect("config written");
    let worker_pid = std::process::id();
    let checks = [
        ("mount-tmpfs", "mkdir -p m && mount -t tmpfs none m".to_owned()),
        ("remount-root", "mount -o remount,bind,rw /".to_owned()),
        ("write-etc", "echo x > /etc/flotilla-escape".to_owned()),
        ("write-passwd", "echo x >> /etc/passwd".to_owned()),
        ("write-usr", "touch /usr/flotilla-escape".to_owned()),
        ("read-config", format!("cat {}", config.display())),
        ("read-root-home", "ls /root".to_owned()),
        ("read-worker-environ", format!("cat /proc/{worker_pid}/environ")),
        ("read-other-home", format!("cat {b_home}/secret.txt")),
        ("new-userns", "unshare -U true".to_owned()),
        ("setuid-root", "su -c true root </dev/null".to_owned()),
    ];
    let mut script = String::new();
    for (name, command) in &checks {
        script.push_str(&format!(
            "if ( {command} ) >/dev/null 2>&1; then echo '{name} succeeded'; else echo '{name} failed'; fi\n"
        ));
    }
    script.push_str("echo \"uid $(id -u)\"\ngrep -E '^(CapEff|CapBnd|Seccomp|NoNewPrivs):' /proc/self/status\n");
    let out = typed(provider, &a, "root.sh", &script).await;
    let _ = std::fs::remove_file(&config);
    for (name, _) in &checks {
        assert!(out.lines().any(|l| l == format!("{name} failed")), "{name} was not refused:\n{out}");
    }
    assert!(out.contains("uid 1000"), "{out}");
    assert!(out.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["CapEff:", "0000000000000000"]), "{out}");
    assert!(out.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["CapBnd:", "0000000000000000"]), "{out}");
    assert!(out.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == ["Seccomp:", "2"]), "{out}");
    assert!(!std::path::Path::new("/etc/flotilla-escape").exists() && !std::path::Path::new("/usr/flotilla-escape").exists());
    provider.kill(&a.id).await.expect("kill a");
    provider.kill(&b.id).await.expect("kill b");
}

/// Runs the reachability, display and host-file checks in a copy of this
/// test binary started as `nobody`, as a worker that is not root runs: the
/// jail is then built from an unprivileged user's namespaces and must hold
/// just the same.
#[tokio::test]
async fn sandbox_jail_holds_when_the_worker_is_not_root() {
    if effective_uid() != 0 {
        // Already unprivileged (a developer's machine): check here.
        unprivileged_checks().await;
        return;
    }
    run_as_unprivileged(&format!("{}::as_unprivileged_user", module_path!())).await;
}

/// The checks of this module, as whatever unprivileged user runs it; run by
/// `sandbox_jail_holds_when_the_worker_is_not_root`.
#[tokio::test]
#[ignore = "run as an unprivileged user by sandbox_jail_holds_when_the_worker_is_not_root"]
async fn as_unprivileged_user() {
    unprivileged_checks().await;
}

async fn unprivileged_checks() {
    assert_ne!(effective_uid(), 0, "runs as an unprivileged user");
    reachability(Network::Egress).await;
    reachability(Network::Offline).await;
    cannot_see_or_drive_another_display().await;
    cannot_mount_write_the_host_or_read_secrets().await;
    super::escape_tests::cannot_write_proc_sys_read_private_keys_or_be_host_root().await;
    super::escape_tests::x_server_is_inside_and_cannot_attach_host_memory().await;
}
