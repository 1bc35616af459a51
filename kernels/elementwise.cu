/*
** elementwise.cu — copy/cast, fill, binary, binary with a scalar, and unary ops on the GPU.
**
** Every slot works the same way: copy the views, collapse them together on the host
** (qt_views_collapse merges dims that are contiguous in every view and drops size-1 dims),
** then pick one of two kernels:
**   - contiguous: every view is one dense run; each thread moves 16 bytes per operand
**     (float4-sized packs) in a grid-stride loop, with a scalar tail; misaligned pointers
**     (views that start mid-pack) take the same kernel one element at a time;
**   - strided: any strides, broadcasting included (stride 0); the element's offset in
**     each view comes from its row-major index, with 32-bit divisions when the tensor has
**     fewer than 2^32 elements (most do; 64-bit division is several times slower).
**     A copy that transposes (src dense along one of the last two dims, dst along the
**     other) goes through 32x32 shared-memory tiles instead, so that both sides stay
**     coalesced (docs/NOTES.md has what that bought).
** The op is a run-time switch inside the kernel rather than a template parameter: these
** kernels are memory-bound, the switch is uniform across the grid and costs a few
** instructions per element, and it keeps the number of instantiations (and compile time)
** small: dtype x layout, not op x dtype x layout.
**
** What each op computes on one element is runtime/scalar.h's op lists, expanded here into
** the in-kernel switches and on the CPU into its row functions: the two devices agree by
** construction (integer arithmetic wraps, x/0 = 0 for integers, comparisons and logical ops give bool,
** maximum/minimum propagate NaN, float -> int conversion saturates with NaN -> 0).
**
** Host overhead per call is kept small for tiny tensors (a 16-element add should cost
** little more than the launch): no allocation, one launch, one cudaGetLastError.
*/
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "dispatch.cuh"
#include "kernels.h"
#include "scalar.h"

#define EW_THREADS 256

/* ------------------------------------------------------------------ element functions */

/* x as TD: QT_CONVERT_<dst kind>_<src kind> (scalar.h). */
template <typename TD, typename TS>
__device__ __forceinline__ TD ew_convert(TS x) {
  typedef typename qt_dtype_traits<TD>::unsigned_type UD;
  constexpr bool fd = qt_is_float_v<TD>, fs = qt_is_float_v<TS>;
  if constexpr (std::is_same<TD, TS>::value) return x;
  else if constexpr (qt_is_half_v<TD>) return QT_HALF_FROM(TD, x);    /* QT_CONVERT_HALF_* */
  else if constexpr (qt_is_half_v<TS>) {                              /* QT_CONVERT_*_HALF */
    if constexpr (qt_is_bool_v<TD>) return qt_half_to_f32(x) != 0;
    else if constexpr (fd) return (TD)qt_half_to_f32(x);
    else return QT_CONVERT_INT_FLOAT(TD, UD, qt_half_to_f32(x));
  }
  else if constexpr (qt_is_bool_v<TD> || qt_is_bool_v<TS>) return (TD)(x);  /* QT_CONVERT_*_BOOL */
  else if constexpr (fd && fs) return QT_CONVERT_FLOAT_FLOAT(TD, UD, x);
  else if constexpr (fd) return QT_CONVERT_FLOAT_INT(TD, UD, x);
  else if constexpr (fs) return QT_CONVERT_INT_FLOAT(TD, UD, x);
  else return QT_CONVERT_INT_INT(TD, UD, x);
}

/* A binary op's result type: T, or bool for the ops whose result column is BOOL
** (comparisons, logical ops). BOOLOUT is a template parameter rather than read from the
** op, so that one kernel serves each family. */
template <typename T, bool BOOLOUT>
using ew_out_t = typename std::conditional<BOOLOUT, bool, T>::type;

/* The type an element is computed in: float for the 16-bit floats (kind HALF: loaded
** exactly, computed in float32, rounded once when stored, as PyTorch does), else T. */
template <typename T>
using ew_calc_t = typename std::conditional<qt_is_half_v<T>, float, T>::type;
template <typename T>
__device__ __forceinline__ ew_calc_t<T> ew_up(T x) {
  if constexpr (qt_is_half_v<T>) return qt_half_to_f32(x);
  else return x;
}
/* A result r (computed as ew_calc_t) stored as R: rounded for a 16-bit R. */
template <typename R, typename C>
__device__ __forceinline__ R ew_down(C r) {
  if constexpr (qt_is_half_v<R>) return QT_HALF_FROM(R, r);
  else return (R)r;
}

