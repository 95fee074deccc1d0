//! The task handle over a running attempt: the executor keeps the
//! [`Attempt`] (heartbeat, terminal writes, retries, requeues) and gives
//! its pipeline this, which forwards the handle's calls to the attempt's
//! fenced writes and to the queue's reads of the same tenant, and offers
//! nothing else.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use flotilla_config::TenantSettings;
use flotilla_queue::queue::{Attempt, Parked, TaskRecord};
use flotilla_queue::QueueError;
use flotilla_types::eval::Verdict;
use flotilla_types::eval_plan::RunPlace;
use flotilla_types::event::EventKind;
use flotilla_types::ids::{TaskId, TenantId};
use flotilla_types::task::{HumanInput, StopCode, TaskSpec};
use flotilla_types::usage::{Amount, Counted};
use futures::future::BoxFuture;
use futures::FutureExt;
use time::OffsetDateTime;

use crate::pipeline::TaskHandle;
use crate::sandbox::{SandboxId, SandboxOwners};

/// A [`TaskHandle`] over a running attempt.
pub struct AttemptHandle {
    attempt: Arc<Attempt>,
    /// Where the task sits in its batch's run plan.
    run: Option<RunPlace>,
    /// Whether the pipeline recorded a `passed` verdict.
    passed: AtomicBool,
}

impl AttemptHandle {
    pub fn new(attempt: Arc<Attempt>, run: Option<RunPlace>) -> Self {
        Self { attempt, run, passed: AtomicBool::new(false) }
    }

    /// Whether the task's check passed in this attempt.
    pub fn passed(&self) -> bool {
        self.passed.load(Ordering::Relaxed)
    }

    /// Where sandbox owners are recorded; made when a sandbox is, so that
    /// tasks without one pay nothing for it.
    fn owners(&self) -> SandboxOwners {
        self.attempt.queue().sandbox_owners()
    }
}

impl TaskHandle for AttemptHandle {
    fn spec(&self) -> &TaskSpec {
        &self.attempt.spec
    }

    fn task_id(&self) -> &TaskId {
        self.attempt.task_id()
    }

    fn tenant(&self) -> &TenantId {
        self.attempt.tenant()
    }

    fn attempt_number(&self) -> u32 {
        self.attempt.number
    }

    fn tenant_settings(&self) -> TenantSettings {
        self.attempt.queue().settings().tenants.get(self.tenant())
    }

    fn run_place(&self) -> Option<&RunPlace> {
        self.run.as_ref()
    }

    fn emit<'a>(&'a self, kind: EventKind, fields: &'a [(&'a str, String)]) -> BoxFuture<'a, Result<u64, QueueError>> {
        let passed = matches!(kind, EventKind::Checked { verdict: Verdict::Passed, .. });
        async move {
            let seq = self.attempt.emit(kind, fields).await?;
            if passed {
                self.passed.store(true, Ordering::Relaxed);
            }
            Ok(seq)
        }
        .boxed()
    }

    fn add_usage<'a>(&'a self, amounts: &'a [Amount]) -> BoxFuture<'a, Result<Counted, QueueError>> {
        self.attempt.add_usage(amounts).boxed()
    }

    fn wait_for_human<'a>(&'a self, code: StopCode, message: &'a str) -> BoxFuture<'a, Result<u64, QueueError>> {
        self.attempt.wait_for_human(code, message).boxed()
    }

    fn take_input(&self) -> BoxFuture<'_, Result<Option<HumanInput>, QueueError>> {
        self.attempt.take_input().boxed()
    }

    fn park(&self) -> BoxFuture<'_, Result<Parked, QueueError>> {
        self.attempt.park().boxed()
    }

    fn rejoin_wait(&self, code: StopCode) -> BoxFuture<'_, Result<(), QueueError>> {
        async move { self.attempt.set_fields(&[("status", "waiting".to_owned()), ("code", code.as_str().to_owned())]).await }
            .boxed()
    }

    fn journal(&self) -> BoxFuture<'_, Result<Option<String>, QueueError>> {
        self.attempt.journal().boxed()
    }

    fn write_journal<'a>(&'a self, journal: &'a str) -> BoxFuture<'a, Result<(), QueueError>> {
        self.attempt.write_journal(journal).boxed()
    }

    fn held_by_person(&self) -> BoxFuture<'_, Result<bool, QueueError>> {
        self.attempt.held_by_person().boxed()
    }

    fn task_record<'a>(&'a self, id: &'a TaskId) -> BoxFuture<'a, Result<Option<TaskRecord>, QueueError>> {
        self.attempt.queue().reader().get(self.tenant(), id).boxed()
    }

    fn events_after<'a>(&'a self, id: &'a TaskId, after: u64) -> BoxFuture<'a, Result<Vec<String>, QueueError>> {
        self.attempt.queue().reader().events_after(self.tenant(), id, after).boxed()
    }

    fn tenant_stored_before<'a>(&'a self, hash: &'a str) -> BoxFuture<'a, Result<bool, QueueError>> {
        self.attempt.queue().reader().tenant_stored_before(self.tenant(), hash).boxed()
    }

    fn record_sandbox_owner<'a>(
        &'a self,
        provider: &'a str,
        id: &'a SandboxId,
        until: OffsetDateTime,
    ) -> BoxFuture<'a, Result<(), QueueError>> {
        let owners = self.owners();
        async move { owners.record(provider, id.as_str(), self.tenant(), until).await }.boxed()
    }

    fn owns_sandbox<'a>(&'a self, provider: &'a str, id: &'a SandboxId) -> BoxFuture<'a, Result<bool, QueueError>> {
        let owners = self.owners();
        async move { owners.owned_by(provider, id.as_str(), self.tenant()).await }.boxed()
    }

    fn forget_sandbox_owner<'a>(&'a self, provider: &'a str, id: &'a SandboxId) -> BoxFuture<'a, Result<(), QueueError>> {
        let owners = self.owners();
        async move { owners.forget(provider, id.as_str()).await }.boxed()
    }

    fn keep_sandbox<'a>(&'a self, kept: &'a str, until_ms: i64) -> BoxFuture<'a, Result<(), QueueError>> {
        self.attempt.queue().runner().keep_sandbox(self.tenant(), kept, until_ms).boxed()
    }

    fn hold_kept_sandbox<'a>(&'a self, kept: &'a str, until_ms: i64) -> BoxFuture<'a, Result<(), QueueError>> {
        self.attempt.queue().runner().hold_kept_sandbox(self.tenant(), kept, until_ms).boxed()
    }

    fn forget_kept_sandbox<'a>(&'a self, kept: &'a str) -> BoxFuture<'a, Result<(), QueueError>> {
        self.attempt.queue().runner().forget_kept_sandbox(self.tenant(), kept).boxed()
    }
}
