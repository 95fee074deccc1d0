-- after: prelude.lua finish_fn.lua
return holding_feed(function()
  local replies = {}
  for i = 1, #KEYS do
    local a = 3 + (i - 1) * FINISH_GROUP
    replies[i] = finish(
      KEYS[i],
      ARGV[a],
      ARGV[a + 1],
      ARGV[a + 2],
      ARGV[a + 3],
      ARGV[a + 4],
      ARGV[a + 5],
      ARGV[a + 6],
      ARGV[a + 7],
      ARGV[a + 8],
      ARGV[a + 9],
      ARGV[a + 10],
      true
    )
  end
  return replies
end)
