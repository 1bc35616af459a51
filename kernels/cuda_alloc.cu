/*
** cuda_alloc.cu — the CUDA device's caching allocator: device memory for tensors (the
** alloc and free slots), scratch memory for kernels (qt_cuda_scratch), empty_cache and the
** memory stats.
**
** One allocator per device (ctx->allocator, made by qt_cuda_device_open), and one per CUDA
** graph pool (cuda_graph.cu): while a capture is under way, alloc serves from the capturing
** graph's pool, and free holds back the device's own blocks (the graph may use them). Every op of a
** device is queued on that device's one stream (cuda_device.cu), which is what makes the
** allocator simple: a block freed while kernels that use it are still queued can be handed
** to the next op at once, because that op is queued behind them on the same stream.
**
** Who owns what: the allocator owns every device segment it got from cudaMalloc and gives
** them back in empty_cache, when an allocation would otherwise fail, and when a new segment
** would take the cache past its bound (see below). empty_cache also gives back the
** device's staging buffers (qt_cuda_staging_release).
*/
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <new>
#include <set>

#include "kernels.h"
#include "cuda_internal.h"

/* ------------------------------------------------------------------ the caching allocator */

/*
** Three pools of segments from cudaMalloc, each cut into blocks, as in PyTorch's allocator:
**   small  requests up to 1 MiB, rounded up to 512 B, carved out of 2 MiB segments;
**   mid    larger ones that round (to 2 MiB) below 10 MiB, carved out of 20 MiB segments;
**   big    the rest, rounded up to 2 MiB, given a segment of their own size when no cached
**          block fits.
** A request takes the best-fitting free block of its pool (the smallest that fits, lowest
** address among equals) and splits off the tail; a freed block merges with its free
** neighbours, so a segment whose blocks are all free is one block again, "whole", and only
** whole segments can go back to the driver. One small live block keeps its whole segment,
** so while there is room under the cache bound (below) pools do not lend to each other (a
** 4 MiB index tensor in the tail of a cached 4 GiB segment), and a big request splits no
** free block more than 4 times its size (PyTorch's max_split_size, as a ratio): it gets a
** segment of its own, and the large one can go back.
**
** Free blocks of the small pool sit in 4096 buckets (one per 512 B size), found through a
** bitmap of non-empty buckets: alloc + free is a few hundred nanoseconds of host time with
** no system call and no clock read (everything below runs only when no cached block fits).
** The mid and big pools are ordered sets (best fit by size, then address); their
** operations are rarer and their kernels longer.
**
** The cache bound. Before a new segment is taken from the driver (only then: a request the
** cache can serve costs nothing more), reserved memory, the new segment included, is to
** stay within
**     max(1.5 x the recent peak of allocated memory, 256 MiB)
** (recent: the last 5 to 10 s, the new request counted). The recent peak rather than what
** is allocated at the miss: a step that allocates and frees a lot would otherwise trim, at
** a low point, what its next high point needs. When the new segment would pass the bound:
**   1. whole free segments that have been idle for a period or more (freed before the
**      previous 5 s period began) go back to the driver until it fits;
**   2. if that is not enough, and a free block that the rules above keep from this request
**      fits it (a block of its pool more than 4 times its size, or a block of another
**      pool), that block serves it: it is lent, stays a block of its own pool and merges
**      back there when freed. Reserved memory does not grow, and no segment in recent use
**      is evicted (evicting one made a steady step thrash: docs/NOTES.md);
**   3. else (no free block fits at all: every whole one is smaller than the request) whole
**      segments go back regardless of age, and a new segment is taken.
** Segments go back the smallest that covers the excess if one does, else the largest
** first (fewest cudaFree calls), mid and big ones before small ones. Reserved memory grows
** only at step 3 (and under the floor), so it stays within 1.5x the peak of allocated
** memory, plus what partly used segments keep; lent blocks (step 2) add to those: a lent
** block that lives long pins its lender segment.
**
** When the driver is out of memory, a free block of any pool that fits serves the request
** the same way (the big pool's 80 GiB free tail serves a 4 MiB request), else every whole
** segment goes back and the request is tried once more.
**
** spec/gpu/cuda_alloc_harness.cc replays samples/soak.lua against this code and a model of
** the driver, and runs the steady steps above (no driver call after warm-up); what it
** measured, before and after the bound, is in docs/NOTES.md.
**
** cudaFree must not return a block that queued kernels still use (a block freed in stream
** order is reused by the next op at once, see the top of this file), so a trim first
** synchronises the stream, as empty_cache does; it does so only when it has something
** whole to give back. A failed sync or cudaFree fails the allocation with its message (a
** sticky error has marked the device broken); a segment whose cudaFree failed stays
** cached and counted in reserved, since the driver still holds it.
**
** Live blocks are found from their pointer through a chained hash table. Block structs are
** recycled through a free list. One mutex guards everything: devices are process-wide.
*/

