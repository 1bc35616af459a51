/*
** cuda_dist.cu — the GPU's collectives (device.h's comm_* rows) through NCCL, loaded with
** dlopen on first use as cuBLAS and cuDNN are: `QLUA_NCCL` names the library, else
** libnccl.so.2 from the loader's path, else the CUDA Toolkit's. qlua builds and runs without
** it; a collective on a GPU then fails naming what could not be loaded.
**
** A communicator has its own stream. A collective waits there for what the device's queue
** holds (an event), runs, and records its end; the device's queue waits for that end
** before anything queued after (stream order), so the caching allocator may reuse what the
** collective touches once its tensors are freed, and the queue's kernels overlap the
** transfer until then. work_wait polls on the host, so a rank that died (the link says so)
** or a collective past the link's timeout aborts the communicator with a clear error
** instead of hanging the process.
*/
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_internal.h"

typedef struct qt_nccl_api {
  ncclResult_t (*get_version)(int *);
  ncclResult_t (*get_unique_id)(ncclUniqueId *);
  ncclResult_t (*comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
  ncclResult_t (*comm_abort)(ncclComm_t);
  ncclResult_t (*comm_async_error)(ncclComm_t, ncclResult_t *);
  const char *(*error_string)(ncclResult_t);
  ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*reduce_scatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*group_start)(void);
  ncclResult_t (*group_end)(void);
} qt_nccl_api;

static qt_nccl_api nccl;
static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;
static bool nccl_ok = false;
static char nccl_error[384];
static int nccl_version;

static void nccl_load(void) {
  const char *want = getenv("QLUA_NCCL");
  void *lib = NULL;
  char first[256] = "";
  if (want != NULL && want[0] != '\0') {
    lib = dlopen(want, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
      snprintf(nccl_error, sizeof nccl_error, "cannot load NCCL from QLUA_NCCL=%s: %s", want, dlerror());
      return;
    }
  } else {
    lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) snprintf(first, sizeof first, "%s", dlerror());
#ifdef QLUA_CUDA_LIBDIR
    if (lib == NULL) lib = dlopen(QLUA_CUDA_LIBDIR "/libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
#endif
    if (lib == NULL) {
      snprintf(nccl_error, sizeof nccl_error,
               "cannot load NCCL (libnccl.so.2; QLUA_NCCL may name it): %s", first);
      return;
    }
  }
  qt_nccl_api api;
  struct { void **slot; const char *name; } entries[] = {
    {(void **)&api.get_version, "ncclGetVersion"},
    {(void **)&api.get_unique_id, "ncclGetUniqueId"},
    {(void **)&api.comm_init_rank, "ncclCommInitRank"},
    {(void **)&api.comm_abort, "ncclCommAbort"},
    {(void **)&api.comm_async_error, "ncclCommGetAsyncError"},
    {(void **)&api.error_string, "ncclGetErrorString"},
    {(void **)&api.all_reduce, "ncclAllReduce"},
    {(void **)&api.broadcast, "ncclBroadcast"},
    {(void **)&api.reduce, "ncclReduce"},
    {(void **)&api.all_gather, "ncclAllGather"},
    {(void **)&api.reduce_scatter, "ncclReduceScatter"},
    {(void **)&api.send, "ncclSend"},
    {(void **)&api.recv, "ncclRecv"},
    {(void **)&api.group_start, "ncclGroupStart"},
    {(void **)&api.group_end, "ncclGroupEnd"},
  };
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    *entries[i].slot = dlsym(lib, entries[i].name);
    if (*entries[i].slot == NULL) {
      snprintf(nccl_error, sizeof nccl_error, "NCCL (%s) lacks %s", want ? want : "libnccl.so.2",
               entries[i].name);
      dlclose(lib);
      return;
    }
  }
  int v = 0;
  if (api.get_version(&v) != ncclSuccess || v < 21000) {   /* ncclAvg came with 2.10 */
    snprintf(nccl_error, sizeof nccl_error, "NCCL %d.%d is too old (2.10 or later needed)",
             v / 10000, v / 100 % 100);
    dlclose(lib);
    return;
  }
  nccl = api;
  nccl_version = v;
  nccl_ok = true;
}

/* op NULL: the message without an op's name (the core's collective puts its own first) */
static int nccl_get(const char *op, qt_err *err) {
  pthread_once(&nccl_once, nccl_load);
  if (!nccl_ok) return op != NULL ? qt_errorf(err, "%s: %s", op, nccl_error) : qt_errorf(err, "%s", nccl_error);
  return 0;
}

