/*
** reduce.cu — the reduce slot of the CUDA device: sum, mean, prod, max, min, argmax, argmin,
** var, std, norm, logsumexp over all elements (dim == -1) or along one dim, for every dtype
** (the float-only ones: the float dtypes; float16 and bfloat16 through red_half, read as
** float32 and folded by the float32 reducers) and any strides. The CPU twin of every reducer
** is runtime/cpu/cpu_reduce.c.
**
** Results are those of the CPU device (runtime/cpu/): int sums wrap in int64, float sums and
** means accumulate in float64, max/min propagate NaN, argmax/argmin give the 1-based first
** position of the best value with a NaN counting as both the largest and the smallest (the
** first NaN wins). Empty input: sum 0, mean NaN, the others an error ("max: empty tensor").
**
** Every reduction is a tree: each thread folds a strided run sequentially, then warp shuffles
** and (for block-wide groups) shared memory combine the threads in a fixed order. Arg ops
** combine (value, position) pairs and choose the smaller position on equal values, so the
** answer does not depend on the grouping. Long reductions are split: pass 1 writes one partial
** per (output, split) into scratch memory from the caching allocator, pass 2 combines each
** output's partials in a fixed order. No atomics, so float sums are deterministic too.
**
** Pass-1 kernels, chosen per call:
**   rows:    a group (a warp, or a block for few long rows) per (output, split), walking the
**            reduced dim; 16-byte loads, four in flight, when it is contiguous and aligned.
**            Full reductions of a tensor that collapses to one strided run go here too.
**   cols:    a thread per (output, split) when the outputs are what is contiguous (sum over
**            the rows of a matrix): neighbouring threads read neighbouring elements.
**   generic: full reductions of views that do not collapse to one run: a grid-stride walk
**            in memory order (dims sorted by stride), carrying the row-major position for
**            the arg ops.
*/
#include <math.h>
#include <string.h>

#include <type_traits>

#include "dispatch.cuh"
#include "kernels.h"

#define RED_THREADS 256

/* ------------------------------------------------------------------ reducers */

template <typename T> struct red_pair { T v; long long i; };  /* value, 0-based position */

template <typename T> __device__ __forceinline__ bool red_isnan(T) { return false; }
template <> __device__ __forceinline__ bool red_isnan<float>(float x) { return x != x; }
template <> __device__ __forceinline__ bool red_isnan<double>(double x) { return x != x; }

/* The identities of max and min: the infinities for floats, the type's range otherwise. */
template <typename T> struct red_limits {
  typedef typename qt_dtype_traits<T>::unsigned_type U;
  static __device__ T lowest() { return (T)QT_INT_MIN(T, U); }
  static __device__ T highest() { return (T)QT_INT_MAX(T, U); }
};
template <> struct red_limits<float> {
  static __device__ float lowest() { return -INFINITY; }
  static __device__ float highest() { return INFINITY; }
};
template <> struct red_limits<double> {
  static __device__ double lowest() { return -INFINITY; }
  static __device__ double highest() { return INFINITY; }
};
template <> struct red_limits<long long> {  /* int64's word (qt_cuda_word) */
  static __device__ long long lowest() { return INT64_MIN; }
  static __device__ long long highest() { return INT64_MAX; }
};
template <> struct red_limits<bool> {
  static __device__ bool lowest() { return false; }
  static __device__ bool highest() { return true; }
};

/* Sum accumulators and results: floats in double, integers and bools in wrapping 64-bit
** (a sum of bools counts them, as int64). */
template <typename T> struct red_sum_types { typedef unsigned long long acc; typedef long long out; };
template <> struct red_sum_types<float> { typedef double acc; typedef float out; };
template <> struct red_sum_types<double> { typedef double acc; typedef double out; };

/* An element as a sum accumulator: floats exactly into double, the others sign-extended. */
__device__ __forceinline__ double red_to_sum(float v) { return v; }
__device__ __forceinline__ double red_to_sum(double v) { return v; }
template <typename T>
__device__ __forceinline__ unsigned long long red_to_sum(T v) {
  return (unsigned long long)(long long)v;
}

/* Each reducer: In (element), Acc (the state the tree combines), Out (result element),
** identity(), combine(a, b) and finish(acc, count, param); and the per-thread side: Local (a
** thread's running state), start(), fold(local, value, position, param) and close(local,
** param) -> Acc. Most reducers fold by combine(local, make(value, position)) with Local =
** Acc (red_simple); var keeps shifted sums per thread instead, which closes into Chan's
** (n, mean, m2). param is the slot's arg (var's correction, norm's p). Accumulators are
** their own types (double for float32), so a 16-bit float dtype will fold the same way. */
template <class R, typename A>
struct red_simple {
  typedef A Local;
  /* first: the output's first element (var's shift; the others ignore it) */
  template <typename V>
  static __device__ __forceinline__ Local start(const V *) { return R::identity(); }
  template <typename V>
  static __device__ __forceinline__ void fold(Local &l, V v, long long pos, double) {
    l = R::combine(l, R::make(v, pos));
  }
  static __device__ __forceinline__ A close(const Local &l, double) { return l; }
};

template <typename T, bool MEAN>
struct red_sum : red_simple<red_sum<T, MEAN>, typename red_sum_types<T>::acc> {
  typedef T In;
  typedef typename red_sum_types<T>::acc Acc;
  typedef typename red_sum_types<T>::out Out;
  static __device__ __forceinline__ Acc identity() { return Acc(0); }
  static __device__ __forceinline__ Acc make(T v, long long) { return red_to_sum(v); }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) { return a + b; }
  static __device__ __forceinline__ Out finish(Acc a, long long count, double) {
    if constexpr (MEAN) return (Out)((double)a / (double)count);
    else return (Out)a;
  }
};

