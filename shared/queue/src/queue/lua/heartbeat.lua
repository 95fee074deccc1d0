local cur = redis.call('HMGET', KEYS[1], 'attempt', 'owner', 'status', 'cancel')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then return 'fenced' end
if cur[3] ~= 'running' and cur[3] ~= 'waiting' then return 'fenced' end
if cur[4] == '1' then return 'cancel' end
return 'ok'