/* One case per op of the list, with the expression of T's kind (QT_PICK_<kind>). The
** expressions name x, y, T and U (and the unary parameters), so they are in scope here.
** An op of the other family than BOOLOUT is never launched with it (qt_cuda_binary picks
** by the op), and its case is empty. */
#define EW_BINOP_CASE_(P, E, name, ints, result, fexpr, iexpr, ...)           \
  case E:                                                                  \
    if constexpr (QT_BINOP_IS_BOOL_##result != BOOLOUT) return R(0);       \
    else if constexpr (qt_is_float_v<T>) return (R)(fexpr);                \
    else if constexpr (qt_is_bool_v<T>) return (R)QT_PICK_BOOL(fexpr, iexpr); \
    else return (R)(iexpr);

template <typename T, bool BOOLOUT>
__device__ __forceinline__ ew_out_t<T, BOOLOUT> ew_binop(int op, T x, T y) {
  typedef typename qt_dtype_traits<T>::unsigned_type U;
  typedef ew_out_t<T, BOOLOUT> R;
  switch (op) {
    QT_BINOP_LIST(EW_BINOP_CASE_, ~)
    default: return R(0);
  }
}

/* ew_binop for every T: a 16-bit T computes in float32 and rounds the result. */
template <typename T, bool BOOLOUT>
__device__ __forceinline__ ew_out_t<T, BOOLOUT> ew_binop_at(int op, ew_calc_t<T> x, ew_calc_t<T> y) {
  return ew_down<ew_out_t<T, BOOLOUT>>(ew_binop<ew_calc_t<T>, BOOLOUT>(op, x, y));
}

/* A unary op's parameters (qt_unop_params): as T for float dtypes, as int64_t for the
** others (integers are clamped in int64, then narrowed). */
template <typename T>
struct ew_unary_params {
  T f[3];
  int64_t i[3];
};

/* Integer and bool dtypes skip the float-only ops (ints == 0): the core casts those
** first. As for the binary ops, BOOLOUT selects the family (isnan, isinf, isfinite). */
#define EW_UNOP_CASE_(P, E, name, ints, result, fexpr, iexpr, ...)               \
  case E:                                                                     \
    if constexpr (QT_BINOP_IS_BOOL_##result != BOOLOUT) return R(0);          \
    else if constexpr (qt_is_float_v<T>) return (R)(fexpr);                   \
    else if constexpr (!ints) return R(0);                                    \
    else if constexpr (qt_is_bool_v<T>) return (R)QT_PICK_BOOL(fexpr, iexpr); \
    else return (R)(iexpr);

template <typename T, bool BOOLOUT>
__device__ __forceinline__ ew_out_t<T, BOOLOUT> ew_unop(int op, T x, const ew_unary_params<T> &p) {
  typedef typename qt_dtype_traits<T>::unsigned_type U;
  typedef ew_out_t<T, BOOLOUT> R;
  const T p0 = p.f[0], p1 = p.f[1], p2 = p.f[2];
  const int64_t p0_i = p.i[0], p1_i = p.i[1], p2_i = p.i[2];
  (void)p0; (void)p1; (void)p2; (void)p0_i; (void)p1_i; (void)p2_i;
  switch (op) {
    QT_UNOP_LIST(EW_UNOP_CASE_, ~)
    default: return R(0);
  }
}

/* ew_unop for every T (the parameters as ew_calc_t). */
template <typename T, bool BOOLOUT>
__device__ __forceinline__ ew_out_t<T, BOOLOUT> ew_unop_at(int op, T x,
                                                           const ew_unary_params<ew_calc_t<T>> &p) {
  return ew_down<ew_out_t<T, BOOLOUT>>(ew_unop<ew_calc_t<T>, BOOLOUT>(op, ew_up(x), p));
}

/* ------------------------------------------------------------------ geometry */

/* What the strided kernels get by value: the collapsed sizes and each view's strides. */
template <int NV>
struct ew_geometry {
  int ndim;
  int64_t size[QT_MAXDIM];
  int64_t stride[NV][QT_MAXDIM];
};

/* Element offsets of row-major index i in every view: one division per dim but the
** outermost (whose index is what is left of i). IndexT is uint32_t when numel < 2^32. */
template <typename IndexT, int NV>
__device__ __forceinline__ void ew_offsets(const ew_geometry<NV> &g, int64_t linear,
                                           int64_t (&off)[NV]) {
  IndexT i = (IndexT)linear;
#pragma unroll
  for (int v = 0; v < NV; v++) off[v] = 0;
  for (int d = g.ndim - 1; d > 0; d--) {
    IndexT s = (IndexT)g.size[d];
    IndexT q = i / s;
    IndexT r = i - q * s;
#pragma unroll
    for (int v = 0; v < NV; v++) off[v] += (int64_t)r * g.stride[v][d];
    i = q;
  }
#pragma unroll
  for (int v = 0; v < NV; v++) off[v] += (int64_t)i * g.stride[v][0];
}

/* 16 bytes of T: the unit of the contiguous kernels' loads and stores. */
template <typename T>
struct alignas(16) ew_pack {
  T v[16 / sizeof(T)];
};

/* W results of type R stored at once: a pack of T's results (16 bytes when R is T; W bytes
** when R is bool, the store of a comparison). */
template <typename R, int W>
struct alignas(sizeof(R) * W) ew_vec {
  R v[W];
};

__device__ __forceinline__ int64_t ew_thread_index() {
  return (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t ew_thread_count() {
  return (int64_t)gridDim.x * blockDim.x;
}

/* ------------------------------------------------------------------ kernels */

/* PACKED: all pointers are 16-byte aligned; the packs, then the tail one by one. R is
** the result type (ew_out_t). FIX >= 0: the op is FIX, known at compile time (the hot ops:
** ew_fixed_op with the EW_HOT_ lists), so the op list's switch folds away; unswitched, it
** ran per element, eight or sixteen times a loop iteration for 16-bit dtypes (a bf16 add
** at half of PyTorch's bandwidth, gelu_tanh at a third). FIX < 0: op, read at run time. */
template <typename T, bool BOOLOUT, bool PACKED, int FIX = -1>
__global__ void ew_binary_contiguous(int op_, ew_out_t<T, BOOLOUT> *dst, const T *a, const T *b,
                                     int64_t n) {
  const int op = FIX >= 0 ? FIX : op_;
  typedef ew_out_t<T, BOOLOUT> R;
  int64_t start = ew_thread_index(), step = ew_thread_count();
  int64_t done = 0;
  if constexpr (PACKED) {
    constexpr int W = 16 / sizeof(T);
    int64_t packs = n / W;
    const ew_pack<T> *pa = (const ew_pack<T> *)a, *pb = (const ew_pack<T> *)b;
    ew_vec<R, W> *pd = (ew_vec<R, W> *)dst;
    /* two packs an iteration, a grid apart (each still coalesced): four 16-byte loads in
    ** flight per thread instead of two */
    int64_t k = start;
    for (; k + step < packs; k += 2 * step) {
      ew_pack<T> x0 = pa[k], y0 = pb[k], x1 = pa[k + step], y1 = pb[k + step];
      ew_vec<R, W> r0, r1;
#pragma unroll
      for (int j = 0; j < W; j++) {
        r0.v[j] = ew_binop_at<T, BOOLOUT>(op, ew_up(x0.v[j]), ew_up(y0.v[j]));
        r1.v[j] = ew_binop_at<T, BOOLOUT>(op, ew_up(x1.v[j]), ew_up(y1.v[j]));
      }
      pd[k] = r0;
      pd[k + step] = r1;
    }
    if (k < packs) {
      ew_pack<T> x = pa[k], y = pb[k];
      ew_vec<R, W> r;
#pragma unroll
      for (int j = 0; j < W; j++) r.v[j] = ew_binop_at<T, BOOLOUT>(op, ew_up(x.v[j]), ew_up(y.v[j]));
      pd[k] = r;
    }
    done = packs * W;
  }
  for (int64_t i = done + start; i < n; i += step)
    dst[i] = ew_binop_at<T, BOOLOUT>(op, ew_up(a[i]), ew_up(b[i]));
}

template <typename T, bool BOOLOUT, typename IndexT>
__global__ void ew_binary_strided(int op, ew_out_t<T, BOOLOUT> *dst, const T *a, const T *b,
                                  ew_geometry<3> g, int64_t n) {
  for (int64_t i = ew_thread_index(); i < n; i += ew_thread_count()) {
    int64_t off[3];
    ew_offsets<IndexT, 3>(g, i, off);
    dst[off[0]] = ew_binop_at<T, BOOLOUT>(op, ew_up(a[off[1]]), ew_up(b[off[2]]));
  }
}

/* dst = a op s, or s op a (scalar_first). */
template <typename T, bool BOOLOUT, bool PACKED, int FIX = -1>
__global__ void ew_scalar_contiguous(int op_, ew_out_t<T, BOOLOUT> *dst, const T *a,
                                     ew_calc_t<T> s, bool scalar_first, int64_t n) {
  const int op = FIX >= 0 ? FIX : op_;
  typedef ew_out_t<T, BOOLOUT> R;
  int64_t start = ew_thread_index(), step = ew_thread_count();
  int64_t done = 0;
  if constexpr (PACKED) {
    constexpr int W = 16 / sizeof(T);
    int64_t packs = n / W;
    const ew_pack<T> *pa = (const ew_pack<T> *)a;
    ew_vec<R, W> *pd = (ew_vec<R, W> *)dst;
    for (int64_t k = start; k < packs; k += step) {
      ew_pack<T> x = pa[k];
      ew_vec<R, W> r;
#pragma unroll
      for (int j = 0; j < W; j++)
        r.v[j] = scalar_first ? ew_binop_at<T, BOOLOUT>(op, s, ew_up(x.v[j]))
                              : ew_binop_at<T, BOOLOUT>(op, ew_up(x.v[j]), s);
      pd[k] = r;
    }
    done = packs * W;
  }
  for (int64_t i = done + start; i < n; i += step)
    dst[i] = scalar_first ? ew_binop_at<T, BOOLOUT>(op, s, ew_up(a[i]))
                          : ew_binop_at<T, BOOLOUT>(op, ew_up(a[i]), s);
}

template <typename T, bool BOOLOUT, typename IndexT>
__global__ void ew_scalar_strided(int op, ew_out_t<T, BOOLOUT> *dst, const T *a, ew_calc_t<T> s,
                                  bool scalar_first, ew_geometry<2> g, int64_t n) {
  for (int64_t i = ew_thread_index(); i < n; i += ew_thread_count()) {
    int64_t off[2];
    ew_offsets<IndexT, 2>(g, i, off);
    ew_calc_t<T> x = ew_up(a[off[1]]);
    dst[off[0]] = scalar_first ? ew_binop_at<T, BOOLOUT>(op, s, x) : ew_binop_at<T, BOOLOUT>(op, x, s);
  }
}

template <typename T, bool BOOLOUT, bool PACKED, int FIX = -1>
__global__ void ew_unary_contiguous(int op_, ew_out_t<T, BOOLOUT> *dst, const T *a,
                                    ew_unary_params<ew_calc_t<T>> p, int64_t n) {
  const int op = FIX >= 0 ? FIX : op_;
  typedef ew_out_t<T, BOOLOUT> R;
  int64_t start = ew_thread_index(), step = ew_thread_count();
  int64_t done = 0;
  if constexpr (PACKED) {
    constexpr int W = 16 / sizeof(T);
    int64_t packs = n / W;
    const ew_pack<T> *pa = (const ew_pack<T> *)a;
    ew_vec<R, W> *pd = (ew_vec<R, W> *)dst;
    for (int64_t k = start; k < packs; k += step) {
      ew_pack<T> x = pa[k];
      ew_vec<R, W> r;
#pragma unroll
      for (int j = 0; j < W; j++) r.v[j] = ew_unop_at<T, BOOLOUT>(op, x.v[j], p);
      pd[k] = r;
    }
    done = packs * W;
  }
  for (int64_t i = done + start; i < n; i += step) dst[i] = ew_unop_at<T, BOOLOUT>(op, a[i], p);
}

template <typename T, bool BOOLOUT, typename IndexT>
__global__ void ew_unary_strided(int op, ew_out_t<T, BOOLOUT> *dst, const T *a,
                                 ew_unary_params<ew_calc_t<T>> p, ew_geometry<2> g, int64_t n) {
  for (int64_t i = ew_thread_index(); i < n; i += ew_thread_count()) {
    int64_t off[2];
    ew_offsets<IndexT, 2>(g, i, off);
    dst[off[0]] = ew_unop_at<T, BOOLOUT>(op, a[off[1]], p);
  }
}

template <typename T, bool PACKED>
__global__ void ew_fill_contiguous(T *dst, T value, int64_t n) {
  int64_t start = ew_thread_index(), step = ew_thread_count();
  int64_t done = 0;
  if constexpr (PACKED) {
    constexpr int W = 16 / sizeof(T);
    int64_t packs = n / W;
    ew_pack<T> r;
#pragma unroll
    for (int j = 0; j < W; j++) r.v[j] = value;
    ew_pack<T> *pd = (ew_pack<T> *)dst;
    for (int64_t k = start; k < packs; k += step) pd[k] = r;
    done = packs * W;
  }
  for (int64_t i = done + start; i < n; i += step) dst[i] = value;
}

template <typename T, typename IndexT>
__global__ void ew_fill_strided(T *dst, T value, ew_geometry<1> g, int64_t n) {
  for (int64_t i = ew_thread_index(); i < n; i += ew_thread_count()) {
    int64_t off[1];
    ew_offsets<IndexT, 1>(g, i, off);
    dst[off[0]] = value;
  }
}

/* Conversions: one element per thread per step; consecutive threads touch consecutive
** elements, so every warp's loads and stores are coalesced. */
template <typename TD, typename TS>
__global__ void ew_copy_contiguous(TD *dst, const TS *src, int64_t n) {
  int64_t start = ew_thread_index(), step = ew_thread_count();
  for (int64_t i = start; i < n; i += step) dst[i] = ew_convert<TD, TS>(src[i]);
}

/* Eight elements of T, loaded or stored at once (16 bytes at most per instruction). */
template <typename T>
struct alignas(sizeof(T) * 8 > 16 ? 16 : sizeof(T) * 8) ew_oct {
  T v[8];
};

/* A contiguous conversion with both pointers aligned for ew_oct: eight elements per
** thread per step, so a float32 -> bfloat16 pass moves 32 bytes in and 16 out per
** thread in wide instructions (the one-element kernel above spends most of its issue
** slots on 2- and 4-byte accesses). */
template <typename TD, typename TS>
__global__ void ew_copy_oct(TD *dst, const TS *src, int64_t n) {
  int64_t start = ew_thread_index(), step = ew_thread_count(), octs = n / 8;
  const ew_oct<TS> *s8 = (const ew_oct<TS> *)src;
  ew_oct<TD> *d8 = (ew_oct<TD> *)dst;
  for (int64_t k = start; k < octs; k += step) {
    ew_oct<TS> x = s8[k];
    ew_oct<TD> r;
#pragma unroll
    for (int j = 0; j < 8; j++) r.v[j] = ew_convert<TD, TS>(x.v[j]);
    d8[k] = r;
  }
  for (int64_t i = octs * 8 + start; i < n; i += step) dst[i] = ew_convert<TD, TS>(src[i]);
}

template <typename TD, typename TS, typename IndexT>
__global__ void ew_copy_strided(TD *dst, const TS *src, ew_geometry<2> g, int64_t n) {
  for (int64_t i = ew_thread_index(); i < n; i += ew_thread_count()) {
    int64_t off[2];
    ew_offsets<IndexT, 2>(g, i, off);
    dst[off[0]] = ew_convert<TD, TS>(src[off[1]]);
  }
}

/* A same-dtype copy of rows: both views 2-D after collapsing, each row dense and 16-byte
** aligned in both, so a thread moves 16 bytes with no index arithmetic (blockIdx.y walks
** the rows, x the columns). qlua.cat writes each piece so, into a block of columns of the
** result, where the strided kernel's per-element divisions held it to 2.4 TB/s. */
QT_IF_ENTRY(
__global__ void ew_copy_rows16(uint4 *dst, int64_t dpitch16, const uint4 *src, int64_t spitch16,
                               int64_t width16, int64_t rows) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    uint4 *d = dst + r * dpitch16;
    const uint4 *s = src + r * spitch16;
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < width16;
         c += (int64_t)gridDim.x * blockDim.x)
      d[c] = s[c];
  }
})

/* The same for rows under up to EW_ROWS_OUTER outer dims (merging attention's heads,
** (b, h, l, d) -> (b, l, h, d): rows of d elements that no collapse makes 2-D): a thread
** moves 16 bytes and finds its row's two offsets with one division per outer dim, where
** the strided kernel divides per element. */
#define EW_ROWS_OUTER 4
typedef struct ew_rows_geometry {
  int nd;                                   /* outer dims, 1 .. EW_ROWS_OUTER */
  int64_t size[EW_ROWS_OUTER];
  int64_t dstride16[EW_ROWS_OUTER], sstride16[EW_ROWS_OUTER];  /* in 16-byte units */
  int64_t width16, rows;
} ew_rows_geometry;

QT_IF_ENTRY(
__global__ void ew_copy_rows16_nd(uint4 *dst, const uint4 *src, ew_rows_geometry g) {
  int64_t n = g.rows * g.width16;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = i / g.width16, c = i - r * g.width16, d = 0, s = 0;
    for (int k = g.nd - 1; k >= 0; k--) {
      int64_t q = r / g.size[k];
      int64_t x = r - q * g.size[k];
      d += x * g.dstride16[k];
      s += x * g.sstride16[k];
      r = q;
    }
    dst[d + c] = src[s + c];
  }
})

