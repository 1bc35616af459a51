--[[
qlua.save_safetensors / qlua.load_safetensors (docs/API.md "Files"): Hugging Face's
.safetensors format. Round trips of every dtype (0-d, empty and non-contiguous tensors,
metadata), the written bytes against a plain-Lua reference encoder, the committed fixture
spec/fixtures/small.safetensors, every malformed-header check with its message, the
all-or-nothing save, GPU tensors (pending without a GPU), and files written and read by
Python's safetensors package (pending without it).

The reference encoder below is the format as docs/API.md states it, written from the
format's description: an 8-byte little-endian header length, the header (compact JSON:
"__metadata__" first with its keys sorted, then the tensors ordered by dtype, largest
element first as the reference implementation orders them, I64 F64 F32 I32 BF16 F16 U8
BOOL, then by name; each entry's keys as dtype, shape, data_offsets; strings escaped as
jansson escapes them), padded with spaces to a multiple of 8 bytes, then the data packed
in that order.
]]
local T, qlua, test, gtest = require("qlua.testing").spec(_ENV)

local DTYPES = { "float32", "float64", "int32", "int64", "uint8", "bool", "float16", "bfloat16" }
local CODE = { float32 = "F32", float64 = "F64", int32 = "I32", int64 = "I64", uint8 = "U8",
               bool = "BOOL", float16 = "F16", bfloat16 = "BF16" }
local SIZE = { F32 = 4, F64 = 8, I32 = 4, I64 = 8, U8 = 1, BOOL = 1, F16 = 2, BF16 = 2 }
local RANK = { I64 = 0, F64 = 1, F32 = 2, I32 = 3, BF16 = 4, F16 = 5, U8 = 6, BOOL = 7 }
local PACK = { F32 = "<f", F64 = "<d", I32 = "<i4", I64 = "<i8", U8 = "B", F16 = "<I2",
               BF16 = "<I2" }

-- ------------------------------------------------------------------- files

local dir
local function path(name) return dir .. "/" .. name end

