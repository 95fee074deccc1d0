//! Tenant limits at their edges, against a real redis-server and in-memory
//! sandboxes: a task naming its tenant's kept-alive sandbox runs at once
//! even when that sandbox holds the tenant's only `max_sandboxes` slot (the
//! kept slot is its slot, counted once); a kept sandbox found gone gives its
//! slot back before its deadline; and after a restart with a changed config
//! file, a `max_tokens_per_day` raised or taken out releases a tenant held
//! back for the day, and a `max_sandboxes` taken out is no longer in force.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use flotilla_queue::queue::Queue;
use flotilla_tests::desktop::eventually;
use flotilla_tests::fakes::{openai, Reply, ScriptedServer};
use flotilla_tests::in_process::InProcessWorker;
use flotilla_tests::{config_file, test_config, unique_prefix, RedisServer};
use flotilla_types::task::{TaskSpec, TaskStatus};
use flotilla_types::{TaskId, TenantId};
use flotilla_worker::sandbox::{MemoryProvider, PoolConfig, SandboxId, SandboxPool, SandboxProvider};
use flotilla_worker::tools::Tools;
use flotilla_worker::Registry;
use serde_json::{json, Value};

fn acme() -> TenantId {
    TenantId::parse("acme").expect("tenant")
}

/// One worker process's worth of fleet: a worker in this process on
/// `provider`'s sandboxes, reading its settings from `file` at start.
struct Fleet {
    queue: Queue,
    worker: InProcessWorker,
    pool: SandboxPool,
}

impl Fleet {
    async fn start(redis: &RedisServer, prefix: &str, file: &Path, provider: &Arc<MemoryProvider>, env: &[(&str, &str)]) -> Self {
        let mut extra = vec![("FLOTILLA_CONFIG", file.to_str().expect("utf-8 path")), ("FLOTILLA_HEARTBEAT_MS", "200")];
        extra.extend_from_slice(env);
        let config = test_config(redis, prefix, &extra);
        let provider: Arc<dyn SandboxProvider> = provider.clone();
        let pool = SandboxPool::new(provider, PoolConfig { warm: 0, max_live: 4, ..PoolConfig::default() });
        let tools = Tools {
            sandboxes: Some(pool.clone()),
            blobs: None,
            uploads: Default::default(),
            gateway: None,
            live: None,
            pricing: Default::default(),
            profile_key: None,
            park_waiting_after: std::time::Duration::from_secs(60),
            templates: Default::default(),
        };
        let worker = InProcessWorker::start_with_tools(config.clone(), Registry::for_config(&config), tools);
        let queue = Queue::connect(&config).await.expect("queue connects");
        Self { queue, worker, pool }
    }

    /// Stops the worker, as a process restart does.
    async fn stop(self) {
        self.worker.stop().await;
        self.pool.shutdown().await;
    }

    async fn submit(&self, spec: Value) -> TaskId {
        let spec = TaskSpec::from_json(spec.to_string().as_bytes()).expect("valid spec");
        self.queue.submitter().submit(&acme(), spec).await.expect("submit").id
    }

    async fn status(&self, id: &TaskId) -> TaskStatus {
        self.queue.reader().get(&acme(), id).await.expect("get").expect("task").status
    }

    async fn sandbox_of(&self, id: &TaskId) -> String {
        let record = self.queue.reader().get(&acme(), id).await.expect("get").expect("task");
        let sandbox = record.sandbox.expect("the task's sandbox");
        sandbox["id"].as_str().expect("sandbox id").to_owned()
    }

    /// A field of the tenant's scheduler hash (`sandboxed`, `maxsb`, …).
    async fn tenant_field(&self, field: &str) -> Option<i64> {
        let mut conn = self.queue.redis().shared();
        redis::AsyncCommands::hget(&mut conn, self.queue.keys().tenant_state(&acme()), field).await.expect("hget")
    }

    async fn sandboxed(&self) -> i64 {
        self.tenant_field("sandboxed").await.unwrap_or(0)
    }
}

