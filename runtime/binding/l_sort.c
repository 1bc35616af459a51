/*
** l_sort.c — sorting and selection from Lua: the methods sort, argsort, topk, kthvalue,
** median, unique, bincount and histc, and qlua.searchsorted. The core does the work
** (ops_sort.c); this file reads the arguments (1-based dims, the last by default; booleans
** for the flags; unique's opts table) and pushes the results. l_tensor.c registers
** lq_sort_methods with the other methods, l_qlua.c lq_sort_functions with the module's.
*/
#include "lqlua.h"

#include <string.h>

/* An optional 1-based dim at arg: the last dim when nil (dim 1 of a 0-d tensor, which is
** one line of one element, is accepted too). */
static int s_optdim(lua_State *L, int arg, const qt_tensor *t, const char *op) {
  if (lua_isnoneornil(L, arg)) return t->ndim > 0 ? t->ndim - 1 : 0;
  if (t->ndim == 0 && lua_isinteger(L, arg) && lua_tointeger(L, arg) == 1) return 0;
  return lq_checkdim(L, arg, t, op);
}

/* An optional boolean flag. */
static bool s_optflag(lua_State *L, int arg, bool def) {
  if (lua_isnoneornil(L, arg)) return def;
  luaL_checktype(L, arg, LUA_TBOOLEAN);
  return lua_toboolean(L, arg);
}

/* t:sort([dim] [, descending]) and t:argsort: t:sort(true) is descending along the last
** dim. */
static void s_sortargs(lua_State *L, const qt_tensor *t, const char *op, int *dim,
                       bool *descending) {
  if (lua_type(L, 2) == LUA_TBOOLEAN && lua_isnoneornil(L, 3)) {
    *dim = s_optdim(L, 3, t, op);
    *descending = lua_toboolean(L, 2);
    return;
  }
  *dim = s_optdim(L, 2, t, op);
  *descending = s_optflag(L, 3, false);
}

static int t_sort(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "sort");
  int dim;
  bool descending;
  s_sortargs(L, t, "sort", &dim, &descending);
  qt_tensor *values = lq_newtensor(L);
  qt_tensor *indices = lq_newtensor(L);
  if (qt_sort(ctx, values, indices, t, dim, descending) != 0) return lq_raise(L, ctx);
  return 2;
}

static int t_argsort(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "argsort");
  int dim;
  bool descending;
  s_sortargs(L, t, "argsort", &dim, &descending);
  qt_tensor *indices = lq_newtensor(L);
  if (qt_sort(ctx, NULL, indices, t, dim, descending) != 0)
    return lq_raise_as(L, ctx, "sort", "argsort");
  return 1;
}

static int t_topk(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "topk");
  lua_Integer k = luaL_checkinteger(L, 2);
  int dim = s_optdim(L, 3, t, "topk");
  bool largest = s_optflag(L, 4, true);
  bool sorted = s_optflag(L, 5, true);
  qt_tensor *values = lq_newtensor(L);
  qt_tensor *indices = lq_newtensor(L);
  if (qt_topk(ctx, values, indices, t, (int64_t)k, dim, largest, sorted) != 0)
    return lq_raise(L, ctx);
  return 2;
}

static int t_kthvalue(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "kthvalue");
  lua_Integer k = luaL_checkinteger(L, 2);
  int dim = s_optdim(L, 3, t, "kthvalue");
  bool keepdim = lq_optkeepdim(L, 4, "kthvalue");
  qt_tensor *values = lq_newtensor(L);
  qt_tensor *indices = lq_newtensor(L);
  if (qt_kthvalue(ctx, values, indices, t, (int64_t)k, dim) != 0) return lq_raise(L, ctx);
  return keepdim ? lq_keepdim(L, ctx, 2, dim, t->ndim, "kthvalue") : 2;
}

/* Without dim a Lua number (as t:max()), the 0-d result released at once; with dim the
** values and their indices, dim kept at size 1 with keepdim. */
static int t_median(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "median");
  if (lua_isnoneornil(L, 2)) {
    if (!lua_isnoneornil(L, 3))
      return luaL_error(L, "median: keepdim needs a dim (the whole tensor gives one value)");
    qt_tensor *r = lq_newtensor(L);
    if (qt_median(ctx, r, NULL, t, -1) != 0) return lq_raise(L, ctx);
    int64_t pos[QT_MAXDIM] = {0};
    qt_scalar v;
    if (qt_get(ctx, r, pos, &v) != 0) return lq_raise_as(L, ctx, "get", "median");
    qt_dtype dtype = r->dtype;
    qt_tensor_release(r);
    lq_pushscalar(L, dtype, v);
    return 1;
  }
  int dim = s_optdim(L, 2, t, "median");
  bool keepdim = lq_optkeepdim(L, 3, "median");
  qt_tensor *values = lq_newtensor(L);
  qt_tensor *indices = lq_newtensor(L);
  if (qt_median(ctx, values, indices, t, dim) != 0) return lq_raise(L, ctx);
  return keepdim ? lq_keepdim(L, ctx, 2, dim, t->ndim, "median") : 2;
}

