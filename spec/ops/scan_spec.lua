-- Scans (docs/API.md "Scans"): cumsum, cumprod, cummax, cummin, logcumsumexp
-- along a dim, against plain-Lua references in every dtype and layout, with empty and 0-d
-- tensors, NaN and infinities, ties and bad arguments. Every case is a function of the
-- device: it runs on the CPU here and, through gtest, on the GPU (pending without one),
-- where the extra sizes reach each of scan.cu's paths (one long scan, a block per row,
-- a thread per column, CUB's scan by key).
local T, qlua, test, gtest = require("qlua.testing").spec(_ENV)

local NaN, inf = 0 / 0, math.huge

------------------------------------------------------------------------ references

-- PyTorch's log-add-exp (NaN propagates, equal infinities stay).
local function logaddexp(a, b)
  if a ~= a or b ~= b then return a + b end
  local lo, hi = math.min(a, b), math.max(a, b)
  if lo == hi and (lo == inf or lo == -inf) then return a end
  return hi + math.log(1 + math.exp(lo - hi))
end

local COMBINE = {
  cumsum = function(a, b) return a + b end,  -- Lua integers wrap as int64 does
  cumprod = function(a, b) return a * b end,
  logcumsumexp = logaddexp,
}

-- The scan of a flat row-major list: values, and for cummax/cummin 1-based positions.
-- Integers (int = true) combine as Lua integers (wrapping like int64).
local function ref_scan(op, flat, shape, dim, int)
  local outer, n, inner = T.ref.split_dim(shape, dim)
  local vals, idxs = {}, {}
  for o = 0, outer - 1 do
    for i = 0, inner - 1 do
      local acc, at
      for k = 0, n - 1 do
        local p = (o * n + k) * inner + i + 1
        local x = flat[p]
        if k == 0 then
          acc, at = x, 1
        elseif op == "cummax" or op == "cummin" then
          local later = x ~= x or (acc == acc and (op == "cummax" and x >= acc or op == "cummin" and x <= acc))
          if later then acc, at = x, k + 1 end
        else
          acc = COMBINE[op](acc, x, int)
        end
        vals[p], idxs[p] = acc, at
      end
    end
  end
  return vals, idxs
end

-- What a scan of dtype gives (ops.h): cumsum/cumprod of integers and bool give int64,
-- logcumsumexp of them float64, cummax/cummin keep the dtype.

-- A value of the reference as the result dtype stores it.
local function stored(list, dtype)
  local out = {}
  for i, v in ipairs(list) do
    if dtype == "bool" then out[i] = v ~= 0 and v ~= false
    elseif T.is_float_dtype(dtype) then out[i] = T.as_dtype(v + 0.0, dtype)
    else out[i] = v end
  end
  return out
end

-- Values for op and dtype: cumprod stays near 1, ties are common for small integers.
local function values_for(op, dtype, count)
  local opts
  if op == "cumprod" then
    opts = T.is_float_dtype(dtype) and { lo = 0.8, hi = 1.25 } or { lo = -2, hi = 2, zero = true }
  elseif op == "cummax" or op == "cummin" then
    opts = T.is_float_dtype(dtype) and nil or { lo = -3, hi = 3, zero = true }
    if dtype == "uint8" then opts = { lo = 0, hi = 4, zero = true } end
  end
  if dtype == "uint8" and not opts then opts = { lo = 0, hi = 9, zero = true } end
  return T.random_list(count, dtype, opts)
end

-- tol: for float results; float32 sums on the GPU accumulate in float32.
local function check_scan(op, t, flat, shape, dim, dtype, tol, what)
  local rdtype = T.result_dtype(op, dtype)
  local int = not T.is_float_dtype(rdtype)
  local vals, idxs = ref_scan(op, T.numbers(flat), shape, dim, int)
  local v, ix = t[op](t, dim)
  assert.equal(rdtype, v:dtype(), what .. ": dtype")
  T.assert_shape(v, shape, what)
  local expected = stored(vals, rdtype)
  if T.is_float_dtype(rdtype) then
    T.assert_close(T.values_of(v), expected, tol or T.tol[rdtype] * 10, what)
  else
    T.assert_equal(T.values_of(v), expected, what)
  end
  if op == "cummax" or op == "cummin" then
    assert.equal("int64", ix:dtype(), what .. ": index dtype")
    T.assert_shape(ix, shape, what .. " indices")
    T.assert_equal(T.values_of(ix), idxs, what .. ": indices")
  else
    assert.is_nil(ix, what .. ": a second result")
  end
end

local OPS = { "cumsum", "cumprod", "cummax", "cummin", "logcumsumexp" }
local SHAPES = { { 7 }, { 3, 5 }, { 2, 3, 4 }, { 1, 6 }, { 4, 1 } }

------------------------------------------------------------------------ the cases, per device

