/*
** l_conv.c — 2-D convolution from Lua: qlua.conv2d, qlua.conv_transpose2d and conv2d's two
** gradients qlua.conv2d_input and qlua.conv2d_weight (PyTorch's F.conv2d,
** F.conv_transpose2d, torch.nn.grad.conv2d_input/_weight), qlua.set_cudnn_tf32 and
** qlua.set_cudnn_enabled. The core does the work (ops_conv.c); this file reads the options
** table (stride, padding, dilation, groups, output_padding: a number or {h, w}; padding also
** "same" or "valid").
** l_qlua.c registers lq_conv_functions with the module's functions.
*/
#include "lqlua.h"

#include <string.h>

/* The options table at arg (or none), checked for unknown keys. */
static void c_opts(lua_State *L, int arg, const char *op, bool transposed, qt_conv_opts *o) {
  memset(o, 0, sizeof *o);
  int opts = 0;
  if (!lua_isnoneornil(L, arg)) {
    luaL_checktype(L, arg, LUA_TTABLE);
    opts = lua_absindex(L, arg);
    lua_pushnil(L);
    while (lua_next(L, opts) != 0) {
      const char *k = lq_keystring(L, -2, op);
      static const char *const known[] = {"stride", "padding", "dilation", "groups", "output_padding", NULL};
      bool ok = false;
      for (int i = 0; known[i] != NULL && k != NULL; i++)
        if (strcmp(k, known[i]) == 0 && (transposed || i != 4)) ok = true;
      if (!ok)
        luaL_error(L, "%s: unknown option '%s' (it takes stride, padding, dilation, groups%s)", op,
                   k != NULL ? k : luaL_typename(L, -2), transposed ? ", output_padding" : "");
      lua_pop(L, 1);
    }
  }
  lq_opt_pair(L, opts, op, "stride", 1, o->stride);
  lq_opt_pair(L, opts, op, "dilation", 1, o->dilation);
  lq_opt_pair(L, opts, op, "output_padding", 0, o->output_padding);
  o->groups = 1;
  if (opts != 0) {
    if (lua_getfield(L, opts, "groups") != LUA_TNIL) {
      if (!lua_isinteger(L, -1)) luaL_error(L, "%s: groups must be an integer", op);
      o->groups = (int64_t)lua_tointeger(L, -1);
    }
    lua_pop(L, 1);
    if (lua_getfield(L, opts, "padding") == LUA_TSTRING) {
      const char *p = lq_tocstring(L, -1, op, "padding");
      if (strcmp(p, "same") == 0) o->same = true;
      else if (strcmp(p, "valid") != 0)
        luaL_error(L, "%s: padding '%s' (a number, {h, w}, 'same' or 'valid')", op, p);
      lua_pop(L, 1);
      return;
    }
    lua_pop(L, 1);
  }
  lq_opt_pair(L, opts, op, "padding", 0, o->pad);
}

/* An optional bias at arg (nil: none). */
static const qt_tensor *c_optbias(lua_State *L, int arg, const char *op) {
  if (lua_isnoneornil(L, arg)) return NULL;
  const qt_tensor *b = qlua_totensor(L, arg);
  if (b == NULL) luaL_error(L, "%s: the bias must be a tensor or nil, got a %s", op, luaL_typename(L, arg));
  return b;
}

static const qt_tensor *c_tensor(lua_State *L, int arg, const char *op, const char *what) {
  const qt_tensor *t = qlua_totensor(L, arg);
  if (t == NULL) luaL_error(L, "%s: the %s must be a tensor, got a %s", op, what, luaL_typename(L, arg));
  return t;
}

/* conv2d(x, w [, bias] [, opts]) and conv_transpose2d. */
static int c_conv(lua_State *L, bool transposed) {
  const char *op = transposed ? "conv_transpose2d" : "conv2d";
  qt_ctx *ctx = lq_ctx(L);
  const qt_tensor *x = c_tensor(L, 1, op, "input"), *w = c_tensor(L, 2, op, "weight");
  int oarg = 4;
  const qt_tensor *bias = NULL;
  if (lua_istable(L, 3) && qlua_totensor(L, 3) == NULL) oarg = 3;   /* (x, w, opts) */
  else bias = c_optbias(L, 3, op);
  qt_conv_opts o;
  c_opts(L, oarg, op, transposed, &o);
  qt_tensor *out = lq_newtensor(L);
  int rc = transposed ? qt_conv_transpose2d(ctx, out, x, w, bias, &o) : qt_conv2d(ctx, out, x, w, bias, &o);
  if (rc != 0) return lq_raise(L, ctx);
  return 1;
}
static int q_conv2d(lua_State *L) { return c_conv(L, false); }
static int q_conv_transpose2d(lua_State *L) { return c_conv(L, true); }

