-- Reductions (docs/API.md "Reductions"): sum, mean, max, min, argmax, argmin over all
-- elements (a Lua number) and along a dim (a tensor without that dim), with their result
-- dtypes, NaN, ties and empty inputs; keepdim, dim lists, and prod, var, std, norm,
-- logsumexp, amax, amin, aminmax against plain-Lua references (two-pass float64 variance,
-- max-subtracted logsumexp). The second part's bodies run on the CPU and, through gtest, on
-- the GPU, where each result is also compared with the CPU's (parity).
local T, qlua, test, gtest = require("qlua.testing").spec(_ENV)

-- ================================================= sum, mean, max, min, argmax, argmin

local ref = T.ref

local OPS = { "sum", "mean", "max", "min", "argmax", "argmin" }

local function tol_of(dtype) return T.is_float_dtype(dtype) and T.tol[dtype] or 1e-12 end

-- Integer data with few distinct values makes ties likely.
local function data_for(shape, dtype, ties)
  if ties then
    local list = {}
    for i = 1, T.numel(shape) do
      local v = math.random(1, 3)
      list[i] = T.is_float_dtype(dtype) and v + 0.0 or v
    end
    return T.unflatten(list, shape)
  end
  return T.random_table(shape, dtype)
end

describe("reductions over all elements", function()
  test("return Lua numbers matching the reference in every dtype and layout", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        for _, ties in ipairs({ false, true }) do
          local data = data_for({ 4, 5, 3 }, dtype, ties)
          local t = T.make(data, dtype, layout)
          for _, op in ipairs(OPS) do
            local what = op .. " " .. dtype .. " " .. layout .. (ties and " ties" or "")
            local got = t[op](t)
            local want = ref.reduce(op, data)
            assert.is_number(got, what)
            if op == "argmax" or op == "argmin" then
              assert.equal(want, got, what)
              assert.equal("integer", math.type(got), what)
            elseif T.is_float_dtype(dtype) or op == "mean" then
              T.assert_close(got, want, tol_of(dtype), what)
            else
              assert.equal(want, got, what)
              assert.equal("integer", math.type(got), what .. ": an integer")
            end
          end
        end
      end
    end
  end)

  test("sums integers in int64 and floats with float64 accumulation", function()
    local big = qlua.full(10, 1 << 30, { dtype = "int32" })
    assert.equal(10 * (1 << 30), big:sum())
    -- 2^24 followed by 1000 ones: float32 accumulation would lose every 1
    local list = { 2.0 ^ 24 }
    for i = 2, 1001 do list[i] = 1.0 end
    assert.equal(2 ^ 24 + 1000, qlua.tensor(list):sum())
    local m = qlua.tensor(list):view(1, 1001)
    assert.equal(2 ^ 24 + 1000, m:sum(2):item())
    assert.equal("float32", m:sum(2):dtype())
  end)

  test("int64 sums, max and argmax are exact beyond 2^53", function()
    local big = 1 << 60
    local t = qlua.tensor({ big, 1, 2, big + 1 })
    assert.equal(2 * big + 4, t:sum())
    assert.equal(big + 1, t:max())
    assert.equal(4, t:argmax())
    assert.equal(1, t:min())
    T.assert_equal(t:view(2, 2):sum(1), { big + 2, big + 2 })
    T.assert_equal(t:view(2, 2):sum(2), { big + 1, big + 3 })
    local v, i = t:view(2, 2):max(2)
    T.assert_equal(v, { big, big + 1 })
    T.assert_equal(i, { 1, 2 })
  end)

  test("mean of integers is a float", function()
    local t = qlua.tensor({ 1, 2, 3, 5 })
    assert.equal(2.75, t:mean())
    assert.equal("float", math.type(t:mean()))
    assert.equal(2.75, qlua.tensor({ 1, 2, 3, 5 }, { dtype = "int32" }):mean())
  end)

  test("max and min of integers are integers", function()
    local t = qlua.tensor({ 3, -7, 12 }, { dtype = "int32" })
    assert.equal(12, t:max())
    assert.equal(-7, t:min())
    assert.equal("integer", math.type(t:max()))
  end)

  test("ties go to the first position", function()
    local t = qlua.tensor({ 3, 7, 1, 7, 1 })
    assert.equal(2, t:argmax())
    assert.equal(3, t:argmin())
    local f = qlua.tensor({ { 2.5, 9 }, { 1, 9 } })
    assert.equal(2, f:argmax())
    assert.equal(3, f:argmin())
    -- flat positions follow the logical row-major order, not the storage order
    assert.equal(3, f:t():argmax())
    assert.equal(2, f:t():argmin())
  end)

  test("NaN propagates through max and min", function()
    local t = qlua.tensor({ 1, 0 / 0, 3 })
    assert.is_true(T.isnan(t:max()))
    assert.is_true(T.isnan(t:min()))
    assert.is_true(T.isnan(t:sum()))
    assert.is_true(T.isnan(qlua.tensor({ 0 / 0, 1, 2 }, { dtype = "float64" }):max()))
    assert.is_true(T.isnan(qlua.tensor({ 1, 2, 0 / 0 }, { dtype = "float64" }):min()))
  end)

  -- The compensated sums once computed inf - inf for their correction and gave NaN.
  test("sums and means with infinities are infinite, not NaN", function()
    local inf = math.huge
    for _, dtype in ipairs({ "float32", "float64" }) do
      assert.equal(inf, qlua.tensor({ 1, inf }, { dtype = dtype }):sum())
      assert.equal(-inf, qlua.tensor({ -inf, 2.5, 1 }, { dtype = dtype }):sum())
      assert.equal(inf, qlua.tensor({ 1, inf, 3 }, { dtype = dtype }):mean())
      assert.is_true(T.isnan(qlua.tensor({ inf, 1, -inf }, { dtype = dtype }):sum()))
      -- a long run (the pairwise blocks) with one inf in the middle
      local long = qlua.rand(5000, { dtype = dtype })
      long[2500] = inf
      assert.equal(inf, long:sum())
      -- along each dim: the vertical (dim 1) and horizontal (dim 2) loops
      local m = qlua.tensor({ { 1, inf, 2 }, { 3, 4, -inf }, { 5, 6, 7 } }, { dtype = dtype })
      T.assert_equal(m:sum(1), qlua.tensor({ 9, inf, -inf }, { dtype = dtype }))
      T.assert_equal(m:sum(2), qlua.tensor({ inf, -inf, 18 }, { dtype = dtype }))
      T.assert_equal(m:mean(1), qlua.tensor({ 3, inf, -inf }, { dtype = dtype }))
      local tall = qlua.rand(300, 4, { dtype = dtype })
      tall[17][2] = inf
      tall[200][3] = -inf
      local s = tall:sum(1)
      assert.equal(inf, s[2])
      assert.equal(-inf, s[3])
      assert.is_false(T.isnan(s[1]) or T.isnan(s[4]))
    end
    -- float64 sums that overflow are infinite too
    assert.equal(inf, qlua.tensor({ 1e308, 1e308 }, { dtype = "float64" }):sum())
  end)

  test("empty input: sum 0, mean NaN, the others an error", function()
    for _, dtype in ipairs(T.dtypes) do
      local e = qlua.zeros(0, { dtype = dtype })
      assert.equal(0, e:sum())
      assert.is_true(T.isnan(e:mean()))
      for _, op in ipairs({ "max", "min", "argmax", "argmin" }) do
        T.assert_error(function() local _ = e[op](e) end, op)
      end
    end
    assert.equal(0, qlua.zeros(3, 0):sum())
  end)

  test("a 0-d tensor reduces to its value", function()
    local s = qlua.tensor(4.5)
    assert.equal(4.5, s:sum())
    assert.equal(4.5, s:max())
    assert.equal(1, s:argmax())
  end)
end)

