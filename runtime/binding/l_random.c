/*
** l_random.c — sampling: the in-place fills t:uniform_, t:normal_, t:random_ and
** t:exponential_, and qlua.bernoulli and qlua.multinomial. l_tensor.c registers
** lq_random_methods with the other methods, l_qlua.c lq_random_functions. All draws come
** from the seeded Philox stream (qlua.seed), so a seed gives the same numbers on every
** device.
*/
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "lqlua.h"

/* An optional number argument (default when nil), named in the message when it is not. */
static double r_optnumber(lua_State *L, int arg, const char *op, const char *what, double dflt) {
  if (lua_isnoneornil(L, arg)) return dflt;
  if (lua_type(L, arg) != LUA_TNUMBER)
    luaL_error(L, "%s: %s must be a number, got %s", op, what, luaL_typename(L, arg));
  return lua_tonumber(L, arg);
}

static int r_done(lua_State *L, qt_ctx *ctx, int rc) {
  if (rc != 0) return lq_raise(L, ctx);
  lua_settop(L, 1);
  return 1;
}

/* t:uniform_([lo = 0] [, hi = 1]) */
static int r_uniform_(lua_State *L) {
  qt_tensor *t = lq_checklive(L, 1, "uniform_");
  double lo = r_optnumber(L, 2, "uniform_", "lo", 0), hi = r_optnumber(L, 3, "uniform_", "hi", 1);
  qt_ctx *ctx = lq_ctx(L);
  return r_done(L, ctx, qt_uniform_(ctx, t, lo, hi));
}

/* t:normal_([mean = 0] [, sd = 1]) */
static int r_normal_(lua_State *L) {
  qt_tensor *t = lq_checklive(L, 1, "normal_");
  double mean = r_optnumber(L, 2, "normal_", "mean", 0);
  double sd = r_optnumber(L, 3, "normal_", "sd", 1);
  qt_ctx *ctx = lq_ctx(L);
  return r_done(L, ctx, qt_normal_(ctx, t, mean, sd));
}

/* t:random_(lo, hi) or t:random_(hi) (1..hi): inclusive, as qlua.randint and math.random. */
static int r_random_(lua_State *L) {
  qt_tensor *t = lq_checklive(L, 1, "random_");
  lua_Integer lo = 1, hi;
  if (lua_isnoneornil(L, 3)) {
    hi = luaL_checkinteger(L, 2);
  } else {
    lo = luaL_checkinteger(L, 2);
    hi = luaL_checkinteger(L, 3);
  }
  qt_ctx *ctx = lq_ctx(L);
  return r_done(L, ctx, qt_random_int_(ctx, t, (int64_t)lo, (int64_t)hi));
}

/* t:exponential_([lambda = 1]) */
static int r_exponential_(lua_State *L) {
  qt_tensor *t = lq_checklive(L, 1, "exponential_");
  double lambda = r_optnumber(L, 2, "exponential_", "lambda", 1);
  qt_ctx *ctx = lq_ctx(L);
  return r_done(L, ctx, qt_exponential_(ctx, t, lambda));
}

/* qlua.bernoulli(p): 1 with probability p, else 0, elementwise. */
static int r_bernoulli(lua_State *L) {
  qt_tensor *p = qlua_checktensor(L, 1);
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *out = lq_newtensor(L);
  if (qt_bernoulli(ctx, out, p) != 0) return lq_raise(L, ctx);
  return 1;
}

/* qlua.multinomial(probs, n [, replacement = false]): n category draws (1-based) per row. */
static int r_multinomial(lua_State *L) {
  qt_tensor *p = qlua_checktensor(L, 1);
  lua_Integer n = luaL_checkinteger(L, 2);
  bool replacement = false;
  if (!lua_isnoneornil(L, 3)) {
    if (lua_type(L, 3) != LUA_TBOOLEAN)
      return luaL_error(L, "multinomial: replacement must be a boolean, got %s",
                        luaL_typename(L, 3));
    replacement = lua_toboolean(L, 3);
  }
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *out = lq_newtensor(L);
  if (qt_multinomial(ctx, out, p, (int64_t)n, replacement) != 0) return lq_raise(L, ctx);
  return 1;
}

const lq_Reg lq_random_methods[] = {
  {"uniform_", r_uniform_, 3, "([lo] [, hi])",
   "fills t with uniform numbers in [lo, hi) (0 and 1 by default)"},
  {"normal_", r_normal_, 3, "([mean] [, sd])",
   "fills t with normal numbers (mean 0, sd 1 by default)"},
  {"random_", r_random_, 3, "([lo,] hi)",
   "fills t with integers uniform in lo..hi, inclusive (lo 1 by default)"},
  {"exponential_", r_exponential_, 2, "([lambda])",
   "fills t with exponential numbers of rate lambda (1 by default)"},
  {NULL, NULL, 0, NULL, NULL}
};

const lq_Reg lq_random_functions[] = {
  {"bernoulli", r_bernoulli, 1, "(p)",
   "1 with probability p, else 0, elementwise (p's float dtype)"},
  {"multinomial", r_multinomial, 3, "(probs, n [, replacement])",
   "n 1-based category draws per row of weights probs (int64), without replacement unless "
   "replacement is true"},
  {NULL, NULL, 0, NULL, NULL}
};
