local function delete_if_expired(id, cutoff)
  local key = ARGV[3] .. '{' .. id .. '}'
  local st = redis.call('HMGET', key, 'status', 'finished_at')
  local ended = st[1] == 'succeeded' or st[1] == 'failed' or st[1] == 'cancelled'
  if ended and (tonumber(st[2]) or 0) <= cutoff then redis.call('DEL', key) end
end