describe("reductions along a dim", function()
  test("remove the dim and match the reference in every dtype, layout and dim", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        for _, ties in ipairs({ false, true }) do
          local data = data_for({ 3, 4, 5 }, dtype, ties)
          local t = T.make(data, dtype, layout)
          for dim = 1, 3 do
            for _, op in ipairs(OPS) do
              local what = string.format("%s(%d) %s %s%s", op, dim, dtype, layout, ties and " ties" or "")
              local r, idx = t[op](t, dim)
              local rd = T.result_dtype(op, dtype)
              local want, want_idx = ref.reduce(op, data, dim)
              local shape = { 3, 4, 5 }
              table.remove(shape, dim)
              T.assert_shape(r, shape, what)
              assert.equal(rd, r:dtype(), what)
              if T.is_float_dtype(rd) then T.assert_close(r, want, tol_of(rd), what)
              else T.assert_equal(r, want, what) end
              if op == "max" or op == "min" then
                assert.is_true(qlua.is_tensor(idx), what .. " returns indices")
                assert.equal("int64", idx:dtype(), what)
                T.assert_shape(idx, shape, what)
                T.assert_equal(idx, want_idx, what .. " indices")
              end
            end
          end
        end
      end
    end
  end)

  test("of a 1-D tensor give 0-d tensors", function()
    local t = qlua.tensor({ 4, 9, 2 })
    local s = t:sum(1)
    assert.is_true(qlua.is_tensor(s))
    assert.equal(0, s:dim())
    assert.equal(15, s:item())
    local v, i = t:max(1)
    assert.equal(9, v:item())
    assert.equal(2, i:item())
  end)

  test("NaN propagates along the dim", function()
    local t = qlua.tensor({ { 1, 0 / 0, 3 }, { 4, 5, 6 } })
    local mx = t:max(2):totable()
    assert.is_true(T.isnan(mx[1]))
    assert.equal(6, mx[2])
    local mn = t:min(1):totable()
    assert.is_true(T.isnan(mn[2]))
    assert.equal(1, mn[1])
  end)

  test("over an empty dim: sum gives zeros, max is an error", function()
    local e = qlua.zeros(0, 3)
    T.assert_equal(e:sum(1), { 0, 0, 0 })
    T.assert_shape(e:sum(2), { 0 })
    local m = e:mean(1):totable()
    assert.is_true(T.isnan(m[1]))
    T.assert_error(function() local _ = e:max(1) end, "max")
    T.assert_error(function() local _ = e:argmin(1) end, "argmin")
  end)

  test("refuse dims out of range", function()
    local t = qlua.zeros(2, 3)
    for _, op in ipairs(OPS) do
      T.assert_error(function() local _ = t[op](t, 3) end, op)
      T.assert_error(function() local _ = t[op](t, 0) end, op)
      T.assert_error(function() local _ = t[op](t, -1) end, op)
    end
  end)

  test("on bigger random data", function()
    local data = T.random_table({ 64, 200 }, "float32")
    local t = T.make(data, "float32", "transposed")
    T.assert_close(t:sum(1), ref.reduce("sum", data, 1), 1e-6)
    T.assert_close(t:mean(2), ref.reduce("mean", data, 2), 1e-6)
    T.assert_close(t:sum(), ref.reduce("sum", data), 1e-6)
    T.assert_equal(t:argmax(2), ref.reduce("argmax", data, 2))
    assert.equal(ref.reduce("argmin", data), t:argmin())
  end)
end)

