/*
** cpu_scan.c — the CPU device's scan and softmax slots: cumsum, cumprod, cummax, cummin,
** logcumsumexp, softmax and log_softmax along a dim (device.h). The CUDA twins are
** kernels/scan.cu and kernels/scan_softmax.cu; the core (runtime/core/ops_scan.c) casts and makes
** every view contiguous first, so a view here is outer x n x inner elements in row-major
** order, the scan running along n.
**
** The loops walk memory in order (outer, then n, then inner), each of the inner columns
** carrying its running value: in a buffer of `inner` accumulators for the sums, products and
** logcumsumexp (float32 accumulates in double, as PyTorch's CPU does), and in the previous
** row of the result itself for cummax and cummin, whose values are copies (exact in any
** dtype). Softmax is the reference formula: the max (NaN wins), the sum of exp(x - max),
** then exp(x - max) / sum or x - max - log(sum); in double, except float32 rows of up to
** CPU_SOFTMAX_BLOCK elements, which run in float (as on the GPU) with a vector exp.
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "cpu/cpu_internal.h"
#include "device.h"
#include "tensor.h"

/* A contiguous view as outer x n x inner around dim (a 0-d view is one element). */
static void cpu_scan_shape(const qt_view *v, int dim, int64_t *outer, int64_t *n,
                           int64_t *inner) {
  *outer = 1, *n = 1, *inner = 1;
  for (int d = 0; d < v->ndim; d++) {
    if (d < dim) *outer *= v->size[d];
    else if (d == dim) *n = v->size[d];
    else *inner *= v->size[d];
  }
}

/* PyTorch's log-add-exp of two values: NaN propagates, two equal infinities give that
** infinity, anything else max + log1p(exp(min - max)). */
static double cpu_logaddexp(double a, double b) {
  if (a != a || b != b) return a + b;
  double lo = a < b ? a : b, hi = a < b ? b : a;
  if (lo == hi && isinf(lo)) return a;
  return hi + log1p(exp(lo - hi));
}

/* ====================================================================== sums, products */

/* One scan of T accumulating in A: STEP(acc, x) combines, OUT(acc) converts back. acc holds
** `inner` accumulators. */
#define CPU_SCAN_LOOP(T, A, STEP)                                                        \
  do {                                                                                   \
    const T *x = (const T *)src;                                                         \
    T *y = (T *)dst;                                                                     \
    for (int64_t o = 0; o < outer; o++) {                                                \
      const T *xs = x + o * n * inner;                                                   \
      T *ys = y + o * n * inner;                                                         \
      for (int64_t i = 0; i < inner; i++) acc[i] = (A)xs[i], ys[i] = (T)acc[i];          \
      for (int64_t k = 1; k < n; k++) {                                                  \
        const T *xr = xs + k * inner;                                                    \
        T *yr = ys + k * inner;                                                          \
        for (int64_t i = 0; i < inner; i++) {                                            \
          acc[i] = STEP(acc[i], (A)xr[i]);                                               \
          yr[i] = (T)acc[i];                                                             \
        }                                                                                \
      }                                                                                  \
    }                                                                                    \
  } while (0)

#define CPU_ADD(a, b) ((a) + (b))
#define CPU_MUL(a, b) ((a) * (b))

/* Floats in double (float32 and float64 alike), int64 through uint64 (wrapping). */
static void cpu_scan_f64acc(qt_scanop op, qt_dtype dtype, const void *src, void *dst,
                            double *acc, int64_t outer, int64_t n, int64_t inner) {
  if (dtype == QT_F32) {
    if (op == QT_CUMSUM) CPU_SCAN_LOOP(float, double, CPU_ADD);
    else if (op == QT_CUMPROD) CPU_SCAN_LOOP(float, double, CPU_MUL);
    else CPU_SCAN_LOOP(float, double, cpu_logaddexp);
  } else {
    if (op == QT_CUMSUM) CPU_SCAN_LOOP(double, double, CPU_ADD);
    else if (op == QT_CUMPROD) CPU_SCAN_LOOP(double, double, CPU_MUL);
    else CPU_SCAN_LOOP(double, double, cpu_logaddexp);
  }
}

static void cpu_scan_i64(qt_scanop op, const void *src, void *dst, uint64_t *acc,
                         int64_t outer, int64_t n, int64_t inner) {
  if (op == QT_CUMSUM) CPU_SCAN_LOOP(int64_t, uint64_t, CPU_ADD);
  else CPU_SCAN_LOOP(int64_t, uint64_t, CPU_MUL);
}

/* ====================================================================== cummax, cummin */

