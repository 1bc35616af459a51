/*
** l_args.c — Lua values to tensors and back: the argument parsing the module functions
** and the methods share (shapes, opts, devices, dtypes, numbers), tensors built from
** nested Lua tables, and tensors turned into them (totable). Builds on l_state.c only.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "lqlua.h"

/* ================================================================ argument parsing */

/* A string with its length: strlen stops at a NUL inside. */
static const char *a_cstring(lua_State *L, const char *s, size_t len, const char *op,
                             const char *what) {
  size_t n = strlen(s);
  if (n != len)
    luaL_error(L, "%s: %s contains a NUL byte (at byte %d)", op, what, (int)n + 1);
  return s;
}

const char *lq_checkcstring(lua_State *L, int arg, const char *op, const char *what) {
  size_t len;
  const char *s = luaL_checklstring(L, arg, &len);
  return a_cstring(L, s, len, op, what);
}

const char *lq_tocstring(lua_State *L, int idx, const char *op, const char *what) {
  size_t len;
  const char *s = lua_tolstring(L, idx, &len);
  if (s == NULL) luaL_error(L, "%s: %s must be a string, got %s", op, what, luaL_typename(L, idx));
  return a_cstring(L, s, len, op, what);
}

const char *lq_keystring(lua_State *L, int idx, const char *op) {
  if (lua_type(L, idx) != LUA_TSTRING) return NULL;
  return lq_tocstring(L, idx, op, "an option name");
}

qt_dtype lq_dtype_by_name(lua_State *L, const char *op, const char *name) {
  int d = qt_dtype_from_name(name);
  if (d >= 0) return (qt_dtype)d;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (int i = 0; i < QT_NDTYPES; i++) {
    if (i > 0) luaL_addstring(&b, ", ");
    luaL_addstring(&b, qt_dtypes[i].name);
  }
  luaL_pushresult(&b);
  luaL_error(L, "%s: unknown dtype '%s' (%s)", op, name, lua_tostring(L, -1));
  return QT_F32;  /* not reached */
}

qt_device *lq_gpu(lua_State *L, const char *op, int ordinal) {
  lq_state *st = lq_state_of(L);
  qt_err err;
  qt_device *dev = qt_gpu_device(ordinal, &err);
  if (dev == NULL) {
    size_t n = strlen(op);
    if (strncmp(err.msg, op, n) == 0 && err.msg[n] == ':')
      luaL_error(L, "%s", err.msg);  /* already names the op ("gpu: no GPU available") */
    luaL_error(L, "%s: %s", op, err.msg);
  }
  if (ordinal >= 0 && ordinal < 64) st->gpus_used |= (uint64_t)1 << ordinal;
  return dev;
}

/* "gpu:N" with N a plain decimal ordinal; -1 when name is not of that form. */
static int a_parse_gpu_ordinal(const char *name) {
  if (strncmp(name, "gpu:", 4) != 0) return -1;
  const char *p = name + 4;
  if (*p == '\0' || strlen(p) > 6) return -1;
  int n = 0;
  for (; *p; p++) {
    if (*p < '0' || *p > '9') return -1;
    n = n * 10 + (*p - '0');
  }
  return n;
}

/* NULL when the name is not a device name at all (so `to` can try dtypes first). */
qt_device *lq_device_by_name_or_null(lua_State *L, const char *op, const char *name) {
  if (strcmp(name, "cpu") == 0) return qt_cpu_device();
  if (strcmp(name, "gpu") == 0) return lq_gpu(L, op, lq_ctx(L)->current_gpu);
  int ordinal = a_parse_gpu_ordinal(name);
  if (ordinal >= 0) return lq_gpu(L, op, ordinal);
  return NULL;
}

qt_device *lq_device_by_name(lua_State *L, const char *op, const char *name) {
  qt_device *dev = lq_device_by_name_or_null(L, op, name);
  if (dev == NULL) luaL_error(L, "%s: unknown device '%s' (cpu, gpu, gpu:N)", op, name);
  return dev;
}

