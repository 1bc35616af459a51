-- Views (docs/API.md "Views (share storage)"): view, reshape, narrow, select, transpose,
-- t, permute, expand, contiguous, clone. Values are checked against the nested-table
-- references; sharing is checked by writing through one tensor and reading the other.
local T, qlua, test = require("qlua.testing").spec(_ENV)
local ref = T.ref

describe("view and reshape", function()
  test("view accepts numbers, a table and one -1", function()
    for _, dtype in ipairs(T.dtypes) do
      local data = T.random_table({ 24 }, dtype)
      local t = T.make(data, dtype)
      T.assert_equal(t:view(2, 3, 4), T.unflatten(data, { 2, 3, 4 }))
      T.assert_equal(t:view({ 4, 6 }), T.unflatten(data, { 4, 6 }))
      T.assert_equal(t:view(-1, 8), T.unflatten(data, { 3, 8 }))
      T.assert_equal(t:view({ 2, -1, 3 }), T.unflatten(data, { 2, 4, 3 }))
      T.assert_shape(t:view(24), { 24 })
      T.assert_shape(t:view(1, 24, 1), { 1, 24, 1 })
      assert.equal(dtype, t:view(4, 6):dtype())
    end
  end)

  test("view shares storage", function()
    local t = qlua.zeros(6)
    local v = t:view(2, 3)
    v[2]:fill_(4)
    T.assert_equal(t, { 0, 0, 0, 4, 4, 4 })
    t[1] = 7
    assert.equal(7, v[1][1])
  end)

  test("view works on non-contiguous tensors when strides allow it", function()
    local data = T.random_table({ 4, 6 }, "float32")
    local n = T.make(data, "float32", "narrowed")  -- (4, 6) inside (6, 8)
    -- splitting a dim always works
    T.assert_equal(n:view(4, 2, 3), T.unflatten(T.flatten(data), { 4, 2, 3 }))
    local tr = qlua.tensor(data):t()                -- (6, 4), strides (1, 6)
    T.assert_equal(tr:view(3, 2, 4), T.unflatten(T.flatten(ref.transpose(data, 1, 2)), { 3, 2, 4 }))
  end)

  test("view refuses shapes the strides cannot express; reshape copies then", function()
    local data = T.random_table({ 3, 4 }, "float64")
    local tr = qlua.tensor(data, { dtype = "float64" }):t()
    T.assert_error(function() local _ = tr:view(12) end, "view")
    local r = tr:reshape(12)
    T.assert_equal(r, T.flatten(ref.transpose(data, 1, 2)))
    r[1] = 1000
    assert.equal(data[1][1], tr[1][1])  -- a copy: the source is unchanged
  end)

  test("reshape of a contiguous tensor shares storage", function()
    local t = qlua.zeros(2, 6)
    local r = t:reshape(3, -1)
    T.assert_shape(r, { 3, 4 })
    r[3]:fill_(1)
    T.assert_equal(t, { { 0, 0, 0, 0, 0, 0 }, { 0, 0, 1, 1, 1, 1 } })
  end)

  test("reshape of every layout keeps row-major order", function()
    for _, layout in ipairs(T.layouts) do
      local data = T.random_table({ 3, 4 }, "int32")
      local t = T.make(data, "int32", layout)
      T.assert_equal(t:reshape(2, 6), T.unflatten(T.flatten(data), { 2, 6 }), layout)
      T.assert_equal(t:reshape(-1), T.flatten(data), layout)
    end
  end)

  test("view and reshape refuse a wrong element count or two -1", function()
    local t = qlua.zeros(2, 3)
    T.assert_error(function() local _ = t:view(4) end, "view")
    T.assert_error(function() local _ = t:view(-1, -1) end, "view")
    T.assert_error(function() local _ = t:view(4, -1) end, "view")
    T.assert_error(function() local _ = t:reshape(5) end, "reshape")
  end)

  test("one element views to and from 0-d", function()
    local s = qlua.tensor(5)
    T.assert_equal(s:view(1), { 5 })
    T.assert_equal(s:view(1, 1), { { 5 } })
    local z = qlua.tensor({ 7 }):view({})
    assert.equal(0, z:dim())
    assert.equal(7, z:item())
    assert.equal(0, qlua.tensor({ { 8 } }):reshape({}):dim())
  end)

  test("views of empty tensors", function()
    local e = qlua.zeros(0, 3)
    T.assert_shape(e:view(3, 0), { 3, 0 })
    T.assert_shape(e:view(0), { 0 })
    T.assert_shape(e:reshape(0, 5), { 0, 5 })
  end)
end)

