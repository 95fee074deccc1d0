//! Kept-alive sandboxes against `max_sandboxes`: a sandbox a task left
//! running for later tasks (`sandbox.keep_alive`) holds one of its tenant's
//! sandbox slots until its deadline, or until it is found gone.
//!
//! The slot is the scheduler's own `sandboxed` count in the tenant's hash,
//! the count the claim holds against `maxsb` (see [`super::fair_scripts`]):
//! [`KEEP`] raises it when a sandbox is kept, and it comes down when the
//! sandbox's deadline passes (the promoter's pass, [`super::fair_scripts::PROMOTE`])
//! or when the sandbox is found gone ([`FORGET`]). A later task of the
//! tenant that names the sandbox (`sandbox.id`) starts none: its route is
//! marked `+id` (see [`flotilla_types::route`]), takes no slot of its own and is
//! never held back by `maxsb`. While it runs, the kept slot is its slot:
//! [`KEEP`] in `hold` mode moves the deadline up to the latest the task may
//! keep the sandbox alive, and when the task leaves it the sandbox is kept
//! again with its real deadline. The shard's `kept` sorted set holds
//! `<tenant>:<provider>:<sandbox id>` by the deadline (epoch ms).
//!
//! Invariant: a tenant's `sandboxed` is its entries running on routes that
//! hold a sandbox slot plus its members of `kept`, each kept sandbox
//! counted once, whether a task runs in it or not.

use std::sync::LazyLock;

use redis::Script;

use super::fair_scripts::fair_script;
use super::Queue;
use super::Runner;
use crate::error::QueueError;
use flotilla_types::ids::TenantId;

/// Keeps a sandbox for a tenant until a deadline, raising its `sandboxed`
/// count the first time. `KEYS[1]` the shard's `sched`; `ARGV[1]` the
/// shard base, `ARGV[2]` the tenant, `ARGV[3]` `<provider>:<sandbox id>`,
/// `ARGV[4]` the deadline (epoch ms), `ARGV[5]` `hold` to only ever move
/// the deadline later (a task runs in the sandbox), else `set`. Returns 1
/// when newly kept.
pub(crate) static KEEP: LazyLock<Script> = LazyLock::new(|| fair_script(include_str!("lua/keep_sandbox.lua")));

/// A kept sandbox was found gone before its deadline: its slot comes back
/// now. Keys and arguments as [`KEEP`] without the deadline. Returns 1 when
/// the sandbox was kept.
pub(crate) static FORGET: LazyLock<Script> = LazyLock::new(|| fair_script(include_str!("lua/forget_sandbox.lua")));

/// What [`KEEP`] does with the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeepMode {
    /// The sandbox's deadline now (its task left it).
    Set,
    /// A task runs in the sandbox: the deadline only moves later.
    Hold,
}

impl Queue {
    async fn kept_call(
        &self,
        script: &Script,
        tenant: &TenantId,
        sandbox: &str,
        until: Option<(i64, KeepMode)>,
    ) -> Result<(), QueueError> {
        let mut inv = self.shard_call(script, self.keys.shard_of(tenant));
        inv.arg(tenant.as_str()).arg(sandbox);
        if let Some((until_ms, mode)) = until {
            inv.arg(until_ms).arg(if mode == KeepMode::Hold { "hold" } else { "set" });
        }
        let mut conn = self.redis.shared();
        let _: i64 = inv.invoke_async(&mut conn).await?;
        Ok(())
    }
}

impl Runner<'_> {
    /// Counts a kept-alive sandbox against its tenant's `max_sandboxes`
    /// until `until_ms` (its deadline, epoch ms); keeping it again moves
    /// the deadline.
    pub async fn keep_sandbox(self, tenant: &TenantId, sandbox: &str, until_ms: i64) -> Result<(), QueueError> {
        self.kept_call(&KEEP, tenant, sandbox, Some((until_ms, KeepMode::Set))).await
    }

    /// A task of `tenant` runs in the sandbox it names, which it may keep
    /// alive until `until_ms`: the sandbox's one slot (kept, or counted now
    /// when it was not) lasts at least that long.
    pub async fn hold_kept_sandbox(self, tenant: &TenantId, sandbox: &str, until_ms: i64) -> Result<(), QueueError> {
        self.kept_call(&KEEP, tenant, sandbox, Some((until_ms, KeepMode::Hold))).await
    }

    /// The sandbox was found gone: it no longer counts as kept.
    pub async fn forget_kept_sandbox(self, tenant: &TenantId, sandbox: &str) -> Result<(), QueueError> {
        self.kept_call(&FORGET, tenant, sandbox, None).await
    }
}
