-- The 1-byte dtypes bool and uint8 (docs/API.md "Conventions" and "Arithmetic"):
-- creation, conversions by NumPy's rules, element access and printing, arithmetic and its
-- promotion, comparisons and the logical ops (which return bool), reductions, views and
-- .npy files, each against a plain-Lua reference; every case runs on the CPU and, as a
-- parity case, on the GPU (pending without one).
local T, qlua, _, _, both = require("qlua.testing").spec(_ENV)

local function check(t, dtype, expected, what)
  assert.equal(dtype, t:dtype(), (what or "") .. ": dtype")
  T.assert_equal(t, expected, what)
end

local function map(list, f)
  local out = {}
  for i, v in ipairs(list) do out[i] = f(v) end
  return out
end

local function truthy(x) return x ~= 0 end  -- NumPy's bool(x): NaN is true

local NAN = 0 / 0
local FLOATS = { 0.0, -0.0, 0.5, -2.75, 3.0, 255.9, 256.0, 300.0, -1.0, 1e30, -1e30, 1 / 0, -1 / 0, NAN }

describe("bool and uint8: creation and conversion", function()
  both("tables of booleans make bool tensors; mixed with numbers they count as 1 and 0", function(dev)
    check(qlua.tensor({ true, false, true }, { device = dev }), "bool", { true, false, true })
    check(qlua.tensor({ { true }, { false } }, { device = dev }), "bool", { { true }, { false } })
    check(qlua.tensor(true, { device = dev }), "bool", true)
    check(qlua.tensor({ true, 2, false }, { device = dev }), "int64", { 1, 2, 0 })
    check(qlua.tensor({ 2, 0, -1, 0.5 }, { dtype = "bool", device = dev }), "bool",
      { true, false, true, true })
    check(qlua.tensor({ 0, 7, 255 }, { dtype = "uint8", device = dev }), "uint8", { 0, 7, 255 })
    T.assert_error(function() return qlua.tensor({ 256 }, { dtype = "uint8" }) end, "tensor",
      "out of range for uint8")
    T.assert_error(function() return qlua.tensor({ -1 }, { dtype = "uint8" }) end, "tensor",
      "out of range for uint8")
  end)

  both("zeros, ones, full, eye, randint and arange make both dtypes", function(dev)
    local o = { dtype = "bool", device = dev }
    check(qlua.zeros(3, o), "bool", { false, false, false })
    check(qlua.ones(2, o), "bool", { true, true })
    check(qlua.full({ 2 }, true, o), "bool", { true, true })
    check(qlua.full({ 2 }, 0, o), "bool", { false, false })
    check(qlua.eye(2, o), "bool", { { true, false }, { false, true } })
    local u = { dtype = "uint8", device = dev }
    check(qlua.full({ 3 }, 200, u), "uint8", { 200, 200, 200 })
    check(qlua.arange(250, 253, u), "uint8", { 250, 251, 252 })
    local r = qlua.randint(0, 255, { 1000 }, u)
    assert.equal("uint8", r:dtype())
    for _, v in ipairs(r:totable()) do assert(v >= 0 and v <= 255, v) end
    local b = qlua.randint(0, 1, { 200 }, o)
    local trues = 0
    for _, v in ipairs(b:totable()) do
      assert.is_boolean(v)
      if v then trues = trues + 1 end
    end
    assert(trues > 50 and trues < 150, trues)
    T.assert_error(function() return qlua.randint(0, 256, 4, u) end, "randint", "do not fit uint8")
    T.assert_error(function() return qlua.full({ 2 }, 256, u) end, "full")
    T.assert_error(function() return qlua.full({ 2 }, 1.5, u) end, "full")
  end)

  both("conversions follow NumPy: nonzero is true, float to uint8 saturates, integers wrap", function(dev)
    for _, src in ipairs({ "float32", "float64" }) do
      local t = qlua.tensor(FLOATS, { dtype = src, device = dev })
      check(t:to("bool"), "bool", map(FLOATS, truthy), src .. " -> bool")
      local want = map(FLOATS, function(x)
        if x ~= x then return 0 end
        if x <= 0 then return 0 end
        if x >= 255 then return 255 end
        return math.floor(x)
      end)
      check(t:to("uint8"), "uint8", want, src .. " -> uint8")
    end
    local ints = { 0, 1, -1, 255, 256, 257, -256, 1000 }
    for _, src in ipairs({ "int32", "int64" }) do
      local t = qlua.tensor(ints, { dtype = src, device = dev })
      check(t:to("uint8"), "uint8", map(ints, function(x) return x & 0xFF end), src .. " -> uint8")
      check(t:to("bool"), "bool", map(ints, truthy), src .. " -> bool")
    end
    local u = qlua.tensor({ 0, 3, 255 }, { dtype = "uint8", device = dev })
    check(u:to("bool"), "bool", { false, true, true })
    check(u:to("int32"), "int32", { 0, 3, 255 })
    check(u:to("float32"), "float32", { 0, 3, 255 })
    local b = qlua.tensor({ true, false }, { device = dev })
    check(b:to("float64"), "float64", { 1, 0 })
    check(b:to("int64"), "int64", { 1, 0 })
    check(b:to("uint8"), "uint8", { 1, 0 })
    -- a view converts element by element
    local m = qlua.tensor({ { 0, 1.5 }, { -2, 0 } }, { device = dev }):t()
    check(m:to("bool"), "bool", { { false, true }, { true, false } })
  end)

  both("copy_ into bool and uint8 views converts", function(dev)
    local base = qlua.zeros(3, 4, { dtype = "bool", device = dev })
    base:narrow(2, 2, 2):copy_(qlua.tensor({ { 1, 0 }, { 0, 2 }, { 0.25, 0 } }, { device = dev }))
    T.assert_equal(base, { { false, true, false, false }, { false, false, true, false },
      { false, true, false, false } })
    local u = qlua.zeros(2, 2, { dtype = "uint8", device = dev })
    u:t():copy_(qlua.tensor({ { 1, 300 }, { -4, 7.9 } }, { device = dev }))
    T.assert_equal(u, { { 1, 0 }, { 255, 7 } })
  end)
end)

