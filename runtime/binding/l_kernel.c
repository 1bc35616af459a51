/*
** l_kernel.c — the Lua face of code the user brings: qlua.kernel (CUDA C++ compiled at run
** time), qlua.module (PTX, cubin, fatbin), the qlua.Kernel and qlua.Module userdata, and
** qlua.kernel_cache_clear. The checks and caches are the core's (core/kernel/kernel.c); this file
** turns Lua values into the core's arguments and back.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lqlua.h"

#define LK_KERNEL "qlua.Kernel"
#define LK_MODULE "qlua.Module"
#define LK_MAXLIST 64  /* options, headers, expressions a call may give */

typedef struct lk_kernel { qt_kernel *k; } lk_kernel;
typedef struct lk_module { qt_module *m; } lk_module;

/* ================================================================ kernel objects */

static qt_kernel *lk_checkkernel(lua_State *L, int idx) {
  lk_kernel *u = luaL_checkudata(L, idx, LK_KERNEL);
  if (u->k == NULL) luaL_error(L, "kernel: this kernel object is empty");
  return u->k;
}

/* Pushes a kernel object that takes over k. */
static void lk_pushkernel(lua_State *L, qt_kernel *k) {
  lk_kernel *u = lua_newuserdatauv(L, sizeof *u, 0);
  u->k = NULL;
  luaL_setmetatable(L, LK_KERNEL);
  u->k = k;
}

static int lk_kernel_gc(lua_State *L) {
  lk_kernel *u = luaL_checkudata(L, 1, LK_KERNEL);
  qt_kernel_release(u->k);
  u->k = NULL;
  return 0;
}

/* "float *x, int n" */
static void lk_pushsignature(lua_State *L, const qt_kernel *k) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  int n = qt_kernel_nparams(k);
  if (n < 0) {
    luaL_addstring(&b, "?");
  } else {
    for (int i = 0; i < n; i++) {
      const qt_param *p = qt_kernel_param(k, i);
      if (i > 0) luaL_addstring(&b, ", ");
      luaL_addstring(&b, p->type);
      if (p->name[0]) {
        if (p->type[strlen(p->type) - 1] != '*') luaL_addchar(&b, ' ');
        luaL_addstring(&b, p->name);
      }
    }
  }
  luaL_pushresult(&b);
}

static int lk_kernel_tostring(lua_State *L) {
  lk_kernel *u = luaL_checkudata(L, 1, LK_KERNEL);
  if (u->k == NULL) {
    lua_pushliteral(L, "qlua.Kernel (empty)");
    return 1;
  }
  lk_pushsignature(L, u->k);
  lua_pushfstring(L, "qlua.Kernel %s(%s) on %s", qt_kernel_name(u->k), lua_tostring(L, -1),
                  qt_kernel_device(u->k)->name);
  return 1;
}

static int lk_kernel_signature(lua_State *L) {
  lk_pushsignature(L, lk_checkkernel(L, 1));
  return 1;
}

static int lk_kernel_attributes(lua_State *L) {
  qt_kernel *k = lk_checkkernel(L, 1);
  const qt_kernel_info *in = qt_kernel_limits(k);
  lua_createtable(L, 0, 6);
  lua_pushinteger(L, in->num_regs);
  lua_setfield(L, -2, "registers");
  lua_pushinteger(L, in->max_threads);
  lua_setfield(L, -2, "max_threads");
  lua_pushinteger(L, (lua_Integer)in->static_shared);
  lua_setfield(L, -2, "static_shared");
  lua_pushinteger(L, (lua_Integer)in->max_dynamic_shared);
  lua_setfield(L, -2, "max_dynamic_shared");
  lua_pushinteger(L, qt_kernel_nparams(k) >= 0 ? qt_kernel_nparams(k) : in->nparams);
  lua_setfield(L, -2, "params");
  lua_pushstring(L, qt_kernel_device(k)->name);
  lua_setfield(L, -2, "device");
  return 1;
}

/* ================================================================ launches */

