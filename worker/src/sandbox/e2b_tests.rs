//! The E2B provider against the local E2B stand-in, whose sandboxes are
//! real desktops: the shared behaviour suite (`behaviour_suite!`, as for
//! the local provider), then what only a hosted
//! provider meets: a refused key, rate limiting, sandboxes that vanish
//! from outside; and the first two through a pool, as tasks meet them.
//! Each test has its own fake (ports, key, desktops). The fake serves
//! Flotilla's desktop extension as a Flotilla host does; the same suite
//! over E2B's standard calls alone is `e2b_standard_tests`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_types::action::{Action, MouseButton};
use tokio_util::sync::CancellationToken;

use flotilla_sandboxd::{Sandboxd, TestOptions};

use crate::sandbox::e2b::{E2bConfig, E2bProvider, EnvdAddress};
use crate::sandbox::settle::SETTLE;
use crate::sandbox::{suite, PoolConfig, SandboxError, SandboxPool, SandboxProvider, SandboxRequest};

/// A fake and a provider pointed at it the way a worker is: with
/// `E2B_API_URL` and `E2B_SANDBOX_URL` (plain http) in its settings.
pub(super) async fn fixture() -> (Sandboxd, E2bProvider) {
    fixture_with(TestOptions::default()).await
}

/// The same, over a host started with `options`.
pub(super) async fn fixture_with(options: TestOptions) -> (Sandboxd, E2bProvider) {
    let fake = Sandboxd::start_with(options).await;
    let direct = fake.config();
    let EnvdAddress::Routed { base_url: sandbox_url } = &direct.envd else { panic!("the fake routes envd") };
    let settings = [
        ("E2B_API_KEY", direct.api_key.expose().to_owned()),
        ("E2B_API_URL", direct.api_url.clone()),
        ("E2B_SANDBOX_URL", sandbox_url.clone()),
        ("E2B_DOMAIN", direct.domain.clone()),
    ];
    let config = flotilla_config::Config::from_env(settings.iter().map(|(k, v)| (k.to_string(), v.clone()))).expect("settings");
    let key = config.e2b.api_key.clone().expect("E2B_API_KEY");
    let mut e2b = E2bConfig::for_account(key, &config.e2b);
    assert_eq!(
        (&e2b.api_url, &e2b.envd, &e2b.domain),
        (&direct.api_url, &direct.envd, &direct.domain),
        "the settings point at the fake"
    );
    e2b.start_timeout = direct.start_timeout;
    e2b.request_timeout = direct.request_timeout;
    e2b.max_retry_after = direct.max_retry_after;
    let provider = E2bProvider::new(e2b).expect("provider");
    (fake, provider)
}

suite::behaviour_suite!(fixture().await, |fixture| &fixture.1);

#[tokio::test]
async fn sandbox_e2b_an_expired_sandbox_is_gone_from_the_server() {
    let (fake, provider) = fixture().await;
    let id = suite::expired_sandboxes_report_expired(&provider).await;
    assert_eq!(fake.end_at(&id), None, "the fake still lists the expired sandbox");
    provider.kill(&id).await.expect("killing an expired sandbox again is fine");
}

#[tokio::test]
async fn sandbox_e2b_extend_reaches_the_server() {
    let (fake, provider) = fixture().await;
    let request = SandboxRequest { timeout: Duration::from_secs(30), ..SandboxRequest::default() };
    let sandbox = provider.create(&request).await.expect("sandbox starts");
    let later = provider.extend(&sandbox.id, Duration::from_secs(900)).await.expect("extend");
    assert_eq!(fake.end_at(&sandbox.id), Some(later), "the server holds the new deadline");
    provider.kill(&sandbox.id).await.expect("kill");
}

#[tokio::test]
async fn sandbox_e2b_wrong_api_key_fails_once_with_an_auth_error() {
    let fake = Sandboxd::start().await;
    let provider = E2bProvider::new(fake.config_with_key("e2b_0000")).expect("provider");
    let result = provider.create(&SandboxRequest::default()).await;
    match result {
        Err(SandboxError::Unauthorized(message)) => {
            assert!(message.contains("API key"), "{message}");
            assert!(!message.contains("e2b_0000"), "the key leaks into the error: {message}");
        }
        other => panic!("expected an auth error, got {other:?}"),
    }
    assert_eq!(fake.control_requests(), 1, "an auth failure is not retried");
}

