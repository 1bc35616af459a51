/*
** gather_kernel.cu — the extension's CUDA half: the seed's Gather kernel, out[i] =
** src[index[i]] with 1-based int32 or int64 indices, and its launcher, which queues it on
** the stream qlua gave (gather_kernel.h says what it promises).
**
** A bad index (0, negative, past the end) is not read: its output element is set to 0
** and its position goes into an 8-byte flag in device memory with atomicMin, so with
** several bad ones the first (in index order) is reported, as qlua's CPU gather does.
** The launcher reads the flag back after its kernel, waiting for the stream; that wait is
** what makes the error immediate (a Lua error raised by the call itself). An extension
** that must not wait would leave the flag on the GPU and check it later.
*/
#include <cuda_runtime.h>
#include <stdio.h>

#include "gather_kernel.h"

#define NO_BAD_INDEX (~0ULL)

/* E: the element as bits (any dtype of that size); I: the index type. Grid-stride, so
** any n fits the grid. */
template <typename E, typename I>
__global__ void gather_kernel(E *__restrict__ out, const E *__restrict__ src, int64_t src_n,
                              int64_t src_stride, const I *__restrict__ index, int64_t n,
                              int64_t index_stride, unsigned long long *bad) {
  int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t v = (int64_t)index[i * index_stride];
    if (v >= 1 && v <= src_n) {
      out[i] = src[(v - 1) * src_stride];
    } else {
      out[i] = 0;
      atomicMin(bad, (unsigned long long)i);
    }
  }
}

template <typename E, typename I>
static void gather_launch(cudaStream_t stream, void *out, const void *src, int64_t src_n,
                          int64_t src_stride, const void *index, int64_t n,
                          int64_t index_stride, void *flag) {
  const int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 65536) blocks = 65536;
  gather_kernel<E, I><<<(unsigned)blocks, threads, 0, stream>>>(
      (E *)out, (const E *)src, src_n, src_stride, (const I *)index, n, index_stride,
      (unsigned long long *)flag);
}

static int cuda_failed(cudaError_t status, const char *what, char *err, size_t errlen) {
  snprintf(err, errlen, "CUDA error in %s: %s (%s)", what, cudaGetErrorString(status),
           cudaGetErrorName(status));
  return -1;
}

/* The work, with `device` current. */
static int gather_work(cudaStream_t stream, void *out, const void *src, int64_t src_n,
                       int64_t src_stride, size_t elsize, const void *index, int index_is_64,
                       int64_t n, int64_t index_stride, void *flag, int64_t *bad_position,
                       int64_t *bad_value, char *err, size_t errlen) {
  cudaError_t status = cudaMemsetAsync(flag, 0xff, sizeof(unsigned long long), stream);
  if (status != cudaSuccess) return cuda_failed(status, "cudaMemsetAsync", err, errlen);
  if (elsize == 4 && !index_is_64)
    gather_launch<uint32_t, int32_t>(stream, out, src, src_n, src_stride, index, n,
                                     index_stride, flag);
  else if (elsize == 4)
    gather_launch<uint32_t, int64_t>(stream, out, src, src_n, src_stride, index, n,
                                     index_stride, flag);
  else if (!index_is_64)
    gather_launch<uint64_t, int32_t>(stream, out, src, src_n, src_stride, index, n,
                                     index_stride, flag);
  else
    gather_launch<uint64_t, int64_t>(stream, out, src, src_n, src_stride, index, n,
                                     index_stride, flag);
  status = cudaGetLastError();
  if (status != cudaSuccess) return cuda_failed(status, "the kernel launch", err, errlen);

  unsigned long long first_bad = NO_BAD_INDEX;
  status = cudaMemcpyAsync(&first_bad, flag, sizeof first_bad, cudaMemcpyDeviceToHost, stream);
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
  if (status != cudaSuccess) return cuda_failed(status, "the gather kernel", err, errlen);
  if (first_bad == NO_BAD_INDEX) return 0;

  /* the offending value, read back from the index tensor */
  size_t isize = index_is_64 ? 8 : 4;
  const char *at = (const char *)index + (int64_t)first_bad * index_stride * (int64_t)isize;
  int64_t v64 = 0;
  int32_t v32 = 0;
  status = cudaMemcpyAsync(index_is_64 ? (void *)&v64 : (void *)&v32, at, isize,
                           cudaMemcpyDeviceToHost, stream);
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
  if (status != cudaSuccess) return cuda_failed(status, "reading the bad index", err, errlen);
  *bad_position = (int64_t)first_bad;
  *bad_value = index_is_64 ? v64 : (int64_t)v32;
  return 1;
}

extern "C" int gather_ext_run(int device, void *stream, void *out, const void *src,
                              int64_t src_n, int64_t src_stride, size_t elsize,
                              const void *index, int index_is_64, int64_t n,
                              int64_t index_stride, void *flag, int64_t *bad_position,
                              int64_t *bad_value, char *err, size_t errlen) {
  if (elsize != 4 && elsize != 8) {
    snprintf(err, errlen, "elements of %zu bytes are not supported (4 or 8)", elsize);
    return -1;
  }
  /* qlua remembers each thread's current device: change it only for this call */
  int previous = -1;
  cudaError_t status = cudaGetDevice(&previous);
  if (status == cudaSuccess && previous != device) status = cudaSetDevice(device);
  if (status != cudaSuccess) return cuda_failed(status, "cudaSetDevice", err, errlen);
  int rc = gather_work((cudaStream_t)stream, out, src, src_n, src_stride, elsize, index,
                       index_is_64, n, index_stride, flag, bad_position, bad_value, err,
                       errlen);
  if (previous != device) (void)cudaSetDevice(previous);
  return rc;
}