/* grid or block at idx: a positive integer, or {x [, y [, z]]}. */
static void lk_checkdims(lua_State *L, int idx, const char *what, const char *name,
                         unsigned dims[3]) {
  dims[0] = dims[1] = dims[2] = 1;
  if (lua_type(L, idx) == LUA_TNUMBER) {
    int isint;
    lua_Integer v = lua_tointegerx(L, idx, &isint);
    if (!isint || v < 1 || v > 0xffffffffLL)
      luaL_error(L, "launch: kernel '%s': %s must be a positive integer or {x, y, z}, got %s",
                 name, what, luaL_tolstring(L, idx, NULL));
    dims[0] = (unsigned)v;
    return;
  }
  if (lua_type(L, idx) != LUA_TTABLE)
    luaL_error(L, "launch: kernel '%s': %s must be a positive integer or {x, y, z}, got %s",
               name, what, luaL_typename(L, idx));
  lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
  if (n < 1 || n > 3)
    luaL_error(L, "launch: kernel '%s': %s must have 1 to 3 sizes, got %I", name, what, n);
  for (int d = 0; d < n; d++) {
    lua_rawgeti(L, idx, d + 1);
    int isint;
    lua_Integer v = lua_tointegerx(L, -1, &isint);
    if (!isint || v < 1 || v > 0xffffffffLL)
      luaL_error(L, "launch: kernel '%s': %s[%d] must be a positive integer, got %s", name,
                 what, d + 1, luaL_tolstring(L, -1, NULL));
    dims[d] = (unsigned)v;
    lua_pop(L, 1);
  }
}

/* The Lua value at idx as a launch argument. */
static void lk_toarg(lua_State *L, int idx, const char *name, int position, qt_kernel_arg *a) {
  memset(a, 0, sizeof *a);
  switch (lua_type(L, idx)) {
    case LUA_TNUMBER: {
      bool is_float;
      a->value = lq_toscalar(L, idx, &is_float);
      a->is_float = is_float;
      return;
    }
    case LUA_TBOOLEAN:
      a->value = qt_scalar_i(lua_toboolean(L, idx));
      a->is_bool = true;
      return;
    default: {
      const qt_tensor *t = qlua_totensor(L, idx);
      if (t != NULL) {
        a->tensor = t;
        return;
      }
      luaL_error(L, "launch: kernel '%s': argument %d must be a tensor, a number or a boolean, "
                 "got %s", name, position, luaL_typename(L, idx));
    }
  }
}

static int lk_launch_args(lua_State *L, qt_kernel *k, const qt_launch_cfg *cfg, int first,
                          int nargs) {
  if (nargs > QT_KERNEL_MAXPARAMS)
    return luaL_error(L, "launch: kernel '%s': %d arguments; at most %d", qt_kernel_name(k),
                      nargs, QT_KERNEL_MAXPARAMS);
  qt_kernel_arg args[QT_KERNEL_MAXPARAMS];
  for (int i = 0; i < nargs; i++) lk_toarg(L, first + i, qt_kernel_name(k), i + 1, &args[i]);
  qt_ctx *ctx = lq_ctx(L);
  if (qt_kernel_launch(ctx, k, cfg, nargs, args) != 0) return lq_raise(L, ctx);
  return 0;
}

/* k(grid, block, a1, a2, ...) */
static int lk_kernel_call(lua_State *L) {
  qt_kernel *k = lk_checkkernel(L, 1);
  qt_launch_cfg cfg;
  memset(&cfg, 0, sizeof cfg);
  lk_checkdims(L, 2, "grid", qt_kernel_name(k), cfg.grid);
  lk_checkdims(L, 3, "block", qt_kernel_name(k), cfg.block);
  return lk_launch_args(L, k, &cfg, 4, lua_gettop(L) - 3);
}

