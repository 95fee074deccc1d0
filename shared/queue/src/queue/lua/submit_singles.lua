-- after: prelude.lua create_fn.lua fair_fn.lua enqueue_fn.lua admit_fn.lua
return holding_feed(function()
  local S, tenant = ARGV[9], ARGV[4]
  local interval, burst, max_queued, max_tokens = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
  -- The tenant's hash (`KEYS[2]`), read once for admission and the enqueue.
  local st, lanes = state_of(S, tenant)
  local a = admission_read(KEYS[3], KEYS[4], max_tokens and KEYS[7], interval)
  local waiting = waiting_of(st.queued, st.delayed)
  -- `n` tasks admitted so far: two values each in `listed`, ENQUEUE_GROUP in `queue`.
  local verdicts, listed, queue, n = {}, {}, {}, 0
  for i = 1, #KEYS - 7 do
    local g = 13 + (i - 1) * SINGLE_GROUP
    local verdict = judge(a, 1, interval, burst, max_queued, max_tokens, waiting)
    verdicts[i] = verdict
    if verdict[1] == 'ok' then
      waiting = waiting + 1
      local id = ARGV[g]
      create(KEYS[7 + i], id, ARGV[g + 1], ARGV[g + 2], tenant, '', ARGV[g + 3], ARGV[2], ARGV[3], ARGV[g + 4])
      listed[2 * n + 1] = 0
      listed[2 * n + 2] = id
      local q = ENQUEUE_GROUP * n
      queue[q + 1], queue[q + 2], queue[q + 3], queue[q + 4] = tenant, ARGV[11], ARGV[12], ARGV[g + 5]
      queue[q + 5], queue[q + 6], queue[q + 7] = id, ARGV[g + 6], ARGV[g + 7]
      n = n + 1
    end
  end
  admission_write(a, KEYS[3])
  if n > 0 then
    redis.call('ZADD', KEYS[5], unpack(listed))
    -- A tenant with a lane was listed with its first task.
    if #lanes == 0 then redis.call('SADD', KEYS[6], tenant) end
    enqueue(S, ARGV[10], tonumber(ARGV[3]), queue, 1, { [tenant] = { st, lanes } })
  end
  return verdicts
end)
