/*
** optim.cu — the optim_step slot on the GPU: SGD and Adam/AdamW over every tensor of a
** parameter group in a few launches (a multi-tensor kernel, as PyTorch's fused=True). The
** CPU twin is runtime/cpu/cpu_optim.c, the same update in the same order (device.h's
** qt_optim_opts).
**
** Hand-written: cuBLAS and CUB have no optimizer step, and a composition of elementwise ops
** costs about a dozen launches and passes over memory per tensor. A launch takes up to
** OPT_MAX_TENSORS tensors, their pointers and sizes passed by value in the kernel's
** parameters (no upload). The tensors are cut into chunks of OPT_CHUNK elements numbered
** across the batch; each block takes chunks in a grid-stride loop, finds its tensor by a
** binary search over the chunk starts, and updates the chunk a few loads a thread at a
** time (opt_ilp), 16-byte vectors when every pointer of the batch is aligned for them, so
** loads stay in flight and the pass runs at memory speed. 16-bit tensors compute in float32,
** float32 in float32, float64 in double.
*/
#include <math.h>
#include <stdint.h>

#include "dispatch.cuh"
#include "kernels.h"

#define OPT_THREADS 512
#define OPT_CHUNK 16384      /* elements; a multiple of every vector width */
#define OPT_MAX_TENSORS 48   /* keeps opt_batch and opt_params under 4 KiB of parameters */
#define OPT_MAX_VIEWS 5

struct opt_batch {
  void *ptr[OPT_MAX_VIEWS][OPT_MAX_TENSORS];
  int64_t numel[OPT_MAX_TENSORS];
  int first[OPT_MAX_TENSORS + 1];   /* tensor k's first chunk; first[ntensors]: all chunks */
  int ntensors;
};

template <typename A>
struct opt_params {
  A lr, wd, mom, damp1, b1, b2, eps, step_size, bc2, decay;
  bool maximize, nesterov, first, decoupled, amsgrad;
  /* Adam's step read on the device (qt_optim_opts.step_count), or NULL: step_size and bc2
  ** are then computed per block from it and the double-precision lr and betas */
  const double *step_count;
  double lr64, beta1, beta2;
};

/* q with Adam's step-dependent terms from the step in device memory, when there is one. */
template <typename A>
__device__ __forceinline__ opt_params<A> opt_resolve(const opt_params<A> &in) {
  opt_params<A> q = in;
  if (q.step_count != NULL) {
    double t = *q.step_count;
    q.step_size = (A)(q.lr64 / (1 - pow(q.beta1, t)));
    q.bc2 = (A)sqrt(1 - pow(q.beta2, t));
  }
  return q;
}

template <typename T, typename A>
__device__ __forceinline__ A opt_in(T x) {
  if constexpr (qt_is_half_v<T>) return (A)qt_half_to_f32(x);
  else return (A)x;
}
template <typename T, typename A>
__device__ __forceinline__ T opt_out(A x) {
  if constexpr (qt_is_half_v<T>) return QT_HALF_FROM(T, (float)x);
  else return (T)x;
}

/* One element: x[0] the parameter, x[1] the gradient, x[2..NV-1] the state. */
template <typename A, bool SGD, int NV>
__device__ __forceinline__ void opt_update(const opt_params<A> &q, A *x) {
  A g = q.maximize ? -x[1] : x[1];
  if constexpr (SGD) {
    if (q.wd != 0) g += q.wd * x[0];
    if constexpr (NV == 3) {
      A b = q.first ? g : q.mom * x[2] + q.damp1 * g;
      x[2] = b;
      g = q.nesterov ? g + q.mom * b : b;
    }
    x[0] -= q.lr * g;
  } else {
    A p = x[0];
    if (q.wd != 0) {
      if (q.decoupled) p *= q.decay;
      else g += q.wd * p;
    }
    A w = 1 - q.b1;
    A m = w < (A)0.5 ? x[2] + w * (g - x[2]) : g - (g - x[2]) * (1 - w);  /* lerp's formula */
    A v = q.b2 * x[3] + (1 - q.b2) * g * g;
    x[2] = m;
    x[3] = v;
    if constexpr (NV == 5) {
      if (!(x[4] >= v)) x[4] = v;   /* NaN propagates, as maximum's */
      v = x[4];
    }
    x[0] = p - q.step_size * (m / (sqrt(v) / q.bc2 + q.eps));
  }
}

