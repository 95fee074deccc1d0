//! The Lua scripts that change a task. Each runs atomically inside Redis and
//! touches only the key of one task (its hash) or only keys of the queue
//! (`{q}`), except the two single-server scripts that say so.
//!
//! A task is one hash: its fields, and its event history, event `n` under
//! the field `e:<n>` beside `seq`, the last one's number. Keeping the
//! history in the hash means a change and the event reporting it are one
//! `HSET`, and a finished task expires with one `PEXPIRE`; Redis spends far
//! more on each command a script calls than on its arguments.
//!
//! Task scripts share a prelude. `ARGV[1]` is always the channel prefix
//! (`<prefix>:events:`), with a `+` after it on a single server, where each
//! event also goes to its tenant's feed stream (`<prefix>:events:feed:{tenant}`). Scripts on one task take `KEYS[1]` the task hash,
//! `ARGV[2]` the task id, `ARGV[3]` the event draft (`{"ts": …, "type": …,
//! …}`) and `ARGV[4]` now in epoch ms. The hot-path scripts (create, start,
//! finish) take many tasks at once: a key per task and a fixed group of
//! arguments per task, so one call serves a whole batch. The task hash keeps
//! `hdr`, the JSON fields every event of the task repeats (`task_id`,
//! `batch_id`, `tenant`).
//!
//! Fencing: a worker's write carries its attempt number and worker id; the
//! script refuses it unless the task's current `attempt` and `owner` are
//! still the caller's. A worker that was presumed dead and comes back can
//! therefore change nothing.

use std::sync::LazyLock;

use redis::Script;

/// Shared helpers of the task scripts. A task comes as two arguments, its
/// hash `key` and its `id` (a table per task would cost Redis an allocation
/// and its collection). `record` sets the field, value pairs it is given
/// after `body` (as arguments, not a table, for the same reason), `seq` and the
/// event `{"seq":<seq>,<body>` in one `HSET`, appends it to the tenant's
/// feed stream when `ARGV[1]` ends in `+` (see `Keys::script_channels`),
/// then publishes the event on the task's, batch's and tenant's channels
/// (inside `holding_feed` only on those someone can hear: `heard`);
/// `body` is the header and the draft's fields (`with_hdr`). Inside
/// `holding_feed` the appends wait for the end of the call and go in as one
/// entry per tenant, one event a field (see `super::feed`). Sequence and
/// attempt numbers stay strings in the scripts: turning a Lua number into
/// text costs more than it seems.
pub(super) const PRELUDE: &str = r#"
local CHANNELS = ARGV[1]
local FEED = string.byte(CHANNELS, -1) == 43
if FEED then CHANNELS = string.sub(CHANNELS, 1, -2) end
-- A tenant's feed stream and channel, made once per call.
local TENANT_KEYS = {}
local function tenant_keys(tenant)
  local k = TENANT_KEYS[tenant]
  if not k then
    k = {CHANNELS .. 'feed:{' .. tenant .. '}', CHANNELS .. 'tenant:' .. tenant}
    TENANT_KEYS[tenant] = k
  end
  return k
end
-- Set by `holding_feed`: the tenants (their `tenant_keys`) whose events
-- wait in `keys[3]` for `append_held`.
local FEED_HELD
-- Who can hear a call's events: `true` (any channel may have a listener),
-- `false` (no channel has one) or the set of channels with a subscriber.
-- Outside `holding_feed`, and on a cluster (a `PUBLISH` reaches the other
-- nodes' subscribers), with a pattern subscribed or with a replica (whose
-- clients may subscribe there), always `true`; likewise when the caller's
-- Redis user may not ask (`PUBSUB`, `INFO replication`). Else what `PUBSUB
-- CHANNELS` lists when the call first publishes. A script runs alone, so
-- whoever subscribed before it is in that list and nobody subscribes
-- during it: leaving out a `PUBLISH` nobody hears changes nothing anyone
-- sees.
local HEARD
local MAX_LISTED = 1000
local function asked(...)
  local reply = redis.pcall(...)
  if type(reply) == 'table' and reply.err then return nil end
  return reply