-- ============ keepdim, dim lists, prod, var, std, norm, logsumexp, amax, amin, aminmax

local inf, nan = math.huge, 0 / 0

-- ---------------------------------------------------------------- references

-- The groups a reduction over `dims` (a set; nil: every dim) makes of a flat list of
-- shape: the result shape (keepdim or not) and, per result element in row-major order, the
-- list of its elements in row-major order.
local function groups(flat, shape, dims, keepdim)
  local red = {}
  if dims == nil then for d = 1, #shape do red[d] = true end
  else for _, d in ipairs(dims) do red[d] = true end end
  local oshape = {}
  for d = 1, #shape do
    if not red[d] then oshape[#oshape + 1] = shape[d]
    elseif keepdim then oshape[#oshape + 1] = 1 end
  end
  local ostrides, n = {}, 1
  for d = #shape, 1, -1 do
    if not red[d] then ostrides[d] = n; n = n * shape[d] end
  end
  local out = {}
  for i = 1, n do out[i] = {} end
  T.each_index(shape, function(pos)
    local o = 1
    for d = 1, #shape do if not red[d] then o = o + (pos[d] - 1) * ostrides[d] end end
    local list = out[o]
    list[#list + 1] = flat[T.linear(shape, pos)]
  end)
  return oshape, out
end

local function isnan(x) return x ~= x end

-- References over a flat list of one reduction group's values.
local list_ref = {}
function list_ref.sum(l) local s = 0 for _, x in ipairs(l) do s = s + x end return s end
function list_ref.mean(l) return #l == 0 and nan or list_ref.sum(l) / #l end
function list_ref.prod(l) local p = 1 for _, x in ipairs(l) do p = p * x end return p end
function list_ref.amax(l)
  local m = -inf
  for _, x in ipairs(l) do if isnan(x) then return nan end if x > m then m = x end end
  return m
end
function list_ref.amin(l)
  local m = inf
  for _, x in ipairs(l) do if isnan(x) then return nan end if x < m then m = x end end
  return m
end
-- two passes in float64: the mean, then the squared deviations from it
function list_ref.var(l, correction)
  correction = correction or 1
  local n = #l
  local mean = 0.0
  for _, x in ipairs(l) do mean = mean + x end
  mean = mean / n
  local m2 = 0.0
  for _, x in ipairs(l) do m2 = m2 + (x - mean) * (x - mean) end
  local divisor = math.max(0, n - correction)
  return m2 / divisor
end
function list_ref.std(l, correction) return math.sqrt(list_ref.var(l, correction)) end
function list_ref.norm(l, p)
  p = p or 2
  if p == inf or p == -inf then
    local best = p == inf and 0 or inf
    for _, x in ipairs(l) do
      local a = math.abs(x)
      if isnan(a) then return nan end
      if (p == inf and a > best) or (p == -inf and a < best) then best = a end
    end
    return best
  end
  local s = 0.0
  for _, x in ipairs(l) do
    if p == 0 then s = s + (x ~= 0 and 1 or 0) else s = s + math.abs(x) ^ p end
  end
  if p == 0 or p == 1 then return s end
  return s ^ (1 / p)
end
function list_ref.logsumexp(l)
  local m = -inf
  for _, x in ipairs(l) do if isnan(x) then return nan end if x > m then m = x end end
  if m == inf or m == -inf then return m end
  local s = 0.0
  for _, x in ipairs(l) do s = s + math.exp(x - m) end
  return m + math.log(s)
end

-- ---------------------------------------------------------------- checking

-- for the results computed in two passes or through exp/log (var, std, norm, logsumexp)
local function loose_tol_of(dtype) return dtype == "float32" and 2e-6 or 1e-11 end

-- Calls t[op](t, ...) and, for a GPU tensor, the same on t:cpu(), checking that the two
-- agree (the parity check); returns the first result.
local function call(t, op, ...)
  local all = table.pack(t[op](t, ...))
  local r = all[1]
  if t:device() ~= "cpu" then
    local c = t:cpu()
    local rc = c[op](c, ...)
    local what = op .. " gpu vs cpu"
    if qlua.is_tensor(r) then
      assert.equal(rc:dtype(), r:dtype(), what)
      if T.is_float_dtype(r:dtype()) then T.assert_close(r:cpu(), rc, loose_tol_of(r:dtype()), what)
      else T.assert_equal(r:cpu(), rc, what) end
    elseif type(r) == "number" and math.type(r) == "float" then
      T.assert_close(r, rc, loose_tol_of(t:dtype() == "float32" and "float32" or "float64"), what)
    else
      assert.equal(rc, r, what)
    end
  end
  return table.unpack(all, 1, all.n)
end

-- Checks a tensor result r against reference values `want` (a flat list) of shape.
local function check(r, shape, dtype, want, what)
  assert.is_true(qlua.is_tensor(r), what .. ": a tensor")
  T.assert_shape(r, shape, what)
  assert.equal(dtype, r:dtype(), what .. " dtype")
  local got = T.numbers((T.values_of(r)))
  if T.is_float_dtype(dtype) then
    T.assert_close(got, want, loose_tol_of(dtype), what)
  else
    for i = 1, #want do
      if got[i] ~= want[i] then
        error(string.format("%s: element %d is %s, expected %s", what, i, tostring(got[i]),
          tostring(want[i])))
      end
    end
  end
end

-- The reference of op over the groups (opts: the correction or p).
local function want_of(op, gs, arg)
  local w = {}
  for i, l in ipairs(gs) do w[i] = list_ref[op](l, arg) end
  return w
end

-- ---------------------------------------------------------------- the bodies
-- Each takes a device; they run on "cpu" below, and on "gpu" through gtest.

local SET_OPS = { "sum", "mean", "amax", "amin", "var", "std", "norm", "logsumexp" }
local bodies = {}
local function body(name, fn) bodies[#bodies + 1] = { name = name, fn = fn } end

-- how each op is called with dims d and keepdim k
local function invoke(t, op, d, k)
  if op == "norm" then return call(t, "norm", 2, d, k) end
  return call(t, op, d, k)
end

-- Small integers (-3..3), so that sums and products stay exact.
local function small_data_for(shape, dtype)
  if dtype == "bool" or dtype == "uint8" then return T.random_table(shape, dtype) end
  return T.random_table(shape, dtype, T.is_float_dtype(dtype) and nil or { lo = -3, hi = 3 })
end

body("keepdim keeps the reduced dim as size 1 for every reduction, dtype and layout", function(dev)
  local shape = { 3, 4, 5 }
  for _, dtype in ipairs(T.all_dtypes) do
    for _, layout in ipairs(T.layouts) do
      local t = T.make(small_data_for(shape, dtype), dtype, layout, dev)
      local flat = T.numbers((T.values_of(t)))
      for dim = 1, 3 do
        local oshape, gs = groups(flat, shape, { dim }, true)
        local ops = { "sum", "mean", "prod", "amax", "amin", "var", "std", "norm", "logsumexp" }
        for _, op in ipairs(ops) do
          local what = string.format("%s(%d, true) %s %s %s", op, dim, dtype, layout, dev)
          local rd = T.result_dtype(op, dtype)
          local want = want_of(op, gs)
          if rd == "bool" then for i, v in ipairs(want) do want[i] = v ~= 0 and 1 or 0 end end
          check(invoke(t, op, dim, true), oshape, rd, want, what)
        end
        -- max/min keep it on the values and the indices; argmax/argmin too
        for _, op in ipairs({ "max", "min" }) do
          local what = string.format("%s(%d, true) %s %s %s", op, dim, dtype, layout, dev)
          local v, i = call(t, op, dim, true)
          T.assert_shape(v, oshape, what)
          T.assert_shape(i, oshape, what .. " indices")
          local v2, i2 = t[op](t, dim)
          T.assert_equal(v:view(table.unpack(v2:shape())), v2, what)
          T.assert_equal(i:view(table.unpack(i2:shape())), i2, what .. " indices")
          local a = call(t, "arg" .. op, dim, true)
          T.assert_equal(a, i, what .. " arg")
        end
        local lo, hi = call(t, "aminmax", dim, true)
        T.assert_equal(lo, t:amin(dim, true), "aminmax min " .. dtype)
        T.assert_equal(hi, t:amax(dim, true), "aminmax max " .. dtype)
      end
      -- no dim, keepdim: every dim kept as size 1
      local r = call(t, "sum", nil, true)
      T.assert_shape(r, { 1, 1, 1 }, "sum(nil, true)")
    end
  end
end)

body("dim lists reduce those dims together, in any order and layout", function(dev)
  local shape = { 3, 4, 5 }
  local lists = { { 1, 3 }, { 3, 1 }, { 2, 3 }, { 1, 2 }, { 1, 2, 3 }, { 2 } }
  for _, dtype in ipairs({ "float32", "float64", "int32", "int64", "uint8", "bool" }) do
    for _, layout in ipairs(T.layouts) do
      local t = T.make(small_data_for(shape, dtype), dtype, layout, dev)
      local flat = T.numbers((T.values_of(t)))
      for _, dims in ipairs(lists) do
        for _, keepdim in ipairs({ false, true }) do
          local oshape, gs = groups(flat, shape, dims, keepdim)
          for _, op in ipairs(SET_OPS) do
            local what = string.format("%s({%s}, %s) %s %s %s", op, table.concat(dims, ","),
              tostring(keepdim), dtype, layout, dev)
            local rd = T.result_dtype(op, dtype)
            local want = want_of(op, gs)
            if rd == "bool" then for i, v in ipairs(want) do want[i] = v ~= 0 and 1 or 0 end end
            check(invoke(t, op, dims, keepdim), oshape, rd, want, what)
          end
        end
      end
    end
  end
end)

body("var and std take a correction, a keepdim flag or a table of both", function(dev)
  local data = T.random_table({ 4, 6 }, "float64")
  local t = T.make(data, "float64", "transposed", dev)
  local flat = T.numbers((T.values_of(t)))
  for _, c in ipairs({ 0, 1, 2, 0.5 }) do
    local _, all = groups(flat, { 4, 6 }, nil, false)
    T.assert_close(call(t, "var", nil, c), list_ref.var(all[1], c), 1e-12, "var(nil, " .. c .. ")")
    T.assert_close(call(t, "std", nil, { correction = c }), list_ref.std(all[1], c), 1e-12, "std")
    local oshape, gs = groups(flat, { 4, 6 }, { 2 }, true)
    check(call(t, "var", 2, { correction = c, keepdim = true }), oshape, "float64",
      want_of("var", gs, c), "var(2, {correction, keepdim})")
    check(call(t, "std", { 2 }, { correction = c, keepdim = true }), oshape, "float64",
      want_of("std", gs, c), "std({2}, {...})")
  end
  local oshape, gs = groups(flat, { 4, 6 }, { 1 }, true)
  check(call(t, "var", 1, true), oshape, "float64", want_of("var", gs, 1), "var(1, true)")
  -- correction >= n: the divisor is 0, so inf (or NaN for 0/0), as PyTorch
  local two = T.make({ 1.0, 2.0 }, "float64", "contiguous", dev)
  assert.equal(inf, call(two, "var", nil, 2))
  assert.equal(inf, call(two, "var", nil, 5))
  assert.equal(inf, call(two, "std", nil, 3))
  assert.is_true(isnan(call(T.make({ 3.0 }, "float64", "contiguous", dev), "var")))
  assert.is_true(isnan(call(T.make({ 3.0, 3.0 }, "float32", "contiguous", dev), "var", nil, 2)))
  assert.equal(0.25, call(two, "var", nil, 0))
end)

body("var is not the naive sum of squares: 1e9 + noise keeps its variance", function(dev)
  -- float64: values 1e9 + u, u in [0, 1). E[x^2] - E[x]^2 cancels 18 digits.
  local list = {}
  for i = 1, 4000 do list[i] = 1e9 + math.random() end
  local naive_s, naive_s2 = 0.0, 0.0
  for _, x in ipairs(list) do naive_s = naive_s + x; naive_s2 = naive_s2 + x * x end
  local n = #list
  local naive = (naive_s2 - naive_s * naive_s / n) / (n - 1)
  local want = list_ref.var(list)
  assert.is_true(math.abs(naive - want) > 0.1 * want, "the naive formula fails on this data")
  local t = qlua.tensor(list, { dtype = "float64", device = dev })
  T.assert_close(call(t, "var"), want, 1e-9, "var 1e9 + noise")
  T.assert_close(call(t:view(40, 100), "var", 2), want_of("var", select(2, groups(list, { 40, 100 }, { 2 }))), 1e-8, "rows")
  T.assert_close(call(t:view(100, 40), "var", 1), want_of("var", select(2, groups(list, { 100, 40 }, { 1 }))), 1e-8, "columns")
  -- float32: 1e8 + 8k (exact in float32, whose spacing there is 8); in float32 arithmetic
  -- the naive formula is garbage (x^2 = 1e16 has a spacing of 2^30)
  local f = {}
  for i = 1, 3000 do f[i] = 1e8 + 8 * math.random(0, 15) end
  local s, s2 = 0.0, 0.0
  for _, x in ipairs(f) do s = T.f32(s + x); s2 = T.f32(s2 + T.f32(x * x)) end
  local naive32 = T.f32((s2 - T.f32(s * s / #f)) / (#f - 1))
  local want32 = list_ref.var(f)
  assert.is_true(math.abs(naive32 - want32) > 0.5 * want32, "float32's naive formula fails")
  local t32 = qlua.tensor(f, { dtype = "float32", device = dev })
  T.assert_close(call(t32, "var"), want32, 1e-6, "var float32 1e8 + 8k")
  T.assert_close(call(t32, "std"), math.sqrt(want32), 1e-6, "std float32")
  T.assert_close(call(t32:view(30, 100), "var", 2), want_of("var", select(2, groups(f, { 30, 100 }, { 2 }))), 1e-6, "rows f32")
end)

body("prod: integers wrap in int64, bools count as 0 and 1, floats keep their dtype", function(dev)
  local t = T.make({ 3, -2, 5, 7 }, "int32", "contiguous", dev)
  assert.equal(-210, call(t, "prod"))
  assert.equal("integer", math.type(t:prod()))
  local big = qlua.full({ 41 }, 3, { dtype = "int32", device = dev })
  local want = 1
  for _ = 1, 41 do want = want * 3 end  -- Lua's integers wrap the same way
  assert.equal(want, call(big, "prod"))
  assert.equal(0, call(T.make({ true, false, true }, "bool", "contiguous", dev), "prod"))
  assert.equal(1, call(T.make({ true, true }, "bool", "contiguous", dev), "prod"))
  local b = call(T.make({ { true, true }, { false, true } }, "bool", "contiguous", dev), "prod", 2)
  assert.equal("int64", b:dtype())
  T.assert_equal(b, { 1, 0 })
  local u = call(T.make({ 200, 200, 200 }, "uint8", "contiguous", dev), "prod")
  assert.equal(8000000, u)
  local f = T.make({ 1.5, -2, 4 }, "float32", "contiguous", dev)
  assert.equal(-12, call(f, "prod"))
  assert.equal("float32", f:prod(1):dtype())
  assert.is_true(isnan(call(T.make({ 1, nan, 0 }, "float64", "contiguous", dev), "prod")))
  assert.equal(inf, call(T.make({ 1e30, 1e30, 1e30 }, "float32", "contiguous", dev), "prod"))
  -- float32 products accumulate in float64: 1e30 * 1e30 * 1e-30 is 1e30, not inf
  T.assert_close(call(T.make({ 1e30, 1e30, 1e-30 }, "float32", "contiguous", dev), "prod"),
    T.f32(1e30) * T.f32(1e30) * T.f32(1e-30), 1e-6)
end)

body("norm: p = 2 by default, 1, inf, -inf, 0 and other positive p; float results", function(dev)
  local data = T.random_table({ 5, 7 }, "float32")
  data[2][3] = 0.0
  for _, dtype in ipairs({ "float32", "float64", "int32", "int64", "uint8", "bool" }) do
    local t = T.make(dtype == "float32" and data or small_data_for({ 5, 7 }, dtype), dtype, "stepped", dev)
    local flat = T.numbers((T.values_of(t)))
    for _, p in ipairs({ 2, 1, inf, -inf, 0, 3, 0.5, 1.5 }) do
      local what = string.format("norm(%s) %s %s", tostring(p), dtype, dev)
      local got = call(t, "norm", p)
      assert.equal("float", math.type(got), what)
      T.assert_close(got, list_ref.norm(flat, p), loose_tol_of(T.result_dtype("norm", dtype)), what)
      local oshape, gs = groups(flat, { 5, 7 }, { 1 }, false)
      check(call(t, "norm", p, 1), oshape, T.result_dtype("norm", dtype), want_of("norm", gs, p), what .. " dim 1")
    end
  end
  T.assert_close(call(T.make({ 3.0, 4.0 }, "float64", "contiguous", dev), "norm"), 5, 1e-15)
  assert.is_true(isnan(call(T.make({ 1, nan }, "float32", "contiguous", dev), "norm", inf)))
  assert.is_true(isnan(call(T.make({ 1, nan }, "float32", "contiguous", dev), "norm", -inf)))
  assert.equal(inf, call(T.make({ 1, -inf }, "float64", "contiguous", dev), "norm", 1))
end)

body("logsumexp is max-subtracted: no overflow at 1e4, and -inf, inf and NaN", function(dev)
  local big = T.make({ { 1e4, 1e4 + 1, 1e4 - 3 }, { -1e4, -1e4, -1e4 } }, "float32", "contiguous", dev)
  local r = call(big, "logsumexp", 2)
  T.assert_close(r, { list_ref.logsumexp({ 1e4, 1e4 + 1, 1e4 - 3 }), -1e4 + math.log(3) }, 1e-6)
  T.assert_close(call(big, "logsumexp", { 1, 2 }), list_ref.logsumexp(T.numbers((T.values_of(big)))), 1e-6)
  local e = T.make({ { -inf, -inf }, { -inf, 0 }, { inf, 1 }, { nan, 1 }, { inf, -inf } }, "float64",
    "contiguous", dev)
  local got = T.numbers((T.values_of(call(e, "logsumexp", 2))))
  assert.equal(-inf, got[1])
  assert.equal(0, got[2])
  assert.equal(inf, got[3])
  assert.is_true(isnan(got[4]))
  assert.equal(inf, got[5])
  -- integers compute in float64
  local i = call(T.make({ 1, 2, 3 }, "int32", "contiguous", dev), "logsumexp", 1)
  assert.equal("float64", i:dtype())
  T.assert_close(i, list_ref.logsumexp({ 1, 2, 3 }), 1e-14)
end)

body("amax, amin and aminmax: NaN propagates, several dims, bool stays bool", function(dev)
  local t = T.make({ { 1, nan, 3 }, { 4, 5, -6 } }, "float32", "contiguous", dev)
  local mx = T.numbers((T.values_of(call(t, "amax", 1))))
  assert.equal(4, mx[1]); assert.is_true(isnan(mx[2])); assert.equal(3, mx[3])
  assert.is_true(isnan(call(t, "amax")))
  assert.is_true(isnan(call(t, "amin", { 1, 2 }):item()))
  T.assert_equal(call(t, "amin", 2), { nan, -6 })
  local lo, hi = t:aminmax(2)
  T.assert_equal(lo, { nan, -6 })
  T.assert_equal(hi, { nan, 5 })
  local a, b = T.make({ 3, -7, 12 }, "int64", "contiguous", dev):aminmax()
  assert.equal(-7, a); assert.equal(12, b)
  assert.equal("integer", math.type(a))
  local bl = T.make({ { true, false }, { false, false } }, "bool", "contiguous", dev)
  assert.equal("bool", call(bl, "amax", 2):dtype())
  T.assert_equal(call(bl, "amax", 2), { true, false })
  assert.equal(true, call(bl, "amax"))
  assert.equal(false, call(bl, "amin"))
end)

body("empty inputs: prod 1, norm 0, logsumexp -inf, var NaN; amax and the inf norms refuse",
  function(dev)
  local e = qlua.zeros(0, { device = dev })
  assert.equal(1, e:prod())
  assert.equal(0, e:norm())
  assert.equal(0, e:norm(1))
  assert.equal(-inf, e:logsumexp(1):item())
  assert.is_true(isnan(e:var()))
  assert.is_true(isnan(e:std(nil, 0)))
  T.assert_error(function() return e:amax() end, "amax: empty tensor")
  T.assert_error(function() return e:amin() end, "amin: empty tensor")
  T.assert_error(function() return e:aminmax() end, "aminmax: empty tensor")
  T.assert_error(function() return e:norm(inf) end, "norm: empty tensor")
  T.assert_error(function() return e:norm(-inf) end, "norm: empty tensor")
  local m = qlua.zeros(0, 3, { device = dev })
  T.assert_shape(m:prod(1), { 3 })
  T.assert_equal(m:prod(1), { 1, 1, 1 })
  T.assert_shape(m:var(1, true), { 1, 3 })
  T.assert_shape(m:sum({ 1, 2 }, true), { 1, 1 })
  T.assert_equal(m:logsumexp(1), { -inf, -inf, -inf })
  T.assert_shape(m:var(2), { 0 })
  T.assert_error(function() return m:amax(1) end, "amax: empty tensor (dim 1 has size 0)")
  T.assert_error(function() return m:amax({ 1, 2 }) end, "amax: empty tensor")
end)

body("a 0-d tensor reduces to its value", function(dev)
  local s = qlua.tensor(-2.5, { device = dev })
  assert.equal(-2.5, s:prod())
  assert.equal(2.5, s:norm())
  assert.equal(-2.5, s:amax())
  assert.is_true(isnan(s:var()))
  assert.equal(0, s:var(nil, 0))
  local lo, hi = s:aminmax()
  assert.equal(-2.5, lo); assert.equal(-2.5, hi)
  T.assert_shape(s:sum(nil, true), {})
end)

body("long rows and columns (the GPU's split reductions) match the reference", function(dev)
  for _, shape in ipairs({ { 3, 70000 }, { 70000, 3 } }) do
    local data = T.random_table(shape, "float32", { lo = 0.5, hi = 20 })
    local t = T.make(data, "float32", "contiguous", dev)
    local flat = T.numbers((T.values_of(t)))
    for dim = 1, 2 do
      local oshape, gs = groups(flat, shape, { dim }, true)
      for _, op in ipairs({ "var", "std", "norm", "logsumexp", "amax", "sum" }) do
        local what = string.format("%s(%d) %s %s", op, dim, T.shape_str(shape), dev)
        check(invoke(t, op, dim, true), oshape, "float32", want_of(op, gs), what)
      end
    end
    T.assert_close(call(t, "var"), list_ref.var(flat), 1e-6, "var of all")
    T.assert_close(call(t, "logsumexp", { 1, 2 }), list_ref.logsumexp(flat), 1e-6, "logsumexp of all")
  end
end)

body("refuse bad dims, lists, p, corrections and keepdim, naming the op and the value", function(dev)
  local t = qlua.zeros(2, 3, 4, { device = dev })
  for _, op in ipairs(SET_OPS) do
    local f = function(d) if op == "norm" then return t:norm(2, d) end return t[op](t, d) end
    T.assert_error(function() return f({ 1, 1 }) end, op .. ": dim 1 appears twice in the dim list")
    T.assert_error(function() return f({ 1, 4 }) end, op .. ": dim 4 out of range (1..3)")
    T.assert_error(function() return f({ 0 }) end, op .. ": dim 0 out of range (1..3)")
    T.assert_error(function() return f({}) end, op .. ": the dim list is empty")
    T.assert_error(function() return f({ 1.5 }) end, op .. ": dim list entry 1 is not an integer")
    T.assert_error(function() return f({ 1, 2, 3, 1 }) end, op .. ": 4 dims in the list")
  end
  for _, op in ipairs({ "max", "min", "argmax", "argmin", "prod", "aminmax" }) do
    T.assert_error(function() return t[op](t, { 1, 2 }) end, op .. ": takes one dim")
  end
  T.assert_error(function() return t:sum(1, 1) end, "sum: keepdim must be a boolean, got number")
  T.assert_error(function() return t:norm(-1) end, "norm: p must be >= 0 or +-inf, got -1")
  T.assert_error(function() return t:norm(0 / 0) end, "norm: p must be >= 0 or +-inf")
  T.assert_error(function() return t:norm("fro") end, "norm: p must be a number, got string")
  T.assert_error(function() return t:var(1, "x") end, "var: opts must be keepdim")
  T.assert_error(function() return t:var(1, { correction = "x" }) end,
    "var: opts.correction must be a number, got string")
  T.assert_error(function() return t:std(1, inf) end, "std: correction must be a finite number")
  T.assert_error(function() return t:var(1, { keepdim = 1 }) end, "var: keepdim must be a boolean")
  T.assert_error(function() return t:logsumexp() end, "logsumexp: dim is required")
  T.assert_error(function() return t:sum(4) end, "sum: dim 4 out of range (1..3)")
end)

describe("reductions, part 2 (cpu)", function()
  for _, b in ipairs(bodies) do
    test(b.name, function() b.fn("cpu") end)
  end
end)

describe("reductions, part 2 (gpu, each result also against the cpu's)", function()
  for _, b in ipairs(bodies) do
    gtest(b.name, function() b.fn("gpu") end)
  end
end)
