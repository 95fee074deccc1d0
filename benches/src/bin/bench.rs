//! `flotilla-bench`: measures the real queue code with a no-op pipeline and
//! prints the figures as JSON, beside BullMQ's from the same Redis when the
//! baseline script is given.
//!
//! It starts its own `redis-server` on a free loopback port (no persistence),
//! or uses `--redis-url`. Measured: enqueue and drain throughput at several
//! backlog sizes (the cost per task must stay flat as the backlog grows),
//! enqueue-to-start latency at a steady arrival rate, Redis memory per
//! finished task, and Redis's CPU, script calls and commands (those the
//! scripts call included) per drained task.
//!
//! `--tenants 1,100` spreads each throughput run's tasks evenly over that
//! many tenants (the fair scheduler takes turns between them), one run per
//! count; `--bullmq-official BIN` also runs the Rust port of BullMQ (the
//! `rust-peers` binary of the shared peer benchmarks) on the same Redis in
//! each round. That binary empties the Redis first (`FLUSHALL`), so it runs
//! last in a round.

mod support;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use flotilla_config::Config;
use flotilla_queue::queue::{NewTask, Queue};
use flotilla_types::ids::{TaskId, TenantId};
use flotilla_types::task::{Pipeline, TaskSpec};
use flotilla_worker::{Outcome, PipelineError, PipelineRunner, Registry, TaskRun};
use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// The shipped worker's allocator, so the drain measures what it runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A pipeline that does nothing but note when it started.
struct NoOp {
    started: Arc<Mutex<HashMap<TaskId, Instant>>>,
}

impl PipelineRunner for NoOp {
    fn run<'a>(&'a self, run: &'a TaskRun) -> BoxFuture<'a, Result<Outcome, PipelineError>> {
        let now = Instant::now();
        if let Ok(mut started) = self.started.lock() {
            started.insert(run.task.task_id().clone(), now);
        }
        async { Ok(Outcome::Succeeded(Value::Null)) }.boxed()
    }
}

struct Args {
    redis_url: Option<String>,
    backlogs: Vec<usize>,
    concurrency: usize,
    latency_n: usize,
    rate: u64,
    rounds: usize,
    tenants: Vec<usize>,
    bullmq_script: Option<String>,
    bullmq_official: Option<String>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        redis_url: None,
        backlogs: vec![2_000, 20_000, 100_000],
        concurrency: 50,
        latency_n: 2_000,
        rate: 500,
        rounds: 3,
        tenants: vec![1],
        bullmq_script: None,
        bullmq_official: None,
    };
    let mut it = support::record::args();
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--redis-url" => args.redis_url = Some(value()?),
            "--backlogs" => args.backlogs = numbers(&value()?).context("--backlogs takes numbers like 2000,20000")?,
            "--concurrency" => args.concurrency = value()?.parse().context("--concurrency takes a number")?,
            "--latency-n" => args.latency_n = value()?.parse().context("--latency-n takes a number")?,
            "--rate" => args.rate = value()?.parse().context("--rate takes a number")?,
            "--rounds" => args.rounds = value()?.parse().context("--rounds takes a number")?,
            "--tenants" => args.tenants = numbers(&value()?).context("--tenants takes numbers like 1,100")?,
            "--bullmq-script" => args.bullmq_script = Some(value()?),
            "--bullmq-official" => args.bullmq_official = Some(value()?),
            "--help" | "-h" => {
                println!("flotilla-bench [--redis-url URL] [--backlogs 2000,20000,100000] [--tenants 1] [--concurrency 50] [--latency-n 2000] [--rate 500] [--rounds 3] [--bullmq-script scripts/bullmq-baseline.sh] [--bullmq-official path/to/rust-peers]");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    if args.tenants.is_empty() || args.tenants.contains(&0) {
        bail!("tenants must be positive");
    }
    if args.backlogs.is_empty() || args.backlogs.contains(&0) || args.concurrency == 0 || args.rate == 0 || args.rounds == 0 {
        bail!("backlogs, concurrency, rate and rounds must be positive");
    }
    Ok(args)
}

/// A comma-separated list of numbers.
fn numbers(list: &str) -> Result<Vec<usize>, std::num::ParseIntError> {
    list.split(',').map(|n| n.trim().parse()).collect()
}

fn config(url: &str, prefix: &str, concurrency: usize) -> anyhow::Result<Config> {
    Ok(Config::from_env([
        ("FLOTILLA_REDIS_URL", url.to_owned()),
        ("FLOTILLA_KEY_PREFIX", prefix.to_owned()),
        ("FLOTILLA_WORKER_CONCURRENCY", concurrency.to_string()),
        ("FLOTILLA_WORKER_ID", format!("bench-{prefix}")),
    ])?)
}

