-- after: unpark_fn.lua
local cur = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'takeover')
if not cur[1] or cur[2] ~= ARGV[1] then return 'missing' end
if cur[1] ~= 'waiting' then return cur[1] end
if cur[3] == '1' then return 'taken over' end
redis.call('HSET', KEYS[1], 'input', ARGV[2])
return unpark(KEYS[1]) or 'accepted'
