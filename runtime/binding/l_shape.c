/*
** l_shape.c — the qlua.Tensor methods that slice and reshape: slice, squeeze, unsqueeze,
** flatten, unflatten, movedim, flip, roll, repeat_tensor, split and chunk, and the
** triangles and diagonals (tril, triu, diag, diagonal). The core does
** the work (ops_view.c, ops_shape.c); this file turns 1-based, possibly negative Lua
** positions into the core's and builds the Lua lists of split and chunk.
** l_tensor.c registers lq_shape_methods with the other methods.
*/
#include <stdint.h>
#include <string.h>

#include "lqlua.h"

/* ================================================================ slices and shape ops */

/* A number, or a table of at most QT_MAXDIM integers (any sign): the count. */
static int t_checkints(lua_State *L, int arg, const char *op, const char *what, int64_t *v) {
  if (lua_type(L, arg) == LUA_TNUMBER) {
    v[0] = (int64_t)luaL_checkinteger(L, arg);
    return 1;
  }
  if (lua_type(L, arg) != LUA_TTABLE) luaL_typeerror(L, arg, "number or table of numbers");
  lua_Unsigned len = lua_rawlen(L, arg);
  if (len > QT_MAXDIM)
    luaL_error(L, "%s: %I %s given (at most %d)", op, (lua_Integer)len, what, QT_MAXDIM);
  for (int i = 1; i <= (int)len; i++) {
    lua_rawgeti(L, arg, i);
    int isint;
    lua_Integer x = lua_tointegerx(L, -1, &isint);
    if (!isint) luaL_error(L, "%s: %s entry %d is not an integer", op, what, i);
    v[i - 1] = (int64_t)x;
    lua_pop(L, 1);
  }
  return (int)len;
}

/* 1-based dims (a number or a table) as 0-based dims of t. */
static int t_checkdims(lua_State *L, int arg, const qt_tensor *t, const char *op, int *dims) {
  int64_t v[QT_MAXDIM];
  int n = t_checkints(L, arg, op, "dims", v);
  for (int k = 0; k < n; k++) {
    if (t->ndim == 0)
      luaL_error(L, "%s: dim %I out of range (tensor is 0-d)", op, (lua_Integer)v[k]);
    if (v[k] < 1 || v[k] > t->ndim)
      luaL_error(L, "%s: dim %I out of range (1..%d)", op, (lua_Integer)v[k], t->ndim);
    dims[k] = (int)v[k] - 1;
  }
  return n;
}

/* A 1-based position (negative: from the end) as the core's 0-based one. */
static int64_t t_corepos(lua_State *L, lua_Integer p, const char *op, int dim, int64_t n) {
  if (p == 0)
    luaL_error(L, "%s: position 0 for dim %d of size %I (positions are 1..%I, or -%I..-1 "
               "from the end)", op, dim + 1, (lua_Integer)n, (lua_Integer)n, (lua_Integer)n);
  return p > 0 ? (int64_t)(p - 1) : (int64_t)p;
}

