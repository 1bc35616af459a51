/*
** cuda_graph.cu — CUDA graphs: the graph_begin, graph_end, graph_launch and graph_free slots
** (runtime/core/ops_graph.c calls them for qlua.graph), over the runtime's stream capture
** (cudaStreamBeginCapture on the device's one stream, cudaGraphInstantiate, cudaGraphLaunch).
**
** Memory. While a capture is under way (ctx->capture), every allocation of the device comes
** from the capturing graph's pool: an allocator of its own (cuda_alloc.cu's, made with
** qt_cuda_pool_allocator_new), whose segments nothing else is handed while the pool lives,
** so a replay may write what the capture allocated even after the Lua objects are gone.
** Blocks freed during the capture go back to the pool and are reused by the rest of the
** capture, in stream order, which is the graph's order too. Graphs may share a pool (the
** share argument of graph_begin). A pool lives while a graph uses it or a block of it is
** live (a graph's outputs outlive the graph as tensors): its free segments go back to the
** driver when its last graph is freed, and the whole pool when its last block is.
** Blocks of the device's own cache freed during a capture (a finalizer ran, say) may be
** read or written by the captured kernels, so the graph holds them until it is freed.
**
** What waits for the stream cannot be captured: the stream's synchronisation fails there
** and invalidates the capture. sync, upload and download refuse first (cuda_device.cu,
** cuda_transfer.cu; the core refuses before them, naming the op), empty_cache does
** nothing, and the pools never trim. The capture runs in thread-local mode, so a call of
** this thread that is unsafe during capture (cudaMalloc, a library's lazy set-up) fails
** clearly instead of silently; the pools take their segments in relaxed mode.
**
** Random numbers. Each graph has a device slot of two uint64 (seed, offset) in its pool;
** the random kernels captured in it read the slot and add their own counter offset (the
** core counts those from the capture's start), so every replay draws the numbers of the
** generator's state at its launch. graph_launch writes the slot with a one-thread kernel
** queued before the graph, when the state differs from the last one written.
**
** Hand-written: no library manages capture pools; the CUDA runtime does the rest.
*/
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "cuda_internal.h"

struct qt_cuda_pool {
  struct qt_cuda_allocator *a;
  int graphs;                 /* graphs using it, capturing or instantiated */
  struct qt_cuda_pool *next;  /* the device's pools (ctx->pools) */
};

struct qt_cuda_graph {
  struct qt_cuda_pool *pool;
  cudaGraphExec_t exec;       /* NULL until graph_end instantiates it */
  uint64_t *rng;              /* device: seed, offset (16 bytes of the pool) */
  uint64_t rng_seed, rng_offset;
  bool rng_written;           /* rng holds (rng_seed, rng_offset) */
  void **deferred;            /* the device cache's blocks freed during the capture */
  size_t ndeferred, cap;
  qt_device *dev;
  struct qt_cuda_graph *next_zombie;   /* freed during another graph's capture */
};

/* Graphs freed while another graph was being captured (a finalizer ran): destroying an
** executable graph and trimming its pool wait for the stream, so they are freed when that
** capture ends. Guarded by graph_lock. */
static qt_cuda_graph *graph_zombies = NULL;

/* Guards every device's pool list, the pools' graph counts and the graphs' deferred lists
** (frees may come from any thread). Never held across a CUDA call that waits. */
static pthread_mutex_t graph_lock = PTHREAD_MUTEX_INITIALIZER;

__global__ void graph_set_rng(uint64_t *slot, uint64_t seed, uint64_t offset) {
  slot[0] = seed;
  slot[1] = offset;
}

/* A pool with no graph: its free segments back to the driver (graph_lock not held; never
** while a capture is under way, since the release waits on the stream). */
static void graph_pool_trim(qt_device *dev, qt_cuda_pool *p) {
  qt_err ignored;
  (void)qt_cuda_allocator_release(dev, p->a, &ignored);
}

/* Frees the pools that no graph uses and that hold no live block, and trims those that
** no graph uses; skipped while a capture is under way. */
static void graph_sweep(qt_device *dev) {
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  if (ctx->capture != NULL) return;
  for (;;) {
    qt_cuda_pool *victim = NULL;
    pthread_mutex_lock(&graph_lock);
    for (qt_cuda_pool **link = &ctx->pools; *link != NULL; link = &(*link)->next) {
      qt_cuda_pool *p = *link;
      if (p->graphs > 0) continue;
      int64_t allocated, reserved;
      qt_cuda_allocator_bytes(p->a, &allocated, &reserved);
      if (allocated == 0) {
        *link = p->next;
        victim = p;
        break;
      }
    }
    pthread_mutex_unlock(&graph_lock);
    if (victim == NULL) break;
    graph_pool_trim(dev, victim);
    int64_t allocated, reserved;
    qt_cuda_allocator_bytes(victim->a, &allocated, &reserved);
    if (reserved == 0) {
      qt_cuda_allocator_delete(victim->a);
      free(victim);
    } else {
      /* a cudaFree failed: keep the pool listed (its memory is still the driver's) */
      pthread_mutex_lock(&graph_lock);
      victim->next = ctx->pools;
      ctx->pools = victim;
      pthread_mutex_unlock(&graph_lock);
      break;
    }
  }
}

