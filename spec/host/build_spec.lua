--[[
The build and the test runner's output: what the Makefile decides before it compiles
anything (read from `make -n`, a dry run, into a build directory of its own), and the
summary the spec runner prints for pending tests.

  - Without a GPU, CUDA=auto leaves the CUDA device out and says so in one line; CUDA=1
    compiles it anyway (as CI does); CUDA=0 never, silently.
  - The heavy CUDA files are compiled as several objects, one per part, and the parts come
    first (make starts the longest jobs first).
  - Objects remember their flags: a dry run with other flags rewrites the stamp, and a
    real build would then rebuild instead of mixing CPU-only and CUDA objects.
  - The rock shares the CUDA objects of build/ (KERNEL_BUILD).
  - spec/run.lua sums pending tests up by reason, one line each.
]]

local P = require("spec.helpers.process")

local function make(args, env)
  local argv = { "make", "-n", "--no-print-directory" }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  -- a make of its own: nothing inherited from a make that runs the specs
  local clean = { MAKEFLAGS = false, MFLAGS = false, MAKELEVEL = false, CUDA = false }
  for k, v in pairs(env or {}) do clean[k] = v end
  return P.run(argv, { env = clean, timeout = 60 })
end

local function has_gpu()
  return P.run({ "sh", "-c", "ls /dev/nvidia[0-9]* >/dev/null 2>&1 || " ..
                             "nvidia-smi -L 2>/dev/null | grep -q GPU" }).status == 0
end

local function nvcc_lines(out)
  local n = 0
  for line in out:gmatch("[^\n]+") do
    if line:match("nvcc") and line:match(" %-c ") then n = n + 1 end
  end
  return n
end

local function have_nvcc()
  return P.have("nvcc") or P.read("/usr/local/cuda/bin/nvcc") ~= nil
end

