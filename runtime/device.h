/*
** device.h — the device interface and the registry.
**
** A device is { iface, context } as in ggml's backends: a table of function pointers
** that the tensor core (runtime/core/) calls, and the device's own state behind a void *.
** The CPU device (runtime/cpu/) fills every slot and is the reference; the CUDA device
** (kernels/cuda_device.cu) fills the same slots with launchers. A NULL slot means
** "not supported on this device" and becomes a clear Lua error in the core.
**
** Contract for every slot:
**   - returns 0, or -1 with a message in *err (op name first: "gather: ...");
**   - never aborts, exits or asserts on user input;
**   - views are already checked by the core: same device, shapes consistent, dtypes as
**     documented per slot, output allocated (and never overlapping an input unless the
**     slot says so). Devices check only what only they can see: index *values*.
**   - may run asynchronously (the CUDA device enqueues on its stream); only `sync`,
**     `download` and `memory` wait. Errors discovered asynchronously (an index value out
**     of range inside a kernel) are reported by the next `sync` / `download` of that
**     device, naming the op that caused them.
**
** Index values in index views are 1-based (as in the Lua API), int32 or int64. A value
** outside 1..bound is reported as
**   "<op>: index <value> out of range (1..<bound>) at position <pos>"
** where pos is the 1-based row-major position in the index tensor; the out-of-range
** element is never read or written (the corresponding output element is set to 0 for
** gather/index_select/take).
*/
#ifndef QLUA_DEVICE_H
#define QLUA_DEVICE_H

#include "scalar.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum qt_device_kind { QT_DEV_CPU, QT_DEV_CUDA } qt_device_kind;

/* The op enums, each made with its one name table from a list. The elementwise lists
** (QT_BINOP_LIST, QT_UNOP_LIST) are in scalar.h, with what each op computes; the names
** are the Lua API's (messages of every layer use them: qt_binop_name(op)). */

/* Reductions: X(P, ENUM, name). Result dtypes (the core allocates dst accordingly):
**   SUM, PROD: float -> same, int and bool -> int64 (wrapping);  MAX, MIN: same dtype (NaN
**   propagates);  ARGMAX, ARGMIN: int64, 1-based, first occurrence wins ties, a NaN counts
**   as the maximum and as the minimum;  MEAN, VAR, STD, NORM, LOGSUMEXP: float only, same
**   dtype (the core casts ints and bools to float64).
** Float32 accumulates in float64 (and float16/bfloat16, when they come, will accumulate in
** float32 at least: every accumulator is its own type, never the element's).
** The slot's arg: VAR, STD: the correction (the divisor is max(0, n - correction), so
** n <= correction gives inf, or NaN for 0/0, as in PyTorch); NORM: p (> 0, 0 counts the
** nonzeros, +-inf take the largest/smallest magnitude); unused by the others.
** VAR and STD are one pass of shifted sums per thread, combined by Chan's formula, on the
** GPU; two-pass blocks combined the same way on the CPU; never the naive sum of squares.
** LOGSUMEXP carries (max, sum of exp(x - max)) and rescales on combining. */
#define QT_REDOP_LIST(X, P)                                                        \
  X(P, QT_SUM, "sum") X(P, QT_MEAN, "mean") X(P, QT_MAX, "max") X(P, QT_MIN, "min") \
  X(P, QT_ARGMAX, "argmax") X(P, QT_ARGMIN, "argmin") X(P, QT_PROD, "prod")         \
  X(P, QT_VAR, "var") X(P, QT_STD, "std") X(P, QT_NORM, "norm")                     \
  X(P, QT_LOGSUMEXP, "logsumexp")

/* A unary op's parameters: v[0], v[1], v[2] are the p0, p1, p2 of its expression (clamp's
** lo and hi; nan_to_num's values for NaN, +inf, -inf). */
typedef struct qt_unop_params {
  qt_scalar v[3];
} qt_unop_params;


/* Scans along a dim: X(P, ENUM, name) (ops_scan.c). Element k of the result combines
** elements 1..k of the source. Dtypes (the core casts first, so devices see one dtype):
**   CUMSUM, CUMPROD: float32, float64 or int64 (integers wrap);  LOGCUMSUMEXP: float32 or
**   float64;  CUMMAX, CUMMIN: every dtype, with 1-based int64 positions: equal values move
**   the position to the later one, and a NaN is kept from where it appears (the position of
**   the latest NaN), as PyTorch's. */
#define QT_SCANOP_LIST(X, P)                                                        \
  X(P, QT_CUMSUM, "cumsum") X(P, QT_CUMPROD, "cumprod") X(P, QT_CUMMAX, "cummax")   \
  X(P, QT_CUMMIN, "cummin") X(P, QT_LOGCUMSUMEXP, "logcumsumexp")

#define QT_OP_ENUM_(P, E, name, ...) E,
#define QT_OP_NAME_(P, E, name, ...) name,
typedef enum qt_binop { QT_BINOP_LIST(QT_OP_ENUM_, ~) QT_NBINOPS } qt_binop;
typedef enum qt_unop { QT_UNOP_LIST(QT_OP_ENUM_, ~) QT_NUNOPS } qt_unop;
typedef enum qt_redop { QT_REDOP_LIST(QT_OP_ENUM_, ~) QT_NREDOPS } qt_redop;
typedef enum qt_scanop { QT_SCANOP_LIST(QT_OP_ENUM_, ~) QT_NSCANOPS } qt_scanop;

