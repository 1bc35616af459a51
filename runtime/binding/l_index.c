/*
** l_index.c — the qlua.Tensor methods that index with a tensor of positions: gather,
** index_select, take, scatter_, index_add_, scatter_add_, index_fill_ and index_copy_. The
** core does the work (ops_index.c); this
** file reads the 1-based dim and the index argument (a tensor, or a table of integers made
** an int64 tensor on the data's device). l_tensor.c registers lq_index_methods with the
** other methods.
*/
#include <stdint.h>
#include <string.h>

#include "lqlua.h"

/* ================================================================ arguments of the methods */

/* An index argument: a tensor as is, or a table converted to int64 on src's device. The
** tensor made from a table takes the table's stack slot (the collector owns it there): pushed
** on top instead, it would stand in for a missing later argument, and t:scatter_(1, {{1}})
** scattered the index itself. */
static qt_tensor *t_checkindex(lua_State *L, int arg, const char *op, const qt_tensor *src) {
  qt_tensor *t = qlua_totensor(L, arg);
  if (t != NULL) return t;
  if (lua_type(L, arg) != LUA_TTABLE) luaL_typeerror(L, arg, "qlua.Tensor or table of indices");
  t = lq_fromtable(L, arg, op, QT_I64, src->storage->device, true);
  lua_replace(L, arg);
  return t;
}


/* ================================================================ indexing ops */

static int t_gather(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *src = lq_checklive(L, 1, "gather");
  int dim = 0, index_arg = 2;
  if (lua_type(L, 2) == LUA_TNUMBER) {
    dim = lq_checkdim(L, 2, src, "gather");
    index_arg = 3;
  } else if (src->ndim != 1) {
    return luaL_error(L, "gather: a %d-d source needs a dim: src:gather(dim, index)", src->ndim);
  }
  qt_tensor *index = t_checkindex(L, index_arg, "gather", src);
  qt_tensor *out = lq_newtensor(L);
  if (qt_gather(ctx, out, src, dim, index) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_index_select(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *src = lq_checklive(L, 1, "index_select");
  int dim = lq_checkdim(L, 2, src, "index_select");
  qt_tensor *index = t_checkindex(L, 3, "index_select", src);
  qt_tensor *out = lq_newtensor(L);
  if (qt_index_select(ctx, out, src, dim, index) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_take(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *src = lq_checklive(L, 1, "take");
  qt_tensor *index = t_checkindex(L, 2, "take", src);
  qt_tensor *out = lq_newtensor(L);
  if (qt_take(ctx, out, src, index) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_scatter_(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *dst = lq_checklive(L, 1, "scatter_");
  int dim = lq_checkdim(L, 2, dst, "scatter_");
  qt_tensor *index = t_checkindex(L, 3, "scatter_", dst);
  int rc;
  if (lua_type(L, 4) == LUA_TNUMBER || lua_type(L, 4) == LUA_TBOOLEAN) {  /* true is 1 */
    rc = qt_scatter_(ctx, dst, dim, index, NULL, lq_checkstorable(L, 4, "scatter_", dst->dtype));
  } else {
    qt_tensor *src = qlua_totensor(L, 4);
    if (src == NULL) luaL_typeerror(L, 4, "qlua.Tensor or number");
    rc = qt_scatter_(ctx, dst, dim, index, src, qt_scalar_i(0));
  }
  if (rc != 0) return lq_raise(L, ctx);
  lua_settop(L, 1);
  return 1;
}

static int t_index_add_(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *dst = lq_checklive(L, 1, "index_add_");
  int dim = lq_checkdim(L, 2, dst, "index_add_");
  qt_tensor *index = t_checkindex(L, 3, "index_add_", dst);
  qt_tensor *src = qlua_checktensor(L, 4);
  if (qt_index_add_(ctx, dst, dim, index, src) != 0) return lq_raise(L, ctx);
  lua_settop(L, 1);
  return 1;
}

static int t_scatter_add_(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *dst = lq_checklive(L, 1, "scatter_add_");
  int dim = lq_checkdim(L, 2, dst, "scatter_add_");
  qt_tensor *index = t_checkindex(L, 3, "scatter_add_", dst);
  qt_tensor *src = qlua_checktensor(L, 4);
  if (qt_scatter_add_(ctx, dst, dim, index, src) != 0) return lq_raise(L, ctx);
  lua_settop(L, 1);
  return 1;
}

/* The value is a number (or a boolean, 1 or 0) that dst's dtype can hold, as scatter_'s. */
static int t_index_fill_(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *dst = lq_checklive(L, 1, "index_fill_");
  int dim = lq_checkdim(L, 2, dst, "index_fill_");
  qt_tensor *index = t_checkindex(L, 3, "index_fill_", dst);
  qt_scalar value = lq_checkstorable(L, 4, "index_fill_", dst->dtype);
  if (qt_index_fill_(ctx, dst, dim, index, value) != 0) return lq_raise(L, ctx);
  lua_settop(L, 1);
  return 1;
}

static int t_index_copy_(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *dst = lq_checklive(L, 1, "index_copy_");
  int dim = lq_checkdim(L, 2, dst, "index_copy_");
  qt_tensor *index = t_checkindex(L, 3, "index_copy_", dst);
  qt_tensor *src = qlua_checktensor(L, 4);
  if (qt_index_copy_(ctx, dst, dim, index, src) != 0) return lq_raise(L, ctx);
  lua_settop(L, 1);
  return 1;
}

const lq_Reg lq_index_methods[] = {
  {"gather", t_gather, 3, "(dim, index)",
   "torch.gather: out[i][j] = t[index[i][j]][j] for dim 1; index's shape"},
  {"index_select", t_index_select, 3, "(dim, index)",
   "the whole slices along dim at the 1-D index's positions"},
  {"take", t_take, 2, "(index)",
   "the elements at index's positions in the flattened t; index's shape"},
  {"scatter_", t_scatter_, 4, "(dim, index, src)",
   "t[index[i][j]][j] = src[i][j] for dim 1 (src a tensor or number)"},
  {"index_add_", t_index_add_, 4, "(dim, index, src)",
   "t:select(dim, index[k]) += src:select(dim, k); duplicates accumulate"},
  {"scatter_add_", t_scatter_add_, 4, "(dim, index, src)",
   "t[index[i][j]][j] += src[i][j] for dim 1; duplicates accumulate"},
  {"index_fill_", t_index_fill_, 4, "(dim, index, v)",
   "fills the slices of dim at the 1-D index's positions with the number v"},
  {"index_copy_", t_index_copy_, 4, "(dim, index, src)",
   "t:select(dim, index[k]) = src:select(dim, k)"},
  {NULL, NULL, 0, NULL, NULL}
};
