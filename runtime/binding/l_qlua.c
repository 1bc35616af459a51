/*
** l_qlua.c — the qlua module: the module functions (creation, joining, random numbers, devices,
** memory, files, clock) and luaopen_qlua, which builds the state (l_state.c), the
** tensor metatable (l_tensor.c) and the module table.
*/
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L  /* clock_gettime, when built outside the Makefile */
#endif
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lqlua.h"
#include "core/format/npy.h"
#include "core/format/safetensors.h"

/* ================================================================ creation */

/* opts with defaults: float32 on the cpu unless the caller set *dtype / *dev first. */
static void q_opts(lua_State *L, int arg, const char *op, qt_dtype *dtype, qt_device **dev) {
  lq_checkopts(L, arg, op, dtype, dev);
  if (*dev == NULL) *dev = qt_cpu_device();
}

static int q_tensor(lua_State *L) {
  qt_dtype dtype = QT_NDTYPES;  /* not given: inferred */
  qt_device *dev = NULL;
  if (lua_type(L, 1) != LUA_TTABLE && lua_type(L, 1) != LUA_TNUMBER &&
      lua_type(L, 1) != LUA_TBOOLEAN)
    luaL_typeerror(L, 1, "table, number or boolean");
  q_opts(L, 2, "tensor", &dtype, &dev);
  lq_fromtable(L, 1, "tensor", dtype == QT_NDTYPES ? -1 : (int)dtype, dev, false);
  return 1;
}

/* empty/zeros/ones: shape then opts; fill_value NULL leaves the memory as it is. */
static int q_create(lua_State *L, const char *op, const qt_scalar *fill_value) {
  qt_ctx *ctx = lq_ctx(L);
  int ndim;
  int64_t size[QT_MAXDIM];
  int next = lq_checkshape(L, 1, op, 0, &ndim, size);
  lq_checkend(L, next + 1, op, false);
  qt_dtype dtype = QT_F32;
  qt_device *dev = NULL;
  q_opts(L, next, op, &dtype, &dev);
  qt_tensor *t = lq_newtensor(L);
  if (qt_empty(ctx, t, dev, dtype, ndim, size) != 0) return lq_raise_as(L, ctx, "empty", op);
  if (fill_value != NULL && qt_fill_(ctx, t, *fill_value) != 0)
    return lq_raise_as(L, ctx, "fill_", op);
  return 1;
}

static int q_empty(lua_State *L) { return q_create(L, "empty", NULL); }

static int q_zeros(lua_State *L) {
  qt_scalar zero = qt_scalar_i(0);
  return q_create(L, "zeros", &zero);
}

static int q_ones(lua_State *L) {
  qt_scalar one = qt_scalar_i(1);
  return q_create(L, "ones", &one);
}

/* full(shape, value [, opts]): the shape is one table or one number here. float32
** unless opts.dtype says otherwise, like the other creation functions. */
static int q_full(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  int ndim;
  int64_t size[QT_MAXDIM];
  lq_checkshape(L, 1, "full", LQ_SHAPE_ONE, &ndim, size);
  if (lua_type(L, 2) != LUA_TBOOLEAN) luaL_checktype(L, 2, LUA_TNUMBER);
  qt_dtype dtype = QT_F32;
  qt_device *dev = NULL;
  q_opts(L, 3, "full", &dtype, &dev);
  qt_scalar value = lq_checkstorable(L, 2, "full", dtype);
  qt_tensor *t = lq_newtensor(L);
  if (qt_empty(ctx, t, dev, dtype, ndim, size) != 0) return lq_raise_as(L, ctx, "empty", "full");
  if (qt_fill_(ctx, t, value) != 0) return lq_raise_as(L, ctx, "fill_", "full");
  return 1;
}

/* range(first, last [, step] [, opts]): inclusive, exactly the values of Lua 5.4's
** `for i = first, last, step` (qt_range in the core says how). int64 when all three are
** Lua integers, else float32, unless opts.dtype says. */
static int q_range(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  luaL_checktype(L, 1, LUA_TNUMBER);
  luaL_checktype(L, 2, LUA_TNUMBER);
  int opts_arg = 3;
  bool has_step = lua_type(L, 3) == LUA_TNUMBER;
  if (has_step) opts_arg = 4;
  else if (!lua_isnoneornil(L, 3) && lua_type(L, 3) != LUA_TTABLE)
    luaL_typeerror(L, 3, "number or table");
  qt_scalar arg[3];
  bool is_float[3];
  for (int a = 0; a < 3; a++) {
    if (a == 2 && !has_step) {
      arg[a] = qt_scalar_i(1);
      is_float[a] = false;
    } else if (lua_isinteger(L, a + 1)) {
      arg[a] = qt_scalar_i((int64_t)lua_tointeger(L, a + 1));
      is_float[a] = false;
    } else {
      arg[a].f = lua_tonumber(L, a + 1);
      arg[a].i = 0;
      is_float[a] = true;
    }
  }
  qt_dtype dtype = (is_float[0] || is_float[1] || is_float[2]) ? QT_F32 : QT_I64;
  qt_device *dev = NULL;
  q_opts(L, opts_arg, "range", &dtype, &dev);
  qt_tensor *t = lq_newtensor(L);
  if (qt_range(ctx, t, dev, dtype, arg, is_float) != 0) return lq_raise(L, ctx);
  return 1;
}

/* The numbers at args first..first+count-1 as qt_range/qt_arange take them. */
static void q_scalars(lua_State *L, int first, int count, qt_scalar *arg, bool *is_float) {
  for (int a = 0; a < count; a++) {
    if (lua_isinteger(L, first + a)) {
      arg[a] = qt_scalar_i((int64_t)lua_tointeger(L, first + a));
      is_float[a] = false;
    } else {
      arg[a].f = lua_tonumber(L, first + a);
      arg[a].i = 0;
      is_float[a] = true;
    }
  }
}

