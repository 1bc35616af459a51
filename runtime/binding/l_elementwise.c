/*
** l_elementwise.c — the qlua.Tensor methods of elementwise arithmetic: the binary ops with a
** tensor or a number on either side (add ... floor_divide, and their in-place forms), the
** unary ops (neg ... isfinite), clamp, nan_to_num, lerp, addcmul_/addcdiv_, fill_ and zero_,
** and the operator metamethods (+ - * / % // ^ and unary -).
** l_tensor.c registers lq_elementwise_methods and lq_elementwise_metamethods with the others.
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
T_BINARY(atan2, QT_ATAN2)
T_BINARY(hypot, QT_HYPOT)
T_BINARY(fmod, QT_FMOD)
T_BINARY(remainder, QT_REMAINDER)
T_BINARY(floor_divide, QT_FLOOR_DIVIDE)

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
static int t_meta_mod(lua_State *L) { return t_arith(L, QT_REMAINDER); }   /* Lua's % */
static int t_meta_idiv(lua_State *L) { return t_arith(L, QT_FLOOR_DIVIDE); }  /* Lua's // */

static int t_unary(lua_State *L, qt_unop op, const char *name, const qt_unop_params *params) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *a = lq_checklive(L, 1, name);
  qt_tensor *out = lq_newtensor(L);
  if (qt_unary(ctx, out, op, a, params) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_unary_(lua_State *L, qt_unop op, const char *name, const qt_unop_params *params) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *a = lq_checklive(L, 1, name);
  if (qt_unary_(ctx, op, a, params) != 0) return lq_raise(L, ctx);
  lua_settop(L, 1);
  return 1;
}

#define T_UNARY_OUT(name, OP) \
  static int t_##name(lua_State *L) { return t_unary(L, OP, #name, NULL); }
#define T_UNARY(name, OP)                                                             \
  T_UNARY_OUT(name, OP)                                                               \
  static int t_##name##_(lua_State *L) { return t_unary_(L, OP, #name "_", NULL); }

T_UNARY(neg, QT_NEG)
T_UNARY(abs, QT_ABS)
T_UNARY(exp, QT_EXP)
T_UNARY(log, QT_LOG)
T_UNARY(sqrt, QT_SQRT)
T_UNARY(tanh, QT_TANH)
T_UNARY(sigmoid, QT_SIGMOID)
T_UNARY(relu, QT_RELU)
T_UNARY(sin, QT_SIN)
T_UNARY(cos, QT_COS)
T_UNARY(tan, QT_TAN)
T_UNARY(asin, QT_ASIN)
T_UNARY(acos, QT_ACOS)
T_UNARY(atan, QT_ATAN)
T_UNARY(sinh, QT_SINH)
T_UNARY(cosh, QT_COSH)
T_UNARY(asinh, QT_ASINH)
T_UNARY(acosh, QT_ACOSH)
T_UNARY(atanh, QT_ATANH)
T_UNARY(floor, QT_FLOOR)
T_UNARY(ceil, QT_CEIL)
T_UNARY(round, QT_ROUND)
T_UNARY(trunc, QT_TRUNC)
T_UNARY(frac, QT_FRAC)
T_UNARY(sign, QT_SIGN)
T_UNARY(log1p, QT_LOG1P)
T_UNARY(expm1, QT_EXPM1)
T_UNARY(log2, QT_LOG2)
T_UNARY(log10, QT_LOG10)
T_UNARY(exp2, QT_EXP2)
T_UNARY(rsqrt, QT_RSQRT)
T_UNARY(reciprocal, QT_RECIPROCAL)
T_UNARY(square, QT_SQUARE)
T_UNARY(erf, QT_ERF)
T_UNARY(erfc, QT_ERFC)
T_UNARY(erfinv, QT_ERFINV)
T_UNARY(lgamma, QT_LGAMMA)
T_UNARY(softplus, QT_SOFTPLUS)
T_UNARY(gelu, QT_GELU)
T_UNARY(silu, QT_SILU)
T_UNARY_OUT(isnan, QT_ISNAN)
T_UNARY_OUT(isinf, QT_ISINF)
T_UNARY_OUT(isfinite, QT_ISFINITE)

