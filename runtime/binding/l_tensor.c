/*
** l_tensor.c — the qlua.Tensor userdata's methods and metamethods, and lq_open_tensor,
** which wires them into its metatable. The userdata's life is l_state.c's; the
** argument parsing is l_args.c's.
**
** Dims and positions are 1-based here and 0-based in the core; the conversions and the
** range checks (so that messages show the values the user wrote) are all in this file.
*/
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "lqlua.h"

/* ================================================================ inspection */

static void t_pushsizes(lua_State *L, int n, const int64_t *v) {
  lua_createtable(L, n, 0);
  for (int d = 0; d < n; d++) {
    lua_pushinteger(L, (lua_Integer)v[d]);
    lua_rawseti(L, -2, d + 1);
  }
}

/* shape() and size() (API.md: the same) give a table that prints as {2, 3} (l_help.c). */
static int t_shape(lua_State *L) {
  qt_tensor *t = lq_checklive(L, 1, "shape");
  lq_pushshape(L, t->ndim, t->size);
  return 1;
}

static int t_size(lua_State *L) {
  qt_tensor *t = lq_checklive(L, 1, "size");
  if (lua_isnoneornil(L, 2)) lq_pushshape(L, t->ndim, t->size);
  else lua_pushinteger(L, (lua_Integer)t->size[lq_checkdim(L, 2, t, "size")]);
  return 1;
}

static int t_stride(lua_State *L) {
  qt_tensor *t = lq_checklive(L, 1, "stride");
  if (lua_isnoneornil(L, 2)) t_pushsizes(L, t->ndim, t->stride);
  else lua_pushinteger(L, (lua_Integer)t->stride[lq_checkdim(L, 2, t, "stride")]);
  return 1;
}

static int t_dim(lua_State *L) {
  lua_pushinteger(L, lq_checklive(L, 1, "dim")->ndim);
  return 1;
}

static int t_numel(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)qt_numel(lq_checklive(L, 1, "numel")));
  return 1;
}

static int t_len(lua_State *L) {
  qt_tensor *t = lq_checklive(L, 1, "len");
  if (t->ndim == 0) return luaL_error(L, "len: a 0-d tensor has no length");
  lua_pushinteger(L, (lua_Integer)t->size[0]);
  return 1;
}

static int t_dtype(lua_State *L) {
  lua_pushstring(L, qt_dtypes[lq_checklive(L, 1, "dtype")->dtype].name);
  return 1;
}

static int t_device(lua_State *L) {
  qt_tensor *t = lq_checklive(L, 1, "device");
  lua_pushstring(L, t->storage->device != NULL ? t->storage->device->name : "?");
  return 1;
}

static int t_is_contiguous(lua_State *L) {
  lua_pushboolean(L, qt_is_contiguous(lq_checklive(L, 1, "is_contiguous")));
  return 1;
}

/* autograd's view check: the storage's write count, whether t covers only part of its
** storage (a narrow, a select, a strided slice: another tensor may see the rest), and the
** storage as a light userdata (which tensors share memory: the engine's gradients) */
static int t_version(lua_State *L) {
  qt_tensor *t = lq_checklive(L, 1, "_version");
  qt_storage *s = t->storage;
  lua_pushinteger(L, s != NULL ? (lua_Integer)s->version : 0);
  lua_pushboolean(L, s != NULL && (t->offset != 0 ||
                                   (size_t)qt_numel(t) * qt_elsize(t->dtype) != s->nbytes));
  if (s != NULL) lua_pushlightuserdata(L, s);
  else lua_pushnil(L);
  return 3;
}

static int t_item(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "item");
  int64_t n = qt_numel(t);
  if (n != 1) return luaL_error(L, "item: tensor has %I elements, expected 1", (lua_Integer)n);
  int64_t pos[QT_MAXDIM] = {0};
  qt_scalar v;
  if (qt_get(ctx, t, pos, &v) != 0) return lq_raise_as(L, ctx, "get", "item");
  lq_pushscalar(L, t->dtype, v);
  return 1;
}


/* ================================================================ views */

/* view/reshape: at most one -1. */
static void t_checkviewshape(lua_State *L, int arg, const char *op, int *ndim, int64_t *size) {
  lq_checkend(L, lq_checkshape(L, arg, op, LQ_SHAPE_INFER, ndim, size), op, true);
  int inferred = 0;
  for (int d = 0; d < *ndim; d++)
    if (size[d] == -1 && ++inferred > 1) luaL_error(L, "%s: only one size may be -1", op);
}