static int t_slice(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "slice");
  int dim = lq_checkdim(L, 2, t, "slice");
  lua_Integer first = luaL_checkinteger(L, 3), last = luaL_checkinteger(L, 4);
  lua_Integer step = luaL_optinteger(L, 5, 1);
  int64_t n = t->size[dim];
  int64_t f = t_corepos(L, first, "slice", dim, n), l = t_corepos(L, last, "slice", dim, n);
  qt_tensor *out = lq_newtensor(L);
  if (qt_slice(ctx, out, t, dim, f, l, (int64_t)step) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_squeeze(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "squeeze");
  int dim = lua_isnoneornil(L, 2) ? -1 : lq_checkdim(L, 2, t, "squeeze");
  qt_tensor *out = lq_newtensor(L);
  if (qt_squeeze(ctx, out, t, dim) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_unsqueeze(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "unsqueeze");
  lua_Integer d = luaL_checkinteger(L, 2);
  if (d < 1 || d > t->ndim + 1)
    return luaL_error(L, "unsqueeze: dim %I out of range (1..%d)", d, t->ndim + 1);
  qt_tensor *out = lq_newtensor(L);
  if (qt_unsqueeze(ctx, out, t, (int)d - 1) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_flatten(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "flatten");
  int first = 0, last = t->ndim - 1;
  if (!lua_isnoneornil(L, 2)) first = lq_checkdim(L, 2, t, "flatten");
  if (!lua_isnoneornil(L, 3)) last = lq_checkdim(L, 3, t, "flatten");
  qt_tensor *out = lq_newtensor(L);
  if (qt_flatten(ctx, out, t, first, last < 0 ? 0 : last) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_unflatten(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "unflatten");
  int dim = lq_checkdim(L, 2, t, "unflatten");
  luaL_checktype(L, 3, LUA_TTABLE);
  int n;
  int64_t sizes[QT_MAXDIM];
  lq_checkshape(L, 3, "unflatten", LQ_SHAPE_INFER, &n, sizes);
  qt_tensor *out = lq_newtensor(L);
  if (qt_unflatten(ctx, out, t, dim, n, sizes) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_movedim(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "movedim");
  int from[QT_MAXDIM], to[QT_MAXDIM];
  int n = t_checkdims(L, 2, t, "movedim", from);
  int m = t_checkdims(L, 3, t, "movedim", to);
  if (n != m)
    return luaL_error(L, "movedim: %d source dims and %d destination dims", n, m);
  qt_tensor *out = lq_newtensor(L);
  if (qt_movedim(ctx, out, t, n, from, to) != 0) return lq_raise(L, ctx);
  return 1;
}

static int t_flip(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "flip");
  int dims[QT_MAXDIM];
  int n = t_checkdims(L, 2, t, "flip", dims);
  qt_tensor *out = lq_newtensor(L);
  if (qt_flip(ctx, out, t, n, dims) != 0) return lq_raise(L, ctx);
  return 1;
}

/* roll(shifts [, dims]): without dims, the flattened tensor is rolled by one shift. */
static int t_roll(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "roll");
  int64_t shifts[QT_MAXDIM];
  int dims[QT_MAXDIM];
  int n = t_checkints(L, 2, "roll", "shifts", shifts);
  if (lua_isnoneornil(L, 3)) {
    if (n != 1) return luaL_error(L, "roll: %d shifts given without dims (1 expected)", n);
    qt_tensor *out = lq_newtensor(L);
    if (qt_roll(ctx, out, t, 0, shifts, NULL) != 0) return lq_raise(L, ctx);
    return 1;
  }
  int m = t_checkdims(L, 3, t, "roll", dims);
  if (n != m) return luaL_error(L, "roll: %d shifts and %d dims", n, m);
  qt_tensor *out = lq_newtensor(L);
  if (qt_roll(ctx, out, t, n, shifts, dims) != 0) return lq_raise(L, ctx);
  return 1;
}

/* repeat_tensor(s1, s2, ...) or repeat_tensor{s1, s2, ...}. */
static int t_repeat_tensor(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "repeat_tensor");
  int n;
  int64_t sizes[QT_MAXDIM];
  lq_checkend(L, lq_checkshape(L, 2, "repeat_tensor", 0, &n, sizes), "repeat_tensor", true);
  if (n < t->ndim)
    return luaL_error(L, "repeat_tensor: %d sizes given for a tensor of %d dims (at least %d)",
                      n, t->ndim, t->ndim);
  qt_tensor *out = lq_newtensor(L);
  if (qt_repeat(ctx, out, t, n, sizes) != 0) return lq_raise(L, ctx);
  return 1;
}

/* Pushes a list of narrow views of t along dim: pieces of the given lengths. */
#define QLUA_MAX_PIECES (1 << 24)

static void t_pushpieces(lua_State *L, qt_ctx *ctx, const qt_tensor *t, int dim, int64_t count,
                         int64_t piece, const int64_t *lengths, const char *op) {
  /* a bound well below what a table can hold: chunk(2^31 - 1) of an empty dim would
  ** otherwise build a 2^31-entry table of empty views */
  if (count > QLUA_MAX_PIECES)
    luaL_error(L, "%s: %I pieces are too many (at most %d)", op, (lua_Integer)count,
               QLUA_MAX_PIECES);
  lua_createtable(L, (int)count, 0);
  int64_t start = 0, n = t->size[dim];
  for (int64_t k = 0; k < count; k++) {
    int64_t len = lengths != NULL ? lengths[k] : (piece < n - start ? piece : n - start);
    qt_tensor *v = lq_newtensor(L);
    if (qt_narrow(ctx, v, t, dim, start, len) != 0) lq_raise_as(L, ctx, "narrow", op);
    lua_rawseti(L, -2, (lua_Integer)k + 1);
    start += len;
  }
}

/* split(size, dim): pieces of size (the last one smaller); split({s1, s2, ...}, dim):
** pieces of those sizes, which must add up to the dim's size. dim defaults to 1. */
static int t_split(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "split");
  if (t->ndim == 0) return luaL_error(L, "split: a 0-d tensor cannot be split");
  int dim = lua_isnoneornil(L, 3) ? 0 : lq_checkdim(L, 3, t, "split");
  int64_t n = t->size[dim];
  if (lua_type(L, 2) == LUA_TTABLE) {
    lua_Unsigned len = lua_rawlen(L, 2);
    if (len > (lua_Unsigned)INT32_MAX) return luaL_error(L, "split: too many sizes");
    int64_t *lengths = lua_newuserdatauv(L, (size_t)(len > 0 ? len : 1) * sizeof *lengths, 0);
    int64_t total = 0;
    for (lua_Unsigned i = 1; i <= len; i++) {
      lua_rawgeti(L, 2, (lua_Integer)i);
      int isint;
      lua_Integer s = lua_tointegerx(L, -1, &isint);
      if (!isint) return luaL_error(L, "split: size %I is not an integer", (lua_Integer)i);
      if (s < 0) return luaL_error(L, "split: size %I is negative (%I)", (lua_Integer)i, s);
      if (s > n - total)
        return luaL_error(L, "split: sizes exceed size %I of dim %d", (lua_Integer)n, dim + 1);
      lengths[i - 1] = (int64_t)s;
      total += (int64_t)s;
      lua_pop(L, 1);
    }
    if (total != n)
      return luaL_error(L, "split: sizes add up to %I, not to size %I of dim %d",
                        (lua_Integer)total, (lua_Integer)n, dim + 1);
    t_pushpieces(L, ctx, t, dim, (int64_t)len, 0, lengths, "split");
    return 1;
  }
  lua_Integer size = luaL_checkinteger(L, 2);
  if (size < 1) return luaL_error(L, "split: size %I must be >= 1", size);
  /* ceil(n / size) without forming n + size - 1, which overflows for a huge size */
  int64_t count = n == 0 ? 1 : n / (int64_t)size + (n % (int64_t)size != 0);
  t_pushpieces(L, ctx, t, dim, count, (int64_t)size, NULL, "split");
  return 1;
}

