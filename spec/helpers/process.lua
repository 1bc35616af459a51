--[[
spec/helpers/process.lua — running programs from the specs: qlua itself, the reference
lua5.4, and qlua's REPL on a pseudo-terminal.

Everything goes through os.execute with files for stdin/stdout/stderr (no io.popen
deadlocks, both streams kept apart) and `timeout` around every child, so a spec can
never hang: a child that outlives its limit is killed and the spec fails with the
output it had.

  P.qlua()             absolute path of the qlua under test ($QLUA, default build/qlua)
  P.lua()              absolute path of lua5.4, or nil, reason
  P.run(argv, opts)    -> { stdout=, stderr=, status= }   (opts: stdin, env, cwd, timeout)
  P.have(tool)         is the command on PATH?
  P.pty(argv, script, opts) -> { output=, status= }: argv runs on a pseudo-terminal
                       (util-linux `script`); `script` is a list of keystroke strings and
                       numbers (seconds to wait before the next keystrokes)
  P.pty_all(sessions)  several P.pty sessions ({ argv, keys, opts } each) at once
  P.tempdir()          a fresh directory (removed by P.cleanup())
  P.write(path, text)  / P.read(path)
  P.quote(s)           s quoted for /bin/sh
]]

local P = {}

local lfs_ok, lfs = pcall(require, "lfs")

local temp_paths = {}

function P.quote(s)
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

local function cwd()
  if lfs_ok then return lfs.currentdir() end
  local pipe = io.popen("pwd")
  local dir = pipe:read("l")
  pipe:close()
  return dir
end

local function absolute(path)
  if path:sub(1, 1) == "/" then return path end
  return cwd() .. "/" .. path
end

function P.write(path, text)
  local file = assert(io.open(path, "wb"))
  file:write(text)
  file:close()
  return path
end

function P.read(path)
  local file = io.open(path, "rb")
  if not file then return nil end
  local text = file:read("a")
  file:close()
  return text
end

