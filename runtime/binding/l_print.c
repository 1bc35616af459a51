/*
** l_print.c — tostring(t): a tensor's values, dtype, shape and device, as PyTorch
** prints them (minus the "tensor(" wrapper), with a footer line:
**
**     [[ 0.1234, -1.5000],
**      [ 2.0000,  3.0000]]
**     qlua.Tensor float32 2x2 cpu
**
** Values:
**   - integer dtypes print as integers, bool as true and false; float dtypes share one format chosen from the
**     finite values shown: "%.1f" when they are all integral (and below 1e8), else
**     "%.4f", or "%.4e" when the largest magnitude is >= 1e8, the smallest non-zero
**     one < 1e-4, or their ratio > 1000 (PyTorch's rule). nan, inf and -inf as such.
**     Every entry is right-aligned to the widest one.
**   - nested brackets, one row per line; blocks of 3-D and more are separated by blank
**     lines; a row longer than 80 columns wraps, indented under its bracket.
**   - a 0-d tensor prints its value; an empty tensor prints [].
**   - the footer: "qlua.Tensor <dtype> <shape> <device>", shape as 2x3 ("scalar" for 0-d).
**   - a freed tensor prints "qlua.Tensor (freed)" (tostring never raises for that).
**
** Summaries: a tensor of more than 1000 elements shows only the first and last 3
** entries along every dimension longer than 6, with "..." between (1 and 1 if that
** would still show more than 10000 entries). Only the shown elements are read: along
** each summarised dim of size n and stride s, the view gets two dims (2, 3) with
** strides ((n-3)*s, s) — the head and the tail — so one strided read (qt_read_all,
** on the tensor's own device) fetches exactly what is printed, and printing a
** 10^8-element GPU tensor costs one small copy. (With more than QT_MAXDIM dims after
** splitting, the shown elements are read one at a time instead.)
*/
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lqlua.h"

#define P_SUMMARY_THRESHOLD 1000  /* more elements than this: summarise */
#define P_EDGE 3                  /* entries kept at each end of a summarised dim */
#define P_MAX_SHOWN 10000         /* past this, keep 1 at each end instead */
#define P_LINE_WIDTH 80

typedef struct p_layout {
  int ndim;
  int64_t shown[QT_MAXDIM];   /* entries shown along each dim */
  bool split[QT_MAXDIM];      /* summarised: first `edge`, "...", last `edge` */
  int edge;
} p_layout;

typedef struct p_format {
  luaL_Buffer *b;
  const p_layout *lay;
  qt_dtype dtype;
  const char *data;           /* shown elements, row-major over lay->shown */
  size_t elsize;
  char spec[8];               /* printf format for floats */
  int width;                  /* of the widest entry */
  int column;                 /* of the line being written */
} p_format;

/* ---------------------------------------------------------------- reading what is shown */

/* Decides what is shown: everything up to P_SUMMARY_THRESHOLD elements, else the ends. */
static void p_plan(const qt_tensor *t, p_layout *lay) {
  lay->ndim = t->ndim;
  lay->edge = P_EDGE;
  if (qt_numel(t) == 0) {  /* nothing to read; the other sizes may multiply past int64 */
    for (int d = 0; d < t->ndim; d++) lay->split[d] = false, lay->shown[d] = t->size[d];
    return;
  }
  bool summarise = qt_numel(t) > P_SUMMARY_THRESHOLD;
  for (int pass = 0; pass < 2; pass++) {
    int64_t count = 1;
    for (int d = 0; d < t->ndim; d++) {
      lay->split[d] = summarise && t->size[d] > 2 * lay->edge;
      lay->shown[d] = lay->split[d] ? 2 * lay->edge : t->size[d];
      count = count > P_MAX_SHOWN ? count : count * lay->shown[d];
    }
    if (count <= P_MAX_SHOWN || !summarise) return;
    lay->edge = 1;
  }
}

