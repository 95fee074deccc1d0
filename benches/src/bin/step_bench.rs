//! `flotilla-step-bench`: what one step of the computer-use loop costs beyond the
//! model and the action itself, on a real local desktop, printed as a table
//! and one JSON line.
//!
//! For each screen size it claims a real task on its own `redis-server`
//! (or `--redis-url`) as a worker does (advertising the capabilities a
//! worker with these tools has, ending the task and acknowledging its entry
//! through the [`Acker`]), opens a [`Session`] on a `LocalProvider` desktop,
//! fills the terminal with text, and takes `--steps` pairs of steps, each
//! typing one key (so every screenshot differs), the two kinds alternating
//! so both see the same desktop and load:
//!
//! - **parts**: the step split into its pieces, each timed: the action's
//!   `action`/`action_completed` events (the action's own time taken out),
//!   the screenshot, handing it to an uploader (blake3, queue), scaling it
//!   for the model, and base64-encoding it as a request carries it. The
//!   uploader's feed emits the `screenshot` events in the background; their
//!   time is shown but is not on the step's path.
//! - **session**: the same step through [`Session::observe_settled`], as
//!   the pipelines take it; its `total` is the step loop's overhead.
//!   Observing waits on purpose for the screen to settle (at least 100 ms
//!   after the action and until the display has reported no change for
//!   50 ms, then one capture; a provider that cannot report changes is
//!   captured every 50 ms until two captures match); that wait is the
//!   desktop's time, like the action's, and is shown apart from the work
//!   (`observe` is the wall time less the wait asked for, so a late
//!   wake-up counts as work).
//!
//! With `--through-sandboxd` the desktops come from a `flotilla-sandboxd`
//! it starts on loopback, reached as a worker reaches one: the E2B provider
//! over HTTP, using the host's desktop extension (one call per capture or
//! action; the settle wait is the host's).
//!
//! Screenshots go to an `s3s-fs` it starts on loopback (`--no-store` keeps
//! none). Every wait is bounded and the whole run stops after
//! `--max-seconds`.

mod support;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use flotilla_blobstore::{content_hash, BlobConfig, BlobStore, Uploader, UploaderOptions};
use flotilla_config::Config;
use flotilla_queue::queue::{Attempt, Claimer, NewTask, Queue, StartOutcome, Terminal};
use flotilla_sandboxd::{Sandboxd, TestOptions};
use flotilla_types::action::Action;
use flotilla_types::event::EventKind;
use flotilla_types::ids::{TaskId, TenantId};
use flotilla_types::task::{Pipeline, SandboxSpec, TaskSpec};
use flotilla_worker::acker::Acker;
use flotilla_worker::execute::AttemptHandle;
use flotilla_worker::metrics::WorkerMetrics;
use flotilla_worker::model::Screen;
use flotilla_worker::pipeline::scale::{Scale, DEFAULT_TARGET};
use flotilla_worker::pipeline::{Session, Steps, Tools};
use flotilla_worker::sandbox::{
    E2bProvider, Isolation, LocalConfig, LocalProvider, PoolConfig, SandboxLimits, SandboxPool, SandboxProvider, Screenshot,
};
use flotilla_worker::{PipelineError, Registry, TaskHandle, TaskRun};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use support::{ms_since, print_table, Summary};

const ACCESS_KEY: &str = "AKIAFLOTILLABENCH";
const SECRET_KEY: &str = "flotilla-bench-secret";
const BUCKET: &str = "bench";
/// Steps taken before timing starts, in each loop.
const WARMUP: usize = 5;
/// What the terminal runs first, so the screen is full of text.
const FILL_COMMAND: &str = "ls -l /usr/bin | head -n 400\n";
/// How long the terminal gets to draw that.
const FILL_PAUSE: Duration = Duration::from_millis(500);
/// How long the bench waits for its own task to be handed to it.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(10);
/// The pause between claims that found nothing.
const CLAIM_POLL: Duration = Duration::from_millis(50);

struct Args {
    steps: usize,
    sizes: Vec<(u32, u32)>,
    target: (u32, u32),
    redis_url: Option<String>,
    s3s_fs: Option<PathBuf>,
    store: bool,
    /// The cores each desktop may use (its control group's quota).
    sandbox_cpus: f64,
    /// Whether desktops run in their jail (`--no-jail`: plain processes, to
    /// tell what the jail costs).
    jailed: bool,
    /// Whether desktops come from a sandbox host over HTTP.
    through_sandboxd: bool,
    max_seconds: u64,
}

