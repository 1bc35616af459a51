/*
** l_reduce.c — the reductions from Lua: sum, mean, max, min, argmax, argmin. The core does
** the work (ops_reduce.c); this file reads the dims (1-based here, 0-based in the core) and
** turns a reduction over everything into a Lua number. l_tensor.c registers
** lq_reduce_methods with the other methods.
*/
#include "lqlua.h"

/* ================================================================ reductions */

/* max/min along dim: the values and their 1-based int64 positions from one reduction.
** The positions come from argmax/argmin, the values are gathered at them: the same
** elements a max/min reduction finds (the first best, or the first NaN), for one pass
** over t instead of two. Pushes values, then positions. */
static int t_reduce_with_positions(lua_State *L, qt_ctx *ctx, qt_redop op, qt_tensor *t,
                                   int dim, const char *name) {
  qt_redop argop = op == QT_MAX ? QT_ARGMAX : QT_ARGMIN;
  const char *argname = op == QT_MAX ? "argmax" : "argmin";
  qt_tensor *values = lq_newtensor(L);
  qt_tensor *pos = lq_newtensor(L);
  if (qt_reduce(ctx, pos, argop, t, dim) != 0) return lq_raise_as(L, ctx, argname, name);
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

/* Without dim: a Lua number (the 0-d result is read, then released at once so device
** memory does not wait for the collector). With dim: a tensor; max/min also push the
** 1-based int64 positions. */
static int t_reduce(lua_State *L, qt_redop op, const char *name) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, name);
  if (lua_isnoneornil(L, 2)) {
    qt_tensor *r = lq_newtensor(L);
    if (qt_reduce(ctx, r, op, t, -1) != 0) return lq_raise(L, ctx);
    int64_t pos[QT_MAXDIM] = {0};
    qt_scalar v;
    if (qt_get(ctx, r, pos, &v) != 0) return lq_raise_as(L, ctx, "get", name);
    qt_dtype dtype = r->dtype;
    qt_tensor_release(r);
    lq_pushscalar(L, dtype, v);
    return 1;
  }
  int dim = lq_checkdim(L, 2, t, name);
  if (op == QT_MAX || op == QT_MIN) return t_reduce_with_positions(L, ctx, op, t, dim, name);
  qt_tensor *out = lq_newtensor(L);
  if (qt_reduce(ctx, out, op, t, dim) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_sum(lua_State *L) { return t_reduce(L, QT_SUM, "sum"); }
static int t_mean(lua_State *L) { return t_reduce(L, QT_MEAN, "mean"); }
static int t_max(lua_State *L) { return t_reduce(L, QT_MAX, "max"); }
static int t_min(lua_State *L) { return t_reduce(L, QT_MIN, "min"); }
static int t_argmax(lua_State *L) { return t_reduce(L, QT_ARGMAX, "argmax"); }
static int t_argmin(lua_State *L) { return t_reduce(L, QT_ARGMIN, "argmin"); }

/* ================================================================ registration */

/* Method name, function, and the most arguments it takes counting self (lqlua.h). */
const lq_Reg lq_reduce_methods[] = {
  {"sum", t_sum, 2}, {"mean", t_mean, 2}, {"max", t_max, 2}, {"min", t_min, 2},
  {"argmax", t_argmax, 2}, {"argmin", t_argmin, 2},
  {NULL, NULL, 0},
};
