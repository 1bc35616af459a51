/*
** l_arith.c — the qlua.Tensor methods of elementwise arithmetic: the binary ops with a
** tensor or a number on either side (add ... logical_xor, and their in-place forms), the
** unary ops, clamp, fill_ and zero_, and the operator metamethods (+ - * / ^ and unary -).
** l_tensor.c registers lq_arith_methods and lq_arith_metamethods with the others.
*/
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "lqlua.h"

/* ================================================================ arithmetic */

/* The number (or boolean: true is 1, as in NumPy) at idx as the other operand of a
** binary op; raises for anything else. */
static qt_scalar t_checkoperand(lua_State *L, int idx, bool *is_float) {
  if (lua_type(L, idx) == LUA_TBOOLEAN) {
    *is_float = false;
    return qt_scalar_i(lua_toboolean(L, idx));
  }
  if (lua_type(L, idx) != LUA_TNUMBER) luaL_typeerror(L, idx, "qlua.Tensor or number");
  return lq_toscalar(L, idx, is_float);
}

/* a op b with either side a number (operators: 2 - t calls __sub(2, t)); pushes the
** result. */
static int t_arith(lua_State *L, qt_binop op) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *a = qlua_totensor(L, 1), *b = qlua_totensor(L, 2);
  qt_tensor *out;
  bool is_float;
  if (a != NULL && b != NULL) {
    out = lq_newtensor(L);
    if (qt_binary(ctx, out, op, a, b) != 0) return lq_raise(L, ctx);
  } else if (a != NULL) {
    qt_scalar s = t_checkoperand(L, 2, &is_float);
    out = lq_newtensor(L);
    if (qt_binary_scalar(ctx, out, op, a, s, is_float, false) != 0) return lq_raise(L, ctx);
  } else {
    if (b == NULL) luaL_typeerror(L, 2, "qlua.Tensor");
    qt_scalar s = t_checkoperand(L, 1, &is_float);
    out = lq_newtensor(L);
    if (qt_binary_scalar(ctx, out, op, b, s, is_float, true) != 0) return lq_raise(L, ctx);
  }
  return 1;
}

/* The in-place form: self op= x, returns self. */
static int t_arith_(lua_State *L, qt_binop op, const char *name) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *a = lq_checklive(L, 1, name);
  int rc;
  if (lua_type(L, 2) == LUA_TNUMBER || lua_type(L, 2) == LUA_TBOOLEAN) {
    bool is_float;
    qt_scalar s = t_checkoperand(L, 2, &is_float);
    rc = qt_binary_scalar_(ctx, op, a, s, is_float);
  } else {
    qt_tensor *b = qlua_totensor(L, 2);
    if (b == NULL) luaL_typeerror(L, 2, "qlua.Tensor or number");
    rc = qt_binary_(ctx, op, a, b);
  }
  if (rc != 0) return lq_raise(L, ctx);
  lua_settop(L, 1);
  return 1;
}

#define T_BINARY(name, OP)                                                 \
  static int t_##name(lua_State *L) {                                      \
    lq_checklive(L, 1, #name);                                             \
    return t_arith(L, OP);                                                 \
  }                                                                        \
  static int t_##name##_(lua_State *L) { return t_arith_(L, OP, #name "_"); }

T_BINARY(add, QT_ADD)
T_BINARY(sub, QT_SUB)
T_BINARY(mul, QT_MUL)
T_BINARY(div, QT_DIV)
T_BINARY(pow, QT_POW)
T_BINARY(maximum, QT_MAXIMUM)
T_BINARY(minimum, QT_MINIMUM)
T_BINARY(eq, QT_EQ)
T_BINARY(ne, QT_NE)
T_BINARY(lt, QT_LT)
T_BINARY(le, QT_LE)
T_BINARY(gt, QT_GT)
T_BINARY(ge, QT_GE)
T_BINARY(logical_and, QT_LOGICAL_AND)
T_BINARY(logical_or, QT_LOGICAL_OR)
T_BINARY(logical_xor, QT_LOGICAL_XOR)