#define CUDA_SMALL_LIMIT    ((size_t)1 << 20)   /* requests up to this go to the small pool */
#define CUDA_SMALL_ROUND    ((size_t)512)
#define CUDA_SMALL_SEGMENT  ((size_t)2 << 20)
#define CUDA_SMALL_BUCKETS  ((int)(CUDA_SMALL_SEGMENT / CUDA_SMALL_ROUND))  /* 4096 */
#define CUDA_LARGE_ROUND    ((size_t)2 << 20)   /* mid and big requests round to this */
#define CUDA_MID_SEGMENT    ((size_t)20 << 20)  /* shared segment of the mid pool */
#define CUDA_BIG_LIMIT      ((size_t)10 << 20)  /* from here up (rounded), the big pool */
#define CUDA_CACHE_FLOOR    ((int64_t)256 << 20) /* reserved may always reach this */
#define CUDA_WINDOW_NS      ((uint64_t)5000000000u) /* the bound's memory: 5 s periods */
#define CUDA_SPLIT_RATIO    ((size_t)4)         /* big blocks take >= 1/4 of what they split */

enum { CUDA_POOL_SMALL, CUDA_POOL_MID, CUDA_POOL_BIG };

typedef struct cuda_block {
  char *ptr;
  size_t size;
  bool allocated;
  unsigned char pool;                        /* CUDA_POOL_* */
  uint32_t period;                           /* free: the period it was freed in */
  struct cuda_block *prev, *next;            /* neighbours in the segment, address order */
  struct cuda_block *free_prev, *free_next;  /* small pool bucket list */
  struct cuda_block *hash_next;              /* live-block hash chain / recycled list */
} cuda_block;

struct cuda_block_order {
  bool operator()(const cuda_block *a, const cuda_block *b) const {
    if (a->size != b->size) return a->size < b->size;
    return a->ptr < b->ptr;
  }
};

typedef std::set<cuda_block *, cuda_block_order> cuda_block_set;

struct qt_cuda_allocator {
  pthread_mutex_t lock;
  /* small pool */
  cuda_block *small_bucket[CUDA_SMALL_BUCKETS];
  uint64_t small_bits[CUDA_SMALL_BUCKETS / 64];
  /* mid and big pools: free blocks, by pool - 1 */
  cuda_block_set *large_free[2];
  /* free blocks of the mid and big pools that are whole segments (also in large_free);
  ** the small pool's whole segments are its largest bucket */
  cuda_block_set *whole_free;
  /* live blocks by pointer */
  cuda_block **hash;
  size_t hash_size;   /* power of two */
  size_t hash_count;
  cuda_block *spare;  /* recycled structs, linked through hash_next */
  /* statistics, in bytes */
  int64_t allocated, reserved, peak;
  /* the peak of allocated over the current period of the cache bound's window ([0]) and
  ** over the one before ([1]), and when the current period began (see alloc_recent_peak) */
  int64_t window_peak[2];
  uint64_t window_start_ns;
  uint32_t period;  /* periods so far (stamps whole free segments; see alloc_is_stale) */
  /* A CUDA graph's pool (cuda_graph.cu): no bound and no trim (its blocks must stay while
  ** the graph lives), no cache given back on a miss (that would wait on a capturing
  ** stream), and its cudaMalloc runs in relaxed capture mode, which a capture allows. */
  bool graph_pool;
};

static cuda_block *alloc_block_new(qt_cuda_allocator *a) {
  cuda_block *b = a->spare;
  if (b != NULL) a->spare = b->hash_next;
  else b = (cuda_block *)malloc(sizeof *b);
  if (b != NULL) memset(b, 0, sizeof *b);
  return b;
}

static void alloc_block_recycle(qt_cuda_allocator *a, cuda_block *b) {
  b->hash_next = a->spare;
  a->spare = b;
}

/* ---- small pool buckets */

static int alloc_small_index(size_t size) { return (int)(size / CUDA_SMALL_ROUND) - 1; }

/* The bucket of free small blocks that are whole segments. */
#define CUDA_SMALL_WHOLE (CUDA_SMALL_BUCKETS - 1)

