/*
** norm.cu — the norm slot on the GPU (device.h's qt_norm_opts): layer_norm (GROUP with one
** group), rms_norm, group_norm and batch_norm, forward and backward, every float dtype
** natively (16-bit ones computed in float32, float64 in double). The CPU twin is
** runtime/cpu/cpu_norm.c, the same formulas.
**
** Hand-written: cuDNN's legacy normalisation API is batch norm only (and deprecated), and a
** composition of reductions and elementwise ops reads the input four or five times.
**   rows (GROUP, RMS): a block per row (batch row, group), whose elements are contiguous.
**     Forward: one pass for the statistics (sums shifted by the row's first element, so
**     the variance does not cancel), one for y, which finds the row in L2. Backward: one
**     pass for sum(g) and sum(g xhat) (g = dy weight), one for dx. layer_norm and rms_norm
**     (one group) on rows of whole 16-byte vectors, up to 8192 float32, hold the row in
**     registers instead, so each pass reads memory once, and the backward also sums the
**     weight's and bias's gradients, a block walking many rows (nrm_vec_fwd, nrm_vec_bwd).
**   channel sums (the weight's and bias's gradients; batch norm's statistics and its
**     backward's sums): pass 1 writes partial sums per (batch chunk, channel) or, when
**     `inner` is short, per (batch chunk, plane element) with neighbouring threads on
**     neighbouring elements; pass 2 adds them in a fixed order (no atomics: deterministic).
**   batch norm's y and dx: grid-stride elementwise passes with the per-channel numbers.
*/
#include <math.h>
#include <stdint.h>

#include "dispatch.cuh"
#include "kernels.h"

#define NRM_MAX_THREADS 512
#define NRM_COLS 32          /* column mode: plane elements a block, and ... */
#define NRM_COL_ROWS 8       /* ... batch rows it walks at once */

template <typename T> struct nrm_acc { typedef float type; };
template <> struct nrm_acc<double> { typedef double type; };

template <typename T, typename A>
__device__ __forceinline__ A nrm_in(T x) {
  if constexpr (qt_is_half_v<T>) return (A)qt_half_to_f32(x);
  else return (A)x;
}
template <typename T, typename A>
__device__ __forceinline__ T nrm_out(A x) {
  if constexpr (qt_is_half_v<T>) return QT_HALF_FROM(T, (float)x);
  else return (T)x;
}

/* Sums two numbers over the block (blockDim.x a multiple of 32, at most 512); every thread
** gets the totals. */
template <typename A>
__device__ __forceinline__ void nrm_block_sum2(A &a, A &b) {
  __shared__ A sa[NRM_MAX_THREADS / 32], sb[NRM_MAX_THREADS / 32];
  for (int d = 16; d > 0; d /= 2) {
    a += __shfl_down_sync(0xffffffffu, a, d);
    b += __shfl_down_sync(0xffffffffu, b, d);
  }
  int lane = threadIdx.x % 32, wid = threadIdx.x / 32, nw = blockDim.x / 32;
  __syncthreads();   /* the arrays may hold an earlier call's totals */
  if (lane == 0) {
    sa[wid] = a;
    sb[wid] = b;
  }
  __syncthreads();
  a = 0;
  b = 0;
  for (int k = 0; k < nw; k++) {   /* the same order in every thread */
    a += sa[k];
    b += sb[k];
  }
}

/* The mean and 1 / sqrt(var + eps) of n values from s1 = sum(x - shift) and s2 = sum((x -
** shift)^2) (RMS: shift 0, no mean, var = s2 / n), the variance clamped at 0 against
** rounding. Every statistics pass (rows, batch channels) finishes here. */
template <typename A, bool RMS>
__device__ __forceinline__ void nrm_stats(A s1, A s2, A shift, A n, double eps, A &mu, A &rs) {
  A inv = (A)1 / n, var;
  mu = 0;
  if (RMS) {
    var = s2 * inv;
  } else {
    A m1 = s1 * inv;
    mu = shift + m1;
    var = s2 * inv - m1 * m1;
    if (var < 0) var = 0;
  }
  rs = (A)1 / sqrt(var + (A)eps);
}

struct nrm_geom {
  int64_t n, c, inner, groups, cpg, len;   /* cpg: channels a group; len: a row's elements */
  double eps;
};

/* ------------------------------------------------------------------ rows (GROUP, RMS) */

