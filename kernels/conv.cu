/*
** conv.cu — the conv slot on the GPU through cuDNN: forward, backward data and backward
** filter of a 2-D NCHW convolution with groups, in float32 (TF32 when allowed), float64,
** float16 and bfloat16 (those two on the tensor cores, accumulating in float32). The CPU
** twin is runtime/cpu/cpu_conv.c (im2col and OpenBLAS).
**
** cuDNN is loaded on the first convolution (cudnn.cuh: dlopen, the 9.0 entry points, a
** handle per GPU bound to its stream, one lock); this file uses its convolution API
** (cudnn_cnn.h, with tensor and filter descriptors).
**
** Plans: a convolution's descriptors and its algorithm, cached per device by mode, dtype
** and geometry (CONV_PLANS of them, the oldest replaced first), so a training step after
** the first pays for neither. The algorithm: of the first CONV_CANDIDATES that cuDNN's
** heuristics rank (cudnnGet*Algorithm_v7) and whose workspace can be had, the fastest
** when the first call times them (conv_time_candidates), each run with the math type its
** ranking entry names (float32 without TF32 keeps FMA math).
** The workspace comes from the caching allocator for each call, in stream order.
**
** Without cuDNN (it cannot be loaded, or qlua.set_cudnn_enabled(false)), the convolution is
** lowered to products as on the CPU: im2col into columns from the caching allocator, a
** chunk of images at a time, and cuBLAS's batched GEMM through the matmul slot (over the
** images when there is one group, else over the groups of each image); the input's
** gradient gathers the columns back (col2im, a thread per input element, no atomics);
** the filters' gradient accumulates one GEMM per image. qlua.backend("conv") says which
** path runs.
*/
#include <stdio.h>
#include <string.h>

#include <type_traits>

#include "cudnn.cuh"
#include "dispatch.cuh"

/* ------------------------------------------------------------------ plans */

#define CONV_PLANS 64
#define CONV_CANDIDATES 12
#define CONV_TIMINGS 3       /* timed runs of each candidate (the fastest counts) */
#define CONV_MAX_GPUS 64

/* A cached plan: the key (mode, dtype, geometry, TF32), the descriptors and the algorithm. */
typedef struct conv_plan {
  bool used;
  qt_conv_mode mode;
  qt_dtype dtype;
  qt_conv_geom g;
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  int algo;          /* the mode's algorithm enum; -1 until the candidates are timed */
  cudnnMathType_t algo_math;
  size_t workspace;
  int ncand;         /* the heuristics' first CONV_CANDIDATES that can run, in rank order */
  int cand_algo[CONV_CANDIDATES];
  size_t cand_ws[CONV_CANDIDATES];
  cudnnMathType_t cand_math[CONV_CANDIDATES];   /* the math type cuDNN ranked it with */
  cudnnMathType_t math;                          /* the descriptor's now */
} conv_plan;

typedef struct conv_device {
  cudnnHandle_t handle;
  conv_plan plans[CONV_PLANS];
  int next;          /* the slot the next new plan takes */
} conv_device;

static conv_device *conv_devices[CONV_MAX_GPUS];   /* under qt_cudnn_lock, as every cuDNN call */

static int conv_check(cudnnStatus_t s, const char *what, qt_err *err) {
  return qt_cudnn_check(s, "conv", what, err);
}

/* The device's plans and handle, made on first use (qt_cudnn_lock held). */
static conv_device *conv_device_of(qt_device *dev, qt_err *err) {
  int o = dev->ordinal;
  if (o < 0 || o >= CONV_MAX_GPUS) {
    qt_errorf(err, "conv: GPU %d is past the %d qlua's convolutions serve", o, CONV_MAX_GPUS);
    return NULL;
  }
  if (conv_devices[o] != NULL) return conv_devices[o];
  conv_device *d = (conv_device *)calloc(1, sizeof *d);
  if (d == NULL) {
    qt_errorf(err, "conv: out of host memory");
    return NULL;
  }
  if (qt_cudnn_handle(dev, &d->handle, err) != 0) {
    free(d);
    return NULL;
  }
  conv_devices[o] = d;
  return d;
}