/* arange(stop), arange(start, stop [, step]), then opts: half-open (PyTorch's), unlike
** range. int64 when every number given is a Lua integer, else float32, unless opts.dtype
** says. */
static int q_arange(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  luaL_checktype(L, 1, LUA_TNUMBER);
  int count = 1;
  while (count < 3 && lua_type(L, count + 1) == LUA_TNUMBER) count++;
  if (!lua_isnoneornil(L, count + 1) && lua_type(L, count + 1) != LUA_TTABLE)
    luaL_typeerror(L, count + 1, count < 3 ? "number or table" : "table");
  lq_checkend(L, count + 2, "arange", false);
  qt_scalar given[3], arg[3];
  bool given_float[3], is_float[3];
  q_scalars(L, 1, count, given, given_float);
  int s = count == 1 ? 1 : 0;  /* arange(n): start 0 */
  arg[0] = qt_scalar_i(0), is_float[0] = false;
  arg[2] = qt_scalar_i(1), is_float[2] = false;
  for (int a = 0; a < count; a++) arg[a + s] = given[a], is_float[a + s] = given_float[a];
  qt_dtype dtype = (is_float[0] || is_float[1] || is_float[2]) ? QT_F32 : QT_I64;
  qt_device *dev = NULL;
  q_opts(L, count + 1, "arange", &dtype, &dev);
  qt_tensor *t = lq_newtensor(L);
  if (qt_arange(ctx, t, dev, dtype, arg, is_float) != 0) return lq_raise(L, ctx);
  return 1;
}

/* linspace(start, end, n [, opts]), logspace(start, end, n [, base = 10] [, opts]). */
static int q_spaced(lua_State *L, bool is_log) {
  const char *op = is_log ? "logspace" : "linspace";
  qt_ctx *ctx = lq_ctx(L);
  double start = (double)luaL_checknumber(L, 1), end = (double)luaL_checknumber(L, 2);
  lua_Integer n = luaL_checkinteger(L, 3);
  int opts_arg = 4;
  double base = 10.0;
  if (is_log && lua_type(L, 4) == LUA_TNUMBER) {
    base = (double)lua_tonumber(L, 4);
    opts_arg = 5;
  }
  lq_checkend(L, opts_arg + 1, op, false);
  qt_dtype dtype = QT_F32;
  qt_device *dev = NULL;
  q_opts(L, opts_arg, op, &dtype, &dev);
  qt_tensor *t = lq_newtensor(L);
  int rc = is_log ? qt_logspace(ctx, t, dev, dtype, start, end, (int64_t)n, base)
                  : qt_linspace(ctx, t, dev, dtype, start, end, (int64_t)n);
  if (rc != 0) return lq_raise(L, ctx);
  return 1;
}

static int q_linspace(lua_State *L) { return q_spaced(L, false); }
static int q_logspace(lua_State *L) { return q_spaced(L, true); }

/* eye(n [, m] [, opts]): float32 unless opts.dtype says. */
static int q_eye(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  lua_Integer n = luaL_checkinteger(L, 1), m = n;
  int opts_arg = 2;
  if (lua_type(L, 2) == LUA_TNUMBER) {
    m = luaL_checkinteger(L, 2);
    opts_arg = 3;
  }
  lq_checkend(L, opts_arg + 1, "eye", false);
  qt_dtype dtype = QT_F32;
  qt_device *dev = NULL;
  q_opts(L, opts_arg, "eye", &dtype, &dev);
  qt_tensor *t = lq_newtensor(L);
  if (qt_eye(ctx, t, dev, dtype, (int64_t)n, (int64_t)m) != 0) return lq_raise(L, ctx);
  return 1;
}

/* ---- *_like(t, [value,] [opts]): t's shape, dtype and device unless opts says. */

static qt_tensor *q_like_args(lua_State *L, const char *op, int opts_arg, qt_dtype *dtype,
                              qt_device **dev) {
  qt_tensor *t = lq_checklive(L, 1, op);
  *dtype = t->dtype;
  *dev = t->storage->device;
  lq_checkopts(L, opts_arg, op, dtype, dev);
  return t;
}

static int q_like(lua_State *L, const char *op, const qt_scalar *value) {
  qt_ctx *ctx = lq_ctx(L);
  qt_dtype dtype;
  qt_device *dev;
  qt_tensor *t = q_like_args(L, op, 2, &dtype, &dev);
  qt_tensor *res = lq_newtensor(L);
  if (value == NULL) {
    if (qt_empty_like(ctx, res, t, dev, dtype) != 0)
      return lq_raise_as(L, ctx, "empty_like", op);
  } else if (qt_full_like(ctx, res, t, dev, dtype, *value) != 0) {
    return lq_raise_as(L, ctx, "full_like", op);
  }
  return 1;
}

static int q_empty_like(lua_State *L) { return q_like(L, "empty_like", NULL); }

static int q_zeros_like(lua_State *L) {
  qt_scalar zero = qt_scalar_i(0);
  return q_like(L, "zeros_like", &zero);
}

static int q_ones_like(lua_State *L) {
  qt_scalar one = qt_scalar_i(1);
  return q_like(L, "ones_like", &one);
}

static int q_full_like(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  luaL_checktype(L, 2, LUA_TNUMBER);
  qt_dtype dtype;
  qt_device *dev;
  qt_tensor *t = q_like_args(L, "full_like", 3, &dtype, &dev);
  qt_scalar value = lq_checkstorable(L, 2, "full_like", dtype);
  qt_tensor *res = lq_newtensor(L);
  if (qt_full_like(ctx, res, t, dev, dtype, value) != 0) return lq_raise(L, ctx);
  return 1;
}

static int q_random_like(lua_State *L, const char *op, qt_random_kind kind) {
  qt_ctx *ctx = lq_ctx(L);
  qt_dtype dtype;
  qt_device *dev;
  qt_tensor *t = q_like_args(L, op, 2, &dtype, &dev);
  if (!qt_is_float(dtype))
    return luaL_error(L, "%s: dtype %s is not supported (float32, float64)", op,
                      qt_dtypes[dtype].name);
  qt_tensor *res = lq_newtensor(L);
  if (qt_empty_like(ctx, res, t, dev, dtype) != 0) return lq_raise_as(L, ctx, "empty_like", op);
  if (qt_random_(ctx, res, kind, qt_scalar_i(0), qt_scalar_i(0)) != 0)
    return lq_raise_as(L, ctx, kind == QT_RAND_NORMAL ? "randn" : "rand", op);
  return 1;
}