template <typename T, typename A, bool RMS>
__global__ void nrm_rows_fwd(nrm_geom g, const T *__restrict__ x, const T *__restrict__ w,
                             const T *__restrict__ bias, T *__restrict__ y, A *mean, A *rstd) {
  int64_t r = blockIdx.x;
  const T *xr = x + r * g.len;
  T *yr = y + r * g.len;
  A shift = RMS ? (A)0 : nrm_in<T, A>(xr[0]);
  A s1 = 0, s2 = 0;
  for (int64_t j = threadIdx.x; j < g.len; j += blockDim.x) {
    A d = nrm_in<T, A>(xr[j]) - shift;
    s1 += d;
    s2 += d * d;
  }
  nrm_block_sum2(s1, s2);
  A mu, rs;
  nrm_stats<A, RMS>(s1, s2, shift, (A)g.len, g.eps, mu, rs);
  if (threadIdx.x == 0) {
    if (!RMS) mean[r] = mu;
    rstd[r] = rs;
  }
  int64_t ch0 = (r % g.groups) * g.cpg;
  for (int64_t j = threadIdx.x; j < g.len; j += blockDim.x) {
    int64_t ch = ch0 + (g.inner == 1 ? j : j / g.inner);
    A v = (nrm_in<T, A>(xr[j]) - mu) * rs;
    if (w != NULL) v *= nrm_in<T, A>(w[ch]);
    if (bias != NULL) v += nrm_in<T, A>(bias[ch]);
    yr[j] = nrm_out<T, A>(v);
  }
}

template <typename T, typename A, bool RMS>
__global__ void nrm_rows_bwd(nrm_geom g, const T *__restrict__ x, const T *__restrict__ w,
                             const T *__restrict__ dy, const A *mean, const A *rstd,
                             T *__restrict__ dx) {
  int64_t r = blockIdx.x;
  const T *xr = x + r * g.len, *dr = dy + r * g.len;
  A mu = RMS ? (A)0 : mean[r], rs = rstd[r];
  int64_t ch0 = (r % g.groups) * g.cpg;
  A sg = 0, sgx = 0;
  for (int64_t j = threadIdx.x; j < g.len; j += blockDim.x) {
    int64_t ch = ch0 + (g.inner == 1 ? j : j / g.inner);
    A gj = nrm_in<T, A>(dr[j]) * (w != NULL ? nrm_in<T, A>(w[ch]) : (A)1);
    sg += gj;
    sgx += gj * (nrm_in<T, A>(xr[j]) - mu) * rs;
  }
  nrm_block_sum2(sg, sgx);
  A inv = (A)1 / (A)g.len, mg = RMS ? (A)0 : sg * inv, mgx = sgx * inv;
  for (int64_t j = threadIdx.x; j < g.len; j += blockDim.x) {
    int64_t ch = ch0 + (g.inner == 1 ? j : j / g.inner);
    A gj = nrm_in<T, A>(dr[j]) * (w != NULL ? nrm_in<T, A>(w[ch]) : (A)1);
    A xh = (nrm_in<T, A>(xr[j]) - mu) * rs;
    dx[r * g.len + j] = nrm_out<T, A>(rs * (gj - mg - xh * mgx));
  }
}

/* layer_norm and rms_norm (one group, inner 1) on rows whose 16-byte vectors a block
** holds in registers: NRM_VPT vectors a thread, so a row is read from memory once and up to
** NRM_VPT * 512 vectors long (8192 float32). Forward: load, block sums, y. Backward: load x
** and dy, block sums, dx, with the weight's and bias's gradients summed across the rows a
** block walks (rows blockIdx.x, + gridDim.x, ...) in shared memory, each thread on its own
** columns (no races), written once at the end (partial[block][column]) for
** nrm_chan_finish to add. So each pass reads its inputs once. */
#define NRM_VPT 4
template <typename T>
struct alignas(16) nrm_pack {
  T v[16 / sizeof(T)];
};

