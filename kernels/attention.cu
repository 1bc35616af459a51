/*
** attention.cu — the attention slot on the GPU (device.h's qt_attn_opts): scaled dot-product
** attention forward and backward with an online softmax, so no S x S matrix is ever in
** memory. The CPU twin is runtime/cpu/cpu_attention.c, the same formulas.
**
** float16 and bfloat16 go to cuDNN's fused flash attention first (attention_cudnn.cu), where
** it takes the call. Hand-written here: the memory-efficient paths, for what cuDNN does not
** take (float32, float64, masks, dropout, head dims past its limits, odd strides).
**   tiled (float32, float16, bfloat16 with head dims <= 128): a block of 256 threads takes
**     64 query rows and walks the keys 64 at a time through shared memory, scores and
**     products as 4 x 4 register tiles per thread, in float32. Forward keeps each row's
**     running max and sum (exp2 of scores pre-scaled by log2 e) and rescales its output.
**     Backward recomputes the probabilities from the saved logsumexp (FlashAttention-2's
**     order): one kernel per key tile makes dk and dv over every query row of the heads
**     that read it, one per query tile makes dq; no atomics, so results are deterministic.
**   rows (float64, head dims up to 512): a warp per query row (forward, dq) or key row
**     (dk, dv), keys one at a time, in the dtype's precision (float32 for 16-bit).
** Causal tiles past the diagonal are skipped; the heavy query tiles are launched first.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include <type_traits>

#include "cudnn.cuh"
#include "dispatch.cuh"
#include "philox.h"

#define ATN_B 64          /* query rows and keys per tile */
#define ATN_THREADS 256
#define ATN_PLD (ATN_B + 4)
#define ATN_LOG2E 1.4426950408889634f
#define ATN_LN2 0.6931471805599453f
#define ATN_ROW_MAX 512   /* the rows kernels' largest head dim */

/* What every kernel reads of the call. Strides in elements: q, k, v by (batch, head, seq);
** the mask by (batch, head, query, key). */
struct atn_geom {
  int64_t b, hq, hk, sq, sk, d, dv;
  int64_t qs[3], ks[3], vs[3], ms[4];
  double scale;
  float scale_log2;   /* scale * log2 e, for the tiles' exp2 */
  float p;            /* dropout probability */
  double zscale;      /* 1 / (1 - p) (0 for p = 1) */
  uint64_t seed, offset;
  const uint64_t *rng;     /* captured in a CUDA graph: (seed, base offset) read at replay */
  int causal, mask_kind;   /* 0 no mask, 1 bool, 2 added (q's dtype) */
};

template <typename T, typename A>
__device__ __forceinline__ A atn_in(T x) {
  if constexpr (qt_is_half_v<T>) return (A)qt_half_to_f32(x);
  else return (A)x;
}
template <typename T, typename A>
__device__ __forceinline__ T atn_out(A x) {
  if constexpr (qt_is_half_v<T>) return QT_HALF_FROM(T, (float)x);
  else return (T)x;
}

/* The dropout factor of score (bh, i, j): 0 dropped, zscale kept, 1 without dropout, in the
** accumulation type A (the draw is float32 for every dtype, as the CPU's). */
template <typename A>
__device__ __forceinline__ A atn_keep(const atn_geom &g, int64_t bh, int64_t i, int64_t j) {
  if (g.p <= 0.0f) return (A)1;
  uint64_t k = (uint64_t)((bh * g.sq + i) * g.sk + j);
  uint64_t seed = g.rng != NULL ? g.rng[0] : g.seed;
  uint64_t offset = g.rng != NULL ? g.rng[1] + g.offset : g.offset;
  return qt_philox_uniform_f32(qt_philox(seed, offset + k)) < g.p ? (A)0 : (A)g.zscale;
}

/* The mask's term for score (b, h, i, j) in natural units: 0, the added number, or -inf. */
template <typename T, typename A>
__device__ __forceinline__ A atn_bias(const atn_geom &g, const void *mask, int64_t b, int64_t h,
                                      int64_t i, int64_t j) {
  int64_t off = b * g.ms[0] + h * g.ms[1] + i * g.ms[2] + j * g.ms[3];
  if (g.mask_kind == 1) return ((const uint8_t *)mask)[off] ? (A)0 : (A)-INFINITY;
  return atn_in<T, A>(((const T *)mask)[off]);
}

/* ------------------------------------------------------------------ tiles */

/* dst (64 rows of ld floats) = rows [0, rows) x cols [0, cols) of src (row stride rs), zero
** elsewhere up to DMAX columns. */
template <typename T, int DMAX>
__device__ __forceinline__ void atn_load(float *dst, const T *src, int64_t rs, int rows, int64_t cols) {
  constexpr int LD = DMAX + 4;
  for (int e = threadIdx.x; e < ATN_B * DMAX; e += ATN_THREADS) {
    int r = e / DMAX, c = e % DMAX;
    dst[r * LD + c] = r < rows && c < cols ? atn_in<T, float>(src[r * rs + c]) : 0.0f;
  }
}

