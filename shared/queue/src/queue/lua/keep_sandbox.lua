-- after: fair_fn.lua
local S, tenant = ARGV[1], ARGV[2]
local member = tenant .. ':' .. ARGV[3]
local added
if ARGV[5] == 'hold' then
  added = redis.call('ZADD', S .. 'kept', 'GT', ARGV[4], member)
else
  added = redis.call('ZADD', S .. 'kept', ARGV[4], member)
end
if added == 0 then return 0 end
redis.call('HINCRBY', tkey(S, tenant), 'sandboxed', 1)
activate(S, tenant)
flush(S)
return 1
