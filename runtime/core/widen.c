/*
** widen.c — float16 and bfloat16 for device slots that have no 16-bit code of their own.
**
** The registry calls a device through the table made here: for each element slot whose
** half_native bit (device.h) the device leaves clear, a stand-in that, when a view is
** float16 or bfloat16, gives the slot a contiguous float32 copy instead (converted in
** by the device's own copy slot, which every device does exactly for every dtype pair),
** and rounds the written copies back into the 16-bit views. Views of other dtypes, and
** calls with no 16-bit view at all, go straight through. So every op works on the
** 16-bit types on every device, computed in float32 and rounded once into the result,
** which is what PyTorch does; a device makes a slot faster by writing its 16-bit code
** and setting the bit.
**
** The copies come from the device's allocator directly (not charged to a state: they
** live for one call). A number bound for a 16-bit view (scatter's value, where's a or b)
** is rounded to that type first, so that going through float32 does not round twice.
** Uniform draws stay below 1 after rounding (wd_random).
**
** Two costs of the copies: an in-place slot (index_add_, scatter_add_) rounds its whole
** destination back, so a bfloat16 NaN it did not touch comes back as the quiet NaN 0x7fc0
** with its sign (float32 to bfloat16 makes every NaN that, as ml_dtypes does; float16
** keeps its payloads); and the copies are the device's memory, not retried after a
** garbage collection the way the core's own allocations are.
*/
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "device.h"
#include "scalar.h"
#include "tensor.h"

/* One view of a call: the caller's, and the float32 copy standing in for it. */
typedef struct wide {
  const qt_view *orig;
  qt_view tmp;
  void *ptr;
  size_t nbytes;
  bool on;   /* a copy stands in */
} wide;

/* Makes w stand for v: v itself, or (v 16-bit) a fresh contiguous float32 copy, filled
** from v when `load`. */
static int wide_take(qt_device *dev, wide *w, const qt_view *v, bool load, qt_err *err) {
  w->orig = v;
  w->on = false;
  if (v == NULL || !qt_is_half(v->dtype)) return 0;
  w->tmp = *v;
  w->tmp.dtype = QT_F32;
  int64_t step = 1;
  for (int d = v->ndim - 1; d >= 0; d--) {
    w->tmp.stride[d] = step;
    step *= v->size[d] > 0 ? v->size[d] : 1;
  }
  w->nbytes = (size_t)v->numel * sizeof(float);
  int oom = 0;
  if (dev->native->alloc(dev, w->nbytes, &w->ptr, &oom, err) != 0) return -1;
  w->tmp.data = w->ptr;
  w->on = true;
  if (load && v->numel > 0 && dev->native->copy(dev, &w->tmp, v, err) != 0) return -1;
  return 0;
}

static const qt_view *wide_view(const wide *w) { return w->on ? &w->tmp : w->orig; }

/* Rounds what the slot wrote into the float32 copy back into the 16-bit view. */
static int wide_put(qt_device *dev, const wide *w, qt_err *err) {
  if (!w->on || w->orig->numel == 0) return 0;
  return dev->native->copy(dev, w->orig, &w->tmp, err);
}

static void wide_drop(qt_device *dev, wide *w, int n) {
  for (int k = 0; k < n; k++)
    if (w[k].on) dev->native->free(dev, w[k].ptr, w[k].nbytes);
}

/* Whether any of the views is 16-bit (else the call goes straight through). */
static bool wide_any(const qt_view *a, const qt_view *b, const qt_view *c, const qt_view *d) {
  return (a != NULL && qt_is_half(a->dtype)) || (b != NULL && qt_is_half(b->dtype)) ||
         (c != NULL && qt_is_half(c->dtype)) || (d != NULL && qt_is_half(d->dtype));
}

/* A number bound for a 16-bit view, rounded to that type (exact in float32 then). */
static qt_scalar wide_round(qt_scalar s, const qt_view *v) {
  if (v == NULL || !qt_is_half(v->dtype)) return s;
  qt_cell cell;
  qt_scalar_store(v->dtype, &cell, s);
  return qt_scalar_load(v->dtype, &cell);
}