static cudnnDataType_t conv_dtype(qt_dtype d) {
  switch (d) {
    case QT_F64: return CUDNN_DATA_DOUBLE;
    case QT_F16: return CUDNN_DATA_HALF;
    case QT_BF16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

static bool conv_same_geom(const qt_conv_geom *a, const qt_conv_geom *b) {
  return a->n == b->n && a->c == b->c && a->h == b->h && a->w == b->w && a->k == b->k &&
         a->r == b->r && a->s == b->s && a->p == b->p && a->q == b->q && a->groups == b->groups &&
         a->stride[0] == b->stride[0] && a->stride[1] == b->stride[1] && a->pad[0] == b->pad[0] &&
         a->pad[1] == b->pad[1] && a->dilation[0] == b->dilation[0] &&
         a->dilation[1] == b->dilation[1] && a->allow_tf32 == b->allow_tf32;
}

static void conv_plan_drop(conv_plan *p) {
  if (!p->used) return;
  qt_cudnn.destroy_tensor(p->x);
  qt_cudnn.destroy_tensor(p->y);
  qt_cudnn.destroy_filter(p->w);
  qt_cudnn.destroy_conv(p->conv);
  p->used = false;
}

/* The ranked list's first CONV_CANDIDATES algorithms whose workspace the allocator can give;
** with one, it is the plan's; with more, the first call times them (conv_run). */
template <typename Perf>
static int conv_pick(const Perf *perf, int n, qt_device *dev, conv_plan *p, qt_err *err) {
  p->ncand = 0;
  for (int i = 0; i < n && p->ncand < CONV_CANDIDATES; i++) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    void *probe = NULL;
    if (perf[i].memory > 0) {
      qt_err ignored;
      if (qt_cuda_scratch(dev, perf[i].memory, &probe, &ignored) != 0) continue;
      qt_cuda_scratch_free(dev, probe, perf[i].memory);
    }
    p->cand_algo[p->ncand] = (int)perf[i].algo;
    p->cand_ws[p->ncand] = perf[i].memory;
    /* float32 without TF32 stays on FMA math whatever the ranking's entry says */
    p->cand_math[p->ncand] = p->math == CUDNN_FMA_MATH ? CUDNN_FMA_MATH : perf[i].mathType;
    p->ncand++;
  }
  if (p->ncand == 0)
    return qt_errorf(err, "conv: cuDNN has no algorithm for this convolution within memory");
  p->algo = p->ncand == 1 ? p->cand_algo[0] : -1;
  p->workspace = p->cand_ws[0];
  p->algo_math = p->cand_math[0];
  return 0;
}

/* The plan for (mode, dtype, g), from the cache or made now (qt_cudnn_lock held). */
static conv_plan *conv_plan_for(qt_device *dev, conv_device *d, qt_conv_mode mode, qt_dtype dt,
                                const qt_conv_geom *g, qt_err *err) {
  for (int i = 0; i < CONV_PLANS; i++) {
    conv_plan *p = &d->plans[i];
    if (p->used && p->mode == mode && p->dtype == dt && conv_same_geom(&p->g, g)) return p;
  }
  conv_plan *p = &d->plans[d->next];
  d->next = (d->next + 1) % CONV_PLANS;
  conv_plan_drop(p);
  p->mode = mode;
  p->dtype = dt;
  p->g = *g;
  cudnnDataType_t data = conv_dtype(dt);
  cudnnDataType_t compute = dt == QT_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  cudnnMathType_t math = qt_is_half(dt) ? CUDNN_TENSOR_OP_MATH
                         : dt == QT_F32 && g->allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  bool made_x = false, made_y = false, made_w = false, made_c = false;
  if (conv_check(qt_cudnn.create_tensor(&p->x), "descriptor", err)) goto fail;
  made_x = true;
  if (conv_check(qt_cudnn.create_tensor(&p->y), "descriptor", err)) goto fail;
  made_y = true;
  if (conv_check(qt_cudnn.create_filter(&p->w), "descriptor", err)) goto fail;
  made_w = true;
  if (conv_check(qt_cudnn.create_conv(&p->conv), "descriptor", err)) goto fail;
  made_c = true;
  if (conv_check(qt_cudnn.set_tensor(p->x, CUDNN_TENSOR_NCHW, data, (int)g->n, (int)g->c, (int)g->h, (int)g->w), "input descriptor", err) ||
      conv_check(qt_cudnn.set_tensor(p->y, CUDNN_TENSOR_NCHW, data, (int)g->n, (int)g->k, (int)g->p, (int)g->q), "output descriptor", err) ||
      conv_check(qt_cudnn.set_filter(p->w, data, CUDNN_TENSOR_NCHW, (int)g->k, (int)(g->c / g->groups), (int)g->r, (int)g->s), "filter descriptor", err) ||
      conv_check(qt_cudnn.set_conv(p->conv, (int)g->pad[0], (int)g->pad[1], (int)g->stride[0], (int)g->stride[1],
                                   (int)g->dilation[0], (int)g->dilation[1], CUDNN_CROSS_CORRELATION, compute), "convolution descriptor", err) ||
      conv_check(qt_cudnn.set_groups(p->conv, (int)g->groups), "groups", err) ||
      conv_check(qt_cudnn.set_math(p->conv, math), "math type", err))
    goto fail;
  p->math = math;
  {
    int n = 0;
    if (mode == QT_CONV_FORWARD) {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      if (conv_check(qt_cudnn.fwd_algos(d->handle, p->x, p->w, p->conv, p->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf), "heuristics", err) ||
          conv_pick(perf, n, dev, p, err))
        goto fail;
    } else if (mode == QT_CONV_BACKWARD_DATA) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      if (conv_check(qt_cudnn.bwd_data_algos(d->handle, p->w, p->y, p->conv, p->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf), "heuristics", err) ||
          conv_pick(perf, n, dev, p, err))
        goto fail;
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      if (conv_check(qt_cudnn.bwd_filter_algos(d->handle, p->x, p->y, p->conv, p->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf), "heuristics", err) ||
          conv_pick(perf, n, dev, p, err))
        goto fail;
    }
  }
  p->used = true;
  return p;
fail:
  if (made_x) qt_cudnn.destroy_tensor(p->x);
  if (made_y) qt_cudnn.destroy_tensor(p->y);
  if (made_w) qt_cudnn.destroy_filter(p->w);
  if (made_c) qt_cudnn.destroy_conv(p->conv);
  return NULL;
}

