//! The planner of the computer-use pipelines (`plan: true`): before any
//! desktop is taken, one plain model call turns the task's prompt into the
//! application to use and ordered steps, or into a question when the task
//! can be read in more than one way.
//!
//! A question puts the task in `waiting` with code `ambiguity`. A human who
//! approves with a message has clarified the task: the planner asks again
//! with the question and the answer, at most [`MAX_CLARIFICATIONS`] times.
//! A human who denies ends the task with code `ambiguity`.
//!
//! The plan is announced with a `plan` event and stored on the task. The
//! model chooses the application from the task's template's apps; the
//! executor (in `computer_use`) opens it ([`super::open_app`]) before the
//! first step, then runs one model conversation per step,
//! each announced with `step_started` and recorded as `current_step`.

use flotilla_types::event::EventKind;
use flotilla_types::task::{Decision, StopCode};
use serde_json::{Map, Value};

pub use super::plan::{Clarification, Plan, Planned};

use super::error::PipelineError;
use super::handle::TaskHandle;
use super::session::Steps;
use crate::model::{ModelError, TextModel, Usage};
use crate::provider_http::excerpt;

/// How often the planner may ask a human to clarify one task.
pub const MAX_CLARIFICATIONS: usize = 3;
/// The most steps a plan may have.
pub const MAX_PLAN_STEPS: usize = 30;

/// What the planner model is told to do.
const INSTRUCTIONS: &str = "You plan tasks for an agent that operates a Linux desktop with a mouse and a keyboard. \
Answer with one JSON object and nothing else. Either \
{\"application\": \"<the application to use>\", \"steps\": [\"<step>\", ...]} \
with the steps in order, each one short thing to do on the screen, \
or, only when the task can be read in ways that lead to different results, \
{\"ambiguity\": \"<one question for the user>\"}.";

/// The clarification used when a human approves without a message.
const NO_DETAIL: &str = "(no further detail: choose the most likely reading)";

/// What the planner model answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanAnswer {
    Plan(Plan),
    /// The question to ask the user.
    Ambiguity(String),
}

/// Plans the task, asking a human when the model finds it ambiguous, and
/// announces the plan. `apps` are the applications the task's desktop has
/// (its template's), told to the model to choose from. Waits and model
/// calls run under `steps`' guard.
pub async fn plan(prompt: &str, apps: &[String], steps: &Steps, model: &dyn TextModel) -> Result<Planned, PipelineError> {
    let mut clarifications = Vec::new();
    let mut usage = Usage::default();
    loop {
        let request = planning_request(prompt, apps, &clarifications);
        let completion = steps.guard(async { model.complete(INSTRUCTIONS, &request).await.map_err(PipelineError::from) }).await?;
        usage += completion.usage;
        match read_plan(&completion.text).map_err(PipelineError::from)? {
            PlanAnswer::Plan(plan) => {
                announce(steps.task(), &plan).await?;
                return Ok(Planned { plan, clarifications, usage });
            }
            PlanAnswer::Ambiguity(question) if clarifications.len() >= MAX_CLARIFICATIONS => {
                return Err(PipelineError::Fatal {
                    code: StopCode::Ambiguity,
                    message: format!("the task is still ambiguous after {MAX_CLARIFICATIONS} clarifications: {question}"),
                });
            }
            PlanAnswer::Ambiguity(question) => {
                let answer = ask_human(steps, &question).await?;
                clarifications.push(Clarification { question, answer });
            }
        }
    }
}

/// The user message of a planning request: the task, the desktop's
/// applications and what was clarified.
fn planning_request(prompt: &str, apps: &[String], clarifications: &[Clarification]) -> String {
    let mut request = format!("Task: {prompt}");
    if !apps.is_empty() {
        request.push_str(&format!("\n\nThe desktop's applications (name one of them): {}", apps.join(", ")));
    }
    for clarification in clarifications {
        request.push_str(&format!("\n\nYou asked: {}\nThe user answered: {}", clarification.question, clarification.answer));
    }
    request
}

