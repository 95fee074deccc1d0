-- after: fair_fn.lua
local S, tenant = ARGV[1], ARGV[2]
redis.call('HSET', tkey(S, tenant), 'paused', ARGV[3])
redis.call('ZADD', S .. 'paused', ARGV[3], tenant)
activate(S, tenant)
flush(S)
return 0
