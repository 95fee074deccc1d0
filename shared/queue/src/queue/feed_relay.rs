//! The tenant feeds on a Redis Cluster, where a task script cannot append
//! to its tenant's feed stream (the stream lives in another slot than the
//! task). There the API's event hub hands every event it hears on the
//! tenants' channels to [`Housekeeper::relay_to_feed`], which appends it to the
//! feed in a script of the feed's own slot.
//!
//! Once, in order: beside the feed, a marker per task (`…:fed:<task id>`,
//! kept for the retention) holds the seq of the task's last event appended.
//! The script appends only events past it, so any number of API processes
//! relay the same events and each lands once. A task's events are published
//! in seq order from one node; when one arrives past a gap (the relay missed
//! some while its subscription was being renewed), the missing ones are
//! read from the task's hash and appended first.
//!
//! What is still lost: an event missed while no API process was subscribed,
//! when no later event of its task follows (a task's last event). The task
//! hash and the task's own stream keep it.

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::Script;
use serde::Deserialize;

use super::Housekeeper;
use super::Queue;
use crate::error::QueueError;
use crate::keys::event_field;
use crate::redis_lua;
use flotilla_types::ids::{TaskId, TenantId};

/// Appends a task's events to its tenant's feed, those past the task's
/// marker only. `KEYS` the feed stream, the task's marker; `ARGV` the
/// retention (ms), `check` or `fill`, then seq, event pairs in seq order.
/// With `check`, a first seq past the marker plus one is a gap: nothing is
/// appended and `-1 - marker` is returned. Else returns the new marker.
pub(crate) static APPEND: LazyLock<Script> = LazyLock::new(|| redis_lua::script(&[include_str!("lua/feed_append.lua")], &[]));

/// The fields of an event the relay needs.
#[derive(Debug, Deserialize)]
struct Head {
    seq: u64,
    task_id: String,
}

/// One task's events heard together, in seq order.
#[derive(Debug, Default)]
pub struct TaskEvents {
    events: Vec<(u64, String)>,
}

/// Events heard on the tenants' channels, grouped by task so each task's
/// go in one call and different tasks' go side by side.
#[derive(Debug, Default)]
pub struct Heard {
    tasks: HashMap<(TenantId, TaskId), TaskEvents>,
}

impl Heard {
    /// Adds an event of `tenant` as published; events that name no task or
    /// seq are not feed events and are left out.
    pub fn add(&mut self, tenant: TenantId, event: &str) {
        let Ok(head) = serde_json::from_str::<Head>(event) else { return };
        let Ok(task) = TaskId::parse(&head.task_id) else { return };
        self.tasks.entry((tenant, task)).or_default().events.push((head.seq, event.to_owned()));
    }

    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }
}

impl Queue {
    async fn relay_task(&self, tenant: &TenantId, task: &TaskId, events: Vec<(u64, String)>) -> Result<(), QueueError> {
        let Some(first) = events.first().map(|(seq, _)| *seq) else { return Ok(()) };
        let marker = self.append_to_feed(tenant, task, "check", &events).await?;
        if marker >= 0 {
            return Ok(());
        }
        let last = (-1 - marker) as u64;
        let fields: Vec<String> = (last + 1..first).map(event_field).collect();
        let mut filled: Vec<(u64, String)> = Vec::with_capacity(fields.len() + events.len());
        if !fields.is_empty() {
            let mut conn = self.redis.shared();
            let missing: Vec<Option<String>> =
                redis::cmd("HMGET").arg(self.keys.task(task)).arg(&fields).query_async(&mut conn).await?;
            filled.extend((last + 1..first).zip(missing).filter_map(|(seq, event)| Some((seq, event?))));
        }
        filled.extend(events);
        self.append_to_feed(tenant, task, "fill", &filled).await?;
        Ok(())
    }

    async fn append_to_feed(
        &self,
        tenant: &TenantId,
        task: &TaskId,
        mode: &str,
        events: &[(u64, String)],
    ) -> Result<i64, QueueError> {
        let mut inv = APPEND.prepare_invoke();
        inv.key(self.keys.tenant_feed(tenant)).key(self.keys.tenant_feed_marker(tenant, task));
        inv.arg(self.retention_ms()).arg(mode);
        for (seq, event) in events {
            inv.arg(*seq).arg(event);
        }
        Ok(inv.invoke_async(&mut self.redis.shared()).await?)
    }
}

impl Housekeeper<'_> {
    /// Appends what was heard to the tenants' feeds (see the module doc).
    pub async fn relay_to_feed(self, heard: Heard) -> Result<(), QueueError> {
        let calls = heard.tasks.into_iter().map(|((tenant, task), mut events)| async move {
            events.events.sort_by_key(|(seq, _)| *seq);
            self.relay_task(&tenant, &task, events.events).await
        });
        let results = futures::future::join_all(calls).await;
        results.into_iter().collect()
    }
}