/* "NCCL 2.28.3" for qlua.backend("dist"), or why it cannot load */
extern "C" int qt_cuda_nccl_describe(char *buf, size_t len) {
  pthread_once(&nccl_once, nccl_load);
  if (!nccl_ok) snprintf(buf, len, "unavailable (%s)", nccl_error);
  else snprintf(buf, len, "NCCL %d.%d.%d", nccl_version / 10000, nccl_version / 100 % 100,
                nccl_version % 100);
  return 0;
}

static int nccl_check(ncclResult_t r, const char *op, qt_err *err) {
  if (r == ncclSuccess) return 0;
  return qt_errorf(err, "%s: NCCL error: %s", op, nccl.error_string(r));
}

typedef struct qt_nccl_comm {
  ncclComm_t comm;
  cudaStream_t stream;   /* the collectives' own */
  int rank, world;
  bool broken;
} qt_nccl_comm;

typedef struct qt_nccl_work {
  cudaEvent_t done;
  const char *op;
} qt_nccl_work;

extern "C" int qt_cuda_comm_open(qt_device *dev, qt_dist_link *link, void **out, qt_err *err) {
  const char *op = "dist";
  if (nccl_get(NULL, err) != 0) return -1;
  if (qt_cuda_enter(dev, op, err) != 0) return -1;
  ncclUniqueId id;
  if (link->rank == 0) {
    if (nccl_check(nccl.get_unique_id(&id), op, err) != 0) return -1;
    for (int r = 1; r < link->world; r++)
      if (link->send(link, r, &id, sizeof id, err) != 0) return -1;
  } else if (link->recv(link, 0, &id, sizeof id, err) != 0) {
    return -1;
  }
  qt_nccl_comm *c = (qt_nccl_comm *)calloc(1, sizeof *c);
  if (c == NULL) return qt_errorf(err, "out of host memory");
  c->rank = link->rank;
  c->world = link->world;
  if (qt_cuda_check(dev, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), op, err) != 0) {
    free(c);
    return -1;
  }
  ncclResult_t r = nccl.comm_init_rank(&c->comm, link->world, id, link->rank);
  if (r != ncclSuccess && r != ncclInProgress) {
    cudaStreamDestroy(c->stream);
    free(c);
    return qt_errorf(err, "NCCL could not join rank %d of %d on %s: %s", link->rank, link->world,
                     dev->name, nccl.error_string(r));
  }
  *out = c;
  return 0;
}

static double now_s(void);

/* Closing never waits on the other ranks: ncclCommDestroy finalizes collectively, and hangs
** when a rank is gone, so what the communicator queued is given up to 10 s to end (not at
** all when aborting), and then it is aborted, which is local. */
extern "C" void qt_cuda_comm_close(qt_device *dev, void *comm, bool abort) {
  qt_nccl_comm *c = (qt_nccl_comm *)comm;
  if (c == NULL) return;
  qt_err err;
  (void)qt_cuda_enter(dev, "dist", &err);
  if (!abort && !c->broken) {
    double start = now_s();
    struct timespec nap = {0, 200000};
    while (cudaStreamQuery(c->stream) == cudaErrorNotReady && now_s() - start < 10) nanosleep(&nap, NULL);
    (void)cudaGetLastError();
  }
  if (c->comm != NULL) nccl.comm_abort(c->comm);
  cudaStreamDestroy(c->stream);
  free(c);
}

/* Inside an NCCL group nothing is queued until the group ends, so a collective's end can
** only be recorded then: the works of the thread's open group wait here. */
#define NCCL_GROUP_MAX 64
typedef struct nccl_pending {
  struct qt_nccl_work *w;
  cudaStream_t comm_stream, dev_stream;
  int ordinal;
} nccl_pending;
static __thread int nccl_depth;
static __thread int nccl_npending;
static __thread nccl_pending nccl_pendings[NCCL_GROUP_MAX];

static int nccl_record_end(struct qt_nccl_work *w, cudaStream_t comm_stream, cudaStream_t dev_stream,
                           int ordinal, qt_err *err);

extern "C" int qt_cuda_comm_group(qt_device *dev, bool start, qt_err *err) {
  (void)dev;
  if (nccl_get("dist", err) != 0) return -1;
  ncclResult_t r = start ? nccl.group_start() : nccl.group_end();
  if (r == ncclInProgress) r = ncclSuccess;
  if (start) {
    if (r == ncclSuccess) nccl_depth++;
    return nccl_check(r, "dist", err);
  }
  if (nccl_depth > 0) nccl_depth--;
  int rc = nccl_check(r, "dist", err);
  if (nccl_depth == 0) {   /* the group's kernels are queued now: their ends can be recorded */
    for (int i = 0; i < nccl_npending; i++) {
      nccl_pending *p = &nccl_pendings[i];
      qt_err e2;
      if (nccl_record_end(p->w, p->comm_stream, p->dev_stream, p->ordinal, rc == 0 ? err : &e2) != 0) rc = -1;
    }
    nccl_npending = 0;
  }
  return rc;
}

