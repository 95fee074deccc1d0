-- after: fair_fn.lua
local S, tenant = ARGV[1], ARGV[2]
if redis.call('ZREM', S .. 'kept', tenant .. ':' .. ARGV[3]) == 0 then return 0 end
redis.call('HINCRBY', tkey(S, tenant), 'sandboxed', -1)
activate(S, tenant)
flush(S)
wake(S)
return 1
