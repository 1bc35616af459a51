/*
** cpu_reduce.c — the CPU device's reductions: sum, mean, max, min, argmax, argmin, and
** (streamed in float64 blocks, at the end) prod, var, std, norm, logsumexp, over one
** dimension or over everything.
**
** Two ways to fold, chosen per call (cpu_reduce_dim): a strided fold reduces one run of
** elements (a row, or a column read with its stride) into one accumulator; a columns fold
** takes one contiguous row of the source and folds element j into the accumulator of
** reduction j, for when the reduced dimension is the outer one (sum over the rows of a
** matrix), so memory is read in order. Float sums are pairwise and compensated, so the
** result does not depend on which fold ran.
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "device.h"
#include "tensor.h"

/* ====================================================================== reductions */

/* Running state of one reduction. Float sums: f plus a compensation c (Neumaier /
** Kahan); integer sums: u (wrapping); max/min: f or i; arg ops: the best value and its
** 1-based position, pos == 0 meaning "nothing seen yet". */
typedef struct cpu_acc {
  double f, c;
  int64_t i;
  uint64_t u;
  int64_t pos;
} cpu_acc;

/* Adds x to (f, c) without losing the low-order bits of either (Neumaier's variant of
** Kahan summation, correct also when x is larger than the running sum). */
static inline void cpu_neumaier(cpu_acc *acc, double x) {
  double t = acc->f + x;
  if (fabs(acc->f) >= fabs(x)) acc->c += (acc->f - t) + x;
  else acc->c += (x - t) + acc->f;
  acc->f = t;
}

/* Pairwise summation of a strided run in double: error grows with log(n) instead of n.
** The leaves sum 128 elements with 8 independent accumulators (also what keeps the
** floating-point pipeline busy). */
#define CPU_PAIRWISE(NAME, T)                                                     \
  CPU_MULTIVERSION static double NAME(const T *x, int64_t n, int64_t s) {                          \
    if (n <= 128) {                                                               \
      double p0 = 0, p1 = 0, p2 = 0, p3 = 0, p4 = 0, p5 = 0, p6 = 0, p7 = 0;      \
      int64_t i = 0;                                                              \
      if (s == 1) {                                                               \
        for (; i + 8 <= n; i += 8) {                                              \
          p0 += x[i]; p1 += x[i + 1]; p2 += x[i + 2]; p3 += x[i + 3];             \
          p4 += x[i + 4]; p5 += x[i + 5]; p6 += x[i + 6]; p7 += x[i + 7];         \
        }                                                                         \
      } else {                                                                    \
        for (; i + 8 <= n; i += 8) {                                              \
          p0 += x[i * s]; p1 += x[(i + 1) * s]; p2 += x[(i + 2) * s];             \
          p3 += x[(i + 3) * s]; p4 += x[(i + 4) * s]; p5 += x[(i + 5) * s];       \
          p6 += x[(i + 6) * s]; p7 += x[(i + 7) * s];                             \
        }                                                                         \
      }                                                                           \
      for (; i < n; i++) p0 += x[i * s];                                          \
      return ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7));                   \
    }                                                                             \
    int64_t half = (n / 2 + 7) / 8 * 8;                                           \
    return NAME(x, half, s) + NAME(x + half * s, n - half, s);                    \
  }


/* A strided fold (cpu_strided_<op>_<dtype>) folds one run (n elements, stride s) into
** *acc; base_pos is the 0-based position of the run's first element in the reduction.
** A columns fold (cpu_columns_<op>_<dtype>) folds one contiguous row of n independent
** reductions at once: column j's accumulator gets element j, which sits at 0-based
** position pos of every reduction. It is used when the reduced dimension is the outer one
** (sum over rows of a matrix), so the memory is read in order instead of one column at a
** time. Its accumulators are a struct of arrays (cpu_columns_acc), so that the per-column
** loops below vectorize. (Handing it columns in L1-sized blocks was tried and measured
** 2x slower: short runs of each row defeat the hardware prefetcher.) */
typedef struct cpu_columns_acc {
  double *f, *c, *b;     /* float sums */
  uint64_t *u;           /* integer sums */
  void *best;            /* max/min/argmax/argmin: the best value so far, in the source dtype */
  int32_t *at;           /* argmax/argmin: its 1-based row (needs len <= INT32_MAX) */
  int64_t start;         /* the run's first row: the folds of max/min/arg start there */
} cpu_columns_acc;

typedef void (*cpu_strided_fold_fn)(const char *p, int64_t n, int64_t s, int64_t base_pos,
                                    cpu_acc *acc);
typedef void (*cpu_columns_fold_fn)(const char *p, int64_t n, int64_t pos,
                                    const cpu_columns_acc *columns);
/* Four rows (`step` bytes apart; the first at 0-based position pos) at once, so a wide
** block's accumulators are read and written once per four rows instead of once per row:
** the sums, and float32 argmax/argmin with AVX2. (GCC's four-row max, min and arg
** tournaments ran slower than one row at a time: the NaN rule costs three selects a pick.) */
typedef void (*cpu_columns4_fold_fn)(const char *p, int64_t n, int64_t step, int64_t pos,
                                     const cpu_columns_acc *columns);

/* The section's loops are the kind GCC vectorizes only with its dynamic cost model (see
** the elementwise section); and only without -ftrapping-math will it turn the selects
** on float comparisons into branch-free code (nothing here reads the FP exception flags,
** and the values computed are the same). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "no-trapping-math")
#endif

/* ---- sums */
/* Columns float sums add each row into b plainly (a loop that vectorizes), four rows at a
** time where there are four (their sum in double first: b, 32 KiB for a block of 4096
** columns, then does not cap the loop at L2's speed); every CPU_COLUMNS_SUM_BLOCK rows,
** and after the last, cpu_dim_task folds b into the compensated (f, c) with
** cpu_columns_sum_flush. Plain double sums of at most 128 values are as exact as the
** leaves of the strided pairwise sum. */
#define CPU_COLUMNS_SUM_BLOCK 128
#define CPU_SUM_FLOAT(SFX, T)                                                            \
  static void cpu_strided_sum_##SFX(const char *p, int64_t n, int64_t s,                 \
                                    int64_t base_pos, cpu_acc *acc) {                    \
    (void)base_pos;                                                                      \
    cpu_neumaier(acc, cpu_pairwise_##SFX((const T *)p, n, s));                           \
  }                                                                                      \
  CPU_MULTIVERSION static void cpu_columns_sum_##SFX(const char *p, int64_t n, int64_t pos, \
                                    const cpu_columns_acc *columns) {                    \
    (void)pos;                                                                           \
    const T *x = (const T *)p;                                                           \
    double *restrict b = columns->b;                                                     \
    for (int64_t j = 0; j < n; j++) b[j] += (double)x[j];                                \
  }                                                                                      \
  CPU_MULTIVERSION static void cpu_columns4_sum_##SFX(const char *p, int64_t n, int64_t step, \
                                          int64_t pos, const cpu_columns_acc *columns) { \
    (void)pos;                                                                           \
    const T *restrict x0 = (const T *)p;                                                 \
    const T *restrict x1 = (const T *)(p + step);                                        \
    const T *restrict x2 = (const T *)(p + 2 * step);                                    \
    const T *restrict x3 = (const T *)(p + 3 * step);                                    \
    double *restrict b = columns->b;                                                     \
    for (int64_t j = 0; j < n; j++)                                                      \
      b[j] += ((double)x0[j] + (double)x1[j]) + ((double)x2[j] + (double)x3[j]);         \
  }

/* Folds the block sums b into (f, c) by Kahan's rule and clears b. An infinite sum has
** nothing to compensate (inf - inf would turn it NaN). Kahan's c is subtracted,
** Neumaier's added: cpu_reduce_dim hands -c to cpu_reduce_finish, which reads f + c. */
static void cpu_columns_sum_flush(const cpu_columns_acc *columns, int64_t n) {
  for (int64_t j = 0; j < n; j++) {
    double y = columns->b[j] - columns->c[j];
    double t = columns->f[j] + y;
    columns->c[j] = isfinite(t) ? (t - columns->f[j]) - y : 0.0;
    columns->f[j] = t;
    columns->b[j] = 0;
  }
}

#define CPU_SUM_INT(SFX, T)                                                              \
  static void cpu_strided_sum_##SFX(const char *p, int64_t n, int64_t s,                 \
                                    int64_t base_pos, cpu_acc *acc) {                    \
    (void)base_pos;                                                                      \
    const T *x = (const T *)p;                                                           \
    uint64_t u = acc->u;                                                                 \
    if (s == 1) for (int64_t i = 0; i < n; i++) u += (uint64_t)(int64_t)x[i];            \
    else for (int64_t i = 0; i < n; i++) u += (uint64_t)(int64_t)x[i * s];               \
    acc->u = u;                                                                          \
  }                                                                                      \
  static void cpu_columns_sum_##SFX(const char *p, int64_t n, int64_t pos,               \
                                    const cpu_columns_acc *columns) {                    \
    (void)pos;                                                                           \
    const T *x = (const T *)p;                                                           \
    uint64_t *restrict u = columns->u;                                                   \
    for (int64_t j = 0; j < n; j++) u[j] += (uint64_t)(int64_t)x[j];                     \
  }                                                                                      \
  static void cpu_columns4_sum_##SFX(const char *p, int64_t n, int64_t step, int64_t pos, \
                                     const cpu_columns_acc *columns) {                   \
    (void)pos;                                                                           \
    const T *restrict x0 = (const T *)p;                                                 \
    const T *restrict x1 = (const T *)(p + step);                                        \
    const T *restrict x2 = (const T *)(p + 2 * step);                                    \
    const T *restrict x3 = (const T *)(p + 3 * step);                                    \
    uint64_t *restrict u = columns->u;                                                   \
    for (int64_t j = 0; j < n; j++)                                                      \
      u[j] += (uint64_t)(int64_t)x0[j] + (uint64_t)(int64_t)x1[j] +                      \
              (uint64_t)(int64_t)x2[j] + (uint64_t)(int64_t)x3[j];                       \
  }

/* ---- max / min: NaN wins (the first NaN met is kept) */
#define CPU_GT(x, b) ((x) > (b))
#define CPU_LT(x, b) ((x) < (b))

