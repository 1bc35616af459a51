/*
** l_mask.c — masks from Lua: qlua.where and the methods masked_fill_, masked_fill,
** masked_select, nonzero, any, all and count_nonzero. The core does the work (ops_mask.c);
** this file reads the operands: a mask is a tensor of any dtype (read through nonzero) or a
** Lua table (made a tensor on the data's device: a table of booleans gives bool), where's
** values are tensors, numbers or booleans. l_tensor.c registers lq_mask_methods with the
** other methods, l_qlua.c lq_mask_functions with the module's.
*/
#include "lqlua.h"

/* ================================================================ arguments */

/* A mask argument: a tensor as is, or a table converted on t's device (its dtype inferred:
** booleans give bool). The tensor made from a table takes the table's stack slot, where the
** collector owns it (as l_index.c's index tables). */
static qt_tensor *m_checkmask(lua_State *L, int arg, const char *op, const qt_tensor *t) {
  qt_tensor *m = qlua_totensor(L, arg);
  if (m != NULL) return m;
  if (lua_type(L, arg) != LUA_TTABLE) luaL_typeerror(L, arg, "qlua.Tensor or table");
  m = lq_fromtable(L, arg, op, -1, t->storage->device, false);
  lua_replace(L, arg);
  return m;
}

/* where's a or b: a tensor, a number or a boolean. */
static void m_checkwherearg(lua_State *L, int arg, qt_where_arg *out) {
  out->tensor = NULL;
  out->is_float = false;
  out->is_bool = false;
  out->value = qt_scalar_i(0);
  switch (lua_type(L, arg)) {
    case LUA_TBOOLEAN:
      out->is_bool = true;
      out->value = qt_scalar_i(lua_toboolean(L, arg));
      return;
    case LUA_TNUMBER:
      out->value = lq_toscalar(L, arg, &out->is_float);
      return;
    default:
      out->tensor = qlua_totensor(L, arg);
      if (out->tensor == NULL) luaL_typeerror(L, arg, "qlua.Tensor, number or boolean");
  }
}

/* masked_fill's value: a number or boolean the tensor's dtype can hold, or a 0-d tensor
** (the core checks its shape). */
static const qt_tensor *m_checkvalue(lua_State *L, int arg, const char *op, const qt_tensor *t,
                                     qt_scalar *value) {
  *value = qt_scalar_i(0);
  if (lua_type(L, arg) == LUA_TNUMBER || lua_type(L, arg) == LUA_TBOOLEAN) {
    *value = lq_checkstorable(L, arg, op, t->dtype);
    return NULL;
  }
  qt_tensor *v = qlua_totensor(L, arg);
  if (v == NULL) luaL_typeerror(L, arg, "number, boolean or 0-d qlua.Tensor");
  return v;
}

/* ================================================================ the functions */

static int q_where(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *cond = lq_checklive(L, 1, "where");
  qt_where_arg a, b;
  m_checkwherearg(L, 2, &a);
  m_checkwherearg(L, 3, &b);
  qt_tensor *out = lq_newtensor(L);
  if (qt_where(ctx, out, cond, &a, &b) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_masked_fill_(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "masked_fill_");
  qt_tensor *mask = m_checkmask(L, 2, "masked_fill_", t);
  qt_scalar value;
  const qt_tensor *vt = m_checkvalue(L, 3, "masked_fill_", t, &value);
  if (qt_masked_fill_(ctx, t, mask, vt, value) != 0) return lq_raise(L, ctx);
  lua_settop(L, 1);
  return 1;
}

static int t_masked_fill(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "masked_fill");
  qt_tensor *mask = m_checkmask(L, 2, "masked_fill", t);
  qt_scalar value;
  const qt_tensor *vt = m_checkvalue(L, 3, "masked_fill", t, &value);
  qt_tensor *out = lq_newtensor(L);
  if (qt_masked_fill(ctx, out, t, mask, vt, value) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_masked_select(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "masked_select");
  qt_tensor *mask = m_checkmask(L, 2, "masked_select", t);
  qt_tensor *out = lq_newtensor(L);
  if (qt_masked_select(ctx, out, t, mask) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_nonzero(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "nonzero");
  qt_tensor *out = lq_newtensor(L);
  if (qt_nonzero(ctx, out, t) != 0) return lq_raise(L, ctx);
  return 1;
}

/* As sum and max (l_tensor.c's t_reduce): without dim a Lua value (a boolean for any/all,
** an integer for count_nonzero), the 0-d result released at once so device memory does not
** wait for the collector; with dim a tensor without that dim, or (any, all: PyTorch's
** keepdim; count_nonzero has none, as PyTorch's) with it kept at size 1. */
static int m_reduce(lua_State *L, const char *op, bool keepdim_arg,
                    int (*reduce)(qt_ctx *, qt_tensor *, const qt_tensor *, int)) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, op);
  if (lua_isnoneornil(L, 2)) {
    if (keepdim_arg && !lua_isnoneornil(L, 3))
      return luaL_error(L, "%s: keepdim needs a dim (the whole tensor gives one value)", op);
    qt_tensor *r = lq_newtensor(L);
    if (reduce(ctx, r, t, -1) != 0) return lq_raise(L, ctx);
    int64_t pos[QT_MAXDIM] = {0};
    qt_scalar v;
    if (qt_get(ctx, r, pos, &v) != 0) return lq_raise_as(L, ctx, "get", op);
    qt_dtype dtype = r->dtype;
    qt_tensor_release(r);
    lq_pushscalar(L, dtype, v);
    return 1;
  }
  int dim = lq_checkdim(L, 2, t, op);
  bool keepdim = keepdim_arg && lq_optkeepdim(L, 3, op);
  qt_tensor *out = lq_newtensor(L);
  if (reduce(ctx, out, t, dim) != 0) return lq_raise(L, ctx);
  return keepdim ? lq_keepdim(L, ctx, 1, dim, t->ndim, op) : 1;
}

static int t_any(lua_State *L) { return m_reduce(L, "any", true, qt_any); }
static int t_all(lua_State *L) { return m_reduce(L, "all", true, qt_all); }
static int t_count_nonzero(lua_State *L) { return m_reduce(L, "count_nonzero", false, qt_count_nonzero); }

const lq_Reg lq_mask_methods[] = {
  {"masked_fill_", t_masked_fill_, 3, "(mask, v)",
   "sets the elements where mask is nonzero to v (mask broadcast)"},
  {"masked_fill", t_masked_fill, 3, "(mask, v)",
   "a copy of t with the elements where mask is nonzero set to v"},
  {"masked_select", t_masked_select, 2, "(mask)",
   "a 1-D tensor of the elements where mask is nonzero, in row-major order"},
  {"nonzero", t_nonzero, 1, "()",
   "an n x dim int64 tensor of the 1-based positions of the nonzero elements"},
  {"any", t_any, 3, "([dim] [, keepdim])",
   "whether any element is nonzero (along dim: a tensor without it, or with it at size 1)"},
  {"all", t_all, 3, "([dim] [, keepdim])",
   "whether every element is nonzero (along dim: a tensor without it, or with it at size 1)"},
  {"count_nonzero", t_count_nonzero, 2, "([dim])",
   "the number of nonzero elements (along dim: a tensor without it)"},
  {NULL, NULL, 0, NULL, NULL}
};

const lq_Reg lq_mask_functions[] = {
  {"where", q_where, 3, "(cond, a, b)",
   "a where cond is nonzero, else b (tensors or numbers, broadcast)"},
  {NULL, NULL, 0, NULL, NULL}
};
