//! `flotilla-archive-bench`: Redis memory per finished task while the
//! task is hot and after the archive pass has moved it to the object store.
//!
//! It starts its own `redis-server` and `s3s-fs` on free loopback ports,
//! submits `--tasks` tasks through the real queue code and drains them with
//! one worker whose pipeline records a typical scripted or model run: eight
//! events (`queued`, `started`, a `reasoning` line, four `screenshot`
//! references and `succeeded`). It reads `INFO memory` before the tasks,
//! once they have all finished, and after archive passes (the queue's clock
//! moved past the hot window) have moved them; then reads a sample of them
//! back from the archive. Prints one JSON object.

mod support;

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use flotilla_blobstore::{content_hash, BlobConfig, BlobStore};
use flotilla_config::Config;
use flotilla_queue::queue::{NewTask, Queue};
use flotilla_types::event::EventKind;
use flotilla_types::ids::{TaskId, TenantId};
use flotilla_types::task::{Pipeline, TaskSpec};
use flotilla_worker::{Outcome, PipelineError, PipelineRunner, Registry, TaskRun};
use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const BUCKET: &str = "archive-bench";
const ACCESS_KEY: &str = "bench-access";
const SECRET_KEY: &str = "bench-secret-key";
/// The hot window the bench sets (the pass runs on a clock moved past it).
const HOT_S: i64 = 60;

/// A run that reasons once and references four screenshots.
struct FourShots;

impl PipelineRunner for FourShots {
    fn run<'a>(&'a self, run: &'a TaskRun) -> BoxFuture<'a, Result<Outcome, PipelineError>> {
        async move {
            let task = &run.task;
            task.emit(EventKind::Reasoning { text: "open the form and fill in the order".into() }, &[]).await?;
            for step in 0..4u32 {
                let hash = content_hash(format!("{}-{step}", task.task_id()).as_bytes());
                let shot = EventKind::Screenshot {
                    key: format!("screenshots/{hash}.png"),
                    hash,
                    bytes: 48_213,
                    dedup: false,
                    step: Some(step),
                };
                task.emit(shot, &[]).await?;
            }
            Ok(Outcome::Succeeded(json!({"text": "done"})))
        }
        .boxed()
    }
}

