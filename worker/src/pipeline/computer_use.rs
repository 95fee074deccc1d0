//! The step loop of the model-driven pipelines (`openai-cua`,
//! `claude-computer-use`, `gemini-computer-use`): observe the screen, show
//! it to the model scaled to its size, carry out what it asks in sandbox
//! coordinates, observe again, until the model answers without asking for
//! anything, a limit is reached, a human must decide, or the task is
//! cancelled. Which provider a pipeline talks to is its [`ModelFactory`]
//! (see [`providers`](super::providers)).
//!
//! The calls of one turn run in order and stop at the first that fails:
//! it is answered with what went wrong, every later one with
//! [`NOT_EXECUTED`], so the model hears about each call it made. A model
//! that answers on a normalized grid (Gemini's 0–999) has its points mapped
//! straight onto the sandbox's screen, not through the scaled image.
//! When a client had to switch the tool it offers (the model does not take
//! the newest), a `retrying` event says so.
//!
//! Every step goes through the [`Session`], so events, screenshots, limits
//! and cancellation behave as in every pipeline. The model only ever gets
//! the newest screen. Token usage (with its cost at the configured prices)
//! is added up on the task after each turn and reported in a `usage`
//! event.
//! With `plan: true` the [`planner`](super::planner) first splits the task
//! into steps, before any desktop is taken; each step then gets its own
//! conversation, on the same desktop, announced with `step_started`.
//!
//! A person may take the desktop over between actions (see
//! [`Steps::pause_while_held`]): the loop pauses before the turn's next
//! call or after its last, and once the desktop is handed back the model's
//! next input carries a fresh screenshot and the person's message in the
//! turn's last result. Calls the model planned before the takeover are not
//! carried out after it (the person may have changed what they were
//! planned on); they are answered as such.
//!
//! Safety checks a model raises follow the task's `sensitive_actions`:
//! `allow` acknowledges them, `deny` ends the task, and `pause` (the
//! default) puts the task in `waiting` with code `sensitive-action` until a
//! human approves (the checks are then acknowledged) or denies (the task
//! ends).

pub(super) mod parked;
mod planned;
pub(super) mod resume;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_types::cost::usd;
use flotilla_types::event::EventKind;
use flotilla_types::task::{Decision, HumanInput, StopCode};
use flotilla_types::usage::Amount;
use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::json;

use super::journal::{CallState, Journal, JournaledCheck, Journaler, WaitKind};
use super::scale::Scale;
use super::surface::Surface;
use super::{Outcome, PipelineError, PipelineRunner, Session, Steps, TaskRun};
use crate::model::{
    CallResult, ComputerModel, ModelAction, ModelError, SafetyCheck, Screen, TextModel, ToolCall, Turn, Usage, NOT_EXECUTED,
};

/// Opens a task's conversations with one provider's models.
pub trait ModelFactory: Send + Sync + 'static {
    /// The provider's name, for metric labels (`openai`, `anthropic`).
    fn provider(&self) -> &'static str;

    /// A conversation with a model that sees a screen of `display` size.
    fn open(&self, run: &TaskRun, display: (u32, u32)) -> Result<Box<dyn ComputerModel>, PipelineError>;

    /// The model the planner asks, without tools.
    fn planner(&self, run: &TaskRun) -> Result<Box<dyn TextModel>, PipelineError>;

    /// The grid the model's points are on when it answers in normalized
    /// coordinates (Gemini: 1000×1000); `None` when it answers in the
    /// pixels of the screenshot it saw.
    fn grid(&self) -> Option<(u32, u32)> {
        None
    }

    /// The name of the model a task's conversations use, for its usage.
    fn model(&self, run: &TaskRun) -> String;
}

/// How one conversation maps between the model and the screen: the image
/// it is shown, and the space its points are in.
struct Mapping {
    view: Scale,
    act: Scale,
}