/* ---- float32 max/min and argmax/argmin of a contiguous run, with vector instructions.
** GCC does not vectorize the generic runs below for float32 (a select reduction with a
** NaN flag beside it); these are written with SSE2 (every x86-64), AVX2 and AVX-512F
** (picked at run time by cpu_isa_level, so QLUA_CPU_ISA=generic runs the SSE2 code) and
** compute exactly what the generic runs do: the best non-NaN value (ties:
** any, the caller fixes a zero's sign) or its first position (ties: the smallest), and
** whether a NaN was seen. maxps/minps return their second operand when either is NaN,
** which is the generic `better(v, m) ? v : m`. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CPU_SIMD_F32(x) _Generic((x), const float *: 1, default: 0)

/* The vector runs' end, in scalar code: the best of the lanes, then the tail x[i..n). */
static inline float cpu_f32_best_finish(const float *lane, int lanes, const float *x, int64_t i,
                                        int64_t n, int is_max, int nan, int *has_nan) {
  float best = lane[0];
  for (int k = 1; k < lanes; k++) best = (is_max ? lane[k] > best : lane[k] < best) ? lane[k] : best;
  for (; i < n; i++) {
    float v = x[i];
    best = (is_max ? v > best : v < best) ? v : best;
    nan |= v != v;
  }
  *has_nan = nan;
  return best;
}

/* The same for the positions: the best lane (ties: the smallest position) when there are
** lanes (x[0] at 0 when lanes is 0), then the tail from i. */
static inline int64_t cpu_f32_arg_finish(const float *lane, const int32_t *pos, int lanes,
                                         const float *x, int64_t i, int64_t n, int is_max,
                                         int nan, int *has_nan) {
  float best = x[0];
  int64_t best_at = 0;
  if (lanes > 0) {
    best = lane[0], best_at = pos[0];
    for (int k = 1; k < lanes; k++)
      if ((is_max ? lane[k] > best : lane[k] < best) || (lane[k] == best && pos[k] < best_at))
        best = lane[k], best_at = pos[k];
    if (best != best) best = x[best_at];  /* a NaN first lane value: the caller rescans */
  }
  for (; i < n; i++) {
    float v = x[i];
    if (is_max ? v > best : v < best) best = v, best_at = i;
    nan |= v != v;
  }
  *has_nan = nan;
  return best_at;
}

static float cpu_f32_best_sse2(const float *x, int64_t n, int is_max, int *has_nan) {
  __m128 m = _mm_set1_ps(x[0]), bad = _mm_setzero_ps();
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    __m128 v = _mm_loadu_ps(x + i);
    m = is_max ? _mm_max_ps(v, m) : _mm_min_ps(v, m);
    bad = _mm_or_ps(bad, _mm_cmpunord_ps(v, v));
  }
  float lane[4];
  _mm_storeu_ps(lane, m);
  return cpu_f32_best_finish(lane, 4, x, i, n, is_max, _mm_movemask_ps(bad) != 0, has_nan);
}

__attribute__((target("avx512f"))) static float cpu_f32_best_avx512(const float *x, int64_t n,
                                                                     int is_max, int *has_nan) {
  __m512 m0 = _mm512_set1_ps(x[0]), m1 = m0;
  __mmask16 bad = 0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
    m0 = is_max ? _mm512_max_ps(v0, m0) : _mm512_min_ps(v0, m0);
    m1 = is_max ? _mm512_max_ps(v1, m1) : _mm512_min_ps(v1, m1);
    bad |= _mm512_cmp_ps_mask(v0, v0, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(v1, v1, _CMP_UNORD_Q);
  }
  float lane[32];
  _mm512_storeu_ps(lane, m0);
  _mm512_storeu_ps(lane + 16, m1);
  return cpu_f32_best_finish(lane, 32, x, i, n, is_max, bad != 0, has_nan);
}

/* Four sets of 8 lanes, so that four maxps chains overlap (one chain bounds a loop by
** maxps's latency, as in the SSE2 code). */
__attribute__((target("avx2"))) static float cpu_f32_best_avx2(const float *x, int64_t n,
                                                                int is_max, int *has_nan) {
  __m256 m0 = _mm256_set1_ps(x[0]), m1 = m0, m2 = m0, m3 = m0, bad = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    __m256 v2 = _mm256_loadu_ps(x + i + 16), v3 = _mm256_loadu_ps(x + i + 24);
    m0 = is_max ? _mm256_max_ps(v0, m0) : _mm256_min_ps(v0, m0);
    m1 = is_max ? _mm256_max_ps(v1, m1) : _mm256_min_ps(v1, m1);
    m2 = is_max ? _mm256_max_ps(v2, m2) : _mm256_min_ps(v2, m2);
    m3 = is_max ? _mm256_max_ps(v3, m3) : _mm256_min_ps(v3, m3);
    /* unordered: either operand NaN */
    bad = _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(v0, v1, _CMP_UNORD_Q),
                                         _mm256_cmp_ps(v2, v3, _CMP_UNORD_Q)));
  }
  float lane[32];
  _mm256_storeu_ps(lane, m0);
  _mm256_storeu_ps(lane + 8, m1);
  _mm256_storeu_ps(lane + 16, m2);
  _mm256_storeu_ps(lane + 24, m3);
  return cpu_f32_best_finish(lane, 32, x, i, n, is_max, _mm256_movemask_ps(bad) != 0, has_nan);
}

static float cpu_f32_best(const float *x, int64_t n, int is_max, int *has_nan) {
  int level = cpu_isa_level();
  if (level >= 2) return cpu_f32_best_avx512(x, n, is_max, has_nan);
  if (level == 1) return cpu_f32_best_avx2(x, n, is_max, has_nan);
  return cpu_f32_best_sse2(x, n, is_max, has_nan);
}

/* The first position of the best non-NaN value: per lane the first best (strictly
** better replaces), then the lanes merged by value, ties by the smaller position. */
static int64_t cpu_f32_arg_sse2(const float *x, int64_t n, int is_max, int *has_nan) {
  if (n >= 8) {
    __m128 m = _mm_loadu_ps(x), bad = _mm_cmpunord_ps(m, m);
    __m128i at = _mm_setr_epi32(0, 1, 2, 3), idx = at, four = _mm_set1_epi32(4);
    int64_t i;
    for (i = 4; i + 4 <= n; i += 4) {
      __m128 v = _mm_loadu_ps(x + i);
      idx = _mm_add_epi32(idx, four);
      __m128 take = is_max ? _mm_cmpgt_ps(v, m) : _mm_cmplt_ps(v, m);
      m = _mm_or_ps(_mm_and_ps(take, v), _mm_andnot_ps(take, m));
      __m128i ti = _mm_castps_si128(take);
      at = _mm_or_si128(_mm_and_si128(ti, idx), _mm_andnot_si128(ti, at));
      bad = _mm_or_ps(bad, _mm_cmpunord_ps(v, v));
    }
    float lane[4];
    int32_t pos[4];
    _mm_storeu_ps(lane, m);
    _mm_storeu_si128((__m128i *)pos, at);
    return cpu_f32_arg_finish(lane, pos, 4, x, i, n, is_max, _mm_movemask_ps(bad) != 0, has_nan);
  }
  return cpu_f32_arg_finish(NULL, NULL, 0, x, 0, n, is_max, 0, has_nan);
}

__attribute__((target("avx512f"))) static int64_t cpu_f32_arg_avx512(const float *x, int64_t n,
                                                                      int is_max, int *has_nan) {
  if (n >= 64) {
    /* two sets of 16 lanes (blocks of 32 elements: the first 16 and the second 16), so
    ** that the compare-and-select chains of the two overlap */
    __m512 m0 = _mm512_loadu_ps(x), m1 = _mm512_loadu_ps(x + 16);
    __mmask16 bad = _mm512_cmp_ps_mask(m0, m0, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(m1, m1, _CMP_UNORD_Q);
    __m512i at0 = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i at1 = _mm512_add_epi32(at0, _mm512_set1_epi32(16));
    __m512i idx0 = at0, idx1 = at1, step = _mm512_set1_epi32(32);
    int64_t i;
    for (i = 32; i + 32 <= n; i += 32) {
      __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
      idx0 = _mm512_add_epi32(idx0, step);
      idx1 = _mm512_add_epi32(idx1, step);
      __mmask16 t0 = is_max ? _mm512_cmp_ps_mask(v0, m0, _CMP_GT_OQ) : _mm512_cmp_ps_mask(v0, m0, _CMP_LT_OQ);
      __mmask16 t1 = is_max ? _mm512_cmp_ps_mask(v1, m1, _CMP_GT_OQ) : _mm512_cmp_ps_mask(v1, m1, _CMP_LT_OQ);
      m0 = _mm512_mask_mov_ps(m0, t0, v0);
      m1 = _mm512_mask_mov_ps(m1, t1, v1);
      at0 = _mm512_mask_mov_epi32(at0, t0, idx0);
      at1 = _mm512_mask_mov_epi32(at1, t1, idx1);
      bad |= _mm512_cmp_ps_mask(v0, v0, _CMP_UNORD_Q) | _mm512_cmp_ps_mask(v1, v1, _CMP_UNORD_Q);
    }
    float lane[32];
    int32_t pos[32];
    _mm512_storeu_ps(lane, m0);
    _mm512_storeu_ps(lane + 16, m1);
    _mm512_storeu_si512((void *)pos, at0);
    _mm512_storeu_si512((void *)(pos + 16), at1);
    return cpu_f32_arg_finish(lane, pos, 32, x, i, n, is_max, bad != 0, has_nan);
  }
  return cpu_f32_arg_finish(NULL, NULL, 0, x, 0, n, is_max, 0, has_nan);
}

/* Four sets of 8 lanes (blocks of 32 elements, a set for each quarter), as the AVX-512
** code's two sets of 16; each lane keeps the start of the block its best came from, and
** the position is that plus the lane's offset. Named variables, not arrays: GCC kept an
** array of vectors on the stack, a store and a load in every step. */
#define CPU_F32_ARG_AVX2_SET(k, PRED)                                                    \
  do {                                                                                   \
    __m256 v = _mm256_loadu_ps(x + i + 8 * k);                                           \
    __m256 take = _mm256_cmp_ps(v, m##k, PRED);                                          \
    m##k = _mm256_blendv_ps(m##k, v, take);                                              \
    at##k = _mm256_blendv_ps(at##k, block, take);                                        \
    v##k = v;                                                                            \
  } while (0)
#define CPU_F32_ARG_AVX2_LOOP(PRED)                                                      \
  for (i = 32; i + 32 <= n; i += 32) {                                                   \
    __m256 v0, v1, v2, v3;                                                               \
    const __m256 block = _mm256_castsi256_ps(_mm256_set1_epi32((int32_t)i));             \
    CPU_F32_ARG_AVX2_SET(0, PRED);                                                       \
    CPU_F32_ARG_AVX2_SET(1, PRED);                                                       \
    CPU_F32_ARG_AVX2_SET(2, PRED);                                                       \
    CPU_F32_ARG_AVX2_SET(3, PRED);                                                       \
    bad = _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(v0, v1, _CMP_UNORD_Q),            \
                                         _mm256_cmp_ps(v2, v3, _CMP_UNORD_Q)));          \
  }