fn noop_spec() -> TaskSpec {
    TaskSpec { prompt: "no-op".into(), pipeline: Some(Pipeline::Scripted), actions: Some(Vec::new()), ..TaskSpec::default() }
}

fn new_task(tenant: &TenantId, spec: &TaskSpec) -> NewTask {
    NewTask { id: TaskId::generate(), tenant: tenant.clone(), batch: None, spec: spec.clone() }
}

/// Seconds of CPU Redis has used, user and system.
async fn redis_cpu_s(queue: &Queue) -> anyhow::Result<f64> {
    let mut conn = queue.redis().shared();
    let info: String = redis::cmd("INFO").arg("cpu").query_async(&mut conn).await?;
    let field =
        |name: &str| info.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse::<f64>().ok()).unwrap_or(0.0);
    Ok(field("used_cpu_user:") + field("used_cpu_sys:"))
}

/// Commands Redis has run since its start or its last `CONFIG RESETSTAT`:
/// script calls, and every other command (the ones scripts call included).
/// `each` keeps every command's calls and microseconds (a script's
/// commands count in the script's time too).
#[derive(Debug, Default, Clone)]
struct Calls {
    scripts: u64,
    commands: u64,
    each: HashMap<String, (u64, u64)>,
}

impl Calls {
    fn since(self, before: &Calls) -> Calls {
        let each = self
            .each
            .into_iter()
            .map(|(name, (calls, usec))| {
                let (c0, u0) = before.each.get(&name).copied().unwrap_or_default();
                (name, (calls.saturating_sub(c0), usec.saturating_sub(u0)))
            })
            .collect();
        Calls { scripts: self.scripts - before.scripts, commands: self.commands - before.commands, each }
    }

    /// The commands that took the most Redis time, per task: `{name: [calls, µs]}`.
    fn costliest(&self, n: usize, limit: usize) -> Value {
        let mut all: Vec<_> = self.each.iter().filter(|(_, (calls, _))| *calls > 0).collect();
        all.sort_by_key(|(_, (_, usec))| std::cmp::Reverse(*usec));
        all.into_iter()
            .take(limit)
            .map(|(name, (calls, usec))| (name.clone(), json!([per_task(*calls, n), per_task(*usec, n)])))
            .collect::<serde_json::Map<_, _>>()
            .into()
    }
}

/// What `INFO commandstats` counts, its own `INFO`s left out.
async fn redis_calls(queue: &Queue) -> anyhow::Result<Calls> {
    let mut conn = queue.redis().shared();
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut conn).await?;
    let mut calls = Calls::default();
    for line in info.lines() {
        let Some((name, stats)) = line.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else { continue };
        let stat =
            |key: &str| -> u64 { stats.split(',').find_map(|f| f.strip_prefix(key)).and_then(|c| c.parse().ok()).unwrap_or(0) };
        let count = stat("calls=");
        calls.each.insert(name.to_owned(), (count, stat("usec=")));
        match name {
            "evalsha" | "eval" | "fcall" => calls.scripts += count,
            "info" | "script|load" => {}
            _ => calls.commands += count,
        }
    }
    Ok(calls)
}

fn per_task(count: u64, n: usize) -> f64 {
    (count as f64 / n as f64 * 100.0).round() / 100.0
}

fn start_worker(
    config: Config,
    started: Arc<Mutex<HashMap<TaskId, Instant>>>,
) -> (CancellationToken, tokio::task::JoinHandle<anyhow::Result<()>>) {
    let mut registry = Registry::default();
    registry.register(Pipeline::Scripted, Arc::new(NoOp { started }));
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(flotilla_worker::run_with(config, registry, shutdown.clone()));
    (shutdown, handle)
}

