//! The pool against an in-memory provider whose sandboxes take a fixed time
//! to start. Demand is written into the pool's record directly, so sizing is
//! checked without waiting for real arrivals; how the sizing serves real
//! arrival traces is what `flotilla-pool-bench` measures.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flotilla_types::action::Action;
use futures::future::BoxFuture;
use futures::FutureExt;
use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::{lock, now, PoolConfig, PooledShape, SandboxPool};
use crate::sandbox::demand::Demand;
use crate::sandbox::{
    CommandOutput, Sandbox, SandboxError, SandboxId, SandboxProvider, SandboxRequest, SandboxStatus, Screenshot,
};

/// Sandboxes that exist only as a count, each taking `start` to create.
struct Fake {
    start: Duration,
    created: AtomicUsize,
    live: AtomicUsize,
}

impl Fake {
    fn new(start: Duration) -> Arc<Self> {
        Arc::new(Self { start, created: AtomicUsize::new(0), live: AtomicUsize::new(0) })
    }
}

fn unsupported<'a, T: Send + 'a>() -> BoxFuture<'a, Result<T, SandboxError>> {
    async { Err(SandboxError::Unavailable("not in the fake".into())) }.boxed()
}

impl SandboxProvider for Fake {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn kind(&self) -> flotilla_types::task::SandboxProviderKind {
        flotilla_types::task::SandboxProviderKind::Local
    }

    fn create<'a>(&'a self, request: &'a SandboxRequest) -> BoxFuture<'a, Result<Sandbox, SandboxError>> {
        async move {
            tokio::time::sleep(self.start).await;
            let n = self.created.fetch_add(1, Ordering::SeqCst);
            self.live.fetch_add(1, Ordering::SeqCst);
            let id = SandboxId::parse(&format!("fake-{n}"))?;
            Ok(Sandbox { id, resolution: request.resolution, expires_at: OffsetDateTime::now_utc() + request.timeout })
        }
        .boxed()
    }

    fn kill<'a>(&'a self, _id: &'a SandboxId) -> BoxFuture<'a, Result<(), SandboxError>> {
        self.live.fetch_sub(1, Ordering::SeqCst);
        async { Ok(()) }.boxed()
    }

    fn connect<'a>(&'a self, _id: &'a SandboxId) -> BoxFuture<'a, Result<Sandbox, SandboxError>> {
        unsupported()
    }

    fn status<'a>(&'a self, _id: &'a SandboxId) -> BoxFuture<'a, Result<SandboxStatus, SandboxError>> {
        unsupported()
    }

    fn extend<'a>(&'a self, _id: &'a SandboxId, _by: Duration) -> BoxFuture<'a, Result<OffsetDateTime, SandboxError>> {
        unsupported()
    }

    fn run<'a>(
        &'a self,
        _id: &'a SandboxId,
        _command: &'a str,
        _timeout: Duration,
    ) -> BoxFuture<'a, Result<CommandOutput, SandboxError>> {
        unsupported()
    }

    fn read_file<'a>(&'a self, _id: &'a SandboxId, _path: &'a str) -> BoxFuture<'a, Result<Vec<u8>, SandboxError>> {
        unsupported()
    }

    fn write_file<'a>(&'a self, _id: &'a SandboxId, _path: &'a str, _bytes: &'a [u8]) -> BoxFuture<'a, Result<(), SandboxError>> {
        unsupported()
    }

    fn screenshot<'a>(&'a self, _id: &'a SandboxId) -> BoxFuture<'a, Result<Screenshot, SandboxError>> {
        unsupported()
    }

    fn act<'a>(&'a self, _id: &'a SandboxId, _action: &'a Action) -> BoxFuture<'a, Result<(), SandboxError>> {
        unsupported()
    }
}

/// How long the fake takes to start a sandbox in the sizing tests.
const START: Duration = Duration::from_millis(200);

fn pool(provider: &Arc<Fake>, warm: usize, max_live: usize) -> SandboxPool {
    let provider: Arc<dyn SandboxProvider> = provider.clone();
    SandboxPool::new(provider, PoolConfig { warm, max_live, ..PoolConfig::default() })
}

