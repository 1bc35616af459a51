/*
** cpu_mask.c — the CPU device's mask slots: where (which also serves masked_fill_),
** masked_select and nonzero (device.h: every mask is bool, 0 or 1 in each byte).
**
** None of them converts a value: where and masked_select move elements as raw 1-, 4- or
** 8-byte words (every dtype of the list is one of those sizes), so their rows are per
** element size, as cpu_index.c's. where runs through cpu_walk with its four views;
** masked_select and nonzero append to a contiguous result in row-major order, which the
** walker's row functions cannot carry between rows, so they walk the rows here. The CUDA
** twins are in kernels/mask.cu.
*/
#include <stdint.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "device.h"
#include "tensor.h"

/* The same vectorizer settings as cpu_elementwise.c's rows (see there): the where rows are
** the same kind of loop. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif

/* The widths: X(P, name, word type). */
#define CPU_MASK_WIDTHS(X, P) \
  X(P, 8bit, uint8_t) X(P, 16bit, uint16_t) X(P, 32bit, uint32_t) X(P, 64bit, uint64_t)

static int cpu_mask_width(qt_dtype d) {
  switch (qt_elsize(d)) {
    case 1: return 0;
    case 2: return 1;
    case 4: return 2;
    case 8: return 3;
    default: return -1;
  }
}

/* ====================================================================== where */

/* where rows: p = { dst, cond (bool), a, b }; a scalar a or b is a stride-0 view. The first
** branch is what where(cond, x, 0) and masked_fill_ run: dense dst and cond, each of a and
** b dense or one value. */
#define CPU_WHERE_ROW(NAME, W)                                                           \
  CPU_MULTIVERSION static void NAME(char **p, const int64_t *s, int64_t n, const cpu_args *args) {        \
    (void)args;                                                                          \
    W *d = (W *)p[0];                                                                    \
    const uint8_t *c = (const uint8_t *)p[1];                                            \
    const W *a = (const W *)p[2], *b = (const W *)p[3];                                  \
    int64_t sd = s[0], sc = s[1], sa = s[2], sb = s[3];                                  \
    if (sd == 1 && sc == 1 && sa == 1 && sb == 1) {                                      \
      for (int64_t i = 0; i < n; i++) d[i] = c[i] ? a[i] : b[i];                         \
    } else if (sd == 1 && sc == 1 && sa == 1 && sb == 0) {                               \
      const W y = b[0];                                                                  \
      for (int64_t i = 0; i < n; i++) d[i] = c[i] ? a[i] : y;                            \
    } else if (sd == 1 && sc == 1 && sa == 0 && sb == 1) {                               \
      const W x = a[0];                                                                  \
      for (int64_t i = 0; i < n; i++) d[i] = c[i] ? x : b[i];                            \
    } else {                                                                             \
      for (int64_t i = 0; i < n; i++) d[i * sd] = c[i * sc] ? a[i * sa] : b[i * sb];     \
    }                                                                                    \
  }
#define CPU_WHERE_FN_(P, w, W) CPU_WHERE_ROW(cpu_where_##w, W)
CPU_MASK_WIDTHS(CPU_WHERE_FN_, ~)
#define CPU_WHERE_ENTRY_(P, w, W) cpu_where_##w,
static const cpu_row_fn cpu_where_rows[4] = { CPU_MASK_WIDTHS(CPU_WHERE_ENTRY_, ~) };

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

/* A missing a or b is its value in a stride-0 view of dst's shape. */
int cpu_where(qt_device *dev, const qt_view *dst, const qt_view *cond, const qt_view *a,
              qt_scalar a_value, const qt_view *b, qt_scalar b_value, qt_err *err) {
  (void)dev;
  int w = cpu_dtype_ok(dst->dtype) ? cpu_mask_width(dst->dtype) : -1;
  if (w < 0 || cond->dtype != QT_BOOL || (a != NULL && a->dtype != dst->dtype) ||
      (b != NULL && b->dtype != dst->dtype))
    return qt_errorf(err, "where: the condition must be bool and the values of the result's "
                     "dtype");
  if (cpu_view_numel(dst) == 0) return 0;
  cpu_value av, bv;
  qt_view as, bs;
  if (a == NULL) {
    cpu_value_set(&av, dst->dtype, a_value);
    cpu_view_make(&as, dst, &av, dst->dtype, NULL);
    a = &as;
  }
  if (b == NULL) {
    cpu_value_set(&bv, dst->dtype, b_value);
    cpu_view_make(&bs, dst, &bv, dst->dtype, NULL);
    b = &bs;
  }
  const qt_view *views[4] = { dst, cond, a, b };
  cpu_walk_par(views, 4, cpu_where_rows[w], NULL);
  return 0;
}

/* ====================================================================== compaction */

/* Visits the rows of views collapsed together, as cpu_walk_collapsed does, handing each
** row's pointers and strides (in elements) to the caller's function with its state: the
** compacting rows carry the output position from one row to the next. */
typedef void (*cpu_mask_row_fn)(char **p, const int64_t *s, int64_t n, void *state);

