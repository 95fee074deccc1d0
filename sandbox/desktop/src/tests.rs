//! The local provider against real desktops: the shared behaviour suite
//! (under bubblewrap where it works, and once as plain process groups), and
//! what only a local provider can show: after kill, expiry or drop, no
//! process and no file of the sandbox is left. Each test has its own
//! provider, root directory and displays.

use std::time::{Duration, Instant};

use flotilla_types::action::Action;

use super::process::live_processes;
use super::{launch, Desktops, Isolation, LocalConfig};
use flotilla_sandbox::{suite, SandboxError, SandboxId, SandboxProvider, SandboxRequest};

/// A provider with its own root directory, removed after the test.
fn desktops(isolation: Isolation) -> Desktops {
    Desktops::in_fresh_root(LocalConfig { isolation, reap_interval: Duration::from_millis(100), ..LocalConfig::default() })
}

/// Live processes of sandbox `id`: in its group, or carrying its marker.
fn leftovers(pgid: Option<u32>, id: &SandboxId) -> Vec<String> {
    live_processes(pgid, id.as_str())
        .into_iter()
        .map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            format!("{pid}: {}", String::from_utf8_lossy(&cmdline).replace('\0', " "))
        })
        .collect()
}

suite::behaviour_suite!(desktops(Isolation::Full), |fixture| fixture.provider());

#[tokio::test]
async fn sandbox_suite_runs_on_plain_process_groups() {
    let fixture = desktops(Isolation::None);
    suite::typing_runs_a_command(fixture.provider()).await;
    suite::files_and_commands_round_trip(fixture.provider()).await;
}

#[tokio::test]
async fn expired_sandbox_is_killed() {
    let fixture = desktops(Isolation::Full);
    let id = suite::expired_sandboxes_report_expired(fixture.provider()).await;
    // The reaper may still be tearing it down when calls already say Expired.
    let dir = fixture.root().join(id.as_str());
    suite::eventually("the expired sandbox's processes and files to go", || async {
        (leftovers(None, &id).is_empty() && !dir.exists()).then_some(())
    })
    .await;
    fixture.provider().kill(&id).await.expect("killing an expired sandbox again is fine");
}

/// Kill ends the desktop, the terminal's background jobs, commands that
/// escaped into their own session, and removes the sandbox's files.
async fn kill_leaves_nothing(isolation: Isolation) {
    let fixture = desktops(isolation);
    let provider = fixture.provider();
    let sandbox = suite::create(provider, (800, 600)).await;
    let id = &sandbox.id;
    let pgid = provider.process_group(id).await.expect("group");
    let display = provider.run(id, "echo ${DISPLAY#:}", Duration::from_secs(10)).await.expect("run").stdout;
    let display: u32 = display.trim().parse().expect("a display number");
    suite::type_line(provider, &sandbox, "sleep 301 & setsid sleep 302 & touch started").await;
    suite::eventually("the background jobs to start", || async { provider.read_file(id, "started").await.ok() }).await;
    provider.run(id, "setsid sleep 303 > /dev/null 2>&1 < /dev/null &", Duration::from_secs(10)).await.expect("run");
    let before = leftovers(pgid, id);
    assert!(before.iter().any(|p| p.contains("sleep 302")), "{before:?}");
    let socket = socket_inode(display).expect("the display's socket exists while the sandbox runs");

    provider.kill(id).await.expect("kill");
    assert_eq!(leftovers(pgid, id), Vec::<String>::new());
    assert!(!fixture.root().join(id.as_str()).exists(), "the sandbox's directory remains");
    // Another sandbox may take the freed display number at once; the old
    // socket itself must be gone.
    assert_ne!(socket_inode(display), Some(socket), "the display's socket remains");
    assert!(matches!(provider.status(id).await, Err(SandboxError::NotFound(_))));
}

/// The inode of a display's X socket, if there is one.
fn socket_inode(display: u32) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(launch::x_socket(display)).ok().map(|m| m.ino())
}

#[tokio::test]
async fn kill_leaves_no_process_or_file() {
    kill_leaves_nothing(Isolation::Full).await;
}

#[tokio::test]
async fn kill_leaves_no_process_or_file_without_bubblewrap() {
    kill_leaves_nothing(Isolation::None).await;
}

#[tokio::test]
async fn two_sandboxes_run_at_once_on_different_displays() {
    let fixture = desktops(Isolation::Full);
    let provider = fixture.provider();
    let (a, b) = suite::sandboxes_are_independent(provider).await;
    let display =
        |id: SandboxId| async move { provider.run(&id, "echo $DISPLAY", Duration::from_secs(10)).await.expect("run").stdout };
    let (display_a, display_b) = (display(a.id.clone()).await, display(b.id.clone()).await);
    assert_ne!(display_a, display_b);
    if provider.isolated() {
        provider.write_file(&a.id, "/tmp/mine.txt", b"a").await.expect("write");
        assert!(provider.read_file(&b.id, "/tmp/mine.txt").await.is_err(), "b sees a's /tmp");
        let root = provider.run(&a.id, "touch /usr/escape", Duration::from_secs(10)).await.expect("run");
        assert_ne!(root.exit_code, 0, "the root file system is writable");
    }
    provider.kill(&a.id).await.expect("kill a");
    provider.kill(&b.id).await.expect("kill b");
}

