/*
** ops_matmul.c — matrix products: matmul (1-D, 2-D and batched operands), dot, outer, mv,
** bmm and addmm, all reduced to the devices' one batched 3-D GEMM slot
** (c = alpha * a @ b + beta * c), with strided operands passed through when BLAS can take
** them. einsum (ops_matmul_einsum.c) builds on qt_matmul too.
*/
#include "ops_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
static int ops_matmul_operand(qt_ctx *ctx, const char *op, qt_view *v, qt_tensor *tmp,
                              const qt_tensor *t, bool is_left, int nbatch,
                              const int64_t *bsize, int64_t batch) {
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

/* What every product checks first: live operands on one device, of one float dtype (integer products are refused, as PyTorch refuses them on CUDA: BLAS has no
** integer GEMM), no 0-d operand. */
static int ops_product_check(qt_ctx *ctx, const char *op, const qt_tensor *a,
                             const qt_tensor *b) {
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  if (ops_live(ctx, op, a) || ops_live(ctx, op, b) || ops_same_device(ctx, op, a, b)) return -1;
  const qt_tensor *operands[2] = { a, b };
  for (int i = 0; i < 2; i++) {
    qt_dtype dt = operands[i]->dtype;
    if (!qt_is_float(dt))
      return qt_errorf(&ctx->err, "%s: dtype %s is not supported (float32, float64, float16 "
                       "or bfloat16 only)", op, qt_dtypes[dt].name);
  }
  if (a->dtype != b->dtype)
    return qt_errorf(&ctx->err, "%s: dtypes %s and %s differ", op, qt_dtypes[a->dtype].name,
                     qt_dtypes[b->dtype].name);
  if (a->ndim == 0 || b->ndim == 0)
    return qt_errorf(&ctx->err, "%s: shapes %s and %s: 0-d tensors cannot be multiplied (use mul)",
                     op, ops_shape(a, s1), ops_shape(b, s2));
  qt_device *dev = ops_device(a);
  if (dev->iface->matmul == NULL) return ops_unsupported(ctx, op, dev);
  return 0;
}

/* The geometry of one product under matmul's rules. */
typedef struct ops_product {
  ops_matrix ma, mb;
  int nbatch;                   /* broadcast batch dims */
  int64_t bsize[QT_MAXDIM];
  int64_t batch;                /* their product: the device's B */
  int ndim;                     /* the result's shape */
  int64_t size[QT_MAXDIM];
} ops_product;

/* Every matmul case becomes the device's (B, M, K) @ (B, K, N): a 1-D a is a 1 x K row
** and a 1-D b a K x 1 column (their unit dims are dropped from the result), batch dims
** broadcast NumPy-style. The result shape is exactly the (B, M, N) packed layout. */
static int ops_product_shape(qt_ctx *ctx, const char *op, const qt_tensor *a,
                             const qt_tensor *b, ops_product *p) {
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  ops_matrix_of(&p->ma, a, true);
  ops_matrix_of(&p->mb, b, false);
  if (p->ma.cols != p->mb.rows)
    return qt_errorf(&ctx->err, "%s: shapes %s and %s do not match", op, ops_shape(a, s1),
                     ops_shape(b, s2));
  p->nbatch = p->ma.nbatch > p->mb.nbatch ? p->ma.nbatch : p->mb.nbatch;
  for (int d = p->nbatch - 1; d >= 0; d--) {
    int da = d - (p->nbatch - p->ma.nbatch), db = d - (p->nbatch - p->mb.nbatch);
    int64_t sa = da >= 0 ? a->size[da] : 1, sb = db >= 0 ? b->size[db] : 1;
    if (sa != sb && sa != 1 && sb != 1)
      return qt_errorf(&ctx->err, "%s: shapes %s and %s do not match (batch dims differ)", op,
                       ops_shape(a, s1), ops_shape(b, s2));
    p->bsize[d] = sa == 1 ? sb : sa;
  }
  p->ndim = 0;
  p->batch = 1;  /* saturated: an empty operand's batch sizes may multiply past int64 (the
                 ** result is empty then, and nothing runs) */
  for (int d = 0; d < p->nbatch; d++) {
    p->size[p->ndim++] = p->bsize[d];
    if (p->bsize[d] == 0 || p->batch == 0) p->batch = 0;
    else if (__builtin_mul_overflow(p->batch, p->bsize[d], &p->batch)) p->batch = INT64_MAX;
  }
  if (a->ndim >= 2) p->size[p->ndim++] = p->ma.rows;
  if (b->ndim >= 2) p->size[p->ndim++] = p->mb.cols;
  return 0;
}

/* res = alpha * a @ b + beta * res, res contiguous in p's result shape (beta == 0: res is
** not read). One call of the device's GEMM slot, after packing only the operands whose
** batch dims one stride cannot walk. */
static int ops_product_run(qt_ctx *ctx, const char *op, const ops_product *p, qt_tensor *res,
                           const qt_tensor *a, const qt_tensor *b, double alpha, double beta) {
  if (qt_numel(res) == 0) return 0;
  qt_device *dev = ops_device(a);
  int rc = -1;
  qt_tensor ta, tb;
  qt_tensor_init(&ta);
  qt_tensor_init(&tb);
  qt_view av, bv, cv;
  qt_view_of(&cv, res);
  if (p->ma.cols == 0) {
    av = cv, bv = cv;  /* sums of nothing: the device only scales c; a and b are not read */
    av.size[0] = p->batch, av.size[1] = p->ma.rows, av.size[2] = 0;
    bv.size[0] = p->batch, bv.size[1] = 0, bv.size[2] = p->mb.cols;
    av.ndim = bv.ndim = 3;
    av.numel = bv.numel = 0;
  } else if (ops_matmul_operand(ctx, op, &av, &ta, a, true, p->nbatch, p->bsize, p->batch) ||
             ops_matmul_operand(ctx, op, &bv, &tb, b, false, p->nbatch, p->bsize, p->batch)) {
    goto cleanup;
  }
  cv.ndim = 3;
  cv.size[0] = p->batch, cv.size[1] = p->ma.rows, cv.size[2] = p->mb.cols;
  cv.stride[0] = p->ma.rows * p->mb.cols, cv.stride[1] = p->mb.cols, cv.stride[2] = 1;
  for (int d = 3; d < QT_MAXDIM; d++) cv.size[d] = 1, cv.stride[d] = 0;
  if (dev->iface->matmul(dev, &cv, &av, &bv, alpha, beta, ctx->allow_tf32, &ctx->err))
    goto cleanup;
  rc = 0;
cleanup:
  qt_tensor_release(&ta);
  qt_tensor_release(&tb);
  return rc;
}

/* out = a @ b in a new tensor, after the shape rules the caller checked beyond matmul's. */
static int ops_product_new(qt_ctx *ctx, const char *op, qt_tensor *out, const qt_tensor *a,
                           const qt_tensor *b) {
  ops_product p;
  if (ops_product_shape(ctx, op, a, b, &p)) return -1;
  qt_tensor res;
  qt_tensor_init(&res);
  if (ops_alloc(ctx, op, &res, ops_device(a), a->dtype, p.ndim, p.size) ||
      ops_product_run(ctx, op, &p, &res, a, b, 1.0, 0.0)) {
    qt_tensor_release(&res);
    return -1;
  }
  *out = res;
  return 0;
}

int qt_matmul(qt_ctx *ctx, qt_tensor *out, const qt_tensor *a, const qt_tensor *b) {
  const char *op = "matmul";
  if (ops_product_check(ctx, op, a, b)) return -1;
  return ops_product_new(ctx, op, out, a, b);
}

/* ================================================================== dot, outer, mv, bmm */

int qt_dot(qt_ctx *ctx, qt_tensor *out, const qt_tensor *a, const qt_tensor *b) {
  const char *op = "dot";
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  if (ops_product_check(ctx, op, a, b)) return -1;
  if (a->ndim != 1 || b->ndim != 1)
    return qt_errorf(&ctx->err, "%s: expected two 1-D tensors, got shapes %s and %s", op,
                     ops_shape(a, s1), ops_shape(b, s2));
  if (a->size[0] != b->size[0])
    return qt_errorf(&ctx->err, "%s: sizes %lld and %lld differ", op, (long long)a->size[0],
                     (long long)b->size[0]);
  return ops_product_new(ctx, op, out, a, b);
}

/* a (n) and b (m) as the n x 1 and 1 x m matrices whose product (K = 1) is the outer one. */
int qt_outer(qt_ctx *ctx, qt_tensor *out, const qt_tensor *a, const qt_tensor *b) {
  const char *op = "outer";
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  if (ops_product_check(ctx, op, a, b)) return -1;
  if (a->ndim != 1 || b->ndim != 1)
    return qt_errorf(&ctx->err, "%s: expected two 1-D tensors, got shapes %s and %s", op,
                     ops_shape(a, s1), ops_shape(b, s2));
  qt_tensor col = *a, row = *b;  /* borrowed geometry; no reference taken or dropped */
  col.ndim = row.ndim = 2;
  col.size[1] = 1, col.stride[1] = 1;
  row.size[1] = row.size[0], row.stride[1] = row.stride[0];
  row.size[0] = 1, row.stride[0] = 0;  /* a size-1 dim's stride is free (ops_matrix_of) */
  return ops_product_new(ctx, op, out, &col, &row);
}

int qt_mv(qt_ctx *ctx, qt_tensor *out, const qt_tensor *a, const qt_tensor *v) {
  const char *op = "mv";
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  if (ops_product_check(ctx, op, a, v)) return -1;
  if (a->ndim != 2 || v->ndim != 1)
    return qt_errorf(&ctx->err, "%s: expected a 2-D matrix and a 1-D vector, got shapes %s and %s",
                     op, ops_shape(a, s1), ops_shape(v, s2));
  return ops_product_new(ctx, op, out, a, v);
}

int qt_bmm(qt_ctx *ctx, qt_tensor *out, const qt_tensor *a, const qt_tensor *b) {
  const char *op = "bmm";
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  if (ops_product_check(ctx, op, a, b)) return -1;
  if (a->ndim != 3 || b->ndim != 3)
    return qt_errorf(&ctx->err, "%s: expected two 3-D tensors, got shapes %s and %s", op,
                     ops_shape(a, s1), ops_shape(b, s2));
  if (a->size[0] != b->size[0])
    return qt_errorf(&ctx->err, "%s: batch sizes %lld and %lld differ (shapes %s and %s)", op,
                     (long long)a->size[0], (long long)b->size[0], ops_shape(a, s1),
                     ops_shape(b, s2));
  return ops_product_new(ctx, op, out, a, b);
}

/* ================================================================== addmm */

/* The checks addmm and addmm_ share: a and b 2-D, c on their device with their dtype. */
static int ops_addmm_check(qt_ctx *ctx, const char *op, const qt_tensor *c, const qt_tensor *a,
                           const qt_tensor *b, ops_product *p) {
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  if (ops_live(ctx, op, c) || ops_product_check(ctx, op, a, b) ||
      ops_same_device(ctx, op, c, a))
    return -1;
  if (a->ndim != 2 || b->ndim != 2)
    return qt_errorf(&ctx->err, "%s: expected two 2-D matrices, got shapes %s and %s", op,
                     ops_shape(a, s1), ops_shape(b, s2));
  if (c->dtype != a->dtype)
    return qt_errorf(&ctx->err, "%s: input dtype %s differs from the matrices' %s", op,
                     qt_dtypes[c->dtype].name, qt_dtypes[a->dtype].name);
  return ops_product_shape(ctx, op, a, b, p);
}

/* beta * c + alpha * a @ b: c broadcast into the new result first (not at all when beta is
** 0, so NaN there does not propagate, as in PyTorch), then one GEMM with beta and alpha. */
int qt_addmm(qt_ctx *ctx, qt_tensor *out, const qt_tensor *c, const qt_tensor *a,
             const qt_tensor *b, double beta, double alpha) {
  const char *op = "addmm";
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  ops_product p;
  if (ops_addmm_check(ctx, op, c, a, b, &p)) return -1;
  int64_t stride[QT_MAXDIM];
  if (!ops_expand_strides(c, p.ndim, p.size, stride))
    return qt_errorf(&ctx->err, "%s: input of shape %s does not broadcast to the product's %s",
                     op, ops_shape(c, s1), qt_shape_str(p.ndim, p.size, s2, sizeof s2));
  qt_device *dev = ops_device(a);
  qt_tensor res;
  qt_tensor_init(&res);
  if (ops_alloc(ctx, op, &res, dev, a->dtype, p.ndim, p.size)) return -1;
  if (beta != 0 && qt_numel(&res) > 0) {
    qt_view dv, sv;
    qt_view_of(&dv, &res);
    ops_view_expanded(&sv, c, p.ndim, p.size);
    if (ops_copy_views(ctx, op, dev, &dv, &sv)) goto fail;
  }
  if (ops_product_run(ctx, op, &p, &res, a, b, alpha, beta)) goto fail;
  *out = res;
  return 0;
fail:
  qt_tensor_release(&res);
  return -1;
}

/* c = beta * c + alpha * a @ b in place. The GEMM writes c itself when c is contiguous and
** shares no storage with a or b; otherwise it runs on a contiguous copy that is copied back. */
int qt_addmm_(qt_ctx *ctx, qt_tensor *c, const qt_tensor *a, const qt_tensor *b, double beta,
              double alpha) {
  const char *op = "addmm_";
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN];
  ops_product p;
  if (ops_addmm_check(ctx, op, c, a, b, &p)) return -1;
  if (c->ndim != 2 || c->size[0] != p.size[0] || c->size[1] != p.size[1])
    return qt_errorf(&ctx->err, "%s: input of shape %s is not the product's shape %s", op,
                     ops_shape(c, s1), qt_shape_str(p.ndim, p.size, s2, sizeof s2));
  if (ops_check_writable(ctx, op, c)) return -1;
  if (qt_numel(c) == 0) return 0;
  if (qt_is_contiguous(c) && c->storage != a->storage && c->storage != b->storage)
    return ops_product_run(ctx, op, &p, c, a, b, alpha, beta);
  qt_device *dev = ops_device(c);
  qt_tensor tmp;
  qt_tensor_init(&tmp);
  qt_view tv, cv;
  qt_view_of(&cv, c);
  int rc = -1;
  if (ops_alloc(ctx, op, &tmp, dev, c->dtype, 2, c->size)) return -1;
  qt_view_of(&tv, &tmp);
  if (beta != 0 && ops_copy_views(ctx, op, dev, &tv, &cv)) goto cleanup;
  if (ops_product_run(ctx, op, &p, &tmp, a, b, alpha, beta)) goto cleanup;
  if (ops_copy_views(ctx, op, dev, &cv, &tv)) goto cleanup;
  rc = 0;
cleanup:
  qt_tensor_release(&tmp);
  return rc;
}
