//! Saved browser profiles on real desktops: a task logs into a site the
//! test serves (reached through the sandboxes' egress exception) and its
//! profile is saved; a second task naming the profile is logged in without
//! logging in (its browser sends the cookie); another tenant naming it gets
//! what a name nobody saved gets, through tasks and the API alike; the
//! stored object is sealed (no plaintext, and it opens with the
//! configured key only).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::routing::get;
use axum::Router;
use flotilla_blobstore::ProfileError;
use flotilla_config::{ProfileKey, TemplatesConfig};
use flotilla_tests::desktop::{eventually, DesktopFleet, DesktopOptions};
use flotilla_tests::s3_server::S3Server;
use flotilla_tests::tasks::{events, record, tenant};
use flotilla_tests::{api_key, globex_key, spawn_api_with_blobs, unique_prefix, ApiClient};
use flotilla_types::ids::TenantId;
use flotilla_types::task::TaskStatus;
use flotilla_worker::sandbox::{LocalConfig, LocalProvider};
use serde_json::{json, Value};

const PROFILE_KEY: &str = "6b1d0e9f3a2c4b5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5";

/// A page served, and the `Cookie` header it came with.
type Visit = (String, Option<String>);

/// The site: `/login` sets a session cookie and a local-storage item,
/// `/whoami` records the cookie it was sent, `/seen/{path}` answers 200
/// once that page was served (what a task's set-up waits on).
#[derive(Clone, Default)]
struct Site {
    secret: String,
    /// Each page served, with the `Cookie` header it came with.
    visits: Arc<Mutex<Vec<Visit>>>,
}

impl Site {
    async fn serve(self) -> SocketAddr {
        let app = Router::new()
            .route("/login", get(login))
            .route("/whoami", get(whoami))
            .route("/seen/{page}", get(seen))
            .with_state(self);
        let listener = tokio::net::TcpListener::bind(SocketAddr::from((host_address(), 0))).await.expect("bind the site");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await.ok() });
        addr
    }

    fn visit(&self, page: &str, headers: &HeaderMap) {
        let cookie = headers.get(header::COOKIE).and_then(|v| v.to_str().ok()).map(str::to_owned);
        self.visits.lock().expect("visits").push((page.to_owned(), cookie));
    }

    /// The cookies sent with each visit of `page`.
    fn cookies_of(&self, page: &str) -> Vec<Option<String>> {
        self.visits.lock().expect("visits").iter().filter(|(p, _)| p == page).map(|(_, c)| c.clone()).collect()
    }

    fn clear(&self) {
        self.visits.lock().expect("visits").clear();
    }
}

async fn login(State(site): State<Site>, headers: HeaderMap) -> ([(header::HeaderName, String); 2], &'static str) {
    site.visit("login", &headers);
    let cookie = format!("session={}; Max-Age=86400; Path=/; HttpOnly", site.secret);
    ([(header::SET_COOKIE, cookie), (header::CONTENT_TYPE, "text/html".into())], "<h1>logged in</h1>")
}

async fn whoami(State(site): State<Site>, headers: HeaderMap) -> ([(header::HeaderName, String); 1], &'static str) {
    site.visit("whoami", &headers);
    ([(header::CONTENT_TYPE, "text/html".into())], "<h1>who am i</h1>")
}

async fn seen(State(site): State<Site>, axum::extract::Path(page): axum::extract::Path<String>) -> axum::http::StatusCode {
    if site.cookies_of(&page).is_empty() {
        axum::http::StatusCode::NOT_FOUND
    } else {
        axum::http::StatusCode::OK
    }
}

