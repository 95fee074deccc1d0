//! The durable-runs chaos run and rolling restart: model-driven tasks on
//! the OpenAI, Claude and Gemini pipelines in turn, on sandboxd desktops
//! with small screens. In the chaos run six tasks of 20 steps each run two
//! at a time per pipeline, and the workers running them are SIGKILLed and
//! SIGTERMed in turn, four times in all, each replaced at once. In the
//! rolling restart a batch of 50 tasks of 10 steps each is submitted at
//! once through `POST /v1/batches`, and both workers are replaced one
//! after the other while it runs (the new one started, the old one
//! SIGTERMed). Every task has its own script on one model server (its tag
//! in the prompt and in the ids it is answered with), and each step types
//! a numbered line into its desktop's `outbox/log.txt`, stored as the
//! task's output file when it ends.
//!
//! What users rely on: every task ends once and succeeds; per kill at most
//! one model call is made again (a call repeated is one whose conversation
//! position — OpenAI's `previous_response_id`, Claude's and Gemini's
//! history length — the server saw before); no action recorded `done` is
//! carried out again (no line twice in any desktop's log, and none out of
//! order); model calls ≤ steps + kills (the rolling restart: steps + 2 ×
//! the tasks that were running at the restarts).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use flotilla_tests::desktop::{eventually, sandbox_ids};
use flotilla_tests::fakes::{anthropic, gemini, openai, Recorded, Reply};
use flotilla_tests::fleet::WorkerProcess;
use flotilla_tests::tasks::record;
use flotilla_tests::{api_key, ApiClient};
use flotilla_types::event::EventKind;
use flotilla_types::ids::TaskId;
use flotilla_types::task::TaskStatus;
use serde_json::{json, Value};

use crate::durable_runs::{resumed, terminal_count, Size, Stand};

/// Steps (typed lines) per task.
const STEPS: usize = 20;
/// Tasks per pipeline.
const PER_PIPELINE: usize = 2;
/// Worker stops: SIGKILL and SIGTERM in turn.
const STOPS: usize = 4;

const PIPELINES: [&str; 3] = ["openai-cua", "claude-computer-use", "gemini-computer-use"];

/// Step `n`'s answer for the task tagged `tag` on `pipeline`: type line `n`.
fn step(pipeline: &str, tag: &str, n: usize) -> Reply {
    let text = format!("echo {n} >> {LOG}\n");
    match pipeline {
        "openai-cua" => openai::reply(
            &format!("resp_{tag}_{n}"),
            vec![openai::computer_call_batch(&format!("call_{tag}_{n}"), vec![openai::type_text(&text)])],
        ),
        "claude-computer-use" => anthropic::action_turn(&format!("toolu_{tag}_{n}"), json!({"action": "type", "text": text})),
        _ => gemini::calls_turn(vec![gemini::call("type", json!({"text": text}))]),
    }
}

/// The final answer of the task tagged `tag` on `pipeline`.
fn done(pipeline: &str, tag: &str) -> Reply {
    match pipeline {
        "openai-cua" => openai::reply(&format!("resp_{tag}_done"), vec![openai::message("done")]),
        "claude-computer-use" => anthropic::final_answer("done"),
        _ => gemini::final_answer("done"),
    }
}

/// Where in its conversation a model call stands: a call seen twice at the
/// same place was made again.
fn position(call: &Recorded) -> String {
    let body = &call.body;
    match (body.get("previous_response_id"), body.get("messages"), body.get("contents")) {
        (Some(id), _, _) => format!("after {id}"),
        (_, Some(Value::Array(m)), _) | (_, _, Some(Value::Array(m))) => format!("{} messages", m.len()),
        _ => "first".to_owned(),
    }
}

/// The tag of the task a call belongs to.
fn tag_of<'t>(call: &Recorded, tags: &'t [String]) -> Option<&'t String> {
    let text = call.body.to_string();
    tags.iter().find(|tag| text.contains(tag.as_str()))
}

async fn actions_taken(stand: &Stand, ids: &[TaskId]) -> usize {
    let mut taken = 0;
    for id in ids {
        taken += stand.events(id).await.iter().filter(|e| matches!(e.kind, EventKind::Action { .. })).count();
    }
    taken
}

async fn all_ended(stand: &Stand, ids: &[TaskId]) -> bool {
    for id in ids {
        if !record(&stand.queue, id).await.status.is_terminal() {
            return false;
        }
    }
    true
}

/// Where each step types its line: an output folder, so the file is
/// stored with the task's result.
const LOG: &str = "outbox/log.txt";

