if redis.call('HGET', KEYS[1], 'seq') ~= ARGV[1] then return 0 end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
redis.call('DEL', KEYS[1])
return 1