template <typename T, typename A, bool RMS>
__global__ void __launch_bounds__(NRM_MAX_THREADS)
    nrm_vec_fwd(nrm_geom g, const T *__restrict__ x, const T *__restrict__ w,
                const T *__restrict__ bias, T *__restrict__ y, A *mean, A *rstd) {
  constexpr int N = 16 / sizeof(T);
  typedef nrm_pack<T> P;
  int64_t r = blockIdx.x, nv = g.len / N;
  const P *xr = (const P *)(x + r * g.len);
  A v[NRM_VPT][N];
  A shift = RMS ? (A)0 : nrm_in<T, A>(x[r * g.len]);
  A s1 = 0, s2 = 0;
#pragma unroll
  for (int k = 0; k < NRM_VPT; k++) {
    int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
    if (i < nv) {
      P p = xr[i];
#pragma unroll
      for (int e = 0; e < N; e++) {
        v[k][e] = nrm_in<T, A>(p.v[e]);
        A d = v[k][e] - shift;
        s1 += d;
        s2 += d * d;
      }
    }
  }
  nrm_block_sum2(s1, s2);
  A mu, rs;
  nrm_stats<A, RMS>(s1, s2, shift, (A)g.len, g.eps, mu, rs);
  if (threadIdx.x == 0) {
    if (!RMS) mean[r] = mu;
    rstd[r] = rs;
  }
  P *yr = (P *)(y + r * g.len);
#pragma unroll
  for (int k = 0; k < NRM_VPT; k++) {
    int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
    if (i < nv) {
      P o, pw, pb;
      if (w != NULL) pw = ((const P *)w)[i];
      if (bias != NULL) pb = ((const P *)bias)[i];
#pragma unroll
      for (int e = 0; e < N; e++) {
        A t = (v[k][e] - mu) * rs;
        if (w != NULL) t *= nrm_in<T, A>(pw.v[e]);
        if (bias != NULL) t += nrm_in<T, A>(pb.v[e]);
        o.v[e] = nrm_out<T, A>(t);
      }
      yr[i] = o;
    }
  }
}

/* p1/p2 NULL: no weight or bias gradient wanted (then one row a block). */
template <typename T, typename A, bool RMS>
__global__ void __launch_bounds__(NRM_MAX_THREADS)
    nrm_vec_bwd(nrm_geom g, int64_t rows, const T *__restrict__ x, const T *__restrict__ w,
                const T *__restrict__ dy, const A *mean, const A *rstd, T *__restrict__ dx,
                A *p1, A *p2) {
  constexpr int N = 16 / sizeof(T);
  typedef nrm_pack<T> P;
  extern __shared__ unsigned char nrm_smem[];
  A *sb = (A *)nrm_smem, *sw = sb + g.len;   /* this block's column sums: dbias, dweight */
  int64_t nv = g.len / N;
  bool sums = p1 != NULL;
  if (sums)
    for (int64_t j = threadIdx.x * N; j < g.len; j += (int64_t)blockDim.x * N)
      for (int e = 0; e < N; e++) sb[j + e] = sw[j + e] = 0;
  A inv = (A)1 / (A)g.len;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const P *xr = (const P *)(x + r * g.len), *dr = (const P *)(dy + r * g.len);
    A mu = RMS ? (A)0 : mean[r], rs = rstd[r];
    A xh[NRM_VPT][N], gv[NRM_VPT][N];
    A sg = 0, sgx = 0;
#pragma unroll
    for (int k = 0; k < NRM_VPT; k++) {
      int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
      if (i < nv) {
        P px = xr[i], pd = dr[i], pw;
        if (w != NULL) pw = ((const P *)w)[i];
#pragma unroll
        for (int e = 0; e < N; e++) {
          A d = nrm_in<T, A>(pd.v[e]);
          xh[k][e] = (nrm_in<T, A>(px.v[e]) - mu) * rs;
          gv[k][e] = w != NULL ? d * nrm_in<T, A>(pw.v[e]) : d;
          sg += gv[k][e];
          sgx += gv[k][e] * xh[k][e];
          if (sums) {
            sb[i * N + e] += d;
            sw[i * N + e] += d * xh[k][e];
          }
        }
      }
    }
    nrm_block_sum2(sg, sgx);
    if (dx == NULL) continue;
    A mg = RMS ? (A)0 : sg * inv, mgx = sgx * inv;
    P *dxr = (P *)(dx + r * g.len);
#pragma unroll
    for (int k = 0; k < NRM_VPT; k++) {
      int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
      if (i < nv) {
        P o;
#pragma unroll
        for (int e = 0; e < N; e++) o.v[e] = nrm_out<T, A>(rs * (gv[k][e] - mg - xh[k][e] * mgx));
        dxr[i] = o;
      }
    }
  }
  if (sums)
    for (int64_t j = threadIdx.x * N; j < g.len; j += (int64_t)blockDim.x * N)
      for (int e = 0; e < N; e++) {
        p1[blockIdx.x * g.len + j + e] = sb[j + e];
        p2[blockIdx.x * g.len + j + e] = sw[j + e];
      }
}

