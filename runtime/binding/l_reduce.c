/*
** l_reduce.c — the reductions from Lua: sum, mean, prod, max, min, amax, amin, aminmax,
** argmax, argmin, var, std, norm, logsumexp. The core does
** the work (ops_reduce.c); this file reads the dims (1-based here, 0-based in the core) and
** turns a reduction over everything into a Lua number. l_tensor.c registers
** lq_reduce_methods with the other methods.
*/
#include "lqlua.h"


/* ================================================================ arguments */

/* The dims at arg: nil or none (every dim: *n = 0), an integer, or, when `many`, a list of
** integers; 1-based here, 0-based out (dims[0..*n)). The core refuses repeated dims. */
static void r_checkdims(lua_State *L, int arg, const qt_tensor *t, const char *op, bool many,
                        int *dims, int *n) {
  *n = 0;
  if (lua_isnoneornil(L, arg)) return;
  if (lua_type(L, arg) != LUA_TTABLE) {
    dims[0] = lq_checkdim(L, arg, t, op);
    *n = 1;
    return;
  }
  if (!many) luaL_error(L, "%s: takes one dim (a number), got a table", op);
  lua_Integer len = (lua_Integer)lua_rawlen(L, arg);
  if (len == 0) luaL_error(L, "%s: the dim list is empty", op);
  if (len > t->ndim)
    luaL_error(L, "%s: %I dims in the list for a %d-d tensor", op, len, t->ndim);
  for (lua_Integer i = 1; i <= len; i++) {
    lua_rawgeti(L, arg, i);
    int isint = 0;
    lua_Integer d = lua_tointegerx(L, -1, &isint);
    if (!isint)
      luaL_error(L, "%s: dim list entry %I is not an integer (got %s)", op, i,
                 luaL_typename(L, -1));
    lua_pop(L, 1);
    if (d < 1 || d > t->ndim) luaL_error(L, "%s: dim %I out of range (1..%d)", op, d, t->ndim);
    dims[i - 1] = (int)d - 1;
  }
  *n = (int)len;
}

bool lq_optkeepdim(lua_State *L, int arg, const char *op) {
  if (lua_isnoneornil(L, arg)) return false;
  if (!lua_isboolean(L, arg))
    luaL_error(L, "%s: keepdim must be a boolean, got %s", op, luaL_typename(L, arg));
  return lua_toboolean(L, arg);
}

int lq_keepdim(lua_State *L, qt_ctx *ctx, int n, int dim, int ndim, const char *op) {
  if (ndim == 0) return n;  /* a 0-d tensor's dim 1 is not a dim of its result */
  for (int k = n; k >= 1; k--) {
    int idx = lua_absindex(L, -k);
    qt_tensor *r = lq_checklive(L, idx, op);
    qt_tensor *view = lq_newtensor(L);
    if (qt_unsqueeze(ctx, view, r, dim) != 0) return lq_raise_as(L, ctx, "unsqueeze", op);
    lua_replace(L, idx);
  }
  return n;
}

/* Replaces the 0-d tensor r (on top of the stack) with its value as a Lua number; r is
** released at once, so device memory does not wait for the collector. */
static void r_pushnumber(lua_State *L, qt_ctx *ctx, qt_tensor *r, const char *name) {
  int64_t pos[QT_MAXDIM] = {0};
  qt_scalar v;
  if (qt_get(ctx, r, pos, &v) != 0) lq_raise_as(L, ctx, "get", name);
  qt_dtype dtype = r->dtype;
  qt_tensor_release(r);
  lua_pop(L, 1);
  lq_pushscalar(L, dtype, v);
}

/* ================================================================ reductions */

