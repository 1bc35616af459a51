/*
** ops_internal.h — what the tensor core's files share (runtime/core/ops_*.c, storage.c);
** not installed, not seen by devices or the binding.
**
** The core (ops.h's functions, one file per family: ops_create.c, ops_view.c, ops_move.c,
** ops_elementwise.c, ops_reduce.c, ops_index.c, ops_matmul.c) is the layer between the Lua binding (which converts Lua values and raises
** ctx->err.msg) and the devices (runtime/cpu/, the .cu files in kernels/). It checks everything
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
**
** The helpers every op uses: operand checks that name the op ("add: tensors on cpu and
** gpu:0"), the one allocation path (ops_alloc, over storage.c's ops_storage_new, which
** drives the collector and retries after an out-of-memory), casts and copies through the
** device slots, and broadcasting. Conventions as in ops.h: 0 or -1 with ctx->err set.
*/
#ifndef QLUA_OPS_INTERNAL_H
#define QLUA_OPS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "ops.h"
#include "tensor.h"

#define OPS_SHAPE_LEN 400  /* QT_MAXDIM sizes of up to 20 digits plus separators */


/* ---- storage.c */
/* The one way storages are made: charges the bytes to ctx, paces the collector, and on an
** out-of-memory empties the device cache, collects and retries once. */
int ops_storage_new(qt_ctx *ctx, const char *op, qt_device *dev, size_t nbytes,
                    qt_storage **out);
/* A device's own message behind the op's name ("empty: gpu:0: CUDA error: ..."). */
int ops_prefix_error(qt_ctx *ctx, const char *op);

/* ---- ops_common.c */
qt_device *ops_device(const qt_tensor *t);
const char *ops_shape(const qt_tensor *t, char *buf);
int ops_live(qt_ctx *ctx, const char *op, const qt_tensor *t);
int ops_same_device(qt_ctx *ctx, const char *op, const qt_tensor *a, const qt_tensor *b);
int ops_unsupported(qt_ctx *ctx, const char *op, const qt_device *dev);
/* ops_graph.c: -1 with "<op>: cannot run while a CUDA graph is being captured on <dev>
** ..." when a capture is under way there (what waits for the device or goes through the
** host), else 0. */
int ops_refuse_capture(qt_ctx *ctx, const char *op, const qt_device *dev);
int ops_check_dim(qt_ctx *ctx, const char *op, int dim, int ndim);
int ops_check_dtype(qt_ctx *ctx, const char *op, qt_dtype dtype);
int ops_check_index_dtype(qt_ctx *ctx, const char *op, const qt_tensor *index);
int ops_check_writable(qt_ctx *ctx, const char *op, const qt_tensor *t);
/* The values a dtype holds, for the ops that make them (creation, random fills), which
** refuse what does not fit rather than store inf or an inexact integer. ops_exact_ints: the
** integers it holds exactly, -2^digits..2^digits for a float (float16 2048, bfloat16 256,
** float32 2^24, float64 2^53), min..max for the others. ops_float_fits: whether the
** finite double v stored in float dtype d stays finite (rounded, as every float is). */
void ops_exact_ints(qt_dtype d, int64_t *lo, int64_t *hi);
bool ops_float_fits(qt_dtype d, double v);
bool ops_same_geometry(const qt_tensor *a, const qt_tensor *b);
bool ops_may_overlap(const qt_tensor *dst, const qt_tensor *src);
bool ops_same_shape(const qt_tensor *a, const qt_tensor *b);
int ops_alloc(qt_ctx *ctx, const char *op, qt_tensor *out, qt_device *dev, qt_dtype dtype, int ndim, const int64_t *size);
int ops_alloc_like(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *t, qt_dtype dtype);
int ops_copy_views(qt_ctx *ctx, const char *op, qt_device *dev, const qt_view *dst, const qt_view *src);
int ops_fill_view(qt_ctx *ctx, const char *op, qt_device *dev, const qt_view *dst, qt_scalar value);
int ops_copy_new(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *t, qt_dtype dtype);
int ops_cast(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *t, qt_dtype dtype);
int ops_broadcast_shape(qt_ctx *ctx, const char *op, const qt_tensor *a, const qt_tensor *b, int *ndim, int64_t *size);
bool ops_expand_strides(const qt_tensor *t, int ndim, const int64_t *size, int64_t *stride);
void ops_view_expanded(qt_view *v, const qt_tensor *t, int ndim, const int64_t *size);

/* ---- a growing byte buffer, always NUL-terminated; `failed` once an allocation failed
** (every later add is then a no-op, and the caller reports out of memory once) */
typedef struct ops_buf {
  char *data;
  size_t len, cap;
  bool failed;
} ops_buf;
void ops_buf_add(ops_buf *b, const void *data, size_t n);
void ops_buf_printf(ops_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- core/kernel/kernel_sig.c: user kernels' parameters */
/* The parameters of the __global__ function `name` (or "name<args>") in source. */
int ops_kernel_parse_source(qt_ctx *ctx, const char *op, const char *source, const char *name,
                            qt_param *params, int *nparams);
/* A signature string: "const float *x, int n". */
int ops_kernel_parse_list(qt_ctx *ctx, const char *op, const char *list, qt_param *params,
                          int *nparams);
/* The parameters an Itanium-mangled name spells (_Z6gatherPfPKfPKil), or -1. */
int ops_kernel_demangle(const char *mangled, qt_param *params, int *nparams);

#endif