/* The op's name, or "?" for a value outside the enum. */
static inline const char *qt_binop_name(qt_binop op) {
  static const char *const names[] = { QT_BINOP_LIST(QT_OP_NAME_, ~) };
  return (unsigned)op < (unsigned)QT_NBINOPS ? names[op] : "?";
}
static inline const char *qt_unop_name(qt_unop op) {
  static const char *const names[] = { QT_UNOP_LIST(QT_OP_NAME_, ~) };
  return (unsigned)op < (unsigned)QT_NUNOPS ? names[op] : "?";
}
static inline const char *qt_redop_name(qt_redop op) {
  static const char *const names[] = { QT_REDOP_LIST(QT_OP_NAME_, ~) };
  return (unsigned)op < (unsigned)QT_NREDOPS ? names[op] : "?";
}
static inline const char *qt_scanop_name(qt_scanop op) {
  static const char *const names[] = { QT_SCANOP_LIST(QT_OP_NAME_, ~) };
  return (unsigned)op < (unsigned)QT_NSCANOPS ? names[op] : "?";
}
/* Whether a unary op is defined on integer dtypes (the others are float-only: the core
** computes them in float64 for integer inputs). */
static inline bool qt_unop_takes_ints(qt_unop op) {
#define QT_OP_INTS_(P, E, name, ints, ...) ints,
  static const bool ints[] = { QT_UNOP_LIST(QT_OP_INTS_, ~) };
#undef QT_OP_INTS_
  return (unsigned)op < (unsigned)QT_NUNOPS && ints[op];
}
/* Whether a binary op is defined on integer dtypes (the float-only ones, such as div and
** atan2, are computed in float64 for integer operands). */
static inline bool qt_binop_takes_ints(qt_binop op) {
#define QT_OP_INTS_(P, E, name, ints, ...) ints,
  static const bool ints[] = { QT_BINOP_LIST(QT_OP_INTS_, ~) };
#undef QT_OP_INTS_
  return (unsigned)op < (unsigned)QT_NBINOPS && ints[op];
}
/* Whether a unary op's result is bool (isnan, isinf, isfinite). */
static inline bool qt_unop_gives_bool(qt_unop op) {
#define QT_OP_BOOL_(P, E, name, ints, result, ...) QT_BINOP_IS_BOOL_##result,
  static const bool gives_bool[] = { QT_UNOP_LIST(QT_OP_BOOL_, ~) };
#undef QT_OP_BOOL_
  return (unsigned)op < (unsigned)QT_NUNOPS && gives_bool[op];
}
/* Whether a binary op's result is bool (comparisons and the logical ops), whatever its
** operands' dtype. */
static inline bool qt_binop_gives_bool(qt_binop op) {
#define QT_OP_BOOL_(P, E, name, ints, result, ...) QT_BINOP_IS_BOOL_##result,
  static const bool gives_bool[] = { QT_BINOP_LIST(QT_OP_BOOL_, ~) };
#undef QT_OP_BOOL_
  return (unsigned)op < (unsigned)QT_NBINOPS && gives_bool[op];
}
#undef QT_OP_ENUM_
#undef QT_OP_NAME_

/* Random distributions. Element k (row-major, 0-based) of a call with (seed, offset)
** is computed from the counter offset + k by Philox4x32-10 (runtime/philox.h), so
** every device produces the same numbers for the same seed. */
typedef enum qt_random_kind { QT_RAND_UNIFORM, QT_RAND_NORMAL, QT_RAND_INT } qt_random_kind;

/* A 2-D convolution's geometry (the conv slot): NCHW input x (n, c, h, w), filters
** (k, c / groups, r, s), output y (n, k, p, q) with p = (h + 2 pad[0] - dilation[0] (r - 1)
** - 1) / stride[0] + 1 and q likewise along w; pads are symmetric (the core pads the
** uneven rest itself). allow_tf32: float32 may run on TF32 tensor cores. use_cudnn: a GPU
** may call cuDNN (else, and when cuDNN cannot be loaded, it lowers to im2col and cuBLAS). */
typedef struct qt_conv_geom {
  int64_t n, c, h, w, k, r, s, p, q;
  int64_t stride[2], pad[2], dilation[2], groups;
  bool allow_tf32, use_cudnn;
} qt_conv_geom;
/* What the conv slot computes: y = conv(x, w) (FORWARD); x = the gradient of the input from
** dy in y and w (BACKWARD_DATA: conv_transpose2d); w = the gradient of the filters from x
** and dy in y (BACKWARD_FILTER). The written view is overwritten, never accumulated. */
typedef enum qt_conv_mode {
  QT_CONV_FORWARD,
  QT_CONV_BACKWARD_DATA,
  QT_CONV_BACKWARD_FILTER
} qt_conv_mode;

/* Collectives (the comm_* and collective slots; runtime/core/dist.c and ops_dist.c). A
** link is a process group's transport, made by the core: the ranks of one job joined over
** TCP at rendezvous (or, for a single process's local group, buffers in memory). send and
** recv move n bytes to or from one peer: rank 0 reaches every rank, the others rank 0 only.
** Each waits at most `timeout` seconds and fails naming the peer when it is gone. check
** never blocks: -1 with err once a rank is known gone (its connection closed), else 0. */
typedef struct qt_dist_link qt_dist_link;
struct qt_dist_link {
  int rank, world;
  double timeout;
  int (*send)(qt_dist_link *l, int peer, const void *buf, size_t n, qt_err *err);
  int (*recv)(qt_dist_link *l, int peer, void *buf, size_t n, qt_err *err);
  int (*check)(qt_dist_link *l, qt_err *err);
};
typedef enum qt_coll_kind {
  QT_COLL_ALL_REDUCE, QT_COLL_BROADCAST, QT_COLL_REDUCE, QT_COLL_ALL_GATHER,
  QT_COLL_REDUCE_SCATTER, QT_COLL_ALL_TO_ALL
} qt_coll_kind;
/* The reductions, as NCCL numbers them. bool reduces as uint8 (sum is or, prod is and). */
typedef enum qt_dist_op { QT_DIST_SUM, QT_DIST_PROD, QT_DIST_MAX, QT_DIST_MIN, QT_DIST_AVG } qt_dist_op;
/* One rank's part of a collective: in and out are contiguous, of one dtype, on the device
** (out may be in: in place). all_reduce, broadcast and reduce: out has in's elements;
** all_gather: out is world x in (rank r's in at part r); reduce_scatter: in is world x out
** (rank r keeps the reduced part r); all_to_all: in and out of world parts, part j of in
** going to rank j, part i of out from rank i: equal parts, or send[j] and recv[i] elements
** when send and recv are given (world counts each, summing to in's and out's elements;
** rank i's send[j] is rank j's recv[i]). root: broadcast's source, reduce's destination
** (the other ranks' out is left as it was). */
typedef struct qt_coll {
  qt_coll_kind kind;
  qt_dist_op op;
  int root;
  const qt_view *in, *out;
  const int64_t *send, *recv;   /* all_to_all's counts per rank, or NULL: equal parts */
} qt_coll;

