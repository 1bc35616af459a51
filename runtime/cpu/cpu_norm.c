/*
** cpu_norm.c — the CPU device's normalisation slot (device.h's norm): layer_norm (GROUP with
** one group), rms_norm, group_norm and batch_norm, forward and backward, in float32 and
** float64 (16-bit ones through widen.c). Sums are kept in double.
**
** GROUP and RMS normalise rows: row (b, g) is the contiguous (c / groups) * inner elements
** of batch row b's channels of group g. The rows go to the pool in chunks of about
** CPU_NORM_GRAIN elements, and each row is read twice per pass (its statistics, then the
** output), from cache. Their weight and bias gradients are sums over the rows that share a
** channel: chunks of CPU_NORM_CHANNELS channels, each running down the batch rows. BATCH
** normalises each channel over the batch: one chunk a channel, which reads its n segments
** of `inner` elements for the mean, the variance and the output.
*/
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "device.h"
#include "tensor.h"

enum { CPU_NORM_GRAIN = 1 << 15, CPU_NORM_CHANNELS = 256 };

typedef struct cpu_norm_job {
  const qt_norm_opts *o;
  const qt_view *v;
  int64_t rows_per_chunk, nrows;
} cpu_norm_job;

#define NV(job, k) ((job)->v[QT_NORM_##k].data)
#define HAS(job, k) (((job)->o->has >> QT_NORM_##k) & 1u)