/* The real position along dim d of shown entry i. */
static int64_t p_position(const qt_tensor *t, const p_layout *lay, int d, int64_t i) {
  if (!lay->split[d] || i < lay->edge) return i;
  return t->size[d] - 2 * lay->edge + i;
}

/* Reads the shown elements, row-major over lay->shown, into host (see the header). */
static int p_read(qt_ctx *ctx, const qt_tensor *t, const p_layout *lay, char *host) {
  int nsplit = 0;
  for (int d = 0; d < t->ndim; d++) nsplit += lay->split[d];
  if (nsplit == 0) return qt_read_all(ctx, t, host);
  if (t->ndim + nsplit <= QT_MAXDIM) {
    qt_tensor v = *t;  /* borrows t's storage reference: t is on the Lua stack */
    int n = 0;
    for (int d = 0; d < t->ndim; d++) {
      if (lay->split[d]) {
        v.size[n] = 2;
        v.stride[n++] = (t->size[d] - lay->edge) * t->stride[d];
        v.size[n] = lay->edge;
      } else {
        v.size[n] = t->size[d];
      }
      v.stride[n++] = t->stride[d];
    }
    v.ndim = n;
    return qt_read_all(ctx, &v, host);
  }
  /* too many dims to split in one view: element by element */
  int64_t count = 1, idx[QT_MAXDIM] = {0}, pos[QT_MAXDIM];
  for (int d = 0; d < t->ndim; d++) count *= lay->shown[d];
  size_t es = qt_elsize(t->dtype);
  for (int64_t k = 0; k < count; k++) {
    for (int d = 0; d < t->ndim; d++) pos[d] = p_position(t, lay, d, idx[d]);
    qt_scalar s;
    if (qt_get(ctx, t, pos, &s) != 0) return -1;
    qt_scalar_store(t->dtype, host + (size_t)k * es, s);
    for (int d = t->ndim - 1; d >= 0; d--) {
      if (++idx[d] < lay->shown[d]) break;
      idx[d] = 0;
    }
  }
  return 0;
}

/* ---------------------------------------------------------------- formatting numbers */

static int p_entry(const p_format *f, int64_t k, char *buf, size_t len) {
  qt_scalar s = qt_scalar_load(f->dtype, f->data + (size_t)k * f->elsize);
  if (qt_is_bool(f->dtype)) return snprintf(buf, len, "%s", s.i ? "true" : "false");
  if (!qt_is_float(f->dtype)) return snprintf(buf, len, "%lld", (long long)s.i);
  if (isnan(s.f)) return snprintf(buf, len, "nan");
  if (isinf(s.f)) return snprintf(buf, len, s.f > 0 ? "inf" : "-inf");
  return snprintf(buf, len, f->spec, s.f);
}

/* Chooses the float format from the shown values, then the common width. */
static void p_choose_format(p_format *f, int64_t count) {
  strcpy(f->spec, "%.4f");
  if (qt_is_float(f->dtype)) {
    double lo = HUGE_VAL, hi = 0;
    bool integral = true;
    for (int64_t k = 0; k < count; k++) {
      double v = qt_scalar_load(f->dtype, f->data + (size_t)k * f->elsize).f;
      if (!isfinite(v)) continue;
      double a = fabs(v);
      if (a != floor(a)) integral = false;
      if (a > hi) hi = a;
      if (a != 0 && a < lo) lo = a;
    }
    if (integral && hi < 1e8) strcpy(f->spec, "%.1f");
    else if (hi >= 1e8 || (lo != HUGE_VAL && (lo < 1e-4 || hi / lo > 1000))) strcpy(f->spec, "%.4e");
  }
  f->width = 1;
  char buf[64];
  for (int64_t k = 0; k < count; k++) {
    int n = p_entry(f, k, buf, sizeof buf);
    if (n > f->width) f->width = n;
  }
}

/* ---------------------------------------------------------------- layout */

static void p_add(p_format *f, const char *s) {
  luaL_addstring(f->b, s);
  const char *nl = strrchr(s, '\n');
  f->column = nl ? (int)strlen(nl + 1) : f->column + (int)strlen(s);
}