qt_device *lq_checkdevice(lua_State *L, int arg, const char *op) {
  if (lua_type(L, arg) == LUA_TNUMBER) {
    lua_Integer n = luaL_checkinteger(L, arg);
    if (n < 0 || n > INT32_MAX) luaL_error(L, "%s: GPU ordinal %I is negative or too large", op, n);
    return lq_gpu(L, op, (int)n);
  }
  if (lua_type(L, arg) != LUA_TSTRING) luaL_typeerror(L, arg, "device name or GPU ordinal");
  return lq_device_by_name(L, op, lq_tocstring(L, arg, op, "the device name"));
}

qt_device *lq_default_device(lua_State *L, const char *op) {
  if (qt_gpu_count() > 0) return lq_gpu(L, op, lq_ctx(L)->current_gpu);
  return qt_cpu_device();
}

qt_device *lq_optdevice(lua_State *L, int arg, const char *op) {
  return lua_isnoneornil(L, arg) ? lq_default_device(L, op) : lq_checkdevice(L, arg, op);
}

void lq_checkopts(lua_State *L, int arg, const char *op, qt_dtype *dtype, qt_device **dev) {
  if (lua_isnoneornil(L, arg)) return;
  luaL_checktype(L, arg, LUA_TTABLE);
  arg = lua_absindex(L, arg);
  lua_pushnil(L);
  while (lua_next(L, arg) != 0) {
    lua_pop(L, 1);
    const char *key = lq_keystring(L, -1, op);
    if (key == NULL || (strcmp(key, "dtype") != 0 && strcmp(key, "device") != 0))
      luaL_error(L, "%s: unknown option '%s' (dtype, device)", op, luaL_tolstring(L, -1, NULL));
  }
  if (lua_getfield(L, arg, "dtype") != LUA_TNIL) {
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "%s: opts.dtype must be a string, got %s", op, luaL_typename(L, -1));
    *dtype = lq_dtype_by_name(L, op, lq_tocstring(L, -1, op, "opts.dtype"));
  }
  lua_pop(L, 1);
  if (lua_getfield(L, arg, "device") != LUA_TNIL) {
    if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
      luaL_error(L, "%s: opts.device must be a string, got %s", op, luaL_typename(L, -1));
    *dev = lq_checkdevice(L, lua_gettop(L), op);
  }
  lua_pop(L, 1);
}

/* One size of a shape, at stack index idx (an argument or a table entry on top). */
static int64_t a_checksize(lua_State *L, int idx, const char *op, int flags) {
  int isint;
  lua_Integer v = lua_tointegerx(L, idx, &isint);
  if (!isint) {
    if (lua_type(L, idx) == LUA_TNUMBER)
      luaL_error(L, "%s: size %f is not an integer", op, lua_tonumber(L, idx));
    luaL_error(L, "%s: size must be an integer, got %s", op, luaL_typename(L, idx));
  }
  if (v < 0 && !(v == -1 && (flags & LQ_SHAPE_INFER)))
    luaL_error(L, "%s: size %I is negative", op, v);
  return (int64_t)v;
}

int lq_checkshape(lua_State *L, int arg, const char *op, int flags, int *ndim, int64_t *size) {
  int n = 0;
  if (lua_type(L, arg) == LUA_TTABLE) {
    lua_Unsigned len = lua_rawlen(L, arg);
    if (len > QT_MAXDIM)
      luaL_error(L, "%s: too many dimensions (%I, at most %d)", op, (lua_Integer)len, QT_MAXDIM);
    for (int i = 1; i <= (int)len; i++) {
      lua_rawgeti(L, arg, i);
      size[n++] = a_checksize(L, -1, op, flags);
      lua_pop(L, 1);
    }
    *ndim = n;
    return arg + 1;
  }
  if (lua_type(L, arg) != LUA_TNUMBER) luaL_typeerror(L, arg, "shape (sizes or a table)");
  while (lua_type(L, arg) == LUA_TNUMBER) {
    if (n == QT_MAXDIM) luaL_error(L, "%s: too many dimensions (at most %d)", op, QT_MAXDIM);
    size[n++] = a_checksize(L, arg, op, flags);
    arg++;
    if (flags & LQ_SHAPE_ONE) break;
  }
  *ndim = n;
  return arg;
}