/* k:launch{grid=, block=, shared=, args={...}} */
static int lk_kernel_launch(lua_State *L) {
  qt_kernel *k = lk_checkkernel(L, 1);
  const char *name = qt_kernel_name(k);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, 2) != 0) {
    const char *key = lq_keystring(L, -2, "launch");
    if (key == NULL || (strcmp(key, "grid") && strcmp(key, "block") && strcmp(key, "shared") &&
                        strcmp(key, "args")))
      luaL_error(L, "launch: kernel '%s': unknown field %s (grid, block, shared, args)", name,
                 key ? key : luaL_tolstring(L, -2, NULL));
    lua_pop(L, 1);
  }
  qt_launch_cfg cfg;
  memset(&cfg, 0, sizeof cfg);
  lua_getfield(L, 2, "grid");
  lk_checkdims(L, lua_gettop(L), "grid", name, cfg.grid);
  lua_getfield(L, 2, "block");
  lk_checkdims(L, lua_gettop(L), "block", name, cfg.block);
  lua_getfield(L, 2, "shared");
  if (!lua_isnil(L, -1)) {
    int isint;
    lua_Integer v = lua_tointegerx(L, -1, &isint);
    if (!isint || v < 0)
      luaL_error(L, "launch: kernel '%s': shared must be a byte count >= 0, got %s", name,
                 luaL_tolstring(L, -1, NULL));
    cfg.shared = (size_t)v;
  }
  lua_getfield(L, 2, "args");
  int nargs = 0, args_at = lua_gettop(L);
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TTABLE)
      luaL_error(L, "launch: kernel '%s': args must be a table, got %s", name,
                 luaL_typename(L, -1));
    nargs = (int)lua_rawlen(L, args_at);
  }
  luaL_checkstack(L, nargs + 4, "launch arguments");
  int first = lua_gettop(L) + 1;
  for (int i = 1; i <= nargs; i++) lua_rawgeti(L, args_at, i);
  return lk_launch_args(L, k, &cfg, first, nargs);
}

/* ================================================================ qlua.kernel */

/* A list of strings at opts[field] into list (borrowed from the table, which stays on the
** stack for the call). */
static int lk_checklist(lua_State *L, int opts, const char *field, const char **list) {
  int n = 0;
  if (lua_getfield(L, opts, field) != LUA_TNIL) {
    if (!lua_istable(L, -1))
      luaL_error(L, "kernel: opts.%s must be a list of strings, got %s", field,
                 luaL_typename(L, -1));
    int len = (int)lua_rawlen(L, -1);
    if (len > LK_MAXLIST) luaL_error(L, "kernel: opts.%s has %d entries; at most %d", field, len, LK_MAXLIST);
    for (int i = 1; i <= len; i++) {
      lua_rawgeti(L, -1, i);
      if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "kernel: opts.%s[%d] must be a string, got %s", field, i,
                   luaL_typename(L, -1));
      lua_pushfstring(L, "opts.%s[%d]", field, i);
      list[n++] = lq_tocstring(L, -2, "kernel", lua_tostring(L, -1));
      lua_pop(L, 2);
    }
  }
  lua_pop(L, 1);
  return n;
}

/* The device of opts.device, or the current GPU. */
static qt_device *lk_device(lua_State *L, int opts, const char *op) {
  if (opts > 0 && lua_getfield(L, opts, "device") != LUA_TNIL) {
    qt_device *dev = lq_checkdevice(L, lua_gettop(L), op);
    lua_pop(L, 1);
    return dev;
  }
  if (opts > 0) lua_pop(L, 1);
  if (qt_gpu_count() == 0)
    luaL_error(L, "%s: user kernels run on a GPU, and this qlua sees none (built without "
               "CUDA, or no GPU and driver)", op);
  return lq_device_by_name(L, op, "gpu");
}

static void lk_checkkeys(lua_State *L, int opts, const char *op, const char *const *keys) {
  lua_pushnil(L);
  while (lua_next(L, opts) != 0) {
    const char *key = lq_keystring(L, -2, op);
    bool known = false;
    for (int i = 0; key != NULL && keys[i] != NULL; i++) known |= strcmp(key, keys[i]) == 0;
    if (!known) {
      luaL_Buffer b;
      luaL_buffinit(L, &b);
      for (int i = 0; keys[i] != NULL; i++) {
        if (i) luaL_addstring(&b, ", ");
        luaL_addstring(&b, keys[i]);
      }
      luaL_pushresult(&b);
      luaL_error(L, "%s: unknown option %s (%s)", op,
                 key ? key : luaL_tolstring(L, -3, NULL), lua_tostring(L, -1));
    }
    lua_pop(L, 1);
  }
}

