/*
** cpu_attention.c — the CPU device's attention slot (device.h): scaled dot-product
** attention forward and backward in float32 and float64 (16-bit through widen.c), never
** holding the scores of more than a block of query rows of one head.
**
** Blocked (where BLAS is there and the rows are at least as long as they are apart): per
** head and block of query rows, the scores from one BLAS product, the softmax's rows on the
** pool, the output from a second product (cpu_attn_blocked says the backward's order).
** Otherwise by rows, on the pool: forward takes query rows (b, h, i) in chunks: a row's scores go to a scratch row of sk
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

/* ---------------------------------------------------------------- the blocked path
** Per head and block of query rows, the block's scores S (qn x kn) come from one BLAS
** product, the row pass (on the pool) makes them probabilities in place, and a second
** product gives the block's output. Backward per block: S again, dP = dO V^T, the row pass
** makes S the dropped probabilities and dP the scores' gradient dS, then dV += S^T dO,
** dK += scale dS^T Q (the blocks in order, so the sums are the same every run) and dQ =
** scale dS K. A block holds at most CPU_ATTN_BLOCK scores. */
enum { CPU_ATTN_BLOCK = 1 << 22 };

typedef struct cpu_attn_blk {
  const qt_attn_opts *o;
  const qt_view *v;
  int64_t b, h, bh, i0, qn, kn, rows_per_chunk;
  void *s, *dp;          /* qn x kn each, rows kn apart */
  const void *dsum;      /* backward: D of the block's rows */
} cpu_attn_blk;

#define CPU_ATTN_BLK_FUNCS(SFX, T)                                                              \
  /* forward rows: S += mask, causal -inf, then p = exp(s - max) / sum (dropped), lse */      \
  static void cpu_attn_blk_fwd_##SFX(void *arg, int64_t chunk) {                                \
    const cpu_attn_blk *k = arg;                                                                \
    const qt_attn_opts *o = k->o;                                                               \
    int64_t r1 = (chunk + 1) * k->rows_per_chunk;                                               \
    if (r1 > k->qn) r1 = k->qn;                                                                 \
    for (int64_t r = chunk * k->rows_per_chunk; r < r1; r++) {                                  \
      int64_t i = k->i0 + r;                                                                    \
      T *s = (T *)k->s + r * k->kn, m = (T)-INFINITY;                                           \
      for (int64_t j = 0; j < k->kn; j++) {                                                     \
        T x = s[j];                                                                             \
        if (o->causal && j > i) x = (T)-INFINITY;                                               \
        else if ((o->has >> QT_ATTN_MASK) & 1u) x += (T)cpu_attn_bias(&k->v[QT_ATTN_MASK], k->b, k->h, i, j); \
        s[j] = x;                                                                               \
        if (x > m) m = x;                                                                       \
      }                                                                                         \
      T *lse = (T *)k->v[QT_ATTN_LSE].data + k->bh * o->sq + i;                                 \
      if (m == (T)-INFINITY) {                                                                  \
        for (int64_t j = 0; j < k->kn; j++) s[j] = 0;                                           \
        *lse = (T)-INFINITY;                                                                    \
        continue;                                                                               \
      }                                                                                         \
      T l = 0;                                                                                  \
      for (int64_t j = 0; j < k->kn; j++) l += s[j] = (T)exp(s[j] - m);                         \
      *lse = m + (T)log(l);                                                                     \
      T inv = (T)1 / l;                                                                         \
      for (int64_t j = 0; j < k->kn; j++) s[j] = s[j] * inv * (T)cpu_attn_keep(o, k->bh, i, j); \
    }                                                                                           \
  }                                                                                             \
  /* backward rows: p = exp(s + mask - lse) (0 where masked), z its dropout factor;          \
  ** s becomes z p, dp becomes dS = p (z dp - D) */                                          \
  static void cpu_attn_blk_bwd_##SFX(void *arg, int64_t chunk) {                                \
    const cpu_attn_blk *k = arg;                                                                \
    const qt_attn_opts *o = k->o;                                                               \
    int64_t r1 = (chunk + 1) * k->rows_per_chunk;                                               \
    if (r1 > k->qn) r1 = k->qn;                                                                 \
    for (int64_t r = chunk * k->rows_per_chunk; r < r1; r++) {                                  \
      int64_t i = k->i0 + r;                                                                    \
      T *s = (T *)k->s + r * k->kn, *dp = (T *)k->dp + r * k->kn;                               \
      T lse = ((const T *)k->v[QT_ATTN_LSE].data)[k->bh * o->sq + i], di = ((const T *)k->dsum)[r]; \
      for (int64_t j = 0; j < k->kn; j++) {                                                     \
        T x = s[j];                                                                             \
        bool masked = lse == (T)-INFINITY || (o->causal && j > i);                              \
        if (!masked && ((o->has >> QT_ATTN_MASK) & 1u))                                         \
          x += (T)cpu_attn_bias(&k->v[QT_ATTN_MASK], k->b, k->h, i, j);                         \
        T p = masked || x == (T)-INFINITY ? (T)0 : (T)exp(x - lse);                             \
        T z = (T)cpu_attn_keep(o, k->bh, i, j);                                                 \
        s[j] = p * z;                                                                           \
        dp[j] = p * (dp[j] * z - di);                                                           \
      }                                                                                         \
    }                                                                                           \
  }

