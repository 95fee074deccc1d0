-- after: prelude.lua
local cur = redis.call('HMGET', KEYS[1], 'attempt', 'owner', 'status', 'hdr', 'tenant', 'batch', 'seq')
if not owns(cur, ARGV[5], ARGV[6]) then return -1 end
return record(KEYS[1], ARGV[2], cur[5], cur[6], next_seq(cur[7]), with_hdr(cur[4], ARGV[3]), unpack(ARGV, 7))
