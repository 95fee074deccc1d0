//! A task's step journal: after each model turn and around each action,
//! what a later attempt needs to take the task up where this one stopped — the sandbox (provider, id, host), the model conversation
//! as its client's checkpoint (an OpenAI `previous_response_id`; the
//! message history of Anthropic and Gemini with screenshots as blob-store
//! hashes, see [`screens`]), the steps taken, the tokens used, and for each
//! call of the turn under way whether it is `pending`, in flight
//! (`intent`, written before it runs) or `done` (written after); for a
//! `plan: true` task also its plan, the plan step under way and the
//! answers of the steps done, so a later attempt neither plans again nor
//! redoes a finished step; for a scripted task, which of its actions is
//! under way or was done last, in the same `pending` / `intent` / `done`
//! states ([`ScriptProgress`]). The queue
//! stores it in the task's own hash, fenced by the attempt
//! (`flotilla_queue::queue`'s `journal` module) and bounded by
//! [`JOURNAL_MAX_BYTES`]; this module decides what it says, and keeps it
//! within that bound by leaving out the conversation's oldest turns.
//!
//! Invariant: an action is marked `intent` in Redis before it reaches the
//! sandbox and `done` only after, so a later attempt never runs again an
//! action recorded `done`, and knows which one may have been cut short.
//! Guarded by `durable_runs::a_sigkilled_worker_costs_one_step_and_no_done_action_runs_twice`
//! (and, for the conversations carried whole, by
//! `durable_conversations::a_sigkilled_claude_task_goes_on_with_its_earlier_turns` and
//! `durable_conversations::a_sigkilled_gemini_task_goes_on_with_its_earlier_turns`; for
//! scripts, by
//! `durable_scripts::a_sigkilled_workers_scripted_task_goes_on_in_the_same_desktop_and_runs_each_action_once`).
//! Invariant: the journal holds no screenshot bytes, only their hashes.
//! Guarded by `pipeline::journal::screens::tests::screenshots_become_hashes_and_come_back_as_the_same_bytes`.

pub mod screens;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tracing::warn;

use flotilla_blobstore::BlobStore;
use flotilla_queue::queue::JOURNAL_MAX_BYTES;

use super::plan::{Clarification, Plan, Planned};
use super::{PipelineError, TaskHandle};
use crate::model::{ModelAction, ToolCall, Usage};
use flotilla_types::action::Action;

/// The format of the journal this worker writes; a journal of another
/// version is not taken up (the task starts over).
const VERSION: u32 = 1;

/// Where the task's sandbox is: enough to connect to it again by id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournaledSandbox {
    pub provider: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// Where one call of the turn under way stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallState {
    /// Not started.
    Pending,
    /// Started and not known to have finished: it may or may not have
    /// happened.
    Intent,
    /// Carried out, and the screen after it observed.
    Done,
}

/// One call of the turn under way.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournaledCall {
    pub id: String,
    pub state: CallState,
    /// What the call asks, when it is screen actions only: a parked task
    /// carries them out once a person approves its safety checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actions: Option<Vec<Action>>,
}

/// A safety check the model raised, for a person to approve.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournaledCheck {
    pub id: String,
    pub code: String,
    pub message: String,
}

/// What a parked task waits for a person to decide.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WaitKind {
    /// Whether the last turn's calls may go past these safety checks
    /// (code `sensitive-action`); none of them has started.
    Sensitive { checks: Vec<JournaledCheck> },
    /// The answer to the model's `ask_human` call `call`.
    Ask { call: String },
    /// Whether to go on after an interruption left an action in flight
    /// (`on_interrupt: ask`).
    Interrupted,
}

/// A wait for a person, journaled as the task is parked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournaledWait {
    /// The stop code the task waits with.
    pub code: String,
    /// What the person was asked.
    pub message: String,
    /// The steps taken when the wait began.
    pub step: u32,
    #[serde(flatten)]
    pub kind: WaitKind,
}

/// Tokens used so far, for the task's result.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JournaledUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
}

impl From<Usage> for JournaledUsage {
    fn from(u: Usage) -> Self {
        Self {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
        }
    }
}

impl From<JournaledUsage> for Usage {
    fn from(u: JournaledUsage) -> Self {
        Self {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
        }
    }
}

