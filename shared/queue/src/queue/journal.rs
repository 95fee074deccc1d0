//! A task's step journal: what a later attempt needs to take the task up
//! where an interrupted one stopped (the sandbox, the model conversation,
//! the steps taken and the state of each action in flight). The queue
//! keeps it as one opaque, size-bounded value in the task's own hash (field
//! `journal`), so it lives on the task's cluster slot and goes when the
//! task's hash goes; what it holds is the worker's business.
//!
//! Invariant: only the attempt that owns the task writes its journal (the
//! same fence as every attempt write), so an attempt that lost its task can
//! never overwrite what its successor journals. A journal past
//! [`JOURNAL_MAX_BYTES`] is refused whole and the stored one is kept.

use std::sync::LazyLock;

use redis::{AsyncCommands, Script};

use super::Attempt;
use crate::error::QueueError;
use crate::redis_lua;

/// The largest journal kept, in bytes.
pub const JOURNAL_MAX_BYTES: usize = 256 * 1024;

/// The task hash field holding the journal.
const JOURNAL_FIELD: &str = "journal";

/// Writes (or, given an empty value, clears) the owning attempt's journal.
/// `KEYS[1]` the task hash; `ARGV[1]` attempt, `ARGV[2]` worker id,
/// `ARGV[3]` the journal. Returns `ok`, `fenced` or `too_large`.
pub static JOURNAL: LazyLock<Script> =
    LazyLock::new(|| redis_lua::script(&[include_str!("lua/journal.lua")], &[("JOURNAL_MAX_BYTES", &JOURNAL_MAX_BYTES)]));

impl Attempt {
    /// Replaces the task's journal with `journal`, as this attempt.
    pub async fn write_journal(&self, journal: &str) -> Result<(), QueueError> {
        let mut conn = self.queue().redis.shared();
        let answer: String = JOURNAL
            .key(self.queue().keys.task(self.task_id()))
            .arg(self.number)
            .arg(self.worker())
            .arg(journal)
            .invoke_async(&mut conn)
            .await?;
        match answer.as_str() {
            "ok" => Ok(()),
            "fenced" => Err(QueueError::Fenced),
            _ => Err(QueueError::Corrupt(format!(
                "a journal of {} bytes is over the {JOURNAL_MAX_BYTES} bytes kept",
                journal.len()
            ))),
        }
    }

    /// Drops the task's journal, as this attempt (a restart begins anew).
    pub async fn clear_journal(&self) -> Result<(), QueueError> {
        self.write_journal("").await
    }

    /// The journal an earlier attempt left, if any.
    pub async fn journal(&self) -> Result<Option<String>, QueueError> {
        let mut conn = self.queue().redis.shared();
        Ok(conn.hget(self.queue().keys.task(self.task_id()), JOURNAL_FIELD).await?)
    }
}
