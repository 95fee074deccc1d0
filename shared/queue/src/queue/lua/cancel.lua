-- after: prelude.lua unpark_fn.lua
local cur = redis.call('HMGET', KEYS[1], 'status', 'tenant', 'hdr', 'batch', 'seq')
if not cur[1] or cur[2] ~= ARGV[5] then return 'missing' end
if is_terminal(cur[1]) then return cur[1] end
-- A woken parked task waits for a worker to take it up in its paused
-- sandbox: that worker ends it, and the sandbox with it.
if cur[1] == 'queued' and redis.call('HGET', KEYS[1], 'parked') == 'woken' then
  redis.call('HSET', KEYS[1], 'halt', '1')
  return 'cancelling'
end
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
-- A parked task has no attempt to hear the cancel: the one it is handed to
-- hears it as it takes the task up (`take_input.lua`), and ends its sandbox.
local unparked = unpark(KEYS[1])
if unparked then
  redis.call('HSET', KEYS[1], 'halt', '1')
  return unparked
end
redis.call('HSET', KEYS[1], 'cancel', '1')
return 'cancelling'
