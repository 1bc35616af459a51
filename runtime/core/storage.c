/*
** storage.c — the per-lua_State context and the storage lifecycle, below every op.
**
** A storage is made here (ops_storage_new: charged to its context, pacing the collector,
** retrying after an out-of-memory) and given back here (the last qt_storage_release, or
** t:free()'s qt_storage_free_data), which uncharges the context and drops the storage's
** reference on it; the last reference frees the context. Both counts are atomic, so a
** reference an embedder keeps may be released on any thread (qlua.h).
*/
#include "ops_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The GC soft limit a fresh context starts with: 1 GiB of live device bytes. The
** binding raises it after a collection that freed too little (ops.h, qt_ctx). */
#define OPS_DEFAULT_GC_LIMIT ((int64_t)1 << 30)
/* The default random seed (xorshift64*'s multiplier: any fixed non-zero value works). */
#define OPS_DEFAULT_SEED UINT64_C(0x2545F4914F6CDD1D)

/* ================================================================== context */

qt_ctx *qt_ctx_new(void) {
  qt_ctx *ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) return NULL;
  atomic_init(&ctx->refcount, 1);
  atomic_init(&ctx->gpu_live_bytes, 0);
  ctx->gpu_gc_limit = OPS_DEFAULT_GC_LIMIT;
  ctx->gc = NULL;
  ctx->gc_ud = NULL;
  atomic_init(&ctx->cpu_live_bytes, 0);
  ctx->cpu_gc_base = 0;
  ctx->gc_step = NULL;
  ctx->seed = OPS_DEFAULT_SEED;
  ctx->rng_offset = 0;
  ctx->allow_tf32 = false;
  ctx->allow_tf32_conv = true;
  ctx->cudnn_enabled = true;
  ctx->current_gpu = 0;
  return ctx;
}

/* Like qt_storage_retain / qt_storage_release (tensor.c): a relaxed increment by a holder,
** an acquire-release decrement, and only the one that drops the last reference frees. The
** last release may be a storage's, on whichever thread released that storage. */
void qt_ctx_retain(qt_ctx *ctx) {
  if (ctx != NULL) atomic_fetch_add_explicit(&ctx->refcount, 1, memory_order_relaxed);
}

void qt_ctx_release(qt_ctx *ctx) {
  if (ctx != NULL && atomic_fetch_sub_explicit(&ctx->refcount, 1, memory_order_acq_rel) == 1) {
    if (ctx->kernel_cache_free != NULL) ctx->kernel_cache_free(ctx->kernel_cache);
    free(ctx);
  }
}

/* ================================================================== storages */

/* A tensor's one reference: the lifecycle of the storages it points at lives here, so
** the shape math in tensor.c depends on nothing of this file's. */
void qt_tensor_init(qt_tensor *t) {
  memset(t, 0, sizeof *t);
  t->storage = NULL;
  t->dtype = QT_F32;
  t->ndim = 0;
}

void qt_tensor_release(qt_tensor *t) {
  if (t == NULL) return;
  qt_storage *s = t->storage;
  qt_tensor_init(t);
  qt_storage_release(s);
}

void qt_tensor_share(qt_tensor *dst, const qt_tensor *src) {
  *dst = *src;
  qt_storage_retain(dst->storage);
}


/* Retaining needs no ordering: the caller holds a reference, so the count is >= 1 and
** the storage cannot go away meanwhile (the usual refcount argument). */
void qt_storage_retain(qt_storage *s) {
  if (s != NULL) atomic_fetch_add_explicit(&s->refcount, 1, memory_order_relaxed);
}

/* Gives s's bytes back to whoever owns them (the embedder's release callback, or the
** device) and uncharges the owning state for device memory. Leaves s->data NULL. */
static void storage_give_back(qt_storage *s) {
  if (s->freed) return;
  if (s->release != NULL) {
    s->release(s->release_ud, s->data);
  } else if (s->device != NULL && s->device->iface != NULL && s->device->iface->free != NULL) {
    s->device->iface->free(s->device, s->data, s->nbytes);
  }
  if (s->owner != NULL && s->device != NULL && s->device->kind == QT_DEV_CUDA)
    atomic_fetch_sub(&s->owner->gpu_live_bytes, (int64_t)s->nbytes);
  else if (s->owner != NULL && s->device != NULL && s->device->kind == QT_DEV_CPU)
    atomic_fetch_sub_explicit(&s->owner->cpu_live_bytes, (int64_t)s->nbytes,
                              memory_order_relaxed);
  s->data = NULL;
  s->freed = true;
}