-- A temporary file name (os.tmpname creates the file; it is removed by P.cleanup).
function P.tmpname(suffix)
  local name = os.tmpname()
  temp_paths[#temp_paths + 1] = name
  if suffix then
    os.remove(name)
    name = name .. suffix
    temp_paths[#temp_paths + 1] = name
  end
  return name
end

-- A fresh empty directory (made from an os.tmpname name).
function P.tempdir()
  local name = os.tmpname()
  os.remove(name)
  assert(os.execute("mkdir -p " .. P.quote(name)), "cannot create " .. name)
  temp_paths[#temp_paths + 1] = name
  return name
end

function P.cleanup()
  for i = #temp_paths, 1, -1 do
    os.execute("rm -rf " .. P.quote(temp_paths[i]))
  end
  temp_paths = {}
end

function P.have(tool)
  return os.execute("command -v " .. P.quote(tool) .. " >/dev/null 2>&1") == true
end

-- The qlua under test: $QLUA, else build/qlua, made absolute (specs cd around).
function P.qlua()
  local path = absolute(os.getenv("QLUA") or "build/qlua")
  local file = io.open(path, "rb")
  if not file then
    error("qlua binary not found at " .. path .. " (build it, or set QLUA)", 2)
  end
  file:close()
  return path
end

-- The reference interpreter: lua5.4 on PATH (what Debian installs).
function P.lua()
  local pipe = io.popen("command -v lua5.4 2>/dev/null")
  local path = pipe:read("l")
  pipe:close()
  if not path or path == "" then return nil, "lua5.4 is not installed (apt-get install lua5.4)" end
  return path
end

-- Environment variables that would make runs depend on the caller's shell.
local SCRUBBED = { "LUA_INIT", "LUA_INIT_5_4" }

-- "env -u A -u B X=1 ..." for opts.env (a value false removes the variable).
local function env_prefix(env)
  local parts = { "env" }
  local set = {}
  for name, value in pairs(env or {}) do set[name] = value end
  for _, name in ipairs(SCRUBBED) do
    if set[name] == nil then set[name] = false end
  end
  -- lua5.4 reads piped lines with readline too: keep the user's ~/.inputrc out of it
  if set.INPUTRC == nil then set.INPUTRC = "/dev/null" end
  local names = {}
  for name in pairs(set) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    if set[name] == false then
      parts[#parts + 1] = "-u " .. name
    end
  end
  for _, name in ipairs(names) do
    if set[name] ~= false then
      parts[#parts + 1] = name .. "=" .. P.quote(set[name])
    end
  end
  return table.concat(parts, " ")
end

local function command_line(argv)
  local words = {}
  for i, word in ipairs(argv) do words[i] = P.quote(word) end
  return table.concat(words, " ")
end

-- os.execute's results as one exit status (128+n for a signal, like the shell).
local function exit_status(ok, how, code)
  if how == "exit" then return code end
  if how == "signal" then return 128 + code end
  return ok and 0 or 1
end

--[[
Runs argv (argv[1] is the program) with stdin from opts.stdin (a string; empty when
absent), the environment changed by opts.env, in opts.cwd, for at most opts.timeout
seconds (default 10). Returns { stdout, stderr, status }; status 124 means killed by the
timeout.
]]
function P.run(argv, opts)
  opts = opts or {}
  local stdin_path = P.write(P.tmpname(), opts.stdin or "")
  local stdout_path, stderr_path = P.tmpname(), P.tmpname()
  local cmd = string.format("%s%s timeout -k 2 %d %s <%s >%s 2>%s",
    opts.cwd and ("cd " .. P.quote(opts.cwd) .. " && ") or "",
    env_prefix(opts.env), opts.timeout or 10, command_line(argv),
    P.quote(stdin_path), P.quote(stdout_path), P.quote(stderr_path))
  local status = exit_status(os.execute(cmd))
  local result = { stdout = P.read(stdout_path) or "", stderr = P.read(stderr_path) or "",
                   status = status, command = cmd }
  os.remove(stdin_path); os.remove(stdout_path); os.remove(stderr_path)
  return result
end

-- P.run that must succeed quietly: status 0 and nothing on stderr, else an error naming
-- what ran with both outputs; returns stdout.
function P.run_ok(argv, what, opts)
  local r = P.run(argv, opts)
  if r.status ~= 0 then
    error(("%s exited with %s\nstdout:\n%s\nstderr:\n%s"):format(what, tostring(r.status), r.stdout, r.stderr), 2)
  end
  if r.stderr ~= "" then error(("%s wrote to stderr:\n%s"):format(what, r.stderr), 2) end
  return r.stdout
end

--[[
Runs argv on a pseudo-terminal with util-linux `script`, typing the keystrokes of
`keys` (strings, with numbers between them meaning "wait that many seconds"). Each
string is written to a file and typed with `cat`, so any byte, NUL included, can be
typed. The terminal is TERM=dumb with no inputrc unless opts.env says otherwise, so
readline behaves the same everywhere; HOME comes from opts.env or is a fresh directory.
`script -c` runs its command through $SHELL (/bin/sh when unset); the command is exec'd
so argv is the terminal's only process: a shell left waiting in the same process group
would take the Ctrl-C itself (dash dies of it, and `script` then reports 130).
opts.stty (say "cols 80 rows 24") sets the terminal up first: with stdin a pipe,
`script` gives the pseudo-terminal no size. Returns the shell command and the files its
output and exit status go to.
]]
local function pty_command(argv, keys, opts)
  opts = opts or {}
  local feeder = { "sleep " .. (opts.startup or 0.5) }   -- let readline set up the terminal
  for _, step in ipairs(keys) do
    if type(step) == "number" then
      feeder[#feeder + 1] = "sleep " .. step
    else
      feeder[#feeder + 1] = "cat " .. P.quote(P.write(P.tmpname(), step))
    end
  end
  local env = { TERM = "dumb", INPUTRC = "/dev/null" }
  for name, value in pairs(opts.env or {}) do env[name] = value end
  if env.HOME == nil then env.HOME = P.tempdir() end
  local output_path, status_path = P.tmpname(), P.tmpname()
  local inner = "exec " .. command_line(argv)
  if opts.stty then inner = "stty " .. opts.stty .. " && " .. inner end
  local cmd = string.format("( %s ) | %s timeout -k 2 %d script -qfec %s /dev/null >%s 2>&1; echo $? >%s",
    table.concat(feeder, "; "), env_prefix(env), opts.timeout or 10,
    P.quote(inner), P.quote(output_path), P.quote(status_path))
  return cmd, output_path, status_path
end

-- The output (\r removed) and exit status a pty_command left behind.
local function pty_result(cmd, output_path, status_path)
  local output = (P.read(output_path) or ""):gsub("\r", "")
  local status = tonumber((P.read(status_path) or ""):match("%d+"))
  os.remove(output_path)
  os.remove(status_path)
  return { output = output, status = status, command = cmd }
end

-- P.pty(argv, keys, opts) -> { output (everything the terminal showed), status }
function P.pty(argv, keys, opts)
  local cmd, output_path, status_path = pty_command(argv, keys, opts)
  os.execute(cmd)
  return pty_result(cmd, output_path, status_path)
end

--[[
Several P.pty sessions at once (they mostly sleep, so a list of them takes about as long
as the slowest): sessions is a list of { argv, keys, opts }; returns their results in
the same order.
]]
function P.pty_all(sessions)
  local commands, results = {}, {}
  for i, session in ipairs(sessions) do
    commands[i] = { pty_command(session[1], session[2], session[3]) }
  end
  local jobs = {}
  for i, command in ipairs(commands) do jobs[i] = "( " .. command[1] .. " ) &" end
  os.execute(table.concat(jobs, " ") .. " wait")
  for i, command in ipairs(commands) do results[i] = pty_result(table.unpack(command)) end
  return results
end

return P
