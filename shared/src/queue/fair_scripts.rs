//! The scheduler's Lua scripts: queueing into a tenant's lanes, taking
//! turns between tenants, settling acknowledged entries, reclaiming,
//! promoting due tasks and trimming. Each runs on one scheduler shard: every
//! key it touches carries the shard's hash tag (see [`crate::keys`]), and the
//! shard's key base `<prefix>:{fN}:` comes in as an argument, from which the
//! script builds the tenant keys (`<base>t:<tenant>`,
//! `<base>t:<tenant>:lane:<lane>:<route>`, `<base>active:<route>`).
//! `KEYS[1]` is always the shard's `sched` hash, so a cluster routes the
//! call to the shard's slot.
//!
//! Lanes are per (tenant, route, priority): a route is the canonical string
//! of what a task needs of its worker (see [`crate::route`]). Counters of a
//! tenant (hash `<base>t:<tenant>`): `queued` (entries in its lanes not yet
//! delivered), `running` (entries delivered and not yet acknowledged, which
//! is at least the tasks running: an entry is acknowledged only after its
//! task's end or hand-back is written), `delayed` (tasks in the due set),
//! `vt` (its virtual time), `weight` and `max` (max_running, 0 for none),
//! `busy` (`1` while it is in the shard's `busy` set),
//! `sandboxed` (entries running on routes that hold a sandbox, plus the
//! tenant's kept-alive sandboxes, see [`super::kept`]) and `maxsb`
//! (max_sandboxes, absent for none), `paused` (epoch ms until which the
//! tenant takes no turn: it spent its `max_tokens_per_day`; the shard's
//! `paused` set holds the same times, and the promoter lifts them);
//! in the same hash, so a turn reads the tenant in one call, the queued
//! entries per lane as `<lane index>:<route>`: a field exists exactly for
//! the lanes the tenant has (reclaim, trim and upkeep iterate them). The shard's `sched` hash has
//! `clock` (the virtual time of the last turn) and the shard's totals
//! `queued`, `running` and `delayed`; its `routes` hash the queued entries
//! per route (the claim looks only at routes with queued entries).
//!
//! Invariants: a tenant is in `active:<route>` exactly when it has queued
//! entries on that route, is below its `max`, is not `paused`, and, when
//! the route holds a sandbox, is below its `maxsb` (a tenant held back is
//! simply not given a turn); every such score is the tenant's `vt`, so the claim takes
//! the lowest-vt tenant over the routes the worker serves, reading only
//! those routes' heads (cost O(routes served), never O(tenants)). `running`
//! changes only in the claim (up, by the entries read) and in
//! [`SETTLE_FN`] (down, by what `XACK` really acknowledged), so a reclaimed
//! entry keeps its slot and an entry acknowledged twice frees it once;
//! `sandboxed` likewise, for the entries of routes that hold a sandbox.

use std::sync::LazyLock;

use redis::Script;

use super::scripts::{FINISH_FN, PRELUDE, START_FN};

/// One unit of virtual time: a task of a tenant of weight `w` advances the
/// tenant's virtual time by `STRIDE_UNIT / w`.
pub const STRIDE_UNIT: u32 = 10_000;

/// How many tasks past its fair share a turn may take: a turn ends within
/// `TURN_TASKS` of the tenant's strides past the next tenant's virtual time
/// (deficit round-robin's quantum). Larger turns cost Redis less per task
/// (a turn's reads and writes, and an acknowledgement's per-tenant writes,
/// serve more tasks) and loosen fairness by as many tasks per tenant. A
/// claim never asks for more than its worker's free slots, so where tasks
/// run for seconds a turn is that small whatever this is; it matters in
/// fast drains, where 16 costs Redis about a sixth less per task than 4
/// with 100 backlogged tenants.
pub const TURN_TASKS: u32 = 16;

/// How many tasks ahead of the clock a tenant that comes back from idle may
/// start: it joins at `max(its own virtual time, clock - HEAD_START_TURNS
/// strides)`. Bounded and never accumulated while idle, it lets a quiet
/// tenant's few tasks start at once beside a backlogged one.
pub const HEAD_START_TURNS: u32 = 4;

/// Helpers of every scheduler script. `LANES` are the lane names in
/// priority order; `with_group` runs a consumer-group command on a lane and,
/// when Redis lost the group (restarted without persistence) or the lane,
/// makes both again and retries: the one place that recovers from NOGROUP.
/// Counter changes of the shard's totals are summed in `SHARD_ACC` and
/// `ROUTE_ACC` and written once, by `flush`, at the end of each script.
/// `serves` is the script side of `Capabilities::serves`.
pub(super) const FAIR_FN: &str = r#"
local LANES = {'high', 'normal', 'low'}
local STRIDE_UNIT = 10000
local HEAD_START = 4 -- HEAD_START_TURNS
local TURN_TASKS = 16 -- TURN_TASKS
local SHARD_ACC, ROUTE_ACC = {}, {}
-- Sandbox slots (entries of routes that hold a sandbox) freed per tenant.
local SB_FREED = {}
local function num(x) return string.format('%.17g', x) end
local function tkey(S, tenant) return S .. 't:' .. tenant end
local function lkey(S, tenant, route, lane) return S .. 't:' .. tenant .. ':lane:' .. LANES[lane] .. ':' .. route end
local function akey(S, route) return S .. 'active:' .. route end
local function make_group(lane, group)
  local r = redis.pcall('XGROUP', 'CREATE', lane, group, '0', 'MKSTREAM')
  if type(r) == 'table' and r.err and not string.find(r.err, 'BUSYGROUP') then error(r) end
