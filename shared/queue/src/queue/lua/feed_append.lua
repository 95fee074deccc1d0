local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if ARGV[2] == 'check' and tonumber(ARGV[3]) > last + 1 then return -1 - last end
for i = 3, #ARGV, 2 do
  local seq = tonumber(ARGV[i])
  if seq > last then
    redis.call('XADD', KEYS[1], '*', 'e', ARGV[i + 1])
    last = seq
  end
end
redis.call('SET', KEYS[2], last, 'PX', ARGV[1])
return last
