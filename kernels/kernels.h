/*
** kernels.h — what the CUDA device is made of, shared by the .cu files in kernels/.
**
** CUDA C++ only (never included from runtime/). Three layers per op (docs/ARCHITECTURE.md):
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
  /* CUDA graphs (cuda_graph.cu): the graph whose capture is under way on stream, or NULL
  ** (allocations then come from its pool, and what would wait on the stream refuses); its
  ** random slot, which the random kernels read while it is set; the graphs' pools. */
  struct qt_cuda_graph *capture;
  const uint64_t *capture_rng;
  struct qt_cuda_pool *pools;
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
/* cuda_dist.cu: "NCCL 2.28.3", or "unavailable (why)", for the describe slot's "dist". */
int qt_cuda_nccl_describe(char *buf, size_t len);

/* ---- the slots: qt_cuda_<slot> for every row of device.h's QT_SLOT_LIST, with its
** signature, made by cuda_alloc.cu (alloc, free, memory, empty_cache), cuda_device.cu
** (sync), cuda_transfer.cu (upload, download), elementwise.cu (copy, fill, binary,
** binary_scalar, unary), reduce.cu, index.cu (gather ... index_copy), mask.cu (where,
** masked_select, nonzero), matmul.cu, random.cu, scan.cu (scan), scan_softmax.cu
** (softmax), sort.cu (sort ... searchsorted), conv.cu (conv), optim.cu (optim_step), norm.cu (norm), pool2d.cu (pool2d),
** attention.cu (attention) and kernel.cu (native_stream ... launch). */
QT_SLOT_PROTOTYPES(qt_cuda_)
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
