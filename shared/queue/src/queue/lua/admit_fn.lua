local function admission_read(rate, admitting, usage, interval)
  local a = {}
  if usage then a.spent = tonumber(redis.call('HGET', usage, 'tokens') or '0') end
  local t = redis.call('TIME')
  a.now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  a.now_ms = math.floor(a.now / 1000)
  if interval > 0 then a.tat = math.max(tonumber(redis.call('GET', rate) or '0'), a.now) end
  a.held = 0
  for _, r in ipairs(redis.call('ZRANGE', admitting, '(' .. string.format('%.0f', a.now_ms), '+inf', 'BYSCORE')) do
    a.held = a.held + tonumber(string.match(r, ':(%d+)$'))
  end
  return a
end
local function judge(a, n, interval, burst, max_queued, max_tokens, waiting)
  if a.spent and a.spent >= max_tokens then return { 'tokens', a.spent, 0 } end
  local new_tat
  if interval > 0 then
    new_tat = a.tat + interval
    local allow_at = new_tat - burst * interval
    if allow_at > a.now then return { 'rate', math.ceil((allow_at - a.now) / 1000000), math.ceil((a.tat - a.now) / 1000000) } end
  end
  waiting = waiting + a.held
  if waiting + n > max_queued then return { 'queued', waiting, 0 } end
  if interval > 0 then
    a.tat = new_tat
    a.taken = true
    return { 'ok', math.floor((burst * interval - (new_tat - a.now)) / interval), math.ceil((new_tat - a.now) / 1000000) }
  end
  return { 'ok', -1, 0 }
end
local function admission_write(a, rate)
  if a.taken then redis.call('SET', rate, string.format('%.0f', a.tat), 'PX', math.ceil((a.tat - a.now) / 1000) + 1) end
end
local function waiting_of(queued, delayed) return math.max(tonumber(queued or '0'), 0) + math.max(tonumber(delayed or '0'), 0) end
local function admit(state, rate, admitting, usage, n, interval, burst, max_queued, max_tokens, ticket, hold_ms)
  local a = admission_read(rate, admitting, usage, interval)
  local counts = redis.call('HMGET', state, 'queued', 'delayed')
  local verdict = judge(a, n, interval, burst, max_queued, max_tokens, waiting_of(counts[1], counts[2]))
  if verdict[1] ~= 'ok' then return verdict end
  if ticket then
    redis.call('ZREMRANGEBYSCORE', admitting, '-inf', a.now_ms)
    redis.call('ZADD', admitting, a.now_ms + hold_ms, ticket .. ':' .. n)
    redis.call('PEXPIRE', admitting, hold_ms)
  end
  admission_write(a, rate)
  return verdict
end