/// Waits (at most 5 s) until the pool holds `ready` ready sandboxes.
async fn settle(pool: &SandboxPool, ready: usize) {
    for _ in 0..500 {
        if pool.ready() == ready {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the pool did not settle at {ready} ready (it has {})", pool.ready());
}

/// Records `per_second` arrivals a second over the last 5 s, and starts
/// that took `start` (the fake's own start time), as if tasks had been coming.
fn recent_demand(pool: &SandboxPool, per_second: u32, start: Duration) {
    let now = now();
    let mut demand = lock(&pool.inner.shapes[0].demand);
    for i in 0..5 * per_second {
        demand.arrived(now.checked_sub(Duration::from_secs(5) * i / (5 * per_second)).unwrap_or(now));
    }
    // Enough starts that the average is `start`, as a provider this slow gives.
    for _ in 0..30 {
        demand.started(start);
    }
}

async fn take(pool: &SandboxPool) -> super::Lease {
    pool.acquire(&PoolConfig::default().default_request, &CancellationToken::new()).await.expect("a sandbox")
}

#[tokio::test]
async fn a_warm_pool_hands_out_at_once_and_refills() {
    let fake = Fake::new(Duration::from_millis(20));
    let pool = pool(&fake, 1, 4);
    settle(&pool, 1).await;
    let lease = take(&pool).await;
    // At once: the ready one is handed out, no start is waited for (how
    // long that takes is the benchmarks' to say).
    assert!(lease.warm);
    settle(&pool, 1).await;
    pool.release(lease).await;
    assert_eq!(fake.live.load(Ordering::SeqCst), 1, "the used one is killed, the new one waits");
    pool.shutdown().await;
    assert_eq!(fake.live.load(Ordering::SeqCst), 0);
}

/// A pool of one warm sandbox of at most `max_live` after `per_second`
/// arrivals a second, once it has grown to `ready`.
async fn grown(max_live: usize, per_second: u32, ready: usize) -> (Arc<Fake>, SandboxPool) {
    let fake = Fake::new(START);
    let pool = pool(&fake, 1, max_live);
    settle(&pool, 1).await;
    recent_demand(&pool, per_second, START);
    pool.refill();
    settle(&pool, ready).await;
    (fake, pool)
}

#[tokio::test]
async fn demand_faster_than_starts_keeps_more_ready_than_warm() {
    // 5 a second with 0.2 s starts: about one start under way, so 4 places
    // keep misses under 5 %.
    let (_fake, pool) = grown(16, 5, 4).await;
    let lease = take(&pool).await;
    assert!(lease.warm);
    settle(&pool, 4).await;
    pool.release(lease).await;
    pool.shutdown().await;
}

#[tokio::test]
async fn growth_stays_within_half_of_max_live() {
    // 50 a second would want about 16 places; 6 live allow 3.
    let (_fake, pool) = grown(6, 50, 3).await;
    // The sleep is what is tested: for 100 ms more, it grows no further.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(pool.ready(), 3);
    pool.shutdown().await;
}

#[tokio::test]
async fn the_extra_ones_are_killed_once_demand_is_gone() {
    let (fake, pool) = grown(16, 5, 4).await;
    *lock(&pool.inner.shapes[0].demand) = Demand::new(now());
    pool.refill();
    assert_eq!(pool.ready(), 1);
    settle_live(&fake, 1).await;
    pool.shutdown().await;
}

#[tokio::test]
async fn a_pool_of_zero_keeps_none_whatever_the_demand() {
    let fake = Fake::new(Duration::from_millis(20));
    let pool = pool(&fake, 0, 8);
    recent_demand(&pool, 10, START);
    pool.refill();
    let lease = take(&pool).await;
    assert!(!lease.warm);
    pool.release(lease).await;
    // The sleep is what is tested: in 100 ms, nothing is started.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!((pool.ready(), fake.live.load(Ordering::SeqCst)), (0, 0));
}

#[tokio::test]
async fn cold_starts_of_the_pooled_shape_teach_the_start_time() {
    let fake = Fake::new(Duration::from_millis(30));
    let pool = pool(&fake, 0, 4);
    let lease = take(&pool).await;
    pool.release(lease).await;
    let wanted = lock(&pool.inner.shapes[0].demand).wanted(now());
    assert!(wanted >= 1, "one arrival and a known start time want a place");
}

/// A request for `template` at the default shape's screen and life.
fn of_template(template: &str) -> SandboxRequest {
    SandboxRequest { template: Some(template.into()), ..PoolConfig::default().default_request }
}

#[tokio::test]
async fn each_template_given_a_count_keeps_its_own_warm_sandboxes() {
    let fake = Fake::new(Duration::from_millis(20));
    let provider: Arc<dyn SandboxProvider> = fake.clone();
    let browser = PooledShape { request: of_template("browser"), warm: 2 };
    let pool =
        SandboxPool::new(provider, PoolConfig { warm: 1, max_live: 8, more_shapes: vec![browser], ..PoolConfig::default() });
    settle(&pool, 3).await;
    assert_eq!((pool.ready_for(&PoolConfig::default().default_request), pool.ready_for(&of_template("browser"))), (1, 2));
    // The default template named is the default shape.
    let desktop = pool.acquire(&of_template("desktop"), &CancellationToken::new()).await.expect("a desktop");
    let browser = pool.acquire(&of_template("browser"), &CancellationToken::new()).await.expect("a browser");
    let office = pool.acquire(&of_template("office"), &CancellationToken::new()).await.expect("an office desktop");
    assert_eq!((desktop.warm, browser.warm, office.warm), (true, true, false), "a template without a count starts cold");
    settle(&pool, 3).await;
    for lease in [desktop, browser, office] {
        pool.release(lease).await;
    }
    settle_live(&fake, 3).await;
    pool.shutdown().await;
    assert_eq!(fake.live.load(Ordering::SeqCst), 0);
}

async fn settle_live(fake: &Fake, live: usize) {
    for _ in 0..500 {
        if fake.live.load(Ordering::SeqCst) == live {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the provider did not settle at {live} live");
}
