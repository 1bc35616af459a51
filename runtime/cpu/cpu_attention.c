/*
** cpu_attention.c — the CPU device's attention slot (device.h): scaled dot-product
** attention forward and backward in float32 and float64 (16-bit through widen.c), on the
** pool, never holding more than one score row per query row in flight.
**
** Forward takes query rows (b, h, i) in chunks: a row's scores go to a scratch row of sk
** numbers, then their maximum, the exponentials' sum (lse = max + log sum) and o = the
** weighted sum of v's rows. Backward first makes D_i = do_i . o_i for every row, then dq
** row by row (each recomputes its scores and probabilities from lse), then dk and dv key
** row by key row over every query row of the heads that read it. Nothing is accumulated
** across threads, so the results do not depend on the thread count. Sums are in the
** dtype's own precision, with several running sums per dot product.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "device.h"
#include "philox.h"
#include "tensor.h"

enum { CPU_ATTN_GRAIN = 1 << 16 };   /* multiply-adds a chunk of rows aims for */

typedef struct cpu_attn_job {
  const qt_attn_opts *o;
  const qt_view *v;
  int64_t rows_per_chunk, nrows;
  void *dsum;            /* backward: D_i per query row, in the accumulation type */
  volatile int failed;   /* a chunk could not get its scratch row */
} cpu_attn_job;

#define AV(job, k) ((job)->v[QT_ATTN_##k])
#define AHAS(job, k) (((job)->o->has >> QT_ATTN_##k) & 1u)

/* The dropout factor of score (bh, i, j): 0 when dropped, 1 / (1 - p) when kept (1 without). */
static inline double cpu_attn_keep(const qt_attn_opts *o, int64_t bh, int64_t i, int64_t j) {
  if (o->dropout_p <= 0) return 1;
  uint64_t k = (uint64_t)(((bh * o->sq) + i) * o->sk + j);
  float u = qt_philox_uniform_f32(qt_philox(o->seed, o->offset + k));
  if (u < (float)o->dropout_p) return 0;
  return o->dropout_p < 1 ? 1 / (1 - o->dropout_p) : 0;
}

/* The mask's term for score (b, h, i, j): 0, an additive number, or -inf (bool false). */
static inline double cpu_attn_bias(const qt_view *m, int64_t b, int64_t h, int64_t i, int64_t j) {
  const char *p = (const char *)m->data;
  int64_t off = b * m->stride[0] + h * m->stride[1] + i * m->stride[2] + j * m->stride[3];
  switch (m->dtype) {
  case QT_BOOL: return ((const uint8_t *)p)[off] ? 0 : -INFINITY;
  case QT_F32: return ((const float *)p)[off];
  case QT_F64: return ((const double *)p)[off];
  default: return 0;   /* the core passes no other */
  }
}