/* One run of the plan's operation with algorithm algo (and its workspace). */
static int conv_once(qt_device *dev, conv_device *d, conv_plan *p, int algo, size_t wsize,
                     cudnnMathType_t math, const qt_view *x, const qt_view *w, const qt_view *y,
                     qt_err *err) {
  if (math != p->math) {   /* an algorithm runs as cuDNN ranked it: with its math type */
    if (conv_check(qt_cudnn.set_math(p->conv, math), "math type", err)) return -1;
    p->math = math;
  }
  void *ws = NULL;
  if (wsize > 0 && qt_cuda_scratch(dev, wsize, &ws, err) != 0) return -1;
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  const void *one = p->dtype == QT_F64 ? (const void *)&one64 : (const void *)&one32;
  const void *zero = p->dtype == QT_F64 ? (const void *)&zero64 : (const void *)&zero32;
  cudnnStatus_t s;
  if (p->mode == QT_CONV_FORWARD)
    s = qt_cudnn.fwd(d->handle, one, p->x, x->data, p->w, w->data, p->conv,
                     (cudnnConvolutionFwdAlgo_t)algo, ws, wsize, zero, p->y, y->data);
  else if (p->mode == QT_CONV_BACKWARD_DATA)
    s = qt_cudnn.bwd_data(d->handle, one, p->w, w->data, p->y, y->data, p->conv,
                          (cudnnConvolutionBwdDataAlgo_t)algo, ws, wsize, zero, p->x, x->data);
  else
    s = qt_cudnn.bwd_filter(d->handle, one, p->x, x->data, p->y, y->data, p->conv,
                            (cudnnConvolutionBwdFilterAlgo_t)algo, ws, wsize, zero, p->w, w->data);
  if (ws != NULL) qt_cuda_scratch_free(dev, ws, wsize);
  if (conv_check(s, p->mode == QT_CONV_FORWARD ? "forward" : p->mode == QT_CONV_BACKWARD_DATA ? "backward data" : "backward filter", err))
    return -1;
  return qt_cuda_check_launch(dev, "conv", err);
}

