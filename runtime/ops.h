/*
** ops.h — the tensor core: every tensor operation of the Lua API, without Lua.
**
** The core checks arguments (shapes, dims, dtypes, devices, freed tensors), decides
** result shapes and dtypes (broadcasting, NumPy promotion), allocates outputs, and calls
** the device slots (device.h). The Lua binding (l_tensor.c, l_qlua.c) converts Lua
** values to these calls and raises ctx->err.msg as a Lua error; the embedding API
** (qlua.h) reuses the same functions.
**
** Conventions:
**   - Every function takes the per-lua_State context first and returns 0, or -1 with
**     the message in ctx->err (op name first, values named:
**     "matmul: shapes 2x3 and 4x5 do not match").
**   - Dims and positions are 0-based here; the binding converts from Lua's 1-based.
**     Index *values* inside index tensors stay 1-based all the way down to devices.
**   - `out` parameters are tensors that hold nothing (qt_tensor_init); on success they
**     hold a new reference, on failure they still hold nothing. No function leaves a
**     temporary behind on its error path.
**   - Inputs are never modified except by the in-place ops (names ending in _).
*/
#ifndef QLUA_OPS_H
#define QLUA_OPS_H

#include "device.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per-lua_State state, refcounted: the Lua state holds one reference and every storage
** it allocated holds one (storage->owner), so storages finalised after the state's own
** userdata (at lua_close) still find it. */
typedef struct qt_ctx {
  qt_refcount refcount;      /* atomic (tensor.h): a storage may drop its reference on any thread */
  qt_err err;                /* the last error message */
  /* Garbage-collector driving (docs/ARCHITECTURE.md, "Who owns what"). gpu_live_bytes
  ** counts device bytes held by this state's storages; when an allocation would take it
  ** past gpu_gc_limit, the core calls gc(gc_ud, 0) first; the binding then runs a full
  ** collection and adapts the limit. On out-of-memory the core empties the device cache,
  ** calls gc(gc_ud, 1) (full collection) and retries once. */
  _Atomic int64_t gpu_live_bytes;  /* atomic: a storage may be released on any thread */
  int64_t gpu_gc_limit;
  void (*gc)(void *gc_ud, int out_of_memory);
  void *gc_ud;
  /* Host bytes step the collector (storage.c): cpu_live_bytes counts this state's CPU
  ** bytes; before a CPU allocation, once they have grown by 256 KiB or more since the last
  ** step (cpu_gc_base), the core calls gc_step(gc_ud, growth), and the binding runs that
  ** much of Lua's own incremental collector (none while it is stopped). */
  _Atomic int64_t cpu_live_bytes;  /* atomic, as gpu_live_bytes */
  int64_t cpu_gc_base;
  void (*gc_step)(void *gc_ud, int64_t bytes);
  /* Random numbers: qlua.seed(n) sets seed and resets offset; each random call advances
  ** offset by the number of counters it used. */
  uint64_t seed;
  uint64_t rng_offset;
  bool allow_tf32;           /* qlua.set_tf32: matmul's float32 on TF32 (default false) */
  bool allow_tf32_conv;      /* qlua.set_cudnn_tf32: convolutions' (default true, as PyTorch) */
  bool cudnn_enabled;        /* qlua.set_cudnn_enabled: GPU convolutions may call cuDNN (default
                                ** true; false: im2col + cuBLAS, as PyTorch's cudnn.enabled) */
  int current_gpu;           /* what "gpu" means without an ordinal */
  /* Compiled user kernels of this state (core/kernel/kernel.c); freed with the context through
  ** kernel_cache_free, so the storage code below the ops needs no name of theirs. */
  void *kernel_cache;
  void (*kernel_cache_free)(void *cache);
} qt_ctx;

qt_ctx *qt_ctx_new(void);    /* NULL when out of memory */
void qt_ctx_retain(qt_ctx *ctx);
void qt_ctx_release(qt_ctx *ctx);

/* ---------------------------------------------------------------- CUDA graphs (ops_graph.c)
** A capture records everything queued on a device from qt_graph_begin to qt_graph_end
** (nothing of it runs then); qt_graph_replay queues it all again, the same kernels on the
** same memory. Memory allocated during the capture comes from the graph's pool (share's,
** when given: another graph of the device), kept while the graph lives. During a capture,
** whatever needs the host there (downloads, uploads, sync) fails naming its op, and random
** ops take counters from the capture's start: each replay draws what an eager run would
** at that point of the generator, and advances it as much. Devices without the graph
** slots (the CPU) cannot capture: qt_graph_supported says so (qlua.graph then runs its
** function eagerly). */
typedef struct qt_graph qt_graph;
bool qt_graph_supported(const qt_device *dev);
bool qt_graph_capturing(const qt_device *dev);
int qt_graph_begin(qt_ctx *ctx, qt_device *dev, const qt_graph *share, qt_graph **out);
/* keep: instantiate (-1 when the capture was invalidated; the graph is then empty and may
** only be freed); else discard what was captured. */
int qt_graph_end(qt_ctx *ctx, qt_graph *g, bool keep);
int qt_graph_replay(qt_ctx *ctx, qt_graph *g);
/* Frees g (ending its capture first if one is under way); waits for its replays. */
void qt_graph_free(qt_graph *g);

/* ---------------------------------------------------------------- collectives (ops_dist.c)
** A process group joins the ranks of one job (qt_dist_init: rank 0 listens at addr:port,
** the others connect; world 1 needs no network), or the GPUs of this process (qt_dist_local:
** rank r is devs[r]). A collective runs on its tensors' device: NCCL on GPUs, the group's
** TCP link through rank 0 on the CPU; every rank calls the same collectives in the same
** order, with tensors of the same sizes (a mismatch fails naming both sizes). A rank that
** is gone, or silent past the timeout, fails the collective with a message that says so,
** and the group with it. Nothing here is thread-safe: one thread per group. */
typedef struct qt_dist_group qt_dist_group;
typedef struct qt_dist_work qt_dist_work;
int qt_dist_init(qt_ctx *ctx, int rank, int world, const char *addr, int port, double timeout,
                 qt_dist_group **out);