/* Products: floats in double, integers and bools in wrapping 64-bit, as sums. */
template <typename T>
struct red_prod : red_simple<red_prod<T>, typename red_sum_types<T>::acc> {
  typedef T In;
  typedef typename red_sum_types<T>::acc Acc;
  typedef typename red_sum_types<T>::out Out;
  static __device__ __forceinline__ Acc identity() { return Acc(1); }
  static __device__ __forceinline__ Acc make(T v, long long) { return red_to_sum(v); }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) { return a * b; }
  static __device__ __forceinline__ Out finish(Acc a, long long, double) { return (Out)a; }
};

template <typename T, bool MAX>
struct red_extreme : red_simple<red_extreme<T, MAX>, T> {
  typedef T In;
  typedef T Acc;
  typedef T Out;
  static __device__ __forceinline__ Acc identity() {
    return MAX ? red_limits<T>::lowest() : red_limits<T>::highest();
  }
  static __device__ __forceinline__ Acc make(T v, long long) { return v; }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) {
    if (red_isnan(a)) return a;
    if (red_isnan(b)) return b;
    return (MAX ? b > a : b < a) ? b : a;
  }
  static __device__ __forceinline__ Out finish(Acc a, long long, double) { return a; }
};

template <typename T, bool MAX>
struct red_arg : red_simple<red_arg<T, MAX>, red_pair<T>> {
  typedef T In;
  typedef red_pair<T> Acc;
  typedef long long Out;
  static __device__ __forceinline__ Acc identity() { Acc a; a.v = T(0); a.i = -1; return a; }
  static __device__ __forceinline__ Acc make(T v, long long pos) { Acc a; a.v = v; a.i = pos; return a; }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    const bool an = red_isnan(a.v), bn = red_isnan(b.v);
    if (an || bn) {
      if (an && bn) return a.i <= b.i ? a : b;
      return an ? a : b;
    }
    if (a.v == b.v) return a.i <= b.i ? a : b;
    return (MAX ? a.v > b.v : a.v < b.v) ? a : b;
  }
  static __device__ __forceinline__ Out finish(Acc a, long long, double) { return a.i + 1; }
};

/* var and std (T float or double; the core casts integers to double). Every thread of an
** output keeps shifted sums with one shift k, the output's first element: s1 = sum(x - k),
** s2 = sum((x - k)^2), in double, so one pass reads the data and no element costs a
** division; close() turns them into (n, mean - k, m2), and the tree merges those by Chan's
** formula. The shift keeps s2 - s1^2/n from cancelling the way the naive sum of squares
** does (1e8 + noise): k is a data point, so n (mean - k)^2 <= n m2 bounds the loss; and
** the merged means are small (relative to k), so merging loses nothing to their size. */
struct red_moments { double n, mean, m2; };
struct red_shifted { double n, k, s1, s2; };

template <typename T, bool STD>
struct red_var {
  typedef T In;
  typedef red_moments Acc;
  typedef T Out;
  typedef red_shifted Local;
  static __device__ __forceinline__ Acc identity() { Acc a; a.n = 0; a.mean = 0; a.m2 = 0; return a; }
  static __device__ __forceinline__ Local start(const T *first) {
    Local l; l.n = 0; l.k = (double)*first; l.s1 = 0; l.s2 = 0; return l;
  }
  static __device__ __forceinline__ void fold(Local &l, T v, long long, double) {
    const double d = (double)v - l.k;
    l.n += 1;
    l.s1 += d;
    l.s2 = fma(d, d, l.s2);
  }
  static __device__ __forceinline__ Acc close(const Local &l, double) {
    Acc a = identity();
    if (l.n == 0) return a;
    a.n = l.n;
    a.mean = l.s1 / l.n;  /* less k, as every partial of this output */
    const double m2 = l.s2 - l.s1 * (l.s1 / l.n);
    a.m2 = m2 < 0 ? 0 : m2;  /* rounding only; a NaN stays */
    return a;
  }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    Acc r;
    r.n = a.n + b.n;
    const double delta = b.mean - a.mean;
    r.mean = a.mean + delta * (b.n / r.n);
    r.m2 = a.m2 + b.m2 + delta * delta * (a.n * (b.n / r.n));
    return r;
  }
  static __device__ __forceinline__ Out finish(Acc a, long long, double correction) {
    const double divisor = a.n - correction > 0 ? a.n - correction : 0;
    const double v = a.m2 / divisor;  /* n <= correction: inf, or NaN for 0/0 (PyTorch) */
    return (Out)(STD ? sqrt(v) : v);
  }
};

/* exp(d) in T's precision (float32 data: expf), for logsumexp's terms. */
template <typename T> __device__ __forceinline__ double red_exp(double d) { return exp(d); }
template <> __device__ __forceinline__ double red_exp<float>(double d) { return (double)expf((float)d); }

/* logsumexp: (m, s) = (the largest element, sum of exp(x - m)); a larger element rescales s.
** NaN wins; +inf gives +inf; only -inf (or nothing) gives -inf. */
struct red_lse { double m, s; };
template <typename T>
struct red_logsumexp : red_simple<red_logsumexp<T>, red_lse> {
  typedef T In;
  typedef red_lse Acc;
  typedef T Out;
  typedef red_lse Local;
  static __device__ __forceinline__ Acc identity() { Acc a; a.m = -INFINITY; a.s = 0; return a; }
  static __device__ __forceinline__ void fold(Local &l, T v, long long, double) {
    const double x = (double)v;
    if (x != x || l.m != l.m) { l.m = NAN; return; }
    if (x > l.m) {
      l.s = (l.m == -INFINITY ? 0.0 : l.s * red_exp<T>(l.m - x)) + 1.0;
      l.m = x;
    } else if (x != -INFINITY && l.m != INFINITY) {
      l.s += red_exp<T>(x - l.m);
    }
  }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) {
    if (a.m != a.m) return a;
    if (b.m != b.m) return b;
    if (a.m == -INFINITY) return b;
    if (b.m == -INFINITY) return a;
    Acc r;
    if (a.m == INFINITY || b.m == INFINITY) { r.m = INFINITY; r.s = 1; return r; }
    r.m = a.m > b.m ? a.m : b.m;
    r.s = a.s * red_exp<T>(a.m - r.m) + b.s * red_exp<T>(b.m - r.m);
    return r;
  }
  static __device__ __forceinline__ Out finish(Acc a, long long, double) {
    if (a.m != a.m || a.m == INFINITY || a.m == -INFINITY) return (Out)a.m;
    return (Out)(a.m + log(a.s));
  }
};

