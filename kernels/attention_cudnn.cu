/*
** attention_cudnn.cu — the attention slot's fused path: cuDNN's flash attention for float16
** and bfloat16 on the GPU, through the backend graph API (cudnn_graph.h) of cudnn.cuh.
**
** cuDNN 9.14 has no single attention operation with a causal mask: an attention is a graph
** of plain operations (matmul, pointwise, reduction, reshape) whose whole pattern cuDNN
** recognises and compiles into one fused kernel (NVRTC, at plan time). The graphs here are
** the ones cudnn-frontend's SDPA nodes emit for these options (read, not copied):
**   forward  S = Q K^T (K as a transposed view), S * scale, the causal select (row >= col,
**            else -inf), M = max, E = exp(S - M), Z = sum E, Stats = M + log Z (the
**            natural-log logsumexp qlua's lse is), P = E / Z in the data type, O = P V.
**   backward D = sum(dO * O), P = exp(S * scale - Stats) (causal select after the
**            subtraction), dV = P^T dO, dP = dO V^T, dS = (dP - D) * P * scale, dK = dS^T Q,
**            dQ = dS K into a float32 accumulator, then into dQ. Grouped heads: dK and dV per
**            query head, summed over the group by a reduction.
** The plans are cached per GPU by shape, strides, dtype and causality (a miss costs the NVRTC
** compilation once); a shape cuDNN refuses is remembered with its reason, and the slot runs
** its own kernels (attention.cu) for it, as for what this path does not take: fewer than 64
** query rows (a generation's steps: each new key length would compile a plan), masks,
** dropout (cuDNN's generator is not qlua's, whose draws every device shares), float32 and float64,
** head dims that are not multiples of 8 or past 256, and a backward whose key length is not
** a multiple of 128 (cuDNN 9.14's backward reads out of bounds there, fixed in 9.15.1).
** The backward accumulates dQ with atomics, so it is not bitwise repeatable.
*/
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cudnn.cuh"

#define SD_PLANS 32
#define SD_MAX_DESCS 96
#define SD_MAX_OPS 40

enum {   /* the tensors the caller's memory backs (the variant pack's unique ids) */
  SD_Q = 1, SD_K, SD_V, SD_O, SD_STATS,
  SD_DO = 20, SD_DQ, SD_DK, SD_DV,
  SD_SUM = 30, SD_DQ_ACC,
  SD_SCALE = 40, SD_NEG_INF, SD_ONE,
  SD_VIRTUAL = 100
};

/* The key: everything the graph's shape depends on (the scale is a by-value input). */
typedef struct sd_key {
  bool backward, causal;
  qt_dtype dtype;
  int64_t b, hq, hk, sq, sk, d, dv;
  int64_t qs[3], ks[3], vs[3];
} sd_key;

/* A graph: its descriptors (destroyed together), its plan, and the workspace it needs. */
typedef struct sd_graph {
  bool used, ok;
  sd_key key;
  char why[160];                      /* !ok: what cuDNN said */
  cudnnBackendDescriptor_t descs[SD_MAX_DESCS];
  int ndescs;
  cudnnBackendDescriptor_t plan;
  int64_t workspace, own;             /* cuDNN's bytes; ours in front (backward's scratch) */
} sd_graph;

typedef struct sd_device {
  sd_graph graphs[SD_PLANS];
  int next;
} sd_device;

static sd_device *sd_devices[64];

static void sd_drop(sd_graph *g) {
  for (int i = g->ndescs - 1; i >= 0; i--) qt_cudnn.be_destroy(g->descs[i]);
  memset(g, 0, sizeof *g);
}

/* ------------------------------------------------------------------ building a graph */

/* The builder: the first failure is kept (what and cuDNN's status), the rest are skipped. */
typedef struct sd_b {
  sd_graph *g;
  cudnnStatus_t status;
  const char *what;
  cudnnBackendDescriptor_t ops[SD_MAX_OPS];
  int nops;
  int64_t next_uid;
} sd_b;

static bool sd_failed(const sd_b *b) { return b->status != CUDNN_STATUS_SUCCESS; }
static void sd_fail(sd_b *b, cudnnStatus_t s, const char *what) {
  if (!sd_failed(b) && s != CUDNN_STATUS_SUCCESS) {
    b->status = s;
    b->what = what;
  }
}

