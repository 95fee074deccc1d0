//! `flotilla-template-bench`: what a template's desktop costs on the local
//! provider (jailed, as workers run them), printed as a table and one JSON
//! line.
//!
//! - **cold start**: `create` of a `--template` desktop (default `browser`)
//!   until its start-up apps' windows are mapped, `--samples` times;
//! - **warm acquire**: taking a desktop of that template from a warm pool
//!   kept full;
//! - **idle memory**: the proportional set size (`Pss` of
//!   `/proc/<pid>/smaps_rollup`) summed over every process of an idle
//!   desktop of the template, after `--idle-seconds`: alone, and averaged
//!   over `--together` desktops up at once (shared pages split among them,
//!   as on a full host), with the share of each program; and how many fit
//!   in 16 GiB at the latter.
//!
//! Every wait is bounded and the whole run stops after `--max-seconds`.

mod support;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use flotilla_worker::sandbox::{LocalConfig, LocalProvider, PoolConfig, SandboxPool, SandboxProvider, SandboxRequest};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use support::{ms_since, print_table, Summary};

/// How long the warm pool may take to fill.
const FILL_TIMEOUT: Duration = Duration::from_secs(60);
/// The memory desktops are counted against.
const HOST_MEMORY_BYTES: u64 = 16 << 30;

struct Args {
    template: String,
    samples: usize,
    idle_seconds: u64,
    together: usize,
    max_seconds: u64,
}

const USAGE: &str =
    "flotilla-template-bench [--template browser] [--samples 10] [--idle-seconds 5] [--together 4] [--max-seconds 600]";

/// The flags, or `None` for `--help`.
fn parse_args(mut args: impl Iterator<Item = String>) -> anyhow::Result<Option<Args>> {
    let mut parsed = Args { template: "browser".into(), samples: 10, idle_seconds: 5, together: 4, max_seconds: 600 };
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--template" => parsed.template = value()?,
            "--samples" => {
                parsed.samples = value()?.parse().ok().filter(|n| *n > 0).context("--samples takes a positive number")?
            }
            "--idle-seconds" => parsed.idle_seconds = value()?.parse().context("--idle-seconds takes a number")?,
            "--together" => {
                parsed.together = value()?.parse().ok().filter(|n| *n > 0).context("--together takes a positive number")?
            }
            "--max-seconds" => parsed.max_seconds = value()?.parse().context("--max-seconds takes a number")?,
            "--help" | "-h" => return Ok(None),
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(Some(parsed))
}

fn request(template: &str) -> SandboxRequest {
    SandboxRequest { template: Some(template.to_owned()), ..PoolConfig::default().default_request }
}

/// `samples` cold starts; ms each.
async fn cold_starts(provider: &LocalProvider, template: &str, samples: usize) -> anyhow::Result<Vec<f64>> {
    let mut took = Vec::with_capacity(samples);
    for _ in 0..samples {
        let started = Instant::now();
        let sandbox = provider.create(&request(template)).await.context("a cold start")?;
        took.push(ms_since(started));
        provider.kill(&sandbox.id).await?;
    }
    Ok(took)
}

