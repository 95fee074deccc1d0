//! `flotilla-sandboxd-bench`: what the sandbox host's E2B face costs, on
//! real desktops, printed as a table and one JSON line.
//!
//! - **create**: `POST /sandboxes` answered from the host's pool (the pool
//!   refilled before each sample) and with the pool empty (a cold start);
//! - **pause** and **connect** (resume) of a running desktop;
//! - **screenshot through the Desktop SDK**: PyPI `e2b-desktop`'s
//!   `screenshot()`, timed inside Python (`--python`, a venv with the SDK),
//!   and apart each envd call it makes (an empty command, the capture
//!   command, the file's read and removal);
//! - **paused CPU**: the CPU time all of a paused desktop's processes use in
//!   one second (none, if the pause holds).
//!
//! Every wait is bounded and the whole run stops after `--max-seconds`.

mod support;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use flotilla_sandboxd::{Sandboxd, TestOptions};
use serde_json::{json, Value};

use support::{ms_since, print_table, Summary};

/// How long the pool may take to hand a desktop back before a sample.
const REFILL_TIMEOUT: Duration = Duration::from_secs(60);

struct Args {
    samples: usize,
    python: Option<String>,
    max_seconds: u64,
}

const USAGE: &str = "flotilla-sandboxd-bench [--samples 10] [--python target/venv/bin/python] [--max-seconds 600]";

/// The flags, or `None` for `--help`.
fn parse_args(mut args: impl Iterator<Item = String>) -> anyhow::Result<Option<Args>> {
    let mut parsed = Args { samples: 10, python: None, max_seconds: 600 };
    while let Some(flag) = args.next() {
        let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--samples" => {
                parsed.samples = value()?.parse().ok().filter(|n| *n > 0).context("--samples takes a positive number")?
            }
            "--python" => parsed.python = Some(value()?),
            "--max-seconds" => parsed.max_seconds = value()?.parse().context("--max-seconds takes a number")?,
            "--help" | "-h" => return Ok(None),
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(Some(parsed))
}

/// A control-plane call on `host` with its key.
fn call(host: &Sandboxd, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
    reqwest::Client::new().request(method, format!("{}{path}", host.api_url())).header("X-API-Key", host.test_key())
}

/// Creates a sandbox; its id and how long the create took, in ms.
async fn timed_create(host: &Sandboxd) -> anyhow::Result<(String, f64)> {
    let started = Instant::now();
    let response = call(host, reqwest::Method::POST, "/sandboxes")
        .json(&json!({"templateID": "desktop", "timeout": 300}))
        .send()
        .await?
        .error_for_status()?;
    let took = ms_since(started);
    let body: Value = response.json().await?;
    Ok((body["sandboxID"].as_str().context("an id")?.to_owned(), took))
}

async fn kill(host: &Sandboxd, id: &str) -> anyhow::Result<()> {
    call(host, reqwest::Method::DELETE, &format!("/sandboxes/{id}")).send().await?.error_for_status()?;
    Ok(())
}

