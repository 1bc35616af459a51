/*
** ops.c — the tensor core: every tensor operation of the Lua API, without Lua.
**
** This is the layer between the Lua binding (which converts Lua values and raises
** ctx->err.msg) and the devices (cpu.c, the .cu files in kernels/). It checks everything
** that can be checked without reading index values (freed tensors, devices, dims, shapes,
** dtypes), decides result shapes and dtypes (NumPy broadcasting and promotion),
** allocates outputs through one allocation path (which drives the GC and retries after
** an out-of-memory), and calls the device slots with plain qt_view geometry.
**
** Ownership: every function builds its result in a local tensor and moves it into `out`
** only on success; temporaries are local tensors released on one `cleanup:` path, so an
** error never leaks a storage and `out` never holds a half-made result.
**
** Dims and positions are 0-based here (the binding converts); messages speak 1-based to
** the user, so printed dims and positions are the 0-based value + 1.
*/
#include "tensor.h"
#include "device.h"

#include "ops.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPS_SHAPE_LEN 400  /* QT_MAXDIM sizes of up to 20 digits plus separators */

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
  ctx->seed = OPS_DEFAULT_SEED;
  ctx->rng_offset = 0;
  ctx->allow_tf32 = false;
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
  if (ctx != NULL && atomic_fetch_sub_explicit(&ctx->refcount, 1, memory_order_acq_rel) == 1)
    free(ctx);
}

/* ================================================================== small helpers */

static const char *const ops_binop_names[QT_NBINOPS] = {
  "add", "sub", "mul", "div", "pow", "eq", "ne", "lt", "le", "gt", "ge", "maximum", "minimum",
};
static const char *const ops_unop_names[QT_NUNOPS] = {
  "neg", "abs", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "clamp",
};
static const char *const ops_redop_names[QT_NREDOPS] = {
  "sum", "mean", "max", "min", "argmax", "argmin",
};

static qt_device *ops_device(const qt_tensor *t) { return t->storage->device; }

static const char *ops_shape(const qt_tensor *t, char *buf) {
  return qt_shape_str(t->ndim, t->size, buf, OPS_SHAPE_LEN);
}

static bool ops_is_comparison(qt_binop op) {
  return op == QT_EQ || op == QT_NE || op == QT_LT || op == QT_LE || op == QT_GT || op == QT_GE;
}

static int ops_live(qt_ctx *ctx, const char *op, const qt_tensor *t) {
  return qt_tensor_check(t, op, &ctx->err);
}

static int ops_same_device(qt_ctx *ctx, const char *op, const qt_tensor *a, const qt_tensor *b) {
  if (ops_device(a) != ops_device(b))
    return qt_errorf(&ctx->err, "%s: tensors on %s and %s", op, ops_device(a)->name,
                     ops_device(b)->name);
  return 0;
}

static int ops_unsupported(qt_ctx *ctx, const char *op, const qt_device *dev) {
  return qt_errorf(&ctx->err, "%s: not supported on %s", op, dev->name);
}

/* A 0-based dim against a tensor of ndim dims; the message is 1-based. */
static int ops_check_dim(qt_ctx *ctx, const char *op, int dim, int ndim) {
  if (dim >= 0 && dim < ndim) return 0;
  if (ndim == 0)
    return qt_errorf(&ctx->err, "%s: dim %d out of range (the tensor is 0-d)", op, dim + 1);
  return qt_errorf(&ctx->err, "%s: dim %d out of range (1..%d)", op, dim + 1, ndim);
}

static int ops_check_dtype(qt_ctx *ctx, const char *op, qt_dtype dtype) {
  if ((int)dtype < 0 || (int)dtype >= QT_NDTYPES)
    return qt_errorf(&ctx->err, "%s: unknown dtype %d", op, (int)dtype);
  return 0;
}

static int ops_check_index_dtype(qt_ctx *ctx, const char *op, const qt_tensor *index) {
  if (index->dtype != QT_I32 && index->dtype != QT_I64)
    return qt_errorf(&ctx->err, "%s: index must be int32 or int64, got %s", op,
                     qt_dtypes[index->dtype].name);
  return 0;
}

/* In-place targets: a dimension of stride 0 and size > 1 (an expanded view) would make
** several elements one memory location, and a parallel device would race on it. */
static int ops_check_writable(qt_ctx *ctx, const char *op, const qt_tensor *t) {
  for (int d = 0; d < t->ndim; d++)
    if (t->stride[d] == 0 && t->size[d] > 1)
      return qt_errorf(&ctx->err,
                       "%s: cannot write into an expanded tensor (dim %d has stride 0)", op,
                       d + 1);
  return 0;
}

static bool ops_same_geometry(const qt_tensor *a, const qt_tensor *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim || a->offset != b->offset) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->size[d] != b->size[d] || a->stride[d] != b->stride[d]) return false;
  return true;
}

/* Conservative aliasing test for a write into dst while reading src: sharing a storage
** with any other geometry counts as overlapping (the caller then reads from a copy). */
static bool ops_may_overlap(const qt_tensor *dst, const qt_tensor *src) {
  return dst->storage == src->storage && !ops_same_geometry(dst, src);
}

static bool ops_same_shape(const qt_tensor *a, const qt_tensor *b) {
  if (a->ndim != b->ndim) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->size[d] != b->size[d]) return false;
  return true;
}