/// Where a `plan: true` task stands in its plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanProgress {
    pub plan: Plan,
    #[serde(default)]
    pub clarifications: Vec<Clarification>,
    /// The index of the plan step under way (the number of steps done).
    pub step: u32,
    /// The answers of the steps done, in order.
    #[serde(default)]
    pub answers: Vec<String>,
}

impl PlanProgress {
    /// The plan as its executor takes it (the planner's tokens are in the
    /// journal's usage).
    pub fn planned(&self) -> Planned {
        Planned { plan: self.plan.clone(), clarifications: self.clarifications.clone(), usage: Usage::default() }
    }
}

/// A claude-code task's CLI run: the session it runs in (its id chosen
/// before the CLI starts), and its work directory's files (path to
/// SHA-256) before the CLI first ran, against which its artifacts are
/// found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CliProgress {
    pub session_id: String,
    #[serde(default)]
    pub before: BTreeMap<String, String>,
}

/// Where a scripted task stands in its list of actions: the one under way
/// or done last, and its state. A `confirm` step is `pending` while it
/// waits for a person and `done` once cleared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScriptProgress {
    /// The action's index in the task's list.
    pub action: u32,
    pub state: CallState,
}

/// What the journal holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Journal {
    pub version: u32,
    pub sandbox: JournaledSandbox,
    /// The model client's checkpoint after its last turn; `None` before the
    /// first turn or when the provider's conversation cannot be carried
    /// over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<serde_json::Value>,
    /// Actions taken so far.
    pub steps: u32,
    pub usage: JournaledUsage,
    /// The calls of the last turn, in order.
    #[serde(default)]
    pub calls: Vec<JournaledCall>,
    /// The wait for a person the task was parked in, until the attempt
    /// that takes it up has the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<JournaledWait>,
    /// A `plan: true` task's plan and progress; the conversation and calls
    /// above are those of its step under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanProgress>,
    /// A claude-code task's CLI session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cli: Option<CliProgress>,
    /// A scripted task's place in its actions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<ScriptProgress>,
}

impl Journal {
    /// A journal for a task that holds `sandbox` and has taken no turn yet.
    pub fn new(sandbox: JournaledSandbox) -> Self {
        Self {
            version: VERSION,
            sandbox,
            conversation: None,
            steps: 0,
            usage: JournaledUsage::default(),
            calls: Vec::new(),
            wait: None,
            plan: None,
            cli: None,
            script: None,
        }
    }

    /// A journal for a `plan: true` task that holds `sandbox` and is about
    /// to run the first step of `planned` (whose tokens it counts).
    pub fn planned(sandbox: JournaledSandbox, planned: &Planned) -> Self {
        let plan = PlanProgress {
            plan: planned.plan.clone(),
            clarifications: planned.clarifications.clone(),
            step: 0,
            answers: Vec::new(),
        };
        Self { usage: planned.usage.into(), plan: Some(plan), ..Self::new(sandbox) }
    }

    /// The journal an earlier attempt left, when this worker can take it
    /// up: one it cannot read is logged and ignored (the task starts over).
    pub fn parse(stored: &str) -> Option<Self> {
        match serde_json::from_str::<Self>(stored) {
            Ok(journal) if journal.version == VERSION => Some(journal),
            Ok(journal) => {
                warn!(version = journal.version, "the step journal is of another version; starting over");
                None
            }
            Err(e) => {
                warn!(error = %e, "the step journal does not parse; starting over");
                None
            }
        }
    }

    /// Whether a call (or a script's action) was in flight when the
    /// journal was last written.
    pub fn interrupted(&self) -> bool {
        let script_in_flight = self.script.is_some_and(|s| s.state == CallState::Intent);
        script_in_flight || self.calls.iter().any(|c| c.state == CallState::Intent)
    }
}

/// Keeps a task's journal in step with its run: each change is written
/// through the task handle before the run goes on.
pub struct Journaler {
    task: Arc<dyn TaskHandle>,
    /// Where the conversation's screenshots are kept.
    blobs: Option<BlobStore>,
    /// The hashes of the screenshots this run stored for the conversation.
    stored: BTreeSet<String>,
    journal: Journal,
    /// Whether the next conversation takes up the journaled one (an
    /// earlier attempt's), rather than starting.
    taking_up: bool,
}