end
local function heard()
  if HEARD ~= nil then return HEARD end
  if not FEED_HELD or not FEED then return true end
  HEARD = true
  if asked('PUBSUB', 'NUMPAT') ~= 0 then return HEARD end
  local replication = asked('INFO', 'replication')
  if not replication or string.match(replication, 'connected_slaves:(%d+)') ~= '0' then return HEARD end
  local listed = asked('PUBSUB', 'CHANNELS')
  if not listed then return HEARD end
  if #listed == 0 then
    HEARD = false
  elseif #listed <= MAX_LISTED then
    HEARD = {}
    for _, channel in ipairs(listed) do HEARD[channel] = true end
  end
  return HEARD
end
local function publish(to, channel, event)
  if to == true or to[channel] then redis.call('PUBLISH', channel, event) end
end
-- An event's field name (`e:<seq>`), made once per call and seq.
local EVENT_FIELDS = {}
local function event_field(seq)
  local name = EVENT_FIELDS[seq]
  if not name then
    name = 'e:' .. seq
    EVENT_FIELDS[seq] = name
  end
  return name
end
-- `record` with the event already made (`{"seq":<seq>,…}`).
local function store(key, id, tenant, batch, seq, event, ...)
  redis.call('HSET', key, 'seq', seq, event_field(seq), event, ...)
  local keys = tenant_keys(tenant)
  if FEED then
    if FEED_HELD then
      local held = keys[3]
      if not held then
        held = {}
        keys[3] = held
        FEED_HELD[#FEED_HELD + 1] = keys
      end
      held[#held + 1] = event
    else
      redis.call('XADD', keys[1], '*', 'e', event)
    end
  end
  local to = heard()
  if to then
    publish(to, CHANNELS .. 'task:' .. id, event)
    if batch and batch ~= '' then publish(to, CHANNELS .. 'batch:' .. batch, event) end
    publish(to, keys[2], event)
  end
  return seq
end
local function record(key, id, tenant, batch, seq, body, ...)
  return store(key, id, tenant, batch, seq, '{"seq":' .. seq .. ',' .. body, ...)
end
local function with_hdr(hdr, draft)
  return hdr .. ',' .. string.sub(draft, 2)
end
-- The count after `current` (a decimal string, or absent for 0): after a
-- single digit from a table, else by its last digit while that is not a
-- 9, as formatting a Lua number costs several times more.
local NEXT_DIGIT = {['0'] = '1', ['1'] = '2', ['2'] = '3', ['3'] = '4', ['4'] = '5', ['5'] = '6', ['6'] = '7', ['7'] = '8', ['8'] = '9'}
local function next_seq(current)
  local quick = current and NEXT_DIGIT[current]
  if quick then return quick end
  local last = current and string.byte(current, -1)
  if last and last >= 48 and last < 57 then return string.sub(current, 1, -2) .. string.char(last + 1) end
  return tostring((tonumber(current) or 0) + 1)
end
local function is_terminal(status)
  return status == 'succeeded' or status == 'failed' or status == 'cancelled'
end
local function owns(cur, attempt, owner)
  return cur[1] == attempt and cur[2] == owner and (cur[3] == 'running' or cur[3] == 'waiting')
end
local function pairs_from(from)
  local fields = {}
  for i = from, #ARGV do fields[#fields + 1] = ARGV[i] end
  return fields
end
-- Appends the events `store` held to each tenant's feed as one entry per
-- 1 000, in the order they were stored, one event a field: `e`, `e1`, …
-- (see `super::feed`; one string of them all cost more to make).
local FEED_FIELDS = {'e'}
local function feed_field(i)
  local name = FEED_FIELDS[i]
  if not name then
    name = 'e' .. (i - 1)
    FEED_FIELDS[i] = name
  end
  return name
end
-- More fields than Lua's `unpack` takes at once go into further entries
-- (no call holds that many today: creates go 500 tasks a call).
local ENTRY_EVENTS = 1000
local function append_held()
  for _, keys in ipairs(FEED_HELD) do
    local held = keys[3]
    for first = 1, #held, ENTRY_EVENTS do
      local args = {'XADD', keys[1], '*'}
      for i = first, math.min(first + ENTRY_EVENTS - 1, #held) do
        local n = #args
        args[n + 1] = feed_field(i - first + 1)
        args[n + 2] = held[i]
      end
      redis.call(unpack(args))
    end
    keys[3] = nil
  end
  FEED_HELD = {}
end
-- Runs `body` with the feed appends of its events held and made at its
-- end, one entry per tenant: also when `body` fails part-way, so the feed
-- always holds the events the tasks do.
local function holding_feed(body)
  FEED_HELD = {}
  HEARD = nil
  local ok, result = pcall(body)
  append_held()
  FEED_HELD = nil
  HEARD = nil
  if not ok then error(result) end
  return result
end
"#;

/// Starting one task's next attempt, shared by [`START`] and the
/// scheduler's claim (`fair_scripts::CLAIM_AND_START`). Reads `ARGV[2..7]` as [`START`] documents them.
/// `reclaimed` says the entry was taken over from a worker presumed dead:
/// only then does a running task get a new attempt. A new entry of a
/// running task is a second one (a retry's promotion raced the reclaim of
/// the first), and the attempt holding the first entry runs the task.
/// `tenant` is the task's tenant when the caller knows it (the claim
/// read its lane), else `nil`. Returns its reply (see [`START`]) as several
/// values, not a table, so a caller puts it into the table it makes anyway.
pub(super) const START_FN: &str = r#"
-- The `started` draft without its opening brace, cut once per call.
local STARTED
local function start(key, id, reclaimed, entry, tenant)
  -- The tenant is read only when the caller does not know it.
  local st
  if tenant then
    st = redis.call('HMGET', key, 'status', 'attempt', 'max_attempts', 'cancel', 'hdr', 'batch', 'spec', 'seq', 'trace')
    st[10] = tenant
  else
    st = redis.call('HMGET', key, 'status', 'attempt', 'max_attempts', 'cancel', 'hdr', 'batch', 'spec', 'seq', 'trace', 'tenant')
  end
  if not st[1] then return 'gone' end
  if is_terminal(st[1]) then return 'terminal', st[1], redis.call('HGET', key, 'entry') or '' end
  if not reclaimed and (st[1] == 'running' or st[1] == 'waiting') then return 'duplicate' end
  local seq = next_seq(st[8])
  if st[4] == '1' then
    record(key, id, st[10], st[6], seq, with_hdr(st[5], ARGV[5]), 'status', 'cancelled', 'code', 'cancelled', 'finished_at', ARGV[3], 'owner', '')
    redis.call('PEXPIRE', key, ARGV[7])
    return 'cancelled'
  end
  -- A task that never started has attempts left.
  if st[2] ~= '0' and tonumber(st[2]) >= tonumber(st[3]) then
    record(key, id, st[10], st[6], seq, with_hdr(st[5], ARGV[6]), 'status', 'failed', 'code', 'problem', 'finished_at', ARGV[3], 'owner', '',
      'error', 'attempts exhausted: the worker running the last attempt stopped responding')
    redis.call('PEXPIRE', key, ARGV[7])
    return 'dead', st[2], st[10]
  end
  local attempt = next_seq(st[2])
  if st[1] == 'waiting' then redis.call('HDEL', key, 'takeover', 'released', 'input') end
  STARTED = STARTED or string.sub(ARGV[2], 2)
  local event = '{"seq":' .. seq .. ',"attempt":' .. attempt .. ',' .. st[5] .. ',' .. STARTED
  if st[2] == '0' then
    store(key, id, st[10], st[6], seq, event, 'status', 'running', 'attempt', attempt, 'owner', ARGV[4], 'entry', entry, 'started_at', ARGV[3])
  else
    store(key, id, st[10], st[6], seq, event, 'status', 'running', 'attempt', attempt, 'owner', ARGV[4], 'entry', entry)
  end
  return 'started', attempt, st[7], st[10], st[6] or '', st[9] or ''
end
"#;

fn task_script(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}\n{body}"))
}

fn starting_script(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}\n{START_FN}\n{body}"))
}

/// Arguments per task of [`CREATE`].
pub const CREATE_GROUP: usize = 6;

/// Creating one task with its `queued` event, shared by [`CREATE`] and
/// `super::singles::SUBMIT_SINGLES`: `t` the task, then its `hdr`, `spec`,
/// `tenant`, `batch` (empty for none) and `max_attempts`, `draft` the event
/// draft (the same for every task of a call: it is cut once), `now` epoch
/// ms, `trace` the W3C `traceparent` of the request that made it (or
/// empty). The event is `record`'s, made in one concatenation.
pub(super) const CREATE_FN: &str = r#"
-- The `queued` draft without its opening brace, cut once per call.
local QUEUED
local function create(key, id, hdr, spec, tenant, batch, max_attempts, draft, now, trace)
  -- Made at its full size (a table that grows is made again); `batch`
  -- and `trace` only when the task has them.
  local fields = {'hdr', hdr, 'spec', spec, 'tenant', tenant, 'max_attempts', max_attempts,
    'status', 'queued', 'attempt', '0', 'created_at', now, false, false, false, false}
  local n = 14
  if batch ~= '' then
    fields[n + 1] = 'batch'
    fields[n + 2] = batch
    n = n + 2
  end
  if trace ~= '' then
    fields[n + 1] = 'trace'
    fields[n + 2] = trace
    n = n + 2
  end
  QUEUED = QUEUED or string.sub(draft, 2)
  store(key, id, tenant, batch, '1', '{"seq":1,' .. hdr .. ',' .. QUEUED, unpack(fields, 1, n))
end
"#;

/// Creates tasks with their `queued` event ([`CREATE_FN`]). `ARGV[2]` the
/// draft, `ARGV[3]` now, `ARGV[4]` the W3C `traceparent` of the request
/// that made them (or empty); then per task `id, hdr, spec, tenant, batch,
/// max_attempts` ([`CREATE_GROUP`] values per task, starting at `ARGV[5]`).
/// Returns how many were created (an existing id is skipped).
pub static CREATE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{PRELUDE}\n{CREATE_FN}\n{}",
        r#"
return holding_feed(function()
  local created = 0
  for i = 1, #KEYS do
    local a = 5 + (i - 1) * 6 -- CREATE_GROUP
    if redis.call('EXISTS', KEYS[i]) == 0 then
      create(KEYS[i], ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[2], ARGV[3], ARGV[4])
      created = created + 1
    end
  end
  return created
end)
"#
    ))
});