static cudnnBackendDescriptor_t sd_new(sd_b *b, cudnnBackendDescriptorType_t t, const char *what) {
  if (sd_failed(b)) return NULL;
  if (b->g->ndescs == SD_MAX_DESCS) {
    sd_fail(b, CUDNN_STATUS_NOT_SUPPORTED, "too many descriptors");
    return NULL;
  }
  cudnnBackendDescriptor_t d = NULL;
  sd_fail(b, qt_cudnn.be_create(t, &d), what);
  if (sd_failed(b)) return NULL;
  b->g->descs[b->g->ndescs++] = d;
  return d;
}
static void sd_set(sd_b *b, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a,
                   cudnnBackendAttributeType_t t, int64_t n, const void *v, const char *what) {
  if (!sd_failed(b)) sd_fail(b, qt_cudnn.be_set(d, a, t, n, v), what);
}
static void sd_fin(sd_b *b, cudnnBackendDescriptor_t d, const char *what) {
  if (!sd_failed(b)) sd_fail(b, qt_cudnn.be_finalize(d), what);
}
static void sd_op(sd_b *b, cudnnBackendDescriptor_t op) {
  if (sd_failed(b)) return;
  if (b->nops == SD_MAX_OPS) sd_fail(b, CUDNN_STATUS_NOT_SUPPORTED, "too many operations");
  else b->ops[b->nops++] = op;
}

