/*
** cpu_conv.c — the CPU device's convolution slot (device.h's conv): forward, the input's
** gradient and the filters' gradient of a 2-D NCHW convolution with groups, strides,
** symmetric padding and dilation, in float32 and float64 (16-bit ones through widen.c).
**
** Lowered to products on tiles: a tile is a band of output rows of one image and group.
** Each tile lays its receptive fields out as a (c/groups * r * s) x (band * q) column matrix
** (im2col, small enough to stay in the core's cache) and makes one single-threaded OpenBLAS
** GEMM with it, and the pool runs the tiles side by side:
**   forward          y[tile] = w @ cols
**   backward data    stride 1: the forward of dy with the filters flipped (a gather);
**                    else cols = w^T @ dy[tile], added back into dx (col2im)
**   backward filter  dw += dy[tile] @ cols^T, summed per chunk of tiles, then over chunks
** A band's input rows overlap only its neighbours' when it is at least (r-1) dilation /
** stride rows tall, so col2im adds the even bands, then the odd ones, and no two tiles
** running at once write one element. A 1x1 filter with stride 1 and no padding needs
** no columns: the image is its own matrix. Chunks depend on the shape only, never on the
** thread count, so every result is the same with any number of threads.
**
** Measured (bench/nn.lua's conv2d_f32_cpu: N=8, 64 -> 64 channels, 56x56, 3x3): a GEMM per
** image with OpenBLAS's threads reached 148 GFLOP/s on the GPU host's 16 cores, the skinny
** products (64 x 3136 x 576) splitting badly and the serial im2col in between; the tiles
** keep every core in its own GEMM. On this 2-core VM forward went from 109 to 167 GFLOP/s
** (a 2048^3 matmul: 210), backward data from 131 to 166 (the flipped form; col2im's 136),
** backward filter from 108 to 145 with 2 MB tiles (512 KB: 126).
*/
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "device.h"
#include "tensor.h"

/* a tile's columns: about this many bytes (a core's share of L2) */
#define CPU_CONV_TILE_BYTES ((size_t)512 << 10)
#define CPU_CONV_FILTER_TILE_BYTES ((size_t)2 << 20)
/* backward filter sums its tiles in at most this many partial filter gradients */
#define CPU_CONV_PARTIALS 64
#define CPU_CONV_PARTIAL_BYTES ((size_t)64 << 20)

typedef struct cpu_conv_job {
  const qt_conv_geom *g;
  const cpu_blas_api *blas;
  qt_conv_mode mode;
  bool f64, direct;
  size_t es;
  int64_t cg, kg, rows, pq, hw;
  int64_t band, bands;      /* output rows per tile; tiles per image and group */
  int64_t phase;            /* backward data: the bands ≡ phase (mod 2); else -1, every band */
  int64_t per;              /* backward filter: tiles per chunk */
  char *x, *w, *y;          /* the views' data */
  char *part;               /* backward filter: one filter gradient per chunk */
  atomic_int oom;           /* a tile's column buffer could not be had */
} cpu_conv_job;