/* chunk(n, dim): pieces of ceil(size / n) (the last smaller; fewer than n when they run
** out). A dim of size 0 gives n empty pieces. dim defaults to 1. */
static int t_chunk(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "chunk");
  if (t->ndim == 0) return luaL_error(L, "chunk: a 0-d tensor cannot be split");
  lua_Integer chunks = luaL_checkinteger(L, 2);
  int dim = lua_isnoneornil(L, 3) ? 0 : lq_checkdim(L, 3, t, "chunk");
  if (chunks < 1) return luaL_error(L, "chunk: %I chunks (at least 1)", chunks);
  int64_t n = t->size[dim];
  if (n == 0) {
    t_pushpieces(L, ctx, t, dim, (int64_t)chunks, 0, NULL, "chunk");
    return 1;
  }
  int64_t piece = n / (int64_t)chunks + (n % (int64_t)chunks != 0);
  t_pushpieces(L, ctx, t, dim, n / piece + (n % piece != 0), piece, NULL, "chunk");
  return 1;
}

/* ================================================================ triangles and diagonals */

/* tril([k = 0]), triu([k = 0]) and their in-place forms: k is PyTorch's diagonal offset
** (0 the main diagonal, > 0 above it), not a position, so it stays as given. */
static int t_tri(lua_State *L, const char *op, bool upper, bool in_place) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, op);
  int64_t k = (int64_t)luaL_optinteger(L, 2, 0);
  if (in_place) {
    if ((upper ? qt_triu_(ctx, t, k) : qt_tril_(ctx, t, k)) != 0) return lq_raise(L, ctx);
    lua_settop(L, 1);
    return 1;
  }
  qt_tensor *out = lq_newtensor(L);
  if ((upper ? qt_triu(ctx, out, t, k) : qt_tril(ctx, out, t, k)) != 0) return lq_raise(L, ctx);
  return 1;
}
static int t_tril(lua_State *L) { return t_tri(L, "tril", false, false); }
static int t_triu(lua_State *L) { return t_tri(L, "triu", true, false); }
static int t_tril_(lua_State *L) { return t_tri(L, "tril_", false, true); }
static int t_triu_(lua_State *L) { return t_tri(L, "triu_", true, true); }

