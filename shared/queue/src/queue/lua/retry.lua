-- after: prelude.lua
local cur = redis.call('HMGET', KEYS[1], 'attempt', 'owner', 'status', 'hdr', 'tenant', 'batch', 'seq')
if not owns(cur, ARGV[5], ARGV[6]) then return -1 end
local fields = pairs_from(7)
for _, v in ipairs({ 'status', 'queued', 'owner', '' }) do
  fields[#fields + 1] = v
end
redis.call('HDEL', KEYS[1], 'takeover', 'released', 'input')
return record(KEYS[1], ARGV[2], cur[5], cur[6], next_seq(cur[7]), with_hdr(cur[4], ARGV[3]), unpack(fields))
