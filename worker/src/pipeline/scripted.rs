//! The scripted pipeline: runs a list of actions in order, with an `action`
//! and an `action_completed` event for each: the task's own `actions`, or
//! the trajectory an earlier task recorded (`replay_of`, see [`replay`]).
//! A list of waits alone runs without a sandbox; any other action, or a
//! `setup` or `check` to run, takes a sandbox for the task, with a screenshot before the first action and
//! after every one. A `confirm` step does nothing on the screen: the task
//! goes past it only as its `sensitive_actions` says (by default once a
//! person approves it, see [`Steps::clear_sensitive`]).
//!
//! A run on a sandbox another worker can reach (a sandbox host, E2B) is
//! journaled action by action, so a worker killed or stopped mid-run costs
//! no action done and runs none twice: the next attempt goes on in the
//! same sandbox ([`durable`]). A run on the in-process local desktop, which
//! ends with its worker, and a list of waits alone are not journaled: a
//! later attempt runs them from the start.
//!
//! [`replay`]: super::replay

mod durable;

use std::time::Duration;

use flotilla_types::action::Action;
use flotilla_types::task::SandboxSpec;
use futures::future::BoxFuture;
use futures::FutureExt;
use serde_json::json;

use self::durable::GoOn;
use super::computer_use::close_journaled;
use super::computer_use::resume::{self, Start};
use super::journal::{CallState, Journaler, WaitKind};
use super::replay::{self, Trajectory};
use super::session::Steps;
use super::{Outcome, PipelineError, PipelineRunner, Session, TaskRun};

/// Runs a fixed list of actions.
pub struct Scripted;

/// Who asks to go past a `confirm` step, in the error its refusal gives.
const SCRIPT_ASKS: &str = "the script reached a step to confirm";

impl PipelineRunner for Scripted {
    fn run<'a>(&'a self, run: &'a TaskRun) -> BoxFuture<'a, Result<Outcome, PipelineError>> {
        async move {
            let spec = run.task.spec();
            let Trajectory { actions, sandbox } = match &spec.replay_of {
                Some(id) => replay::trajectory(run.task.as_ref(), id).await?,
                None => Trajectory { actions: spec.actions.clone().unwrap_or_default(), sandbox: spec.sandbox.clone() },
            };
            let evaluated = spec.setup.is_some() || spec.check.is_some();
            if evaluated || actions.iter().any(Action::needs_sandbox) {
                run_journaled(run, &actions, sandbox.as_ref()).await
            } else {
                run_waits(run, &actions).await
            }
        }
        .boxed()
    }
}

/// Runs actions on a sandbox, journaled where the sandbox can outlive its
/// worker: taken up from the journal when an earlier attempt was
/// interrupted (or parked), else from the first action on a sandbox shaped
/// by `spec`. A sandbox that lives only with its worker's process (the
/// in-process local desktop) ends with it, leaving a later attempt nothing
/// to take up: such a run is not journaled and a later attempt starts over.
async fn run_journaled(run: &TaskRun, actions: &[Action], spec: Option<&SandboxSpec>) -> Result<Outcome, PipelineError> {
    let steps = Steps::new(run);
    let reachable = run.tools.sandboxes.as_ref().is_some_and(|pool| pool.provider().host().is_some());
    if !reachable {
        let mut session = Session::open_with(run, steps, spec).await?;
        let result = run_on_screen(run, &mut session, actions, None, GoOn::START).await;
        return session.close(result).await;
    }
    let start = match resume::journal_of(run).await?.filter(|journal| journal.script.is_some()) {
        Some(journal) => resume::start(run, steps, journal).await?,
        None => Start::Fresh(steps),
    };
    let (mut session, taken_up) = match start {
        Start::Resumed(session, journal, answer) => (*session, Some((journal, answer))),
        Start::Fresh(steps) => (Session::open_with(run, steps, spec).await?, None),
    };
    session.steps_mut().journaled(run.hand_back.clone());
    session.allow_parking(run);
    let result = match durable::journaler(run, &session, actions, taken_up).await {
        Ok((mut journal, go_on)) => run_on_screen(run, &mut session, actions, Some(&mut journal), go_on).await,
        Err(e) => Err(e),
    };
    close_journaled(run, session, result).await
}

