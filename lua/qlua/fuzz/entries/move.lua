-- qlua.fuzz.entries.move — the fuzzer's entries for moving between devices and dtypes (gpu,
-- cpu, to) and copy_.

return function(ctx)
  local R, same_list = ctx.R, ctx.same_list
  local entry, geom, tdtype = ctx.entry, ctx.geom, ctx.tdtype
  local DTYPE_SET, same_shape_expect = ctx.DTYPE_SET, ctx.same_shape_expect
  local BAD_NAMES, DEVICES, DTYPES, g_like = ctx.BAD_NAMES, ctx.DEVICES, ctx.DTYPES, ctx.g_like
  local g_opts = ctx.g_opts

  -- ---- moving
  entry { name = "gpu", kind = "method", ret = "tensor", shares = true, expect = same_shape_expect,
          gen = function(a) if R:chance(0.5) then a.n = 2; a[2] = R:pick({ 0, 1, -1, 99, 0.5, 2 ^ 31 }) end end }
  entry { name = "cpu", kind = "method", gen = function() end, ret = "tensor", shares = true,
          expect = same_shape_expect }
  entry { name = "to", kind = "method", ret = "tensor", shares = true,
          gen = function(a)
            a.n = 2
            local r = R:float()
            if r < 0.6 then a[2] = R:pick(DTYPES)
            elseif r < 0.8 then a[2] = R:pick(DEVICES)
            elseif r < 0.9 then a[2] = g_opts()
            else a[2] = R:pick(BAD_NAMES) end
          end,
          expect = function(shape, a, res)
            local got = geom(res[1])
            if got and not same_list(got, shape) then return "shape changed" end
            if DTYPE_SET[a[1]] and tdtype(res[1]) ~= a[1] then return "dtype is " .. tostring(tdtype(res[1])) end
          end }
  entry { name = "copy_", kind = "method", ret = "self", mutates = true, weight = 2,
          gen = function(a, shape, self) g_like(a, shape, self) end }
end
