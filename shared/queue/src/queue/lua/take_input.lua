local cur = redis.call('HMGET', KEYS[1], 'attempt', 'owner', 'status', 'input', 'takeover', 'released', 'halt')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then return { 'fenced', '' } end
if cur[3] ~= 'waiting' then return { 'fenced', '' } end
if cur[7] == '1' then
  -- Cancelled while parked: the attempt that took it up ends it.
  redis.call('HDEL', KEYS[1], 'halt', 'parked')
  redis.call('HSET', KEYS[1], 'cancel', '1')
  return { 'cancel', '' }
end
if not cur[4] or cur[5] == '1' then return { 'none', '' } end
redis.call('HDEL', KEYS[1], 'input', 'code', 'released', 'parked')
redis.call('HSET', KEYS[1], 'status', 'running')
if cur[6] == '1' then return { 'release', cur[4] } end
return { 'input', cur[4] }
