-- qlua.fuzz.entries.operators — the fuzzer's entries for operators as Lua invokes them: + -
-- * / ^ % // unary -, #, t[k], t[k] = v, tostring, <close>.

return function(ctx)
  local is_tensor, list_str, METHODS, R = ctx.is_tensor, ctx.list_str, ctx.METHODS, ctx.R
  local same_list = ctx.same_list
  local entry, geom, tdevice = ctx.entry, ctx.geom, ctx.tdevice
  local is_element, removed, same_shape_expect = ctx.is_element, ctx.removed, ctx.same_shape_expect
  local tensor_problem = ctx.tensor_problem
  local DTYPES, g_junk, g_key, g_number = ctx.DTYPES, ctx.g_junk, ctx.g_key, ctx.g_number
  local g_operand, g_pos, make_tensor_shaped = ctx.g_operand, ctx.g_pos, ctx.make_tensor_shaped

  -- ---- operators (the metamethods as Lua invokes them)
  local OPS = {
    { "add", "a + b", { "add", "__add" } }, { "sub", "a - b", { "sub", "__sub" } },
    { "mul", "a * b", { "mul", "__mul" } }, { "div", "a / b", { "div", "__div" } },
    { "pow", "a ^ b", { "pow", "__pow" } },
    { "remainder", "a % b", { "remainder", "mod", "__mod" } },
    { "floor_divide", "a // b", { "floor_divide", "idiv", "__idiv" } },
  }
  for _, o in ipairs(OPS) do
    entry { name = o[1], kind = "op", ret = "tensor", names = o[3], src = o[2], weight = 2,
            gen = function(a, shape, self)
              g_operand(a, shape, self)
              if R:chance(0.3) then a[1], a[2] = a[2], a[1] end   -- number or junk first
              if not is_tensor(a[1]) and not is_tensor(a[2]) then a[1] = self end
            end }
  end
  entry { name = "unm", kind = "op", ret = "tensor", names = { "neg", "unm", "__unm" },
          src = "-a", gen = function() end, expect = same_shape_expect }
  entry { name = "len", kind = "op", ret = "integer", names = { "len", "__len" }, src = "#a",
          gen = function() end,
          expect = function(shape, _, res)
            if res[1] ~= shape[1] then return "#t is " .. tostring(res[1]) .. " for shape " .. list_str(shape) end
          end }
  entry { name = "index", kind = "op", ret = "any", names = { "index", "__index" }, src = "a[b]",
          weight = 2,
          gen = function(a, shape, self)
            a.n = 2
            local r = R:float()
            if r < 0.5 then a[2] = g_pos(shape[1] or 1)
            elseif r < 0.75 then a[2] = g_key(shape, self)
            elseif r < 0.85 then a[2] = R:pick({ "shape", "add", "nosuchmethod", "__gc", "" })
            else a[2] = g_junk() end
          end,
          expect = function(shape, a, res)
            local k = a[1]
            if type(k) == "number" and k == (shape[1] or 0) + 1 then
              if res[1] ~= nil then return "t[#t + 1] is not nil" end  -- where ipairs stops
            elseif type(k) == "number" then
              if #shape == 1 then
                if not is_element(res[1]) then return "t[i] of a 1-D tensor is a " .. type(res[1]) end
              else
                local p = tensor_problem(res[1])
                if p then return p end
                if not same_list(geom(res[1]), removed(shape, 1)) then return "t[i] has shape " .. list_str(geom(res[1])) end
              end
            elseif type(k) == "string" then
              if res[1] ~= METHODS[k] then return "t." .. k .. " is not the method" end
            elseif type(k) == "table" then
              -- Torch7 indexing: a view ({} is all of t)
              return tensor_problem(res[1])
            elseif is_tensor(k) then
              -- a bool mask or integer positions: a new tensor
              return tensor_problem(res[1])
            elseif res[1] ~= nil then
              return "t[" .. type(k) .. "] is not nil"
            end
          end }
  entry { name = "newindex", kind = "op", ret = "none", mutates = true,
          names = { "index", "newindex", "__newindex" }, src = "a[b] = c", weight = 2,
          gen = function(a, shape, self)
            a.n = 3
            local r = R:float()
            local keyed = r >= 0.5 and r < 0.85
            if r < 0.5 then a[2] = g_pos(shape[1] or 1)
            elseif keyed then a[2] = g_key(shape, self)
            else a[2] = g_junk() end
            if R:chance(0.6) then a[3] = g_number()
            elseif keyed and R:chance(0.5) then
              -- a value of the key's own shape (or one that broadcasts to it), or a 0-d one
              local ok, view = pcall(function() return self[a[2]] end)
              local s = ok and is_tensor(view) and geom(view) or {}
              if R:chance(0.3) then s = {} elseif #s > 0 and R:chance(0.3) then s = { s[#s] } end
              a[3] = make_tensor_shaped(s, R:pick(DTYPES), tdevice(self))
            else
              local s = removed(shape, 1)
              a[3] = make_tensor_shaped(s, R:pick(DTYPES), tdevice(self))
            end
          end }
  entry { name = "tostring", kind = "op", ret = "string", names = { "tostring", "__tostring" },
          src = "tostring(a)", gen = function() end }
  entry { name = "close", kind = "op", ret = "none", names = { "close", "__close" }, mutates = true,
          src = "close", gen = function() end, weight = 0.5 }
end