#define CPU_NORM_LANES 8   /* partial sums of a row (batch norm's statistics) */
/* GCC's -O2 vectorizes no loop that needs a remainder (cpu_elementwise.c says more): the
** normalisations' element loops get the dynamic cost model. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic")
#endif
#define CPU_NORM_FUNCS(SFX, T)                                                                \
  /* GROUP/RMS forward: rows [chunk * rpc, ..) */                                             \
  static void cpu_norm_rows_fwd_##SFX(void *arg, int64_t chunk) {                             \
    const cpu_norm_job *job = arg;                                                            \
    const qt_norm_opts *o = job->o;                                                           \
    int64_t cpg = o->c / o->groups, len = cpg * o->inner;                                     \
    const T *w = HAS(job, WEIGHT) ? NV(job, WEIGHT) : NULL;                                   \
    const T *bias = HAS(job, BIAS) ? NV(job, BIAS) : NULL;                                    \
    T *mean = HAS(job, MEAN) ? NV(job, MEAN) : NULL, *rstd = NV(job, RSTD);                   \
    int64_t r1 = (chunk + 1) * job->rows_per_chunk;                                           \
    if (r1 > job->nrows) r1 = job->nrows;                                                     \
    for (int64_t r = chunk * job->rows_per_chunk; r < r1; r++) {                              \
      const T *x = (const T *)NV(job, X) + r * len;                                           \
      T *y = (T *)NV(job, Y) + r * len;                                                       \
      double mu = 0, ss = 0;                                                                  \
      if (o->kind != QT_NORM_RMS) {                                                           \
        for (int64_t j = 0; j < len; j++) mu += x[j];                                         \
        mu /= (double)len;                                                                    \
      }                                                                                       \
      for (int64_t j = 0; j < len; j++) ss += ((double)x[j] - mu) * ((double)x[j] - mu);      \
      double rs = 1 / sqrt(ss / (double)len + o->eps);                                        \
      if (mean != NULL) mean[r] = (T)mu;                                                      \
      rstd[r] = (T)rs;                                                                        \
      int64_t ch0 = (r % o->groups) * cpg;                                                    \
      for (int64_t cl = 0; cl < cpg; cl++) {                                                  \
        double sc = rs * (w != NULL ? (double)w[ch0 + cl] : 1.0);                             \
        double sh = (bias != NULL ? (double)bias[ch0 + cl] : 0.0) - mu * sc;                  \
        const T *xs = x + cl * o->inner;                                                      \
        T *ys = y + cl * o->inner;                                                            \
        for (int64_t i = 0; i < o->inner; i++) ys[i] = (T)((double)xs[i] * sc + sh);          \
      }                                                                                       \
    }                                                                                         \
  }                                                                                           \
  /* GROUP/RMS backward, dx: dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w */          \
  static void cpu_norm_rows_bwd_##SFX(void *arg, int64_t chunk) {                             \
    const cpu_norm_job *job = arg;                                                            \
    const qt_norm_opts *o = job->o;                                                           \
    int64_t cpg = o->c / o->groups, len = cpg * o->inner;                                     \
    const T *w = HAS(job, WEIGHT) ? NV(job, WEIGHT) : NULL;                                   \
    const T *mean = HAS(job, MEAN) ? NV(job, MEAN) : NULL, *rstd = NV(job, RSTD);             \
    int64_t r1 = (chunk + 1) * job->rows_per_chunk;                                           \
    if (r1 > job->nrows) r1 = job->nrows;                                                     \
    for (int64_t r = chunk * job->rows_per_chunk; r < r1; r++) {                              \
      const T *x = (const T *)NV(job, X) + r * len, *dy = (const T *)NV(job, DY) + r * len;   \
      T *dx = (T *)NV(job, DX) + r * len;                                                     \
      double mu = mean != NULL ? (double)mean[r] : 0, rs = (double)rstd[r];                   \
      int64_t ch0 = (r % o->groups) * cpg;                                                    \
      double sg = 0, sgx = 0;                                                                 \
      for (int64_t cl = 0; cl < cpg; cl++) {                                                  \
        double wc = w != NULL ? (double)w[ch0 + cl] : 1.0;                                    \
        const T *xs = x + cl * o->inner, *ds = dy + cl * o->inner;                            \
        double a = 0, b = 0;                                                                  \
        for (int64_t i = 0; i < o->inner; i++) {                                              \
          a += (double)ds[i];                                                                 \
          b += (double)ds[i] * ((double)xs[i] - mu);                                          \
        }                                                                                     \
        sg += wc * a;                                                                         \
        sgx += wc * b * rs;                                                                   \
      }                                                                                       \
      double mg = o->kind == QT_NORM_RMS ? 0 : sg / (double)len, mgx = sgx / (double)len;     \
      for (int64_t cl = 0; cl < cpg; cl++) {                                                  \
        double wc = w != NULL ? (double)w[ch0 + cl] : 1.0;                                    \
        const T *xs = x + cl * o->inner, *ds = dy + cl * o->inner;                            \
        T *dxs = dx + cl * o->inner;                                                          \
        for (int64_t i = 0; i < o->inner; i++) {                                              \
          double xh = ((double)xs[i] - mu) * rs;                                              \
          dxs[i] = (T)(rs * ((double)ds[i] * wc - mg - xh * mgx));                            \
        }                                                                                     \
      }                                                                                       \
    }                                                                                         \
  }                                                                                           \
  /* GROUP/RMS dweight, dbias: channels [chunk * CPU_NORM_CHANNELS, ..) over every row */     \
  static void cpu_norm_rows_dw_##SFX(void *arg, int64_t chunk) {                              \
    const cpu_norm_job *job = arg;                                                            \
    const qt_norm_opts *o = job->o;                                                           \
    int64_t cpg = o->c / o->groups;                                                           \
    int64_t c0 = chunk * CPU_NORM_CHANNELS, c1 = c0 + CPU_NORM_CHANNELS;                      \
    if (c1 > o->c) c1 = o->c;                                                                 \
    const T *mean = HAS(job, MEAN) ? NV(job, MEAN) : NULL, *rstd = NV(job, RSTD);             \
    double sw[CPU_NORM_CHANNELS] = {0}, sb[CPU_NORM_CHANNELS] = {0};                          \
    for (int64_t b = 0; b < o->n; b++)                                                        \
      for (int64_t ch = c0; ch < c1; ch++) {                                                  \
        int64_t r = b * o->groups + ch / cpg, off = (b * o->c + ch) * o->inner;               \
        const T *xs = (const T *)NV(job, X) + off, *ds = (const T *)NV(job, DY) + off;        \
        double mu = mean != NULL ? (double)mean[r] : 0, rs = (double)rstd[r];                 \
        double a = 0, s = 0;                                                                  \
        for (int64_t i = 0; i < o->inner; i++) {                                              \
          a += (double)ds[i];                                                                 \
          s += (double)ds[i] * ((double)xs[i] - mu);                                          \
        }                                                                                     \
        sb[ch - c0] += a;                                                                     \
        sw[ch - c0] += s * rs;                                                                \
      }                                                                                       \
    for (int64_t ch = c0; ch < c1; ch++) {                                                    \
      if (HAS(job, DWEIGHT)) ((T *)NV(job, DWEIGHT))[ch] = (T)sw[ch - c0];                    \
      if (HAS(job, DBIAS)) ((T *)NV(job, DBIAS))[ch] = (T)sb[ch - c0];                        \
    }                                                                                         \
  }                                                                                           \
  /* Sums over one row of n elements in double, in CPU_NORM_LANES independent partial sums  \
  ** (so the compiler keeps them in vector registers instead of one dependent chain), added \
  ** up in a fixed order: the same numbers on every run and thread count. dev: (x - mu)^2;   \
  ** dot: dy and dy (x - mu). */                                                             \
  static double cpu_norm_sum_##SFX(const T *x, int64_t n) {                                    \
    double acc[CPU_NORM_LANES] = {0}, s = 0;                                                  \
    int64_t i = 0;                                                                            \
    for (; i + CPU_NORM_LANES <= n; i += CPU_NORM_LANES)                                      \
      for (int k = 0; k < CPU_NORM_LANES; k++) acc[k] += (double)x[i + k];                    \
    for (; i < n; i++) s += (double)x[i];                                                     \
    for (int k = 0; k < CPU_NORM_LANES; k++) s += acc[k];                                     \
    return s;                                                                                 \
  }                                                                                           \
  static double cpu_norm_dev_##SFX(const T *x, int64_t n, double mu) {                         \
    double acc[CPU_NORM_LANES] = {0}, s = 0;                                                  \
    int64_t i = 0;                                                                            \
    for (; i + CPU_NORM_LANES <= n; i += CPU_NORM_LANES)                                      \
      for (int k = 0; k < CPU_NORM_LANES; k++) {                                              \
        double d = (double)x[i + k] - mu;                                                     \
        acc[k] += d * d;                                                                      \
      }                                                                                       \
    for (; i < n; i++) s += ((double)x[i] - mu) * ((double)x[i] - mu);                        \
    for (int k = 0; k < CPU_NORM_LANES; k++) s += acc[k];                                     \
    return s;                                                                                 \
  }                                                                                           \
  static void cpu_norm_dot_##SFX(const T *dy, const T *x, int64_t n, double mu, double *a,     \
                                 double *s) {                                                 \
    double aa[CPU_NORM_LANES] = {0}, ss[CPU_NORM_LANES] = {0}, ta = 0, ts = 0;                \
    int64_t i = 0;                                                                            \
    for (; i + CPU_NORM_LANES <= n; i += CPU_NORM_LANES)                                      \
      for (int k = 0; k < CPU_NORM_LANES; k++) {                                              \
        aa[k] += (double)dy[i + k];                                                           \
        ss[k] += (double)dy[i + k] * ((double)x[i + k] - mu);                                 \
      }                                                                                       \
    for (; i < n; i++) {                                                                      \
      ta += (double)dy[i];                                                                    \
      ts += (double)dy[i] * ((double)x[i] - mu);                                              \
    }                                                                                         \
    for (int k = 0; k < CPU_NORM_LANES; k++) {                                                \
      ta += aa[k];                                                                            \
      ts += ss[k];                                                                            \
    }                                                                                         \
    *a += ta;                                                                                 \
    *s += ts;                                                                                 \
  }                                                                                           \
  /* BATCH, channel ch: forward (statistics unless given, then y) or backward. The rows of  \
  ** the channel are inner long, step apart; the element loops run in T (the statistics,     \
  ** and the per-channel factors, in double). */                                            \
  static void cpu_norm_batch_##SFX(void *arg, int64_t ch) {                                   \
    const cpu_norm_job *job = arg;                                                            \
    const qt_norm_opts *o = job->o;                                                           \
    int64_t m = o->n * o->inner, step = o->c * o->inner, in = o->inner;                       \
    const T *x = (const T *)NV(job, X) + ch * o->inner;                                       \
    T *mean = NV(job, MEAN), *rstd = NV(job, RSTD);                                           \
    double wc = HAS(job, WEIGHT) ? (double)((const T *)NV(job, WEIGHT))[ch] : 1.0;            \
    if (!o->backward) {                                                                       \
      if (!o->given_stats) {                                                                  \
        double mu = 0, ss = 0;                                                                \
        for (int64_t b = 0; b < o->n; b++) mu += cpu_norm_sum_##SFX(x + b * step, in);        \
        mu /= (double)m;                                                                      \
        for (int64_t b = 0; b < o->n; b++) ss += cpu_norm_dev_##SFX(x + b * step, in, mu);    \
        mean[ch] = (T)mu;                                                                     \
        rstd[ch] = (T)(1 / sqrt(ss / (double)m + o->eps));                                    \
      }                                                                                       \
      double scd = (double)rstd[ch] * wc;                                                     \
      T sc = (T)scd;                                                                          \
      T sh = (T)((HAS(job, BIAS) ? (double)((const T *)NV(job, BIAS))[ch] : 0.0) -            \
                 (double)mean[ch] * scd);                                                     \
      T *y = (T *)NV(job, Y) + ch * o->inner;                                                 \
      for (int64_t b = 0; b < o->n; b++) {                                                    \
        const T *restrict xr = x + b * step;                                                  \
        T *restrict yr = y + b * step;                                                        \
        for (int64_t i = 0; i < in; i++) yr[i] = xr[i] * sc + sh;                             \
      }                                                                                       \
      return;                                                                                 \
    }                                                                                         \
    const T *dy = (const T *)NV(job, DY) + ch * o->inner;                                     \
    double mu = (double)mean[ch], rs = (double)rstd[ch], a = 0, s = 0;                        \
    for (int64_t b = 0; b < o->n; b++) cpu_norm_dot_##SFX(dy + b * step, x + b * step, in, mu, &a, &s); \
    s *= rs;                                                                                  \
    if (HAS(job, DWEIGHT)) ((T *)NV(job, DWEIGHT))[ch] = (T)s;                                \
    if (HAS(job, DBIAS)) ((T *)NV(job, DBIAS))[ch] = (T)a;                                    \
    if (!HAS(job, DX)) return;                                                                \
    T *dx = (T *)NV(job, DX) + ch * o->inner;                                                 \
    double ma = o->given_stats ? 0 : a / (double)m, ms = o->given_stats ? 0 : s / (double)m;  \
    /* dx = k (dy - ma - (x - mu) rs ms) = k dy + c1 x + c0, with k = wc rs */                 \
    double k = wc * rs;                                                                       \
    T k1 = (T)k, c1 = (T)(-k * rs * ms), c0 = (T)(k * (-ma + mu * rs * ms));                  \
    for (int64_t b = 0; b < o->n; b++) {                                                      \
      const T *restrict dr = dy + b * step, *restrict xr = x + b * step;                      \
      T *restrict out = dx + b * step;                                                        \
      for (int64_t i = 0; i < in; i++) out[i] = k1 * dr[i] + c1 * xr[i] + c0;                 \
    }                                                                                         \
  }
