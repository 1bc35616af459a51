/*
** pool2d.cu — the pool2d slot on the GPU (device.h): max pooling with the maxima's
** positions, average pooling and its backward, every float dtype natively (16-bit ones
** compared and summed in float32). The CPU twin is runtime/cpu/cpu_pool2d.c.
**
** Hand-written: cuDNN's pooling gives no indices, and its backward wants the forward's
** output too. A thread per output element walks its window (forward); the average's
** backward is a gather, a thread per input element summing the shares of the windows that
** cover it, so there are no atomics and the sums come in a fixed order.
*/
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "dispatch.cuh"
#include "kernels.h"

template <typename T>
__device__ __forceinline__ float pl_in(T x) {
  if constexpr (qt_is_half_v<T>) return qt_half_to_f32(x);
  else return (float)x;
}
__device__ __forceinline__ double pl_in(double x) { return x; }
template <typename T, typename A>
__device__ __forceinline__ T pl_out(A x) {
  if constexpr (qt_is_half_v<T>) return QT_HALF_FROM(T, (float)x);
  else return (T)x;
}

/* The divisor of output (i, j): as cpu_pool2d.c's cpu_pool_divisor. */
__device__ __forceinline__ int64_t pl_divisor(const qt_pool_geom &g, int64_t i, int64_t j) {
  if (g.divisor_override > 0) return g.divisor_override;
  int64_t hs = i * g.stride[0] - g.pad[0], ws = j * g.stride[1] - g.pad[1];
  int64_t he = min(hs + g.kernel[0], g.h + g.pad[0]), we = min(ws + g.kernel[1], g.w + g.pad[1]);
  if (g.count_include_pad) return (he - hs) * (we - ws);
  return (min(he, g.h) - max(hs, (int64_t)0)) * (min(we, g.w) - max(ws, (int64_t)0));
}

template <typename T, typename A, bool MAX>
__global__ void pl_forward(qt_pool_geom g, const T *__restrict__ x, T *__restrict__ y,
                           int64_t *__restrict__ idx) {
  int64_t total = g.planes * g.p * g.q;
  for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < total;
       o += (int64_t)gridDim.x * blockDim.x) {
    int64_t j = o % g.q, i = o / g.q % g.p, pl = o / (g.p * g.q);
    const T *xp = x + pl * g.h * g.w;
    int64_t hs = i * g.stride[0] - g.pad[0], ws = j * g.stride[1] - g.pad[1];
    if (MAX) {
      A best = -INFINITY;
      int64_t at = -1;
      for (int64_t a = 0; a < g.kernel[0]; a++) {
        int64_t ih = hs + a * g.dilation[0];
        if (ih < 0 || ih >= g.h) continue;
        for (int64_t b = 0; b < g.kernel[1]; b++) {
          int64_t iw = ws + b * g.dilation[1];
          if (iw < 0 || iw >= g.w) continue;
          A v = pl_in(xp[ih * g.w + iw]);
          if (at < 0 || v > best || v != v) {
            best = v;
            at = ih * g.w + iw;
          }
        }
      }
      y[o] = pl_out<T, A>(best);
      if (idx != NULL) idx[o] = at + 1;
    } else {
      A s = 0;
      for (int64_t ih = max(hs, (int64_t)0); ih < min(hs + g.kernel[0], g.h); ih++)
        for (int64_t iw = max(ws, (int64_t)0); iw < min(ws + g.kernel[1], g.w); iw++)
          s += pl_in(xp[ih * g.w + iw]);
      y[o] = pl_out<T, A>(s / (A)pl_divisor(g, i, j));
    }
  }
}

/* dx(ih, iw) = sum over the windows (i, j) that hold it of dy(i, j) / divisor(i, j). */
template <typename T, typename A>
__global__ void pl_avg_backward(qt_pool_geom g, T *__restrict__ dx, const T *__restrict__ dy) {
  int64_t total = g.planes * g.h * g.w;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    int64_t iw = e % g.w, ih = e / g.w % g.h, pl = e / (g.h * g.w);
    const T *dp = dy + pl * g.p * g.q;
    /* windows i with i s - pad <= ih < i s - pad + k */
    int64_t i0 = ih + g.pad[0] - g.kernel[0] + 1, j0 = iw + g.pad[1] - g.kernel[1] + 1;
    i0 = i0 <= 0 ? 0 : (i0 + g.stride[0] - 1) / g.stride[0];
    j0 = j0 <= 0 ? 0 : (j0 + g.stride[1] - 1) / g.stride[1];
    int64_t i1 = min((ih + g.pad[0]) / g.stride[0] + 1, g.p), j1 = min((iw + g.pad[1]) / g.stride[1] + 1, g.q);
    A s = 0;
    for (int64_t i = i0; i < i1; i++)
      for (int64_t j = j0; j < j1; j++) s += pl_in(dp[i * g.q + j]) / (A)pl_divisor(g, i, j);
    dx[e] = pl_out<T, A>(s);
  }
}

template <typename T>
static int pl_run(qt_device *dev, qt_pool_mode mode, const qt_pool_geom *g, const qt_view *x,
                  const qt_view *y, const qt_view *idx, qt_err *err) {
  typedef typename std::conditional<std::is_same<T, double>::value, double, float>::type A;
  qt_cuda_ctx *c = qt_cuda_context(dev);
  if (mode == QT_POOL_AVG_BACKWARD) {
    unsigned blocks = qt_cuda_blocks(dev, g->planes * g->h * g->w, 256);
    pl_avg_backward<T, A><<<blocks, 256, 0, c->stream>>>(*g, (T *)x->data, (const T *)y->data);
  } else {
    unsigned blocks = qt_cuda_blocks(dev, g->planes * g->p * g->q, 256);
    if (mode == QT_POOL_MAX)
      pl_forward<T, A, true><<<blocks, 256, 0, c->stream>>>(*g, (const T *)x->data, (T *)y->data,
                                                            idx != NULL ? (int64_t *)idx->data : NULL);
    else
      pl_forward<T, A, false><<<blocks, 256, 0, c->stream>>>(*g, (const T *)x->data, (T *)y->data, NULL);
  }
  return qt_cuda_check_launch(dev, "pool2d", err);
}

extern "C" int qt_cuda_pool2d(qt_device *dev, qt_pool_mode mode, const qt_pool_geom *g,
                              const qt_view *x, const qt_view *y, const qt_view *idx, qt_err *err) {
  if (qt_cuda_enter(dev, "pool2d", err) != 0) return -1;
  switch (x->dtype) {
    case QT_F32: return pl_run<float>(dev, mode, g, x, y, idx, err);
    case QT_F64: return pl_run<double>(dev, mode, g, x, y, idx, err);
    case QT_F16: return pl_run<qt_f16>(dev, mode, g, x, y, idx, err);
    case QT_BF16: return pl_run<qt_bf16>(dev, mode, g, x, y, idx, err);
    default: return qt_errorf(err, "pool2d: a float dtype expected, got %s", qt_dtypes[x->dtype].name);
  }
}
