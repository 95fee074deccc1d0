//! A command started through a sandbox's spawner is as walled in as one
//! started through the jail's whole chain: the same uid, no capability in
//! any set, the seccomp filter and no new privileges, the sandbox's own
//! network, pid, IPC, mount and control-group view, a user namespace that
//! is not the host's, no controlling terminal, and nothing of the host's
//! loopback in reach.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::net::TcpListener;

use super::jail_fixture::Fixture;
use super::{process, Network};
use flotilla_sandbox::{suite, SandboxProvider};

/// Prints `key=value` lines of what walls the running process is in.
const WALLS: &str = r#"
echo "uid=$(id -u) gid=$(id -g)"
for field in CapInh CapPrm CapEff CapBnd CapAmb Seccomp NoNewPrivs; do
  echo "$field=$(awk -v f="$field:" '$1 == f { print $2 }' /proc/self/status)"
done
for ns in net pid ipc mnt cgroup user uts; do echo "ns_$ns=$(readlink /proc/self/ns/$ns)"; done
echo "cgroup=$(tr '\n' ' ' < /proc/self/cgroup)"
echo "hostname=$(hostname)"
if (exec 3</dev/tty) 2>/dev/null; then echo "tty=controlling"; else echo "tty=none"; fi
echo "parent=$(cat /proc/$PPID/comm)"
echo "mount_denied=$(mount -t tmpfs none /tmp 2>/dev/null && echo no || echo yes)"
if timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; then echo "host_loopback=open"; else echo "host_loopback=closed"; fi
"#;

fn fields(out: &str) -> BTreeMap<String, String> {
    out.lines().filter_map(|line| line.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

#[tokio::test]
async fn a_command_started_by_the_spawner_is_as_jailed_as_one_started_through_the_chain() {
    let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0))).await.expect("binds");
    let port = listener.local_addr().expect("addr").port().to_string();
    tokio::net::TcpStream::connect(listener.local_addr().expect("addr")).await.expect("the host reaches its own loopback");
    let fixture = Fixture::new(Network::Offline, Vec::new());
    let provider = fixture.provider();
    let sandbox = suite::create(provider, (800, 600)).await;

    let spawned = provider.spawn(&sandbox.id, "bash", &["-c", WALLS, "walls", &port], &[], false).await.expect("spawned");
    let fast = process::run_child(spawned, None, Duration::from_secs(30), 1 << 20, None).await.expect("runs");
    let chain = provider.command(&sandbox.id, "bash", &["-c", WALLS, "walls", &port]).await.expect("a command");
    let slow = process::run(chain, None, Duration::from_secs(30), 1 << 20).await.expect("runs");
    let (fast_out, slow_out) = (String::from_utf8_lossy(&fast.stdout), String::from_utf8_lossy(&slow.stdout));
    let (fast, slow) = (fields(&fast_out), fields(&slow_out));
    let host = fields(&format!(
        "ns_net={}\nns_pid={}\nns_user={}\nns_mnt={}\n",
        std::fs::read_link("/proc/self/ns/net").expect("ns").display(),
        std::fs::read_link("/proc/self/ns/pid").expect("ns").display(),
        std::fs::read_link("/proc/self/ns/user").expect("ns").display(),
        std::fs::read_link("/proc/self/ns/mnt").expect("ns").display(),
    ));

    assert_eq!(fast.get("parent").map(String::as_str), Some("spawner"), "started by the spawner:\n{fast_out}");
    assert_ne!(slow.get("parent").map(String::as_str), Some("spawner"), "started through the chain:\n{slow_out}");
    for key in ["uid", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "Seccomp", "NoNewPrivs", "ns_net", "ns_pid", "ns_ipc"] {
        assert_eq!(fast.get(key), slow.get(key), "{key} differs:\nspawner:\n{fast_out}\nchain:\n{slow_out}");
    }
    for key in ["cgroup", "hostname", "tty", "mount_denied", "host_loopback"] {
        assert_eq!(fast.get(key), slow.get(key), "{key} differs:\nspawner:\n{fast_out}\nchain:\n{slow_out}");
    }
    assert_eq!(fast["uid"], "1000 gid=1000", "{fast_out}");
    for key in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert_eq!(fast[key], "0000000000000000", "{key} is not empty:\n{fast_out}");
    }
    assert_eq!((fast["Seccomp"].as_str(), fast["NoNewPrivs"].as_str()), ("2", "1"), "{fast_out}");
    for key in ["ns_net", "ns_pid", "ns_user", "ns_mnt"] {
        assert_ne!(fast.get(key), host.get(key), "{key} is the host's:\n{fast_out}");
    }
    assert_eq!(fast["tty"], "none", "{fast_out}");
    assert_eq!(fast["mount_denied"], "yes", "{fast_out}");
    assert_eq!(fast["host_loopback"], "closed", "{fast_out}");
    assert_eq!(fast["hostname"], "sandbox", "{fast_out}");
    provider.kill(&sandbox.id).await.expect("kill");
}