#[tokio::test]
async fn sandbox_e2b_rate_limited_create_is_waited_out() {
    let (fake, provider) = fixture().await;
    fake.rate_limit_creates(2, Duration::from_secs(1));
    let started = Instant::now();
    let sandbox = provider.create(&SandboxRequest::default()).await.expect("created after the 429s");
    assert!(started.elapsed() >= Duration::from_secs(2), "Retry-After was not honoured: {:?}", started.elapsed());
    assert!(fake.control_requests() >= 3, "{} requests", fake.control_requests());
    provider.kill(&sandbox.id).await.expect("kill");
}

#[tokio::test]
async fn sandbox_e2b_rate_limit_beyond_the_retries_fails_unavailable() {
    let fake = Sandboxd::start().await;
    let config = E2bConfig { rate_limit_retries: 1, ..fake.config() };
    let provider = E2bProvider::new(config).expect("provider");
    fake.rate_limit_creates(5, Duration::from_millis(0));
    let result = provider.create(&SandboxRequest::default()).await;
    assert!(matches!(result, Err(SandboxError::Unavailable(_))), "{result:?}");
    assert_eq!(fake.control_requests(), 2, "one try and one retry");
}

#[tokio::test]
async fn sandbox_e2b_killed_from_outside_is_reported_gone() {
    let (fake, provider) = fixture().await;
    let sandbox = suite::create(&provider, (800, 600)).await;
    assert!(fake.kill_from_outside(&sandbox.id).await);
    let started = Instant::now();
    let status = provider.status(&sandbox.id).await;
    assert!(matches!(status, Err(SandboxError::NotFound(_))), "{status:?}");
    let click = provider.act(&sandbox.id, &Action::Click { x: 10, y: 10, button: MouseButton::Left }).await;
    assert!(matches!(click, Err(SandboxError::NotFound(_))), "{click:?}");
    let shot = provider.screenshot(&sandbox.id).await;
    assert!(matches!(shot, Err(SandboxError::NotFound(_))), "{shot:?}");
    assert!(started.elapsed() < Duration::from_secs(10), "gone took {:?} to notice", started.elapsed());
}

#[tokio::test]
async fn sandbox_e2b_act_after_outside_kill_is_gone_without_status_first() {
    let (fake, provider) = fixture().await;
    let sandbox = suite::create(&provider, (800, 600)).await;
    assert!(fake.kill_from_outside(&sandbox.id).await);
    let typed = provider.act(&sandbox.id, &Action::Type { text: "hello".into() }).await;
    assert!(matches!(typed, Err(SandboxError::NotFound(_))), "{typed:?}");
    let run = provider.run(&sandbox.id, "true", Duration::from_secs(5)).await;
    assert!(matches!(run, Err(SandboxError::NotFound(_))), "{run:?}");
}

#[tokio::test]
async fn sandbox_e2b_another_provider_connects_by_id() {
    let (fake, provider) = fixture().await;
    let sandbox = suite::create(&provider, (800, 600)).await;
    let other = E2bProvider::new(fake.config()).expect("second provider");
    let found = other.connect(&sandbox.id).await.expect("connect");
    assert_eq!((found.resolution, found.expires_at), (sandbox.resolution, sandbox.expires_at));
    let output = other.run(&sandbox.id, "echo $DISPLAY", Duration::from_secs(10)).await.expect("run");
    assert!(output.stdout.starts_with(':'), "{output:?}");
    provider.kill(&sandbox.id).await.expect("kill");
}

#[tokio::test]
async fn sandbox_e2b_bad_requests_are_refused() {
    let (fake, provider) = fixture().await;
    let unknown_template = SandboxRequest { template: Some("windows-11".into()), ..SandboxRequest::default() };
    let result = provider.create(&unknown_template).await;
    assert!(matches!(result, Err(SandboxError::InvalidRequest(_))), "{result:?}");
    for request in [
        SandboxRequest { resolution: (10, 10), ..SandboxRequest::default() },
        SandboxRequest { timeout: Duration::ZERO, ..SandboxRequest::default() },
    ] {
        let result = provider.create(&request).await;
        assert!(matches!(result, Err(SandboxError::InvalidRequest(_))), "{request:?}: {result:?}");
    }
    assert_eq!(fake.control_requests(), 1, "only the unknown template reached the API");
}

