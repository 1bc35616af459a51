/*
** ops_attention.c — scaled dot-product attention, forward and backward, each one call of the
** device's attention slot (device.h says the formulas). The core checks the operands, views
** them as 4-D (b, heads, seq, dim) with their last stride 1 (copying only what cannot be
** viewed so), broadcasts the mask (a view, with stride 0 where it repeats), takes the dropout
** counters from the generator and allocates what the slot writes. An empty key sequence
** needs no device: every row is masked, so o is 0 and lse -inf. qlua.nn.functional's
** scaled_dot_product_attention calls these through qlua._attention, and autograd's
** derivative of _attention is _attention_backward.
*/
#include <math.h>
#include <string.h>

#include "core/ops_internal.h"
#include "device.h"
#include "ops.h"
#include "tensor.h"

/* The operands of a call as the slot takes them. */
typedef struct attn_call {
  qt_tensor q, k, v, mask;   /* 4-D views (mask: broadcast to (b, hq, sq, sk)); mask may be empty */
  bool has_mask;
  qt_attn_opts o;
  int lead;                  /* q's dims before (heads, seq, dim): ndim - 3, or 0 for 2-D */
} attn_call;

static void attn_release(attn_call *c) {
  qt_tensor_release(&c->q);
  qt_tensor_release(&c->k);
  qt_tensor_release(&c->v);
  qt_tensor_release(&c->mask);
}

/* t (..., heads, seq, dim) as a 4-D (b, heads, seq, dim) tensor whose last stride is 1. */
static int attn_view4(qt_ctx *ctx, const char *op, const qt_tensor *t, int64_t b,
                      qt_tensor *out) {
  int64_t size[4] = {b, t->ndim >= 3 ? t->size[t->ndim - 3] : 1, t->size[t->ndim - 2],
                     t->size[t->ndim - 1]};
  qt_tensor r;
  qt_tensor_init(&r);
  if (qt_reshape(ctx, &r, t, 4, size)) return ops_prefix_error(ctx, op);
  if (r.stride[3] != 1 && r.size[3] > 1) {
    int rc = qt_contiguous(ctx, out, &r);
    qt_tensor_release(&r);
    return rc ? ops_prefix_error(ctx, op) : 0;
  }
  *out = r;
  return 0;
}

/* A result shape: q's lead dims, then tail (ntail sizes); returns its rank. */
static int attn_shape(const attn_call *c, const qt_tensor *q, int ntail, const int64_t *tail,
                      int64_t *size) {
  int n = 0;
  for (int d = 0; d < c->lead; d++) size[n++] = q->size[d];
  for (int d = 0; d < ntail; d++) size[n++] = tail[d];
  return n;
}

/* The shapes of o (..., hq, sq, dv) and lse (..., hq, sq) for the call (2-D q: (sq, dv), (sq)). */
static void attn_out_shapes(const attn_call *c, const qt_tensor *q, int64_t *osize, int *on,
                            int64_t *lsize, int *ln) {
  int64_t otail[3] = {c->o.hq, c->o.sq, c->o.dv}, ltail[2] = {c->o.hq, c->o.sq};
  *on = attn_shape(c, q, 3, otail, osize);
  *ln = attn_shape(c, q, 2, ltail, lsize);
  if (q->ndim == 2) *on = 2, osize[0] = c->o.sq, osize[1] = c->o.dv, *ln = 1, lsize[0] = c->o.sq;
}

