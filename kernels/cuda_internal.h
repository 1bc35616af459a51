/*
** cuda_internal.h — what the CUDA device's own files share, beyond kernels.h: the thread's
** current device, the index-error record, and the constructors and hooks of the per-device
** structs that qt_cuda_device_open puts in the context. Only the CUDA device's own files
** include it; op files (elementwise.cu, index.cu, ...) need kernels.h alone.
*/
#ifndef QLUA_CUDA_INTERNAL_H
#define QLUA_CUDA_INTERNAL_H

#include "kernels.h"

extern "C" {
/* ---- context (cuda_context.cu) */
/* Makes ordinal the calling thread's current device; no CUDA call when it already is (the
** thread's last qt_cuda_make_current set it). Every cudaSetDevice of qlua goes through
** here, so that the thread's record stays true. */
cudaError_t qt_cuda_make_current(int ordinal);
/* After a stream sync: an index error that a kernel recorded becomes err (-1), and the
** record is cleared for the next op; 0 when there is none. */
int qt_cuda_take_index_error(qt_device *dev, qt_err *err);

/* ---- the caching allocator (cuda_alloc.cu) */
/* An empty allocator for ctx->allocator; NULL when out of host memory. */
struct qt_cuda_allocator *qt_cuda_allocator_new(void);

/* ---- staging for pageable transfers (cuda_transfer.cu) */
/* ctx->staging, its buffers made on first use; NULL when out of host memory. */
struct qt_cuda_staging *qt_cuda_staging_new(void);
/* Undoes qt_cuda_staging_new for a device that failed to open (no buffers made yet). */
void qt_cuda_staging_delete(struct qt_cuda_staging *s);
/* Gives the pinned buffers back (empty_cache); the next staged transfer makes them again. */
void qt_cuda_staging_release(struct qt_cuda_staging *s);
}

#endif
