/*
** cuda_transfer.cu — the CUDA device's host<->device copies: the upload and download slots,
** and the staging for large pageable transfers (its pinned buffers, one pair per worker
** thread, in the device's staging struct, ctx->staging, made by qt_cuda_device_open and
** given back by empty_cache).
*/
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels.h"
#include "cuda_internal.h"

/* ------------------------------------------------------------------ transfers */

/*
** Pinned host memory moves at the PCIe limit (~55 GB/s on the H200 host); pageable memory
** goes through the driver's own small staging buffer at ~6-10 GB/s. For large pageable
** transfers (the embedding API, external memory, big CPU tensors without a GPU at
** creation time) we stage ourselves: the bytes are cut into 4 MiB chunks, and a few
** threads each copy their chunks into their own pair of cached pinned buffers while the
** copy engine drains the previous ones (double buffering). All copies go on the device's
** stream, so they are ordered after the kernels queued before the transfer.
*/

/* Pinned staging buffers for pageable transfers (see cuda_transfer_staged). */
#define CUDA_STAGING_MAX_WORKERS 8
#define CUDA_STAGING_CHUNK ((size_t)4 << 20)
#define CUDA_STAGING_MIN ((size_t)4 << 20)   /* below this, the driver's own path */

/* One worker's pair of buffers, and the events that say when the copy engine is done
** with each. */
typedef struct cuda_staging_slot {
  void *buffer[2];
  cudaEvent_t done[2];
  bool ready;
} cuda_staging_slot;

/* A device's staging buffers (ctx->staging): one transfer at a time uses them. */
struct qt_cuda_staging {
  pthread_mutex_t lock;
  cuda_staging_slot slot[CUDA_STAGING_MAX_WORKERS];
};

/* A device's staging struct, its buffers not made yet (they are made on first use); NULL
** when out of host memory. */
extern "C" qt_cuda_staging *qt_cuda_staging_new(void) {
  qt_cuda_staging *s = (qt_cuda_staging *)calloc(1, sizeof *s);
  if (s != NULL) pthread_mutex_init(&s->lock, NULL);
  return s;
}

/* Undoes qt_cuda_staging_new for a device that failed to open (no buffers made yet). */
extern "C" void qt_cuda_staging_delete(qt_cuda_staging *s) {
  if (s == NULL) return;
  pthread_mutex_destroy(&s->lock);
  free(s);
}

/* How many threads stage a pageable transfer of nbytes. */
static int staging_worker_count(size_t nbytes) {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  /* Measured on the H200 host (16 cores), 256 MiB pageable: 1 thread ~9.5 GB/s,
  ** 4 ~30, 8 ~40-45 (pinned: 55). Each thread copies at roughly memcpy speed. */
  int want = cores >= 16 ? 8 : (cores >= 8 ? 4 : (cores >= 4 ? 2 : 1));
  if (want > CUDA_STAGING_MAX_WORKERS) want = CUDA_STAGING_MAX_WORKERS;
  size_t chunks = (nbytes + CUDA_STAGING_CHUNK - 1) / CUDA_STAGING_CHUNK;
  if ((size_t)want > chunks / 2) want = (int)(chunks / 2);
  return want < 1 ? 1 : want;
}

/* Makes a slot's buffers and events (the staging lock held, device current). All or nothing:
** on a failure what was made is given back, so a slot that is not ready holds nothing
** (qt_cuda_staging_release only looks at ready slots). */
static cudaError_t staging_prepare(cuda_staging_slot *slot) {
  if (slot->ready) return cudaSuccess;
  cudaError_t status = cudaSuccess;
  for (int k = 0; k < 2 && status == cudaSuccess; k++) {
    status = cudaHostAlloc(&slot->buffer[k], CUDA_STAGING_CHUNK, cudaHostAllocPortable);
    if (status == cudaSuccess)
      status = cudaEventCreateWithFlags(&slot->done[k], cudaEventDisableTiming);
  }
  if (status != cudaSuccess) {
    for (int k = 0; k < 2; k++) {
      if (slot->buffer[k] != NULL) (void)cudaFreeHost(slot->buffer[k]);
      if (slot->done[k] != NULL) (void)cudaEventDestroy(slot->done[k]);
    }
    memset(slot, 0, sizeof *slot);
    return status;
  }
  slot->ready = true;
  return cudaSuccess;
}