/* Normalisations (the norm slot): x is contiguous (n, c, inner).
**   GROUP: statistics per (batch row b, group g) over the (c / groups) * inner elements of
**          channels g * c / groups ..; layer_norm is groups = 1, inner = 1 (c the normalized
**          size); count n * groups.
**   RMS:   as GROUP with groups = 1, inner = 1, and no mean (x * rstd).
**   BATCH: statistics per channel over its n * inner elements; count c.
** Statistics are float64 for float64 x, else float32; rstd = 1 / sqrt(var + eps), the
** variance biased. weight and bias are per channel (c), of x's dtype; y = (x - mean) * rstd *
** weight + bias, without the absent ones.
** Forward reads x, weight, bias and writes y, mean, rstd (given_stats, BATCH: reads mean and
** rstd instead, batch_norm's eval). Backward reads x, weight, mean, rstd, dy and writes the
** wanted ones of dx, dweight (sum of dy * xhat over what shares the channel) and dbias (sum
** of dy); given_stats: mean and rstd are constants (dx = dy * weight * rstd). has: bit
** QT_NORM_<view> for each view that is there (RMS never has a mean). */
typedef enum qt_norm_kind { QT_NORM_GROUP, QT_NORM_RMS, QT_NORM_BATCH } qt_norm_kind;
enum {
  QT_NORM_X, QT_NORM_WEIGHT, QT_NORM_BIAS, QT_NORM_MEAN, QT_NORM_RSTD, QT_NORM_Y, QT_NORM_DY,
  QT_NORM_DX, QT_NORM_DWEIGHT, QT_NORM_DBIAS, QT_NORM_NVIEWS
};
typedef struct qt_norm_opts {
  qt_norm_kind kind;
  bool backward, given_stats;
  int64_t n, c, inner, groups;
  double eps;
  unsigned has;
} qt_norm_opts;

/* 2-D pooling (the pool2d slot): x (planes, h, w), y (planes, p, q), both contiguous, of one
** float dtype. Window (i, j) starts at (i stride[0] - pad[0], j stride[1] - pad[1]) and
** takes kernel taps dilation apart, clipped to the input (ceil_mode's last windows may pass
** the padded edge: p and q are the core's). MAX: y = the window's max (NaN wins), idx (int64,
** like y) its 1-based flat position h_i * w + w_i + 1 (index values are 1-based down to
** the devices, ops.h), the first of equal ones in window
** order. AVG (dilation 1): y = the window's sum / divisor; AVG_BACKWARD writes x (the input's
** gradient) from y (the output's). The divisor: divisor_override when > 0, else the window's
** size clipped to the padded input (count_include_pad) or to the input. */
typedef enum qt_pool_mode { QT_POOL_MAX, QT_POOL_AVG, QT_POOL_AVG_BACKWARD } qt_pool_mode;
typedef struct qt_pool_geom {
  int64_t planes, h, w, p, q;
  int64_t kernel[2], stride[2], pad[2], dilation[2];
  int64_t divisor_override;
  bool count_include_pad;
} qt_pool_geom;

/* Scaled dot-product attention (the attention slot). Views by the QT_ATTN_ enum below:
** q (b, hq, sq, d), k (b, hk, sk, d) and v (b, hk, sk, dv) of one float dtype, each with
** its last stride 1 (the others free); query head h reads key/value head h / (hq / hk).
** mask (when has): (b, hq, sq, sk), any strides (0 where broadcast), of q's dtype (added to
** the scores) or bool (false: the key is masked). Score s_ij = scale q_i . k_j + mask_ij, -inf where causal and j > i (aligned
** top-left, as PyTorch's is_causal); p_i = softmax(s_i). Dropout (dropout_p > 0): entry
** (b, h, i, j) is kept when the float32 uniform draw (philox.h) of counter offset +
** ((b hq + h) sq + i) sk + j under seed is >= dropout_p (the draw qlua.rand_like makes),
** and kept ones are scaled by 1 / (1 - dropout_p). Forward writes o (b, hq, sq, dv) =
** dropped(p) v and lse (b, hq, sq) = log sum_j exp(s_ij), float64 for float64 q, else
** float32; a row whose keys are all masked has lse -inf and o 0 (PyTorch's safe softmax).
** Backward reads q, k, v, mask, o, lse and do (o's shape) and writes dq, dk and dv (q's, k's
** and v's shapes; dk and dv sum over the query heads that share a key head). o, lse, do,
** dq, dk and dv are contiguous. path (when not NULL, QT_ATTN_PATH_LEN bytes) gets the name
** of the kernels that run (and why a faster path did not take the call); plan_only: only
** that (nothing runs, no view is read). */
enum {
  QT_ATTN_Q, QT_ATTN_K, QT_ATTN_V, QT_ATTN_MASK, QT_ATTN_O, QT_ATTN_LSE, QT_ATTN_DO,
  QT_ATTN_DQ, QT_ATTN_DK, QT_ATTN_DV, QT_ATTN_NVIEWS
};
#define QT_ATTN_PATH_LEN 256
typedef struct qt_attn_opts {
  bool backward, causal, plan_only;
  bool use_cudnn;   /* a GPU may run it on cuDNN's fused attention (qlua.set_cudnn_enabled) */
  int64_t b, hq, hk, sq, sk, d, dv;
  double scale, dropout_p;
  uint64_t seed, offset;
  unsigned has;   /* bit QT_ATTN_<view> for each view that is there */
} qt_attn_opts;

/* One fused optimizer update (the optim_step slot; PyTorch's fused=True kernels): every
** tensor of the call gets the same step. Each tensor k comes as nviews views: its
** parameter, its gradient, then its state, as kind says. */
typedef enum qt_optim_kind { QT_OPTIM_SGD, QT_OPTIM_ADAM } qt_optim_kind;
typedef struct qt_optim_opts {
  qt_optim_kind kind;
  int nviews;              /* 2 + the state tensors: SGD 2 or 3, Adam 4 or 5 */
  double lr, weight_decay;
  bool maximize;           /* ascend: the gradient's sign flipped first */
  /* SGD: g = grad + weight_decay * p; with momentum != 0 the state is the momentum buffer,
  ** buf = first ? g : momentum * buf + (1 - dampening) * g, and g = nesterov ? g + momentum
  ** * buf : buf; then p -= lr * g. */
  double momentum, dampening;
  bool nesterov, first;
  /* Adam: state exp_avg, exp_avg_sq (and max_exp_avg_sq when amsgrad). decoupled (AdamW):
  ** p *= 1 - lr * weight_decay, else g = grad + weight_decay * p; m = lerp(m, g, 1 - beta1),
  ** v = beta2 * v + (1 - beta2) g^2 (amsgrad: vmax = max(vmax, v), read instead of v);
  ** p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps), bc = 1 - beta^step. */
  double beta1, beta2, eps, bias_correction1, bias_correction2;
  bool decoupled, amsgrad;
  /* Adam: NULL, or one float64 in the device's memory holding the step (>= 1) that the
  ** update reads when it runs, for bias corrections computed there instead of the two
  ** above (qlua.optim's capturable state: a captured step replays with the count of its
  ** replay). */
  const double *step_count;
} qt_optim_opts;

/* A compile request for the compile slot. */
typedef struct qt_compile_job {
  const char *source;
  const char *program;                /* its name in messages ("kernel.cu") */
  int noptions;
  const char *const *options;         /* "-DN=4", "--use_fast_math", ... */
  int nheaders;
  const char *const *header_names;    /* #include "<name>" finds header_sources[k] */
  const char *const *header_sources;
  int nexpressions;
  const char *const *expressions;     /* template instantiations to name ("axpy<float>") */
} qt_compile_job;