int qt_dist_local(qt_ctx *ctx, qt_device *const *devs, int n, qt_dist_group **out);
int qt_dist_rank(const qt_dist_group *g);
int qt_dist_world(const qt_dist_group *g);
/* Frees g and its communicators (abort: without waiting for what they queued). */
void qt_dist_free(qt_dist_group *g, bool abort);
/* This rank's part of kind over in and out (contiguous, one dtype and device; out may be in).
** Sizes as device.h's qt_coll says. work NULL: returns when the collective is done (on a
** GPU: queued, with the device's queue waiting for it, and its errors seen). Else *work is
** what qt_dist_wait waits for (or qt_dist_release lets go), NULL when it is done already. */
int qt_dist_collective(qt_ctx *ctx, qt_dist_group *g, qt_coll_kind kind, qt_dist_op op,
                       int root, const qt_tensor *in, const qt_tensor *out, qt_dist_work **work);
/* all_to_all with send[j] elements of in going to rank j and recv[i] elements of out
** coming from rank i (world counts each, summing to in's and out's elements; rank i's send[j]
** must be rank j's recv[i]); send and recv NULL: equal parts. */
int qt_dist_all_to_all(qt_ctx *ctx, qt_dist_group *g, const qt_tensor *in, const qt_tensor *out,
                       const int64_t *send, const int64_t *recv, qt_dist_work **work);
/* A local group's collective: one in and out per rank (ins[r] and outs[r] on devs[r]). */
int qt_dist_collective_local(qt_ctx *ctx, qt_dist_group *g, qt_coll_kind kind, qt_dist_op op,
                             int root, const qt_tensor *const *ins, const qt_tensor *const *outs);
int qt_dist_wait(qt_ctx *ctx, qt_dist_work *w);     /* frees w */
void qt_dist_release(qt_dist_work *w);              /* frees w */
int qt_dist_barrier(qt_ctx *ctx, qt_dist_group *g);
/* Starts n ranks of this host: argv run n times with RANK, LOCAL_RANK, WORLD_SIZE,
** LOCAL_WORLD_SIZE, MASTER_ADDR (kept, else 127.0.0.1) and MASTER_PORT (kept, else a free
** port) set, and waits for all. When one fails, the others get grace seconds to end (their
** links close), then SIGTERM, then SIGKILL. *status: the first failure's exit status (128 +
** signal for a signal), 0 when all succeed. -1 with err when a rank cannot be started. */
int qt_dist_spawn(int n, char *const argv[], double grace, int *status, qt_err *err);
/* A TCP port free on the loopback now, or -1 with err. */
int qt_dist_free_port(qt_err *err);

/* ---------------------------------------------------------------- creation */

/* Uninitialised contents (CPU and GPU alike: callers fill). size may contain zeros. */
int qt_empty(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype, int ndim,
             const int64_t *size);
/* A contiguous tensor with `host_data` (contiguous, dtype elements) copied in. */
int qt_from_host(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype, int ndim,
                 const int64_t *size, const void *host_data);
int qt_fill_(qt_ctx *ctx, qt_tensor *t, qt_scalar value);
/* Whether t may be written in place: not an expanded view (a dim of stride 0 and size > 1,
** whose elements share memory), which every in-place write refuses ("op: cannot write into
** an expanded tensor (dim 1 has stride 0)"). 0, or -1 with the message. */
int qt_check_writable(qt_ctx *ctx, const char *op, const qt_tensor *t);
/* Fills t (contiguous) with random numbers; lo/hi are the inclusive bounds for
** QT_RAND_INT. Advances ctx->rng_offset. */
int qt_random_(qt_ctx *ctx, qt_tensor *t, qt_random_kind kind, qt_scalar lo, qt_scalar hi);
/* Sampling (ops_random.c): in-place fills of float tensors (random_ of any dtype), and
** bernoulli, composed from qt_random_ and the elementwise ops so that one seed gives the
** same draws on every device. uniform_: lo + (hi - lo) u; normal_: mean + sd z;
** random_int_: integers in lo..hi (inclusive); exponential_: -log(1 - u) / lambda;
** bernoulli: 1 with probability p (p's dtype, float32 for a non-float p; every p in
** [0, 1], checked). */
int qt_uniform_(qt_ctx *ctx, qt_tensor *t, double lo, double hi);
int qt_normal_(qt_ctx *ctx, qt_tensor *t, double mean, double sd);
int qt_random_int_(qt_ctx *ctx, qt_tensor *t, int64_t lo, int64_t hi);
int qt_exponential_(qt_ctx *ctx, qt_tensor *t, double lambda);
int qt_bernoulli(qt_ctx *ctx, qt_tensor *out, const qt_tensor *p);
/* n draws of 1-based category positions (int64; n, or rows x n) from the weights of each
** row of probs (1-D or 2-D, >= 0, finite, a positive sum per row), with or without
** replacement (then n must not exceed any row's count of nonzero weights). */
int qt_multinomial(qt_ctx *ctx, qt_tensor *out, const qt_tensor *probs, int64_t n,
                   bool replacement);

/* qlua.range: exactly the values of Lua 5.4's `for i = first, last, step`. arg holds
** first, last and step (both fields filled, as qt_scalar_i / a float's .f), is_float says
** which were Lua floats. An integer first and step make an integer loop (a float last is
** floored, ceiled for a negative step, and the count is exact); otherwise i starts at
** first and i = i + step while i <= last (>= for a negative step), accumulated in double
** as Lua does: range(0, 0.3, 0.1) is 0, 0.1, 0.2. Errors: step 0, a step too small to
** move i, too many elements, values the dtype cannot hold. dev NULL: the CPU. */
int qt_range(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype, const qt_scalar *arg,
             const bool *is_float);

/* The functions below compose the ones above (allocation, fill, uploads, views), with no
** device code of their own. dev NULL: the CPU (the *_like: t's device); dtype QT_NDTYPES
** in the *_like: t's dtype. */
/* t's shape; contents uninitialised (empty_like) or value (full_like). */
int qt_empty_like(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, qt_device *dev,
                  qt_dtype dtype);
int qt_full_like(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, qt_device *dev,
                 qt_dtype dtype, qt_scalar value);
/* qlua.arange: half-open, PyTorch's. arg holds start, stop, step as in qt_range. With an
** integer dtype, or when all three are integers, the count is exact (ceil of the span over
** the step, in integers; float arguments must be integral) and element k is start + k*step
** exactly. Otherwise element k is start + k*step in double and n is the number of k >= 0
** for which that is < stop (> for a negative step). Errors: step 0, non-finite
** arguments, too many elements, values the dtype cannot hold. */
int qt_arange(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype, const qt_scalar *arg,
              const bool *is_float);