/* acc[i][j] += A row (ra + i) . B row (tx + 16 j) over n4 columns (a multiple of 4). */
__device__ __forceinline__ void atn_dot_tile(const float *A, const float *B, int ld, int n4, int ra,
                                             int tx, float acc[4][4]) {
  for (int kk = 0; kk < n4; kk += 4) {
    float4 a[4], b[4];
#pragma unroll
    for (int i = 0; i < 4; i++) a[i] = *(const float4 *)&A[(ra + i) * ld + kk];
#pragma unroll
    for (int j = 0; j < 4; j++) b[j] = *(const float4 *)&B[(tx + 16 * j) * ld + kk];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < 4; j++)
        acc[i][j] = fmaf(a[i].w, b[j].w, fmaf(a[i].z, b[j].z, fmaf(a[i].y, b[j].y, fmaf(a[i].x, b[j].x, acc[i][j]))));
  }
}

/* acc[i][c] += sum_jj P[ra + i][jj] M[jj][tx + 16 c] over the 64 columns of P. */
template <int NC>
__device__ __forceinline__ void atn_mul_tile(const float *P, const float *M, int ldm, int ra, int tx,
                                             float acc[4][NC]) {
#pragma unroll 4
  for (int jj = 0; jj < ATN_B; jj++) {
    float p[4];
#pragma unroll
    for (int i = 0; i < 4; i++) p[i] = P[(ra + i) * ATN_PLD + jj];
#pragma unroll
    for (int c = 0; c < NC; c++) {
      float m = M[jj * ldm + tx + 16 * c];
#pragma unroll
      for (int i = 0; i < 4; i++) acc[i][c] = fmaf(p[i], m, acc[i][c]);
    }
  }
}

/* Over the 16 threads of a row group (lanes sharing threadIdx.x / 16). */
__device__ __forceinline__ float atn_max16(float x) {
  for (int d = 8; d > 0; d /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, d));
  return x;
}
__device__ __forceinline__ float atn_sum16(float x) {
  for (int d = 8; d > 0; d /= 2) x += __shfl_xor_sync(0xffffffffu, x, d);
  return x;
}

/* The tiles' score in log2 units for query qi, key kj (both in range): -inf when masked. */
template <typename T>
__device__ __forceinline__ float atn_score2(const atn_geom &g, const void *mask, float dot, int64_t b,
                                            int64_t h, int64_t qi, int64_t kj) {
  if (kj >= g.sk || qi >= g.sq || (g.causal && kj > qi)) return -INFINITY;
  float x = dot * g.scale_log2;
  if (g.mask_kind != 0) x += atn_bias<T, float>(g, mask, b, h, qi, kj) * ATN_LOG2E;
  return x;
}

/* Forward: block (query tile, b * hq + h). */
template <typename T, int DMAX>
__global__ void __launch_bounds__(ATN_THREADS)
atn_fwd_tile(atn_geom g, const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
             const void *__restrict__ mask, T *__restrict__ o, float *__restrict__ lse) {
  extern __shared__ float4 atn_smem[];
  constexpr int LD = DMAX + 4, NC = DMAX / 16;
  float *Qs = (float *)atn_smem, *KVs = Qs + ATN_B * LD, *Ps = KVs + ATN_B * LD;
  int64_t nbh = g.b * g.hq, ntiles = (g.sq + ATN_B - 1) / ATN_B;
  int64_t bh = blockIdx.x % nbh, qt = ntiles - 1 - blockIdx.x / nbh;
  int64_t b = bh / g.hq, h = bh % g.hq, kh = h / (g.hq / g.hk), q0 = qt * ATN_B;
  int tx = threadIdx.x % 16, ra = threadIdx.x / 16 * 4;
  const T *kb = k + b * g.ks[0] + kh * g.ks[1], *vb = v + b * g.vs[0] + kh * g.vs[1];
  atn_load<T, DMAX>(Qs, q + b * g.qs[0] + h * g.qs[1] + q0 * g.qs[2], g.qs[2],
                    (int)min((int64_t)ATN_B, g.sq - q0), g.d);
  float m[4], l[4], acc[4][NC];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int c = 0; c < NC; c++) acc[i][c] = 0.0f;
  }
  int n4 = (int)((g.d + 3) & ~3);
  int64_t kend = g.causal ? min(g.sk, q0 + ATN_B) : g.sk;
  for (int64_t k0 = 0; k0 < kend; k0 += ATN_B) {
    int kn = (int)min((int64_t)ATN_B, g.sk - k0);
    __syncthreads();   /* KVs and Ps are free */
    atn_load<T, DMAX>(KVs, kb + k0 * g.ks[2], g.ks[2], kn, g.d);
    __syncthreads();
    float s[4][4] = {};
    atn_dot_tile(Qs, KVs, LD, n4, ra, tx, s);
#pragma unroll
    for (int i = 0; i < 4; i++) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        s[i][j] = atn_score2<T>(g, mask, s[i][j], b, h, q0 + ra + i, k0 + tx + 16 * j);
        mx = fmaxf(mx, s[i][j]);
      }
      float mnew = fmaxf(m[i], atn_max16(mx));
      float ref = mnew == -INFINITY ? 0.0f : mnew;
      float alpha = mnew == -INFINITY ? 1.0f : exp2f(m[i] - mnew);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; j++) {
        float p = exp2f(s[i][j] - ref);
        sum += p;
        s[i][j] = p * atn_keep<float>(g, bh, q0 + ra + i, k0 + tx + 16 * j);
      }
      l[i] = l[i] * alpha + sum;
      m[i] = mnew;
