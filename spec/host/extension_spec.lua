--[[
C extensions (the C path; docs/API.md "C extensions", runtime/qlua.h).

Two modules are loaded into the qlua running this spec, as a user's script loads one:

  * a test module of the C API, written below (CAPI_SOURCE), built here with cc (and
    once more with c++, which checks that qlua.h is usable from C++): qlua_data and the
    geometry on CPU tensors and views, qlua_newtensor, qlua_error, qlua_checkgpu,
    qlua_cuda_stream (an error on the CPU), qlua_setfuncs' held operands; with a GPU,
    the same on GPU tensors and the stream itself.
  * samples/extension/'s gather_ext.so, `make extension`'s module, which runs its own
    CUDA kernel on qlua's stream: $BUILD/extension/gather_ext.so next to the qlua under
    test, built with `make BUILD=$BUILD extension` when it is missing (CUDA=0 when that
    build has no CUDA objects: a CPU-only build leaves these tests pending). Its argument
    checks run without a GPU; on a GPU it is run against a plain-Lua gather (int32 and
    int64 indices, float32/float64 and integer sources, views), its index errors are
    checked (a Lua error, and the process and the GPU carry on), and
    samples/extension/gather.lua is run.

Pending, with the reason: the C API tests without a C compiler; the extension's tests
when it cannot be built (no nvcc, or a CPU-only qlua); its GPU tests without a GPU.
]]

local T, qlua, test = require("qlua.testing").spec(_ENV)
local P = require("spec.helpers.process")

local QLUA = P.qlua()
local BUILD = QLUA:match("^(.*)/[^/]*$") or "."
local HAS_GPU, NO_GPU_REASON = T.gpu_status()
local GPU = "gpu:0"

local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- A test that needs a GPU; without one it is reported as pending.
local function gtest(name, fn)
  if HAS_GPU then test(name, fn)
  else it(name, function() pending("no GPU: " .. tostring(NO_GPU_REASON)) end) end
end

-- The message of the error fn raises (T.error_of), which must be exactly `expected`.
local function assert_error_is(expected, fn, ...)
  assert.are.equal(expected, T.error_of(fn, ...))
end