__attribute__((target("avx2"))) static int64_t cpu_f32_arg_avx2(const float *x, int64_t n,
                                                                 int is_max, int *has_nan) {
  if (n >= 64) {
    __m256 m0 = _mm256_loadu_ps(x), m1 = _mm256_loadu_ps(x + 8);
    __m256 m2 = _mm256_loadu_ps(x + 16), m3 = _mm256_loadu_ps(x + 24);
    __m256 bad = _mm256_or_ps(_mm256_cmp_ps(m0, m1, _CMP_UNORD_Q), _mm256_cmp_ps(m2, m3, _CMP_UNORD_Q));
    __m256 at0 = _mm256_setzero_ps(), at1 = at0, at2 = at0, at3 = at0;  /* block 0 */
    int64_t i;
    if (is_max) CPU_F32_ARG_AVX2_LOOP(_CMP_GT_OQ)
    else CPU_F32_ARG_AVX2_LOOP(_CMP_LT_OQ)
    float lane[32];
    int32_t pos[32];
    _mm256_storeu_ps(lane, m0);
    _mm256_storeu_ps(lane + 8, m1);
    _mm256_storeu_ps(lane + 16, m2);
    _mm256_storeu_ps(lane + 24, m3);
    _mm256_storeu_ps((float *)pos, at0);
    _mm256_storeu_ps((float *)(pos + 8), at1);
    _mm256_storeu_ps((float *)(pos + 16), at2);
    _mm256_storeu_ps((float *)(pos + 24), at3);
    for (int k = 0; k < 32; k++) pos[k] += k;  /* block start + the lane's offset */
    return cpu_f32_arg_finish(lane, pos, 32, x, i, n, is_max, _mm256_movemask_ps(bad) != 0, has_nan);
  }
  return cpu_f32_arg_finish(NULL, NULL, 0, x, 0, n, is_max, 0, has_nan);
}

static int64_t cpu_f32_arg(const float *x, int64_t n, int is_max, int *has_nan) {
  int level = cpu_isa_level();
  if (level >= 2) return cpu_f32_arg_avx512(x, n, is_max, has_nan);
  if (level == 1) return cpu_f32_arg_avx2(x, n, is_max, has_nan);
  return cpu_f32_arg_sse2(x, n, is_max, has_nan);
}
/* Columns argmax/argmin of float32, four rows at once (cpu_columns4_fold_fn): per 8
** columns, a tournament of the four rows in order (strict comparisons: the earlier row
** wins a tie), then against the best so far, which a NaN best survives (no comparison
** with it is true). The tournament assumes no NaN among the four rows; 8 columns that
** hold one take the one-row rule instead (the first NaN wins), as do the last n % 8. */
static void cpu_f32_columns_arg_exact(const float *const *x, int64_t j0, int64_t j1,
                                      int32_t row, int is_max, const cpu_columns_acc *columns) {
  float *best = (float *)columns->best;
  int32_t *at = columns->at;
  for (int k = 0; k < 4; k++) {
    for (int64_t j = j0; j < j1; j++) {
      float v = x[k][j], b = best[j];
      if (b == b && ((is_max ? v > b : v < b) || v != v)) best[j] = v, at[j] = row + k;
    }
  }
}

#define CPU_F32_COLUMNS_PICK(l, la, r, ra, v, a, PRED)                                   \
  __m256 t_##v = _mm256_cmp_ps(r, l, PRED);                                              \
  __m256 v = _mm256_blendv_ps(l, r, t_##v);                                              \
  __m256 a = _mm256_blendv_ps(la, ra, t_##v)
#define CPU_F32_COLUMNS_ARG_LOOP(PRED)                                                   \
  for (; j + 8 <= n; j += 8) {                                                           \
    __m256 a = _mm256_loadu_ps(x[0] + j), b = _mm256_loadu_ps(x[1] + j);                 \
    __m256 c = _mm256_loadu_ps(x[2] + j), d = _mm256_loadu_ps(x[3] + j);                 \
    __m256 nan = _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q), _mm256_cmp_ps(c, d, _CMP_UNORD_Q)); \
    if (!_mm256_testz_ps(nan, nan)) {                                                    \
      cpu_f32_columns_arg_exact(x, j, j + 8, row, is_max, columns);                      \
      continue;                                                                          \
    }                                                                                    \
    __m256 e = _mm256_loadu_ps(best + j);                                                \
    __m256 ae = _mm256_loadu_ps((const float *)(at + j));                                \
    CPU_F32_COLUMNS_PICK(a, r0, b, r1, ab, pab, PRED);                                   \
    CPU_F32_COLUMNS_PICK(c, r2, d, r3, cd, pcd, PRED);                                   \
    CPU_F32_COLUMNS_PICK(ab, pab, cd, pcd, m, pm, PRED);                                 \
    CPU_F32_COLUMNS_PICK(e, ae, m, pm, out, pout, PRED);                                 \
    _mm256_storeu_ps(best + j, out);                                                     \
    _mm256_storeu_ps((float *)(at + j), pout);                                           \
  }
__attribute__((target("avx2"))) static void cpu_f32_columns_arg_avx2(const char *p, int64_t n,
                                                                      int64_t step, int64_t pos,
                                                                      int is_max,
                                                                      const cpu_columns_acc *columns) {
  const float *x[4] = { (const float *)p, (const float *)(p + step), (const float *)(p + 2 * step),
                        (const float *)(p + 3 * step) };
  float *best = (float *)columns->best;
  int32_t *at = columns->at;
  const int32_t row = (int32_t)(pos + 1);  /* x[0]'s, 1-based */
  const __m256 r0 = _mm256_castsi256_ps(_mm256_set1_epi32(row));
  const __m256 r1 = _mm256_castsi256_ps(_mm256_set1_epi32(row + 1));
  const __m256 r2 = _mm256_castsi256_ps(_mm256_set1_epi32(row + 2));
  const __m256 r3 = _mm256_castsi256_ps(_mm256_set1_epi32(row + 3));
  int64_t j = 0;
  if (is_max) CPU_F32_COLUMNS_ARG_LOOP(_CMP_GT_OQ)
  else CPU_F32_COLUMNS_ARG_LOOP(_CMP_LT_OQ)
  cpu_f32_columns_arg_exact(x, j, n, row, is_max, columns);
}

static void cpu_columns4_argmax_f32_avx2(const char *p, int64_t n, int64_t step, int64_t pos,
                                         const cpu_columns_acc *columns) {
  cpu_f32_columns_arg_avx2(p, n, step, pos, 1, columns);
}
static void cpu_columns4_argmin_f32_avx2(const char *p, int64_t n, int64_t step, int64_t pos,
                                         const cpu_columns_acc *columns) {
  cpu_f32_columns_arg_avx2(p, n, step, pos, 0, columns);
}

/* The four-row fold of op on float32 columns where the CPU has AVX2, else NULL. */
static cpu_columns4_fold_fn cpu_f32_columns4_arg(qt_redop op) {
  if (cpu_isa_level() < 1) return NULL;
  if (op == QT_ARGMAX) return cpu_columns4_argmax_f32_avx2;
  if (op == QT_ARGMIN) return cpu_columns4_argmin_f32_avx2;
  return NULL;
}
#else
#define CPU_SIMD_F32(x) 0
#define cpu_f32_best(x, n, is_max, has_nan) 0
#define cpu_f32_arg(x, n, is_max, has_nan) 0
#define cpu_f32_columns4_arg(op) NULL
#endif

/* The best of a contiguous run (n >= 1) by BETTER, with eight independent lanes so the
** comparisons do not wait on each other, and whether the run holds a NaN (then the best
** is meaningless and the caller looks for the first NaN). */
#define CPU_RUN_BEST(NAME, T, BETTER, HAS_NAN)                                           \
  static T NAME(const T *x, int64_t n, int *has_nan) {                                   \
    if (CPU_SIMD_F32(x)) return (T)cpu_f32_best((const float *)x, n, BETTER(1, 0), has_nan); \
    T m[8];                                                                              \
    int bad = 0;                                                                         \
    for (int k = 0; k < 8; k++) m[k] = x[0];                                             \
    int64_t i = 0;                                                                       \
    for (; i + 8 <= n; i += 8) {                                                         \
      for (int k = 0; k < 8; k++) {                                                      \
        T v = x[i + k];                                                                  \
        m[k] = BETTER(v, m[k]) ? v : m[k];                                               \
        if (HAS_NAN) bad |= v != v;                                                      \
      }                                                                                  \
    }                                                                                    \
    for (; i < n; i++) {                                                                 \
      T v = x[i];                                                                        \
      m[0] = BETTER(v, m[0]) ? v : m[0];                                                 \
      if (HAS_NAN) bad |= v != v;                                                        \
    }                                                                                    \
    for (int k = 1; k < 8; k++) m[0] = BETTER(m[k], m[0]) ? m[k] : m[0];                 \
    *has_nan = bad;                                                                      \
    return m[0];                                                                         \
  }

/* 0-based position of the first NaN of a contiguous run that has one. */
#define CPU_FIRST_NAN(NAME, T)                                                           \
  static int64_t NAME(const T *x, int64_t n) {                                           \
    int64_t i = 0;                                                                       \
    while (i < n - 1 && x[i] == x[i]) i++;                                               \
    return i;                                                                            \
  }

/* 0-based position of the first element equal to v in a contiguous run that holds it. */
#define CPU_FIRST_EQ(NAME, T)                                                            \
  static int64_t NAME(const T *x, int64_t n, T v) {                                      \
    int64_t i = 0;                                                                       \
    while (i < n - 1 && x[i] != v) i++;                                                  \
    return i;                                                                            \
  }

