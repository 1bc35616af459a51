-- Silent wrong answers and a crash, found where values, sizes, strings and files reach
-- their limits. Each describe is one finding; each case failed before its fix. Cases that
-- reach device code run on both devices (the GPU ones are pending without a GPU); the
-- others are device-free (checks, files, the binding).
local T, qlua, _, _, both = require("qlua.testing").spec(_ENV)
local P = require "spec.helpers.process"

local inf = math.huge
local MAXINT = math.maxinteger

-- fn must raise a message that starts with op's name ("op: ...") and contains each plain
-- string given; returns it.
local function refuses(op, fn, ...)
  local msg = T.assert_error(fn, ...)
  if msg:sub(1, #op + 2) ~= op .. ": " then
    error(string.format("error message %q does not start with %q", msg, op .. ": "), 2)
  end
  return msg
end

local function sorted_values(t)
  local v = T.flatten(t:totable())
  table.sort(v)
  return v
end

------------------------------------------------------------------------ saves past ulimit -f

describe("a save past the file-size limit (ulimit -f)", function()
  -- Runs script in a child qlua under `ulimit -f blocks` (512- or 1024-byte blocks, as the
  -- shell counts them: the limits below are far from both), in dir.
  local function run_limited(dir, blocks, script)
    local path = P.write(dir .. "/script.lua", script)
    return P.run({ "sh", "-c", "ulimit -f " .. blocks .. " && exec \"$0\" \"$1\"", P.qlua(), path },
                 { cwd = dir, timeout = 30 })
  end

  local function listing(dir)
    local pipe = io.popen("ls -A " .. P.quote(dir))
    local names = {}
    for name in pipe:lines() do
      if name ~= "script.lua" then names[#names + 1] = name end
    end
    pipe:close()
    table.sort(names)
    return table.concat(names, " ")
  end

  after_each(function() P.cleanup() end)

  -- The old file is small (under the limit) and stays; the new one (4 MB) does not fit.
  for _, case in ipairs({
    { op = "save", file = "old.npy",
      old = "qlua.save('old.npy', qlua.arange(5))",
      new = "qlua.save('old.npy', qlua.zeros(1000000))",
      check = "assert(qlua.load('old.npy'):sum() == 10)" },
    { op = "save_safetensors", file = "old.safetensors",
      old = "qlua.save_safetensors('old.safetensors', { w = qlua.arange(5) })",
      new = "qlua.save_safetensors('old.safetensors', { w = qlua.zeros(1000000) })",
      check = "assert(qlua.load_safetensors('old.safetensors').w:sum() == 10)" },
  }) do
    it(case.op .. " is a Lua error: the old file is kept, no temporary is left", function()
      local dir = P.tempdir()
      local made = P.run({ P.qlua(), "-e", case.old }, { cwd = dir })
      assert.equal(0, made.status, made.stderr)
      local r = run_limited(dir, 64, table.concat({
        "for i = 1, 2 do",   -- twice: the first SIGXFSZ must not linger and kill the second
        "  local ok, err = pcall(function() " .. case.new .. " end)",
        "  assert(not ok, 'the save succeeded')",
        "  io.write(tostring(err), '\\n')",
        "end",
        case.check,
        "io.write('alive\\n')",
      }, "\n"))
      assert.equal(0, r.status, "the child died (status " .. r.status .. "): " .. r.stderr)
      assert.truthy(r.stdout:find("alive", 1, true), r.stdout)
      assert.truthy(r.stdout:find(case.op .. ": cannot write 'old.", 1, true), r.stdout)
      assert.truthy(r.stdout:find("File too large", 1, true), r.stdout)
      assert.equal(case.file, listing(dir))
    end)
  end
end)

------------------------------------------------------------------------ sampling

describe("multinomial with extreme weights", function()
  both("without replacement never draws a zero weight next to a subnormal one", function(dev)
    qlua.seed(5)
    local opts = { dtype = "float64", device = dev }
    local p = qlua.tensor({ 0, 1e-310, 1, 0 }, opts)
    for _ = 1, 50 do
      local d = sorted_values(qlua.multinomial(p, 2))
      assert.same({ 2, 3 }, d)
    end
    -- only subnormal weights (their e / p overflows to inf): still only those
    local q = qlua.tensor({ { 0, 5e-324, 0, 4e-322 }, { 1e-320, 0, 1e-320, 0 } }, opts)
    for _ = 1, 50 do
      local d = qlua.multinomial(q, 2):totable()
      table.sort(d[1]); table.sort(d[2])
      assert.same({ { 2, 4 }, { 1, 3 } }, d)
    end
  end)

  both("with replacement follows finite weights whose sum overflows", function(dev)
    qlua.seed(6)
    local p = qlua.tensor({ 1e308, 0, 1e308, 1e308 }, { dtype = "float64", device = dev })
    local counts = { 0, 0, 0, 0 }
    for _, c in ipairs(qlua.multinomial(p, 3000, true):totable()) do counts[c] = counts[c] + 1 end
    assert.equal(0, counts[2])
    for _, c in ipairs({ 1, 3, 4 }) do assert(counts[c] > 850 and counts[c] < 1150, counts[c]) end
    -- without replacement, the same weights: three distinct categories, never 2
    for _ = 1, 20 do assert.same({ 1, 3, 4 }, sorted_values(qlua.multinomial(p, 3))) end
  end)
end)

------------------------------------------------------------------------ values that do not fit

describe("creation and random values the dtype cannot hold", function()
  both("randperm refuses n beyond the integers the dtype holds exactly", function(dev)
    -- 1-based: the values are 1..n, so n itself must be exact (PyTorch's 0-based bound,
    -- n <= 2^digits + 1, is the same rule)
    local exact = { float16 = 2048, bfloat16 = 256, uint8 = 255 }
    for dtype, n in pairs(exact) do
      local opts = { dtype = dtype, device = dev }
      local t = qlua.randperm(n, opts)
      local want = {}
      for i = 1, n do want[i] = i end
      assert.same(want, sorted_values(t), dtype)
      refuses("randperm", function() return qlua.randperm(n + 1, opts) end,
              tostring(n + 1), dtype)
    end
    refuses("randperm", function() return qlua.randperm((1 << 24) + 1, { dtype = "float32", device = dev }) end,
            tostring((1 << 24) + 1), "float32")
  end)

  both("arange, range, linspace and logspace refuse values past the dtype's range", function(dev)
    local f16 = { dtype = "float16", device = dev }
    -- 65510 rounds to 65504 (it fits); 65520 rounds to inf (it does not)
    T.assert_equal(qlua.arange(65500, 65515, 10, f16), { 65504, 65504 })
    -- the value named is the range's end, as for integer dtypes (arange(250, 260) in uint8: 259)
    refuses("arange", function() return qlua.arange(65500, 65600, 10, f16) end, "65590", "float16")
    refuses("arange", function() return qlua.arange(65500.5, 70000, 1000, f16) end, "float16")
    refuses("range", function() return qlua.range(65500, 65600, 50, f16) end, "65550", "float16")
    refuses("range", function() return qlua.range(0, 70000.5, 35000.25, f16) end, "70000.5", "float16")
    refuses("linspace", function() return qlua.linspace(0, 70000, 3, f16) end, "70000", "float16")
    refuses("logspace", function() return qlua.logspace(0, 5, 2, f16) end, "100000", "float16")
    T.assert_equal(qlua.linspace(0, 65504, 3, f16), { 0, 32752, 65504 })
    local bf16 = { dtype = "bfloat16", device = dev }
    refuses("linspace", function() return qlua.linspace(0, 3.4e38, 2, bf16) end, "3.4e+38", "bfloat16")
    local f32 = { dtype = "float32", device = dev }
    refuses("linspace", function() return qlua.linspace(-3.5e38, 0, 2, f32) end, "-3.5e+38", "float32")
    refuses("arange", function() return qlua.arange(3e38, 4e38, 5e37, f32) end, "float32")
    assert.equal(2, qlua.linspace(-3.4e38, 3.4e38, 2, f32):isfinite():sum())
  end)

  both("random_ refuses bounds past the integers a float dtype holds exactly", function(dev)
    qlua.seed(3)
    for dtype, top in pairs({ float16 = 2048, bfloat16 = 256, float32 = 1 << 24 }) do
      local t = qlua.empty(4000, { dtype = dtype, device = dev })
      t:random_(top - 9, top)
      for _, x in ipairs(T.flatten(t:totable())) do
        assert(x >= top - 9 and x <= top and x == math.floor(x), dtype .. " drew " .. x)
      end
      t:random_(-top, -top + 1)
      refuses("random_", function() t:random_(1, top + 1) end, tostring(top + 1), dtype)
      refuses("random_", function() t:random_(-top - 1, 0) end, tostring(-top - 1), dtype)
    end
    refuses("random_", function() qlua.empty(3, { dtype = "float16", device = dev }):random_(1, 70000) end,
            "70000", "float16")
    refuses("random_", function() qlua.empty(3, { dtype = "float64", device = dev }):random_(0, (1 << 53) + 1) end,
            "float64")
  end)
end)

------------------------------------------------------------------------ range arithmetic

describe("range arithmetic that overflows", function()
  both("uniform_ over a range wider than the dtype's largest value", function(dev)
    qlua.seed(9)
    for _, case in ipairs({ { "float32", 3e38 }, { "float64", 1.7e308 }, { "float16", 6e4 },
                            { "bfloat16", 3e38 } }) do
      local dtype, hi = case[1], case[2]
      local t = qlua.empty(2000, { dtype = dtype, device = dev }):uniform_(-hi, hi)
      local lo_seen, hi_seen = inf, -inf
      for _, x in ipairs(T.flatten(t:totable())) do
        assert(x == x and x > -inf and x < inf, dtype .. " drew " .. x)
        lo_seen, hi_seen = math.min(lo_seen, x), math.max(hi_seen, x)
      end
      assert(lo_seen < -hi / 2 and hi_seen > hi / 2, dtype .. ": " .. lo_seen .. " .. " .. hi_seen)
      assert(lo_seen >= -hi * 1.01, lo_seen)
      assert(hi_seen <= hi * 1.01, hi_seen)
    end
    -- bounds the dtype cannot hold are an error (PyTorch's rule)
    refuses("uniform_", function() qlua.empty(2, { dtype = "float16", device = dev }):uniform_(-1e5, 1) end,
            "float16")
    refuses("uniform_", function() qlua.empty(2, { device = dev }):uniform_(0, 1e39) end, "float32")
  end)

  both("histc over a range wider than the largest double", function(dev)
    local t = qlua.tensor({ -1e308, 0, 1e308, 5e307 }, { dtype = "float64", device = dev })
    T.assert_equal(t:histc(4, -1e308, 1e308), { 1, 0, 1, 2 })  -- 5e307 is at 3/4
    local d = qlua.tensor({ -1.7e308, 1.7e308 }, { dtype = "float64", device = dev })
    T.assert_equal(d:histc(2), { 1, 1 })  -- the data's own range
    local f = qlua.tensor({ -3e38, 3e38, 0 }, { device = dev })  -- float32's range: no overflow
    T.assert_equal(f:histc(2, -3.4e38, 3.4e38), { 1, 2 })
    T.assert_equal(f:histc(2, -1e308, 1e308), { 0, 3 })  -- +-3e38 are 0 at this scale
  end)

  it("flatten of an empty tensor whose merged size overflows int64 is an error", function()
    local big = 1 << 40
    local t = qlua.empty({ 0, big, big })
    T.assert_shape(t:flatten(), { 0 })
    T.assert_shape(t:flatten(1, 2), { 0, big })
    refuses("flatten", function() return t:flatten(2, 3) end, tostring(big))
    refuses("flatten", function() return qlua.empty({ big, big, 0 }):flatten(1, 2) end, tostring(big))
  end)

  -- Signed overflow is undefined behaviour: a release build may compute something, UBSan
  -- (CI's ASan build) aborts. Each of these multiplied the other sizes of an empty tensor.
  it("ops on an empty tensor whose other sizes multiply past int64 (UBSan)", function()
    local big = 1 << 40
    local e = qlua.empty({ 0, big, big })
    T.assert_shape(e:unsqueeze(2), { 0, 1, big, big })             -- ops_view.c unsqueeze
    local pieces = e:chunk(2, 2)                                   -- narrow's offset
    T.assert_shape(pieces[2], { 0, big // 2, big })
    T.assert_shape(e[{ {}, { 2, big, 3 } }], { 0, (big - 2) // 3 + 1, big })  -- slice
    T.assert_shape(e:select(2, big), { 0, big })
    T.assert_shape(e:diagonal(0, 2, 3), { 0, big })
    T.assert_shape(e:sum({ 2, 3 }), { 0 })                          -- ops_reduce.c extent
    T.assert_shape(e:masked_select(e:gt(0)), { 0 })                  -- ops_mask.c
    T.assert_shape(qlua.einsum("ijk->kji", e), { big, big, 0 })      -- ops_einsum.c 3-D shapes
    local z = qlua.einsum("ijk->i", qlua.empty({ 3, 0, big }))     -- sums over nothing: 0
    T.assert_equal(z, { 0, 0, 0 })
    T.assert_shape(qlua.empty({ big, big, 0, 3 }):matmul(qlua.ones(3, 2)), { big, big, 0, 2 })
    T.assert_shape(qlua.where(e:gt(0), e, 0), { 0, big, big })
  end)

  it("bincount of the largest int64 names the value, not a negative size", function()
    local msg = refuses("bincount", function() return qlua.tensor({ 1, MAXINT }):bincount() end,
                        tostring(MAXINT))
    assert.falsy(msg:find("negative", 1, true), msg)
    refuses("bincount", function() return qlua.tensor({ MAXINT - 1 }):bincount() end)
  end)
end)

------------------------------------------------------------------------ NUL bytes in strings

describe("strings with a NUL byte inside", function()
  it("are refused, naming the function and the argument", function()
    local a = qlua.ones(2, 2)
    refuses("einsum", function() return qlua.einsum("ij\0->ji", a) end, "spec", "NUL")
    refuses("einsum", function() return qlua.einsum("ij->ji\0", a) end, "spec", "NUL")
    refuses("zeros", function() return qlua.zeros(2, { dtype = "float64\0x" }) end, "dtype", "NUL")
    refuses("zeros", function() return qlua.zeros(2, { device = "cpu\0x" }) end, "device", "NUL")
    refuses("zeros", function() return qlua.zeros(2, { ["dtype\0"] = "float64" }) end, "NUL")
    refuses("to", function() return a:to("float64\0") end, "NUL")
    refuses("to", function() return a:to({ dtype = "int32\0" }) end, "NUL")
    refuses("cross_entropy", function()
      return qlua.cross_entropy(qlua.zeros(2, 3), qlua.tensor({ 1, 2 }), { reduction = "sum\0" })
    end, "reduction", "NUL")
    refuses("cross_entropy", function()
      return qlua.cross_entropy(qlua.zeros(2, 3), qlua.tensor({ 1, 2 }), { ["reduction\0"] = "sum" })
    end, "NUL")
    refuses("addmm", function() return qlua.addmm(a, a, a, { ["beta\0"] = 2 }) end, "NUL")
    refuses("unique", function() return a:unique({ ["return_counts\0"] = true }) end, "NUL")
    refuses("sync", function() qlua.sync("cpu\0") end, "NUL")
    refuses("save", function() qlua.save("x.npy\0.bak", a) end, "path", "NUL")
    refuses("load_safetensors", function() qlua.load_safetensors("a\0b") end, "path contains a NUL byte")
    refuses("kernel", function() return qlua.kernel("__global__ void k() {}\0junk", "k") end,
            "source", "NUL")
    refuses("kernel", function() return qlua.kernel("__global__ void k() {}", "k\0") end, "name", "NUL")
    refuses("kernel", function()
      return qlua.kernel("__global__ void k() {}", "k", { options = { "-G\0" } })
    end, "options", "NUL")
    refuses("elementwise", function() return qlua.elementwise("float x\0", "float y", "y = x") end,
            "NUL")
    refuses("elementwise", function() return qlua.elementwise("float x", "float y", "y = x\0;") end,
            "NUL")
    refuses("reduction", function()
      return qlua.reduction({ in_params = "float x", out_params = "float y", map_expr = "x\0",
                              reduce_expr = "a + b", identity = "0" })
    end, "map_expr", "NUL")
    refuses("module", function() return qlua.module("no-such.cubin\0x") end, "path", "NUL")
  end)

  it("qlua.help refuses a name with a NUL inside", function()
    local print_was = _G.print
    _G.print = function() end  -- help prints what it finds
    local ok, text = pcall(qlua.help, "cat\0x")
    _G.print = print_was
    assert.falsy(ok, "qlua.help took 'cat\\0x' for cat")
    assert.truthy(T.strip_where(text):find("^help: ") and text:find("NUL", 1, true), text)
  end)

  it("safetensors: a NUL is refused in names and keys, kept in metadata values", function()
    local path = P.tmpname(".safetensors")
    refuses("save_safetensors", function() qlua.save_safetensors(path, { ["w\0x"] = qlua.ones(1) }) end,
            "NUL")
    refuses("save_safetensors", function()
      qlua.save_safetensors(path, { w = qlua.ones(1) }, { ["k\0"] = "v" })
    end, "NUL")
    qlua.save_safetensors(path, { w = qlua.ones(1) }, { k = "a\0b" })
    local _, meta = qlua.load_safetensors(path)
    assert.equal("a\0b", meta.k)
    P.cleanup()
  end)
end)

------------------------------------------------------------------------ index tables

describe("index tables with keys that are not a sequence", function()
  it("are an error naming the key, when reading and when writing", function()
    local t = qlua.arange(6):view(2, 3)
    refuses("index", function() return t[{ x = 1 }] end, "'x'")
    refuses("index", function() return t[{ [2] = 1 }] end, "2")
    refuses("index", function() return t[{ 1, [4] = 2 }] end, "4")
    refuses("index", function() return t[{ 1, { 1, 2, step = 2 } }] end, "'step'")
    refuses("index", function() return t[{ [true] = 1 }] end, "boolean")
    refuses("index", function() t[{ x = 1 }] = 0 end, "'x'")
    T.assert_equal(t, { { 0, 1, 2 }, { 3, 4, 5 } })
    T.assert_equal(t[{ 2, { 1, 3, 2 } }], { 3, 5 })  -- sequences still work
    T.assert_equal(t[{}], t)
  end)
end)

------------------------------------------------------------------------ expanded views

describe("writes into an expanded view", function()
  both("are refused by every write, with one message", function(dev)
    local base = qlua.ones(1, 3, { device = dev })
    local e = base:expand(4, 3)
    local want = T.error_of(function() e:add_(1) end)
    assert.equal("add_: cannot write into an expanded tensor (dim 1 has stride 0)", want)
    local rest = want:sub(#"add_: " + 1)
    refuses("fill_", function() e:fill_(2) end, rest)
    refuses("zero_", function() e:zero_() end, rest)
    refuses("index", function() e[{ { 1, 2 } }] = 5 end, rest)
    refuses("index", function() e[{}] = 5 end, rest)
    refuses("index", function() e[2] = 5 end, rest)
    refuses("index", function() e[{ 1 }] = qlua.zeros(3, { device = dev }) end, rest)
    local v = qlua.ones(1, { device = dev }):expand(5)
    refuses("index", function() v[3] = 7 end, rest)
    refuses("index", function() v[{ 2 }] = 7 end, rest)
    T.assert_equal(base, { { 1, 1, 1 } })
    -- a size-1 dim of stride 0 shares nothing: still writable
    local one = qlua.ones(3, { device = dev }):expand(1, 3)
    one:fill_(4)
    one[{ 1, 2 }] = 5
    T.assert_equal(one, { { 4, 5, 4 } })
  end)
end)

------------------------------------------------------------------------ messages

describe("messages of composed ops", function()
  it("an out-of-memory inside einsum or multinomial names the function called", function()
    -- results of 2^50 and 2^49 bytes: past any address space, so no allocator grants them
    local a = qlua.ones(1, 1):expand(1 << 24, 1)
    local b = qlua.ones(1, 1):expand(1, 1 << 24)
    local msg = refuses("einsum", function() return qlua.einsum("ij,jk->ik", a, b) end, "out of memory")
    assert.falsy(msg:find("matmul", 1, true), msg)
    msg = refuses("multinomial", function() return qlua.multinomial(qlua.ones(2), 1 << 46, true) end,
                  "out of memory")
    assert.falsy(msg:find("empty", 1, true), msg)
  end)

  it("range shows a tiny step as it is", function()
    refuses("range", function() return qlua.range(0, 1, 1e-300) end, "1e-300")
    refuses("range", function() return qlua.range(1e300, 1e300 + 1, 1) end, "1e+300")
  end)
end)