/* A Lua number as a qt_scalar; *is_float says which subtype it was. The int field of a
** float is its truncation when that fits int64, else 0 (qt_scalar_f would be undefined
** behaviour for NaN or out-of-range values). */
qt_scalar lq_toscalar(lua_State *L, int idx, bool *is_float) {
  if (lua_isinteger(L, idx)) {
    *is_float = false;
    return qt_scalar_i((int64_t)lua_tointeger(L, idx));
  }
  double d = lua_tonumber(L, idx);
  qt_scalar s;
  s.f = d;
  s.i = (d >= -9223372036854775808.0 && d < 9223372036854775808.0) ? (int64_t)d : 0;
  *is_float = true;
  return s;
}

qt_scalar lq_checkstorable(lua_State *L, int idx, const char *op, qt_dtype dtype) {
  if (lua_type(L, idx) == LUA_TBOOLEAN) return qt_scalar_i(lua_toboolean(L, idx));
  if (lua_type(L, idx) != LUA_TNUMBER)
    luaL_error(L, "%s: expected a number, got %s", op, luaL_typename(L, idx));
  if (qt_is_float(dtype) || qt_is_bool(dtype)) {  /* a bool takes any number's nonzero */
    qt_scalar s;
    s.f = lua_tonumber(L, idx);
    s.i = lua_isinteger(L, idx) ? (int64_t)lua_tointeger(L, idx) : 0;
    return s;
  }
  int isint;
  lua_Integer v = lua_tointegerx(L, idx, &isint);
  if (!isint)
    luaL_error(L, "%s: cannot store %f in %s tensor", op, lua_tonumber(L, idx),
               qt_dtypes[dtype].name);
  if (v < qt_dtypes[dtype].min || v > qt_dtypes[dtype].max)
    luaL_error(L, "%s: value %I out of range for %s", op, v, qt_dtypes[dtype].name);
  return qt_scalar_i((int64_t)v);
}

void lq_pushscalar(lua_State *L, qt_dtype dtype, qt_scalar v) {
  if (qt_is_float(dtype)) lua_pushnumber(L, (lua_Number)v.f);
  else if (qt_is_bool(dtype)) lua_pushboolean(L, v.i != 0);
  else lua_pushinteger(L, (lua_Integer)v.i);
}

/* ================================================================ tensors from Lua tables */

/* State of one conversion: the shape found by walking first elements, then checked
** everywhere; path holds the 1-based position being visited, for messages. */
typedef struct a_table_walk {
  const char *op;
  int ndim;
  int64_t size[QT_MAXDIM];
  int64_t path[QT_MAXDIM];
  bool has_float;
  bool has_number;    /* a leaf is a number (else every leaf is a boolean) */
  bool as_index;
  qt_dtype dtype;
  char *out;          /* fill pass: next element */
} a_table_walk;

/* "2,3" for path[0..depth) */
static const char *a_pathstr(const a_table_walk *w, int depth, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int d = 0; d < depth && used < len; d++) {
    int n = snprintf(buf + used, len - used, d ? ",%lld" : "%lld", (long long)w->path[d]);
    if (n < 0) break;
    used += (size_t)n;
  }
  return buf;
}