static bool nccl_type(qt_dtype dt, ncclDataType_t *t) {
  switch (dt) {
    case QT_F32: *t = ncclFloat32; return true;
    case QT_F64: *t = ncclFloat64; return true;
    case QT_F16: *t = ncclFloat16; return true;
    case QT_BF16: *t = ncclBfloat16; return true;
    case QT_I32: *t = ncclInt32; return true;
    case QT_I64: *t = ncclInt64; return true;
    case QT_U8: case QT_BOOL: *t = ncclUint8; return true;
    default: return false;
  }
}

static const char *coll_name(qt_coll_kind k) {
  switch (k) {
    case QT_COLL_ALL_REDUCE: return "all_reduce";
    case QT_COLL_BROADCAST: return "broadcast";
    case QT_COLL_REDUCE: return "reduce";
    case QT_COLL_ALL_GATHER: return "all_gather";
    case QT_COLL_REDUCE_SCATTER: return "reduce_scatter";
    default: return "all_to_all";
  }
}

extern "C" int qt_cuda_collective(qt_device *dev, void *comm, const qt_coll *k, void **work,
                                  qt_err *err) {
  const char *op = coll_name(k->kind);
  qt_nccl_comm *c = (qt_nccl_comm *)comm;
  *work = NULL;
  if (qt_cuda_enter(dev, op, err) != 0) return -1;
  if (dev->capture != NULL)
    return qt_errorf(err, "%s: collectives cannot be captured into a CUDA graph (%s is capturing)",
                     op, dev->name);
  if (c->broken) return qt_errorf(err, "%s: the communicator was aborted (a rank failed earlier)", op);
  ncclDataType_t t;
  if (!nccl_type(k->in->dtype, &t))
    return qt_errorf(err, "%s: NCCL has no type for %s", op, qt_dtypes[k->in->dtype].name);
  ncclRedOp_t rop = (ncclRedOp_t)k->op;
  if (k->in->dtype == QT_BOOL) {   /* as uint8: sum is or, prod is and */
    if (k->op == QT_DIST_SUM) rop = ncclMax;
    else if (k->op == QT_DIST_PROD) rop = ncclMin;
  }
  qt_cuda_ctx *ctx = qt_cuda_context(dev);
  qt_nccl_work *w = (qt_nccl_work *)calloc(1, sizeof *w);
  if (w == NULL) return qt_errorf(err, "%s: out of host memory", op);
  w->op = op;
  cudaEvent_t ready;
  if (qt_cuda_check(dev, cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), op, err) != 0) {
    free(w);
    return -1;
  }
  if (qt_cuda_check(dev, cudaEventCreateWithFlags(&w->done, cudaEventDisableTiming), op, err) != 0) {
    cudaEventDestroy(ready);
    free(w);
    return -1;
  }
  /* the collective's stream waits for what the device's queue holds */
  int rc = qt_cuda_check(dev, cudaEventRecord(ready, ctx->stream), op, err);
  if (rc == 0) rc = qt_cuda_check(dev, cudaStreamWaitEvent(c->stream, ready, 0), op, err);
  cudaEventDestroy(ready);
  size_t n = (size_t)k->in->numel, es = qt_elsize(k->in->dtype);
  const char *in = (const char *)k->in->data;
  char *outp = (char *)k->out->data;
  ncclResult_t r = ncclSuccess;
  if (rc == 0) {
    switch (k->kind) {
      case QT_COLL_ALL_REDUCE: r = nccl.all_reduce(in, outp, n, t, rop, c->comm, c->stream); break;
      case QT_COLL_BROADCAST: r = nccl.broadcast(in, outp, n, t, k->root, c->comm, c->stream); break;
      case QT_COLL_REDUCE: r = nccl.reduce(in, outp, n, t, rop, k->root, c->comm, c->stream); break;
      case QT_COLL_ALL_GATHER: r = nccl.all_gather(in, outp, n, t, c->comm, c->stream); break;
      case QT_COLL_REDUCE_SCATTER:
        r = nccl.reduce_scatter(in, outp, (size_t)k->out->numel, t, rop, c->comm, c->stream);
        break;
      case QT_COLL_ALL_TO_ALL: {
        size_t part = n / (size_t)c->world, so = 0, ro = 0;
        r = nccl.group_start();
        for (int p = 0; p < c->world && r == ncclSuccess; p++) {
          size_t sn = k->send != NULL ? (size_t)k->send[p] : part;
          size_t rn = k->recv != NULL ? (size_t)k->recv[p] : part;
          if (sn > 0) r = nccl.send(in + so * es, sn, t, p, c->comm, c->stream);
          if (r == ncclSuccess && rn > 0) r = nccl.recv(outp + ro * es, rn, t, p, c->comm, c->stream);
          so += sn;
          ro += rn;
        }
        ncclResult_t e = nccl.group_end();
        if (r == ncclSuccess) r = e;
        break;
      }
    }
    if (r == ncclInProgress) r = ncclSuccess;
    rc = nccl_check(r, op, err);
  }
  /* the device's queue waits for the collective's end (at the group's end, inside one) */
  if (rc == 0 && nccl_depth > 0) {
    if (nccl_npending == NCCL_GROUP_MAX) rc = qt_errorf(err, "%s: more than %d collectives in one group", op, NCCL_GROUP_MAX);
    else nccl_pendings[nccl_npending++] = {w, c->stream, ctx->stream, ctx->ordinal};
  } else if (rc == 0) {
    rc = nccl_record_end(w, c->stream, ctx->stream, ctx->ordinal, err);
  }
  if (rc != 0) {
    c->broken = r != ncclSuccess;
    cudaEventDestroy(w->done);
    free(w);
    return -1;
  }
  *work = w;
  return 0;
}

