-- A parked task made claimable again (an answer, a takeover or a cancel
-- came): `queued`, and marked `woken` until the attempt that takes it up
-- takes its input (`take_input.lua`). Returns `unparked:<lane>:<route>` for
-- the caller to put it in its lane, or nil when it was not parked.
local function unpark(key)
  local park = redis.call('HMGET', key, 'parked', 'park_lane', 'park_route')
  if park[1] ~= '1' then return nil end
  redis.call('HSET', key, 'status', 'queued', 'parked', 'woken')
  return 'unparked:' .. (park[2] or '0') .. ':' .. (park[3] or '')
end