/* ------------------------------------------------------------------ channel sums */

/* What a (batch row b, channel ch) element adds to q1 and q2. */
enum { NRM_DW, NRM_BSTATS, NRM_BGRAD };

template <typename T, typename A, int MODE>
__device__ __forceinline__ void nrm_terms(const nrm_geom &g, const T *x, const T *dy,
                                          const A *mean, const A *rstd, const T *shift,
                                          int64_t b, int64_t ch, int64_t off, A &q1, A &q2) {
  A xv = nrm_in<T, A>(x[off]);
  if (MODE == NRM_BSTATS) {
    A d = xv - nrm_in<T, A>(shift[ch * g.inner]);
    q1 += d;
    q2 += d * d;
    return;
  }
  A d = nrm_in<T, A>(dy[off]);
  q1 += d;
  if (MODE == NRM_DW) {
    int64_t r = b * g.groups + ch / g.cpg;
    q2 += d * (xv - (mean != NULL ? mean[r] : (A)0)) * rstd[r];
  } else {
    q2 += d * (xv - mean[ch]);
  }
}

/* Segment mode (inner >= 32): block (ch, batch chunk), partial[chunk][ch]. */
template <typename T, typename A, int MODE>
__global__ void nrm_chan_seg(nrm_geom g, int64_t rows_per_chunk, const T *x, const T *dy,
                             const A *mean, const A *rstd, A *p1, A *p2) {
  int64_t ch = blockIdx.x, chunk = blockIdx.y;
  int64_t b0 = chunk * rows_per_chunk, b1 = b0 + rows_per_chunk < g.n ? b0 + rows_per_chunk : g.n;
  A q1 = 0, q2 = 0;
  for (int64_t b = b0; b < b1; b++) {
    int64_t base = (b * g.c + ch) * g.inner;
    for (int64_t i = threadIdx.x; i < g.inner; i += blockDim.x)
      nrm_terms<T, A, MODE>(g, x, dy, mean, rstd, x, b, ch, base + i, q1, q2);
  }
  nrm_block_sum2(q1, q2);
  if (threadIdx.x == 0) {
    p1[chunk * g.c + ch] = q1;
    p2[chunk * g.c + ch] = q2;
  }
}

/* Column mode (inner < 32): block (NRM_COLS plane elements, batch chunk), threads
** (NRM_COLS x NRM_COL_ROWS); partial[chunk][plane element]. */
template <typename T, typename A, int MODE>
__global__ void nrm_chan_col(nrm_geom g, int64_t rows_per_chunk, const T *x, const T *dy,
                             const A *mean, const A *rstd, A *p1, A *p2) {
  __shared__ A s1[NRM_COL_ROWS][NRM_COLS], s2[NRM_COL_ROWS][NRM_COLS];
  int64_t plane = g.c * g.inner, e = (int64_t)blockIdx.x * NRM_COLS + threadIdx.x;
  int64_t chunk = blockIdx.y;
  int64_t b0 = chunk * rows_per_chunk, b1 = b0 + rows_per_chunk < g.n ? b0 + rows_per_chunk : g.n;
  A q1 = 0, q2 = 0;
  if (e < plane) {
    int64_t ch = e / g.inner;
    for (int64_t b = b0 + threadIdx.y; b < b1; b += NRM_COL_ROWS)
      nrm_terms<T, A, MODE>(g, x, dy, mean, rstd, x, b, ch, b * plane + e, q1, q2);
  }
  s1[threadIdx.y][threadIdx.x] = q1;
  s2[threadIdx.y][threadIdx.x] = q2;
  __syncthreads();
  if (threadIdx.y == 0 && e < plane) {
    for (int k = 1; k < NRM_COL_ROWS; k++) {
      q1 += s1[k][threadIdx.x];
      q2 += s2[k][threadIdx.x];
    }
    p1[chunk * plane + e] = q1;
    p2[chunk * plane + e] = q2;
  }
}

