//! The behaviour every sandbox provider must show, written once over
//! `&dyn SandboxProvider` so each provider's tests run the same checks
//! against a real backend: [`behaviour_suite!`] declares one test per check
//! for a provider, so no provider can skip one. Each check creates its own
//! sandboxes and kills them; every wait polls with a deadline. The desktop is expected to start
//! with a terminal that fills the screen (focus it by clicking the centre)
//! and to have `xdotool` for reading the pointer back.

use std::future::Future;
use std::time::{Duration, Instant};

use flotilla_types::action::{Action, MouseButton};

use super::{Sandbox, SandboxError, SandboxId, SandboxProvider, SandboxRequest};

/// How long any one effect may take to show.
const EFFECT_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(20);

/// This host's first non-loopback IPv4 address: a test's stand-in for an
/// internet host, or the address an agent in a sandbox would try to reach
/// the host at.
pub fn host_address() -> std::net::Ipv4Addr {
    let output = std::process::Command::new("ip").args(["-o", "-4", "addr", "show"]).output().expect("ip runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().skip_while(|w| *w != "inet").nth(1)?.split('/').next()?.parse().ok())
        .find(|a: &std::net::Ipv4Addr| !a.is_loopback())
        .expect("this test needs a non-loopback IPv4 address on the host")
}

/// Polls `probe` until it returns `Some`, or panics with `what` at the deadline.
pub async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + EFFECT_TIMEOUT;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(POLL).await;
    }
}

pub async fn create(provider: &dyn SandboxProvider, resolution: (u32, u32)) -> Sandbox {
    let request = SandboxRequest { resolution, ..SandboxRequest::default() };
    provider.create(&request).await.expect("sandbox starts")
}

/// Serves a page from a program inside `sandbox` on its own loopback and
/// reads it through [`SandboxProvider::open_port`], as the browser
/// pipeline reaches Chromium's DevTools; returns the page's text.
pub async fn page_through_a_port(provider: &dyn SandboxProvider, sandbox: &Sandbox) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    provider
        .run(&sandbox.id, "mkdir -p served && echo inside-the-sandbox > served/page.txt", COMMAND_TIMEOUT)
        .await
        .expect("a page");
    let server = "cd served && nohup python3 -m http.server 8123 --bind 127.0.0.1 >/dev/null 2>&1 &";
    provider.run(&sandbox.id, server, COMMAND_TIMEOUT).await.expect("a server inside");
    let answer = eventually("the page through the port", || async {
        let exchange = async {
            let mut stream = provider.open_port(&sandbox.id, 8123).await.map_err(|e| e.to_string())?;
            let request = b"GET /page.txt HTTP/1.1\r\nHost: 127.0.0.1:8123\r\nConnection: close\r\n\r\n";
            stream.write_all(request).await.map_err(|e| e.to_string())?;
            let mut answer = Vec::new();
            stream.read_to_end(&mut answer).await.map_err(|e| e.to_string())?;
            Ok::<_, String>(String::from_utf8_lossy(&answer).into_owned())
        };
        let text = match tokio::time::timeout(Duration::from_secs(5), exchange).await {
            Ok(Ok(text)) => text,
            Ok(Err(e)) => e,
            Err(_) => "no answer within 5 s".to_owned(),
        };
        text.starts_with("HTTP/1.0 200").then_some(text)
    })
    .await;
    answer
}

async fn act(provider: &dyn SandboxProvider, id: &SandboxId, action: Action) {
    provider.act(id, &action).await.unwrap_or_else(|e| panic!("{action:?} fails: {e}"));
}

/// Clicks the terminal and types `line` followed by Enter.
pub async fn type_line(provider: &dyn SandboxProvider, sandbox: &Sandbox, line: &str) {
    let (w, h) = sandbox.resolution;
    act(provider, &sandbox.id, Action::Click { x: w / 2, y: h / 2, button: MouseButton::Left }).await;
    act(provider, &sandbox.id, Action::Type { text: line.to_owned() }).await;
    act(provider, &sandbox.id, Action::Keypress { keys: vec!["enter".into()] }).await;
}