describe("bool and uint8: elements and printing", function()
  both("elements read back as booleans and integers, and take booleans", function(dev)
    local b = qlua.tensor({ true, false }, { device = dev })
    assert.is_true(b[1])
    assert.is_false(b[2])
    b[2] = true
    assert.is_true(b[2])
    b[1] = 0
    assert.is_false(b[1])
    assert.is_true(qlua.tensor(true, { device = dev }):item())
    assert.same({ false, true }, b:totable())
    local u = qlua.tensor({ 5 }, { dtype = "uint8", device = dev })
    assert.equal(5, u[1])
    assert.equal("integer", math.type(u[1]))
    u[1] = 255
    assert.equal(255, u:item())
    T.assert_error(function() u[1] = 256 end, "index", "out of range for uint8")
    T.assert_error(function() u[1] = 2.5 end, "index")
    local f = qlua.zeros(2)
    f[1] = true
    T.assert_equal(f, { 1, 0 })
  end)

  both("bool prints as true and false", function(dev)
    local s = tostring(qlua.tensor({ true, false }, { device = dev }))
    assert.is_truthy(s:find("[ true, false]", 1, true), s)
    assert.is_truthy(s:find("qlua.Tensor bool 2", 1, true), s)
    local u = tostring(qlua.tensor({ 7, 255 }, { dtype = "uint8", device = dev }))
    assert.is_truthy(u:find("[  7, 255]", 1, true), u)
    assert.is_truthy(tostring(qlua.tensor(false)):find("false", 1, true))
  end)
end)

