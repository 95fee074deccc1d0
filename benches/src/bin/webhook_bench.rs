//! `flotilla-webhook-bench`: how fast the queue drains beside a webhook
//! endpoint that never answers, against the same drain with no webhook.
//!
//! It starts its own `redis-server` on a free loopback port (or uses
//! `--redis-url`) and a loopback listener that accepts connections, reads
//! the requests and never answers. Each round drains `--tasks` no-op tasks
//! of one tenant with one in-process worker twice, in alternating order:
//! once with no webhook, once with an endpoint of that tenant subscribed to
//! every task event, pointed at the silent listener (so a message is made
//! for every task, and every attempt waits out the delivery timeout). Both
//! first drain a warm-up of 2 000 tasks; with the webhook the measured
//! drain starts only once attempts hang at the silent endpoint. The
//! measured time runs from submitting the first task to the last one
//! succeeding. It prints JSON: each drain's tasks per second, the median
//! of each mode, their ratio, the CPU time this process (worker and bench)
//! and `redis-server` spent per 1 000 drained tasks in each mode (what the
//! webhook side costs, less noisy than the rates on a shared machine), and
//! how many connections the silent endpoint held at most at once.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use flotilla_config::Config;
use flotilla_queue::queue::{NewTask, Queue};
use flotilla_queue::webhooks::{EventType, NewEndpoint, Webhooks};
use flotilla_types::ids::{TaskId, TenantId};
use flotilla_types::task::{Pipeline, TaskSpec};
use flotilla_worker::{Outcome, PipelineError, PipelineRunner, Registry, TaskRun};
use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

/// A pipeline that does nothing.
struct NoOp;

impl PipelineRunner for NoOp {
    fn run<'a>(&'a self, _: &'a TaskRun) -> BoxFuture<'a, Result<Outcome, PipelineError>> {
        async { Ok(Outcome::Succeeded(Value::Null)) }.boxed()
    }
}

struct Args {
    redis_url: Option<String>,
    tasks: usize,
    concurrency: usize,
    rounds: usize,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args { redis_url: None, tasks: 20_000, concurrency: 50, rounds: 3 };
    let mut it = support::record::args();
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--redis-url" => args.redis_url = Some(value()?),
            "--tasks" => args.tasks = value()?.parse().context("--tasks takes a number")?,
            "--concurrency" => args.concurrency = value()?.parse().context("--concurrency takes a number")?,
            "--rounds" => args.rounds = value()?.parse().context("--rounds takes a number")?,
            "--help" | "-h" => {
                println!("flotilla-webhook-bench [--redis-url URL] [--tasks 20000] [--concurrency 50] [--rounds 3]");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    if args.tasks == 0 || args.concurrency == 0 || args.rounds == 0 {
        bail!("tasks, concurrency and rounds must be positive");
    }
    Ok(args)
}

/// A listener that takes requests and never answers; counts the
/// connections it holds now and at most.
#[derive(Clone, Default)]
struct Silent {
    url: String,
    open: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
    accepted: Arc<AtomicUsize>,
}

impl Silent {
    async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let silent = Self { url: format!("http://{addr}/hook"), ..Self::default() };
        let this = silent.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                silent.accepted.fetch_add(1, Ordering::Relaxed);
                let now = silent.open.fetch_add(1, Ordering::Relaxed) + 1;
                silent.most.fetch_max(now, Ordering::Relaxed);
                let open = silent.open.clone();
                tokio::spawn(async move {
                    let mut sink = [0_u8; 4096];
                    while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {}
                    open.fetch_sub(1, Ordering::Relaxed);
                });
            }
        });
        Ok(this)
    }
}

fn config(url: &str, prefix: &str, concurrency: usize) -> anyhow::Result<Config> {
    Ok(Config::from_env([
        ("FLOTILLA_REDIS_URL", url.to_owned()),
        ("FLOTILLA_KEY_PREFIX", prefix.to_owned()),
        ("FLOTILLA_WORKER_CONCURRENCY", concurrency.to_string()),
        ("FLOTILLA_WORKER_ID", format!("bench-{prefix}")),
        ("FLOTILLA_WEBHOOK_ALLOW_HTTP", "1".to_owned()),
        ("FLOTILLA_WEBHOOK_ALLOW_PRIVATE", "1".to_owned()),
    ])?)
}