static int q_kernel(lua_State *L) {
  const char *source = lq_checkcstring(L, 1, "kernel", "the source");
  const char *name = lq_checkcstring(L, 2, "kernel", "the kernel name");
  int opts = 0;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    opts = 3;
    static const char *const keys[] = { "options", "headers", "name_expressions", "signature",
                                        "device", NULL };
    lk_checkkeys(L, opts, "kernel", keys);
  }
  const char *options[LK_MAXLIST], *expressions[LK_MAXLIST];
  const char *header_names[LK_MAXLIST], *header_sources[LK_MAXLIST];
  qt_kernel_opts ko;
  memset(&ko, 0, sizeof ko);
  if (opts) {
    ko.noptions = lk_checklist(L, opts, "options", options);
    ko.nexpressions = lk_checklist(L, opts, "name_expressions", expressions);
    if (lua_getfield(L, opts, "headers") != LUA_TNIL) {
      if (!lua_istable(L, -1))
        luaL_error(L, "kernel: opts.headers must be a table of name = source, got %s",
                   luaL_typename(L, -1));
      int at = lua_gettop(L);
      lua_pushnil(L);
      while (lua_next(L, at) != 0) {
        if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
          luaL_error(L, "kernel: opts.headers must map names to sources (strings)");
        if (ko.nheaders == LK_MAXLIST) luaL_error(L, "kernel: more than %d headers", LK_MAXLIST);
        header_names[ko.nheaders] = lq_tocstring(L, -2, "kernel", "a header name");
        header_sources[ko.nheaders++] = lq_tocstring(L, -1, "kernel", "a header's source");
        lua_pop(L, 1);
      }
    }
    lua_pop(L, 1);  /* the headers table stays reachable through opts */
    if (lua_getfield(L, opts, "signature") != LUA_TNIL) {
      if (lua_type(L, -1) != LUA_TSTRING)
        luaL_error(L, "kernel: opts.signature must be a string, got %s", luaL_typename(L, -1));
      ko.signature = lq_tocstring(L, -1, "kernel", "opts.signature");
    }
    lua_pop(L, 1);
  }
  ko.options = options;
  ko.expressions = expressions;
  ko.header_names = header_names;
  ko.header_sources = header_sources;
  qt_device *dev = lk_device(L, opts, "kernel");
  qt_ctx *ctx = lq_ctx(L);
  qt_kernel *k = NULL;
  if (qt_kernel_compile(ctx, &k, dev, source, name, &ko) != 0) return lq_raise(L, ctx);
  lk_pushkernel(L, k);
  return 1;
}

static int q_kernel_cache_clear(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  if (qt_kernel_cache_clear(ctx) != 0) return lq_raise(L, ctx);
  return 0;
}

/* ================================================================ qlua.module */

static qt_module *lk_checkmodule(lua_State *L, int idx) {
  lk_module *u = luaL_checkudata(L, idx, LK_MODULE);
  if (u->m == NULL) luaL_error(L, "module: this module object is empty");
  return u->m;
}

static int lk_module_gc(lua_State *L) {
  lk_module *u = luaL_checkudata(L, 1, LK_MODULE);
  qt_module_release(u->m);
  u->m = NULL;
  return 0;
}

/* Whether s is an image rather than a path: cubin (ELF), fatbin, or PTX text. */
static bool lk_is_image(const char *s, size_t n) {
  if (n >= 4 && memcmp(s, "\x7f" "ELF", 4) == 0) return true;
  if (n >= 4 && (unsigned char)s[0] == 0x50 && (unsigned char)s[1] == 0xed &&
      (unsigned char)s[2] == 0x55 && (unsigned char)s[3] == 0xba)
    return true;
  return memchr(s, '\n', n) != NULL || strstr(s, ".version") != NULL;
}