static int q_rand_like(lua_State *L) { return q_random_like(L, "rand_like", QT_RAND_UNIFORM); }
static int q_randn_like(lua_State *L) { return q_random_like(L, "randn_like", QT_RAND_NORMAL); }

/* ================================================================ joining */

/* The list at arg 1 as an array of tensors: each element pushed on the stack (so a call
** in progress is seen to hold it), the array in a userdata pushed after them. */
static const qt_tensor *const *q_checklist(lua_State *L, const char *op, int *n) {
  luaL_checktype(L, 1, LUA_TTABLE);
  lua_Integer len = (lua_Integer)lua_rawlen(L, 1);
  if (len == 0) luaL_error(L, "%s: expected a non-empty list of tensors", op);
  if (len > 200000) luaL_error(L, "%s: %I tensors (at most 200000)", op, len);
  luaL_checkstack(L, (int)len + 4, op);
  int base = lua_gettop(L);
  for (lua_Integer i = 1; i <= len; i++) {
    lua_rawgeti(L, 1, i);
    if (qlua_totensor(L, -1) == NULL)
      luaL_error(L, "%s: list element %I is a %s, expected a tensor", op, i,
                 luaL_typename(L, -1));
  }
  const qt_tensor **ts =
      (const qt_tensor **)lua_newuserdatauv(L, (size_t)len * sizeof(qt_tensor *), 0);
  for (lua_Integer i = 1; i <= len; i++) ts[i - 1] = qlua_totensor(L, base + (int)i);
  *n = (int)len;
  return ts;
}

/* cat(list [, dim = 1]), stack(list [, dim = 1]). */
static int q_join(lua_State *L, bool stack) {
  const char *op = stack ? "stack" : "cat";
  qt_ctx *ctx = lq_ctx(L);
  lua_Integer dim = luaL_optinteger(L, 2, 1);
  if (dim < 1)
    return luaL_error(L, "%s: dim %I out of range (dims are 1-based; negative dims are not "
                      "accepted)", op, dim);
  if (dim > QT_MAXDIM + 1) return luaL_error(L, "%s: dim %I out of range", op, dim);
  lua_settop(L, 2);
  int n;
  const qt_tensor *const *ts = q_checklist(L, op, &n);
  qt_tensor *t = lq_newtensor(L);
  int rc = stack ? qt_stack(ctx, t, n, ts, (int)dim - 1) : qt_cat(ctx, t, n, ts, (int)dim - 1);
  if (rc != 0) return lq_raise(L, ctx);
  return 1;
}

static int q_cat(lua_State *L) { return q_join(L, false); }
static int q_stack(lua_State *L) { return q_join(L, true); }

/* randperm(n [, opts]): 1..n shuffled, int64 unless opts.dtype says. */
static int q_randperm(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  lua_Integer n = luaL_checkinteger(L, 1);
  qt_dtype dtype = QT_I64;
  qt_device *dev = NULL;
  q_opts(L, 2, "randperm", &dtype, &dev);
  qt_tensor *t = lq_newtensor(L);
  if (qt_randperm(ctx, t, dev, dtype, (int64_t)n) != 0) return lq_raise(L, ctx);
  return 1;
}

/* ================================================================ random numbers */

static int q_random(lua_State *L, const char *op, qt_random_kind kind) {
  qt_ctx *ctx = lq_ctx(L);
  int ndim;
  int64_t size[QT_MAXDIM];
  int next = lq_checkshape(L, 1, op, 0, &ndim, size);
  lq_checkend(L, next + 1, op, false);
  qt_dtype dtype = QT_F32;
  qt_device *dev = NULL;
  q_opts(L, next, op, &dtype, &dev);
  if (!qt_is_float(dtype))
    return luaL_error(L, "%s: dtype %s is not supported (float32, float64)", op,
                      qt_dtypes[dtype].name);
  qt_tensor *t = lq_newtensor(L);
  if (qt_empty(ctx, t, dev, dtype, ndim, size) != 0) return lq_raise_as(L, ctx, "empty", op);
  if (qt_random_(ctx, t, kind, qt_scalar_i(0), qt_scalar_i(0)) != 0)
    return lq_raise_as(L, ctx, "random", op);
  return 1;
}

static int q_rand(lua_State *L) { return q_random(L, "rand", QT_RAND_UNIFORM); }
static int q_randn(lua_State *L) { return q_random(L, "randn", QT_RAND_NORMAL); }

/* randint(lo, hi, shape [, opts]): inclusive bounds, like math.random(lo, hi). */
static int q_randint(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  lua_Integer lo = luaL_checkinteger(L, 1), hi = luaL_checkinteger(L, 2);
  int ndim;
  int64_t size[QT_MAXDIM];
  int next = lq_checkshape(L, 3, "randint", 0, &ndim, size);
  lq_checkend(L, next + 1, "randint", false);
  qt_dtype dtype = QT_I64;
  qt_device *dev = NULL;
  q_opts(L, next, "randint", &dtype, &dev);
  if (qt_is_float(dtype))
    return luaL_error(L, "randint: dtype %s is not supported (an integer dtype or bool)",
                      qt_dtypes[dtype].name);
  if (lo > hi) return luaL_error(L, "randint: empty range (lo %I > hi %I)", lo, hi);
  if (lo < qt_dtypes[dtype].min || hi > qt_dtypes[dtype].max)
    return luaL_error(L, "randint: bounds %I..%I do not fit %s", lo, hi, qt_dtypes[dtype].name);
  qt_tensor *t = lq_newtensor(L);
  if (qt_empty(ctx, t, dev, dtype, ndim, size) != 0) return lq_raise_as(L, ctx, "empty", "randint");
  if (qt_random_(ctx, t, QT_RAND_INT, qt_scalar_i((int64_t)lo), qt_scalar_i((int64_t)hi)) != 0)
    return lq_raise_as(L, ctx, "random", "randint");
  return 1;
}

