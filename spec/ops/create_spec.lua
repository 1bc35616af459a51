-- Creating and joining tensors (docs/API.md "Creating tensors" and "Joining tensors"):
-- qlua.tensor with dtype inference, empty / zeros / ones / full / range and the random
-- functions with qlua.seed; the *_like functions, arange, linspace, logspace, eye,
-- randperm, cat and stack, each against a plain-Lua reference in every dtype on the CPU,
-- then GPU parity cases that run only with a GPU (pending without one).
local T, qlua, test, gtest = require("qlua.testing").spec(_ENV)

-- ============================ qlua.tensor, empty ... full, range, the random functions

describe("qlua.tensor", function()
  test("infers int64 from integers and float32 from any float", function()
    local a = qlua.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    assert.equal("int64", a:dtype())
    T.assert_shape(a, { 2, 3 })
    T.assert_equal(a, { { 1, 2, 3 }, { 4, 5, 6 } })
    local b = qlua.tensor({ 1, 2.5, 3 })
    assert.equal("float32", b:dtype())
    T.assert_equal(b, { 1, 2.5, 3 })
    -- 1.0 is a float in Lua 5.4, so it makes the tensor float32
    assert.equal("float32", qlua.tensor({ 1.0, 2 }):dtype())
  end)

  test("makes a 0-d tensor from a number", function()
    local i = qlua.tensor(7)
    assert.equal(0, i:dim())
    assert.same({}, i:shape())
    assert.equal("int64", i:dtype())
    assert.equal(7, i:item())
    local f = qlua.tensor(2.5)
    assert.equal(0, f:dim())
    assert.equal("float32", f:dtype())
    assert.equal(2.5, f:item())
  end)

  test("{} gives an empty float32 tensor of shape {0}", function()
    local t = qlua.tensor({})
    assert.same({ 0 }, t:shape())
    assert.equal("float32", t:dtype())
    assert.equal(0, t:numel())
  end)

  test("keeps random values exactly in every dtype, up to 4-D", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, shape in ipairs({ { 7 }, { 3, 5 }, { 2, 3, 4 }, { 2, 1, 3, 2 } }) do
        local data = T.random_table(shape, dtype)
        local t = qlua.tensor(data, { dtype = dtype })
        assert.equal(dtype, t:dtype())
        assert.equal("cpu", t:device())
        T.assert_shape(t, shape)
        T.assert_equal(t, data, dtype)
      end
    end
  end)

  test("converts given data to the requested dtype", function()
    T.assert_equal(qlua.tensor({ 1, 2, 3 }, { dtype = "float64" }), { 1.0, 2.0, 3.0 })
    assert.equal("float64", qlua.tensor({ 1, 2 }, { dtype = "float64" }):dtype())
    local f = qlua.tensor({ 0.1, 1 / 3 }, { dtype = "float32" })
    T.assert_equal(f, { T.f32(0.1), T.f32(1 / 3) })
    local d = qlua.tensor({ 0.1, 1 / 3 }, { dtype = "float64" })
    T.assert_equal(d, { 0.1, 1 / 3 })
    assert.equal("int32", qlua.tensor({ 5, -6 }, { dtype = "int32" }):dtype())
    T.assert_equal(qlua.tensor({ 5, -6 }, { dtype = "int32" }), { 5, -6 })
  end)

  test("holds the whole int64 range exactly", function()
    local t = qlua.tensor({ math.maxinteger, math.mininteger, 9007199254740993 })
    assert.equal("int64", t:dtype())
    local v = t:totable()
    assert.equal(math.maxinteger, v[1])
    assert.equal(math.mininteger, v[2])
    assert.equal(9007199254740993, v[3])
    assert.equal("integer", math.type(v[3]))
  end)

  test("rejects ragged tables and non-numbers", function()
    T.assert_error(function() local _ = qlua.tensor({ { 1, 2 }, { 3 } }) end, "tensor")
    T.assert_error(function() local _ = qlua.tensor({ 1, { 2 } }) end, "tensor")
    T.assert_error(function() local _ = qlua.tensor({ 1, "x" }) end, "tensor")
    T.assert_error(function() local _ = qlua.tensor("abc") end, "tensor")
  end)
end)

describe("qlua.empty / zeros / ones / full", function()
  test("accept the shape as numbers or as one table, with opts", function()
    for _, make in ipairs({ "empty", "zeros", "ones" }) do
      local a = qlua[make](2, 3)
      T.assert_shape(a, { 2, 3 })
      assert.equal("float32", a:dtype())
      assert.equal("cpu", a:device())
      local b = qlua[make]({ 4, 1, 2 })
      T.assert_shape(b, { 4, 1, 2 })
      local c = qlua[make](2, 3, { dtype = "int32" })
      T.assert_shape(c, { 2, 3 })
      assert.equal("int32", c:dtype())
      local d = qlua[make]({ 5 }, { dtype = "float64", device = "cpu" })
      T.assert_shape(d, { 5 })
      assert.equal("float64", d:dtype())
      assert.is_true(a:is_contiguous())
    end
  end)

  test("zeros and ones hold 0 and 1 in every dtype", function()
    for _, dtype in ipairs(T.dtypes) do
      local shape = { math.random(1, 5), math.random(1, 5), math.random(1, 5) }
      local z = qlua.zeros(shape, { dtype = dtype })
      local o = qlua.ones(shape, { dtype = dtype })
      assert.equal(dtype, z:dtype())
      assert.equal(dtype, o:dtype())
      local n = T.numel(shape)
      local zs, os = {}, {}
      for i = 1, n do zs[i], os[i] = 0, 1 end
      T.assert_equal(z, T.unflatten(zs, shape), "zeros " .. dtype)
      T.assert_equal(o, T.unflatten(os, shape), "ones " .. dtype)
    end
  end)

  test("full fills with the value, shape a table or a single number", function()
    for _, dtype in ipairs(T.dtypes) do
      local v = T.random_value(dtype)
      local f = qlua.full({ 3, 4 }, v, { dtype = dtype })
      assert.equal(dtype, f:dtype())
      local want = {}
      for i = 1, 12 do want[i] = v end
      T.assert_equal(f, T.unflatten(want, { 3, 4 }))
      local g = qlua.full(5, v, { dtype = dtype })
      T.assert_shape(g, { 5 })
      T.assert_equal(g, { v, v, v, v, v })
    end
    T.assert_equal(qlua.full(3, 2.5), { 2.5, 2.5, 2.5 })
  end)

  test("shapes with zeros make empty tensors", function()
    for _, shape in ipairs({ { 0 }, { 2, 0 }, { 0, 3 }, { 2, 0, 4 } }) do
      for _, make in ipairs({ "empty", "zeros", "ones" }) do
        local t = qlua[make](shape)
        T.assert_shape(t, shape)
        assert.equal(0, t:numel())
      end
      assert.equal(0, qlua.full(shape, 3):numel())
    end
    assert.same({ {}, {} }, qlua.zeros(2, 0):totable())
  end)

  test("an empty shape table makes a 0-d tensor", function()
    local z = qlua.zeros({})
    assert.equal(0, z:dim())
    assert.equal(1, z:numel())
    assert.equal(0, z:item())
    assert.equal(1, qlua.ones({}):item())
  end)
end)