describe("bool and uint8: arithmetic", function()
  local BOOLS = { true, true, false, false }
  local OTHER = { true, false, true, false }

  both("on bools, + is or, * is and, maximum/minimum or/and; - and unary - are refused", function(dev)
    local a = qlua.tensor(BOOLS, { device = dev })
    local b = qlua.tensor(OTHER, { device = dev })
    check(a + b, "bool", { true, true, true, false })
    check(a * b, "bool", { true, false, false, false })
    check(a:maximum(b), "bool", { true, true, true, false })
    check(a:minimum(b), "bool", { true, false, false, false })
    check(a / b, "float64", { 1, 1 / 0, 0, 0 / 0 })
    T.assert_error(function() return a - b end, "sub", "logical_xor")
    T.assert_error(function() return -a end, "neg", "logical_not")
    T.assert_error(function() return a:neg_() end, "neg_", "logical_not")
    -- with numbers and other dtypes: promotion
    check(a + 1, "int64", { 2, 2, 1, 1 })
    check(a * 1.5, "float64", { 1.5, 1.5, 0, 0 })
    check(a - 1, "int64", { 0, 0, -1, -1 })
    check(a + qlua.tensor({ 10, 20, 30, 40 }, { dtype = "int32", device = dev }), "int32",
      { 11, 21, 30, 40 })
    check(a * qlua.tensor({ 2, 2, 2, 2 }, { device = dev }), "int64", { 2, 2, 0, 0 })
    check(a + qlua.tensor({ 0.5, 0.5, 0.5, 0.5 }, { device = dev }), "float32", { 1.5, 1.5, 0.5, 0.5 })
    check(a:abs(), "bool", BOOLS)
    check(a:relu(), "bool", BOOLS)
    assert.equal("float64", a:exp():dtype())
    T.assert_close(a:exp(), { math.exp(1), math.exp(1), 1, 1 }, 1e-15)
  end)

  both("uint8 wraps like C, promotes like NumPy, and refuses numbers it cannot hold", function(dev)
    local xs, ys = { 200, 255, 0, 17 }, { 100, 1, 1, 3 }
    local x = qlua.tensor(xs, { dtype = "uint8", device = dev })
    local y = qlua.tensor(ys, { dtype = "uint8", device = dev })
    local function ref(f)
      local out = {}
      for i = 1, #xs do out[i] = f(xs[i], ys[i]) & 0xFF end
      return out
    end
    check(x + y, "uint8", ref(function(p, q) return p + q end))
    check(x - y, "uint8", ref(function(p, q) return p - q end))
    check(x * y, "uint8", ref(function(p, q) return p * q end))
    check(x ^ y, "uint8", ref(function(p, q) local r = 1; for _ = 1, q do r = r * p end; return r end))
    check(x:maximum(y), "uint8", { 200, 255, 1, 17 })
    check(x / y, "float64", { 2, 255, 0, 17 / 3 })
    check(-x, "uint8", map(xs, function(p) return (-p) & 0xFF end))
    check(x:abs(), "uint8", xs)
    check(x:clamp(10, 1000), "uint8", { 200, 255, 10, 17 })
    check(x:clamp(-5, 100), "uint8", { 100, 100, 0, 17 })
    assert.equal("float64", x:sqrt():dtype())
    T.assert_close(x:sqrt(), map(xs, math.sqrt), 1e-15)
    check(x + 1, "uint8", { 201, 0, 1, 18 })
    check(x + 0.5, "float64", { 200.5, 255.5, 0.5, 17.5 })
    T.assert_error(function() return x + 256 end, "add", "256 is out of range for a uint8 tensor")
    T.assert_error(function() return x - (-1) end, "sub", "-1 is out of range for a uint8 tensor")
    check(x + qlua.tensor({ 1, 1, 1, 1 }, { dtype = "int32", device = dev }), "int32", { 201, 256, 1, 18 })
    check(x + qlua.tensor({ 1, 1, 1, 1 }, { dtype = "float32", device = dev }), "float32", { 201, 256, 1, 18 })
    check(x + qlua.tensor({ 1, 1, 1, 1 }, { dtype = "int64", device = dev }), "int64", { 201, 256, 1, 18 })
    check(x + qlua.tensor({ 1, 1, 1, 1 }, { dtype = "float64", device = dev }), "float64", { 201, 256, 1, 18 })
    -- in place: a wider integer result is stored by conversion; a float one is refused
    local z = qlua.tensor({ 250, 3 }, { dtype = "uint8", device = dev })
    z:add_(qlua.tensor({ 10, 10 }, { dtype = "int64", device = dev }))
    T.assert_equal(z, { 4, 13 })
    T.assert_error(function() z:add_(0.5) end, "add_", "cannot store float64 result in uint8 tensor")
  end)

  both("the promotion table of docs/API.md", function(dev)
    local names = { "bool", "uint8", "int32", "int64", "float32", "float64" }
    local table_ = {
      bool = { "bool", "uint8", "int32", "int64", "float32", "float64" },
      uint8 = { "uint8", "uint8", "int32", "int64", "float32", "float64" },
      int32 = { "int32", "int32", "int32", "int64", "float64", "float64" },
      int64 = { "int64", "int64", "int64", "int64", "float64", "float64" },
      float32 = { "float32", "float32", "float64", "float64", "float32", "float64" },
      float64 = { "float64", "float64", "float64", "float64", "float64", "float64" },
    }
    for _, a in ipairs(names) do
      for j, b in ipairs(names) do
        local ta = qlua.ones(2, { dtype = a, device = dev })
        local tb = qlua.ones(2, { dtype = b, device = dev })
        assert.equal(table_[a][j], (ta:maximum(tb)):dtype(), a .. " with " .. b)
        assert.equal(table_[a][j], T.promote(a, b), "testing.lua's promote: " .. a .. " with " .. b)
      end
    end
  end)

  both("in place into a bool tensor: bool results only", function(dev)
    local b = qlua.tensor({ true, false }, { device = dev })
    b:add_(qlua.tensor({ false, true }, { device = dev }))
    T.assert_equal(b, { true, true })
    T.assert_error(function() b:add_(1) end, "add_", "cannot store int64 result in bool tensor")
    T.assert_error(function() b:mul_(qlua.tensor({ 1.5, 2 }, { device = dev })) end, "mul_",
      "cannot store float32 result in bool tensor")
    local f = qlua.tensor({ 1.0, -1.0, 3.0 }, { device = dev })
    f:lt_(0)  -- a bool result stored as 1 and 0
    T.assert_equal(f, { 0, 1, 0 })
    assert.equal("float32", f:dtype())
  end)
end)