impl Journaler {
    /// Keeps on with a journal an earlier attempt stored: the run's first
    /// conversation takes up the journaled one.
    pub fn new(task: Arc<dyn TaskHandle>, blobs: Option<BlobStore>, journal: Journal) -> Self {
        Self { task, blobs, stored: BTreeSet::new(), journal, taking_up: true }
    }

    /// Stores a new journal before the run's first step.
    pub async fn begin(task: Arc<dyn TaskHandle>, blobs: Option<BlobStore>, journal: Journal) -> Result<Self, PipelineError> {
        let mut journaler = Self { task, blobs, stored: BTreeSet::new(), journal, taking_up: false };
        journaler.save().await?;
        Ok(journaler)
    }

    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Whether the conversation about to open takes up an earlier
    /// attempt's (true once, for the first conversation of a run that
    /// continues a stored journal).
    pub fn taking_up(&self) -> bool {
        self.taking_up
    }

    /// The journaled conversation was taken up (or could not be): later
    /// conversations of the run start anew.
    pub fn took_up(&mut self) {
        self.taking_up = false;
    }

    /// The journaled conversation as its client's checkpoint, screenshots
    /// fetched back from the blob store; `None` when there is none, or it
    /// cannot be rebuilt (logged: the run goes on without it).
    pub async fn conversation(&self) -> Option<serde_json::Value> {
        let journaled = self.journal.conversation.clone()?;
        match screens::from_hashes(journaled, self.blobs.as_ref()).await {
            Ok(conversation) => Some(conversation),
            Err(problem) => {
                warn!(%problem, "the journaled conversation cannot be rebuilt; going on without it");
                None
            }
        }
    }

    /// Records a model turn: the conversation after it, its calls (none
    /// started), the steps taken and the tokens used so far.
    pub async fn turn(
        &mut self,
        conversation: Option<serde_json::Value>,
        calls: &[ToolCall],
        steps: u32,
        usage: Usage,
    ) -> Result<(), PipelineError> {
        self.journal.conversation = match conversation {
            Some(conversation) => screens::to_hashes(conversation, self.blobs.as_ref(), &mut self.stored).await?,
            None => None,
        };
        self.journal.calls = calls
            .iter()
            .map(|c| JournaledCall { id: c.id.clone(), state: CallState::Pending, actions: screen_actions(c) })
            .collect();
        self.journal.steps = steps;
        self.journal.usage = usage.into();
        self.save().await
    }

    /// Records that the plan step under way ended with `answer`: the next
    /// one is under way, with no conversation yet.
    pub async fn plan_step_done(&mut self, answer: String, steps: u32, usage: Usage) -> Result<(), PipelineError> {
        if let Some(progress) = self.journal.plan.as_mut() {
            progress.step += 1;
            progress.answers.push(answer);
        }
        self.journal.conversation = None;
        self.journal.calls.clear();
        self.journal.steps = steps;
        self.journal.usage = usage.into();
        self.save().await
    }

    /// Marks call `id` as `state`, with the steps taken by then.
    pub async fn mark(&mut self, id: &str, state: CallState, steps: u32) -> Result<(), PipelineError> {
        if let Some(call) = self.journal.calls.iter_mut().find(|c| c.id == id) {
            call.state = state;
        }
        self.journal.steps = steps;
        self.save().await
    }

    /// Records that a scripted task's action `action` is in `state`, with
    /// the steps taken by then.
    pub async fn script_action(&mut self, action: u32, state: CallState, steps: u32) -> Result<(), PipelineError> {
        self.journal.script = Some(ScriptProgress { action, state });
        self.journal.steps = steps;
        self.save().await
    }

    /// Records the wait the task is parked in, or that it has its answer
    /// (`None`).
    pub async fn set_wait(&mut self, wait: Option<JournaledWait>) -> Result<(), PipelineError> {
        self.journal.wait = wait;
        self.save().await
    }

    async fn save(&mut self) -> Result<(), PipelineError> {
        let text = bounded(&mut self.journal)?;
        self.task.write_journal(&text).await?;
        Ok(())
    }
}