/* Transposing copies (x:t():contiguous() and friends): src is dense along dim P, dst along
** another dim Q, so a plain walk reads or writes one element per 32-byte sector. A 32x32
** tile goes through shared memory instead: loaded with threadIdx.x along P, stored with
** threadIdx.x along Q, both coalesced (the +1 column avoids bank conflicts). A third,
** outer dim (batch) is walked by blockIdx.z. */
#define EW_TILE 32
#define EW_TILE_ROWS 8

typedef struct ew_transpose_geometry {
  int64_t size_p, size_q, size_batch;
  int64_t src_p, src_q, src_batch;  /* element strides */
  int64_t dst_p, dst_q, dst_batch;
} ew_transpose_geometry;

template <typename TD, typename TS>
__global__ void ew_copy_transpose(TD *dst, const TS *src, ew_transpose_geometry g) {
  __shared__ TD tile[EW_TILE][EW_TILE + 1];
  int64_t p0 = (int64_t)blockIdx.x * EW_TILE;
  int64_t q_tiles = (g.size_q + EW_TILE - 1) / EW_TILE;
  for (int64_t batch = blockIdx.z; batch < g.size_batch; batch += gridDim.z) {
    const TS *s = src + batch * g.src_batch;
    TD *d = dst + batch * g.dst_batch;
    for (int64_t qt = blockIdx.y; qt < q_tiles; qt += gridDim.y) {
      int64_t q0 = qt * EW_TILE;
      int64_t p = p0 + threadIdx.x;
#pragma unroll
      for (int jj = 0; jj < EW_TILE; jj += EW_TILE_ROWS) {
        int j = jj + (int)threadIdx.y;
        int64_t q = q0 + j;
        if (p < g.size_p && q < g.size_q) tile[j][threadIdx.x] = ew_convert<TD, TS>(s[p * g.src_p + q * g.src_q]);
      }
      __syncthreads();
      int64_t q = q0 + threadIdx.x;
#pragma unroll
      for (int jj = 0; jj < EW_TILE; jj += EW_TILE_ROWS) {
        int j = jj + (int)threadIdx.y;
        int64_t pp = p0 + j;
        if (pp < g.size_p && q < g.size_q) d[pp * g.dst_p + q * g.dst_q] = tile[threadIdx.x][j];
      }
      __syncthreads();
    }
  }
}

