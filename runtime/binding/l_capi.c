/*
** l_capi.c — qlua.h's functions for C extensions: registering an extension's functions
** as qlua calls (qlua_setfuncs), a tensor's device address and GPU (qlua_data,
** qlua_gpu_index), the GPU's stream (qlua_cuda_stream), results through qlua's allocator
** (qlua_newtensor), argument checks and errors in qlua's style (qlua_checkgpu,
** qlua_error). qlua.h says what each one promises; docs/API.md, "C extensions", how an
** extension uses them. Built on l_state.c and the core (ops.h); no CUDA here: a stream is
** a void * all the way through.
**
** Finding the state: the binding's helpers (lq_ctx, lq_raise, lq_newtensor) read the
** state box from upvalue 1 of the running C function. An extension's function registered
** with qlua_setfuncs runs through c_trampoline, whose upvalue 1 is the box, so they work
** there directly (and the frame counts as a binding call in progress, whose operands
** l_state.c's releases wait for). From any other C function (one registered with
** luaL_setfuncs, an embedder's main), the work is run in a C closure made for the call,
** with the box as its upvalue 1. The box itself is found through the "qlua.Tensor"
** metatable, whose __index closure holds it as upvalue 1 (lq_open_tensor); its address is
** kept in the registry (as a light userdata, no reference) to recognise upvalue 1 cheaply.
*/
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lqlua.h"

/* ================================================================ the state box */

static const char c_box_key = 0;  /* registry[&c_box_key] = the box's address */

/* Whether the value at idx is the state box (a userdata whose metatable is named
** "qlua.state", as lq_state_new makes it). */
static bool c_isbox(lua_State *L, int idx) {
  if (lua_type(L, idx) != LUA_TUSERDATA || !lua_getmetatable(L, idx)) return false;
  lua_getfield(L, -1, "__name");
  const char *name = lua_tostring(L, -1);
  bool box = name != NULL && strcmp(name, "qlua.state") == 0;
  lua_pop(L, 2);
  return box;
}

/* Pushes this state's box and returns it; raises when luaopen_qlua never ran here. */
static lq_state *c_pushbox(lua_State *L) {
  luaL_checkstack(L, 6, "qlua");
  int top = lua_gettop(L);
  if (luaL_getmetatable(L, QLUA_TENSOR) == LUA_TTABLE &&
      lua_getfield(L, -1, "__index") == LUA_TFUNCTION && lua_getupvalue(L, -1, 1) != NULL &&
      c_isbox(L, -1)) {
    lua_replace(L, top + 1);  /* the box where the metatable was */
    lua_settop(L, top + 1);
    lq_state *st = (lq_state *)lua_touserdata(L, -1);
    lua_pushlightuserdata(L, st);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &c_box_key);
    return st;
  }
  lua_settop(L, top);
  luaL_error(L, "qlua: luaopen_qlua has not been called in this state");
  return NULL;  /* not reached */
}

/* Whether the running C function's upvalue 1 is the box: a function registered with
** qlua_setfuncs (or qlua's own), where the binding's helpers work as they are. */
static bool c_inside(lua_State *L) {
  void *up = lua_touserdata(L, lua_upvalueindex(1));
  if (up == NULL) return false;
  luaL_checkstack(L, 2, "qlua");
  lua_rawgetp(L, LUA_REGISTRYINDEX, &c_box_key);
  void *st = lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (st == NULL) {  /* not looked up yet in this state */
    st = c_pushbox(L);
    lua_pop(L, 1);
  }
  return up == st;
}

/* ---------------------------------------------------------------- running with the box */

/* A piece of work that needs the box as upvalue 1: pushes nresults values. */
typedef int (*c_body)(lua_State *L, void *args);
typedef struct c_call {
  c_body body;
  void *args;
} c_call;

/* The closure (upvalue 1: the box) that runs a body for a caller outside. */
static int c_outside(lua_State *L) {
  c_call *c = (c_call *)lua_touserdata(L, 1);
  lua_settop(L, 0);
  return c->body(L, c->args);
}

/* Runs body(L, args), which pushes nresults values, with the box as upvalue 1: directly
** when the running function has it, else in a closure called for it (its results end up
** on the caller's stack, its errors propagate). */
static void c_run(lua_State *L, c_body body, void *args, int nresults) {
  if (c_inside(L)) {
    body(L, args);
    return;
  }
  c_pushbox(L);
  lua_pushcclosure(L, c_outside, 1);
  c_call c = { body, args };
  lua_pushlightuserdata(L, &c);
  lua_call(L, 1, nresults);
}

/* "<op>: <core message without its own op>", or the core's message when op is NULL. */
static int c_raise(lua_State *L, qt_ctx *ctx, const char *core_op, const char *op) {
  if (op == NULL) return lq_raise(L, ctx);
  return lq_raise_as(L, ctx, core_op, op);
}

/* ================================================================ registering */

/* Every function qlua_setfuncs registers runs through here: upvalue 1 is the box, upvalue
** 2 the extension's function, called directly in this frame (so it sees the box as its
** own upvalue 1). A call that raises never leaves; l_state.c's next entry sees that. */
static int c_trampoline(lua_State *L) {
  lua_CFunction f = lua_tocfunction(L, lua_upvalueindex(2));
  lq_enter(L);
  int n = f(L);
  lq_leave(L);
  return n;
}