local function listing(d)
  local pipe = io.popen("ls -A '" .. d .. "'")
  local names = {}
  for line in pipe:lines() do names[#names + 1] = line end
  pipe:close()
  return names
end

setup(function()
  dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p '" .. dir .. "'"))
end)

teardown(function()
  if dir then os.execute("rm -rf '" .. dir .. "'") end
end)

-- ------------------------------------------------------------------- the reference encoder

-- A string as jansson writes it: \" \\ \b \f \n \r \t, other control bytes as \u00XX
-- (upper-case hex), everything else (DEL and UTF-8 included) as it is.
local ESCAPES = { ['"'] = '\\"', ['\\'] = '\\\\', ['\b'] = '\\b', ['\f'] = '\\f',
                  ['\n'] = '\\n', ['\r'] = '\\r', ['\t'] = '\\t' }
local function json_string(s)
  return '"' .. s:gsub('[%z\1-\31"\\]', function(c)
    return ESCAPES[c] or string.format("\\u%04X", c:byte())
  end) .. '"'
end

-- The data bytes of a record: {dtype = "F32", values = {...}} (row-major), or {bits = {...}}
-- for F16/BF16 (the 16-bit patterns).
local function data_of(rec)
  local parts = {}
  if rec.dtype == "BOOL" then
    for i, v in ipairs(rec.values) do parts[i] = v and "\1" or "\0" end
  elseif rec.dtype == "F16" or rec.dtype == "BF16" then
    for i, b in ipairs(rec.bits) do parts[i] = string.pack("<I2", b) end
  else
    for i, v in ipairs(rec.values) do parts[i] = string.pack(PACK[rec.dtype], v) end
  end
  return table.concat(parts)
end

-- records: a list of {name =, dtype = "F32", shape = {...}, values | bits}; metadata: a
-- table of strings or nil. Returns the file's bytes.
local function encode(records, metadata)
  local order = {}
  for i, r in ipairs(records) do order[i] = r end
  table.sort(order, function(a, b)
    if RANK[a.dtype] ~= RANK[b.dtype] then return RANK[a.dtype] < RANK[b.dtype] end
    return a.name < b.name
  end)
  local items, data, offset = {}, {}, 0
  if metadata and next(metadata) then
    local keys = {}
    for k in pairs(metadata) do keys[#keys + 1] = k end
    table.sort(keys)
    local pairs_text = {}
    for i, k in ipairs(keys) do pairs_text[i] = json_string(k) .. ":" .. json_string(metadata[k]) end
    items[1] = '"__metadata__":{' .. table.concat(pairs_text, ",") .. "}"
  end
  for _, r in ipairs(order) do
    local bytes = data_of(r)
    items[#items + 1] = string.format('%s:{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}',
      json_string(r.name), r.dtype, table.concat(r.shape, ","), offset, offset + #bytes)
    offset = offset + #bytes
    data[#data + 1] = bytes
  end
  local header = "{" .. table.concat(items, ",") .. "}"
  header = header .. string.rep(" ", (8 - #header % 8) % 8)
  return string.pack("<I8", #header) .. header .. table.concat(data)
end

-- A file from a header written by hand (no padding) and data bytes.
local function raw_file(header, data)
  return string.pack("<I8", #header) .. header .. (data or "")
end

-- The header of a file's bytes, and where its data begins (0-based).
local function header_of(bytes)
  local n = string.unpack("<I8", bytes)
  return bytes:sub(9, 8 + n), 8 + n
end

-- ------------------------------------------------------------------- values

-- A random value each dtype holds exactly (16-bit floats: k/8 with |k| <= 200, which
-- both formats hold).
local function random_value(dtype)
  if dtype == "bool" then return math.random() < 0.5 end
  if dtype == "uint8" then return math.random(0, 255) end
  if dtype == "int32" then return math.random(-2147483648, 2147483647) end
  if dtype == "int64" then return math.random(math.mininteger, math.maxinteger) end
  if dtype == "float32" then return T.f32((math.random() - 0.5) * 1e6) end
  if dtype == "float64" then return (math.random() - 0.5) * 1e300 end
  return math.random(-200, 200) / 8
end

local function numel(shape) local n = 1; for _, s in ipairs(shape) do n = n * s end; return n end

local function random_flat(n, dtype)
  local flat = {}
  for i = 1, n do flat[i] = random_value(dtype) end
  return flat
end

-- A contiguous tensor of that shape holding the flat values.
local function tensor_of(flat, shape, dtype)
  if numel(shape) == 0 then return qlua.empty(shape, { dtype = dtype }) end
  if #shape == 0 then return qlua.tensor(flat[1], { dtype = dtype }) end
  return qlua.tensor(T.unflatten(flat, shape), { dtype = dtype })
end

-- t's elements in row-major order (a list; {} for an empty tensor).

local function assert_tensor(t, dtype, shape, flat, what)
  assert.is_true(qlua.is_tensor(t), what .. ": not a tensor")
  assert.equal(dtype, t:dtype(), what)
  assert.same(shape, (function() local s = {}; for i, v in ipairs(t:shape()) do s[i] = v end; return s end)(), what)
  local got = (T.values_of(t))
  assert.equal(#flat, #got, what .. ": element count")
  for i = 1, #flat do
    if got[i] ~= flat[i] then
      error(string.format("%s: element %d is %s, expected %s", what, i, tostring(got[i]),
                          tostring(flat[i])), 2)
    end
  end
end

-- ------------------------------------------------------------------- the fixture
--[==[
spec/fixtures/small.safetensors holds one tensor of each dtype qlua reads, and the
metadata {format = "pt"}. It is encode(FIXTURE, FIXTURE_META) (this file checks that), and
it is byte for byte what Python's safetensors writes for the same tensors (it orders and
formats the header the same way; with one metadata key there is no order to differ in):

    import torch
    from safetensors.torch import save_file
    save_file({
        "embed.weight": torch.tensor([[1.0, -2.0, 3.5], [0.25, 0.0, -1024.0]]),
        "scale": torch.tensor(2.5, dtype=torch.float64),
        "ids": torch.tensor([1, -2, 9007199254740993], dtype=torch.int64),
        "counts": torch.tensor([[1, -1], [2147483647, -2147483648]], dtype=torch.int32),
        "half": torch.tensor([1.0, -2.0, 0.5, 65504.0], dtype=torch.float16),
        "brain": torch.tensor([1.0, -2.0, 3.140625], dtype=torch.bfloat16),
        "mask": torch.tensor([True, False, True]),
        "pixels": torch.tensor([[0, 255], [7, 128]], dtype=torch.uint8),
        "empty": torch.zeros((0, 4)),
    }, "small.safetensors", metadata={"format": "pt"})

QLUA_WRITE_FIXTURE=1 makes this spec rewrite it from FIXTURE (then the fixture test fails
once, saying so, so that a rewrite is never silent).
]==]
local FIXTURE_PATH = "spec/fixtures/small.safetensors"
local FIXTURE_META = { format = "pt" }
local FIXTURE = {
  { name = "embed.weight", dtype = "F32", shape = { 2, 3 }, values = { 1, -2, 3.5, 0.25, 0, -1024 },
    qdtype = "float32" },
  { name = "scale", dtype = "F64", shape = {}, values = { 2.5 }, qdtype = "float64" },
  { name = "ids", dtype = "I64", shape = { 3 }, values = { 1, -2, 9007199254740993 }, qdtype = "int64" },
  { name = "counts", dtype = "I32", shape = { 2, 2 }, values = { 1, -1, 2147483647, -2147483648 },
    qdtype = "int32" },
  { name = "half", dtype = "F16", shape = { 4 }, values = { 1, -2, 0.5, 65504 },
    bits = { 0x3c00, 0xc000, 0x3800, 0x7bff }, qdtype = "float16" },
  { name = "brain", dtype = "BF16", shape = { 3 }, values = { 1, -2, 3.140625 },
    bits = { 0x3f80, 0xc000, 0x4049 }, qdtype = "bfloat16" },
  { name = "mask", dtype = "BOOL", shape = { 3 }, values = { true, false, true }, qdtype = "bool" },
  { name = "pixels", dtype = "U8", shape = { 2, 2 }, values = { 0, 255, 7, 128 }, qdtype = "uint8" },
  { name = "empty", dtype = "F32", shape = { 0, 4 }, values = {}, qdtype = "float32" },
}

describe("the fixture", function()
  test("spec/fixtures/small.safetensors loads with the values it was made with", function()
    local expected = encode(FIXTURE, FIXTURE_META)
    if os.getenv("QLUA_WRITE_FIXTURE") then
      T.write_file(FIXTURE_PATH, expected)
      error("QLUA_WRITE_FIXTURE: rewrote " .. FIXTURE_PATH .. "; run the spec again without it")
    end
    local bytes = T.read_file(FIXTURE_PATH)
    assert.equal(expected, bytes, "the fixture is not encode(FIXTURE, FIXTURE_META)")
    local tensors, meta = qlua.load_safetensors(FIXTURE_PATH)
    assert.same(FIXTURE_META, meta)
    local count = 0
    for _ in pairs(tensors) do count = count + 1 end
    assert.equal(#FIXTURE, count)
    for _, rec in ipairs(FIXTURE) do
      assert_tensor(tensors[rec.name], rec.qdtype, rec.shape, rec.values, rec.name)
      assert.equal("cpu", tensors[rec.name]:device())
      assert.is_true(tensors[rec.name]:is_contiguous())
    end
  end)

  test("saving what was loaded gives the fixture's bytes back", function()
    local tensors, meta = qlua.load_safetensors(FIXTURE_PATH)
    qlua.save_safetensors(path("again.safetensors"), tensors, meta)
    assert.equal(T.read_file(FIXTURE_PATH), T.read_file(path("again.safetensors")))
  end)
end)

-- ------------------------------------------------------------------- round trips

describe("qlua.save_safetensors and qlua.load_safetensors", function()
  test("round trip every dtype and shape, 0-d and empty included", function()
    local shapes = { {}, { 0 }, { 2, 0 }, { 7 }, { 3, 4 }, { 2, 3, 4 }, { 1, 1, 5, 2 } }
    for _, dtype in ipairs(DTYPES) do
      for k, shape in ipairs(shapes) do
        local flat = random_flat(numel(shape), dtype)
        local p = path(string.format("rt_%s_%d.safetensors", dtype, k))
        qlua.save_safetensors(p, { x = tensor_of(flat, shape, dtype) })
        local back, meta = qlua.load_safetensors(p)
        assert.same({}, meta)
        assert_tensor(back.x, dtype, shape, flat, dtype .. " " .. T.shape_str(shape))
        assert.equal("cpu", back.x:device())
      end
    end
  end)

  test("many tensors of every dtype in one file", function()
    local saved, want = {}, {}
    for i, dtype in ipairs(DTYPES) do
      for j = 1, 3 do
        local shape = { math.random(0, 4), math.random(1, 3) }
        local flat = random_flat(numel(shape), dtype)
        local name = string.format("layer.%d.%s.%d", i, dtype, j)
        saved[name] = tensor_of(flat, shape, dtype)
        want[name] = { dtype = dtype, shape = shape, flat = flat }
      end
    end
    qlua.save_safetensors(path("many.safetensors"), saved)
    local back = qlua.load_safetensors(path("many.safetensors"))
    for name, w in pairs(want) do assert_tensor(back[name], w.dtype, w.shape, w.flat, name) end
    for name in pairs(back) do assert.is_truthy(want[name], "unexpected tensor " .. name) end
  end)

  test("non-contiguous views are written row-major", function()
    for _, dtype in ipairs(DTYPES) do
      local flat = random_flat(15, dtype)
      local base = tensor_of(flat, { 5, 3 }, dtype)
      local rows = T.unflatten(flat, { 5, 3 })
      local function at(i, j) return rows[i][j] end
      local views = {
        transposed = { base:t(), { 3, 5 }, function(i, j) return at(j, i) end },
        narrowed = { base:narrow(2, 2, 2), { 5, 2 }, function(i, j) return at(i, j + 1) end },
        stepped = { base:slice(1, 1, 5, 2), { 3, 3 }, function(i, j) return at(2 * i - 1, j) end },
        expanded = { base:select(1, 2):unsqueeze(1):expand(4, 3), { 4, 3 },
                     function(_, j) return at(2, j) end },
      }
      for layout, v in pairs(views) do
        assert.is_false(v[1]:is_contiguous(), layout)
        local expected = {}
        for i = 1, v[2][1] do for j = 1, v[2][2] do expected[#expected + 1] = v[3](i, j) end end
        local p = path("nc.safetensors")
        qlua.save_safetensors(p, { v = v[1] })
        local back = qlua.load_safetensors(p)
        assert_tensor(back.v, dtype, v[2], expected, dtype .. " " .. layout)
        assert.is_true(back.v:is_contiguous())
      end
    end
  end)

  test("every 16-bit pattern, NaNs included, comes back bit for bit", function()
    for _, code in ipairs({ "F16", "BF16" }) do
      local bits = {}
      for b = 0, 0xffff do bits[#bits + 1] = b end
      local bytes = encode({ { name = "all", dtype = code, shape = { 256, 256 }, bits = bits } })
      T.write_file(path("bits.safetensors"), bytes)
      local t = qlua.load_safetensors(path("bits.safetensors")).all
      qlua.save_safetensors(path("bits_again.safetensors"), { all = t })
      assert.equal(bytes, T.read_file(path("bits_again.safetensors")), code)
      -- and through a non-contiguous view of it
      qlua.save_safetensors(path("bits_t.safetensors"), { all = t:t():t() })
      assert.equal(bytes, T.read_file(path("bits_t.safetensors")), code .. " via views")
    end
  end)

  test("metadata round trips; no metadata reads as an empty table", function()
    local meta = { format = "pt", ["key with spaces"] = "välue ✓", empty = "", nul = "a\0b",
                   quote = 'say "hi"\n\\' }
    qlua.save_safetensors(path("meta.safetensors"), { w = qlua.ones(2) }, meta)
    local t, back = qlua.load_safetensors(path("meta.safetensors"))
    assert.same(meta, back)
    assert_tensor(t.w, "float32", { 2 }, { 1, 1 }, "w")
    qlua.save_safetensors(path("nometa.safetensors"), { w = qlua.ones(2) })
    local _, none = qlua.load_safetensors(path("nometa.safetensors"))
    assert.same({}, none)
    -- {} and nil write the same file (no "__metadata__" key)
    qlua.save_safetensors(path("emptymeta.safetensors"), { w = qlua.ones(2) }, {})
    assert.equal(T.read_file(path("nometa.safetensors")), T.read_file(path("emptymeta.safetensors")))
    assert.is_nil(T.read_file(path("nometa.safetensors")):find("__metadata__", 1, true))
    -- a file with metadata only, and an empty file with no tensors at all
    qlua.save_safetensors(path("only_meta.safetensors"), {}, { a = "b" })
    local none2, m2 = qlua.load_safetensors(path("only_meta.safetensors"))
    assert.same({}, none2)
    assert.same({ a = "b" }, m2)
    qlua.save_safetensors(path("nothing.safetensors"), {})
    assert.equal(string.pack("<I8", 8) .. "{}      ", T.read_file(path("nothing.safetensors")))
  end)

  test("names with any UTF-8, dots, quotes and control characters", function()
    local names = { "a.b.c", "", "ünïcødé ✓", 'quote"back\\slash', "tab\there\nnewline",
                    "\1\31", ("long"):rep(500) }
    local saved = {}
    for i, n in ipairs(names) do saved[n] = qlua.full({ 1 }, i) end
    qlua.save_safetensors(path("names.safetensors"), saved)
    local back = qlua.load_safetensors(path("names.safetensors"))
    for i, n in ipairs(names) do assert.equal(i, back[n]:item(), n) end
  end)

  test("load_safetensors puts the tensors where opts says and converts opts.dtype", function()
    qlua.save_safetensors(path("opts.safetensors"), { a = qlua.tensor({ 1, 2, 3 }),
      b = qlua.tensor({ 0.5, 1.5 }, { dtype = "float16" }) })
    local t = qlua.load_safetensors(path("opts.safetensors"), { device = "cpu" })
    assert_tensor(t.a, "int64", { 3 }, { 1, 2, 3 }, "a")
    local f = qlua.load_safetensors(path("opts.safetensors"), { dtype = "float64" })
    assert_tensor(f.a, "float64", { 3 }, { 1, 2, 3 }, "a as float64")
    assert_tensor(f.b, "float64", { 2 }, { 0.5, 1.5 }, "b as float64")
    T.assert_error(function() qlua.load_safetensors(path("opts.safetensors"), { dtype = "x" }) end,
      "load_safetensors")
    T.assert_error(function() qlua.load_safetensors(path("opts.safetensors"), { colour = 1 }) end,
      "load_safetensors")
  end)

  test("a FIFO is read front to back (its size is only known at the end)", function()
    if not os.execute("command -v mkfifo >/dev/null 2>&1") then pending("no mkfifo"); return end
    local src = path("fifo_src.safetensors")
    qlua.save_safetensors(src, { a = qlua.tensor({ 1.5, 2.5 }), b = qlua.tensor({ 7 }) })
    local fifo = path("pipe")
    assert(os.execute("mkfifo '" .. fifo .. "'"))
    assert(os.execute("cat '" .. src .. "' > '" .. fifo .. "' &"))
    local t = qlua.load_safetensors(fifo)
    assert_tensor(t.a, "float32", { 2 }, { 1.5, 2.5 }, "a")
    assert_tensor(t.b, "int64", { 1 }, { 7 }, "b")
    -- trailing bytes are found at the end of the stream
    T.write_file(src, T.read_file(src) .. "xx")
    assert(os.execute("cat '" .. src .. "' > '" .. fifo .. "' &"))
    T.assert_error(function() qlua.load_safetensors(fifo) end, "load_safetensors:",
      "bytes follow the last tensor")
    -- a truncated stream
    local bytes = T.read_file(src)
    T.write_file(src, bytes:sub(1, #bytes - 6))
    assert(os.execute("cat '" .. src .. "' > '" .. fifo .. "' &"))
    T.assert_error(function() qlua.load_safetensors(fifo) end, "load_safetensors:", "truncated")
    os.remove(fifo)
  end)
end)

-- ------------------------------------------------------------------- the bytes

describe("the bytes written", function()
  local SMALL = {
    { name = "b", dtype = "I64", shape = { 2 }, values = { 1, -(1 << 40) }, qdtype = "int64" },
    { name = "a", dtype = "F32", shape = { 2, 2 }, values = { 1.5, -2, 0.25, 8 }, qdtype = "float32" },
    { name = "h", dtype = "F16", shape = { 3 }, values = { 1, -2, 0.5 }, bits = { 0x3c00, 0xc000, 0x3800 },
      qdtype = "float16" },
    { name = "z", dtype = "BOOL", shape = { 3 }, values = { true, false, true }, qdtype = "bool" },
    { name = "s", dtype = "F64", shape = {}, values = { -0.125 }, qdtype = "float64" },
    { name = "e", dtype = "U8", shape = { 0 }, values = {}, qdtype = "uint8" },
    { name = "q\"uote", dtype = "I32", shape = { 1, 1 }, values = { -7 }, qdtype = "int32" },
    { name = "bf", dtype = "BF16", shape = { 2 }, values = { 1, -2 }, bits = { 0x3f80, 0xc000 },
      qdtype = "bfloat16" },
    { name = "u", dtype = "U8", shape = { 3 }, values = { 0, 9, 255 }, qdtype = "uint8" },
  }
  local META = { format = "pt", ["ключ"] = "line\nbreak \1" }

  local function small_tensors()
    local t = {}
    for _, r in ipairs(SMALL) do t[r.name] = tensor_of(r.values, r.shape, r.qdtype) end
    return t
  end

  test("are the reference encoder's, byte for byte", function()
    qlua.save_safetensors(path("small.safetensors"), small_tensors(), META)
    assert.equal(encode(SMALL, META), T.read_file(path("small.safetensors")))
  end)

  test("are the same for the same tensors, however the table was built", function()
    qlua.save_safetensors(path("one.safetensors"), small_tensors(), META)
    local reordered = {}
    for i = #SMALL, 1, -1 do reordered[SMALL[i].name] = tensor_of(SMALL[i].values, SMALL[i].shape, SMALL[i].qdtype) end
    qlua.save_safetensors(path("two.safetensors"), reordered, META)
    assert.equal(T.read_file(path("one.safetensors")), T.read_file(path("two.safetensors")))
  end)

  test("pad the header to 8 bytes with spaces and align every tensor to its element size", function()
    qlua.save_safetensors(path("align.safetensors"), small_tensors(), META)
    local bytes = T.read_file(path("align.safetensors"))
    local header, start = header_of(bytes)
    assert.equal(0, #header % 8)
    assert.equal(0, start % 8)
    assert.is_truthy(header:match("^{.*} *$"), header)
    local seen = 0
    for code, begin in header:gmatch('"dtype":"(%w+)","shape":%[[%d,]*%],"data_offsets":%[(%d+),') do
      assert.equal(0, (start + tonumber(begin)) % SIZE[code], code .. " at " .. begin)
      seen = seen + 1
    end
    assert.equal(#SMALL, seen)
  end)
end)

-- ------------------------------------------------------------------- bad files

describe("malformed files", function()
  local p
  before_each(function() p = path("bad.safetensors") end)

  local function entry(name, dtype, shape, b, e)
    return string.format('"%s":{"dtype":"%s","shape":[%s],"data_offsets":[%s,%s]}', name, dtype,
                         shape, b, e)
  end
  local F8 = string.pack("<f<f", 1, 2)  -- 8 bytes of data

  -- bytes, then the strings the message must contain (the path is checked too)
  local CASES = {
    { "", "only 0 bytes long" },
    { "abc", "only 3 bytes long" },
    { string.pack("<I8", 100000001) .. "{}", "header length is 100000001 bytes, more than the 100000000 allowed" },
    { string.pack("<i8", -1) .. "{}", "more than the 100000000 allowed" },
    { string.pack("<I8", 50) .. "{}", "truncated: the header length is 50 bytes, but only 2 follow it" },
    { raw_file(" {}"), "does not start with '{'" },
    { raw_file("[]"), "does not start with '{'" },
    { raw_file(""), "does not start with '{'" },
    { raw_file('{"a\xff":1}'), "not valid UTF-8 (at byte 3)" },
    { raw_file('{"a\xc0\x80":1}'), "not valid UTF-8" },   -- an overlong NUL
    { raw_file('{"a":}'), "not valid JSON" },
    { raw_file('{}x'), "not valid JSON" },
    { raw_file('{"a\\u0000b":{}}'), "not valid JSON" },    -- jansson refuses NUL in keys
    { raw_file("{" .. entry("a", "F32", "2", 0, 8) .. "," .. entry("a", "F32", "2", 0, 8) .. "}", F8),
      "duplicate key" },
    { raw_file('{"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}}', F8), "duplicate key" },
    { raw_file('{"__metadata__":{"k":"1","k":"2"}}'), "duplicate key" },
    { raw_file('{"a":5}'), "tensor 'a' is not an object with dtype, shape and data_offsets" },
    { raw_file('{"a":{"shape":[2],"data_offsets":[0,8]}}', F8), "tensor 'a' has no dtype" },
    { raw_file('{"a":{"dtype":"F32","data_offsets":[0,8]}}', F8), "tensor 'a' has no shape" },
    { raw_file('{"a":{"dtype":"F32","shape":[2]}}', F8), "tensor 'a' has no data_offsets" },
    { raw_file('{"a":{"dtype":4,"shape":[2],"data_offsets":[0,8]}}', F8), "dtype is not a string" },
    { raw_file("{" .. entry("a", "I8", "8", 0, 8) .. "}", F8), "has dtype 'I8', which qlua does not read",
      "F32, F64, I32, I64, BOOL, U8, F16 and BF16 are supported" },
    { raw_file("{" .. entry("a", "F8_E4M3", "8", 0, 8) .. "}", F8), "dtype 'F8_E4M3'" },
    { raw_file("{" .. entry("a", "U16", "4", 0, 8) .. "}", F8), "dtype 'U16'" },
    { raw_file("{" .. entry("a", "float32", "2", 0, 8) .. "}", F8), "dtype 'float32'" },
    { raw_file('{"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}}', F8),
      "tensor 'a': shape is not a list of non-negative integers" },
    { raw_file("{" .. entry("a", "F32", "-2", 0, 8) .. "}", F8), "shape is not a list of non-negative integers" },
    { raw_file("{" .. entry("a", "F32", "2.0", 0, 8) .. "}", F8), "shape is not a list of non-negative integers" },
    { raw_file("{" .. entry("a", "F32", '"2"', 0, 8) .. "}", F8), "shape is not a list of non-negative integers" },
    { raw_file("{" .. entry("a", "F32", "true", 0, 8) .. "}", F8), "shape is not a list of non-negative integers" },
    { raw_file("{" .. entry("a", "F32", "99999999999999999999", 0, 8) .. "}", F8), "not valid JSON" },
    { raw_file("{" .. entry("a", "U8", ("1,"):rep(16) .. "8", 0, 8) .. "}", F8), "has 17 dimensions (at most 16)" },
    { raw_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}}', F8),
      "data_offsets is not [begin, end] of two non-negative integers" },
    { raw_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,8]}}', F8), "data_offsets is not [begin, end]" },
    { raw_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[-1,7]}}', F8), "data_offsets is not [begin, end]" },
    { raw_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0.0,8]}}', F8), "data_offsets is not [begin, end]" },
    { raw_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":"0,8"}}', F8), "data_offsets is not [begin, end]" },
    { raw_file("{" .. entry("a", "F32", "0", 8, 0) .. "}", F8), "data_offsets [8, 0]: begin is after end" },
    { raw_file("{" .. entry("a", "F32", "2", 0, 4) .. "}", F8:sub(1, 4)),
      "tensor 'a' of shape 2 and dtype F32 takes 8 bytes, but its data_offsets [0, 4] hold 4" },
    { raw_file("{" .. entry("a", "F64", "2,2", 0, 8) .. "}", F8), "takes 32 bytes" },
    { raw_file("{" .. entry("a", "F32", "4611686018427387904,4", 0, 8) .. "}", F8), "too large to count its bytes" },
    { raw_file("{" .. entry("a", "F64", "4611686018427387904", 0, 8) .. "}", F8), "too large to count its bytes" },
    { raw_file("{" .. entry("a", "F32", "1", 4, 8) .. "}", F8),
      "bytes 0..4 of the data section belong to no tensor (a gap before 'a'" },
    { raw_file("{" .. entry("a", "F32", "1", 0, 4) .. "," .. entry("b", "F32", "1", 8, 12) .. "}", F8 .. "\0\0\0\0"),
      "bytes 4..8 of the data section belong to no tensor (a gap before 'b'" },
    { raw_file("{" .. entry("a", "F32", "2", 0, 8) .. "," .. entry("b", "F32", "1", 4, 8) .. "}", F8),
      "tensors 'a' and 'b' overlap in the data section" },
    { raw_file("{" .. entry("a", "F32", "2", 0, 8) .. "," .. entry("b", "F32", "2", 0, 8) .. "}", F8),
      "overlap" },
    { raw_file("{" .. entry("a", "F32", "2", 0, 8) .. "}", F8:sub(1, 4)),
      "tensor 'a' ends at byte 8 of the data section, which has 4 bytes (is the file truncated?)" },
    { raw_file("{" .. entry("a", "F32", "1", 0, 4) .. "}", F8),
      "the data section has 8 bytes but the tensors cover 4 (4 trailing bytes belong to no tensor)" },
    { raw_file("{}", "x"), "the data section has 1 bytes but the tensors cover 0" },
    { raw_file('{"__metadata__":[1]}'), "__metadata__ is not an object of strings" },
    { raw_file('{"__metadata__":"pt"}'), "__metadata__ is not an object of strings" },
    { raw_file('{"__metadata__":{"format":1}}'), "__metadata__ value of 'format' is not a string" },
    { raw_file('{"__metadata__":{"format":null}}'), "__metadata__ value of 'format' is not a string" },
  }

  test("each check gives its own message, naming the file", function()
    for i, case in ipairs(CASES) do
      T.write_file(p, case[1])
      local ok, err = pcall(qlua.load_safetensors, p)
      assert.is_false(ok, "case " .. i .. " (" .. case[2] .. ") loaded")
      err = T.strip_where(err)
      assert.equal("load_safetensors: '" .. p .. "': ", err:sub(1, #p + 22), "case " .. i .. ": " .. err)
      for k = 2, #case do
        assert.is_truthy(err:find(case[k], 1, true),
          string.format("case %d: %q does not contain %q", i, err, case[k]))
      end
    end
  end)

  test("what the format allows loads", function()
    local ok_cases = {
      { raw_file("{}"), 0 },
      { raw_file("{}   \t\n "), 0 },                       -- trailing whitespace (padding)
      { raw_file('{"__metadata__":null}'), 0 },
      { raw_file('{"__metadata__":{}}'), 0 },
      { raw_file('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":[1]}}', F8), 1 },
      { raw_file('{"a":{"data_offsets":[0,8],"shape":[2],"dtype":"F32"}}', F8), 1 },   -- any key order
      { raw_file("{" .. entry("b", "F32", "1", 4, 8) .. "," .. entry("a", "F32", "1", 0, 4) .. "}", F8), 2 },
      { raw_file("{" .. entry("a", "F32", "0", 0, 0) .. "," .. entry("b", "F32", "2", 0, 8) .. ","
                 .. entry("c", "U8", "0,5", 8, 8) .. "}", F8), 3 },  -- empty tensors anywhere
      { raw_file("{" .. entry("big", "F64", "4611686018427387904,0", 0, 0) .. "}"), 1 },
    }
    for i, case in ipairs(ok_cases) do
      T.write_file(p, case[1])
      local ok, t = pcall(qlua.load_safetensors, p)
      assert.is_true(ok, "case " .. i .. ": " .. tostring(t))
      local count = 0
      for _ in pairs(t) do count = count + 1 end
      assert.equal(case[2], count, "case " .. i)
    end
    T.write_file(p, raw_file("{" .. entry("b", "F32", "1", 4, 8) .. "," .. entry("a", "F32", "1", 0, 4) .. "}", F8))
    local t = qlua.load_safetensors(p)
    assert_tensor(t.a, "float32", { 1 }, { 1 }, "a")
    assert_tensor(t.b, "float32", { 1 }, { 2 }, "b")
  end)

  test("bool bytes other than 0 and 1 read as true", function()
    T.write_file(p, raw_file("{" .. entry("m", "BOOL", "4", 0, 4) .. "}", "\0\1\2\255"))
    assert_tensor(qlua.load_safetensors(p).m, "bool", { 4 }, { false, true, true, true }, "m")
  end)

  test("a file cut anywhere is refused", function()
    qlua.save_safetensors(path("full.safetensors"), { a = qlua.rand(10), b = qlua.zeros(3, { dtype = "int64" }) })
    local bytes = T.read_file(path("full.safetensors"))
    for keep = 0, #bytes - 1, 7 do
      T.write_file(p, bytes:sub(1, keep))
      T.assert_error(function() qlua.load_safetensors(p) end, "load_safetensors: '" .. p .. "'")
    end
  end)

  test("missing files, directories and bad arguments", function()
    T.assert_error(function() qlua.load_safetensors(path("nope.safetensors")) end,
      "load_safetensors: cannot open '" .. path("nope.safetensors") .. "': No such file or directory")
    T.assert_error(function() qlua.load_safetensors(dir) end, "load_safetensors: cannot open", "Is a directory")
    T.assert_error(function() qlua.load_safetensors(5) end, "load_safetensors: cannot open")
    T.assert_error(function() qlua.load_safetensors({}) end, "bad argument #1 to 'load_safetensors'")
    T.assert_error(function() qlua.load_safetensors("a\0b") end, "path contains a NUL byte")
    T.assert_error(function() qlua.load_safetensors(p, {}, 3) end, "load_safetensors: unexpected argument #3")
  end)
end)

-- ------------------------------------------------------------------- saving

describe("save_safetensors", function()
  test("refuses what it cannot write, naming it", function()
    local p = path("refused.safetensors")
    local freed = qlua.zeros(2)
    freed:free()
    local cases = {
      { function() qlua.save_safetensors(p, 5) end, "bad argument #2 to 'save_safetensors'" },
      { function() qlua.save_safetensors(p) end, "bad argument #2 to 'save_safetensors'" },
      { function() qlua.save_safetensors(p, {}, 5) end, "bad argument #3 to 'save_safetensors'" },
      { function() qlua.save_safetensors(p, { qlua.zeros(1) }) end,
        "save_safetensors: tensors: the keys must be strings (a name is a number)" },
      { function() qlua.save_safetensors(p, { a = 1 }) end,
        "save_safetensors: tensors['a'] is a number, expected a tensor" },
      { function() qlua.save_safetensors(p, { a = freed }) end, "save_safetensors: tensor 'a' has been freed" },
      { function() qlua.save_safetensors(p, { __metadata__ = qlua.zeros(1) }) end,
        "save_safetensors: a tensor may not be named '__metadata__'" },
      { function() qlua.save_safetensors(p, { ["a\0b"] = qlua.zeros(1) }) end,
        "save_safetensors: tensor name 'a?b' contains a NUL byte" },
      { function() qlua.save_safetensors(p, { ["a\xffb"] = qlua.zeros(1) }) end,
        "save_safetensors: tensor name", "is not valid UTF-8 (at byte 1)" },
      { function() qlua.save_safetensors(p, {}, { [1] = "x" }) end,
        "save_safetensors: metadata: the keys must be strings (a key is a number)" },
      { function() qlua.save_safetensors(p, {}, { format = 1 }) end,
        "save_safetensors: metadata['format'] is a number, expected a string" },
      { function() qlua.save_safetensors(p, {}, { format = qlua.zeros(1) }) end,
        "save_safetensors: metadata['format'] is a userdata, expected a string" },
      { function() qlua.save_safetensors(p, {}, { ["k\0"] = "v" }) end,
        "save_safetensors: metadata key 'k?' contains a NUL byte" },
      { function() qlua.save_safetensors(p, {}, { k = "\xc3" }) end,
        "save_safetensors: metadata value of 'k' is not valid UTF-8 (at byte 0)" },
      { function() qlua.save_safetensors(p, { a = qlua.zeros(1) }, nil, 4) end,
        "save_safetensors: unexpected argument #4" },
      { function() qlua.save_safetensors(dir, { a = qlua.zeros(1) }) end,
        "save_safetensors: cannot open '" .. dir .. "' for writing: Is a directory" },
      { function() qlua.save_safetensors(path("no/such/dir/x.safetensors"), { a = qlua.zeros(1) }) end,
        "save_safetensors: cannot open", "No such file or directory" },
      { function() qlua.save_safetensors("a\0b", {}) end, "path contains a NUL byte" },
    }
    for i, c in ipairs(cases) do
      local ok, err = pcall(c[1])
      assert.is_false(ok, "case " .. i .. " succeeded")
      err = T.strip_where(err)
      for k = 2, #c do
        assert.is_truthy(err:find(c[k], 1, true), string.format("case %d: %q does not contain %q", i, err, c[k]))
      end
    end
    assert.is_nil(io.open(p, "rb"), "a refused save left a file")
  end)

  test("is all or nothing: a failed save leaves the old file as it was", function()
    local p = path("atomic.safetensors")
    qlua.save_safetensors(p, { old = qlua.tensor({ 1, 2, 3 }) }, { v = "1" })
    local before = T.read_file(p)
    local freed = qlua.zeros(1)
    freed:free()
    T.assert_error(function() qlua.save_safetensors(p, { a = qlua.ones(4), b = freed }) end,
      "save_safetensors: tensor 'b' has been freed")
    assert.equal(before, T.read_file(p))
    -- a failure after the first tensor's bytes went out: the second (written after it,
    -- same dtype, later name) is an expanded view of 2^48 elements, whose 2^50 bytes no
    -- host buffer can hold (more than any process's address space)
    local huge = qlua.zeros(1):expand(1 << 48)
    T.assert_error(function() qlua.save_safetensors(p, { a = qlua.ones(4), z = huge }) end,
      "save_safetensors: out of host memory", "for tensor 'z'")
    assert.equal(before, T.read_file(p))
    for _, name in ipairs(listing(dir)) do
      assert.is_nil(name:match("%.tmp$"), "a temporary file was left: " .. name)
    end
    local t, meta = qlua.load_safetensors(p)
    assert_tensor(t.old, "int64", { 3 }, { 1, 2, 3 }, "old")
    assert.same({ v = "1" }, meta)
    -- and a successful save replaces it whole
    qlua.save_safetensors(p, { new = qlua.ones(2) })
    local t2 = qlua.load_safetensors(p)
    assert.is_nil(t2.old)
    assert_tensor(t2.new, "float32", { 2 }, { 1, 1 }, "new")
  end)

  test("writes to a device in place (/dev/null)", function()
    local f = io.open("/dev/null", "wb")
    if not f then pending("no /dev/null"); return end
    f:close()
    qlua.save_safetensors("/dev/null", { a = qlua.ones(3) })
  end)
end)

-- ------------------------------------------------------------------- GPU

describe("GPU tensors", function()
  gtest("save reads GPU tensors back, views included; load puts them on opts.device", function()
    local saved, want = {}, {}
    for _, dtype in ipairs(DTYPES) do
      local flat = random_flat(12, dtype)
      local g = tensor_of(flat, { 3, 4 }, dtype):gpu()
      saved[dtype] = g
      want[dtype] = flat
      saved[dtype .. ".t"] = g:t()
      local rows = T.unflatten(flat, { 3, 4 })
      local tflat = {}
      for j = 1, 4 do for i = 1, 3 do tflat[#tflat + 1] = rows[i][j] end end
      want[dtype .. ".t"] = tflat
    end
    local p = path("gpu.safetensors")
    qlua.save_safetensors(p, saved)
    local cpu = qlua.load_safetensors(p)
    local gpu = qlua.load_safetensors(p, { device = "gpu" })
    for name, flat in pairs(want) do
      local dtype = name:match("^[^.]+")
      local shape = name:find(".t", 1, true) and { 4, 3 } or { 3, 4 }
      assert_tensor(cpu[name], dtype, shape, flat, name .. " on the cpu")
      assert.equal("gpu:0", gpu[name]:device())
      assert_tensor(gpu[name]:cpu(), dtype, shape, flat, name .. " on the gpu")
    end
  end)
end)

-- ------------------------------------------------------------------- Python's safetensors

-- python3 with safetensors and numpy, or nil and why not.
local function find_python()
  for _, py in ipairs({ "python3", "/usr/bin/python3" }) do
    if os.execute(py .. " -c 'import safetensors' >/dev/null 2>&1") then
      if not os.execute(py .. " -c 'import numpy, safetensors.numpy' >/dev/null 2>&1") then
        return nil, "python3 has safetensors but not numpy (safetensors.numpy needs it)"
      end
      return py
    end
  end
  return nil, "python3 -c \"import safetensors\" failed (the safetensors package is not installed)"
end

-- A Lua value as a Python literal.
local function py_literal(v)
  if type(v) == "boolean" then return v and "True" or "False" end
  if math.type(v) == "integer" then return tostring(v) end
  if type(v) == "number" then return string.format("%.17g", v) end
  if type(v) == "string" then return (string.format("%q", v):gsub("\\\n", "\\n")) end
  local parts = {}
  for i, x in ipairs(v) do parts[i] = py_literal(x) end
  return "[" .. table.concat(parts, ", ") .. "]"
end

local PY_SCRIPT = [==[
import sys
import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file
d = sys.argv[1]
exec(open(d + '/expect.py').read())   # EXPECT = {name: (dtype, shape, values)}, META, BF16
with safe_open(d + '/from_qlua.safetensors', framework='numpy') as f:
    assert dict(f.metadata() or {}) == META, f.metadata()
    assert sorted(f.keys()) == sorted(list(EXPECT) + list(BF16)), sorted(f.keys())
    for name, (dtype, shape, values) in EXPECT.items():
        a = f.get_tensor(name)
        assert a.dtype == np.dtype(dtype), (name, a.dtype)
        assert list(a.shape) == shape, (name, a.shape)
        assert a.ravel().tolist() == values, (name, a.ravel().tolist(), values)
try:
    from safetensors import deserialize
except ImportError:
    deserialize = None
if deserialize is not None:   # bfloat16 is not a NumPy dtype: its raw bytes
    raw = dict(deserialize(open(d + '/from_qlua.safetensors', 'rb').read()))
    for name, (shape, hexdata) in BF16.items():
        assert list(raw[name]['shape']) == shape, (name, raw[name]['shape'])
        assert bytes(raw[name]['data']) == bytes.fromhex(hexdata), name
save_file({
    'f16': np.array([[1.0, -2.0], [0.5, 65504.0]], dtype=np.float16),
    'f32': np.array([1.5, -0.25, 3.0], dtype=np.float32),
    'f64': np.array(2.5, dtype=np.float64),
    'i32': np.array([[-2147483648], [2147483647]], dtype=np.int32),
    'i64': np.array([9007199254740993, -5], dtype=np.int64),
    'u8': np.array([0, 7, 255], dtype=np.uint8),
    'b': np.array([True, False], dtype=np.bool_),
    'empty': np.zeros((0, 3), dtype=np.float32),
}, d + '/from_python.safetensors', metadata={'writer': 'python', 'format': 'np'})
print('safetensors-ok')
]==]

describe("Python's safetensors", function()
  local py, why = find_python()

  test("reads what qlua writes, and qlua reads what it writes", function()
    if not py then pending(why); return end
    local saved, expect, bf16 = {}, {}, {}
    local npname = { float32 = "float32", float64 = "float64", int32 = "int32", int64 = "int64",
                     uint8 = "uint8", bool = "bool", float16 = "float16" }
    for i, dtype in ipairs(DTYPES) do
      local shape = ({ { 2, 3 }, {}, { 4 }, { 0, 2 } })[i % 4 + 1]
      local flat = random_flat(numel(shape), dtype)
      local name = "t_" .. dtype
      saved[name] = tensor_of(flat, shape, dtype)
      if dtype == "bfloat16" then
        local t = qlua.load_safetensors(FIXTURE_PATH).brain  -- 16-bit patterns via a file
        saved[name] = t
        bf16[name] = { { 3 }, "803f00c04940" }
      else
        expect[name] = { npname[dtype], shape, flat }
      end
    end
    local meta = { format = "pt", note = "written by qlua" }
    qlua.save_safetensors(path("from_qlua.safetensors"), saved, meta)
    local lines = { "EXPECT = {" }
    for name, e in pairs(expect) do
      lines[#lines + 1] = string.format("  %s: (%s, %s, %s),", py_literal(name), py_literal(e[1]),
                                        py_literal(e[2]), py_literal(e[3]))
    end
    lines[#lines + 1] = "}"
    lines[#lines + 1] = "META = {" .. string.format("%s: %s, %s: %s", py_literal("format"),
      py_literal(meta.format), py_literal("note"), py_literal(meta.note)) .. "}"
    local b = {}
    for name, e in pairs(bf16) do
      b[#b + 1] = string.format("%s: (%s, %s)", py_literal(name), py_literal(e[1]), py_literal(e[2]))
    end
    lines[#lines + 1] = "BF16 = {" .. table.concat(b, ", ") .. "}"
    T.write_file(path("expect.py"), table.concat(lines, "\n") .. "\n")
    T.write_file(path("check.py"), PY_SCRIPT)
    local pipe = io.popen(py .. " '" .. path("check.py") .. "' '" .. dir .. "' 2>&1")
    local out = pipe:read("a")
    pipe:close()
    assert.is_truthy(out:find("safetensors-ok", 1, true), "the Python side failed:\n" .. out)

    local t, m = qlua.load_safetensors(path("from_python.safetensors"))
    assert.same({ writer = "python", format = "np" }, m)
    assert_tensor(t.f16, "float16", { 2, 2 }, { 1, -2, 0.5, 65504 }, "f16")
    assert_tensor(t.f32, "float32", { 3 }, { 1.5, -0.25, 3 }, "f32")
    assert_tensor(t.f64, "float64", {}, { 2.5 }, "f64")
    assert_tensor(t.i32, "int32", { 2, 1 }, { -2147483648, 2147483647 }, "i32")
    assert_tensor(t.i64, "int64", { 2 }, { 9007199254740993, -5 }, "i64")
    assert_tensor(t.u8, "uint8", { 3 }, { 0, 7, 255 }, "u8")
    assert_tensor(t.b, "bool", { 2 }, { true, false }, "b")
    assert_tensor(t.empty, "float32", { 0, 3 }, {}, "empty")
  end)
end)
