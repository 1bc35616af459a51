/*
** matmul.cu — the matmul slot of the CUDA device, through cuBLAS (and, for tiny products,
** one tiled kernel of our own: see mm_small_kernel).
**
** c[b] = alpha * a[b] @ b[b] + beta * c[b] (GEMM) with a (B, M, K), b (B, K, N), c (B, M, N),
** float32 or float64, any strides, a batch stride of 0 meaning broadcast; beta == 0 never
** reads c. alpha and beta go to cuBLAS as they are, so addmm costs no pass of its own. cuBLAS is column-major; a row-major product
** is the column-major product of the transposes, C^T = B^T A^T, so b is passed first.
**
** Each operand goes to cuBLAS as it lies whenever cuBLAS can address it: a matrix whose rows
** are unit-stride is the column-major transpose with leading dimension = its row stride (op N);
** one whose columns are unit-stride is column-major already (op T). Size-1 dims may carry any
** stride; they are normalised so cuBLAS's ld >= max(1, rows) holds. Anything else (both
** strides > 1, overlapping rows) is copied to a contiguous scratch block first. Contiguous
** inputs therefore cost one cuBLAS call and nothing else: no copies, no allocations.
**
** The handle lives in the device context (ctx->cublas), created on the first matmul that needs
** cuBLAS and bound to the device's stream once; device contexts (and so handles) live as long
** as the process.
**
** cuBLAS itself is loaded then too (dlopen, mm_cublas_load), not linked: its static
** initialisers cost every qlua process ~150 ms and ~200 MiB of resident memory at start
** (measured: `qlua -e ''` 0.15 s / 223 MB linked, 0.00 s / 5 MB without), which a drop-in
** Lua interpreter cannot charge to scripts that never multiply on a GPU. Each entry point is
** typed from the header's declaration, so a call cannot disagree with cuBLAS.
** float32 uses cublasGemmEx / cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F, or
** CUBLAS_COMPUTE_32F_FAST_TF32 when TF32 is allowed (qlua.set_tf32); float64 uses
** CUBLAS_COMPUTE_64F; float16 and bfloat16 (CUDA_R_16F, CUDA_R_16BF) use CUBLAS_COMPUTE_32F,
** which runs on the tensor cores and accumulates in float32, the result rounded into the
** input dtype. The handle keeps cuBLAS's default math mode, as PyTorch does, which lets a
** split-K kernel add its partial sums in the 16-bit type (the baseline in bench/ runs the
** same way). The 16-bit types never take the small-product kernel: cuBLAS's tensor-core
** kernels are what they are for, and their alpha and beta are float32.
*/
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <type_traits>

#include "dispatch.cuh"
#include "kernels.h"

/* ------------------------------------------------------------------ cuBLAS, loaded on use */

/* The entry points matmul uses, resolved from the library by their exported names (the
** header's cublasCreate / cublasSetStream are macros for the _v2 symbols). The two GEMMs
** are overloaded in C++ (an inline wrapper takes the old cudaDataType compute type), so
** their types are spelled out and checked against the exported declaration at compile
** time (in decltype only: nothing here references a cuBLAS symbol at link time). */
typedef cublasStatus_t (*mm_gemm_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                     int, int, const void *, const void *, cudaDataType, int,
                                     const void *, cudaDataType, int, const void *, void *,
                                     cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
typedef cublasStatus_t (*mm_gemm_batched_fn)(cublasHandle_t, cublasOperation_t,
                                             cublasOperation_t, int, int, int, const void *,
                                             const void *, cudaDataType, int, long long int,
                                             const void *, cudaDataType, int, long long int,
                                             const void *, void *, cudaDataType, int,
                                             long long int, int, cublasComputeType_t,
                                             cublasGemmAlgo_t);
static_assert(sizeof(static_cast<mm_gemm_fn>(&cublasGemmEx)) == sizeof(mm_gemm_fn),
              "cublasGemmEx: signature differs from mm_gemm_fn");
static_assert(sizeof(static_cast<mm_gemm_batched_fn>(&cublasGemmStridedBatchedEx)) ==
                  sizeof(mm_gemm_batched_fn),
              "cublasGemmStridedBatchedEx: signature differs from mm_gemm_batched_fn");

typedef struct mm_cublas_api {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) set_stream;
  mm_gemm_fn gemm;
  mm_gemm_batched_fn gemm_strided_batched;
  decltype(&cublasGetStatusName) status_name;
} mm_cublas_api;

