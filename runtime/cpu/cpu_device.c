/*
** cpu_device.c — the CPU device's memory and its slot table: the allocator and its
** counters, upload/download/sync (plain memory moves on the host), and qt_cpu_iface,
** which gathers the op families' slots (one file each, listed in cpu_internal.h).
**
** Memory: 64-byte aligned host blocks with a 64-byte header in front that says which
** allocator the block came from (plain aligned malloc, or pinned memory from the CUDA
** side when GPUs are present, so transfers run at the PCIe limit).
**
** The block cache: a freed malloc block of 64 KiB or more is kept, by size class (four
** per power of two), and handed to the next request of its class instead of going back
** to the kernel: a result left to the garbage collector then reuses warm pages instead of
** faulting in fresh ones (16384 faults for a 64 MiB tensor). The cache is bounded (a
** quarter of the machine's memory, at most 4 GiB; QLUA_CPU_CACHE=bytes sets it, 0 turns
** it off, as the sanitizer builds do by default, since reuse hides use-after-free), is
** emptied by qlua.empty_cache() and whenever an allocation fails (then retried once), and
** is not counted as allocated: GC pacing sees live bytes only; qlua.memory() reports the
** cached bytes as reserved. It is shared by every thread, under a mutex (a storage may be
** released on another thread, qlua.h).
*/
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cpu/cpu.h"
#include "cpu/cpu_internal.h"
#include "device.h"
#include "tensor.h"

/* ====================================================================== memory */

#define CPU_ALIGN 64
#define CPU_HEADER 64                 /* bytes in front of every block; keeps alignment */
#define CPU_PINNED_MIN (64 * 1024)    /* smaller blocks never go to the pinned allocator */
#define CPU_BLOCK_MAGIC 0x71756c61626c6b31ull
/* Blocks from 4 MiB up are 2 MiB-aligned and asked to be backed by transparent huge pages:
** a fresh 64 MiB result otherwise costs 16384 page faults, which measured here as 65 ms of
** a 76 ms a + b on 4096^2 float32 (12 ms with huge pages; NumPy does the same). */
#define CPU_HUGE_MIN ((size_t)4 << 20)
#define CPU_HUGE_ALIGN ((size_t)2 << 20)

enum { CPU_FROM_MALLOC = 1, CPU_FROM_PINNED = 2 };

typedef struct cpu_block_header {
  uint64_t magic;
  uint64_t source;   /* CPU_FROM_MALLOC or CPU_FROM_PINNED */
  uint64_t total;    /* bytes of the whole block, header included */
  uint64_t nbytes;   /* what the caller asked for */
} cpu_block_header;

static _Atomic int64_t cpu_allocated = 0;
static _Atomic int64_t cpu_peak = 0;

/* ---------------------------------------------------------------- the block cache */

#define CPU_CACHE_MIN ((size_t)64 << 10)  /* smaller blocks: malloc's own bins are fine */
#define CPU_CACHE_CLASSES 256

typedef struct cpu_cached {
  struct cpu_cached *next;
} cpu_cached;

static struct {
  pthread_mutex_t lock;
  pthread_once_t once;
  size_t cap;                            /* most bytes kept */
  size_t held;                           /* bytes kept now */
  cpu_cached *bins[CPU_CACHE_CLASSES];   /* block bases by class */
} cpu_cache = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_ONCE_INIT, 0, 0, { NULL } };

static void cpu_cache_init(void) {
  size_t cap = 0;
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  long page = sysconf(_SC_PAGESIZE), pages = sysconf(_SC_PHYS_PAGES);
  if (page > 0 && pages > 0) cap = (size_t)page * (size_t)pages / 4;
  if (cap > ((size_t)4 << 30)) cap = (size_t)4 << 30;
  struct rlimit as;  /* an address-space limit bounds it too */
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY && cap > as.rlim_cur / 4)
    cap = (size_t)(as.rlim_cur / 4);
#endif
  const char *env = getenv("QLUA_CPU_CACHE");
  if (env != NULL && *env != '\0') {
    char *end = NULL;
    unsigned long long v = strtoull(env, &end, 10);
    if (end != NULL && *end == '\0') cap = (size_t)v;
  }
  cpu_cache.cap = cap;
}

