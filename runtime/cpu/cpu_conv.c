/*
** cpu_conv.c — the CPU device's convolution slot (device.h's conv): forward, the input's
** gradient and the filters' gradient of a 2-D NCHW convolution with groups, strides,
** symmetric padding and dilation, in float32 and float64 (16-bit ones through widen.c).
**
** Lowered to products, image by image and group by group: im2col lays the receptive fields
** out as a (c/groups * r * s) x (p * q) matrix, one OpenBLAS GEMM with the filters makes the
** output (forward), the filters' transpose times dy makes the columns that col2im adds back
** into the input's gradient (backward data), and dy times the columns' transpose, summed
** over the images, is the filters' gradient (backward filter). A 1x1 filter with stride 1
** and no padding needs no columns: the image is its own matrix. im2col and col2im run on
** the pool when an image's columns are large (by column row, by channel: no two chunks
** write one element), inline when small; each GEMM gets OpenBLAS's threads for its size
** (cpu_blas_enter).
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "device.h"
#include "tensor.h"

typedef struct cpu_conv_job {
  const qt_conv_geom *g;
  const void *x;        /* im2col: the image's first channel of the group */
  void *dx;             /* col2im: likewise, written */
  void *col;            /* (cg * r * s) x (p * q) */
  int64_t cg;           /* channels per group */
} cpu_conv_job;

#define CPU_CONV_FUNCS(SFX, T)                                                              \
  /* one row of the columns: channel c, filter tap (i, j) */                                \
  static void cpu_im2col_##SFX(void *arg, int64_t row) {                                    \
    const cpu_conv_job *job = arg;                                                          \
    const qt_conv_geom *g = job->g;                                                         \
    int64_t c = row / (g->r * g->s), i = row / g->s % g->r, j = row % g->s;                 \
    const T *x = (const T *)job->x + c * g->h * g->w;                                       \
    T *out = (T *)job->col + row * g->p * g->q;                                             \
    for (int64_t p = 0; p < g->p; p++, out += g->q) {                                       \
      int64_t ih = p * g->stride[0] - g->pad[0] + i * g->dilation[0];                       \
      if (ih < 0 || ih >= g->h) {                                                           \
        memset(out, 0, (size_t)g->q * sizeof(T));                                           \
        continue;                                                                           \
      }                                                                                     \
      const T *xr = x + ih * g->w;                                                          \
      int64_t iw = j * g->dilation[1] - g->pad[1], st = g->stride[1];                       \
      for (int64_t q = 0; q < g->q; q++, iw += st) out[q] = iw >= 0 && iw < g->w ? xr[iw] : 0; \
    }                                                                                       \
  }                                                                                         \
  /* every row of channel c added back into dx's channel c */                               \
  static void cpu_col2im_##SFX(void *arg, int64_t c) {                                      \
    const cpu_conv_job *job = arg;                                                          \
    const qt_conv_geom *g = job->g;                                                         \
    T *dx = (T *)job->dx + c * g->h * g->w;                                                 \
    memset(dx, 0, (size_t)(g->h * g->w) * sizeof(T));                                       \
    for (int64_t i = 0; i < g->r; i++)                                                      \
      for (int64_t j = 0; j < g->s; j++) {                                                  \
        const T *in = (const T *)job->col + ((c * g->r + i) * g->s + j) * g->p * g->q;      \
        for (int64_t p = 0; p < g->p; p++, in += g->q) {                                    \
          int64_t ih = p * g->stride[0] - g->pad[0] + i * g->dilation[0];                   \
          if (ih < 0 || ih >= g->h) continue;                                               \
          T *dr = dx + ih * g->w;                                                           \
          int64_t iw = j * g->dilation[1] - g->pad[1], st = g->stride[1];                   \
          for (int64_t q = 0; q < g->q; q++, iw += st)                                      \
            if (iw >= 0 && iw < g->w) dr[iw] += in[q];                                      \
        }                                                                                   \
      }                                                                                     \
  }
CPU_CONV_FUNCS(f32, float)
CPU_CONV_FUNCS(f64, double)
#undef CPU_CONV_FUNCS

/* c = a @ b (+ c when accumulate), row-major, with a and b transposed as asked. */
static void cpu_conv_gemm(const cpu_blas_api *blas, bool f64, bool ta, bool tb, int64_t m,
                          int64_t n, int64_t k, const void *a, const void *b, void *c,
                          bool accumulate) {
  int lda = (int)(ta ? m : k), ldb = (int)(tb ? k : n);
  int oa = ta ? CPU_CBLAS_TRANS : CPU_CBLAS_NO_TRANS, ob = tb ? CPU_CBLAS_TRANS : CPU_CBLAS_NO_TRANS;
  if (f64)
    blas->dgemm(CPU_CBLAS_ROW_MAJOR, oa, ob, (int)m, (int)n, (int)k, 1.0, a, lda, b, ldb,
                accumulate ? 1.0 : 0.0, c, (int)n);
  else
    blas->sgemm(CPU_CBLAS_ROW_MAJOR, oa, ob, (int)m, (int)n, (int)k, 1.0f, a, lda, b, ldb,
                accumulate ? 1.0f : 0.0f, c, (int)n);
}