/* max/min along dim: the values and their 1-based int64 positions from one reduction.
** The positions come from argmax/argmin, the values are gathered at them: the same
** elements a max/min reduction finds (the first best, or the first NaN), for one pass
** over t instead of two. With keepdim the positions are already gather's index. Pushes
** values, then positions. */
static int r_reduce_with_positions(lua_State *L, qt_ctx *ctx, qt_redop op, qt_tensor *t,
                                   int dim, bool keepdim, const char *name) {
  qt_redop argop = op == QT_MAX ? QT_ARGMAX : QT_ARGMIN;
  const char *argname = op == QT_MAX ? "argmax" : "argmin";
  qt_tensor *values = lq_newtensor(L);
  qt_tensor *pos = lq_newtensor(L);
  if (qt_reduce_dims(ctx, pos, argop, t, 1, &dim, keepdim, 0) != 0)
    return lq_raise_as(L, ctx, argname, name);
  if (keepdim) {
    if (qt_gather(ctx, values, t, dim, pos) != 0) return lq_raise_as(L, ctx, "gather", name);
    return 2;
  }
  int64_t size[QT_MAXDIM];
  for (int d = 0, k = 0; d < t->ndim; d++) size[d] = d == dim ? 1 : pos->size[k++];
  qt_tensor index, gathered;
  qt_tensor_init(&index);
  qt_tensor_init(&gathered);
  int rc = qt_view_as(ctx, &index, pos, t->ndim, size);
  if (rc == 0) rc = qt_gather(ctx, &gathered, t, dim, &index);
  if (rc == 0) rc = qt_view_as(ctx, values, &gathered, pos->ndim, pos->size);
  qt_tensor_release(&index);
  qt_tensor_release(&gathered);
  if (rc != 0) return lq_raise_as(L, ctx, "gather", name);
  return 2;  /* values, then positions */
}

/* Reduces t over dims[0..n) (n == 0: everything) and pushes the result: a Lua number when
** n == 0 and not keepdim, else a tensor. Errors name `name` (the core's are `core`'s). */
static int r_push(lua_State *L, qt_ctx *ctx, qt_redop op, const char *name, qt_tensor *t,
                  int n, const int *dims, bool keepdim, double arg) {
  qt_tensor *out = lq_newtensor(L);
  if (qt_reduce_dims(ctx, out, op, t, n, dims, keepdim, arg) != 0)
    return lq_raise_as(L, ctx, qt_redop_name(op), name);
  if (n == 0 && !keepdim) r_pushnumber(L, ctx, out, name);
  return 1;
}

/* t:op([dim] [, keepdim]) with dim at 2 and keepdim at 3. Without dim or keepdim: a Lua
** number. Otherwise a tensor; max/min along a dim also push the 1-based int64 positions
** (`positions`). `many`: dim may be a list. */
static int r_reduce(lua_State *L, qt_redop op, const char *name, bool many, bool positions) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, name);
  int dims[QT_MAXDIM], n;
  r_checkdims(L, 2, t, name, many, dims, &n);
  bool keepdim = lq_optkeepdim(L, 3, name);
  if (positions && n == 1) return r_reduce_with_positions(L, ctx, op, t, dims[0], keepdim, name);
  return r_push(L, ctx, op, name, t, n, dims, keepdim, 0);
}

static int t_sum(lua_State *L) { return r_reduce(L, QT_SUM, "sum", true, false); }
static int t_mean(lua_State *L) { return r_reduce(L, QT_MEAN, "mean", true, false); }
static int t_prod(lua_State *L) { return r_reduce(L, QT_PROD, "prod", false, false); }
static int t_max(lua_State *L) { return r_reduce(L, QT_MAX, "max", false, true); }
static int t_min(lua_State *L) { return r_reduce(L, QT_MIN, "min", false, true); }
static int t_amax(lua_State *L) { return r_reduce(L, QT_MAX, "amax", true, false); }
static int t_amin(lua_State *L) { return r_reduce(L, QT_MIN, "amin", true, false); }
static int t_argmax(lua_State *L) { return r_reduce(L, QT_ARGMAX, "argmax", false, false); }
static int t_argmin(lua_State *L) { return r_reduce(L, QT_ARGMIN, "argmin", false, false); }

/* t:logsumexp(dim [, keepdim]): dim (or a list) is required, as in PyTorch. */
static int t_logsumexp(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "logsumexp");
  if (lua_isnoneornil(L, 2)) luaL_error(L, "logsumexp: dim is required (a number or a list)");
  int dims[QT_MAXDIM], n;
  r_checkdims(L, 2, t, "logsumexp", true, dims, &n);
  bool keepdim = lq_optkeepdim(L, 3, "logsumexp");
  return r_push(L, ctx, QT_LOGSUMEXP, "logsumexp", t, n, dims, keepdim, 0);
}

