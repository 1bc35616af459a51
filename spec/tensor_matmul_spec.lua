-- Matrix products (docs/API.md "Matrix products"): 1-D.1-D, 2-D@1-D, 1-D@2-D, 2-D@2-D,
-- batched with broadcast batch dims; float32 and float64; any strides; the errors.
local T, qlua, test = require("qlua.testing").spec(_ENV)
local ref = T.ref

local TOL = { float32 = 1e-5, float64 = 1e-12 }

-- a:matmul(b) and qlua.matmul(a, b) for the given shapes, dtype and layouts.
local function check(sa, sb, dtype, la, lb)
  local a = T.random_table(sa, dtype)
  local b = T.random_table(sb, dtype)
  local ta, tb = T.make(a, dtype, la), T.make(b, dtype, lb)
  local want = ref.matmul(a, b)
  local what = string.format("matmul %s %s (%s) @ %s (%s)", dtype, T.shape_str(sa), la, T.shape_str(sb), lb)
  local r = ta:matmul(tb)
  assert.equal(dtype, r:dtype(), what)
  T.assert_close(r, want, TOL[dtype], what)
  T.assert_close(qlua.matmul(ta, tb), want, TOL[dtype], what .. " (qlua.matmul)")
  T.assert_equal(ta, a, what .. ": a changed")
  T.assert_equal(tb, b, what .. ": b changed")
  return r
end

