//! The jail seen from inside, written once over `&dyn SandboxProvider` so
//! the same checks run against local desktops a worker starts itself and
//! against those a sandbox host serves over E2B's protocol: scripts typed
//! into a sandbox's own terminal, as an agent types them, try to reach the
//! fleet's ports, private and link-local addresses, other sandboxes'
//! displays and homes, the host's files, `/proc/sys` and its private keys,
//! and all of it fails; only the stand-in for the internet answers, and
//! only while egress is on. Behind the `testing` feature.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::{Duration, SystemTime};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use super::suite;
use super::{Sandbox, SandboxProvider};

/// Shell functions the scripts probe with: `try ADDRESS PORT` prints
/// `ADDRESS:PORT open` or `… closed`; `fetch ADDRESS PORT` prints the last
/// line an HTTP/1.0 server there answers.
pub const TRY_TCP: &str = r#"try() { if timeout 3 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; then echo "$1:$2 open"; else echo "$1:$2 closed"; fi; }
fetch() { timeout 5 bash -c "exec 3<>/dev/tcp/$1/$2; printf 'GET / HTTP/1.0\r\n\r\n' >&3; cat <&3" 2>/dev/null | tail -n 1; echo; }
"#;

/// Runs `script` by typing `bash <file>` into the sandbox's terminal and
/// returns what it printed once it printed `done`.
pub async fn typed(provider: &dyn SandboxProvider, sandbox: &Sandbox, name: &str, script: &str) -> String {
    provider.write_file(&sandbox.id, name, script.as_bytes()).await.expect("script written");
    suite::type_line(provider, sandbox, &format!("bash {name} > {name}.out 2>&1; echo done >> {name}.out")).await;
    suite::eventually("the typed script to finish", || async {
        let out = provider.read_file(&sandbox.id, &format!("{name}.out")).await.ok()?;
        let text = String::from_utf8_lossy(&out).into_owned();
        text.contains("done").then_some(text)
    })
    .await
}

/// A marker no earlier run printed.
fn marker() -> String {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or_default();
    format!("stand-in-{:08x}{nanos:08x}", std::process::id())
}

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

/// From inside a sandbox of `provider`: the fleet's ports on the host's
/// loopback and its address, private and link-local ranges are closed; a
/// stand-in for the internet on `internet` (an address the provider lets
/// sandboxes reach as a public one) answers only when `egress` is on.
pub async fn reachability(provider: &dyn SandboxProvider, internet: Ipv4Addr, egress: bool) {
    let marker = marker();
    let stand_in = serve(SocketAddr::from((internet, 0)), marker.clone()).await;
    let mut fleet = Vec::new();
    for name in ["redis", "api", "worker"] {
        fleet.push(serve(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), name.to_owned()).await);
    }
    // The host reaches all of them: the closed answers below are the jail's doing.
    for addr in &fleet {
        tokio::net::TcpStream::connect(addr).await.expect("the host reaches its own loopback");
    }
    let sandbox = suite::create(provider, (800, 600)).await;
    let mut script = TRY_TCP.to_owned();
    let mut closed = Vec::new();
    for addr in &fleet {
        let port = addr.port();
        for target in ["127.0.0.1".to_owned(), "10.0.2.2".to_owned(), "::1".to_owned(), internet.to_string()] {
            script.push_str(&format!("try {target} {port}\n"));
            closed.push(format!("{target}:{port} closed"));
        }
    }
    for (target, port) in [("10.0.0.1", 80), ("10.0.0.1", 6379), ("169.254.169.254", 80), ("192.168.1.1", 80), ("172.17.0.1", 80)]
    {
        script.push_str(&format!("try {target} {port}\n"));
        closed.push(format!("{target}:{port} closed"));
    }
    script.push_str(&format!("echo \"internet: $(fetch {internet} {})\"\n", stand_in.port()));
    let out = typed(provider, &sandbox, "net.sh", &script).await;
    for line in &closed {
        assert!(out.lines().any(|l| l == line), "expected {line:?} in:\n{out}");
    }
    assert!(!out.contains(" open"), "something answered from inside:\n{out}");
    let expected = if egress { format!("internet: {marker}") } else { "internet: ".to_owned() };
    assert!(out.lines().any(|l| l.trim_end() == expected.trim_end()), "expected {expected:?} in:\n{out}");
    provider.kill(&sandbox.id).await.expect("kill");
}

/// The X socket numbers on this host other than `mine`.
pub fn other_displays(mine: u32) -> Vec<u32> {
    let entries = std::fs::read_dir("/tmp/.X11-unix").expect("the X socket directory");
    entries.filter_map(|e| e.ok()?.file_name().to_str()?.strip_prefix('X')?.parse().ok()).filter(|n| *n != mine).collect()
}

/// The display number a sandbox's own programs are given.
pub async fn display_of(provider: &dyn SandboxProvider, sandbox: &Sandbox) -> u32 {
    let out = provider.run(&sandbox.id, "echo ${DISPLAY#:}", Duration::from_secs(10)).await.expect("echo $DISPLAY");
    out.stdout.trim().split('.').next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("no display: {out:?}"))
}

