-- Creating tensors (docs/API.md "Creating tensors"): qlua.tensor with dtype inference,
-- empty / zeros / ones / full / range, and the random functions with qlua.seed.
local T, qlua, test = require("qlua.testing").spec(_ENV)

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
