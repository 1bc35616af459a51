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
** device, whatever the order, so pieces of the result fill on the thread pool. Uniform
** and integer values match bit for bit; normal values to within libm rounding. */
typedef struct cpu_random_job {
  qt_random_kind kind;
  qt_dtype dtype;
  char *data;
  uint64_t seed, offset;
  qt_scalar lo, hi;
  int64_t n, piece;
} cpu_random_job;

static void cpu_random_fill(const cpu_random_job *j, int64_t k0, int64_t k1) {
  uint64_t seed = j->seed, offset = j->offset;
  switch (j->kind) {
    case QT_RAND_UNIFORM:
      if (j->dtype == QT_F32) {
        float *out = (float *)j->data;
        for (int64_t k = k0; k < k1; k++) out[k] = qt_philox_uniform_f32(qt_philox(seed, offset + (uint64_t)k));
      } else {
        double *out = (double *)j->data;
        for (int64_t k = k0; k < k1; k++) out[k] = qt_philox_uniform_f64(qt_philox(seed, offset + (uint64_t)k));
      }
      break;
    case QT_RAND_NORMAL:
      if (j->dtype == QT_F32) {
        float *out = (float *)j->data;
        for (int64_t k = k0; k < k1; k++) out[k] = (float)qt_philox_normal(qt_philox(seed, offset + (uint64_t)k));
      } else {
        double *out = (double *)j->data;
        for (int64_t k = k0; k < k1; k++) out[k] = qt_philox_normal(qt_philox(seed, offset + (uint64_t)k));
      }
      break;
    default:
      for (int64_t k = k0; k < k1; k++) {
        int64_t v = qt_philox_int(qt_philox(seed, offset + (uint64_t)k), j->lo.i, j->hi.i);
        qt_scalar_store(j->dtype, j->data + (size_t)k * qt_elsize(j->dtype), qt_scalar_i(v));
      }
      break;
  }
}

static void cpu_random_chunk(void *arg, int64_t chunk) {
  const cpu_random_job *j = (const cpu_random_job *)arg;
  int64_t k0 = chunk * j->piece, k1 = k0 + j->piece < j->n ? k0 + j->piece : j->n;
  cpu_random_fill(j, k0, k1);
}

int cpu_random(qt_device *dev, qt_random_kind kind, const qt_view *dst, uint64_t seed,
               uint64_t offset, qt_scalar lo, qt_scalar hi, qt_err *err) {
  (void)dev;
  const char *name = kind == QT_RAND_UNIFORM ? "rand" : kind == QT_RAND_NORMAL ? "randn" : "randint";
  if (!cpu_dtype_ok(dst->dtype)) return qt_errorf(err, "%s: unsupported dtype", name);
  if (kind != QT_RAND_INT && !qt_is_float(dst->dtype))
    return qt_errorf(err, "%s: needs a float dtype, got %s", name, qt_dtypes[dst->dtype].name);
  if (kind == QT_RAND_INT && lo.i > hi.i)
    return qt_errorf(err, "randint: empty range %lld..%lld", (long long)lo.i, (long long)hi.i);
  if (kind != QT_RAND_UNIFORM && kind != QT_RAND_NORMAL && kind != QT_RAND_INT)
    return qt_errorf(err, "random: unknown distribution %d", (int)kind);
  if (!cpu_view_contiguous(dst)) return qt_errorf(err, "%s: result must be contiguous", name);
  cpu_random_job j = { kind, dst->dtype, (char *)dst->data, seed, offset, lo, hi,
                       cpu_view_numel(dst), 0 };
  int64_t pieces = cpu_par_pieces(j.n, &j.piece);
  cpu_parallel(pieces, cpu_random_chunk, &j);
  return 0;
}