/* What compile gives back; every pointer is malloc'd and the caller's to free
** (qt_compile_result_free in ops.h). */
typedef struct qt_compile_result {
  char *image;
  size_t image_size;
  char **lowered;                     /* the mangled name of each expression */
  int nlowered;
} qt_compile_result;

#define QT_KERNEL_MAXPARAMS 64
/* A kernel's parameter layout and the limits a launch must respect. */
typedef struct qt_kernel_info {
  int nparams;                         /* -1 when the device cannot tell */
  size_t param_size[QT_KERNEL_MAXPARAMS];
  int num_regs;
  int max_threads;                     /* per block, for this kernel */
  size_t static_shared;                /* bytes */
  size_t max_dynamic_shared;           /* bytes, with the opt-in raised as far as it goes */
  unsigned max_block[3], max_grid[3];  /* the device's limits per dimension */
} qt_kernel_info;

typedef struct qt_launch_cfg {
  unsigned grid[3], block[3];
  size_t shared;                       /* dynamic shared memory, bytes */
} qt_launch_cfg;

typedef struct qt_memory_stats {
  int64_t allocated;  /* bytes in live allocations */
  int64_t reserved;   /* bytes held from the driver (allocated + cached) */
  int64_t peak;       /* highest `allocated` seen */
  int64_t total;      /* device memory in all (0 for the CPU) */
  int64_t free;       /* device memory free as the driver sees it */
  int64_t graph;      /* of reserved, bytes held by CUDA graphs' pools (qlua.graph) */
} qt_memory_stats;

typedef struct qt_device qt_device;