/* The stand-ins. Each takes its views in order (W_IN: read, W_OUT: written, W_INOUT:
** both), calls the native slot with what stands for them, then rounds the written ones
** back. WIDEN_BODY is the shared frame; V(k) is view k as the slot sees it. */
#define V(k) wide_view(&w[k])
#define WIDEN_BODY(N, TAKES, CALL, PUTS)                                    \
  wide w[N];                                                                \
  memset(w, 0, sizeof w);                                                   \
  int rc = -1;                                                              \
  if (TAKES) goto done;                                                     \
  if ((CALL) != 0) goto done;                                               \
  rc = (PUTS) ? -1 : 0;                                                     \
  done:                                                                     \
  wide_drop(dev, w, N);                                                     \
  return rc;
#define IN(k, v) wide_take(dev, &w[k], v, true, err)
#define OUT(k, v) wide_take(dev, &w[k], v, false, err)
#define PUT(k) wide_put(dev, &w[k], err)

static int wd_binary(qt_device *dev, qt_binop op, const qt_view *dst, const qt_view *a,
                     const qt_view *b, qt_err *err) {
  if (!wide_any(dst, a, b, NULL)) return dev->native->binary(dev, op, dst, a, b, err);
  WIDEN_BODY(3, OUT(0, dst) || IN(1, a) || IN(2, b),
             dev->native->binary(dev, op, V(0), V(1), V(2), err), PUT(0))
}

static int wd_binary_scalar(qt_device *dev, qt_binop op, const qt_view *dst, const qt_view *a,
                            qt_scalar s, bool scalar_first, qt_err *err) {
  if (!wide_any(dst, a, NULL, NULL))
    return dev->native->binary_scalar(dev, op, dst, a, s, scalar_first, err);
  WIDEN_BODY(2, OUT(0, dst) || IN(1, a),
             dev->native->binary_scalar(dev, op, V(0), V(1), s, scalar_first, err), PUT(0))
}

static int wd_unary(qt_device *dev, qt_unop op, const qt_view *dst, const qt_view *src,
                    const qt_unop_params *params, qt_err *err) {
  if (!wide_any(dst, src, NULL, NULL)) return dev->native->unary(dev, op, dst, src, params, err);
  WIDEN_BODY(2, OUT(0, dst) || IN(1, src),
             dev->native->unary(dev, op, V(0), V(1), params, err), PUT(0))
}

static int wd_reduce(qt_device *dev, qt_redop op, const qt_view *dst, const qt_view *src,
                     int dim, double arg, qt_err *err) {
  if (!wide_any(dst, src, NULL, NULL)) return dev->native->reduce(dev, op, dst, src, dim, arg, err);
  WIDEN_BODY(2, OUT(0, dst) || IN(1, src),
             dev->native->reduce(dev, op, V(0), V(1), dim, arg, err), PUT(0))
}

/* gather, index_select: (dst, src, dim, index) and take: (dst, src, index). */
static int wd_gather(qt_device *dev, const qt_view *dst, const qt_view *src, int dim,
                     const qt_view *index, qt_err *err) {
  if (!wide_any(dst, src, NULL, NULL)) return dev->native->gather(dev, dst, src, dim, index, err);
  WIDEN_BODY(2, OUT(0, dst) || IN(1, src),
             dev->native->gather(dev, V(0), V(1), dim, index, err), PUT(0))
}

static int wd_index_select(qt_device *dev, const qt_view *dst, const qt_view *src, int dim,
                           const qt_view *index, qt_err *err) {
  if (!wide_any(dst, src, NULL, NULL))
    return dev->native->index_select(dev, dst, src, dim, index, err);
  WIDEN_BODY(2, OUT(0, dst) || IN(1, src),
             dev->native->index_select(dev, V(0), V(1), dim, index, err), PUT(0))
}

static int wd_take(qt_device *dev, const qt_view *dst, const qt_view *src, const qt_view *index,
                   qt_err *err) {
  if (!wide_any(dst, src, NULL, NULL)) return dev->native->take(dev, dst, src, index, err);
  WIDEN_BODY(2, OUT(0, dst) || IN(1, src), dev->native->take(dev, V(0), V(1), index, err), PUT(0))
}