/* Pass 2: the partials (chunks x per, per = 1 or inner) of NRM_COLS channels a block, summed
** by NRM_FIN_ROWS lanes per channel (lane r takes chunks r, r + NRM_FIN_ROWS, ...), then the
** lanes in order: a fixed order, so the result does not depend on timing. A thread per
** channel walking every chunk alone was latency-bound (0.53 ms for a 768-wide LayerNorm's
** weight gradient on the H200, bench/kprof.c). DW: dweight = q2, dbias = q1. BSTATS: mean
** and rstd. BGRAD: dweight = q2 rstd, dbias = q1, and for dx m1 = q1 / m, m2 = q2 rstd / m. */
#define NRM_FIN_ROWS 16
template <typename T, typename A, int MODE>
__global__ void __launch_bounds__(NRM_COLS * NRM_FIN_ROWS)
nrm_chan_finish(nrm_geom g, int64_t chunks, int64_t per, const A *p1, const A *p2, const T *x,
                T *dw, T *db, A *mean, A *rstd, A *m1, A *m2) {
  __shared__ A s1[NRM_FIN_ROWS][NRM_COLS], s2[NRM_FIN_ROWS][NRM_COLS];
  int64_t ch = (int64_t)blockIdx.x * NRM_COLS + threadIdx.x;
  A q1 = 0, q2 = 0;
  if (ch < g.c)
    for (int64_t k = threadIdx.y; k < chunks; k += NRM_FIN_ROWS)
      for (int64_t e = 0; e < per; e++) {
        q1 += p1[(k * g.c + ch) * per + e];
        q2 += p2[(k * g.c + ch) * per + e];
      }
  s1[threadIdx.y][threadIdx.x] = q1;
  s2[threadIdx.y][threadIdx.x] = q2;
  __syncthreads();
  if (threadIdx.y != 0 || ch >= g.c) return;
  for (int r = 1; r < NRM_FIN_ROWS; r++) {
    q1 += s1[r][threadIdx.x];
    q2 += s2[r][threadIdx.x];
  }
  A m = (A)(g.n * g.inner);
  if (MODE == NRM_BSTATS) {
    nrm_stats<A, false>(q1, q2, nrm_in<T, A>(x[ch * g.inner]), m, g.eps, mean[ch], rstd[ch]);
    return;
  }
  if (MODE == NRM_BGRAD) {
    q2 *= rstd[ch];
    if (m1 != NULL) {   /* NULL: the statistics were given (eval), dx needs no sums */
      m1[ch] = q1 / m;
      m2[ch] = q2 / m;
    }
  }
  if (dw != NULL) dw[ch] = nrm_out<T, A>(q2);
  if (db != NULL) db[ch] = nrm_out<T, A>(q1);
}

/* ------------------------------------------------------------------ batch elementwise */

/* y = (x - mean) rstd w + b (forward), or dx = w rstd (dy - m1 - xhat m2) (backward; m1,
** m2 NULL: the statistics were given). */
template <typename T, typename A, typename I, bool BACK>
__global__ void nrm_batch_apply(nrm_geom g, const T *x, const T *w, const T *bias, const T *dy,
                                const A *mean, const A *rstd, const A *m1, const A *m2,
                                T *out) {
  I total = (I)(g.n * g.c * g.inner), inner = (I)g.inner, c = (I)g.c;
  for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
    I ch = (i / inner) % c;
    A rs = rstd[ch], wc = w != NULL ? nrm_in<T, A>(w[ch]) : (A)1;
    A xh = (nrm_in<T, A>(x[i]) - mean[ch]) * rs;
    A v;
    if (BACK) {
      A d = nrm_in<T, A>(dy[i]);
      if (m1 != NULL) d -= m1[ch] + xh * m2[ch];
      v = wc * rs * d;
    } else {
      v = xh * wc + (bias != NULL ? nrm_in<T, A>(bias[ch]) : (A)0);
    }
    out[i] = nrm_out<T, A>(v);
  }
}

/* ------------------------------------------------------------------ the slot */

static unsigned nrm_row_threads(int64_t len) {
  return len >= 4096 ? 512 : len >= 1024 ? 256 : len >= 256 ? 128 : len >= 64 ? 64 : 32;
}

template <typename T>
static const T *nrm_ptr(const qt_norm_opts *o, const qt_view *v, int k) {
  return (o->has >> k & 1u) ? (const T *)v[k].data : NULL;
}