/// A computer-use pipeline over one kind of model.
pub struct ComputerUse {
    models: Box<dyn ModelFactory>,
    /// The largest screen the model is shown.
    target: (u32, u32),
    /// Whether conversations drive the sandbox's browser tab rather than
    /// its whole desktop.
    browser: bool,
}

impl ComputerUse {
    pub fn new(models: impl ModelFactory, target: (u32, u32)) -> Self {
        Self { models: Box::new(models), target, browser: false }
    }

    /// A pipeline whose conversations drive the Chromium tab of the
    /// sandbox (see [`Surface`]); `models` offer their browser tools.
    pub fn for_browser(models: impl ModelFactory, target: (u32, u32)) -> Self {
        Self { models: Box::new(models), target, browser: true }
    }
}

impl PipelineRunner for ComputerUse {
    fn run<'a>(&'a self, run: &'a TaskRun) -> BoxFuture<'a, Result<Outcome, PipelineError>> {
        async move {
            let steps = Steps::new(run);
            if run.task.spec().plan == Some(true) {
                return self.run_planned(run, steps).await;
            }
            self.run_journaled(run, steps).await
        }
        .boxed()
    }
}

impl ComputerUse {
    /// What the conversations drive: the desktop, or the browser's tab.
    async fn surface(&self, session: &Session) -> Result<Surface, PipelineError> {
        if self.browser {
            Surface::browser(session).await
        } else {
            Ok(Surface::Desktop)
        }
    }

    /// Runs the task's prompt as one conversation, journaled step by step
    /// (see [`journal`](super::journal)): taken up from the journal when an
    /// earlier attempt was interrupted (see [`resume`]), else from the
    /// start.
    async fn run_journaled(&self, run: &TaskRun, steps: Steps) -> Result<Outcome, PipelineError> {
        let start = match resume::journal_of(run).await? {
            Some(journal) => resume::start(run, steps, journal).await?,
            None => resume::Start::Fresh(steps),
        };
        let (mut session, journal, answer) = match start {
            resume::Start::Resumed(session, journal, answer) => (*session, Some(journal), answer),
            resume::Start::Fresh(steps) => (Session::open_with(run, steps, run.task.spec().sandbox.as_ref()).await?, None, None),
        };
        session.steps_mut().journaled(run.hand_back.clone());
        session.allow_parking(run);
        let result = self.drive(run, &mut session, journal, answer).await;
        close_journaled(run, session, result).await
    }

    /// Runs the task's prompt as one conversation, or continues the one
    /// `journal` describes.
    async fn drive(
        &self,
        run: &TaskRun,
        session: &mut Session,
        journal: Option<Journal>,
        answer: Option<parked::Answer>,
    ) -> Result<Outcome, PipelineError> {
        let mut surface = self.surface(session).await?;
        let mut journaler = match journal {
            Some(journal) => Journaler::new(Arc::clone(&run.task), run.tools.blobs.clone(), journal),
            None => {
                let journal = Journal::new(session.journaled_sandbox()?);
                Journaler::begin(Arc::clone(&run.task), run.tools.blobs.clone(), journal).await?
            }
        };
        let mut usage: Usage = journaler.journal().usage.into();
        let prompt = &run.task.spec().prompt;
        let journaled = Journaled { journaler: &mut journaler, answer };
        let text = self.converse(run, session, &mut surface, prompt, &mut usage, Some(journaled)).await?;
        Ok(Outcome::Succeeded(json!({ "text": text, "usage": usage_json(usage) })))
    }