/* norm by p: the sums of |x|, x^2, (x != 0) or |x|^p in double, or the largest / smallest
** |x| (NaN wins). T is float or double (the core casts integers). */
enum { RED_NORM_1, RED_NORM_2, RED_NORM_0, RED_NORM_P, RED_NORM_INF, RED_NORM_NEG_INF };
template <typename T, int MODE>
struct red_norm : red_simple<red_norm<T, MODE>, double> {
  typedef T In;
  typedef double Acc;
  typedef T Out;
  typedef double Local;
  static constexpr bool EXTREME = MODE == RED_NORM_INF || MODE == RED_NORM_NEG_INF;
  static __device__ __forceinline__ Acc identity() {
    return MODE == RED_NORM_NEG_INF ? INFINITY : 0.0;
  }
  static __device__ __forceinline__ void fold(Local &l, T v, long long, double p) {
    const double a = fabs((double)v);
    if constexpr (MODE == RED_NORM_1) l += a;
    else if constexpr (MODE == RED_NORM_2) l = fma(a, a, l);
    else if constexpr (MODE == RED_NORM_0) l += a != 0 ? 1.0 : 0.0;
    else if constexpr (MODE == RED_NORM_P) l += pow(a, p);
    else l = combine(l, a);
  }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) {
    if constexpr (EXTREME) {
      if (a != a) return a;
      if (b != b) return b;
      return (MODE == RED_NORM_INF ? b > a : b < a) ? b : a;
    } else {
      return a + b;
    }
  }
  static __device__ __forceinline__ Out finish(Acc a, long long, double p) {
    if constexpr (MODE == RED_NORM_2) return (Out)sqrt(a);
    else if constexpr (MODE == RED_NORM_P) return (Out)pow(a, 1.0 / p);
    else return (Out)a;
  }
};

/* A 16-bit float's reducer (M is qt_f16 or qt_bf16): R of float, with each element read
** as M and widened exactly, and a float result rounded once into M (arg ops keep their
** int64 positions). R's accumulators are R's own, so float16 sums accumulate as float32
** ones do (in double), never in 16 bits. */
template <class R, typename M>
struct red_half : R {
  typedef M In;
  typedef typename std::conditional<std::is_same<typename R::Out, float>::value, M,
                                    typename R::Out>::type Out;
  typedef typename R::Acc Acc;
  typedef typename R::Local Local;
  static __device__ __forceinline__ Local start(const M *first) {
    const float f = qt_half_to_f32(*first);
    return R::start(&f);
  }
  static __device__ __forceinline__ void fold(Local &l, M v, long long pos, double prm) {
    R::fold(l, qt_half_to_f32(v), pos, prm);
  }
  static __device__ __forceinline__ Out finish(Acc a, long long count, double prm) {
    if constexpr (std::is_same<Out, M>::value) return QT_HALF_FROM(M, R::finish(a, count, prm));
    else return R::finish(a, count, prm);
  }
};

/* R as it reads elements of type M: R itself, or its 16-bit adapter. */
template <class R, typename M>
using red_as = typename std::conditional<std::is_same<typename R::In, M>::value, R,
                                         red_half<R, M>>::type;

/* ------------------------------------------------------------------ tree helpers */

__device__ __forceinline__ float red_shfl(float x, int d) { return __shfl_down_sync(0xffffffffu, x, d); }
__device__ __forceinline__ double red_shfl(double x, int d) { return __shfl_down_sync(0xffffffffu, x, d); }
__device__ __forceinline__ int red_shfl(int x, int d) { return __shfl_down_sync(0xffffffffu, x, d); }
__device__ __forceinline__ long long red_shfl(long long x, int d) {
  return __shfl_down_sync(0xffffffffu, x, d);
}
__device__ __forceinline__ unsigned long long red_shfl(unsigned long long x, int d) {
  return __shfl_down_sync(0xffffffffu, x, d);
}
/* Types narrower than a word (bool, uint8) travel as an int. */
template <typename T>
__device__ __forceinline__ T red_shfl(T x, int d) {
  static_assert(sizeof(T) < 4, "red_shfl: a word-sized type needs its own overload");
  return (T)__shfl_down_sync(0xffffffffu, (int)x, d);
}
__device__ __forceinline__ red_moments red_shfl(red_moments a, int d) {
  a.n = red_shfl(a.n, d);
  a.mean = red_shfl(a.mean, d);
  a.m2 = red_shfl(a.m2, d);
  return a;
}
__device__ __forceinline__ red_lse red_shfl(red_lse a, int d) {
  a.m = red_shfl(a.m, d);
  a.s = red_shfl(a.s, d);
  return a;
}
template <typename T>
__device__ __forceinline__ red_pair<T> red_shfl(red_pair<T> p, int d) {
  p.v = red_shfl(p.v, d);
  p.i = red_shfl(p.i, d);
  return p;
}

/* Lane 0 of the warp gets the combination of the warp's 32 values. */
template <class R>
__device__ __forceinline__ typename R::Acc red_warp(typename R::Acc a) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) a = R::combine(a, red_shfl(a, d));
  return a;
}

