/*
** l_scan.c — scans and the softmax family from Lua: the methods cumsum, cumprod, cummax,
** cummin, logcumsumexp, softmax and log_softmax, and qlua.cross_entropy. The core does the
** work (ops_scan.c); this file reads the dim (1-based; a 0-d tensor takes dim 1, as
** PyTorch's dim 0 of a scalar) and cross_entropy's target and options. l_tensor.c registers
** lq_scan_methods with the other methods, l_qlua.c lq_scan_functions with the module's.
*/
#include <string.h>

#include "lqlua.h"

/* A 1-based dim of t as 0-based; a 0-d tensor takes dim 1 only. */
static int s_checkdim(lua_State *L, int arg, const qt_tensor *t, const char *op) {
  lua_Integer d = luaL_checkinteger(L, arg);
  if (t->ndim == 0) {
    if (d != 1) luaL_error(L, "%s: dim %I out of range (a 0-d tensor takes dim 1)", op, d);
    return 0;
  }
  if (d < 1 || d > t->ndim) luaL_error(L, "%s: dim %I out of range (1..%d)", op, d, t->ndim);
  return (int)d - 1;
}

static int s_scan(lua_State *L, qt_scanop op) {
  const char *name = qt_scanop_name(op);
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, name);
  int dim = s_checkdim(L, 2, t, name);
  bool extreme = op == QT_CUMMAX || op == QT_CUMMIN;
  qt_tensor *out = lq_newtensor(L);
  qt_tensor *indices = extreme ? lq_newtensor(L) : NULL;
  if (qt_scan(ctx, out, indices, op, t, dim) != 0) return lq_raise(L, ctx);
  return extreme ? 2 : 1;  /* values, then positions */
}

static int t_cumsum(lua_State *L) { return s_scan(L, QT_CUMSUM); }
static int t_cumprod(lua_State *L) { return s_scan(L, QT_CUMPROD); }
static int t_cummax(lua_State *L) { return s_scan(L, QT_CUMMAX); }
static int t_cummin(lua_State *L) { return s_scan(L, QT_CUMMIN); }
static int t_logcumsumexp(lua_State *L) { return s_scan(L, QT_LOGCUMSUMEXP); }

static int s_softmax(lua_State *L, bool log) {
  const char *name = log ? "log_softmax" : "softmax";
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, name);
  int dim = s_checkdim(L, 2, t, name);
  qt_tensor *out = lq_newtensor(L);
  if (qt_softmax(ctx, out, t, dim, log) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_softmax(lua_State *L) { return s_softmax(L, false); }
static int t_log_softmax(lua_State *L) { return s_softmax(L, true); }

/* cross_entropy's opts: {reduction = "mean" | "sum" | "none", ignore_index = k,
** label_smoothing = eps}; unknown keys are an error. */
static void s_checkceopts(lua_State *L, int arg, qt_cross_entropy_opts *o) {
  const char *op = "cross_entropy";
  o->reduction = QT_REDUCE_MEAN;
  o->has_ignore_index = false;
  o->ignore_index = 0;
  o->label_smoothing = 0;
  if (lua_isnoneornil(L, arg)) return;
  luaL_checktype(L, arg, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, arg) != 0) {
    lua_pop(L, 1);
    const char *key = lq_keystring(L, -1, op);
    if (key == NULL || (strcmp(key, "reduction") != 0 && strcmp(key, "ignore_index") != 0 &&
                        strcmp(key, "label_smoothing") != 0))
      luaL_error(L, "%s: unknown option '%s' (reduction, ignore_index, label_smoothing)", op,
                 luaL_tolstring(L, -1, NULL));
  }
  if (lua_getfield(L, arg, "reduction") != LUA_TNIL) {
    const char *r = lua_type(L, -1) == LUA_TSTRING ? lq_tocstring(L, -1, op, "opts.reduction") : NULL;
    if (r != NULL && strcmp(r, "mean") == 0) o->reduction = QT_REDUCE_MEAN;
    else if (r != NULL && strcmp(r, "sum") == 0) o->reduction = QT_REDUCE_SUM;
    else if (r != NULL && strcmp(r, "none") == 0) o->reduction = QT_REDUCE_NONE;
    else luaL_error(L, "%s: opts.reduction must be \"mean\", \"sum\" or \"none\", got %s", op,
                    luaL_tolstring(L, -1, NULL));
  }
  lua_pop(L, 1);
  if (lua_getfield(L, arg, "ignore_index") != LUA_TNIL) {
    int isint;
    lua_Integer k = lua_tointegerx(L, -1, &isint);
    if (!isint) luaL_error(L, "%s: opts.ignore_index must be an integer, got %s", op,
                           luaL_tolstring(L, -1, NULL));
    o->has_ignore_index = true;
    o->ignore_index = (int64_t)k;
  }
  lua_pop(L, 1);
  if (lua_getfield(L, arg, "label_smoothing") != LUA_TNIL) {
    if (lua_type(L, -1) != LUA_TNUMBER)
      luaL_error(L, "%s: opts.label_smoothing must be a number, got %s", op, luaL_typename(L, -1));
    o->label_smoothing = (double)lua_tonumber(L, -1);
  }
  lua_pop(L, 1);
}