local function every_dtype_layout_dim(device)
  for _, op in ipairs(OPS) do
    for _, dtype in ipairs(T.all_dtypes) do
      for _, shape in ipairs(SHAPES) do
        local flat = values_for(op, dtype, T.numel(shape))
        local nested = T.unflatten(flat, shape)
        for _, layout in ipairs(T.layouts) do
          local t = T.make(nested, dtype, layout, device, shape)
          for dim = 1, #shape do
            local what = string.format("%s %s %s %s dim %d on %s", op, dtype, T.shape_str(shape),
              layout, dim, device)
            check_scan(op, t, flat, shape, dim, dtype, nil, what)
          end
        end
      end
    end
  end
end

local function empty_and_0d(device)
  for _, op in ipairs(OPS) do
    for _, dtype in ipairs(T.all_dtypes) do
      for _, shape in ipairs({ { 0 }, { 2, 0 }, { 0, 3 }, { 2, 0, 3 } }) do
        local t = qlua.empty(shape, { dtype = dtype, device = device })
        for dim = 1, #shape do
          local v, ix = t[op](t, dim)
          T.assert_shape(v, shape, op .. " of an empty " .. dtype)
          assert.equal(T.result_dtype(op, dtype), v:dtype())
          assert.equal(device, v:device():match("^%a+"))
          if ix then T.assert_shape(ix, shape, op .. " indices of an empty " .. dtype) end
        end
      end
      -- 0-d: dim 1 is the one element (PyTorch's dim 0 of a scalar)
      local x = T.random_value(dtype, op == "cummax" and { lo = 0, hi = 3, zero = true } or nil)
      local t = qlua.tensor(x, { dtype = dtype, device = device })
      local v, ix = t[op](t, 1)
      T.assert_shape(v, {}, op .. " of a 0-d " .. dtype)
      assert.equal(T.result_dtype(op, dtype), v:dtype())
      local want = stored(T.numbers({ x }), T.result_dtype(op, dtype))[1]
      if T.is_float_dtype(v:dtype()) then T.assert_close(v:item(), want, 1e-6)
      elseif v:dtype() == "bool" then assert.equal(want, v:item())
      else assert.equal(want, v:item()) end
      if ix then assert.equal(1, ix:item()) end
    end
  end
end

local function special_values(device)
  local function f(list, dtype) return qlua.tensor(list, { dtype = dtype or "float64", device = device }) end
  for _, dtype in ipairs(T.float_dtypes) do
    -- ties move the position to the later element; NaN sticks at its latest position
    local v, ix = f({ 1, 3, 3, 2, 3 }, dtype):cummax(1)
    T.assert_equal(v, { 1, 3, 3, 3, 3 }); T.assert_equal(ix, { 1, 2, 3, 3, 5 })
    v, ix = f({ 2, 1, 1, 4, 1 }, dtype):cummin(1)
    T.assert_equal(v, { 2, 1, 1, 1, 1 }); T.assert_equal(ix, { 1, 2, 3, 3, 5 })
    v, ix = f({ 1, NaN, 2, NaN, 0 }, dtype):cummax(1)
    T.assert_equal(v, { 1, NaN, NaN, NaN, NaN }); T.assert_equal(ix, { 1, 2, 2, 4, 4 })
    v, ix = f({ NaN, -1, NaN }, dtype):cummin(1)
    T.assert_equal(v, { NaN, NaN, NaN }); T.assert_equal(ix, { 1, 1, 3 })
    v, ix = f({ -inf, -inf, inf, inf }, dtype):cummax(1)
    T.assert_equal(v, { -inf, -inf, inf, inf }); T.assert_equal(ix, { 1, 2, 3, 4 })
    -- sums and products of infinities and NaN
    T.assert_equal(f({ 1, inf, -inf, 2 }, dtype):cumsum(1), { 1, inf, NaN, NaN })
    T.assert_equal(f({ 2, NaN, 3 }, dtype):cumprod(1), { 2, NaN, NaN })
    T.assert_equal(f({ 0, inf, 2 }, dtype):cumprod(1), { 0, NaN, NaN })
    -- logcumsumexp: stable at 1e4, -inf adds nothing, +inf stays, NaN propagates
    local big = f({ 1e4, 1e4, 1e4 }, dtype):logcumsumexp(1)
    T.assert_close(big, { 1e4, 1e4 + math.log(2), 1e4 + math.log(3) }, 1e-6)
    T.assert_equal(f({ -inf, -inf, 0 }, dtype):logcumsumexp(1), { -inf, -inf, 0 })
    T.assert_equal(f({ 1, inf, 2 }, dtype):logcumsumexp(1), { 1, inf, inf })
    T.assert_equal(f({ -inf, inf }, dtype):logcumsumexp(1), { -inf, inf })
    T.assert_equal(f({ 1, NaN, 2 }, dtype):logcumsumexp(1), { 1, NaN, NaN })
    T.assert_close(f({ -1e4, 0 }, dtype):logcumsumexp(1), { -1e4, 0 }, 1e-7)
  end
  -- integers: int32 sums do not overflow (int64 results), int64 wraps
  T.assert_equal(f({ 2147483647, 2147483647 }, "int32"):cumsum(1), { 2147483647, 4294967294 })
  T.assert_equal(f({ math.maxinteger, 1 }, "int64"):cumsum(1), { math.maxinteger, math.mininteger })
  T.assert_equal(f({ 1 << 62, 4 }, "int64"):cumprod(1), { 1 << 62, 0 })
  T.assert_equal(f({ 200, 100 }, "uint8"):cumsum(1), { 200, 300 })
  T.assert_equal(f({ true, false, true }, "bool"):cumsum(1), { 1, 1, 2 })
  local bv, bix = f({ false, true, true, false }, "bool"):cummax(1)
  T.assert_equal(bv, { false, true, true, true }); T.assert_equal(bix, { 1, 2, 3, 3 })
  assert.equal("float64", f({ 1, 2 }, "int32"):logcumsumexp(1):dtype())
end

-- Sizes that reach every GPU path of scan.cu (on the CPU they are the same loops).
local function large(device)
  local cases = {
    { shape = { 60000 }, dim = 1 },         -- one long scan: DeviceScan
    { shape = { 140, 2100 }, dim = 2 },     -- a block per row (>= one per SM), tiles and a partial one
    { shape = { 2, 5000, 3 }, dim = 2 },    -- few long scans along a middle dim: by key
    { shape = { 3, 3000 }, dim = 2 },       -- few long rows: by key
    { shape = { 40, 500 }, dim = 1 },       -- few columns: by key
    { shape = { 3, 16500 }, dim = 1 },      -- many columns: a thread each
    { shape = { 3000, 5 }, dim = 2 },       -- many short rows: a thread each
  }
  for _, c in ipairs(cases) do
    for _, op in ipairs(OPS) do
      for _, dtype in ipairs({ "float32", "int32" }) do
        if not (op == "cumprod" and dtype == "int32") then
          -- dyadic values (exact in float32, quick to make): k/4, signed for the extremes
          -- and logcumsumexp, 1 + k/1024 near 1 for products; integers as they are
          local flat, count = {}, T.numel(c.shape)
          local random = math.random
          for i = 1, count do
            local k = random(-8, 8)
            if op == "cumsum" then k = random(1, 8) end
            if dtype == "int32" then flat[i] = k
            elseif op == "cumprod" then flat[i] = 1 + k / 1024
            else flat[i] = k / 4 end
          end
          local t = T.from_flat(flat, c.shape, dtype, device)
          local tol = (dtype == "float32" and device == "gpu") and 1e-4 or nil
          if op == "cumprod" and T.is_float_dtype(dtype) then tol = 1e-3 end
          check_scan(op, t, flat, c.shape, c.dim, dtype, tol,
            string.format("%s %s %s dim %d on %s", op, dtype, T.shape_str(c.shape), c.dim, device))
        end
      end
    end
  end
end

local function errors(device)
  local t = qlua.zeros({ 2, 3 }, { device = device })
  for _, op in ipairs(OPS) do
    assert.equal(op .. ": dim 3 out of range (1..2)", T.error_of(function() return t[op](t, 3) end))
    assert.equal(op .. ": dim 0 out of range (1..2)", T.error_of(function() return t[op](t, 0) end))
    assert.equal(op .. ": dim 2 out of range (a 0-d tensor takes dim 1)",
      T.error_of(function() local s = qlua.tensor(1.5, { device = device }); return s[op](s, 2) end))
    assert.truthy(T.error_of(function() return t[op](t) end):find("number expected", 1, true))
    assert.truthy(T.error_of(function() return t[op](t, 1, 2) end):find(op .. ": unexpected argument", 1, true))
    local f = qlua.zeros(2, { device = device }); f:free()
    assert.equal(op .. ": tensor has been freed", T.error_of(function() return f[op](f, 1) end))
  end
end

local CASES = {
  { "every dtype, layout and dim against the reference", every_dtype_layout_dim },
  { "empty and 0-d tensors", empty_and_0d },
  { "NaN, infinities, ties, wrapping and promotion", special_values },
  { "large sizes (every GPU path)", large },
  { "errors name the op and the values", errors },
}

describe("scans on the CPU", function()
  for _, c in ipairs(CASES) do test(c[1], function() c[2]("cpu") end) end
end)

describe("scans on the GPU", function()
  for _, c in ipairs(CASES) do gtest(c[1], function() c[2]("gpu") end) end
  gtest("the GPU gives the CPU's results", function()
    for _, op in ipairs(OPS) do
      for _, dtype in ipairs(T.all_dtypes) do
        local shape = { 5, 6, 7 }
        local flat = values_for(op, dtype, T.numel(shape))
        local c = T.from_flat(flat, shape, dtype, "cpu")
        local g = c:gpu()
        for dim = 1, 3 do
          local cv, ci = c[op](c, dim)
          local gv, gi = g[op](g, dim)
          if T.is_float_dtype(cv:dtype()) then
            T.assert_close(gv:cpu(), cv, 1e-5, op .. " " .. dtype)
          else
            T.assert_equal(gv:cpu(), cv, op .. " " .. dtype)
          end
          if ci then T.assert_equal(gi:cpu(), ci, op .. " " .. dtype .. " indices") end
        end
      end
    end
  end)
end)
