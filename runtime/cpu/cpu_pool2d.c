/*
** cpu_pool2d.c — the CPU device's pooling slot (device.h's pool2d): max pooling with the
** maxima's positions, average pooling and its backward, in float32 and float64 (16-bit ones
** through widen.c). The pool takes chunks of planes, about CPU_POOL_GRAIN input elements
** each, so no two chunks write one element; the average's backward adds each output's share
** into its window, plane by plane.
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "device.h"
#include "tensor.h"

enum { CPU_POOL_GRAIN = 1 << 15 };

/* One output position's window along one axis (cpu_pool_span): the same for every plane,
** so computed once per call. */
typedef struct cpu_pool_win {
  int64_t start, lo, hi, padded, inside;
} cpu_pool_win;

typedef struct cpu_pool_job {
  qt_pool_mode mode;
  const qt_pool_geom *g;
  const qt_view *x, *y, *idx;
  int64_t planes_per_chunk;
  const cpu_pool_win *rows, *cols;   /* p and q windows */
} cpu_pool_job;

/* The window of output (i, j) along one axis: taps [lo, hi) of the kernel inside the input,
** and the divisor's extent (clipped to the padded input, or to the input). */
static void cpu_pool_span(const qt_pool_geom *g, int a, int64_t o, int64_t *start,
                          int64_t *lo, int64_t *hi, int64_t *padded, int64_t *inside) {
  int64_t n = a == 0 ? g->h : g->w, s = o * g->stride[a] - g->pad[a], d = g->dilation[a];
  *start = s;
  *lo = 0;
  while (*lo < g->kernel[a] && s + *lo * d < 0) (*lo)++;
  *hi = g->kernel[a];
  while (*hi > *lo && s + (*hi - 1) * d >= n) (*hi)--;
  int64_t e = s + g->kernel[a] < n + g->pad[a] ? s + g->kernel[a] : n + g->pad[a];
  *padded = e - s;
  *inside = (e < n ? e : n) - (s > 0 ? s : 0);
}

static double cpu_pool_divisor(const qt_pool_geom *g, const int64_t *pad_ext, const int64_t *in_ext) {
  if (g->divisor_override > 0) return (double)g->divisor_override;
  return g->count_include_pad ? (double)(pad_ext[0] * pad_ext[1]) : (double)(in_ext[0] * in_ext[1]);
}

