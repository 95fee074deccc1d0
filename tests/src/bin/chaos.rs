//! `flotilla-chaos`: a bounded chaos run against a local fleet. It starts a
//! redis-server with AOF, submits thousands of scripted tasks, and while they
//! run kills workers at random (SIGKILL or SIGSTOP past the lease), starts
//! replacements and restarts Redis; then it checks every task: it ended
//! `succeeded`, its history has exactly one terminal event and no gap in
//! `seq`. It prints its figures as JSON and exits non-zero if any task was
//! lost or finished twice. Everything is bounded in count and time.
//!
//!     flotilla-chaos [--tasks 5000] [--task-ms 300] [--workers 3] [--minutes 5] [--seed N]

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use flotilla_shared::event::EventKind;
use flotilla_shared::task::TaskStatus;
use flotilla_tests::fleet::{test_config, test_env, unique_prefix, WorkerProcess};
use flotilla_tests::tasks::{events, queue, submit_many, tenant, wait_spec};
use flotilla_tests::RedisServer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

struct Args {
    tasks: usize,
    task_ms: u64,
    workers: usize,
    minutes: u64,
    seed: u64,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args { tasks: 5_000, task_ms: 300, workers: 3, minutes: 5, seed: 7 };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        let number: u64 = value.parse().with_context(|| format!("{flag} takes a number, not {value:?}"))?;
        match flag.as_str() {
            "--tasks" => args.tasks = number as usize,
            "--task-ms" => args.task_ms = number,
            "--workers" => args.workers = number as usize,
            "--minutes" => args.minutes = number,
            "--seed" => args.seed = number,
            other => bail!("unknown argument {other:?}"),
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
    let prefix = unique_prefix();
    let extra = [("FLOTILLA_WORKER_CONCURRENCY", "16"), ("FLOTILLA_LEASE_MS", "2000"), ("FLOTILLA_HEARTBEAT_MS", "300")];
    let env = test_env(&redis, &prefix, &extra);
    let q = queue(&test_config(&redis, &prefix, &extra)).await;

    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.minutes * 60);
    let ids = submit_many(&q, &wait_spec(args.task_ms), args.tasks).await;
    let mut next_worker = 0;
    let spawn = |n: &mut usize| {
        *n += 1;
        WorkerProcess::spawn(&env, &format!("chaos-{n}"))
    };
    let mut workers: Vec<WorkerProcess> = (0..args.workers).map(|_| spawn(&mut next_worker)).collect();
    let (mut killed, mut frozen, mut redis_restarts) = (0, 0, 0);
    let mut round = 0;

    while Instant::now() < deadline {
        round += 1;
        tokio::time::sleep(Duration::from_millis(rng.random_range(500..2_000))).await;
        let ended = count_ended(&q, &ids).await;
        if ended == ids.len() {
            break;
        }
        // Redis goes down at least once, early, then at random.
        let fault = if round == 3 { 7 } else { rng.random_range(0..10) };
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
            _ => {}
        }
    }
    // Let the fleet finish what the faults left, within the deadline's slack.
    let settle = Instant::now() + Duration::from_secs(60);
    while count_ended(&q, &ids).await < ids.len() && Instant::now() < settle {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let (mut succeeded, mut not_ended, mut broken, mut reclaimed) = (0, 0, 0, 0);
    for id in &ids {
        let record = q.get(&tenant(), id).await?.context("a task vanished")?;
        let history = events(&q, id).await;
        let terminals = history.iter().filter(|e| e.kind.is_terminal()).count();
        let gapless = history.iter().enumerate().all(|(i, e)| e.seq == i as u64 + 1);
        let starts = history.iter().filter(|e| matches!(e.kind, EventKind::Started { .. })).count();
        if starts > 1 {
            reclaimed += 1;
        }
        match record.status {
            TaskStatus::Succeeded if terminals == 1 && gapless => succeeded += 1,
            s if !s.is_terminal() => not_ended += 1,
            _ => broken += 1,
        }
    }
    let ok = succeeded == ids.len();
    println!(
        "{}",
        json!({
            "tasks": ids.len(), "succeeded_once": succeeded, "not_ended": not_ended, "broken": broken,
            "tasks_run_more_than_once": reclaimed, "workers_killed": killed, "workers_frozen": frozen,
            "redis_restarts": redis_restarts, "seconds": started.elapsed().as_secs(), "ok": ok,
        })
    );
    drop(workers);
    Ok(ok)
}

/// How many tasks have ended, from the fleet-wide outcome counters.
async fn count_ended(q: &flotilla_shared::queue::Queue, _ids: &[flotilla_shared::TaskId]) -> usize {
    match q.stats(None).await {
        Ok(stats) => ["succeeded", "failed", "cancelled"].iter().map(|o| stats.outcomes.get(*o).copied().unwrap_or(0) as usize).sum(),
        Err(_) => 0,
    }
}