/* The device slots, in table order: X(P, ENUM, name, kind, ret, params), each row's
** contract in the comment above it. From this one list come qt_device_iface's members,
** qt_slot (the ELEM rows: their half_native bits), widen.c's stand-ins, every device's
** prototypes (QT_SLOT_PROTOTYPES) and the CUDA table. kind: MEM (memory, transfers, what the device runs),
** ALL16 (copy, fill, optim_step: every dtype they take, 16-bit too, natively), ELEM
** (element slots: a half_native bit, and a float32 stand-in wd_<name> in widen.c), USER
** (code the user brings: NULL where it cannot run). Consumers take `...` after params,
** so a later column breaks none of them. */
#define QT_SLOT_LIST(X, P)                                                                       \
  /* ---- memory ---- */                                                                         \
  /* Allocates nbytes (nbytes may be 0: *ptr is then any non-NULL-or-NULL value that             \
  ** `free` accepts). Out of memory is reported with *oom = 1 (so the core can empty             \
  ** caches, collect garbage and retry) and a message. */                                        \
  X(P, ALLOC, alloc, MEM, int,                                                                   \
    (qt_device *dev, size_t nbytes, void **ptr, int *oom, qt_err *err))                          \
  /* Gives a block back; never fails. On the GPU, safe to call while kernels that use            \
  ** the block are still queued (the allocator reuses it in stream order). */                    \
  X(P, FREE, free, MEM, void, (qt_device *dev, void *ptr, size_t nbytes))                        \
  /* Waits for everything queued on the device; reports deferred errors. */                      \
  X(P, SYNC, sync, MEM, int, (qt_device *dev, qt_err *err))                                      \
  X(P, MEMORY, memory, MEM, int, (qt_device *dev, qt_memory_stats *stats, qt_err *err))          \
  /* Returns cached blocks to the driver. */                                                     \
  X(P, EMPTY_CACHE, empty_cache, MEM, void, (qt_device *dev))                                    \
  /* What runs an op family here, as text for qlua.backend ("conv": "cuDNN 9.14.0", "im2col +   \
  ** cuBLAS (cannot load cuDNN ...)", "im2col + OpenBLAS"); "" for a family it does not      \
  ** name. May load the library it names. use_cudnn: the context allows cuDNN. */           \
  X(P, DESCRIBE, describe, MEM, int,                                                             \
    (qt_device *dev, const char *family, bool use_cudnn, char *buf, size_t len, qt_err *err))   \
  /* ---- CUDA graphs (runtime/core/ops_graph.c; kernels/cuda_graph.cu); NULL on a device      \
  ** that cannot capture (the CPU: qlua.graph then runs the function eagerly). ----            \
  ** graph_begin starts capturing the device's queue: nothing queued from then on runs; it     \
  ** is recorded into *graph. Memory allocated meanwhile comes from the graph's own pool (a     \
  ** new one, or share's: another graph of this device), kept while the graph lives; blocks    \
  ** of the device's cache freed meanwhile are held until the graph is freed. Random slots     \
  ** read (seed, base offset) from the graph's device slot then, adding their own offset:     \
  ** the core passes offsets counted from the capture's start. */                               \
  X(P, GRAPH_BEGIN, graph_begin, MEM, int,                                                       \
    (qt_device *dev, void *share, void **graph, qt_err *err))                                    \
  /* Ends the capture; keep: instantiates the graph (-1 with err when the capture was           \
  ** invalidated or does not instantiate: the graph is then freed), else discards it (never     \
  ** fails). Either way the queue runs normally again. */                                       \
  X(P, GRAPH_END, graph_end, MEM, int, (qt_device *dev, void *graph, bool keep, qt_err *err))    \
  /* Queues the whole graph once, its random slots reading (seed, offset + their own). */       \
  X(P, GRAPH_LAUNCH, graph_launch, MEM, int,                                                     \
    (qt_device *dev, void *graph, uint64_t seed, uint64_t offset, qt_err *err))                  \
  /* Frees an instantiated graph (waiting for its queued launches) and what it holds. */        \
  X(P, GRAPH_FREE, graph_free, MEM, void, (qt_device *dev, void *graph))                         \
  /* dst (on dev) = nbytes at src, on src_dev: another device of dev's kind (the GPUs: peer to   \
  ** peer where the two allow it, else staged by the driver). Queued: dev's queue waits for     \
  ** what src_dev's holds, and src_dev's for the copy. NULL where devices of this kind cannot   \
  ** reach each other (the core then goes through host memory). */                             \
  X(P, COPY_PEER, copy_peer, MEM, int,                                                           \
    (qt_device *dev, void *dst, qt_device *src_dev, const void *src, size_t nbytes, qt_err *err)) \
  /* ---- collectives (runtime/core/ops_dist.c; cpu_dist.c, kernels/cuda_dist.cu) ----         \
  ** comm_open is itself collective: every rank of link calls it, and each gets the device's   \
  ** communicator for the group (the GPU: an NCCL communicator, rank 0's unique id sent over   \
  ** link; the CPU: the link itself, reduced through rank 0). Between comm_group(dev, true)     \
  ** and (dev, false), one thread may open or run the communicators of a single process's    \
  ** GPUs together (NCCL's group calls; NULL where there is nothing to group). */              \
  X(P, COMM_OPEN, comm_open, MEM, int,                                                           \
    (qt_device *dev, qt_dist_link *link, void **comm, qt_err *err))                              \
  /* Frees a communicator; abort: without waiting for what it has queued (a rank is gone). */   \
  X(P, COMM_CLOSE, comm_close, MEM, void, (qt_device *dev, void *comm, bool abort))              \
  X(P, COMM_GROUP, comm_group, MEM, int, (qt_device *dev, bool start, qt_err *err))              \
  /* Queues this rank's part of c. *work: NULL when it is done already (the CPU), else what    \
  ** work_wait waits for or work_release lets go. Nothing later on the device's queue runs    \
  ** before it ends. */                                                                        \
  X(P, COLLECTIVE, collective, MEM, int,                                                         \
    (qt_device *dev, void *comm, const qt_coll *c, void **work, qt_err *err))                    \
  /* Waits for work on the host, polling link->check and the link's timeout; a rank gone or    \
  ** the time up aborts comm and fails naming why. Frees work either way. */                    \
  X(P, WORK_WAIT, work_wait, MEM, int,                                                           \
    (qt_device *dev, void *comm, void *work, qt_dist_link *link, qt_err *err))                   \
  /* Lets work go unwaited: the device's queue still waits for it (stream order), so memory   \
  ** the collective uses may be freed after. */                                                \
  X(P, WORK_RELEASE, work_release, MEM, void, (qt_device *dev, void *work))                      \
  /* ---- host <-> device, contiguous bytes ---- */                                              \
  /* Both return after the bytes have landed (host memory may be reused at once). */             \
  X(P, UPLOAD, upload, MEM, int,                                                                 \
    (qt_device *dev, void *dst, const void *host_src, size_t nbytes, qt_err *err))               \
  X(P, DOWNLOAD, download, MEM, int,                                                             \
    (qt_device *dev, void *host_dst, const void *src, size_t nbytes, qt_err *err))               \
  /* ---- elementwise, all views on this device, all of dst's shape ---- */                      \
  /* dst = src, converting dtype; any strides. */                                                \
  X(P, COPY, copy, ALL16, int,                                                                   \
    (qt_device *dev, const qt_view *dst, const qt_view *src, qt_err *err))                       \
  X(P, FILL, fill, ALL16, int,                                                                   \
    (qt_device *dev, const qt_view *dst, qt_scalar value, qt_err *err))                          \
  /* dst = a op b; a, b, dst have one dtype; a and b are broadcast to dst's shape by             \
  ** the core (stride 0). dst may be a (in-place ops) but never overlaps b partially. */         \
  X(P, BINARY, binary, ELEM, int,                                                                \
    (qt_device *dev, qt_binop op, const qt_view *dst, const qt_view *a, const qt_view *b,        \
     qt_err *err))                                                                               \
  /* dst = a op s, or s op a when scalar_first; a and dst have one dtype. */                     \
  X(P, BINARY_SCALAR, binary_scalar, ELEM, int,                                                  \
    (qt_device *dev, qt_binop op, const qt_view *dst, const qt_view *a, qt_scalar s,             \
     bool scalar_first, qt_err *err))                                                            \
  /* dst = op(src, params); src and dst of one dtype, or dst bool for the ops that give          \
  ** bool (qt_unop_gives_bool). The core casts integer inputs of the float-only ops              \
  ** (qt_unop_takes_ints) to float64 first. */                                                   \
  X(P, UNARY, unary, ELEM, int,                                                                  \
    (qt_device *dev, qt_unop op, const qt_view *dst, const qt_view *src,                         \
     const qt_unop_params *params, qt_err *err))                                                 \
  /* Along dim (0-based): dst has src's shape without dim. dim == -1: over all                   \
  ** elements into a one-element dst (ndim 0). Never over nothing (the core answers those).      \
  ** arg: see QT_REDOP_LIST (the correction of VAR/STD, the p of NORM). */                       \
  X(P, REDUCE, reduce, ELEM, int,                                                                \
    (qt_device *dev, qt_redop op, const qt_view *dst, const qt_view *src, int dim,               \
     double arg, qt_err *err))                                                                   \
  /* ---- indexing (dims 0-based, index values 1-based, see above) ---- */                       \
  /* dst[i][j] = src[index[i][j]][j] (dim 0); dst and index have one shape;                      \
  ** index->size[d] <= src->size[d] for d != dim. */                                             \
  X(P, GATHER, gather, ELEM, int,                                                                \
    (qt_device *dev, const qt_view *dst, const qt_view *src, int dim, const qt_view *index,      \
     qt_err *err))                                                                               \
  /* dst = src with slices index[k] along dim; index is 1-D. */                                  \
  X(P, INDEX_SELECT, index_select, ELEM, int,                                                    \
    (qt_device *dev, const qt_view *dst, const qt_view *src, int dim, const qt_view *index,      \
     qt_err *err))                                                                               \
  /* dst[k] = flat(src)[index[k]] over src's row-major order; dst has index's shape. */          \
  X(P, TAKE, take, ELEM, int,                                                                    \
    (qt_device *dev, const qt_view *dst, const qt_view *src, const qt_view *index,               \
     qt_err *err))                                                                               \
  /* dst[index[i][j]][j] = src[i][j] (dim 0); src == NULL means every value is `value`.          \
  ** index->size[d] <= src->size[d] (when src given) and <= dst->size[d] for d != dim. */        \
  X(P, SCATTER, scatter, ELEM, int,                                                              \
    (qt_device *dev, const qt_view *dst, int dim, const qt_view *index, const qt_view *src,      \
     qt_scalar value, qt_err *err))                                                              \
  /* dst.select(dim, index[k]) += src.select(dim, k); index 1-D; duplicates accumulate.          \
  ** bool: a logical or (true + anything is true, as PyTorch's). */                              \
  X(P, INDEX_ADD, index_add, ELEM, int,                                                          \
    (qt_device *dev, const qt_view *dst, int dim, const qt_view *index, const qt_view *src,      \
     qt_err *err))                                                                               \
  /* The three below are slots of their own rather than modes of scatter and index_add:          \
  ** each contract stays one line, and a device may leave any of them NULL. */                   \
  /* dst[index[i][j]][j] += src[i][j] (dim 0): scatter's geometry (src required, dst's           \
  ** dtype), index_add's sums (integers wrap, bool or); duplicates accumulate, in no fixed       \
  ** order on a device that uses atomics (float sums may differ in the last bits). */            \
  X(P, SCATTER_ADD, scatter_add, ELEM, int,                                                      \
    (qt_device *dev, const qt_view *dst, int dim, const qt_view *index, const qt_view *src,      \
     qt_err *err))                                                                               \
  /* dst.select(dim, index[k]) = value for every k; index 1-D. */                                \
  X(P, INDEX_FILL, index_fill, ELEM, int,                                                        \
    (qt_device *dev, const qt_view *dst, int dim, const qt_view *index, qt_scalar value,         \
     qt_err *err))                                                                               \
  /* dst.select(dim, index[k]) = src.select(dim, k); index 1-D, src of dst's dtype and of        \
  ** dst's shape with index->size[0] along dim. Duplicates: any one of the writes wins. */       \
  X(P, INDEX_COPY, index_copy, ELEM, int,                                                        \
    (qt_device *dev, const qt_view *dst, int dim, const qt_view *index, const qt_view *src,      \
     qt_err *err))                                                                               \
  /* ---- masks: every mask is bool (the core reads other dtypes as ne(x, 0) first) ---- */      \
  /* dst = cond ? a : b, elementwise; a and b have dst's dtype, or are NULL for a_value /        \
  ** b_value everywhere (both fields filled for dst's dtype); cond, a and b are broadcast        \
  ** to dst's shape by the core (stride 0). dst may be b itself, the same view (masked_fill_),   \
  ** but never overlaps cond or a. */                                                            \
  X(P, WHERE, where, ELEM, int,                                                                  \
    (qt_device *dev, const qt_view *dst, const qt_view *cond, const qt_view *a,                  \
     qt_scalar a_value, const qt_view *b, qt_scalar b_value, qt_err *err))                       \
  /* dst (1-D, contiguous, src's dtype) = the elements of src where mask is true, in             \
  ** row-major order; src and mask have one shape (broadcast by the core, stride 0), and dst     \
  ** has exactly as many elements as mask has true ones (the core counted them). */              \
  X(P, MASKED_SELECT, masked_select, ELEM, int,                                                  \
    (qt_device *dev, const qt_view *dst, const qt_view *src, const qt_view *mask,                \
     qt_err *err))                                                                               \
  /* dst (n x mask->ndim, int64, contiguous) = the 1-based positions of mask's true elements     \
  ** in row-major order, one row each; mask->ndim >= 1 and mask has exactly n true ones. */      \
  X(P, NONZERO, nonzero, ELEM, int,                                                              \
    (qt_device *dev, const qt_view *dst, const qt_view *mask, qt_err *err))                      \
  /* ---- matrix products ---- */                                                                \
  /* c[b] = alpha * a[b] @ b[b] + beta * c[b] for every batch b (BLAS's GEMM): a is              \
  ** (B, M, K), b (B, K, N), c (B, M, N), all 3-D, one float dtype (float32 or float64),         \
  ** any strides for a and b (a batch stride may be 0: broadcasting). c is contiguous and        \
  ** overlaps neither a nor b. beta == 0 does not read c (NaN there does not propagate);         \
  ** K == 0 makes c = beta * c. allow_tf32 permits TF32 tensor cores for float32. */             \
  X(P, MATMUL, matmul, ELEM, int,                                                                \
    (qt_device *dev, const qt_view *c, const qt_view *a, const qt_view *b, double alpha,         \
     double beta, bool allow_tf32, qt_err *err))                                                 \
  /* ---- random numbers: dst is contiguous ---- */                                              \
  /* UNIFORM [0,1), NORMAL (mean 0, sd 1), INT uniform in [lo.i, hi.i]. */                       \
  X(P, RANDOM, random, ELEM, int,                                                                \
    (qt_device *dev, qt_random_kind kind, const qt_view *dst, uint64_t seed,                     \
     uint64_t offset, qt_scalar lo, qt_scalar hi, qt_err *err))                                  \
  /* ---- scans and softmax along a dim (0-based): src, dst (and indices) have one shape         \
  ** and are all contiguous (the core copies a strided source first); a 0-d view counts as       \
  ** one element along dim 0. NULL on a device that has neither. ---- */                         \
  /* dst = the scan of src along dim (QT_SCANOP_LIST says the dtypes); indices: int64, the       \
  ** 1-based positions for CUMMAX and CUMMIN, NULL for the others. Float32 sums and              \
  ** products accumulate in float64 on the CPU and in float32 on the GPU. */                     \
  X(P, SCAN, scan, ELEM, int,                                                                    \
    (qt_device *dev, qt_scanop op, const qt_view *dst, const qt_view *indices,                   \
     const qt_view *src, int dim, qt_err *err))                                                  \
  /* dst = softmax (log: log_softmax) of src along dim, max-subtracted; float32 or float64,      \
  ** one dtype. A NaN anywhere along dim, or a +inf (inf - inf), makes that slice NaN, and       \
  ** so does a slice of only -inf, as PyTorch's. */                                              \
  X(P, SOFTMAX, softmax, ELEM, int,                                                              \
    (qt_device *dev, bool log, const qt_view *dst, const qt_view *src, int dim,                  \
     qt_err *err))                                                                               \
  /* ---- sorting and selection (runtime/core/ops_sort.c; cpu_sort.c, kernels/sort.cu) ----      \
  ** The order: numbers compare as numbers (-0.0 equals 0.0), every NaN is above every           \
  ** number and all NaNs are equal; equal elements keep their order (stable), descending         \
  ** included. bool sorts as 0 < 1. "Rows" views are 2-D (rows, n), contiguous (strides n, 1);   \
  ** the core makes every input so. Indices are int64, 1-based positions within the row. */      \
  /* values and indices (rows, n) = each row of src sorted; values has src's dtype. */           \
  X(P, SORT, sort, ELEM, int,                                                                    \
    (qt_device *dev, const qt_view *values, const qt_view *indices, const qt_view *src,          \
     bool descending, qt_err *err))                                                              \
  /* values and indices (rows, k), 1 <= k <= n = the k largest (largest) or smallest of each     \
  ** row of src, best first, ties in their order: the first k of sort (descending = largest). */ \
  X(P, TOPK, topk, ELEM, int,                                                                    \
    (qt_device *dev, const qt_view *values, const qt_view *indices, const qt_view *src,          \
     int64_t k, bool largest, qt_err *err))                                                      \
  /* sorted (1-D, n >= 1, ascending) and perm (its int64 sort indices): the runs of equal        \
  ** elements (NaNs are one run). uniques (n) gets each run's first element, counts (n,          \
  ** int64, or NULL) its length, inverse (n, int64, or NULL) at perm[i] - 1 the 1-based run      \
  ** number of element i; *count = the number of runs (the slot waits for it). */                \
  X(P, UNIQUE, unique, ELEM, int,                                                                \
    (qt_device *dev, const qt_view *uniques, const qt_view *inverse, const qt_view *counts,      \
     const qt_view *sorted, const qt_view *perm, int64_t *count, qt_err *err))                   \
  /* dst (1-D, contiguous, zeroed by the core) [src[i]] += 1 (int64 dst, weights NULL) or        \
  ** weights[i] (dst's dtype, float32 or float64); src 1-D contiguous of an integer or bool      \
  ** dtype with values in 0..dst->numel - 1 (checked by the core). Float sums on a device        \
  ** with atomics are in no fixed order. */                                                      \
  X(P, BINCOUNT, bincount, ELEM, int,                                                            \
    (qt_device *dev, const qt_view *dst, const qt_view *src, const qt_view *weights,             \
     qt_err *err))                                                                               \
  /* dst (bins, int64, contiguous, zeroed) counts the elements x of src (contiguous, not         \
  ** bool) with lo <= x <= hi (lo < hi), x in bin min(floor((x - lo) / (hi - lo) * bins),        \
  ** bins - 1), computed in double (qt_histc_bin, scalar.h, also when hi - lo overflows);        \
  ** NaN is in no bin. */                                                                        \
  X(P, HISTC, histc, ELEM, int,                                                                  \
    (qt_device *dev, const qt_view *dst, const qt_view *src, double lo, double hi,               \
     qt_err *err))                                                                               \
  /* dst (rows, m) int64 = 1 + the number of elements of sorted's row (rows, n) that are         \
  ** below (right: not above) values' element (rows, m); sorted and values of one dtype,         \
  ** all contiguous. A row that is not sorted gives positions of no meaning. */                  \
  X(P, SEARCHSORTED, searchsorted, ELEM, int,                                                    \
    (qt_device *dev, const qt_view *dst, const qt_view *sorted, const qt_view *values,           \
     bool right, qt_err *err))                                                                   \
  /* ---- convolution (runtime/core/ops_conv.c; cpu_conv.c, kernels/conv.cu) ----             \
  ** mode says which of x, w, y (all contiguous, of g's shapes, one float dtype) is written     \
  ** from the other two (qt_conv_mode). The core checks the geometry. */                       \
  X(P, CONV, conv, ELEM, int,                                                                    \
    (qt_device *dev, qt_conv_mode mode, const qt_conv_geom *g, const qt_view *x,                 \
     const qt_view *w, const qt_view *y, qt_err *err))                                           \
  /* ---- normalisation (runtime/core/ops_norm.c; cpu_norm.c, kernels/norm.cu) ----        \
  ** v: QT_NORM_NVIEWS views by qt_norm_opts's enum, those not in o->has unset. ---- */      \
  X(P, NORM, norm, ELEM, int, (qt_device *dev, const qt_norm_opts *o, const qt_view *v,        \
                               qt_err *err))                                                   \
  /* ---- pooling (runtime/core/ops_pool2d.c; cpu_pool2d.c, kernels/pool2d.cu) ----               \
  ** idx: MAX's positions (NULL when not wanted), else NULL. ---- */                          \
  X(P, POOL2D, pool2d, ELEM, int,                                                                    \
    (qt_device *dev, qt_pool_mode mode, const qt_pool_geom *g, const qt_view *x,                 \
     const qt_view *y, const qt_view *idx, qt_err *err))                                         \
  /* ---- attention (runtime/core/ops_attention.c; cpu_attention.c, kernels/attention.cu) --- \
  ** v: QT_ATTN_NVIEWS views by the QT_ATTN_ enum, those not in o->has unset. ---- */         \
  X(P, ATTENTION, attention, ELEM, int,                                                          \
    (qt_device *dev, const qt_attn_opts *o, const qt_view *v, char *path, qt_err *err))          \
  /* ---- fused optimizer updates (runtime/core/ops_optim.c; cpu_optim.c, kernels/optim.cu) \
  ** For each k < n, step's update of parameter k: views[k * step->nviews + j], j = 0 the      \
  ** parameter, 1 its gradient, then its state in qt_optim_opts's order; all contiguous, of   \
  ** one numel per k and one float dtype in the call (16-bit computed in float32, float32 in   \
  ** float32, float64 in float64). No view overlaps another. ---- */                          \
  X(P, OPTIM_STEP, optim_step, ALL16, int,                                                       \
    (qt_device *dev, const qt_optim_opts *step, int64_t n, const qt_view *views, qt_err *err))   \
  /* ---- code the user brings (qlua.kernel, qlua.module, C extensions) ----                     \
  ** NULL on a device that cannot run it (the CPU); the core then says so. */                    \
  /* The queue this device's work runs on, in order (a cudaStream_t). */                         \
  X(P, NATIVE_STREAM, native_stream, USER, void *, (qt_device *dev))                             \
  /* What compiled code for this device depends on, as text for cache keys ("nvrtc 13.0          \
  ** sm_90"); loads the compiler on first use, or fails saying what is missing. */               \
  X(P, COMPILER_ID, compiler_id, USER, int,                                                      \
    (qt_device *dev, char *buf, size_t len, qt_err *err))                                        \
  /* Compiles job->source for this device; on success out holds the image (and lowered           \
  ** names), on a compile error the message carries the compiler's log. */                       \
  X(P, COMPILE, compile, USER, int,                                                              \
    (qt_device *dev, const qt_compile_job *job, qt_compile_result *out, qt_err *err))            \
  /* Loads an image (PTX, cubin or fatbin); *module is the device's handle. */                   \
  X(P, MODULE_LOAD, module_load, USER, int,                                                      \
    (qt_device *dev, const void *image, size_t nbytes, void **module, qt_err *err))              \
  X(P, MODULE_UNLOAD, module_unload, USER, void, (qt_device *dev, void *module))                 \
  /* The kernels a module defines: calls each(name, arg) once per kernel. */                     \
  X(P, MODULE_KERNELS, module_kernels, USER, int,                                                \
    (qt_device *dev, void *module, void (*each)(const char *, void *), void *arg,                \
     qt_err *err))                                                                               \
  /* A kernel of the module by (lowered) name, with its parameter layout and limits. */          \
  X(P, KERNEL_GET, kernel_get, USER, int,                                                        \
    (qt_device *dev, void *module, const char *name, void **kernel, qt_kernel_info *info,        \
     qt_err *err))                                                                               \
  /* Queues kernel(args) on native_stream. args[k] points at parameter k's bytes, which          \
  ** are copied at the call. The core has checked cfg against the info's limits. */              \
  X(P, LAUNCH, launch, USER, int,                                                                \
    (qt_device *dev, void *kernel, const qt_launch_cfg *cfg, void **args, qt_err *err))          \
  /* end of the list */