/// What every task of a run shares: its policy, retries and a small screen.
fn defaults() -> Value {
    json!({
        "on_interrupt": "resume",
        "retry": {"max_attempts": 8},
        "sandbox": {"resolution": [640, 480]}
    })
}

/// The tasks of a run, each with its pipeline and tag, and their ids.
struct Run {
    tasks: Vec<(&'static str, String)>,
    ids: Vec<TaskId>,
}

/// What a run's tasks and the model server show once every task ended.
struct Tally {
    /// Lines typed across desktops (steps carried out).
    lines: usize,
    /// `resumed` events across tasks.
    taken_up: usize,
    calls: usize,
    /// Model calls made at a conversation position already seen.
    repeated: usize,
}

/// Scripts `count` tasks of `steps` steps on the model pipelines in turn;
/// returns each task's pipeline and tag, and its spec (without what
/// [`defaults`] holds).
fn script(stand: &Stand, count: usize, steps: usize) -> (Vec<(&'static str, String)>, Vec<Value>) {
    let mut tasks = Vec::new();
    let mut specs = Vec::new();
    for k in 0..count {
        let pipeline = PIPELINES[k % PIPELINES.len()];
        let tag = format!("[{}-{k}]", &pipeline[..3]);
        for n in 1..=steps {
            stand.model.push_tagged(&tag, step(pipeline, &tag, n));
        }
        stand.model.push_tagged(&tag, done(pipeline, &tag));
        let mut spec = json!({
            "prompt": format!("append numbered lines to {LOG} in the terminal {tag}"),
            "pipeline": pipeline,
        });
        if pipeline == "claude-computer-use" {
            spec["model"] = json!("claude-sonnet-4-5"); // the `computer` tool the script calls
        }
        tasks.push((pipeline, tag));
        specs.push(spec);
    }
    (tasks, specs)
}

impl Run {
    /// Scripts and submits, one by one, `count` tasks of `steps` steps.
    async fn submit(stand: &Stand, count: usize, steps: usize) -> Self {
        let (tasks, specs) = script(stand, count, steps);
        let mut ids = Vec::new();
        for mut spec in specs {
            for (field, value) in defaults().as_object().expect("an object") {
                spec[field] = value.clone();
            }
            ids.push(stand.submit(spec).await);
        }
        Self { tasks, ids }
    }

    /// Scripts `count` tasks of `steps` steps and submits them as one
    /// batch through the API.
    async fn submit_batch(stand: &Stand, api: &ApiClient, count: usize, steps: usize) -> Self {
        let (tasks, specs) = script(stand, count, steps);
        let (status, batch) = api.post("/v1/batches", &json!({"defaults": defaults(), "tasks": specs})).await;
        assert_eq!(status, 202, "{batch}");
        let ids: Vec<TaskId> = batch["task_ids"]
            .as_array()
            .expect("task_ids")
            .iter()
            .map(|id| TaskId::parse(id.as_str().expect("an id")).expect("a task id"))
            .collect();
        assert_eq!(ids.len(), count, "{batch}");
        Self { tasks, ids }
    }

    /// Waits until `due` actions were taken across the tasks (or all ended).
    async fn acted(&self, stand: &Stand, due: usize) {
        eventually("the tasks act on", Duration::from_secs(240), async || {
            actions_taken(stand, &self.ids).await >= due || all_ended(stand, &self.ids).await
        })
        .await;
    }

    /// The tasks a worker runs now.
    async fn running(&self, stand: &Stand) -> BTreeSet<TaskId> {
        let mut running = BTreeSet::new();
        for id in &self.ids {
            if record(&stand.queue, id).await.status == TaskStatus::Running {
                running.insert(id.clone());
            }
        }
        running
    }

    /// Waits for every task to end, checks each succeeded once in one
    /// desktop with no line typed twice or out of order, and counts.
    async fn tally(&self, stand: &Stand, within: Duration) -> Tally {
        eventually("every task ends", within, async || all_ended(stand, &self.ids).await).await;
        let (mut lines, mut taken_up) = (0, 0);
        for (id, (pipeline, tag)) in self.ids.iter().zip(&self.tasks) {
            let history = stand.events(id).await;
            assert_eq!(record(&stand.queue, id).await.status, TaskStatus::Succeeded, "{pipeline} {tag}: {history:?}");
            assert_eq!(terminal_count(&history), 1, "{pipeline} {tag} ends once: {history:?}");
            let sandboxes: BTreeSet<String> = sandbox_ids(&history).into_iter().collect();
            assert_eq!(sandboxes.len(), 1, "{pipeline} {tag} ran in one desktop: {history:?}");
            let log = stand.output(id, LOG).await;
            let typed: Vec<usize> = log.lines().map(|l| l.parse().expect("a numbered line")).collect();
            assert!(typed.windows(2).all(|w| w[0] < w[1]), "{pipeline} {tag}: no action done twice or out of order: {typed:?}");
            lines += typed.len();
            taken_up += resumed(&history).len();
        }
        let tags: Vec<String> = self.tasks.iter().map(|(_, tag)| tag.clone()).collect();
        let calls: Vec<Recorded> = stand.model.received();
        let mut seen = BTreeSet::new();
        let mut repeated = 0;
        for call in &calls {
            let tag = tag_of(call, &tags).unwrap_or_else(|| panic!("a call of no task: {}", call.body));
            if !seen.insert((tag.clone(), position(call))) {
                repeated += 1;
            }
        }
        Tally { lines, taken_up, calls: calls.len(), repeated }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_driven_tasks_survive_sigkills_and_sigterms_without_repeating_a_done_action() {
    let stand = Stand::start().await;
    let mut workers = vec![WorkerProcess::spawn(&stand.env, "w0"), WorkerProcess::spawn(&stand.env, "w1")];
    let run = Run::submit(&stand, PER_PIPELINE * PIPELINES.len(), STEPS).await;

    // Stops spread over the run: after every `gap` actions across tasks,
    // the longest-running worker is stopped and a new one started.
    let gap = STEPS * run.tasks.len() / (STOPS + 1);
    for stop in 0..STOPS {
        run.acted(&stand, gap * (stop + 1)).await;
        let mut stopped = workers.remove(0);
        stopped.signal(if stop % 2 == 0 { "KILL" } else { "TERM" });
        assert!(stopped.wait_exit(30), "the worker exits");
        workers.push(WorkerProcess::spawn(&stand.env, &format!("w{}", stop + 2)));
    }
    let Tally { lines, taken_up, calls, repeated } = run.tally(&stand, Duration::from_secs(240)).await;
    let tasks = run.tasks.len();
    assert!(taken_up >= STOPS / 2, "the stops interrupted running tasks, which were taken up: {taken_up}");
    assert!(repeated <= STOPS, "at most one model call made again per stop: {repeated} over {STOPS}");
    assert!(calls <= lines + tasks + STOPS, "{calls} calls for {lines} steps, {tasks} answers and {STOPS} stops");
    eprintln!("{tasks} tasks, {STOPS} stops, {taken_up} resumes: {calls} model calls ({repeated} made again) for {lines} steps");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_both_workers_mid_batch_loses_no_step() {
    const TASKS: usize = 50;
    const STEPS: usize = 10;
    // Each worker runs 8 tasks at once; the host keeps room for three
    // workers' desktops (the new one starts before the old one stops) and
    // the handed-back ones waiting for a slot.
    let stand = Stand::start_sized(Size { slots: 8, desktops: 40, gateway: false }).await;
    let api_server = stand.api().await;
    let api = ApiClient::when_ready(&api_server, api_key()).await;
    let began = Instant::now();
    let mut old = vec![WorkerProcess::spawn(&stand.env, "old-0"), WorkerProcess::spawn(&stand.env, "old-1")];
    let run = Run::submit_batch(&stand, &api, TASKS, STEPS).await;

    // One worker at a time: its replacement starts, then it is stopped,
    // once a fifth and once half of the batch's steps are taken.
    let mut new = Vec::new();
    let mut running = BTreeSet::new();
    for (n, due) in [(0, STEPS * TASKS / 5), (1, STEPS * TASKS / 2)] {
        run.acted(&stand, due).await;
        new.push(WorkerProcess::spawn(&stand.env, &format!("new-{n}")));
        running.extend(run.running(&stand).await);
        let mut stopping = old.remove(0);
        stopping.signal("TERM");
        assert!(stopping.wait_exit(30), "the old worker hands its tasks back and exits");
    }
    let Tally { lines, taken_up, calls, repeated } = run.tally(&stand, Duration::from_secs(600)).await;
    let running = running.len();
    assert!(taken_up >= 1, "the restarts handed running tasks over: {taken_up}");
    assert_eq!(lines, STEPS * TASKS, "no step lost or done twice");
    assert!(repeated <= 2 * running, "{repeated} model calls made again with {running} tasks running at the restarts");
    assert!(calls <= lines + TASKS + 2 * running, "{calls} calls for {lines} steps, {TASKS} answers, {running} running");
    eprintln!(
        "{TASKS} tasks in one batch ({running} running at the restarts), {taken_up} resumes: {calls} model calls ({repeated} made \
         again) for {lines} steps, in {} s",
        began.elapsed().as_secs()
    );
}