static int t_view(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "view");
  int ndim;
  int64_t size[QT_MAXDIM];
  t_checkviewshape(L, 2, "view", &ndim, size);
  qt_tensor *out = lq_newtensor(L);
  if (qt_view_as(ctx, out, t, ndim, size) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_reshape(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "reshape");
  int ndim;
  int64_t size[QT_MAXDIM];
  t_checkviewshape(L, 2, "reshape", &ndim, size);
  qt_tensor *out = lq_newtensor(L);
  if (qt_reshape(ctx, out, t, ndim, size) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_narrow(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "narrow");
  int dim = lq_checkdim(L, 2, t, "narrow");
  lua_Integer start = luaL_checkinteger(L, 3), length = luaL_checkinteger(L, 4);
  lua_Integer n = (lua_Integer)t->size[dim];
  /* start - 1 > n, not start > n + 1: n may be math.maxinteger (an expanded empty tensor) */
  if (start < 1 || start - 1 > n)
    return luaL_error(L, "narrow: start %I out of range (1..%I) for dim %d", start,
                      n < LUA_MAXINTEGER ? n + 1 : n, dim + 1);
  if (length < 0) return luaL_error(L, "narrow: length %I is negative", length);
  if (length > n - (start - 1))
    return luaL_error(L, "narrow: start %I and length %I exceed size %I of dim %d", start, length,
                      n, dim + 1);
  qt_tensor *out = lq_newtensor(L);
  if (qt_narrow(ctx, out, t, dim, (int64_t)(start - 1), (int64_t)length) != 0)
    return lq_raise(L, ctx);
  return 1;
}

/* select(dim, i) and the row views of t[i]; i 1-based, checked here. */
static qt_tensor *t_pushselect(lua_State *L, qt_ctx *ctx, const qt_tensor *t, int dim,
                               lua_Integer i, const char *op) {
  if (i < 1 || i > (lua_Integer)t->size[dim]) {
    if (dim == 0 && strcmp(op, "index") == 0)
      luaL_error(L, "index: %I out of range (1..%I)", i, (lua_Integer)t->size[dim]);
    luaL_error(L, "%s: index %I out of range (1..%I) for dim %d", op, i,
               (lua_Integer)t->size[dim], dim + 1);
  }
  qt_tensor *out = lq_newtensor(L);
  if (qt_select(ctx, out, t, dim, (int64_t)(i - 1)) != 0) lq_raise_as(L, ctx, "select", op);
  return out;
}

static int t_select(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "select");
  int dim = lq_checkdim(L, 2, t, "select");
  t_pushselect(L, ctx, t, dim, luaL_checkinteger(L, 3), "select");
  return 1;
}

static int t_transpose(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "transpose");
  int d1 = lq_checkdim(L, 2, t, "transpose"), d2 = lq_checkdim(L, 3, t, "transpose");
  qt_tensor *out = lq_newtensor(L);
  if (qt_transpose(ctx, out, t, d1, d2) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_t(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "t");
  if (t->ndim < 2) {
    lua_settop(L, 1);
    return 1;
  }
  if (t->ndim > 2)
    return luaL_error(L, "t: expects a tensor of at most 2 dims, got %d (use transpose)", t->ndim);
  qt_tensor *out = lq_newtensor(L);
  if (qt_transpose(ctx, out, t, 0, 1) != 0) return lq_raise(L, ctx);
  return 1;
}

/* permute(d1, d2, ...) or permute{d1, d2, ...}: a permutation of 1..ndim. */
static int t_permute(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "permute");
  int64_t dims[QT_MAXDIM];
  int n;
  lq_checkend(L, lq_checkshape(L, 2, "permute", 0, &n, dims), "permute", true);
  if (n != t->ndim)
    return luaL_error(L, "permute: got %d dims for a tensor of %d dims", n, t->ndim);
  int perm[QT_MAXDIM];
  bool seen[QT_MAXDIM] = {false};
  for (int i = 0; i < n; i++) {
    if (dims[i] < 1 || dims[i] > n)
      return luaL_error(L, "permute: dim %I out of range (1..%d)", (lua_Integer)dims[i], n);
    if (seen[dims[i] - 1])
      return luaL_error(L, "permute: dim %I appears twice", (lua_Integer)dims[i]);
    seen[dims[i] - 1] = true;
    perm[i] = (int)dims[i] - 1;
  }
  qt_tensor *out = lq_newtensor(L);
  if (qt_permute(ctx, out, t, n, perm) != 0) return lq_raise(L, ctx);
  return 1;
}

/* expand(shape): -1 keeps the size of the matching (right-aligned) dim of t. */
static int t_expand(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "expand");
  int ndim;
  int64_t size[QT_MAXDIM];
  lq_checkend(L, lq_checkshape(L, 2, "expand", LQ_SHAPE_INFER, &ndim, size), "expand", true);
  if (ndim < t->ndim)
    return luaL_error(L, "expand: %d sizes given for a tensor of %d dims", ndim, t->ndim);
  for (int d = 0; d < ndim; d++) {
    if (size[d] != -1) continue;
    int src = d - (ndim - t->ndim);
    if (src < 0) return luaL_error(L, "expand: size -1 is not allowed for a new dim (%d)", d + 1);
    size[d] = t->size[src];
  }
  qt_tensor *out = lq_newtensor(L);
  if (qt_expand(ctx, out, t, ndim, size) != 0) return lq_raise(L, ctx);
  return 1;
}

/* expand_as(other) and view_as(other): expand / view to other's shape, as PyTorch's. */
static int t_as(lua_State *L, const char *op, bool expand) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, op);
  qt_tensor *other = lq_checklive(L, 2, op);
  qt_tensor *out = lq_newtensor(L);
  int rc = expand ? qt_expand(ctx, out, t, other->ndim, other->size)
                  : qt_view_as(ctx, out, t, other->ndim, other->size);
  if (rc != 0) return lq_raise_as(L, ctx, expand ? "expand" : "view", op);
  return 1;
}
static int t_expand_as(lua_State *L) { return t_as(L, "expand_as", true); }
static int t_view_as(lua_State *L) { return t_as(L, "view_as", false); }

static int t_contiguous(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "contiguous");
  if (qt_is_contiguous(t)) {
    lua_settop(L, 1);
    return 1;
  }
  qt_tensor *out = lq_newtensor(L);
  if (qt_contiguous(ctx, out, t) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_clone(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "clone");
  qt_tensor *out = lq_newtensor(L);
  if (qt_clone(ctx, out, t) != 0) return lq_raise(L, ctx);
  return 1;
}

