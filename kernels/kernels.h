/*
** kernels.h — what the CUDA device is made of, shared by the .cu files in kernels/.
**
** CUDA C++ only (never included from runtime/). Three layers per op, as DESIGN.md says:
** a static __global__ kernel, a launcher taking raw pointers/views and a stream, and
** the device-slot function declared here (extern "C", the signature of its slot in
** qt_device_iface), which cuda_device.cu puts in the table.
**
** The device itself: cuda_device.cu (sync, open, the slot table), cuda_context.cu (the
** current device, errors, launch sizes: below every other file), cuda_alloc.cu (the
** caching allocator), cuda_transfer.cu (host<->device copies), cuda_host.cu (pinned host
** memory for the CPU device) and kernel.cu (user kernels: NVRTC, modules, launches);
** cuda_internal.h declares what they share beyond this header.
**
** Every CUDA call and every launch is checked through qt_cuda_check(); a sticky error
** (illegal address and friends) marks the device broken, and qt_cuda_enter() refuses
** every later op with the original message instead of crashing.
*/
#ifndef QLUA_KERNELS_H
#define QLUA_KERNELS_H

#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <stdint.h>

#include "device.h"
#include "tensor.h"

/* ------------------------------------------------------------------ device state */

/* Where kernels report a bad index value without killing the context: host-mapped
** pinned memory, so the host reads it after a sync with no extra copy. The first bad
** value wins (atomicCAS on `set`); ops are numbered by qt_cuda_index_op. */
typedef struct qt_cuda_index_error {
  int set;          /* 0 = nothing to report */
  int op;           /* qt_cuda_index_op */
  long long value;  /* the offending index value as stored (1-based) */
  long long bound;  /* valid values are 1..bound */
  long long position; /* 1-based row-major position in the index tensor */
} qt_cuda_index_error;

enum qt_cuda_index_op {
  QT_CUDA_OP_GATHER = 1, QT_CUDA_OP_INDEX_SELECT, QT_CUDA_OP_TAKE, QT_CUDA_OP_SCATTER,
  QT_CUDA_OP_INDEX_ADD, QT_CUDA_OP_SCATTER_ADD, QT_CUDA_OP_INDEX_FILL, QT_CUDA_OP_INDEX_COPY
};

struct qt_cuda_allocator;  /* cuda_alloc.cu */
struct qt_cuda_staging;    /* cuda_transfer.cu: pinned buffers for pageable transfers */

typedef struct qt_cuda_ctx {
  int ordinal;
  cudaStream_t stream;          /* every op of this device is queued here */
  cublasHandle_t cublas;        /* bound to stream; created on first matmul */
  qt_cuda_index_error *index_error;      /* host view of the mapped record */
  qt_cuda_index_error *index_error_dev;  /* device view of the same record */
  struct qt_cuda_allocator *allocator;
  struct qt_cuda_staging *staging;
  int sm_count;
  bool broken;                  /* a sticky error happened: refuse everything */
  char broken_msg[QT_ERRLEN];
} qt_cuda_ctx;

static inline qt_cuda_ctx *qt_cuda_context(qt_device *dev) { return (qt_cuda_ctx *)dev->context; }

/* ---------------------------------------------- helpers (cuda_context.cu, cuda_alloc.cu) */

