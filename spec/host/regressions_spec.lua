--[[
Regressions: every problem the API fuzzer (lua/qlua/fuzz.lua) found, pinned as a spec.

Each case runs in its own qlua process, so a crash or a sanitizer report (make asan builds
with -fno-sanitize-recover) fails that case alone instead of ending the spec run. Cases
marked "UB" are signed-overflow undefined behaviour: a release build usually computes the
expected answer anyway, so they only fail under `make asan` (UBSan). The comment on each
case names the file at fault and the fuzzer seed/iteration that found it.
]]

local P = require("spec.helpers.process")

local QLUA = P.qlua()
-- ASan and the CUDA runtime reserve terabytes of address space: no ulimit -v under them
local qlua = rawget(_G, "qlua") or require("qlua")
local CAN_LIMIT = os.getenv("ASAN_OPTIONS") == nil and qlua.gpu_count() == 0

-- Runs `code` in a fresh qlua (optionally under a memory limit, which ASan cannot take)
-- and expects it to print "ok" and exit 0.
local function check(code, opts)
  opts = opts or {}
  local argv = { QLUA, "-e", code .. "\nprint('ok')" }
  if opts.mem_kb then
    argv = { "sh", "-c", "ulimit -v " .. opts.mem_kb .. "; exec \"$0\" \"$@\"", QLUA, "-e",
             code .. "\nprint('ok')" }
  end
  local r = P.run(argv, { timeout = opts.timeout or 60 })
  P.cleanup()
  if r.status ~= 0 or not r.stdout:find("ok\n", 1, true) then
    error(string.format("status %d\n--- stdout\n%s\n--- stderr\n%s", r.status, r.stdout, r.stderr), 2)
  end
end

-- Lua source asserting that `expr` raises an error whose message starts with `name`.
local function raises(expr, name)
  return string.format([[
local ok, err = pcall(function() return %s end)
assert(not ok, "no error from %s")
assert(type(err) == "string", "error is a " .. type(err))
err = err:gsub("^[^:]*:%%d+: ", "")
assert(err:find("^%s[:]") or err:find("^bad argument #%%d+ to '%s'"),
       "error does not name %s: " .. err)]], expr, (expr:gsub('"', "'")), name, name, name)
end

