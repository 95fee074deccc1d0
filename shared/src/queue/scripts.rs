//! The Lua scripts that change a task. Each runs atomically inside Redis and
//! touches only keys of one task (its hash and event list, one cluster slot)
//! or only keys of the queue (`{q}`).
//!
//! Task scripts share one argument layout so they share one prelude:
//! `KEYS[1]` the task hash, `KEYS[2]` its event list; `ARGV[1]` the channel
//! prefix (`<prefix>:events:`), `ARGV[2]` the task id, `ARGV[3]` the event
//! draft (`{"ts": …, "type": …, …}`), `ARGV[4]` now in epoch ms; what follows
//! is the script's own. The task hash keeps `hdr`, the JSON fields every
//! event of the task repeats (`task_id`, `batch_id`, `tenant`), so a worker
//! can write an event without reading the task first.
//!
//! Fencing: a worker's write carries its attempt number and worker id; the
//! script refuses it unless the task's current `attempt` and `owner` are
//! still the caller's. A worker that was presumed dead and comes back can
//! therefore change nothing.

use std::sync::LazyLock;

use redis::Script;

/// Shared helpers of the task scripts.
const PRELUDE: &str = r#"
local function emit(meta, draft, extra)
  local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
  local event = '{"seq":' .. seq .. ',' .. extra .. meta[1] .. ',' .. string.sub(draft, 2)
  redis.call('RPUSH', KEYS[2], event)
  redis.call('PUBLISH', ARGV[1] .. 'task:' .. ARGV[2], event)
  if meta[3] and meta[3] ~= '' then redis.call('PUBLISH', ARGV[1] .. 'batch:' .. meta[3], event) end
  redis.call('PUBLISH', ARGV[1] .. 'tenant:' .. meta[2], event)
  return seq
end
local function meta_of()
  return redis.call('HMGET', KEYS[1], 'hdr', 'tenant', 'batch')
end
local function is_terminal(status)
  return status == 'succeeded' or status == 'failed' or status == 'cancelled'
end
local function owns(cur, attempt, owner)
  return cur[1] == attempt and cur[2] == owner and (cur[3] == 'running' or cur[3] == 'waiting')
end
local function expire_after(retention_ms)
  redis.call('PEXPIRE', KEYS[1], retention_ms)
  redis.call('PEXPIRE', KEYS[2], retention_ms)
end
local function set_pairs(from)
  if #ARGV >= from + 1 then redis.call('HSET', KEYS[1], unpack(ARGV, from)) end
end
"#;

fn task_script(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}\n{body}"))
}

/// Creates a task and its `queued` event. `ARGV[5..]`: field/value pairs,
/// which must include `hdr`, `tenant` and `batch`.
/// Returns 1, or 0 if the id is taken.
pub static CREATE: LazyLock<Script> = LazyLock::new(|| {
    task_script(
        r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
set_pairs(5)
emit(meta_of(), ARGV[3], '')
return 1
"#,
    )
});

/// Starts the next attempt of a delivered task.
/// `ARGV[5]` worker id, `ARGV[6]` lease deadline, `ARGV[7]` draft of the
/// `cancelled` event, `ARGV[8]` draft of the `failed` event for spent
/// attempts, `ARGV[9]` retention ms.
/// Returns `{'started', attempt, spec, tenant, batch}`, or `{'gone'}`,
/// `{'terminal'}`, `{'waiting'}`, `{'cancelled'}`, `{'dead', attempt, tenant}`.
pub static START: LazyLock<Script> = LazyLock::new(|| {
    task_script(
        r#"
local st = redis.call('HMGET', KEYS[1], 'status', 'attempt', 'max_attempts', 'cancel', 'hdr', 'tenant', 'batch', 'spec')
if not st[1] then return {'gone'} end
if is_terminal(st[1]) then return {'terminal'} end
if st[1] == 'waiting' then return {'waiting'} end
local meta = {st[5], st[6], st[7]}
if st[4] == '1' then
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'code', 'cancelled', 'finished_at', ARGV[4], 'owner', '')
  emit(meta, ARGV[7], '')
  expire_after(ARGV[9])
  return {'cancelled'}
end
local attempt = tonumber(st[2]) + 1
if attempt > tonumber(st[3]) then
  redis.call('HSET', KEYS[1], 'status', 'failed', 'code', 'problem', 'finished_at', ARGV[4], 'owner', '',
    'error', 'attempts exhausted: the worker running the last attempt stopped responding')
  emit(meta, ARGV[8], '')
  expire_after(ARGV[9])
  return {'dead', tostring(attempt - 1), st[6]}
end
if st[2] == '0' then
  redis.call('HSET', KEYS[1], 'status', 'running', 'attempt', attempt, 'owner', ARGV[5], 'lease_until', ARGV[6], 'started_at', ARGV[4])
else
  redis.call('HSET', KEYS[1], 'status', 'running', 'attempt', attempt, 'owner', ARGV[5], 'lease_until', ARGV[6])
end
emit(meta, ARGV[3], '"attempt":' .. attempt .. ',')
return {'started', tostring(attempt), st[8], st[6], st[7] or ''}
"#,
    )
});

