-- qlua.save / qlua.load (docs/API.md "Memory and devices"): NumPy .npy format 1.0,
-- little-endian, C order; float32/float64/int32/int64. Round trips, the bytes of the
-- file, files written the way NumPy writes them, clear errors for bad files, and a
-- round trip through NumPy itself when python3 has numpy.
local T = require "qlua.testing"
local qlua = T.qlua

local function test(name, fn) it(name, function() T.reseed(name); fn() end) end

local DESCR = { float32 = "<f4", float64 = "<f8", int32 = "<i4", int64 = "<i8" }
local PACK = { float32 = "<f", float64 = "<d", int32 = "<i4", int64 = "<i8" }

-- A fresh directory for this file's temporary files, removed at the end.
local dir
local function path(name) return dir .. "/" .. name end

local function read_bytes(p)
  local f = assert(io.open(p, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local function write_bytes(p, s)
  local f = assert(io.open(p, "wb"))
  f:write(s)
  f:close()
end

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
        local bytes = read_bytes(p)
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
        write_bytes(p, npy_file(DESCR[dtype], shape, PACK[dtype], flat))
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
    write_bytes(path("order.npy"), bytes)
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
    write_bytes(path("fortran.npy"), npy_file("<i8", { 2, 3 }, "<i8", { 1, 4, 2, 5, 3, 6 }, true))
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
    write_bytes(path("text.npy"), "hello, this is not an array\n")
    T.assert_error(function() return qlua.load(path("text.npy")) end, "load")
    write_bytes(path("empty.npy"), "")
    T.assert_error(function() return qlua.load(path("empty.npy")) end, "load")
    write_bytes(path("magic_only.npy"), "\x93NUMPY")
    T.assert_error(function() return qlua.load(path("magic_only.npy")) end, "load")
    -- a header that is not a dict
    local junk = "\x93NUMPY\x01\x00" .. string.pack("<I2", 54) .. string.rep("z", 53) .. "\n"
    write_bytes(path("junk_header.npy"), junk)
    T.assert_error(function() return qlua.load(path("junk_header.npy")) end, "load")
  end)

  test("truncated files: in the header and in the data", function()
    qlua.save(path("full.npy"), qlua.rand(100))
    local bytes = read_bytes(path("full.npy"))
    local h = parse_npy(bytes)
    for _, keep in ipairs({ 9, 30, h.offset, h.offset + 10, #bytes - 1 }) do
      local p = path("trunc_" .. keep .. ".npy")
      write_bytes(p, bytes:sub(1, keep))
      T.assert_error(function() return qlua.load(p) end, "load")
    end
  end)

  test("unsupported dtypes name the dtype", function()
    for _, descr in ipairs({ "<f2", "|b1", "|u1", "<c8", ">f4", ">i8", "<u4" }) do
      local p = path("dtype.npy")
      write_bytes(p, npy_header(descr, { 2 }) .. string.rep("\0", 16))
      local msg = T.assert_error(function() return qlua.load(p) end, "load")
      assert.is_truthy(msg:find(descr, 1, true) or msg:find(descr:sub(2), 1, true), msg)
    end
  end)

  test("a shape that disagrees with the data size", function()
    write_bytes(path("short.npy"), npy_file("<f4", { 3, 4 }, "<f", { 1, 2, 3 }))
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
      write_bytes(path("q_" .. dtype .. ".txt"), table.concat(lines, "\n") .. "\n")
    end
    write_bytes(path("check.py"), PY_SCRIPT)
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
