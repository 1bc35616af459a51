/*
** gather_kernel.h — what the extension's Lua glue (gather_ext.c, plain C: qlua.h and
** nothing of CUDA) calls in its CUDA half (gather_kernel.cu).
*/
#ifndef GATHER_KERNEL_H
#define GATHER_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One 1-D gather, out[i] = src[index[i]] (index values 1-based), on GPU `device`:
**   out     n contiguous elements of elsize bytes (4 or 8);
**   src     src_n elements, src_stride elements apart;
**   index   n int32 (index_is_64 = 0) or int64 values, index_stride elements apart;
**   flag    8 bytes of device memory for the kernel's report of a bad index.
** Queued on `stream` (qlua's: a cudaStream_t), then waited for, so a bad index is known
** when it returns. Returns 0 when every index was in 1..src_n; 1 when one was not: then
** *bad_position is the first such (0-based, in index order) and *bad_value its value,
** and out holds 0 at every bad position; -1 on a CUDA error, with the message in err.
** Makes `device` the thread's current CUDA device while it works and puts the previous
** one back. */
int gather_ext_run(int device, void *stream, void *out, const void *src, int64_t src_n,
                   int64_t src_stride, size_t elsize, const void *index, int index_is_64,
                   int64_t n, int64_t index_stride, void *flag, int64_t *bad_position,
                   int64_t *bad_value, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
