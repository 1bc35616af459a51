-- qlua.fuzz.entries.conveniences — the fuzzer's entries for triangles, diagonals, the *_as
-- views, dtype shorthands, whole-tensor comparisons, the *_like and range functions, eye,
-- randperm, cat/stack, clock, bench, is_tensor.

return function(ctx)
  local as_integer, broadcast, is_tensor = ctx.as_integer, ctx.broadcast, ctx.is_tensor
  local list_str, NaN, qlua, R, same_list = ctx.list_str, ctx.NaN, ctx.qlua, ctx.R, ctx.same_list
  local entry, geom, pool_pick, tdevice = ctx.entry, ctx.geom, ctx.pool_pick, ctx.tdevice
  local tdtype = ctx.tdtype
  local expect_shape, same_shape_expect = ctx.expect_shape, ctx.same_shape_expect
  local name_object = ctx.name_object
  local DTYPES, g_dim, g_junk, g_like = ctx.DTYPES, ctx.g_dim, ctx.g_junk, ctx.g_like
  local g_number, g_opts, make_tensor_shaped = ctx.g_number, ctx.g_opts, ctx.make_tensor_shaped

  -- triangles, diagonals, the *_as views, dtype shorthands, whole-tensor comparisons
  local function g_offset(a, shape)
    local n = math.max(shape[#shape] or 2, 1)
    if R:chance(0.3) then return end
    a.n = 2
    a[2] = R:chance(0.8) and R:int(-n - 1, n + 1)
           or R:pick({ math.maxinteger, math.mininteger, 1 << 40, -(1 << 40), 0.5, NaN, "1" })
  end
  for _, name in ipairs({ "tril", "triu" }) do
    entry { name = name, kind = "method", ret = "tensor", gen = g_offset,
            expect = same_shape_expect }
    entry { name = name .. "_", kind = "method", ret = "self", mutates = true, gen = g_offset }
  end
  entry { name = "diag", kind = "method", ret = "tensor", gen = g_offset,
          expect = expect_shape(function(shape, a)
            local k = as_integer(a[1]) or 0
            if #shape == 1 and math.abs(k) < 1 << 20 then
              local side = shape[1] + math.abs(k)
              return { side, side }
            end
          end) }
  entry { name = "diagonal", kind = "method", ret = "tensor", shares = true,
          gen = function(a, shape)
            g_offset(a, shape)
            if R:chance(0.6) then
              a.n = 4; a[2] = a[2] or 0; a[3], a[4] = g_dim(shape), g_dim(shape)
            end
          end,
          expect = expect_shape(function(shape, a)
            if #shape < 2 then return nil end
            local k = as_integer(a[1]) or 0
            local d1, d2 = as_integer(a[2]) or 1, as_integer(a[3]) or 2
            if not (shape[d1] and shape[d2]) or d1 == d2 then return nil end
            local n1, n2, len = shape[d1], shape[d2], 0
            if k >= 0 and k < n2 then len = math.min(n1, n2 - k)
            elseif k < 0 and k > -n1 then len = math.min(n1 + k, n2) end
            local s = {}
            for d = 1, #shape do if d ~= d1 and d ~= d2 then s[#s + 1] = shape[d] end end
            s[#s + 1] = len
            return s
          end) }
  local function g_shaped_like(a, shape, self)
    a.n = 2
    if R:chance(0.7) then
      local s = { table.unpack(shape) }
      if R:chance(0.5) then table.insert(s, 1, R:int(0, 3)) end
      if R:chance(0.3) and #s > 0 then s[R:int(1, #s)] = R:int(0, 4) end
      a[2] = make_tensor_shaped(s, R:pick(DTYPES), tdevice(self))
    else
      a[2] = R:chance(0.5) and pool_pick() or g_junk()
    end
  end
  entry { name = "expand_as", kind = "method", ret = "tensor", shares = true, gen = g_shaped_like,
          expect = expect_shape(function(_, a) return geom(a[1]) end) }
  entry { name = "view_as", kind = "method", ret = "tensor", shares = true, gen = g_shaped_like,
          expect = expect_shape(function(_, a) return geom(a[1]) end) }
  -- the dtype shorthands, in the dtype list's order (a list, not pairs: the order entries
  -- are made in is part of what a seed replays)
  for _, d in ipairs(ctx.OPS.dtypes) do
    local name, dtype = d.short, d.name
    entry { name = name, kind = "method", gen = function() end, ret = "tensor", shares = true,
            expect = function(shape, _, res)
              local got = geom(res[1])
              if got and not same_list(got, shape) then return "shape changed" end
              if got and tdtype(res[1]) ~= dtype then return "dtype is " .. tostring(tdtype(res[1])) end
            end }
  end
  local function g_tolerances(a, shape, self)
    a.n = 2
    local r = R:float()
    if r < 0.5 then
      a[2] = make_tensor_shaped(shape, R:chance(0.8) and tdtype(self) or R:pick(DTYPES), tdevice(self))
    elseif r < 0.6 then
      a[2] = self
    else
      g_like(a, shape, self)
      a.n = 2
    end
    local t = R:float()
    if t < 0.3 then
      a.n = 3; a[3] = R:pick({ { rtol = 0.1 }, { atol = 1 }, { equal_nan = true }, { rtol = -1 },
                               { bogus = 1 }, { rtol = "x" }, { atol = NaN }, {} })
    elseif t < 0.6 then
      a.n = 5
      a[3] = R:chance(0.8) and R:pick({ 0, 1e-5, 0.1, 1 }) or g_number()
      a[4] = R:chance(0.8) and R:pick({ 0, 1e-8, 0.5 }) or g_number()
      a[5] = R:chance(0.8) and R:chance(0.5) or g_junk()
    end
  end
  entry { name = "isclose", kind = "method", ret = "tensor", gen = g_tolerances,
          expect = function(shape, a, res)
            local got, other = geom(res[1]), geom(a[1])
            if got and other and not same_list(got, broadcast(shape, other)) then
              return "result shape " .. list_str(got)
            end
            if got and tdtype(res[1]) ~= "bool" then return "dtype is " .. tostring(tdtype(res[1])) end
          end }
  entry { name = "allclose", kind = "method", ret = "boolean", gen = g_tolerances }
  entry { name = "equal", kind = "method", ret = "boolean",
          gen = function(a, shape, self) g_tolerances(a, shape, self); a.n = 2 end }
  for _, fname in ipairs({ "empty_like", "zeros_like", "ones_like", "rand_like", "randn_like" }) do
    entry { name = fname, kind = "module", ret = "tensor", uninit = fname == "empty_like",
            gen = function(a)
              a.n = 1; a[1] = pool_pick()
              local o = g_opts(fname == "rand_like" or fname == "randn_like")
              if o then a.n = 2; a[2] = o end
            end }
  end
  entry { name = "full_like", kind = "module", ret = "tensor",
          gen = function(a) a.n = 2; a[1], a[2] = pool_pick(), g_number() end }
  -- counts are small, or beyond any machine (>= 2^46: the allocation must fail fast)
  local function g_count()
    return R:chance(0.85) and R:int(0, 20) or R:pick({ -1, 0.5, 1 << 50, math.maxinteger, 0 / 0, 1 / 0, "x" })
  end
  local function g_endpoint()
    return R:chance(0.85) and R:int(-10, 30) or R:pick({ 0.5, -2.25, 1 << 60, -(1 << 60), 0 / 0, 1 / 0, "x" })
  end
  entry { name = "arange", kind = "module", ret = "tensor",
          gen = function(a)
            a.n = 2; a[1], a[2] = g_endpoint(), g_endpoint()
            if R:chance(0.5) then a.n = 3; a[3] = R:pick({ 1, 2, -1, 0.5, 0.25, 0, 1e-30, 1 << 62 }) end
          end }
  entry { name = "linspace", kind = "module", ret = "tensor",
          gen = function(a) a.n = 3; a[1], a[2], a[3] = g_endpoint(), g_endpoint(), g_count() end }
  entry { name = "logspace", kind = "module", ret = "tensor",
          gen = function(a) a.n = 3; a[1], a[2], a[3] = R:int(-3, 3), R:int(-3, 3), g_count() end }
  entry { name = "eye", kind = "module", ret = "tensor",
          gen = function(a)
            a.n = 1; a[1] = g_count()
            if R:chance(0.5) then a.n = 2; a[2] = g_count() end
          end }
  entry { name = "randperm", kind = "module", ret = "tensor",
          gen = function(a) a.n = 1; a[1] = g_count() end }
  for _, fname in ipairs({ "cat", "stack" }) do
    entry { name = fname, kind = "module", ret = "tensor", weight = 2,
            gen = function(a)
              local list = {}
              for i = 1, R:int(1, 3) do list[i] = pool_pick() end
              a.n = 1; a[1] = list
              if R:chance(0.6) then a.n = 2; a[2] = R:int(1, 3) end
            end }
  end
  entry { name = "clock", kind = "module", ret = "number", gen = function() end, weight = 0.2 }
  -- qlua.bench calls back into Lua: cheap callbacks and small counts only (a large
  -- valid count is a legitimately long benchmark, not a bug)
  local BENCH_FNS = { name_object(function() end, "NOOP", "function() end"),
                      name_object(function() error("callback raised", 0) end, "RAISES",
                                  "function() error(\"callback raised\", 0) end"),
                      name_object(function() local _ = qlua.zeros(2) + 1 end, "ALLOCS",
                                  "function() local _ = qlua.zeros(2) + 1 end") }
  if qlua.bench then
    entry { name = "bench", kind = "module", ret = "any", weight = 0.3, callback_errors = true,
            gen = function(a)
              a.n = 1; a[1] = R:pick(BENCH_FNS)
              if R:chance(0.7) then
                local o = {}
                for _, k in ipairs({ "runs", "calls", "warmup" }) do
                  if R:chance(0.5) then
                    o[k] = R:chance(0.7) and R:int(0, 3)
                           or R:pick({ -1, 1.5, NaN, "2", "x", 100000001, math.maxinteger, true })
                  end
                end
                a.n = 2; a[2] = o
              end
            end,
            expect = function(_, _, res)
              local r = res[1]
              if type(r) ~= "table" then return "bench returned a " .. type(r) end
              for _, k in ipairs({ "median", "min", "max", "mean" }) do
                if type(r[k]) ~= "number" then return "bench()." .. k .. " is " .. tostring(r[k]) end
              end
            end }
  end
  entry { name = "is_tensor", kind = "module", ret = "boolean",
          gen = function(a) a.n = 1; a[1] = g_junk() end,
          expect = function(_, a, res)
            if res[1] ~= is_tensor(a[1]) then return "is_tensor gave " .. tostring(res[1]) end
          end }
end
