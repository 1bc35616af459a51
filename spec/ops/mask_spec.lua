-- Masks (docs/API.md "Masks"): qlua.where, masked_fill_ / masked_fill,
-- masked_select, nonzero, any, all and count_nonzero, against plain-Lua references, on
-- every dtype (bool and uint8 included), on views (transposed, narrowed, stepped, expanded),
-- with broadcasting, masks of every dtype read through nonzero (NaN true, -0.0 false), empty
-- and 0-d tensors, and bad arguments with their messages. GPU parity cases (the GPU's answer
-- against the CPU's, exactly: these ops move values, they never compute new ones) are
-- pending without a GPU.
local T, qlua, test, gtest = require("qlua.testing").spec(_ENV)

local DTYPES = T.all_dtypes

------------------------------------------------------------------------ references

-- Whether a Lua element (a boolean for bool tensors) is nonzero: NaN is, -0.0 is not.
local function truth(v)
  if type(v) == "boolean" then return v end
  return v ~= 0
end

-- One random value of dtype, zero (false) with probability pzero.
local function rvalue(dtype, pzero)
  if math.random() < (pzero or 0.4) then
    if dtype == "bool" then return false end
    return 0
  end
  if dtype == "bool" then return true end
  if dtype == "uint8" then return math.random(1, 255) end
  return T.random_value(dtype)
end

local function rtable(shape, dtype, pzero)
  local flat = {}
  for i = 1, T.numel(shape) do flat[i] = rvalue(dtype, pzero) end
  return T.unflatten(flat, shape), flat
end

-- x (shape xs) broadcast to shape: a flat row-major list.
local function expand_flat(x, xs, shape)
  local flat, out, n = (T.flatten(x)), {}, #shape
  T.each_index(shape, function(pos, k)
    local at, acc = 0, 1
    for d = #xs, 1, -1 do
      local p = xs[d] == 1 and 1 or pos[n - #xs + d]
      at = at + (p - 1) * acc
      acc = acc * xs[d]
    end
    out[k] = flat[at + 1]
  end)
  if #shape == 0 then out[1] = flat[1] end
  return out
end

local function broadcast(...)
  local shape = {}
  for _, s in ipairs({ ... }) do shape = assert(T.ref.broadcast_shapes(shape, s)) end
  return shape
end

-- Builds the expected nested table (or number for {}) from a flat list.
local function nest(flat, shape)
  if #shape == 0 then return flat[1] end
  return T.unflatten(flat, shape)
end

-- Checks a tensor's dtype and shape and its values exactly.
local function check(t, dtype, shape, flat, what)
  assert.is_true(qlua.is_tensor(t), what .. ": not a tensor")
  assert.are.equal(dtype, t:dtype(), what .. ": dtype")
  T.assert_shape(t, shape, what)
  if T.numel(shape) > 0 then T.assert_equal(t, nest(flat, shape), what) end
end

-- Stands in for `cond and x or y` with x possibly false.
local function pick(cond, x, y) if cond then return x end return y end

-- where's reference: a flat list of cond ? a : b, each value as the result dtype stores it.
local function ref_where(c, cs, a, as, b, bs, dtype)
  local shape = broadcast(cs, as, bs)
  local cf, af, bf = expand_flat(c, cs, shape), expand_flat(a, as, shape), expand_flat(b, bs, shape)
  local out = {}
  for i = 1, T.numel(shape) do out[i] = T.as_dtype(pick(truth(cf[i]), af[i], bf[i]), dtype) end
  return out, shape
end

local function ref_masked_select(x, xs, m, ms)
  local shape = broadcast(xs, ms)
  local xf, mf = expand_flat(x, xs, shape), expand_flat(m, ms, shape)
  local out = {}
  for i = 1, #xf do if truth(mf[i]) then out[#out + 1] = xf[i] end end
  return out
end

local function ref_nonzero(x, shape)
  local flat, rows = (T.flatten(x)), {}
  if #shape == 0 then
    if truth(flat[1]) then rows[1] = {} end
    return rows
  end
  T.each_index(shape, function(pos, k)
    if truth(flat[k]) then rows[#rows + 1] = T.copy_list(pos) end
  end)
  return rows
end

-- any / all / count_nonzero along dim (nil: everything) of x with shape.
local function ref_reduce(op, x, shape, dim)
  local flat = (T.flatten(x))
  local function fold(list)
    local n = 0
    for _, v in ipairs(list) do if truth(v) then n = n + 1 end end
    if op == "any" then return n > 0 elseif op == "all" then return n == #list end
    return n
  end
  if dim == nil then return fold(flat) end
  local oshape = {}
  for d = 1, #shape do if d ~= dim then oshape[#oshape + 1] = shape[d] end end
  local out = {}
  local function one(opos, k)
    local list, q, o = {}, {}, 1
    for d = 1, #shape do if d ~= dim then q[d] = opos[o]; o = o + 1 end end
    for i = 1, shape[dim] do q[dim] = i; list[i] = flat[T.linear(shape, q)] end
    out[k] = fold(list)
  end
  if #oshape == 0 then one({}, 1) else T.each_index(oshape, one) end
  return out, oshape
end

local function random_layout() return T.layouts[math.random(1, #T.layouts)] end

------------------------------------------------------------------------ where

describe("qlua.where", function()
  test("cond ? a : b for every pair of dtypes, promoted, broadcast across all three, on views", function()
    local cs, as, bs = { 2, 1, 4 }, { 3, 1 }, { 4 }
    for _, da in ipairs(DTYPES) do
      for _, db in ipairs(DTYPES) do
        local dc = DTYPES[math.random(1, #DTYPES)]
        local c, a, b = rtable(cs, dc), rtable(as, da), rtable(bs, db)
        local want_dtype = T.promote(da, db)
        local want, shape = ref_where(c, cs, a, as, b, bs, want_dtype)
        local what = ("where(%s, %s, %s)"):format(dc, da, db)
        local r = qlua.where(T.make(c, dc, random_layout()), T.make(a, da, random_layout()),
                             T.make(b, db, random_layout()))
        check(r, want_dtype, shape, want, what)
        assert.is_true(r:is_contiguous(), what .. ": a new contiguous tensor")
      end
    end
  end)

  test("every dtype of cond is read through nonzero: NaN is true, -0.0 false", function()
    local cf = qlua.tensor({ 1.5, 0 / 0, -0.0, 0.0, -2 }, { dtype = "float64" })
    local a, b = qlua.tensor({ 1, 2, 3, 4, 5 }), qlua.tensor({ -1, -2, -3, -4, -5 })
    check(qlua.where(cf, a, b), "int64", { 5 }, { 1, 2, -3, -4, 5 }, "float64 cond")
    check(qlua.where(cf:to("float32"), a, b), "int64", { 5 }, { 1, 2, -3, -4, 5 }, "float32 cond")
    local ci = qlua.tensor({ 0, 7, -1, 0, 256 }, { dtype = "int32" })
    check(qlua.where(ci, a, b), "int64", { 5 }, { -1, 2, 3, -4, 5 }, "int32 cond")
    check(qlua.where(ci:to("int64"), a, b), "int64", { 5 }, { -1, 2, 3, -4, 5 }, "int64 cond")
    local cu = qlua.tensor({ 0, 1, 255, 0, 3 }, { dtype = "uint8" })
    check(qlua.where(cu, a, b), "int64", { 5 }, { -1, 2, 3, -4, 5 }, "uint8 cond")
  end)

  test("a Lua number takes the tensor's dtype as in arithmetic; booleans are 0 and 1", function()
    local c = qlua.tensor({ true, false, true })
    local function run(x, y) return qlua.where(c, x, y) end
    local ti = qlua.tensor({ 1, 2, 3 }, { dtype = "int32" })
    local tf = qlua.tensor({ 0.5, 1.5, 2.5 })
    local tb = qlua.tensor({ false, true, false })
    local tu = qlua.tensor({ 1, 2, 3 }, { dtype = "uint8" })
    check(run(tf, 0), "float32", { 3 }, { 0.5, 0, 2.5 }, "float32, integer")
    check(run(2, tf), "float32", { 3 }, { 2, 1.5, 2 }, "integer, float32")
    check(run(tf, 0.25), "float32", { 3 }, { 0.5, 0.25, 2.5 }, "float32, float")
    check(run(ti, 7), "int32", { 3 }, { 1, 7, 3 }, "int32, integer")
    check(run(ti, 2.5), "float64", { 3 }, { 1, 2.5, 3 }, "int32, float")
    check(run(tu, 255), "uint8", { 3 }, { 1, 255, 3 }, "uint8, 255")
    check(run(tb, 5), "int64", { 3 }, { 0, 5, 0 }, "bool, integer")
    check(run(tb, 0.5), "float64", { 3 }, { 0, 0.5, 0 }, "bool, float")
    check(run(tb, true), "bool", { 3 }, { false, true, false }, "bool, boolean")
    check(run(true, tu), "uint8", { 3 }, { 1, 2, 1 }, "boolean, uint8")
    check(run(tf, false), "float32", { 3 }, { 0.5, 0, 2.5 }, "float32, boolean")
    check(run(ti:to("int64"), math.maxinteger), "int64", { 3 }, { 1, math.maxinteger, 3 }, "int64 max")
    -- two numbers: bool for two booleans, float32 with a float (PyTorch), else int64
    check(run(1, 0), "int64", { 3 }, { 1, 0, 1 }, "two integers")
    check(run(1.5, 0), "float32", { 3 }, { 1.5, 0, 1.5 }, "a float and an integer")
    check(run(true, false), "bool", { 3 }, { true, false, true }, "two booleans")
    check(run(true, 2), "int64", { 3 }, { 1, 2, 1 }, "a boolean and an integer")
    check(run(false, 2.5), "float32", { 3 }, { 0, 2.5, 0 }, "a boolean and a float")
  end)

  test("an integer the dtype cannot hold is an error, not a wrap", function()
    local c = qlua.tensor({ true, false })
    T.assert_error(function() qlua.where(c, qlua.ones(2, { dtype = "int32" }), 1 << 40) end,
      "where: 1099511627776 is out of range for an int32 tensor")
    T.assert_error(function() qlua.where(c, -1, qlua.ones(2, { dtype = "uint8" })) end,
      "where: -1 is out of range for a uint8 tensor")
    T.assert_error(function() qlua.where(c, 256, qlua.ones(2, { dtype = "uint8" })) end,
      "where: 256 is out of range for a uint8 tensor")
  end)

  test("empty and 0-d operands", function()
    local r = qlua.where(qlua.zeros(0, 3, { dtype = "bool" }), qlua.ones(3), 2)
    check(r, "float32", { 0, 3 }, {}, "empty cond")
    r = qlua.where(qlua.tensor(true), qlua.tensor(4), qlua.tensor(5))
    check(r, "int64", {}, { 4 }, "0-d")
    assert.are.equal(4, r:item())
    r = qlua.where(qlua.tensor(0), 1.5, qlua.tensor({ 1, 2 }, { dtype = "float64" }))
    check(r, "float64", { 2 }, { 1, 2 }, "0-d cond broadcast")
    r = qlua.where(qlua.tensor({ { true }, { false } }), qlua.tensor(7), qlua.zeros(0, { dtype = "int64" }))
    check(r, "int64", { 2, 0 }, {}, "broadcast to empty")
  end)

  test("operands sharing storage with each other and expanded views", function()
    local x = qlua.tensor({ { 1, -2 }, { -3, 4 } })
    check(qlua.where(x:gt(0), x, x:t()), "int64", { 2, 2 }, { 1, -3, -2, 4 }, "x and x:t()")
    local row = qlua.tensor({ 10, 20 })
    check(qlua.where(x:gt(0), row:expand(2, 2), x:neg()), "int64", { 2, 2 }, { 10, 2, 3, 20 },
      "expanded a")
  end)

  test("bad arguments name where and the values", function()
    local c = qlua.tensor({ true, false })
    T.assert_error(function() qlua.where(c, qlua.ones(3), 1) end,
      "where: shapes 2 and 3 cannot be broadcast")
    T.assert_error(function() qlua.where(qlua.ones(2, 3):gt(0), qlua.ones(2, 1), qlua.ones(4)) end,
      "where: shapes 2x3 and 4 cannot be broadcast")
    T.assert_error(function() qlua.where(c, "x", 1) end,
      "bad argument #2 to 'where' (qlua.Tensor, number or boolean expected, got string)")
    T.assert_error(function() qlua.where(c, 1) end,
      "bad argument #3 to 'where' (qlua.Tensor, number or boolean expected, got no value)")
    T.assert_error(function() qlua.where(true, 1, 2) end,
      "bad argument #1 to 'where' (qlua.Tensor expected, got boolean)")
    T.assert_error(function() qlua.where(c, 1, 2, 3) end,
      "where: unexpected argument #4 (number 3): where takes at most 3 arguments")
    local f = qlua.ones(2)
    f:free()
    T.assert_error(function() qlua.where(c, f, 1) end, "where: tensor has been freed")
    T.assert_error(function() qlua.where(f, 1, 2) end, "where: tensor has been freed")
  end)
end)

------------------------------------------------------------------------ masked_fill

describe("masked_fill_ and masked_fill", function()
  test("in place on every dtype and view, masks of every dtype, broadcast", function()
    local shape = { 3, 4 }
    for _, dtype in ipairs(DTYPES) do
      for _, layout in ipairs(T.layouts) do
        local ms = ({ { 3, 4 }, { 4 }, { 3, 1 }, {} })[math.random(1, 4)]
        local dm = DTYPES[math.random(1, #DTYPES)]
        local x = rtable(shape, dtype, 0.2)
        local m = rtable(ms, dm)
        local v = rvalue(dtype, 0.3)
        local mf, xf, want = expand_flat(m, ms, shape), (T.flatten(x)), {}
        for i = 1, #xf do want[i] = pick(truth(mf[i]), T.as_dtype(v, dtype), xf[i]) end
        local t = T.make(x, dtype, layout)
        local what = ("masked_fill_ %s %s, %s mask %s"):format(dtype, layout, dm, T.shape_str(ms))
        assert.is_true(rawequal(t:masked_fill_(T.make(m, dm, random_layout()), v), t), what .. " returns t")
        check(t, dtype, shape, want, what)
      end
    end
  end)

  test("masked_fill broadcasts t and mask into a new tensor; t is unchanged", function()
    for _, dtype in ipairs(DTYPES) do
      local x = rtable({ 3, 1 }, dtype, 0.2)
      local m = rtable({ 3, 4 }, "bool")
      local v = rvalue(dtype, 0.3)
      local t = T.make(x, dtype, random_layout())
      local before = t:totable()
      local r = t:masked_fill(T.make(m, "bool", random_layout()), v)
      local xf, mf, want = expand_flat(x, { 3, 1 }, { 3, 4 }), (T.flatten(m)), {}
      for i = 1, #xf do want[i] = pick(mf[i], T.as_dtype(v, dtype), xf[i]) end
      check(r, dtype, { 3, 4 }, want, "masked_fill " .. dtype)
      T.assert_equal(t, before, "masked_fill leaves t")
    end
  end)

  test("the value may be a boolean or a 0-d tensor of any dtype (converted)", function()
    local t = qlua.tensor({ 1.5, 2.5, 3.5 })
    local m = { true, false, true }
    check(t:masked_fill(m, true), "float32", { 3 }, { 1, 2.5, 1 }, "boolean value")
    check(t:masked_fill(m, qlua.tensor(7)), "float32", { 3 }, { 7, 2.5, 7 }, "int64 0-d")
    check(qlua.tensor({ 1, 2, 3 }):masked_fill(m, qlua.tensor(2.75)), "int64", { 3 }, { 2, 2, 2 },
      "a float 0-d into int64 converts as copy_ does")
    check(qlua.zeros(3, { dtype = "bool" }):masked_fill_(m, qlua.tensor(5)), "bool", { 3 },
      { true, false, true }, "an int 0-d into bool is its nonzero")
    check(qlua.zeros(3, { dtype = "bool" }):masked_fill_(m, 0.5), "bool", { 3 },
      { true, false, true }, "a number into bool is its nonzero")
    check(qlua.zeros(2, { dtype = "uint8" }):masked_fill_({ 1, 0 }, 255), "uint8", { 2 }, { 255, 0 },
      "uint8 255")
  end)

  test("empty and 0-d", function()
    local e = qlua.zeros(0, 3)
    assert.is_true(rawequal(e:masked_fill_(qlua.ones(3):gt(0), 1), e))
    check(e:masked_fill(qlua.ones(1, 3), 1), "float32", { 0, 3 }, {}, "empty")
    local z = qlua.tensor(4)
    check(z:masked_fill_(qlua.tensor(true), 9), "int64", {}, { 9 }, "0-d t, 0-d mask")
    check(qlua.tensor(4):masked_fill(qlua.tensor({ true, false }), 9), "int64", { 2 }, { 9, 4 },
      "0-d t broadcast to the mask")
  end)

  test("a mask or value in t's own storage is read before t is written", function()
    local t = qlua.tensor({ { true, false, true }, { true, true, false }, { false, true, true } })
    t:masked_fill_(t[1], false)           -- row 1 (a view of t) broadcast to every row
    T.assert_equal(t, { { false, false, false }, { false, true, false }, { false, true, false } })
    local u = qlua.tensor({ true, false, true })
    u:masked_fill_(u, false)
    T.assert_equal(u, { false, false, false })
    local x = qlua.tensor({ { 1, 2 }, { 3, 4 } })
    x:masked_fill_(x:gt(1), x[{ 1, 1 }])   -- a 0-d view of x as the value
    T.assert_equal(x, { { 1, 1 }, { 1, 1 } })
    local y = qlua.tensor({ { 5, 0 }, { 6, 7 } })
    y:masked_fill_(y:t(), -1)              -- the mask is y transposed (nonzero, int64)
    T.assert_equal(y, { { -1, -1 }, { 6, -1 } })
    local w = qlua.tensor({ { 5, 0 }, { 0, 7 } })
    w:masked_fill_(w:t():ne(0), -1)
    T.assert_equal(w, { { -1, 0 }, { 0, -1 } })
  end)

  test("bad arguments name the op and the values", function()
    local t = qlua.tensor({ { 1, 2, 3 }, { 4, 5, 6 } })
    local m = t:gt(2)
    T.assert_error(function() t:masked_fill_(m, 2.5) end, "masked_fill_: cannot store 2.5")
    T.assert_error(function() t:to("uint8"):masked_fill_(m, 256) end,
      "masked_fill_: value 256 out of range for uint8")
    T.assert_error(function() t:masked_fill(m, qlua.ones(1)) end,
      "masked_fill: the value must be a number or a 0-d tensor, got a tensor of shape 1")
    T.assert_error(function() t:masked_fill_(qlua.ones(3, 2), 1) end,
      "masked_fill_: mask shape 3x2 cannot be broadcast to 2x3")
    T.assert_error(function() t:masked_fill_(qlua.ones(2, 2, 3), 1) end,
      "masked_fill_: mask shape 2x2x3 cannot be broadcast to 2x3")
    T.assert_error(function() t:masked_fill(qlua.ones(3, 2), 1) end,
      "masked_fill: shapes 2x3 and 3x2 cannot be broadcast")
    T.assert_error(function() t:select(1, 1):expand(2, 3):masked_fill_(m, 1) end,
      "masked_fill_: cannot write into an expanded tensor (dim 1 has stride 0)")
    T.assert_error(function() t:masked_fill_(m) end,
      "bad argument #2 to 'masked_fill_' (number, boolean or 0-d qlua.Tensor expected, got no value)")
    T.assert_error(function() t:masked_fill_("x", 1) end,
      "bad argument #1 to 'masked_fill_' (qlua.Tensor or table expected, got string)")
    T.assert_error(function() t:masked_fill_(m, 1, 2) end,
      "masked_fill_: unexpected argument #3 (number 2): masked_fill_ takes at most 2 arguments")
    local f = qlua.ones(2, 3)
    f:free()
    T.assert_error(function() t:masked_fill_(f, 1) end, "masked_fill_: tensor has been freed")
    T.assert_error(function() f:masked_fill(m, 1) end, "masked_fill: tensor has been freed")
  end)
end)

------------------------------------------------------------------------ masked_select

describe("masked_select", function()
  test("the elements where the mask is nonzero, row-major, every dtype, views, broadcast", function()
    local cases = { { { 3, 4 }, { 3, 4 } }, { { 3, 4 }, { 4 } }, { { 3, 1 }, { 3, 4 } },
                    { { 2, 3, 2 }, { 2, 1, 2 } }, { { 5 }, {} } }
    for _, dtype in ipairs(DTYPES) do
      for _, c in ipairs(cases) do
        local xs, ms = c[1], c[2]
        local dm = DTYPES[math.random(1, #DTYPES)]
        local x, m = rtable(xs, dtype), rtable(ms, dm)
        local want = ref_masked_select(x, xs, m, ms)
        local what = ("masked_select %s %s, %s mask %s"):format(dtype, T.shape_str(xs), dm, T.shape_str(ms))
        local r = T.make(x, dtype, random_layout(), nil, xs):masked_select(T.make(m, dm, random_layout(), nil, ms))
        check(r, dtype, { #want }, want, what)
      end
    end
  end)

  test("none, all, empty and 0-d", function()
    local t = qlua.tensor({ { 1, 2 }, { 3, 4 } })
    check(t:masked_select(t:gt(9)), "int64", { 0 }, {}, "none true")
    check(t:masked_select(t:gt(0)), "int64", { 4 }, { 1, 2, 3, 4 }, "all true")
    check(qlua.zeros(0, 2):masked_select(qlua.ones(2)), "float32", { 0 }, {}, "empty t")
    check(qlua.tensor(3):masked_select(qlua.tensor(true)), "int64", { 1 }, { 3 }, "0-d, true")
    check(qlua.tensor(3):masked_select(qlua.tensor(0)), "int64", { 0 }, {}, "0-d, false")
    check(qlua.tensor(3):masked_select({ true, false, true }), "int64", { 2 }, { 3, 3 }, "0-d t, 1-D mask")
  end)

  test("bad arguments", function()
    local t = qlua.ones(2, 3)
    T.assert_error(function() t:masked_select(qlua.ones(3, 3)) end,
      "masked_select: shapes 2x3 and 3x3 cannot be broadcast")
    T.assert_error(function() t:masked_select() end,
      "bad argument #1 to 'masked_select' (qlua.Tensor or table expected, got no value)")
    T.assert_error(function() t:masked_select(t, t) end,
      "masked_select: unexpected argument #2")
    local f = qlua.ones(2, 3)
    f:free()
    T.assert_error(function() t:masked_select(f) end, "masked_select: tensor has been freed")
  end)
end)

------------------------------------------------------------------------ nonzero

describe("nonzero", function()
  test("n x dim int64 1-based positions, row-major, every dtype and view", function()
    for _, dtype in ipairs(DTYPES) do
      for _, shape in ipairs({ { 7 }, { 3, 4 }, { 2, 3, 4 }, { 2, 1, 3, 2 } }) do
        local layout = random_layout()
        local x = rtable(shape, dtype)
        local rows = ref_nonzero(x, shape)
        local r = T.make(x, dtype, layout):nonzero()
        local what = ("nonzero %s %s %s"):format(dtype, T.shape_str(shape), layout)
        assert.are.equal("int64", r:dtype(), what)
        T.assert_shape(r, { #rows, #shape }, what)
        if #rows > 0 then T.assert_equal(r, rows, what) end
      end
    end
  end)

  test("NaN is nonzero, -0.0 is not; empty; 0-d gives n x 0", function()
    local r = qlua.tensor({ 0 / 0, -0.0, 0.0, 2 }, { dtype = "float64" }):nonzero()
    T.assert_equal(r, { { 1 }, { 4 } })
    T.assert_shape(qlua.zeros(0, 3):nonzero(), { 0, 2 })
    T.assert_shape(qlua.zeros(2, 3):nonzero(), { 0, 2 })
    T.assert_shape(qlua.tensor(5):nonzero(), { 1, 0 })
    T.assert_shape(qlua.tensor(0):nonzero(), { 0, 0 })
    T.assert_shape(qlua.tensor(false):nonzero(), { 0, 0 })
    T.assert_error(function() qlua.ones(2):nonzero(1) end,
      "nonzero: unexpected argument #1 (number 1): nonzero takes at most 0 arguments")
    local f = qlua.ones(2)
    f:free()
    T.assert_error(function() f:nonzero() end, "nonzero: tensor has been freed")
  end)
end)

------------------------------------------------------------------------ any, all, count_nonzero

describe("any, all, count_nonzero", function()
  test("without dim: a Lua boolean or integer; with dim: a bool or int64 tensor", function()
    for _, dtype in ipairs(DTYPES) do
      for _, shape in ipairs({ { 5 }, { 3, 4 }, { 2, 3, 2 } }) do
        local x = rtable(shape, dtype, ({ 0.1, 0.5, 0.9 })[math.random(1, 3)])
        local t = T.make(x, dtype, random_layout())
        for _, op in ipairs({ "any", "all", "count_nonzero" }) do
          local what = ("%s %s %s"):format(op, dtype, T.shape_str(shape))
          local v = t[op](t)
          assert.are.equal(ref_reduce(op, x, shape), v, what)
          if op == "count_nonzero" then assert.are.equal("integer", math.type(v), what)
          else assert.are.equal("boolean", type(v), what) end
          for dim = 1, #shape do
            local want, oshape = ref_reduce(op, x, shape, dim)
            local rdtype = op == "count_nonzero" and "int64" or "bool"
            check(t[op](t, dim), rdtype, oshape, want, what .. " dim " .. dim)
            if op ~= "count_nonzero" then   -- keepdim (PyTorch's count_nonzero has none)
              local kshape = {}
              for d = 1, #shape do kshape[d] = d == dim and 1 or shape[d] end
              check(t[op](t, dim, true), rdtype, kshape, want, what .. " dim " .. dim .. " keepdim")
              check(t[op](t, dim, false), rdtype, oshape, want, what .. " dim " .. dim .. " keepdim false")
            end
          end
        end
      end
    end
  end)

  test("keepdim: a boolean, and only with a dim", function()
    local t = qlua.tensor({ { 1, 0 }, { 1, 1 } })
    T.assert_error(function() return t:any(1, 1) end, "any: keepdim must be a boolean, got number")
    T.assert_error(function() return t:all(nil, true) end, "all: keepdim needs a dim")
    T.assert_error(function() return t:count_nonzero(1, true) end,
      "count_nonzero: unexpected argument #2 (boolean true)")
    T.assert_shape(qlua.zeros(0, 3):all(1, true), { 1, 3 })
  end)

  test("NaN counts as nonzero", function()
    local t = qlua.tensor({ 0 / 0, 0 })
    assert.is_true(t:any())
    assert.is_false(t:all())
    assert.are.equal(1, t:count_nonzero())
  end)

  test("over nothing: any false, all true, count 0; 0-d", function()
    local e = qlua.zeros(0, 3)
    assert.is_false(e:any())
    assert.is_true(e:all())
    assert.are.equal(0, e:count_nonzero())
    check(e:any(1), "bool", { 3 }, { false, false, false }, "any(1) over size 0")
    check(e:all(1), "bool", { 3 }, { true, true, true }, "all(1) over size 0")
    check(e:count_nonzero(1), "int64", { 3 }, { 0, 0, 0 }, "count_nonzero(1) over size 0")
    check(e:all(2), "bool", { 0 }, {}, "all(2): an empty result")
    assert.is_true(qlua.tensor(2.5):any())
    assert.is_false(qlua.tensor(0):all())
    assert.are.equal(1, qlua.tensor(true):count_nonzero())
  end)

  test("bad arguments", function()
    local t = qlua.ones(2, 3)
    T.assert_error(function() t:any(3) end, "any: dim 3 out of range (1..2)")
    T.assert_error(function() t:all(0) end, "all: dim 0 out of range (1..2)")
    T.assert_error(function() t:count_nonzero(1, 2) end,
      "count_nonzero: unexpected argument #2 (number 2): count_nonzero takes at most 1 argument")
    local f = qlua.ones(2)
    f:free()
    T.assert_error(function() f:any() end, "any: tensor has been freed")
    T.assert_error(function() f:count_nonzero(1) end, "count_nonzero: tensor has been freed")
  end)
end)

------------------------------------------------------------------------ GPU parity

describe("masks on the GPU", function()
  -- The GPU's result against the CPU's, exactly (dtype, shape and every value).
  local function parity(what, fn)
    local c, g = fn("cpu"), fn("gpu")
    if qlua.is_tensor(c) then
      assert.is_truthy(g:device():match("^gpu:%d+$"), what .. ": result on " .. g:device())
      assert.are.equal(c:dtype(), g:dtype(), what .. ": dtype")
      T.assert_shape(g, c:shape(), what)
      if c:numel() > 0 then T.assert_equal(g:cpu(), c:totable(), what) end
    else
      assert.are.equal(c, g, what)
    end
  end

  gtest("where matches the CPU on every dtype pair, layout and broadcast, with numbers", function()
    local cs, as, bs = { 5, 1, 33 }, { 7, 1 }, { 33 }
    for _, da in ipairs(DTYPES) do
      for _, db in ipairs(DTYPES) do
        local lc, la, lb = random_layout(), random_layout(), random_layout()
        local c, a, b = rtable(cs, "bool"), rtable(as, da), rtable(bs, db)
        parity(("where %s %s"):format(da, db), function(dev)
          return qlua.where(T.make(c, "bool", lc, dev), T.make(a, da, la, dev), T.make(b, db, lb, dev))
        end)
      end
      local n = 1000 + math.random(0, 40)   -- packs and a tail
      local c, a = rtable({ n }, "bool"), rtable({ n }, da)
      local v = rvalue(da, 0)
      parity("where dense, number b " .. da, function(dev)
        return qlua.where(T.make(c, "bool", "contiguous", dev), T.make(a, da, "contiguous", dev), v)
      end)
      parity("where dense, number a, misaligned " .. da, function(dev)
        local ta = T.make(a, da, "contiguous", dev):narrow(1, 2, n - 1)
        return qlua.where(T.make(c, "bool", "contiguous", dev):narrow(1, 2, n - 1), v, ta)
      end)
      parity("where, both numbers", function(dev)
        return qlua.where(T.make(c, "bool", "stepped", dev), 1.5, 0)
      end)
      local cf = rtable({ 40, 3 }, da)
      parity("where, " .. da .. " cond through nonzero", function(dev)
        return qlua.where(T.make(cf, da, "transposed", dev), 1, 2)
      end)
    end
  end)

  gtest("masked_fill_ and masked_fill match the CPU, with number, boolean and 0-d values", function()
    for _, dtype in ipairs(DTYPES) do
      for _, layout in ipairs(T.layouts) do
        local x, m = rtable({ 9, 17 }, dtype), rtable({ 17 }, "bool")
        local v = rvalue(dtype, 0)
        parity("masked_fill_ " .. dtype .. " " .. layout, function(dev)
          return T.make(x, dtype, layout, dev):masked_fill_(T.make(m, "bool", "stepped", dev), v)
        end)
        parity("masked_fill 0-d " .. dtype .. " " .. layout, function(dev)
          local value = qlua.tensor(3, { device = dev })
          return T.make(x, dtype, layout, dev):masked_fill(T.make(x, dtype, "narrowed", dev), value)
        end)
      end
    end
  end)

  gtest("masked_select matches the CPU: large, dense, strided and broadcast", function()
    for _, dtype in ipairs(DTYPES) do
      local n = 100000 + math.random(0, 99)
      local x, m = rtable({ n }, dtype), rtable({ n }, "bool", 0.5)
      parity("masked_select dense " .. dtype, function(dev)
        return T.make(x, dtype, "contiguous", dev):masked_select(T.make(m, "bool", "contiguous", dev))
      end)
      local x2, m2 = rtable({ 37, 41 }, dtype), rtable({ 37, 1 }, "bool")
      parity("masked_select strided, broadcast " .. dtype, function(dev)
        return T.make(x2, dtype, "transposed", dev):masked_select(T.make(m2, "bool", "stepped", dev))
      end)
      parity("masked_select through nonzero " .. dtype, function(dev)
        return T.make(x2, dtype, "narrowed", dev):masked_select(T.make(x2, dtype, "contiguous", dev))
      end)
    end
    parity("masked_select none", function(dev) return qlua.ones(10, { device = dev }):masked_select(qlua.zeros(10, { device = dev })) end)
  end)

  gtest("nonzero matches the CPU: 1-D, N-D, large, strided", function()
    for _, dtype in ipairs(DTYPES) do
      for _, shape in ipairs({ { 100003 }, { 61, 67 }, { 5, 7, 3, 11 } }) do
        local x = rtable(shape, dtype, 0.6)
        for _, layout in ipairs({ "contiguous", "transposed" }) do
          parity(("nonzero %s %s %s"):format(dtype, T.shape_str(shape), layout), function(dev)
            return T.make(x, dtype, layout, dev):nonzero()
          end)
        end
      end
    end
    parity("nonzero 0-d", function(dev) return qlua.tensor(3, { device = dev }):nonzero() end)
    parity("nonzero empty", function(dev) return qlua.zeros(0, 4, { device = dev }):nonzero() end)
  end)

  gtest("any, all, count_nonzero match the CPU", function()
    for _, dtype in ipairs(DTYPES) do
      local x = rtable({ 33, 65 }, dtype, 0.3)
      for _, op in ipairs({ "any", "all", "count_nonzero" }) do
        parity(op .. " " .. dtype, function(dev) local t = T.make(x, dtype, "stepped", dev); return t[op](t) end)
        for dim = 1, 2 do
          parity(op .. " dim " .. dim .. " " .. dtype, function(dev)
            local t = T.make(x, dtype, "transposed", dev)
            return t[op](t, dim)
          end)
          if op ~= "count_nonzero" then
            parity(op .. " dim " .. dim .. " keepdim " .. dtype, function(dev)
              local t = T.make(x, dtype, "transposed", dev)
              return t[op](t, dim, true)
            end)
          end
        end
        parity(op .. " empty", function(dev) local t = qlua.zeros(0, 5, { device = dev }); return t[op](t, 1) end)
      end
    end
  end)

  gtest("operands on two devices are an error naming both", function()
    local c = qlua.tensor({ true, false })
    local g = qlua.ones(2, { device = "gpu" })
    local gname = g:device()
    T.assert_error(function() qlua.where(c, g, 1) end, "where: tensors on cpu and " .. gname)
    T.assert_error(function() qlua.where(c:gpu(), qlua.ones(2), g) end, "where: tensors on " .. gname .. " and cpu")
    T.assert_error(function() g:masked_fill_(c, 1) end, "masked_fill_: tensors on " .. gname .. " and cpu")
    T.assert_error(function() g:masked_fill(c:gpu(), qlua.tensor(1)) end,
      "masked_fill: tensors on " .. gname .. " and cpu")
    T.assert_error(function() g:masked_select(c) end, "masked_select: tensors on " .. gname .. " and cpu")
    -- a table mask is made on the tensor's device
    T.assert_equal(g:masked_select({ true, false }):cpu(), { 1 })
  end)
end)