/* n values from start to end, both included (PyTorch's formula, so both ends are exact);
** logspace gives base^each. Integer dtypes take them truncated toward zero. */
int qt_linspace(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype, double start,
                double end, int64_t n);
int qt_logspace(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype, double start,
                double end, int64_t n, double base);
/* n x m, ones on the diagonal. */
int qt_eye(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype, int64_t n, int64_t m);
/* A permutation of 1..n (1-based values): Fisher-Yates on the host from the Philox stream
** (counters rng_offset .. rng_offset + n - 2; the offset advances by n - 1), uploaded, so
** every device gets the same permutation for the same seed. */
int qt_randperm(qt_ctx *ctx, qt_tensor *out, qt_device *dev, qt_dtype dtype, int64_t n);

/* ---------------------------------------------------------------- joining (ops_join.c) */

/* Pieces on one device, dtypes promoted (qt_promote), the result allocated once and each
** piece copied into a view of it. cat: sizes agree except along dim; a 1-D piece of size 0
** is skipped (PyTorch's legacy rule), and when every piece is one the result is shape {0};
** 0-d pieces are an error. stack: every piece of one shape; the result has a new dim of
** size n at dim (0..ndim). Errors name the 1-based list positions. */
int qt_cat(qt_ctx *ctx, qt_tensor *out, int n, const qt_tensor *const *ts, int dim);
int qt_stack(qt_ctx *ctx, qt_tensor *out, int n, const qt_tensor *const *ts, int dim);

/* ---------------------------------------------------------------- views (no copies) */

/* size may contain one -1 (inferred). view fails if the strides cannot express it;
** reshape copies (contiguous) then. */
int qt_view_as(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int ndim, const int64_t *size);
int qt_reshape(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int ndim, const int64_t *size);
int qt_narrow(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim, int64_t start,
              int64_t length);
int qt_select(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim, int64_t i);
int qt_transpose(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int d1, int d2);
int qt_permute(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int n, const int *perm);
/* A view of t broadcast to (ndim, size) with stride-0 dimensions. */
int qt_expand(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int ndim, const int64_t *size);
/* Elements first..last (inclusive) of dim, every step-th (step >= 1). Positions are
** 0-based; negative ones count from the end (-1 is the last). Both must be positions of
** the dim; first > last (after that) gives an empty view. */
int qt_slice(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim, int64_t first,
             int64_t last, int64_t step);
/* dim -1: every size-1 dim removed; otherwise dim, which stays unless its size is 1. */
int qt_squeeze(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim);
int qt_unsqueeze(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim);  /* 0..ndim */

/* ---- shape ops (ops_shape.c): compositions of the views and copies, no device code */

/* Dims first..last into one: a view when the strides allow, else a copy (as reshape). */
int qt_flatten(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int first, int last);
/* Dim dim split into n sizes (one may be -1): a view. */
int qt_unflatten(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim, int n,
                 const int64_t *sizes);
/* torch.movedim: dim from[k] goes to position to[k], the rest keep their order. A view. */
int qt_movedim(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int n, const int *from,
               const int *to);
/* New tensors: flip reverses dims (n of them, each once); roll moves element i of dims[k]
** to i + shifts[k] (mod the size), or with dims NULL rolls the flattened tensor by
** shifts[0]; repeat tiles t (taken with leading size-1 dims) sizes[d] times along d. */
int qt_flip(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int n, const int *dims);
int qt_roll(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int n, const int64_t *shifts,
            const int *dims);
int qt_repeat(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int n, const int64_t *sizes);
/* PyTorch's tril/triu over the last two dims (t has at least 2; the others are a batch):
** the elements with col - row <= k (tril) or >= k (triu) kept, the rest zero (false);
** k 0 is the main diagonal, k > 0 above it. A new tensor, or t in place (the _ forms).
** Composed of arange, a comparison and where / masked_fill_. */
int qt_tril(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int64_t k);
int qt_triu(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int64_t k);
int qt_tril_(qt_ctx *ctx, qt_tensor *t, int64_t k);
int qt_triu_(qt_ctx *ctx, qt_tensor *t, int64_t k);
/* torch.diag: a 1-D t gives the (n + |k|)-square matrix with t on diagonal k (zeros
** elsewhere); a 2-D t gives a new 1-D tensor of its diagonal k. */
int qt_diag(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int64_t k);
/* torch.diagonal (ops_view.c): a view of diagonal `offset` of dims d1 and d2 (distinct);
** they leave the shape and the diagonal is the new last dim, of stride
** stride[d1] + stride[d2] (offset > 0: above the main diagonal, along d2). */
int qt_diagonal(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int64_t offset, int d1,
                int d2);

/* ---------------------------------------------------------------- copies and moves */

int qt_contiguous(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t);  /* shares if already */
int qt_clone(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t);       /* always copies */
/* Same tensor (shared) if already there; dtype kept; any strides. */
int qt_to_device(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, qt_device *dev);
int qt_to_dtype(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, qt_dtype dtype);
/* dst = src: src broadcast to dst's shape, any dtypes, any devices. */
int qt_copy_(qt_ctx *ctx, qt_tensor *dst, const qt_tensor *src);

/* ---------------------------------------------------------------- reading and writing elements */

/* The element at a full 0-based position (ndim entries), synchronising. */
int qt_get(qt_ctx *ctx, const qt_tensor *t, const int64_t *pos, qt_scalar *value);
int qt_set(qt_ctx *ctx, qt_tensor *t, const int64_t *pos, qt_scalar value);
/* All elements in row-major order into host memory of numel * elsize bytes. */
int qt_read_all(qt_ctx *ctx, const qt_tensor *t, void *host);
/* Waits for the tensor's device (and reports its deferred errors). */
int qt_sync(qt_ctx *ctx, qt_device *dev);

/* ---------------------------------------------------------------- arithmetic */