#pragma unroll
      for (int c = 0; c < NC; c++) acc[i][c] *= alpha;
    }
    __syncthreads();   /* every thread is done with K */
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < 4; j++) Ps[(ra + i) * ATN_PLD + tx + 16 * j] = s[i][j];
    atn_load<T, DMAX>(KVs, vb + k0 * g.vs[2], g.vs[2], kn, g.dv);
    __syncthreads();
    atn_mul_tile<NC>(Ps, KVs, LD, ra, tx, acc);
  }
#pragma unroll
  for (int i = 0; i < 4; i++) {
    float total = atn_sum16(l[i]);
    int64_t qi = q0 + ra + i;
    if (qi >= g.sq) continue;
    float inv = total > 0.0f ? 1.0f / total : 0.0f;
    T *orow = o + (bh * g.sq + qi) * g.dv;
#pragma unroll
    for (int c = 0; c < NC; c++)
      if (tx + 16 * c < g.dv) orow[tx + 16 * c] = atn_out<T, float>(acc[i][c] * inv);
    if (tx == 0) lse[bh * g.sq + qi] = total > 0.0f ? (m[i] + log2f(total)) * ATN_LN2 : -INFINITY;
  }
}

/* D_i = do_i . o_i, a warp per row (both contiguous rows of dv). */
template <typename T, typename A>
__global__ void atn_dsum(atn_geom g, const T *__restrict__ dout, const T *__restrict__ out,
                         A *__restrict__ dsum) {
  int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x % 32;
  if (row >= g.b * g.hq * g.sq) return;
  A s = 0;
  for (int64_t c = lane; c < g.dv; c += 32)
    s += atn_in<T, A>(dout[row * g.dv + c]) * atn_in<T, A>(out[row * g.dv + c]);
  for (int d = 16; d > 0; d /= 2) s += __shfl_xor_sync(0xffffffffu, s, d);
  if (lane == 0) dsum[row] = s;
}

/* dq: block (query tile, b * hq + h). dq_i = scale sum_j p_ij (z_ij dp_ij - D_i) k_j. */
template <typename T, int DMAX>
__global__ void __launch_bounds__(ATN_THREADS)
atn_dq_tile(atn_geom g, const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
            const void *__restrict__ mask, const T *__restrict__ dout, const float *__restrict__ lse,
            const float *__restrict__ dsum, T *__restrict__ dq) {
  extern __shared__ float4 atn_smem[];
  constexpr int LD = DMAX + 4, NC = DMAX / 16;
  float *Qs = (float *)atn_smem, *dOs = Qs + ATN_B * LD, *Ks = dOs + ATN_B * LD;
  float *Vs = Ks + ATN_B * LD, *Ps = Vs + ATN_B * LD;
  int64_t nbh = g.b * g.hq, ntiles = (g.sq + ATN_B - 1) / ATN_B;
  int64_t bh = blockIdx.x % nbh, qt = ntiles - 1 - blockIdx.x / nbh;
  int64_t b = bh / g.hq, h = bh % g.hq, kh = h / (g.hq / g.hk), q0 = qt * ATN_B;
  int tx = threadIdx.x % 16, ra = threadIdx.x / 16 * 4;
  int qn = (int)min((int64_t)ATN_B, g.sq - q0);
  const T *kb = k + b * g.ks[0] + kh * g.ks[1], *vb = v + b * g.vs[0] + kh * g.vs[1];
  atn_load<T, DMAX>(Qs, q + b * g.qs[0] + h * g.qs[1] + q0 * g.qs[2], g.qs[2], qn, g.d);
  atn_load<T, DMAX>(dOs, dout + (bh * g.sq + q0) * g.dv, g.dv, qn, g.dv);
  float l2[4], di[4], acc[4][NC];
#pragma unroll
  for (int i = 0; i < 4; i++) {
    int64_t qi = q0 + ra + i;
    l2[i] = qi < g.sq ? lse[bh * g.sq + qi] * ATN_LOG2E : -INFINITY;
    di[i] = qi < g.sq ? dsum[bh * g.sq + qi] : 0.0f;
#pragma unroll
    for (int c = 0; c < NC; c++) acc[i][c] = 0.0f;
  }
  int n4 = (int)((g.d + 3) & ~3), n4v = (int)((g.dv + 3) & ~3);
  int64_t kend = g.causal ? min(g.sk, q0 + ATN_B) : g.sk;
  for (int64_t k0 = 0; k0 < kend; k0 += ATN_B) {
    int kn = (int)min((int64_t)ATN_B, g.sk - k0);
    __syncthreads();
    atn_load<T, DMAX>(Ks, kb + k0 * g.ks[2], g.ks[2], kn, g.d);
    atn_load<T, DMAX>(Vs, vb + k0 * g.vs[2], g.vs[2], kn, g.dv);
    __syncthreads();
    float s[4][4] = {}, dp[4][4] = {};
    atn_dot_tile(Qs, Ks, LD, n4, ra, tx, s);
    atn_dot_tile(dOs, Vs, LD, n4v, ra, tx, dp);
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
      for (int j = 0; j < 4; j++) {
        int64_t qi = q0 + ra + i, kj = k0 + tx + 16 * j;
        float x = atn_score2<T>(g, mask, s[i][j], b, h, qi, kj);
        float p = x == -INFINITY || l2[i] == -INFINITY ? 0.0f : exp2f(x - l2[i]);
        float ds = p * (dp[i][j] * atn_keep<float>(g, bh, qi, kj) - di[i]);
        Ps[(ra + i) * ATN_PLD + tx + 16 * j] = ds;
      }
    __syncthreads();
    atn_mul_tile<NC>(Ps, Ks, LD, ra, tx, acc);
  }
  float sc = (float)g.scale;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    int64_t qi = q0 + ra + i;
    if (qi >= g.sq) continue;
    T *row = dq + (bh * g.sq + qi) * g.d;
#pragma unroll
    for (int c = 0; c < NC; c++)
      if (tx + 16 * c < g.d) row[tx + 16 * c] = atn_out<T, float>(acc[i][c] * sc);
  }
}