/* The channel sums of MODE into partials from scratch, then pass 2. */
template <typename T, typename A, int MODE>
static int nrm_channel_sums(qt_device *dev, const nrm_geom &g, const qt_norm_opts *o,
                            const qt_view *v, T *dw, T *db, A *mean, A *rstd, A *m1, A *m2,
                            qt_err *err) {
  qt_cuda_ctx *c = qt_cuda_context(dev);
  int64_t sms = c->sm_count > 0 ? c->sm_count : 1;
  const T *x = (const T *)v[QT_NORM_X].data, *dy = nrm_ptr<T>(o, v, QT_NORM_DY);
  const A *mn = (o->has >> QT_NORM_MEAN & 1u) ? (const A *)v[QT_NORM_MEAN].data : NULL;
  const A *rs = (const A *)v[QT_NORM_RSTD].data;
  bool seg = g.inner >= 32;
  int64_t tiles = seg ? g.c : (g.c * g.inner + NRM_COLS - 1) / NRM_COLS;
  int64_t chunks = (4 * sms + tiles - 1) / tiles, most = seg ? g.n : (g.n + NRM_COL_ROWS - 1) / NRM_COL_ROWS;
  if (chunks > most) chunks = most;
  if (chunks > 65535) chunks = 65535;
  if (chunks < 1) chunks = 1;
  int64_t rows_per_chunk = (g.n + chunks - 1) / chunks;
  chunks = (g.n + rows_per_chunk - 1) / rows_per_chunk;
  int64_t per = seg ? 1 : g.inner;
  size_t nbytes = (size_t)(chunks * g.c * per) * sizeof(A) * 2;
  void *ws = NULL;
  if (qt_cuda_scratch(dev, nbytes, &ws, err) != 0) return -1;
  A *p1 = (A *)ws, *p2 = p1 + chunks * g.c * per;
  if (MODE == NRM_BSTATS) mn = NULL;
  if (tiles > 0x7fffffff) {
    qt_cuda_scratch_free(dev, ws, nbytes);
    return qt_errorf(err, "norm: %lld channels", (long long)g.c);
  }
  dim3 grid((unsigned)tiles, (unsigned)chunks);
  if (seg)
    nrm_chan_seg<T, A, MODE><<<grid, 256, 0, c->stream>>>(g, rows_per_chunk, x, dy, mn, rs, p1, p2);
  else
    nrm_chan_col<T, A, MODE><<<grid, dim3(NRM_COLS, NRM_COL_ROWS), 0, c->stream>>>(
        g, rows_per_chunk, x, dy, mn, rs, p1, p2);
  nrm_chan_finish<T, A, MODE><<<(unsigned)((g.c + NRM_COLS - 1) / NRM_COLS), dim3(NRM_COLS, NRM_FIN_ROWS), 0, c->stream>>>(
      g, chunks, per, p1, p2, x, dw, db, mean, rstd, m1, m2);
  qt_cuda_scratch_free(dev, ws, nbytes);
  return qt_cuda_check_launch(dev, "norm", err);
}

/* Whether the row kernels that hold a row in registers take this call: one group, inner 1,
** rows of whole 16-byte vectors that fit, every pointer aligned. */
static bool nrm_vec_ok(const nrm_geom &g, size_t es, const void *const *ptrs, int n) {
  int64_t per = 16 / (int64_t)es;
  if (g.groups != 1 || g.inner != 1 || g.len % per != 0 || g.len / per > (int64_t)NRM_VPT * NRM_MAX_THREADS)
    return false;
  for (int k = 0; k < n; k++)
    if (ptrs[k] != NULL && (uintptr_t)ptrs[k] % 16 != 0) return false;
  return true;
}

/* Threads for a row of nv vectors: NRM_VPT vectors each, a multiple of 32. */
static unsigned nrm_vec_threads(int64_t nv) {
  int64_t t = (nv + NRM_VPT - 1) / NRM_VPT;
  t = (t + 31) / 32 * 32;
  return (unsigned)(t < 32 ? 32 : t > NRM_MAX_THREADS ? NRM_MAX_THREADS : t);
}

