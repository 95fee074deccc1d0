//! Replaying a trajectory (`replay_of`): every action a task performs is
//! recorded as an `action_completed` event in the sandbox's screen
//! coordinates, whichever pipeline chose it, so the actions of an ended
//! task's latest attempt can be run again by the scripted pipeline with no
//! model. The replay runs on a desktop shaped like the original's: the same
//! provider, template and resolution, since the recorded coordinates refer
//! to that screen.

use flotilla_types::action::Action;
use flotilla_types::event::{Event, EventKind};
use flotilla_types::ids::TaskId;
use flotilla_types::task::{SandboxSpec, StopCode};

use super::{PipelineError, TaskHandle};

/// What a replay runs: the recorded actions, on this sandbox.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Trajectory {
    pub actions: Vec<Action>,
    pub sandbox: Option<SandboxSpec>,
}

/// Loads the trajectory of task `id`: an ended task of the same tenant
/// whose latest attempt performed at least one action.
pub(super) async fn trajectory(task: &dyn TaskHandle, id: &TaskId) -> Result<Trajectory, PipelineError> {
    let not_replayable = |why: &str| PipelineError::Fatal { code: StopCode::Problem, message: format!("replay_of {id}: {why}") };
    let Some(original) = task.task_record(id).await? else {
        return Err(not_replayable("no such task"));
    };
    if !original.status.is_terminal() {
        return Err(not_replayable(&format!("the task is {}; only an ended task can be replayed", original.status)));
    }
    let events = task.events_after(id, 0).await?;
    let actions = latest_attempt_actions(&events);
    if actions.is_empty() {
        return Err(not_replayable("the task recorded no actions to replay"));
    }
    let sandbox =
        replay_sandbox(task.spec().sandbox.as_ref(), original.spec.sandbox.as_ref()).map_err(|why| not_replayable(&why))?;
    Ok(Trajectory { actions, sandbox })
}

/// The actions the latest attempt completed, in order: those after the
/// last `started` event. Events that do not parse are skipped.
fn latest_attempt_actions(events: &[String]) -> Vec<Action> {
    let mut actions = Vec::new();
    for raw in events {
        let Ok(event) = serde_json::from_str::<Event>(raw) else { continue };
        match event.kind {
            EventKind::Started { .. } => actions.clear(),
            EventKind::ActionCompleted { action, .. } => actions.push(action),
            _ => {}
        }
    }
    actions
}

/// The replay's own sandbox spec, with the original's provider, template
/// and resolution where it names none. A resolution other than the
/// original's is refused: the recorded coordinates would land elsewhere.
fn replay_sandbox(own: Option<&SandboxSpec>, original: Option<&SandboxSpec>) -> Result<Option<SandboxSpec>, String> {
    let Some(original) = original else {
        return Ok(own.cloned());
    };
    let mut spec = own.cloned().unwrap_or_default();
    if let (Some([w, h]), Some([ow, oh])) = (spec.resolution, original.resolution) {
        if (w, h) != (ow, oh) {
            return Err(format!("the task ran at {ow}x{oh} and its actions cannot be replayed at {w}x{h}"));
        }
    }
    spec.provider = spec.provider.or(original.provider);
    spec.template = spec.template.or_else(|| original.template.clone());
    spec.resolution = spec.resolution.or(original.resolution);
    Ok(Some(spec))
}

#[cfg(test)]
mod tests {
    use flotilla_types::action::MouseButton;
    use flotilla_types::ids::TenantId;

    use super::*;

    fn stored(seq: u64, kind: EventKind) -> String {
        let tenant = TenantId::parse("acme").expect("tenant");
        let event = Event { seq, task_id: TaskId::generate(), batch_id: None, tenant, ts: "2026-01-01T00:00:00Z".into(), kind };
        serde_json::to_string(&event).expect("event")
    }

    fn completed(action: Action) -> EventKind {
        EventKind::ActionCompleted { action, ms: 3 }
    }

    #[test]
    fn only_the_latest_attempts_completed_actions_are_replayed() {
        let click = Action::Click { x: 1, y: 2, button: MouseButton::Left };
        let typed = Action::Type { text: "ls\n".into() };
        let events = vec![
            stored(1, EventKind::Started { attempt: 1, worker: "w".into() }),
            stored(2, completed(click.clone())),
            stored(3, EventKind::Started { attempt: 2, worker: "w".into() }),
            stored(4, EventKind::Action { action: click.clone() }),
            stored(5, completed(click.clone())),
            "{not an event".to_owned(),
            stored(6, EventKind::Action { action: typed.clone() }),
            stored(7, completed(typed.clone())),
        ];
        assert_eq!(latest_attempt_actions(&events), vec![click, typed]);
        assert!(latest_attempt_actions(&events[..1]).is_empty());
    }

    #[test]
    fn a_replay_takes_the_originals_desktop_shape() {
        let original = SandboxSpec { template: Some("desktop".into()), resolution: Some([1280, 960]), ..SandboxSpec::default() };
        let taken = replay_sandbox(None, Some(&original)).expect("spec").expect("some");
        assert_eq!((taken.template.as_deref(), taken.resolution), (Some("desktop"), Some([1280, 960])));
        let own = SandboxSpec { timeout_s: Some(60), resolution: Some([1280, 960]), ..SandboxSpec::default() };
        let merged = replay_sandbox(Some(&own), Some(&original)).expect("spec").expect("some");
        assert_eq!((merged.timeout_s, merged.resolution), (Some(60), Some([1280, 960])));
        let other = SandboxSpec { resolution: Some([800, 600]), ..SandboxSpec::default() };
        let refused = replay_sandbox(Some(&other), Some(&original)).expect_err("refused");
        assert!(refused.contains("1280x960") && refused.contains("800x600"), "{refused}");
        assert_eq!(replay_sandbox(Some(&other), None).expect("spec"), Some(other));
        assert_eq!(replay_sandbox(None, None).expect("spec"), None);
    }
}