/* A 4-D tensor: uid (0: the next virtual one), data type, dims and strides. */
static cudnnBackendDescriptor_t sd_tensor(sd_b *b, int64_t uid, cudnnDataType_t dt, const int64_t *dims,
                                          const int64_t *strides, bool by_value) {
  bool virt = uid == 0;
  if (virt) uid = b->next_uid++;
  int64_t cont[4];
  if (strides == NULL) {   /* row-major */
    cont[3] = 1;
    for (int i = 2; i >= 0; i--) cont[i] = cont[i + 1] * dims[i + 1];
    strides = cont;
  }
  int64_t align = 16;
  cudnnBackendDescriptor_t t = sd_new(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
  sd_set(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor type");
  sd_set(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims");
  sd_set(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
  sd_set(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
  sd_set(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
  bool yes = true;
  if (virt) sd_set(b, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes, "tensor virtual");
  if (by_value) sd_set(b, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes, "tensor by value");
  sd_fin(b, t, "tensor");
  return t;
}
static cudnnBackendDescriptor_t sd_scalar(sd_b *b, int64_t uid, cudnnDataType_t dt) {
  const int64_t one[4] = {1, 1, 1, 1};
  return sd_tensor(b, uid, dt, one, one, true);
}

/* y = mode(x [, x2 [, t]]) in precision prec; axis >= 0 for GEN_INDEX. */
static void sd_pw(sd_b *b, cudnnPointwiseMode_t mode, cudnnDataType_t prec, cudnnBackendDescriptor_t x,
                  cudnnBackendDescriptor_t x2, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                  int64_t axis = -1) {
  cudnnBackendDescriptor_t pw = sd_new(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
  sd_set(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
  sd_set(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
  if (axis >= 0) sd_set(b, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "pointwise axis");
  sd_fin(b, pw, "pointwise");
  cudnnBackendDescriptor_t op = sd_new(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op");
  sd_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, "pointwise op");
  sd_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pointwise x");
  if (x2 != NULL) sd_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x2, "pointwise b");
  if (t != NULL) sd_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, "pointwise t");
  sd_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pointwise y");
  float one = 1.0f;
  sd_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one, "pointwise alpha1");
  if (x2 != NULL) sd_set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one, "pointwise alpha2");
  sd_fin(b, op, "pointwise op");
  sd_op(b, op);
}

static void sd_matmul(sd_b *b, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t bb, cudnnBackendDescriptor_t c) {
  cudnnDataType_t f = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t mm = sd_new(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
  sd_set(b, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, "matmul type");
  sd_fin(b, mm, "matmul");
  cudnnBackendDescriptor_t op = sd_new(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul op");
  sd_set(b, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a, "matmul a");
  sd_set(b, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bb, "matmul b");
  sd_set(b, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c, "matmul c");
  sd_set(b, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, "matmul op");
  sd_fin(b, op, "matmul op");
  sd_op(b, op);
}

static void sd_reduce(sd_b *b, cudnnReduceTensorOp_t how, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
  cudnnDataType_t f = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t r = sd_new(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
  sd_set(b, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how, "reduction op");
  sd_set(b, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, "reduction type");
  sd_fin(b, r, "reduction");
  cudnnBackendDescriptor_t op = sd_new(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction op");
  sd_set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reduction x");
  sd_set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reduction y");
  sd_set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r, "reduction op");
  sd_fin(b, op, "reduction op");
  sd_op(b, op);
}

static void sd_reshape(sd_b *b, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
  cudnnBackendDescriptor_t op = sd_new(b, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape op");
  sd_set(b, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reshape x");
  sd_set(b, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reshape y");
  sd_fin(b, op, "reshape op");
  sd_op(b, op);
}

/* The causal select of score s (row >= col kept, else -inf): the masked score, float32. */
static cudnnBackendDescriptor_t sd_causal(sd_b *b, cudnnBackendDescriptor_t s, const int64_t *sdims,
                                          cudnnBackendDescriptor_t neg_inf) {
  cudnnBackendDescriptor_t row = sd_tensor(b, 0, CUDNN_DATA_INT32, sdims, NULL, false);
  cudnnBackendDescriptor_t col = sd_tensor(b, 0, CUDNN_DATA_INT32, sdims, NULL, false);
  cudnnBackendDescriptor_t keep = sd_tensor(b, 0, CUDNN_DATA_BOOLEAN, sdims, NULL, false);
  cudnnBackendDescriptor_t out = sd_tensor(b, 0, CUDNN_DATA_FLOAT, sdims, NULL, false);
  sd_pw(b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, s, NULL, NULL, row, 2);
  sd_pw(b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, s, NULL, NULL, col, 3);
  sd_pw(b, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep);
  sd_pw(b, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s, neg_inf, keep, out);
  return out;
}

static cudnnDataType_t sd_dtype(qt_dtype d) { return d == QT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF; }

static void sd_forward(sd_b *b, const sd_key *k) {
  cudnnDataType_t io = sd_dtype(k->dtype), f = CUDNN_DATA_FLOAT;
  const int64_t qd[4] = {k->b, k->hq, k->sq, k->d}, qs[4] = {k->qs[0], k->qs[1], k->qs[2], 1};
  const int64_t ktd[4] = {k->b, k->hk, k->d, k->sk}, kts[4] = {k->ks[0], k->ks[1], 1, k->ks[2]};
  const int64_t vd[4] = {k->b, k->hk, k->sk, k->dv}, vs[4] = {k->vs[0], k->vs[1], k->vs[2], 1};
  const int64_t od[4] = {k->b, k->hq, k->sq, k->dv};
  const int64_t sdims[4] = {k->b, k->hq, k->sq, k->sk}, rdims[4] = {k->b, k->hq, k->sq, 1};
  cudnnBackendDescriptor_t Q = sd_tensor(b, SD_Q, io, qd, qs, false);
  cudnnBackendDescriptor_t Kt = sd_tensor(b, SD_K, io, ktd, kts, false);
  cudnnBackendDescriptor_t V = sd_tensor(b, SD_V, io, vd, vs, false);
  cudnnBackendDescriptor_t O = sd_tensor(b, SD_O, io, od, NULL, false);
  cudnnBackendDescriptor_t stats = sd_tensor(b, SD_STATS, f, rdims, NULL, false);
  cudnnBackendDescriptor_t scale = sd_scalar(b, SD_SCALE, f);
  cudnnBackendDescriptor_t s = sd_tensor(b, 0, f, sdims, NULL, false);
  sd_matmul(b, Q, Kt, s);
  cudnnBackendDescriptor_t ss = sd_tensor(b, 0, f, sdims, NULL, false);
  sd_pw(b, CUDNN_POINTWISE_MUL, f, s, scale, NULL, ss);
  if (k->causal) ss = sd_causal(b, ss, sdims, sd_scalar(b, SD_NEG_INF, f));
  cudnnBackendDescriptor_t m = sd_tensor(b, 0, f, rdims, NULL, false);
  sd_reduce(b, CUDNN_REDUCE_TENSOR_MAX, ss, m);
  cudnnBackendDescriptor_t sub = sd_tensor(b, 0, f, sdims, NULL, false);
  sd_pw(b, CUDNN_POINTWISE_SUB, f, ss, m, NULL, sub);
  cudnnBackendDescriptor_t e = sd_tensor(b, 0, f, sdims, NULL, false);
  sd_pw(b, CUDNN_POINTWISE_EXP, f, sub, NULL, NULL, e);
  cudnnBackendDescriptor_t z = sd_tensor(b, 0, f, rdims, NULL, false);
  sd_reduce(b, CUDNN_REDUCE_TENSOR_ADD, e, z);
  cudnnBackendDescriptor_t lz = sd_tensor(b, 0, f, rdims, NULL, false);
  sd_pw(b, CUDNN_POINTWISE_LOG, f, z, NULL, NULL, lz);
  sd_pw(b, CUDNN_POINTWISE_ADD, f, m, lz, NULL, stats);
  cudnnBackendDescriptor_t p = sd_tensor(b, 0, io, sdims, NULL, false);
  sd_pw(b, CUDNN_POINTWISE_DIV, f, e, z, NULL, p);
  sd_matmul(b, p, V, O);
}

/* dX (b, h, s, e) from the per-query-head x_full: x itself when there are no groups. */
static cudnnBackendDescriptor_t sd_per_head(sd_b *b, const sd_key *k, cudnnBackendDescriptor_t dst,
                                            int64_t e, cudnnDataType_t io) {
  if (k->hq == k->hk) return dst;
  const int64_t full[4] = {k->b, k->hq, k->sk, e};
  return sd_tensor(b, 0, io, full, NULL, false);
}

static void sd_backward(sd_b *b, const sd_key *k) {
  cudnnDataType_t io = sd_dtype(k->dtype), f = CUDNN_DATA_FLOAT;
  const int64_t qd[4] = {k->b, k->hq, k->sq, k->d}, qs[4] = {k->qs[0], k->qs[1], k->qs[2], 1};
  const int64_t ktd[4] = {k->b, k->hk, k->d, k->sk}, kts[4] = {k->ks[0], k->ks[1], 1, k->ks[2]};
  const int64_t kd[4] = {k->b, k->hk, k->sk, k->d}, ks[4] = {k->ks[0], k->ks[1], k->ks[2], 1};
  const int64_t vtd[4] = {k->b, k->hk, k->dv, k->sk}, vts[4] = {k->vs[0], k->vs[1], 1, k->vs[2]};
  const int64_t od[4] = {k->b, k->hq, k->sq, k->dv}, dkd[4] = {k->b, k->hk, k->sk, k->d};
  const int64_t dvd[4] = {k->b, k->hk, k->sk, k->dv};
  const int64_t sdims[4] = {k->b, k->hq, k->sq, k->sk}, rdims[4] = {k->b, k->hq, k->sq, 1};
  const int64_t tdims[4] = {k->b, k->hq, k->sk, k->sq};
  const int64_t tstr[4] = {k->hq * k->sq * k->sk, k->sq * k->sk, 1, k->sk};
  cudnnBackendDescriptor_t Q = sd_tensor(b, SD_Q, io, qd, qs, false);
  cudnnBackendDescriptor_t Kt = sd_tensor(b, SD_K, io, ktd, kts, false);
  cudnnBackendDescriptor_t Vt = sd_tensor(b, SD_V, io, vtd, vts, false);
  cudnnBackendDescriptor_t O = sd_tensor(b, SD_O, io, od, NULL, false);
  cudnnBackendDescriptor_t stats = sd_tensor(b, SD_STATS, f, rdims, NULL, false);
  cudnnBackendDescriptor_t dO = sd_tensor(b, SD_DO, io, od, NULL, false);
  cudnnBackendDescriptor_t dQ = sd_tensor(b, SD_DQ, io, qd, NULL, false);
  cudnnBackendDescriptor_t dK = sd_tensor(b, SD_DK, io, dkd, NULL, false);
  cudnnBackendDescriptor_t dV = sd_tensor(b, SD_DV, io, dvd, NULL, false);
  cudnnBackendDescriptor_t sum = sd_tensor(b, SD_SUM, f, rdims, NULL, false);
  cudnnBackendDescriptor_t dq_acc = sd_tensor(b, SD_DQ_ACC, f, qd, NULL, false);
  cudnnBackendDescriptor_t scale = sd_scalar(b, SD_SCALE, f), one = sd_scalar(b, SD_ONE, f);
  /* D = sum(dO * O) over the row */
  cudnnBackendDescriptor_t doo = sd_tensor(b, 0, f, od, NULL, false);
  sd_pw(b, CUDNN_POINTWISE_MUL, f, dO, O, NULL, doo);
  cudnnBackendDescriptor_t drow = sd_tensor(b, 0, f, rdims, NULL, false);
  sd_reduce(b, CUDNN_REDUCE_TENSOR_ADD, doo, drow);
  sd_pw(b, CUDNN_POINTWISE_MUL, f, drow, one, NULL, sum);
  /* P = exp(S scale - Stats), causal after the subtraction */
  cudnnBackendDescriptor_t s = sd_tensor(b, 0, f, sdims, NULL, false);
  sd_matmul(b, Q, Kt, s);
  cudnnBackendDescriptor_t ss = sd_tensor(b, 0, f, sdims, NULL, false);
  sd_pw(b, CUDNN_POINTWISE_MUL, f, s, scale, NULL, ss);
  cudnnBackendDescriptor_t sub = sd_tensor(b, 0, f, sdims, NULL, false);
  sd_pw(b, CUDNN_POINTWISE_SUB, f, ss, stats, NULL, sub);
  if (k->causal) sub = sd_causal(b, sub, sdims, sd_scalar(b, SD_NEG_INF, f));
  cudnnBackendDescriptor_t p = sd_tensor(b, 0, f, sdims, NULL, false);
  sd_pw(b, CUDNN_POINTWISE_EXP, f, sub, NULL, NULL, p);
  /* dV = P^T dO */
  cudnnBackendDescriptor_t pt = sd_tensor(b, 0, io, tdims, tstr, false);
  sd_reshape(b, p, pt);
  cudnnBackendDescriptor_t dv_full = sd_per_head(b, k, dV, k->dv, io);
  sd_matmul(b, pt, dO, dv_full);
  if (dv_full != dV) sd_reduce(b, CUDNN_REDUCE_TENSOR_ADD, dv_full, dV);
  /* dS = (dO V^T - D) * P * scale */
  cudnnBackendDescriptor_t dp = sd_tensor(b, 0, f, sdims, NULL, false);
  sd_matmul(b, dO, Vt, dp);
  cudnnBackendDescriptor_t dpd = sd_tensor(b, 0, f, sdims, NULL, false);
  sd_pw(b, CUDNN_POINTWISE_SUB, f, dp, sum, NULL, dpd);
  cudnnBackendDescriptor_t dsp = sd_tensor(b, 0, f, sdims, NULL, false);
  sd_pw(b, CUDNN_POINTWISE_MUL, f, dpd, p, NULL, dsp);
  cudnnBackendDescriptor_t ds = sd_tensor(b, 0, f, sdims, NULL, false);
  sd_pw(b, CUDNN_POINTWISE_MUL, f, dsp, scale, NULL, ds);
  /* dK = dS^T Q */
  cudnnBackendDescriptor_t dst = sd_tensor(b, 0, io, tdims, tstr, false);
  sd_reshape(b, ds, dst);
  cudnnBackendDescriptor_t dk_full = sd_per_head(b, k, dK, k->d, io);
  sd_matmul(b, dst, Q, dk_full);
  if (dk_full != dK) sd_reduce(b, CUDNN_REDUCE_TENSOR_ADD, dk_full, dK);
  /* dQ = dS K, K back from its transposed view */
  cudnnBackendDescriptor_t kk = sd_tensor(b, 0, f, kd, ks, false);
  sd_reshape(b, Kt, kk);
  sd_matmul(b, ds, kk, dq_acc);
  sd_pw(b, CUDNN_POINTWISE_IDENTITY, f, dq_acc, NULL, NULL, dQ);
}

/* The graph for key k into g: the op graph, heuristics (mode A), the first engine
** configuration whose plan finalizes, and its workspace. */
static void sd_build(cudnnHandle_t handle, const sd_key *k, sd_graph *g) {
  memset(g, 0, sizeof *g);
  g->used = true;
  g->key = *k;
  sd_b b;
  memset(&b, 0, sizeof b);
  b.g = g;
  b.next_uid = SD_VIRTUAL;
  if (k->backward) sd_backward(&b, k);
  else sd_forward(&b, k);
  cudnnBackendDescriptor_t graph = sd_new(&b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
  sd_set(&b, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "graph handle");
  sd_set(&b, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, b.nops, b.ops, "graph ops");
  sd_fin(&b, graph, "operation graph");
  cudnnBackendDescriptor_t heur = sd_new(&b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
  cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  sd_set(&b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, "heuristics graph");
  sd_set(&b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
  sd_fin(&b, heur, "heuristics");
  int64_t n = 0;
  if (!sd_failed(&b)) sd_fail(&b, qt_cudnn.be_get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL), "heuristics results");
  if (!sd_failed(&b) && n == 0) sd_fail(&b, CUDNN_STATUS_NOT_SUPPORTED, "heuristics (no engine)");
  if (n > 8) n = 8;
  cudnnBackendDescriptor_t cfgs[8];
  for (int64_t i = 0; i < n; i++) cfgs[i] = sd_new(&b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
  int64_t got = 0;
  if (!sd_failed(&b)) sd_fail(&b, qt_cudnn.be_get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got, cfgs), "heuristics results");
  cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
  char last_msg[160] = "";
  for (int64_t i = 0; !sd_failed(&b) && i < got && g->plan == NULL; i++) {
    cudnnBackendDescriptor_t plan = NULL;
    if (qt_cudnn.be_create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS) break;
    cudnnStatus_t s = qt_cudnn.be_set(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    if (s == CUDNN_STATUS_SUCCESS)
      s = qt_cudnn.be_set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
    if (s == CUDNN_STATUS_SUCCESS) s = qt_cudnn.be_finalize(plan);
    if (s == CUDNN_STATUS_SUCCESS && g->ndescs < SD_MAX_DESCS) {
      g->descs[g->ndescs++] = plan;
      g->plan = plan;
    } else {
      last = s;
      qt_cudnn.last_error(last_msg, sizeof last_msg);
      qt_cudnn.be_destroy(plan);
    }
  }
  if (!sd_failed(&b) && g->plan == NULL) {
    snprintf(g->why, sizeof g->why, "cuDNN: no engine plan finalizes (%s%s%s)", qt_cudnn.error_string(last),
             last_msg[0] ? ": " : "", last_msg);
    return;
  }
  if (!sd_failed(&b))
    sd_fail(&b, qt_cudnn.be_get(g->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &g->workspace), "workspace size");
  if (sd_failed(&b)) {
    char msg[160] = "";
    qt_cudnn.last_error(msg, sizeof msg);
    snprintf(g->why, sizeof g->why, "cuDNN %s: %s%s%s", b.what, qt_cudnn.error_string(b.status),
             msg[0] ? ": " : "", msg);
    return;
  }
  if (k->backward) {   /* ours, in front: dQ's float32 accumulator and the rows' sums */
    int64_t acc = (k->b * k->hq * k->sq * k->d * 4 + 255) / 256 * 256;
    g->own = acc + (k->b * k->hq * k->sq * 4 + 255) / 256 * 256;
  }
  g->ok = true;
}

/* Why cuDNN's fused attention does not take this call (NULL: it does). */
static const char *sd_refuses(const qt_attn_opts *o, const qt_view *v) {
  qt_dtype dt = v[QT_ATTN_Q].dtype;
  if (!o->use_cudnn) return "cuDNN disabled by qlua.set_cudnn_enabled";
  if (dt != QT_F16 && dt != QT_BF16) return "cuDNN's fused attention takes float16 and bfloat16";
  if (o->has >> QT_ATTN_MASK & 1u) return "cuDNN path: no attn_mask";
  if (o->dropout_p > 0) return "cuDNN path: no dropout (qlua's draws are its own)";
  if (o->d % 8 != 0 || o->dv % 8 != 0 || o->d > 256 || o->dv > 256)
    return "cuDNN path: head dims multiples of 8 up to 256";
  /* a new shape compiles a plan (tens of ms): not for a generation's one-row steps, whose key
  ** length grows by one each time */
  if (o->sq < 64) return "cuDNN path: 64 query rows or more (each new shape compiles a plan)";
  if (o->backward && (o->sk % 128 != 0 || (o->sq == 1 && o->sk == 1)))
    return "cuDNN 9.14 backward: key length a multiple of 128";
  for (int t = QT_ATTN_Q; t <= QT_ATTN_V; t++) {
    const qt_view *x = &v[t];
    if ((uintptr_t)x->data % 16 != 0) return "cuDNN path: 16-byte aligned operands";
    for (int d = 0; d < 3; d++)
      if (x->stride[d] % 8 != 0 && x->size[d] > 1) return "cuDNN path: strides of whole 16-byte vectors";
  }
  if (o->b > INT32_MAX || o->hq * o->sq > INT32_MAX || o->sk > INT32_MAX) return "cuDNN path: sizes past int32";
  return NULL;
}

static sd_key sd_key_of(const qt_attn_opts *o, const qt_view *v) {
  sd_key k;
  memset(&k, 0, sizeof k);
  k.backward = o->backward;
  k.causal = o->causal;
  k.dtype = v[QT_ATTN_Q].dtype;
  k.b = o->b, k.hq = o->hq, k.hk = o->hk, k.sq = o->sq, k.sk = o->sk, k.d = o->d, k.dv = o->dv;
  for (int d = 0; d < 3; d++) {
    k.qs[d] = v[QT_ATTN_Q].size[d] > 1 ? v[QT_ATTN_Q].stride[d] : 0;
    k.ks[d] = v[QT_ATTN_K].size[d] > 1 ? v[QT_ATTN_K].stride[d] : 0;
    k.vs[d] = v[QT_ATTN_V].size[d] > 1 ? v[QT_ATTN_V].stride[d] : 0;
  }
  /* a size-1 dim's stride is free: give cuDNN the packed one */
  int64_t *st[3] = {k.qs, k.ks, k.vs};
  int64_t last[3] = {k.d, k.d, k.dv}, heads[3] = {k.hq, k.hk, k.hk}, seq[3] = {k.sq, k.sk, k.sk};
  for (int t = 0; t < 3; t++) {
    if (st[t][2] == 0) st[t][2] = last[t];
    if (st[t][1] == 0) st[t][1] = st[t][2] * seq[t];
    if (st[t][0] == 0) st[t][0] = st[t][1] * heads[t];
  }
  return k;
}

static sd_graph *sd_graph_for(qt_device *dev, cudnnHandle_t handle, const sd_key *k, qt_err *err) {
  int o = dev->ordinal;
  if (o < 0 || o >= 64) {
    qt_errorf(err, "attention: GPU %d is past the 64 qlua serves", o);
    return NULL;
  }
  if (sd_devices[o] == NULL) {
    sd_devices[o] = (sd_device *)calloc(1, sizeof(sd_device));
    if (sd_devices[o] == NULL) {
      qt_errorf(err, "attention: out of host memory");
      return NULL;
    }
  }
  sd_device *d = sd_devices[o];
  for (int i = 0; i < SD_PLANS; i++)
    if (d->graphs[i].used && memcmp(&d->graphs[i].key, k, sizeof *k) == 0) return &d->graphs[i];
  sd_graph *g = &d->graphs[d->next];
  d->next = (d->next + 1) % SD_PLANS;
  sd_drop(g);
  sd_build(handle, k, g);
  return g;
}

int qt_cuda_attention_cudnn(qt_device *dev, const qt_attn_opts *o, const qt_view *v, char *why,
                            size_t whylen, qt_err *err) {
  const char *no = sd_refuses(o, v);
  if (no != NULL) {
    snprintf(why, whylen, "%s", no);
    return 1;
  }
  sd_key k = sd_key_of(o, v);
  pthread_mutex_lock(&qt_cudnn_lock);
  qt_err lerr;
  int rc = qt_cudnn_load(&lerr);
  if (rc != 0) {
    pthread_mutex_unlock(&qt_cudnn_lock);
    snprintf(why, whylen, "%s", lerr.msg);
    return 1;
  }
  cudnnHandle_t handle;
  if (qt_cudnn_handle(dev, &handle, err) != 0) {
    pthread_mutex_unlock(&qt_cudnn_lock);
    return -1;
  }
  sd_graph *g = sd_graph_for(dev, handle, &k, err);
  if (g == NULL) {
    pthread_mutex_unlock(&qt_cudnn_lock);
    return -1;
  }
  if (!g->ok) {
    snprintf(why, whylen, "%s", g->why);
    pthread_mutex_unlock(&qt_cudnn_lock);
    return 1;
  }
  if (o->plan_only) {
    pthread_mutex_unlock(&qt_cudnn_lock);
    return 0;
  }
  size_t bytes = (size_t)(g->own + g->workspace);
  void *ws = NULL;
  if (bytes > 0 && qt_cuda_scratch(dev, bytes, &ws, err) != 0) {
    pthread_mutex_unlock(&qt_cudnn_lock);
    return -1;
  }
  float scale = (float)o->scale, neg_inf = -INFINITY, one = 1.0f;
  int64_t uids[16];
  void *ptrs[16];
  int n = 0;
#define SD_BIND(uid, ptr) (uids[n] = (uid), ptrs[n] = (void *)(ptr), n++)
  SD_BIND(SD_Q, v[QT_ATTN_Q].data);
  SD_BIND(SD_K, v[QT_ATTN_K].data);
  SD_BIND(SD_V, v[QT_ATTN_V].data);
  SD_BIND(SD_O, v[QT_ATTN_O].data);
  SD_BIND(SD_STATS, v[QT_ATTN_LSE].data);
  SD_BIND(SD_SCALE, &scale);
  if (o->causal) SD_BIND(SD_NEG_INF, &neg_inf);
  if (o->backward) {
    int64_t acc = (k.b * k.hq * k.sq * k.d * 4 + 255) / 256 * 256;
    SD_BIND(SD_DO, v[QT_ATTN_DO].data);
    SD_BIND(SD_DQ, v[QT_ATTN_DQ].data);
    SD_BIND(SD_DK, v[QT_ATTN_DK].data);
    SD_BIND(SD_DV, v[QT_ATTN_DV].data);
    SD_BIND(SD_DQ_ACC, ws);
    SD_BIND(SD_SUM, (char *)ws + acc);
    SD_BIND(SD_ONE, &one);
  }
#undef SD_BIND
  void *cudnn_ws = (char *)ws + g->own;
  sd_b b;
  memset(&b, 0, sizeof b);
  sd_graph scratch;   /* the variant pack's descriptor lives only for this call */
  memset(&scratch, 0, sizeof scratch);
  b.g = &scratch;
  cudnnBackendDescriptor_t pack = sd_new(&b, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
  sd_set(&b, pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids, "variant pack ids");
  sd_set(&b, pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs, "variant pack pointers");
  sd_set(&b, pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &cudnn_ws, "variant pack workspace");
  sd_fin(&b, pack, "variant pack");
  if (!sd_failed(&b) && o->backward)   /* the accumulator starts at zero (cuDNN >= 9.6 clears it too) */
    sd_fail(&b, cudaMemsetAsync(ws, 0, (size_t)(k.b * k.hq * k.sq * k.d * 4), qt_cuda_context(dev)->stream) == cudaSuccess
                    ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_EXECUTION_FAILED, "clearing dQ's accumulator");
  if (!sd_failed(&b)) sd_fail(&b, qt_cudnn.be_execute(handle, g->plan, pack), "execute");
  rc = sd_failed(&b) ? qt_cudnn_check(b.status, "attention", b.what, err) : 0;
  sd_drop(&scratch);
  if (ws != NULL) qt_cuda_scratch_free(dev, ws, bytes);
  pthread_mutex_unlock(&qt_cudnn_lock);
  if (rc == 0) rc = qt_cuda_check_launch(dev, "attention", err);
  return rc;
}