static void alloc_small_insert(qt_cuda_allocator *a, cuda_block *b) {
  int i = alloc_small_index(b->size);
  b->free_prev = NULL;
  b->free_next = a->small_bucket[i];
  if (b->free_next != NULL) b->free_next->free_prev = b;
  a->small_bucket[i] = b;
  a->small_bits[i >> 6] |= (uint64_t)1 << (i & 63);
}

static void alloc_small_remove(qt_cuda_allocator *a, cuda_block *b) {
  int i = alloc_small_index(b->size);
  if (b->free_prev != NULL) b->free_prev->free_next = b->free_next;
  else a->small_bucket[i] = b->free_next;
  if (b->free_next != NULL) b->free_next->free_prev = b->free_prev;
  if (a->small_bucket[i] == NULL) a->small_bits[i >> 6] &= ~((uint64_t)1 << (i & 63));
  b->free_prev = b->free_next = NULL;
}

/* The most recently freed block of the smallest non-empty bucket >= size (LIFO keeps the
** reused block warm in L2). */
static cuda_block *alloc_small_find(qt_cuda_allocator *a, size_t size) {
  int i = alloc_small_index(size);
  int word = i >> 6;
  uint64_t bits = a->small_bits[word] & (~(uint64_t)0 << (i & 63));
  for (;;) {
    if (bits != 0) {
      int found = (word << 6) + __builtin_ctzll(bits);
      return a->small_bucket[found];
    }
    if (++word >= CUDA_SMALL_BUCKETS / 64) return NULL;
    bits = a->small_bits[word];
  }
}

/* ---- free lists of every pool */

/* A block with no neighbours is a whole segment. Free blocks are always merged with free
** neighbours, so while a block sits in a free list its neighbours are live blocks (or
** none) and stay there: whether it is whole does not change until it is taken out. */
static bool alloc_is_segment(const cuda_block *b) {
  return b->prev == NULL && b->next == NULL;
}

/* A set insert fails only for want of host memory (std::bad_alloc). The block then stays
** out of the set: free but neither found by alloc_take nor handed back by a trim until a
** neighbour is freed and the merge puts it back (erasing a block that is not there is
** harmless). Nothing is corrupted; at worst some cached memory is idle. */
static void alloc_free_insert(qt_cuda_allocator *a, cuda_block *b) {
  if (b->pool == CUDA_POOL_SMALL) {
    alloc_small_insert(a, b);
    return;
  }
  try {
    a->large_free[b->pool - 1]->insert(b);
    if (alloc_is_segment(b)) a->whole_free->insert(b);
  } catch (...) {
  }
}

static void alloc_free_remove(qt_cuda_allocator *a, cuda_block *b) {
  if (b->pool == CUDA_POOL_SMALL) {
    alloc_small_remove(a, b);
    return;
  }
  a->large_free[b->pool - 1]->erase(b);
  if (alloc_is_segment(b)) a->whole_free->erase(b);
}

/* The best-fitting free block of a pool for size bytes, or NULL; with limit_split, NULL
** also when in the big pool the best fit is more than CUDA_SPLIT_RATIO times size. */
static cuda_block *alloc_find(qt_cuda_allocator *a, int pool, size_t size,
                              bool limit_split) {
  if (pool == CUDA_POOL_SMALL) return alloc_small_find(a, size);
  cuda_block key;
  key.size = size;
  key.ptr = NULL;
  cuda_block_set *set = a->large_free[pool - 1];
  auto it = set->lower_bound(&key);
  if (it == set->end()) return NULL;
  if (limit_split && pool == CUDA_POOL_BIG && (*it)->size / CUDA_SPLIT_RATIO > size)
    return NULL;
  return *it;
}

/* ---- live-block hash */

static size_t alloc_hash_slot(const qt_cuda_allocator *a, const void *ptr) {
  uint64_t key = (uint64_t)(uintptr_t)ptr >> 9;  /* blocks are 512-aligned */
  return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (a->hash_size - 1);
}

static void alloc_hash_grow(qt_cuda_allocator *a) {
  size_t new_size = a->hash_size * 2;
  cuda_block **table = (cuda_block **)calloc(new_size, sizeof *table);
  if (table == NULL) return;  /* keep the old table: longer chains, still correct */
  cuda_block **old = a->hash;
  size_t old_size = a->hash_size;
  a->hash = table;
  a->hash_size = new_size;
  for (size_t i = 0; i < old_size; i++) {
    cuda_block *b = old[i];
    while (b != NULL) {
      cuda_block *next = b->hash_next;
      size_t slot = alloc_hash_slot(a, b->ptr);
      b->hash_next = table[slot];
      table[slot] = b;
      b = next;
    }
  }
  free(old);
}

