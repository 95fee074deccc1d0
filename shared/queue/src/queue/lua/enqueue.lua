-- after: fair_fn.lua enqueue_fn.lua
return enqueue(ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV, 4)
