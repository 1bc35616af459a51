/*
** ops_dist.c — process groups and their collectives (ops.h, "collectives"): the checks
** every rank can make alone (live, contiguous tensors of one dtype and device, sizes that
** divide by the world, a root in range), the device's communicator for the group (opened on
** the first collective there, after a barrier, so every rank is known to be alive), and the
** device's collective slot (cpu_dist.c through rank 0 over the link; cuda_dist.cu, NCCL).
** A failure of the link (a rank gone, a timeout) breaks the group: later collectives fail
** at once, naming the first failure.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dist_link.h"
#include "core/ops_internal.h"
#include "device.h"
#include "ops.h"

#define DIST_MAX_COMMS 64   /* devices one process group has used */

struct qt_dist_group {
  int rank, world;
  bool local;                 /* one process's GPUs: links[r], devs[r], comms[r] per rank */
  qt_dist_link *link;         /* a job's group: this rank's link */
  qt_dist_link **links;
  qt_device **devs;
  qt_device *comm_dev[DIST_MAX_COMMS];   /* a job's group: the devices with a communicator */
  void **comms;
  int ncomms;
  bool broken;
  char why[QT_ERRLEN];
};

struct qt_dist_work {
  qt_device *dev;
  void *comm;
  void *work;
  qt_dist_link *link;
  const char *op;
  qt_dist_group *g;
};

static const char *coll_op_name(qt_coll_kind k) {
  static const char *names[] = {"all_reduce", "broadcast", "reduce", "all_gather",
                                "reduce_scatter", "all_to_all"};
  return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "dist";
}

/* ctx->err = "<op>: <e>"; a failure of the group's own marks it broken. */
static int dist_fail(qt_ctx *ctx, qt_dist_group *g, const char *op, const qt_err *e, bool breaks) {
  if (breaks && g != NULL && !g->broken) {
    g->broken = true;
    snprintf(g->why, sizeof g->why, "%.32s: %.*s", op, (int)sizeof g->why - 40, e->msg);
  }
  size_t n = strlen(op);   /* a device's message that names the op already keeps it */
  if (strncmp(e->msg, op, n) == 0 && e->msg[n] == ':') return qt_errorf(&ctx->err, "%s", e->msg);
  return qt_errorf(&ctx->err, "%s: %s", op, e->msg);
}

int qt_dist_init(qt_ctx *ctx, int rank, int world, const char *addr, int port, double timeout,
                 qt_dist_group **out) {
  const char *op = "init_process_group";
  *out = NULL;
  if (world < 1 || rank < 0 || rank >= world)
    return qt_errorf(&ctx->err, "%s: rank %d is not in 0..%d (WORLD_SIZE %d)", op, rank, world - 1, world);
  if (world > 1 && (port < 1 || port > 65535))
    return qt_errorf(&ctx->err, "%s: MASTER_PORT %d is not a port (1..65535)", op, port);
  if (world > 1 && (addr == NULL || addr[0] == '\0'))
    return qt_errorf(&ctx->err, "%s: MASTER_ADDR is not set (rank 0's host)", op);
  if (!(timeout > 0)) return qt_errorf(&ctx->err, "%s: the timeout must be > 0 seconds, got %g", op, timeout);
  qt_dist_group *g = calloc(1, sizeof *g);
  void **comms = calloc(DIST_MAX_COMMS, sizeof *comms);
  if (g == NULL || comms == NULL) {
    free(g);
    free(comms);
    return qt_errorf(&ctx->err, "%s: out of host memory", op);
  }
  g->rank = rank;
  g->world = world;
  g->comms = comms;
  qt_err e;
  g->link = qt_dist_link_tcp(rank, world, addr, port, timeout, &e);
  if (g->link == NULL) {
    free(comms);
    free(g);
    return qt_errorf(&ctx->err, "%s: %s", op, e.msg);
  }
  *out = g;
  return 0;
}