#define QT_SLOT_MEMBER_(P, E, name, kind, ret, params, ...) ret (*name) params;
typedef struct qt_device_iface {
  QT_SLOT_LIST(QT_SLOT_MEMBER_, ~)
  /* ---- the 16-bit floats ---- */
  /* copy and fill take float16 and bfloat16 like every dtype (converting exactly as
  ** half.h says). Every other slot that reads or writes elements takes them only when
  ** its bit is set here (QT_SLOT_BIT): for the others the registry (widen.c) passes
  ** float32 copies of the 16-bit views, converted in and rounded back, so a device
  ** may start with none and add native code slot by slot. */
  uint64_t half_native;
} qt_device_iface;
#undef QT_SLOT_MEMBER_

/* The element slots (kind ELEM), named for half_native: QT_SLOT_BINARY ... in list order. */
#define QT_SLOT_ENUM_(P, E, name, kind, ...) QT_SLOT_IF_ELEM_##kind(QT_SLOT_##E, )
#define QT_SLOT_IF_ELEM_ELEM(...) __VA_ARGS__
#define QT_SLOT_IF_ELEM_MEM(...)
#define QT_SLOT_IF_ELEM_ALL16(...)
#define QT_SLOT_IF_ELEM_USER(...)
typedef enum qt_slot { QT_SLOT_LIST(QT_SLOT_ENUM_, ~) QT_NSLOTS } qt_slot;
#undef QT_SLOT_ENUM_
#define QT_SLOT_BIT(s) ((uint64_t)1 << (s))
#ifdef __cplusplus
static_assert(QT_NSLOTS <= 64, "half_native holds one bit per element slot");
#else
_Static_assert(QT_NSLOTS <= 64, "half_native holds one bit per element slot");
#endif