#define CPU_ATTN_FUNCS(SFX, T)                                                                  \
  static inline T cpu_attn_dot_##SFX(const T *a, const T *b, int64_t n) {                       \
    T s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                                           \
    int64_t k = 0;                                                                              \
    for (; k + 4 <= n; k += 4) {                                                                \
      s0 += a[k] * b[k];                                                                        \
      s1 += a[k + 1] * b[k + 1];                                                                \
      s2 += a[k + 2] * b[k + 2];                                                                \
      s3 += a[k + 3] * b[k + 3];                                                                \
    }                                                                                           \
    for (; k < n; k++) s0 += a[k] * b[k];                                                       \
    return (s0 + s1) + (s2 + s3);                                                               \
  }                                                                                             \
  /* Row r = (bh, i) of q against every key: s[j] the scores (-inf where masked), returns     \
  ** their maximum. */                                                                        \
  static T cpu_attn_scores_##SFX(const cpu_attn_job *job, int64_t r, T *s) {                    \
    const qt_attn_opts *o = job->o;                                                             \
    int64_t i = r % o->sq, bh = r / o->sq, b = bh / o->hq, h = bh % o->hq;                      \
    int64_t kh = h / (o->hq / o->hk);                                                           \
    const qt_view *qv = &AV(job, Q), *kv = &AV(job, K);                                         \
    const T *qi = (const T *)qv->data + b * qv->stride[0] + h * qv->stride[1] + i * qv->stride[2]; \
    const T *k0 = (const T *)kv->data + b * kv->stride[0] + kh * kv->stride[1];                 \
    int64_t kend = o->causal && i + 1 < o->sk ? i + 1 : o->sk;                                  \
    T m = (T)-INFINITY;                                                                         \
    for (int64_t j = 0; j < o->sk; j++) {                                                       \
      T x = (T)-INFINITY;                                                                       \
      if (j < kend) {                                                                           \
        x = (T)o->scale * cpu_attn_dot_##SFX(qi, k0 + j * kv->stride[2], o->d);                 \
        if (AHAS(job, MASK)) x += (T)cpu_attn_bias(&AV(job, MASK), b, h, i, j);                 \
      }                                                                                         \
      s[j] = x;                                                                                 \
      if (x > m) m = x;                                                                         \
    }                                                                                           \
    return m;                                                                                   \
  }                                                                                             \
  static T *cpu_attn_scratch_##SFX(cpu_attn_job *job, T *stack, int64_t n) {                    \
    if (n <= 1024) return stack;                                                                \
    T *s = malloc((size_t)n * sizeof(T));                                                       \
    if (s == NULL) job->failed = 1;                                                             \
    return s;                                                                                   \
  }                                                                                             \
  static void cpu_attn_fwd_##SFX(void *arg, int64_t chunk) {                                    \
    cpu_attn_job *job = arg;                                                                    \
    const qt_attn_opts *o = job->o;                                                             \
    T stack[1024];                                                                              \
    T *s = cpu_attn_scratch_##SFX(job, stack, o->sk);                                           \
    if (s == NULL) return;                                                                      \
    const qt_view *vv = &AV(job, V);                                                            \
    int64_t r1 = (chunk + 1) * job->rows_per_chunk;                                             \
    if (r1 > job->nrows) r1 = job->nrows;                                                       \
    for (int64_t r = chunk * job->rows_per_chunk; r < r1; r++) {                                \
      int64_t i = r % o->sq, bh = r / o->sq, b = bh / o->hq, h = bh % o->hq;                    \
      int64_t kh = h / (o->hq / o->hk);                                                         \
      T *out = (T *)AV(job, O).data + r * o->dv;                                                \
      T m = cpu_attn_scores_##SFX(job, r, s);                                                   \
      for (int64_t c = 0; c < o->dv; c++) out[c] = 0;                                           \
      if (m == (T)-INFINITY) {                                                                  \
        ((T *)AV(job, LSE).data)[r] = (T)-INFINITY;                                             \
        continue;                                                                               \
      }                                                                                         \
      T l = 0;                                                                                  \
      for (int64_t j = 0; j < o->sk; j++) l += s[j] = (T)exp(s[j] - m);                         \
      ((T *)AV(job, LSE).data)[r] = m + (T)log(l);                                              \
      const T *v0 = (const T *)vv->data + b * vv->stride[0] + kh * vv->stride[1];               \
      for (int64_t j = 0; j < o->sk; j++) {                                                     \
        T p = s[j] / l * (T)cpu_attn_keep(o, bh, i, j);                                         \
        if (p == 0) continue;                                                                   \
        const T *vj = v0 + j * vv->stride[2];                                                   \
        for (int64_t c = 0; c < o->dv; c++) out[c] += p * vj[c];                                \
      }                                                                                         \
    }                                                                                           \
    if (s != stack) free(s);                                                                    \
  }                                                                                             \
  /* D_i = do_i . o_i */                                                                       \
  static void cpu_attn_dsum_##SFX(void *arg, int64_t chunk) {                                   \
    cpu_attn_job *job = arg;                                                                    \
    int64_t dv = job->o->dv, r1 = (chunk + 1) * job->rows_per_chunk;                            \
    if (r1 > job->nrows) r1 = job->nrows;                                                       \
    for (int64_t r = chunk * job->rows_per_chunk; r < r1; r++)                                  \
      ((T *)job->dsum)[r] = cpu_attn_dot_##SFX((const T *)AV(job, DO).data + r * dv,            \
                                               (const T *)AV(job, O).data + r * dv, dv);        \
  }                                                                                             \
  /* dq_i = scale sum_j ds_ij k_j, ds_ij = p_ij (z_ij dp_ij - D_i), dp_ij = do_i . v_j */      \
  static void cpu_attn_dq_##SFX(void *arg, int64_t chunk) {                                     \
    cpu_attn_job *job = arg;                                                                    \
    const qt_attn_opts *o = job->o;                                                             \
    T stack[1024];                                                                              \
    T *s = cpu_attn_scratch_##SFX(job, stack, o->sk);                                           \
    if (s == NULL) return;                                                                      \
    const qt_view *kv = &AV(job, K), *vv = &AV(job, V);                                         \
    int64_t r1 = (chunk + 1) * job->rows_per_chunk;                                             \
    if (r1 > job->nrows) r1 = job->nrows;                                                       \
    for (int64_t r = chunk * job->rows_per_chunk; r < r1; r++) {                                \
      int64_t i = r % o->sq, bh = r / o->sq, b = bh / o->hq, h = bh % o->hq;                    \
      int64_t kh = h / (o->hq / o->hk);                                                         \
      T *dq = (T *)AV(job, DQ).data + r * o->d;                                                 \
      for (int64_t c = 0; c < o->d; c++) dq[c] = 0;                                             \
      T lse = ((const T *)AV(job, LSE).data)[r];                                                \
      if (lse == (T)-INFINITY) continue;                                                        \
      cpu_attn_scores_##SFX(job, r, s);                                                         \
      const T *doi = (const T *)AV(job, DO).data + r * o->dv, di = ((const T *)job->dsum)[r];    \
      const T *k0 = (const T *)kv->data + b * kv->stride[0] + kh * kv->stride[1];               \
      const T *v0 = (const T *)vv->data + b * vv->stride[0] + kh * vv->stride[1];               \
      for (int64_t j = 0; j < o->sk; j++) {                                                     \
        if (s[j] == (T)-INFINITY) continue;                                                     \
        T p = (T)exp(s[j] - lse);                                                               \
        T dp = cpu_attn_dot_##SFX(doi, v0 + j * vv->stride[2], o->dv) * (T)cpu_attn_keep(o, bh, i, j); \
        T ds = p * (dp - di) * (T)o->scale;                                                     \
        const T *kj = k0 + j * kv->stride[2];                                                   \
        for (int64_t c = 0; c < o->d; c++) dq[c] += ds * kj[c];                                 \
      }                                                                                         \
    }                                                                                           \
    if (s != stack) free(s);                                                                    \
  }                                                                                             \
  /* key row (b, kh, j): dv_j = sum p_ij z_ij do_i, dk_j = scale sum ds_ij q_i, over the      \
  ** rows i of every query head h that reads kh */                                             \
  static void cpu_attn_dkv_##SFX(void *arg, int64_t chunk) {                                    \
    cpu_attn_job *job = arg;                                                                    \
    const qt_attn_opts *o = job->o;                                                             \
    const qt_view *qv = &AV(job, Q), *kv = &AV(job, K), *vv = &AV(job, V);                      \
    int64_t group = o->hq / o->hk, r1 = (chunk + 1) * job->rows_per_chunk;                      \
    if (r1 > job->nrows) r1 = job->nrows;                                                       \
    for (int64_t r = chunk * job->rows_per_chunk; r < r1; r++) {                                \
      int64_t j = r % o->sk, bk = r / o->sk, b = bk / o->hk, kh = bk % o->hk;                   \
      const T *kj = (const T *)kv->data + b * kv->stride[0] + kh * kv->stride[1] + j * kv->stride[2]; \
      const T *vj = (const T *)vv->data + b * vv->stride[0] + kh * vv->stride[1] + j * vv->stride[2]; \
      T *dk = (T *)AV(job, DK).data + r * o->d, *dv = (T *)AV(job, DV).data + r * o->dv;        \
      for (int64_t c = 0; c < o->d; c++) dk[c] = 0;                                             \
      for (int64_t c = 0; c < o->dv; c++) dv[c] = 0;                                            \
      for (int64_t h = kh * group; h < (kh + 1) * group; h++) {                                 \
        int64_t bh = b * o->hq + h;                                                             \
        for (int64_t i = o->causal ? j : 0; i < o->sq; i++) {                                   \
          int64_t row = bh * o->sq + i;                                                         \
          T lse = ((const T *)AV(job, LSE).data)[row];                                          \
          if (lse == (T)-INFINITY) continue;                                                    \
          const T *qi = (const T *)qv->data + b * qv->stride[0] + h * qv->stride[1] + i * qv->stride[2]; \
          T x = (T)o->scale * cpu_attn_dot_##SFX(qi, kj, o->d);                                 \
          if (AHAS(job, MASK)) x += (T)cpu_attn_bias(&AV(job, MASK), b, h, i, j);               \
          if (x == (T)-INFINITY) continue;                                                      \
          T p = (T)exp(x - lse), z = (T)cpu_attn_keep(o, bh, i, j);                             \
          const T *doi = (const T *)AV(job, DO).data + row * o->dv;                             \
          T pz = p * z;                                                                         \
          if (pz != 0)                                                                          \
            for (int64_t c = 0; c < o->dv; c++) dv[c] += pz * doi[c];                           \
          T dp = cpu_attn_dot_##SFX(doi, vj, o->dv) * z;                                        \
          T ds = p * (dp - ((const T *)job->dsum)[row]) * (T)o->scale;                          \
          for (int64_t c = 0; c < o->d; c++) dk[c] += ds * qi[c];                               \
        }                                                                                       \
      }                                                                                         \
    }                                                                                           \
  }