/* Gives the buffers back (empty_cache); the next staged transfer makes them again. */
extern "C" void qt_cuda_staging_release(qt_cuda_staging *s) {
  pthread_mutex_lock(&s->lock);
  for (int i = 0; i < CUDA_STAGING_MAX_WORKERS; i++) {
    cuda_staging_slot *slot = &s->slot[i];
    if (!slot->ready) continue;
    for (int k = 0; k < 2; k++) {
      cudaFreeHost(slot->buffer[k]);
      cudaEventDestroy(slot->done[k]);
    }
    memset(slot, 0, sizeof *slot);
  }
  (void)cudaGetLastError();
  pthread_mutex_unlock(&s->lock);
}

typedef struct staging_job {
  int ordinal;
  cudaStream_t stream;
  bool upload;
  char *device_ptr;
  char *host_ptr;
  size_t nbytes;
  int worker, workers;
  cuda_staging_slot *slot;
  cudaError_t status;
} staging_job;

#define STAGING_TRY(call)                         \
  do {                                            \
    cudaError_t staging_status_ = (call);         \
    if (staging_status_ != cudaSuccess) {         \
      job->status = staging_status_;              \
      return NULL;                                \
    }                                             \
  } while (0)

/* One worker's share: chunks worker, worker + workers, ... of the transfer. */
static void *staging_run(void *arg) {
  staging_job *job = (staging_job *)arg;
  STAGING_TRY(qt_cuda_make_current(job->ordinal));
  size_t chunk = CUDA_STAGING_CHUNK;
  size_t nchunks = (job->nbytes + chunk - 1) / chunk;
  cuda_staging_slot *slot = job->slot;
  if (job->upload) {
    int iter = 0;
    for (size_t c = (size_t)job->worker; c < nchunks; c += (size_t)job->workers, iter++) {
      int k = iter & 1;
      size_t at = c * chunk, len = job->nbytes - at < chunk ? job->nbytes - at : chunk;
      if (iter >= 2) STAGING_TRY(cudaEventSynchronize(slot->done[k]));
      memcpy(slot->buffer[k], job->host_ptr + at, len);
      STAGING_TRY(cudaMemcpyAsync(job->device_ptr + at, slot->buffer[k], len,
                                  cudaMemcpyHostToDevice, job->stream));
      STAGING_TRY(cudaEventRecord(slot->done[k], job->stream));
    }
  } else {
    /* Queue chunk i+1 before unpacking chunk i, so the copy engine never waits on us. */
    size_t c = (size_t)job->worker;
    if (c >= nchunks) return NULL;
    int iter = 0;
    size_t at = c * chunk, len = job->nbytes - at < chunk ? job->nbytes - at : chunk;
    STAGING_TRY(cudaMemcpyAsync(slot->buffer[0], job->device_ptr + at, len,
                                cudaMemcpyDeviceToHost, job->stream));
    STAGING_TRY(cudaEventRecord(slot->done[0], job->stream));
    for (; c < nchunks; c += (size_t)job->workers, iter++) {
      int k = iter & 1;
      size_t next = c + (size_t)job->workers;
      if (next < nchunks) {
        size_t nat = next * chunk, nlen = job->nbytes - nat < chunk ? job->nbytes - nat : chunk;
        STAGING_TRY(cudaMemcpyAsync(slot->buffer[k ^ 1], job->device_ptr + nat, nlen,
                                    cudaMemcpyDeviceToHost, job->stream));
        STAGING_TRY(cudaEventRecord(slot->done[k ^ 1], job->stream));
      }
      at = c * chunk;
      len = job->nbytes - at < chunk ? job->nbytes - at : chunk;
      STAGING_TRY(cudaEventSynchronize(slot->done[k]));
      memcpy(job->host_ptr + at, slot->buffer[k], len);
    }
  }
  return NULL;
}