/* The first call of a plan with several candidates runs each CONV_TIMINGS times between
** two events and keeps the fastest by its best run (cuDNN's v7 ranking alone left float32
** and bfloat16 convolutions 16% and 60% behind PyTorch's on the H200, and one timed run
** each let noise pick a slow one); it waits for the GPU that once. Each runs once
** untimed first (CUDA loads a kernel's module on its first launch). A candidate that
** fails to run (cuDNN ranks some it then refuses: CUDNN_STATUS_BAD_PARAM) is passed over.
** Unless the fastest ran last, it runs once more, so the output is the one every later
** call gives (algorithms differ in the last bits). */
static int conv_time_candidates(qt_device *dev, conv_device *d, conv_plan *p, const qt_view *x,
                                const qt_view *w, const qt_view *y, qt_err *err) {
  cudaStream_t stream = qt_cuda_context(dev)->stream;
  cudaEvent_t ev[2];
  if (qt_cuda_check(dev, cudaEventCreate(&ev[0]), "conv", err)) return -1;
  if (qt_cuda_check(dev, cudaEventCreate(&ev[1]), "conv", err)) {
    cudaEventDestroy(ev[0]);
    return -1;
  }
  int rc = 0, best = -1, last = -1;
  float best_ms = 0;
  qt_err first;
  first.msg[0] = '\0';
  for (int i = 0; i < p->ncand && rc == 0; i++) {
    float ms = 0;
    qt_err why;   /* an untimed run first: a kernel's first launch also loads its module */
    if (conv_once(dev, d, p, p->cand_algo[i], p->cand_ws[i], p->cand_math[i], x, w, y, &why) != 0) {
      if (first.msg[0] == '\0') first = why;
      continue;   /* a CUDA error is sticky: the event calls below report it */
    }
    for (int k = 0; k < CONV_TIMINGS && rc == 0; k++) {   /* the best of a few runs */
      float once = 0;
      rc = qt_cuda_check(dev, cudaEventRecord(ev[0], stream), "conv", err);
      if (rc == 0) rc = conv_once(dev, d, p, p->cand_algo[i], p->cand_ws[i], p->cand_math[i], x, w, y, err);
      if (rc == 0) rc = qt_cuda_check(dev, cudaEventRecord(ev[1], stream), "conv", err);
      if (rc == 0) rc = qt_cuda_check(dev, cudaEventSynchronize(ev[1]), "conv", err);
      if (rc == 0) rc = qt_cuda_check(dev, cudaEventElapsedTime(&once, ev[0], ev[1]), "conv", err);
      if (rc == 0 && (k == 0 || once < ms)) ms = once;
    }
    if (rc != 0) break;
    if (best < 0 || ms < best_ms) best = i, best_ms = ms;
    last = i;
  }
  cudaEventDestroy(ev[0]);
  cudaEventDestroy(ev[1]);
  if (rc != 0) return rc;
  if (best < 0) return qt_errorf(err, "%s", first.msg);
  p->algo = p->cand_algo[best];
  p->workspace = p->cand_ws[best];
  p->algo_math = p->cand_math[best];
  if (best != last) return conv_once(dev, d, p, p->algo, p->workspace, p->algo_math, x, w, y, err);
  return 0;
}

static int conv_run(qt_device *dev, qt_conv_mode mode, const qt_conv_geom *g, const qt_view *x,
                    const qt_view *w, const qt_view *y, qt_err *err) {
  conv_device *d = conv_device_of(dev, err);
  if (d == NULL) return -1;
  conv_plan *p = conv_plan_for(dev, d, mode, x->dtype, g, err);
  if (p == NULL) return -1;
  if (p->algo < 0) return conv_time_candidates(dev, d, p, x, w, y, err);
  return conv_once(dev, d, p, p->algo, p->workspace, p->algo_math, x, w, y, err);
}

/* ------------------------------------------------------------------ im2col + cuBLAS */

#define GEMM_COL_BYTES ((size_t)256 << 20)   /* the columns of a chunk of images, at most */