/// A number for each measurement of this process, so every one has keys of
/// its own.
fn next_run() -> usize {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// `count` tenants for one run: `bench` alone, or `bench-0` … `bench-<count-1>`.
fn bench_tenants(count: usize) -> anyhow::Result<Vec<TenantId>> {
    if count == 1 {
        return Ok(vec![TenantId::parse("bench")?]);
    }
    (0..count).map(|i| Ok(TenantId::parse(&format!("bench-{i}"))?)).collect()
}

/// Enqueue `n` no-op tasks in batches of 1000, spread evenly over `tenants`
/// tenants (task `i` to tenant `i mod tenants`), then drain them with one worker.
async fn throughput(url: &str, n: usize, tenants: usize, concurrency: usize) -> anyhow::Result<Value> {
    let prefix = format!("bench-tp-{n}-{}-{}", std::process::id(), next_run());
    let config = config(url, &prefix, concurrency)?;
    let queue = Queue::connect(&config).await?;
    let tenant_ids = bench_tenants(tenants)?;
    let spec = noop_spec();
    let memory_before = support::used_memory(&queue).await?;
    let enqueue_started = Instant::now();
    let mut next = 0;
    while next < n {
        let batch = (n - next).min(1_000);
        queue.submitter().create_tasks((next..next + batch).map(|i| new_task(&tenant_ids[i % tenants], &spec)).collect()).await?;
        next += batch;
    }
    let enqueue_s = enqueue_started.elapsed().as_secs_f64();

    let started = Arc::new(Mutex::new(HashMap::new()));
    let cpu_before = redis_cpu_s(&queue).await?;
    let calls_before = redis_calls(&queue).await?;
    let (shutdown, handle) = start_worker(config, started.clone());
    // Asking Redis how many succeeded costs it work of its own: ask only
    // once every task has started (the pipeline notes it in this process).
    while started.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.len() < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let mut polls = 0;
    while support::succeeded(&queue).await? < n as u64 {
        polls += 1;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let drained_at = Instant::now();
    // As BullMQ's benchmark times from its ready workers' start: the worker
    // process's own start-up (connecting, loading scripts) is not draining.
    let first_start = started.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.values().min().copied();
    let drain_s = drained_at.saturating_duration_since(first_start.context("no task started")?).as_secs_f64();
    let redis_cpu_us = (redis_cpu_s(&queue).await? - cpu_before) * 1e6 / n as f64;
    let mut calls = redis_calls(&queue).await?.since(&calls_before);
    // Each poll of the fleet's counts above is two `HGETALL`s.
    calls.commands = calls.commands.saturating_sub(2 * (polls + 1));
    shutdown.cancel();
    handle.await??;
    let memory_after = support::used_memory(&queue).await?;
    Ok(json!({
        "backlog": n,
        "tenants": tenants,
        "enqueue_per_s": (n as f64 / enqueue_s).round(),
        "drain_per_s": (n as f64 / drain_s).round(),
        "drain_us_per_task": (drain_s * 1e6 / n as f64 * 10.0).round() / 10.0,
        "redis_cpu_us_per_task": (redis_cpu_us * 10.0).round() / 10.0,
        "redis_script_calls_per_task": per_task(calls.scripts, n),
        "redis_commands_per_task": per_task(calls.commands, n),
        "redis_costliest_commands_per_task": calls.costliest(n, 12),
        "redis_bytes_per_finished_task": (memory_after - memory_before) / n as i64,
    }))
}

/// Submit tasks one at a time at `rate` per second to an idle worker and
/// measure enqueue-to-start.
async fn latency(url: &str, n: usize, rate: u64, concurrency: usize) -> anyhow::Result<Value> {
    let prefix = format!("bench-lat-{}-{}", std::process::id(), next_run());
    let config = config(url, &prefix, concurrency)?;
    let queue = Queue::connect(&config).await?;
    let tenant = TenantId::parse("bench")?;
    let spec = noop_spec();
    let started = Arc::new(Mutex::new(HashMap::new()));
    let (shutdown, handle) = start_worker(config, started.clone());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut submitted = Vec::with_capacity(n);
    let mut ticker = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
    for _ in 0..n {
        ticker.tick().await;
        let task = new_task(&tenant, &spec);
        let id = task.id.clone();
        let at = Instant::now();
        queue.submitter().create_tasks(vec![task]).await?;
        submitted.push((id, at));
    }
    while support::succeeded(&queue).await? < n as u64 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    shutdown.cancel();
    handle.await??;
    let started = started.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
    let mut ms: Vec<f64> = submitted
        .iter()
        .filter_map(|(id, at)| started.get(id).map(|s| s.saturating_duration_since(*at).as_secs_f64() * 1e3))
        .collect();
    ms.sort_by(f64::total_cmp);
    let pct = |p: f64| ms.get(((ms.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(f64::NAN);
    let round = |v: f64| (v * 1000.0).round() / 1000.0;
    Ok(
        json!({ "n": n, "rate_per_s": rate, "p50_ms": round(pct(0.50)), "p90_ms": round(pct(0.90)), "p99_ms": round(pct(0.99)), "max_ms": round(pct(1.0)) }),
    )
}

/// Runs the BullMQ baseline script against the same Redis; returns its two
/// JSON lines (throughput, latency).
fn bullmq(script: &str, port: u16) -> anyhow::Result<Vec<Value>> {
    let out = Command::new("bash")
        .arg(script)
        .arg(port.to_string())
        .stderr(Stdio::inherit())
        .output()
        .context("running the BullMQ baseline")?;
    if !out.status.success() {
        bail!("the BullMQ baseline failed");
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .map(|l| Ok(serde_json::from_str(l)?))
        .collect()
}

fn number(v: &Value, keys: &[&str]) -> Option<f64> {
    keys.iter().find_map(|k| v.get(*k).and_then(Value::as_f64))
}

/// Runs `--rounds` rounds, each ours then BullMQ's on the same Redis, and
/// reports every round and the median of each ratio: the machine's speed
/// drifts, and a ratio within one round is taken at one speed.
async fn run(args: Args) -> anyhow::Result<Value> {
    let (own, url, port) = match &args.redis_url {
        Some(url) => (None, url.clone(), port_of(url)),
        None => {
            let (own, url) =
                support::start_redis("bench")?.context("redis-server is not installed (scripts/setup.sh installs it)")?;
            let port = port_of(&url);
            (Some(own), url, port)
        }
    };
    let mut rounds = Vec::with_capacity(args.rounds);
    for _ in 0..args.rounds {
        rounds.push(round(&args, &url, port).await?);
    }
    drop(own);
    let medians: serde_json::Map<String, Value> = RATIOS
        .iter()
        .filter_map(|name| {
            let mut values: Vec<f64> = rounds.iter().filter_map(|r| r["ratio"][*name].as_f64()).collect();
            values.sort_by(f64::total_cmp);
            let median = *values.get(values.len() / 2)?;
            Some(((*name).to_owned(), json!(median)))
        })
        .collect();
    let report = json!({ "rounds": rounds, "ratio_median": medians });
    let (first_n, most_n) = (args.tenants[0], args.tenants.iter().copied().max().unwrap_or(1));
    let tenants = |n: usize| if n == 1 { "1 tenant".to_owned() } else { format!("{n} tenants") };
    let (first, most) = (tenants(first_n), tenants(most_n));
    let of = if args.rounds == 1 { "one round".to_owned() } else { format!("median of {} rounds", args.rounds) };
    let median = |name: &str, unit: &str| support::record::at(&report, &format!("/ratio_median/{name}")).map(|v| v + unit);
    let ours_median = |tenants: usize, field: &str, unit: &str| {
        let runs = report["rounds"].as_array().into_iter().flatten();
        let mut values: Vec<f64> =
            runs.filter_map(|r| ours_at(r["flotilla"]["throughput"].as_array()?, tenants)[field].as_f64()).collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).map(|v| format!("{v}{unit}"))
    };
    let mut figures = vec![
        (format!("drain, {first}, against BullMQ ({of})"), median("drain_vs_bullmq", "×")),
        (format!("drain, {first}, against bullmq-official ({of})"), median("drain_vs_bullmq_official", "×")),
        (format!("enqueue, {first}, against BullMQ ({of})"), median("enqueue_vs_bullmq", "×")),
        (format!("enqueue → start p50, BullMQ's over ours ({of})"), median("p50_bullmq_over_ours", "×")),
        (format!("enqueue → start p99, BullMQ's over ours ({of})"), median("p99_bullmq_over_ours", "×")),
        (format!("drain /s, {first} ({of})"), ours_median(first_n, "drain_per_s", "")),
        (format!("Redis CPU per task, {first} ({of})"), ours_median(first_n, "redis_cpu_us_per_task", " µs")),
    ];
    if most_n != first_n {
        figures.push((format!("drain, {most}, against BullMQ ({of})"), median("drain_vs_bullmq_t_most", "×")));
        figures.push((format!("Redis CPU per task, {most} ({of})"), ours_median(most_n, "redis_cpu_us_per_task", " µs")));
    }
    support::record::append("Queue (`flotilla-bench`)", &figures)?;
    Ok(report)
}

/// The port of a `redis://host:port` URL (6379 when it names none).
fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().and_then(|p| p.trim_end_matches('/').parse().ok()).unwrap_or(6379)
}

/// The ratios each round reports with the peers (`_t<N>`: ours with N tenants).
const RATIOS: [&str; 7] = [
    "drain_vs_bullmq",
    "enqueue_vs_bullmq",
    "p50_bullmq_over_ours",
    "p99_bullmq_over_ours",
    "drain_vs_bullmq_official",
    "enqueue_vs_bullmq_official",
    "drain_vs_bullmq_t_most",
];

/// Runs the Rust port of BullMQ (`rust-peers bullmq`) against the same
/// Redis: 20 000 no-op jobs, concurrency 50. Its one JSON line.
fn bullmq_official(binary: &str, port: u16, concurrency: usize) -> anyhow::Result<Value> {
    let out = Command::new(binary)
        .args(["bullmq", "--port", &port.to_string(), "--n", "20000", "--concurrency", &concurrency.to_string()])
        .stderr(Stdio::inherit())
        .output()
        .context("running bullmq-official")?;
    if !out.status.success() {
        bail!("bullmq-official failed");
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.trim_start().starts_with('{')).context("bullmq-official printed no JSON line")?;
    Ok(serde_json::from_str(line)?)
}

/// `a / b` to two decimals, null when either is missing.
fn ratio(a: Option<f64>, b: Option<f64>) -> Value {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => json!((a / b * 100.0).round() / 100.0),
        _ => Value::Null,
    }
}

/// Our run at a 20 000 backlog (or the first) with `tenants` tenants.
fn ours_at(runs: &[Value], tenants: usize) -> Value {
    let of = |r: &&Value| r["tenants"] == tenants;
    runs.iter().filter(of).find(|r| r["backlog"] == 20_000).or(runs.iter().find(of)).cloned().unwrap_or_default()
}

/// One round: ours at every backlog and the latency run, then, when asked,
/// BullMQ's on the same Redis and the ratios.
async fn round(args: &Args, url: &str, port: u16) -> anyhow::Result<Value> {
    let mut runs = Vec::new();
    for tenants in &args.tenants {
        for n in &args.backlogs {
            runs.push(throughput(url, *n, *tenants, args.concurrency).await?);
        }
    }
    let latency = latency(url, args.latency_n, args.rate, args.concurrency).await?;
    let ours = ours_at(&runs, args.tenants[0]);
    let most = args.tenants.iter().copied().max().unwrap_or(1);
    let ours_most = ours_at(&runs, most);
    let mut report = json!({ "flotilla": { "throughput": runs, "latency": latency } });
    let mut ratios = serde_json::Map::new();
    if let Some(script) = &args.bullmq_script {
        let lines = bullmq(script, port)?;
        let theirs_tp =
            lines.iter().find(|l| l.get("mode").and_then(Value::as_str) == Some("throughput")).cloned().unwrap_or_default();
        let theirs_lat =
            lines.iter().find(|l| l.get("mode").and_then(Value::as_str) == Some("latency")).cloned().unwrap_or_default();
        let theirs_drain = number(&theirs_tp, &["process_jobs_per_s"]);
        report["bullmq"] = json!({ "throughput": theirs_tp, "latency": theirs_lat });
        ratios.insert("drain_vs_bullmq".into(), ratio(number(&ours, &["drain_per_s"]), theirs_drain));
        ratios.insert(
            "enqueue_vs_bullmq".into(),
            ratio(number(&ours, &["enqueue_per_s"]), number(&theirs_tp, &["enqueue_jobs_per_s"])),
        );
        ratios.insert(
            "p50_bullmq_over_ours".into(),
            ratio(theirs_lat["lat_ms_hires"]["p50"].as_f64(), number(&latency, &["p50_ms"])),
        );
        ratios.insert(
            "p99_bullmq_over_ours".into(),
            ratio(theirs_lat["lat_ms_hires"]["p99"].as_f64(), number(&latency, &["p99_ms"])),
        );
        ratios.insert("drain_vs_bullmq_t_most".into(), ratio(number(&ours_most, &["drain_per_s"]), theirs_drain));
    }
    if let Some(binary) = &args.bullmq_official {
        // It starts with a synchronous FLUSHALL, which can outlast its
        // client's timeout with this round's data in Redis: empty it first.
        let mut conn = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
        let () = redis::cmd("FLUSHALL").arg("SYNC").query_async(&mut conn).await?;
        let theirs = bullmq_official(binary, port, args.concurrency)?;
        ratios.insert(
            "drain_vs_bullmq_official".into(),
            ratio(number(&ours, &["drain_per_s"]), number(&theirs, &["drain_jobs_per_s"])),
        );
        ratios.insert(
            "enqueue_vs_bullmq_official".into(),
            ratio(number(&ours, &["enqueue_per_s"]), number(&theirs, &["enqueue_jobs_per_s"])),
        );
        report["bullmq_official"] = theirs;
    }
    if !ratios.is_empty() {
        report["ratio"] = Value::Object(ratios);
    }
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
