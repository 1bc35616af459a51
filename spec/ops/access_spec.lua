-- Element access (docs/API.md "Element access"): t[i] and t[i] = v; tensor keys: t[mask]
-- reads as masked_select and writes as masked_fill_; t[positions] (int32/int64) reads as
-- index_select along dim 1, shaped like PyTorch's t[positions], and writes as index_fill_ /
-- index_copy_. The tensor-key cases are checked against a plain-Lua reference on the CPU
-- and, as parity cases, on the GPU.
local T, qlua, test, _, both = require("qlua.testing").spec(_ENV)

-- =================================================================== t[i] and t[i] = v

describe("t[i]", function()
  test("reads element i of a 1-D tensor in every dtype and layout", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        local data = T.random_table({ 9 }, dtype)
        local t = T.make(data, dtype, layout)
        for i = 1, 9 do
          local v = t[i]
          assert.equal(data[i], v)
          assert.equal(T.is_float_dtype(dtype) and "float" or "integer", math.type(v))
        end
      end
    end
  end)

  test("gives the view of row i of an N-D tensor", function()
    for _, layout in ipairs(T.layouts) do
      local data = T.random_table({ 4, 3, 2 }, "float64")
      local t = T.make(data, "float64", layout)
      for i = 1, 4 do
        local row = t[i]
        assert.is_true(qlua.is_tensor(row))
        T.assert_shape(row, { 3, 2 })
        T.assert_equal(row, data[i])
        T.assert_equal(t[i][2], data[i][2])
        assert.equal(data[i][3][2], t[i][3][2])
      end
    end
  end)

  test("row views share storage with the tensor", function()
    local t = qlua.zeros(3, 4)
    local row = t[2]
    row:fill_(5)
    T.assert_equal(t, { { 0, 0, 0, 0 }, { 5, 5, 5, 5 }, { 0, 0, 0, 0 } })
    t[3][4] = 9
    assert.equal(9, t:totable()[3][4])
  end)

  test("refuses positions out of 1..#t + 1 and non-integers", function()
    local t = qlua.tensor({ 1, 2, 3 })
    local m = qlua.zeros(2, 3)
    for _, i in ipairs({ 0, 5, -1, 1.5, 100 }) do
      assert.has_error(function() local _ = t[i] end, nil, "t[" .. i .. "]")
    end
    assert.has_error(function() local _ = m[4] end)
    assert.has_error(function() local _ = m[0] end)
    assert.has_error(function() local _ = qlua.tensor(5)[1] end)
    local msg = T.error_of(function() local _ = t[5] end)
    assert.is_truthy(msg:find("5", 1, true), msg)
    -- writing one past the end is still an error (reading it is nil, for ipairs)
    T.assert_error(function() t[4] = 1 end, "index", "4 out of range (1..3)")
  end)

  test("t[#t + 1] reads nil, so ipairs walks a tensor: elements of a 1-D one, rows of others", function()
    for _, dev in ipairs(T.devices()) do
      local t = qlua.tensor({ 5, 6, 7 }, { device = dev })
      assert.is_nil(t[4])
      local seen = {}
      for i, v in ipairs(t) do seen[i] = v end
      assert.same({ 5, 6, 7 }, seen)
      local m = qlua.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } }, { device = dev })
      assert.is_nil(m[4])
      local rows = 0
      for i, row in ipairs(m) do
        rows = rows + 1
        T.assert_equal(row, { 2 * i - 1, 2 * i })
      end
      assert.equal(3, rows)
      local b = qlua.tensor({ true, false }, { device = dev })
      local flags = {}
      for i, v in ipairs(b) do flags[i] = v end
      assert.same({ true, false }, flags)
      for _ in ipairs(qlua.zeros(0, { device = dev })) do error("an empty tensor has no elements") end
    end
  end)

  test("string keys find methods; other keys are nil", function()
    local t = qlua.zeros(3)
    assert.is_function(t.shape)
    assert.is_function(t.gather)
    assert.is_nil(t.no_such_method)
    assert.is_nil(t[true])
  end)

  test("t[{}] is a view of the whole tensor, as in Torch7", function()
    local t = qlua.tensor({ { 1, 2 }, { 3, 4 } })
    local v = t[{}]
    assert.is_true(qlua.is_tensor(v))
    T.assert_equal(v, { { 1, 2 }, { 3, 4 } })
    v[1][1] = 9
    assert.equal(9, t:totable()[1][1], "the view shares t's storage")
    t[{}] = 0
    T.assert_equal(t, { { 0, 0 }, { 0, 0 } })
  end)
end)

describe("t[i] = v", function()
  test("sets element i of a 1-D tensor in every dtype and layout", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        local data = T.random_table({ 7 }, dtype)
        local t = T.make(data, dtype, layout)
        local want = T.copy_list(data)
        for _ = 1, 4 do
          local i, v = math.random(1, 7), T.random_value(dtype)
          t[i] = v
          want[i] = v
        end
        T.assert_equal(t, want, dtype .. " " .. layout)
      end
    end
  end)

  test("writes through a view into its base", function()
    local base = qlua.zeros(3, 4, { dtype = "int64" })
    local col = base:select(2, 3)
    col[2] = 7
    T.assert_equal(base, { { 0, 0, 0, 0 }, { 0, 0, 7, 0 }, { 0, 0, 0, 0 } })
  end)

  test("fills row i of an N-D tensor with a number", function()
    for _, layout in ipairs(T.layouts) do
      local data = T.random_table({ 3, 4 }, "float32")
      local t = T.make(data, "float32", layout)
      t[2] = 0.25
      data[2] = { 0.25, 0.25, 0.25, 0.25 }
      T.assert_equal(t, data, layout)
    end
  end)

  test("copies a tensor into row i, broadcasting it", function()
    local t = qlua.zeros(3, 2, 4, { dtype = "float64" })
    local row = T.random_table({ 2, 4 }, "float64")
    t[3] = qlua.tensor(row, { dtype = "float64" })
    local want = T.ref.map(qlua.zeros(3, 2, 4):totable(), function(v) return v end)
    want[3] = row
    T.assert_equal(t, want)
    local line = T.random_table({ 4 }, "float64")
    t[1] = qlua.tensor(line, { dtype = "float64" })   -- (4) broadcast to (2, 4)
    want[1] = { line, line }
    T.assert_equal(t, want)
    -- across dtypes: an int64 row into a float64 tensor
    t[2] = qlua.tensor({ { 1, 2, 3, 4 }, { 5, 6, 7, 8 } })
    want[2] = { { 1, 2, 3, 4 }, { 5, 6, 7, 8 } }
    T.assert_equal(t, want)
  end)

  test("refuses positions out of range", function()
    local t = qlua.zeros(3)
    assert.has_error(function() t[0] = 1 end)
    assert.has_error(function() t[4] = 1 end)
    assert.has_error(function() t[-1] = 1 end)
    assert.has_error(function() t[1.5] = 1 end)
    local m = qlua.zeros(2, 2)
    assert.has_error(function() m[3] = 1 end)
    T.assert_equal(t, { 0, 0, 0 })
  end)

  test("refuses a row tensor that does not broadcast", function()
    local m = qlua.zeros(2, 3)
    assert.has_error(function() m[1] = qlua.zeros(4) end)
    T.assert_equal(m, { { 0, 0, 0 }, { 0, 0, 0 } })
  end)
end)

-- ============================================================ t[mask] and t[positions]

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
