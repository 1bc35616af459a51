-- Elementwise math of issue 13 (docs/API.md "Arithmetic"): the trigonometric, hyperbolic,
-- rounding, exponential and special functions, isnan/isinf/isfinite, nan_to_num, the
-- binary atan2, hypot, fmod, remainder (Lua's %), floor_divide (Lua's //), lerp and
-- addcmul_/addcdiv_, each against a plain-Lua reference, on every layout, with integer
-- inputs by the existing rules; on the CPU and, as parity cases, on the GPU.
local T, qlua, _, _, both = require("qlua.testing").spec(_ENV)

local NAN, INF = 0 / 0, math.huge
local sqrt = math.sqrt

-- The ops this spec tests: those of T.ref.unary with math_spec's input range (data).
local UNARY = T.ref.unary
local NAMES = {}
for name, u in pairs(UNARY) do if u.data then NAMES[#NAMES + 1] = name end end
table.sort(NAMES)
local erf = T.ref.erf

local TOL = { float32 = 2e-6, float64 = 1e-12 }

local function random_in(lo, hi, shape, dtype)
  local t = T.random_table(shape, "float64", { lo = lo, hi = hi, positive = lo >= 0 })
  return T.ref.map(t, function(x) return T.as_dtype(x, dtype) end)
end

describe("unary math", function()
  both("every function, float dtypes, every layout, against Lua", function(dev)
    for _, name in ipairs(NAMES) do
      local u = UNARY[name]
      for _, dtype in ipairs(T.float_dtypes) do
        for _, layout in ipairs(T.layouts) do
          local a = random_in(u.data[1], u.data[2], { 3, 4 }, dtype)
          local t = T.make(a, dtype, layout, dev)
          local what = name .. " " .. dtype .. " " .. layout
          local r = t[name](t)
          assert.equal(dtype, r:dtype(), what)
          local want = T.ref.map(a, function(x) return T.as_dtype(u.f(x), dtype) end)
          local tol = TOL[dtype] * ((name == "erfc" or name == "lgamma" or name == "tan") and 20 or 1)
          T.assert_close(r, want, tol, what)
          -- in place gives the same values, into a view
          local c = T.make(a, dtype, layout, dev)
          assert.is_true(rawequal(c, c[name .. "_"](c)), what .. " returns self")
          T.assert_close(c, want, tol, what .. " in place")
        end
      end
    end
  end)

  both("integer and bool inputs: exact ops keep the dtype, the others give float64", function(dev)
    for _, name in ipairs(NAMES) do
      local u = UNARY[name]
      for _, dtype in ipairs({ "int32", "int64", "uint8" }) do
        local lo = math.ceil(math.max(u.data[1], dtype == "uint8" and 0 or -1e9))
        local hi = math.floor(u.data[2])
        if lo <= hi then
          local a = {}
          for i = 1, 6 do a[i] = math.random(lo, hi) end
          local t = qlua.tensor(a, { dtype = dtype, device = dev })
          local r = t[name](t)
          local what = name .. " " .. dtype
          if u.ints then
            assert.equal(dtype, r:dtype(), what)
            T.assert_equal(r, T.ref.map(a, function(x) return T.as_dtype(math.tointeger(u.f(x)), dtype) end), what)
          else
            assert.equal("float64", r:dtype(), what)
            T.assert_close(r, T.ref.map(a, u.f), 1e-12 * (name == "lgamma" and 20 or 1), what)
            T.assert_error(function() t[name .. "_"](t) end, name .. "_", "cannot store float64 result")
          end
        end
      end
    end
    local b = qlua.tensor({ true, false }, { device = dev })
    T.assert_equal(b:floor(), { true, false })
    T.assert_equal(b:sign(), { true, false })
    T.assert_equal(b:square(), { true, false })
    assert.equal("float64", b:sin():dtype())
  end)

  both("special values: NaN, infinities and signed zeros", function(dev)
    for _, dtype in ipairs(T.float_dtypes) do
      local t = qlua.tensor({ NAN, INF, -INF, 0.0, -0.0, 2.5, -2.5, 3.5 }, { dtype = dtype, device = dev })
      T.assert_equal(t:floor(), { NAN, INF, -INF, 0, 0, 2, -3, 3 })
      T.assert_equal(t:ceil(), { NAN, INF, -INF, 0, 0, 3, -2, 4 })
      T.assert_equal(t:round(), { NAN, INF, -INF, 0, 0, 2, -2, 4 }, "ties to even")
      T.assert_equal(t:trunc(), { NAN, INF, -INF, 0, 0, 2, -2, 3 })
      T.assert_equal(t:sign(), { NAN, 1, -1, 0, 0, 1, -1, 1 })
      T.assert_equal(t:isnan(), { true, false, false, false, false, false, false, false })
      T.assert_equal(t:isinf(), { false, true, true, false, false, false, false, false })
      T.assert_equal(t:isfinite(), { false, false, false, true, true, true, true, true })
      assert.equal("bool", t:isnan():dtype())
      T.assert_equal(t:softplus():narrow(1, 2, 2), { INF, 0 })
      local big = dtype == "float32" and 3.4028234663852886e38 or 1.7976931348623157e308
      T.assert_equal(t:nan_to_num(), { 0, big, -big, 0, 0, 2.5, -2.5, 3.5 })
      T.assert_equal(t:nan_to_num(-1, 100, -100), { -1, 100, -100, 0, 0, 2.5, -2.5, 3.5 })
      local c = t:clone()
      c:nan_to_num_(7)
      T.assert_equal(c, { 7, big, -big, 0, 0, 2.5, -2.5, 3.5 })
      local e = qlua.tensor({ -1, 1, 0, 0.5, 2 }, { dtype = dtype, device = dev }):erfinv()
      T.assert_equal(e:narrow(1, 1, 3), { -INF, INF, 0 })
      T.assert_close(e:narrow(1, 4, 1), { 0.47693627620446987 }, TOL[dtype])
      assert.is_true(e[5] ~= e[5], "erfinv(2) is NaN")
    end
    local i = qlua.tensor({ 1, -2 }, { dtype = "int32", device = dev })
    T.assert_equal(i:isnan(), { false, false })
    T.assert_equal(i:isfinite(), { true, true })
    T.assert_equal(i:nan_to_num(), { 1, -2 })
    T.assert_error(function() i:isnan_() end, "isnan_")
  end)

  both("erfinv inverts erf to double precision over (-1, 1)", function(dev)
    local ys = {}
    for k = 1, 40 do ys[k] = -0.99 + (k - 1) * (2 * 0.99) / 39 end  -- where the reference erf is exact
    local r = qlua.tensor(ys, { dtype = "float64", device = dev }):erfinv():totable()
    for k, x in ipairs(r) do
      assert(math.abs(erf(x) - ys[k]) <= 1e-14, string.format("erf(erfinv(%.17g)) = %.17g", ys[k], erf(x)))
    end
  end)
end)

describe("binary math", function()
  local function lua_mod(a, b) return a % b end
  local function lua_idiv(a, b) return a // b end

  both("atan2, hypot and fmod against Lua, floats, on views, with numbers", function(dev)
    for _, dtype in ipairs(T.float_dtypes) do
      local a = random_in(-4, 4, { 3, 4 }, dtype)
      local b = random_in(-4, 4, { 3, 4 }, dtype)
      local ta, tb = T.make(a, dtype, "transposed", dev), T.make(b, dtype, "stepped", dev)
      local function c(x) return T.as_dtype(x, dtype) end
      T.assert_close(ta:atan2(tb), T.ref.map2(a, b, function(x, y) return c(math.atan(x, y)) end), TOL[dtype])
      T.assert_close(ta:hypot(tb), T.ref.map2(a, b, function(x, y) return c(sqrt(x * x + y * y)) end), TOL[dtype])
      T.assert_close(ta:fmod(tb), T.ref.map2(a, b, function(x, y) return c(math.fmod(x, y)) end), TOL[dtype])
      T.assert_close(ta:fmod(1.5), T.ref.map(a, function(x) return c(math.fmod(x, 1.5)) end), TOL[dtype])
    end
    local i = qlua.tensor({ 1, -2 }, { dtype = "int32", device = dev })
    assert.equal("float64", i:atan2(i):dtype())
    assert.equal("float64", i:hypot(3):dtype())
  end)

  both("% and // are Lua's, on floats and integers, the number on either side", function(dev)
    local xs = { 7, -7, 7, -7, 0, 5, -5, 6 }
    local ys = { 3, 3, -3, -3, 3, 1, 1, 4 }
    for _, dtype in ipairs({ "int32", "int64" }) do
      local tx = qlua.tensor(xs, { dtype = dtype, device = dev })
      local ty = qlua.tensor(ys, { dtype = dtype, device = dev })
      T.assert_equal(tx % ty, T.ref.map2(xs, ys, lua_mod), dtype .. " %")
      T.assert_equal(tx // ty, T.ref.map2(xs, ys, lua_idiv), dtype .. " //")
      T.assert_equal(tx:remainder(ty), T.ref.map2(xs, ys, lua_mod))
      T.assert_equal(tx:floor_divide(ty), T.ref.map2(xs, ys, lua_idiv))
      T.assert_equal(tx:fmod(ty), T.ref.map2(xs, ys, function(a, b) return math.fmod(a, b) end))
      assert.equal(dtype, (tx % ty):dtype())
      T.assert_equal(tx % 4, T.ref.map(xs, function(a) return a % 4 end))
      T.assert_equal(10 // ty, T.ref.map(ys, function(b) return 10 // b end))
      T.assert_equal(-10 % ty, T.ref.map(ys, function(b) return -10 % b end))
      -- x % 0 and x // 0 give 0 where Lua raises; INT_MIN // -1 wraps as Lua's does
      T.assert_equal(tx % 0, { 0, 0, 0, 0, 0, 0, 0, 0 })
      T.assert_equal(tx // 0, { 0, 0, 0, 0, 0, 0, 0, 0 })
    end
    local mn = qlua.tensor({ math.mininteger }, { device = dev })
    T.assert_equal(mn // -1, { math.mininteger // -1 })
    T.assert_equal(mn % -1, { 0 })
    local fx = { 7.5, -7.5, 7.5, -7.5, 5.0, -5.0, 1.0, 0.0 }
    local fy = { 2, 2, -2, -2, INF, INF, 0, 3 }
    for _, dtype in ipairs(T.float_dtypes) do
      local tx = T.make(fx, dtype, "narrowed", dev)
      local ty = qlua.tensor(fy, { dtype = dtype, device = dev })
      T.assert_equal(tx % ty, T.ref.map2(fx, fy, lua_mod), dtype .. " %")
      T.assert_equal(tx // ty, T.ref.map2(fx, fy, lua_idiv), dtype .. " //")
      T.assert_equal(7.5 % ty, T.ref.map(fy, function(b) return 7.5 % b end))
    end
    local u = qlua.tensor({ 200, 7 }, { dtype = "uint8", device = dev })
    T.assert_equal(u % 7, { 4, 0 })
    T.assert_equal(u // 7, { 28, 1 })
    local i = qlua.tensor({ 7 }, { device = dev })
    assert.equal("float64", (i % 2.5):dtype())
    T.assert_equal(i % 2.5, { 2 })
    local c = qlua.tensor({ 9, -9 }, { device = dev })
    c:remainder_(4)
    T.assert_equal(c, { 1, 3 })
  end)

  both("lerp: exact at both ends, with a number or a tensor weight", function(dev)
    local a = qlua.tensor({ 1, 2, 3, -4 }, { dtype = "float64", device = dev })
    local b = qlua.tensor({ 5, -2, 3.5, 10 }, { dtype = "float64", device = dev })
    T.assert_equal(a:lerp(b, 0), a)
    T.assert_equal(a:lerp(b, 1), b)
    T.assert_close(a:lerp(b, 0.25), { 2, 1, 3.125, -0.5 }, 1e-15)
    T.assert_close(a:lerp(b, 0.75), { 4, -1, 3.375, 6.5 }, 1e-15)
    local w = qlua.tensor({ 0, 1, 0.25, 0.75 }, { dtype = "float64", device = dev })
    T.assert_close(a:t():lerp(b, w), { 1, -2, 3.125, 6.5 }, 1e-15)
    local f = qlua.tensor({ 0.0, 10.0 }, { device = dev })
    assert.equal("float32", f:lerp(qlua.tensor({ 10.0, 0.0 }, { device = dev }), 0.5):dtype())
    assert.equal("float64", qlua.tensor({ 0, 4 }, { device = dev }):lerp(qlua.tensor({ 2, 2 }, { device = dev }), 0.5):dtype())
    T.assert_error(function() return a:lerp(qlua.zeros(3, { dtype = "float64", device = dev }), 0.5) end, "lerp")
  end)

  both("lerp_: in place, b and w broadcast to self; float self only", function(dev)
    local a0 = { { 1, 2, 3, -4 }, { 0.5, -1, 8, 2 } }
    local b = qlua.tensor({ 5, -2, 3.5, 10 }, { dtype = "float64", device = dev })
    local w = qlua.tensor({ { 0.25 }, { 0.75 } }, { dtype = "float64", device = dev })
    local a = qlua.tensor(a0, { dtype = "float64", device = dev })
    assert.equal(a, a:lerp_(b, w))                 -- returns self
    local want = {}
    for r = 1, 2 do                                 -- plain Lua, PyTorch's two-sided formula
      want[r] = {}
      local wr = r == 1 and 0.25 or 0.75
      for c = 1, 4 do
        local x, y = a0[r][c], b:totable()[c]
        want[r][c] = wr < 0.5 and x + wr * (y - x) or y - (y - x) * (1 - wr)
      end
    end
    T.assert_close(a, want, 1e-15)
    -- a transposed view is written through, a number weight exact at 1
    local base = qlua.tensor(a0, { dtype = "float32", device = dev })
    local v = base:t()
    v:lerp_(qlua.zeros(4, 2, { device = dev }), 1)
    T.assert_equal(base, { { 0, 0, 0, 0 }, { 0, 0, 0, 0 } })
    -- self does not grow, integers refuse, expanded self refuses
    T.assert_error(function() return qlua.zeros(4, { device = dev }):lerp_(qlua.zeros(2, 4, { device = dev }), 0.5) end,
      "lerp_: shape 2x4 cannot be broadcast to 4")
    T.assert_error(function() return qlua.zeros(3, { dtype = "int64", device = dev }):lerp_(qlua.zeros(3, { dtype = "int64", device = dev }), 0.5) end,
      "lerp_: cannot store a float result in int64 tensor")
    T.assert_error(function() local e = qlua.zeros(1, 3, { device = dev }):expand(2, 3); return e:lerp_(qlua.ones(2, 3, { device = dev }), 0.5) end,
      "lerp_: cannot write into an expanded tensor")
  end)

  both("addcmul_ and addcdiv_", function(dev)
    local t = qlua.tensor({ 1, 2, 3 }, { dtype = "float64", device = dev })
    local a = qlua.tensor({ 2, 4, 6 }, { dtype = "float64", device = dev })
    local b = qlua.tensor({ 4, 2, 3 }, { dtype = "float64", device = dev })
    assert.is_true(rawequal(t, t:addcmul_(a, b, 0.5)))
    T.assert_equal(t, { 5, 6, 12 })
    t:addcdiv_(a, b)
    T.assert_equal(t, { 5.5, 8, 14 })
    t:addcdiv_(a, b, -2)
    T.assert_equal(t, { 4.5, 4, 10 })
    local i = qlua.tensor({ 1, 1 }, { device = dev })
    T.assert_error(function() i:addcdiv_(i, i) end, "addcdiv_", "cannot store")
  end)
end)
