-- after: prelude.lua start_fn.lua
return holding_feed(function()
  local replies = {}
  for i = 1, #KEYS do
    local a = 8 + (i - 1) * START_GROUP
    replies[i] = { start(KEYS[i], ARGV[a], ARGV[a + 1] == '1', ARGV[a + 2]) }
  end
  return replies
end)