describe("qlua.range", function()
  test("is inclusive like a numeric for, int64 for integers", function()
    local r = qlua.range(1, 5)
    assert.equal("int64", r:dtype())
    T.assert_equal(r, { 1, 2, 3, 4, 5 })
    T.assert_equal(qlua.range(2, 11, 3), { 2, 5, 8, 11 })
    T.assert_equal(qlua.range(2, 12, 3), { 2, 5, 8, 11 })
    T.assert_equal(qlua.range(5, 1, -2), { 5, 3, 1 })
    T.assert_equal(qlua.range(-3, -1), { -3, -2, -1 })
    T.assert_equal(qlua.range(4, 4), { 4 })
  end)

  test("matches Lua's for loop on random bounds", function()
    for _ = 1, 20 do
      local first, last = math.random(-20, 20), math.random(-20, 20)
      local step = math.random(1, 4) * (math.random() < 0.5 and -1 or 1)
      local want = {}
      for v = first, last, step do want[#want + 1] = v end
      local r = qlua.range(first, last, step)
      assert.equal(#want, r:numel())
      if #want > 0 then T.assert_equal(r, want) end
    end
  end)

  test("is float32 when any bound or the step is a float", function()
    local a = qlua.range(0, 1, 0.25)
    assert.equal("float32", a:dtype())
    T.assert_equal(a, { 0, 0.25, 0.5, 0.75, 1 })
    local b = qlua.range(1, 2.5)
    assert.equal("float32", b:dtype())
    T.assert_equal(b, { 1, 2 })
    local c = qlua.range(0.5, 3)
    assert.equal("float32", c:dtype())
    T.assert_equal(c, { 0.5, 1.5, 2.5 })
  end)

  test("takes opts after the bounds, with or without a step", function()
    local a = qlua.range(1, 3, { dtype = "float64" })
    assert.equal("float64", a:dtype())
    T.assert_equal(a, { 1, 2, 3 })
    local b = qlua.range(1, 7, 2, { dtype = "int32" })
    assert.equal("int32", b:dtype())
    T.assert_equal(b, { 1, 3, 5, 7 })
  end)

  test("an empty range gives shape {0}; step 0 is an error", function()
    local e = qlua.range(5, 1)
    assert.same({ 0 }, e:shape())
    assert.same({ 0 }, qlua.range(1, 5, -1):shape())
    T.assert_error(function() local _ = qlua.range(1, 5, 0) end, "range")
  end)
end)

describe("random tensors", function()
  local N = 100000

  local function stats(list)
    local s, s2, lo, hi = 0, 0, math.huge, -math.huge
    for _, v in ipairs(list) do
      s = s + v
      s2 = s2 + v * v
      if v < lo then lo = v end
      if v > hi then hi = v end
    end
    local mean = s / #list
    return mean, math.sqrt(s2 / #list - mean * mean), lo, hi
  end

  test("rand is uniform in [0, 1), float32 by default", function()
    qlua.seed(101)
    local t = qlua.rand(N)
    assert.equal("float32", t:dtype())
    T.assert_shape(t, { N })
    local mean, sd, lo, hi = stats(t:totable())
    assert.is_true(lo >= 0 and hi < 1, "range " .. lo .. " .. " .. hi)
    assert.is_true(math.abs(mean - 0.5) < 0.01, "mean " .. mean)
    assert.is_true(math.abs(sd - math.sqrt(1 / 12)) < 0.01, "sd " .. sd)
    -- ten equal bins each get about a tenth
    local bins = {}
    for _, v in ipairs(t:totable()) do
      local b = math.floor(v * 10) + 1
      bins[b] = (bins[b] or 0) + 1
    end
    for b = 1, 10 do
      assert.is_true(math.abs((bins[b] or 0) / N - 0.1) < 0.01, "bin " .. b)
    end
  end)

  test("rand takes shapes and opts like the other creators", function()
    local t = qlua.rand(3, 4, { dtype = "float64" })
    assert.equal("float64", t:dtype())
    T.assert_shape(t, { 3, 4 })
    T.assert_shape(qlua.rand({ 2, 5 }), { 2, 5 })
    local mean, _, lo, hi = stats(qlua.rand({ N }, { dtype = "float64" }):totable())
    assert.is_true(lo >= 0 and hi < 1)
    assert.is_true(math.abs(mean - 0.5) < 0.01)
  end)

  test("randn is normal with mean 0 and sd 1", function()
    qlua.seed(202)
    for _, dtype in ipairs(T.float_dtypes) do
      local t = dtype == "float32" and qlua.randn(N) or qlua.randn({ N }, { dtype = dtype })
      assert.equal(dtype, t:dtype())
      local list = t:totable()
      local mean, sd = stats(list)
      assert.is_true(math.abs(mean) < 0.02, "mean " .. mean)
      assert.is_true(math.abs(sd - 1) < 0.02, "sd " .. sd)
      local within = 0
      for _, v in ipairs(list) do if math.abs(v) < 1 then within = within + 1 end end
      assert.is_true(math.abs(within / N - 0.6827) < 0.01, "within 1 sd: " .. within / N)
    end
  end)

  test("randint draws every integer of [lo, hi] about equally, int64 by default", function()
    qlua.seed(303)
    local t = qlua.randint(-2, 3, { N })
    assert.equal("int64", t:dtype())
    local counts, bad = {}, nil
    for _, v in ipairs(t:totable()) do   -- plain checks: 10^5 luassert calls would be slow
      if math.type(v) ~= "integer" or v < -2 or v > 3 then bad = bad or v end
      counts[v] = (counts[v] or 0) + 1
    end
    assert.is_nil(bad, "a value outside [-2, 3] or not an integer")
    for v = -2, 3 do
      assert.is_true(math.abs((counts[v] or 0) / N - 1 / 6) < 0.01, "count of " .. v)
    end
    local i32 = qlua.randint(1, 6, { 2, 3 }, { dtype = "int32" })
    assert.equal("int32", i32:dtype())
    T.assert_shape(i32, { 2, 3 })
    local big = qlua.randint(0, 1 << 40, { 1000 })
    local _, _, lo, hi = stats(big:totable())
    assert.is_true(lo >= 0 and hi <= 2 ^ 40 and hi > 2 ^ 39)
    T.assert_equal(qlua.randint(5, 5, { 4 }), { 5, 5, 5, 5 })
  end)

  test("randint refuses float dtypes and empty ranges", function()
    T.assert_error(function() local _ = qlua.randint(1, 6, { 3 }, { dtype = "float32" }) end, "randint")
    T.assert_error(function() local _ = qlua.randint(1, 6, { 3 }, { dtype = "float64" }) end, "randint")
    T.assert_error(function() local _ = qlua.randint(6, 1, { 3 }) end, "randint")
  end)

  test("qlua.seed makes every generator reproducible", function()
    for _, gen in ipairs({
      function() return qlua.rand(1000) end,
      function() return qlua.rand({ 1000 }, { dtype = "float64" }) end,
      function() return qlua.randn(1000) end,
      function() return qlua.randint(-1000, 1000, { 1000 }) end,
      function() return qlua.randint(0, 9, { 10, 100 }, { dtype = "int32" }) end,
    }) do
      qlua.seed(42)
      local a1, a2 = gen(), gen()
      qlua.seed(42)
      local b1, b2 = gen(), gen()
      qlua.seed(43)
      local c1 = gen()
      T.assert_equal(b1, a1:totable(), "same seed, first call")
      T.assert_equal(b2, a2:totable(), "same seed, second call")
      assert.is_false(pcall(T.assert_equal, a2, a1:totable()), "consecutive calls differ")
      assert.is_false(pcall(T.assert_equal, c1, a1:totable()), "another seed differs")
    end
  end)

  -- runtime/philox.h and ops.h fix the generator: qlua.seed(n) keys Philox4x32-10 with n
  -- and resets the counter; element k of the first call uses counter k.
  test("follows the shared Philox4x32-10 generator after qlua.seed", function()
    local seed = 1234
    qlua.seed(seed)
    local u = qlua.rand(64):totable()
    for k = 1, 64 do assert.equal(T.philox_uniform(seed, k - 1, "float32"), u[k]) end
    qlua.seed(seed)
    local d = qlua.rand({ 64 }, { dtype = "float64" }):totable()
    for k = 1, 64 do assert.equal(T.philox_uniform(seed, k - 1, "float64"), d[k]) end
    qlua.seed(seed)
    local r = qlua.randint(-3, 9, { 64 }):totable()
    for k = 1, 64 do assert.equal(T.philox_int(seed, k - 1, -3, 9), r[k]) end
    qlua.seed(seed)
    local n = qlua.randn({ 64 }, { dtype = "float64" }):totable()
    local want = {}
    for k = 1, 64 do want[k] = T.philox_normal(seed, k - 1) end
    T.assert_close(n, want, 1e-12, "randn float64")
  end)
end)

-- ========================== the *_like functions, ranges, eye, randperm, cat and stack

local HAS_GPU = T.gpu_status()

-- t has dtype, shape and the values of the nested table (or flat list) expected.
local function check(t, dtype, shape, expected, what)
  assert.equal(dtype, t:dtype(), (what or "") .. ": dtype")
  T.assert_shape(t, shape, what)
  T.assert_equal(t, expected, what)
end

-- A flat list of values as dtype stores them.
local function as_dtype_list(list, dtype)
  local out = {}
  for i, v in ipairs(list) do out[i] = T.as_dtype(v, dtype) end
  return out
end

------------------------------------------------------------------------ references

-- arange's definition: element k is start + k * step while it is < stop (> for step < 0).
local function ref_arange(start, stop, step)
  local out, k = {}, 0
  while true do
    local v = start + k * step
    if (step > 0 and v >= stop) or (step < 0 and v <= stop) then break end
    out[#out + 1] = v
    k = k + 1
  end
  return out
end

-- PyTorch's linspace: the first half counts up from a, the second down from b.
local function ref_linspace(a, b, n)
  local out = {}
  if n == 1 then return { a + 0.0 } end
  local step = (b - a) / (n - 1)
  for k = 0, n - 1 do
    out[k + 1] = k < n // 2 and a + k * step or b - (n - 1 - k) * step
  end
  return out
end

local trunc = T.ref.trunc

local function ref_eye(n, m)
  local out = {}
  for i = 1, n do
    out[i] = {}
    for j = 1, m do out[i][j] = i == j and 1 or 0 end
  end
  return out
end

-- Fisher-Yates from the Philox stream: step k swaps position i = n - 1 - k (0-based) with
-- j uniform in 0..i from counter offset + k.
local function ref_randperm(seed, offset, n)
  local p = {}
  for i = 1, n do p[i] = i end
  for k = 0, n - 2 do
    local i = n - 1 - k
    local j = T.philox_int(seed, offset + k, 0, i)
    p[i + 1], p[j + 1] = p[j + 1], p[i + 1]
  end
  return p
end

-- cat of arrays {shape =, data =} along dim (all of one rank).
local function ref_cat(pieces, dim)
  local shape = T.copy_list(pieces[1].shape)
  shape[dim] = 0
  for _, p in ipairs(pieces) do shape[dim] = shape[dim] + p.shape[dim] end
  local out, q = {}, {}
  T.each_index(shape, function(pos, k)
    for d = 1, #pos do q[d] = pos[d] end
    local at, i = pos[dim], 1
    while at > pieces[i].shape[dim] do at = at - pieces[i].shape[dim]; i = i + 1 end
    q[dim] = at
    out[k] = pieces[i].data[T.linear(pieces[i].shape, q)]
  end)
  return out, shape
end

-- stack of arrays of one shape: a new dim of size #pieces at dim.
local function ref_stack(pieces, dim)
  local shape = T.copy_list(pieces[1].shape)
  table.insert(shape, dim, #pieces)
  local out, q = {}, {}
  T.each_index(shape, function(pos, k)
    local n = 0
    for d = 1, #pos do if d ~= dim then n = n + 1; q[n] = pos[d] end end
    local p = pieces[pos[dim]]
    out[k] = p.data[T.linear(p.shape, q)]
  end)
  return out, shape
end

------------------------------------------------------------------------ *_like

describe("qlua.zeros_like, ones_like, empty_like, full_like", function()
  test("take t's shape, dtype and device, in every dtype and layout", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        local shape = { 3, 4 }
        local t = T.make(T.random_table(shape, dtype), dtype, layout)
        local z, o = qlua.zeros_like(t), qlua.ones_like(t)
        check(z, dtype, shape, T.ref.map(T.random_table(shape, dtype), function() return 0 end),
          dtype .. " zeros_like " .. layout)
        check(o, dtype, shape, T.ref.map(T.random_table(shape, dtype), function() return 1 end),
          dtype .. " ones_like " .. layout)
        assert.is_true(z:is_contiguous())
        local e = qlua.empty_like(t)
        assert.equal(dtype, e:dtype())
        T.assert_shape(e, shape)
        assert.equal("cpu", e:device())
        local f = qlua.full_like(t, 7)
        check(f, dtype, shape, T.ref.map(T.random_table(shape, dtype), function() return 7 end))
      end
    end
  end)

  test("opts override the dtype and the device", function()
    local t = qlua.tensor({ { 1, 2, 3 } })
    local z = qlua.zeros_like(t, { dtype = "float64" })
    check(z, "float64", { 1, 3 }, { { 0, 0, 0 } })
    local f = qlua.full_like(t, 2.5, { dtype = "float32" })
    check(f, "float32", { 1, 3 }, { { 2.5, 2.5, 2.5 } })
    assert.equal("cpu", qlua.ones_like(t, { device = "cpu" }):device())
  end)

  test("0-d and empty tensors", function()
    check(qlua.ones_like(qlua.tensor(3)), "int64", {}, 1)
    local e = qlua.zeros_like(qlua.zeros(0, 4))
    T.assert_shape(e, { 0, 4 })
    assert.equal(0, e:numel())
    T.assert_shape(qlua.empty_like(qlua.zeros(2, 0, 3)), { 2, 0, 3 })
  end)

  test("errors name the function and the values", function()
    local t = qlua.tensor({ 1, 2 })
    T.assert_error(function() qlua.full_like(t, 2.5) end, "full_like")
    T.assert_error(function() qlua.full_like(qlua.tensor({ 1 }, { dtype = "int32" }), 1 << 40) end,
      "full_like")
    T.assert_error(function() qlua.zeros_like(t, { dtype = "int8" }) end, "zeros_like", "int8")
    T.assert_error(function() qlua.ones_like(3) end, "ones_like")
    T.assert_error(function() qlua.zeros_like(t, {}, 1) end, "zeros_like", "unexpected argument")
    local dead = qlua.zeros(2)
    dead:free()
    T.assert_error(function() qlua.empty_like(dead) end, "empty_like", "freed")
  end)
end)

describe("qlua.rand_like, randn_like", function()
  test("draw t's shape from the generator as rand and randn do", function()
    for _, dtype in ipairs(T.float_dtypes) do
      local t = qlua.zeros(4, 5, { dtype = dtype })
      qlua.seed(11)
      local r = qlua.rand_like(t)
      assert.equal(dtype, r:dtype())
      T.assert_shape(r, { 4, 5 })
      local want = {}
      for k = 0, 19 do want[k + 1] = T.as_dtype(T.philox_uniform(11, k, dtype), dtype) end
      T.assert_equal(r, T.unflatten(want, { 4, 5 }))
      qlua.seed(11)
      T.assert_equal(qlua.rand(4, 5, { dtype = dtype }), r)
      qlua.seed(12)
      local n = qlua.randn_like(t)
      local wantn = {}
      for k = 0, 19 do wantn[k + 1] = T.philox_normal(12, k) end
      T.assert_close(n, T.unflatten(wantn, { 4, 5 }), 1e-6)
    end
  end)

  test("an integer t needs a float opts.dtype", function()
    local t = qlua.tensor({ 1, 2, 3 })
    T.assert_error(function() qlua.rand_like(t) end, "rand_like", "int64")
    T.assert_error(function() qlua.randn_like(t) end, "randn_like", "int64")
    qlua.seed(3)
    local r = qlua.rand_like(t, { dtype = "float64" })
    assert.equal("float64", r:dtype())
    T.assert_equal(r, { T.philox_uniform(3, 0, "float64"), T.philox_uniform(3, 1, "float64"),
      T.philox_uniform(3, 2, "float64") })
  end)
end)

------------------------------------------------------------------------ arange

describe("qlua.arange", function()
  test("is half-open, unlike range", function()
    check(qlua.arange(1, 4), "int64", { 3 }, { 1, 2, 3 })
    check(qlua.range(1, 4), "int64", { 4 }, { 1, 2, 3, 4 })
    check(qlua.arange(5), "int64", { 5 }, { 0, 1, 2, 3, 4 })
    check(qlua.arange(0, 10, 3), "int64", { 4 }, { 0, 3, 6, 9 })
    check(qlua.arange(0, 9, 3), "int64", { 3 }, { 0, 3, 6 })
    check(qlua.arange(10, 0, -3), "int64", { 4 }, { 10, 7, 4, 1 })
    check(qlua.arange(-3, 3, 2), "int64", { 3 }, { -3, -1, 1 })
  end)

  test("an empty range gives shape {0}", function()
    for _, a in ipairs({ { 0, 0 }, { 5, 1 }, { 1, 5, -1 }, { 0 }, { -3 }, { 0.5, 0.5, 0.1 } }) do
      local t = qlua.arange(table.unpack(a))
      T.assert_shape(t, { 0 }, table.concat(a, ", "))
    end
  end)

  test("integers give int64, any float gives float32, opts.dtype overrides", function()
    assert.equal("int64", qlua.arange(3):dtype())
    assert.equal("float32", qlua.arange(3.0):dtype())
    assert.equal("float32", qlua.arange(0, 3, 0.5):dtype())
    assert.equal("float32", qlua.arange(0.0, 3):dtype())
    for _, dtype in ipairs(T.dtypes) do
      local t = qlua.arange(2, 20, 4, { dtype = dtype })
      check(t, dtype, { 5 }, { 2, 6, 10, 14, 18 }, dtype)
      check(qlua.arange(4, { dtype = dtype }), dtype, { 4 }, { 0, 1, 2, 3 }, dtype)
    end
    -- integral floats are accepted for integer dtypes
    check(qlua.arange(0.0, 6.0, 2.0, { dtype = "int32" }), "int32", { 3 }, { 0, 2, 4 })
  end)

  test("float steps: element k is start + k*step, every element < stop", function()
    check(qlua.arange(0, 0.3, 0.1, { dtype = "float64" }), "float64", { 3 }, { 0, 0.1, 0.2 })
    check(qlua.arange(0, 1, 0.1, { dtype = "float64" }), "float64", { 10 }, ref_arange(0, 1, 0.1))
    -- 1 + 3 * 0.1 is 1.3000000000000003 > 1.3 in double: not an element (NumPy's
    -- ceil((stop - start) / step) would give a 4th element)
    check(qlua.arange(1, 1.3, 0.1, { dtype = "float64" }), "float64", { 3 },
      { 1, 1 + 0.1, 1 + 2 * 0.1 })
    check(qlua.arange(1, 0, -0.25), "float32", { 4 }, { 1, 0.75, 0.5, 0.25 })
    for _ = 1, 300 do
      local start = math.random(-100, 100) / math.random(1, 10)
      local step = (math.random() < 0.5 and -1 or 1) * math.random(1, 50) / math.random(1, 40)
      local stop = start + step * (math.random(0, 60) + math.random(-1, 1) * 1e-12)
      local want = ref_arange(start, stop, step)
      for _, dtype in ipairs(T.float_dtypes) do
        local t = qlua.arange(start, stop, step, { dtype = dtype })
        local what = ("arange(%.17g, %.17g, %.17g) %s"):format(start, stop, step, dtype)
        check(t, dtype, { #want }, as_dtype_list(want, dtype), what)
      end
    end
  end)

  test("integer counts are exact over the whole int64 range", function()
    local maxi, mini = math.maxinteger, math.mininteger
    check(qlua.arange(maxi - 3, maxi), "int64", { 3 }, { maxi - 3, maxi - 2, maxi - 1 })
    check(qlua.arange(mini, maxi, 1 << 62), "int64", { 4 }, { mini, -(1 << 62), 0, 1 << 62 })
    check(qlua.arange(maxi, mini, -(1 << 62)), "int64", { 4 },
      { maxi, maxi - (1 << 62), maxi - 2 * (1 << 62), maxi - 3 * (1 << 62) })
    for _ = 1, 200 do
      local start, step = math.random(-1000, 1000), math.random(1, 30)
      if math.random() < 0.5 then step = -step end
      local stop = math.random(-1000, 1000)
      local want = ref_arange(start, stop, step)
      check(qlua.arange(start, stop, step), "int64", { #want }, want,
        ("arange(%d, %d, %d)"):format(start, stop, step))
    end
  end)

  test("errors name arange and the values", function()
    T.assert_error(function() qlua.arange(0, 5, 0) end, "arange: step is zero")
    T.assert_error(function() qlua.arange(0, 5, 0.0) end, "arange: step is zero")
    T.assert_error(function() qlua.arange(0, 1.5, 1, { dtype = "int64" }) end, "arange", "1.5",
      "int64")
    T.assert_error(function() qlua.arange(0, 1 / 0, 1.0) end, "arange", "finite")
    T.assert_error(function() qlua.arange(0, 0 / 0, 1.0) end, "arange", "finite")
    T.assert_error(function() qlua.arange(0, 4e9, 1e9, { dtype = "int32" }) end, "arange",
      "3000000000", "int32")
    T.assert_error(function() qlua.arange(0, 1e15, 1e-3) end, "arange", "too many")
    T.assert_error(function() qlua.arange(math.mininteger, math.maxinteger) end, "arange",
      "too many")
    T.assert_error(function() qlua.arange("a") end, "arange")
    T.assert_error(function() qlua.arange(1, 2, 3, {}, 5) end, "arange")
    T.assert_error(function() qlua.arange(1, 2, { dtype = "float128" }) end, "arange", "float128")
  end)
end)

------------------------------------------------------------------------ linspace, logspace

describe("qlua.linspace and qlua.logspace", function()
  test("linspace: n values from a to b, both ends exact, float32 by default", function()
    check(qlua.linspace(0, 1, 5), "float32", { 5 }, { 0, 0.25, 0.5, 0.75, 1 })
    for _, case in ipairs({ { 0, 1, 7 }, { -3.5, 2.25, 10 }, { 5, -5, 11 }, { 1, 1, 4 },
                            { 0, 1, 2 }, { 2, 3, 1 }, { 0, 1, 0 }, { 0.1, 0.7, 13 } }) do
      local a, b, n = table.unpack(case)
      local want = ref_linspace(a, b, n)
      for _, dtype in ipairs(T.float_dtypes) do
        local t = qlua.linspace(a, b, n, { dtype = dtype })
        check(t, dtype, { n }, as_dtype_list(want, dtype), table.concat(case, ", ") .. " " .. dtype)
      end
      if n >= 2 then
        local t = qlua.linspace(a, b, n, { dtype = "float64" })
        assert.equal(a + 0.0, t[1])
        assert.equal(b + 0.0, t[n])
      end
    end
  end)

  test("linspace of integer dtypes truncates toward zero", function()
    for _, dtype in ipairs(T.int_dtypes) do
      local want = {}
      for i, v in ipairs(ref_linspace(-5, 6, 8)) do want[i] = trunc(v) end
      check(qlua.linspace(-5, 6, 8, { dtype = dtype }), dtype, { 8 }, want, dtype)
    end
  end)

  test("logspace: base ^ linspace, base 10 by default", function()
    check(qlua.logspace(0, 3, 4, { dtype = "float64" }), "float64", { 4 }, { 1, 10, 100, 1000 })
    check(qlua.logspace(0, 4, 5, 2, { dtype = "float64" }), "float64", { 5 }, { 1, 2, 4, 8, 16 })
    for _, case in ipairs({ { -2, 2, 9, 10 }, { 0, 1, 6, 2 }, { 1, -1, 5, 3.5 }, { 0, 2, 1, 10 },
                            { 0, 2, 0, 10 } }) do
      local a, b, n, base = table.unpack(case)
      local want = {}
      for i, v in ipairs(ref_linspace(a, b, n)) do want[i] = base ^ v end
      for _, dtype in ipairs(T.float_dtypes) do
        check(qlua.logspace(a, b, n, base, { dtype = dtype }), dtype, { n },
          as_dtype_list(want, dtype), table.concat(case, ", ") .. " " .. dtype)
      end
    end
    for _, dtype in ipairs(T.int_dtypes) do
      check(qlua.logspace(0, 3, 4, 2, { dtype = dtype }), dtype, { 4 }, { 1, 2, 4, 8 })
      check(qlua.logspace(0, 1, 3, { dtype = dtype }), dtype, { 3 }, { 1, trunc(10 ^ 0.5), 10 })
    end
  end)

  test("errors name the function and the values", function()
    T.assert_error(function() qlua.linspace(0, 1, -1) end, "linspace", "-1")
    T.assert_error(function() qlua.logspace(0, 1, -2) end, "logspace", "-2")
    T.assert_error(function() qlua.linspace(0, 1 / 0, 3) end, "linspace", "finite")
    T.assert_error(function() qlua.linspace(0, 1, 2.5) end, "linspace")
    T.assert_error(function() qlua.logspace(0, 1, 3, 1 / 0) end, "logspace", "base")
    T.assert_error(function() qlua.logspace(0, 20, 3, { dtype = "int64" }) end, "logspace",
      "out of range", "int64")
    T.assert_error(function() qlua.linspace(0, 3e9, 2, { dtype = "int32" }) end, "linspace",
      "out of range", "int32")
    T.assert_error(function() qlua.linspace(0, 1, 3, {}, 1) end, "linspace", "unexpected argument")
  end)
end)

------------------------------------------------------------------------ eye

describe("qlua.eye", function()
  test("square and rectangular, every dtype, float32 by default", function()
    check(qlua.eye(3), "float32", { 3, 3 }, ref_eye(3, 3))
    for _, dtype in ipairs(T.dtypes) do
      for _, nm in ipairs({ { 1, 1 }, { 4, 4 }, { 2, 5 }, { 5, 2 }, { 0, 3 }, { 3, 0 }, { 0, 0 } }) do
        local n, m = nm[1], nm[2]
        local t = qlua.eye(n, m, { dtype = dtype })
        assert.equal(dtype, t:dtype())
        T.assert_shape(t, { n, m })
        if n * m > 0 then T.assert_equal(t, ref_eye(n, m)) end
        assert.is_true(t:is_contiguous())
      end
      check(qlua.eye(2, { dtype = dtype }), dtype, { 2, 2 }, ref_eye(2, 2))
    end
  end)

  test("fills poisoned memory completely", function()
    T.poison_pool("cpu", 64 * 64 * 8)
    T.assert_equal(qlua.eye(64, 60, { dtype = "float64" }), ref_eye(64, 60))
  end)

  test("errors", function()
    T.assert_error(function() qlua.eye(-1) end, "eye", "-1")
    T.assert_error(function() qlua.eye(2, -3) end, "eye", "-3")
    T.assert_error(function() qlua.eye(2.5) end, "eye")
    T.assert_error(function() qlua.eye(2, 2, {}, 1) end, "eye", "unexpected argument")
  end)
end)

------------------------------------------------------------------------ randperm

describe("qlua.randperm", function()
  test("is the Philox Fisher-Yates permutation of 1..n, int64", function()
    for _, n in ipairs({ 0, 1, 2, 3, 10, 257 }) do
      qlua.seed(1234)
      local p = qlua.randperm(n)
      check(p, "int64", { n }, ref_randperm(1234, 0, n), "randperm(" .. n .. ")")
    end
  end)

  test("is a permutation, and advances the generator by n - 1", function()
    qlua.seed(99)
    local a = qlua.randperm(100)
    local b = qlua.randperm(100)
    T.assert_equal(b, ref_randperm(99, 99, 100))
    local seen = {}
    for _, v in ipairs(a:totable()) do
      assert.is_true(v >= 1 and v <= 100 and not seen[v])
      seen[v] = true
    end
    -- the next random call continues after the 99 + 99 counters used
    local r = qlua.rand(2, { dtype = "float64" })
    T.assert_equal(r, { T.philox_uniform(99, 198, "float64"), T.philox_uniform(99, 199, "float64") })
    -- the same seed gives the same permutation; randperm(1) and (0) use no counters
    qlua.seed(99)
    qlua.randperm(1)
    qlua.randperm(0)
    T.assert_equal(qlua.randperm(100), a)
  end)

  test("other dtypes hold the same permutation", function()
    for _, dtype in ipairs(T.dtypes) do
      qlua.seed(5)
      check(qlua.randperm(50, { dtype = dtype }), dtype, { 50 }, ref_randperm(5, 0, 50), dtype)
    end
  end)

  test("errors", function()
    T.assert_error(function() qlua.randperm(-1) end, "randperm", "-1")
    T.assert_error(function() qlua.randperm(1.5) end, "randperm")
    T.assert_error(function() qlua.randperm((1 << 31), { dtype = "int32" }) end, "randperm",
      "int32")
    T.assert_error(function() qlua.randperm((1 << 24) + 1, { dtype = "float32" }) end, "randperm",
      "float32")
    T.assert_error(function() qlua.randperm(3, {}, 1) end, "randperm", "unexpected argument")
  end)
end)

------------------------------------------------------------------------ cat and stack

-- Random pieces: tables (arrays) and tensors in a layout.
local function pieces_of(shapes, dtypes, layout, device)
  local arrays, tensors = {}, {}
  for i, shape in ipairs(shapes) do
    local dtype = type(dtypes) == "table" and dtypes[i] or dtypes
    local data = T.random_list(T.numel(shape), dtype)
    arrays[i] = { shape = shape, data = data }
    tensors[i] = T.make(T.unflatten(data, shape), dtype, layout, device, shape)
  end
  return arrays, tensors
end

describe("qlua.cat", function()
  test("joins along every dim, every dtype and layout", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        for dim = 1, 3 do
          local shapes = {}
          for i = 1, 3 do
            local s = { 2, 3, 2 }
            s[dim] = i  -- 1, 2, 3 along dim
            shapes[i] = s
          end
          local arrays, tensors = pieces_of(shapes, dtype, layout)
          local want, shape = ref_cat(arrays, dim)
          local t = qlua.cat(tensors, dim)
          check(t, dtype, shape, T.unflatten(want, shape), dtype .. " " .. layout .. " dim " .. dim)
          assert.is_true(t:is_contiguous())
        end
      end
    end
  end)

  test("dim defaults to 1; one piece is a copy", function()
    local a = qlua.tensor({ { 1, 2 }, { 3, 4 } })
    check(qlua.cat({ a, a }), "int64", { 4, 2 }, { { 1, 2 }, { 3, 4 }, { 1, 2 }, { 3, 4 } })
    local c = qlua.cat({ a })
    check(c, "int64", { 2, 2 }, { { 1, 2 }, { 3, 4 } })
    c:fill_(0)
    T.assert_equal(a, { { 1, 2 }, { 3, 4 } })
    check(qlua.cat({ qlua.tensor({ 1, 2 }), qlua.tensor({ 3 }) }), "int64", { 3 }, { 1, 2, 3 })
  end)

  test("promotes dtypes and converts each piece", function()
    for _, da in ipairs(T.dtypes) do
      for _, db in ipairs(T.dtypes) do
        local arrays, tensors = pieces_of({ { 2, 2 }, { 1, 2 } }, { da, db }, "contiguous")
        local want, shape = ref_cat(arrays, 1)
        check(qlua.cat(tensors, 1), T.promote(da, db), shape, T.unflatten(want, shape), da .. "+" .. db)
      end
    end
    local t = qlua.cat({ qlua.tensor({ 1 }, { dtype = "int32" }), qlua.tensor({ 2 }),
      qlua.tensor({ 0.5 }) })
    check(t, "float64", { 3 }, { 1, 2, 0.5 })
  end)

  test("empty pieces: size 0 along dim joins, a 1-D size-0 tensor is skipped", function()
    local a = qlua.tensor({ { 1, 2 }, { 3, 4 } })
    check(qlua.cat({ qlua.zeros(0, 2, { dtype = "int64" }), a }, 1), "int64", { 2, 2 }, { { 1, 2 }, { 3, 4 } })
    check(qlua.cat({ a, qlua.zeros(2, 0, { dtype = "int64" }), a }, 2), "int64", { 2, 4 },
      { { 1, 2, 1, 2 }, { 3, 4, 3, 4 } })
    -- PyTorch's legacy rule: a 1-D size-0 tensor joins tensors of any shape (and still
    -- takes part in the promotion)
    local s = qlua.cat({ qlua.tensor({}), a, qlua.tensor({}) }, 2)
    check(s, "float64", { 2, 2 }, { { 1, 2 }, { 3, 4 } })  -- float32 (the empties) + int64
    T.assert_shape(qlua.cat({ qlua.tensor({}), qlua.tensor({}) }), { 0 })
    local e = qlua.cat({ qlua.zeros(0, 3), qlua.zeros(0, 3) }, 1)
    T.assert_shape(e, { 0, 3 })
    T.assert_shape(qlua.cat({ qlua.zeros(2, 0), qlua.zeros(2, 0) }, 1), { 4, 0 })
  end)

  test("errors name cat, the list positions, the shapes and the devices", function()
    local a = qlua.zeros(2, 3)
    T.assert_error(function() qlua.cat({ a, qlua.zeros(2, 4) }, 1) end, "cat", "2x4",
      "list position 2", "2x3", "list position 1", "dim 1")
    T.assert_error(function() qlua.cat({ a, a, qlua.zeros(2, 3, 4) }, 2) end, "cat", "2x3x4",
      "list position 3")
    T.assert_error(function() qlua.cat({}) end, "cat", "non-empty")
    T.assert_error(function() qlua.cat({ a, 3 }) end, "cat", "list element 2", "number")
    T.assert_error(function() qlua.cat(a) end, "cat")
    T.assert_error(function() qlua.cat({ qlua.tensor(1), qlua.tensor(2) }) end, "cat",
      "list position 1", "0-d")
    T.assert_error(function() qlua.cat({ a }, 3) end, "cat", "dim 3 out of range")
    T.assert_error(function() qlua.cat({ a }, 0) end, "cat", "dim 0")
    T.assert_error(function() qlua.cat({ a }, -1) end, "cat", "dim -1", "negative")
    T.assert_error(function() qlua.cat({ a }, 1, 2) end, "cat", "unexpected argument")
    local dead = qlua.zeros(2, 3)
    dead:free()
    T.assert_error(function() qlua.cat({ a, dead }) end, "cat", "tensor has been freed",
      "list position 2")
    if HAS_GPU then
      local g = qlua.zeros(2, 3, { device = "gpu" })
      T.assert_error(function() qlua.cat({ a, a, g }) end, "cat", "cpu", "list position 1",
        "gpu:0", "list position 3")
    end
  end)
end)

describe("qlua.stack", function()
  test("stacks at every dim, every dtype and layout", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        for dim = 1, 3 do
          local arrays, tensors = pieces_of({ { 2, 3 }, { 2, 3 }, { 2, 3 }, { 2, 3 } }, dtype, layout)
          local want, shape = ref_stack(arrays, dim)
          check(qlua.stack(tensors, dim), dtype, shape, T.unflatten(want, shape),
            dtype .. " " .. layout .. " dim " .. dim)
        end
      end
    end
  end)

  test("0-d pieces, empty pieces, promotion, dim 1 by default", function()
    check(qlua.stack({ qlua.tensor(1), qlua.tensor(2), qlua.tensor(3) }), "int64", { 3 }, { 1, 2, 3 })
    T.assert_shape(qlua.stack({ qlua.zeros(0), qlua.zeros(0) }), { 2, 0 })
    T.assert_shape(qlua.stack({ qlua.zeros(2, 0), qlua.zeros(2, 0) }, 3), { 2, 0, 2 })
    check(qlua.stack({ qlua.tensor({ 1, 2 }, { dtype = "int32" }), qlua.tensor({ 3.5, 4 }) }),
      "float64", { 2, 2 }, { { 1, 2 }, { 3.5, 4 } })
  end)

  test("errors name stack, the list positions and the shapes", function()
    local a = qlua.zeros(2, 3)
    T.assert_error(function() qlua.stack({ a, a, qlua.zeros(3, 2) }) end, "stack", "3x2",
      "list position 3", "2x3", "list position 1")
    T.assert_error(function() qlua.stack({ a }, 4) end, "stack", "dim 4 out of range (1..3)")
    T.assert_error(function() qlua.stack({ a }, -1) end, "stack", "dim -1")
    T.assert_error(function() qlua.stack({}) end, "stack", "non-empty")
    T.assert_error(function() qlua.stack({ a, "x" }) end, "stack", "list element 2", "string")
  end)
end)

------------------------------------------------------------------------ GPU parity

describe("creation and joining on the GPU", function()
  local GPU = "gpu:0"

  -- The GPU result equals the CPU one exactly (same dtype, shape, values).
  local function same(g, c, what)
    assert.equal(GPU, g:device(), what .. ": device")
    assert.equal(c:dtype(), g:dtype(), what .. ": dtype")
    T.assert_shape(g, c:shape(), what)
    T.assert_equal(g:cpu(), c, what)
  end

  gtest("*_like keep the device, or move by opts", function()
    for _, dtype in ipairs(T.dtypes) do
      local c = T.make(T.random_table({ 3, 4 }, dtype), dtype, "transposed")
      local g = c:gpu()
      same(qlua.zeros_like(g), qlua.zeros_like(c), dtype .. " zeros_like")
      same(qlua.ones_like(g), qlua.ones_like(c), dtype .. " ones_like")
      same(qlua.full_like(g, 5), qlua.full_like(c, 5), dtype .. " full_like")
      assert.equal(GPU, qlua.empty_like(g):device())
      assert.equal(GPU, qlua.zeros_like(c, { device = "gpu" }):device())
      assert.equal("cpu", qlua.ones_like(g, { device = "cpu" }):device())
    end
    for _, dtype in ipairs(T.float_dtypes) do
      local c = qlua.zeros(5, 7, { dtype = dtype })
      local g = c:gpu()
      qlua.seed(21)
      local rc = qlua.rand_like(c)
      qlua.seed(21)
      same(qlua.rand_like(g), rc, dtype .. " rand_like")
      qlua.seed(22)
      local nc = qlua.randn_like(c)
      qlua.seed(22)
      local ng = qlua.randn_like(g)
      assert.equal(GPU, ng:device())
      T.assert_close(ng:cpu(), nc, 1e-6)
    end
  end)

  gtest("arange, linspace, logspace, eye in every dtype", function()
    for _, dtype in ipairs(T.dtypes) do
      local o = { dtype = dtype, device = "gpu" }
      local oc = { dtype = dtype }
      same(qlua.arange(3, 40, 3, o), qlua.arange(3, 40, 3, oc), dtype .. " arange")
      same(qlua.arange(0, 0, 1, o), qlua.arange(0, 0, 1, oc), dtype .. " empty arange")
      same(qlua.linspace(-2, 9, 17, o), qlua.linspace(-2, 9, 17, oc), dtype .. " linspace")
      same(qlua.logspace(0, 3, 4, 2, o), qlua.logspace(0, 3, 4, 2, oc), dtype .. " logspace")
      same(qlua.eye(5, 7, o), qlua.eye(5, 7, oc), dtype .. " eye")
      same(qlua.eye(7, 5, o), qlua.eye(7, 5, oc), dtype .. " eye 7x5")
    end
    for _, dtype in ipairs(T.float_dtypes) do
      same(qlua.arange(0, 1, 0.1, { dtype = dtype, device = "gpu" }),
        qlua.arange(0, 1, 0.1, { dtype = dtype }), dtype .. " float arange")
    end
    T.poison_pool("gpu", 300 * 300 * 8)
    same(qlua.eye(300, { dtype = "float64", device = "gpu" }), qlua.eye(300, { dtype = "float64" }),
      "large eye")
  end)

  gtest("randperm gives the CPU's permutation for the same seed", function()
    for _, n in ipairs({ 1, 2, 17, 1000, 100000 }) do
      qlua.seed(2024)
      local c = qlua.randperm(n)
      qlua.seed(2024)
      local g = qlua.randperm(n, { device = "gpu" })
      same(g, c, "randperm(" .. n .. ")")
    end
    qlua.seed(7)
    same(qlua.randperm(64, { device = "gpu" }), qlua.tensor(ref_randperm(7, 0, 64)), "reference")
    -- and the generator moves on the same on both
    qlua.seed(8)
    qlua.randperm(30, { device = "gpu" })
    local g = qlua.rand(4, { device = "gpu" })
    qlua.seed(8)
    qlua.randperm(30)
    same(g, qlua.rand(4), "rand after randperm")
  end)

  gtest("cat and stack on the GPU: every dtype, layouts, promotion, empties", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        for dim = 1, 3 do
          local shapes = { { 2, 3, 4 }, { 2, 3, 4 } }
          shapes[2][dim] = 1
          local arrays = {}
          for i, shape in ipairs(shapes) do
            arrays[i] = T.unflatten(T.random_list(T.numel(shape), dtype), shape)
          end
          local c = {}
          local g = {}
          for i = 1, 2 do
            c[i] = T.make(arrays[i], dtype, layout, "cpu", shapes[i])
            g[i] = T.make(arrays[i], dtype, layout, "gpu", shapes[i])
          end
          T.poison_pool("gpu", 4 * 2 * 3 * 4 * 8)
          same(qlua.cat(g, dim), qlua.cat(c, dim), dtype .. " " .. layout .. " cat dim " .. dim)
          local sc = { c[1], c[1] }
          local sg = { g[1], g[1] }
          same(qlua.stack(sg, dim), qlua.stack(sc, dim), dtype .. " " .. layout .. " stack dim " .. dim)
        end
      end
    end
    local c = { qlua.tensor({ { 1, 2 } }, { dtype = "int32" }), qlua.tensor({ { 0.5, 1.5 } }), qlua.tensor({}) }
    local g = { c[1]:gpu(), c[2]:gpu(), c[3]:gpu() }
    same(qlua.cat(g), qlua.cat(c), "promotion and a skipped empty")
    same(qlua.cat({ qlua.zeros(0, 3, { device = "gpu" }), qlua.zeros(0, 3, { device = "gpu" }) }),
      qlua.cat({ qlua.zeros(0, 3), qlua.zeros(0, 3) }), "empty")
    local big = qlua.rand(1000, 300, { device = "gpu" })
    local big2 = qlua.rand(1000, 200, { device = "gpu" })
    same(qlua.cat({ big, big2 }, 2), qlua.cat({ big:cpu(), big2:cpu() }, 2), "large cat dim 2")
  end)
end)
