//! `flotilla-chaos`: a bounded chaos run against a local fleet. It starts a
//! redis-server with AOF and an S3-compatible store (s3s-fs), submits
//! thousands of scripted tasks — most only wait, some act on local desktops
//! and store screenshots — and while they run kills workers at random
//! (SIGKILL or SIGSTOP past the lease), starts replacements, restarts Redis
//! and pauses the store; then it checks every task: it ended `succeeded`,
//! its history has exactly one terminal event and no gap in `seq`, and every
//! screenshot it announced is in the store. It prints its figures as JSON
//! and exits non-zero if any task was lost, finished twice or points at an
//! image the store does not have. Everything is bounded in count and time.
//!
//!     flotilla-chaos [--tasks 5000] [--desktop-tasks 60] [--task-ms 300] [--workers 3] [--minutes 5] [--seed N]

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use flotilla_tests::fleet::{test_config, test_env, unique_prefix, WorkerProcess};
use flotilla_tests::s3_server::S3Server;
use flotilla_tests::tasks::{events, queue, submit_many, tenant, wait_spec};
use flotilla_tests::RedisServer;
use flotilla_types::event::EventKind;
use flotilla_types::task::{TaskSpec, TaskStatus};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

const USAGE: &str = "flotilla-chaos [--tasks 5000] [--desktop-tasks 60] [--task-ms 300] [--workers 3] [--minutes 5] [--seed N]";

