//! Evaluations end to end on real local desktops: a task's `setup` places
//! files and runs commands in its sandbox before the agent, its `check`
//! judges the sandbox after, and the verdict reaches the record, the
//! `checked` event, the list filter and the batch report; batches repeat
//! tasks, keep the best of several runs (cancelling the rest once one
//! passes) and expand over a matrix of models.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use flotilla_tests::browser::Browser;
use flotilla_tests::desktop::{count, DesktopFleet, DesktopOptions};
use flotilla_tests::fakes::{openai, ScriptedServer};
use flotilla_tests::fleet::{binary, ApiServer};
use flotilla_tests::tasks::{events, record, wait_all_ended};
use flotilla_tests::{api_key, eventually, spawn_api, test_config, unique_prefix, ApiClient, InProcessWorker, RedisServer};
use flotilla_types::eval::Verdict;
use flotilla_types::ids::TaskId;
use flotilla_types::task::{StopCode, TaskStatus};
use flotilla_worker::sandbox::{MemoryProvider, PoolConfig, SandboxPool, SandboxProvider};
use flotilla_worker::tools::Tools;
use flotilla_worker::Registry;
use serde_json::{json, Value};

/// How long a batch of desktop tasks may take here.
const BATCH_TIMEOUT: Duration = Duration::from_secs(240);

/// A suite task: the set-up leaves the wanted word in `want.txt`; the
/// agent types `typed` into `answer.txt` from the terminal; the check
/// compares the two.
fn suite_task(n: usize, typed: &str) -> Value {
    json!({
        "prompt": format!("write the word in want.txt into answer.txt ({n})"),
        "metadata": {"name": format!("word-{n:02}")},
        "setup": {"files": {"want.txt": format!("word{n}\n")}, "commands": ["test -s want.txt"]},
        "actions": [
            {"type": "click", "x": 512, "y": 384},
            {"type": "type", "text": format!("echo {typed} > answer.txt\n")},
            {"type": "wait", "ms": 300}
        ],
        "check": {"command": "cmp -s want.txt answer.txt || { echo 'answer.txt differs' >&2; exit 1; }"}
    })
}

async fn fleet(concurrency: &str) -> DesktopFleet {
    let env = vec![
        ("FLOTILLA_WORKER_CONCURRENCY", concurrency.to_owned()),
        ("FLOTILLA_WEBHOOK_ALLOW_HTTP", "1".to_owned()),
        ("FLOTILLA_WEBHOOK_ALLOW_PRIVATE", "1".to_owned()),
    ];
    DesktopFleet::start(DesktopOptions { warm: 2, env, ..DesktopOptions::default() }).await
}