/// Waits until `path` in the sandbox holds `expected`, ignoring line ends at
/// the end (a Return typed while the shell still has the terminal in raw
/// mode arrives as `\r`).
pub async fn file_becomes(provider: &dyn SandboxProvider, id: &SandboxId, path: &str, expected: &str) {
    let deadline = Instant::now() + EFFECT_TIMEOUT;
    loop {
        let seen = provider.read_file(id, path).await;
        if let Ok(bytes) = &seen {
            if String::from_utf8_lossy(bytes).trim_end_matches(['\r', '\n']) == expected {
                return;
            }
        }
        if Instant::now() >= deadline {
            let seen = seen.map(|b| String::from_utf8_lossy(&b).into_owned());
            panic!("timed out waiting for {path} to hold {expected:?}; last read: {seen:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn pointer(provider: &dyn SandboxProvider, id: &SandboxId) -> (u32, u32) {
    let output = provider.run(id, "xdotool getmouselocation --shell", COMMAND_TIMEOUT).await.expect("xdotool runs");
    assert!(output.success(), "xdotool fails: {}", output.stderr);
    let field = |name: &str| {
        output
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('=')?.parse::<u32>().ok())
            .unwrap_or_else(|| panic!("no {name} in {:?}", output.stdout))
    };
    (field("X"), field("Y"))
}

async fn screen(provider: &dyn SandboxProvider, id: &SandboxId) -> Vec<u8> {
    provider.screenshot(id).await.expect("screenshot").png.to_vec()
}

/// The screens shown once the screen has settled: a shot repeats one of the
/// few before it. More than one when something blinks (a caret).
async fn settled_screens(provider: &dyn SandboxProvider, id: &SandboxId) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + EFFECT_TIMEOUT;
    let mut recent = vec![screen(provider, id).await];
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = screen(provider, id).await;
        if recent.contains(&now) {
            return recent;
        }
        assert!(Instant::now() < deadline, "timed out waiting for the screen to settle");
        if recent.len() == 3 {
            recent.remove(0);
        }
        recent.push(now);
    }
}

/// Waits until the screen shows something none of `before` showed.
async fn screen_changes(provider: &dyn SandboxProvider, id: &SandboxId, what: &str, before: &[Vec<u8>]) {
    eventually(what, || async { (!before.contains(&screen(provider, id).await)).then_some(()) }).await;
}

/// Typing a command into the terminal runs it, with Shift and symbols intact.
pub async fn typing_runs_a_command(provider: &dyn SandboxProvider) {
    let sandbox = create(provider, (1024, 768)).await;
    type_line(provider, &sandbox, "echo hello > out.txt").await;
    file_becomes(provider, &sandbox.id, "out.txt", "hello").await;

    let symbols = r#"Hi, World! ~@#$%^&*()_+{}|:<>?[]\;',./`-="#;
    type_line(provider, &sandbox, &format!("cat > symbols.txt <<'EOF'\n{symbols}\nEOF")).await;
    file_becomes(provider, &sandbox.id, "symbols.txt", symbols).await;

    type_line(provider, &sandbox, "echo café > accent.txt").await;
    file_becomes(provider, &sandbox.id, "accent.txt", "café").await;
    provider.kill(&sandbox.id).await.expect("kill");
}

/// A screenshot is a PNG of exactly the requested size.
pub async fn screenshot_has_the_requested_size(provider: &dyn SandboxProvider, resolution: (u32, u32)) {
    let sandbox = create(provider, resolution).await;
    assert_eq!(sandbox.resolution, resolution);
    let shot = provider.screenshot(&sandbox.id).await.expect("screenshot");
    assert_eq!((shot.width, shot.height), resolution);
    let decoded = crate::image::Rgb::decode_png(&shot.png).expect("a valid PNG");
    assert_eq!((decoded.width, decoded.height), resolution);
    if let Some(rgb) = &shot.rgb {
        assert!(rgb[..] == decoded.pixels[..], "the pixels handed along are the PNG's");
    }
    provider.kill(&sandbox.id).await.expect("kill");
}

