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
                  nested tables, the "CPU twin" every op is compared with
  * layouts:      the same values as a contiguous, transposed, narrowed or stepped tensor
                  (and broadcast views through expand), built from views only
  * comparisons:  exact (ints, copies; NaN equals NaN) and relative-norm for floats
  * poisoning:    NaN / sentinel fills before in-place ops, and a "poisoned pool" (memory
                  filled and handed back) so an op that leaves output elements unwritten
                  is caught by the allocator reuse
  * errors:       error_of(fn) returns the message of an error that fn must raise

Nothing here asserts through luassert, so the module also loads outside busted; the
assert_* helpers raise plain errors (busted reports them as failures, with the message).
]]

local T = {}

local qlua = rawget(_G, "qlua") or require("qlua")
T.qlua = qlua

------------------------------------------------------------------------ small utilities

local floor, huge = math.floor, math.huge

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
-- The dtypes every arithmetic spec loops over; bool and uint8 (T.small_dtypes) have
-- their own specs (spec/dtype_bool_uint8_spec.lua), since bool refuses some arithmetic.
T.dtypes = { "float32", "float64", "int32", "int64" }
T.float_dtypes = { "float32", "float64" }
T.int_dtypes = { "int32", "int64" }
T.small_dtypes = { "bool", "uint8" }
T.all_dtypes = { "float32", "float64", "int32", "int64", "bool", "uint8" }
local SIZE = { float32 = 4, float64 = 8, int32 = 4, int64 = 8, bool = 1, uint8 = 1 }

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

-- Internal array form used by the references: { shape = {...}, data = flat }.
local function arr(x, shape)
  if type(x) == "table" and rawget(x, "data") and rawget(x, "shape") then return x end
  local flat, s = T.flatten(x)
  return { shape = shape or s, data = flat }
end
T.array = arr

local function nested(a) return T.unflatten(a.data, a.shape) end

-- Element at multi-index pos.
local function aget(a, pos) return a.data[T.linear(a.shape, pos)] end

------------------------------------------------------------------------ references

local ref = {}
T.ref = ref

-- Elementwise f over one nested table.
function ref.map(x, f)
  local a = arr(x)
  local out = {}
  for i = 1, #a.data do out[i] = f(a.data[i]) end
  return T.unflatten(out, a.shape)
end