/* out = a op b with broadcasting; dtype = qt_promote(a, b), except DIV and POW of two
** integer tensors: DIV gives float64, POW stays integer. Comparisons give the promoted
** dtype holding 1 or 0. */
int qt_binary(qt_ctx *ctx, qt_tensor *out, qt_binop op, const qt_tensor *a, const qt_tensor *b);
/* s_is_float says whether the Lua number was a float: an integer tensor with a float
** scalar computes in float64 (NumPy's rule); any tensor with an integer scalar keeps
** its dtype. scalar_first: s op a (for 2 - t, 2 / t, 2 ^ t). */
int qt_binary_scalar(qt_ctx *ctx, qt_tensor *out, qt_binop op, const qt_tensor *a, qt_scalar s,
                     bool s_is_float, bool scalar_first);
/* In place: a = a op b (b broadcast to a). The result dtype must be storable in a: an
** integer tensor cannot take a float result ("add_: cannot store float64 result in
** int32 tensor"). */
int qt_binary_(qt_ctx *ctx, qt_binop op, qt_tensor *a, const qt_tensor *b);
int qt_binary_scalar_(qt_ctx *ctx, qt_binop op, qt_tensor *a, qt_scalar s, bool s_is_float);
/* The float-only unary ops (qt_unop_takes_ints) of integer tensors give float64; the rest
** keep the dtype, except isnan/isinf/isfinite, which give bool (and have no in-place
** form). params: the op's p0..p2 (NULL: zeros). */
int qt_unary(qt_ctx *ctx, qt_tensor *out, qt_unop op, const qt_tensor *a,
             const qt_unop_params *params);
int qt_unary_(qt_ctx *ctx, qt_unop op, qt_tensor *a, const qt_unop_params *params);
/* clamp(lo, hi): float_bounds says a bound was a Lua float, so an integer tensor gives a
** float64 result (and clamp_ of an integer tensor refuses), as a float scalar does in
** a binary op. A missing bound is -inf/+inf (.f) and INT64_MIN/INT64_MAX (.i). */
int qt_clamp(qt_ctx *ctx, qt_tensor *out, const qt_tensor *a, qt_scalar lo, qt_scalar hi,
             bool float_bounds);
int qt_clamp_(qt_ctx *ctx, qt_tensor *a, qt_scalar lo, qt_scalar hi, bool float_bounds);
/* lerp(a, b, w) = a + w (b - a), by PyTorch's formula (exact at w = 0 and w = 1); w is
** w_tensor (broadcast with a and b) or, when that is NULL, the number w. Float results
** (integer inputs compute in float64). */
int qt_lerp(qt_ctx *ctx, qt_tensor *out, const qt_tensor *a, const qt_tensor *b,
            const qt_tensor *w_tensor, double w);
/* In place: a = lerp(a, b, w); a is a float tensor, b and w broadcast to it. */
int qt_lerp_(qt_ctx *ctx, qt_tensor *a, const qt_tensor *b, const qt_tensor *w_tensor,
             double w);
/* t += value * (a * b) (op QT_MUL: addcmul_) or t += value * (a / b) (QT_DIV: addcdiv_). */
int qt_addc_(qt_ctx *ctx, qt_tensor *t, qt_binop op, const qt_tensor *a, const qt_tensor *b,
             qt_scalar value, bool value_is_float);
/* Whole-tensor comparisons (ops_elementwise_compare.c), PyTorch's. isclose: a bool tensor of a and b
** broadcast together, true where a == b, or both are NaN and equal_nan, or |a - b| is
** finite and <= atol + |rtol * b|; a and b of one dtype, rtol and atol >= 0. Floats
** compute in their dtype, 16-bit ones in float32, integers and bool in float64.
** allclose: whether isclose holds everywhere. equal: whether a and b have one shape and
** equal values (compared as eq does, so NaN is never equal; dtypes may differ). */
int qt_isclose(qt_ctx *ctx, qt_tensor *out, const qt_tensor *a, const qt_tensor *b,
               double rtol, double atol, bool equal_nan);
int qt_allclose(qt_ctx *ctx, const qt_tensor *a, const qt_tensor *b, double rtol, double atol,
                bool equal_nan, bool *result);
int qt_equal(qt_ctx *ctx, const qt_tensor *a, const qt_tensor *b, bool *result);

/* ---------------------------------------------------------------- reductions */

/* Over dims[0..ndims) (0-based, each once; ndims == 0: every dim), reduced together as
** one set (var of two dims is the variance of all their elements, not of variances).
** keepdim keeps them as size-1 dims; otherwise they leave the shape (everything: a 0-d
** tensor). ARGMAX/ARGMIN take one dim or every dim. Result dtypes as in device.h: MEAN,
** VAR, STD, NORM and LOGSUMEXP of integers and bools give float64, SUM and PROD int64.
** arg: the correction of VAR/STD (finite; the divisor is max(0, n - correction)), the p of
** NORM (>= 0 or +-inf). An empty reduction: SUM 0, PROD 1, MEAN/VAR/STD NaN, NORM 0,
** LOGSUMEXP -inf; MAX, MIN, ARGMAX, ARGMIN and the +-inf norms an error. */
int qt_reduce_dims(qt_ctx *ctx, qt_tensor *out, qt_redop op, const qt_tensor *t, int ndims,
                   const int *dims, bool keepdim, double arg);
/* dim >= 0: along dim (removed from the shape). dim == -1: over everything, into a
** 0-d tensor. qt_reduce_dims of one dim or of every dim. */
int qt_reduce(qt_ctx *ctx, qt_tensor *out, qt_redop op, const qt_tensor *t, int dim);

/* ---------------------------------------------------------------- indexing */

/* torch.gather: index has src's ndim, index.size(d) <= src.size(d) for d != dim;
** out has index's shape. Index tensors: int32 or int64, on src's device. */
int qt_gather(qt_ctx *ctx, qt_tensor *out, const qt_tensor *src, int dim, const qt_tensor *index);
int qt_index_select(qt_ctx *ctx, qt_tensor *out, const qt_tensor *src, int dim,
                    const qt_tensor *index);
int qt_take(qt_ctx *ctx, qt_tensor *out, const qt_tensor *src, const qt_tensor *index);
/* src NULL: scatter the number `value`. src is converted to dst's dtype. */
int qt_scatter_(qt_ctx *ctx, qt_tensor *dst, int dim, const qt_tensor *index,
                const qt_tensor *src, qt_scalar value);
int qt_index_add_(qt_ctx *ctx, qt_tensor *dst, int dim, const qt_tensor *index,
                  const qt_tensor *src);