    /// Opens the conversation and gets its first turn: from the start with
    /// `prompt` and the screen, or, when the journal holds a conversation,
    /// from its checkpoint with the results of its last turn's calls on the
    /// screen as it is now. A parked task's answer decides those results;
    /// approved safety checks give back the journaled turn itself (the
    /// `true`), whose calls run without a model call.
    async fn first_turn(
        &self,
        run: &TaskRun,
        session: &Session,
        surface: &Surface,
        mapping: &Mapping,
        prompt: &str,
        (journal, answer): (Option<&Journaler>, Option<parked::Answer>),
    ) -> Result<(Box<dyn ComputerModel>, Turn, bool), PipelineError> {
        let grid = self.models.grid();
        let mut model = self.models.open(run, grid.unwrap_or(mapping.view.model))?;
        session.steps().between_steps()?;
        let screen = look(session, surface, &mapping.view).await?;
        tell_page(model.as_mut(), session, surface).await?;
        let provider = self.models.provider();
        let taking_up = journal.filter(|journaler| journaler.taking_up());
        let taken_up = match taking_up {
            Some(journaler) => resume::restored(model.as_mut(), journaler).await,
            None => None,
        };
        let turn = match (taken_up, answer) {
            (Some(journal), Some(parked::Answer::Approved(checks))) => match parked::approved_turn(journal, &checks) {
                Some(turn) => return Ok((model, turn, true)),
                None => {
                    let results = resume::results_of(journal, &screen);
                    session.guard(timed(run, provider, model.resume(results, &checks))).await?
                }
            },
            (Some(journal), Some(parked::Answer::Asked { call, text })) => {
                let results = parked::answer_call(resume::results_of(journal, &screen), &call, &text);
                session.guard(timed(run, provider, model.resume(results, &[]))).await?
            }
            (Some(journal), _) => {
                let results = resume::results_of(journal, &screen);
                session.guard(timed(run, provider, model.resume(results, &[]))).await?
            }
            (None, _) => {
                let prompt = match taking_up.map(Journaler::journal).filter(|j| j.steps > 0) {
                    Some(journal) => resume::without_history(prompt, journal.steps),
                    None => prompt.to_owned(),
                };
                session.guard(timed(run, provider, model.start(&prompt, &screen))).await?
            }
        };
        Ok((model, turn, false))
    }

    /// One conversation: shows the model the screen with `prompt` and
    /// carries out what it asks until it answers without a call; returns
    /// that answer. Adds the tokens used to `usage` and records the total.
    /// With a `journal`, each turn and each call's progress is written to
    /// it, and the worker's stop hands the task back before the next model
    /// call.
    async fn converse(
        &self,
        run: &TaskRun,
        session: &mut Session,
        surface: &mut Surface,
        prompt: &str,
        usage: &mut Usage,
        journaled: Option<Journaled<'_>>,
    ) -> Result<String, PipelineError> {
        let scale = Scale::fit(surface.size(session).await?, self.target);
        let grid = self.models.grid();
        let mapping = Mapping { view: scale, act: grid.map_or(scale, |model| Scale { screen: scale.screen, model }) };
        let (mut journal, answer) = match journaled {
            Some(Journaled { journaler, answer }) => (Some(journaler), answer),
            None => (None, None),
        };
        let (mut model, mut turn, mut approved) =
            self.first_turn(run, session, surface, &mapping, prompt, (journal.as_deref(), answer)).await?;
        if let Some(journal) = journal.as_deref_mut() {
            journal.took_up();
        }
        let provider = self.models.provider();
        let model_name = self.models.model(run);
        loop {
            *usage += turn.usage;
            if !approved {
                record_turn(run, session, &turn, &model_name).await?;
            }
            if turn.calls.is_empty() {
                return Ok(turn.text.unwrap_or_default());
            }
            if let Some(journal) = journal.as_deref_mut() {
                journal.turn(model.checkpoint(), &turn.calls, session.steps().taken(), *usage).await?;
            }
            let acknowledged = if std::mem::take(&mut approved) {
                turn.safety_checks.clone()
            } else {
                self.clear_safety_checks(session, &turn.safety_checks, journal.is_some()).await?
            };
            let mut results = carry_out_turn(session, surface, &mapping, &turn.calls, journal.as_deref_mut()).await?;
            session.steps_mut().pause_while_held().await?;
            if let Some(message) = session.steps_mut().take_hand_back() {
                hand_back(session, surface, &mapping, &mut results, message).await?;
            }
            session.steps().between_steps()?;
            if journal.is_some() && run.hand_back.is_cancelled() {
                return Err(PipelineError::HandedBack);
            }
            tell_page(model.as_mut(), session, surface).await?;
            turn = session.guard(timed(run, provider, model.resume(results, &acknowledged))).await?;
        }
    }

