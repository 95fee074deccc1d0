-- after: prelude.lua create_fn.lua
return holding_feed(function()
  local created = 0
  for i = 1, #KEYS do
    local a = 5 + (i - 1) * CREATE_GROUP
    if redis.call('EXISTS', KEYS[i]) == 0 then
      create(KEYS[i], ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5], ARGV[2], ARGV[3], ARGV[4])
      created = created + 1
    end
  end
  return created
end)
