//! The planner and trajectory replay end to end, on real local desktops
//! against local servers speaking the OpenAI Responses and Anthropic
//! Messages wire formats. A task with `plan: true` is first planned by one
//! plain model call: an ambiguous task waits for a human, who either
//! clarifies it (and it is planned again) or declines (and it fails with
//! code `ambiguity`); a plan of three steps runs them in order, each
//! announced before its actions. A model-driven task's recorded actions are
//! then replayed by a scripted task with no model and end on the same
//! screen.

use flotilla_blobstore::{content_hash, UploaderOptions};
use flotilla_tests::desktop::{count, performed, png_size, DesktopFleet, DesktopOptions};
use flotilla_tests::fakes::{anthropic, openai, Recorded, ScriptedServer};
use flotilla_tests::s3_server::S3Server;
use flotilla_tests::tasks::{events, record};
use flotilla_tests::{api_key, spawn_api, unique_prefix, ApiClient};
use flotilla_types::action::Action;
use flotilla_types::event::{Event, EventKind};
use flotilla_types::task::{StopCode, TaskStatus};
use serde_json::{json, Value};

/// The desktop size: larger than what the model sees, so scaling shows.
const SCREEN: [u32; 2] = [1280, 960];
/// What the planner is asked about when the task is ambiguous.
const QUESTION: &str = "Which file should the note go into?";

fn openai_env(server: &ScriptedServer) -> Vec<(&'static str, String)> {
    vec![("OPENAI_BASE_URL", format!("{}/v1", server.url())), ("OPENAI_API_KEY", "sk-test-openai-secret".to_owned())]
}

/// A model of the `computer_20251124` tool, whose `computer` calls the script writes.
fn anthropic_env(server: &ScriptedServer) -> Vec<(&'static str, String)> {
    vec![
        ("ANTHROPIC_BASE_URL", server.url()),
        ("ANTHROPIC_API_KEY", "sk-ant-test-secret".to_owned()),
        ("FLOTILLA_ANTHROPIC_MODEL", "claude-sonnet-4-6".to_owned()),
    ]
}

