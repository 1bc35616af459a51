/*
** philox.h — the counter-based random number generator every device shares.
**
** Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
** a keyed bijection of a 128-bit counter. Element k of a random call draws from the
** counter (offset + k) under the key `seed`, so the numbers depend only on (seed, offset,
** k): the CPU loop and the CUDA kernel produce the same values, in any thread order.
**
** Plain C99 that nvcc also compiles for the device (QT_HD marks the functions both).
*/
#ifndef QLUA_PHILOX_H
#define QLUA_PHILOX_H

#include <stdint.h>
#ifndef __CUDACC__
#include <math.h>
#endif

#ifdef __CUDACC__
#define QT_HD __host__ __device__ __forceinline__
#else
#define QT_HD static inline
#endif

typedef struct qt_philox_out { uint32_t x[4]; } qt_philox_out;

QT_HD uint32_t qt_philox_mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
  uint64_t p = (uint64_t)a * (uint64_t)b;
  *hi = (uint32_t)(p >> 32);
  return (uint32_t)p;
}

/* Ten rounds over counter (counter_lo, counter_hi, 0, 0) with key (seed_lo, seed_hi). */
QT_HD qt_philox_out qt_philox(uint64_t seed, uint64_t counter) {
  uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int round = 0; round < 10; round++) {
    uint32_t hi0, hi1;
    uint32_t lo0 = qt_philox_mulhilo(0xD2511F53u, c0, &hi0);
    uint32_t lo1 = qt_philox_mulhilo(0xCD9E8D57u, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  qt_philox_out out;
  out.x[0] = c0; out.x[1] = c1; out.x[2] = c2; out.x[3] = c3;
  return out;
}

/* Uniform in [0, 1): 24 bits for float32, 53 bits for float64 (exactly representable,
** so devices agree bit for bit). */
QT_HD float qt_philox_uniform_f32(qt_philox_out r) {
  return (float)(r.x[0] >> 8) * (1.0f / 16777216.0f);
}
QT_HD double qt_philox_uniform_f64(qt_philox_out r) {
  uint64_t bits = (((uint64_t)r.x[0] << 32) | r.x[1]) >> 11;
  return (double)bits * (1.0 / 9007199254740992.0);
}
/* Box-Muller from words 2 and 3 (independent of the uniform words), computed in
** double: u1 in (0, 1] so the log is finite. Devices agree to within libm rounding. */
QT_HD double qt_philox_normal(qt_philox_out r) {
  double u1 = ((double)r.x[2] + 1.0) * (1.0 / 4294967296.0);
  double u2 = (double)r.x[3] * (1.0 / 4294967296.0);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586476925 * u2);
}
/* Uniform integer in [lo, hi] (lo <= hi), from the 64 bits of words 0 and 1.
** span == 0 stands for the full 2^64 range. */
QT_HD int64_t qt_philox_int(qt_philox_out r, int64_t lo, int64_t hi) {
  uint64_t bits = ((uint64_t)r.x[0] << 32) | r.x[1];
  uint64_t span = (uint64_t)hi - (uint64_t)lo + 1u;
  uint64_t v = span ? bits % span : bits;
  return (int64_t)((uint64_t)lo + v);
}

#endif