/* col (imgs, c * r * s, p * q) of images [0, imgs) of x (contiguous from the chunk's first). */
template <typename T>
__global__ void gemm_im2col(qt_conv_geom g, int64_t imgs, const T *__restrict__ x, T *__restrict__ col) {
  int64_t pq = g.p * g.q, rs = g.r * g.s, total = imgs * g.c * rs * pq;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    int64_t q = e % g.q, p = e / g.q % g.p, row = e / pq % (g.c * rs), img = e / (pq * g.c * rs);
    int64_t c = row / rs, ri = row / g.s % g.r, si = row % g.s;
    int64_t ih = p * g.stride[0] - g.pad[0] + ri * g.dilation[0];
    int64_t iw = q * g.stride[1] - g.pad[1] + si * g.dilation[1];
    if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) col[e] = x[((img * g.c + c) * g.h + ih) * g.w + iw];
    else if constexpr (qt_is_half_v<T>) col[e] = QT_HALF_FROM(T, 0.0f);
    else col[e] = (T)0;
  }
}

/* dx (imgs, c, h, w) = the columns' entries that read each element, summed (float32 for the
** 16-bit types). */
template <typename T, typename A>
__global__ void gemm_col2im(qt_conv_geom g, int64_t imgs, const T *__restrict__ col, T *__restrict__ dx) {
  int64_t pq = g.p * g.q, rs = g.r * g.s, total = imgs * g.c * g.h * g.w;
  for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
       e += (int64_t)gridDim.x * blockDim.x) {
    int64_t iw = e % g.w, ih = e / g.w % g.h, c = e / (g.h * g.w) % g.c, img = e / (g.h * g.w * g.c);
    A acc = 0;
    for (int64_t ri = 0; ri < g.r; ri++) {
      int64_t ph = ih + g.pad[0] - ri * g.dilation[0];
      if (ph < 0 || ph % g.stride[0] != 0 || ph / g.stride[0] >= g.p) continue;
      for (int64_t si = 0; si < g.s; si++) {
        int64_t pw = iw + g.pad[1] - si * g.dilation[1];
        if (pw < 0 || pw % g.stride[1] != 0 || pw / g.stride[1] >= g.q) continue;
        T v = col[((img * g.c + c) * rs + ri * g.s + si) * pq + ph / g.stride[0] * g.q + pw / g.stride[1]];
        if constexpr (qt_is_half_v<T>) acc += (A)qt_half_to_f32(v);
        else acc += (A)v;
      }
    }
    if constexpr (qt_is_half_v<T>) dx[e] = QT_HALF_FROM(T, (float)acc);
    else dx[e] = (T)acc;
  }
}

/* A 3-D view (b, m, n) with strides (sb, sm, sn) at data. */
static qt_view gemm_view(void *data, qt_dtype dt, int64_t b, int64_t m, int64_t n, int64_t sb,
                         int64_t sm, int64_t sn) {
  qt_view v;
  memset(&v, 0, sizeof v);
  v.data = data;
  v.dtype = dt;
  v.ndim = 3;
  v.size[0] = b, v.size[1] = m, v.size[2] = n;
  v.stride[0] = sb, v.stride[1] = sm, v.stride[2] = sn;
  v.numel = b * m * n;
  return v;
}