/// Waits (bounded) until the pool holds a desktop again.
async fn pool_refilled(host: &Sandboxd) -> anyhow::Result<()> {
    let give_up = Instant::now() + REFILL_TIMEOUT;
    while host.pooled() == 0 {
        if Instant::now() > give_up {
            bail!("the pool did not refill within {REFILL_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// CPU ticks (user + system) `pids` have used, from `/proc`.
fn cpu_ticks(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| {
            let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .sum()
}

/// What `screenshot()` is made of, each envd call timed apart inside
/// Python, ms: an empty command (`true`: the cost of starting a process in
/// the jail), the capture command (`scrot`), the file's read (`/files`) and
/// its removal (the filesystem service).
const PARTS: [&str; 4] = ["command true", "command scrot", "file read", "file remove"];

/// `e2b-desktop`'s `screenshot()` timed `samples` times inside Python, and
/// its parts ([`PARTS`]) as many times each; ms.
async fn sdk_screenshots(host: &Sandboxd, python: &str, samples: usize) -> anyhow::Result<(Vec<f64>, Vec<Vec<f64>>)> {
    let script = format!(
        r#"import json, time
from e2b_desktop import Sandbox
d = Sandbox.create(timeout=300)
d.screenshot()
def timed(call):
    t = time.perf_counter(); call(); return (time.perf_counter() - t) * 1000
shots = [timed(d.screenshot) for _ in range({samples})]
parts = [[], [], [], []]
for i in range({samples}):
    p = f"/tmp/part-{{i}}.png"
    parts[0].append(timed(lambda: d.commands.run("true")))
    parts[1].append(timed(lambda: d.commands.run(f"scrot --pointer {{p}}")))
    parts[2].append(timed(lambda: d.files.read(p, format="bytes")))
    parts[3].append(timed(lambda: d.files.remove(p)))
d.kill()
print(json.dumps({{"shots": shots, "parts": parts}}))
"#
    );
    let output = tokio::process::Command::new(python)
        .args(["-c", &script])
        .env("E2B_API_KEY", host.test_key())
        .env("E2B_API_URL", host.api_url())
        .env("E2B_SANDBOX_URL", host.sandbox_url())
        .env("E2B_DOMAIN", host.domain())
        .output()
        .await
        .context("python runs")?;
    if !output.status.success() {
        bail!("the SDK run failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    let last = String::from_utf8_lossy(&output.stdout).lines().last().unwrap_or_default().to_owned();
    let timed: Value = serde_json::from_str(&last)?;
    let series =
        |v: &Value| -> Vec<f64> { v.as_array().map(|a| a.iter().filter_map(Value::as_f64).collect()).unwrap_or_default() };
    let parts = timed["parts"].as_array().map(|all| all.iter().map(series).collect()).unwrap_or_default();
    Ok((series(&timed["shots"]), parts))
}

async fn run(args: Args) -> anyhow::Result<Value> {
    let host = Sandboxd::start_with(TestOptions { pool: 1, capacity: Some(4), ..TestOptions::default() }).await;
    let (mut warm, mut cold, mut pauses, mut resumes) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.samples {
        pool_refilled(&host).await?;
        let (id, took) = timed_create(&host).await?;
        warm.push(took);
        // With the pool just taken, the next create starts a desktop.
        let (cold_id, took) = timed_create(&host).await?;
        cold.push(took);
        let started = Instant::now();
        call(&host, reqwest::Method::POST, &format!("/sandboxes/{id}/pause")).send().await?.error_for_status()?;
        pauses.push(ms_since(started));
        let started = Instant::now();
        call(&host, reqwest::Method::POST, &format!("/sandboxes/{id}/connect"))
            .json(&json!({"timeout": 300}))
            .send()
            .await?
            .error_for_status()?;
        resumes.push(ms_since(started));
        kill(&host, &id).await?;
        kill(&host, &cold_id).await?;
    }
    // A paused desktop's CPU over one second: every process of its own.
    pool_refilled(&host).await?;
    let (id, _) = timed_create(&host).await?;
    pool_refilled(&host).await?;
    let pids = host.desktop_pids(&id).await;
    if pids.is_empty() {
        bail!("the desktop's processes are not known");
    }
    call(&host, reqwest::Method::POST, &format!("/sandboxes/{id}/pause")).send().await?.error_for_status()?;
    let before = cpu_ticks(&pids);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let paused_ticks = cpu_ticks(&pids).saturating_sub(before);
    println!("the paused desktop has {} processes", pids.len());
    kill(&host, &id).await?;
    let (screenshots, parts) = match &args.python {
        Some(python) => {
            let (shots, parts) = sdk_screenshots(&host, python, args.samples * 3).await?;
            (Some(shots), parts)
        }
        None => (None, Vec::new()),
    };
    host.shutdown().await;

    let rows =
        [("create from the pool", &warm), ("create, cold start", &cold), ("pause", &pauses), ("connect (resume)", &resumes)];
    let mut table: Vec<Vec<String>> =
        rows.iter().map(|(name, samples)| [vec![(*name).to_owned()], Summary::of(samples).cells()].concat()).collect();
    if let Some(shots) = &screenshots {
        table.push([vec!["e2b-desktop screenshot()".to_owned()], Summary::of(shots).cells()].concat());
    }
    for (name, samples) in PARTS.iter().zip(&parts) {
        table.push([vec![format!("  of which: {name}")], Summary::of(samples).cells()].concat());
    }
    print_table(&["sandboxd, ms", "p50", "p95", "p99", "max"], &table);
    println!("CPU ticks of a paused desktop in one second: {paused_ticks}");
    let report = json!({
        "create_from_pool_ms": Summary::of(&warm).json(),
        "create_cold_ms": Summary::of(&cold).json(),
        "pause_ms": Summary::of(&pauses).json(),
        "resume_ms": Summary::of(&resumes).json(),
        "sdk_screenshot_ms": screenshots.as_ref().map(|s| Summary::of(s).json()),
        "sdk_screenshot_parts_ms": PARTS.iter().zip(&parts).map(|(name, s)| (name.to_string(), Summary::of(s).json())).collect::<serde_json::Map<_, _>>(),
        "paused_cpu_ticks_per_s": paused_ticks,
    });
    let ms = |key: &str| {
        let shown = |field: &str| report[key].get(field).and_then(support::record::shown);
        Some(format!("{} / {} ms", shown("p50")?, shown("p99")?))
    };
    support::record::append(
        "Sandbox host (`flotilla-sandboxd-bench`)",
        &[
            ("create from the pool, p50 / p99".to_owned(), ms("create_from_pool_ms")),
            ("create, cold start, p50 / p99".to_owned(), ms("create_cold_ms")),
            ("pause, p50 / p99".to_owned(), ms("pause_ms")),
            ("connect (resume), p50 / p99".to_owned(), ms("resume_ms")),
            ("e2b-desktop screenshot(), p50 / p99".to_owned(), ms("sdk_screenshot_ms")),
            ("CPU ticks of a paused desktop in 1 s".to_owned(), Some(paused_ticks.to_string())),
        ],
    )?;
    Ok(report)
}

fn main() -> ExitCode {
    support::main(parse_args(support::record::args()), USAGE, |args| args.max_seconds, run)
}