/// Runs actions on the task's sandbox from `go_on`, observing the screen
/// before the first and after each. With a `journal`, each is marked
/// `intent` before it runs and `done` after (a `confirm` step `pending`
/// while it waits, which may park), and a worker's stop hands the task
/// back between actions.
async fn run_on_screen(
    run: &TaskRun,
    session: &mut Session,
    actions: &[Action],
    mut journal: Option<&mut Journaler>,
    go_on: GoOn,
) -> Result<Outcome, PipelineError> {
    session.observe().await?;
    for (index, action) in actions.iter().enumerate().skip(go_on.next) {
        if journal.is_some() && run.hand_back.is_cancelled() {
            return Err(PipelineError::HandedBack);
        }
        let index = u32::try_from(index).map_err(|_| PipelineError::Retryable("the script is too long to journal".into()))?;
        if let Action::Confirm { message } = action {
            mark(journal.as_deref_mut(), session, index, CallState::Pending).await?;
            let park = journal.is_some().then(|| WaitKind::Sensitive { checks: Vec::new() });
            session.steps().clear_sensitive(SCRIPT_ASKS, message, park).await?;
            mark(journal.as_deref_mut(), session, index, CallState::Done).await?;
            continue;
        }
        mark(journal.as_deref_mut(), session, index, CallState::Intent).await?;
        session.act(action).await?;
        mark(journal.as_deref_mut(), session, index, CallState::Done).await?;
        session.observe().await?;
    }
    Ok(ran_past(actions, go_on))
}

/// Journals action `index` as `state`, when the run is journaled.
async fn mark(journal: Option<&mut Journaler>, session: &Session, index: u32, state: CallState) -> Result<(), PipelineError> {
    match journal {
        Some(journal) => journal.script_action(index, state, session.steps().taken()).await,
        None => Ok(()),
    }
}

/// The result of a run that went on as `go_on` says.
fn ran_past(actions: &[Action], go_on: GoOn) -> Outcome {
    let text = match go_on.passed_over {
        Some(passed_over) => format!("{}; {}", ran_text(actions.len()), durable::passed_over_note(actions, passed_over)),
        None => ran_text(actions.len()),
    };
    Outcome::Succeeded(json!({ "text": text }))
}

/// Runs a list of waits without a sandbox.
async fn run_waits(run: &TaskRun, actions: &[Action]) -> Result<Outcome, PipelineError> {
    let mut steps = Steps::new(run);
    for action in actions {
        let ms = match action {
            Action::Wait { ms } => *ms,
            Action::Confirm { message } => {
                steps.clear_sensitive(SCRIPT_ASKS, message, None).await?;
                continue;
            }
            _ => 0,
        };
        steps
            .take(action, async {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(())
            })
            .await?;
    }
    Ok(ran(actions.len()))
}

fn ran(count: usize) -> Outcome {
    Outcome::Succeeded(json!({ "text": ran_text(count) }))
}

