//! The settle wait of a step against a real local desktop: the display
//! reports its screen's changes without a capture, and the wait ends on
//! them.

use std::time::{Duration, Instant};

use flotilla_types::action::Action;

use crate::sandbox::local::Desktops;
use crate::sandbox::settle::{quiet_screen, SETTLE};
use crate::sandbox::{suite, LocalConfig, SandboxProvider};

/// The display reports its screen's changes without a capture: an idle
/// screen reports none, a typed key does, and a step's wait for the screen
/// to settle ends at the earliest on an idle screen and only once a burst
/// of drawing has stopped for the quiet time.
#[tokio::test]
async fn sandbox_screen_changes_are_reported_and_end_the_settle_wait() {
    let fixture = Desktops::in_fresh_root(LocalConfig::default());
    let provider = fixture.provider();
    let sandbox = suite::create(provider, (800, 600)).await;
    let id = &sandbox.id;
    let idle = suite::eventually("the new desktop to stop drawing", || async {
        let last = provider.screen_changed_at(id).expect("Xvfb reports damage");
        (last.elapsed() > Duration::from_millis(300)).then_some(last)
    })
    .await;
    let started = Instant::now();
    assert_eq!(quiet_screen(provider, id, started, SETTLE).await, Some(started + SETTLE.first), "an idle screen waits the least");
    assert_eq!(provider.screen_changed_at(id), Some(idle), "an idle screen reports no change");

    let before = provider.screenshot(id).await.expect("screenshot");
    provider.act(id, &Action::Type { text: "x".into() }).await.expect("type");
    let typed = suite::eventually("the typed key to be reported", || async {
        provider.screen_changed_at(id).filter(|last| *last > idle)
    })
    .await;
    let shot = provider.screenshot(id).await.expect("screenshot");
    assert_ne!(shot.png, before.png, "the reported change is on the screen");
    provider.act(id, &Action::Keypress { keys: vec!["backspace".into()] }).await.expect("erase");

    // About half a second of output, a line every 20 ms or so.
    suite::type_line(provider, &sandbox, "for i in $(seq 25); do echo line $i; sleep 0.02; done").await;
    let started = Instant::now();
    let quiet = quiet_screen(provider, id, started, SETTLE).await.expect("the display still reports");
    let last = provider.screen_changed_at(id).expect("the display still reports");
    assert!(last > typed && quiet >= last + SETTLE.poll, "the wait ends once the drawing has stopped");
    assert!(quiet - started >= Duration::from_millis(300), "the wait outlasts the burst: {:?}", quiet - started);
    assert!(quiet <= started + SETTLE.max);
    provider.kill(id).await.expect("kill");
}