struct Args {
    tasks: usize,
    desktop_tasks: usize,
    task_ms: u64,
    workers: usize,
    minutes: u64,
    seed: u64,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args { tasks: 5_000, desktop_tasks: 60, task_ms: 300, workers: 3, minutes: 5, seed: 7 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            println!("{USAGE}");
            std::process::exit(0);
        }
        let value = it.next().with_context(|| format!("{flag} needs a value (see --help)"))?;
        let number: u64 = value.parse().with_context(|| format!("{flag} takes a number, not {value:?}"))?;
        match flag.as_str() {
            "--tasks" => args.tasks = number as usize,
            "--desktop-tasks" => args.desktop_tasks = number as usize,
            "--task-ms" => args.task_ms = number,
            "--workers" => args.workers = number as usize,
            "--minutes" => args.minutes = number,
            "--seed" => args.seed = number,
            other => bail!("unknown argument {other:?} (see --help)"),
        }
    }
    if args.tasks == 0 || args.workers < 2 || args.minutes == 0 || args.minutes > 10 {
        bail!("--tasks must be positive, --workers at least 2, --minutes from 1 to 10");
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn run() -> anyhow::Result<bool> {
    let args = parse_args()?;
    let mut rng = StdRng::seed_from_u64(args.seed);
    let mut redis = RedisServer::start_with_aof();
    let s3 = S3Server::start();
    let prefix = unique_prefix();
    let extra = [
        ("FLOTILLA_WORKER_CONCURRENCY", "16"),
        ("FLOTILLA_LEASE_MS", "2000"),
        ("FLOTILLA_HEARTBEAT_MS", "300"),
        ("FLOTILLA_SANDBOX_PROVIDER", "local"),
        ("FLOTILLA_SANDBOX_MAX", "4"),
    ];
    let mut env = test_env(&redis, &prefix, &extra);
    env.extend(s3.worker_env(&format!("{prefix}/")));
    let q = queue(&test_config(&redis, &prefix, &extra)).await;
    let store = s3.store(&format!("{prefix}/"));

    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.minutes * 60);
    let mut ids = submit_many(&q, &desktop_spec(), args.desktop_tasks).await;
    ids.extend(submit_many(&q, &wait_spec(args.task_ms), args.tasks).await);
    let mut next_worker = 0;
    let spawn = |n: &mut usize| {
        *n += 1;
        WorkerProcess::spawn(&env, &format!("chaos-{n}"))
    };
    let mut workers: Vec<WorkerProcess> = (0..args.workers).map(|_| spawn(&mut next_worker)).collect();
    let (mut killed, mut frozen, mut redis_restarts, mut store_pauses) = (0, 0, 0, 0);
    let mut round = 0;

    while Instant::now() < deadline {
        round += 1;
        tokio::time::sleep(Duration::from_millis(rng.random_range(500..2_000))).await;
        let ended = count_ended(&q, &ids).await;
        if ended == ids.len() {
            break;
        }
        // Redis goes down at least once, early, then at random; so does the store.
        let fault = match round {
            3 => 7,
            2 => 8,
            _ => rng.random_range(0..10),
        };
        match fault {
            0..=4 => {
                let victim = rng.random_range(0..workers.len());
                let mut worker = workers.swap_remove(victim);
                worker.signal("KILL");
                worker.wait_exit(5);
                killed += 1;
                workers.push(spawn(&mut next_worker));
            }
            5..=6 => {
                let victim = rng.random_range(0..workers.len());
                workers[victim].signal("STOP");
                tokio::time::sleep(Duration::from_millis(2_500)).await;
                workers[victim].signal("CONT");
                frozen += 1;
            }
            7 if redis_restarts < 3 => {
                redis.restart();
                redis_restarts += 1;
            }
            8 if store_pauses < 4 => {
                s3.pause();
                tokio::time::sleep(Duration::from_millis(rng.random_range(1_000..4_000))).await;
                s3.resume();
                store_pauses += 1;
            }
            _ => {}
        }
    }
    // Let the fleet finish what the faults left, within the deadline's slack.
    let settle = Instant::now() + Duration::from_secs(60);
    while count_ended(&q, &ids).await < ids.len() && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let (mut succeeded, mut not_ended, mut broken, mut reclaimed) = (0, 0, 0, 0);
    let (mut screenshots, mut missing_images) = (0, 0);
    for id in &ids {
        let record = q.reader().get(&tenant(), id).await?.context("a task vanished")?;
        let history = events(&q, id).await;
        for shot in q.reader().screenshots(&tenant(), id).await? {
            screenshots += 1;
            if !store.exists(&shot.key).await.unwrap_or(false) {
                missing_images += 1;
            }
        }
        let terminals = history.iter().filter(|e| e.kind.is_terminal()).count();
        let gapless = history.iter().enumerate().all(|(i, e)| e.seq == i as u64 + 1);
        let starts = history.iter().filter(|e| matches!(e.kind, EventKind::Started { .. })).count();
        if starts > 1 {
            reclaimed += 1;
        }
        match record.status {
            TaskStatus::Succeeded if terminals == 1 && gapless => succeeded += 1,
            s if !s.is_terminal() => {
                not_ended += 1;
                let kinds: Vec<&str> = history.iter().map(|e| e.kind.name()).collect();
                eprintln!("not ended: {id} {s:?} attempts={} events={kinds:?}", record.attempts);
            }
            _ => {
                broken += 1;
                eprintln!("broken: {id} {:?} error={:?} terminals={terminals} gapless={gapless}", record.status, record.error);
            }
        }
    }
    let ok = succeeded == ids.len() && missing_images == 0;
    println!(
        "{}",
        json!({
            "tasks": ids.len(), "succeeded_once": succeeded, "not_ended": not_ended, "broken": broken,
            "tasks_run_more_than_once": reclaimed, "workers_killed": killed, "workers_frozen": frozen,
            "redis_restarts": redis_restarts, "store_pauses": store_pauses,
            "screenshots": screenshots, "screenshots_missing_from_the_store": missing_images,
            "seconds": started.elapsed().as_secs(), "ok": ok,
        })
    );
    drop(workers);
    Ok(ok)
}

/// A task that acts on a desktop: a screenshot before, between and after
/// its moves, each stored.
fn desktop_spec() -> TaskSpec {
    let spec = json!({
        "prompt": "move the pointer about",
        "pipeline": "scripted",
        "retry": {"max_attempts": 10},
        "actions": [{"type": "move", "x": 10, "y": 10}, {"type": "wait", "ms": 200}, {"type": "move", "x": 500, "y": 300}]
    });
    TaskSpec::from_json(spec.to_string().as_bytes()).expect("a valid spec")
}

/// How many of `ids` have ended, read from the tasks themselves.
async fn count_ended(q: &flotilla_queue::queue::Queue, ids: &[flotilla_types::TaskId]) -> usize {
    let mut ended = 0;
    for id in ids {
        if let Ok(Some(task)) = q.reader().get(&tenant(), id).await {
            ended += usize::from(task.status.is_terminal());
        }
    }
    ended
}