CPU_NORM_FUNCS(f32, float)
CPU_NORM_FUNCS(f64, double)
#undef CPU_NORM_FUNCS

/* fn over [0, n) chunks: inline when the whole call is small, else on the pool. */
static void cpu_norm_run(int64_t n, int64_t elements, void (*fn)(void *, int64_t), void *job) {
  if (n == 1 || elements < CPU_NORM_GRAIN) {
    for (int64_t k = 0; k < n; k++) fn(job, k);
  } else if (n > 0) {
    cpu_parallel(n, fn, job);
  }
}

int cpu_norm(qt_device *dev, const qt_norm_opts *o, const qt_view *v, qt_err *err) {
  (void)dev;
  qt_dtype dt = v[QT_NORM_X].dtype;
  if (dt != QT_F32 && dt != QT_F64)
    return qt_errorf(err, "norm: float32 or float64 expected, got %s", qt_dtypes[dt].name);
  bool f64 = dt == QT_F64;
  int64_t numel = o->n * o->c * o->inner;
  cpu_norm_job job = {o, v, 1, o->n * o->groups};
  if (o->kind == QT_NORM_BATCH) {
    cpu_norm_run(o->c, numel, f64 ? cpu_norm_batch_f64 : cpu_norm_batch_f32, &job);
    return 0;
  }
  int64_t len = o->c / o->groups * o->inner;
  job.rows_per_chunk = len >= CPU_NORM_GRAIN ? 1 : CPU_NORM_GRAIN / (len > 0 ? len : 1);
  int64_t chunks = (job.nrows + job.rows_per_chunk - 1) / job.rows_per_chunk;
  if (!o->backward) {
    cpu_norm_run(chunks, numel, f64 ? cpu_norm_rows_fwd_f64 : cpu_norm_rows_fwd_f32, &job);
    return 0;
  }
  if (o->has >> QT_NORM_DX & 1u)
    cpu_norm_run(chunks, numel, f64 ? cpu_norm_rows_bwd_f64 : cpu_norm_rows_bwd_f32, &job);
  if (o->has & (1u << QT_NORM_DWEIGHT | 1u << QT_NORM_DBIAS))
    cpu_norm_run((o->c + CPU_NORM_CHANNELS - 1) / CPU_NORM_CHANNELS, numel,
                 f64 ? cpu_norm_rows_dw_f64 : cpu_norm_rows_dw_f32, &job);
  return 0;
}