#define CPU_CONV_FUNCS(SFX, T)                                                              \
  /* the columns of output rows [p0, p1) of image plane x (cg channels of h x w) */          \
  static void cpu_im2col_##SFX(const qt_conv_geom *g, int64_t cg, const T *x, int64_t p0,   \
                               int64_t p1, T *col) {                                        \
    int64_t tn = (p1 - p0) * g->q;                                                          \
    for (int64_t c = 0; c < cg; c++)                                                        \
      for (int64_t i = 0; i < g->r; i++)                                                    \
        for (int64_t j = 0; j < g->s; j++) {                                                \
          const T *xc = x + c * g->h * g->w;                                                \
          T *out = col + ((c * g->r + i) * g->s + j) * tn;                                  \
          int64_t iw0 = j * g->dilation[1] - g->pad[1], st = g->stride[1];                  \
          for (int64_t p = p0; p < p1; p++, out += g->q) {                                  \
            int64_t ih = p * g->stride[0] - g->pad[0] + i * g->dilation[0];                 \
            if (ih < 0 || ih >= g->h) {                                                     \
              memset(out, 0, (size_t)g->q * sizeof(T));                                     \
              continue;                                                                     \
            }                                                                               \
            const T *xr = xc + ih * g->w;                                                   \
            int64_t iw = iw0, q = 0;                                                        \
            for (; q < g->q && iw < 0; q++, iw += st) out[q] = 0;                           \
            if (st == 1) {                                                                  \
              int64_t n = g->w - iw < g->q - q ? g->w - iw : g->q - q;                      \
              if (n > 0) {                                                                  \
                memcpy(out + q, xr + iw, (size_t)n * sizeof(T));                            \
                q += n;                                                                     \
                iw += n;                                                                    \
              }                                                                             \
            } else                                                                          \
              for (; q < g->q && iw < g->w; q++, iw += st) out[q] = xr[iw];                 \
            for (; q < g->q; q++) out[q] = 0;                                               \
          }                                                                                 \
        }                                                                                   \
  }                                                                                         \
  /* the columns of output rows [p0, p1) added back into dx's plane */                      \
  static void cpu_col2im_##SFX(const qt_conv_geom *g, int64_t cg, T *dx, int64_t p0,        \
                               int64_t p1, const T *col) {                                  \
    int64_t tn = (p1 - p0) * g->q;                                                          \
    for (int64_t c = 0; c < cg; c++)                                                        \
      for (int64_t i = 0; i < g->r; i++)                                                    \
        for (int64_t j = 0; j < g->s; j++) {                                                \
          T *dc = dx + c * g->h * g->w;                                                     \
          const T *in = col + ((c * g->r + i) * g->s + j) * tn;                             \
          int64_t iw0 = j * g->dilation[1] - g->pad[1], st = g->stride[1];                  \
          int64_t qa = iw0 >= 0 ? 0 : (-iw0 + st - 1) / st;   /* first q inside */          \
          int64_t qb = g->w - 1 - iw0 < 0 ? 0 : (g->w - 1 - iw0) / st + 1;                  \
          if (qb > g->q) qb = g->q;                                                         \
          for (int64_t p = p0; p < p1; p++, in += g->q) {                                   \
            int64_t ih = p * g->stride[0] - g->pad[0] + i * g->dilation[0];                 \
            if (ih < 0 || ih >= g->h) continue;                                             \
            T *dr = dc + ih * g->w + iw0;                                                   \
            for (int64_t q = qa; q < qb; q++) dr[q * st] += in[q];                          \
          }                                                                                 \
        }                                                                                   \
  }
CPU_CONV_FUNCS(f32, float)
CPU_CONV_FUNCS(f64, double)
#undef CPU_CONV_FUNCS

/* c = a @ b (+ c when accumulate), row-major, with a and b transposed as asked and leading
** dimensions given. */
static void cpu_conv_gemm(const cpu_conv_job *job, bool ta, bool tb, int64_t m, int64_t n,
                          int64_t k, const void *a, int64_t lda, const void *b, int64_t ldb,
                          void *c, int64_t ldc, bool accumulate) {
  int oa = ta ? CPU_CBLAS_TRANS : CPU_CBLAS_NO_TRANS, ob = tb ? CPU_CBLAS_TRANS : CPU_CBLAS_NO_TRANS;
  if (job->f64)
    job->blas->dgemm(CPU_CBLAS_ROW_MAJOR, oa, ob, (int)m, (int)n, (int)k, 1.0, a, (int)lda, b,
                     (int)ldb, accumulate ? 1.0 : 0.0, c, (int)ldc);
  else
    job->blas->sgemm(CPU_CBLAS_ROW_MAJOR, oa, ob, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b,
                     (int)ldb, accumulate ? 1.0f : 0.0f, c, (int)ldc);
}