void qlua_setfuncs(lua_State *L, const luaL_Reg *l) {
  luaL_checkstack(L, 4, "qlua_setfuncs");
  c_pushbox(L);
  for (; l->name != NULL; l++) {
    if (l->func == NULL) {
      lua_pushboolean(L, 0);
    } else {
      lua_pushvalue(L, -1);
      lua_pushcfunction(L, l->func);
      lua_pushcclosure(L, c_trampoline, 2);
    }
    lua_setfield(L, -3, l->name);
  }
  lua_pop(L, 1);  /* the box */
}

/* ================================================================ tensors */

void *qlua_data(const qt_tensor *t) {
  if (t == NULL || t->storage == NULL || t->storage->freed || t->storage->data == NULL)
    return NULL;
  return (char *)t->storage->data + t->offset * (int64_t)qt_elsize(t->dtype);
}

int qlua_gpu_index(const qt_tensor *t) {
  if (t == NULL || t->storage == NULL || t->storage->device == NULL) return -1;
  return t->storage->device->kind == QT_DEV_CUDA ? t->storage->device->ordinal : -1;
}

/* ---------------------------------------------------------------- the stream */

typedef struct c_stream_args {
  const qt_tensor *t;
  const char *op;
  void *stream;
} c_stream_args;

static int c_stream_body(lua_State *L, void *p) {
  c_stream_args *a = (c_stream_args *)p;
  qt_ctx *ctx = lq_ctx(L);
  if (a->t == NULL || a->t->storage == NULL || a->t->storage->device == NULL)
    return luaL_error(L, "%s: tensor has been freed", a->op != NULL ? a->op : "stream");
  qt_device *dev = a->t->storage->device;
  if (qt_native_stream(ctx, dev, &a->stream) != 0) return c_raise(L, ctx, "stream", a->op);
  if (a->stream == NULL)
    return luaL_error(L, "%s: %s gave no stream", a->op != NULL ? a->op : "stream", dev->name);
  return 0;
}

void *qlua_cuda_stream(lua_State *L, const qt_tensor *t, const char *op) {
  c_stream_args a = { t, op, NULL };
  c_run(L, c_stream_body, &a, 0);
  return a.stream;
}

/* ---------------------------------------------------------------- new tensors */

typedef struct c_new_args {
  qt_dtype dtype;
  int ndim;
  const int64_t *size;
  const qt_tensor *like;
  const char *op;
  qt_tensor *out;
} c_new_args;

static int c_new_body(lua_State *L, void *p) {
  c_new_args *a = (c_new_args *)p;
  const char *op = a->op != NULL ? a->op : "empty";
  qt_ctx *ctx = lq_ctx(L);
  qt_device *dev = qt_cpu_device();
  if (a->like != NULL) {
    if (a->like->storage == NULL || a->like->storage->device == NULL)
      return luaL_error(L, "%s: tensor has been freed", op);
    dev = a->like->storage->device;
  }
  if (a->ndim > 0 && a->size == NULL)
    return luaL_error(L, "%s: no sizes given for %d dimensions", op, a->ndim);
  luaL_checkstack(L, 3, op);
  qt_tensor *t = lq_newtensor(L);
  if (qt_empty(ctx, t, dev, a->dtype, a->ndim, a->size) != 0)
    return c_raise(L, ctx, "empty", a->op);
  if (dev->kind == QT_DEV_CUDA && dev->ordinal >= 0 && dev->ordinal < 64)
    lq_state_of(L)->gpus_used |= (uint64_t)1 << dev->ordinal;  /* as lq_gpu records it */
  a->out = t;
  return 1;
}

qt_tensor *qlua_newtensor(lua_State *L, qt_dtype dtype, int ndim, const int64_t *size,
                          const qt_tensor *like, const char *op) {
  c_new_args a = { dtype, ndim, size, like, op, NULL };
  c_run(L, c_new_body, &a, 1);
  return a.out;
}

/* ================================================================ checks and errors */

qt_tensor *qlua_checkgpu(lua_State *L, int idx, int dtype, const char *op) {
  idx = lua_absindex(L, idx);
  qt_tensor *t = qlua_totensor(L, idx);
  if (t == NULL)
    qlua_error(L, op, "argument #%d must be a tensor, got %s", idx, luaL_typename(L, idx));
  if (t->storage == NULL || t->storage->freed) qlua_error(L, op, "tensor has been freed");
  if (qlua_gpu_index(t) < 0)
    qlua_error(L, op, "argument #%d is on %s, expected a GPU tensor", idx,
               t->storage->device != NULL ? t->storage->device->name : "no device");
  if (dtype != QLUA_ANY_DTYPE && (int)t->dtype != dtype) {
    if (dtype >= 0 && dtype < QT_NDTYPES)
      qlua_error(L, op, "argument #%d is %s, expected %s", idx, qt_dtypes[t->dtype].name,
                 qt_dtypes[dtype].name);
    qlua_error(L, op, "argument #%d is %s, expected an unknown dtype (%d)", idx,
               qt_dtypes[t->dtype].name, dtype);
  }
  return t;
}

int qlua_error(lua_State *L, const char *op, const char *fmt, ...) {
  char msg[QT_ERRLEN];
  size_t n = 0;
  if (op != NULL) {
    int k = snprintf(msg, sizeof msg, "%s: ", op);
    n = k < 0 ? 0 : ((size_t)k < sizeof msg ? (size_t)k : sizeof msg - 1);
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg + n, sizeof msg - n, fmt, ap);
  va_end(ap);
  return luaL_error(L, "%s", msg);
}
