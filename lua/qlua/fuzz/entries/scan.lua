-- qlua.fuzz.entries.scan — the fuzzer's entries for scans and the softmax family (cumsum
-- ... log_softmax) and qlua.cross_entropy.

return function(ctx)
  local list_str, R, same_list = ctx.list_str, ctx.R, ctx.same_list
  local entry, geom, pool_pick, tdevice = ctx.entry, ctx.geom, ctx.pool_pick, ctx.tdevice
  local tdtype = ctx.tdtype
  local tensor_problem = ctx.tensor_problem
  local FLOAT_DTYPES, FLOAT_SET, g_dim = ctx.FLOAT_DTYPES, ctx.FLOAT_SET, ctx.g_dim
  local make_tensor_shaped = ctx.make_tensor_shaped

  -- ---- scans and the softmax family: a dim (0-d tensors take dim 1), results of
  -- self's shape; cummax / cummin also give int64 positions of that shape
  local SCAN_RESULT = { cumsum = "int64", cumprod = "int64", logcumsumexp = "float64",
                        softmax = "float64", log_softmax = "float64" }
  for _, op in ipairs({ "cumsum", "cumprod", "cummax", "cummin", "logcumsumexp", "softmax",
                        "log_softmax" }) do
    entry { name = op, kind = "method", ret = "any", weight = 1,
            gen = function(a, shape) a.n = 2; a[2] = #shape == 0 and R:pick({ 1, 1, 0, 2 }) or g_dim(shape) end,
            expect = function(shape, a, res)
              local p = tensor_problem(res[1])
              if p then return p end
              if not same_list(geom(res[1]), shape) then
                return op .. " gave shape " .. list_str(geom(res[1])) .. " for " .. list_str(shape)
              end
              local d = tdtype(res[1])
              if SCAN_RESULT[op] and not FLOAT_SET[d] and d ~= SCAN_RESULT[op] then
                return op .. " gave " .. tostring(d)
              end
              if op == "cummax" or op == "cummin" then
                if res.n ~= 2 then return op .. " returned " .. res.n .. " values" end
                local p2 = tensor_problem(res[2])
                if p2 then return "indices: " .. p2 end
                if tdtype(res[2]) ~= "int64" then return "indices are " .. tostring(tdtype(res[2])) end
              elseif res.n ~= 1 then
                return op .. " returned " .. res.n .. " values"
              end
            end }
  end
  -- cross_entropy: logits from the pool (any shape: most are refused), targets as class
  -- tables (sometimes out of range), int tensors, or probabilities of the logits' shape
  entry { name = "cross_entropy", kind = "module", ret = "tensor", weight = 2,
          gen = function(a)
            local logits = pool_pick()
            local shape = geom(logits) or {}
            local n, c = shape[1] or 1, shape[#shape] or 1
            a.n = 2
            a[1] = logits
            local r = R:float()
            if r < 0.4 then
              local list = {}
              for i = 1, (#shape == 2 and n or 1) do list[i] = R:chance(0.95) and R:int(1, math.max(c, 1)) or R:pick({ 0, c + 1, -100 }) end
              a[2] = #shape == 1 and list[1] or list
            elseif r < 0.7 then
              a[2] = make_tensor_shaped(#shape == 2 and { n } or {}, R:pick({ "int64", "int32", "uint8", "bool" }), tdevice(logits))
            else
              a[2] = make_tensor_shaped(shape, R:pick(FLOAT_DTYPES), tdevice(logits))
            end
            if R:chance(0.5) then
              a.n = 3
              a[3] = { reduction = R:pick({ "mean", "sum", "none", "avg" }),
                       ignore_index = R:chance(0.3) and R:pick({ -100, 1, 2.5 }) or nil,
                       label_smoothing = R:chance(0.3) and R:pick({ 0, 0.1, 1, 1.5, -0.1 }) or nil }
            end
          end }
end
