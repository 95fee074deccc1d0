-- after: fair_fn.lua
-- Entries to acknowledge, grouped by lane as they are added, with neither
-- a string nor a table per entry: tenant → route → lane index → {tenant,
-- route, lane, ids}, and the lanes in order of first appearance.
local function new_acks() return { by_lane = {}, order = {} } end
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
    l = { tenant, route, tonumber(lane), {} }
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
  for tenant in pairs(freed) do
    tenants[#tenants + 1] = tenant
  end
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
