//! What the benchmark binaries share: the loopback servers they start for
//! themselves (a `redis-server`, an `s3s-fs`), each stopped and its
//! directory removed on drop, percentile summaries of timings, a plain text
//! table, the one-line usage error that exits with status 2, and what Redis
//! and the queue say about a run (memory used, tasks succeeded); `record`
//! appends a run's headline figures to a result file (`--record FILE`).
//!
//! Each benchmark uses a part of this, so items unused by one are allowed.
#![allow(dead_code)]

pub mod record;

use std::future::Future;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};

/// How long a server this module starts may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A child process a benchmark started, killed on drop with its directory.
pub struct Owned {
    child: Child,
    dir: PathBuf,
}

impl Drop for Owned {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

pub fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A program on `PATH`, or where `cargo install` puts it.
pub fn find_binary(name: &str) -> Option<PathBuf> {
    let paths = std::env::var_os("PATH")?;
    let on_path = std::env::split_paths(&paths).map(|d| d.join(name)).find(|p| p.is_file());
    on_path.or_else(|| {
        let home = std::env::var_os("CARGO_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
        Some(home.join("bin").join(name)).filter(|p| p.is_file())
    })
}

fn wait_for_port(port: u16, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!("{what} did not listen on port {port} within {} s", START_TIMEOUT.as_secs())
}

/// A fresh directory for one server of this process.
fn server_dir(label: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("flotilla-{label}-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Starts `s3s-fs` (from `binary`, or found on the machine) on a free
/// loopback port with one empty `bucket`; returns it and its endpoint URL.
pub fn start_s3s_fs(binary: Option<PathBuf>, label: &str, bucket: &str, keys: (&str, &str)) -> anyhow::Result<(Owned, String)> {
    let binary = binary.or_else(|| find_binary("s3s-fs")).context("s3s-fs is not installed: run `bash scripts/setup.sh`")?;
    let port = free_port()?;
    let dir = server_dir(label)?;
    std::fs::create_dir_all(dir.join(bucket)).context("bench bucket dir")?;
    let child = Command::new(&binary)
        .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--access-key", keys.0, "--secret-key", keys.1])
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let owned = Owned { child, dir };
    wait_for_port(port, "s3s-fs")?;
    Ok((owned, format!("http://127.0.0.1:{port}")))
}

/// Starts a `redis-server` without persistence on a free loopback port;
/// `None` when none is installed.
pub fn start_redis(label: &str) -> anyhow::Result<Option<(Owned, String)>> {
    let Some(binary) = find_binary("redis-server") else { return Ok(None) };
    let port = free_port()?;
    let dir = server_dir(label)?;
    let child = Command::new(binary)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let owned = Owned { child, dir };
    wait_for_port(port, "redis-server")?;
    Ok(Some((owned, format!("redis://127.0.0.1:{port}"))))
}

/// Percentiles of a set of samples in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    pub n: usize,
    pub mean: f64,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
}

impl Summary {
    pub fn of(samples: &[f64]) -> Self {
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        let pick = |q: f64| sorted.get(((sorted.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
        let mean = sorted.iter().sum::<f64>() / sorted.len().max(1) as f64;
        Self { n: sorted.len(), mean, p50: pick(0.5), p95: pick(0.95), p99: pick(0.99), max: pick(1.0) }
    }

    pub fn json(&self) -> Value {
        json!({ "n": self.n, "mean": round(self.mean, 3), "p50": round(self.p50, 3), "p95": round(self.p95, 3), "p99": round(self.p99, 3), "max": round(self.max, 3) })
    }

    /// The row cells `p50 p95 p99 max`, to two decimals.
    pub fn cells(&self) -> Vec<String> {
        [self.p50, self.p95, self.p99, self.max].iter().map(|v| format!("{v:.2}")).collect()
    }
}

/// Milliseconds since `started`.
pub fn ms_since(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1000.0
}

pub fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

/// Prints `rows` under `header` as a Markdown table, columns padded.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        println!("| {} |", padded.join(" | "));
    };
    line(header.to_vec());
    println!("|{}|", widths.iter().map(|w| "-".repeat(w + 2)).collect::<Vec<_>>().join("|"));
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// A benchmark's `main`: prints the usage for `--help`, reports bad flags
/// in one line with exit status 2, else runs the benchmark within its
/// `--max-seconds`.
pub fn main<A, F: Future<Output = anyhow::Result<Value>>>(
    parsed: anyhow::Result<Option<A>>,
    usage: &str,
    max_seconds: impl Fn(&A) -> u64,
    bench: impl FnOnce(A) -> F,
) -> ExitCode {
    match parsed {
        Ok(Some(args)) => run_bounded(Duration::from_secs(max_seconds(&args)), bench(args)),
        Ok(None) => {
            println!("{usage}");
            ExitCode::SUCCESS
        }
        Err(e) => usage_error(&e),
    }
}

/// Runs a benchmark on a fresh multi-threaded runtime, stopping it after
/// `limit`, and prints its report as one JSON line.
fn run_bounded(limit: Duration, bench: impl Future<Output = anyhow::Result<Value>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(async { tokio::time::timeout(limit, bench).await }) {
        Ok(Ok(report)) => {
            println!("\n{report}");
            ExitCode::SUCCESS
        }
        Ok(Err(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
        Err(_) => {
            eprintln!("error: the run took longer than --max-seconds {}", limit.as_secs());
            ExitCode::FAILURE
        }
    }
}

/// Reports a bad command line in one line and gives the exit status 2.
pub fn usage_error(error: &anyhow::Error) -> ExitCode {
    eprintln!("error: {error:#}");
    ExitCode::from(2)
}

/// Parses `WxH`, as in `1920x1080`.
pub fn parse_size(text: &str) -> anyhow::Result<(u32, u32)> {
    let parse = || {
        let (w, h) = text.split_once('x')?;
        Some((w.trim().parse().ok()?, h.trim().parse().ok()?))
    };
    match parse() {
        Some((w, h)) if w > 0 && h > 0 => Ok((w, h)),
        _ => bail!("{text:?} is not a size like 1920x1080"),
    }
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` has them
/// (`null` where it cannot be read): figures on a shared machine mean little
/// without them.
pub fn load_average() -> Value {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let loads: Vec<f64> = text.split_whitespace().take(3).filter_map(|n| n.parse().ok()).collect();
    if loads.len() == 3 {
        json!(loads)
    } else {
        Value::Null
    }
}

/// The build these figures come from.
pub fn build_kind() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

/// Bytes of memory the queue's Redis uses (`INFO memory`).
pub async fn used_memory(queue: &flotilla_queue::queue::Queue) -> anyhow::Result<i64> {
    let mut conn = queue.redis().shared();
    let info: String = redis::cmd("INFO").arg("memory").query_async(&mut conn).await?;
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .context("INFO memory has no used_memory")
}

/// Tasks the fleet counted as succeeded.
pub async fn succeeded(queue: &flotilla_queue::queue::Queue) -> anyhow::Result<u64> {
    Ok(queue.reader().fleet_stats().await?.outcomes.get("succeeded").copied().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_nearest_rank() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        let summary = Summary::of(&samples);
        assert_eq!((summary.n, summary.p50, summary.p99, summary.max), (100, 51.0, 99.0, 100.0));
        assert_eq!(Summary::of(&[]).n, 0);
    }

    #[test]
    fn sizes_parse_or_say_why_not() {
        assert_eq!(parse_size("1920x1080").ok(), Some((1920, 1080)));
        assert!(parse_size("1920").is_err());
        assert!(parse_size("0x10").is_err());
    }
}
