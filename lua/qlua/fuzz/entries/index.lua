-- qlua.fuzz.entries.index — the fuzzer's entries for indexing: gather, index_select, take,
-- scatter_, index_add_, scatter_add_, index_fill_, index_copy_.

return function(ctx)
  local as_integer, is_tensor, list_str = ctx.as_integer, ctx.is_tensor, ctx.list_str
  local product, R, same_list = ctx.product, ctx.R, ctx.same_list
  local shape_of_nested = ctx.shape_of_nested
  local entry, geom, tdevice, tdtype = ctx.entry, ctx.geom, ctx.tdevice, ctx.tdtype
  local g_dim, g_index, g_number, g_shape = ctx.g_dim, ctx.g_index, ctx.g_number, ctx.g_shape
  local make_tensor_shaped = ctx.make_tensor_shaped

  -- ---- indexing
  local function gather_index_shape(shape, dim)
    local s = {}
    for d = 1, #shape do
      if d == dim then s[d] = R:int(0, 4)
      else s[d] = R:chance(0.7) and shape[d] or R:int(0, shape[d]) end
    end
    if R:chance(0.08) then s[#s + 1] = 2 end
    return s
  end
  entry { name = "gather", kind = "method", ret = "tensor", weight = 4,
          gen = function(a, shape, self)
            local dev = tdevice(self)
            if #shape == 1 and R:chance(0.4) then
              a.n = 2
              a[2] = g_index(R:chance(0.8) and { R:int(0, 6) } or g_shape(16), shape[1], dev)
              return
            end
            local d = g_dim(shape)
            local di = math.tointeger(d)
            local ishape = (di and shape[di]) and gather_index_shape(shape, di) or g_shape(16)
            a.n = 3; a[2], a[3] = d, g_index(ishape, shape[di or 1] or 1, dev)
          end,
          expect = function(_, a, res)
            local index = type(a[1]) == "number" and a[2] or a[1]
            local want = is_tensor(index) and geom(index) or (type(index) == "table" and shape_of_nested(index))
            local got = geom(res[1])
            if want and got and not same_list(got, want) then
              return "result shape " .. list_str(got) .. ", index shape " .. list_str(want)
            end
          end }
  entry { name = "index_select", kind = "method", ret = "tensor", weight = 3,
          gen = function(a, shape, self)
            local d = g_dim(shape)
            local size = shape[math.tointeger(d) or 0] or 2
            a.n = 3; a[2], a[3] = d, g_index({ R:int(0, 6) }, size, tdevice(self))
          end,
          expect = function(shape, a, res)
            local d = as_integer(a[1])
            local ishape = is_tensor(a[2]) and geom(a[2]) or (type(a[2]) == "table" and shape_of_nested(a[2]))
            local got = geom(res[1])
            if not (d and shape[d] and ishape and got) or #ishape ~= 1 then return nil end
            local want = { table.unpack(shape) }
            want[d] = ishape[1]
            if not same_list(got, want) then return "result shape " .. list_str(got) .. ", expected " .. list_str(want) end
          end }
  entry { name = "take", kind = "method", ret = "tensor", weight = 3,
          gen = function(a, shape, self)
            a.n = 2
            a[2] = g_index(g_shape(24), math.tointeger(product(shape)) or 1, tdevice(self))
          end,
          expect = function(_, a, res)
            local want = is_tensor(a[1]) and geom(a[1]) or (type(a[1]) == "table" and shape_of_nested(a[1]))
            local got = geom(res[1])
            if want and got and not same_list(got, want) then
              return "result shape " .. list_str(got) .. ", index shape " .. list_str(want)
            end
          end }
  entry { name = "scatter_", kind = "method", ret = "self", mutates = true, weight = 3,
          gen = function(a, shape, self)
            local d = g_dim(shape)
            local di = math.tointeger(d)
            local ishape = (di and shape[di]) and gather_index_shape(shape, di) or g_shape(16)
            a.n = 4
            a[2], a[3] = d, g_index(ishape, shape[di or 1] or 1, tdevice(self))
            if R:chance(0.5) then a[4] = g_number()
            else a[4] = make_tensor_shaped(ishape, R:chance(0.7) and tdtype(self) or nil, tdevice(self)) end
          end }
  entry { name = "index_add_", kind = "method", ret = "self", mutates = true, weight = 3,
          gen = function(a, shape, self)
            local d = g_dim(shape)
            local di = math.tointeger(d)
            local k = R:int(0, 5)
            a.n = 4
            a[2], a[3] = d, g_index({ k }, shape[di or 1] or 1, tdevice(self))
            local sshape = { table.unpack(shape) }
            if di and sshape[di] then sshape[di] = k end
            a[4] = make_tensor_shaped(sshape, R:chance(0.7) and tdtype(self) or nil, tdevice(self))
          end }
  entry { name = "scatter_add_", kind = "method", ret = "self", mutates = true, weight = 3,
          gen = function(a, shape, self)
            local d = g_dim(shape)
            local di = math.tointeger(d)
            local ishape = (di and shape[di]) and gather_index_shape(shape, di) or g_shape(16)
            a.n = 4
            a[2], a[3] = d, g_index(ishape, shape[di or 1] or 1, tdevice(self))
            a[4] = make_tensor_shaped(ishape, R:chance(0.7) and tdtype(self) or nil, tdevice(self))
          end }
  entry { name = "index_fill_", kind = "method", ret = "self", mutates = true, weight = 3,
          gen = function(a, shape, self)
            local d = g_dim(shape)
            local di = math.tointeger(d)
            a.n = 4
            a[2], a[3] = d, g_index({ R:int(0, 5) }, shape[di or 1] or 1, tdevice(self))
            a[4] = g_number()
          end }
  entry { name = "index_copy_", kind = "method", ret = "self", mutates = true, weight = 3,
          gen = function(a, shape, self)
            local d = g_dim(shape)
            local di = math.tointeger(d)
            local k = R:int(0, 5)
            a.n = 4
            a[2], a[3] = d, g_index({ k }, shape[di or 1] or 1, tdevice(self))
            local sshape = { table.unpack(shape) }
            if di and sshape[di] then sshape[di] = k end
            a[4] = make_tensor_shaped(sshape, R:chance(0.7) and tdtype(self) or nil, tdevice(self))
          end }
end