/// Writes `wait` into the task's stored journal, as the task is parked
/// (the run's own [`Journaler`] is not at hand where a wait begins; nothing
/// else writes the journal while the task waits).
pub async fn journal_wait(task: &dyn TaskHandle, wait: JournaledWait) -> Result<(), PipelineError> {
    let stored = task.journal().await?;
    let Some(mut journal) = stored.as_deref().and_then(Journal::parse) else {
        return Err(PipelineError::Retryable("the task has no step journal to park with".into()));
    };
    journal.wait = Some(wait);
    store(task, &mut journal).await
}

/// Stores `journal` as it is (within its bound), outside a [`Journaler`].
pub async fn store(task: &dyn TaskHandle, journal: &mut Journal) -> Result<(), PipelineError> {
    task.write_journal(&bounded(journal)?).await?;
    Ok(())
}

/// A call's actions when they are all screen actions (what a parked task
/// can carry out later without its model).
fn screen_actions(call: &ToolCall) -> Option<Vec<Action>> {
    call.actions
        .iter()
        .map(|a| match a {
            ModelAction::Act(action) => Some(action.clone()),
            _ => None,
        })
        .collect()
}

/// `journal` as stored, within [`JOURNAL_MAX_BYTES`]: while it is past
/// that, the conversation's oldest turn is left out, and the conversation
/// goes whole when no turn can (the run goes on without it).
fn bounded(journal: &mut Journal) -> Result<String, PipelineError> {
    loop {
        let text = serde_json::to_string(journal)
            .map_err(|e| PipelineError::Retryable(format!("the step journal cannot be written: {e}")))?;
        if text.len() <= JOURNAL_MAX_BYTES {
            return Ok(text);
        }
        let dropped = journal.conversation.as_mut().is_some_and(screens::drop_oldest_turn);
        if !dropped {
            if journal.conversation.take().is_none() {
                return Err(PipelineError::Retryable(format!("a step journal of {} bytes is past its bound", text.len())));
            }
            warn!("the conversation does not fit the step journal; a later attempt goes on without it");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_reads_back_what_it_wrote_and_tells_an_action_in_flight() {
        let mut journal =
            Journal::new(JournaledSandbox { provider: "e2b".into(), id: "sb-1".into(), host: Some("http://h".into()) });
        journal.conversation = Some(serde_json::json!({"previous_response_id": "resp_2"}));
        journal.calls = vec![
            JournaledCall { id: "c1".into(), state: CallState::Done, actions: None },
            JournaledCall { id: "c2".into(), state: CallState::Intent, actions: None },
        ];
        journal.steps = 7;
        let text = serde_json::to_string(&journal).expect("json");
        assert!(text.contains(r#""state":"intent""#), "{text}");
        let back = Journal::parse(&text).expect("parses");
        assert_eq!(back, journal);
        assert!(back.interrupted());
        journal.calls[1].state = CallState::Done;
        assert!(!journal.interrupted());
    }

    #[test]
    fn a_journal_past_its_bound_keeps_the_newest_turns_that_fit() {
        let mut journal = Journal::new(JournaledSandbox { provider: "e2b".into(), id: "sb".into(), host: None });
        let turn = "t".repeat(40 * 1024);
        let history: Vec<String> = (0..11).map(|n| format!("{n}{turn}")).collect();
        journal.conversation = Some(serde_json::json!({ "history": history }));
        let text = bounded(&mut journal).expect("fits");
        assert!(text.len() <= JOURNAL_MAX_BYTES, "{}", text.len());
        let kept: Vec<String> = journal.conversation.as_ref().expect("kept")["history"]
            .as_array()
            .expect("a history")
            .iter()
            .map(|m| m.as_str().expect("text")[..2].trim_end_matches('t').to_owned())
            .collect();
        assert_eq!(kept, ["0", "7", "8", "9", "10"], "the opening message and the newest turns");
    }

    #[test]
    fn a_journal_of_another_version_or_shape_is_not_taken_up() {
        assert!(Journal::parse(r#"{"version": 2, "sandbox": {"provider": "e2b", "id": "x"}, "steps": 0, "usage": {}}"#).is_none());
        assert!(Journal::parse("not json").is_none());
    }
}