/* torch's scatter_add_: dst[index[i][j]][j] += src[i][j] (dim 1), index and src as
** scatter_'s; src is converted to dst's dtype. Duplicates accumulate (bool: or). */
int qt_scatter_add_(qt_ctx *ctx, qt_tensor *dst, int dim, const qt_tensor *index,
                    const qt_tensor *src);
/* Every dst.select(dim, index[k]) set to `value` (range-checked by the caller, as
** scatter_'s); index 1-D. */
int qt_index_fill_(qt_ctx *ctx, qt_tensor *dst, int dim, const qt_tensor *index,
                   qt_scalar value);
/* dst.select(dim, index[k]) = src.select(dim, k); index 1-D, src of dst's shape but #index
** along dim, converted to dst's dtype. With duplicates any one of the writes wins. */
int qt_index_copy_(qt_ctx *ctx, qt_tensor *dst, int dim, const qt_tensor *index,
                   const qt_tensor *src);

/* ---------------------------------------------------------------- masks (ops_mask.c) */
/* A mask or a condition of any dtype is read through nonzero (NaN is true); a bool one is
** used as it is, another dtype costs one ne(x, 0) pass first. */

/* An operand of where: a tensor, or a Lua number or boolean. */
typedef struct qt_where_arg {
  const qt_tensor *tensor;  /* NULL for a number */
  qt_scalar value;          /* the number: .i for a Lua integer or boolean, .f for a float */
  bool is_float;            /* the number was a Lua float */
  bool is_bool;             /* a Lua boolean (value.i is 0 or 1) */
} qt_where_arg;
/* out = cond ? a : b, cond, a and b broadcast together. The dtype is qt_promote of two
** tensors; a number takes a tensor's dtype as in arithmetic (an integer keeps an integer
** tensor's, range-checked; a float with an integer or bool tensor gives float64; a
** boolean, 0 or 1, takes any dtype; an integer with a bool tensor gives int64); two numbers
** give bool (two booleans), float32 (any float) or int64. */
int qt_where(qt_ctx *ctx, qt_tensor *out, const qt_tensor *cond, const qt_where_arg *a,
             const qt_where_arg *b);
/* t[mask] = value in place, mask broadcast to t; value_tensor (0-d, converted to t's
** dtype) or, when it is NULL, the number value (checked storable by the caller).
** masked_fill: the same into a new tensor of t and mask broadcast together. */
int qt_masked_fill_(qt_ctx *ctx, qt_tensor *t, const qt_tensor *mask,
                    const qt_tensor *value_tensor, qt_scalar value);
int qt_masked_fill(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, const qt_tensor *mask,
                   const qt_tensor *value_tensor, qt_scalar value);
/* A 1-D tensor of t's elements where mask (t and mask broadcast together) is nonzero, in
** row-major order. The count is read back to the host (the one wait) to size the result. */
int qt_masked_select(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, const qt_tensor *mask);
/* An n x ndim int64 tensor of the 1-based positions of t's nonzero elements (row-major);
** a 0-d t gives n x 0. Reads the count back, as masked_select. */
int qt_nonzero(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t);
/* Along dim, or over everything (dim -1, a 0-d result): any and all give bool, count_nonzero
** int64. Over nothing: any false, all true, count 0. */
int qt_any(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim);
int qt_all(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim);
int qt_count_nonzero(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim);

/* ---------------------------------------------------------------- sorting (ops_sort.c) */
/* The order is device.h's (numbers as numbers, NaN above all and NaNs equal, stable). A 0-d
** t is one line of one element (dim 0). Indices are int64, 1-based along dim. */

/* values (may be NULL: argsort) and indices (may be NULL) of t's shape, sorted along dim;
** descending reverses the order, ties keep theirs. */
int qt_sort(qt_ctx *ctx, qt_tensor *values, qt_tensor *indices, const qt_tensor *t, int dim,
            bool descending);
/* The k (0..n) largest or smallest along dim, best first (ties: the earlier first); t's
** shape with k along dim. sorted is accepted for PyTorch's signature: the result is
** always in order. */
int qt_topk(qt_ctx *ctx, qt_tensor *values, qt_tensor *indices, const qt_tensor *t, int64_t k,
            int dim, bool largest, bool sorted);
/* The k-th smallest (1..n) along dim, and its index: t's shape without dim. */
int qt_kthvalue(qt_ctx *ctx, qt_tensor *values, qt_tensor *indices, const qt_tensor *t,
                int64_t k, int dim);
/* PyTorch's median: the lower one (the ((n + 1) // 2)-th smallest); a line holding NaN has
** its first NaN as median. dim -1: over everything (0-d results). indices may be NULL. */
int qt_median(qt_ctx *ctx, qt_tensor *values, qt_tensor *indices, const qt_tensor *t, int dim);
/* The sorted distinct values of flattened t (NaNs are one value, -0.0 and 0.0 one); inverse
** (t's shape) the 1-based position of each element's value in uniques, counts how many
** elements have it. inverse and counts may be NULL (not computed). */
int qt_unique(qt_ctx *ctx, qt_tensor *uniques, qt_tensor *inverse, qt_tensor *counts,
              const qt_tensor *t);
/* PyTorch's bincount: result[v + 1] (1-based) counts (or sums weights of) the elements equal
** to v; length max(max(t) + 1, minlength). t 1-D, integer or bool, values >= 0. */
int qt_bincount(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, const qt_tensor *weights,
                int64_t minlength);
/* PyTorch's histc: bins equal bins over [lo, hi] (0, 0: the data's min and max; an empty
** range is widened by 1 each side), elements outside and NaN are left out; float result
** (t's dtype, float32 for integer t). */
int qt_histc(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int64_t bins, double lo,
             double hi);
/* 1-based insertion positions: for each v, 1 + the number of elements of the sorted
** sequence below v (right: not above v), i.e. PyTorch's answer + 1. sorted is 1-D, or N-D
** with values sharing its leading dims (searched row by row). The result has values' shape. */
int qt_searchsorted(qt_ctx *ctx, qt_tensor *out, const qt_tensor *sorted, const qt_tensor *values,
                    bool right);

/* ---------------------------------------------------------------- convolution */

