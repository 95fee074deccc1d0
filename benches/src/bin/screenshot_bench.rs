//! `flotilla-screenshot-bench`: what storing a computer-use trajectory's screenshots
//! costs, printed as JSON.
//!
//! It starts its own `s3s-fs` on a free loopback port (and a `redis-server`
//! for the known-hash mode, when one is installed), renders a synthetic
//! 1024x768 trajectory in process with the `png` crate (an idle desktop that
//! repeats one frame, typing that changes a few pixels a step, a page load
//! of a few very different frames, then reading), and stores it:
//!
//! - once per dedup mode, as a first task (nothing stored yet) and then as a
//!   second task on another worker (everything stored): requests, bytes sent
//!   against bytes seen, and time per screenshot;
//! - with the uploader, many tasks at once, for throughput in images/s.

mod support;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use bytes::Bytes;
use flotilla_blobstore::{
    BlobConfig, BlobStats, BlobStore, DedupStrategy, KnownHashes, Uploader, UploaderOptions, KNOWN_HASH_TTL,
};
use flotilla_config::Config;
use serde_json::{json, Value};
use support::round;

const WIDTH: usize = 1024;
const HEIGHT: usize = 768;
const ACCESS_KEY: &str = "AKIAFLOTILLABENCH";
const SECRET_KEY: &str = "flotilla-bench-secret";
const BUCKET: &str = "bench";
/// Runs of each dedup mode, each under a fresh prefix.
const REPETITIONS: usize = 5;

struct Args {
    tasks: usize,
    s3s_fs: Option<PathBuf>,
    no_redis: bool,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args { tasks: 16, s3s_fs: None, no_redis: false };
    let mut it = support::record::args();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--tasks" => args.tasks = it.next().context("--tasks needs a number")?.parse().context("--tasks takes a number")?,
            "--s3s-fs" => args.s3s_fs = Some(PathBuf::from(it.next().context("--s3s-fs needs a path")?)),
            "--no-redis" => args.no_redis = true,
            "--help" | "-h" => {
                println!("flotilla-screenshot-bench [--tasks 16] [--s3s-fs PATH] [--no-redis]");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    if args.tasks == 0 {
        bail!("--tasks must be positive");
    }
    Ok(args)
}

/// An RGB frame being drawn.
#[derive(Clone)]
struct Canvas {
    px: Vec<u8>,
}

impl Canvas {
    fn new() -> Self {
        let mut canvas = Self { px: vec![0; WIDTH * HEIGHT * 3] };
        for y in 0..HEIGHT {
            let shade = (40 + y * 60 / HEIGHT) as u8;
            canvas.fill(0, y, WIDTH, 1, [20, shade, shade + 30]);
        }
        canvas
    }

    fn fill(&mut self, x: usize, y: usize, w: usize, h: usize, rgb: [u8; 3]) {
        for row in y..(y + h).min(HEIGHT) {
            for col in x..(x + w).min(WIDTH) {
                let at = (row * WIDTH + col) * 3;
                self.px[at..at + 3].copy_from_slice(&rgb);
            }
        }
    }

    /// A 7x11 block glyph whose pixels come from the character's bits.
    fn glyph(&mut self, x: usize, y: usize, c: char, rgb: [u8; 3]) {
        if c == ' ' {
            return;
        }
        let mut bits = (c as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for gy in 0..11 {
            for gx in 0..7 {
                bits = bits.rotate_left(5) ^ 0x5bd1_e995;
                if bits & 3 != 0 {
                    self.fill(x + gx, y + gy, 1, 1, rgb);
                }
            }
        }
    }

    fn text(&mut self, x: usize, y: usize, text: &str, rgb: [u8; 3]) {
        for (i, c) in text.chars().enumerate() {
            self.glyph(x + i * 8, y, c, rgb);
        }
    }

    /// A photo-like area: smooth colour with some grain.
    fn photo(&mut self, x: usize, y: usize, w: usize, h: usize, seed: u64) {
        let mut state = seed | 1;
        for row in y..(y + h).min(HEIGHT) {
            for col in x..(x + w).min(WIDTH) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let grain = (state % 24) as usize;
                let at = (row * WIDTH + col) * 3;
                let r = (row * 255 / HEIGHT + grain + seed as usize) % 256;
                let g = (col * 255 / WIDTH + grain * 2) % 256;
                let b = ((row + col) * 128 / (WIDTH + HEIGHT) + grain + 60) % 256;
                self.px[at..at + 3].copy_from_slice(&[r as u8, g as u8, b as u8]);
            }
        }
    }

