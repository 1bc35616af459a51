/*
** l_optim.c — the fused optimizer update from Lua: qlua._optim_step, which qlua.optim's
** SGD, Adam and AdamW call once per group and dtype instead of a dozen ops per parameter.
** The core checks the tensors (ops_optim.c); this file reads the group's options (the
** same table the optimizer keeps, with PyTorch's names) and the lists. l_qlua.c
** registers lq_optim_functions with the module's functions.
*/
#include "lqlua.h"

#include <math.h>
#include <string.h>

/* group[key] as a number (def when nil). */
static double o_number(lua_State *L, int group, const char *key, double def) {
  int ty = lua_getfield(L, group, key);
  double v = def;
  if (ty == LUA_TNUMBER) v = lua_tonumber(L, -1);
  else if (ty != LUA_TNIL)
    luaL_error(L, "_optim_step: option %s must be a number, got a %s", key, lua_typename(L, ty));
  lua_pop(L, 1);
  return v;
}

static bool o_flag(lua_State *L, int group, const char *key) {
  int ty = lua_getfield(L, group, key);
  if (ty != LUA_TNIL && ty != LUA_TBOOLEAN)
    luaL_error(L, "_optim_step: option %s must be a boolean, got a %s", key, lua_typename(L, ty));
  bool v = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

/* list (at idx)[1..n] into ts[j], ts[nv + j], ...: each a tensor. */
static void o_list(lua_State *L, int idx, lua_Integer n, int j, int nv, const qt_tensor **ts,
                   const char *what) {
  if (lua_type(L, idx) != LUA_TTABLE)
    luaL_error(L, "_optim_step: the %s must be a list of tensors, got a %s", what,
               luaL_typename(L, idx));
  if ((lua_Integer)lua_rawlen(L, idx) != n)
    luaL_error(L, "_optim_step: %I parameters but %I %s", n, (lua_Integer)lua_rawlen(L, idx),
               what);
  for (lua_Integer k = 1; k <= n; k++) {
    lua_rawgeti(L, idx, k);
    const qt_tensor *t = qlua_totensor(L, -1);
    if (t == NULL)
      luaL_error(L, "_optim_step: %s %I is a %s, not a tensor", what, k, luaL_typename(L, -1));
    lua_pop(L, 1);   /* the list holds it */
    ts[(k - 1) * nv + j] = t;
  }
}

/* qlua._optim_step(kind, group, params, grads, states, step): kind "sgd", "adam" or
** "adamw"; group the options (lr, weight_decay, maximize; momentum, dampening, nesterov;
** betas, eps, amsgrad); states the lists of state tensors in qt_optim_opts's order ({} for
** SGD without momentum); step: Adam's step count after this update (>= 1), or a one-element
** float64 tensor on the parameters' device holding it (capturable state: read when the
** update runs, so a captured step replays with the count of its replay); for SGD 1 when
** the momentum buffers are new (they are then set, not decayed). */
static int q_optim_step(lua_State *L) {
  static const char *const kinds[] = {"sgd", "adam", "adamw", NULL};
  qt_ctx *ctx = lq_ctx(L);
  int kind = luaL_checkoption(L, 1, NULL, kinds);
  luaL_checktype(L, 2, LUA_TTABLE);
  luaL_checktype(L, 3, LUA_TTABLE);
  luaL_checktype(L, 5, LUA_TTABLE);
  /* Adam's step: a number, or a one-element float64 tensor read when the update runs */
  const qt_tensor *step_t = kind != 0 ? qlua_totensor(L, 6) : NULL;
  lua_Integer step_no = step_t != NULL ? 1 : luaL_checkinteger(L, 6);
  qt_optim_opts s;
  memset(&s, 0, sizeof s);
  s.lr = o_number(L, 2, "lr", NAN);
  if (isnan(s.lr)) return luaL_error(L, "_optim_step: the group has no lr");
  s.weight_decay = o_number(L, 2, "weight_decay", 0);
  s.maximize = o_flag(L, 2, "maximize");
  if (kind == 0) {
    s.kind = QT_OPTIM_SGD;
    s.momentum = o_number(L, 2, "momentum", 0);
    s.dampening = o_number(L, 2, "dampening", 0);
    s.nesterov = o_flag(L, 2, "nesterov");
    s.first = step_no == 1;
    s.nviews = s.momentum != 0 ? 3 : 2;
  } else {
    s.kind = QT_OPTIM_ADAM;
    s.decoupled = kind == 2;
    s.amsgrad = o_flag(L, 2, "amsgrad");
    s.eps = o_number(L, 2, "eps", 1e-8);
    s.beta1 = 0.9;
    s.beta2 = 0.999;
    if (lua_getfield(L, 2, "betas") == LUA_TTABLE) {
      lua_rawgeti(L, -1, 1);
      lua_rawgeti(L, -2, 2);
      if (!lua_isnumber(L, -2) || !lua_isnumber(L, -1))
        return luaL_error(L, "_optim_step: betas must be {b1, b2}");
      s.beta1 = lua_tonumber(L, -2);
      s.beta2 = lua_tonumber(L, -1);
      lua_pop(L, 2);
    }
    lua_pop(L, 1);
    if (step_no < 1) return luaL_error(L, "_optim_step: Adam's step %I (from 1)", step_no);
    s.bias_correction1 = 1 - pow(s.beta1, (double)step_no);
    s.bias_correction2 = 1 - pow(s.beta2, (double)step_no);
    s.nviews = s.amsgrad ? 5 : 4;
  }
  lua_Integer n = (lua_Integer)lua_rawlen(L, 3);
  if ((lua_Integer)lua_rawlen(L, 5) != s.nviews - 2)
    return luaL_error(L, "_optim_step: %d lists of state tensors given, %d expected",
                      (int)lua_rawlen(L, 5), s.nviews - 2);
  if (n > (lua_Integer)1 << 24) return luaL_error(L, "_optim_step: %I parameters", n);
  const qt_tensor **ts = (const qt_tensor **)lua_newuserdatauv(
      L, (size_t)(n > 0 ? n : 1) * (size_t)s.nviews * sizeof *ts, 0);
  o_list(L, 3, n, 0, s.nviews, ts, "parameters");
  o_list(L, 4, n, 1, s.nviews, ts, "gradients");
  for (int j = 2; j < s.nviews; j++) {
    lua_rawgeti(L, 5, j - 1);
    o_list(L, lua_gettop(L), n, j, s.nviews, ts, "state tensors");
    lua_pop(L, 1);
  }
  if (qt_optim_step(ctx, &s, step_t, (int64_t)n, ts) != 0) return lq_raise(L, ctx);
  return 0;
}

const lq_Reg lq_optim_functions[] = {
  {"_optim_step", q_optim_step, 6, "(kind, group, params, grads, states, step)",
   "qlua.optim's fused update (kind \"sgd\", \"adam\" or \"adamw\") of every tensor of a "
   "group in one device call; the parameters and states change in place"},
  {NULL, NULL, 0, NULL, NULL}
};
