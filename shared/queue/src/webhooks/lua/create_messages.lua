local now, ttl, most, tenant = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local made, logs, seen = 0, {}, {}
for i = 0, (#KEYS - 1) / MESSAGE_KEYS - 1 do
  local msg, queue, log = KEYS[2 + MESSAGE_KEYS * i], KEYS[3 + MESSAGE_KEYS * i], KEYS[4 + MESSAGE_KEYS * i]
  local a = 5 + MESSAGE_GROUP * i
  if redis.call('EXISTS', msg) == 0 then
    redis.call(
      'HSET',
      msg,
      'tenant',
      tenant,
      'endpoint',
      ARGV[a + 1],
      'type',
      ARGV[a + 2],
      'body',
      ARGV[a + 3],
      'status',
      'pending',
      'attempts',
      '0',
      'created_at',
      now,
      'next_at',
      now
    )
    redis.call('PEXPIRE', msg, ttl)
    redis.call('ZADD', queue, now, ARGV[a])
    redis.call('ZADD', log, 0, ARGV[a])
    if not seen[log] then
      seen[log] = true
      logs[#logs + 1] = { log, ARGV[a + 1] }
    end
    made = made + 1
  end
end
for _, l in ipairs(logs) do
  redis.call('ZADD', KEYS[1], 'LT', now, l[2])
  local extra = redis.call('ZCARD', l[1]) - most
  if extra > 0 then redis.call('ZREMRANGEBYRANK', l[1], 0, extra - 1) end
  redis.call('PEXPIRE', l[1], ttl)
end
return made