/* module(path_or_bytes [, {signatures = {name = "float *x, int n"}, device = }]) */
static int q_module(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  if (!lk_is_image(s, n)) lq_tocstring(L, 1, "module", "the path");  /* bytes may hold NULs */
  int opts = 0;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    opts = 2;
    static const char *const keys[] = { "signatures", "device", NULL };
    lk_checkkeys(L, opts, "module", keys);
  }
  qt_device *dev = lk_device(L, opts, "module");
  const char *image = s;
  size_t nbytes = n;
  if (!lk_is_image(s, n)) {  /* a path: read it whole */
    FILE *f = fopen(s, "rb");
    if (f == NULL) return luaL_error(L, "module: cannot open '%s': %s", s, strerror(errno));
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) luaL_addlstring(&b, chunk, got);
    bool failed = ferror(f) != 0;
    fclose(f);
    if (failed) return luaL_error(L, "module: cannot read '%s'", s);
    luaL_pushresult(&b);
    image = lua_tolstring(L, -1, &nbytes);
  }
  qt_ctx *ctx = lq_ctx(L);
  lk_module *u = lua_newuserdatauv(L, sizeof *u, 1);
  u->m = NULL;
  luaL_setmetatable(L, LK_MODULE);
  int type = opts ? lua_getfield(L, opts, "signatures") : LUA_TNIL;
  if (type == LUA_TNIL) {
    if (opts) lua_pop(L, 1);
    lua_newtable(L);
  } else if (type != LUA_TTABLE) {
    return luaL_error(L, "module: opts.signatures must map kernel names to signatures, got %s",
                      lua_typename(L, type));
  }
  lua_setiuservalue(L, -2, 1);  /* the signatures, for m:kernel and m.name */
  if (qt_module_load(ctx, &u->m, dev, image, nbytes) != 0) return lq_raise(L, ctx);
  return 1;
}

static int lk_module_kernel(lua_State *L) {
  qt_module *m = lk_checkmodule(L, 1);
  const char *name = lq_checkcstring(L, 2, "kernel", "the kernel name");
  const char *signature =
      lua_isnoneornil(L, 3) ? NULL : lq_checkcstring(L, 3, "kernel", "the signature");
  if (signature == NULL) {
    lua_getiuservalue(L, 1, 1);
    if (lua_getfield(L, -1, name) == LUA_TSTRING)
      signature = lq_tocstring(L, -1, "kernel", "the module's signature");
  }
  qt_ctx *ctx = lq_ctx(L);
  qt_kernel *k = NULL;
  if (qt_module_kernel(ctx, &k, m, name, signature) != 0) return lq_raise(L, ctx);
  lk_pushkernel(L, k);
  return 1;
}

static void lk_collect_name(const char *name, void *arg) {
  lua_State *L = arg;
  lua_pushstring(L, name);
  lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
}

static int lk_module_kernels(lua_State *L) {
  qt_module *m = lk_checkmodule(L, 1);
  qt_ctx *ctx = lq_ctx(L);
  lua_newtable(L);
  if (qt_module_kernel_names(ctx, m, lk_collect_name, L) != 0) return lq_raise(L, ctx);
  /* sorted, so listings do not depend on the driver's order */
  lua_getglobal(L, "table");
  if (lua_getfield(L, -1, "sort") == LUA_TFUNCTION) {
    lua_pushvalue(L, -3);
    lua_call(L, 1, 0);
  } else {
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return 1;
}

/* m.name: the methods first, then the kernel of that name. */
static int lk_module_index(lua_State *L) {
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(2)) != LUA_TNIL) return 1;
  lua_pop(L, 1);
  lua_settop(L, 2);
  return lk_module_kernel(L);
}

static int lk_module_tostring(lua_State *L) {
  lk_module *u = luaL_checkudata(L, 1, LK_MODULE);
  if (u->m == NULL) lua_pushliteral(L, "qlua.Module (empty)");
  else lua_pushfstring(L, "qlua.Module on %s", qt_module_device(u->m)->name);
  return 1;
}

/* ================================================================ qlua.elementwise, qlua.reduction */

#define LK_ELEMENTWISE "qlua.ElementwiseKernel"
#define LK_REDUCTION "qlua.ReductionKernel"