/* logical_not is t == 0 (NaN is nonzero, so true, and its not false, as in NumPy). */
static int t_logical_not(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *a = lq_checklive(L, 1, "logical_not");
  qt_tensor *out = lq_newtensor(L);
  if (qt_binary_scalar(ctx, out, QT_EQ, a, qt_scalar_i(0), false, false) != 0)
    return lq_raise_as(L, ctx, "eq", "logical_not");
  return 1;
}

static int t_logical_not_(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *a = lq_checklive(L, 1, "logical_not_");
  if (qt_binary_scalar_(ctx, QT_EQ, a, qt_scalar_i(0), false) != 0)
    return lq_raise_as(L, ctx, "eq_", "logical_not_");
  lua_settop(L, 1);
  return 1;
}

/* The operators: either operand may be the number. */
static int t_meta_add(lua_State *L) { return t_arith(L, QT_ADD); }
static int t_meta_sub(lua_State *L) { return t_arith(L, QT_SUB); }
static int t_meta_mul(lua_State *L) { return t_arith(L, QT_MUL); }
static int t_meta_div(lua_State *L) { return t_arith(L, QT_DIV); }
static int t_meta_pow(lua_State *L) { return t_arith(L, QT_POW); }

static int t_unary(lua_State *L, qt_unop op, const char *name, qt_scalar lo, qt_scalar hi) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *a = lq_checklive(L, 1, name);
  qt_tensor *out = lq_newtensor(L);
  if (qt_unary(ctx, out, op, a, lo, hi) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_unary_(lua_State *L, qt_unop op, const char *name, qt_scalar lo, qt_scalar hi) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *a = lq_checklive(L, 1, name);
  if (qt_unary_(ctx, op, a, lo, hi) != 0) return lq_raise(L, ctx);
  lua_settop(L, 1);
  return 1;
}

#define T_UNARY(name, OP)                                                             \
  static int t_##name(lua_State *L) {                                                 \
    return t_unary(L, OP, #name, qt_scalar_i(0), qt_scalar_i(0));                     \
  }                                                                                   \
  static int t_##name##_(lua_State *L) {                                              \
    return t_unary_(L, OP, #name "_", qt_scalar_i(0), qt_scalar_i(0));                \
  }

T_UNARY(neg, QT_NEG)
T_UNARY(abs, QT_ABS)
T_UNARY(exp, QT_EXP)
T_UNARY(log, QT_LOG)
T_UNARY(sqrt, QT_SQRT)
T_UNARY(tanh, QT_TANH)
T_UNARY(sigmoid, QT_SIGMOID)
T_UNARY(relu, QT_RELU)

static int t_meta_unm(lua_State *L) {
  return t_unary(L, QT_NEG, "neg", qt_scalar_i(0), qt_scalar_i(0));
}

/* A clamp bound: nil is no bound (+-inf, and the int64 extremes for integer tensors).
** *is_float is set when the bound is a Lua float: an integer tensor then clamps in float64
** (NumPy's rule for a float scalar), so .i is only used for integer bounds. */
static qt_scalar t_clampbound(lua_State *L, int arg, const char *op, bool upper, bool *is_float) {
  qt_scalar s;
  if (lua_isnoneornil(L, arg)) {
    s.f = upper ? HUGE_VAL : -HUGE_VAL;
    s.i = upper ? INT64_MAX : INT64_MIN;
    return s;
  }
  if (lua_type(L, arg) != LUA_TNUMBER) luaL_typeerror(L, arg, "number or nil");
  if (lua_isinteger(L, arg)) return qt_scalar_i((int64_t)lua_tointeger(L, arg));
  double d = lua_tonumber(L, arg);
  if (d != d) luaL_error(L, "%s: bound is NaN", op);
  *is_float = true;
  s.f = d;
  s.i = 0;
  return s;
}

