-- after: prelude.lua
local cur = redis.call('HMGET', KEYS[1], 'attempt', 'owner', 'status', 'hdr', 'tenant', 'batch', 'seq', 'max_attempts')
if not owns(cur, ARGV[5], ARGV[6]) then return -1 end
redis.call('HDEL', KEYS[1], 'takeover', 'released', 'input')
return record(
  KEYS[1],
  ARGV[2],
  cur[5],
  cur[6],
  next_seq(cur[7]),
  with_hdr(cur[4], ARGV[3]),
  'status',
  'queued',
  'owner',
  '',
  'max_attempts',
  tostring((tonumber(cur[8]) or 0) + 1)
)
