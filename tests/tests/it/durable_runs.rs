//! Durable runs: a model-driven task whose worker dies or stops mid-run is
//! taken up by another worker in the same desktop, from its step journal.
//! Real parts throughout: worker processes, a real Redis with a 5 s lease,
//! a real-protocol S3 for screenshots, desktops from a flotilla-sandboxd (they outlive their worker) reached
//! through the E2B provider, and a local server speaking the OpenAI
//! Responses protocol that logs every call. What the desktop did is read
//! from a file its terminal appended to, one line per typed command, so an
//! action carried out twice shows as a repeated line.

use std::time::{Duration, Instant};

use flotilla_blobstore::BlobStore;
use flotilla_config::Config;
use flotilla_queue::keys::Keys;
use flotilla_queue::queue::Queue;
use flotilla_sandbox::suite::host_address;
use flotilla_sandboxd::{Sandboxd, TestOptions};
use flotilla_tests::desktop::{eventually, sandbox_ids};
use flotilla_tests::fakes::{openai, Recorded, Reply, ScriptedServer};
use flotilla_tests::fleet::{test_env, WorkerProcess};
use flotilla_tests::s3_server::S3Server;
use flotilla_tests::tasks::{events, queue, record, tenant};
use flotilla_tests::{spawn_api, test_config, unique_prefix, ApiServer, RedisServer};
use flotilla_types::event::{Event, EventKind};
use flotilla_types::ids::TaskId;
use flotilla_types::task::{Decision, HumanInput, TaskSpec, TaskStatus};
use flotilla_worker::sandbox::{SandboxId, SandboxProvider};
use serde_json::{json, Value};

/// A sandbox host, Redis, the model server (every provider's base URL
/// points at it) and the workers' environment.
pub(crate) struct Stand {
    host: Sandboxd,
    redis: RedisServer,
    keys: Keys,
    _s3: S3Server,
    /// The store the workers keep screenshots and output files in.
    blobs: BlobStore,
    config: Config,
    pub(crate) model: ScriptedServer,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) queue: Queue,
}

/// How much a stand runs at once: each worker's task slots, and the
/// desktops its host keeps running (a task's own and those whose task was
/// handed back and waits for a worker).
/// With `gateway`, each worker's model gateway listens on the host's own
/// address, which the host's desktops reach as a hosted sandbox reaches
/// the internet (what claude-code tasks need).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Size {
    pub(crate) slots: usize,
    pub(crate) desktops: usize,
    pub(crate) gateway: bool,
}

impl Default for Size {
    fn default() -> Self {
        Self { slots: 4, desktops: 8, gateway: false }
    }
}

impl Stand {
    pub(crate) async fn start() -> Self {
        Self::start_sized(Size::default()).await
    }

    pub(crate) async fn start_sized(size: Size) -> Self {
        let internet = if size.gateway { vec![host_address()] } else { Vec::new() };
        let host = Sandboxd::start_with(TestOptions { capacity: Some(size.desktops), internet, ..TestOptions::default() }).await;
        let redis = RedisServer::start();
        let prefix = unique_prefix();
        let model = ScriptedServer::start().await;
        let base = format!("{}/v1", model.url());
        let model_url = model.url();
        let slots = size.slots.to_string();
        let gateway_addr = size.gateway.then(|| format!("{}:0", host_address()));
        let mut extra = vec![
            ("FLOTILLA_SANDBOX_PROVIDER", "e2b"),
            ("E2B_API_KEY", host.test_key()),
            ("E2B_API_URL", host.api_url()),
            ("E2B_SANDBOX_URL", host.sandbox_url()),
            ("E2B_DOMAIN", host.domain()),
            ("OPENAI_BASE_URL", base.as_str()),
            ("OPENAI_API_KEY", "sk-test-openai-secret"),
            ("ANTHROPIC_BASE_URL", model_url.as_str()),
            ("ANTHROPIC_API_KEY", "sk-ant-test-secret"),
            ("GEMINI_BASE_URL", model_url.as_str()),
            ("GEMINI_API_KEY", "gemini-test-secret"),
            ("FLOTILLA_LEASE_MS", "5000"),
            ("FLOTILLA_HEARTBEAT_MS", "500"),
            ("FLOTILLA_WORKER_CONCURRENCY", slots.as_str()),
        ];
        if let Some(addr) = &gateway_addr {
            extra.push(("FLOTILLA_GATEWAY_ADDR", addr.as_str()));
        }
        let s3 = S3Server::start();
        let mut env = test_env(&redis, &prefix, &extra);
        env.extend(s3.worker_env(&prefix));
        let config = test_config(&redis, &prefix, &extra);
        let keys = Keys::new(config.key_prefix.clone());
        let queue = queue(&config).await;
        let blobs = s3.store(&prefix);
        Self { host, redis, keys, _s3: s3, blobs, config, model, env, queue }
    }