/// A scripted task on a desktop: a move, then a wait of `wait_ms`.
fn on_screen(wait_ms: u64, sandbox: Value) -> Value {
    json!({"prompt": "hold a desktop", "pipeline": "scripted", "sandbox": sandbox, "retry": {"max_attempts": 1},
        "actions": [{"type": "move", "x": 5, "y": 5}, {"type": "wait", "ms": wait_ms}]})
}

/// With `max_sandboxes = 1` and the tenant's one slot held by its kept
/// sandbox (deadline 40 s away), a task naming that sandbox starts at once
/// and runs in it, while another sandbox task of the tenant waits: never
/// more than one sandbox held nor counted (sampled at 50 Hz), and the
/// sandbox is counted once, as kept, after the task leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_naming_its_kept_sandbox_starts_at_once_under_max_sandboxes_one() {
    let redis = RedisServer::start();
    let file = config_file("[tenants.acme]\nmax_sandboxes = 1\n");
    let provider = Arc::new(MemoryProvider::new());
    let fleet = Fleet::start(&redis, &unique_prefix(), &file, &provider, &[("FLOTILLA_WORKER_CONCURRENCY", "3")]).await;

    let keeper = fleet.submit(on_screen(1, json!({"keep_alive": true, "timeout_s": 40}))).await;
    eventually("the keeping task ends", Duration::from_secs(20), async || fleet.status(&keeper).await.is_terminal()).await;
    assert_eq!(fleet.status(&keeper).await, TaskStatus::Succeeded);
    let kept_id = fleet.sandbox_of(&keeper).await;
    eventually("the kept sandbox holds the slot", Duration::from_secs(5), async || fleet.sandboxed().await == 1).await;

    let other = fleet.submit(on_screen(1, json!({}))).await;
    let follow_up = fleet.submit(on_screen(1_500, json!({"id": kept_id, "timeout_s": 40}))).await;
    let (mut most_counted, mut most_live) = (0, 0);
    let began = std::time::Instant::now();
    while !fleet.status(&follow_up).await.is_terminal() {
        assert!(began.elapsed() < Duration::from_secs(15), "the task naming the kept sandbox never ran before its deadline");
        most_counted = most_counted.max(fleet.sandboxed().await);
        most_live = most_live.max(provider.live());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(fleet.status(&follow_up).await, TaskStatus::Succeeded);
    assert_eq!(fleet.sandbox_of(&follow_up).await, kept_id, "it ran in the kept sandbox");
    assert_eq!((most_counted, most_live), (1, 1), "one sandbox, counted once, while the task ran in it");
    assert_eq!(fleet.status(&other).await, TaskStatus::Queued, "the kept sandbox still holds the only slot");
    eventually("the sandbox is kept again, counted once", Duration::from_secs(5), async || fleet.sandboxed().await == 1).await;
    assert_eq!(fleet.status(&other).await, TaskStatus::Queued);
    fleet.stop().await;
}

/// A kept sandbox (deadline 60 s away) killed from outside: its slot comes
/// back within seconds, and the task waiting for the tenant's only slot
/// runs, long before the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_sandbox_found_gone_gives_its_slot_back_before_its_deadline() {
    let redis = RedisServer::start();
    let file = config_file("[tenants.acme]\nmax_sandboxes = 1\n");
    let provider = Arc::new(MemoryProvider::new());
    let fleet = Fleet::start(&redis, &unique_prefix(), &file, &provider, &[("FLOTILLA_WORKER_CONCURRENCY", "2")]).await;

    let keeper = fleet.submit(on_screen(1, json!({"keep_alive": true, "timeout_s": 60}))).await;
    eventually("the keeping task ends", Duration::from_secs(20), async || fleet.status(&keeper).await.is_terminal()).await;
    let kept_id = fleet.sandbox_of(&keeper).await;
    eventually("the kept sandbox holds the slot", Duration::from_secs(5), async || fleet.sandboxed().await == 1).await;
    let waiting = fleet.submit(on_screen(1, json!({}))).await;
    // The sleep is what is tested: for half a second, nothing runs it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(fleet.status(&waiting).await, TaskStatus::Queued, "the kept sandbox holds the only slot");

    provider.kill(&SandboxId::parse(&kept_id).expect("sandbox id")).await.expect("killed from outside");
    eventually("the waiting task runs once the kept sandbox is found gone", Duration::from_secs(15), async || {
        fleet.status(&waiting).await == TaskStatus::Succeeded
    })
    .await;
    eventually("no slot is held", Duration::from_secs(5), async || fleet.sandboxed().await == 0).await;
    fleet.stop().await;
}

