--[=[
lua/qlua/fuzz.lua — the API fuzzer: no input crashes qlua, whatever a script does.

  qlua lua/qlua/fuzz.lua [N [SEED]] [options]        (make fuzz N=100000 SEED=1)
    --last FILE   before each call, overwrite FILE with "seed S iteration K: <call>", so
                  that when the process dies (a crash, a sanitizer report) the call that
                  was running is on disk; `make fuzz` prints it
    --show K      replay the run silently up to iteration K, then print iteration K's
                  call and the calls that made the tensors it uses (a reproducer
                  script), without making it
    --trace       print every call on stderr before making it
    --stats       per-function counts (returned / raised) after the summary
    --quiet       no progress lines, only the findings and the summary
    --slow        print on stderr every call that took more than 50 ms of CPU time
    --only NAMES  call only these functions (comma-separated: "gather,take,__index"); the
                  pool is still filled by the creation functions
    --max-print M print at most M reproducers per kind of finding (default 3)

  As a library: require("qlua.fuzz").run{ n = 2000, seed = 1, quiet = true } returns
  { calls =, returned =, raised =, findings = { {iteration =, call =, problem =,
  reproducer =}, ... } }.

Each iteration makes one call of the public API (docs/API.md): a module function, a
method, an operator (+ - * / ^ unary -, #, t[k], t[k] = v, tostring, <close>) or a
metamethod called directly, with arguments drawn from a seeded generator: mostly
plausible ones (dims in range, index tables that fit, broadcastable shapes), then
mutated with junk (wrong types, nil, NaN, +-inf, huge and negative numbers, non-integer
floats, 0 and out-of-range dims, freed tensors, views of freed storage, other dtypes and
devices, empty and 0-d tensors, cyclic and deep tables, odd strings).

A call passes when it either
  - returns a valid result: tensors that are live and have a sane geometry (dim, shape,
    strides, numel agree; a known dtype and device; readable), the result shape the API
    promises where that is simple to state, self for in-place ops, numbers, strings,
    tables of the right kind; or
  - raises a Lua error whose message is a string that names the function: it starts
    with "name:" (after the "fuzz:1: " position Lua adds) or is Lua's standard
    "bad argument #n to 'name'" / "calling 'name' on bad self".
Anything else is a finding: printed with the seed, the iteration and the call (and a
reproducer script); the exit status is 1 when there were any. A crash cannot be
reported from inside, which is what --last is for.

The generator is this file's own (splitmix64), not qlua.seed: the sequence of calls
depends only on N's prefix and SEED, so `fuzz.lua K SEED` replays the first K calls of
any longer run. Tensors stay small (at most CAP elements) so 100000 calls take minutes;
deliberately huge shapes are either larger than any machine (>= 2^46 elements, so the
allocation must fail) or overflow int64 — sizes in between are never asked for, since
they would succeed slowly or exhaust the machine rather than find a bug.

Files: qlua.save / qlua.load and qlua.save_safetensors / qlua.load_safetensors only ever
see paths inside a fresh temporary directory (removed at the end), whatever the mutation
put there. Most load_safetensors calls load a file their generator has just written: a
valid .safetensors file with a few mutations (header text, dtypes, offsets, the length
field, the data's length, raw bytes), left as mut.safetensors when the process dies.

The parts, each a function of the run's shared table (ctx) that takes what it needs from it
and adds what it makes: fuzz/record.lua (where each tensor came from, the reproducers),
fuzz/files.lua (the temporary directory and the files the load functions read),
fuzz/gen.lua (the argument generators the entries share) and fuzz/entries/<family>.lua
(the entries, one file per family of the API, loaded in ENTRY_FAMILIES' order: the order
of the entries is part of what a seed replays). This file is the command line, the
generator, the pool of values, the result checks and the loop.
]=]

local M = {}

-- The parts live in fuzz/ beside this file. Run as `qlua lua/qlua/fuzz.lua`, the folder
-- above this one goes on package.path, so that require finds qlua.fuzz.* from any directory.
local here = debug.getinfo(1, "S").source:match("^@(.*)[/\\]") or "."
if not package.path:find(here .. "/../?.lua", 1, true) then
  package.path = here .. "/../?.lua;" .. package.path
end

-- The entry families in the order their entries are made (fuzz/entries/<name>.lua). Each
-- kind (method, module function, operator, metamethod) is drawn from its own list in this
-- order, so reordering the families changes the calls every seed makes.
local ENTRY_FAMILIES = { "inspect", "view", "move", "index", "elementwise", "reduce", "matmul",
                         "scan", "mask", "sort", "functions", "formats", "shape", "conveniences",
                         "operators", "meta", "nn", "dist" }

local CAP = 4096            -- most elements of a tensor the fuzzer keeps or reads
local POOL_MAX = 48         -- live values the calls draw their tensors from
local HUGE_ELEMS = 2.0 ^ 46 -- from here on, an allocation must fail (>= 2^48 bytes)
local SAFE_ELEMS = 2.0 ^ 22 -- below this, an allocation is cheap enough to allow

-- ===================================================================== the generator

-- splitmix64 over Lua's wrapping 64-bit integers: fast, seedable, independent of qlua.
local Rng = {}
Rng.__index = Rng

local function new_rng(seed)
  return setmetatable({ state = seed ~ 0x5DEECE66D }, Rng)
end

function Rng:next64()
  self.state = self.state + 0x9E3779B97F4A7C15
  local z = self.state
  z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
  z = (z ~ (z >> 27)) * 0x94D049BB133111EB
  return z ~ (z >> 31)
end

function Rng:int(lo, hi)            -- uniform in lo..hi (inclusive), hi - lo < 2^62
  return lo + (self:next64() >> 2) % (hi - lo + 1)
end

function Rng:float()                -- uniform in [0, 1)
  return (self:next64() >> 11) * (1.0 / 9007199254740992.0)
end

function Rng:chance(p) return self:float() < p end

function Rng:pick(list) return list[self:int(1, #list)] end

-- A weighted choice: list of {weight, value}.
function Rng:weighted(list)
  local total = 0
  for _, w in ipairs(list) do total = total + w[1] end
  local x = self:float() * total
  for _, w in ipairs(list) do
    x = x - w[1]
    if x < 0 then return w[2] end
  end
  return list[#list][2]
end

-- ===================================================================== helpers

local NaN = 0 / 0
local INF = math.huge

local function pack(...) return { n = select("#", ...), ... } end

local function product(shape)
  local p = 1.0
  for i = 1, #shape do p = p * shape[i] end
  return p
end

-- The product of the sizes with zeros counted as ones: what walking the tensor's rows
-- (totable, printing, broadcasting against it) costs even when it has no elements.
local function span(shape)
  local p = 1.0
  for i = 1, #shape do p = p * math.max(shape[i], 1) end
  return p
end

local function same_list(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

local function list_str(l)
  local parts = {}
  for i = 1, #l do parts[i] = tostring(l[i]) end
  return "{" .. table.concat(parts, ", ") .. "}"
end

-- An integer from a number, or from a numeric string where the binding converts them
-- too (lua_tointegerx); nil otherwise.
local function as_integer(v)
  if type(v) == "string" then v = tonumber(v) end
  if type(v) ~= "number" then return nil end
  return math.tointeger(v)
end

-- NumPy broadcasting of two shapes; nil when they do not broadcast.
local function broadcast(a, b)
  local n = math.max(#a, #b)
  local out = {}
  for i = 1, n do
    local x = a[#a - n + i] or 1
    local y = b[#b - n + i] or 1
    if x == y or y == 1 then out[i] = x
    elseif x == 1 then out[i] = y
    else return nil end
  end
  return out
end

-- The shape of an index argument: a tensor's shape, or a nested table's along first
-- elements (what lq_fromtable infers); nil when unknown.
local function shape_of_nested(v)
  local shape = {}
  while type(v) == "table" and #shape <= 16 do
    local n = rawlen(v)
    shape[#shape + 1] = n
    if n == 0 then break end
    v = rawget(v, 1)
  end
  return shape
end


-- ===================================================================== the fuzzer

--[[
One fuzzing run. Its state lives in this call (its locals and ctx), so that a spec
or another program can run several in one process. opts: n, seed, last (path), trace,
show (iteration), quiet, stats, max_print, out (a function printing a line).
]]
function M.run(opts)
  opts = opts or {}
  local qlua = opts.qlua or rawget(_G, "qlua") or require("qlua")
  local out = opts.out or function(s) io.stdout:write(s, "\n"); io.stdout:flush() end
  local n_iter = opts.n or 10000
  local seed = opts.seed or 1
  local R = new_rng(seed)
  local has_gpu = qlua.gpu_count() > 0

  local report = { seed = seed, calls = 0, returned = 0, raised = 0, findings = {},
                   kinds = {}, stats = {} }

  -- the tensor metatable, the methods table and one method closure per name
  local probe = qlua.zeros(1)
  local TENSOR_MT = getmetatable(probe)
  local METHODS = TENSOR_MT.__methods
  probe:free()
  local function is_tensor(v) return getmetatable(v) == TENSOR_MT and type(v) == "userdata" end

  -- The parts of the run share its state through ctx (see the header): each part reads
  -- what it needs from ctx and adds what it makes for the parts after it.
  -- the op and dtype lists, where the runtime makes them (the registry's qlua.ops)
  local OPS = debug.getregistry()["qlua.ops"]
  assert(type(OPS) == "table", "fuzz: this qlua has no qlua.ops list in its registry")
  local ctx = { qlua = qlua, R = R, has_gpu = has_gpu, report = report, opts = opts, OPS = OPS,
                TENSOR_MT = TENSOR_MT, METHODS = METHODS, is_tensor = is_tensor, NaN = NaN,
                INF = INF, CAP = CAP, POOL_MAX = POOL_MAX, HUGE_ELEMS = HUGE_ELEMS,
                SAFE_ELEMS = SAFE_ELEMS, pack = pack, product = product, span = span,
                same_list = same_list, list_str = list_str, as_integer = as_integer,
                broadcast = broadcast, shape_of_nested = shape_of_nested }

  -- ------------------------------------------------------------- provenance of tensors
  -- callrec = { seq, no, text, refs = {rec...} }: one call of iteration seq; the tensors'
  -- recs, their labels and the reproducers are fuzz/record.lua's
  local iteration = 0
  local callno = 0            -- orders calls made within one iteration
  local function new_callrec(text, refs)
    callno = callno + 1
    return { seq = iteration, no = callno, text = text, refs = refs or {} }
  end
  ctx.new_callrec = new_callrec
  require("qlua.fuzz.record")(ctx)
  local info, fmt, fmt_args = ctx.info, ctx.fmt, ctx.fmt_args
  local register, add_event, reproducer = ctx.register, ctx.add_event, ctx.reproducer

  -- ------------------------------------------------------------- files for save/load
  require("qlua.fuzz.files")(ctx)
  local tmpdir, LOAD_PATHS, ST_LOAD_PATHS = ctx.tmpdir, ctx.LOAD_PATHS, ctx.ST_LOAD_PATHS
  local cleanup_files = ctx.cleanup_files

  -- ------------------------------------------------------------- the pool of values
  local pool = {}
  local function pool_add(t)
    if #pool < POOL_MAX then pool[#pool + 1] = t
    else pool[R:int(1, POOL_MAX)] = t end
  end
  local function pool_pick()
    if #pool == 0 then return nil end
    return pool[R:int(1, #pool)]
  end
  -- geometry of a tensor, or nil when it cannot be read (freed, released)
  local function geom(t)
    if not is_tensor(t) then return nil end
    local ok, shape = pcall(t.shape, t)
    if not ok then return nil end
    return shape
  end
  local function tdtype(t) local ok, d = pcall(t.dtype, t); return ok and d or nil end
  local function tdevice(t) local ok, d = pcall(t.device, t); return ok and d or "cpu" end
  local function pool_pick_shaped(pred)
    for _ = 1, 6 do
      local t = pool_pick()
      local s = t and geom(t)
      if s and pred(s, t) then return t, s end
    end
    return nil
  end
  ctx.pool_pick, ctx.pool_pick_shaped, ctx.geom = pool_pick, pool_pick_shaped, geom
  ctx.tdtype, ctx.tdevice = tdtype, tdevice

  -- ------------------------------------------------------------- argument generators
  require("qlua.fuzz.gen")(ctx)
  local DTYPES, DEVICES, FLOAT_SET, GUARDS = ctx.DTYPES, ctx.DEVICES, ctx.FLOAT_SET, ctx.GUARDS
  local g_number, g_junk, g_shape = ctx.g_number, ctx.g_junk, ctx.g_shape

  -- ------------------------------------------------------------- result checks
  local DTYPE_SET = {}
  for _, d in ipairs(ctx.OPS.dtypes) do DTYPE_SET[d.name] = true end

  local DEFERRED = { "gather", "take", "index_select", "scatter_", "index_add_", "scatter_add_",
                     "index_fill_", "index_copy_" }
  local function deferred_error(msg)
    local head = msg:gsub("^[^:\n]*:%d+: ", "", 1):match("^([%w_]+):")
    for _, n in ipairs(DEFERRED) do if head == n then return true end end
    return false
  end

  -- An element read back to Lua: a number, or a boolean for a bool tensor.
  local function is_element(v) return type(v) == "number" or type(v) == "boolean" end

  -- nil when t is a live tensor with a sane geometry, else what is wrong
  local function tensor_problem(t)
    if not is_tensor(t) then return "result is a " .. type(t) .. ", not a tensor" end
    local ok, shape = pcall(t.shape, t)
    if not ok then return "result tensor is not usable: " .. tostring(shape) end
    local dim, numel, stride = t:dim(), t:numel(), t:stride()
    if math.type(dim) ~= "integer" or dim < 0 or dim > 16 then return "dim() is " .. tostring(dim) end
    if #shape ~= dim then return "shape() has " .. #shape .. " sizes for dim() " .. dim end
    if #stride ~= dim then return "stride() has " .. #stride .. " entries for dim() " .. dim end
    for i = 1, dim do
      if math.type(shape[i]) ~= "integer" or shape[i] < 0 then return "shape() is " .. list_str(shape) end
      if math.type(stride[i]) ~= "integer" or stride[i] < 0 then return "stride() is " .. list_str(stride) end
    end
    local p = product(shape)
    if p >= 2.0 ^ 63 then
      return "shape " .. list_str(shape) .. " has more elements than int64 can count (numel() says "
             .. tostring(numel) .. ")"
    end
    if p < 2.0 ^ 53 and numel ~= math.tointeger(p) then
      return "numel() " .. tostring(numel) .. " for shape " .. list_str(shape)
    end
    if not DTYPE_SET[t:dtype()] then return "dtype() is " .. tostring(t:dtype()) end
    local dev = t:device()
    if dev ~= "cpu" and not tostring(dev):match("^gpu:%d+$") then return "device() is " .. tostring(dev) end
    if type(t:is_contiguous()) ~= "boolean" then return "is_contiguous() is not a boolean" end
    if #t:shape() ~= dim or t:shape() == shape then return "shape() is not a fresh table" end
    return nil
  end

  -- Reads every element of a small result (the sanitizers see a bad geometry here).
  local function read_problem(t)
    local s = geom(t)
    if not s or span(s) > CAP then return nil end
    local ok2, tab = pcall(t.totable, t)
    if not ok2 then
      -- on a GPU, an index error of an earlier call surfaces at the next read (API.md)
      if has_gpu and type(tab) == "string" and deferred_error(tab) then return nil end
      return "reading the result failed: " .. tostring(tab)
    end
    local shape = t:shape()
    if #shape == 0 then
      if not is_element(tab) then return "totable() of a 0-d tensor is a " .. type(tab) end
    elseif type(tab) ~= "table" or #tab ~= shape[1] then
      return "totable() does not match shape " .. list_str(shape)
    end
    return nil
  end

  local function removed(shape, dim)
    local s = {}
    for i = 1, #shape do if i ~= dim then s[#s + 1] = shape[i] end end
    return s
  end

  -- ------------------------------------------------------------- the API
  --[[
  entries: name, kind ("method", "module", "op", "meta"), gen (fills args; returns false
  to skip), ret (what a success returns), expect (optional: problem string or nil from
  self's shape, args, results), shares (the result may share self's storage), mutates
  (a success changes self's storage: recorded for reproducers), names (accepted names in
  messages), uninit (the result's contents are whatever the memory held: zeroed before
  it joins the pool), weight.
  ]]
  local ENTRIES = {}
  local function entry(e)
    e.names = e.names or { e.name }
    e.weight = e.weight or 1
    ENTRIES[#ENTRIES + 1] = e
    report.stats[e.kind .. " " .. e.name] = { ok = 0, err = 0 }
    return e
  end

  -- expectation helpers over (shape = self's shape, args = the call's args after self)
  local function expect_shape(want)
    return function(shape, args, res)
      local w = want(shape, args)
      if not w then return nil end
      local got = geom(res[1])
      if got and not same_list(got, w) then
        return "result shape " .. list_str(got) .. ", expected " .. list_str(w)
      end
    end
  end
  local function same_as_self(shape) return shape end
  local same_shape_expect = expect_shape(same_as_self)
  -- a binary op's result: self's shape with a number, broadcast with a tensor operand
  local function binary_expect(shape, a, res)
    local got = geom(res[1])
    if not got then return nil end
    local want
    if type(a[1]) == "number" then want = shape
    elseif is_tensor(a[1]) and geom(a[1]) then want = broadcast(shape, geom(a[1])) end
    if want and not same_list(got, want) then
      return "result shape " .. list_str(got) .. ", expected " .. list_str(want)
    end
  end

  ctx.DTYPE_SET, ctx.deferred_error, ctx.is_element = DTYPE_SET, deferred_error, is_element
  ctx.tensor_problem, ctx.read_problem, ctx.removed = tensor_problem, read_problem, removed
  ctx.entry, ctx.expect_shape, ctx.same_as_self = entry, expect_shape, same_as_self
  ctx.same_shape_expect, ctx.binary_expect = same_shape_expect, binary_expect

  -- ------------------------------------------------------------- the entries
  for _, family in ipairs(ENTRY_FAMILIES) do require("qlua.fuzz.entries." .. family)(ctx) end

  -- ------------------------------------------------------------- compiled call wrappers
  -- Each call goes through a small chunk whose local (or method, or field) carries the
  -- function's name, so Lua's "bad argument #n to 'name'" can name it.
  local ENV = { table = table, tostring = tostring, getmetatable = getmetatable }
  local function compile(src, ...)
    local chunk = assert(load(src, "=fuzz", "t", ENV))
    return chunk(...)
  end
  for _, e in ipairs(ENTRIES) do
    if e.kind == "method" then
      e.call_self = compile(string.format(
        "return function(self, ...) return table.pack(self:%s(...)) end", e.name))
      e.call_local = compile(string.format(
        "local %s = ...; return function(...) return table.pack(%s(...)) end", e.name, e.name),
        METHODS[e.name])
      assert(METHODS[e.name], "fuzz: no method " .. e.name)
    elseif e.kind == "module" then
      e.call = compile(string.format(
        "local qlua = ...; return function(...) return table.pack(qlua.%s(...)) end", e.name), qlua)
      local fn = qlua   -- a dotted name ("dist.all_reduce") is a function of a submodule
      for part in e.name:gmatch("[^.]+") do fn = type(fn) == "table" and fn[part] or nil end
      assert(fn, "fuzz: no function qlua." .. e.name)
      if e.silent then   -- the global print is a no-op during the call (help's output)
        local call = e.call
        e.call = function(...)
          local saved = _G.print
          _G.print = function() end
          local r = table.pack(pcall(call, ...))
          _G.print = saved
          if not r[1] then error(r[2], 0) end
          return r[2]
        end
      end
    elseif e.kind == "op" then
      if e.src == "close" then
        e.call = compile("return function(a) do local x <close> = a end return table.pack() end")
      elseif e.src == "a[b] = c" then
        e.call = compile("return function(a, b, c) a[b] = c return table.pack() end")
      else
        e.call = compile("return function(a, b) return table.pack(" .. e.src .. ") end")
      end
    elseif e.kind == "meta" then
      e.call = compile(string.format(
        "local %s = ...; return function(...) return table.pack(%s(...)) end", e.name, e.name),
        TENSOR_MT[e.name])
    end
  end

  -- ------------------------------------------------------------- judging a call
  local function names_function(msg, names, kind, args)
    msg = msg:gsub("^[^:\n]*:%d+: ", "", 1)
    local head = msg:match("^([%w_]+):") or msg:match("^bad argument #%d+ to '([^']*)'")
                 or msg:match("^calling '([^']*)' on bad self")
    if head then
      for _, n in ipairs(names) do if head == n then return true end end
      if head == "?" and kind == "op" then
        for i = 1, args.n do if type(args[i]) == "string" then return true end end
      end
      if has_gpu and deferred_error(msg) then return true end
    end
    return false
  end

  local function call_text(e, form, args, refs)
    if e.kind == "method" then
      if form == "self" then
        return fmt(args[1], refs) .. ":" .. e.name .. "(" .. fmt_args(args, 2, refs) .. ")"
      end
      local holder = args[1]
      if not is_tensor(holder) then holder = pool[1] end
      return fmt(holder, refs) .. "." .. e.name .. "(" .. fmt_args(args, 1, refs) .. ")"
    elseif e.kind == "module" then
      return "qlua." .. e.name .. "(" .. fmt_args(args, 1, refs) .. ")"
    elseif e.kind == "meta" then
      local holder = pool[1]
      for i = 1, args.n do if is_tensor(args[i]) then holder = args[i]; break end end
      return "getmetatable(" .. fmt(holder, refs) .. ")." .. e.name .. "(" .. fmt_args(args, 1, refs) .. ")"
    end
    local a, b, c = fmt(args[1], refs), fmt(args[2], refs), fmt(args[3], refs)
    if e.src == "close" then return "do local x <close> = " .. a .. " end" end
    if e.src == "a[b] = c" then return a .. "[" .. b .. "] = " .. c end
    if e.src == "a[b]" then return a .. "[" .. b .. "]" end
    if e.src == "-a" then return "-" .. a end
    if e.src == "#a" then return "#" .. a end
    if e.src == "tostring(a)" then return "tostring(" .. a .. ")" end
    return a .. e.src:sub(2, -2) .. b
  end

  local last_file
  if opts.last then
    last_file = io.open(opts.last, "w")
    if last_file then last_file:setvbuf("no") end
  end
  local last_max = 0          -- longest record written: shorter ones are padded over it

  local function finding(callrec, problem, key_name)
    local key = key_name .. ": " .. problem:gsub("T%d+", "T#"):gsub("%d+", "#"):sub(1, 100)
    local count = (report.kinds[key] or 0) + 1
    report.kinds[key] = count
    local f = { iteration = callrec.seq, call = callrec.text, problem = problem, key = key }
    report.findings[#report.findings + 1] = f
    if count <= (opts.max_print or 3) then
      f.reproducer = reproducer(callrec)
      out(string.format("FINDING seed %d iteration %d: %s\n  call: %s\n  problem: %s\n" ..
                        "  reproduce: qlua lua/qlua/fuzz.lua %d %d   (its last call), or this script:\n%s\n",
                        seed, callrec.seq, key_name, callrec.text, problem, callrec.seq, seed,
                        ("    " .. f.reproducer:gsub("\n", "\n    "))))
    end
  end

  local function check_result(e, shape, args, res)
    local ret = e.ret
    local v = res[1]
    if ret == "tensor" then
      local p = tensor_problem(v)
      if p then return p end
    elseif ret == "self" then
      if not rawequal(v, args[1]) then return "an in-place op did not return self" end
    elseif ret == "integer" then
      if math.type(v) ~= "integer" or v < 0 then return "expected an integer >= 0, got " .. tostring(v) end
    elseif ret == "number" then
      if not is_element(v) then return "expected a number, got " .. type(v) end
    elseif ret == "string" then
      if type(v) ~= "string" then return "expected a string, got " .. type(v) end
    elseif ret == "boolean" then
      if type(v) ~= "boolean" then return "expected a boolean, got " .. type(v) end
    elseif ret == "none" then
      if res.n ~= 0 then return "expected no results, got " .. res.n end
    end
    if e.expect and (shape or e.kind == "module") then
      local rest = args
      if e.kind ~= "module" then rest = pack(table.unpack(args, 2, args.n)) end
      local ok, p = pcall(e.expect, shape or {}, rest, res)
      if not ok then return "checking the result raised: " .. tostring(p) end
      if p then return p end
    end
    for i = 1, res.n do
      if is_tensor(res[i]) then
        local p = tensor_problem(res[i])
        if p then return p end
        if R:chance(0.3) then
          p = read_problem(res[i])
          if p then return p end
        end
      end
    end
    return nil
  end

  --[[
  Makes one call and judges it. args[1] is self for methods and operators. Results that
  are small tensors join the pool (registered with the call that made them). Returns the
  results on success, nil on an error.
  ]]
  local function attempt(e, form, args)
    report.calls = report.calls + 1
    local shape
    if e.kind ~= "module" and is_tensor(args[1]) then shape = geom(args[1]) end
    local refs = {}
    local callrec = new_callrec(nil, refs)
    callrec.expr = e.kind == "op" and e.src ~= "close" and e.src ~= "a[b] = c"
    local need_text = last_file or opts.trace or opts.show
    if need_text then callrec.text = call_text(e, form, args, refs) end
    if opts.show and iteration == opts.show then
      -- every call of the iteration, each printed before it is made (a crash leaves it)
      out(string.format("-- seed %d iteration %d\n%s", seed, iteration, reproducer(callrec)))
    end
    if last_file then
      -- one line, padded to the longest written so far, so it covers every earlier one
      local line = string.format("seed %d iteration %d: %s", seed, iteration,
                                 (callrec.text:gsub("\n", "\\n")))
      last_file:seek("set", 0)
      last_file:write(line .. string.rep(" ", math.max(0, last_max - #line)) .. "\n")  -- one write(2)
      last_max = math.max(last_max, #line)
    end
    if opts.trace then io.stderr:write(string.format("[%d] %s\n", iteration, callrec.text)) end

    local fn
    if e.kind == "method" then fn = (form == "self") and e.call_self or e.call_local
    else fn = e.call end
    local t0 = os.clock()
    local ok, res = pcall(fn, table.unpack(args, 1, args.n))
    local stat = report.stats[e.kind .. " " .. e.name]
    stat.time = (stat.time or 0) + os.clock() - t0
    if opts.slow and os.clock() - t0 > 0.05 then
      io.stderr:write(string.format("slow: %.3f s: iteration %d: %s\n", os.clock() - t0, iteration,
                                    call_text(e, form, args, {})))
    end
    local function ensure_text()
      if not callrec.text then callrec.text = call_text(e, form, args, refs) end
    end
    if not ok then
      report.raised = report.raised + 1
      stat.err = stat.err + 1
      if type(res) ~= "string" then
        ensure_text()
        finding(callrec, "raised a " .. type(res) .. " (" .. tostring(res) .. "), not a string", e.name)
      elseif not names_function(res, e.names, e.kind, args)
             and not (e.callback_errors and res == "callback raised") then
        ensure_text()
        finding(callrec, "error message does not name '" .. e.name .. "': " .. res, e.name)
      end
      return nil
    end
    report.returned = report.returned + 1
    stat.ok = stat.ok + 1
    local okc, problem = pcall(check_result, e, shape, args, res)
    if not okc then problem = "checking the result raised: " .. tostring(problem) end
    if problem then ensure_text(); finding(callrec, problem, e.name) end
    if e.mutates and is_tensor(args[1]) then ensure_text(); add_event(args[1], callrec) end
    local self_rec = is_tensor(args[1]) and info[args[1]] or nil
    for i = 1, res.n do
      local r = res[i]
      if is_tensor(r) and not info[r] then
        ensure_text()
        register(r, callrec, i, res.n, self_rec, e.shares)
        -- the pool takes small tensors only, judged by the float product of the shape
        -- (a numel that wrapped around must not let a huge tensor in); freed ones too
        local s = geom(r)
        if (s == nil and pcall(r.numel, r) == false) or (s and span(s) <= CAP) then
          -- what empty() hands out is whatever the memory held: zeroed before later calls
          -- read it, so that a seed's stream (the shapes of unique, nonzero, ...) is the same
          -- on every run
          if e.uninit then pcall(r.zero_, r) end
          pool_add(r)
        end
      end
    end
    return res
  end

  -- ------------------------------------------------------------- actions
  local only
  if opts.only then
    only = {}
    for name in tostring(opts.only):gmatch("[^,%s]+") do only[name] = true end
  end
  local function pick_entry(kind)
    local list, total = {}, 0
    for _, e in ipairs(ENTRIES) do
      if e.kind == kind and (not only or only[e.name]) then
        list[#list + 1] = e; total = total + e.weight
      end
    end
    if #list == 0 then return nil end
    return function()
      local x = R:float() * total
      for _, e in ipairs(list) do
        x = x - e.weight
        if x < 0 then return e end
      end
      return list[#list]
    end
  end
  local pick_method, pick_module = pick_entry("method"), pick_entry("module")
  local pick_op, pick_meta = pick_entry("op"), pick_entry("meta")
  local ACTIONS = {}
  for _, a in ipairs({ { 62, "method", pick_method }, { 13, "module", pick_module },
                       { 12, "op", pick_op }, { 3, "meta", pick_meta }, { 6, "new", true },
                       { 1, "drop", true }, { 1, "huge", not only or only.expand },
                       { 2, "free", not only or only.free } }) do
    if a[3] then ACTIONS[#ACTIONS + 1] = { a[1], a[2] } end
  end
  local BY_NAME = {}
  for _, e in ipairs(ENTRIES) do BY_NAME[e.kind .. " " .. e.name] = e end

  local function mutate(args, from)
    local k = 1 + (R:chance(0.3) and 1 or 0) + (R:chance(0.1) and 1 or 0)
    for _ = 1, k do
      local r = R:float()
      if r < 0.55 and args.n >= from then args[R:int(from, args.n)] = g_junk()
      elseif r < 0.7 and args.n >= from then args[args.n] = nil; args.n = args.n - 1
      elseif r < 0.85 then args.n = args.n + 1; args[args.n] = g_junk()
      elseif args.n >= from then args[R:int(from, args.n)] = nil
      end
    end
  end

  -- A fresh tensor for the pool: made by a creation call, sometimes turned into a view
  -- (transposed, narrowed, expanded...), sometimes freed, or a view of freed storage.
  local function new_tensor()
    local shape = g_shape()
    local dtype = R:pick(DTYPES)
    local o = { dtype = dtype, device = R:pick(DEVICES) }
    local maker = R:weighted({ { 3, "rand" }, { 2, "randint" }, { 1, "zeros" }, { 1, "full" },
                               { 1, "empty" }, { 1, "range" } })
    local args
    if maker == "rand" then
      if not FLOAT_SET[dtype] then maker = "randn"; o.dtype = "float64" end
      args = pack(shape, o)
    elseif maker == "randint" then
      if FLOAT_SET[dtype] then o.dtype = "int64" end
      if dtype == "bool" then args = pack(0, 1, shape, o)
      elseif dtype == "uint8" then args = pack(0, 255, shape, o)
      else args = pack(-3, 9, shape, o) end
    elseif maker == "full" then args = pack(shape, g_number(), o)
    elseif maker == "range" then
      args = pack(R:int(-5, 5), R:int(-5, 40), o)
    else args = pack(shape, o) end
    local res = attempt(BY_NAME["module " .. maker], "call", args)
    local t = res and res[1]
    if not is_tensor(t) then return end
    local s = geom(t)
    if not s then return end
    local r = R:float()
    local view
    if r < 0.15 and #s >= 2 then view = pack(t, 1, #s)
      local e = BY_NAME["method transpose"]; local rr = attempt(e, "self", view); view = rr and rr[1]
    elseif r < 0.25 and #s >= 1 and s[1] >= 1 then
      local e = BY_NAME["method narrow"]
      local rr = attempt(e, "self", pack(t, 1, 1, R:int(0, s[1]))); view = rr and rr[1]
    elseif r < 0.32 and #s >= 2 and s[1] >= 1 then
      local e = BY_NAME["method select"]
      local rr = attempt(e, "self", pack(t, 1, R:int(1, s[1]))); view = rr and rr[1]
    elseif r < 0.38 and #s >= 1 then
      local e = BY_NAME["method expand"]
      local rr = attempt(e, "self", pack(t, { R:int(1, 3), table.unpack(s) })); view = rr and rr[1]
    end
    if view and R:chance(0.1) then
      attempt(BY_NAME["method free"], "self", pack(t))   -- a view of freed storage
    end
  end

  -- Huge views: expanded far beyond any machine (or past int64): every op that would
  -- allocate or read all of them must fail cleanly; views of small parts must work.
  local HUGE_OPS = { "clone", "contiguous", "totable", "neg", "exp", "add", "to", "reshape",
                     "sum", "narrow", "select", "numel", "shape", "view", "take" }
  local function huge_view()
    local base = pool_pick_shaped(function(s) return #s <= 2 end)
    if not base then return end
    local s = geom(base)
    local big = R:pick({ { 1 << 46, 2 }, { 1 << 50 }, { 1 << 62, 1 << 62 }, { math.maxinteger },
                         { 1 << 31, 1 << 31, 1 << 31 }, { 1 << 40, 1 << 40 } })
    local req = {}
    for i = 1, #big do req[i] = big[i] end
    for i = 1, #s do req[#req + 1] = (s[i] == 1) and 1 or s[i] end
    local r1 = attempt(BY_NAME["method expand"], "self", pack(base, req))
    local v = r1 and r1[1]
    if not is_tensor(v) then return end
    local vs = geom(v)
    if not vs or product(vs) >= 2.0 ^ 63 then return end   -- a finding already
    local op = R:pick(HUGE_OPS)
    -- totable of an empty view with huge other dims builds every (empty) row: a known
    -- finding (regressions_spec) that costs half a minute each time; not repeated here
    if op == "totable" and product(vs) == 0 then return end
    local args = pack(v)
    if op == "add" then args = pack(v, 1)
    elseif op == "to" then args = pack(v, "float64")
    elseif op == "reshape" then args = pack(v, -1)
    elseif op == "narrow" then args = pack(v, 1, 1, 3)
    elseif op == "select" then args = pack(v, 1, 2)
    elseif op == "view" then args = pack(v, -1)
    elseif op == "take" then args = pack(v, { 1, 5 })
    elseif op == "sum" then args = pack(v, 1)
    end
    if op == "sum" then
      -- a reduction over a huge dim would run for ever when the output fits: only reduce
      -- views whose output alone is impossible to allocate
      if #vs < 2 or product(removed(vs, 1)) < HUGE_ELEMS then return end
    end
    attempt(BY_NAME["method " .. op], "self", args)
  end

  -- ------------------------------------------------------------- the loop
  local mem0 = {}
  local function memory_of(dev)
    local ok, m = pcall(qlua.memory, dev)
    return ok and type(m) == "table" and m.allocated or nil
  end
  collectgarbage()
  collectgarbage()
  mem0.cpu = memory_of("cpu")
  if has_gpu then mem0.gpu = memory_of("gpu") end

  local clock0 = os.clock()
  for _ = 1, 12 do new_tensor() end
  local function one_iteration()
    local action = R:weighted(ACTIONS)
    if #pool < 6 then action = "new" end
    if action == "new" then
      new_tensor()
    elseif action == "drop" then
      for _ = 1, R:int(1, 8) do if #pool > 0 then table.remove(pool, R:int(1, #pool)) end end
      collectgarbage(R:chance(0.5) and "step" or "collect")
    elseif action == "huge" then
      huge_view()
    elseif action == "free" then
      local t = pool_pick()
      if t then
        local e = R:chance(0.8) and BY_NAME["method free"] or BY_NAME["meta __gc"]
        attempt(e, e.kind == "method" and "self" or "call", pack(t))
      end
    else
      local e
      if action == "method" then e = pick_method()
      elseif action == "module" then e = pick_module()
      elseif action == "op" then e = pick_op()
      else e = pick_meta() end
      local self = pool_pick()
      local shape = geom(self)
      local args = pack(self)
      if e.kind == "module" then args = pack() end
      local ok_gen = e.gen(args, shape or { 2, 3 }, self)
      if e.kind == "module" then
        -- module gens fill args from 1 (self was never put there)
      end
      local mutated = R:chance(0.3)
      if mutated then mutate(args, (e.kind == "module" or e.kind == "meta") and 1 or 2) end
      local form = "call"
      if e.kind == "method" then
        form = R:chance(0.5) and "self" or "local"
        if R:chance(0.04) then args[1] = g_junk(); form = "local" end
        if form == "self" and not is_tensor(args[1]) then form = "local" end
      end
      if e.kind == "op" and not is_tensor(args[1]) and not is_tensor(args[2]) then args[1] = self end
      if e.kind == "op" and e.src == "close" and not is_tensor(args[1]) then args[1] = self end
      -- save/load only ever get paths in the temporary directory
      if e.name == "save" or e.name == "load" then
        if type(args[1]) == "string" or type(args[1]) == "number" then args[1] = R:pick(LOAD_PATHS) end
      end
      if (e.name == "save_safetensors" or e.name == "load_safetensors")
         and (type(args[1]) == "number" or (type(args[1]) == "string" and args[1] ~= ""
              and args[1] ~= tmpdir and args[1]:sub(1, #tmpdir + 1) ~= tmpdir .. "/")) then
        args[1] = R:pick(ST_LOAD_PATHS)
      end
      local guard = e.kind == "module" and GUARDS[e.name]
      if ok_gen ~= false and (not guard or guard(args)) then attempt(e, form, args) end
    end
  end

  for it = 1, n_iter do
    iteration = it
    if opts.show and it > opts.show then break end
    local ok, err = xpcall(one_iteration, debug.traceback)
    if not ok then
      -- not a call being judged: the fuzzer's own code, or a qlua call it makes to look
      -- at a value (shape, numel) that raised where it must not
      finding(new_callrec("(the fuzzer's own code)"), "raised outside a judged call: " ..
              tostring(err), "fuzzer")
    end
    if it % 2000 == 0 then
      collectgarbage()
      if not opts.quiet then
        out(string.format("fuzz: seed %d: %d/%d iterations, %d calls, %d findings (%.1f s)",
                          seed, it, n_iter, report.calls, #report.findings, os.clock() - clock0))
      end
    end
  end

  -- ------------------------------------------------------------- the end: nothing leaks
  pool = {}
  collectgarbage()
  collectgarbage()
  if not opts.show then
    for dev, before in pairs(mem0) do
      local after = memory_of(dev)
      if before and after and after > before then
        local callrec = new_callrec("qlua.memory(" .. string.format("%q", dev) .. ").allocated")
        finding(callrec, string.format("%d bytes still allocated after every tensor was dropped " ..
                                       "and collected (%d at the start)", after, before), "memory")
      end
    end
  end
  cleanup_files()
  if last_file then last_file:close(); os.remove(opts.last) end
  report.seconds = os.clock() - clock0
  return report
end

-- ===================================================================== command line

local function main(argv)
  local opts = { n = 10000, seed = 1 }
  local positional = {}
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == "--last" then opts.last = argv[i + 1]; i = i + 1
    elseif a == "--show" then opts.show = math.tointeger(tonumber(argv[i + 1])); i = i + 1
    elseif a == "--max-print" then opts.max_print = math.tointeger(tonumber(argv[i + 1])); i = i + 1
    elseif a == "--trace" then opts.trace = true
    elseif a == "--stats" then opts.stats = true
    elseif a == "--only" then opts.only = argv[i + 1]; i = i + 1
    elseif a == "--slow" then opts.slow = true
    elseif a == "--quiet" then opts.quiet = true
    elseif a:sub(1, 2) == "--" then
      io.stderr:write("fuzz: unknown option " .. a .. "\n")
      return 2
    else positional[#positional + 1] = a end
    i = i + 1
  end
  if positional[1] then opts.n = math.tointeger(tonumber(positional[1])) end
  if positional[2] then opts.seed = math.tointeger(tonumber(positional[2])) end
  if not opts.n or not opts.seed or opts.n < 0 then
    io.stderr:write("usage: qlua lua/qlua/fuzz.lua [N [SEED]] [--last FILE] [--show K] " ..
                    "[--trace] [--stats] [--quiet] [--max-print M]\n")
    return 2
  end
  if opts.show then opts.n = math.max(opts.n, opts.show); opts.quiet = true end
  local report = M.run(opts)
  if opts.show then return 0 end
  if opts.stats then
    local names = {}
    for k in pairs(report.stats) do names[#names + 1] = k end
    table.sort(names)
    for _, k in ipairs(names) do
      local s = report.stats[k]
      print(string.format("  %-22s %7d returned %7d raised %8.3f s", k, s.ok, s.err, s.time or 0))
    end
  end
  local kinds = {}
  for k, c in pairs(report.kinds) do kinds[#kinds + 1] = string.format("  %6d x %s", c, k) end
  table.sort(kinds)
  if #kinds > 0 then print("fuzz: kinds of findings:\n" .. table.concat(kinds, "\n")) end
  print(string.format("fuzz: seed %d, %d iterations, %d calls: %d returned, %d raised; " ..
                      "%d findings (%d kinds); %.1f s",
                      report.seed, opts.n, report.calls, report.returned, report.raised,
                      #report.findings, #kinds, report.seconds))
  return #report.findings == 0 and 0 or 1
end

-- `qlua lua/qlua/fuzz.lua ...` runs main; require("qlua.fuzz") gets the module.
if ... == "qlua.fuzz" then return M end
local status = main(arg or {})
os.exit(status, true)
