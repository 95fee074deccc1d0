-- luacheck's settings for the project's Lua: the Redis scripts (`lua/*.lua`
-- beside the Rust modules that run them, see shared/queue/src/redis_lua.rs).
-- Checked by `luacheck .` in scripts/test.sh.

-- What Redis's Lua 5.1 offers a script, and nothing else (no `io`, `os`,
-- `require`): a script that reaches for anything more fails in Redis.
std = {
  read_globals = {
    'assert', 'error', 'getmetatable', 'ipairs', 'next', 'pairs', 'pcall', 'rawequal', 'rawget', 'rawset', 'select',
    'setmetatable', 'tonumber', 'tostring', 'type', 'unpack', 'xpcall', 'loadstring', '_VERSION',
    'string', 'table', 'math',
    -- Redis's own.
    'redis', 'KEYS', 'ARGV', 'cjson', 'cmsgpack', 'bit', 'struct',
  },
}

-- The Rust constants the scripts name, written in by `redis_lua::script`
-- when a script is made (argument group widths and the scheduler's tuning).
read_globals = {
  'CREATE_GROUP', 'START_GROUP', 'FINISH_GROUP', 'ENQUEUE_GROUP', 'SETTINGS_GROUP', 'ACK_GROUP', 'FINISH_CONTEXT',
  'FINISH_AND_ACK_GROUP', 'SINGLE_GROUP', 'MESSAGE_KEYS', 'MESSAGE_GROUP',
  'STRIDE_UNIT', 'HEAD_START_TURNS', 'TURN_TASKS', 'JOURNAL_MAX_BYTES',
}

max_line_length = 130

-- A script is files joined in order: a file's first line names the files
-- that come before it (`-- after: prelude.lua start_fn.lua`, paths from its
-- own folder). Their top-level locals (functions and tables, at column 0
-- as stylua leaves them) are what it may use (and, for the upper-case
-- ones, the state of one call, set); in a file that comes before
-- others, a top-level local no script of its own uses is fine.
local function read(path)
  local f = assert(io.open(path))
  local text = f:read('*a')
  f:close()
  return text
end

local function top_level_names(path)
  local names = {}
  for line in read(path):gmatch('[^\n]+') do
    local name = line:match('^local function ([%w_]+)')
    local list = name or line:match('^local ([%w_, ]+)')
    for n in (list or ''):gmatch('[%w_]+') do
      names[#names + 1] = n
    end
  end
  return names
end

local function after_of(path)
  local header = read(path):match('^%-%- after: ([^\n]+)')
  local folder = path:match('^(.*)/') or '.'
  local paths = {}
  for name in (header or ''):gmatch('%S+') do
    paths[#paths + 1] = folder .. '/' .. name
  end
  return paths
end

local function normal(path)
  local parts = {}
  for part in path:gmatch('[^/]+') do
    if part == '..' then
      parts[#parts] = nil
    elseif part ~= '.' then
      parts[#parts + 1] = part
    end
  end
  return table.concat(parts, '/')
end

exclude_files = { 'target/**' }

local listing = assert(io.popen("find . -path ./target -prune -o -name '*.lua' -print"))
local settings = {}
for path in listing:lines() do
  path = normal(path)
  local s = settings[path] or { globals = {}, read_globals = {}, ignore = {} }
  settings[path] = s
  for _, before in ipairs(after_of(path)) do
    before = normal(before)
    local b = settings[before] or { globals = {}, read_globals = {}, ignore = {} }
    settings[before] = b
    for _, name in ipairs(top_level_names(before)) do
      -- A call's state (`SHARD_ACC`, `FEED_HELD`) is written by later files too.
      local list = name:match('^[%u_]+$') and s.globals or s.read_globals
      list[#list + 1] = name
      b.ignore[#b.ignore + 1] = '211/' .. name
    end
  end
end
listing:close()
for path, s in pairs(settings) do
  files[path] = s
end
