//! The claude-code pipeline end to end, with the real `claude` CLI: a worker
//! with local sandboxes, a real S3-protocol store and its model gateway runs
//! the CLI in a sandbox against a local fake of the Anthropic Messages API
//! (streamed answers, as the CLI asks for them). Each test checks what a
//! user relies on: every output line is a `block` event, files the CLI
//! wrote come back as artifacts, a follow-up task resumes the session, the
//! sandbox never holds the real model key, and an error result fails the
//! task with the CLI's message; files come as `file` events while the CLI
//! writes them, and its token, refreshed, outlives its first expiry; a
//! task's token budget and its tenant's daily tokens stop it at the model
//! call that crosses them.
//!
//! These tests need the CLI on this machine (`scripts/setup.sh` installs
//! it); without it they fail saying so.

use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_blobstore::{content_hash, BlobStore, UploaderOptions};
use flotilla_config::Secret;
use flotilla_queue::queue::{Queue, TaskRecord};
use flotilla_tests::fakes::anthropic::{error, streamed_answer, streamed_tool_turn};
use flotilla_tests::fakes::{Recorded, ScriptedServer};
use flotilla_tests::s3_server::S3Server;
use flotilla_tests::tasks::{events, queue, record, tenant, wait_all_ended};
use flotilla_tests::{
    api_key, eventually, spawn_api_with_blobs, test_config, unique_prefix, ApiClient, InProcessWorker, RedisServer,
};
use flotilla_types::clock::parse_rfc3339;
use flotilla_types::event::{Event, EventKind};
use flotilla_types::ids::TaskId;
use flotilla_types::task::{StopCode, TaskSpec, TaskStatus};
use flotilla_worker::gateway::{GatewayConfig, ModelGateway};
use flotilla_worker::sandbox::{LocalConfig, LocalProvider, PoolConfig, SandboxPool};
use flotilla_worker::tools::Tools;
use flotilla_worker::Registry;
use serde_json::{json, Value};

/// The fleet's model key: it must reach the fake through the gateway and
/// nothing else.
const REAL_KEY: &str = "sk-ant-api03-flotilla-real-key-7f3c9a1e";
const TASK_TIMEOUT: Duration = Duration::from_secs(120);

/// Fails the test with the fix when the CLI is missing.
fn require_claude_cli() {
    let installed = std::process::Command::new("claude").arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(installed, "the claude CLI is not installed here: run scripts/setup.sh (npm install -g @anthropic-ai/claude-code)");
}

/// A worker with local sandboxes, a store and a gateway to the fake API.
struct CodeFleet {
    _redis: RedisServer,
    _s3: S3Server,
    store: BlobStore,
    config: flotilla_config::Config,
    api: ScriptedServer,
    gateway: ModelGateway,
    queue: Queue,
    pool: SandboxPool,
    worker: Option<InProcessWorker>,
}

impl CodeFleet {
    async fn start() -> Self {
        Self::start_with_token_ttl(flotilla_worker::gateway::DEFAULT_TOKEN_TTL).await
    }

    /// A fleet whose gateway grants tokens for `token_ttl` at a time.
    async fn start_with_token_ttl(token_ttl: Duration) -> Self {
        Self::start_with(token_ttl, &[]).await
    }

    /// A fleet with these settings beside the test defaults.
    async fn start_with(token_ttl: Duration, extra: &[(&str, &str)]) -> Self {
        require_claude_cli();
        let s3 = S3Server::start();
        let store = s3.store(&unique_prefix());
        let api = ScriptedServer::start().await;
        let gateway = ModelGateway::new(GatewayConfig {
            upstream: api.url(),
            api_key: Secret::new(REAL_KEY),
            listen: "127.0.0.1:0".parse().expect("address"),
            public_url: None,
            token_ttl,
        });
        let redis = RedisServer::start();
        let mut env = vec![("FLOTILLA_HEARTBEAT_MS", "200")];
        env.extend_from_slice(extra);
        let config = test_config(&redis, &unique_prefix(), &env);
        let provider = Arc::new(LocalProvider::new(LocalConfig::default()));
        let pool = SandboxPool::new(provider, PoolConfig { warm: 0, max_live: 2, ..PoolConfig::default() });
        let tools = Tools {
            sandboxes: Some(pool.clone()),
            blobs: Some(store.clone()),
            uploads: UploaderOptions::default(),
            gateway: Some(gateway.clone()),
            live: None,
            pricing: Default::default(),
            profile_key: None,
            park_waiting_after: std::time::Duration::from_secs(60),
            templates: Default::default(),
        };
        let worker = InProcessWorker::start_with_tools(config.clone(), Registry::standard(), tools);
        Self { queue: queue(&config).await, _redis: redis, _s3: s3, store, config, api, gateway, pool, worker: Some(worker) }
    }