template <typename T, typename A, bool RMS>
static int nrm_vec_backward_launch(qt_device *dev, const nrm_geom &g, int64_t rows, const T *x,
                                   const T *w, const T *dy, const A *mean, const A *rstd, T *dx,
                                   T *dw, T *db, qt_err *err) {
  qt_cuda_ctx *c = qt_cuda_context(dev);
  unsigned threads = nrm_vec_threads(g.len / (16 / (int64_t)sizeof(T)));
  if (dw == NULL && db == NULL) {
    nrm_vec_bwd<T, A, RMS><<<(unsigned)rows, threads, 0, c->stream>>>(g, rows, x, w, dy, mean, rstd, dx, NULL, NULL);
    return qt_cuda_check_launch(dev, "norm", err);
  }
  size_t smem = (size_t)g.len * sizeof(A) * 2;
  if (smem > 48 * 1024 &&   /* past the default limit of dynamic shared memory */
      qt_cuda_check(dev, cudaFuncSetAttribute(nrm_vec_bwd<T, A, RMS>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                    "norm", err))
    return -1;
  int per_sm = 0;
  if (qt_cuda_check(dev, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, nrm_vec_bwd<T, A, RMS>, (int)threads, smem),
                    "norm", err))
    return -1;
  int64_t sms = c->sm_count > 0 ? c->sm_count : 1;
  int64_t blocks = sms * (per_sm > 0 ? per_sm : 1);
  if (blocks > rows) blocks = rows;
  size_t nbytes = (size_t)(blocks * g.len) * sizeof(A) * 2;
  void *ws = NULL;
  if (qt_cuda_scratch(dev, nbytes, &ws, err) != 0) return -1;
  A *p1 = (A *)ws, *p2 = p1 + blocks * g.len;
  nrm_vec_bwd<T, A, RMS><<<(unsigned)blocks, threads, smem, c->stream>>>(g, rows, x, w, dy, mean, rstd, dx, p1, p2);
  nrm_geom cols = g;   /* the finisher's channels are the row's columns */
  cols.c = g.len;
  nrm_chan_finish<T, A, NRM_DW><<<(unsigned)((g.len + NRM_COLS - 1) / NRM_COLS), dim3(NRM_COLS, NRM_FIN_ROWS), 0, c->stream>>>(
      cols, blocks, 1, p1, p2, x, dw, db, NULL, NULL, NULL, NULL);
  qt_cuda_scratch_free(dev, ws, nbytes);
  return qt_cuda_check_launch(dev, "norm", err);
}

template <typename T, typename A, typename I, bool BACK>
static void nrm_batch_launch(qt_device *dev, const nrm_geom &g, const T *x, const T *w,
                             const T *bias, const T *dy, const A *mean, const A *rstd,
                             const A *m1, const A *m2, T *out) {
  qt_cuda_ctx *c = qt_cuda_context(dev);
  unsigned blocks = qt_cuda_blocks(dev, g.n * g.c * g.inner, 256);
  nrm_batch_apply<T, A, I, BACK><<<blocks, 256, 0, c->stream>>>(g, x, w, bias, dy, mean, rstd,
                                                                m1, m2, out);
}

