-- qlua.fuzz.gen — the argument generators the entries share: junk values (wrong types,
-- special numbers, odd strings, cyclic and deep tables, freed tensors), plausible dims,
-- positions, shapes and options, the allocation guard that keeps a mutated shape from
-- asking for a slow, machine-sized allocation, index arguments and tensors of a given shape,
-- and the operands of binary and in-place ops (g_like, g_operand).

return function(ctx)
  local as_integer, CAP, has_gpu, HUGE_ELEMS = ctx.as_integer, ctx.CAP, ctx.has_gpu, ctx.HUGE_ELEMS
  local INF, is_tensor, NaN, pack, product = ctx.INF, ctx.is_tensor, ctx.NaN, ctx.pack, ctx.product
  local qlua, R, SAFE_ELEMS, same_list = ctx.qlua, ctx.R, ctx.SAFE_ELEMS, ctx.same_list
  local geom, new_callrec, pool_pick = ctx.geom, ctx.new_callrec, ctx.pool_pick
  local pool_pick_shaped, tdevice = ctx.pool_pick_shaped, ctx.tdevice
  local fmt, info, name_object, register = ctx.fmt, ctx.info, ctx.name_object, ctx.register

  -- ------------------------------------------------------------- junk values
  local SPECIAL_NUMBERS = {
    0, 1, -1, 2, 3, 0.5, -0.5, 1.5, 2.0, -0.0, NaN, INF, -INF,
    math.maxinteger, math.mininteger, 2.0 ^ 63, -2.0 ^ 63, 2 ^ 53, (1 << 53) + 1,
    1 << 31, (1 << 31) - 1, 1 << 32, -(1 << 31), 1 << 50, 2.0 ^ 50, 1e300, -1e300, 1e-300,
    5e-324, 16, 17, 64, 100, math.pi,
  }
  -- every dtype, and the float ones, in the dtype list's order (the registry's qlua.ops)
  local DTYPES, FLOAT_DTYPES, FLOAT_SET = {}, {}, {}
  for _, d in ipairs(ctx.OPS.dtypes) do
    DTYPES[#DTYPES + 1] = d.name
    if d.kind == "float" or d.kind == "half" then
      FLOAT_DTYPES[#FLOAT_DTYPES + 1] = d.name
      FLOAT_SET[d.name] = true
    end
  end
  local DEVICES = has_gpu and { "cpu", "gpu", "gpu:0" } or { "cpu" }
  local BAD_NAMES = { "", "x", "float8", "half", "bool", "gpu:1", "gpu:99", "gpu:-1",
                      "gpu:", "gpu:0x1", "gpu:99999999999", "cuda", "CPU", "cpu ", "gpu:0\0",
                      "3", "-1", "1e300", "nan", " 0x10 ", "%s%n%d", ("x"):rep(1000) }
  local CYCLE = {}
  CYCLE[1] = CYCLE
  name_object(CYCLE, "CYCLE", "{}; CYCLE[1] = CYCLE")
  local CYCLE2 = { 1, 2 }
  CYCLE2[3] = CYCLE2
  name_object(CYCLE2, "CYCLE2", "{1, 2}; CYCLE2[3] = CYCLE2")
  local function nest(depth, leaf)
    local t = leaf
    for _ = 1, depth do t = { t } end
    return t
  end
  local DEEP17 = name_object(nest(17, 1), "DEEP17",
    "(function() local t = 1; for _ = 1, 17 do t = {t} end; return t end)()")
  local DEEP200 = name_object(nest(200, 1.5), "DEEP200",
    "(function() local t = 1.5; for _ = 1, 200 do t = {t} end; return t end)()")
  local HOLEY = name_object({ 1, nil, 3 }, "HOLEY", "{1, nil, 3}")
  local WITH_MT = name_object(setmetatable({ 2, 3 }, { __len = function() return 7 end,
    __index = function() return 5 end }), "WITH_MT",
    "setmetatable({2, 3}, {__len = function() return 7 end, __index = function() return 5 end})")
  local CO = name_object(coroutine.create(print), "CO", "coroutine.create(print)")
  local JUNK_FN = name_object(function() return 1 end, "JUNK_FN", "function() return 1 end")
  name_object(io.stdout, "io.stdout", "io.stdout")
  local JUNK_TABLES = { {}, { 1, 2 }, { 2, 3 }, { 0 }, { -1 }, { 1.5 }, { "a" }, { {} },
    { { 1, 2 }, { 3 } }, { dtype = "float64" }, { dtype = "bogus" }, { device = "gpu:7" },
    { device = 5 }, { dtype = 3 }, { foo = 1 }, { [1.5] = 2 }, { NaN }, { INF },
    { math.maxinteger }, { 1 << 50, 1 << 50 }, { 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
    15, 16, 17, 18 }, { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 }, CYCLE, CYCLE2,
    DEEP17, DEEP200, HOLEY, WITH_MT, { true }, { 1, "2", 3 } }

  local function g_number()
    if R:chance(0.5) then return R:pick(SPECIAL_NUMBERS) end
    if R:chance(0.5) then return R:int(-6, 6) end
    return (R:float() - 0.5) * 20
  end

  local function g_junk()
    local kind = R:weighted({ { 6, "nil" }, { 3, "bool" }, { 20, "number" }, { 10, "string" },
      { 14, "table" }, { 2, "function" }, { 1, "thread" }, { 1, "userdata" },
      { 25, "tensor" }, { 4, "freed" } })
    if kind == "nil" then return nil end
    if kind == "bool" then return R:chance(0.5) end
    if kind == "number" then return g_number() end
    if kind == "string" then
      return R:chance(0.5) and R:pick(BAD_NAMES) or R:pick(DTYPES)
    end
    if kind == "table" then return R:pick(JUNK_TABLES) end
    if kind == "function" then return JUNK_FN end
    if kind == "thread" then return CO end
    if kind == "userdata" then return io.stdout end
    if kind == "freed" then
      for _ = 1, 6 do
        local t = pool_pick()
        if t and not geom(t) then return t end
      end
    end
    return pool_pick()
  end

  -- ------------------------------------------------------------- plausible values
  local function g_dim(shape)
    local nd = shape and #shape or 2
    if nd > 0 and R:chance(0.85) then return R:int(1, nd) end
    return R:pick({ 0, nd + 1, -1, 1.5, nd, 17, math.maxinteger, NaN, 1 })
  end
  local function g_pos(size)        -- a 1-based position along a dim of `size`
    if size > 0 and R:chance(0.85) then return R:int(1, size) end
    return R:pick({ 0, size + 1, -1, size, 1, math.mininteger, 2 ^ 53, 1.5 })
  end
  local function g_shape(maxnumel)
    local shape = {}
    if (maxnumel or CAP) >= CAP and R:chance(0.06) then
      -- larger, odd sizes: the vectorised and blocked loops, the summarised printing
      for i = 1, R:int(1, 3) do shape[i] = R:pick({ R:int(65, 4096), R:int(7, 97), 1, 64, 256 }) end
    else
      local nd = R:weighted({ { 10, 0 }, { 30, 1 }, { 30, 2 }, { 18, 3 }, { 8, 4 }, { 3, 5 },
                              { 1, 16 } })
      for i = 1, nd do
        if nd > 4 then shape[i] = R:int(1, 2)
        else shape[i] = R:weighted({ { 5, 0 }, { 20, 1 }, { 60, R:int(2, 5) }, { 15, R:int(6, 64) } }) end
      end
    end
    while product(shape) > (maxnumel or CAP) do
      local big = 1
      for i = 2, #shape do if shape[i] > shape[big] then big = i end end
      shape[big] = shape[big] // 2
    end
    return shape
  end
  -- a shape as call arguments: one table, or the sizes as numbers
  local function shape_args(shape, args)
    args = args or pack()
    if #shape == 0 or R:chance(0.5) then
      args.n = args.n + 1
      args[args.n] = shape
    else
      for i = 1, #shape do args.n = args.n + 1; args[args.n] = shape[i] end
    end
    return args
  end
  local function g_opts(float_only)
    local r = R:float()
    if r < 0.35 then return nil end
    local o = {}
    if R:chance(0.8) then
      o.dtype = float_only and R:pick(FLOAT_DTYPES) or R:pick(DTYPES)
    end
    if R:chance(0.4) then o.device = R:pick(DEVICES) end
    return o
  end

  -- ------------------------------------------------------------- the allocation guard
  -- The element count a creation call would ask for, from its shape arguments as the
  -- binding reads them (one table, or consecutive numbers); nil when unknown or invalid.
  local function shape_from_args(args, first, one_only)
    local v = args[first]
    local shape = {}
    if type(v) == "table" then
      for i = 1, math.min(rawlen(v), 17) do
        local s = as_integer(rawget(v, i))
        if not s then return nil end
        shape[i] = s
      end
      return shape
    end
    local i = first
    while i <= args.n and type(args[i]) == "number" do
      local s = math.tointeger(args[i])
      if not s then return nil end
      shape[#shape + 1] = s
      if one_only then break end
      i = i + 1
    end
    return shape
  end
  local function elems_ok(count)
    return count == nil or count ~= count or count <= SAFE_ELEMS or count >= HUGE_ELEMS
  end
  local function shape_ok(shape)
    if not shape then return true end
    for i = 1, #shape do if shape[i] < 0 then return true end end
    return elems_ok(product(shape))
  end
  -- Conservative: every table argument and every run of number arguments is read as a
  -- shape, wherever the mutation put it.
  local function any_shape_ok(a)
    for i = 1, a.n do
      if type(a[i]) == "table" and not shape_ok(shape_from_args(a, i)) then return false end
      if type(a[i]) == "number" and (i == 1 or type(a[i - 1]) ~= "number")
         and not shape_ok(shape_from_args(a, i)) then return false end
    end
    return true
  end
  local GUARDS = {
    empty = any_shape_ok, full = any_shape_ok, randint = any_shape_ok,
    range = function(a)
      if not any_shape_ok(a) then return false end
      local first, last, step = tonumber(a[1]), tonumber(a[2]), tonumber(a[3])
      if type(a[3]) ~= "number" and type(a[3]) ~= "string" then step = 1 end
      if not (first and last and step) or step == 0 then return true end
      return elems_ok(math.abs((last - first) / step) + 1)
    end,
  }
  GUARDS.zeros, GUARDS.ones, GUARDS.rand, GUARDS.randn =
    any_shape_ok, any_shape_ok, any_shape_ok, any_shape_ok
  -- the creation functions that take a count: a mutated count of 2^31 (a float32 tensor
  -- of 8 GiB, which ASan's 8192 MB cap lets through) would run for minutes
  local function count_ok(v)
    local c = as_integer(v)
    return c == nil or elems_ok(c)
  end
  GUARDS.linspace = function(a) return count_ok(a[3]) end
  GUARDS.logspace = function(a) return count_ok(a[3]) end
  GUARDS.randperm = function(a) return count_ok(a[1]) end
  GUARDS.eye = function(a)
    local r, c = as_integer(a[1]), as_integer(a[2])
    if r == nil then return true end
    return elems_ok((r + 0.0) * (c or r))
  end
  GUARDS.arange = GUARDS.range

  -- ------------------------------------------------------------- tensors and index arguments
  -- index arguments: a table (converted by the binding) or an index tensor
  local function make_index_tensor(nested, dev)
    local opts2 = { dtype = R:chance(0.6) and "int64" or "int32", device = dev }
    local ok, t = pcall(qlua.tensor, nested, opts2)
    if ok and is_tensor(t) then
      local refs = {}
      local callrec = new_callrec("qlua.tensor(" .. fmt(nested, refs) .. ", " .. fmt(opts2, refs) .. ")", refs)
      register(t, callrec, 1, 1)
      return t
    end
    return nested
  end
  local function nested_values(shape, d, gen)
    if d > #shape then return gen() end
    local t = {}
    for i = 1, shape[d] do t[i] = nested_values(shape, d + 1, gen) end
    return t
  end
  local function g_index(shape, hi, dev)
    local bad = R:chance(0.12)
    local function value()
      if bad and R:chance(0.3) then
        return R:pick({ 0, hi + 1, -1, math.maxinteger, math.mininteger, 1.5, 2.0 ^ 63, NaN })
      end
      if hi <= 0 then return 1 end
      return R:int(1, hi)
    end
    local nested = nested_values(shape, 1, value)
    if #shape == 0 then nested = value() end
    if #shape > 0 and R:chance(0.5) and not bad then return nested end
    if type(nested) ~= "table" then return make_index_tensor(nested, dev) end
    return make_index_tensor(nested, dev)
  end
  -- a tensor with a given shape (for src arguments); from the pool when one fits
  local function make_tensor_shaped(shape, dtype, dev)
    local t = pool_pick_shaped(function(s) return same_list(s, shape) end)
    if t and R:chance(0.5) then return t end
    local o = { dtype = dtype or R:pick(DTYPES), device = dev }
    local ok, r = pcall(qlua.ones, shape, o)
    if ok and is_tensor(r) then
      local callrec = new_callrec("qlua.ones(" .. fmt(shape, {}) .. ", " .. fmt(o, {}) .. ")")
      register(r, callrec, 1, 1)
      return r
    end
    return t
  end

  -- A key for t[key] and t[key] = v: a Torch7 index table, a bool mask of self's
  -- shape (or of another), or int32/int64 positions along dim 1, mostly in range.
  local function g_key(shape, self)
    local r = R:float()
    if r < 0.4 then
      local key = {}
      for d = 1, R:int(0, #shape + (R:chance(0.1) and 1 or 0)) do
        local size = math.max(shape[d] or 1, 1)
        key[d] = R:pick({ R:int(-size, size), {}, { R:int(1, size), size }, { 1, size, 2 },
                          { -1, 1 }, { R:int(1, size), R:int(1, size), R:int(1, 3) } })
      end
      return key
    elseif r < 0.7 then
      local s = R:chance(0.85) and shape or g_shape(16)
      local dev = R:chance(0.9) and tdevice(self) or R:pick(DEVICES)
      local o = { dtype = "bool", device = dev }
      local ok, m = pcall(qlua.rand, s, { device = dev })
      if ok and is_tensor(m) then
        local ok2, mask = pcall(m.gt, m, 0.5)
        if ok2 and is_tensor(mask) then
          register(mask, new_callrec("qlua.rand(" .. fmt(s, {}) .. ", " .. fmt({ device = dev }, {}) ..
            "):gt(0.5)"), 1, 1)
          return mask
        end
      end
      return make_tensor_shaped(s, o.dtype, dev)
    else
      local n = math.max(shape[1] or 1, 1)
      local k = R:int(0, 6)
      local o = { dtype = R:pick({ "int64", "int32" }), device = tdevice(self) }
      local lo, hi = 1, n
      if R:chance(0.15) then lo, hi = -n, n + 1 end             -- some out of range
      local ok, idx = pcall(qlua.randint, lo, hi, k, o)
      if ok and is_tensor(idx) then
        register(idx, new_callrec(("qlua.randint(%d, %d, %d, %s)"):format(lo, hi, k, fmt(o, {}))), 1, 1)
        return idx
      end
      return make_tensor_shaped({ k }, o.dtype, o.device)
    end
  end

  -- ------------------------------------------------------------- operands
  local function g_like(a, shape, self)
    -- a tensor broadcastable to self (copy_ source) or a junk one
    local r = R:float()
    local s = { table.unpack(shape) }
    if r < 0.3 then
      for i = 1, #s do if R:chance(0.3) then s[i] = 1 end end
      while #s > 0 and R:chance(0.2) do table.remove(s, 1) end
    elseif r < 0.4 then
      s = g_shape(64)
    end
    a.n = a.n + 1
    if r < 0.55 then
      a[a.n] = make_tensor_shaped(s, R:pick(DTYPES), R:pick(DEVICES))
    elseif r < 0.68 then
      a[a.n] = self
    elseif r < 0.78 and is_tensor(self) and #shape >= 1 then
      -- an operand that overlaps self in memory: in-place ops must cope with aliasing
      local ok, v, text
      local refs = {}
      if #shape >= 2 and R:chance(0.5) then
        ok, v = pcall(self.transpose, self, 1, #shape)
        text = string.format("%s:transpose(1, %d)", fmt(self, refs), #shape)
      elseif R:chance(0.5) then
        local len = math.min(1, shape[#shape])
        ok, v = pcall(self.narrow, self, #shape, 1, len)
        text = string.format("%s:narrow(%d, 1, %d)", fmt(self, refs), #shape, len)
      else
        ok, v = pcall(self.expand, self, shape)
        text = string.format("%s:expand(%s)", fmt(self, refs), fmt(shape, refs))
      end
      if ok and is_tensor(v) then
        register(v, new_callrec(text, refs), 1, 1, info[self], true)
        a[a.n] = v
      else
        a[a.n] = self
      end
    else
      a[a.n] = pool_pick()
    end
  end
  local function g_operand(a, shape, self)
    local r = R:float()
    if r < 0.4 then
      a.n = a.n + 1
      a[a.n] = g_number()
    else
      g_like(a, shape, self)
    end
  end

  ctx.SPECIAL_NUMBERS, ctx.DTYPES, ctx.FLOAT_DTYPES = SPECIAL_NUMBERS, DTYPES, FLOAT_DTYPES
  ctx.FLOAT_SET, ctx.DEVICES, ctx.BAD_NAMES = FLOAT_SET, DEVICES, BAD_NAMES
  ctx.JUNK_TABLES, ctx.g_number, ctx.g_junk, ctx.g_dim = JUNK_TABLES, g_number, g_junk, g_dim
  ctx.g_pos, ctx.g_shape, ctx.shape_args, ctx.g_opts = g_pos, g_shape, shape_args, g_opts
  ctx.GUARDS, ctx.shape_from_args, ctx.nested_values = GUARDS, shape_from_args, nested_values
  ctx.g_index, ctx.make_tensor_shaped, ctx.g_key = g_index, make_tensor_shaped, g_key
  ctx.g_like, ctx.g_operand = g_like, g_operand
end