static int attn_prepare(qt_ctx *ctx, const char *op, const qt_attn_args *a, bool backward,
                        const qt_tensor *q, const qt_tensor *k, const qt_tensor *v,
                        const qt_tensor *mask, attn_call *c) {
  char s1[OPS_SHAPE_LEN], s2[OPS_SHAPE_LEN], s3[OPS_SHAPE_LEN];
  memset(c, 0, sizeof *c);
  qt_tensor_init(&c->q);
  qt_tensor_init(&c->k);
  qt_tensor_init(&c->v);
  qt_tensor_init(&c->mask);
  if (ops_live(ctx, op, q) || ops_live(ctx, op, k) || ops_live(ctx, op, v)) return -1;
  if (ops_same_device(ctx, op, q, k) || ops_same_device(ctx, op, q, v)) return -1;
  if (!qt_is_float(q->dtype))
    return qt_errorf(&ctx->err, "%s: a float query expected, got %s", op, qt_dtypes[q->dtype].name);
  if (k->dtype != q->dtype || v->dtype != q->dtype)
    return qt_errorf(&ctx->err, "%s: query, key and value must have one dtype, got %s, %s and %s",
                     op, qt_dtypes[q->dtype].name, qt_dtypes[k->dtype].name,
                     qt_dtypes[v->dtype].name);
  if (q->ndim < 2 || k->ndim != q->ndim || v->ndim != q->ndim)
    return qt_errorf(&ctx->err, "%s: query, key and value must be (..., seq, dim) of one rank >= 2, "
                     "got %s, %s and %s", op, ops_shape(q, s1), ops_shape(k, s2), ops_shape(v, s3));
  int nd = q->ndim;
  c->lead = nd >= 3 ? nd - 3 : 0;
  int64_t b = 1;
  for (int d = 0; d < c->lead; d++) {
    if (k->size[d] != q->size[d] || v->size[d] != q->size[d])
      return qt_errorf(&ctx->err, "%s: query, key and value must have the same batch dims, got "
                       "%s, %s and %s", op, ops_shape(q, s1), ops_shape(k, s2), ops_shape(v, s3));
    b *= q->size[d];
  }
  int64_t hq = nd >= 3 ? q->size[nd - 3] : 1, hk = nd >= 3 ? k->size[nd - 3] : 1;
  int64_t sq = q->size[nd - 2], sk = k->size[nd - 2], d = q->size[nd - 1], dv = v->size[nd - 1];
  if (k->size[nd - 1] != d || v->size[nd - 2] != sk || (nd >= 3 && v->size[nd - 3] != hk))
    return qt_errorf(&ctx->err, "%s: key %s and value %s do not fit a query of %s (key (..., heads, "
                     "seq, %lld), value (..., heads, seq, any))", op, ops_shape(k, s2),
                     ops_shape(v, s3), ops_shape(q, s1), (long long)d);
  if (hk != hq) {
    if (!a->enable_gqa)
      return qt_errorf(&ctx->err, "%s: %lld query heads and %lld key/value heads (pass enable_gqa "
                       "for grouped-query attention)", op, (long long)hq, (long long)hk);
    if (hk == 0 || hq % hk != 0)
      return qt_errorf(&ctx->err, "%s: %lld query heads are not a multiple of %lld key/value heads",
                       op, (long long)hq, (long long)hk);
  }
  if (d < 1) return qt_errorf(&ctx->err, "%s: the head dim must be at least 1, got %lld", op, (long long)d);
  if (!(a->dropout_p >= 0 && a->dropout_p <= 1))
    return qt_errorf(&ctx->err, "%s: dropout_p must be in [0, 1], got %g", op, a->dropout_p);
  double scale = isnan(a->scale) ? 1 / sqrt((double)d) : a->scale;
  if (!isfinite(scale))
    return qt_errorf(&ctx->err, "%s: scale must be a finite number, got %g", op, scale);
  qt_attn_opts *o = &c->o;
  o->backward = backward;
  o->causal = a->causal;
  o->use_cudnn = ctx->cudnn_enabled;
  o->b = b, o->hq = hq, o->hk = hk, o->sq = sq, o->sk = sk, o->d = d, o->dv = dv;
  o->scale = scale;
  o->dropout_p = a->dropout_p;
  o->seed = a->seed;
  o->offset = a->offset;
  if (attn_view4(ctx, op, q, b, &c->q) || attn_view4(ctx, op, k, b, &c->k) ||
      attn_view4(ctx, op, v, b, &c->v))
    return -1;
  if (mask != NULL) {
    if (ops_live(ctx, op, mask) || ops_same_device(ctx, op, q, mask)) return -1;
    if (mask->dtype != QT_BOOL && !qt_is_float(mask->dtype))
      return qt_errorf(&ctx->err, "%s: attn_mask must be bool or float, got %s", op,
                       qt_dtypes[mask->dtype].name);
    int64_t full[QT_MAXDIM], tail[3] = {hq, sq, sk};
    int n = attn_shape(c, q, 3, tail, full);
    if (nd == 2) n = 2, full[0] = sq, full[1] = sk;
    bool fits = mask->ndim <= n;
    for (int i = 0; fits && i < mask->ndim; i++) {
      int64_t m = mask->size[mask->ndim - 1 - i];
      fits = m == 1 || m == full[n - 1 - i];
    }
    if (!fits) {
      qt_tensor scores = {.ndim = n};
      memcpy(scores.size, full, sizeof(int64_t) * (size_t)n);
      return qt_errorf(&ctx->err, "%s: attn_mask of %s does not broadcast to the scores' %s", op,
                       ops_shape(mask, s1), ops_shape(&scores, s2));
    }
    /* a float mask of another dtype is converted; bool and q's dtype are read as they are */
    qt_tensor typed, wide;
    qt_tensor_init(&typed);
    qt_tensor_init(&wide);
    qt_dtype mt = mask->dtype == QT_BOOL ? QT_BOOL : q->dtype;
    if (ops_cast(ctx, op, &typed, mask, mt)) return -1;
    int rc = qt_expand(ctx, &wide, &typed, n, full) ? ops_prefix_error(ctx, op) : 0;
    qt_tensor_release(&typed);
    if (rc) return -1;
    int64_t size4[4] = {b, hq, sq, sk};
    rc = qt_reshape(ctx, &c->mask, &wide, 4, size4);
    qt_tensor_release(&wide);
    if (rc) return ops_prefix_error(ctx, op);
    c->has_mask = true;
  }
  return 0;
}

