-- User CUDA code from Lua: qlua.kernel (NVRTC), qlua.elementwise,
-- qlua.reduction, qlua.module, both caches, and the errors that must reach nothing on
-- the GPU. Every result is checked against plain Lua. Without a GPU the functions must
-- raise a clear error, and the GPU cases are pending with the reason.
local T, qlua, _, gtest = require("qlua.testing").spec(_ENV)
local P = require "spec.helpers.process"

local HAS_GPU = T.gpu_status()

local function values(t) return T.flatten(t:cpu():totable()) end

local function assert_error(pattern, fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, "expected an error matching " .. pattern)
  assert.truthy(tostring(err):find(pattern), "error '" .. tostring(err) .. "' lacks '" .. pattern .. "'")
  return err
end

-- a child qlua with its own environment (the disk cache is read at compile time)
local function child(script, env, timeout)
  local path = P.write(P.tmpname(".lua"), script)
  local r = P.run({ P.qlua(), path }, { env = env, timeout = timeout or 60 })
  os.remove(path)
  return r
end

local COPY = [[
extern "C" __global__ void copy_kinds(const float *a, double *b, const int *c, long long *d,
                                      int ni, unsigned nu, long long nl, float f, double g,
                                      bool flag, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    b[i] = (double)a[i] * g + f + (flag ? 1 : 0);
    d[i] = (long long)c[i] * nl + ni + (long long)nu;
  }
}
]]

describe("qlua.kernel without a GPU", function()
  it("raises a clear error when there is no GPU", function()
    if HAS_GPU then pending("this machine has a GPU") return end
    assert_error("GPU", qlua.kernel, COPY, "copy_kinds")
    assert_error("GPU", qlua.module, "x.ptx")
    local e = qlua.elementwise("T x", "T y", "y = x")
    assert_error("GPU", e, qlua.tensor({ 1.0, 2.0 }))
    local r = qlua.reduction{ in_params = "T x", out_params = "T y", map_expr = "x",
                              reduce_expr = "a + b", identity = "0" }
    assert_error("GPU", r, qlua.tensor({ 1.0, 2.0 }))
  end)

  it("checks elementwise and reduction specs before any GPU is needed", function()
    assert_error("cannot read the parameter", qlua.elementwise, "float32", "float32 y", "y = 1")
    assert_error("qlua's dtype names", qlua.elementwise, "float x", "float32 y", "y = x")
    assert_error("both an input and an output", qlua.elementwise, "T x", "T x", "x = x")
    assert_error("no output", qlua.elementwise, "T x", "", "")
    assert_error("one output", qlua.reduction, { in_params = "T x", out_params = "T y, T z",
      map_expr = "x", reduce_expr = "a + b", identity = "0" })
    assert_error("unknown option", qlua.reduction, { in_params = "T x", out_params = "T y",
      map_expr = "x", reduce_expr = "a + b", identity = "0", bogus = 1 })
  end)
end)

