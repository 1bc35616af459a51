-- Sorting and selection: sort, argsort, topk, kthvalue, median, unique, bincount,
-- histc and qlua.searchsorted, against plain-Lua references (table.sort with the index as the
-- tie rule, so the reference is the stable sort), on every dtype, on views, along every dim,
-- with ties, NaN, +-inf and -0.0, empty and 0-d tensors, and bad arguments. Each body is a
-- function of the device: it runs for "cpu" here and, through gtest, for "gpu" (pending
-- without a GPU), where larger cases also reach the GPU's other paths (one long row, many
-- rows, chunked topk, the radix select of topk with k > 32).
local T, qlua, test, gtest = require("qlua.testing").spec(_ENV)

local DTYPES = T.all_dtypes
local NAN, INF = 0 / 0, math.huge

------------------------------------------------------------------------ references

-- The order (device.h): numbers as numbers, NaN above all, NaNs equal; bool as 0/1.
local function num(v)
  if type(v) == "boolean" then return v and 1 or 0 end
  return v
end
local function less(a, b)
  a, b = num(a), num(b)
  if a ~= a then return false end
  if b ~= b then return true end
  return a < b
end
local function same(a, b) return not less(a, b) and not less(b, a) end

-- The stable sort of list: a list of positions (1-based).
local function ref_order(list, descending)
  local pos = {}
  for i = 1, #list do pos[i] = i end
  table.sort(pos, function(i, j)
    local a, b = list[i], list[j]
    if less(a, b) then return not descending end
    if less(b, a) then return descending end
    return i < j
  end)
  return pos
end