const USAGE: &str = "flotilla-step-bench [--steps 200] [--sizes 1024x768,1920x1080] [--target 1024x768] [--redis-url URL] [--s3s-fs PATH] [--no-store] [--sandbox-cpus 1.0] [--no-jail] [--through-sandboxd] [--max-seconds 600]";

fn parse_args(mut it: impl Iterator<Item = String>) -> anyhow::Result<Option<Args>> {
    let mut args = Args {
        steps: 200,
        sizes: vec![(1024, 768), (1920, 1080)],
        target: DEFAULT_TARGET,
        redis_url: None,
        s3s_fs: None,
        store: true,
        sandbox_cpus: SandboxLimits::default().cpus,
        jailed: true,
        through_sandboxd: false,
        max_seconds: 600,
    };
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--steps" => args.steps = value()?.parse().context("--steps takes a number")?,
            "--sizes" => {
                args.sizes = value()?.split(',').map(support::parse_size).collect::<Result<_, _>>().context("--sizes")?
            }
            "--target" => args.target = support::parse_size(&value()?).context("--target")?,
            "--redis-url" => args.redis_url = Some(value()?),
            "--s3s-fs" => args.s3s_fs = Some(PathBuf::from(value()?)),
            "--no-store" => args.store = false,
            "--no-jail" => args.jailed = false,
            "--through-sandboxd" => args.through_sandboxd = true,
            "--sandbox-cpus" => {
                args.sandbox_cpus = value()?
                    .parse()
                    .ok()
                    .filter(|c: &f64| c.is_finite() && *c > 0.0)
                    .context("--sandbox-cpus takes a number of cores")?
            }
            "--max-seconds" => args.max_seconds = value()?.parse().context("--max-seconds takes a number")?,
            "--help" | "-h" => return Ok(None),
            other => bail!("unknown argument {other:?} (usage: {USAGE})"),
        }
    }
    if args.steps == 0 || args.steps > 10_000 {
        bail!("--steps must be 1 to 10000");
    }
    if args.sizes.is_empty() || args.max_seconds == 0 {
        bail!("--sizes needs at least one size and --max-seconds must be positive");
    }
    Ok(Some(args))
}

/// The servers and tools every screen size is measured with.
struct Bench {
    queue: Queue,
    claimer: Claimer,
    acker: Acker,
    metrics: WorkerMetrics,
    tools: Arc<Tools>,
    uploads: Option<BlobStore>,
    tenant: TenantId,
    target: (u32, u32),
    steps: usize,
}

/// The timings of one loop, in ms per step, by part.
#[derive(Default)]
struct Samples {
    parts: Vec<(&'static str, Vec<f64>)>,
    png_bytes: Vec<f64>,
    model_png_bytes: Vec<f64>,
}

impl Samples {
    fn add(&mut self, part: &'static str, ms: f64) {
        match self.parts.iter_mut().find(|(name, _)| *name == part) {
            Some((_, samples)) => samples.push(ms),
            None => self.parts.push((part, vec![ms])),
        }
    }

