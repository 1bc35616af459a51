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
/* -1 with "<op>: cannot wait for gpu:N while a CUDA graph is being captured on it" when a
** capture is under way (a wait on the stream would invalidate it); else 0. */
int qt_cuda_refuse_capture(qt_device *dev, const char *op, qt_err *err);
/* After a stream sync: an index error that a kernel recorded becomes err (-1), and the
** record is cleared for the next op; 0 when there is none. */
int qt_cuda_take_index_error(qt_device *dev, qt_err *err);

/* ---- the caching allocator (cuda_alloc.cu) */
/* An empty allocator for ctx->allocator; NULL when out of host memory. */
struct qt_cuda_allocator *qt_cuda_allocator_new(void);
/* An empty allocator for a CUDA graph's pool: it never trims nor gives its cache back on a
** miss, and takes segments from the driver in relaxed capture mode. */
struct qt_cuda_allocator *qt_cuda_pool_allocator_new(void);
/* An allocator's alloc (a's lock taken here); as the alloc slot. */
int qt_cuda_allocator_take(qt_device *dev, struct qt_cuda_allocator *a, size_t nbytes,
                           void **ptr, int *oom, qt_err *err);
/* Whether ptr is a live block of a; give: back to a's cache if it is (false: not a's). */
bool qt_cuda_allocator_holds(struct qt_cuda_allocator *a, const void *ptr);
bool qt_cuda_allocator_give(struct qt_cuda_allocator *a, void *ptr);
/* Every whole free segment of a back to the driver, the stream synchronised first. */
int qt_cuda_allocator_release(qt_device *dev, struct qt_cuda_allocator *a, qt_err *err);
void qt_cuda_allocator_bytes(struct qt_cuda_allocator *a, int64_t *allocated, int64_t *reserved);
/* Frees an allocator that holds no segment any more. */
void qt_cuda_allocator_delete(struct qt_cuda_allocator *a);

/* ---- CUDA graphs (cuda_graph.cu): what the allocator asks while graphs exist */
/* An allocation while ctx->capture is set: from the capturing graph's pool. */
int qt_cuda_graph_alloc(qt_device *dev, size_t nbytes, void **ptr, int *oom, qt_err *err);
/* A block of the device's own cache freed while a capture is under way: the capturing
** graph keeps it until the graph is freed (true), or cannot (false: out of host memory;
** the caller gives it back). */
bool qt_cuda_graph_defer(qt_device *dev, void *ptr);
/* A freed block that is not the device cache's: back to the pool that holds it; a pool
** with no graph left goes back to the driver once its last block is freed. */
void qt_cuda_graph_pool_free(qt_device *dev, void *ptr);
/* Bytes live and reserved in the device's graph pools. */
void qt_cuda_graph_pool_bytes(qt_device *dev, int64_t *allocated, int64_t *reserved);

/* ---- staging for pageable transfers (cuda_transfer.cu) */
/* ctx->staging, its buffers made on first use; NULL when out of host memory. */
struct qt_cuda_staging *qt_cuda_staging_new(void);
/* Undoes qt_cuda_staging_new for a device that failed to open (no buffers made yet). */
void qt_cuda_staging_delete(struct qt_cuda_staging *s);
/* Gives the pinned buffers back (empty_cache); the next staged transfer makes them again. */
void qt_cuda_staging_release(struct qt_cuda_staging *s);
}

#endif
