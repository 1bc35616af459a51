/*
** random.cu — rand / randn / randint on the GPU.
**
** Element k of a call with (seed, offset) is computed from Philox4x32-10 of the counter
** offset + k under the key seed (runtime/philox.h, compiled here for the device), exactly
** as the CPU device's loop does: uniform and integer values are identical bit for bit on
** both devices; normal values agree to within the rounding of the device's log/cos.
** The result is contiguous (the core allocates it so), so thread i simply writes dst[i].
** Captured in a CUDA graph (cuda_graph.cu), a kernel reads the seed and the base of its
** offset from the graph's random slot when it runs, so each replay draws new numbers.
*/
#include <stdint.h>

#include "dispatch.cuh"
#include "kernels.h"
#include "philox.h"

#define RANDOM_THREADS 256

template <typename T, int KIND>
__global__ void random_kernel(T *dst, int64_t n, uint64_t seed, uint64_t offset, int64_t lo,
                              int64_t hi, const uint64_t *rng) {
  if (rng != NULL) {   /* captured in a CUDA graph: the replay's (seed, base offset) */
    seed = rng[0];
    offset += rng[1];
  }
  int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += step) {
    qt_philox_out r = qt_philox(seed, offset + (uint64_t)k);
    if constexpr (KIND == QT_RAND_UNIFORM) {
      if constexpr (sizeof(T) == 4) dst[k] = (T)qt_philox_uniform_f32(r);
      else dst[k] = (T)qt_philox_uniform_f64(r);
    } else if constexpr (KIND == QT_RAND_NORMAL) {
      dst[k] = (T)qt_philox_normal(r);
    } else {
      dst[k] = (T)qt_philox_int(r, lo, hi);
    }
  }
}

template <typename T, int KIND>
static void random_launch(qt_device *dev, const qt_view *dst, uint64_t seed, uint64_t offset,
                          int64_t lo, int64_t hi) {
  unsigned blocks = qt_cuda_blocks(dev, dst->numel, RANDOM_THREADS);
  random_kernel<T, KIND><<<blocks, RANDOM_THREADS, 0, qt_cuda_context(dev)->stream>>>(
      (T *)dst->data, dst->numel, seed, offset, lo, hi, qt_cuda_context(dev)->capture_rng);
}

/* Contiguity in the core's sense: size-1 dims may have any stride. */
static bool random_contiguous(const qt_view *v) {
  int64_t expected = 1;
  for (int d = v->ndim - 1; d >= 0; d--) {
    if (v->size[d] == 0) return true;
    if (v->size[d] != 1 && v->stride[d] != expected) return false;
    expected *= v->size[d];
  }
  return true;
}

extern "C" int qt_cuda_random(qt_device *dev, qt_random_kind kind, const qt_view *dst,
                              uint64_t seed, uint64_t offset, qt_scalar lo, qt_scalar hi,
                              qt_err *err) {
  const char *name = kind == QT_RAND_UNIFORM ? "rand" : kind == QT_RAND_NORMAL ? "randn" : "randint";
  if ((unsigned)dst->dtype >= (unsigned)QT_NDTYPES) return qt_errorf(err, "%s: unsupported dtype", name);
  if (kind != QT_RAND_UNIFORM && kind != QT_RAND_NORMAL && kind != QT_RAND_INT)
    return qt_errorf(err, "random: unknown distribution %d", (int)kind);
  if (kind != QT_RAND_INT && !qt_is_float(dst->dtype))
    return qt_errorf(err, "%s: needs a float dtype, got %s", name, qt_dtypes[dst->dtype].name);
  if (kind == QT_RAND_INT && lo.i > hi.i)
    return qt_errorf(err, "randint: empty range %lld..%lld", (long long)lo.i, (long long)hi.i);
  if (!random_contiguous(dst)) return qt_errorf(err, "%s: result must be contiguous", name);
  if (qt_cuda_enter(dev, name, err) != 0) return -1;
  if (dst->numel == 0) return 0;
  switch (kind) {
    case QT_RAND_UNIFORM:
      if (dst->dtype == QT_F32) random_launch<float, QT_RAND_UNIFORM>(dev, dst, seed, offset, 0, 0);
      else random_launch<double, QT_RAND_UNIFORM>(dev, dst, seed, offset, 0, 0);
      break;
    case QT_RAND_NORMAL:
      if (dst->dtype == QT_F32) random_launch<float, QT_RAND_NORMAL>(dev, dst, seed, offset, 0, 0);
      else random_launch<double, QT_RAND_NORMAL>(dev, dst, seed, offset, 0, 0);
      break;
    default:
      qt_dtype_switch(dst->dtype, [&](auto zero) {
        random_launch<decltype(zero), QT_RAND_INT>(dev, dst, seed, offset, lo.i, hi.i);
      });
      break;
  }
  return qt_cuda_check_launch(dev, name, err);
}