/* dk, dv: block (key tile, b * hk + kh), over the query rows of the heads that read kh.
** dv_j = sum_i z_ij p_ij do_i; dk_j = scale sum_i p_ij (z_ij dp_ij - D_i) q_i. */
template <typename T, int DMAX>
__global__ void __launch_bounds__(ATN_THREADS)
atn_dkv_tile(atn_geom g, const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
             const void *__restrict__ mask, const T *__restrict__ dout, const float *__restrict__ lse,
             const float *__restrict__ dsum, T *__restrict__ dk, T *__restrict__ dv) {
  extern __shared__ float4 atn_smem[];
  constexpr int LD = DMAX + 4, NC = DMAX / 16;
  float *Ks = (float *)atn_smem, *Vs = Ks + ATN_B * LD, *Qs = Vs + ATN_B * LD;
  float *dOs = Qs + ATN_B * LD, *Ps = dOs + ATN_B * LD, *L2s = Ps + ATN_B * ATN_PLD, *Ds = L2s + ATN_B;
  int64_t nbk = g.b * g.hk;
  int64_t bk = blockIdx.x % nbk, kt = blockIdx.x / nbk;
  int64_t b = bk / g.hk, kh = bk % g.hk, k0 = kt * ATN_B, group = g.hq / g.hk;
  int tx = threadIdx.x % 16, ra = threadIdx.x / 16 * 4;
  int kn = (int)min((int64_t)ATN_B, g.sk - k0);
  atn_load<T, DMAX>(Ks, k + b * g.ks[0] + kh * g.ks[1] + k0 * g.ks[2], g.ks[2], kn, g.d);
  atn_load<T, DMAX>(Vs, v + b * g.vs[0] + kh * g.vs[1] + k0 * g.vs[2], g.vs[2], kn, g.dv);
  float ak[4][NC], av[4][NC];
#pragma unroll
  for (int i = 0; i < 4; i++)
#pragma unroll
    for (int c = 0; c < NC; c++) ak[i][c] = av[i][c] = 0.0f;
  int n4 = (int)((g.d + 3) & ~3), n4v = (int)((g.dv + 3) & ~3);
  int64_t qstart = g.causal ? k0 : 0;
  for (int64_t h = kh * group; h < (kh + 1) * group; h++) {
    int64_t bh = b * g.hq + h;
    const T *qb = q + b * g.qs[0] + h * g.qs[1];
    for (int64_t q0 = qstart; q0 < g.sq; q0 += ATN_B) {
      int qn = (int)min((int64_t)ATN_B, g.sq - q0);
      __syncthreads();
      atn_load<T, DMAX>(Qs, qb + q0 * g.qs[2], g.qs[2], qn, g.d);
      atn_load<T, DMAX>(dOs, dout + (bh * g.sq + q0) * g.dv, g.dv, qn, g.dv);
      if (threadIdx.x < ATN_B) {
        int64_t qi = q0 + threadIdx.x;
        L2s[threadIdx.x] = qi < g.sq ? lse[bh * g.sq + qi] * ATN_LOG2E : -INFINITY;
        Ds[threadIdx.x] = qi < g.sq ? dsum[bh * g.sq + qi] : 0.0f;
      }
      __syncthreads();
      float s[4][4] = {}, dp[4][4] = {};
      atn_dot_tile(Ks, Qs, LD, n4, ra, tx, s);     /* s[i][j]: key ra + i, query tx + 16 j */
      atn_dot_tile(Vs, dOs, LD, n4v, ra, tx, dp);
      float ds[4][4];
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
          int64_t kj = k0 + ra + i, qi = q0 + tx + 16 * j;
          float l2 = L2s[tx + 16 * j];
          float x = atn_score2<T>(g, mask, s[i][j], b, h, qi, kj);
          float p = x == -INFINITY || l2 == -INFINITY ? 0.0f : exp2f(x - l2);
          float z = atn_keep<float>(g, bh, qi, kj);
          ds[i][j] = p * (dp[i][j] * z - Ds[tx + 16 * j]);
          Ps[(ra + i) * ATN_PLD + tx + 16 * j] = p * z;
        }
      __syncthreads();
      atn_mul_tile<NC>(Ps, dOs, LD, ra, tx, av);
      __syncthreads();
#pragma unroll
      for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) Ps[(ra + i) * ATN_PLD + tx + 16 * j] = ds[i][j];
      __syncthreads();
      atn_mul_tile<NC>(Ps, Qs, LD, ra, tx, ak);
    }
  }
  float sc = (float)g.scale;