    /// The API, in process, on this stand's Redis.
    pub(crate) async fn api(&self) -> ApiServer {
        spawn_api(self.config.clone()).await
    }

    pub(crate) async fn submit(&self, spec: Value) -> TaskId {
        let spec = TaskSpec::from_json(spec.to_string().as_bytes()).expect("valid spec");
        self.queue.submitter().submit(&tenant(), spec).await.expect("submit").id
    }

    pub(crate) async fn events(&self, id: &TaskId) -> Vec<Event> {
        events(&self.queue, id).await
    }

    /// Waits until task `id` has an event that `found` accepts.
    pub(crate) async fn wait_for(&self, what: &str, id: &TaskId, secs: u64, found: impl Fn(&Event) -> bool) {
        eventually(what, Duration::from_secs(secs), async || self.events(id).await.iter().any(&found)).await;
    }

    pub(crate) async fn wait_ended(&self, id: &TaskId) -> Vec<Event> {
        eventually("the task ends", Duration::from_secs(90), async || record(&self.queue, id).await.status.is_terminal()).await;
        self.events(id).await
    }

    /// Task `id`'s step journal as Redis holds it.
    pub(crate) fn journal(&self, id: &TaskId) -> String {
        self.redis.cli(&["HGET", &self.keys.task(id), "journal"])
    }

    /// The desktop's `log.txt`: one line per command its terminal ran.
    pub(crate) async fn log(&self, sandbox: &str) -> String {
        let provider = flotilla_worker::sandbox::E2bProvider::new(self.host.config()).expect("a client of the host");
        let id = SandboxId::parse(sandbox).expect("an id");
        let bytes = provider.read_file(&id, "log.txt").await.unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Field `field` of task `id`'s hash, empty when it has none.
    pub(crate) fn task_field(&self, id: &TaskId, field: &str) -> String {
        self.redis.cli(&["HGET", &self.keys.task(id), field]).trim().to_owned()
    }

    /// The sandbox host's control API and its key.
    pub(crate) fn host_api_url(&self) -> String {
        self.host.api_url().to_owned()
    }

    pub(crate) fn host_key(&self) -> String {
        self.host.test_key().to_owned()
    }

    /// Sandbox `id` as the host answers `GET /sandboxes/{id}`.
    pub(crate) async fn sandbox_detail(&self, id: &str) -> Value {
        let answer = reqwest::Client::new()
            .get(format!("{}/sandboxes/{id}", self.host.api_url()))
            .header("X-API-Key", self.host.test_key())
            .send()
            .await
            .expect("get sandbox");
        assert_eq!(answer.status(), 200, "sandbox {id} is at the host");
        answer.json().await.expect("a sandbox's JSON")
    }

    /// Sets sandbox `id`'s deadline `seconds` from now at the host.
    pub(crate) async fn set_sandbox_timeout(&self, id: &str, seconds: u64) {
        let set = reqwest::Client::new()
            .post(format!("{}/sandboxes/{id}/timeout", self.host.api_url()))
            .header("X-API-Key", self.host.test_key())
            .json(&json!({"timeout": seconds}))
            .send()
            .await
            .expect("timeout");
        assert_eq!(set.status(), 204, "the host takes the new deadline");
    }

    /// The output file `path` (below the desktop's home) that task `id`
    /// left, as stored when it ended; empty when it stored none.
    pub(crate) async fn output(&self, id: &TaskId, path: &str) -> String {
        let key = self.blobs.layout().artifact(id, path).expect("an artifact key");
        let bytes = self.blobs.get(&key).await.map(|b| b.to_vec()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Ends sandbox `id` at the host, as its deadline would.
    pub(crate) async fn end_sandbox(&self, id: &str) {
        let shortened = reqwest::Client::new()
            .post(format!("{}/sandboxes/{id}/timeout", self.host.api_url()))
            .header("X-API-Key", self.host.test_key())
            .json(&json!({"timeout": 1}))
            .send()
            .await
            .expect("timeout");
        assert_eq!(shortened.status(), 204);
        eventually("the host ends the sandbox", Duration::from_secs(20), async || {
            let status = reqwest::Client::new()
                .get(format!("{}/sandboxes/{id}", self.host.api_url()))
                .header("X-API-Key", self.host.test_key())
                .send()
                .await
                .map(|r| r.status().as_u16());
            status.is_ok_and(|s| s == 404)
        })
        .await;
    }
}

/// A task for the OpenAI pipeline with `on_interrupt`.
fn task(on_interrupt: &str) -> Value {
    json!({
        "prompt": "append lines to log.txt in the terminal",
        "pipeline": "openai-cua",
        "on_interrupt": on_interrupt,
        "retry": {"max_attempts": 3}
    })
}

/// `task`, its desktop kept after it ends, so the test can read it.
fn kept_task(on_interrupt: &str) -> Value {
    let mut spec = task(on_interrupt);
    spec["sandbox"] = json!({"keep_alive": true});
    spec
}

/// A model turn that types `command` and a newline in the terminal.
fn typing(id: &str, call: &str, command: &str) -> Reply {
    openai::reply(id, vec![openai::computer_call_batch(call, vec![openai::type_text(&format!("{command}\n"))])])
}

/// A model turn that waits `ms` on the desktop.
fn waiting(id: &str, call: &str, ms: u64) -> Reply {
    openai::reply(id, vec![openai::computer_call_batch(call, vec![json!({"type": "wait", "ms": ms})])])
}

fn done(id: &str) -> Reply {
    openai::reply(id, vec![openai::message("done")])
}

fn responses(model: &ScriptedServer) -> Vec<Recorded> {
    model.received().into_iter().filter(|r| r.path == "/v1/responses").collect()
}

fn previous(request: &Recorded) -> Option<&str> {
    request.body["previous_response_id"].as_str()
}

pub(crate) fn resumed(events: &[Event]) -> Vec<(u32, u32, String, bool)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Resumed { attempt, from_step, sandbox_id, interrupted } => {
                Some((*attempt, *from_step, sandbox_id.clone(), *interrupted))
            }
            _ => None,
        })
        .collect()
}