/* Pass 1 over the table on top of the stack, at depth `dim`: rectangular, numbers or
** booleans at the leaves; notes whether any leaf is a float, and any a number. */
static void a_walk_check(lua_State *L, a_table_walk *w, int dim) {
  char where[QT_MAXDIM * 21];
  int64_t n = (int64_t)lua_rawlen(L, -1);
  if (n != w->size[dim])
    luaL_error(L, "%s: ragged nested table: row %s has %I elements, expected %I", w->op,
               a_pathstr(w, dim, where, sizeof where), (lua_Integer)n,
               (lua_Integer)w->size[dim]);
  luaL_checkstack(L, 2, "nested table too deep");
  for (int64_t i = 1; i <= n; i++) {
    w->path[dim] = i;
    int type = lua_rawgeti(L, -1, (lua_Integer)i);
    if (dim == w->ndim - 1) {
      if (type == LUA_TBOOLEAN && !w->as_index) {
        lua_pop(L, 1);
        continue;
      }
      w->has_number = true;
      if (type != LUA_TNUMBER) {
        if (type == LUA_TTABLE)
          luaL_error(L, "%s: ragged nested table: element %s is a table, expected a number",
                     w->op, a_pathstr(w, dim + 1, where, sizeof where));
        luaL_error(L, "%s: element %s is not a number (got %s)", w->op,
                   a_pathstr(w, dim + 1, where, sizeof where), luaL_typename(L, -1));
      }
      if (!lua_isinteger(L, -1)) {
        w->has_float = true;
        if (w->as_index) {
          lua_Number v = lua_tonumber(L, -1);
          if (v != floor(v) || !(v >= -9223372036854775808.0 && v < 9223372036854775808.0))
            luaL_error(L, "%s: index %f is not an integer (at position %s)", w->op, v,
                       a_pathstr(w, dim + 1, where, sizeof where));
        }
      }
    } else {
      if (type != LUA_TTABLE)
        luaL_error(L, "%s: ragged nested table: row %s is a %s, expected a table of %I elements",
                   w->op, a_pathstr(w, dim + 1, where, sizeof where), luaL_typename(L, -1),
                   (lua_Integer)w->size[dim + 1]);
      a_walk_check(L, w, dim + 1);
    }
    lua_pop(L, 1);
  }
}

/* Stores the number at idx into w->out as w->dtype and advances; `flat` is the 1-based
** row-major position, for messages. */
static void a_store(lua_State *L, a_table_walk *w, int idx, int64_t flat) {
  const qt_dtype_info *info = &qt_dtypes[w->dtype];
  if (lua_type(L, idx) == LUA_TBOOLEAN) {  /* true is 1, as in NumPy */
    qt_scalar_store(w->dtype, w->out, qt_scalar_i(lua_toboolean(L, idx)));
  } else if (info->is_float || info->is_bool) {  /* a bool takes the number's nonzero */
    qt_scalar_store(w->dtype, w->out, qt_scalar_from_double((double)lua_tonumber(L, idx)));
  } else {
    int isint;
    lua_Integer v = lua_tointegerx(L, idx, &isint);
    if (!isint)
      luaL_error(L, "%s: value %f at element %I is not an integer (dtype %s)", w->op,
                 lua_tonumber(L, idx), (lua_Integer)flat, info->name);
    if (v < info->min || v > info->max)
      luaL_error(L, "%s: value %I at element %I out of range for %s", w->op, v,
                 (lua_Integer)flat, info->name);
    qt_scalar_store(w->dtype, w->out, qt_scalar_i((int64_t)v));
  }
  w->out += qt_elsize(w->dtype);
}

/* Pass 2: row-major fill; the shape is known to be right. */
static void a_walk_fill(lua_State *L, a_table_walk *w, int dim, int64_t *flat) {
  int64_t n = w->size[dim];
  for (int64_t i = 1; i <= n; i++) {
    lua_rawgeti(L, -1, (lua_Integer)i);
    if (dim == w->ndim - 1) a_store(L, w, -1, ++*flat);
    else a_walk_fill(L, w, dim + 1, flat);
    lua_pop(L, 1);
  }
}