/* Thread 0 of the group gets the combination: a warp, or the whole block of RED_THREADS
** (then every thread of the block must call it). */
template <class R, int GROUP>
__device__ __forceinline__ typename R::Acc red_group(typename R::Acc a) {
  a = red_warp<R>(a);
  if constexpr (GROUP == 32) {
    return a;
  } else {
    __shared__ typename R::Acc warp_acc[RED_THREADS / 32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) warp_acc[warp] = a;
    __syncthreads();
    if (warp == 0) {
      a = lane < RED_THREADS / 32 ? warp_acc[lane] : R::identity();
      a = red_warp<R>(a);
    }
    __syncthreads();  /* warp_acc is reused by the next task */
    return a;
  }
}

/* 16 bytes of elements, for vector loads. */
template <typename T> struct __align__(16) red_vec { T v[16 / sizeof(T)]; };

template <class R>
__device__ __forceinline__ void red_fold_vec(typename R::Local &acc,
                                             const red_vec<typename R::In> &x, long long pos,
                                             long long step, double prm) {
#pragma unroll
  for (int k = 0; k < (int)(16 / sizeof(typename R::In)); k++)
    R::fold(acc, x.v[k], pos + k * step, prm);
}

/* ------------------------------------------------------------------ outputs */

/* The outputs of a reduction as a (collapsed) shape: output o sits at src offset
** sum(c_d * src[d]) (its first reduced element), dst offset sum(c_d * dst[d]) and row-major
** position sum(c_d * lin[d]) (full reductions: where its run starts). */
typedef struct red_outer {
  int ndim;
  int64_t size[QT_MAXDIM];
  int64_t src[QT_MAXDIM];
  int64_t dst[QT_MAXDIM];
  int64_t lin[QT_MAXDIM];
} red_outer;

__device__ __forceinline__ void red_locate(const red_outer &ou, int64_t o, int64_t &src_off,
                                           int64_t &dst_off, int64_t &lin_off) {
  src_off = 0; dst_off = 0; lin_off = 0;
  for (int d = ou.ndim - 1; d >= 0; d--) {
    const int64_t s = ou.size[d];
    const int64_t c = o % s;
    o /= s;
    src_off += c * ou.src[d];
    dst_off += c * ou.dst[d];
    lin_off += c * ou.lin[d];
  }
}

/* ------------------------------------------------------------------ kernels */

/* Pass 1, rows: task t = (output o, split s) reduces elements r0 <= r < r1 of o's run
** (src offset base + r*rstride, position lin + r*rlin) with one group of GROUP threads.
** With one split the result goes to dst, else to partial[t]. */
template <class R, int GROUP, bool VEC>
__global__ void __launch_bounds__(RED_THREADS)
red_rows_kernel(red_outer ou, const typename R::In *__restrict__ src,
                typename R::Out *__restrict__ dst, typename R::Acc *__restrict__ partial,
                int64_t outputs, int64_t len, int64_t rstride, int64_t rlin, int64_t splits,
                int64_t chunk, int64_t count, double prm) {
  typedef typename R::In T;
  typedef typename R::Acc Acc;
  constexpr int PER_BLOCK = RED_THREADS / GROUP;
  constexpr int V = 16 / sizeof(T);
  const int lane = threadIdx.x % GROUP;
  const int64_t tasks = outputs * splits;
  for (int64_t t = (int64_t)blockIdx.x * PER_BLOCK + threadIdx.x / GROUP; t < tasks;
       t += (int64_t)gridDim.x * PER_BLOCK) {
    const int64_t o = splits == 1 ? t : t / splits;
    const int64_t s = t - o * splits;
    int64_t src_off, dst_off, lin;
    red_locate(ou, o, src_off, dst_off, lin);
    const int64_t r0 = s * chunk;
    const int64_t r1 = len < r0 + chunk ? len : r0 + chunk;
    const T *base = src + src_off;
    typename R::Local loc = R::start(base);
    if (VEC) {
      const red_vec<T> *p = reinterpret_cast<const red_vec<T> *>(base + r0);
      const int64_t nv = (r1 - r0) / V;
      int64_t j = lane;
      for (; j + 3 * GROUP < nv; j += 4 * GROUP) {
        const red_vec<T> x0 = p[j], x1 = p[j + GROUP], x2 = p[j + 2 * GROUP],
                         x3 = p[j + 3 * GROUP];
        red_fold_vec<R>(loc, x0, lin + (r0 + j * V) * rlin, rlin, prm);
        red_fold_vec<R>(loc, x1, lin + (r0 + (j + GROUP) * V) * rlin, rlin, prm);
        red_fold_vec<R>(loc, x2, lin + (r0 + (j + 2 * GROUP) * V) * rlin, rlin, prm);
        red_fold_vec<R>(loc, x3, lin + (r0 + (j + 3 * GROUP) * V) * rlin, rlin, prm);
      }
      for (; j < nv; j += GROUP) red_fold_vec<R>(loc, p[j], lin + (r0 + j * V) * rlin, rlin, prm);
      for (int64_t r = r0 + nv * V + lane; r < r1; r += GROUP)
        R::fold(loc, base[r], lin + r * rlin, prm);
    } else {
#pragma unroll 4
      for (int64_t r = r0 + lane; r < r1; r += GROUP)
        R::fold(loc, base[r * rstride], lin + r * rlin, prm);
    }
    Acc acc = red_group<R, GROUP>(R::close(loc, prm));
    if (lane == 0) {
      if (splits == 1) dst[dst_off] = R::finish(acc, count, prm);
      else partial[t] = acc;
    }
  }
}

