/*
** cpu_half.c — float16 and bfloat16 rows of floats, converted with the CPU's vector
** instructions where it has them.
**
** The four conversions (float16 and bfloat16, to and from float32) come in three
** builds, picked once at run time from cpuid (GCC's __builtin_cpu_supports):
**   avx512   AVX-512F: vcvtph2ps/vcvtps2ph on 16 lanes; bfloat16 by integer ops;
**   avx2     F16C and AVX2: the same on 8 lanes;
**   generic  half.h's integer code, one element at a time.
** QLUA_CPU_ISA=generic|avx2|avx512 caps the choice (for tests, and for comparing); the ASan
** build always takes generic.
** Every build gives the same bits, NaNs included: the hardware conversions round to
** nearest even exactly like half.h for every number, and the lanes that hold a NaN
** (where the hardware's quieting differs from NumPy's rule) are redone by half.h.
** vcvtneps2bf16 (AVX-512 BF16) is not used: it flushes subnormals, ml_dtypes does not.
*/
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "cpu/cpu_internal.h"
#include "half.h"
#include "scalar.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define CPU_HALF_X86 1
#include <immintrin.h>
#endif

typedef void (*cpu_load_fn)(const uint16_t *src, int64_t n, float *out);
typedef void (*cpu_store_fn)(uint16_t *dst, int64_t n, const float *in);

/* ---------------------------------------------------------------- generic */

static void gen_f16_load(const uint16_t *src, int64_t n, float *out) {
  for (int64_t i = 0; i < n; i++) out[i] = qt_f16_bits_to_f32(src[i]);
}
static void gen_f16_store(uint16_t *dst, int64_t n, const float *in) {
  for (int64_t i = 0; i < n; i++) dst[i] = qt_f32_to_f16_bits(in[i]);
}
static void gen_bf16_load(const uint16_t *src, int64_t n, float *out) {
  for (int64_t i = 0; i < n; i++) out[i] = qt_bf16_bits_to_f32(src[i]);
}
static void gen_bf16_store(uint16_t *dst, int64_t n, const float *in) {
  for (int64_t i = 0; i < n; i++) dst[i] = qt_f32_to_bf16_bits(in[i]);
}

#ifdef CPU_HALF_X86
/* ---------------------------------------------------------------- avx2 + f16c */

__attribute__((target("avx2,f16c"))) static void avx2_f16_load(const uint16_t *src, int64_t n,
                                                                 float *out) {
  int64_t i = 0;
  const __m128i mag = _mm_set1_epi16(0x7fff), inf = _mm_set1_epi16(0x7c00);
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
    if (_mm_movemask_epi8(_mm_cmpgt_epi16(_mm_and_si128(h, mag), inf)))  /* a NaN lane */
      for (int k = 0; k < 8; k++) out[i + k] = qt_f16_bits_to_f32(src[i + k]);
  }
  gen_f16_load(src + i, n - i, out + i);
}

__attribute__((target("avx2,f16c"))) static void avx2_f16_store(uint16_t *dst, int64_t n,
                                                                  const float *in) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(in + i);
    _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)))
      for (int k = 0; k < 8; k++) dst[i + k] = qt_f32_to_f16_bits(in[i + k]);
  }
  gen_f16_store(dst + i, n - i, in + i);
}

__attribute__((target("avx2"))) static void avx2_bf16_load(const uint16_t *src, int64_t n,
                                                            float *out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
    _mm256_storeu_si256((__m256i *)(out + i), _mm256_slli_epi32(w, 16));
  }
  gen_bf16_load(src + i, n - i, out + i);
}