#pragma unroll
  for (int i = 0; i < 4; i++) {
    int64_t kj = k0 + ra + i;
    if (kj >= g.sk) continue;
    T *krow = dk + (bk * g.sk + kj) * g.d, *vrow = dv + (bk * g.sk + kj) * g.dv;
#pragma unroll
    for (int c = 0; c < NC; c++) {
      if (tx + 16 * c < g.d) krow[tx + 16 * c] = atn_out<T, float>(ak[i][c] * sc);
      if (tx + 16 * c < g.dv) vrow[tx + 16 * c] = atn_out<T, float>(av[i][c]);
    }
  }
}

/* ------------------------------------------------------------------ rows */

template <typename A>
__device__ __forceinline__ A atn_warp_sum(A x) {
  for (int d = 16; d > 0; d /= 2) x += __shfl_xor_sync(0xffffffffu, x, d);
  return x;
}

/* Score (b, h, i, j) in natural units from a warp's partial dot products: -inf when masked. */
template <typename T, typename A>
__device__ __forceinline__ A atn_row_score(const atn_geom &g, const void *mask, A part, int64_t b,
                                           int64_t h, int64_t i, int64_t j) {
  A x = atn_warp_sum(part) * (A)g.scale;
  if (g.mask_kind != 0) x += atn_bias<T, A>(g, mask, b, h, i, j);
  return x;
}

/* Forward: a warp per query row; lane holds dims lane + 32 t. */
template <typename T, typename A, int DCH>
__global__ void atn_fwd_rows(atn_geom g, const T *__restrict__ q, const T *__restrict__ k,
                             const T *__restrict__ v, const void *__restrict__ mask,
                             T *__restrict__ o, A *__restrict__ lse) {
  int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x % 32;
  if (row >= g.b * g.hq * g.sq) return;
  int64_t i = row % g.sq, bh = row / g.sq, b = bh / g.hq, h = bh % g.hq, kh = h / (g.hq / g.hk);
  const T *qi = q + b * g.qs[0] + h * g.qs[1] + i * g.qs[2];
  const T *kb = k + b * g.ks[0] + kh * g.ks[1], *vb = v + b * g.vs[0] + kh * g.vs[1];
  A qr[DCH], acc[DCH];
#pragma unroll
  for (int t = 0; t < DCH; t++) {
    int64_t c = lane + 32 * t;
    qr[t] = c < g.d ? atn_in<T, A>(qi[c]) : (A)0;
    acc[t] = 0;
  }
  A m = (A)-INFINITY, l = 0;
  int64_t kend = g.causal ? min(g.sk, i + 1) : g.sk;
  for (int64_t j = 0; j < kend; j++) {
    const T *kj = kb + j * g.ks[2];
    A part = 0;
#pragma unroll
    for (int t = 0; t < DCH; t++)
      if (lane + 32 * t < g.d) part += qr[t] * atn_in<T, A>(kj[lane + 32 * t]);
    A s = atn_row_score<T, A>(g, mask, part, b, h, i, j);
    if (s == (A)-INFINITY) continue;
    A mnew = s > m ? s : m, alpha = exp(m - mnew), p = exp(s - mnew);
    l = l * alpha + p;
    m = mnew;
    A pd = p * atn_keep<A>(g, bh, i, j);
    const T *vj = vb + j * g.vs[2];
#pragma unroll
    for (int t = 0; t < DCH; t++) {
      int64_t c = lane + 32 * t;
      acc[t] = acc[t] * alpha + (c < g.dv ? pd * atn_in<T, A>(vj[c]) : (A)0);
    }
  }
  A inv = l > 0 ? (A)1 / l : (A)0;
#pragma unroll
  for (int t = 0; t < DCH; t++) {
    int64_t c = lane + 32 * t;
    if (c < g.dv) o[row * g.dv + c] = atn_out<T, A>(acc[t] * inv);
  }
  if (lane == 0) lse[row] = l > 0 ? m + log(l) : (A)-INFINITY;
}