static void alloc_hash_insert(qt_cuda_allocator *a, cuda_block *b) {
  if (a->hash_count >= a->hash_size) alloc_hash_grow(a);
  size_t slot = alloc_hash_slot(a, b->ptr);
  b->hash_next = a->hash[slot];
  a->hash[slot] = b;
  a->hash_count++;
}

static cuda_block *alloc_hash_take(qt_cuda_allocator *a, const void *ptr) {
  cuda_block **link = &a->hash[alloc_hash_slot(a, ptr)];
  while (*link != NULL) {
    cuda_block *b = *link;
    if (b->ptr == (const char *)ptr) {
      *link = b->hash_next;
      b->hash_next = NULL;
      a->hash_count--;
      return b;
    }
    link = &b->hash_next;
  }
  return NULL;
}

extern "C" qt_cuda_allocator *qt_cuda_allocator_new(void) {
  qt_cuda_allocator *a = (qt_cuda_allocator *)calloc(1, sizeof *a);
  if (a == NULL) return NULL;
  a->hash_size = 1024;
  a->hash = (cuda_block **)calloc(a->hash_size, sizeof *a->hash);
  a->large_free[0] = new (std::nothrow) cuda_block_set();
  a->large_free[1] = new (std::nothrow) cuda_block_set();
  a->whole_free = new (std::nothrow) cuda_block_set();
  if (a->hash == NULL || a->large_free[0] == NULL || a->large_free[1] == NULL ||
      a->whole_free == NULL) {
    free(a->hash);
    delete a->large_free[0];
    delete a->large_free[1];
    delete a->whole_free;
    free(a);
    return NULL;
  }
  pthread_mutex_init(&a->lock, NULL);
  return a;
}

/* ---- giving segments back to the driver */

/* Waits until no queued kernel can use a cached block, so that cudaFree is safe. -1 with
** err set on a broken device or a failed sync (a sticky error marks the device broken;
** nothing may be given back then: the context is dead, or a kernel may still be running). */
static int alloc_stream_idle(qt_device *dev, const char *op, qt_err *err) {
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  if (ctx->broken)
    return qt_errorf(err, "%s: %s is unusable after an earlier error: %s", op, dev->name,
                     ctx->broken_msg);
  return qt_cuda_check(dev, cudaStreamSynchronize(ctx->stream), op, err);
}

/* Returns one whole free segment to the driver (a->lock held). The stream is synchronised
** first, once per trim: *idle says whether that was done. When the sync or cudaFree fails,
** -1 with err set and the segment stays cached and counted in reserved: the driver still
** holds it (a sticky error has marked the device broken; otherwise a later empty_cache
** tries again). */
static int alloc_release_segment(qt_device *dev, qt_cuda_allocator *a, cuda_block *b,
                                 bool *idle, const char *op, qt_err *err) {
  if (!*idle) {
    if (alloc_stream_idle(dev, op, err) != 0) return -1;
    *idle = true;
  }
  alloc_free_remove(a, b);
  cudaError_t status = cudaFree(b->ptr);
  if (status != cudaSuccess) {
    alloc_free_insert(a, b);
    return qt_cuda_check(dev, status, op, err);
  }
  a->reserved -= (int64_t)b->size;
  alloc_block_recycle(a, b);
  return 0;
}

/* Returns every whole free segment to the driver: empty_cache, and an allocation that the
** driver refused (a->lock held, device current). Stops at the first failure (-1, err). */
static int alloc_release_cached(qt_device *dev, qt_cuda_allocator *a, const char *op,
                                qt_err *err) {
  bool idle = false;
  while (!a->whole_free->empty())
    if (alloc_release_segment(dev, a, *a->whole_free->begin(), &idle, op, err) != 0) return -1;
  while (a->small_bucket[CUDA_SMALL_WHOLE] != NULL)
    if (alloc_release_segment(dev, a, a->small_bucket[CUDA_SMALL_WHOLE], &idle, op, err) != 0)
      return -1;
  return 0;
}

static uint64_t alloc_clock_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The peak of allocated memory over the last CUDA_WINDOW_NS or more: the current period's
** and the previous one's. Periods roll over here, that is at cache misses only (the fast
** path just raises window_peak[0]); a period that ends after a long quiet spell still
** counts once more, so a peak is forgotten after one to two periods with misses in them.
** a->period counts the periods: a whole free segment stamped (when it last became free)
** with neither the current period nor the previous one is stale. */
static int64_t alloc_recent_peak(qt_cuda_allocator *a) {
  uint64_t now = alloc_clock_ns();
  if (now - a->window_start_ns >= CUDA_WINDOW_NS) {
    a->window_peak[1] = a->window_peak[0];
    a->window_peak[0] = a->allocated;
    a->window_start_ns = now;
    a->period++;
  }
  return a->window_peak[0] > a->window_peak[1] ? a->window_peak[0] : a->window_peak[1];
}

