-- qlua.fuzz.entries.inspect — the fuzzer's entries for inspection: shape, size, stride,
-- dim, numel, dtype, device, is_contiguous, item, totable.

return function(ctx)
  local R, same_list = ctx.R, ctx.same_list
  local entry = ctx.entry
  local is_element = ctx.is_element
  local g_dim = ctx.g_dim

  -- ---- inspection
  local function r_sizes(shape, args, res)
    local v = res[1]
    if args[1] == nil then
      if type(v) ~= "table" or #v ~= #shape then return "expected a table of " .. #shape .. " sizes" end
      for i = 1, #v do if math.type(v[i]) ~= "integer" then return "a size is not an integer" end end
    elseif math.type(v) ~= "integer" then
      return "expected an integer, got " .. type(v)
    end
  end
  entry { name = "shape", kind = "method", gen = function() end, ret = "any",
          expect = function(shape, _, res)
            if type(res[1]) ~= "table" or not same_list(res[1], shape) then return "shape() is inconsistent" end
          end }
  entry { name = "size", kind = "method", ret = "any", expect = r_sizes,
          gen = function(a, shape) if R:chance(0.6) then a.n = 2; a[2] = g_dim(shape) end end }
  entry { name = "stride", kind = "method", ret = "any", expect = r_sizes,
          gen = function(a, shape) if R:chance(0.6) then a.n = 2; a[2] = g_dim(shape) end end }
  entry { name = "dim", kind = "method", gen = function() end, ret = "integer" }
  entry { name = "numel", kind = "method", gen = function() end, ret = "integer" }
  entry { name = "dtype", kind = "method", gen = function() end, ret = "string" }
  entry { name = "device", kind = "method", gen = function() end, ret = "string" }
  entry { name = "is_contiguous", kind = "method", gen = function() end, ret = "boolean" }
  entry { name = "item", kind = "method", gen = function() end, ret = "number" }
  entry { name = "totable", kind = "method", gen = function() end, ret = "any",
          expect = function(shape, _, res)
            if #shape == 0 then
              if not is_element(res[1]) then return "totable() of a 0-d tensor is not a number or boolean" end
            elseif type(res[1]) ~= "table" or #res[1] ~= shape[1] then
              return "totable() does not match the shape"
            end
          end }
end