/// One of this host's own addresses: blocked to sandboxes but for the
/// egress exception the test names, the stand-in for the internet.
fn host_address() -> Ipv4Addr {
    let output = std::process::Command::new("ip").args(["-o", "-4", "addr", "show"]).output().expect("ip runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().skip_while(|w| *w != "inet").nth(1)?.split('/').next()?.parse().ok())
        .find(|a: &Ipv4Addr| !a.is_loopback())
        .expect("a non-loopback IPv4 address")
}

/// A scripted task with profile `profile` whose set-up opens Chromium (as
/// the `browser` template starts it) on `url` and waits until the site
/// served `page`.
fn browsing_task(profile: &str, site: SocketAddr, page: &str) -> Value {
    let templates = TemplatesConfig::default();
    let chromium = templates.get("browser").and_then(|t| t.app("chromium")).expect("the browser template's Chromium");
    let url = format!("http://{site}/{page}");
    let launch = format!(
        "(START_URL={url} setsid sh -c '{}' >/tmp/chromium.log 2>&1 </dev/null &); \
         for i in $(seq 300); do curl -sf http://{site}/seen/{page} >/dev/null && exit 0; sleep 0.1; done; \
         tail -5 /tmp/chromium.log >&2; exit 1",
        chromium.command.replace('\'', "'\\''")
    );
    json!({
        "prompt": format!("open {page}"),
        "pipeline": "scripted",
        "sandbox": {"profile": profile},
        "setup": {"commands": [launch], "timeout_s": 60},
        "retry": {"max_attempts": 1},
        "actions": [{"type": "wait", "ms": 300}]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_profile_is_loaded_saved_and_kept_to_its_tenant() {
    let secret = format!("secret-{:016x}", rand::random::<u64>());
    let site = Site { secret: secret.clone(), ..Site::default() };
    let addr = site.clone().serve().await;
    let s3 = S3Server::start();
    let store = s3.store(&unique_prefix());
    let provider = LocalProvider::new(LocalConfig { egress_exceptions: vec![host_address()], ..LocalConfig::default() });
    let options = DesktopOptions {
        blobs: Some(store.clone()),
        env: vec![("FLOTILLA_PROFILE_KEY", PROFILE_KEY.to_owned())],
        provider: Some(Arc::new(provider)),
        ..DesktopOptions::default()
    };
    let fleet = DesktopFleet::start(options).await;
    let acme = tenant();
    let globex = TenantId::parse("globex").expect("tenant");

    // Task 1 logs in; its profile is saved when it succeeds.
    let (first, first_events) = fleet.run_to_end(browsing_task("shop", addr, "login")).await;
    assert_eq!(record(&fleet.queue, &first).await.status, TaskStatus::Succeeded, "{first_events:?}");
    let api = spawn_api_with_blobs(fleet.config.clone(), store.clone()).await;
    let acme_client = ApiClient::new(&api, api_key());
    let (status, listed) = acme_client.get("/v1/profiles").await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(
        listed["profiles"].as_array().map(|p| p.iter().map(|p| p["name"].clone()).collect::<Vec<_>>()),
        Some(vec![json!("shop")])
    );

    // The stored object is sealed: no plaintext, opens with the key only.
    let key = format!("{}shop.sealed", store.layout().tenant_profiles(&acme));
    let sealed = store.get(&key).await.expect("the profile is stored");
    assert!(!sealed.windows(secret.len()).any(|w| w == secret.as_bytes()), "the cookie value is not in the stored object");
    assert!(!sealed.starts_with(&[0x1f, 0x8b]), "the stored object is not the bare archive");
    let opened = store.get_profile(&ProfileKey::from_hex(PROFILE_KEY).expect("key"), &acme, "shop").await.expect("opens");
    let opened = opened.expect("saved");
    assert!(opened.starts_with(&[0x1f, 0x8b]), "it opens to the packed profile");
    let other_key = ProfileKey::from_hex(&"11".repeat(32)).expect("key");
    assert_eq!(store.get_profile(&other_key, &acme, "shop").await, Err(ProfileError::Unsealable));

    // Task 2 with the same profile is logged in without logging in.
    site.clear();
    let (second, second_events) = fleet.run_to_end(browsing_task("shop", addr, "whoami")).await;
    assert_eq!(record(&fleet.queue, &second).await.status, TaskStatus::Succeeded, "{second_events:?}");
    let sent = site.cookies_of("whoami");
    let expected = format!("session={secret}");
    assert!(sent.iter().any(|c| c.as_deref().is_some_and(|c| c.contains(&expected))), "the cookie was sent: {sent:?}");
    assert!(site.cookies_of("login").is_empty(), "task 2 never logged in");

    // Tenant B naming it gets what an unknown name gets: through the API…
    let globex_client = ApiClient::new(&api, globex_key());
    let (status, listed) = globex_client.get("/v1/profiles").await;
    assert_eq!((status, listed), (200, json!({"profiles": [], "next_cursor": null})));
    let (status, theirs) = globex_client.delete("/v1/profiles/shop").await;
    let (unknown_status, unknown) = globex_client.delete("/v1/profiles/never-saved").await;
    assert_eq!((status, &theirs), (404, &unknown), "as for a name nobody saved");
    assert_eq!(unknown_status, 404);
    // …and through a task: its browser starts without the cookie.
    site.clear();
    let sealed_before = store.get(&key).await.expect("stored");
    let spec = browsing_task("shop", addr, "whoami");
    let (third, third_events) = fleet.run_to_end_as(&globex, spec).await;
    let third_record = fleet.queue.reader().get(&globex, &third).await.expect("get").expect("globex's task");
    assert_eq!(third_record.status, TaskStatus::Succeeded, "{third_events:?}");
    let sent = site.cookies_of("whoami");
    assert!(!sent.is_empty() && sent.iter().all(|c| c.as_deref().is_none_or(|c| !c.contains(&secret))), "{sent:?}");
    assert_eq!(store.get(&key).await.expect("stored"), sealed_before, "tenant A's profile is untouched");

    // The profile's contents are in no event.
    for id in [&first, &second] {
        let text = serde_json::to_string(&events(&fleet.queue, id).await).expect("json");
        assert!(!text.contains(&secret), "no event carries the cookie");
    }
    // Deleting it leaves the tenant without it.
    let (status, _) = acme_client.delete("/v1/profiles/shop").await;
    assert_eq!(status, 204);
    eventually("the profile is gone", Duration::from_secs(5), async || !store.exists(&key).await.unwrap_or(true)).await;
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_kept_browser_desktop_has_its_browser_back_after_its_profile_is_saved() {
    let s3 = S3Server::start();
    let store = s3.store(&unique_prefix());
    let config = flotilla_tests::config_file("[tenants.acme]\nsandbox_templates = [\"browser\"]\n");
    let options = DesktopOptions {
        blobs: Some(store.clone()),
        env: vec![("FLOTILLA_PROFILE_KEY", PROFILE_KEY.to_owned()), ("FLOTILLA_CONFIG", config.to_string_lossy().into_owned())],
        ..DesktopOptions::default()
    };
    let fleet = DesktopFleet::start(options).await;
    let (id, history) = fleet
        .run_to_end(json!({
            "prompt": "keep the browser", "pipeline": "scripted",
            "sandbox": {"template": "browser", "profile": "kept", "keep_alive": true, "timeout_s": 120},
            "retry": {"max_attempts": 1},
            "actions": [{"type": "move", "x": 10, "y": 10}]
        }))
        .await;
    assert_eq!(record(&fleet.queue, &id).await.status, TaskStatus::Succeeded, "{history:?}");
    let acme = tenant();
    let saved = store.get_profile(&ProfileKey::from_hex(PROFILE_KEY).expect("key"), &acme, "kept").await.expect("read");
    assert!(saved.is_some(), "the profile is saved: {history:#?}");
    let sandbox = flotilla_tests::desktop::sandbox_ids(&history).pop().expect("sandbox_ready");
    let sandbox = flotilla_worker::sandbox::SandboxId::parse(&sandbox).expect("an id");
    let provider = fleet.pool.provider().clone();
    let window = "export DISPLAY=${DISPLAY:-:0}; xdotool search --onlyvisible --class chromium";
    eventually("the kept desktop's Chromium window is back", Duration::from_secs(30), async || {
        provider.run(&sandbox, window, Duration::from_secs(5)).await.is_ok_and(|out| out.success())
    })
    .await;
    provider.kill(&sandbox).await.ok();
    fleet.stop().await;
}