describe("narrow and select", function()
  test("narrow matches the reference on every dim, dtype and layout", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        local data = T.random_table({ 4, 5, 3 }, dtype)
        local t = T.make(data, dtype, layout)
        for dim = 1, 3 do
          local size = t:size(dim)
          local start = math.random(1, size)
          local len = math.random(0, size - start + 1)
          local n = t:narrow(dim, start, len)
          local want_shape = { 4, 5, 3 }
          want_shape[dim] = len
          T.assert_shape(n, want_shape)
          if len > 0 then T.assert_equal(n, ref.narrow(data, dim, start, len)) end
        end
      end
    end
  end)

  test("narrow shares storage", function()
    local t = qlua.zeros(3, 4)
    t:narrow(2, 2, 2):fill_(1)
    T.assert_equal(t, { { 0, 1, 1, 0 }, { 0, 1, 1, 0 }, { 0, 1, 1, 0 } })
    t:narrow(1, 3, 1):narrow(2, 4, 1):fill_(5)
    T.assert_equal(t, { { 0, 1, 1, 0 }, { 0, 1, 1, 0 }, { 0, 1, 1, 5 } })
  end)

  test("narrow refuses ranges outside the dim", function()
    local t = qlua.zeros(3, 4)
    T.assert_error(function() local _ = t:narrow(2, 0, 1) end, "narrow")
    T.assert_error(function() local _ = t:narrow(2, 4, 2) end, "narrow")
    T.assert_error(function() local _ = t:narrow(2, 5, 1) end, "narrow")
    T.assert_error(function() local _ = t:narrow(1, 1, -1) end, "narrow")
    T.assert_error(function() local _ = t:narrow(3, 1, 1) end, "narrow")
    T.assert_error(function() local _ = t:narrow(0, 1, 1) end, "narrow")
  end)

  test("select drops the dim and matches the reference", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        local data = T.random_table({ 3, 4, 2 }, dtype)
        local t = T.make(data, dtype, layout)
        for dim = 1, 3 do
          local i = math.random(1, t:size(dim))
          local s = t:select(dim, i)
          assert.equal(2, s:dim())
          T.assert_equal(s, ref.select(data, dim, i), dtype .. " " .. layout)
        end
      end
    end
    local v = qlua.tensor({ 4, 5, 6 }):select(1, 2)
    assert.equal(0, v:dim())
    assert.equal(5, v:item())
  end)

  test("select shares storage and refuses bad positions", function()
    local t = qlua.zeros(2, 3)
    t:select(2, 2):fill_(3)
    T.assert_equal(t, { { 0, 3, 0 }, { 0, 3, 0 } })
    T.assert_error(function() local _ = t:select(2, 4) end, "select")
    T.assert_error(function() local _ = t:select(2, 0) end, "select")
    T.assert_error(function() local _ = t:select(3, 1) end, "select")
    T.assert_error(function() local _ = qlua.tensor(1):select(1, 1) end, "select")
  end)
end)

describe("transpose, t and permute", function()
  test("transpose matches the reference for every pair of dims", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        local data = T.random_table({ 2, 3, 4 }, dtype)
        local t = T.make(data, dtype, layout)
        for d1 = 1, 3 do
          for d2 = 1, 3 do
            T.assert_equal(t:transpose(d1, d2), ref.transpose(data, d1, d2))
          end
        end
      end
    end
  end)

  test("t transposes 2-D tensors and returns 1-D and 0-d ones as they are", function()
    local data = T.random_table({ 3, 5 }, "float32")
    local t = qlua.tensor(data)
    T.assert_equal(t:t(), ref.transpose(data, 1, 2))
    T.assert_equal(t:t():t(), data)
    local v = qlua.tensor({ 1, 2, 3 })
    T.assert_equal(v:t(), { 1, 2, 3 })
    T.assert_shape(v:t(), { 3 })
    assert.equal(2.5, qlua.tensor(2.5):t():item())
    T.assert_error(function() local _ = qlua.zeros(2, 2, 2):t() end, "t")
  end)

  test("permute takes numbers or a table", function()
    for _, layout in ipairs(T.layouts) do
      local data = T.random_table({ 2, 3, 4, 2 }, "int64")
      local t = T.make(data, "int64", layout)
      local perm = T.permutation(4)
      T.assert_equal(t:permute(perm), ref.permute(data, perm), layout)
      T.assert_equal(t:permute(table.unpack(perm)), ref.permute(data, perm), layout)
    end
  end)

  test("permute refuses non-permutations", function()
    local t = qlua.zeros(2, 3, 4)
    T.assert_error(function() local _ = t:permute(1, 2) end, "permute")
    T.assert_error(function() local _ = t:permute(1, 1, 2) end, "permute")
    T.assert_error(function() local _ = t:permute(1, 2, 4) end, "permute")
    T.assert_error(function() local _ = t:permute(0, 1, 2) end, "permute")
  end)

  test("transposed views share storage", function()
    local t = qlua.zeros(2, 3)
    local tt = t:t()
    tt[3]:fill_(2)    -- column 3 of t
    T.assert_equal(t, { { 0, 0, 2 }, { 0, 0, 2 } })
    t:permute(2, 1)[1][2] = 8
    assert.equal(8, t:totable()[2][1])
  end)
end)