/// A tenant held back for the day (it spent its `max_tokens_per_day`
/// against the protocol-faithful OpenAI server; its second task waits
/// `queued`) runs again once the processes restart with the limit raised
/// above what it spent, or taken out of the file, on the same day.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_hold_follows_the_limit_a_restart_raises_or_takes_out() {
    for after in ["[tenants.acme]\nmax_tokens_per_day = 100000\n", "[tenants.acme]\n", ""] {
        let server = ScriptedServer::start().await;
        // 1 050 tokens a turn: the first task's two turns cross 1 500.
        server.push(openai::reply("resp_1", vec![openai::computer_call("call_1", openai::click(10, 10, "left"))]));
        server.push(openai::reply("resp_2", vec![openai::message("done")]));
        let redis = RedisServer::start();
        let prefix = unique_prefix();
        let file = config_file("[tenants.acme]\nmax_tokens_per_day = 1500\n");
        let base_url = format!("{}/v1", server.url());
        let env = [
            ("OPENAI_BASE_URL", base_url.as_str()),
            ("OPENAI_API_KEY", "sk-test-openai-secret"),
            ("FLOTILLA_WORKER_CONCURRENCY", "1"),
        ];
        let provider = Arc::new(MemoryProvider::new());
        let fleet = Fleet::start(&redis, &prefix, &file, &provider, &env).await;
        let model_task = json!({"prompt": "click then stop", "pipeline": "openai-cua", "retry": {"max_attempts": 1}});
        let first = fleet.submit(model_task.clone()).await;
        let second = fleet.submit(model_task).await;
        eventually("the first task ends", Duration::from_secs(30), async || fleet.status(&first).await.is_terminal()).await;
        assert_eq!(fleet.status(&first).await, TaskStatus::Succeeded);
        eventually("the tenant is held back", Duration::from_secs(10), async || fleet.tenant_field("paused").await.is_some())
            .await;
        // The sleep is what is tested: held back, the second task does not
        // run in the next 700 ms.
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(fleet.status(&second).await, TaskStatus::Queued, "held back for the day");
        fleet.stop().await;

        std::fs::write(&file, after).expect("rewrite config");
        server.push(Reply::json(openai::response("resp_3", vec![openai::message("done")], 100, 10)));
        let fleet = Fleet::start(&redis, &prefix, &file, &provider, &env).await;
        let clock_day = flotilla_types::clock::utc_day(fleet.queue.now_ms());
        eventually("the held task runs on the same day", Duration::from_secs(30), async || {
            fleet.status(&second).await.is_terminal()
        })
        .await;
        assert_eq!(fleet.status(&second).await, TaskStatus::Succeeded, "config after: {after:?}");
        assert_eq!(flotilla_types::clock::utc_day(fleet.queue.now_ms()), clock_day);
        assert_eq!(fleet.tenant_field("paused").await, None);
        fleet.stop().await;
    }
}

