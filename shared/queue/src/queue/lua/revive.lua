-- after: prelude.lua
local cur = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'hdr', 'batch', 'seq')
if not cur[1] or cur[2] ~= ARGV[5] then return 'missing' end
if cur[1] ~= 'failed' then return cur[1] end
redis.call('HDEL', KEYS[1], 'code', 'error', 'finished_at', 'cancel')
redis.call('PERSIST', KEYS[1])
record(
  KEYS[1],
  ARGV[2],
  cur[2],
  cur[4],
  next_seq(cur[5]),
  with_hdr(cur[3], ARGV[3]),
  'status',
  'queued',
  'attempt',
  '0',
  'owner',
  ''
)
return 'requeued'
