if redis.call('HGET', KEYS[1], 'pending') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'pending', '', 'last_due', ARGV[2], 'last_task', ARGV[3])
local st = redis.call('HMGET', KEYS[1], 'next_due', 'paused')
if st[2] ~= '1' and st[1] and st[1] ~= '' then
  redis.call('ZADD', KEYS[2], st[1], ARGV[1])
else
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return 1