/* nan_to_num([nan = 0] [, posinf] [, neginf]): NumPy's defaults, the dtype's largest and
** lowest finite values (float32's for a float32 tensor). Integer tensors are returned as
** a copy (they hold no NaN or inf). */
static qt_unop_params t_nan_to_num_params(lua_State *L, const qt_tensor *t, const char *op) {
  qt_unop_params p;
  memset(&p, 0, sizeof p);
  /* the dtype's largest finite value (integer tensors compute in float64) */
  double big = qt_dtype_max_finite(qt_is_float(t->dtype) ? t->dtype : QT_F64);
  double dflt[3] = { 0.0, big, -big };
  for (int k = 0; k < 3; k++) {
    double v = dflt[k];
    if (!lua_isnoneornil(L, 2 + k)) {
      if (lua_type(L, 2 + k) != LUA_TNUMBER)
        luaL_error(L, "%s: argument %d must be a number or nil, got %s", op, 2 + k - 1,
                   luaL_typename(L, 2 + k));
      v = lua_tonumber(L, 2 + k);
    }
    p.v[k] = qt_scalar_from_double(v);
  }
  return p;
}

static int t_nan_to_num(lua_State *L) {
  qt_tensor *t = lq_checklive(L, 1, "nan_to_num");
  qt_unop_params p = t_nan_to_num_params(L, t, "nan_to_num");
  return t_unary(L, QT_NAN_TO_NUM, "nan_to_num", &p);
}

static int t_nan_to_num_(lua_State *L) {
  qt_tensor *t = lq_checklive(L, 1, "nan_to_num_");
  qt_unop_params p = t_nan_to_num_params(L, t, "nan_to_num_");
  return t_unary_(L, QT_NAN_TO_NUM, "nan_to_num_", &p);
}

/* a:lerp(b, w) and a:lerp_(b, w): w a number or a tensor. */
static int t_lerp_common(lua_State *L, bool inplace) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *a = lq_checklive(L, 1, inplace ? "lerp_" : "lerp");
  qt_tensor *b = qlua_totensor(L, 2);
  if (b == NULL) luaL_typeerror(L, 2, "qlua.Tensor");
  qt_tensor *w = qlua_totensor(L, 3);
  double wv = 0;
  if (w == NULL) {
    if (lua_type(L, 3) != LUA_TNUMBER) luaL_typeerror(L, 3, "qlua.Tensor or number");
    wv = lua_tonumber(L, 3);
  }
  if (inplace) {
    if (qt_lerp_(ctx, a, b, w, wv) != 0) return lq_raise(L, ctx);
    lua_settop(L, 1);
    return 1;
  }
  qt_tensor *out = lq_newtensor(L);
  if (qt_lerp(ctx, out, a, b, w, wv) != 0) return lq_raise(L, ctx);
  return 1;
}
static int t_lerp(lua_State *L) { return t_lerp_common(L, false); }
static int t_lerp_(lua_State *L) { return t_lerp_common(L, true); }

/* t:addcmul_(a, b [, value = 1]) and t:addcdiv_(a, b [, value = 1]). */
static int t_addc_(lua_State *L, qt_binop op, const char *name) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, name);
  qt_tensor *a = qlua_totensor(L, 2), *b = qlua_totensor(L, 3);
  if (a == NULL) luaL_typeerror(L, 2, "qlua.Tensor");
  if (b == NULL) luaL_typeerror(L, 3, "qlua.Tensor");
  bool is_float = false;
  qt_scalar v = qt_scalar_i(1);
  if (!lua_isnoneornil(L, 4)) v = t_checkoperand(L, 4, &is_float);
  if (qt_addc_(ctx, t, op, a, b, v, is_float) != 0) return lq_raise(L, ctx);
  lua_settop(L, 1);
  return 1;
}
static int t_addcmul_(lua_State *L) { return t_addc_(L, QT_MUL, "addcmul_"); }
static int t_addcdiv_(lua_State *L) { return t_addc_(L, QT_DIV, "addcdiv_"); }