    /// The checks the task may acknowledge: all of them when allowed or
    /// approved by a human; an error when denied.
    /// A `journaled` run may park the wait for a person.
    async fn clear_safety_checks(
        &self,
        session: &Session,
        checks: &[SafetyCheck],
        journaled: bool,
    ) -> Result<Vec<SafetyCheck>, PipelineError> {
        if checks.is_empty() {
            return Ok(Vec::new());
        }
        let listed = checks.iter().map(|c| format!("{} ({})", c.message, c.code)).collect::<Vec<_>>().join("; ");
        let park = journaled.then(|| WaitKind::Sensitive {
            checks: checks
                .iter()
                .map(|c| JournaledCheck { id: c.id.clone(), code: c.code.clone(), message: c.message.clone() })
                .collect(),
        });
        session.steps().clear_sensitive("the model asked to go past a safety check", &listed, park).await?;
        Ok(checks.to_vec())
    }
}

/// A journaled conversation: its journal, and the answer a parked task
/// was woken by.
struct Journaled<'j> {
    journaler: &'j mut Journaler,
    answer: Option<parked::Answer>,
}

/// Closes a journaled run's session; a run that failed and is not taken up
/// in its sandbox by the next attempt (see [`Session::carries_over`]: a
/// handed-back, taken-over, parked or retried one) drops the journal, so a
/// retry starts clean.
pub(super) async fn close_journaled<T>(
    run: &TaskRun,
    session: Session,
    result: Result<T, PipelineError>,
) -> Result<T, PipelineError> {
    let (result, carried_over) = session.close_journaled(result).await;
    if result.is_err() && !carried_over {
        if let Err(e) = run.task.write_journal("").await {
            tracing::warn!(error = %e, "could not drop the step journal of a run that will not be taken up");
        }
    }
    result
}

/// Awaits one model call, recording its latency and outcome.
async fn timed(
    run: &TaskRun,
    provider: &'static str,
    call: impl Future<Output = Result<Turn, ModelError>>,
) -> Result<Turn, PipelineError> {
    let started = Instant::now();
    let answer = call.await;
    let outcome = answer.as_ref().map_or_else(ModelError::kind, |_| "ok");
    run.metrics.model_called(provider, outcome, started.elapsed());
    answer.map_err(PipelineError::from)
}

/// Tells a browser conversation's model which page is on show.
async fn tell_page(model: &mut dyn ComputerModel, session: &Session, surface: &Surface) -> Result<(), PipelineError> {
    if let Some(page) = surface.page(session).await? {
        model.page_shown(&page);
    }
    Ok(())
}

/// Takes a screenshot and scales it for the model.
async fn look(session: &Session, surface: &Surface, scale: &Scale) -> Result<Screen, PipelineError> {
    let shot = surface.capture(session).await?;
    scale.screen_for_model(&shot).map_err(|e| PipelineError::Retryable(format!("the screenshot cannot be scaled: {e}")))
}