/// Puts the task in `waiting` with the question; an approval's message is
/// the answer, a denial ends the task.
async fn ask_human(steps: &Steps, question: &str) -> Result<String, PipelineError> {
    let input = steps.wait_for_human(StopCode::Ambiguity, question).await?;
    let message = input.message.filter(|m| !m.trim().is_empty());
    match input.decision {
        Decision::Approve => Ok(message.unwrap_or_else(|| NO_DETAIL.to_owned())),
        Decision::Deny => Err(PipelineError::Fatal {
            code: StopCode::Ambiguity,
            message: format!("a human declined to clarify the task: {}", message.as_deref().unwrap_or(question)),
        }),
    }
}

/// Emits the `plan` event and stores the plan on the task.
async fn announce(task: &dyn TaskHandle, plan: &Plan) -> Result<(), PipelineError> {
    let stored = serde_json::to_string(plan).map_err(|e| PipelineError::Retryable(format!("the plan cannot be stored: {e}")))?;
    task.emit(EventKind::Plan { steps: plan.steps.clone() }, &[("plan", stored)]).await?;
    Ok(())
}

/// Emits `step_started` for step `index` and records it as the task's
/// `current_step`.
pub async fn start_step(task: &dyn TaskHandle, index: usize, text: &str) -> Result<(), PipelineError> {
    let started = EventKind::StepStarted { index: index as u32, text: text.to_owned() };
    task.emit(started, &[("current_step", index.to_string())]).await?;
    Ok(())
}

/// What the model driving step `index` is asked: the whole task, the
/// application, the clarifications, the plan, and the one step to do now.
pub fn step_prompt(task: &str, planned: &Planned, index: usize) -> String {
    let plan = &planned.plan;
    let mut prompt = format!("The overall task: {task}\nThe application to use: {}\n", plan.application);
    for clarification in &planned.clarifications {
        prompt.push_str(&format!("Asked \"{}\", the user answered: {}\n", clarification.question, clarification.answer));
    }
    prompt.push_str("The plan:\n");
    for (i, step) in plan.steps.iter().enumerate() {
        prompt.push_str(&format!("{}. {step}\n", i + 1));
    }
    let text = plan.steps.get(index).map_or("", String::as_str);
    prompt.push_str(&format!(
        "\nNow do step {} of {}, and only this step: {text}\nWhen it is done, answer with a short summary and no action.",
        index + 1,
        plan.steps.len()
    ));
    prompt
}

/// Reads the planner model's answer: the first JSON object in the text
/// (bare, in a code fence, or among prose) holding `steps` or `ambiguity`.
pub fn read_plan(text: &str) -> Result<PlanAnswer, ModelError> {
    let object = first_plan_object(text).ok_or_else(|| malformed(format!("the plan holds no JSON object: {}", excerpt(text))))?;
    if let Some(question) = ambiguity(&object)? {
        return Ok(PlanAnswer::Ambiguity(question));
    }
    let application = match object.get("application") {
        Some(Value::String(name)) if !name.trim().is_empty() => name.trim().to_owned(),
        Some(Value::String(_)) | Some(Value::Null) | None => return Err(malformed("the plan's application is missing")),
        Some(_) => return Err(malformed("the plan's application must be a string")),
    };
    Ok(PlanAnswer::Plan(Plan { application, steps: plan_steps(object.get("steps"))? }))
}

/// The question of an `ambiguity` field; a null or empty one is no question.
fn ambiguity(object: &Map<String, Value>) -> Result<Option<String>, ModelError> {
    match object.get("ambiguity") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(question)) if question.trim().is_empty() => Ok(None),
        Some(Value::String(question)) => Ok(Some(question.trim().to_owned())),
        Some(_) => Err(malformed("the plan's ambiguity must be a string")),
    }
}

/// The `steps` list: 1 to [`MAX_PLAN_STEPS`] non-empty strings.
fn plan_steps(steps: Option<&Value>) -> Result<Vec<String>, ModelError> {
    let Some(steps) = steps else {
        return Err(malformed("the plan has neither steps nor ambiguity"));
    };
    let steps = steps.as_array().ok_or_else(|| malformed("the plan's steps must be a list of strings"))?;
    if steps.is_empty() || steps.len() > MAX_PLAN_STEPS {
        return Err(malformed(format!("the plan has {} steps; it needs 1 to {MAX_PLAN_STEPS}", steps.len())));
    }
    steps
        .iter()
        .enumerate()
        .map(|(i, step)| match step.as_str().map(str::trim) {
            Some(text) if !text.is_empty() => Ok(text.to_owned()),
            _ => Err(malformed(format!("the plan's steps[{i}] must be a non-empty string"))),
        })
        .collect()
}