/* A scalar whose integer field is always defined: (int64_t) of a NaN or out-of-range
** double is undefined behaviour in C, so such values get a saturated .i instead. */
static qt_scalar ops_scalar_from_double(double f) {
  qt_scalar s;
  s.f = f;
  if (f != f) s.i = 0;
  else if (f >= 9223372036854775807.0) s.i = INT64_MAX;
  else if (f <= -9223372036854775808.0) s.i = INT64_MIN;
  else s.i = (int64_t)f;
  return s;
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
static int ops_prefix_error(qt_ctx *ctx, const char *op) {
  size_t n = strlen(op);
  if (strncmp(ctx->err.msg, op, n) == 0 && ctx->err.msg[n] == ':') return -1;
  char slot[QT_ERRLEN];
  snprintf(slot, sizeof slot, "%s", ctx->err.msg);
  return qt_errorf(&ctx->err, "%s: %s", op, slot);
}

/* Host memory drives the collector too: an 8 MiB CPU tensor is a ~100-byte userdata to
** Lua, so dropped tensors would pile up. tensor.c uncharges only GPU storages from
** ctx->gpu_live_bytes, so host bytes are read from the CPU device's own (process-wide)
** `allocated` count instead, against a process-wide soft limit paced like the binding
** paces the GPU one: after a collection, max(floor, 2 x what is still allocated). Small
** allocations (< 4 KiB) skip the check: their userdata already weighs on Lua's GC. */
#define OPS_CPU_GC_FLOOR ((int64_t)256 << 20)
#define OPS_CPU_GC_MIN_BYTES 4096
static _Atomic int64_t ops_cpu_gc_limit = OPS_CPU_GC_FLOOR;

static void ops_cpu_gc_pace(qt_ctx *ctx, size_t nbytes) {
  if (ctx->gc == NULL || nbytes < OPS_CPU_GC_MIN_BYTES) return;
  if (qt_cpu_allocated() + (int64_t)nbytes <= atomic_load(&ops_cpu_gc_limit)) return;
  ctx->gc(ctx->gc_ud, 0);
  int64_t allocated = qt_cpu_allocated();
  int64_t limit = allocated > INT64_MAX / 2 ? INT64_MAX : 2 * allocated;
  atomic_store(&ops_cpu_gc_limit, limit < OPS_CPU_GC_FLOOR ? OPS_CPU_GC_FLOOR : limit);
}

/* The one way storages are made. GPU bytes are counted in ctx->gpu_live_bytes, and
** crossing the soft limit asks the binding for a collection first (gc(ud, 0)): the Lua
** GC does not see device memory by itself (host memory: ops_cpu_gc_pace). An out-of-memory empties the device's cache,
** asks for a full collection (gc(ud, 1)) and retries once. The storage holds a reference
** on ctx (storage->owner); tensor.c's release gives it and the byte count back. */
static int ops_storage_new(qt_ctx *ctx, const char *op, qt_device *dev, size_t nbytes,
                           qt_storage **out) {
  *out = NULL;
  if (dev->iface->alloc == NULL) return ops_unsupported(ctx, op, dev);
  bool gpu = dev->kind == QT_DEV_CUDA;
  if (gpu && ctx->gc != NULL && atomic_load(&ctx->gpu_live_bytes) + (int64_t)nbytes > ctx->gpu_gc_limit)
    ctx->gc(ctx->gc_ud, 0);
  if (dev->kind == QT_DEV_CPU) ops_cpu_gc_pace(ctx, nbytes);

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
  *out = s;
  return 0;
}

/* A new contiguous tensor; `op` names the operation in messages. */
static int ops_alloc(qt_ctx *ctx, const char *op, qt_tensor *out, qt_device *dev, qt_dtype dtype,
                     int ndim, const int64_t *size) {
  char shape[OPS_SHAPE_LEN];
  if (dev == NULL || dev->iface == NULL) return qt_errorf(&ctx->err, "%s: no device", op);
  if (ops_check_dtype(ctx, op, dtype)) return -1;
  if (ndim < 0 || ndim > QT_MAXDIM)
    return qt_errorf(&ctx->err, "%s: %d dimensions (at most %d)", op, ndim, QT_MAXDIM);
  for (int d = 0; d < ndim; d++)
    if (size[d] < 0)
      return qt_errorf(&ctx->err, "%s: negative size %lld in shape %s", op, (long long)size[d],
                       qt_shape_str(ndim, size, shape, sizeof shape));
  int64_t stride[QT_MAXDIM];
  int64_t numel = qt_contiguous_strides(ndim, size, stride);
  if (numel < 0)
    return qt_errorf(&ctx->err, "%s: shape %s is too large", op,
                     qt_shape_str(ndim, size, shape, sizeof shape));
  qt_storage *s;
  if (ops_storage_new(ctx, op, dev, (size_t)numel * qt_elsize(dtype), &s)) return -1;
  qt_tensor_init(out);
  out->storage = s;
  out->dtype = dtype;
  out->ndim = ndim;
  out->offset = 0;
  for (int d = 0; d < ndim; d++) {
    out->size[d] = size[d];
    out->stride[d] = stride[d];
  }
  return 0;
}

static int ops_alloc_like(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *t,
                          qt_dtype dtype) {
  return ops_alloc(ctx, op, out, ops_device(t), dtype, t->ndim, t->size);
}

/* ================================================================== device slot wrappers */

/* dst = src (converting dtype) on one device; nothing to do for no elements. */
static int ops_copy_views(qt_ctx *ctx, const char *op, qt_device *dev, const qt_view *dst,
                          const qt_view *src) {
  if (dev->iface->copy == NULL) return ops_unsupported(ctx, op, dev);
  if (dst->numel == 0) return 0;
  return dev->iface->copy(dev, dst, src, &ctx->err);
}

static int ops_fill_view(qt_ctx *ctx, const char *op, qt_device *dev, const qt_view *dst,
                         qt_scalar value) {
  if (dev->iface->fill == NULL) return ops_unsupported(ctx, op, dev);
  if (dst->numel == 0) return 0;
  return dev->iface->fill(dev, dst, value, &ctx->err);
}

/* A new contiguous copy of t in `dtype` on t's device. */
static int ops_copy_new(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *t,
                        qt_dtype dtype) {
  qt_tensor res;
  qt_tensor_init(&res);
  if (ops_alloc_like(ctx, op, &res, t, dtype)) return -1;
  qt_view dv, sv;
  qt_view_of(&dv, &res);
  qt_view_of(&sv, t);
  if (ops_copy_views(ctx, op, ops_device(t), &dv, &sv)) {
    qt_tensor_release(&res);
    return -1;
  }
  *out = res;
  return 0;
}

/* *out = t as `dtype`: a share of t when it already is, else a contiguous copy. For
** operands that are only read. */
static int ops_cast(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *t,
                    qt_dtype dtype) {
  if (t->dtype == dtype) {
    qt_tensor_share(out, t);
    return 0;
  }
  return ops_copy_new(ctx, op, out, t, dtype);
}

/* ================================================================== broadcasting */

/* NumPy's rule: align shapes on the right; each pair equal, or one of them 1. */
static int ops_broadcast_shape(qt_ctx *ctx, const char *op, const qt_tensor *a,
                               const qt_tensor *b, int *ndim, int64_t *size) {
  int n = a->ndim > b->ndim ? a->ndim : b->ndim;
  for (int d = n - 1; d >= 0; d--) {
    int da = d - (n - a->ndim), db = d - (n - b->ndim);
    int64_t sa = da >= 0 ? a->size[da] : 1, sb = db >= 0 ? b->size[db] : 1;
    if (sa != sb && sa != 1 && sb != 1) {
      char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
      return qt_errorf(&ctx->err, "%s: shapes %s and %s cannot be broadcast", op,
                       ops_shape(a, s1), ops_shape(b, s2));
    }
    size[d] = sa == 1 ? sb : sa;
  }
  *ndim = n;
  return 0;
}

/* Strides of t viewed with shape (ndim, size): t's dims aligned on the right, size-1
** dims and missing dims broadcast with stride 0. False when t does not fit. */
static bool ops_expand_strides(const qt_tensor *t, int ndim, const int64_t *size,
                               int64_t *stride) {
  if (ndim < t->ndim) return false;
  for (int d = ndim - 1; d >= 0; d--) {
    int td = d - (ndim - t->ndim);
    if (td < 0) {
      if (size[d] < 0) return false;
      stride[d] = 0;
    } else if (t->size[td] == size[d]) {
      stride[d] = t->stride[td];
    } else if (t->size[td] == 1 && size[d] >= 0) {
      stride[d] = 0;
    } else {
      return false;
    }
  }
  return true;
}

/* The device view of t broadcast to (ndim, size); the caller checked it fits. */
static void ops_view_expanded(qt_view *v, const qt_tensor *t, int ndim, const int64_t *size) {
  qt_view_of(v, t);
  int64_t stride[QT_MAXDIM];
  ops_expand_strides(t, ndim, size, stride);
  int64_t numel = 1;
  for (int d = 0; d < ndim; d++) {
    v->size[d] = size[d];
    v->stride[d] = stride[d];
    numel *= size[d];
  }
  for (int d = ndim; d < QT_MAXDIM; d++) v->size[d] = 1, v->stride[d] = 0;
  v->ndim = ndim;
  v->numel = numel;
}

/* ================================================================== creation */

int qt_empty(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype, int ndim,
             const int64_t *size) {
  return ops_alloc(ctx, "empty", out, dev, dtype, ndim, size);
}

/* Contiguous host bytes into a new tensor through the device's upload slot (the CPU
** device's is a memcpy; a CPU device without one is served by memcpy here). */
int qt_from_host(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype, int ndim,
                 const int64_t *size, const void *host_data) {
  const char *op = "tensor";
  qt_tensor res;
  qt_tensor_init(&res);
  if (ops_alloc(ctx, op, &res, dev, dtype, ndim, size)) return -1;
  size_t nbytes = (size_t)qt_numel(&res) * qt_elsize(dtype);
  if (nbytes > 0) {
    int rc;
    if (host_data == NULL) {
      rc = qt_errorf(&ctx->err, "%s: no data", op);
    } else if (dev->iface->upload != NULL) {
      rc = dev->iface->upload(dev, res.storage->data, host_data, nbytes, &ctx->err);
    } else if (dev->kind == QT_DEV_CPU) {
      memcpy(res.storage->data, host_data, nbytes);
      rc = 0;
    } else {
      rc = ops_unsupported(ctx, op, dev);
    }
    if (rc) {
      qt_tensor_release(&res);
      return -1;
    }
  }
  *out = res;
  return 0;
}

int qt_fill_(qt_ctx *ctx, qt_tensor *t, qt_scalar value) {
  const char *op = "fill_";
  if (ops_live(ctx, op, t)) return -1;
  qt_view v;
  qt_view_of(&v, t);
  return ops_fill_view(ctx, op, ops_device(t), &v, value);
}

/* Philox counters: element k of this call uses counter rng_offset + k, so the offset
** advances by numel whatever the device. A non-contiguous t is generated into a
** contiguous temporary and copied in, so the numbers follow t's row-major order. */
int qt_random_(qt_ctx *ctx, qt_tensor *t, qt_random_kind kind, qt_scalar lo, qt_scalar hi) {
  const char *op = kind == QT_RAND_INT ? "randint" : kind == QT_RAND_NORMAL ? "randn" : "rand";
  if (ops_live(ctx, op, t)) return -1;
  if (kind != QT_RAND_UNIFORM && kind != QT_RAND_NORMAL && kind != QT_RAND_INT)
    return qt_errorf(&ctx->err, "random: unknown distribution %d", (int)kind);
  if (kind == QT_RAND_INT) {
    if (qt_is_float(t->dtype))
      return qt_errorf(&ctx->err, "%s: dtype %s is not an integer dtype", op,
                       qt_dtypes[t->dtype].name);
    if (lo.i > hi.i)
      return qt_errorf(&ctx->err, "%s: lower bound %lld is greater than upper bound %lld", op,
                       (long long)lo.i, (long long)hi.i);
    if (t->dtype == QT_I32 && (lo.i < INT32_MIN || hi.i > INT32_MAX))
      return qt_errorf(&ctx->err, "%s: bounds %lld..%lld do not fit int32", op,
                       (long long)lo.i, (long long)hi.i);
  } else if (!qt_is_float(t->dtype)) {
    return qt_errorf(&ctx->err, "%s: dtype %s is not a float dtype", op,
                     qt_dtypes[t->dtype].name);
  }
  if (ops_check_writable(ctx, op, t)) return -1;
  qt_device *dev = ops_device(t);
  if (dev->iface->random == NULL) return ops_unsupported(ctx, op, dev);
  int64_t numel = qt_numel(t);
  if (numel == 0) return 0;

  int rc = -1;
  qt_tensor tmp;
  qt_tensor_init(&tmp);
  const qt_tensor *target = t;
  if (!qt_is_contiguous(t)) {
    if (ops_alloc_like(ctx, op, &tmp, t, t->dtype)) goto cleanup;
    target = &tmp;
  }
  qt_view v;
  qt_view_of(&v, target);
  if (dev->iface->random(dev, kind, &v, ctx->seed, ctx->rng_offset, lo, hi, &ctx->err))
    goto cleanup;
  ctx->rng_offset += (uint64_t)numel;
  if (target == &tmp) {
    qt_view dv;
    qt_view_of(&dv, t);
    if (ops_copy_views(ctx, op, dev, &dv, &v)) goto cleanup;
  }
  rc = 0;
cleanup:
  qt_tensor_release(&tmp);
  return rc;
}

/* ================================================================== views */

/* Strides that let (nndim, nsize) walk the same elements, in the same row-major order, as
** (ondim, osize, ostride), or false when no strides can. The old dims are split into
** runs that are contiguous with each other in memory (size-1 dims never break a run);
** each run must be covered exactly by consecutive new dims, which then step through it
** with the run's innermost stride. This is what makes a view of a contiguous chunk work
** even when the tensor as a whole is not contiguous. */
static bool ops_view_strides(int ondim, const int64_t *osize, const int64_t *ostride, int nndim,
                             const int64_t *nsize, int64_t *nstride) {
  bool empty = false;  /* checked for a zero, not multiplied: the other sizes may overflow */
  for (int d = 0; d < ondim; d++) empty = empty || osize[d] == 0;
  if (empty) {
    qt_contiguous_strides(nndim, nsize, nstride);
    return true;
  }
  int nd = nndim - 1;  /* next new dim to place, innermost first */
  int64_t run_stride = ondim > 0 ? ostride[ondim - 1] : 1;
  int64_t run_numel = 1, placed_numel = 1;
  for (int od = ondim - 1; od >= 0; od--) {
    run_numel *= osize[od];
    bool run_ends = od == 0 || (osize[od - 1] != 1 && ostride[od - 1] != run_numel * run_stride);
    if (!run_ends) continue;
    while (nd >= 0 && (placed_numel < run_numel || nsize[nd] == 1)) {
      nstride[nd] = placed_numel * run_stride;
      placed_numel *= nsize[nd];
      nd--;
    }
    if (placed_numel != run_numel) return false;
    if (od > 0) {
      run_stride = ostride[od - 1];
      run_numel = 1;
      placed_numel = 1;
    }
  }
  for (; nd >= 0; nd--) {  /* only size-1 dims can be left (numel already matched) */
    if (nsize[nd] != 1) return false;
    nstride[nd] = 1;
  }
  return true;
}

/* The shape asked for, with its -1 inferred; checks it has t's element count. */
static int ops_infer_shape(qt_ctx *ctx, const char *op, const qt_tensor *t, int ndim,
                           const int64_t *size, int64_t *shape) {
  char s1[OPS_SHAPE_LEN];
  if (ndim < 0 || ndim > QT_MAXDIM)
    return qt_errorf(&ctx->err, "%s: %d dimensions (at most %d)", op, ndim, QT_MAXDIM);
  int infer = -1;
  int64_t known = 1;
  bool overflow = false;
  for (int d = 0; d < ndim; d++) {
    shape[d] = size[d];
    if (size[d] == -1) {
      if (infer >= 0)
        return qt_errorf(&ctx->err, "%s: only one size may be -1 (shape %s)", op,
                         qt_shape_str(ndim, size, s1, sizeof s1));
      infer = d;
    } else if (size[d] < 0) {
      return qt_errorf(&ctx->err, "%s: negative size %lld in shape %s", op, (long long)size[d],
                       qt_shape_str(ndim, size, s1, sizeof s1));
    } else if (__builtin_mul_overflow(known, size[d], &known)) {
      overflow = true;
    }
  }
  for (int d = 0; d < ndim; d++)
    if (size[d] == 0) known = 0, overflow = false;
  int64_t numel = qt_numel(t);
  if (infer >= 0) {
    if (known == 0 && !overflow)
      return qt_errorf(&ctx->err, "%s: shape %s is ambiguous (-1 could be any size)", op,
                       qt_shape_str(ndim, size, s1, sizeof s1));
    if (overflow || numel % known != 0)
      return qt_errorf(&ctx->err, "%s: shape %s does not match %lld elements", op,
                       qt_shape_str(ndim, size, s1, sizeof s1), (long long)numel);
    shape[infer] = numel / known;
  } else if (overflow || known != numel) {
    return qt_errorf(&ctx->err, "%s: shape %s does not match %lld elements", op,
                     qt_shape_str(ndim, size, s1, sizeof s1), (long long)numel);
  }
  return 0;
}

static void ops_share_with_shape(qt_tensor *out, const qt_tensor *t, int ndim,
                                 const int64_t *size, const int64_t *stride) {
  qt_tensor_share(out, t);
  out->ndim = ndim;
  for (int d = 0; d < ndim; d++) out->size[d] = size[d], out->stride[d] = stride[d];
  for (int d = ndim; d < QT_MAXDIM; d++) out->size[d] = 0, out->stride[d] = 0;
}

static int ops_view(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *t, int ndim,
                    const int64_t *size, bool copy_if_needed) {
  if (ops_live(ctx, op, t)) return -1;
  int64_t shape[QT_MAXDIM], stride[QT_MAXDIM];
  if (ops_infer_shape(ctx, op, t, ndim, size, shape)) return -1;
  if (ops_view_strides(t->ndim, t->size, t->stride, ndim, shape, stride)) {
    ops_share_with_shape(out, t, ndim, shape, stride);
    return 0;
  }
  if (!copy_if_needed) {
    char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
    return qt_errorf(&ctx->err,
                     "%s: shape %s is not compatible with the strides of %s tensor (use reshape)",
                     op, qt_shape_str(ndim, shape, s1, sizeof s1), ops_shape(t, s2));
  }
  qt_tensor copy;
  if (ops_copy_new(ctx, op, &copy, t, t->dtype)) return -1;
  qt_contiguous_strides(ndim, shape, stride);
  ops_share_with_shape(out, &copy, ndim, shape, stride);
  qt_tensor_release(&copy);
  return 0;
}

int qt_view_as(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int ndim,
               const int64_t *size) {
  return ops_view(ctx, "view", out, t, ndim, size, false);
}

int qt_reshape(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int ndim, const int64_t *size) {
  return ops_view(ctx, "reshape", out, t, ndim, size, true);
}

int qt_narrow(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim, int64_t start,
              int64_t length) {
  const char *op = "narrow";
  if (ops_live(ctx, op, t) || ops_check_dim(ctx, op, dim, t->ndim)) return -1;
  int64_t n = t->size[dim];
  if (start < 0 || start > n || length < 0 || length > n - start)
    return qt_errorf(&ctx->err,
                     "%s: start %lld with length %lld out of range for dim %d of size %lld", op,
                     (long long)start + 1, (long long)length, dim + 1, (long long)n);
  qt_tensor_share(out, t);
  if (length > 0) out->offset += start * t->stride[dim];
  out->size[dim] = length;
  return 0;
}

int qt_select(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim, int64_t i) {
  const char *op = "select";
  if (ops_live(ctx, op, t) || ops_check_dim(ctx, op, dim, t->ndim)) return -1;
  if (i < 0 || i >= t->size[dim])
    return qt_errorf(&ctx->err, "%s: index %lld out of range (1..%lld) for dim %d", op,
                     (long long)i + 1, (long long)t->size[dim], dim + 1);
  qt_tensor_share(out, t);
  out->offset += i * t->stride[dim];
  for (int d = dim; d + 1 < t->ndim; d++) {
    out->size[d] = t->size[d + 1];
    out->stride[d] = t->stride[d + 1];
  }
  out->ndim = t->ndim - 1;
  out->size[out->ndim] = 0;
  out->stride[out->ndim] = 0;
  return 0;
}

int qt_transpose(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int d1, int d2) {
  const char *op = "transpose";
  if (ops_live(ctx, op, t) || ops_check_dim(ctx, op, d1, t->ndim) ||
      ops_check_dim(ctx, op, d2, t->ndim))
    return -1;
  qt_tensor_share(out, t);
  out->size[d1] = t->size[d2], out->stride[d1] = t->stride[d2];
  out->size[d2] = t->size[d1], out->stride[d2] = t->stride[d1];
  return 0;
}

int qt_permute(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int n, const int *perm) {
  const char *op = "permute";
  if (ops_live(ctx, op, t)) return -1;
  if (n != t->ndim)
    return qt_errorf(&ctx->err, "%s: %d dims given for a %d-d tensor", op, n, t->ndim);
  bool seen[QT_MAXDIM] = { false };
  for (int d = 0; d < n; d++) {
    if (ops_check_dim(ctx, op, perm[d], t->ndim)) return -1;
    if (seen[perm[d]])
      return qt_errorf(&ctx->err, "%s: dim %d appears twice", op, perm[d] + 1);
    seen[perm[d]] = true;
  }
  qt_tensor_share(out, t);
  for (int d = 0; d < n; d++) {
    out->size[d] = t->size[perm[d]];
    out->stride[d] = t->stride[perm[d]];
  }
  return 0;
}

/* torch.expand: new leading dims and size-1 dims broadcast with stride 0; a -1 keeps an
** existing dim's size. */
int qt_expand(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int ndim, const int64_t *size) {
  const char *op = "expand";
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  if (ops_live(ctx, op, t)) return -1;
  if (ndim < 0 || ndim > QT_MAXDIM)
    return qt_errorf(&ctx->err, "%s: %d dimensions (at most %d)", op, ndim, QT_MAXDIM);
  int64_t shape[QT_MAXDIM], stride[QT_MAXDIM];
  for (int d = 0; d < ndim; d++) {
    int td = d - (ndim - t->ndim);
    shape[d] = (size[d] == -1 && td >= 0) ? t->size[td] : size[d];
  }
  if (!ops_expand_strides(t, ndim, shape, stride))
    return qt_errorf(&ctx->err, "%s: cannot expand shape %s to %s", op, ops_shape(t, s1),
                     qt_shape_str(ndim, size, s2, sizeof s2));
  int64_t unused[QT_MAXDIM];
  if (qt_contiguous_strides(ndim, shape, unused) < 0)  /* the element count must fit */
    return qt_errorf(&ctx->err, "%s: shape %s is too large", op,
                     qt_shape_str(ndim, shape, s2, sizeof s2));
  ops_share_with_shape(out, t, ndim, shape, stride);
  return 0;
}

/* ================================================================== copies and moves */

int qt_contiguous(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t) {
  if (ops_live(ctx, "contiguous", t)) return -1;
  if (qt_is_contiguous(t)) {
    qt_tensor_share(out, t);
    return 0;
  }
  return ops_copy_new(ctx, "contiguous", out, t, t->dtype);
}

int qt_clone(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t) {
  if (ops_live(ctx, "clone", t)) return -1;
  return ops_copy_new(ctx, "clone", out, t, t->dtype);
}

int qt_to_dtype(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, qt_dtype dtype) {
  if (ops_live(ctx, "to", t) || ops_check_dtype(ctx, "to", dtype)) return -1;
  return ops_cast(ctx, "to", out, t, dtype);
}

/* Contiguous bytes between a device and host memory, or straight between two views of
** the CPU device. */
static int ops_download(qt_ctx *ctx, const char *op, qt_device *dev, void *host, const void *src,
                        size_t nbytes) {
  if (nbytes == 0) return 0;
  if (dev->iface->download == NULL) {
    if (dev->kind != QT_DEV_CPU) return ops_unsupported(ctx, op, dev);
    memcpy(host, src, nbytes);
    return 0;
  }
  return dev->iface->download(dev, host, src, nbytes, &ctx->err);
}

static int ops_upload(qt_ctx *ctx, const char *op, qt_device *dev, void *dst, const void *host,
                      size_t nbytes) {
  if (nbytes == 0) return 0;
  if (dev->iface->upload == NULL) {
    if (dev->kind != QT_DEV_CPU) return ops_unsupported(ctx, op, dev);
    memcpy(dst, host, nbytes);
    return 0;
  }
  return dev->iface->upload(dev, dst, host, nbytes, &ctx->err);
}

static void *ops_data(const qt_tensor *t) {
  qt_view v;
  qt_view_of(&v, t);
  return v.data;
}

static size_t ops_nbytes(const qt_tensor *t) { return (size_t)qt_numel(t) * qt_elsize(t->dtype); }

/* dst = src across two devices (src broadcast to dst's shape, any dtypes). The bytes move
** once, in src's dtype and shape (broadcasting and conversion happen on the receiving
** side, so the wire carries the smallest form): src is made contiguous on its device,
** then downloaded to host memory and/or uploaded to dst's device. When the CPU end is
** contiguous, of src's dtype and shape, the bytes go straight into (or out of) it;
** otherwise through a temporary and the receiving device's copy slot. GPU->GPU of two
** ordinals goes through host memory for now (peer copies come with multi-GPU work). */
static int ops_copy_across(qt_ctx *ctx, const char *op, qt_tensor *dst, const qt_tensor *src) {
  qt_device *sdev = ops_device(src), *ddev = ops_device(dst);
  qt_device *cpu = qt_cpu_device();
  int rc = -1;
  qt_tensor sc, host, staged;
  qt_tensor_init(&sc);
  qt_tensor_init(&host);
  qt_tensor_init(&staged);
  bool direct = qt_is_contiguous(dst) && dst->dtype == src->dtype && ops_same_shape(dst, src);
  const qt_tensor *from_host;  /* src's elements in host memory, contiguous */

  if (qt_numel(dst) == 0) return 0;
  if (qt_contiguous(ctx, &sc, src)) goto cleanup;
  if (sdev->kind == QT_DEV_CPU) {
    from_host = &sc;
  } else {
    if (ddev->kind == QT_DEV_CPU && direct) {
      rc = ops_download(ctx, op, sdev, ops_data(dst), ops_data(&sc), ops_nbytes(&sc));
      goto cleanup;
    }
    if (ops_alloc(ctx, op, &host, cpu, sc.dtype, sc.ndim, sc.size)) goto cleanup;
    if (ops_download(ctx, op, sdev, ops_data(&host), ops_data(&sc), ops_nbytes(&sc)))
      goto cleanup;
    from_host = &host;
  }

  const qt_tensor *arrived;  /* src's elements on dst's device, contiguous */
  if (ddev->kind == QT_DEV_CPU) {
    arrived = from_host;
  } else if (direct) {
    rc = ops_upload(ctx, op, ddev, ops_data(dst), ops_data(from_host), ops_nbytes(from_host));
    goto cleanup;
  } else {
    if (ops_alloc(ctx, op, &staged, ddev, from_host->dtype, from_host->ndim, from_host->size))
      goto cleanup;
    if (ops_upload(ctx, op, ddev, ops_data(&staged), ops_data(from_host), ops_nbytes(from_host)))
      goto cleanup;
    arrived = &staged;
  }
  qt_view dv, sv;
  qt_view_of(&dv, dst);
  ops_view_expanded(&sv, arrived, dst->ndim, dst->size);
  rc = ops_copy_views(ctx, op, ddev, &dv, &sv);
cleanup:
  qt_tensor_release(&sc);
  qt_tensor_release(&host);
  qt_tensor_release(&staged);
  return rc;
}

int qt_to_device(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, qt_device *dev) {
  const char *op = "to";
  if (ops_live(ctx, op, t)) return -1;
  if (dev == NULL) return qt_errorf(&ctx->err, "%s: no device", op);
  if (ops_device(t) == dev) {
    qt_tensor_share(out, t);
    return 0;
  }
  qt_tensor res;
  qt_tensor_init(&res);
  if (ops_alloc(ctx, op, &res, dev, t->dtype, t->ndim, t->size)) return -1;
  if (ops_copy_across(ctx, op, &res, t)) {
    qt_tensor_release(&res);
    return -1;
  }
  *out = res;
  return 0;
}

int qt_copy_(qt_ctx *ctx, qt_tensor *dst, const qt_tensor *src) {
  const char *op = "copy_";
  if (ops_live(ctx, op, dst) || ops_live(ctx, op, src) || ops_check_writable(ctx, op, dst))
    return -1;
  int64_t stride[QT_MAXDIM];
  if (!ops_expand_strides(src, dst->ndim, dst->size, stride)) {
    char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
    return qt_errorf(&ctx->err, "%s: shape %s cannot be broadcast to %s", op, ops_shape(src, s1),
                     ops_shape(dst, s2));
  }
  if (ops_device(dst) != ops_device(src)) return ops_copy_across(ctx, op, dst, src);
  if (dst->storage == src->storage && ops_same_geometry(dst, src)) return 0;

  int rc = -1;
  qt_tensor tmp;
  qt_tensor_init(&tmp);
  const qt_tensor *from = src;
  if (ops_may_overlap(dst, src)) {
    if (ops_copy_new(ctx, op, &tmp, src, src->dtype)) goto cleanup;
    from = &tmp;
  }
  qt_view dv, sv;
  qt_view_of(&dv, dst);
  ops_view_expanded(&sv, from, dst->ndim, dst->size);
  rc = ops_copy_views(ctx, op, ops_device(dst), &dv, &sv);
cleanup:
  qt_tensor_release(&tmp);
  return rc;
}

/* ================================================================== element access */

static int ops_element_offset(qt_ctx *ctx, const char *op, const qt_tensor *t, const int64_t *pos,
                              int64_t *offset) {
  int64_t off = t->offset;
  for (int d = 0; d < t->ndim; d++) {
    if (pos[d] < 0 || pos[d] >= t->size[d])
      return qt_errorf(&ctx->err, "%s: index %lld out of range (1..%lld) for dim %d", op,
                       (long long)pos[d] + 1, (long long)t->size[d], d + 1);
    off += pos[d] * t->stride[d];
  }
  *offset = off;
  return 0;
}

int qt_get(qt_ctx *ctx, const qt_tensor *t, const int64_t *pos, qt_scalar *value) {
  const char *op = "get";
  int64_t off;
  if (ops_live(ctx, op, t) || ops_element_offset(ctx, op, t, pos, &off)) return -1;
  size_t es = qt_elsize(t->dtype);
  union { float f32; double f64; int32_t i32; int64_t i64; } cell;
  const char *src = (const char *)t->storage->data + (size_t)off * es;
  if (ops_download(ctx, op, ops_device(t), &cell, src, es)) return -1;
  switch (t->dtype) {
    case QT_F32: *value = ops_scalar_from_double(cell.f32); break;
    case QT_F64: *value = ops_scalar_from_double(cell.f64); break;
    case QT_I32: *value = qt_scalar_i(cell.i32); break;
    case QT_I64: *value = qt_scalar_i(cell.i64); break;
    default: return ops_check_dtype(ctx, op, t->dtype);
  }
  return 0;
}

int qt_set(qt_ctx *ctx, qt_tensor *t, const int64_t *pos, qt_scalar value) {
  const char *op = "set";
  int64_t off;
  if (ops_live(ctx, op, t) || ops_element_offset(ctx, op, t, pos, &off)) return -1;
  size_t es = qt_elsize(t->dtype);
  union { float f32; double f64; int32_t i32; int64_t i64; } cell;
  switch (t->dtype) {
    case QT_F32: cell.f32 = (float)value.f; break;
    case QT_F64: cell.f64 = value.f; break;
    case QT_I32: cell.i32 = (int32_t)(uint32_t)(uint64_t)value.i; break;  /* wraps */
    case QT_I64: cell.i64 = value.i; break;
    default: return ops_check_dtype(ctx, op, t->dtype);
  }
  char *dst = (char *)t->storage->data + (size_t)off * es;
  return ops_upload(ctx, op, ops_device(t), dst, &cell, es);
}

/* Row-major elements into `host`. On the CPU a strided tensor is copied by the copy slot
** straight into a contiguous view of `host` (no temporary); a GPU tensor is made
** contiguous on the GPU and downloaded in one transfer. */
int qt_read_all(qt_ctx *ctx, const qt_tensor *t, void *host) {
  const char *op = "read";
  if (ops_live(ctx, op, t)) return -1;
  if (qt_numel(t) == 0) return 0;
  qt_device *dev = ops_device(t);
  if (dev->kind == QT_DEV_CPU && !qt_is_contiguous(t)) {
    qt_view dv, sv;
    qt_view_of(&sv, t);
    dv = sv;
    dv.data = host;
    qt_contiguous_strides(t->ndim, t->size, dv.stride);
    return ops_copy_views(ctx, op, dev, &dv, &sv);
  }
  qt_tensor sc;
  if (qt_contiguous(ctx, &sc, t)) return -1;
  int rc = ops_download(ctx, op, dev, host, ops_data(&sc), ops_nbytes(&sc));
  qt_tensor_release(&sc);
  return rc;
}

int qt_sync(qt_ctx *ctx, qt_device *dev) {
  if (dev == NULL) return qt_errorf(&ctx->err, "sync: no device");
  if (dev->iface->sync == NULL) return 0;
  return dev->iface->sync(dev, &ctx->err);
}

/* ================================================================== arithmetic */

/* The dtype a binary op computes in and returns, for two tensors. */
static qt_dtype ops_binary_dtype(qt_binop op, qt_dtype a, qt_dtype b) {
  qt_dtype d = qt_promote(a, b);
  if (op == QT_DIV && !qt_is_float(d)) d = QT_F64;
  return d;
}

/* For a tensor and a Lua number: the dtype the device computes in (*compute) and the
** result's dtype (*result), and the scalar as the device should see it.
**   - a float number with an integer tensor, and `/` of an integer tensor: float64;
**   - otherwise the tensor's dtype;
**   - an int32 tensor with an integer outside int32's range: comparisons are computed in
**     int64 (exact, as NumPy 2 compares out-of-bounds Python integers); any other op is
**     an error, as in NumPy 2, since int32 cannot hold the number (it never wraps);
**   - an integer raised to a negative integer power is an error, as in NumPy (the
**     answer is not an integer).
** scalar_first: the number is the left operand (2 ^ t: then t holds the exponents, and
** the caller checks them). Returns 0, or -1 with the message. */
static int ops_scalar_dtypes(qt_ctx *ctx, const char *name, qt_binop op, qt_dtype a,
                             qt_scalar *s, bool s_is_float, bool scalar_first,
                             qt_dtype *compute, qt_dtype *result) {
  qt_dtype d = a;
  if (!qt_is_float(a) && (s_is_float || op == QT_DIV)) d = QT_F64;
  *compute = *result = d;
  if (s_is_float) *s = ops_scalar_from_double(s->f);
  else *s = qt_scalar_i(s->i);
  if (d == QT_I32 && (s->i < INT32_MIN || s->i > INT32_MAX)) {
    if (!ops_is_comparison(op))
      return qt_errorf(&ctx->err, "%s: %lld is out of range for an int32 tensor (convert it "
                       "with :to(\"int64\") first)", name, (long long)s->i);
    *compute = QT_I64;
  }
  if (op == QT_POW && !qt_is_float(d) && !scalar_first && s->i < 0)
    return qt_errorf(&ctx->err, "%s: integers to negative integer powers are not allowed "
                     "(exponent %lld)", name, (long long)s->i);
  return 0;
}

/* An integer power's exponents, when they come from a tensor: all >= 0 (one min
** reduction, on the exponents' device). */
static int ops_check_exponents(qt_ctx *ctx, const char *name, const qt_tensor *e) {
  if (qt_is_float(e->dtype) || qt_numel(e) == 0) return 0;
  qt_tensor m;
  qt_tensor_init(&m);
  int64_t pos[QT_MAXDIM] = {0};
  qt_scalar v;
  int rc = qt_reduce(ctx, &m, QT_MIN, e, -1);
  if (rc == 0) rc = qt_get(ctx, &m, pos, &v);
  qt_tensor_release(&m);
  if (rc != 0) return qt_err_rename(&ctx->err, "min", name);
  if (v.i < 0)
    return qt_errorf(&ctx->err, "%s: integers to negative integer powers are not allowed "
                     "(exponent %lld)", name, (long long)v.i);
  return 0;
}

static int ops_check_binop(qt_ctx *ctx, qt_binop op) {
  if ((int)op < 0 || (int)op >= QT_NBINOPS)
    return qt_errorf(&ctx->err, "binary: unknown op %d", (int)op);
  return 0;
}

/* The in-place name of an op ("add" -> "add_"), for messages. */
static const char *ops_inplace_name(const char *name, char *buf, size_t len) {
  snprintf(buf, len, "%s_", name);
  return buf;
}

/* An in-place op may store a wider result of its own kind (float64 into float32, int64
** into int32, by conversion) but not a float into an integer tensor; comparisons give 1
** or 0, which every dtype holds. */
static int ops_check_storable(qt_ctx *ctx, const char *op, bool is_comparison, qt_dtype result,
                              qt_dtype target) {
  if (!is_comparison && qt_is_float(result) && !qt_is_float(target))
    return qt_errorf(&ctx->err, "%s: cannot store %s result in %s tensor", op,
                     qt_dtypes[result].name, qt_dtypes[target].name);
  return 0;
}

int qt_binary(qt_ctx *ctx, qt_tensor *out, qt_binop op, const qt_tensor *a, const qt_tensor *b) {
  if (ops_check_binop(ctx, op)) return -1;
  const char *name = ops_binop_names[op];
  if (ops_live(ctx, name, a) || ops_live(ctx, name, b) || ops_same_device(ctx, name, a, b))
    return -1;
  qt_device *dev = ops_device(a);
  if (dev->iface->binary == NULL) return ops_unsupported(ctx, name, dev);
  int ndim = 0;
  int64_t size[QT_MAXDIM];
  if (ops_broadcast_shape(ctx, name, a, b, &ndim, size)) return -1;
  qt_dtype dtype = ops_binary_dtype(op, a->dtype, b->dtype);
  if (op == QT_POW && !qt_is_float(dtype) && ops_check_exponents(ctx, name, b)) return -1;

  int rc = -1;
  qt_tensor ca, cb, res;
  qt_tensor_init(&ca);
  qt_tensor_init(&cb);
  qt_tensor_init(&res);
  if (ops_cast(ctx, name, &ca, a, dtype) || ops_cast(ctx, name, &cb, b, dtype)) goto cleanup;
  if (ops_alloc(ctx, name, &res, dev, dtype, ndim, size)) goto cleanup;
  if (qt_numel(&res) > 0) {
    qt_view dv, av, bv;
    qt_view_of(&dv, &res);
    ops_view_expanded(&av, &ca, ndim, size);
    ops_view_expanded(&bv, &cb, ndim, size);
    if (dev->iface->binary(dev, op, &dv, &av, &bv, &ctx->err)) goto cleanup;
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  qt_tensor_release(&ca);
  qt_tensor_release(&cb);
  qt_tensor_release(&res);
  return rc;
}

/* a = a op b. When a's dtype is the compute dtype, the device writes into a directly
** (b is read from a copy if it shares a's storage with another geometry); otherwise the
** op runs in a temporary of the compute dtype, converted back into a at the end. */
int qt_binary_(qt_ctx *ctx, qt_binop op, qt_tensor *a, const qt_tensor *b) {
  if (ops_check_binop(ctx, op)) return -1;
  char name[24];
  ops_inplace_name(ops_binop_names[op], name, sizeof name);
  if (ops_live(ctx, name, a) || ops_live(ctx, name, b) || ops_same_device(ctx, name, a, b))
    return -1;
  qt_device *dev = ops_device(a);
  if (dev->iface->binary == NULL) return ops_unsupported(ctx, name, dev);
  qt_dtype dtype = ops_binary_dtype(op, a->dtype, b->dtype);
  if (ops_check_storable(ctx, name, ops_is_comparison(op), dtype, a->dtype)) return -1;
  if (op == QT_POW && !qt_is_float(dtype) && ops_check_exponents(ctx, name, b)) return -1;
  int64_t stride[QT_MAXDIM];
  if (!ops_expand_strides(b, a->ndim, a->size, stride)) {
    char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
    return qt_errorf(&ctx->err, "%s: shape %s cannot be broadcast to %s", name, ops_shape(b, s1),
                     ops_shape(a, s2));
  }
  if (ops_check_writable(ctx, name, a)) return -1;
  if (qt_numel(a) == 0) return 0;

  int rc = -1;
  qt_tensor cb, work;
  qt_tensor_init(&cb);
  qt_tensor_init(&work);
  if (a->dtype == dtype && ops_may_overlap(a, b) && b->dtype == dtype) {
    if (ops_copy_new(ctx, name, &cb, b, dtype)) goto cleanup;
  } else if (ops_cast(ctx, name, &cb, b, dtype)) {
    goto cleanup;
  }
  const qt_tensor *target = a;
  if (a->dtype != dtype) {
    if (ops_copy_new(ctx, name, &work, a, dtype)) goto cleanup;
    target = &work;
  }
  qt_view dv, bv;
  qt_view_of(&dv, target);
  ops_view_expanded(&bv, &cb, a->ndim, a->size);
  if (dev->iface->binary(dev, op, &dv, &dv, &bv, &ctx->err)) goto cleanup;
  if (target == &work) {
    qt_view av;
    qt_view_of(&av, a);
    if (ops_copy_views(ctx, name, dev, &av, &dv)) goto cleanup;
  }
  rc = 0;
cleanup:
  qt_tensor_release(&cb);
  qt_tensor_release(&work);
  return rc;
}

int qt_binary_scalar(qt_ctx *ctx, qt_tensor *out, qt_binop op, const qt_tensor *a, qt_scalar s,
                     bool s_is_float, bool scalar_first) {
  if (ops_check_binop(ctx, op)) return -1;
  const char *name = ops_binop_names[op];
  if (ops_live(ctx, name, a)) return -1;
  qt_device *dev = ops_device(a);
  if (dev->iface->binary_scalar == NULL) return ops_unsupported(ctx, name, dev);
  qt_dtype compute, result;
  if (ops_scalar_dtypes(ctx, name, op, a->dtype, &s, s_is_float, scalar_first, &compute,
                        &result))
    return -1;
  if (op == QT_POW && scalar_first && !qt_is_float(compute) && ops_check_exponents(ctx, name, a))
    return -1;

  int rc = -1;
  qt_tensor ca, work, res;
  qt_tensor_init(&ca);
  qt_tensor_init(&work);
  qt_tensor_init(&res);
  if (ops_cast(ctx, name, &ca, a, compute)) goto cleanup;
  if (ops_alloc_like(ctx, name, &res, a, result)) goto cleanup;
  if (qt_numel(&res) > 0) {
    qt_tensor *target = &res;
    if (compute != result) {
      if (ops_alloc_like(ctx, name, &work, a, compute)) goto cleanup;
      target = &work;
    }
    qt_view dv, av;
    qt_view_of(&dv, target);
    qt_view_of(&av, &ca);
    if (dev->iface->binary_scalar(dev, op, &dv, &av, s, scalar_first, &ctx->err)) goto cleanup;
    if (target == &work) {
      qt_view rv;
      qt_view_of(&rv, &res);
      if (ops_copy_views(ctx, name, dev, &rv, &dv)) goto cleanup;
    }
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  qt_tensor_release(&ca);
  qt_tensor_release(&work);
  qt_tensor_release(&res);
  return rc;
}

int qt_binary_scalar_(qt_ctx *ctx, qt_binop op, qt_tensor *a, qt_scalar s, bool s_is_float) {
  if (ops_check_binop(ctx, op)) return -1;
  char name[24];
  ops_inplace_name(ops_binop_names[op], name, sizeof name);
  if (ops_live(ctx, name, a)) return -1;
  qt_device *dev = ops_device(a);
  if (dev->iface->binary_scalar == NULL) return ops_unsupported(ctx, name, dev);
  qt_dtype compute, result;
  if (ops_scalar_dtypes(ctx, name, op, a->dtype, &s, s_is_float, false, &compute, &result))
    return -1;
  if (ops_check_storable(ctx, name, ops_is_comparison(op), result, a->dtype) ||
      ops_check_writable(ctx, name, a))
    return -1;
  if (qt_numel(a) == 0) return 0;

  int rc = -1;
  qt_tensor work;
  qt_tensor_init(&work);
  const qt_tensor *target = a;
  if (compute != a->dtype) {
    if (ops_copy_new(ctx, name, &work, a, compute)) goto cleanup;
    target = &work;
  }
  qt_view dv;
  qt_view_of(&dv, target);
  if (dev->iface->binary_scalar(dev, op, &dv, &dv, s, false, &ctx->err)) goto cleanup;
  if (target == &work) {
    qt_view av;
    qt_view_of(&av, a);
    if (ops_copy_views(ctx, name, dev, &av, &dv)) goto cleanup;
  }
  rc = 0;
cleanup:
  qt_tensor_release(&work);
  return rc;
}

static bool ops_unop_wants_float(qt_unop op) {
  return op == QT_EXP || op == QT_LOG || op == QT_SQRT || op == QT_TANH || op == QT_SIGMOID;
}

/* The slot's clamp bounds for dtype: the binding passes INT64_MIN/INT64_MAX for a missing
** integer bound, which an int32 device would truncate to garbage; bounds beyond int32's
** range clamp nothing, so they are saturated to it. */
static void ops_unop_params(qt_unop op, qt_dtype dtype, qt_scalar *p1, qt_scalar *p2) {
  if (op != QT_CLAMP || dtype != QT_I32) return;
  if (p1->i < INT32_MIN) p1->i = INT32_MIN;
  if (p1->i > INT32_MAX) p1->i = INT32_MAX;
  if (p2->i < INT32_MIN) p2->i = INT32_MIN;
  if (p2->i > INT32_MAX) p2->i = INT32_MAX;
}

static int ops_check_unop(qt_ctx *ctx, qt_unop op) {
  if ((int)op < 0 || (int)op >= QT_NUNOPS)
    return qt_errorf(&ctx->err, "unary: unknown op %d", (int)op);
  return 0;
}

/* float_params: p1/p2 are float numbers (clamp bounds), so an integer tensor computes in
** float64, as with a float scalar in a binary op. */
static int ops_unary(qt_ctx *ctx, qt_tensor *out, qt_unop op, const qt_tensor *a, qt_scalar p1,
                     qt_scalar p2, bool float_params) {
  if (ops_check_unop(ctx, op)) return -1;
  const char *name = ops_unop_names[op];
  if (ops_live(ctx, name, a)) return -1;
  qt_device *dev = ops_device(a);
  if (dev->iface->unary == NULL) return ops_unsupported(ctx, name, dev);
  bool wants_float = ops_unop_wants_float(op) || float_params;
  qt_dtype dtype = (wants_float && !qt_is_float(a->dtype)) ? QT_F64 : a->dtype;
  ops_unop_params(op, dtype, &p1, &p2);

  int rc = -1;
  qt_tensor ca, res;
  qt_tensor_init(&ca);
  qt_tensor_init(&res);
  if (ops_cast(ctx, name, &ca, a, dtype) || ops_alloc_like(ctx, name, &res, a, dtype))
    goto cleanup;
  if (qt_numel(&res) > 0) {
    qt_view dv, sv;
    qt_view_of(&dv, &res);
    qt_view_of(&sv, &ca);
    if (dev->iface->unary(dev, op, &dv, &sv, p1, p2, &ctx->err)) goto cleanup;
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  qt_tensor_release(&ca);
  qt_tensor_release(&res);
  return rc;
}

int qt_unary(qt_ctx *ctx, qt_tensor *out, qt_unop op, const qt_tensor *a, qt_scalar p1,
             qt_scalar p2) {
  return ops_unary(ctx, out, op, a, p1, p2, false);
}

static int ops_unary_(qt_ctx *ctx, qt_unop op, qt_tensor *a, qt_scalar p1, qt_scalar p2,
                      bool float_params) {
  if (ops_check_unop(ctx, op)) return -1;
  char name[24];
  ops_inplace_name(ops_unop_names[op], name, sizeof name);
  if (ops_live(ctx, name, a)) return -1;
  qt_device *dev = ops_device(a);
  if (dev->iface->unary == NULL) return ops_unsupported(ctx, name, dev);
  if ((ops_unop_wants_float(op) || float_params) && !qt_is_float(a->dtype))
    return ops_check_storable(ctx, name, false, QT_F64, a->dtype);
  if (ops_check_writable(ctx, name, a)) return -1;
  if (qt_numel(a) == 0) return 0;
  ops_unop_params(op, a->dtype, &p1, &p2);
  qt_view v;
  qt_view_of(&v, a);
  return dev->iface->unary(dev, op, &v, &v, p1, p2, &ctx->err);
}

int qt_unary_(qt_ctx *ctx, qt_unop op, qt_tensor *a, qt_scalar p1, qt_scalar p2) {
  return ops_unary_(ctx, op, a, p1, p2, false);
}

int qt_clamp(qt_ctx *ctx, qt_tensor *out, const qt_tensor *a, qt_scalar lo, qt_scalar hi,
             bool float_bounds) {
  return ops_unary(ctx, out, QT_CLAMP, a, lo, hi, float_bounds);
}

int qt_clamp_(qt_ctx *ctx, qt_tensor *a, qt_scalar lo, qt_scalar hi, bool float_bounds) {
  return ops_unary_(ctx, QT_CLAMP, a, lo, hi, float_bounds);
}

/* ================================================================== reductions */

/* Result dtypes per device.h: SUM of ints gives int64, MEAN of ints is computed on a
** float64 copy, ARGMAX/ARGMIN give int64, MAX/MIN keep the dtype. An empty reduction is
** answered here without the device: SUM 0, MEAN NaN, the others an error. */
int qt_reduce(qt_ctx *ctx, qt_tensor *out, qt_redop op, const qt_tensor *t, int dim) {
  if ((int)op < 0 || (int)op >= QT_NREDOPS)
    return qt_errorf(&ctx->err, "reduce: unknown op %d", (int)op);
  const char *name = ops_redop_names[op];
  if (ops_live(ctx, name, t)) return -1;
  if (dim != -1 && ops_check_dim(ctx, name, dim, t->ndim)) return -1;
  qt_device *dev = ops_device(t);
  bool is_int = !qt_is_float(t->dtype);
  qt_dtype src_dtype = (op == QT_MEAN && is_int) ? QT_F64 : t->dtype;
  qt_dtype dtype = src_dtype;
  if (op == QT_SUM && is_int) dtype = QT_I64;
  if (op == QT_ARGMAX || op == QT_ARGMIN) dtype = QT_I64;

  int ndim = 0;
  int64_t size[QT_MAXDIM];
  int64_t extent = qt_numel(t);
  if (dim >= 0) {
    extent = t->size[dim];
    for (int d = 0; d < t->ndim; d++)
      if (d != dim) size[ndim++] = t->size[d];
  }

  /* max, min and their positions have no answer over nothing, whatever the other dims
  ** (an empty result included: zeros(0, 0):argmax(1) too), as in NumPy */
  if (extent == 0 && op != QT_SUM && op != QT_MEAN) {
    if (dim >= 0) return qt_errorf(&ctx->err, "%s: empty tensor (dim %d has size 0)", name, dim + 1);
    return qt_errorf(&ctx->err, "%s: empty tensor", name);
  }

  int rc = -1;
  qt_tensor src, res;
  qt_tensor_init(&src);
  qt_tensor_init(&res);
  if (ops_alloc(ctx, name, &res, dev, dtype, ndim, size)) goto cleanup;
  if (qt_numel(&res) > 0) {
    qt_view dv;
    qt_view_of(&dv, &res);
    if (extent == 0) {
      if (op == QT_SUM) {
        if (ops_fill_view(ctx, name, dev, &dv, qt_scalar_i(0))) goto cleanup;
      } else {
        if (ops_fill_view(ctx, name, dev, &dv, ops_scalar_from_double(NAN))) goto cleanup;
      }
    } else {
      if (dev->iface->reduce == NULL) {
        ops_unsupported(ctx, name, dev);
        goto cleanup;
      }
      if (ops_cast(ctx, name, &src, t, src_dtype)) goto cleanup;
      qt_view sv;
      qt_view_of(&sv, &src);
      if (dev->iface->reduce(dev, op, &dv, &sv, dim, &ctx->err)) goto cleanup;
    }
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  qt_tensor_release(&src);
  qt_tensor_release(&res);
  return rc;
}

/* ================================================================== indexing */

/* Shared checks of the index operand: live, on the data's device, int32 or int64. */
static int ops_check_index(qt_ctx *ctx, const char *op, const qt_tensor *data,
                           const qt_tensor *index) {
  if (ops_live(ctx, op, index) || ops_same_device(ctx, op, data, index)) return -1;
  return ops_check_index_dtype(ctx, op, index);
}

/* torch.gather's shape rule: same ndim, and index.size(d) <= other.size(d) for every d
** (d != dim unless all_dims). `what` names the other operand in the message. */
static int ops_check_gather_shape(qt_ctx *ctx, const char *op, const qt_tensor *index,
                                  const qt_tensor *other, const char *what, int dim,
                                  bool all_dims) {
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  if (index->ndim != other->ndim)
    return qt_errorf(&ctx->err, "%s: index shape %s and %s shape %s differ in dims (%d and %d)",
                     op, ops_shape(index, s1), what, ops_shape(other, s2), index->ndim,
                     other->ndim);
  for (int d = 0; d < index->ndim; d++) {
    if ((all_dims || d != dim) && index->size[d] > other->size[d])
      return qt_errorf(&ctx->err,
                       "%s: index shape %s does not fit %s shape %s (dim %d: %lld > %lld)", op,
                       ops_shape(index, s1), what, ops_shape(other, s2), d + 1,
                       (long long)index->size[d], (long long)other->size[d]);
  }
  return 0;
}

/* Index values checked on the host, for the calls whose result (or source) is empty: the
** device is not called then (there is nothing to compute), but a bad index is an error
** whatever the shapes, with the message the devices give. */
static int ops_check_index_values(qt_ctx *ctx, const char *op, const qt_tensor *index,
                                  int64_t bound) {
  int64_t n = qt_numel(index);
  if (n == 0) return 0;
  void *host = malloc((size_t)n * qt_elsize(index->dtype));
  if (host == NULL)
    return qt_errorf(&ctx->err, "%s: out of memory reading %lld index values", op, (long long)n);
  int rc = qt_read_all(ctx, index, host);
  for (int64_t k = 0; rc == 0 && k < n; k++) {
    int64_t v = index->dtype == QT_I32 ? ((const int32_t *)host)[k] : ((const int64_t *)host)[k];
    if (v < 1 || v > bound)
      rc = qt_errorf(&ctx->err, "%s: index %lld out of range (1..%lld) at position %lld", op,
                     (long long)v, (long long)bound, (long long)(k + 1));
  }
  free(host);
  return rc;
}

static int ops_check_1d_index(qt_ctx *ctx, const char *op, const qt_tensor *index) {
  char s1[OPS_SHAPE_LEN];
  if (index->ndim != 1)
    return qt_errorf(&ctx->err, "%s: index must be 1-D, got shape %s", op, ops_shape(index, s1));
  return 0;
}

int qt_gather(qt_ctx *ctx, qt_tensor *out, const qt_tensor *src, int dim, const qt_tensor *index) {
  const char *op = "gather";
  if (ops_live(ctx, op, src) || ops_check_index(ctx, op, src, index) ||
      ops_check_dim(ctx, op, dim, src->ndim) ||
      ops_check_gather_shape(ctx, op, index, src, "src", dim, false))
    return -1;
  qt_device *dev = ops_device(src);
  if (dev->iface->gather == NULL) return ops_unsupported(ctx, op, dev);
  qt_tensor res;
  qt_tensor_init(&res);
  if (ops_alloc(ctx, op, &res, dev, src->dtype, index->ndim, index->size)) return -1;
  if (qt_numel(&res) > 0) {
    qt_view dv, sv, iv;
    qt_view_of(&dv, &res);
    qt_view_of(&sv, src);
    qt_view_of(&iv, index);
    if (dev->iface->gather(dev, &dv, &sv, dim, &iv, &ctx->err)) {
      qt_tensor_release(&res);
      return -1;
    }
  }
  *out = res;
  return 0;
}

int qt_index_select(qt_ctx *ctx, qt_tensor *out, const qt_tensor *src, int dim,
                    const qt_tensor *index) {
  const char *op = "index_select";
  if (ops_live(ctx, op, src) || ops_check_index(ctx, op, src, index) ||
      ops_check_dim(ctx, op, dim, src->ndim) || ops_check_1d_index(ctx, op, index))
    return -1;
  qt_device *dev = ops_device(src);
  if (dev->iface->index_select == NULL) return ops_unsupported(ctx, op, dev);
  int64_t size[QT_MAXDIM];
  for (int d = 0; d < src->ndim; d++) size[d] = src->size[d];
  size[dim] = index->size[0];
  qt_tensor res;
  qt_tensor_init(&res);
  if (ops_alloc(ctx, op, &res, dev, src->dtype, src->ndim, size)) return -1;
  if (qt_numel(&res) > 0) {
    qt_view dv, sv, iv;
    qt_view_of(&dv, &res);
    qt_view_of(&sv, src);
    qt_view_of(&iv, index);
    if (dev->iface->index_select(dev, &dv, &sv, dim, &iv, &ctx->err)) {
      qt_tensor_release(&res);
      return -1;
    }
  } else if (ops_check_index_values(ctx, op, index, src->size[dim])) {
    qt_tensor_release(&res);
    return -1;
  }
  *out = res;
  return 0;
}

int qt_take(qt_ctx *ctx, qt_tensor *out, const qt_tensor *src, const qt_tensor *index) {
  const char *op = "take";
  if (ops_live(ctx, op, src) || ops_check_index(ctx, op, src, index)) return -1;
  qt_device *dev = ops_device(src);
  if (dev->iface->take == NULL) return ops_unsupported(ctx, op, dev);
  qt_tensor res;
  qt_tensor_init(&res);
  if (ops_alloc(ctx, op, &res, dev, src->dtype, index->ndim, index->size)) return -1;
  if (qt_numel(&res) > 0) {
    qt_view dv, sv, iv;
    qt_view_of(&dv, &res);
    qt_view_of(&sv, src);
    qt_view_of(&iv, index);
    if (dev->iface->take(dev, &dv, &sv, &iv, &ctx->err)) {
      qt_tensor_release(&res);
      return -1;
    }
  }
  *out = res;
  return 0;
}

/* Devices name their index-value errors after the slot ("scatter: index 0 out of range
** ..."); the user called the in-place method, so the message is made to say "scatter_:".
** A message that already starts with the method's name is left alone. */
static int ops_slot_error_as(qt_ctx *ctx, const char *slot, const char *method) {
  return qt_err_rename(&ctx->err, slot, method);
}

/* The source operand of scatter_/index_add_ as the device wants it: dst's dtype, and
** never sharing memory with dst (a copy when it does). */
static int ops_source_for(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *dst,
                          const qt_tensor *src) {
  if (src->dtype == dst->dtype && src->storage == dst->storage)
    return ops_copy_new(ctx, op, out, src, src->dtype);
  return ops_cast(ctx, op, out, src, dst->dtype);
}

/* The index operand of an in-place op: a copy when it lives in dst's own storage (an
** int64 tensor scattering into itself), so the writes never change indices still to be
** read. */
static int ops_index_for(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *dst,
                         const qt_tensor *index) {
  if (index->storage == dst->storage) return ops_copy_new(ctx, op, out, index, index->dtype);
  qt_tensor_share(out, index);
  return 0;
}

int qt_scatter_(qt_ctx *ctx, qt_tensor *dst, int dim, const qt_tensor *index,
                const qt_tensor *src, qt_scalar value) {
  const char *op = "scatter_";
  if (ops_live(ctx, op, dst) || ops_check_index(ctx, op, dst, index) ||
      ops_check_dim(ctx, op, dim, dst->ndim))
    return -1;
  if (src != NULL) {
    if (ops_live(ctx, op, src) || ops_same_device(ctx, op, dst, src) ||
        ops_check_gather_shape(ctx, op, index, src, "src", dim, true))
      return -1;
  }
  if (ops_check_gather_shape(ctx, op, index, dst, "dst", dim, false) ||
      ops_check_writable(ctx, op, dst))
    return -1;
  qt_device *dev = ops_device(dst);
  if (dev->iface->scatter == NULL) return ops_unsupported(ctx, op, dev);
  if (qt_numel(index) == 0) return 0;
  /* nothing to write: the device is not called, but every index is still checked (into a
  ** dim of size 0, every one is out of range), here and now rather than at a later sync */
  if (qt_numel(dst) == 0) return ops_check_index_values(ctx, op, index, dst->size[dim]);

  if (src == NULL) {
    if (!qt_is_float(dst->dtype)) value = qt_scalar_i(value.i);
    else value = ops_scalar_from_double(value.f);
  }
  int rc = -1;
  qt_tensor cs, ci;
  qt_tensor_init(&cs);
  qt_tensor_init(&ci);
  qt_view dv, iv, sv;
  if (ops_index_for(ctx, op, &ci, dst, index)) goto cleanup;
  qt_view_of(&dv, dst);
  qt_view_of(&iv, &ci);
  if (src != NULL) {
    if (ops_source_for(ctx, op, &cs, dst, src)) goto cleanup;
    qt_view_of(&sv, &cs);
  }
  rc = dev->iface->scatter(dev, &dv, dim, &iv, src != NULL ? &sv : NULL, value, &ctx->err);
  if (rc) ops_slot_error_as(ctx, "scatter", op);
cleanup:
  qt_tensor_release(&cs);
  qt_tensor_release(&ci);
  return rc;
}

int qt_index_add_(qt_ctx *ctx, qt_tensor *dst, int dim, const qt_tensor *index,
                  const qt_tensor *src) {
  const char *op = "index_add_";
  if (ops_live(ctx, op, dst) || ops_check_index(ctx, op, dst, index) || ops_live(ctx, op, src) ||
      ops_same_device(ctx, op, dst, src) || ops_check_dim(ctx, op, dim, dst->ndim) ||
      ops_check_1d_index(ctx, op, index))
    return -1;
  bool fits = src->ndim == dst->ndim;
  for (int d = 0; fits && d < dst->ndim; d++)
    fits = src->size[d] == (d == dim ? index->size[0] : dst->size[d]);
  if (!fits) {
    char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
    return qt_errorf(&ctx->err,
                     "%s: src shape %s does not fit dst shape %s with %lld indices along dim %d",
                     op, ops_shape(src, s1), ops_shape(dst, s2), (long long)index->size[0],
                     dim + 1);
  }
  if (ops_check_writable(ctx, op, dst)) return -1;
  qt_device *dev = ops_device(dst);
  if (dev->iface->index_add == NULL) return ops_unsupported(ctx, op, dev);
  if (qt_numel(src) == 0 || qt_numel(dst) == 0)  /* nothing to add: the indices still count */
    return ops_check_index_values(ctx, op, index, dst->size[dim]);

  int rc = -1;
  qt_tensor cs, ci;
  qt_tensor_init(&cs);
  qt_tensor_init(&ci);
  if (ops_source_for(ctx, op, &cs, dst, src) || ops_index_for(ctx, op, &ci, dst, index))
    goto cleanup;
  qt_view dv, iv, sv;
  qt_view_of(&dv, dst);
  qt_view_of(&iv, &ci);
  qt_view_of(&sv, &cs);
  rc = dev->iface->index_add(dev, &dv, dim, &iv, &sv, &ctx->err);
  if (rc) ops_slot_error_as(ctx, "index_add", op);
cleanup:
  qt_tensor_release(&cs);
  qt_tensor_release(&ci);
  return rc;
}

/* ================================================================== matrix products */

/* One operand of a matmul, seen as a batch of (rows x cols) matrices. */
typedef struct ops_matrix {
  int64_t rows, cols;
  int64_t row_stride, col_stride;
  int nbatch;                   /* t's own batch dims (ndim - 2, or 0) */
} ops_matrix;

/* A 1-D a is a row (1 x K), a 1-D b a column (K x 1). Strides of size-1 matrix dims do
** not matter for the product; they are set to what a packed matrix would have, so a
** BLAS-backed device sees a valid leading dimension. */
static void ops_matrix_of(ops_matrix *m, const qt_tensor *t, bool is_left) {
  if (t->ndim == 1) {
    m->nbatch = 0;
    if (is_left) {
      m->rows = 1, m->cols = t->size[0];
      m->col_stride = t->stride[0], m->row_stride = 0;
    } else {
      m->rows = t->size[0], m->cols = 1;
      m->row_stride = t->stride[0], m->col_stride = 0;
    }
  } else {
    m->nbatch = t->ndim - 2;
    m->rows = t->size[t->ndim - 2], m->cols = t->size[t->ndim - 1];
    m->row_stride = t->stride[t->ndim - 2], m->col_stride = t->stride[t->ndim - 1];
  }
  if (m->rows == 1) m->row_stride = m->cols == 1 ? 1 : m->col_stride * m->cols;
  if (m->cols == 1) m->col_stride = m->rows == 1 ? 1 : m->row_stride * m->rows;
}

/* The batch stride that walks t's broadcast batch dims (nbatch, bsize; t's own dims
** aligned on the right, the rest stride 0) as one dim, or false when one stride cannot. */
static bool ops_batch_stride(const qt_tensor *t, const ops_matrix *m, int nbatch,
                             const int64_t *bsize, int64_t *bstride_all, int64_t *bstride) {
  for (int d = 0; d < nbatch; d++) {
    int td = d - (nbatch - m->nbatch);
    bstride_all[d] = (td >= 0 && t->size[td] == bsize[d]) ? t->stride[td] : 0;
  }
  int64_t inner_stride = 0, inner_size = 1;
  bool have_inner = false;
  for (int d = nbatch - 1; d >= 0; d--) {
    if (bsize[d] == 1) continue;
    if (have_inner && bstride_all[d] != inner_stride * inner_size) return false;
    if (!have_inner) *bstride = bstride_all[d];
    have_inner = true;
    inner_stride = bstride_all[d];
    inner_size = bsize[d];
  }
  if (!have_inner) *bstride = 0;
  return true;
}

/* The 3-D device view (B, rows, cols) of one operand. When its broadcast batch dims
** cannot be walked with one stride, the operand is first copied, expanded, into a
** contiguous temporary (*tmp), whose batch stride is rows * cols. */
static int ops_matmul_operand(qt_ctx *ctx, qt_view *v, qt_tensor *tmp, const qt_tensor *t,
                              bool is_left, int nbatch, const int64_t *bsize, int64_t batch) {
  const char *op = "matmul";
  ops_matrix m;
  ops_matrix_of(&m, t, is_left);
  int64_t bstride_all[QT_MAXDIM], bstride = 0;
  qt_view_of(v, t);
  if (!ops_batch_stride(t, &m, nbatch, bsize, bstride_all, &bstride)) {
    qt_view ev = *v;  /* t expanded to (batch..., rows, cols) */
    int64_t size[QT_MAXDIM];
    ev.ndim = nbatch + 2;
    for (int d = 0; d < nbatch; d++) {
      ev.size[d] = size[d] = bsize[d];
      ev.stride[d] = bstride_all[d];
    }
    ev.size[nbatch] = size[nbatch] = m.rows;
    ev.size[nbatch + 1] = size[nbatch + 1] = m.cols;
    ev.stride[nbatch] = m.row_stride;
    ev.stride[nbatch + 1] = m.col_stride;
    ev.numel = batch * m.rows * m.cols;
    if (ops_alloc(ctx, op, tmp, ops_device(t), t->dtype, nbatch + 2, size)) return -1;
    qt_view tv;
    qt_view_of(&tv, tmp);
    if (ops_copy_views(ctx, op, ops_device(t), &tv, &ev)) return -1;
    qt_view_of(v, tmp);
    ops_matrix_of(&m, tmp, is_left);  /* same rows/cols; packed strides */
    bstride = m.rows * m.cols;
  }
  v->ndim = 3;
  v->size[0] = batch, v->size[1] = m.rows, v->size[2] = m.cols;
  v->stride[0] = bstride, v->stride[1] = m.row_stride, v->stride[2] = m.col_stride;
  for (int d = 3; d < QT_MAXDIM; d++) v->size[d] = 1, v->stride[d] = 0;
  v->numel = batch * m.rows * m.cols;
  return 0;
}

/* Every matmul case becomes the device's (B, M, K) @ (B, K, N): a 1-D a is a 1 x K row
** and a 1-D b a K x 1 column (their unit dims are dropped from the result), batch dims
** broadcast NumPy-style. The result is allocated contiguous in its final shape, which is
** exactly the (B, M, N) packed layout the device writes. */
int qt_matmul(qt_ctx *ctx, qt_tensor *out, const qt_tensor *a, const qt_tensor *b) {
  const char *op = "matmul";
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  if (ops_live(ctx, op, a) || ops_live(ctx, op, b) || ops_same_device(ctx, op, a, b)) return -1;
  const qt_tensor *operands[2] = { a, b };
  for (int i = 0; i < 2; i++) {
    qt_dtype dt = operands[i]->dtype;
    if (dt != QT_F32 && dt != QT_F64)
      return qt_errorf(&ctx->err, "%s: dtype %s is not supported (float32 or float64 only)", op,
                       qt_dtypes[dt].name);
  }
  if (a->dtype != b->dtype)
    return qt_errorf(&ctx->err, "%s: dtypes %s and %s differ", op, qt_dtypes[a->dtype].name,
                     qt_dtypes[b->dtype].name);
  if (a->ndim == 0 || b->ndim == 0)
    return qt_errorf(&ctx->err, "%s: shapes %s and %s: 0-d tensors cannot be multiplied (use mul)",
                     op, ops_shape(a, s1), ops_shape(b, s2));
  qt_device *dev = ops_device(a);
  if (dev->iface->matmul == NULL) return ops_unsupported(ctx, op, dev);

  ops_matrix ma, mb;
  ops_matrix_of(&ma, a, true);
  ops_matrix_of(&mb, b, false);
  if (ma.cols != mb.rows)
    return qt_errorf(&ctx->err, "%s: shapes %s and %s do not match", op, ops_shape(a, s1),
                     ops_shape(b, s2));
  int nbatch = ma.nbatch > mb.nbatch ? ma.nbatch : mb.nbatch;
  int64_t bsize[QT_MAXDIM], size[QT_MAXDIM];
  int64_t batch = 1;
  for (int d = nbatch - 1; d >= 0; d--) {
    int da = d - (nbatch - ma.nbatch), db = d - (nbatch - mb.nbatch);
    int64_t sa = da >= 0 ? a->size[da] : 1, sb = db >= 0 ? b->size[db] : 1;
    if (sa != sb && sa != 1 && sb != 1)
      return qt_errorf(&ctx->err, "%s: shapes %s and %s do not match (batch dims differ)", op,
                       ops_shape(a, s1), ops_shape(b, s2));
    bsize[d] = sa == 1 ? sb : sa;
  }
  int ndim = 0;
  for (int d = 0; d < nbatch; d++) size[ndim++] = bsize[d], batch *= bsize[d];
  if (a->ndim >= 2) size[ndim++] = ma.rows;
  if (b->ndim >= 2) size[ndim++] = mb.cols;

  int rc = -1;
  qt_tensor res, ta, tb;
  qt_tensor_init(&res);
  qt_tensor_init(&ta);
  qt_tensor_init(&tb);
  if (ops_alloc(ctx, op, &res, dev, a->dtype, ndim, size)) goto cleanup;
  if (qt_numel(&res) > 0) {
    qt_view cv;
    qt_view_of(&cv, &res);
    if (ma.cols == 0) {  /* sums of nothing */
      if (ops_fill_view(ctx, op, dev, &cv, qt_scalar_i(0))) goto cleanup;
    } else {
      qt_view av, bv;
      if (ops_matmul_operand(ctx, &av, &ta, a, true, nbatch, bsize, batch) ||
          ops_matmul_operand(ctx, &bv, &tb, b, false, nbatch, bsize, batch))
        goto cleanup;
      cv.ndim = 3;
      cv.size[0] = batch, cv.size[1] = ma.rows, cv.size[2] = mb.cols;
      cv.stride[0] = ma.rows * mb.cols, cv.stride[1] = mb.cols, cv.stride[2] = 1;
      for (int d = 3; d < QT_MAXDIM; d++) cv.size[d] = 1, cv.stride[d] = 0;
      if (dev->iface->matmul(dev, &cv, &av, &bv, ctx->allow_tf32, &ctx->err)) goto cleanup;
    }
  }
  *out = res;
  qt_tensor_init(&res);
  rc = 0;
cleanup:
  qt_tensor_release(&res);
  qt_tensor_release(&ta);
  qt_tensor_release(&tb);
  return rc;
}