/* The in-place index ops read and write dst. */
static int wd_scatter(qt_device *dev, const qt_view *dst, int dim, const qt_view *index,
                      const qt_view *src, qt_scalar value, qt_err *err) {
  if (!wide_any(dst, src, NULL, NULL))
    return dev->native->scatter(dev, dst, dim, index, src, value, err);
  value = wide_round(value, dst);
  WIDEN_BODY(2, IN(0, dst) || IN(1, src),
             dev->native->scatter(dev, V(0), dim, index, V(1), value, err), PUT(0))
}

static int wd_index_add(qt_device *dev, const qt_view *dst, int dim, const qt_view *index,
                        const qt_view *src, qt_err *err) {
  if (!wide_any(dst, src, NULL, NULL)) return dev->native->index_add(dev, dst, dim, index, src, err);
  WIDEN_BODY(2, IN(0, dst) || IN(1, src),
             dev->native->index_add(dev, V(0), dim, index, V(1), err), PUT(0))
}

static int wd_scatter_add(qt_device *dev, const qt_view *dst, int dim, const qt_view *index,
                          const qt_view *src, qt_err *err) {
  if (!wide_any(dst, src, NULL, NULL))
    return dev->native->scatter_add(dev, dst, dim, index, src, err);
  WIDEN_BODY(2, IN(0, dst) || IN(1, src),
             dev->native->scatter_add(dev, V(0), dim, index, V(1), err), PUT(0))
}

static int wd_index_fill(qt_device *dev, const qt_view *dst, int dim, const qt_view *index,
                         qt_scalar value, qt_err *err) {
  if (!wide_any(dst, NULL, NULL, NULL))
    return dev->native->index_fill(dev, dst, dim, index, value, err);
  value = wide_round(value, dst);
  WIDEN_BODY(1, IN(0, dst), dev->native->index_fill(dev, V(0), dim, index, value, err), PUT(0))
}

static int wd_index_copy(qt_device *dev, const qt_view *dst, int dim, const qt_view *index,
                         const qt_view *src, qt_err *err) {
  if (!wide_any(dst, src, NULL, NULL))
    return dev->native->index_copy(dev, dst, dim, index, src, err);
  WIDEN_BODY(2, IN(0, dst) || IN(1, src),
             dev->native->index_copy(dev, V(0), dim, index, V(1), err), PUT(0))
}

static int wd_where(qt_device *dev, const qt_view *dst, const qt_view *cond, const qt_view *a,
                    qt_scalar a_value, const qt_view *b, qt_scalar b_value, qt_err *err) {
  if (!wide_any(dst, cond, a, b))
    return dev->native->where(dev, dst, cond, a, a_value, b, b_value, err);
  a_value = wide_round(a_value, dst);
  b_value = wide_round(b_value, dst);
  WIDEN_BODY(4, OUT(0, dst) || IN(1, cond) || IN(2, a) || IN(3, b),
             dev->native->where(dev, V(0), V(1), V(2), a_value, V(3), b_value, err), PUT(0))
}

static int wd_masked_select(qt_device *dev, const qt_view *dst, const qt_view *src,
                            const qt_view *mask, qt_err *err) {
  if (!wide_any(dst, src, mask, NULL))
    return dev->native->masked_select(dev, dst, src, mask, err);
  WIDEN_BODY(3, OUT(0, dst) || IN(1, src) || IN(2, mask),
             dev->native->masked_select(dev, V(0), V(1), V(2), err), PUT(0))
}

static int wd_nonzero(qt_device *dev, const qt_view *dst, const qt_view *mask, qt_err *err) {
  if (!wide_any(mask, NULL, NULL, NULL)) return dev->native->nonzero(dev, dst, mask, err);
  WIDEN_BODY(1, IN(0, mask), dev->native->nonzero(dev, dst, V(0), err), 0)
}

static int wd_matmul(qt_device *dev, const qt_view *c, const qt_view *a, const qt_view *b,
                     double alpha, double beta, bool allow_tf32, qt_err *err) {
  if (!wide_any(c, a, b, NULL))
    return dev->native->matmul(dev, c, a, b, alpha, beta, allow_tf32, err);
  WIDEN_BODY(3, wide_take(dev, &w[0], c, beta != 0, err) || IN(1, a) || IN(2, b),
             dev->native->matmul(dev, V(0), V(1), V(2), alpha, beta, allow_tf32, err), PUT(0))
}