static mm_cublas_api mm_cublas;       /* filled once, under mm_handle_lock */
static bool mm_cublas_loaded = false;

#define MM_STR_(x) #x
#define MM_STR(x) MM_STR_(x)
#define MM_CUBLAS_SONAME "libcublas.so." MM_STR(CUBLAS_VER_MAJOR)

/* dlopen's own search first (the binary's RUNPATH is the toolkit's lib64, LD_LIBRARY_PATH
** and ldconfig apply), then the toolkit directory the build saw (QLUA_CUDA_LIBDIR). The
** library stays loaded for the life of the process. Caller holds mm_handle_lock. */
static int mm_cublas_load(qt_err *err) {
  if (mm_cublas_loaded) return 0;
  void *lib = dlopen(MM_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
  char first_error[256];
  snprintf(first_error, sizeof first_error, "%s", lib == NULL ? dlerror() : "");
#ifdef QLUA_CUDA_LIBDIR
  if (lib == NULL) lib = dlopen(QLUA_CUDA_LIBDIR "/" MM_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
#endif
  if (lib == NULL)
    return qt_errorf(err, "matmul: cannot load cuBLAS (%s): %s", MM_CUBLAS_SONAME, first_error);
  mm_cublas_api api;
  struct { void **slot; const char *name; } entries[] = {
    {(void **)&api.create, "cublasCreate_v2"},
    {(void **)&api.destroy, "cublasDestroy_v2"},
    {(void **)&api.set_stream, "cublasSetStream_v2"},
    {(void **)&api.gemm, "cublasGemmEx"},
    {(void **)&api.gemm_strided_batched, "cublasGemmStridedBatchedEx"},
    {(void **)&api.status_name, "cublasGetStatusName"},
  };
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    *entries[i].slot = dlsym(lib, entries[i].name);
    if (*entries[i].slot == NULL) {
      qt_errorf(err, "matmul: cuBLAS (%s) lacks %s", MM_CUBLAS_SONAME, entries[i].name);
      dlclose(lib);
      return -1;
    }
  }
  mm_cublas = api;
  mm_cublas_loaded = true;
  return 0;
}

/* ------------------------------------------------------------------ small kernels */

/* dst = src over a (B, R, C) box with arbitrary strides on both sides; src == NULL writes
** zeros. Used only off the fast path (operands and results cuBLAS cannot address). */
template <typename T>
__global__ void mm_copy_kernel(T *__restrict__ dst, const T *__restrict__ src, int64_t rows,
                               int64_t cols, int64_t n, int64_t dsb, int64_t dsr, int64_t dsc,
                               int64_t ssb, int64_t ssr, int64_t ssc) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t j = i % cols;
    const int64_t t = i / cols;
    const int64_t r = t % rows;
    const int64_t b = t / rows;
    dst[b * dsb + r * dsr + j * dsc] = src ? src[b * ssb + r * ssr + j * ssc] : T();
  }
}

/* c = beta * c over a (B, R, C) box with arbitrary strides (K == 0); beta == 0 writes
** zeros without reading c, as GEMM does. */
/* The type of alpha and beta for T's GEMM: float for the 16-bit types (compute 32F). */
template <typename T>
using mm_scalar_t = typename std::conditional<qt_is_half_v<T>, float, T>::type;

/* T's cuBLAS data type. */
template <typename T>
static cudaDataType_t mm_data_type() {
  if constexpr (std::is_same<T, float>::value) return CUDA_R_32F;
  else if constexpr (std::is_same<T, double>::value) return CUDA_R_64F;
  else if constexpr (std::is_same<T, qt_f16>::value) return CUDA_R_16F;
  else return CUDA_R_16BF;
}

template <typename T>
__global__ void mm_scale_kernel(T *__restrict__ c, int64_t rows, int64_t cols, int64_t n,
                                int64_t sb, int64_t sr, int64_t sc, mm_scalar_t<T> beta) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t j = i % cols;
    const int64_t t = i / cols;
    const int64_t r = t % rows;
    const int64_t b = t / rows;
    T *p = c + b * sb + r * sr + j * sc;
    if constexpr (qt_is_half_v<T>) *p = QT_HALF_FROM(T, beta == 0 ? 0.0f : beta * qt_half_to_f32(*p));
    else *p = beta == T(0) ? T(0) : beta * *p;
  }
}