describe("qlua.kernel", function()
  gtest("passes every argument kind", function()
    local k = qlua.kernel(COPY, "copy_kinds")
    local n = 1000
    local a = qlua.rand(n):gpu()
    local c = qlua.randint(-1000, 1000, n, { dtype = "int32" }):gpu()
    local b = qlua.zeros(n, { dtype = "float64", device = "gpu" })
    local d = qlua.zeros(n, { dtype = "int64", device = "gpu" })
    k(math.ceil(n / 128), 128, a, b, c, d, -7, 4000000000, 3000000000, 0.5, 2.5, true, n)
    local av, bv, cv, dv = values(a), values(b), values(c), values(d)
    for i = 1, n do
      T.assert_close(bv[i], av[i] * 2.5 + 0.5 + 1, 1e-12, "b[" .. i .. "]")
      assert.equal(cv[i] * 3000000000 - 7 + 4000000000, dv[i])
    end
    assert.equal("const float *a, double *b, const int *c, long long *d, int ni, unsigned nu, " ..
                 "long long nl, float f, double g, bool flag, int n", k:signature())
    local attrs = k:attributes()
    assert.is_true(attrs.registers > 0)
    assert.is_true(attrs.max_threads >= 128)
    assert.equal(0, attrs.static_shared)
    assert.equal(11, attrs.params)
  end)

  gtest("runs 1-, 2- and 3-D grids, with the launch table form too", function()
    local k = qlua.kernel([[
      extern "C" __global__ void where_am_i(int *out, int nx, int ny, int nz) {
        int x = blockIdx.x * blockDim.x + threadIdx.x;
        int y = blockIdx.y * blockDim.y + threadIdx.y;
        int z = blockIdx.z * blockDim.z + threadIdx.z;
        if (x < nx && y < ny && z < nz) out[(z * ny + y) * nx + x] = x + 100 * y + 10000 * z;
      }]], "where_am_i")
    for _, case in ipairs({ { { 3 }, { 8 }, 24, 1, 1 }, { { 3, 2 }, { 4, 4 }, 12, 8, 1 },
                            { { 2, 2, 3 }, { 4, 2, 2 }, 8, 4, 6 } }) do
      local grid, block, nx, ny, nz = case[1], case[2], case[3], case[4], case[5]
      local out = qlua.full({ nz, ny, nx }, -1, { dtype = "int32", device = "gpu" })
      k:launch{ grid = grid, block = block, args = { out, nx, ny, nz } }
      local v = out:cpu():totable()
      for z = 1, nz do for y = 1, ny do for x = 1, nx do
        assert.equal((x - 1) + 100 * (y - 1) + 10000 * (z - 1), v[z][y][x])
      end end end
    end
  end)

  gtest("uses static and dynamic shared memory", function()
    local src = [[
      extern "C" __global__ void reverse_static(float *x) {
        __shared__ float tile[256];
        tile[threadIdx.x] = x[blockIdx.x * 256 + threadIdx.x];
        __syncthreads();
        x[blockIdx.x * 256 + threadIdx.x] = tile[255 - threadIdx.x];
      }
      extern "C" __global__ void reverse_dynamic(float *x, int n) {
        extern __shared__ float tile[];
        tile[threadIdx.x] = x[blockIdx.x * n + threadIdx.x];
        __syncthreads();
        x[blockIdx.x * n + threadIdx.x] = tile[n - 1 - threadIdx.x];
      }]]
    local ks = qlua.kernel(src, "reverse_static")
    assert.equal(1024, ks:attributes().static_shared)
    local x = qlua.range(1, 512):to("float32"):gpu()
    ks(2, 256, x)
    local v = values(x)
    assert.equal(256, v[1]); assert.equal(1, v[256]); assert.equal(512, v[257])
    local kd = qlua.kernel(src, "reverse_dynamic")
    local n = 1000
    local y = qlua.range(1, 2 * n):to("float32"):gpu()
    -- 1000 floats fit the default; then ask for more than 48 KiB, which needs the opt-in
    kd:launch{ grid = 2, block = n, shared = 4 * n, args = { y, n } }
    v = values(y)
    assert.equal(n, v[1]); assert.equal(1, v[n]); assert.equal(2 * n, v[n + 1])
    -- 64 KiB: beyond the default 48, so the launch opts the kernel in
    local big = qlua.kernel([[
      extern "C" __global__ void big_shared(float *x) {
        extern __shared__ float tile[];
        tile[threadIdx.x * 16] = x[threadIdx.x];
        __syncthreads();
        x[threadIdx.x] = tile[(1023 - threadIdx.x) * 16] + 1.0f;
      }]], "big_shared")
    assert.is_true(big:attributes().max_dynamic_shared >= 65536)
    local z = qlua.range(0, 1023):to("float32"):gpu()
    big:launch{ grid = 1, block = 1024, shared = 1024 * 16 * 4, args = { z } }
    v = values(z)
    assert.equal(1024, v[1]); assert.equal(1, v[1024])
  end)

  gtest("instantiates templates and reads headers and options", function()
    local src = [[
      #include "scale.h"
      template <typename T> __global__ void axpy(T *y, const T *x, T a, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i] + y[i] + (T)(SCALE * OFFSET);
      }]]
    local opts = { headers = { ["scale.h"] = "#define SCALE 2" }, options = { "-DOFFSET=3" } }
    for _, case in ipairs({ { "axpy<float>", "float32", 1e-6 }, { "axpy<double>", "float64", 1e-14 } }) do
      local k = qlua.kernel(src, case[1], opts)
      local x = qlua.rand(100, { dtype = case[2] }):gpu()
      local y = qlua.rand(100, { dtype = case[2] }):gpu()
      local xv, yv = values(x), values(y)
      k(1, 128, y, x, 0.5, 100)
      local out = values(y)
      for i = 1, 100 do T.assert_close(out[i], 0.5 * xv[i] + yv[i] + 6, case[3], case[1]) end
    end
  end)

  gtest("binds float16 and bfloat16 tensors to __half * and __nv_bfloat16 *, numbers to their scalars", function()
    local src = [[
      #include <cuda_fp16.h>
      #include <cuda_bf16.h>
      extern "C" __global__ void axpy16(__half *y, const half *x, __half a, __nv_bfloat16 *yb,
                                        const __nv_bfloat16 *xb, nv_bfloat16 b, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) {
          y[i] = __float2half_rn(__half2float(a) * __half2float(x[i]) + __half2float(y[i]));
          yb[i] = __float2bfloat16_rn(__bfloat162float(b) * __bfloat162float(xb[i]) +
                                      __bfloat162float(yb[i]));
        }
      }]]
    local k = qlua.kernel(src, "axpy16")
    assert.equal("__half *y, const half *x, __half a, __nv_bfloat16 *yb, const __nv_bfloat16 *xb, " ..
                 "nv_bfloat16 b, int n", k:signature())
    local attrs = k:attributes()
    assert.equal(7, attrs.params)
    local n = 300
    local x, y = qlua.randn(n):to("float16"):gpu(), qlua.randn(n):to("float16"):gpu()
    local xb, yb = qlua.randn(n):to("bfloat16"):gpu(), qlua.randn(n):to("bfloat16"):gpu()
    local xv, yv, xbv, ybv = values(x), values(y), values(xb), values(yb)
    k(math.ceil(n / 128), 128, y, x, 0.1, yb, xb, 3, n)
    -- the numbers arrive rounded to the type (0.1 -> 0.0999755859375 in float16); the
    -- product of two 16-bit values is exact in float32, so the kernel rounds twice: the
    -- sum to float32, then to the 16-bit type
    local a = T.round_half(0.1, "float16")
    local out, outb = values(y), values(yb)
    for i = 1, n do
      assert.equal(T.half_op(a * xv[i] + yv[i], "float16"), out[i], "float16 element " .. i)
      assert.equal(T.half_op(3 * xbv[i] + ybv[i], "bfloat16"), outb[i], "bfloat16 element " .. i)
    end
    assert_error("argument 2, x %(const half %*%), wants a float16 tensor, got float32", k,
                 1, 128, y, x:float(), 0.1, yb, xb, 3, n)
    assert_error("argument 4, yb %(__nv_bfloat16 %*%), wants a bfloat16 tensor, got float16", k,
                 1, 128, y, x, 0.1, y, xb, 3, n)
    assert_error("argument 3, a %(__half%), wants a number, got a boolean", k,
                 1, 128, y, x, true, yb, xb, 3, n)
    -- a scalar past float16's range arrives as inf, as storing it in a tensor gives
    local inf = qlua.kernel([[
      #include <cuda_fp16.h>
      extern "C" __global__ void put16(float *out, __half v) { out[0] = __half2float(v); }]], "put16")
    local o = qlua.zeros(1):gpu()
    inf(1, 1, o, 70000)
    assert.equal(math.huge, o:item())
    inf(1, 1, o, 2049)
    assert.equal(2048, o:item(), "2049 rounds to even in float16")
  end)

  gtest("reports compile errors with NVRTC's log and line numbers", function()
    local err = assert_error("compile error", qlua.kernel,
      "extern \"C\" __global__ void broken(float *x) {\n  x[0] = undefined_name;\n}", "broken")
    assert.truthy(err:find("kernel.cu%(2%)"), err)
    assert.truthy(err:find("undefined_name"), err)
    assert_error("no __global__ function 'missing'", qlua.kernel, COPY, "missing")
    assert_error("cannot be passed from Lua", qlua.kernel,
      "struct S { int a; }; extern \"C\" __global__ void s(S v) {}", "s")
  end)

  gtest("checks every argument and the launch before anything reaches the GPU", function()
    local k = qlua.kernel(COPY, "copy_kinds")
    local n = 16
    local a = qlua.rand(n):gpu()
    local c = qlua.zeros(n, { dtype = "int32", device = "gpu" })
    local b = qlua.full(n, 7, { dtype = "float64", device = "gpu" })
    local d = qlua.zeros(n, { dtype = "int64", device = "gpu" })
    local good = { a, b, c, d, 1, 2, 3, 0.5, 0.5, false, n }
    local function with(i, v) local t = T.copy_list(good); t[i] = v; return table.unpack(t, 1, 11) end
    assert_error("takes 11 arguments %(a %(const float %*%), b %(double %*%)", k, 1, 32, a, b)
    assert_error("argument 2, b %(double %*%), wants a float64 tensor, got float32", k, 1, 32, with(2, a))
    assert_error("argument 1, a %(const float %*%), is on cpu", k, 1, 32, with(1, qlua.rand(n)))
    assert_error("wants a tensor, got a number", k, 1, 32, with(1, 3))
    assert_error("wants a number, got a tensor", k, 1, 32, with(5, a))
    assert_error("2147483648 is out of range", k, 1, 32, with(5, 2147483648))
    assert_error("%-1 is out of range %(0 to 4294967295%)", k, 1, 32, with(6, -1))
    assert_error("wants an integer, got 1.5", k, 1, 32, with(7, 1.5))
    assert_error("wants a boolean", k, 1, 32, with(10, 2))
    assert_error("not contiguous", k, 1, 32, with(1, qlua.rand(n, 2):gpu():select(2, 1)))
    local freed = qlua.rand(n):gpu(); freed:free()
    assert_error("freed", k, 1, 32, with(1, freed))
    assert_error("over the GPU's limit of 1024", k, { 1 }, { 2048 }, table.unpack(good))
    assert_error("2048 threads", k, 1, { 32, 32, 2 }, table.unpack(good))
    assert_error("grid.y = 70000", k, { 1, 70000 }, 1, table.unpack(good))
    assert_error("grid must be a positive integer", k, 0, 1, table.unpack(good))
    assert_error("bytes of dynamic shared memory", function()
      k:launch{ grid = 1, block = 32, shared = 1 << 30, args = good }
    end)
    assert_error("unknown field", function() k:launch{ grid = 1, block = 1, argz = good } end)
    qlua.sync()
    for _, v in ipairs(values(b)) do assert.equal(7, v) end  -- nothing ran
    k(1, 32, table.unpack(good))  -- and the kernel still works
    qlua.sync()
  end)

  gtest("a kernel that faults leaves the GPU broken with a clear message; CPU work goes on", function()
    local r = child([[
      local qlua = require "qlua"
      local k = qlua.kernel('extern "C" __global__ void bad(float *x) { x[1ll << 40] = 1; }', "bad")
      local x = qlua.zeros(4):gpu()
      k(1, 1, x)
      local ok, err = pcall(qlua.sync)
      print("sync", ok, err)
      local ok2, err2 = pcall(function() return (x + 1):cpu() end)
      print("after", ok2, err2)
      print("cpu", (qlua.ones(3) * 2):sum())
    ]])
    assert.equal(0, r.status, r.stdout .. r.stderr)
    assert.truthy(r.stdout:find("sync\tfalse\t.*illegal"), r.stdout)
    assert.truthy(r.stdout:find("after\tfalse"), r.stdout)
    assert.truthy(r.stdout:find("cpu\t6"), r.stdout)
  end)