CPU_ATTN_FUNCS(f32, float)
CPU_ATTN_FUNCS(f64, double)

/* Runs fn over nrows rows of `work` multiply-adds each, in chunks of about CPU_ATTN_GRAIN. */
static void cpu_attn_run(cpu_attn_job *job, int64_t nrows, int64_t work,
                         void (*fn)(void *, int64_t)) {
  if (nrows == 0) return;
  int64_t rpc = CPU_ATTN_GRAIN / (work > 0 ? work : 1);
  job->rows_per_chunk = rpc < 1 ? 1 : rpc;
  job->nrows = nrows;
  cpu_parallel((nrows + job->rows_per_chunk - 1) / job->rows_per_chunk, fn, job);
}

int cpu_attention(qt_device *dev, const qt_attn_opts *o, const qt_view *v, char *path,
                  qt_err *err) {
  (void)dev;
  qt_dtype dt = v[QT_ATTN_Q].dtype;
  if (dt != QT_F32 && dt != QT_F64)
    return qt_errorf(err, "attention: the CPU takes float32 and float64 here, got %s",
                     qt_dtypes[dt].name);
  if (path != NULL)
    snprintf(path, QT_ATTN_PATH_LEN, "cpu rows (%s)", dt == QT_F64 ? "float64" : "float32");
  if (o->plan_only) return 0;
  cpu_attn_job job = {.o = o, .v = v};
  bool f64 = dt == QT_F64;
  int64_t rows = o->b * o->hq * o->sq, keys = o->sk * (o->d + o->dv);
  if (!o->backward) {
    cpu_attn_run(&job, rows, keys, f64 ? cpu_attn_fwd_f64 : cpu_attn_fwd_f32);
  } else {
    job.dsum = malloc((size_t)(rows > 0 ? rows : 1) * (f64 ? sizeof(double) : sizeof(float)));
    if (job.dsum == NULL) return qt_errorf(err, "attention: out of host memory");
    cpu_attn_run(&job, rows, o->dv, f64 ? cpu_attn_dsum_f64 : cpu_attn_dsum_f32);
    if ((o->has >> QT_ATTN_DQ) & 1u)
      cpu_attn_run(&job, rows, 2 * keys, f64 ? cpu_attn_dq_f64 : cpu_attn_dq_f32);
    if ((o->has >> QT_ATTN_DK) & 1u)
      cpu_attn_run(&job, o->b * o->hk * o->sk, (o->hq / o->hk) * o->sq * 2 * (o->d + o->dv),
                   f64 ? cpu_attn_dkv_f64 : cpu_attn_dkv_f32);
    free(job.dsum);
  }
  if (job.failed) return qt_errorf(err, "attention: out of host memory for a score row of %lld",
                                   (long long)o->sk);
  return 0;
}