/// The first JSON object in `text` with a `steps` or `ambiguity` field,
/// else the first JSON object at all (so the error can name what it lacks).
fn first_plan_object(text: &str) -> Option<Map<String, Value>> {
    let mut first = None;
    for (start, _) in text.match_indices('{') {
        let mut values = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
        let Some(Ok(Value::Object(object))) = values.next() else { continue };
        if object.contains_key("steps") || object.contains_key("ambiguity") {
            return Some(object);
        }
        first.get_or_insert(object);
    }
    first
}

fn malformed(message: impl Into<String>) -> ModelError {
    ModelError::Malformed(message.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(application: &str, steps: &[&str]) -> PlanAnswer {
        PlanAnswer::Plan(Plan { application: application.into(), steps: steps.iter().map(|s| (*s).to_owned()).collect() })
    }

    #[test]
    fn a_plan_is_read_bare_fenced_or_among_prose() {
        let bare = r#"{"application": "xterm", "steps": ["open", "type"]}"#;
        assert_eq!(read_plan(bare).expect("plan"), plan("xterm", &["open", "type"]));
        let fenced =
            "Here is the plan:\n```json\n{\"application\": \" xterm \", \"steps\": [\"open\"]}\n```\nGood luck {not json}.";
        assert_eq!(read_plan(fenced).expect("plan"), plan("xterm", &["open"]));
        let prose = "I think {this} works: {\"note\": 1} and {\"ambiguity\": \"Which file?\"}";
        assert_eq!(read_plan(prose).expect("question"), PlanAnswer::Ambiguity("Which file?".into()));
    }

    #[test]
    fn an_empty_ambiguity_beside_steps_is_a_plan() {
        let text = r#"{"application": "xterm", "steps": ["a"], "ambiguity": null}"#;
        assert_eq!(read_plan(text).expect("plan"), plan("xterm", &["a"]));
        let text = r#"{"application": "xterm", "steps": ["a"], "ambiguity": ""}"#;
        assert_eq!(read_plan(text).expect("plan"), plan("xterm", &["a"]));
    }

    #[test]
    fn malformed_plans_say_what_is_wrong() {
        let error = |text: &str| match read_plan(text) {
            Err(ModelError::Malformed(message)) => message,
            other => panic!("{text} read as {other:?}"),
        };
        assert!(error("no json here").contains("no JSON object"));
        assert!(error(r#"{"steps": ["a"]}"#).contains("application is missing"));
        assert!(error(r#"{"application": "x"}"#).contains("neither steps nor ambiguity"));
        assert!(error(r#"{"application": "x", "steps": []}"#).contains("1 to"));
        assert!(error(r#"{"application": "x", "steps": ["a", 2]}"#).contains("steps[1]"));
        assert!(error(r#"{"application": "x", "steps": "a"}"#).contains("list of strings"));
        assert!(error(r#"{"ambiguity": 3}"#).contains("ambiguity must be a string"));
        assert!(error(r#"{"application": "x", "steps": ["a"#).contains("no JSON object"));
    }

    #[test]
    fn a_replanning_request_carries_every_clarification() {
        let clarifications = vec![Clarification { question: "Which file?".into(), answer: "notes.txt".into() }];
        let apps = vec!["chromium".to_owned(), "firefox".to_owned()];
        let request = planning_request("save it", &apps, &clarifications);
        assert!(request.starts_with("Task: save it"));
        assert!(request.contains("applications (name one of them): chromium, firefox"), "{request}");
        assert!(request.contains("You asked: Which file?\nThe user answered: notes.txt"));
    }

    #[test]
    fn a_step_prompt_names_the_task_the_application_and_the_step() {
        let planned = Planned {
            plan: Plan { application: "xterm".into(), steps: vec!["open".into(), "type".into()] },
            clarifications: vec![Clarification { question: "Which?".into(), answer: "this".into() }],
            usage: Usage::default(),
        };
        let prompt = step_prompt("write a note", &planned, 1);
        assert!(prompt.contains("The overall task: write a note"));
        assert!(prompt.contains("The application to use: xterm"));
        assert!(prompt.contains("Asked \"Which?\", the user answered: this"));
        assert!(prompt.contains("1. open\n2. type\n"));
        assert!(prompt.contains("Now do step 2 of 2, and only this step: type"));
    }
}