/// Starts the next attempt of delivered tasks. `ARGV[2]` the `started`
/// draft, `ARGV[3]` now, `ARGV[4]` worker id, `ARGV[5]` draft of the
/// `cancelled` event, `ARGV[6]` draft of the `failed` event for spent
/// attempts, `ARGV[7]` retention ms; then per task from `ARGV[8]` its id,
/// `1` when its entry was reclaimed (else empty), and the entry's id (kept
/// on the task as `entry`, the entry its running attempt came from).
/// Returns, per task, `{'started', attempt, spec, tenant, batch, traceparent}`, or
/// `{'gone'}`, `{'terminal', status, entry of the attempt that ended it}`, `{'duplicate'}`, `{'cancelled'}`,
/// `{'dead', attempt, tenant}`.
pub static START: LazyLock<Script> = LazyLock::new(|| {
    starting_script(
        r#"
return holding_feed(function()
  local replies = {}
  for i = 1, #KEYS do
    replies[i] = {start(KEYS[i], ARGV[5 + 3 * i], ARGV[6 + 3 * i] == '1', ARGV[7 + 3 * i])}
  end
  return replies
end)
"#,
    )
});

/// Arguments per task of [`FINISH`].
pub const FINISH_GROUP: usize = 11;

/// Ending one owning attempt's task, shared by [`FINISH`] and
/// `fair_scripts::FINISH_AND_ACK` (each reads its own layout of
/// arguments): `key` and `id` the task, `attempt` and `owner` the attempt
/// that ends it, `body` the event after its seq, `status`, `code`,
/// `field` (`result` or `error`, or empty) and its `value`, `at` the
/// `finished_at`, the task's `tenant` and `batch`. With `expire`, the task
/// expires after `ARGV[2]`, the retention ms.
/// Returns the terminal event's seq, or -1 when fenced.
pub(super) const FINISH_FN: &str = r#"
local function finish(key, id, attempt, owner, body, status, code, field, value, at, tenant, batch, expire)
  local cur = redis.call('HMGET', key, 'attempt', 'owner', 'status', 'cancel', 'seq')
  if not owns(cur, attempt, owner) then return -1 end
  local seq = next_seq(cur[5])
  -- `owner` stays: a terminal status already fences every later write.
  if cur[4] then redis.call('HDEL', key, 'cancel') end
  if field ~= '' then
    record(key, id, tenant, batch, seq, body, 'status', status, 'code', code, 'finished_at', at, field, value)
  else
    record(key, id, tenant, batch, seq, body, 'status', status, 'code', code, 'finished_at', at)
  end
  if expire then redis.call('PEXPIRE', key, ARGV[2]) end
  return seq
