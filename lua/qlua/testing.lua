--[[
qlua.testing — helpers shared by the busted specs in spec/.

The specs judge the implementation from the contract in docs/API.md, so everything here
is written from that contract alone, in plain Lua:

  * devices:      which devices this process can test ("cpu", plus "gpu" when one is there)
  * random data:  fresh values from a fixed seed per test; floats never zero, rounded to
                  float32 when the tensor will be float32 so references see exactly what
                  the tensor holds; integers in a range
  * nested tables: shape_of / flatten / unflatten / each_index
  * references:   gather, index_select, take, scatter, index_add, matmul, reductions,
                  elementwise maps with NumPy broadcasting — straightforward loops over
                  nested tables, the "CPU twin" every op is compared with — and the
                  unary and binary ops' scalar references (T.ref, in qlua/testing/ref.lua)
  * layouts:      the same values as a contiguous, transposed, narrowed or stepped tensor
                  (and broadcast views through expand), built from views only
  * comparisons:  exact (ints, copies; NaN equals NaN) and relative-norm for floats
  * poisoning:    NaN / sentinel fills before in-place ops, and a "poisoned pool" (memory
                  filled and handed back) so an op that leaves output elements unwritten
                  is caught by the allocator reuse
  * errors:       error_of(fn) returns the message of an error that fn must raise
  * 16-bit floats: float16 and bfloat16 bits, rounding and raw bits through files
                  (qlua/testing/half.lua)

Nothing here asserts through luassert, so the module also loads outside busted; the
assert_* helpers raise plain errors (busted reports them as failures, with the message).
]]

local T = {}

local qlua = rawget(_G, "qlua") or require("qlua")
T.qlua = qlua

------------------------------------------------------------------------ small utilities

local huge = math.huge

local function isnan(x) return x ~= x end
T.isnan = isnan

-- Rounds a Lua number to the nearest float32 (what a float32 tensor stores).
function T.f32(x)
  if x ~= x or x == huge or x == -huge then return x end
  return (string.unpack("<f", string.pack("<f", x)))
end

-- A number as the given dtype stores it (float32 rounding; integers must already be
-- integers, and uint8 keeps the low 8 bits as C's narrowing does; bool is nonzero, as a
-- Lua boolean, and takes booleans as they are).
function T.as_dtype(x, dtype)
  if dtype == "bool" then
    if type(x) == "boolean" then return x end
    return x ~= 0
  end
  if type(x) == "boolean" then x = x and 1 or 0 end
  if dtype == "float32" then return T.f32(x) end
  if dtype == "float64" then return x + 0.0 end
  local i = math.tointeger(x) or error("as_dtype: " .. tostring(x) .. " is not an integer")
  if dtype == "uint8" then return i & 0xFF end
  return i
end