/// Move and click put the pointer where they say; double click, drag and
/// scroll work and change what is on screen.
pub async fn pointer_actions_take_effect(provider: &dyn SandboxProvider) {
    let sandbox = create(provider, (1024, 768)).await;
    let id = &sandbox.id;
    act(provider, id, Action::Move { x: 100, y: 200 }).await;
    assert_eq!(pointer(provider, id).await, (100, 200));
    act(provider, id, Action::Click { x: 300, y: 400, button: MouseButton::Left }).await;
    assert_eq!(pointer(provider, id).await, (300, 400));
    act(provider, id, Action::Click { x: 310, y: 410, button: MouseButton::Middle }).await;
    act(provider, id, Action::DoubleClick { x: 512, y: 384 }).await;
    assert_eq!(pointer(provider, id).await, (512, 384));
    act(provider, id, Action::TripleClick { x: 500, y: 380 }).await;
    assert_eq!(pointer(provider, id).await, (500, 380));

    // Fill the terminal, then scroll back: the screen changes.
    type_line(provider, &sandbox, "seq 1 400; touch seq.done").await;
    eventually("seq to finish", || async { provider.read_file(id, "seq.done").await.ok() }).await;
    let before = settled_screens(provider, id).await;
    act(provider, id, Action::Scroll { x: 512, y: 384, scroll_x: 0, scroll_y: -5 }).await;
    screen_changes(provider, id, "scrolling to change the screen", &before).await;
    act(provider, id, Action::Scroll { x: 512, y: 384, scroll_x: 2, scroll_y: 5 }).await;

    // Dragging across text selects it: the screen changes, the pointer ends at the end.
    let before = settled_screens(provider, id).await;
    act(provider, id, Action::Drag { path: vec![[20, 120], [200, 130], [600, 300]] }).await;
    assert_eq!(pointer(provider, id).await, (600, 300));
    screen_changes(provider, id, "a drag to select text", &before).await;

    // The same by hand: press, move, release.
    let before = settled_screens(provider, id).await;
    act(provider, id, Action::Move { x: 30, y: 200 }).await;
    act(provider, id, Action::MouseDown { button: MouseButton::Left }).await;
    act(provider, id, Action::Move { x: 400, y: 500 }).await;
    act(provider, id, Action::MouseUp { button: MouseButton::Left }).await;
    assert_eq!(pointer(provider, id).await, (400, 500));
    screen_changes(provider, id, "a press-move-release to select text", &before).await;
    provider.kill(&sandbox.id).await.expect("kill");
}

/// Key chords reach the focused program: named keys edit the command line,
/// ctrl+c interrupts the foreground command.
pub async fn keypress_chords_take_effect(provider: &dyn SandboxProvider) {
    let sandbox = create(provider, (1024, 768)).await;
    let id = &sandbox.id;
    // The shell records each command's exit status before every prompt, so
    // nothing needs typing right after an interrupt.
    type_line(provider, &sandbox, "PROMPT_COMMAND='echo $? > status.txt'").await;
    file_becomes(provider, id, "status.txt", "0").await;

    // A chord written with `+`, and named keys: clear the line, then edit it.
    act(provider, id, Action::Type { text: "echo wrong".into() }).await;
    act(provider, id, Action::Keypress { keys: vec!["CTRL+U".into()] }).await;
    act(provider, id, Action::Type { text: "echo ab > keys.txt".into() }).await;
    for key in ["Home", "right", "right", "right", "right", "right", "delete"] {
        act(provider, id, Action::Keypress { keys: vec![key.into()] }).await;
    }
    act(provider, id, Action::Keypress { keys: vec!["Return".into()] }).await;
    file_becomes(provider, id, "keys.txt", "b").await;

    // A key held down with key_down stays down until key_up: shift makes capitals.
    act(provider, id, Action::Type { text: "echo ".into() }).await;
    act(provider, id, Action::KeyDown { keys: vec!["shift".into()] }).await;
    act(provider, id, Action::Keypress { keys: vec!["h".into()] }).await;
    act(provider, id, Action::Keypress { keys: vec!["i".into()] }).await;
    act(provider, id, Action::KeyUp { keys: vec!["shift".into()] }).await;
    act(provider, id, Action::Type { text: "x > held.txt\n".into() }).await;
    file_becomes(provider, id, "held.txt", "HIx").await;

    // Once cat has read a line, ctrl+c ends it with status 130.
    type_line(provider, &sandbox, "cat > interrupted.txt").await;
    act(provider, id, Action::Type { text: "partial\n".into() }).await;
    file_becomes(provider, id, "interrupted.txt", "partial").await;
    act(provider, id, Action::Keypress { keys: vec!["ctrl".into(), "c".into()] }).await;
    file_becomes(provider, id, "status.txt", "130").await;

    let unknown = provider.act(id, &Action::Keypress { keys: vec!["ctrl".into(), "hyperdrive".into()] }).await;
    assert!(matches!(unknown, Err(SandboxError::InvalidAction(_))), "{unknown:?}");
    let outside = provider.act(id, &Action::Click { x: 5000, y: 1, button: MouseButton::Left }).await;
    assert!(matches!(outside, Err(SandboxError::InvalidAction(_))), "{outside:?}");
    provider.kill(id).await.expect("kill");
}