static int q_seed(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  lua_Integer n = luaL_checkinteger(L, 1);
  ctx->seed = (uint64_t)n;
  ctx->rng_offset = 0;
  return 0;
}

/* ================================================================ products */

static int q_set_tf32(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  luaL_checktype(L, 1, LUA_TBOOLEAN);
  ctx->allow_tf32 = lua_toboolean(L, 1);
  return 0;
}

/* ================================================================ devices */

/* set_num_threads(n): the CPU device's threads, the calling one included (process-wide,
** as PyTorch's torch.set_num_threads; OpenBLAS's pool follows). get_num_threads(). */
static int q_set_num_threads(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  if (n < 1 || n > 256)
    return luaL_error(L, "set_num_threads: %I threads (1 to 256)", n);
  qt_cpu_threads_set((int)n);
  return 0;
}

static int q_get_num_threads(lua_State *L) {
  lua_pushinteger(L, qt_cpu_threads_get());
  return 1;
}

/* cpu_info() -> {threads =, simd =, blas =}: what the CPU device runs with. */
static int q_cpu_info(lua_State *L) {
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, qt_cpu_threads_get());
  lua_setfield(L, -2, "threads");
  lua_pushstring(L, qt_cpu_simd());
  lua_setfield(L, -2, "simd");
  const char *blas = qt_cpu_blas_core();
  if (blas != NULL) {
    lua_pushstring(L, blas);
    lua_setfield(L, -2, "blas");
  }
  return 1;
}

static int q_gpu_count(lua_State *L) {
  lua_pushinteger(L, qt_gpu_count());
  return 1;
}

/* A GPU ordinal argument: an integer, "gpu" or "gpu:N"; the current GPU when absent. */
static int q_checkordinal(lua_State *L, int arg, const char *op) {
  qt_ctx *ctx = lq_ctx(L);
  if (lua_isnoneornil(L, arg)) return ctx->current_gpu;
  if (lua_type(L, arg) == LUA_TSTRING) {
    const char *name = lq_tocstring(L, arg, op, "the GPU name");
    if (strcmp(name, "gpu") == 0) return ctx->current_gpu;
    if (strncmp(name, "gpu:", 4) == 0) return lq_device_by_name(L, op, name)->ordinal;
    luaL_error(L, "%s: '%s' is not a GPU (gpu, gpu:N or an ordinal)", op, name);
  }
  lua_Integer n = luaL_checkinteger(L, arg);
  if (n < 0 || n > INT32_MAX) luaL_error(L, "%s: GPU ordinal %I is negative or too large", op, n);
  return (int)n;
}

static int q_device_name(lua_State *L) {
  if (lua_type(L, 1) == LUA_TSTRING &&
      strcmp(lq_tocstring(L, 1, "device_name", "the device name"), "cpu") == 0) {
    lua_pushliteral(L, "cpu");
    return 1;
  }
  int ordinal = q_checkordinal(L, 1, "device_name");
  qt_err err;
  const char *name = qt_gpu_name(ordinal, &err);
  if (name == NULL) return luaL_error(L, "device_name: %s", err.msg);
  lua_pushstring(L, name);
  return 1;
}

static int q_set_device(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  if (lua_isnoneornil(L, 1)) luaL_typeerror(L, 1, "GPU ordinal");
  int ordinal = q_checkordinal(L, 1, "set_device");
  lq_gpu(L, "set_device", ordinal);  /* must exist (and is opened now) */
  ctx->current_gpu = ordinal;
  return 0;
}

/* Waits for the CPU and every GPU this state has used; raises their deferred errors. */
static void q_sync_all(lua_State *L, qt_ctx *ctx, const char *op) {
  if (qt_sync(ctx, qt_cpu_device()) != 0) lq_raise(L, ctx);
  uint64_t used = lq_state_of(L)->gpus_used;
  for (int g = 0; g < 64; g++)
    if (used & ((uint64_t)1 << g))
      if (qt_sync(ctx, lq_gpu(L, op, g)) != 0) lq_raise(L, ctx);
}

/* sync([device]): one device, or the CPU and every GPU this state has used. */
static int q_sync(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  if (!lua_isnoneornil(L, 1)) {
    if (qt_sync(ctx, lq_checkdevice(L, 1, "sync")) != 0) return lq_raise(L, ctx);
    return 0;
  }
  q_sync_all(L, ctx, "sync");
  return 0;
}

/* memory([device]) -> {allocated=, reserved=, peak=, total=, free=, graph=} (graph: bytes
** of reserved that CUDA graphs' pools hold; allocated and reserved count them); default: the
** current GPU, or the CPU when there is none. */
static int q_memory(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_device *dev = lq_optdevice(L, 1, "memory");
  if (dev->iface->memory == NULL)
    return luaL_error(L, "memory: not supported on %s", dev->name);
  qt_memory_stats stats;
  memset(&stats, 0, sizeof stats);
  if (dev->iface->memory(dev, &stats, &ctx->err) != 0) return lq_raise(L, ctx);
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, (lua_Integer)stats.allocated);
  lua_setfield(L, -2, "allocated");
  lua_pushinteger(L, (lua_Integer)stats.reserved);
  lua_setfield(L, -2, "reserved");
  lua_pushinteger(L, (lua_Integer)stats.peak);
  lua_setfield(L, -2, "peak");
  lua_pushinteger(L, (lua_Integer)stats.total);
  lua_setfield(L, -2, "total");
  lua_pushinteger(L, (lua_Integer)stats.free);
  lua_setfield(L, -2, "free");
  lua_pushinteger(L, (lua_Integer)stats.graph);
  lua_setfield(L, -2, "graph");
  return 1;
}

