/*
** ops_graph.c — CUDA graphs for qlua.graph: a capture of everything queued on a device
** between qt_graph_begin and qt_graph_end, replayed whole by qt_graph_replay (the device's
** graph_* slots; kernels/cuda_graph.cu). What needs the host during a capture (downloads,
** uploads, waits) refuses through ops_refuse_capture, naming the op.
**
** The generator. Captured random ops take their counters from the capture's start (the
** context's offset is 0 while it runs, and is put back after), and the device adds, at
** each replay, the generator's offset at the launch; the replay then advances the offset by
** what the capture used. A replay thus draws exactly what an eager run of the same ops at
** that point draws.
*/
#include <stdlib.h>

#include "core/ops_internal.h"
#include "device.h"
#include "ops.h"

struct qt_graph {
  qt_device *dev;
  void *handle;          /* the device's graph */
  uint64_t rng_saved;    /* the context's offset when the capture began */
  uint64_t rng_used;     /* counters the captured ops take per replay */
  bool capturing, ready;
};

int ops_refuse_capture(qt_ctx *ctx, const char *op, const qt_device *dev) {
  if (dev == NULL || dev->capture == NULL) return 0;
  return qt_errorf(&ctx->err, "%s: cannot run while a CUDA graph is being captured on %s: it "
                   "waits for the GPU or moves data through the host (qlua.graph)", op,
                   dev->name);
}

bool qt_graph_supported(const qt_device *dev) { return dev->iface->graph_begin != NULL; }

bool qt_graph_capturing(const qt_device *dev) { return dev->capture != NULL; }

int qt_graph_begin(qt_ctx *ctx, qt_device *dev, const qt_graph *share, qt_graph **out) {
  const char *op = "graph";
  *out = NULL;
  if (!qt_graph_supported(dev)) return ops_unsupported(ctx, op, dev);
  if (dev->capture != NULL)
    return qt_errorf(&ctx->err, "%s: a capture is already under way on %s", op, dev->name);
  if (share != NULL && (share->dev != dev || !share->ready))
    return qt_errorf(&ctx->err, "%s: the pool to share is %s's graph's, not one captured on %s",
                     op, share->dev->name, dev->name);
  qt_graph *g = calloc(1, sizeof *g);
  if (g == NULL) return qt_errorf(&ctx->err, "%s: out of host memory", op);
  g->dev = dev;
  if (dev->iface->graph_begin(dev, share != NULL ? share->handle : NULL, &g->handle,
                              &ctx->err) != 0) {
    free(g);
    return -1;
  }
  g->capturing = true;
  g->rng_saved = ctx->rng_offset;
  ctx->rng_offset = 0;
  dev->capture = g;
  *out = g;
  return 0;
}

int qt_graph_end(qt_ctx *ctx, qt_graph *g, bool keep) {
  if (g == NULL || !g->capturing) return qt_errorf(&ctx->err, "graph: no capture under way");
  qt_device *dev = g->dev;
  g->capturing = false;
  dev->capture = NULL;
  g->rng_used = ctx->rng_offset;
  ctx->rng_offset = g->rng_saved;
  int rc = dev->iface->graph_end(dev, g->handle, keep, &ctx->err);
  if (!keep || rc != 0) {
    g->handle = NULL;   /* the device freed it */
    return rc;
  }
  g->ready = true;
  return 0;
}

int qt_graph_replay(qt_ctx *ctx, qt_graph *g) {
  if (g == NULL || !g->ready) return qt_errorf(&ctx->err, "graph: the graph is not captured");
  qt_device *dev = g->dev;
  if (dev->iface->graph_launch(dev, g->handle, ctx->seed, ctx->rng_offset, &ctx->err) != 0)
    return -1;
  ctx->rng_offset += g->rng_used;
  return 0;
}

void qt_graph_free(qt_graph *g) {
  if (g == NULL) return;
  if (g->handle != NULL) {
    if (g->capturing) {
      qt_err ignored;
      g->dev->capture = NULL;
      (void)g->dev->iface->graph_end(g->dev, g->handle, false, &ignored);
    } else {
      g->dev->iface->graph_free(g->dev, g->handle);
    }
  }
  free(g);
}