/* t:var([dim] [, opts]) and t:std: opts is keepdim (a boolean), the correction (a number),
** or a table {correction = 1, keepdim = false}. */
static int r_variance(lua_State *L, qt_redop op, const char *name) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, name);
  int dims[QT_MAXDIM], n;
  r_checkdims(L, 2, t, name, true, dims, &n);
  bool keepdim = false;
  double correction = 1;
  switch (lua_type(L, 3)) {
    case LUA_TNONE: case LUA_TNIL: break;
    case LUA_TBOOLEAN: keepdim = lua_toboolean(L, 3); break;
    case LUA_TNUMBER: correction = lua_tonumber(L, 3); break;
    case LUA_TTABLE:
      lua_getfield(L, 3, "correction");
      if (!lua_isnil(L, -1)) {
        if (!lua_isnumber(L, -1) || lua_type(L, -1) != LUA_TNUMBER)
          luaL_error(L, "%s: opts.correction must be a number, got %s", name, luaL_typename(L, -1));
        correction = lua_tonumber(L, -1);
      }
      lua_pop(L, 1);
      lua_getfield(L, 3, "keepdim");
      keepdim = lq_optkeepdim(L, lua_gettop(L), name);
      lua_pop(L, 1);
      break;
    default:
      luaL_error(L, "%s: opts must be keepdim (a boolean), the correction (a number) or a "
                 "table, got %s", name, luaL_typename(L, 3));
  }
  return r_push(L, ctx, op, name, t, n, dims, keepdim, correction);
}

static int t_var(lua_State *L) { return r_variance(L, QT_VAR, "var"); }
static int t_std(lua_State *L) { return r_variance(L, QT_STD, "std"); }

/* t:norm([p] [, dim] [, keepdim]): p defaults to 2. */
static int t_norm(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "norm");
  double p = 2;
  if (!lua_isnoneornil(L, 2)) {
    if (lua_type(L, 2) != LUA_TNUMBER)
      luaL_error(L, "norm: p must be a number, got %s", luaL_typename(L, 2));
    p = lua_tonumber(L, 2);
  }
  int dims[QT_MAXDIM], n;
  r_checkdims(L, 3, t, "norm", true, dims, &n);
  bool keepdim = lq_optkeepdim(L, 4, "norm");
  return r_push(L, ctx, QT_NORM, "norm", t, n, dims, keepdim, p);
}

/* t:aminmax([dim] [, keepdim]): the min, then the max (two reductions). */
static int t_aminmax(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "aminmax");
  int dims[QT_MAXDIM], n;
  r_checkdims(L, 2, t, "aminmax", false, dims, &n);
  bool keepdim = lq_optkeepdim(L, 3, "aminmax");
  r_push(L, ctx, QT_MIN, "aminmax", t, n, dims, keepdim, 0);
  r_push(L, ctx, QT_MAX, "aminmax", t, n, dims, keepdim, 0);
  return 2;
}

/* ================================================================ registration */

/* Method name, function, and the most arguments it takes counting self (lqlua.h). */
const lq_Reg lq_reduce_methods[] = {
  {"sum", t_sum, 3, "([dim] [, keepdim])",
   "the sum: a number, or over dim (or a list of dims) a tensor without them (keepdim: kept "
   "as size 1)"},
  {"mean", t_mean, 3, "([dim] [, keepdim])",
   "the mean: a number, or over dim (or a list) a tensor"},
  {"prod", t_prod, 3, "([dim] [, keepdim])",
   "the product (integers and bool give int64, wrapping)"},
  {"max", t_max, 3, "([dim] [, keepdim])",
   "the largest value; along dim, the values and their int64 positions"},
  {"min", t_min, 3, "([dim] [, keepdim])",
   "the smallest value; along dim, the values and their int64 positions"},
  {"amax", t_amax, 3, "([dim] [, keepdim])",
   "the largest value over dim or a list of dims (no positions; NaN propagates)"},
  {"amin", t_amin, 3, "([dim] [, keepdim])", "the smallest value over dim or a list of dims"},
  {"aminmax", t_aminmax, 3, "([dim] [, keepdim])",
   "the smallest and the largest value: two results"},
  {"argmax", t_argmax, 3, "([dim] [, keepdim])",
   "the 1-based position of the largest value (flat, or along dim)"},
  {"argmin", t_argmin, 3, "([dim] [, keepdim])",
   "the 1-based position of the smallest value (flat, or along dim)"},
  {"var", t_var, 3, "([dim] [, opts])",
   "the variance over dim or a list; opts: keepdim (a boolean), the correction (a number, "
   "default 1) or {correction =, keepdim =}"},
  {"std", t_std, 3, "([dim] [, opts])", "the standard deviation, sqrt(var), with var's opts"},
  {"norm", t_norm, 4, "([p] [, dim] [, keepdim])",
   "the p-norm (p = 2 by default; 1, 0, math.huge, -math.huge, any p > 0) over everything, "
   "dim or a list"},
  {"logsumexp", t_logsumexp, 3, "(dim [, keepdim])",
   "log(sum(exp(t))) over dim or a list, max-subtracted (no overflow)"},
  {NULL, NULL, 0, NULL, NULL}
};