/* ================================================================ moving and converting */

/* Pushes t moved to dev and converted to dtype; t itself when nothing changes. */
static int t_pushmoved(lua_State *L, int self, qt_device *dev, qt_dtype dtype, const char *op) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = qlua_checktensor(L, self);
  bool move = dev != NULL && dev != t->storage->device, cast = dtype != t->dtype;
  if (!move && !cast) {
    lua_pushvalue(L, self);
    return 1;
  }
  if (move) {
    qt_tensor *moved = lq_newtensor(L);
    if (qt_to_device(ctx, moved, t, dev) != 0) return lq_raise_as(L, ctx, "to", op);
    t = moved;
  }
  if (cast) {
    qt_tensor *out = lq_newtensor(L);
    if (qt_to_dtype(ctx, out, t, dtype) != 0) return lq_raise_as(L, ctx, "to", op);
    if (move) qt_tensor_release(t);  /* the intermediate: give its memory back now */
  }
  return 1;
}

static int t_gpu(lua_State *L) {
  qt_tensor *t = lq_checklive(L, 1, "gpu");
  int ordinal = lq_ctx(L)->current_gpu;
  if (!lua_isnoneornil(L, 2)) {
    lua_Integer n = luaL_checkinteger(L, 2);
    if (n < 0 || n > INT32_MAX) return luaL_error(L, "gpu: ordinal %I is negative or too large", n);
    ordinal = (int)n;
  }
  return t_pushmoved(L, 1, lq_gpu(L, "gpu", ordinal), t->dtype, "gpu");
}

static int t_cpu(lua_State *L) {
  qt_tensor *t = lq_checklive(L, 1, "cpu");
  return t_pushmoved(L, 1, qt_cpu_device(), t->dtype, "cpu");
}

/* to(name) with a dtype or device name, or to{dtype=, device=}. */
static int t_to(lua_State *L) {
  qt_tensor *t = lq_checklive(L, 1, "to");
  qt_dtype dtype = t->dtype;
  qt_device *dev = NULL;
  if (lua_type(L, 2) == LUA_TTABLE) {
    lq_checkopts(L, 2, "to", &dtype, &dev);
  } else {
    const char *name = lq_checkcstring(L, 2, "to", "the dtype or device name");
    int d = qt_dtype_from_name(name);
    if (d >= 0) dtype = (qt_dtype)d;
    else if ((dev = lq_device_by_name_or_null(L, "to", name)) == NULL)
      return luaL_error(L, "to: unknown dtype or device '%s' (float32, float64, int32, int64, "
                        "cpu, gpu, gpu:N)", name);
  }
  return t_pushmoved(L, 1, dev, dtype, "to");
}

/* PyTorch's dtype shorthands: t:float() is t:to("float32") (t itself when it is one). */
/* The names are the dtype list's `short` column; the functions are named by suffix. */
#define T_DTYPE_SHORTHAND(P, E, sfx, name, T, U, size, kind, digits, emax, shortname, ...) \
  static int t_as_##sfx(lua_State *L) {                                                  \
    lq_checklive(L, 1, shortname);                                                       \
    return t_pushmoved(L, 1, NULL, E, shortname);                                        \
  }
QT_DTYPE_LIST(T_DTYPE_SHORTHAND, ~)
#undef T_DTYPE_SHORTHAND

static int t_copy_(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *dst = lq_checklive(L, 1, "copy_");
  qt_tensor *src = qlua_checktensor(L, 2);
  if (qt_copy_(ctx, dst, src) != 0) return lq_raise(L, ctx);
  lua_settop(L, 1);
  return 1;
}

/* ================================================================ comparing whole tensors */

/* The tolerances of isclose/allclose after `other`: rtol, atol, equal_nan as numbers and a
** boolean (nil: PyTorch's defaults 1e-05, 1e-08, false), or one table of those fields. */
static void t_checktolerances(lua_State *L, const char *op, double *rtol, double *atol,
                              bool *equal_nan) {
  *rtol = 1e-05, *atol = 1e-08, *equal_nan = false;
  if (lua_type(L, 3) == LUA_TTABLE) {
    lq_checkend(L, 4, op, true);
    lua_pushnil(L);
    while (lua_next(L, 3) != 0) {
      const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
      if (key == NULL || (strcmp(key, "rtol") && strcmp(key, "atol") && strcmp(key, "equal_nan")))
        luaL_error(L, "%s: unknown option %s (rtol, atol, equal_nan)", op,
                   key ? key : luaL_tolstring(L, -2, NULL));
      lua_pop(L, 1);
    }
    lua_getfield(L, 3, "rtol");
    lua_getfield(L, 3, "atol");
    lua_getfield(L, 3, "equal_nan");
  } else {
    lua_settop(L, 5);
  }
  int top = lua_gettop(L);
  if (!lua_isnil(L, top - 2)) {
    if (lua_type(L, top - 2) != LUA_TNUMBER) luaL_error(L, "%s: rtol must be a number", op);
    *rtol = lua_tonumber(L, top - 2);
  }
  if (!lua_isnil(L, top - 1)) {
    if (lua_type(L, top - 1) != LUA_TNUMBER) luaL_error(L, "%s: atol must be a number", op);
    *atol = lua_tonumber(L, top - 1);
  }
  if (!lua_isnil(L, top)) {
    if (!lua_isboolean(L, top)) luaL_error(L, "%s: equal_nan must be a boolean", op);
    *equal_nan = lua_toboolean(L, top);
  }
}

