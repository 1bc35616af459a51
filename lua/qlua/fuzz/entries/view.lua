-- qlua.fuzz.entries.view — the fuzzer's entries for views: view, reshape, narrow, select,
-- transpose, t, permute, expand, contiguous, clone.

return function(ctx)
  local as_integer, list_str, NaN, product = ctx.as_integer, ctx.list_str, ctx.NaN, ctx.product
  local R, same_list = ctx.R, ctx.same_list
  local entry, geom = ctx.entry, ctx.geom
  local expect_shape, removed = ctx.expect_shape, ctx.removed
  local g_dim, g_pos, g_shape, shape_args = ctx.g_dim, ctx.g_pos, ctx.g_shape, ctx.shape_args

  -- ---- views
  local function factor_shape(numel)
    local shape = {}
    if numel == 0 then
      local nd = R:int(1, 3)
      for i = 1, nd do shape[i] = R:int(0, 3) end
      shape[R:int(1, nd)] = 0
      return shape
    end
    local rest = numel
    while rest > 1 and #shape < 5 do
      local divisors = {}
      for d = 2, math.min(rest, 64) do if rest % d == 0 then divisors[#divisors + 1] = d end end
      if #divisors == 0 then break end
      local d = R:pick(divisors)
      shape[#shape + 1] = d
      rest = rest // d
    end
    if rest > 1 then shape[#shape + 1] = rest end
    if R:chance(0.3) then table.insert(shape, R:int(1, #shape + 1), 1) end
    if #shape > 0 and R:chance(0.3) then shape[R:int(1, #shape)] = -1 end
    return shape
  end
  local function g_viewshape(a, shape)
    local s = factor_shape(math.tointeger(product(shape)) or 1)
    if R:chance(0.15) then s = g_shape() end
    if R:chance(0.05) then s = R:pick({ { -1, -1 }, { 1 << 50, 1 << 50 }, { math.maxinteger, 2 },
                                       { 0, -1 }, { -2 } }) end
    shape_args(s, a)
  end
  local function numel_expect(shape, _, res)
    local got = geom(res[1])
    if got and product(got) ~= product(shape) then
      return "view of " .. list_str(shape) .. " has shape " .. list_str(got)
    end
  end
  entry { name = "view", kind = "method", gen = g_viewshape, ret = "tensor", shares = true,
          expect = numel_expect, weight = 2 }
  entry { name = "reshape", kind = "method", gen = g_viewshape, ret = "tensor", shares = true,
          expect = numel_expect, weight = 2 }
  entry { name = "narrow", kind = "method", ret = "tensor", shares = true, weight = 2,
          gen = function(a, shape)
            local d = g_dim(shape)
            local size = shape[math.tointeger(d) or 0] or 3
            local start = R:chance(0.9) and R:int(1, size + 1) or g_pos(size)
            local len = R:chance(0.9) and R:int(0, math.max(0, size - (math.tointeger(start) or 1) + 1))
                        or R:pick({ -1, size + 1, math.maxinteger, 0.5, NaN })
            a.n = 4; a[2], a[3], a[4] = d, start, len
          end,
          expect = expect_shape(function(shape, a)
            local d, len = as_integer(a[1]), as_integer(a[3])
            if not (d and len and shape[d]) then return nil end
            local s = { table.unpack(shape) }
            s[d] = len
            return s
          end) }
  entry { name = "select", kind = "method", ret = "tensor", shares = true, weight = 2,
          gen = function(a, shape)
            local d = g_dim(shape)
            a.n = 3; a[2], a[3] = d, g_pos(shape[math.tointeger(d) or 0] or 2)
          end,
          expect = expect_shape(function(shape, a)
            local d = as_integer(a[1])
            if not (d and shape[d]) then return nil end
            return removed(shape, d)
          end) }
  entry { name = "transpose", kind = "method", ret = "tensor", shares = true,
          gen = function(a, shape) a.n = 3; a[2], a[3] = g_dim(shape), g_dim(shape) end,
          expect = expect_shape(function(shape, a)
            local d1, d2 = as_integer(a[1]), as_integer(a[2])
            if not (d1 and d2 and shape[d1] and shape[d2]) then return nil end
            local s = { table.unpack(shape) }
            s[d1], s[d2] = s[d2], s[d1]
            return s
          end) }
  entry { name = "t", kind = "method", gen = function() end, ret = "tensor", shares = true,
          expect = expect_shape(function(shape)
            if #shape < 2 then return shape end
            return { shape[2], shape[1] }
          end) }
  entry { name = "permute", kind = "method", ret = "tensor", shares = true,
          gen = function(a, shape)
            local perm = {}
            for i = 1, #shape do perm[i] = i end
            for i = #perm, 2, -1 do local j = R:int(1, i); perm[i], perm[j] = perm[j], perm[i] end
            if R:chance(0.15) and #perm > 0 then perm[R:int(1, #perm)] = R:pick({ 0, #perm + 1, 1, -1 }) end
            if R:chance(0.05) then perm[#perm + 1] = #perm + 1 end
            if #perm == 0 and R:chance(0.5) then a.n = 1; return end
            shape_args(perm, a)
          end,
          expect = expect_shape(function(shape, a)
            local perm = type(a[1]) == "table" and a[1] or a
            local s = {}
            for i = 1, #shape do
              local p = as_integer(rawget(perm, i))
              if not p or not shape[p] then return nil end
              s[i] = shape[p]
            end
            return s
          end) }
  entry { name = "expand", kind = "method", ret = "tensor", shares = true,
          gen = function(a, shape)
            local s = {}
            local extra = R:weighted({ { 6, 0 }, { 3, 1 }, { 1, 2 } })
            for i = 1, extra do s[i] = R:int(0, 4) end
            for i = 1, #shape do
              local v = shape[i]
              if v == 1 and R:chance(0.6) then v = R:int(0, 5)
              elseif R:chance(0.2) then v = -1 end
              s[#s + 1] = v
            end
            if R:chance(0.08) then
              s = R:pick({ { 1 << 62, 1 << 62 }, { math.maxinteger }, { 1 << 40, 1 << 40 },
                           { 1 << 31, 1 << 31, 1 << 31 }, { -1 }, { -2 }, { 1 << 50 } })
              if #shape > 0 then table.insert(s, 1, 1) end
              for i = 1, #shape do s[#s + 1] = shape[i] end
            end
            shape_args(s, a)
          end,
          expect = expect_shape(function(shape, a)
            local req = type(a[1]) == "table" and a[1] or a
            local s = {}
            local n = type(a[1]) == "table" and rawlen(req) or 0
            if type(a[1]) ~= "table" then
              n = 0
              while n < a.n and type(a[n + 1]) == "number" do n = n + 1 end
            end
            for i = 1, n do
              local v = as_integer(rawget(req, i))
              if not v then return nil end
              if v == -1 then v = shape[i - (n - #shape)] end
              if not v then return nil end
              s[i] = v
            end
            return s
          end) }
  local function contiguous_expect(shape, _, res)
    local got = geom(res[1])
    if got and not same_list(got, shape) then return "shape changed to " .. list_str(got) end
    if got and res[1]:is_contiguous() ~= true then return "result is not contiguous" end
  end
  entry { name = "contiguous", kind = "method", gen = function() end, ret = "tensor",
          shares = true, expect = contiguous_expect }
  entry { name = "clone", kind = "method", gen = function() end, ret = "tensor",
          expect = contiguous_expect }
end