static void cpu_mask_walk(const qt_view *const *views, int nviews, cpu_mask_row_fn row,
                          void *state) {
  qt_view copy[CPU_MAXVIEWS];
  qt_view *v[CPU_MAXVIEWS];
  for (int k = 0; k < nviews; k++) {
    copy[k] = *views[k];
    v[k] = &copy[k];
  }
  qt_views_collapse(v, nviews);
  int nd = v[0]->ndim;
  int64_t numel = cpu_view_numel(v[0]);
  if (numel == 0) return;
  int64_t n = nd > 0 ? v[0]->size[nd - 1] : 1;
  char *p[CPU_MAXVIEWS];
  int64_t inner[CPU_MAXVIEWS], step[CPU_MAXVIEWS][QT_MAXDIM];
  for (int k = 0; k < nviews; k++) {
    int64_t es = (int64_t)qt_elsize(v[k]->dtype);
    p[k] = (char *)v[k]->data;
    inner[k] = nd > 0 ? v[k]->stride[nd - 1] : 0;
    for (int d = 0; d < nd; d++) step[k][d] = v[k]->stride[d] * es;
  }
  int64_t idx[QT_MAXDIM] = {0};
  for (int64_t r = 0, rows = numel / n; r < rows; r++) {
    row(p, inner, n, state);
    for (int d = nd - 2; d >= 0; d--) {
      for (int k = 0; k < nviews; k++) p[k] += step[k][d];
      if (++idx[d] < v[0]->size[d]) break;
      idx[d] = 0;
      for (int k = 0; k < nviews; k++) p[k] -= step[k][d] * v[0]->size[d];
    }
  }
}

/* masked_select rows: p = { src, mask }; the state is where the next kept element goes and
** where dst ends. Each element is stored and the output moves on only when the mask says
** so (no branch on the mask); once dst is full every later mask is false (dst holds the
** count), and the row stops before storing past the end. */
typedef struct cpu_select_state {
  char *out, *end;
} cpu_select_state;

#define CPU_SELECT_ROW(NAME, W)                                                          \
  static void NAME(char **p, const int64_t *s, int64_t n, void *state) {                 \
    cpu_select_state *st = (cpu_select_state *)state;                                    \
    W *o = (W *)st->out, *end = (W *)st->end;                                            \
    const W *x = (const W *)p[0];                                                        \
    const uint8_t *m = (const uint8_t *)p[1];                                            \
    int64_t sx = s[0], sm = s[1];                                                        \
    for (int64_t i = 0; i < n && o < end; i++) {                                         \
      *o = x[i * sx];                                                                    \
      o += m[i * sm];                                                                    \
    }                                                                                    \
    st->out = (char *)o;                                                                 \
  }
#define CPU_SELECT_FN_(P, w, W) CPU_SELECT_ROW(cpu_select_##w, W)
CPU_MASK_WIDTHS(CPU_SELECT_FN_, ~)
#define CPU_SELECT_ENTRY_(P, w, W) cpu_select_##w,
static const cpu_mask_row_fn cpu_select_rows[4] = { CPU_MASK_WIDTHS(CPU_SELECT_ENTRY_, ~) };

int cpu_masked_select(qt_device *dev, const qt_view *dst, const qt_view *src,
                      const qt_view *mask, qt_err *err) {
  (void)dev;
  int w = cpu_dtype_ok(src->dtype) ? cpu_mask_width(src->dtype) : -1;
  if (w < 0 || mask->dtype != QT_BOOL || dst->dtype != src->dtype || dst->ndim != 1 ||
      (dst->size[0] > 1 && dst->stride[0] != 1))
    return qt_errorf(err, "masked_select: the mask must be bool and the result 1-D, "
                     "contiguous, of the source's dtype");
  cpu_select_state st;
  st.out = (char *)dst->data;
  st.end = st.out + (size_t)dst->size[0] * qt_elsize(dst->dtype);
  const qt_view *views[2] = { src, mask };
  cpu_mask_walk(views, 2, cpu_select_rows[w], &st);
  return 0;
}

/* Row by row over the mask's own (uncollapsed) dims, so that each true element's position
** is at hand: the outer dims' counters and the position in the row. */
int cpu_nonzero(qt_device *dev, const qt_view *dst, const qt_view *mask, qt_err *err) {
  (void)dev;
  int nd = mask->ndim;
  if (mask->dtype != QT_BOOL || dst->dtype != QT_I64 || dst->ndim != 2 || nd < 1 ||
      dst->size[1] != nd)
    return qt_errorf(err, "nonzero: the mask must be bool with dims and the result n x ndim "
                     "int64");
  int64_t numel = cpu_view_numel(mask);
  if (numel == 0) return 0;
  int64_t n = mask->size[nd - 1], s = mask->stride[nd - 1];
  int64_t *o = (int64_t *)dst->data, *end = o + dst->size[0] * nd;
  const uint8_t *p = (const uint8_t *)mask->data;
  int64_t idx[QT_MAXDIM] = {0};
  for (int64_t r = 0, rows = numel / n; r < rows && o < end; r++) {
    for (int64_t i = 0; i < n; i++) {
      if (!p[i * s]) continue;
      if (o >= end) break;
      for (int d = 0; d < nd - 1; d++) o[d] = idx[d] + 1;
      o[nd - 1] = i + 1;
      o += nd;
    }
    for (int d = nd - 2; d >= 0; d--) {
      p += mask->stride[d];
      if (++idx[d] < mask->size[d]) break;
      idx[d] = 0;
      p -= mask->stride[d] * mask->size[d];
    }
  }
  return 0;
}