/* The bound on reserved memory at a miss for `size` bytes (see the top of this section). */
static int64_t alloc_bound(qt_cuda_allocator *a, size_t size) {
  int64_t live = a->allocated + (int64_t)size;
  int64_t recent = alloc_recent_peak(a);
  if (live < recent) live = recent;
  int64_t bound = live + live / 2;
  return bound < CUDA_CACHE_FLOOR ? CUDA_CACHE_FLOOR : bound;
}

static bool alloc_is_stale(const qt_cuda_allocator *a, const cuda_block *b) {
  return b->period + 1 < a->period;
}

/* The largest whole free segment of the mid and big pools, stale ones only if asked. */
static cuda_block *alloc_largest_whole(qt_cuda_allocator *a, bool stale_only) {
  for (auto it = a->whole_free->rbegin(); it != a->whole_free->rend(); ++it)
    if (!stale_only || alloc_is_stale(a, *it)) return *it;
  return NULL;
}

/* Hands whole free segments back to the driver until *excess bytes are (the excess goes
** down by what went) or none is left: the smallest that covers the excess if one does,
** else the largest first (fewest cudaFree calls), mid and big ones before small ones;
** with stale_only, only segments idle for a whole period or more (a->lock held, device
** current). -1 with err set when a sync or a cudaFree failed. */
static int alloc_trim(qt_device *dev, qt_cuda_allocator *a, int64_t *excess, bool stale_only,
                      bool *idle, qt_err *err) {
  if (*excess <= 0) return 0;
  cuda_block key;
  key.size = (size_t)*excess;
  key.ptr = NULL;
  for (auto it = a->whole_free->lower_bound(&key); it != a->whole_free->end(); ++it) {
    cuda_block *b = *it;
    if (stale_only && !alloc_is_stale(a, b)) continue;
    *excess -= (int64_t)b->size;
    return alloc_release_segment(dev, a, b, idle, "alloc", err);
  }
  cuda_block *b;
  while (*excess > 0 && (b = alloc_largest_whole(a, stale_only)) != NULL) {
    *excess -= (int64_t)b->size;
    if (alloc_release_segment(dev, a, b, idle, "alloc", err) != 0) return -1;
  }
  b = a->small_bucket[CUDA_SMALL_WHOLE];
  while (*excess > 0 && b != NULL) {
    cuda_block *next = b->free_next;
    if (!stale_only || alloc_is_stale(a, b)) {
      *excess -= (int64_t)b->size;
      if (alloc_release_segment(dev, a, b, idle, "alloc", err) != 0) return -1;
    }
    b = next;
  }
  return 0;
}

/* A free block for size bytes that the normal search does not hand out: the best fit of
** the request's own pool however much larger (the big pool's split limit waived), else the
** smallest that fits in another pool (lent: it stays its own pool's block, and goes back
** there, merged with its neighbours, when freed). NULL when no free block fits. */
static cuda_block *alloc_find_lender(qt_cuda_allocator *a, int pool, size_t size) {
  cuda_block *best = alloc_find(a, pool, size, false);
  if (best != NULL) return best;
  for (int other = CUDA_POOL_SMALL; other <= CUDA_POOL_BIG; other++) {
    if (other == pool || (other == CUDA_POOL_SMALL && size > CUDA_SMALL_SEGMENT)) continue;
    cuda_block *b = alloc_find(a, other, size, false);
    if (b != NULL && (best == NULL || b->size < best->size)) best = b;
  }
  return best;
}
/* Human-readable byte counts for out-of-memory messages. */
static const char *alloc_bytes_str(uint64_t bytes, char *buf, size_t len) {
  static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 6) v /= 1024.0, u++;
  if (u == 0) snprintf(buf, len, "%llu B", (unsigned long long)bytes);
  else snprintf(buf, len, "%.2f %s", v, units[u]);
  return buf;
}