/* The written view (mode's: y, x or w) in OUT, the two read ones IN. */
static int wd_conv(qt_device *dev, qt_conv_mode mode, const qt_conv_geom *g, const qt_view *x,
                   const qt_view *wt, const qt_view *y, qt_err *err) {
  if (!wide_any(x, wt, y, NULL)) return dev->native->conv(dev, mode, g, x, wt, y, err);
  int out = mode == QT_CONV_FORWARD ? 2 : mode == QT_CONV_BACKWARD_DATA ? 0 : 1;
  WIDEN_BODY(3, (out == 0 ? OUT(0, x) : IN(0, x)) || (out == 1 ? OUT(1, wt) : IN(1, wt)) ||
                    (out == 2 ? OUT(2, y) : IN(2, y)),
             dev->native->conv(dev, mode, g, V(0), V(1), V(2), err), PUT(out))
}

/* A slot that takes its views as a table (norm, attention): every 16-bit view of v that
** `has` names stands in as a float32 copy, the `written` ones rounded back after call(o, the
** stand-ins). The statistics views are float32 already. */
enum { WIDE_TABLE_MAX = 16 };
_Static_assert((int)QT_NORM_NVIEWS <= (int)WIDE_TABLE_MAX && (int)QT_ATTN_NVIEWS <= (int)WIDE_TABLE_MAX,
               "wide_table holds every view of a table slot");
typedef int (*wide_table_call)(qt_device *dev, const void *o, const qt_view *v, void *extra,
                               qt_err *err);
static int wide_table(qt_device *dev, int nviews, unsigned has, unsigned written,
                      const qt_view *v, wide_table_call call, const void *o, void *extra,
                      qt_err *err) {
  wide w[WIDE_TABLE_MAX];
  qt_view stand[WIDE_TABLE_MAX];
  memset(w, 0, sizeof w);
  int rc = -1;
  for (int k = 0; k < nviews; k++) {
    if (!(has >> k & 1u)) {
      memset(&stand[k], 0, sizeof stand[k]);
      continue;
    }
    if (wide_take(dev, &w[k], &v[k], !(written >> k & 1u), err)) goto done;
    stand[k] = *wide_view(&w[k]);
  }
  if (call(dev, o, stand, extra, err)) goto done;
  for (int k = 0; k < nviews; k++)
    if ((has >> k & 1u) && (written >> k & 1u) && wide_put(dev, &w[k], err)) goto done;
  rc = 0;
done:
  wide_drop(dev, w, nviews);
  return rc;
}

static bool wide_table_any(int nviews, unsigned has, const qt_view *v) {
  for (int k = 0; k < nviews; k++)
    if ((has >> k & 1u) && qt_is_half(v[k].dtype)) return true;
  return false;
}

static int wd_norm_call(qt_device *dev, const void *o, const qt_view *v, void *extra, qt_err *err) {
  (void)extra;
  return dev->native->norm(dev, (const qt_norm_opts *)o, v, err);
}

/* Forward writes y; backward dx, dweight and dbias. */
static int wd_norm(qt_device *dev, const qt_norm_opts *o, const qt_view *v, qt_err *err) {
  if (!wide_table_any(QT_NORM_NVIEWS, o->has, v)) return dev->native->norm(dev, o, v, err);
  unsigned written = o->backward ? (1u << QT_NORM_DX | 1u << QT_NORM_DWEIGHT | 1u << QT_NORM_DBIAS)
                                 : (1u << QT_NORM_Y);
  return wide_table(dev, QT_NORM_NVIEWS, o->has, written, v, wd_norm_call, o, NULL, err);
}

static int wd_attention_call(qt_device *dev, const void *o, const qt_view *v, void *path,
                             qt_err *err) {
  return dev->native->attention(dev, (const qt_attn_opts *)o, v, (char *)path, err);
}

