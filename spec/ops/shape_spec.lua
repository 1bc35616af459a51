-- Views, slicing and shape ops (docs/API.md "Views (share storage)" and "Slicing, shape
-- and splitting"): view, reshape, narrow, select, transpose, t, permute, expand,
-- contiguous, clone; slice, t[{...}] and t[{...}] = v, squeeze, unsqueeze, flatten,
-- unflatten, movedim, flip, roll, repeat_tensor, split, chunk. Values are checked against
-- plain-Lua references in every dtype and layout; sharing is checked by writing through
-- one tensor and reading the other. The second part's cases also run on the GPU (reported
-- pending without one): the ops are compositions of views and existing copies, so the GPU
-- must give the reference's values.
local T, qlua, test = require("qlua.testing").spec(_ENV)

-- =============================================================== views: view ... clone

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

-- ======================================= slicing, table indexing, shape ops, splitting

local HAS_GPU, NO_GPU_REASON = T.gpu_status()

------------------------------------------------------------------------ references

-- Position p (1-based, negative from the end) in a dim of size n.
local function norm(p, n) return p < 0 and p + n + 1 or p end

-- first..last by step, after normalising.
local function range(first, last, step, n)
  local out = {}
  for i = norm(first, n), norm(last, n), step or 1 do out[#out + 1] = i end
  return out
end

local function iota(n)
  local out = {}
  for i = 1, n do out[i] = i end
  return out
end

-- The elements of a = {shape, data} at lists[d] (source positions) along each dim d;
-- dims with keep[d] false are selected (lists[d] has one entry) and dropped. Returns the
-- flat values and the shape.
local function pick(a, lists, keep)
  local oshape, nd = {}, #a.shape
  for d = 1, nd do if keep == nil or keep[d] then oshape[#oshape + 1] = #lists[d] end end
  local out, q = {}, {}
  local function one(pos, k)
    local o = 0
    for d = 1, nd do
      if keep == nil or keep[d] then o = o + 1; q[d] = lists[d][pos[o]] else q[d] = lists[d][1] end
    end
    out[k] = a.data[T.linear(a.shape, q)]
  end
  if #oshape == 0 then one({}, 1) else T.each_index(oshape, one) end
  return out, oshape
end

-- Every position of every dim.
local function all_lists(shape)
  local lists = {}
  for d = 1, #shape do lists[d] = iota(shape[d]) end
  return lists
end

-- t has the shape and the row-major values flat.
local function check(t, flat, shape, what)
  T.assert_shape(t, shape, what)
  T.assert_equal(t, T.unflatten(flat, shape), what)
end

-- A random tensor of shape in dtype, layout and device, and its reference {shape, data}.
local function input(shape, dtype, layout, device)
  local flat = T.random_list(T.numel(shape), dtype)
  local t
  if T.numel(shape) == 0 or #shape == 0 then
    t = T.from_flat(flat, shape, dtype, device)
  else
    t = T.make(T.unflatten(flat, shape), dtype, layout, device, shape)
  end
  return t, { shape = T.copy_list(shape), data = flat }
end

------------------------------------------------------------------------ the cases

-- Each case runs on one device; the CPU section and the GPU section register them all.
local cases = {}
local function case(name, fn) cases[#cases + 1] = { name = name, fn = fn } end

local SHAPE = { 3, 4, 5 }

case("slice: inclusive bounds, negative positions, steps and empty results", function(dev)
  local bounds = {
    { 1, -1 }, { 2, 3 }, { -2, -1 }, { 1, -1, 2 }, { 2, -1, 3 }, { -3, 3 }, { 3, 3 },
    { 3, 2 }, { -1, 1 }, { 1, 2, 5 },
  }
  for _, dtype in ipairs(T.dtypes) do
    for _, layout in ipairs(T.layouts) do
      local t, a = input(SHAPE, dtype, layout, dev)
      for d = 1, 3 do
        for _, b in ipairs(bounds) do
          local n = SHAPE[d]
          if math.abs(b[1]) <= n and math.abs(b[2]) <= n then
            local lists = all_lists(SHAPE)
            lists[d] = range(b[1], b[2], b[3], n)
            local s = t:slice(d, b[1], b[2], b[3])
            local flat, shape = pick(a, lists)
            check(s, flat, shape, string.format("%s %s slice(%d, %d, %d, %s)", dtype, layout, d,
              b[1], b[2], tostring(b[3])))
            assert.equal(dtype, s:dtype())
          end
        end
      end
    end
  end
end)

case("slice is a view: writes through it reach the source", function(dev)
  for _, dtype in ipairs(T.dtypes) do
    local t = qlua.zeros({ 4, 6 }, { dtype = dtype, device = dev })
    t:slice(2, 2, -1, 2):fill_(7)
    t:slice(1, -1, -1):slice(2, 1, 1):fill_(3)
    local want = {}
    for i = 1, 4 do
      want[i] = { 0, 7, 0, 7, 0, 7 }
    end
    want[4][1] = 3
    T.assert_equal(t, want, dtype)
    -- and a source write shows in the slice
    local s = t:slice(1, 2, 3)
    t[2] = 5
    T.assert_equal(s[1], { 5, 5, 5, 5, 5, 5 })
  end
end)

case("slice refuses bad positions, steps and dims, naming them", function(dev)
  local t = qlua.zeros({ 3, 5 }, { device = dev })
  assert.equal("slice: position 7 out of range (-5..5) for dim 2 of size 5",
    T.error_of(function() return t:slice(2, 7, 7) end))
  assert.equal("slice: position -6 out of range (-5..5) for dim 2 of size 5",
    T.error_of(function() return t:slice(2, 1, -6) end))
  T.assert_error(function() return t:slice(2, 0, 3) end, "slice", "position 0", "dim 2")
  assert.equal("slice: step 0 must be >= 1", T.error_of(function() return t:slice(1, 1, 3, 0) end))
  T.assert_error(function() return t:slice(1, 1, 3, -1) end, "slice", "step -1")
  T.assert_error(function() return t:slice(3, 1, 1) end, "slice", "dim 3")
  T.assert_error(function() return qlua.tensor(1, { device = dev }):slice(1, 1, 1) end, "slice", "0-d")
  T.assert_error(function() return qlua.zeros({ 0, 2 }, { device = dev }):slice(1, 1, 1) end,
    "slice", "size 0")
end)

case("t[{...}] reads a view: numbers select, {a, b [, step]} slice, {} takes all", function(dev)
  local keys = {
    { key = { 2, { 1, 3 }, {} }, lists = { { 2 }, { 1, 2, 3 }, iota(5) }, keep = { false, true, true } },
    { key = { -1 }, lists = { { 3 }, iota(4), iota(5) }, keep = { false, true, true } },
    { key = { { 2, 3 } }, lists = { { 2, 3 }, iota(4), iota(5) } },
    { key = { {}, -2 }, lists = { iota(3), { 3 }, iota(5) }, keep = { true, false, true } },
    { key = { { 1, 3, 2 }, { 4, 1 } }, lists = { { 1, 3 }, {}, iota(5) } },
    { key = { { -3, -1 }, { 1, 4, 3 }, { 5 } }, lists = { iota(3), { 1, 4 }, { 5 } } },
    { key = { 1, 2, 3 }, lists = { { 1 }, { 2 }, { 3 } }, keep = { false, false, false } },
    { key = { {}, {}, { 2, -1, 2 } }, lists = { iota(3), iota(4), { 2, 4 } } },
    { key = { 3, -4, { -2 } }, lists = { { 3 }, { 1 }, { 4 } }, keep = { false, false, true } },
  }
  for _, dtype in ipairs(T.dtypes) do
    for _, layout in ipairs(T.layouts) do
      local t, a = input(SHAPE, dtype, layout, dev)
      for i, k in ipairs(keys) do
        local v = t[k.key]
        assert.is_true(qlua.is_tensor(v), "key " .. i)
        local flat, shape = pick(a, k.lists, k.keep)
        check(v, flat, shape, string.format("%s %s key %d", dtype, layout, i))
      end
    end
  end
end)

case("t[{...}] shares storage with t, and t[i] is unchanged", function(dev)
  local t = qlua.zeros({ 3, 4 }, { dtype = "int32", device = dev })
  local v = t[{ { 2, 3 }, { 1, -1, 3 } }]
  v:fill_(2)
  T.assert_equal(t, { { 0, 0, 0, 0 }, { 2, 0, 0, 2 }, { 2, 0, 0, 2 } })
  local s = t[{ 2, 1 }]           -- all dims selected: a 0-d view
  T.assert_shape(s, {})
  assert.equal(2, s:item())
  s:fill_(9)
  assert.equal(9, t[2][1])        -- t[i] still gives rows and, for 1-D, numbers
  assert.is_true(qlua.is_tensor(t[1]))
  assert.equal(9, t[2][1])
  local all = t[{}]               -- an empty key table is all of t (Torch7)
  T.assert_shape(all, { 3, 4 })
  all:fill_(1)
  T.assert_equal(t, { { 1, 1, 1, 1 }, { 1, 1, 1, 1 }, { 1, 1, 1, 1 } })
end)

case("t[{...}] = v fills with a number or copies a broadcast tensor", function(dev)
  for _, dtype in ipairs(T.dtypes) do
    for _, layout in ipairs(T.layouts) do
      local t, a = input({ 3, 4 }, dtype, layout, dev)
      local want = T.unflatten(T.copy_list(a.data), { 3, 4 })
      t[{ 2, { 2, 4 } }] = 7
      for j = 2, 4 do want[2][j] = 7 end
      T.assert_equal(t, want, dtype .. " " .. layout .. " number")
      local row = T.random_list(4, dtype)
      t[{ { 1, 3, 2 } }] = T.make(row, dtype, "contiguous", dev)   -- (4) to (2, 4)
      want[1], want[3] = T.copy_list(row), T.copy_list(row)
      T.assert_equal(t, want, dtype .. " " .. layout .. " tensor")
      local col = T.random_list(3, dtype)
      t[{ {}, -1 }] = T.make(col, dtype, "contiguous", dev)
      for i = 1, 3 do want[i][4] = col[i] end
      T.assert_equal(t, want, dtype .. " " .. layout .. " column")
      t[{}] = 1  -- an empty key table assigns the whole tensor
      T.assert_equal(t, { { 1, 1, 1, 1 }, { 1, 1, 1, 1 }, { 1, 1, 1, 1 } })
    end
  end
  -- across dtypes, as copy_ converts
  local f = qlua.zeros({ 2, 2 }, { device = dev })
  f[{ 1 }] = qlua.tensor({ 1, 2 }, { dtype = "int32", device = dev })
  T.assert_equal(f, { { 1, 2 }, { 0, 0 } })
end)

case("t[{...}] refuses bad keys and values, naming the entry", function(dev)
  local t = qlua.zeros({ 3, 5 }, { device = dev })
  assert.equal("index: position 7 out of range (-5..5) for dim 2 of size 5",
    T.error_of(function() return t[{ 1, 7 }] end))
  assert.equal("index: position -4 out of range (-3..3) for dim 1 of size 3",
    T.error_of(function() return t[{ { -4, 2 } }] end))
  T.assert_error(function() return t[{ 0 }] end, "index", "position 0", "dim 1")
  T.assert_error(function() return t[{ 1, 2, 3 }] end, "index", "3 entries", "2-d")
  T.assert_error(function() return t[{ { 1, 2, 3, 4 } }] end, "index", "entry 1", "4 numbers")
  T.assert_error(function() return t[{ 1, "a" }] end, "index", "entry 2", "string")
  T.assert_error(function() return t[{ 1.5 }] end, "index", "entry 1", "not an integer")
  T.assert_error(function() return t[{ { 1, 3, 0 } }] end, "index", "step 0", "entry 1")
  T.assert_error(function() return t[{ 1, qlua.tensor({ 1 }) }] end, "index", "entry 2", "tensor")
  T.assert_error(function() return t[qlua.zeros(1, { device = dev })] end, "index",
    "float32 tensor key is not supported")
  T.assert_error(function() t[qlua.zeros(1, { device = dev })] = 1 end, "index",
    "float32 tensor key is not supported")
  T.assert_error(function() t[{ 1 }] = "x" end, "index", "string")
  T.assert_error(function() t[{ 1 }] = qlua.zeros(4) end, "index")
  T.assert_error(function() t[{ 4 }] = 1 end, "index", "position 4")
  T.assert_error(function() qlua.zeros({ 2, 2 }, { dtype = "int32", device = dev })[{ 1 }] = 1.5 end,
    "index")
  T.assert_equal(t, { { 0, 0, 0, 0, 0 }, { 0, 0, 0, 0, 0 }, { 0, 0, 0, 0, 0 } })
end)

case("ipairs(t) visits every element of a 1-D tensor, then stops at t[#t + 1], which is nil", function(dev)
  local t = qlua.tensor({ 4, 5, 6 }, { device = dev })
  local seen = {}
  for i, v in ipairs(t) do seen[i] = v end
  T.assert_equal(seen, { 4, 5, 6 })
  assert.is_nil(t[4])
  T.assert_error(function() return t[5] end, "index", "5 out of range (1..3)")
end)

case("squeeze and unsqueeze are views in every dtype and layout", function(dev)
  for _, dtype in ipairs(T.dtypes) do
    for _, layout in ipairs(T.layouts) do
      local t, a = input({ 3, 1, 4, 1 }, dtype, layout, dev)
      check(t:squeeze(), a.data, { 3, 4 }, "squeeze()")
      check(t:squeeze(2), a.data, { 3, 4, 1 }, "squeeze(2)")
      check(t:squeeze(4), a.data, { 3, 1, 4 }, "squeeze(4)")
      check(t:squeeze(1), a.data, { 3, 1, 4, 1 }, "squeeze(1): size 3 stays")
      check(t:unsqueeze(1), a.data, { 1, 3, 1, 4, 1 }, "unsqueeze(1)")
      check(t:unsqueeze(3), a.data, { 3, 1, 1, 4, 1 }, "unsqueeze(3)")
      check(t:unsqueeze(5), a.data, { 3, 1, 4, 1, 1 }, "unsqueeze(5)")
      check(t:squeeze():unsqueeze(2):unsqueeze(4), a.data, { 3, 1, 4, 1 }, "round trip")
    end
  end
  local z = qlua.tensor(3, { device = dev })
  check(z:unsqueeze(1), { 3 }, { 1 }, "0-d unsqueeze")
  check(z:squeeze(), { 3 }, {}, "0-d squeeze")
  check(qlua.zeros({ 1, 1 }, { device = dev }):squeeze(), { 0 }, {}, "all ones to 0-d")
  T.assert_shape(qlua.zeros({ 0, 1 }, { device = dev }):squeeze(), { 0 })
  local t = qlua.zeros({ 2, 3 }, { device = dev })
  t:unsqueeze(2):squeeze(2):unsqueeze(1)[1][2]:fill_(1)
  T.assert_equal(t, { { 0, 0, 0 }, { 1, 1, 1 } })
  T.assert_error(function() return t:unsqueeze(4) end, "unsqueeze", "dim 4", "1..3")
  T.assert_error(function() return t:unsqueeze(0) end, "unsqueeze", "dim 0")
  T.assert_error(function() return t:squeeze(3) end, "squeeze", "dim 3")
end)

case("flatten merges a range of dims, as a view when the strides allow", function(dev)
  for _, dtype in ipairs(T.dtypes) do
    for _, layout in ipairs(T.layouts) do
      local t, a = input({ 2, 3, 4 }, dtype, layout, dev)
      check(t:flatten(), a.data, { 24 }, "flatten()")
      check(t:flatten(2), a.data, { 2, 12 }, "flatten(2)")
      check(t:flatten(1, 2), a.data, { 6, 4 }, "flatten(1, 2)")
      check(t:flatten(2, 2), a.data, { 2, 3, 4 }, "flatten(2, 2)")
      check(t:flatten(3, 3), a.data, { 2, 3, 4 }, "flatten(3, 3)")
    end
  end
  local c = qlua.zeros({ 2, 3 }, { device = dev })
  c:flatten()[4] = 1  -- contiguous: a view
  T.assert_equal(c, { { 0, 0, 0 }, { 1, 0, 0 } })
  local tr = qlua.zeros({ 3, 2 }, { device = dev }):t()
  local f = tr:flatten()  -- transposed: a copy, like reshape
  f[1] = 5
  T.assert_equal(tr, { { 0, 0, 0 }, { 0, 0, 0 } })
  check(qlua.tensor(7, { device = dev }):flatten(), { 7 }, { 1 }, "0-d")
  T.assert_shape(qlua.zeros({ 2, 0, 3 }, { device = dev }):flatten(), { 0 })
  T.assert_error(function() return c:flatten(2, 1) end, "flatten", "first dim 2", "last dim 1")
  T.assert_error(function() return c:flatten(3) end, "flatten", "dim 3")
end)

case("unflatten splits a dim into sizes (one may be -1) as a view", function(dev)
  for _, dtype in ipairs(T.dtypes) do
    for _, layout in ipairs(T.layouts) do
      local t, a = input({ 3, 8 }, dtype, layout, dev)
      check(t:unflatten(2, { 2, 4 }), a.data, { 3, 2, 4 }, "unflatten(2, {2, 4})")
      check(t:unflatten(2, { 2, -1, 2 }), a.data, { 3, 2, 2, 2 }, "unflatten(2, {2, -1, 2})")
      check(t:unflatten(1, { 1, 3 }), a.data, { 1, 3, 8 }, "unflatten(1, {1, 3})")
      check(t:unflatten(2, { 8 }), a.data, { 3, 8 }, "unflatten(2, {8})")
    end
  end
  local t = qlua.zeros({ 2, 6 }, { device = dev }):t()   -- (6, 2), strides (1, 6)
  t:unflatten(1, { 3, 2 })[2]:fill_(1)                   -- a view even so
  T.assert_equal(t:t(), { { 0, 0, 1, 1, 0, 0 }, { 0, 0, 1, 1, 0, 0 } })
  T.assert_shape(qlua.zeros({ 0, 4 }, { device = dev }):unflatten(2, { 2, 2 }), { 0, 2, 2 })
  T.assert_error(function() return t:unflatten(1, { 4, 2 }) end, "unflatten", "4x2", "6", "dim 1")
  T.assert_error(function() return t:unflatten(1, { -1, -1 }) end, "unflatten", "-1")
  T.assert_error(function() return t:unflatten(1, { 4, -1 }) end, "unflatten", "do not multiply")
  T.assert_error(function() return t:unflatten(1, {}) end, "unflatten", "no sizes")
  T.assert_error(function() return t:unflatten(3, { 1 }) end, "unflatten", "dim 3")
end)

-- torch.movedim's permutation, in plain Lua: perm[to[k]] = from[k], the rest in order.
local function movedim_perm(nd, from, to)
  local perm, used = {}, {}
  for k = 1, #from do perm[to[k]] = from[k]; used[from[k]] = true end
  local s = 1
  for d = 1, nd do
    if perm[d] == nil then
      while used[s] do s = s + 1 end
      perm[d] = s
      s = s + 1
    end
  end
  return perm
end

case("movedim moves dims (one or a list) as a view", function(dev)
  local moves = {
    { 1, 3 }, { 3, 1 }, { 2, 2 }, { { 1, 2 }, { 3, 1 } }, { { 3, 1 }, { 1, 2 } }, { {}, {} },
  }
  for _, dtype in ipairs(T.dtypes) do
    for _, layout in ipairs(T.layouts) do
      local t, a = input({ 2, 3, 4 }, dtype, layout, dev)
      for _, m in ipairs(moves) do
        local from = type(m[1]) == "table" and m[1] or { m[1] }
        local to = type(m[2]) == "table" and m[2] or { m[2] }
        local want = T.ref.permute(T.unflatten(a.data, a.shape), movedim_perm(3, from, to))
        local got = t:movedim(m[1], m[2])
        T.assert_equal(got, want, dtype .. " " .. layout)
        T.assert_shape(got, T.shape_of(want))
      end
    end
  end
  local t = qlua.zeros({ 2, 3 }, { device = dev })
  t:movedim(1, 2)[3]:fill_(1)
  T.assert_equal(t, { { 0, 0, 1 }, { 0, 0, 1 } })
  T.assert_error(function() return t:movedim({ 1, 1 }, { 1, 2 }) end, "movedim", "source dim 1", "twice")
  T.assert_error(function() return t:movedim({ 1, 2 }, { 2, 2 }) end, "movedim", "destination dim 2")
  T.assert_error(function() return t:movedim({ 1, 2 }, { 2 }) end, "movedim", "2 source dims", "1 destination")
  T.assert_error(function() return t:movedim(3, 1) end, "movedim", "dim 3")
end)

case("flip reverses dims into a new tensor", function(dev)
  local dimsets = { 1, 2, 3, { 1, 3 }, { 3, 2, 1 }, {} }
  for _, dtype in ipairs(T.dtypes) do
    for _, layout in ipairs(T.layouts) do
      local t, a = input({ 2, 3, 4 }, dtype, layout, dev)
      for _, dims in ipairs(dimsets) do
        local lists = all_lists(a.shape)
        for _, d in ipairs(type(dims) == "table" and dims or { dims }) do
          local n, rev = a.shape[d], {}
          for i = 1, n do rev[i] = n + 1 - i end
          lists[d] = rev
        end
        T.poison_pool(dev, 1024)  -- an element flip leaves unwritten would show
        local f = t:flip(dims)
        local flat, shape = pick(a, lists)
        check(f, flat, shape, dtype .. " " .. layout)
        assert.equal(dtype, f:dtype())
        assert.is_true(f:is_contiguous())
      end
    end
  end
  local t = qlua.tensor({ 1, 2, 3 }, { device = dev })
  local f = t:flip(1)
  f[1] = 9   -- a new tensor
  T.assert_equal(t, { 1, 2, 3 })
  check(qlua.tensor(5, { device = dev }):flip({}), { 5 }, {}, "0-d")
  T.assert_shape(qlua.zeros({ 0, 3 }, { device = dev }):flip({ 1, 2 }), { 0, 3 })
  T.assert_error(function() return t:flip(2) end, "flip", "dim 2")
  T.assert_error(function() return qlua.zeros({ 2, 2 }):flip({ 1, 1 }) end, "flip", "dim 1", "twice")
end)

case("roll moves elements along dims (or the flattened tensor), wrapping", function(dev)
  local rolls = {
    { 1, 1 }, { -1, 2 }, { 5, 3 }, { -7, 3 }, { 0, 1 }, { { 1, 2 }, { 1, 3 } },
    { { 2, -1, 3 }, { 3, 1, 2 } }, { 3 }, { -25 },
  }
  for _, dtype in ipairs(T.dtypes) do
    for _, layout in ipairs(T.layouts) do
      local t, a = input({ 2, 3, 4 }, dtype, layout, dev)
      for _, r in ipairs(rolls) do
        local flat, shape
        if r[2] == nil then   -- flattened
          local n = #a.data
          flat, shape = {}, a.shape
          for i = 1, n do flat[i] = a.data[(i - 1 - r[1]) % n + 1] end
        else
          local lists = all_lists(a.shape)
          local shifts = type(r[1]) == "table" and r[1] or { r[1] }
          local dims = type(r[2]) == "table" and r[2] or { r[2] }
          for k = 1, #dims do
            local n, l = a.shape[dims[k]], {}
            for i = 1, n do l[i] = (i - 1 - shifts[k]) % n + 1 end
            lists[dims[k]] = l
          end
          flat, shape = pick(a, lists)
        end
        T.poison_pool(dev, 1024)
        local got = t:roll(r[1], r[2])
        check(got, flat, shape, dtype .. " " .. layout)
        assert.equal(dtype, got:dtype())
      end
    end
  end
  local t = qlua.tensor({ 1, 2, 3 }, { device = dev })
  t:roll(1, 1)[1] = 9
  T.assert_equal(t, { 1, 2, 3 })
  T.assert_shape(qlua.zeros({ 0, 3 }, { device = dev }):roll(1, 2), { 0, 3 })
  T.assert_shape(qlua.zeros({ 0, 3 }, { device = dev }):roll(2), { 0, 3 })
  check(qlua.tensor(4, { device = dev }):roll(3), { 4 }, {}, "0-d")
  T.assert_error(function() return t:roll({ 1, 2 }, 1) end, "roll", "2 shifts", "1 dims")
  T.assert_error(function() return t:roll({ 1, 2 }) end, "roll", "2 shifts", "without dims")
  T.assert_error(function() return t:roll(1, 2) end, "roll", "dim 2")
  T.assert_error(function() return t:roll(1.5, 1) end, "roll")
end)

case("repeat_tensor tiles like PyTorch's repeat, with new leading dims", function(dev)
  local reps = { { 1, 1 }, { 2, 1 }, { 1, 3 }, { 2, 3 }, { 2, 1, 1 }, { 3, 2, 2 }, { 2, 1, 2, 1 },
                 { 0, 2 }, { 2, 0, 1 } }
  for _, dtype in ipairs(T.dtypes) do
    for _, layout in ipairs(T.layouts) do
      local t, a = input({ 2, 3 }, dtype, layout, dev)
      for _, r in ipairs(reps) do
        local nd = #r
        local shape = {}
        for d = 1, nd do
          local src = d - (nd - 2)
          shape[d] = (src >= 1 and a.shape[src] or 1) * r[d]
        end
        -- reference: element i of dim d comes from (i - 1) % size + 1 of the source dim
        local out = {}
        T.each_index(shape, function(pos, k)
          local q = {}
          for d = nd - 1, nd do q[d - (nd - 2)] = (pos[d] - 1) % a.shape[d - (nd - 2)] + 1 end
          out[k] = a.data[T.linear(a.shape, q)]
        end)
        T.poison_pool(dev, 1024)
        local got = t:repeat_tensor(r)
        check(got, out, shape, dtype .. " " .. layout .. " " .. table.concat(r, "x"))
        assert.equal(dtype, got:dtype())
        assert.is_true(got:is_contiguous())
        check(t:repeat_tensor(table.unpack(r)), out, shape, "as numbers")
      end
    end
  end
  local t = qlua.tensor({ 1, 2 }, { device = dev })
  local r = t:repeat_tensor(1)
  r[1] = 9   -- always a new tensor
  T.assert_equal(t, { 1, 2 })
  check(qlua.tensor(5, { device = dev }):repeat_tensor(3), { 5, 5, 5 }, { 3 }, "0-d")
  check(qlua.tensor(5, { device = dev }):repeat_tensor({}), { 5 }, {}, "0-d, no sizes")
  check(t:expand(3, 2):repeat_tensor(1, 2), { 1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2 }, { 3, 4 }, "expanded")
  T.assert_error(function() return qlua.zeros({ 2, 2 }, { device = dev }):repeat_tensor(2) end,
    "repeat_tensor", "1 sizes", "2 dims")
  T.assert_error(function() return t:repeat_tensor(-1) end, "repeat_tensor")
end)

-- The narrow views split/chunk must give: pieces of the given lengths along dim.
local function check_pieces(list, a, dim, lengths, what)
  assert.equal(#lengths, #list, what .. ": piece count")
  local start = 0
  for k, len in ipairs(lengths) do
    local lists = all_lists(a.shape)
    local l = {}
    for i = 1, len do l[i] = start + i end
    lists[dim] = l
    local flat, shape = pick(a, lists)
    check(list[k], flat, shape, what .. " piece " .. k)
    start = start + len
  end
end

case("split gives views of a size (the last smaller) or of a list of sizes", function(dev)
  for _, dtype in ipairs(T.dtypes) do
    for _, layout in ipairs(T.layouts) do
      local t, a = input({ 7, 4 }, dtype, layout, dev)
      check_pieces(t:split(3), a, 1, { 3, 3, 1 }, "split(3)")
      check_pieces(t:split(7), a, 1, { 7 }, "split(7)")
      check_pieces(t:split(10), a, 1, { 7 }, "split(10)")
      check_pieces(t:split(1, 2), a, 2, { 1, 1, 1, 1 }, "split(1, 2)")
      check_pieces(t:split(3, 2), a, 2, { 3, 1 }, "split(3, 2)")
      check_pieces(t:split({ 2, 0, 5 }), a, 1, { 2, 0, 5 }, "split{2, 0, 5}")
      check_pieces(t:split({ 4 }, 2), a, 2, { 4 }, "split({4}, 2)")
    end
  end
  local t = qlua.zeros({ 5 }, { device = dev })
  t:split(2)[2]:fill_(1)
  T.assert_equal(t, { 0, 0, 1, 1, 0 })
  local e = qlua.zeros({ 0, 2 }, { device = dev })
  assert.equal(1, #e:split(2))            -- one empty piece, as PyTorch
  T.assert_shape(e:split(2)[1], { 0, 2 })
  assert.equal(0, #qlua.zeros({ 0 }, { device = dev }):split({}))
  -- a size near 2^63 is one whole piece (ceil(n / size) once overflowed forming n + size - 1)
  assert.equal(1, #t:split(math.maxinteger))
  T.assert_shape(t:split(math.maxinteger)[1], { 5 })
  assert.equal(5, #t:chunk(math.maxinteger))
  T.assert_error(function() return t:split(0) end, "split", "size 0", ">= 1")
  T.assert_error(function() return t:split({ 2, 2 }) end, "split", "add up to 4", "size 5")
  T.assert_error(function() return t:split({ 2, 4 }) end, "split", "exceed size 5")
  T.assert_error(function() return t:split({ 2, -1, 4 }) end, "split", "negative")
  T.assert_error(function() return t:split(2, 2) end, "split", "dim 2")
  T.assert_error(function() return qlua.tensor(1, { device = dev }):split(1) end, "split", "0-d")
end)

case("chunk gives ceil(size / n) per piece, possibly fewer pieces", function(dev)
  for _, dtype in ipairs(T.dtypes) do
    for _, layout in ipairs(T.layouts) do
      local t, a = input({ 6, 5 }, dtype, layout, dev)
      check_pieces(t:chunk(3), a, 1, { 2, 2, 2 }, "chunk(3)")
      check_pieces(t:chunk(4), a, 1, { 2, 2, 2 }, "chunk(4): 3 pieces")
      check_pieces(t:chunk(5), a, 1, { 2, 2, 2 }, "chunk(5)")
      check_pieces(t:chunk(6), a, 1, { 1, 1, 1, 1, 1, 1 }, "chunk(6)")
      check_pieces(t:chunk(9), a, 1, { 1, 1, 1, 1, 1, 1 }, "chunk(9)")
      check_pieces(t:chunk(2, 2), a, 2, { 3, 2 }, "chunk(2, 2)")
      check_pieces(t:chunk(4, 2), a, 2, { 2, 2, 1 }, "chunk(4, 2)")
      check_pieces(t:chunk(1, 2), a, 2, { 5 }, "chunk(1, 2)")
    end
  end
  local t = qlua.zeros({ 4 }, { device = dev })
  t:chunk(2)[2]:fill_(3)
  T.assert_equal(t, { 0, 0, 3, 3 })
  local e = qlua.zeros({ 2, 0 }, { device = dev }):chunk(3, 2)
  assert.equal(3, #e)                     -- a size-0 dim: n empty pieces, as PyTorch
  T.assert_shape(e[3], { 2, 0 })
  T.assert_error(function() return t:chunk(0) end, "chunk", "0 chunks")
  -- n empty pieces of an empty dim, up to a bound (the fuzzer's chunk(2^31 - 1) built a
  -- 2^31-entry table)
  T.assert_error(function() return qlua.zeros({ 4, 0 }, { device = dev }):chunk(2147483647, 2) end,
    "chunk", "pieces are too many")
  T.assert_error(function() return t:chunk(2, 2) end, "chunk", "dim 2")
end)

case("the ops keep every dtype on empty tensors", function(dev)
  for _, dtype in ipairs(T.dtypes) do
    local e = qlua.zeros({ 2, 0, 3 }, { dtype = dtype, device = dev })
    local results = {
      e:slice(1, 1, 2), e[{ 2 }], e[{ {}, {}, { 1, 3, 2 } }], e:squeeze(), e:unsqueeze(2),
      e:flatten(), e:unflatten(3, { 3, 1 }), e:movedim(1, 3), e:flip({ 1, 3 }), e:roll(1, 1),
      e:repeat_tensor(2, 2, 2), e:split(1)[2], e:chunk(2, 3)[1],
    }
    local shapes = { { 2, 0, 3 }, { 0, 3 }, { 2, 0, 2 }, { 2, 0, 3 }, { 2, 1, 0, 3 }, { 0 },
                     { 2, 0, 3, 1 }, { 0, 3, 2 }, { 2, 0, 3 }, { 2, 0, 3 }, { 4, 0, 6 }, { 1, 0, 3 },
                     { 2, 0, 2 } }
    for i, r in ipairs(results) do
      T.assert_shape(r, shapes[i], dtype .. " result " .. i)
      assert.equal(dtype, r:dtype())
    end
  end
end)

case("results stay on the source's device", function(dev)
  local t = qlua.zeros({ 2, 3 }, { device = dev })
  local want = t:device()
  local results = {
    t:slice(2, 1, 2), t[{ 1, { 2, 3 } }], t:squeeze(), t:unsqueeze(1), t:flatten(),
    t:unflatten(2, { 3, 1 }), t:movedim(1, 2), t:flip(1), t:roll(1, 2), t:repeat_tensor(2, 2),
    t:split(1)[1], t:chunk(2)[2],
  }
  for i, r in ipairs(results) do assert.equal(want, r:device(), "result " .. i) end
end)

------------------------------------------------------------------------ registration

describe("slicing, indexing and shape ops on the CPU", function()
  for _, c in ipairs(cases) do
    it(c.name, function() T.reseed(c.name); c.fn("cpu") end)
  end
end)

-- The same cases on the GPU; without one they are reported as pending with the reason.
describe("slicing, indexing and shape ops on the GPU", function()
  for _, c in ipairs(cases) do
    if HAS_GPU then
      it(c.name, function() T.reseed(c.name); c.fn("gpu") end)
    else
      it(c.name, function() pending("no GPU: " .. tostring(NO_GPU_REASON)) end)
    end
  end
end)
