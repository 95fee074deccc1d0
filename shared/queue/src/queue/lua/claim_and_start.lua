-- after: prelude.lua start_fn.lua fair_fn.lua turns_fn.lua
return holding_feed(
  function()
    return take_turns(ARGV[11], ARGV[8], ARGV[4], tonumber(ARGV[9]), true, ARGV[10], capabilities(ARGV[12], ARGV[13], ARGV[14]))
  end
)
