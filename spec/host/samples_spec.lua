--[[
spec/host/samples_spec.lua — the README's tour and the samples are run, not just read: every
```lua block of README.md and docs/API.md and every script in samples/ is executed with
the qlua under test, and must finish with status 0 and nothing on stderr.
]]

local P = require("spec.helpers.process")

local function lua_blocks(path)
  local text = assert(P.read(path), "cannot read " .. path)
  local blocks = {}
  for block in text:gmatch("```lua\n(.-)```") do blocks[#blocks + 1] = block end
  return blocks
end

local function run_ok(argv, what, env) return P.run_ok(argv, what, {timeout = 120, env = env}) end

-- one test per ```lua block of path, run with the checkout's lua/ on the path (the qlua
-- under test may be built outside it, where it would not find qlua.nn next to itself)
local function block_tests(path)
  for i, block in ipairs(lua_blocks(path)) do
    it("runs lua block " .. i, function()
      local file = P.write(P.tmpname(".lua"), block)
      run_ok({P.qlua(), file}, path .. " block " .. i, {LUA_PATH = "./lua/?.lua;;"})
    end)
  end
end

describe("README", function()
  it("has a tour", function()
    assert.is_true(#lua_blocks("README.md") >= 1)
  end)
  block_tests("README.md")
end)

describe("docs/API.md", function()
  block_tests("docs/API.md")
end)

describe("README, under stock lua5.4", function()
  -- The README's stock-lua5.4 command line, as written there, on the tour: the module of
  -- the qlua under test (its build directory's qlua.so) loaded as the global qlua.
  it("runs the tour under stock lua5.4 with its -l qlua command line", function()
    local lua, why = P.lua()
    if not lua then return pending(why) end
    -- stock lua5.4 cannot load a sanitizer build's module (libasan must come first), and
    -- `make asan` builds none
    if os.getenv("ASAN_OPTIONS") then return pending("an ASan-built qlua.so needs libasan preloaded") end
    local cmd = P.read("README.md"):match('`(LUA_CPATH="build/%?%.so;;" lua5%.4 %-l qlua script%.lua)`')
    assert.truthy(cmd, "the README's lua5.4 -l qlua command line")
    local build = P.qlua():match("^(.*)/[^/]+$")
    local script = P.write(P.tmpname(".lua"), lua_blocks("README.md")[1])
    cmd = cmd:gsub('"build/', '"' .. build .. "/"):gsub("^(.-)lua5%.4", "%1" .. P.quote(lua))
             :gsub("script%.lua$", P.quote(script))
    run_ok({"sh", "-c", cmd}, "the tour under lua5.4")
    local bare = P.run({lua, script}, {timeout = 60})
    assert.are_not.equal(0, bare.status, "without -l qlua the tour should fail")
  end)
end)

describe("samples", function()
  it("demo.lua runs and finishes", function()
    local out = run_ok({P.qlua(), "samples/demo.lua"}, "samples/demo.lua")
    assert.matches("gather", out)
    assert.matches("demo done", out, 1, true)
  end)

  it("gather.lua checks the gather (small sizes)", function()
    local out = run_ok({P.qlua(), "samples/gather.lua", "100000", "5000"}, "samples/gather.lua")
    assert.matches("gather", out)
  end)

  it("classifier.lua trains and checks itself (gradient, accuracy, CPU replay on a GPU)", function()
    local out = run_ok({P.qlua(), "samples/classifier.lua", "20000", "2"}, "samples/classifier.lua")
    assert.matches("gradient check: 24 entries", out, 1, true)
    assert.matches("classifier ok", out, 1, true)
    if qlua.gpu_count() > 0 then assert.matches("cpu replay of the first 20 steps", out, 1, true) end
  end)

  it("classifier.lua --graph replays its captured step and matches the eager steps", function()
    local out = run_ok({P.qlua(), "samples/classifier.lua", "--graph", "20000", "2"}, "samples/classifier.lua")
    assert.matches("eager run of the first 20 steps: weights agree with the graph's", out, 1, true)
    assert.matches("classifier ok", out, 1, true)
    if qlua.gpu_count() > 0 then assert.matches("the step as a CUDA graph", out, 1, true) end
  end)

  it("cnn.lua trains its convolutional network to 95% and checks itself", function()
    local out = run_ok({P.qlua(), "samples/cnn.lua"}, "samples/cnn.lua")
    assert.matches("cnn: test accuracy [%d.]+%% %(at least 95%% expected%)", out)
  end)

  it("dist_matmul.lua splits a product over 2 ranks of qlua --nproc and checks it", function()
    local out = run_ok({P.qlua(), "--nproc", "2", "samples/dist_matmul.lua", "256"}, "samples/dist_matmul.lua",
                       {LUA_PATH = "./lua/?.lua;;", RANK = false, WORLD_SIZE = false, MASTER_PORT = false})
    assert.matches("256 x 256 x 256 %w+ on 2 ranks %(%w+%): split [%d.]+ ms %([%d.]+ GFLOP/s%), one rank [%d.]+ ms, speed%-up [%d.]+x", out)
  end)

  it("soak.lua keeps memory bounded (a 2-second run)", function()
    local out = run_ok({P.qlua(), "samples/soak.lua", "2", "0.25"}, "samples/soak.lua")
    assert.matches("soak ok", out, 1, true)
  end)
end)

teardown(function() P.cleanup() end)
