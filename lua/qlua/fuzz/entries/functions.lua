-- qlua.fuzz.entries.functions — the fuzzer's entries for module functions: creation (empty
-- ... tensor, seed), qlua.matmul/addmm/einsum, sampling (t:uniform_ ... and
-- qlua.bernoulli/multinomial), help, where, devices and memory.

return function(ctx)
  local broadcast, is_tensor, list_str = ctx.broadcast, ctx.is_tensor, ctx.list_str
  local METHODS, qlua, R, same_list = ctx.METHODS, ctx.qlua, ctx.R, ctx.same_list
  local entry, geom, pool_pick = ctx.entry, ctx.geom, ctx.pool_pick
  local pool_pick_shaped = ctx.pool_pick_shaped
  local BAD_NAMES, DEVICES, DTYPES, g_junk = ctx.BAD_NAMES, ctx.DEVICES, ctx.DTYPES, ctx.g_junk
  local g_number, g_opts, g_shape = ctx.g_number, ctx.g_opts, ctx.g_shape
  local JUNK_TABLES, make_tensor_shaped = ctx.JUNK_TABLES, ctx.make_tensor_shaped
  local nested_values, shape_args = ctx.nested_values, ctx.shape_args
  local shape_from_args, SPECIAL_NUMBERS = ctx.shape_from_args, ctx.SPECIAL_NUMBERS
  local g_addmm_operands, g_matmul_other = ctx.g_addmm_operands, ctx.g_matmul_other
  local matmul_expect = ctx.matmul_expect

  -- ---- module functions
  local function g_creation(a)
    shape_args(g_shape(), a)
    local o = g_opts()
    if o then a.n = a.n + 1; a[a.n] = o end
  end
  local function creation_expect(first, one_only)
    return function(_, a, res)
      local want = shape_from_args(a, first, one_only)
      local got = geom(res[1])
      if want and got and not same_list(got, want) then
        return "result shape " .. list_str(got) .. ", asked " .. list_str(want)
      end
    end
  end
  for _, fname in ipairs({ "empty", "zeros", "ones", "rand", "randn" }) do
    entry { name = fname, kind = "module", ret = "tensor", gen = g_creation, expect = creation_expect(1),
            uninit = fname == "empty" }
  end
  entry { name = "full", kind = "module", ret = "tensor", expect = creation_expect(1, true),
          gen = function(a)
            local s = g_shape()
            a.n = 2
            a[1] = (#s == 1 and R:chance(0.5)) and s[1] or s
            a[2] = g_number()
            local o = g_opts()
            if o then a.n = 3; a[3] = o end
          end }
  entry { name = "range", kind = "module", ret = "tensor",
          gen = function(a)
            local r = R:float()
            if r < 0.6 then
              a.n = 2; a[1], a[2] = R:int(-10, 10), R:int(-10, 30)
              if R:chance(0.5) then a.n = 3; a[3] = R:pick({ 1, 2, -1, -3, 0.5, 0.25, 0, 7 }) end
            else
              a.n = 3; a[1], a[2], a[3] = g_number(), g_number(), g_number()
            end
            local o = g_opts()
            if o then a.n = a.n + 1; a[a.n] = o end
          end,
          expect = function(_, _, res)
            local got = geom(res[1])
            if got and #got ~= 1 then return "range gave shape " .. list_str(got) end
          end }
  entry { name = "randint", kind = "module", ret = "tensor", expect = creation_expect(3),
          gen = function(a)
            local lo, hi
            if R:chance(0.7) then lo = R:int(-5, 5); hi = lo + R:int(0, 10)
            else lo, hi = g_number(), g_number() end
            a.n = 2; a[1], a[2] = lo, hi
            shape_args(g_shape(), a)
            if R:chance(0.4) then a.n = a.n + 1; a[a.n] = { dtype = R:pick(DTYPES) } end
          end }
  entry { name = "tensor", kind = "module", ret = "tensor", weight = 2,
          gen = function(a)
            local r = R:float()
            local data
            if r < 0.15 then data = g_number()
            elseif r < 0.8 then
              local s = g_shape(64)
              local floats = R:chance(0.4)
              local special = R:chance(0.15)
              data = nested_values(s, 1, function()
                if special and R:chance(0.3) then return R:pick(SPECIAL_NUMBERS) end
                if floats then return (R:float() - 0.5) * 10 end
                return R:int(-100, 100)
              end)
              if #s == 0 then data = {} end
            elseif r < 0.88 then
              data = R:pick({ { { 1, 2 }, { 3 } }, { 1, { 2 } }, { { 1 }, 2 }, { { {} }, { 1 } },
                              { 1, "x" }, { 1, true }, { { 1, 2 }, { 3, {} } }, {}, { {} }, { {}, {} } })
            else
              data = R:pick(JUNK_TABLES)
            end
            a.n = 1; a[1] = data
            local o = g_opts()
            if o then a.n = 2; a[2] = o end
          end,
          expect = function(_, a, res)
            local got = geom(res[1])
            if not got then return nil end
            if type(a[1]) == "number" and #got ~= 0 then return "a number gave shape " .. list_str(got) end
          end }
  entry { name = "seed", kind = "module", ret = "any",
          gen = function(a) a.n = 1; a[1] = R:chance(0.7) and R:int(0, 1000) or g_number() end }
  entry { name = "matmul", kind = "module", ret = "tensor", weight = 1,
          gen = function(a)
            local t, shape = pool_pick_shaped(function(s) return #s >= 1 end)
            if not t then t, shape = pool_pick(), { 2 } end
            a.n = 1; a[1] = t
            g_matmul_other(a, shape, t)
          end,
          expect = function(_, a, res)
            local sa = geom(a[1])
            if sa then return matmul_expect(sa, a[2], res) end
          end }
  entry { name = "addmm", kind = "module", ret = "tensor", weight = 1,
          gen = function(a)
            local t, shape = pool_pick_shaped(function(s) return #s <= 2 end)
            if not t then t, shape = pool_pick(), { 2, 2 } end
            a.n = 1; a[1] = t
            g_addmm_operands(a, shape, t)
          end }
  -- einsum: a spec from the list with operands of its shapes (letters of one size), or junk
  local EINSUM_SPECS = { "ij,jk->ik", "bij,bjk->bik", "ii->i", "ij->ji", "i,i->", "ij->",
                         "i,j->ij", "ij,jk", "...ij,...jk->...ik", "ij,jk,kl->il", "ii", "ij#" }
  entry { name = "einsum", kind = "module", ret = "tensor", weight = 1,
          gen = function(a)
            local spec = R:chance(0.9) and R:pick(EINSUM_SPECS) or g_junk()
            a.n = 1; a[1] = spec
            if type(spec) ~= "string" then return end
            local size, dt, dev = {}, R:chance(0.9) and "float32" or R:pick(DTYPES), R:pick(DEVICES)
            if R:chance(0.5) then dt = "float64" end
            local lhs = spec:match("^(.-)%->") or spec
            for term in (lhs .. ","):gmatch("([^,]*),") do
              local s = {}
              if term:find("...", 1, true) then
                for _ = 1, R:int(0, 2) do s[#s + 1] = R:int(1, 3) end
                term = term:gsub("%.%.%.", "")
              end
              for c in term:gmatch("%a") do
                size[c] = size[c] or R:int(0, 4)
                s[#s + 1] = size[c]
              end
              a.n = a.n + 1
              a[a.n] = R:chance(0.9) and make_tensor_shaped(s, dt, dev) or pool_pick()
            end
          end }
  -- qlua.where(cond, a, b): a and b tensors broadcastable with cond (a dim or two made 1),
  -- numbers, booleans or junk
  local function g_where_value(shape)
    local r = R:float()
    if r < 0.3 then return g_number() end
    if r < 0.4 then return R:chance(0.5) end
    if r < 0.9 then
      local s = { table.unpack(shape) }
      for i = 1, #s do if R:chance(0.3) then s[i] = 1 end end
      while #s > 0 and R:chance(0.2) do table.remove(s, 1) end
      return make_tensor_shaped(s, R:pick(DTYPES), R:pick(DEVICES))
    end
    return g_junk()
  end
  -- ---- sampling
  entry { name = "uniform_", kind = "method", ret = "self", mutates = true,
          gen = function(a) a.n = 3; a[2] = R:chance(0.7) and g_number() or nil; a[3] = R:chance(0.7) and g_number() or nil end }
  entry { name = "normal_", kind = "method", ret = "self", mutates = true,
          gen = function(a) a.n = 3; a[2] = R:chance(0.7) and g_number() or nil; a[3] = R:chance(0.7) and g_number() or nil end }
  entry { name = "random_", kind = "method", ret = "self", mutates = true,
          gen = function(a)
            a.n = 3
            a[2] = R:int(-5, 5)
            a[3] = R:chance(0.7) and R:int(-5, 300) or nil
          end }
  entry { name = "exponential_", kind = "method", ret = "self", mutates = true,
          gen = function(a) a.n = 2; a[2] = R:chance(0.8) and g_number() or nil end }
  entry { name = "bernoulli", kind = "module", ret = "tensor",
          gen = function(a)
            local p = pool_pick()
            a.n = 1
            a[1] = p
          end }
  entry { name = "multinomial", kind = "module", ret = "tensor",
          gen = function(a)
            a.n = 3
            a[1] = pool_pick()
            a[2] = R:int(-1, 8)
            a[3] = R:pick({ true, false, nil, 1 })
          end }
  -- qlua.help prints through the global print; the call below silences it (see compile)
  entry { name = "help", kind = "module", ret = "none", weight = 0.5, silent = true,
          gen = function(a)
            a.n = 1
            local r = R:float()
            if r < 0.3 then
              a[1] = R:pick({ "cat", "slice", "Tensor.slice", "sum", "qlua", "Tensor", "lerp_",
                              "median", "where", "k:launch", "nosuch", "", "Tensor.", ".", "qlua.help" })
            elseif r < 0.5 then a[1] = qlua[R:pick({ "cat", "where", "zeros", "help", "einsum" })]
            elseif r < 0.7 then
              local names = {}
              for k in pairs(METHODS) do names[#names + 1] = k end
              table.sort(names)
              a[1] = METHODS[R:pick(names)]
            elseif r < 0.8 then a[1] = nil; a.n = 0
            else a[1] = g_junk() end
          end }
  entry { name = "where", kind = "module", ret = "tensor", weight = 2,
          gen = function(a)
            local c, shape = pool_pick_shaped(function() return true end)
            if not c then c, shape = pool_pick(), { 2 } end
            a.n = 3
            a[1], a[2], a[3] = c, g_where_value(shape), g_where_value(shape)
          end,
          expect = function(_, a, res)
            local got, want = geom(res[1]), geom(a[1])
            for k = 2, 3 do
              if want and is_tensor(a[k]) then
                local s = geom(a[k])
                want = s and broadcast(want, s)
              end
            end
            if got and want and not same_list(got, want) then
              return "where gave shape " .. list_str(got) .. ", expected " .. list_str(want)
            end
          end }
  entry { name = "set_tf32", kind = "module", ret = "any",
          gen = function(a) a.n = 1; a[1] = R:chance(0.8) and R:chance(0.5) or g_junk() end }
  entry { name = "gpu_count", kind = "module", ret = "integer", gen = function() end }
  local function g_ordinal(a)
    a.n = 1
    a[1] = R:chance(0.5) and R:pick({ 0, 1, -1, 99, 2 ^ 31, 1 << 40, 0.5 }) or g_junk()
  end
  entry { name = "device_name", kind = "module", ret = "string", gen = g_ordinal }
  entry { name = "set_device", kind = "module", ret = "any", gen = g_ordinal }
  local function g_device_arg(a)
    local r = R:float()
    if r < 0.4 then return end
    a.n = 1
    if r < 0.7 then a[1] = R:pick(DEVICES) elseif r < 0.85 then a[1] = R:pick({ 0, 1, -1, 99 })
    else a[1] = R:pick(BAD_NAMES) end
  end
  entry { name = "sync", kind = "module", ret = "any", gen = g_device_arg }
  entry { name = "memory", kind = "module", ret = "any", gen = g_device_arg,
          expect = function(_, _, res)
            local m = res[1]
            if type(m) ~= "table" then return "memory() returned a " .. type(m) end
            for _, k in ipairs({ "allocated", "reserved", "peak", "total", "free" }) do
              if math.type(m[k]) ~= "integer" or m[k] < 0 then return "memory()." .. k .. " is " .. tostring(m[k]) end
            end
          end }
  entry { name = "empty_cache", kind = "module", ret = "any", gen = function() end, weight = 0.2 }
  entry { name = "is_capturing", kind = "module", ret = "any", gen = g_device_arg }
  -- qlua.graph: junk options and functions, and functions that capture fine or refuse (a
  -- whole-tensor reduction or printing reads back; an error inside fn) on a pool tensor
  local GRAPH_FNS = {
    function(x) return x end,
    function(x) return x + 1 end,
    function(x) return x:sum() end,
    function(x) return tostring(x) end,
    function() error("fuzz: an error inside a captured function") end,
  }
  entry { name = "graph", kind = "module", ret = "any", weight = 0.3,
          gen = function(a)
            local r = R:float()
            if r < 0.15 then
              a.n = 2; a[1] = g_junk(); a[2] = R:pick(GRAPH_FNS)
            elseif r < 0.25 then
              a.n = 1; a[1] = g_junk()
            else
              a.n = 2; a[1] = R:pick(GRAPH_FNS); a[2] = pool_pick()
            end
          end }
end
