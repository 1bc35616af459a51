-- Matrix products (docs/API.md "Matrix products"): matmul for 1-D.1-D, 2-D@1-D, 1-D@2-D,
-- 2-D@2-D and batched operands with broadcast batch dims, on any strides, and its errors;
-- dot, outer, mv, bmm, addmm (qlua.addmm, t:addmm, t:addmm_) and qlua.einsum against
-- plain-Lua loops, on float32 and float64, on views (transposed, narrowed, stepped,
-- expanded), empty shapes, and bad arguments. The second part's bodies run on the CPU and,
-- through gtest, on the GPU against the same references.
local T, qlua, test, gtest, both = require("qlua.testing").spec(_ENV)

local ref = T.ref

local TOL = { float32 = 1e-5, float64 = 1e-12 }

-- ============================================================================== matmul

-- a:matmul(b) and qlua.matmul(a, b) for the given shapes, dtype and layouts.
local function check_matmul(sa, sb, dtype, la, lb)
  local a = T.random_table(sa, dtype)
  local b = T.random_table(sb, dtype)
  local ta, tb = T.make(a, dtype, la), T.make(b, dtype, lb)
  local want = ref.matmul(a, b)
  local what = string.format("matmul %s %s (%s) @ %s (%s)", dtype, T.shape_str(sa), la, T.shape_str(sb), lb)
  local r = ta:matmul(tb)
  assert.equal(dtype, r:dtype(), what)
  T.assert_close(r, want, TOL[dtype], what)
  T.assert_close(qlua.matmul(ta, tb), want, TOL[dtype], what .. " (qlua.matmul)")
  T.assert_equal(ta, a, what .. ": a changed")
  T.assert_equal(tb, b, what .. ": b changed")
  return r
end

describe("matmul", function()
  test("1-D . 1-D gives a 0-d tensor", function()
    for _, dtype in ipairs(T.float_dtypes) do
      for _, layout in ipairs(T.layouts) do
        local r = check_matmul({ 17 }, { 17 }, dtype, layout, T.layouts[math.random(1, 4)])
        assert.equal(0, r:dim())
      end
    end
  end)

  test("2-D @ 1-D and 1-D @ 2-D", function()
    for _, dtype in ipairs(T.float_dtypes) do
      for _, layout in ipairs(T.layouts) do
        T.assert_shape(check_matmul({ 7, 5 }, { 5 }, dtype, layout, "stepped"), { 7 })
        T.assert_shape(check_matmul({ 5 }, { 5, 9 }, dtype, "narrowed", layout), { 9 })
      end
    end
  end)

  test("2-D @ 2-D on every pair of layouts", function()
    for _, dtype in ipairs(T.float_dtypes) do
      for _, la in ipairs(T.layouts) do
        for _, lb in ipairs(T.layouts) do
          T.assert_shape(check_matmul({ 6, 11 }, { 11, 4 }, dtype, la, lb), { 6, 4 })
        end
      end
    end
  end)

  test("odd and degenerate sizes", function()
    for _, dtype in ipairs(T.float_dtypes) do
      check_matmul({ 1, 1 }, { 1, 1 }, dtype, "contiguous", "contiguous")
      check_matmul({ 1, 9 }, { 9, 1 }, dtype, "transposed", "transposed")
      check_matmul({ 13, 1 }, { 1, 7 }, dtype, "narrowed", "stepped")
      check_matmul({ 33, 65 }, { 65, 17 }, dtype, "contiguous", "transposed")
    end
  end)

  test("with an empty inner dim gives zeros, with an empty outer dim an empty result", function()
    local z = qlua.zeros(3, 0):matmul(qlua.zeros(0, 4))
    T.assert_shape(z, { 3, 4 })
    T.assert_equal(z, ref.expand({ 0 }, { 3, 4 }))
    T.assert_shape(qlua.zeros(0, 5):matmul(qlua.zeros(5, 2)), { 0, 2 })
  end)

  test("batched 3-D with equal batch dims", function()
    for _, dtype in ipairs(T.float_dtypes) do
      for _, layout in ipairs(T.layouts) do
        T.assert_shape(check_matmul({ 3, 4, 5 }, { 3, 5, 6 }, dtype, layout, T.layouts[math.random(1, 4)]), { 3, 4, 6 })
      end
    end
  end)

  test("batched with broadcast batch dims", function()
    for _, dtype in ipairs(T.float_dtypes) do
      T.assert_shape(check_matmul({ 1, 4, 5 }, { 3, 5, 2 }, dtype, "contiguous", "transposed"), { 3, 4, 2 })
      T.assert_shape(check_matmul({ 3, 4, 5 }, { 1, 5, 2 }, dtype, "stepped", "contiguous"), { 3, 4, 2 })
      T.assert_shape(check_matmul({ 3, 4, 5 }, { 5, 2 }, dtype, "narrowed", "contiguous"), { 3, 4, 2 })
      T.assert_shape(check_matmul({ 4, 5 }, { 3, 5, 2 }, dtype, "transposed", "narrowed"), { 3, 4, 2 })
      T.assert_shape(check_matmul({ 2, 1, 3, 4 }, { 3, 4, 5 }, dtype, "contiguous", "stepped"), { 2, 3, 3, 5 })
      T.assert_shape(check_matmul({ 2, 3, 3, 4 }, { 2, 3, 4, 2 }, dtype, "transposed", "transposed"), { 2, 3, 3, 2 })
    end
  end)

  test("an expanded (stride 0) batch operand", function()
    local b = T.random_table({ 1, 5, 3 }, "float64")
    local tb = T.make(b, "float64"):expand(4, 5, 3)
    local a = T.random_table({ 4, 2, 5 }, "float64")
    local want = ref.matmul(a, ref.expand(b, { 4, 5, 3 }))
    T.assert_close(T.make(a, "float64", "transposed"):matmul(tb), want, 1e-12)
  end)

  test("a larger float32 product through BLAS", function()
    local a = T.random_table({ 64, 96 }, "float32")
    local b = T.random_table({ 96, 48 }, "float32")
    T.assert_close(T.make(a, "float32", "transposed"):matmul(T.make(b, "float32")), ref.matmul(a, b), 1e-5)
  end)

  test("mismatched shapes name both shapes", function()
    T.assert_error(function() local _ = qlua.zeros(2, 3):matmul(qlua.zeros(4, 5)) end,
      "matmul: shapes 2x3 and 4x5 do not match")
    T.assert_error(function() local _ = qlua.matmul(qlua.zeros(2, 3), qlua.zeros(4, 5)) end,
      "matmul: shapes 2x3 and 4x5 do not match")
    T.assert_error(function() local _ = qlua.zeros(3):matmul(qlua.zeros(4)) end, "matmul", "3", "4")
    T.assert_error(function() local _ = qlua.zeros(2, 3):matmul(qlua.zeros(4)) end, "matmul", "2x3", "4")
    T.assert_error(function() local _ = qlua.zeros(5):matmul(qlua.zeros(4, 2)) end, "matmul", "5", "4x2")
    -- batch dims that do not broadcast
    T.assert_error(function() local _ = qlua.zeros(2, 3, 4):matmul(qlua.zeros(3, 4, 5)) end,
      "matmul", "2x3x4", "3x4x5")
    -- inner sizes in a batch
    T.assert_error(function() local _ = qlua.zeros(2, 3, 4):matmul(qlua.zeros(2, 5, 5)) end,
      "matmul", "2x3x4", "2x5x5")
  end)

  test("refuses integer dtypes, mixed dtypes and 0-d operands", function()
    T.assert_error(function() local _ = qlua.ones(2, 2, { dtype = "int64" }):matmul(qlua.ones(2, 2, { dtype = "int64" })) end,
      "matmul", "int64")
    T.assert_error(function() local _ = qlua.ones(2, 2, { dtype = "int32" }):matmul(qlua.ones(2, 2, { dtype = "int32" })) end,
      "matmul", "int32")
    T.assert_error(function() local _ = qlua.ones(2, 2):matmul(qlua.ones(2, 2, { dtype = "float64" })) end, "matmul")
    T.assert_error(function() local _ = qlua.tensor(2.0):matmul(qlua.ones(2)) end, "matmul")
    T.assert_error(function() local _ = qlua.ones(2):matmul(3) end, "matmul")
  end)
end)

