/*
** l_norm.c — the fused normalisations from Lua: qlua._norm and qlua._norm_backward, which
** qlua.nn.functional's layer_norm, rms_norm, group_norm and batch_norm call (and autograd's
** derivative of _norm). The core does the work (ops_norm.c); this file reads the kind and
** the options. l_qlua.c registers lq_norm_functions with the module's functions.
*/
#include "lqlua.h"

#include <string.h>

static const char *const norm_kinds[] = {"layer", "rms", "group", "batch", NULL};
static const qt_norm_op norm_ops[] = {QT_LAYER_NORM, QT_RMS_NORM, QT_GROUP_NORM, QT_BATCH_NORM};

/* A tensor or nil at arg. */
static const qt_tensor *n_opt_tensor(lua_State *L, int arg, const char *op, const char *what) {
  if (lua_isnoneornil(L, arg)) return NULL;
  const qt_tensor *t = qlua_totensor(L, arg);
  if (t == NULL) luaL_error(L, "%s: the %s must be a tensor or nil, got a %s", op, what, luaL_typename(L, arg));
  return t;
}

/* kind at arg, the options table at opts: eps, normalized (layer, rms), groups (group),
** eval (batch: running_mean / running_var are used, not the batch's). */
static const char *n_args(lua_State *L, int arg, int opts, qt_norm_args *a) {
  int k = luaL_checkoption(L, arg, NULL, norm_kinds);
  static const char *const names[] = {"layer_norm", "rms_norm", "group_norm", "batch_norm"};
  const char *op = names[k];
  memset(a, 0, sizeof *a);
  a->op = norm_ops[k];
  luaL_checktype(L, opts, LUA_TTABLE);
  lua_getfield(L, opts, "eps");
  a->eps = luaL_optnumber(L, -1, 1e-5);
  lua_getfield(L, opts, "normalized");
  a->normalized = (int)luaL_optinteger(L, -1, 1);
  lua_getfield(L, opts, "groups");
  a->groups = (int64_t)luaL_optinteger(L, -1, 1);
  lua_getfield(L, opts, "eval");
  a->given_stats = a->op == QT_BATCH_NORM && lua_toboolean(L, -1);
  lua_pop(L, 4);
  return op;
}

/* _norm(kind, x, weight, bias, opts) -> y, mean (nil for rms), rstd. */
static int q_norm(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_norm_args a;
  const char *op = n_args(L, 1, 5, &a);
  const qt_tensor *x = qlua_checktensor(L, 2);
  const qt_tensor *w = n_opt_tensor(L, 3, op, "weight"), *b = n_opt_tensor(L, 4, op, "bias");
  const qt_tensor *rm = NULL, *rv = NULL;
  if (a.given_stats) {
    lua_getfield(L, 5, "running_mean");
    lua_getfield(L, 5, "running_var");
    rm = n_opt_tensor(L, -2, op, "running_mean");
    rv = n_opt_tensor(L, -1, op, "running_var");
  }
  qt_tensor *y = lq_newtensor(L), *mean = lq_newtensor(L), *rstd = lq_newtensor(L);
  if (qt_norm(ctx, &a, x, w, b, rm, rv, y, mean, rstd) != 0) return lq_raise(L, ctx);
  if (a.op == QT_RMS_NORM) {
    lua_pushnil(L);
    lua_replace(L, -3);
  }
  return 3;
}

/* _norm_backward(kind, dy, x, weight, mean, rstd, opts, want_dx, want_dweight, want_dbias)
** -> dx, dweight, dbias (nil where not wanted). */
static int q_norm_backward(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_norm_args a;
  const char *op = n_args(L, 1, 7, &a);
  const qt_tensor *dy = qlua_checktensor(L, 2), *x = qlua_checktensor(L, 3);
  const qt_tensor *w = n_opt_tensor(L, 4, op, "weight"), *mean = n_opt_tensor(L, 5, op, "mean");
  const qt_tensor *rstd = qlua_checktensor(L, 6);
  bool want[3] = {lua_toboolean(L, 8), lua_toboolean(L, 9), lua_toboolean(L, 10)};
  qt_tensor *out[3];
  for (int k = 0; k < 3; k++) {
    if (want[k]) out[k] = lq_newtensor(L);
    else {
      out[k] = NULL;
      lua_pushnil(L);
    }
  }
  if (qt_norm_backward(ctx, &a, dy, x, w, mean, rstd, out[0], out[1], out[2]) != 0)
    return lq_raise(L, ctx);
  return 3;
}

const lq_Reg lq_norm_functions[] = {
  {"_norm", q_norm, 5, "(kind, x, weight, bias, opts)",
   "qlua.nn's fused normalisation (kind \"layer\", \"rms\", \"group\" or \"batch\"; opts eps, "
   "normalized, groups, eval with running_mean, running_var): y, mean, rstd"},
  {"_norm_backward", q_norm_backward, 10,
   "(kind, dy, x, weight, mean, rstd, opts, want_dx, want_dweight, want_dbias)",
   "_norm's backward: the wanted ones of dx, dweight, dbias"},
  {NULL, NULL, 0, NULL, NULL}
};
