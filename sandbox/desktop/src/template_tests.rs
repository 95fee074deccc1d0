//! Templates on real jailed desktops: each built-in's start-up app has its
//! window when `create` returns, Chromium's DevTools answer on the
//! sandbox's own loopback, the template's files are in the home, and an
//! unknown template is refused.

use std::time::{Duration, Instant};

use super::{Desktops, Isolation, LocalConfig};
use flotilla_sandbox::{CommandOutput, SandboxError, SandboxProvider, SandboxRequest};

fn desktops() -> Desktops {
    Desktops::in_fresh_root(LocalConfig {
        isolation: Isolation::Full,
        start_timeout: Duration::from_secs(30),
        ..LocalConfig::default()
    })
}

fn request(template: &str) -> SandboxRequest {
    SandboxRequest { template: Some(template.to_owned()), resolution: (1024, 768), timeout: Duration::from_secs(120) }
}

/// The visible windows of `class`, as `xdotool` in the sandbox lists them.
/// `xdotool search` walks the whole window tree and dies on an X error when
/// any window in it (Chromium makes and drops helper windows while it
/// starts) goes away mid-walk; only such a walk is asked again.
async fn visible(provider: &dyn SandboxProvider, id: &flotilla_sandbox::SandboxId, class: &str) -> CommandOutput {
    let command = format!("xdotool search --onlyvisible --class {class}");
    let mut tries = 0;
    loop {
        let out = provider.run(id, &command, Duration::from_secs(10)).await.expect("run");
        tries += 1;
        let walk_broke = out.stdout.trim().is_empty() && out.stderr.contains("X Error");
        if !walk_broke || tries == 5 {
            return out;
        }
    }
}

#[tokio::test]
async fn a_browser_desktop_has_chromium_up_with_devtools_inside_and_its_profile_and_downloads_in_the_home() {
    let fixture = desktops();
    let provider = fixture.provider();
    let started = Instant::now();
    let sandbox = provider.create(&request("browser")).await.expect("a browser desktop");
    let took = started.elapsed();
    let id = &sandbox.id;
    let chromium = visible(provider, id, "chromium").await;
    assert!(!chromium.stdout.trim().is_empty(), "Chromium's window is mapped once create returns: {chromium:?}");
    // DevTools listens on the sandbox's own loopback (its own network namespace).
    let devtools = "curl -sS --max-time 5 http://127.0.0.1:9222/json/version";
    let answer = provider.run(id, devtools, Duration::from_secs(10)).await.expect("run");
    assert!(answer.stdout.contains("webSocketDebuggerUrl"), "DevTools answers inside: {answer:?}");
    let preferences = provider.read_file(id, ".config/chromium/Default/Preferences").await.expect("the profile's preferences");
    let home = provider.run(id, "printf %s \"$HOME\"", Duration::from_secs(10)).await.expect("run").stdout;
    assert!(String::from_utf8_lossy(&preferences).contains(&format!("{home}/Downloads")), "downloads go to ~/Downloads");
    let downloads = provider.run(id, "test -d \"$HOME/Downloads\" && echo yes", Duration::from_secs(10)).await.expect("run");
    assert_eq!(downloads.stdout.trim(), "yes");
    eprintln!("browser desktop up in {took:?}");
    provider.kill(id).await.expect("kill");
}

#[tokio::test]
async fn an_office_desktop_has_libreoffice_up() {
    let fixture = desktops();
    let provider = fixture.provider();
    let sandbox = provider.create(&request("office")).await.expect("an office desktop");
    let office = visible(provider, &sandbox.id, "libreoffice").await;
    assert!(!office.stdout.trim().is_empty(), "LibreOffice's window is mapped: {office:?}");
    provider.kill(&sandbox.id).await.expect("kill");
}

