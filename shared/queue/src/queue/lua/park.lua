-- The owning attempt of a task that waits for a person hands it back parked:
-- it stays `waiting` with no owner and no entry in any lane, one more
-- attempt allowed (a park is not a failure), its lane and route kept for
-- whoever makes it claimable again (`unpark_fn.lua`). An answer, a takeover
-- or a status change that came first makes it claimable at once instead
-- (`queued`, for the caller to defer); a cancel leaves it to the attempt.
-- ARGV: attempt, owner, lane, route.
local cur = redis.call('HMGET', KEYS[1], 'attempt', 'owner', 'status', 'max_attempts', 'cancel', 'input', 'takeover')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] or (cur[3] ~= 'running' and cur[3] ~= 'waiting') then return 'fenced' end
if cur[5] == '1' then return 'cancel' end
local attempts = tostring((tonumber(cur[4]) or 0) + 1)
local handed = { 'owner', '', 'max_attempts', attempts, 'park_lane', ARGV[3], 'park_route', ARGV[4] }
if cur[3] ~= 'waiting' or cur[6] or cur[7] == '1' then
  redis.call('HSET', KEYS[1], 'status', 'queued', unpack(handed))
  return 'queued'
end
redis.call('HSET', KEYS[1], 'parked', '1', unpack(handed))
return 'parked'
