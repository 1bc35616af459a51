-- Elementwise arithmetic and math (docs/API.md "Arithmetic"): every binary and unary op,
-- the operators with numbers on either side, broadcasting, NumPy dtype promotion, in-place
-- ops and their dtype errors, comparisons; the trigonometric, hyperbolic, rounding,
-- exponential and special functions, isnan/isinf/isfinite, nan_to_num, the binary atan2,
-- hypot, fmod, remainder (Lua's %), floor_divide (Lua's //), lerp and addcmul_/addcdiv_.
-- Each op is checked against a Lua reference (T.ref) computed in float64 (or exact
-- integers) from the values the tensors hold, on every layout; the second part's cases run
-- on the CPU and, as parity cases, on the GPU.
local T, qlua, test, _, both = require("qlua.testing").spec(_ENV)

-- ==================== arithmetic: binary and unary ops, operators, promotion, in place

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

-- ======== math functions, isnan ... nan_to_num, atan2 ... floor_divide, lerp, addcmul_

local NAN, INF = 0 / 0, math.huge
local sqrt = math.sqrt

-- The ops this part tests: those of T.ref.unary with an input range for it (data).
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

-- ==================== every op the binding makes from scalar.h's lists

-- The op lists come from where the runtime makes its methods (T.op_list: the registry's
-- qlua.ops), so a new op in scalar.h is tested here by itself, and fails here until it has
-- a plain-Lua reference in qlua.testing (T.ref.unary, T.ref.binary).
describe("the ops made from the op lists", function()
  it("each has a plain-Lua reference", function()
    for _, list in ipairs({ "unary", "unary_bool" }) do
      for _, name in ipairs(T.op_list(list)) do
        assert(ref.unary[name], name .. ": no plain-Lua reference in qlua.testing (T.ref.unary)")
      end
    end
    for _, name in ipairs(T.op_list("binary")) do
      assert(ref.binary[name], name .. ": no plain-Lua reference in qlua.testing (T.ref.binary)")
    end
  end)

  both("each matches its reference on float64, strided, with NaN and infinities", function(dev)
    local specials = { 0 / 0, math.huge, -math.huge }
    for _, name in ipairs(T.op_list("unary")) do
      local r = ref.unary[name]
      local lo, hi = table.unpack(r.data or (r.positive and { 0.1, 4 }) or { -2, 2 })
      local xs = {}
      for k = 1, 12 do xs[k] = lo + (hi - lo) * (k - 0.5) / 12 end
      local t = qlua.tensor(xs, { dtype = "float64", device = dev }):view(3, 4):t()
      local want = {}
      for k, x in ipairs(T.flatten(t:totable())) do want[k] = r.f(x) end
      T.assert_close(T.flatten(t[name](t):totable()), want, 1e-12, name)
    end
    for _, name in ipairs(T.op_list("unary_bool")) do
      local xs = { -1.5, 0, 2, specials[1], specials[2], specials[3] }
      local t = qlua.tensor(xs, { dtype = "float64", device = dev })
      local want = {}
      for k, x in ipairs(xs) do want[k] = ref.unary[name].f(x) end
      T.assert_equal(t[name](t), want, name)
    end
    for _, name in ipairs(T.op_list("binary")) do
      local r = ref.binary[name]
      local as, bs = {}, {}
      for k = 1, 12 do
        as[k] = 0.25 + 0.4 * k
        bs[k] = (k % 5 - 2) * 0.75
        if r.nonzero and bs[k] == 0 then bs[k] = 1.25 end
      end
      local a = qlua.tensor(as, { dtype = "float64", device = dev }):view(4, 3):t()
      local b = qlua.tensor(bs, { dtype = "float64", device = dev }):view(4, 3):t()
      local fa, fb = T.flatten(a:totable()), T.flatten(b:totable())
      local want = {}
      for k = 1, #fa do want[k] = r.f(fa[k], fb[k], "float64") end
      local got = T.flatten(a[name](a, b):totable())
      if r.cmp then T.assert_equal(got, want, name) else T.assert_close(got, want, 1e-12, name) end
    end
  end)
end)
