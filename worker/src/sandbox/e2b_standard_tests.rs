//! The E2B provider against a host that serves E2B's standard calls alone,
//! as hosted E2B does (no Flotilla desktop extension): the shared behaviour
//! suite passes through the fallback — captures with `scrot` and a file
//! read, actions with `xdotool` — and a step's settled capture is left to
//! the worker (the host settles nothing it does not serve).

use flotilla_sandboxd::TestOptions;

use super::e2b_tests::fixture_with;
use crate::sandbox::settle::SETTLE;
use crate::sandbox::{suite, SandboxProvider};

async fn standard_fixture() -> (flotilla_sandboxd::Sandboxd, crate::sandbox::E2bProvider) {
    fixture_with(TestOptions { standard_only: true, ..TestOptions::default() }).await
}

suite::behaviour_suite!(standard_fixture().await, |fixture| &fixture.1);

#[tokio::test]
async fn sandbox_e2b_a_host_without_the_extension_gets_the_standard_calls() {
    let (fake, provider) = standard_fixture().await;
    let sandbox = suite::create(&provider, (800, 600)).await;
    let starts = fake.process_starts();
    let settled = provider.settled_screenshot(&sandbox.id, SETTLE).await.expect("no error");
    assert!(settled.is_none(), "a host without the extension settles nothing");
    let shot = provider.screenshot(&sandbox.id).await.expect("a capture the standard way");
    assert_eq!((shot.width, shot.height), (800, 600));
    assert!(fake.process_starts() > starts, "the capture ran a process in the sandbox");
    assert_eq!(fake.desktop_calls(), 0, "nothing reached an extension that is not there");
    provider.kill(&sandbox.id).await.expect("kill");
}