CPU_ATTN_BLK_FUNCS(f32, float)
CPU_ATTN_BLK_FUNCS(f64, double)

/* c (m x n, ldc) = alpha a (m x k or k x m: ta) b (k x n or n x k: tb) + beta c, row-major. */
static void cpu_attn_gemm(const cpu_blas_api *blas, bool f64, bool ta, bool tb, int64_t m, int64_t n,
                          int64_t k, double alpha, const void *a, int64_t lda, const void *b,
                          int64_t ldb, double beta, void *c, int64_t ldc) {
  int oa = ta ? CPU_CBLAS_TRANS : CPU_CBLAS_NO_TRANS, ob = tb ? CPU_CBLAS_TRANS : CPU_CBLAS_NO_TRANS;
  if (f64)
    blas->dgemm(CPU_CBLAS_ROW_MAJOR, oa, ob, (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb,
                beta, c, (int)ldc);
  else
    blas->sgemm(CPU_CBLAS_ROW_MAJOR, oa, ob, (int)m, (int)n, (int)k, (float)alpha, a, (int)lda, b,
                (int)ldb, (float)beta, c, (int)ldc);
}

/* Whether the blocked path takes these views: rows at least as long as they are apart (BLAS's
** leading dimensions), and sizes within int. */
static bool cpu_attn_blockable(const qt_attn_opts *o, const qt_view *v) {
  const qt_view *q = &v[QT_ATTN_Q], *k = &v[QT_ATTN_K], *val = &v[QT_ATTN_V];
  if ((q->size[2] > 1 && q->stride[2] < o->d) || (k->size[2] > 1 && k->stride[2] < o->d) ||
      (val->size[2] > 1 && val->stride[2] < o->dv))
    return false;
  int64_t lim = 1 << 30;
  return o->sq < lim && o->sk < lim && o->d < lim && o->dv < lim && q->stride[2] < lim &&
         k->stride[2] < lim && val->stride[2] < lim;
}

/* The blocked forward or backward; -1 (err set) when memory is short. */
static int cpu_attn_blocked(const cpu_blas_api *blas, const qt_attn_opts *o, const qt_view *v,
                            const void *dsum, qt_err *err) {
  bool f64 = v[QT_ATTN_Q].dtype == QT_F64;
  size_t es = f64 ? sizeof(double) : sizeof(float);
  int64_t qb = CPU_ATTN_BLOCK / (o->sk > 0 ? o->sk : 1);
  if (qb < 1) qb = 1;
  if (qb > o->sq) qb = o->sq;
  void *s = malloc((size_t)(qb * o->sk) * es), *dp = o->backward ? malloc((size_t)(qb * o->sk) * es) : NULL;
  if (s == NULL || (o->backward && dp == NULL)) {
    free(s);
    free(dp);
    return qt_errorf(err, "attention: out of host memory for %lld x %lld scores", (long long)qb,
                     (long long)o->sk);
  }
  const qt_view *qv = &v[QT_ATTN_Q], *kv = &v[QT_ATTN_K], *vv = &v[QT_ATTN_V];
  bool want_q = (o->has >> QT_ATTN_DQ) & 1u, want_kv = (o->has >> QT_ATTN_DK) & 1u;
  if (o->backward && want_kv) {
    memset(v[QT_ATTN_DK].data, 0, (size_t)v[QT_ATTN_DK].numel * es);
    memset(v[QT_ATTN_DV].data, 0, (size_t)v[QT_ATTN_DV].numel * es);
  }
  double mnk = (double)o->b * o->hq * o->sq * o->sk * (o->d + o->dv);
  int restore = cpu_blas_enter(mnk / (double)(o->b * o->hq * ((o->sq + qb - 1) / qb)));
  for (int64_t b = 0; b < o->b; b++)
    for (int64_t h = 0; h < o->hq; h++) {
      int64_t kh = h / (o->hq / o->hk), bh = b * o->hq + h;
      const char *q0 = (const char *)qv->data + (size_t)(b * qv->stride[0] + h * qv->stride[1]) * es;
      const char *k0 = (const char *)kv->data + (size_t)(b * kv->stride[0] + kh * kv->stride[1]) * es;
      const char *v0 = (const char *)vv->data + (size_t)(b * vv->stride[0] + kh * vv->stride[1]) * es;
      for (int64_t i0 = 0; i0 < o->sq; i0 += qb) {
        int64_t qn = o->sq - i0 < qb ? o->sq - i0 : qb;
        int64_t kn = o->causal && i0 + qn < o->sk ? i0 + qn : o->sk;
        cpu_attn_blk blk = {.o = o, .v = v, .b = b, .h = h, .bh = bh, .i0 = i0, .qn = qn, .kn = kn,
                            .s = s, .dp = dp};
        int64_t rpc = CPU_ATTN_GRAIN / (kn > 0 ? kn : 1);
        blk.rows_per_chunk = rpc < 1 ? 1 : rpc;
        int64_t chunks = (qn + blk.rows_per_chunk - 1) / blk.rows_per_chunk;
        const char *qi = q0 + (size_t)(i0 * qv->stride[2]) * es;
        /* S = scale Q K^T */
        if (kn > 0)
          cpu_attn_gemm(blas, f64, false, true, qn, kn, o->d, o->scale, qi, qv->stride[2], k0,
                        kv->stride[2], 0.0, s, kn);
        if (!o->backward) {
          if (kn > 0) cpu_parallel(chunks, f64 ? cpu_attn_blk_fwd_f64 : cpu_attn_blk_fwd_f32, &blk);
          char *out = (char *)v[QT_ATTN_O].data + (size_t)((bh * o->sq + i0) * o->dv) * es;
          if (kn > 0)
            cpu_attn_gemm(blas, f64, false, false, qn, o->dv, kn, 1.0, s, kn, v0, vv->stride[2], 0.0, out, o->dv);
          else {   /* causal with no keys: every row is masked */
            memset(out, 0, (size_t)(qn * o->dv) * es);
            for (int64_t r = 0; r < qn; r++) {
              if (f64) ((double *)v[QT_ATTN_LSE].data)[bh * o->sq + i0 + r] = -INFINITY;
              else ((float *)v[QT_ATTN_LSE].data)[bh * o->sq + i0 + r] = -INFINITY;
            }
          }
          continue;
        }
        const char *dout = (const char *)v[QT_ATTN_DO].data + (size_t)((bh * o->sq + i0) * o->dv) * es;
        blk.dsum = (const char *)dsum + (size_t)(bh * o->sq + i0) * es;
        char *dq = want_q ? (char *)v[QT_ATTN_DQ].data + (size_t)((bh * o->sq + i0) * o->d) * es : NULL;
        if (kn == 0) {
          if (dq != NULL) memset(dq, 0, (size_t)(qn * o->d) * es);
          continue;
        }
        /* dP = dO V^T, then the rows make s = z p and dp = dS */
        cpu_attn_gemm(blas, f64, false, true, qn, kn, o->dv, 1.0, dout, o->dv, v0, vv->stride[2], 0.0, dp, kn);
        cpu_parallel(chunks, f64 ? cpu_attn_blk_bwd_f64 : cpu_attn_blk_bwd_f32, &blk);
        if (want_kv) {
          char *dk = (char *)v[QT_ATTN_DK].data + (size_t)((b * o->hk + kh) * o->sk * o->d) * es;
          char *dv = (char *)v[QT_ATTN_DV].data + (size_t)((b * o->hk + kh) * o->sk * o->dv) * es;
          cpu_attn_gemm(blas, f64, true, false, kn, o->dv, qn, 1.0, s, kn, dout, o->dv, 1.0, dv, o->dv);
          cpu_attn_gemm(blas, f64, true, false, kn, o->d, qn, o->scale, dp, kn, qi, qv->stride[2], 1.0, dk, o->d);
        }
        if (dq != NULL)
          cpu_attn_gemm(blas, f64, false, false, qn, o->d, kn, o->scale, dp, kn, k0, kv->stride[2], 0.0, dq, o->d);
      }
    }
  cpu_blas_leave(restore);
  free(s);
  free(dp);
  return 0;
}

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
  qt_err no_blas;
  const cpu_blas_api *blas = cpu_attn_blockable(o, v) ? cpu_blas_get(&no_blas) : NULL;
  if (path != NULL)
    snprintf(path, QT_ATTN_PATH_LEN, "cpu %s (%s)", blas != NULL ? "blocked" : "rows",
             dt == QT_F64 ? "float64" : "float32");
  if (o->plan_only) return 0;
  cpu_attn_job job = {.o = o, .v = v};
  bool f64 = dt == QT_F64;
  int64_t rows = o->b * o->hq * o->sq, keys = o->sk * (o->d + o->dv);
  if (blas != NULL && !o->backward) return cpu_attn_blocked(blas, o, v, NULL, err);
  if (!o->backward) {
    cpu_attn_run(&job, rows, keys, f64 ? cpu_attn_fwd_f64 : cpu_attn_fwd_f32);
  } else {
    job.dsum = malloc((size_t)(rows > 0 ? rows : 1) * (f64 ? sizeof(double) : sizeof(float)));
    if (job.dsum == NULL) return qt_errorf(err, "attention: out of host memory");
    cpu_attn_run(&job, rows, o->dv, f64 ? cpu_attn_dsum_f64 : cpu_attn_dsum_f32);
    if (blas != NULL) {
      int rc = cpu_attn_blocked(blas, o, v, job.dsum, err);
      free(job.dsum);
      return rc;
    }
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
