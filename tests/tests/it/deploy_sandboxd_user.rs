//! The sandbox host as its containers run it: `flotilla-sandboxd` as the
//! image's user (uid 10001), with no capability at all (none effective,
//! none it could gain: an empty bounding set, `no_new_privs`), still builds
//! its jail and serves a desktop over TLS with the shipped script's pair;
//! nothing of it runs as root. What the deployment files add for the jail
//! is only what the container runtime would otherwise refuse (seccomp,
//! AppArmor, masked `/proc`, `/dev/net/tun`), never a capability.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::process::Stdio;
use std::time::Duration;

use flotilla_tests::fleet::binary;
use flotilla_tests::redis_server::free_port;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::deploy_sandboxd_tls::{private_authority, TempDir};

/// The image's user (`deploy/Dockerfile`, `k8s/sandboxd.yaml`'s `runAsUser`).
const IMAGE_UID: u32 = 10001;
/// How long the host may take to start.
const START_WITHIN: Duration = Duration::from_secs(60);

/// `Uid:` (real, as this namespace sees it) and `CapEff:`, `CapBnd:` of
/// process `pid`.
fn identity(pid: u32) -> Option<(u32, u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim);
    let uid = field("Uid:")?.split_whitespace().next()?.parse().ok()?;
    let caps = |name: &str| u64::from_str_radix(field(name)?, 16).ok();
    Some((uid, caps("CapEff:")?, caps("CapBnd:")?))
}

/// Every process below `root`, by the parent each names.
fn descendants(root: u32) -> Vec<u32> {
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let parent = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if let Some(parent) = parent {
            children.entry(parent).or_default().push(pid);
        }
    }
    let (mut found, mut next) = (Vec::new(), vec![root]);
    while let Some(pid) = next.pop() {
        let below = children.get(&pid).cloned().unwrap_or_default();
        found.extend(&below);
        next.extend(below);
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_serves_a_jailed_desktop_as_the_images_user_without_any_capability() {
    let root_runs_it = std::fs::metadata("/proc/self").expect("/proc").uid() == 0;
    let dir = TempDir::new("sandboxd-image-user");
    let owner = IMAGE_UID.to_string();
    let key_owner = root_runs_it.then_some(owner.as_str());
    let (files, ca) = private_authority(&dir.0, key_owner, &["DNS:localhost", "IP:127.0.0.1"]);
    let desktops = dir.0.join("desktops");
    std::fs::create_dir_all(&desktops).expect("the desktops' root");
    if root_runs_it {
        std::os::unix::fs::chown(&desktops, Some(IMAGE_UID), Some(IMAGE_UID)).expect("the root is the user's");
    }
    let (control, edge) = (free_port(), free_port());
    let key = format!("e2b_{:032x}", rand::random::<u128>());
    // As root (the jail tests' case) the host is started as the image's
    // user with every capability gone for good; otherwise it already runs
    // without privileges.
    let host_binary = binary("flotilla-sandboxd");
    let mut command = if root_runs_it {
        let mut setpriv = tokio::process::Command::new("setpriv");
        setpriv.args(["--reuid", &owner, "--regid", &owner, "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]);
        setpriv.arg("--no-new-privs").arg(&host_binary);
        setpriv
    } else {
        tokio::process::Command::new(&host_binary)
    };
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("FLOTILLA_SANDBOXD_ADDR", format!("0.0.0.0:{control}"))
        .env("FLOTILLA_SANDBOXD_EDGE_ADDR", format!("0.0.0.0:{edge}"))
        .env("FLOTILLA_SANDBOXD_TLS_CERT", &files.cert)
        .env("FLOTILLA_SANDBOXD_TLS_KEY", &files.key)
        .env("FLOTILLA_SANDBOXD_KEYS", &key)
        .env("FLOTILLA_SANDBOXD_POOL", "0")
        .env("FLOTILLA_SANDBOXD_ROOT", &desktops)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let mut host = command.spawn().expect("flotilla-sandboxd starts");
    let pid = host.id().expect("a pid");
    let mut lines = BufReader::new(host.stdout.take().expect("stdout")).lines();
    let ready = tokio::time::timeout(START_WITHIN, lines.next_line()).await.expect("the host says where it is");
    let ready = ready.expect("its output").expect("a line");
    assert!(ready.contains(&format!("E2B_API_URL=https://0.0.0.0:{control}")), "{ready}");

    let (uid, effective, bounding) = identity(pid).expect("the host runs");
    if root_runs_it {
        assert_eq!(uid, IMAGE_UID, "the host runs as the image's user");
        assert_eq!((effective, bounding), (0, 0), "with no capability, now or ever");
    }
    let client = crate::deploy_sandboxd_tls::client_of(&ca);
    let api = format!("https://localhost:{control}");
    let created = client
        .post(format!("{api}/sandboxes"))
        .header("X-API-Key", &key)
        .json(&json!({"templateID": "desktop", "timeout": 120}))
        .send()
        .await
        .expect("a create over verified TLS");
    let status = created.status().as_u16();
    let body: Value = created.json().await.unwrap_or(Value::Null);
    assert!(matches!(status, 200 | 201), "a jailed desktop with its terminal up: {status} {body}");
    let id = body["sandboxID"].as_str().expect("its id").to_owned();

    // Their capabilities, if any, are over their own namespaces only.
    let below = descendants(pid);
    assert!(below.len() >= 4, "the desktop's processes run under the host: {below:?}");
    for process in &below {
        if let Some((uid, _, _)) = identity(*process) {
            assert_ne!(uid, 0, "process {process} of the host runs as root");
        }
    }
    let killed = client.delete(format!("{api}/sandboxes/{id}")).header("X-API-Key", &key).send().await.expect("a kill");
    assert_eq!(killed.status().as_u16(), 204);
    let stopped = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status();
    assert!(stopped.is_ok_and(|s| s.success()), "the host is asked to stop");
    let ended = tokio::time::timeout(START_WITHIN, host.wait()).await.expect("the host stops on SIGTERM");
    assert!(ended.is_ok_and(|s| s.success()), "and exits cleanly");
}