/// Emits the turn's tool switches, reasoning and usage, and counts its
/// tokens and cost on the task, which ends here if they take it past its
/// budget.
async fn record_turn(run: &TaskRun, session: &Session, turn: &Turn, model: &str) -> Result<(), PipelineError> {
    let task = session.steps().task();
    for change in &turn.tool_changes {
        let error = format!(
            "{} does not take the computer tool {}; asking again with {}, as every later task on this model will: {}",
            change.model, change.from, change.to, change.reason
        );
        task.emit(EventKind::Retrying { attempt: task.attempt_number(), delay_ms: 0, error }, &[]).await?;
    }
    for text in turn.reasoning.iter().filter(|t| !t.trim().is_empty()) {
        task.emit(EventKind::Reasoning { text: text.clone() }, &[]).await?;
    }
    let tokens = turn.usage.counts();
    let cost_micros = run.tools.pricing.cost_micros(model, &tokens);
    let event = EventKind::Usage {
        step: session.steps().taken(),
        model: model.to_owned(),
        input_tokens: tokens.input,
        output_tokens: tokens.output,
        cache_read_tokens: tokens.cache_read,
        cache_write_tokens: tokens.cache_write,
        cost_usd: cost_micros.map(usd),
    };
    task.emit(event, &[]).await?;
    session.steps().count(&[Amount::Tokens { model: model.to_owned(), tokens, cost_micros }]).await
}

fn usage_json(usage: Usage) -> serde_json::Value {
    json!({
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
    })
}

/// Carries out a turn's calls in order, stopping at the first that fails:
/// every later call is answered with [`NOT_EXECUTED`] and the screen as
/// the failure left it.
async fn carry_out_turn(
    session: &mut Session,
    surface: &mut Surface,
    mapping: &Mapping,
    calls: &[ToolCall],
    mut journal: Option<&mut Journaler>,
) -> Result<Vec<CallResult>, PipelineError> {
    let mut results: Vec<CallResult> = Vec::with_capacity(calls.len());
    for call in calls {
        let failed = results.last().filter(|r| r.is_error).map(|r| r.screen.clone());
        let result = match failed {
            Some(screen) => CallResult { call_id: call.id.clone(), screen, text: Some(NOT_EXECUTED.to_owned()), is_error: true },
            None => {
                // A person who took the desktop over meanwhile may have
                // changed what this call was planned on: it is not done.
                session.steps_mut().pause_while_held().await?;
                if session.steps().handed_back() {
                    let screen = look(session, surface, &mapping.view).await?;
                    CallResult { call_id: call.id.clone(), screen, text: Some(PASSED_OVER.to_owned()), is_error: true }
                } else {
                    carry_out_journaled(session, surface, mapping, call, journal.as_deref_mut()).await?
                }
            }
        };
        results.push(result);
    }
    Ok(results)
}

/// Carries out one tool call, marked `intent` in the journal before it
/// starts and `done` once the screen after it is observed.
async fn carry_out_journaled(
    session: &mut Session,
    surface: &mut Surface,
    mapping: &Mapping,
    call: &ToolCall,
    mut journal: Option<&mut Journaler>,
) -> Result<CallResult, PipelineError> {
    if let Some(journal) = journal.as_deref_mut() {
        journal.mark(&call.id, CallState::Intent, session.steps().taken()).await?;
    }
    let result = carry_out(session, surface, mapping, call).await?;
    if let Some(journal) = journal {
        journal.mark(&call.id, CallState::Done, session.steps().taken()).await?;
    }
    Ok(result)
}

/// Carries out one tool call and observes the screen after it. An action
/// the sandbox refuses, or a call the client refused, is reported to the
/// model as an error, not fatal.
async fn carry_out(
    session: &mut Session,
    surface: &mut Surface,
    mapping: &Mapping,
    call: &ToolCall,
) -> Result<CallResult, PipelineError> {
    let mut text = None;
    let mut zoomed = None;
    let failed = |screen, message| CallResult { call_id: call.id.clone(), screen, text: Some(message), is_error: true };
    for action in &call.actions {
        match action {
            ModelAction::Act(action) => {
                let on_screen = mapping.act.action_to_screen(action);
                match surface.act(session, &on_screen).await {
                    Ok(()) => {}
                    Err(PipelineError::Refused(message)) => {
                        return Ok(failed(look(session, surface, &mapping.view).await?, message))
                    }
                    Err(other) => return Err(other),
                }
            }
            ModelAction::Browse(browse) => match surface.browse(session, browse).await? {
                Ok(answer) => text = Some(answer),
                Err(reason) => return Ok(failed(look(session, surface, &mapping.view).await?, reason)),
            },
            ModelAction::Refuse { reason } => return Ok(failed(look(session, surface, &mapping.view).await?, reason.clone())),
            ModelAction::CursorPosition => text = Some(cursor_position(session, &mapping.act).await?),
            ModelAction::AskHuman { question } => text = Some(ask_human(session, &call.id, question).await?),
            ModelAction::Zoom { region } => zoomed = Some(*region),
        }
    }
    let screen = match zoomed {
        Some(region) => {
            let shot = surface.capture(session).await?;
            mapping
                .view
                .zoom(&shot, region)
                .map_err(|e| PipelineError::Retryable(format!("the zoomed screenshot cannot be made: {e}")))?
        }
        None => look(session, surface, &mapping.view).await?,
    };
    Ok(CallResult { call_id: call.id.clone(), screen, text, is_error: false })
}

