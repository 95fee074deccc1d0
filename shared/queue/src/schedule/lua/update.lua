if redis.call('HGET', KEYS[1], 'tenant') ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 4))
if ARGV[3] == '' then
  redis.call('ZREM', KEYS[2], ARGV[1])
elseif (redis.call('HGET', KEYS[1], 'pending') or '') == '' then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
end
return 1
