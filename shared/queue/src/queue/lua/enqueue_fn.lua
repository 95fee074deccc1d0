-- after: fair_fn.lua
local function enqueue(S, group, now, args, first, read)
  -- Per tenant touched, in order: its hash read once (or as `read` gives
  -- it), the lanes it had by field, the routes its tasks go to, and
  -- whether its settings changed; its counters are written in one `HSET`.
  local tenants, order = {}, {}
  local queued = 0
  local into_due, due_order = {}, {}
  for a = first, #args, ENQUEUE_GROUP do
    local tenant, lane, id, due, route = args[a], tonumber(args[a + 3]), args[a + 4], tonumber(args[a + 5]), args[a + 6]
    local t = tenants[tenant]
    if not t then
      local st, lanes
      if read and read[tenant] then
        st, lanes = read[tenant][1], read[tenant][2]
      else
        st, lanes = state_of(S, tenant)
      end
      t = { st = st, lanes = lanes, by_field = {}, routes = {}, added = 0 }
      for _, l in ipairs(lanes) do
        t.by_field[l[2] .. ':' .. l[1]] = l
      end
      -- A tenant with a lane was put in the shard's tenants when it was made.
      if #lanes == 0 then redis.call('SADD', S .. 'tenants', tenant) end
      if st.weight ~= args[a + 1] or st.max ~= args[a + 2] then
        set_settings(S, tenant, args[a + 1], args[a + 2])
        st.weight, st.max = args[a + 1], args[a + 2]
        t.changed = true
      end
      tenants[tenant] = t
      order[#order + 1] = tenant
    end
    if due > now then
      redis.call('ZADD', S .. 'due', due, lane .. ':' .. tenant .. ':' .. route .. ':' .. id)
      local key = tenant .. '\0' .. lane
      if not into_due[key] then
        into_due[key] = { tenant, lane, 0 }
        due_order[#due_order + 1] = into_due[key]
      end
      into_due[key][3] = into_due[key][3] + 1
    else
      local field = lane .. ':' .. route
      local l = t.by_field[field]
      if not l then
        make_group(lkey(S, tenant, route, lane), group)
        l = { route, lane, 0 }
        t.by_field[field] = l
        t.lanes[#t.lanes + 1] = l
      end
      redis.call('XADD', lkey(S, tenant, route, lane), '*', 't', id)
      if not l.before then l.before = l[3] end
      l[3] = l[3] + 1
      t.routes[route] = true
      t.added = t.added + 1
      ROUTE_ACC[route] = (ROUTE_ACC[route] or 0) + 1
      queued = queued + 1
    end
  end
  for _, d in ipairs(due_order) do
    bump_delayed(S, d[1], d[2], d[3])
  end
  local clock
  for _, tenant in ipairs(order) do
    local t = tenants[tenant]
    local st = t.st
    if t.added > 0 then
      st.queued = tostring((tonumber(st.queued) or 0) + t.added)
      SHARD_ACC.queued = (SHARD_ACC.queued or 0) + t.added
      local fields = { 'queued', st.queued }
      -- How many each route had before, to know whether it was active.
      local had = {}
      for _, l in ipairs(t.lanes) do
        if l.before then
          fields[#fields + 1] = l[2] .. ':' .. l[1]
          fields[#fields + 1] = l[3]
        end
        had[l[1]] = (had[l[1]] or 0) + (l.before or l[3])
      end
      redis.call('HSET', tkey(S, tenant), unpack(fields))
      -- A tenant whose settings stayed, whose routes all had queued
      -- entries, and whose virtual time the clock does not move is already
      -- where `activate` would put it.
      local same = not t.changed
      for route in pairs(t.routes) do
        same = same and had[route] > 0
      end
      if same then
        clock = clock or tonumber(redis.call('HGET', S .. 'sched', 'clock')) or 0
        local vt = tonumber(st.vt) or 0
        same = vt >= clock - HEAD_START_TURNS * STRIDE_UNIT / math.max(tonumber(st.weight) or 1, 1)
      end
      if not same then activate(S, tenant, st, t.lanes) end
    else
      activate(S, tenant)
    end
  end
  flush(S)
  if queued > 0 then wake(S) end
  return queued
end