/* backend(family [, device]): what runs that op family there ("conv": cuDNN and its version,
** or im2col with cuBLAS and why, or im2col with OpenBLAS); default: the current GPU, or the
** CPU. */
static int q_backend(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  const char *family = lq_tocstring(L, 1, "backend", "family");
  qt_device *dev = lq_optdevice(L, 2, "backend");
  char buf[QT_ERRLEN];
  if (qt_describe(ctx, dev, family, buf, sizeof buf) != 0) return lq_raise(L, ctx);
  if (buf[0] == '\0') return luaL_error(L, "backend: no op family %s (known: conv, dist)", family);
  lua_pushstring(L, buf);
  return 1;
}

/* empty_cache([device]): a full collection first (so unreachable tensors return their blocks
** to the caches; the GC limit is re-paced from what is left), then every cache: each GPU
** this state used, and the CPU device's (the pinned host buffers); or the one device's. */
static int q_empty_cache(lua_State *L) {
  lq_ctx(L);
  qt_device *only = lua_isnoneornil(L, 1) ? NULL : lq_checkdevice(L, 1, "empty_cache");
  lq_gc_collect(L);
  uint64_t used = lq_state_of(L)->gpus_used;
  for (int g = 0; g < 64; g++) {
    if (!(used & ((uint64_t)1 << g))) continue;
    qt_device *dev = lq_gpu(L, "empty_cache", g);
    if (only != NULL && dev != only) continue;
    if (qt_graph_capturing(dev))
      return luaL_error(L, "empty_cache: cannot give %s's memory back while a CUDA graph is "
                        "being captured on it (qlua.graph)", dev->name);
    if (dev->iface->empty_cache != NULL) dev->iface->empty_cache(dev);
  }
  qt_device *cpu = qt_cpu_device();
  if ((only == NULL || only == cpu) && cpu->iface->empty_cache != NULL) cpu->iface->empty_cache(cpu);
  return 0;
}

/* ================================================================ files and time */

/* A path argument: a NUL inside would silently cut it short ("x.npy\0.bak" names x.npy). */
static const char *q_checkpath(lua_State *L, int arg, const char *op) {
  return lq_checkcstring(L, arg, op, "path");
}

static int q_save(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  const char *path = q_checkpath(L, 1, "save");
  qt_tensor *t = qlua_checktensor(L, 2);
  if (qt_npy_save(ctx, path, t) != 0) return lq_raise(L, ctx);
  return 0;
}

/* load(path [, opts]): a CPU tensor unless opts.device says; opts.dtype converts. */
static int q_load(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  const char *path = q_checkpath(L, 1, "load");
  qt_dtype dtype = QT_NDTYPES;
  qt_device *dev = NULL;
  q_opts(L, 2, "load", &dtype, &dev);
  qt_tensor *t = lq_newtensor(L);
  if (qt_npy_load(ctx, t, path, dev) != 0) return lq_raise(L, ctx);
  if (dtype != QT_NDTYPES && dtype != t->dtype) {  /* opts.dtype: converted on arrival */
    qt_tensor *cast = lq_newtensor(L);
    if (qt_to_dtype(ctx, cast, t, dtype) != 0) return lq_raise_as(L, ctx, "to", "load");
    qt_tensor_release(t);
  }
  return 1;
}

/* ---- safetensors files (runtime/core/safetensors.c) */

/* A loaded file waits in a box (a userdata whose __gc frees what it still holds) while
** its tensors and metadata are handed to Lua one by one, so a Lua error midway (out of
** memory) leaks nothing. */
#define Q_ST_BOX "qlua.safetensors"

static int q_st_box_gc(lua_State *L) {
  qt_safetensors_free((qt_safetensors *)lua_touserdata(L, 1));
  return 0;
}

static qt_safetensors *q_st_box(lua_State *L) {
  if (luaL_newmetatable(L, Q_ST_BOX)) {
    lua_pushcfunction(L, q_st_box_gc);
    lua_setfield(L, -2, "__gc");
  }
  qt_safetensors *f = (qt_safetensors *)lua_newuserdatauv(L, sizeof *f, 0);
  qt_safetensors_init(f);
  lua_insert(L, -2);
  lua_setmetatable(L, -2);
  return f;
}

/* load_safetensors(path [, opts]) -> {name = tensor, ...}, {key = value, ...}: CPU
** tensors unless opts.device says; opts.dtype converts them all. */
static int q_load_safetensors(lua_State *L) {
  const char *op = "load_safetensors";
  qt_ctx *ctx = lq_ctx(L);
  const char *path = q_checkpath(L, 1, op);
  qt_dtype dtype = QT_NDTYPES;
  qt_device *dev = NULL;
  q_opts(L, 2, op, &dtype, &dev);
  lua_settop(L, 2);
  qt_safetensors *f = q_st_box(L);
  if (qt_safetensors_load(ctx, f, path, dev) != 0) return lq_raise(L, ctx);
  lua_createtable(L, 0, f->ntensors < 1000000 ? (int)f->ntensors : 1000000);
  int tensors = lua_gettop(L);
  for (size_t i = 0; i < f->ntensors; i++) {
    lua_pushlstring(L, f->tensors[i].name.bytes, f->tensors[i].name.len);
    qt_tensor *t = lq_newtensor(L);
    *t = f->tensors[i].tensor;  /* moved: the box no longer holds it */
    qt_tensor_init(&f->tensors[i].tensor);
    if (dtype != QT_NDTYPES && dtype != t->dtype) {
      qt_tensor *cast = lq_newtensor(L);
      if (qt_to_dtype(ctx, cast, t, dtype) != 0) return lq_raise_as(L, ctx, "to", op);
      qt_tensor_release(t);
      lua_remove(L, -2);
    }
    lua_rawset(L, tensors);
  }
  lua_createtable(L, 0, f->nmeta < 1000000 ? (int)f->nmeta : 1000000);
  for (size_t i = 0; i < f->nmeta; i++) {
    lua_pushlstring(L, f->meta[i].key.bytes, f->meta[i].key.len);
    lua_pushlstring(L, f->meta[i].value.bytes, f->meta[i].value.len);
    lua_rawset(L, -3);
  }
  qt_safetensors_free(f);
  return 2;
}