/* The last reference frees the bytes (unless t:free() already did), then drops the
** storage's reference on its owning state, then the struct. */
qt_storage *qt_storage_wrap(struct qt_device *dev, void *data, size_t nbytes,
                            void (*release)(void *release_ud, void *data), void *release_ud) {
  qt_storage *s = (qt_storage *)calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  atomic_init(&s->refcount, 1);
  s->device = dev;
  s->data = data;
  s->nbytes = nbytes;
  s->owner = NULL;  /* not the runtime's memory: charged to no state */
  s->release = release;
  s->release_ud = release_ud;
  return s;
}

/* The decrement is acquire-release: every holder's release publishes its uses of the
** storage (release), and the one that sees the count reach 0, the only one that frees,
** acquires them all before giving the bytes back and freeing the struct, whichever
** thread it runs on. */
void qt_storage_release(qt_storage *s) {
  if (s == NULL) return;
  if (atomic_fetch_sub_explicit(&s->refcount, 1, memory_order_acq_rel) > 1) return;
  storage_give_back(s);
  if (s->owner != NULL) qt_ctx_release(s->owner);
  free(s);
}

void qt_storage_free_data(qt_storage *s) {
  if (s != NULL) storage_give_back(s);
}

/* Bytes as people read them: "512 bytes", "1.50 MiB", "4.00 GiB". */
static const char *ops_human_bytes(double n, char *buf, size_t len) {
  static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
  if (n < 1024.0) {
    snprintf(buf, len, "%.0f bytes", n);
    return buf;
  }
  int u = -1;
  while (n >= 1024.0 && u < 5) n /= 1024.0, u++;
  snprintf(buf, len, "%.2f %s", n, units[u]);
  return buf;
}

/* ================================================================== allocation */

/* The out-of-memory message: the op, the device, what was asked, and what the device
** holds: "empty: gpu:0: out of memory allocating 4.00 GiB (4294967296 bytes asked;
** 130.00 GiB allocated, 131.00 GiB reserved on the device)". */
static int ops_oom_error(qt_ctx *ctx, const char *op, qt_device *dev, size_t nbytes) {
  char asked[32], allocated[32], reserved[32];
  ops_human_bytes((double)nbytes, asked, sizeof asked);
  qt_memory_stats stats;
  qt_err ignored;
  if (dev->iface->memory != NULL && dev->iface->memory(dev, &stats, &ignored) == 0) {
    return qt_errorf(&ctx->err,
                     "%s: %s: out of memory allocating %s (%zu bytes asked; %s allocated, %s "
                     "reserved on the device)",
                     op, dev->name, asked, nbytes,
                     ops_human_bytes((double)stats.allocated, allocated, sizeof allocated),
                     ops_human_bytes((double)stats.reserved, reserved, sizeof reserved));
  }
  return qt_errorf(&ctx->err, "%s: %s: out of memory allocating %s (%zu bytes asked)", op,
                   dev->name, asked, nbytes);
}

/* A device's own message ("gpu:0: CUDA error: ...") behind the op's name, so every
** message starts with the function the user called. */
int ops_prefix_error(qt_ctx *ctx, const char *op) {
  size_t n = strlen(op);
  if (strncmp(ctx->err.msg, op, n) == 0 && ctx->err.msg[n] == ':') return -1;
  char slot[QT_ERRLEN];
  snprintf(slot, sizeof slot, "%s", ctx->err.msg);
  return qt_errorf(&ctx->err, "%s: %s", op, slot);
}

/* Host memory drives the collector too: an 8 MiB CPU tensor is a ~300-byte userdata to
** Lua, so dropped tensors would pile up. The steps below (ops_cpu_gc_step) take them back
** as they go; behind them, a soft limit runs full collections. It reads the CPU device's
** own (process-wide) `allocated` count against a process-wide limit paced like the
** binding paces the GPU one: after a collection, max(floor, 2 x what is still allocated).
** Small allocations (< 4 KiB) skip that check: their userdata already weighs on Lua's GC. */
#define OPS_CPU_GC_FLOOR ((int64_t)256 << 20)
#define OPS_CPU_GC_MIN_BYTES 4096
_Atomic int64_t ops_cpu_gc_limit = OPS_CPU_GC_FLOOR;

