-- Indexing ops (docs/API.md "Indexing ops"): gather (with and without dim), index_select,
-- take, scatter_ (tensor and number), index_add_ (duplicates accumulate); index tensors
-- int32 / int64 / Lua tables, contiguous or not; bad values with the exact message;
-- shape-rule violations.
local T, qlua, test = require("qlua.testing").spec(_ENV)
local ref = T.ref

-- The same index values in the forms the API accepts: a Lua table, an int64 tensor, an
-- int32 tensor, and int32/int64 tensors in a non-contiguous layout.
local function index_forms(idx)
  local shape = T.shape_of(idx)
  local layout = T.noncontiguous_layouts[math.random(1, 3)]
  local forms = {
    { "table", idx },
    { "int64", T.make(idx, "int64", "contiguous", nil, shape) },
    { "int32", T.make(idx, "int32", "contiguous", nil, shape) },
    { "int32 " .. layout, T.make(idx, "int32", layout, nil, shape) },
    { "int64 " .. layout, T.make(idx, "int64", layout, nil, shape) },
  }
  return forms
end

-- The message of a bad index value, docs/API.md.
local function bad_index_msg(op, value, bound, pos)
  return string.format("%s: index %d out of range (1..%d) at position %d", op, value, bound, pos)
end

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