/* dq: a warp per query row. */
template <typename T, typename A, int DCH>
__global__ void atn_dq_rows(atn_geom g, const T *__restrict__ q, const T *__restrict__ k,
                            const T *__restrict__ v, const void *__restrict__ mask,
                            const T *__restrict__ dout, const A *__restrict__ lse,
                            const A *__restrict__ dsum, T *__restrict__ dq) {
  int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x % 32;
  if (row >= g.b * g.hq * g.sq) return;
  int64_t i = row % g.sq, bh = row / g.sq, b = bh / g.hq, h = bh % g.hq, kh = h / (g.hq / g.hk);
  const T *qi = q + b * g.qs[0] + h * g.qs[1] + i * g.qs[2], *doi = dout + row * g.dv;
  const T *kb = k + b * g.ks[0] + kh * g.ks[1], *vb = v + b * g.vs[0] + kh * g.vs[1];
  A qr[DCH], dr[DCH], acc[DCH];
#pragma unroll
  for (int t = 0; t < DCH; t++) {
    int64_t c = lane + 32 * t;
    qr[t] = c < g.d ? atn_in<T, A>(qi[c]) : (A)0;
    dr[t] = c < g.dv ? atn_in<T, A>(doi[c]) : (A)0;
    acc[t] = 0;
  }
  A lrow = lse[row], di = dsum[row];
  int64_t kend = g.causal ? min(g.sk, i + 1) : g.sk;
  for (int64_t j = 0; lrow != (A)-INFINITY && j < kend; j++) {
    const T *kj = kb + j * g.ks[2], *vj = vb + j * g.vs[2];
    A part = 0, dpart = 0;
#pragma unroll
    for (int t = 0; t < DCH; t++) {
      int64_t c = lane + 32 * t;
      if (c < g.d) part += qr[t] * atn_in<T, A>(kj[c]);
      if (c < g.dv) dpart += dr[t] * atn_in<T, A>(vj[c]);
    }
    A s = atn_row_score<T, A>(g, mask, part, b, h, i, j), dp = atn_warp_sum(dpart);
    if (s == (A)-INFINITY) continue;
    A ds = exp(s - lrow) * (dp * atn_keep<A>(g, bh, i, j) - di) * (A)g.scale;
#pragma unroll
    for (int t = 0; t < DCH; t++) {
      int64_t c = lane + 32 * t;
      if (c < g.d) acc[t] += ds * atn_in<T, A>(kj[c]);
    }
  }
#pragma unroll
  for (int t = 0; t < DCH; t++) {
    int64_t c = lane + 32 * t;
    if (c < g.d) dq[row * g.d + c] = atn_out<T, A>(acc[t]);
  }
}

/* dk, dv: a warp per key row (b, kh, j), over the query rows of the heads that read kh. */
template <typename T, typename A, int DCH>
__global__ void atn_dkv_rows(atn_geom g, const T *__restrict__ q, const T *__restrict__ k,
                             const T *__restrict__ v, const void *__restrict__ mask,
                             const T *__restrict__ dout, const A *__restrict__ lse,
                             const A *__restrict__ dsum, T *__restrict__ dk, T *__restrict__ dv) {
  int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  int lane = threadIdx.x % 32;
  if (row >= g.b * g.hk * g.sk) return;
  int64_t j = row % g.sk, bk = row / g.sk, b = bk / g.hk, kh = bk % g.hk, group = g.hq / g.hk;
  const T *kj = k + b * g.ks[0] + kh * g.ks[1] + j * g.ks[2];
  const T *vj = v + b * g.vs[0] + kh * g.vs[1] + j * g.vs[2];
  A kr[DCH], vr[DCH], ak[DCH], av[DCH];
#pragma unroll
  for (int t = 0; t < DCH; t++) {
    int64_t c = lane + 32 * t;
    kr[t] = c < g.d ? atn_in<T, A>(kj[c]) : (A)0;
    vr[t] = c < g.dv ? atn_in<T, A>(vj[c]) : (A)0;
    ak[t] = av[t] = 0;
  }
  for (int64_t h = kh * group; h < (kh + 1) * group; h++) {
    int64_t bh = b * g.hq + h;
    for (int64_t i = g.causal ? j : 0; i < g.sq; i++) {
      int64_t r = bh * g.sq + i;
      A lrow = lse[r];
      if (lrow == (A)-INFINITY) continue;
      const T *qi = q + b * g.qs[0] + h * g.qs[1] + i * g.qs[2], *doi = dout + r * g.dv;
      A part = 0, dpart = 0;
#pragma unroll
      for (int t = 0; t < DCH; t++) {
        int64_t c = lane + 32 * t;
        if (c < g.d) part += kr[t] * atn_in<T, A>(qi[c]);
        if (c < g.dv) dpart += vr[t] * atn_in<T, A>(doi[c]);
      }
      A s = atn_row_score<T, A>(g, mask, part, b, h, i, j), dp = atn_warp_sum(dpart);
      if (s == (A)-INFINITY) continue;
      A p = exp(s - lrow), z = atn_keep<A>(g, bh, i, j);
      A ds = p * (dp * z - dsum[r]) * (A)g.scale, pz = p * z;
#pragma unroll
      for (int t = 0; t < DCH; t++) {
        int64_t c = lane + 32 * t;
        if (c < g.dv) av[t] += pz * atn_in<T, A>(doi[c]);
        if (c < g.d) ak[t] += ds * atn_in<T, A>(qi[c]);
      }
    }
  }
#pragma unroll
  for (int t = 0; t < DCH; t++) {
    int64_t c = lane + 32 * t;
    if (c < g.d) dk[row * g.d + c] = atn_out<T, A>(ak[t]);
    if (c < g.dv) dv[row * g.dv + c] = atn_out<T, A>(av[t]);
  }
}

/* ------------------------------------------------------------------ launchers */

template <typename T> struct atn_acc { typedef float type; };
template <> struct atn_acc<double> { typedef double type; };

