-- GPU against CPU at the edges parity_spec.lua leaves out: NaN and infinities through
-- maximum/minimum/clamp and the reductions, float -> int conversions out of range, integer
-- pow/div/overflow, transposes off the copy tile, reductions of shapes that reach every
-- kernel of kernels/reduce.cu, every path of kernels/gather.cu, matmul at the 128/129
-- small-kernel/cuBLAS boundary and with empty dims, and transfers (views, empty, 0-d,
-- > 64 MiB pinned, and the staged pageable path, reached through a table upload and save).
-- Integers, copies and indexing compare exactly; floats NaN for NaN (same positions), inf
-- for inf, and ‖gpu − cpu‖/‖cpu‖ <= 1e-5 (float32) / 1e-12 (float64) over the rest. Where
-- docs/API.md or runtime/cpu.c state the result, the CPU's is checked against it too.
--
-- Without a GPU every test is pending. QLUA_EDGES_SELFTEST=1 runs them with "cpu" in place
-- of the GPU (CPU against CPU), to check the tests themselves:
--   QLUA_EDGES_SELFTEST=1 build/qlua spec/run.lua spec/gpu/parity_edges_spec.lua
local T, qlua = require("qlua.testing").spec(_ENV)

local SELFTEST = os.getenv("QLUA_EDGES_SELFTEST") == "1"
local HAS_GPU, NO_GPU_REASON = T.gpu_status()
local DEV = SELFTEST and "cpu" or "gpu"         -- the device under test
local DEV_NAME = SELFTEST and "cpu" or "gpu:0"  -- what t:device() says for it
local MiB = 1024 * 1024
local nan, inf = 0 / 0, math.huge
local I32MAX, I32MIN = (1 << 31) - 1, -(1 << 31)
local I64MAX, I64MIN = math.maxinteger, math.mininteger
local TOL = { float32 = 1e-5, float64 = 1e-12 }
local isnan = T.isnan

-- A test that needs the device under test; pending without one.
local function gtest(name, fn)
  if SELFTEST or HAS_GPU then
    it(name, function() qlua.seed(T.reseed(name)); fn() end)
  else
    it(name, function() pending("no GPU: " .. tostring(NO_GPU_REASON)) end)
  end
end

-- t moved to the device under test with :gpu() (in the self-test: t itself).
local function up(t) return SELFTEST and t:to("cpu") or t:gpu() end

-- a against e (flat lists): NaN exactly where e has NaN, equal infinities, then exact
-- equality (tol nil) or the relative norm of the difference over the finite rest.
local function check_values(a, e, what, tol)
  if #a ~= #e then error(string.format("%s: %d elements, expected %d", what, #a, #e), 0) end
  for i = 1, #e do
    local x, y = a[i], e[i]
    if isnan(x) ~= isnan(y) then
      error(string.format("%s: NaN positions differ at element %d: %s, expected %s", what, i, x, y), 0)
    end
    local special = y == inf or y == -inf or x == inf or x == -inf
    if not isnan(y) and x ~= y and (not tol or special) then
      error(string.format("%s: element %d (row-major) is %s, expected %s", what, i, x, y), 0)
    end
  end
  if tol then
    local err = T.rel_error(a, e)
    if err > tol then error(string.format("%s: relative error %.3g > %.3g", what, err, tol), 0) end
  end
end

-- g (the device's result) against c (the CPU's): numbers of the same kind, or tensors on
-- the device with the CPU result's dtype, shape and values.
local function compare(g, c, what, tol)
  if type(c) == "number" then
    assert.is_number(g, what)
    assert.equal(math.type(c), math.type(g), what .. ": number type")
    check_values({ g }, { c }, what, math.type(c) == "float" and tol or nil)
    return
  end
  assert.is_true(qlua.is_tensor(g), what .. ": not a tensor")
  assert.equal(DEV_NAME, g:device(), what .. ": device")
  assert.equal(c:dtype(), g:dtype(), what .. ": dtype")
  T.assert_shape(g, c:shape(), what)
  check_values(T.flatten(g:cpu():totable()), T.flatten(c:totable()), what, T.is_float_dtype(c:dtype()) and tol or nil)
end

-- build("cpu") and build(DEV) with the same data; every result compared. The device's
-- memory pool is poisoned (NaN bytes) first, so outputs an op leaves unwritten show up.
local function parity(what, build, tol)
  local cres, bytes = table.pack(build("cpu")), 64
  for i = 1, cres.n do bytes = qlua.is_tensor(cres[i]) and math.max(bytes, cres[i]:numel() * 8) or bytes end
  T.poison_pool(DEV, bytes)
  local gres = table.pack(build(DEV))
  assert.equal(cres.n, gres.n, what .. ": number of results")
  for i = 1, cres.n do compare(gres[i], cres[i], what .. (cres.n > 1 and " result " .. i or ""), tol) end
end

-- build must raise on both devices, with one message that contains `want`.
local function same_error(what, build, want)
  local cmsg = T.assert_error(function() return build("cpu") end, want)
  local gmsg = T.assert_error(function() return build(DEV) end, want)
  assert.equal(cmsg, gmsg, what .. ": error message")
end

-- A contiguous CPU tensor from a flat list.
local function tensor_of(list, dtype, shape)
  local t = qlua.tensor(list, { dtype = dtype })
  return shape and t:view(shape) or t