end
"#;

/// Ends owning attempts and their tasks. `ARGV[2]` retention ms; then
/// [`FINISH_GROUP`] values per task from `ARGV[3]`: `id, attempt, worker
/// id, body, status, code, field, value, finished_at, tenant, batch` (see
/// `finish`).
/// Returns per task the terminal event's seq, or -1 when fenced.
pub static FINISH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{PRELUDE}\n{FINISH_FN}\n{}",
        r#"
return holding_feed(function()
  local replies = {}
  for i = 1, #KEYS do
    local a = 3 + (i - 1) * 11 -- FINISH_GROUP
    replies[i] = finish(KEYS[i], ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[a + 6],
      ARGV[a + 7], ARGV[a + 8], ARGV[a + 9], ARGV[a + 10], true)
  end
  return replies
end)
"#
    ))
});

/// Checks that a running attempt still owns its task (the lease itself is
/// its stream entry's idle time, which the caller resets next). `KEYS[1]`
/// the task hash; `ARGV[1]` attempt, `ARGV[2]` worker id.
/// Returns `ok`, `cancel` (a cancel was asked for) or `fenced`.
pub static HEARTBEAT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local cur = redis.call('HMGET', KEYS[1], 'attempt', 'owner', 'status', 'cancel')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then return 'fenced' end
if cur[3] ~= 'running' and cur[3] ~= 'waiting' then return 'fenced' end
if cur[4] == '1' then return 'cancel' end
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
local cur = redis.call('HMGET', KEYS[1], 'attempt', 'owner', 'status', 'hdr', 'tenant', 'batch', 'seq')
if not owns(cur, ARGV[5], ARGV[6]) then return -1 end
return record(KEYS[1], ARGV[2], cur[5], cur[6], next_seq(cur[7]), with_hdr(cur[4], ARGV[3]), unpack(ARGV, 7))
"#,
    )
});