/* isclose(other [, rtol [, atol [, equal_nan]]]) or isclose(other, {rtol =, ...}). */
static int t_isclose(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *a = lq_checklive(L, 1, "isclose");
  qt_tensor *b = lq_checklive(L, 2, "isclose");
  double rtol, atol;
  bool equal_nan;
  t_checktolerances(L, "isclose", &rtol, &atol, &equal_nan);
  qt_tensor *out = lq_newtensor(L);
  if (qt_isclose(ctx, out, a, b, rtol, atol, equal_nan) != 0) return lq_raise(L, ctx);
  return 1;
}

/* allclose(...): isclose's arguments; a Lua boolean. */
static int t_allclose(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *a = lq_checklive(L, 1, "allclose");
  qt_tensor *b = lq_checklive(L, 2, "allclose");
  double rtol, atol;
  bool equal_nan, result;
  t_checktolerances(L, "allclose", &rtol, &atol, &equal_nan);
  if (qt_allclose(ctx, a, b, rtol, atol, equal_nan, &result) != 0) return lq_raise(L, ctx);
  lua_pushboolean(L, result);
  return 1;
}

/* equal(other): one shape and equal values; a Lua boolean. */
static int t_equal(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *a = lq_checklive(L, 1, "equal");
  qt_tensor *b = lq_checklive(L, 2, "equal");
  bool result;
  if (qt_equal(ctx, a, b, &result) != 0) return lq_raise(L, ctx);
  lua_pushboolean(L, result);
  return 1;
}

/* ================================================================ t[i] and t[i] = v */

/* The integer key of t[k], checked against 1..#t; when reading, #t + 1 is allowed too (the
** caller gives nil for it, so that ipairs(t) ends there as it does on a table). */
static lua_Integer t_checkkey(lua_State *L, const qt_tensor *t, bool reading) {
  int isint;
  lua_Integer i = lua_tointegerx(L, 2, &isint);
  if (!isint) luaL_error(L, "index: %f is not an integer", lua_tonumber(L, 2));
  if (t->ndim == 0) luaL_error(L, "index: a 0-d tensor cannot be indexed (use item())");
  lua_Integer n = (lua_Integer)t->size[0];
  if (i < 1 || i > n + (reading ? 1 : 0))
    luaL_error(L, "index: %I out of range (1..%I)", i, n);
  return i;
}

/* An integer entry of an index table. */
static lua_Integer t_keyint(lua_State *L, int idx, int entry) {
  int isint;
  lua_Integer i = lua_tointegerx(L, idx, &isint);
  if (!isint)
    luaL_error(L, "index: entry %d of the index table: %s is not an integer", entry,
               luaL_tolstring(L, idx, NULL));
  return i;
}

/* Entry k's 1-based position p (negative: from the end) in a dim of size n, 0-based. */
static int64_t t_keypos(lua_State *L, lua_Integer p, int k, int64_t n) {
  lua_Integer q = p < 0 ? p + (lua_Integer)n + 1 : p;
  if (n == 0)
    luaL_error(L, "index: position %I out of range for dim %d of size 0 (it has no positions)",
               p, k);
  if (p == 0 || q < 1 || q > (lua_Integer)n)
    luaL_error(L, "index: position %I out of range (-%I..%I) for dim %d of size %I", p,
               (lua_Integer)n, (lua_Integer)n, k, (lua_Integer)n);
  return (int64_t)(q - 1);
}

/* The table at idx (the index table, or its entry `entry` when > 0) must be a sequence:
** a key other than 1..len would be ignored ({x = 1}, or {[2] = 1}, whose length is 0, gave
** the whole tensor), so it is an error naming the key. */
static void t_checksequence(lua_State *L, int idx, lua_Unsigned len, int entry) {
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    lua_pop(L, 1);
    int isint = 0;
    lua_Integer k = lua_type(L, -1) == LUA_TNUMBER ? lua_tointegerx(L, -1, &isint) : 0;
    if (isint && k >= 1 && (lua_Unsigned)k <= len) continue;
    const char *shown = lua_type(L, -1) == LUA_TSTRING
                            ? lua_pushfstring(L, "'%s'", lua_tostring(L, -1))
                        : lua_type(L, -1) == LUA_TNUMBER
                            ? luaL_tolstring(L, -1, NULL)
                            : lua_pushfstring(L, "of type %s", luaL_typename(L, -1));
    if (entry > 0)
      luaL_error(L, "index: entry %d of the index table has key %s ({first, last [, step]} "
                 "takes entries 1..3 only)", entry, shown);
    luaL_error(L, "index: the index table has key %s (it takes entries 1..%d only: a number, "
               "{first, last [, step]} or {} for each dim)", shown, (int)len);
  }
}