    async fn run_to_end(&self, spec: Value) -> (TaskId, TaskRecord, Vec<Event>) {
        let spec = TaskSpec::from_json(spec.to_string().as_bytes()).expect("valid spec");
        let id = self.queue.submitter().submit(&tenant(), spec).await.expect("submit").id;
        wait_all_ended(&self.queue, std::slice::from_ref(&id), TASK_TIMEOUT).await;
        (id.clone(), record(&self.queue, &id).await, events(&self.queue, &id).await)
    }

    /// The model calls the fake received.
    fn model_calls(&self) -> Vec<Recorded> {
        self.api.received().into_iter().filter(|r| r.path.starts_with("/v1/messages")).collect()
    }

    async fn stop(mut self) {
        if let Some(worker) = self.worker.take() {
            worker.stop().await;
        }
        self.pool.shutdown().await;
    }
}

fn blocks(events: &[Event]) -> Vec<(&Value, &str)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Block { block } => Some((block, e.ts.as_str())),
            _ => None,
        })
        .collect()
}

fn block_type(block: &Value) -> &str {
    block["type"].as_str().unwrap_or_default()
}

/// The artifacts a result lists, by path.
fn artifacts(task: &TaskRecord) -> Vec<(String, String, u64, String)> {
    let list = task.result.as_ref().and_then(|r| r["artifacts"].as_array()).cloned().unwrap_or_default();
    list.iter()
        .map(|a| {
            let text = |field: &str| a[field].as_str().unwrap_or_default().to_owned();
            (text("path"), text("key"), a["bytes"].as_u64().unwrap_or_default(), text("hash"))
        })
        .collect()
}