/* half.h's rounding on 8 lanes: (u + 0x7fff + lowest kept bit) >> 16, NaN to 0x7fc0. */
__attribute__((target("avx2"))) static void avx2_bf16_store(uint16_t *dst, int64_t n,
                                                             const float *in) {
  int64_t i = 0;
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
  const __m256i qnan = _mm256_set1_epi32(0x7fc0), sign = _mm256_set1_epi32(0x8000);
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(in + i);
    __m256i u = _mm256_castps_si256(x);
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one)));
    r = _mm256_srli_epi32(r, 16);
    __m256i nan = _mm256_or_si256(qnan, _mm256_and_si256(_mm256_srli_epi32(u, 16), sign));
    r = _mm256_blendv_epi8(r, nan, _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128((__m128i *)(dst + i), _mm256_castsi256_si128(packed));
  }
  gen_bf16_store(dst + i, n - i, in + i);
}

/* ---------------------------------------------------------------- avx512 */

__attribute__((target("avx512f"))) static void avx512_f16_load(const uint16_t *src, int64_t n,
                                                                float *out) {
  int64_t i = 0;
  const __m512i mag = _mm512_set1_epi32(0x7fff), inf = _mm512_set1_epi32(0x7c00);
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm256_loadu_si256((const __m256i *)(src + i));
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
    __m512i w = _mm512_and_si512(_mm512_cvtepu16_epi32(h), mag);
    if (_mm512_cmpgt_epi32_mask(w, inf))
      for (int k = 0; k < 16; k++) out[i + k] = qt_f16_bits_to_f32(src[i + k]);
  }
  gen_f16_load(src + i, n - i, out + i);
}

__attribute__((target("avx512f"))) static void avx512_f16_store(uint16_t *dst, int64_t n,
                                                                 const float *in) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 x = _mm512_loadu_ps(in + i);
    _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    if (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q))
      for (int k = 0; k < 16; k++) dst[i + k] = qt_f32_to_f16_bits(in[i + k]);
  }
  gen_f16_store(dst + i, n - i, in + i);
}

__attribute__((target("avx512f"))) static void avx512_bf16_load(const uint16_t *src, int64_t n,
                                                                 float *out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
    _mm512_storeu_si512((void *)(out + i), _mm512_slli_epi32(w, 16));
  }
  gen_bf16_load(src + i, n - i, out + i);
}

__attribute__((target("avx512f"))) static void avx512_bf16_store(uint16_t *dst, int64_t n,
                                                                  const float *in) {
  int64_t i = 0;
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
  const __m512i qnan = _mm512_set1_epi32(0x7fc0), sign = _mm512_set1_epi32(0x8000);
  for (; i + 16 <= n; i += 16) {
    __m512 x = _mm512_loadu_ps(in + i);
    __m512i u = _mm512_castps_si512(x);
    __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(hi, one))), 16);
    __m512i nan = _mm512_or_si512(qnan, _mm512_and_si512(hi, sign));
    r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), nan);
    _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(r));
  }
  gen_bf16_store(dst + i, n - i, in + i);
}
#endif

/* ---------------------------------------------------------------- dispatch */

static struct {
  cpu_load_fn f16_load, bf16_load;
  cpu_store_fn f16_store, bf16_store;
  const char *isa;
} cpu_half_fns;
static pthread_once_t cpu_half_once = PTHREAD_ONCE_INIT;