/* The string keys of the table at arg and their values, left on the stack (key, value,
** key, value, ...: the tensors are then seen as held by this call); returns how many.
** tensors: the values must be tensors, else strings. */
static size_t q_st_pairs(lua_State *L, int arg, bool tensors, size_t most) {
  const char *op = "save_safetensors", *what = tensors ? "tensors" : "metadata";
  size_t n = 0;
  lua_pushnil(L);
  while (lua_next(L, arg) != 0) {
    if (lua_type(L, -2) != LUA_TSTRING)
      luaL_error(L, "%s: %s: the keys must be strings (%s is a %s)", op, what,
                 tensors ? "a name" : "a key", luaL_typename(L, -2));
    if (tensors ? qlua_totensor(L, -1) == NULL : lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "%s: %s['%s'] is a %s, expected a %s", op, what, lua_tostring(L, -2),
                 luaL_typename(L, -1), tensors ? "tensor" : "string");
    if (++n > most) luaL_error(L, "%s: more than %d %s entries", op, (int)most, what);
    if (!lua_checkstack(L, 4)) luaL_error(L, "%s: too many %s entries", op, what);
    lua_pushvalue(L, -2);  /* the key again, for lua_next; the pair stays below */
  }
  return n;
}

/* save_safetensors(path, {name = tensor, ...} [, {key = value, ...}]) */
static int q_save_safetensors(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  const char *path = q_checkpath(L, 1, "save_safetensors");
  luaL_checktype(L, 2, LUA_TTABLE);
  if (!lua_isnoneornil(L, 3)) luaL_checktype(L, 3, LUA_TTABLE);
  lua_settop(L, 3);
  int base = lua_gettop(L);
  size_t n = q_st_pairs(L, 2, true, 200000);
  size_t nmeta = lua_isnil(L, 3) ? 0 : q_st_pairs(L, 3, false, 100000);
  qt_st_entry *entries =
      (qt_st_entry *)lua_newuserdatauv(L, (n > 0 ? n : 1) * sizeof *entries, 0);
  qt_st_pair *meta = (qt_st_pair *)lua_newuserdatauv(L, (nmeta > 0 ? nmeta : 1) * sizeof *meta, 0);
  for (size_t i = 0; i < n; i++) {
    int at = base + 1 + 2 * (int)i;
    entries[i].name.bytes = lua_tolstring(L, at, &entries[i].name.len);
    qt_tensor_init(&entries[i].tensor);
    entries[i].source = qlua_totensor(L, at + 1);
  }
  for (size_t i = 0; i < nmeta; i++) {
    int at = base + 1 + 2 * (int)(n + i);
    meta[i].key.bytes = lua_tolstring(L, at, &meta[i].key.len);
    meta[i].value.bytes = lua_tolstring(L, at + 1, &meta[i].value.len);
  }
  if (qt_safetensors_save(ctx, path, n, entries, nmeta, meta) != 0) return lq_raise(L, ctx);
  return 0;
}


static double q_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* An optional positive integer field of the opts table at arg. */
static lua_Integer q_optfield(lua_State *L, int arg, const char *key, lua_Integer def,
                              lua_Integer min) {
  if (lua_isnoneornil(L, arg)) return def;
  lua_getfield(L, arg, key);
  lua_Integer v = def;
  if (!lua_isnil(L, -1)) {
    int isint;
    v = lua_tointegerx(L, -1, &isint);
    if (!isint || v < min || v > 100000000)
      luaL_error(L, "bench: opts.%s must be an integer in %I..100000000", key, min);
  }
  lua_pop(L, 1);
  return v;
}

static int q_clock(lua_State *L) {
  lua_pushnumber(L, (lua_Number)q_now());
  return 1;
}

static int q_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* bench(fn [, {calls=1, runs=11, warmup=1}]): times fn the way `make bench` does. One
** batch is `calls` back-to-back calls of fn followed by a synchronisation of every device
** this state used, timed with the monotonic clock; `warmup` batches are thrown away,
** then `runs` batches are timed. GPU work is asynchronous, so timing one call without the
** sync would measure only the launch, and timing one call with it would add a round trip
** a script running many ops never pays: batches of calls give what a loop costs per call.
** Returns {median=, min=, max=, mean=, runs=, calls=}, in seconds per call. */
static int q_bench(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  luaL_checktype(L, 1, LUA_TFUNCTION);
  if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
  lua_Integer calls = q_optfield(L, 2, "calls", 1, 1);
  lua_Integer runs = q_optfield(L, 2, "runs", 11, 1);
  lua_Integer warmup = q_optfield(L, 2, "warmup", 1, 0);
  double *times = (double *)lua_newuserdatauv(L, (size_t)runs * sizeof(double), 0);
  for (lua_Integer r = -warmup; r < runs; r++) {
    double t0 = q_now();
    for (lua_Integer c = 0; c < calls; c++) {
      lua_pushvalue(L, 1);
      lua_call(L, 0, 0);
    }
    q_sync_all(L, ctx, "bench");
    if (r >= 0) times[r] = (q_now() - t0) / (double)calls;
  }
  double sum = 0;
  for (lua_Integer r = 0; r < runs; r++) sum += times[r];
  qsort(times, (size_t)runs, sizeof(double), q_cmp_double);
  double median = runs % 2 ? times[runs / 2] : 0.5 * (times[runs / 2 - 1] + times[runs / 2]);
  lua_createtable(L, 0, 6);
  lua_pushnumber(L, median);
  lua_setfield(L, -2, "median");
  lua_pushnumber(L, times[0]);
  lua_setfield(L, -2, "min");
  lua_pushnumber(L, times[runs - 1]);
  lua_setfield(L, -2, "max");
  lua_pushnumber(L, sum / (double)runs);
  lua_setfield(L, -2, "mean");
  lua_pushinteger(L, runs);
  lua_setfield(L, -2, "runs");
  lua_pushinteger(L, calls);
  lua_setfield(L, -2, "calls");
  return 1;
}

