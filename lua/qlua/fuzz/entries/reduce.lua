-- qlua.fuzz.entries.reduce — the fuzzer's entries for reductions: sum ... aminmax with dims
-- and keepdim, var, std, norm, logsumexp.

return function(ctx)
  local as_integer, list_str, NaN, R = ctx.as_integer, ctx.list_str, ctx.NaN, ctx.R
  local same_list = ctx.same_list
  local entry, geom, tdtype = ctx.entry, ctx.geom, ctx.tdtype
  local is_element, tensor_problem = ctx.is_element, ctx.tensor_problem
  local g_dim = ctx.g_dim

  -- ---- reductions
  -- keepdim, dim lists, and prod, amax, amin, aminmax, var, std, norm, logsumexp.
  -- A dims argument is nil, a dim, or a list (sometimes with repeats or bad entries).
  local function g_dims(shape, many)
    if R:chance(0.25) then return nil end
    if not many or R:chance(0.4) then return g_dim(shape) end
    local l = {}
    for i = 1, R:int(0, #shape + 1) do l[i] = R:chance(0.9) and R:int(1, math.max(#shape, 1)) or g_dim(shape) end
    return l
  end
  local function g_keepdim() return R:chance(0.9) and R:chance(0.5) or R:pick({ 1, "yes" }) end
  -- The shape a reduction over dims gives (nil when the dims are not a valid set).
  local function reduced_shape(shape, dims, keepdim)
    local set = {}
    if dims == nil then for d = 1, #shape do set[d] = true end
    else
      local list = type(dims) == "table" and dims or { dims }
      for _, d in ipairs(list) do
        d = as_integer(d)
        if not d or d < 1 or d > #shape or set[d] then return nil end
        set[d] = true
      end
    end
    local s = {}
    for d = 1, #shape do
      if not set[d] then s[#s + 1] = shape[d] elseif keepdim then s[#s + 1] = 1 end
    end
    return s
  end
  local function reduction_expect(dims_at, keep_at, count)
    return function(shape, a, res)
      local dims, keepdim = a[dims_at], keep_at and a[keep_at]
      if type(keepdim) == "table" then keepdim = keepdim.keepdim end
      keepdim = keepdim == true
      if dims == nil and not keepdim then
        for i = 1, count do
          if not is_element(res[i]) then return "expected a number, got " .. type(res[i]) end
        end
        return nil
      end
      for i = 1, count do
        local p = tensor_problem(res[i])
        if p then return p end
        local want = reduced_shape(shape, dims, keepdim)
        if want and not same_list(geom(res[i]), want) then
          return "result shape " .. list_str(geom(res[i])) .. ", expected " .. list_str(want)
        end
      end
    end
  end
  for _, op in ipairs({ "sum", "mean", "max", "min", "argmax", "argmin", "amax", "amin", "prod",
                        "aminmax" }) do
    local many = op == "sum" or op == "mean" or op == "amax" or op == "amin"
    local shape_ok = reduction_expect(1, 2, op == "aminmax" and 2 or 1)
    entry { name = op, kind = "method", ret = "any", weight = 1,
            gen = function(a, shape)
              if R:chance(0.75) then a.n = 2; a[2] = g_dims(shape, many) end
              if R:chance(0.4) then a.n = 3; a[3] = g_keepdim() end
            end,
            expect = function(shape, a, res)
              if a[1] == nil and a[2] ~= true then
                if (op == "argmax" or op == "argmin") and math.type(res[1]) ~= "integer" then
                  return "argmax/argmin gave a float"
                end
              end
              local p = shape_ok(shape, a, res)
              if p then return p end
              if (op == "max" or op == "min") and a[1] ~= nil then
                if res.n ~= 2 then return op .. "(dim) returned " .. res.n .. " values" end
                local p2 = tensor_problem(res[2])
                if p2 then return "indices: " .. p2 end
                if tdtype(res[2]) ~= "int64" then return "indices are " .. tostring(tdtype(res[2])) end
              end
            end }
  end
  for _, op in ipairs({ "var", "std" }) do
    entry { name = op, kind = "method", ret = "any", weight = 1,
            gen = function(a, shape)
              a.n = 3; a[2] = g_dims(shape, true)
              a[3] = R:chance(0.2) and nil or R:pick({ true, false, 0, 1, 2.5, 1e9, -1, NaN, "x",
                              { correction = R:pick({ 0, 1, 3 }), keepdim = R:chance(0.5) } })
            end,
            expect = reduction_expect(1, 2, 1) }
  end
  entry { name = "norm", kind = "method", ret = "any", weight = 1,
          gen = function(a, shape)
            a.n = 4
            a[2] = R:chance(0.2) and nil or R:pick({ 2, 1, 0, 3, 0.5, math.huge, -math.huge, -1, NaN })
            a[3] = g_dims(shape, true); a[4] = R:chance(0.5) and g_keepdim() or nil
          end,
          expect = reduction_expect(2, 3, 1) }
  entry { name = "logsumexp", kind = "method", ret = "any", weight = 1,
          gen = function(a, shape)
            a.n = 3; a[2] = R:chance(0.95) and g_dims(shape, true) or nil
            a[3] = R:chance(0.5) and g_keepdim() or nil
          end,
          expect = function(shape, a, res)
            if a[1] == nil then return "logsumexp without dim returned" end
            return reduction_expect(1, 2, 1)(shape, a, res)
          end }
end
