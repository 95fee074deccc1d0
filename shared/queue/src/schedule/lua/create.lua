redis.call('HSET', KEYS[1], unpack(ARGV, 3))
if ARGV[2] ~= '' then redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1]) end
redis.call('ZADD', KEYS[3], 0, ARGV[1])
return 1
