-- after: prelude.lua
-- The `started` draft without its opening brace, cut once per call.
local STARTED
local function start(key, id, reclaimed, entry, tenant)
  -- The tenant is read only when the caller does not know it.
  local st
  if tenant then
    st = redis.call('HMGET', key, 'status', 'attempt', 'max_attempts', 'cancel', 'hdr', 'batch', 'spec', 'seq', 'trace')
    st[10] = tenant
  else
    st = redis.call('HMGET', key, 'status', 'attempt', 'max_attempts', 'cancel', 'hdr', 'batch', 'spec', 'seq', 'trace', 'tenant')
  end
  if not st[1] then return 'gone' end
  if is_terminal(st[1]) then return 'terminal', st[1], redis.call('HGET', key, 'entry') or '' end
  if not reclaimed and (st[1] == 'running' or st[1] == 'waiting') then return 'duplicate' end
  local seq = next_seq(st[8])
  if st[4] == '1' then
    record(
      key,
      id,
      st[10],
      st[6],
      seq,
      with_hdr(st[5], ARGV[5]),
      'status',
      'cancelled',
      'code',
      'cancelled',
      'finished_at',
      ARGV[3],
      'owner',
      ''
    )
    redis.call('PEXPIRE', key, ARGV[7])
    return 'cancelled'
  end
  -- A task that never started has attempts left.
  if st[2] ~= '0' and tonumber(st[2]) >= tonumber(st[3]) then
    record(
      key,
      id,
      st[10],
      st[6],
      seq,
      with_hdr(st[5], ARGV[6]),
      'status',
      'failed',
      'code',
      'problem',
      'finished_at',
      ARGV[3],
      'owner',
      '',
      'error',
      'attempts exhausted: the worker running the last attempt stopped responding'
    )
    redis.call('PEXPIRE', key, ARGV[7])
    return 'dead', st[2], st[10]
  end
  local attempt = next_seq(st[2])
  if st[1] == 'waiting' then redis.call('HDEL', key, 'takeover', 'released', 'input') end
  STARTED = STARTED or string.sub(ARGV[2], 2)
  local event = '{"seq":' .. seq .. ',"attempt":' .. attempt .. ',' .. st[5] .. ',' .. STARTED
  if st[2] == '0' then
    store(
      key,
      id,
      st[10],
      st[6],
      seq,
      event,
      'status',
      'running',
      'attempt',
      attempt,
      'owner',
      ARGV[4],
      'entry',
      entry,
      'started_at',
      ARGV[3]
    )
  else
    store(key, id, st[10], st[6], seq, event, 'status', 'running', 'attempt', attempt, 'owner', ARGV[4], 'entry', entry)
  end
  return 'started', attempt, st[7], st[10], st[6] or '', st[9] or ''
end