static void p_indent(p_format *f, int n) {
  for (int i = 0; i < n; i++) luaL_addchar(f->b, ' ');
  f->column += n;
}

/* A separator before the next entry of the innermost dim: ", " or a wrap. */
static void p_next_entry(p_format *f, int dim, int next_width) {
  if (f->column + 2 + next_width > P_LINE_WIDTH) {
    p_add(f, ",\n");
    p_indent(f, dim + 1);
  } else {
    p_add(f, ", ");
  }
}

/* Between rows of dim `dim` (>= 0, not innermost): ",\n", blank lines for the blocks of
** higher dims, and the indent that aligns the next row under the bracket. */
static void p_next_row(p_format *f, int dim) {
  p_add(f, ",\n");
  for (int i = dim + 2; i < f->lay->ndim; i++) p_add(f, "\n");
  p_indent(f, dim + 1);
}

/* Writes the block of dim `dim` whose first shown element is *k (row-major). */
static void p_block(p_format *f, int dim, int64_t *k) {
  const p_layout *lay = f->lay;
  char buf[64], padded[128];
  p_add(f, "[");
  for (int64_t i = 0; i < lay->shown[dim]; i++) {
    bool ellipsis = lay->split[dim] && i == lay->edge;
    if (dim == lay->ndim - 1) {
      if (ellipsis) {
        p_next_entry(f, dim, 3);
        p_add(f, "...");
      }
      int n = p_entry(f, *k, buf, sizeof buf);
      snprintf(padded, sizeof padded, "%*s", f->width, buf);
      (void)n;
      if (i > 0) p_next_entry(f, dim, f->width);
      p_add(f, padded);
      ++*k;
    } else {
      if (ellipsis) {
        p_next_row(f, dim);
        p_add(f, "...");
      }
      if (i > 0) p_next_row(f, dim);
      p_block(f, dim + 1, k);
    }
  }
  p_add(f, "]");
}

/* ---------------------------------------------------------------- __tostring */

int lq_tostring(lua_State *L) {
  qt_tensor *t = qlua_checktensor(L, 1);
  if (t->storage == NULL || t->storage->freed) {
    lua_pushliteral(L, "qlua.Tensor (freed)");
    return 1;
  }
  qt_ctx *ctx = lq_ctx(L);
  p_layout lay;
  p_plan(t, &lay);
  int64_t count = qt_numel(t) == 0 ? 0 : 1;
  for (int d = 0; d < t->ndim && count > 0; d++) count *= lay.shown[d];
  size_t es = qt_elsize(t->dtype);
  char *host = (char *)lua_newuserdatauv(L, (size_t)count * es, 0);
  if (count > 0 && p_read(ctx, t, &lay, host) != 0) return lq_raise_as(L, ctx, "read", "tostring");

  luaL_Buffer b;
  p_format f;
  memset(&f, 0, sizeof f);
  f.b = &b;
  f.lay = &lay;
  f.dtype = t->dtype;
  f.data = host;
  f.elsize = es;
  luaL_buffinit(L, &b);
  if (count == 0) {
    luaL_addstring(&b, "[]");
  } else if (t->ndim == 0) {
    char buf[64];
    p_choose_format(&f, 1);
    p_entry(&f, 0, buf, sizeof buf);
    luaL_addstring(&b, buf);
  } else {
    int64_t k = 0;
    p_choose_format(&f, count);
    p_block(&f, 0, &k);
  }
  char shape[QT_MAXDIM * 21];
  char footer[sizeof shape + 64];
  snprintf(footer, sizeof footer, "\n%s %s %s %s", QLUA_TENSOR, qt_dtypes[t->dtype].name,
           qt_shape_str(t->ndim, t->size, shape, sizeof shape),
           t->storage->device != NULL ? t->storage->device->name : "?");
  luaL_addstring(&b, footer);
  luaL_pushresult(&b);
  return 1;
}
