//! `flotilla-cluster-spread`: how evenly the queue spreads over the masters
//! of a Redis Cluster.
//!
//! Starts a local 3-master cluster, submits `--tasks` no-op tasks for each
//! of `--tenants` tenants (one run per count, e.g. `--tenants 100,1000`),
//! drains them with one worker and reads every master's `INFO commandstats`
//! and `INFO cpu` before and after. Prints one JSON line per run with each
//! master's share of the commands and of the Redis CPU; exits non-zero if a
//! task did not succeed or a master served more than `--max-share` (40 %).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use flotilla_config::Config;
use flotilla_queue::queue::{NewTask, Queue};
use flotilla_tests::{RedisCluster, RedisUnderTest};
use flotilla_types::ids::{TaskId, TenantId};
use flotilla_types::task::{Pipeline, TaskSpec};
use flotilla_worker::{Outcome, PipelineError, PipelineRunner, Registry, TaskRun};
use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// A pipeline that succeeds at once.
struct NoOp;

impl PipelineRunner for NoOp {
    fn run<'a>(&'a self, _run: &'a TaskRun) -> BoxFuture<'a, Result<Outcome, PipelineError>> {
        async { Ok(Outcome::Succeeded(Value::Null)) }.boxed()
    }
}

struct Args {
    tenants: Vec<usize>,
    tasks: usize,
    concurrency: usize,
    max_share: f64,
    timeout: Duration,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args =
        Args { tenants: vec![100, 1_000], tasks: 50, concurrency: 50, max_share: 0.40, timeout: Duration::from_secs(300) };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--tenants" => {
                args.tenants = value()?
                    .split(',')
                    .map(|n| n.trim().parse())
                    .collect::<Result<_, _>>()
                    .context("--tenants takes numbers like 100,1000")?
            }
            "--tasks" => args.tasks = value()?.parse().context("--tasks takes a number")?,
            "--concurrency" => args.concurrency = value()?.parse().context("--concurrency takes a number")?,
            "--max-share" => args.max_share = value()?.parse().context("--max-share takes a fraction like 0.4")?,
            "--timeout-s" => args.timeout = Duration::from_secs(value()?.parse().context("--timeout-s takes seconds")?),
            "--help" | "-h" => {
                println!("flotilla-cluster-spread [--tenants 100,1000] [--tasks 50] [--concurrency 50] [--max-share 0.4] [--timeout-s 300]");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    if args.tenants.is_empty() || args.tenants.contains(&0) || args.tasks == 0 || args.concurrency == 0 {
        bail!("tenants, tasks and concurrency must be positive");
    }
    Ok(args)
}

/// Commands served (sum of `calls` in `INFO commandstats`) and CPU seconds
/// (user + sys) of one master.
async fn node_counters(url: &str) -> anyhow::Result<(u64, f64)> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let stats: String = redis::cmd("INFO").arg("commandstats").query_async(&mut conn).await?;
    let calls = stats.lines().filter_map(|l| l.split_once(":calls=")?.1.split(',').next()?.parse::<u64>().ok()).sum();
    let cpu: String = redis::cmd("INFO").arg("cpu").query_async(&mut conn).await?;
    let field = |name: &str| cpu.lines().find_map(|l| l.strip_prefix(name)).and_then(|v| v.trim().parse::<f64>().ok());
    Ok((calls, field("used_cpu_user:").unwrap_or(0.0) + field("used_cpu_sys:").unwrap_or(0.0)))
}

async fn all_counters(urls: &[String]) -> anyhow::Result<Vec<(u64, f64)>> {
    let mut out = Vec::with_capacity(urls.len());
    for url in urls {
        out.push(node_counters(url).await?);
    }
    Ok(out)
}