/* ------------------------------------------------------------------ host side */


/* The collapsed views of one call, and what the launchers need to know about them. */
template <int NV>
struct ew_plan {
  qt_view view[NV];
  int64_t n;
  bool contiguous;  /* every view one dense run */
  bool packed;      /* ... and every pointer 16-byte aligned */
  bool small_index; /* n < 2^32: 32-bit index math in the strided kernels */
  ew_geometry<NV> geometry;
};

template <int NV>
static void ew_plan_make(ew_plan<NV> *plan, const qt_view *const *views) {
  qt_view *ptrs[NV];
  for (int v = 0; v < NV; v++) {
    plan->view[v] = *views[v];
    ptrs[v] = &plan->view[v];
  }
  qt_views_collapse(ptrs, NV);
  plan->n = plan->view[0].numel;
  bool contiguous = plan->view[0].ndim == 1, packed = true;
  for (int v = 0; v < NV; v++) {
    if (plan->view[v].stride[0] != 1) contiguous = false;
    if (((uintptr_t)plan->view[v].data & 15) != 0) packed = false;
  }
  plan->contiguous = contiguous;
  plan->packed = contiguous && packed;
  plan->small_index = plan->n < ((int64_t)1 << 32);
  if (!contiguous) {
    plan->geometry.ndim = plan->view[0].ndim;
    for (int d = 0; d < QT_MAXDIM; d++) {
      plan->geometry.size[d] = plan->view[0].size[d];
      for (int v = 0; v < NV; v++) plan->geometry.stride[v][d] = plan->view[v].stride[d];
    }
  }
}

