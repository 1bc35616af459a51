-- The small conveniences users reached for (tril/triu and their
-- in-place forms, diag, diagonal, isclose/allclose/equal, expand_as/view_as, the dtype
-- shorthands), qlua.Tensor as a class users extend, and the conversion rules docs/API.md
-- states once for every dtype. Each op against a plain-Lua reference, on every dtype it
-- takes, on views, on both devices (the GPU cases are pending without a GPU).
local T, qlua, _, _, both = require("qlua.testing").spec(_ENV)

local ALL = { "float32", "float64", "int32", "int64", "bool", "uint8", "float16", "bfloat16" }
local INF, NAN = math.huge, 0 / 0

local function zero_of(dtype)
  if dtype == "bool" then return false end
  return 0
end

-- Random values of dtype that are never zero (bool: true), so a zeroed element shows.
local function nonzero_table(shape, dtype)
  if dtype == "bool" then
    local flat = {}
    for i = 1, T.numel(shape) do flat[i] = true end
    return T.unflatten(flat, shape)
  end
  if dtype == "float16" or dtype == "bfloat16" then
    local flat = T.random_list(T.numel(shape), "float64", { lo = 0.5, hi = 100 })
    for i = 1, #flat do flat[i] = T.round_half(flat[i], dtype) end
    return T.unflatten(flat, shape)
  end
  return T.random_table(shape, dtype)
end

-- The reference of tril (upper false) or triu over the last two dims of nested x.
local function tri_ref(x, shape, k, upper)
  local a = T.array(x, shape)
  local out = {}
  local nd = #shape
  T.each_index(shape, function(pos, n)
    local d = pos[nd] - pos[nd - 1]
    local keep
    if upper then keep = d >= k else keep = d <= k end
    if keep then out[n] = a.data[n]
    elseif type(a.data[n]) == "boolean" then out[n] = false
    else out[n] = 0 end
  end)
  return T.unflatten(out, shape)
end

local function error_of(fn) return tostring(T.error_of(fn)) end

describe("tril and triu", function()
  for _, dtype in ipairs(ALL) do
    both("keep one triangle of the last two dims on every layout, " .. dtype, function(dev)
      for _, shape in ipairs({ { 5, 7 }, { 6, 3 }, { 2, 4, 3 } }) do
        local x = nonzero_table(shape, dtype)
        for _, layout in ipairs(T.layouts) do
          local t = T.make(x, dtype, layout, dev, shape)
          for _, k in ipairs({ -7, -2, -1, 0, 1, 2, 9, math.maxinteger, math.mininteger }) do
            local what = string.format("%s %s %s k=%d", dtype, layout, T.shape_str(shape), k)
            local lo, up = t:tril(k), t:triu(k)
            assert.are.equal(dtype, lo:dtype())
            assert.are.equal(t:device(), lo:device())
            T.assert_equal(lo, tri_ref(x, shape, k, false), "tril " .. what)
            T.assert_equal(up, tri_ref(x, shape, k, true), "triu " .. what)
            T.assert_equal(t, x, "the source is unchanged " .. what)
          end
          T.assert_equal(t:tril(), tri_ref(x, shape, 0, false), "tril() is tril(0)")
          T.assert_equal(t:triu(), tri_ref(x, shape, 0, true), "triu() is triu(0)")
        end
      end
    end)
  end

  both("tril_ and triu_ write through views and return self", function(dev)
    for _, dtype in ipairs(ALL) do
      local shape = { 4, 6 }
      local x = nonzero_table(shape, dtype)
      for _, layout in ipairs(T.layouts) do
        for _, case in ipairs({ { "tril_", false, 1 }, { "triu_", true, -1 } }) do
          local t = T.make(x, dtype, layout, dev, shape)
          local back = t[case[1]](t, case[3])
          assert.is_true(rawequal(back, t), case[1] .. " returns self")
          T.assert_equal(t, tri_ref(x, shape, case[3], case[2]), case[1] .. " " .. dtype .. " " .. layout)
        end
      end
      -- through a view of a larger tensor: only the view's elements change
      local base = qlua.tensor(nonzero_table({ 5, 5 }, dtype), { dtype = dtype, device = dev })
      local before = base:totable()
      base:narrow(1, 2, 3):narrow(2, 2, 3):tril_()
      local want = T.unflatten(T.flatten(before), { 5, 5 })
      for i = 2, 4 do for j = 2, 4 do
        if j - 1 > i - 1 then want[i][j] = zero_of(dtype) end
      end end
      T.assert_equal(base, want, "tril_ of an inner view " .. dtype)
    end
  end)

  both("empty matrices, and the errors", function(dev)
    for _, shape in ipairs({ { 0, 3 }, { 3, 0 }, { 2, 0, 0 } }) do
      local t = qlua.zeros(shape, { device = dev })
      T.assert_shape(t:tril(), shape)
      T.assert_shape(t:triu(2), shape)
      assert.is_true(rawequal(t:tril_(), t))
    end
    assert.truthy(error_of(function() return qlua.ones(3, { device = dev }):tril() end)
                  :find("^tril: a 1%-d tensor has no triangle"))
    assert.truthy(error_of(function() return qlua.tensor(1, { device = dev }):triu_() end)
                  :find("^triu_: a 0%-d tensor"))
    assert.truthy(error_of(function() return qlua.ones(2, 2, { device = dev }):tril(0.5) end)
                  :find("tril"))
    local e = qlua.ones(1, 3, { device = dev }):expand(3, 3)
    assert.truthy(error_of(function() return e:tril_() end):find("^tril_:"))
    T.assert_equal(e:tril(), { { 1, 0, 0 }, { 1, 1, 0 }, { 1, 1, 1 } }, "tril of an expanded view")
  end)
end)