/// Hands the owning attempt's task back to be retried later. `ARGV[5]`
/// attempt, `ARGV[6]` worker id, `ARGV[7..]` field/value pairs.
/// Returns the `retrying` event's seq, or -1 when fenced.
pub static RETRY: LazyLock<Script> = LazyLock::new(|| {
    task_script(
        r#"
local cur = redis.call('HMGET', KEYS[1], 'attempt', 'owner', 'status', 'hdr', 'tenant', 'batch', 'seq')
if not owns(cur, ARGV[5], ARGV[6]) then return -1 end
local fields = pairs_from(7)
for _, v in ipairs({'status', 'queued', 'owner', ''}) do fields[#fields + 1] = v end
redis.call('HDEL', KEYS[1], 'takeover', 'released', 'input')
return record(KEYS[1], ARGV[2], cur[5], cur[6], next_seq(cur[7]), with_hdr(cur[4], ARGV[3]), unpack(fields))
"#,
    )
});

/// Hands the owning attempt's task back to wait for its tenant's next UTC
/// day (the tenant spent its `max_tokens_per_day`): `queued` again, with
/// one more attempt allowed, since an attempt stopped for the tenant's
/// tokens is not a failure. `ARGV[5]` attempt, `ARGV[6]` worker id.
/// Returns the `queued` event's seq, or -1 when fenced.
pub static REQUEUE: LazyLock<Script> = LazyLock::new(|| {
    task_script(
        r#"
local cur = redis.call('HMGET', KEYS[1], 'attempt', 'owner', 'status', 'hdr', 'tenant', 'batch', 'seq', 'max_attempts')
if not owns(cur, ARGV[5], ARGV[6]) then return -1 end
redis.call('HDEL', KEYS[1], 'takeover', 'released', 'input')
return record(KEYS[1], ARGV[2], cur[5], cur[6], next_seq(cur[7]), with_hdr(cur[4], ARGV[3]),
  'status', 'queued', 'owner', '', 'max_attempts', tostring((tonumber(cur[8]) or 0) + 1))
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
local cur = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'hdr', 'batch', 'seq')
if not cur[1] or cur[2] ~= ARGV[5] then return 'missing' end
if is_terminal(cur[1]) then return cur[1] end
if cur[1] == 'queued' then
  record(KEYS[1], ARGV[2], cur[2], cur[4], next_seq(cur[5]), with_hdr(cur[3], ARGV[3]), 'status', 'cancelled', 'code', 'cancelled', 'finished_at', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  return 'now-cancelled'
end
redis.call('HSET', KEYS[1], 'cancel', '1')
return 'cancelling'
"#,
    )
});

/// Sets fields of the owning attempt's task. `KEYS[1]` the task hash;
/// `ARGV[1]` attempt, `ARGV[2]` worker id, `ARGV[3..]` field/value pairs.
/// Returns `ok` or `fenced`.
pub static SET_FIELDS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local cur = redis.call('HMGET', KEYS[1], 'attempt', 'owner', 'status')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then return 'fenced' end
if cur[3] ~= 'running' and cur[3] ~= 'waiting' then return 'fenced' end
if #ARGV >= 4 then redis.call('HSET', KEYS[1], unpack(ARGV, 3)) end
return 'ok'
"#,
    )
});