template <typename T>
static int nrm_run(qt_device *dev, const qt_norm_opts *o, const qt_view *v, qt_err *err) {
  typedef typename nrm_acc<T>::type A;
  qt_cuda_ctx *c = qt_cuda_context(dev);
  nrm_geom g = {o->n, o->c, o->inner, o->groups, o->c / o->groups, 0, o->eps};
  g.len = g.cpg * g.inner;
  const T *x = (const T *)v[QT_NORM_X].data, *w = nrm_ptr<T>(o, v, QT_NORM_WEIGHT);
  const T *bias = nrm_ptr<T>(o, v, QT_NORM_BIAS), *dy = nrm_ptr<T>(o, v, QT_NORM_DY);
  A *mean = (o->has >> QT_NORM_MEAN & 1u) ? (A *)v[QT_NORM_MEAN].data : NULL;
  A *rstd = (A *)v[QT_NORM_RSTD].data;
  T *y = (T *)nrm_ptr<T>(o, v, QT_NORM_Y), *dx = (T *)nrm_ptr<T>(o, v, QT_NORM_DX);
  T *dw = (T *)nrm_ptr<T>(o, v, QT_NORM_DWEIGHT), *db = (T *)nrm_ptr<T>(o, v, QT_NORM_DBIAS);
  bool rms = o->kind == QT_NORM_RMS;
  int64_t total = g.n * g.c * g.inner;
  if (o->kind != QT_NORM_BATCH) {
    int64_t rows = g.n * g.groups;
    if (rows > 0x7fffffff) return qt_errorf(err, "norm: %lld rows", (long long)rows);
    unsigned threads = nrm_row_threads(g.len);
    const void *ptrs[] = {x, w, bias, y, dy, dx};
    if (nrm_vec_ok(g, sizeof(T), ptrs, 6)) {
      unsigned vt = nrm_vec_threads(g.len / (16 / (int64_t)sizeof(T)));
      if (o->backward && rms)
        return nrm_vec_backward_launch<T, A, true>(dev, g, rows, x, w, dy, mean, rstd, dx, dw, db, err);
      if (o->backward)
        return nrm_vec_backward_launch<T, A, false>(dev, g, rows, x, w, dy, mean, rstd, dx, dw, db, err);
      if (rms) nrm_vec_fwd<T, A, true><<<(unsigned)rows, vt, 0, c->stream>>>(g, x, w, bias, y, mean, rstd);
      else nrm_vec_fwd<T, A, false><<<(unsigned)rows, vt, 0, c->stream>>>(g, x, w, bias, y, mean, rstd);
      return qt_cuda_check_launch(dev, "norm", err);
    }
    if (!o->backward) {
      if (rms) nrm_rows_fwd<T, A, true><<<(unsigned)rows, threads, 0, c->stream>>>(g, x, w, bias, y, mean, rstd);
      else nrm_rows_fwd<T, A, false><<<(unsigned)rows, threads, 0, c->stream>>>(g, x, w, bias, y, mean, rstd);
      return qt_cuda_check_launch(dev, "norm", err);
    }
    if (dx != NULL) {
      if (rms) nrm_rows_bwd<T, A, true><<<(unsigned)rows, threads, 0, c->stream>>>(g, x, w, dy, mean, rstd, dx);
      else nrm_rows_bwd<T, A, false><<<(unsigned)rows, threads, 0, c->stream>>>(g, x, w, dy, mean, rstd, dx);
      if (qt_cuda_check_launch(dev, "norm", err) != 0) return -1;
    }
    if (dw == NULL && db == NULL) return 0;
    return nrm_channel_sums<T, A, NRM_DW>(dev, g, o, v, dw, db, NULL, NULL, NULL, NULL, err);
  }
  bool small = total < ((int64_t)1 << 31);   /* 32-bit indices whose grid stride cannot wrap */
  if (!o->backward) {
    if (!o->given_stats &&
        nrm_channel_sums<T, A, NRM_BSTATS>(dev, g, o, v, NULL, NULL, mean, rstd, NULL, NULL, err))
      return -1;
    if (small) nrm_batch_launch<T, A, uint32_t, false>(dev, g, x, w, bias, NULL, mean, rstd, NULL, NULL, y);
    else nrm_batch_launch<T, A, int64_t, false>(dev, g, x, w, bias, NULL, mean, rstd, NULL, NULL, y);
    return qt_cuda_check_launch(dev, "norm", err);
  }
  /* backward: the sums (and m1, m2 for dx in training) first */
  size_t mbytes = o->given_stats ? 0 : (size_t)g.c * sizeof(A) * 2;
  void *ms = NULL;
  if (mbytes > 0 && qt_cuda_scratch(dev, mbytes, &ms, err) != 0) return -1;
  A *m1 = (A *)ms, *m2 = m1 != NULL ? m1 + g.c : NULL;
  int rc = 0;
  if (dw != NULL || db != NULL || m1 != NULL)
    rc = nrm_channel_sums<T, A, NRM_BGRAD>(dev, g, o, v, dw, db, NULL, rstd, m1, m2, err);
  if (rc == 0 && dx != NULL) {
    if (small) nrm_batch_launch<T, A, uint32_t, true>(dev, g, x, w, NULL, dy, mean, rstd, m1, m2, dx);
    else nrm_batch_launch<T, A, int64_t, true>(dev, g, x, w, NULL, dy, mean, rstd, m1, m2, dx);
    rc = qt_cuda_check_launch(dev, "norm", err);
  }
  if (ms != NULL) qt_cuda_scratch_free(dev, ms, mbytes);
  return rc;
}

extern "C" int qt_cuda_norm(qt_device *dev, const qt_norm_opts *o, const qt_view *v, qt_err *err) {
  if (qt_cuda_enter(dev, "norm", err) != 0) return -1;
  switch (v[QT_NORM_X].dtype) {
    case QT_F32: return nrm_run<float>(dev, o, v, err);
    case QT_F64: return nrm_run<double>(dev, o, v, err);
    case QT_F16: return nrm_run<qt_f16>(dev, o, v, err);
    case QT_BF16: return nrm_run<qt_bf16>(dev, o, v, err);
    default: return qt_errorf(err, "norm: a float dtype expected, got %s", qt_dtypes[v[QT_NORM_X].dtype].name);
  }
}
