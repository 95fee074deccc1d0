-- after: fair_fn.lua
local S = ARGV[1]
for a = 2, #ARGV, SETTINGS_GROUP do
  set_settings(S, ARGV[a], ARGV[a + 1], ARGV[a + 2])
  if (tonumber(ARGV[a + 3]) or 0) > 0 then
    redis.call('HSET', tkey(S, ARGV[a]), 'maxsb', ARGV[a + 3])
  else
    redis.call('HDEL', tkey(S, ARGV[a]), 'maxsb')
  end
  activate(S, ARGV[a])
end
wake(S)
return 0
