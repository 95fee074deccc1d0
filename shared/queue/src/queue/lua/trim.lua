-- after: fair_fn.lua
local S, group = ARGV[1], ARGV[2]
local trimmed = 0
local tenants = redis.call('SMEMBERS', S .. 'trim')
redis.call('DEL', S .. 'trim')
for _, tenant in ipairs(tenants) do
  for _, l in ipairs(lanes_of(S, tenant)) do
    local key = lkey(S, tenant, l[1], l[2])
    if redis.call('EXISTS', key) == 1 then
      local pending = with_group(key, group, 'XPENDING', key, group)
      local floor
      if pending[1] > 0 then
        floor = pending[2]
      else
        for _, g in ipairs(redis.call('XINFO', 'GROUPS', key)) do
          local name, last
          for i = 1, #g, 2 do
            if g[i] == 'name' then name = g[i + 1] end
            if g[i] == 'last-delivered-id' then last = g[i + 1] end
          end
          if name == group then floor = last end
        end
      end
      if floor and floor ~= '0-0' then trimmed = trimmed + redis.call('XTRIM', key, 'MINID', '~', floor) end
    end
  end
end
return trimmed
