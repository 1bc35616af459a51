-- Indexing ops (docs/API.md "Indexing ops"): gather (with and without dim), index_select,
-- take, scatter_ (tensor and number), index_add_ (duplicates accumulate), scatter_add_
-- (duplicates accumulate; integer sums wrap, bool sums are an or), index_fill_ (a number
-- into whole slices) and index_copy_ (slices of src into slices of dst), against plain-Lua
-- references, on every dtype this qlua has (bool and uint8 when they exist), on views
-- (transposed, narrowed, stepped destinations and sources), with index tensors int32 /
-- int64 / Lua tables, contiguous or not; empty tensors, 0-d, bad index values with the
-- exact message, shape-rule violations and bad arguments. GPU parity cases (against the
-- CPU) are pending without a GPU.
local T, qlua, test, gtest = require("qlua.testing").spec(_ENV)

local ref = T.ref

-- The same index values in the forms the API takes: a table, int64 and int32 tensors, and
-- both in a non-contiguous layout.
local function index_forms(idx, shape, device)
  shape = shape or T.shape_of(idx)
  local layout = T.noncontiguous_layouts[math.random(1, 3)]
  local forms = { { "table", idx } }
  for _, f in ipairs({ { "int64", "contiguous" }, { "int32", "contiguous" },
                       { "int32", layout }, { "int64", layout } }) do
    forms[#forms + 1] = { f[1] .. " " .. f[2], T.make(idx, f[1], f[2], device, shape) }
  end
  return forms
end

local function bad_index_msg(op, value, bound, pos)
  return string.format("%s: index %d out of range (1..%d) at position %d", op, value, bound, pos)
end

-- ==================================== gather, index_select, take, scatter_, index_add_

-- Index values along `dim` that are distinct in every line along dim (no duplicate
-- writes for scatter_): for each position of the other dims, the first n of a
-- permutation of 1..bound.
local function unique_index(shape, dim, bound)
  local flat = {}
  local others = T.copy_list(shape)
  others[dim] = 1
  T.each_index(others, function(pos)
    local perm = T.permutation(bound)
    local q = T.copy_list(pos)
    for i = 1, shape[dim] do
      q[dim] = i
      flat[T.linear(shape, q)] = perm[i]
    end
  end)
  return T.unflatten(flat, shape)
end

describe("gather", function()
  test("without dim on a 1-D source: out[i] = src[index[i]]", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        local src = T.random_table({ 50 }, dtype)
        local t = T.make(src, dtype, layout)
        local idx = T.random_index({ 80 }, 50)
        for _, form in ipairs(index_forms(idx)) do
          local r = t:gather(form[2])
          assert.equal(dtype, r:dtype())
          T.assert_equal(r, ref.gather(src, 1, idx), dtype .. " " .. layout .. " " .. form[1])
        end
      end
    end
  end)

  test("index of any shape on a 1-D source through dim 1", function()
    local src = T.random_table({ 30 }, "float32")
    local t = qlua.tensor(src)
    local idx = T.random_index({ 7 }, 30)
    T.assert_equal(t:gather(1, idx), ref.gather(src, 1, idx))
  end)

  test("2-D along dims 1 and 2, with index smaller than the source", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        local src = T.random_table({ 5, 6 }, dtype)
        local t = T.make(src, dtype, layout)
        for dim = 1, 2 do
          for _, ishape in ipairs({ { 5, 6 }, { 3, 4 }, { 8, 6 }, { 2, 9 } }) do
            -- the non-dim sizes must not exceed the source's
            local ok = true
            for d = 1, 2 do if d ~= dim and ishape[d] > t:size(d) then ok = false end end
            if ok then
              local idx = T.random_index(ishape, dim == 1 and 5 or 6)
              for _, form in ipairs(index_forms(idx)) do
                local what = string.format("gather(%d) %s %s index %s %s", dim, dtype, layout, T.shape_str(ishape), form[1])
                local r = t:gather(dim, form[2])
                T.assert_shape(r, ishape, what)
                T.assert_equal(r, ref.gather(src, dim, idx), what)
              end
            end
          end
        end
      end
    end
  end)

  test("3-D along every dim", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        local src = T.random_table({ 4, 5, 6 }, dtype)
        local t = T.make(src, dtype, layout)
        for dim = 1, 3 do
          local ishape = { math.random(1, 4), math.random(1, 5), math.random(1, 6) }
          ishape[dim] = math.random(1, 9)
          local idx = T.random_index(ishape, t:size(dim))
          local ilayout = T.layouts[math.random(1, 4)]
          local r = t:gather(dim, T.make(idx, "int64", ilayout, nil, ishape))
          T.assert_equal(r, ref.gather(src, dim, idx), string.format("gather(%d) %s %s, index %s", dim, dtype, layout, ilayout))
          T.assert_equal(t:gather(dim, idx), ref.gather(src, dim, idx))
        end
      end
    end
  end)

  test("empty index gives an empty result", function()
    local t = qlua.tensor({ 1.5, 2.5 })
    T.assert_shape(t:gather(qlua.zeros(0, { dtype = "int64" })), { 0 })
    T.assert_shape(qlua.zeros(3, 4):gather(2, qlua.zeros(3, 0, { dtype = "int32" })), { 3, 0 })
  end)

  test("bad index values give the exact message and position", function()
    local src = qlua.rand(100)
    for _, bad in ipairs({ 0, -3, 101, 1000000 }) do
      local idx = T.random_index({ 8 }, 100)
      idx[5] = bad
      for _, form in ipairs(index_forms(idx)) do
        T.assert_error(function() local _ = src:gather(form[2]) end, bad_index_msg("gather", bad, 100, 5))
      end
    end
    -- with a dim: the bound is the size along dim; the position is row-major in index
    local m = qlua.rand(4, 6)
    local idx = T.random_index({ 3, 5 }, 6)
    idx[2][3] = 7
    for _, form in ipairs(index_forms(idx)) do
      T.assert_error(function() local _ = m:gather(2, form[2]) end, bad_index_msg("gather", 7, 6, 8))
    end
    local idx1 = T.random_index({ 3, 5 }, 4)
    idx1[3][1] = 0
    T.assert_error(function() local _ = m:gather(1, idx1) end, bad_index_msg("gather", 0, 4, 11))
  end)

  test("int64 index values beyond 32 bits are bad values, not wrapped", function()
    local src = qlua.rand(10)
    local idx = qlua.tensor({ 1, (1 << 32) + 2 })
    T.assert_error(function() local _ = src:gather(idx) end, bad_index_msg("gather", (1 << 32) + 2, 10, 2))
  end)

  test("shape-rule violations are errors", function()
    local src = qlua.rand(4, 5)
    -- index must have src's number of dims
    T.assert_error(function() local _ = src:gather(1, qlua.ones(3, { dtype = "int64" })) end, "gather")
    T.assert_error(function() local _ = src:gather(1, qlua.ones(2, 2, 2, { dtype = "int64" })) end, "gather")
    -- index:size(d) <= src:size(d) for d ~= dim
    T.assert_error(function() local _ = src:gather(1, qlua.ones(2, 6, { dtype = "int64" })) end, "gather")
    T.assert_error(function() local _ = src:gather(2, qlua.ones(5, 2, { dtype = "int64" })) end, "gather")
    -- dims out of range
    T.assert_error(function() local _ = src:gather(3, qlua.ones(4, 5, { dtype = "int64" })) end, "gather")
    T.assert_error(function() local _ = src:gather(0, qlua.ones(4, 5, { dtype = "int64" })) end, "gather")
  end)

  test("float index tensors are refused, naming the dtype", function()
    local src = qlua.rand(10)
    T.assert_error(function() local _ = src:gather(qlua.ones(3)) end, "gather", "float32")
    T.assert_error(function() local _ = src:gather(qlua.ones(3, { dtype = "float64" })) end, "gather", "float64")
    T.assert_error(function() local _ = src:gather({ 1.5, 2 }) end, "gather")
  end)
end)

describe("index_select", function()
  test("whole slices along each dim, duplicates allowed", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        local src = T.random_table({ 4, 5, 3 }, dtype)
        local t = T.make(src, dtype, layout)
        for dim = 1, 3 do
          local idx = T.random_index({ math.random(1, 7) }, t:size(dim))
          for _, form in ipairs(index_forms(idx)) do
            local r = t:index_select(dim, form[2])
            local what = string.format("index_select(%d) %s %s %s", dim, dtype, layout, form[1])
            assert.equal(dtype, r:dtype(), what)
            T.assert_equal(r, ref.index_select(src, dim, idx), what)
          end
        end
      end
    end
  end)

  test("an empty index gives zero slices", function()
    local r = qlua.rand(3, 4):index_select(1, qlua.zeros(0, { dtype = "int64" }))
    T.assert_shape(r, { 0, 4 })
  end)

  test("bad values give the exact message; index must be 1-D", function()
    local src = qlua.rand(6, 2)
    for _, bad in ipairs({ 0, -1, 7 }) do
      local idx = { 1, 2, bad, 4 }
      for _, form in ipairs(index_forms(idx)) do
        T.assert_error(function() local _ = src:index_select(1, form[2]) end, bad_index_msg("index_select", bad, 6, 3))
      end
    end
    T.assert_error(function() local _ = src:index_select(2, { 1, 3 }) end, bad_index_msg("index_select", 3, 2, 2))
    T.assert_error(function() local _ = src:index_select(1, qlua.ones(2, 2, { dtype = "int64" })) end, "index_select")
    T.assert_error(function() local _ = src:index_select(3, { 1 }) end, "index_select")
    T.assert_error(function() local _ = src:index_select(1, qlua.ones(2)) end, "index_select", "float32")
  end)
end)

describe("take", function()
  test("gathers from the flattened source in row-major order", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        local src = T.random_table({ 4, 6 }, dtype)
        local t = T.make(src, dtype, layout)
        for _, ishape in ipairs({ { 10 }, { 3, 5 }, { 2, 2, 3 } }) do
          local idx = T.random_index(ishape, 24)
          for _, form in ipairs(index_forms(idx)) do
            local r = t:take(form[2])
            local what = string.format("take %s %s %s %s", dtype, layout, T.shape_str(ishape), form[1])
            T.assert_shape(r, ishape, what)
            T.assert_equal(r, ref.take(src, idx), what)
          end
        end
      end
    end
  end)

  test("bad values give the exact message", function()
    local src = qlua.rand(4, 6)
    for _, bad in ipairs({ 0, -2, 25 }) do
      local idx = { { 1, 24 }, { bad, 3 } }
      for _, form in ipairs(index_forms(idx)) do
        T.assert_error(function() local _ = src:take(form[2]) end, bad_index_msg("take", bad, 24, 3))
      end
    end
    T.assert_error(function() local _ = src:take(qlua.ones(2, { dtype = "float64" })) end, "take", "float64")
  end)
end)

describe("scatter_", function()
  test("dst[index[i][j]][j] = src[i][j] along every dim, returning dst", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        local dshape = { 5, 6, 4 }
        for dim = 1, 3 do
          local dst = T.random_table(dshape, dtype)
          local ishape = { math.random(1, 5), math.random(1, 6), math.random(1, 4) }
          ishape[dim] = math.random(1, dshape[dim])
          local idx = unique_index(ishape, dim, dshape[dim])
          -- src may be larger than index in every dim
          local sshape = T.copy_list(ishape)
          for d = 1, 3 do sshape[d] = sshape[d] + math.random(0, 1) end
          local src = T.random_table(sshape, dtype)
          local want = ref.scatter(dst, dim, idx, src)
          for _, form in ipairs(index_forms(idx)) do
            local td = T.make(dst, dtype, layout)
            local ts = T.make(src, dtype, T.layouts[math.random(1, 4)])
            local r = td:scatter_(dim, form[2], ts)
            local what = string.format("scatter_(%d) %s %s %s", dim, dtype, layout, form[1])
            assert.is_true(rawequal(r, td), what .. " returns dst")
            T.assert_equal(td, want, what)
            T.assert_equal(ts, src, what .. ": src changed")
          end
        end
      end
    end
  end)

  test("a number is written at every indexed position", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        local dst = T.random_table({ 4, 5 }, dtype)
        local idx = T.random_index({ 3, 5 }, 4)   -- duplicates are fine for a number
        local v = T.random_value(dtype)
        local td = T.make(dst, dtype, layout)
        td:scatter_(1, idx, v)
        T.assert_equal(td, ref.scatter(dst, 1, idx, v), dtype .. " " .. layout)
      end
    end
  end)

  test("1-D scatter_", function()
    local dst = T.random_table({ 10 }, "float64")
    local idx = T.permutation(10)
    local src = T.random_table({ 10 }, "float64")
    local td = qlua.tensor(dst, { dtype = "float64" })
    td:scatter_(1, { idx[1], idx[2], idx[3] }, qlua.tensor(src, { dtype = "float64" }))
    T.assert_equal(td, ref.scatter(dst, 1, { idx[1], idx[2], idx[3] }, src))
  end)

  test("with duplicate indices one of the written values wins", function()
    local td = qlua.zeros(3)
    td:scatter_(1, { 2, 2, 2 }, qlua.tensor({ 10, 20, 30 }, { dtype = "float32" }))
    local v = td:totable()
    assert.equal(0, v[1])
    assert.equal(0, v[3])
    assert.is_true(v[2] == 10 or v[2] == 20 or v[2] == 30)
  end)

  test("bad values give the exact message and write nothing", function()
    for _, bad in ipairs({ 0, -1, 6 }) do
      local dst = T.random_table({ 5, 3 }, "float32")
      local td = qlua.tensor(dst)
      local idx = { { 1, 2, 3 }, { 4, bad, 5 } }
      for _, form in ipairs(index_forms(idx)) do
        local tail = string.format(": index %d out of range (1..5) at position 5", bad)
        local m1 = T.assert_error(function() td:scatter_(1, form[2], qlua.rand(2, 3)) end, tail)
        local m2 = T.assert_error(function() td:scatter_(1, form[2], 9.5) end, tail)
        assert.matches("^scatter_?: index", m1)
        assert.matches("^scatter_?: index", m2)
        T.assert_equal(td, dst, "dst changed by a failed scatter_")
      end
    end
  end)

  test("shape-rule violations are errors", function()
    local dst = qlua.zeros(4, 5)
    local idx = qlua.ones(2, 3, { dtype = "int64" })
    T.assert_error(function() dst:scatter_(1, idx, qlua.rand(1, 3)) end, "scatter")     -- src smaller than index
    T.assert_error(function() dst:scatter_(1, qlua.ones(2, 6, { dtype = "int64" }), qlua.rand(2, 6)) end, "scatter")
    T.assert_error(function() dst:scatter_(1, qlua.ones(3, { dtype = "int64" }), qlua.rand(3)) end, "scatter")
    T.assert_error(function() dst:scatter_(3, idx, qlua.rand(2, 3)) end, "scatter")
    T.assert_error(function() dst:scatter_(1, qlua.ones(2, 3), qlua.rand(2, 3)) end, "scatter", "float32")
  end)
end)

describe("index_add_", function()
  test("adds slices along every dim, accumulating duplicates", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        local dshape = { 4, 5, 3 }
        for dim = 1, 3 do
          local dst = T.random_table(dshape, dtype)
          local n = math.random(1, 8)
          local idx = T.random_index({ n }, dshape[dim])
          idx[math.random(1, n)] = idx[1]   -- at least one duplicate when n > 1
          local sshape = T.copy_list(dshape)
          sshape[dim] = n
          local src = T.random_table(sshape, dtype)
          local want = ref.index_add(dst, dim, idx, src)
          for _, form in ipairs(index_forms(idx)) do
            local td = T.make(dst, dtype, layout)
            local ts = T.make(src, dtype, T.layouts[math.random(1, 4)])
            local r = td:index_add_(dim, form[2], ts)
            local what = string.format("index_add_(%d) %s %s %s", dim, dtype, layout, form[1])
            assert.is_true(rawequal(r, td), what .. " returns dst")
            T.assert_matches_dtype(td, want, dtype, what)
          end
        end
      end
    end
  end)

  test("every source row into one destination row", function()
    local td = qlua.zeros(3, 2, { dtype = "int64" })
    td:index_add_(1, { 2, 2, 2, 2 }, qlua.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 }, { 7, 8 } }))
    T.assert_equal(td, { { 0, 0 }, { 16, 20 }, { 0, 0 } })
  end)

  test("bad values give the exact message and add nothing", function()
    for _, bad in ipairs({ 0, -4, 4 }) do
      local dst = T.random_table({ 3, 2 }, "float64")
      local td = qlua.tensor(dst, { dtype = "float64" })
      for _, form in ipairs(index_forms({ 1, 3, bad })) do
        local msg = T.assert_error(function() td:index_add_(1, form[2], qlua.rand({ 3, 2 }, { dtype = "float64" })) end,
          string.format(": index %d out of range (1..3) at position 3", bad))
        assert.matches("^index_add_?: index", msg)
        T.assert_equal(td, dst, "dst changed by a failed index_add_")
      end
    end
  end)

  test("shape-rule violations are errors", function()
    local dst = qlua.zeros(4, 5)
    T.assert_error(function() dst:index_add_(1, { 1, 2 }, qlua.rand(3, 5)) end, "index_add")
    T.assert_error(function() dst:index_add_(1, { 1, 2 }, qlua.rand(2, 4)) end, "index_add")
    T.assert_error(function() dst:index_add_(1, { { 1, 2 } }, qlua.rand(2, 5)) end, "index_add")
    T.assert_error(function() dst:index_add_(3, { 1 }, qlua.rand(4, 5)) end, "index_add")
    T.assert_error(function() dst:index_add_(1, qlua.ones(2), qlua.rand(2, 5)) end, "index_add", "float32")
  end)