template <typename T>
static int gemm_conv(qt_device *dev, qt_conv_mode mode, const qt_conv_geom *g, const qt_view *x,
                     const qt_view *w, const qt_view *y, qt_err *err) {
  typedef typename std::conditional<std::is_same<T, double>::value, double, float>::type A;
  cudaStream_t stream = qt_cuda_context(dev)->stream;
  qt_dtype dt = x->dtype;
  size_t es = qt_elsize(dt);
  int64_t G = g->groups, cg = g->c / G, kg = g->k / G, rs = g->r * g->s, pq = g->p * g->q;
  int64_t crs = g->c * rs, per_img = crs * pq, chw = g->c * g->h * g->w, kpq = g->k * pq;
  int64_t chunk = (int64_t)(GEMM_COL_BYTES / ((size_t)per_img * es));
  if (chunk < 1) chunk = 1;
  if (chunk > g->n) chunk = g->n;
  size_t nbytes = (size_t)(chunk * per_img) * es;
  void *col = NULL;
  if (qt_cuda_scratch(dev, nbytes, &col, err) != 0) return -1;
  char *xd = (char *)x->data, *wd = (char *)w->data, *yd = (char *)y->data;
  int rc = 0;
  for (int64_t n0 = 0; n0 < g->n && rc == 0; n0 += chunk) {
    int64_t imgs = g->n - n0 < chunk ? g->n - n0 : chunk;
    if (mode != QT_CONV_BACKWARD_DATA) {
      gemm_im2col<T><<<qt_cuda_blocks(dev, imgs * per_img, 256), 256, 0, stream>>>(
          *g, imgs, (const T *)(xd + (size_t)(n0 * chw) * es), (T *)col);
      if ((rc = qt_cuda_check_launch(dev, "conv", err)) != 0) break;
    }
    if (mode == QT_CONV_FORWARD) {
      /* y[img] (G, kg, pq) = w (G, kg, cg rs) @ col[img] (G, cg rs, pq) */
      if (G == 1) {
        qt_view c = gemm_view(yd + (size_t)(n0 * kpq) * es, dt, imgs, g->k, pq, kpq, pq, 1);
        qt_view a = gemm_view(wd, dt, imgs, g->k, crs, 0, crs, 1);
        qt_view b = gemm_view(col, dt, imgs, crs, pq, per_img, pq, 1);
        rc = qt_cuda_matmul(dev, &c, &a, &b, 1, 0, g->allow_tf32, err);
      }
      for (int64_t i = 0; G > 1 && i < imgs && rc == 0; i++) {
        qt_view c = gemm_view(yd + (size_t)((n0 + i) * kpq) * es, dt, G, kg, pq, kg * pq, pq, 1);
        qt_view a = gemm_view(wd, dt, G, kg, cg * rs, kg * cg * rs, cg * rs, 1);
        qt_view b = gemm_view((char *)col + (size_t)(i * per_img) * es, dt, G, cg * rs, pq, cg * rs * pq, pq, 1);
        rc = qt_cuda_matmul(dev, &c, &a, &b, 1, 0, g->allow_tf32, err);
      }
    } else if (mode == QT_CONV_BACKWARD_DATA) {
      /* col[img] (G, cg rs, pq) = w^T (G, cg rs, kg) @ dy[img] (G, kg, pq), then col2im */
      if (G == 1) {
        qt_view c = gemm_view(col, dt, imgs, crs, pq, per_img, pq, 1);
        qt_view a = gemm_view(wd, dt, imgs, crs, g->k, 0, 1, crs);
        qt_view b = gemm_view(yd + (size_t)(n0 * kpq) * es, dt, imgs, g->k, pq, kpq, pq, 1);
        rc = qt_cuda_matmul(dev, &c, &a, &b, 1, 0, g->allow_tf32, err);
      }
      for (int64_t i = 0; G > 1 && i < imgs && rc == 0; i++) {
        qt_view c = gemm_view((char *)col + (size_t)(i * per_img) * es, dt, G, cg * rs, pq, cg * rs * pq, pq, 1);
        qt_view a = gemm_view(wd, dt, G, cg * rs, kg, kg * cg * rs, 1, cg * rs);
        qt_view b = gemm_view(yd + (size_t)((n0 + i) * kpq) * es, dt, G, kg, pq, kg * pq, pq, 1);
        rc = qt_cuda_matmul(dev, &c, &a, &b, 1, 0, g->allow_tf32, err);
      }
      if (rc == 0) {
        gemm_col2im<T, A><<<qt_cuda_blocks(dev, imgs * chw, 256), 256, 0, stream>>>(
            *g, imgs, (const T *)col, (T *)(xd + (size_t)(n0 * chw) * es));
        rc = qt_cuda_check_launch(dev, "conv", err);
      }
    } else {
      /* dw (G, kg, cg rs) += dy[img] (G, kg, pq) @ col[img]^T (G, pq, cg rs) */
      for (int64_t i = 0; i < imgs && rc == 0; i++) {
        qt_view c = gemm_view(wd, dt, G, kg, cg * rs, kg * cg * rs, cg * rs, 1);
        qt_view a = gemm_view(yd + (size_t)((n0 + i) * kpq) * es, dt, G, kg, pq, kg * pq, pq, 1);
        qt_view b = gemm_view((char *)col + (size_t)(i * per_img) * es, dt, G, pq, cg * rs, cg * rs * pq, 1, pq);
        rc = qt_cuda_matmul(dev, &c, &a, &b, 1, n0 + i == 0 ? 0 : 1, g->allow_tf32, err);
      }
    }
  }
  qt_cuda_scratch_free(dev, col, nbytes);
  return rc;
}