end)

describe("kernel caches", function()
  local SRC = [[
    extern "C" __global__ void cached_fill(float *x, float v, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) x[i] = v;
    }]]
  local SCRIPT = [[
    local qlua = require "qlua"
    local t0 = qlua.clock()
    local k = qlua.kernel(%q .. "// %s", "cached_fill")
    local t1 = qlua.clock()
    local x = qlua.zeros(10):gpu()
    k(1, 32, x, 2.5, 10)
    print("sum", x:sum(), "ms", (t1 - t0) * 1000)
  ]]
  local function entries(dir)
    local r = P.run({ "sh", "-c", "ls -a " .. P.quote(dir .. "/qlua/kernels") .. " 2>/dev/null" })
    local list = {}
    for name in r.stdout:gmatch("[^\n]+") do
      if name:match("%.qkc$") then list[#list + 1] = dir .. "/qlua/kernels/" .. name end
    end
    return list
  end

  gtest("the same source hits the in-memory cache", function()
    local k1 = qlua.kernel(SRC, "cached_fill")
    local t0 = qlua.clock()
    local k2 = qlua.kernel(SRC, "cached_fill")
    local dt = qlua.clock() - t0
    assert.is_true(dt < 0.005, "in-memory hit took " .. dt .. " s")
    local x = qlua.zeros(10):gpu()
    k2(1, 32, x, 1.5, 10)
    assert.equal(15, x:sum())
    k1 = nil
  end)

  gtest("the disk cache: written, read, shared by two processes, corrupt entries rewritten", function()
    local dir = P.tempdir()
    local env = { XDG_CACHE_HOME = dir }
    local tag = tostring(os.time()) .. tostring(math.random(1 << 30))
    local script = string.format(SCRIPT, SRC, tag)
    local r = child(script, env)
    assert.equal(0, r.status, r.stderr)
    assert.truthy(r.stdout:find("sum\t25"), r.stdout)
    local files = entries(dir)
    assert.equal(1, #files)
    local r2 = child(script, env)
    assert.equal(0, r2.status, r2.stderr)
    assert.truthy(r2.stdout:find("sum\t25"), r2.stdout)
    -- corrupt it three ways: each run still works and leaves a good entry
    local good = P.read(files[1])
    for _, bad in ipairs({ good:sub(1, #good // 2), "garbage", good:sub(1, 100) .. "X" .. good:sub(102) }) do
      P.write(files[1], bad)
      local r3 = child(script, env)
      assert.equal(0, r3.status, r3.stderr)
      assert.truthy(r3.stdout:find("sum\t25"), r3.stdout)
      assert.equal(#good, #P.read(files[1]))
    end
    -- two processes compiling a new source at once both succeed
    local script2 = string.format(SCRIPT, SRC, tag .. "-two")
    local path = P.write(P.tmpname(".lua"), script2)
    local out1, out2 = P.tmpname(), P.tmpname()
    local cmd = string.format("env XDG_CACHE_HOME=%s %s %s >%s 2>&1 & env XDG_CACHE_HOME=%s %s %s >%s 2>&1; wait",
      P.quote(dir), P.quote(P.qlua()), P.quote(path), P.quote(out1),
      P.quote(dir), P.quote(P.qlua()), P.quote(path), P.quote(out2))
    os.execute(cmd)
    assert.truthy(P.read(out1):find("sum\t25"), P.read(out1))
    assert.truthy(P.read(out2):find("sum\t25"), P.read(out2))
    assert.equal(2, #entries(dir))
    -- QLUA_KERNEL_CACHE=0 writes nothing; kernel_cache_clear empties the directory
    local r4 = child(string.format(SCRIPT, SRC, tag .. "-off"), { XDG_CACHE_HOME = dir, QLUA_KERNEL_CACHE = "0" })
    assert.equal(0, r4.status, r4.stderr)
    assert.equal(2, #entries(dir))
    local r5 = child("require('qlua').kernel_cache_clear()", env)
    assert.equal(0, r5.status, r5.stderr)
    assert.equal(0, #entries(dir))
  end)
end)

describe("qlua.elementwise", function()
  local fused = qlua.elementwise("T x, T y, T z", "T w", "w = x * y + z", "fused")

  for _, dtype in ipairs(T.dtypes) do
    for _, layout in ipairs(T.layouts) do
      gtest("matches the built-in ops on " .. layout .. " " .. dtype .. " tensors", function()
        local shape = { 37, 19 }
        local xs = T.random_table(shape, dtype, { lo = -9, hi = 9 })
        local ys = T.random_table(shape, dtype, { lo = -9, hi = 9 })
        local zs = T.random_table(shape, dtype, { lo = -9, hi = 9 })
        local x = T.make(xs, dtype, layout, "gpu")
        local y = T.make(ys, dtype, layout, "gpu")
        local z = T.make(zs, dtype, "contiguous", "gpu")
        local w = fused(x, y, z)
        assert.equal(dtype, w:dtype())
        -- NVRTC contracts x * y + z into one fma (one rounding), the built-in ops round twice
        if T.is_float_dtype(dtype) then T.assert_close(w, x * y + z, T.tol[dtype] * 10, "fused " .. layout)
        else T.assert_equal(w, x * y + z, "fused " .. dtype .. " " .. layout) end
      end)
    end
  end

  for _, dtype in ipairs(T.half_dtypes) do
    for _, layout in ipairs(T.layouts) do
      gtest("computes " .. layout .. " " .. dtype .. " tensors in float32, rounded once", function()
        local shape = { 37, 19 }
        local function make(lay)  -- the values rounded into dtype, in that layout
          return T.make(T.random_table(shape, "float64", { lo = -9, hi = 9 }), dtype, lay, "gpu")
        end
        local x, y, z = make(layout), make(layout), make("contiguous")
        local w = fused(x, y, z)
        assert.equal(dtype, w:dtype())
        -- x * y is exact in float32 (two 16-bit significands), so fused or not the float32
        -- result is the one rounding of x * y + z, then the one rounding into dtype
        T.assert_equal(w, (x:float() * y:float() + z:float()):to(dtype), "fused " .. dtype .. " " .. layout)
        local scale = qlua.elementwise("T x, T a", "T y", "y = x * a", "scale16")
        T.assert_equal(scale(x, 0.1), (x:float() * 0.1):to(dtype), "a number takes part as a float32")
        -- an output given, written through its reference (read back where the body reads it)
        local acc = qlua.elementwise("T x", "T y", "y += x; y *= 2", "acc16")
        local out = z:clone()
        acc(x, out)
        T.assert_equal(out, ((z:float() + x:float()):to(dtype):float() * 2):to(dtype),
                       "y += x rounds, then y *= 2 rounds")
      end)
    end
    gtest("copies " .. dtype .. " NaNs and infinities as the conversions do", function()
      local bits = { 0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x7c01, 0x0001, 0x8000, 0x3c00 }
      if dtype == "bfloat16" then bits = { 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x7f81, 0x0001, 0x8000, 0x3f80 } end
      local x = T.tensor_from_bits(bits, dtype, "gpu")
      local copy = qlua.elementwise("T x", "T y", "y = x", "copy16")
      T.assert_bits_equal(T.tensor_bits(copy(x)), T.tensor_bits(x:float():to(dtype)), dtype .. " copy")
      local mixed = qlua.elementwise("float16 h, bfloat16 b", "float32 f", "f = h + b", "mixed16")
      local h = qlua.tensor({ 1.5, -2 }, { dtype = "float16" }):gpu()
      local b = qlua.tensor({ 0.25, 1e30 }, { dtype = "bfloat16" }):gpu()
      T.assert_equal(mixed(h, b), h:float() + b:float(), "fixed 16-bit dtypes")
    end)
  end

  gtest("broadcasts, takes numbers, writes into given outputs", function()
    local scale = qlua.elementwise("float64 x, float64 a, float64 b", "float64 y", "y = a * x + b + i * 0", "scale")
    local x = qlua.randn(5, 1, { dtype = "float64" }):gpu():expand(5, 7)
    local y = scale(x, 2, 0.25)
    T.assert_close(y, x * 2 + 0.25, 1e-14)
    local out = qlua.zeros(5, 7, { dtype = "float64" }):gpu()
    local back = scale(x, 3, 1, out)
    T.assert_close(out, x * 3 + 1, 1e-14)
    T.assert_close(back, out, 0)
    local row = qlua.randn(7):gpu()
    local col = qlua.randn(4, 1):gpu()
    local add = qlua.elementwise("T a, T b", "T c", "c = a + b")
    T.assert_close(add(row, col), row + col, 1e-6)
    local idx = qlua.elementwise("T x", "long long_out", "long_out = i + n * 0")
    assert_error("type", idx, row)
    local iota = qlua.elementwise("T x", "int64 o", "o = i + n")
    local v = values(iota(qlua.zeros(2, 3):gpu()))
    for k = 1, 6 do assert.equal(k - 1 + 6, v[k]) end
  end)

  gtest("names its errors", function()
    local add = qlua.elementwise("T a, T b", "T c", "c = a + b", "adder")
    assert_error("adder.*float32 for 'a' but float64 for 'b'", add, qlua.rand(3):gpu(), qlua.rand(3, { dtype = "float64" }):gpu())
    assert_error("does not broadcast", add, qlua.rand(3):gpu(), qlua.rand(4):gpu())
    assert_error("tensors on", add, qlua.rand(3):gpu(), qlua.rand(3))
    assert_error("no tensor", add, 1, 2)
    assert_error("output 'c' has shape", add, qlua.rand(3):gpu(), qlua.rand(3):gpu(), qlua.rand(4):gpu())
    assert_error("expanded view", add, qlua.rand(3):gpu(), qlua.rand(3):gpu(), qlua.rand(1):gpu():expand(3))
    local bad = qlua.elementwise("T a", "T c", "c = a +* 2", "badbody")
    assert_error("compile error", bad, qlua.rand(3):gpu())
  end)
end)

describe("qlua.reduction", function()
  local sumsq = qlua.reduction{ in_params = "T x", out_params = "T y", map_expr = "x * x",
                                reduce_expr = "a + b", identity = "0", name = "sumsq",
                                reduce_type = "float64" }
  for _, dtype in ipairs(T.float_dtypes) do
    for _, layout in ipairs(T.layouts) do
      gtest("sums squares of " .. layout .. " " .. dtype .. " tensors, over all and along dims", function()
        local xs = T.random_table({ 33, 70 }, dtype)
        local x = T.make(xs, dtype, layout, "gpu")
        local flat = T.flatten(x:cpu():totable())
        local want = 0
        for _, v in ipairs(flat) do want = want + v * v end
        T.assert_close(sumsq(x):item(), want, 1e-6)
        for dim = 1, 2 do
          local got = sumsq(x, { dim = dim })
          T.assert_close(got, (x:to("float64") * x:to("float64")):sum(dim):to(dtype), 1e-6, "dim " .. dim)
        end
      end)
    end
  end

  for _, dtype in ipairs(T.half_dtypes) do
    gtest("reduces " .. dtype .. " in float32 partials (or the reduce_type), the result rounded once", function()
      -- magnitudes from 0.25: every sum of squares below is exact in float64
      local x = T.make(T.random_table({ 33, 70 }, "float64", { lo = 0.25, hi = 3 }), dtype,
                       "transposed", "gpu")
      local wide = x:double()
      local plain = qlua.reduction{ in_params = "T x", out_params = "T y", map_expr = "x * x",
                                    reduce_expr = "a + b", identity = "0", name = "sumsq16" }
      local tol = dtype == "float16" and 2e-3 or 1e-2
      T.assert_close(plain(x):float():item(), (wide * wide):sum(), tol, "over everything")
      for dim = 1, 2 do
        local got = plain(x, { dim = dim })
        assert.equal(dtype, got:dtype())
        T.assert_close(got:float(), (wide * wide):sum(dim):to(dtype):float(), tol, "dim " .. dim)
        local exact = sumsq(x, { dim = dim })  -- float64 partials: the sums are exact here
        T.assert_equal(exact, (wide * wide):sum(dim):to("float32"):to(dtype), "float64 partials, dim " .. dim)
      end
    end)
  end

  gtest("max with a post-map, large inputs, empty rows, integer inputs", function()
    local absmax = qlua.reduction{ in_params = "T x", out_params = "T y", map_expr = "x < 0 ? -x : x",
                                   reduce_expr = "a > b ? a : b", identity = "0",
                                   post_map_expr = "y = a * 10" }
    local x = qlua.randn(1 << 22):gpu()
    T.assert_close(absmax(x):item(), x:abs():max() * 10, 1e-6)
    local ints = qlua.randint(-50, 50, 1000, 30, { dtype = "int32" }):gpu()
    T.assert_equal(absmax(ints, { dim = 1 }), ints:abs():max(1) * 10)
    local empty = qlua.zeros(4, 0):gpu()
    T.assert_equal(absmax(empty, { dim = 2 }), qlua.zeros(4):gpu())
    assert_error("dim 3 out of range", absmax, x:view(1024, 4096), { dim = 3 })
  end)
end)

describe("qlua.module", function()
  local NVCC = (os.getenv("CUDA_HOME") or "/usr/local/cuda") .. "/bin/nvcc"
  local SRC = [[
    extern "C" __global__ void scale_c(float *x, float a, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x;
      if (i < n) x[i] *= a;
    }
    __global__ void gather_cpp(float *out, const float *src, const int *index, long n) {
      long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
      if (i < n) out[i] = src[index[i] - 1];
    }]]

  for _, format in ipairs({ "ptx", "cubin", "fatbin" }) do
    gtest("loads " .. format .. " from a path and from bytes, with signatures", function()
      if not P.have(NVCC) and not P.have("nvcc") then pending("no nvcc to make the " .. format) return end
      local dir = P.tempdir()
      local cu = P.write(dir .. "/m.cu", SRC)
      local image = dir .. "/m." .. format
      local r = P.run({ P.have(NVCC) and NVCC or "nvcc", "-" .. format, "-arch=sm_90", cu, "-o", image }, { timeout = 120 })
      assert.equal(0, r.status, r.stderr)
      for _, from in ipairs({ image, P.read(image) }) do
        local m = qlua.module(from, { signatures = { scale_c = "float *x, float a, int n" } })
        local names = m:kernels()
        assert.equal(2, #names)
        local x = qlua.range(1, 100):to("float32"):gpu()
        m.scale_c(1, 128, x, 2.0, 100)
        assert.equal(2 * 5050, x:sum())
        -- the C++ kernel's types come from its mangled name
        local g = m:kernel("_Z10gather_cppPfPKfPKil")
        assert.equal("float *, const float *, const int *, long", g:signature())
        local src = qlua.randn(50):gpu()
        local idx = qlua.randint(1, 50, 20, { dtype = "int32" }):gpu()
        local out = qlua.zeros(20):gpu()
        g(1, 32, out, src, idx, 20)
        T.assert_equal(out, src:index_select(1, idx))
      end
      assert_error("no kernel 'nope'", function() return qlua.module(image):kernel("nope") end)
    end)
  end

  gtest("refuses bad images with a clear error", function()
    assert_error("module", function() return qlua.module(".version 9.0\n.target sm_90\ngarbage"):kernels() end)
    assert_error("cannot open", qlua.module, "/nonexistent/m.cubin")
  end)
end)