    fn json(&self) -> Value {
        let parts: serde_json::Map<String, Value> =
            self.parts.iter().map(|(name, s)| ((*name).to_owned(), Summary::of(s).json())).collect();
        let mut report = json!({ "ms": parts });
        if !self.png_bytes.is_empty() {
            report["png_bytes_mean"] = json!(Summary::of(&self.png_bytes).mean.round());
            report["model_png_bytes_mean"] = json!(Summary::of(&self.model_png_bytes).mean.round());
        }
        report
    }
}

impl Bench {
    /// Submits a task whose sandbox has `size` and claims it as a worker
    /// would: entries with nothing to run are acknowledged, an empty claim
    /// is asked again a little later, up to [`CLAIM_TIMEOUT`].
    async fn claim(&mut self, size: (u32, u32)) -> anyhow::Result<Attempt> {
        let sandbox = SandboxSpec { resolution: Some([size.0, size.1]), ..SandboxSpec::default() };
        let max_steps = u32::try_from(4 * (self.steps + WARMUP) + 8).unwrap_or(u32::MAX);
        let spec = TaskSpec {
            prompt: "step bench".into(),
            pipeline: Some(Pipeline::Scripted),
            sandbox: Some(sandbox),
            max_steps: Some(max_steps),
            ..TaskSpec::default()
        };
        let id = TaskId::generate();
        self.queue
            .submitter()
            .create_tasks(vec![NewTask { id: id.clone(), tenant: self.tenant.clone(), batch: None, spec }])
            .await?;
        let deadline = Instant::now() + CLAIM_TIMEOUT;
        while Instant::now() < deadline {
            let claims = self.claimer.next(1).await?;
            if claims.is_empty() {
                tokio::time::sleep(CLAIM_POLL).await;
            }
            for claim in claims {
                match claim.outcome {
                    Ok(StartOutcome::Started(attempt)) if attempt.task_id() == &id => return Ok(*attempt),
                    Ok(StartOutcome::Started(attempt)) => {
                        bail!("claimed task {} that the bench did not submit", attempt.task_id())
                    }
                    Ok(StartOutcome::AlreadyEnded { outcome, from_this_entry }) => {
                        self.acker.ack(claim.delivery, from_this_entry.then_some(outcome));
                    }
                    Ok(StartOutcome::Nothing(_)) => self.acker.ack(claim.delivery, None),
                    Err(e) => bail!("the bench task could not be started: {e}"),
                }
            }
        }
        bail!("the bench task was not handed out within {CLAIM_TIMEOUT:?}")
    }

    /// Measures both loops on one desktop of `size`.
    async fn measure(&mut self, size: (u32, u32)) -> anyhow::Result<Value> {
        let attempt = Arc::new(self.claim(size).await?);
        let run = TaskRun {
            task: Arc::new(AttemptHandle::new(Arc::clone(&attempt), None)),
            cancel: CancellationToken::new(),
            tools: Arc::clone(&self.tools),
            metrics: self.metrics.clone(),
            hand_back: CancellationToken::new(),
        };
        let mut session = Session::open(&run).await?;
        let result = self.loops(&run, &mut session).await;
        let result = session.close(result).await;
        self.acker.finish(attempt, Terminal::Succeeded(json!({})));
        let (parts, whole, feed) = result?;
        let scale = Scale::fit(size, self.target);
        print_parts(size, scale.model, &parts, &whole, &feed);
        Ok(
            json!({ "screen": [size.0, size.1], "model": [scale.model.0, scale.model.1], "parts": parts.json(), "session": whole.json(), "background": feed.json() }),
        )
    }

    async fn loops(&self, run: &TaskRun, session: &mut Session) -> Result<(Samples, Samples, Samples), PipelineError> {
        let scale = Scale::fit(session.resolution(), self.target);
        let mut steps = Steps::new(run);
        fill_screen(session, &mut steps).await?;
        let (uploader, feed) = self.own_uploader(&run.task);
        let (mut parts, mut whole) = (Samples::default(), Samples::default());
        // The two kinds of step alternate, so both see the same desktop and load.
        for i in 0..WARMUP + self.steps {
            let (mut split, mut through_session) = (Samples::default(), Samples::default());
            split_step(session, &mut steps, &scale, uploader.as_ref(), &mut split).await?;
            session_step(session, &mut steps, &scale, &mut through_session).await?;
            if i >= WARMUP {
                merge(&mut parts, split);
                merge(&mut whole, through_session);
            }
        }
        let background = finish_uploader(uploader, feed).await?;
        Ok((parts, whole, background))
    }