/* The first position of the best value of a contiguous run (1 <= n <= INT32_MAX) in one
** pass: the run is read as rows of 16 lanes, each lane keeping its best and the row it
** came from (strict comparison: a lane keeps its first); lanes are merged by value, then
** by position, and the tail is folded in order. `take` is spelled (v == v) & BETTER so
** GCC if-converts and vectorizes the lane loop. *has_nan says whether the run holds a
** NaN (then the caller looks for the first NaN instead). */
#define CPU_RUN_ARG(NAME, T, BETTER, HAS_NAN)                                            \
  static int64_t NAME(const T *x, int64_t n, int *has_nan) {                             \
    if (CPU_SIMD_F32(x)) return cpu_f32_arg((const float *)x, n, BETTER(1, 0), has_nan);  \
    enum { W = 16 };                                                                     \
    int32_t len = (int32_t)n, i = 0, best_at = 0;                                        \
    T best = x[0];                                                                       \
    int nan_seen = 0;                                                                    \
    if (len >= W) {                                                                      \
      T m[W];                                                                            \
      int32_t at[W], bad[W];                                                             \
      for (int k = 0; k < W; k++) m[k] = x[k], at[k] = 0, bad[k] = x[k] != x[k];         \
      for (i = W; i <= len - W; i += W) {                                                \
        for (int k = 0; k < W; k++) {                                                    \
          T v = x[i + k], b = m[k];                                                      \
          int32_t a = at[k];                                                             \
          int32_t take = (v == v) & BETTER(v, b);                                        \
          m[k] = take ? v : b;                                                           \
          at[k] = take ? i : a;                                                          \
          if (HAS_NAN) bad[k] |= v != v;                                                 \
        }                                                                                \
      }                                                                                  \
      best = m[0];                                                                       \
      best_at = at[0];                                                                   \
      for (int k = 0; k < W; k++) {                                                      \
        nan_seen |= bad[k];                                                              \
        int32_t pos_k = at[k] + k;                                                       \
        if (BETTER(m[k], best) || (m[k] == best && pos_k < best_at))                     \
          best = m[k], best_at = pos_k;                                                  \
      }                                                                                  \
    }                                                                                    \
    for (; i < len; i++) {                                                               \
      T v = x[i];                                                                        \
      if (BETTER(v, best)) best = v, best_at = i;                                        \
      if (HAS_NAN) nan_seen |= v != v;                                                   \
    }                                                                                    \
    *has_nan = nan_seen;                                                                 \
    return best_at;                                                                      \
  }

/* The columns max/min and argmax/argmin, one for every dtype: the NaN terms (v != v,
** b == b) are constant for integers and compile away. A best that is NaN stays: no
** comparison with it is true, and only another NaN, the same value, replaces it. */
#define CPU_COLUMNS_MAXMIN(NAME, SFX, T, BETTER)                                         \
  CPU_MULTIVERSION static void cpu_columns_##NAME##_##SFX(const char *p, int64_t n, int64_t pos,          \
                                         const cpu_columns_acc *columns) {               \
    const T *x = (const T *)p;                                                           \
    T *restrict best = (T *)columns->best;                                               \
    if (pos == columns->start) { memcpy(best, x, (size_t)n * sizeof(T)); return; }       \
    for (int64_t j = 0; j < n; j++) {                                                    \
      T v = x[j], b = best[j];                                                           \
      best[j] = (BETTER(v, b) | (v != v)) ? v : b;                                       \
    }                                                                                    \
  }
#define CPU_COLUMNS_ARG(NAME, SFX, T, BETTER)                                            \
  CPU_MULTIVERSION static void cpu_columns_arg##NAME##_##SFX(const char *p, int64_t n, int64_t pos,       \
                                            const cpu_columns_acc *columns) {            \
    const T *x = (const T *)p;                                                           \
    T *restrict best = (T *)columns->best;                                               \
    int32_t *restrict at = columns->at;                                                  \
    if (pos == columns->start) {                                                         \
      for (int64_t j = 0; j < n; j++) { best[j] = x[j]; at[j] = (int32_t)(pos + 1); }    \
      return;                                                                            \
    }                                                                                    \
    const int32_t row = (int32_t)(pos + 1);                                              \
    for (int64_t j = 0; j < n; j++) {                                                    \
      T v = x[j], b = best[j];                                                           \
      int take = (b == b) & (BETTER(v, b) | (v != v));                                   \
      best[j] = take ? v : b;                                                            \
      at[j] = take ? row : at[j];                                                        \
    }                                                                                    \
  }

#define CPU_MAXMIN_FLOAT(NAME, SFX, T, BETTER)                                           \
  static void cpu_strided_##NAME##_##SFX(const char *p, int64_t n, int64_t s,            \
                                         int64_t base_pos, cpu_acc *acc) {               \
    (void)base_pos;                                                                      \
    const T *x = (const T *)p;                                                           \
    double best = acc->f;                                                                \
    if (best != best || n <= 0) return;                                                  \
    if (s == 1) {                                                                        \
      int has_nan;                                                                       \
      T m = cpu_run##NAME##_##SFX(x, n, &has_nan);                                       \
      /* a zero best takes the sign of the first zero, as the sequential loop would */   \
      if (!has_nan && m == 0) m = x[cpu_first_eq_##SFX(x, n, m)];                        \
      if (has_nan) acc->f = x[cpu_first_nan_##SFX(x, n)];                                \
      else if (BETTER(m, best)) acc->f = m;                                              \
      return;                                                                            \
    }                                                                                    \
    for (int64_t i = 0; i < n; i++) {                                                    \
      T v = x[i * s];                                                                    \
      if (v != v) { best = v; break; }                                                   \
      if (BETTER(v, best)) best = v;                                                     \
    }                                                                                    \
    acc->f = best;                                                                       \
  }                                                                                      \
  CPU_COLUMNS_MAXMIN(NAME, SFX, T, BETTER)

#define CPU_MAXMIN_INT(NAME, SFX, T, BETTER)                                             \
  static void cpu_strided_##NAME##_##SFX(const char *p, int64_t n, int64_t s,            \
                                         int64_t base_pos, cpu_acc *acc) {               \
    (void)base_pos;                                                                      \
    const T *x = (const T *)p;                                                           \
    int64_t best = acc->i;                                                               \
    if (n <= 0) return;                                                                  \
    if (s == 1) {                                                                        \
      int unused;                                                                        \
      int64_t m = cpu_run##NAME##_##SFX(x, n, &unused);                                  \
      if (BETTER(m, best)) acc->i = m;                                                   \
      return;                                                                            \
    }                                                                                    \
    for (int64_t i = 0; i < n; i++) {                                                    \
      int64_t v = x[i * s];                                                              \
      if (BETTER(v, best)) best = v;                                                     \
    }                                                                                    \
    acc->i = best;                                                                       \
  }                                                                                      \
  CPU_COLUMNS_MAXMIN(NAME, SFX, T, BETTER)


/* ---- argmax / argmin: strict comparison, so the first of equal values wins; the first
** NaN wins over everything and nothing replaces it. Values are kept in f (floats) or i
** (integers); pos is 1-based. A contiguous run is done in one pass (cpu_runarg*). */
#define CPU_ARG_FLOAT(NAME, SFX, T, BETTER)                                              \
  static void cpu_strided_arg##NAME##_##SFX(const char *p, int64_t n, int64_t s,         \
                                            int64_t base_pos, cpu_acc *acc) {            \
    const T *x = (const T *)p;                                                           \
    if (n <= 0) return;                                                                  \
    if (acc->pos != 0 && acc->f != acc->f) return;                                       \
    if (s == 1 && n <= INT32_MAX) {                                                      \
      int has_nan;                                                                       \
      int64_t at = cpu_runarg##NAME##_##SFX(x, n, &has_nan);                             \
      if (has_nan) at = cpu_first_nan_##SFX(x, n);                                       \
      else if (acc->pos != 0 && !BETTER(x[at], acc->f)) return;                          \
      acc->f = x[at];                                                                    \
      acc->pos = base_pos + at + 1;                                                      \
      return;                                                                            \
    }                                                                                    \
    int64_t i = 0;                                                                       \
    if (acc->pos == 0) { acc->f = x[0]; acc->pos = base_pos + 1; i = 1; }                \
    double best = acc->f;                                                                \
    int64_t at = acc->pos;                                                               \
    if (best == best) {                                                                  \
      for (; i < n; i++) {                                                               \
        T v = x[i * s];                                                                  \
        if (v != v) { best = v; at = base_pos + i + 1; break; }                          \
        if (BETTER(v, best)) { best = v; at = base_pos + i + 1; }                        \
      }                                                                                  \
    }                                                                                    \
    acc->f = best;                                                                       \
    acc->pos = at;                                                                       \
  }                                                                                      \
  CPU_COLUMNS_ARG(NAME, SFX, T, BETTER)

#define CPU_ARG_INT(NAME, SFX, T, BETTER)                                                \
  static void cpu_strided_arg##NAME##_##SFX(const char *p, int64_t n, int64_t s,         \
                                            int64_t base_pos, cpu_acc *acc) {            \
    const T *x = (const T *)p;                                                           \
    if (n <= 0) return;                                                                  \
    if (s == 1 && n <= INT32_MAX) {                                                      \
      int unused;                                                                        \
      int64_t at = cpu_runarg##NAME##_##SFX(x, n, &unused);                              \
      if (acc->pos != 0 && !BETTER((int64_t)x[at], acc->i)) return;                      \
      acc->i = x[at];                                                                    \
      acc->pos = base_pos + at + 1;                                                      \
      return;                                                                            \
    }                                                                                    \
    int64_t i = 0;                                                                       \
    if (acc->pos == 0) { acc->i = x[0]; acc->pos = base_pos + 1; i = 1; }                \
    int64_t best = acc->i, at = acc->pos;                                                \
    for (; i < n; i++) {                                                                 \
      int64_t v = x[i * s];                                                              \
      if (BETTER(v, best)) { best = v; at = base_pos + i + 1; }                          \
    }                                                                                    \
    acc->i = best;                                                                       \
    acc->pos = at;                                                                       \
  }                                                                                      \
  CPU_COLUMNS_ARG(NAME, SFX, T, BETTER)


