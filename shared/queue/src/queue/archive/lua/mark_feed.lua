local ms, n = tonumber(ARGV[1]), tonumber(ARGV[2])
local cur = redis.call('GET', KEYS[1])
if cur then
  local cms, cn = string.match(cur, '^(%d+)-(%d+)$')
  cms, cn = tonumber(cms), tonumber(cn)
  if cms > ms or (cms == ms and cn >= n) then
    ms, n = cms, cn
  end
end
local mark = string.format('%.0f-%.0f', ms, n)
redis.call('SET', KEYS[1], mark)
return redis.call('XTRIM', KEYS[2], 'MINID', string.format('%.0f-%.0f', ms, n + 1))