end)

-- ================== scatter_add_, index_fill_, index_copy_; every op on bool and uint8

-- The dtypes to run: the four of every spec, then the 1-byte ones when this build has them
-- (so the spec passes before and after they land).
local function has_dtype(name) return (pcall(qlua.zeros, 1, { dtype = name })) end
local DTYPES = T.copy_list(T.dtypes)
local SMALL = {}
for _, d in ipairs({ "uint8", "bool" }) do
  if has_dtype(d) then DTYPES[#DTYPES + 1] = d; SMALL[#SMALL + 1] = d end
end

------------------------------------------------------------------------ references

-- a + b as dtype stores it: floats rounded (float32), integers wrapped to their width, bool
-- an or (PyTorch's index_add_/scatter_add_ on bool: true + anything is true).
local function add_as(dtype, a, b)
  if dtype == "bool" then return a or b end
  if dtype == "float32" then return T.f32(a + b) end
  if dtype == "float64" then return a + b end
  if dtype == "int32" then return ((a + b + 0x80000000) & 0xffffffff) - 0x80000000 end
  if dtype == "uint8" then return (a + b) & 0xff end
  return a + b  -- int64: Lua's integers wrap the same way
end

-- One random value of dtype (bool and uint8 included).
local function random_value(dtype)
  if dtype == "bool" then return math.random() < 0.5 end
  if dtype == "uint8" then return math.random(0, 255) end
  return T.random_value(dtype)
end

local function random_table(shape, dtype)
  local flat = {}
  for i = 1, T.numel(shape) do flat[i] = random_value(dtype) end
  return T.unflatten(flat, shape)
end

-- dst[pos with dim = index[pos]] += src[pos] over index's shape, in row-major order.
local function ref_scatter_add(dst, dshape, dim, index, ishape, src, sshape, dtype)
  local out = T.copy_list((T.flatten(dst)))
  local iflat, sflat = (T.flatten(index)), (T.flatten(src))
  T.each_index(ishape, function(pos, k)
    local q = T.copy_list(pos)
    q[dim] = iflat[k]
    local l = T.linear(dshape, q)
    out[l] = add_as(dtype, out[l], sflat[T.linear(sshape, pos)])
  end)
  return T.unflatten(out, dshape)
end

-- dst.select(dim, index[k]) += src.select(dim, k), in src's row-major order.
local function ref_index_add(dst, dshape, dim, index, src, sshape, dtype)
  local out = T.copy_list((T.flatten(dst)))
  local sflat = (T.flatten(src))
  T.each_index(sshape, function(pos, k)
    local q = T.copy_list(pos)
    q[dim] = index[pos[dim]]
    local l = T.linear(dshape, q)
    out[l] = add_as(dtype, out[l], sflat[k])
  end)
  return T.unflatten(out, dshape)
end

-- dst[pos with dim = index[pos]] = src[pos] over index's shape (distinct targets here).
-- (T.ref.scatter reads a false element as "no source": bool needs this one.)
local function ref_scatter(dst, dshape, dim, index, ishape, src, sshape)
  local out = T.copy_list((T.flatten(dst)))
  local iflat, sflat = (T.flatten(index)), (T.flatten(src))
  T.each_index(ishape, function(pos, k)
    local q = T.copy_list(pos)
    q[dim] = iflat[k]
    out[T.linear(dshape, q)] = sflat[T.linear(sshape, pos)]
  end)
  return T.unflatten(out, dshape)
end

-- Every element of dst whose coordinate along dim is in index becomes v.
local function ref_index_fill(dst, dshape, dim, index, v)
  local out = T.copy_list((T.flatten(dst)))
  local hit = {}
  for _, i in ipairs(index) do hit[i] = true end
  T.each_index(dshape, function(pos, k) if hit[pos[dim]] then out[k] = v end end)
  return T.unflatten(out, dshape)
end

-- dst.select(dim, index[k]) = src.select(dim, k) (the specs use distinct indices here).
local function ref_index_copy(dst, dshape, dim, index, src, sshape)
  local out = T.copy_list((T.flatten(dst)))
  local sflat = (T.flatten(src))
  T.each_index(sshape, function(pos, k)
    local q = T.copy_list(pos)
    q[dim] = index[pos[dim]]
    out[T.linear(dshape, q)] = sflat[k]
  end)
  return T.unflatten(out, dshape)
end

------------------------------------------------------------------------ helpers

-- A shape for scatter_add_'s index: at most dst's size off dim, up to 6 along it.
local function scatter_index_shape(dshape, dim)
  local s = {}
  for d = 1, #dshape do s[d] = d == dim and math.random(1, 6) or math.random(1, dshape[d]) end
  return s
end

-- The first n values of a permutation of 1..bound: distinct indices.
local function distinct_index(n, bound)
  local p = T.permutation(bound)
  local idx = {}
  for i = 1, n do idx[i] = p[i] end
  return idx
end

local function what_of(op, dim, dtype, layout, form)
  return string.format("%s(%d) %s %s %s", op, dim, dtype, layout, form)
end

------------------------------------------------------------------------ scatter_add_

describe("scatter_add_", function()
  test("dst[index[i][j]][j] += src[i][j] along every dim, every dtype, views", function()
    local dshape = { 4, 5, 3 }
    for _, dtype in ipairs(DTYPES) do
      for _, layout in ipairs(T.layouts) do
        for dim = 1, 3 do
          local ishape = scatter_index_shape(dshape, dim)
          local sshape = {}
          for d = 1, 3 do sshape[d] = ishape[d] + math.random(0, 1) end  -- src may be larger
          local dst = random_table(dshape, dtype)
          local src = random_table(sshape, dtype)
          local idx = T.random_index(ishape, dshape[dim])  -- duplicates likely
          local want = ref_scatter_add(dst, dshape, dim, idx, ishape, src, sshape, dtype)
          for _, form in ipairs(index_forms(idx, ishape)) do
            local td = T.make(dst, dtype, layout)
            local ts = T.make(src, dtype, T.layouts[math.random(1, 4)])
            local what = what_of("scatter_add_", dim, dtype, layout, form[1])
            assert.is_true(rawequal(td:scatter_add_(dim, form[2], ts), td), what .. " returns dst")
            T.assert_matches_dtype(td, want, dtype, what)
          end
        end
      end
    end
  end)

  test("duplicates accumulate in a 1-D destination", function()
    local td = qlua.zeros(3, { dtype = "int64" })
    td:scatter_add_(1, { 2, 2, 2, 1 }, qlua.tensor({ 1, 2, 3, 4 }, { dtype = "int64" }))
    T.assert_equal(td, { 4, 6, 0 })
    local tf = qlua.zeros(2, 3)
    tf:scatter_add_(1, { { 1, 2, 1 }, { 1, 1, 1 } }, qlua.ones(2, 3))
    T.assert_equal(tf, { { 2, 1, 2 }, { 0, 1, 0 } })
  end)

  test("integer sums wrap; bool sums are an or", function()
    local ti = qlua.tensor({ 2147483647, -2147483648 }, { dtype = "int32" })
    ti:scatter_add_(1, { 1, 2, 2 }, qlua.tensor({ 1, -1, -1 }, { dtype = "int32" }))
    T.assert_equal(ti, { -2147483648, 2147483646 })
    local tl = qlua.tensor({ math.maxinteger }, { dtype = "int64" })
    tl:scatter_add_(1, { 1 }, qlua.tensor({ 1 }, { dtype = "int64" }))
    T.assert_equal(tl, { math.mininteger })
    if has_dtype("uint8") then
      local tu = qlua.tensor({ 250, 0 }, { dtype = "uint8" })
      tu:scatter_add_(1, { 1, 1, 2 }, qlua.tensor({ 5, 10, 255 }, { dtype = "uint8" }))
      T.assert_equal(tu, { 9, 255 })
    end
    if has_dtype("bool") then
      local tb = qlua.tensor({ false, true, false }, { dtype = "bool" })
      tb:scatter_add_(1, { 1, 1, 2, 3 }, qlua.tensor({ false, true, false, false }, { dtype = "bool" }))
      T.assert_equal(tb, { true, true, false })
    end
  end)

  test("src of another dtype is converted; src sharing dst's storage is read before writing", function()
    local td = qlua.zeros(2, 2)
    td:scatter_add_(1, { { 2, 1 } }, qlua.tensor({ { 3, 4 } }, { dtype = "int64" }))
    T.assert_equal(td, { { 0, 4 }, { 3, 0 } })
    assert.equal("float32", td:dtype())
    local t = qlua.tensor({ 1, 2, 3 }, { dtype = "int64" })
    t:scatter_add_(1, { 3, 3, 1 }, t)     -- index and src both read the old values
    T.assert_equal(t, { 4, 2, 6 })
    local s = qlua.tensor({ 2, 1, 1 }, { dtype = "int64" })
    s:scatter_add_(1, s, s)               -- the index is dst itself
    T.assert_equal(s, { 4, 3, 1 })
  end)

  test("empty index, empty dst, 0-d", function()
    local td = qlua.tensor({ { 1, 2 }, { 3, 4 } })
    td:scatter_add_(1, qlua.zeros(0, 2, { dtype = "int64" }), qlua.ones(0, 2))
    T.assert_equal(td, { { 1, 2 }, { 3, 4 } })
    -- nothing to write into, but every index still counts: a dim of size 0 has none valid
    local e = qlua.zeros(0, 3)
    T.assert_error(function() e:scatter_add_(1, { { 1 } }, qlua.ones(1, 1)) end,
      bad_index_msg("scatter_add_", 1, 0, 1))
    e:scatter_add_(2, qlua.zeros(0, 2, { dtype = "int64" }), qlua.ones(0, 2))
    T.assert_shape(e, { 0, 3 })
    local z = qlua.tensor(5)
    T.assert_error(function() z:scatter_add_(1, { 1 }, qlua.ones(1)) end,
      "scatter_add_: dim 1 out of range (tensor is 0-d)")
  end)

  test("bad index values give the exact message and add nothing", function()
    local dst = random_table({ 3, 4 }, "float32")
    for _, bad in ipairs({ 0, -2, 4, 1 << 40 }) do
      local idx = { { 1, 2, 3, 1 }, { 2, 3, bad, 1 } }
      local forms = bad == 1 << 40 and { { "table", idx }, { "int64", T.make(idx, "int64") } }
                    or index_forms(idx)   -- (2^40 does not fit int32)
      for _, form in ipairs(forms) do
        local td = qlua.tensor(dst)
        T.assert_error(function() td:scatter_add_(1, form[2], qlua.ones(2, 4)) end,
          bad_index_msg("scatter_add_", bad, 3, 7))
        T.assert_equal(td, dst, "dst changed by a failed scatter_add_ " .. form[1])
      end
    end
  end)

  test("bad arguments name the op and the values", function()
    local td = qlua.zeros(3, 4)
    local idx = { { 1, 2 } }
    T.assert_error(function() td:scatter_add_(3, idx, qlua.ones(1, 2)) end,
      "scatter_add_: dim 3 out of range (1..2)")
    T.assert_error(function() td:scatter_add_(0, idx, qlua.ones(1, 2)) end,
      "scatter_add_: dim 0 out of range (1..2)")
    T.assert_error(function() td:scatter_add_(1, qlua.ones(1, 2), qlua.ones(1, 2)) end,
      "scatter_add_: index must be int32 or int64, got float32")
    T.assert_error(function() td:scatter_add_(1, { 1, 2 }, qlua.ones(2)) end,
      "scatter_add_: index shape 2 and dst shape 3x4 differ in dims (1 and 2)")
    T.assert_error(function() td:scatter_add_(1, { { 1, 2 } }, qlua.ones(2)) end,
      "scatter_add_: index shape 1x2 and src shape 2 differ in dims (2 and 1)")
    T.assert_error(function() td:scatter_add_(1, { { 1, 2 } }, qlua.ones(2, 1)) end,
      "scatter_add_: index shape 1x2 does not fit src shape 2x1 (dim 2: 2 > 1)")
    T.assert_error(function() td:scatter_add_(1, { { 1, 2, 3, 1, 1 } }, qlua.ones(1, 5)) end,
      "scatter_add_: index shape 1x5 does not fit dst shape 3x4 (dim 2: 5 > 4)")
    T.assert_error(function() td:scatter_add_(1, idx, 2) end, "qlua.Tensor expected, got number")
    T.assert_error(function() td:scatter_add_(1, { { 1.5 } }, qlua.ones(1, 1)) end, "scatter_add_")
    T.assert_error(function() td:expand(2, 3, 4):scatter_add_(1, { { { 1 } } }, qlua.ones(1, 1, 1)) end,
      "scatter_add_: cannot write into an expanded tensor")
  end)
end)

------------------------------------------------------------------------ index_fill_

describe("index_fill_", function()
  test("whole slices set to the value along every dim, every dtype, views", function()
    local dshape = { 4, 5, 3 }
    for _, dtype in ipairs(DTYPES) do
      for _, layout in ipairs(T.layouts) do
        for dim = 1, 3 do
          local dst = random_table(dshape, dtype)
          local n = math.random(1, 6)
          local idx = T.random_index({ n }, dshape[dim])   -- duplicates are harmless
          local v = random_value(dtype)
          local want = ref_index_fill(dst, dshape, dim, idx, v)
          for _, form in ipairs(index_forms(idx)) do
            local td = T.make(dst, dtype, layout)
            local what = what_of("index_fill_", dim, dtype, layout, form[1])
            assert.is_true(rawequal(td:index_fill_(dim, form[2], v), td), what .. " returns dst")
            T.assert_equal(td, want, what)
          end
        end
      end
    end
  end)

  test("the value must be storable in dst's dtype", function()
    local ti = qlua.zeros(3, { dtype = "int32" })
    T.assert_error(function() ti:index_fill_(1, { 1 }, 1.5) end,
      "index_fill_: cannot store 1.5", "int32")
    T.assert_error(function() ti:index_fill_(1, { 1 }, 2 ^ 40) end, "index_fill_")
    T.assert_error(function() ti:index_fill_(1, { 1 }, 1 << 40) end,
      "index_fill_: value 1099511627776 out of range for int32")
    T.assert_error(function() ti:index_fill_(1, { 1 }, "x") end,
      "index_fill_: expected a number, got string")
    T.assert_error(function() ti:index_fill_(1, { 1 }) end, "index_fill_: expected a number, got no value")
    T.assert_error(function() ti:index_fill_(1, { 1 }, 1, 2) end,
      "index_fill_: unexpected argument #4 (number 2)")
    T.assert_equal(ti, { 0, 0, 0 })
    ti:index_fill_(1, { 3 }, -2147483648)
    T.assert_equal(ti, { 0, 0, -2147483648 })
    local tf = qlua.zeros(2, { dtype = "float64" })
    tf:index_fill_(1, { 2 }, 0 / 0)
    assert.is_true(tf:totable()[2] ~= tf:totable()[2])
    if has_dtype("uint8") then
      local tu = qlua.zeros(2, { dtype = "uint8" })
      T.assert_error(function() tu:index_fill_(1, { 1 }, 256) end,
        "index_fill_: value 256 out of range for uint8")
      T.assert_error(function() tu:index_fill_(1, { 1 }, -1) end,
        "index_fill_: value -1 out of range for uint8")
      tu:index_fill_(1, { 2 }, 255)
      T.assert_equal(tu, { 0, 255 })
    end
    if has_dtype("bool") then
      local tb = qlua.zeros(3, { dtype = "bool" })
      tb:index_fill_(1, { 1, 3 }, true)
      T.assert_equal(tb, { true, false, true })
      tb:index_fill_(1, { 3 }, false)
      T.assert_equal(tb, { true, false, false })
      tb:index_fill_(1, { 2 }, 0.5)       -- a number's nonzero, as everywhere for bool
      tb:index_fill_(1, { 1 }, 0)
      T.assert_equal(tb, { false, true, false })
      tb:scatter_(1, { 3 }, -2.5)
      T.assert_equal(tb, { false, true, true })
    end
  end)

  test("empty index, empty dst, 0-d", function()
    local td = qlua.tensor({ { 1, 2 }, { 3, 4 } })
    td:index_fill_(2, {}, 9)
    td:index_fill_(2, qlua.zeros(0, { dtype = "int32" }), 9)
    T.assert_equal(td, { { 1, 2 }, { 3, 4 } })
    local e = qlua.zeros(0, 3)
    e:index_fill_(2, { 1, 3 }, 7)           -- slices of no elements: nothing to write
    T.assert_shape(e, { 0, 3 })
    T.assert_error(function() e:index_fill_(2, { 4 }, 7) end, bad_index_msg("index_fill_", 4, 3, 1))
    T.assert_error(function() e:index_fill_(1, { 1 }, 7) end, bad_index_msg("index_fill_", 1, 0, 1))
    T.assert_error(function() qlua.tensor(5):index_fill_(1, { 1 }, 1) end,
      "index_fill_: dim 1 out of range (tensor is 0-d)")
  end)

  test("bad index values give the exact message and write nothing", function()
    local dst = random_table({ 3, 4 }, "int64")
    for _, bad in ipairs({ 0, -1, 5 }) do
      for _, form in ipairs(index_forms({ 2, 4, bad, 1 })) do
        local td = T.make(dst, "int64", "transposed")
        T.assert_error(function() td:index_fill_(2, form[2], 0) end, bad_index_msg("index_fill_", bad, 4, 3))
        T.assert_equal(td, dst, "dst changed by a failed index_fill_ " .. form[1])
      end
    end
  end)

  test("bad arguments name the op and the values", function()
    local td = qlua.zeros(3, 4)
    T.assert_error(function() td:index_fill_(3, { 1 }, 1) end, "index_fill_: dim 3 out of range (1..2)")
    T.assert_error(function() td:index_fill_(-1, { 1 }, 1) end, "index_fill_: dim -1 out of range (1..2)")
    T.assert_error(function() td:index_fill_(1, qlua.ones(1), 1) end,
      "index_fill_: index must be int32 or int64, got float32")
    T.assert_error(function() td:index_fill_(1, { { 1 } }, 1) end,
      "index_fill_: index must be 1-D, got shape 1x1")
    T.assert_error(function() td:index_fill_(1, 1, 1) end, "qlua.Tensor or table of indices expected")
    T.assert_error(function() td:expand(2, 3, 4):index_fill_(1, { 1 }, 1) end,
      "index_fill_: cannot write into an expanded tensor (dim 1 has stride 0)")
  end)
end)

------------------------------------------------------------------------ index_copy_

describe("index_copy_", function()
  test("slices of src into slices of dst along every dim, every dtype, views", function()
    local dshape = { 4, 5, 3 }
    for _, dtype in ipairs(DTYPES) do
      for _, layout in ipairs(T.layouts) do
        for dim = 1, 3 do
          local dst = random_table(dshape, dtype)
          local n = math.random(1, dshape[dim])
          local idx = distinct_index(n, dshape[dim])
          local sshape = T.copy_list(dshape)
          sshape[dim] = n
          local src = random_table(sshape, dtype)
          local want = ref_index_copy(dst, dshape, dim, idx, src, sshape)
          for _, form in ipairs(index_forms(idx)) do
            local td = T.make(dst, dtype, layout)
            local ts = T.make(src, dtype, T.layouts[math.random(1, 4)])
            local what = what_of("index_copy_", dim, dtype, layout, form[1])
            assert.is_true(rawequal(td:index_copy_(dim, form[2], ts), td), what .. " returns dst")
            T.assert_equal(td, want, what)
          end
        end
      end
    end
  end)

  test("src of another dtype is converted", function()
    local td = qlua.zeros(2, 3)
    td:index_copy_(1, { 2 }, qlua.tensor({ { 1, 2, 3 } }, { dtype = "int64" }))
    T.assert_equal(td, { { 0, 0, 0 }, { 1, 2, 3 } })
    local ti = qlua.zeros(3, { dtype = "int32" })
    ti:index_copy_(1, { 3, 1 }, qlua.tensor({ 7, -8 }, { dtype = "float64" }))
    T.assert_equal(ti, { -8, 0, 7 })
    assert.equal("int32", ti:dtype())
  end)

  test("with duplicate indices one of the written values wins, element by element", function()
    local td = qlua.zeros(3)
    td:index_copy_(1, { 2, 2, 2 }, qlua.tensor({ 10, 20, 30 }))
    local v = td:totable()
    assert.equal(0, v[1])
    assert.equal(0, v[3])
    assert.is_true(v[2] == 10 or v[2] == 20 or v[2] == 30)
    local tm = qlua.zeros(2, 4, { dtype = "int64" })
    tm:index_copy_(1, { 1, 1 }, qlua.tensor({ { 1, 2, 3, 4 }, { 5, 6, 7, 8 } }))
    local m = tm:totable()
    for j = 1, 4 do
      assert.is_true(m[1][j] == j or m[1][j] == j + 4)
      assert.equal(0, m[2][j])
    end
  end)

  test("src sharing dst's storage is read before writing", function()
    local t = qlua.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } })
    t:index_copy_(1, { 3, 2, 1 }, t)      -- reverse the rows
    T.assert_equal(t, { { 5, 6 }, { 3, 4 }, { 1, 2 } })
    local u = qlua.tensor({ 1, 2, 3, 4 })
    u:narrow(1, 2, 3):index_copy_(1, { 1, 2 }, u:narrow(1, 1, 2))
    T.assert_equal(u, { 1, 1, 2, 4 })
  end)

  test("empty index, empty src, 0-d", function()
    local td = qlua.tensor({ { 1, 2 }, { 3, 4 } })
    td:index_copy_(1, {}, qlua.zeros(0, 2))
    td:index_copy_(2, qlua.zeros(0, { dtype = "int64" }), qlua.zeros(2, 0))
    T.assert_equal(td, { { 1, 2 }, { 3, 4 } })
    local e = qlua.zeros(0, 3)
    e:index_copy_(2, { 3, 1 }, qlua.zeros(0, 2))
    T.assert_error(function() e:index_copy_(2, { 3, 4 }, qlua.zeros(0, 2)) end,
      bad_index_msg("index_copy_", 4, 3, 2))
    T.assert_error(function() e:index_copy_(1, { 1 }, qlua.zeros(1, 3)) end,
      bad_index_msg("index_copy_", 1, 0, 1))
    T.assert_error(function() qlua.tensor(5):index_copy_(1, { 1 }, qlua.tensor({ 1 })) end,
      "index_copy_: dim 1 out of range (tensor is 0-d)")
  end)

  test("bad index values give the exact message and write nothing", function()
    local dst = random_table({ 3, 4 }, "float64")
    for _, bad in ipairs({ 0, -7, 4 }) do
      for _, form in ipairs(index_forms({ 1, bad })) do
        local td = T.make(dst, "float64", "stepped")
        T.assert_error(function() td:index_copy_(1, form[2], qlua.ones(2, 4)) end,
          bad_index_msg("index_copy_", bad, 3, 2))
        T.assert_equal(td, dst, "dst changed by a failed index_copy_ " .. form[1])
      end
    end
  end)

  test("bad arguments name the op and the values", function()
    local td = qlua.zeros(3, 4)
    T.assert_error(function() td:index_copy_(3, { 1 }, qlua.ones(3, 1)) end,
      "index_copy_: dim 3 out of range (1..2)")
    T.assert_error(function() td:index_copy_(2, qlua.ones(2), qlua.ones(3, 2)) end,
      "index_copy_: index must be int32 or int64, got float32")
    T.assert_error(function() td:index_copy_(2, { { 1, 2 } }, qlua.ones(3, 2)) end,
      "index_copy_: index must be 1-D, got shape 1x2")
    T.assert_error(function() td:index_copy_(2, { 1, 2 }, qlua.ones(3, 3)) end,
      "index_copy_: src shape 3x3 does not fit dst shape 3x4 with 2 indices along dim 2")
    T.assert_error(function() td:index_copy_(2, { 1, 2 }, qlua.ones(2, 2)) end,
      "index_copy_: src shape 2x2 does not fit dst shape 3x4 with 2 indices along dim 2")
    T.assert_error(function() td:index_copy_(2, { 1, 2 }, qlua.ones(3, 2, 1)) end,
      "index_copy_: src shape 3x2x1 does not fit dst shape 3x4 with 2 indices along dim 2")
    T.assert_error(function() td:index_copy_(2, { 1, 2 }) end, "qlua.Tensor expected, got no value")
    T.assert_error(function() td:index_copy_(2, { 1, 2 }, 3) end, "qlua.Tensor expected, got number")
  end)