int cpu_conv(qt_device *dev, qt_conv_mode mode, const qt_conv_geom *g, const qt_view *x,
             const qt_view *w, const qt_view *y, qt_err *err) {
  (void)dev;
  qt_dtype dt = x->dtype;
  if ((dt != QT_F32 && dt != QT_F64) || w->dtype != dt || y->dtype != dt)
    return qt_errorf(err, "conv: float32 or float64 operands of one dtype expected");
  bool f64 = dt == QT_F64;
  size_t es = qt_elsize(dt);
  int64_t cg = g->c / g->groups, kg = g->k / g->groups;
  int64_t rows = cg * g->r * g->s, pq = g->p * g->q, hw = g->h * g->w;
  if (rows > INT32_MAX || pq > INT32_MAX || kg > INT32_MAX)
    return qt_errorf(err, "conv: a %lld x %lld product is too large for BLAS", (long long)rows,
                     (long long)pq);
  if (g->n == 0 || g->k == 0 || pq == 0 || (mode != QT_CONV_FORWARD && hw == 0) || rows == 0) {
    /* nothing to sum: every written element is 0 */
    const qt_view *out = mode == QT_CONV_FORWARD ? y : mode == QT_CONV_BACKWARD_DATA ? x : w;
    memset(out->data, 0, (size_t)out->numel * es);
    return 0;
  }
  bool direct = g->r == 1 && g->s == 1 && g->stride[0] == 1 && g->stride[1] == 1 &&
                g->pad[0] == 0 && g->pad[1] == 0;   /* p = h, q = w: the image is the matrix */
  const cpu_blas_api *blas = cpu_blas_get(err);
  if (blas == NULL) return -1;
  void *col = NULL;
  if (!direct || mode == QT_CONV_BACKWARD_DATA) {
    col = malloc((size_t)rows * (size_t)pq * es);
    if (col == NULL)
      return qt_errorf(err, "conv: out of memory for a %lld x %lld column matrix",
                       (long long)rows, (long long)pq);
  }
  void (*im2col)(void *, int64_t) = f64 ? cpu_im2col_f64 : cpu_im2col_f32;
  void (*col2im)(void *, int64_t) = f64 ? cpu_col2im_f64 : cpu_col2im_f32;
  double mnk = (double)kg * (double)pq * (double)rows;
  /* the columns of one image and group on the pool only when they are worth waking it:
  ** a small network's images (a few thousand elements) would pay a dispatch per image */
  bool pooled = rows * pq >= 2 * CPU_PAR_GRAIN;
  int restore = cpu_blas_enter(mnk);
  for (int64_t n = 0; n < g->n; n++)
    for (int64_t grp = 0; grp < g->groups; grp++) {
      char *xs = (char *)x->data + (size_t)((n * g->c + grp * cg) * hw) * es;
      char *ys = (char *)y->data + (size_t)((n * g->k + grp * kg) * pq) * es;
      char *ws = (char *)w->data + (size_t)(grp * kg * rows) * es;
      cpu_conv_job job = {g, xs, xs, col, cg};
      if (mode == QT_CONV_FORWARD || mode == QT_CONV_BACKWARD_FILTER) {
        const void *cols = xs;
        if (!direct) {
          if (pooled) cpu_parallel(rows, im2col, &job);
          else for (int64_t r = 0; r < rows; r++) im2col(&job, r);
          cols = col;
        }
        if (mode == QT_CONV_FORWARD)   /* y (kg x pq) = w (kg x rows) @ cols (rows x pq) */
          cpu_conv_gemm(blas, f64, false, false, kg, pq, rows, ws, cols, ys, false);
        else                           /* dw (kg x rows) += dy (kg x pq) @ cols^T */
          cpu_conv_gemm(blas, f64, false, true, kg, rows, pq, ys, cols, ws, n > 0);
      } else {                         /* cols (rows x pq) = w^T @ dy, added back into dx */
        cpu_conv_gemm(blas, f64, true, false, rows, pq, kg, ws, ys, col, false);
        if (direct) memcpy(xs, col, (size_t)(cg * hw) * es);
        else if (pooled) cpu_parallel(cg, col2im, &job);
        else for (int64_t c = 0; c < cg; c++) col2im(&job, c);
      }
    }
  cpu_blas_leave(restore);
  free(col);
  return 0;
}