/* t[{...}] (Torch7): entry k applies to dim k of t; a number selects (the dim goes), {a, b}
** or {a, b, step} is an inclusive slice, {a} is {a, a}, {} takes the dim whole; dims after
** the last entry are taken whole. Positions are 1-based, negative ones from the end. Pushes
** the view (a new userdata, sharing t's storage). */
static qt_tensor *t_pushtableview(lua_State *L, qt_ctx *ctx, qt_tensor *t, int key) {
  lua_Unsigned len = lua_rawlen(L, key);
  t_checksequence(L, key, len, 0);
  if (len > (lua_Unsigned)t->ndim)
    luaL_error(L, "index: %I entries in the index table for a %d-d tensor", (lua_Integer)len,
               t->ndim);
  luaL_checkstack(L, (int)len + 4, "index");
  qt_tensor *cur = t;
  int dim = 0;  /* cur's dim that entry k applies to */
  for (int k = 1; k <= (int)len; k++) {
    lua_rawgeti(L, key, k);
    int64_t n = cur->size[dim];
    qt_tensor *next = NULL;
    if (lua_type(L, -1) == LUA_TNUMBER) {
      int64_t q = t_keypos(L, t_keyint(L, -1, k), k, n);
      next = lq_newtensor(L);
      if (qt_select(ctx, next, cur, dim, q) != 0)
        lq_raise_as(L, ctx, "select", "index");
    } else if (lua_type(L, -1) == LUA_TTABLE) {
      int e = lua_gettop(L);
      lua_Unsigned m = lua_rawlen(L, e);
      if (m > 3)
        luaL_error(L, "index: entry %d of the index table has %I numbers ({first, last [, step]} "
                   "or {} expected)", k, (lua_Integer)m);
      t_checksequence(L, e, m, k);
      if (m > 0) {
        lua_Integer v[3] = {0, 0, 1};
        for (int j = 1; j <= (int)m; j++) {
          lua_rawgeti(L, e, j);
          v[j - 1] = t_keyint(L, -1, k);
          lua_pop(L, 1);
        }
        if (m == 1) v[1] = v[0];
        int64_t f = t_keypos(L, v[0], k, n), l = t_keypos(L, v[1], k, n);
        if (v[2] < 1)
          luaL_error(L, "index: step %I in entry %d of the index table must be >= 1", v[2], k);
        next = lq_newtensor(L);
        if (qt_slice(ctx, next, cur, dim, f, l, (int64_t)v[2]) != 0)
          lq_raise_as(L, ctx, "slice", "index");
      }
      dim++;
    } else if (qlua_totensor(L, -1) != NULL) {
      luaL_error(L, "index: entry %d of the index table is a tensor (not supported: use "
                 "index_select)", k);
    } else {
      luaL_error(L, "index: entry %d of the index table is a %s (a number, {first, last [, "
                 "step]} or {} expected)", k, luaL_typename(L, -1));
    }
    if (next != NULL) {
      lua_remove(L, -2);  /* the entry */
      cur = next;
    } else {
      lua_pop(L, 1);
    }
  }
  if (cur == t) {
    cur = lq_newtensor(L);
    qt_tensor_share(cur, t);
  }
  return cur;
}

/* A tensor key's kind: a bool mask, or integer positions along dim 1 (int32/int64); any
** other dtype is an error naming it. */
static bool t_key_is_mask(lua_State *L, const qt_tensor *key) {
  if (qt_is_bool(key->dtype)) return true;
  if (key->dtype == QT_I32 || key->dtype == QT_I64) return false;
  luaL_error(L, "index: a %s tensor key is not supported (a bool mask, or int32/int64 "
             "positions along dim 1)", qt_dtypes[key->dtype].name);
  return false;
}

/* The shape of t[key] for an integer key, PyTorch's: key's shape, then t's other dims. */
static int t_keyed_shape(lua_State *L, const qt_tensor *t, const qt_tensor *key, int64_t *size) {
  if (t->ndim == 0) luaL_error(L, "index: a 0-d tensor cannot be indexed (use item())");
  int ndim = key->ndim + t->ndim - 1;
  if (ndim > QT_MAXDIM)
    luaL_error(L, "index: a %d-d key into a %d-d tensor gives more than %d dims", key->ndim,
               t->ndim, QT_MAXDIM);
  for (int d = 0; d < key->ndim; d++) size[d] = key->size[d];
  for (int d = 1; d < t->ndim; d++) size[key->ndim + d - 1] = t->size[d];
  return ndim;
}

/* key as a 1-D tensor of positions (a view when it can be); pushed. */
static qt_tensor *t_pushflatkey(lua_State *L, qt_ctx *ctx, const qt_tensor *key) {
  int64_t n = qt_numel(key);
  qt_tensor *flat = lq_newtensor(L);
  if (qt_reshape(ctx, flat, key, 1, &n) != 0) lq_raise_as(L, ctx, "reshape", "index");
  return flat;
}

/* t[key] for a tensor key: masked_select for a bool mask (a 1-D result), index_select along
** dim 1 for integer positions, shaped as PyTorch's t[key]. Pushes the result. */
static void t_pushkeyed(lua_State *L, qt_ctx *ctx, qt_tensor *t, const qt_tensor *key) {
  qt_tensor *out = lq_newtensor(L);
  if (t_key_is_mask(L, key)) {
    if (qt_masked_select(ctx, out, t, key) != 0) lq_raise_as(L, ctx, "masked_select", "index");
    return;
  }
  int64_t size[QT_MAXDIM];
  int ndim = t_keyed_shape(L, t, key, size);
  qt_tensor *flat = t_pushflatkey(L, ctx, key);
  qt_tensor *rows = lq_newtensor(L);
  if (qt_index_select(ctx, rows, t, 0, flat) != 0) lq_raise_as(L, ctx, "index_select", "index");
  if (qt_view_as(ctx, out, rows, ndim, size) != 0) lq_raise_as(L, ctx, "view", "index");
  lua_pop(L, 2);  /* flat and rows: out holds the storage */
}