describe("diag and diagonal", function()
  both("diag of a 1-D tensor is the matrix with it on diagonal k", function(dev)
    for _, dtype in ipairs(ALL) do
      local x = nonzero_table({ 4 }, dtype)
      for _, layout in ipairs(T.layouts) do
        local t = T.make(x, dtype, layout, dev)
        for _, k in ipairs({ 0, 1, 3, -2 }) do
          local side = 4 + math.abs(k)
          local want = {}
          for i = 1, side do
            want[i] = {}
            for j = 1, side do want[i][j] = zero_of(dtype) end
          end
          for i = 1, 4 do
            if k >= 0 then want[i][i + k] = x[i] else want[i - k][i] = x[i] end
          end
          local m = t:diag(k)
          assert.are.equal(dtype, m:dtype())
          assert.is_true(m:is_contiguous())
          T.assert_equal(m, want, string.format("diag %s %s k=%d", dtype, layout, k))
        end
      end
      T.assert_equal(qlua.tensor({}, { dtype = dtype, device = dev }):diag(2),
                     { { zero_of(dtype), zero_of(dtype) }, { zero_of(dtype), zero_of(dtype) } },
                     "diag of an empty vector")
    end
  end)

  both("diag of a 2-D tensor is a copy of diagonal k", function(dev)
    for _, dtype in ipairs(ALL) do
      local shape = { 4, 6 }
      local x = nonzero_table(shape, dtype)
      for _, layout in ipairs(T.layouts) do
        local t = T.make(x, dtype, layout, dev, shape)
        for _, k in ipairs({ -5, -3, -1, 0, 2, 5, 6, 100 }) do
          local want = {}
          for i = 1, 4 do
            local j = i + k
            if j >= 1 and j <= 6 then want[#want + 1] = x[i][j] end
          end
          local d = t:diag(k)
          T.assert_shape(d, { #want })
          T.assert_equal(d, want, string.format("diag %s %s k=%d", dtype, layout, k))
        end
      end
      local t = qlua.tensor(x, { dtype = dtype, device = dev })
      t:diag():fill_(zero_of(dtype))
      T.assert_equal(t, x, "diag's result is a copy")
    end
    assert.truthy(error_of(function() return qlua.zeros(2, 2, 2, { device = dev }):diag() end)
                  :find("^diag: expects a 1%-D or 2%-D tensor, got 3%-d"))
    assert.truthy(error_of(function() return qlua.tensor(1, { device = dev }):diag() end)
                  :find("^diag:"))
  end)

  both("diagonal is a view along any two dims, with an offset, as PyTorch's", function(dev)
    local shape = { 3, 4, 5 }
    for _, dtype in ipairs(ALL) do
      local x = nonzero_table(shape, dtype)
      for _, layout in ipairs(T.layouts) do
        local t = T.make(x, dtype, layout, dev, shape)
        for _, dims in ipairs({ { 1, 2 }, { 2, 1 }, { 1, 3 }, { 3, 2 }, { 2, 3 } }) do
          for _, off in ipairs({ -4, -1, 0, 1, 3, 5 }) do
            local d1, d2 = dims[1], dims[2]
            local n1, n2 = shape[d1], shape[d2]
            local len = 0
            if off >= 0 then len = math.max(0, math.min(n1, n2 - off))
            else len = math.max(0, math.min(n1 + off, n2)) end
            local rest = {}
            for d = 1, 3 do if d ~= d1 and d ~= d2 then rest[#rest + 1] = d end end
            local r = rest[1]
            local want = {}
            for a = 1, shape[r] do
              want[a] = {}
              for i = 1, len do
                local pos = {}
                pos[r] = a
                pos[d1] = off >= 0 and i or i - off
                pos[d2] = off >= 0 and i + off or i
                want[a][i] = x[pos[1]][pos[2]][pos[3]]
              end
            end
            local v = t:diagonal(off, d1, d2)
            T.assert_shape(v, { shape[r], len })
            if len > 0 then
              assert.are.equal(t:stride(d1) + t:stride(d2), v:stride(2), "the diagonal's stride")
              T.assert_equal(v, want, string.format("diagonal %s %s off=%d dims %d,%d", dtype,
                                                   layout, off, d1, d2))
            end
          end
        end
      end
    end
  end)

  both("diagonal shares storage: writes reach the base", function(dev)
    local m = qlua.zeros(3, 4, { device = dev })
    m:diagonal():fill_(1)
    m:diagonal(1):copy_(qlua.tensor({ 2, 3, 4 }, { device = dev }))
    m:diagonal(-1):fill_(-1)
    T.assert_equal(m, { { 1, 2, 0, 0 }, { -1, 1, 3, 0 }, { 0, -1, 1, 4 } })
    T.assert_equal(m:diagonal(), { 1, 1, 1 }, "default offset 0, dims 1 and 2")
    local b = qlua.zeros(2, 3, 3, { device = dev })
    b:diagonal(0, 2, 3):fill_(7)
    T.assert_equal(b:sum(), 42, "a batch of diagonals")
    assert.truthy(error_of(function() return m:diagonal(0, 2, 2) end)
                  :find("^diagonal: dim1 and dim2 are both 2"))
    assert.truthy(error_of(function() return qlua.ones(3, { device = dev }):diagonal() end)
                  :find("^diagonal: a 1%-d tensor has no diagonal"))
    assert.truthy(error_of(function() return m:diagonal(0, 1, 3) end):find("^diagonal: dim 3"))
    T.assert_shape(m:diagonal(math.maxinteger), { 0 })
    T.assert_shape(m:diagonal(math.mininteger), { 0 })
  end)
end)

-- PyTorch's isclose, in plain Lua on doubles (the cases below keep their margins far from
-- float32's rounding): equal, both NaN with equal_nan, or a finite error within tolerance.
local function close_ref(a, b, rtol, atol, equal_nan)
  if a == b then return true end
  if equal_nan and a ~= a and b ~= b then return true end
  local diff = math.abs(a - b)
  if diff ~= diff or diff == INF then return false end
  return diff <= atol + math.abs(rtol * b)
end

describe("isclose, allclose and equal", function()
  both("isclose against PyTorch's formula on floats, NaN and the infinities included", function(dev)
    local bs = { 1.0, -2.0, 1000.0, 1e-9, 0.0, INF, -INF, NAN, 3.0, 0.5 }
    local factors = { 1.0, 1 + 1e-7, 1 + 1e-3, 1 - 1e-7, -1.0 }
    for _, dtype in ipairs({ "float32", "float64", "float16", "bfloat16" }) do
      local as, bv = {}, {}
      for _, b in ipairs(bs) do
        for _, f in ipairs(factors) do
          local a = b * f
          if dtype == "float32" then a, b = T.f32(a), T.f32(b)
          elseif dtype ~= "float64" then a, b = T.round_half(a, dtype), T.round_half(b, dtype) end
          as[#as + 1], bv[#bv + 1] = a, b
        end
      end
      if dtype == "float16" or dtype == "bfloat16" then  -- within atol of 0, and not
        as[#as + 1], bv[#bv + 1] = 0.0, T.round_half(0.25, dtype)
        as[#as + 1], bv[#bv + 1] = 0.0, T.round_half(0.75, dtype)
      else
        as[#as + 1], bv[#bv + 1] = 0.0, dtype == "float32" and T.f32(5e-9) or 5e-9
        as[#as + 1], bv[#bv + 1] = 0.0, dtype == "float32" and T.f32(5e-7) or 5e-7
      end
      for _, layout in ipairs(T.layouts) do
        local a = T.make(as, dtype, layout, dev)
        local b = T.make(bv, dtype, "contiguous", dev)
        for _, tol in ipairs({ { 1e-5, 1e-8, false }, { 1e-5, 1e-8, true }, { 0.01, 0, false },
                               { 0, 0, true }, { 0, 0.5, false } }) do
          local want = {}
          for i = 1, #as do want[i] = close_ref(as[i], bv[i], tol[1], tol[2], tol[3]) end
          local got = a:isclose(b, tol[1], tol[2], tol[3])
          assert.are.equal("bool", got:dtype())
          local what = string.format("%s %s rtol=%g atol=%g equal_nan=%s", dtype, layout,
                                     tol[1], tol[2], tostring(tol[3]))
          T.assert_equal(got, want, what)
          T.assert_equal(a:isclose(b, { rtol = tol[1], atol = tol[2], equal_nan = tol[3] }), want,
                         what .. " (options table)")
          local all = true
          for i = 1, #want do all = all and want[i] end
          assert.are.equal(all, a:allclose(b, tol[1], tol[2], tol[3]), "allclose " .. what)
        end
        T.assert_equal(a:isclose(b), a:isclose(b, 1e-05, 1e-08, false), "PyTorch's defaults")
      end
    end
  end)

  both("isclose on integers and bool, asymmetric as PyTorch's, and broadcasting", function(dev)
    for _, dtype in ipairs({ "int32", "int64", "uint8" }) do
      local as = { 100, 111, 100, 100, 0, 7 }
      local bs = { 111, 100, 109, 112, 0, 7 }
      local a = qlua.tensor(as, { dtype = dtype, device = dev })
      local b = qlua.tensor(bs, { dtype = dtype, device = dev })
      local want = {}
      for i = 1, #as do want[i] = close_ref(as[i], bs[i], 0.1, 0, false) end
      T.assert_equal(a:isclose(b, 0.1, 0), want, dtype .. " rtol 0.1")
      T.assert_equal(a:isclose(b, 0, 0), { false, false, false, false, true, true }, dtype .. " exact")
      T.assert_equal(a:isclose(b, 0, 11), { true, true, true, false, true, true }, dtype .. " atol 11")
    end
    local big = qlua.tensor({ math.mininteger, math.maxinteger, math.mininteger }, { device = dev })
    local big2 = qlua.tensor({ math.mininteger, math.maxinteger, math.maxinteger }, { device = dev })
    T.assert_equal(big:isclose(big2), { true, true, false }, "int64 extremes")
    local t = qlua.tensor({ true, false, true }, { device = dev })
    T.assert_equal(t:isclose(qlua.tensor({ true, true, false }, { device = dev })), { true, false, false })
    T.assert_equal(t:isclose(qlua.tensor({ true, true, false }, { device = dev }), 0, 1),
                   { true, true, true }, "bool with atol 1")
    -- broadcasting: (3, 1) against (4)
    local col = qlua.tensor({ { 1.0 }, { 2.0 }, { 3.0 } }, { device = dev })
    local row = qlua.tensor({ 1.0, 2.0, 3.0, 2.0000001 }, { device = dev })
    local got = col:isclose(row)
    T.assert_shape(got, { 3, 4 })
    T.assert_equal(got, { { true, false, false, false }, { false, true, false, true },
                          { false, false, true, false } })
    assert.is_false(col:allclose(row))
    assert.is_true(row:allclose(row:clone()))
  end)

  both("isclose's errors name it and the values", function(dev)
    local a = qlua.ones(3, { device = dev })
    assert.truthy(error_of(function() return a:isclose(qlua.ones(3, { dtype = "float64", device = dev })) end)
                  :find("^isclose: dtypes float32 and float64 differ"))
    assert.truthy(error_of(function() return a:isclose(a, -1) end)
                  :find("^isclose: rtol %-1 and atol 1e%-08 must be >= 0"))
    assert.truthy(error_of(function() return a:allclose(a, 0, NAN) end):find("^allclose: rtol 0 and atol"))
    assert.truthy(error_of(function() return a:isclose(qlua.ones(4, { device = dev })) end):find("^isclose:"))
    assert.truthy(error_of(function() return a:isclose(a, { tol = 1 }) end)
                  :find("^isclose: unknown option tol"))
    assert.truthy(error_of(function() return a:isclose(a, 1e-5, 1e-8, 1) end)
                  :find("^isclose: equal_nan must be a boolean"))
    assert.truthy(error_of(function() return a:isclose(1) end):find("isclose"))
    assert.truthy(error_of(function() return a:allclose(a, {}, 1) end):find("^allclose: unexpected argument"))
  end)

  both("equal: one shape and equal values, whatever the dtypes", function(dev)
    for _, dtype in ipairs(ALL) do
      local x = nonzero_table({ 3, 4 }, dtype)
      for _, layout in ipairs(T.layouts) do
        local a = T.make(x, dtype, layout, dev, { 3, 4 })
        local b = T.make(x, dtype, "contiguous", dev, { 3, 4 })
        assert.is_true(a:equal(b), dtype .. " " .. layout)
        local c = b:clone()
        c[{ 2, 3 }] = zero_of(dtype)
        assert.is_false(a:equal(c), dtype .. " " .. layout .. " one element differs")
      end
    end
    local i = qlua.tensor({ 1, 2, 3 }, { dtype = "int32", device = dev })
    assert.is_true(i:equal(qlua.tensor({ 1.0, 2.0, 3.0 }, { device = dev })), "int32 and float32")
    assert.is_false(i:equal(qlua.tensor({ { 1, 2, 3 } }, { dtype = "int32", device = dev })), "shapes differ")
    assert.is_false(i:equal(qlua.tensor({ 1, 2 }, { dtype = "int32", device = dev })))
    local n = qlua.tensor({ 1.0, NAN }, { device = dev })
    assert.is_false(n:equal(n), "NaN is never equal")
    assert.is_true(qlua.zeros(0, 3, { device = dev }):equal(qlua.zeros(0, 3, { dtype = "int64", device = dev })))
    assert.is_false(qlua.zeros(0, 3, { device = dev }):equal(qlua.zeros(3, 0, { device = dev })))
    assert.is_true(qlua.tensor(5, { device = dev }):equal(qlua.tensor(5.0, { device = dev })), "0-d")
    if dev == "gpu" then
      assert.truthy(error_of(function() return i:equal(i:cpu()) end):find("^equal: tensors on"))
    end
  end)
end)

describe("expand_as, view_as and the dtype shorthands", function()
  both("expand_as and view_as take the other tensor's shape", function(dev)
    for _, dtype in ipairs(ALL) do
      local x = nonzero_table({ 3, 1 }, dtype)
      for _, layout in ipairs(T.layouts) do
        local t = T.make(x, dtype, layout, dev, { 3, 1 })
        local other = qlua.zeros(2, 3, 4, { dtype = "int32", device = dev })
        local e = t:expand_as(other)
        T.assert_shape(e, { 2, 3, 4 })
        assert.are.equal(0, e:stride(3), "broadcast dims have stride 0")
        local want = {}
        for a = 1, 2 do want[a] = {} for b = 1, 3 do want[a][b] = {} for c = 1, 4 do want[a][b][c] = x[b][1] end end end
        T.assert_equal(e, want, "expand_as " .. dtype .. " " .. layout)
      end
      local flat = nonzero_table({ 6 }, dtype)
      local v = qlua.tensor(flat, { dtype = dtype, device = dev }):view_as(qlua.zeros(2, 3))
      T.assert_shape(v, { 2, 3 })
      T.assert_equal(v, T.unflatten(flat, { 2, 3 }), "view_as " .. dtype)
    end
    local base = qlua.zeros(6, { device = dev })
    base:view_as(qlua.zeros(3, 2)):select(1, 2):fill_(5)
    T.assert_equal(base, { 0, 0, 5, 5, 0, 0 }, "view_as shares storage")
    assert.truthy(error_of(function() return qlua.zeros(3, { device = dev }):expand_as(qlua.zeros(2, 4)) end)
                  :find("^expand_as: cannot expand shape 3 to 2x4"))
    assert.truthy(error_of(function() return qlua.zeros(3, 2, { device = dev }):t():view_as(qlua.zeros(6)) end)
                  :find("^view_as: shape 6 is not compatible"))
    assert.truthy(error_of(function() return qlua.zeros(3, { device = dev }):view_as(qlua.zeros(4)) end)
                  :find("^view_as:"))
    assert.truthy(error_of(function() return qlua.zeros(3):view_as({ 3 }) end):find("view_as"))
  end)

  both("float, double, half, bfloat16, long, int, bool and byte are :to of their dtype", function(dev)
    local names = { float = "float32", double = "float64", half = "float16", bfloat16 = "bfloat16",
                    long = "int64", int = "int32", bool = "bool", byte = "uint8" }
    local src = qlua.tensor({ { 1.5, -2.25, 0 }, { 3, 250, -0.5 } }, { dtype = "float64", device = dev }):t()
    for name, dtype in pairs(names) do
      local r = src[name](src)
      assert.are.equal(dtype, r:dtype(), name)
      assert.are.equal(src:device(), r:device(), name)
      T.assert_equal(r, src:to(dtype), name .. " is to(" .. dtype .. ")")
      assert.is_true(rawequal(r[name](r), r), name .. " of a " .. dtype .. " tensor is itself")
    end
    assert.truthy(error_of(function() return src:float(1) end):find("^float: unexpected argument"))
    local freed = qlua.zeros(2, { device = dev })
    freed:free()
    assert.truthy(error_of(function() return freed:half() end):find("^half: tensor has been freed"))
  end)
end)

describe("qlua.Tensor", function()
  both("is the class: methods added to it reach every tensor", function(dev)
    assert.are.equal("table", type(qlua.Tensor))
    assert.is_true(getmetatable(qlua.zeros(1, { device = dev })) == qlua.Tensor)
    assert.are.equal(qlua.zeros(1).add, qlua.Tensor.add, "its methods are readable through it")
    assert.is_nil(qlua.zeros(1).double_it)
    function qlua.Tensor.double_it(t) return t * 2 end
    local ok, err = pcall(function()
      local t = qlua.tensor({ 1, 2, 3 }, { device = dev })
      T.assert_equal(t:double_it(), { 2, 4, 6 })
      T.assert_equal(t:t():double_it(), { 2, 4, 6 }, "views are tensors too")
      assert.is_nil(rawget(qlua.Tensor, "double_it"), "added to the methods, not the metatable")
      assert.are.equal(qlua.Tensor.double_it, t.double_it)
    end)
    qlua.Tensor.double_it = nil
    assert(ok, err)
    assert.is_nil(qlua.zeros(1).double_it, "and removed again")
    assert.are.equal("function", type(rawget(qlua.Tensor, "__add")), "metamethods are its own fields")
    assert.are.equal("table", type(qlua.Kernel))
    assert.are.equal("table", type(qlua.Module))
  end)
end)

-- The rules docs/API.md states under "Conversions", one case per rule, each direction on
-- views and on both devices.
describe("dtype conversions", function()
  local function view_of(list, dtype, dev) return T.make(list, dtype, "stepped", dev) end

  both("float to integer: toward zero, saturating, NaN to 0", function(dev)
    local vals = { 2.7, -2.7, 0.5, -0.5, -0.0, NAN, INF, -INF, 1e30, -1e30, 3e9, -3e9,
                   2147483647.5, -2147483648.5, 255.9, 256.0, -1.0, 2.0 ^ 63, -2.0 ^ 63 }
    local RANGE = { int32 = { -2147483648, 2147483647 }, int64 = { math.mininteger, math.maxinteger },
                    uint8 = { 0, 255 } }
    local function sat(x, lo, hi)
      if x ~= x then return 0 end
      if x <= lo then return lo end
      if x >= hi + 1.0 then return hi end
      return math.tointeger(x < 0 and math.ceil(x) or math.floor(x))
    end
    for _, from in ipairs({ "float32", "float64", "float16", "bfloat16" }) do
      local src = {}
      for i, v in ipairs(vals) do
        src[i] = from == "float32" and T.f32(v) or from == "float64" and v or T.round_half(v, from)
      end
      local t = view_of(src, from, dev)
      for to, r in pairs(RANGE) do
        local want = {}
        for i, v in ipairs(src) do want[i] = sat(v, r[1], r[2]) end
        T.assert_equal(t:to(to), want, from .. " -> " .. to)
        local dst = qlua.zeros(#src, 2, { dtype = to, device = dev }):select(2, 2)
        dst:copy_(t)
        T.assert_equal(dst, want, from .. " -> " .. to .. " by copy_")
      end
    end
  end)

  both("to bool: nonzero is true (NaN too, -0.0 not); from bool: 1 and 0", function(dev)
    for _, from in ipairs({ "float32", "float64", "float16", "bfloat16" }) do
      local t = view_of({ 0.0, -0.0, NAN, 0.25, -INF, 1e-30 }, from, dev)
      local tiny = from == "float32" or from == "float64" or from == "bfloat16"
      T.assert_equal(t:to("bool"), { false, false, true, true, true, tiny }, from .. " -> bool")
    end
    for _, from in ipairs({ "int32", "int64", "uint8" }) do
      T.assert_equal(view_of({ 0, 1, 2, 255 }, from, dev):to("bool"), { false, true, true, true })
    end
    local b = view_of({ true, false }, "bool", dev)
    for _, to in ipairs({ "float32", "float64", "int32", "int64", "uint8", "float16", "bfloat16" }) do
      T.assert_equal(b:to(to), { 1, 0 }, "bool -> " .. to)
    end
  end)

  both("integer to integer keeps the low bits", function(dev)
    local vals = { 0, 1, -1, 255, 256, -256, 2147483648, -2147483649, math.maxinteger, math.mininteger }
    local t = view_of(vals, "int64", dev)
    local to32, to8 = {}, {}
    for i, v in ipairs(vals) do
      local low = v & 0xffffffff
      to32[i] = low >= 0x80000000 and low - 0x100000000 or low
      to8[i] = v & 0xff
    end
    T.assert_equal(t:to("int32"), to32, "int64 -> int32")
    T.assert_equal(t:to("uint8"), to8, "int64 -> uint8")
    T.assert_equal(view_of({ -1, 300, -129 }, "int32", dev):to("uint8"), { 255, 44, 127 }, "int32 -> uint8")
    T.assert_equal(view_of({ 200, 255 }, "uint8", dev):to("int32"), { 200, 255 }, "uint8 -> int32")
  end)

  both("to a float: rounded to nearest even, overflow to inf, never saturated", function(dev)
    local f64 = view_of({ 1e300, -1e300, 1 / 3, 1e-50, NAN, INF, 3.4028235677973366e38 }, "float64", dev)
    T.assert_equal(f64:to("float32"), { INF, -INF, T.f32(1 / 3), 0.0, NAN, INF, INF }, "float64 -> float32")
    T.assert_equal(view_of({ 70000.0, -1e10, 65519.0, 65520.0, NAN }, "float32", dev):to("float16"),
                   { INF, -INF, 65504, INF, NAN }, "float32 -> float16")
    T.assert_equal(view_of({ 1e39, 3.0e38, NAN }, "float64", dev):to("bfloat16"),
                   { INF, T.round_half(3.0e38, "bfloat16"), NAN }, "float64 -> bfloat16")
    T.assert_equal(view_of({ 70000, -65520, 65519, 2049 }, "int64", dev):to("float16"),
                   { INF, -INF, 65504, 2048 }, "int64 -> float16 (2049 rounds to even)")
    T.assert_equal(view_of({ (1 << 53) + 1, (1 << 24) + 1 }, "int64", dev):to("float64"),
                   { 2.0 ^ 53, 2.0 ^ 24 + 1 }, "int64 -> float64")
    T.assert_equal(view_of({ (1 << 24) + 1, (1 << 24) + 3 }, "int32", dev):to("float32"),
                   { 2.0 ^ 24, 2.0 ^ 24 + 4 }, "int32 -> float32 (ties to even)")
  end)
end)