-- NumPy broadcasting of two shapes; nil when they do not broadcast.
function ref.broadcast_shapes(sa, sb)
  local n = math.max(#sa, #sb)
  local out = {}
  for i = 1, n do
    local da = sa[#sa - n + i] or 1
    local db = sb[#sb - n + i] or 1
    if da == db or db == 1 then out[i] = da
    elseif da == 1 then out[i] = db
    else return nil end
  end
  return out
end

-- The value of a (shape sa) at position pos of the broadcast shape.
local function bget(a, pos, nout)
  local sa = a.shape
  local k, acc = 0, 1
  for d = #sa, 1, -1 do
    local p = pos[nout - #sa + d]
    if sa[d] == 1 then p = 1 end
    k = k + (p - 1) * acc
    acc = acc * sa[d]
  end
  return a.data[k + 1]
end

-- Elementwise f(x, y) with broadcasting; x or y may be a plain number. Returns a nested
-- table (or a number when both are scalars). shapes (optional) gives the shapes of x, y
-- explicitly (for empty operands).
function ref.map2(x, y, f, shapes)
  if type(x) == "number" and type(y) == "number" then return f(x, y) end
  local a = type(x) == "number" and { shape = {}, data = { x } } or arr(x, shapes and shapes[1])
  local b = type(y) == "number" and { shape = {}, data = { y } } or arr(y, shapes and shapes[2])
  local shape = assert(ref.broadcast_shapes(a.shape, b.shape), "map2: shapes do not broadcast")
  local out, n = {}, #shape
  T.each_index(shape, function(pos, k) out[k] = f(bget(a, pos, n), bget(b, pos, n)) end)
  if #shape == 0 then return out[1] end
  return T.unflatten(out, shape)
end

-- x broadcast to shape (a nested table).
function ref.expand(x, shape)
  local a = arr(x)
  local out, n = {}, #shape
  T.each_index(shape, function(pos, k) out[k] = bget(a, pos, n) end)
  return T.unflatten(out, shape)
end

-- torch.gather: out[pos] = src[pos with dim replaced by index[pos]].
function ref.gather(src, dim, index)
  local s, ix = arr(src), arr(index)
  local out, q = {}, {}
  T.each_index(ix.shape, function(pos, k)
    for d = 1, #pos do q[d] = pos[d] end
    q[dim] = ix.data[k]
    out[k] = aget(s, q)
  end)
  return T.unflatten(out, ix.shape)
end

-- Whole slices of src along dim, in the order of the 1-D list index.
function ref.index_select(src, dim, index)
  local s = arr(src)
  local idx = arr(index).data
  local shape = shallow_copy(s.shape)
  shape[dim] = #idx
  local out, q = {}, {}
  T.each_index(shape, function(pos, k)
    for d = 1, #pos do q[d] = pos[d] end
    q[dim] = idx[pos[dim]]
    out[k] = aget(s, q)
  end)
  return T.unflatten(out, shape)
end

-- Gather over the flattened (row-major) source; the result has index's shape.
function ref.take(src, index)
  local s, ix = arr(src), arr(index)
  local out = {}
  for k = 1, #ix.data do out[k] = s.data[ix.data[k]] end
  return T.unflatten(out, ix.shape)
end

-- dst with dst[pos with dim replaced by index[pos]] = src[pos] (src a nested table or a
-- number); returns a new nested table. Later writes win (specs avoid duplicates).
function ref.scatter(dst, dim, index, src)
  local d = arr(dst)
  local out = shallow_copy(d.data)
  local ix = arr(index)
  local s = type(src) ~= "number" and arr(src) or nil
  local q = {}
  T.each_index(ix.shape, function(pos, k)
    for i = 1, #pos do q[i] = pos[i] end
    q[dim] = ix.data[k]
    out[T.linear(d.shape, q)] = s and aget(s, pos) or src
  end)
  return T.unflatten(out, d.shape)
end

-- dst with dst.select(dim, index[k]) += src.select(dim, k); duplicates accumulate.
-- round(x) (optional) rounds each sum as the dtype would (float32).
function ref.index_add(dst, dim, index, src, round)
  local d, s = arr(dst), arr(src)
  local idx = arr(index).data
  local out = shallow_copy(d.data)
  local q = {}
  T.each_index(s.shape, function(pos, k)
    for i = 1, #pos do q[i] = pos[i] end
    q[dim] = idx[pos[dim]]
    local l = T.linear(d.shape, q)
    out[l] = out[l] + s.data[k]
    if round then out[l] = round(out[l]) end
  end)
  return T.unflatten(out, d.shape)
end

-- Matrix product with torch.matmul's rules for 1-D, 2-D and batched (broadcast batch)
-- operands; returns a nested table (a number for 1-D . 1-D). Accumulates in float64.
function ref.matmul(x, y)
  local a, b = arr(x), arr(y)
  local na, nb = #a.shape, #b.shape
  if na == 1 and nb == 1 then
    assert(a.shape[1] == b.shape[1], "ref.matmul: sizes differ")
    local s = 0
    for i = 1, a.shape[1] do s = s + a.data[i] * b.data[i] end
    return s
  end
  -- promote 1-D operands to matrices, remember which dims to drop
  local drop_m, drop_n = false, false
  local ashape, bshape = shallow_copy(a.shape), shallow_copy(b.shape)
  if na == 1 then table.insert(ashape, 1, 1); drop_m = true end
  if nb == 1 then bshape[#bshape + 1] = 1; drop_n = true end
  local m, k = ashape[#ashape - 1], ashape[#ashape]
  local k2, n = bshape[#bshape - 1], bshape[#bshape]
  assert(k == k2, "ref.matmul: inner sizes differ")
  local abatch, bbatch = {}, {}
  for i = 1, #ashape - 2 do abatch[i] = ashape[i] end
  for i = 1, #bshape - 2 do bbatch[i] = bshape[i] end
  local batch = assert(ref.broadcast_shapes(abatch, bbatch), "ref.matmul: batch dims")
  local A = { shape = ashape, data = a.data }
  local B = { shape = bshape, data = b.data }
  local out = {}
  local nbatch = #batch
  local qa, qb = {}, {}
  local function batch_pos(shape, bpos, q)
    local nbd = #shape - 2
    for d = 1, nbd do
      local p = bpos[nbatch - nbd + d]
      q[d] = shape[d] == 1 and 1 or p
    end
    return nbd
  end
  local function one_batch(bpos)
    local oa = batch_pos(ashape, bpos, qa)
    local ob = batch_pos(bshape, bpos, qb)
    for i = 1, m do
      for j = 1, n do
        local s = 0
        for l = 1, k do
          qa[oa + 1], qa[oa + 2] = i, l
          qb[ob + 1], qb[ob + 2] = l, j
          s = s + aget(A, qa) * aget(B, qb)
        end
        out[#out + 1] = s
      end
    end
  end
  if nbatch == 0 then one_batch({}) else T.each_index(batch, one_batch) end
  local shape = shallow_copy(batch)
  if not drop_m then shape[#shape + 1] = m end
  if not drop_n then shape[#shape + 1] = n end
  if #shape == 0 then return out[1] end
  return T.unflatten(out, shape)
end

-- Reductions. op: "sum", "mean", "max", "min", "argmax", "argmin". Without dim: a
-- number (arg*: the 1-based flat position). With dim: a nested table with dim removed;
-- for max/min a second nested table of 1-based positions. NaN propagates through
-- max/min; ties go to the first position.
local function reduce_list(op, list)
  local n = #list
  if op == "sum" then
    local s = 0
    for i = 1, n do s = s + list[i] end
    return s
  elseif op == "mean" then
    local s = 0.0
    for i = 1, n do s = s + list[i] end
    return n == 0 and 0 / 0 or s / n
  end
  assert(n > 0, "reduce of an empty list")
  local want_max = (op == "max" or op == "argmax")
  local best, at = list[1], 1
  if best ~= best then return best, at end
  for i = 2, n do
    local v = list[i]
    if v ~= v then return v, i end
    if (want_max and v > best) or (not want_max and v < best) then best, at = v, i end
  end
  return best, at
end

function ref.reduce(op, x, dim, shape)
  local a = arr(x, shape)
  if dim == nil then
    local v, at = reduce_list(op, a.data)
    if op == "argmax" or op == "argmin" then return at end
    return v
  end
  local oshape = {}
  for d = 1, #a.shape do if d ~= dim then oshape[#oshape + 1] = a.shape[d] end end
  local vals, idxs = {}, {}
  local q = {}
  local function one(opos, k)
    local list = {}
    local o = 1
    for d = 1, #a.shape do
      if d ~= dim then q[d] = opos[o]; o = o + 1 end
    end
    for i = 1, a.shape[dim] do
      q[dim] = i
      list[i] = aget(a, q)
    end
    local v, at = reduce_list(op, list)
    if op == "argmax" or op == "argmin" then vals[k] = at else vals[k], idxs[k] = v, at end
  end
  if #oshape == 0 then one({}, 1) else T.each_index(oshape, one) end
  if #oshape == 0 then
    return vals[1], idxs[1]
  end
  local values = T.unflatten(vals, oshape)
  if op == "max" or op == "min" then return values, T.unflatten(idxs, oshape) end
  return values
end

-- Views in nested-table form (for the views spec).
function ref.permute(x, perm)
  local a = arr(x)
  local shape = {}
  for i = 1, #perm do shape[i] = a.shape[perm[i]] end
  local out, q = {}, {}
  T.each_index(shape, function(pos, k)
    for i = 1, #perm do q[perm[i]] = pos[i] end
    out[k] = aget(a, q)
  end)
  return T.unflatten(out, shape)
end

function ref.transpose(x, d1, d2)
  local perm = {}
  for i = 1, #T.shape_of(x) do perm[i] = i end
  perm[d1], perm[d2] = perm[d2], perm[d1]
  return ref.permute(x, perm)
end

function ref.narrow(x, dim, start, length)
  local a = arr(x)
  local shape = shallow_copy(a.shape)
  shape[dim] = length
  local out, q = {}, {}
  T.each_index(shape, function(pos, k)
    for i = 1, #pos do q[i] = pos[i] end
    q[dim] = pos[dim] + start - 1
    out[k] = aget(a, q)
  end)
  return T.unflatten(out, shape)
end

function ref.select(x, dim, i)
  local a = arr(x)
  local shape = {}
  for d = 1, #a.shape do if d ~= dim then shape[#shape + 1] = a.shape[d] end end
  local out, q = {}, {}
  local function one(pos, k)
    local o = 1
    for d = 1, #a.shape do
      if d == dim then q[d] = i else q[d] = pos[o]; o = o + 1 end
    end
    out[k] = aget(a, q)
  end
  if #shape == 0 then one({}, 1); return out[1] end
  T.each_index(shape, one)
  return T.unflatten(out, shape)
end

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

--[[
float16 and bfloat16 (issue 14), in plain Lua from the contract (runtime/half.h's header
comment): the formats' bits, rounding to nearest even (with subnormals and overflow to
inf) from any float32 or float64, the NaN rules (float16: NumPy's; bfloat16: ml_dtypes'),
and comparisons on the 16-bit grid. These are kept apart from T.dtypes / T.all_dtypes,
which the exact per-dtype specs loop over.

Bits are Lua integers (a 16-bit pattern 0..0xffff, a float32 one 0..0xffffffff, a float64
one as a signed int64); values are Lua numbers (every 16-bit value is exact in a double).
]]

T.half_dtypes = { "float16", "bfloat16" }
-- fraction bits, exponent bits, exponent bias
local HALF_FMT = {
  float16 = { mbits = 10, ebits = 5, bias = 15 },
  bfloat16 = { mbits = 7, ebits = 8, bias = 127 },
}
T.half_format = HALF_FMT
function T.is_half_dtype(dtype) return HALF_FMT[dtype] ~= nil end

function T.f32_bits(x) return (string.unpack("<I4", string.pack("<f", x))) end
function T.f32_from_bits(u) return (string.unpack("<f", string.pack("<I4", u))) end
function T.f64_bits(x) return (string.unpack("<i8", string.pack("<d", x))) end
function T.f64_from_bits(u) return (string.unpack("<d", string.pack("<i8", u))) end

local function half_fmt(dtype)
  return HALF_FMT[dtype] or error("not a 16-bit float dtype: " .. tostring(dtype), 3)
end

-- The bits of +inf, and the largest finite value, of a 16-bit dtype.
function T.half_inf_bits(dtype)
  local f = half_fmt(dtype)
  return ((1 << f.ebits) - 1) << f.mbits
end
function T.half_max(dtype)
  local f = half_fmt(dtype)
  return (2 - 2.0 ^ -f.mbits) * 2.0 ^ f.bias
end

function T.half_is_nan_bits(h, dtype)
  local inf = T.half_inf_bits(dtype)
  return (h & 0x7fff) > inf
end

-- The value of 16-bit pattern h (a Lua number; NaN patterns give a NaN).
function T.half_value(h, dtype)
  local f = half_fmt(dtype)
  local e = (h >> f.mbits) & ((1 << f.ebits) - 1)
  local m = h & ((1 << f.mbits) - 1)
  local v
  if e == (1 << f.ebits) - 1 then
    v = m == 0 and huge or (0 / 0)
  elseif e == 0 then
    v = m * 2.0 ^ (1 - f.bias - f.mbits)
  else
    v = (m + (1 << f.mbits)) * 2.0 ^ (e - f.bias - f.mbits)
  end
  if h & 0x8000 ~= 0 then v = -v end
  return v
end

-- The magnitude |x| (a finite Lua number, exact) rounded to nearest, ties to even, into
-- format f: the magnitude's bits, the inf pattern when it overflows. Written as "the
-- nearest multiple q of the binade's quantum", which carries into the exponent by itself.
local function half_round_magnitude(ax, f)
  local inf = ((1 << f.ebits) - 1) << f.mbits
  if ax == 0 then return 0 end
  local u = T.f64_bits(ax)
  local e64 = (u >> 52) & 0x7ff
  local sig, k, E
  if e64 == 0 then  -- a float64 subnormal: far below half the smallest 16-bit subnormal
    return 0
  end
  sig, k, E = (u & 0xfffffffffffff) | (1 << 52), e64 - 1075, e64 - 1023  -- ax = sig * 2^k
  if E > f.bias then return inf end
  local emin = 1 - f.bias
  local qe = math.max(E, emin) - f.mbits  -- the quantum of ax's binade is 2^qe
  local shift = qe - k                    -- >= 52 - mbits > 0
  local q
  if shift > 54 then
    q = 0                                 -- below half a quantum
  else
    q = sig >> shift
    local rest, half = sig - (q << shift), 1 << (shift - 1)
    if rest > half or (rest == half and q & 1 == 1) then q = q + 1 end
  end
  local r = ((math.max(E, emin) - emin) << f.mbits) + q
  if r > inf then r = inf end
  return r
end

-- The same rounding for a finite float32 magnitude given as its bits (sign bit clear),
-- in integer arithmetic only: float32's significand and exponent read off the bits.
local function half_round_f32_magnitude(u, f)
  local inf = ((1 << f.ebits) - 1) << f.mbits
  local e, m = u >> 23, u & 0x7fffff
  local sig, k, E
  if e == 0 then
    if m == 0 then return 0 end
    sig, k, E = m, -149, -127  -- a float32 subnormal: below every 16-bit normal binade
  else
    sig, k, E = m | 0x800000, e - 150, e - 127
  end
  if E > f.bias then return inf end
  local emin = 1 - f.bias
  local qe = math.max(E, emin) - f.mbits
  local shift = qe - k
  local q
  if shift <= 0 then
    q = sig << -shift
  elseif shift > 25 then
    q = 0
  else
    q = sig >> shift
    local rest, half = sig - (q << shift), 1 << (shift - 1)
    if rest > half or (rest == half and q & 1 == 1) then q = q + 1 end
  end
  local r = ((math.max(E, emin) - emin) << f.mbits) + q
  if r > inf then r = inf end
  return r
end

-- An infinity (is_inf) or a NaN whose top 10 fraction bits are payload, as 16-bit bits:
-- float16 keeps the sign and the payload (1 when it is 0, NumPy); bfloat16 makes it
-- 0x7fc0 with its sign (ml_dtypes).
local function half_nonfinite(sign, is_inf, payload, dtype)
  if is_inf then return sign | T.half_inf_bits(dtype) end
  if dtype == "bfloat16" then return sign | 0x7fc0 end
  return sign | 0x7c00 | (payload == 0 and 1 or payload)
end

-- float32 bits -> 16-bit bits (NaN and infinities as half_nonfinite says).
function T.half_from_f32_bits(u, dtype)
  local f = half_fmt(dtype)
  local sign = (u >> 16) & 0x8000
  local e, m = (u >> 23) & 0xff, u & 0x7fffff
  if e == 0xff then return half_nonfinite(sign, m == 0, m >> 13, dtype) end
  return sign | half_round_f32_magnitude(u & 0x7fffffff, f)
end

-- The bits of x, the result of a float32 computation, rounded into the 16-bit dtype:
-- float32's rounding (string.pack's), then the 16-bit one on the bits.
function T.half_op_bits(x, dtype) return T.half_from_f32_bits(T.f32_bits(x), dtype) end

-- float64 bits -> 16-bit bits, rounded once (float64 converts directly).
function T.half_from_f64_bits(u, dtype)
  local f = half_fmt(dtype)
  local sign = (u >> 48) & 0x8000
  local e, m = (u >> 52) & 0x7ff, u & 0xfffffffffffff
  if e == 0x7ff then return half_nonfinite(sign, m == 0, m >> 42, dtype) end
  return sign | half_round_magnitude(math.abs(T.f64_from_bits(u)), f)
end

-- A Lua number -> 16-bit bits (one rounding from float64).
function T.half_bits_of(x, dtype) return T.half_from_f64_bits(T.f64_bits(x), dtype) end

-- 16-bit bits -> float32 bits: float16 NaNs shift their fraction up by 13; bfloat16 is
-- the bits shifted up by 16; every other value is exact.
function T.half_to_f32_bits(h, dtype)
  if dtype == "bfloat16" then return h << 16 end
  half_fmt(dtype)
  local sign = (h & 0x8000) << 16
  local e, m = (h >> 10) & 0x1f, h & 0x3ff
  if e == 0x1f then return sign | 0x7f800000 | (m << 13) end
  if e == 0 and m == 0 then return sign end
  return sign | T.f32_bits(math.abs(T.half_value(h, dtype)))
end

-- x (a Lua number) as the 16-bit dtype stores it: rounded once from float64.
function T.round_half(x, dtype)
  if x ~= x then return x end
  return T.half_value(T.half_bits_of(x, dtype), dtype)
end

-- x rounded to nearest, ties to even, into a binary format with `mbits` fraction bits
-- and exponent bias `bias` (subnormals, overflow to inf), by plain arithmetic on the
-- value: the nearest multiple of the quantum 2^(max(e, emin) - mbits) of x's binade.
-- A second, independent way to the rounding of T.half_bits_of (which works on bits),
-- and much faster; the spec checks that the two agree.
local FMT32 = { mbits = 23, bias = 127 }
local function round_format(x, f)
  if x ~= x or x == 0 or x == huge or x == -huge then return x end
  local ax = math.abs(x)
  local e = floor(math.log(ax, 2))
  if 2.0 ^ e > ax then e = e - 1 elseif 2.0 ^ (e + 1) <= ax then e = e + 1 end
  local qe = math.max(e, 1 - f.bias) - f.mbits
  local r = ax * 2.0 ^ -qe  -- exact: a scaling by a power of two
  local n = floor(r)
  local d = r - n
  if d > 0.5 or (d == 0.5 and n % 2 == 1) then n = n + 1 end
  local v = n * 2.0 ^ qe
  if v > (2 - 2.0 ^ -f.mbits) * 2.0 ^ f.bias then v = huge end
  if x < 0 then return -v end
  return v
end
function T.round_format(x, mbits, bias) return round_format(x, { mbits = mbits, bias = bias }) end

-- The result of a float32 computation rounded into the 16-bit dtype: x (the exact or
-- double result) rounded to float32 first, then to the 16-bit type (PyTorch's opmath).
-- A 16-bit dtype may also be "float32"/"float64" (then float32's rounding / x itself).
function T.half_op(x, dtype)
  if dtype == "float64" then return x end
  local r = round_format(x, FMT32)
  if dtype == "float32" then return r end
  return round_format(r, half_fmt(dtype))
end

-- x rounded once into the 16-bit dtype by round_format (T.round_half's value, faster).
function T.round_half_fast(x, dtype) return round_format(x, half_fmt(dtype)) end

-- The position of a 16-bit pattern on the ordered grid of values: consecutive values
-- differ by 1, -0 and +0 are both 0, +inf is one above the largest finite value.
function T.half_grid(h)
  if h & 0x8000 ~= 0 then return -(h & 0x7fff) end
  return h
end

-- The distance, in 16-bit steps, between two Lua numbers that the dtype holds exactly
-- (0 for equal values or two NaNs, huge when one is NaN and the other not).
function T.half_steps(a, b, dtype)
  if a ~= a or b ~= b then return (a ~= a and b ~= b) and 0 or huge end
  return math.abs(T.half_grid(T.half_bits_of(a, dtype)) - T.half_grid(T.half_bits_of(b, dtype)))
end

-- Elementwise: actual (a tensor, a nested table or a number) within `steps` 16-bit steps
-- of expected (values the dtype holds: pass them through T.round_half / T.half_op), or
-- within abs_tol of it when given (for results near 0 of a cancellation); NaN must match
-- NaN. steps 0 is exact equality (with -0 == 0; use T.assert_bits_equal for the signs of
-- zeros and the NaN bits).
function T.assert_close_half(actual, expected, dtype, steps, what, abs_tol)
  what = what or "values"
  steps = steps or 1
  local a, ashape = values_of(actual)
  local e, eshape = values_of(expected)
  check_shapes(ashape, eshape, #e, what)
  if #a ~= #e then error(string.format("%s: %d elements, expected %d", what, #a, #e), 2) end
  for i = 1, #e do
    local x, y = a[i], e[i]
    if type(x) ~= "number" then
      error(string.format("%s: element %d is %s, expected %s", what, i, tostring(x), fmt(y)), 2)
    end
    local d = T.half_steps(x, y, dtype)
    if d > steps and not (abs_tol and x == x and y == y and math.abs(x - y) <= abs_tol) then
      error(string.format("%s: element %d (row-major) is %s, expected %s (%s steps of %s apart, at most %d)",
        what, i, fmt(x), fmt(y), d == huge and "inf" or tostring(d), dtype, steps), 2)
    end
  end
  return true
end

------------------------------------------------------------------------ raw bits through .npy

-- A .npy file (format 1.0, little-endian, C order, 1-D) holding the integers in `bits`
-- as elements of `descr` ('<f2', '<f4', '<f8', '<u2' ...): the patterns exactly, NaN
-- payloads included. size: bytes per element.
local NPY_SIZE = { ["<f2"] = 2, ["<f4"] = 4, ["<f8"] = 8, ["<u2"] = 2, ["<i4"] = 4, ["<i8"] = 8 }
function T.write_npy_bits(path, descr, bits)
  local size = NPY_SIZE[descr] or error("write_npy_bits: unknown descr " .. tostring(descr))
  local header = string.format("{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }", descr, #bits)
  local pad = (64 - (10 + #header + 1) % 64) % 64
  header = header .. string.rep(" ", pad) .. "\n"
  local fmt1 = "<I" .. size
  if size == 8 then fmt1 = "<i8" end
  local parts, chunk = {}, {}
  for i = 1, #bits do
    chunk[#chunk + 1] = string.pack(fmt1, bits[i])
    if #chunk == 4096 then parts[#parts + 1] = table.concat(chunk); chunk = {} end
  end
  parts[#parts + 1] = table.concat(chunk)
  local file = assert(io.open(path, "wb"))
  file:write("\x93NUMPY\1\0", string.pack("<I2", #header), header, table.concat(parts))
  file:close()
  return path
end

-- The elements of a .npy file as unsigned integers of its element size (8-byte ones as
-- Lua's int64, whose bits they are), and its descr.
function T.read_npy_bits(path)
  local file = assert(io.open(path, "rb"))
  local s = file:read("a")
  file:close()
  assert(s:sub(1, 6) == "\x93NUMPY", "read_npy_bits: not a .npy file: " .. path)
  local major = s:byte(7)
  local hlen, start
  if major == 1 then hlen, start = string.unpack("<I2", s, 9), 11
  else hlen, start = string.unpack("<I4", s, 9), 13 end
  local header = s:sub(start, start + hlen - 1)
  local descr = header:match("'descr':%s*'([^']+)'") or error("read_npy_bits: no descr in " .. header)
  local size = tonumber(descr:match("(%d+)$"))
  local fmt1 = size == 8 and "<i8" or ("<I" .. size)
  local out, pos = {}, start + hlen
  local n = (#s - pos + 1) // size
  for i = 1, n do out[i], pos = string.unpack(fmt1, s, pos) end
  return out, descr
end

-- A .safetensors file holding one 1-D tensor `name` of the 16-bit patterns in `bits`
-- (code "BF16" or "F16"): the 8-byte header length, the JSON header padded with spaces
-- to 8 bytes, the little-endian data. The way to put any bfloat16 pattern (NaN payloads
-- included) into a tensor, since .npy has no code for bfloat16.
function T.write_safetensors_bits(path, name, code, bits)
  local header = string.format('{"%s":{"dtype":"%s","shape":[%d],"data_offsets":[0,%d]}}', name, code, #bits, 2 * #bits)
  header = header .. string.rep(" ", (8 - #header % 8) % 8)
  local parts, chunk = {}, {}
  for i = 1, #bits do
    chunk[#chunk + 1] = string.pack("<I2", bits[i])
    if #chunk == 4096 then parts[#parts + 1] = table.concat(chunk); chunk = {} end
  end
  parts[#parts + 1] = table.concat(chunk)
  local file = assert(io.open(path, "wb"))
  file:write(string.pack("<I8", #header), header, table.concat(parts))
  file:close()
  return path
end

-- The 16-bit patterns of tensor `name` in a .safetensors file (F16 or BF16), row-major.
function T.read_safetensors_bits(path, name)
  local file = assert(io.open(path, "rb"))
  local s = file:read("a")
  file:close()
  local hlen = string.unpack("<I8", s)
  local header = s:sub(9, 8 + hlen)
  local entry = header:match('"' .. name .. '"%s*:%s*(%b{})') or error("read_safetensors_bits: no tensor " .. name)
  local code = entry:match('"dtype"%s*:%s*"(%w+)"')
  assert(code == "BF16" or code == "F16", "read_safetensors_bits: dtype " .. tostring(code))
  local a, b = entry:match('"data_offsets"%s*:%s*%[%s*(%d+)%s*,%s*(%d+)%s*%]')
  a, b = tonumber(a), tonumber(b)
  local out, pos = {}, 9 + hlen + a
  for i = 1, (b - a) // 2 do out[i], pos = string.unpack("<I2", s, pos) end
  return out, code
end

-- The bit patterns of a tensor's elements in row-major order (any device, any layout):
-- through a saved .npy, or for bfloat16, which has no .npy code, a .safetensors file.
function T.tensor_bits(t)
  local path = os.tmpname()
  local c = t:cpu()
  local bits
  if c:dtype() == "bfloat16" then
    qlua.save_safetensors(path, { x = c })
    bits = T.read_safetensors_bits(path, "x")
  else
    qlua.save(path, c:contiguous())
    bits = T.read_npy_bits(path)
  end
  os.remove(path)
  return bits
end

-- A 1-D tensor holding the bit patterns `bits` as dtype ("float16", "bfloat16",
-- "float32", "float64"), loaded from a file that holds them (.npy, or .safetensors for
-- bfloat16), on device.
local NPY_OF = { float16 = "<f2", float32 = "<f4", float64 = "<f8" }
function T.tensor_from_bits(bits, dtype, device)
  local path = os.tmpname()
  local t
  if dtype == "bfloat16" then
    T.write_safetensors_bits(path, "x", "BF16", bits)
    t = qlua.load_safetensors(path, { device = device or "cpu" }).x
  else
    T.write_npy_bits(path, NPY_OF[dtype] or error("tensor_from_bits: dtype " .. tostring(dtype)), bits)
    t = qlua.load(path, { device = device or "cpu" })
  end
  os.remove(path)
  assert(t:dtype() == dtype, "tensor_from_bits: loaded " .. t:dtype() .. ", expected " .. dtype)
  return t
end

-- Compares two lists of bit patterns; the message names the first few differences, with
-- the input each came from when `inputs` is given (hex, `width` digits).
function T.assert_bits_equal(actual, expected, what, inputs, width, in_width)
  what = what or "bits"
  width = width or 4
  if #actual ~= #expected then
    error(string.format("%s: %d elements, expected %d", what, #actual, #expected), 2)
  end
  local bad, shown = 0, {}
  for i = 1, #expected do
    if actual[i] ~= expected[i] then
      bad = bad + 1
      if #shown < 8 then
        local input = inputs and string.format(" from input 0x%0" .. (in_width or width) .. "x", inputs[i]) or ""
        shown[#shown + 1] = string.format("element %d%s: 0x%0" .. width .. "x, expected 0x%0" .. width .. "x",
          i, input, actual[i], expected[i])
      end
    end
  end
  if bad > 0 then
    error(string.format("%s: %d of %d elements differ; %s", what, bad, #expected, table.concat(shown, "; ")), 2)
  end
  return true
end

-- The promoted dtype of two dtypes when either may be 16-bit (PyTorch's rules):
-- float16 with bfloat16 gives float32; a 16-bit type with float32 or float64 gives that;
-- with any integer or bool the 16-bit type stays. Otherwise T.promote.
function T.promote_half(a, b)
  local ha, hb = HALF_FMT[a] ~= nil, HALF_FMT[b] ~= nil
  if not ha and not hb then return T.promote(a, b) end
  if a == b then return a end
  if ha and hb then return "float32" end
  local h, other = ha and a or b, ha and b or a
  if other == "float32" or other == "float64" then return other end
  return h
end

-- A view of tensor c's values in a layout (T.layouts), built on a bigger base of c's
-- dtype filled with junk (default NaN for floats, T.junk's for the others) around and
-- between them; any dtype, any device.
function T.relayout(c, layout, junk)
  local s = c:shape()
  local nd = #s
  local dev, dtype = c:device(), c:dtype()
  if junk == nil then junk = HALF_FMT[dtype] and 0 / 0 or T.junk(dtype) end
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