fn ran_text(count: usize) -> String {
    let noun = if count == 1 { "action" } else { "actions" };
    format!("ran {count} {noun}")
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use flotilla_queue::queue::{StoredRecord, TaskRecord};
    use flotilla_types::event::{Event, EventKind};
    use flotilla_types::ids::{TaskId, TenantId};
    use flotilla_types::task::{SensitiveActions, StopCode, TaskSpec};
    use flotilla_types::usage::Amount;
    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::metrics::WorkerMetrics;
    use crate::pipeline::handle::fake::FakeTask;
    use crate::pipeline::Tools;

    fn run_of(task: &Arc<FakeTask>) -> TaskRun {
        TaskRun {
            task: Arc::clone(task) as Arc<dyn crate::pipeline::TaskHandle>,
            cancel: CancellationToken::new(),
            tools: Arc::new(Tools::default()),
            metrics: WorkerMetrics::new(),
            hand_back: CancellationToken::new(),
        }
    }

    fn waits(ms: &[u64]) -> Vec<Action> {
        ms.iter().map(|ms| Action::Wait { ms: *ms }).collect()
    }

    /// An ended task of `tenant` that recorded `events`, as the queue reads it.
    fn ended_task(tenant: &TenantId, id: &TaskId) -> TaskRecord {
        let spec = serde_json::to_string(&TaskSpec::default()).expect("spec");
        let hash = HashMap::from([
            ("spec".to_owned(), spec),
            ("tenant".to_owned(), tenant.to_string()),
            ("status".to_owned(), "succeeded".to_owned()),
        ]);
        TaskRecord::from_hash(id, hash).expect("record").expect("some")
    }

    fn stored(tenant: &TenantId, id: &TaskId, kind: EventKind) -> String {
        let event = Event { seq: 1, task_id: id.clone(), batch_id: None, tenant: tenant.clone(), ts: String::new(), kind };
        serde_json::to_string(&event).expect("event")
    }

    #[tokio::test]
    async fn a_list_of_waits_runs_through_a_task_handle_without_redis() {
        let actions = waits(&[1, 2]);
        let task = Arc::new(FakeTask::new(TaskSpec { actions: Some(actions.clone()), ..TaskSpec::default() }));
        let outcome = Scripted.run(&run_of(&task)).await.expect("outcome");
        assert_eq!(outcome, ran(2));
        let emitted = task.emitted();
        let kinds: Vec<_> = emitted.iter().map(|e| std::mem::discriminant(&e.kind)).collect();
        let action = std::mem::discriminant(&EventKind::Action { action: actions[0].clone() });
        let done = std::mem::discriminant(&EventKind::ActionCompleted { action: actions[0].clone(), ms: 0 });
        assert_eq!(kinds, vec![action, done, action, done]);
        assert_eq!(emitted[3].fields, vec![("steps_taken".to_owned(), "2".to_owned())]);
        assert_eq!(task.counted(), vec![Amount::Step, Amount::Step]);
    }

    fn confirming(policy: SensitiveActions) -> TaskSpec {
        let confirm = Action::Confirm { message: "send the payment".into() };
        TaskSpec { actions: Some(vec![confirm, Action::Wait { ms: 1 }]), sensitive_actions: Some(policy), ..TaskSpec::default() }
    }

    #[tokio::test]
    async fn a_confirm_step_the_task_denies_fails_it_without_waiting_or_acting() {
        let task = Arc::new(FakeTask::new(confirming(SensitiveActions::Deny)));
        let error = Scripted.run(&run_of(&task)).await.expect_err("denied");
        assert!(
            matches!(&error, PipelineError::Fatal { code: StopCode::SensitiveAction, message } if message.contains("send the payment")),
            "{error:?}"
        );
        assert!(task.emitted().is_empty(), "nothing waits and nothing runs");
    }

    #[tokio::test]
    async fn a_confirm_step_the_task_allows_goes_on_to_the_next_action() {
        let task = Arc::new(FakeTask::new(confirming(SensitiveActions::Allow)));
        assert_eq!(Scripted.run(&run_of(&task)).await.expect("outcome"), ran(2));
        let kinds: Vec<&str> = task.emitted().iter().map(|e| e.kind.name()).collect();
        assert_eq!(kinds, ["action", "action_completed"], "the confirmation is no screen action");
    }

    #[tokio::test]
    async fn a_confirm_step_to_pause_on_waits_for_a_person_with_code_sensitive_action() {
        let task = Arc::new(FakeTask::new(confirming(SensitiveActions::Pause)));
        let run = run_of(&task);
        let waiting = tokio::time::timeout(Duration::from_millis(300), Scripted.run(&run)).await;
        assert!(waiting.is_err(), "no person answered: the task still waits");
        let emitted = task.emitted();
        assert_eq!(emitted.len(), 1, "{emitted:?}");
        assert_eq!(
            emitted[0].kind,
            EventKind::Waiting { code: "sensitive-action".into(), message: "approve or deny: send the payment".into() }
        );
    }

    #[tokio::test]
    async fn a_replay_runs_the_latest_attempts_actions_read_through_the_handle() {
        let original = TaskId::generate();
        let spec = TaskSpec { replay_of: Some(original.clone()), ..TaskSpec::default() };
        let fake = FakeTask::new(spec);
        let tenant = fake.tenant_id().clone();
        let recorded = [
            EventKind::Started { attempt: 1, worker: "w".into() },
            EventKind::ActionCompleted { action: Action::Wait { ms: 9 }, ms: 9 },
            EventKind::Started { attempt: 2, worker: "w".into() },
            EventKind::ActionCompleted { action: Action::Wait { ms: 1 }, ms: 1 },
        ];
        let events = recorded.into_iter().map(|kind| stored(&tenant, &original, kind)).collect();
        let task = Arc::new(fake.with_task(ended_task(&tenant, &original), events));
        let outcome = Scripted.run(&run_of(&task)).await.expect("outcome");
        assert_eq!(outcome, ran(1));
        assert_eq!(task.emitted()[0].kind, EventKind::Action { action: Action::Wait { ms: 1 } });
    }

    #[tokio::test]
    async fn a_replay_of_a_task_the_handle_does_not_find_ends_with_code_problem() {
        let spec = TaskSpec { replay_of: Some(TaskId::generate()), ..TaskSpec::default() };
        let task = Arc::new(FakeTask::new(spec));
        let error = Scripted.run(&run_of(&task)).await.expect_err("refused");
        assert!(matches!(&error, PipelineError::Fatal { code: StopCode::Problem, message } if message.contains("no such task")));
        assert!(task.emitted().is_empty());
    }
}
