//! `flotilla-pool-bench`: how well the warm sandbox pool serves tasks on the local
//! provider, printed as tables and one JSON line.
//!
//! - **acquire latency**: `--samples` acquires from a pool kept full (warm)
//!   and from a pool with no warm sandboxes (cold), each released before the
//!   next, with p50 and p99; cold once more with sandboxes outside their
//!   jail (`Isolation::None`), which shows what the jail adds to a start.
//! - **arrival traces**: for each warm size, tasks arrive for `--seconds`
//!   seconds as a Poisson stream (`--rate` per second) with, in the bursty
//!   trace, `--burst` extra tasks every `--burst-every` seconds, and hold
//!   their sandbox 1–3 s. It reports the share of acquires served warm (by
//!   steady and burst arrivals), acquire latency, and the sandbox-seconds the
//!   pool kept idle per task, sampled every 20 ms.
//!
//! Traces come from a fixed seed, so runs compare like with like. Every wait
//! is bounded and the whole run stops after `--max-seconds`.

mod support;

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use flotilla_worker::sandbox::{Isolation, LocalConfig, LocalProvider, PoolConfig, SandboxPool, SandboxProvider};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use support::{ms_since, print_table, round, Summary};

/// How often the idle sampler reads the pool.
const SAMPLE_EVERY: Duration = Duration::from_millis(20);
/// How long a pool may take to fill before a measurement starts.
const FILL_TIMEOUT: Duration = Duration::from_secs(60);
/// Shortest and longest hold of a sandbox by a task.
const HOLD: (f64, f64) = (1.0, 3.0);
/// The seed every trace is drawn from.
const SEED: u64 = 0x00f1_0711;

struct Args {
    samples: usize,
    warm_sizes: Vec<usize>,
    rate: f64,
    seconds: f64,
    burst: usize,
    burst_every: f64,
    max_live: usize,
    traces: Vec<TraceKind>,
    max_seconds: u64,
}

const USAGE: &str = "flotilla-pool-bench [--samples 30] [--warm 1,2] [--rate 1.0] [--seconds 30] [--burst 4] [--burst-every 10] [--max-live 12] [--traces steady,bursty] [--max-seconds 600]";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TraceKind {
    Steady,
    Bursty,
}

impl TraceKind {
    fn parse(text: &str) -> anyhow::Result<Self> {
        match text.trim() {
            "steady" => Ok(Self::Steady),
            "bursty" => Ok(Self::Bursty),
            other => bail!("unknown trace {other:?}: steady or bursty"),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Steady => "steady",
            Self::Bursty => "bursty",
        }
    }
}

fn number<T: std::str::FromStr>(flag: &str, text: &str) -> anyhow::Result<T> {
    text.trim().parse().ok().with_context(|| format!("{flag} takes a number, not {text:?}"))
}

fn parse_args(mut it: impl Iterator<Item = String>) -> anyhow::Result<Option<Args>> {
    let mut args = Args {
        samples: 30,
        warm_sizes: vec![1, 2],
        rate: 1.0,
        seconds: 30.0,
        burst: 4,
        burst_every: 10.0,
        max_live: 12,
        traces: vec![TraceKind::Steady, TraceKind::Bursty],
        max_seconds: 600,
    };
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--samples" => args.samples = number(&flag, &value()?)?,
            "--warm" => args.warm_sizes = value()?.split(',').map(|w| number(&flag, w)).collect::<Result<_, _>>()?,
            "--rate" => args.rate = number(&flag, &value()?)?,
            "--seconds" => args.seconds = number(&flag, &value()?)?,
            "--burst" => args.burst = number(&flag, &value()?)?,
            "--burst-every" => args.burst_every = number(&flag, &value()?)?,
            "--max-live" => args.max_live = number(&flag, &value()?)?,
            "--traces" => args.traces = value()?.split(',').map(TraceKind::parse).collect::<Result<_, _>>()?,
            "--max-seconds" => args.max_seconds = number(&flag, &value()?)?,
            "--help" | "-h" => return Ok(None),
            other => bail!("unknown argument {other:?} (usage: {USAGE})"),
        }
    }
    check(&args)?;
    Ok(Some(args))
}