/* Blocks for the contiguous kernels: one thread per pack (or per element). */
inline unsigned ew_blocks(qt_device *dev, int64_t n, size_t elsize, bool packed) {
  int64_t units = packed ? (n * (int64_t)elsize + 15) / 16 : n;
  return qt_cuda_blocks(dev, units, EW_THREADS);
}

/* Launches a family's kernel for plan p: contig(packed, blocks, stream) for a dense run
** (packed a std::bool_constant: 16-byte packs, or one element at a time), or
** strided(index, blocks, stream) for any strides (index uint32_t or int64_t: the offset
** arithmetic's width). Each family names its two kernels once, in the two lambdas. */
template <int NV, typename Contig, typename Strided>
static void ew_launch(qt_device *dev, const ew_plan<NV> &p, size_t elsize, Contig contig,
                      Strided strided) {
  cudaStream_t stream = qt_cuda_context(dev)->stream;
  if (p.contiguous) {
    unsigned blocks = ew_blocks(dev, p.n, elsize, p.packed);
    if (p.packed) contig(std::true_type(), blocks, stream);
    else contig(std::false_type(), blocks, stream);
  } else {
    unsigned blocks = qt_cuda_blocks(dev, p.n, EW_THREADS);
    if (p.small_index) strided(uint32_t(), blocks, stream);
    else strided(int64_t(), blocks, stream);
  }
}

/* f(std::bool_constant<bool_out>): the families' kernels for bool results or T's. */
template <typename F>
static void ew_with_bool_out(bool bool_out, F f) {
  if (bool_out) f(std::true_type());
  else f(std::false_type());
}

/* f(std::integral_constant<int, K>): K = op when op is one of the hot ops HOT (the adds and
** products of every layer, the activations and their backwards) and the kernel is a packed
** float one, -1 (the op at run time) for the rest, so that only a few kernels per float dtype
** are compiled more than once. */
template <int K>
using ew_op_c = std::integral_constant<int, K>;
template <typename T, bool BOOLOUT, bool PACKED, int... HOT, typename F>
static void ew_fixed_op(int op, F f) {
  if constexpr (PACKED && !BOOLOUT && qt_is_float_v<T>) {
    if (((op == HOT && (f(ew_op_c<HOT>()), true)) || ...)) return;
  }
  f(ew_op_c<-1>());
}
/* The hot ops: binary ones of tensors, binary ones with a number (a layer's scalings), unary. */
#define EW_HOT_BINARY QT_ADD, QT_SUB, QT_MUL, QT_DIV, QT_GELU_BACKWARD, QT_GELU_TANH_BACKWARD
#define EW_HOT_SCALAR QT_ADD, QT_SUB, QT_MUL, QT_DIV
#define EW_HOT_UNARY QT_GELU_TANH, QT_GELU, QT_SILU, QT_RELU

/* ---- binary */

template <typename T, bool BOOLOUT>
static void ew_binary_launch(qt_device *dev, int op, const ew_plan<3> &p) {
  ew_out_t<T, BOOLOUT> *d = (ew_out_t<T, BOOLOUT> *)p.view[0].data;
  const T *a = (const T *)p.view[1].data, *b = (const T *)p.view[2].data;
  ew_launch(dev, p, sizeof(T),
      [&](auto packed, unsigned blocks, cudaStream_t stream) {
        constexpr bool PK = decltype(packed)::value;
        ew_fixed_op<T, BOOLOUT, PK, EW_HOT_BINARY>(op, [&](auto fix) {
          ew_binary_contiguous<T, BOOLOUT, PK, decltype(fix)::value>
              <<<blocks, EW_THREADS, 0, stream>>>(op, d, a, b, p.n);
        });
      },
      [&](auto index, unsigned blocks, cudaStream_t stream) {
        ew_binary_strided<T, BOOLOUT, decltype(index)><<<blocks, EW_THREADS, 0, stream>>>(
            op, d, a, b, p.geometry, p.n);
      });
}

/* The binary op on dtype T: the family's kernels (bool results or T's). */
template <typename T>
void ew_binary_run(qt_device *dev, int op, const ew_plan<3> &p, bool bool_out) {
  ew_with_bool_out(bool_out, [&](auto b) {
    ew_binary_launch<T, decltype(b)::value>(dev, op, p);
  });
}
QT_PARTS(void, ew_binary_run, (qt_device *, int, const ew_plan<3> &, bool))