/* One tile: band `band` of image n's group grp; col is its column buffer (NULL when direct).
** Backward filter adds into dw (accumulate) or writes it. */
static void cpu_conv_tile(cpu_conv_job *job, int64_t n, int64_t grp, int64_t band, void *col,
                          char *dw, bool accumulate) {
  const qt_conv_geom *g = job->g;
  size_t es = job->es;
  int64_t p0 = band * job->band, p1 = p0 + job->band < g->p ? p0 + job->band : g->p;
  int64_t tn = (p1 - p0) * g->q, off = p0 * g->q;   /* direct: p = h, q = w, pq = hw */
  char *xs = job->x + (size_t)((n * g->c + grp * job->cg) * job->hw) * es;
  char *ys = job->y + (size_t)((n * g->k + grp * job->kg) * job->pq + off) * es;
  char *ws = job->w + (size_t)(grp * job->kg * job->rows) * es;
  switch (job->mode) {
    case QT_CONV_FORWARD:           /* y (kg x tn) = w (kg x rows) @ cols (rows x tn) */
      if (job->direct)
        cpu_conv_gemm(job, false, false, job->kg, tn, job->rows, ws, job->rows,
                      xs + (size_t)off * es, job->hw, ys, job->pq, false);
      else {
        if (job->f64) cpu_im2col_f64(g, job->cg, (const double *)xs, p0, p1, col);
        else cpu_im2col_f32(g, job->cg, (const float *)xs, p0, p1, col);
        cpu_conv_gemm(job, false, false, job->kg, tn, job->rows, ws, job->rows, col, tn, ys,
                      job->pq, false);
      }
      break;
    case QT_CONV_BACKWARD_FILTER: { /* dw (kg x rows) += dy (kg x tn) @ cols^T */
      char *dws = dw + (size_t)(grp * job->kg * job->rows) * es;
      if (job->direct)
        cpu_conv_gemm(job, false, true, job->kg, job->rows, tn, ys, job->pq,
                      xs + (size_t)off * es, job->hw, dws, job->rows, accumulate);
      else {
        if (job->f64) cpu_im2col_f64(g, job->cg, (const double *)xs, p0, p1, col);
        else cpu_im2col_f32(g, job->cg, (const float *)xs, p0, p1, col);
        cpu_conv_gemm(job, false, true, job->kg, job->rows, tn, ys, job->pq, col, tn, dws,
                      job->rows, accumulate);
      }
      break;
    }
    case QT_CONV_BACKWARD_DATA:     /* cols (rows x tn) = w^T @ dy, added back into dx */
      if (job->direct)
        cpu_conv_gemm(job, true, false, job->rows, tn, job->kg, ws, job->rows, ys, job->pq,
                      xs + (size_t)off * es, job->hw, false);
      else {
        cpu_conv_gemm(job, true, false, job->rows, tn, job->kg, ws, job->rows, ys, job->pq,
                      col, tn, false);
        if (job->f64) cpu_col2im_f64(g, job->cg, (double *)xs, p0, p1, col);
        else cpu_col2im_f32(g, job->cg, (float *)xs, p0, p1, col);
      }
      break;
  }
}

static void *cpu_conv_cols(cpu_conv_job *job) {
  if (job->direct) return NULL;
  void *col = malloc((size_t)(job->rows * job->band * job->g->q) * job->es);
  if (col == NULL) atomic_store(&job->oom, 1);
  return col;
}

/* Forward and backward data: chunk t is one tile (of the phase's bands). */
static void cpu_conv_tile_chunk(void *arg, int64_t t) {
  cpu_conv_job *job = arg;
  int64_t nb = job->bands, band, ig;
  if (job->phase < 0) {
    ig = t / nb;
    band = t % nb;
  } else {
    int64_t per = (nb - job->phase + 1) / 2;   /* bands of this parity per image and group */
    ig = t / per;
    band = 2 * (t % per) + job->phase;
  }
  void *col = cpu_conv_cols(job);
  if (col == NULL && !job->direct) return;
  cpu_conv_tile(job, ig / job->g->groups, ig % job->g->groups, band, col, NULL, false);
  free(col);
}