describe("regressions found by the fuzzer", function()
  describe("empty tensors whose other sizes multiply past int64", function()
    -- e.g. expand({2^62, 2^62, 0}): no elements, so a valid tensor, but the sizes'
    -- product overflows int64 before the zero is reached (seeds 1 and 2, iterations 629,
    -- 3809). UB: only make asan sees these.
    local make = "local t = qlua.zeros(0):expand(1 << 62, 1 << 62, 0)\n"

    it("numel is 0 (runtime/tensor.c qt_numel, UB)", function()
      check(make .. "assert(t:numel() == 0)\nassert(#t == 1 << 62)")
    end)

    it("view(-1) and reshape(-1) give shape {0} (runtime/ops.c ops_view_strides, UB)", function()
      check(make .. "local v = t:view(-1)\nassert(v:dim() == 1 and v:size(1) == 0)\n" ..
            "local r = t:reshape(-1)\nassert(r:dim() == 1 and r:size(1) == 0)")
    end)

    it("take raises naming take (runtime/cpu.c cpu_view_numel, UB)", function()
      check(make .. raises("t:take({1, 5})", "take"))
    end)

    it("totable of 2^40 empty rows fails fast, naming totable (runtime/l_tensor.c t_totable)",
       function()
      -- it builds every empty row, until Lua runs out of memory; under a 4 GB limit here
      if not CAN_LIMIT then pending("needs ulimit -v, which ASan and CUDA cannot run under"); return end
      check("local t = qlua.zeros(0):expand(1 << 40, 0)\n" .. raises("t:totable()", "totable"),
            { mem_kb = 4194304, timeout = 60 })
    end)
  end)

  it("narrow on a dim of size math.maxinteger (runtime/l_tensor.c t_narrow, UB)", function()
    -- start > n + 1 and n - (start - 1) overflow when n is math.maxinteger (seed 2, 1065)
    check("local big = qlua.zeros(0):expand(math.maxinteger, 0)\n" ..
          "assert(big:narrow(1, 1, 3):size(1) == 3)\n" ..
          "assert(big:narrow(1, math.maxinteger, 1):size(1) == 1)\n" ..
          raises("big:narrow(1, math.maxinteger, 2)", "narrow"))
  end)

  it("range with more elements than memory names range (runtime/l_qlua.c q_range)", function()
    -- the host buffer comes from lua_newuserdatauv, whose failure is Lua's bare
    -- "not enough memory" (seed 1, iteration 3258)
    check(raises("qlua.range(1125899906842624, -0.095537232183575682, -0.5)", "range") .. "\n" ..
          raises("qlua.range(0, 1 << 59)", "range"))
  end)

  it("totable of a tensor too large for Lua names totable (runtime/l_tensor.c t_totable)",
     function()
    -- lua_newuserdatauv(numel * elsize) fails with "not enough memory" (seed 1, 13199)
    check("local t = qlua.zeros(1):expand(1 << 50)\n" .. raises("t:totable()", "totable"))
  end)

  it("a finalizer freeing an operand in the middle of an op waits for the op (runtime/l_tensor.c t_free)",
     function()
    -- The core starts a full collection while allocating a result (GC pacing); a __gc
    -- that calls w:free() on an operand of that very op used to free the bytes the op was
    -- about to read (a crash, or a wrong result). The free now waits for the next call.
    -- Lua's collector is stopped, so that the soft limit's collection, in w + b, is the
    -- one that runs the finalizer (host bytes would otherwise step it at b's allocation).
    check("collectgarbage('stop')\n" ..
          "local function weight_of_dropped_layer()\n" ..
          "  local layer = setmetatable({ w = qlua.ones(25 * 1024 * 1024) },\n" ..
          "                             { __gc = function(self) self.w:free() end })\n" ..
          "  return layer.w\n" ..
          "end\n" ..
          "local w = weight_of_dropped_layer()\n" ..
          "local b = qlua.ones(25 * 1024 * 1024)\n" ..
          "for i = 1, 50 do local junk = {} end\n" ..
          "local y = w + b\n" ..
          "assert(y:numel() == 25 * 1024 * 1024, 'shape ' .. y:numel())\n" ..
          "assert(y:sum() == 2 * 25 * 1024 * 1024, 'sum ' .. y:sum())\n" ..
          "assert(not pcall(w.sum, w), 'w should have been freed by now')")
  end)

  it("bad index values are errors even when the result is empty (runtime/ops.c)", function()
    check(raises("qlua.empty(0, 3):index_select(2, {99})", "index_select") .. "\n" ..
          raises("qlua.zeros(0, 3):index_add_(2, {1, 7}, qlua.zeros(0, 2))", "index_add_") .. "\n" ..
          "assert(qlua.empty(0, 3):index_select(2, {3, 1}):size(2) == 2)")
  end)

  it("tostring of an empty tensor whose other sizes multiply past int64 (runtime/l_print.c, UB)",
     function()
    check("local s = tostring(qlua.empty(1, 1, 0):expand(1 << 62, 1 << 62, 0))\n" ..
          "assert(s:find('[]', 1, true), s)")
  end)

  it("opening the runtime twice in one state gives the same module (runtime/l_qlua.c)", function()
    -- A second luaopen_qlua used to make a second context and rebind the shared tensor
    -- metatable to it, so tensors made before ran on the new context.
    check("local t = qlua.ones(3)\n" ..
          "package.loaded.qlua = nil\n" ..
          "local again = require('qlua')\n" ..
          "assert(again == qlua, 'a second module table')\n" ..
          "assert(t:sum() == 3 and again.tensor({1, 2}):sum() == 3)")
  end)

  describe("fixed since they were found", function()
    it("expand refuses shapes whose element count overflows (runtime/ops.c)", function()
      check(raises("qlua.zeros(1):expand(1 << 40, 1 << 40)", "expand") .. "\n" ..
            raises("qlua.zeros(1):expand(1 << 31, 1 << 31, 1 << 31)", "expand") .. "\n" ..
            raises("qlua.zeros(3):expand(1 << 62, 1 << 62, 3)", "expand"))
    end)

    it("allocation failures name the op, not the device (runtime/ops.c, cpu.c)", function()
      check("local huge = qlua.zeros(1):expand(1 << 50)\n" ..
            raises("huge:clone()", "clone") .. "\n" ..
            raises("huge:contiguous()", "contiguous") .. "\n" ..
            raises("huge:neg()", "neg") .. "\n" ..
            raises("huge:add(1)", "add") .. "\n" ..
            raises("huge:to('float64')", "to") .. "\n" ..
            "local huge2 = qlua.zeros(2, 1):expand(2, 1 << 49)   -- not viewable flat\n" ..
            raises("huge2:reshape(-1)", "reshape") .. "\n" ..
            raises("qlua.zeros(1 << 50)", "zeros") .. "\n" ..
            raises("qlua.ones(1 << 62, 4)", "ones"))
    end)

    it("t[i] = tensor with a bad shape names index, not copy_ (runtime/l_tensor.c)", function()
      check("local t = qlua.zeros(3, 4)\n" ..
            raises("(function() t[1] = qlua.ones(5) end)()", "index") .. "\n" ..
            "local f = qlua.ones(4); f:free()\n" ..
            raises("(function() t[1] = f end)()", "index"))
    end)
  end)
end)