static int alloc_oom(qt_device *dev, qt_cuda_allocator *a, size_t nbytes, int *oom,
                     qt_err *err) {
  char asked[32], allocated[32], reserved[32], cached[32], free_str[32], total_str[32];
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) (void)cudaGetLastError();
  if (oom != NULL) *oom = 1;
  alloc_bytes_str(nbytes, asked, sizeof asked);
  alloc_bytes_str((uint64_t)a->allocated, allocated, sizeof allocated);
  alloc_bytes_str((uint64_t)a->reserved, reserved, sizeof reserved);
  alloc_bytes_str((uint64_t)(a->reserved - a->allocated), cached, sizeof cached);
  alloc_bytes_str(free_b, free_str, sizeof free_str);
  alloc_bytes_str(total_b, total_str, sizeof total_str);
  return qt_errorf(err,
                   "%s: out of memory: tried to allocate %s (%zu bytes); %s allocated, "
                   "%s reserved (%s cached), %s free of %s",
                   dev->name, asked, nbytes, allocated, reserved, cached, free_str, total_str);
}

/* cudaMalloc; for a graph's pool in relaxed capture mode (a capture under way on this
** thread refuses cudaMalloc in its own mode, and the new segment is not part of the
** graph: it is memory the graph's kernels will use). */
static cudaError_t alloc_driver_malloc(qt_cuda_allocator *a, void **mem, size_t bytes) {
  if (!a->graph_pool) return cudaMalloc(mem, bytes);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaError_t status = cudaThreadExchangeStreamCaptureMode(&mode);
  if (status != cudaSuccess) return status;
  status = cudaMalloc(mem, bytes);
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  return status;
}

/* A block for a request that no cached block serves (a->lock held, device current); it is
** in no free list. Under the bound, a new segment. Over it: stale segments go back first;
** if that is not enough, a free block that the pools' rules keep from this request (see
** alloc_find_lender) serves it rather than a segment in recent use being evicted; only
** when no free block fits at all do whole segments go back regardless (they are all
** smaller than the request then) for a new one. When the driver is out of memory: a
** lender, else the whole cache back to the driver and one more try. */
static int alloc_grow(qt_device *dev, qt_cuda_allocator *a, int pool, size_t size,
                      size_t nbytes, cuda_block **out, int *oom, qt_err *err) {
  size_t segment = pool == CUDA_POOL_SMALL ? CUDA_SMALL_SEGMENT
                   : pool == CUDA_POOL_MID ? CUDA_MID_SEGMENT : size;
  int64_t excess = a->graph_pool ? 0 : a->reserved + (int64_t)segment - alloc_bound(a, size);
  if (excess > 0) {
    bool idle = false;
    if (alloc_trim(dev, a, &excess, true, &idle, err) != 0) return -1;
    if (excess > 0) {
      cuda_block *lender = alloc_find_lender(a, pool, size);
      if (lender != NULL) {
        alloc_free_remove(a, lender);
        *out = lender;
        return 0;
      }
      if (alloc_trim(dev, a, &excess, false, &idle, err) != 0) return -1;
    }
  }
  void *mem = NULL;
  cudaError_t status = alloc_driver_malloc(a, &mem, segment);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    cuda_block *lender = alloc_find_lender(a, pool, size);
    if (lender != NULL) {
      alloc_free_remove(a, lender);
      *out = lender;
      return 0;
    }
    if (a->graph_pool) return alloc_oom(dev, a, nbytes, oom, err);
    if (alloc_release_cached(dev, a, "alloc", err) != 0) return -1;
    /* A mid request gets a segment of its own size now (sharing one is a luxury); small
    ** segments keep their size, the only one the small pool hands back whole. */
    if (pool == CUDA_POOL_MID) segment = size;
    status = alloc_driver_malloc(a, &mem, segment);
  }
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return alloc_oom(dev, a, nbytes, oom, err);
  }
  if (status != cudaSuccess) return qt_cuda_check(dev, status, "alloc", err);
  cuda_block *b = alloc_block_new(a);
  if (b == NULL) {
    if (cudaFree(mem) != cudaSuccess) (void)cudaGetLastError();
    if (oom != NULL) *oom = 1;
    return qt_errorf(err, "%s: out of host memory for the allocator", dev->name);
  }
  b->ptr = (char *)mem;
  b->size = segment;
  b->pool = (unsigned char)pool;
  a->reserved += (int64_t)segment;
  *out = b;
  return 0;
}