/* The class of a block of `total` bytes (total >= CPU_CACHE_MIN): four classes per power of
** two; *size is the class's block size (what is allocated for it), at least total. */
static int cpu_cache_class(size_t total, size_t *size) {
  int octave = 63 - __builtin_clzll((unsigned long long)total);  /* 2^octave <= total */
  size_t quarter = (size_t)1 << (octave - 2);
  size_t steps = (total + quarter - 1) / quarter;                /* 4 .. 8 quarters */
  if (steps == 8) { octave++; quarter <<= 1; steps = 4; }
  *size = steps * quarter;
  int cls = (octave - 16) * 4 + (int)(steps - 4);
  return cls >= 0 && cls < CPU_CACHE_CLASSES ? cls : -1;
}

/* A cached block of class cls, or NULL. */
static void *cpu_cache_take(int cls, size_t size) {
  pthread_mutex_lock(&cpu_cache.lock);
  cpu_cached *b = cpu_cache.bins[cls];
  if (b != NULL) {
    cpu_cache.bins[cls] = b->next;
    cpu_cache.held -= size;
  }
  pthread_mutex_unlock(&cpu_cache.lock);
  return b;
}

/* Keeps the block if the cache has room; false: the caller frees it. */
static bool cpu_cache_keep(void *base, size_t size) {
  int cls;
  size_t class_size;
  if (size < CPU_CACHE_MIN || (cls = cpu_cache_class(size, &class_size)) < 0 || class_size != size)
    return false;
  bool kept = false;
  pthread_mutex_lock(&cpu_cache.lock);
  if (cpu_cache.held + size <= cpu_cache.cap) {
    cpu_cached *b = (cpu_cached *)base;
    b->next = cpu_cache.bins[cls];
    cpu_cache.bins[cls] = b;
    cpu_cache.held += size;
    kept = true;
  }
  pthread_mutex_unlock(&cpu_cache.lock);
  return kept;
}

void cpu_cache_release(void);  /* cpu_internal.h */

static void cpu_cache_empty(void) {
  pthread_mutex_lock(&cpu_cache.lock);
  for (int c = 0; c < CPU_CACHE_CLASSES; c++) {
    cpu_cached *b = cpu_cache.bins[c];
    while (b != NULL) {
      cpu_cached *next = b->next;
      free(b);
      b = next;
    }
    cpu_cache.bins[c] = NULL;
  }
  cpu_cache.held = 0;
  pthread_mutex_unlock(&cpu_cache.lock);
}

/* For the other files of the device: memory is short (matmul's room check). */
void cpu_cache_release(void) { cpu_cache_empty(); }

static size_t cpu_cache_held(void) {
  pthread_mutex_lock(&cpu_cache.lock);
  size_t held = cpu_cache.held;
  pthread_mutex_unlock(&cpu_cache.lock);
  return held;
}

/* A fresh malloc block of `total` bytes: 2 MiB-aligned and asked for huge pages from 4 MiB
** up, else 64-byte aligned. NULL when out of memory. */
static void *cpu_block_new(size_t total) {
  void *base = NULL;
  if (total >= CPU_HUGE_MIN) {
    /* posix_memalign: C11's aligned_alloc wants the size a multiple of the alignment */
    if (posix_memalign(&base, CPU_HUGE_ALIGN, total) != 0) base = NULL;
#ifdef MADV_HUGEPAGE
    if (base != NULL) (void)madvise(base, total, MADV_HUGEPAGE);  /* advice: failure is fine */
#endif
  }
  if (base == NULL) base = aligned_alloc(CPU_ALIGN, total);
  return base;
}

/* Page-locked memory from the registry (the GPUs' host allocator), or NULL. */
static const qt_host_allocator *cpu_host_allocator = NULL;

void qt_cpu_set_host_allocator(const qt_host_allocator *allocator) {
  cpu_host_allocator = allocator;
}

static void cpu_count_alloc(int64_t nbytes) {
  int64_t now = atomic_fetch_add(&cpu_allocated, nbytes) + nbytes;
  int64_t peak = atomic_load(&cpu_peak);
  while (now > peak && !atomic_compare_exchange_weak(&cpu_peak, &peak, now)) {
  }
}