/* t:unique([{return_inverse =, return_counts =, sorted =}]): the uniques, then the inverse
** and the counts when asked, in PyTorch's order. sorted may only be true (they always are). */
static int t_unique(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "unique");
  bool want_inverse = false, want_counts = false;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 2) != 0) {
      const char *key = lq_keystring(L, -2, "unique");
      bool flag = lua_toboolean(L, -1);
      if (key == NULL || lua_type(L, -1) != LUA_TBOOLEAN)
        return luaL_error(L, "unique: opts takes boolean fields return_inverse, return_counts "
                          "and sorted");
      if (strcmp(key, "return_inverse") == 0) want_inverse = flag;
      else if (strcmp(key, "return_counts") == 0) want_counts = flag;
      else if (strcmp(key, "sorted") == 0) {
        if (!flag) return luaL_error(L, "unique: sorted = false is not supported (the uniques "
                                     "are always sorted)");
      } else {
        return luaL_error(L, "unique: unknown option '%s' (return_inverse, return_counts, "
                          "sorted)", key);
      }
      lua_pop(L, 1);
    }
  }
  qt_tensor *uniques = lq_newtensor(L);
  qt_tensor *inverse = want_inverse ? lq_newtensor(L) : NULL;
  qt_tensor *counts = want_counts ? lq_newtensor(L) : NULL;
  if (qt_unique(ctx, uniques, inverse, counts, t) != 0) return lq_raise(L, ctx);
  return 1 + want_inverse + want_counts;
}

/* t:bincount([weights] [, minlength]); t:bincount(n) is minlength n without weights. */
static int t_bincount(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "bincount");
  const qt_tensor *weights = NULL;
  lua_Integer minlength = 0;
  if (lua_type(L, 2) == LUA_TNUMBER && lua_isnoneornil(L, 3)) {
    minlength = luaL_checkinteger(L, 2);
  } else {
    if (!lua_isnoneornil(L, 2)) {
      weights = qlua_totensor(L, 2);
      if (weights == NULL) {
        if (lua_type(L, 2) != LUA_TTABLE) luaL_typeerror(L, 2, "qlua.Tensor, table or nil");
        weights = lq_fromtable(L, 2, "bincount", -1, t->storage->device, false);
        lua_replace(L, 2);
      }
    }
    minlength = luaL_optinteger(L, 3, 0);
  }
  qt_tensor *out = lq_newtensor(L);
  if (qt_bincount(ctx, out, t, weights, (int64_t)minlength) != 0) return lq_raise(L, ctx);
  return 1;
}

/* t:histc([bins = 100] [, min = 0] [, max = 0]), PyTorch's defaults. */
static int t_histc(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "histc");
  lua_Integer bins = luaL_optinteger(L, 2, 100);
  lua_Number lo = luaL_optnumber(L, 3, 0), hi = luaL_optnumber(L, 4, 0);
  qt_tensor *out = lq_newtensor(L);
  if (qt_histc(ctx, out, t, (int64_t)bins, (double)lo, (double)hi) != 0) return lq_raise(L, ctx);
  return 1;
}

/* qlua.searchsorted(sorted, values [, right]): values a tensor, or a number or table made a
** tensor on sorted's device (the core promotes the two dtypes). */
static int q_searchsorted(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *sorted = lq_checklive(L, 1, "searchsorted");
  qt_tensor *values = qlua_totensor(L, 2);
  if (values == NULL) {
    if (lua_type(L, 2) != LUA_TTABLE && lua_type(L, 2) != LUA_TNUMBER)
      luaL_typeerror(L, 2, "qlua.Tensor, number or table");
    values = lq_fromtable(L, 2, "searchsorted", -1, sorted->storage->device, false);
    lua_replace(L, 2);
  }
  bool right = s_optflag(L, 3, false);
  qt_tensor *out = lq_newtensor(L);
  if (qt_searchsorted(ctx, out, sorted, values, right) != 0) return lq_raise(L, ctx);
  return 1;
}

const lq_Reg lq_sort_methods[] = {
  {"sort", t_sort, 3, "([dim] [, descending])",
   "values and int64 positions sorted along dim (the last), stable, NaN last (first when "
   "descending)"},
  {"argsort", t_argsort, 3, "([dim] [, descending])",
   "the int64 positions that sort t along dim, as sort's"},
  {"topk", t_topk, 5, "(k [, dim] [, largest] [, sorted])",
   "the k largest (or smallest) along dim and their positions, best first, ties by position"},
  {"kthvalue", t_kthvalue, 4, "(k [, dim] [, keepdim])",
   "the k-th smallest along dim and its position (dim removed, or kept at size 1)"},
  {"median", t_median, 3, "([dim] [, keepdim])",
   "the lower median: a number, or along dim values and positions; NaN if the line holds one"},
  {"unique", t_unique, 2, "([{return_inverse =, return_counts =}])",
   "the sorted distinct values, and the inverse (t's shape) and counts when asked"},
  {"bincount", t_bincount, 3, "([weights] [, minlength])",
   "result[v + 1] counts (sums weights of) the values v of a 1-D non-negative integer t"},
  {"histc", t_histc, 4, "([bins] [, min] [, max])",
   "a float histogram of bins (100) equal bins over [min, max] (0, 0: the data's range)"},
  {NULL, NULL, 0, NULL, NULL}
};

const lq_Reg lq_sort_functions[] = {
  {"searchsorted", q_searchsorted, 3, "(sorted, values [, right])",
   "1-based insertion positions of values in the sorted last dim (PyTorch's + 1); right: "
   "after equal elements"},
  {NULL, NULL, 0, NULL, NULL}
};