/* Pass 1, cols: one thread per (output, split); blockIdx.y walks the splits. */
template <class R>
__global__ void __launch_bounds__(RED_THREADS)
red_cols_kernel(red_outer ou, const typename R::In *__restrict__ src,
                typename R::Out *__restrict__ dst, typename R::Acc *__restrict__ partial,
                int64_t outputs, int64_t len, int64_t rstride, int64_t rlin, int64_t splits,
                int64_t chunk, int64_t count, double prm) {
  typedef typename R::In T;
  typedef typename R::Acc Acc;
  for (int64_t s = blockIdx.y; s < splits; s += gridDim.y) {
    const int64_t r0 = s * chunk;
    const int64_t r1 = len < r0 + chunk ? len : r0 + chunk;
    for (int64_t o = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; o < outputs;
         o += (int64_t)gridDim.x * blockDim.x) {
      int64_t src_off, dst_off, lin;
      red_locate(ou, o, src_off, dst_off, lin);
      const T *p = src + src_off + r0 * rstride;
      typename R::Local loc = R::start(src + src_off);
#pragma unroll 4
      for (int64_t r = r0; r < r1; r++, p += rstride) R::fold(loc, *p, lin + r * rlin, prm);
      const Acc acc = R::close(loc, prm);
      if (splits == 1) dst[dst_off] = R::finish(acc, count, prm);
      else partial[o * splits + s] = acc;
    }
  }
}

/* Pass 1, generic full reduction: the walk is over `shape` (sizes, src strides, row-major
** positions in lin); one partial per block. */
template <class R>
__global__ void __launch_bounds__(RED_THREADS)
red_generic_kernel(red_outer shape, const typename R::In *__restrict__ src,
                   typename R::Acc *__restrict__ partial, int64_t n, double prm) {
  typename R::Local loc = R::start(src);  /* the view's first element */
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t src_off, dst_off, lin;
    red_locate(shape, i, src_off, dst_off, lin);
    R::fold(loc, src[src_off], lin, prm);
  }
  typename R::Acc acc = red_group<R, RED_THREADS>(R::close(loc, prm));
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

/* Pass 2: output o combines partial[o*splits .. o*splits + splits) with one group and writes
** the finished value. With splits == 0 it writes finish(identity) (empty sums and means). */
template <class R, int GROUP>
__global__ void __launch_bounds__(RED_THREADS)
red_finish_kernel(red_outer ou, const typename R::Acc *__restrict__ partial,
                  typename R::Out *__restrict__ dst, int64_t outputs, int64_t splits,
                  int64_t count, double prm) {
  constexpr int PER_BLOCK = RED_THREADS / GROUP;
  const int lane = threadIdx.x % GROUP;
  for (int64_t o = (int64_t)blockIdx.x * PER_BLOCK + threadIdx.x / GROUP; o < outputs;
       o += (int64_t)gridDim.x * PER_BLOCK) {
    typename R::Acc acc = R::identity();
    for (int64_t s = lane; s < splits; s += GROUP) acc = R::combine(acc, partial[o * splits + s]);
    acc = red_group<R, GROUP>(acc);
    if (lane == 0) {
      int64_t src_off, dst_off, lin;
      red_locate(ou, o, src_off, dst_off, lin);
      dst[dst_off] = R::finish(acc, count, prm);
    }
  }
}

/* ------------------------------------------------------------------ planning (host) */

/* Drops size-1 dims and merges each dim into its outer neighbour when the pair is contiguous
** in src (and in dst / lin when asked), so the kernels decompose as few dims as possible. */
inline void red_outer_collapse(red_outer *ou, bool use_dst, bool use_lin) {
  int n = 0;
  for (int d = 0; d < ou->ndim; d++) {
    if (ou->size[d] == 1) continue;
    if (n > 0) {
      const int p = n - 1;
      const int64_t s = ou->size[d];
      if (ou->src[p] == ou->src[d] * s && (!use_dst || ou->dst[p] == ou->dst[d] * s) &&
          (!use_lin || ou->lin[p] == ou->lin[d] * s)) {
        ou->size[p] *= s;
        ou->src[p] = ou->src[d];
        ou->dst[p] = ou->dst[d];
        ou->lin[p] = ou->lin[d];
        continue;
      }
    }
    ou->size[n] = ou->size[d];
    ou->src[n] = ou->src[d];
    ou->dst[n] = ou->dst[d];
    ou->lin[n] = ou->lin[d];
    n++;
  }
  ou->ndim = n;
}

inline int64_t red_cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t red_clamp(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : x > hi ? hi : x; }

enum { RED_ROWS, RED_COLS, RED_GENERIC };

/* What one call runs: the pass-1 kernel, its geometry, and how the work is split. */
typedef struct red_plan {
  int kind;
  int group;             /* rows: 32 or RED_THREADS */
  bool vec;              /* rows: 16-byte loads */
  red_outer ou;          /* outputs (rows, cols) or the walk (generic) */
  int64_t outputs, len, rstride, rlin, count;
  int64_t splits, chunk; /* rows, cols: partials per output; generic: blocks */
} red_plan;

/* Splits for the rows and cols kernels: enough groups to fill the GPU, not so many that a
** split gets less than a few loads per thread. */
inline void red_split(red_plan *p, int sm_count, size_t elsize) {
  const int64_t vec = (int64_t)(16 / elsize);
  int64_t splits, chunk;
  if (p->len <= 0) {  /* empty reductions never reach a pass-1 kernel */
    p->splits = 1;
    p->chunk = 1;
    return;
  }
  if (p->kind == RED_ROWS) {
    const int64_t want_tasks = p->group == 32 ? (int64_t)sm_count * 64 : (int64_t)sm_count * 4;
    const int64_t min_chunk = (int64_t)p->group * vec * 4;
    splits = red_clamp(red_cdiv(want_tasks, p->outputs), 1, red_cdiv(p->len, min_chunk));
    chunk = red_cdiv(p->len, splits);
    chunk = red_cdiv(chunk, vec) * vec;  /* split starts stay 16-byte aligned */
  } else {
    splits = red_clamp(red_cdiv((int64_t)sm_count * 2048, p->outputs), 1, red_cdiv(p->len, 32));
    chunk = red_cdiv(p->len, splits);
  }
  if (chunk < 1) chunk = 1;
  p->chunk = chunk;
  p->splits = red_cdiv(p->len, chunk);
  if (p->splits < 1) p->splits = 1;
}