/* The prototypes of a device's slot functions, named <prefix><name>: every slot
** (QT_SLOT_PROTOTYPES, the CUDA device's qt_cuda_*), or the element slots with copy and
** fill (QT_SLOT_ELEMENT_PROTOTYPES, the CPU's cpu_*, whose memory slots are its own). */
#define QT_SLOT_PROTO_(P, E, name, kind, ret, params, ...) ret QT_PP_CAT(P, name) params;
#define QT_SLOT_ELEMENT_PROTO_(P, E, name, kind, ret, params, ...) \
  QT_SLOT_IF_ELEMENT_##kind(ret QT_PP_CAT(P, name) params;)
#define QT_SLOT_IF_ELEMENT_ELEM(...) __VA_ARGS__
#define QT_SLOT_IF_ELEMENT_ALL16(...) __VA_ARGS__
#define QT_SLOT_IF_ELEMENT_MEM(...)
#define QT_SLOT_IF_ELEMENT_USER(...)
#define QT_SLOT_PROTOTYPES(prefix) QT_SLOT_LIST(QT_SLOT_PROTO_, prefix)
#define QT_SLOT_ELEMENT_PROTOTYPES(prefix) QT_SLOT_LIST(QT_SLOT_ELEMENT_PROTO_, prefix)

struct qt_device {
  const qt_device_iface *iface;   /* what the core calls: `native`, widened (widen.c) */
  void *context;         /* the device's own state */
  qt_device_kind kind;
  int ordinal;           /* 0 for the CPU; the CUDA ordinal for GPUs */
  char name[16];         /* "cpu", "gpu:0", ... as t:device() prints it */
  const qt_device_iface *native;  /* the device's own table, which iface widens */
  /* The graph being captured on this device (ops_graph.c sets and clears it around
  ** graph_begin / graph_end), or NULL: what needs the host then refuses to run. */
  void *capture;
};