/// Files written are what commands read, and the other way round; commands
/// report their exit code and output; slow commands time out.
pub async fn files_and_commands_round_trip(provider: &dyn SandboxProvider) {
    let sandbox = create(provider, (800, 600)).await;
    let id = &sandbox.id;
    provider.write_file(id, "notes/today.txt", b"line one\nline two\n").await.expect("write");
    let output = provider.run(id, "cat notes/today.txt", COMMAND_TIMEOUT).await.expect("run");
    assert_eq!((output.exit_code, output.stdout.as_str()), (0, "line one\nline two\n"));

    let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    provider.write_file(id, "/tmp/data.bin", &binary).await.expect("write binary");
    assert_eq!(provider.read_file(id, "/tmp/data.bin").await.expect("read binary"), binary);

    provider.run(id, "printf made > made.txt", COMMAND_TIMEOUT).await.expect("run");
    assert_eq!(provider.read_file(id, "made.txt").await.expect("read"), b"made");

    let missing = provider.read_file(id, "no/such/file").await;
    assert!(matches!(missing, Err(SandboxError::File { .. })), "{missing:?}");

    let output = provider.run(id, "echo out; echo err >&2; exit 7", COMMAND_TIMEOUT).await.expect("run");
    assert_eq!((output.exit_code, output.stdout.as_str(), output.stderr.as_str()), (7, "out\n", "err\n"));

    let started = Instant::now();
    let slow = provider.run(id, "sleep 30", Duration::from_millis(300)).await;
    assert!(matches!(slow, Err(SandboxError::Timeout(_))), "{slow:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "long before the 30 s command ended: {:?}", started.elapsed());
    provider.kill(id).await.expect("kill");
}

/// A sandbox past its deadline reports `Expired` on every call.
pub async fn expired_sandboxes_report_expired(provider: &dyn SandboxProvider) -> SandboxId {
    let request = SandboxRequest { timeout: Duration::from_secs(1), ..SandboxRequest::default() };
    let sandbox = provider.create(&request).await.expect("sandbox starts");
    let id = sandbox.id.clone();
    eventually("the sandbox to expire", || async {
        matches!(provider.status(&id).await, Err(SandboxError::Expired(_))).then_some(())
    })
    .await;
    assert!(matches!(provider.screenshot(&id).await, Err(SandboxError::Expired(_))));
    assert!(matches!(provider.run(&id, "true", COMMAND_TIMEOUT).await, Err(SandboxError::Expired(_))));
    assert!(matches!(provider.connect(&id).await, Err(SandboxError::Expired(_))));
    id
}

/// Extending moves the deadline later, never earlier; status and connect see it.
pub async fn extend_moves_the_deadline(provider: &dyn SandboxProvider) {
    let request = SandboxRequest { timeout: Duration::from_secs(30), ..SandboxRequest::default() };
    let sandbox = provider.create(&request).await.expect("sandbox starts");
    let id = &sandbox.id;
    let status = provider.status(id).await.expect("status");
    assert!(status.alive);
    assert_eq!(status.expires_at, sandbox.expires_at);
    let later = provider.extend(id, Duration::from_secs(600)).await.expect("extend");
    assert!(later > sandbox.expires_at + Duration::from_secs(500), "{later} vs {}", sandbox.expires_at);
    let unchanged = provider.extend(id, Duration::from_secs(1)).await.expect("extend");
    assert_eq!(unchanged, later);
    assert_eq!(provider.connect(id).await.expect("connect").expires_at, later);
    assert_eq!(provider.status(id).await.expect("status").expires_at, later);
    provider.kill(id).await.expect("kill");
}

/// Ids nobody created are not found; a killed sandbox is gone.
pub async fn unknown_and_killed_ids_are_not_found(provider: &dyn SandboxProvider) {
    let nobody = SandboxId::parse("never-created").expect("valid id");
    assert!(matches!(provider.status(&nobody).await, Err(SandboxError::NotFound(_))));
    assert!(matches!(provider.kill(&nobody).await, Err(SandboxError::NotFound(_))));
    let sandbox = create(provider, (800, 600)).await;
    provider.kill(&sandbox.id).await.expect("kill");
    assert!(matches!(provider.status(&sandbox.id).await, Err(SandboxError::NotFound(_))));
    assert!(matches!(provider.screenshot(&sandbox.id).await, Err(SandboxError::NotFound(_))));
}

/// Two sandboxes run at once without seeing each other's files or input.
pub async fn sandboxes_are_independent(provider: &dyn SandboxProvider) -> (Sandbox, Sandbox) {
    let (a, b) = tokio::join!(create(provider, (800, 600)), create(provider, (1024, 768)));
    assert_ne!(a.id, b.id);
    type_line(provider, &a, "echo a > who.txt").await;
    type_line(provider, &b, "echo b > who.txt").await;
    file_becomes(provider, &a.id, "who.txt", "a").await;
    file_becomes(provider, &b.id, "who.txt", "b").await;
    provider.write_file(&a.id, "mine.txt", b"a").await.expect("write");
    assert!(provider.read_file(&b.id, "mine.txt").await.is_err(), "b sees a's home");
    assert_eq!(provider.screenshot(&a.id).await.expect("shot a").width, 800);
    assert_eq!(provider.screenshot(&b.id).await.expect("shot b").width, 1024);
    (a, b)
}

/// Declares the suite's tests in the calling module, one per check, each on
/// a fresh provider: `behaviour_suite!(setup, |fixture| provider)`, where
/// `setup` (which may `.await`) makes what the test holds while it runs and
/// `provider` borrows the provider from it.
#[macro_export]
macro_rules! behaviour_suite {
    ($setup:expr, |$fixture:ident| $provider:expr) => {
        #[tokio::test]
        async fn sandbox_suite_typing_runs_a_command() {
            let $fixture = $setup;
            $crate::suite::typing_runs_a_command($provider).await;
        }

        #[tokio::test]
        async fn sandbox_suite_screenshots_have_the_requested_size() {
            let $fixture = $setup;
            $crate::suite::screenshot_has_the_requested_size($provider, (1024, 768)).await;
            $crate::suite::screenshot_has_the_requested_size($provider, (800, 600)).await;
        }

        #[tokio::test]
        async fn sandbox_suite_pointer_actions_take_effect() {
            let $fixture = $setup;
            $crate::suite::pointer_actions_take_effect($provider).await;
        }

        #[tokio::test]
        async fn sandbox_suite_keypress_chords_take_effect() {
            let $fixture = $setup;
            $crate::suite::keypress_chords_take_effect($provider).await;
        }

        #[tokio::test]
        async fn sandbox_suite_files_and_commands_round_trip() {
            let $fixture = $setup;
            $crate::suite::files_and_commands_round_trip($provider).await;
        }

        #[tokio::test]
        async fn sandbox_suite_expired_sandboxes_report_expired() {
            let $fixture = $setup;
            $crate::suite::expired_sandboxes_report_expired($provider).await;
        }

        #[tokio::test]
        async fn sandbox_suite_extend_moves_the_deadline() {
            let $fixture = $setup;
            $crate::suite::extend_moves_the_deadline($provider).await;
        }

        #[tokio::test]
        async fn sandbox_suite_unknown_and_killed_ids_are_not_found() {
            let $fixture = $setup;
            $crate::suite::unknown_and_killed_ids_are_not_found($provider).await;
        }

        #[tokio::test]
        async fn sandbox_suite_sandboxes_are_independent() {
            let $fixture = $setup;
            let (a, b) = $crate::suite::sandboxes_are_independent($provider).await;
            $crate::SandboxProvider::kill($provider, &a.id).await.expect("kill a");
            $crate::SandboxProvider::kill($provider, &b.id).await.expect("kill b");
        }
    };
}

pub use crate::behaviour_suite;