fn check(args: &Args) -> anyhow::Result<()> {
    if args.samples == 0 || args.samples > 1_000 {
        bail!("--samples must be 1 to 1000");
    }
    if !(0.01..=20.0).contains(&args.rate) || !(1.0..=600.0).contains(&args.seconds) {
        bail!("--rate must be 0.01 to 20 per second and --seconds 1 to 600");
    }
    if args.burst_every < 1.0 || args.burst > 64 {
        bail!("--burst-every must be at least 1 second and --burst at most 64");
    }
    if args.warm_sizes.is_empty() || args.warm_sizes.iter().any(|w| *w == 0 || *w >= args.max_live) {
        bail!("every --warm size must be above 0 and below --max-live ({})", args.max_live);
    }
    if args.traces.is_empty() || args.max_seconds == 0 {
        bail!("--traces needs at least one trace and --max-seconds must be positive");
    }
    Ok(())
}

/// One task of a trace: when it arrives (s from the start), how long it holds
/// its sandbox, and whether a burst brought it.
#[derive(Debug, Clone, Copy)]
struct Arrival {
    at: f64,
    hold: f64,
    burst: bool,
}

/// Poisson arrivals at `rate` per second for `seconds`, plus, when bursty,
/// `burst` arrivals within one second every `burst_every` seconds.
fn trace(kind: TraceKind, args: &Args, seed: u64) -> Vec<Arrival> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut arrivals = Vec::new();
    let mut at = 0.0;
    loop {
        at += -(1.0 - rng.random::<f64>()).ln() / args.rate;
        if at >= args.seconds {
            break;
        }
        arrivals.push(Arrival { at, hold: rng.random_range(HOLD.0..HOLD.1), burst: false });
    }
    if kind == TraceKind::Bursty {
        let mut start = args.burst_every / 2.0;
        while start < args.seconds {
            for _ in 0..args.burst {
                arrivals.push(Arrival { at: start + rng.random::<f64>(), hold: rng.random_range(HOLD.0..HOLD.1), burst: true });
            }
            start += args.burst_every;
        }
    }
    arrivals.sort_by(|a, b| a.at.total_cmp(&b.at));
    arrivals
}

/// What one task of a trace saw.
#[derive(Debug, Clone, Copy)]
struct Served {
    burst: bool,
    warm: bool,
    waited_ms: f64,
}

/// A pool over `provider`, filled to `warm` before it is returned.
async fn full_pool(provider: &Arc<dyn SandboxProvider>, warm: usize, max_live: usize) -> anyhow::Result<SandboxPool> {
    let pool = SandboxPool::new(Arc::clone(provider), PoolConfig { warm, max_live, ..PoolConfig::default() });
    wait_until_ready(&pool, warm).await?;
    Ok(pool)
}

