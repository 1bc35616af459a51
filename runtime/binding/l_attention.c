/*
** l_attention.c — scaled dot-product attention from Lua: qlua._attention,
** qlua._attention_backward and qlua._attention_path, which
** qlua.nn.functional.scaled_dot_product_attention (and autograd's derivative of _attention)
** call. The core does the work (ops_attention.c); this file reads the options table:
** scale, dropout_p, is_causal, enable_gqa, and the dropout counters seed and offset, which
** _attention writes back into it so that the backward draws the same mask.
*/
#include "lqlua.h"

#include <math.h>
#include <string.h>

/* A tensor or nil at arg. */
static const qt_tensor *a_opt_tensor(lua_State *L, int arg, const char *what) {
  if (lua_isnoneornil(L, arg)) return NULL;
  const qt_tensor *t = qlua_totensor(L, arg);
  if (t == NULL)
    luaL_error(L, "scaled_dot_product_attention: the %s must be a tensor or nil, got a %s", what,
               luaL_typename(L, arg));
  return t;
}

static void a_args(lua_State *L, int opts, qt_attn_args *a) {
  memset(a, 0, sizeof *a);
  a->scale = NAN;
  if (lua_isnoneornil(L, opts)) return;
  luaL_checktype(L, opts, LUA_TTABLE);
  lua_getfield(L, opts, "scale");
  if (!lua_isnil(L, -1)) {
    if (!lua_isnumber(L, -1))
      luaL_error(L, "scaled_dot_product_attention: scale must be a number, got a %s",
                 luaL_typename(L, -1));
    a->scale = lua_tonumber(L, -1);
  }
  lua_getfield(L, opts, "dropout_p");
  if (!lua_isnil(L, -1) && !lua_isnumber(L, -1))
    luaL_error(L, "scaled_dot_product_attention: dropout_p must be a number, got a %s",
               luaL_typename(L, -1));
  a->dropout_p = lua_isnil(L, -1) ? 0 : lua_tonumber(L, -1);
  lua_getfield(L, opts, "is_causal");
  a->causal = lua_toboolean(L, -1);
  lua_getfield(L, opts, "enable_gqa");
  a->enable_gqa = lua_toboolean(L, -1);
  lua_getfield(L, opts, "seed");
  a->seed = (uint64_t)lua_tointeger(L, -1);
  lua_getfield(L, opts, "offset");
  a->offset = (uint64_t)lua_tointeger(L, -1);
  lua_pop(L, 6);
}

/* _attention(q, k, v, mask, opts) -> o, lse; opts gets seed and offset when it drops out. */
static int q_attention(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  const qt_tensor *q = qlua_checktensor(L, 1), *k = qlua_checktensor(L, 2);
  const qt_tensor *v = qlua_checktensor(L, 3), *mask = a_opt_tensor(L, 4, "attn_mask");
  qt_attn_args a;
  a_args(L, 5, &a);
  qt_tensor *o = lq_newtensor(L), *lse = lq_newtensor(L);
  if (qt_attention(ctx, &a, q, k, v, mask, o, lse) != 0) return lq_raise(L, ctx);
  if (a.dropout_p > 0 && lua_istable(L, 5)) {
    lua_pushinteger(L, (lua_Integer)a.seed);
    lua_setfield(L, 5, "seed");
    lua_pushinteger(L, (lua_Integer)a.offset);
    lua_setfield(L, 5, "offset");
  }
  return 2;
}

/* _attention_backward(dout, q, k, v, mask, o, lse, opts, want_dq, want_dk, want_dv)
** -> dq, dk, dv (nil where not wanted). */
static int q_attention_backward(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  const qt_tensor *dout = qlua_checktensor(L, 1), *q = qlua_checktensor(L, 2);
  const qt_tensor *k = qlua_checktensor(L, 3), *v = qlua_checktensor(L, 4);
  const qt_tensor *mask = a_opt_tensor(L, 5, "attn_mask");
  const qt_tensor *o = qlua_checktensor(L, 6), *lse = qlua_checktensor(L, 7);
  qt_attn_args a;
  a_args(L, 8, &a);
  qt_tensor *out[3];
  for (int i = 0; i < 3; i++) {
    if (lua_toboolean(L, 9 + i)) out[i] = lq_newtensor(L);
    else {
      out[i] = NULL;
      lua_pushnil(L);
    }
  }
  if (qt_attention_backward(ctx, &a, dout, q, k, v, mask, o, lse, out[0], out[1], out[2]) != 0)
    return lq_raise(L, ctx);
  return 3;
}

/* _attention_path(q, k, v, mask, opts) -> the forward's kernels, the backward's. */
static int q_attention_path(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  const qt_tensor *q = qlua_checktensor(L, 1), *k = qlua_checktensor(L, 2);
  const qt_tensor *v = qlua_checktensor(L, 3), *mask = a_opt_tensor(L, 4, "attn_mask");
  qt_attn_args a;
  a_args(L, 5, &a);
  char fwd[QT_ATTN_PATH_LEN], bwd[QT_ATTN_PATH_LEN];
  if (qt_attention_path(ctx, &a, false, q, k, v, mask, fwd) != 0 ||
      qt_attention_path(ctx, &a, true, q, k, v, mask, bwd) != 0)
    return lq_raise(L, ctx);
  lua_pushstring(L, fwd);
  lua_pushstring(L, bwd);
  return 2;
}

const lq_Reg lq_attention_functions[] = {
  {"_attention", q_attention, 5, "(q, k, v, mask, opts)",
   "qlua.nn's scaled dot-product attention (opts scale, dropout_p, is_causal, enable_gqa): o, "
   "lse (the rows' logsumexp); with dropout, opts gets the seed and offset it drew with"},
  {"_attention_backward", q_attention_backward, 11,
   "(dout, q, k, v, mask, o, lse, opts, want_dq, want_dk, want_dv)",
   "_attention's backward: the wanted ones of dq, dk, dv"},
  {"_attention_path", q_attention_path, 5, "(q, k, v, mask, opts)",
   "the kernels _attention and its backward would run for these operands: two strings"},
  {NULL, NULL, 0, NULL, NULL}
};