end
local function with_group(lane, group, ...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err then
    if not string.find(r.err, 'NOGROUP') then error(r) end
    make_group(lane, group)
    r = redis.call(...)
  end
  return r
end
local function flush(S)
  for field, n in pairs(SHARD_ACC) do
    if n ~= 0 then redis.call('HINCRBY', S .. 'sched', field, n) end
  end
  for route, n in pairs(ROUTE_ACC) do
    if n ~= 0 and redis.call('HINCRBY', S .. 'routes', route, n) <= 0 then redis.call('HDEL', S .. 'routes', route) end
  end
  SHARD_ACC, ROUTE_ACC = {}, {}
end
local function bump(S, tenant, field, n)
  if n ~= 0 then
    redis.call('HINCRBY', tkey(S, tenant), field, n)
    SHARD_ACC[field] = (SHARD_ACC[field] or 0) + n
  end
end
local function bump_queued(S, tenant, route, lane, n)
  if n ~= 0 then
    bump(S, tenant, 'queued', n)
    redis.call('HINCRBY', tkey(S, tenant), lane .. ':' .. route, n)
    ROUTE_ACC[route] = (ROUTE_ACC[route] or 0) + n
  end
end
local function bump_delayed(S, tenant, lane, n)
  bump(S, tenant, 'delayed', n)
  redis.call('HINCRBY', tkey(S, tenant), 'delayed:' .. LANES[tonumber(lane)], n)
end
-- The tenant's hash in one read: its counters and settings by name, and
-- its lanes as {route, lane index, queued} (the fields `<lane>:<route>`).
local function state_of(S, tenant)
  local all = redis.call('HGETALL', tkey(S, tenant))
  local st, lanes = {}, {}
  for i = 1, #all, 2 do
    -- `<digit>:<route>` is a lane's count (bytes 49..51 are '1'..'3', 58 is ':').
    local first, second = string.byte(all[i], 1, 2)
    if second == 58 and first >= 49 and first <= 51 then
      lanes[#lanes + 1] = {string.sub(all[i], 3), first - 48, tonumber(all[i + 1]) or 0}
    else
      st[all[i]] = all[i + 1]
    end
  end
  return st, lanes
end
local function lanes_of(S, tenant)
  local _, lanes = state_of(S, tenant)
  return lanes
end
-- Makes the lane and its group the first time the tenant uses it.
local made = {}
local function ensure_lane(S, group, tenant, route, lane)
  local field = lane .. ':' .. route
  if made[tenant .. '\0' .. field] then return end
  made[tenant .. '\0' .. field] = true
  if redis.call('HEXISTS', tkey(S, tenant), field) == 0 then
    make_group(lkey(S, tenant, route, lane), group)
    redis.call('HSET', tkey(S, tenant), field, 0)
  end
end
-- A tenant's weight and max_running; the shard's `limits` holds the
-- tenants with a limit, so an acknowledgement reads them all at once.
-- Whether a route's tasks hold a sandbox slot: its middle part is not
-- `none`, and not marked `+id` (a task naming its sandbox starts none: a
-- kept sandbox's slot stays the kept one, see `kept`). Worked out once per
-- route and call.
local SANDBOXED = {}
local function holds_sandbox(route)
  local held = SANDBOXED[route]
  if held == nil then
    local s = string.match(route, '^[^|]*|([^|]*)|') or ''
    held = s ~= 'none' and string.sub(s, -3) ~= '+id'
    SANDBOXED[route] = held
  end
  return held
end
-- What keeps a tenant from turns: all its routes (paused for the day's
-- tokens, or at max_running), or only its sandbox routes (at max_sandboxes).
local function held_back(st, running)
  local max, maxsb = tonumber(st.max) or 0, tonumber(st.maxsb) or 0
  return st.paused ~= nil or (max > 0 and running >= max), maxsb > 0 and (tonumber(st.sandboxed) or 0) >= maxsb
end
local function set_settings(S, tenant, weight, max)
  redis.call('HSET', tkey(S, tenant), 'weight', weight, 'max', max)
  if (tonumber(max) or 0) > 0 then
    redis.call('HSET', S .. 'limits', tenant, max)
  else
    redis.call('HDEL', S .. 'limits', tenant)
  end
end
-- `st` and `lanes` as `state_of` gives them, when the caller has them.
local function activate(S, tenant, st, lanes)
  local t = tkey(S, tenant)
  if not st then st, lanes = state_of(S, tenant) end
  local blocked, sb_full = held_back(st, tonumber(st.running) or 0)
  local per_route = {}
  for _, l in ipairs(lanes) do per_route[l[1]] = (per_route[l[1]] or 0) + l[3] end
  local v
  for route, n in pairs(per_route) do
    if blocked or n <= 0 or (sb_full and holds_sandbox(route)) then
      redis.call('ZREM', akey(S, route), tenant)
    else
      if not v then
        local vt = tonumber(st.vt) or 0
        local clock = tonumber(redis.call('HGET', S .. 'sched', 'clock')) or 0
        v = math.max(vt, clock - HEAD_START * STRIDE_UNIT / math.max(tonumber(st.weight) or 1, 1))
        if v ~= vt then redis.call('HSET', t, 'vt', num(v)) end
      end
      redis.call('ZADD', akey(S, route), num(v), tenant)
    end
  end
end
-- Tells idle workers that tasks went into lanes: one member, so however
-- many tasks came in, one command and one waiting worker woken.
local function wake(S)
  redis.call('ZADD', S .. 'wake', 0, 'ready')
end
local function capabilities(sandbox, pipelines, labels)
  local c = {sandbox = sandbox, pipelines = {}, labels = {}}
  for p in string.gmatch(pipelines, '[^,]+') do c.pipelines[p] = true end
  for l in string.gmatch(labels, '[^,]+') do c.labels[l] = true end
  return c
end
local function serves(c, route)
  local p, s, l = string.match(route, '^([^|]*)|([^|+]*)[^|]*|(.*)$')
  if not p then return false end
  if not c.pipelines[p] then return false end
  if s ~= 'none' and (c.sandbox == 'none' or (s ~= 'any' and s ~= c.sandbox)) then return false end
  for label in string.gmatch(l, '[^,]+') do
    if not c.labels[label] then return false end
  end
  return true
end
local function entry_task(entry)
  local fields = entry[2] or {}
  for i = 1, #fields, 2 do
    if fields[i] == 't' then return fields[i + 1] end
  end
  return ''
end
"#;

/// Acknowledging entries of one shard: `settle` acknowledges the entries
/// gathered with `add_ack` (tenant, route, lane index, entry id), a lane's
/// at once. Each tenant's `running` goes down by what `XACK` acknowledged;
/// a tenant that was at its limit may take turns again; its lanes are
/// marked for trimming. `freed` (optional) holds slots already
/// acknowledged by `ack_counting`.
///
/// `ack_counting` acknowledges, one at a time, the entries of
/// `{tenant, route, lane index, entry id, outcome}` that carry an outcome
/// and adds the outcome to `counts` only when `XACK` acknowledged the entry
/// (it was still pending), so an entry's outcome is counted once whoever
/// acknowledges it; it adds the entries without an outcome to the
/// gathered ones and returns the slots freed.
const SETTLE_FN: &str = r#"
-- Entries to acknowledge, grouped by lane as they are added, with neither
-- a string nor a table per entry: tenant → route → lane index → {tenant,
-- route, lane, ids}, and the lanes in order of first appearance.
local function new_acks() return {by_lane = {}, order = {}} end
local function add_ack(acks, tenant, route, lane, id)
  local routes = acks.by_lane[tenant]
  if not routes then
    routes = {}
    acks.by_lane[tenant] = routes
  end
  local lanes = routes[route]
  if not lanes then
    lanes = {}
    routes[route] = lanes
  end
  local l = lanes[lane]
  if not l then
    l = {tenant, route, tonumber(lane), {}}
    lanes[lane] = l
    acks.order[#acks.order + 1] = l
  end
  local ids = l[4]
  ids[#ids + 1] = id
end
-- Acknowledges one at a time the `entries` ({tenant, route, lane, id,
-- outcome}) with an outcome, counting the outcome only when this call
-- acknowledged the entry; the others go into `acks`. Returns the slots
-- freed per tenant.
local function ack_counting(S, group, entries, counts, acks)
  local freed = {}
  for _, e in ipairs(entries) do
    if e[5] ~= '' then
      if redis.call('XACK', lkey(S, e[1], e[2], tonumber(e[3])), group, e[4]) == 1 then
        counts[e[5]] = (counts[e[5]] or 0) + 1
        freed[e[1]] = (freed[e[1]] or 0) + 1
        if holds_sandbox(e[2]) then SB_FREED[e[1]] = (SB_FREED[e[1]] or 0) + 1 end
      end
    else
      add_ack(acks, e[1], e[2], e[3], e[4])
    end
  end
  return freed
end
local function settle(S, group, acks, freed)
  freed = freed or {}
  for _, l in ipairs(acks.order) do
    local n = redis.call('XACK', lkey(S, l[1], l[2], l[3]), group, unpack(l[4]))
    if n > 0 then
      freed[l[1]] = (freed[l[1]] or 0) + n
      if holds_sandbox(l[2]) then SB_FREED[l[1]] = (SB_FREED[l[1]] or 0) + n end
    end
  end
  local tenants, woken = {}, false
  for tenant in pairs(freed) do tenants[#tenants + 1] = tenant end
  if #tenants == 0 then return flush(S) end
  local limits = redis.call('HMGET', S .. 'limits', unpack(tenants))
  for i, tenant in ipairs(tenants) do
    local n = freed[tenant]
    local running = redis.call('HINCRBY', tkey(S, tenant), 'running', -n)
    SHARD_ACC.running = (SHARD_ACC.running or 0) - n
    -- Only a tenant that was at its limit can take turns again.
    local max = tonumber(limits[i]) or 0
    local again = max > 0 and running + n >= max
    local sb = SB_FREED[tenant]
    if sb then
      -- Likewise for a tenant that was at its max_sandboxes.
      local left = redis.call('HINCRBY', tkey(S, tenant), 'sandboxed', -sb)
      local maxsb = tonumber(redis.call('HGET', tkey(S, tenant), 'maxsb')) or 0
      again = again or (maxsb > 0 and left + sb >= maxsb)
    end
    if again then
      activate(S, tenant)
      woken = true
    end
  end
  SB_FREED = {}
  redis.call('SADD', S .. 'trim', unpack(tenants))
  flush(S)
  -- A tenant back from its limit has tasks an idle worker may take now.
  if woken then wake(S) end
end
"#;

/// Taking turns on one shard: reads up to `wanted` new entries for
/// `consumer` with capabilities `c`, a turn at a time to the tenant of
/// lowest virtual time over the routes `c` serves, each turn reading the
/// tenant's lanes of those routes high → normal → low, skipping lanes whose
/// count says they are empty. A turn takes as many entries as keep the
/// tenant's virtual time within one stride of the next tenant's (all of
/// them with one tenant), and never more than its `max` leaves room for.
/// With `start`, each entry's task is started in the same step (single
/// server only: the task keys are made from `task_prefix`). Returns
/// `{entry, …}` with each `{lane index, entry id, task id, tenant, route}`;
/// with `start`, one flat list instead, each entry's five values followed
/// by the start's reply as six (`'malformed'` for an entry without a task
/// id; see [`CLAIM_ROW`]).
///
/// The turn order is read once per call: each served route's first
/// `wanted / TURN_TASKS + 2` tenants (at most `wanted + 2`, see `window`)
/// go into an in-memory heap (`order_of`), a tenant
/// goes back into it with its new virtual time after its turn, and the
/// active sets and the clock are written once at the end (`write_order`).
/// Tenants beyond a route's window have at least its last score (`edge`):
/// while the heap's lowest is not above the edge it is the true lowest;
/// otherwise the order is written and read again.
const TURNS_FN: &str = r#"
local function served_routes(S, c)
  local list, set = {}, {}
  local all = redis.call('HGETALL', S .. 'routes')
  for i = 1, #all, 2 do
    if (tonumber(all[i + 1]) or 0) > 0 and serves(c, all[i]) then
      list[#list + 1] = all[i]
      set[all[i]] = true
    end
  end
  return list, set
end
-- A min-heap of {tenant, vt}, ordered as a sorted set orders its members.
local function before(a, b) return a[2] < b[2] or (a[2] == b[2] and a[1] < b[1]) end
local function heap_push(h, item)
  local i = #h + 1
  h[i] = item
  while i > 1 do
    local up = math.floor(i / 2)
    if not before(h[i], h[up]) then break end
    h[i], h[up] = h[up], h[i]
    i = up
  end
end
local function heap_pop(h)
  local n = #h
  if n == 0 then return nil end
  local top = h[1]
  -- Two statements: Lua leaves the order of a multiple assignment open,
  -- and with one item `h[1], h[1] = h[1], nil` may keep it.
  h[1] = h[n]
  h[n] = nil
  n = n - 1
  local i = 1
  while true do
    local l, r, m = 2 * i, 2 * i + 1, i
    if l <= n and before(h[l], h[m]) then m = l end
    if r <= n and before(h[r], h[m]) then m = r end
    if m == i then break end
    h[i], h[m] = h[m], h[i]
    i = m
  end
  return top
end
-- How many tenants of a route a call reads at first: enough for `wanted`
-- entries at a turn's usual size, and two more; a window that runs out is
-- read again (see `take_turns`).
local function window(wanted) return math.min(wanted, math.floor(wanted / TURN_TASKS)) + 2 end
-- The first `depth` tenants of each route as a heap, and the lowest score
-- that a tenant left out of a window may have (nil when no window was cut).
local function order_of(S, routes, depth)
  local heap, seen, edge = {}, {}, nil
  for _, route in ipairs(routes) do
    local top = redis.call('ZRANGE', akey(S, route), 0, depth - 1, 'WITHSCORES')
    for i = 1, #top, 2 do
      if not seen[top[i]] then
        seen[top[i]] = true
        heap_push(heap, {top[i], tonumber(top[i + 1])})
      end
    end
    if #top >= 2 * depth then
      local last = tonumber(top[#top])
      if not edge or last < edge then edge = last end
    end
  end
  return heap, edge
end
-- Writes the active sets of the tenants that took turns: `moved` maps a
-- tenant to {vt, {route = still active?}}.
local function write_order(S, moved)
  local add, rem = {}, {}
  for tenant, m in pairs(moved) do
    local v = num(m[1])
    for route, on in pairs(m[2]) do
      local list = on and add or rem
      list[route] = list[route] or {}
      local l = list[route]
      if on then l[#l + 1] = v end
      l[#l + 1] = tenant
    end
  end
  for route, l in pairs(add) do redis.call('ZADD', akey(S, route), unpack(l)) end
  for route, l in pairs(rem) do redis.call('ZREM', akey(S, route), unpack(l)) end
end
-- The start's reply (one to six values) as six, after `out[at]`.
local function put_start_reply(out, at, a, b, c, d, e, f)
  out[at + 1], out[at + 2], out[at + 3], out[at + 4], out[at + 5], out[at + 6] = a, b or '', c or '', d or '', e or '', f or ''
end
-- Reads up to `k` entries of the tenant's lanes in `lanes` (by priority),
-- appending them to `out`, and corrects each lane's count, adding the
-- changed count fields to `fields` (written with the tenant's counters).
-- Returns how many were read and by how much the tenant's queued count
-- changed.
local LANE_NAMES = {'1', '2', '3'}
local function read_lanes(S, group, consumer, tenant, lanes, k, do_start, task_prefix, out, fields)
  local got, change, sandboxed = 0, 0, 0
  for lane = 1, 3 do
    for _, l in ipairs(lanes[lane]) do
      if got >= k then break end
      local route, n = l[1], l[3]
      local key = lkey(S, tenant, route, lane)
      local want = math.min(k - got, n)
      local reply = with_group(key, group, 'XREADGROUP', 'GROUP', group, consumer, 'COUNT', want, 'STREAMS', key, '>')
      local read = 0
      if reply then
        for _, entry in ipairs(reply[1][2]) do
          local id = entry_task(entry)
          if not do_start then
            out[#out + 1] = {LANE_NAMES[lane], entry[1], id, tenant, route}
          else
            -- Starting, the rows are flat: no table per entry.
            local n = #out
            out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5] = LANE_NAMES[lane], entry[1], id, tenant, route
            if id == '' then
              put_start_reply(out, n + 5, 'malformed')
            else
              put_start_reply(out, n + 5, start(task_prefix .. '{' .. id .. '}', id, false, entry[1], tenant))
            end
          end
          read = read + 1
        end
      end
      got = got + read
      if holds_sandbox(route) then sandboxed = sandboxed + read end
      -- Fewer than asked: the lane is empty, whatever its count said.
      local left = n - read
      if read < want then left = 0 end
      if left ~= n then
        fields[#fields + 1] = lane .. ':' .. route
        fields[#fields + 1] = left
        ROUTE_ACC[route] = (ROUTE_ACC[route] or 0) + left - n
        change = change + left - n
        l[3] = left
      end
    end
  end
  return got, change, sandboxed
end
local function take_turns(S, group, consumer, wanted, do_start, task_prefix, c)
  local out = {}
  local routes, served = served_routes(S, c)
  local clock0 = tonumber(redis.call('HGET', S .. 'sched', 'clock')) or 0
  local clock, moved = clock0, {}
  local depth = window(wanted)
  local heap, edge = order_of(S, routes, depth)
  local guard = 2 * wanted + 16
  while wanted > 0 and guard > 0 do
    guard = guard - 1
    local top = heap_pop(heap)
    if edge and (not top or top[2] > edge) then
      write_order(S, moved)
      moved = {}
      heap, edge = order_of(S, routes, depth)
      top = heap_pop(heap)
    end
    if not top then break end
    local tenant, vt = top[1], top[2]
    local next_vt = heap[1] and heap[1][2]
    if edge and (not next_vt or edge < next_vt) then next_vt = edge end
    local t = tkey(S, tenant)
    local st, all = state_of(S, tenant)
    local weight, max, running = tonumber(st.weight) or 1, tonumber(st.max) or 0, tonumber(st.running) or 0
    local stride = STRIDE_UNIT / math.max(weight, 1)
    -- Under max_sandboxes, a turn takes at most the sandbox slots left,
    -- and none of the sandbox routes once they are taken.
    local maxsb, sandboxed = tonumber(st.maxsb) or 0, tonumber(st.sandboxed) or 0
    local sb_left = maxsb > 0 and math.max(maxsb - sandboxed, 0) or nil
    local lanes, queued, sb_lanes = {{}, {}, {}}, 0, false
    for _, l in ipairs(all) do
      if l[3] > 0 and served[l[1]] and (sb_left ~= 0 or not holds_sandbox(l[1])) then
        local list = lanes[l[2]]
        list[#list + 1] = l
        queued = queued + l[3]
        sb_lanes = sb_lanes or (sb_left and holds_sandbox(l[1]))
      end
    end
    local k = math.min(wanted, queued)
    if max > 0 then k = math.min(k, max - running) end
    if sb_lanes then k = math.min(k, sb_left) end
    if st.paused then k = 0 end
    if next_vt then k = math.min(k, math.floor((next_vt - vt) / stride) + TURN_TASKS) end
    local fields = {}
    local got, change, sb_got = read_lanes(S, group, consumer, tenant, lanes, k, do_start, task_prefix, out, fields)
    if sb_got > 0 then
      fields[#fields + 1] = 'sandboxed'
      fields[#fields + 1] = sandboxed + sb_got
    end
    if got > 0 or change ~= 0 then
      fields[#fields + 1] = 'queued'
      fields[#fields + 1] = (tonumber(st.queued) or 0) + change
      SHARD_ACC.queued = (SHARD_ACC.queued or 0) + change
      if got > 0 then
        vt = vt + got * stride
        fields[#fields + 1] = 'running'
        fields[#fields + 1] = running + got
        fields[#fields + 1] = 'vt'
        fields[#fields + 1] = num(vt)
        SHARD_ACC.running = (SHARD_ACC.running or 0) + got
        if st.busy ~= '1' then
          redis.call('SADD', S .. 'busy', tenant)
          fields[#fields + 1] = 'busy'
          fields[#fields + 1] = '1'
        end
        if top[2] > clock then clock = top[2] end
      end
      redis.call('HSET', t, unpack(fields))
    end
    -- What `activate` would find: the tenant stays in the sets of its routes
    -- with queued entries unless its limit is reached.
    st.sandboxed = sandboxed + sb_got
    local blocked, sb_full = held_back(st, running + got)
    local on, again = {}, false
    for _, l in ipairs(all) do
      on[l[1]] = on[l[1]] or (not blocked and l[3] > 0 and not (sb_full and holds_sandbox(l[1])))
      again = again or (on[l[1]] and served[l[1]] == true)
    end
    moved[tenant] = {vt, on}
    if again then heap_push(heap, {tenant, vt}) end
    wanted = wanted - got
  end
  write_order(S, moved)
  if clock > clock0 then redis.call('HSET', S .. 'sched', 'clock', num(clock)) end
  flush(S)
  return out
end
"#;

pub(super) fn fair_script(body: &str) -> Script {
    Script::new(&format!("{FAIR_FN}\n{body}"))
}

/// Puts tasks into their tenants' lanes (or the due set) on one shard and
/// lets those tenants take turns, shared by [`ENQUEUE`] and
/// `super::singles::SUBMIT_SINGLES`: `S` the shard base, `group` the group,
/// `now` epoch ms, then from `args[first]` per task `tenant, weight,
/// max_running (0 none), lane index, task id, due ms (0 now), route`
/// ([`ENQUEUE_GROUP`] values). A tenant's settings are written with its
/// tasks, so a restart with new settings takes effect at the next submit.
/// Returns how many went into lanes.
pub(super) const ENQUEUE_FN: &str = r#"
local function enqueue(S, group, now, args, first, read)
  -- Per tenant touched, in order: its hash read once (or as `read` gives
  -- it), the lanes it had by field, the routes its tasks go to, and
  -- whether its settings changed; its counters are written in one `HSET`.
  local tenants, order = {}, {}
  local queued = 0
  local into_due, due_order = {}, {}
  for a = first, #args, 7 do -- ENQUEUE_GROUP
    local tenant, lane, id, due, route = args[a], tonumber(args[a + 3]), args[a + 4], tonumber(args[a + 5]), args[a + 6]
    local t = tenants[tenant]
    if not t then
      local st, lanes
      if read and read[tenant] then
        st, lanes = read[tenant][1], read[tenant][2]
      else
        st, lanes = state_of(S, tenant)
      end
      t = {st = st, lanes = lanes, by_field = {}, routes = {}, added = 0}
      for _, l in ipairs(lanes) do t.by_field[l[2] .. ':' .. l[1]] = l end
      -- A tenant with a lane was put in the shard's tenants when it was made.
      if #lanes == 0 then redis.call('SADD', S .. 'tenants', tenant) end
      if st.weight ~= args[a + 1] or st.max ~= args[a + 2] then
        set_settings(S, tenant, args[a + 1], args[a + 2])
        st.weight, st.max = args[a + 1], args[a + 2]
        t.changed = true
      end
      tenants[tenant] = t
      order[#order + 1] = tenant
    end
    if due > now then
      redis.call('ZADD', S .. 'due', due, lane .. ':' .. tenant .. ':' .. route .. ':' .. id)
      local key = tenant .. '\0' .. lane
      if not into_due[key] then
        into_due[key] = {tenant, lane, 0}
        due_order[#due_order + 1] = into_due[key]
      end
      into_due[key][3] = into_due[key][3] + 1
    else
      local field = lane .. ':' .. route
      local l = t.by_field[field]
      if not l then
        make_group(lkey(S, tenant, route, lane), group)
        l = {route, lane, 0}
        t.by_field[field] = l
        t.lanes[#t.lanes + 1] = l
      end
      redis.call('XADD', lkey(S, tenant, route, lane), '*', 't', id)
      if not l.before then l.before = l[3] end
      l[3] = l[3] + 1
      t.routes[route] = true
      t.added = t.added + 1
      ROUTE_ACC[route] = (ROUTE_ACC[route] or 0) + 1
      queued = queued + 1
    end
  end
  for _, d in ipairs(due_order) do bump_delayed(S, d[1], d[2], d[3]) end
  local clock
  for _, tenant in ipairs(order) do
    local t = tenants[tenant]
    local st = t.st
    if t.added > 0 then
      st.queued = tostring((tonumber(st.queued) or 0) + t.added)
      SHARD_ACC.queued = (SHARD_ACC.queued or 0) + t.added
      local fields = {'queued', st.queued}
      -- How many each route had before, to know whether it was active.
      local had = {}
      for _, l in ipairs(t.lanes) do
        if l.before then
          fields[#fields + 1] = l[2] .. ':' .. l[1]
          fields[#fields + 1] = l[3]
        end
        had[l[1]] = (had[l[1]] or 0) + (l.before or l[3])
      end
      redis.call('HSET', tkey(S, tenant), unpack(fields))
      -- A tenant whose settings stayed, whose routes all had queued
      -- entries, and whose virtual time the clock does not move is already
      -- where `activate` would put it.
      local same = not t.changed
      for route in pairs(t.routes) do same = same and had[route] > 0 end
      if same then
        clock = clock or tonumber(redis.call('HGET', S .. 'sched', 'clock')) or 0
        local vt = tonumber(st.vt) or 0
        same = vt >= clock - HEAD_START * STRIDE_UNIT / math.max(tonumber(st.weight) or 1, 1)
      end
      if not same then activate(S, tenant, st, t.lanes) end
    else
      activate(S, tenant)
    end
  end
  flush(S)
  if queued > 0 then wake(S) end
  return queued
end
"#;

/// Arguments per task of [`ENQUEUE`].
pub const ENQUEUE_GROUP: usize = 7;

/// Puts tasks into their tenants' lanes (or the due set) on one shard
/// ([`ENQUEUE_FN`]). `KEYS[1]` the shard's `sched`; `ARGV[1]` the shard
/// base, `ARGV[2]` the group, `ARGV[3]` now (epoch ms); then per task the
/// [`ENQUEUE_GROUP`] values. Returns how many went into lanes.
pub static ENQUEUE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{FAIR_FN}\n{ENQUEUE_FN}\n{}",
        r#"
return enqueue(ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV, 4)
"#
    ))
});

/// Writes tenants' settings on one shard (at start, from the config file)
/// and lets a tenant whose limit rose take turns again. `KEYS[1]` the
/// shard's `sched`; `ARGV[1]` the shard base; then per tenant
/// `tenant, weight, max_running (0 none), max_sandboxes (0 none)`
/// ([`SETTINGS_GROUP`] values). Only here is `maxsb` written: it changes
/// with the config file, at a process's start.
pub static SET_SETTINGS: LazyLock<Script> = LazyLock::new(|| {
    fair_script(
        r#"
local S = ARGV[1]
for a = 2, #ARGV, 4 do -- SETTINGS_GROUP
  set_settings(S, ARGV[a], ARGV[a + 1], ARGV[a + 2])
  if (tonumber(ARGV[a + 3]) or 0) > 0 then
    redis.call('HSET', tkey(S, ARGV[a]), 'maxsb', ARGV[a + 3])
  else
    redis.call('HDEL', tkey(S, ARGV[a]), 'maxsb')
  end
  activate(S, ARGV[a])
end
wake(S)
return 0
"#,
    )
});

/// Arguments per tenant of [`SET_SETTINGS`].
pub const SETTINGS_GROUP: usize = 4;

/// Holds a tenant back from turns until a time (it spent its
/// `max_tokens_per_day`): its queued tasks stay queued, and the promoter's
/// pass at or after that time ([`PROMOTE`]) lets it take turns again.
/// `KEYS[1]` the shard's `sched`; `ARGV[1]` the shard base, `ARGV[2]` the
/// tenant, `ARGV[3]` until (epoch ms).
pub static PAUSE: LazyLock<Script> = LazyLock::new(|| {
    fair_script(
        r#"
local S, tenant = ARGV[1], ARGV[2]
redis.call('HSET', tkey(S, tenant), 'paused', ARGV[3])
redis.call('ZADD', S .. 'paused', ARGV[3], tenant)
activate(S, tenant)
flush(S)
return 0
"#,
    )
});

/// Takes turns on one shard without starting the tasks (a cluster starts
/// them on their own slots next). `KEYS[1]` the shard's `sched`; `ARGV[1]`
/// the shard base, `ARGV[2]` the group, `ARGV[3]` the consumer, `ARGV[4]`
/// the most entries, `ARGV[5..7]` the consumer's capabilities (sandbox,
/// pipelines, labels). Returns what `take_turns` returns.
pub static CLAIM_TURNS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{PRELUDE}\n{START_FN}\n{FAIR_FN}\n{TURNS_FN}\n{}",
        r#"
return take_turns(ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), false, '', capabilities(ARGV[5], ARGV[6], ARGV[7]))
"#
    ))
});

/// Values per entry in [`CLAIM_AND_START`]'s reply.
pub const CLAIM_ROW: usize = 11;

/// Takes turns and starts the tasks in one step, on a single server.
/// `ARGV[1..7]` as [`super::scripts::START`] reads them; `ARGV[8]` the
/// group, `ARGV[9]` the most entries, `ARGV[10]` the task key prefix,
/// `ARGV[11]` the shard base, `ARGV[12..14]` the consumer's capabilities.
/// `KEYS[1]` the shard's `sched`. Returns one flat list: per entry
/// [`CLAIM_ROW`] values, its lane index, entry id, task id, tenant and route,
/// then the start's reply with `''` after its last value.
pub static CLAIM_AND_START: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{PRELUDE}\n{START_FN}\n{FAIR_FN}\n{TURNS_FN}\n{}",
        r#"
return holding_feed(function()
  return take_turns(ARGV[11], ARGV[8], ARGV[4], tonumber(ARGV[9]), true, ARGV[10], capabilities(ARGV[12], ARGV[13], ARGV[14]))
end)
"#
    ))
});

/// Acknowledges entries of one shard and counts outcomes. `KEYS[1]` the
/// shard's `sched`, `KEYS[2]` the shard's outcome counts; `ARGV[1]` the
/// shard base, `ARGV[2]` the group; then per entry `tenant, route, lane
/// index, entry id, outcome (or empty)`. An outcome is counted only for an
/// entry this call acknowledged.
pub static ACK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{FAIR_FN}\n{SETTLE_FN}\n{}",
        r#"
local entries, counts = {}, {}
for a = 3, #ARGV, 5 do
  entries[#entries + 1] = {ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]}
end
local acks = new_acks()
local freed = ack_counting(ARGV[1], ARGV[2], entries, counts, acks)
settle(ARGV[1], ARGV[2], acks, freed)
for outcome, n in pairs(counts) do redis.call('HINCRBY', KEYS[2], outcome, n) end
return #entries
"#
    ))
});

/// Takes over, for `ARGV[3]`, up to `ARGV[5]` entries of one shard pending
/// longer than `ARGV[4]` ms on routes the consumer serves (capabilities in
/// `ARGV[6..8]`): their worker is presumed dead. Only tenants in `busy` are
/// looked at (every tenant with entries pending is; one with none leaves it
/// here). `KEYS[1]` the shard's `sched`; `ARGV[1]`
/// the shard base, `ARGV[2]` the group. The entries keep their slot of
/// `running`. Returns `{lane index, entry id, task id, tenant, route}` per
/// entry.
pub static RECLAIM: LazyLock<Script> = LazyLock::new(|| {
    fair_script(
        r#"
local S, group, consumer, idle, wanted = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local c = capabilities(ARGV[6], ARGV[7], ARGV[8])
local out = {}
for _, tenant in ipairs(redis.call('SMEMBERS', S .. 'busy')) do
  local st, lanes = state_of(S, tenant)
  -- `busy` is left lazily: a tenant with nothing delivered leaves it here.
  if (tonumber(st.running) or 0) <= 0 then
    redis.call('SREM', S .. 'busy', tenant)
    redis.call('HSET', tkey(S, tenant), 'busy', '0')
    lanes = {}
  end
  for _, l in ipairs(lanes) do
    if wanted <= 0 then return out end
    if serves(c, l[1]) then
      local key = lkey(S, tenant, l[1], l[2])
      local reply = with_group(key, group, 'XAUTOCLAIM', key, group, consumer, idle, '0-0', 'COUNT', wanted)
      for _, entry in ipairs(reply[2]) do
        out[#out + 1] = {tostring(l[2]), entry[1], entry_task(entry), tenant, l[1]}
        wanted = wanted - 1
      end
    end
  end
end
return out
"#,
    )
});

/// Moves due tasks of one shard into their tenants' lanes, lets
/// tenants held back by [`PAUSE`] until now take turns again, and gives
/// back the sandbox slots of kept-alive sandboxes past their deadline (see
/// [`super::kept`]). `KEYS[1]` the
/// shard's `sched`; `ARGV[1]` the shard base, `ARGV[2]` the group,
/// `ARGV[3]` now, `ARGV[4]` the most to move. Returns how many moved.
pub static PROMOTE: LazyLock<Script> = LazyLock::new(|| {
    fair_script(
        r#"
local S, group = ARGV[1], ARGV[2]
local expired = redis.call('ZRANGE', S .. 'kept', '-inf', ARGV[3], 'BYSCORE')
if #expired > 0 then
  redis.call('ZREM', S .. 'kept', unpack(expired))
  for _, k in ipairs(expired) do
    local tenant = string.match(k, '^([^:]+):')
    if tenant then
      redis.call('HINCRBY', tkey(S, tenant), 'sandboxed', -1)
      activate(S, tenant)
    end
  end
end
local back = redis.call('ZRANGE', S .. 'paused', '-inf', ARGV[3], 'BYSCORE')
if #back > 0 then
  redis.call('ZREM', S .. 'paused', unpack(back))
  for _, tenant in ipairs(back) do
    redis.call('HDEL', tkey(S, tenant), 'paused')
    activate(S, tenant)
  end
end
local members = redis.call('ZRANGE', S .. 'due', '-inf', ARGV[3], 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[4]))
local touched = {}
for _, m in ipairs(members) do
  local lane, tenant, route, id = string.match(m, '^(%d):([^:]+):([^:]+):(.+)$')
  if lane then
    lane = tonumber(lane)
    redis.call('SADD', S .. 'tenants', tenant)
    ensure_lane(S, group, tenant, route, lane)
    redis.call('XADD', lkey(S, tenant, route, lane), '*', 't', id)
    bump_delayed(S, tenant, lane, -1)
    bump_queued(S, tenant, route, lane, 1)
    touched[tenant] = true
  end
end
if #members > 0 then redis.call('ZREM', S .. 'due', unpack(members)) end
for tenant in pairs(touched) do activate(S, tenant) end
flush(S)
if #members > 0 or #back > 0 or #expired > 0 then wake(S) end
return #members
"#,
    )
});

/// Drops acknowledged entries from the head of the lanes of tenants marked
/// since the last pass (everything before the oldest pending entry, or,
/// with none pending, everything delivered), whole listpack nodes at a
/// time. `KEYS[1]` the shard's `sched`; `ARGV[1]` the shard base,
/// `ARGV[2]` the group. Returns how many entries went.
pub static TRIM: LazyLock<Script> = LazyLock::new(|| {
    fair_script(
        r#"
local S, group = ARGV[1], ARGV[2]
local trimmed = 0
local tenants = redis.call('SMEMBERS', S .. 'trim')
redis.call('DEL', S .. 'trim')
for _, tenant in ipairs(tenants) do
  for _, l in ipairs(lanes_of(S, tenant)) do
    local key = lkey(S, tenant, l[1], l[2])
    if redis.call('EXISTS', key) == 1 then
      local pending = with_group(key, group, 'XPENDING', key, group)
      local floor
      if pending[1] > 0 then
        floor = pending[2]
      else
        for _, g in ipairs(redis.call('XINFO', 'GROUPS', key)) do
          local name, last
          for i = 1, #g, 2 do
            if g[i] == 'name' then name = g[i + 1] end
            if g[i] == 'last-delivered-id' then last = g[i + 1] end
          end
          if name == group then floor = last end
        end
      end
      if floor and floor ~= '0-0' then trimmed = trimmed + redis.call('XTRIM', key, 'MINID', '~', floor) end
    end
  end
end
return trimmed
"#,
    )
});

/// Removes, on one shard, the consumers idle longer than `ARGV[3]` ms that
/// hold no pending entry (workers gone for good) from every tenant's lanes.
/// `KEYS[1]` the shard's `sched`; `ARGV[1]` the shard base, `ARGV[2]` the
/// group. Returns the names removed.
pub static FORGET_GONE_CONSUMERS: LazyLock<Script> = LazyLock::new(|| {
    fair_script(
        r#"
local S, group, after = ARGV[1], ARGV[2], tonumber(ARGV[3])
local removed, seen = {}, {}
for _, tenant in ipairs(redis.call('SMEMBERS', S .. 'tenants')) do
  for _, l in ipairs(lanes_of(S, tenant)) do
    local key = lkey(S, tenant, l[1], l[2])
    if redis.call('EXISTS', key) == 1 then
      for _, consumer in ipairs(with_group(key, group, 'XINFO', 'CONSUMERS', key, group)) do
        local name, pending, idle
        for i = 1, #consumer, 2 do
          if consumer[i] == 'name' then name = consumer[i + 1] end
          if consumer[i] == 'pending' then pending = consumer[i + 1] end
          if consumer[i] == 'idle' then idle = consumer[i + 1] end
        end
        if name and pending == 0 and idle > after then
          redis.call('XGROUP', 'DELCONSUMER', key, group, name)
          if not seen[name] then
            seen[name] = true
            removed[#removed + 1] = name
          end
        end
      end
    end
  end
end
return removed
"#,
    )
});

/// Puts a task handed back for retry into one shard's due set.
/// `KEYS[1]` the shard's `sched`; `ARGV[1]` the shard base, `ARGV[2]` the
/// tenant, `ARGV[3]` lane index, `ARGV[4]` task id, `ARGV[5]` due ms,
/// `ARGV[6]` the task's route.
pub static DEFER: LazyLock<Script> = LazyLock::new(|| {
    fair_script(
        r#"
local S, tenant = ARGV[1], ARGV[2]
if redis.call('ZADD', S .. 'due', ARGV[5], ARGV[3] .. ':' .. tenant .. ':' .. ARGV[6] .. ':' .. ARGV[4]) == 1 then
  bump_delayed(S, tenant, ARGV[3], 1)
end
flush(S)
return 0
"#,
    )
});

/// Arguments per ended task of [`FINISH_AND_ACK`]: its context's number,
/// task id, attempt, event body (after its seq), `finished_at`, entry id
/// and the value of its context's field.
pub const FINISH_AND_ACK_GROUP: usize = 7;

/// Arguments per context of [`FINISH_AND_ACK`], what many ended tasks
/// share: worker id, status, code, field (`result` or `error`, or empty),
/// tenant, batch (or empty), route, lane index.
pub const FINISH_CONTEXT: usize = 8;

/// Ends owning attempts, acknowledges their entries and counts their
/// outcomes in one step, so a task is counted exactly when it ends and its
/// tenant's slot frees with it; on a single server only (the tasks' keys
/// and the shard's are in one call). Each ended task's outcome is counted
/// in its tenant's usage of the day in the same step (and in its all-time
/// totals when those are kept). Instead of a TTL each, the ended tasks
/// go into the ended stream as one entry. `KEYS[1]` the shard's
/// `sched`, `KEYS[2]` the shard's outcome counts, `KEYS[3]` the ended stream,
/// then the key of each ended task. `ARGV[1]` the channel prefix,
/// `ARGV[2]` retention ms (unused here), `ARGV[3]` the group, `ARGV[4]` how
/// many tasks end, `ARGV[5]` the shard base, `ARGV[6]` and `ARGV[7]` a usage
/// day key's text before and after its tenant, `ARGV[8]` the day key's TTL
/// in seconds (set when a count makes the key), `ARGV[9]` the totals key's
/// text after its tenant (empty when totals are not kept), `ARGV[10]` the
/// number of contexts and from `ARGV[11]` [`FINISH_CONTEXT`] values each
/// (what many ended tasks share, so it is sent and read once); then
/// [`FINISH_AND_ACK_GROUP`] values per ended task; after them, entries to
/// acknowledge only, as `tenant, route, lane index, entry id, outcome (or
/// empty)`, whose outcome is counted only if this call acknowledged the
/// entry. An entry whose task another attempt owns is left pending.
/// Returns per ended task the terminal event's seq, or -1 when fenced.
pub static FINISH_AND_ACK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{PRELUDE}\n{FINISH_FN}\n{FAIR_FN}\n{SETTLE_FN}\n{}",
        r#"
return holding_feed(function()
local acks, counts, finished, used = new_acks(), {}, {}, {}
local function count(outcome)
  if outcome ~= '' then counts[outcome] = (counts[outcome] or 0) + 1 end
end
local function use(tenant, outcome)
  local of = used[tenant]
  if not of then
    of = {}
    used[tenant] = of
  end
  of[outcome] = (of[outcome] or 0) + 1
end
local ended = tonumber(ARGV[4])
-- Where each context's values start, by its number as the tasks name it.
local contexts = tonumber(ARGV[10])
local context_at = {}
for n = 1, contexts do context_at[tostring(n)] = 11 + (n - 1) * 8 end -- FINISH_CONTEXT
local first = 11 + contexts * 8
local replies = {}
for i = 1, ended do
  local a = first + (i - 1) * 7 -- FINISH_AND_ACK_GROUP
  local c = context_at[ARGV[a]]
  local id, tenant, status = ARGV[a + 1], ARGV[c + 4], ARGV[c + 1]
  replies[i] = finish(KEYS[3 + i], id, ARGV[a + 2], ARGV[c], ARGV[a + 3], status, ARGV[c + 2], ARGV[c + 3], ARGV[a + 6],
    ARGV[a + 4], tenant, ARGV[c + 5], false)
  if replies[i] ~= -1 then
    add_ack(acks, tenant, ARGV[c + 6], ARGV[c + 7], ARGV[a + 5])
    count(status)
    use(tenant, status)
    finished[#finished + 1] = id
  end
end
for tenant, of in pairs(used) do
  local day = ARGV[6] .. tenant .. ARGV[7]
  for outcome, n in pairs(of) do
    if redis.call('HINCRBY', day, 'tasks:' .. outcome, n) == n then redis.call('EXPIRE', day, ARGV[8]) end
    if ARGV[9] ~= '' then redis.call('HINCRBY', ARGV[6] .. tenant .. ARGV[9], 'tasks:' .. outcome, n) end
  end
end
local only_acks = {}
for j = first + ended * 7, #ARGV, 5 do
  only_acks[#only_acks + 1] = {ARGV[j], ARGV[j + 1], ARGV[j + 2], ARGV[j + 3], ARGV[j + 4]}
end
local freed = ack_counting(ARGV[5], ARGV[3], only_acks, counts, acks)
settle(ARGV[5], ARGV[3], acks, freed)
for outcome, n in pairs(counts) do redis.call('HINCRBY', KEYS[2], outcome, n) end
if #finished > 0 then redis.call('XADD', KEYS[3], '*', 't', table.concat(finished, ' ')) end
return replies
end)
"#
    ))
});