describe("comparisons and the logical ops", function()
  local CMP = {
    eq = function(a, b) return a == b end, ne = function(a, b) return a ~= b end,
    lt = function(a, b) return a < b end, le = function(a, b) return a <= b end,
    gt = function(a, b) return a > b end, ge = function(a, b) return a >= b end,
  }
  local function n(v) if type(v) == "boolean" then return v and 1 or 0 end return v end

  both("comparisons give bool for every dtype pair, on views", function(dev)
    for _, da in ipairs(T.all_dtypes) do
      for _, db in ipairs({ da, "int32", "float32", "bool" }) do
        local a = T.random_table({ 3, 4 }, da, { lo = 0, hi = 3, zero = true })
        local b = T.random_table({ 3, 4 }, db, { lo = 0, hi = 3, zero = true })
        local ta = T.make(a, da, "transposed", dev)
        local tb = T.make(b, db, "stepped", dev)
        for name, f in pairs(CMP) do
          local want = T.ref.map2(a, b, function(x, y) return f(n(x), n(y)) end)
          check(ta[name](ta, tb), "bool", want, name .. "(" .. da .. ", " .. db .. ")")
        end
      end
    end
  end)

  both("comparisons with numbers and booleans; bool compared with 2 is exact", function(dev)
    local b = qlua.tensor({ true, false }, { device = dev })
    check(b:eq(true), "bool", { true, false })
    check(b:eq(1), "bool", { true, false })
    check(b:eq(2), "bool", { false, false })
    check(b:lt(0.5), "bool", { false, true })
    local u = qlua.tensor({ 0, 200 }, { dtype = "uint8", device = dev })
    check(u:gt(-1), "bool", { true, true })
    check(u:lt(300), "bool", { true, true })
    check(u:eq(200), "bool", { false, true })
  end)

  both("logical_and/or/xor/not read any dtype through nonzero", function(dev)
    local xs = { 0, 1, -2.5, NAN, 0, 3 }
    local ys = { 0, 0, 1, 0, 4, -1 }
    for _, dt in ipairs(T.all_dtypes) do
      local xa, ya = {}, {}
      for i = 1, #xs do
        local x, y = xs[i], ys[i]
        if not T.is_float_dtype(dt) then
          x = (x ~= x) and 7 or math.tointeger(math.floor(math.abs(x)))
          y = math.tointeger(math.abs(y))
        end
        xa[i], ya[i] = T.as_dtype(x, dt), T.as_dtype(y, dt)
      end
      local tx = T.make(xa, dt, "narrowed", dev)
      local ty = T.make(ya, dt, "contiguous", dev)
      local function tr(v) if type(v) == "boolean" then return v end return v ~= 0 end
      check(tx:logical_and(ty), "bool", T.ref.map2(xa, ya, function(p, q) return tr(p) and tr(q) end), dt)
      check(tx:logical_or(ty), "bool", T.ref.map2(xa, ya, function(p, q) return tr(p) or tr(q) end), dt)
      check(tx:logical_xor(ty), "bool", T.ref.map2(xa, ya, function(p, q) return tr(p) ~= tr(q) end), dt)
      check(tx:logical_not(), "bool", T.ref.map(xa, function(p) return not tr(p) end), dt)
      check(tx:logical_and(true), "bool", T.ref.map(xa, tr), dt .. " and true")
      check(tx:logical_or(0), "bool", T.ref.map(xa, tr), dt .. " or 0")
    end
    -- in place keeps self's dtype, storing 1 and 0
    local f = qlua.tensor({ 2, 0, 5 }, { device = dev })
    f:logical_and_(qlua.tensor({ 1, 1, 0 }, { device = dev }))
    T.assert_equal(f, { 1, 0, 0 })
    local b = qlua.tensor({ true, false }, { device = dev })
    b:logical_not_()
    T.assert_equal(b, { false, true })
    T.assert_error(function() b:logical_and(qlua.zeros(3, { device = dev })) end, "logical_and",
      "cannot be broadcast")
  end)

  both("a comparison mask drives arithmetic: mask * x and mask:sum()", function(dev)
    local x = qlua.tensor({ -1.0, 2.0, -3.0, 4.0 }, { device = dev })
    local m = x:gt(0)
    check(m, "bool", { false, true, false, true })
    check(m * x, "float32", { 0, 2, 0, 4 })
    assert.equal(2, m:sum())
    assert.equal("integer", math.type(m:sum()))
  end)
end)

