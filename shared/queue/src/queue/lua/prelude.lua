local CHANNELS = ARGV[1]
local FEED = string.byte(CHANNELS, -1) == 43
if FEED then CHANNELS = string.sub(CHANNELS, 1, -2) end
-- A tenant's feed stream and channel, made once per call.
local TENANT_KEYS = {}
local function tenant_keys(tenant)
  local k = TENANT_KEYS[tenant]
  if not k then
    k = { CHANNELS .. 'feed:{' .. tenant .. '}', CHANNELS .. 'tenant:' .. tenant }
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
    for _, channel in ipairs(listed) do
      HEARD[channel] = true
    end
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
local function with_hdr(hdr, draft) return hdr .. ',' .. string.sub(draft, 2) end
-- The count after `current` (a decimal string, or absent for 0): after a
-- single digit from a table, else by its last digit while that is not a
-- 9, as formatting a Lua number costs several times more.
local NEXT_DIGIT =
  { ['0'] = '1', ['1'] = '2', ['2'] = '3', ['3'] = '4', ['4'] = '5', ['5'] = '6', ['6'] = '7', ['7'] = '8', ['8'] = '9' }
local function next_seq(current)
  local quick = current and NEXT_DIGIT[current]
  if quick then return quick end
  local last = current and string.byte(current, -1)
  if last and last >= 48 and last < 57 then return string.sub(current, 1, -2) .. string.char(last + 1) end
  return tostring((tonumber(current) or 0) + 1)
end
local function is_terminal(status) return status == 'succeeded' or status == 'failed' or status == 'cancelled' end
local function owns(cur, attempt, owner)
  return cur[1] == attempt and cur[2] == owner and (cur[3] == 'running' or cur[3] == 'waiting')
end
local function pairs_from(from)
  local fields = {}
  for i = from, #ARGV do
    fields[#fields + 1] = ARGV[i]
  end
  return fields
end
-- Appends the events `store` held to each tenant's feed as one entry per
-- 1 000, in the order they were stored, one event a field: `e`, `e1`, …
-- (see `super::feed`; one string of them all cost more to make).
local FEED_FIELDS = { 'e' }
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
      local args = { 'XADD', keys[1], '*' }
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