#define CPU_POOL_FUNCS(SFX, T, U)                                                                \
  static void cpu_pool_planes_##SFX(void *arg, int64_t chunk) {                               \
    const cpu_pool_job *job = arg;                                                            \
    const qt_pool_geom *g = job->g;                                                           \
    int64_t p0 = chunk * job->planes_per_chunk, p1 = p0 + job->planes_per_chunk;              \
    if (p1 > g->planes) p1 = g->planes;                                                       \
    int64_t hw = g->h * g->w, pq = g->p * g->q, dh = g->dilation[0], dw = g->dilation[1];     \
    for (int64_t pl = p0; pl < p1; pl++) {                                                    \
      T *x = (T *)job->x->data + pl * hw, *y = (T *)job->y->data + pl * pq;                   \
      int64_t *idx = job->idx != NULL ? (int64_t *)job->idx->data + pl * pq : NULL;           \
      if (job->mode == QT_POOL_AVG_BACKWARD) memset(x, 0, (size_t)hw * sizeof(T));            \
      for (int64_t i = 0; i < g->p; i++) {                                                    \
        const cpu_pool_win *r = &job->rows[i];                                                \
        for (int64_t j = 0; j < g->q; j++) {                                                  \
          const cpu_pool_win *c = &job->cols[j];                                              \
          int64_t o = i * g->q + j;                                                           \
          if (job->mode == QT_POOL_MAX) {                                                     \
            T best = -(T)INFINITY;                                                            \
            int64_t at = (r->start + r->lo * dh) * g->w + c->start + c->lo * dw;              \
            for (int64_t a = r->lo; a < r->hi; a++) {                                         \
              int64_t rowat = (r->start + a * dh) * g->w;                                     \
              const T *row = x + rowat;                                                       \
              for (int64_t b = c->lo; b < c->hi; b++) {                                       \
                int64_t col = c->start + b * dw;                                              \
                T val = row[col];                                                             \
                /* selected by masks, not a branch: on real data which tap wins is a coin    \
                ** toss, and a mispredicted branch per tap was most of the time */           \
                unsigned cond = (unsigned)(val > best) | (unsigned)(val != val);              \
                U take = (U)0 - (U)cond, bv, vv;                                              \
                uint64_t take64 = (uint64_t)0 - (uint64_t)cond;                               \
                memcpy(&bv, &best, sizeof bv);                                                \
                memcpy(&vv, &val, sizeof vv);                                                 \
                bv = (bv & ~take) | (vv & take);                                              \
                memcpy(&best, &bv, sizeof bv);                                                \
                at = (int64_t)(((uint64_t)at & ~take64) | ((uint64_t)(rowat + col) & take64)); \
              }                                                                               \
            }                                                                                 \
            y[o] = best;                                                                      \
            if (idx != NULL) idx[o] = at + 1;                                                 \
            continue;                                                                         \
          }                                                                                   \
          int64_t ext_p[2] = {r->padded, c->padded}, ext_i[2] = {r->inside, c->inside};       \
          double div = cpu_pool_divisor(g, ext_p, ext_i);                                     \
          int64_t hs = r->start, ws = c->start;                                               \
          if (job->mode == QT_POOL_AVG) {                                                     \
            double s = 0;                                                                     \
            for (int64_t a = r->lo; a < r->hi; a++)                                           \
              for (int64_t b = c->lo; b < c->hi; b++) s += x[(hs + a) * g->w + ws + b];       \
            y[o] = (T)(s / div);                                                              \
          } else {                                                                            \
            T share = (T)((double)y[o] / div);                                                \
            for (int64_t a = r->lo; a < r->hi; a++)                                           \
              for (int64_t b = c->lo; b < c->hi; b++) x[(hs + a) * g->w + ws + b] += share;   \
          }                                                                                   \
        }                                                                                     \
      }                                                                                       \
    }                                                                                         \
  }
CPU_POOL_FUNCS(f32, float, uint32_t)
CPU_POOL_FUNCS(f64, double, uint64_t)
#undef CPU_POOL_FUNCS

int cpu_pool2d(qt_device *dev, qt_pool_mode mode, const qt_pool_geom *g, const qt_view *x,
               const qt_view *y, const qt_view *idx, qt_err *err) {
  (void)dev;
  qt_dtype dt = x->dtype;
  if (dt != QT_F32 && dt != QT_F64)
    return qt_errorf(err, "pool2d: float32 or float64 expected, got %s", qt_dtypes[dt].name);
  int64_t plane = g->h * g->w > 0 ? g->h * g->w : 1;
  cpu_pool_job job = {mode, g, x, y, mode == QT_POOL_MAX ? idx : NULL, 1, NULL, NULL};
  job.planes_per_chunk = plane >= CPU_POOL_GRAIN ? 1 : CPU_POOL_GRAIN / plane;
  int64_t chunks = (g->planes + job.planes_per_chunk - 1) / job.planes_per_chunk;
  void (*fn)(void *, int64_t) = dt == QT_F64 ? cpu_pool_planes_f64 : cpu_pool_planes_f32;
  cpu_pool_win *wins = malloc((size_t)(g->p + g->q + 1) * sizeof *wins);
  if (wins == NULL) return qt_errorf(err, "pool2d: out of host memory for %lld windows", (long long)(g->p + g->q));
  for (int64_t i = 0; i < g->p; i++) {
    cpu_pool_win *r = &wins[i];
    cpu_pool_span(g, 0, i, &r->start, &r->lo, &r->hi, &r->padded, &r->inside);
  }
  for (int64_t j = 0; j < g->q; j++) {
    cpu_pool_win *c = &wins[g->p + j];
    cpu_pool_span(g, 1, j, &c->start, &c->lo, &c->hi, &c->padded, &c->inside);
  }
  job.rows = wins;
  job.cols = wins + g->p;
  if (chunks <= 1) {
    for (int64_t k = 0; k < chunks; k++) fn(&job, k);
  } else {
    cpu_parallel(chunks, fn, &job);
  }
  free(wins);
  return 0;
}
