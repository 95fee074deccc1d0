//! A task handle with no Redis behind it, for unit tests of pipeline
//! pieces: it keeps what a pipeline writes (events with their fields,
//! usage) in memory and answers reads from the tasks it was given. Its
//! meter stays empty, so no budget is ever crossed.

use std::collections::HashMap;
use std::sync::Mutex;

use flotilla_config::TenantSettings;
use flotilla_queue::queue::{Parked, TaskRecord};
use flotilla_queue::QueueError;
use flotilla_types::event::EventKind;
use flotilla_types::ids::{TaskId, TenantId};
use flotilla_types::task::{HumanInput, StopCode, TaskSpec};
use flotilla_types::usage::{Amount, Counted, DayTokens, Meter};
use futures::future::{self, BoxFuture};
use futures::FutureExt;
use time::OffsetDateTime;

use super::TaskHandle;
use crate::sandbox::SandboxId;

/// An event as the fake recorded it, with the task fields set beside it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Emitted {
    pub kind: EventKind,
    pub fields: Vec<(String, String)>,
}

/// A task handle kept in memory.
pub(crate) struct FakeTask {
    id: TaskId,
    tenant: TenantId,
    spec: TaskSpec,
    /// Other tasks of the tenant, with their stored events.
    others: HashMap<TaskId, (TaskRecord, Vec<String>)>,
    emitted: Mutex<Vec<Emitted>>,
    counted: Mutex<Vec<Amount>>,
    journal: Mutex<Option<String>>,
}

impl FakeTask {
    pub fn new(spec: TaskSpec) -> Self {
        let tenant = TenantId::parse("acme").expect("tenant");
        Self {
            id: TaskId::generate(),
            tenant,
            spec,
            others: HashMap::new(),
            emitted: Mutex::default(),
            counted: Mutex::default(),
            journal: Mutex::default(),
        }
    }

    /// Adds an earlier task of the same tenant, with its stored events.
    pub fn with_task(mut self, record: TaskRecord, events: Vec<String>) -> Self {
        self.others.insert(record.id.clone(), (record, events));
        self
    }

    pub fn tenant_id(&self) -> &TenantId {
        &self.tenant
    }

    /// The events emitted so far, in order.
    pub fn emitted(&self) -> Vec<Emitted> {
        self.emitted.lock().expect("events").clone()
    }

    /// The amounts counted so far, in order.
    pub fn counted(&self) -> Vec<Amount> {
        self.counted.lock().expect("usage").clone()
    }
}

fn ready<'a, T: Send + 'a>(value: T) -> BoxFuture<'a, Result<T, QueueError>> {
    future::ready(Ok(value)).boxed()
}

impl TaskHandle for FakeTask {
    fn spec(&self) -> &TaskSpec {
        &self.spec
    }

    fn task_id(&self) -> &TaskId {
        &self.id
    }

    fn tenant(&self) -> &TenantId {
        &self.tenant
    }

    fn attempt_number(&self) -> u32 {
        1
    }

    fn tenant_settings(&self) -> TenantSettings {
        TenantSettings::default()
    }

    fn emit<'a>(&'a self, kind: EventKind, fields: &'a [(&'a str, String)]) -> BoxFuture<'a, Result<u64, QueueError>> {
        let mut emitted = self.emitted.lock().expect("events");
        let fields = fields.iter().map(|(field, value)| ((*field).to_owned(), value.clone())).collect();
        emitted.push(Emitted { kind, fields });
        ready(emitted.len() as u64)
    }

    fn add_usage<'a>(&'a self, amounts: &'a [Amount]) -> BoxFuture<'a, Result<Counted, QueueError>> {
        self.counted.lock().expect("usage").extend(amounts.iter().cloned());
        ready(Counted { meter: Meter::default(), day: DayTokens::Left })
    }

    fn wait_for_human<'a>(&'a self, code: StopCode, message: &'a str) -> BoxFuture<'a, Result<u64, QueueError>> {
        let event = EventKind::Waiting { code: code.as_str().to_owned(), message: message.to_owned() };
        self.emit(event, &[])
    }

    fn take_input(&self) -> BoxFuture<'_, Result<Option<HumanInput>, QueueError>> {
        ready(None)
    }

    fn park(&self) -> BoxFuture<'_, Result<Parked, QueueError>> {
        ready(Parked::Parked)
    }

    fn rejoin_wait(&self, _code: StopCode) -> BoxFuture<'_, Result<(), QueueError>> {
        ready(())
    }

    fn journal(&self) -> BoxFuture<'_, Result<Option<String>, QueueError>> {
        ready(self.journal.lock().expect("journal").clone())
    }

    fn write_journal<'a>(&'a self, journal: &'a str) -> BoxFuture<'a, Result<(), QueueError>> {
        *self.journal.lock().expect("journal") = Some(journal.to_owned()).filter(|j| !j.is_empty());
        ready(())
    }

    fn held_by_person(&self) -> BoxFuture<'_, Result<bool, QueueError>> {
        ready(false)
    }

    fn task_record<'a>(&'a self, id: &'a TaskId) -> BoxFuture<'a, Result<Option<TaskRecord>, QueueError>> {
        ready(self.others.get(id).map(|(record, _)| record.clone()))
    }

    fn events_after<'a>(&'a self, id: &'a TaskId, after: u64) -> BoxFuture<'a, Result<Vec<String>, QueueError>> {
        let events = self.others.get(id).map(|(_, events)| events.iter().skip(after as usize).cloned().collect());
        ready(events.unwrap_or_default())
    }

    fn tenant_stored_before<'a>(&'a self, _hash: &'a str) -> BoxFuture<'a, Result<bool, QueueError>> {
        ready(false)
    }

    fn record_sandbox_owner<'a>(
        &'a self,
        _provider: &'a str,
        _id: &'a SandboxId,
        _until: OffsetDateTime,
    ) -> BoxFuture<'a, Result<(), QueueError>> {
        ready(())
    }

    fn owns_sandbox<'a>(&'a self, _provider: &'a str, _id: &'a SandboxId) -> BoxFuture<'a, Result<bool, QueueError>> {
        ready(false)
    }

    fn forget_sandbox_owner<'a>(&'a self, _provider: &'a str, _id: &'a SandboxId) -> BoxFuture<'a, Result<(), QueueError>> {
        ready(())
    }

    fn keep_sandbox<'a>(&'a self, _kept: &'a str, _until_ms: i64) -> BoxFuture<'a, Result<(), QueueError>> {
        ready(())
    }

    fn hold_kept_sandbox<'a>(&'a self, _kept: &'a str, _until_ms: i64) -> BoxFuture<'a, Result<(), QueueError>> {
        ready(())
    }

    fn forget_kept_sandbox<'a>(&'a self, _kept: &'a str) -> BoxFuture<'a, Result<(), QueueError>> {
        ready(())
    }
}
