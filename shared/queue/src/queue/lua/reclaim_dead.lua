-- after: fair_fn.lua
-- Workers whose liveness ran out (`alive` scores are expiry times, ms) are
-- dead: their pending entries on routes this consumer serves are taken at
-- once, without waiting out the lease. A dead worker with nothing left to
-- take leaves `alive`.
local S, group, consumer, wanted = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local c = capabilities(ARGV[5], ARGV[6], ARGV[7])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for _, worker in ipairs(redis.call('ZRANGEBYSCORE', S .. 'alive', '-inf', now)) do
  if worker ~= consumer then
    local left = false
    for _, tenant in ipairs(redis.call('SMEMBERS', S .. 'busy')) do
      local _, lanes = state_of(S, tenant)
      for _, l in ipairs(lanes) do
        local key = lkey(S, tenant, l[1], l[2])
        local pending = with_group(key, group, 'XPENDING', key, group, '-', '+', 100, worker)
        for _, p in ipairs(pending) do
          if wanted > 0 and serves(c, l[1]) then
            for _, entry in ipairs(redis.call('XCLAIM', key, group, consumer, 0, p[1])) do
              out[#out + 1] = { tostring(l[2]), entry[1], entry_task(entry), tenant, l[1] }
              wanted = wanted - 1
            end
          else
            left = true
          end
        end
      end
    end
    if not left then redis.call('ZREM', S .. 'alive', worker) end
  end
end
return out
