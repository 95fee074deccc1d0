-- after: prelude.lua unpark_fn.lua
local cur = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'hdr', 'batch', 'seq', 'takeover')
if not cur[1] or cur[2] ~= ARGV[5] then return 'missing' end
if cur[1] ~= 'running' and cur[1] ~= 'waiting' then return cur[1] end
if cur[6] == '1' then return 'held' end
record(
  KEYS[1],
  ARGV[2],
  cur[2],
  cur[4],
  next_seq(cur[5]),
  with_hdr(cur[3], ARGV[3]),
  'status',
  'waiting',
  'code',
  'human-intervention',
  'takeover',
  '1'
)
return unpark(KEYS[1]) or 'taken'