/* The slot call: c's operands (q, k, v, the mask when there is one), and the views t[k]
** (NULL: absent) of the QT_ATTN_ enum's results and gradients. */
static int attn_call_slot(qt_ctx *ctx, const char *op, attn_call *c, const qt_tensor **t,
                          char *path) {
  t[QT_ATTN_Q] = &c->q, t[QT_ATTN_K] = &c->k, t[QT_ATTN_V] = &c->v;
  t[QT_ATTN_MASK] = c->has_mask ? &c->mask : NULL;
  qt_device *dev = ops_device(&c->q);
  if (dev->iface->attention == NULL) return ops_unsupported(ctx, op, dev);
  qt_view views[QT_ATTN_NVIEWS];
  memset(views, 0, sizeof views);
  c->o.has = 0;
  for (int k = 0; k < QT_ATTN_NVIEWS; k++)
    if (t[k] != NULL) {
      qt_view_of(&views[k], t[k]);
      c->o.has |= 1u << k;
    }
  if (dev->iface->attention(dev, &c->o, views, path, &ctx->err)) return ops_prefix_error(ctx, op);
  return 0;
}

static qt_dtype attn_lse_dtype(qt_dtype q) { return q == QT_F64 ? QT_F64 : QT_F32; }

int qt_attention(qt_ctx *ctx, qt_attn_args *a, const qt_tensor *q, const qt_tensor *k,
                 const qt_tensor *v, const qt_tensor *mask, qt_tensor *o, qt_tensor *lse) {
  const char *op = "scaled_dot_product_attention";
  attn_call c;
  if (attn_prepare(ctx, op, a, false, q, k, v, mask, &c)) {
    attn_release(&c);
    return -1;
  }
  qt_device *dev = ops_device(q);
  int64_t osize[QT_MAXDIM], lsize[QT_MAXDIM];
  int on, ln;
  attn_out_shapes(&c, q, osize, &on, lsize, &ln);
  qt_tensor ot, lt;
  qt_tensor_init(&ot);
  qt_tensor_init(&lt);
  int rc = ops_alloc(ctx, op, &ot, dev, q->dtype, on, osize) ||
           ops_alloc(ctx, op, &lt, dev, attn_lse_dtype(q->dtype), ln, lsize);
  int64_t rows = c.o.b * c.o.hq * c.o.sq;
  if (rc == 0 && c.o.dropout_p > 0) {
    c.o.seed = a->seed = ctx->seed;
    c.o.offset = a->offset = ctx->rng_offset;
    ctx->rng_offset += (uint64_t)(rows * c.o.sk);
  }
  if (rc == 0 && rows > 0 && c.o.sk == 0) {
    rc = qt_fill_(ctx, &ot, qt_scalar_from_double(0)) ||
         qt_fill_(ctx, &lt, qt_scalar_from_double(-INFINITY));
  } else if (rc == 0 && rows > 0) {
    const qt_tensor *t[QT_ATTN_NVIEWS] = {0};
    t[QT_ATTN_O] = &ot, t[QT_ATTN_LSE] = &lt;
    rc = attn_call_slot(ctx, op, &c, t, NULL);
  }
  attn_release(&c);
  if (rc) {
    qt_tensor_release(&ot);
    qt_tensor_release(&lt);
    return -1;
  }
  *o = ot;
  *lse = lt;
  return 0;
}