/* ops_conv.c: 2-D convolutions of NCHW tensors of one float dtype and device, as PyTorch's
** F.conv2d (weight (out, in / groups, kh, kw)) and F.conv_transpose2d (weight (in, out /
** groups, kh, kw)). same: padding "same" (stride 1; an odd total pads one more after), else
** pad; output_padding is conv_transpose2d's only. bias: NULL or 1-D of the output channels.
** conv2d_input and conv2d_weight are conv2d's gradients (torch.nn.grad's): of its input,
** for an input of input_size, and of its weight, of weight_size, from dy (the output's). */
typedef struct qt_conv_opts {
  int64_t stride[2], pad[2], dilation[2], output_padding[2], groups;
  bool same;
} qt_conv_opts;
int qt_conv2d(qt_ctx *ctx, qt_tensor *out, const qt_tensor *x, const qt_tensor *w,
              const qt_tensor *bias, const qt_conv_opts *o);
int qt_conv_transpose2d(qt_ctx *ctx, qt_tensor *out, const qt_tensor *x, const qt_tensor *w,
                        const qt_tensor *bias, const qt_conv_opts *o);
int qt_conv2d_input(qt_ctx *ctx, qt_tensor *out, const int64_t *input_size, const qt_tensor *w,
                    const qt_tensor *dy, const qt_conv_opts *o);
int qt_conv2d_weight(qt_ctx *ctx, qt_tensor *out, const qt_tensor *x, const int64_t *weight_size,
                     const qt_tensor *dy, const qt_conv_opts *o);

/* What runs `family` on dev (device.h's describe slot), into buf: "conv" gives the
** convolutions' path under ctx's cudnn_enabled. */
int qt_describe(qt_ctx *ctx, qt_device *dev, const char *family, char *buf, size_t len);

/* ---------------------------------------------------------------- normalisation */

/* ops_norm.c: the fused normalisations (device.h's norm slot), PyTorch's native_layer_norm,
** rms_norm, native_group_norm and native_batch_norm. x is LAYER/RMS: any shape whose last
** `normalized` dims are weight's shape; GROUP/BATCH: (N, C, ...) with weight and bias 1-D
** of C. weight and bias may be NULL. Forward gives y (x's shape and dtype) and the statistics
** it used, 1-D (float64 for float64 x, else float32): mean (none for RMS: left released) and
** rstd, of N * (leading) rows (LAYER/RMS), N * groups (GROUP) or C (BATCH). given_stats
** (BATCH, eval): mean and var are running_mean and running_var, converted, and rstd =
** 1 / sqrt(var + eps). Backward takes what forward gave and writes the wanted ones of dx,
** dweight and dbias (NULL: not wanted; dweight and dbias need a weight / were given). */
typedef enum qt_norm_op { QT_LAYER_NORM, QT_RMS_NORM, QT_GROUP_NORM, QT_BATCH_NORM } qt_norm_op;
typedef struct qt_norm_args {
  qt_norm_op op;
  int normalized;      /* LAYER, RMS: the trailing dims normalized */
  int64_t groups;      /* GROUP */
  double eps;
  bool given_stats;    /* BATCH: running statistics (eval) */
} qt_norm_args;
int qt_norm(qt_ctx *ctx, const qt_norm_args *a, const qt_tensor *x, const qt_tensor *weight,
            const qt_tensor *bias, const qt_tensor *running_mean, const qt_tensor *running_var,
            qt_tensor *y, qt_tensor *mean, qt_tensor *rstd);
int qt_norm_backward(qt_ctx *ctx, const qt_norm_args *a, const qt_tensor *dy,
                     const qt_tensor *x, const qt_tensor *weight, const qt_tensor *mean,
                     const qt_tensor *rstd, qt_tensor *dx, qt_tensor *dweight,
                     qt_tensor *dbias);

/* ---------------------------------------------------------------- pooling */

/* ops_pool2d.c: max_pool2d and avg_pool2d of (N, C, H, W) or (C, H, W) float tensors, as
** PyTorch's (device.h's pool2d slot; ceil_mode's last window starts inside the input or its
** left padding, padding at most half the kernel). max_pool2d gives y and, when indices is
** not NULL, each max's 1-based flat position in its H * W plane (int64). avg_pool2d_backward
** gives the input's gradient from dy, for an input of x's shape. */
typedef struct qt_pool_opts {
  int64_t kernel[2], stride[2], pad[2], dilation[2];
  bool ceil_mode, count_include_pad;
  int64_t divisor_override;   /* 0: none */
} qt_pool_opts;
int qt_max_pool2d(qt_ctx *ctx, qt_tensor *y, qt_tensor *indices, const qt_tensor *x,
                  const qt_pool_opts *o);
int qt_avg_pool2d(qt_ctx *ctx, qt_tensor *y, const qt_tensor *x, const qt_pool_opts *o);
int qt_avg_pool2d_backward(qt_ctx *ctx, qt_tensor *dx, const qt_tensor *dy,
                           const qt_tensor *x, const qt_pool_opts *o);

/* ---------------------------------------------------------------- attention */

/* ops_attention.c: torch.nn.functional.scaled_dot_product_attention (device.h's attention
** slot, which says the formulas). q (..., hq, sq, d), k (..., hk, sk, d) and v (..., hk, sk,
** dv) of one float dtype on one device, with equal leading dims (2-D: one head); hk != hq
** needs enable_gqa and hq % hk == 0. mask: NULL, bool (true: the key takes part) or float
** (added to the scores), broadcastable to (..., hq, sq, sk); it gets no gradient. scale:
** NaN means 1 / sqrt(d). dropout_p in [0, 1]: forward takes b * hq * sq * sk counters of
** ctx's generator and writes the seed and offset it used into a; backward takes them from
** a. Forward gives o (..., hq, sq, dv) of q's dtype and lse (..., hq, sq), float64 for
** float64 q, else float32; backward the wanted ones of dq, dk and dv (NULL: not wanted)
** from dout (o's shape). qt_attention_path writes the name of the kernels a call would run
** (QT_ATTN_PATH_LEN bytes) without running them. */
typedef struct qt_attn_args {
  double scale, dropout_p;
  bool causal, enable_gqa;
  uint64_t seed, offset;
} qt_attn_args;
int qt_attention(qt_ctx *ctx, qt_attn_args *a, const qt_tensor *q, const qt_tensor *k,
                 const qt_tensor *v, const qt_tensor *mask, qt_tensor *o, qt_tensor *lse);