/// A human's input to a waiting task. `KEYS[1]` the task hash; `ARGV[1]`
/// the caller's tenant, `ARGV[2]` the input as JSON. Returns `accepted`,
/// `missing`, or the status the task has when it is not waiting.
pub static GIVE_INPUT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local cur = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'takeover')
if not cur[1] or cur[2] ~= ARGV[1] then return 'missing' end
if cur[1] ~= 'waiting' then return cur[1] end
if cur[3] == '1' then return 'taken over' end
redis.call('HSET', KEYS[1], 'input', ARGV[2])
return 'accepted'
"#,
    )
});

/// Takes the input a human gave the owning attempt's waiting task, and
/// marks it running again; none while a person holds the desktop.
/// `KEYS[1]` the task hash; `ARGV[1]` attempt, `ARGV[2]` worker id. Returns
/// `{kind, input JSON}`: kind `none` (no input yet), `fenced`, `input` (an
/// answer through `/input`) or `release` (a person handed the desktop
/// back; its `released` event is recorded already).
pub static TAKE_INPUT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local cur = redis.call('HMGET', KEYS[1], 'attempt', 'owner', 'status', 'input', 'takeover', 'released')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then return {'fenced', ''} end
if cur[3] ~= 'waiting' then return {'fenced', ''} end
if not cur[4] or cur[5] == '1' then return {'none', ''} end
redis.call('HDEL', KEYS[1], 'input', 'code', 'released')
redis.call('HSET', KEYS[1], 'status', 'running')
if cur[6] == '1' then return {'release', cur[4]} end
return {'input', cur[4]}
"#,
    )
});

/// A person takes a tenant's running or waiting task's desktop: the task
/// waits with code `human-intervention` (its worker pauses after its
/// current action) and a `takeover` event is recorded. `ARGV[5]` the
/// caller's tenant. Returns `missing`, `taken`, `held` (a person holds it
/// already; nothing changes) or the status that does not allow it.
pub static TAKEOVER: LazyLock<Script> = LazyLock::new(|| {
    task_script(
        r#"
local cur = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'hdr', 'batch', 'seq', 'takeover')
if not cur[1] or cur[2] ~= ARGV[5] then return 'missing' end
if cur[1] ~= 'running' and cur[1] ~= 'waiting' then return cur[1] end
if cur[6] == '1' then return 'held' end
record(KEYS[1], ARGV[2], cur[2], cur[4], next_seq(cur[5]), with_hdr(cur[3], ARGV[3]),
  'status', 'waiting', 'code', 'human-intervention', 'takeover', '1')
return 'taken'
"#,
    )
});