int qt_dist_local(qt_ctx *ctx, qt_device *const *devs, int n, qt_dist_group **out) {
  const char *op = "local_group";
  *out = NULL;
  if (n < 1 || n > DIST_MAX_COMMS)
    return qt_errorf(&ctx->err, "%s: %d devices given (1 to %d)", op, n, DIST_MAX_COMMS);
  for (int r = 0; r < n; r++) {
    if (devs[r]->iface->comm_group == NULL)
      return qt_errorf(&ctx->err, "%s: %s cannot run in a local group (GPUs only: a process's "
                       "CPU tensors need no collective)", op, devs[r]->name);
    for (int q = 0; q < r; q++)
      if (devs[q] == devs[r])
        return qt_errorf(&ctx->err, "%s: %s is given twice (one tensor per GPU)", op, devs[r]->name);
  }
  qt_dist_group *g = calloc(1, sizeof *g);
  if (g != NULL) {
    g->links = calloc((size_t)n, sizeof *g->links);
    g->devs = calloc((size_t)n, sizeof *g->devs);
    g->comms = calloc((size_t)n, sizeof *g->comms);
  }
  qt_err e;
  if (g == NULL || g->links == NULL || g->devs == NULL || g->comms == NULL ||
      qt_dist_links_local(n, g->links, &e) != 0) {
    if (g != NULL) {
      free(g->links);
      free(g->devs);
      free(g->comms);
    }
    free(g);
    return qt_errorf(&ctx->err, "%s: out of host memory", op);
  }
  g->local = true;
  g->world = n;
  memcpy(g->devs, devs, (size_t)n * sizeof *devs);
  *out = g;
  return 0;
}

int qt_dist_rank(const qt_dist_group *g) { return g->rank; }
int qt_dist_world(const qt_dist_group *g) { return g->world; }

void qt_dist_free(qt_dist_group *g, bool abort) {
  if (g == NULL) return;
  abort = abort || g->broken;
  if (g->local) {
    for (int r = 0; r < g->world; r++) {
      if (g->comms[r] != NULL) g->devs[r]->iface->comm_close(g->devs[r], g->comms[r], abort);
      qt_dist_link_free(g->links[r]);
    }
    free(g->links);
    free(g->devs);
  } else {
    for (int i = 0; i < g->ncomms; i++)
      g->comm_dev[i]->iface->comm_close(g->comm_dev[i], g->comms[i], abort);
    qt_dist_link_free(g->link);
  }
  free(g->comms);
  free(g);
}

static int dist_usable(qt_ctx *ctx, qt_dist_group *g, const char *op) {
  if (g->broken) return qt_errorf(&ctx->err, "%s: the process group failed earlier (%s)", op, g->why);
  return 0;
}

/* One byte reduced over the link (the CPU's collective): every rank has reached here. */
static int dist_link_barrier(qt_ctx *ctx, qt_dist_group *g, const char *op) {
  if (g->world == 1) return 0;
  qt_device *cpu = qt_cpu_device();
  uint8_t byte = 1;
  qt_view v = {.data = &byte, .dtype = QT_U8, .ndim = 1, .numel = 1, .size = {1}, .stride = {1}};
  qt_coll c = {.kind = QT_COLL_ALL_REDUCE, .op = QT_DIST_MAX, .in = &v, .out = &v};
  void *work = NULL;
  qt_err e;
  if (cpu->iface->collective(cpu, g->link, &c, &work, &e) != 0) return dist_fail(ctx, g, op, &e, true);
  return 0;
}

int qt_dist_barrier(qt_ctx *ctx, qt_dist_group *g) {
  if (dist_usable(ctx, g, "barrier") != 0) return -1;
  if (g->local) return 0;
  return dist_link_barrier(ctx, g, "barrier");
}

/* The device's communicator for this group, opened (collectively) on first use. */
static int dist_comm(qt_ctx *ctx, qt_dist_group *g, const char *op, qt_device *dev, void **comm) {
  for (int i = 0; i < g->ncomms; i++)
    if (g->comm_dev[i] == dev) {
      *comm = g->comms[i];
      return 0;
    }
  if (g->ncomms == DIST_MAX_COMMS)
    return qt_errorf(&ctx->err, "%s: a process group may use %d devices at most", op, DIST_MAX_COMMS);
  if (dist_link_barrier(ctx, g, op) != 0) return -1;
  qt_err e;
  if (dev->iface->comm_open(dev, g->link, comm, &e) != 0) return dist_fail(ctx, g, op, &e, true);
  g->comm_dev[g->ncomms] = dev;
  g->comms[g->ncomms++] = *comm;
  return 0;
}