describe("the build", function()
  teardown(P.cleanup)

  if not P.have("make") then
    pending("make is not installed")
    return
  end

  it("CUDA=0 builds no CUDA object and says nothing about it", function()
    local r = make({ "CUDA=0", "BUILD=" .. P.tempdir() })
    assert.are.equal(0, r.status, r.stderr)
    assert.are.equal(0, nvcc_lines(r.stdout), r.stdout)
    assert.falsy(r.stdout:match("no GPU"))
  end)

  it("CUDA=auto without a GPU builds CPU-only, in one line that says so", function()
    if not have_nvcc() then return pending("no nvcc here: CUDA=auto is CUDA=0 silently") end
    if has_gpu() then return pending("this machine has a GPU: CUDA=auto builds the CUDA device") end
    local r = make({ "CUDA=auto", "BUILD=" .. P.tempdir() })
    assert.are.equal(0, r.status, r.stderr)
    assert.are.equal(0, nvcc_lines(r.stdout), r.stdout)
    local said = 0
    for line in r.stdout:gmatch("[^\n]+") do
      if line:match("no GPU") then said = said + 1; assert.truthy(line:match("CUDA=1")) end
    end
    assert.are.equal(1, said, r.stdout)
  end)

  it("CUDA=1 compiles every .cu file, the heavy ones in parts that start first", function()
    if not have_nvcc() then return pending("no nvcc here") end
    local r = make({ "CUDA=1", "BUILD=" .. P.tempdir() })
    assert.are.equal(0, r.status, r.stderr)
    local objects, order = {}, {}
    for line in r.stdout:gmatch("[^\n]+") do
      local obj = line:match("nvcc .* %-c %-o (%S+%.o) kernels/")
      if obj then
        objects[obj:match("([^/]+)%.o$")] = line
        order[#order + 1] = obj:match("([^/]+)%.o$")
      end
    end
    local parts = P.read("Makefile"):match("\nCU_PARTS := ([^\n]+)")
    assert.truthy(parts, "CU_PARTS")
    local nparts = 0
    for stem, n in parts:gmatch("(%w+):(%d+)") do
      n = tonumber(n)
      assert.truthy(objects[stem], stem .. ": no entry object")
      assert.truthy(objects[stem]:match("%-DQT_NPARTS=" .. n), objects[stem])
      for k = 0, n - 1 do
        local line = objects[stem .. ".part" .. k]
        assert.truthy(line, stem .. ".part" .. k .. " missing")
        assert.truthy(line:match("%-DQT_PART=" .. k .. " "), line)
      end
      nparts = nparts + n
    end
    assert.truthy(nparts >= 8)
    for k = 1, nparts do assert.truthy(order[k]:match("%.part%d+$"), "job " .. k .. " is " .. order[k]) end
    for f in io.popen("ls kernels"):lines() do
      local stem = f:match("^(.*)%.cu$")
      if stem then assert.truthy(objects[stem], stem .. ".cu is not compiled") end
    end
  end)

  it("objects remember their flags: other flags rewrite the stamp", function()
    local dir = P.tempdir()
    assert.are.equal(0, make({ "CUDA=0", "BUILD=" .. dir }).status)
    local cpu = P.read(dir .. "/obj/c.flags")
    assert.truthy(cpu and not cpu:match("QLUA_CUDA"), cpu)
    assert.are.equal(0, make({ "CUDA=0", "CFLAGS=-O0", "BUILD=" .. dir }).status)
    local other = P.read(dir .. "/obj/c.flags")
    assert.truthy(other:match("%-O0"), other)
    if have_nvcc() then
      assert.are.equal(0, make({ "CUDA=1", "BUILD=" .. dir }).status)
      assert.truthy(P.read(dir .. "/obj/c.flags"):match("QLUA_CUDA"))
      assert.truthy(P.read(dir .. "/obj/cu.flags"):match("nvcc"))
    end
  end)

  it("the rock's CUDA objects are build/'s", function()
    local rock = P.read("qlua-0.1.0-1.rockspec")
    assert.truthy(rock:match('KERNEL_BUILD = "build"'))
    if not have_nvcc() then return end
    local dir = P.tempdir()
    local r = make({ "CUDA=1", "BUILD=" .. dir, "KERNEL_BUILD=build" })
    assert.are.equal(0, r.status, r.stderr)
    -- compiled there when build/ has none yet, linked from there when it has them (CI's
    -- `make all` comes first): either way build/'s, and none in the rock's own directory
    assert.truthy(r.stdout:match("build/obj/kernels/elementwise%.o[%s\n]"), r.stdout)
    assert.falsy(r.stdout:find(dir .. "/obj/kernels/", 1, true), r.stdout)
  end)

  it("make install puts qlua, qlua.so and the Lua libraries under PREFIX, where both find them", function()
    local qlua = P.qlua()
    local build, prefix = P.tempdir(), P.tempdir()
    local so = qlua:gsub("[^/]*$", "") .. "qlua.so"
    if not P.read(so) then return pending("no qlua.so next to " .. qlua) end
    assert.are.equal(0, P.run({ "cp", qlua, so, build }).status)
    local r = P.run({ "make", "--no-print-directory", "install-files", "BUILD=" .. build, "PREFIX=" .. prefix },
                    { env = { MAKEFLAGS = false, MFLAGS = false, MAKELEVEL = false }, timeout = 60 })
    assert.are.equal(0, r.status, r.stdout .. r.stderr)
    for f in io.popen("find lua -name '*.lua'"):lines() do
      assert.truthy(P.read(prefix .. "/share/lua/5.4/" .. f:sub(5)), f .. " is not installed")
    end
    -- the installed qlua finds them next to its bin/, from any directory, with no LUA_PATH
    local got = P.run({ prefix .. "/bin/qlua", "-e", "io.write(type(require('qlua.autograd').grad))" },
                      { cwd = "/", env = { LUA_PATH = false, LUA_PATH_5_4 = false } })
    assert.are.equal("function", got.stdout, got.stderr)
    local LUA = P.lua()
    if LUA then
      local l = P.run({ LUA, "-e", "require('qlua'); io.write(type(require('qlua.autograd').backward))" },
                      { cwd = "/", env = { LUA_CPATH = prefix .. "/lib/lua/5.4/?.so",
                                           LUA_PATH = prefix .. "/share/lua/5.4/?.lua" } })
      assert.are.equal("function", l.stdout, l.stderr)
    end
  end)

  it("make deps installs what the tests and the rock need", function()
    local list = P.read("Makefile"):match("DEB_PACKAGES := (.-)\n[^ ]")
    for _, pkg in ipairs({ "lua5.4", "lua-busted", "luarocks", "python3-numpy", "util-linux" }) do
      assert.truthy(list:match("%f[%w]" .. pkg:gsub("%-", "%%-") .. "%f[^%w%-]"), pkg)
    end
  end)
end)

describe("the spec runner's output", function()
  teardown(P.cleanup)

  it("sums pending tests up by reason, one line each", function()
    local dir = P.tempdir()
    P.write(dir .. "/pend_spec.lua", [[
      describe("g", function()
        for i = 1, 5 do it("gpu " .. i, function() pending("no GPU here") end) end
        it("other", function() pending("no luarocks") end)
        it("passes", function() assert.are.equal(1, 1) end)
      end)
    ]])
    local qlua = P.qlua()
    local r = P.run({ qlua, "spec/run.lua", dir .. "/pend_spec.lua" },
                    { env = { QLUA = qlua }, timeout = 60 })
    assert.are.equal(0, r.status, r.stdout .. r.stderr)
    assert.truthy(r.stdout:match("1 success / 0 failures / 0 errors / 6 pending"), r.stdout)
    assert.truthy(r.stdout:match("\npending: 5 x no GPU here %[1 file%]\n"), r.stdout)
    assert.truthy(r.stdout:match("\npending: 1 x no luarocks %[1 file%]\n"), r.stdout)
    assert.falsy(r.stdout:match("Pending"), r.stdout)
    local each = P.run({ qlua, "spec/run.lua", "-o", "plainTerminal", dir .. "/pend_spec.lua" },
                       { env = { QLUA = qlua }, timeout = 60 })
    local listed = 0
    for _ in each.stdout:gmatch("Pending %->") do listed = listed + 1 end
    assert.are.equal(6, listed, each.stdout)
  end)
end)
