-- qlua.fuzz.entries.shape — the fuzzer's entries for shape ops: slice, squeeze, unsqueeze,
-- flatten, unflatten, movedim, flip, roll, repeat_tensor, split, chunk.

return function(ctx)
  local R = ctx.R
  local entry = ctx.entry
  local g_dim, g_junk, g_number = ctx.g_dim, ctx.g_junk, ctx.g_number

  -- slicing, shape ops, splitting, creation and joining (their results are
  -- checked for a sane geometry; the errors must name the function)
  entry { name = "slice", kind = "method", ret = "tensor", shares = true, weight = 2,
          gen = function(a, shape)
            local d = g_dim(shape)
            local size = shape[math.tointeger(d) or 0] or 3
            a.n = 4; a[2], a[3], a[4] = d, R:int(-size - 1, size + 1), R:int(-size - 1, size + 1)
            if R:chance(0.3) then a.n = 5; a[5] = R:pick({ 1, 2, 3, 0, -1, 0.5 }) end
          end }
  entry { name = "squeeze", kind = "method", ret = "tensor", shares = true,
          gen = function(a, shape) if R:chance(0.6) then a.n = 2; a[2] = g_dim(shape) end end }
  entry { name = "unsqueeze", kind = "method", ret = "tensor", shares = true,
          gen = function(a, shape) a.n = 2; a[2] = R:chance(0.8) and R:int(1, #shape + 1) or g_dim(shape) end }
  entry { name = "flatten", kind = "method", ret = "tensor", shares = true,
          gen = function(a, shape)
            if R:chance(0.6) then a.n = 3; a[2], a[3] = g_dim(shape), g_dim(shape) end
          end }
  entry { name = "unflatten", kind = "method", ret = "tensor", shares = true,
          gen = function(a, shape)
            local d = g_dim(shape)
            local size = shape[math.tointeger(d) or 0] or 1
            a.n = 3; a[2] = d
            a[3] = R:chance(0.7) and { 1, size } or { R:pick({ -1, 2, 0, 3 }), R:pick({ -1, size, 2 }) }
          end }
  entry { name = "movedim", kind = "method", ret = "tensor", shares = true,
          gen = function(a, shape) a.n = 3; a[2], a[3] = g_dim(shape), g_dim(shape) end }
  entry { name = "flip", kind = "method", ret = "tensor",
          gen = function(a, shape) a.n = 2; a[2] = R:chance(0.5) and g_dim(shape) or { g_dim(shape) } end }
  entry { name = "roll", kind = "method", ret = "tensor",
          gen = function(a, shape)
            a.n = 2; a[2] = R:int(-5, 5)
            if R:chance(0.6) then a.n = 3; a[3] = g_dim(shape) end
          end }
  entry { name = "repeat_tensor", kind = "method", ret = "tensor",
          gen = function(a, shape)
            local sizes = {}
            for i = 1, #shape + R:int(0, 1) do sizes[i] = R:pick({ 1, 2, 1, 0, 3 }) end
            a.n = 2; a[2] = R:chance(0.9) and sizes or g_junk()
          end }
  entry { name = "split", kind = "method", ret = "any",
          gen = function(a, shape)
            a.n = 3; a[2], a[3] = R:chance(0.8) and R:int(1, 4) or R:pick({ 0, -1, { 1, 1 }, 0.5 }), g_dim(shape)
          end }
  entry { name = "chunk", kind = "method", ret = "any",
          gen = function(a, shape) a.n = 3; a[2], a[3] = R:chance(0.8) and R:int(1, 4) or g_number(), g_dim(shape) end }
end
