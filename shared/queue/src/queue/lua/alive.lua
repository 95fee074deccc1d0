-- A worker says it is alive until now + ARGV[3] ms (the shard's `alive`
-- holds each worker's expiry, by the server's clock).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', ARGV[1] .. 'alive', now + tonumber(ARGV[3]), ARGV[2])
return 'ok'
