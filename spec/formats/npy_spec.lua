-- qlua.save / qlua.load (docs/API.md "Memory and devices"): NumPy .npy format 1.0,
-- little-endian, C order; float32/float64/int32/int64. Round trips, the bytes of the
-- file, files written the way NumPy writes them, clear errors for bad files, and a
-- round trip through NumPy itself when python3 has numpy.
local T, qlua, test = require("qlua.testing").spec(_ENV)

local DESCR = { float32 = "<f4", float64 = "<f8", int32 = "<i4", int64 = "<i8" }
local PACK = { float32 = "<f", float64 = "<d", int32 = "<i4", int64 = "<i8" }

-- A fresh directory for this file's temporary files, removed at the end.
local dir
local function path(name) return dir .. "/" .. name end

-- The header dict as NumPy writes it: "{'descr': '<f4', 'fortran_order': False,
-- 'shape': (2, 3), }", padded with spaces and a final newline so that the data starts at
-- a multiple of 64 bytes.
local function npy_header(descr, shape, fortran)
  local dims
  if #shape == 0 then dims = "()"
  elseif #shape == 1 then dims = "(" .. shape[1] .. ",)"
  else dims = "(" .. table.concat(shape, ", ") .. ")" end
  local dict = string.format("{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr,
    fortran and "True" or "False", dims)
  local total = 10 + #dict + 1
  local pad = (64 - total % 64) % 64
  dict = dict .. string.rep(" ", pad) .. "\n"
  return "\x93NUMPY\x01\x00" .. string.pack("<I2", #dict) .. dict
end

local function npy_file(descr, shape, fmt, values, fortran)
  local parts = { npy_header(descr, shape, fortran) }
  for i, v in ipairs(values) do parts[i + 1] = string.pack(fmt, v) end
  return table.concat(parts)
end

-- Parses the header of .npy bytes: version, descr, fortran_order, shape, data offset.
local function parse_npy(bytes)
  assert.equal("\x93NUMPY", bytes:sub(1, 6), "magic")
  local major, minor = bytes:byte(7), bytes:byte(8)
  local hlen = string.unpack("<I2", bytes, 9)
  local header = bytes:sub(11, 10 + hlen)
  local descr = header:match("'descr':%s*'([^']*)'")
  local fortran = header:match("'fortran_order':%s*(%a+)")
  local dims = header:match("'shape':%s*(%b())")
  local shape = {}
  for n in dims:gmatch("%d+") do shape[#shape + 1] = tonumber(n) end
  return { major = major, minor = minor, descr = descr, fortran = fortran, shape = shape,
    offset = 10 + hlen, header = header }
end

setup(function()
  dir = os.tmpname()
  os.remove(dir)
  assert(os.execute("mkdir -p '" .. dir .. "'"))
end)

teardown(function()
  if dir then os.execute("rm -rf '" .. dir .. "'") end
end)

describe("qlua.save and qlua.load", function()
  test("round trip every dtype and shape, 0-d and empty included", function()
    local shapes = { {}, { 0 }, { 2, 0 }, { 7 }, { 3, 4 }, { 2, 3, 4 }, { 1, 1, 5, 2 } }
    for _, dtype in ipairs(T.dtypes) do
      for k, shape in ipairs(shapes) do
        local data = T.random_table(shape, dtype)
        local t = T.make(data, dtype, "contiguous", nil, shape)
        local p = path(string.format("rt_%s_%d.npy", dtype, k))
        qlua.save(p, t)
        local back = qlua.load(p)
        local what = dtype .. " " .. T.shape_str(shape)
        assert.equal(dtype, back:dtype(), what)
        assert.equal("cpu", back:device(), what)
        T.assert_shape(back, shape, what)
        if T.numel(shape) > 0 then T.assert_equal(back, data, what) end
      end
    end
  end)

  test("save writes non-contiguous tensors in row-major order", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, layout in ipairs(T.noncontiguous_layouts) do
        local data = T.random_table({ 3, 5 }, dtype)
        local t = T.make(data, dtype, layout)
        local p = path("nc_" .. dtype .. "_" .. layout .. ".npy")
        qlua.save(p, t)
        local back = qlua.load(p)
        assert.is_true(back:is_contiguous())
        T.assert_equal(back, data, dtype .. " " .. layout)
      end
    end
    local e = qlua.tensor({ { 1 }, { 2 } }):expand(2, 3)
    qlua.save(path("expanded.npy"), e)
    T.assert_equal(qlua.load(path("expanded.npy")), { { 1, 1, 1 }, { 2, 2, 2 } })
  end)

  test("writes a version 1.0 header and little-endian C-order data", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, shape in ipairs({ {}, { 5 }, { 2, 3 } }) do
        local data = T.random_table(shape, dtype)
        local p = path("hdr.npy")
        qlua.save(p, T.make(data, dtype, "contiguous", nil, shape))
        local bytes = T.read_file(p)
        local h = parse_npy(bytes)
        local what = dtype .. " " .. T.shape_str(shape)
        assert.equal(1, h.major, what)
        assert.equal(0, h.minor, what)
        assert.equal(DESCR[dtype], h.descr, what)
        assert.equal("False", h.fortran, what)
        assert.same(shape, h.shape, what)
        assert.equal("\n", h.header:sub(-1), what .. ": header ends with a newline")
        assert.equal(0, h.offset % 16, what .. ": data aligned")
        if #shape == 1 then assert.is_truthy(h.header:find("(5,)", 1, true), h.header) end
        local flat = T.flatten(data)
        assert.equal(h.offset + #flat * string.packsize(PACK[dtype]), #bytes, what .. ": file size")
        for i, v in ipairs(flat) do
          local got = string.unpack(PACK[dtype], bytes, h.offset + 1 + (i - 1) * string.packsize(PACK[dtype]))
          assert.equal(v, got, what .. " element " .. i)
        end
      end
    end
  end)

  test("loads files written the way NumPy writes them", function()
    for _, dtype in ipairs(T.dtypes) do
      for _, shape in ipairs({ {}, { 4 }, { 2, 3 }, { 2, 1, 3 }, { 0, 3 } }) do
        local flat = T.random_list(T.numel(shape), dtype)
        local p = path("np_" .. dtype .. ".npy")
        T.write_file(p, npy_file(DESCR[dtype], shape, PACK[dtype], flat))
        local t = qlua.load(p)
        assert.equal(dtype, t:dtype())
        T.assert_shape(t, shape)
        if #flat > 0 then T.assert_equal(t, T.unflatten(flat, shape)) end
      end
    end
  end)

  test("loads headers with other key orders and spacing", function()
    local dict = "{'shape': (2,), 'fortran_order': False, 'descr': '<f8'}"
    dict = dict .. string.rep(" ", (64 - (10 + #dict + 1) % 64) % 64) .. "\n"
    local bytes = "\x93NUMPY\x01\x00" .. string.pack("<I2", #dict) .. dict .. string.pack("<d<d", 1.5, -2.25)
    T.write_file(path("order.npy"), bytes)
    local t = qlua.load(path("order.npy"))
    assert.equal("float64", t:dtype())
    T.assert_equal(t, { 1.5, -2.25 })
  end)

  test("load puts the tensor where opts.device says", function()
    qlua.save(path("dev.npy"), qlua.tensor({ 1, 2, 3 }))
    local t = qlua.load(path("dev.npy"), { device = "cpu" })
    assert.equal("cpu", t:device())
    T.assert_equal(t, { 1, 2, 3 })
    if T.has_gpu() then
      local g = qlua.load(path("dev.npy"), { device = "gpu" })
      assert.equal("gpu:0", g:device())
      assert.equal("int64", g:dtype())
      T.assert_equal(g:cpu(), { 1, 2, 3 })
    end
  end)

  test("a Fortran-order file loads transposed correctly or is refused clearly", function()
    -- a 2x3 array in column-major order: the bytes are its columns
    local vals = { { 1, 2, 3 }, { 4, 5, 6 } }
    T.write_file(path("fortran.npy"), npy_file("<i8", { 2, 3 }, "<i8", { 1, 4, 2, 5, 3, 6 }, true))
    local ok, res = pcall(qlua.load, path("fortran.npy"))
    if ok then
      T.assert_equal(res, vals)
    else
      assert.matches("[Ff]ortran", tostring(res))
    end
  end)
end)

describe("bad files", function()
  test("a missing file names the path", function()
    local p = path("no_such_file.npy")
    T.assert_error(function() return qlua.load(p) end, "load", p)
  end)

  test("a file that is not .npy", function()
    T.write_file(path("text.npy"), "hello, this is not an array\n")
    T.assert_error(function() return qlua.load(path("text.npy")) end, "load")
    T.write_file(path("empty.npy"), "")
    T.assert_error(function() return qlua.load(path("empty.npy")) end, "load")
    T.write_file(path("magic_only.npy"), "\x93NUMPY")
    T.assert_error(function() return qlua.load(path("magic_only.npy")) end, "load")
    -- a header that is not a dict
    local junk = "\x93NUMPY\x01\x00" .. string.pack("<I2", 54) .. string.rep("z", 53) .. "\n"
    T.write_file(path("junk_header.npy"), junk)
    T.assert_error(function() return qlua.load(path("junk_header.npy")) end, "load")
  end)

  test("truncated files: in the header and in the data", function()
    qlua.save(path("full.npy"), qlua.rand(100))
    local bytes = T.read_file(path("full.npy"))
    local h = parse_npy(bytes)
    for _, keep in ipairs({ 9, 30, h.offset, h.offset + 10, #bytes - 1 }) do
      local p = path("trunc_" .. keep .. ".npy")
      T.write_file(p, bytes:sub(1, keep))
      T.assert_error(function() return qlua.load(p) end, "load")
    end
  end)

  test("unsupported dtypes name the dtype", function()
    for _, descr in ipairs({ "|i1", "<u2", "<c8", ">f4", ">i8", "<u4", ">f2" }) do
      local p = path("dtype.npy")
      T.write_file(p, npy_header(descr, { 2 }) .. string.rep("\0", 16))
      local msg = T.assert_error(function() return qlua.load(p) end, "load")
      assert.is_truthy(msg:find(descr, 1, true) or msg:find(descr:sub(2), 1, true), msg)
    end
  end)

  test("a shape that disagrees with the data size", function()
    T.write_file(path("short.npy"), npy_file("<f4", { 3, 4 }, "<f", { 1, 2, 3 }))
    T.assert_error(function() return qlua.load(path("short.npy")) end, "load")
  end)

  test("save errors: a directory that does not exist, a non-tensor, a freed tensor", function()
    T.assert_error(function() qlua.save(path("no/such/dir/x.npy"), qlua.zeros(2)) end, "save")
    T.assert_error(function() qlua.save(path("x.npy"), "not a tensor") end, "save")
    local t = qlua.zeros(2)
    t:free()
    T.assert_error(function() qlua.save(path("freed.npy"), t) end, "tensor has been freed")
  end)
end)

-- NumPy itself, when python3 with numpy is there.
local function find_numpy_python()
  for _, py in ipairs({ "/usr/bin/python3", "python3" }) do
    local ok = os.execute(py .. " -c 'import numpy' >/dev/null 2>&1")
    if ok then return py end
  end
  return nil
end

local PY_SCRIPT = [[
import sys
import numpy as np
d = sys.argv[1]
expect = {'float32': ('<f4', (3, 4)), 'float64': ('<f8', (2, 3, 2)), 'int32': ('<i4', (5,)),
          'int64': ('<i8', (2, 2))}
for name, (descr, shape) in expect.items():
    a = np.load(d + '/q_' + name + '.npy')
    assert a.dtype == np.dtype(descr), (name, a.dtype)
    assert a.shape == shape, (name, a.shape)
    ref = np.loadtxt(d + '/q_' + name + '.txt', dtype=np.float64, ndmin=1).reshape(shape)
    assert np.array_equal(a.astype(np.float64), ref), name
    b = (a * 2 + 1).astype(a.dtype)
    np.save(d + '/n_' + name + '.npy', b)
    # a non-contiguous array: NumPy writes it in Fortran order when it is F-contiguous
    if a.ndim == 2:
        np.save(d + '/nt_' + name + '.npy', np.ascontiguousarray(a.T))
np.save(d + '/n_scalar.npy', np.array(2.5, dtype=np.float64))
np.save(d + '/n_arange.npy', np.arange(24, dtype=np.int32).reshape(2, 3, 4))
print('numpy-ok')
]]

describe("round trip through NumPy", function()
  local py = find_numpy_python()

  test("qlua writes, NumPy reads and writes, qlua reads back", function()
    if not py then pending("numpy not available (python3 -c 'import numpy' failed)") return end
    local shapes = { float32 = { 3, 4 }, float64 = { 2, 3, 2 }, int32 = { 5 }, int64 = { 2, 2 } }
    local data = {}
    for _, dtype in ipairs(T.dtypes) do
      local shape = shapes[dtype]
      data[dtype] = T.random_table(shape, dtype, T.is_float_dtype(dtype) and nil or { lo = -1000, hi = 1000 })
      qlua.save(path("q_" .. dtype .. ".npy"), T.make(data[dtype], dtype, "transposed"))
      -- the values as text, for NumPy to compare with (%.17g round-trips doubles)
      local lines = {}
      for i, v in ipairs(T.flatten(data[dtype])) do lines[i] = string.format("%.17g", v) end
      T.write_file(path("q_" .. dtype .. ".txt"), table.concat(lines, "\n") .. "\n")
    end
    T.write_file(path("check.py"), PY_SCRIPT)
    local pipe = io.popen(py .. " '" .. path("check.py") .. "' '" .. dir .. "' 2>&1")
    local out = pipe:read("a")
    pipe:close()
    assert.is_truthy(out:find("numpy-ok", 1, true), "numpy side failed:\n" .. out)
    for _, dtype in ipairs(T.dtypes) do
      local b = qlua.load(path("n_" .. dtype .. ".npy"))
      assert.equal(dtype, b:dtype())
      local want = T.ref.map(data[dtype], function(v) return T.as_dtype(v * 2 + 1, dtype) end)
      T.assert_equal(b, want, "numpy's a*2+1 for " .. dtype)
      if #shapes[dtype] == 2 then
        local bt = qlua.load(path("nt_" .. dtype .. ".npy"))
        T.assert_equal(bt, T.ref.transpose(data[dtype], 1, 2), "numpy's a.T for " .. dtype)
      end
    end
    local s = qlua.load(path("n_scalar.npy"))
    assert.equal(0, s:dim())
    assert.equal(2.5, s:item())
    local r = qlua.load(path("n_arange.npy"))
    assert.equal("int32", r:dtype())
    T.assert_equal(r, T.unflatten((function()
      local l = {}
      for i = 1, 24 do l[i] = i - 1 end
      return l
    end)(), { 2, 3, 4 }))
  end)
end)

-- ------------------------------------------------------------------ saving safely
-- qlua.save writes a temporary file next to the target, fsyncs it and renames it into
-- place: a failed save leaves what was at the path untouched, symlinks stay symlinks,
-- and device nodes and FIFOs are written in place, never removed. Failures are made in
-- child processes: `ulimit -f` (RLIMIT_FSIZE, with SIGXFSZ ignored) makes a write past a
-- few KiB fail with EFBIG, a full disk without a full disk.
local P = require("spec.helpers.process")

local function sh_ok(cmd) return os.execute(cmd) == true end
local function is_link(p) return sh_ok("test -L " .. P.quote(p)) end
local function is_fifo(p) return sh_ok("test -p " .. P.quote(p)) end
local function is_chardev(p) return sh_ok("test -c " .. P.quote(p)) end
local function exists(p) return sh_ok("test -e " .. P.quote(p) .. " -o -L " .. P.quote(p)) end
local function is_root()
  local pipe = io.popen("id -u")
  local uid = pipe:read("l")
  pipe:close()
  return uid == "0"
end

local function capture(cmd)
  local pipe = io.popen(cmd)
  local out = pipe:read("a")
  pipe:close()
  return (out:gsub("\n$", ""))
end

local function stat(fmt, p) return capture("stat -c " .. fmt .. " " .. P.quote(p)) end

-- The names in directory d (hidden ones too), sorted, as one string.
local function listing(d) return capture("ls -A " .. P.quote(d) .. " | LC_ALL=C sort | tr '\\n' ' '") end

local function fresh_dir(name)
  local d = path(name)
  assert(os.execute("rm -rf " .. P.quote(d) .. " && mkdir -p " .. P.quote(d)))
  return d
end

-- A child qlua that saves qlua.ones(n) to target and prints "saved" or "error: <msg>",
-- then the signal-mask lines of /proc/self/status before and after (to show that save
-- leaves the thread's mask and its pending signals as it found them).
local CHILD = [[
local function sigs()
  local f = io.open("/proc/self/status", "r")
  if not f then return "" end
  local s = {}
  for line in f:lines() do
    if line:match("^SigPnd") or line:match("^ShdPnd") or line:match("^SigBlk") or
       line:match("^SigIgn") then s[#s + 1] = line end
  end
  f:close()
  return table.concat(s, " ")
end
-- the tensor first: making it may start the CPU thread pool, and glibc's first thread
-- changes the state of its own real-time signals (32, 33), which is not save's doing
local t = qlua.ones(tonumber(arg[2]))
local before = sigs()
local ok, err = pcall(qlua.save, arg[1], t)
print(ok and "saved" or "error: " .. tostring(err))
print("signals " .. (before == sigs() and "unchanged" or "changed: " .. before .. " / " .. sigs()))
]]

-- Runs the child under /bin/sh, `prelude` (shell commands) first and `wrapper` (a command
-- that runs the next one) before qlua; returns P.run's result.
local function child_save(target, n, prelude, wrapper)
  local script = path("child_save.lua")
  T.write_file(script, CHILD)
  local cmd = string.format("%s exec %s %s %s %s %d", prelude or "", wrapper or "",
    P.quote(P.qlua()), P.quote(script), P.quote(target), n)
  return P.run({ "/bin/sh", "-c", cmd }, { timeout = 20 })
end

-- A save of 100,000 floats (400 KB) in a child whose file size limit is a few KiB.
local function failing_save(target)
  local r = child_save(target, 100000, "trap '' XFSZ; ulimit -f 8;")
  assert.equal(0, r.status, r.stderr)
  assert.is_truthy(r.stdout:find("error: ", 1, true), "the save should fail:\n" .. r.stdout)
  assert.is_truthy(r.stdout:find("File too large", 1, true), r.stdout)
  return r.stdout
end

describe("a failed save", function()
  test("leaves the existing file as it was, and no temporary file", function()
    local d = fresh_dir("keep")
    local p = d .. "/old.npy"
    qlua.save(p, qlua.tensor({ 1.5, 2.5, 3.5 }))
    local old = T.read_file(p)
    failing_save(p)
    assert.is_true(exists(p), "the old file was removed")
    assert.equal(old, T.read_file(p), "the old file was changed")
    assert.equal("old.npy ", listing(d), "a temporary file was left behind")
  end)

  test("to a new path leaves nothing behind", function()
    local d = fresh_dir("keep_new")
    failing_save(d .. "/new.npy")
    assert.equal("", listing(d))
  end)

  test("through a symlink keeps the link and the target's content", function()
    local d = fresh_dir("link_fail")
    assert(os.execute("mkdir " .. P.quote(d .. "/a") .. " " .. P.quote(d .. "/b")))
    qlua.save(d .. "/a/t.npy", qlua.tensor({ 7, 8 }))
    local old = T.read_file(d .. "/a/t.npy")
    assert(os.execute("ln -s ../a/t.npy " .. P.quote(d .. "/b/l.npy")))
    failing_save(d .. "/b/l.npy")
    assert.is_true(is_link(d .. "/b/l.npy"), "the symlink was removed")
    assert.equal("../a/t.npy", capture("readlink " .. P.quote(d .. "/b/l.npy")))
    assert.equal(old, T.read_file(d .. "/a/t.npy"))
    assert.equal("t.npy ", listing(d .. "/a"))
  end)

  test("to /dev/full raises 'No space left on device' and keeps the node (root)", function()
    if not is_root() then pending("needs root (a failed save used to delete the node)") return end
    if not is_chardev("/dev/full") then pending("/dev/full is missing") return end
    finally(function()  -- a regression must not leave the machine without /dev/full
      if not exists("/dev/full") then os.execute("mknod -m 666 /dev/full c 1 7") end
    end)
    local msg = T.assert_error(function() qlua.save("/dev/full", qlua.ones(10000)) end,
      "save", "/dev/full")
    assert.is_truthy(msg:find("No space left on device$"), msg)
    assert.is_true(is_chardev("/dev/full"), "/dev/full is no longer a character device")
    qlua.save("/dev/null", qlua.ones(10))
    assert.is_true(is_chardev("/dev/null"))
  end)

  test("to a FIFO whose reader has gone raises an error (EPIPE), not SIGPIPE", function()
    local d = fresh_dir("fifo")
    local fifo = d .. "/pipe.npy"
    assert(os.execute("mkfifo " .. P.quote(fifo)))
    -- the reader takes one byte and leaves; 4 MB cannot fit in the pipe
    local r = child_save(fifo, 1000000,
      "( timeout 10 head -c 1 " .. P.quote(fifo) .. " >/dev/null & );")
    assert.equal(0, r.status, "the child died (status " .. r.status .. "):\n" .. r.stdout .. r.stderr)
    assert.is_truthy(r.stdout:find("error: save: cannot write '" .. fifo .. "': Broken pipe",
      1, true), r.stdout)
    assert.is_truthy(r.stdout:find("signals unchanged", 1, true), r.stdout)
    assert.is_true(is_fifo(fifo), "the FIFO was removed")
  end)
end)

describe("a successful save", function()
  test("through symlinks replaces the final target's content and keeps the links", function()
    local d = fresh_dir("link_ok")
    assert(os.execute("mkdir " .. P.quote(d .. "/a") .. " " .. P.quote(d .. "/b")))
    qlua.save(d .. "/a/t.npy", qlua.zeros(3))
    assert(os.execute("ln -s ../a/t.npy " .. P.quote(d .. "/b/l.npy")))
    assert(os.execute("ln -s l.npy " .. P.quote(d .. "/b/l2.npy")))    -- a chain
    assert(os.execute("ln -s " .. P.quote(d .. "/a/t.npy") .. " " .. P.quote(d .. "/abs.npy")))
    qlua.save(d .. "/b/l2.npy", qlua.tensor({ 4, 5, 6, 7 }))
    assert.is_true(is_link(d .. "/b/l2.npy") and is_link(d .. "/b/l.npy"), "a link was replaced")
    T.assert_equal(qlua.load(d .. "/a/t.npy"), { 4, 5, 6, 7 })
    qlua.save(d .. "/abs.npy", qlua.tensor({ 9 }))
    assert.is_true(is_link(d .. "/abs.npy"))
    T.assert_equal(qlua.load(d .. "/a/t.npy"), { 9 })
    assert.equal("t.npy ", listing(d .. "/a"))
    assert.equal("l.npy l2.npy ", listing(d .. "/b"))
    -- a dangling link: the save creates its target
    assert(os.execute("ln -s ../a/new.npy " .. P.quote(d .. "/b/dangling.npy")))
    qlua.save(d .. "/b/dangling.npy", qlua.tensor({ 1 }))
    assert.is_true(is_link(d .. "/b/dangling.npy"))
    T.assert_equal(qlua.load(d .. "/a/new.npy"), { 1 })
  end)

  test("keeps an existing file's permission bits; a new file gets 0666 & ~umask", function()
    local d = fresh_dir("modes")
    local p = d .. "/m.npy"
    qlua.save(p, qlua.zeros(2))
    assert(os.execute("chmod 640 " .. P.quote(p)))
    qlua.save(p, qlua.ones(2))
    assert.equal("640", stat("%a", p))
    assert(os.execute("chmod 604 " .. P.quote(p)))
    qlua.save(p, qlua.ones(3))
    assert.equal("604", stat("%a", p))
    local r = child_save(d .. "/umask.npy", 2, "umask 027;")
    assert.is_truthy(r.stdout:find("saved", 1, true), r.stdout .. r.stderr)
    assert.equal("640", stat("%a", d .. "/umask.npy"))
    r = child_save(d .. "/umask0.npy", 2, "umask 0;")
    assert.equal("666", stat("%a", d .. "/umask0.npy"))
  end)

  test("keeps an existing file's owner and group (root)", function()
    if not is_root() then pending("needs root to give a file away") return end
    local p = fresh_dir("owner") .. "/o.npy"
    qlua.save(p, qlua.zeros(2))
    assert(os.execute("chown 65534:65534 " .. P.quote(p)))
    qlua.save(p, qlua.ones(2))
    assert.equal("65534:65534", stat("%u:%g", p))
  end)

  test("refuses a file the caller may not write, and one in a directory it may not write", function()
    if not is_root() or not P.have("setpriv") then pending("needs root and setpriv") return end
    local d = fresh_dir("readonly")
    local p = d .. "/ro.npy"
    qlua.save(p, qlua.zeros(2))
    local old = T.read_file(p)
    assert(os.execute("chmod 444 " .. P.quote(p) .. " && chown -R 65534:65534 " .. P.quote(d) ..
      " && chmod 755 " .. P.quote(path(""))))
    local r = child_save(p, 2, nil, "setpriv --reuid=65534 --regid=65534 --clear-groups")
    assert.is_truthy(r.stdout:find("error: save: cannot open '" .. p ..
      "' for writing: Permission denied", 1, true), r.stdout .. r.stderr)
    assert.equal(old, T.read_file(p))
    -- a writable file in a directory we may not write: refused too (no temporary file)
    assert(os.execute("chmod 666 " .. P.quote(p) .. " && chmod 555 " .. P.quote(d)))
    r = child_save(p, 2, nil, "setpriv --reuid=65534 --regid=65534 --clear-groups")
    assert.is_truthy(r.stdout:find("error: save: cannot create a file next to '" .. p ..
      "' to replace it: Permission denied", 1, true), r.stdout .. r.stderr)
    assert.equal(old, T.read_file(p))
    assert(os.execute("chmod 755 " .. P.quote(d)))
  end)

  test("to /dev/stdout writes into the pipe that stdout is", function()
    if not exists("/dev/stdout") then pending("no /dev/stdout") return end
    local out = path("from_stdout.npy")
    local r = P.run({ "/bin/sh", "-c", P.quote(P.qlua()) ..
      " -e 'qlua.save(\"/dev/stdout\", qlua.tensor({1, 2, 3}))' | cat > " .. P.quote(out) })
    assert.equal(0, r.status, r.stderr)
    T.assert_equal(qlua.load(out), { 1, 2, 3 })
  end)

  test("to a directory is refused, and the directory stays", function()
    local d = fresh_dir("a_dir.npy")
    T.assert_error(function() qlua.save(d, qlua.zeros(2)) end, "save", "Is a directory")
    assert.is_true(sh_ok("test -d " .. P.quote(d)))
  end)
end)

-- ------------------------------------------------------------------ header bytes
describe("a NUL byte in the header", function()
  test("is refused wherever it is", function()
    local data = string.pack("<f<f", 1, 2)
    local cases = {
      { "in descr", npy_header("<f4\0junk", { 2 }) },
      { "at the end of descr", npy_header("<f4\0", { 2 }) },
      { "in a key", (npy_header("<f4", { 2 }):gsub("'descr'", "'descr\0x'")) },
      { "after the dict", (npy_header("<f4", { 2 }):gsub("} ", "}\0")) },
      { "in the shape", (npy_header("<f4", { 2 }):gsub("%(2,%)", "(2\0,)")) },
      { "after False", (npy_header("<f4", { 2 }):gsub("False", "False\0")) },
    }
    for _, case in ipairs(cases) do
      local p = path("nul.npy")
      T.write_file(p, case[2] .. data)
      T.assert_error(function() return qlua.load(p) end, "load", "malformed header", p)
    end
    T.write_file(path("nul.npy"), cases[1][2] .. data)
    T.assert_error(function() return qlua.load(path("nul.npy")) end, "NUL")
  end)
end)

-- ------------------------------------------------------------------ long paths
describe("errors about long paths", function()
  -- 1,000+ bytes in components of 100 (a component may not exceed 255)
  local function long_tail()
    local parts = {}
    for i = 1, 10 do parts[i] = string.rep(string.char(96 + i), 100) end
    return table.concat(parts, "/")
  end

  local function check(msg, p, reason)
    assert.is_truthy(#msg < 320, "message longer than the buffer: " .. #msg)
    assert.is_truthy(msg:sub(-#reason) == reason, "the reason was cut off: " .. msg)
    assert.is_truthy(msg:find(p:sub(1, 40), 1, true), "the path's head is missing: " .. msg)
    assert.is_truthy(msg:find(p:sub(-30) .. "'", 1, true), "the path's tail is missing: " .. msg)
    assert.is_truthy(msg:find("...", 1, true), msg)
  end

  test("keep the reason whole: a nonexistent directory", function()
    local p = path("no/such/dir/" .. long_tail() .. "/x.npy")
    assert.is_truthy(#p > 1000)
    check(T.assert_error(function() qlua.save(p, qlua.zeros(2)) end, "save"), p,
      "No such file or directory")
    check(T.assert_error(function() return qlua.load(p) end, "load"), p,
      "No such file or directory")
  end)

  test("keep the reason whole: a bad file deep down", function()
    local d = path("deep/" .. long_tail())
    assert(os.execute("mkdir -p " .. P.quote(d)))
    local p = d .. "/bad.npy"
    T.write_file(p, "hello, this is not an array\n")
    check(T.assert_error(function() return qlua.load(p) end, "load"), p, "(bad magic)")
    T.write_file(p, npy_header(">f8", { 2 }) .. string.rep("\0", 16))
    check(T.assert_error(function() return qlua.load(p) end, "load", "big-endian"), p,
      "a.astype(a.dtype.newbyteorder('<')))")
    T.write_file(p, npy_header("<u2", { 2 }) .. string.rep("\0", 4))
    check(T.assert_error(function() return qlua.load(p) end, "load", "'<u2'"), p,
      "are supported)")
    T.write_file(p, npy_header("<f4", { 2 }):gsub("False", "Maybe"))
    check(T.assert_error(function() return qlua.load(p) end, "load"), p,
      "(fortran_order is not True or False)")
    qlua.save(p, qlua.zeros(3))      -- and a save deep down works
    T.assert_equal(qlua.load(p), { 0, 0, 0 })
  end)

  test("cut the path at UTF-8 character boundaries", function()
    local p = path("no/" .. string.rep("é", 300) .. "/" .. string.rep("ü", 300) .. ".npy")
    local msg = T.assert_error(function() return qlua.load(p) end, "load")
    assert.is_truthy(utf8.len(msg), "the message is not valid UTF-8: " .. msg)
  end)
end)