end)

------------------------------------------------------------------------ the older ops on bool, uint8

describe("gather, index_select, take, scatter_, index_add_ on bool and uint8", function()
  test("match the references on views", function()
    for _, dtype in ipairs(SMALL) do
      for _, layout in ipairs(T.layouts) do
        local shape = { 4, 7 }
        local src = random_table(shape, dtype)
        local t = T.make(src, dtype, layout)
        local what = dtype .. " " .. layout
        local gidx = T.random_index({ 3, 9 }, 7)
        T.assert_equal(t:gather(2, gidx), ref.gather(src, 2, gidx), "gather " .. what)
        local g1 = T.random_index({ 37 }, 7)
        T.assert_equal(t:select(1, 2):gather(g1), ref.gather(src[2], 1, g1), "1-D gather " .. what)
        local sidx = T.random_index({ 5 }, 4)
        T.assert_equal(t:index_select(1, sidx), ref.index_select(src, 1, sidx), "index_select " .. what)
        local tidx = T.random_index({ 2, 11 }, 28)
        T.assert_equal(t:take(tidx), ref.take(src, tidx), "take " .. what)

        local dst = random_table(shape, dtype)
        local perm = { { 2, 1, 4, 3, 1, 2, 3 } }
        local v = random_value(dtype)
        T.assert_equal(T.make(dst, dtype, layout):scatter_(1, perm, T.make(src, dtype, layout)),
          ref_scatter(dst, shape, 1, perm, { 1, 7 }, src, shape), "scatter_ " .. what)
        local want = { T.copy_list(dst[1]), T.copy_list(dst[2]), dst[3], dst[4] }
        want[1][7], want[2][1] = v, v
        T.assert_equal(T.make(dst, dtype, layout):scatter_(2, { { 7 }, { 1 } }, v), want,
          "scatter_ number " .. what)

        local aidx = { 3, 3, 1, 5, 3 }
        local asrc = random_table({ 4, 5 }, dtype)
        T.assert_equal(T.make(dst, dtype, layout):index_add_(2, aidx, T.make(asrc, dtype, layout)),
          ref_index_add(dst, shape, 2, aidx, asrc, { 4, 5 }, dtype), "index_add_ " .. what)
      end
    end
  end)

  test("index_add_ on bool is an or, on uint8 it wraps", function()
    if has_dtype("bool") then
      local tb = qlua.tensor({ false, false, true }, { dtype = "bool" })
      tb:index_add_(1, { 1, 1, 2 }, qlua.tensor({ true, true, false }, { dtype = "bool" }))
      T.assert_equal(tb, { true, false, true })
    end
    if has_dtype("uint8") then
      local tu = qlua.tensor({ 200, 1 }, { dtype = "uint8" })
      tu:index_add_(1, { 1, 1 }, qlua.tensor({ 100, 100 }, { dtype = "uint8" }))
      T.assert_equal(tu, { 144, 1 })
    end
  end)
end)