-- Lua's include flags, as the Makefile finds them.
local function lua_cflags()
  local r = P.run({ "pkg-config", "--cflags", "lua5.4" })
  local flags = {}
  if r.status == 0 then
    for word in r.stdout:gmatch("%S+") do flags[#flags + 1] = word end
  end
  if #flags == 0 then flags[1] = "-I/usr/include/lua5.4" end
  return flags
end

------------------------------------------------------------------------ the C API test module

local CAPI_SOURCE = [==[
/* The C API test module of spec/host/extension_spec.lua; valid C11 and C++. */
#include <stdint.h>
#include <string.h>

#include "qlua.h"

/* Where element k (row-major) of t is, in elements from qlua_data(t). */
static int64_t at(const qt_tensor *t, int64_t k) {
  int64_t off = 0;
  for (int d = t->ndim - 1; d >= 0; d--) {
    off += (k % t->size[d]) * t->stride[d];
    k /= t->size[d];
  }
  return off;
}

static void push_element(lua_State *L, qt_dtype dtype, const void *base, int64_t off) {
  switch (dtype) {
    case QT_F32: lua_pushnumber(L, ((const float *)base)[off]); break;
    case QT_F64: lua_pushnumber(L, ((const double *)base)[off]); break;
    case QT_I32: lua_pushinteger(L, ((const int32_t *)base)[off]); break;
    case QT_I64: lua_pushinteger(L, ((const int64_t *)base)[off]); break;
    default: lua_pushnil(L);
  }
}

/* read(t): a CPU tensor's elements in row-major order, through qlua_data and the strides */
static int c_read(lua_State *L) {
  qt_tensor *t = qlua_checktensor(L, 1);
  if (qlua_gpu_index(t) >= 0) return qlua_error(L, "read", "needs a CPU tensor");
  const void *base = qlua_data(t);
  int64_t n = qt_numel(t);
  lua_createtable(L, (int)n, 0);
  for (int64_t k = 0; k < n; k++) {
    push_element(L, t->dtype, base, at(t, k));
    lua_rawseti(L, -2, (lua_Integer)k + 1);
  }
  return 1;
}

static void set_list(lua_State *L, const char *field, int n, const int64_t *v) {
  lua_createtable(L, n, 0);
  for (int d = 0; d < n; d++) {
    lua_pushinteger(L, (lua_Integer)v[d]);
    lua_rawseti(L, -2, d + 1);
  }
  lua_setfield(L, -2, field);
}

/* info(t): what a C extension sees of t */
static int c_info(lua_State *L) {
  qt_tensor *t = qlua_checktensor(L, 1);
  lua_createtable(L, 0, 8);
  lua_pushstring(L, qt_dtypes[t->dtype].name);
  lua_setfield(L, -2, "dtype");
  lua_pushinteger(L, t->ndim);
  lua_setfield(L, -2, "ndim");
  set_list(L, "size", t->ndim, t->size);
  set_list(L, "stride", t->ndim, t->stride);
  lua_pushinteger(L, (lua_Integer)t->offset);
  lua_setfield(L, -2, "offset");
  lua_pushinteger(L, qlua_gpu_index(t));
  lua_setfield(L, -2, "gpu");
  lua_pushboolean(L, qlua_data(t) != NULL);
  lua_setfield(L, -2, "data");
  lua_pushboolean(L, qt_is_contiguous(t));
  lua_setfield(L, -2, "contiguous");
  return 1;
}

/* new(dtype, shape [, like]): qlua_newtensor; a CPU result is filled with 1, 2, 3 ... */
static int c_new(lua_State *L) {
  int dtype = qt_dtype_from_name(luaL_checkstring(L, 1));
  if (dtype < 0) return qlua_error(L, "new", "unknown dtype %s", lua_tostring(L, 1));
  luaL_checktype(L, 2, LUA_TTABLE);
  int ndim = (int)lua_rawlen(L, 2);
  if (ndim > QT_MAXDIM) return qlua_error(L, "new", "%d dims", ndim);
  int64_t size[QT_MAXDIM];
  for (int d = 0; d < ndim; d++) {
    lua_rawgeti(L, 2, d + 1);
    size[d] = (int64_t)lua_tointeger(L, -1);
    lua_pop(L, 1);
  }
  const qt_tensor *like = lua_isnoneornil(L, 3) ? NULL : qlua_checktensor(L, 3);
  qt_tensor *t = qlua_newtensor(L, (qt_dtype)dtype, ndim, size, like, "new");
  if (qlua_gpu_index(t) < 0) {
    int64_t n = qt_numel(t);
    void *base = qlua_data(t);
    for (int64_t k = 0; k < n; k++) {
      switch (t->dtype) {
        case QT_F32: ((float *)base)[k] = (float)(k + 1); break;
        case QT_F64: ((double *)base)[k] = (double)(k + 1); break;
        case QT_I32: ((int32_t *)base)[k] = (int32_t)(k + 1); break;
        case QT_I64: ((int64_t *)base)[k] = k + 1; break;
        default: break;
      }
    }
  }
  return 1;
}

/* new_raw(dtype number, ndim [, op [, no_sizes]]): arguments passed as they are */
static int c_new_raw(lua_State *L) {
  int64_t size[QT_MAXDIM + 8];
  for (int d = 0; d < QT_MAXDIM + 8; d++) size[d] = 2;
  if (lua_toboolean(L, 5)) size[0] = (int64_t)1 << 62;
  qlua_newtensor(L, (qt_dtype)luaL_checkinteger(L, 1), (int)luaL_checkinteger(L, 2),
                 lua_toboolean(L, 4) ? NULL : size, NULL, luaL_optstring(L, 3, NULL));
  return 1;
}

/* err(op or nil, text) */
static int c_err(lua_State *L) {
  const char *op = luaL_optstring(L, 1, NULL);
  return qlua_error(L, op, "%s (%d, %lld, %.2f)", luaL_checkstring(L, 2), 42,
                    (long long)1 << 40, 0.5);
}

/* stream(t [, op]): the stream as a light userdata */
static int c_stream(lua_State *L) {
  void *stream = qlua_cuda_stream(L, qlua_checktensor(L, 1), luaL_optstring(L, 2, NULL));
  lua_pushlightuserdata(L, stream);
  return 1;
}

/* checkgpu(x [, dtype]) */
static int c_checkgpu(lua_State *L) {
  int dtype = lua_isnoneornil(L, 2) ? QLUA_ANY_DTYPE : qt_dtype_from_name(lua_tostring(L, 2));
  qt_tensor *t = qlua_checkgpu(L, 1, dtype, "checkgpu");
  lua_pushboolean(L, t != NULL);
  return 1;
}

/* hold(t, fn): calls fn(), then says whether t still has its data */
static int c_hold(lua_State *L) {
  qt_tensor *t = qlua_checktensor(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_pushvalue(L, 2);
  lua_call(L, 0, 0);
  lua_pushboolean(L, qlua_data(t) != NULL);
  return 1;
}

#define FUNCS                                                                      \
  { "read", c_read }, { "info", c_info }, { "new", c_new }, { "new_raw", c_new_raw }, \
  { "err", c_err }, { "stream", c_stream }, { "checkgpu", c_checkgpu }, { "hold", c_hold }

static const luaL_Reg counted[] = { FUNCS, { "placeholder", NULL }, { NULL, NULL } };
static const luaL_Reg plain[] = { FUNCS, { NULL, NULL } };

#ifdef __cplusplus
extern "C"
#endif
int luaopen_capi_test(lua_State *L) {
  lua_createtable(L, 0, 2);
  lua_newtable(L);
  qlua_setfuncs(L, counted);  /* as an extension registers its functions */
  lua_setfield(L, -2, "counted");
  lua_newtable(L);
  luaL_setfuncs(L, plain, 0);  /* any other C function */
  lua_setfield(L, -2, "plain");
  return 1;
}
]==]

-- Builds the test module with compiler (C or C++) and loads it; nil and why not.
local function build_capi(compiler, lang)
  if not P.have(compiler) then return nil, "no " .. compiler end
  local dir = P.tempdir()
  local source = P.write(dir .. "/capi_test." .. (lang == "c++" and "cc" or "c"), CAPI_SOURCE)
  local so = dir .. "/capi_test.so"
  local argv = { compiler, lang == "c++" and "-std=c++17" or "-std=c11", "-shared", "-fPIC",
                 "-O1", "-Wall", "-Wextra", "-Iruntime" }
  for _, flag in ipairs(lua_cflags()) do argv[#argv + 1] = flag end
  for _, arg in ipairs({ "-o", so, source }) do argv[#argv + 1] = arg end
  local r = P.run(argv, { timeout = 120 })
  assert(r.status == 0, lang .. ": building the C API test module failed:\n" .. r.stdout .. r.stderr)
  assert(r.stderr == "", lang .. ": the C API test module built with warnings:\n" .. r.stderr)
  local open, err = package.loadlib(so, "luaopen_capi_test")
  assert(open, "loading " .. so .. ": " .. tostring(err))
  return open()
end

local C, C_WHY = build_capi(P.have("cc") and "cc" or "gcc", "c")
local CXX, CXX_WHY = build_capi(P.have("c++") and "c++" or "g++", "c++")

-- A test of the C API module; pending without a compiler.
local function ctest(name, fn)
  if C then test(name, function() fn(C) end)
  else it(name, function() pending(C_WHY) end) end
end

describe("the C API for extensions (qlua.h), on the CPU", function()
  ctest("qlua_data, the dtype, shape and strides read every element of tensors and views", function(m)
    for _, dtype in ipairs(T.dtypes) do
      local values = T.random_table({ 3, 4 }, dtype)
      for _, layout in ipairs(T.layouts) do
        local t = T.make(values, dtype, layout)
        for _, api in ipairs({ m.counted, m.plain }) do
          local info = api.info(t)
          assert.are.equal(dtype, info.dtype)
          assert.are.equal(2, info.ndim)
          assert.are.same(t:shape(), info.size)
          assert.are.same(t:stride(), info.stride)
          assert.are.equal(-1, info.gpu)
          assert.is_true(info.data)
          assert.are.equal(t:is_contiguous(), info.contiguous)
          T.assert_equal(api.read(t), T.flatten(values), dtype .. " " .. layout)
        end
      end
    end
    -- a view's element 0 is its own: offset elements into the storage
    local base = qlua.range(1, 12):view(3, 4)
    local view = base:narrow(1, 2, 2):narrow(2, 3, 2)
    assert.are.equal(6, m.counted.info(view).offset)
    assert.are.same({ 7, 8, 11, 12 }, m.counted.read(view))
    assert.are.same({ 5, 9 }, m.counted.read(base:select(2, 1):narrow(1, 2, 2)))
    assert.are.same({ 42 }, m.counted.read(qlua.tensor(42)))     -- 0-d
  end)

  ctest("qlua_data is NULL for a freed tensor; qlua_gpu_index stays -1", function(m)
    local t = qlua.ones(4)
    local v = t:narrow(1, 2, 2)
    t:free()
    local info = m.counted.info(v)
    assert.is_false(info.data)
    assert.are.equal(-1, info.gpu)
  end)

  ctest("qlua_newtensor: contiguous, of the dtype and shape, on the CPU, qlua's memory", function(m)
    for _, api in ipairs({ m.counted, m.plain }) do
      for _, dtype in ipairs(T.dtypes) do
        local t = api.new(dtype, { 2, 3 })
        assert.is_true(qlua.is_tensor(t))
        assert.are.equal(dtype, t:dtype())
        assert.are.equal("cpu", t:device())
        assert.are.same({ 2, 3 }, t:shape())
        assert.is_true(t:is_contiguous())
        T.assert_equal(t, { { 1, 2, 3 }, { 4, 5, 6 } }, dtype)
        -- a result like any other: ops, views, free
        T.assert_equal(t:t():contiguous(), { { 1, 4 }, { 2, 5 }, { 3, 6 } })
        assert.are.equal(21, t:sum())
        t:free()
        assert.matches("tensor has been freed", T.error_of(function() return t:sum() end), 1, true)
      end
      -- on the device of `like` (a CPU tensor here); empty and 0-d shapes
      local like = qlua.zeros(1, { dtype = "int32" })
      local t = api.new("float64", { 5 }, like)
      assert.are.equal("cpu", t:device())
      assert.are.equal("float64", t:dtype())
      assert.are.same({ 0, 3 }, api.new("float32", { 0, 3 }):shape())
      assert.are.equal(1, api.new("int64", {}):item())
    end
    -- the CPU allocator counts its bytes: freeing the result gives them back
    local big = m.counted.new("float64", { 1000, 100 })
    local held = qlua.memory("cpu").allocated
    big:free()
    assert.is_true(held - qlua.memory("cpu").allocated >= 800000)
  end)

  ctest("qlua_newtensor errors name the op (the core's 'empty' without one)", function(m)
    for _, api in ipairs({ m.counted, m.plain }) do
      assert_error_is("new: unknown dtype 99", api.new_raw, 99, 1, "new")
      assert_error_is("empty: unknown dtype 99", api.new_raw, 99, 1)
      assert_error_is("new: 17 dimensions (at most 16)", api.new_raw, 0, 17, "new")
      assert_error_is("new: -1 dimensions (at most 16)", api.new_raw, 0, -1, "new")
      assert_error_is("new: no sizes given for 2 dimensions", api.new_raw, 0, 2, "new", true)
      assert.matches("^new: shape 4611686018427387904x2 is too large",
        T.error_of(api.new_raw, 0, 2, "new", false, true))
      assert.are.same({}, api.new_raw(0, 0, "new", true):shape())   -- 0-d: no sizes needed
      local freed = qlua.ones(2)
      local view = freed:narrow(1, 1, 1)
      freed:free()
      assert_error_is("new: tensor has been freed", api.new, "float32", { 2 }, freed)
      assert.are.equal("cpu", api.new("float32", { 2 }, view):device())  -- a view keeps its device
    end
  end)

  ctest("qlua_error: '<op>: <printf message>', or the message alone", function(m)
    for _, api in ipairs({ m.counted, m.plain }) do
      assert_error_is("gather: bad thing (42, 1099511627776, 0.50)", api.err, "gather", "bad thing")
      assert_error_is("no op (42, 1099511627776, 0.50)", api.err, nil, "no op")
      local long = T.error_of(api.err, "op", string.rep("x", 1000))
      assert.are.equal(319, #long)               -- QT_ERRLEN - 1 in all
      assert.are.equal("op: xxx", long:sub(1, 7))
    end
  end)

  ctest("qlua_cuda_stream on a CPU tensor is an error naming the op", function(m)
    for _, api in ipairs({ m.counted, m.plain }) do
      assert_error_is("gather: cpu has no stream (only GPUs do)", api.stream, qlua.ones(2), "gather")
      assert_error_is("stream: cpu has no stream (only GPUs do)", api.stream, qlua.ones(2))
    end
  end)

  ctest("qlua_checkgpu refuses what is not a live GPU tensor of the dtype", function(m)
    for _, api in ipairs({ m.counted, m.plain }) do
      assert_error_is("checkgpu: argument #1 must be a tensor, got number", api.checkgpu, 42)
      assert_error_is("checkgpu: argument #1 must be a tensor, got no value", api.checkgpu)
      assert_error_is("checkgpu: argument #1 is on cpu, expected a GPU tensor",
        api.checkgpu, qlua.ones(2))
      assert_error_is("checkgpu: argument #1 is on cpu, expected a GPU tensor",
        api.checkgpu, qlua.ones(2), "float32")
      local t = qlua.ones(2)
      t:free()
      assert_error_is("checkgpu: tensor has been freed", api.checkgpu, t)
    end
  end)

  ctest("qlua_setfuncs: operands are held while the function runs; false for a NULL", function(m)
    assert.is_false(m.counted.placeholder)
    -- registered with qlua_setfuncs: t:free() from inside the call waits for it to return
    local t = qlua.ones(1000)
    assert.is_true(m.counted.hold(t, function() t:free() end))
    local _ = qlua.empty(1)                       -- the next call carries the release out
    assert.matches("tensor has been freed", T.error_of(function() return t:sum() end), 1, true)
    -- a plain C function has no such protection
    local u = qlua.ones(1000)
    assert.is_false(m.plain.hold(u, function() u:free() end))
    -- a function that raised left nothing behind: calls and releases work as before
    for _ = 1, 100 do pcall(m.counted.err, "x", "y") end
    local w = qlua.ones(10)
    w:free()
    assert.matches("tensor has been freed", T.error_of(function() return w:sum() end), 1, true)
    collectgarbage()
    assert.are.equal(10, qlua.ones(10):sum())
  end)

  it("qlua.h builds and works from C++ too", function()
    if not CXX then pending(CXX_WHY); return end
    assert_error_is("gather: from c++ (42, 1099511627776, 0.50)", CXX.counted.err, "gather", "from c++")
    T.assert_equal(CXX.counted.new("int32", { 3 }), { 1, 2, 3 })
    assert_error_is("x: cpu has no stream (only GPUs do)", CXX.plain.stream, qlua.ones(1), "x")
  end)

  describe("on a GPU", function()
    gtest("qlua_gpu_index, qlua_data, qlua_newtensor and the stream of GPU tensors", function()
      if not C then pending(C_WHY); return end
      local g = qlua.ones(3, 4, { device = "gpu" })
      local info = C.counted.info(g:t())
      assert.are.equal(0, info.gpu)
      assert.is_true(info.data)
      assert.are.same({ 4, 3 }, info.size)
      assert.are.same({ 1, 4 }, info.stride)
      for _, api in ipairs({ C.counted, C.plain }) do
        local s = api.stream(g, "x")
        assert.are.equal("userdata", type(s))
        assert.are.equal(s, api.stream(qlua.zeros(1, { device = "gpu", dtype = "int64" })))
        local t = api.new("float64", { 2, 5 }, g)
        assert.are.equal(GPU, t:device())
        assert.are.equal("float64", t:dtype())
        assert.is_true(t:is_contiguous())
        t:fill_(3)
        assert.are.equal(30, t:sum())
        assert.is_true(api.checkgpu(g, "float32"))
        assert.is_true(api.checkgpu(g))
        assert_error_is("checkgpu: argument #1 is float32, expected int64", api.checkgpu, g, "int64")
      end
    end)
  end)
end)

------------------------------------------------------------------------ samples/extension

local EXT_DIR = BUILD .. "/extension"
local EXT_SO = EXT_DIR .. "/gather_ext.so"

-- The extension module, built when missing; nil and why not.
local function load_extension()
  if not exists(EXT_SO) then
    if not P.have("make") then return nil, "no make to build " .. EXT_SO end
    -- CUDA only if the qlua under test was built with it (a CPU-only build: pending)
    local cuda = exists(BUILD .. "/obj/kernels/cuda_device.o") and "1" or "0"
    local r = P.run({ "make", "--no-print-directory", "-s", "BUILD=" .. BUILD, "CUDA=" .. cuda,
                      "extension" }, { timeout = 600 })
    assert(r.status == 0, "make extension failed:\n" .. r.stdout .. r.stderr)
    if not exists(EXT_SO) then
      return nil, "make extension built nothing: " .. (r.stdout .. r.stderr):gsub("%s+$", "")
    end
  end
  local saved = package.cpath
  package.cpath = EXT_DIR .. "/?.so;" .. package.cpath
  local ok, ext = pcall(require, "gather_ext")
  package.cpath = saved
  assert(ok, "require 'gather_ext' failed: " .. tostring(ext))
  return ext
end

local EXT, EXT_WHY = load_extension()

local function etest(name, fn)
  if EXT then test(name, function() fn(EXT) end)
  else it(name, function() pending(EXT_WHY) end) end
end

-- Needs the extension and a GPU.
local function egtest(name, fn)
  if not EXT then it(name, function() pending(EXT_WHY) end)
  else gtest(name, function() fn(EXT) end) end
end

local function gpu(x, dtype) return qlua.tensor(x, { dtype = dtype, device = "gpu" }) end

describe("samples/extension: gather_ext, a C extension with its own CUDA kernel", function()
  etest("loads with require and refuses what is not a GPU tensor, naming gather", function(ext)
    assert.are.equal("function", type(ext.gather))
    assert_error_is("gather: argument #1 is on cpu, expected a GPU tensor",
      ext.gather, qlua.ones(4), qlua.tensor({ 1 }))
    assert_error_is("gather: argument #1 must be a tensor, got table", ext.gather, { 1, 2 }, { 1 })
    if HAS_GPU then
      assert_error_is("gather: argument #2 must be a tensor, got no value", ext.gather,
        qlua.ones(2, { device = "gpu" }))
    end
    assert_error_is("gather: takes 2 arguments (src, index), got 3", ext.gather, 1, 2, 3)
    local t = qlua.ones(2)
    t:free()
    assert_error_is("gather: tensor has been freed", ext.gather, t, t)
  end)

  egtest("matches a plain-Lua gather: float32/float64/int sources, int32/int64 indices, views", function(ext)
    for _, dtype in ipairs(T.dtypes) do
      for _, itype in ipairs({ "int32", "int64" }) do
        local n, k = 37, 53
        local values = T.random_list(n, dtype)
        local index = T.random_index({ k }, n)
        index[1], index[k] = 1, n                      -- both ends
        local expected = T.ref.gather(values, 1, index)
        for _, layout in ipairs(T.layouts) do
          local src = T.make(values, dtype, layout, "gpu")
          local idx = T.make(index, itype, layout == "contiguous" and "stepped" or "contiguous", "gpu")
          local what = ("%s src (%s), %s index"):format(dtype, layout, itype)
          local out = ext.gather(src, idx)
          assert.are.equal(GPU, out:device(), what)
          assert.are.equal(dtype, out:dtype(), what)
          assert.are.same({ k }, out:shape(), what)
          assert.is_true(out:is_contiguous(), what)
          T.assert_equal(out:cpu(), expected, what)
          T.assert_equal(out, src:gather(idx), what .. " vs gather")
          T.assert_equal(out, src:index_select(1, idx), what .. " vs index_select")
        end
      end
    end
  end)

  egtest("a large gather matches the built-in one; empty index and source", function(ext)
    local src = qlua.rand(1 << 20, { device = "gpu" })
    for _, itype in ipairs({ "int32", "int64" }) do
      local idx = qlua.randint(1, 1 << 20, 300000, { dtype = itype, device = "gpu" })
      assert.are.equal(0, (ext.gather(src, idx) - src:gather(idx)):abs():max())
    end
    local empty = ext.gather(src, qlua.empty(0, { dtype = "int64", device = "gpu" }))
    assert.are.same({ 0 }, empty:shape())
    assert.are.same({ 0 }, ext.gather(qlua.empty(0, { device = "gpu" }),
      qlua.empty(0, { dtype = "int32", device = "gpu" })):shape())
  end)

  egtest("runs in order with qlua's ops on qlua's stream, no sync between", function(ext)
    local a = qlua.rand(100000, { device = "gpu" })
    local idx = qlua.randint(1, 100000, 50000, { dtype = "int32", device = "gpu" })
    local expected = (a * 3 + 1):gather(idx):cpu()
    for _ = 1, 5 do
      local out = ext.gather(a * 3 + 1, idx) + 0      -- made just before, read just after
      T.assert_equal(out:cpu(), expected)
    end
    -- inputs dropped at once: their memory goes only to work queued after the kernel
    local src = a * 3 + 1
    local out = ext.gather(src, idx)
    src:free()
    local _ = qlua.full({ 100000 }, -1, { device = "gpu" })
    T.assert_equal(out:cpu(), expected)
  end)

  egtest("bad input is a Lua error naming gather and the values; the process carries on", function(ext)
    local src = gpu({ 10, 20, 30, 40, 50 }, "float32")
    for _, itype in ipairs({ "int32", "int64" }) do
      assert_error_is("gather: index 0 out of range (1..5) at position 3",
        ext.gather, src, gpu({ 1, 2, 0, 9 }, itype))
      assert_error_is("gather: index 6 out of range (1..5) at position 2",
        ext.gather, src, gpu({ 5, 6 }, itype))
      assert_error_is("gather: index -1 out of range (1..5) at position 1",
        ext.gather, src, gpu({ -1, 7, 0 }, itype))
      assert_error_is("gather: index 1 out of range (1..0) at position 1",
        ext.gather, qlua.empty(0, { device = "gpu" }), gpu({ 1 }, itype))
      -- on a strided index too (position in index order)
      assert_error_is("gather: index 9 out of range (1..5) at position 2",
        ext.gather, src, gpu({ 1, 2, 9, 4 }, itype):view(2, 2):select(2, 1))
      -- the GPU and the module carry on
      T.assert_equal(ext.gather(src, gpu({ 5, 1 }, itype)), { 50, 10 })
    end
    assert_error_is("gather: index 1099511627776 out of range (1..5) at position 1",
      ext.gather, src, gpu({ 1 << 40 }, "int64"))
    assert_error_is("gather: index must be int32 or int64, got float32",
      ext.gather, src, gpu({ 1 }, "float32"))
    assert_error_is("gather: argument #2 is on cpu, expected a GPU tensor",
      ext.gather, src, qlua.tensor({ 1 }))
    assert_error_is("gather: src must be 1-D, got 2-D (2x3)",
      ext.gather, qlua.ones(2, 3, { device = "gpu" }), gpu({ 1 }, "int64"))
    assert_error_is("gather: index must be 1-D, got 2-D (1x1)",
      ext.gather, src, gpu({ { 1 } }, "int64"))
    qlua.sync()                                        -- nothing left over for qlua
    T.assert_equal(src:gather(gpu({ 3 }, "int64")), { 30 })
    assert.are.equal(150, src:sum())
  end)

  egtest("samples/extension/gather.lua runs against the built-in gather", function()
    local r = P.run({ QLUA, "samples/extension/gather.lua", EXT_DIR, "100000", "5000" },
                    { timeout = 120 })
    assert(r.status == 0, "gather.lua failed:\n" .. r.stdout .. r.stderr)
    assert.are.equal("", r.stderr)
    assert.truthy(r.stdout:find("gather_ext done", 1, true), r.stdout)
  end)
end)

teardown(function() P.cleanup() end)