/* What one rank can check alone; n_in and n_out: the elements in and out must have. */
static int dist_check(qt_ctx *ctx, const char *op, qt_coll_kind kind, qt_dist_op rop, int root,
                      int world, const qt_tensor *in, const qt_tensor *out, bool counted) {
  if (ops_live(ctx, op, in) != 0 || ops_live(ctx, op, out) != 0) return -1;
  if (ops_same_device(ctx, op, in, out) != 0) return -1;
  if (in->dtype != out->dtype)
    return qt_errorf(&ctx->err, "%s: the input is %s and the output %s (one dtype)", op,
                     qt_dtypes[in->dtype].name, qt_dtypes[out->dtype].name);
  if (!qt_is_contiguous(in) || !qt_is_contiguous(out))
    return qt_errorf(&ctx->err, "%s: tensors must be contiguous (call :contiguous() first)", op);
  if (ops_check_writable(ctx, op, out) != 0) return -1;
  int64_t ni = qt_numel(in), no = qt_numel(out);
  bool ok = true;
  switch (kind) {
    case QT_COLL_ALL_GATHER: ok = no == ni * world; break;
    case QT_COLL_REDUCE_SCATTER: ok = ni == no * world; break;
    case QT_COLL_ALL_TO_ALL: ok = counted || (ni == no && ni % world == 0); break;
    default: ok = ni == no; break;
  }
  if (!ok) {
    const char *want = kind == QT_COLL_ALL_GATHER ? "the output world x the input's"
                     : kind == QT_COLL_REDUCE_SCATTER ? "the input world x the output's"
                     : kind == QT_COLL_ALL_TO_ALL ? "as many, a multiple of the world"
                                                  : "as many";
    return qt_errorf(&ctx->err, "%s: input of %lld and output of %lld elements (world %d: %s)",
                     op, (long long)ni, (long long)no, world, want);
  }
  if ((kind == QT_COLL_BROADCAST || kind == QT_COLL_REDUCE) && (root < 0 || root >= world))
    return qt_errorf(&ctx->err, "%s: rank %d is not in 0..%d", op, root, world - 1);
  bool reduces = kind == QT_COLL_ALL_REDUCE || kind == QT_COLL_REDUCE || kind == QT_COLL_REDUCE_SCATTER;
  if (reduces && rop == QT_DIST_AVG && (in->dtype == QT_BOOL || !qt_dtypes[in->dtype].is_float))
    return qt_errorf(&ctx->err, "%s: op avg needs a float tensor, got %s", op, qt_dtypes[in->dtype].name);
  qt_device *dev = ops_device(in);
  if (dev->iface->collective == NULL) return ops_unsupported(ctx, op, dev);
  if (dev->capture != NULL) return ops_refuse_capture(ctx, op, dev);
  return 0;
}

static int dist_run(qt_ctx *ctx, qt_dist_group *g, qt_coll_kind kind, qt_dist_op rop, int root,
                    const qt_tensor *in, const qt_tensor *out, const int64_t *send,
                    const int64_t *recv, qt_dist_work **work) {
  const char *op = coll_op_name(kind);
  if (work != NULL) *work = NULL;
  if (g->local) return qt_errorf(&ctx->err, "%s: a local group takes one tensor per GPU", op);
  if (dist_usable(ctx, g, op) != 0) return -1;
  if (dist_check(ctx, op, kind, rop, root, g->world, in, out, send != NULL) != 0) return -1;
  qt_device *dev = ops_device(in);
  void *comm;
  if (dist_comm(ctx, g, op, dev, &comm) != 0) return -1;
  qt_view vi, vo;
  qt_view_of(&vi, in);
  qt_view_of(&vo, out);
  qt_coll c = {.kind = kind, .op = rop, .root = root, .in = &vi, .out = &vo, .send = send, .recv = recv};
  void *w = NULL;
  qt_err e;
  if (dev->iface->collective(dev, comm, &c, &w, &e) != 0) return dist_fail(ctx, g, op, &e, true);
  if (w == NULL) return 0;
  if (work == NULL) {
    if (dev->iface->work_wait(dev, comm, w, g->link, &e) != 0) return dist_fail(ctx, g, op, &e, true);
    return 0;
  }
  qt_dist_work *h = calloc(1, sizeof *h);
  if (h == NULL) {
    (void)dev->iface->work_wait(dev, comm, w, g->link, &e);
    return qt_errorf(&ctx->err, "%s: out of host memory", op);
  }
  *h = (qt_dist_work){.dev = dev, .comm = comm, .work = w, .link = g->link, .op = op, .g = g};
  *work = h;
  return 0;
}

int qt_dist_collective(qt_ctx *ctx, qt_dist_group *g, qt_coll_kind kind, qt_dist_op rop,
                       int root, const qt_tensor *in, const qt_tensor *out, qt_dist_work **work) {
  return dist_run(ctx, g, kind, rop, root, in, out, NULL, NULL, work);
}

