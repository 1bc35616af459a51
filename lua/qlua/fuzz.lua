--[=[
lua/qlua/fuzz.lua — the API fuzzer (issue 6: no input crashes qlua, whatever a script does).

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
]=]

local M = {}

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
One fuzzing run. All of its state lives in this closure-less table `F` so that a spec
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

  -- ------------------------------------------------------------- provenance of tensors
  -- rec = { id, label, made = callrec, root = rec, events = {callrec...} }
  -- callrec = { seq, text, refs = {rec...} }
  local info = setmetatable({}, { __mode = "k" })   -- tensor -> rec
  local next_id = 0
  local iteration = 0
  local callno = 0            -- orders calls made within one iteration
  local function new_callrec(text, refs)
    callno = callno + 1
    return { seq = iteration, no = callno, text = text, refs = refs or {} }
  end

  -- Named junk objects the reproducer defines before using them.
  local named, named_defs = {}, {}
  local function name_object(obj, name, def)
    named[obj] = name
    named_defs[name] = def
    return obj
  end

  -- Lua source for a value; tensors by label, collecting their recs in refs.
  local fmt
  local function fmt_number(x)
    if math.type(x) == "integer" then
      if x == math.mininteger then return "math.mininteger" end
      return string.format("%d", x)
    end
    if x ~= x then return "(0/0)" end
    if x == INF then return "math.huge" end
    if x == -INF then return "-math.huge" end
    if x == 0 and 1 / x < 0 then return "-0.0" end
    local s = string.format("%.17g", x)
    if not s:find("[%.eEn]") then s = s .. ".0" end
    return s
  end
  function fmt(v, refs, depth)
    local tv = type(v)
    if tv == "nil" or tv == "boolean" then return tostring(v) end
    if tv == "number" then return fmt_number(v) end
    if named[v] then refs.named = refs.named or {}; refs.named[named[v]] = true; return named[v] end
    if tv == "string" then
      if #v > 24 and v == v:sub(1, 1):rep(#v) then
        return string.format("(%q):rep(%d)", v:sub(1, 1), #v)
      end
      return (string.format("%q", v):gsub("\\\n", "\\n"))
    end
    if tv == "userdata" then
      local rec = info[v]
      if rec then refs[#refs + 1] = rec; return rec.label end
      if is_tensor(v) then return "<unregistered tensor>" end
      return "<userdata>"
    end
    if tv == "table" then
      depth = (depth or 0) + 1
      if depth > 6 then return "{...}" end
      local parts, n = {}, #v
      for i = 1, n do parts[#parts + 1] = fmt(v[i], refs, depth) end
      local keys = {}
      for k in pairs(v) do
        if not (math.type(k) == "integer" and k >= 1 and k <= n) then keys[#keys + 1] = k end
      end
      table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
      for _, k in ipairs(keys) do
        local key = (type(k) == "string" and k:match("^[%a_][%w_]*$")) and k
                    or ("[" .. fmt(k, refs, depth) .. "]")
        parts[#parts + 1] = key .. " = " .. fmt(v[k], refs, depth)
      end
      return "{" .. table.concat(parts, ", ") .. "}"
    end
    return "<" .. tv .. ">"
  end

  local function fmt_args(args, from, refs)
    local parts = {}
    for i = from, args.n do parts[#parts + 1] = fmt(args[i], refs) end
    return table.concat(parts, ", ")
  end

  local function register(t, callrec, k, nres, parent_rec, shares)
    if info[t] then return info[t] end
    next_id = next_id + 1
    local rec = { id = next_id, label = "T" .. next_id, events = {} }
    local text = callrec.text
    if nres > 1 then text = string.format("select(%d, %s)", k, text) end
    rec.made = { seq = callrec.seq, no = callrec.no, text = rec.label .. " = " .. text,
                 refs = callrec.refs }
    rec.root = (shares and parent_rec) and parent_rec.root or rec
    info[t] = rec
    return rec
  end

  local function add_event(t, callrec)
    local rec = info[t]
    if not rec then return end
    local ev = rec.root.events
    ev[#ev + 1] = callrec
    if #ev > 12 then table.remove(ev, 1) end
  end

  -- The reproducer: the calls that made the tensors a call uses (transitively) and the
  -- state changes (free, in-place writes) of their storages, in the order they ran.
  local function reproducer(callrec)
    local seen, lines = {}, {}
    local line_seen = {}
    local named_used = {}
    local function add_line(cr, text)
      if line_seen[cr] then return end
      line_seen[cr] = true
      lines[#lines + 1] = { seq = cr.seq, no = cr.no, text = text or cr.text, expr = cr.expr }
      if cr.refs.named then for k in pairs(cr.refs.named) do named_used[k] = true end end
    end
    local function add_rec(rec)
      if seen[rec] or #lines > 200 then return end
      seen[rec] = true
      add_line(rec.made, rec.made.text)
      for _, r in ipairs(rec.made.refs) do add_rec(r) end
      add_rec(rec.root)
      for _, ev in ipairs(rec.root.events) do
        add_line(ev)
        for _, r in ipairs(ev.refs) do add_rec(r) end
      end
    end
    for _, r in ipairs(callrec.refs) do add_rec(r) end
    if callrec.refs.named then for k in pairs(callrec.refs.named) do named_used[k] = true end end
    table.sort(lines, function(a, b) return a.no < b.no end)
    local text = {}
    local names = {}
    for k in pairs(named_used) do names[#names + 1] = k end
    table.sort(names)
    for _, k in ipairs(names) do text[#text + 1] = "local " .. k .. " = " .. named_defs[k] end
    local first = math.max(1, #lines - 40)
    if first > 1 then text[#text + 1] = string.format("-- (%d earlier lines left out)", first - 1) end
    for i = first, #lines do
      local l = lines[i].text
      if l:match("^T%d+ = ") then l = "local " .. l
      elseif lines[i].expr then l = "local _ = " .. l end
      text[#text + 1] = l .. "   -- call " .. lines[i].seq
    end
    text[#text + 1] = (callrec.expr and "local _ = " or "") .. callrec.text .. "   -- call "
                      .. callrec.seq .. " (the finding)"
    return table.concat(text, "\n")
  end

  -- ------------------------------------------------------------- files for save/load
  local tmpdir = os.tmpname()
  os.remove(tmpdir)
  local made_dir = os.execute("mkdir -p '" .. tmpdir .. "'")
  local function write_file(name, bytes)
    local f = io.open(tmpdir .. "/" .. name, "wb")
    if f then f:write(bytes); f:close() end
  end
  local function npy(descr, fortran, shape_text, data)
    local header = string.format("{'descr': '%s', 'fortran_order': %s, 'shape': %s, }",
                                 descr, fortran and "True" or "False", shape_text)
    local total = 10 + #header + 1
    header = header .. string.rep(" ", (64 - total % 64) % 64) .. "\n"
    local hlen = #header
    return "\x93NUMPY\x01\x00" .. string.char(hlen % 256, hlen // 256) .. header .. (data or "")
  end
  if made_dir then
    write_file("empty.npy", "")
    write_file("garbage.npy", "this is not a numpy file\0\1\2\3")
    write_file("magic_only.npy", "\x93NUMPY")
    write_file("trunc.npy", npy("<f4", false, "(4,)", "\0\0\0\0"))
    write_file("huge_shape.npy", npy("<f4", false, "(1125899906842624,)", ""))
    write_file("overflow_shape.npy", npy("<f8", false, "(4611686018427387904, 4)", ""))
    write_file("neg_shape.npy", npy("<i8", false, "(-1,)", ""))
    write_file("fortran.npy", npy("<f8", true, "(2, 2)", string.rep("\0", 32)))
    write_file("big_endian.npy", npy(">f4", false, "(2,)", string.rep("\0", 8)))
    write_file("bool.npy", npy("|b1", false, "(2,)", "\1\0"))
    write_file("bad_dict.npy", npy("<f4", false, "(2,", ""))
    write_file("short_ok.npy", npy("<i4", false, "(3,)", string.rep("\1\0\0\0", 3)))
    write_file("scalar.npy", npy("<f8", false, "()", string.rep("\0", 8)))
    write_file("zero_len.npy", npy("<f4", false, "(0, 5)", ""))
    write_file("long_header.npy", "\x93NUMPY\x01\x00\xff\xff{'descr'")
  end
  local SAVE_PATHS = { tmpdir .. "/a.npy", tmpdir .. "/b.npy", tmpdir,
                       tmpdir .. "/no/such/dir/x.npy", tmpdir .. "/" .. ("x"):rep(300), "" }
  local LOAD_PATHS = { tmpdir .. "/a.npy", tmpdir .. "/b.npy", tmpdir, tmpdir .. "/missing.npy",
                       "" }
  for _, f in ipairs({ "empty", "garbage", "magic_only", "trunc", "huge_shape",
                       "overflow_shape", "neg_shape", "fortran", "big_endian", "bool",
                       "bad_dict", "short_ok", "scalar", "zero_len", "long_header" }) do
    LOAD_PATHS[#LOAD_PATHS + 1] = tmpdir .. "/" .. f .. ".npy"
  end

  -- .safetensors: a valid file (every 16-bit float, bool, scalar and metadata part of it),
  -- and mutations of it that each load_safetensors call writes just before it loads
  -- ST_MUTATED (left in the directory when the process dies, for the reproducer)
  local function st_file(header, data, len)
    return string.pack("<I8", len or #header) .. header .. (data or "")
  end
  local ST_HEADER = '{"__metadata__":{"format":"pt"},'
    .. '"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},'
    .. '"b":{"dtype":"I64","shape":[2],"data_offsets":[24,40]},'
    .. '"h":{"dtype":"F16","shape":[3],"data_offsets":[40,46]},'
    .. '"m":{"dtype":"BOOL","shape":[2],"data_offsets":[46,48]},'
    .. '"e":{"dtype":"U8","shape":[0,4],"data_offsets":[48,48]},'
    .. '"s":{"dtype":"BF16","shape":[],"data_offsets":[48,50]}}'
  local ST_DATA = string.rep("\0\0\128\63", 6) .. string.pack("<i8<i8", 7, -3)
    .. "\0\60\0\192\0\56" .. "\1\0" .. "\128\63"
  local ST_VALID = st_file(ST_HEADER, ST_DATA)
  local ST_MUTATED = tmpdir .. "/mut.safetensors"
  local ST_TOKENS = { "-1", "0", "1", "8", "24", "50", "1e3", "2.5", "99999999999999999999",
    "4611686018427387904", "18446744073709551615", "9223372036854775807", "null", "true",
    '"x"', "[]", "{}", "[0,0]", "[1,2,3]", '"F32"', '"I8"', '"BF16"', '"__metadata__"' }
  local ST_DTYPES = { "F32", "F64", "I32", "I64", "U8", "BOOL", "F16", "BF16", "I8", "U16",
    "F8_E4M3", "float32", "", "bogus" }
  local ST_BYTES = { "{", "}", "[", "]", ",", ":", '"', "\\", "\0", "\255", "\192\128", " ",
    "\n", "-", "e", "\\u0000" }
  -- A random header: entries with random dtypes, shapes and offsets (gaps, overlaps,
  -- huge sizes), sometimes metadata, sometimes a duplicate key.
  local function st_random_header()
    local items, offset = {}, 0
    for k = 1, R:int(0, 4) do
      local dt = R:pick(ST_DTYPES)
      local shape = {}
      for d = 1, R:weighted({ { 3, 0 }, { 5, 1 }, { 4, 2 }, { 1, 17 } }) do
        shape[d] = R:chance(0.9) and R:int(0, 4) or R:pick({ 1 << 40, 1 << 62, -1 })
      end
      local n = 1
      for _, v in ipairs(shape) do n = n * v end
      local size = ({ F32 = 4, F64 = 8, I32 = 4, I64 = 8, U8 = 1, BOOL = 1, F16 = 2, BF16 = 2 })[dt] or 1
      local b = R:chance(0.8) and offset or R:int(0, 60)
      local e = R:chance(0.9) and b + n * size or R:int(0, 60)
      offset = e
      local name = R:chance(0.9) and ("t" .. k) or R:pick({ "t1", "", "__metadata__", "a\\u0000" })
      items[#items + 1] = string.format('"%s":{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}',
        name, dt, table.concat(shape, ","), b, e)
    end
    if R:chance(0.3) then
      items[#items + 1] = R:pick({ '"__metadata__":{"a":"b"}', '"__metadata__":{"a":1}',
        '"__metadata__":null', '"__metadata__":[]', '"__metadata__":{"a":"b","a":"c"}' })
    end
    return "{" .. table.concat(items, ",") .. "}", offset
  end
  -- The valid file with one to three mutations: bytes, the length field, the header's
  -- text (tokens, dtypes, punctuation), the data's length, or a random header.
  local function st_mutate()
    local header, data, len = ST_HEADER, ST_DATA, nil
    for _ = 1, R:int(1, 3) do
      local r = R:float()
      if r < 0.15 then             -- a random header over random data
        local n
        header, n = st_random_header()
        local fits = math.type(n) == "integer" and n >= 0 and n <= 4096
        data = string.rep("\1", (fits and R:chance(0.7)) and n or R:int(0, 64))
      elseif r < 0.35 then         -- a number, a string or a value replaced by a token
        local spots = {}
        for pos, tok in header:gmatch("()(%-?%d+)") do spots[#spots + 1] = { pos, #tok } end
        for pos, tok in header:gmatch('()("[^"]*")') do spots[#spots + 1] = { pos, #tok } end
        if #spots > 0 then
          local sp = R:pick(spots)
          header = header:sub(1, sp[1] - 1) .. R:pick(ST_TOKENS) .. header:sub(sp[1] + sp[2])
        end
      elseif r < 0.45 then         -- a dtype replaced
        header = header:gsub('"dtype":"%w*"', function(m)
          return R:chance(0.3) and '"dtype":"' .. R:pick(ST_DTYPES) .. '"' or m
        end)
      elseif r < 0.6 then          -- punctuation inserted or a byte deleted
        local at = R:int(1, #header + 1)
        if R:chance(0.5) then header = header:sub(1, at - 1) .. R:pick(ST_BYTES) .. header:sub(at)
        else header = header:sub(1, at - 1) .. header:sub(at + 1) end
      elseif r < 0.64 then         -- an entry duplicated
        local first = header:match('^{("[^"]*":%b{})')
        if first then header = "{" .. first .. "," .. header:sub(2) end
      elseif r < 0.7 then          -- one tensor's offsets moved, its size kept (gaps, overlaps)
        local shift = R:pick({ -8, -2, -1, 1, 2, 8, 24 })
        local k, target = 0, R:int(1, 6)
        header = header:gsub('"data_offsets":%[(%d+),(%d+)%]', function(b, e)
          k = k + 1
          if k ~= target then return nil end
          return string.format('"data_offsets":[%d,%d]', b + shift, e + shift)
        end)
      elseif r < 0.78 then         -- the length field
        len = R:pick({ 0, 1, 7, #header - 1, #header + 1, #header + #data + 1, 100000001,
                       -1, 1 << 62, math.maxinteger, R:int(0, 200) })
      elseif r < 0.9 then          -- the data cut or grown
        if R:chance(0.5) then data = data:sub(1, R:int(0, #data)) else data = data .. string.rep("\0", R:int(1, 9)) end
      else                         -- header padding (valid) or junk after the JSON
        header = header .. R:pick({ "    ", "\t\n", "x", "\0", "}" })
      end
    end
    local bytes = st_file(header, data, len)
    if R:chance(0.1) then          -- raw byte flips over the whole file
      local t = { bytes:byte(1, -1) }
      for _ = 1, R:int(1, 4) do
        if #t > 0 then t[R:int(1, #t)] = R:int(0, 255) end
      end
      bytes = string.char(table.unpack(t))
    end
    if R:chance(0.05) then bytes = bytes:sub(1, R:int(0, 12)) end   -- shorter than a length
    return bytes
  end
  if made_dir then
    write_file("valid.safetensors", ST_VALID)
    write_file("empty.safetensors", "")
  end
  local ST_SAVE_PATHS = { tmpdir .. "/a.safetensors", tmpdir .. "/b.safetensors", tmpdir,
                          tmpdir .. "/no/such/dir/x.safetensors",
                          tmpdir .. "/" .. ("x"):rep(300) .. ".safetensors", "" }
  local ST_LOAD_PATHS = { tmpdir .. "/a.safetensors", tmpdir .. "/b.safetensors",
                          tmpdir .. "/valid.safetensors", tmpdir .. "/empty.safetensors",
                          ST_MUTATED, tmpdir, tmpdir .. "/missing.safetensors",
                          tmpdir .. "/short_ok.npy", "" }
  local function cleanup_files()
    for _, p in ipairs(SAVE_PATHS) do if p ~= tmpdir and p ~= "" then os.remove(p) end end
    for _, p in ipairs(LOAD_PATHS) do if p ~= tmpdir and p ~= "" then os.remove(p) end end
    for _, p in ipairs(ST_SAVE_PATHS) do if p ~= tmpdir and p ~= "" then os.remove(p) end end
    for _, p in ipairs(ST_LOAD_PATHS) do if p ~= tmpdir and p ~= "" then os.remove(p) end end
    os.remove(tmpdir)
  end

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

  -- ------------------------------------------------------------- junk values
  local SPECIAL_NUMBERS = {
    0, 1, -1, 2, 3, 0.5, -0.5, 1.5, 2.0, -0.0, NaN, INF, -INF,
    math.maxinteger, math.mininteger, 2.0 ^ 63, -2.0 ^ 63, 2 ^ 53, (1 << 53) + 1,
    1 << 31, (1 << 31) - 1, 1 << 32, -(1 << 31), 1 << 50, 2.0 ^ 50, 1e300, -1e300, 1e-300,
    5e-324, 16, 17, 64, 100, math.pi,
  }
  local DTYPES = { "float32", "float64", "int32", "int64", "bool", "uint8", "float16", "bfloat16" }
  local FLOAT_DTYPES = { "float32", "float64", "float16", "bfloat16" }
  local FLOAT_SET = { float32 = true, float64 = true, float16 = true, bfloat16 = true }
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

  -- ------------------------------------------------------------- result checks
  local DTYPE_SET = { float32 = true, float64 = true, int32 = true, int64 = true, bool = true,
                      uint8 = true, float16 = true, bfloat16 = true }

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
  messages), weight.
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

  -- A key for t[key] and t[key] = v (issue 12): a Torch7 index table, a bool mask of self's
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

  -- ---- views
  local function factor_shape(numel)
    local shape = {}
    if numel == 0 then
      local nd = R:int(1, 3)
      for i = 1, nd do shape[i] = R:int(0, 3) end
      shape[R:int(1, nd)] = 0
      return shape
    end
    local rest = numel
    while rest > 1 and #shape < 5 do
      local divisors = {}
      for d = 2, math.min(rest, 64) do if rest % d == 0 then divisors[#divisors + 1] = d end end
      if #divisors == 0 then break end
      local d = R:pick(divisors)
      shape[#shape + 1] = d
      rest = rest // d
    end
    if rest > 1 then shape[#shape + 1] = rest end
    if R:chance(0.3) then table.insert(shape, R:int(1, #shape + 1), 1) end
    if #shape > 0 and R:chance(0.3) then shape[R:int(1, #shape)] = -1 end
    return shape
  end
  local function g_viewshape(a, shape)
    local s = factor_shape(math.tointeger(product(shape)) or 1)
    if R:chance(0.15) then s = g_shape() end
    if R:chance(0.05) then s = R:pick({ { -1, -1 }, { 1 << 50, 1 << 50 }, { math.maxinteger, 2 },
                                       { 0, -1 }, { -2 } }) end
    shape_args(s, a)
  end
  local function numel_expect(shape, _, res)
    local got = geom(res[1])
    if got and product(got) ~= product(shape) then
      return "view of " .. list_str(shape) .. " has shape " .. list_str(got)
    end
  end
  entry { name = "view", kind = "method", gen = g_viewshape, ret = "tensor", shares = true,
          expect = numel_expect, weight = 2 }
  entry { name = "reshape", kind = "method", gen = g_viewshape, ret = "tensor", shares = true,
          expect = numel_expect, weight = 2 }
  entry { name = "narrow", kind = "method", ret = "tensor", shares = true, weight = 2,
          gen = function(a, shape)
            local d = g_dim(shape)
            local size = shape[math.tointeger(d) or 0] or 3
            local start = R:chance(0.9) and R:int(1, size + 1) or g_pos(size)
            local len = R:chance(0.9) and R:int(0, math.max(0, size - (math.tointeger(start) or 1) + 1))
                        or R:pick({ -1, size + 1, math.maxinteger, 0.5, NaN })
            a.n = 4; a[2], a[3], a[4] = d, start, len
          end,
          expect = expect_shape(function(shape, a)
            local d, len = as_integer(a[1]), as_integer(a[3])
            if not (d and len and shape[d]) then return nil end
            local s = { table.unpack(shape) }
            s[d] = len
            return s
          end) }
  entry { name = "select", kind = "method", ret = "tensor", shares = true, weight = 2,
          gen = function(a, shape)
            local d = g_dim(shape)
            a.n = 3; a[2], a[3] = d, g_pos(shape[math.tointeger(d) or 0] or 2)
          end,
          expect = expect_shape(function(shape, a)
            local d = as_integer(a[1])
            if not (d and shape[d]) then return nil end
            return removed(shape, d)
          end) }
  entry { name = "transpose", kind = "method", ret = "tensor", shares = true,
          gen = function(a, shape) a.n = 3; a[2], a[3] = g_dim(shape), g_dim(shape) end,
          expect = expect_shape(function(shape, a)
            local d1, d2 = as_integer(a[1]), as_integer(a[2])
            if not (d1 and d2 and shape[d1] and shape[d2]) then return nil end
            local s = { table.unpack(shape) }
            s[d1], s[d2] = s[d2], s[d1]
            return s
          end) }
  entry { name = "t", kind = "method", gen = function() end, ret = "tensor", shares = true,
          expect = expect_shape(function(shape)
            if #shape < 2 then return shape end
            return { shape[2], shape[1] }
          end) }
  entry { name = "permute", kind = "method", ret = "tensor", shares = true,
          gen = function(a, shape)
            local perm = {}
            for i = 1, #shape do perm[i] = i end
            for i = #perm, 2, -1 do local j = R:int(1, i); perm[i], perm[j] = perm[j], perm[i] end
            if R:chance(0.15) and #perm > 0 then perm[R:int(1, #perm)] = R:pick({ 0, #perm + 1, 1, -1 }) end
            if R:chance(0.05) then perm[#perm + 1] = #perm + 1 end
            if #perm == 0 and R:chance(0.5) then a.n = 1; return end
            shape_args(perm, a)
          end,
          expect = expect_shape(function(shape, a)
            local perm = type(a[1]) == "table" and a[1] or a
            local s = {}
            for i = 1, #shape do
              local p = as_integer(rawget(perm, i))
              if not p or not shape[p] then return nil end
              s[i] = shape[p]
            end
            return s
          end) }
  entry { name = "expand", kind = "method", ret = "tensor", shares = true,
          gen = function(a, shape)
            local s = {}
            local extra = R:weighted({ { 6, 0 }, { 3, 1 }, { 1, 2 } })
            for i = 1, extra do s[i] = R:int(0, 4) end
            for i = 1, #shape do
              local v = shape[i]
              if v == 1 and R:chance(0.6) then v = R:int(0, 5)
              elseif R:chance(0.2) then v = -1 end
              s[#s + 1] = v
            end
            if R:chance(0.08) then
              s = R:pick({ { 1 << 62, 1 << 62 }, { math.maxinteger }, { 1 << 40, 1 << 40 },
                           { 1 << 31, 1 << 31, 1 << 31 }, { -1 }, { -2 }, { 1 << 50 } })
              if #shape > 0 then table.insert(s, 1, 1) end
              for i = 1, #shape do s[#s + 1] = shape[i] end
            end
            shape_args(s, a)
          end,
          expect = expect_shape(function(shape, a)
            local req = type(a[1]) == "table" and a[1] or a
            local s = {}
            local n = type(a[1]) == "table" and rawlen(req) or 0
            if type(a[1]) ~= "table" then
              n = 0
              while n < a.n and type(a[n + 1]) == "number" do n = n + 1 end
            end
            for i = 1, n do
              local v = as_integer(rawget(req, i))
              if not v then return nil end
              if v == -1 then v = shape[i - (n - #shape)] end
              if not v then return nil end
              s[i] = v
            end
            return s
          end) }
  local function contiguous_expect(shape, _, res)
    local got = geom(res[1])
    if got and not same_list(got, shape) then return "shape changed to " .. list_str(got) end
    if got and res[1]:is_contiguous() ~= true then return "result is not contiguous" end
  end
  entry { name = "contiguous", kind = "method", gen = function() end, ret = "tensor",
          shares = true, expect = contiguous_expect }
  entry { name = "clone", kind = "method", gen = function() end, ret = "tensor",
          expect = contiguous_expect }

  -- ---- moving
  local same_shape_expect = expect_shape(same_as_self)
  entry { name = "gpu", kind = "method", ret = "tensor", shares = true, expect = same_shape_expect,
          gen = function(a) if R:chance(0.5) then a.n = 2; a[2] = R:pick({ 0, 1, -1, 99, 0.5, 2 ^ 31 }) end end }
  entry { name = "cpu", kind = "method", gen = function() end, ret = "tensor", shares = true,
          expect = same_shape_expect }
  entry { name = "to", kind = "method", ret = "tensor", shares = true,
          gen = function(a)
            a.n = 2
            local r = R:float()
            if r < 0.6 then a[2] = R:pick(DTYPES)
            elseif r < 0.8 then a[2] = R:pick(DEVICES)
            elseif r < 0.9 then a[2] = g_opts()
            else a[2] = R:pick(BAD_NAMES) end
          end,
          expect = function(shape, a, res)
            local got = geom(res[1])
            if got and not same_list(got, shape) then return "shape changed" end
            if DTYPE_SET[a[1]] and tdtype(res[1]) ~= a[1] then return "dtype is " .. tostring(tdtype(res[1])) end
          end }
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
  entry { name = "copy_", kind = "method", ret = "self", mutates = true, weight = 2,
          gen = function(a, shape, self) g_like(a, shape, self) end }

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

  -- ---- arithmetic
  local function g_operand(a, shape, self)
    local r = R:float()
    if r < 0.4 then
      a.n = a.n + 1
      a[a.n] = g_number()
    else
      g_like(a, shape, self)
    end
  end
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
  for _, op in ipairs({ "add", "sub", "mul", "div", "pow", "maximum", "minimum",
                        "eq", "ne", "lt", "le", "gt", "ge",
                        "logical_and", "logical_or", "logical_xor",
                        "atan2", "hypot", "fmod", "remainder", "floor_divide" }) do
    entry { name = op, kind = "method", ret = "tensor", gen = g_operand, expect = binary_expect }
    entry { name = op .. "_", kind = "method", ret = "self", mutates = true, gen = g_operand }
  end
  entry { name = "logical_not", kind = "method", gen = function() end, ret = "tensor",
          expect = same_shape_expect }
  entry { name = "logical_not_", kind = "method", gen = function() end, ret = "self",
          mutates = true }
  for _, op in ipairs({ "neg", "abs", "exp", "log", "sqrt", "tanh", "sigmoid", "relu",
                        "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
                        "acosh", "atanh", "floor", "ceil", "round", "trunc", "frac", "sign",
                        "log1p", "expm1", "log2", "log10", "exp2", "rsqrt", "reciprocal",
                        "square", "erf", "erfc", "erfinv", "lgamma", "softplus", "gelu",
                        "silu" }) do
    entry { name = op, kind = "method", gen = function() end, ret = "tensor", expect = same_shape_expect }
    entry { name = op .. "_", kind = "method", gen = function() end, ret = "self", mutates = true }
  end
  for _, op in ipairs({ "isnan", "isinf", "isfinite" }) do
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

  -- ---- reductions and products
  -- issue 13: keepdim, dim lists, and prod, amax, amin, aminmax, var, std, norm, logsumexp.
  -- A dims argument is nil, a dim, or a list (sometimes with repeats or bad entries).
  local function g_dims(shape, many)
    if R:chance(0.25) then return nil end
    if not many or R:chance(0.4) then return g_dim(shape) end
    local l = {}
    for i = 1, R:int(0, #shape + 1) do l[i] = R:chance(0.9) and R:int(1, math.max(#shape, 1)) or g_dim(shape) end
    return l
  end
  local function g_keepdim() return R:chance(0.9) and R:chance(0.5) or R:pick({ 1, "yes" }) end
  -- The shape a reduction over dims gives (nil when the dims are not a valid set).
  local function reduced_shape(shape, dims, keepdim)
    local set = {}
    if dims == nil then for d = 1, #shape do set[d] = true end
    else
      local list = type(dims) == "table" and dims or { dims }
      for _, d in ipairs(list) do
        d = as_integer(d)
        if not d or d < 1 or d > #shape or set[d] then return nil end
        set[d] = true
      end
    end
    local s = {}
    for d = 1, #shape do
      if not set[d] then s[#s + 1] = shape[d] elseif keepdim then s[#s + 1] = 1 end
    end
    return s
  end
  local function reduction_expect(dims_at, keep_at, count)
    return function(shape, a, res)
      local dims, keepdim = a[dims_at], keep_at and a[keep_at]
      if type(keepdim) == "table" then keepdim = keepdim.keepdim end
      keepdim = keepdim == true
      if dims == nil and not keepdim then
        for i = 1, count do
          if not is_element(res[i]) then return "expected a number, got " .. type(res[i]) end
        end
        return nil
      end
      for i = 1, count do
        local p = tensor_problem(res[i])
        if p then return p end
        local want = reduced_shape(shape, dims, keepdim)
        if want and not same_list(geom(res[i]), want) then
          return "result shape " .. list_str(geom(res[i])) .. ", expected " .. list_str(want)
        end
      end
    end
  end
  for _, op in ipairs({ "sum", "mean", "max", "min", "argmax", "argmin", "amax", "amin", "prod",
                        "aminmax" }) do
    local many = op == "sum" or op == "mean" or op == "amax" or op == "amin"
    local shape_ok = reduction_expect(1, 2, op == "aminmax" and 2 or 1)
    entry { name = op, kind = "method", ret = "any", weight = 1,
            gen = function(a, shape)
              if R:chance(0.75) then a.n = 2; a[2] = g_dims(shape, many) end
              if R:chance(0.4) then a.n = 3; a[3] = g_keepdim() end
            end,
            expect = function(shape, a, res)
              if a[1] == nil and a[2] ~= true then
                if (op == "argmax" or op == "argmin") and math.type(res[1]) ~= "integer" then
                  return "argmax/argmin gave a float"
                end
              end
              local p = shape_ok(shape, a, res)
              if p then return p end
              if (op == "max" or op == "min") and a[1] ~= nil then
                if res.n ~= 2 then return op .. "(dim) returned " .. res.n .. " values" end
                local p2 = tensor_problem(res[2])
                if p2 then return "indices: " .. p2 end
                if tdtype(res[2]) ~= "int64" then return "indices are " .. tostring(tdtype(res[2])) end
              end
            end }
  end
  for _, op in ipairs({ "var", "std" }) do
    entry { name = op, kind = "method", ret = "any", weight = 1,
            gen = function(a, shape)
              a.n = 3; a[2] = g_dims(shape, true)
              a[3] = R:chance(0.2) and nil or R:pick({ true, false, 0, 1, 2.5, 1e9, -1, NaN, "x",
                              { correction = R:pick({ 0, 1, 3 }), keepdim = R:chance(0.5) } })
            end,
            expect = reduction_expect(1, 2, 1) }
  end
  entry { name = "norm", kind = "method", ret = "any", weight = 1,
          gen = function(a, shape)
            a.n = 4
            a[2] = R:chance(0.2) and nil or R:pick({ 2, 1, 0, 3, 0.5, math.huge, -math.huge, -1, NaN })
            a[3] = g_dims(shape, true); a[4] = R:chance(0.5) and g_keepdim() or nil
          end,
          expect = reduction_expect(2, 3, 1) }
  entry { name = "logsumexp", kind = "method", ret = "any", weight = 1,
          gen = function(a, shape)
            a.n = 3; a[2] = R:chance(0.95) and g_dims(shape, true) or nil
            a[3] = R:chance(0.5) and g_keepdim() or nil
          end,
          expect = function(shape, a, res)
            if a[1] == nil then return "logsumexp without dim returned" end
            return reduction_expect(1, 2, 1)(shape, a, res)
          end }
  local function matmul_shape(sa, sb)
    if #sa == 0 or #sb == 0 then return nil end
    if #sa == 1 and #sb == 1 then return sa[1] == sb[1] and {} or nil end
    if #sa == 2 and #sb == 1 then return sa[2] == sb[1] and { sa[1] } or nil end
    if #sa == 1 and #sb == 2 then return sa[1] == sb[1] and { sb[2] } or nil end
    if #sa == 2 and #sb == 2 then return sa[2] == sb[1] and { sa[1], sb[2] } or nil end
    return nil  -- batched: not checked here
  end
  local function g_matmul_other(a, shape, self)
    local dt = tdtype(self)
    if not FLOAT_SET[dt] then dt = "float32" end
    if R:chance(0.2) then dt = R:pick(DTYPES) end
    local k = shape[#shape] or 2
    local s
    local r = R:float()
    if r < 0.3 then s = { k }
    elseif r < 0.6 then s = { k, R:int(0, 5) }
    elseif r < 0.8 and #shape >= 2 then
      s = { table.unpack(shape, 1, #shape - 2) }
      for i = 1, #s do if R:chance(0.3) then s[i] = 1 end end
      s[#s + 1] = k
      s[#s + 1] = R:int(1, 4)
    else s = g_shape(64) end
    a.n = a.n + 1
    a[a.n] = make_tensor_shaped(s, dt, tdevice(self))
  end
  local function matmul_expect(sa, b, res)
    local sb = geom(b)
    local got = geom(res[1])
    if not (sb and got) then return nil end
    local want = matmul_shape(sa, sb)
    if want and not same_list(got, want) then
      return "matmul of " .. list_str(sa) .. " and " .. list_str(sb) .. " gave " .. list_str(got)
    end
  end
  entry { name = "matmul", kind = "method", ret = "tensor", weight = 2, gen = g_matmul_other,
          expect = function(shape, a, res) return matmul_expect(shape, a[1], res) end }
  -- ---- the products of issue 13: operands of fitting shapes most of the time, a float
  -- dtype mostly (integers must be refused), sometimes a shape that cannot fit
  local function g_float_of(self)
    local dt = tdtype(self)
    if not FLOAT_SET[dt] then dt = "float32" end
    if R:chance(0.15) then dt = R:pick(DTYPES) end
    return dt
  end
  local function g_product_operand(a, s, self)
    if R:chance(0.15) then s = g_shape(64) end
    a.n = a.n + 1
    a[a.n] = make_tensor_shaped(s, g_float_of(self), tdevice(self))
  end
  local function g_scales()
    local r = R:float()
    if r < 0.5 then return nil end
    if r < 0.9 then return { beta = R:chance(0.3) and 0 or g_number(), alpha = g_number() } end
    return R:chance(0.5) and { gamma = 1 } or g_junk()
  end
  entry { name = "dot", kind = "method", ret = "tensor", weight = 1,
          gen = function(a, shape, self) g_product_operand(a, { shape[1] or 2 }, self) end,
          expect = expect_shape(function(shape, a)
            local sb = geom(a[1])
            if #shape == 1 and sb and #sb == 1 and sb[1] == shape[1] then return {} end
          end) }
  entry { name = "outer", kind = "method", ret = "tensor", weight = 1,
          gen = function(a, _, self) g_product_operand(a, { R:int(0, 5) }, self) end,
          expect = expect_shape(function(shape, a)
            local sb = geom(a[1])
            if #shape == 1 and sb and #sb == 1 then return { shape[1], sb[1] } end
          end) }
  entry { name = "mv", kind = "method", ret = "tensor", weight = 1,
          gen = function(a, shape, self) g_product_operand(a, { shape[#shape] or 2 }, self) end,
          expect = expect_shape(function(shape, a)
            local sb = geom(a[1])
            if #shape == 2 and sb and #sb == 1 and sb[1] == shape[2] then return { shape[1] } end
          end) }
  entry { name = "bmm", kind = "method", ret = "tensor", weight = 1,
          gen = function(a, shape, self)
            g_product_operand(a, { shape[1] or 1, shape[3] or shape[2] or 2, R:int(0, 4) }, self)
          end,
          expect = expect_shape(function(shape, a)
            local sb = geom(a[1])
            if #shape == 3 and sb and #sb == 3 and sb[1] == shape[1] and sb[2] == shape[3] then
              return { shape[1], shape[2], sb[3] }
            end
          end) }
  -- addmm's c is self (the method) or the first argument; a and b fit c's last two dims
  local function g_addmm_operands(a, cshape, self)
    local m = cshape[#cshape - 1] or R:int(1, 4)
    local n = cshape[#cshape] or R:int(1, 4)
    if R:chance(0.3) then m = 1 end
    local k = R:int(0, 5)
    g_product_operand(a, { m, k }, self)
    g_product_operand(a, { k, n }, self)
    local opts = g_scales()
    if opts ~= nil then a.n = a.n + 1; a[a.n] = opts end
  end
  entry { name = "addmm", kind = "method", ret = "tensor", weight = 1, gen = g_addmm_operands }
  entry { name = "addmm_", kind = "method", ret = "self", mutates = true, weight = 1,
          gen = g_addmm_operands }
  entry { name = "free", kind = "method", gen = function() end, ret = "none", mutates = true }

  -- ---- scans and the softmax family (issue 13): a dim (0-d tensors take dim 1), results of
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

  -- ---- masks (issue 12): a mask broadcastable to self (g_like), or junk
  local function g_fill_value(a, self)
    a.n = a.n + 1
    local r = R:float()
    if r < 0.55 then a[a.n] = g_number()
    elseif r < 0.7 then a[a.n] = R:chance(0.5)
    elseif r < 0.9 then a[a.n] = make_tensor_shaped({}, R:pick(DTYPES), tdevice(self))
    else a[a.n] = g_junk() end
  end
  entry { name = "masked_fill_", kind = "method", ret = "self", mutates = true, weight = 2,
          gen = function(a, shape, self) a.n = 1; g_like(a, shape, self); g_fill_value(a, self) end }
  entry { name = "masked_fill", kind = "method", ret = "tensor", weight = 2, expect = binary_expect,
          gen = function(a, shape, self) a.n = 1; g_like(a, shape, self); g_fill_value(a, self) end }
  entry { name = "masked_select", kind = "method", ret = "tensor", weight = 2,
          gen = function(a, shape, self) a.n = 1; g_like(a, shape, self) end,
          expect = function(_, _, res)
            local got = geom(res[1])
            if got and #got ~= 1 then return "masked_select gave shape " .. list_str(got) end
          end }
  entry { name = "nonzero", kind = "method", ret = "tensor", gen = function() end,
          expect = function(shape, _, res)
            local got = geom(res[1])
            if got and (#got ~= 2 or got[2] ~= #shape) then
              return "nonzero of shape " .. list_str(shape) .. " gave " .. list_str(got)
            end
            if tdtype(res[1]) ~= "int64" then return "nonzero gave " .. tostring(tdtype(res[1])) end
          end }
  for _, op in ipairs({ "any", "all", "count_nonzero" }) do
    entry { name = op, kind = "method", ret = "any",
            gen = function(a, shape)
              if R:chance(0.6) then a.n = 2; a[2] = g_dim(shape) end
              if R:chance(0.3) then a.n = 3; a[3] = R:pick({ true, false, 0 }) end   -- keepdim
            end,
            expect = function(shape, a, res)
              local want = op == "count_nonzero" and "int64" or "bool"
              if a[1] == nil then
                local ok = op == "count_nonzero" and math.type(res[1]) == "integer"
                           or op ~= "count_nonzero" and type(res[1]) == "boolean"
                if not ok then return op .. "() gave a " .. type(res[1]) end
                return nil
              end
              local p = tensor_problem(res[1])
              if p then return p end
              if tdtype(res[1]) ~= want then return op .. "(dim) gave " .. tostring(tdtype(res[1])) end
              local d = as_integer(a[1])
              local want_shape = d and shape[d] and removed(shape, d)
              if want_shape and a[2] == true then
                want_shape = { table.unpack(shape) }; want_shape[d] = 1
              end
              if want_shape and not same_list(geom(res[1]), want_shape) then
                return "result shape " .. list_str(geom(res[1])) .. " for dim " .. d ..
                  (a[2] == true and " with keepdim" or "")
              end
            end }
  end

  -- ---- sorting and selection (issue 13): a dim (or nil) and flags, sometimes junk
  local function g_flag() return R:pick({ true, false, nil, 1 }) end
  local function sort_expect(shape, a, res)
    if res.n ~= 2 then return "sort returned " .. res.n .. " values" end
    for k = 1, 2 do
      local p = tensor_problem(res[k])
      if p then return p end
    end
    if tdtype(res[2]) ~= "int64" then return "sort indices are " .. tostring(tdtype(res[2])) end
    if not same_list(geom(res[1]), shape) then return "sort gave shape " .. list_str(geom(res[1])) end
  end
  entry { name = "sort", kind = "method", ret = "any", weight = 1,
          gen = function(a, shape) a.n = 2; a[1] = R:chance(0.7) and g_dim(shape) or nil; a[2] = g_flag() end,
          expect = sort_expect }
  entry { name = "argsort", kind = "method", ret = "tensor", weight = 1,
          gen = function(a, shape) a.n = 2; a[1] = R:chance(0.7) and g_dim(shape) or nil; a[2] = g_flag() end,
          expect = function(shape, _, res)
            if tdtype(res[1]) ~= "int64" then return "argsort gave " .. tostring(tdtype(res[1])) end
            if not same_list(geom(res[1]), shape) then return "argsort gave shape " .. list_str(geom(res[1])) end
          end }
  entry { name = "topk", kind = "method", ret = "any", weight = 1,
          gen = function(a, shape)
            a.n = 4
            a[1] = R:int(-1, 6)
            a[2] = R:chance(0.7) and g_dim(shape) or nil
            a[3], a[4] = g_flag(), g_flag()
          end,
          expect = function(shape, a, res)
            if res.n ~= 2 then return "topk returned " .. res.n .. " values" end
            local want = { table.unpack(shape) }
            local d = as_integer(a[2]) or #shape
            if #want > 0 and want[d] then want[d] = a[1] end
            if #shape > 0 and not same_list(geom(res[1]), want) then
              return "topk gave shape " .. list_str(geom(res[1])) .. ", expected " .. list_str(want)
            end
          end }
  -- (a[1] is self: the arguments start at a[2])
  entry { name = "kthvalue", kind = "method", ret = "any", weight = 1,
          gen = function(a, shape)
            a.n = 4; a[2] = R:int(0, 6); a[3] = R:chance(0.7) and g_dim(shape) or nil
            a[4] = R:pick({ nil, true, false, 1 })
          end }
  entry { name = "median", kind = "method", ret = "any", weight = 1,
          gen = function(a, shape)
            if R:chance(0.6) then a.n = 2; a[2] = g_dim(shape) end
            if R:chance(0.4) then a.n = 3; a[3] = R:pick({ true, false, "yes" }) end
          end }
  entry { name = "unique", kind = "method", ret = "any", weight = 1,
          gen = function(a)
            local r = R:float()
            if r < 0.7 then a.n = 1; a[1] = { return_inverse = g_flag(), return_counts = g_flag() }
            elseif r < 0.8 then a.n = 1; a[1] = g_junk() end
          end }
  entry { name = "bincount", kind = "method", ret = "any", weight = 1,
          gen = function(a, shape, self)
            local r = R:float()
            if r < 0.3 then a.n = 1; a[1] = R:int(-1, 9)
            elseif r < 0.6 then
              a.n = 2
              a[1] = make_tensor_shaped({ shape[1] or 1 }, R:pick(DTYPES), tdevice(self))
              a[2] = R:chance(0.5) and R:int(-1, 9) or nil
            end
          end }
  entry { name = "histc", kind = "method", ret = "any", weight = 1,
          gen = function(a)
            a.n = 3
            a[1] = R:chance(0.8) and R:int(-1, 20) or nil
            a[2] = R:chance(0.5) and g_number() or nil
            a[3] = R:chance(0.5) and g_number() or nil
          end }
  entry { name = "searchsorted", kind = "module", ret = "tensor", weight = 1,
          gen = function(a)
            a.n = 3
            a[1] = pool_pick()
            a[2] = R:chance(0.8) and pool_pick() or g_number()
            a[3] = g_flag()
          end }

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
    entry { name = fname, kind = "module", ret = "tensor", gen = g_creation, expect = creation_expect(1) }
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
  -- ---- sampling (issue 13)
  entry { name = "uniform_", kind = "method", ret = "self", mutates = true,
          gen = function(a) a.n = 2; a[1] = R:chance(0.7) and g_number() or nil; a[2] = R:chance(0.7) and g_number() or nil end }
  entry { name = "normal_", kind = "method", ret = "self", mutates = true,
          gen = function(a) a.n = 2; a[1] = R:chance(0.7) and g_number() or nil; a[2] = R:chance(0.7) and g_number() or nil end }
  entry { name = "random_", kind = "method", ret = "self", mutates = true,
          gen = function(a)
            a.n = 2
            a[1] = R:int(-5, 5)
            a[2] = R:chance(0.7) and R:int(-5, 300) or nil
          end }
  entry { name = "exponential_", kind = "method", ret = "self", mutates = true,
          gen = function(a) a.n = 1; a[1] = R:chance(0.8) and g_number() or nil end }
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
  entry { name = "save", kind = "module", ret = "any", weight = 0.5,
          gen = function(a) a.n = 2; a[1] = R:pick(SAVE_PATHS); a[2] = pool_pick() end }
  entry { name = "load", kind = "module", ret = "tensor", weight = 0.5,
          gen = function(a)
            a.n = 1; a[1] = R:pick(LOAD_PATHS)
            if R:chance(0.3) then a.n = 2; a[2] = g_opts() end
          end }
  -- safetensors: saves of pool tensors under odd names with odd metadata (sometimes junk
  -- keys and values), loads of saved, valid, missing and freshly mutated files
  local ST_NAMES = { "w", "layer.0.weight", "", "é", "x", ("n"):rep(300), "q\"uote\n" }
  local ST_BAD_NAMES = { "__metadata__", "a\0b", "\255", "\192\128" }
  local function g_st_metadata()
    local r = R:float()
    if r < 0.5 then return { format = R:pick({ "pt", "", "\0", "é", ("v"):rep(200) }) } end
    if r < 0.7 then
      return { [R:pick(R:chance(0.8) and ST_NAMES or ST_BAD_NAMES)] = R:pick({ "v", "\255", "a\0b" }) }
    end
    local m = {}
    local k, v = g_junk(), g_junk()
    if k ~= nil and k == k then m[k] = v end
    return m
  end
  entry { name = "save_safetensors", kind = "module", ret = "any", weight = 2,
          gen = function(a)
            a.n = 2; a[1] = R:pick(R:chance(0.7) and { ST_SAVE_PATHS[1], ST_SAVE_PATHS[2] } or ST_SAVE_PATHS)
            local t = {}
            for _ = 1, R:int(0, 4) do
              local r = R:float()
              local name = r < 0.9 and R:pick(ST_NAMES) or r < 0.95 and R:pick(ST_BAD_NAMES) or g_junk()
              local v = R:chance(0.85) and pool_pick() or g_junk()
              if name ~= nil and name == name then t[name] = v end
            end
            a[2] = R:chance(0.9) and t or g_junk()
            if R:chance(0.5) then a.n = 3; a[3] = R:chance(0.85) and g_st_metadata() or g_junk() end
          end }
  entry { name = "load_safetensors", kind = "module", ret = "any", weight = 6,
          gen = function(a)
            a.n = 1
            if R:chance(0.75) then
              write_file("mut.safetensors", st_mutate())
              a[1] = ST_MUTATED
            else
              a[1] = R:pick(ST_LOAD_PATHS)
            end
            if R:chance(0.3) then a.n = 2; a[2] = g_opts() end
          end,
          expect = function(_, _, res)
            local t, m = res[1], res[2]
            if res.n ~= 2 or type(t) ~= "table" or type(m) ~= "table" then
              return "returned " .. res.n .. " values: " .. type(t) .. ", " .. type(m)
            end
            for k, v in pairs(t) do
              if type(k) ~= "string" then return "a tensor name is a " .. type(k) end
              local p = tensor_problem(v) or read_problem(v)
              if p then return "tensor '" .. k .. "': " .. p end
            end
            for k, v in pairs(m) do
              if type(k) ~= "string" or type(v) ~= "string" then
                return "metadata maps a " .. type(k) .. " to a " .. type(v)
              end
            end
          end }
  -- issue 12: slicing, shape ops, splitting, creation and joining (their results are
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
  -- issue 22: triangles, diagonals, the *_as views, dtype shorthands, whole-tensor comparisons
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
  -- a list, not pairs: the order entries are made in is part of what a seed replays
  for _, nd in ipairs({ { "float", "float32" }, { "double", "float64" }, { "half", "float16" },
                        { "bfloat16", "bfloat16" }, { "long", "int64" }, { "int", "int32" },
                        { "bool", "bool" }, { "byte", "uint8" } }) do
    local name, dtype = nd[1], nd[2]
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
    entry { name = fname, kind = "module", ret = "tensor",
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
              -- Torch7 indexing (issue 12): a view ({} is all of t)
              return tensor_problem(res[1])
            elseif is_tensor(k) then
              -- a bool mask or integer positions (issue 12): a new tensor
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

  -- ---- metamethods called directly, with anything (scripts can: getmetatable(t).__gc(5))
  for _, m in ipairs({ { "__gc", {} }, { "__close", {} }, { "__index", { "index" } },
                       { "__newindex", { "index", "newindex" } }, { "__len", { "len" } },
                       { "__tostring", { "tostring" } }, { "__add", { "add" } },
                       { "__sub", { "sub" } }, { "__mul", { "mul" } }, { "__div", { "div" } },
                       { "__pow", { "pow" } }, { "__unm", { "neg", "unm" } } }) do
    local names = { m[1], m[1]:sub(3) }
    for _, alias in ipairs(m[2]) do names[#names + 1] = alias end
    entry { name = m[1], kind = "meta", ret = "any", names = names, weight = 0.3,
            mutates = (m[1] == "__gc" or m[1] == "__close" or m[1] == "__newindex"),
            gen = function(a, _, self)
              a.n = R:int(0, 3)
              for i = 1, a.n do a[i] = g_junk() end
              if a.n >= 1 and R:chance(0.5) then a[1] = self end
            end }
  end

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
      assert(qlua[e.name], "fuzz: no function qlua." .. e.name)
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
        if (s == nil and pcall(r.numel, r) == false) or (s and span(s) <= CAP) then pool_add(r) end
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