end

-- Random data: "ties" small integers (ties everywhere, exact sums), else wide values.
local function data(shape, dtype, kind)
  if kind == "ties" then return qlua.randint(-3, 3, shape):to(dtype) end
  if T.is_float_dtype(dtype) then return qlua.randn(shape, { dtype = dtype }) end
  if dtype == "int32" then return qlua.randint(I32MIN, I32MAX, shape, { dtype = "int32" }) end
  return qlua.randint(-(1 << 40), 1 << 40, shape)
end

-- values (a contiguous CPU tensor) on dev in a layout, built from views only on dev: the
-- base (junk around the values) is made on the CPU and moved whole.
--   transposed  dims 1 and N swapped in memory (1-D: a column of a 3-wide matrix)
--   narrowed    the interior of a base 2 larger in every dim (rows longer than the view)
--   misaligned  contiguous, starting one element into its storage (no 16-byte alignment)
--   stepped     every other element in every dim
local function lay(values, layout, dev)
  local shape, dtype, nd = values:shape(), values:dtype(), values:dim()
  local junk, opts = T.junk(dtype), { dtype = dtype }
  if layout == "contiguous" or nd == 0 then return values:to(dev) end
  if layout == "transposed" then
    if nd == 1 then
      local base = qlua.full({ shape[1], 3 }, junk, opts)
      base:select(2, 1):copy_(values)
      return base:to(dev):select(2, 1)
    end
    return values:transpose(1, nd):contiguous():to(dev):transpose(1, nd)
  elseif layout == "misaligned" then
    local n = values:numel()
    local base = qlua.full({ n + 1 }, junk, opts)
    base:narrow(1, 2, n):copy_(values:reshape(n))
    return base:to(dev):narrow(1, 2, n):view(shape)
  end
  local bs, vs = {}, {}
  for i = 1, nd do bs[i], vs[2 * i - 1], vs[2 * i] = layout == "narrowed" and shape[i] + 2 or 2 * shape[i], shape[i], 2 end
  local function pick(t)
    if layout == "narrowed" then for i = 1, nd do t = t:narrow(i, 2, shape[i]) end; return t end
    t = t:view(vs)
    for i = nd, 1, -1 do t = t:select(2 * i, 1) end
    return t
  end
  local base = qlua.full(bs, junk, opts)
  pick(base):copy_(values)
  return pick(base:to(dev))
end

-- op of laid[dev] over everything and along each dim, compared. A dim whose result has
-- more than 10k elements only when `wide` (comparing long results on the host is slow).
local function reduce_parity(what, laid, op, tol, wide)
  parity(what, function(dev) return laid[dev][op](laid[dev]) end, tol)
  local shape = laid.cpu:shape()
  for dim = 1, #shape do
    if wide or T.numel(shape) // math.max(1, shape[dim]) <= 10000 then
      parity(what .. " dim " .. dim, function(dev) return laid[dev][op](laid[dev], dim) end, tol)
    end
  end
end

-- Lua's own integer arithmetic wraps modulo 2^64: the int64 reference. int32: low 32 bits.
local function wrap32(x) x = x & 0xffffffff; return x >= 0x80000000 and x - 0x100000000 or x end
local function ipow(b, e)  -- e >= 0: a negative exponent is an error (docs/API.md)
  local r = 1
  for _ = 1, e do r = r * b end
  return r
end