/// A tenant held back for the day by its `max_cost_usd_per_day` (gpt-6-astra
/// at the shipped prices: 12 500 micro-dollars a turn, so the first task's
/// second turn crosses $0.02) stays held when the processes restart with
/// the same limit, and runs again once a restart takes the limit out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_day_hold_for_cost_survives_a_restart_and_follows_the_limit_taken_out() {
    let limit = "[tenants.acme]\nmax_cost_usd_per_day = 0.02\n";
    let server = ScriptedServer::start().await;
    server.push(openai::reply("resp_1", vec![openai::computer_call("call_1", openai::click(10, 10, "left"))]));
    server.push(openai::reply("resp_2", vec![openai::message("done")]));
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let file = config_file(limit);
    let base_url = format!("{}/v1", server.url());
    let env = [
        ("OPENAI_BASE_URL", base_url.as_str()),
        ("OPENAI_API_KEY", "sk-test-openai-secret"),
        ("FLOTILLA_WORKER_CONCURRENCY", "1"),
    ];
    let provider = Arc::new(MemoryProvider::new());
    let fleet = Fleet::start(&redis, &prefix, &file, &provider, &env).await;
    let model_task = json!({"prompt": "click then stop", "pipeline": "openai-cua", "retry": {"max_attempts": 1}});
    let first = fleet.submit(model_task.clone()).await;
    let second = fleet.submit(model_task).await;
    eventually("the first task ends", Duration::from_secs(30), async || fleet.status(&first).await.is_terminal()).await;
    assert_eq!(fleet.status(&first).await, TaskStatus::Succeeded);
    eventually("the tenant is held back", Duration::from_secs(10), async || fleet.tenant_field("paused").await.is_some()).await;
    fleet.stop().await;

    let fleet = Fleet::start(&redis, &prefix, &file, &provider, &env).await;
    // The sleep is what is tested: restarted with the same limit, the held
    // task does not run in the next 700 ms.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(fleet.status(&second).await, TaskStatus::Queued, "still held for the day");
    assert!(fleet.tenant_field("paused").await.is_some());
    fleet.stop().await;

    std::fs::write(&file, "").expect("rewrite config");
    server.push(Reply::json(openai::response("resp_3", vec![openai::message("done")], 100, 10)));
    let fleet = Fleet::start(&redis, &prefix, &file, &provider, &env).await;
    eventually("the held task runs once the limit is gone", Duration::from_secs(30), async || {
        fleet.status(&second).await.is_terminal()
    })
    .await;
    assert_eq!(fleet.status(&second).await, TaskStatus::Succeeded);
    assert_eq!(fleet.tenant_field("paused").await, None);
    fleet.stop().await;
}

/// A tenant's `max_sandboxes = 1` (two sandbox tasks run one at a time)
/// is not left in force once the processes restart with it taken out of
/// the file, whether its line or the tenant's whole table goes: two sandbox
/// tasks then hold a sandbox at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_max_sandboxes_taken_out_of_the_file_is_not_left_in_force_after_a_restart() {
    for after in ["[tenants.acme]\nweight = 1\n", ""] {
        let redis = RedisServer::start();
        let prefix = unique_prefix();
        let file = config_file("[tenants.acme]\nmax_sandboxes = 1\n");
        let provider = Arc::new(MemoryProvider::new());
        let env = [("FLOTILLA_WORKER_CONCURRENCY", "2")];
        let fleet = Fleet::start(&redis, &prefix, &file, &provider, &env).await;
        let both = [fleet.submit(on_screen(800, json!({}))).await, fleet.submit(on_screen(800, json!({}))).await];
        let mut most_live = 0;
        while !(fleet.status(&both[0]).await.is_terminal() && fleet.status(&both[1]).await.is_terminal()) {
            most_live = most_live.max(provider.live());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(most_live, 1, "max_sandboxes = 1 holds before the restart");
        assert_eq!(fleet.tenant_field("maxsb").await, Some(1));
        fleet.stop().await;

        std::fs::write(&file, after).expect("rewrite config");
        let fleet = Fleet::start(&redis, &prefix, &file, &provider, &env).await;
        assert_eq!(fleet.tenant_field("maxsb").await, None, "config after: {after:?}");
        let both = [fleet.submit(on_screen(1_500, json!({}))).await, fleet.submit(on_screen(1_500, json!({}))).await];
        let mut most_live = 0;
        while !(fleet.status(&both[0]).await.is_terminal() && fleet.status(&both[1]).await.is_terminal()) {
            most_live = most_live.max(provider.live());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(most_live, 2, "no limit left after the restart: {after:?}");
        fleet.stop().await;
    }
}