/* The allocation itself (a->lock held, device current). Finds the best free block of the
** request's pool, or a new one, and splits off what is not needed. */
static int alloc_take(qt_device *dev, qt_cuda_allocator *a, size_t nbytes, void **ptr,
                      int *oom, qt_err *err) {
  if (nbytes > ((size_t)1 << 62)) return alloc_oom(dev, a, nbytes, oom, err);
  int pool = CUDA_POOL_SMALL;
  size_t size = (nbytes + CUDA_SMALL_ROUND - 1) / CUDA_SMALL_ROUND * CUDA_SMALL_ROUND;
  if (nbytes > CUDA_SMALL_LIMIT) {
    size = (nbytes + CUDA_LARGE_ROUND - 1) / CUDA_LARGE_ROUND * CUDA_LARGE_ROUND;
    pool = size < CUDA_BIG_LIMIT ? CUDA_POOL_MID : CUDA_POOL_BIG;
  }

  cuda_block *b = alloc_find(a, pool, size, true);
  if (b != NULL) alloc_free_remove(a, b);
  else if (alloc_grow(dev, a, pool, size, nbytes, &b, oom, err) != 0) return -1;

  /* Split: the tail goes back to the free list (small-pool tails may be as small as
  ** 512 B; mid and big sizes are whole 2 MiB units, so any tail is worth keeping). */
  if (b->size > size) {
    cuda_block *rest = alloc_block_new(a);
    if (rest != NULL) {
      rest->ptr = b->ptr + size;
      rest->size = b->size - size;
      rest->pool = b->pool;
      rest->period = b->period;
      rest->prev = b;
      rest->next = b->next;
      if (b->next != NULL) b->next->prev = rest;
      b->next = rest;
      b->size = size;
      alloc_free_insert(a, rest);
    }
  }

  b->allocated = true;
  alloc_hash_insert(a, b);
  a->allocated += (int64_t)b->size;
  if (a->allocated > a->peak) a->peak = a->allocated;
  if (a->allocated > a->window_peak[0]) a->window_peak[0] = a->allocated;
  *ptr = b->ptr;
  return 0;
}

/* Back to the free list, merged with free neighbours (a->lock held; no CUDA call); false
** when ptr is no live block of a. Both
** neighbours leave their free lists before any link changes, so every list sees a block
** exactly as it was put in. */
static bool alloc_give(qt_cuda_allocator *a, void *ptr) {
  cuda_block *b = alloc_hash_take(a, ptr);
  if (b == NULL) return false;  /* not ours: ignore (free never fails) */
  b->allocated = false;
  a->allocated -= (int64_t)b->size;
  cuda_block *prev = b->prev, *next = b->next;
  if (prev != NULL && prev->allocated) prev = NULL;
  if (next != NULL && next->allocated) next = NULL;
  if (prev != NULL) alloc_free_remove(a, prev);
  if (next != NULL) alloc_free_remove(a, next);
  if (prev != NULL) {
    prev->size += b->size;
    prev->next = b->next;
    if (b->next != NULL) b->next->prev = prev;
    alloc_block_recycle(a, b);
    b = prev;
  }
  if (next != NULL) {
    b->size += next->size;
    b->next = next->next;
    if (next->next != NULL) next->next->prev = b;
    alloc_block_recycle(a, next);
  }
  b->period = a->period;
  alloc_free_insert(a, b);
  return true;
}

/* ---- the allocator as an object: the device's, and each CUDA graph pool's (cuda_graph.cu) */

extern "C" qt_cuda_allocator *qt_cuda_pool_allocator_new(void) {
  qt_cuda_allocator *a = qt_cuda_allocator_new();
  if (a != NULL) a->graph_pool = true;
  return a;
}

extern "C" int qt_cuda_allocator_take(qt_device *dev, qt_cuda_allocator *a, size_t nbytes,
                                      void **ptr, int *oom, qt_err *err) {
  pthread_mutex_lock(&a->lock);
  int status = alloc_take(dev, a, nbytes, ptr, oom, err);
  pthread_mutex_unlock(&a->lock);
  return status;
}

/* Whether ptr is a live block of a (a->lock held). */
static bool alloc_is_live(const qt_cuda_allocator *a, const void *ptr) {
  for (const cuda_block *b = a->hash[alloc_hash_slot(a, ptr)]; b != NULL; b = b->hash_next)
    if (b->ptr == (const char *)ptr) return true;
  return false;
}

extern "C" bool qt_cuda_allocator_holds(qt_cuda_allocator *a, const void *ptr) {
  pthread_mutex_lock(&a->lock);
  bool found = alloc_is_live(a, ptr);
  pthread_mutex_unlock(&a->lock);
  return found;
}

extern "C" bool qt_cuda_allocator_give(qt_cuda_allocator *a, void *ptr) {
  pthread_mutex_lock(&a->lock);
  bool found = alloc_give(a, ptr);
  pthread_mutex_unlock(&a->lock);
  return found;
}

