--[[
Embedding safety: samples/embed.c opens two lua_States with the runtime, makes
tensors in both, lends C memory to Lua, closes one state and checks that its tensors were
freed (device memory too) and that the other still works; with --threads [N], two states
run on two threads at once and N references are released on other threads. See
the file for what it checks.

The binary is $QLUA_EMBED, else `embed` next to the qlua under test (build/embed for
build/qlua), built with `make embed-build` when it is missing (the same BUILD, and CUDA
only if that build has CUDA objects). Without a C compiler the spec is pending.
]]

local P = require("spec.helpers.process")

local QLUA = P.qlua()
local BUILD = QLUA:match("^(.*)/[^/]*$") or "."

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- The embed binary, built if needed; nil and a reason when it cannot be had.
local function embed_binary()
  local path = os.getenv("QLUA_EMBED") or (BUILD .. "/embed")
  if exists(path) then return path end
  if os.getenv("QLUA_EMBED") then return nil, "QLUA_EMBED=" .. path .. " does not exist" end
  if not (P.have("cc") or P.have("gcc")) or not P.have("make") then
    return nil, "no C compiler or make to build " .. path
  end
  local cuda = exists(BUILD .. "/obj/kernels/cuda_device.o") and "1" or "0"
  local r = P.run({ "make", "--no-print-directory", "-s", "BUILD=" .. BUILD, "CUDA=" .. cuda,
                    "embed-build" }, { timeout = 600 })
  assert(r.status == 0, "make embed-build failed:\n" .. r.stdout .. r.stderr)
  return path
end

describe("embedding", function()
  local binary, why = embed_binary()

  local function run_embed(args)
    if not binary then pending(why); return end
    local argv = { binary }
    for _, a in ipairs(args) do argv[#argv + 1] = a end
    local r = P.run(argv, { timeout = 120 })
    P.cleanup()
    assert(r.status == 0, "embed failed with status " .. r.status .. ":\n" .. r.stdout .. r.stderr)
    assert.truthy(r.stdout:find("embed: ok", 1, true), r.stdout)
    assert.falsy(r.stderr:find("FAILED", 1, true), r.stderr)
    return r
  end

  it("two states: tensors in both, lent memory, one closed, the other working", function()
    run_embed({})
  end)

  it("two states running at the same time on two threads", function()
    run_embed({ "--threads", "1" })
  end)

  -- References kept with qt_tensor_share and released on two other threads while
  -- the state uses, frees and collects the tensors (lent memory too), some held past
  -- lua_close. Plain int reference counts failed here (double frees, leaked or early-freed
  -- storages); make tsan runs the same mode under ThreadSanitizer.
  it("references kept with qt_tensor_share, released on other threads", function()
    local r = run_embed({ "--threads", "10000" })
    assert.truthy(r.stdout:find("10000 cross-thread releases", 1, true), r.stdout)
  end)

  -- The other way to embed: the Lua C module, loaded by a host that is not ours.
  it("qlua.so loads in the stock lua5.4 and works there", function()
    local lua, no_lua = P.lua()
    if not lua then pending(no_lua); return end
    if os.getenv("ASAN_OPTIONS") then pending("an ASan-built qlua.so needs libasan preloaded"); return end
    local so = BUILD .. "/qlua.so"
    if not exists(so) then pending(so .. " is not built"); return end
    local code = [[
local build = ...
package.cpath = build .. "/?.so;" .. package.cpath
local qlua = require("qlua")
assert(require("qlua") == qlua)
local a = qlua.rand(100, 100)
local b = a:t():matmul(a)
assert(b:size(1) == 100 and qlua.memory("cpu").allocated >= 2 * 100 * 100 * 4)
local v = a:narrow(1, 1, 3); a:free()
assert(not pcall(v.sum, v))
print("ok " .. qlua.version)]]
    local script = P.write(P.tmpname(".lua"), code)
    local r = P.run({ lua, script, BUILD }, { timeout = 60 })
    P.cleanup()
    assert(r.status == 0 and r.stdout:find("^ok "), "status " .. r.status .. "\n" .. r.stdout .. r.stderr)
  end)
end)