/* t (given back from forward) as a contiguous tensor of want's shape, or an error naming what. */
static int attn_take(qt_ctx *ctx, const char *op, const char *what, const qt_tensor *t,
                     const qt_tensor *q, qt_dtype dtype, int ndim, const int64_t *size,
                     qt_tensor *out) {
  char s1[OPS_SHAPE_LEN];
  if (t == NULL) return qt_errorf(&ctx->err, "%s: the %s is missing", op, what);
  if (ops_live(ctx, op, t) || ops_same_device(ctx, op, q, t)) return -1;
  bool ok = t->ndim == ndim && t->dtype == dtype;
  for (int d = 0; ok && d < ndim; d++) ok = t->size[d] == size[d];
  if (!ok) {
    qt_tensor want = {.ndim = ndim};
    memcpy(want.size, size, sizeof(int64_t) * (size_t)ndim);
    char s2[OPS_SHAPE_LEN];
    return qt_errorf(&ctx->err, "%s: the %s must be %s of %s, got %s of %s", op, what,
                     qt_dtypes[dtype].name, ops_shape(&want, s2), qt_dtypes[t->dtype].name,
                     ops_shape(t, s1));
  }
  return qt_contiguous(ctx, out, t) ? ops_prefix_error(ctx, op) : 0;
}