/* Backward filter: chunk c sums tiles [c per, (c + 1) per) into its partial gradient. */
static void cpu_conv_filter_chunk(void *arg, int64_t c) {
  cpu_conv_job *job = arg;
  int64_t tiles = job->g->n * job->g->groups * job->bands, t0 = c * job->per;
  int64_t t1 = t0 + job->per < tiles ? t0 + job->per : tiles;
  size_t wbytes = (size_t)(job->g->k * job->rows) * job->es;
  char *dw = job->part + (size_t)c * wbytes;
  memset(dw, 0, wbytes);   /* a chunk may not reach every group */
  void *col = cpu_conv_cols(job);
  if (col == NULL && !job->direct) return;
  for (int64_t t = t0; t < t1; t++) {
    int64_t ig = t / job->bands;
    cpu_conv_tile(job, ig / job->g->groups, ig % job->g->groups, t % job->bands, col, dw, true);
  }
  free(col);
}

/* The partials' sum, over element ranges: each element adds its chunks in chunk order. */
typedef struct cpu_conv_sum {
  const cpu_conv_job *job;
  int64_t chunks, numel, per;
} cpu_conv_sum;

static void cpu_conv_sum_chunk(void *arg, int64_t c) {
  const cpu_conv_sum *s = arg;
  int64_t e0 = c * s->per, e1 = e0 + s->per < s->numel ? e0 + s->per : s->numel;
  if (s->job->f64) {
    double *out = (double *)s->job->w;
    const double *p = (const double *)s->job->part;
    for (int64_t e = e0; e < e1; e++) {
      double acc = p[e];
      for (int64_t k = 1; k < s->chunks; k++) acc += p[k * s->numel + e];
      out[e] = acc;
    }
  } else {
    float *out = (float *)s->job->w;
    const float *p = (const float *)s->job->part;
    for (int64_t e = e0; e < e1; e++) {
      float acc = p[e];
      for (int64_t k = 1; k < s->chunks; k++) acc += p[k * s->numel + e];
      out[e] = acc;
    }
  }
}

/* dx's planes zeroed before backward data adds into them */
static void cpu_conv_zero_chunk(void *arg, int64_t c) {
  const cpu_conv_job *job = arg;
  int64_t per = CPU_PAR_GRAIN, total = job->g->n * job->g->c * job->hw;
  int64_t e0 = c * per, e1 = e0 + per < total ? e0 + per : total;
  memset(job->x + (size_t)e0 * job->es, 0, (size_t)(e1 - e0) * job->es);
}

/* A 1x1 filter with stride 1 and no padding: p = h, q = w, the image is its own matrix. */
static bool cpu_conv_direct(const qt_conv_geom *g) {
  return g->r == 1 && g->s == 1 && g->stride[0] == 1 && g->stride[1] == 1 && g->pad[0] == 0 &&
         g->pad[1] == 0;
}

/* Runs mode on raw data (the views' checks done): y = conv(x, w), x = dx from dy in y, or
** w = dw. */
static int cpu_conv_run(const cpu_blas_api *blas, qt_conv_mode mode, const qt_conv_geom *g,
                        bool f64, char *x, char *w, char *y, qt_err *err);