describe("expand", function()
  test("broadcasts size-1 dims with stride 0", function()
    for _, dtype in ipairs(T.dtypes) do
      local col = T.random_table({ 3, 1 }, dtype)
      local e = T.make(col, dtype):expand(3, 4)
      T.assert_shape(e, { 3, 4 })
      assert.equal(0, e:stride(2))
      T.assert_equal(e, ref.expand(col, { 3, 4 }))
      local row = T.random_table({ 1, 4 }, dtype)
      T.assert_equal(T.make(row, dtype):expand({ 5, 4 }), ref.expand(row, { 5, 4 }))
    end
  end)

  test("adds leading dims", function()
    local row = T.random_table({ 4 }, "float32")
    local e = qlua.tensor(row):expand(2, 3, 4)
    T.assert_shape(e, { 2, 3, 4 })
    T.assert_equal(e, ref.expand(row, { 2, 3, 4 }))
  end)

  test("shares storage with the source", function()
    local src = qlua.zeros(3, 1)
    local e = src:expand(3, 5)
    src[2] = 7
    T.assert_equal(e[2], { 7, 7, 7, 7, 7 })
  end)

  test("refuses sizes that do not broadcast", function()
    local t = qlua.zeros(3, 2)
    T.assert_error(function() local _ = t:expand(3, 4) end, "expand")
    T.assert_error(function() local _ = t:expand(2) end, "expand")
  end)
end)

describe("contiguous and clone", function()
  test("contiguous returns a contiguous tensor itself, else a row-major copy", function()
    local t = qlua.zeros(2, 3)
    assert.is_true(rawequal(t, t:contiguous()))
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.noncontiguous_layouts) do
        local data = T.random_table({ 3, 4, 2 }, dtype)
        local v = T.make(data, dtype, layout)
        local c = v:contiguous()
        assert.is_true(c:is_contiguous())
        assert.same({ 8, 2, 1 }, c:stride())
        assert.equal(dtype, c:dtype())
        T.assert_equal(c, data)
      end
    end
    local e = qlua.tensor({ { 1 }, { 2 } }):expand(2, 3):contiguous()
    assert.same({ 3, 1 }, e:stride())
    T.assert_equal(e, { { 1, 1, 1 }, { 2, 2, 2 } })
  end)

  test("clone always copies, keeping dtype and values", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.layouts) do
        local data = T.random_table({ 4, 3 }, dtype)
        local v = T.make(data, dtype, layout)
        local c = v:clone()
        assert.is_false(rawequal(c, v))
        assert.equal(dtype, c:dtype())
        T.assert_equal(c, data)
        c:fill_(1)
        T.assert_equal(v, data)  -- the source is untouched
      end
    end
  end)

  test("chains of views match the reference", function()
    for _ = 1, 20 do
      local data = T.random_table({ 4, 5, 6 }, "float64")
      local t = T.make(data, "float64", T.layouts[math.random(1, 4)])
      local want = data
      local perm = T.permutation(3)
      t, want = t:permute(perm), ref.permute(want, perm)
      local dim = math.random(1, 3)
      local size = t:size(dim)
      local start = math.random(1, size)
      local len = math.random(1, size - start + 1)
      t, want = t:narrow(dim, start, len), ref.narrow(want, dim, start, len)
      local sdim = math.random(1, 3)
      local i = math.random(1, t:size(sdim))
      t, want = t:select(sdim, i), ref.select(want, sdim, i)
      T.assert_equal(t, want)
      T.assert_equal(t:t(), ref.transpose(want, 1, 2))
      T.assert_equal(t:clone(), want)
      T.assert_equal(t:contiguous():view(-1), T.flatten(want))
    end
  end)
end)