------------------------------------------------------------------------ GPU parity

describe("index ops on the GPU", function()
  -- The op on both devices from the same tables; the GPU result must equal the CPU's
  -- (floats within the dtype's tolerance where atomics reorder sums).
  -- exact: bitwise (plain moves), else floats within tol (default 1e-5: sums reordered).
  local function parity(what, dtype, build, exact, tol)
    local c = build("cpu")
    local g = build("gpu")
    assert.equal(c:dtype(), g:dtype(), what .. ": dtype")
    T.assert_shape(g, c:shape(), what)
    if exact then T.assert_equal(g:cpu(), c, what)
    else T.assert_matches_dtype(g:cpu(), c:totable(), dtype, what, tol or 1e-5) end
  end

  gtest("scatter_add_, index_fill_, index_copy_ match the CPU on every dtype and view", function()
    local dshape = { 6, 5, 9 }
    for _, dtype in ipairs(DTYPES) do
      for _, layout in ipairs(T.layouts) do
        for dim = 1, 3 do
          local ishape = scatter_index_shape(dshape, dim)
          local dst = random_table(dshape, dtype)
          local src = random_table(ishape, dtype)
          local idx = T.random_index(ishape, dshape[dim])
          local k = math.random(1, #index_forms(idx, ishape))
          parity(what_of("scatter_add_", dim, dtype, layout, "form " .. k), dtype, function(dev)
            local form = index_forms(idx, ishape, dev)[k]
            return T.make(dst, dtype, layout, dev):scatter_add_(dim, form[2], T.make(src, dtype, "transposed", dev))
          end)
          local fidx = T.random_index({ math.random(1, 7) }, dshape[dim])
          local v = random_value(dtype)
          parity(what_of("index_fill_", dim, dtype, layout, ""), dtype, function(dev)
            return T.make(dst, dtype, layout, dev):index_fill_(dim, T.make(fidx, "int32", "stepped", dev), v)
          end, true)
          local n = math.random(1, dshape[dim])
          local cidx = distinct_index(n, dshape[dim])
          local sshape = T.copy_list(dshape)
          sshape[dim] = n
          local csrc = random_table(sshape, dtype)
          parity(what_of("index_copy_", dim, dtype, layout, ""), dtype, function(dev)
            return T.make(dst, dtype, layout, dev):index_copy_(dim, T.make(cidx, "int64", "contiguous", dev),
              T.make(csrc, dtype, "narrowed", dev))
          end, true)
        end
      end
    end
  end)

  gtest("scatter_add_ of many duplicates: atomics add every one (ints exact, floats close)", function()
    for _, dtype in ipairs(DTYPES) do
      local n = 20000
      local idx, src = {}, {}
      for i = 1, n do idx[i] = math.random(1, 7); src[i] = random_value(dtype) end
      parity("scatter_add_ duplicates " .. dtype, dtype, function(dev)
        return qlua.zeros(7, { dtype = dtype, device = dev }):scatter_add_(1,
          T.make(idx, "int64", "contiguous", dev), T.make(src, dtype, "contiguous", dev))
      end, not T.is_float_dtype(dtype), 1e-4)
      -- 1-byte elements share 32-bit words: neighbours updated at once must all land
      parity("index_add_ neighbours " .. dtype, dtype, function(dev)
        return qlua.zeros(7, { dtype = dtype, device = dev }):index_add_(1,
          T.make(idx, "int32", "contiguous", dev), T.make(src, dtype, "contiguous", dev))
      end, not T.is_float_dtype(dtype), 1e-4)
    end
  end)

  gtest("gather, index_select, take, scatter_ on bool and uint8 (the 1-byte rows path)", function()
    for _, dtype in ipairs(SMALL) do
      for _, layout in ipairs(T.layouts) do
        local src = random_table({ 5, 67 }, dtype)
        for _, cols in ipairs({ 1, 3, 4, 37, 64, 130 }) do
          local gidx = T.random_index({ 5, cols }, 67)
          parity(string.format("gather(2) %s %s %d cols", dtype, layout, cols), dtype, function(dev)
            return T.make(src, dtype, layout, dev):gather(2, T.make(gidx, "int32", "contiguous", dev))
          end, true)
          local g1 = T.random_index({ cols }, 67)
          parity(string.format("1-D gather %s %s %d", dtype, layout, cols), dtype, function(dev)
            return T.make(src[2], dtype, layout, dev):gather(T.make(g1, "int64", "contiguous", dev))
          end, true)
          local tidx = T.random_index({ cols }, 5 * 67)
          for _, ilayout in ipairs({ "contiguous", "narrowed" }) do
            parity(string.format("take %s %s %d %s", dtype, layout, cols, ilayout), dtype, function(dev)
              return T.make(src, dtype, layout, dev):take(T.make(tidx, "int64", ilayout, dev))
            end, true)
          end
        end
        local sidx = T.random_index({ 9 }, 5)
        parity("index_select " .. dtype .. " " .. layout, dtype, function(dev)
          return T.make(src, dtype, layout, dev):index_select(1, sidx)
        end, true)
        local dst = random_table({ 5, 67 }, dtype)
        local perm = { distinct_index(5, 5) }
        parity("scatter_ " .. dtype .. " " .. layout, dtype, function(dev)
          return T.make(dst, dtype, layout, dev):scatter_(1, perm, T.make({ src[1] }, dtype, "contiguous", dev))
        end, true)
      end
    end
  end)

  gtest("bad index values raise at the op or the next sync, naming the op", function()
    local cases = {
      { "scatter_add_", 4, 3, function(bad)
        return qlua.zeros(4, 3, { device = "gpu" }):scatter_add_(1, { { 1, 2, bad } }, qlua.ones(1, 3, { device = "gpu" }))
      end },
      { "index_fill_", 3, 2, function(bad)
        return qlua.zeros(4, 3, { device = "gpu" }):index_fill_(2, { 1, bad }, 5)
      end },
      { "index_copy_", 4, 1, function(bad)
        return qlua.zeros(4, 3, { device = "gpu" }):index_copy_(1, { bad }, qlua.ones(1, 3, { device = "gpu" }))
      end },
    }
    for _, bad in ipairs({ 0, -3, 1000 }) do
      for _, c in ipairs(cases) do
        local op, bound, pos, run = c[1], c[2], c[3], c[4]
        T.assert_error(function() run(bad); qlua.sync() end, bad_index_msg(op, bad, bound, pos))
        assert.has_no.errors(function() qlua.sync() end)
      end
    end
  end)
end)