typedef struct lk_codegen { qt_codegen *g; } lk_codegen;

static lk_codegen *lk_tocodegen(lua_State *L, int idx) {
  lk_codegen *u = luaL_testudata(L, idx, LK_ELEMENTWISE);
  if (u == NULL) u = luaL_checkudata(L, idx, LK_REDUCTION);
  return u;
}

static int lk_codegen_gc(lua_State *L) {
  lk_codegen *u = lk_tocodegen(L, 1);
  qt_codegen_release(u->g);
  u->g = NULL;
  return 0;
}

static void lk_pushcodegen(lua_State *L, qt_codegen *g, const char *meta) {
  lk_codegen *u = lua_newuserdatauv(L, sizeof *u, 0);
  u->g = NULL;
  luaL_setmetatable(L, meta);
  u->g = g;
}

/* f(a1, a2, ...): inputs, then outputs to write (optional); returns the outputs. A
** reduction takes a last table {dim = d} to reduce along d (1-based) instead of over
** everything. */
static int lk_codegen_call(lua_State *L) {
  lk_codegen *u = lk_tocodegen(L, 1);
  bool reduction = luaL_testudata(L, 1, LK_REDUCTION) != NULL;
  const char *op = reduction ? "reduction" : "elementwise";
  if (u->g == NULL) return luaL_error(L, "%s: this kernel object is empty", op);
  qt_codegen *g = u->g;
  int top = lua_gettop(L), dim = -1;
  if (reduction && top >= 2 && lua_type(L, top) == LUA_TTABLE && qlua_totensor(L, top) == NULL) {
    lua_pushnil(L);
    while (lua_next(L, top) != 0) {
      const char *key = lq_keystring(L, -2, "reduction");
      if (key == NULL || strcmp(key, "dim") != 0)
        luaL_error(L, "reduction: unknown option %s (dim)", luaL_tolstring(L, -2, NULL));
      lua_pop(L, 1);
    }
    lua_getfield(L, top, "dim");
    if (!lua_isnil(L, -1)) {
      int isint;
      lua_Integer d = lua_tointegerx(L, -1, &isint);
      if (!isint || d < 1) luaL_error(L, "reduction: dim must be a positive integer");
      dim = d > 64 ? 64 : (int)d - 1;
    }
    lua_pop(L, 1);
    top--;
  }
  int nargs = top - 1;
  if (nargs > QT_KERNEL_MAXPARAMS)
    return luaL_error(L, "%s: %d arguments; at most %d", op, nargs, QT_KERNEL_MAXPARAMS);
  qt_kernel_arg args[QT_KERNEL_MAXPARAMS];
  for (int i = 0; i < nargs; i++) {
    lk_toarg(L, i + 2, op, i + 1, &args[i]);
  }
  int nout = qt_codegen_nout(g);
  luaL_checkstack(L, nout + 2, "outputs");
  qt_tensor *slots[QT_KERNEL_MAXPARAMS];
  for (int o = 0; o < nout; o++) slots[o] = lq_newtensor(L);  /* anchored before the call */
  qt_tensor results[QT_KERNEL_MAXPARAMS];
  qt_ctx *ctx = lq_ctx(L);
  if (qt_codegen_call(ctx, g, nargs, args, dim, results) != 0) return lq_raise(L, ctx);
  for (int o = 0; o < nout; o++) *slots[o] = results[o];  /* the references move in */
  return nout;
}

static int lk_codegen_tostring(lua_State *L) {
  bool reduction = luaL_testudata(L, 1, LK_REDUCTION) != NULL;
  lk_tocodegen(L, 1);
  lua_pushstring(L, reduction ? LK_REDUCTION : LK_ELEMENTWISE);
  return 1;
}

