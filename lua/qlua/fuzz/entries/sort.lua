-- qlua.fuzz.entries.sort — the fuzzer's entries for sorting and selection: sort, argsort,
-- topk, kthvalue, median, unique, bincount, histc, qlua.searchsorted.

return function(ctx)
  local as_integer, list_str, R, same_list = ctx.as_integer, ctx.list_str, ctx.R, ctx.same_list
  local entry, geom, pool_pick, tdevice = ctx.entry, ctx.geom, ctx.pool_pick, ctx.tdevice
  local tdtype = ctx.tdtype
  local tensor_problem = ctx.tensor_problem
  local DTYPES, g_dim, g_junk, g_number = ctx.DTYPES, ctx.g_dim, ctx.g_junk, ctx.g_number
  local make_tensor_shaped = ctx.make_tensor_shaped

  -- ---- sorting and selection: a dim (or nil) and flags, sometimes junk
  local function g_flag() return R:pick({ true, false, nil, 1 }) end
  local function sort_expect(shape, a, res)
    if res.n ~= 2 then return "sort returned " .. res.n .. " values" end
    for k = 1, 2 do
      local p = tensor_problem(res[k])
      if p then return p end
    end
    if tdtype(res[2]) ~= "int64" then return "sort indices are " .. tostring(tdtype(res[2])) end
    if not same_list(geom(res[1]), shape) then return "sort gave shape " .. list_str(geom(res[1])) end
  end
  entry { name = "sort", kind = "method", ret = "any", weight = 1,
          gen = function(a, shape) a.n = 3; a[2] = R:chance(0.7) and g_dim(shape) or nil; a[3] = g_flag() end,
          expect = sort_expect }
  entry { name = "argsort", kind = "method", ret = "tensor", weight = 1,
          gen = function(a, shape) a.n = 3; a[2] = R:chance(0.7) and g_dim(shape) or nil; a[3] = g_flag() end,
          expect = function(shape, _, res)
            if tdtype(res[1]) ~= "int64" then return "argsort gave " .. tostring(tdtype(res[1])) end
            if not same_list(geom(res[1]), shape) then return "argsort gave shape " .. list_str(geom(res[1])) end
          end }
  entry { name = "topk", kind = "method", ret = "any", weight = 1,
          gen = function(a, shape)
            a.n = 5
            a[2] = R:int(-1, 6)
            a[3] = R:chance(0.7) and g_dim(shape) or nil
            a[4], a[5] = g_flag(), g_flag()
          end,
          expect = function(shape, a, res)
            if res.n ~= 2 then return "topk returned " .. res.n .. " values" end
            local want = { table.unpack(shape) }
            local d = as_integer(a[2]) or #shape
            if #want > 0 and want[d] then want[d] = a[1] end
            if #shape > 0 and not same_list(geom(res[1]), want) then
              return "topk gave shape " .. list_str(geom(res[1])) .. ", expected " .. list_str(want)
            end
          end }
  -- (a[1] is self: the arguments start at a[2])
  entry { name = "kthvalue", kind = "method", ret = "any", weight = 1,
          gen = function(a, shape)
            a.n = 4; a[2] = R:int(0, 6); a[3] = R:chance(0.7) and g_dim(shape) or nil
            a[4] = R:pick({ nil, true, false, 1 })
          end }
  entry { name = "median", kind = "method", ret = "any", weight = 1,
          gen = function(a, shape)
            if R:chance(0.6) then a.n = 2; a[2] = g_dim(shape) end
            if R:chance(0.4) then a.n = 3; a[3] = R:pick({ true, false, "yes" }) end
          end }
  entry { name = "unique", kind = "method", ret = "any", weight = 1,
          gen = function(a)
            local r = R:float()
            if r < 0.7 then a.n = 2; a[2] = { return_inverse = g_flag(), return_counts = g_flag() }
            elseif r < 0.8 then a.n = 2; a[2] = g_junk() end
          end }
  entry { name = "bincount", kind = "method", ret = "any", weight = 1,
          gen = function(a, shape, self)
            local r = R:float()
            if r < 0.3 then a.n = 2; a[2] = R:int(-1, 9)
            elseif r < 0.6 then
              a.n = 3
              a[2] = make_tensor_shaped({ shape[1] or 1 }, R:pick(DTYPES), tdevice(self))
              a[3] = R:chance(0.5) and R:int(-1, 9) or nil
            end
          end }
  entry { name = "histc", kind = "method", ret = "any", weight = 1,
          gen = function(a)
            a.n = 4
            a[2] = R:chance(0.8) and R:int(-1, 20) or nil
            a[3] = R:chance(0.5) and g_number() or nil
            a[4] = R:chance(0.5) and g_number() or nil
          end }
  entry { name = "searchsorted", kind = "module", ret = "tensor", weight = 1,
          gen = function(a)
            a.n = 3
            a[1] = pool_pick()
            a[2] = R:chance(0.8) and pool_pick() or g_number()
            a[3] = g_flag()
          end }
end