static int t_clamp(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *a = lq_checklive(L, 1, "clamp");
  bool is_float = false;
  qt_scalar lo = t_clampbound(L, 2, "clamp", false, &is_float);
  qt_scalar hi = t_clampbound(L, 3, "clamp", true, &is_float);
  qt_tensor *out = lq_newtensor(L);
  if (qt_clamp(ctx, out, a, lo, hi, is_float) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_clamp_(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *a = lq_checklive(L, 1, "clamp_");
  bool is_float = false;
  qt_scalar lo = t_clampbound(L, 2, "clamp_", false, &is_float);
  qt_scalar hi = t_clampbound(L, 3, "clamp_", true, &is_float);
  if (qt_clamp_(ctx, a, lo, hi, is_float) != 0) return lq_raise(L, ctx);
  lua_settop(L, 1);
  return 1;
}

static int t_fill_(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "fill_");
  if (qt_fill_(ctx, t, lq_checkstorable(L, 2, "fill_", t->dtype)) != 0) return lq_raise(L, ctx);
  lua_settop(L, 1);
  return 1;
}

static int t_zero_(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "zero_");
  if (qt_fill_(ctx, t, qt_scalar_i(0)) != 0) return lq_raise_as(L, ctx, "fill_", "zero_");
  lua_settop(L, 1);
  return 1;
}

/* ================================================================ registration */

const lq_Reg lq_arith_methods[] = {
  {"add", t_add, 2}, {"sub", t_sub, 2}, {"mul", t_mul, 2}, {"div", t_div, 2},
  {"pow", t_pow, 2}, {"maximum", t_maximum, 2}, {"minimum", t_minimum, 2},
  {"eq", t_eq, 2}, {"ne", t_ne, 2}, {"lt", t_lt, 2}, {"le", t_le, 2}, {"gt", t_gt, 2},
  {"ge", t_ge, 2},
  {"add_", t_add_, 2}, {"sub_", t_sub_, 2}, {"mul_", t_mul_, 2}, {"div_", t_div_, 2},
  {"pow_", t_pow_, 2}, {"maximum_", t_maximum_, 2}, {"minimum_", t_minimum_, 2},
  {"eq_", t_eq_, 2}, {"ne_", t_ne_, 2}, {"lt_", t_lt_, 2}, {"le_", t_le_, 2},
  {"gt_", t_gt_, 2}, {"ge_", t_ge_, 2},
  {"logical_and", t_logical_and, 2}, {"logical_or", t_logical_or, 2},
  {"logical_xor", t_logical_xor, 2}, {"logical_not", t_logical_not, 1},
  {"logical_and_", t_logical_and_, 2}, {"logical_or_", t_logical_or_, 2},
  {"logical_xor_", t_logical_xor_, 2}, {"logical_not_", t_logical_not_, 1},
  {"neg", t_neg, 1}, {"abs", t_abs, 1}, {"exp", t_exp, 1}, {"log", t_log, 1},
  {"sqrt", t_sqrt, 1}, {"tanh", t_tanh, 1}, {"sigmoid", t_sigmoid, 1}, {"relu", t_relu, 1},
  {"clamp", t_clamp, 3},
  {"neg_", t_neg_, 1}, {"abs_", t_abs_, 1}, {"exp_", t_exp_, 1}, {"log_", t_log_, 1},
  {"sqrt_", t_sqrt_, 1}, {"tanh_", t_tanh_, 1}, {"sigmoid_", t_sigmoid_, 1},
  {"relu_", t_relu_, 1}, {"clamp_", t_clamp_, 3},
  {"fill_", t_fill_, 2}, {"zero_", t_zero_, 1},
  {NULL, NULL, 0}
};

const lq_Reg lq_arith_metamethods[] = {
  {"__add", t_meta_add, LQ_VARARGS}, {"__sub", t_meta_sub, LQ_VARARGS},
  {"__mul", t_meta_mul, LQ_VARARGS}, {"__div", t_meta_div, LQ_VARARGS},
  {"__pow", t_meta_pow, LQ_VARARGS}, {"__unm", t_meta_unm, LQ_VARARGS},
  {NULL, NULL, 0}
};
