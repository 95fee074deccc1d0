local cur = redis.call('HMGET', KEYS[1], 'attempt', 'owner', 'status')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then return 'fenced' end
if cur[3] ~= 'running' and cur[3] ~= 'waiting' then return 'fenced' end
if #ARGV[3] > JOURNAL_MAX_BYTES then return 'too_large' end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], 'journal')
else
  redis.call('HSET', KEYS[1], 'journal', ARGV[3])
end
return 'ok'