#[tokio::test]
async fn sandbox_e2b_pool_with_a_wrong_key_fails_clearly_without_a_retry_storm() {
    let fake = Sandboxd::start().await;
    let provider = E2bProvider::new(fake.config_with_key("e2b_0000")).expect("provider");
    let pool = SandboxPool::new(Arc::new(provider), PoolConfig { warm: 1, ..PoolConfig::default() });
    let result = pool.acquire(&SandboxRequest::default(), &CancellationToken::new()).await;
    assert!(matches!(&result, Err(SandboxError::Unauthorized(m)) if m.contains("API key")), "{:?}", result.err());
    // The sleep is what is tested: in 2.5 s, no more requests.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(fake.control_requests(), 2, "one refused create for the task, one for the warm pool, and no more");
    pool.shutdown().await;
}

#[tokio::test]
async fn sandbox_e2b_pool_waits_out_a_rate_limited_create() {
    let (fake, provider) = fixture().await;
    let pool = SandboxPool::new(Arc::new(provider), PoolConfig::default());
    fake.rate_limit_creates(2, Duration::from_secs(1));
    let started = Instant::now();
    let lease = pool.acquire(&SandboxRequest::default(), &CancellationToken::new()).await.expect("a sandbox after the 429s");
    assert!(started.elapsed() >= Duration::from_secs(2), "Retry-After was not honoured: {:?}", started.elapsed());
    assert!(!lease.warm);
    pool.release(lease).await;
    assert_eq!(pool.live(), 0);
}

/// Against a Flotilla host, a step's capture (settled there) and its
/// actions are one call each to the desktop extension: no process starts
/// in the sandbox for either, and what was typed lands.
#[tokio::test]
async fn sandbox_e2b_a_flotilla_host_captures_and_acts_without_a_process_per_call() {
    let (fake, provider) = fixture().await;
    let sandbox = suite::create(&provider, (800, 600)).await;
    let (starts, calls) = (fake.process_starts(), fake.desktop_calls());
    let settled = provider.settled_screenshot(&sandbox.id, SETTLE).await.expect("a capture").expect("settled by the host");
    assert_eq!((settled.shot.width, settled.shot.height), (800, 600));
    assert!(settled.waited >= SETTLE.first, "the host waited at least the settle's first time: {:?}", settled.waited);
    let before = provider.screenshot(&sandbox.id).await.expect("a capture");
    suite::type_line(&provider, &sandbox, "echo typed-fast > fast.txt").await;
    let after = suite::eventually("the typed line on the screen", || async {
        let shot = provider.screenshot(&sandbox.id).await.expect("a capture");
        (shot.png != before.png).then_some(shot)
    })
    .await;
    assert_eq!((after.width, after.height), (800, 600));
    assert_eq!(fake.process_starts(), starts, "no process started for a capture or an action");
    assert!(fake.desktop_calls() >= calls + 6, "the extension served them: {} calls", fake.desktop_calls() - calls);
    suite::file_becomes(&provider, &sandbox.id, "fast.txt", "typed-fast").await;
    let outside = provider.act(&sandbox.id, &Action::Click { x: 5_000, y: 10, button: MouseButton::Left }).await;
    assert!(matches!(outside, Err(SandboxError::InvalidAction(_))), "{outside:?}");
    provider.kill(&sandbox.id).await.expect("kill");
}

/// A port a program inside the sandbox listens on, on the sandbox's own
/// loopback, is reached through the host's edge as a stream, the way the
/// browser pipeline reaches Chromium's DevTools.
#[tokio::test]
async fn sandbox_e2b_a_port_inside_the_sandbox_is_reached_through_the_edge() {
    let (_fake, provider) = fixture().await;
    assert!(provider.opens_ports());
    let sandbox = suite::create(&provider, (800, 600)).await;
    let body = suite::page_through_a_port(&provider, &sandbox).await;
    assert!(body.ends_with("inside-the-sandbox\n"), "{body}");
    provider.kill(&sandbox.id).await.expect("kill");
}