/* ---- the registry (device.c); process-wide and thread-safe ---- */

/* The table the core calls for a device whose own table is `native`: native's slots,
** with every element slot whose half_native bit is clear standing in through float32
** copies for float16/bfloat16 views (widen.c). Made once per native table (a few
** tables at most; past that, native itself); lives as long as the process. */
const qt_device_iface *qt_widen_iface(const qt_device_iface *native);

/* The host device; always there. */
qt_device *qt_cpu_device(void);
/* Bytes the CPU device holds now (process-wide). A plain counter read, cheap enough for
** every allocation (the core's GC pacing); `memory` gives the full stats. */
int64_t qt_cpu_allocated(void);
/* The CPU device's threads (process-wide): how many run a large op, the calling thread
** included (QLUA_NUM_THREADS, else the usable cores); set_ clamps n to 1 .. 256 and
** returns what it set; OpenBLAS's pool follows (cpu_pool.c). */
int qt_cpu_threads_get(void);
int qt_cpu_threads_set(int n);
/* What the CPU device runs on: the vector build its row functions picked ("avx512",
** "avx2", "generic"), and OpenBLAS's kernel set (its name, or the one asked for before it
** is loaded; NULL when neither is known). Static strings. */
const char *qt_cpu_simd(void);
const char *qt_cpu_blas_core(void);
/* How many GPUs this process can use: 0 when qlua was built without CUDA, or there is
** no driver or no GPU. Never prints, never fails. */
int qt_gpu_count(void);
/* The GPU with that ordinal, opened on first use; NULL with a message when there is no
** such GPU ("gpu:3: no such GPU (qlua sees 1)") or it cannot be opened. */
qt_device *qt_gpu_device(int ordinal, qt_err *err);
/* The GPU's marketing name ("NVIDIA H200"), or NULL with a message. */
const char *qt_gpu_name(int ordinal, qt_err *err);

/* ---- what the CUDA device provides (kernels/cuda_device.cu, cuda_host.cu) ----
** device.c calls these only when built with QLUA_CUDA defined. */
#ifdef QLUA_CUDA
int qt_cuda_device_count(void);                       /* 0 on any error; silent */
int qt_cuda_device_name(int ordinal, char *buf, size_t len, qt_err *err);
/* Fills dev (iface, context, kind, ordinal, name) for ordinal. */
int qt_cuda_device_open(int ordinal, qt_device *dev, qt_err *err);
/* Page-locked host memory for the CPU device, cached (so `:gpu()` and `:cpu()` of CPU
** tensors run at the PCIe limit). alloc returns -1 when no GPU is usable; the CPU
** device then falls back to plain aligned memory. */
int qt_cuda_host_alloc(size_t nbytes, void **ptr);
void qt_cuda_host_free(void *ptr, size_t nbytes);
void qt_cuda_host_empty_cache(void);
#endif

#ifdef __cplusplus
}
#endif
#endif