static int q_is_tensor(lua_State *L) {
  lua_pushboolean(L, qlua_totensor(L, 1) != NULL);
  return 1;
}

/* ================================================================ the module */

static const lq_Reg q_funcs[] = {
  {"tensor", q_tensor, 2, "(data [, opts])",
   "a tensor from a number (0-d) or a nested table; dtype inferred (any float: float32, all "
   "integers: int64) unless opts.dtype says"},
  {"empty", q_empty, LQ_VARARGS, "(shape [, opts])",
   "an uninitialised tensor (shape: 2, 3 or {2, 3}; opts: {dtype =, device =})"},
  {"zeros", q_zeros, LQ_VARARGS, "(shape [, opts])", "a tensor of zeros"},
  {"ones", q_ones, LQ_VARARGS, "(shape [, opts])", "a tensor of ones"},
  {"full", q_full, 3, "(shape, value [, opts])", "a tensor filled with value"},
  {"range", q_range, 4, "(first, last [, step] [, opts])",
   "the values of Lua's `for i = first, last, step` (last included); int64 for integers, "
   "else float32"},
  {"arange", q_arange, 4, "([start,] stop [, step] [, opts])",
   "half-open, as PyTorch's: arange(1, 4) is 1, 2, 3 and arange(n) is 0 .. n-1"},
  {"linspace", q_linspace, 4, "(start, end, n [, opts])",
   "n evenly spaced values from start to end, both included; float32 by default"},
  {"logspace", q_logspace, 5, "(start, end, n [, base] [, opts])",
   "base ^ v (base 10 by default) for each v of linspace(start, end, n)"},
  {"eye", q_eye, 3, "(n [, m] [, opts])",
   "n x m (default n x n) with ones on the diagonal, zeros elsewhere"},
  {"empty_like", q_empty_like, 2, "(t [, opts])",
   "uninitialised, with t's shape, dtype and device"},
  {"zeros_like", q_zeros_like, 2, "(t [, opts])", "zeros with t's shape, dtype and device"},
  {"ones_like", q_ones_like, 2, "(t [, opts])", "ones with t's shape, dtype and device"},
  {"full_like", q_full_like, 3, "(t, value [, opts])",
   "value with t's shape, dtype and device"},
  {"rand_like", q_rand_like, 2, "(t [, opts])",
   "uniform in [0, 1) with t's shape (a float dtype)"},
  {"randn_like", q_randn_like, 2, "(t [, opts])",
   "normal (mean 0, sd 1) with t's shape (a float dtype)"},
  {"randperm", q_randperm, 2, "(n [, opts])",
   "a random permutation of 1 .. n, int64 by default"},
  {"cat", q_cat, 2, "(list [, dim])",
   "the tensors of list joined along dim (default 1); sizes must agree except along dim"},
  {"stack", q_stack, 2, "(list [, dim])",
   "tensors of one shape joined along a new dim inserted at dim (default 1)"},
  {"rand", q_rand, LQ_VARARGS, "(shape [, opts])", "uniform in [0, 1), float32 by default"},
  {"randn", q_randn, LQ_VARARGS, "(shape [, opts])",
   "normal, mean 0, sd 1, float32 by default"},
  {"randint", q_randint, LQ_VARARGS, "(lo, hi, shape [, opts])",
   "uniform integers in [lo, hi] (both included), int64 by default"},
  {"seed", q_seed, 1, "(n)",
   "makes the random functions reproducible: one seed, the same numbers on every device"},
  {"set_tf32", q_set_tf32, 1, "(on)",
   "true allows TF32 tensor cores for float32 products on the GPU (off by default)"},
  {"set_num_threads", q_set_num_threads, 1, "(n)",
   "threads for large CPU ops, the caller included (default: QLUA_NUM_THREADS or the cores; "
   "OpenBLAS follows; 1: all on the calling thread)"},
  {"get_num_threads", q_get_num_threads, 0, "()", "the CPU threads set_num_threads set"},
  {"cpu_info", q_cpu_info, 0, "()",
   "{threads =, simd =, blas =}: the CPU threads, the vector build picked (avx512, avx2, "
   "generic) and OpenBLAS's kernel set"},
  {"gpu_count", q_gpu_count, 0, "()",
   "the number of GPUs this qlua sees (0 in a CPU-only build)"},
  {"device_count", q_gpu_count, 0, "()", "gpu_count's other name (torch.cuda.device_count)"},
  {"device_name", q_device_name, 1, "(ordinal)",
   "the name of GPU ordinal (0-based, as CUDA's); \"cpu\" for \"cpu\""},
  {"set_device", q_set_device, 1, "(ordinal)",
   "makes gpu:ordinal the current GPU, the one \"gpu\" means"},
  {"sync", q_sync, 1, "([device])",
   "waits for the work queued on device (default: every device this state used)"},
  {"memory", q_memory, 1, "([device])",
   "{allocated =, reserved =, peak =, total =, free =} in bytes (default: the current GPU, "
   "or the CPU)"},
  {"backend", q_backend, 2, "(family [, device])",
   "what runs an op family on device (\"conv\": cuDNN, or im2col + cuBLAS and why, or im2col "
   "+ OpenBLAS)"},
  {"empty_cache", q_empty_cache, 1, "([device])",
   "collects garbage, then gives back every cached block that holds no live tensor (of every "
   "device, or of device)"},
  {"save", q_save, 2, "(path, t)", "writes t to a NumPy .npy file, all or nothing"},
  {"load", q_load, 2, "(path [, opts])",
   "reads a NumPy .npy file; a CPU tensor unless opts.device says"},
  {"save_safetensors", q_save_safetensors, 3, "(path, tensors [, metadata])",
   "writes a table of name = tensor (and string metadata) to a .safetensors file, all or "
   "nothing"},
  {"load_safetensors", q_load_safetensors, 2, "(path [, opts])",
   "reads a .safetensors file: a table of name = tensor (CPU unless opts.device says) and "
   "the metadata table"},
  {"clock", q_clock, 0, "()", "monotonic time in seconds (a float)"},
  {"bench", q_bench, 2 | LQ_UNCOUNTED, "(fn [, {calls =, runs =, warmup =}])",
   "times fn as make bench does: {median =, min =, max =, mean =, runs =, calls =}, seconds "
   "per call"},
  {"is_tensor", q_is_tensor, 1, "(x)", "true when x is a qlua.Tensor"},
  {"help", lq_help, 1 | LQ_UNCOUNTED, "([name | function])",
   "prints the signature and purpose of a qlua function or method (\"cat\", \"slice\", "
   "\"Tensor.slice\", qlua.cat); \"qlua\", \"Tensor\" list them all"},
  {NULL, NULL, 0, NULL, NULL}
};

