-- after: prelude.lua
local function finish(key, id, attempt, owner, body, status, code, field, value, at, tenant, batch, expire)
  local cur = redis.call('HMGET', key, 'attempt', 'owner', 'status', 'cancel', 'seq')
  if not owns(cur, attempt, owner) then return -1 end
  local seq = next_seq(cur[5])
  -- `owner` stays: a terminal status already fences every later write.
  -- An ended task is never taken up again: its step journal goes too.
  redis.call('HDEL', key, 'cancel', 'journal')
  if field ~= '' then
    record(key, id, tenant, batch, seq, body, 'status', status, 'code', code, 'finished_at', at, field, value)
  else
    record(key, id, tenant, batch, seq, body, 'status', status, 'code', code, 'finished_at', at)
  end
  if expire then redis.call('PEXPIRE', key, ARGV[2]) end
  return seq
end
