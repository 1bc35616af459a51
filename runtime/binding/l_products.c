/*
** l_products.c — matrix products from Lua: the methods matmul and the module's
** qlua.matmul. The core does the work (ops_matmul.c); this file reads the operands.
** l_tensor.c registers lq_products_methods with the other methods, l_qlua.c
** lq_products_functions with the module's.
*/
#include "lqlua.h"

/* ================================================================ matmul */

static int t_matmul(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *a = lq_checklive(L, 1, "matmul");
  qt_tensor *b = qlua_checktensor(L, 2);
  qt_tensor *out = lq_newtensor(L);
  if (qt_matmul(ctx, out, a, b) != 0) return lq_raise(L, ctx);
  return 1;
}

static int q_matmul(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *a = qlua_checktensor(L, 1), *b = qlua_checktensor(L, 2);
  qt_tensor *out = lq_newtensor(L);
  if (qt_matmul(ctx, out, a, b) != 0) return lq_raise(L, ctx);
  return 1;
}

const lq_Reg lq_products_methods[] = {
  {"matmul", t_matmul, 2},
  {NULL, NULL, 0},
};

const lq_Reg lq_products_functions[] = {
  {"matmul", q_matmul, 2},
  {NULL, NULL, 0},
};