/* Along dim: outputs are src's dims without dim (with dst's strides), collapsed. */
inline void red_plan_dim(red_plan *p, const qt_view *dst, const qt_view *src, int dim,
                         int sm_count) {
  memset(p, 0, sizeof *p);
  red_outer *ou = &p->ou;
  int k = 0;
  for (int d = 0; d < src->ndim; d++) {
    if (d == dim) continue;
    const int j = d < dim ? d : d - 1;
    ou->size[k] = src->size[d];
    ou->src[k] = src->stride[d];
    ou->dst[k] = dst->stride[j];
    ou->lin[k] = 0;
    k++;
  }
  ou->ndim = k;
  red_outer_collapse(ou, true, false);
  p->outputs = 1;
  for (int d = 0; d < ou->ndim; d++) p->outputs *= ou->size[d];
  p->len = src->size[dim];
  p->rstride = src->size[dim] == 1 ? 1 : src->stride[dim];
  p->rlin = 1;
  p->count = p->len;

  const size_t elsize = qt_elsize(src->dtype);
  const bool outputs_contiguous = ou->ndim > 0 && ou->src[ou->ndim - 1] == 1;
  if (p->rstride == 1 && p->len >= 32) p->kind = RED_ROWS;
  else if (outputs_contiguous || p->len < 32) p->kind = RED_COLS;
  else p->kind = RED_ROWS;
  if (p->kind == RED_ROWS) {
    p->group = (p->outputs >= (int64_t)sm_count * 16 || p->len < 2048) ? 32 : RED_THREADS;
    bool vec = p->rstride == 1 && ((uintptr_t)src->data & 15) == 0;
    for (int d = 0; d < ou->ndim && vec; d++)
      if ((ou->src[d] * (int64_t)elsize) & 15) vec = false;
    p->vec = vec;
  }
  red_split(p, sm_count, elsize);
}

/* Over everything: the dims sorted by stride (memory order, for coalescing) and collapsed;
** lin carries each dim's row-major step so arg ops report row-major positions. Arg ops merge
** dims only when that keeps positions linear. One run left: the rows kernel with one
** output; otherwise the generic walk. */
inline void red_plan_all(red_plan *p, const qt_view *src, bool is_arg, int sm_count) {
  memset(p, 0, sizeof *p);
  red_outer *ou = &p->ou;
  int64_t lin = 1, n = 1;
  int k = 0;
  for (int d = src->ndim - 1; d >= 0; d--) {
    n *= src->size[d];
    if (src->size[d] != 1) {
      ou->size[k] = src->size[d];
      ou->src[k] = src->stride[d];
      ou->lin[k] = lin;
      k++;
    }
    lin *= src->size[d];
  }
  /* k entries innermost first: reverse into outer-first order, then a stable insertion
  ** sort by decreasing stride. */
  for (int a = 0, b = k - 1; a < b; a++, b--) {
    int64_t t;
    t = ou->size[a]; ou->size[a] = ou->size[b]; ou->size[b] = t;
    t = ou->src[a]; ou->src[a] = ou->src[b]; ou->src[b] = t;
    t = ou->lin[a]; ou->lin[a] = ou->lin[b]; ou->lin[b] = t;
  }
  for (int a = 1; a < k; a++) {
    const int64_t sz = ou->size[a], st = ou->src[a], li = ou->lin[a];
    int b = a - 1;
    while (b >= 0 && ou->src[b] < st) {
      ou->size[b + 1] = ou->size[b]; ou->src[b + 1] = ou->src[b]; ou->lin[b + 1] = ou->lin[b];
      b--;
    }
    ou->size[b + 1] = sz; ou->src[b + 1] = st; ou->lin[b + 1] = li;
  }
  ou->ndim = k;
  red_outer_collapse(ou, false, is_arg);
  p->count = n;
  const size_t elsize = qt_elsize(src->dtype);
  if (ou->ndim <= 1) {
    p->kind = RED_ROWS;
    p->group = RED_THREADS;
    p->outputs = 1;
    p->len = n;
    p->rstride = ou->ndim == 1 ? ou->src[0] : 1;
    p->rlin = ou->ndim == 1 ? ou->lin[0] : 1;
    ou->ndim = 0;
    p->vec = p->rstride == 1 && ((uintptr_t)src->data & 15) == 0;
    red_split(p, sm_count, elsize);
  } else {
    p->kind = RED_GENERIC;
    p->outputs = 1;
    p->len = n;
    p->splits = red_clamp(red_cdiv(n, RED_THREADS * 4), 1, (int64_t)sm_count * 8);
  }
}

/* ------------------------------------------------------------------ launch */

inline unsigned red_grid(int64_t blocks, int sm_count) {
  const int64_t cap = (int64_t)sm_count * 64;
  return (unsigned)red_clamp(blocks, 1, cap);
}