/* A staged pageable transfer. Returns 1 when the staging buffers are busy (another
** thread is transferring) or cannot be made, so the caller takes the driver's path. */
static int cuda_transfer_staged(qt_device *dev, bool upload, void *device_ptr, void *host_ptr,
                                size_t nbytes, const char *op, qt_err *err) {
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  qt_cuda_staging *s = ctx->staging;
  if (pthread_mutex_trylock(&s->lock) != 0) return 1;
  int workers = staging_worker_count(nbytes);
  for (int w = 0; w < workers; w++) {
    if (staging_prepare(&s->slot[w]) != cudaSuccess) {
      (void)cudaGetLastError();
      workers = w;
      break;
    }
  }
  if (workers == 0) {
    pthread_mutex_unlock(&s->lock);
    return 1;
  }
  staging_job jobs[CUDA_STAGING_MAX_WORKERS];
  pthread_t threads[CUDA_STAGING_MAX_WORKERS];
  bool started[CUDA_STAGING_MAX_WORKERS] = {false};
  for (int w = 0; w < workers; w++) {
    staging_job *job = &jobs[w];
    job->ordinal = ctx->ordinal;
    job->stream = ctx->stream;
    job->upload = upload;
    job->device_ptr = (char *)device_ptr;
    job->host_ptr = (char *)host_ptr;
    job->nbytes = nbytes;
    job->worker = w;
    job->workers = workers;
    job->slot = &s->slot[w];
    job->status = cudaSuccess;
  }
  /* Workers 1.. get threads; worker 0 runs here. A thread that cannot be started has
  ** its share run here afterwards. */
  for (int w = 1; w < workers; w++)
    started[w] = pthread_create(&threads[w], NULL, staging_run, &jobs[w]) == 0;
  staging_run(&jobs[0]);
  for (int w = 1; w < workers; w++) {
    if (started[w]) pthread_join(threads[w], NULL);
    else staging_run(&jobs[w]);
  }
  cudaError_t status = cudaStreamSynchronize(ctx->stream);
  for (int w = 0; w < workers && status == cudaSuccess; w++) status = jobs[w].status;
  pthread_mutex_unlock(&s->lock);
  return qt_cuda_check(dev, status, op, err);
}

/* Pinned memory (ours or registered) can go straight to the copy engine. */
static bool cuda_host_is_pinned(const void *ptr) {
  cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost;
}

extern "C" int qt_cuda_upload(qt_device *dev, void *dst, const void *host_src, size_t nbytes,
                              qt_err *err) {
  if (qt_cuda_enter(dev, "upload", err) != 0) return -1;
  if (qt_cuda_refuse_capture(dev, "upload", err) != 0) return -1;
  if (nbytes == 0) return 0;
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  if (nbytes >= CUDA_STAGING_MIN && !cuda_host_is_pinned(host_src)) {
    int staged = cuda_transfer_staged(dev, true, dst, (void *)host_src, nbytes, "upload", err);
    if (staged <= 0) return staged;
  }
  if (qt_cuda_check(dev, cudaMemcpyAsync(dst, host_src, nbytes, cudaMemcpyHostToDevice,
                                         ctx->stream), "upload", err) != 0)
    return -1;
  return qt_cuda_check(dev, cudaStreamSynchronize(ctx->stream), "upload", err);
}

extern "C" int qt_cuda_download(qt_device *dev, void *host_dst, const void *src, size_t nbytes,
                                qt_err *err) {
  if (qt_cuda_enter(dev, "download", err) != 0) return -1;
  if (qt_cuda_refuse_capture(dev, "download", err) != 0) return -1;
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  if (nbytes > 0) {
    int done = 1;
    if (nbytes >= CUDA_STAGING_MIN && !cuda_host_is_pinned(host_dst)) {
      done = cuda_transfer_staged(dev, false, (void *)src, host_dst, nbytes, "download", err);
      if (done < 0) return -1;
    }
    if (done != 0) {
      if (qt_cuda_check(dev, cudaMemcpyAsync(host_dst, src, nbytes, cudaMemcpyDeviceToHost,
                                             ctx->stream), "download", err) != 0)
        return -1;
    }
  }
  if (qt_cuda_check(dev, cudaStreamSynchronize(ctx->stream), "download", err) != 0) return -1;
  return qt_cuda_take_index_error(dev, err);
}