async fn wait_until_ready(pool: &SandboxPool, at_least: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + FILL_TIMEOUT;
    while pool.ready() < at_least {
        if Instant::now() > deadline {
            bail!("the pool did not fill to {at_least} within {} s", FILL_TIMEOUT.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// `samples` acquires, each released before the next; warm ones wait for a
/// full pool first. Returns the acquire times in ms.
async fn acquire_latency(provider: &Arc<dyn SandboxProvider>, warm: bool, samples: usize) -> anyhow::Result<(Vec<f64>, usize)> {
    let pool = full_pool(provider, usize::from(warm), 2).await?;
    let request = PoolConfig::default().default_request;
    let cancel = CancellationToken::new();
    let (mut ms, mut hits) = (Vec::with_capacity(samples), 0);
    for _ in 0..samples {
        if warm {
            wait_until_ready(&pool, 1).await?;
        }
        let started = Instant::now();
        let lease = pool.acquire(&request, &cancel).await?;
        ms.push(ms_since(started));
        hits += usize::from(lease.warm);
        pool.release(lease).await;
    }
    pool.shutdown().await;
    Ok((ms, hits))
}

/// Integrates the pool's ready count over time until `stop`: idle
/// sandbox-seconds, and the most live at once.
async fn sample_idle(pool: SandboxPool, stop: CancellationToken) -> (f64, usize) {
    let mut ticks = tokio::time::interval(SAMPLE_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut idle_s, mut peak_live) = (0.0, 0);
    let mut last = Instant::now();
    loop {
        tokio::select! {
            () = stop.cancelled() => return (idle_s, peak_live),
            _ = ticks.tick() => {}
        }
        let now = Instant::now();
        idle_s += pool.ready() as f64 * now.duration_since(last).as_secs_f64();
        peak_live = peak_live.max(pool.live());
        last = now;
    }
}

/// Plays `arrivals` against a pool of `warm`; every task acquires, holds and
/// releases.
async fn play(provider: &Arc<dyn SandboxProvider>, warm: usize, max_live: usize, arrivals: &[Arrival]) -> anyhow::Result<Value> {
    let pool = full_pool(provider, warm, max_live).await?;
    let stop = CancellationToken::new();
    let sampler = tokio::spawn(sample_idle(pool.clone(), stop.clone()));
    let served = Arc::new(Mutex::new(Vec::with_capacity(arrivals.len())));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for arrival in arrivals.iter().copied() {
        tokio::time::sleep_until((started + Duration::from_secs_f64(arrival.at)).into()).await;
        tasks.spawn(hold_one(pool.clone(), arrival, Arc::clone(&served)));
    }
    while let Some(done) = tasks.join_next().await {
        done.context("a trace task panicked")??;
    }
    let seconds = started.elapsed().as_secs_f64();
    stop.cancel();
    let (idle_s, peak_live) = sampler.await.context("the idle sampler failed")?;
    pool.shutdown().await;
    let served = served.lock().map(|s| s.clone()).unwrap_or_default();
    Ok(trace_report(warm, &served, idle_s, peak_live, seconds))
}

async fn hold_one(pool: SandboxPool, arrival: Arrival, served: Arc<Mutex<Vec<Served>>>) -> anyhow::Result<()> {
    let request = PoolConfig::default().default_request;
    let started = Instant::now();
    let lease = pool.acquire(&request, &CancellationToken::new()).await?;
    let seen = Served { burst: arrival.burst, warm: lease.warm, waited_ms: ms_since(started) };
    if let Ok(mut list) = served.lock() {
        list.push(seen);
    }
    tokio::time::sleep(Duration::from_secs_f64(arrival.hold)).await;
    pool.release(lease).await;
    Ok(())
}

fn hit_rate(served: &[&Served]) -> Value {
    if served.is_empty() {
        return Value::Null;
    }
    json!(round(served.iter().filter(|s| s.warm).count() as f64 / served.len() as f64, 3))
}

fn trace_report(warm: usize, served: &[Served], idle_s: f64, peak_live: usize, seconds: f64) -> Value {
    let steady: Vec<&Served> = served.iter().filter(|s| !s.burst).collect();
    let burst: Vec<&Served> = served.iter().filter(|s| s.burst).collect();
    let all: Vec<&Served> = served.iter().collect();
    let waited: Vec<f64> = served.iter().map(|s| s.waited_ms).collect();
    json!({
        "warm": warm,
        "tasks": served.len(),
        "steady_tasks": steady.len(),
        "burst_tasks": burst.len(),
        "hit_rate": hit_rate(&all),
        "steady_hit_rate": hit_rate(&steady),
        "burst_hit_rate": hit_rate(&burst),
        "acquire_ms": Summary::of(&waited).json(),
        "idle_sandbox_s": round(idle_s, 2),
        "idle_sandbox_s_per_task": round(idle_s / served.len().max(1) as f64, 3),
        "peak_live": peak_live,
        "seconds": round(seconds, 1),
    })
}

fn latency_rows(cold: &[f64], warm: &[f64], unjailed: &[f64]) -> Vec<Vec<String>> {
    [("warm", warm), ("cold", cold), ("cold, no jail", unjailed)]
        .iter()
        .map(|(name, ms)| {
            let summary = Summary::of(ms);
            vec![
                (*name).to_owned(),
                summary.n.to_string(),
                format!("{:.2}", summary.p50),
                format!("{:.2}", summary.p99),
                format!("{:.2}", summary.max),
            ]
        })
        .collect()
}

fn trace_row(kind: TraceKind, report: &Value) -> Vec<String> {
    let cell = |key: &str| match &report[key] {
        Value::Null => "-".to_owned(),
        Value::Number(n) if key.ends_with("rate") => format!("{:.1} %", n.as_f64().unwrap_or(0.0) * 100.0),
        other => other.to_string(),
    };
    vec![
        kind.name().to_owned(),
        cell("warm"),
        cell("tasks"),
        cell("hit_rate"),
        cell("steady_hit_rate"),
        cell("burst_hit_rate"),
        report["acquire_ms"]["p50"].to_string(),
        report["acquire_ms"]["p99"].to_string(),
        cell("idle_sandbox_s_per_task"),
        cell("peak_live"),
    ]
}

async fn run(args: Args) -> anyhow::Result<Value> {
    let provider: Arc<dyn SandboxProvider> = Arc::new(LocalProvider::new(LocalConfig::default()));
    let (warm_ms, warm_hits) = acquire_latency(&provider, true, args.samples).await?;
    let (cold_ms, _) = acquire_latency(&provider, false, args.samples).await?;
    let unjailed: Arc<dyn SandboxProvider> =
        Arc::new(LocalProvider::new(LocalConfig { isolation: Isolation::None, ..LocalConfig::default() }));
    let (unjailed_ms, _) = acquire_latency(&unjailed, false, args.samples).await?;
    drop(unjailed);
    println!("acquire latency, ms ({} each; warm hits {warm_hits}/{})", args.samples, args.samples);
    print_table(&["pool", "n", "p50", "p99", "max"], &latency_rows(&cold_ms, &warm_ms, &unjailed_ms));

    let mut traces = Vec::new();
    let mut rows = Vec::new();
    for (i, kind) in args.traces.iter().enumerate() {
        let arrivals = trace(*kind, &args, SEED + i as u64);
        for warm in &args.warm_sizes {
            let report = play(&provider, *warm, args.max_live, &arrivals).await?;
            rows.push(trace_row(*kind, &report));
            traces.push(json!({ "trace": kind.name(), "report": report }));
        }
    }
    println!(
        "\narrival traces: Poisson {}/s for {} s, holds {}-{} s; bursty adds {} tasks every {} s",
        args.rate, args.seconds, HOLD.0, HOLD.1, args.burst, args.burst_every
    );
    let header = [
        "trace",
        "warm",
        "tasks",
        "hit rate",
        "steady hits",
        "burst hits",
        "acquire p50 ms",
        "acquire p99 ms",
        "idle sbx-s/task",
        "peak live",
    ];
    print_table(&header, &rows);
    let report = json!({
        "bench": "flotilla-pool-bench",
        "build": support::build_kind(),
        "acquire_ms": {
            "warm": Summary::of(&warm_ms).json(),
            "warm_hits": warm_hits,
            "cold": Summary::of(&cold_ms).json(),
            "cold_no_jail": Summary::of(&unjailed_ms).json(),
        },
        "trace_settings": { "rate_per_s": args.rate, "seconds": args.seconds, "hold_s": [HOLD.0, HOLD.1], "burst": args.burst, "burst_every_s": args.burst_every, "max_live": args.max_live, "seed": SEED },
        "traces": traces,
    });
    support::record::append("Warm sandbox pool (`flotilla-pool-bench`)", &figures(&report, args.seconds))?;
    Ok(report)
}

/// The headline figures: acquire latency p50 / p99 (ms), and per trace and
/// warm size its hit rate, idle sandbox-seconds per task and acquire latency.
fn figures(report: &Value, seconds: f64) -> Vec<(String, Option<String>)> {
    let ms = |summary: &Value| {
        let shown = |key: &str| summary.get(key).and_then(support::record::shown);
        Some(format!("{} / {} ms", shown("p50")?, shown("p99")?))
    };
    let percent = |rate: &Value| rate.as_f64().map(|r| format!("{} %", round(r * 100.0, 1)));
    let mut figures = vec![
        ("acquire, warm (jailed), p50 / p99".to_owned(), ms(&report["acquire_ms"]["warm"])),
        ("acquire, cold, jailed, p50 / p99".to_owned(), ms(&report["acquire_ms"]["cold"])),
        ("acquire, cold, no jail, p50 / p99".to_owned(), ms(&report["acquire_ms"]["cold_no_jail"])),
    ];
    for trace in report["traces"].as_array().into_iter().flatten() {
        let run = &trace["report"];
        let name = format!("{} trace ({seconds} s), warm {}", trace["trace"].as_str().unwrap_or("?"), run["warm"]);
        let arrivals = match (percent(&run["steady_hit_rate"]), percent(&run["burst_hit_rate"])) {
            (Some(steady), Some(burst)) if run["burst_tasks"].as_u64() > Some(0) => {
                format!(", steady / burst arrivals {steady} / {burst}")
            }
            _ => String::new(),
        };
        let hits = percent(&run["hit_rate"]).map(|hits| format!("{hits} ({} tasks{arrivals})", run["tasks"]));
        figures.push((format!("{name}: hit rate"), hits));
        figures.push((
            format!("{name}: idle sandbox-s per task"),
            support::record::shown(&run["idle_sandbox_s_per_task"])
                .map(|idle| format!("{idle} (at most {} sandboxes live)", run["peak_live"])),
        ));
        figures.push((format!("{name}: acquire p50 / p99"), ms(&run["acquire_ms"])));
    }
    figures
}

fn main() -> ExitCode {
    support::main(parse_args(support::record::args()), USAGE, |args| args.max_seconds, run)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> anyhow::Result<Option<Args>> {
        parse_args(list.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn flags_parse_and_bad_ones_are_named() {
        let parsed = args(&["--warm", "1,3", "--traces", "steady"]).ok().flatten().map(|a| (a.warm_sizes, a.traces));
        assert_eq!(parsed, Some((vec![1, 3], vec![TraceKind::Steady])));
        assert!(args(&["--warm", "0"]).is_err());
        assert!(args(&["--rate", "fast"]).is_err());
        assert!(args(&["--traces", "spiky"]).is_err());
    }

    #[test]
    fn traces_are_fixed_by_the_seed_and_bursts_are_marked() {
        let Ok(Some(settings)) = args(&["--seconds", "60", "--rate", "2", "--burst", "5", "--burst-every", "20"]) else {
            panic!("default flags parse");
        };
        let bursty = trace(TraceKind::Bursty, &settings, 7);
        assert_eq!(bursty.iter().filter(|a| a.burst).count(), 15, "bursts at 10, 30 and 50 s");
        let steady = bursty.iter().filter(|a| !a.burst).count();
        assert!((80..=160).contains(&steady), "about 120 Poisson arrivals: {steady}");
        assert!(bursty.windows(2).all(|w| w[0].at <= w[1].at) && bursty.iter().all(|a| (HOLD.0..HOLD.1).contains(&a.hold)));
        let again = trace(TraceKind::Bursty, &settings, 7);
        assert_eq!(bursty.len(), again.len());
    }
}
