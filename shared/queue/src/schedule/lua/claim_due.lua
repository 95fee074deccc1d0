local cur = redis.call('HMGET', KEYS[1], 'next_due', 'pending', 'paused')
if cur[1] ~= ARGV[2] or (cur[2] and cur[2] ~= '') or cur[3] == '1' then return 0 end
if ARGV[5] == '1' then
  redis.call('HSET', KEYS[1], 'next_due', ARGV[3], 'last_skipped_due', ARGV[4])
  redis.call('HINCRBY', KEYS[1], 'skipped', 1)
  if ARGV[3] == '' then
    redis.call('ZREM', KEYS[2], ARGV[1])
  else
    redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
  end
else
  redis.call('HSET', KEYS[1], 'next_due', ARGV[3], 'pending', ARGV[4])
  redis.call('ZADD', KEYS[2], ARGV[6], ARGV[1])
end
return 1
