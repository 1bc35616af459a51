-- spec/ops/cpu_reduce_dim_spec.lua — CPU reductions along a dim that is not the innermost
-- (runtime/cpu/cpu_reduce.c, the columns folds): the reduced dim is cut into segments of
-- 256 rows (more for long dims) and the segments' results merged in order, and the
-- columns in blocks of up to 4096. Every case reaches several segments, a short last one
-- and, for the wide shapes, two column blocks: sum, mean, max, min, argmax, argmin, amax
-- and amin against plain Lua in every dtype, with ties, NaNs and signed zeros in other
-- segments than the first and inside one group of the four rows folded at once, and the
-- same results on 1, 2, 3 and 8 threads.
local T, qlua, test = require("qlua.testing").spec(_ENV)

local NaN = 0 / 0
local abs, type = math.abs, type  -- locals: a global's lookup costs more in a spec

-- The column reductions of a rows x cols list of lists, as one sequential pass would:
-- sums in double, max/min keep the first best (a NaN wins: the first one), arg ops its
-- 1-based row.
local function reference(rows, op)
  local out, pos = {}, {}
  for j = 1, #rows[1] do
    local acc, at = nil, nil
    for i = 1, #rows do
      local v = rows[i][j]
      if type(v) == "boolean" then v = v and 1 or 0 end
      if op == "sum" or op == "mean" then
        acc = (acc or 0) + v
      elseif acc == nil then
        acc, at = v, i
      elseif acc == acc then
        local better = (op == "max" or op == "argmax") and v > acc or (op == "min" or op == "argmin") and v < acc
        if v ~= v or better then acc, at = v, i end
      end
    end
    if op == "mean" then acc = acc / #rows end
    out[j], pos[j] = acc, at
  end
  return (op == "argmax" or op == "argmin") and pos or out
end

local function same_value(a, e)
  if e ~= e then return a ~= a end
  if e == 0 and a == 0 then return 1 / a == 1 / e end  -- the sign of a zero too
  return a == e
end

local function check(t, rows, dtype, what)
  for _, op in ipairs({ "sum", "mean", "max", "min", "argmax", "argmin", "amax", "amin" }) do
    local float = T.is_float_dtype(dtype)
    if op ~= "mean" or float then
      local got = t[op](t, 1):totable()
      local want = reference(rows, op == "amax" and "max" or op == "amin" and "min" or op)
      for j = 1, #want do
        local a, e = got[j], want[j]
        if type(a) == "boolean" then a = a and 1 or 0 end
        local ok
        if (op == "sum" or op == "mean") and float then
          ok = (a ~= a and e ~= e) or abs(a - e) <= (dtype == "float32" and 1e-5 or 1e-12) * (abs(e) + 1)
        else
          ok = same_value(a, e)
        end
        if not ok then
          error(string.format("%s %s column %d: %s, expected %s", what, op, j, tostring(a), tostring(e)), 2)
        end
      end
    end
  end
end

-- A rows x cols list of lists of random values of dtype, with the specials planted:
-- column 1 holds the best value twice (rows 3 and 300, or the last: the first wins),
-- column 2 a NaN in the second segment and another later, column 3 zeros of both signs as
-- its only values (floats), column 4 its best in the last row, column 5 its best in rows 6
-- and 7, column 6 NaNs in rows 10 and 11.
local function matrix(nrows, ncols, dtype)
  local opts = dtype == "uint8" and { lo = 1, hi = 200 } or (T.is_float_dtype(dtype) and { lo = -10, hi = 10 } or nil)
  local rows
  if ncols > 1000 then  -- T.random_list is slow for a million values
    rows = qlua.randn(nrows, ncols, { dtype = dtype }):totable()
  else
    rows = {}
    for i = 1, nrows do rows[i] = T.random_list(ncols, dtype, opts) end
  end
  if dtype == "bool" then return rows end
  local function row(i) return i <= nrows and i or nrows end
  local big = dtype == "uint8" and 255 or 1000
  rows[3][1], rows[row(300)][1] = big, big
  rows[nrows][4] = big
  rows[1][4] = dtype == "uint8" and 0 or -big
  rows[6][5], rows[7][5] = big, big
  if T.is_float_dtype(dtype) then
    rows[row(260)][2], rows[row(600)][2] = NaN, NaN
    for i = 1, nrows do rows[i][3] = (i % 3 == 0) and 0.0 or -0.0 end
    if ncols >= 6 then rows[10][6], rows[11][6] = NaN, NaN end
  end
  return rows
