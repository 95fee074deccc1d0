//! The README examples both SDKs show, run verbatim against a local fleet
//! and their output checked alike: a task followed to its end, a batch of
//! 100 whose tasks all end, a schedule's life, a webhook handler that
//! accepts a real delivery and rejects a forged one, and usage that counts
//! what the examples ran.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::api_client::ApiClient;
use crate::fleet::api_key;
use crate::sdk::{example, python, python_env, readme_examples, run, BuiltTypescript, Ran, Running, SdkFleet};

/// How long a webhook delivery may take to reach the handler.
const DELIVERED: Duration = Duration::from_secs(60);

/// An SDK and how its examples run.
pub enum Sdk {
    Python,
    Typescript(BuiltTypescript),
}

impl Sdk {
    fn readme(&self) -> PathBuf {
        let dir = match self {
            Sdk::Python => "sdk/python",
            Sdk::Typescript(_) => "sdk/typescript",
        };
        crate::sdk::repo_root().join(dir).join("README.md")
    }

    /// The program and argument that run `code` saved as `name`.
    fn script(&self, name: &str, code: &str, scratch: &Path) -> (PathBuf, PathBuf, Vec<(String, String)>) {
        match self {
            Sdk::Python => {
                let path = scratch.join(format!("{name}.py"));
                std::fs::write(&path, code).expect("write the example");
                (python(), path, python_env(&[]))
            }
            Sdk::Typescript(built) => (PathBuf::from("node"), built.script(name, code), Vec::new()),
        }
    }

    async fn run_example(&self, fleet: &SdkFleet, name: &str, code: &str, scratch: &Path) -> Ran {
        let (program, path, mut env) = self.script(name, code, scratch);
        env.extend(fleet.client_env());
        run(&program, &[&path.to_string_lossy()], scratch, &env).await
    }

    fn spawn_example(&self, fleet: &SdkFleet, name: &str, code: &str, scratch: &Path, extra: (&str, String)) -> Running {
        let (program, path, mut env) = self.script(name, code, scratch);
        env.extend(fleet.client_env());
        env.push((extra.0.to_owned(), extra.1));
        Running::spawn(&program, &[&path.to_string_lossy()], scratch, &env)
    }
}

/// Runs every example of `sdk`'s README against `fleet` and checks what each printed.
pub async fn check_readme_examples(sdk: &Sdk, fleet: &SdkFleet) {
    let examples = readme_examples(&sdk.readme());
    let scratch = crate::sdk::ScratchDir::new();
    let dir = scratch.path();
    let api = ApiClient::new(&fleet.fleet.api, api_key());

    let follow = sdk.run_example(fleet, "follow", example(&examples, "follow"), dir).await;
    check_follow(&follow);
    let batch = sdk.run_example(fleet, "batch", example(&examples, "batch"), dir).await;
    assert_eq!(batch.stdout.lines().last(), Some("100 succeeded, 0 failed of 100"), "{}\n{}", batch.stdout, batch.stderr);
    assert!(batch.stderr.contains("100/100"), "the progress bar reaches the end: {}", batch.stderr);
    let (status, page) = api.get("/v1/tasks?status=succeeded&limit=500").await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["tasks"].as_array().map(Vec::len), Some(101), "every task of the examples ended: {page}");

    let schedule = sdk.run_example(fleet, "schedule", example(&examples, "schedule"), dir).await;
    let id = check_schedule(&schedule);
    assert_eq!(api.get(&format!("/v1/schedules/{id}")).await.0, 404, "the example deleted its schedule");

    let usage = sdk.run_example(fleet, "usage", example(&examples, "usage"), dir).await;
    check_usage(&usage, 101);

    if let Some((_, code)) = examples.iter().find(|(name, _)| name == "async") {
        let ran = sdk.run_example(fleet, "async", code, dir).await;
        assert_eq!(ran.stdout.lines().last(), Some("succeeded"), "{}", ran.stdout);
    }

    check_webhook_handler(sdk, fleet, example(&examples, "webhook"), dir, &api).await;
}