/// A person hands a taken-over task back: a `released` event is recorded
/// and the message waits for the worker as the task's input. `ARGV[5]` the
/// caller's tenant, `ARGV[6]` the input JSON. Returns `missing`,
/// `released`, `not taken over`, or the status that does not allow it.
pub static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    task_script(
        r#"
local cur = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'hdr', 'batch', 'seq', 'takeover')
if not cur[1] or cur[2] ~= ARGV[5] then return 'missing' end
if cur[1] ~= 'waiting' then return cur[1] end
if cur[6] ~= '1' then return 'not taken over' end
redis.call('HDEL', KEYS[1], 'takeover')
record(KEYS[1], ARGV[2], cur[2], cur[4], next_seq(cur[5]), with_hdr(cur[3], ARGV[3]), 'input', ARGV[6], 'released', '1')
return 'released'
"#,
    )
});

/// Puts a dead-lettered task back in the queue with fresh attempts. `ARGV[5]`
/// the caller's tenant. Returns `requeued`, `missing`, or the status it had.
pub static REVIVE: LazyLock<Script> = LazyLock::new(|| {
    task_script(
        r#"
local cur = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'hdr', 'batch', 'seq')
if not cur[1] or cur[2] ~= ARGV[5] then return 'missing' end
if cur[1] ~= 'failed' then return cur[1] end
redis.call('HDEL', KEYS[1], 'code', 'error', 'finished_at', 'cancel')
redis.call('PERSIST', KEYS[1])
record(KEYS[1], ARGV[2], cur[2], cur[4], next_seq(cur[5]), with_hdr(cur[3], ARGV[3]), 'status', 'queued', 'attempt', '0', 'owner', '')
return 'requeued'
"#,
    )
});

/// Deletes the task `id` (its key made from the prefix `ARGV[3]`) when it
/// ended at or before `cutoff`. A task that was revived since is not ended
/// any more, or ended later: it stays, and its index entry goes, until it
/// ends again.
const DELETE_IF_EXPIRED_FN: &str = r#"
local function delete_if_expired(id, cutoff)
  local key = ARGV[3] .. '{' .. id .. '}'
  local st = redis.call('HMGET', key, 'status', 'finished_at')
  local ended = st[1] == 'succeeded' or st[1] == 'failed' or st[1] == 'cancelled'
  if ended and (tonumber(st[2]) or 0) <= cutoff then redis.call('DEL', key) end
end
"#;

/// Deletes the tasks of the ended stream (`KEYS[1]`) whose entries were
/// written at or before `ARGV[1]` (epoch ms) and that ended by then, taking
/// at most `ARGV[2]` entries from the stream, on a single server (the task
/// keys are made from the prefix `ARGV[3]`). Returns how many entries went.
pub static SWEEP_ENDED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{DELETE_IF_EXPIRED_FN}\n{}",
        r#"
local cutoff = tonumber(ARGV[1])
local entries = redis.call('XRANGE', KEYS[1], '-', ARGV[1], 'COUNT', tonumber(ARGV[2]))
local gone = {}
for _, entry in ipairs(entries) do
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == 't' then
      for id in string.gmatch(fields[i + 1], '%S+') do delete_if_expired(id, cutoff) end
    end
  end
  gone[#gone + 1] = entry[1]
end
if #gone > 0 then redis.call('XDEL', KEYS[1], unpack(gone)) end
return #gone
"#
    ))
});

/// Deletes tasks of the finished index of earlier versions (`KEYS[1]`, a
/// sorted set by end time) that ended at or before `ARGV[1]` (epoch ms),
/// at most `ARGV[2]` of them, as [`SWEEP_ENDED`] does. Returns how many
/// entries were taken from the index.
pub static SWEEP_FINISHED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{DELETE_IF_EXPIRED_FN}\n{}",
        r#"
local cutoff = tonumber(ARGV[1])
local ids = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do delete_if_expired(id, cutoff) end
if #ids > 0 then redis.call('ZREM', KEYS[1], unpack(ids)) end
return #ids
"#
    ))
});