end

local SHAPES = { { 300, 7 }, { 257, 130 }, { 700, 33 }, { 1100, 5 } }

describe("CPU reductions along an outer dim, in segments", function()
  for _, dtype in ipairs(T.all_dtypes) do
    test("sum, mean, max, min, argmax and argmin of " .. dtype .. " against plain Lua", function()
      for _, shape in ipairs(SHAPES) do
        local rows = matrix(shape[1], shape[2], dtype)
        local t = qlua.tensor(rows, { dtype = dtype })
        check(t, rows, dtype, dtype .. " " .. T.shape_str(shape))
        -- the same columns as a view: every other column of a wider tensor
        local wide = {}
        for i = 1, #rows do
          wide[i] = {}
          for j = 1, #rows[i] do wide[i][2 * j - 1], wide[i][2 * j] = rows[i][j], rows[i][j] end
        end
        local v = qlua.tensor(wide, { dtype = dtype }):narrow(2, 1, 2 * shape[2] - 1)
        local every_other = {}
        for i = 1, #rows do every_other[i] = rows[i] end
        check(v:index_select(2, qlua.range(1, 2 * shape[2] - 1, 2, { dtype = "int64" })), every_other,
          dtype, dtype .. " " .. T.shape_str(shape) .. " (a view's columns)")
      end
    end)
  end

  test("two column blocks (4100 columns) and 3-d tensors", function()
    local rows = matrix(260, 4100, "float32")
    check(qlua.tensor(rows), rows, "float32", "260x4100")
    -- 3 x 300 x 40, along dim 2: three outer rows, each reduced in segments
    local x = qlua.randn(3, 300, 40, { dtype = "float64" })
    local xt = x:totable()
    for _, op in ipairs({ "sum", "max", "argmin" }) do
      local got = x[op](x, 2):totable()
      for o = 1, 3 do
        local want = reference(xt[o], op)
        for j = 1, 40 do
          local ok = op == "sum" and abs(got[o][j] - want[j]) <= 1e-12 * (abs(want[j]) + 1)
                     or got[o][j] == want[j]
          assert(ok, string.format("3-d %s [%d][%d]: %s, expected %s", op, o, j, got[o][j], want[j]))
        end
      end
    end
  end)

  test("the same results on 1, 2, 3 and 8 threads", function()
    local saved = qlua.get_num_threads()
    local inputs = {
      qlua.randn(1500, 300), qlua.randn(1500, 300, { dtype = "float64" }),
      qlua.randint(-1000, 1000, { 2000, 70 }, { dtype = "int32" }), qlua.randn(4096, 4100),
    }
    local ref
    for _, n in ipairs({ 1, 2, 3, 8 }) do
      qlua.set_num_threads(n)
      local got = {}
      for _, x in ipairs(inputs) do
        for _, op in ipairs({ "sum", "mean", "max", "min", "argmax", "argmin", "amax" }) do
          if op ~= "mean" or x:dtype() ~= "int32" then
            got[#got + 1] = T.flatten(x[op](x, 1):totable())
          end
        end
      end
      if ref == nil then
        ref = got
      else
        for k = 1, #ref do
          for j = 1, #ref[k] do
            assert(same_value(got[k][j], ref[k][j]),
              string.format("result %d element %d differs between 1 and %d threads", k, j, n))
          end
        end
      end
    end
    qlua.set_num_threads(saved)
  end)
end)