/* qlua.cross_entropy(logits, target [, opts]): target a tensor, or a Lua table made a tensor
** on the logits' device (integers: class indices, int64; floats: probabilities, float32),
** which takes the table's stack slot (as l_index.c's index tables). */
static int q_cross_entropy(lua_State *L) {
  const char *op = "cross_entropy";
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *logits = lq_checklive(L, 1, op);
  qt_tensor *target = qlua_totensor(L, 2);
  if (target == NULL) {
    if (lua_type(L, 2) != LUA_TTABLE && lua_type(L, 2) != LUA_TNUMBER)
      luaL_typeerror(L, 2, "qlua.Tensor, table or number (the target)");
    target = lq_fromtable(L, 2, op, -1, logits->storage->device, false);
    lua_replace(L, 2);
  } else if (qt_tensor_check(target, op, &ctx->err) != 0) {
    return lq_raise(L, ctx);
  }
  qt_cross_entropy_opts opts;
  s_checkceopts(L, 3, &opts);
  qt_tensor *out = lq_newtensor(L);
  if (qt_cross_entropy(ctx, out, logits, target, &opts) != 0) return lq_raise(L, ctx);
  return 1;
}

const lq_Reg lq_scan_methods[] = {
  {"cumsum", t_cumsum, 2, "(dim)", "running sums along dim (integers and bool give int64)"},
  {"cumprod", t_cumprod, 2, "(dim)",
   "running products along dim (integers and bool give int64)"},
  {"cummax", t_cummax, 2, "(dim)",
   "running maxima along dim and their int64 positions (ties: the later, NaN sticks)"},
  {"cummin", t_cummin, 2, "(dim)",
   "running minima along dim and their int64 positions (ties: the later, NaN sticks)"},
  {"logcumsumexp", t_logcumsumexp, 2, "(dim)",
   "log(cumsum(exp(t))) along dim, computed stably (float64 for integer tensors)"},
  {"softmax", t_softmax, 2, "(dim)",
   "exp(t - max) / sum(exp(t - max)) along dim (float64 for integer tensors)"},
  {"log_softmax", t_log_softmax, 2, "(dim)",
   "t - max - log(sum(exp(t - max))) along dim (float64 for integer tensors)"},
  {NULL, NULL, 0, NULL, NULL}
};

const lq_Reg lq_scan_functions[] = {
  {"cross_entropy", q_cross_entropy, 3, "(logits, target [, opts])",
   "the cross-entropy of N x C (or C) logits with 1-based class indices or probabilities, "
   "from log_softmax; opts {reduction = \"mean\" | \"sum\" | \"none\", ignore_index =, "
   "label_smoothing =}"},
  {NULL, NULL, 0, NULL, NULL}
};