/* Shape from first elements, then check, infer the dtype, fill a host buffer owned by a
** userdata (so an error midway leaks nothing), and upload it with qt_from_host. */
qt_tensor *lq_fromtable(lua_State *L, int idx, const char *op, int dtype, qt_device *dev,
                        bool as_index) {
  qt_ctx *ctx = lq_ctx(L);
  a_table_walk w;
  memset(&w, 0, sizeof w);
  w.op = op;
  w.as_index = as_index;
  idx = lua_absindex(L, idx);

  if (lua_type(L, idx) == LUA_TNUMBER ||
      (lua_type(L, idx) == LUA_TBOOLEAN && !as_index)) {  /* a 0-d tensor */
    w.dtype = dtype >= 0 ? (qt_dtype)dtype
                         : lua_isboolean(L, idx) ? QT_BOOL
                                                 : (lua_isinteger(L, idx) ? QT_I64 : QT_F32);
    union { double f; int64_t i; } cell;
    w.out = (char *)&cell;
    a_store(L, &w, idx, 1);
    qt_tensor *t = lq_newtensor(L);
    if (qt_from_host(ctx, t, dev, w.dtype, 0, w.size, &cell) != 0)
      lq_raise_as(L, ctx, "tensor", op);
    return t;
  }
  if (lua_type(L, idx) != LUA_TTABLE) luaL_typeerror(L, idx, "table or number");

  /* the shape along first elements */
  luaL_checkstack(L, QT_MAXDIM + 4, "nested table too deep");
  lua_pushvalue(L, idx);
  int pushed = 1;
  for (;;) {
    if (w.ndim == QT_MAXDIM)
      luaL_error(L, "%s: nested table deeper than %d dimensions", op, QT_MAXDIM);
    int64_t n = (int64_t)lua_rawlen(L, -1);
    w.size[w.ndim++] = n;
    if (n == 0) break;
    pushed++;
    if (lua_rawgeti(L, -1, 1) != LUA_TTABLE) break;
  }
  lua_pop(L, pushed);

  lua_pushvalue(L, idx);
  a_walk_check(L, &w, 0);
  lua_pop(L, 1);

  w.dtype = dtype >= 0 ? (qt_dtype)dtype
                      : (w.has_float ? QT_F32 : w.has_number ? QT_I64 : QT_BOOL);
  int64_t numel = qt_contiguous_strides(w.ndim, w.size, NULL);
  if (numel < 0) luaL_error(L, "%s: table too large", op);
  if (dtype < 0 && numel == 0) w.dtype = QT_F32;  /* {} and {{}}: no values, float32 */
  char *buffer = (char *)lua_newuserdatauv(L, (size_t)numel * qt_elsize(w.dtype), 0);
  w.out = buffer;
  int64_t flat = 0;
  lua_pushvalue(L, idx);
  a_walk_fill(L, &w, 0, &flat);
  lua_pop(L, 1);

  qt_tensor *t = lq_newtensor(L);
  if (qt_from_host(ctx, t, dev, w.dtype, w.ndim, w.size, buffer) != 0)
    lq_raise_as(L, ctx, "tensor", op);
  lua_remove(L, -2);  /* the buffer: the collector takes it */
  return t;
}

/* ================================================================ tensors to Lua tables */

/* Nested tables from a row-major host copy. */
static void a_buildtable(lua_State *L, const qt_tensor *t, int dim, const char **p) {
  int64_t n = t->size[dim];
  lua_createtable(L, n < INT32_MAX ? (int)n : 0, 0);
  for (int64_t i = 0; i < n; i++) {
    if (dim == t->ndim - 1) {
      lq_pushscalar(L, t->dtype, qt_scalar_load(t->dtype, *p));
      *p += qt_elsize(t->dtype);
    } else {
      a_buildtable(L, t, dim + 1, p);
    }
    lua_rawseti(L, -2, (lua_Integer)(i + 1));
  }
}