/// Renews a running attempt's lease. `KEYS[1]` the task hash; `ARGV[1]`
/// attempt, `ARGV[2]` worker id, `ARGV[3]` lease deadline.
/// Returns `ok`, `cancel` (a cancel was asked for) or `fenced`.
pub static HEARTBEAT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local cur = redis.call('HMGET', KEYS[1], 'attempt', 'owner', 'status', 'cancel')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then return 'fenced' end
if cur[3] ~= 'running' and cur[3] ~= 'waiting' then return 'fenced' end
if cur[4] == '1' then return 'cancel' end
redis.call('HSET', KEYS[1], 'lease_until', ARGV[3])
return 'ok'
"#,
    )
});

/// Appends a progress event of the owning attempt. `ARGV[5]` attempt,
/// `ARGV[6]` worker id, `ARGV[7..]` field/value pairs to set.
/// Returns the event's seq, or -1 when fenced.
pub static EMIT: LazyLock<Script> = LazyLock::new(|| {
    task_script(
        r#"
local cur = redis.call('HMGET', KEYS[1], 'attempt', 'owner', 'status', 'hdr', 'tenant', 'batch')
if not owns(cur, ARGV[5], ARGV[6]) then return -1 end
set_pairs(7)
return emit({cur[4], cur[5], cur[6]}, ARGV[3], '')
"#,
    )
});

/// Ends the owning attempt and the task. `ARGV[5]` attempt, `ARGV[6]` worker
/// id, `ARGV[7]` retention ms, `ARGV[8..]` field/value pairs (status, code,
/// result or error). Returns the terminal event's seq, or -1 when fenced.
pub static FINISH: LazyLock<Script> = LazyLock::new(|| {
    task_script(
        r#"
local cur = redis.call('HMGET', KEYS[1], 'attempt', 'owner', 'status', 'hdr', 'tenant', 'batch', 'cancel')
if not owns(cur, ARGV[5], ARGV[6]) then return -1 end
set_pairs(8)
redis.call('HSET', KEYS[1], 'finished_at', ARGV[4], 'owner', '')
if cur[7] then redis.call('HDEL', KEYS[1], 'cancel') end
local seq = emit({cur[4], cur[5], cur[6]}, ARGV[3], '')
expire_after(ARGV[7])
return seq
"#,
    )
});

/// Hands the owning attempt's task back to be retried later. `ARGV[5]`
/// attempt, `ARGV[6]` worker id, `ARGV[7..]` field/value pairs.
/// Returns the `retrying` event's seq, or -1 when fenced.
pub static RETRY: LazyLock<Script> = LazyLock::new(|| {
    task_script(
        r#"
local cur = redis.call('HMGET', KEYS[1], 'attempt', 'owner', 'status', 'hdr', 'tenant', 'batch')
if not owns(cur, ARGV[5], ARGV[6]) then return -1 end
set_pairs(7)
redis.call('HSET', KEYS[1], 'status', 'queued', 'owner', '')
return emit({cur[4], cur[5], cur[6]}, ARGV[3], '')
"#,
    )
});

/// A user's cancel. `ARGV[5]` the caller's tenant, `ARGV[6]` retention ms.
/// Returns `missing`, `now-cancelled` (it was queued and now is cancelled),
/// `cancelling` (a worker holds it and will stop it), or the terminal status
/// it already had.
pub static CANCEL: LazyLock<Script> = LazyLock::new(|| {
    task_script(
        r#"
local cur = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'hdr', 'batch')
if not cur[1] or cur[2] ~= ARGV[5] then return 'missing' end
if is_terminal(cur[1]) then return cur[1] end
if cur[1] == 'queued' then
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'code', 'cancelled', 'finished_at', ARGV[4])
  emit({cur[3], cur[2], cur[4]}, ARGV[3], '')
  expire_after(ARGV[6])
  return 'now-cancelled'
end
redis.call('HSET', KEYS[1], 'cancel', '1')
return 'cancelling'
"#,
    )
});

/// Puts a dead-lettered task back in the queue with fresh attempts. `ARGV[5]`
/// the caller's tenant. Returns `requeued`, `missing`, or the status it had.
pub static REVIVE: LazyLock<Script> = LazyLock::new(|| {
    task_script(
        r#"
local cur = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'hdr', 'batch')
if not cur[1] or cur[2] ~= ARGV[5] then return 'missing' end
if cur[1] ~= 'failed' then return cur[1] end
redis.call('HSET', KEYS[1], 'status', 'queued', 'attempt', 0, 'owner', '')
redis.call('HDEL', KEYS[1], 'code', 'error', 'finished_at', 'cancel')
redis.call('PERSIST', KEYS[1])
redis.call('PERSIST', KEYS[2])
emit({cur[3], cur[2], cur[4]}, ARGV[3], '')
return 'requeued'
"#,
    )
});

/// Moves due task ids from a lane's due set into its stream. `KEYS[1]` the
/// due set, `KEYS[2]` the lane; `ARGV[1]` now, `ARGV[2]` the most to move.
/// Returns how many moved.
pub static PROMOTE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local ids = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  redis.call('XADD', KEYS[2], '*', 't', id)
end
if #ids > 0 then redis.call('ZREM', KEYS[1], unpack(ids)) end
return #ids
"#,
    )
});
