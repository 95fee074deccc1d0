//! `plan: true` tasks, journaled: the planner splits the task into steps
//! (before any desktop is taken, or after the task's `setup` when it has
//! one), the planned application is opened, and each step runs as its own
//! conversation on the same desktop, announced with `step_started`.
//!
//! Once the application is open the journal holds the plan, the step under
//! way and the answers of the steps done, beside the step's conversation.
//! An attempt that takes the task up (see [`resume`](super::resume)) does
//! not plan again nor open the application again: it goes on with the
//! step under way, in its conversation, and runs the steps after it. A
//! stopping worker hands the task back between two steps as between two
//! turns. A step's wait for a person may park the task (see
//! [`parked`](super::parked)); the answer that wakes it goes to that step.

use std::sync::Arc;

use serde_json::json;

use super::super::journal::{Journal, Journaler};
use super::super::open_app;
use super::super::planner::{self, Planned};
use super::super::{Outcome, PipelineError, Session, Steps, TaskRun};
use super::parked::Answer;
use super::resume::{self, Start};
use super::{close_journaled, usage_json, ComputerUse, Journaled};
use crate::model::Usage;

/// How a planned run begins its steps.
enum PlanStart {
    /// With no plan yet, or the one made before the sandbox was taken.
    New(Option<Planned>),
    /// From an interrupted (or parked) attempt's journal, with the answer
    /// a parked task was woken by.
    Resumed(Box<Journal>, Option<Answer>),
}

impl ComputerUse {
    /// Runs a `plan: true` task, taken up from its journal when an earlier
    /// attempt was interrupted after the plan was made.
    pub(super) async fn run_planned(&self, run: &TaskRun, steps: Steps) -> Result<Outcome, PipelineError> {
        let start = match resume::journal_of(run).await?.filter(|journal| journal.plan.is_some()) {
            Some(journal) => resume::start(run, steps, journal).await?,
            None => Start::Fresh(steps),
        };
        let (mut session, start) = match start {
            Start::Resumed(session, journal, answer) => (*session, PlanStart::Resumed(Box::new(journal), answer)),
            Start::Fresh(steps) => {
                let spec = run.task.spec();
                // A set-up runs before any model call, the planner's too:
                // the sandbox is taken first.
                let planned = match spec.setup {
                    Some(_) => None,
                    None => Some(self.plan(run, &steps).await?),
                };
                (Session::open_with(run, steps, spec.sandbox.as_ref()).await?, PlanStart::New(planned))
            }
        };
        session.steps_mut().journaled(run.hand_back.clone());
        session.allow_parking(run);
        let result = self.execute(run, &mut session, start).await;
        close_journaled(run, session, result).await
    }

    /// The planner's plan of a `plan: true` task, its tokens counted.
    async fn plan(&self, run: &TaskRun, steps: &Steps) -> Result<Planned, PipelineError> {
        let apps = open_app::app_names(run);
        let planned = planner::plan(&run.task.spec().prompt, &apps, steps, &*self.models.planner(run)?).await?;
        steps.count(&[run.tools.pricing.tokens(&self.models.model(run), planned.usage.counts())]).await?;
        Ok(planned)
    }

    /// The plan and its journal: a new plan (made now when it was not
    /// yet), its application opened and its journal begun; or the
    /// journaled one, with the answer a parked task was woken by.
    async fn journaled_plan(
        &self,
        run: &TaskRun,
        session: &Session,
        start: PlanStart,
    ) -> Result<(Planned, Journaler, Option<Answer>), PipelineError> {
        let blobs = run.tools.blobs.clone();
        match start {
            PlanStart::New(planned) => {
                let planned = match planned {
                    Some(planned) => planned,
                    None => self.plan(run, session.steps()).await?,
                };
                open_app::open_planned(run, session, &planned.plan.application).await?;
                let journal = Journal::planned(session.journaled_sandbox()?, &planned);
                Ok((planned, Journaler::begin(Arc::clone(&run.task), blobs, journal).await?, None))
            }
            PlanStart::Resumed(journal, answer) => {
                let progress =
                    journal.plan.as_ref().ok_or_else(|| PipelineError::Retryable("the journal holds no plan".into()))?;
                Ok((progress.planned(), Journaler::new(Arc::clone(&run.task), blobs, *journal), answer))
            }
        }
    }

    /// Runs the plan's steps in order from the one under way, one
    /// conversation each; the result's text is the last step's answer,
    /// `steps` holds every step's.
    async fn execute(&self, run: &TaskRun, session: &mut Session, start: PlanStart) -> Result<Outcome, PipelineError> {
        let (planned, mut journaler, mut answer) = self.journaled_plan(run, session, start).await?;
        let mut surface = self.surface(session).await?;
        let mut usage: Usage = journaler.journal().usage.into();
        let journal = journaler.journal();
        let (done, mut answers) = journal.plan.as_ref().map_or((0, Vec::new()), |p| (p.step as usize, p.answers.clone()));
        if journal.conversation.is_none() && journal.calls.is_empty() {
            // The step under way had not begun its conversation: it begins.
            journaler.took_up();
        }
        for (index, step) in planned.plan.steps.iter().enumerate().skip(done) {
            if !journaler.taking_up() {
                // A stopping worker hands the task back between two steps.
                session.steps().between_steps()?;
                if run.hand_back.is_cancelled() {
                    return Err(PipelineError::HandedBack);
                }
                planner::start_step(run.task.as_ref(), index, step).await?;
            }
            let prompt = planner::step_prompt(&run.task.spec().prompt, &planned, index);
            // The answer that woke a parked task goes to the step it waited in.
            let journaled = Journaled { journaler: &mut journaler, answer: answer.take() };
            let text = self.converse(run, session, &mut surface, &prompt, &mut usage, Some(journaled)).await?;
            journaler.plan_step_done(text.clone(), session.steps().taken(), usage).await?;
            answers.push(text);
        }
        let text = answers.last().cloned().unwrap_or_default();
        Ok(Outcome::Succeeded(json!({ "text": text, "steps": answers, "usage": usage_json(usage) })))
    }
}
