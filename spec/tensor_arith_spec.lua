-- Arithmetic (docs/API.md "Arithmetic"): every binary and unary op, the operators with
-- numbers on either side, broadcasting, NumPy dtype promotion, in-place ops and their
-- dtype errors, comparisons. Each op is checked against a Lua reference computed in
-- float64 (or exact integers) from the values the tensors hold.
local T, qlua, test = require("qlua.testing").spec(_ENV)
local ref = T.ref

local ipow = ref.ipow

-- The binary ops: reference on two numbers (already of the inputs' dtypes) computing the
-- value the result dtype rd holds (T.ref.binary), and the order this spec walks them in.
local BINARY = ref.binary
local BINARY_NAMES = { "add", "sub", "mul", "div", "pow", "maximum", "minimum",
  "eq", "ne", "lt", "le", "gt", "ge" }

-- Checks a:name(b) (and the operator form when there is one) against the reference.
local function check_binary(name, da, db, la, lb, sa, sb)
  local rd = T.result_dtype(name, da, db)
  local a = T.binary_operand(name, 1, sa, da, rd)
  local b = T.binary_operand(name, 2, sb, db, rd)
  local ta, tb = T.make(a, da, la), T.make(b, db, lb)
  local what = string.format("%s(%s %s %s, %s %s %s)", name, da, la, T.shape_str(sa), db, lb,
    T.shape_str(sb))
  local f = BINARY[name].f
  local want = ref.map2(a, b, function(x, y) return T.as_dtype(f(x, y, rd), rd) end)
  local r = ta[name](ta, tb)
  assert.equal(rd, r:dtype(), what)
  T.assert_matches_dtype(r, want, rd, what)
  local op = BINARY[name].op
  if op then
    local r2
    if op == "+" then r2 = ta + tb elseif op == "-" then r2 = ta - tb
    elseif op == "*" then r2 = ta * tb elseif op == "/" then r2 = ta / tb
    else r2 = ta ^ tb end
    assert.equal(rd, r2:dtype(), what .. " operator")
    T.assert_matches_dtype(r2, want, rd, what .. " operator")
  end
  -- inputs are never modified
  T.assert_equal(ta, a, what .. ": first operand changed")
  T.assert_equal(tb, b, what .. ": second operand changed")
end

describe("binary ops", function()
  test("every op, every dtype, on contiguous and non-contiguous operands", function()
    for _, name in ipairs(BINARY_NAMES) do
      for _, dtype in ipairs(T.dtypes) do
        for _, layout in ipairs(T.layouts) do
          check_binary(name, dtype, dtype, layout, "contiguous", { 3, 4 }, { 3, 4 })
          check_binary(name, dtype, dtype, "contiguous", layout, { 2, 3, 4 }, { 2, 3, 4 })
        end
      end
    end
  end)

  test("promote mixed dtypes like NumPy", function()
    for _, name in ipairs(BINARY_NAMES) do
      for _, da in ipairs(T.dtypes) do
        for _, db in ipairs(T.dtypes) do
          check_binary(name, da, db, "contiguous", "contiguous", { 5 }, { 5 })
          check_binary(name, da, db, T.noncontiguous_layouts[math.random(1, 3)],
            T.noncontiguous_layouts[math.random(1, 3)], { 3, 4 }, { 3, 4 })
        end
      end
    end
  end)

  test("the promotion table of docs/API.md", function()
    local function dt(a, b) return (qlua.ones(2, { dtype = a }) + qlua.ones(2, { dtype = b })):dtype() end
    assert.equal("float64", dt("float32", "float64"))
    assert.equal("float64", dt("float32", "int32"))
    assert.equal("float64", dt("float32", "int64"))
    assert.equal("float64", dt("int32", "float32"))
    assert.equal("int64", dt("int32", "int64"))
    assert.equal("int64", dt("int64", "int32"))
    assert.equal("float32", dt("float32", "float32"))
    assert.equal("int32", dt("int32", "int32"))
    local i = qlua.ones(2, { dtype = "int32" })
    assert.equal("float64", (i / i):dtype())
    assert.equal("int32", (i ^ i):dtype())
    assert.equal("bool", i:eq(i):dtype())
    assert.equal("bool", i:lt(qlua.ones(2)):dtype())
  end)

  test("broadcast with NumPy's rules", function()
    local pairs_of_shapes = {
      { { 3, 1 }, { 1, 4 } }, { { 2, 3, 4 }, { 4 } }, { { 4 }, { 2, 3, 4 } },
      { { 2, 1, 4 }, { 3, 1 } }, { { 1 }, { 3, 2 } }, { { 3, 2 }, {} }, { {}, { 2, 2 } },
      { { 2, 3 }, { 2, 3 } }, { { 5, 1, 1 }, { 1, 1, 6 } },
    }
    for _, sp in ipairs(pairs_of_shapes) do
      for _, name in ipairs({ "add", "sub", "mul", "div", "maximum", "lt", "eq" }) do
        for _, dtype in ipairs({ "float32", "int64" }) do
          check_binary(name, dtype, dtype, "contiguous", "contiguous", sp[1], sp[2])
          check_binary(name, dtype, dtype, "stepped", "transposed", sp[1], sp[2])
        end
      end
    end
  end)

  test("take expanded (stride 0) operands", function()
    for _, dtype in ipairs(T.dtypes) do
      local col = T.random_table({ 3, 1 }, dtype)
      local row = T.random_table({ 1, 4 }, dtype)
      local ec, er = T.expanded(col, { 3, 4 }, dtype), T.expanded(row, { 3, 4 }, dtype)
      T.assert_matches_dtype(ec * er, ref.map2(col, row, function(x, y) return T.as_dtype(x * y, dtype) end), dtype)
      local m = T.random_table({ 3, 4 }, dtype)
      T.assert_matches_dtype(T.make(m, dtype, "transposed") - ec,
        ref.map2(m, col, function(x, y) return T.as_dtype(x - y, dtype) end), dtype)
    end
  end)

  test("empty operands give empty results", function()
    T.assert_shape(qlua.zeros(0) + qlua.zeros(0), { 0 })
    T.assert_shape(qlua.zeros(0, 3) * qlua.ones(3), { 0, 3 })
    T.assert_shape(qlua.zeros(2, 0):maximum(qlua.zeros(1, 1)), { 2, 0 })
  end)

  test("refuse shapes that do not broadcast", function()
    local a, b = qlua.zeros(2, 3), qlua.zeros(4)
    T.assert_error(function() local _ = a:add(b) end, "add")
    T.assert_error(function() local _ = a + b end, "add")
    T.assert_error(function() local _ = a:mul(qlua.zeros(3, 2)) end, "mul")
    T.assert_error(function() local _ = a:lt(qlua.zeros(2, 2)) end, "lt")
    T.assert_error(function() local _ = a:add({}) end, "add")
  end)
end)

describe("binary ops with numbers", function()
  -- (tensor dtype, number) -> result dtype, docs/API.md: an integer keeps the tensor's
  -- dtype; a float with an integer tensor gives float64 (and / of integers is float64).
  local function scalar_dtype(name, dtype, s)
    if BINARY[name].cmp then return "bool" end
    if T.is_float_dtype(dtype) then return dtype end
    if math.type(s) == "float" then return "float64" end
    if name == "div" then return "float64" end
    return dtype
  end

  local function check_scalar(name, dtype, layout, s, scalar_first)
    local rd = scalar_dtype(name, dtype, s)
    local a = T.binary_operand(name, scalar_first and 2 or 1, { 3, 4 }, dtype, rd)
    local t = T.make(a, dtype, layout)
    local f = BINARY[name].f
    local what = string.format("%s(%s%s %s, %s)", name, scalar_first and "number first, " or "",
      dtype, layout, tostring(s))
    local want, r
    if scalar_first then
      want = ref.map(a, function(x) return T.as_dtype(f(s, x, rd), rd) end)
      local op = BINARY[name].op
      if op == "+" then r = s + t elseif op == "-" then r = s - t elseif op == "*" then r = s * t
      elseif op == "/" then r = s / t else r = s ^ t end
    else
      want = ref.map(a, function(x) return T.as_dtype(f(x, s, rd), rd) end)
      r = t[name](t, s)
    end
    assert.equal(rd, r:dtype(), what)
    T.assert_matches_dtype(r, want, rd, what)
  end

  test("method forms with integer and float numbers", function()
    for _, name in ipairs(BINARY_NAMES) do
      for _, dtype in ipairs(T.dtypes) do
        for _, layout in ipairs({ "contiguous", T.noncontiguous_layouts[math.random(1, 3)] }) do
          local si, sf
          if BINARY[name].cmp then si, sf = 1, 1.0
          elseif name == "pow" then si, sf = 2, 0.5
          else si, sf = 3, 1.25 end
          check_scalar(name, dtype, layout, si, false)
          check_scalar(name, dtype, layout, sf, false)
          if not (name == "pow" and not T.is_float_dtype(dtype)) then
            check_scalar(name, dtype, layout, -si, false)  -- no negative integer powers
          end
        end
      end
    end
  end)

  test("operators with the number on either side", function()
    for _, name in ipairs({ "add", "sub", "mul", "div", "pow" }) do
      for _, dtype in ipairs(T.dtypes) do
        local s = name == "pow" and 2 or 3
        check_scalar(name, dtype, "contiguous", s, true)
        check_scalar(name, dtype, "transposed", s, true)
        check_scalar(name, dtype, "stepped", s + 0.5, true)
        local a = T.binary_operand(name, 1, { 4 }, dtype, dtype)
        local t = T.make(a, dtype, "narrowed")
        local rd = scalar_dtype(name, dtype, s)
        local f = BINARY[name].f
        local want = ref.map(a, function(x) return T.as_dtype(f(x, s, rd), rd) end)
        local r
        if name == "add" then r = t + s elseif name == "sub" then r = t - s
        elseif name == "mul" then r = t * s elseif name == "div" then r = t / s else r = t ^ s end
        assert.equal(rd, r:dtype())
        T.assert_matches_dtype(r, want, rd, name .. " operator " .. dtype)
      end
    end
  end)

  test("unary minus", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        local a = T.random_table({ 3, 4 }, dtype)
        local r = -T.make(a, dtype, layout)
        assert.equal(dtype, r:dtype())
        T.assert_equal(r, ref.map(a, function(x) return -x end))
      end
    end
  end)

  test("a 0-d tensor broadcasts like a number", function()
    local a = T.random_table({ 2, 3 }, "float64")
    local s = qlua.tensor(2.5, { dtype = "float64" })
    T.assert_close(qlua.tensor(a, { dtype = "float64" }) * s, ref.map(a, function(x) return x * 2.5 end), 1e-15)
    T.assert_close(s - qlua.tensor(a, { dtype = "float64" }), ref.map(a, function(x) return 2.5 - x end), 1e-15)
  end)

  test("int64 arithmetic is exact beyond 2^53", function()
    local big = 1 << 60
    local t = qlua.tensor({ big, big + 1, -big })
    T.assert_equal(t + 1, { big + 1, big + 2, -big + 1 })
    T.assert_equal(t - qlua.tensor({ 1, 1, 1 }), { big - 1, big, -big - 1 })
    T.assert_equal(qlua.tensor({ (1 << 40) + 3 }) * qlua.tensor({ (1 << 20) + 1 }), { ((1 << 40) + 3) * ((1 << 20) + 1) })
    T.assert_equal(t + (1 << 55), { big + (1 << 55), big + 1 + (1 << 55), -big + (1 << 55) })
    -- 2^60 and 2^60 + 1 are one double apart from each other: compare as integers
    T.assert_equal(t:eq(big), { true, false, false })
    T.assert_equal(t:lt(big + 1), { true, false, true })
    T.assert_equal(t:maximum(big + 1), { big + 1, big + 1, big + 1 })
    T.assert_equal(t:minimum(qlua.tensor({ big + 1, big, 0 })), { big, big, -big })
    T.assert_equal(qlua.tensor({ 3 }) ^ qlua.tensor({ 39 }), { ipow(3, 39) })
    T.assert_equal(-t, { -big, -big - 1, big })
    T.assert_equal(t:abs(), { big, big + 1, big })
    T.assert_equal(t:clamp(-big + 5, big), { big, big, -big + 5 })
  end)

  test("comparisons with NaN follow IEEE", function()
    local n = qlua.tensor({ 0 / 0, 1 }, { dtype = "float64" })
    local m = qlua.tensor({ 0 / 0, 0 / 0 }, { dtype = "float64" })
    T.assert_equal(n:eq(m), { false, false })
    T.assert_equal(n:ne(m), { true, true })
    T.assert_equal(n:lt(m), { false, false })
    T.assert_equal(n:ge(m), { false, false })
    T.assert_equal(n:eq(0 / 0), { false, false })
    T.assert_equal(n:le(1), { false, true })
  end)

  test("an operand may be self", function()
    for _, dtype in ipairs(T.dtypes) do
      local a = T.random_table({ 3, 4 }, dtype)
      local t = T.make(a, dtype, "transposed")
      T.assert_equal(t + t, ref.map(a, function(x) return T.as_dtype(x + x, dtype) end))
      t:mul_(t)
      T.assert_equal(t, ref.map(a, function(x) return T.as_dtype(x * x, dtype) end))
    end
  end)

  -- exp/log/tanh/sigmoid run 2 or 4 lanes at a time where libmvec is linked (strided
  -- lanes gathered, tails padded): the layout must not change a single bit.
  test("exp, log, tanh, sigmoid and sqrt give the same bits whatever the input layout", function()
    for _, dtype in ipairs({ "float32", "float64" }) do
      local a = qlua.rand(37, 41, { dtype = dtype }):mul(20):sub(10)
      for _, op in ipairs({ "exp", "log", "tanh", "sigmoid", "sqrt" }) do
        local src = (op == "log" or op == "sqrt") and a:abs() or a
        local want = src[op](src)
        local transposed = src:t():contiguous():t()
        local narrowed = src:narrow(2, 2, 39)
        local flat = src:view(-1):narrow(1, 2, 37 * 41 - 3)
        assert.equal(0, (transposed[op](transposed) - want):abs():max(), op .. " " .. dtype)
        assert.equal(0, (narrowed[op](narrowed) - want:narrow(2, 2, 39)):abs():max(), op .. " " .. dtype)
        assert.equal(0, (flat[op](flat) - want:view(-1):narrow(1, 2, 37 * 41 - 3)):abs():max(), op .. " " .. dtype)
        for i = 1, 37, 12 do   -- a single element (all tail) and a row
          assert.equal(want[i][5], src[i]:narrow(1, 5, 1)[op](src[i]:narrow(1, 5, 1))[1], op)
          assert.equal(0, (src[i][op](src[i]) - want[i]):abs():max(), op)
        end
      end
    end
  end)

  test("large non-contiguous operands agree with their contiguous copies", function()
    local a = qlua.rand(300, 401)
    local b = qlua.rand(401, 300)
    local at, bt = a:t(), b:t()              -- (401, 300) non-contiguous and (300, 401)
    local sum1 = (at + b):t():contiguous()
    local sum2 = a + bt:contiguous()
    assert.equal(0, (sum1 - sum2):abs():max())
    assert.equal(0, (at:exp():t() - a:exp()):abs():max())
    local wide = qlua.rand(7, 1, 513):expand(7, 300, 513)
    local col = qlua.rand(300, 1)
    local r = wide * col
    T.assert_shape(r, { 7, 300, 513 })
    for _, p in ipairs({ { 1, 1 }, { 3, 17 }, { 7, 300 } }) do
      local want = wide:select(1, p[1]):select(1, p[2]) * col[p[2]][1]
      assert.equal(0, (r:select(1, p[1]):select(1, p[2]) - want):abs():max())
    end
  end)

  test("integer division by zero does not trap", function()
    local a = qlua.tensor({ 1, -1, 0 })
    local r = a / qlua.tensor({ 0, 0, 0 })
    assert.equal("float64", r:dtype())
    local v = r:totable()
    assert.equal(math.huge, v[1])
    assert.equal(-math.huge, v[2])
    assert.is_true(v[3] ~= v[3])
    local r2 = qlua.tensor({ 5, -5 }, { dtype = "int32" }) / 0
    T.assert_equal(r2, { math.huge, -math.huge })
    T.assert_equal(qlua.tensor({ 0, 3 }) ^ qlua.tensor({ 0, 0 }), { 1, 1 })
  end)
end)

-- The unary ops: references (T.ref.unary: `ints` keeps an integer dtype, `positive` needs
-- inputs > 0), and the order this spec draws their data in.
local UNARY = ref.unary
local UNARY_NAMES = { "neg", "abs", "exp", "log", "sqrt", "tanh", "sigmoid", "relu" }

local function unary_data(name, shape, dtype)
  if UNARY[name].positive then
    return T.random_table(shape, dtype, T.is_float_dtype(dtype) and { positive = true, lo = 0.1, hi = 9 } or { lo = 1, hi = 50 })
  end
  if T.is_float_dtype(dtype) then return T.random_table(shape, dtype, { lo = 0.1, hi = 3 }) end
  return T.random_table(shape, dtype, { lo = -10, hi = 10 })
end

describe("unary ops", function()
  test("every op, every dtype, every layout", function()
    for _, name in ipairs(UNARY_NAMES) do
      for _, dtype in ipairs(T.dtypes) do
        for _, layout in ipairs(T.layouts) do
          local a = unary_data(name, { 3, 5 }, dtype)
          local t = T.make(a, dtype, layout)
          local rd = (not UNARY[name].ints and not T.is_float_dtype(dtype)) and "float64" or dtype
          local r = t[name](t)
          local what = name .. " " .. dtype .. " " .. layout
          assert.equal(rd, r:dtype(), what)
          T.assert_matches_dtype(r, ref.map(a, function(x) return T.as_dtype(UNARY[name].f(x), rd) end), rd, what)
          T.assert_equal(t, a, what .. ": input changed")
        end
      end
    end
  end)

  test("clamp with both bounds, or one of them nil", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        local a = T.random_table({ 4, 3 }, dtype, T.is_float_dtype(dtype) and { lo = -3, hi = 3 } or { lo = -9, hi = 9 })
        local t = T.make(a, dtype, layout)
        local lo, hi
        if T.is_float_dtype(dtype) then lo, hi = -1.5, 0.75 else lo, hi = -4, 3 end
        local function cl(x, l, h)
          if l and x < l then x = l end
          if h and x > h then x = h end
          return T.as_dtype(x, dtype)
        end
        local what = "clamp " .. dtype .. " " .. layout
        local r = t:clamp(lo, hi)
        assert.equal(dtype, r:dtype(), what)
        T.assert_equal(r, ref.map(a, function(x) return cl(x, lo, hi) end), what)
        T.assert_equal(t:clamp(nil, hi), ref.map(a, function(x) return cl(x, nil, hi) end), what .. " (nil, hi)")
        T.assert_equal(t:clamp(lo, nil), ref.map(a, function(x) return cl(x, lo, nil) end), what .. " (lo, nil)")
        T.assert_equal(t:clamp(lo), ref.map(a, function(x) return cl(x, lo, nil) end), what .. " (lo)")
      end
    end
  end)

  test("work on empty and 0-d tensors", function()
    T.assert_shape(qlua.zeros(0, 2):exp(), { 0, 2 })
    assert.is_true(math.abs(qlua.tensor(1.0, { dtype = "float64" }):exp():item() - math.exp(1)) < 1e-15)
    assert.equal(3, qlua.tensor(-3):abs():item())
  end)
end)

describe("in-place ops", function()
  test("binary ops with tensors and numbers, on every layout, return self", function()
    for _, name in ipairs(BINARY_NAMES) do
      for _, dtype in ipairs(T.dtypes) do
        if not (name == "div" and not T.is_float_dtype(dtype)) then
          for _, layout in ipairs(T.layouts) do
            local a = T.binary_operand(name, 1, { 3, 4 }, dtype, dtype)
            local b = T.binary_operand(name, 2, { 3, 4 }, dtype, dtype)
            local ta = T.make(a, dtype, layout)
            local tb = T.make(b, dtype, T.layouts[math.random(1, 4)])
            local f = BINARY[name].f
            local what = name .. "_ " .. dtype .. " " .. layout
            local r = ta[name .. "_"](ta, tb)
            assert.is_true(rawequal(r, ta), what .. " returns self")
            assert.equal(dtype, ta:dtype())
            local want = ref.map2(a, b, function(x, y) return T.as_dtype(f(x, y, dtype), dtype) end)
            T.assert_matches_dtype(ta, want, dtype, what)
            -- and with a number (an integer: storable in every dtype)
            local s = name == "pow" and 2 or (BINARY[name].cmp and 1 or 3)
            local c = T.make(a, dtype, layout)
            c[name .. "_"](c, s)
            T.assert_matches_dtype(c, ref.map(a, function(x) return T.as_dtype(f(x, s, dtype), dtype) end), dtype, what .. " number")
          end
        end
      end
    end
  end)

  test("the operand broadcasts to self", function()
    local a = T.random_table({ 3, 4 }, "float64")
    local row = T.random_table({ 4 }, "float64")
    local col = T.random_table({ 3, 1 }, "float64")
    local t = T.make(a, "float64", "transposed")
    t:add_(qlua.tensor(row, { dtype = "float64" }))
    t:mul_(qlua.tensor(col, { dtype = "float64" }))
    local want = ref.map2(ref.map2(a, row, function(x, y) return x + y end), col, function(x, y) return x * y end)
    T.assert_close(t, want, 1e-15)
    T.assert_error(function() qlua.zeros(1, 4):add_(qlua.zeros(3, 4)) end, "add_")
  end)

  test("write only through the view", function()
    local base = qlua.zeros(6, 8, { dtype = "int64" })
    local v = base:narrow(1, 2, 3):narrow(2, 2, 4):t()
    v:add_(1):mul_(5):sub_(2)
    local count, sum = 0, 0
    for _, x in ipairs(T.flatten(base:totable())) do
      if x ~= 0 then count = count + 1 end
      sum = sum + x
    end
    assert.equal(12, count)
    assert.equal(36, sum)
  end)

  test("unary ops in place", function()
    for _, name in ipairs(UNARY_NAMES) do
      for _, dtype in ipairs(T.dtypes) do
        if T.is_float_dtype(dtype) or UNARY[name].ints then
          for _, layout in ipairs(T.layouts) do
            local a = unary_data(name, { 4, 3 }, dtype)
            local t = T.make(a, dtype, layout)
            local r = t[name .. "_"](t)
            local what = name .. "_ " .. dtype .. " " .. layout
            assert.is_true(rawequal(r, t), what .. " returns self")
            T.assert_matches_dtype(t, ref.map(a, function(x) return T.as_dtype(UNARY[name].f(x), dtype) end), dtype, what)
          end
        end
      end
    end
    local c = qlua.tensor({ -5, 0, 5 }, { dtype = "int32" })
    assert.is_true(rawequal(c, c:clamp_(-2, 2)))
    T.assert_equal(c, { -2, 0, 2 })
    local f = qlua.tensor({ -5.5, 0.25, 5.5 })
    f:clamp_(nil, 1)
    T.assert_equal(f, { -5.5, 0.25, 1 })
  end)

  test("a float result into an integer tensor is an error, and changes nothing", function()
    for _, dtype in ipairs(T.int_dtypes) do
      local a = T.random_table({ 5 }, dtype)
      local t = qlua.tensor(a, { dtype = dtype })
      local cases = {
        { "div_", function() t:div_(2) end },
        { "div_", function() t:div_(qlua.tensor({ 1, 2, 3, 4, 5 }, { dtype = dtype })) end },
        { "add_", function() t:add_(2.5) end },
        { "add_", function() t:add_(qlua.ones(5)) end },
        { "mul_", function() t:mul_(qlua.ones(5, { dtype = "float64" })) end },
        { "exp_", function() t:exp_() end },
        { "log_", function() t:log_() end },
        { "sqrt_", function() t:sqrt_() end },
        { "tanh_", function() t:tanh_() end },
        { "sigmoid_", function() t:sigmoid_() end },
      }
      for _, case in ipairs(cases) do
        T.assert_error(case[2], case[1])
        T.assert_equal(t, a, case[1] .. " changed the tensor")
      end
    end
  end)

  test("storable results of other dtypes are converted", function()
    local f = qlua.tensor({ 1.5, 2.5 })
    f:add_(qlua.tensor({ 0.1, 0.2 }, { dtype = "float64" }))
    assert.equal("float32", f:dtype())
    T.assert_equal(f, { T.f32(1.5 + 0.1), T.f32(2.5 + 0.2) })
    local i = qlua.tensor({ 1, 2 }, { dtype = "int32" })
    i:add_(qlua.tensor({ 10, 20 }))
    assert.equal("int32", i:dtype())
    T.assert_equal(i, { 11, 22 })
  end)

  test("fill_ and zero_", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        local t = T.make(T.random_table({ 3, 4 }, dtype), dtype, layout)
        local v = T.random_value(dtype)
        assert.is_true(rawequal(t, t:fill_(v)))
        T.assert_equal(t, ref.expand({ v }, { 3, 4 }))
        assert.is_true(rawequal(t, t:zero_()))
        T.assert_equal(t, ref.expand({ 0 }, { 3, 4 }))
      end
    end
  end)
end)