/* Lua tables hold at most 2^31 entries in their array part; refuse up front a tensor whose
** tables (at any nesting level) would need more, rather than filling memory first. */
static void a_checktablesize(lua_State *L, const qt_tensor *t) {
  const int64_t limit = (int64_t)1 << 31;
  int64_t entries = 1;  /* entries at this level: the product of the sizes so far */
  for (int d = 0; d < t->ndim && entries > 0; d++) {
    if (t->size[d] > limit / entries) {
      char shape[128];
      luaL_error(L, "totable: a %s tensor is too large for Lua tables (more than 2^31 entries)",
                 qt_shape_str(t->ndim, t->size, shape, sizeof shape));
    }
    entries *= t->size[d];
  }
}

/* The body of totable, run by lq_call_named so that running out of Lua memory midway (a
** host copy and a table per row) says "totable: not enough memory". */
static int a_totable_build(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "totable");
  int64_t n = qt_numel(t);
  char *host = (char *)lua_newuserdatauv(L, (size_t)n * qt_elsize(t->dtype), 0);
  if (qt_read_all(ctx, t, host) != 0) return lq_raise_as(L, ctx, "read", "totable");
  const char *p = host;
  if (t->ndim == 0) {
    lq_pushscalar(L, t->dtype, qt_scalar_load(t->dtype, p));
    return 1;
  }
  luaL_checkstack(L, t->ndim + 2, "totable");
  a_buildtable(L, t, 0, &p);
  return 1;
}

int lq_totable(lua_State *L) {
  qt_tensor *t = lq_checklive(L, 1, "totable");
  a_checktablesize(L, t);
  char shape[96], what[160];
  snprintf(what, sizeof what, "for the tables of a %s %s tensor",
           qt_shape_str(t->ndim, t->size, shape, sizeof shape), qt_dtypes[t->dtype].name);
  lua_settop(L, 1);
  return lq_call_named(L, a_totable_build, 1, 1, "totable", what);
}

/* A 1-based dim argument as a 0-based dim of t. */
int lq_checkdim(lua_State *L, int arg, const qt_tensor *t, const char *op) {
  lua_Integer d = luaL_checkinteger(L, arg);
  if (t->ndim == 0) luaL_error(L, "%s: dim %I out of range (tensor is 0-d)", op, d);
  if (d < 1 || d > t->ndim) luaL_error(L, "%s: dim %I out of range (1..%d)", op, d, t->ndim);
  return (int)d - 1;
}

/* opts.key (opts a table's index, 0: none) as a pair {h, w} of integers (a number is both);
** def when nil. conv's and pooling's options. */
void lq_opt_pair(lua_State *L, int opts, const char *op, const char *key, int64_t def,
                 int64_t *out) {
  out[0] = out[1] = def;
  if (opts == 0) return;
  int ty = lua_getfield(L, opts, key);
  if (ty == LUA_TNUMBER) {
    if (!lua_isinteger(L, -1)) luaL_error(L, "%s: %s must be an integer, got %s", op, key, lua_tostring(L, -1));
    out[0] = out[1] = (int64_t)lua_tointeger(L, -1);
  } else if (ty == LUA_TTABLE) {
    if (lua_rawlen(L, -1) != 2) luaL_error(L, "%s: %s must be a number or {h, w}", op, key);
    for (int d = 0; d < 2; d++) {
      lua_rawgeti(L, -1, d + 1);
      if (!lua_isinteger(L, -1)) luaL_error(L, "%s: %s must be a number or {h, w} of integers", op, key);
      out[d] = (int64_t)lua_tointeger(L, -1);
      lua_pop(L, 1);
    }
  } else if (ty != LUA_TNIL) {
    luaL_error(L, "%s: %s must be a number or {h, w}, got a %s", op, key, lua_typename(L, ty));
  }
  lua_pop(L, 1);
}
