local LANES = { 'high', 'normal', 'low' }
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
      lanes[#lanes + 1] = { string.sub(all[i], 3), first - 48, tonumber(all[i + 1]) or 0 }
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
  if not st then
    st, lanes = state_of(S, tenant)
  end
  local blocked, sb_full = held_back(st, tonumber(st.running) or 0)
  local per_route = {}
  for _, l in ipairs(lanes) do
    per_route[l[1]] = (per_route[l[1]] or 0) + l[3]
  end
  local v
  for route, n in pairs(per_route) do
    if blocked or n <= 0 or (sb_full and holds_sandbox(route)) then
      redis.call('ZREM', akey(S, route), tenant)
    else
      if not v then
        local vt = tonumber(st.vt) or 0
        local clock = tonumber(redis.call('HGET', S .. 'sched', 'clock')) or 0
        v = math.max(vt, clock - HEAD_START_TURNS * STRIDE_UNIT / math.max(tonumber(st.weight) or 1, 1))
        if v ~= vt then redis.call('HSET', t, 'vt', num(v)) end
      end
      redis.call('ZADD', akey(S, route), num(v), tenant)
    end
  end
end
-- Tells idle workers that tasks went into lanes: one member, so however
-- many tasks came in, one command and one waiting worker woken.
local function wake(S) redis.call('ZADD', S .. 'wake', 0, 'ready') end
local function capabilities(sandbox, pipelines, labels)
  local c = { sandbox = sandbox, pipelines = {}, labels = {} }
  for p in string.gmatch(pipelines, '[^,]+') do
    c.pipelines[p] = true
  end
  for l in string.gmatch(labels, '[^,]+') do
    c.labels[l] = true
  end
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
