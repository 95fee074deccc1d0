local cur = redis.call('HMGET', KEYS[1], 'attempt', 'owner', 'status')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then return 'fenced' end
if cur[3] ~= 'running' and cur[3] ~= 'waiting' then return 'fenced' end
if #ARGV >= 4 then redis.call('HSET', KEYS[1], unpack(ARGV, 3)) end
return 'ok'