#ifndef QT_PART
/* The operands' dtype and the result's: a's, or bool for comparisons and logical ops. */
static int ew_check_binary(qt_binop op, const qt_view *dst, const qt_view *a, qt_err *err) {
  qt_dtype result = qt_binop_gives_bool(op) ? QT_BOOL : a->dtype;
  if ((unsigned)a->dtype >= (unsigned)QT_NDTYPES || dst->dtype != result)
    return qt_errorf(err, "%s: operands must have one dtype and the result %s", qt_binop_name(op),
                     qt_binop_gives_bool(op) ? "bool" : "theirs");
  return 0;
}

extern "C" int qt_cuda_binary(qt_device *dev, qt_binop op, const qt_view *dst, const qt_view *a,
                              const qt_view *b, qt_err *err) {
  if ((unsigned)op >= (unsigned)QT_NBINOPS) return qt_errorf(err, "binary: unknown op %d", (int)op);
  const char *name = qt_binop_name(op);
  if (ew_check_binary(op, dst, a, err)) return -1;
  if (b->dtype != a->dtype)
    return qt_errorf(err, "%s: operands must have one dtype and the result %s", name,
                     qt_binop_gives_bool(op) ? "bool" : "theirs");
  if (qt_cuda_enter(dev, name, err) != 0) return -1;
  if (dst->numel == 0) return 0;
  const qt_view *views[3] = {dst, a, b};
  ew_plan<3> plan;
  ew_plan_make<3>(&plan, views);
  const bool bool_out = qt_binop_gives_bool(op);
  qt_dtype_switch_all(a->dtype, [&](auto zero) {
    ew_binary_run<decltype(zero)>(dev, op, plan, bool_out);
  });
  return qt_cuda_check_launch(dev, name, err);
}
#endif

/* ---- binary with a scalar */

template <typename T, bool BOOLOUT>
static void ew_scalar_launch(qt_device *dev, int op, const ew_plan<2> &p, ew_calc_t<T> s,
                             bool first) {
  ew_out_t<T, BOOLOUT> *d = (ew_out_t<T, BOOLOUT> *)p.view[0].data;
  const T *a = (const T *)p.view[1].data;
  ew_launch(dev, p, sizeof(T),
      [&](auto packed, unsigned blocks, cudaStream_t stream) {
        constexpr bool PK = decltype(packed)::value;
        ew_fixed_op<T, BOOLOUT, PK, EW_HOT_SCALAR>(op, [&](auto fix) {
          ew_scalar_contiguous<T, BOOLOUT, PK, decltype(fix)::value>
              <<<blocks, EW_THREADS, 0, stream>>>(op, d, a, s, first, p.n);
        });
      },
      [&](auto index, unsigned blocks, cudaStream_t stream) {
        ew_scalar_strided<T, BOOLOUT, decltype(index)><<<blocks, EW_THREADS, 0, stream>>>(
            op, d, a, s, first, p.geometry, p.n);
      });
}

/* a 16-bit tensor computes with the number in float32, as PyTorch does (not rounded to
** 16 bits first) */
template <typename T>
void ew_scalar_run(qt_device *dev, int op, const ew_plan<2> &p, qt_scalar s, bool scalar_first,
                   bool bool_out) {
  using C = ew_calc_t<T>;
  C sc = qt_is_half_v<T> ? (C)(float)s.f : (C)qt_scalar_as<C>(s);
  ew_with_bool_out(bool_out, [&](auto b) {
    ew_scalar_launch<T, decltype(b)::value>(dev, op, p, sc, scalar_first);
  });
}
QT_PARTS(void, ew_scalar_run, (qt_device *, int, const ew_plan<2> &, qt_scalar, bool, bool))

#ifndef QT_PART
extern "C" int qt_cuda_binary_scalar(qt_device *dev, qt_binop op, const qt_view *dst,
                                     const qt_view *a, qt_scalar s, bool scalar_first,
                                     qt_err *err) {
  if ((unsigned)op >= (unsigned)QT_NBINOPS) return qt_errorf(err, "binary: unknown op %d", (int)op);
  const char *name = qt_binop_name(op);
  if (ew_check_binary(op, dst, a, err)) return -1;
  if (qt_cuda_enter(dev, name, err) != 0) return -1;
  if (dst->numel == 0) return 0;
  const qt_view *views[2] = {dst, a};
  ew_plan<2> plan;
  ew_plan_make<2>(&plan, views);
  const bool bool_out = qt_binop_gives_bool(op);
  qt_dtype_switch_all(a->dtype, [&](auto zero) {
    ew_scalar_run<decltype(zero)>(dev, op, plan, s, scalar_first, bool_out);
  });
  return qt_cuda_check_launch(dev, name, err);
}
#endif

/* ---- unary */

template <typename T, bool BOOLOUT>
static void ew_unary_launch(qt_device *dev, int op, const ew_plan<2> &p,
                            const qt_unop_params *given) {
  typedef ew_calc_t<T> C;
  ew_unary_params<C> params;
  for (int k = 0; k < 3; k++) {
    params.f[k] = C(0);
    if constexpr (qt_is_float_v<T>) params.f[k] = (C)given->v[k].f;  /* others use .i */
    params.i[k] = given->v[k].i;
  }
  ew_out_t<T, BOOLOUT> *d = (ew_out_t<T, BOOLOUT> *)p.view[0].data;
  const T *a = (const T *)p.view[1].data;
  ew_launch(dev, p, sizeof(T),
      [&](auto packed, unsigned blocks, cudaStream_t stream) {
        constexpr bool PK = decltype(packed)::value;
        ew_fixed_op<T, BOOLOUT, PK, EW_HOT_UNARY>(op, [&](auto fix) {
          ew_unary_contiguous<T, BOOLOUT, PK, decltype(fix)::value>
              <<<blocks, EW_THREADS, 0, stream>>>(op, d, a, params, p.n);
        });
      },
      [&](auto index, unsigned blocks, cudaStream_t stream) {
        ew_unary_strided<T, BOOLOUT, decltype(index)><<<blocks, EW_THREADS, 0, stream>>>(
            op, d, a, params, p.geometry, p.n);
      });
}