static int gemm_run(qt_device *dev, qt_conv_mode mode, const qt_conv_geom *g, const qt_view *x,
                    const qt_view *w, const qt_view *y, qt_err *err) {
  switch (x->dtype) {
    case QT_F32: return gemm_conv<float>(dev, mode, g, x, w, y, err);
    case QT_F64: return gemm_conv<double>(dev, mode, g, x, w, y, err);
    case QT_F16: return gemm_conv<qt_f16>(dev, mode, g, x, w, y, err);
    case QT_BF16: return gemm_conv<qt_bf16>(dev, mode, g, x, w, y, err);
    default: return qt_errorf(err, "conv: float operands of one dtype expected");
  }
}

/* What runs the convolutions here: cuDNN (loading it now if need be), or the GEMM path and
** why. */
extern "C" int qt_cuda_describe(qt_device *dev, const char *family, bool use_cudnn, char *buf,
                                size_t len, qt_err *err) {
  (void)dev;
  (void)err;
  if (strcmp(family, "dist") == 0) return qt_cuda_nccl_describe(buf, len);
  if (strcmp(family, "conv") != 0) {
    if (len > 0) buf[0] = '\0';
    return 0;
  }
  if (!use_cudnn) {
    snprintf(buf, len, "im2col + cuBLAS (cuDNN disabled by qlua.set_cudnn_enabled)");
    return 0;
  }
  qt_err why;
  why.msg[0] = '\0';
  pthread_mutex_lock(&qt_cudnn_lock);
  int rc = qt_cudnn_load(&why);
  size_t v = rc == 0 ? qt_cudnn.get_version() : 0;
  pthread_mutex_unlock(&qt_cudnn_lock);
  if (rc == 0) snprintf(buf, len, "cuDNN %zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
  else snprintf(buf, len, "im2col + cuBLAS (%s)", why.msg);
  return 0;
}

extern "C" int qt_cuda_conv(qt_device *dev, qt_conv_mode mode, const qt_conv_geom *g,
                            const qt_view *x, const qt_view *w, const qt_view *y, qt_err *err) {
  qt_dtype dt = x->dtype;
  if (!qt_is_float(dt) || w->dtype != dt || y->dtype != dt)
    return qt_errorf(err, "conv: float operands of one dtype expected");
  const int64_t lim = INT32_MAX;
  if (g->n > lim || g->c > lim || g->h > lim || g->w > lim || g->k > lim || g->p > lim || g->q > lim)
    return qt_errorf(err, "conv: a dimension is past cuDNN's int range");
  if (qt_cuda_enter(dev, "conv", err) != 0) return -1;
  const qt_view *out = mode == QT_CONV_FORWARD ? y : mode == QT_CONV_BACKWARD_DATA ? x : w;
  if (out->numel == 0) return 0;
  if (x->numel == 0 || w->numel == 0 || y->numel == 0) {   /* an empty sum: zeros */
    cudaError_t e = cudaMemsetAsync(out->data, 0, (size_t)out->numel * qt_elsize(dt),
                                    qt_cuda_context(dev)->stream);
    return qt_cuda_check(dev, e, "conv", err);
  }
  if (g->use_cudnn) {
    pthread_mutex_lock(&qt_cudnn_lock);
    qt_err why;
    int rc = qt_cudnn_load(&why);
    if (rc == 0) rc = conv_run(dev, mode, g, x, w, y, err);
    pthread_mutex_unlock(&qt_cudnn_lock);
    if (rc == 0 || qt_cudnn_loaded()) return rc;   /* cuDNN ran, or failed after loading */
  }
  return gemm_run(dev, mode, g, x, w, y, err);
}
