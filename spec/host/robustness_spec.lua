--[[
Robustness: what a script, a finalizer or an exhausted address space does must
never crash or hang qlua, and qlua keeps its own dtype rules (docs/API.md).

  * an op's operands stay alive and unchanged until it returns, whatever a finalizer run in
    the middle of it does to them (closes, collects by hand, frees them or a view), on
    every device;
  * a product that cannot get OpenBLAS's buffers raises instead of spinning;
  * the dtype rules: clamp by float bounds, range as Lua's for, negative integer powers,
    int32 with integers out of its range, max/min over nothing, indices into an empty dim;
  * arguments a function does not take are errors naming it; running out of Lua memory in
    totable names totable.

The crash and hang cases run in child qlua processes (a crash then fails that case alone).
]]

local P = require("spec.helpers.process")
local T, qlua = require("qlua.testing").spec(_ENV)

local QLUA = P.qlua()
local HAS_GPU, NO_GPU_REASON = T.gpu_status()
-- ASan and the CUDA runtime reserve terabytes of address space: no ulimit -v under them
local CAN_LIMIT = os.getenv("ASAN_OPTIONS") == nil and qlua.gpu_count() == 0

-- Runs `code` in a fresh qlua (under `ulimit -v mem_kb` when given) and expects it to
-- print "ok" and exit 0.
local function child(code, opts)
  opts = opts or {}
  code = string.format("package.path = %q\n", package.path) .. code .. "\nprint('ok')"
  local argv = { QLUA, "-e", code }
  if opts.mem_kb then
    argv = { "sh", "-c", "ulimit -v " .. opts.mem_kb .. "; exec \"$0\" \"$@\"", QLUA, "-e", code }
  end
  local r = P.run(argv, { timeout = opts.timeout or 60, env = opts.env })
  P.cleanup()
  if r.status ~= 0 or not r.stdout:find("ok\n", 1, true) then
    error(string.format("status %d\n--- stdout\n%s\n--- stderr\n%s", r.status, r.stdout,
                        r.stderr), 2)
  end
end

------------------------------------------------------------------------ finalizers mid-op

-- Each op is `fn(x)` on the operand x that the finalizer attacks; the other operands are
-- built first. In-place ops are checked against the same op on a clone.
local OPS = {
  clone = "return x:clone()",
  contiguous = "return x:contiguous()",          -- x is a transposed view: a real copy
  to = "return x:to('float64')",
  reshape = "return x:reshape(-1)",              -- transposed: reshape copies
  add_ = "return x:add_(b64)",                   -- float64 operand: a work copy is made
  mul_ = "return x:mul_(b64)",
  add = "return x + b",
  exp = "return x:exp()",
  sum = "return x:sum(1)",
  scatter_ = "return x:scatter_(1, perm, b64)",   -- distinct rows per column: one winner
  index_add_ = "return x:index_add_(1, rows, b64:narrow(1, 1, 64))",
  take = "return x:take(flat)",
  gather = "return x:gather(1, idx)",
  index_select = "return x:index_select(1, rows)",
  matmul = "return x:matmul(w)",
}
local TRANSPOSED = { contiguous = true, reshape = true }

-- What the finalizer does to x (or to a view sharing its storage).
local ATTACKS = {
  close = "local y <close> = x",
  gc = "getmetatable(x).__gc(x)",
  free = "x:free()",
  free_view = "xv:free()",
}