-- ================================================== dot, outer, mv, bmm, addmm, einsum

------------------------------------------------------------------------ data

-- Random operand: { shape =, data = } (flat row-major) and the tensor in that layout.
local function operand(shape, dtype, layout, dev)
  local a = { shape = shape, data = T.random_list(T.numel(shape), dtype) }
  return a, T.make(a, dtype, layout or "contiguous", dev, shape)
end

local function pick_layout() return T.layouts[math.random(1, #T.layouts)] end

local function at(a, pos)  -- element of a flat array at a 1-based multi-index
  return a.data[T.linear(a.shape, pos)]
end

-- t has the shape and (within tol) the values of the flat array e.
local function check(t, e, dtype, what)
  assert.equal(dtype, t:dtype(), what .. ": dtype")
  T.assert_shape(t, e.shape, what)
  if #e.shape == 0 then
    T.assert_close(t, e.data[1], TOL[dtype], what)
  elseif #e.data > 0 then
    T.assert_close(t, T.unflatten(e.data, e.shape), TOL[dtype], what)
  end
end

------------------------------------------------------------------------ references

-- a (m x k) @ b (k x n) on flat arrays, float64 accumulation.
local function ref_mm(a, b)
  local m, k, n = a.shape[1], a.shape[2], b.shape[2]
  local out = {}
  for i = 1, m do
    for j = 1, n do
      local s = 0
      for l = 1, k do s = s + at(a, { i, l }) * at(b, { l, j }) end
      out[#out + 1] = s
    end
  end
  return { shape = { m, n }, data = out }
end

-- NumPy's einsum by brute force: every assignment of every letter, the product of the
-- operands' elements added into the output element the output letters name. "..." is
-- rewritten into letters not used by the spec; a size-1 dim broadcasts.
local function ref_einsum(spec, ops)
  spec = spec:gsub(" ", "")
  local lhs, rhs = spec:match("^(.-)%->(.*)$")
  if not lhs then lhs = spec end
  local terms = {}
  for term in (lhs .. ","):gmatch("([^,]*),") do terms[#terms + 1] = term end
  assert(#terms == #ops, "ref_einsum: operand count")
  local spare = {}
  for c in ("ZYXWVUTSRQPONMLK"):gmatch(".") do
    if not spec:find(c, 1, true) then spare[#spare + 1] = c end
  end
  local rank = 0
  for k, term in ipairs(terms) do
    if term:find("...", 1, true) then
      rank = math.max(rank, #ops[k].shape - (#term - 3))
    end
  end
  local ell = {}
  for j = 1, rank do ell[j] = spare[j] end
  local letters = {}  -- per operand: the letter of each dim
  for k, term in ipairs(terms) do
    local list = {}
    local r = #ops[k].shape - (#term - (term:find("...", 1, true) and 3 or 0))
    local i = 1
    while i <= #term do
      if term:sub(i, i + 2) == "..." then
        for j = rank - r + 1, rank do list[#list + 1] = ell[j] end
        i = i + 3
      else
        list[#list + 1] = term:sub(i, i)
        i = i + 1
      end
    end
    assert(#list == #ops[k].shape, "ref_einsum: dims of operand " .. k)
    letters[k] = list
  end
  local out_letters = {}
  if rhs then
    local i = 1
    while i <= #rhs do
      if rhs:sub(i, i + 2) == "..." then
        for j = 1, rank do out_letters[#out_letters + 1] = ell[j] end
        i = i + 3
      else
        out_letters[#out_letters + 1] = rhs:sub(i, i)
        i = i + 1
      end
    end
  else
    local count = {}
    for k = 1, #terms do
      for _, c in ipairs(letters[k]) do count[c] = (count[c] or 0) + 1 end
    end
    for j = 1, rank do out_letters[#out_letters + 1] = ell[j] end
    local once = {}
    for c, n in pairs(count) do
      local is_ell = false
      for j = 1, rank do is_ell = is_ell or ell[j] == c end
      if n == 1 and not is_ell then once[#once + 1] = c end
    end
    table.sort(once)  -- byte order: upper case before lower case, as NumPy
    for _, c in ipairs(once) do out_letters[#out_letters + 1] = c end
  end
  local size, all = {}, {}
  for k = 1, #terms do
    for d, c in ipairs(letters[k]) do
      local s = ops[k].shape[d]
      if size[c] == nil then all[#all + 1] = c; size[c] = s
      elseif size[c] == 1 then size[c] = s end
    end
  end
  local out_shape = {}
  for i, c in ipairs(out_letters) do out_shape[i] = size[c] end
  local out = {}
  for i = 1, T.numel(out_shape) do out[i] = 0 end
  local shape_all = {}
  for i, c in ipairs(all) do shape_all[i] = size[c] end
  local value, opos, qpos = {}, {}, {}
  T.each_index(shape_all, function(pos)
    for i, c in ipairs(all) do value[c] = pos[i] end
    local p = 1
    for k = 1, #ops do
      for d, c in ipairs(letters[k]) do
        qpos[d] = ops[k].shape[d] == 1 and 1 or value[c]
      end
      for d = #letters[k] + 1, #qpos do qpos[d] = nil end
      p = p * (#letters[k] == 0 and ops[k].data[1] or at(ops[k], qpos))
    end
    for i, c in ipairs(out_letters) do opos[i] = value[c] end
    local l = #out_shape == 0 and 1 or T.linear(out_shape, opos)
    out[l] = out[l] + p
  end)
  return { shape = out_shape, data = out }
end

------------------------------------------------------------------------ dot, outer, mv, bmm

describe("dot, outer, mv, bmm", function()
  both("dot of two 1-D tensors is a 0-d tensor, as matmul's", function(dev)
    for _, dtype in ipairs(T.float_dtypes) do
      for _, layout in ipairs(T.layouts) do
        local a, ta = operand({ 17 }, dtype, layout, dev)
        local b, tb = operand({ 17 }, dtype, pick_layout(), dev)
        local s = 0
        for i = 1, 17 do s = s + a.data[i] * b.data[i] end
        local r = ta:dot(tb)
        assert.equal(0, r:dim())
        check(r, { shape = {}, data = { s } }, dtype, "dot " .. dtype .. " " .. layout)
      end
    end
    local z = qlua.zeros(0, { device = dev }):dot(qlua.zeros(0, { device = dev }))
    assert.equal(0, z:item())
  end)

  both("outer of two 1-D tensors", function(dev)
    for _, dtype in ipairs(T.float_dtypes) do
      for _, layout in ipairs(T.layouts) do
        local a, ta = operand({ 7 }, dtype, layout, dev)
        local b, tb = operand({ 5 }, dtype, pick_layout(), dev)
        local out = {}
        for i = 1, 7 do for j = 1, 5 do out[#out + 1] = a.data[i] * b.data[j] end end
        check(ta:outer(tb), { shape = { 7, 5 }, data = out }, dtype, "outer " .. layout)
      end
    end
    T.assert_shape(qlua.zeros(0, { device = dev }):outer(qlua.zeros(3, { device = dev })), { 0, 3 })
    local big_a, tba = operand({ 130 }, "float64", "stepped", dev)
    local big_b, tbb = operand({ 129 }, "float64", "contiguous", dev)
    local out = {}
    for i = 1, 130 do for j = 1, 129 do out[#out + 1] = big_a.data[i] * big_b.data[j] end end
    check(tba:outer(tbb), { shape = { 130, 129 }, data = out }, "float64", "outer 130x129")
  end)

  both("mv: a matrix times a vector, any layouts, and K = 0", function(dev)
    for _, dtype in ipairs(T.float_dtypes) do
      for _, la in ipairs(T.layouts) do
        local a, ta = operand({ 6, 9 }, dtype, la, dev)
        local v, tv = operand({ 9 }, dtype, pick_layout(), dev)
        local e = ref_mm(a, { shape = { 9, 1 }, data = v.data })
        check(ta:mv(tv), { shape = { 6 }, data = e.data }, dtype, "mv " .. la)
      end
    end
    local z = qlua.ones(4, 0, { device = dev }):mv(qlua.ones(0, { device = dev }))
    T.assert_close(z, { 0, 0, 0, 0 }, 0)
  end)

  both("bmm: equal batch sizes, any layouts, empty batch and K = 0", function(dev)
    for _, dtype in ipairs(T.float_dtypes) do
      for _, la in ipairs(T.layouts) do
        local a, ta = operand({ 3, 4, 5 }, dtype, la, dev)
        local b, tb = operand({ 3, 5, 2 }, dtype, pick_layout(), dev)
        local out = {}
        for p = 1, 3 do
          for i = 1, 4 do
            for j = 1, 2 do
              local s = 0
              for l = 1, 5 do s = s + at(a, { p, i, l }) * at(b, { p, l, j }) end
              out[#out + 1] = s
            end
          end
        end
        check(ta:bmm(tb), { shape = { 3, 4, 2 }, data = out }, dtype, "bmm " .. la)
      end
    end
    local o = { device = dev }
    T.assert_shape(qlua.zeros(0, 2, 3, o):bmm(qlua.zeros(0, 3, 4, o)), { 0, 2, 4 })
    T.assert_close(qlua.ones(2, 2, 0, o):bmm(qlua.ones(2, 0, 3, o)), qlua.zeros(2, 2, 3), 0)
  end)

  both("dot, outer, mv and bmm name the op and the shapes", function(dev)
    local o = { device = dev }
    local function z(...) return qlua.zeros(...) end
    local function on(...) return z(...):to(dev) end
    T.assert_error(function() return on(3):dot(on(4)) end, "dot: sizes 3 and 4 differ")
    T.assert_error(function() return on(2, 3):dot(on(3)) end, "dot: expected two 1-D tensors, got shapes 2x3 and 3")
    T.assert_error(function() return on(2, 3):outer(on(3)) end, "outer: expected two 1-D tensors", "2x3")
    T.assert_error(function() return on(2, 3):mv(on(4)) end, "mv: shapes 2x3 and 4 do not match")
    T.assert_error(function() return on(2, 3):mv(on(3, 1)) end, "mv: expected a 2-D matrix and a 1-D vector", "2x3", "3x1")
    T.assert_error(function() return on(2, 3, 4):bmm(on(3, 4, 5)) end,
      "bmm: batch sizes 2 and 3 differ (shapes 2x3x4 and 3x4x5)")
    T.assert_error(function() return on(1, 3, 4):bmm(on(2, 4, 5)) end, "bmm: batch sizes 1 and 2 differ")
    T.assert_error(function() return on(2, 3, 4):bmm(on(2, 5, 5)) end, "bmm: shapes 2x3x4 and 2x5x5 do not match")
    T.assert_error(function() return on(3, 4):bmm(on(4, 5)) end, "bmm: expected two 3-D tensors, got shapes 3x4 and 4x5")
    for _, op in ipairs({ "dot", "outer" }) do
      T.assert_error(function() return qlua.ones(3, { dtype = "int64", device = dev })[op](
        qlua.ones(3, { dtype = "int64", device = dev }), qlua.ones(3, { dtype = "int64", device = dev })) end,
        op .. ": dtype int64 is not supported (float32, float64, float16 or bfloat16 only)")
      T.assert_error(function() return qlua.ones(3, o)[op](qlua.ones(3, o), qlua.ones(3, { dtype = "float64", device = dev })) end,
        op .. ": dtypes float32 and float64 differ")
      T.assert_error(function() return qlua.ones(3, o)[op](qlua.ones(3, o), 2) end, "qlua.Tensor expected")
    end
    T.assert_error(function() return qlua.ones(2, 2, { dtype = "int32", device = dev }):mv(qlua.ones(2, { dtype = "int32", device = dev })) end,
      "mv: dtype int32")
    T.assert_error(function() return qlua.tensor(1.5, o):dot(qlua.ones(1, o)) end, "dot", "0-d")
  end)
end)

------------------------------------------------------------------------ addmm

describe("addmm", function()
  -- beta * c + alpha * (a @ b) with c broadcast to m x n.
  local function ref_addmm(c, a, b, beta, alpha)
    local p = ref_mm(a, b)
    local m, n = p.shape[1], p.shape[2]
    local out = {}
    for i = 1, m do
      for j = 1, n do
        local cv = 0
        if beta ~= 0 then
          local cs = c.shape
          local pos = {}
          if #cs == 2 then pos = { cs[1] == 1 and 1 or i, cs[2] == 1 and 1 or j }
          elseif #cs == 1 then pos = { cs[1] == 1 and 1 or j } end
          cv = #cs == 0 and c.data[1] or at(c, pos)
        end
        out[#out + 1] = beta * cv + alpha * p.data[(i - 1) * n + j]
      end
    end
    return { shape = { m, n }, data = out }
  end

  both("beta * c + alpha * a @ b, c broadcast, any layouts", function(dev)
    local scales = { {}, { beta = 2, alpha = 0.5 }, { beta = 0.5, alpha = -2 }, { alpha = 0 }, { beta = 1, alpha = 1 } }
    for _, dtype in ipairs(T.float_dtypes) do
      for _, cshape in ipairs({ { 6, 4 }, { 4 }, { 1, 4 }, { 6, 1 }, { 1, 1 }, {} }) do
        for _, opts in ipairs(scales) do
          local a, ta = operand({ 6, 5 }, dtype, pick_layout(), dev)
          local b, tb = operand({ 5, 4 }, dtype, pick_layout(), dev)
          local c, tc = operand(cshape, dtype, #cshape > 0 and pick_layout() or "contiguous", dev)
          local e = ref_addmm(c, a, b, opts.beta or 1, opts.alpha or 1)
          local what = string.format("addmm %s c %s beta %s alpha %s", dtype, T.shape_str(cshape),
            tostring(opts.beta), tostring(opts.alpha))
          local arg = next(opts) and opts or nil
          check(qlua.addmm(tc, ta, tb, arg), e, dtype, what)
          check(tc:addmm(ta, tb, arg), e, dtype, what .. " (method)")
          T.assert_close(tc, #cshape == 0 and c.data[1] or T.unflatten(c.data, cshape), 0, what .. ": c changed")
        end
      end
    end
  end)

  both("beta = 0 ignores c, NaN and all", function(dev)
    for _, dtype in ipairs(T.float_dtypes) do
      local a, ta = operand({ 3, 2 }, dtype, "transposed", dev)
      local b, tb = operand({ 2, 4 }, dtype, "stepped", dev)
      local c = qlua.full({ 3, 4 }, 0 / 0, { dtype = dtype, device = dev })
      check(qlua.addmm(c, ta, tb, { beta = 0 }), ref_mm(a, b), dtype, "addmm beta 0")
      c:addmm_(ta, tb, { beta = 0, alpha = 3 })
      local e = ref_mm(a, b)
      for i = 1, #e.data do e.data[i] = 3 * e.data[i] end
      check(c, e, dtype, "addmm_ beta 0")
    end
  end)

  both("K = 0 gives beta * c; empty results", function(dev)
    for _, dtype in ipairs(T.float_dtypes) do
      local o = { dtype = dtype, device = dev }
      local c, tc = operand({ 3, 2 }, dtype, "transposed", dev)
      local e = {}
      for i = 1, 6 do e[i] = 2.5 * c.data[i] end
      check(qlua.addmm(tc, qlua.ones(3, 0, o), qlua.ones(0, 2, o), { beta = 2.5 }), { shape = { 3, 2 }, data = e }, dtype, "addmm K = 0")
      check(qlua.addmm(tc, qlua.ones(3, 0, o), qlua.ones(0, 2, o), { beta = 0 }), { shape = { 3, 2 }, data = { 0, 0, 0, 0, 0, 0 } }, dtype, "addmm K = 0 beta 0")
      T.assert_shape(qlua.addmm(qlua.ones(2, o), qlua.ones(0, 3, o), qlua.ones(3, 2, o)), { 0, 2 })
      local d = tc:clone()
      d:addmm_(qlua.ones(3, 0, o), qlua.ones(0, 2, o), { beta = 2.5 })
      check(d, { shape = { 3, 2 }, data = e }, dtype, "addmm_ K = 0")
    end
  end)

  both("addmm_ writes c in place: contiguous, views, and c among the operands", function(dev)
    for _, dtype in ipairs(T.float_dtypes) do
      for _, layout in ipairs(T.layouts) do
        local a, ta = operand({ 5, 3 }, dtype, pick_layout(), dev)
        local b, tb = operand({ 3, 4 }, dtype, pick_layout(), dev)
        local c, tc = operand({ 5, 4 }, dtype, layout, dev)
        local r = tc:addmm_(ta, tb, { beta = -1, alpha = 2 })
        assert.equal(rawequal(r, tc), true)
        check(tc, ref_addmm(c, a, b, -1, 2), dtype, "addmm_ " .. layout)
      end
      -- c is a and b too: the product reads the old c
      local c, tc = operand({ 4, 4 }, dtype, "transposed", dev)
      tc:addmm_(tc, tc, { beta = 0.5 })
      check(tc, ref_addmm(c, c, c, 0.5, 1), dtype, "addmm_ c, c, c")
      local c2, tc2 = operand({ 4, 4 }, dtype, "contiguous", dev)
      tc2:addmm_(tc2:t(), tc2)
      local ct = { shape = { 4, 4 }, data = {} }
      for i = 1, 4 do for j = 1, 4 do ct.data[#ct.data + 1] = at(c2, { j, i }) end end
      check(tc2, ref_addmm(c2, ct, c2, 1, 1), dtype, "addmm_ c, c:t(), c")
    end
  end)

  both("a larger addmm (the BLAS / cuBLAS path) with transposed operands", function(dev)
    for _, dtype in ipairs(T.float_dtypes) do
      local a, ta = operand({ 130, 70 }, dtype, "transposed", dev)
      local b, tb = operand({ 70, 129 }, dtype, "contiguous", dev)
      local c, tc = operand({ 129 }, dtype, "stepped", dev)
      check(qlua.addmm(tc, ta, tb, { beta = 0.25, alpha = 1.5 }), ref_addmm(c, a, b, 0.25, 1.5), dtype, "addmm 130x70x129")
      local d, td = operand({ 130, 129 }, dtype, "contiguous", dev)
      td:addmm_(ta, tb, { beta = 2, alpha = -1 })
      check(td, ref_addmm(d, a, b, 2, -1), dtype, "addmm_ 130x70x129")
    end
  end)

  both("addmm's errors name the op, the shapes and the options", function(dev)
    local o = { device = dev }
    local function on(...) return qlua.zeros(...):to(dev) end
    T.assert_error(function() return qlua.addmm(on(3, 4), on(2, 5), on(5, 4)) end,
      "addmm: input of shape 3x4 does not broadcast to the product's 2x4")
    T.assert_error(function() return qlua.addmm(on(5), on(2, 5), on(5, 4)) end, "addmm: input of shape 5", "2x4")
    T.assert_error(function() return qlua.addmm(on(2, 4), on(2, 5), on(4, 4)) end, "addmm: shapes 2x5 and 4x4 do not match")
    T.assert_error(function() return qlua.addmm(on(2, 4), on(2, 2, 5), on(5, 4)) end, "addmm: expected two 2-D matrices, got shapes 2x2x5 and 5x4")
    T.assert_error(function() return on(4):addmm_(on(1, 5), on(5, 4)) end,
      "addmm_: input of shape 4 is not the product's shape 1x4")
    T.assert_error(function() return on(1, 4):expand(3, 4):addmm_(on(3, 5), on(5, 4)) end,
      "addmm_: cannot write into an expanded tensor")
    T.assert_error(function() return qlua.addmm(qlua.zeros(2, 4, { dtype = "float64", device = dev }), on(2, 5), on(5, 4)) end,
      "addmm: input dtype float64 differs from the matrices' float32")
    T.assert_error(function() return qlua.addmm(on(2, 4), on(2, 5), on(5, 4), { gamma = 1 }) end,
      "addmm: unknown option 'gamma' (beta, alpha)")
    T.assert_error(function() return on(2, 4):addmm(on(2, 5), on(5, 4), { beta = "x" }) end,
      "addmm: opts.beta must be a number, got string")
    T.assert_error(function() return on(2, 4):addmm_(on(2, 5), on(5, 4), { alpha = true }) end,
      "addmm_: opts.alpha must be a number, got boolean")
    T.assert_error(function() return on(2, 4):addmm(on(2, 5), on(5, 4), 3) end, "table {beta =, alpha =} expected")
    T.assert_error(function() return qlua.addmm(on(2, 4), on(2, 5)) end, "qlua.Tensor expected")
    local i = qlua.ones(2, 2, { dtype = "int64", device = dev })
    T.assert_error(function() return qlua.addmm(i, i, i) end, "addmm: dtype int64 is not supported")
    T.assert_error(function() return qlua.addmm(on(2, 2), on(2, 2), on(2, 2), {}, 1) end, "addmm")
    assert.truthy(o)
  end)
end)

------------------------------------------------------------------------ einsum

describe("einsum", function()
  -- Each case: spec and operand shapes. Operands get random layouts.
  local CASES = {
    { "ij,jk->ik", { 4, 5 }, { 5, 3 } },
    { "ij,jk", { 4, 5 }, { 5, 3 } },                 -- implicit: ik
    { "bij,bjk->bik", { 3, 4, 5 }, { 3, 5, 2 } },
    { "bij,bkj->bik", { 2, 3, 4 }, { 2, 5, 4 } },
    { "ii->i", { 4, 4 } },
    { "ii", { 5, 5 } },                               -- the trace
    { "ij->ji", { 3, 5 } },
    { "ijk->kji", { 2, 3, 4 } },
    { "ij->", { 3, 4 } },
    { "ij->j", { 3, 4 } },
    { "ij->i", { 3, 4 } },
    { "i,i->", { 7 } , { 7 } },
    { "i,i", { 7 }, { 7 } },
    { "i,j->ij", { 4 }, { 3 } },
    { "i,j", { 4 }, { 3 } },
    { "ij,j->i", { 4, 6 }, { 6 } },
    { "ij,ij->ij", { 3, 4 }, { 3, 4 } },
    { "ij,ij->", { 3, 4 }, { 3, 4 } },
    { "ij,ji->", { 3, 4 }, { 4, 3 } },
    { "ba", { 3, 4 } },                               -- implicit: ab, a transpose
    { "Ab,bC->AC", { 2, 3 }, { 3, 4 } },
    { "aB,Bc", { 2, 3 }, { 3, 4 } },                  -- implicit: ac
    { "ijk,ikl->jl", { 2, 3, 4 }, { 2, 4, 5 } },
    { "ijk,jl->ikl", { 2, 3, 4 }, { 3, 5 } },
    { "bhqd,bhkd->bhqk", { 2, 2, 3, 4 }, { 2, 2, 5, 4 } },
    { "iij->j", { 3, 3, 4 } },
    { "iji->j", { 3, 4, 3 } },
    { "iij,jk->ik", { 3, 3, 4 }, { 4, 2 } },
    { "ij,jk,kl->il", { 2, 3 }, { 3, 4 }, { 4, 5 } },
    { "abc,cd,de->abe", { 2, 3, 4 }, { 4, 5 }, { 5, 2 } },
    { "i,i,i->", { 5 }, { 5 }, { 5 } },
    { "ij,k,jk->i", { 3, 4 }, { 5 }, { 4, 5 } },
    { "ik,jk->", { 2, 3 }, { 4, 3 } },                -- everything summed
    { "ijk,k->", { 2, 3, 4 }, { 4 } },
    { "...ij,...jk->...ik", { 2, 1, 3, 4 }, { 5, 4, 2 } },
    { "...ij,jk", { 2, 3, 4 }, { 4, 5 } },            -- implicit: ...ik
    { "...i->...", { 2, 3, 4 } },
    { "i...->...", { 4, 2, 3 } },
    { "ab...,b->a...", { 2, 3, 4, 5 }, { 3 } },
    { "...ii->...i", { 2, 3, 3 } },
    { "...ij->ij", { 2, 3, 4 } },                     -- '...' not in the output: summed
    { "...,...->...", { 3, 1 }, { 4 } },
    { ",i->i", {}, { 4 } },
    { "->", {} },
    { " i j , j k -> i k ", { 2, 3 }, { 3, 2 } },
  }

  both("matches the brute-force reference on every case, any layouts", function(dev)
    for _, dtype in ipairs(T.float_dtypes) do
      for _, case in ipairs(CASES) do
        local spec = case[1]
        local arrays, tensors = {}, {}
        for k = 2, #case do
          arrays[k - 1], tensors[k - 1] = operand(case[k], dtype, pick_layout(), dev)
        end
        local e = ref_einsum(spec, arrays)
        local what = string.format("einsum %q %s", spec, dtype)
        local r = qlua.einsum(spec, table.unpack(tensors))
        check(r, e, dtype, what)
        assert.equal(true, r:is_contiguous(), what .. ": contiguous")
        check(qlua.einsum(spec, tensors), e, dtype, what .. " (operands in a table)")
        for k = 1, #arrays do
          T.assert_close(tensors[k], #arrays[k].shape == 0 and arrays[k].data[1] or T.unflatten(arrays[k].data, arrays[k].shape), 0,
            what .. ": operand " .. k .. " changed")
        end
      end
    end
  end)

  both("agrees with matmul, bmm, dot, outer and the views it replaces", function(dev)
    local a, ta = operand({ 5, 6 }, "float64", "transposed", dev)
    local _, tb = operand({ 6, 4 }, "float64", "stepped", dev)
    T.assert_close(qlua.einsum("ij,jk->ik", ta, tb), ta:matmul(tb), 1e-12)
    local _, x = operand({ 3, 4, 5 }, "float64", "narrowed", dev)
    local _, y = operand({ 3, 5, 2 }, "float64", "transposed", dev)
    T.assert_close(qlua.einsum("bij,bjk->bik", x, y), x:bmm(y), 1e-12)
    T.assert_close(qlua.einsum("ij->ji", ta), ta:t():contiguous(), 0)
    local r = qlua.einsum("ij->ij", ta)
    r:fill_(0)  -- a new tensor, never a view of the operand
    T.assert_close(ta, T.unflatten(a.data, a.shape), 0)
    local d = qlua.einsum("ii->i", qlua.eye(4, { dtype = "float64", device = dev }) * 3)
    T.assert_close(d, { 3, 3, 3, 3 }, 0)
    d:fill_(1)
  end)

  both("expanded (stride 0) operands and broadcasting '...'", function(dev)
    for _, dtype in ipairs(T.float_dtypes) do
      local a, ta = operand({ 1, 4 }, dtype, "contiguous", dev)
      local b, tb = operand({ 4, 3 }, dtype, "transposed", dev)
      local ea = { shape = { 5, 4 }, data = {} }
      for _ = 1, 5 do for j = 1, 4 do ea.data[#ea.data + 1] = a.data[j] end end
      check(qlua.einsum("ij,jk->ik", ta:expand(5, 4), tb), ref_einsum("ij,jk->ik", { ea, b }), dtype, "expanded operand")
      local c, tc = operand({ 1, 3, 4 }, dtype, "stepped", dev)
      local d, td = operand({ 2, 5, 4, 2 }, dtype, "narrowed", dev)
      check(qlua.einsum("...ij,...jk->...ik", tc, td), ref_einsum("...ij,...jk->...ik", { c, d }), dtype, "broadcast ...")
    end
  end)

  both("empty shapes: K = 0 gives zeros, an empty dim an empty result", function(dev)
    local o = { dtype = "float64", device = dev }
    T.assert_close(qlua.einsum("ij,jk->ik", qlua.ones(3, 0, o), qlua.ones(0, 2, o)), { { 0, 0 }, { 0, 0 }, { 0, 0 } }, 0)
    T.assert_shape(qlua.einsum("ij,jk->ik", qlua.ones(0, 4, o), qlua.ones(4, 2, o)), { 0, 2 })
    T.assert_close(qlua.einsum("i->", qlua.ones(0, o)), 0, 0)
    T.assert_close(qlua.einsum("ij->j", qlua.ones(0, 3, o)), { 0, 0, 0 }, 0)
    T.assert_shape(qlua.einsum("ij->ji", qlua.ones(0, 3, o)), { 3, 0 })
    T.assert_close(qlua.einsum("i,i->", qlua.ones(0, o), qlua.ones(0, o)), 0, 0)
    T.assert_shape(qlua.einsum("bij,bjk->bik", qlua.ones(0, 2, 3, o), qlua.ones(0, 3, 4, o)), { 0, 2, 4 })
    T.assert_shape(qlua.einsum("...i,i->...", qlua.ones(0, 3, o), qlua.ones(3, o)), { 0 })
  end)

  both("errors name the spec and the problem", function(dev)
    local function on(...) return qlua.zeros(...):to(dev) end
    local a, b = on(2, 3), on(4, 5)
    T.assert_error(function() return qlua.einsum("ij,jk->ik", a, b) end,
      "einsum: 'ij,jk->ik': letter 'j' has sizes 3 and 4")
    T.assert_error(function() return qlua.einsum("ij,jk->ik", a) end,
      "einsum: 'ij,jk->ik': the spec has 2 operands, got 1 tensor")
    T.assert_error(function() return qlua.einsum("ij", a, b) end, "einsum: 'ij': the spec has 1 operand, got 2 tensors")
    T.assert_error(function() return qlua.einsum("ij#->i", a) end,
      "einsum: 'ij#->i': character '#' is not a letter, ',', '...' or '->'")
    T.assert_error(function() return qlua.einsum("i1", a) end, "character '1'")
    T.assert_error(function() return qlua.einsum("ij->k", a) end, "einsum: 'ij->k': output letter 'k' is in no operand")
    T.assert_error(function() return qlua.einsum("ij->ii", a) end, "einsum: 'ij->ii': output letter 'i' appears twice")
    T.assert_error(function() return qlua.einsum("ijk->i", a) end, "einsum: 'ijk->i': operand 1 has 2 dims but its subscripts name 3")
    T.assert_error(function() return qlua.einsum("i->i", a) end, "operand 1 has 2 dims but its subscripts name 1")
    T.assert_error(function() return qlua.einsum("...ijk->i", a) end, "subscripts name at least 3")
    T.assert_error(function() return qlua.einsum("ii->i", a) end, "einsum: 'ii->i': letter 'i' has sizes 2 and 3")
    T.assert_error(function() return qlua.einsum("...i,...i->...", on(2, 3), on(4, 3)) end,
      "einsum: '...i,...i->...': the '...' dims do not broadcast (sizes 2 and 4)")
    T.assert_error(function() return qlua.einsum("i.j", a) end, "a '.' that is not part of '...'")
    T.assert_error(function() return qlua.einsum("......", a) end, "'...' appears twice")
    T.assert_error(function() return qlua.einsum("ij->i->j", a) end, "'->' appears twice")
    T.assert_error(function() return qlua.einsum("ij-i", a) end, "a '-' that is not part of '->'")
    T.assert_error(function() return qlua.einsum("ij->i,j", a) end, "the output has a ','")
    T.assert_error(function() return qlua.einsum("ij", qlua.ones(2, 3, { dtype = "int64", device = dev })) end,
      "einsum: 'ij': operand 1: dtype int64 is not supported (a float dtype only)")
    T.assert_error(function() return qlua.einsum("ij,jk", a, qlua.zeros(3, 2, { dtype = "float64", device = dev })) end,
      "einsum: 'ij,jk': operands 1 and 2 have dtypes float32 and float64")
    T.assert_error(function() return qlua.einsum("ij", 3) end, "qlua.Tensor expected")
    T.assert_error(function() return qlua.einsum("ij") end, "einsum: takes 1 to 32 operands, got 0")
    T.assert_error(function() return qlua.einsum("ij", {}) end, "einsum: takes 1 to 32 operands, got 0")
    T.assert_error(function() return qlua.einsum("ij", { a, 2 }) end, "einsum: operand 2 is a number (qlua.Tensor expected)")
    T.assert_error(function() return qlua.einsum("ij", { a }, a) end, "einsum")
    T.assert_error(function() return qlua.einsum(nil, a) end, "string expected")
    local long = string.rep("i", 40) .. "->"
    T.assert_error(function() return qlua.einsum(long, a) end, "more than 16 subscripts")
  end)
end)

------------------------------------------------------------------------ GPU parity

describe("products on the GPU agree with the CPU", function()
  local TOLG = { float32 = 1e-5, float64 = 1e-12 }
  gtest("dot, outer, mv, bmm, addmm, einsum: the same numbers on both devices", function()
    for _, dtype in ipairs(T.float_dtypes) do
      local function pair(shape, layout)
        local a = { shape = shape, data = T.random_list(T.numel(shape), dtype) }
        return T.make(a, dtype, layout, "cpu", shape), T.make(a, dtype, layout, "gpu", shape)
      end
      local v1, g1 = pair({ 300 }, "stepped")
      local v2, g2 = pair({ 300 }, "contiguous")
      T.assert_close(g1:dot(g2):cpu(), v1:dot(v2), TOLG[dtype], "dot")
      T.assert_close(g1:outer(g2):cpu(), v1:outer(v2), TOLG[dtype], "outer")
      local m, gm = pair({ 200, 300 }, "transposed")
      T.assert_close(gm:mv(g2):cpu(), m:mv(v2), TOLG[dtype], "mv")
      local x, gx = pair({ 4, 150, 140 }, "narrowed")
      local y, gy = pair({ 4, 140, 130 }, "transposed")
      T.assert_close(gx:bmm(gy):cpu(), x:bmm(y), TOLG[dtype], "bmm")
      local c, gc = pair({ 130 }, "stepped")
      local p, gp = pair({ 150, 140 }, "contiguous")
      local q, gq = pair({ 140, 130 }, "transposed")
      local opts = { beta = 0.75, alpha = -1.25 }
      T.assert_close(qlua.addmm(gc, gp, gq, opts):cpu(), qlua.addmm(c, p, q, opts), TOLG[dtype], "addmm")
      local d, gd = pair({ 150, 130 }, "transposed")
      d:addmm_(p, q, opts)
      gd:addmm_(gp, gq, opts)
      T.assert_close(gd:cpu(), d, TOLG[dtype], "addmm_ into a transposed c")
      T.assert_close(qlua.einsum("bij,bjk->bik", gx, gy):cpu(), qlua.einsum("bij,bjk->bik", x, y), TOLG[dtype], "einsum bmm")
      T.assert_close(qlua.einsum("bij,bkj->ik", gx, gx):cpu(), qlua.einsum("bij,bkj->ik", x, x), TOLG[dtype], "einsum contraction")
      T.assert_close(qlua.einsum("ii->i", gm:narrow(2, 1, 200)):cpu(), qlua.einsum("ii->i", m:narrow(2, 1, 200)), 0, "einsum diagonal")
    end
  end)
end)