static void c_size4(lua_State *L, int arg, const char *op, const char *what, int64_t *size) {
  int ndim;
  lq_checkshape(L, arg, op, LQ_SHAPE_ONE, &ndim, size);
  if (ndim != 4) luaL_error(L, "%s: the %s size must have 4 dims, got %d", op, what, ndim);
}

/* conv2d_input(input_size, w, dy [, opts]). */
static int q_conv2d_input(lua_State *L) {
  const char *op = "conv2d_input";
  qt_ctx *ctx = lq_ctx(L);
  int64_t size[QT_MAXDIM];
  c_size4(L, 1, op, "input", size);
  const qt_tensor *w = c_tensor(L, 2, op, "weight"), *dy = c_tensor(L, 3, op, "gradient");
  qt_conv_opts o;
  c_opts(L, 4, op, false, &o);
  qt_tensor *out = lq_newtensor(L);
  if (qt_conv2d_input(ctx, out, size, w, dy, &o) != 0) return lq_raise(L, ctx);
  return 1;
}

/* conv2d_weight(x, weight_size, dy [, opts]). */
static int q_conv2d_weight(lua_State *L) {
  const char *op = "conv2d_weight";
  qt_ctx *ctx = lq_ctx(L);
  const qt_tensor *x = c_tensor(L, 1, op, "input");
  int64_t size[QT_MAXDIM];
  c_size4(L, 2, op, "weight", size);
  const qt_tensor *dy = c_tensor(L, 3, op, "gradient");
  qt_conv_opts o;
  c_opts(L, 4, op, false, &o);
  qt_tensor *out = lq_newtensor(L);
  if (qt_conv2d_weight(ctx, out, x, size, dy, &o) != 0) return lq_raise(L, ctx);
  return 1;
}

static int q_set_cudnn_enabled(lua_State *L) {
  luaL_checktype(L, 1, LUA_TBOOLEAN);
  lq_ctx(L)->cudnn_enabled = lua_toboolean(L, 1);
  return 0;
}

static int q_set_cudnn_tf32(lua_State *L) {
  luaL_checktype(L, 1, LUA_TBOOLEAN);
  lq_ctx(L)->allow_tf32_conv = lua_toboolean(L, 1);
  return 0;
}

const lq_Reg lq_conv_functions[] = {
  {"conv2d", q_conv2d, 4, "(x, w [, bias] [, opts])",
   "2-D convolution of NCHW x with w (out, in / groups, kh, kw); opts stride, padding (a "
   "number, {h, w}, 'same', 'valid'), dilation, groups"},
  {"conv_transpose2d", q_conv_transpose2d, 4, "(x, w [, bias] [, opts])",
   "transposed 2-D convolution, w (in, out / groups, kh, kw); opts stride, padding, "
   "output_padding, dilation, groups"},
  {"conv2d_input", q_conv2d_input, 4, "(input_size, w, dy [, opts])",
   "conv2d's gradient of its input (of input_size) from dy, the output's"},
  {"conv2d_weight", q_conv2d_weight, 4, "(x, weight_size, dy [, opts])",
   "conv2d's gradient of its weight (of weight_size) from x and dy"},
  {"set_cudnn_enabled", q_set_cudnn_enabled, 1, "(flag)",
   "whether GPU convolutions may call cuDNN (default true; false: im2col and cuBLAS, as "
   "PyTorch's torch.backends.cudnn.enabled); qlua.backend(\"conv\") says which runs"},
  {"set_cudnn_tf32", q_set_cudnn_tf32, 1, "(flag)",
   "whether float32 convolutions may run on TF32 tensor cores (default true, as PyTorch's "
   "torch.backends.cudnn.allow_tf32)"},
  {NULL, NULL, 0, NULL, NULL}
};