/* Builds the state box (anchored in the registry, upvalue of every function), the
** tensor metatable, and the module table. */
/* The registry's LQ_OPS.dtypes: every dtype of the list in enum order, {name =, size =,
** kind = "float" | "int" | "bool" | "half", short = (t:float() ...), min =, max =
** (integers), digits = (floats)},
** for the specs and the fuzzer, so that a new dtype is in their lists by itself. */
#define Q_KIND_FLOAT "float"
#define Q_KIND_INT "int"
#define Q_KIND_BOOL "bool"
#define Q_KIND_HALF "half"
static void q_push_dtypes(lua_State *L) {
  static const char *const kinds[QT_NDTYPES] = {
#define Q_KIND_ROW_(P, E, sfx, name, T, U, size, kind, ...) [E] = Q_KIND_##kind,
    QT_DTYPE_LIST(Q_KIND_ROW_, ~)
#undef Q_KIND_ROW_
  };
  static const char *const shorthands[QT_NDTYPES] = {
#define Q_SHORT_ROW_(P, E, sfx, name, T, U, size, kind, digits, emax, shortname, ...) \
    [E] = shortname,
    QT_DTYPE_LIST(Q_SHORT_ROW_, ~)
#undef Q_SHORT_ROW_
  };
  if (lua_getfield(L, LUA_REGISTRYINDEX, LQ_OPS) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, LQ_OPS);
  }
  lua_createtable(L, QT_NDTYPES, 0);
  for (int d = 0; d < QT_NDTYPES; d++) {
    lua_createtable(L, 0, 6);
    lua_pushstring(L, qt_dtypes[d].name);
    lua_setfield(L, -2, "name");
    lua_pushinteger(L, (lua_Integer)qt_dtypes[d].size);
    lua_setfield(L, -2, "size");
    lua_pushstring(L, kinds[d]);
    lua_setfield(L, -2, "kind");
    lua_pushstring(L, shorthands[d]);
    lua_setfield(L, -2, "short");
    if (qt_is_float((qt_dtype)d)) {
      lua_pushinteger(L, qt_dtype_digits((qt_dtype)d));
      lua_setfield(L, -2, "digits");
    } else {
      lua_pushinteger(L, (lua_Integer)qt_dtypes[d].min);
      lua_setfield(L, -2, "min");
      lua_pushinteger(L, (lua_Integer)qt_dtypes[d].max);
      lua_setfield(L, -2, "max");
    }
    lua_rawseti(L, -2, d + 1);
  }
  lua_setfield(L, -2, "dtypes");
  lua_pop(L, 1);
}

LUAMOD_API int luaopen_qlua(lua_State *L) {
  /* Once per state: the "qlua.Tensor" metatable is per state, so a second context would
  ** take over the first one's tensors. A second call returns the same module. */
  if (lua_getfield(L, LUA_REGISTRYINDEX, "qlua.module") == LUA_TTABLE) return 1;
  lua_pop(L, 1);
  lq_state_new(L);
  int box = lua_gettop(L);

  lq_open_tensor(L, box);
  lq_elementwise_lists(L);
  q_push_dtypes(L);

  lua_createtable(L, 0, (int)(sizeof q_funcs / sizeof q_funcs[0]) + 1);
  lq_setfuncs(L, q_funcs, box, false, "qlua");
  lq_setfuncs(L, lq_mask_functions, box, false, "qlua");  /* qlua.where (l_mask.c) */
  lq_setfuncs(L, lq_sort_functions, box, false, "qlua");  /* qlua.searchsorted (l_sort.c) */
  lq_setfuncs(L, lq_matmul_functions, box, false, "qlua");  /* qlua.matmul ... (l_matmul.c) */
  lq_setfuncs(L, lq_random_functions, box, false, "qlua");  /* qlua.bernoulli ... (l_random.c) */
  lq_setfuncs(L, lq_scan_functions, box, false, "qlua");  /* qlua.cross_entropy (l_scan.c) */
  lq_setfuncs(L, lq_autograd_functions, box, false, "qlua");  /* (l_autograd.c) */
  lq_setfuncs(L, lq_conv_functions, box, false, "qlua");  /* qlua.conv2d ... (l_conv.c) */
  lq_setfuncs(L, lq_optim_functions, box, false, "qlua");  /* qlua._optim_step (l_optim.c) */
  lq_setfuncs(L, lq_norm_functions, box, false, "qlua");   /* qlua._norm ... (l_norm.c) */
  lq_setfuncs(L, lq_pool2d_functions, box, false, "qlua"); /* qlua._pool2d (l_pool2d.c) */
  lq_setfuncs(L, lq_attention_functions, box, false, "qlua");  /* (l_attention.c) */
  lq_open_kernel(L, box, -1);                     /* also qlua.Kernel, qlua.Module */
  lq_open_graph(L, box, -1);                      /* qlua.graph, qlua.Graph (l_graph.c) */
  lq_open_dist(L, box, -1);                       /* qlua._dist (l_dist.c) */
  luaL_getmetatable(L, QLUA_TENSOR);              /* qlua.Tensor: the class (l_tensor.c) */
  lua_setfield(L, -2, "Tensor");
  lua_pushliteral(L, QLUA_VERSION);
  lq_document(L, "qlua", "version", "", "the qlua version string");
  lua_setfield(L, -2, "version");
  lua_remove(L, box);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, "qlua.module");
  return 1;
}