function T.is_float_dtype(dtype) return dtype == "float32" or dtype == "float64" end
-- The lists the runtime makes from its own (the registry's qlua.ops): the elementwise ops
-- the binding makes methods of (T.op_list "unary", "unary_bool", "binary"), and every
-- dtype of the dtype list (T.dtype_info(): {name =, size =, kind =, short =, min =, max =,
-- digits =} in enum order), so a spec that walks them covers a new op or dtype by itself.
local OPS = debug.getregistry()["qlua.ops"]
assert(type(OPS) == "table", "qlua.testing: this qlua has no qlua.ops list in its registry")
function T.op_list(name) return OPS[name] end
function T.dtype_info() return OPS.dtypes end

-- The dtypes every arithmetic spec loops over, in the dtype list's order: the floats and
-- the signed integers (T.dtypes); bool and uint8 (T.small_dtypes, the 1-byte ones) have
-- their own specs (spec/ops/dtype_small_spec.lua), since bool refuses some arithmetic; the
-- 16-bit floats (T.half_dtypes, testing/half.lua) theirs.
T.float_dtypes, T.int_dtypes, T.small_dtypes, T.all_dtypes = {}, {}, {}, {}
local SIZE = {}
for _, d in ipairs(OPS.dtypes) do
  if d.kind ~= "half" then
    SIZE[d.name] = d.size
    T.all_dtypes[#T.all_dtypes + 1] = d.name
    if d.kind == "float" then T.float_dtypes[#T.float_dtypes + 1] = d.name end
    if d.kind == "int" and d.min < 0 then T.int_dtypes[#T.int_dtypes + 1] = d.name end
    if d.size == 1 then T.small_dtypes[#T.small_dtypes + 1] = d.name end
  end
end
T.dtypes = {}
for _, list in ipairs({ T.float_dtypes, T.int_dtypes }) do
  for _, d in ipairs(list) do T.dtypes[#T.dtypes + 1] = d end
end

-- NumPy's promotion (docs/API.md "Arithmetic"): bool with anything gives the other; two
-- floats or two integers the wider; a float with an integer the float when it holds
-- every value of the integer (float32 with uint8), else float64.
function T.promote(a, b)
  if a == b or b == "bool" then return a end
  if a == "bool" then return b end
  local fa, fb = T.is_float_dtype(a), T.is_float_dtype(b)
  if fa == fb then return SIZE[a] >= SIZE[b] and a or b end
  local f, i = fa and a or b, fa and b or a
  if SIZE[i] * 2 <= SIZE[f] then return f end
  return "float64"
end

-- The dtype of op's result on a tensor of dtype da (and, for a binary op, an operand of
-- dtype db) by docs/API.md's rules: comparisons, logical ops and predicates give bool;
-- argmax/argmin int64; sum, prod, cumsum and cumprod int64 for integer and bool tensors;
-- the reductions, scans and softmaxes computed in floating point float64 for them; a
-- binary op the promoted dtype, with / (and the other float-only binary ops) float64 for
-- integers; every other op (max, min, amax, amin, cummax, the views...) keeps the dtype.
local BOOL_RESULT = { eq = true, ne = true, lt = true, le = true, gt = true, ge = true,
  logical_and = true, logical_or = true, logical_xor = true, logical_not = true,
  isnan = true, isinf = true, isfinite = true }
local INT64_RESULT = { argmax = true, argmin = true }
local INT64_FOR_INTEGERS = { sum = true, prod = true, cumsum = true, cumprod = true }
local FLOAT_FOR_INTEGERS = { mean = true, var = true, std = true, norm = true, logsumexp = true,
  logcumsumexp = true, softmax = true, log_softmax = true, div = true, atan2 = true,
  hypot = true }
function T.result_dtype(op, da, db)
  if BOOL_RESULT[op] then return "bool" end
  if INT64_RESULT[op] then return "int64" end
  local d = db and T.promote_half(da, db) or da
  local float = T.is_float_dtype(d) or T.is_half_dtype(d)
  if INT64_FOR_INTEGERS[op] then return float and d or "int64" end
  if FLOAT_FOR_INTEGERS[op] then return float and d or "float64" end
  return d
end

-- Relative tolerances for comparing a float result with the float64 Lua reference.
T.tol = { float32 = 1e-6, float64 = 1e-12 }

local function shallow_copy(t)
  local c = {}
  for k, v in pairs(t) do c[k] = v end
  return c
end
T.copy_list = shallow_copy

-- "2x3" for {2, 3}; "scalar" for {} (the format of qt_shape_str, for messages).
function T.shape_str(shape)
  if #shape == 0 then return "scalar" end
  return table.concat(shape, "x")
end

------------------------------------------------------------------------ devices

-- Whether a GPU is usable, and if not, why (the message a GPU allocation raises, or
-- the device count).
function T.gpu_status()
  local ok, count = pcall(qlua.gpu_count)
  if not ok then return false, "qlua.gpu_count() failed: " .. tostring(count) end
  if count == 0 then
    local ok2, err = pcall(qlua.empty, { 1 }, { device = "gpu" })
    if ok2 then return false, "qlua.gpu_count() is 0 but a GPU allocation worked" end
    return false, "qlua.gpu_count() == 0 (" .. tostring(err) .. ")"
  end
  return true, nil
end

function T.has_gpu() return (T.gpu_status()) end

-- A maker of busted tests that need a GPU: `local gtest = T.gpu_tests(_ENV)`. busted's
-- it and pending live in the spec file's environment, and pending means "this test is
-- pending" only when looked up while the test runs, so both are looked up at call time.
-- A test made by gtest(name, fn) runs with data seeded from its name (T.reseed); without
-- a GPU it is reported as pending with the reason.
function T.gpu_tests(env)
  local has, reason = T.gpu_status()
  return function(name, fn)
    if has then
      env.it(name, function() T.reseed(name); fn() end)
    else
      env.it(name, function() env.pending("no GPU: " .. tostring(reason)) end)
    end
  end
end

-- both(name, fn) declares fn("cpu") as "<name> (cpu)" and fn("gpu") as a gpu_tests case
-- "<name> (gpu)" (pending without a GPU), each with its own seed:
--   local both = T.both_devices(_ENV)
function T.both_devices(env)
  local gtest = T.gpu_tests(env)
  return function(name, fn)
    env.it(name .. " (cpu)", function() T.reseed(name); fn("cpu") end)
    gtest(name .. " (gpu)", function() fn("gpu") end)
  end
end

-- A maker of busted tests seeded from their names: test(name, fn) is it(name, fn) with
-- T.reseed(name) first, so every test has its own fixed data. `local test = T.tests(_ENV)`.
function T.tests(env)
  return function(name, fn) env.it(name, function() T.reseed(name); fn() end) end
end

-- A spec's opening line: T, qlua, and the makers of seeded CPU tests (T.tests), GPU tests
-- (T.gpu_tests) and tests on both devices (T.both_devices), of the spec's environment:
--   local T, qlua, test, gtest, both = require("qlua.testing").spec(_ENV)
-- The GPU makers look for a GPU when they first declare a test, so a spec that takes them
-- and declares none never probes for one.
function T.spec(env)
  local gtest, both
  return T, T.qlua, T.tests(env),
    function(name, fn) gtest = gtest or T.gpu_tests(env); return gtest(name, fn) end,
    function(name, fn) both = both or T.both_devices(env); return both(name, fn) end
end

-- {"cpu"} plus "gpu" when a GPU is present.
function T.devices()
  local list = { "cpu" }
  if T.has_gpu() then list[#list + 1] = "gpu" end
  return list
end

------------------------------------------------------------------------ random data

-- Seeds Lua's generator; tests call this (or reseed) so every test has its own fixed data.
function T.seed(n) math.randomseed(n) end

-- A seed derived from a string (the test's name), so each test has fixed but different data.
function T.reseed(name)
  local h = 5381
  for i = 1, #name do h = (h * 33 + name:byte(i)) % 2147483647 end
  math.randomseed(h)
  return h
end

-- One random value for dtype. opts: lo, hi (floats: magnitude range, default 0.5..2;
-- ints: inclusive range, default -50..50), positive (floats: no sign; ints: lo >= 1 by
-- default), zero (ints: allow 0; floats never give 0).
function T.random_value(dtype, opts)
  opts = opts or {}
  if dtype == "bool" then return math.random() < 0.5 end
  if dtype == "uint8" then
    local lo, hi = math.max(opts.lo or 1, 0), math.min(opts.hi or 200, 255)
    if opts.zero then lo = math.max(opts.lo or 0, 0) end
    return math.random(lo, hi)
  end
  if T.is_float_dtype(dtype) then
    local lo, hi = opts.lo or 0.5, opts.hi or 2.0
    local v
    if opts.lo and opts.lo < 0 then  -- a plain interval that may straddle 0
      repeat v = lo + (hi - lo) * math.random() until v ~= 0
    else
      v = lo + (hi - lo) * math.random()
      if v == 0 then v = hi end
      if not opts.positive and math.random() < 0.5 then v = -v end
    end
    return T.as_dtype(v, dtype)
  else
    local lo, hi = opts.lo or (opts.positive and 1 or -50), opts.hi or 50
    local v
    repeat v = math.random(lo, hi) until v ~= 0 or opts.zero or (lo == 0 and hi == 0)
    return v
  end
end

-- A flat list of n random values.
function T.random_list(n, dtype, opts)
  local list = {}
  for i = 1, n do list[i] = T.random_value(dtype, opts) end
  return list
end

-- A nested table of the given shape of random values ({} shape: one number).
function T.random_table(shape, dtype, opts)
  return T.unflatten(T.random_list(T.numel(shape), dtype, opts), shape)
end

-- A nested table of random 1-based index values in 1..bound.
function T.random_index(shape, bound)
  local list = {}
  for i = 1, T.numel(shape) do list[i] = math.random(1, bound) end
  return T.unflatten(list, shape)
end

-- A random permutation of 1..n.
function T.permutation(n)
  local p = {}
  for i = 1, n do p[i] = i end
  for i = n, 2, -1 do
    local j = math.random(1, i)
    p[i], p[j] = p[j], p[i]
  end
  return p
end

-- Random operand data suited to binary op `name` (which: 1 for self, 2 for the other
-- operand; rd: the result dtype, default dtype): pow gets positive float bases (or small
-- integer ones) and small exponents; comparisons few distinct values, so that ties and
-- equalities happen; every other op the default values (never zero, so / is safe).
function T.binary_operand(name, which, shape, dtype, rd)
  rd = rd or dtype
  if T.ref.binary[name] and T.ref.binary[name].cmp then
    local list = {}
    for i = 1, T.numel(shape) do
      local v = math.random(-3, 3)
      list[i] = T.is_float_dtype(dtype) and v + 0.0 or v
    end
    return T.unflatten(list, shape)
  elseif name == "pow" then
    if which == 1 then
      if T.is_float_dtype(rd) then
        return T.random_table(shape, dtype, T.is_float_dtype(dtype) and { positive = true } or { lo = 1, hi = 9 })
      end
      return T.random_table(shape, dtype, { lo = -9, hi = 9, zero = true })
    end
    if T.is_float_dtype(dtype) then return T.random_table(shape, dtype, { lo = -2, hi = 2 }) end
    return T.random_table(shape, dtype, { lo = 0, hi = 3, zero = true })
  end
  return T.random_table(shape, dtype)
end

------------------------------------------------------------------------ nested tables

function T.numel(shape)
  local n = 1
  for i = 1, #shape do n = n * shape[i] end
  return n
end

-- Row-major strides (in elements) for shape.
function T.strides(shape)
  local st, acc = {}, 1
  for i = #shape, 1, -1 do
    st[i] = acc
    acc = acc * shape[i]
  end
  return st
end

-- The shape of a rectangular nested table (a number has shape {}). An empty table
-- ends the shape with a 0.
function T.shape_of(x)
  local shape = {}
  while type(x) == "table" do
    shape[#shape + 1] = #x
    if #x == 0 then break end
    x = x[1]
  end
  return shape
end

-- Flat list of a nested table's numbers in row-major order, and its shape.
function T.flatten(x)
  local out = {}
  local function walk(v)
    if type(v) == "table" then
      for i = 1, #v do walk(v[i]) end
    else
      out[#out + 1] = v
    end
  end
  walk(x)
  return out, T.shape_of(x)
end

-- Nested table of `shape` from a flat row-major list (shape {}: the number itself).
function T.unflatten(flat, shape)
  if #shape == 0 then return flat[1] end
  local pos = 0
  local function build(d)
    local t = {}
    if d == #shape then
      for i = 1, shape[d] do pos = pos + 1; t[i] = flat[pos] end
    else
      for i = 1, shape[d] do t[i] = build(d + 1) end
    end
    return t
  end
  return build(1)
end

-- Calls fn(pos, k) for every multi-index pos (a table, reused: copy it to keep it) of
-- shape in row-major order; k is the 1-based flat position.
function T.each_index(shape, fn)
  local n = T.numel(shape)
  if n == 0 then return end
  local nd = #shape
  local pos = {}
  for d = 1, nd do pos[d] = 1 end
  for k = 1, n do
    fn(pos, k)
    local d = nd
    while d >= 1 do
      pos[d] = pos[d] + 1
      if pos[d] <= shape[d] then break end
      pos[d] = 1
      d = d - 1
    end
  end
end

-- Flat 1-based position of multi-index pos in a row-major array of shape.
function T.linear(shape, pos)
  local k, acc = 0, 1
  for d = #shape, 1, -1 do
    k = k + (pos[d] - 1) * acc
    acc = acc * shape[d]
  end
  return k + 1
end

-- A flat list's values as numbers: booleans (a bool tensor's elements) as 1 and 0.
function T.numbers(list)
  local out = {}
  for i, v in ipairs(list) do
    if type(v) == "boolean" then out[i] = v and 1 or 0 else out[i] = v end
  end
  return out
end

------------------------------------------------------------------------ references

-- T.ref (and T.array, the { shape =, data = } form the references work on): plain-Lua
-- references over nested tables, in qlua/testing/ref.lua.
require("qlua.testing.ref")(T)
local arr = T.array

------------------------------------------------------------------------ tensors in layouts

T.layouts = { "contiguous", "transposed", "narrowed", "stepped" }
T.noncontiguous_layouts = { "transposed", "narrowed", "stepped" }

-- What fills the elements of a base tensor that the view does not show: NaN for floats,
-- a sentinel for ints, so an op that reads outside its view gives a visibly wrong result.
T.SENTINEL = -987654321  -- fits int32
function T.junk(dtype)
  if dtype == "bool" then return true end
  if dtype == "uint8" then return 0xAB end
  return T.is_float_dtype(dtype) and 0 / 0 or T.SENTINEL
end

local function tensor_opts(dtype, device) return { dtype = dtype, device = device or "cpu" } end

-- A contiguous tensor of shape from a flat list (works for empty shapes too).
function T.from_flat(flat, shape, dtype, device)
  if #shape == 0 then return qlua.tensor(flat[1], tensor_opts(dtype, device)) end
  local t = qlua.tensor(flat, tensor_opts(dtype, device))
  if #shape == 1 then return t end
  return t:view(shape)
end

-- Builds a base tensor of base_shape holding junk except where map(pos) (a position in
-- `shape`) places the values of a.
local function build_base(a, base_shape, dtype, device, map)
  local flat = {}
  local junk = T.junk(dtype)
  for i = 1, T.numel(base_shape) do flat[i] = junk end
  T.each_index(a.shape, function(pos, k)
    flat[T.linear(base_shape, map(pos))] = a.data[k]
  end)
  return T.from_flat(flat, base_shape, dtype, device)
end

-- A tensor holding the values of x (a nested table or number) with the given layout:
--   contiguous  plain row-major
--   transposed  dims 1 and N swapped in storage, then :transpose(1, N) (1-D: a column of
--               a 3-wide matrix, stride 3)
--   narrowed    interior of a tensor 2 larger in every dim (start 2 in each), junk around
--   stepped     every other element in every dim (view as (n, 2) + select), junk between
-- shape (optional) gives x's shape explicitly (needed for empty shapes).
function T.make(x, dtype, layout, device, shape)
  local a = type(x) == "number" and { shape = {}, data = { x } } or arr(x, shape)
  local s = a.shape
  local nd = #s
  layout = layout or "contiguous"
  if layout == "contiguous" or nd == 0 then
    return T.from_flat(a.data, s, dtype, device)
  elseif layout == "transposed" then
    if nd == 1 then
      local base = build_base(a, { s[1], 3 }, dtype, device, function(pos) return { pos[1], 1 } end)
      return base:select(2, 1)
    end
    local bs = shallow_copy(s)
    bs[1], bs[nd] = s[nd], s[1]
    local q = {}
    local base = build_base(a, bs, dtype, device, function(pos)
      for i = 1, nd do q[i] = pos[i] end
      q[1], q[nd] = pos[nd], pos[1]
      return q
    end)
    return base:transpose(1, nd)
  elseif layout == "narrowed" then
    local bs, q = {}, {}
    for i = 1, nd do bs[i] = s[i] + 2 end
    local base = build_base(a, bs, dtype, device, function(pos)
      for i = 1, nd do q[i] = pos[i] + 1 end
      return q
    end)
    local t = base
    for i = 1, nd do t = t:narrow(i, 2, s[i]) end
    return t
  elseif layout == "stepped" then
    local bs, q = {}, {}
    for i = 1, nd do bs[i] = 2 * s[i] end
    local base = build_base(a, bs, dtype, device, function(pos)
      for i = 1, nd do q[i] = 2 * pos[i] - 1 end
      return q
    end)
    -- (2 s1, 2 s2, ...) -> (s1, 2, s2, 2, ...) -> select 1 in each pair dim, last first
    local vs = {}
    for i = 1, nd do vs[2 * i - 1] = s[i]; vs[2 * i] = 2 end
    local t = base:view(vs)
    for i = nd, 1, -1 do t = t:select(2 * i, 1) end
    return t
  end
  error("T.make: unknown layout " .. tostring(layout))
end

-- x (nested, shape small) as a tensor expanded (stride 0) to shape; small must have
-- shape's number of dims with 1s where it broadcasts.
function T.expanded(x, shape, dtype, device)
  return T.make(x, dtype, "contiguous", device):expand(shape)
end

------------------------------------------------------------------------ comparisons

-- Values and shape of a tensor, a nested table or a number.
local function values_of(x)
  if qlua.is_tensor(x) then
    local v = x:totable()
    local flat = T.flatten(v)
    return flat, x:shape()
  elseif type(x) == "table" then
    return T.flatten(x)
  else
    return { x }, {}
  end
end
T.values_of = values_of

local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end
T.same_shape = same_shape

local function fmt(v)
  if math.type(v) == "float" then return string.format("%.9g", v) end
  return tostring(v)
end

-- Checks shapes; expected's shape from the nested table unless it is empty (then only
-- the element count is compared).
local function check_shapes(ashape, eshape, nexp, what)
  if nexp > 0 and not same_shape(ashape, eshape) then
    error(string.format("%s: shape %s, expected %s", what, T.shape_str(ashape),
      T.shape_str(eshape)), 3)
  end
end

-- Exact comparison (NaN equals NaN; 1 == 1.0). actual: tensor, nested table or number.
function T.assert_equal(actual, expected, what)
  what = what or "values"
  local a, ashape = values_of(actual)
  local e, eshape = values_of(expected)
  check_shapes(ashape, eshape, #e, what)
  if #a ~= #e then
    error(string.format("%s: %d elements, expected %d", what, #a, #e), 2)
  end
  for i = 1, #e do
    local x, y = a[i], e[i]
    if not (x == y or (x ~= x and y ~= y)) then
      error(string.format("%s: element %d (row-major) is %s, expected %s", what, i, fmt(x),
        fmt(y)), 2)
    end
  end
  return true
end

-- ‖a − b‖ / ‖b‖ over the finite positions (absolute when ‖b‖ is 0); nil and a message
-- when the NaN / infinity positions differ.
function T.rel_error(a, e)
  local num, den = 0.0, 0.0
  for i = 1, #e do
    local x, y = a[i], e[i]
    if y ~= y or y == huge or y == -huge then
      if not (x == y or (x ~= x and y ~= y)) then
        return nil, string.format("element %d is %s, expected %s", i, fmt(x), fmt(y))
      end
    else
      if x ~= x or x == huge or x == -huge then
        return nil, string.format("element %d is %s, expected %s", i, fmt(x), fmt(y))
      end
      num = num + (x - y) * (x - y)
      den = den + y * y
    end
  end
  if den == 0 then return math.sqrt(num) end
  return math.sqrt(num) / math.sqrt(den)
end

-- Relative-norm comparison for floats: ‖a − e‖/‖e‖ <= tol (NaN/inf positions must match).
function T.assert_close(actual, expected, tol, what)
  what = what or "values"
  tol = tol or 1e-6
  local a, ashape = values_of(actual)
  local e, eshape = values_of(expected)
  check_shapes(ashape, eshape, #e, what)
  if #a ~= #e then
    error(string.format("%s: %d elements, expected %d", what, #a, #e), 2)
  end
  local err, msg = T.rel_error(a, e)
  if not err then error(what .. ": " .. msg, 2) end
  if err > tol then
    -- name the worst element to make the failure readable
    local worst, at = -1, 1
    for i = 1, #e do
      local d = math.abs(a[i] - e[i])
      if d == d and d > worst then worst, at = d, i end
    end
    error(string.format("%s: relative error %.3g > %.3g (worst: element %d is %s, expected %s)",
      what, err, tol, at, fmt(a[at]), fmt(e[at])), 2)
  end
  return true
end

-- Exact for integer dtypes, relative-norm with T.tol[dtype] for floats.
function T.assert_matches_dtype(actual, expected, dtype, what, tol)
  if T.is_float_dtype(dtype) then
    return T.assert_close(actual, expected, tol or T.tol[dtype], what)
  end
  return T.assert_equal(actual, expected, what)
end

function T.assert_shape(t, shape, what)
  local s = t:shape()
  if not same_shape(s, shape) then
    error(string.format("%s: shape %s, expected %s", what or "tensor", T.shape_str(s),
      T.shape_str(shape)), 2)
  end
  return true
end

------------------------------------------------------------------------ Philox reference

-- Philox4x32-10 as runtime/philox.h defines it (the generator every device shares):
-- returns the four 32-bit words for (seed, counter). Lua integers wrap modulo 2^64 and
-- >> is a logical shift, so 32-bit arithmetic is masking.
local M32 = 0xffffffff
function T.philox(seed, counter)
  local c0, c1, c2, c3 = counter & M32, (counter >> 32) & M32, 0, 0
  local k0, k1 = seed & M32, (seed >> 32) & M32
  for _ = 1, 10 do
    local p0 = 0xD2511F53 * c0
    local p1 = 0xCD9E8D57 * c2
    local hi0, lo0 = (p0 >> 32) & M32, p0 & M32
    local hi1, lo1 = (p1 >> 32) & M32, p1 & M32
    c0, c1, c2, c3 = hi1 ~ c1 ~ k0, lo1, hi0 ~ c3 ~ k1, lo0
    k0 = (k0 + 0x9E3779B9) & M32
    k1 = (k1 + 0xBB67AE85) & M32
  end
  return c0, c1, c2, c3
end

-- Element k (0-based counter) of each distribution, as philox.h maps the words.
function T.philox_uniform(seed, counter, dtype)
  local x0, x1 = T.philox(seed, counter)
  if dtype == "float64" then
    return (((x0 << 32) | x1) >> 11) * (1.0 / 9007199254740992.0)
  end
  return (x0 >> 8) * (1.0 / 16777216.0)
end

function T.philox_normal(seed, counter)
  local _, _, x2, x3 = T.philox(seed, counter)
  local u1 = (x2 + 1.0) * (1.0 / 4294967296.0)
  local u2 = x3 * (1.0 / 4294967296.0)
  return math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586476925 * u2)
end

function T.philox_int(seed, counter, lo, hi)
  local x0, x1 = T.philox(seed, counter)
  local bits = (x0 << 32) | x1
  local span = hi - lo + 1  -- the specs use small positive spans
  -- unsigned bits % span without overflow: halve, reduce, double back
  local v = (((bits >> 1) % span) * 2 + (bits & 1)) % span
  return lo + v
end

------------------------------------------------------------------------ files

-- The bytes of the file at path, and writing bytes to a file (raising when it cannot be
-- opened).
function T.read_file(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

function T.write_file(path, bytes)
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
end

------------------------------------------------------------------------ poisoning

-- Fills t with NaN (floats) or the sentinel (ints) and returns it.
function T.poison(t)
  if T.is_float_dtype(t:dtype()) then t:fill_(0 / 0) else t:fill_(T.SENTINEL) end
  return t
end

-- Allocates nbytes worth of tensors on device, fills them with NaN bytes and gives them
-- back, so the allocator hands poisoned memory to the next op (catches outputs that an
-- op leaves unwritten). Free is explicit: the memory goes back to the cache at once.
function T.poison_pool(device, nbytes, count)
  count = count or 4
  local n = math.max(1, math.ceil(nbytes / 8))
  local held = {}
  for i = 1, count do
    local t = qlua.empty({ n }, { dtype = "float64", device = device or "cpu" })
    t:fill_(0 / 0)
    held[i] = t
  end
  for i = 1, count do held[i]:free() end
end

------------------------------------------------------------------------ errors

-- A message without the "file.lua:12: " that luaL_error / error() put in front (the
-- caller's position), so patterns can anchor at the op name.
function T.strip_where(msg)
  msg = tostring(msg)
  local rest = msg:match("^.-%.lua:%d+: (.*)$") or msg:match("^%[string .-%]:%d+: (.*)$")
  return rest or msg
end

-- Runs fn, which must raise; returns the message (a string, without the position
-- prefix). Raises when fn succeeds.
function T.error_of(fn, ...)
  local ok, err = pcall(fn, ...)
  if ok then error("expected an error, but the call succeeded", 2) end
  return T.strip_where(err)
end

-- fn must raise an error whose message contains every one of the plain strings given;
-- returns the message without its position prefix.
function T.assert_error(fn, ...)
  local ok, err = pcall(fn)
  if ok then error("expected an error, but the call succeeded", 2) end
  err = T.strip_where(err)
  for i = 1, select("#", ...) do
    local want = select(i, ...)
    if not err:find(want, 1, true) then
      error(string.format("error message %q does not contain %q", err, want), 2)
    end
  end
  return err
end

-- fn must raise an error whose message matches the Lua pattern.
function T.assert_error_match(fn, pattern)
  local ok, err = pcall(fn)
  if ok then error("expected an error, but the call succeeded", 2) end
  err = T.strip_where(err)
  if not err:find(pattern) then
    error(string.format("error message %q does not match %q", err, pattern), 2)
  end
  return err
end

------------------------------------------------------------------------ 16-bit floats

-- float16 and bfloat16: bits, rounding, the 16-bit grid, raw bits through files, and
-- promotion with them (qlua/testing/half.lua).
require("qlua.testing.half")(T, { values_of = values_of, check_shapes = check_shapes, fmt = fmt })

-- A view of tensor c's values in a layout (T.layouts), built on a bigger base of c's
-- dtype filled with junk (default NaN for floats, T.junk's for the others) around and
-- between them; any dtype, any device.
function T.relayout(c, layout, junk)
  local s = c:shape()
  local nd = #s
  local dev, dtype = c:device(), c:dtype()
  if junk == nil then junk = T.is_half_dtype(dtype) and 0 / 0 or T.junk(dtype) end
  local function base(shape)
    return qlua.full(shape, junk, { dtype = dtype, device = dev })
  end
  if layout == "contiguous" or nd == 0 then return c:contiguous() end
  if layout == "transposed" then
    if nd == 1 then
      local b = base({ s[1], 3 })
      b:select(2, 1):copy_(c)
      return b:select(2, 1)
    end
    return c:transpose(1, nd):contiguous():transpose(1, nd)
  elseif layout == "narrowed" then
    local bs = {}
    for i = 1, nd do bs[i] = s[i] + 2 end
    local v = base(bs)
    for i = 1, nd do v = v:narrow(i, 2, s[i]) end
    v:copy_(c)
    return v
  elseif layout == "stepped" then
    local bs, vs = {}, {}
    for i = 1, nd do bs[i] = 2 * s[i]; vs[2 * i - 1] = s[i]; vs[2 * i] = 2 end
    local v = base(bs):view(vs)
    for i = nd, 1, -1 do v = v:select(2 * i, 1) end
    v:copy_(c)
    return v
  end
  error("T.relayout: unknown layout " .. tostring(layout))
end

return T