/* The input's gradient of a stride-1 convolution is itself a convolution: dy, padded by
** dilation (r - 1) - pad, with the filters flipped and their two channel dims swapped. Run
** as the forward's tiles, it reduces over k r s instead of k and gathers instead of adding
** back. Returns 1 when this shape cannot take it (a pad past the filter's reach). */
static int cpu_conv_data_as_forward(const cpu_blas_api *blas, const qt_conv_geom *g, bool f64,
                                    char *dx, const char *w, char *dy, qt_err *err) {
  int64_t reach0 = g->dilation[0] * (g->r - 1), reach1 = g->dilation[1] * (g->s - 1);
  if (g->stride[0] != 1 || g->stride[1] != 1 || g->pad[0] > reach0 || g->pad[1] > reach1)
    return 1;
  size_t es = f64 ? sizeof(double) : sizeof(float);
  int64_t cg = g->c / g->groups, kg = g->k / g->groups, rs = g->r * g->s;
  char *wf = malloc((size_t)(g->k * cg * rs) * es);
  if (wf == NULL)
    return qt_errorf(err, "conv: out of memory for the flipped filters (%lld x %lld x %lld x %lld)",
                     (long long)g->c, (long long)kg, (long long)g->r, (long long)g->s);
  /* wf[grp cg + c][k][t'] = w[grp kg + k][c][rs - 1 - t'] */
  for (int64_t grp = 0; grp < g->groups; grp++)
    for (int64_t k = 0; k < kg; k++)
      for (int64_t c = 0; c < cg; c++) {
        const char *src = w + (size_t)(((grp * kg + k) * cg + c) * rs) * es;
        char *dst = wf + (size_t)(((grp * cg + c) * kg + k) * rs) * es;
        for (int64_t t = 0; t < rs; t++) memcpy(dst + (size_t)t * es, src + (size_t)(rs - 1 - t) * es, es);
      }
  qt_conv_geom t = *g;
  t.c = g->k;
  t.h = g->p;
  t.w = g->q;
  t.k = g->c;
  t.p = g->h;
  t.q = g->w;
  t.pad[0] = reach0 - g->pad[0];
  t.pad[1] = reach1 - g->pad[1];
  int rc = cpu_conv_run(blas, QT_CONV_FORWARD, &t, f64, dy, wf, dx, err);
  free(wf);
  return rc;
}

int cpu_conv(qt_device *dev, qt_conv_mode mode, const qt_conv_geom *g, const qt_view *x,
             const qt_view *w, const qt_view *y, qt_err *err) {
  (void)dev;
  qt_dtype dt = x->dtype;
  if ((dt != QT_F32 && dt != QT_F64) || w->dtype != dt || y->dtype != dt)
    return qt_errorf(err, "conv: float32 or float64 operands of one dtype expected");
  size_t es = qt_elsize(dt);
  int64_t cg = g->c / g->groups, kg = g->k / g->groups;
  int64_t rows = cg * g->r * g->s, pq = g->p * g->q, hw = g->h * g->w;
  /* the flipped form (backward data) swaps the roles: its rows are kg r s */
  if (rows > INT32_MAX || kg * g->r * g->s > INT32_MAX || pq > INT32_MAX || kg > INT32_MAX ||
      hw > INT32_MAX)
    return qt_errorf(err, "conv: a %lld x %lld product is too large for BLAS", (long long)rows,
                     (long long)pq);
  if (g->n == 0 || g->k == 0 || pq == 0 || (mode != QT_CONV_FORWARD && hw == 0) || rows == 0) {
    /* nothing to sum: every written element is 0 */
    const qt_view *out = mode == QT_CONV_FORWARD ? y : mode == QT_CONV_BACKWARD_DATA ? x : w;
    memset(out->data, 0, (size_t)out->numel * es);
    return 0;
  }
  const cpu_blas_api *blas = cpu_blas_get(err);
  if (blas == NULL) return -1;
  bool f64 = dt == QT_F64;
  if (mode == QT_CONV_BACKWARD_DATA && !cpu_conv_direct(g)) {
    int rc = cpu_conv_data_as_forward(blas, g, f64, x->data, w->data, y->data, err);
    if (rc <= 0) return rc;
  }
  return cpu_conv_run(blas, mode, g, f64, x->data, w->data, y->data, err);
}