async fn wait_until_ready(pool: &SandboxPool) -> anyhow::Result<()> {
    let deadline = Instant::now() + FILL_TIMEOUT;
    while pool.ready() < 1 {
        if Instant::now() > deadline {
            bail!("the pool did not fill within {} s", FILL_TIMEOUT.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// `samples` acquires from a pool of one warm desktop of `template`, each
/// released (and the pool refilled) before the next; ms each, and how many
/// were served warm.
async fn warm_acquires(provider: Arc<dyn SandboxProvider>, template: &str, samples: usize) -> anyhow::Result<(Vec<f64>, usize)> {
    let config = PoolConfig { warm: 1, max_live: 2, default_request: request(template), ..PoolConfig::default() };
    let pool = SandboxPool::new(provider, config);
    let (mut took, mut warm, cancel) = (Vec::with_capacity(samples), 0, CancellationToken::new());
    for _ in 0..samples {
        wait_until_ready(&pool).await?;
        let started = Instant::now();
        let lease = pool.acquire(&request(template), &cancel).await?;
        took.push(ms_since(started));
        warm += usize::from(lease.warm);
        pool.release(lease).await;
    }
    pool.shutdown().await;
    Ok((took, warm))
}

/// `Pss` of one process, in bytes, from `/proc/<pid>/smaps_rollup`.
fn pss_bytes(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let line = text.lines().find(|l| l.starts_with("Pss:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// A process's command name, from `/proc/<pid>/comm`.
fn command_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).map_or_else(|_| "?".to_owned(), |c| c.trim().to_owned())
}

/// What an idle desktop's memory is: the PSS averaged over the desktops,
/// how many processes one has, and the PSS by command name (averaged too).
struct IdleMemory {
    pss: u64,
    processes: usize,
    by_command: BTreeMap<String, u64>,
}

/// The PSS of an idle desktop of `template` with `count` of them up at
/// once, after `idle`: summed over each desktop's processes, averaged over
/// the desktops (pages they share, such as the browser's code, are split
/// among them as on a host full of desktops).
async fn idle_pss(provider: &LocalProvider, template: &str, count: usize, idle: Duration) -> anyhow::Result<IdleMemory> {
    let mut ids = Vec::with_capacity(count);
    for _ in 0..count {
        ids.push(provider.create(&request(template)).await?.id);
    }
    // Idle is the state measured: the desktops sit untouched this long.
    tokio::time::sleep(idle).await;
    let (mut total, mut processes, mut by_command) = (0, 0, BTreeMap::new());
    for id in &ids {
        let pids = provider.process_ids(id).await?;
        for pid in &pids {
            let pss = pss_bytes(*pid).unwrap_or(0);
            total += pss;
            *by_command.entry(command_name(*pid)).or_insert(0) += pss / count.max(1) as u64;
        }
        processes = pids.len();
    }
    for id in &ids {
        provider.kill(id).await?;
    }
    Ok(IdleMemory { pss: total / count.max(1) as u64, processes, by_command })
}

async fn run(args: Args) -> anyhow::Result<Value> {
    let root = std::env::temp_dir().join(format!("flotilla-template-bench-{:016x}", rand::random::<u64>()));
    let config = LocalConfig { root: root.clone(), start_timeout: Duration::from_secs(30), ..LocalConfig::default() };
    if config.templates.get(&args.template).is_none() {
        bail!("no template {:?}", args.template);
    }
    let provider = Arc::new(LocalProvider::start(config).await?);
    let cold = cold_starts(&provider, &args.template, args.samples).await?;
    let (warm, hits) = warm_acquires(Arc::clone(&provider) as Arc<dyn SandboxProvider>, &args.template, args.samples).await?;
    let idle = Duration::from_secs(args.idle_seconds);
    let alone = idle_pss(&provider, &args.template, 1, idle).await?.pss;
    let IdleMemory { pss, processes, by_command } = idle_pss(&provider, &args.template, args.together, idle).await?;
    drop(provider);
    let _ = std::fs::remove_dir_all(&root);

    let mib = pss as f64 / f64::from(1 << 20);
    let alone_mib = alone as f64 / f64::from(1 << 20);
    let fit = HOST_MEMORY_BYTES / pss.max(1);
    let title = format!("template {}, ms", args.template);
    let table = [("cold start", &cold), ("warm acquire", &warm)]
        .iter()
        .map(|(name, samples)| [vec![(*name).to_owned()], Summary::of(samples).cells()].concat())
        .collect::<Vec<_>>();
    print_table(&[&title, "p50", "p95", "p99", "max"], &table);
    println!("warm hits {hits}/{}", args.samples);
    println!(
        "idle desktop: {mib:.1} MiB PSS each with {} up ({alone_mib:.1} MiB alone), {processes} processes; {fit} fit in 16 GiB ({} build)",
        args.together,
        support::build_kind()
    );
    let by_command: BTreeMap<String, f64> =
        by_command.into_iter().map(|(name, bytes)| (name, support::round(bytes as f64 / f64::from(1 << 20), 1))).collect();
    println!("by command, MiB: {by_command:?}");
    let report = json!({
        "template": args.template,
        "cold_start_ms": Summary::of(&cold).json(),
        "warm_acquire_ms": Summary::of(&warm).json(),
        "warm_hits": hits,
        "idle_pss_mib": support::round(mib, 1),
        "idle_pss_alone_mib": support::round(alone_mib, 1),
        "together": args.together,
        "idle_processes": processes,
        "idle_pss_by_command_mib": by_command,
        "fit_in_16_gib": fit,
        "build": support::build_kind(),
        "load_average": support::load_average(),
    });
    let p50 = |key: &str| support::record::at(&report, &format!("/{key}/p50")).map(|v| format!("{v} ms"));
    support::record::append(
        "Templates (`flotilla-template-bench`)",
        &[
            (format!("{} cold start, p50", args.template), p50("cold_start_ms")),
            (format!("{} warm acquire, p50", args.template), p50("warm_acquire_ms")),
            (format!("{} idle desktop PSS, {} up at once", args.template, args.together), Some(format!("{mib:.1} MiB"))),
            (format!("{} idle desktop PSS, alone", args.template), Some(format!("{alone_mib:.1} MiB"))),
            (format!("{} idle desktops in 16 GiB", args.template), Some(fit.to_string())),
        ],
    )?;
    Ok(report)
}

fn main() -> ExitCode {
    support::main(parse_args(support::record::args()), USAGE, |args| args.max_seconds, run)
}