/* Runs a plan for reducer R: pass 1, then pass 2 when there are partials. */
template <class R>
static int red_run(qt_device *dev, const char *name, const red_plan *p, const qt_view *dst,
                   const qt_view *src, double prm, qt_err *err) {
  typedef typename R::In T;
  typedef typename R::Acc Acc;
  typedef typename R::Out Out;
  qt_cuda_ctx *c = qt_cuda_context(dev);
  const int sm = c->sm_count > 0 ? c->sm_count : 1;
  const T *s = (const T *)src->data;
  Out *d = (Out *)dst->data;

  const int64_t nparts = p->kind == RED_GENERIC ? p->splits
                         : p->splits > 1        ? p->outputs * p->splits
                                                : 0;
  Acc *part = NULL;
  if (nparts > 0 && qt_cuda_scratch(dev, (size_t)nparts * sizeof(Acc), (void **)&part, err))
    return -1;

  switch (p->kind) {
    case RED_ROWS: {
      const int per_block = RED_THREADS / p->group;
      const unsigned blocks = red_grid(red_cdiv(p->outputs * p->splits, per_block), sm);
      if (p->group == 32) {
        if (p->vec)
          red_rows_kernel<R, 32, true><<<blocks, RED_THREADS, 0, c->stream>>>(
              p->ou, s, d, part, p->outputs, p->len, p->rstride, p->rlin, p->splits, p->chunk, p->count, prm);
        else
          red_rows_kernel<R, 32, false><<<blocks, RED_THREADS, 0, c->stream>>>(
              p->ou, s, d, part, p->outputs, p->len, p->rstride, p->rlin, p->splits, p->chunk, p->count, prm);
      } else {
        if (p->vec)
          red_rows_kernel<R, RED_THREADS, true><<<blocks, RED_THREADS, 0, c->stream>>>(
              p->ou, s, d, part, p->outputs, p->len, p->rstride, p->rlin, p->splits, p->chunk, p->count, prm);
        else
          red_rows_kernel<R, RED_THREADS, false><<<blocks, RED_THREADS, 0, c->stream>>>(
              p->ou, s, d, part, p->outputs, p->len, p->rstride, p->rlin, p->splits, p->chunk, p->count, prm);
      }
      break;
    }
    case RED_COLS: {
      const int64_t bx = red_clamp(red_cdiv(p->outputs, RED_THREADS), 1, (int64_t)1 << 20);
      const int64_t by = red_clamp(p->splits, 1, 65535);
      red_cols_kernel<R><<<dim3((unsigned)bx, (unsigned)by), RED_THREADS, 0, c->stream>>>(
          p->ou, s, d, part, p->outputs, p->len, p->rstride, p->rlin, p->splits, p->chunk, p->count, prm);
      break;
    }
    default:
      red_generic_kernel<R><<<(unsigned)p->splits, RED_THREADS, 0, c->stream>>>(p->ou, s, part, p->len,
                                                                                prm);
      break;
  }
  int rc = qt_cuda_check_launch(dev, name, err);
  if (rc == 0 && nparts > 0) {
    /* The finish walk: outputs in dst's geometry (none for a full reduction). */
    red_outer fin = p->ou;
    if (p->kind == RED_GENERIC) fin.ndim = 0;
    const int64_t splits = p->splits;
    if (splits > 64) {
      red_finish_kernel<R, RED_THREADS><<<red_grid(p->outputs, sm), RED_THREADS, 0, c->stream>>>(
          fin, part, d, p->outputs, splits, p->count, prm);
    } else {
      red_finish_kernel<R, 32><<<red_grid(red_cdiv(p->outputs, RED_THREADS / 32), sm), RED_THREADS,
                                  0, c->stream>>>(fin, part, d, p->outputs, splits, p->count, prm);
    }
    rc = qt_cuda_check_launch(dev, name, err);
  }
  if (part) qt_cuda_scratch_free(dev, part, (size_t)nparts * sizeof(Acc));
  return rc;
}

/* Writes finish(identity) to every output: sums of nothing are 0, means NaN. */
template <class R>
static int red_empty(qt_device *dev, const char *name, const red_plan *p, const qt_view *dst,
                     qt_err *err) {
  qt_cuda_ctx *c = qt_cuda_context(dev);
  const int sm = c->sm_count > 0 ? c->sm_count : 1;
  red_finish_kernel<R, 32><<<red_grid(red_cdiv(p->outputs, RED_THREADS / 32), sm), RED_THREADS, 0,
                             c->stream>>>(p->ou, NULL, (typename R::Out *)dst->data, p->outputs,
                                          0, 0, 0.0);
  return qt_cuda_check_launch(dev, name, err);
}

template <class R>
static int red_go(qt_device *dev, const char *name, const qt_view *dst, const qt_view *src,
                  int dim, bool is_arg, double prm, qt_err *err) {
  qt_cuda_ctx *c = qt_cuda_context(dev);
  const int sm = c->sm_count > 0 ? c->sm_count : 1;
  red_plan p;
  if (dim < 0) red_plan_all(&p, src, is_arg, sm);
  else red_plan_dim(&p, dst, src, dim, sm);
  if (p.outputs == 0) return 0;
  if (p.len == 0) {
    p.ou.ndim = dim < 0 ? 0 : p.ou.ndim;
    return red_empty<R>(dev, name, &p, dst, err);
  }
  return red_run<R>(dev, name, &p, dst, src, prm, err);
}

/* ------------------------------------------------------------------ the slot */


inline qt_dtype red_result_dtype(qt_redop op, qt_dtype src) {
  switch (op) {
    case QT_SUM: case QT_PROD: return qt_is_float(src) ? src : QT_I64;
    case QT_ARGMAX: case QT_ARGMIN: return QT_I64;
    default: return src;
  }
}