    /// An uploader beside the session's, whose feed emits the `screenshot`
    /// events and times each emit.
    fn own_uploader(&self, task: &Arc<dyn TaskHandle>) -> (Option<Uploader>, Option<tokio::task::JoinHandle<Vec<f64>>>) {
        let Some(store) = &self.uploads else { return (None, None) };
        let uploader = Uploader::spawn(store.clone(), UploaderOptions::default());
        let mut feed = uploader.feed();
        let task = Arc::clone(task);
        let emits = tokio::spawn(async move {
            let mut ms = Vec::new();
            while let Some((_, image)) = feed.next().await {
                let started = Instant::now();
                let event = EventKind::Screenshot {
                    hash: image.hash,
                    key: image.key,
                    bytes: image.bytes,
                    dedup: image.dedup,
                    step: None,
                };
                if task.emit(event, &[]).await.is_err() {
                    break;
                }
                ms.push(ms_since(started));
            }
            ms
        });
        (Some(uploader), Some(emits))
    }
}

/// Waits until the bench's own screenshots are stored and announced; returns
/// the emit times.
async fn finish_uploader(
    uploader: Option<Uploader>,
    feed: Option<tokio::task::JoinHandle<Vec<f64>>>,
) -> Result<Samples, PipelineError> {
    let mut background = Samples::default();
    let (Some(uploader), Some(feed)) = (uploader, feed) else { return Ok(background) };
    let started = Instant::now();
    uploader.finish().await.map_err(|e| PipelineError::Retryable(e.to_string()))?;
    background.add("flush_after_loop", ms_since(started));
    let emits = feed.await.map_err(|e| PipelineError::Retryable(e.to_string()))?;
    background.parts.push(("screenshot_event", emits));
    Ok(background)
}

fn merge(into: &mut Samples, from: Samples) {
    for (part, samples) in from.parts {
        for ms in samples {
            into.add(part, ms);
        }
    }
    into.png_bytes.extend(from.png_bytes);
    into.model_png_bytes.extend(from.model_png_bytes);
}

/// Types a command that fills the terminal with text, as a busy screen.
async fn fill_screen(session: &Session, steps: &mut Steps) -> Result<(), PipelineError> {
    act(session, steps, &Action::Type { text: FILL_COMMAND.into() }).await?;
    tokio::time::sleep(FILL_PAUSE).await;
    Ok(())
}

/// Takes one step of `action` with its events; returns the ms the events
/// and step bookkeeping took, the action's own time taken out.
async fn act(session: &Session, steps: &mut Steps, action: &Action) -> Result<f64, PipelineError> {
    let (provider, id) = session.sandbox()?;
    let mut performed = 0.0;
    let started = Instant::now();
    steps
        .take(action, async {
            let began = Instant::now();
            let done = provider.act(id, action).await.map_err(|e| PipelineError::Retryable(e.to_string()));
            performed = ms_since(began);
            done
        })
        .await?;
    Ok(ms_since(started) - performed)
}

/// The action of step `n`: one key, so every screenshot differs.
fn step_action(n: usize) -> Action {
    let key = char::from(b'a' + (n % 26) as u8);
    Action::Type { text: key.to_string() }
}

/// One step in parts, each timed.
async fn split_step(
    session: &Session,
    steps: &mut Steps,
    scale: &Scale,
    uploader: Option<&Uploader>,
    out: &mut Samples,
) -> Result<(), PipelineError> {
    let started = Instant::now();
    let events = act(session, steps, &step_action(steps.taken() as usize)).await?;
    let action_done = Instant::now();
    out.add("events", events);

    let (provider, id) = session.sandbox()?;
    let t = Instant::now();
    let shot = provider.screenshot(id).await.map_err(|e| PipelineError::Retryable(e.to_string()))?;
    out.add("screenshot", ms_since(t));

    let t = Instant::now();
    if let Some(uploader) = uploader {
        uploader.enqueue(shot.png.clone()).await.map_err(|e| PipelineError::Retryable(e.to_string()))?;
    }
    out.add("enqueue", ms_since(t));
    let t = Instant::now();
    let _ = content_hash(&shot.png);
    out.add("blake3_alone", ms_since(t));

    let screen = shown(scale, &shot, out)?;
    let t = Instant::now();
    let url = data_url(&screen);
    out.add("base64", ms_since(t));
    out.add("total", events + ms_since(action_done));
    out.add("wall_with_action", ms_since(started));
    out.png_bytes.push(shot.png.len() as f64);
    out.model_png_bytes.push(url.len() as f64 * 3.0 / 4.0);
    Ok(())
}

/// One step through the session, as the pipelines take it; the settle
/// sleeps apart from the work.
async fn session_step(session: &Session, steps: &mut Steps, scale: &Scale, out: &mut Samples) -> Result<(), PipelineError> {
    let events = act(session, steps, &step_action(steps.taken() as usize)).await?;
    let t = Instant::now();
    let settled = session.observe_settled().await?;
    let observe = ms_since(t) - settled.waited.as_secs_f64() * 1000.0;
    out.add("observe", observe);
    out.add("settle_wait", settled.waited.as_secs_f64() * 1000.0);
    out.add("captures", f64::from(settled.captures));
    let t = Instant::now();
    let screen = shown(scale, &settled.shot, out)?;
    let _ = data_url(&screen);
    out.add("total", events + observe + ms_since(t));
    Ok(())
}

/// The screenshot scaled for the model, timed.
fn shown(scale: &Scale, shot: &Screenshot, out: &mut Samples) -> Result<Screen, PipelineError> {
    let t = Instant::now();
    let screen = scale.screen_for_model(shot).map_err(|e| PipelineError::Retryable(e.to_string()))?;
    out.add("scale", ms_since(t));
    Ok(screen)
}

/// The screen as an OpenAI request carries it: a base64 `data:` URL.
fn data_url(screen: &Screen) -> String {
    format!("data:image/png;base64,{}", BASE64.encode(&screen.png))
}

/// The parts on the step's path, in the order the table shows them.
const TABLE_PARTS: &[&str] = &["screenshot", "enqueue", "scale", "base64", "events", "total"];

fn print_parts(size: (u32, u32), model: (u32, u32), parts: &Samples, whole: &Samples, background: &Samples) {
    let header = ["part (ms)", "p50", "p95", "p99", "max"];
    let mut rows = Vec::new();
    let row = |label: String, samples: &[f64]| {
        let mut cells = vec![label];
        cells.extend(Summary::of(samples).cells());
        cells
    };
    for part in TABLE_PARTS {
        if let Some((_, samples)) = parts.parts.iter().find(|(name, _)| name == part) {
            rows.push(row((*part).to_owned(), samples));
        }
    }
    for (name, samples) in &whole.parts {
        match *name {
            "captures" => rows.push(row("session captures (count)".to_owned(), samples)),
            "observe" | "settle_wait" | "total" => rows.push(row(format!("session {name}"), samples)),
            _ => {}
        }
    }
    for (name, samples) in &background.parts {
        rows.push(row(format!("background {name}"), samples));
    }
    let png = Summary::of(&parts.png_bytes).mean / 1024.0;
    let model_png = Summary::of(&parts.model_png_bytes).mean / 1024.0;
    println!(
        "\n{}x{} screen, model sees {}x{} (PNG {png:.1} KiB, model PNG {model_png:.1} KiB)",
        size.0, size.1, model.0, model.1
    );
    print_table(&header, &rows);
}

fn blob_store(endpoint: &str, prefix: &str) -> anyhow::Result<BlobStore> {
    let fleet =
        Config::from_env([("FLOTILLA_S3_BUCKET", BUCKET), ("FLOTILLA_S3_ENDPOINT", endpoint), ("FLOTILLA_S3_PREFIX", prefix)])?;
    let config = BlobConfig::from_env(
        &fleet,
        [("AWS_ACCESS_KEY_ID", ACCESS_KEY), ("AWS_SECRET_ACCESS_KEY", SECRET_KEY), ("AWS_REGION", "us-east-1")],
    )?;
    Ok(BlobStore::new(config))
}

async fn run(args: Args) -> anyhow::Result<Value> {
    let own_redis = match &args.redis_url {
        Some(_) => None,
        None => Some(
            support::start_redis("step-bench-redis")?
                .context("redis-server is not installed: run `bash scripts/setup.sh` or pass --redis-url")?,
        ),
    };
    let url = args.redis_url.clone().or_else(|| own_redis.as_ref().map(|(_, url)| url.clone())).context("no Redis")?;
    let s3 = if args.store {
        Some(support::start_s3s_fs(args.s3s_fs.clone(), "step-bench-s3", BUCKET, (ACCESS_KEY, SECRET_KEY))?)
    } else {
        None
    };
    let prefix = format!("step-bench-{}", std::process::id());
    let config = Config::from_env([("FLOTILLA_REDIS_URL", url.as_str()), ("FLOTILLA_KEY_PREFIX", prefix.as_str())])?;
    let queue = Queue::connect(&config).await?;
    let (blobs, uploads) = match &s3 {
        Some((_, endpoint)) => {
            let (session_store, bench_store) =
                (blob_store(endpoint, &prefix)?, blob_store(endpoint, &format!("{prefix}-parts"))?);
            session_store.check().await?;
            bench_store.check().await?;
            (Some(session_store), Some(bench_store))
        }
        None => (None, None),
    };
    let limits = SandboxLimits { cpus: args.sandbox_cpus, ..SandboxLimits::default() };
    let isolation = if args.jailed { Isolation::Full } else { Isolation::None };
    let host = if args.through_sandboxd { Some(Sandboxd::start_with(TestOptions::default()).await) } else { None };
    let provider: Arc<dyn SandboxProvider> = match &host {
        Some(host) => Arc::new(E2bProvider::new(host.config())?),
        None => Arc::new(LocalProvider::new(LocalConfig { limits, isolation, ..LocalConfig::default() })),
    };
    let pool = SandboxPool::new(provider, PoolConfig { warm: 0, max_live: 2, ..PoolConfig::default() });
    let tools = Arc::new(Tools {
        sandboxes: Some(pool.clone()),
        blobs,
        uploads: UploaderOptions::default(),
        gateway: None,
        live: None,
        pricing: Default::default(),
        profile_key: None,
        park_waiting_after: std::time::Duration::from_secs(60),
        templates: Default::default(),
    });
    let caps = flotilla_worker::worker::capabilities(&config, &Registry::for_config(&config), &tools);
    let metrics = WorkerMetrics::new();
    let (acker, acked) = Acker::spawn(queue.clone(), metrics.clone());
    let claimer = queue.claimer(format!("step-bench-{}", std::process::id()), caps);
    let tenant = TenantId::parse("bench")?;
    let mut bench = Bench { queue, claimer, acker, metrics, tools, uploads, tenant, target: args.target, steps: args.steps };
    let load_before = support::load_average();
    let mut sizes = Vec::new();
    for size in &args.sizes {
        sizes.push(bench.measure(*size).await?);
    }
    let load_after = support::load_average();
    drop(bench);
    acked.await?;
    pool.shutdown().await;
    let desktops = match host {
        Some(host) => {
            host.shutdown().await;
            "flotilla-sandboxd on loopback, through the E2B provider"
        }
        None => "in process",
    };
    let report = json!({
        "bench": "flotilla-step-bench",
        "steps": args.steps,
        "store": if args.store { "s3s-fs on loopback" } else { "none" },
        "desktops": desktops,
        "redis": if own_redis.is_some() { "own redis-server on loopback" } else { "given --redis-url" },
        "build": support::build_kind(),
        "load_average": { "before": load_before, "after": load_after },
        "sizes": sizes,
    });
    support::record::append("Step-loop overhead (`flotilla-step-bench`)", &figures(&report))?;
    Ok(report)
}

/// The headline figures of each size: the step's overhead, the step through
/// the session, the screenshot; p50 / p95 in ms.
fn figures(report: &Value) -> Vec<(String, Option<String>)> {
    let mut figures = Vec::new();
    for size in report["sizes"].as_array().into_iter().flatten() {
        let name = format!("{}×{} → {}×{}", size["screen"][0], size["screen"][1], size["model"][0], size["model"][1]);
        let ms = |summary: &Value| {
            let shown = |key: &str| summary.get(key).and_then(support::record::shown);
            Some(format!("{} / {} ms", shown("p50")?, shown("p95")?))
        };
        let png = size["parts"]["png_bytes_mean"].as_f64().map(|b| format!(" (PNG {:.0} KiB)", b / 1024.0)).unwrap_or_default();
        figures.push((format!("{name}, whole step overhead, p50 / p95"), ms(&size["parts"]["ms"]["total"])));
        figures.push((format!("{name}, whole, through the session, p50 / p95"), ms(&size["session"]["ms"]["total"])));
        figures.push((format!("{name}, screenshot, p50 / p95"), ms(&size["parts"]["ms"]["screenshot"]).map(|ms| ms + &png)));
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
        let parsed =
            args(&["--steps", "50", "--sizes", "800x600", "--no-store"]).ok().flatten().map(|a| (a.steps, a.sizes, a.store));
        assert_eq!(parsed, Some((50, vec![(800, 600)], false)));
        assert!(args(&["--steps", "0"]).is_err());
        assert!(args(&["--sizes", "big"]).is_err());
        let unknown = args(&["--fast"]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(unknown.contains("--fast"), "{unknown}");
    }
}