/// Tells the model a person held the desktop: the turn's last result gets
/// the screen as the person left it and their message.
async fn hand_back(
    session: &Session,
    surface: &Surface,
    mapping: &Mapping,
    results: &mut [CallResult],
    message: Option<String>,
) -> Result<(), PipelineError> {
    let Some(last) = results.last_mut() else {
        return Ok(());
    };
    last.screen = look(session, surface, &mapping.view).await?;
    let note = match message.filter(|m| !m.trim().is_empty()) {
        Some(message) => format!("{HANDED_BACK} Their message: {message}"),
        None => HANDED_BACK.to_owned(),
    };
    last.text = Some(match last.text.take() {
        Some(text) => format!("{text}\n{note}"),
        None => note,
    });
    Ok(())
}

/// The answer to a call a person's takeover came before.
const PASSED_OVER: &str = "Not carried out: a person took over the desktop before this action.";

/// What the model hears after a person held the desktop.
const HANDED_BACK: &str =
    "A person took over the desktop and has handed it back; the screenshot shows the desktop as they left it.";

/// Puts the task in `waiting` with code `human-intervention` and the
/// model's question; the human's message (or a plain go-ahead) is the
/// answer, a denial ends the task.
async fn ask_human(session: &Session, call: &str, question: &str) -> Result<String, PipelineError> {
    let kind = WaitKind::Ask { call: call.to_owned() };
    let input = session.steps().wait_parkable(StopCode::HumanIntervention, question, kind).await?;
    ask_answer(input, question)
}

/// A person's answer to the model's `question`: their message (or a plain
/// go-ahead); a denial ends the task.
fn ask_answer(input: HumanInput, question: &str) -> Result<String, PipelineError> {
    match input.decision {
        Decision::Approve => Ok(input.message.unwrap_or_else(|| "Go ahead as you see fit.".to_owned())),
        Decision::Deny => Err(PipelineError::Fatal {
            code: StopCode::HumanIntervention,
            message: format!("a human declined to help: {}", input.message.unwrap_or_else(|| question.to_owned())),
        }),
    }
}

/// Where the pointer is, in model coordinates, as `X=…,Y=…`.
async fn cursor_position(session: &Session, scale: &Scale) -> Result<String, PipelineError> {
    let (provider, id) = session.sandbox()?;
    let output = session
        .guard(async {
            provider
                .run(id, "xdotool getmouselocation --shell", Duration::from_secs(10))
                .await
                .map_err(|e| PipelineError::Retryable(format!("cannot read the pointer position: {e}")))
        })
        .await?;
    let value =
        |name: &str| output.stdout.lines().find_map(|line| line.strip_prefix(name).and_then(|v| v.trim().parse::<u32>().ok()));
    let (Some(x), Some(y)) = (value("X="), value("Y=")) else {
        return Err(PipelineError::Retryable(format!("the pointer position did not parse: {}", output.stdout.trim())));
    };
    let (mx, my) = scale.to_model(x, y);
    Ok(format!("X={mx},Y={my}"))
}