/* ---- every reducer of every dtype, by the dtype's kind (QT_DTYPE_LIST) */
#define CPU_REDUCERS_FLOAT(SFX, T)                                                       \
  CPU_PAIRWISE(cpu_pairwise_##SFX, T)                                                    \
  CPU_SUM_FLOAT(SFX, T)                                                                  \
  CPU_RUN_BEST(cpu_runmax_##SFX, T, CPU_GT, 1)                                           \
  CPU_RUN_BEST(cpu_runmin_##SFX, T, CPU_LT, 1)                                           \
  CPU_FIRST_NAN(cpu_first_nan_##SFX, T)                                                  \
  CPU_FIRST_EQ(cpu_first_eq_##SFX, T)                                                    \
  CPU_RUN_ARG(cpu_runargmax_##SFX, T, CPU_GT, 1)                                         \
  CPU_RUN_ARG(cpu_runargmin_##SFX, T, CPU_LT, 1)                                         \
  CPU_MAXMIN_FLOAT(max, SFX, T, CPU_GT)                                                  \
  CPU_MAXMIN_FLOAT(min, SFX, T, CPU_LT)                                                  \
  CPU_ARG_FLOAT(max, SFX, T, CPU_GT)                                                     \
  CPU_ARG_FLOAT(min, SFX, T, CPU_LT)
#define CPU_REDUCERS_INT(SFX, T)                                                         \
  CPU_SUM_INT(SFX, T)                                                                    \
  CPU_RUN_BEST(cpu_runmax_##SFX, T, CPU_GT, 0)                                           \
  CPU_RUN_BEST(cpu_runmin_##SFX, T, CPU_LT, 0)                                           \
  CPU_RUN_ARG(cpu_runargmax_##SFX, T, CPU_GT, 0)                                         \
  CPU_RUN_ARG(cpu_runargmin_##SFX, T, CPU_LT, 0)                                         \
  CPU_MAXMIN_INT(max, SFX, T, CPU_GT)                                                    \
  CPU_MAXMIN_INT(min, SFX, T, CPU_LT)                                                    \
  CPU_ARG_INT(max, SFX, T, CPU_GT)                                                       \
  CPU_ARG_INT(min, SFX, T, CPU_LT)
#define CPU_REDUCERS_BOOL CPU_REDUCERS_INT  /* 0 and 1, summed and compared as integers */
#define CPU_REDUCERS_HALF(SFX, T)          /* float16/bfloat16 arrive widened (device.h) */
#define CPU_REDUCERS_(P, E, sfx, name, T, U, size, kind, ...) CPU_REDUCERS_##kind(sfx, T)
QT_DTYPE_LIST(CPU_REDUCERS_, ~)

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options  /* ends "tree-vectorize" (every reducer above) */
#endif

/* [dtype][op]; MEAN shares SUM's reducers. */
#define CPU_RED_TABLE_ROW_(P, E, sfx, name, T, U, size, kind, ...)                            \
  QT_UNLESS_HALF_##kind(                                                                 \
  [E] = { cpu_##P##sum_##sfx, cpu_##P##sum_##sfx, cpu_##P##max_##sfx, cpu_##P##min_##sfx, \
          cpu_##P##argmax_##sfx, cpu_##P##argmin_##sfx },)
static const cpu_strided_fold_fn cpu_strided_folds[QT_NDTYPES][QT_NREDOPS] = {
  QT_DTYPE_LIST(CPU_RED_TABLE_ROW_, strided_)
};
static const cpu_columns_fold_fn cpu_columns_folds[QT_NDTYPES][QT_NREDOPS] = {
  QT_DTYPE_LIST(CPU_RED_TABLE_ROW_, columns_)
};
#define CPU_RED4_TABLE_ROW_(P, E, sfx, name, T, U, size, kind, ...)                           \
  QT_UNLESS_HALF_##kind([E] = { cpu_columns4_sum_##sfx, cpu_columns4_sum_##sfx },)
static const cpu_columns4_fold_fn cpu_columns4_folds[QT_NDTYPES][QT_NREDOPS] = {
  QT_DTYPE_LIST(CPU_RED4_TABLE_ROW_, ~)
};

static void cpu_acc_init(cpu_acc *acc, qt_redop op) {
  memset(acc, 0, sizeof *acc);
  if (op == QT_MAX) acc->f = -INFINITY, acc->i = INT64_MIN;
  if (op == QT_MIN) acc->f = INFINITY, acc->i = INT64_MAX;
}

/* The dtype the result must have (device.h's table). */
static qt_dtype cpu_reduce_dtype(qt_redop op, qt_dtype src) {
  switch (op) {
    case QT_SUM: case QT_PROD: return qt_is_float(src) ? src : QT_I64;
    case QT_ARGMAX: case QT_ARGMIN: return QT_I64;
    default: return src;
  }
}

/* A float sum's value: f plus its compensation, or f alone once f is infinite or NaN
** (the compensation of an overflowed sum is inf - inf = NaN, which must not turn
** 1 + inf into NaN: the GPU, summing plainly, gets inf). */
static inline double cpu_acc_sum(const cpu_acc *acc) {
  return isfinite(acc->f) ? acc->f + acc->c : acc->f;
}

/* Writes a finished reduction of `count` elements to out (the result dtype). */
static void cpu_reduce_finish(const cpu_acc *acc, qt_redop op, qt_dtype src, int64_t count,
                              char *out) {
  switch (op) {
    case QT_SUM:
      if (qt_is_float(src)) qt_scalar_store(src, out, qt_scalar_from_double(cpu_acc_sum(acc)));
      else *(int64_t *)out = (int64_t)acc->u;
      break;
    case QT_MEAN: {
      double m = count > 0 ? cpu_acc_sum(acc) / (double)count : NAN;
      qt_scalar_store(src, out, qt_scalar_from_double(m));
      break;
    }
    case QT_MAX: case QT_MIN:  /* the source's dtype: floats kept in f, integers in i */
      qt_scalar_store(src, out, qt_is_float(src) ? qt_scalar_from_double(acc->f)
                                                 : qt_scalar_i(acc->i));
      break;
    default:
      *(int64_t *)out = acc->pos;
      break;
  }
}

/* Merges part (a later run of the same reduction) into acc, as folding part's elements
** after acc's would: sums add (compensated), max/min keep the first best, NaN wins. */
static void cpu_acc_merge(cpu_acc *acc, const cpu_acc *part, qt_redop op, qt_dtype dtype) {
  bool fl = qt_is_float(dtype);
  switch (op) {
    case QT_SUM: case QT_MEAN:
      if (fl) {
        cpu_neumaier(acc, part->f);
        acc->c += part->c;
      } else {
        acc->u += part->u;
      }
      break;
    case QT_MAX: case QT_MIN: case QT_ARGMAX: case QT_ARGMIN: {
      bool is_max = op == QT_MAX || op == QT_ARGMAX, arg = op == QT_ARGMAX || op == QT_ARGMIN;
      if (arg && part->pos == 0) break;
      if (arg && acc->pos == 0) { *acc = *part; break; }
      bool take;
      if (fl) {
        if (acc->f != acc->f) take = false;          /* the first NaN stays */
        else if (part->f != part->f) take = true;
        else take = is_max ? part->f > acc->f : part->f < acc->f;
      } else {
        take = is_max ? part->i > acc->i : part->i < acc->i;
      }
      if (take) { acc->f = part->f; acc->i = part->i; acc->pos = part->pos; }
      break;
    }
    default: break;
  }
}

/* Folds elements [begin, end) of the collapsed view v (row-major positions) into acc:
** cpu_walk_range visits the rows (cut at the ends), and a run's 0-based position counts
** up with them, as they come in order. */
typedef struct cpu_fold_walk {
  cpu_strided_fold_fn fold;
  cpu_acc *acc;
  int64_t pos;
} cpu_fold_walk;

static void cpu_fold_row(char **p, const int64_t *s, int64_t n, const cpu_args *args) {
  cpu_fold_walk *w = (cpu_fold_walk *)args->state;
  w->fold(p[0], n, s[0], w->pos, w->acc);
  w->pos += n;
}

static void cpu_fold_range(qt_view *v, cpu_strided_fold_fn fold, int64_t begin, int64_t end,
                           cpu_acc *acc) {
  cpu_fold_walk w = { fold, acc, begin };
  cpu_args args;
  memset(&args, 0, sizeof args);
  args.state = &w;
  cpu_walk_range(&v, 1, cpu_fold_row, &args, begin, end);
}

/* Full reductions are folded in pieces of CPU_REDUCE_PIECE elements, on the pool, and the
** pieces merged in order: the pieces are the same for every thread count, so the result
** is too. (Below one piece, one fold, as before the pool.) */
#define CPU_REDUCE_PIECE ((int64_t)1 << 16)

typedef struct cpu_all_job {
  qt_view *v;
  cpu_strided_fold_fn fold;
  qt_redop op;
  cpu_acc *parts;
} cpu_all_job;

static void cpu_all_chunk(void *arg, int64_t chunk) {
  const cpu_all_job *j = (const cpu_all_job *)arg;
  int64_t begin = chunk * CPU_REDUCE_PIECE;
  int64_t end = begin + CPU_REDUCE_PIECE < j->v->numel ? begin + CPU_REDUCE_PIECE : j->v->numel;
  cpu_acc_init(&j->parts[chunk], j->op);
  cpu_fold_range(j->v, j->fold, begin, end, &j->parts[chunk]);
}

/* Everything into one element: rows of the collapsed source in row-major order, so
** positions count up across rows. */
static int cpu_reduce_all(qt_redop op, const qt_view *dst, const qt_view *src, qt_err *err) {
  qt_view v = *src;
  qt_view *vp = &v;
  qt_views_collapse(&vp, 1);
  v.numel = cpu_view_numel(&v);
  cpu_acc acc;
  cpu_acc_init(&acc, op);
  cpu_strided_fold_fn fold = cpu_strided_folds[src->dtype][op];
  int64_t pieces = (v.numel + CPU_REDUCE_PIECE - 1) / CPU_REDUCE_PIECE;
  if (pieces <= 1) {
    cpu_fold_range(&v, fold, 0, v.numel, &acc);
  } else {
    cpu_acc *parts = malloc((size_t)pieces * sizeof *parts);
    if (parts == NULL) return qt_errorf(err, "%s: out of host memory", qt_redop_name(op));
    cpu_all_job job = { &v, fold, op, parts };
    cpu_parallel(pieces, cpu_all_chunk, &job);
    acc = parts[0];
    for (int64_t k = 1; k < pieces; k++) cpu_acc_merge(&acc, &parts[k], op, src->dtype);
    free(parts);
  }
  cpu_reduce_finish(&acc, op, src->dtype, v.numel, (char *)dst->data);
  return 0;
}

/* The "outer" views of a reduction along dim (dst, and src without dim), collapsed
** together: each outer element reduces a run of `len` elements with stride `rstride`. */
typedef struct cpu_outer {
  qt_view dst, src;
  int nd;
  int64_t n, rows, s_in, d_in, len, rstride;
} cpu_outer;

static bool cpu_outer_make(cpu_outer *o, const qt_view *dst, const qt_view *src, int dim) {
  o->len = src->size[dim];
  o->rstride = src->stride[dim];
  memset(&o->src, 0, sizeof o->src);
  int k = 0;
  for (int d = 0; d < src->ndim; d++) {
    if (d == dim) continue;
    o->src.size[k] = src->size[d];
    o->src.stride[k] = src->stride[d];
    k++;
  }
  o->src.ndim = k;
  o->src.dtype = src->dtype;
  o->src.data = src->data;
  o->src.numel = cpu_view_numel(&o->src);
  for (int d = k; d < QT_MAXDIM; d++) o->src.size[d] = 1, o->src.stride[d] = 0;
  cpu_view_make(&o->dst, &o->src, dst->data, dst->dtype, dst->stride);
  if (o->src.numel == 0) return false;
  qt_view *views[2] = { &o->dst, &o->src };
  qt_views_collapse(views, 2);
  o->nd = o->src.ndim;
  o->n = o->src.size[o->nd - 1];
  o->rows = o->src.numel / o->n;
  o->s_in = o->src.stride[o->nd - 1];
  o->d_in = o->dst.stride[o->nd - 1];
  return true;
}

/* The byte offsets of outer row r's first element in src and dst. */
static void cpu_outer_row(const cpu_outer *o, int64_t r, int64_t *src_off, int64_t *dst_off) {
  int64_t so = 0, dof = 0;
  for (int d = o->nd - 2; d >= 0; d--) {
    int64_t i = r % o->src.size[d];
    r /= o->src.size[d];
    so += i * o->src.stride[d];
    dof += i * o->dst.stride[d];
  }
  *src_off = so * (int64_t)qt_elsize(o->src.dtype);
  *dst_off = dof * (int64_t)qt_elsize(o->dst.dtype);
}

/* Reductions along a dim run on the pool by tasks. A task is (outer row, a block of at
** most CPU_REDUCE_COLS columns, and, for a columns fold, a segment of the reduced dim's
** rows); a chunk is a run of tasks of about CPU_PAR_GRAIN elements of input. The blocks
** narrow (to CPU_REDUCE_MIN_COLS for columns folds, and to one output otherwise) until
** there are a few tasks per thread, which changes nothing in what each output computes.
**
** A columns fold reads every row of its block as one run, so the block is wide (16 KiB
** of float32 a row: shorter runs starve the hardware prefetcher), and the reduced dim is
** cut into segments of cpu_dim_segment rows, so that even one block has tasks for every
** thread.
** Each segment's result goes to a partial (cpu_part), and a second pass merges an
** output's partials in segment order (cpu_acc_merge): as the segments depend on the shape
** alone, never on the thread count, so does every result. Max, min and the arg ops merge
** to exactly what one run gives (the first best, NaN as it wins); a float sum is the
** segments' compensated sums added by Neumaier's rule. */
#define CPU_REDUCE_COLS 4096
#define CPU_REDUCE_MIN_COLS 128
#define CPU_REDUCE_SEGMENT 256   /* rows; a multiple of CPU_COLUMNS_SUM_BLOCK */
#define CPU_REDUCE_MAX_SEGMENTS 64

/* The segment length for a reduced dim of len rows: CPU_REDUCE_SEGMENT, or longer (a
** multiple of CPU_COLUMNS_SUM_BLOCK) so that there are at most CPU_REDUCE_MAX_SEGMENTS,
** which bounds the partials to 1 KiB an output. */
static int64_t cpu_dim_segment(int64_t len) {
  int64_t seg = (len + CPU_REDUCE_MAX_SEGMENTS - 1) / CPU_REDUCE_MAX_SEGMENTS;
  seg = (seg + CPU_COLUMNS_SUM_BLOCK - 1) / CPU_COLUMNS_SUM_BLOCK * CPU_COLUMNS_SUM_BLOCK;
  return seg > CPU_REDUCE_SEGMENT ? seg : CPU_REDUCE_SEGMENT;
}

/* One segment's result for one output: a float sum's (f, c), an integer sum's u, a best
** value (f for floats, i for integers) and, for the arg ops, its 1-based position. */
typedef struct cpu_part {
  union { double f; int64_t i; uint64_t u; } v;
  union { double c; int64_t pos; } w;
} cpu_part;

static void cpu_part_pack(cpu_part *p, const cpu_acc *acc, qt_redop op, qt_dtype dt) {
  bool fl = qt_is_float(dt);
  if (op == QT_SUM || op == QT_MEAN) {
    if (fl) p->v.f = acc->f, p->w.c = acc->c;
    else p->v.u = acc->u, p->w.pos = 0;
  } else {
    if (fl) p->v.f = acc->f;
    else p->v.i = acc->i;
    p->w.pos = acc->pos;
  }
}

static void cpu_part_unpack(cpu_acc *acc, const cpu_part *p, qt_redop op, qt_dtype dt) {
  bool fl = qt_is_float(dt);
  memset(acc, 0, sizeof *acc);
  if (op == QT_SUM || op == QT_MEAN) {
    if (fl) acc->f = p->v.f, acc->c = p->w.c;
    else acc->u = p->v.u;
  } else {
    if (fl) acc->f = p->v.f;
    else acc->i = p->v.i;
    acc->pos = p->w.pos;
  }
}

typedef struct cpu_dim_job {
  const cpu_outer *o;
  qt_redop op;
  cpu_strided_fold_fn fold_strided;
  cpu_columns_fold_fn fold_columns;
  cpu_columns4_fold_fn fold_columns4;  /* four rows at once, or NULL */
  bool by_columns;
  int64_t width;           /* columns a block (at most CPU_REDUCE_COLS) */
  int64_t blocks;          /* column blocks per row */
  int64_t seg_len;         /* rows a segment (the whole len for strided folds) */
  int64_t segs;            /* segments a block */
  cpu_part *parts;         /* segs > 1: [output][segment], output = outer row * n + column */
  int64_t tasks_per_chunk;
  int64_t tasks;
  int64_t outputs_per_chunk;  /* the merge pass */
  bool oom;
} cpu_dim_job;

/* Columns [j0, j1) of outer row r, rows [i0, i1) of the reduced dim (segment k): into
** dst when the segment is the whole dim, else into the partials. cols: accumulators for
** CPU_REDUCE_COLS columns. */
static void cpu_dim_task(const cpu_dim_job *jb, int64_t r, int64_t j0, int64_t j1, int64_t k,
                         cpu_columns_acc *cols) {
  const cpu_outer *o = jb->o;
  qt_redop op = jb->op;
  qt_dtype dt = o->src.dtype;
  int64_t es = (int64_t)qt_elsize(dt), des = (int64_t)qt_elsize(o->dst.dtype);
  int64_t so, dof;
  cpu_outer_row(o, r, &so, &dof);
  const char *ps = (const char *)o->src.data + so;
  char *pd = (char *)o->dst.data + dof;
  int64_t n = j1 - j0, len = o->len;
  if (cols != NULL) {
    int64_t i0 = k * jb->seg_len, i1 = i0 + jb->seg_len < len ? i0 + jb->seg_len : len;
    bool float_sum = (op == QT_SUM || op == QT_MEAN) && qt_is_float(dt);
    for (int64_t j = 0; j < n; j++) cols->f[j] = 0, cols->c[j] = 0, cols->b[j] = 0, cols->u[j] = 0;
    cols->start = i0;
    int64_t step = o->rstride * es, i = i0;
    if (!(op == QT_SUM || op == QT_MEAN)) {  /* the first row starts the bests */
      jb->fold_columns(ps + i * step + j0 * es, n, i, cols);
      i++;
    }
    while (i < i1) {
      /* to the end of the block of CPU_COLUMNS_SUM_BLOCK rows (segments start on one) */
      int64_t end = (i / CPU_COLUMNS_SUM_BLOCK + 1) * CPU_COLUMNS_SUM_BLOCK;
      if (end > i1) end = i1;
      if (jb->fold_columns4 != NULL)
        for (; i + 4 <= end; i += 4) jb->fold_columns4(ps + i * step + j0 * es, n, step, i, cols);
      for (; i < end; i++) jb->fold_columns(ps + i * step + j0 * es, n, i, cols);
      if (float_sum) cpu_columns_sum_flush(cols, n);
    }
    for (int64_t j = 0; j < n; j++) {
      cpu_acc acc;
      memset(&acc, 0, sizeof acc);
      if (op == QT_SUM || op == QT_MEAN) {
        /* Kahan's -c -> f + c */
        acc.f = cols->f[j], acc.c = -cols->c[j], acc.u = cols->u[j];
      } else {
        /* floats into f, integers into i, as the strided folds */
        qt_scalar best = qt_scalar_load(dt, (const char *)cols->best + j * qt_elsize(dt));
        if (qt_is_float(dt)) acc.f = best.f;
        else acc.i = best.i;
        acc.pos = cols->at[j];
      }
      if (jb->segs == 1) cpu_reduce_finish(&acc, op, dt, len, pd + (j0 + j) * o->d_in * des);
      else cpu_part_pack(&jb->parts[(r * o->n + j0 + j) * jb->segs + k], &acc, op, dt);
    }
  } else {
    for (int64_t j = j0; j < j1; j++) {
      cpu_acc acc;
      cpu_acc_init(&acc, op);
      if (len > 0) jb->fold_strided(ps + j * o->s_in * es, len, o->rstride, 0, &acc);
      cpu_reduce_finish(&acc, op, dt, len, pd + j * o->d_in * des);
    }
  }
}

static void cpu_dim_chunk(void *arg, int64_t chunk) {
  cpu_dim_job *jb = (cpu_dim_job *)arg;
  cpu_columns_acc cols, *colsp = NULL;
  void *mem = NULL;
  if (jb->by_columns) {
    /* 44 bytes a column: f, c, b (doubles), u (uint64), best (8 bytes), at (int32) */
    mem = malloc((size_t)CPU_REDUCE_COLS * 44);
    if (mem == NULL) {
      __atomic_store_n(&jb->oom, true, __ATOMIC_RELAXED);
      return;
    }
    cols.f = (double *)mem;
    cols.c = cols.f + CPU_REDUCE_COLS;
    cols.b = cols.c + CPU_REDUCE_COLS;
    cols.u = (uint64_t *)(cols.b + CPU_REDUCE_COLS);
    cols.best = cols.u + CPU_REDUCE_COLS;
    cols.at = (int32_t *)((char *)cols.best + (size_t)CPU_REDUCE_COLS * 8);
    colsp = &cols;
  }
  int64_t t0 = chunk * jb->tasks_per_chunk;
  int64_t t1 = t0 + jb->tasks_per_chunk < jb->tasks ? t0 + jb->tasks_per_chunk : jb->tasks;
  for (int64_t t = t0; t < t1; t++) {
    int64_t r = t / (jb->blocks * jb->segs), rest = t % (jb->blocks * jb->segs);
    int64_t b = rest / jb->segs, k = rest % jb->segs;
    int64_t j0 = b * jb->width;
    int64_t j1 = j0 + jb->width < jb->o->n ? j0 + jb->width : jb->o->n;
    cpu_dim_task(jb, r, j0, j1, k, colsp);
  }
  free(mem);
}

/* The merge pass: every output's partials, in segment order, into dst. */
static void cpu_dim_merge_chunk(void *arg, int64_t chunk) {
  const cpu_dim_job *jb = (const cpu_dim_job *)arg;
  const cpu_outer *o = jb->o;
  qt_dtype dt = o->src.dtype;
  int64_t des = (int64_t)qt_elsize(o->dst.dtype), outputs = o->rows * o->n;
  int64_t q0 = chunk * jb->outputs_per_chunk;
  int64_t q1 = q0 + jb->outputs_per_chunk < outputs ? q0 + jb->outputs_per_chunk : outputs;
  for (int64_t q = q0; q < q1; q++) {
    const cpu_part *p = jb->parts + q * jb->segs;
    cpu_acc acc, part;
    cpu_part_unpack(&acc, &p[0], jb->op, dt);
    for (int64_t k = 1; k < jb->segs; k++) {
      cpu_part_unpack(&part, &p[k], jb->op, dt);
      cpu_acc_merge(&acc, &part, jb->op, dt);
    }
    int64_t r = q / o->n, j = q % o->n, so, dof;
    cpu_outer_row(o, r, &so, &dof);
    cpu_reduce_finish(&acc, jb->op, dt, o->len, (char *)o->dst.data + dof + j * o->d_in * des);
  }
}

/* Along dim. When the outer innermost dimension is contiguous in src and the reduced
** dimension is not, whole rows are folded at once into an array of accumulators (a
** columns fold). */
static int cpu_reduce_dim(qt_redop op, const qt_view *dst, const qt_view *src, int dim,
                          qt_err *err) {
  cpu_outer o;
  if (!cpu_outer_make(&o, dst, src, dim)) return 0;
  cpu_dim_job jb;
  memset(&jb, 0, sizeof jb);
  jb.o = &o;
  jb.op = op;
  jb.fold_strided = cpu_strided_folds[src->dtype][op];
  jb.fold_columns = cpu_columns_folds[src->dtype][op];
  jb.fold_columns4 = cpu_columns4_folds[src->dtype][op];
  if (jb.fold_columns4 == NULL && src->dtype == QT_F32) jb.fold_columns4 = cpu_f32_columns4_arg(op);
  jb.by_columns = o.len > 1 && o.n > 1 && o.s_in == 1 && o.rstride != 1 && o.len <= INT32_MAX;
  int64_t len1 = o.len > 0 ? o.len : 1;
  jb.seg_len = jb.by_columns ? cpu_dim_segment(o.len) : len1;
  jb.segs = (len1 + jb.seg_len - 1) / jb.seg_len;
  int64_t piece;
  int64_t want = cpu_par_pieces(o.rows * o.n * len1, &piece);  /* tasks: the pool's cut */
  int64_t min_width = jb.by_columns ? CPU_REDUCE_MIN_COLS : 1;
  jb.width = jb.by_columns ? CPU_REDUCE_COLS : 1024;
  while (jb.width > min_width && o.rows * ((o.n + jb.width - 1) / jb.width) * jb.segs < want)
    jb.width /= 2;
  if (jb.width < min_width) jb.width = min_width;
  jb.blocks = (o.n + jb.width - 1) / jb.width;
  jb.tasks = o.rows * jb.blocks * jb.segs;
  int64_t per_task = (o.n < jb.width ? o.n : jb.width) * (jb.segs > 1 ? jb.seg_len : len1);
  jb.tasks_per_chunk = CPU_PAR_GRAIN / per_task + 1;
  int64_t outputs = o.rows * o.n;
  if (jb.segs > 1) {
    jb.parts = malloc((size_t)outputs * (size_t)jb.segs * sizeof *jb.parts);
    if (jb.parts == NULL) return qt_errorf(err, "%s: out of host memory", qt_redop_name(op));
  }
  cpu_parallel((jb.tasks + jb.tasks_per_chunk - 1) / jb.tasks_per_chunk, cpu_dim_chunk, &jb);
  if (jb.segs > 1 && !jb.oom) {
    jb.outputs_per_chunk = CPU_PAR_GRAIN / (4 * jb.segs) + 1;
    cpu_parallel((outputs + jb.outputs_per_chunk - 1) / jb.outputs_per_chunk,
                 cpu_dim_merge_chunk, &jb);
  }
  free(jb.parts);
  if (jb.oom) return qt_errorf(err, "%s: out of host memory", qt_redop_name(op));
  return 0;
}

/* ====================================================== prod, var, std, norm, logsumexp */
/* These stream each reduction's elements through a block of CPU_STREAM_BLOCK values in
** float64 (int64 for integer products), and fold each block into the running state: var
** and std take the block's two-pass mean and sum of squared deviations and merge them by
** Chan's formula (never the naive sum of squares, which loses everything for values like
** 1e8 + noise); logsumexp the block's max and sum of exp(x - max), rescaled on merging.
** The accumulators are float64 for every float dtype (a float16 would fold the same way). */

#define CPU_STREAM_BLOCK 256

/* Loads n elements at stride s (in elements) as float64, or as int64 for integer products. */
typedef void (*cpu_load_f64_fn)(const char *p, int64_t n, int64_t s, double *out);
typedef void (*cpu_load_i64_fn)(const char *p, int64_t n, int64_t s, int64_t *out);
#define CPU_LOADERS_(P, E, sfx, name, T, U, size, kind, ...) QT_UNLESS_HALF_##kind(CPU_LOADERS_AT_(sfx, T))
#define CPU_LOADERS_AT_(sfx, T)                                                          \
  static void cpu_load_f64_##sfx(const char *p, int64_t n, int64_t s, double *out) {     \
    const T *x = (const T *)p;                                                           \
    for (int64_t i = 0; i < n; i++) out[i] = (double)x[i * s];                           \
  }                                                                                      \
  static void cpu_load_i64_##sfx(const char *p, int64_t n, int64_t s, int64_t *out) {    \
    const T *x = (const T *)p;                                                           \
    for (int64_t i = 0; i < n; i++) out[i] = (int64_t)x[i * s];                          \
  }  /* (the int64 loader of a float dtype is never called: float products stay in f64) */
QT_DTYPE_LIST(CPU_LOADERS_, ~)
#define CPU_LOADER_ROW_(P, E, sfx, name, T, U, size, kind, ...) \
  QT_UNLESS_HALF_##kind([E] = cpu_load_##P##_##sfx,)
static const cpu_load_f64_fn cpu_load_f64[QT_NDTYPES] = { QT_DTYPE_LIST(CPU_LOADER_ROW_, f64) };
static const cpu_load_i64_fn cpu_load_i64[QT_NDTYPES] = { QT_DTYPE_LIST(CPU_LOADER_ROW_, i64) };

/* What norm computes for its p. */
enum { CPU_NORM_1, CPU_NORM_2, CPU_NORM_INF, CPU_NORM_NEG_INF, CPU_NORM_0, CPU_NORM_P };
static int cpu_norm_mode(double p) {
  if (p == 1) return CPU_NORM_1;
  if (p == 2) return CPU_NORM_2;
  if (p == INFINITY) return CPU_NORM_INF;
  if (p == -INFINITY) return CPU_NORM_NEG_INF;
  if (p == 0) return CPU_NORM_0;
  return CPU_NORM_P;
}

/* The running state of one streamed reduction. */
typedef struct cpu_stream {
  qt_redop op;
  double arg;
  int norm_mode;
  bool int_prod;        /* PROD of an integer or bool source: wrapping int64 */
  double n, mean, m2;   /* VAR, STD: count, mean (less shift), sum of squared deviations */
  double shift;         /* VAR, STD: the run's first element, taken off every element */
  cpu_acc sum;          /* PROD (f: the product), NORM (sums: f + c; extremes: f) */
  uint64_t u;           /* integer PROD */
  double m, s;          /* LOGSUMEXP: the max so far and sum of exp(x - m) */
  union { double f[CPU_STREAM_BLOCK]; int64_t i[CPU_STREAM_BLOCK]; } buf;
} cpu_stream;

static void cpu_stream_init(cpu_stream *st, qt_redop op, double arg, qt_dtype src) {
  memset(&st->sum, 0, sizeof st->sum);
  st->op = op;
  st->arg = arg;
  st->norm_mode = cpu_norm_mode(arg);
  st->int_prod = op == QT_PROD && !qt_is_float(src);
  st->n = st->mean = st->m2 = st->shift = 0;
  st->u = 1;
  st->m = -INFINITY;
  st->s = 0;
  if (op == QT_PROD) st->sum.f = 1;
  if (op == QT_NORM && st->norm_mode == CPU_NORM_NEG_INF) st->sum.f = INFINITY;
}

/* Folds the k >= 1 float64 values in st->buf.f into the state. */
static void cpu_stream_block(cpu_stream *st, int64_t k) {
  const double *x = st->buf.f;
  switch (st->op) {
    case QT_PROD: {
      double p = st->sum.f;
      for (int64_t i = 0; i < k; i++) p *= x[i];
      st->sum.f = p;
      break;
    }
    case QT_VAR: case QT_STD: {
      /* Every value less the run's first: the block means are then small, so merging
      ** them loses nothing to a mean of 1e9's magnitude (x - shift is exact for close x). */
      if (st->n == 0) st->shift = x[0];
      double b = 0, bm2 = 0;
      for (int64_t i = 0; i < k; i++) b += x[i] - st->shift;
      b /= (double)k;
      for (int64_t i = 0; i < k; i++) {
        double d = (x[i] - st->shift) - b;
        bm2 += d * d;
      }
      if (st->n == 0) {
        st->n = (double)k, st->mean = b, st->m2 = bm2;
      } else {  /* Chan, Golub and LeVeque: merging two (n, mean, m2) */
        double n = st->n + (double)k, delta = b - st->mean;
        st->mean += delta * ((double)k / n);
        st->m2 += bm2 + delta * delta * (st->n * (double)k / n);
        st->n = n;
      }
      break;
    }
    case QT_NORM: {
      double acc = 0;
      switch (st->norm_mode) {
        case CPU_NORM_1: for (int64_t i = 0; i < k; i++) acc += fabs(x[i]); break;
        case CPU_NORM_2: for (int64_t i = 0; i < k; i++) acc += x[i] * x[i]; break;
        case CPU_NORM_0: for (int64_t i = 0; i < k; i++) acc += x[i] != 0; break;
        case CPU_NORM_P: for (int64_t i = 0; i < k; i++) acc += pow(fabs(x[i]), st->arg); break;
        default: {  /* the largest or smallest magnitude; NaN wins */
          bool max = st->norm_mode == CPU_NORM_INF;
          double best = st->sum.f;
          for (int64_t i = 0; i < k && best == best; i++) {
            double a = fabs(x[i]);
            if (a != a || (max ? a > best : a < best)) best = a;
          }
          st->sum.f = best;
          return;
        }
      }
      cpu_neumaier(&st->sum, acc);
      break;
    }
    case QT_LOGSUMEXP: {
      if (st->m != st->m) return;  /* NaN seen: stays NaN */
      double bm = -INFINITY;
      for (int64_t i = 0; i < k; i++) {
        if (x[i] != x[i]) { st->m = NAN; return; }
        if (x[i] > bm) bm = x[i];
      }
      if (bm == -INFINITY) return;  /* nothing but -inf adds nothing */
      if (bm == INFINITY || st->m == INFINITY) { st->m = INFINITY; st->s = 1; return; }
      double bs = 0;
      for (int64_t i = 0; i < k; i++) bs += exp(x[i] - bm);
      if (bm > st->m) {
        st->s = st->s * exp(st->m - bm) + bs;  /* exp(-inf) = 0 on the first block */
        st->m = bm;
      } else {
        st->s += bs * exp(bm - st->m);
      }
      break;
    }
    default: break;
  }
}

/* Feeds n elements of a run (stride s, in elements) into the state. */
static void cpu_stream_feed(cpu_stream *st, const char *p, int64_t n, int64_t s, qt_dtype dtype) {
  int64_t es = (int64_t)qt_elsize(dtype);
  for (int64_t at = 0; at < n; at += CPU_STREAM_BLOCK) {
    int64_t k = n - at < CPU_STREAM_BLOCK ? n - at : CPU_STREAM_BLOCK;
    const char *q = p + at * s * es;
    if (st->int_prod) {
      cpu_load_i64[dtype](q, k, s, st->buf.i);
      uint64_t u = st->u;
      for (int64_t i = 0; i < k; i++) u *= (uint64_t)st->buf.i[i];
      st->u = u;
    } else {
      cpu_load_f64[dtype](q, k, s, st->buf.f);
      cpu_stream_block(st, k);
    }
  }
}

/* Writes the finished reduction to out (dst's dtype). */
static void cpu_stream_finish(const cpu_stream *st, qt_dtype dtype, char *out) {
  double v = 0;
  switch (st->op) {
    case QT_PROD:
      if (st->int_prod) { *(int64_t *)out = (int64_t)st->u; return; }
      v = st->sum.f;
      break;
    case QT_VAR: case QT_STD: {
      double divisor = st->n - st->arg > 0 ? st->n - st->arg : 0;
      v = st->m2 / divisor;
      if (st->op == QT_STD) v = sqrt(v);
      break;
    }
    case QT_NORM:
      switch (st->norm_mode) {
        case CPU_NORM_INF: case CPU_NORM_NEG_INF: v = st->sum.f; break;
        case CPU_NORM_2: v = sqrt(cpu_acc_sum(&st->sum)); break;
        case CPU_NORM_P: v = pow(cpu_acc_sum(&st->sum), 1.0 / st->arg); break;
        default: v = cpu_acc_sum(&st->sum); break;
      }
      break;
    case QT_LOGSUMEXP:
      v = (st->m != st->m || st->m == -INFINITY || st->m == INFINITY) ? st->m : st->m + log(st->s);
      break;
    default: break;
  }
  qt_scalar_store(dtype, out, qt_scalar_from_double(v));
}

static bool cpu_redop_streamed(qt_redop op) {
  return op == QT_PROD || op == QT_VAR || op == QT_STD || op == QT_NORM || op == QT_LOGSUMEXP;
}

/* The streamed ops along dim, or over everything (dim == -1), as cpu_reduce_dim and
** cpu_reduce_all walk them (each output's run read at its stride). */
/* A walked row into the stream of args->state. */
typedef struct cpu_stream_walk {
  cpu_stream *st;
  qt_dtype dtype;  /* the source's */
} cpu_stream_walk;

static void cpu_stream_row(char **p, const int64_t *s, int64_t n, const cpu_args *args) {
  const cpu_stream_walk *w = (const cpu_stream_walk *)args->state;
  cpu_stream_feed(w->st, p[0], n, s[0], w->dtype);
}

/* Along a dim, the outputs are streamed on the pool, a run of them per chunk; each is
** computed as on one thread. */
typedef struct cpu_stream_job {
  const cpu_outer *o;
  qt_redop op;
  double arg;
  int64_t per_chunk;  /* outputs */
  bool oom;
} cpu_stream_job;

static void cpu_stream_chunk(void *argp, int64_t chunk) {
  cpu_stream_job *jb = (cpu_stream_job *)argp;
  const cpu_outer *o = jb->o;
  cpu_stream *st = malloc(sizeof *st);
  if (st == NULL) {
    __atomic_store_n(&jb->oom, true, __ATOMIC_RELAXED);
    return;
  }
  int64_t es = (int64_t)qt_elsize(o->src.dtype), des = (int64_t)qt_elsize(o->dst.dtype);
  int64_t outputs = o->rows * o->n;
  int64_t k0 = chunk * jb->per_chunk, k1 = k0 + jb->per_chunk < outputs ? k0 + jb->per_chunk : outputs;
  for (int64_t k = k0; k < k1; k++) {
    int64_t r = k / o->n, j = k % o->n, so, dof;
    cpu_outer_row(o, r, &so, &dof);
    cpu_stream_init(st, jb->op, jb->arg, o->src.dtype);
    cpu_stream_feed(st, (const char *)o->src.data + so + j * o->s_in * es, o->len, o->rstride,
                    o->src.dtype);
    cpu_stream_finish(st, o->dst.dtype, (char *)o->dst.data + dof + j * o->d_in * des);
  }
  free(st);
}

static int cpu_reduce_streamed(qt_redop op, const qt_view *dst, const qt_view *src, int dim,
                               double arg, qt_err *err) {
  if (dim == -1) {  /* everything, on the calling thread: the rows in order into one stream */
    cpu_stream *st = malloc(sizeof *st);
    if (st == NULL) return qt_errorf(err, "%s: out of host memory", qt_redop_name(op));
    qt_view v = *src;
    qt_view *vp = &v;
    qt_views_collapse(&vp, 1);
    cpu_stream_init(st, op, arg, src->dtype);
    cpu_stream_walk w = { st, src->dtype };
    cpu_args args;
    memset(&args, 0, sizeof args);
    args.state = &w;
    cpu_walk_collapsed(&vp, 1, cpu_stream_row, &args);
    cpu_stream_finish(st, dst->dtype, (char *)dst->data);
    free(st);
    return 0;
  }
  cpu_outer o;
  if (!cpu_outer_make(&o, dst, src, dim)) return 0;
  cpu_stream_job jb = { &o, op, arg, 0, false };
  int64_t outputs = o.rows * o.n;
  jb.per_chunk = CPU_PAR_GRAIN / (o.len > 0 ? o.len : 1) + 1;
  cpu_parallel((outputs + jb.per_chunk - 1) / jb.per_chunk, cpu_stream_chunk, &jb);
  if (jb.oom) return qt_errorf(err, "%s: out of host memory", qt_redop_name(op));
  return 0;
}

int cpu_reduce(qt_device *dev, qt_redop op, const qt_view *dst, const qt_view *src, int dim,
               double arg, qt_err *err) {
  (void)dev;
  if ((unsigned)op >= (unsigned)QT_NREDOPS) return qt_errorf(err, "reduce: unknown op %d", (int)op);
  const char *name = qt_redop_name(op);
  if (!cpu_dtype_ok(src->dtype)) return qt_errorf(err, "%s: unsupported dtype", name);
  bool float_only = op != QT_SUM && op != QT_PROD && op != QT_MAX && op != QT_MIN &&
                    op != QT_ARGMAX && op != QT_ARGMIN;
  if (float_only && !qt_is_float(src->dtype))
    return qt_errorf(err, "%s: not defined for %s tensors (cast to a float dtype first)", name,
                     qt_dtypes[src->dtype].name);
  qt_dtype want = cpu_reduce_dtype(op, src->dtype);
  if (dst->dtype != want)
    return qt_errorf(err, "%s: result must be %s, got %s", name, qt_dtypes[want].name,
                     qt_dtypes[dst->dtype].name);
  if (dim < -1 || dim >= src->ndim)
    return qt_errorf(err, "%s: dimension %d out of range for a %d-d tensor", name, dim, src->ndim);
  int64_t len = dim == -1 ? cpu_view_numel(src) : src->size[dim];
  if (cpu_redop_streamed(op)) {
    if (len == 0) return qt_errorf(err, "%s: empty reductions are the core's", name);
    return cpu_reduce_streamed(op, dst, src, dim, arg, err);
  }
  if (len == 0 && op != QT_SUM && op != QT_MEAN)
    return qt_errorf(err, "%s: empty tensor", name);
  if (dim == -1) {
    if (len == 0) {
      cpu_acc acc;
      cpu_acc_init(&acc, op);
      cpu_reduce_finish(&acc, op, src->dtype, 0, (char *)dst->data);
      return 0;
    }
    return cpu_reduce_all(op, dst, src, err);
  }
  return cpu_reduce_dim(op, dst, src, dim, err);
}