/* Forward writes o (lse is float32); backward dq, dk and dv. A plan names the native path. */
static int wd_attention(qt_device *dev, const qt_attn_opts *o, const qt_view *v, char *path,
                        qt_err *err) {
  if (!wide_table_any(QT_ATTN_NVIEWS, o->has, v)) return dev->native->attention(dev, o, v, path, err);
  if (o->plan_only) {   /* the native slot names what it would run on the float32 copies */
    qt_view as[QT_ATTN_NVIEWS];
    memcpy(as, v, sizeof as);
    for (int k = 0; k < QT_ATTN_NVIEWS; k++)
      if ((o->has >> k & 1u) && qt_is_half(as[k].dtype)) as[k].dtype = QT_F32;
    return dev->native->attention(dev, o, as, path, err);
  }
  unsigned written = o->backward ? (1u << QT_ATTN_DQ | 1u << QT_ATTN_DK | 1u << QT_ATTN_DV)
                                 : (1u << QT_ATTN_O);
  return wide_table(dev, QT_ATTN_NVIEWS, o->has, written, v, wd_attention_call, o, path, err);
}

/* AVG_BACKWARD writes x, the others y (and MAX's int64 idx, never widened). */
static int wd_pool2d(qt_device *dev, qt_pool_mode mode, const qt_pool_geom *g, const qt_view *x,
                   const qt_view *y, const qt_view *idx, qt_err *err) {
  if (!wide_any(x, y, NULL, NULL)) return dev->native->pool2d(dev, mode, g, x, y, idx, err);
  bool back = mode == QT_POOL_AVG_BACKWARD;
  WIDEN_BODY(2, (back ? OUT(0, x) : IN(0, x)) || (back ? IN(1, y) : OUT(1, y)),
             dev->native->pool2d(dev, mode, g, V(0), V(1), idx, err), PUT(back ? 0 : 1))
}

static int wd_random(qt_device *dev, qt_random_kind kind, const qt_view *dst, uint64_t seed,
                     uint64_t offset, qt_scalar lo, qt_scalar hi, qt_err *err) {
  if (!wide_any(dst, NULL, NULL, NULL))
    return dev->native->random(dev, kind, dst, seed, offset, lo, hi, err);
  /* A uniform draw in [0, 1) would round up to 1 from the top 2^-12 (float16) or 2^-9
  ** (bfloat16) of the range: those go to the largest 16-bit value below 1 instead. */
  double below_one = 1.0 - ldexp(1.0, -qt_dtype_digits(dst->dtype));
  WIDEN_BODY(1, OUT(0, dst),
             dev->native->random(dev, kind, V(0), seed, offset, lo, hi, err) ||
                 (kind == QT_RAND_UNIFORM &&
                  dev->native->binary_scalar(dev, QT_MINIMUM, V(0), V(0),
                                             qt_scalar_from_double(below_one), false, err)),
             PUT(0))
}

static int wd_scan(qt_device *dev, qt_scanop op, const qt_view *dst, const qt_view *indices,
                   const qt_view *src, int dim, qt_err *err) {
  if (!wide_any(dst, src, NULL, NULL)) return dev->native->scan(dev, op, dst, indices, src, dim, err);
  WIDEN_BODY(2, OUT(0, dst) || IN(1, src),
             dev->native->scan(dev, op, V(0), indices, V(1), dim, err), PUT(0))
}

static int wd_softmax(qt_device *dev, bool log, const qt_view *dst, const qt_view *src, int dim,
                      qt_err *err) {
  if (!wide_any(dst, src, NULL, NULL)) return dev->native->softmax(dev, log, dst, src, dim, err);
  WIDEN_BODY(2, OUT(0, dst) || IN(1, src),
             dev->native->softmax(dev, log, V(0), V(1), dim, err), PUT(0))
}

static int wd_sort(qt_device *dev, const qt_view *values, const qt_view *indices,
                   const qt_view *src, bool descending, qt_err *err) {
  if (!wide_any(values, src, NULL, NULL))
    return dev->native->sort(dev, values, indices, src, descending, err);
  WIDEN_BODY(2, OUT(0, values) || IN(1, src),
             dev->native->sort(dev, V(0), indices, V(1), descending, err), PUT(0))
}

