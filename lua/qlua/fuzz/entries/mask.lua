-- qlua.fuzz.entries.mask — the fuzzer's entries for masks: masked_fill(_), masked_select,
-- nonzero, any, all, count_nonzero.

return function(ctx)
  local as_integer, list_str, R, same_list = ctx.as_integer, ctx.list_str, ctx.R, ctx.same_list
  local entry, geom, tdevice, tdtype = ctx.entry, ctx.geom, ctx.tdevice, ctx.tdtype
  local binary_expect, removed, tensor_problem = ctx.binary_expect, ctx.removed, ctx.tensor_problem
  local DTYPES, g_dim, g_junk, g_like = ctx.DTYPES, ctx.g_dim, ctx.g_junk, ctx.g_like
  local g_number, make_tensor_shaped = ctx.g_number, ctx.make_tensor_shaped

  -- ---- masks: a mask broadcastable to self (g_like), or junk
  local function g_fill_value(a, self)
    a.n = a.n + 1
    local r = R:float()
    if r < 0.55 then a[a.n] = g_number()
    elseif r < 0.7 then a[a.n] = R:chance(0.5)
    elseif r < 0.9 then a[a.n] = make_tensor_shaped({}, R:pick(DTYPES), tdevice(self))
    else a[a.n] = g_junk() end
  end
  entry { name = "masked_fill_", kind = "method", ret = "self", mutates = true, weight = 2,
          gen = function(a, shape, self) a.n = 1; g_like(a, shape, self); g_fill_value(a, self) end }
  entry { name = "masked_fill", kind = "method", ret = "tensor", weight = 2, expect = binary_expect,
          gen = function(a, shape, self) a.n = 1; g_like(a, shape, self); g_fill_value(a, self) end }
  entry { name = "masked_select", kind = "method", ret = "tensor", weight = 2,
          gen = function(a, shape, self) a.n = 1; g_like(a, shape, self) end,
          expect = function(_, _, res)
            local got = geom(res[1])
            if got and #got ~= 1 then return "masked_select gave shape " .. list_str(got) end
          end }
  entry { name = "nonzero", kind = "method", ret = "tensor", gen = function() end,
          expect = function(shape, _, res)
            local got = geom(res[1])
            if got and (#got ~= 2 or got[2] ~= #shape) then
              return "nonzero of shape " .. list_str(shape) .. " gave " .. list_str(got)
            end
            if tdtype(res[1]) ~= "int64" then return "nonzero gave " .. tostring(tdtype(res[1])) end
          end }
  for _, op in ipairs({ "any", "all", "count_nonzero" }) do
    entry { name = op, kind = "method", ret = "any",
            gen = function(a, shape)
              if R:chance(0.6) then a.n = 2; a[2] = g_dim(shape) end
              if R:chance(0.3) then a.n = 3; a[3] = R:pick({ true, false, 0 }) end   -- keepdim
            end,
            expect = function(shape, a, res)
              local want = op == "count_nonzero" and "int64" or "bool"
              if a[1] == nil then
                local ok = op == "count_nonzero" and math.type(res[1]) == "integer"
                           or op ~= "count_nonzero" and type(res[1]) == "boolean"
                if not ok then return op .. "() gave a " .. type(res[1]) end
                return nil
              end
              local p = tensor_problem(res[1])
              if p then return p end
              if tdtype(res[1]) ~= want then return op .. "(dim) gave " .. tostring(tdtype(res[1])) end
              local d = as_integer(a[1])
              local want_shape = d and shape[d] and removed(shape, d)
              if want_shape and a[2] == true then
                want_shape = { table.unpack(shape) }; want_shape[d] = 1
              end
              if want_shape and not same_list(geom(res[1]), want_shape) then
                return "result shape " .. list_str(geom(res[1])) .. " for dim " .. d ..
                  (a[2] == true and " with keepdim" or "")
              end
            end }
  end
end