/* Element k takes x[k] when it is NaN, or when the best so far is not NaN and x[k] is at
** least as good (CMP: >= for max, <= for min: equal values move to the later position).
** The best so far is the previous row of the result. */
#define CPU_EXTREME_FN(NAME, T, ISNAN, CMP)                                             \
  static void NAME(const void *src, void *dst, int64_t *ix, int64_t outer, int64_t n,    \
                   int64_t inner) {                                                     \
    const T *x = (const T *)src;                                                         \
    T *y = (T *)dst;                                                                     \
    for (int64_t o = 0; o < outer; o++) {                                                \
      int64_t base = o * n * inner;                                                      \
      for (int64_t i = 0; i < inner; i++) y[base + i] = x[base + i], ix[base + i] = 1;   \
      for (int64_t k = 1; k < n; k++) {                                                  \
        for (int64_t i = 0; i < inner; i++) {                                            \
          int64_t p = base + k * inner + i, q = p - inner;                               \
          T c = x[p], b = y[q];                                                          \
          int take = ISNAN(c) || (!ISNAN(b) && c CMP b);                                 \
          y[p] = take ? c : b;                                                           \
          ix[p] = take ? k + 1 : ix[q];                                                  \
        }                                                                                \
      }                                                                                  \
    }                                                                                    \
  }