static void cpu_half_pick(void) {
  cpu_half_fns.f16_load = gen_f16_load;
  cpu_half_fns.f16_store = gen_f16_store;
  cpu_half_fns.bf16_load = gen_bf16_load;
  cpu_half_fns.bf16_store = gen_bf16_store;
  cpu_half_fns.isa = "generic";
#ifdef CPU_HALF_X86
  const char *cap = getenv("QLUA_CPU_ISA");
  int limit = cap == NULL ? 2 : strcmp(cap, "generic") == 0 ? 0 : strcmp(cap, "avx2") == 0 ? 1 : 2;
#if defined(__SANITIZE_ADDRESS__)
  /* ASan's fake stack frames (detect_stack_use_after_return) are not aligned for the
  ** 32- and 64-byte spills of the AVX code, which then faults: the ASan build runs the
  ** generic (SSE2) code, which every level must match anyway */
  limit = 0;
#endif
  __builtin_cpu_init();
  if (limit >= 2 && __builtin_cpu_supports("avx512f")) {
    cpu_half_fns.f16_load = avx512_f16_load;
    cpu_half_fns.f16_store = avx512_f16_store;
    cpu_half_fns.bf16_load = avx512_bf16_load;
    cpu_half_fns.bf16_store = avx512_bf16_store;
    cpu_half_fns.isa = "avx512";
  } else if (limit >= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) {
    cpu_half_fns.f16_load = avx2_f16_load;
    cpu_half_fns.f16_store = avx2_f16_store;
    cpu_half_fns.bf16_load = avx2_bf16_load;
    cpu_half_fns.bf16_store = avx2_bf16_store;
    cpu_half_fns.isa = "avx2";
  }
#endif
}

const char *cpu_half_isa(void) {
  pthread_once(&cpu_half_once, cpu_half_pick);
  return cpu_half_fns.isa;
}

const char *qt_cpu_simd_name(void) { return cpu_half_isa(); }

int cpu_isa_level(void) {
  const char *isa = cpu_half_isa();
  return isa[0] == 'a' ? (isa[3] == '5' ? 2 : 1) : 0;
}

/* Strided rows gather into (or scatter from) a block and convert the block. */
#define CPU_HALF_CHUNK 256

static void cpu_half_load(cpu_load_fn fn, const uint16_t *src, int64_t stride, int64_t n,
                          float *out) {
  if (stride == 1) { fn(src, n, out); return; }
  uint16_t buf[CPU_HALF_CHUNK];
  for (int64_t i = 0; i < n; i += CPU_HALF_CHUNK) {
    int64_t m = n - i < CPU_HALF_CHUNK ? n - i : CPU_HALF_CHUNK;
    for (int64_t k = 0; k < m; k++) buf[k] = src[(i + k) * stride];
    fn(buf, m, out + i);
  }
}

static void cpu_half_store(cpu_store_fn fn, uint16_t *dst, int64_t stride, int64_t n,
                           const float *in) {
  if (stride == 1) { fn(dst, n, in); return; }
  uint16_t buf[CPU_HALF_CHUNK];
  for (int64_t i = 0; i < n; i += CPU_HALF_CHUNK) {
    int64_t m = n - i < CPU_HALF_CHUNK ? n - i : CPU_HALF_CHUNK;
    fn(buf, m, in + i);
    for (int64_t k = 0; k < m; k++) dst[(i + k) * stride] = buf[k];
  }
}

void cpu_f16_load(const qt_f16 *src, int64_t stride, int64_t n, float *out) {
  pthread_once(&cpu_half_once, cpu_half_pick);
  cpu_half_load(cpu_half_fns.f16_load, (const uint16_t *)src, stride, n, out);
}
void cpu_bf16_load(const qt_bf16 *src, int64_t stride, int64_t n, float *out) {
  pthread_once(&cpu_half_once, cpu_half_pick);
  cpu_half_load(cpu_half_fns.bf16_load, (const uint16_t *)src, stride, n, out);
}
void cpu_f16_store(qt_f16 *dst, int64_t stride, int64_t n, const float *in) {
  pthread_once(&cpu_half_once, cpu_half_pick);
  cpu_half_store(cpu_half_fns.f16_store, (uint16_t *)dst, stride, n, in);
}
void cpu_bf16_store(qt_bf16 *dst, int64_t stride, int64_t n, const float *in) {
  pthread_once(&cpu_half_once, cpu_half_pick);
  cpu_half_store(cpu_half_fns.bf16_store, (uint16_t *)dst, stride, n, in);
}
void cpu_bool_store(bool *dst, int64_t stride, int64_t n, const float *in) {
  for (int64_t i = 0; i < n; i++) dst[i * stride] = in[i] != 0;
}