int qt_attention_backward(qt_ctx *ctx, const qt_attn_args *a, const qt_tensor *dout,
                          const qt_tensor *q, const qt_tensor *k, const qt_tensor *v,
                          const qt_tensor *mask, const qt_tensor *o, const qt_tensor *lse,
                          qt_tensor *dq, qt_tensor *dk, qt_tensor *dv) {
  const char *op = "scaled_dot_product_attention_backward";
  attn_call c;
  qt_tensor dt, ot, lt, g[3];
  qt_tensor_init(&dt);
  qt_tensor_init(&ot);
  qt_tensor_init(&lt);
  for (int i = 0; i < 3; i++) qt_tensor_init(&g[i]);
  int rc = attn_prepare(ctx, op, a, true, q, k, v, mask, &c);
  int64_t osize[QT_MAXDIM], lsize[QT_MAXDIM];
  int on = 0, ln = 0;
  if (rc == 0) {
    attn_out_shapes(&c, q, osize, &on, lsize, &ln);
    rc = attn_take(ctx, op, "output gradient", dout, q, q->dtype, on, osize, &dt) ||
         attn_take(ctx, op, "output", o, q, q->dtype, on, osize, &ot) ||
         attn_take(ctx, op, "logsumexp", lse, q, attn_lse_dtype(q->dtype), ln, lsize, &lt);
  }
  /* dk and dv come together from the devices: both are made when either is wanted */
  bool want_q = dq != NULL, want_kv = dk != NULL || dv != NULL;
  const qt_tensor *src[3] = {q, k, v};
  for (int i = 0; rc == 0 && i < 3; i++)
    if (i == 0 ? want_q : want_kv) rc = ops_alloc_like(ctx, op, &g[i], src[i], q->dtype);
  int64_t rows = c.o.b * c.o.hq * c.o.sq;
  if (rc == 0 && (want_q || want_kv)) {
    if (rows > 0 && c.o.sk > 0) {
      qt_tensor g4[3];
      for (int i = 0; i < 3; i++) qt_tensor_init(&g4[i]);
      for (int i = 0; rc == 0 && i < 3; i++)
        if (g[i].storage != NULL) {
          const qt_tensor *shape = i == 0 ? &c.q : i == 1 ? &c.k : &c.v;
          rc = qt_view_as(ctx, &g4[i], &g[i], 4, shape->size) ? ops_prefix_error(ctx, op) : 0;
        }
      qt_tensor dt4, ot4;
      qt_tensor_init(&dt4);
      qt_tensor_init(&ot4);
      int64_t o4[4] = {c.o.b, c.o.hq, c.o.sq, c.o.dv};
      if (rc == 0 && (qt_view_as(ctx, &dt4, &dt, 4, o4) || qt_view_as(ctx, &ot4, &ot, 4, o4)))
        rc = ops_prefix_error(ctx, op);
      if (rc == 0) {
        const qt_tensor *t[QT_ATTN_NVIEWS] = {0};
        t[QT_ATTN_O] = &ot4, t[QT_ATTN_LSE] = &lt, t[QT_ATTN_DO] = &dt4;
        t[QT_ATTN_DQ] = want_q ? &g4[0] : NULL;
        t[QT_ATTN_DK] = want_kv ? &g4[1] : NULL;
        t[QT_ATTN_DV] = want_kv ? &g4[2] : NULL;
        rc = attn_call_slot(ctx, op, &c, t, NULL);
      }
      qt_tensor_release(&dt4);
      qt_tensor_release(&ot4);
      for (int i = 0; i < 3; i++) qt_tensor_release(&g4[i]);
    } else {
      /* no keys (or no rows): nothing reaches any input */
      for (int i = 0; rc == 0 && i < 3; i++)
        if (g[i].storage != NULL) rc = qt_fill_(ctx, &g[i], qt_scalar_from_double(0));
    }
  }
  attn_release(&c);
  qt_tensor_release(&dt);
  qt_tensor_release(&ot);
  qt_tensor_release(&lt);
  qt_tensor *outs[3] = {dq, dk, dv};
  for (int i = 0; i < 3; i++) {
    if (rc == 0 && outs[i] != NULL) *outs[i] = g[i];
    else qt_tensor_release(&g[i]);
  }
  return rc ? -1 : 0;
}

int qt_attention_path(qt_ctx *ctx, const qt_attn_args *a, bool backward, const qt_tensor *q,
                      const qt_tensor *k, const qt_tensor *v, const qt_tensor *mask,
                      char *buf) {
  const char *op = "attention_path";
  attn_call c;
  int rc = attn_prepare(ctx, op, a, backward, q, k, v, mask, &c);
  if (rc == 0) {
    c.o.plan_only = true;
    const qt_tensor *t[QT_ATTN_NVIEWS] = {0};
    buf[0] = '\0';
    rc = attn_call_slot(ctx, op, &c, t, buf);
  }
  attn_release(&c);
  return rc;
}