/* elementwise(in_params, out_params, body [, name | {name=, preamble=}]) */
static int q_elementwise(lua_State *L) {
  const char *op = "elementwise";
  const char *in = lq_checkcstring(L, 1, op, "in_params");
  const char *out = lq_checkcstring(L, 2, op, "out_params");
  const char *body = lq_checkcstring(L, 3, op, "the body");
  const char *name = NULL, *preamble = NULL;
  if (lua_type(L, 4) == LUA_TSTRING) {
    name = lq_tocstring(L, 4, op, "the name");
  } else if (!lua_isnoneornil(L, 4)) {
    luaL_checktype(L, 4, LUA_TTABLE);
    static const char *const keys[] = { "name", "preamble", NULL };
    lk_checkkeys(L, 4, "elementwise", keys);
    if (lua_getfield(L, 4, "name") != LUA_TNIL) name = lq_checkcstring(L, -1, op, "opts.name");
    if (lua_getfield(L, 4, "preamble") != LUA_TNIL)
      preamble = lq_checkcstring(L, -1, op, "opts.preamble");
  }
  qt_ctx *ctx = lq_ctx(L);
  qt_codegen *g = NULL;
  if (qt_elementwise_new(ctx, &g, in, out, body, name, preamble) != 0) return lq_raise(L, ctx);
  lk_pushcodegen(L, g, LK_ELEMENTWISE);
  return 1;
}

static const char *lk_field(lua_State *L, int t, const char *key, bool required) {
  int type = lua_getfield(L, t, key);
  if (type == LUA_TNIL && !required) {
    lua_pop(L, 1);
    return NULL;
  }
  if (type != LUA_TSTRING && type != LUA_TNUMBER)
    luaL_error(L, "reduction: %s must be a string, got %s", key, lua_typename(L, type));
  return lq_tocstring(L, -1, "reduction", key);  /* stays on the stack for the call */
}

/* reduction{in_params=, out_params=, map_expr=, reduce_expr=, post_map_expr=, identity=,
** reduce_type=, name=, preamble=} */
static int q_reduction(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  static const char *const keys[] = { "in_params", "out_params", "map_expr", "reduce_expr",
                                      "post_map_expr", "identity", "reduce_type", "name",
                                      "preamble", NULL };
  lk_checkkeys(L, 1, "reduction", keys);
  qt_reduction_spec spec;
  memset(&spec, 0, sizeof spec);
  spec.in_params = lk_field(L, 1, "in_params", true);
  spec.out_params = lk_field(L, 1, "out_params", true);
  spec.map_expr = lk_field(L, 1, "map_expr", true);
  spec.reduce_expr = lk_field(L, 1, "reduce_expr", true);
  spec.identity = lk_field(L, 1, "identity", true);
  spec.post_map_expr = lk_field(L, 1, "post_map_expr", false);
  spec.reduce_type = lk_field(L, 1, "reduce_type", false);
  spec.name = lk_field(L, 1, "name", false);
  spec.preamble = lk_field(L, 1, "preamble", false);
  qt_ctx *ctx = lq_ctx(L);
  qt_codegen *g = NULL;
  if (qt_reduction_new(ctx, &g, &spec) != 0) return lq_raise(L, ctx);
  lk_pushcodegen(L, g, LK_REDUCTION);
  return 1;
}

/* ================================================================ wiring */