extern "C" int qt_cuda_allocator_release(qt_device *dev, qt_cuda_allocator *a, qt_err *err) {
  pthread_mutex_lock(&a->lock);
  int status = alloc_release_cached(dev, a, "graph", err);
  pthread_mutex_unlock(&a->lock);
  return status;
}

extern "C" void qt_cuda_allocator_bytes(qt_cuda_allocator *a, int64_t *allocated,
                                        int64_t *reserved) {
  pthread_mutex_lock(&a->lock);
  *allocated = a->allocated;
  *reserved = a->reserved;
  pthread_mutex_unlock(&a->lock);
}

extern "C" void qt_cuda_allocator_delete(qt_cuda_allocator *a) {
  if (a == NULL) return;
  cuda_block *b;
  while ((b = a->spare) != NULL) {
    a->spare = b->hash_next;
    free(b);
  }
  free(a->hash);
  delete a->large_free[0];
  delete a->large_free[1];
  delete a->whole_free;
  pthread_mutex_destroy(&a->lock);
  free(a);
}

/* ---- the slots */

extern "C" int qt_cuda_alloc(qt_device *dev, size_t nbytes, void **ptr, int *oom, qt_err *err) {
  if (oom != NULL) *oom = 0;
  *ptr = NULL;
  if (nbytes == 0) return 0;
  if (qt_cuda_enter(dev, "alloc", err) != 0) return -1;
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  if (ctx->capture != NULL) return qt_cuda_graph_alloc(dev, nbytes, ptr, oom, err);
  return qt_cuda_allocator_take(dev, ctx->allocator, nbytes, ptr, oom, err);
}

/* The device's own blocks go back to its cache, except while a graph is being captured:
** the captured kernels may use them, so the graph holds them until it is freed. Blocks of
** the graphs' pools go back to their pool (cuda_graph.cu). */
extern "C" void qt_cuda_free(qt_device *dev, void *ptr, size_t nbytes) {
  (void)nbytes;
  if (ptr == NULL || dev == NULL) return;
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  qt_cuda_allocator *a = ctx->allocator;
  if (ctx->capture != NULL && qt_cuda_allocator_holds(a, ptr) && qt_cuda_graph_defer(dev, ptr))
    return;
  if (qt_cuda_allocator_give(a, ptr)) return;
  if (ctx->pools != NULL) qt_cuda_graph_pool_free(dev, ptr);
}

extern "C" int qt_cuda_scratch(qt_device *dev, size_t nbytes, void **ptr, qt_err *err) {
  int oom = 0;
  return qt_cuda_alloc(dev, nbytes, ptr, &oom, err);
}

extern "C" void qt_cuda_scratch_free(qt_device *dev, void *ptr, size_t nbytes) {
  qt_cuda_free(dev, ptr, nbytes);
}

extern "C" void qt_cuda_empty_cache(qt_device *dev) {
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  if (ctx->capture != NULL) return;   /* cudaFree would wait on the capturing stream */
  if (ctx->broken || qt_cuda_make_current(ctx->ordinal) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  qt_cuda_allocator *a = ctx->allocator;
  pthread_mutex_lock(&a->lock);
  (void)alloc_release_cached(dev, a, "empty_cache", NULL);
  pthread_mutex_unlock(&a->lock);
  qt_cuda_staging_release(ctx->staging);
}

extern "C" int qt_cuda_memory(qt_device *dev, qt_memory_stats *stats, qt_err *err) {
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  qt_cuda_allocator *a = ctx->allocator;
  pthread_mutex_lock(&a->lock);
  stats->allocated = a->allocated;
  stats->reserved = a->reserved;
  stats->peak = a->peak;
  pthread_mutex_unlock(&a->lock);
  int64_t pool_allocated = 0, pool_reserved = 0;
  qt_cuda_graph_pool_bytes(dev, &pool_allocated, &pool_reserved);
  stats->allocated += pool_allocated;
  stats->reserved += pool_reserved;
  stats->graph = pool_reserved;
  stats->total = 0;
  stats->free = 0;
  if (qt_cuda_enter(dev, "memory", err) != 0) return -1;
  if (ctx->capture != NULL) return 0;   /* no driver query mid-capture */
  size_t free_b = 0, total_b = 0;
  if (qt_cuda_check(dev, cudaMemGetInfo(&free_b, &total_b), "memory", err) != 0) return -1;
  stats->total = (int64_t)total_b;
  stats->free = (int64_t)free_b;
  return 0;
}