describe("matmul", function()
  test("1-D . 1-D gives a 0-d tensor", function()
    for _, dtype in ipairs(T.float_dtypes) do
      for _, layout in ipairs(T.layouts) do
        local r = check({ 17 }, { 17 }, dtype, layout, T.layouts[math.random(1, 4)])
        assert.equal(0, r:dim())
      end
    end
  end)

  test("2-D @ 1-D and 1-D @ 2-D", function()
    for _, dtype in ipairs(T.float_dtypes) do
      for _, layout in ipairs(T.layouts) do
        T.assert_shape(check({ 7, 5 }, { 5 }, dtype, layout, "stepped"), { 7 })
        T.assert_shape(check({ 5 }, { 5, 9 }, dtype, "narrowed", layout), { 9 })
      end
    end
  end)

  test("2-D @ 2-D on every pair of layouts", function()
    for _, dtype in ipairs(T.float_dtypes) do
      for _, la in ipairs(T.layouts) do
        for _, lb in ipairs(T.layouts) do
          T.assert_shape(check({ 6, 11 }, { 11, 4 }, dtype, la, lb), { 6, 4 })
        end
      end
    end
  end)

  test("odd and degenerate sizes", function()
    for _, dtype in ipairs(T.float_dtypes) do
      check({ 1, 1 }, { 1, 1 }, dtype, "contiguous", "contiguous")
      check({ 1, 9 }, { 9, 1 }, dtype, "transposed", "transposed")
      check({ 13, 1 }, { 1, 7 }, dtype, "narrowed", "stepped")
      check({ 33, 65 }, { 65, 17 }, dtype, "contiguous", "transposed")
    end
  end)

  test("with an empty inner dim gives zeros, with an empty outer dim an empty result", function()
    local z = qlua.zeros(3, 0):matmul(qlua.zeros(0, 4))
    T.assert_shape(z, { 3, 4 })
    T.assert_equal(z, ref.expand({ 0 }, { 3, 4 }))
    T.assert_shape(qlua.zeros(0, 5):matmul(qlua.zeros(5, 2)), { 0, 2 })
  end)

  test("batched 3-D with equal batch dims", function()
    for _, dtype in ipairs(T.float_dtypes) do
      for _, layout in ipairs(T.layouts) do
        T.assert_shape(check({ 3, 4, 5 }, { 3, 5, 6 }, dtype, layout, T.layouts[math.random(1, 4)]), { 3, 4, 6 })
      end
    end
  end)

  test("batched with broadcast batch dims", function()
    for _, dtype in ipairs(T.float_dtypes) do
      T.assert_shape(check({ 1, 4, 5 }, { 3, 5, 2 }, dtype, "contiguous", "transposed"), { 3, 4, 2 })
      T.assert_shape(check({ 3, 4, 5 }, { 1, 5, 2 }, dtype, "stepped", "contiguous"), { 3, 4, 2 })
      T.assert_shape(check({ 3, 4, 5 }, { 5, 2 }, dtype, "narrowed", "contiguous"), { 3, 4, 2 })
      T.assert_shape(check({ 4, 5 }, { 3, 5, 2 }, dtype, "transposed", "narrowed"), { 3, 4, 2 })
      T.assert_shape(check({ 2, 1, 3, 4 }, { 3, 4, 5 }, dtype, "contiguous", "stepped"), { 2, 3, 3, 5 })
      T.assert_shape(check({ 2, 3, 3, 4 }, { 2, 3, 4, 2 }, dtype, "transposed", "transposed"), { 2, 3, 3, 2 })
    end
  end)

  test("an expanded (stride 0) batch operand", function()
    local b = T.random_table({ 1, 5, 3 }, "float64")
    local tb = T.make(b, "float64"):expand(4, 5, 3)
    local a = T.random_table({ 4, 2, 5 }, "float64")
    local want = ref.matmul(a, ref.expand(b, { 4, 5, 3 }))
    T.assert_close(T.make(a, "float64", "transposed"):matmul(tb), want, 1e-12)
  end)

  test("a larger float32 product through BLAS", function()
    local a = T.random_table({ 64, 96 }, "float32")
    local b = T.random_table({ 96, 48 }, "float32")
    T.assert_close(T.make(a, "float32", "transposed"):matmul(T.make(b, "float32")), ref.matmul(a, b), 1e-5)
  end)

  test("mismatched shapes name both shapes", function()
    T.assert_error(function() local _ = qlua.zeros(2, 3):matmul(qlua.zeros(4, 5)) end,
      "matmul: shapes 2x3 and 4x5 do not match")
    T.assert_error(function() local _ = qlua.matmul(qlua.zeros(2, 3), qlua.zeros(4, 5)) end,
      "matmul: shapes 2x3 and 4x5 do not match")
    T.assert_error(function() local _ = qlua.zeros(3):matmul(qlua.zeros(4)) end, "matmul", "3", "4")
    T.assert_error(function() local _ = qlua.zeros(2, 3):matmul(qlua.zeros(4)) end, "matmul", "2x3", "4")
    T.assert_error(function() local _ = qlua.zeros(5):matmul(qlua.zeros(4, 2)) end, "matmul", "5", "4x2")
    -- batch dims that do not broadcast
    T.assert_error(function() local _ = qlua.zeros(2, 3, 4):matmul(qlua.zeros(3, 4, 5)) end,
      "matmul", "2x3x4", "3x4x5")
    -- inner sizes in a batch
    T.assert_error(function() local _ = qlua.zeros(2, 3, 4):matmul(qlua.zeros(2, 5, 5)) end,
      "matmul", "2x3x4", "2x5x5")
  end)

  test("refuses integer dtypes, mixed dtypes and 0-d operands", function()
    T.assert_error(function() local _ = qlua.ones(2, 2, { dtype = "int64" }):matmul(qlua.ones(2, 2, { dtype = "int64" })) end,
      "matmul", "int64")
    T.assert_error(function() local _ = qlua.ones(2, 2, { dtype = "int32" }):matmul(qlua.ones(2, 2, { dtype = "int32" })) end,
      "matmul", "int32")
    T.assert_error(function() local _ = qlua.ones(2, 2):matmul(qlua.ones(2, 2, { dtype = "float64" })) end, "matmul")
    T.assert_error(function() local _ = qlua.tensor(2.0):matmul(qlua.ones(2)) end, "matmul")
    T.assert_error(function() local _ = qlua.ones(2):matmul(3) end, "matmul")
  end)
end)