describe("bool and uint8: reductions", function()
  both("sum counts bools as int64; max/min/argmax work; mean is float64", function(dev)
    local b = qlua.tensor({ { true, false, true }, { false, false, true } }, { device = dev })
    assert.equal(3, b:sum())
    check(b:sum(1), "int64", { 1, 0, 2 })
    check(b:sum(2), "int64", { 2, 1 })
    assert.is_true(b:max())
    assert.is_false(b:min())
    assert.equal(1, b:argmax())
    assert.equal(2, b:argmin())
    local v, i = b:max(2)
    check(v, "bool", { true, true })
    check(i, "int64", { 1, 3 })
    check(b:mean(1), "float64", { 0.5, 0, 1 })
    assert.equal(0, qlua.zeros(0, { dtype = "bool", device = dev }):sum())
    local u = qlua.tensor({ 200, 255, 7 }, { dtype = "uint8", device = dev })
    assert.equal(462, u:sum())
    assert.equal(255, u:max())
    assert.equal(7, u:min())
    assert.equal(2, u:argmax())
    check(u:view(3, 1):t():sum(1), "int64", { 200, 255, 7 })
    -- a strided view of a larger bool tensor (the rows path and the generic path)
    local big = qlua.rand(64, 257, { device = dev }):gt(0.5)
    local flat = T.flatten(big:totable())
    local count = 0
    for _, x in ipairs(flat) do if x then count = count + 1 end end
    assert.equal(count, big:sum())
    assert.equal(count, big:t():sum())
    assert.equal(count, big:sum(1):sum())
  end)
end)

describe("bool and uint8: files and products", function()
  both(".npy round trips |b1 and |u1", function(dev)
    local dir = os.tmpname()
    os.remove(dir)
    local p = dir .. ".npy"
    local b = qlua.tensor({ { true, false }, { false, true } }, { device = dev })
    qlua.save(p, b:t())
    local l = qlua.load(p, { device = dev })
    check(l, "bool", { { true, false }, { false, true } })
    local u = qlua.tensor({ 0, 128, 255 }, { dtype = "uint8", device = dev })
    qlua.save(p, u)
    check(qlua.load(p), "uint8", { 0, 128, 255 })
    local f = assert(io.open(p, "rb"))
    local bytes = f:read("a")
    f:close()
    assert.is_truthy(bytes:find("'descr': '|u1'", 1, true), "the header says |u1")
    -- a |b1 file whose bytes are not 0 and 1: nonzero is true
    local header = "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }"
    header = header .. string.rep(" ", 64 - 10 - #header - 1) .. "\n"
    f = assert(io.open(p, "wb"))
    f:write("\147NUMPY\1\0" .. string.pack("<I2", #header) .. header .. "\0\2\255")
    f:close()
    check(qlua.load(p), "bool", { false, true, true })
    os.remove(p)
  end)

  both("matmul of bool or uint8 is a clear error", function(dev)
    for _, dt in ipairs(T.small_dtypes) do
      local a = qlua.ones(2, 2, { dtype = dt, device = dev })
      T.assert_error(function() return a:matmul(a) end, "matmul")
    end
  end)
end)