static void graph_free_now(qt_device *dev, qt_cuda_graph *g);

/* Frees the graphs of dev that waited for a capture to end (graph_lock not held). */
static void graph_bury(qt_device *dev) {
  for (;;) {
    qt_cuda_graph *g = NULL;
    pthread_mutex_lock(&graph_lock);
    for (qt_cuda_graph **link = &graph_zombies; *link != NULL; link = &(*link)->next_zombie)
      if ((*link)->dev == dev) {
        g = *link;
        *link = g->next_zombie;
        break;
      }
    pthread_mutex_unlock(&graph_lock);
    if (g == NULL) return;
    graph_free_now(dev, g);
  }
}

/* Drops g's use of its pool and gives back what g holds (graph_lock not held). */
static void graph_release(qt_device *dev, qt_cuda_graph *g) {
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  for (size_t i = 0; i < g->ndeferred; i++) (void)qt_cuda_allocator_give(ctx->allocator, g->deferred[i]);
  free(g->deferred);
  if (g->rng != NULL) (void)qt_cuda_allocator_give(g->pool->a, g->rng);
  pthread_mutex_lock(&graph_lock);
  int left = --g->pool->graphs;
  pthread_mutex_unlock(&graph_lock);
  if (left == 0 && ctx->capture == NULL) {
    int64_t allocated, reserved;
    qt_cuda_allocator_bytes(g->pool->a, &allocated, &reserved);
    if (allocated > 0) graph_pool_trim(dev, g->pool);   /* outputs still live: keep theirs */
  }
  free(g);
  graph_sweep(dev);
}

extern "C" int qt_cuda_graph_begin(qt_device *dev, void *share, void **graph, qt_err *err) {
  const char *op = "graph";
  *graph = NULL;
  if (qt_cuda_enter(dev, op, err) != 0) return -1;
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  if (ctx->capture != NULL)
    return qt_errorf(err, "%s: a capture is already under way on %s", op, dev->name);
  qt_cuda_graph *g = (qt_cuda_graph *)calloc(1, sizeof *g);
  if (g == NULL) return qt_errorf(err, "%s: out of host memory", op);
  qt_cuda_pool *pool = share != NULL ? ((qt_cuda_graph *)share)->pool : NULL;
  if (pool == NULL) {
    pool = (qt_cuda_pool *)calloc(1, sizeof *pool);
    if (pool != NULL) pool->a = qt_cuda_pool_allocator_new();
    if (pool == NULL || pool->a == NULL) {
      free(pool);
      free(g);
      return qt_errorf(err, "%s: out of host memory", op);
    }
    pthread_mutex_lock(&graph_lock);
    pool->next = ctx->pools;
    ctx->pools = pool;
    pthread_mutex_unlock(&graph_lock);
  }
  pthread_mutex_lock(&graph_lock);
  pool->graphs++;
  pthread_mutex_unlock(&graph_lock);
  g->pool = pool;
  g->dev = dev;
  int oom = 0;
  void *slot = NULL;
  if (qt_cuda_allocator_take(dev, pool->a, 2 * sizeof(uint64_t), &slot, &oom, err) != 0) {
    graph_release(dev, g);
    return -1;
  }
  g->rng = (uint64_t *)slot;
  cudaError_t status = cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal);
  if (status != cudaSuccess) {
    qt_cuda_check(dev, status, op, err);
    graph_release(dev, g);
    return -1;
  }
  ctx->capture = g;
  ctx->capture_rng = g->rng;
  *graph = g;
  return 0;
}

extern "C" int qt_cuda_graph_end(qt_device *dev, void *graph, bool keep, qt_err *err) {
  const char *op = "graph";
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  qt_cuda_graph *g = (qt_cuda_graph *)graph;
  if (g == NULL || ctx->capture != g)
    return qt_errorf(err, "%s: no capture of this graph is under way on %s", op, dev->name);
  (void)qt_cuda_make_current(ctx->ordinal);
  cudaGraph_t cg = NULL;
  cudaError_t status = cudaStreamEndCapture(ctx->stream, &cg);
  ctx->capture = NULL;
  ctx->capture_rng = NULL;
  if (status == cudaSuccess && keep) {
    status = cudaGraphInstantiate(&g->exec, cg, 0);
    if (status == cudaSuccess) (void)cudaGraphUpload(g->exec, ctx->stream);
  }
  if (cg != NULL) (void)cudaGraphDestroy(cg);
  if (!keep || status != cudaSuccess) {
    (void)cudaGetLastError();
    if (g->exec != NULL) (void)cudaGraphExecDestroy(g->exec);
    g->exec = NULL;
    graph_release(dev, g);   /* nothing of it ran: its deferred blocks are free again */
    graph_bury(dev);
    if (!keep) return 0;
    if (status == cudaErrorStreamCaptureInvalidated)
      return qt_errorf(err, "%s: the capture on %s was invalidated (an op in it waited for "
                       "the GPU or used the host)", op, dev->name);
    return qt_errorf(err, "%s: cannot instantiate the captured graph: %s (%s)", op,
                     cudaGetErrorString(status), cudaGetErrorName(status));
  }
  graph_bury(dev);
  return 0;
}