async fn fleet(env: Vec<(&'static str, String)>) -> DesktopFleet {
    DesktopFleet::start(DesktopOptions { env, ..DesktopOptions::default() }).await
}

/// A planned task of `pipeline` on a desktop of [`SCREEN`] size.
fn planned_task(pipeline: &str) -> Value {
    json!({
        "prompt": "write a note in the terminal",
        "pipeline": pipeline,
        "plan": true,
        "sandbox": {"resolution": SCREEN},
        "retry": {"max_attempts": 1}
    })
}

/// The text of the first user message of an Anthropic request: the step
/// prompt beside the first screen, or the planning request.
fn anthropic_prompt(request: &Recorded) -> String {
    let content = &request.body["messages"][0]["content"];
    match content {
        Value::String(text) => text.clone(),
        blocks => blocks.as_array().into_iter().flatten().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("\n"),
    }
}

/// The text of the user input of an OpenAI request.
fn openai_prompt(request: &Recorded) -> String {
    let parts = request.body["input"][0]["content"].as_array().cloned().unwrap_or_default();
    parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n")
}

/// The `waiting` events of a task: `(code, message)`.
fn waits(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Waiting { code, message } => Some((code.clone(), message.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_an_ambiguous_task_waits_for_a_human_and_a_denial_ends_it() {
    let server = ScriptedServer::start().await;
    let answer = format!("I need to know one thing first.\n```json\n{}\n```", json!({"ambiguity": QUESTION}));
    server.push(anthropic::final_answer(&answer));
    let fleet = fleet(anthropic_env(&server)).await;
    let api = spawn_api(fleet.config.clone()).await;
    let client = ApiClient::new(&api, api_key());
    let id = fleet.submit(planned_task("claude-computer-use")).await;

    fleet.wait_until_waiting(&id).await;
    let waiting = record(&fleet.queue, &id).await;
    assert_eq!(waiting.code, Some(StopCode::Ambiguity));
    assert_eq!(waits(&events(&fleet.queue, &id).await), [("ambiguity".to_owned(), QUESTION.to_owned())]);
    let requests = server.received();
    assert_eq!(requests.len(), 1, "one planning call");
    let plan_call = &requests[0];
    assert_eq!(plan_call.path, "/v1/messages");
    assert_eq!(plan_call.header("x-api-key"), Some("sk-ant-test-secret"));
    assert_eq!(plan_call.header("anthropic-beta"), None, "a plain call has no computer tool beta");
    assert!(plan_call.body.get("tools").is_none(), "{}", plan_call.body);
    assert!(plan_call.body["system"].as_str().is_some_and(|s| s.contains("\"ambiguity\"")));
    assert!(anthropic_prompt(plan_call).contains("write a note in the terminal"));

    let (status, body) =
        client.post(&format!("/v1/tasks/{id}/input"), &json!({"decision": "deny", "message": "never mind"})).await;
    assert_eq!(status, 202, "{body}");
    fleet.wait_ended(&id).await;
    let done = record(&fleet.queue, &id).await;
    let history = events(&fleet.queue, &id).await;
    assert_eq!((done.status, done.code), (TaskStatus::Failed, Some(StopCode::Ambiguity)), "{history:?}");
    assert!(done.error.as_deref().is_some_and(|e| e.contains("never mind")), "{:?}", done.error);
    assert_eq!(count(&history, "sandbox_ready"), 0, "no desktop is held while the task is unclear");
    assert_eq!(server.received().len(), 1);

    // Nothing was done, so there is nothing to replay.
    let replay = fleet.submit(json!({"prompt": "again", "pipeline": "scripted", "replay_of": id.as_str()})).await;
    fleet.wait_ended(&replay).await;
    let replayed = record(&fleet.queue, &replay).await;
    assert_eq!((replayed.status, replayed.code), (TaskStatus::Failed, Some(StopCode::Problem)));
    let error = replayed.error.unwrap_or_default();
    assert!(error.contains(id.as_str()) && error.contains("no actions"), "{error}");
    fleet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_clarified_task_is_planned_again_and_runs() {
    let server = ScriptedServer::start().await;
    server.push(openai::reply("resp_p1", vec![openai::message(&json!({"ambiguity": QUESTION}).to_string())]));
    let plan = json!({"application": "xterm", "steps": ["write the note into notes.txt"]});
    server.push(openai::reply("resp_p2", vec![openai::message(&format!("```json\n{plan}\n```"))]));
    let typing = vec![openai::type_text("echo hi > notes.txt"), openai::keypress(&["ENTER"])];
    server.push(openai::reply("resp_1", vec![openai::computer_call_batch("call_1", typing)]));
    server.push(openai::reply("resp_2", vec![openai::message("The note is in notes.txt.")]));
    let fleet = fleet(openai_env(&server)).await;
    let api = spawn_api(fleet.config.clone()).await;
    let client = ApiClient::new(&api, api_key());
    let id = fleet.submit(planned_task("openai-cua")).await;

    fleet.wait_until_waiting(&id).await;
    let clarification = "notes.txt in the home folder";
    let (status, body) =
        client.post(&format!("/v1/tasks/{id}/input"), &json!({"decision": "approve", "message": clarification})).await;
    assert_eq!(status, 202, "{body}");
    fleet.wait_ended(&id).await;

    let done = record(&fleet.queue, &id).await;
    let history = events(&fleet.queue, &id).await;
    assert_eq!(done.status, TaskStatus::Succeeded, "{history:?}");
    assert_eq!(done.plan, Some(plan));
    assert_eq!(
        performed(&history),
        [Action::Type { text: "echo hi > notes.txt".into() }, Action::Keypress { keys: vec!["enter".into()] }]
    );
    let requests = server.received();
    assert_eq!(requests.len(), 4);
    for plan_call in &requests[..2] {
        assert_eq!(plan_call.path, "/v1/responses");
        assert_eq!(plan_call.header("authorization"), Some("Bearer sk-test-openai-secret"));
        assert!(
            plan_call.body.get("tools").is_none() && plan_call.body.get("previous_response_id").is_none(),
            "{}",
            plan_call.body
        );
        assert!(plan_call.body["instructions"].as_str().is_some_and(|s| s.contains("\"steps\"")));
    }
    let first = openai_prompt(&requests[0]);
    let second = openai_prompt(&requests[1]);
    assert!(!first.contains(clarification), "{first}");
    assert!(
        second.contains(QUESTION) && second.contains(clarification),
        "the second plan call carries the clarification: {second}"
    );
    let step = openai_prompt(&requests[2]);
    assert!(step.contains(clarification) && step.contains("Now do step 1 of 1"), "{step}");
    assert_eq!(requests[2].body["tools"][0], json!({"type": "computer"}), "the steps run with the computer tool");
    fleet.stop().await;
}

/// What a three-step plan's run shows, event by event after `plan`.
#[derive(Debug, PartialEq)]
enum Seen {
    Step(u32, String),
    Did(Action),
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_planned_task_runs_three_steps_in_order() {
    let server = ScriptedServer::start().await;
    let steps = ["click into the terminal", "type the command", "run it"];
    let plan = json!({"application": "xterm", "steps": steps});
    server.push(anthropic::final_answer(&plan.to_string()));
    server.push(anthropic::action_turn("toolu_1", json!({"action": "left_click", "coordinate": [512, 384]})));
    server.push(anthropic::final_answer("Clicked."));
    server.push(anthropic::action_turn("toolu_2", json!({"action": "type", "text": "echo planned"})));
    server.push(anthropic::final_answer("Typed."));
    server.push(anthropic::action_turn("toolu_3", json!({"action": "key", "text": "Return"})));
    server.push(anthropic::final_answer("Ran it."));
    let fleet = fleet(anthropic_env(&server)).await;
    let (id, history) = fleet.run_to_end(planned_task("claude-computer-use")).await;

    let done = record(&fleet.queue, &id).await;
    assert_eq!(done.status, TaskStatus::Succeeded, "{history:?}");
    assert_eq!(done.plan, Some(plan));
    assert_eq!(done.current_step, Some(2));
    let result = done.result.unwrap_or_default();
    assert_eq!(result["text"], "Ran it.");
    assert_eq!(result["steps"], json!(["Clicked.", "Typed.", "Ran it."]));

    let planned =
        history.iter().position(|e| matches!(&e.kind, EventKind::Plan { steps: s } if s == &steps)).expect("a plan event");
    let seen: Vec<Seen> = history[planned..]
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::StepStarted { index, text } => Some(Seen::Step(*index, text.clone())),
            EventKind::ActionCompleted { action, .. } => Some(Seen::Did(action.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        seen,
        [
            Seen::Step(0, steps[0].into()),
            Seen::Did(Action::Click { x: 640, y: 480, button: flotilla_types::action::MouseButton::Left }),
            Seen::Step(1, steps[1].into()),
            Seen::Did(Action::Type { text: "echo planned".into() }),
            Seen::Step(2, steps[2].into()),
            Seen::Did(Action::Keypress { keys: vec!["Return".into()] }),
        ]
    );
    assert_eq!(count(&history, "sandbox_ready"), 1, "every step runs on the same desktop");
    assert_eq!(count(&history[..planned], "action"), 0, "nothing is done before the plan");

    let requests = server.received();
    assert_eq!(requests.len(), 7);
    assert!(requests[0].body.get("tools").is_none());
    for (step, request) in [(1, &requests[1]), (2, &requests[3]), (3, &requests[5])] {
        let prompt = anthropic_prompt(request);
        assert!(
            prompt.contains("The overall task: write a note in the terminal") && prompt.contains("The application to use: xterm"),
            "{prompt}"
        );
        assert!(prompt.contains(&format!("Now do step {step} of 3, and only this step: {}", steps[step - 1])), "{prompt}");
        assert_eq!(request.body["messages"].as_array().map(Vec::len), Some(1), "each step starts its own conversation");
    }
    fleet.stop().await;
}

/// The stored screenshots of a task's events: `(hash, key)` in step order.
fn screenshots(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Screenshot { hash, key, .. } => Some((hash.clone(), key.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_a_replay_runs_the_recorded_actions_without_a_model_and_ends_on_the_same_screen() {
    let server = ScriptedServer::start().await;
    server.push(openai::reply("resp_1", vec![openai::computer_call("call_1", openai::click(512, 384, "left"))]));
    // The trailing wait lets the shell print its prompt before the last
    // screenshot, in the original and in the replay alike.
    let typing = vec![openai::type_text("echo replay > r.txt"), openai::keypress(&["ENTER"]), json!({"type": "wait"})];
    server.push(openai::reply("resp_2", vec![openai::computer_call_batch("call_2", typing)]));
    server.push(openai::reply("resp_3", vec![openai::message("Written.")]));
    let s3 = S3Server::start();
    let store = s3.store(&unique_prefix());
    let options = DesktopOptions {
        env: openai_env(&server),
        blobs: Some(store.clone()),
        uploads: UploaderOptions::default(),
        ..DesktopOptions::default()
    };
    let fleet = DesktopFleet::start(options).await;
    let original = json!({
        "prompt": "write r.txt from the terminal",
        "pipeline": "openai-cua",
        "sandbox": {"resolution": SCREEN},
        "retry": {"max_attempts": 1}
    });
    let (original_id, original_events) = fleet.run_to_end(original).await;
    assert_eq!(record(&fleet.queue, &original_id).await.status, TaskStatus::Succeeded, "{original_events:?}");
    let model_calls = server.received().len();
    assert_eq!(model_calls, 3);

    // No sandbox spec: the replay runs at the original's resolution.
    let replay = json!({"prompt": "write r.txt again", "pipeline": "scripted", "replay_of": original_id.as_str()});
    let (replay_id, replay_events) = fleet.run_to_end(replay).await;
    let replayed = record(&fleet.queue, &replay_id).await;
    assert_eq!(replayed.status, TaskStatus::Succeeded, "{replay_events:?}");
    assert_eq!(server.received().len(), model_calls, "a replay asks no model");
    let recorded = performed(&original_events);
    assert_eq!(recorded.len(), 4, "{recorded:?}");
    assert_eq!(performed(&replay_events), recorded, "the same actions, in order, in screen coordinates");

    let original_shots = screenshots(&original_events);
    let replay_shots = screenshots(&replay_events);
    let (original_last, replay_last) =
        (original_shots.last().expect("original screens"), replay_shots.last().expect("replay screens"));
    let final_screen = store.get(&replay_last.1).await.expect("the replay's final screen is stored");
    assert_eq!(png_size(&final_screen), (SCREEN[0], SCREEN[1]));
    assert_eq!(content_hash(&final_screen), replay_last.0);
    assert_ne!(original_shots[0].0, original_last.0, "the task changed the screen");
    assert_eq!(replay_last.0, original_last.0, "the replay ends on the very screen the original ended on");
    fleet.stop().await;
}