#[tokio::test]
async fn dropping_the_provider_kills_its_sandboxes() {
    let mut fixture = desktops(Isolation::Full);
    let provider = fixture.provider();
    let (a, b) = tokio::join!(suite::create(provider, (800, 600)), suite::create(provider, (800, 600)));
    let groups = (provider.process_group(&a.id).await.expect("a"), provider.process_group(&b.id).await.expect("b"));
    assert!(!leftovers(groups.0, &a.id).is_empty());
    fixture.close();
    assert_eq!(leftovers(groups.0, &a.id), Vec::<String>::new());
    assert_eq!(leftovers(groups.1, &b.id), Vec::<String>::new());
    assert!(!fixture.root().join(a.id.as_str()).exists());
}

#[tokio::test]
async fn sandbox_pointer_matches_the_display() {
    let fixture = desktops(Isolation::Full);
    let provider = fixture.provider();
    let sandbox = suite::create(provider, (800, 600)).await;
    for (x, y) in [(0, 0), (799, 599), (123, 456)] {
        provider.act(&sandbox.id, &Action::Move { x, y }).await.expect("move");
        assert_eq!(provider.pointer(&sandbox.id).await.expect("pointer"), (x, y));
    }
    provider.kill(&sandbox.id).await.expect("kill");
}

/// Screenshots come through shared memory with the same pixels the socket
/// gives, and an unchanged screen is not encoded again.
#[tokio::test]
async fn sandbox_screenshots_come_through_shared_memory() {
    let fixture = desktops(Isolation::Full);
    let provider = fixture.provider();
    let sandbox = suite::create(provider, (800, 600)).await;
    let id = &sandbox.id;
    assert!(provider.shared_capture(id, false).await.expect("capture"), "Xvfb offers MIT-SHM 1.2");
    let (shared, again) = suite::eventually("the new desktop to stop drawing", || async {
        let first = provider.screenshot(id).await.expect("shared screenshot");
        let second = provider.screenshot(id).await.expect("second screenshot");
        (first.png == second.png).then_some((first, second))
    })
    .await;
    assert_eq!(shared.png.as_ptr(), again.png.as_ptr(), "an unchanged screen hands back the PNG it has");
    assert!(!provider.shared_capture(id, true).await.expect("capture"));
    let socket = provider.screenshot(id).await.expect("socket screenshot");
    assert_eq!(shared.rgb, socket.rgb, "shared memory and the socket see the same pixels");
    assert_eq!(shared.png, socket.png);
    provider.act(id, &Action::Type { text: "x".into() }).await.expect("type");
    suite::eventually("the typed key to show", || async {
        let shot = provider.screenshot(id).await.expect("screenshot");
        (shot.png != socket.png).then_some(())
    })
    .await;
    provider.kill(id).await.expect("kill");
}

#[tokio::test]
async fn bad_sandbox_requests_are_refused() {
    let fixture = desktops(Isolation::Full);
    let provider = fixture.provider();
    let bad = [
        SandboxRequest { resolution: (10, 10), ..SandboxRequest::default() },
        SandboxRequest { template: Some("windows-11".into()), ..SandboxRequest::default() },
        SandboxRequest { timeout: Duration::ZERO, ..SandboxRequest::default() },
    ];
    for request in bad {
        let result = provider.create(&request).await;
        assert!(matches!(result, Err(SandboxError::InvalidRequest(_))), "{request:?}: {result:?}");
    }
    assert!(!fixture.root().exists() || std::fs::read_dir(fixture.root()).map(|d| d.count()).unwrap_or(0) == 0);
}

/// Prints the median create and screenshot times; run with
/// `cargo test -p flotilla-worker sandbox_timings -- --ignored --nocapture`.
#[tokio::test]
#[ignore = "a measurement, not a check"]
async fn sandbox_timings() {
    let fixture = desktops(Isolation::Full);
    let provider = fixture.provider();
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let mut creates = Vec::new();
    for _ in 0..7 {
        let started = Instant::now();
        let sandbox = suite::create(provider, (1024, 768)).await;
        creates.push(started.elapsed());
        provider.kill(&sandbox.id).await.expect("kill");
    }
    let sandbox = suite::create(provider, (1024, 768)).await;
    let mut shots = Vec::new();
    let mut size = 0;
    for _ in 0..30 {
        let started = Instant::now();
        size = provider.screenshot(&sandbox.id).await.expect("shot").png.len();
        shots.push(started.elapsed());
    }
    let mut clicks = Vec::new();
    for i in 0..30 {
        let started = Instant::now();
        provider.act(&sandbox.id, &Action::Move { x: 10 + i, y: 10 }).await.expect("move");
        clicks.push(started.elapsed());
    }
    println!(
        "isolated: {}, create median {:?} (of {creates:?}), screenshot median {:?} ({size} bytes), move median {:?}",
        provider.isolated(),
        median(creates.clone()),
        median(shots),
        median(clicks)
    );
    provider.kill(&sandbox.id).await.expect("kill");
}