/* t[key] = v for a tensor key: masked_fill_ for a bool mask (v a number, a boolean or a 0-d
** tensor), index_fill_ (a number) or index_copy_ (a tensor broadcast to t[key]'s shape)
** for integer positions along dim 1. */
static int t_setkeyed(lua_State *L, qt_ctx *ctx, qt_tensor *t, const qt_tensor *key) {
  bool is_value = lua_type(L, 3) == LUA_TNUMBER || lua_type(L, 3) == LUA_TBOOLEAN;
  qt_tensor *src = is_value ? NULL : qlua_totensor(L, 3);
  if (!is_value && src == NULL)
    return luaL_error(L, "index: cannot assign a %s through a tensor key (number or "
                      "qlua.Tensor expected)", luaL_typename(L, 3));
  if (t_key_is_mask(L, key)) {
    if (src != NULL && src->ndim != 0)
      return luaL_error(L, "index: t[mask] = v takes a number or a 0-d tensor, got a %d-d "
                        "tensor", src->ndim);
    qt_scalar v = is_value ? lq_checkstorable(L, 3, "index", t->dtype) : qt_scalar_i(0);
    if (qt_masked_fill_(ctx, t, key, src, v) != 0)
      return lq_raise_as(L, ctx, "masked_fill_", "index");
    return 0;
  }
  int64_t size[QT_MAXDIM];
  int ndim = t_keyed_shape(L, t, key, size);
  qt_tensor *flat = t_pushflatkey(L, ctx, key);
  if (is_value) {
    qt_scalar v = lq_checkstorable(L, 3, "index", t->dtype);
    if (qt_index_fill_(ctx, t, 0, flat, v) != 0) return lq_raise_as(L, ctx, "index_fill_", "index");
    return 0;
  }
  /* src broadcast to t[key]'s shape, then seen as (#key, t's other dims) */
  qt_tensor *wide = lq_newtensor(L);
  if (qt_expand(ctx, wide, src, ndim, size) != 0) return lq_raise_as(L, ctx, "expand", "index");
  int64_t rows_size[QT_MAXDIM];
  rows_size[0] = qt_numel(flat);
  for (int d = 1; d < t->ndim; d++) rows_size[d] = t->size[d];
  qt_tensor *rows = lq_newtensor(L);
  if (qt_reshape(ctx, rows, wide, t->ndim, rows_size) != 0)
    return lq_raise_as(L, ctx, "reshape", "index");
  if (qt_index_copy_(ctx, t, 0, flat, rows) != 0) return lq_raise_as(L, ctx, "index_copy_", "index");
  return 0;
}

/* __index: methods by name (upvalue 2 is the methods table), elements or row views by
** integer, nil for anything else. */
/* The result of a keyed read (t[i], t[{...}], t[mask]) is on top: a library that follows
** reads (qlua.autograd records them) sets the metatable's __keyed(t, key, result), whose
** return value is then the read's. */
static int t_keyed(lua_State *L) {
  if (lua_getmetatable(L, 1)) {
    if (lua_getfield(L, -1, "__keyed") == LUA_TFUNCTION) {
      lua_pushvalue(L, 1);
      lua_pushvalue(L, 2);
      lua_pushvalue(L, -5);
      lua_call(L, 3, 1);
      return 1;
    }
    lua_pop(L, 2);
  }
  return 1;
}

static int t_index(lua_State *L) {
  switch (lua_type(L, 2)) {
    case LUA_TSTRING:
      lua_pushvalue(L, 2);
      if (lua_rawget(L, lua_upvalueindex(2)) != LUA_TNIL) return 1;
      /* not a method: a field of the tensor, when a library gives the tensors fields
      ** (qlua.autograd's t.grad) through the metatable's __getfield(t, key) */
      if (lua_getmetatable(L, 1) && lua_getfield(L, -1, "__getfield") == LUA_TFUNCTION) {
        lua_pushvalue(L, 1);
        lua_pushvalue(L, 2);
        lua_call(L, 2, 1);
      } else {
        lua_pushnil(L);
      }
      return 1;
    case LUA_TNUMBER: {
      lq_enter(L);  /* an op: not through the trampoline (upvalue 2 is the methods table) */
      qt_ctx *ctx = lq_ctx(L);
      qt_tensor *t = lq_checklive(L, 1, "index");
      lua_Integer i = t_checkkey(L, t, true);
      if (i == (lua_Integer)t->size[0] + 1) {
        lua_pushnil(L);  /* one past the end: where ipairs stops */
      } else if (t->ndim == 1) {
        int64_t pos[1] = {(int64_t)(i - 1)};
        qt_scalar v;
        if (qt_get(ctx, t, pos, &v) != 0) return lq_raise_as(L, ctx, "get", "index");
        lq_pushscalar(L, t->dtype, v);
      } else {
        t_pushselect(L, ctx, t, 0, i, "index");
      }
      lq_leave(L);
      return t_keyed(L);
    }
    case LUA_TTABLE: {
      lq_enter(L);
      qt_ctx *ctx = lq_ctx(L);
      qt_tensor *t = lq_checklive(L, 1, "index");
      t_pushtableview(L, ctx, t, 2);
      lq_leave(L);
      return t_keyed(L);
    }
    default: {
      qt_tensor *key = qlua_totensor(L, 2);
      if (key == NULL) {
        lua_pushnil(L);
        return 1;
      }
      lq_enter(L);
      qt_ctx *ctx = lq_ctx(L);
      qt_tensor *t = lq_checklive(L, 1, "index");
      t_pushkeyed(L, ctx, t, key);
      lq_leave(L);
      return t_keyed(L);
    }
  }
}

