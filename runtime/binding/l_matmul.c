/*
** l_matmul.c — matrix products from Lua: the methods matmul, dot, outer, mv, bmm, addmm
** and addmm_, and the module's qlua.matmul, qlua.addmm and qlua.einsum. The core does the
** work (ops_matmul.c, ops_matmul_einsum.c); this file reads the operands and addmm's
** {beta =, alpha =}. l_tensor.c registers lq_matmul_methods with the other methods,
** l_qlua.c lq_matmul_functions with the module's.
*/
#include <string.h>

#include "lqlua.h"

/* ================================================================ two-operand products */

typedef int (*p_product_fn)(qt_ctx *, qt_tensor *, const qt_tensor *, const qt_tensor *);

/* a:op(b) for a product of two tensors into a new one. */
static int p_method(lua_State *L, const char *op, p_product_fn fn) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *a = lq_checklive(L, 1, op);
  qt_tensor *b = qlua_checktensor(L, 2);
  qt_tensor *out = lq_newtensor(L);
  if (fn(ctx, out, a, b) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_matmul(lua_State *L) { return p_method(L, "matmul", qt_matmul); }
static int t_dot(lua_State *L) { return p_method(L, "dot", qt_dot); }
static int t_outer(lua_State *L) { return p_method(L, "outer", qt_outer); }
static int t_mv(lua_State *L) { return p_method(L, "mv", qt_mv); }
static int t_bmm(lua_State *L) { return p_method(L, "bmm", qt_bmm); }

static int q_matmul(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *a = qlua_checktensor(L, 1), *b = qlua_checktensor(L, 2);
  qt_tensor *out = lq_newtensor(L);
  if (qt_matmul(ctx, out, a, b) != 0) return lq_raise(L, ctx);
  return 1;
}

/* ================================================================ addmm */

/* addmm's optional {beta =, alpha =} at arg (both default 1); other keys are an error. */
static void p_checkscales(lua_State *L, int arg, const char *op, double *beta, double *alpha) {
  *beta = 1, *alpha = 1;
  if (lua_isnoneornil(L, arg)) return;
  if (lua_type(L, arg) != LUA_TTABLE) luaL_typeerror(L, arg, "table {beta =, alpha =}");
  arg = lua_absindex(L, arg);
  lua_pushnil(L);
  while (lua_next(L, arg) != 0) {
    lua_pop(L, 1);
    const char *key = lq_keystring(L, -1, op);
    if (key == NULL || (strcmp(key, "beta") != 0 && strcmp(key, "alpha") != 0))
      luaL_error(L, "%s: unknown option '%s' (beta, alpha)", op, luaL_tolstring(L, -1, NULL));
  }
  static const char *const names[2] = {"beta", "alpha"};
  double *values[2] = {beta, alpha};
  for (int i = 0; i < 2; i++) {
    if (lua_getfield(L, arg, names[i]) != LUA_TNIL) {
      if (lua_type(L, -1) != LUA_TNUMBER)
        luaL_error(L, "%s: opts.%s must be a number, got %s", op, names[i],
                   luaL_typename(L, -1));
      *values[i] = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
  }
}

/* c:addmm(a, b [, opts]) and qlua.addmm(c, a, b [, opts]): the same arguments. */
static int p_addmm(lua_State *L, bool method) {
  const char *op = "addmm";
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *c = method ? lq_checklive(L, 1, op) : qlua_checktensor(L, 1);
  qt_tensor *a = qlua_checktensor(L, 2), *b = qlua_checktensor(L, 3);
  double beta, alpha;
  p_checkscales(L, 4, op, &beta, &alpha);
  qt_tensor *out = lq_newtensor(L);
  if (qt_addmm(ctx, out, c, a, b, beta, alpha) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_addmm(lua_State *L) { return p_addmm(L, true); }
static int q_addmm(lua_State *L) { return p_addmm(L, false); }

static int t_addmm_(lua_State *L) {
  const char *op = "addmm_";
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *c = lq_checklive(L, 1, op);
  qt_tensor *a = qlua_checktensor(L, 2), *b = qlua_checktensor(L, 3);
  double beta, alpha;
  p_checkscales(L, 4, op, &beta, &alpha);
  if (qt_addmm_(ctx, c, a, b, beta, alpha) != 0) return lq_raise(L, ctx);
  lua_settop(L, 1);
  return 1;
}

/* ================================================================ einsum */

/* qlua.einsum(spec, a, b, ...) or qlua.einsum(spec, {a, b, ...}). The operands stay on the
** stack (or in the table there), so the collector keeps them while the core runs. */
static int q_einsum(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  const char *spec = lq_checkcstring(L, 1, "einsum", "the spec");
  const qt_tensor *operands[QT_EINSUM_MAX];
  int n;
  if (lua_type(L, 2) == LUA_TTABLE && qlua_totensor(L, 2) == NULL) {
    lq_checkend(L, 3, "einsum", false);
    lua_Integer len = luaL_len(L, 2);
    if (len < 1 || len > QT_EINSUM_MAX)
      return luaL_error(L, "einsum: takes 1 to %d operands, got %I", QT_EINSUM_MAX, len);
    n = (int)len;
    lua_settop(L, 2);
    for (int k = 0; k < n; k++) {
      lua_geti(L, 2, k + 1);
      qt_tensor *t = qlua_totensor(L, -1);
      if (t == NULL)
        return luaL_error(L, "einsum: operand %d is a %s (qlua.Tensor expected)", k + 1,
                          luaL_typename(L, -1));
      operands[k] = t;  /* held by the table's stack copy below it */
    }
  } else {
    n = lua_gettop(L) - 1;
    if (n < 1 || n > QT_EINSUM_MAX)
      return luaL_error(L, "einsum: takes 1 to %d operands, got %d", QT_EINSUM_MAX, n);
    for (int k = 0; k < n; k++) operands[k] = qlua_checktensor(L, k + 2);
  }
  qt_tensor *out = lq_newtensor(L);
  if (qt_einsum(ctx, out, spec, n, operands) != 0) return lq_raise(L, ctx);
  return 1;
}

/* ================================================================ registration */

const lq_Reg lq_matmul_methods[] = {
  {"matmul", t_matmul, 2, "(b)", "the matrix product t @ b, as qlua.matmul"},
  {"dot", t_dot, 2, "(b)", "the inner product of two 1-D tensors of one size, as a 0-d tensor"},
  {"outer", t_outer, 2, "(b)", "the outer product of two 1-D tensors: #t x #b"},
  {"mv", t_mv, 2, "(v)", "the product of the 2-D t and the 1-D v"},
  {"bmm", t_bmm, 2, "(b)",
   "batched products of 3-D tensors with equal batch sizes (no broadcasting)"},
  {"addmm", t_addmm, 4, "(a, b [, opts])",
   "beta * t + alpha * (a @ b) in a new tensor, as qlua.addmm"},
  {"addmm_", t_addmm_, 4, "(a, b [, opts])",
   "t = beta * t + alpha * (a @ b) in place; t has the product's shape"},
  {NULL, NULL, 0, NULL, NULL}
};

const lq_Reg lq_matmul_functions[] = {
  {"matmul", q_matmul, 2, "(a, b)",
   "matrix product: 1-D, 2-D and batched (batch dims broadcast); any float dtype "
   "(float16/bfloat16 on the GPU's tensor cores)"},
  {"addmm", q_addmm, 4, "(c, a, b [, {beta =, alpha =}])",
   "beta * c + alpha * (a @ b) for 2-D a and b, c broadcast to the product (beta and alpha "
   "1 by default; beta 0 ignores c)"},
  {"einsum", q_einsum, LQ_VARARGS, "(spec, a [, b, ...])",
   "NumPy's einsum: \"ij,jk->ik\", implicit output, \"...\" broadcasting, repeated letters "
   "as diagonals; operands also as one list"},
  {NULL, NULL, 0, NULL, NULL}
};
