-- after: fair_fn.lua
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
for tenant in pairs(touched) do
  activate(S, tenant)
end
flush(S)
if #members > 0 or #back > 0 or #expired > 0 then wake(S) end
return #members