template <typename T>
void ew_unary_run(qt_device *dev, int op, const ew_plan<2> &p, const qt_unop_params *params,
                  bool bool_out) {
  ew_with_bool_out(bool_out, [&](auto b) {
    ew_unary_launch<T, decltype(b)::value>(dev, op, p, params);
  });
}
QT_PARTS(void, ew_unary_run, (qt_device *, int, const ew_plan<2> &, const qt_unop_params *, bool))

#ifndef QT_PART
extern "C" int qt_cuda_unary(qt_device *dev, qt_unop op, const qt_view *dst, const qt_view *src,
                             const qt_unop_params *params, qt_err *err) {
  if ((unsigned)op >= (unsigned)QT_NUNOPS) return qt_errorf(err, "unary: unknown op %d", (int)op);
  const char *name = qt_unop_name(op);
  const bool bool_out = qt_unop_gives_bool(op);
  if ((unsigned)src->dtype >= (unsigned)QT_NDTYPES || dst->dtype != (bool_out ? QT_BOOL : src->dtype))
    return qt_errorf(err, "%s: the result must be %s", name,
                     bool_out ? "bool" : "of the source's dtype");
  if (!qt_unop_takes_ints(op) && !qt_is_float(src->dtype))
    return qt_errorf(err, "%s: not defined for %s tensors (cast to a float dtype first)", name,
                     qt_dtypes[src->dtype].name);
  if (qt_cuda_enter(dev, name, err) != 0) return -1;
  if (dst->numel == 0) return 0;
  qt_unop_params zero;
  memset(&zero, 0, sizeof zero);
  if (params == NULL) params = &zero;
  const qt_view *views[2] = {dst, src};
  ew_plan<2> plan;
  ew_plan_make<2>(&plan, views);
  qt_dtype_switch_all(src->dtype, [&](auto z) {
    ew_unary_run<decltype(z)>(dev, op, plan, params, bool_out);
  });
  return qt_cuda_check_launch(dev, name, err);
}
#endif

/* ---- fill */

template <typename T>
static void ew_fill_launch(qt_device *dev, const ew_plan<1> &p, T value) {
  T *d = (T *)p.view[0].data;
  ew_launch(dev, p, sizeof(T),
      [&](auto packed, unsigned blocks, cudaStream_t stream) {
        ew_fill_contiguous<T, decltype(packed)::value><<<blocks, EW_THREADS, 0, stream>>>(
            d, value, p.n);
      },
      [&](auto index, unsigned blocks, cudaStream_t stream) {
        ew_fill_strided<T, decltype(index)><<<blocks, EW_THREADS, 0, stream>>>(
            d, value, p.geometry, p.n);
      });
}

template <typename T>
void ew_fill_run(qt_device *dev, const ew_plan<1> &p, qt_scalar value) {
  ew_fill_launch<T>(dev, p, qt_scalar_as<T>(value));
}
QT_PARTS(void, ew_fill_run, (qt_device *, const ew_plan<1> &, qt_scalar))

#ifndef QT_PART
extern "C" int qt_cuda_fill(qt_device *dev, const qt_view *dst, qt_scalar value, qt_err *err) {
  if ((unsigned)dst->dtype >= (unsigned)QT_NDTYPES) return qt_errorf(err, "fill: unsupported dtype");
  if (qt_cuda_enter(dev, "fill", err) != 0) return -1;
  if (dst->numel == 0) return 0;
  const qt_view *views[1] = {dst};
  ew_plan<1> plan;
  ew_plan_make<1>(&plan, views);
  qt_dtype_switch_all(dst->dtype, [&](auto zero) {
    ew_fill_run<decltype(zero)>(dev, plan, value);
  });
  return qt_cuda_check_launch(dev, "fill", err);
}
#endif

/* ---- copy */

/* Whether a same-dtype copy (collapsed, 3 to EW_ROWS_OUTER + 1 dims) is rows for
** ew_copy_rows16_nd: the last dim dense in both and a whole number of 16-byte units, every
** other stride a multiple of 16 bytes (the source's may be 0), both pointers aligned. */
inline bool ew_rows_plan(const ew_plan<2> &p, int64_t es, ew_rows_geometry *g) {
  const qt_view &dv = p.view[0], &sv = p.view[1];
  int nd = dv.ndim;
  if (nd < 3 || nd > EW_ROWS_OUTER + 1) return false;
  if (dv.stride[nd - 1] != 1 || sv.stride[nd - 1] != 1 || (dv.size[nd - 1] * es) % 16 != 0 ||
      ((uintptr_t)dv.data & 15) != 0 || ((uintptr_t)sv.data & 15) != 0)
    return false;
  g->nd = nd - 1;
  g->rows = 1;
  for (int k = 0; k < nd - 1; k++) {
    if ((dv.stride[k] * es) % 16 != 0 || (sv.stride[k] * es) % 16 != 0 || dv.stride[k] < 0 ||
        sv.stride[k] < 0)
      return false;
    g->size[k] = dv.size[k];
    g->dstride16[k] = dv.stride[k] * es / 16;
    g->sstride16[k] = sv.stride[k] * es / 16;
    g->rows *= dv.size[k];
  }
  g->width16 = dv.size[nd - 1] * es / 16;
  return true;
}

/* Whether the collapsed copy is a (batched) transpose worth tiling: 2 or 3 dims, src
** dense along one of the last two, dst dense along the other, both at least a tile wide. */
inline bool ew_transpose_plan(const ew_plan<2> &p, ew_transpose_geometry *t) {
  int nd = p.view[0].ndim;
  if (nd != 2 && nd != 3) return false;
  const qt_view &dv = p.view[0], &sv = p.view[1];
  int r = nd - 2, c = nd - 1, dim_p, dim_q;
  if (sv.stride[r] == 1 && dv.stride[c] == 1) dim_p = r, dim_q = c;
  else if (sv.stride[c] == 1 && dv.stride[r] == 1) dim_p = c, dim_q = r;
  else return false;
  if (dv.size[dim_p] < EW_TILE / 2 || dv.size[dim_q] < EW_TILE / 2) return false;
  if ((dv.size[dim_p] + EW_TILE - 1) / EW_TILE > 0x7fffffff) return false;  /* grid.x limit */
  t->size_p = dv.size[dim_p];
  t->size_q = dv.size[dim_q];
  t->src_p = sv.stride[dim_p];
  t->src_q = sv.stride[dim_q];
  t->dst_p = dv.stride[dim_p];
  t->dst_q = dv.stride[dim_q];
  t->size_batch = nd == 3 ? dv.size[0] : 1;
  t->src_batch = nd == 3 ? sv.stride[0] : 0;
  t->dst_batch = nd == 3 ? dv.stride[0] : 0;
  return true;
}