#define CPU_ISNAN_FLOAT(v) ((v) != (v))
#define CPU_ISNAN_INT(v) 0
#define CPU_ISNAN_BOOL(v) 0
#define CPU_EXTREME_FNS_(P, E, sfx, name, T, U, bytes, kind, ...)                            \
  QT_UNLESS_HALF_##kind(CPU_EXTREME_FN(cpu_cummax_##sfx, T, CPU_ISNAN_##kind, >=)        \
                        CPU_EXTREME_FN(cpu_cummin_##sfx, T, CPU_ISNAN_##kind, <=))
QT_DTYPE_LIST(CPU_EXTREME_FNS_, ~)

typedef void (*cpu_extreme_fn)(const void *, void *, int64_t *, int64_t, int64_t, int64_t);
/* (none for the 16-bit floats: widened, device.h) */
#define CPU_EXTREME_ENTRY_(P, E, sfx, name, T, U, bytes, kind, ...) \
  QT_UNLESS_HALF_##kind([E] = {cpu_cummax_##sfx, cpu_cummin_##sfx},)
static const cpu_extreme_fn cpu_extreme_fns[QT_NDTYPES][2] = {
  QT_DTYPE_LIST(CPU_EXTREME_ENTRY_, ~)
};

/* ====================================================================== the scan slot */

static bool cpu_scan_contiguous(const qt_view *v) { return v == NULL || cpu_view_contiguous(v); }

int cpu_scan(qt_device *dev, qt_scanop op, const qt_view *dst, const qt_view *indices,
             const qt_view *src, int dim, qt_err *err) {
  (void)dev;
  const char *name = qt_scanop_name(op);
  qt_dtype d = src->dtype;
  bool extreme = op == QT_CUMMAX || op == QT_CUMMIN;
  bool ok = cpu_dtype_ok(d) && dst->dtype == d && (unsigned)op < (unsigned)QT_NSCANOPS;
  if (ok && extreme) ok = indices != NULL && indices->dtype == QT_I64;
  else if (ok && op == QT_LOGCUMSUMEXP) ok = qt_is_float(d);
  else if (ok) ok = qt_is_float(d) || d == QT_I64;
  if (!ok || !cpu_scan_contiguous(dst) || !cpu_scan_contiguous(src) ||
      !cpu_scan_contiguous(extreme ? indices : NULL) || (dim != 0 && (dim < 0 || dim >= src->ndim)))
    return qt_errorf(err, "%s: unsupported operands (dtype %s, dim %d)", name,
                     cpu_dtype_ok(d) ? qt_dtypes[d].name : "?", dim + 1);
  if (cpu_view_numel(src) == 0) return 0;
  int64_t outer, n, inner;
  cpu_scan_shape(src, dim, &outer, &n, &inner);
  if (extreme) {
    cpu_extreme_fns[d][op == QT_CUMMIN](src->data, dst->data, (int64_t *)indices->data,
                                        outer, n, inner);
    return 0;
  }
  /* one accumulator per inner column: on the stack for rows, else from the heap */
  union { double f; uint64_t i; } one, *acc = &one;
  if (inner > 1) {
    acc = malloc((size_t)inner * sizeof *acc);
    if (acc == NULL) return qt_errorf(err, "%s: out of memory (%lld accumulators)", name,
                                      (long long)inner);
  }
  if (qt_is_float(d))
    cpu_scan_f64acc(op, d, src->data, dst->data, &acc->f, outer, n, inner);
  else
    cpu_scan_i64(op, src->data, dst->data, &acc->i, outer, n, inner);
  if (acc != &one) free(acc);
  return 0;
}

/* ====================================================================== softmax */

#define CPU_SOFTMAX_LOOP(T)                                                              \
  do {                                                                                   \
    const T *x = (const T *)src->data;                                                   \
    T *y = (T *)dst->data;                                                               \
    for (int64_t o = 0; o < outer; o++) {                                                \
      for (int64_t i = 0; i < inner; i++) {                                              \
        const T *xc = x + o * n * inner + i;                                             \
        T *yc = y + o * n * inner + i;                                                   \
        double m = -INFINITY, s = 0;                                                     \
        for (int64_t k = 0; k < n; k++) {                                                \
          double v = xc[k * inner];                                                      \
          if (m == m && (v > m || v != v)) m = v;                                        \
        }                                                                                \
        for (int64_t k = 0; k < n; k++) s += exp((double)xc[k * inner] - m);             \
        double ls = log(s);                                                              \
        for (int64_t k = 0; k < n; k++) {                                                \
          double v = (double)xc[k * inner] - m;                                          \
          yc[k * inner] = (T)(is_log ? v - ls : exp(v) / s);                             \
        }                                                                                \
      }                                                                                  \
    }                                                                                    \
  } while (0)

/* float32 rows (inner == 1, n <= CPU_SOFTMAX_BLOCK): in float, as the GPU computes them,
** with exp four lanes at a time through libmvec (when the build has it) over a block of
** rows at once, so rows of a few elements (a classifier's logits) pay no per-row call;
** blocks of rows run on the pool. The special values come out as the double loop's: a NaN,
** or a +inf (inf - inf), or a row of only -inf makes the row NaN. */
#define CPU_SOFTMAX_BLOCK 4096
#if defined(QLUA_LIBMVEC) && defined(__x86_64__)
#include <emmintrin.h>
__m128 _ZGVbN4v_expf(__m128);
static void cpu_softmax_expf(float *v, int64_t n) {
  int64_t k = 0;
  for (; k + 4 <= n; k += 4) _mm_storeu_ps(v + k, _ZGVbN4v_expf(_mm_loadu_ps(v + k)));
  if (k < n) {   /* the tail, padded: every element goes through the one function */
    float t[4] = {0, 0, 0, 0};
    for (int j = 0; k + j < n; j++) t[j] = v[k + j];
    _mm_storeu_ps(t, _ZGVbN4v_expf(_mm_loadu_ps(t)));
    for (int j = 0; k + j < n; j++) v[k + j] = t[j];
  }
}
#else
static void cpu_softmax_expf(float *v, int64_t n) {
  for (int64_t k = 0; k < n; k++) v[k] = expf(v[k]);
}
#endif

typedef struct cpu_softmax_job {
  const float *x;
  float *y;
  int64_t rows, n, per;   /* per: rows a block */
  bool is_log;
} cpu_softmax_job;

static void cpu_softmax_rows_f32(void *arg, int64_t block) {
  const cpu_softmax_job *job = arg;
  int64_t r0 = block * job->per, r1 = r0 + job->per < job->rows ? r0 + job->per : job->rows;
  int64_t n = job->n;
  const float *x = job->x + r0 * n;
  float *y = job->y + r0 * n;
  float e[CPU_SOFTMAX_BLOCK], mx[CPU_SOFTMAX_BLOCK];
  for (int64_t r = 0; r < r1 - r0; r++) {
    float m = -INFINITY;
    for (int64_t k = 0; k < n; k++) {
      float v = x[r * n + k];
      if (m == m && (v > m || v != v)) m = v;
    }
    mx[r] = m;
    for (int64_t k = 0; k < n; k++) e[r * n + k] = x[r * n + k] - m;
  }
  cpu_softmax_expf(e, (r1 - r0) * n);
  for (int64_t r = 0; r < r1 - r0; r++) {
    double sum = 0;
    for (int64_t k = 0; k < n; k++) sum += e[r * n + k];
    if (job->is_log) {
      float ls = logf((float)sum);
      for (int64_t k = 0; k < n; k++) y[r * n + k] = (x[r * n + k] - mx[r]) - ls;
    } else {
      float inv = (float)(1 / sum);
      for (int64_t k = 0; k < n; k++) y[r * n + k] = e[r * n + k] * inv;
    }
  }
}

int cpu_softmax(qt_device *dev, bool is_log, const qt_view *dst, const qt_view *src, int dim,
                qt_err *err) {
  (void)dev;
  const char *name = is_log ? "log_softmax" : "softmax";
  if (!cpu_dtype_ok(src->dtype) || !qt_is_float(src->dtype) || dst->dtype != src->dtype ||
      !cpu_view_contiguous(src) || !cpu_view_contiguous(dst) ||
      (dim != 0 && (dim < 0 || dim >= src->ndim)))
    return qt_errorf(err, "%s: unsupported operands (a float dtype, contiguous, dim %d)", name,
                     dim + 1);
  if (cpu_view_numel(src) == 0) return 0;
  int64_t outer, n, inner;
  cpu_scan_shape(src, dim, &outer, &n, &inner);
  if (src->dtype == QT_F32 && inner == 1 && n <= CPU_SOFTMAX_BLOCK) {
    cpu_softmax_job job = {(const float *)src->data, (float *)dst->data, outer, n,
                           CPU_SOFTMAX_BLOCK / n, is_log};
    int64_t blocks = (outer + job.per - 1) / job.per;
    if (blocks == 1) cpu_softmax_rows_f32(&job, 0);
    else cpu_parallel(blocks, cpu_softmax_rows_f32, &job);
  } else if (src->dtype == QT_F32) CPU_SOFTMAX_LOOP(float);
  else CPU_SOFTMAX_LOOP(double);
  return 0;
}
