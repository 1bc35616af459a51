/*
** l_pool2d.c — 2-D pooling from Lua: qlua._pool2d, which qlua.nn.functional's max_pool2d
** and avg_pool2d call (and their autograd derivatives). The core does the work
** (ops_pool2d.c); this file reads the mode and the options (kernel_size, stride, padding,
** dilation as lq_opt_pair reads them; ceil_mode, count_include_pad, divisor_override). l_qlua.c
** registers lq_pool2d_functions with the module's functions.
*/
#include "lqlua.h"

#include <string.h>

static void p_opts(lua_State *L, int arg, const char *op, qt_pool_opts *o) {
  memset(o, 0, sizeof *o);
  luaL_checktype(L, arg, LUA_TTABLE);
  lq_opt_pair(L, arg, op, "kernel_size", 0, o->kernel);
  lq_opt_pair(L, arg, op, "stride", 0, o->stride);
  if (o->stride[0] == 0 && o->stride[1] == 0) memcpy(o->stride, o->kernel, sizeof o->stride);
  lq_opt_pair(L, arg, op, "padding", 0, o->pad);
  lq_opt_pair(L, arg, op, "dilation", 1, o->dilation);
  lua_getfield(L, arg, "ceil_mode");
  o->ceil_mode = lua_toboolean(L, -1);
  lua_getfield(L, arg, "count_include_pad");
  o->count_include_pad = lua_isnil(L, -1) || lua_toboolean(L, -1);
  lua_getfield(L, arg, "divisor_override");
  if (!lua_isnil(L, -1)) {
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1)
      luaL_error(L, "%s: divisor_override must be an integer >= 1, got %s", op,
                 luaL_tolstring(L, -1, NULL));
    o->divisor_override = (int64_t)lua_tointeger(L, -1);
  }
  lua_pop(L, 3);
}

/* _pool2d("max", x, opts [, want_indices]) -> y [, indices];
** _pool2d("avg", x, opts) -> y; _pool2d("avg_backward", dy, x, opts) -> dx. */
static int q_pool2d(lua_State *L) {
  static const char *const modes[] = {"max", "avg", "avg_backward", NULL};
  qt_ctx *ctx = lq_ctx(L);
  int mode = luaL_checkoption(L, 1, NULL, modes);
  qt_pool_opts o;
  if (mode == 0) {
    const qt_tensor *x = qlua_checktensor(L, 2);
    p_opts(L, 3, "max_pool2d", &o);
    bool idx = lua_toboolean(L, 4);
    qt_tensor *y = lq_newtensor(L), *i = idx ? lq_newtensor(L) : NULL;
    if (qt_max_pool2d(ctx, y, i, x, &o) != 0) return lq_raise(L, ctx);
    return idx ? 2 : 1;
  }
  if (mode == 1) {
    const qt_tensor *x = qlua_checktensor(L, 2);
    p_opts(L, 3, "avg_pool2d", &o);
    qt_tensor *y = lq_newtensor(L);
    if (qt_avg_pool2d(ctx, y, x, &o) != 0) return lq_raise(L, ctx);
    return 1;
  }
  const qt_tensor *dy = qlua_checktensor(L, 2), *x = qlua_checktensor(L, 3);
  p_opts(L, 4, "avg_pool2d_backward", &o);
  qt_tensor *dx = lq_newtensor(L);
  if (qt_avg_pool2d_backward(ctx, dx, dy, x, &o) != 0) return lq_raise(L, ctx);
  return 1;
}

const lq_Reg lq_pool2d_functions[] = {
  {"_pool2d", q_pool2d, 4, "(mode, ...)",
   "qlua.nn's pooling: (\"max\", x, opts [, want_indices]), (\"avg\", x, opts), "
   "(\"avg_backward\", dy, x, opts); opts kernel_size, stride, padding, dilation, ceil_mode, "
   "count_include_pad, divisor_override"},
  {NULL, NULL, 0, NULL, NULL}
};