local function finalizer_script(op, attack, device)
  return string.format([[
local dev = %q
local T = require("qlua.testing")
collectgarbage("stop")
qlua.seed(7)
local base = qlua.rand(512, 1024, {device = dev})
local x = %s
local xv = x:view(x:is_contiguous() and -1 or {x:size(1), x:size(2)})
local b = qlua.rand(x:size(1), x:size(2), {device = dev})
local b64 = b:to("float64")
local idx = qlua.randint(1, x:size(1), {x:size(1), x:size(2)}, {device = dev})
local perm = qlua.range(x:size(1), 1, -1, {device = dev}):view(-1, 1):expand(x:size(1), x:size(2)):contiguous()
local rows = qlua.randint(1, x:size(1), 64, {device = dev})
local flat = qlua.randint(1, x:numel(), 4096, {device = dev})
local w = qlua.rand(x:size(2), 8, {device = dev})
local function fn(x) %s end
local expected = fn(x:clone()):cpu():totable()
local before = x:cpu():totable()
collectgarbage("collect")
-- just under the soft limit of x's device: the op's own allocation collects garbage
local mem = qlua.memory(dev == "cpu" and "cpu" or 0)
local big = qlua.empty((256 * 1024 * 1024 - mem.allocated - 1024) // 4, {device = dev})
setmetatable({}, {__gc = function() %s end})
local ok, result = pcall(fn, x)
assert(ok, "the op failed: " .. tostring(result))
T.assert_close(result:cpu():totable(), expected, 1e-6, "result")
big:free()
qlua.memory("cpu")   -- a call that holds neither: the waiting release happens here
local ok2, err = pcall(function() return x:numel() end)
assert(not ok2 and tostring(err):find("has been freed"), "x was not released after the op")
]], device, TRANSPOSED[op] and "base:t()" or "base", OPS[op], ATTACKS[attack])
end

describe("an op's operands stay alive while a finalizer releases them", function()
  local devices = { "cpu", "gpu" }
  local ops = {}
  for name in pairs(OPS) do ops[#ops + 1] = name end
  table.sort(ops)
  for _, device in ipairs(devices) do
    for _, op in ipairs(ops) do
      it(string.format("%s on the %s, the operand closed/collected/freed/view freed", op, device),
         function()
        if device == "gpu" and not HAS_GPU then
          pending("no GPU: " .. tostring(NO_GPU_REASON))
          return
        end
        for _, attack in ipairs({ "close", "gc", "free", "free_view" }) do
          child(finalizer_script(op, attack, device))
        end
      end)
    end
  end

  it("a release or another call made from a coroutine does not reach a call in progress",
     function()
    -- a callback (an opts table's __index) and a finalizer run Lua code in the middle of
    -- a call; a coroutine resumed there must see the call's frames on the other thread
    child([[
local mt = getmetatable(qlua.zeros(1))
local x = qlua.rand(3)
local want = x:totable()
local opts = setmetatable({}, {__index = function(_, k)
  if k == "device" then
    mt.__close(x)                                   -- deferred: to() holds x
    coroutine.wrap(function() qlua.zeros(1) end)()  -- a call on another coroutine: no drain
    return "cpu"
  end
end})
local y = x:to(opts)
assert(y == x or y:numel() == 3)
local x2 = qlua.rand(3)
local opts2 = setmetatable({}, {__index = function(_, k)
  if k == "device" then
    coroutine.wrap(function() mt.__close(x2) end)() -- the release itself on another thread
    return "cpu"
  end
end})
local y2 = x2:to(opts2)
assert(y2:numel() == 3)
local a = qlua.ones(40 * 1000 * 1000)                -- 160 MB
collectgarbage()
setmetatable({}, {__gc = function()
  a:free()                                          -- deferred: add() holds a
  coroutine.wrap(function() qlua.zeros(1) end)()
end})
local r = a:add(1)                                   -- its 160 MB result collects garbage
assert(r:sum() == 80000000, "add read freed memory: " .. r:sum())
]])
  end)

  it("garbage finalized by a core-started collection is still released at once", function()
    child([[
collectgarbage("stop")
local a = qlua.rand(4 * 1024 * 1024 + 4096)            -- 16 MiB and a bit
for i = 1, 7 do qlua.empty(8 * 1024 * 1024) end      -- 224 MiB of garbage, under the limit
local before = qlua.memory("cpu").allocated
local c = a:clone()                                    -- past the limit: a collection
local after = qlua.memory("cpu").allocated
assert(after < before - 200 * 1024 * 1024, "the garbage was not released: " .. before .. " -> " .. after)
]])
  end)

  it("a tensor closed in its own scope is released at once", function()
    local t = qlua.rand(1000)
    local before = qlua.memory("cpu").allocated
    do local u <close> = qlua.rand(1024, 1024) end
    assert.equal(before, qlua.memory("cpu").allocated)
    t:free()
  end)
end)

------------------------------------------------------------------------ no hang in BLAS

describe("matmul with the address space used up", function()
  it("raises 'matmul: out of memory' instead of spinning in OpenBLAS", function()
    if not CAN_LIMIT then pending("ulimit -v is not possible under ASan or CUDA") return end
    child([[
local keep = {}
while true do
  local ok, t = pcall(qlua.empty, 16 * 1024 * 1024)
  if not ok then break end
  keep[#keep + 1] = t
end
local a, b = qlua.rand(64, 64), qlua.rand(64, 64)
local ok, err = pcall(qlua.matmul, a, b)
assert(not ok, "matmul did not fail")
assert(tostring(err):find("matmul: out of memory", 1, true), err)
keep = nil
collectgarbage()
local c = qlua.matmul(a, b)          -- with memory back, the product works
assert(c:size(1) == 64)
]], { mem_kb = 2000000, timeout = 60 })
  end)
end)

------------------------------------------------------------------------ dtype rules

local function each_device(fn)
  for _, device in ipairs(T.devices()) do fn(device) end
end

describe("qlua's dtype rules", function()
  it("clamp of an integer tensor by float bounds gives float64; clamp_ refuses", function()
    each_device(function(dev)
      for _, dtype in ipairs(T.int_dtypes) do
        local a = qlua.tensor({ 1, 5, 9, -3 }, { dtype = dtype, device = dev })
        local c = a:clamp(2.5, 7.5)
        assert.equal("float64", c:dtype())
        T.assert_equal(c:totable(), { 2.5, 5.0, 7.5, 2.5 })
        local lo = a:clamp(2.5)
        assert.equal("float64", lo:dtype())
        T.assert_equal(lo:totable(), { 2.5, 5.0, 9.0, 2.5 })
        local i = a:clamp(2, 7)
        assert.equal(dtype, i:dtype())
        T.assert_equal(i:totable(), { 2, 5, 7, 2 })
        T.assert_error(function() return a:clamp_(2.5, 7) end,
                       "clamp_: cannot store float64 result in " .. dtype .. " tensor")
        T.assert_error(function() return a:clamp_(nil, 7.0) end, "clamp_: cannot store float64")
        T.assert_equal(a:totable(), { 1, 5, 9, -3 }, "clamp_ left a as it was")
        a:clamp_(2, 7)
        T.assert_equal(a:totable(), { 2, 5, 7, 2 })
      end
    end)
  end)

  it("range has the values of Lua's numeric for, float steps included", function()
    local cases = {
      { 0, 0.3, 0.1 }, { 0, 1, 0.1 }, { 1, 2.5 }, { 1, 2.5, 1 }, { 5, 1.5, -1 }, { 0.5, 3 },
      { 1, -1 }, { 0, 1, 0.25 }, { 10, 0, -0.7 }, { -1, 1, 0.2 }, { 0.1, 0.7, 0.1 },
      { 1, 10, 3 }, { 3, 1e300, 1e299 }, { 2, 0 / 0 }, { 0, 0.9, 0.3 }, { 1.0, 3 },
    }
    for _, c in ipairs(cases) do
      local ref = {}
      for i = c[1], c[2], c[3] or 1 do ref[#ref + 1] = i + 0.0 end
      local what = string.format("range(%s, %s, %s)", c[1], c[2], c[3])
      local t = qlua.range(c[1], c[2], c[3], { dtype = "float64" })
      assert.equal(#ref, t:numel(), what)
      if #ref > 0 then T.assert_equal(t:totable(), ref, what) end
      local fits = true  -- float32 refuses a value past its range, as uint8 does
      for _, v in ipairs(ref) do fits = fits and math.abs(v) < 3.4e38 end
      if fits then
        assert.equal(#ref, qlua.range(c[1], c[2], c[3]):numel(), what .. " float32")
      else
        T.assert_error(function() return qlua.range(c[1], c[2], c[3]) end, "out of range for float32")
      end
    end
    assert.equal(3, qlua.range(0, 0.3, 0.1):numel())
    T.assert_error(function() return qlua.range(1e16, 1e16 + 10, 1.0) end, "range: step")
  end)

  it("an integer tensor to a negative integer power is an error, as in NumPy", function()
    each_device(function(dev)
      for _, dtype in ipairs(T.int_dtypes) do
        local a = qlua.tensor({ 2, 3, 4 }, { dtype = dtype, device = dev })
        local msg = "pow: integers to negative integer powers are not allowed"
        T.assert_error(function() return a ^ -1 end, msg)
        T.assert_error(function() return a:pow(-2) end, msg)
        T.assert_error(function() return a:pow_(-1) end, "pow_: integers to negative")
        local e = qlua.tensor({ 1, -2, 3 }, { dtype = dtype, device = dev })
        T.assert_error(function() return a ^ e end, msg)
        T.assert_error(function() return a:pow_(e) end, "pow_: integers to negative")
        T.assert_error(function() return 2 ^ e end, msg)
        T.assert_equal(a:totable(), { 2, 3, 4 }, "the failed pow_ left a as it was")
        T.assert_equal((a ^ 2):totable(), { 4, 9, 16 })
        T.assert_equal((2 ^ a):totable(), { 4, 8, 16 })
        T.assert_equal((a ^ qlua.tensor({ 0, 1, 2 }, { dtype = dtype, device = dev })):totable(),
                       { 1, 3, 16 })
        local f = a ^ -1.0                              -- a float exponent: float64
        assert.equal("float64", f:dtype())
        T.assert_close(f:totable(), { 0.5, 1 / 3, 0.25 }, 1e-15)
      end
    end)
  end)

  it("an int32 tensor with an integer outside int32's range raises, never wraps", function()
    each_device(function(dev)
      local a = qlua.tensor({ 1, -2, 3 }, { dtype = "int32", device = dev })
      local big = 1 << 40
      for _, case in ipairs({
        { "add", function() return a + big end }, { "add", function() return big + a end },
        { "sub", function() return a - big end }, { "mul", function() return a * 3000000000 end },
        { "maximum", function() return a:maximum(big) end },
        { "minimum", function() return a:minimum(-big) end },
        { "pow", function() return a ^ big end },
        { "add_", function() return a:add_(big) end },
        { "mul_", function() return a:mul_(-3000000000) end },
      }) do
        T.assert_error(case[2], case[1] .. ": ", "out of range for an int32 tensor")
      end
      T.assert_equal(a:totable(), { 1, -2, 3 }, "the failed in-place ops left a as it was")
      -- comparisons are exact, as NumPy 2 compares with out-of-bounds integers
      T.assert_equal(a:lt(big):totable(), { true, true, true })
      T.assert_equal(a:gt(-big):totable(), { true, true, true })
      T.assert_equal(a:eq(big + 1):totable(), { false, false, false })
      -- in range: as before; division is float64
      T.assert_equal((a + 2147483646):totable(), { 2147483647, 2147483644, -2147483647 })
      T.assert_close((a / big):totable(), { 1 / big, -2 / big, 3 / big }, 1e-15)
    end)
  end)

  it("max/min/argmax/argmin over a size-0 dim raise every time", function()
    each_device(function(dev)
      for _, shape in ipairs({ { 0, 0 }, { 0, 3 }, { 0 } }) do
        local t = qlua.zeros(shape, { device = dev })
        for _, op in ipairs({ "max", "min", "argmax", "argmin" }) do
          T.assert_error(function() return t[op](t, 1) end, op .. ": empty tensor")
          T.assert_error(function() return t[op](t) end, op .. ": empty tensor")
        end
      end
      -- reducing another dim of an empty tensor is fine: the result is empty
      assert.equal(0, qlua.zeros({ 0, 3 }, { device = dev }):max(2):numel())
      T.assert_equal(qlua.zeros({ 0, 3 }, { device = dev }):sum(1):totable(), { 0, 0, 0 })
    end)
  end)

  it("index_add_ and scatter_ into an empty dim raise at the call, on every device", function()
    each_device(function(dev)
      local dst = qlua.zeros({ 0 }, { device = dev })
      local one = qlua.ones({ 1 }, { device = dev })
      T.assert_error(function() return dst:index_add_(1, { 1 }, one) end,
                     "index_add_: index 1 out of range (1..0) at position 1")
      T.assert_error(function() return dst:scatter_(1, { 1 }, one) end,
                     "scatter_: index 1 out of range (1..0) at position 1")
      T.assert_error(function() return dst:scatter_(1, { 1 }, 5) end,
                     "scatter_: index 1 out of range (1..0)")
      -- nothing is left behind to fail a later, unrelated op
      local x = qlua.rand(4, { device = dev })
      assert.equal(4, #x:totable())
      qlua.sync()
      -- empty on another dim: no index at all, nothing to check
      local d2 = qlua.zeros({ 3, 0 }, { device = dev })
      d2:index_add_(2, qlua.tensor({}, { dtype = "int64", device = dev }), qlua.zeros({ 3, 0 }, { device = dev }))
    end)
  end)
end)

------------------------------------------------------------------------ arguments

describe("arguments an op does not take", function()
  it("are errors naming the op and the argument", function()
    local t = qlua.rand(4, 4)
    T.assert_error(function() return t:add(1, 2, 3) end, "add: unexpected argument #2 (number 2)")
    T.assert_error(function() return t:sub(1, 3) end, "sub: unexpected argument #2 (number 3)",
                   "at most 1 argument")
    T.assert_error(function() return t:sum(1, true, 3) end, "sum: unexpected argument #3")
    T.assert_error(function() return t:shape("x") end, "shape: unexpected argument #1 (string 'x')")
    T.assert_error(function() return t:narrow(1, 1, 2, 9) end, "narrow: unexpected argument #4")
    T.assert_error(function() return t:view(2, 8, {}) end, "view: unexpected argument #3 (table)")
    T.assert_error(function() return t:permute(2, 1, "x") end, "permute: unexpected argument #3")
    T.assert_error(function() return qlua.zeros(2, 3, nil, 5) end, "zeros: unexpected argument #4")
    T.assert_error(function() return qlua.rand(2, {}, 1) end, "rand: unexpected argument #3")
    T.assert_error(function() return qlua.full(2, 1, nil, 3) end, "full: unexpected argument #4")
    T.assert_error(function() return qlua.matmul(t, t, t) end, "matmul: unexpected argument #3")
    T.assert_error(function() return qlua.gpu_count(1) end, "gpu_count: unexpected argument #1")
  end)

  it("trailing nils are absent arguments", function()
    local t = qlua.rand(4, 4)
    assert.equal(4, t:sum(1, nil):numel())
    assert.equal(16, t:add(1, nil, nil):numel())
    assert.equal(6, qlua.zeros(2, 3, nil):numel())
  end)
end)

describe("running out of Lua memory", function()
  it("in totable names totable", function()
    if not CAN_LIMIT then pending("ulimit -v is not possible under ASan or CUDA") return end
    child([[
-- 36M numbers: 576 MB of Lua table past the 500 MB limit (OpenBLAS, loaded on the first
-- product only, no longer takes its share of the address space at start-up)
local t = qlua.rand(6000, 6000)
local ok, err = pcall(t.totable, t)
assert(not ok, "totable did not fail")
assert(tostring(err):find("^totable: not enough memory"), err)
assert(#qlua.rand(3, 4):totable() == 3)
]], { mem_kb = 500000 })
  end)
end)