    fn window(&mut self, x: usize, y: usize, w: usize, h: usize, title: &str) {
        self.fill(x, y, w, h, [245, 245, 245]);
        self.fill(x, y, w, 28, [60, 64, 72]);
        self.text(x + 10, y + 9, title, [230, 230, 230]);
    }

    fn png(&self) -> Bytes {
        let mut out = Vec::with_capacity(256 * 1024);
        let mut encoder = png::Encoder::new(&mut out, WIDTH as u32, HEIGHT as u32);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        encoder.set_compression(png::Compression::Fast);
        let mut writer = encoder.write_header().expect("png header into memory");
        writer.write_image_data(&self.px).expect("png data into memory");
        writer.finish().expect("png end into memory");
        Bytes::from(out)
    }
}

/// The desktop every task starts from: wallpaper, taskbar, icons.
fn desktop() -> Canvas {
    let mut canvas = Canvas::new();
    canvas.fill(0, HEIGHT - 36, WIDTH, 36, [30, 30, 36]);
    canvas.text(12, HEIGHT - 24, "Menu  Files  Browser  Terminal", [220, 220, 220]);
    for i in 0..5 {
        canvas.fill(24, 24 + i * 80, 48, 48, [200, 180 - i as u8 * 20, 90]);
        canvas.text(20, 78 + i * 80, "icon", [240, 240, 240]);
    }
    canvas
}

/// One task's screenshots, one per step. `seed` varies what it types and
/// which page it loads; the idle desktop is the same for every task.
fn trajectory(seed: u64) -> Vec<(&'static str, Bytes)> {
    let mut steps = Vec::new();
    let idle = desktop().png();
    for _ in 0..12 {
        steps.push(("idle", idle.clone()));
    }

    let sentence = format!("search flights to city {seed} for next friday and compare prices");
    let mut editor = desktop();
    editor.window(160, 80, 700, 420, "Search - Browser");
    editor.fill(200, 140, 620, 30, [255, 255, 255]);
    for typed in 1..=24 {
        let mut frame = editor.clone();
        let shown: String = sentence.chars().take(typed * 2).collect();
        frame.text(206, 150, &shown, [20, 20, 20]);
        if typed % 2 == 0 {
            frame.fill(206 + shown.len() * 8, 148, 2, 14, [20, 20, 20]);
        }
        let shot = frame.png();
        steps.push(("typing", shot.clone()));
        if typed % 4 == 0 {
            steps.push(("typing", shot));
        }
    }

    let mut page = desktop();
    page.window(40, 20, 944, 700, "Results - Browser");
    steps.push(("page_load", page.png()));
    for bar in 0..8 {
        page.fill(80, 80 + bar * 40, 500 + (bar % 3) * 100, 16, [225, 225, 225]);
    }
    steps.push(("page_load", page.png()));
    page.photo(80, 420, 860, 260, seed.wrapping_mul(7) + 1);
    steps.push(("page_load", page.png()));
    page.fill(80, 80, 860, 320, [250, 250, 250]);
    for line in 0..12 {
        page.text(
            84,
            90 + line * 24,
            &format!("flight {} to city {seed}: {} eur, departs {}:{:02}", line + 1, 80 + line * 13, 6 + line, line * 5),
            [30, 30, 30],
        );
    }
    let loaded = page.png();
    steps.push(("page_load", loaded.clone()));
    for _ in 0..6 {
        steps.push(("reading", loaded.clone()));
    }
    steps
}

fn blob_config(endpoint: &str, prefix: &str) -> anyhow::Result<BlobConfig> {
    let fleet =
        Config::from_env([("FLOTILLA_S3_BUCKET", BUCKET), ("FLOTILLA_S3_ENDPOINT", endpoint), ("FLOTILLA_S3_PREFIX", prefix)])?;
    Ok(BlobConfig::from_env(
        &fleet,
        [("AWS_ACCESS_KEY_ID", ACCESS_KEY), ("AWS_SECRET_ACCESS_KEY", SECRET_KEY), ("AWS_REGION", "us-east-1")],
    )?)
}

/// How one dedup mode is set up.
struct Mode {
    name: &'static str,
    strategy: DedupStrategy,
    remember: bool,
    known: bool,
}

const MODES: &[Mode] = &[
    Mode { name: "conditional_put", strategy: DedupStrategy::ConditionalPut, remember: false, known: false },
    Mode { name: "head_then_put", strategy: DedupStrategy::HeadThenPut, remember: false, known: false },
    Mode { name: "known_hashes_then_conditional_put", strategy: DedupStrategy::ConditionalPut, remember: false, known: true },
    Mode { name: "default", strategy: DedupStrategy::ConditionalPut, remember: true, known: false },
    Mode { name: "default_with_known_hashes", strategy: DedupStrategy::ConditionalPut, remember: true, known: true },
];

fn make_store(endpoint: &str, prefix: &str, mode: &Mode, known: Option<&KnownHashes>) -> anyhow::Result<BlobStore> {
    let mut config = blob_config(endpoint, prefix)?;
    config.dedup = mode.strategy;
    if !mode.remember {
        config.recent_hashes = 0;
    }
    Ok(match (mode.known, known) {
        (true, Some(known)) => BlobStore::with_known_hashes(config, known.clone()),
        _ => BlobStore::new(config),
    })
}

/// Stores `steps` one after another, as a step loop without an uploader
/// would, and adds each screenshot's latency in ms to `latencies`.
async fn store_sequentially(store: &BlobStore, steps: &[(&'static str, Bytes)], latencies: &mut Vec<f64>) -> anyhow::Result<()> {
    for (_, png) in steps {
        let t = Instant::now();
        store.put_screenshot(png.clone()).await?;
        latencies.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(())
}

/// The counts of one run (they are the same in every repetition) and the
/// latencies of all.
fn costs(stats: &BlobStats, steps: usize, latencies: &mut [f64]) -> Value {
    latencies.sort_by(f64::total_cmp);
    let pick = |q: f64| latencies.get(((latencies.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
    let mean = latencies.iter().sum::<f64>() / latencies.len().max(1) as f64;
    let per_step = |n: u64| round(n as f64 / steps as f64, 3);
    json!({
        "steps": steps,
        "uploads": stats.uploads,
        "uploads_per_step": per_step(stats.uploads),
        "s3_requests_per_step": per_step(stats.put_requests + stats.head_requests),
        "put_requests": stats.put_requests,
        "head_requests": stats.head_requests,
        "redis_lookups": stats.known_lookups,
        "dedup": {"local": stats.dedup_local, "known_hashes": stats.dedup_known, "store": stats.dedup_store},
        "bytes_seen": stats.bytes_seen,
        "bytes_sent": stats.bytes_sent,
        "sent_per_seen": round(stats.bytes_sent as f64 / stats.bytes_seen.max(1) as f64, 3),
        "ms_per_screenshot": {"samples": latencies.len(), "mean": round(mean, 3), "p50": round(pick(0.5), 3), "p95": round(pick(0.95), 3), "max": round(pick(1.0), 3)},
    })
}

/// Runs `tasks` tasks at once, each with its own uploader on one shared
/// store (one worker), and reports throughput.
async fn throughput(endpoint: &str, prefix: &str, trajectories: &[Vec<(&'static str, Bytes)>]) -> anyhow::Result<Value> {
    let store = BlobStore::new(blob_config(endpoint, prefix)?);
    let started = Instant::now();
    let mut handles = Vec::new();
    for steps in trajectories {
        let store = store.clone();
        let steps = steps.clone();
        handles.push(tokio::spawn(async move {
            let uploader = Uploader::spawn(store, UploaderOptions::default());
            for (_, png) in steps {
                uploader.enqueue(png).await?;
            }
            uploader.finish().await.map(|stored| stored.len())
        }));
    }
    let mut images = 0;
    for handle in handles {
        images += handle.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let stats = store.stats();
    Ok(json!({
        "tasks": trajectories.len(),
        "images": images,
        "seconds": round(elapsed, 3),
        "images_per_s": round(images as f64 / elapsed, 1),
        "uploads": stats.uploads,
        "uploads_per_s": round(stats.uploads as f64 / elapsed, 1),
        "mb_seen_per_s": round(stats.bytes_seen as f64 / elapsed / 1e6, 1),
        "mb_sent_per_s": round(stats.bytes_sent as f64 / elapsed / 1e6, 1),
        "bytes_seen": stats.bytes_seen,
        "bytes_sent": stats.bytes_sent,
        "put_requests": stats.put_requests,
    }))
}

async fn run(args: Args) -> anyhow::Result<Value> {
    let (_s3, endpoint) = support::start_s3s_fs(args.s3s_fs, "shot-bench", BUCKET, (ACCESS_KEY, SECRET_KEY))?;
    let redis = if args.no_redis { None } else { support::start_redis("shot-bench-redis")? };
    let known = match &redis {
        Some((_, url)) => {
            let client = redis::Client::open(url.as_str())?;
            Some(KnownHashes::new(redis::aio::ConnectionManager::new(client).await?, "bench", KNOWN_HASH_TTL))
        }
        None => None,
    };

    let render_started = Instant::now();
    let trajectories: Vec<Vec<(&'static str, Bytes)>> = (0..args.tasks as u64).map(trajectory).collect();
    let render_ms = render_started.elapsed().as_secs_f64() * 1000.0;
    let first = &trajectories[0];
    let frames: usize = trajectories.iter().map(Vec::len).sum();
    let mut phases = serde_json::Map::new();
    for phase in ["idle", "typing", "page_load", "reading"] {
        let of_phase: Vec<&Bytes> = first.iter().filter(|(p, _)| *p == phase).map(|(_, b)| b).collect();
        let distinct: std::collections::HashSet<&[u8]> = of_phase.iter().map(|b| b.as_ref()).collect();
        let bytes: usize = of_phase.iter().map(|b| b.len()).sum();
        phases.insert(
            phase.into(),
            json!({"steps": of_phase.len(), "distinct": distinct.len(), "mean_png_bytes": bytes / of_phase.len().max(1)}),
        );
    }

    let mut modes = serde_json::Map::new();
    for (i, mode) in MODES.iter().enumerate() {
        if mode.known && known.is_none() {
            modes.insert(mode.name.into(), json!("skipped: no redis-server"));
            continue;
        }
        let (mut cold_ms, mut warm_ms) = (Vec::new(), Vec::new());
        let mut counts = None;
        for rep in 0..REPETITIONS {
            let prefix = format!("mode-{i}-{rep}");
            let first_task = make_store(&endpoint, &prefix, mode, known.as_ref())?;
            let second_worker = make_store(&endpoint, &prefix, mode, known.as_ref())?;
            // Connections and the conditional-PUT probe, outside the timing.
            first_task.check().await?;
            second_worker.check().await?;
            store_sequentially(&first_task, first, &mut cold_ms).await?;
            store_sequentially(&second_worker, first, &mut warm_ms).await?;
            counts.get_or_insert((first_task.stats(), second_worker.stats()));
        }
        let (cold, warm) = counts.context("at least one repetition")?;
        modes.insert(
            mode.name.into(),
            json!({
                "first_task": costs(&cold, first.len(), &mut cold_ms),
                "same_trajectory_on_another_worker": costs(&warm, first.len(), &mut warm_ms),
            }),
        );
    }

    let fleet = throughput(&endpoint, "throughput", &trajectories).await?;
    let report = json!({
        "trajectory": {
            "resolution": [WIDTH, HEIGHT],
            "steps_per_task": first.len(),
            "phases": phases,
            "bytes_per_task": first.iter().map(|(_, b)| b.len()).sum::<usize>(),
            "render_and_encode_ms_per_task": round(render_ms / trajectories.len() as f64, 1),
            "frames_rendered": frames,
        },
        "modes": modes,
        "uploader_throughput": fleet,
        "store": "s3s-fs 0.14.1 on loopback",
        "build": support::build_kind(),
    });
    support::record::append("Screenshot store (`flotilla-screenshot-bench`)", &figures(&report))?;
    Ok(report)
}

/// The headline figures: per mode, what a first task and the same
/// trajectory on another worker send and wait per screenshot; the
/// uploader's throughput.
fn figures(report: &Value) -> Vec<(String, Option<String>)> {
    let mut figures = Vec::new();
    for (mode, costs) in report["modes"].as_object().into_iter().flatten() {
        for (run, label) in
            [("first_task", "first task"), ("same_trajectory_on_another_worker", "same trajectory, another worker")]
        {
            let of = &costs[run];
            let sent = of["sent_per_seen"].as_f64().map(|s| s.to_string());
            let ms_at = |key: &str| support::record::shown(&of["ms_per_screenshot"][key]);
            let ms = ms_at("p50").zip(ms_at("p95")).map(|(p50, p95)| format!("{p50} / {p95} ms"));
            figures.push((format!("{mode}, {label}: bytes sent per byte seen"), sent));
            figures.push((format!("{mode}, {label}: ms per screenshot, p50 / p95"), ms));
        }
    }
    let fleet = &report["uploader_throughput"];
    let throughput =
        format!("{} images/s, {} MB/s sent ({} tasks)", fleet["images_per_s"], fleet["mb_sent_per_s"], fleet["tasks"]);
    figures.push(("uploader throughput".to_owned(), fleet.is_object().then_some(throughput)));
    figures
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let report = runtime.block_on(run(args))?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