fn bash(command: &str) -> Value {
    json!({"command": command, "description": "run a command"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_claude_code_files_it_writes_come_back_as_artifacts() {
    let fleet = CodeFleet::start().await;
    let write =
        "printf '# Report\\nall good\\n' > report.md && mkdir -p out && echo 1,2,3 > out/data.csv && echo edited >> input.txt";
    fleet.api.push(streamed_tool_turn("Writing the report.", "toolu_write", "Bash", bash(write)));
    fleet.api.push(streamed_answer("The report is written.").after(Duration::from_millis(1500)));
    let (id, task, events) = fleet
        .run_to_end(json!({
            "prompt": "write a report", "pipeline": "claude-code", "retry": {"max_attempts": 1},
            "files": {"input.txt": "numbers\n", "docs/notes.txt": "unchanged\n"}
        }))
        .await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{:?} {events:?}", task.error);
    let result = task.result.clone().expect("a result");
    assert_eq!(result["text"], "The report is written.");

    // Every output line is a block, in order: init first, result last.
    let blocks = blocks(&events);
    let kinds: Vec<&str> = blocks.iter().map(|(b, _)| block_type(b)).collect();
    assert_eq!(kinds.first(), Some(&"system"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"result"), "{kinds:?}");
    assert!(kinds.contains(&"assistant") && kinds.contains(&"user"), "{kinds:?}");
    let session_id = blocks[0].0["session_id"].as_str().expect("init names the session");
    assert_eq!(result["session_id"], session_id);
    // Relayed while the CLI ran: the first turn's blocks were stored before
    // the delayed final answer existed.
    let first_turn = blocks.iter().find(|(b, _)| block_type(b) == "assistant").map(|(_, ts)| *ts).expect("an assistant block");
    let last = blocks.last().map(|(_, ts)| *ts).expect("a result block");
    let gap = parse_rfc3339(last).zip(parse_rfc3339(first_turn)).map(|(a, b)| a - b).expect("times parse");
    assert!(gap >= 1000, "blocks were emitted as the CLI printed them, not at the end ({gap} ms apart)");

    // New and changed files are artifacts with the bytes the CLI wrote; an
    // untouched input is not.
    let stored = artifacts(&task);
    let paths: Vec<&str> = stored.iter().map(|(p, ..)| p.as_str()).collect();
    assert_eq!(paths, ["input.txt", "out/data.csv", "report.md"]);
    let expected: [&[u8]; 3] = [b"numbers\nedited\n", b"1,2,3\n", b"# Report\nall good\n"];
    for ((path, key, bytes, hash), want) in stored.iter().zip(expected) {
        let got = fleet.store.get(key).await.unwrap_or_else(|e| panic!("{path} is stored: {e}"));
        assert_eq!(&got[..], want, "{path}");
        assert_eq!((*bytes, hash.as_str()), (want.len() as u64, content_hash(want).as_str()), "{path}");
        assert!(key.contains(&format!("tasks/{id}/artifacts/")), "{key}");
    }
    // The task page links each artifact for its own tenant only.
    let api = spawn_api_with_blobs(fleet.config.clone(), fleet.store.clone()).await;
    let (status, page) = ApiClient::new(&api, api_key()).get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(status, 200, "{page}");
    let linked = page["result"]["artifacts"].as_array().cloned().unwrap_or_default();
    assert_eq!(linked.len(), 3, "{page}");
    for (artifact, want) in linked.iter().zip(expected) {
        let url = artifact["url"].as_str().unwrap_or_else(|| panic!("a presigned url: {artifact}"));
        assert!(url.contains("X-Amz-Expires="), "the link expires: {url}");
        let fetched = reqwest::get(url).await.expect("fetch").bytes().await.expect("body");
        assert_eq!(&fetched[..], want);
    }
    assert_eq!(
        ApiClient::new(&api, flotilla_tests::fleet::globex_key()).get(&format!("/v1/tasks/{id}")).await.0,
        404,
        "another tenant sees nothing"
    );

    let transcript = result["session"]["files"].as_array().cloned().unwrap_or_default();
    assert!(transcript.iter().any(|f| f["path"] == format!("{session_id}.jsonl")), "the transcript is kept: {result}");

    assert_eq!(fleet.model_calls().len(), 2);
    assert_eq!(fleet.pool.live(), 0, "the sandbox is released");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_claude_code_continue_task_resumes_the_session() {
    let fleet = CodeFleet::start().await;
    fleet.api.push(streamed_tool_turn("Noting it down.", "toolu_memo", "Bash", bash("echo 'first run' > memo.txt")));
    fleet.api.push(streamed_answer("Wrote memo.txt."));
    let (first, task, events) = fleet
        .run_to_end(json!({"prompt": "remember the first run", "pipeline": "claude-code", "retry": {"max_attempts": 1}}))
        .await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{:?} {events:?}", task.error);
    let session = task.result.as_ref().and_then(|r| r["session_id"].as_str()).expect("a session id").to_owned();

    fleet.api.push(streamed_tool_turn("Checking the memo.", "toolu_seen", "Bash", bash("cat memo.txt > seen.txt")));
    fleet.api.push(streamed_answer("Earlier I wrote memo.txt."));
    let (_, task, events) = fleet
        .run_to_end(json!({
            "prompt": "what did you write before?", "pipeline": "claude-code", "retry": {"max_attempts": 1},
            "continue_task": first.as_str()
        }))
        .await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{:?} {events:?}", task.error);
    let result = task.result.clone().expect("a result");
    assert_eq!(
        (result["text"].as_str(), result["session_id"].as_str()),
        (Some("Earlier I wrote memo.txt."), Some(session.as_str()))
    );
    let init = blocks(&events).first().map(|(b, _)| (*b).clone()).expect("an init block");
    assert_eq!(init["session_id"], session.as_str(), "--resume continues the same session");

    // The resumed call carries the first task's whole conversation.
    let calls = fleet.model_calls();
    assert_eq!(calls.len(), 4);
    let resumed = &calls[2];
    let history = resumed.body["messages"].to_string();
    assert!(history.contains("remember the first run") && history.contains("toolu_memo"), "{history}");
    assert!(history.contains("what did you write before?"));
    assert_eq!(resumed.header("x-claude-code-session-id"), Some(session.as_str()));
    // The first task's files were there to continue with.
    let seen = artifacts(&task).into_iter().find(|(p, ..)| p == "seen.txt").expect("seen.txt is an artifact");
    assert_eq!(&fleet.store.get(&seen.1).await.expect("stored")[..], b"first run\n");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_claude_code_sandbox_holds_only_a_revocable_task_token() {
    let fleet = CodeFleet::start().await;
    fleet.api.push(streamed_tool_turn("Looking around.", "toolu_env", "Bash", bash("env > env.txt")));
    fleet.api.push(streamed_answer("Done."));
    let (id, task, events) = fleet
        .run_to_end(json!({"prompt": "print the environment", "pipeline": "claude-code", "retry": {"max_attempts": 1}}))
        .await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{:?} {events:?}", task.error);

    // The sandbox's environment has the gateway and a task token, not the key.
    let env_file = artifacts(&task).into_iter().find(|(p, ..)| p == "env.txt").expect("env.txt is an artifact");
    let env = String::from_utf8(fleet.store.get(&env_file.1).await.expect("stored").to_vec()).expect("text");
    assert!(!env.contains(REAL_KEY), "the real key never enters the sandbox");
    let token = env.lines().find_map(|l| l.strip_prefix("ANTHROPIC_API_KEY=")).expect("the CLI has a key").to_owned();
    assert!(token.starts_with("flt-task-") && token != REAL_KEY, "{token}");
    // The CLI calls the forwarder in its own network, which relays to the
    // gateway's socket for this sandbox.
    assert!(env.lines().any(|l| l == "ANTHROPIC_BASE_URL=http://127.0.0.1:4780"), "{env}");

    // Only the gateway-to-API hop carries the real key.
    let calls = fleet.model_calls();
    assert!(!calls.is_empty());
    for call in &calls {
        assert_eq!(call.header("x-api-key"), Some(REAL_KEY));
        assert!(!format!("{:?}", call.headers).contains(&token), "the token stops at the gateway");
    }
    // The key is in no event.
    let raw = fleet.queue.reader().events_after(&tenant(), &id, 0).await.expect("events");
    assert!(raw.iter().all(|e| !e.contains(REAL_KEY)), "the real key never appears in events");

    // The token died with its task (and was only ever valid on its sandbox's socket).
    assert_eq!(fleet.gateway.live_tokens(), 0);
    let tcp = fleet.gateway.grant(&TaskId::generate(), Duration::from_secs(60)).await.expect("the TCP listener starts");
    let gateway_url = tcp.base_url().to_owned();
    let client = tcp.client_credentials().expect("TLS credentials").http_client().expect("client");
    let answer = client
        .post(format!("{gateway_url}/v1/messages"))
        .header("x-api-key", &token)
        .header("content-type", "application/json")
        .body(r#"{"model": "claude-sonnet-4-5", "max_tokens": 10, "messages": []}"#)
        .send()
        .await
        .expect("the gateway answers");
    assert_eq!(answer.status(), 401);
    let body: Value = answer.json().await.expect("json");
    assert_eq!(body["error"]["type"], "authentication_error");
    assert_eq!(fleet.model_calls().len(), calls.len(), "a revoked token reaches nothing");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_claude_code_error_result_fails_the_task_with_the_cli_message() {
    let fleet = CodeFleet::start().await;
    fleet.api.push(error(400, "invalid_request_error", "the request was refused: quota for this workspace is spent"));
    let (_, task, events) =
        fleet.run_to_end(json!({"prompt": "do something", "pipeline": "claude-code", "retry": {"max_attempts": 1}})).await;
    assert_eq!((task.status, task.code), (TaskStatus::Failed, Some(StopCode::Problem)), "{events:?}");
    let error = task.error.clone().unwrap_or_default();
    assert!(error.contains("quota for this workspace is spent"), "the CLI's own message: {error}");
    let last = blocks(&events).last().map(|(b, _)| (*b).clone()).expect("blocks");
    assert_eq!((block_type(&last), last["is_error"].as_bool()), ("result", Some(true)));
    assert_eq!(fleet.gateway.live_tokens(), 0, "a failed task's token is revoked too");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_claude_code_cancel_stops_the_cli_and_revokes_its_token() {
    let fleet = CodeFleet::start().await;
    fleet.api.push(streamed_answer("too late").after(Duration::from_secs(60)));
    let spec = TaskSpec::from_json(json!({"prompt": "think for a long time", "pipeline": "claude-code"}).to_string().as_bytes())
        .expect("spec");
    let id = fleet.queue.submitter().submit(&tenant(), spec).await.expect("submit").id;
    let deadline = Instant::now() + TASK_TIMEOUT;
    while fleet.model_calls().is_empty() {
        assert!(Instant::now() < deadline, "the CLI never called the model");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(fleet.gateway.live_tokens(), 1, "the running task holds a token");
    let asked = Instant::now();
    fleet.queue.submitter().cancel(&tenant(), &id).await.expect("cancel");
    wait_all_ended(&fleet.queue, std::slice::from_ref(&id), Duration::from_secs(10)).await;
    assert_eq!(record(&fleet.queue, &id).await.status, TaskStatus::Cancelled);
    assert!(asked.elapsed() < Duration::from_secs(10), "stopped long before the model's 60 s answer: {:?}", asked.elapsed());
    assert_eq!(fleet.gateway.live_tokens(), 0, "a cancelled task's token is revoked");
    eventually("the sandbox is released", Duration::from_secs(10), async || fleet.pool.live() == 0).await;
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_claude_code_files_arrive_as_written_and_a_refreshed_token_lasts_until_the_task_ends() {
    const TTL: Duration = Duration::from_secs(2);
    const TURN: Duration = Duration::from_millis(1500);
    let fleet = CodeFleet::start_with_token_ttl(TTL).await;
    let files = [("a.txt", "one\n"), ("b.txt", "two\n"), ("c.txt", "three\n")];
    for (n, (path, content)) in files.iter().enumerate() {
        let write = format!("printf '{}' > {path}", content.replace('\n', "\\n"));
        let turn = streamed_tool_turn(&format!("Writing {path}."), &format!("toolu_{n}"), "Bash", bash(&write));
        fleet.api.push(if n == 0 { turn } else { turn.after(TURN) });
    }
    fleet.api.push(streamed_answer("Three files written.").after(TURN));

    let spec = json!({"prompt": "write three files", "pipeline": "claude-code", "retry": {"max_attempts": 1}});
    let spec = TaskSpec::from_json(spec.to_string().as_bytes()).expect("valid spec");
    let id = fleet.queue.submitter().submit(&tenant(), spec).await.expect("submit").id;
    let started = Instant::now();
    // Each `file` event, as soon as it is seen: was the task still running,
    // and did the store already hold the bytes it names?
    let mut seen: Vec<(String, bool, bool)> = Vec::new();
    let deadline = Instant::now() + TASK_TIMEOUT;
    loop {
        let status = record(&fleet.queue, &id).await.status;
        for event in events(&fleet.queue, &id).await {
            let EventKind::File { path, op, hash, bytes } = event.kind else { continue };
            if seen.iter().any(|(p, ..)| *p == path) {
                continue;
            }
            assert_eq!(op, flotilla_types::event::FileOp::Write, "{path}");
            let key = fleet.store.layout().artifact(&id, &path).expect("artifact key");
            let stored = fleet.store.get(&key).await.map(|b| b.to_vec()).unwrap_or_default();
            let readable = hash.as_deref() == Some(content_hash(&stored).as_str()) && bytes == stored.len() as u64;
            seen.push((path, !status.is_terminal(), readable));
        }
        if status.is_terminal() {
            break;
        }
        assert!(Instant::now() < deadline, "the task did not end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = started.elapsed();
    let task = record(&fleet.queue, &id).await;
    let all = events(&fleet.queue, &id).await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{:?} {all:?}", task.error);

    let expected: Vec<(String, bool, bool)> = files.iter().map(|(p, _)| ((*p).to_owned(), true, true)).collect();
    assert_eq!(seen, expected, "each file's event came while the task ran, in the order written, its bytes already stored");
    let terminal = all.iter().position(|e| e.kind.is_terminal()).expect("a terminal event");
    let last_file = all.iter().rposition(|e| matches!(e.kind, EventKind::File { .. })).expect("file events");
    assert!(last_file < terminal, "every file event precedes the end");
    for (path, content) in files {
        let stored = artifacts(&task).into_iter().find(|(p, ..)| p == path).expect("the final artifacts stay");
        assert_eq!(&fleet.store.get(&stored.1).await.expect("stored")[..], content.as_bytes());
    }

    // The task outlived its token's first lifetime several times over, and
    // every model call went through: the token was refreshed. Once the
    // task ended it was revoked.
    assert!(took > TTL * 2, "the task ran {took:?}, more than two token lifetimes of {TTL:?}");
    assert_eq!(fleet.model_calls().len(), 4, "every turn reached the model");
    assert_eq!(fleet.gateway.live_tokens(), 0, "the token ended with the task");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_claude_code_stops_at_the_model_call_that_crosses_its_token_budget() {
    use flotilla_tests::fakes::anthropic::{CACHE_READ_INPUT_TOKENS, INPUT_TOKENS, OUTPUT_TOKENS};
    let fleet = CodeFleet::start().await;
    fleet.api.push(streamed_tool_turn("First step.", "toolu_one", "Bash", bash("echo one > one.txt")));
    fleet.api.push(streamed_tool_turn("Second step.", "toolu_two", "Bash", bash("echo two > two.txt")));
    fleet.api.push(streamed_answer("Both written."));
    // Each call spends 1 807 tokens: the second crosses 2 500.
    let per_call = INPUT_TOKENS + CACHE_READ_INPUT_TOKENS + OUTPUT_TOKENS;
    let (_, task, events) = fleet
        .run_to_end(json!({
            "prompt": "write two files", "pipeline": "claude-code", "retry": {"max_attempts": 1},
            "budget": {"max_tokens": 2500}
        }))
        .await;
    assert_eq!((task.status, task.code), (TaskStatus::Failed, Some(StopCode::Budget)), "{:?} {events:?}", task.error);
    assert!(task.error.as_deref().is_some_and(|e| e.contains("budget")), "{:?}", task.error);
    let usage = task.usage.as_ref().expect("usage");
    assert_eq!(
        (usage.input_tokens, usage.output_tokens),
        (2 * (INPUT_TOKENS + CACHE_READ_INPUT_TOKENS), 2 * OUTPUT_TOKENS),
        "both calls counted: {usage:?}"
    );
    assert_eq!(usage.input_tokens + usage.output_tokens, 2 * per_call);
    let model = usage.models.get("claude-sonnet-4-5-20250929").expect("tokens per model");
    assert_eq!((model.input_tokens, model.output_tokens), (usage.input_tokens, usage.output_tokens));
    assert!(usage.sandbox_ms.get("local").is_some_and(|ms| *ms > 0), "sandbox time is counted: {usage:?}");
    assert_eq!(fleet.model_calls().len(), 2, "no model call after the crossing one");
    let released = Instant::now();
    while fleet.pool.live() > 0 && released.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(fleet.pool.live(), 0, "the sandbox is released");
    assert_eq!(fleet.gateway.live_tokens(), 0, "its gateway token is revoked");
    fleet.stop().await;
}

/// A tenant's `max_tokens_per_day` with the real CLI: the model call that
/// takes the tenant past it is answered, then the task takes no further
/// call, its sandbox is released and it goes back to `queued` (not failed,
/// no retry spent); once the fleet's clock passes the next UTC midnight it
/// runs again from the start, to success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_claude_code_waits_queued_for_the_next_day_once_its_tenant_spent_its_daily_tokens() {
    use flotilla_tests::fakes::anthropic::{CACHE_READ_INPUT_TOKENS, INPUT_TOKENS, OUTPUT_TOKENS};
    let dir = std::env::temp_dir().join(format!("flotilla-code-day-{}", unique_prefix()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("flotilla.toml");
    // Each call spends 1 807 tokens: the second crosses 2 500.
    std::fs::write(&file, "[tenants.acme]\nmax_tokens_per_day = 2500\n").expect("write config");
    let fleet =
        CodeFleet::start_with(flotilla_worker::gateway::DEFAULT_TOKEN_TTL, &[("FLOTILLA_CONFIG", file.to_str().expect("utf-8"))])
            .await;
    fleet.api.push(streamed_tool_turn("First step.", "toolu_one", "Bash", bash("echo one > one.txt")));
    fleet.api.push(streamed_tool_turn("Second step.", "toolu_two", "Bash", bash("echo two > two.txt")));
    fleet.api.push(streamed_answer("Both written."));
    let spec = json!({"prompt": "write two files", "pipeline": "claude-code", "retry": {"max_attempts": 1}});
    let spec = TaskSpec::from_json(spec.to_string().as_bytes()).expect("valid spec");
    let id = fleet.queue.submitter().submit(&tenant(), spec).await.expect("submit").id;

    let began = Instant::now();
    loop {
        let task = record(&fleet.queue, &id).await;
        assert!(!task.status.is_terminal(), "the task must wait, not end: {:?} {:?}", task.status, task.error);
        if task.status == TaskStatus::Queued && task.attempts == 1 {
            break;
        }
        assert!(began.elapsed() < TASK_TIMEOUT, "the task never went back to waiting");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let per_call = INPUT_TOKENS + CACHE_READ_INPUT_TOKENS + OUTPUT_TOKENS;
    let task = record(&fleet.queue, &id).await;
    let usage = task.usage.as_ref().expect("usage");
    assert_eq!(usage.input_tokens + usage.output_tokens, 2 * per_call, "both answered calls counted: {usage:?}");
    let first_run = events(&fleet.queue, &id).await;
    let names: Vec<&str> = first_run.iter().map(|e| e.kind.name()).collect();
    assert_eq!(names.last(), Some(&"queued"), "{names:?}");
    assert!(!names.iter().any(|n| ["failed", "retrying", "succeeded"].contains(n)), "{names:?}");
    let released = Instant::now();
    while fleet.pool.live() > 0 && released.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(fleet.pool.live(), 0, "the sandbox is released");
    assert_eq!(fleet.gateway.live_tokens(), 0, "its gateway token is revoked");
    // The sleep is what is tested: for a second more, no model call.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(fleet.model_calls().len(), 2, "no model call after the crossing one");
    assert_eq!(record(&fleet.queue, &id).await.status, TaskStatus::Queued, "still waiting for the day");

    // The answer queued for the first run is used by the second, which
    // starts over: a new session, so one answer is all it needs.
    let now = fleet.queue.now_ms();
    fleet.config.clock.advance(flotilla_types::clock::ms_to_next_utc_day(now) + 1_000);
    wait_all_ended(&fleet.queue, std::slice::from_ref(&id), TASK_TIMEOUT).await;
    let task = record(&fleet.queue, &id).await;
    assert_eq!((task.status, task.attempts), (TaskStatus::Succeeded, 2), "{:?}", task.error);
    assert_eq!(fleet.model_calls().len(), 3, "the second run made its one call");
    fleet.stop().await;
}