/* __newindex: t[i] = number or tensor. A 1-D tensor's element is set directly; a row of
** an N-D tensor is filled (number) or copied into (tensor, broadcast). */
static int t_newindex(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  if (lua_type(L, 2) == LUA_TSTRING) {  /* t.name = v: a field, through __setfield */
    if (lua_getmetatable(L, 1) && lua_getfield(L, -1, "__setfield") == LUA_TFUNCTION) {
      lua_pushvalue(L, 1);
      lua_pushvalue(L, 2);
      lua_pushvalue(L, 3);
      lua_call(L, 3, 0);
      return 0;
    }
    return luaL_error(L, "index: cannot assign to key '%s' of a qlua.Tensor",
                      lua_tostring(L, 2));
  }
  qt_tensor *t = lq_checklive(L, 1, "index");
  /* a write into t: refused for an expanded t as every in-place write is, even where the
  ** part written (a row of it) is not expanded itself: the other rows share it */
  if (qt_check_writable(ctx, "index", t) != 0) return lq_raise(L, ctx);
  if (lua_type(L, 2) == LUA_TTABLE) {  /* t[{...}] = v: fill_ or copy_ into the view */
    qt_tensor *view = t_pushtableview(L, ctx, t, 2);
    if (lua_type(L, 3) == LUA_TNUMBER || lua_type(L, 3) == LUA_TBOOLEAN) {
      qt_scalar v = lq_checkstorable(L, 3, "index", t->dtype);
      if (qt_fill_(ctx, view, v) != 0) return lq_raise_as(L, ctx, "fill_", "index");
      return 0;
    }
    qt_tensor *src = qlua_totensor(L, 3);
    if (src == NULL)
      return luaL_error(L, "index: cannot assign a %s to a tensor slice (number or "
                        "qlua.Tensor expected)", luaL_typename(L, 3));
    if (qt_copy_(ctx, view, src) != 0) return lq_raise_as(L, ctx, "copy_", "index");
    return 0;
  }
  qt_tensor *key = qlua_totensor(L, 2);
  if (key != NULL) return t_setkeyed(L, ctx, t, key);
  if (lua_type(L, 2) != LUA_TNUMBER)
    return luaL_error(L, "index: cannot assign to key '%s' of a qlua.Tensor",
                      luaL_tolstring(L, 2, NULL));
  lua_Integer i = t_checkkey(L, t, false);
  if (lua_type(L, 3) == LUA_TNUMBER || lua_type(L, 3) == LUA_TBOOLEAN) {
    qt_scalar v = lq_checkstorable(L, 3, "index", t->dtype);
    if (t->ndim == 1) {
      int64_t pos[1] = {(int64_t)(i - 1)};
      if (qt_set(ctx, t, pos, v) != 0) return lq_raise_as(L, ctx, "set", "index");
      return 0;
    }
    qt_tensor *row = t_pushselect(L, ctx, t, 0, i, "index");
    if (qt_fill_(ctx, row, v) != 0) return lq_raise_as(L, ctx, "fill_", "index");
    return 0;
  }
  qt_tensor *src = qlua_totensor(L, 3);
  if (src == NULL)
    return luaL_error(L, "index: cannot assign a %s to a tensor element (number or "
                      "qlua.Tensor expected)", luaL_typename(L, 3));
  qt_tensor *row = t_pushselect(L, ctx, t, 0, i, "index");
  if (qt_copy_(ctx, row, src) != 0) return lq_raise_as(L, ctx, "copy_", "index");
  return 0;
}

/* ================================================================ registration */

