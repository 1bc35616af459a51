/*
** cuda_context.cu — what every file of the CUDA device calls: the thread's current device,
** error mapping (qt_cuda_check marks a device broken on a sticky error; qt_cuda_enter
** refuses a broken device), launch sizes, and the index-error record's message. It
** calls nothing of the other kernels/ files, so the slot table (cuda_device.cu), the
** slots and this file depend one way: table -> slots -> context.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "cuda_internal.h"

/* ------------------------------------------------------------------ current device */

/* The device current on this thread, as far as qlua knows (every cudaSetDevice goes through
** qt_cuda_make_current): qt_cuda_enter skips cudaSetDevice when it already matches, which
** keeps per-launch host overhead down. */
static thread_local int cuda_thread_device = -1;

extern "C" cudaError_t qt_cuda_make_current(int ordinal) {
  if (cuda_thread_device == ordinal) return cudaSuccess;
  cudaError_t status = cudaSetDevice(ordinal);
  if (status == cudaSuccess) cuda_thread_device = ordinal;
  return status;
}

/* ------------------------------------------------------------------ errors */

/* Errors after which the CUDA context cannot be used any more: every later call fails
** with the same code, so the device is marked broken and refuses further work. */
static bool cuda_error_is_sticky(cudaError_t status) {
  switch (status) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContextIsDestroyed:
      return true;
    default:
      return false;
  }
}

extern "C" int qt_cuda_check(qt_device *dev, cudaError_t status, const char *op, qt_err *err) {
  if (status == cudaSuccess) return 0;
  /* Clear the thread's last-error slot so a non-sticky error (out of memory, bad launch
  ** configuration) is not reported again by the next qt_cuda_check_launch. */
  (void)cudaGetLastError();
  qt_errorf(err, "%s: CUDA error: %s (%s)", op, cudaGetErrorString(status),
            cudaGetErrorName(status));
  if (dev != NULL && cuda_error_is_sticky(status)) {
    qt_cuda_ctx *ctx = qt_cuda_context(dev);
    if (!ctx->broken) {
      snprintf(ctx->broken_msg, sizeof ctx->broken_msg, "%s: CUDA error: %s (%s)", op,
               cudaGetErrorString(status), cudaGetErrorName(status));
      ctx->broken = true;
    }
  }
  return -1;
}

extern "C" int qt_cuda_check_launch(qt_device *dev, const char *op, qt_err *err) {
  cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) return 0;
  return qt_cuda_check(dev, status, op, err);
}

extern "C" int qt_cuda_enter(qt_device *dev, const char *op, qt_err *err) {
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  if (ctx->broken)
    return qt_errorf(err, "%s: %s is unusable after an earlier error: %s", op, dev->name,
                     ctx->broken_msg);
  cudaError_t status = qt_cuda_make_current(ctx->ordinal);
  if (status != cudaSuccess) return qt_cuda_check(dev, status, op, err);
  return 0;
}

extern "C" unsigned qt_cuda_blocks(qt_device *dev, int64_t n, unsigned threads) {
  if (n <= 0 || threads == 0) return 1;
  int64_t blocks = (n + (int64_t)threads - 1) / (int64_t)threads;
  /* Enough blocks to fill every SM twice over at full occupancy; grid-stride loops
  ** cover the rest, so huge tensors don't pay for millions of block launches. */
  int sms = qt_cuda_context(dev)->sm_count > 0 ? qt_cuda_context(dev)->sm_count : 1;
  int64_t per_sm = 2048 / (int64_t)threads;
  if (per_sm < 1) per_sm = 1;
  int64_t cap = (int64_t)sms * per_sm * 2;
  if (blocks > cap) blocks = cap;
  return (unsigned)blocks;
}

/* ------------------------------------------------------------------ sync and index errors */

extern "C" int qt_cuda_refuse_capture(qt_device *dev, const char *op, qt_err *err) {
  if (qt_cuda_context(dev)->capture == NULL) return 0;
  return qt_errorf(err, "%s: cannot wait for %s while a CUDA graph is being captured on it "
                   "(qlua.graph)", op, dev->name);
}

static const char *cuda_index_op_name(int op) {
  switch (op) {
    case QT_CUDA_OP_GATHER: return "gather";
    case QT_CUDA_OP_INDEX_SELECT: return "index_select";
    case QT_CUDA_OP_TAKE: return "take";
    case QT_CUDA_OP_SCATTER: return "scatter_";
    case QT_CUDA_OP_INDEX_ADD: return "index_add_";
    case QT_CUDA_OP_SCATTER_ADD: return "scatter_add_";
    case QT_CUDA_OP_INDEX_FILL: return "index_fill_";
    case QT_CUDA_OP_INDEX_COPY: return "index_copy_";
    default: return "index";
  }
}

/* After a stream sync: an index error recorded by a kernel becomes this call's error,
** and the record is cleared for the next op. */
extern "C" int qt_cuda_take_index_error(qt_device *dev, qt_err *err) {
  volatile qt_cuda_index_error *rec = qt_cuda_context(dev)->index_error;
  if (rec == NULL || rec->set == 0) return 0;
  qt_errorf(err, "%s: index %lld out of range (1..%lld) at position %lld",
            cuda_index_op_name(rec->op), (long long)rec->value, (long long)rec->bound,
            (long long)rec->position);
  rec->op = 0;
  rec->value = rec->bound = rec->position = 0;
  rec->set = 0;
  return -1;
}