template <typename TD, typename TS>
static void ew_copy_launch(qt_device *dev, const ew_plan<2> &p) {
  cudaStream_t stream = qt_cuda_context(dev)->stream;
  TD *d = (TD *)p.view[0].data;
  const TS *s = (const TS *)p.view[1].data;
  ew_transpose_geometry t;
  if (p.contiguous && (uintptr_t)d % alignof(ew_oct<TD>) == 0 &&
      (uintptr_t)s % alignof(ew_oct<TS>) == 0) {
    unsigned blocks = qt_cuda_blocks(dev, (p.n + 7) / 8, EW_THREADS);
    ew_copy_oct<TD, TS><<<blocks, EW_THREADS, 0, stream>>>(d, s, p.n);
  } else if (p.contiguous) {
    unsigned blocks = qt_cuda_blocks(dev, p.n, EW_THREADS);
    ew_copy_contiguous<TD, TS><<<blocks, EW_THREADS, 0, stream>>>(d, s, p.n);
  } else if (ew_transpose_plan(p, &t)) {
    int64_t p_tiles = (t.size_p + EW_TILE - 1) / EW_TILE;
    int64_t q_tiles = (t.size_q + EW_TILE - 1) / EW_TILE;
    dim3 grid((unsigned)p_tiles, (unsigned)(q_tiles < 65535 ? q_tiles : 65535),
              (unsigned)(t.size_batch < 65535 ? t.size_batch : 65535));
    ew_copy_transpose<TD, TS><<<grid, dim3(EW_TILE, EW_TILE_ROWS), 0, stream>>>(d, s, t);
  } else {
    unsigned blocks = qt_cuda_blocks(dev, p.n, EW_THREADS);
    if (p.small_index)
      ew_copy_strided<TD, TS, uint32_t><<<blocks, EW_THREADS, 0, stream>>>(d, s, p.geometry, p.n);
    else
      ew_copy_strided<TD, TS, int64_t><<<blocks, EW_THREADS, 0, stream>>>(d, s, p.geometry, p.n);
  }
}

/* A conversion into TD, from any dtype. */
template <typename TD>
void ew_copy_run(qt_device *dev, const ew_plan<2> &p, qt_dtype src) {
  qt_dtype_switch_all(src, [&](auto src_zero) { ew_copy_launch<TD, decltype(src_zero)>(dev, p); });
}
QT_PARTS(void, ew_copy_run, (qt_device *, const ew_plan<2> &, qt_dtype))

#ifndef QT_PART
/* Same dtype and both dense: ew_copy_oct, a kernel like every other copy, not the copy
** engine's cudaMemcpyAsync: on the H200 the kernel moves as much (about 4 TB/s counting
** both ways), and a GPT-2 training step's hundred small device-to-device memcpys each held
** the host about 100 us in the driver (bench/kprof.c), time the GPU then waited for. A copy
** onto itself does nothing. */
extern "C" int qt_cuda_copy(qt_device *dev, const qt_view *dst, const qt_view *src, qt_err *err) {
  if ((unsigned)dst->dtype >= (unsigned)QT_NDTYPES || (unsigned)src->dtype >= (unsigned)QT_NDTYPES)
    return qt_errorf(err, "copy: unsupported dtype");
  if (qt_cuda_enter(dev, "copy", err) != 0) return -1;
  if (dst->numel == 0) return 0;
  const qt_view *views[2] = {dst, src};
  ew_plan<2> plan;
  ew_plan_make<2>(&plan, views);
  if (dst->dtype == src->dtype && plan.contiguous && plan.view[0].data == plan.view[1].data) return 0;
  /* same dtype, dense 16-byte-aligned rows apart from each other (the source's may also be
  ** one row read again: a broadcast, as addmm's bias): ew_copy_rows16 */
  const qt_view &dv = plan.view[0], &sv = plan.view[1];
  const int64_t es = (int64_t)qt_elsize(dst->dtype);
  if (dst->dtype == src->dtype && dv.ndim == 2 && dv.stride[1] == 1 && sv.stride[1] == 1 &&
      dv.stride[0] >= dv.size[1] && (sv.stride[0] >= dv.size[1] || sv.stride[0] == 0) &&
      (dv.size[1] * es) % 16 == 0 && (dv.stride[0] * es) % 16 == 0 &&
      (sv.stride[0] * es) % 16 == 0 && ((uintptr_t)dv.data & 15) == 0 &&
      ((uintptr_t)sv.data & 15) == 0) {
    int64_t width16 = dv.size[1] * es / 16, rows = dv.size[0];
    int64_t gx = (width16 + EW_THREADS - 1) / EW_THREADS;
    dim3 grid((unsigned)(gx < 64 ? gx : 64), (unsigned)(rows < 65535 ? rows : 65535));
    ew_copy_rows16<<<grid, EW_THREADS, 0, qt_cuda_context(dev)->stream>>>(
        (uint4 *)dv.data, dv.stride[0] * es / 16, (const uint4 *)sv.data, sv.stride[0] * es / 16,
        width16, rows);
    return qt_cuda_check_launch(dev, "copy", err);
  }
  ew_rows_geometry rg;
  if (dst->dtype == src->dtype && ew_rows_plan(plan, es, &rg)) {
    unsigned blocks = qt_cuda_blocks(dev, rg.rows * rg.width16, EW_THREADS);
    ew_copy_rows16_nd<<<blocks, EW_THREADS, 0, qt_cuda_context(dev)->stream>>>(
        (uint4 *)dv.data, (const uint4 *)sv.data, rg);
    return qt_cuda_check_launch(dev, "copy", err);
  }
  qt_dtype_switch_all(dst->dtype, [&](auto dst_zero) {
    ew_copy_run<decltype(dst_zero)>(dev, plan, src->dtype);
  });
  return qt_cuda_check_launch(dev, "copy", err);
}
#endif