static atn_geom atn_geometry(const qt_attn_opts *o, const qt_view *v) {
  atn_geom g = {};
  g.b = o->b, g.hq = o->hq, g.hk = o->hk, g.sq = o->sq, g.sk = o->sk, g.d = o->d, g.dv = o->dv;
  const qt_view *src[3] = {&v[QT_ATTN_Q], &v[QT_ATTN_K], &v[QT_ATTN_V]};
  int64_t *dst[3] = {g.qs, g.ks, g.vs};
  for (int t = 0; t < 3; t++)
    for (int d = 0; d < 3; d++) dst[t][d] = src[t]->stride[d];
  if (o->has >> QT_ATTN_MASK & 1u) {
    const qt_view *m = &v[QT_ATTN_MASK];
    for (int d = 0; d < 4; d++) g.ms[d] = m->stride[d];
    g.mask_kind = m->dtype == QT_BOOL ? 1 : 2;
  }
  g.scale = o->scale;
  g.scale_log2 = (float)(o->scale * 1.4426950408889634);
  g.p = (float)o->dropout_p;
  g.zscale = o->dropout_p < 1 ? 1 / (1 - o->dropout_p) : 0.0;
  g.seed = o->seed;
  g.offset = o->offset;
  g.causal = o->causal;
  return g;
}

/* Dynamic shared memory past the default 48 KiB, allowed once per kernel. */
template <typename K>
static int atn_smem(qt_device *dev, K kernel, size_t bytes, qt_err *err) {
  if (bytes <= 48 * 1024) return 0;
  return qt_cuda_check(dev, cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 (int)bytes), "attention", err);
}

template <typename T, int DMAX>
static int atn_tile_run(qt_device *dev, const qt_attn_opts *o, const qt_view *v, const atn_geom &g,
                        qt_err *err) {
  cudaStream_t stream = qt_cuda_context(dev)->stream;
  constexpr size_t TILE = (size_t)ATN_B * (DMAX + 4) * sizeof(float);
  constexpr size_t PT = (size_t)ATN_B * ATN_PLD * sizeof(float);
  const T *q = (const T *)v[QT_ATTN_Q].data, *k = (const T *)v[QT_ATTN_K].data;
  const T *vv = (const T *)v[QT_ATTN_V].data;
  const void *mask = g.mask_kind != 0 ? v[QT_ATTN_MASK].data : NULL;
  int64_t qblocks = g.b * g.hq * ((g.sq + ATN_B - 1) / ATN_B);
  int64_t kblocks = g.b * g.hk * ((g.sk + ATN_B - 1) / ATN_B);
  if (qblocks > 0x7fffffff || kblocks > 0x7fffffff)
    return qt_errorf(err, "attention: %lld tiles are more than one launch takes", (long long)qblocks);
  if (!o->backward) {
    size_t bytes = 2 * TILE + PT;
    if (atn_smem(dev, atn_fwd_tile<T, DMAX>, bytes, err)) return -1;
    atn_fwd_tile<T, DMAX><<<(unsigned)qblocks, ATN_THREADS, bytes, stream>>>(
        g, q, k, vv, mask, (T *)v[QT_ATTN_O].data, (float *)v[QT_ATTN_LSE].data);
    return qt_cuda_check_launch(dev, "attention", err);
  }
  int64_t rows = g.b * g.hq * g.sq;
  float *dsum = NULL;
  if (qt_cuda_scratch(dev, (size_t)rows * sizeof(float), (void **)&dsum, err) != 0) return -1;
  const T *dout = (const T *)v[QT_ATTN_DO].data;
  const float *lse = (const float *)v[QT_ATTN_LSE].data;
  atn_dsum<T, float><<<(unsigned)((rows * 32 + 255) / 256), 256, 0, stream>>>(g, dout, (const T *)v[QT_ATTN_O].data, dsum);
  int rc = qt_cuda_check_launch(dev, "attention", err);
  if (rc == 0 && (o->has >> QT_ATTN_DQ & 1u)) {
    size_t bytes = 4 * TILE + PT;
    rc = atn_smem(dev, atn_dq_tile<T, DMAX>, bytes, err);
    if (rc == 0) {
      atn_dq_tile<T, DMAX><<<(unsigned)qblocks, ATN_THREADS, bytes, stream>>>(
          g, q, k, vv, mask, dout, lse, dsum, (T *)v[QT_ATTN_DQ].data);
      rc = qt_cuda_check_launch(dev, "attention", err);
    }
  }
  if (rc == 0 && (o->has >> QT_ATTN_DK & 1u)) {
    size_t bytes = 4 * TILE + PT + 2 * ATN_B * sizeof(float);
    rc = atn_smem(dev, atn_dkv_tile<T, DMAX>, bytes, err);
    if (rc == 0) {
      atn_dkv_tile<T, DMAX><<<(unsigned)kblocks, ATN_THREADS, bytes, stream>>>(
          g, q, k, vv, mask, dout, lse, dsum, (T *)v[QT_ATTN_DK].data, (T *)v[QT_ATTN_DV].data);
      rc = qt_cuda_check_launch(dev, "attention", err);
    }
  }
  qt_cuda_scratch_free(dev, dsum, (size_t)rows * sizeof(float));
  return rc;
}

