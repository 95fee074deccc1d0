-- after: prelude.lua
local cur = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'hdr', 'batch', 'seq')
if not cur[1] or cur[2] ~= ARGV[5] then return 'missing' end
if is_terminal(cur[1]) then return cur[1] end
if cur[1] == 'queued' then
  record(
    KEYS[1],
    ARGV[2],
    cur[2],
    cur[4],
    next_seq(cur[5]),
    with_hdr(cur[3], ARGV[3]),
    'status',
    'cancelled',
    'code',
    'cancelled',
    'finished_at',
    ARGV[4]
  )
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  return 'now-cancelled'
end
redis.call('HSET', KEYS[1], 'cancel', '1')
return 'cancelling'
