//! The `flotilla` command line against a real API, a `flotilla-worker`
//! process and redis-server: watching several tasks at once keeps each
//! task's lines in its own order, `flotilla task` reads as a summary (the
//! record with `--json`), and bad input is told in one line that names the
//! batch line once and calls cut-off JSON malformed rather than blaming a
//! field.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use flotilla_tests::fleet::{binary, test_env};
use flotilla_tests::{api_key, spawn_api, test_config, unique_prefix, ApiClient, ApiServer, RedisServer, WorkerProcess};
use serde_json::{json, Value};

/// What one run of the command line gave.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `flotilla` against `api` with acme's key.
async fn flotilla(api: &ApiServer, args: &[&str]) -> Run {
    let output = tokio::process::Command::new(binary("flotilla"))
        .args(["--api", &api.base_url, "--key", api_key()])
        .args(args)
        .output()
        .await
        .expect("run flotilla");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A fleet of one API and one worker process on a fresh Redis.
struct Fleet {
    api: ApiServer,
    acme: ApiClient,
    _worker: WorkerProcess,
    _redis: RedisServer,
}

async fn fleet() -> Fleet {
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let api = spawn_api(test_config(&redis, &prefix, &[])).await;
    let acme = ApiClient::new(&api, api_key());
    let deadline = Instant::now() + Duration::from_secs(10);
    while acme.get("/readyz").await.0 != 200 {
        assert!(Instant::now() < deadline, "the api never became ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let worker = WorkerProcess::spawn(&test_env(&redis, &prefix, &[]), "cli");
    Fleet { api, acme, _worker: worker, _redis: redis }
}

/// A scripted task of `waits` waits of `ms` each.
async fn submit(acme: &ApiClient, waits: usize, ms: u64) -> String {
    let actions: Vec<Value> = (0..waits).map(|_| json!({"type": "wait", "ms": ms})).collect();
    let (status, task) = acme.post("/v1/tasks", &json!({"prompt": "cli", "pipeline": "scripted", "actions": actions})).await;
    assert_eq!(status, 202, "{task}");
    task["id"].as_str().expect("id").to_owned()
}

/// A directory of its own for a test's files.
fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("flotilla-cli-{}", ulid::Ulid::new()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Whether `word` is a `HH:MM:SS` time, as event lines start with.
fn is_time(word: &str) -> bool {
    let bytes = word.as_bytes();
    bytes.len() == 8 && bytes[2] == b':' && bytes[5] == b':'
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_several_tasks_keeps_each_tasks_lines_in_order() {
    let fleet = fleet().await;
    let mut ids = Vec::new();
    for ms in [30, 45, 20] {
        ids.push(submit(&fleet.acme, 6, ms).await);
    }
    let args: Vec<&str> = ids.iter().map(String::as_str).collect();
    let json_args: Vec<&str> = ["--json", "watch"].into_iter().chain(args.iter().copied()).collect();
    let human_args: Vec<&str> = ["watch", "--verbose"].into_iter().chain(args.iter().copied()).collect();
    let quiet_args: Vec<&str> = ["watch"].into_iter().chain(args.iter().copied()).collect();
    let (as_json, for_people, quiet) =
        tokio::join!(flotilla(&fleet.api, &json_args), flotilla(&fleet.api, &human_args), flotilla(&fleet.api, &quiet_args));
    assert_eq!(as_json.code, Some(0), "{}", as_json.stderr);
    assert_eq!(for_people.code, Some(0), "{}", for_people.stderr);
    assert_eq!(quiet.code, Some(0), "{}", quiet.stderr);
    quiet_watch_groups_each_tasks_milestones(&quiet.stdout, &ids);

    let mut json_types: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut seqs: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in as_json.stdout.lines() {
        let event: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        let task = event["task_id"].as_str().expect("task_id").to_owned();
        seqs.entry(task.clone()).or_default().push(event["seq"].as_u64().expect("seq"));
        json_types.entry(task).or_default().push(event["type"].as_str().expect("type").to_owned());
    }
    for id in &ids {
        let seen = &seqs[id];
        assert_eq!(*seen, (1..=seen.len() as u64).collect::<Vec<_>>(), "{id}: every event once, in order");
        assert_eq!(json_types[id].last().map(String::as_str), Some("succeeded"), "{id} ends with its terminal event");
        assert_eq!(json_types[id].iter().filter(|t| *t == "action_completed").count(), 6, "{id}: {:?}", json_types[id]);
    }

    let mut human_types: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let lines: Vec<&str> = for_people.stdout.lines().collect();
    for line in &lines[..lines.len() - 1] {
        let words: Vec<&str> = line.split_whitespace().collect();
        assert!(ids.iter().any(|id| id == words[0]), "each line starts with its task: {line}");
        if is_time(words[1]) {
            human_types.entry(words[0].to_owned()).or_default().push(words[2].to_owned());
        }
    }
    assert_eq!(human_types, json_types, "each task's lines come in its own order, as its events");
    assert_eq!(lines.last().copied(), Some("3 tasks: 3 succeeded, 0 failed, 0 cancelled"));
    let firsts: Vec<&str> = lines.iter().map(|l| l.split_whitespace().next().unwrap_or("")).collect();
    assert!(firsts.windows(2).any(|w| w[0] != w[1] && ids.iter().any(|id| id == w[0])), "the tasks' lines interleave");
}

/// A default watch of several tasks: each task's lines together, in its
/// events' order (started … succeeded, no action lines), ending with how
/// many actions it took; then the summary.
fn quiet_watch_groups_each_tasks_milestones(stdout: &str, ids: &[String]) {
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.last().copied(), Some("3 tasks: 3 succeeded, 0 failed, 0 cancelled"), "{stdout}");
    let owners: Vec<&str> = lines[..lines.len() - 1].iter().map(|l| l.split_whitespace().next().unwrap_or("")).collect();
    for id in ids {
        let at: Vec<usize> = owners.iter().enumerate().filter(|(_, o)| *o == id).map(|(i, _)| i).collect();
        assert!(at.windows(2).all(|w| w[1] == w[0] + 1), "{id}'s lines come together:\n{stdout}");
        let block: Vec<&str> = at.iter().map(|&i| lines[i]).collect();
        let events = block.iter().map(|l| l.split_whitespace().collect::<Vec<_>>()).filter(|w| w.len() > 2 && is_time(w[1]));
        let kinds: Vec<&str> = events.map(|w| w[2]).collect();
        assert_eq!(kinds.first().copied(), Some("started"), "{stdout}");
        assert!(kinds.contains(&"succeeded"), "{stdout}");
        assert!(!kinds.iter().any(|k| k.starts_with("action")), "no action lines by default:\n{stdout}");
        assert!(block.last().is_some_and(|l| l.trim_end().ends_with("6 actions, 0 screenshots")), "{stdout}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_prints_a_summary_and_the_record_with_json() {
    let fleet = fleet().await;
    let id = submit(&fleet.acme, 2, 10).await;
    let watched = flotilla(&fleet.api, &["watch", &id]).await;
    assert_eq!(watched.code, Some(0), "{}", watched.stderr);

    let summary = flotilla(&fleet.api, &["task", &id]).await;
    assert_eq!(summary.code, Some(0), "{}", summary.stderr);
    let lines: Vec<&str> = summary.stdout.lines().collect();
    assert_eq!(lines[0], format!("task        {id}"), "{}", summary.stdout);
    for expected in
        ["status      succeeded (done)", "prompt      cli", "pipeline    scripted", "attempts    1", "steps       2 taken"]
    {
        assert!(lines.contains(&expected), "{expected:?} in {}", summary.stdout);
    }
    assert!(lines.iter().any(|l| l.starts_with("times       created ") && l.contains(" finished ")), "{}", summary.stdout);
    assert!(!summary.stdout.contains('{'), "a summary, not JSON: {}", summary.stdout);

    let record = flotilla(&fleet.api, &["--json", "task", &id]).await;
    assert_eq!(record.code, Some(0), "{}", record.stderr);
    let value: Value = serde_json::from_str(record.stdout.trim()).expect("one JSON record");
    assert_eq!((value["id"].as_str(), value["status"].as_str()), (Some(id.as_str()), Some("succeeded")));
    assert_eq!(record.stdout.trim().lines().count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_names_the_batch_line_once_and_cut_off_json_is_malformed() {
    let fleet = fleet().await;
    let dir = scratch();
    let good = r#"{"prompt": "a", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 1}]}"#;

    let cut_off = dir.join("cut.jsonl");
    std::fs::write(&cut_off, format!("{good}\n\n{{\"prompt\": \"b\", \"sandbox\": {{\"resolution\": [1\n{good}\n"))
        .expect("write");
    let run = flotilla(&fleet.api, &["batch", cut_off.to_str().expect("path")]).await;
    assert_eq!(run.code, Some(2));
    assert_eq!(run.stderr.lines().count(), 1, "one line: {}", run.stderr);
    assert!(run.stderr.contains(", line 3: malformed JSON: it ends too soon"), "{}", run.stderr);
    assert_eq!(run.stderr.matches("line").count(), 1, "the line is named once: {}", run.stderr);
    assert!(!run.stderr.contains("field") && !run.stderr.contains("resolution"), "no field is blamed: {}", run.stderr);

    let bad_field = dir.join("field.jsonl");
    std::fs::write(&bad_field, format!("{good}\n\n{good}\n{{\"prompt\": \"c\", \"priority\": \"urgent\"}}\n")).expect("write");
    let run = flotilla(&fleet.api, &["batch", bad_field.to_str().expect("path")]).await;
    assert_eq!(run.code, Some(2));
    assert_eq!(run.stderr.lines().count(), 1, "one line: {}", run.stderr);
    assert!(run.stderr.contains(", line 4: invalid_request: ") && run.stderr.contains("(field priority)"), "{}", run.stderr);
    assert_eq!(run.stderr.matches("line").count(), 1, "the line is named once: {}", run.stderr);
    assert!(!run.stderr.contains("tasks["), "the file's line, not the request's index: {}", run.stderr);
    let (_, listed) = fleet.acme.get("/v1/tasks").await;
    assert_eq!(listed["tasks"].as_array().map(Vec::len), Some(0), "a refused batch queues nothing: {listed}");

    let spec = dir.join("spec.json");
    std::fs::write(&spec, "{\"prompt\": \"d\",\n \"metadata\": {\"team\": ").expect("write");
    let run = flotilla(&fleet.api, &["submit", "--spec", spec.to_str().expect("path")]).await;
    assert_eq!(run.code, Some(2));
    assert_eq!(run.stderr.lines().count(), 1, "one line: {}", run.stderr);
    assert!(
        run.stderr.contains("malformed JSON: it ends too soon") && run.stderr.contains("at line 2, column"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("field") && !run.stderr.contains("metadata"), "no field is blamed: {}", run.stderr);
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread")]
async fn usage_prints_the_tenants_days_and_limits_and_json_as_the_api_gives_it() {
    let fleet = fleet().await;
    let id = submit(&fleet.acme, 2, 20).await;
    let done = flotilla(&fleet.api, &["watch", &id]).await;
    assert_eq!(done.code, Some(0), "{}", done.stderr);

    let table = flotilla(&fleet.api, &["usage"]).await;
    assert_eq!(table.code, Some(0), "{}", table.stderr);
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert!(lines.get(1).is_some_and(|l| l.starts_with("DAY") && l.contains("SANDBOX_S")), "{}", table.stdout);
    let total = lines.iter().find(|l| l.starts_with("total")).expect("a total row");
    assert_eq!(total.split_whitespace().nth(1), Some("1"), "one task counted: {}", table.stdout);
    assert!(lines.iter().any(|l| l.starts_with("max_queued") && l.contains("100000")), "{}", table.stdout);

    let json = flotilla(&fleet.api, &["--json", "usage", "--from", "2026-01-01"]).await;
    assert_eq!(json.code, Some(0), "{}", json.stderr);
    let report: Value = serde_json::from_str(json.stdout.trim()).expect("one JSON document");
    assert_eq!(report["from"].as_str().map(|f| f >= "2026-01-01"), Some(true), "{report}");
    assert_eq!(report["total"]["tasks"]["succeeded"], 1, "{report}");
    let bad = flotilla(&fleet.api, &["usage", "--from", "yesterday"]).await;
    assert_ne!(bad.code, Some(0));
    assert_eq!(bad.stderr.trim().lines().count(), 1, "one line names the problem: {}", bad.stderr);
    assert!(bad.stderr.contains("from"), "{}", bad.stderr);
}