extern "C" int qt_cuda_graph_launch(qt_device *dev, void *graph, uint64_t seed,
                                    uint64_t offset, qt_err *err) {
  const char *op = "graph";
  qt_cuda_graph *g = (qt_cuda_graph *)graph;
  if (qt_cuda_enter(dev, op, err) != 0) return -1;
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  if (ctx->capture != NULL)
    return qt_errorf(err, "%s: cannot replay a graph while a capture is under way on %s", op,
                     dev->name);
  if (g == NULL || g->exec == NULL) return qt_errorf(err, "%s: the graph was not captured", op);
  if (!g->rng_written || g->rng_seed != seed || g->rng_offset != offset) {
    graph_set_rng<<<1, 1, 0, ctx->stream>>>(g->rng, seed, offset);
    if (qt_cuda_check_launch(dev, op, err) != 0) return -1;
    g->rng_seed = seed;
    g->rng_offset = offset;
    g->rng_written = true;
  }
  return qt_cuda_check(dev, cudaGraphLaunch(g->exec, ctx->stream), op, err);
}

extern "C" void qt_cuda_graph_free(qt_device *dev, void *graph) {
  qt_cuda_graph *g = (qt_cuda_graph *)graph;
  if (g == NULL) return;
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  if (ctx->capture == g) {   /* freed in the middle of its own capture: end it first */
    qt_err ignored;
    (void)qt_cuda_graph_end(dev, g, false, &ignored);
    return;
  }
  if (ctx->capture != NULL) {
    pthread_mutex_lock(&graph_lock);
    g->next_zombie = graph_zombies;
    graph_zombies = g;
    pthread_mutex_unlock(&graph_lock);
    return;
  }
  graph_free_now(dev, g);
}

static void graph_free_now(qt_device *dev, qt_cuda_graph *g) {
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  if (!ctx->broken && qt_cuda_make_current(ctx->ordinal) == cudaSuccess)
    (void)cudaStreamSynchronize(ctx->stream);   /* its queued launches finish first */
  if (g->exec != NULL) (void)cudaGraphExecDestroy(g->exec);
  (void)cudaGetLastError();
  graph_release(dev, g);
}

/* ---- what cuda_alloc.cu asks */

extern "C" int qt_cuda_graph_alloc(qt_device *dev, size_t nbytes, void **ptr, int *oom,
                                   qt_err *err) {
  qt_cuda_graph *g = qt_cuda_context(dev)->capture;
  return qt_cuda_allocator_take(dev, g->pool->a, nbytes, ptr, oom, err);
}

extern "C" bool qt_cuda_graph_defer(qt_device *dev, void *ptr) {
  qt_cuda_graph *g = qt_cuda_context(dev)->capture;
  if (g == NULL) return false;
  pthread_mutex_lock(&graph_lock);
  bool kept = true;
  if (g->ndeferred == g->cap) {
    size_t cap = g->cap ? g->cap * 2 : 64;
    void **grown = (void **)realloc(g->deferred, cap * sizeof *grown);
    if (grown == NULL) kept = false;
    else g->deferred = grown, g->cap = cap;
  }
  if (kept) g->deferred[g->ndeferred++] = ptr;
  pthread_mutex_unlock(&graph_lock);
  return kept;
}

extern "C" void qt_cuda_graph_pool_free(qt_device *dev, void *ptr) {
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  bool orphan = false;
  pthread_mutex_lock(&graph_lock);
  for (qt_cuda_pool *p = ctx->pools; p != NULL; p = p->next)
    if (qt_cuda_allocator_give(p->a, ptr)) {
      orphan = p->graphs == 0;
      break;
    }
  pthread_mutex_unlock(&graph_lock);
  if (orphan) graph_sweep(dev);
}

extern "C" void qt_cuda_graph_pool_bytes(qt_device *dev, int64_t *allocated, int64_t *reserved) {
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  *allocated = *reserved = 0;
  pthread_mutex_lock(&graph_lock);
  for (qt_cuda_pool *p = ctx->pools; p != NULL; p = p->next) {
    int64_t a, r;
    qt_cuda_allocator_bytes(p->a, &a, &r);
    *allocated += a;
    *reserved += r;
  }
  pthread_mutex_unlock(&graph_lock);
}