int qt_attention_backward(qt_ctx *ctx, const qt_attn_args *a, const qt_tensor *dout,
                          const qt_tensor *q, const qt_tensor *k, const qt_tensor *v,
                          const qt_tensor *mask, const qt_tensor *o, const qt_tensor *lse,
                          qt_tensor *dq, qt_tensor *dk, qt_tensor *dv);
int qt_attention_path(qt_ctx *ctx, const qt_attn_args *a, bool backward, const qt_tensor *q,
                      const qt_tensor *k, const qt_tensor *v, const qt_tensor *mask,
                      char *buf);

/* ---------------------------------------------------------------- fused optimizer updates */

/* ops_optim.c: one update of n parameters at once, as device.h's qt_optim_opts says
** (SGD; Adam and AdamW): tensors[k * step->nviews + j] is parameter k (j = 0), its gradient
** (1) and its state (2 ..). Every tensor is live, contiguous, of one float dtype and one
** device, of its parameter's shape, and shares no byte with another; the parameters and
** the state are written in place (their versions move), the gradients only read.
** step_count (Adam; NULL for a step given as bias corrections in step) is a one-element
** float64 tensor on the parameters' device holding the step count the update reads when it
** runs (capturable state); the core fills step->step_count from it. */
int qt_optim_step(qt_ctx *ctx, const qt_optim_opts *step, const qt_tensor *step_count, int64_t n,
                  const qt_tensor *const *tensors);

/* ---------------------------------------------------------------- matrix products */

/* 1-D.1-D (0-d result), 2-D@1-D, 1-D@2-D, 2-D@2-D, and batched (>= 3-D, batch dims
** broadcast); float32/float64, both of one dtype; same device. */
int qt_matmul(qt_ctx *ctx, qt_tensor *out, const qt_tensor *a, const qt_tensor *b);
/* The fixed-rank products, each one GEMM call, with matmul's dtype rules: dot 1-D . 1-D
** of one size (a 0-d result, as matmul's), outer 1-D x 1-D (n x m), mv 2-D @ 1-D, bmm
** 3-D @ 3-D with equal batch sizes (no broadcasting). */
int qt_dot(qt_ctx *ctx, qt_tensor *out, const qt_tensor *a, const qt_tensor *b);
int qt_outer(qt_ctx *ctx, qt_tensor *out, const qt_tensor *a, const qt_tensor *b);
int qt_mv(qt_ctx *ctx, qt_tensor *out, const qt_tensor *a, const qt_tensor *v);
int qt_bmm(qt_ctx *ctx, qt_tensor *out, const qt_tensor *a, const qt_tensor *b);
/* torch.addmm: out = beta * c + alpha * (a @ b), a and b 2-D, c of their dtype broadcast to
** the product's shape; c is copied into the result and the GEMM applies beta and alpha
** (beta == 0: c is not read). addmm_ writes c in place; c must have the product's shape. */
int qt_addmm(qt_ctx *ctx, qt_tensor *out, const qt_tensor *c, const qt_tensor *a,
             const qt_tensor *b, double beta, double alpha);
int qt_addmm_(qt_ctx *ctx, qt_tensor *c, const qt_tensor *a, const qt_tensor *b, double beta,
              double alpha);
/* NumPy's einsum (ops_matmul_einsum.c) over n operands (1 .. QT_EINSUM_MAX) of one float dtype:
** "ij,jk->ik", implicit output without "->", "..." broadcasting, repeated letters in one
** operand as diagonals. Operands are contracted left to right, each pair by a permute and
** reshape around one batched GEMM (qt_matmul); letters no later operand or the output
** needs are summed first. The result is a new contiguous tensor. */
#define QT_EINSUM_MAX 32
int qt_einsum(qt_ctx *ctx, qt_tensor *out, const char *spec, int n,
              const qt_tensor *const *operands);

/* ---------------------------------------------------------------- code the user brings */
/* (core/kernel/kernel.c, over the device's compile/module/launch slots: CUDA only.) */

typedef struct qt_module qt_module;  /* a loaded module on one device; reference counted */
typedef struct qt_kernel qt_kernel;  /* one kernel of a module with its signature; counted */

/* A kernel parameter as the source (or a signature string) declares it. */
typedef enum qt_param_kind {
  QT_PARAM_POINTER, QT_PARAM_I32, QT_PARAM_U32, QT_PARAM_I64, QT_PARAM_U64,
  QT_PARAM_F32, QT_PARAM_F64, QT_PARAM_BOOL,
  QT_PARAM_F16, QT_PARAM_BF16         /* __half, __nv_bfloat16: a Lua number, rounded */
} qt_param_kind;
#define QT_PARAM_ANY_DTYPE (-1)   /* void *: a tensor of any dtype */
#define QT_PARAM_NO_DTYPE (-2)    /* a pointee qlua has no dtype for (yet) */
typedef struct qt_param {
  qt_param_kind kind;
  int dtype;          /* pointers: the qt_dtype pointed at, or one of the two above */
  bool is_const;      /* pointers: const pointee */
  char type[40];      /* as declared, normalised ("const float *") */
  char name[40];      /* "" when the declaration names none */
} qt_param;

typedef struct qt_kernel_opts {
  int noptions;
  const char *const *options;       /* NVRTC options: -D..., --use_fast_math, -I..., -std=... */
  int nheaders;
  const char *const *header_names;
  const char *const *header_sources;
  int nexpressions;
  const char *const *expressions;   /* template instantiations ("axpy<float>") */
  const char *signature;            /* overrides the declaration's parameters, or NULL */
  bool packed;                      /* no signature: launched by qt_kernel_launch_packed only */
} qt_kernel_opts;

/* Compiles source for dev (NVRTC) and returns its kernel `name` (a plain name, or a
** template instantiation "axpy<float>", which is added to the expressions). The same
** source, options, headers and GPU architecture give the module from the in-memory
** cache, else from the disk cache ($XDG_CACHE_HOME/qlua/kernels; QLUA_KERNEL_CACHE=0
** turns it off), else compile. */
int qt_kernel_compile(qt_ctx *ctx, qt_kernel **out, qt_device *dev, const char *source,
                      const char *name, const qt_kernel_opts *opts);