describe("gpu edges", function()
  gtest("the comparison helpers catch differences", function()
    local a = qlua.tensor({ 1, nan, 3 })
    assert.has_no.errors(function() compare(up(a), a, "same", 1e-5) end)
    T.assert_error(function() compare(up(qlua.tensor({ 1, 2, nan })), a, "nan moved", 1e-5) end, "NaN positions")
    T.assert_error(function() compare(up(qlua.tensor({ 1, nan, inf })), a, "inf", 1e-5) end, "element 3")
    T.assert_error(function() compare(up(qlua.tensor({ 1, nan, 3.1 })), a, "value", 1e-5) end, "relative error")
    T.assert_error(function() compare(up(qlua.tensor({ 1, 2 }, { dtype = "int32" })), qlua.tensor({ 1, 3 }, { dtype = "int32" }), "int") end, "element 2")
    T.assert_error(function() compare(up(a:to("float64")), a, "dtype") end, "dtype")
    T.assert_error(function() compare(1, 1.0, "kind") end, "number type")
    T.assert_error(function() compare(-inf, inf, "inf sign", 1e-5) end, "element 1")
    local calls = 0   -- the two runs of a build give different values: parity must fail
    T.assert_error(function() parity("differ", function(dev) calls = calls + 1; return qlua.full({ 2 }, calls, { device = dev }) end) end, "element 1")
  end)

  --------------------------------------------------------------------- NaN and infinities

  describe("NaN and infinities", function()
    local A = { 1, nan, nan, -inf, inf, 0, 2.5, nan, inf, -inf, -3 }
    local B = { nan, 1, nan, inf, -inf, -0.5, nan, -inf, inf, -inf, 7 }

    gtest("maximum and minimum, tensor-tensor and tensor-scalar, NaN on either side", function()
      for _, dtype in ipairs(T.float_dtypes) do
        local a, b = tensor_of(A, dtype), tensor_of(B, dtype)
        for _, op in ipairs({ "maximum", "minimum" }) do
          for _, layout in ipairs({ "contiguous", "misaligned", "stepped" }) do
            parity(op .. " " .. dtype .. " " .. layout, function(dev)
              local x, y = lay(a, layout, dev), lay(b, "transposed", dev); return x[op](x, y), y[op](y, x) end)
          end
          parity(op .. " " .. dtype .. " every pair (broadcast)", function(dev)
            local x = a:view(11, 1):to(dev); return x[op](x, b:view(1, 11):to(dev)) end)
          for _, s in ipairs({ nan, inf, -inf, 0.0, 1.5 }) do
            parity(op .. " scalar " .. s .. " " .. dtype, function(dev) local x = lay(a, "misaligned", dev); return x[op](x, s) end)
          end
          local c = a[op](a, b):totable()
          for i = 1, #A do assert.equal(isnan(A[i]) or isnan(B[i]), isnan(c[i]), op .. ": NaN propagates at " .. i) end
        end
      end
      for _, dtype in ipairs(T.int_dtypes) do   -- a float number with ints: float64
        parity("maximum " .. dtype .. " with NaN", function(dev) return qlua.tensor({ 1, -2, 3 }, { dtype = dtype, device = dev }):maximum(nan) end)
        parity("minimum " .. dtype .. " with -inf", function(dev) return qlua.tensor({ 1, -2, 3 }, { dtype = dtype, device = dev }):minimum(-inf) end)
      end
    end)

    gtest("clamp with NaN and infinite inputs and bounds", function()
      local bounds = { { -1, 1 }, { nil, 0 }, { 0, nil }, { -inf, inf }, { 2, 1 }, { -1.5, 2.5 } }
      for _, dtype in ipairs(T.dtypes) do
        local a = T.is_float_dtype(dtype) and tensor_of(A, dtype) or tensor_of({ I32MIN, -3, -1, 0, 1, 2, 3, I32MAX }, dtype)
        for k, bd in ipairs(bounds) do
          for _, layout in ipairs({ "contiguous", "misaligned", "stepped" }) do
            parity(string.format("clamp %d %s %s", k, dtype, layout), function(dev) return lay(a, layout, dev):clamp(bd[1], bd[2]) end)
          end
        end
        if T.is_float_dtype(dtype) then
          local c = a:clamp(-1, 1):totable()
          for i = 1, #A do assert.equal(isnan(A[i]), isnan(c[i]), "clamp keeps NaN at " .. i) end
        end
      end
    end)

    gtest("reductions with NaN (all, along each dim, every kernel path)", function()
      -- {shape, NaN positions (row-major, 1-based)}: rows/cols/split/generic paths
      local cases = {
        { { 37 }, { 1 } }, { { 8, 33 }, { 67, 68, 99 } }, { { 3, 5000 }, { 9000 } },
        { { 5000, 3 }, { 30, 12002 } }, { { 1, 1000000 }, { 700000, 900000 } },
        { { 4, 4096 }, { 4096 * 3 + 1, 4096 * 3 + 2 } },
      }
      for _, dtype in ipairs(T.float_dtypes) do
        for _, case in ipairs(cases) do
          local shape = case[1]
          local flat = data({ T.numel(shape) }, dtype)
          for _, p in ipairs(case[2]) do flat[p] = nan end
          local vn = flat:clone():view(shape)   -- NaN only: sums with inf have a test of their own
          flat[3], flat[T.numel(shape) - 1] = inf, -inf
          local v = flat:view(shape)
          for _, layout in ipairs({ "contiguous", "misaligned", "transposed" }) do
            local laid = { cpu = lay(v, layout, "cpu"), [DEV] = lay(v, layout, DEV) }
            local laid_nan = { cpu = lay(vn, layout, "cpu"), [DEV] = lay(vn, layout, DEV) }
            for _, op in ipairs({ "max", "min", "argmax", "argmin", "sum", "mean" }) do
              local what = string.format("%s %s %s %s", op, dtype, T.shape_str(shape), layout)
              reduce_parity(what, (op == "sum" or op == "mean") and laid_nan or laid, op, TOL[dtype],
                layout == "contiguous" and (op == "max" or op == "argmin"))
            end
          end
          assert.is_true(isnan(v:max()) and isnan(v:min()) and isnan(v:sum()), "NaN propagates")
          assert.equal(case[2][1], v:argmax(), "argmax: the first NaN")
          assert.equal(case[2][1], v:argmin(), "argmin: the first NaN")
        end
      end
    end)

    -- (runtime/cpu.c's compensated sums give NaN for {1, inf}, where the GPU's give inf.)
    gtest("sum and mean with infinities, and float32 sums that overflow", function()
      for _, dtype in ipairs(T.float_dtypes) do
        local rows = { { 1, inf, 2, 3 }, { -inf, 1, 2, 3 }, { inf, -inf, 1, 1 }, { 1, 2, 3, 4 }, { inf, inf, 1, 1 } }
        local m = qlua.tensor(rows, { dtype = dtype })
        local long = data({ 3, 5000 }, dtype)
        long[2][4321] = inf
        local huge_f32 = qlua.tensor({ 3e38, 3e38, -1e38 }, { dtype = dtype })
        for _, t in ipairs({ m, long, huge_f32 }) do
          for _, layout in ipairs({ "contiguous", "transposed" }) do
            for _, op in ipairs({ "sum", "mean" }) do
              local what = string.format("%s %s %s %s", op, dtype, T.shape_str(t:shape()), layout)
              reduce_parity(what, { cpu = lay(t, layout, "cpu"), [DEV] = lay(t, layout, DEV) }, op, TOL[dtype], true)
            end
          end
        end
      end
    end)
  end)

  --------------------------------------------------------------------- conversions and integers

  describe("conversions and integer arithmetic", function()
    gtest("float -> int32/int64 of out-of-range values, NaN and infinities", function()
      local SPECIAL = { 1e30, -1e30, nan, inf, -inf, 2 ^ 31, -2 ^ 31 - 1, 2 ^ 63, -2 ^ 63, 2 ^ 31 - 1,
        -2 ^ 31, 2147483647.5, -2147483648.5, 1.5, -1.5, -0.5, 9.2233720368547748e18, 16777217, 0.0, 2 ^ 62 }
      for _, from in ipairs(T.float_dtypes) do
        local v = tensor_of(SPECIAL, from)
        local grid = {}   -- 20x20: the transposing copy's tiled path
        for i = 1, 400 do grid[i] = SPECIAL[(i * 7) % #SPECIAL + 1] end
        local m = tensor_of(grid, from, { 20, 20 })
        for _, to in ipairs(T.int_dtypes) do
          for _, layout in ipairs({ "contiguous", "misaligned", "stepped" }) do
            parity(from .. " -> " .. to .. " " .. layout, function(dev) return lay(v, layout, dev):to(to) end)
          end
          parity(from .. " -> " .. to .. " transposed 20x20", function(dev) return m:to(dev):t():to(to) end)
          parity(from .. " -> " .. to .. " copy_", function(dev) return qlua.zeros({ 20, 20 }, { dtype = to, device = dev }):t():copy_(m:to(dev)):t() end)
        end
      end
      local c = tensor_of({ 1e30, -1e30, nan, inf, -inf, 2 ^ 31, -2 ^ 31 - 1, -1.5 }, "float64")
      T.assert_equal(c:to("int32"), { I32MAX, I32MIN, 0, I32MAX, I32MIN, I32MAX, I32MIN, -1 })
      T.assert_equal(tensor_of({ 2 ^ 63, -2 ^ 63, nan, 1e30 }, "float32"):to("int64"), { I64MAX, I64MIN, 0, I64MAX })
    end)

    gtest("integer pow with large exponents; negative ones raise on both devices", function()
      local bases, exps = { -2, -1, 0, 1, 2, 7 }, { 0, 1, 2, 31, 32, 63, 64 }
      local bl, el, want = {}, {}, {}
      for _, b in ipairs(bases) do
        for _, e in ipairs(exps) do bl[#bl + 1], el[#el + 1], want[#want + 1] = b, e, ipow(b, e) end
      end
      for _, dtype in ipairs(T.int_dtypes) do
        local b, e = tensor_of(bl, dtype), tensor_of(el, dtype)
        for _, layout in ipairs({ "contiguous", "misaligned", "stepped" }) do
          parity("pow " .. dtype .. " " .. layout, function(dev) return lay(b, layout, dev):pow(lay(e, "transposed", dev)) end)
        end
        for _, s in ipairs({ 0, 3, 62 }) do
          parity("t ^ " .. s .. " " .. dtype, function(dev) return b:to(dev) ^ s end)
        end
        for _, s in ipairs({ -2, 0, 1, 2 }) do
          parity(s .. " ^ t " .. dtype, function(dev) return s ^ e:to(dev) end)
        end
        local negative = "integers to negative integer powers are not allowed"
        local en = tensor_of({ 1, -3, 2 }, dtype)
        same_error("t ^ -1 " .. dtype, function(dev) return b:to(dev) ^ -1 end, negative)
        same_error("t ^ tensor " .. dtype, function(dev) return b:narrow(1, 1, 3):to(dev):pow(en:to(dev)) end, negative)
        same_error("2 ^ tensor " .. dtype, function(dev) return 2 ^ lay(en, "stepped", dev) end, negative)
        local ref = {}
        for i = 1, #want do ref[i] = dtype == "int32" and wrap32(want[i]) or want[i] end
        T.assert_equal(b:pow(e), ref, "pow " .. dtype .. " against the documented rule")
      end
    end)

    gtest("integer division by zero and INT_MIN / -1 (float64, as `/` of ints is)", function()
      for _, dtype in ipairs(T.int_dtypes) do
        local min, max = dtype == "int32" and I32MIN or I64MIN, dtype == "int32" and I32MAX or I64MAX
        local a, b = tensor_of({ min, 7, 0, -7, 5, max }, dtype), tensor_of({ -1, 0, 0, 2, -1, -1 }, dtype)
        parity("div " .. dtype, function(dev) return a:to(dev) / b:to(dev), a:to(dev):div(lay(b, "stepped", dev)) end, TOL.float64)
        for _, s in ipairs({ 0, -1, 3 }) do
          parity("div " .. dtype .. " by " .. s, function(dev) return a:to(dev) / s, s / a:to(dev) end, TOL.float64)
        end
        assert.equal("float64", (a / b):dtype())
        local q = (a / b):totable()
        assert.is_true(q[1] == -(min + 0.0) and q[2] == inf and isnan(q[3]), "x/-1, x/0, 0/0")
      end
    end)

    gtest("wrapping add, sub, mul, neg, abs and sums of integers", function()
      local lists = {
        { "int32", { I32MAX, I32MIN, 65536, 46341, -1, I32MIN }, { 1, -1, 65536, 46341, I32MIN, I32MIN } },
        { "int64", { I64MAX, I64MIN, 1 << 32, 3037000500, -1, I64MIN }, { 1, -1, 1 << 32, 3037000500, I64MIN, I64MIN } },
      }
      for _, l in ipairs(lists) do
        local dtype, ab = l[1], { l[2], l[3] }
        local a, b = tensor_of(ab[1], dtype), tensor_of(ab[2], dtype)
        local wrap = dtype == "int32" and wrap32 or function(x) return x end
        for _, op in ipairs({ "add", "sub", "mul" }) do
          for _, layout in ipairs({ "contiguous", "misaligned", "transposed" }) do
            parity(op .. " " .. dtype .. " " .. layout, function(dev) local x = lay(a, layout, dev); return x[op](x, lay(b, "stepped", dev)) end)
          end
          for _, s in ipairs({ 1, -1, 65536, 1 << 40, I64MIN }) do
            if dtype == "int32" and (s > I32MAX or s < I32MIN) then  -- cannot be held: raises
              same_error(op .. " int32 scalar " .. s, function(dev) return a:to(dev)[op](a:to(dev), s) end,
                         "out of range for an int32 tensor")
            else
              parity(op .. " " .. dtype .. " scalar " .. s, function(dev) return a:to(dev)[op](a:to(dev), s) end)
            end
          end
        end
        for _, op in ipairs({ "neg", "abs", "sum" }) do
          parity(op .. " " .. dtype, function(dev) local x = lay(a, "stepped", dev); return x[op](x) end)
        end
        for _, s in ipairs({ 1 << 40, -(1 << 33) }) do   -- int32: outside int32's range
          parity("lt/ge " .. dtype .. " " .. s, function(dev) return a:to(dev):lt(s), a:to(dev):ge(s) end)
          if dtype == "int32" then
            same_error("maximum int32 " .. s, function(dev) return a:to(dev):maximum(s) end,
                       "out of range for an int32 tensor")
          else
            parity("maximum " .. dtype .. " " .. s, function(dev) return a:to(dev):maximum(s) end)
          end
        end
        local ref_add, ref_mul = {}, {}
        for i = 1, #ab[1] do ref_add[i], ref_mul[i] = wrap(ab[1][i] + ab[2][i]), wrap(ab[1][i] * ab[2][i]) end
        T.assert_equal(a + b, ref_add, "add " .. dtype .. " wraps")
        T.assert_equal(a * b, ref_mul, "mul " .. dtype .. " wraps")
      end
      parity("int64 sum wraps", function(dev) return qlua.full({ 5 }, 1 << 62, { dtype = "int64", device = dev }):sum() end)
      assert.equal(1 << 62, qlua.full({ 5 }, 1 << 62, { dtype = "int64" }):sum())
    end)
  end)

  --------------------------------------------------------------------- transposes and copies

  gtest("transposes and contiguous() of sizes off the copy tile, every dtype", function()
    local shapes = { { 1, 1 }, { 31, 33 }, { 33, 31 }, { 65, 1 }, { 1, 65 }, { 257, 129 }, { 15, 17 }, { 16, 16 }, { 32, 32 }, { 1000, 3 } }
    local perms = {
      { { 5, 33, 17 }, { 3, 1, 2 } }, { { 5, 33, 17 }, { 2, 3, 1 } }, { { 2, 31, 65 }, { 1, 3, 2 } },
      { { 17, 3, 40 }, { 3, 2, 1 } }, { { 1, 40, 1 }, { 3, 2, 1 } }, { { 3, 4, 5, 6 }, { 4, 2, 3, 1 } },
    }
    for _, dtype in ipairs(T.dtypes) do
      local other = ({ float32 = "int64", float64 = "float32", int32 = "float64", int64 = "int32" })[dtype]
      for _, s in ipairs(shapes) do
        local v = data(s, dtype)
        local what = dtype .. " " .. T.shape_str(s)
        parity("t():contiguous() " .. what, function(dev) local t = v:to(dev):t(); return t:contiguous(), t:clone() end)
        parity("t():to(" .. other .. ") " .. what, function(dev) return v:to(dev):t():to(other) end, TOL.float32)
        parity("narrowed t():contiguous() " .. what, function(dev) return lay(v, "narrowed", dev):t():contiguous() end)
        parity("copy_ into a transposed view " .. what, function(dev)
          local dst = T.poison(qlua.empty({ s[2], s[1] }, { dtype = dtype, device = dev })); dst:t():copy_(v:to(dev)); return dst end)
      end
      for _, p in ipairs(perms) do
        local v = data(p[1], dtype)
        parity("permute " .. dtype .. " " .. T.shape_str(p[1]) .. " " .. table.concat(p[2], ","), function(dev)
          return v:to(dev):permute(p[2]):contiguous(), lay(v, "stepped", dev):permute(p[2]):contiguous() end)
      end
    end
  end)

  --------------------------------------------------------------------- reductions

  gtest("reductions along each dim of shapes that reach every kernel path", function()
    local shapes = {
      { 1, 1 }, { 6, 1 }, { 1, 7 }, { 9, 31 }, { 9, 32 }, { 7, 33 }, { 5, 256 }, { 3, 1024 }, { 2, 4096 },
      { 3, 2047 }, { 3, 2049 }, { 4, 5000 }, { 5000, 3 }, { 3000, 40 }, { 50000, 2 }, { 2, 50000 },
      { 3, 4, 300 }, { 300, 1, 7 }, { 1, 1000000 }, { 1000000 },
    }
    for _, s in ipairs(shapes) do
      local big = T.numel(s) >= 100000
      local layouts = big and { "contiguous", "misaligned", "stepped" } or { "contiguous", "misaligned", "transposed", "narrowed", "stepped" }
      for _, dtype in ipairs(T.dtypes) do
        for _, kind in ipairs({ "ties", "wide" }) do
          local v = data(s, dtype, kind)
          local tol = TOL[T.is_float_dtype(dtype) and dtype or "float64"]
          for _, layout in ipairs(layouts) do
            local laid = { cpu = lay(v, layout, "cpu"), [DEV] = lay(v, layout, DEV) }
            for _, op in ipairs({ "sum", "mean", "max", "min", "argmax", "argmin" }) do
              local what = string.format("%s %s %s %s %s", op, dtype, kind, T.shape_str(s), layout)
              reduce_parity(what, laid, op, (op == "sum" or op == "mean") and tol or nil,
                layout == "contiguous" and kind == "ties" and (op == "sum" or op == "argmax"))
            end
          end
        end
      end
    end
    -- ties in different splits of one long row: the first position wins
    local row = qlua.zeros(1000000)
    row[700000], row[300001], row[999999] = 5, 5, -5
    for _, layout in ipairs({ "contiguous", "misaligned" }) do
      parity("argmax ties far apart " .. layout, function(dev)
        local x = lay(row, layout, dev); return x:argmax(), x:argmin(), x:view(1, 1000000):max(2) end)
    end
    assert.equal(300001, row:argmax())
    -- empty dims: sum 0, mean NaN, the others an error with the CPU's message
    for _, s in ipairs({ { 6, 0 }, { 0, 6 } }) do
      for _, dtype in ipairs(T.dtypes) do
        local function empty(dev) return qlua.zeros(s, { dtype = dtype, device = dev }) end
        for dim = 1, 2 do
          parity("sum/mean empty " .. dtype .. " " .. T.shape_str(s) .. " dim " .. dim, function(dev)
            local e = empty(dev); return e:sum(dim), e:mean(dim), e:sum(), e:t():sum(3 - dim) end, TOL.float64)
          for _, op in ipairs(s[dim] == 0 and { "max", "min", "argmax", "argmin" } or {}) do
            same_error(op .. " empty", function(dev) return empty(dev)[op](empty(dev), dim) end, op)
          end
        end
      end
    end
  end)

  --------------------------------------------------------------------- indexing

  describe("indexing", function()
    -- Index values in 1..bound with both ends present.
    local function index_values(shape, bound)
      local n, list = T.numel(shape), {}
      for i = 1, n do list[i] = math.random(1, bound) end
      if n >= 2 then list[1], list[n] = bound, 1 end
      return list
    end
    local function index_on(list, shape, idtype, layout, dev)
      if T.numel(shape) == 0 then return qlua.empty(shape, { dtype = idtype, device = dev }) end
      return lay(tensor_of(list, idtype, #shape > 1 and shape or nil), layout, dev)
    end
    local SRC_LAYOUTS = { "contiguous", "misaligned", "transposed", "stepped" }
    local IDX_LAYOUTS = { "contiguous", "misaligned", "stepped", "transposed" }

    -- fn(dtype, src values, src layout, index dtype, index layout) for every combination
    -- (contiguous only for empty shapes).
    local function each_combo(src_shape, idx_shape, fn)
      local empty = T.numel(src_shape) == 0 or T.numel(idx_shape) == 0
      for _, dtype in ipairs(T.dtypes) do
        local v = data(src_shape, dtype)
        for _, sl in ipairs(empty and { "contiguous" } or SRC_LAYOUTS) do
          for _, idtype in ipairs(T.int_dtypes) do
            for _, il in ipairs(empty and { "contiguous" } or IDX_LAYOUTS) do fn(dtype, v, sl, idtype, il) end
          end
        end
      end
    end

    gtest("gather: rows path (vector and scalar), general path, empty indices", function()
      local cases = {
        { {1000}, 1, {64} }, { {1000}, 1, {67} }, { {6, 50}, 2, {6, 8} }, { {6, 50}, 2, {6, 7} },
        { {3, 4, 50}, 3, {3, 4, 9} }, { {3, 4, 50}, 3, {3, 2, 9} }, { {50, 6}, 1, {9, 6} },
        { {4, 30, 5}, 2, {4, 11, 3} }, { {40, 1}, 1, {70, 1} }, { {2, 5000}, 2, {2, 4099} },
        { {10}, 1, {0} }, { {3, 5}, 2, {3, 0} }, { {3, 5}, 1, {0, 5} },
      }
      for _, c in ipairs(cases) do
        local src_shape, dim, ishape = c[1], c[2], c[3]
        local list = index_values(ishape, src_shape[dim])
        each_combo(src_shape, ishape, function(dtype, v, sl, idtype, il)
          parity(string.format("gather(%d) %s %s[%s] by %s %s[%s]", dim, dtype, T.shape_str(src_shape), sl, idtype, T.shape_str(ishape), il),
            function(dev) return lay(v, sl, dev):gather(dim, index_on(list, ishape, idtype, il, dev)) end)
        end)
      end
    end)

    gtest("take: contiguous source (rows path), strided source, empty indices", function()
      local srcs = { {1000}, {6, 50}, {3, 4, 50}, {40, 1} }
      local ishapes = { {64}, {67}, {3, 7}, {0}, {2, 0} }
      for _, src_shape in ipairs(srcs) do
        for _, ishape in ipairs(ishapes) do
          local list = index_values(ishape, T.numel(src_shape))
          each_combo(src_shape, ishape, function(dtype, v, sl, idtype, il)
            parity(string.format("take %s %s[%s] by %s %s[%s]", dtype, T.shape_str(src_shape), sl, idtype, T.shape_str(ishape), il),
              function(dev) return lay(v, sl, dev):take(index_on(list, ishape, idtype, il, dev)) end)
          end)
        end
      end
    end)

    gtest("index_select: 16-byte and element slices, general path, empty index and source", function()
      local cases = {
        { {40, 64}, 1, 9 }, { {40, 33}, 1, 9 }, { {40, 5}, 1, 9 }, { {40, 64}, 2, 9 }, { {3, 10, 40}, 2, 12 },
        { {2, 7, 1000}, 2, 3 }, { {1, 32}, 1, 5 }, { {5, 31}, 1, 5 }, { {40, 64}, 1, 0 }, { {0, 64}, 2, 3 },
      }
      for _, c in ipairs(cases) do
        local src_shape, dim, n = c[1], c[2], c[3]
        local list = index_values({ n }, src_shape[dim])
        each_combo(src_shape, { n }, function(dtype, v, sl, idtype, il)
          parity(string.format("index_select(%d) %s %s[%s] by %s %d[%s]", dim, dtype, T.shape_str(src_shape), sl, idtype, n, il),
            function(dev) return lay(v, sl, dev):index_select(dim, index_on(list, { n }, idtype, il, dev)) end)
        end)
      end
    end)
  end)

  --------------------------------------------------------------------- matmul

  gtest("matmul: empty dims, vectors, the 128/129 boundary, strided and broadcast operands", function()
    local cases = {
      { {3, 0}, {0, 4} }, { {0}, {0} }, { {2, 3, 0}, {2, 0, 5} }, { {5, 0}, {0} },           -- K == 0
      { {0, 5}, {5, 4} }, { {3, 5}, {5, 0} }, { {0, 3, 4}, {4, 2} }, { {2, 0, 4}, {4, 3} },   -- M, N, B == 0
      { {1, 100}, {100, 1} }, { {1, 300}, {300, 1} }, { {1000}, {1000} }, { {1, 1}, {1, 1} },
      { {128, 128}, {128, 128} }, { {129, 128}, {128, 128} }, { {128, 129}, {129, 128} },
      { {128, 128}, {128, 129} }, { {2, 128, 128}, {128, 128} }, { {2, 64, 128}, {2, 128, 64} },
      { {2, 1, 5, 7}, {3, 7, 4} }, { {5, 7}, {3, 7, 4} }, { {4, 1, 6, 9}, {1, 3, 9, 2} }, { {130, 3}, {3, 140} },
    }
    local LAYOUTS = { "contiguous", "transposed", "narrowed", "stepped" }
    for _, dtype in ipairs(T.float_dtypes) do
      for _, c in ipairs(cases) do
        local empty = T.numel(c[1]) == 0 or T.numel(c[2]) == 0
        -- positive values: single-element products must not cancel
        local a, b = qlua.rand(c[1], { dtype = dtype }), qlua.rand(c[2], { dtype = dtype })
        for _, la in ipairs(empty and { "contiguous", "transposed" } or LAYOUTS) do
          for _, lb in ipairs(empty and { "contiguous", "transposed" } or LAYOUTS) do
            parity(string.format("matmul %s %s[%s] @ %s[%s]", dtype, T.shape_str(c[1]), la, T.shape_str(c[2]), lb),
              function(dev) return lay(a, la, dev):matmul(lay(b, lb, dev)) end, TOL[dtype])
          end
        end
        if c[1][#c[1]] == 0 then   -- sums of nothing: zeros on both
          local r = up(a):matmul(up(b)):cpu()
          if r:numel() > 0 then assert.equal(0, r:abs():max(), "K == 0 gives zeros") end
        end
      end
      local x, y = qlua.rand({ 1, 5, 7 }, { dtype = dtype }), qlua.rand({ 3, 7, 4 }, { dtype = dtype })
      parity("matmul expanded batch " .. dtype, function(dev)
        return x:to(dev):expand({ 3, 5, 7 }):matmul(y:to(dev)), y:to(dev):transpose(2, 3):matmul(x:to(dev):expand({ 3, 5, 7 }):transpose(2, 3))
      end, TOL[dtype])
    end
    for _, e in ipairs({ { "int32", { 2, 2 }, "int32", { 2, 2 } }, { "int64", { 2, 2 }, "int64", { 2, 2 } },
      { "float32", { 2, 2 }, "float64", { 2, 2 } }, { "float32", { 2, 3 }, "float32", { 4, 5 }, "matmul: shapes 2x3 and 4x5 do not match" },
      { "float32", { 2, 3, 4 }, "float32", { 3, 4, 5 } }, { "float32", {}, "float32", { 3 } } }) do
      same_error("matmul error " .. e[1] .. " " .. e[3], function(dev)
        return qlua.ones(e[2], { dtype = e[1], device = dev }):matmul(qlua.ones(e[4], { dtype = e[3], device = dev })) end, e[5] or "matmul: ")
    end
  end)

  --------------------------------------------------------------------- transfers

  describe("transfers", function()
    gtest("views, empty and 0-d tensors round-trip exactly, every dtype", function()
      for _, dtype in ipairs(T.dtypes) do
        local v = data({ 33, 17 }, dtype)
        local views = {
          t = v:t(), narrowed = v:narrow(1, 3, 29):narrow(2, 2, 13), stepped = lay(v, "stepped", "cpu"),
          column = v:select(2, 5), expanded = v:select(1, 1):view(1, 17):expand(6, 17),
          permuted = data({ 3, 5, 7 }, dtype):permute(3, 1, 2), misaligned = lay(v, "misaligned", "cpu"),
        }
        for name, c in pairs(views) do
          local g = up(c)
          compare(g, c:contiguous(), dtype .. " :gpu() of " .. name)
          compare(lay(c:contiguous(), "transposed", DEV), c:contiguous(), dtype .. " transposed device view of " .. name)
          T.assert_equal(g:cpu(), c, dtype .. " :cpu() of " .. name)
        end
        for _, s in ipairs({ { 0 }, { 3, 0 }, { 0, 4 }, { 2, 0, 5 } }) do
          local e = qlua.empty(s, { dtype = dtype })
          for _, c in ipairs({ e, e:transpose(1, #s) }) do
            local g = up(c)
            compare(g, c, "empty " .. dtype .. " " .. T.shape_str(s))
            T.assert_shape(g:cpu(), c:shape(), "empty back " .. T.shape_str(s))
          end
        end
        local values = { float32 = { 3.5, -0.0, inf, nan }, float64 = { 1 / 3, -inf, nan, 1e300 },
          int32 = { I32MIN, I32MAX, 0, -1 }, int64 = { I64MIN, I64MAX, 1 << 53 | 1, -1 } }
        for _, x in ipairs(values[dtype]) do
          local c, m = qlua.tensor(x, { dtype = dtype }), qlua.zeros({ 2, 3 }, { dtype = dtype })
          m[2][3] = x
          compare(up(c), c, dtype .. " 0-d " .. tostring(x))
          compare(up(c):cpu():item(), c:item(), dtype .. " 0-d item")
          compare(up(m:select(1, 2):select(1, 3)), c, dtype .. " 0-d view at an offset")
        end
      end
    end)

    gtest("> 64 MiB pinned copies, both ways, contiguous and transposed, every dtype", function()
      for _, dtype in ipairs(T.dtypes) do
        local n = (dtype:find("32") and 17 or 9) * MiB   -- 68 or 72 MiB
        local c = data({ n }, dtype)
        local g = up(c)
        assert.equal(0, g:cpu():ne(c):sum(), dtype .. ": round trip")
        assert.equal(0, g:ne(up(c)):sum(), dtype .. ": two uploads agree")
        local m = c:view(n // 4096, 4096)
        local gt = up(m:t())
        assert.equal(0, gt:cpu():ne(m:t()):sum(), dtype .. ": transposed upload")
        assert.equal(0, g:view(n // 4096, 4096):t():cpu():ne(m:t()):sum(), dtype .. ": transposed download")
        g:free(); gt:free(); c:free()
      end
    end)

    gtest("staged (pageable) transfers: a table upload and qlua.save download", function()
      -- 9 MiB (4-byte dtypes) or 18 MiB (8-byte): several 4 MiB staging chunks and a tail.
      -- The table's values go to the device from a Lua-owned (pageable) buffer; qlua.save
      -- of a device tensor downloads into malloc'd (pageable) memory.
      local n = 2 * MiB + MiB // 4 + 3
      assert.equal(0, n % 3)
      local path = os.tmpname()
      for _, dtype in ipairs(T.dtypes) do
        local c = dtype == "int64" and qlua.randint(-(1 << 62), 1 << 62, { n }) or data({ n }, dtype)
        local g = qlua.tensor(c:totable(), { dtype = dtype, device = DEV })
        assert.equal(DEV_NAME, g:device())
        assert.equal(0, g:cpu():ne(c):sum(), dtype .. ": table upload")
        for _, view in ipairs({ g, g:view(n // 3, 3):t() }) do
          qlua.save(path, view)
          local back = qlua.load(path)
          T.assert_shape(back, view:shape(), dtype .. " save")
          assert.equal(0, back:ne(view:cpu()):sum(), dtype .. ": download through save")
        end
        local lg = qlua.load(path, { device = DEV })
        assert.equal(DEV_NAME, lg:device())
        assert.equal(0, lg:ne(g:view(n // 3, 3):t()):sum(), dtype .. ": load onto the device")
        g:free(); c:free(); lg:free()
      end
      os.remove(path)
    end)
  end)
end)