/* The small-product path. cuBLAS spends about 9-14 us of host time per call choosing and
** launching a kernel, far more than a 64x64 product takes on the GPU; for products this
** small one plain launch of a shared-memory tiled kernel is the whole cost (~4 us). Each
** 16x16 block computes a 16x16 tile of c for one batch (blockIdx.z), staging 16-wide
** slabs of a and b through shared memory; any strides, batch stride 0 = broadcast, FP32
** accumulation for float32 (as cuBLAS without TF32) and FP64 for float64. */
#define MM_TILE 16
#define MM_SMALL_DIM 128                     /* every one of M, N, K at most this */
#define MM_SMALL_WORK ((int64_t)1 << 21)     /* and batches * M * N * K at most this */

template <typename T>
__global__ void mm_small_kernel(T *__restrict__ c, const T *__restrict__ a,
                                const T *__restrict__ b, int M, int N, int K, int64_t csb,
                                int64_t csr, int64_t csc, int64_t asb, int64_t asr, int64_t asc,
                                int64_t bsb, int64_t bsr, int64_t bsc, T alpha, T beta) {
  __shared__ T a_tile[MM_TILE][MM_TILE + 1];
  __shared__ T b_tile[MM_TILE][MM_TILE + 1];
  const int ty = threadIdx.y, tx = threadIdx.x;
  const int row = blockIdx.y * MM_TILE + ty, col = blockIdx.x * MM_TILE + tx;
  const int64_t z = blockIdx.z;
  a += z * asb;
  b += z * bsb;
  T acc = 0;
  for (int k0 = 0; k0 < K; k0 += MM_TILE) {
    const int ka = k0 + tx, kb = k0 + ty;
    a_tile[ty][tx] = row < M && ka < K ? a[row * asr + ka * asc] : T(0);
    b_tile[ty][tx] = kb < K && col < N ? b[kb * bsr + col * bsc] : T(0);
    __syncthreads();
#pragma unroll
    for (int k = 0; k < MM_TILE; k++) acc += a_tile[ty][k] * b_tile[k][tx];
    __syncthreads();
  }
  if (row < M && col < N) {
    T *p = c + z * csb + row * csr + col * csc;
    *p = beta == T(0) ? alpha * acc : alpha * acc + beta * *p;
  }
}

static bool mm_is_small(int64_t nb, int64_t M, int64_t N, int64_t K) {
  return M <= MM_SMALL_DIM && N <= MM_SMALL_DIM && K <= MM_SMALL_DIM && nb <= 65535 &&
         nb * M * N * K <= MM_SMALL_WORK;
}

template <typename T>
static int mm_small(qt_device *dev, const qt_view *cv, const qt_view *av, const qt_view *bv,
                    T alpha, T beta, qt_err *err) {
  qt_cuda_ctx *c = qt_cuda_context(dev);
  const int64_t nb = cv->size[0], M = cv->size[1], N = cv->size[2], K = av->size[2];
  const dim3 block(MM_TILE, MM_TILE, 1);
  const dim3 grid((unsigned)((N + MM_TILE - 1) / MM_TILE), (unsigned)((M + MM_TILE - 1) / MM_TILE),
                  (unsigned)nb);
  const int64_t asb = av->size[0] == 1 ? 0 : av->stride[0];
  const int64_t bsb = bv->size[0] == 1 ? 0 : bv->stride[0];
  mm_small_kernel<T><<<grid, block, 0, c->stream>>>(
      (T *)cv->data, (const T *)av->data, (const T *)bv->data, (int)M, (int)N, (int)K,
      cv->stride[0], cv->stride[1], cv->stride[2], asb, av->stride[1], av->stride[2], bsb,
      bv->stride[1], bv->stride[2], alpha, beta);
  return qt_cuda_check_launch(dev, "matmul", err);
}

/* ------------------------------------------------------------------ host helpers */

static const char *mm_status_name(cublasStatus_t st) {
  const char *name = mm_cublas.status_name != NULL ? mm_cublas.status_name(st) : NULL;
  return name ? name : "CUBLAS_STATUS_UNKNOWN";
}

static int mm_blas_check(qt_device *dev, cublasStatus_t st, qt_err *err) {
  if (st == CUBLAS_STATUS_SUCCESS) return 0;
  qt_errorf(err, "matmul: cuBLAS error %s", mm_status_name(st));
  /* An execution failure may hide a sticky CUDA error: let the device see it. */
  qt_err cuda_err;
  if (qt_cuda_check_launch(dev, "matmul", &cuda_err)) *err = cuda_err;
  return -1;
}

