local now, lease, deadline, most, slots = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local out = {}
local endpoints = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[6]))
for _, ep in ipairs(endpoints) do
  if #out >= 2 * most then break end
  local queue, flight = ARGV[7] .. 'due:' .. ep, ARGV[7] .. 'inflight:' .. ep
  redis.call('ZREMRANGEBYSCORE', flight, '-inf', now)
  local room = math.min(slots - redis.call('ZCARD', flight), most - #out / 2)
  if room > 0 then
    for _, id in ipairs(redis.call('ZRANGE', queue, '-inf', now, 'BYSCORE', 'LIMIT', 0, room)) do
      redis.call('ZADD', queue, lease, id)
      redis.call('ZADD', flight, deadline, id)
      out[#out + 1] = ep
      out[#out + 1] = id
    end
  end
  local first = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
  if first[1] == nil then
    redis.call('ZREM', KEYS[1], ep)
  else
    local at = tonumber(first[2])
    if redis.call('ZCARD', flight) >= slots then
      local oldest = redis.call('ZRANGE', flight, 0, 0, 'WITHSCORES')
      at = math.max(at, tonumber(oldest[2]))
    end
    redis.call('ZADD', KEYS[1], at, ep)
  end
end
return out
