-- after: prelude.lua start_fn.lua fair_fn.lua turns_fn.lua
return take_turns(ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), false, '', capabilities(ARGV[5], ARGV[6], ARGV[7]))