/// From inside `a`: `xdotool` and `xwd` work on its own display and reach
/// none of the host's others, `theirs` (another sandbox's) among them.
pub async fn cannot_see_or_drive_another_display(provider: &dyn SandboxProvider, a: &Sandbox, theirs: u32) {
    let others = other_displays(display_of(provider, a).await);
    assert!(others.contains(&theirs), "the other display {theirs} is on the host");
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
    let out = typed(provider, a, "x.sh", &script).await;
    assert!(out.contains("own-xdotool ok") && out.contains("own-xwd ok"), "the tools work on the sandbox's own display:\n{out}");
    assert!(!out.contains("reached"), "another display answered:\n{out}");
}

/// `mount`, writes under `/etc` and `/usr`, a file of the host's beside
/// the sandboxes' own directories (under `root`), the environment of the
/// process holding the provider, `/root`, another sandbox's home, new user
/// namespaces and `su` all fail inside a sandbox, which runs as uid 1000
/// without capabilities under seccomp.
pub async fn cannot_mount_write_the_host_or_read_secrets(provider: &dyn SandboxProvider, root: &Path) {
    let (a, b) = tokio::join!(suite::create(provider, (800, 600)), suite::create(provider, (800, 600)));
    provider.write_file(&b.id, "secret.txt", b"b-secret").await.expect("b writes");
    let b_home = provider.run(&b.id, "pwd", Duration::from_secs(10)).await.expect("pwd").stdout.trim().to_owned();
    // A file the worker can read, standing in for its configuration with
    // keys: beside the sandboxes' own directories.
    let config = root.join(format!("flotilla-secret-{}.toml", marker()));
    std::fs::write(&config, "anthropic_api_key = \"sk-test\"\n").expect("config written");
    let holder = std::process::id();
    let checks = [
        ("mount-tmpfs", "mkdir -p m && mount -t tmpfs none m".to_owned()),
        ("remount-root", "mount -o remount,bind,rw /".to_owned()),
        ("write-etc", "echo x > /etc/flotilla-escape".to_owned()),
        ("write-passwd", "echo x >> /etc/passwd".to_owned()),
        ("write-usr", "touch /usr/flotilla-escape".to_owned()),
        ("read-config", format!("cat {}", config.display())),
        ("read-root-home", "ls /root".to_owned()),
        ("read-worker-environ", format!("cat /proc/{holder}/environ")),
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
    let field = |name: &str, value: &str| out.lines().any(|l| l.split_whitespace().collect::<Vec<_>>() == [name, value]);
    assert!(field("CapEff:", "0000000000000000") && field("CapBnd:", "0000000000000000"), "{out}");
    assert!(field("Seccomp:", "2"), "{out}");
    assert!(!Path::new("/etc/flotilla-escape").exists() && !Path::new("/usr/flotilla-escape").exists());
    provider.kill(&a.id).await.expect("kill a");
    provider.kill(&b.id).await.expect("kill b");
}

/// From inside `sandbox`: nothing under `/proc/sys` is writable (a writable
/// `core_pattern` ran a script as host root), `/proc/sysrq-trigger`, the
/// host's private keys, `/proc/kcore` and `/proc/keys` are out of reach,
/// and the CA bundle stays readable. `home` is a host path a script named
/// in `core_pattern` would be written under.
pub async fn cannot_write_proc_sys_or_read_private_keys(provider: &dyn SandboxProvider, sandbox: &Sandbox, home: &Path) {
    let core_pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").expect("the host's core_pattern");
    let home = home.display();
    let script = format!(
        "if (printf '|{home}/pwn.sh' > /proc/sys/kernel/core_pattern) 2>/dev/null; then echo 'core_pattern written'; fi\n\
         writable=$(find /proc/sys -type f -writable 2>/dev/null | head -n 5); echo \"writable: $writable\"\n\
         for f in /proc/sysrq-trigger /proc/sys/net/ipv4/ip_forward; do test -w \"$f\" && echo \"$f writable\"; done\n\
         test -e /etc/ssl/private && echo 'private keys in view'\n\
         test -r /etc/ssl/certs/ca-certificates.crt && echo 'ca bundle in view'\n\
         echo \"kcore $(wc -c < /proc/kcore 2>/dev/null)\"\n\
         echo \"keys $(wc -c < /proc/keys 2>/dev/null)\"\n"
    );
    let out = typed(provider, sandbox, "procsys.sh", &script).await;
    assert_eq!(std::fs::read_to_string("/proc/sys/kernel/core_pattern").expect("read"), core_pattern, "core_pattern changed");
    assert!(!out.contains("core_pattern written"), "{out}");
    assert!(out.lines().any(|l| l.trim_end() == "writable:"), "a file under /proc/sys is writable:\n{out}");
    assert!(!out.contains(" writable\n") && !out.contains("private keys in view"), "{out}");
    assert!(out.contains("ca bundle in view"), "certificates stay readable:\n{out}");
    assert!(out.lines().any(|l| l.trim_end() == "kcore 0" || l.trim_end() == "kcore"), "kcore is masked:\n{out}");
    assert!(out.lines().any(|l| l.trim_end() == "keys 0" || l.trim_end() == "keys"), "keys are masked:\n{out}");
}
