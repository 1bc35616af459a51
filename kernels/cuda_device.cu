/*
** cuda_device.cu — the CUDA device: sync, the devices (count, name, open) and the slot
** table. Below it: the caching allocator (cuda_alloc.cu), host<->device transfers
** (cuda_transfer.cu), pinned host memory for the CPU device (cuda_host.cu), the op files,
** and under all of them the current device and error mapping (cuda_context.cu);
** cuda_internal.h declares what they share.
**
** One qt_cuda_ctx per GPU ordinal, created once by qt_cuda_device_open (device.c calls it
** under its registry lock) and kept for the life of the process. Every op of a device is
** queued on that device's one non-blocking stream, which is what makes the allocator
** simple (see cuda_alloc.cu).
**
** Errors: every CUDA call goes through qt_cuda_check, which formats
** "<op>: CUDA error: <text> (<name>)" and, for the errors that poison a CUDA context
** (illegal address and friends), marks the device broken; qt_cuda_enter then refuses every
** later op with the original message instead of touching a dead context. Nothing here
** prints, aborts or exits.
**
** Who owns what: the context owns its stream, the index-error record, the allocator
** (cuda_alloc.cu, which owns every device segment it got from cudaMalloc) and the staging
** struct (cuda_transfer.cu: the pinned buffers for pageable transfers). The pinned host
** cache (cuda_host.cu) owns page-locked blocks handed to the CPU device.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* device.h declares the qt_cuda_* entry points defined here only under QLUA_CUDA. The
** Makefile defines it for every kernels/ file (QNVCCFLAGS), and for runtime/ when it builds
** the CUDA device (CUDA=1); the fallback is for compiling this file by hand. */
#ifndef QLUA_CUDA
#define QLUA_CUDA 1
#endif
#include "kernels.h"
#include "cuda_internal.h"

/* ------------------------------------------------------------------ sync */

extern "C" int qt_cuda_sync(qt_device *dev, qt_err *err) {
  if (qt_cuda_enter(dev, "sync", err) != 0) return -1;
  if (qt_cuda_refuse_capture(dev, "sync", err) != 0) return -1;
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  if (qt_cuda_check(dev, cudaStreamSynchronize(ctx->stream), "sync", err) != 0) return -1;
  return qt_cuda_take_index_error(dev, err);
}

/* ------------------------------------------------------------------ devices */

extern "C" int qt_cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n < 0 ? 0 : n;
}

extern "C" int qt_cuda_device_name(int ordinal, char *buf, size_t len, qt_err *err) {
  cudaDeviceProp prop;
  cudaError_t status = cudaGetDeviceProperties(&prop, ordinal);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return qt_errorf(err, "gpu:%d: CUDA error: %s (%s)", ordinal, cudaGetErrorString(status),
                     cudaGetErrorName(status));
  }
  snprintf(buf, len, "%s", prop.name);
  return 0;
}

/* The slots with float16/bfloat16 code of their own (elementwise math in float32; the
** index and mask slots move elements by size, and store numbers through qt_scalar_store
** or qt_scalar_as, which round once); the registry widens the rest (device.h). */
#define CUDA_HALF_NATIVE                                                           \
  (QT_SLOT_BIT(QT_SLOT_BINARY) | QT_SLOT_BIT(QT_SLOT_BINARY_SCALAR) |               \
   QT_SLOT_BIT(QT_SLOT_UNARY) | QT_SLOT_BIT(QT_SLOT_MATMUL) | QT_SLOT_BIT(QT_SLOT_REDUCE) | \
   QT_SLOT_BIT(QT_SLOT_GATHER) | QT_SLOT_BIT(QT_SLOT_INDEX_SELECT) | QT_SLOT_BIT(QT_SLOT_TAKE) | \
   QT_SLOT_BIT(QT_SLOT_SCATTER) | QT_SLOT_BIT(QT_SLOT_INDEX_FILL) |                   \
   QT_SLOT_BIT(QT_SLOT_INDEX_COPY) | QT_SLOT_BIT(QT_SLOT_WHERE) |                     \
   QT_SLOT_BIT(QT_SLOT_MASKED_SELECT) | QT_SLOT_BIT(QT_SLOT_CONV) |                  \
   QT_SLOT_BIT(QT_SLOT_NORM) | QT_SLOT_BIT(QT_SLOT_POOL2D) | QT_SLOT_BIT(QT_SLOT_ATTENTION))

/* The table: every slot is qt_cuda_<slot> (kernels.h's prototypes come from the same list),
** so it is generated from device.h's QT_SLOT_LIST, in its order, and cannot drift from it; a
** slot the device lacks would be a link error, not a silent NULL. */
#define CUDA_ROW_(P, E, name, ...) qt_cuda_##name,
static const qt_device_iface cuda_iface = {QT_SLOT_LIST(CUDA_ROW_, ~) CUDA_HALF_NATIVE};
#undef CUDA_ROW_

/* Opens ordinal: stream, the mapped index-error record, staging, the allocator. A failure
** undoes what was made and leaves dev untouched (device.c retries on the next call).
** ctx->cublas stays NULL: matmul.cu creates the handle on first use. */
extern "C" int qt_cuda_device_open(int ordinal, qt_device *dev, qt_err *err) {
  char name[16];
  snprintf(name, sizeof name, "gpu:%d", ordinal);
  qt_cuda_ctx *ctx = (qt_cuda_ctx *)calloc(1, sizeof *ctx);
  if (ctx == NULL) return qt_errorf(err, "%s: out of host memory", name);
  ctx->ordinal = ordinal;
  cudaError_t status = qt_cuda_make_current(ordinal);
  const char *what = "cudaSetDevice";
  if (status == cudaSuccess) {
    what = "cudaStreamCreate";
    status = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking);
  }
  if (status == cudaSuccess) {
    what = "cudaHostAlloc";
    status = cudaHostAlloc((void **)&ctx->index_error, sizeof *ctx->index_error,
                           cudaHostAllocMapped | cudaHostAllocPortable);
  }
  if (status == cudaSuccess) {
    memset(ctx->index_error, 0, sizeof *ctx->index_error);
    what = "cudaHostGetDevicePointer";
    status = cudaHostGetDevicePointer((void **)&ctx->index_error_dev, ctx->index_error, 0);
  }
  if (status == cudaSuccess) {
    what = "cudaDeviceGetAttribute";
    status = cudaDeviceGetAttribute(&ctx->sm_count, cudaDevAttrMultiProcessorCount, ordinal);
  }
  if (status == cudaSuccess) {
    ctx->staging = qt_cuda_staging_new();
    if (ctx->staging == NULL) status = cudaErrorMemoryAllocation;
    what = "staging";
  }
  if (status == cudaSuccess) {
    ctx->allocator = qt_cuda_allocator_new();
    if (ctx->allocator == NULL) status = cudaErrorMemoryAllocation;
    what = "allocator";
  }
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    qt_errorf(err, "%s: cannot open the GPU (%s): %s (%s)", name, what,
              cudaGetErrorString(status), cudaGetErrorName(status));
    if (ctx->index_error != NULL) cudaFreeHost(ctx->index_error);
    if (ctx->stream != NULL) cudaStreamDestroy(ctx->stream);
    (void)cudaGetLastError();
    qt_cuda_staging_delete(ctx->staging);
    free(ctx);
    return -1;
  }
  ctx->cublas = NULL;
  ctx->broken = false;
  dev->iface = &cuda_iface;
  dev->context = ctx;
  dev->kind = QT_DEV_CUDA;
  dev->ordinal = ordinal;
  snprintf(dev->name, sizeof dev->name, "%s", name);
  return 0;
}