/// Each master's share of the difference, rounded to a tenth of a percent.
fn shares(before: &[f64], after: &[f64]) -> Vec<f64> {
    let deltas: Vec<f64> = before.iter().zip(after).map(|(b, a)| (a - b).max(0.0)).collect();
    let total: f64 = deltas.iter().sum();
    deltas.iter().map(|d| if total > 0.0 { (d / total * 1000.0).round() / 10.0 } else { 0.0 }).collect()
}

async fn one_run(cluster: &RedisCluster, tenants: usize, args: &Args) -> anyhow::Result<Value> {
    let url = cluster.url();
    let nodes: Vec<String> = url.split(',').map(str::to_owned).collect();
    let prefix = format!("spread-{tenants}-{}", std::process::id());
    let config = Config::from_env([
        ("FLOTILLA_REDIS_URL", url.clone()),
        ("FLOTILLA_KEY_PREFIX", prefix.clone()),
        ("FLOTILLA_WORKER_CONCURRENCY", args.concurrency.to_string()),
        ("FLOTILLA_WORKER_ID", format!("spread-{prefix}")),
    ])?;
    let queue = Queue::connect(&config).await?;
    let spec =
        TaskSpec { prompt: "no-op".into(), pipeline: Some(Pipeline::Scripted), actions: Some(Vec::new()), ..TaskSpec::default() };
    let total = tenants * args.tasks;
    let before = all_counters(&nodes).await?;
    let started = Instant::now();
    let ids: Vec<TenantId> = (0..tenants).map(|i| TenantId::parse(&format!("tenant-{i}"))).collect::<Result<_, _>>()?;
    let mut next = 0;
    while next < total {
        let batch = (total - next).min(1_000);
        let tasks = (next..next + batch)
            .map(|i| NewTask { id: TaskId::generate(), tenant: ids[i % tenants].clone(), batch: None, spec: spec.clone() })
            .collect();
        queue.submitter().create_tasks(tasks).await?;
        next += batch;
    }
    let mut registry = Registry::default();
    registry.register(Pipeline::Scripted, Arc::new(NoOp));
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(flotilla_worker::run_with(config, registry, shutdown.clone()));
    let deadline = started + args.timeout;
    let outcomes = loop {
        let fleet = queue.reader().fleet_stats().await?;
        let ended: u64 = fleet.outcomes.values().sum();
        if ended >= total as u64 || Instant::now() > deadline {
            break fleet.outcomes;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let seconds = started.elapsed().as_secs_f64();
    shutdown.cancel();
    worker.await??;
    let after = all_counters(&nodes).await?;
    let commands =
        shares(&before.iter().map(|c| c.0 as f64).collect::<Vec<_>>(), &after.iter().map(|c| c.0 as f64).collect::<Vec<_>>());
    let cpu = shares(&before.iter().map(|c| c.1).collect::<Vec<_>>(), &after.iter().map(|c| c.1).collect::<Vec<_>>());
    let succeeded = outcomes.get("succeeded").copied().unwrap_or(0);
    let busiest = commands.iter().chain(&cpu).copied().fold(0.0, f64::max);
    let pass = succeeded == total as u64 && busiest <= args.max_share * 100.0;
    Ok(json!({
        "tenants": tenants,
        "tasks": total,
        "succeeded": succeeded,
        "outcomes": outcomes,
        "seconds": (seconds * 100.0).round() / 100.0,
        "commands": after.iter().zip(&before).map(|(a, b)| a.0 - b.0).collect::<Vec<_>>(),
        "command_share_pct": commands,
        "cpu_share_pct": cpu,
        "busiest_pct": busiest,
        "pass": pass,
    }))
}

async fn run(args: Args) -> anyhow::Result<bool> {
    let cluster = tokio::task::spawn_blocking(RedisCluster::start).await.context("starting the cluster")?;
    let mut all_pass = true;
    for tenants in &args.tenants {
        let report = one_run(&cluster, *tenants, &args).await?;
        all_pass &= report["pass"].as_bool().unwrap_or(false);
        println!("{report}");
    }
    Ok(all_pass)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
