//! The durable-runs chaos run and rolling restart: model-driven tasks on
//! the OpenAI, Claude and Gemini pipelines, two of each at once (six
//! desktops — what a 2-core runner takes in well under a minute). In the
//! chaos run each task has 20 steps and the workers running them are
//! SIGKILLed and SIGTERMed in turn, four times in all, each replaced at
//! once; in the rolling restart each has 10 steps and both workers are
//! replaced one after the other (the new one started, the old one
//! SIGTERMed): every task succeeds with no step lost, and model calls stay
//! within steps + 2 × the tasks running. Every task has its own script on one model
//! server (its tag in the prompt and in the ids it is answered with), and
//! each step types a numbered line into its own desktop's `log.txt`.
//!
//! What users rely on: every task ends once and succeeds; per kill at most
//! one model call is made again (a call repeated is one whose conversation
//! position — OpenAI's `previous_response_id`, Claude's and Gemini's
//! history length — the server saw before); no action recorded `done` is
//! carried out again (no line twice in any desktop's log, and none out of
//! order); model calls ≤ steps + kills.

use std::collections::BTreeSet;
use std::time::Duration;

use flotilla_tests::desktop::{eventually, sandbox_ids};
use flotilla_tests::fakes::{anthropic, gemini, openai, Recorded, Reply};
use flotilla_tests::fleet::WorkerProcess;
use flotilla_tests::tasks::record;
use flotilla_types::event::EventKind;
use flotilla_types::ids::TaskId;
use flotilla_types::task::TaskStatus;
use serde_json::{json, Value};

use crate::durable_runs::{resumed, terminal_count, Stand};

/// Steps (typed lines) per task.
const STEPS: usize = 20;
/// Tasks per pipeline.
const PER_PIPELINE: usize = 2;
/// Worker stops: SIGKILL and SIGTERM in turn.
const STOPS: usize = 4;

const PIPELINES: [&str; 3] = ["openai-cua", "claude-computer-use", "gemini-computer-use"];

/// Step `n`'s answer for the task tagged `tag` on `pipeline`: type line `n`.
fn step(pipeline: &str, tag: &str, n: usize) -> Reply {
    let text = format!("echo {n} >> log.txt\n");
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

impl Run {
    /// Scripts and submits `per_pipeline` tasks of `steps` steps on each
    /// model pipeline.
    async fn submit(stand: &Stand, per_pipeline: usize, steps: usize) -> Self {
        let mut tasks = Vec::new();
        for pipeline in PIPELINES {
            for k in 0..per_pipeline {
                let tag = format!("[{}-{k}]", &pipeline[..3]);
                for n in 1..=steps {
                    stand.model.push_tagged(&tag, step(pipeline, &tag, n));
                }
                stand.model.push_tagged(&tag, done(pipeline, &tag));
                tasks.push((pipeline, tag));
            }
        }
        let mut ids = Vec::new();
        for (pipeline, tag) in &tasks {
            let mut spec = json!({
                "prompt": format!("append numbered lines to log.txt in the terminal {tag}"),
                "pipeline": pipeline,
                "on_interrupt": "resume",
                "sandbox": {"keep_alive": true},
                "retry": {"max_attempts": 8}
            });
            if *pipeline == "claude-computer-use" {
                spec["model"] = json!("claude-sonnet-4-5"); // the `computer` tool the script calls
            }
            ids.push(stand.submit(spec).await);
        }
        Self { tasks, ids }
    }

    /// Waits until `due` actions were taken across the tasks (or all ended).
    async fn acted(&self, stand: &Stand, due: usize) {
        eventually("the tasks act on", Duration::from_secs(180), async || {
            actions_taken(stand, &self.ids).await >= due || all_ended(stand, &self.ids).await
        })
        .await;
    }

    /// How many tasks are not ended.
    async fn running(&self, stand: &Stand) -> usize {
        let mut running = 0;
        for id in &self.ids {
            running += usize::from(!record(&stand.queue, id).await.status.is_terminal());
        }
        running
    }

    /// Waits for every task to end, checks each succeeded once in one
    /// desktop with no line typed twice or out of order, and counts.
    async fn tally(&self, stand: &Stand) -> Tally {
        eventually("every task ends", Duration::from_secs(240), async || all_ended(stand, &self.ids).await).await;
        let (mut lines, mut taken_up) = (0, 0);
        for (id, (pipeline, tag)) in self.ids.iter().zip(&self.tasks) {
            let history = stand.events(id).await;
            assert_eq!(record(&stand.queue, id).await.status, TaskStatus::Succeeded, "{pipeline} {tag}: {history:?}");
            assert_eq!(terminal_count(&history), 1, "{pipeline} {tag} ends once: {history:?}");
            let sandboxes: BTreeSet<String> = sandbox_ids(&history).into_iter().collect();
            assert_eq!(sandboxes.len(), 1, "{pipeline} {tag} ran in one desktop: {history:?}");
            let log = stand.log(sandboxes.first().expect("a desktop")).await;
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
    let run = Run::submit(&stand, PER_PIPELINE, STEPS).await;

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
    let Tally { lines, taken_up, calls, repeated } = run.tally(&stand).await;
    let tasks = run.tasks.len();
    assert!(taken_up >= STOPS / 2, "the stops interrupted running tasks, which were taken up: {taken_up}");
    assert!(repeated <= STOPS, "at most one model call made again per stop: {repeated} over {STOPS}");
    assert!(calls <= lines + tasks + STOPS, "{calls} calls for {lines} steps, {tasks} answers and {STOPS} stops");
    eprintln!("{tasks} tasks, {STOPS} stops, {taken_up} resumes: {calls} model calls ({repeated} made again) for {lines} steps");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_both_workers_mid_batch_loses_no_step() {
    const STEPS: usize = 10;
    let stand = Stand::start().await;
    let mut old = vec![WorkerProcess::spawn(&stand.env, "old-0"), WorkerProcess::spawn(&stand.env, "old-1")];
    let run = Run::submit(&stand, PER_PIPELINE, STEPS).await;
    run.acted(&stand, run.tasks.len()).await;
    let running = run.running(&stand).await;

    // One worker at a time: its replacement starts, then it is stopped.
    let mut new = Vec::new();
    for (n, due) in [(0, run.tasks.len()), (1, STEPS * run.tasks.len() / 2)] {
        run.acted(&stand, due).await;
        new.push(WorkerProcess::spawn(&stand.env, &format!("new-{n}")));
        let mut stopping = old.remove(0);
        stopping.signal("TERM");
        assert!(stopping.wait_exit(30), "the old worker hands its tasks back and exits");
    }
    let Tally { lines, taken_up, calls, repeated } = run.tally(&stand).await;
    let tasks = run.tasks.len();
    assert!(taken_up >= 1, "the restart handed running tasks over: {taken_up}");
    assert_eq!(lines, STEPS * tasks, "no step lost or done twice");
    assert!(repeated <= 2 * running, "{repeated} model calls made again with {running} tasks running");
    assert!(calls <= lines + tasks + 2 * running, "{calls} calls for {lines} steps, {tasks} answers, {running} running");
    eprintln!("{tasks} tasks ({running} running at the restart), {taken_up} resumes: {calls} model calls ({repeated} made again) for {lines} steps");
}
