local t = redis.call('TIME')
local until_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
local lost = 0
for i = 2, #ARGV do
  lost = lost + redis.call('ZADD', KEYS[1], until_ms, ARGV[i])
end
return lost
