//! A scripted run's step journal and its take-up: each action is marked
//! `intent` in the task's journal before it runs and `done` after (a
//! `confirm` step `pending` while it waits for a person), in the same
//! journal and with the same sandbox record as the model-driven pipelines
//! (see [`journal`](super::super::journal)). An attempt that takes the
//! task up after its worker was killed or stopped (by its `on_interrupt`,
//! see [`resume`](super::super::computer_use::resume)) reconnects to the
//! same sandbox and goes on after the last action done.
//!
//! An action left in flight (`intent`) may or may not have happened, and a
//! script has no model to look at the screen and decide. It is run again
//! only when running it twice does what running it once does (`wait`,
//! `screenshot`); any other (a click, typed text, a key) is not run again:
//! the run goes on with the next action, and the task's result names the
//! action that was passed over. With `on_interrupt: ask` a person first
//! approves going on from the screen as it is (or denies, ending the
//! task); with `restart` the task starts over in a new sandbox.
//!
//! A `confirm` step's wait parks like a model's (see
//! [`parking`](super::super::session::Parking)): journaled as a wait on a
//! sensitive action, the approval that wakes the task clears the step and
//! the run goes on with the action after it.

use std::sync::Arc;

use flotilla_types::action::Action;

use super::super::computer_use::parked::Answer;
use super::super::journal::{CallState, Journal, Journaler, ScriptProgress};
use super::super::{PipelineError, Session, TaskRun};

/// Where a run goes on in its actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct GoOn {
    /// The index of the first action to run.
    pub next: usize,
    /// The action that was in flight when the run was interrupted and is
    /// not run again.
    pub passed_over: Option<usize>,
}

impl GoOn {
    /// From the first action.
    pub const START: Self = Self { next: 0, passed_over: None };
}

/// Whether running `action` again after it may have run once changes
/// nothing it did not already change.
fn safe_to_repeat(action: &Action) -> bool {
    matches!(action, Action::Wait { .. } | Action::Screenshot {})
}

/// Where a run taken up from `progress` goes on in `actions`; `approved`
/// when a person's approval of its parked `confirm` step woke it.
pub(super) fn go_on_from(progress: Option<ScriptProgress>, actions: &[Action], approved: bool) -> GoOn {
    let Some(ScriptProgress { action, state }) = progress else { return GoOn::START };
    let index = action as usize;
    let after = GoOn { next: index + 1, passed_over: None };
    match state {
        CallState::Done => after,
        CallState::Pending if approved && matches!(actions.get(index), Some(Action::Confirm { .. })) => after,
        CallState::Pending => GoOn { next: index, passed_over: None },
        CallState::Intent if actions.get(index).is_some_and(safe_to_repeat) => GoOn { next: index, passed_over: None },
        CallState::Intent => GoOn { next: index + 1, passed_over: Some(index) },
    }
}

/// The run's journaler and where it goes on: from `journal` an earlier
/// attempt left (woken by `answer` when it was parked), or a new journal
/// of the session's sandbox from the first action.
pub(super) async fn journaler(
    run: &TaskRun,
    session: &Session,
    actions: &[Action],
    taken_up: Option<(Journal, Option<Answer>)>,
) -> Result<(Journaler, GoOn), PipelineError> {
    let task = Arc::clone(&run.task);
    match taken_up {
        Some((journal, answer)) => {
            let approved = matches!(answer, Some(Answer::Approved(_)));
            let go_on = go_on_from(journal.script, actions, approved);
            Ok((Journaler::new(task, None, journal), go_on))
        }
        None => {
            let journal = Journal { script: Some(first_pending()), ..Journal::new(session.journaled_sandbox()?) };
            Ok((Journaler::begin(task, None, journal).await?, GoOn::START))
        }
    }
}

/// A new run's place: its first action, not started.
fn first_pending() -> ScriptProgress {
    ScriptProgress { action: 0, state: CallState::Pending }
}

/// What the task's result adds about the action `passed_over`.
pub(super) fn passed_over_note(actions: &[Action], passed_over: usize) -> String {
    let kind = actions.get(passed_over).map_or("action", Action::kind);
    format!(
        "action {} ({kind}) was under way when the run was interrupted and was not run again: it may or may not have happened",
        passed_over + 1
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn script() -> Vec<Action> {
        vec![
            Action::Type { text: "one\n".into() },
            Action::Wait { ms: 10 },
            Action::Confirm { message: "send".into() },
            Action::Keypress { keys: vec!["Return".into()] },
        ]
    }

    fn at(action: u32, state: CallState) -> Option<ScriptProgress> {
        Some(ScriptProgress { action, state })
    }

    #[test]
    fn a_run_goes_on_after_the_last_action_done_and_never_runs_it_again() {
        let actions = script();
        assert_eq!(go_on_from(None, &actions, false), GoOn::START);
        assert_eq!(go_on_from(at(0, CallState::Pending), &actions, false), GoOn::START);
        assert_eq!(go_on_from(at(0, CallState::Done), &actions, false), GoOn { next: 1, passed_over: None });
        assert_eq!(go_on_from(at(3, CallState::Done), &actions, false), GoOn { next: 4, passed_over: None }, "all done");
    }

    #[test]
    fn an_action_in_flight_runs_again_only_when_repeating_it_changes_nothing() {
        let actions = script();
        let typed = go_on_from(at(0, CallState::Intent), &actions, false);
        assert_eq!(typed, GoOn { next: 1, passed_over: Some(0) }, "typed text is not typed twice");
        let key = go_on_from(at(3, CallState::Intent), &actions, false);
        assert_eq!(key, GoOn { next: 4, passed_over: Some(3) });
        assert_eq!(
            go_on_from(at(1, CallState::Intent), &actions, false),
            GoOn { next: 1, passed_over: None },
            "a wait runs again"
        );
        let note = passed_over_note(&actions, 0);
        assert!(note.starts_with("action 1 (type) was under way"), "{note}");
    }

    #[test]
    fn a_scripts_action_in_flight_reads_back_as_an_interruption() {
        use crate::pipeline::journal::JournaledSandbox;
        let sandbox = JournaledSandbox { provider: "e2b".into(), id: "sb".into(), host: None };
        let mut journal = Journal { script: at(1, CallState::Intent), ..Journal::new(sandbox) };
        let text = serde_json::to_string(&journal).expect("json");
        assert!(text.contains(r#""script":{"action":1,"state":"intent"}"#), "{text}");
        assert_eq!(Journal::parse(&text).as_ref(), Some(&journal));
        assert!(journal.interrupted(), "the resumed event says an action was in flight");
        journal.script = at(1, CallState::Done);
        assert!(!journal.interrupted());
    }

    #[test]
    fn a_confirm_step_is_passed_only_once_a_person_approved_it() {
        let actions = script();
        assert_eq!(go_on_from(at(2, CallState::Pending), &actions, false), GoOn { next: 2, passed_over: None }, "asks again");
        assert_eq!(go_on_from(at(2, CallState::Pending), &actions, true), GoOn { next: 3, passed_over: None });
        assert_eq!(go_on_from(at(2, CallState::Done), &actions, false), GoOn { next: 3, passed_over: None });
        let not_a_confirm = go_on_from(at(0, CallState::Pending), &actions, true);
        assert_eq!(not_a_confirm, GoOn::START, "an approval clears only a confirm step");
    }
}