/* The block is [header | data]; data is what the core sees. A zero-byte request still
** gets a (header-only) block, so `free` has nothing special to handle. */
static int cpu_alloc(qt_device *dev, size_t nbytes, void **ptr, int *oom, qt_err *err) {
  (void)dev;
  *ptr = NULL;
  if (oom) *oom = 0;
  size_t total;
  if (nbytes > SIZE_MAX - CPU_HEADER - CPU_ALIGN) {
    if (oom) *oom = 1;
    return qt_errorf(err, "cpu: out of memory allocating %zu bytes", nbytes);
  }
  total = (CPU_HEADER + nbytes + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN;
  void *base = NULL;
  uint64_t source = CPU_FROM_MALLOC;
  const qt_host_allocator *host = cpu_host_allocator;
  if (host != NULL && nbytes >= CPU_PINNED_MIN && host->alloc(total, &base) == 0 &&
      base != NULL && ((uintptr_t)base % CPU_ALIGN) == 0)
    source = CPU_FROM_PINNED;
  else if (base != NULL) {
    host->free(base, total);  /* misaligned pinned block: not usable here */
    base = NULL;
  }
  if (base == NULL) {
    pthread_once(&cpu_cache.once, cpu_cache_init);
    int cls = -1;
    size_t class_size = 0;
    if (cpu_cache.cap > 0 && total >= CPU_CACHE_MIN &&
        (cls = cpu_cache_class(total, &class_size)) >= 0) {
      total = class_size;  /* the block is its class's size, so the cache can reuse it */
      base = cpu_cache_take(cls, total);
    }
    if (base == NULL) base = cpu_block_new(total);
    if (base == NULL && cpu_cache_held() > 0) {  /* memory pressure: give the cache back */
      cpu_cache_empty();
      base = cpu_block_new(total);
    }
  }
  if (base == NULL) {
    if (oom) *oom = 1;
    return qt_errorf(err, "cpu: out of memory allocating %zu bytes", nbytes);
  }
  cpu_block_header *h = (cpu_block_header *)base;
  h->magic = CPU_BLOCK_MAGIC;
  h->source = source;
  h->total = total;
  h->nbytes = nbytes;
  cpu_count_alloc((int64_t)nbytes);
  *ptr = (char *)base + CPU_HEADER;
  return 0;
}

static void cpu_free(qt_device *dev, void *ptr, size_t nbytes) {
  (void)dev;
  (void)nbytes;  /* the header knows; a mismatch must not corrupt the counters */
  if (ptr == NULL) return;
  cpu_block_header *h = (cpu_block_header *)((char *)ptr - CPU_HEADER);
  if (h->magic != CPU_BLOCK_MAGIC) return;  /* not ours: leak rather than corrupt */
  h->magic = 0;
  atomic_fetch_sub(&cpu_allocated, (int64_t)h->nbytes);
  if (h->source == CPU_FROM_PINNED) {
    cpu_host_allocator->free(h, (size_t)h->total);
    return;
  }
  if (!cpu_cache_keep(h, (size_t)h->total)) free(h);
}

static int cpu_sync(qt_device *dev, qt_err *err) {
  (void)dev;
  (void)err;
  return 0;
}

int64_t qt_cpu_device_allocated(void) { return atomic_load(&cpu_allocated); }

static int cpu_memory(qt_device *dev, qt_memory_stats *stats, qt_err *err) {
  (void)dev;
  (void)err;
  long page = sysconf(_SC_PAGESIZE);
  long pages = sysconf(_SC_PHYS_PAGES);
  long avail = sysconf(_SC_AVPHYS_PAGES);
  stats->allocated = atomic_load(&cpu_allocated);
  stats->reserved = stats->allocated + (int64_t)cpu_cache_held();
  stats->peak = atomic_load(&cpu_peak);
  stats->total = (page > 0 && pages > 0) ? (int64_t)page * pages : 0;
  stats->free = (page > 0 && avail > 0) ? (int64_t)page * avail : 0;
  return 0;
}

/* The CPU's convolutions are im2col and OpenBLAS (cpu_conv.c). */
static int cpu_describe(qt_device *dev, const char *family, bool use_cudnn, char *buf, size_t len,
                        qt_err *err) {
  (void)dev;
  (void)use_cudnn;
  (void)err;
  snprintf(buf, len, "%s", strcmp(family, "conv") == 0   ? "im2col + OpenBLAS"
                           : strcmp(family, "dist") == 0 ? "TCP through rank 0"
                                                         : "");
  return 0;
}

static void cpu_empty_cache(qt_device *dev) {
  (void)dev;
  cpu_cache_empty();
  if (cpu_host_allocator != NULL) cpu_host_allocator->empty_cache();
}

static int cpu_upload(qt_device *dev, void *dst, const void *host_src, size_t nbytes, qt_err *err) {
  (void)dev;
  (void)err;
  if (nbytes > 0 && dst != host_src) memmove(dst, host_src, nbytes);
  return 0;
}

static int cpu_download(qt_device *dev, void *host_dst, const void *src, size_t nbytes,
                        qt_err *err) {
  (void)dev;
  (void)err;
  if (nbytes > 0 && host_dst != src) memmove(host_dst, src, nbytes);
  return 0;
}

/* ====================================================================== the table */

/* The slots with float16/bfloat16 code of their own (elementwise math in float32; the
** index and mask slots move elements by size, and store numbers through qt_scalar_store
** or qt_scalar_as, which round once); the registry widens the rest (device.h). */
#define CPU_HALF_NATIVE                                                            \
  (QT_SLOT_BIT(QT_SLOT_BINARY) | QT_SLOT_BIT(QT_SLOT_BINARY_SCALAR) |               \
   QT_SLOT_BIT(QT_SLOT_UNARY) | \
   QT_SLOT_BIT(QT_SLOT_GATHER) | QT_SLOT_BIT(QT_SLOT_INDEX_SELECT) | QT_SLOT_BIT(QT_SLOT_TAKE) | \
   QT_SLOT_BIT(QT_SLOT_SCATTER) | QT_SLOT_BIT(QT_SLOT_INDEX_FILL) |                   \
   QT_SLOT_BIT(QT_SLOT_INDEX_COPY) | QT_SLOT_BIT(QT_SLOT_WHERE) |                     \
   QT_SLOT_BIT(QT_SLOT_MASKED_SELECT))

/* The threads (cpu.h): the pool's, and OpenBLAS's with it. */
int qt_cpu_set_threads(int n) {
  n = cpu_pool_set_threads(n);
  cpu_blas_set_threads(n);
  return n;
}

static const qt_device_iface cpu_iface = {
  .alloc = cpu_alloc,
  .free = cpu_free,
  .sync = cpu_sync,
  .memory = cpu_memory,
  .empty_cache = cpu_empty_cache,
  .describe = cpu_describe,
  .comm_open = cpu_comm_open,
  .comm_close = cpu_comm_close,
  .collective = cpu_collective,
  .work_wait = cpu_work_wait,
  .upload = cpu_upload,
  .download = cpu_download,
  .copy = cpu_copy,
  .fill = cpu_fill,
  .binary = cpu_binary,
  .binary_scalar = cpu_binary_scalar,
  .unary = cpu_unary,
  .reduce = cpu_reduce,
  .gather = cpu_gather,
  .index_select = cpu_index_select,
  .take = cpu_take,
  .scatter = cpu_scatter,
  .index_add = cpu_index_add,
  .scatter_add = cpu_scatter_add,
  .index_fill = cpu_index_fill,
  .index_copy = cpu_index_copy,
  .where = cpu_where,
  .masked_select = cpu_masked_select,
  .nonzero = cpu_nonzero,
  .matmul = cpu_matmul,
  .random = cpu_random,
  .scan = cpu_scan,
  .softmax = cpu_softmax,
  .sort = cpu_sort,
  .topk = cpu_topk,
  .unique = cpu_unique,
  .bincount = cpu_bincount,
  .histc = cpu_histc,
  .searchsorted = cpu_searchsorted,
  .conv = cpu_conv,
  .optim_step = cpu_optim_step,
  .norm = cpu_norm,
  .pool2d = cpu_pool2d,
  .attention = cpu_attention,
  /* code the user brings runs on GPUs only: its slots stay NULL, and the core says so */
  .half_native = CPU_HALF_NATIVE,
};

const qt_device_iface *qt_cpu_iface(void) { return &cpu_iface; }