#[tokio::test]
async fn an_unknown_template_is_refused_with_the_known_ones() {
    let fixture = desktops();
    let error = fixture.provider().create(&request("kiosk")).await.expect_err("refused");
    let SandboxError::InvalidRequest(message) = error else { panic!("{error:?}") };
    assert!(message.contains("\"kiosk\"") && message.contains("browser"), "{message}");
}

/// The `WM_CLASS` class of the active window, as `xdotool` and `xprop`
/// in the sandbox say.
async fn active_class(provider: &dyn SandboxProvider, id: &flotilla_sandbox::SandboxId) -> String {
    let out = provider.run(id, r#"xprop -id "$(xdotool getactivewindow)" WM_CLASS"#, Duration::from_secs(10)).await.expect("run");
    // WM_CLASS(STRING) = "instance", "Class"
    out.stdout.rsplit('"').nth(1).unwrap_or_default().to_owned()
}

#[tokio::test]
async fn an_app_not_started_with_the_desktop_opens_takes_the_focus_and_opens_once() {
    let fixture = desktops();
    let provider = fixture.provider();
    let sandbox = provider.create(&request("browser")).await.expect("a browser desktop");
    let id = &sandbox.id;
    assert_eq!(active_class(provider, id).await.to_ascii_lowercase(), "chromium");
    let templates = flotilla_config::TemplatesConfig::default();
    let firefox = templates.get("browser").and_then(|t| t.app("firefox")).expect("firefox");
    let opened = provider.run(id, &firefox.open_script(30), Duration::from_secs(40)).await.expect("run");
    assert_eq!(opened.exit_code, 0, "{opened:?}");
    assert_eq!(active_class(provider, id).await.to_ascii_lowercase(), "firefox-esr");
    let chromium = templates.get("browser").and_then(|t| t.app("chromium")).expect("chromium");
    let focused = provider.run(id, &chromium.open_script(30), Duration::from_secs(40)).await.expect("run");
    assert_eq!(focused.exit_code, 0, "{focused:?}");
    assert_eq!(active_class(provider, id).await.to_ascii_lowercase(), "chromium", "an open app is focused, not started again");
    let again = provider.run(id, &firefox.open_script(30), Duration::from_secs(40)).await.expect("run");
    assert_eq!(again.stdout, opened.stdout, "the same Firefox window, not a second one");
    let browsers = provider.run(id, "pgrep -c -x firefox-esr", Duration::from_secs(10)).await.expect("run");
    assert_eq!(browsers.stdout.trim(), "1", "one Firefox");
    provider.kill(id).await.expect("kill");
}

#[tokio::test]
async fn a_stopped_browser_is_gone_and_opens_again_on_its_profile() {
    let fixture = desktops();
    let provider = fixture.provider();
    let sandbox = provider.create(&request("browser")).await.expect("a browser desktop");
    let id = &sandbox.id;
    let templates = flotilla_config::TemplatesConfig::default();
    let chromium = templates.get("browser").and_then(|t| t.app("chromium")).expect("chromium");
    let stopped = provider.run(id, &chromium.stop_script(10), Duration::from_secs(20)).await.expect("run");
    assert_eq!(stopped.exit_code, 0, "{stopped:?}");
    let left = provider.run(id, "pgrep -c -x chromium", Duration::from_secs(10)).await.expect("run");
    assert_eq!(left.stdout.trim(), "0", "no Chromium process is left");
    // What is written while it is down is what it starts on.
    provider.write_file(id, ".config/chromium/flotilla-marker", b"kept").await.expect("write into the profile");
    let opened = provider.run(id, &chromium.open_script(30), Duration::from_secs(40)).await.expect("run");
    assert_eq!(opened.exit_code, 0, "{opened:?}");
    assert_eq!(active_class(provider, id).await.to_ascii_lowercase(), "chromium");
    let marker = provider.read_file(id, ".config/chromium/flotilla-marker").await.expect("the profile kept it");
    assert_eq!(marker, b"kept");
    provider.kill(id).await.expect("kill");
}