fn next_run() -> usize {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    RUNS.fetch_add(1, Ordering::Relaxed)
}

/// Tasks drained before the measured ones, so that with a webhook the
/// silent endpoint already holds attempts and has a backlog.
const WARM_UP: usize = 2_000;

/// One measured drain of `n` tasks; with `hook`, beside an endpoint of the
/// same tenant posting to the silent listener.
async fn drain(url: &str, n: usize, concurrency: usize, hook: Option<&Silent>) -> anyhow::Result<Value> {
    let prefix = format!("bench-wh-{}-{}", std::process::id(), next_run());
    let config = config(url, &prefix, concurrency)?;
    let queue = Queue::connect(&config).await?;
    let tenant = TenantId::parse("bench")?;
    if let Some(silent) = hook {
        let hooks = Webhooks::of_queue(&queue, config.webhooks.clone());
        let events = vec![EventType::TaskSucceeded, EventType::TaskFailed, EventType::TaskCancelled, EventType::TaskWaiting];
        hooks.create(&tenant, NewEndpoint { url: silent.url.clone(), events, batch_id: None }).await?;
    }
    let mut registry = Registry::default();
    registry.register(Pipeline::Scripted, Arc::new(NoOp));
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(flotilla_worker::run_with(config, registry, shutdown.clone()));
    submit(&queue, &tenant, WARM_UP).await?;
    wait_succeeded(&queue, WARM_UP).await?;
    if let Some(silent) = hook {
        let deadline = Instant::now() + Duration::from_secs(60);
        while silent.open.load(Ordering::Relaxed) == 0 {
            if Instant::now() > deadline {
                bail!("no delivery attempt reached the silent endpoint within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let held_before = hook.map_or(0, |s| s.open.load(Ordering::Relaxed));
    let made_before = pending_messages(&queue).await?;
    let cpu_before = (process_cpu_s(), redis_cpu_s(&queue).await?);
    let started = Instant::now();
    submit(&queue, &tenant, n).await?;
    wait_succeeded(&queue, WARM_UP + n).await?;
    let drain_s = started.elapsed().as_secs_f64();
    let (process_cpu, redis_cpu) = (process_cpu_s() - cpu_before.0, redis_cpu_s(&queue).await? - cpu_before.1);
    let made = pending_messages(&queue).await?.saturating_sub(made_before);
    shutdown.cancel();
    worker.await??;
    Ok(json!({
        "webhook": hook.is_some(),
        "tasks": n,
        "drain_s": (drain_s * 1000.0).round() / 1000.0,
        "drain_per_s": (n as f64 / drain_s).round(),
        "process_cpu_ms_per_1k_tasks": (process_cpu * 1e9 / n as f64).round() / 1000.0,
        "redis_cpu_ms_per_1k_tasks": (redis_cpu * 1e9 / n as f64).round() / 1000.0,
        "silent_connections_held_at_start": held_before,
        "messages_made_while_draining": made,
    }))
}

/// Submits `n` no-op tasks of `tenant` in chunks of 1 000.
async fn submit(queue: &Queue, tenant: &TenantId, n: usize) -> anyhow::Result<()> {
    let spec =
        TaskSpec { prompt: "no-op".into(), pipeline: Some(Pipeline::Scripted), actions: Some(Vec::new()), ..TaskSpec::default() };
    let mut next = 0;
    while next < n {
        let chunk = (n - next).min(1_000);
        let tasks =
            (0..chunk).map(|_| NewTask { id: TaskId::generate(), tenant: tenant.clone(), batch: None, spec: spec.clone() });
        queue.submitter().create_tasks(tasks.collect()).await?;
        next += chunk;
    }
    Ok(())
}

async fn wait_succeeded(queue: &Queue, n: usize) -> anyhow::Result<()> {
    while succeeded(queue).await? < n as u64 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

async fn succeeded(queue: &Queue) -> anyhow::Result<u64> {
    Ok(queue.reader().fleet_stats().await?.outcomes.get("succeeded").copied().unwrap_or(0))
}

/// Messages made so far for the silent endpoint (every pending one).
async fn pending_messages(queue: &Queue) -> anyhow::Result<u64> {
    let mut conn = queue.redis().shared();
    let endpoints: Vec<String> =
        redis::cmd("ZRANGE").arg(queue.keys().webhook_due()).arg(0).arg(-1).query_async(&mut conn).await?;
    let mut total = 0;
    for endpoint in endpoints {
        let n: u64 = redis::cmd("ZCARD").arg(queue.keys().webhook_endpoint_due(&endpoint)).query_async(&mut conn).await?;
        total += n;
    }
    Ok(total)
}

/// CPU time this process (the worker, its webhook tasks and the bench's
/// own submitting and polling) has used so far, in seconds: `utime` and
/// `stime` of `/proc/self/stat`, in ticks of 1/100 s (Linux's `USER_HZ`).
fn process_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command name, which ends at the last ')': the
    // state is field 3, utime 14 and stime 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: u64 = rest.split_whitespace().skip(11).take(2).filter_map(|t| t.parse::<u64>().ok()).sum();
    ticks as f64 / 100.0
}

/// CPU time `redis-server` has used so far, in seconds (`INFO cpu`).
async fn redis_cpu_s(queue: &Queue) -> anyhow::Result<f64> {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(&mut queue.redis().shared()).await?;
    Ok(info
        .lines()
        .filter_map(|line| line.split_once(':'))
        .filter(|(name, _)| matches!(*name, "used_cpu_sys" | "used_cpu_user"))
        .filter_map(|(_, value)| value.trim().parse::<f64>().ok())
        .sum())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
}

async fn run(args: Args) -> anyhow::Result<Value> {
    let (own, url) = match &args.redis_url {
        Some(url) => (None, url.clone()),
        None => {
            let (own, url) =
                support::start_redis("webhook-bench")?.context("redis-server is not installed (scripts/setup.sh installs it)")?;
            (Some(own), url)
        }
    };
    let silent = Silent::start().await?;
    let mut runs = Vec::new();
    // Per mode (without, with): drain rates, process and Redis CPU per 1 000 tasks.
    let mut figures: [[Vec<f64>; 3]; 2] = Default::default();
    for round in 0..args.rounds {
        let order = if round % 2 == 0 { [None, Some(&silent)] } else { [Some(&silent), None] };
        for mode in order {
            let run = drain(&url, args.tasks, args.concurrency, mode).await?;
            let fields = ["drain_per_s", "process_cpu_ms_per_1k_tasks", "redis_cpu_ms_per_1k_tasks"];
            for (values, field) in figures[usize::from(mode.is_some())].iter_mut().zip(fields) {
                values.push(run[field].as_f64().unwrap_or(f64::NAN));
            }
            runs.push(run);
        }
    }
    drop(own);
    let [[without, process_without, redis_without], [with, process_with, redis_with]] =
        figures.map(|mode| mode.map(|mut v| median(&mut v)));
    let report = json!({
        "runs": runs,
        "median_drain_per_s_without_webhook": without,
        "median_drain_per_s_with_silent_endpoint": with,
        "ratio": (with / without * 1000.0).round() / 1000.0,
        "median_process_cpu_ms_per_1k_tasks": {"without_webhook": process_without, "with_silent_endpoint": process_with},
        "median_redis_cpu_ms_per_1k_tasks": {"without_webhook": redis_without, "with_silent_endpoint": redis_with},
        "silent_endpoint_connections_at_most": silent.most.load(Ordering::Relaxed),
        "silent_endpoint_connections_accepted": silent.accepted.load(Ordering::Relaxed),
    });
    let rounds = if args.rounds == 1 { "1 round".to_owned() } else { format!("{} rounds", args.rounds) };
    support::record::append(
        "Drain beside a silent webhook endpoint (`flotilla-webhook-bench`)",
        &[
            (
                format!("drain beside the silent endpoint / without, {rounds}"),
                Some(format!("{} ({with} / {without} per s)", report["ratio"])),
            ),
            (
                format!("Redis CPU ms per 1 000 tasks, without / silent, {rounds}"),
                Some(format!("{redis_without} / {redis_with}")),
            ),
            (
                format!("process CPU ms per 1 000 tasks, without / silent, {rounds}"),
                Some(format!("{process_without} / {process_with}")),
            ),
            (
                format!("silent endpoint's connections at most (accepted), {rounds}"),
                Some(format!(
                    "{} ({})",
                    report["silent_endpoint_connections_at_most"], report["silent_endpoint_connections_accepted"]
                )),
            ),
        ],
    )?;
    Ok(report)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(report) => {
            println!("{report}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
