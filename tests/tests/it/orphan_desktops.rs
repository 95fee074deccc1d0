//! No orphan desktops: a `flotilla-worker` killed with SIGKILL while it
//! holds local desktops (warm and busy) takes every process of them with it
//! within 5 s, counted by the worker's own record of their pids (and the
//! marker each carries) and checked in `/proc`; a worker started after it on
//! the same host reports no leftover process.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use flotilla_tests::desktop::eventually;
use flotilla_tests::fleet::{binary, test_env, WorkerProcess};
use flotilla_tests::tasks::{events, queue, tenant};
use flotilla_tests::{test_config, unique_prefix, RedisServer};
use flotilla_worker::sandbox::LocalProvider;
use serde_json::{json, Value};

/// Processes a jailed desktop starts directly: Xvfb, the namespace holder,
/// slirp4netns, openbox and the terminal.
const PROCESSES_PER_DESKTOP: usize = 5;

/// A worker whose standard error goes to `log`, with `tmp` as its `TMPDIR`
/// (so its desktops live in a directory of this test's own).
fn spawn_worker(env: &[(String, String)], id: &str, tmp: &Path, log: &Path) -> WorkerProcess {
    let log = std::fs::File::create(log).expect("worker log");
    let child = Command::new(binary("flotilla-worker"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn,flotilla_worker::sandbox=info,flotilla_desktop=info")
        .env("NO_COLOR", "1")
        .env("TMPDIR", tmp)
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("FLOTILLA_WORKER_ID", id)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn flotilla-worker (built by `cargo build --bins`)");
    WorkerProcess { child, id: id.to_owned() }
}

/// The desktop records under the worker's sandbox root.
fn records(root: &Path) -> Vec<Value> {
    let Ok(entries) = std::fs::read_dir(root) else { return Vec::new() };
    entries
        .filter_map(|entry| std::fs::read(entry.ok()?.path().join("record.json")).ok())
        .filter_map(|bytes| serde_json::from_slice(&bytes).ok())
        .collect()
}

/// `(pid, start time)` of every process the records name.
fn recorded_processes(records: &[Value]) -> Vec<(u32, u64)> {
    records
        .iter()
        .flat_map(|r| r["processes"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| Some((u32::try_from(p["pid"].as_u64()?).ok()?, p["started"].as_u64()?)))
        .collect()
}

/// State letter and start time of `pid`, from `/proc/PID/stat`.
fn proc_stat(pid: u32) -> Option<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    Some((fields.first()?.chars().next()?, fields.get(19)?.parse().ok()?))
}

/// Whether the very process `(pid, started)` still runs (a zombie does not).
fn running(&(pid, started): &(u32, u64)) -> bool {
    proc_stat(pid).is_some_and(|(state, start)| start == started && !matches!(state, 'Z' | 'X' | 'x'))
}

/// Running processes whose environment carries one of the desktops' markers.
fn marked_processes(markers: &HashSet<String>) -> Vec<u32> {
    let wanted: HashSet<Vec<u8>> = markers.iter().map(|m| format!("FLOTILLA_SANDBOX={m}").into_bytes()).collect();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| proc_stat(pid).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X' | 'x')))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| env.split(|b| *b == 0).any(|var| wanted.contains(var)))
        })
        .collect()
}

/// The log's text once a line containing `needle` is in it.
async fn wait_for_line(log: &Path, needle: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains(needle)) {
            return line.to_owned();
        }
        assert!(Instant::now() < deadline, "no {needle:?} in the worker's log:\n{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Finding "No orphan desktops": SIGKILL a worker holding 3 local desktops
/// (two busy with tasks, one warm): within 5 s no process of theirs is
/// left, and a restarted worker reports no leftover process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_desktops_die_with_a_sigkilled_worker_and_a_restarted_worker_finds_none_left() {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let tmp: PathBuf = std::env::temp_dir().join(format!("flotilla-orphans-{prefix}"));
    std::fs::create_dir_all(&tmp).expect("tmp dir");
    let root = tmp.join("flotilla-sandboxes");
    let extra = [
        ("FLOTILLA_SANDBOX_PROVIDER", "local"),
        ("FLOTILLA_SANDBOX_WARM", "1"),
        ("FLOTILLA_SANDBOX_MAX", "3"),
        ("FLOTILLA_WORKER_CONCURRENCY", "2"),
        ("FLOTILLA_HEARTBEAT_MS", "200"),
    ];
    let env = test_env(&redis, &prefix, &extra);
    let q = queue(&test_config(&redis, &prefix, &extra)).await;
    let mut doomed = spawn_worker(&env, "doomed", &tmp, &tmp.join("doomed.log"));

    let busy = json!({
        "prompt": "hold a desktop", "pipeline": "scripted",
        "actions": [{"type": "move", "x": 5, "y": 5}, {"type": "wait", "ms": 60000}]
    });
    let mut ids = Vec::new();
    for _ in 0..2 {
        let spec = flotilla_types::task::TaskSpec::from_json(busy.to_string().as_bytes()).expect("valid spec");
        ids.push(q.submitter().submit(&tenant(), spec).await.expect("submit").id);
    }
    eventually("both tasks act on their desktops", Duration::from_secs(60), async || {
        let mut busy = 0;
        for id in &ids {
            busy += usize::from(events(&q, id).await.iter().any(|e| e.kind.name() == "action_completed"));
        }
        busy == ids.len()
    })
    .await;
    eventually("three desktops are up (two busy, one warm)", Duration::from_secs(60), async || {
        let found = records(&root);
        found.len() == 3 && found.iter().all(|r| r["processes"].as_array().is_some_and(|p| p.len() >= PROCESSES_PER_DESKTOP))
    })
    .await;
    let found = records(&root);
    let processes = recorded_processes(&found);
    let markers: HashSet<String> = found.iter().filter_map(|r| r["marker"].as_str().map(str::to_owned)).collect();
    assert_eq!(markers.len(), 3);
    assert!(processes.iter().all(running), "every recorded process runs: {processes:?}");
    let marked = marked_processes(&markers);
    assert!(marked.len() >= processes.len(), "the marker finds the desktops' processes too: {marked:?}");

    doomed.signal("KILL");
    let killed = Instant::now();
    assert!(doomed.wait_exit(5), "SIGKILL ends the worker");
    loop {
        let left: Vec<_> = processes.iter().filter(|p| running(p)).collect();
        let marked = marked_processes(&markers);
        if left.is_empty() && marked.is_empty() {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "10 s after the worker's SIGKILL, recorded processes {left:?} and marked processes {marked:?} still run"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let log = tmp.join("restarted.log");
    let restarted = spawn_worker(&env, "restarted", &tmp, &log);
    let line = wait_for_line(&log, "leftover desktop", Duration::from_secs(30)).await;
    assert!(line.contains("no leftover desktop process"), "{line}");
    assert!(line.contains("desktops=3") && line.contains("processes=0"), "{line}");
    for record in &found {
        let marker = record["marker"].as_str().expect("marker");
        assert!(!root.join(marker).exists(), "the dead worker's desktop {marker} was cleared away");
    }

    drop(restarted);
    LocalProvider::sweep(&root).await;
    let _ = std::fs::remove_dir_all(&tmp);
}
