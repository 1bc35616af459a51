-- Moving and converting (docs/API.md "Moving and converting"): to(dtype), to(device),
-- cpu(), and copy_ across dtypes with broadcasting. GPU moves are in parity_spec.lua.
local T, qlua, test = require("qlua.testing").spec(_ENV)

-- What converting the number v to dtype gives: float -> int truncates toward zero.
local function convert(v, dtype)
  if T.is_float_dtype(dtype) then return T.as_dtype(v, dtype) end
  if math.type(v) == "float" then
    local i = v >= 0 and math.floor(v) or math.ceil(v)
    return math.tointeger(i)
  end
  return v
end

describe("to(dtype)", function()
  test("converts between every pair of dtypes, on every layout", function()
    for _, from in ipairs(T.dtypes) do
      for _, to in ipairs(T.dtypes) do
        for _, layout in ipairs(T.layouts) do
          -- floats in (-100, 100) so every value fits every dtype
          local opts = T.is_float_dtype(from) and { lo = -100, hi = 100 } or { lo = -1000, hi = 1000 }
          local data = T.random_table({ 3, 5 }, from, opts)
          local src = T.make(data, from, layout)
          local dst = src:to(to)
          assert.equal(to, dst:dtype())
          T.assert_shape(dst, { 3, 5 })
          T.assert_equal(dst, T.ref.map(data, function(v) return convert(v, to) end),
            from .. " -> " .. to .. " (" .. layout .. ")")
          T.assert_equal(src, data, "source unchanged")
        end
      end
    end
  end)

  test("float -> int truncates toward zero", function()
    local f = qlua.tensor({ 2.7, -2.7, 0.5, -0.5, 3.0, -3.0, 1e9 }, { dtype = "float64" })
    T.assert_equal(f:to("int64"), { 2, -2, 0, 0, 3, -3, 1000000000 })
    T.assert_equal(f:to("int32"), { 2, -2, 0, 0, 3, -3, 1000000000 })
    T.assert_equal(qlua.tensor({ 1.99, -1.99 }):to("int32"), { 1, -1 })
  end)

  test("float64 -> float32 rounds to nearest", function()
    local vals = { 0.1, 1 / 3, math.pi, 1e-3, 123456.789 }
    local t = qlua.tensor(vals, { dtype = "float64" }):to("float32")
    T.assert_equal(t, T.ref.map(vals, T.f32))
  end)

  test("int64 -> float64 is exact up to 2^53", function()
    local t = qlua.tensor({ 1 << 53, -(1 << 52), 123456789012 })
    local v = t:to("float64"):totable()
    assert.equal(2.0 ^ 53, v[1])
    assert.equal(-(2.0 ^ 52), v[2])
    assert.equal(123456789012.0, v[3])
  end)

  test("a tensor already of that dtype or on that device is returned as is", function()
    for _, dtype in ipairs(T.dtypes) do
      local t = qlua.zeros(3, { dtype = dtype })
      assert.is_true(rawequal(t, t:to(dtype)))
    end
    local t = qlua.zeros(3)
    assert.is_true(rawequal(t, t:to("cpu")))
    assert.is_true(rawequal(t, t:cpu()))
  end)

  test("converting makes a copy", function()
    local t = qlua.zeros(3)
    local d = t:to("float64")
    d:fill_(1)
    T.assert_equal(t, { 0, 0, 0 })
  end)

  test("unknown names are errors naming them", function()
    local t = qlua.zeros(3)
    T.assert_error(function() local _ = t:to("float8") end, "float8")
    T.assert_error(function() local _ = t:to("tpu") end, "tpu")
    T.assert_error(function() local _ = t:to(5) end, "to")
  end)
end)

describe("copy_", function()
  test("copies same-shape tensors across dtypes and layouts, returning self", function()
    for _, sdt in ipairs(T.dtypes) do
      for _, ddt in ipairs(T.dtypes) do
        local data = T.random_table({ 4, 3 }, sdt, T.is_float_dtype(sdt) and { lo = -50, hi = 50 } or nil)
        local src = T.make(data, sdt, T.layouts[math.random(1, 4)])
        local dst = T.poison(T.make(T.random_table({ 4, 3 }, ddt), ddt, T.layouts[math.random(1, 4)]))
        local r = dst:copy_(src)
        assert.is_true(rawequal(r, dst))
        assert.equal(ddt, dst:dtype())
        T.assert_equal(dst, T.ref.map(data, function(v) return convert(v, ddt) end), sdt .. " -> " .. ddt)
      end
    end
  end)

  test("broadcasts the source", function()
    for _, dtype in ipairs(T.dtypes) do
      local row = T.random_table({ 5 }, dtype)
      local dst = T.poison(qlua.empty(3, 5, { dtype = dtype }))
      dst:copy_(qlua.tensor(row, { dtype = dtype }))
      T.assert_equal(dst, { row, row, row })
      local col = T.random_table({ 3, 1 }, dtype)
      dst:copy_(qlua.tensor(col, { dtype = dtype }))
      T.assert_equal(dst, T.ref.expand(col, { 3, 5 }))
      dst:copy_(qlua.tensor(7, { dtype = dtype }))   -- a 0-d source
      T.assert_equal(dst, T.ref.expand({ 7 }, { 3, 5 }))
    end
  end)

  test("writes only the view it is given", function()
    for _, layout in ipairs(T.noncontiguous_layouts) do
      local base = qlua.zeros(6, 8, { dtype = "float64" })
      local view
      if layout == "transposed" then view = base:narrow(1, 2, 4):narrow(2, 3, 5):t()
      elseif layout == "narrowed" then view = base:narrow(1, 2, 5):narrow(2, 3, 4)
      else view = base:view(3, 2, 4, 2):select(4, 1):select(2, 2) end
      local data = T.random_table(view:shape(), "float64")
      view:copy_(qlua.tensor(data, { dtype = "float64" }))
      T.assert_equal(view, data, layout)
      -- everything outside the view is still 0
      local nonzero = 0
      for _, v in ipairs(T.flatten(base:totable())) do if v ~= 0 then nonzero = nonzero + 1 end end
      assert.equal(T.numel(view:shape()), nonzero, layout)
    end
  end)

  test("copies between overlapping-free views of one storage", function()
    local t = qlua.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    t[1]:copy_(t[2])
    T.assert_equal(t, { { 4, 5, 6 }, { 4, 5, 6 } })
  end)

  test("refuses sources that do not broadcast", function()
    local dst = qlua.zeros(3, 4)
    T.assert_error(function() dst:copy_(qlua.zeros(4, 3)) end, "copy_")
    T.assert_error(function() dst:copy_(qlua.zeros(3)) end, "copy_")
    T.assert_equal(dst, { { 0, 0, 0, 0 }, { 0, 0, 0, 0 }, { 0, 0, 0, 0 } })
  end)

  test("copies empty tensors", function()
    local dst = qlua.zeros(0, 3)
    dst:copy_(qlua.ones(0, 3))
    T.assert_shape(dst, { 0, 3 })
  end)
end)
