-- qlua.fuzz.entries.elementwise — the fuzzer's entries for elementwise arithmetic: the
-- binary and unary ops and their in-place forms, nan_to_num, lerp, addcmul_/addcdiv_,
-- clamp, fill_, zero_.

return function(ctx)
  local R = ctx.R
  local entry = ctx.entry
  local binary_expect, same_shape_expect = ctx.binary_expect, ctx.same_shape_expect
  local g_like, g_number, g_operand = ctx.g_like, ctx.g_number, ctx.g_operand

  -- ---- arithmetic
  -- the op lists the binding makes its methods from (the registry's qlua.ops), in order
  for _, op in ipairs(ctx.OPS.binary) do
    entry { name = op, kind = "method", ret = "tensor", gen = g_operand, expect = binary_expect }
    entry { name = op .. "_", kind = "method", ret = "self", mutates = true, gen = g_operand }
  end
  entry { name = "logical_not", kind = "method", gen = function() end, ret = "tensor",
          expect = same_shape_expect }
  entry { name = "logical_not_", kind = "method", gen = function() end, ret = "self",
          mutates = true }
  for _, op in ipairs(ctx.OPS.unary) do
    entry { name = op, kind = "method", gen = function() end, ret = "tensor", expect = same_shape_expect }
    entry { name = op .. "_", kind = "method", gen = function() end, ret = "self", mutates = true }
  end
  for _, op in ipairs(ctx.OPS.unary_bool) do
    entry { name = op, kind = "method", gen = function() end, ret = "tensor", expect = same_shape_expect }
  end
  local function g_nan_to_num(a)
    a.n = 3
    for k = 1, 3 do a[k] = R:chance(0.5) and g_number() or nil end
  end
  entry { name = "nan_to_num", kind = "method", gen = g_nan_to_num, ret = "tensor",
          expect = same_shape_expect }
  entry { name = "nan_to_num_", kind = "method", gen = g_nan_to_num, ret = "self", mutates = true }
  entry { name = "lerp", kind = "method", ret = "tensor",
          gen = function(a, shape, self)
            g_like(a, shape, self)                                  -- the end point
            if R:chance(0.5) then a.n = 2; a[2] = g_number() else g_like(a, shape, self) end
          end }
  entry { name = "lerp_", kind = "method", ret = "self", mutates = true,
          gen = function(a, shape, self)
            g_like(a, shape, self)
            if R:chance(0.5) then a.n = 3; a[3] = g_number() else g_like(a, shape, self) end
          end }
  for _, op in ipairs({ "addcmul_", "addcdiv_" }) do
    entry { name = op, kind = "method", ret = "self", mutates = true,
            gen = function(a, shape, self)
              g_like(a, shape, self)
              g_like(a, shape, self)
              if R:chance(0.5) then a.n = 3; a[3] = g_number() end
            end }
  end
  local function g_bounds(a)
    a.n = 3
    a[2] = R:chance(0.3) and nil or g_number()
    a[3] = R:chance(0.3) and nil or g_number()
  end
  entry { name = "clamp", kind = "method", gen = g_bounds, ret = "tensor", expect = same_shape_expect }
  entry { name = "clamp_", kind = "method", gen = g_bounds, ret = "self", mutates = true }
  entry { name = "fill_", kind = "method", ret = "self", mutates = true,
          gen = function(a) a.n = 2; a[2] = g_number() end }
  entry { name = "zero_", kind = "method", gen = function() end, ret = "self", mutates = true }
end
