-- after: fair_fn.lua
local S, group, after = ARGV[1], ARGV[2], tonumber(ARGV[3])
local removed, seen = {}, {}
for _, tenant in ipairs(redis.call('SMEMBERS', S .. 'tenants')) do
  for _, l in ipairs(lanes_of(S, tenant)) do
    local key = lkey(S, tenant, l[1], l[2])
    if redis.call('EXISTS', key) == 1 then
      for _, consumer in ipairs(with_group(key, group, 'XINFO', 'CONSUMERS', key, group)) do
        local name, pending, idle
        for i = 1, #consumer, 2 do
          if consumer[i] == 'name' then name = consumer[i + 1] end
          if consumer[i] == 'pending' then pending = consumer[i + 1] end
          if consumer[i] == 'idle' then idle = consumer[i + 1] end
        end
        if name and pending == 0 and idle > after then
          redis.call('XGROUP', 'DELCONSUMER', key, group, name)
          if not seen[name] then
            seen[name] = true
            removed[#removed + 1] = name
          end
        end
      end
    end
  end
end
return removed