/* Makes the handle (mm_handle_lock held). */
static int mm_handle_create(qt_device *dev, qt_cuda_ctx *c, qt_err *err) {
  if (mm_cublas_load(err)) return -1;
  cublasHandle_t h = NULL;
  /* Relaxed capture mode, so that a first product inside a CUDA graph capture (cuda_graph.cu)
  ** may make the handle: cublasCreate allocates, which thread-local capture refuses. */
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  bool swapped = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
  cublasStatus_t st = mm_cublas.create(&h);
  if (swapped) (void)cudaThreadExchangeStreamCaptureMode(&mode);
  if (st != CUBLAS_STATUS_SUCCESS)
    return qt_errorf(err, "matmul: cuBLAS error %s (creating the handle)", mm_status_name(st));
  st = mm_cublas.set_stream(h, c->stream);
  if (st != CUBLAS_STATUS_SUCCESS) {
    mm_cublas.destroy(h);
    return qt_errorf(err, "matmul: cuBLAS error %s (binding the stream)", mm_status_name(st));
  }
  (void)dev;
  c->cublas = h;
  return 0;
}

/* The device's cuBLAS handle, created and bound to its stream on first use. The context
** is shared by every lua_State of the process (embedders may run them on threads), so
** creation is serialised: two first matmuls must not both create one and leak the other. */
static pthread_mutex_t mm_handle_lock = PTHREAD_MUTEX_INITIALIZER;

static int mm_handle(qt_device *dev, qt_cuda_ctx *c, qt_err *err) {
  pthread_mutex_lock(&mm_handle_lock);
  int status = 0;
  if (c->cublas == NULL) status = mm_handle_create(dev, c, err);
  pthread_mutex_unlock(&mm_handle_lock);
  return status;
}

/* How cuBLAS sees one row-major operand of `rows` x `cols` with strides (sr, sc):
** trans = false: rows are unit-stride, the memory is the column-major transpose, ld = sr;
** trans = true: columns are unit-stride, column-major as is, ld = sc.
** Returns false when neither holds (or ld would not fit cuBLAS's int). */
static bool mm_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, bool *trans,
                      int64_t *ld) {
  const int64_t rmin = rows > 1 ? rows : 1, cmin = cols > 1 ? cols : 1;
  if ((cols == 1 || sc == 1) && (rows == 1 || sr >= cmin)) {
    *trans = false;
    *ld = rows == 1 ? cmin : sr;
  } else if ((rows == 1 || sr == 1) && (cols == 1 || sc >= rmin)) {
    *trans = true;
    *ld = cols == 1 ? rmin : sc;
  } else {
    return false;
  }
  return *ld <= INT_MAX;
}

/* One operand as cuBLAS gets it. */
typedef struct mm_operand {
  const void *data;
  bool trans;
  int64_t ld;
  int64_t batch_stride;
  void *scratch;        /* a contiguous copy, when the view could not be used as is */
  size_t scratch_bytes;
} mm_operand;

