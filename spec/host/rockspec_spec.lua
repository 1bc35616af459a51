--[[
The LuaRocks rockspec (qlua-0.1.0-1.rockspec): `luarocks make` builds the C module
with the project Makefile and installs qlua.so where a stock lua5.4 finds it.

The build runs in a copy of the sources in a temporary directory (never in the
checkout, where other builds live), CPU-only (CUDA=0: the rock's packaging is under
test here, not the CUDA device, and a CPU build takes seconds instead of minutes), into
a temporary tree. Pending, with the reason, without luarocks, lua5.4 or Lua 5.4's
headers.
]]

local P = require("spec.helpers.process")

local QLUA = P.qlua()
local LUA, no_lua = P.lua()
local ROCKSPEC = "qlua-0.1.0-1.rockspec"

local function shell(cmd, opts)
  return P.run({ "sh", "-c", cmd }, opts)
end

-- Why the rock cannot be built here, or nil.
local function missing()
  if not P.have("luarocks") then return "luarocks is not installed (apt-get install luarocks)" end
  if not LUA then return no_lua end
  local incdir = shell("luarocks --lua-version 5.4 config variables.LUA_INCDIR").stdout:match("^(%S+)")
  if not incdir or not P.read(incdir .. "/lua.h") then
    return "no Lua 5.4 headers for luarocks (apt-get install liblua5.4-dev)"
  end
  return nil
end

describe("the rockspec", function()
  teardown(P.cleanup)

  local why = missing()
  if why then
    pending("luarocks make installs qlua.so for lua5.4 [" .. why .. "]")
    return
  end

  it("luarocks make installs qlua.so, which lua5.4 requires", function()
    local src, tree, home = P.tempdir(), P.tempdir(), P.tempdir()
    local copy = shell("cp -r Makefile runtime kernels lua " .. P.quote(ROCKSPEC) .. " " .. P.quote(src))
    assert.are.equal(0, copy.status, copy.stderr)
    local r = shell("CUDA=0 MAKEFLAGS=-j2 luarocks --lua-version 5.4 make --tree " ..
                    P.quote(tree) .. " " .. ROCKSPEC,
                    { cwd = src, env = { HOME = home }, timeout = 300 })
    assert.are.equal(0, r.status, r.stdout .. r.stderr)
    local so = tree .. "/lib/lua/5.4/qlua.so"
    assert.truthy(P.read(so), "not installed: " .. so)
    local expected = P.run({ QLUA, "-e", "io.write(qlua.version)" }).stdout
    local loaded = P.run({ LUA, "-e", "local q = require('qlua') " ..
                                      "io.write(q.version, ' ', q.tensor({1, 2, 3}):sum())" },
                         { env = { LUA_CPATH = tree .. "/lib/lua/5.4/?.so" } })
    assert.are.equal("", loaded.stderr)
    assert.are.equal(expected .. " 6", loaded.stdout)
    -- and qlua's Lua libraries, every file of lua/ (the rockspec lists them one by one)
    local auto = P.run({ LUA, "-e", "require('qlua'); io.write(type(require('qlua.autograd').grad))" },
                       { cwd = "/", env = { LUA_CPATH = tree .. "/lib/lua/5.4/?.so",
                                            LUA_PATH = tree .. "/share/lua/5.4/?.lua" } })
    assert.are.equal("function", auto.stdout, auto.stderr)
  end)

  it("lists every Lua library under lua/", function()
    local rock = P.read(ROCKSPEC)
    for f in io.popen("find lua -name '*.lua'"):lines() do
      local mod = f:sub(5, -5):gsub("/", ".")
      assert.truthy(rock:find('["' .. mod .. '"] = "' .. f .. '"', 1, true), f .. " is not in " .. ROCKSPEC)
    end
  end)
end)
