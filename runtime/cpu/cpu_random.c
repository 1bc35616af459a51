/*
** cpu_random.c — the CPU device's random slot: rand, randn and randint from Philox4x32-10
** (philox.h), element k from counter offset + k, so the CPU and the GPU draw the same
** numbers for the same seed.
*/
#include <stdint.h>

#include "cpu/cpu_internal.h"
#include "device.h"
#include "philox.h"
#include "tensor.h"

/* ====================================================================== random */

/* Element k draws from counter offset + k (device.h): the same numbers as the CUDA
** device, whatever the order. Uniform and integer values match bit for bit; normal
** values to within libm rounding. */
int cpu_random(qt_device *dev, qt_random_kind kind, const qt_view *dst, uint64_t seed,
               uint64_t offset, qt_scalar lo, qt_scalar hi, qt_err *err) {
  (void)dev;
  const char *name = kind == QT_RAND_UNIFORM ? "rand" : kind == QT_RAND_NORMAL ? "randn" : "randint";
  if (!cpu_dtype_ok(dst->dtype)) return qt_errorf(err, "%s: unsupported dtype", name);
  if (kind != QT_RAND_INT && !qt_is_float(dst->dtype))
    return qt_errorf(err, "%s: needs a float dtype, got %s", name, qt_dtypes[dst->dtype].name);
  if (kind == QT_RAND_INT && lo.i > hi.i)
    return qt_errorf(err, "randint: empty range %lld..%lld", (long long)lo.i, (long long)hi.i);
  if (!cpu_view_contiguous(dst)) return qt_errorf(err, "%s: result must be contiguous", name);
  int64_t n = cpu_view_numel(dst);
  void *data = dst->data;
  switch (kind) {
    case QT_RAND_UNIFORM:
      if (dst->dtype == QT_F32) {
        float *out = data;
        for (int64_t k = 0; k < n; k++) out[k] = qt_philox_uniform_f32(qt_philox(seed, offset + (uint64_t)k));
      } else {
        double *out = data;
        for (int64_t k = 0; k < n; k++) out[k] = qt_philox_uniform_f64(qt_philox(seed, offset + (uint64_t)k));
      }
      break;
    case QT_RAND_NORMAL:
      if (dst->dtype == QT_F32) {
        float *out = data;
        for (int64_t k = 0; k < n; k++) out[k] = (float)qt_philox_normal(qt_philox(seed, offset + (uint64_t)k));
      } else {
        double *out = data;
        for (int64_t k = 0; k < n; k++) out[k] = qt_philox_normal(qt_philox(seed, offset + (uint64_t)k));
      }
      break;
    case QT_RAND_INT:
      for (int64_t k = 0; k < n; k++) {
        int64_t v = qt_philox_int(qt_philox(seed, offset + (uint64_t)k), lo.i, hi.i);
        qt_scalar_store(dst->dtype, (char *)data + (size_t)k * qt_elsize(dst->dtype), qt_scalar_i(v));
      }
      break;
    default:
      return qt_errorf(err, "random: unknown distribution %d", (int)kind);
  }
  return 0;
}

