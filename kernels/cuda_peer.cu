/*
** cuda_peer.cu — the CUDA device's GPU-to-GPU copies (device.h's copy_peer): peer to peer
** where two GPUs allow it (enabled once per pair), else staged by the driver; ordered on both
** devices' streams with events, so neither queue waits on the host.
*/
#include <pthread.h>

#include "kernels.h"
#include "cuda_internal.h"


/* Whether dev may read and write peer's memory directly: asked and enabled once per pair
** (cudaDeviceEnablePeerAccess is per pair and direction, from dev's context). */
#define CUDA_PEER_MAX 64
static signed char cuda_peer_state[CUDA_PEER_MAX][CUDA_PEER_MAX];   /* 0 unknown, 1 yes, -1 no */
static pthread_mutex_t cuda_peer_lock = PTHREAD_MUTEX_INITIALIZER;

static void cuda_peer_enable(int from, int to) {
  if (from >= CUDA_PEER_MAX || to >= CUDA_PEER_MAX) return;
  pthread_mutex_lock(&cuda_peer_lock);
  if (cuda_peer_state[from][to] == 0) {
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, from, to) == cudaSuccess && can) {
      cudaError_t s = cudaDeviceEnablePeerAccess(to, 0);   /* the current device is `from` */
      if (s == cudaErrorPeerAccessAlreadyEnabled) s = cudaSuccess;
      cuda_peer_state[from][to] = s == cudaSuccess ? 1 : -1;
    } else {
      cuda_peer_state[from][to] = -1;
    }
    (void)cudaGetLastError();
  }
  pthread_mutex_unlock(&cuda_peer_lock);
}

/* dst (dev) = src (src_dev): on dev's stream after what src_dev's holds, and src_dev's
** stream waits for the copy (src's block may be reused in its stream order). cudaMemcpyPeer
** takes the direct path when peer access is on, and stages through the host otherwise. */
extern "C" int qt_cuda_copy_peer(qt_device *dev, void *dst, qt_device *src_dev, const void *src,
                                 size_t nbytes, qt_err *err) {
  const char *op = "copy";
  if (nbytes == 0) return 0;
  if (qt_cuda_refuse_capture(dev, op, err) != 0 || qt_cuda_refuse_capture(src_dev, op, err) != 0)
    return -1;
  qt_cuda_ctx *dc = qt_cuda_context(dev), *sc = qt_cuda_context(src_dev);
  cudaEvent_t ready, done;
  if (qt_cuda_enter(src_dev, op, err) != 0) return -1;
  if (qt_cuda_check(src_dev, cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), op, err) != 0)
    return -1;
  int rc = qt_cuda_check(src_dev, cudaEventRecord(ready, sc->stream), op, err);
  if (rc == 0) rc = qt_cuda_enter(dev, op, err);
  if (rc == 0) {
    cuda_peer_enable(dc->ordinal, sc->ordinal);
    rc = qt_cuda_check(dev, cudaStreamWaitEvent(dc->stream, ready, 0), op, err);
  }
  if (rc == 0)
    rc = qt_cuda_check(dev, cudaMemcpyPeerAsync(dst, dc->ordinal, src, sc->ordinal, nbytes, dc->stream),
                       op, err);
  if (rc == 0) rc = qt_cuda_check(dev, cudaEventCreateWithFlags(&done, cudaEventDisableTiming), op, err);
  if (rc == 0) {
    rc = qt_cuda_check(dev, cudaEventRecord(done, dc->stream), op, err);
    if (rc == 0) rc = qt_cuda_enter(src_dev, op, err);
    if (rc == 0) rc = qt_cuda_check(src_dev, cudaStreamWaitEvent(sc->stream, done, 0), op, err);
    cudaEventDestroy(done);
  }
  cudaEventDestroy(ready);
  (void)qt_cuda_enter(dev, op, err);   /* dev current again, as the caller left it */
  return rc;
}