/* VEC elements a load: 16 bytes when the batch is aligned for it, else 1. */
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) opt_vec {
  T v[VEC];
};

/* Loads in flight a thread: OPT_ILP vectors of each tensor (4 single elements, 2 vectors of
** 16 bytes, 1 of 16-bit ones, whose 8 elements widen to 8 floats: more would spill). */
template <typename T, int VEC>
__host__ __device__ constexpr int opt_ilp() { return VEC == 1 ? 4 : sizeof(T) == 2 ? 1 : 2; }

template <typename T, typename A, bool SGD, int NV, int VEC>
__global__ void __launch_bounds__(OPT_THREADS)
    opt_kernel(const __grid_constant__ opt_batch batch, const __grid_constant__ opt_params<A> qin) {
  typedef opt_vec<T, VEC> V;
  const opt_params<A> q = opt_resolve(qin);
  constexpr int OPT_ILP = opt_ilp<T, VEC>();
  int nchunks = batch.first[batch.ntensors];
  for (int c = blockIdx.x; c < nchunks; c += gridDim.x) {
    int lo = 0, hi = batch.ntensors;   /* the tensor with first[lo] <= c < first[lo + 1] */
    while (hi - lo > 1) {
      int mid = (lo + hi) / 2;
      if (batch.first[mid] <= c) lo = mid;
      else hi = mid;
    }
    int64_t start = (int64_t)(c - batch.first[lo]) * OPT_CHUNK;
    int64_t len = batch.numel[lo] - start;
    if (len > OPT_CHUNK) len = OPT_CHUNK;
    T *ptr[NV];
#pragma unroll
    for (int j = 0; j < NV; j++) ptr[j] = (T *)batch.ptr[j][lo] + start;
    int64_t nvec = len / VEC;
    for (int64_t base = 0; base < nvec; base += (int64_t)blockDim.x * OPT_ILP) {
      V r[NV][OPT_ILP];
#pragma unroll
      for (int u = 0; u < OPT_ILP; u++) {
        int64_t i = base + (int64_t)u * blockDim.x + threadIdx.x;
        if (i < nvec) {
#pragma unroll
          for (int j = 0; j < NV; j++) r[j][u] = ((const V *)ptr[j])[i];
        }
      }
#pragma unroll
      for (int u = 0; u < OPT_ILP; u++) {
        int64_t i = base + (int64_t)u * blockDim.x + threadIdx.x;
        if (i < nvec) {
#pragma unroll
          for (int e = 0; e < VEC; e++) {
            A x[NV];
#pragma unroll
            for (int j = 0; j < NV; j++) x[j] = opt_in<T, A>(r[j][u].v[e]);
            opt_update<A, SGD, NV>(q, x);
#pragma unroll
            for (int j = 0; j < NV; j++) r[j][u].v[e] = opt_out<T, A>(x[j]);
          }
#pragma unroll
          for (int j = 0; j < NV; j++)
            if (j != 1) ((V *)ptr[j])[i] = r[j][u];   /* the gradient is only read */
        }
      }
    }
    for (int64_t i = nvec * VEC + threadIdx.x; i < len; i += blockDim.x) {   /* the tail */
      A x[NV];
#pragma unroll
      for (int j = 0; j < NV; j++) x[j] = opt_in<T, A>(ptr[j][i]);
      opt_update<A, SGD, NV>(q, x);
#pragma unroll
      for (int j = 0; j < NV; j++)
        if (j != 1) ptr[j][i] = opt_out<T, A>(x[j]);
    }
  }
}

template <typename T, typename A, bool SGD, int NV>
static void opt_launch(qt_device *dev, const opt_batch &b, const opt_params<A> &q,
                       bool aligned) {
  qt_cuda_ctx *c = qt_cuda_context(dev);
  int nchunks = b.first[b.ntensors];
  int sms = c->sm_count > 0 ? c->sm_count : 1;
  int blocks = nchunks < sms * 4 ? nchunks : sms * 4;   /* 2048 threads an SM, twice over */
  constexpr int VEC = 16 / (int)sizeof(T);
  if (aligned)
    opt_kernel<T, A, SGD, NV, VEC><<<blocks, OPT_THREADS, 0, c->stream>>>(b, q);
  else
    opt_kernel<T, A, SGD, NV, 1><<<blocks, OPT_THREADS, 0, c->stream>>>(b, q);
}