static void ops_cpu_gc_pace(qt_ctx *ctx, size_t nbytes) {
  if (ctx->gc == NULL || nbytes < OPS_CPU_GC_MIN_BYTES) return;
  /* allocated + nbytes <= limit, without overflowing for a request near 2^63 bytes
  ** (the allocation then fails; the pacing must not overflow first) */
  if (nbytes <= (size_t)INT64_MAX &&
      qt_cpu_allocated() <= atomic_load(&ops_cpu_gc_limit) - (int64_t)nbytes)
    return;
  ctx->gc(ctx->gc_ud, 0);
  int64_t allocated = qt_cpu_allocated();
  int64_t limit = allocated > INT64_MAX / 2 ? INT64_MAX : 2 * allocated;
  atomic_store(&ops_cpu_gc_limit, limit < OPS_CPU_GC_FLOOR ? OPS_CPU_GC_FLOOR : limit);
}

/* Host bytes also step Lua's incremental collector, so that results left to it come back
** to the CPU block cache (warm, their pages already mapped) within a few allocations
** instead of after hundreds of MiB. The measure is this state's net growth in CPU bytes
** since the last step, checked before each CPU allocation, so that the previous
** allocations are paid for before the block cache is asked: a program that frees (or
** closes) its results never grows and never steps; one that drops them steps once per
** OPS_CPU_GC_STEP of garbage or more. The binding decides how much collector work a byte
** is worth (l_state.c). Lower bytes (frees, or a collection Lua ran by itself) move the
** base down with them, so only growth from there counts. */
#define OPS_CPU_GC_STEP ((int64_t)256 << 10)

static void ops_cpu_gc_step(qt_ctx *ctx) {
  if (ctx->gc_step == NULL) return;
  int64_t live = atomic_load_explicit(&ctx->cpu_live_bytes, memory_order_relaxed);
  int64_t growth = live - ctx->cpu_gc_base;
  if (growth < OPS_CPU_GC_STEP) {
    if (growth < 0) ctx->cpu_gc_base = live;
    return;
  }
  ctx->gc_step(ctx->gc_ud, growth);
  ctx->cpu_gc_base = atomic_load_explicit(&ctx->cpu_live_bytes, memory_order_relaxed);
}

/* The one way storages are made. GPU bytes are counted in ctx->gpu_live_bytes, and
** crossing the soft limit asks the binding for a collection first (gc(ud, 0)): the Lua
** GC does not see device memory by itself (host bytes: ctx->cpu_live_bytes,
** ops_cpu_gc_step and ops_cpu_gc_pace). An out-of-memory empties the device's cache,
** asks for a full collection (gc(ud, 1)) and retries once. The storage holds a reference
** on ctx (storage->owner); the last qt_storage_release (above) gives it and the byte count back. */
int ops_storage_new(qt_ctx *ctx, const char *op, qt_device *dev, size_t nbytes,
                           qt_storage **out) {
  *out = NULL;
  if (dev->iface->alloc == NULL)
    return qt_errorf(&ctx->err, "%s: not supported on %s", op, dev->name);
  bool gpu = dev->kind == QT_DEV_CUDA;
  if (gpu && ctx->gc != NULL &&
      (nbytes > (size_t)INT64_MAX ||
       atomic_load(&ctx->gpu_live_bytes) > ctx->gpu_gc_limit - (int64_t)nbytes))
    ctx->gc(ctx->gc_ud, 0);
  if (dev->kind == QT_DEV_CPU) {
    ops_cpu_gc_step(ctx);
    ops_cpu_gc_pace(ctx, nbytes);
  }

  void *data = NULL;
  int oom = 0;
  if (dev->iface->alloc(dev, nbytes, &data, &oom, &ctx->err) != 0) {
    if (!oom) return ops_prefix_error(ctx, op);
    if (dev->iface->empty_cache != NULL) dev->iface->empty_cache(dev);
    if (ctx->gc != NULL) ctx->gc(ctx->gc_ud, 1);
    data = NULL;
    oom = 0;
    if (dev->iface->alloc(dev, nbytes, &data, &oom, &ctx->err) != 0)
      return oom ? ops_oom_error(ctx, op, dev, nbytes) : ops_prefix_error(ctx, op);
  }

  qt_storage *s = calloc(1, sizeof *s);
  if (s == NULL) {
    if (dev->iface->free != NULL) dev->iface->free(dev, data, nbytes);
    return qt_errorf(&ctx->err, "%s: out of host memory", op);
  }
  s->refcount = 1;
  s->freed = false;
  s->device = dev;
  s->data = data;
  s->nbytes = nbytes;
  s->owner = ctx;
  qt_ctx_retain(ctx);
  if (gpu) atomic_fetch_add(&ctx->gpu_live_bytes, (int64_t)nbytes);
  else if (dev->kind == QT_DEV_CPU)
    atomic_fetch_add_explicit(&ctx->cpu_live_bytes, (int64_t)nbytes, memory_order_relaxed);
  *out = s;
  return 0;
}
