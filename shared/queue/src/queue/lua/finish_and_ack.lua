-- after: prelude.lua finish_fn.lua fair_fn.lua settle_fn.lua
return holding_feed(function()
  local acks, counts, finished, used = new_acks(), {}, {}, {}
  local function count(outcome)
    if outcome ~= '' then counts[outcome] = (counts[outcome] or 0) + 1 end
  end
  local function use(tenant, outcome)
    local of = used[tenant]
    if not of then
      of = {}
      used[tenant] = of
    end
    of[outcome] = (of[outcome] or 0) + 1
  end
  local ended = tonumber(ARGV[4])
  -- Where each context's values start, by its number as the tasks name it.
  local contexts = tonumber(ARGV[10])
  local context_at = {}
  for n = 1, contexts do
    context_at[tostring(n)] = 11 + (n - 1) * FINISH_CONTEXT
  end
  local first = 11 + contexts * FINISH_CONTEXT
  local replies = {}
  for i = 1, ended do
    local a = first + (i - 1) * FINISH_AND_ACK_GROUP
    local c = context_at[ARGV[a]]
    local id, tenant, status = ARGV[a + 1], ARGV[c + 4], ARGV[c + 1]
    replies[i] = finish(
      KEYS[3 + i],
      id,
      ARGV[a + 2],
      ARGV[c],
      ARGV[a + 3],
      status,
      ARGV[c + 2],
      ARGV[c + 3],
      ARGV[a + 6],
      ARGV[a + 4],
      tenant,
      ARGV[c + 5],
      false
    )
    if replies[i] ~= -1 then
      add_ack(acks, tenant, ARGV[c + 6], ARGV[c + 7], ARGV[a + 5])
      count(status)
      use(tenant, status)
      finished[#finished + 1] = id
    end
  end
  for tenant, of in pairs(used) do
    local day = ARGV[6] .. tenant .. ARGV[7]
    for outcome, n in pairs(of) do
      if redis.call('HINCRBY', day, 'tasks:' .. outcome, n) == n then redis.call('EXPIRE', day, ARGV[8]) end
      if ARGV[9] ~= '' then redis.call('HINCRBY', ARGV[6] .. tenant .. ARGV[9], 'tasks:' .. outcome, n) end
    end
  end
  local only_acks = {}
  for j = first + ended * FINISH_AND_ACK_GROUP, #ARGV, ACK_GROUP do
    only_acks[#only_acks + 1] = { ARGV[j], ARGV[j + 1], ARGV[j + 2], ARGV[j + 3], ARGV[j + 4] }
  end
  local freed = ack_counting(ARGV[5], ARGV[3], only_acks, counts, acks)
  settle(ARGV[5], ARGV[3], acks, freed)
  for outcome, n in pairs(counts) do
    redis.call('HINCRBY', KEYS[2], outcome, n)
  end
  if #finished > 0 then redis.call('XADD', KEYS[3], '*', 't', table.concat(finished, ' ')) end
  return replies
end)
