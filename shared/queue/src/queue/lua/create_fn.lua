-- after: prelude.lua
-- The `queued` draft without its opening brace, cut once per call.
local QUEUED
local function create(key, id, hdr, spec, tenant, batch, max_attempts, draft, now, trace)
  -- Made at its full size (a table that grows is made again); `batch`
  -- and `trace` only when the task has them.
  local fields = {
    'hdr',
    hdr,
    'spec',
    spec,
    'tenant',
    tenant,
    'max_attempts',
    max_attempts,
    'status',
    'queued',
    'attempt',
    '0',
    'created_at',
    now,
    false,
    false,
    false,
    false,
  }
  local n = 14
  if batch ~= '' then
    fields[n + 1] = 'batch'
    fields[n + 2] = batch
    n = n + 2
  end
  if trace ~= '' then
    fields[n + 1] = 'trace'
    fields[n + 2] = trace
    n = n + 2
  end
  QUEUED = QUEUED or string.sub(draft, 2)
  store(key, id, tenant, batch, '1', '{"seq":1,' .. hdr .. ',' .. QUEUED, unpack(fields, 1, n))
end