template <typename T, typename A, int DCH>
static int atn_rows_run(qt_device *dev, const qt_attn_opts *o, const qt_view *v, const atn_geom &g,
                        qt_err *err) {
  cudaStream_t stream = qt_cuda_context(dev)->stream;
  const T *q = (const T *)v[QT_ATTN_Q].data, *k = (const T *)v[QT_ATTN_K].data;
  const T *vv = (const T *)v[QT_ATTN_V].data;
  const void *mask = g.mask_kind != 0 ? v[QT_ATTN_MASK].data : NULL;
  int64_t rows = g.b * g.hq * g.sq, krows = g.b * g.hk * g.sk;
  unsigned qgrid = (unsigned)((rows * 32 + 255) / 256), kgrid = (unsigned)((krows * 32 + 255) / 256);
  if (rows * 32 / 256 > 0x7fffffff || krows * 32 / 256 > 0x7fffffff)
    return qt_errorf(err, "attention: %lld rows are more than one launch takes", (long long)rows);
  A *lse = (A *)v[QT_ATTN_LSE].data;
  if (!o->backward) {
    atn_fwd_rows<T, A, DCH><<<qgrid, 256, 0, stream>>>(g, q, k, vv, mask, (T *)v[QT_ATTN_O].data, lse);
    return qt_cuda_check_launch(dev, "attention", err);
  }
  A *dsum = NULL;
  if (qt_cuda_scratch(dev, (size_t)rows * sizeof(A), (void **)&dsum, err) != 0) return -1;
  const T *dout = (const T *)v[QT_ATTN_DO].data;
  atn_dsum<T, A><<<qgrid, 256, 0, stream>>>(g, dout, (const T *)v[QT_ATTN_O].data, dsum);
  int rc = qt_cuda_check_launch(dev, "attention", err);
  if (rc == 0 && (o->has >> QT_ATTN_DQ & 1u)) {
    atn_dq_rows<T, A, DCH><<<qgrid, 256, 0, stream>>>(g, q, k, vv, mask, dout, lse, dsum, (T *)v[QT_ATTN_DQ].data);
    rc = qt_cuda_check_launch(dev, "attention", err);
  }
  if (rc == 0 && (o->has >> QT_ATTN_DK & 1u)) {
    atn_dkv_rows<T, A, DCH><<<kgrid, 256, 0, stream>>>(g, q, k, vv, mask, dout, lse, dsum,
                                                       (T *)v[QT_ATTN_DK].data, (T *)v[QT_ATTN_DV].data);
    rc = qt_cuda_check_launch(dev, "attention", err);
  }
  qt_cuda_scratch_free(dev, dsum, (size_t)rows * sizeof(A));
  return rc;
}

template <typename T>
static int atn_run(qt_device *dev, const qt_attn_opts *o, const qt_view *v, char *path, qt_err *err) {
  typedef typename atn_acc<T>::type A;
  int64_t dmax = o->d > o->dv ? o->d : o->dv;
  bool tile = !std::is_same<T, double>::value && dmax <= 128;
  if (!tile && dmax > ATN_ROW_MAX)
    return qt_errorf(err, "attention: head dims up to %d on the GPU, got %lld", ATN_ROW_MAX, (long long)dmax);
  char why[160] = "";
  if constexpr (qt_is_half_v<T>) {   /* cuDNN's fused attention first, where it takes the call */
    int r = qt_cuda_attention_cudnn(dev, o, v, why, sizeof why, err);
    if (r <= 0) {
      if (r == 0 && path != NULL) snprintf(path, QT_ATTN_PATH_LEN, "cuDNN fused attention");
      return r;
    }
  }
  if (path != NULL) {
    int n = tile ? snprintf(path, QT_ATTN_PATH_LEN, "gpu tiled (float32 accumulate, head_dim <= %d)", dmax <= 64 ? 64 : 128)
                 : snprintf(path, QT_ATTN_PATH_LEN, "gpu rows (%s accumulate)", sizeof(A) == 8 ? "float64" : "float32");
    if (why[0] != '\0' && n > 0 && n < QT_ATTN_PATH_LEN)
      snprintf(path + n, QT_ATTN_PATH_LEN - (size_t)n, "; cuDNN not taken: %s", why);
  }
  if (o->plan_only) return 0;
  atn_geom g = atn_geometry(o, v);
  g.rng = qt_cuda_context(dev)->capture_rng;
  if (tile) return dmax <= 64 ? atn_tile_run<T, 64>(dev, o, v, g, err) : atn_tile_run<T, 128>(dev, o, v, g, err);
  if constexpr (std::is_same<T, double>::value) {   /* the others reach rows past 128 only */
    if (dmax <= 32) return atn_rows_run<T, A, 1>(dev, o, v, g, err);
    if (dmax <= 64) return atn_rows_run<T, A, 2>(dev, o, v, g, err);
    if (dmax <= 128) return atn_rows_run<T, A, 4>(dev, o, v, g, err);
  }
  if (dmax <= 256) return atn_rows_run<T, A, 8>(dev, o, v, g, err);
  return atn_rows_run<T, A, 16>(dev, o, v, g, err);
}

extern "C" int qt_cuda_attention(qt_device *dev, const qt_attn_opts *o, const qt_view *v, char *path,
                                 qt_err *err) {
  if (!o->plan_only && qt_cuda_enter(dev, "attention", err) != 0) return -1;
  switch (v[QT_ATTN_Q].dtype) {
    case QT_F32: return atn_run<float>(dev, o, v, path, err);
    case QT_F64: return atn_run<double>(dev, o, v, path, err);
    case QT_F16: return atn_run<qt_f16>(dev, o, v, path, err);
    case QT_BF16: return atn_run<qt_bf16>(dev, o, v, path, err);
    default: return qt_errorf(err, "attention: a float dtype expected, got %s", qt_dtypes[v[QT_ATTN_Q].dtype].name);
  }
}