/// A webhook receiver on loopback: the bodies it was sent, in order.
async fn hook_receiver() -> (Arc<Mutex<Vec<Value>>>, String) {
    let got: Arc<Mutex<Vec<Value>>> = Arc::default();
    let store = Arc::clone(&got);
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: String| async move {
            store.lock().expect("lock").push(serde_json::from_str(&body).unwrap_or(Value::Null));
            axum::http::StatusCode::NO_CONTENT
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind receiver");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await.ok() });
    (got, url)
}

fn task_ids(accepted: &Value) -> Vec<TaskId> {
    accepted["task_ids"]
        .as_array()
        .expect("task ids")
        .iter()
        .map(|v| TaskId::parse(v.as_str().expect("id")).expect("id"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_suite_half_done_right_reports_half_passed_and_a_failing_setup_apart() {
    let fleet = fleet("4").await;
    let api = spawn_api(fleet.config.clone()).await;
    let client = ApiClient::new(&api, api_key());
    // Tasks 0..10 are done right, 10..19 wrong, and task 19's set-up fails.
    let mut tasks: Vec<Value> =
        (0..20).map(|n| suite_task(n, &if n < 10 { format!("word{n}") } else { "wrong".into() })).collect();
    tasks[19]["setup"]["commands"] = json!(["test -s want.txt", "echo 'no such window' >&2; exit 3"]);
    let (status, accepted) = client
        .post("/v1/batches", &json!({"tasks": tasks, "defaults": {"pipeline": "scripted", "retry": {"max_attempts": 1}}}))
        .await;
    assert_eq!(status, 202, "{accepted}");
    let ids = task_ids(&accepted);
    wait_all_ended(&fleet.queue, &ids, BATCH_TIMEOUT).await;

    for (n, id) in ids.iter().enumerate() {
        let task = record(&fleet.queue, id).await;
        let wanted = match n {
            0..10 => Verdict::Passed,
            10..19 => Verdict::Failed,
            _ => Verdict::Error,
        };
        assert_eq!(task.verdict, Some(wanted), "task {n}: {task:?}");
        let history = events(&fleet.queue, id).await;
        assert_eq!(count(&history, "checked"), 1, "task {n} is judged once: {history:?}");
        if n == 19 {
            assert_eq!((task.status, task.code), (TaskStatus::Failed, Some(StopCode::Problem)));
            assert!(task.reason.as_deref().is_some_and(|r| r.contains("command 1 exited 3: no such window")), "{task:?}");
            assert_eq!(count(&history, "action"), 0, "the agent never started: {history:?}");
        } else {
            assert_eq!(task.status, TaskStatus::Succeeded, "the agent's own end is apart from its verdict");
            assert_eq!(task.score, Some(if n < 10 { 1.0 } else { 0.0 }));
        }
    }

    let batch = accepted["id"].as_str().expect("batch id");
    let (status, report) = client.get(&format!("/v1/batches/{batch}/report")).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["complete"], true);
    let cell = &report["cells"][0];
    assert_eq!(cell["pass_rate"], 0.5, "{report}");
    assert_eq!((cell["passed"].as_u64(), cell["failed"].as_u64(), cell["setup_errors"].as_u64()), (Some(10), Some(9), Some(1)));
    assert_eq!(report["tasks"][3]["name"], "word-03");
    assert_eq!(report["tasks"][3]["cells"][0]["verdict"], "passed");
    assert_eq!(report["tasks"][12]["cells"][0]["verdict"], "failed");

    // The list filter finds each verdict's tasks.
    let (status, page) = client.get(&format!("/v1/tasks?batch={batch}&verdict=failed&limit=100")).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["tasks"].as_array().map(Vec::len), Some(9));
    let (status, page) = client.get(&format!("/v1/tasks?batch={batch}&verdict=error")).await;
    assert_eq!(status, 200);
    assert_eq!(page["tasks"][0]["id"], ids[19].as_str());
    assert_eq!(page["tasks"][0]["reason"].as_str().map(|r| r.starts_with("command 1 exited 3")), Some(true));
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_best_of_three_keeps_the_passing_second_run_and_cancels_the_third() {
    // One task at a time, so the runs go in order.
    let fleet = fleet("1").await;
    let api = spawn_api(fleet.config.clone()).await;
    let client = ApiClient::new(&api, api_key());
    let task = json!({
        "prompt": "pass on the second try",
        "pipeline": "scripted",
        "actions": [{"type": "wait", "ms": 50}],
        "check": {"command": "echo \"{\\\"score\\\": $([ \"$FLOTILLA_RUN\" = 2 ] && echo 1 || echo 0.25), \\\"reason\\\": \\\"run $FLOTILLA_RUN\\\"}\""}
    });
    let (hooks, url) = hook_receiver().await;
    let (status, hook) = client.post("/v1/webhooks", &json!({"url": url, "events": ["task.checked"]})).await;
    assert_eq!(status, 201, "{hook}");
    let body = json!({"tasks": [task], "best_of": 3, "stop_on_pass": true});
    let (status, accepted) = client.post("/v1/batches", &body).await;
    assert_eq!(status, 202, "{accepted}");
    let ids = task_ids(&accepted);
    assert_eq!(ids.len(), 3, "best_of 3 makes three runs");
    wait_all_ended(&fleet.queue, &ids, BATCH_TIMEOUT).await;

    let runs = [record(&fleet.queue, &ids[0]).await, record(&fleet.queue, &ids[1]).await, record(&fleet.queue, &ids[2]).await];
    assert_eq!((runs[0].verdict, runs[0].score, runs[0].reason.as_deref()), (Some(Verdict::Failed), Some(0.25), Some("run 1")));
    assert_eq!((runs[1].verdict, runs[1].score), (Some(Verdict::Passed), Some(1.0)));
    assert_eq!((runs[2].status, runs[2].verdict), (TaskStatus::Cancelled, None), "the third run is cancelled");

    let batch = accepted["id"].as_str().expect("batch id");
    let (status, report) = client.get(&format!("/v1/batches/{batch}/report")).await;
    assert_eq!(status, 200, "{report}");
    let cell = &report["cells"][0];
    assert_eq!((cell["groups"].as_u64(), cell["passed"].as_u64(), cell["runs"].as_u64()), (Some(1), Some(1), Some(3)));
    assert_eq!(cell["cancelled_runs"], 1);
    assert_eq!(report["tasks"][0]["cells"][0]["verdict"], "passed");
    let kept: Vec<&Value> =
        report["tasks"][0]["cells"][0]["runs"].as_array().expect("runs").iter().filter(|r| r["kept"] == true).collect();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0]["task_id"], ids[1].as_str());
    // Usage counts every run: both that ran spent a step and sandbox time.
    let steps: u64 = runs.iter().map(|r| r.usage.as_ref().map_or(0, |u| u.steps)).sum();
    assert_eq!(steps, 2);
    assert_eq!(cell["per_task"]["steps"], 2.0, "{report}");
    let (status, usage) = client.get("/v1/usage").await;
    assert_eq!(status, 200, "{usage}");
    assert_eq!(usage["total"]["steps"], 2, "usage counts every run that ran: {usage}");

    // Each judged run is a `task.checked` message with its verdict.
    eventually("two task.checked messages arrive", Duration::from_secs(30), async || hooks.lock().expect("lock").len() >= 2)
        .await;
    let mut messages: Vec<(String, String, String)> = hooks
        .lock()
        .expect("lock")
        .iter()
        .map(|m| {
            (
                m["type"].as_str().unwrap_or("").to_owned(),
                m["data"]["id"].as_str().unwrap_or("").to_owned(),
                m["data"]["verdict"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    messages.sort_by_key(|(_, id, _)| ids.iter().position(|i| i.as_str() == id));
    let want = [("task.checked", ids[0].as_str(), "failed"), ("task.checked", ids[1].as_str(), "passed")];
    assert_eq!(messages, want.map(|(t, i, v)| (t.to_owned(), i.to_owned(), v.to_owned())));
    fleet.stop().await;
}

/// A worker whose sandboxes are in memory (every command there exits 0).
fn memory_worker(config: &flotilla_config::Config) -> (InProcessWorker, SandboxPool) {
    let provider: Arc<dyn SandboxProvider> = Arc::new(MemoryProvider::new());
    let pool = SandboxPool::new(provider, PoolConfig { warm: 0, max_live: 32, ..PoolConfig::default() });
    let tools = Tools {
        sandboxes: Some(pool.clone()),
        blobs: None,
        uploads: Default::default(),
        gateway: None,
        live: None,
        pricing: Default::default(),
        profile_key: None,
        park_waiting_after: std::time::Duration::from_secs(60),
        templates: Default::default(),
    };
    (InProcessWorker::start_with_tools(config.clone(), Registry::for_config(config), tools), pool)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_tasks_repeated_twice_through_two_workers_are_each_reported_once_and_fast() {
    let redis = RedisServer::start();
    let config =
        test_config(&redis, &unique_prefix(), &[("FLOTILLA_WORKER_CONCURRENCY", "32"), ("FLOTILLA_HEARTBEAT_MS", "500")]);
    let workers = [memory_worker(&config), memory_worker(&config)];
    let api = spawn_api(config.clone()).await;
    let client = ApiClient::new(&api, api_key());
    let tasks: Vec<Value> = (0..500)
        .map(|n| {
            json!({
                "prompt": format!("suite task {n}"),
                "actions": [{"type": "wait", "ms": 1}],
                "setup": {"files": {"in.txt": "x"}},
                "check": {"command": "test -s in.txt"}
            })
        })
        .collect();
    let body = json!({"tasks": tasks, "repeat": 2, "defaults": {"pipeline": "scripted", "retry": {"max_attempts": 1}}});
    let (status, accepted) = client.post("/v1/batches", &body).await;
    assert_eq!(status, 202, "{accepted}");
    let ids = task_ids(&accepted);
    assert_eq!(ids.len(), 1000);
    let batch = accepted["id"].as_str().expect("batch id").to_owned();
    eventually("every run ends", Duration::from_secs(240), async || {
        let (_, view) = client.get(&format!("/v1/batches/{batch}")).await;
        view["finished_at"].is_string()
    })
    .await;

    let path = format!("/v1/batches/{batch}/report");
    let mut took = Vec::new();
    let mut report = Value::Null;
    for _ in 0..5 {
        let started = Instant::now();
        let (status, body) = client.get(&path).await;
        took.push(started.elapsed());
        assert_eq!(status, 200, "{body}");
        report = body;
    }
    took.sort();
    println!("report of 1000 runs: {took:?}");
    assert!(took[2] < Duration::from_millis(200), "the report of 1000 runs answers in under 200 ms: {took:?}");

    assert_eq!(
        (report["runs"].as_u64(), report["ended"].as_u64(), report["complete"].as_bool()),
        (Some(1000), Some(1000), Some(true))
    );
    let cell = &report["cells"][0];
    assert_eq!((cell["tasks"].as_u64(), cell["groups"].as_u64(), cell["passed"].as_u64()), (Some(500), Some(1000), Some(1000)));
    assert_eq!(cell["pass_at_k"]["2"], 1.0);
    let mut seen: Vec<&str> = report["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .flat_map(|t| t["cells"][0]["runs"].as_array().expect("runs").iter().map(|r| r["task_id"].as_str().expect("id")))
        .collect();
    assert_eq!(seen.len(), 1000);
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 1000, "every run is in the report exactly once");
    let mut expected: Vec<&str> = ids.iter().map(TaskId::as_str).collect();
    expected.sort_unstable();
    assert_eq!(seen, expected);
    for (worker, pool) in workers {
        worker.stop().await;
        pool.shutdown().await;
    }
}

/// Runs `flotilla` with `args` against `api` with acme's key: exit code and stdout.
async fn flotilla(api: &ApiServer, args: &[&str]) -> (Option<i32>, String, String) {
    let output = tokio::process::Command::new(binary("flotilla"))
        .args(["--api", &api.base_url, "--key", api_key()])
        .args(args)
        .output()
        .await
        .expect("run flotilla");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code(), text(&output.stdout), text(&output.stderr))
}

/// A fresh folder of this test's own.
fn scratch_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("flotilla-evals-{}", unique_prefix()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// The shipped OSWorld-format sample suite.
fn osworld_sample() -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root");
    root.join("examples/evals/osworld-sample").to_string_lossy().into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_the_osworld_sample_suite_imports_and_runs_with_its_checks_offline() {
    let fleet = fleet("2").await;
    let api = spawn_api(fleet.config.clone()).await;
    let (code, stdout, stderr) = flotilla(&api, &["eval", "run", &osworld_sample(), "--reference"]).await;
    assert_eq!(code, Some(1), "one task of four does not pass: {stdout}\n{stderr}");
    let mut lines = stdout.lines();
    let batch = lines.next().expect("the batch id first").to_owned();
    assert!(batch.starts_with("bat_"), "{stdout}");
    assert!(stdout.contains("3/4") && stdout.contains("75.0%"), "the table: {stdout}");
    assert!(stdout.contains("install-photo-editor") && stdout.contains("failed"), "the task that did not pass: {stdout}");

    let client = ApiClient::new(&api, api_key());
    let (status, report) = client.get(&format!("/v1/batches/{batch}/report")).await;
    assert_eq!(status, 200, "{report}");
    let verdicts: Vec<(String, String)> = report["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| (t["name"].as_str().unwrap_or("").to_owned(), t["cells"][0]["verdict"].as_str().unwrap_or("").to_owned()))
        .collect();
    let want = [
        ("count-lines", "passed"),
        ("install-photo-editor", "failed"),
        ("notes-goodbye", "passed"),
        ("reports-folder", "passed"),
    ];
    assert_eq!(verdicts, want.map(|(n, v)| (n.to_owned(), v.to_owned())), "{report}");
    let (_, failed) = client.get(&format!("/v1/tasks?batch={batch}&verdict=failed")).await;
    assert_eq!(failed["tasks"][0]["reason"], "the check exited 1: the agent did not call the task infeasible", "{failed}");

    // A bad suite is refused with one line naming the task and the step.
    let dir = scratch_dir();
    let bad = dir.join("bad.jsonl");
    let task = json!({"id": "x", "instruction": "x", "config": [{"type": "googledrive", "parameters": {}}], "evaluator": {"func": "infeasible"}});
    std::fs::write(&bad, format!("{task}\n")).expect("write");
    let (code, _, stderr) = flotilla(&api, &["eval", "run", bad.to_str().expect("path")]).await;
    assert_eq!(code, Some(2));
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains("task 1: config[0]: step type \"googledrive\" cannot run on these desktops"), "{stderr}");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_matrix_over_two_models_reports_each_model_and_the_cli_tables_them() {
    let server = ScriptedServer::start().await;
    // One run at a time, in the batch's order: the task under model-a,
    // then under model-b. model-a stops at once; model-b types the answer.
    server.push(openai::reply("resp_a", vec![openai::message("Nothing to do.")]));
    server.push(openai::reply(
        "resp_b1",
        vec![openai::computer_call_batch(
            "call_1",
            vec![openai::click(512, 384, "left"), openai::type_text("echo word0 > answer.txt"), openai::keypress(&["ENTER"])],
        )],
    ));
    server.push(openai::reply("resp_b2", vec![openai::message("Written.")]));
    let env = vec![
        ("FLOTILLA_WORKER_CONCURRENCY", "1".to_owned()),
        ("OPENAI_BASE_URL", format!("{}/v1", server.url())),
        ("OPENAI_API_KEY", "sk-test-openai-secret".to_owned()),
    ];
    let fleet = DesktopFleet::start(DesktopOptions { warm: 1, env, ..DesktopOptions::default() }).await;
    let api = spawn_api(fleet.config.clone()).await;
    let mut task = suite_task(0, "unused");
    let task = task.as_object_mut().map(|t| {
        t.remove("actions");
        t.insert("sandbox".into(), json!({"resolution": [1024, 768]}));
        json!(t)
    });
    let dir = scratch_dir();
    let suite = dir.join("suite.jsonl");
    std::fs::write(&suite, format!("{}\n", task.expect("task"))).expect("write");
    let defaults = json!({"pipeline": "openai-cua", "retry": {"max_attempts": 1}}).to_string();
    let args = ["eval", "run", suite.to_str().expect("path"), "--matrix", "model=model-a,model-b", "--defaults", &defaults];
    let (code, stdout, stderr) = flotilla(&api, &args).await;
    assert_eq!(code, Some(1), "model-a does not pass: {stdout}\n{stderr}");
    let row = |model: &str| stdout.lines().find(|l| l.starts_with(model)).unwrap_or_default().to_owned();
    assert!(row("model-a").contains("0/1") && row("model-a").contains("0.0%"), "{stdout}");
    assert!(row("model-b").contains("1/1") && row("model-b").contains("100.0%"), "{stdout}");

    let models: Vec<String> = server.received().iter().filter_map(|r| r.body["model"].as_str().map(str::to_owned)).collect();
    assert_eq!(models, ["model-a", "model-b", "model-b"], "each run calls its own model");
    let batch = stdout.lines().next().expect("batch id");
    let client = ApiClient::new(&api, api_key());
    let (_, report) = client.get(&format!("/v1/batches/{batch}/report")).await;
    let cells: Vec<(Value, Value, Value)> = report["cells"]
        .as_array()
        .expect("cells")
        .iter()
        .map(|c| (c["model"].clone(), c["passed"].clone(), c["per_task"]["tokens"].clone()))
        .collect();
    assert_eq!(cells[0].0, "model-a");
    assert_eq!((cells[0].1.as_u64(), cells[1].1.as_u64()), (Some(0), Some(1)), "{report}");
    assert_eq!((cells[0].2.as_f64(), cells[1].2.as_f64()), (Some(1050.0), Some(2100.0)), "tokens per task, per model: {report}");

    // A second run of the suite where the models swap: model-a now types
    // the answer and model-b stops at once.
    server.push(openai::reply(
        "resp_a1",
        vec![openai::computer_call_batch(
            "call_2",
            vec![openai::click(512, 384, "left"), openai::type_text("echo word0 > answer.txt"), openai::keypress(&["ENTER"])],
        )],
    ));
    server.push(openai::reply("resp_a2", vec![openai::message("Written.")]));
    server.push(openai::reply("resp_b", vec![openai::message("Nothing to do.")]));
    let (_, second, stderr) = flotilla(&api, &args).await;
    let after = second.lines().next().expect("the second batch id").to_owned();
    assert!(after.starts_with("bat_"), "{second}\n{stderr}");

    // The comparison page shows what newly fails (model-b) and newly passes.
    let mut browser = Browser::launch(1280, 800).await.expect("start chromium");
    browser.navigate(&api.url(&format!("/evals#before={batch}&after={after}"))).await.expect("open the page");
    browser.type_into("#key-input", api_key()).await.expect("type the key");
    browser.click("#compare").await.expect("compare");
    let shown = "!document.getElementById('result').hidden && document.querySelectorAll('#tasks tbody tr').length === 2";
    browser.wait_for("the comparison shows", shown, Duration::from_secs(20)).await.expect("compared");
    let changes = browser
        .evaluate(
            "Array.from(document.querySelectorAll('#tasks tbody tr'), r => r.dataset.model + ':' + r.dataset.change).join(',')",
        )
        .await
        .expect("rows");
    assert_eq!(changes, json!("model-b:newly-fails,model-a:newly-passes"), "what newly fails comes first");
    let summary = browser.evaluate("document.getElementById('summary').textContent").await.expect("summary");
    assert_eq!(summary, json!("1 newly fail, 1 newly pass"));
    let png = browser.screenshot_png().await.expect("screenshot");
    let tmp = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let path =
        tmp.parent().map_or_else(|| tmp.clone(), std::path::PathBuf::from).join("test-artifacts").join("evals-compare.png");
    std::fs::create_dir_all(path.parent().expect("artifact dir")).expect("create the artifact dir");
    std::fs::write(&path, &png).expect("write the screenshot");
    println!("comparison screenshot: {}", path.display());
    browser.close().await;
    fleet.stop().await;
}
