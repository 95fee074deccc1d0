//! A person taking a task's desktop over and handing it back, on the API's
//! side. A takeover puts a running or waiting task in `waiting` with code
//! `human-intervention` and records `takeover`; the worker pauses after its
//! current action (see [`Attempt::held_by_person`](super::Attempt::held_by_person)).
//! A release records `released` and leaves the person's message as the
//! task's input, which the worker takes up to go on.
//!
//! Invariant: while `takeover` is set on a task, `/input` is refused and
//! the worker hands out no input; only a release ends the hold.

use super::scripts;
use super::Submitter;
use crate::error::QueueError;
use flotilla_types::clock;
use flotilla_types::event::{draft, EventKind};
use flotilla_types::ids::{TaskId, TenantId};
use flotilla_types::task::{Decision, HumanInput};

/// What a takeover request did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takeover {
    /// The person holds the desktop now.
    Taken,
    /// A person held it already; nothing changed.
    AlreadyHeld,
}

impl Submitter<'_> {
    /// Takes a tenant's running or waiting task over for a person.
    pub async fn take_over(self, tenant: &TenantId, id: &TaskId) -> Result<Takeover, QueueError> {
        let mut conn = self.redis.shared();
        let mut inv = self.task_invocation(&scripts::TAKEOVER, id, &draft(EventKind::Takeover {}), clock::now_ms());
        inv.arg(tenant.as_str());
        let answer: String = inv.invoke_async(&mut conn).await?;
        if self.wake_if_unparked(tenant, id, &answer).await? {
            return Ok(Takeover::Taken);
        }
        match answer.as_str() {
            "taken" => Ok(Takeover::Taken),
            "held" => Ok(Takeover::AlreadyHeld),
            "missing" => Err(QueueError::NotFound),
            status => Err(QueueError::WrongStatus(status.to_owned())),
        }
    }

    /// Hands a taken-over task back to its agent with the person's message.
    pub async fn hand_back(self, tenant: &TenantId, id: &TaskId, message: Option<String>) -> Result<(), QueueError> {
        let mut conn = self.redis.shared();
        let input = HumanInput { decision: Decision::Approve, message: message.clone() };
        let json = serde_json::to_string(&input).map_err(|e| QueueError::Corrupt(e.to_string()))?;
        let mut inv = self.task_invocation(&scripts::RELEASE, id, &draft(EventKind::Released { message }), clock::now_ms());
        inv.arg(tenant.as_str()).arg(json);
        let answer: String = inv.invoke_async(&mut conn).await?;
        match answer.as_str() {
            "released" => Ok(()),
            "missing" => Err(QueueError::NotFound),
            status => Err(QueueError::WrongStatus(status.to_owned())),
        }
    }
}
