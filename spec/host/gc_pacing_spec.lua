--[[
GC pacing by host bytes (runtime/core/storage.c ops_cpu_gc_step, runtime/binding/l_state.c
s_gc_step): a CPU tensor is a ~100-byte userdata to Lua, so the bytes behind it step Lua's
own incremental collector, and results a loop drops come back within a few allocations
instead of piling up to the 256 MiB soft limit.

  * a loop that drops 8 MiB results holds a few of them, not hundreds of MiB, in the
    incremental and the generational modes;
  * collectgarbage("stop") holds: the bytes grow and nothing is finalized until
    "restart", after which the loop is back to a few results;
  * a loop that frees its results runs no collection;
  * a finalizer run by a step in the middle of an op cannot take that op's operand;
  * GPU results (their bytes drive full collections of their own) step nothing.

Each case runs in a fresh qlua (its Lua heap small, the process's CPU bytes its own).
]]

local P = require("spec.helpers.process")
local T = require("qlua.testing")

local QLUA = P.qlua()
local gtest = T.gpu_tests(_ENV)

-- Runs `code` in a fresh qlua and expects it to print "ok" and exit 0.
local function child(code)
  code = string.format("package.path = %q\n", package.path) .. code .. "\nprint('ok')"
  local r = P.run({ QLUA, "-e", code }, { timeout = 120 })
  P.cleanup()
  if r.status ~= 0 or not r.stdout:find("ok\n", 1, true) then
    error(string.format("status %d\n--- stdout\n%s\n--- stderr\n%s", r.status, r.stdout,
      r.stderr), 2)
  end
end

-- What every child shares: an 8 MiB source, the CPU bytes allocated, a loop that drops
-- its results (returning the most bytes held beyond what it started with), and a count of
-- the collections run (a finalizer that re-arms itself: each collection finalizes one).
local PRELUDE = [[
local MiB = 1024 * 1024
local src = qlua.rand(2 * MiB)                           -- 8 MiB of float32
local function allocated() return qlua.memory("cpu").allocated end
local function drop_results(n, op)
  local base, most = allocated(), 0
  for _ = 1, n do
    local r = op()
    most = math.max(most, allocated() - base)
  end
  return most
end
local function clone() return src:clone() end
local collections = 0
local function arm() setmetatable({}, {__gc = function() collections = collections + 1; arm() end}) end
]]

-- The qlua host starts Lua's collector in generational mode, as lua5.4 does; the cases
-- that depend on the mode run in both.
local MODES = { "generational", "incremental" }

describe("GC pacing by host bytes", function()
  for _, mode in ipairs(MODES) do
    it("a loop that drops 8 MiB results holds a few of them (" .. mode .. ")", function()
      child(PRELUDE .. string.format("collectgarbage(%q)\n", mode) .. [[
collectgarbage()
local most = drop_results(64, clone)                     -- 512 MiB allocated in all
assert(most <= 4 * 8 * MiB, ("clone: %.0f MiB held beyond the source"):format(most / MiB))
most = drop_results(64, function() return src * 2 end)
assert(most <= 4 * 8 * MiB, ("mul: %.0f MiB held beyond the source"):format(most / MiB))
most = drop_results(32, function() return src:to("float64") end)
assert(most <= 4 * 16 * MiB, ("to: %.0f MiB held beyond the source"):format(most / MiB))
]])
    end)
  end

  it('collectgarbage("stop") holds: the bytes grow, nothing is finalized until "restart"', function()
    child(PRELUDE .. [[
collectgarbage()
arm()
collectgarbage("stop")
local before = allocated()
for _ = 1, 16 do local r = src:clone() end               -- 128 MiB: under the soft limit
local grown = allocated() - before
assert(grown == 16 * 8 * MiB, ("stopped: %.0f MiB grown, expected 128"):format(grown / MiB))
assert(collections == 0, "a collection ran while the collector was stopped")
collectgarbage("restart")
drop_results(32, clone)
assert(collections > 0, "no collection after restart")
local now = allocated() - before
assert(now <= 4 * 8 * MiB, ("after restart: %.0f MiB still held"):format(now / MiB))
]])
  end)

  it("results freed or closed step nothing: as many collections as with 16-byte results", function()
    child(PRELUDE .. [[
local tiny = qlua.rand(4)
local function loops(t)
  local c0 = collections
  for _ = 1, 64 do t:clone():free() end
  for _ = 1, 64 do local r <close> = t * 2 end
  return collections - c0
end
collectgarbage()
arm()
loops(src)                                               -- pays for src's own 8 MiB
local big, small = loops(src), loops(tiny)
assert(big <= small + 1, ("8 MiB results: %d collections, 16-byte ones: %d"):format(big, small))
assert(allocated() == 8 * MiB + 16, "the results were not given back")
]])
  end)

  for _, mode in ipairs(MODES) do
    it("a finalizer run by a step mid-op cannot take the op's operand (" .. mode .. ")", function()
      child(PRELUDE .. string.format("collectgarbage(%q)\n", mode) .. [[
local x = qlua.rand(MiB)                                 -- 4 MiB
local want = x:sum()
collectgarbage()
do local garbage = qlua.empty(16 * MiB) end              -- 64 MiB dropped
local fired = false
setmetatable({}, {__gc = function() fired = true; x:free() end})
local r = x:clone()                                      -- the step before its allocation
assert(fired, "the step ran no collection")
assert(r:sum() == want, "clone read its operand after a finalizer freed it")
local ok, err = pcall(function() return x:sum() end)
assert(not ok and err:find("freed", 1, true), "x was not freed once the clone returned")
]])
    end)
  end

  gtest("GPU results step nothing on the host", function()
    child(PRELUDE .. [[
local g = qlua.rand(2 * MiB, {device = "gpu"})
local g_tiny = qlua.rand(4, {device = "gpu"})
local function loop(t)
  local c0 = collections
  for _ = 1, 16 do local r = t * 2 end                   -- 8 MiB: 128 MiB of GPU garbage in all
  qlua.sync()
  return collections - c0
end
collectgarbage()
arm()
local big, small = loop(g), loop(g_tiny)
assert(big <= small + 1, ("8 MiB GPU results: %d collections, 16-byte ones: %d"):format(big, small))
]])
  end)
end)
