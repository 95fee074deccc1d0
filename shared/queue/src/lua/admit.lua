-- after: ../queue/lua/admit_fn.lua
return admit(
  KEYS[1],
  KEYS[2],
  KEYS[3],
  KEYS[4],
  tonumber(ARGV[1]),
  tonumber(ARGV[2]),
  tonumber(ARGV[3]),
  tonumber(ARGV[4]),
  tonumber(ARGV[7]),
  ARGV[5],
  tonumber(ARGV[6])
)