/* The float-only reducers (the core has cast integers to float64): T is float or double;
** M the element type (T, or a 16-bit float read through red_half with T float). */
template <typename T, typename M = T>
static int red_dispatch_float(qt_device *dev, qt_redop op, const char *name, const qt_view *dst,
                              const qt_view *src, int dim, double arg, qt_err *err) {
  switch (op) {
    case QT_MEAN: return red_go<red_as<red_sum<T, true>, M>>(dev, name, dst, src, dim, false, 0, err);
    case QT_VAR: return red_go<red_as<red_var<T, false>, M>>(dev, name, dst, src, dim, false, arg, err);
    case QT_STD: return red_go<red_as<red_var<T, true>, M>>(dev, name, dst, src, dim, false, arg, err);
    case QT_LOGSUMEXP: return red_go<red_as<red_logsumexp<T>, M>>(dev, name, dst, src, dim, false, 0, err);
    case QT_NORM:
      if (arg == 1) return red_go<red_as<red_norm<T, RED_NORM_1>, M>>(dev, name, dst, src, dim, false, arg, err);
      if (arg == 2) return red_go<red_as<red_norm<T, RED_NORM_2>, M>>(dev, name, dst, src, dim, false, arg, err);
      if (arg == 0) return red_go<red_as<red_norm<T, RED_NORM_0>, M>>(dev, name, dst, src, dim, false, arg, err);
      if (arg == INFINITY)
        return red_go<red_as<red_norm<T, RED_NORM_INF>, M>>(dev, name, dst, src, dim, false, arg, err);
      if (arg == -INFINITY)
        return red_go<red_as<red_norm<T, RED_NORM_NEG_INF>, M>>(dev, name, dst, src, dim, false, arg, err);
      if (arg > 0) return red_go<red_as<red_norm<T, RED_NORM_P>, M>>(dev, name, dst, src, dim, false, arg, err);
      return qt_errorf(err, "norm: p must be >= 0 or +-inf, got %g", arg);
    default: return qt_errorf(err, "reduce: unknown op %d", (int)op);
  }
}

/* T is the element type of `dtype` (float for the 16-bit ones, M their type); picks the
** reducer for `op`. */
template <typename T, typename M = T>
static int red_dispatch_op(qt_device *dev, qt_redop op, const char *name, const qt_view *dst,
                           const qt_view *src, int dim, qt_err *err) {
  switch (op) {
    case QT_SUM: return red_go<red_as<red_sum<T, false>, M>>(dev, name, dst, src, dim, false, 0, err);
    case QT_PROD: return red_go<red_as<red_prod<T>, M>>(dev, name, dst, src, dim, false, 0, err);
    case QT_MAX: return red_go<red_as<red_extreme<T, true>, M>>(dev, name, dst, src, dim, false, 0, err);
    case QT_MIN: return red_go<red_as<red_extreme<T, false>, M>>(dev, name, dst, src, dim, false, 0, err);
    case QT_ARGMAX: return red_go<red_as<red_arg<T, true>, M>>(dev, name, dst, src, dim, true, 0, err);
    case QT_ARGMIN: return red_go<red_as<red_arg<T, false>, M>>(dev, name, dst, src, dim, true, 0, err);
    default: return qt_errorf(err, "reduce: unknown op %d", (int)op);
  }
}

/* Every reduction of one dtype's elements: T is its C type (the float-only ops reach only
** the float dtypes: the core casts the others). */
template <typename T>
int red_run_dtype(qt_device *dev, qt_redop op, const char *name, const qt_view *dst,
                  const qt_view *src, int dim, double arg, bool float_only, qt_err *err) {
  if constexpr (qt_is_half_v<T>) {
    if (float_only) return red_dispatch_float<float, T>(dev, op, name, dst, src, dim, arg, err);
    return red_dispatch_op<float, T>(dev, op, name, dst, src, dim, err);
  } else if constexpr (qt_is_float_v<T>) {
    if (float_only) return red_dispatch_float<T>(dev, op, name, dst, src, dim, arg, err);
    return red_dispatch_op<T>(dev, op, name, dst, src, dim, err);
  } else {
    (void)arg, (void)float_only;
    return red_dispatch_op<typename qt_cuda_word<T>::type>(dev, op, name, dst, src, dim, err);
  }
}
QT_PARTS(int, red_run_dtype, (qt_device *, qt_redop, const char *, const qt_view *,
                              const qt_view *, int, double, bool, qt_err *))

#ifndef QT_PART
extern "C" int qt_cuda_reduce(qt_device *dev, qt_redop op, const qt_view *dst, const qt_view *src,
                              int dim, double arg, qt_err *err) {
  if ((unsigned)op >= (unsigned)QT_NREDOPS) return qt_errorf(err, "reduce: unknown op %d", (int)op);
  const char *name = qt_redop_name(op);
  if (qt_cuda_enter(dev, name, err)) return -1;
  if ((unsigned)src->dtype >= (unsigned)QT_NDTYPES)
    return qt_errorf(err, "%s: unsupported dtype", name);
  const bool float_only = op == QT_MEAN || op == QT_VAR || op == QT_STD || op == QT_NORM ||
                          op == QT_LOGSUMEXP;
  if (float_only && !qt_is_float(src->dtype))
    return qt_errorf(err, "%s: not defined for %s tensors (cast to a float dtype first)", name,
                     qt_dtypes[src->dtype].name);
  const qt_dtype want = red_result_dtype(op, src->dtype);
  if (dst->dtype != want)
    return qt_errorf(err, "%s: result must be %s, got %s", name, qt_dtypes[want].name,
                     qt_dtypes[dst->dtype].name);
  if (dim < -1 || dim >= src->ndim)
    return qt_errorf(err, "%s: dimension %d out of range for a %d-d tensor", name, dim, src->ndim);
  if (dim >= 0 && dst->ndim != src->ndim - 1)
    return qt_errorf(err, "%s: result must have %d dims, got %d", name, src->ndim - 1, dst->ndim);
  int64_t len = 1;
  if (dim >= 0) len = src->size[dim];
  else for (int d = 0; d < src->ndim; d++) len *= src->size[d];
  if (len == 0 && op != QT_SUM && op != QT_MEAN) return qt_errorf(err, "%s: empty tensor", name);

  int rc = -1;
  if (!qt_dtype_switch_all(src->dtype, [&](auto zero) {
        rc = red_run_dtype<decltype(zero)>(dev, op, name, dst, src, dim, arg, float_only, err);
      }))
    return qt_errorf(err, "%s: unsupported dtype %d", name, (int)src->dtype);
  return rc;
}
#endif
