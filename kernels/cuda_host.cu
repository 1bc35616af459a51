/*
** cuda_host.cu — pinned host memory: the page-locked block cache that the registry
** (runtime/core/device.c) gives the CPU device as its host allocator when a GPU is there
** (qt_cuda_host_alloc, qt_cuda_host_free, qt_cuda_host_empty_cache in device.h). It owns
** the blocks it hands out and the ones it caches.
*/
#include <pthread.h>

#include <map>
#include <new>
#include <vector>

#include "kernels.h"

/* ------------------------------------------------------------------ pinned host memory */

/*
** Page-locked blocks for the CPU device's tensors (>= 64 KiB when a GPU is present), so
** that :gpu() and :cpu() run at the PCIe limit. cudaHostAlloc costs milliseconds, so freed
** blocks are cached by size class: sizes round up to the next 2^k or 1.5 * 2^k (at most a
** third wasted), at least 64 KiB. The cache is bounded: a freed block that would take it
** past 2 GiB is returned to the driver at once. Process-wide (portable memory serves
** every GPU), one mutex.
*/

#define HOST_MIN_BLOCK ((size_t)64 << 10)
#define HOST_CACHE_LIMIT ((size_t)2 << 30)

static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static std::map<size_t, std::vector<void *> > *host_cache = NULL;
static size_t host_cached_bytes = 0;

static pthread_once_t host_usable_once = PTHREAD_ONCE_INIT;
static bool host_usable = false;

static void host_check_usable(void) { host_usable = qt_cuda_device_count() > 0; }

static size_t host_round(size_t nbytes) {
  if (nbytes <= HOST_MIN_BLOCK) return HOST_MIN_BLOCK;
  size_t p = HOST_MIN_BLOCK;
  while (p < nbytes) {
    if (p + p / 2 >= nbytes) return p + p / 2;
    if (p > ((size_t)1 << 62)) return nbytes;  /* absurd sizes: exact */
    p *= 2;
  }
  return p;
}

/* Gives every cached block back (host_lock held). */
static void host_release_cached(void) {
  if (host_cache == NULL) return;
  for (auto &entry : *host_cache)
    for (void *p : entry.second) cudaFreeHost(p);
  host_cache->clear();
  host_cached_bytes = 0;
  (void)cudaGetLastError();
}

extern "C" int qt_cuda_host_alloc(size_t nbytes, void **ptr) {
  pthread_once(&host_usable_once, host_check_usable);
  if (!host_usable) return -1;
  size_t size = host_round(nbytes);
  pthread_mutex_lock(&host_lock);
  if (host_cache == NULL) host_cache = new (std::nothrow) std::map<size_t, std::vector<void *> >();
  if (host_cache != NULL) {
    auto it = host_cache->find(size);
    if (it != host_cache->end() && !it->second.empty()) {
      *ptr = it->second.back();
      it->second.pop_back();
      host_cached_bytes -= size;
      pthread_mutex_unlock(&host_lock);
      return 0;
    }
  }
  void *p = NULL;
  cudaError_t status = cudaHostAlloc(&p, size, cudaHostAllocPortable);
  if (status != cudaSuccess && host_cached_bytes > 0) {
    (void)cudaGetLastError();
    host_release_cached();
    status = cudaHostAlloc(&p, size, cudaHostAllocPortable);
  }
  pthread_mutex_unlock(&host_lock);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  *ptr = p;
  return 0;
}

extern "C" void qt_cuda_host_free(void *ptr, size_t nbytes) {
  if (ptr == NULL) return;
  size_t size = host_round(nbytes);
  pthread_mutex_lock(&host_lock);
  bool cached = false;
  if (host_cache != NULL && host_cached_bytes + size <= HOST_CACHE_LIMIT) {
    try {
      (*host_cache)[size].push_back(ptr);
      host_cached_bytes += size;
      cached = true;
    } catch (...) {
      cached = false;
    }
  }
  pthread_mutex_unlock(&host_lock);
  if (!cached && cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
}

extern "C" void qt_cuda_host_empty_cache(void) {
  pthread_mutex_lock(&host_lock);
  host_release_cached();
  pthread_mutex_unlock(&host_lock);
}