/* diag([k = 0]): 1-D -> a matrix with t on diagonal k; 2-D -> a copy of diagonal k. */
static int t_diag(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "diag");
  int64_t k = (int64_t)luaL_optinteger(L, 2, 0);
  qt_tensor *out = lq_newtensor(L);
  if (qt_diag(ctx, out, t, k) != 0) return lq_raise(L, ctx);
  return 1;
}

/* diagonal([offset = 0] [, dim1 = 1] [, dim2 = 2]): a view, as PyTorch's (dims 1-based). */
static int t_diagonal(lua_State *L) {
  qt_ctx *ctx = lq_ctx(L);
  qt_tensor *t = lq_checklive(L, 1, "diagonal");
  int64_t offset = (int64_t)luaL_optinteger(L, 2, 0);
  int d1 = lua_isnoneornil(L, 3) ? 0 : lq_checkdim(L, 3, t, "diagonal");
  int d2 = lua_isnoneornil(L, 4) ? 1 : lq_checkdim(L, 4, t, "diagonal");
  qt_tensor *out = lq_newtensor(L);
  if (qt_diagonal(ctx, out, t, offset, d1, d2) != 0) return lq_raise(L, ctx);
  return 1;
}

const lq_Reg lq_shape_methods[] = {
  {"slice", t_slice, 5, "(dim, first, last [, step])",
   "a view of positions first..last (inclusive; -1 is the last) of dim, every step-th"},
  {"squeeze", t_squeeze, 2, "([dim])",
   "a view without the size-1 dims (or without dim, if its size is 1)"},
  {"unsqueeze", t_unsqueeze, 2, "(dim)", "a view with a size-1 dim inserted at dim"},
  {"flatten", t_flatten, 3, "([first [, last]])",
   "dims first..last (default all) merged into one"},
  {"unflatten", t_unflatten, 3, "(dim, sizes)",
   "a view with dim split into the table sizes (one may be -1)"},
  {"movedim", t_movedim, 3, "(from, to)",
   "a view with dim from moved to position to (numbers or tables)"},
  {"flip", t_flip, 2, "(dims)", "a new tensor with the dims (a number or a table) reversed"},
  {"roll", t_roll, 3, "(shifts [, dims])",
   "a new tensor with elements shifted along dims, wrapping (without dims: the flattened "
   "tensor)"},
  {"repeat_tensor", t_repeat_tensor, LQ_VARARGS, "(sizes)",
   "t tiled sizes[d] times along each dim d (PyTorch's repeat)"},
  {"split", t_split, 3, "(size | {s1, s2, ...} [, dim])",
   "a Lua list of views along dim (default 1) of size elements each, or of those sizes"},
  {"chunk", t_chunk, 3, "(n [, dim])",
   "a Lua list of up to n views along dim (default 1) of ceil(size / n) elements each"},
  {"tril", t_tril, 2, "([k])",
   "a copy with the elements above diagonal k (default 0, the main one; k > 0 above it) of "
   "the last two dims zeroed"},
  {"triu", t_triu, 2, "([k])",
   "a copy with the elements below diagonal k of the last two dims zeroed"},
  {"tril_", t_tril_, 2, "([k])", "tril in place; returns t"},
  {"triu_", t_triu_, 2, "([k])", "triu in place; returns t"},
  {"diag", t_diag, 2, "([k])",
   "1-D: the square matrix with t on diagonal k (default 0); 2-D: a 1-D copy of diagonal k"},
  {"diagonal", t_diagonal, 4, "([offset] [, dim1] [, dim2])",
   "a view of diagonal offset (default 0) of dims dim1 and dim2 (default 1 and 2), as the "
   "new last dim"},
  {NULL, NULL, 0, NULL, NULL}
};