/* Loads PTX, cubin or fatbin on dev. */
int qt_module_load(qt_ctx *ctx, qt_module **out, qt_device *dev, const void *image,
                   size_t nbytes);
/* The kernel `name` of a module; signature: its parameters ("float *x, int n"), or NULL
** when only the sizes the module records are to be checked. */
int qt_module_kernel(qt_ctx *ctx, qt_kernel **out, qt_module *m, const char *name,
                     const char *signature);
int qt_module_kernel_names(qt_ctx *ctx, qt_module *m, void (*each)(const char *, void *),
                           void *arg);
qt_device *qt_module_device(const qt_module *m);
void qt_module_release(qt_module *m);
void qt_kernel_release(qt_kernel *k);
const char *qt_kernel_name(const qt_kernel *k);
qt_device *qt_kernel_device(const qt_kernel *k);
/* The parameters; -1 when unknown (a module kernel without a signature). */
int qt_kernel_nparams(const qt_kernel *k);
const qt_param *qt_kernel_param(const qt_kernel *k, int i);
const qt_kernel_info *qt_kernel_limits(const qt_kernel *k);

/* One launch argument: a tensor (its device pointer), or a number or boolean. */
typedef struct qt_kernel_arg {
  const qt_tensor *tensor;  /* NULL for a number */
  qt_scalar value;
  bool is_float;            /* the number was a Lua float */
  bool is_bool;             /* a Lua boolean (value.i is 0 or 1) */
} qt_kernel_arg;

/* Checks every argument against the signature (count, tensor device and dtype and
** contiguity, numbers in range) and cfg against the kernel's and device's limits, then
** queues the kernel on the device's stream. Nothing reaches the GPU on an error. */
int qt_kernel_launch(qt_ctx *ctx, qt_kernel *k, const qt_launch_cfg *cfg, int nargs,
                     const qt_kernel_arg *args);
/* The same for callers that packed the parameters themselves (args[k] points at
** parameter k's bytes); cfg is still checked. */
int qt_kernel_launch_packed(qt_ctx *ctx, qt_kernel *k, const qt_launch_cfg *cfg, void **args);
/* ---- kernels written from expressions (core/kernel/kernel_codegen.c): qlua.elementwise, qlua.reduction */
typedef struct qt_codegen qt_codegen;  /* reference counted */
/* in_params / out_params: "float32 x, float32 y" or with type variables "T x, T y";
** body: CUDA C++ run for every element, seeing each parameter by name (outputs as
** references), `i` (the element's row-major index) and `n` (the count). */
int qt_elementwise_new(qt_ctx *ctx, qt_codegen **out, const char *in_params,
                       const char *out_params, const char *body, const char *name,
                       const char *preamble);
typedef struct qt_reduction_spec {
  const char *in_params, *out_params;  /* one output */
  const char *map_expr;       /* each element's value, from the inputs (and `i`) */
  const char *reduce_expr;    /* combines a and b */
  const char *post_map_expr;  /* writes the output from a (default "<out> = a") */
  const char *identity;       /* the start value */
  const char *reduce_type;    /* the partials' dtype or type variable (default: the output's) */
  const char *name, *preamble;
} qt_reduction_spec;
int qt_reduction_new(qt_ctx *ctx, qt_codegen **out, const qt_reduction_spec *spec);
int qt_codegen_nin(const qt_codegen *g);
int qt_codegen_nout(const qt_codegen *g);
/* Calls it on nin inputs (tensors or numbers, broadcast together) and up to nout given
** outputs (the rest are allocated); results[0..nout) receive a reference to every output.
** dim: a reduction's dim (0-based), or -1 for everything; ignored by elementwise. */
int qt_codegen_call(qt_ctx *ctx, qt_codegen *g, int nargs, const qt_kernel_arg *args, int dim,
                    qt_tensor *results);
void qt_codegen_release(qt_codegen *g);

/* Frees what a compile slot gave back. */
void qt_compile_result_free(qt_compile_result *r);
/* Forgets the in-memory cache and empties the disk cache directory. */
int qt_kernel_cache_clear(qt_ctx *ctx);
/* The queue dev runs its work on (a cudaStream_t), for C code that launches its own
** kernels in order with qlua's; an error for a device without one (the CPU). */
int qt_native_stream(qt_ctx *ctx, qt_device *dev, void **stream);

/* ---------------------------------------------------------------- scans and softmax (ops_scan.c) */
/* Along dim (0-based; a 0-d tensor takes dim 0 as one element, as PyTorch's dim 0 / -1).
** Result dtypes, PyTorch's: cumsum and cumprod of integers and bool give int64 (wrapping),
** floats keep theirs; cummax and cummin keep the dtype and give 1-based int64 positions
** in indices (NULL for the other ops; required for them); logcumsumexp, softmax and
** log_softmax are float-only ops, so integers and bool compute in float64 (as exp). An
** empty tensor gives an empty result. */
int qt_scan(qt_ctx *ctx, qt_tensor *out, qt_tensor *indices, qt_scanop op, const qt_tensor *t,
            int dim);
int qt_softmax(qt_ctx *ctx, qt_tensor *out, const qt_tensor *t, int dim, bool log);

/* qlua.cross_entropy's options. */
typedef enum qt_reduction { QT_REDUCE_MEAN, QT_REDUCE_SUM, QT_REDUCE_NONE } qt_reduction;
typedef struct qt_cross_entropy_opts {
  qt_reduction reduction;
  bool has_ignore_index;
  int64_t ignore_index;      /* a class value whose samples count for nothing */
  double label_smoothing;    /* 0 <= eps <= 1 */
} qt_cross_entropy_opts;
/* PyTorch's cross_entropy from log_softmax: logits N x C (or C, one sample); target either
** class indices (int32/int64 or uint8, 1-based, of shape N, or 0-d for C logits), checked to
** lie in 1..C (the error names the value and its 1-based position; reading them back is
** the one wait), or probabilities of the logits' shape (any float dtype). The result: a 0-d
** tensor (mean, sum) or the N losses (none), in the logits' float dtype (float64 for
** integer logits). mean divides by the samples not ignored (NaN when there are none). */
int qt_cross_entropy(qt_ctx *ctx, qt_tensor *out, const qt_tensor *logits,
                     const qt_tensor *target, const qt_cross_entropy_opts *opts);

#ifdef __cplusplus
}
#endif
#endif
