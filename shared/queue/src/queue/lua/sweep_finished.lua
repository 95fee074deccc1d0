-- after: delete_if_expired_fn.lua
local cutoff = tonumber(ARGV[1])
local ids = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  delete_if_expired(id, cutoff)
end
if #ids > 0 then redis.call('ZREM', KEYS[1], unpack(ids)) end
return #ids