static int wd_topk(qt_device *dev, const qt_view *values, const qt_view *indices,
                   const qt_view *src, int64_t k, bool largest, qt_err *err) {
  if (!wide_any(values, src, NULL, NULL))
    return dev->native->topk(dev, values, indices, src, k, largest, err);
  WIDEN_BODY(2, OUT(0, values) || IN(1, src),
             dev->native->topk(dev, V(0), indices, V(1), k, largest, err), PUT(0))
}

static int wd_unique(qt_device *dev, const qt_view *uniques, const qt_view *inverse,
                     const qt_view *counts, const qt_view *sorted, const qt_view *perm,
                     int64_t *count, qt_err *err) {
  if (!wide_any(uniques, sorted, NULL, NULL))
    return dev->native->unique(dev, uniques, inverse, counts, sorted, perm, count, err);
  WIDEN_BODY(2, OUT(0, uniques) || IN(1, sorted),
             dev->native->unique(dev, V(0), inverse, counts, V(1), perm, count, err), PUT(0))
}

static int wd_bincount(qt_device *dev, const qt_view *dst, const qt_view *src,
                       const qt_view *weights, qt_err *err) {
  if (!wide_any(dst, weights, NULL, NULL)) return dev->native->bincount(dev, dst, src, weights, err);
  /* the slot adds into dst, which the core has zeroed: it is read too */
  WIDEN_BODY(2, IN(0, dst) || IN(1, weights),
             dev->native->bincount(dev, V(0), src, V(1), err), PUT(0))
}

static int wd_histc(qt_device *dev, const qt_view *dst, const qt_view *src, double lo, double hi,
                    qt_err *err) {
  if (!wide_any(dst, src, NULL, NULL)) return dev->native->histc(dev, dst, src, lo, hi, err);
  WIDEN_BODY(2, OUT(0, dst) || IN(1, src), dev->native->histc(dev, V(0), V(1), lo, hi, err),
             PUT(0))
}

static int wd_searchsorted(qt_device *dev, const qt_view *dst, const qt_view *sorted,
                           const qt_view *values, bool right, qt_err *err) {
  if (!wide_any(sorted, values, NULL, NULL))
    return dev->native->searchsorted(dev, dst, sorted, values, right, err);
  WIDEN_BODY(2, IN(0, sorted) || IN(1, values),
             dev->native->searchsorted(dev, dst, V(0), V(1), right, err), 0)
}

#undef V
#undef IN
#undef OUT
#undef PUT
#undef WIDEN_BODY

/* ---------------------------------------------------------------- the tables */

/* One widened table per native table (the CPU's, the CUDA device's: a handful). */
#define WIDEN_MAX_TABLES 8
static struct { const qt_device_iface *native; qt_device_iface wide; } widen_tables[WIDEN_MAX_TABLES];
static int widen_ntables = 0;
static pthread_mutex_t widen_lock = PTHREAD_MUTEX_INITIALIZER;

/* Puts each element slot's stand-in wd_<name> where the device has that slot and no 16-bit
** code of its own (device.h's QT_SLOT_LIST: a new element slot without its stand-in here
** does not compile). */
#define WIDEN_ROW_(P, E, name, kind, ...) WIDEN_ROW_##kind(E, name)
#define WIDEN_ROW_ELEM(E, name) \
  if (t->name != NULL && !(t->half_native & QT_SLOT_BIT(QT_SLOT_##E))) t->name = wd_##name;
#define WIDEN_ROW_MEM(E, name)
#define WIDEN_ROW_ALL16(E, name)
#define WIDEN_ROW_USER(E, name)
static void widen_fill(qt_device_iface *t) { QT_SLOT_LIST(WIDEN_ROW_, ~) }

const qt_device_iface *qt_widen_iface(const qt_device_iface *native) {
  const qt_device_iface *found = NULL;
  pthread_mutex_lock(&widen_lock);
  for (int k = 0; k < widen_ntables && found == NULL; k++)
    if (widen_tables[k].native == native) found = &widen_tables[k].wide;
  if (found == NULL && widen_ntables < WIDEN_MAX_TABLES) {
    widen_tables[widen_ntables].native = native;
    widen_tables[widen_ntables].wide = *native;
    widen_fill(&widen_tables[widen_ntables].wide);
    found = &widen_tables[widen_ntables++].wide;
  }
  pthread_mutex_unlock(&widen_lock);
  return found != NULL ? found : native;
}
