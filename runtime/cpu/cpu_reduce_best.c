/*
** cpu_reduce_best.c — the CPU's max, min, argmax and argmin folds (cpu_reduce.h): strided
** runs and columns folds for every dtype, and float32 runs in SSE2/AVX2/AVX-512 code
** picked at run time. cpu_reduce.c's tables and drivers call them; the results are what a
** plain scan gives (the first best, a NaN wins), whatever the fold or the vector width.
*/
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "cpu/cpu_reduce.h"
#include "device.h"
#include "tensor.h"

/* The loops below are the kind GCC vectorizes only with its dynamic cost model; and only
** without -ftrapping-math will it turn the selects on float comparisons into branch-free
** code (nothing here reads the FP exception flags, and the values computed are the same). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "no-trapping-math")
#endif

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
cpu_columns4_fold_fn cpu_f32_columns4_arg(qt_redop op) {
  if (cpu_isa_level() < 1) return NULL;
  if (op == QT_ARGMAX) return cpu_columns4_argmax_f32_avx2;
  if (op == QT_ARGMIN) return cpu_columns4_argmin_f32_avx2;
  return NULL;
}
#else
#define CPU_SIMD_F32(x) 0
#define cpu_f32_best(x, n, is_max, has_nan) 0
#define cpu_f32_arg(x, n, is_max, has_nan) 0
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
  CPU_MULTIVERSION void cpu_columns_##NAME##_##SFX(const char *p, int64_t n, int64_t pos,          \
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
  CPU_MULTIVERSION void cpu_columns_arg##NAME##_##SFX(const char *p, int64_t n, int64_t pos,       \
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
  void cpu_strided_##NAME##_##SFX(const char *p, int64_t n, int64_t s,            \
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
  void cpu_strided_##NAME##_##SFX(const char *p, int64_t n, int64_t s,            \
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
  void cpu_strided_arg##NAME##_##SFX(const char *p, int64_t n, int64_t s,         \
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
  void cpu_strided_arg##NAME##_##SFX(const char *p, int64_t n, int64_t s,         \
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

/* ---- every dtype's max, min, argmax and argmin folds, by the dtype's kind */
#define CPU_BEST_FLOAT(SFX, T)                                                           \
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
#define CPU_BEST_INT(SFX, T)                                                             \
  CPU_RUN_BEST(cpu_runmax_##SFX, T, CPU_GT, 0)                                           \
  CPU_RUN_BEST(cpu_runmin_##SFX, T, CPU_LT, 0)                                           \
  CPU_RUN_ARG(cpu_runargmax_##SFX, T, CPU_GT, 0)                                         \
  CPU_RUN_ARG(cpu_runargmin_##SFX, T, CPU_LT, 0)                                         \
  CPU_MAXMIN_INT(max, SFX, T, CPU_GT)                                                    \
  CPU_MAXMIN_INT(min, SFX, T, CPU_LT)                                                    \
  CPU_ARG_INT(max, SFX, T, CPU_GT)                                                       \
  CPU_ARG_INT(min, SFX, T, CPU_LT)
#define CPU_BEST_BOOL CPU_BEST_INT  /* 0 and 1, compared as integers */
#define CPU_BEST_HALF(SFX, T)      /* float16/bfloat16 arrive widened (device.h) */
#define CPU_BEST_(P, E, sfx, name, T, U, size, kind, ...) CPU_BEST_##kind(sfx, T)
QT_DTYPE_LIST(CPU_BEST_, ~)

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options  /* ends "tree-vectorize" */
#endif