static const lq_Reg lk_kernel_methods[] = {
  {"launch", lk_kernel_launch, 2, "{grid =, block =, shared =, args = {...}}",
   "launches the kernel with dynamic shared memory (k(grid, block, ...) without)"},
  {"attributes", lk_kernel_attributes, 1, "()",
   "{registers =, max_threads =, static_shared =, max_dynamic_shared =, params =, device =}"},
  {"signature", lk_kernel_signature, 1, "()",
   "the kernel's parameters as a string: \"const float *x, int n\""},
  {NULL, NULL, 0, NULL, NULL}
};
static const lq_Reg lk_kernel_meta[] = {
  {"__call", lk_kernel_call, LQ_VARARGS, NULL, NULL},
  {"__gc", lk_kernel_gc, 1, NULL, NULL},
  {"__close", lk_kernel_gc, 2, NULL, NULL},
  {"__tostring", lk_kernel_tostring, 1, NULL, NULL},
  {NULL, NULL, 0, NULL, NULL}
};
static const lq_Reg lk_module_methods[] = {
  {"kernel", lk_module_kernel, 3, "(name [, signature])",
   "the module's kernel name as a qlua.Kernel"},
  {"kernels", lk_module_kernels, 1, "()", "the names of the module's kernels"},
  {NULL, NULL, 0, NULL, NULL}
};
static const lq_Reg lk_module_meta[] = {
  {"__gc", lk_module_gc, 1, NULL, NULL},
  {"__close", lk_module_gc, 2, NULL, NULL},
  {"__tostring", lk_module_tostring, 1, NULL, NULL},
  {NULL, NULL, 0, NULL, NULL}
};
static const lq_Reg lk_codegen_meta[] = {
  {"__call", lk_codegen_call, LQ_VARARGS, NULL, NULL},
  {"__gc", lk_codegen_gc, 1, NULL, NULL},
  {"__close", lk_codegen_gc, 2, NULL, NULL},
  {"__tostring", lk_codegen_tostring, 1, NULL, NULL},
  {NULL, NULL, 0, NULL, NULL}
};
static const lq_Reg lk_funcs[] = {
  {"kernel", q_kernel, 3, "(source, name [, opts])",
   "compiles CUDA C++ with NVRTC into a qlua.Kernel; k(grid, block, args...) launches it"},
  {"module", q_module, 2, "(path_or_bytes [, opts])",
   "loads PTX, cubin or fatbin as a qlua.Module; m.name or m:kernel(name) gives its kernels"},
  {"elementwise", q_elementwise, 4, "(in_params, out_params, body [, name | opts])",
   "a callable GPU kernel running body once per element, as CuPy's ElementwiseKernel"},
  {"reduction", q_reduction, 1, "{in_params =, out_params =, map_expr =, reduce_expr =, identity =, ...}",
   "a callable GPU reduction f(x [, {dim = d}]), as CuPy's ReductionKernel"},
  {"kernel_cache_clear", q_kernel_cache_clear, 0, "()",
   "empties the user kernels' memory and disk caches"},
  {NULL, NULL, 0, NULL, NULL}
};

/* The metatable below the methods table on the stack becomes a class users extend, as
** qlua.Tensor is (l_tensor.c): a name it lacks reads the method, and one written into it
** becomes a method. Pops the methods table. */
static void lk_class(lua_State *L) {
  lua_createtable(L, 0, 2);
  lua_pushvalue(L, -2);
  lua_setfield(L, -2, "__index");
  lua_pushvalue(L, -2);
  lua_setfield(L, -2, "__newindex");
  lua_setmetatable(L, -3);
  lua_pop(L, 1);
}

void lq_open_kernel(lua_State *L, int box_idx, int module_idx) {
  box_idx = lua_absindex(L, box_idx);
  module_idx = lua_absindex(L, module_idx);
  luaL_newmetatable(L, LK_KERNEL);
  lq_setfuncs(L, lk_kernel_meta, box_idx, true, NULL);
  lua_newtable(L);
  lq_setfuncs(L, lk_kernel_methods, box_idx, true, "Kernel");
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "__index");
  lk_class(L);
  lua_setfield(L, module_idx, "Kernel");        /* qlua.Kernel */

  luaL_newmetatable(L, LK_MODULE);
  lq_setfuncs(L, lk_module_meta, box_idx, true, NULL);
  lua_newtable(L);
  lq_setfuncs(L, lk_module_methods, box_idx, true, "Module");
  lua_pushvalue(L, box_idx);
  lua_pushvalue(L, -2);
  lua_pushcclosure(L, lk_module_index, 2);      /* upvalues: box, methods */
  lua_setfield(L, -3, "__index");
  lk_class(L);
  lua_setfield(L, module_idx, "Module");        /* qlua.Module */

  const char *codegen[2] = { LK_ELEMENTWISE, LK_REDUCTION };
  for (int i = 0; i < 2; i++) {
    luaL_newmetatable(L, codegen[i]);
    lq_setfuncs(L, lk_codegen_meta, box_idx, true, NULL);
    lua_pop(L, 1);
  }

  lua_pushvalue(L, module_idx);
  lq_setfuncs(L, lk_funcs, box_idx, false, "qlua");
  lua_pop(L, 1);
}
