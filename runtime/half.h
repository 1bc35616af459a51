/*
** half.h — the 16-bit float dtypes: their bit conversions, for every device.
**
** float16 is IEEE 754 binary16 (1 sign, 5 exponent, 10 fraction bits); bfloat16 is the
** top half of a float32 (1, 8, 7). Both are stored as their bits (qt_f16, qt_bf16 in
** tensor.h); arithmetic converts to float32, computes, and rounds back (tensor.h, kind
** HALF). Every conversion here is exact integer arithmetic on the bits, so the CPU,
** its vector paths (cpu_half.c) and the CUDA kernels give the same bits by construction:
**
**   - rounding is to nearest, ties to even, with subnormals, and overflow to inf;
**   - float16 matches NumPy's float16 bit for bit, NaN included: a NaN keeps its sign
**     and the top fraction bits that fit (float32's top 10, float64's top 10), and a
**     payload that would vanish becomes 1 so that it stays a NaN; widening a float16
**     NaN to float32 shifts its fraction up by 13;
**   - bfloat16 matches ml_dtypes' bfloat16: float32 to bfloat16 makes every NaN the
**     quiet NaN 0x7fc0 with its sign, and bfloat16 to float32 is the bits shifted up
**     by 16 (exact, payload kept);
**   - float64 converts directly (qt_f64_to_f16, qt_f64_to_bf16), rounding once. For
**     float16 that is what NumPy does. ml_dtypes goes through float32 for bfloat16,
**     which rounds twice: the two differ where a float64 lies within float32's rounding
**     of a bfloat16 tie; qlua gives the correctly rounded one.
**
** Plain C99 that nvcc also compiles for the device (QT_HD), as in scalar.h.
*/
#ifndef QLUA_HALF_H
#define QLUA_HALF_H

#include <stdint.h>
#include <string.h>
#if defined(__CUDACC__)
#include <cuda_fp16.h>  /* on the device, the hardware conversions for every non-NaN */
#endif

#ifndef QT_HD
#ifdef __CUDACC__
#define QT_HD __host__ __device__ __forceinline__
#else
#define QT_HD static inline
#endif
#endif

/* The bits of a float or double and back (memcpy: no aliasing trouble; compilers turn it
** into a register move, nvcc too). */
QT_HD uint32_t qt_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
QT_HD float qt_f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
QT_HD uint64_t qt_f64_bits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }

/* A finite non-NaN magnitude (biased exponent e of width 11, fraction m of 52 bits, as
** a float64 has them) rounded to nearest even into a format with `mbits` fraction bits
** and exponent bias `bias`: the magnitude's bits (an infinity when it overflows). The
** one rounding routine behind every narrowing below. */
QT_HD uint32_t qt_round_to_small(int e, uint64_t m, int mbits, int bias) {
  if (e == 0) return 0;  /* float64 subnormals are far below any 16-bit subnormal */
  int exp = e - 1023;               /* unbiased */
  uint32_t inf = (uint32_t)(2 * bias + 1) << mbits;
  if (exp > bias) return inf;       /* above the largest binade: overflows */
  uint64_t sig = m | ((uint64_t)1 << 52);  /* 1.m, 53 bits */
  int shift = 52 - mbits;           /* normal: drop this many bits */
  uint32_t base = 0;
  if (exp >= 1 - bias) {
    base = (uint32_t)(exp + bias - 1) << mbits;  /* the implicit bit carries it up one */
  } else {
    shift += (1 - bias) - exp;      /* subnormal: shift further right */
    if (shift > 62) return 0;       /* below half the smallest subnormal */
  }
  uint64_t kept = sig >> shift;
  uint64_t rest = sig & (((uint64_t)1 << shift) - 1);
  uint64_t half = (uint64_t)1 << (shift - 1);
  if (rest > half || (rest == half && (kept & 1))) kept++;
  uint32_t r = base + (uint32_t)kept;  /* a carry out of the fraction bumps the exponent */
  return r > inf ? inf : r;
}

/* ---------------------------------------------------------------- float16 */

QT_HD uint16_t qt_f64_to_f16_bits(double d) {
  uint64_t u = qt_f64_bits(d);
  uint16_t sign = (uint16_t)((u >> 48) & 0x8000);
  int e = (int)((u >> 52) & 0x7ff);
  uint64_t m = u & 0xfffffffffffffULL;
  if (e == 0x7ff) {
    if (m == 0) return (uint16_t)(sign | 0x7c00);
    uint16_t payload = (uint16_t)(m >> 42);
    return (uint16_t)(sign | 0x7c00 | (payload ? payload : 1));
  }
  return (uint16_t)(sign | qt_round_to_small(e, m, 10, 15));
}

QT_HD uint16_t qt_f32_to_f16_bits(float f) {
#if defined(__CUDA_ARCH__)
  /* cvt.rn.f16.f32 rounds to nearest even like the code below (subnormals, overflow to
  ** inf); only its NaN (always 0x7fff) differs from NumPy's */
  if (f == f) return __half_as_ushort(__float2half_rn(f));
#endif
  uint32_t u = qt_f32_bits(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  uint32_t e = (u >> 23) & 0xff, m = u & 0x7fffff;
  if (e == 0xff) {
    if (m == 0) return (uint16_t)(sign | 0x7c00);
    uint16_t payload = (uint16_t)(m >> 13);
    return (uint16_t)(sign | 0x7c00 | (payload ? payload : 1));
  }
  /* float32 widens to float64 exactly (subnormals included), so one rounding. */
  if (e == 0) return sign;  /* zero, or a float32 subnormal: far below half of 2^-24 */
  return (uint16_t)(sign | qt_round_to_small((int)e - 127 + 1023, (uint64_t)m << 29, 10, 15));
}

QT_HD float qt_f16_bits_to_f32(uint16_t h) {
#if defined(__CUDA_ARCH__)
  if ((h & 0x7fff) <= 0x7c00) return __half2float(__ushort_as_half(h));  /* exact */
#endif
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e == 0x1f) return qt_f32_from_bits(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return qt_f32_from_bits(sign);
    /* subnormal: m * 2^-24, normalised */
    int shift = 0;
    while ((m & 0x400) == 0) { m <<= 1; shift++; }
    m &= 0x3ff;
    return qt_f32_from_bits(sign | ((uint32_t)(113 - shift) << 23) | (m << 13));
  }
  return qt_f32_from_bits(sign | ((e + 112) << 23) | (m << 13));
}

/* ---------------------------------------------------------------- bfloat16 */

QT_HD uint16_t qt_f32_to_bf16_bits(float f) {
  uint32_t u = qt_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16 & 0x8000) | 0x7fc0);
  /* Adding 0x7fff plus the lowest kept bit rounds to nearest even: a carry out of the
  ** fraction moves into the exponent, and the largest finite values round to inf. */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

QT_HD uint16_t qt_f64_to_bf16_bits(double d) {
  uint64_t u = qt_f64_bits(d);
  uint16_t sign = (uint16_t)((u >> 48) & 0x8000);
  int e = (int)((u >> 52) & 0x7ff);
  uint64_t m = u & 0xfffffffffffffULL;
  if (e == 0x7ff) return (uint16_t)(sign | (m ? 0x7fc0 : 0x7f80));
  return (uint16_t)(sign | qt_round_to_small(e, m, 7, 127));
}

QT_HD float qt_bf16_bits_to_f32(uint16_t b) { return qt_f32_from_bits((uint32_t)b << 16); }

#endif
