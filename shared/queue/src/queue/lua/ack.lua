-- after: fair_fn.lua settle_fn.lua
local entries, counts = {}, {}
for a = 3, #ARGV, ACK_GROUP do
  entries[#entries + 1] = { ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4] }
end
local acks = new_acks()
local freed = ack_counting(ARGV[1], ARGV[2], entries, counts, acks)
settle(ARGV[1], ARGV[2], acks, freed)
for outcome, n in pairs(counts) do
  redis.call('HINCRBY', KEYS[2], outcome, n)
end
return #entries