template <typename T, typename A>
static void opt_run(qt_device *dev, const qt_optim_opts *s, const opt_batch &b, bool aligned) {
  opt_params<A> q;
  q.lr = (A)s->lr;
  q.wd = (A)s->weight_decay;
  q.mom = (A)s->momentum;
  q.damp1 = (A)(1 - s->dampening);
  q.b1 = (A)s->beta1;
  q.b2 = (A)s->beta2;
  q.eps = (A)s->eps;
  q.step_size = s->kind == QT_OPTIM_ADAM ? (A)(s->lr / s->bias_correction1) : (A)0;
  q.bc2 = s->kind == QT_OPTIM_ADAM ? (A)sqrt(s->bias_correction2) : (A)1;
  q.decay = (A)(1 - s->lr * s->weight_decay);
  q.maximize = s->maximize;
  q.nesterov = s->nesterov;
  q.first = s->first;
  q.decoupled = s->decoupled;
  q.amsgrad = s->amsgrad;
  q.step_count = s->kind == QT_OPTIM_ADAM ? s->step_count : NULL;
  q.lr64 = s->lr;
  q.beta1 = s->beta1;
  q.beta2 = s->beta2;
  switch (s->nviews) {
    case 2: opt_launch<T, A, true, 2>(dev, b, q, aligned); break;
    case 3: opt_launch<T, A, true, 3>(dev, b, q, aligned); break;
    case 4: opt_launch<T, A, false, 4>(dev, b, q, aligned); break;
    default: opt_launch<T, A, false, 5>(dev, b, q, aligned); break;
  }
}

extern "C" int qt_cuda_optim_step(qt_device *dev, const qt_optim_opts *s, int64_t n,
                                  const qt_view *views, qt_err *err) {
  const char *op = "optim_step";
  int nv = s->nviews;
  bool sgd = s->kind == QT_OPTIM_SGD;
  if (!(sgd ? nv == 2 || nv == 3 : nv == 4 || nv == 5))
    return qt_errorf(err, "optim_step: %d views per tensor for this update", nv);
  if (n <= 0) return 0;
  qt_dtype dt = views[0].dtype;
  if (!qt_is_float(dt)) return qt_errorf(err, "optim_step: a float dtype expected");
  if (qt_cuda_enter(dev, op, err) != 0) return -1;
  for (int64_t k0 = 0; k0 < n;) {
    opt_batch b;
    b.ntensors = 0;
    b.first[0] = 0;
    bool aligned = true;
    /* Up to OPT_MAX_TENSORS tensors, and fewer chunks than an int counts. */
    while (k0 < n && b.ntensors < OPT_MAX_TENSORS) {
      const qt_view *v = views + k0 * nv;
      int64_t chunks = (v[0].numel + OPT_CHUNK - 1) / OPT_CHUNK;
      if (b.ntensors > 0 && b.first[b.ntensors] + chunks > (int64_t)1 << 30) break;
      int t = b.ntensors;
      for (int j = 0; j < nv; j++) {
        b.ptr[j][t] = v[j].data;
        if ((uintptr_t)v[j].data % 16 != 0) aligned = false;
      }
      b.numel[t] = v[0].numel;
      b.first[t + 1] = b.first[t] + (int)chunks;   /* a tensor is < 2^31 * 16384 elements */
      b.ntensors++;
      k0++;
    }
    if (b.first[b.ntensors] == 0) continue;           /* only empty tensors */
    switch (dt) {
      case QT_F32: opt_run<float, float>(dev, s, b, aligned); break;
      case QT_F64: opt_run<double, double>(dev, s, b, aligned); break;
      case QT_F16: opt_run<qt_f16, float>(dev, s, b, aligned); break;
      case QT_BF16: opt_run<qt_bf16, float>(dev, s, b, aligned); break;
      default: return qt_errorf(err, "optim_step: a float dtype expected");
    }
    if (qt_cuda_check_launch(dev, op, err) != 0) return -1;
  }
  return 0;
}
