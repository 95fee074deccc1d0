-- after: prelude.lua start_fn.lua fair_fn.lua
local function served_routes(S, c)
  local list, set = {}, {}
  local all = redis.call('HGETALL', S .. 'routes')
  for i = 1, #all, 2 do
    if (tonumber(all[i + 1]) or 0) > 0 and serves(c, all[i]) then
      list[#list + 1] = all[i]
      set[all[i]] = true
    end
  end
  return list, set
end
-- A min-heap of {tenant, vt}, ordered as a sorted set orders its members.
local function before(a, b) return a[2] < b[2] or (a[2] == b[2] and a[1] < b[1]) end
local function heap_push(h, item)
  local i = #h + 1
  h[i] = item
  while i > 1 do
    local up = math.floor(i / 2)
    if not before(h[i], h[up]) then break end
    h[i], h[up] = h[up], h[i]
    i = up
  end
end
local function heap_pop(h)
  local n = #h
  if n == 0 then return nil end
  local top = h[1]
  -- Two statements: Lua leaves the order of a multiple assignment open,
  -- and with one item `h[1], h[1] = h[1], nil` may keep it.
  h[1] = h[n]
  h[n] = nil
  n = n - 1
  local i = 1
  while true do
    local l, r, m = 2 * i, 2 * i + 1, i
    if l <= n and before(h[l], h[m]) then m = l end
    if r <= n and before(h[r], h[m]) then m = r end
    if m == i then break end
    h[i], h[m] = h[m], h[i]
    i = m
  end
  return top
end
-- How many tenants of a route a call reads at first: enough for `wanted`
-- entries at a turn's usual size, and two more; a window that runs out is
-- read again (see `take_turns`).
local function window(wanted) return math.min(wanted, math.floor(wanted / TURN_TASKS)) + 2 end
-- The first `depth` tenants of each route as a heap, and the lowest score
-- that a tenant left out of a window may have (nil when no window was cut).
local function order_of(S, routes, depth)
  local heap, seen, edge = {}, {}, nil
  for _, route in ipairs(routes) do
    local top = redis.call('ZRANGE', akey(S, route), 0, depth - 1, 'WITHSCORES')
    for i = 1, #top, 2 do
      if not seen[top[i]] then
        seen[top[i]] = true
        heap_push(heap, { top[i], tonumber(top[i + 1]) })
      end
    end
    if #top >= 2 * depth then
      local last = tonumber(top[#top])
      if not edge or last < edge then edge = last end
    end
  end
  return heap, edge
end
-- Writes the active sets of the tenants that took turns: `moved` maps a
-- tenant to {vt, {route = still active?}}.
local function write_order(S, moved)
  local add, rem = {}, {}
  for tenant, m in pairs(moved) do
    local v = num(m[1])
    for route, on in pairs(m[2]) do
      local list = on and add or rem
      list[route] = list[route] or {}
      local l = list[route]
      if on then l[#l + 1] = v end
      l[#l + 1] = tenant
    end
  end
  for route, l in pairs(add) do
    redis.call('ZADD', akey(S, route), unpack(l))
  end
  for route, l in pairs(rem) do
    redis.call('ZREM', akey(S, route), unpack(l))
  end
end
-- The start's reply (one to six values) as six, after `out[at]`.
local function put_start_reply(out, at, a, b, c, d, e, f)
  out[at + 1], out[at + 2], out[at + 3], out[at + 4], out[at + 5], out[at + 6] = a, b or '', c or '', d or '', e or '', f or ''
end
-- Reads up to `k` entries of the tenant's lanes in `lanes` (by priority),
-- appending them to `out`, and corrects each lane's count, adding the
-- changed count fields to `fields` (written with the tenant's counters).
-- Returns how many were read and by how much the tenant's queued count
-- changed.
local LANE_NAMES = { '1', '2', '3' }
local function read_lanes(S, group, consumer, tenant, lanes, k, do_start, task_prefix, out, fields)
  local got, change, sandboxed = 0, 0, 0
  for lane = 1, 3 do
    for _, l in ipairs(lanes[lane]) do
      if got >= k then break end
      local route, n = l[1], l[3]
      local key = lkey(S, tenant, route, lane)
      local want = math.min(k - got, n)
      local reply = with_group(key, group, 'XREADGROUP', 'GROUP', group, consumer, 'COUNT', want, 'STREAMS', key, '>')
      local read = 0
      if reply then
        for _, entry in ipairs(reply[1][2]) do
          local id = entry_task(entry)
          if not do_start then
            out[#out + 1] = { LANE_NAMES[lane], entry[1], id, tenant, route }
          else
            -- Starting, the rows are flat: no table per entry.
            local at = #out
            out[at + 1], out[at + 2], out[at + 3], out[at + 4], out[at + 5] = LANE_NAMES[lane], entry[1], id, tenant, route
            if id == '' then
              put_start_reply(out, at + 5, 'malformed')
            else
              put_start_reply(out, at + 5, start(task_prefix .. '{' .. id .. '}', id, false, entry[1], tenant))
            end
          end
          read = read + 1
        end
      end
      got = got + read
      if holds_sandbox(route) then sandboxed = sandboxed + read end
      -- Fewer than asked: the lane is empty, whatever its count said.
      local left = n - read
      if read < want then left = 0 end
      if left ~= n then
        fields[#fields + 1] = lane .. ':' .. route
        fields[#fields + 1] = left
        ROUTE_ACC[route] = (ROUTE_ACC[route] or 0) + left - n
        change = change + left - n
        l[3] = left
      end
    end
  end
  return got, change, sandboxed
end
local function take_turns(S, group, consumer, wanted, do_start, task_prefix, c)
  local out = {}
  local routes, served = served_routes(S, c)
  local clock0 = tonumber(redis.call('HGET', S .. 'sched', 'clock')) or 0
  local clock, moved = clock0, {}
  local depth = window(wanted)
  local heap, edge = order_of(S, routes, depth)
  local guard = 2 * wanted + 16
  while wanted > 0 and guard > 0 do
    guard = guard - 1
    local top = heap_pop(heap)
    if edge and (not top or top[2] > edge) then
      write_order(S, moved)
      moved = {}
      heap, edge = order_of(S, routes, depth)
      top = heap_pop(heap)
    end
    if not top then break end
    local tenant, vt = top[1], top[2]
    local next_vt = heap[1] and heap[1][2]
    if edge and (not next_vt or edge < next_vt) then next_vt = edge end
    local t = tkey(S, tenant)
    local st, all = state_of(S, tenant)
    local weight, max, running = tonumber(st.weight) or 1, tonumber(st.max) or 0, tonumber(st.running) or 0
    local stride = STRIDE_UNIT / math.max(weight, 1)
    -- Under max_sandboxes, a turn takes at most the sandbox slots left,
    -- and none of the sandbox routes once they are taken.
    local maxsb, sandboxed = tonumber(st.maxsb) or 0, tonumber(st.sandboxed) or 0
    local sb_left = maxsb > 0 and math.max(maxsb - sandboxed, 0) or nil
    local lanes, queued, sb_lanes = { {}, {}, {} }, 0, false
    for _, l in ipairs(all) do
      if l[3] > 0 and served[l[1]] and (sb_left ~= 0 or not holds_sandbox(l[1])) then
        local list = lanes[l[2]]
        list[#list + 1] = l
        queued = queued + l[3]
        sb_lanes = sb_lanes or (sb_left and holds_sandbox(l[1]))
      end
    end
    local k = math.min(wanted, queued)
    if max > 0 then k = math.min(k, max - running) end
    if sb_lanes then k = math.min(k, sb_left) end
    if st.paused then k = 0 end
    if next_vt then k = math.min(k, math.floor((next_vt - vt) / stride) + TURN_TASKS) end
    local fields = {}
    local got, change, sb_got = read_lanes(S, group, consumer, tenant, lanes, k, do_start, task_prefix, out, fields)
    if sb_got > 0 then
      fields[#fields + 1] = 'sandboxed'
      fields[#fields + 1] = sandboxed + sb_got
    end
    if got > 0 or change ~= 0 then
      fields[#fields + 1] = 'queued'
      fields[#fields + 1] = (tonumber(st.queued) or 0) + change
      SHARD_ACC.queued = (SHARD_ACC.queued or 0) + change
      if got > 0 then
        vt = vt + got * stride
        fields[#fields + 1] = 'running'
        fields[#fields + 1] = running + got
        fields[#fields + 1] = 'vt'
        fields[#fields + 1] = num(vt)
        SHARD_ACC.running = (SHARD_ACC.running or 0) + got
        if st.busy ~= '1' then
          redis.call('SADD', S .. 'busy', tenant)
          fields[#fields + 1] = 'busy'
          fields[#fields + 1] = '1'
        end
        if top[2] > clock then clock = top[2] end
      end
      redis.call('HSET', t, unpack(fields))
    end
    -- What `activate` would find: the tenant stays in the sets of its routes
    -- with queued entries unless its limit is reached.
    st.sandboxed = sandboxed + sb_got
    local blocked, sb_full = held_back(st, running + got)
    local on, again = {}, false
    for _, l in ipairs(all) do
      on[l[1]] = on[l[1]] or (not blocked and l[3] > 0 and not (sb_full and holds_sandbox(l[1])))
      again = again or (on[l[1]] and served[l[1]] == true)
    end
    moved[tenant] = { vt, on }
    if again then heap_push(heap, { tenant, vt }) end
    wanted = wanted - got
  end
  write_order(S, moved)
  if clock > clock0 then redis.call('HSET', S .. 'sched', 'clock', num(clock)) end
  flush(S)
  return out
end