extern "C" {
/* Makes dev current for the calling thread and refuses a broken device. */
int qt_cuda_enter(qt_device *dev, const char *op, qt_err *err);
/* 0 for cudaSuccess; else -1 with "<op>: CUDA error: <cudaGetErrorString>"; marks the
** device broken when the error is sticky. */
int qt_cuda_check(qt_device *dev, cudaError_t status, const char *op, qt_err *err);
/* After a launch: checks cudaGetLastError() the same way. */
int qt_cuda_check_launch(qt_device *dev, const char *op, qt_err *err);
/* cuda_alloc.cu: scratch device memory from the caching allocator, in stream order (free
** may be called right after queuing the kernels that use it). */
int qt_cuda_scratch(qt_device *dev, size_t nbytes, void **ptr, qt_err *err);
void qt_cuda_scratch_free(qt_device *dev, void *ptr, size_t nbytes);
/* Threads per block and a grid size for n elements (grid-stride loops beyond). */
unsigned qt_cuda_blocks(qt_device *dev, int64_t n, unsigned threads);

/* ---- slots, by file ---- */
/* cuda_alloc.cu: memory */
int qt_cuda_alloc(qt_device *dev, size_t nbytes, void **ptr, int *oom, qt_err *err);
void qt_cuda_free(qt_device *dev, void *ptr, size_t nbytes);
int qt_cuda_memory(qt_device *dev, qt_memory_stats *stats, qt_err *err);
void qt_cuda_empty_cache(qt_device *dev);
/* cuda_device.cu: sync */
int qt_cuda_sync(qt_device *dev, qt_err *err);
/* cuda_transfer.cu: transfers */
int qt_cuda_upload(qt_device *dev, void *dst, const void *host_src, size_t nbytes, qt_err *err);
int qt_cuda_download(qt_device *dev, void *host_dst, const void *src, size_t nbytes, qt_err *err);
/* elementwise.cu */
int qt_cuda_copy(qt_device *dev, const qt_view *dst, const qt_view *src, qt_err *err);
int qt_cuda_fill(qt_device *dev, const qt_view *dst, qt_scalar value, qt_err *err);
int qt_cuda_binary(qt_device *dev, qt_binop op, const qt_view *dst, const qt_view *a,
                   const qt_view *b, qt_err *err);
int qt_cuda_binary_scalar(qt_device *dev, qt_binop op, const qt_view *dst, const qt_view *a,
                          qt_scalar s, bool scalar_first, qt_err *err);
int qt_cuda_unary(qt_device *dev, qt_unop op, const qt_view *dst, const qt_view *src,
                  const qt_unop_params *params, qt_err *err);
/* random.cu */
int qt_cuda_random(qt_device *dev, qt_random_kind kind, const qt_view *dst, uint64_t seed,
                   uint64_t offset, qt_scalar lo, qt_scalar hi, qt_err *err);
/* kernel.cu: code the user brings (NVRTC, modules, launches) */
void *qt_cuda_native_stream(qt_device *dev);
int qt_cuda_compiler_id(qt_device *dev, char *buf, size_t len, qt_err *err);
int qt_cuda_compile(qt_device *dev, const qt_compile_job *job, qt_compile_result *out, qt_err *err);
int qt_cuda_module_load(qt_device *dev, const void *image, size_t nbytes, void **module,
                        qt_err *err);
void qt_cuda_module_unload(qt_device *dev, void *module);
int qt_cuda_module_kernels(qt_device *dev, void *module, void (*each)(const char *, void *),
                           void *arg, qt_err *err);
int qt_cuda_kernel_get(qt_device *dev, void *module, const char *name, void **kernel,
                       qt_kernel_info *info, qt_err *err);
int qt_cuda_launch(qt_device *dev, void *kernel, const qt_launch_cfg *cfg, void **args,
                   qt_err *err);
/* reduce.cu */
int qt_cuda_reduce(qt_device *dev, qt_redop op, const qt_view *dst, const qt_view *src, int dim,
                   double arg, qt_err *err);
/* index.cu */
int qt_cuda_gather(qt_device *dev, const qt_view *dst, const qt_view *src, int dim,
                   const qt_view *index, qt_err *err);
int qt_cuda_index_select(qt_device *dev, const qt_view *dst, const qt_view *src, int dim,
                         const qt_view *index, qt_err *err);
int qt_cuda_take(qt_device *dev, const qt_view *dst, const qt_view *src, const qt_view *index,
                 qt_err *err);
int qt_cuda_scatter(qt_device *dev, const qt_view *dst, int dim, const qt_view *index,
                    const qt_view *src, qt_scalar value, qt_err *err);
int qt_cuda_index_add(qt_device *dev, const qt_view *dst, int dim, const qt_view *index,
                      const qt_view *src, qt_err *err);
int qt_cuda_scatter_add(qt_device *dev, const qt_view *dst, int dim, const qt_view *index,
                        const qt_view *src, qt_err *err);
int qt_cuda_index_fill(qt_device *dev, const qt_view *dst, int dim, const qt_view *index,
                       qt_scalar value, qt_err *err);
int qt_cuda_index_copy(qt_device *dev, const qt_view *dst, int dim, const qt_view *index,
                       const qt_view *src, qt_err *err);
/* scan.cu: cumsum, cumprod, cummax, cummin, logcumsumexp */
int qt_cuda_scan(qt_device *dev, qt_scanop op, const qt_view *dst, const qt_view *indices,
                 const qt_view *src, int dim, qt_err *err);
/* scan_softmax.cu: softmax and log_softmax */
int qt_cuda_softmax(qt_device *dev, bool log, const qt_view *dst, const qt_view *src, int dim,
                    qt_err *err);
/* mask.cu */
int qt_cuda_where(qt_device *dev, const qt_view *dst, const qt_view *cond, const qt_view *a,
                  qt_scalar a_value, const qt_view *b, qt_scalar b_value, qt_err *err);
int qt_cuda_masked_select(qt_device *dev, const qt_view *dst, const qt_view *src,
                          const qt_view *mask, qt_err *err);
int qt_cuda_nonzero(qt_device *dev, const qt_view *dst, const qt_view *mask, qt_err *err);
/* sort.cu: sort, topk, unique, bincount, histc, searchsorted */
int qt_cuda_sort(qt_device *dev, const qt_view *values, const qt_view *indices,
                 const qt_view *src, bool descending, qt_err *err);
int qt_cuda_topk(qt_device *dev, const qt_view *values, const qt_view *indices,
                 const qt_view *src, int64_t k, bool largest, qt_err *err);
int qt_cuda_unique(qt_device *dev, const qt_view *uniques, const qt_view *inverse,
                   const qt_view *counts, const qt_view *sorted, const qt_view *perm,
                   int64_t *count, qt_err *err);
int qt_cuda_bincount(qt_device *dev, const qt_view *dst, const qt_view *src,
                     const qt_view *weights, qt_err *err);
int qt_cuda_histc(qt_device *dev, const qt_view *dst, const qt_view *src, double lo, double hi,
                  qt_err *err);
int qt_cuda_searchsorted(qt_device *dev, const qt_view *dst, const qt_view *sorted,
                         const qt_view *values, bool right, qt_err *err);
/* matmul.cu */
int qt_cuda_matmul(qt_device *dev, const qt_view *c, const qt_view *a, const qt_view *b,
                   double alpha, double beta, bool allow_tf32, qt_err *err);
}

/* ------------------------------------------------------------------ device-side helpers */

/* Offset in elements of the element with row-major linear index i of v. */
__device__ __forceinline__ int64_t qt_cuda_offset(const qt_view &v, int64_t i) {
  int64_t off = 0;
  for (int d = v.ndim - 1; d >= 0; d--) {
    int64_t s = v.size[d];
    off += (i % s) * v.stride[d];
    i /= s;
  }
  return off;
}

/* Records the first bad index value; the kernel then skips that element. */
__device__ __forceinline__ void qt_cuda_report_index(qt_cuda_index_error *rec, int op,
                                                     long long value, long long bound,
                                                     long long position) {
  if (atomicCAS(&rec->set, 0, 1) == 0) {
    rec->op = op;
    rec->value = value;
    rec->bound = bound;
    rec->position = position;
    __threadfence_system();
  }
}

#endif