static int cpu_conv_run(const cpu_blas_api *blas, qt_conv_mode mode, const qt_conv_geom *g,
                        bool f64, char *x, char *w, char *y, qt_err *err) {
  size_t es = f64 ? sizeof(double) : sizeof(float);
  int64_t cg = g->c / g->groups, kg = g->k / g->groups;
  int64_t rows = cg * g->r * g->s, pq = g->p * g->q, hw = g->h * g->w;
  cpu_conv_job job = {.g = g, .blas = blas, .mode = mode, .f64 = f64, .es = es, .cg = cg,
                      .kg = kg, .rows = rows, .pq = pq, .hw = hw, .phase = -1, .x = x, .w = w,
                      .y = y};
  atomic_init(&job.oom, 0);
  job.direct = cpu_conv_direct(g);
  /* a band: its columns about a tile's bytes (the filters' gradient, reducing over the
  ** band, likes it longer); backward data's tall enough that bands two apart never share an
  ** input row */
  size_t row_bytes = (size_t)(rows * g->q) * es;
  size_t tile = mode == QT_CONV_BACKWARD_FILTER ? CPU_CONV_FILTER_TILE_BYTES : CPU_CONV_TILE_BYTES;
  int64_t band = (int64_t)(tile / (row_bytes > 0 ? row_bytes : 1));
  if (mode == QT_CONV_BACKWARD_DATA && !job.direct) {
    int64_t reach = (g->r - 1) * g->dilation[0];
    int64_t need = (reach + g->stride[0] - 1) / g->stride[0];
    if (band < need) band = need;
  }
  if (band < 1) band = 1;
  if (band > g->p) band = g->p;
  job.band = band;
  job.bands = (g->p + band - 1) / band;
  int64_t planes = g->n * g->groups, tiles = planes * job.bands;
  /* each tile's GEMM on one OpenBLAS thread, the pool running the tiles */
  int restore = cpu_blas_enter(1.0);
  int rc = 0;
  if (mode == QT_CONV_FORWARD || (mode == QT_CONV_BACKWARD_DATA && job.direct)) {
    cpu_parallel(tiles, cpu_conv_tile_chunk, &job);   /* no two tiles write one element */
  } else if (mode == QT_CONV_BACKWARD_DATA) {
    int64_t total = g->n * g->c * hw;
    cpu_parallel((total + CPU_PAR_GRAIN - 1) / CPU_PAR_GRAIN, cpu_conv_zero_chunk, &job);
    for (job.phase = 0; job.phase < 2 && job.phase < job.bands; job.phase++)
      cpu_parallel(planes * ((job.bands - job.phase + 1) / 2), cpu_conv_tile_chunk, &job);
  } else {
    size_t wbytes = (size_t)(g->k * rows) * es;
    int64_t chunks = tiles < CPU_CONV_PARTIALS ? tiles : CPU_CONV_PARTIALS;
    int64_t fit = (int64_t)(CPU_CONV_PARTIAL_BYTES / wbytes);
    if (chunks > fit) chunks = fit < 1 ? 1 : fit;
    job.per = (tiles + chunks - 1) / chunks;
    chunks = (tiles + job.per - 1) / job.per;
    if (chunks == 1) job.part = job.w;      /* one chunk: it writes dw itself */
    else if ((job.part = malloc((size_t)chunks * wbytes)) == NULL) {
      cpu_blas_leave(restore);
      return qt_errorf(err, "conv: out of memory for %lld partial filter gradients of %zu bytes",
                       (long long)chunks, wbytes);
    }
    cpu_parallel(chunks, cpu_conv_filter_chunk, &job);
    if (chunks > 1) {
      cpu_conv_sum s = {.job = &job, .chunks = chunks, .numel = g->k * rows,
                        .per = CPU_PAR_GRAIN / chunks > 256 ? CPU_PAR_GRAIN / chunks : 256};
      if (!atomic_load(&job.oom))
        cpu_parallel((s.numel + s.per - 1) / s.per, cpu_conv_sum_chunk, &s);
      free(job.part);
    }
  }
  cpu_blas_leave(restore);
  if (atomic_load(&job.oom))
    rc = qt_errorf(err, "conv: out of memory for a %lld x %lld column tile", (long long)rows,
                   (long long)(band * g->q));
  return rc;
}
