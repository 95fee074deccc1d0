-- after: fair_fn.lua
local S, tenant = ARGV[1], ARGV[2]
if redis.call('ZREM', S .. 'paused', tenant) == 0 and redis.call('HEXISTS', tkey(S, tenant), 'paused') == 0 then return 0 end
redis.call('HDEL', tkey(S, tenant), 'paused')
activate(S, tenant)
flush(S)
wake(S)
return 1