static int t_meta_unm(lua_State *L) { return t_unary(L, QT_NEG, "neg", NULL); }

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

const lq_Reg lq_elementwise_methods[] = {
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
  {"atan2", t_atan2, 2}, {"hypot", t_hypot, 2}, {"fmod", t_fmod, 2},
  {"remainder", t_remainder, 2}, {"floor_divide", t_floor_divide, 2},
  {"atan2_", t_atan2_, 2}, {"hypot_", t_hypot_, 2}, {"fmod_", t_fmod_, 2},
  {"remainder_", t_remainder_, 2}, {"floor_divide_", t_floor_divide_, 2},
#define T_UNARY_ENTRIES(name) {#name, t_##name, 1}, {#name "_", t_##name##_, 1},
  T_UNARY_ENTRIES(sin) T_UNARY_ENTRIES(cos) T_UNARY_ENTRIES(tan) T_UNARY_ENTRIES(asin)
  T_UNARY_ENTRIES(acos) T_UNARY_ENTRIES(atan) T_UNARY_ENTRIES(sinh) T_UNARY_ENTRIES(cosh)
  T_UNARY_ENTRIES(asinh) T_UNARY_ENTRIES(acosh) T_UNARY_ENTRIES(atanh)
  T_UNARY_ENTRIES(floor) T_UNARY_ENTRIES(ceil) T_UNARY_ENTRIES(round) T_UNARY_ENTRIES(trunc)
  T_UNARY_ENTRIES(frac) T_UNARY_ENTRIES(sign) T_UNARY_ENTRIES(log1p) T_UNARY_ENTRIES(expm1)
  T_UNARY_ENTRIES(log2) T_UNARY_ENTRIES(log10) T_UNARY_ENTRIES(exp2) T_UNARY_ENTRIES(rsqrt)
  T_UNARY_ENTRIES(reciprocal) T_UNARY_ENTRIES(square) T_UNARY_ENTRIES(erf)
  T_UNARY_ENTRIES(erfc) T_UNARY_ENTRIES(erfinv) T_UNARY_ENTRIES(lgamma)
  T_UNARY_ENTRIES(softplus) T_UNARY_ENTRIES(gelu) T_UNARY_ENTRIES(silu)
#undef T_UNARY_ENTRIES
  {"isnan", t_isnan, 1}, {"isinf", t_isinf, 1}, {"isfinite", t_isfinite, 1},
  {"nan_to_num", t_nan_to_num, 4}, {"nan_to_num_", t_nan_to_num_, 4},
  {"lerp", t_lerp, 3}, {"lerp_", t_lerp_, 3}, {"addcmul_", t_addcmul_, 4}, {"addcdiv_", t_addcdiv_, 4},
  {"fill_", t_fill_, 2}, {"zero_", t_zero_, 1},
  {NULL, NULL, 0}
};

const lq_Reg lq_elementwise_metamethods[] = {
  {"__add", t_meta_add, LQ_VARARGS}, {"__sub", t_meta_sub, LQ_VARARGS},
  {"__mul", t_meta_mul, LQ_VARARGS}, {"__div", t_meta_div, LQ_VARARGS},
  {"__pow", t_meta_pow, LQ_VARARGS}, {"__unm", t_meta_unm, LQ_VARARGS},
  {"__mod", t_meta_mod, LQ_VARARGS}, {"__idiv", t_meta_idiv, LQ_VARARGS},
  {NULL, NULL, 0}
};
