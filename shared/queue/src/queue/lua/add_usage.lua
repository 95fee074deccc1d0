local cur = redis.call('HMGET', KEYS[1], 'attempt', 'owner', 'status', 'meter')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then return { 'fenced', -1, -1 } end
if cur[3] ~= 'running' and cur[3] ~= 'waiting' then return { 'fenced', -1, -1 } end
local m = {}
if cur[4] then m = cjson.decode(cur[4]) end
for i = 6, #ARGV, 2 do
  local n = tonumber(ARGV[i + 1])
  m[ARGV[i]] = (m[ARGV[i]] or 0) + n
  if KEYS[2] then redis.call('HINCRBY', KEYS[2], ARGV[i], n) end
  if KEYS[3] then redis.call('HINCRBY', KEYS[3], ARGV[i], n) end
end
if KEYS[2] and #ARGV > 5 then redis.call('EXPIRE', KEYS[2], ARGV[3]) end
local encoded = cjson.encode(m)
redis.call('HSET', KEYS[1], 'meter', encoded)
local day, cost = -1, -1
if KEYS[2] and tonumber(ARGV[4]) > 0 then day = tonumber(redis.call('HGET', KEYS[2], 'tokens') or '0') end
if KEYS[2] and tonumber(ARGV[5]) > 0 then cost = tonumber(redis.call('HGET', KEYS[2], 'cost_micros') or '0') end
return { encoded, day, cost }
