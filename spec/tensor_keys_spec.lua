-- Tensor keys (issue 12, docs/API.md "Element access"): t[mask] reads as masked_select and
-- writes as masked_fill_; t[positions] (int32/int64) reads as index_select along dim 1,
-- shaped like PyTorch's t[positions], and writes as index_fill_ / index_copy_. Each case
-- is checked against a plain-Lua reference on the CPU and, as a parity case, on the GPU.
local T, qlua, _, _, both = require("qlua.testing").spec(_ENV)

-- Row-major flat values of a nested table.
local flat = T.flatten

describe("t[mask]", function()
  both("reads the elements where the mask is true, in row-major order, on views and every dtype", function(dev)
    for _, dtype in ipairs(T.all_dtypes) do
      for _, layout in ipairs(T.layouts) do
        local a = T.random_table({ 3, 4 }, dtype)
        local m = T.random_table({ 3, 4 }, "bool")
        local t = T.make(a, dtype, layout, dev)
        local mask = T.make(m, "bool", T.layouts[math.random(1, 4)], dev)
        local want = {}
        local fa, fm = flat(a), flat(m)
        for i = 1, #fa do if fm[i] then want[#want + 1] = fa[i] end end
        local r = t[mask]
        assert.equal(dtype, r:dtype())
        T.assert_shape(r, { #want }, dtype .. " " .. layout)
        if #want > 0 then T.assert_equal(r, want, dtype .. " " .. layout) end
      end
    end
  end)

  both("a mask broadcasts against t; an all-false mask gives shape {0}", function(dev)
    local t = qlua.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { device = dev })
    T.assert_equal(t[qlua.tensor({ true, false, true }, { device = dev })], { 1, 3, 4, 6 })
    T.assert_shape(t[t:gt(100)], { 0 })
    T.assert_equal(t[t:gt(2)], { 3, 4, 5, 6 })
  end)

  both("writes a number, a boolean or a 0-d tensor where the mask is true", function(dev)
    for _, dtype in ipairs(T.all_dtypes) do
      local a = T.random_table({ 4, 3 }, dtype)
      local m = T.random_table({ 4, 3 }, "bool")
      local t = T.make(a, dtype, "transposed", dev)
      local v = dtype == "bool" and true or 7
      t[T.make(m, "bool", "contiguous", dev)] = v
      local want = T.ref.map2(a, m, function(x, k) if k then return T.as_dtype(v, dtype) end return x end)
      T.assert_equal(t, want, dtype)
    end
    local t = qlua.tensor({ 1.5, -2, 3 }, { device = dev })
    t[t:lt(0)] = qlua.tensor(9, { device = dev })
    T.assert_equal(t, { 1.5, 9, 3 })
    t[t:gt(2)] = true
    T.assert_equal(t, { 1.5, 1, 1 })
  end)

  both("bad writes name the op and the values", function(dev)
    local t = qlua.zeros(3, { dtype = "int32", device = dev })
    local m = qlua.tensor({ true, false, true }, { device = dev })
    T.assert_error(function() t[m] = 2.5 end, "index", "cannot store")
    T.assert_error(function() t[m] = qlua.ones(2, { device = dev }) end, "index",
      "takes a number or a 0-d tensor, got a 1-d tensor")
    T.assert_error(function() t[m] = "x" end, "index", "cannot assign a string")
    T.assert_error(function() local _ = t[qlua.tensor({ true, false }, { device = dev })] end,
      "index")
    T.assert_equal(t, { 0, 0, 0 }, "failed writes change nothing")
  end)
end)

describe("t[positions]", function()
  both("reads rows along dim 1 with PyTorch's shape: the key's, then t's other dims", function(dev)
    for _, dtype in ipairs(T.all_dtypes) do
      local a = T.random_table({ 4, 3 }, dtype)
      local t = T.make(a, dtype, "stepped", dev)
      for _, kd in ipairs({ "int32", "int64" }) do
        local r = t[qlua.tensor({ 4, 1, 4 }, { dtype = kd, device = dev })]
        assert.equal(dtype, r:dtype())
        T.assert_equal(r, { a[4], a[1], a[4] }, dtype .. " by " .. kd)
        local r2 = t[qlua.tensor({ { 2 }, { 3 } }, { dtype = kd, device = dev })]
        T.assert_shape(r2, { 2, 1, 3 })
        T.assert_equal(r2, { { a[2] }, { a[3] } })
      end
      local r0 = t[qlua.tensor(2, { device = dev })]
      T.assert_shape(r0, { 3 })
      T.assert_equal(r0, a[2])
    end
    local v = qlua.tensor({ 10, 20, 30 }, { device = dev })
    T.assert_equal(v[qlua.tensor({ 3, 3, 1 }, { device = dev })], { 30, 30, 10 })
    T.assert_shape(v[qlua.tensor({}, { dtype = "int64", device = dev })], { 0 })
  end)

  both("writes a number into the rows (index_fill_) or a broadcast tensor (index_copy_)", function(dev)
    local t = qlua.zeros(3, 2, { dtype = "int64", device = dev })
    t[qlua.tensor({ 3, 1 }, { device = dev })] = 4
    T.assert_equal(t, { { 4, 4 }, { 0, 0 }, { 4, 4 } })
    t[qlua.tensor({ 2 }, { device = dev })] = qlua.tensor({ { 5, 6 } }, { device = dev })
    T.assert_equal(t, { { 4, 4 }, { 5, 6 }, { 4, 4 } })
    t[qlua.tensor({ 1, 3 }, { device = dev })] = qlua.tensor({ 7, 8 }, { device = dev })  -- broadcast
    T.assert_equal(t, { { 7, 8 }, { 5, 6 }, { 7, 8 } })
    local f = qlua.zeros(4, { device = dev })
    f[qlua.tensor({ 4, 2 }, { dtype = "int32", device = dev })] = qlua.tensor({ 1.5, 2.5 }, { device = dev })
    T.assert_equal(f, { 0, 2.5, 0, 1.5 })
  end)

  both("bad keys and values name the op and the values", function(dev)
    local t = qlua.zeros(3, { device = dev })
    T.assert_error(function() local _ = t[qlua.zeros(2, { device = dev })] end, "index",
      "a float32 tensor key is not supported")
    T.assert_error(function() local _ = t[qlua.tensor({ 4 }, { device = dev })]:totable() end,
      "index", "4 out of range")
    T.assert_error(function() t[qlua.tensor({ 1 }, { device = dev })] = 2 ^ 0.5 * qlua.ones(2, { device = dev }) end,
      "index")
    T.assert_error(function() local _ = qlua.tensor(5, { device = dev })[qlua.tensor({ 1 }, { device = dev })] end,
      "index", "0-d")
  end)
end)
