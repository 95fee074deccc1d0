-- after: delete_if_expired_fn.lua
local cutoff = tonumber(ARGV[1])
local entries = redis.call('XRANGE', KEYS[1], '-', ARGV[1], 'COUNT', tonumber(ARGV[2]))
local gone = {}
for _, entry in ipairs(entries) do
  local fields = entry[2]
  for i = 1, #fields, 2 do
    if fields[i] == 't' then
      for id in string.gmatch(fields[i + 1], '%S+') do
        delete_if_expired(id, cutoff)
      end
    end
  end
  gone[#gone + 1] = entry[1]
end
if #gone > 0 then redis.call('XDEL', KEYS[1], unpack(gone)) end
return #gone
