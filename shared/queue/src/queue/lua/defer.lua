-- after: fair_fn.lua
local S, tenant = ARGV[1], ARGV[2]
if redis.call('ZADD', S .. 'due', ARGV[5], ARGV[3] .. ':' .. tenant .. ':' .. ARGV[6] .. ':' .. ARGV[4]) == 1 then
  bump_delayed(S, tenant, ARGV[3], 1)
end
flush(S)
return 0