pub(crate) fn terminal_count(events: &[Event]) -> usize {
    events.iter().filter(|e| e.kind.is_terminal()).count()
}

pub(crate) fn is_waiting_action(event: &Event) -> bool {
    matches!(&event.kind, EventKind::Action { action } if action.kind() == "wait")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_worker_costs_one_step_and_no_done_action_runs_twice() {
    let stand = Stand::start().await;
    stand.model.push(typing("resp_1", "c1", "echo one >> log.txt"));
    stand.model.push(waiting("resp_2", "c2", 30_000));
    stand.model.push(typing("resp_3", "c3", "echo three >> log.txt"));
    stand.model.push(done("resp_4"));
    let mut doomed = WorkerProcess::spawn(&stand.env, "doomed");
    let id = stand.submit(kept_task("resume")).await;

    // Killed while its second action (a long wait) is under way.
    stand.wait_for("the second action starts", &id, 90, is_waiting_action).await;
    doomed.signal("KILL");
    let killed = Instant::now();
    assert!(doomed.wait_exit(5), "SIGKILL ends the worker");
    let sandbox = sandbox_ids(&stand.events(&id).await).remove(0);
    assert_eq!(stand.log(&sandbox).await, "one\n", "the first command ran once before the kill");

    let _second = WorkerProcess::spawn(&stand.env, "second");
    stand
        .wait_for(
            "the resumed task acts again",
            &id,
            60,
            |e| matches!(&e.kind, EventKind::Action { action } if format!("{action:?}").contains("three")),
        )
        .await;
    let to_next_action = killed.elapsed();
    let history = stand.wait_ended(&id).await;

    assert_eq!(record(&stand.queue, &id).await.status, TaskStatus::Succeeded, "{history:?}");
    assert_eq!(terminal_count(&history), 1, "the task ends once: {history:?}");
    assert_eq!(resumed(&history), vec![(2, 1, sandbox.clone(), true)], "resumed after one step, the wait in flight");
    assert!(sandbox_ids(&history).iter().all(|s| *s == sandbox), "every attempt ran in the same desktop: {history:?}");
    let calls = responses(&stand.model);
    let chain: Vec<Option<&str>> = calls.iter().map(previous).collect();
    assert_eq!(chain, vec![None, Some("resp_1"), Some("resp_2"), Some("resp_3")], "no model call is made twice");
    let resumed_input = calls[2].body["input"].to_string();
    assert!(
        resumed_input.contains("may or may not have happened"),
        "the model hears the wait may not have finished: {resumed_input}"
    );
    assert!(resumed_input.contains("computer_call_output") && resumed_input.contains("c2"), "{resumed_input}");
    let settled = async || stand.log(&sandbox).await.ends_with("three\n");
    eventually("the desktop ran the resumed command", Duration::from_secs(10), settled).await;
    assert_eq!(stand.log(&sandbox).await, "one\nthree\n", "each command ran once");
    eprintln!("from the worker's SIGKILL to the resumed task's next action: {} ms (lease 5 s)", to_next_action.as_millis());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigtermed_worker_hands_its_task_back_at_the_next_step_within_two_seconds() {
    let stand = Stand::start().await;
    stand.model.push(typing("resp_1", "c1", "echo one >> log.txt"));
    stand.model.push(typing("resp_2", "c2", "echo two >> log.txt").after(Duration::from_millis(500)));
    stand.model.push(done("resp_3"));
    let mut stopping = WorkerProcess::spawn(&stand.env, "stopping");
    let id = stand.submit(kept_task("resume")).await;
    stand.wait_for("the task starts", &id, 90, |e| matches!(e.kind, EventKind::Started { .. })).await;
    let _other = WorkerProcess::spawn(&stand.env, "other");

    // Stopped while the model thinks about its second turn.
    eventually("the second model call is made", Duration::from_secs(60), async || responses(&stand.model).len() >= 2).await;
    stopping.signal("TERM");
    let signalled = Instant::now();
    assert!(stopping.wait_exit(2), "the worker hands its task back and exits within 2 s");
    let exited = signalled.elapsed();
    stand.wait_for("another worker takes the task up", &id, 20, |e| matches!(e.kind, EventKind::Resumed { .. })).await;
    let taken_up = signalled.elapsed();
    let history = stand.wait_ended(&id).await;

    assert_eq!(record(&stand.queue, &id).await.status, TaskStatus::Succeeded, "{history:?}");
    assert_eq!(terminal_count(&history), 1, "{history:?}");
    let sandbox = sandbox_ids(&history).remove(0);
    assert_eq!(resumed(&history), vec![(2, 2, sandbox.clone(), false)], "handed back after its second step, nothing in flight");
    let chain: Vec<Option<String>> = responses(&stand.model).iter().map(|r| previous(r).map(str::to_owned)).collect();
    assert_eq!(chain, vec![None, Some("resp_1".into()), Some("resp_2".into())], "no model call is repeated");
    assert_eq!(stand.log(&sandbox).await, "one\ntwo\n");
    eprintln!("SIGTERM to exit: {} ms; to the task taken up by another worker: {} ms", exited.as_millis(), taken_up.as_millis());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_sandbox_is_gone_at_resume_ends_waits_or_starts_over_by_its_policy() {
    let stand = Stand::start().await;
    // Every task's first turn is the same long wait, so the order in which
    // they reach the model does not matter.
    for n in 0..3 {
        stand.model.push(waiting(&format!("resp_w{n}"), "w", 60_000));
    }
    let doomed = WorkerProcess::spawn(&stand.env, "doomed");
    let resume = stand.submit(task("resume")).await;
    let ask = stand.submit(task("ask")).await;
    let restart = stand.submit(task("restart")).await;
    for id in [&resume, &ask, &restart] {
        stand.wait_for("the task waits on its desktop", id, 90, is_waiting_action).await;
    }
    let first_sandboxes = kill_and_end_their_sandboxes(&stand, doomed, [&resume, &ask, &restart]).await;
    stand.model.push(done("resp_d1"));
    stand.model.push(done("resp_d2"));
    let _second = WorkerProcess::spawn(&stand.env, "second");

    // resume: ends with `problem`, saying the sandbox is gone; no model call.
    let history = stand.wait_ended(&resume).await;
    let failed = record(&stand.queue, &resume).await;
    assert_eq!((failed.status, failed.code.map(|c| c.as_str())), (TaskStatus::Failed, Some("problem")), "{history:?}");
    assert!(failed.error.as_deref().is_some_and(|e| e.contains(&first_sandboxes[0]) && e.contains("is gone")), "{failed:?}");
    assert!(resumed(&history).is_empty());

    started_over_or_asked(&stand, &restart, &ask, &first_sandboxes).await;
    assert_eq!(responses(&stand.model).len(), 5, "three first turns, and one for each task that started over");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waiting_for_a_person_is_handed_back_when_its_worker_stops_and_asks_again_elsewhere() {
    let stand = Stand::start().await;
    let ask = openai::function_call("ask_1", "ask_human", json!({"question": "Which account should I use?"}));
    stand.model.push(openai::reply("resp_1", vec![ask]));
    let ask_again = openai::function_call("ask_2", "ask_human", json!({"question": "Which account, again?"}));
    stand.model.push(openai::reply("resp_2", vec![ask_again]));
    stand.model.push(done("resp_3"));
    let mut stopping = WorkerProcess::spawn(&stand.env, "stopping");
    let id = stand.submit(task("resume")).await;
    stand.wait_for("the task waits for a person", &id, 90, |e| matches!(e.kind, EventKind::Waiting { .. })).await;
    let _other = WorkerProcess::spawn(&stand.env, "other");

    stopping.signal("TERM");
    assert!(stopping.wait_exit(2), "a wait for a person does not hold the stopping worker");
    stand
        .wait_for(
            "another worker asks again",
            &id,
            20,
            |e| matches!(&e.kind, EventKind::Waiting { message, .. } if message.contains("again")),
        )
        .await;
    let history = stand.events(&id).await;
    let sandbox = sandbox_ids(&history).remove(0);
    assert_eq!(resumed(&history), vec![(2, 0, sandbox, true)], "the question was in flight: {history:?}");
    let calls = responses(&stand.model);
    assert_eq!(previous(&calls[1]), Some("resp_1"), "the conversation goes on, not over");
    let answer = calls[1].body["input"].to_string();
    assert!(answer.contains("function_call_output") && answer.contains("may or may not have happened"), "{answer}");

    let approve = HumanInput { decision: Decision::Approve, message: Some("the work one".into()) };
    stand.queue.submitter().give_input(&tenant(), &id, &approve).await.expect("input");
    let history = stand.wait_ended(&id).await;
    assert_eq!(record(&stand.queue, &id).await.status, TaskStatus::Succeeded, "{history:?}");
    assert_eq!(terminal_count(&history), 1);
    assert_eq!(responses(&stand.model).len(), 3, "no model call is made twice");
}

/// SIGKILLs `doomed` while it runs `tasks`, then ends the sandbox of each
/// (as its host's timeout would): the sandboxes, in `tasks`' order.
pub(crate) async fn kill_and_end_their_sandboxes(stand: &Stand, mut doomed: WorkerProcess, tasks: [&TaskId; 3]) -> Vec<String> {
    doomed.signal("KILL");
    assert!(doomed.wait_exit(5), "SIGKILL ends the worker");
    let mut ended = Vec::new();
    for id in tasks {
        let sandbox = sandbox_ids(&stand.events(id).await).remove(0);
        stand.end_sandbox(&sandbox).await;
        ended.push(sandbox);
    }
    ended
}

/// Whose sandbox was gone at resume: the `restart` task started over in a
/// new desktop, a `retrying` event saying why, and the `ask` task waited
/// for a person, who approved starting over.
pub(crate) async fn started_over_or_asked(stand: &Stand, restart: &TaskId, ask: &TaskId, first_sandboxes: &[String]) {
    let history = stand.wait_ended(restart).await;
    assert_eq!(record(&stand.queue, restart).await.status, TaskStatus::Succeeded, "{history:?}");
    assert!(
        history.iter().any(|e| matches!(&e.kind, EventKind::Retrying { error, .. } if error.contains("starting over"))),
        "{history:?}"
    );
    let sandboxes = sandbox_ids(&history);
    assert_eq!(sandboxes.len(), 2, "a new desktop for the new start: {sandboxes:?}");
    assert_ne!(sandboxes[1], first_sandboxes[2]);
    let asks = |e: &Event| matches!(&e.kind, EventKind::Waiting { message, .. } if message.contains("is gone"));
    stand.wait_for("the task asks a person", ask, 30, asks).await;
    let approve = HumanInput { decision: Decision::Approve, message: None };
    stand.queue.submitter().give_input(&tenant(), ask, &approve).await.expect("input");
    let history = stand.wait_ended(ask).await;
    assert_eq!(record(&stand.queue, ask).await.status, TaskStatus::Succeeded, "{history:?}");
    assert_eq!(sandbox_ids(&history).len(), 2, "it started over in a new desktop: {history:?}");
}