static unsigned mm_blocks(const qt_cuda_ctx *c, int64_t n) {
  int64_t b = (n + 255) / 256, cap = (int64_t)(c->sm_count > 0 ? c->sm_count : 1) * 32;
  return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

template <typename T>
static int mm_copy(qt_device *dev, T *dst, const T *src, int64_t batches, int64_t rows,
                   int64_t cols, const int64_t ds[3], const int64_t ss[3], qt_err *err) {
  qt_cuda_ctx *c = qt_cuda_context(dev);
  const int64_t n = batches * rows * cols;
  if (n == 0) return 0;
  mm_copy_kernel<T><<<mm_blocks(c, n), 256, 0, c->stream>>>(dst, src, rows, cols, n, ds[0], ds[1],
                                                            ds[2], ss[0], ss[1], ss[2]);
  return qt_cuda_check_launch(dev, "matmul", err);
}

/* Fills op for view v (B', rows, cols): as it lies when cuBLAS can take it, else as a
** contiguous scratch copy (one batch when the batch is broadcast). */
template <typename T>
static int mm_prepare(qt_device *dev, const qt_view *v, mm_operand *op, qt_err *err) {
  memset(op, 0, sizeof *op);
  const int64_t nb = v->size[0], rows = v->size[1], cols = v->size[2];
  const int64_t sb = nb == 1 ? 0 : v->stride[0];
  if (mm_layout(rows, cols, v->stride[1], v->stride[2], &op->trans, &op->ld)) {
    op->data = v->data;
    op->batch_stride = sb;
    return 0;
  }
  const int64_t copies = sb == 0 ? 1 : nb;
  op->scratch_bytes = (size_t)(copies * rows * cols) * sizeof(T);
  if (qt_cuda_scratch(dev, op->scratch_bytes, &op->scratch, err)) return -1;
  const int64_t ds[3] = {rows * cols, cols, 1};
  const int64_t ss[3] = {sb, v->stride[1], v->stride[2]};
  if (mm_copy<T>(dev, (T *)op->scratch, (const T *)v->data, copies, rows, cols, ds, ss, err))
    return -1;
  op->data = op->scratch;
  op->trans = false;
  op->ld = cols > 1 ? cols : 1;
  op->batch_stride = copies == 1 ? 0 : rows * cols;
  return 0;
}

static void mm_release(qt_device *dev, mm_operand *op) {
  if (op->scratch) qt_cuda_scratch_free(dev, op->scratch, op->scratch_bytes);
  op->scratch = NULL;
}

/* ------------------------------------------------------------------ the product */

/* Largest batch count per strided-batched call (cuBLAS takes an int; stay well inside it). */
#define MM_MAX_BATCH 65535

template <typename T>
static int mm_gemm(qt_device *dev, qt_cuda_ctx *c, const qt_view *cv, const qt_view *av,
                   const qt_view *bv, double alpha_d, double beta_d, bool allow_tf32,
                   qt_err *err) {
  const int64_t nb = cv->size[0], M = cv->size[1], N = cv->size[2], K = av->size[2];
  const bool is_f64 = std::is_same<T, double>::value;
  const mm_scalar_t<T> alpha = (mm_scalar_t<T>)alpha_d, beta = (mm_scalar_t<T>)beta_d;

  /* K == 0: the products are empty sums, c = beta * c. */
  if (K == 0) {
    if (beta_d == 1) return 0;
    const int64_t n = nb * M * N;
    mm_scale_kernel<T><<<mm_blocks(c, n), 256, 0, c->stream>>>(
        (T *)cv->data, M, N, n, cv->stride[0], cv->stride[1], cv->stride[2], beta);
    return qt_cuda_check_launch(dev, "matmul", err);
  }
  if constexpr (!qt_is_half_v<T>)
    if (mm_is_small(nb, M, N, K)) return mm_small<T>(dev, cv, av, bv, alpha, beta, err);
  if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
    return qt_errorf(err, "matmul: dimension too large for cuBLAS (%lld x %lld x %lld)",
                     (long long)M, (long long)N, (long long)K);
  if (mm_handle(dev, c, err)) return -1;

  mm_operand A, B;
  memset(&A, 0, sizeof A);
  memset(&B, 0, sizeof B);
  int rc = -1;
  /* c: row-major with unit-stride rows is what cuBLAS writes; anything else goes through a
  ** contiguous scratch result copied out afterwards. */
  bool c_direct = false;
  int64_t ldc = N > 1 ? N : 1;
  {
    bool trans;
    int64_t ld;
    if (mm_layout(M, N, cv->stride[1], cv->stride[2], &trans, &ld) && !trans) {
      c_direct = nb == 1 || cv->stride[0] >= M * ld || M == 0;
      ldc = ld;
    }
  }
  void *c_data = cv->data, *c_scratch = NULL;
  size_t c_scratch_bytes = 0;
  int64_t c_batch_stride = nb == 1 ? 0 : cv->stride[0];
  if (!c_direct) {
    c_scratch_bytes = (size_t)(nb * M * N) * sizeof(T);
    if (qt_cuda_scratch(dev, c_scratch_bytes, &c_scratch, err)) return -1;
    c_data = c_scratch;
    ldc = N > 1 ? N : 1;
    c_batch_stride = M * N;
    if (beta_d != 0) {  /* GEMM reads c: bring it into the scratch result first */
      const int64_t ds[3] = {M * N, N, 1};
      const int64_t ss[3] = {cv->stride[0], cv->stride[1], cv->stride[2]};
      if (mm_copy<T>(dev, (T *)c_scratch, (const T *)cv->data, nb, M, N, ds, ss, err)) {
        qt_cuda_scratch_free(dev, c_scratch, c_scratch_bytes);
        return -1;
      }
    }
  }

  if (mm_prepare<T>(dev, av, &A, err) || mm_prepare<T>(dev, bv, &B, err)) goto done;
  {
    /* C^T (N x M) = op(B) (N x K) * op(A) (K x M), column-major. */
    const cublasOperation_t opb = B.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opa = A.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cudaDataType_t dt = mm_data_type<T>();
    const cublasComputeType_t ct = is_f64                                  ? CUBLAS_COMPUTE_64F
                                   : allow_tf32 && !qt_is_half_v<T>       ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                          : CUBLAS_COMPUTE_32F;
    cublasStatus_t st;
    if (nb == 1) {
      st = mm_cublas.gemm(c->cublas, opb, opa, (int)N, (int)M, (int)K, &alpha, B.data, dt,
                          (int)B.ld, A.data, dt, (int)A.ld, &beta, c_data, dt, (int)ldc, ct,
                          CUBLAS_GEMM_DEFAULT);
      if (mm_blas_check(dev, st, err)) goto done;
    } else {
      for (int64_t b0 = 0; b0 < nb; b0 += MM_MAX_BATCH) {
        const int64_t cnt = nb - b0 < MM_MAX_BATCH ? nb - b0 : MM_MAX_BATCH;
        const char *pb = (const char *)B.data + (size_t)(b0 * B.batch_stride) * sizeof(T);
        const char *pa = (const char *)A.data + (size_t)(b0 * A.batch_stride) * sizeof(T);
        char *pc = (char *)c_data + (size_t)(b0 * c_batch_stride) * sizeof(T);
        st = mm_cublas.gemm_strided_batched(
            c->cublas, opb, opa, (int)N, (int)M, (int)K, &alpha, pb, dt, (int)B.ld,
            B.batch_stride, pa, dt, (int)A.ld, A.batch_stride, &beta, pc, dt, (int)ldc,
            c_batch_stride, (int)cnt, ct, CUBLAS_GEMM_DEFAULT);
        if (mm_blas_check(dev, st, err)) goto done;
      }
    }
  }
  if (!c_direct) {
    const int64_t ds[3] = {cv->stride[0], cv->stride[1], cv->stride[2]};
    const int64_t ss[3] = {M * N, N, 1};
    if (mm_copy<T>(dev, (T *)cv->data, (const T *)c_scratch, nb, M, N, ds, ss, err)) goto done;
  }
  rc = 0;
done:
  mm_release(dev, &A);
  mm_release(dev, &B);
  if (c_scratch) qt_cuda_scratch_free(dev, c_scratch, c_scratch_bytes);
  return rc;
}

/* c[b] = alpha * a[b] @ b[b] + beta * c[b]; see the top of the file. */
extern "C" int qt_cuda_matmul(qt_device *dev, const qt_view *c, const qt_view *a,
                              const qt_view *b, double alpha, double beta, bool allow_tf32,
                              qt_err *err) {
  if (qt_cuda_enter(dev, "matmul", err)) return -1;
  if (a->ndim != 3 || b->ndim != 3 || c->ndim != 3)
    return qt_errorf(err, "matmul: operands must be 3-d (batch, rows, cols), got %d, %d and %d",
                     a->ndim, b->ndim, c->ndim);
  if (a->dtype != b->dtype || a->dtype != c->dtype)
    return qt_errorf(err, "matmul: dtypes %s, %s and %s differ", qt_dtypes[a->dtype].name,
                     qt_dtypes[b->dtype].name, qt_dtypes[c->dtype].name);
  const int64_t nb = c->size[0], M = c->size[1], N = c->size[2], K = a->size[2];
  if (a->size[1] != M || b->size[2] != N || b->size[1] != K ||
      (a->size[0] != nb && a->size[0] != 1) || (b->size[0] != nb && b->size[0] != 1))
    return qt_errorf(err, "matmul: shapes %lldx%lldx%lld and %lldx%lldx%lld do not give %lldx%lldx%lld",
                     (long long)a->size[0], (long long)a->size[1], (long long)a->size[2],
                     (long long)b->size[0], (long long)b->size[1], (long long)b->size[2],
                     (long long)nb, (long long)M, (long long)N);
  if (nb == 0 || M == 0 || N == 0) return 0;
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  switch (a->dtype) {
    case QT_F32: return mm_gemm<float>(dev, ctx, c, a, b, alpha, beta, allow_tf32, err);
    case QT_F64: return mm_gemm<double>(dev, ctx, c, a, b, alpha, beta, false, err);
    case QT_F16: return mm_gemm<qt_f16>(dev, ctx, c, a, b, alpha, beta, false, err);
    case QT_BF16: return mm_gemm<qt_bf16>(dev, ctx, c, a, b, alpha, beta, false, err);
    default:
      return qt_errorf(err, "matmul: %s tensors are not supported (a float dtype only)",
                       qt_dtypes[a->dtype].name);
  }
}
