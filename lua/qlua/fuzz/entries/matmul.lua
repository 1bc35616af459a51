-- qlua.fuzz.entries.matmul — the fuzzer's entries for products: t:matmul, dot, outer, mv,
-- bmm, addmm, addmm_ (and free); the generators qlua.matmul and qlua.addmm share are
-- exported for entries/functions.lua.

return function(ctx)
  local list_str, R, same_list = ctx.list_str, ctx.R, ctx.same_list
  local entry, geom, tdevice, tdtype = ctx.entry, ctx.geom, ctx.tdevice, ctx.tdtype
  local expect_shape = ctx.expect_shape
  local DTYPES, FLOAT_SET, g_junk, g_number = ctx.DTYPES, ctx.FLOAT_SET, ctx.g_junk, ctx.g_number
  local g_shape, make_tensor_shaped = ctx.g_shape, ctx.make_tensor_shaped

  -- ---- products
  local function matmul_shape(sa, sb)
    if #sa == 0 or #sb == 0 then return nil end
    if #sa == 1 and #sb == 1 then return sa[1] == sb[1] and {} or nil end
    if #sa == 2 and #sb == 1 then return sa[2] == sb[1] and { sa[1] } or nil end
    if #sa == 1 and #sb == 2 then return sa[1] == sb[1] and { sb[2] } or nil end
    if #sa == 2 and #sb == 2 then return sa[2] == sb[1] and { sa[1], sb[2] } or nil end
    return nil  -- batched: not checked here
  end
  local function g_matmul_other(a, shape, self)
    local dt = tdtype(self)
    if not FLOAT_SET[dt] then dt = "float32" end
    if R:chance(0.2) then dt = R:pick(DTYPES) end
    local k = shape[#shape] or 2
    local s
    local r = R:float()
    if r < 0.3 then s = { k }
    elseif r < 0.6 then s = { k, R:int(0, 5) }
    elseif r < 0.8 and #shape >= 2 then
      s = { table.unpack(shape, 1, #shape - 2) }
      for i = 1, #s do if R:chance(0.3) then s[i] = 1 end end
      s[#s + 1] = k
      s[#s + 1] = R:int(1, 4)
    else s = g_shape(64) end
    a.n = a.n + 1
    a[a.n] = make_tensor_shaped(s, dt, tdevice(self))
  end
  local function matmul_expect(sa, b, res)
    local sb = geom(b)
    local got = geom(res[1])
    if not (sb and got) then return nil end
    local want = matmul_shape(sa, sb)
    if want and not same_list(got, want) then
      return "matmul of " .. list_str(sa) .. " and " .. list_str(sb) .. " gave " .. list_str(got)
    end
  end
  entry { name = "matmul", kind = "method", ret = "tensor", weight = 2, gen = g_matmul_other,
          expect = function(shape, a, res) return matmul_expect(shape, a[1], res) end }
  -- ---- dot, outer, mv, bmm, addmm: operands of fitting shapes most of the time, a float
  -- dtype mostly (integers must be refused), sometimes a shape that cannot fit
  local function g_float_of(self)
    local dt = tdtype(self)
    if not FLOAT_SET[dt] then dt = "float32" end
    if R:chance(0.15) then dt = R:pick(DTYPES) end
    return dt
  end
  local function g_product_operand(a, s, self)
    if R:chance(0.15) then s = g_shape(64) end
    a.n = a.n + 1
    a[a.n] = make_tensor_shaped(s, g_float_of(self), tdevice(self))
  end
  local function g_scales()
    local r = R:float()
    if r < 0.5 then return nil end
    if r < 0.9 then return { beta = R:chance(0.3) and 0 or g_number(), alpha = g_number() } end
    return R:chance(0.5) and { gamma = 1 } or g_junk()
  end
  entry { name = "dot", kind = "method", ret = "tensor", weight = 1,
          gen = function(a, shape, self) g_product_operand(a, { shape[1] or 2 }, self) end,
          expect = expect_shape(function(shape, a)
            local sb = geom(a[1])
            if #shape == 1 and sb and #sb == 1 and sb[1] == shape[1] then return {} end
          end) }
  entry { name = "outer", kind = "method", ret = "tensor", weight = 1,
          gen = function(a, _, self) g_product_operand(a, { R:int(0, 5) }, self) end,
          expect = expect_shape(function(shape, a)
            local sb = geom(a[1])
            if #shape == 1 and sb and #sb == 1 then return { shape[1], sb[1] } end
          end) }
  entry { name = "mv", kind = "method", ret = "tensor", weight = 1,
          gen = function(a, shape, self) g_product_operand(a, { shape[#shape] or 2 }, self) end,
          expect = expect_shape(function(shape, a)
            local sb = geom(a[1])
            if #shape == 2 and sb and #sb == 1 and sb[1] == shape[2] then return { shape[1] } end
          end) }
  entry { name = "bmm", kind = "method", ret = "tensor", weight = 1,
          gen = function(a, shape, self)
            g_product_operand(a, { shape[1] or 1, shape[3] or shape[2] or 2, R:int(0, 4) }, self)
          end,
          expect = expect_shape(function(shape, a)
            local sb = geom(a[1])
            if #shape == 3 and sb and #sb == 3 and sb[1] == shape[1] and sb[2] == shape[3] then
              return { shape[1], shape[2], sb[3] }
            end
          end) }
  -- addmm's c is self (the method) or the first argument; a and b fit c's last two dims
  local function g_addmm_operands(a, cshape, self)
    local m = cshape[#cshape - 1] or R:int(1, 4)
    local n = cshape[#cshape] or R:int(1, 4)
    if R:chance(0.3) then m = 1 end
    local k = R:int(0, 5)
    g_product_operand(a, { m, k }, self)
    g_product_operand(a, { k, n }, self)
    local opts = g_scales()
    if opts ~= nil then a.n = a.n + 1; a[a.n] = opts end
  end
  entry { name = "addmm", kind = "method", ret = "tensor", weight = 1, gen = g_addmm_operands }
  entry { name = "addmm_", kind = "method", ret = "self", mutates = true, weight = 1,
          gen = g_addmm_operands }
  -- (free is made here, after the products, as it always was: the order counts)
  entry { name = "free", kind = "method", gen = function() end, ret = "none", mutates = true }

  ctx.g_matmul_other, ctx.matmul_expect = g_matmul_other, matmul_expect
  ctx.g_addmm_operands = g_addmm_operands
end