int qt_dist_all_to_all(qt_ctx *ctx, qt_dist_group *g, const qt_tensor *in, const qt_tensor *out,
                       const int64_t *send, const int64_t *recv, qt_dist_work **work) {
  const char *op = "all_to_all";
  if (send == NULL || recv == NULL)
    return dist_run(ctx, g, QT_COLL_ALL_TO_ALL, QT_DIST_SUM, 0, in, out, NULL, NULL, work);
  if (ops_live(ctx, op, in) != 0 || ops_live(ctx, op, out) != 0) return -1;
  int64_t ts = 0, tr = 0;
  for (int r = 0; r < g->world; r++) {
    if (send[r] < 0 || recv[r] < 0)
      return qt_errorf(&ctx->err, "%s: a count for rank %d is negative (%lld, %lld)", op, r,
                       (long long)send[r], (long long)recv[r]);
    ts += send[r];
    tr += recv[r];
  }
  if (ts != qt_numel(in) || tr != qt_numel(out))
    return qt_errorf(&ctx->err, "%s: the counts sum to %lld sent and %lld received, the input has %lld "
                     "elements and the output %lld", op, (long long)ts, (long long)tr,
                     (long long)qt_numel(in), (long long)qt_numel(out));
  return dist_run(ctx, g, QT_COLL_ALL_TO_ALL, QT_DIST_SUM, 0, in, out, send, recv, work);
}

int qt_dist_wait(qt_ctx *ctx, qt_dist_work *w) {
  if (w == NULL) return 0;
  qt_err e;
  int rc = w->dev->iface->work_wait(w->dev, w->comm, w->work, w->link, &e);
  if (rc != 0) dist_fail(ctx, w->g, w->op, &e, true);
  free(w);
  return rc;
}

void qt_dist_release(qt_dist_work *w) {
  if (w == NULL) return;
  if (w->dev->iface->work_release != NULL) w->dev->iface->work_release(w->dev, w->work);
  free(w);
}

int qt_dist_collective_local(qt_ctx *ctx, qt_dist_group *g, qt_coll_kind kind, qt_dist_op rop,
                             int root, const qt_tensor *const *ins, const qt_tensor *const *outs) {
  const char *op = coll_op_name(kind);
  if (!g->local) return qt_errorf(&ctx->err, "%s: not a local group", op);
  if (dist_usable(ctx, g, op) != 0) return -1;
  for (int r = 0; r < g->world; r++) {
    if (dist_check(ctx, op, kind, rop, root, g->world, ins[r], outs[r], false) != 0) return -1;
    if (ops_device(ins[r]) != g->devs[r])
      return qt_errorf(&ctx->err, "%s: tensor %d is on %s, the group's rank %d is %s", op, r + 1,
                       ops_device(ins[r])->name, r, g->devs[r]->name);
    if (r > 0 && (qt_numel(ins[r]) != qt_numel(ins[0]) || ins[r]->dtype != ins[0]->dtype))
      return qt_errorf(&ctx->err, "%s: tensor %d differs from tensor 1 in size or dtype", op, r + 1);
  }
  qt_device *d0 = g->devs[0];
  qt_err e;
  if (g->comms[0] == NULL) {   /* the communicators, made together */
    if (d0->iface->comm_group(d0, true, &e) != 0) return dist_fail(ctx, g, op, &e, false);
    int rc = 0;
    for (int r = 0; r < g->world && rc == 0; r++)
      rc = g->devs[r]->iface->comm_open(g->devs[r], g->links[r], &g->comms[r], &e);
    qt_err e2;
    if (d0->iface->comm_group(d0, false, rc == 0 ? &e : &e2) != 0) rc = -1;
    if (rc != 0) {
      for (int r = 0; r < g->world; r++)
        if (g->comms[r] != NULL) {
          g->devs[r]->iface->comm_close(g->devs[r], g->comms[r], true);
          g->comms[r] = NULL;
        }
      return dist_fail(ctx, g, op, &e, false);
    }
  }
  void *works[DIST_MAX_COMMS];
  int n = g->world < DIST_MAX_COMMS ? g->world : DIST_MAX_COMMS;
  if (d0->iface->comm_group(d0, true, &e) != 0) return dist_fail(ctx, g, op, &e, true);
  int rc = 0, queued = 0;
  for (int r = 0; r < n && rc == 0; r++, queued++) {
    qt_view vi, vo;
    qt_view_of(&vi, ins[r]);
    qt_view_of(&vo, outs[r]);
    qt_coll c = {.kind = kind, .op = rop, .root = root, .in = &vi, .out = &vo};
    works[r] = NULL;
    rc = g->devs[r]->iface->collective(g->devs[r], g->comms[r], &c, &works[r], &e);
  }
  qt_err e2;
  if (d0->iface->comm_group(d0, false, rc == 0 ? &e : &e2) != 0) rc = -1;
  for (int r = 0; r < queued; r++) {
    if (works[r] == NULL) continue;
    if (rc == 0) rc = g->devs[r]->iface->work_wait(g->devs[r], g->comms[r], works[r], g->links[r], &e);
    else if (g->devs[r]->iface->work_release != NULL) g->devs[r]->iface->work_release(g->devs[r], works[r]);
  }
  return rc == 0 ? 0 : dist_fail(ctx, g, op, &e, true);
}