-- A value with ties, NaN, infinities and signed zeros (floats) or small ranges (ints).
local FLOAT_POOL = { -2.5, -1, -0.0, 0.0, 0.5, 1, 3, INF, -INF, NAN }
local function rvalue(dtype)
  if dtype == "bool" then return math.random() < 0.5 end
  if dtype == "uint8" then return math.random(0, 6) end
  if T.is_float_dtype(dtype) then
    if math.random() < 0.5 then return FLOAT_POOL[math.random(#FLOAT_POOL)] end
    return T.as_dtype(math.random() * 8 - 4, dtype)
  end
  return math.random(-5, 5)
end
local function rflat(n, dtype)
  local flat = {}
  for i = 1, n do flat[i] = rvalue(dtype) end
  return flat
end

-- The lines of a tensor of shape along dim: each a list of flat (1-based) positions, lines in
-- row-major order of the other dims.
local function lines_of(shape, dim)
  local strides = T.strides(shape)
  local others = {}
  for d = 1, #shape do if d ~= dim then others[#others + 1] = shape[d] end end
  local out = {}
  T.each_index(others, function(pos)
    local base, k = 1, 0
    for d = 1, #shape do
      if d ~= dim then k = k + 1; base = base + (pos[k] - 1) * strides[d] end
    end
    local line = {}
    for j = 1, shape[dim] do line[j] = base + (j - 1) * strides[dim] end
    out[#out + 1] = line
  end)
  if #others == 0 then
    local line = {}
    for j = 1, shape[dim] do line[j] = 1 + (j - 1) * strides[dim] end
    out = { line }
  end
  return out
end

local function flat_values(t) return (T.values_of(t)) end
-- two lists of the same values (NaN the same as NaN)
local function same_lists(a, b)
  if #a ~= #b then return false end
  for k = 1, #a do if not same(a[k], b[k]) then return false end end
  return true
end

-- Checks values and indices (flat lists) of a sort-like result of shape rshape (the line
-- length along dim replaced by width) against the reference's first width.
local memo = setmetatable({}, { __mode = "k" })
local function check_lines(flat, shape, dim, descending, values, indices, width, what)
  local rshape = T.copy_list(shape)
  rshape[dim] = width
  local vl, il = flat_values(values), flat_values(indices)
  local src_lines, res_lines = lines_of(shape, dim), lines_of(rshape, dim)
  memo[flat] = memo[flat] or {}
  local key = dim .. (descending and "d" or "a")
  local orders = memo[flat][key] or {}
  memo[flat][key] = orders
  for L = 1, #src_lines do
    local line = {}
    for j, p in ipairs(src_lines[L]) do line[j] = flat[p] end
    orders[L] = orders[L] or ref_order(line, descending)
    local order = orders[L]
    for j = 1, width do
      local at = res_lines[L][j]
      local want = line[order[j]]
      if il[at] ~= order[j] or not same(vl[at], want) then
        error(string.format("%s: line %d position %d: got %s at %s, expected %s at %d", what, L,
          j, tostring(vl[at]), tostring(il[at]), tostring(want), order[j]), 2)
      end
    end
  end
  T.assert_shape(values, rshape, what .. " values")
  T.assert_shape(indices, rshape, what .. " indices")
  assert.are.equal("int64", indices:dtype())
end

local SHAPES = { { 7 }, { 3, 5 }, { 2, 3, 4 }, { 1, 9 }, { 4, 1 } }

------------------------------------------------------------------------ sort, argsort

local function check_sort(dev)
  for _, dtype in ipairs(DTYPES) do
    for _, shape in ipairs(SHAPES) do
      local flat = rflat(T.numel(shape), dtype)
      for _, layout in ipairs(T.layouts) do
        local t = T.make(T.unflatten(flat, shape), dtype, layout, dev, shape)
        for dim = 1, #shape do
          for _, desc in ipairs({ false, true }) do
            local what = string.format("sort %s %s %s dim %d%s", dtype, T.shape_str(shape),
              layout, dim, desc and " descending" or "")
            local v, i = t:sort(dim, desc)
            assert.are.equal(dtype, v:dtype())
            check_lines(flat, shape, dim, desc, v, i, shape[dim], what)
            T.assert_equal(t:argsort(dim, desc), i, what .. " argsort")
          end
        end
        -- the last dim by default; t:sort(true) is descending along it
        local v1, i1 = t:sort()
        local v2, i2 = t:sort(#shape)
        T.assert_equal(v1, v2, "default dim")
        T.assert_equal(i1, i2, "default dim")
        local v3 = t:sort(true)
        T.assert_equal(v3, (t:sort(#shape, true)), "sort(true)")
      end
    end
  end
  -- -0.0 and NaN come back with their own bits (the sign of zero is visible as 1 / x)
  local z = qlua.tensor({ 0.0, -0.0, 1, -0.0 }, { device = dev }):sort()
  local zi = select(2, qlua.tensor({ 0.0, -0.0, 1, -0.0 }, { device = dev }):sort())
  T.assert_equal(zi, { 1, 2, 4, 3 }, "zeros keep their order")
  assert.are.equal(INF, 1 / z[1])
  assert.are.equal(-INF, 1 / z[2])
  assert.are.equal(-INF, 1 / z[3])
  -- empty and 0-d
  local e, ei = qlua.zeros({ 0 }, { device = dev }):sort()
  T.assert_shape(e, { 0 }, "empty"); T.assert_shape(ei, { 0 }, "empty")
  local e2, ei2 = qlua.zeros({ 3, 0 }, { device = dev }):sort(1)
  T.assert_shape(e2, { 3, 0 }, "3x0"); T.assert_shape(ei2, { 3, 0 }, "3x0")
  local s, si = qlua.tensor(2.5, { device = dev }):sort()
  T.assert_shape(s, {}, "0-d"); assert.are.equal(2.5, s:item()); assert.are.equal(1, si:item())
  -- topk(0) of a 0-d tensor is empty, (0), not a 0-d view of no storage (read past its end)
  local z0, zi0 = qlua.tensor(2.5, { device = dev }):topk(0)
  T.assert_shape(z0, { 0 }, "topk(0) of 0-d"); T.assert_shape(zi0, { 0 }, "topk(0) of 0-d")
  assert.are.same({}, z0:totable())
  local o1 = qlua.tensor(2.5, { device = dev }):topk(1)
  T.assert_shape(o1, {}, "topk(1) of 0-d"); assert.are.equal(2.5, o1:item())
end

local function check_sort_large(dev)
  for _, dtype in ipairs(DTYPES) do
    for _, shape in ipairs(dev == "cpu" and { { 3000 }, { 40, 77 } }
                             or { { 30000 }, { 40, 777 }, { 3, 5000 } }) do
      local flat = rflat(T.numel(shape), dtype)
      local t = T.from_flat(flat, shape, dtype, dev)
      for _, desc in ipairs({ false, true }) do
        local v, i = t:sort(#shape, desc)
        check_lines(flat, shape, #shape, desc, v, i, shape[#shape], "large sort " .. dtype)
      end
    end
  end
end

test("sort and argsort: every dtype, layout and dim, stable with NaN last, on the CPU",
     function() check_sort("cpu") end)
gtest("sort and argsort on the GPU", function() check_sort("gpu") end)
test("sort: long rows and many rows, on the CPU", function() check_sort_large("cpu") end)
gtest("sort: long rows (radix sort) and many rows (segmented sort) on the GPU",
      function() check_sort_large("gpu") end)

------------------------------------------------------------------------ topk, kthvalue, median

local function check_topk(dev, shapes, ks)
  for _, dtype in ipairs(DTYPES) do
    for _, shape in ipairs(shapes) do
      local flat = rflat(T.numel(shape), dtype)
      local layouts = T.numel(shape) > 1000 and { "contiguous" } or T.layouts
      for _, layout in ipairs(layouts) do
        local t = T.make(T.unflatten(flat, shape), dtype, layout, dev, shape)
        for dim = 1, #shape do
          for _, k in ipairs(ks) do
            if k <= shape[dim] then
              for _, largest in ipairs({ true, false }) do
                local what = string.format("topk %s %s %s dim %d k %d%s", dtype,
                  T.shape_str(shape), layout, dim, k, largest and "" or " smallest")
                local v, i = t:topk(k, dim, largest)
                check_lines(flat, shape, dim, largest, v, i, k, what)
              end
            end
          end
        end
      end
    end
  end
end

local function check_kth_median(dev)
  for _, dtype in ipairs(DTYPES) do
    for _, shape in ipairs(SHAPES) do
      local flat = rflat(T.numel(shape), dtype)
      local t = T.make(T.unflatten(flat, shape), dtype, "transposed", dev, shape)
      for dim = 1, #shape do
        local lines = lines_of(shape, dim)
        local rshape, kshape = {}, {}
        for d = 1, #shape do
          if d ~= dim then rshape[#rshape + 1] = shape[d] end
          kshape[d] = d == dim and 1 or shape[d]
        end
        for _, k in ipairs({ 1, 2, shape[dim] }) do
          if k <= shape[dim] then
            local v, i = t:kthvalue(k, dim)
            T.assert_shape(v, rshape, "kthvalue shape")
            local kv, ki = t:kthvalue(k, dim, true)
            T.assert_shape(kv, kshape, "kthvalue keepdim shape")
            T.assert_shape(ki, kshape, "kthvalue keepdim indices' shape")
            assert.are.same(flat_values(i), flat_values(ki), "kthvalue keepdim indices")
            assert.is_true(same_lists(flat_values(v), flat_values(kv)), "kthvalue keepdim values")
            local vl, il = flat_values(v), flat_values(i)
            for L, line_pos in ipairs(lines) do
              local line = {}
              for j, p in ipairs(line_pos) do line[j] = flat[p] end
              local order = ref_order(line, false)
              assert.are.equal(order[k], il[L], "kthvalue index " .. dtype)
              assert.is_true(same(vl[L], line[order[k]]), "kthvalue value " .. dtype)
            end
          end
        end
        -- median: the lower one; a line with NaN has its first NaN
        local v, i = t:median(dim)
        T.assert_shape(v, rshape, "median shape")
        local vl, il = flat_values(v), flat_values(i)
        local kv, ki = t:median(dim, true)
        T.assert_shape(kv, kshape, "median keepdim shape")
        T.assert_shape(ki, kshape, "median keepdim indices' shape")
        assert.are.same(il, flat_values(ki), "median keepdim indices")
        assert.is_true(same_lists(vl, flat_values(kv)), "median keepdim values")
        for L, line_pos in ipairs(lines) do
          local line = {}
          for j, p in ipairs(line_pos) do line[j] = flat[p] end
          local want
          for j = 1, #line do
            local x = line[j]
            if type(x) == "number" and x ~= x then want = j; break end
          end
          want = want or ref_order(line, false)[(#line + 1) // 2]
          assert.are.equal(want, il[L], "median index " .. dtype .. " " .. T.shape_str(shape))
          assert.is_true(same(vl[L], line[want]), "median value " .. dtype)
        end
      end
      -- without dim: a Lua number over everything
      local m = t:median()
      local order = ref_order(flat, false)
      local want = flat[order[(#flat + 1) // 2]]
      for _, x in ipairs(flat) do if type(x) == "number" and x ~= x then want = NAN end end
      if dtype == "bool" then want = num(want) ~= 0 end
      assert.is_true(same(m, want), "median() " .. dtype .. ": " .. tostring(m))
    end
  end
  local m = qlua.tensor({ 1, 5, 2, 4 }, { device = dev }):median()
  assert.are.equal(2, m)
  assert.are.equal(math.type(m), "integer")
end

test("topk: every dtype, layout, dim, k and direction, on the CPU", function()
  check_topk("cpu", SHAPES, { 0, 1, 2, 3, 5 })
end)
gtest("topk on the GPU", function() check_topk("gpu", SHAPES, { 0, 1, 2, 3, 5 }) end)
test("topk: long rows, k up to 40, on the CPU", function()
  check_topk("cpu", { { 5000 }, { 6, 300 } }, { 1, 5, 17, 33 })
end)
gtest("topk on the GPU: chunked rows (k <= 32), radix select (k > 32), sorted rows", function()
  check_topk("gpu", { { 70000 }, { 6, 3000 }, { 300, 40 } }, { 1, 5, 17, 33, 40 })
end)
test("kthvalue and median against the sorted lines, on the CPU",
     function() check_kth_median("cpu") end)
gtest("kthvalue and median on the GPU", function() check_kth_median("gpu") end)
test("kthvalue and median: keepdim is a boolean, median's only with a dim; 0-d stays 0-d", function()
  local t = qlua.tensor({ { 3, 1 }, { 2, 5 } })
  T.assert_error(function() return t:median(1, "yes") end, "median: keepdim must be a boolean, got string")
  T.assert_error(function() return t:median(nil, true) end, "median: keepdim needs a dim")
  T.assert_error(function() return t:kthvalue(1, 2, 0) end, "kthvalue: keepdim must be a boolean, got number")
  T.assert_error(function() return t:kthvalue(1, 2, true, 1) end, "kthvalue: unexpected argument #4")
  local v, i = t:kthvalue(2, nil, true)          -- the last dim by default, kept
  T.assert_equal(v, { { 3 }, { 5 } })
  T.assert_equal(i, { { 1 }, { 2 } })
  local z = qlua.tensor(4.5)
  T.assert_shape(z:median(1, true), {})
  T.assert_shape(z:kthvalue(1, 1, true), {})
end)

------------------------------------------------------------------------ unique

local function check_unique(dev)
  for _, dtype in ipairs(DTYPES) do
    for _, shape in ipairs({ { 9 }, { 3, 4 }, { 2, 2, 3 }, { 0 }, {} }) do
      local flat = rflat(T.numel(shape), dtype)
      local layouts = #shape == 0 and { "contiguous" } or T.layouts
      for _, layout in ipairs(layouts) do
        local t = T.make(#shape == 0 and flat[1] or T.unflatten(flat, shape), dtype, layout, dev,
          shape)
        local u, inv, cnt = t:unique({ return_inverse = true, return_counts = true })
        -- reference: the sorted distinct values, NaNs one value, -0.0 and 0.0 one
        local order = ref_order(flat, false)
        local want, wcount, run_of = {}, {}, {}
        for _, p in ipairs(order) do
          if #want == 0 or not same(want[#want], flat[p]) then
            want[#want + 1] = flat[p]
            wcount[#want] = 0
          end
          wcount[#want] = wcount[#want] + 1
          run_of[p] = #want
        end
        local what = "unique " .. dtype .. " " .. T.shape_str(shape) .. " " .. layout
        local ul = flat_values(u)
        assert.are.equal(#want, #ul, what)
        for j = 1, #want do assert.is_true(same(ul[j], want[j]), what) end
        T.assert_equal(cnt, wcount, what .. " counts")
        T.assert_shape(inv, shape, what .. " inverse shape")
        local il = flat_values(inv)
        for p = 1, #flat do assert.are.equal(run_of[p], il[p], what .. " inverse") end
        assert.are.equal(dtype, u:dtype())
        assert.are.equal("int64", inv:dtype())
        local only = t:unique()
        T.assert_equal(only, u, what .. " alone")
        local u2, c2 = t:unique({ return_counts = true })
        T.assert_equal(c2, cnt, what .. " counts alone")
        T.assert_equal(u2, u, what)
      end
    end
  end
  local u = qlua.tensor({ 0 / 0, 1, -(0 / 0), -0.0, 0.0 }, { device = dev }):unique()
  assert.are.equal(3, u:numel())
end

test("unique with inverse and counts, on the CPU", function() check_unique("cpu") end)
gtest("unique on the GPU", function() check_unique("gpu") end)

------------------------------------------------------------------------ bincount, histc

local function check_bincount(dev)
  for _, dtype in ipairs({ "int32", "int64", "uint8", "bool" }) do
    local flat = {}
    for i = 1, 40 do
      if dtype == "bool" then flat[i] = math.random() < 0.5 else flat[i] = math.random(0, 9) end
    end
    local t = T.make(flat, dtype, "stepped", dev)
    for _, minlength in ipairs({ 0, 3, 15 }) do
      local maxv = 0
      for _, v in ipairs(flat) do maxv = math.max(maxv, num(v)) end
      local len = math.max(maxv + 1, minlength)
      local want, wsum, weights = {}, {}, {}
      for j = 1, len do want[j] = 0; wsum[j] = 0 end
      for i, v in ipairs(flat) do
        weights[i] = T.as_dtype(math.random() * 2 - 1, "float32")
        want[num(v) + 1] = want[num(v) + 1] + 1
        wsum[num(v) + 1] = wsum[num(v) + 1] + weights[i]
      end
      local c = minlength == 0 and t:bincount() or t:bincount(minlength)
      assert.are.equal("int64", c:dtype())
      T.assert_equal(c, want, "bincount " .. dtype)
      local w = qlua.tensor(weights, { device = dev })
      local s = t:bincount(w, minlength)
      assert.are.equal("float32", s:dtype())
      T.assert_close(s, wsum, 1e-5, "bincount weights " .. dtype)
      local s64 = t:bincount(w:to("float64"), minlength)
      assert.are.equal("float64", s64:dtype())
      T.assert_close(s64, wsum, 1e-12, "bincount float64 weights")
      assert.are.equal("float64", t:bincount(w:to("int32")):dtype())
    end
  end
  T.assert_equal(qlua.tensor({}, { dtype = "int64", device = dev }):bincount(), {}, "empty")
  T.assert_equal(qlua.tensor({}, { dtype = "int64", device = dev }):bincount(3), { 0, 0, 0 },
    "empty with minlength")
end

local function ref_histc(flat, bins, lo, hi)
  local c = {}
  for j = 1, bins do c[j] = 0 end
  for _, x in ipairs(flat) do
    if x >= lo and x <= hi then
      local b = math.floor((x - lo) / (hi - lo) * bins)
      if b >= bins then b = bins - 1 end
      c[b + 1] = c[b + 1] + 1
    end
  end
  return c
end

local function check_histc(dev)
  for _, dtype in ipairs({ "float32", "float64", "int32", "int64", "uint8" }) do
    local flat = {}
    for i = 1, 50 do
      if T.is_float_dtype(dtype) then
        flat[i] = math.random() < 0.1 and NAN or T.as_dtype(math.random() * 12 - 3, dtype)
      else
        flat[i] = math.random(0, 9)
      end
    end
    local t = T.make(T.unflatten(flat, { 5, 10 }), dtype, "transposed", dev)
    local h = t:histc(7, 0, 8)
    assert.are.equal(T.is_float_dtype(dtype) and dtype or "float32", h:dtype())
    T.assert_equal(h, ref_histc(flat, 7, 0, 8), "histc " .. dtype)
    -- min == max == 0: the data's range (floats here hold NaN: refused, see below)
    if not T.is_float_dtype(dtype) then
      local lo, hi = math.huge, -math.huge
      for _, x in ipairs(flat) do lo = math.min(lo, x); hi = math.max(hi, x) end
      T.assert_equal(t:histc(4), ref_histc(flat, 4, lo, hi), "histc data range")
    end
  end
  -- an empty range is widened by one each side; the default is 100 bins
  local c = qlua.tensor({ 2, 2, 2 }, { device = dev }):histc(4, 2, 2)
  T.assert_equal(c, { 0, 0, 3, 0 }, "histc widened")
  T.assert_shape(qlua.tensor({ 1, 2 }, { device = dev }):histc(), { 100 }, "default bins")
  T.assert_equal(qlua.tensor({}, { device = dev }):histc(3, 0, 1), { 0, 0, 0 }, "empty")
end

test("bincount with weights and minlength, on the CPU", function() check_bincount("cpu") end)
gtest("bincount on the GPU", function() check_bincount("gpu") end)
test("histc, on the CPU", function() check_histc("cpu") end)
gtest("histc on the GPU", function() check_histc("gpu") end)

------------------------------------------------------------------------ searchsorted

local function ref_search(sorted, v, right)
  local c = 0
  for _, s in ipairs(sorted) do
    if less(s, v) or (right and same(s, v)) then c = c + 1 end
  end
  return c + 1
end

local function check_searchsorted(dev)
  for _, dtype in ipairs(DTYPES) do
    for _, n in ipairs({ 0, 1, 6, 13 }) do
      local flat = rflat(n, dtype)
      table.sort(flat, less)
      local sorted = T.make(flat, dtype, n > 0 and "stepped" or "contiguous", dev, { n })
      local vals = rflat(10, dtype)
      local vt = T.make(T.unflatten(vals, { 2, 5 }), dtype, "transposed", dev)
      for _, right in ipairs({ false, true }) do
        local r = qlua.searchsorted(sorted, vt, right)
        T.assert_shape(r, { 2, 5 }, "searchsorted shape")
        local rl = flat_values(r)
        for j, v in ipairs(vals) do
          assert.are.equal(ref_search(flat, v, right), rl[j],
            string.format("searchsorted %s n %d %s of %s", dtype, n, right and "right" or "left",
              tostring(v)))
        end
      end
    end
  end
  -- rows: a 2-D sorted sequence searched row by row
  local s = qlua.tensor({ { 1, 3, 5 }, { 2, 4, 6 } }, { device = dev })
  T.assert_equal(qlua.searchsorted(s, qlua.tensor({ { 3, 6 }, { 1, 7 } }, { device = dev })),
    { { 2, 4 }, { 1, 4 } }, "rows")
  T.assert_equal(qlua.searchsorted(s, qlua.tensor({ { 3, 6 }, { 1, 7 } }, { device = dev }), true),
    { { 3, 4 }, { 1, 4 } }, "rows right")
  -- a number gives a 0-d result; a table of numbers a tensor; mixed dtypes promote
  local one = qlua.tensor({ 1, 2, 3 }, { device = dev })
  assert.are.equal(3, qlua.searchsorted(one, 2.5):item())
  T.assert_equal(qlua.searchsorted(one, { 0, 3 }, true), { 1, 4 }, "table")
end

test("searchsorted, left and right, on the CPU", function() check_searchsorted("cpu") end)
gtest("searchsorted on the GPU", function() check_searchsorted("gpu") end)

------------------------------------------------------------------------ errors

local function check_errors(dev)
  local t = qlua.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { device = dev })
  local function fails(pattern, fn, ...)
    local ok, msg = pcall(fn, ...)
    assert.is_false(ok, "expected an error matching " .. pattern)
    assert.truthy(tostring(msg):find(pattern, 1, true), tostring(msg))
  end
  fails("sort: dim 3 out of range (1..2)", t.sort, t, 3)
  fails("argsort: dim 0 out of range (1..2)", t.argsort, t, 0)
  fails("topk: k 4 out of range (0..3) for dim 2 of size 3", t.topk, t, 4)
  fails("topk: k -1 out of range", t.topk, t, -1)
  fails("kthvalue: k 3 out of range (1..2) for dim 1 of size 2", t.kthvalue, t, 3, 1)
  fails("kthvalue: k 0 out of range", t.kthvalue, t, 0)
  fails("median: the dim is empty", qlua.zeros({ 2, 0 }, { device = dev }).median,
    qlua.zeros({ 2, 0 }, { device = dev }), 2)
  fails("median: the tensor is empty", qlua.zeros({ 0 }, { device = dev }).median,
    qlua.zeros({ 0 }, { device = dev }))
  fails("unique: unknown option 'inverse'", t.unique, t, { inverse = true })
  fails("bincount: the input must be 1-D, got shape 2x3", t.bincount, t)
  local neg = qlua.tensor({ 1, -2, 3 }, { device = dev })
  fails("bincount: the input holds the negative value -2", neg.bincount, neg)
  local f = qlua.tensor({ 1.5 }, { device = dev })
  fails("bincount: the input must be of an integer dtype, got float32", f.bincount, f)
  local ints = qlua.tensor({ 1, 2 }, { device = dev })
  fails("bincount: weights of shape 3 for an input of shape 2", ints.bincount, ints,
    qlua.tensor({ 1, 2, 3 }, { device = dev }))
  fails("bincount: minlength -1 is negative", ints.bincount, ints, -1)
  fails("histc: bins 0 must be >= 1", f.histc, f, 0)
  fails("histc: min 2 is greater than max 1", f.histc, f, 3, 2, 1)
  local nanf = qlua.tensor({ 1, 0 / 0 }, { device = dev })
  fails("histc: the data's range", nanf.histc, nanf, 3)
  fails("histc: bool tensors have no histogram", qlua.tensor({ true }, { device = dev }).histc,
    qlua.tensor({ true }, { device = dev }))
  fails("searchsorted: the sorted sequence must have dims", qlua.searchsorted,
    qlua.tensor(1, { device = dev }), ints)
  fails("searchsorted: a sorted sequence of shape 2x3 needs values of its leading dims",
    qlua.searchsorted, t, qlua.tensor({ 1, 2, 3 }, { device = dev }))
  fails("sort: unexpected argument", t.sort, t, 1, true, 3)
  local freed = qlua.tensor({ 1, 2 }, { device = dev })
  freed:free()
  fails("sort: tensor has been freed", freed.sort, freed)
  fails("searchsorted: tensor has been freed", qlua.searchsorted, ints, freed)
end

test("errors name the op and the values, on the CPU", function() check_errors("cpu") end)
gtest("errors on the GPU", function() check_errors("gpu") end)
