--[[
The qlua command line, side by side with Debian's lua5.4.

qlua promises to be a drop-in lua5.4 for plain Lua programs, so almost every case here
runs the same command line under both interpreters and expects the same stdout, the same
stderr once the program names are replaced by "PROG" (messages start with argv[0], as
lua.c's do), and the same exit status. The version banner is the one intended
difference: "qlua X.Y.Z  Lua 5.4.N  Copyright ..." versus "Lua 5.4.N  Copyright ...",
qlua's name and version in front of lua5.4's line, which ends both the same way.

The binary under test is $QLUA (default build/qlua). Without lua5.4 on PATH the
side-by-side cases are pending, with the reason.
]]

local P = require("spec.helpers.process")

local QLUA = P.qlua()
local LUA, no_lua = P.lua()

local function plain(s) return (s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")) end

-- Program names out, qlua's banner turned into lua5.4's.
local function normalize(text, prog)
  text = text:gsub(plain(prog), "PROG")
  text = text:gsub("qlua [%w%.%-]+  (Lua 5%.4)", "%1")
  return text
end

-- Runs argv under both interpreters; returns the two results, normalized.
local function both(argv, opts)
  local lua_argv, qlua_argv = { LUA }, { QLUA }
  for i, word in ipairs(argv) do lua_argv[i + 1] = word; qlua_argv[i + 1] = word end
  local expected = P.run(lua_argv, opts)
  local actual = P.run(qlua_argv, opts)
  for _, pair in ipairs({ { expected, LUA }, { actual, QLUA } }) do
    pair[1].stdout = normalize(pair[1].stdout, pair[2])
    pair[1].stderr = normalize(pair[1].stderr, pair[2])
  end
  return expected, actual
end

local function assert_same(argv, opts)
  local expected, actual = both(argv, opts)
  assert.are.equal(expected.stdout, actual.stdout)
  assert.are.equal(expected.stderr, actual.stderr)
  assert.are.equal(expected.status, actual.status)
  return expected, actual
end

-- it(...) comparing qlua with lua5.4 on argv; pending when lua5.4 is missing.
-- `check`, when given, is called with lua5.4's result to make sure the case really
-- exercises what its name says (a comparison of two empty outputs proves nothing).
local function it_same(name, argv, opts, check)
  if not LUA then
    pending(name .. " [" .. no_lua .. "]")
    return
  end
  it(name, function()
    local expected = assert_same(argv, opts)
    if check then check(expected) end
  end)
end

local dir = P.tempdir()
local function file(name, text) return P.write(dir .. "/" .. name, text) end

file("args.lua", [[
local lowest = 0
while arg[lowest - 1] ~= nil do lowest = lowest - 1 end
for i = lowest, #arg do print(i, arg[i]) end
print("varargs", select("#", ...), ...)
]])
file("mymod.lua", [[
print("loading mymod", ...)
return { name = "mymod" }
]])
file("badmod.lua", "local x = nil\nreturn x.field\n")
file("syntax.lua", "local a = 1\nif a then\n  print(a\nend\n")
file("boom.lua", [[
local function inner(n)
  if n == 0 then error("boom") end
  return inner(n - 1) + 1
end
local t = { run = function() return inner(3) end }
print("before")
t.run()
print("never")
]])
file("level2.lua", [[
local function check(x) if type(x) ~= "number" then error("expected a number", 2) end end
local function caller() check("no") end
caller()
]])
file("nilcall.lua", "local t = {}\nt.missing.field = 1\n")
file("init.lua", "print('init file ran', arg and #arg)\nINIT_VALUE = 42\n")
file("-", "print('the file named -')\n")
file("ret.lua", "return 1, 2, 3\n")

describe("qlua's command line, compared with lua5.4", function()
  teardown(P.cleanup)

  describe("scripts and the arg table", function()
    it_same("passes the script's arguments, with the interpreter and options at negative indices",
      { "args.lua", "a", "b c", "", "-x" }, { cwd = dir },
      function(r) assert.truthy(r.stdout:find("varargs\t4\ta\tb c\t\t-x", 1, true)) end)
    it_same("puts options before the script at negative indices",
      { "-W", "-e", "x = 1", "args.lua", "1" }, { cwd = dir },
      function(r) assert.truthy(r.stdout:find("-3\t-W", 1, true)) end)
    it_same("runs a script given by a path", { dir .. "/args.lua" })
    it_same("builds arg with no script (everything from index 0)",
      { "-e", "for i = -1, #arg do print(i, arg[i]) end" })
    it_same("ignores a script's return values", { "ret.lua" }, { cwd = dir })
    it_same("reports a missing script", { "no_such_script.lua" }, { cwd = dir },
      function(r) assert.are.equal(1, r.status) end)
    it_same("lets the script read the rest of stdin", { "-e", "print(io.read('l'), io.read('n'))" },
      { stdin = "hello\n42\n" })
  end)

  describe("-e", function()
    it_same("runs statements in order", { "-e", "a = 1", "-e", "print(a + 1)" })
    it_same("accepts the statement glued to the option", { "-eprint('glued')" })
    it_same("runs -e before the script", { "-e", "print('first')", "args.lua" }, { cwd = dir })
    it_same("stops at the first failing -e", { "-e", "error('first')", "-e", "print('not run')" })
    it_same("reports a syntax error in -e", { "-e", "x = = 1" },
      nil, function(r) assert.are.equal(1, r.status) end)
  end)

  describe("-l", function()
    it_same("requires a module into the global of its name",
      { "-l", "mymod", "-e", "print(mymod.name)" }, { cwd = dir })
    it_same("accepts the module name glued to the option",
      { "-lmymod", "-e", "print(mymod.name)" }, { cwd = dir })
    it_same("requires mod into global g with -l g=mod",
      { "-l", "m=mymod", "-e", "print(m.name, mymod)" }, { cwd = dir },
      function(r) assert.truthy(r.stdout:find("mymod\tnil", 1, true)) end)
    it_same("reports a module that is not found",
      { "-l", "no_such_module_xyz", "-e", "print('not run')" }, { cwd = dir })
    it_same("reports an error inside a module", { "-l", "badmod" }, { cwd = dir })
    it_same("loads standard library names", { "-l", "s=string", "-e", "print(s.rep('ab', 3))" })
  end)

  describe("-i with stdin not a terminal", function()
    it_same("prints the banner, prompts and results as lua5.4 does",
      { "-i" }, { stdin = "x = 6 * 7\nx\n'a', 2, nil\n=x + 1\nfor i = 1, 2 do\nprint(i)\nend\n" })
    it_same("enters the REPL after the script", { "-i", "args.lua", "z" },
      { cwd = dir, stdin = "#arg\narg[1]\n" })
    it_same("enters the REPL after -e", { "-e", "y = 5", "-i" }, { stdin = "y\n" })
    it_same("reports errors without the program name and keeps going",
      { "-i" }, { stdin = "error('boom')\nerror({})\nprint('still here')\n" })
  end)

  describe("-v", function()
    it_same("prints the version (qlua's banner names the same Lua)", { "-v" })
    it_same("runs -e after the version", { "-v", "-e", "print(1)" })
    it_same("runs the script after the version", { "-v", "args.lua" }, { cwd = dir })
  end)

  describe("-E", function()
    it_same("ignores LUA_INIT", { "-E", "-e", "print(INIT_VALUE)" },
      { env = { LUA_INIT = "INIT_VALUE = 1 print('init ran')" } },
      function(r) assert.are.equal("nil\n", r.stdout) end)
    it_same("ignores LUA_PATH", { "-E", "-e", "print(package.path)" },
      { env = { LUA_PATH = "/nowhere/?.lua" } },
      function(r) assert.falsy(r.stdout:find("nowhere", 1, true)) end)
    it_same("uses LUA_PATH without -E", { "-e", "print(package.path)" },
      { env = { LUA_PATH = "/nowhere/?.lua" } })
  end)

  describe("-W", function()
    it_same("turns warnings on", { "-W", "-e", "warn('hello') warn('a', 'b', 'c')" },
      nil, function(r) assert.truthy(r.stderr:find("Lua warning: hello", 1, true)) end)
    it_same("leaves warnings off by default", { "-e", "warn('hidden')" })
    it_same("lets a script switch warnings on", { "-e", "warn('@on') warn('shown')" })
  end)

  describe("-- and -", function()
    it_same("stops handling options at --", { "--", "args.lua", "-v", "-e" }, { cwd = dir })
    it_same("runs nothing more after a lone --", { "-e", "print('e')", "--" })
    it_same("runs stdin as the script with -", { "-", "a", "b" },
      { stdin = "print('stdin script', ...)\nprint(arg[0], arg[1])\n" })
    it_same("treats - after -- as a file name", { "--", "-" }, { cwd = dir },
      function(r) assert.are.equal("the file named -\n", r.stdout) end)
    it_same("runs piped stdin as a script when there are no arguments", {},
      { stdin = "print('piped', arg[0])\nerror('piped error')\n" })
  end)

  describe("LUA_INIT", function()
    it_same("runs LUA_INIT before -e", { "-e", "print(INIT_VALUE)" },
      { env = { LUA_INIT = "INIT_VALUE = 7 print('init')" } })
    it_same("prefers LUA_INIT_5_4 over LUA_INIT", { "-e", "print(INIT_VALUE)" },
      { env = { LUA_INIT = "INIT_VALUE = 'plain'", LUA_INIT_5_4 = "INIT_VALUE = 'versioned'" } },
      function(r) assert.are.equal("versioned\n", r.stdout) end)
    it_same("runs a file with @", { "-e", "print(INIT_VALUE)" },
      { cwd = dir, env = { LUA_INIT = "@init.lua" } })
    it_same("runs a file with @ in LUA_INIT_5_4", { "-e", "print(INIT_VALUE)" },
      { cwd = dir, env = { LUA_INIT_5_4 = "@init.lua", LUA_INIT = "error('not me')" } })
    it_same("stops on an error in LUA_INIT", { "-e", "print('not run')" },
      { env = { LUA_INIT = "error('bad init')" } },
      function(r) assert.are.equal(1, r.status) end)
    it_same("reports a missing @file", { "-e", "print('not run')" },
      { cwd = dir, env = { LUA_INIT_5_4 = "@missing_init.lua" } })
    it_same("reports a syntax error in LUA_INIT", {}, { env = { LUA_INIT = "x = = 1" } })
  end)

  describe("errors", function()
    it_same("reports a syntax error in a script, without a traceback", { "syntax.lua" },
      { cwd = dir }, function(r) assert.are.equal(1, r.status) end)
    it_same("reports a runtime error with a traceback", { "boom.lua" }, { cwd = dir },
      function(r) assert.truthy(r.stderr:find("PROG: boom.lua:2: boom\nstack traceback:", 1, true)) end)
    it_same("reports error levels", { "level2.lua" }, { cwd = dir })
    it_same("reports indexing nil", { "nilcall.lua" }, { cwd = dir })
    it_same("reports a syntax error on stdin", { "-" }, { stdin = "local = 1\n" })
    it_same("describes a table error object", { "-e", "error({})" })
    it_same("uses __tostring of an error object",
      { "-e", "error(setmetatable({}, { __tostring = function() return 'custom error' end }))" })
    it_same("ignores a __tostring that does not return a string",
      { "-e", "error(setmetatable({}, { __tostring = function() return 42 end }))" })
    it_same("describes a nil error object", { "-e", "error()" })
    it_same("prints a number error object", { "-e", "error(12)" })
    it_same("describes a boolean error object", { "-e", "error(false)" })
    it_same("reports errors in coroutines and pcall'd code the same",
      { "-e", "print(pcall(error, 'x')) coroutine.wrap(function() error('in coroutine') end)()" })
  end)

  describe("exit statuses", function()
    it_same("os.exit(3)", { "-e", "io.write('partial') os.exit(3)" },
      nil, function(r) assert.are.equal(3, r.status) end)
    it_same("os.exit(true)", { "-e", "os.exit(true)" })
    it_same("os.exit(false)", { "-e", "os.exit(false)" },
      nil, function(r) assert.are.equal(1, r.status) end)
    it_same("os.exit(0, true) closes the state", { "-e",
      "setmetatable({}, { __gc = function() print('collected') end }) os.exit(0, true)" })
    it_same("os.exit() means success", { "-e", "os.exit()" })
    it_same("a script that ends normally", { "-e", "print('ok')" })
  end)

  describe("bad options", function()
    for _, argv in ipairs({ { "-x" }, { "--x" }, { "-vx" }, { "-ix" }, { "-Ex" }, { "-Wx" },
                            { "-e" }, { "-l" }, { "-e", "-v" }, { "-v", "-l" },
                            { "-e", "print(1)", "-z" } }) do
      it_same("prints the usage for " .. table.concat(argv, " "), argv, nil,
        function(r) assert.are.equal(1, r.status); assert.truthy(r.stderr:find("usage: PROG")) end)
    end
    it_same("passes options after the script to the script", { "args.lua", "-x", "--" },
      { cwd = dir })
  end)
end)

describe("qlua's own additions to the command line", function()
  it("qlua -v names qlua, its version and the Lua version", function()
    local r = P.run({ QLUA, "-v" })
    assert.are.equal(0, r.status)
    assert.are.equal("", r.stderr)
    local version, lua_release = r.stdout:match("^qlua (%d+%.%d+%.%d+[%w%.%-]*)  (Lua 5%.4%.%d+)  Copyright [^\n]*\n$")
    assert.truthy(version, "unexpected banner: " .. r.stdout)
    local q = P.run({ QLUA, "-e", "io.write(qlua.version, ' ', _VERSION)" })
    assert.are.equal(version .. " Lua 5.4", q.stdout)
    assert.are.equal("Lua 5.4", lua_release:match("^Lua %d+%.%d+"))
  end)

  -- Tools read the Lua version off the end of the banner, so it ends as lua5.4's does (it
  -- once ended in ')').
  if LUA then
    it("qlua -v ends its line exactly as lua5.4 -v's does", function()
      local q, l = P.run({ QLUA, "-v" }), P.run({ LUA, "-v" })
      assert.truthy(l.stdout:find("^Lua 5%.4%.%d+  Copyright [^\n]*\n$"), l.stdout)
      assert.are.equal(l.stdout, q.stdout:sub(-#l.stdout))
      assert.truthy(q.stdout:find("^qlua %d+%.%d+%.%d+[%w%.%-]*  Lua"), q.stdout)
    end)
  else
    pending("qlua -v ends its line exactly as lua5.4 -v's does [" .. no_lua .. "]")
  end

  it("qlua.version is a string and require('qlua') is the global qlua", function()
    local r = P.run({ QLUA, "-e", "print(type(qlua.version), require('qlua') == qlua, package.loaded.qlua == qlua)" })
    assert.are.equal("string\ttrue\ttrue\n", r.stdout)
    assert.are.equal("", r.stderr)
  end)

  it("qlua.gpu_count() works with no GPU (0 here), printing nothing on stderr", function()
    local r = P.run({ QLUA, "-e", "print(qlua.gpu_count())" })
    assert.are.equal(0, r.status)
    assert.are.equal("", r.stderr)
    local count = tonumber(r.stdout:match("^(%d+)\n$"))
    assert.truthy(count, "not a count: " .. r.stdout)
    local has_gpu = io.open("/dev/nvidia0", "rb")
    if has_gpu then has_gpu:close() else assert.are.equal(0, count) end
  end)

  it("keeps qlua under -E, in LUA_INIT and in -l modules", function()
    local r = P.run({ QLUA, "-E", "-e", "print(type(qlua))" })
    assert.are.equal("table\n", r.stdout)
    r = P.run({ QLUA, "-e", "print(SEEN)" }, { env = { LUA_INIT = "SEEN = type(qlua)" } })
    assert.are.equal("table\n", r.stdout)
  end)

  it("names itself by argv[0] in messages", function()
    local r = P.run({ QLUA, "-e", "error('x')" })
    assert.are.equal(QLUA .. ": (command line):1: x\n", r.stderr:match("^[^\n]*\n"))
    assert.are.equal(1, r.status)
  end)

  it("runs a script with the runtime there", function()
    local script = P.write(P.tmpname(".lua"), "print(type(qlua.gpu_count), arg[0] ~= nil)\n")
    local r = P.run({ QLUA, script })
    assert.are.equal("function\ttrue\n", r.stdout)
    P.cleanup()
  end)
end)