struct Args {
    tasks: usize,
    concurrency: usize,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args { tasks: 100_000, concurrency: 50 };
    let mut it = support::record::args();
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--tasks" => args.tasks = value()?.parse().context("--tasks takes a number")?,
            "--concurrency" => args.concurrency = value()?.parse().context("--concurrency takes a number")?,
            "--help" | "-h" => {
                println!("flotilla-archive-bench [--tasks 100000] [--concurrency 50]");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    if args.tasks == 0 || args.concurrency == 0 {
        bail!("tasks and concurrency must be positive");
    }
    Ok(args)
}

async fn run(args: Args) -> anyhow::Result<Value> {
    let (_redis, url) = support::start_redis("archive-bench-redis")?.context("redis-server is not installed")?;
    let (_s3, endpoint) = support::start_s3s_fs(None, "archive-bench-s3", BUCKET, (ACCESS_KEY, SECRET_KEY))?;
    let prefix = format!("archive-bench-{}", std::process::id());
    let config = Config::from_env([
        ("FLOTILLA_REDIS_URL", url.clone()),
        ("FLOTILLA_KEY_PREFIX", prefix.clone()),
        ("FLOTILLA_WORKER_CONCURRENCY", args.concurrency.to_string()),
        ("FLOTILLA_WORKER_ID", "archive-bench".to_owned()),
        ("FLOTILLA_ARCHIVE_AFTER_S", HOT_S.to_string()),
    ])?;
    let fleet = Config::from_env([
        ("FLOTILLA_S3_BUCKET", BUCKET),
        ("FLOTILLA_S3_ENDPOINT", endpoint.as_str()),
        ("FLOTILLA_S3_PREFIX", prefix.as_str()),
    ])?;
    let store = BlobStore::new(BlobConfig::from_env(
        &fleet,
        [("AWS_ACCESS_KEY_ID", ACCESS_KEY), ("AWS_SECRET_ACCESS_KEY", SECRET_KEY), ("AWS_REGION", "us-east-1")],
    )?);
    let queue = Queue::connect(&config).await?.with_archive(store);
    let tenant = TenantId::parse("bench")?;
    let spec = TaskSpec {
        prompt: "fill in the order form".into(),
        pipeline: Some(Pipeline::Scripted),
        actions: Some(Vec::new()),
        ..TaskSpec::default()
    };

    let memory_before = support::used_memory(&queue).await?;
    let mut ids = Vec::with_capacity(args.tasks);
    while ids.len() < args.tasks {
        let batch: Vec<NewTask> = (0..(args.tasks - ids.len()).min(1_000))
            .map(|_| NewTask { id: TaskId::generate(), tenant: tenant.clone(), batch: None, spec: spec.clone() })
            .collect();
        ids.extend(batch.iter().map(|t| t.id.clone()));
        queue.submitter().create_tasks(batch).await?;
    }
    let mut registry = Registry::default();
    registry.register(Pipeline::Scripted, Arc::new(FourShots));
    let shutdown = CancellationToken::new();
    let drain_started = Instant::now();
    let worker = tokio::spawn(flotilla_worker::run_with(config.clone(), registry, shutdown.clone()));
    while support::succeeded(&queue).await? < args.tasks as u64 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let drain_s = drain_started.elapsed().as_secs_f64();
    shutdown.cancel();
    worker.await??;
    let memory_hot = support::used_memory(&queue).await?;
    let events = queue.reader().events_after(&tenant, &ids[0], 0).await?.len();

    config.clock.advance(3 * HOT_S * 1000);
    let archive_started = Instant::now();
    let (mut archived, mut entries, mut segments) = (0, 0, 0);
    loop {
        let pass = queue.housekeeper().archive_finished().await?;
        archived += pass.tasks;
        entries += pass.entries;
        segments += pass.segments;
        if pass.entries == 0 {
            break;
        }
    }
    let archive_s = archive_started.elapsed().as_secs_f64();
    let memory_archived = support::used_memory(&queue).await?;

    // Every sampled task reads back whole from the archive.
    let sample: Vec<&TaskId> = ids.iter().step_by((ids.len() / 100).max(1)).collect();
    for id in &sample {
        let record = queue.reader().get(&tenant, id).await?.with_context(|| format!("archived task {id} does not read back"))?;
        let history = queue.reader().events_after(&tenant, id, 0).await?;
        if !record.status.is_terminal() || history.len() != events {
            bail!("archived task {id} reads back {} with {} of {events} events", record.status, history.len());
        }
    }
    let n = args.tasks as i64;
    let report = json!({
        "tasks": args.tasks,
        "events_per_task": events,
        "drain_per_s": (args.tasks as f64 / drain_s).round(),
        "redis_bytes_per_finished_task_hot": (memory_hot - memory_before) / n,
        "redis_bytes_per_finished_task_archived": (memory_archived - memory_before) / n,
        "archived_tasks": archived,
        "archived_feed_entries": entries,
        "feed_segments": segments,
        "archive_tasks_per_s": (archived as f64 / archive_s).round(),
        "sampled_reads_back": sample.len(),
    });
    let at = |pointer: &str| support::record::at(&report, pointer);
    let field = |pointer: &str| at(pointer).unwrap_or_default();
    let pass = format!(
        "{} tasks/s ({} tasks, {} feed entries, {} segments)",
        field("/archive_tasks_per_s"),
        field("/archived_tasks"),
        field("/archived_feed_entries"),
        field("/feed_segments")
    );
    support::record::append(
        "Redis memory per finished task, hot and archived (`flotilla-archive-bench`)",
        &[
            ("Redis bytes per finished task, archived".to_owned(), at("/redis_bytes_per_finished_task_archived")),
            ("Redis bytes per finished task, hot".to_owned(), at("/redis_bytes_per_finished_task_hot")),
            ("archive pass".to_owned(), Some(pass)),
            ("drain".to_owned(), at("/drain_per_s").map(|v| v + " tasks/s")),
            ("sampled tasks read back whole".to_owned(), Some(format!("{0} of {0}", sample.len()))),
        ],
    )?;
    Ok(report)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => return support::usage_error(&e),
    };
    match run(args).await {
        Ok(figures) => {
            println!("{figures}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("flotilla-archive-bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