fn check_follow(ran: &Ran) {
    let lines = ran.lines();
    assert!(lines.first().is_some_and(|l| l.starts_with("submitted tsk_")), "{}", ran.stdout);
    assert_eq!(lines.last(), Some(&"ended succeeded"), "{}", ran.stdout);
    let events: Vec<(u64, &str)> = lines[1..lines.len() - 1]
        .iter()
        .map(|l| {
            let (seq, kind) = l.split_once(' ').unwrap_or_else(|| panic!("not an event line: {l}"));
            (seq.parse().unwrap_or_else(|_| panic!("not a seq: {l}")), kind)
        })
        .collect();
    let seqs: Vec<u64> = events.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "every event once, in order: {}", ran.stdout);
    assert_eq!(events.first().map(|e| e.1), Some("queued"), "{}", ran.stdout);
    assert_eq!(events.last().map(|e| e.1), Some("succeeded"), "{}", ran.stdout);
}

/// Checks the schedule example's lines; answers the schedule's id.
fn check_schedule(ran: &Ran) -> String {
    let lines = ran.lines();
    let created: Vec<&str> = lines.first().map(|l| l.split(' ').collect()).unwrap_or_default();
    assert!(created.len() == 5 && created[0] == "created" && created[1].starts_with("sch_"), "{}", ran.stdout);
    assert!(created[3] == "run" && created[4].len() >= 20, "the next run is an RFC 3339 time: {}", ran.stdout);
    assert_eq!(lines.get(1).map(|l| l.to_lowercase()), Some("paused true".to_owned()), "{}", ran.stdout);
    assert_eq!(lines.get(2), Some(&"listed 1"), "{}", ran.stdout);
    assert_eq!(lines.get(3).copied(), Some(format!("deleted {}", created[1]).as_str()), "{}", ran.stdout);
    created[1].to_owned()
}

/// Checks the usage example: the range, at least `succeeded` tasks ended, and today's line.
fn check_usage(ran: &Ran, succeeded: u64) {
    let lines = ran.lines();
    let range: Vec<&str> = lines.first().map(|l| l.split(' ').collect()).unwrap_or_default();
    assert!(range.len() == 4 && range[0] == "from" && range[2] == "to", "{}", ran.stdout);
    let ended = lines.iter().find(|l| l.starts_with("tasks ended")).unwrap_or_else(|| panic!("{}", ran.stdout));
    let after = ended.split("succeeded").nth(1).unwrap_or_else(|| panic!("no succeeded count: {ended}"));
    let count: u64 = after
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .expect("a count");
    assert!(count >= succeeded, "usage counts the examples' tasks: {ended}");
    assert!(lines.iter().any(|l| l.starts_with(range[3])), "a line for today ({}): {}", range[3], ran.stdout);
}

/// A free loopback port.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

async fn check_webhook_handler(sdk: &Sdk, fleet: &SdkFleet, code: &str, dir: &Path, api: &ApiClient) {
    let port = free_port();
    let mut handler = sdk.spawn_example(fleet, "webhook", code, dir, ("PORT", port.to_string()));
    let listening = handler.line_starting("listening for", DELIVERED).await;
    assert!(listening.contains("whk_"), "{listening}");

    let spec = json!({"prompt": "deliver me", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 5}]});
    let (status, task) = api.post("/v1/tasks", &spec).await;
    assert_eq!(status, 202, "{task}");
    let task_id = task["id"].as_str().expect("task id");
    let verified = handler.line_starting("verified", DELIVERED).await;
    assert_eq!(verified, format!("verified task.succeeded {task_id}"), "the real delivery verifies");

    let body = json!({"type": "task.succeeded", "timestamp": "2026-01-01T00:00:00Z", "data": {"id": task_id}}).to_string();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs();
    let forged = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/hook"))
        .header("webhook-id", "msg_forged")
        .header("webhook-timestamp", now.to_string())
        .header("webhook-signature", "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("post a forged delivery");
    assert_eq!(forged.status().as_u16(), 400, "a forged delivery is refused");
    let rejected = handler.line_starting("rejected", DELIVERED).await;
    assert!(rejected.len() > "rejected".len(), "{rejected}");
    handler.child.start_kill().ok();
}
