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

/* t:name(x) and t:name_(x) for every binary op, made from scalar.h's list: the functions
** are named by the op's enum (t_QT_ADD), since the list's names are strings. */
#define T_BINARY_FNS_(P, E, name, ...)                                     \
  static int t_##E(lua_State *L) {                                         \
    lq_checklive(L, 1, name);                                              \
    return t_arith(L, E);                                                  \
  }                                                                        \
  static int t_##E##_(lua_State *L) { return t_arith_(L, E, name "_"); }
QT_BINOP_LIST(T_BINARY_FNS_, ~)
#undef T_BINARY_FNS_

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

/* t:name() for every unary op the list binds (AUTO), and t:name_() for those of a SAME
** result, made from scalar.h's list (clamp and nan_to_num take parameters: below). */
#define T_UNARY_FNS_(P, E, name, ints, result, fexpr, iexpr, bind, ...) \
  T_UNARY_FNS_##bind##_##result(E, name)
#define T_UNARY_FNS_AUTO_SAME(E, name)                                          \
  static int t_##E(lua_State *L) { return t_unary(L, E, name, NULL); }          \
  static int t_##E##_(lua_State *L) { return t_unary_(L, E, name "_", NULL); }
#define T_UNARY_FNS_AUTO_BOOL(E, name) \
  static int t_##E(lua_State *L) { return t_unary(L, E, name, NULL); }
#define T_UNARY_FNS_OWN_SAME(E, name)
QT_UNOP_LIST(T_UNARY_FNS_, ~)
#undef T_UNARY_FNS_

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

/* The help lines of the made methods: the list's, with what integer operands become (the
** float-only ops compute them in float64), and the in-place form's. */
#define T_INT_NOTE_0 " (float64 for integer tensors)"
#define T_INT_NOTE_1 ""
#define T_INPLACE_NOTE_0 " in place (a float tensor)"
#define T_INPLACE_NOTE_1 " in place"
#define T_BINARY_ROWS_(P, E, name, ints, result, fexpr, iexpr, help, ...)     \
  {name, t_##E, 2, "(x)", help T_INT_NOTE_##ints},                             \
  {name "_", t_##E##_, 2, "(x)", "t:" name "(x)" T_INPLACE_NOTE_##ints},
#define T_UNARY_ROWS_(P, E, name, ints, result, fexpr, iexpr, bind, help, ...) \
  T_UNARY_ROWS_##bind##_##result(E, name, ints, help)
#define T_UNARY_ROWS_AUTO_SAME(E, name, ints, help)                            \
  {name, t_##E, 1, "()", help T_INT_NOTE_##ints},                              \
  {name "_", t_##E##_, 1, "()", name "(t)" T_INPLACE_NOTE_##ints},
#define T_UNARY_ROWS_AUTO_BOOL(E, name, ints, help) {name, t_##E, 1, "()", help},
#define T_UNARY_ROWS_OWN_SAME(E, name, ints, help)

const lq_Reg lq_elementwise_methods[] = {
  QT_BINOP_LIST(T_BINARY_ROWS_, ~)
  QT_UNOP_LIST(T_UNARY_ROWS_, ~)
  {"logical_not", t_logical_not, 1, "()", "elementwise not t (true where t is 0)"},
  {"logical_not_", t_logical_not_, 1, "()", "not t in place"},
  {"clamp", t_clamp, 3, "(lo, hi)", "t limited to [lo, hi] (nil: no bound)"},
  {"clamp_", t_clamp_, 3, "(lo, hi)", "clamp(t, lo, hi) in place"},
  {"nan_to_num", t_nan_to_num, 4, "([nan] [, posinf] [, neginf])",
   "NaN, +inf, -inf replaced (by 0 and the dtype's largest and lowest finite values)"},
  {"nan_to_num_", t_nan_to_num_, 4, "([nan] [, posinf] [, neginf])", "nan_to_num in place"},
  {"lerp", t_lerp, 3, "(b, w)", "t + w (b - t), exact at w = 0 and 1 (w a number or a tensor)"},
  {"lerp_", t_lerp_, 3, "(b, w)", "lerp in place (t a float tensor; b and w broadcast to it)"},
  {"addcmul_", t_addcmul_, 4, "(a, b [, value])", "t += value * a * b (value 1 by default)"},
  {"addcdiv_", t_addcdiv_, 4, "(a, b [, value])", "t += value * a / b (value 1 by default)"},
  {"fill_", t_fill_, 2, "(v)", "sets every element to the number v"},
  {"zero_", t_zero_, 1, "()", "sets every element to 0"},
  {NULL, NULL, 0, NULL, NULL}
};
#undef T_BINARY_ROWS_
#undef T_UNARY_ROWS_

#define T_LIST_NAME_(P, E, name, ...) name,
#define T_UNARY_NAME_(P, E, name, ints, result, fexpr, iexpr, bind, ...) \
  T_UNARY_NAME_##bind##_##result(name)
#define T_UNARY_NAME_AUTO_SAME(name) name,
#define T_UNARY_NAME_AUTO_BOOL(name)
#define T_UNARY_NAME_OWN_SAME(name)
#define T_BOOL_NAME_(P, E, name, ints, result, fexpr, iexpr, bind, ...) \
  T_BOOL_NAME_##bind##_##result(name)
#define T_BOOL_NAME_AUTO_SAME(name)
#define T_BOOL_NAME_AUTO_BOOL(name) name,
#define T_BOOL_NAME_OWN_SAME(name)
static void t_push_names(lua_State *L, const char *const *names, int n, const char *field) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushstring(L, names[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, field);
}

void lq_elementwise_lists(lua_State *L) {
  static const char *const unary[] = { QT_UNOP_LIST(T_UNARY_NAME_, ~) };
  static const char *const unary_bool[] = { QT_UNOP_LIST(T_BOOL_NAME_, ~) };
  static const char *const binary[] = { QT_BINOP_LIST(T_LIST_NAME_, ~) };
  if (lua_getfield(L, LUA_REGISTRYINDEX, LQ_OPS) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, LQ_OPS);
  }
  t_push_names(L, unary, (int)(sizeof unary / sizeof *unary), "unary");
  t_push_names(L, unary_bool, (int)(sizeof unary_bool / sizeof *unary_bool), "unary_bool");
  t_push_names(L, binary, (int)(sizeof binary / sizeof *binary), "binary");
  lua_pop(L, 1);
}

const lq_Reg lq_elementwise_metamethods[] = {
  {"__add", t_meta_add, LQ_VARARGS, NULL, NULL},
  {"__sub", t_meta_sub, LQ_VARARGS, NULL, NULL},
  {"__mul", t_meta_mul, LQ_VARARGS, NULL, NULL},
  {"__div", t_meta_div, LQ_VARARGS, NULL, NULL},
  {"__pow", t_meta_pow, LQ_VARARGS, NULL, NULL},
  {"__unm", t_meta_unm, LQ_VARARGS, NULL, NULL},
  {"__mod", t_meta_mod, LQ_VARARGS, NULL, NULL},
  {"__idiv", t_meta_idiv, LQ_VARARGS, NULL, NULL},
  {NULL, NULL, 0, NULL, NULL}
};