/* Method name, function, and the most arguments it takes counting self (lqlua.h). */
static const lq_Reg t_methods[] = {
  /* inspection */
  {"shape", t_shape, 1, "()",
   "the sizes, {2, 3} ({} for 0-d): a fresh table whose tostring is {2, 3}"},
  {"size", t_size, 2, "([dim])", "the sizes as t:shape(), or the size of dim"},
  {"stride", t_stride, 2, "([dim])", "the strides in elements, or the stride of dim"},
  {"dim", t_dim, 1, "()", "the number of dims"},
  {"numel", t_numel, 1, "()", "the number of elements"},
  {"dtype", t_dtype, 1, "()", "the dtype's name: \"float32\", \"int64\", ..."},
  {"device", t_device, 1, "()", "the device's name: \"cpu\", \"gpu:0\", ..."},
  {"is_contiguous", t_is_contiguous, 1, "()",
   "true when the elements are dense in row-major order"},
  {"_version", t_version, 1, "()",
   "how many in-place writes t's storage has had, through any view, whether t covers only part of that storage, and the storage as a key (autograd's checks)"},
  {"item", t_item, 1, "()",
   "the value of a one-element tensor (an integer for integer dtypes)"},
  {"totable", lq_totable, 1, "()", "nested Lua tables of the values (a number for 0-d)"},
  /* views */
  {"view", t_view, LQ_VARARGS, "(shape)",
   "a view with another shape over the same storage (one size may be -1)"},
  {"reshape", t_reshape, LQ_VARARGS, "(shape)",
   "as view, copying only when the strides cannot express it"},
  {"narrow", t_narrow, 4, "(dim, start, length)",
   "a view of length elements of dim from start"},
  {"select", t_select, 3, "(dim, i)", "the view of position i of dim, that dim removed"},
  {"transpose", t_transpose, 3, "(d1, d2)", "a view with dims d1 and d2 swapped"},
  {"t", t_t, 1, "()", "the transpose of a 2-D tensor (1-D and 0-d as they are)"},
  {"permute", t_permute, LQ_VARARGS, "(d1, d2, ...)",
   "a view with the dims in that order (or one table of them)"},
  {"expand", t_expand, LQ_VARARGS, "(shape)",
   "a view broadcasting size-1 dims to shape (stride 0)"},
  {"contiguous", t_contiguous, 1, "()", "t itself when contiguous, else a contiguous copy"},
  {"clone", t_clone, 1, "()", "a copy, always"},
  {"expand_as", t_expand_as, 2, "(other)",
   "t:expand(other:size()): a view of t broadcast to other's shape"},
  {"view_as", t_view_as, 2, "(other)", "t:view(other:size()): a view of t with other's shape"},
  /* moving */
  {"gpu", t_gpu, 2, "([ordinal])",
   "t on a GPU (default: the current one); t itself if already there"},
  {"cpu", t_cpu, 1, "()", "t on the CPU; t itself if already there"},
  {"to", t_to, 2, "(name)", "t converted to a dtype or moved to a device, by name"},
  {"copy_", t_copy_, 2, "(src)", "copies src into t (broadcast, across dtypes and devices)"},
#define T_DTYPE_SHORTHAND_ROW(P, E, sfx, name, T, U, size, kind, digits, emax, shortname, ...) \
  {shortname, t_as_##sfx, 1, "()", "t:to(\"" name "\")" T_SHORTHAND_NOTE_##kind},
#define T_SHORTHAND_NOTE_FLOAT ""
#define T_SHORTHAND_NOTE_INT ""
#define T_SHORTHAND_NOTE_HALF ""
#define T_SHORTHAND_NOTE_BOOL " (nonzero is true)"
  QT_DTYPE_LIST(T_DTYPE_SHORTHAND_ROW, ~)
#undef T_DTYPE_SHORTHAND_ROW
  /* comparing whole tensors */
  {"isclose", t_isclose, 5, "(other [, rtol] [, atol] [, equal_nan])",
   "bool tensor: |t - other| <= atol + |rtol * other| (1e-05, 1e-08 by default), or equal; "
   "also with {rtol =, atol =, equal_nan =}"},
  {"allclose", t_allclose, 5, "(other [, rtol] [, atol] [, equal_nan])",
   "true when isclose holds for every element (a Lua boolean)"},
  {"equal", t_equal, 2, "(other)",
   "true when other has t's shape and equal values (a Lua boolean)"},
  /* memory */
  {"free", lq_tensor_free, 1, "()",
   "gives the storage's memory back now; t and its views become freed"},
  {NULL, NULL, 0, NULL, NULL}
};

/* __gc and __close release (and are not calls that hold operands); the others are ops,
** run through the trampoline like the methods (Lua passes them a fixed count). */
static const luaL_Reg t_releases[] = {
  {"__gc", lq_tensor_gc}, {"__close", lq_tensor_gc},
  {NULL, NULL}
};

static const lq_Reg t_metamethods[] = {
  {"__newindex", t_newindex, LQ_VARARGS, NULL, NULL},
  {"__tostring", lq_tostring, LQ_VARARGS, NULL, NULL},
  {"__len", t_len, LQ_VARARGS, NULL, NULL},
  {NULL, NULL, 0, NULL, NULL}
};

void lq_open_tensor(lua_State *L, int box_idx) {
  box_idx = lua_absindex(L, box_idx);
  luaL_newmetatable(L, QLUA_TENSOR);            /* sets __name */
  lua_createtable(L, 0, (int)(sizeof t_methods / sizeof t_methods[0]));
  lq_setfuncs(L, t_methods, box_idx, true, "Tensor");     /* methods: upvalue 1 = the state box */
  lq_setfuncs(L, lq_elementwise_methods, box_idx, true, "Tensor");
  lq_setfuncs(L, lq_random_methods, box_idx, true, "Tensor");
  lq_setfuncs(L, lq_shape_methods, box_idx, true, "Tensor");
  lq_setfuncs(L, lq_index_methods, box_idx, true, "Tensor");
  lq_setfuncs(L, lq_mask_methods, box_idx, true, "Tensor");
  lq_setfuncs(L, lq_sort_methods, box_idx, true, "Tensor");
  lq_setfuncs(L, lq_scan_methods, box_idx, true, "Tensor");
  lq_setfuncs(L, lq_reduce_methods, box_idx, true, "Tensor");
  lq_setfuncs(L, lq_matmul_methods, box_idx, true, "Tensor");
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "__methods");             /* for the REPL's completion */
  lua_pushvalue(L, box_idx);
  lua_insert(L, -2);
  lua_pushcclosure(L, t_index, 2);              /* __index: upvalues box, methods */
  lua_setfield(L, -2, "__index");
  lua_pushvalue(L, box_idx);
  luaL_setfuncs(L, t_releases, 1);
  lq_setfuncs(L, t_metamethods, box_idx, false, NULL);
  lq_setfuncs(L, lq_elementwise_metamethods, box_idx, false, NULL);
  /* Last (its fields are all set): the metatable is qlua.Tensor (l_qlua.c), the class
  ** users extend. A name it lacks reads the method, and a name written into it that it
  ** lacks becomes a method (function qlua.Tensor.double_it(t) return t * 2 end; then
  ** t:double_it()), while its metamethods (__add, __tostring ...) stay its own fields. */
  lua_createtable(L, 0, 2);
  lua_getfield(L, -2, "__methods");
  lua_pushvalue(L, -1);
  lua_setfield(L, -3, "__index");
  lua_setfield(L, -2, "__newindex");
  lua_setmetatable(L, -2);
  lua_pop(L, 1);                                /* the metatable */
}