/* done is recorded on the collective's stream, and the device's queue waits for it. */
static int nccl_record_end(struct qt_nccl_work *w, cudaStream_t comm_stream, cudaStream_t dev_stream,
                           int ordinal, qt_err *err) {
  cudaError_t s = qt_cuda_make_current(ordinal);
  if (s == cudaSuccess) s = cudaEventRecord(w->done, comm_stream);
  if (s == cudaSuccess) s = cudaStreamWaitEvent(dev_stream, w->done, 0);
  if (s != cudaSuccess) {
    (void)cudaGetLastError();
    return qt_errorf(err, "%s: CUDA error: %s", w->op, cudaGetErrorString(s));
  }
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

extern "C" int qt_cuda_work_wait(qt_device *dev, void *comm, void *work, qt_dist_link *link,
                                 qt_err *err) {
  qt_nccl_comm *c = (qt_nccl_comm *)comm;
  qt_nccl_work *w = (qt_nccl_work *)work;
  if (w == NULL) return 0;
  const char *op = w->op;
  int rc = qt_cuda_enter(dev, op, err);
  if (rc == 0 && c->comm == NULL)
    rc = qt_errorf(err, "%s: the communicator was aborted (a rank failed earlier)", op);
  double start = now_s(), last_check = start;
  struct timespec nap = {0, 20000};   /* 20 us, doubling to 1 ms */
  while (rc == 0) {
    cudaError_t s = cudaEventQuery(w->done);
    if (s == cudaSuccess) break;
    if (s != cudaErrorNotReady) {
      rc = qt_cuda_check(dev, s, op, err);
      break;
    }
    ncclResult_t async = ncclSuccess;
    nccl.comm_async_error(c->comm, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      rc = qt_errorf(err, "%s: NCCL failed on %s: %s", op, dev->name, nccl.error_string(async));
      break;
    }
    double t = now_s();
    if (t - last_check > 0.05) {
      last_check = t;
      if (link != NULL && link->check(link, err) != 0) {
        rc = -1;
        break;
      }
    }
    if (link != NULL && link->timeout > 0 && t - start > link->timeout) {
      rc = qt_errorf(err, "%s: not done after %g s (timeout): a rank is stuck or gone", op,
                     link->timeout);
      break;
    }
    nanosleep(&nap, NULL);
    if (nap.tv_nsec < 1000000) nap.tv_nsec *= 2;
  }
  if (rc != 0 && !c->broken) {
    /* the kernels of an aborted communicator end, so the queue does not hang behind them */
    c->broken = true;
    nccl.comm_abort(c->comm);
    c->comm = NULL;
  }
  cudaEventDestroy(w->done);
  free(w);
  return rc;
}

extern "C" void qt_cuda_work_release(qt_device *dev, void *work) {
  qt_nccl_work *w = (qt_nccl_work *)work;
  if (w == NULL) return;
  qt_err err;
  (void)qt_cuda_enter(dev, "dist", &err);
  cudaEventDestroy(w->done);   /* the queue's wait on it stays */
  free(w);
}
