-- after: fair_fn.lua
local S, group, consumer, idle, wanted = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local c = capabilities(ARGV[6], ARGV[7], ARGV[8])
local out = {}
for _, tenant in ipairs(redis.call('SMEMBERS', S .. 'busy')) do
  local st, lanes = state_of(S, tenant)
  -- `busy` is left lazily: a tenant with nothing delivered leaves it here.
  if (tonumber(st.running) or 0) <= 0 then
    redis.call('SREM', S .. 'busy', tenant)
    redis.call('HSET', tkey(S, tenant), 'busy', '0')
    lanes = {}
  end
  for _, l in ipairs(lanes) do
    if wanted <= 0 then return out end
    if serves(c, l[1]) then
      local key = lkey(S, tenant, l[1], l[2])
      local reply = with_group(key, group, 'XAUTOCLAIM', key, group, consumer, idle, '0-0', 'COUNT', wanted)
      for _, entry in ipairs(reply[2]) do
        out[#out + 1] = { tostring(l[2]), entry[1], entry_task(entry), tenant, l[1] }
        wanted = wanted - 1
      end
    end
  end
end
return out
