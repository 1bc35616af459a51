/*
** conv.cu — the conv slot on the GPU through cuDNN: forward, backward data and backward
** filter of a 2-D NCHW convolution with groups, in float32 (TF32 when allowed), float64,
** float16 and bfloat16 (those two on the tensor cores, accumulating in float32). The CPU
** twin is runtime/cpu/cpu_conv.c (im2col and OpenBLAS).
**
** cuDNN is loaded on the first convolution (dlopen of libcudnn.so.9, as matmul.cu loads
** cuBLAS), not linked: its start-up would cost every qlua process. Only entry points that
** cuDNN 9.0 has are used (the convolution API of cudnn_cnn.h, with tensor and filter
** descriptors), so the 9.19 headers here and the GPU host's 9.14 library agree, and the
** loaded library's cudnnGetVersion must be 9.x. Each GPU gets a handle bound to its stream.
**
** Plans: a convolution's descriptors and the algorithm cuDNN's heuristics rank first
** (cudnnGet*Algorithm_v7, the choice PyTorch makes without benchmark mode) among those
** whose workspace can be had, cached per device by mode, dtype and geometry (CONV_PLANS
** of them, the oldest replaced first), so a training step after the first pays neither.
** The workspace comes from the caching allocator for each call, in stream order.
*/
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cudnn.h>

#include "dispatch.cuh"
#include "kernels.h"

/* ------------------------------------------------------------------ cuDNN, loaded on use */

typedef struct conv_api {
  decltype(&cudnnGetVersion) get_version;
  decltype(&cudnnGetErrorString) error_string;
  decltype(&cudnnCreate) create;
  decltype(&cudnnSetStream) set_stream;
  decltype(&cudnnCreateTensorDescriptor) create_tensor;
  decltype(&cudnnSetTensor4dDescriptor) set_tensor;
  decltype(&cudnnDestroyTensorDescriptor) destroy_tensor;
  decltype(&cudnnCreateFilterDescriptor) create_filter;
  decltype(&cudnnSetFilter4dDescriptor) set_filter;
  decltype(&cudnnDestroyFilterDescriptor) destroy_filter;
  decltype(&cudnnCreateConvolutionDescriptor) create_conv;
  decltype(&cudnnSetConvolution2dDescriptor) set_conv;
  decltype(&cudnnSetConvolutionGroupCount) set_groups;
  decltype(&cudnnSetConvolutionMathType) set_math;
  decltype(&cudnnDestroyConvolutionDescriptor) destroy_conv;
  decltype(&cudnnGetConvolutionForwardAlgorithm_v7) fwd_algos;
  decltype(&cudnnGetConvolutionForwardWorkspaceSize) fwd_ws;
  decltype(&cudnnConvolutionForward) fwd;
  decltype(&cudnnGetConvolutionBackwardDataAlgorithm_v7) bwd_data_algos;
  decltype(&cudnnGetConvolutionBackwardDataWorkspaceSize) bwd_data_ws;
  decltype(&cudnnConvolutionBackwardData) bwd_data;
  decltype(&cudnnGetConvolutionBackwardFilterAlgorithm_v7) bwd_filter_algos;
  decltype(&cudnnGetConvolutionBackwardFilterWorkspaceSize) bwd_filter_ws;
  decltype(&cudnnConvolutionBackwardFilter) bwd_filter;
} conv_api;

#define CONV_STR_(x) #x
#define CONV_STR(x) CONV_STR_(x)
#define CONV_SONAME "libcudnn.so." CONV_STR(CUDNN_MAJOR)
#define CONV_PLANS 64
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
  int algo;          /* the mode's algorithm enum */
  size_t workspace;
} conv_plan;

typedef struct conv_device {
  cudnnHandle_t handle;
  conv_plan plans[CONV_PLANS];
  int next;          /* the slot the next new plan takes */
} conv_device;

static conv_api conv_lib;
static bool conv_loaded = false;
static char conv_load_error[320];
static conv_device *conv_devices[CONV_MAX_GPUS];
/* Loading, handles, plans and every cuDNN call: one convolution at a time per process
** (a handle is not to be used from two threads at once, and the GPU runs them in order). */
static pthread_mutex_t conv_lock = PTHREAD_MUTEX_INITIALIZER;

/* Caller holds conv_lock. */
static int conv_load(qt_err *err) {
  if (conv_loaded) return 0;
  if (conv_load_error[0] != '\0') return qt_errorf(err, "%s", conv_load_error);
  void *lib = dlopen(CONV_SONAME, RTLD_NOW | RTLD_LOCAL);
  char first[256];
  snprintf(first, sizeof first, "%s", lib == NULL ? dlerror() : "");
#ifdef QLUA_CUDA_LIBDIR
  if (lib == NULL) lib = dlopen(QLUA_CUDA_LIBDIR "/" CONV_SONAME, RTLD_NOW | RTLD_LOCAL);
#endif
  if (lib == NULL) {
    snprintf(conv_load_error, sizeof conv_load_error, "cannot load cuDNN (%s): %s", CONV_SONAME, first);
    return qt_errorf(err, "%s", conv_load_error);
  }
  conv_api api;
  struct { void **slot; const char *name; } entries[] = {
    {(void **)&api.get_version, "cudnnGetVersion"},
    {(void **)&api.error_string, "cudnnGetErrorString"},
    {(void **)&api.create, "cudnnCreate"},
    {(void **)&api.set_stream, "cudnnSetStream"},
    {(void **)&api.create_tensor, "cudnnCreateTensorDescriptor"},
    {(void **)&api.set_tensor, "cudnnSetTensor4dDescriptor"},
    {(void **)&api.destroy_tensor, "cudnnDestroyTensorDescriptor"},
    {(void **)&api.create_filter, "cudnnCreateFilterDescriptor"},
    {(void **)&api.set_filter, "cudnnSetFilter4dDescriptor"},
    {(void **)&api.destroy_filter, "cudnnDestroyFilterDescriptor"},
    {(void **)&api.create_conv, "cudnnCreateConvolutionDescriptor"},
    {(void **)&api.set_conv, "cudnnSetConvolution2dDescriptor"},
    {(void **)&api.set_groups, "cudnnSetConvolutionGroupCount"},
    {(void **)&api.set_math, "cudnnSetConvolutionMathType"},
    {(void **)&api.destroy_conv, "cudnnDestroyConvolutionDescriptor"},
    {(void **)&api.fwd_algos, "cudnnGetConvolutionForwardAlgorithm_v7"},
    {(void **)&api.fwd_ws, "cudnnGetConvolutionForwardWorkspaceSize"},
    {(void **)&api.fwd, "cudnnConvolutionForward"},
    {(void **)&api.bwd_data_algos, "cudnnGetConvolutionBackwardDataAlgorithm_v7"},
    {(void **)&api.bwd_data_ws, "cudnnGetConvolutionBackwardDataWorkspaceSize"},
    {(void **)&api.bwd_data, "cudnnConvolutionBackwardData"},
    {(void **)&api.bwd_filter_algos, "cudnnGetConvolutionBackwardFilterAlgorithm_v7"},
    {(void **)&api.bwd_filter_ws, "cudnnGetConvolutionBackwardFilterWorkspaceSize"},
    {(void **)&api.bwd_filter, "cudnnConvolutionBackwardFilter"},
  };
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    *entries[i].slot = dlsym(lib, entries[i].name);
    if (*entries[i].slot == NULL) {
      snprintf(conv_load_error, sizeof conv_load_error, "cuDNN (%s) lacks %s", CONV_SONAME,
               entries[i].name);
      dlclose(lib);
      return qt_errorf(err, "%s", conv_load_error);
    }
  }
  size_t version = api.get_version();
  if (version / 10000 != CUDNN_MAJOR) {
    snprintf(conv_load_error, sizeof conv_load_error, "cuDNN %zu.%zu is loaded (%s); qlua needs %d.x",
             version / 10000, version / 100 % 100, CONV_SONAME, CUDNN_MAJOR);
    dlclose(lib);
    return qt_errorf(err, "%s", conv_load_error);
  }
  conv_lib = api;
  conv_loaded = true;
  return 0;
}

static int conv_check(cudnnStatus_t s, const char *what, qt_err *err) {
  if (s == CUDNN_STATUS_SUCCESS) return 0;
  return qt_errorf(err, "conv: cuDNN %s: %s", what, conv_lib.error_string(s));
}

/* The device's cuDNN state, made on first use (conv_lock held). */
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
  if (conv_check(conv_lib.create(&d->handle), "create", err) ||
      conv_check(conv_lib.set_stream(d->handle, qt_cuda_context(dev)->stream), "set stream", err)) {
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
  conv_lib.destroy_tensor(p->x);
  conv_lib.destroy_tensor(p->y);
  conv_lib.destroy_filter(p->w);
  conv_lib.destroy_conv(p->conv);
  p->used = false;
}

/* Picks the first algorithm of the ranked list whose workspace the allocator can give. */
template <typename Perf>
static int conv_pick(const Perf *perf, int n, qt_device *dev, int *algo, size_t *ws, qt_err *err) {
  for (int i = 0; i < n; i++) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    void *probe = NULL;
    if (perf[i].memory > 0) {
      qt_err ignored;
      if (qt_cuda_scratch(dev, perf[i].memory, &probe, &ignored) != 0) continue;
      qt_cuda_scratch_free(dev, probe, perf[i].memory);
    }
    *algo = (int)perf[i].algo;
    *ws = perf[i].memory;
    return 0;
  }
  return qt_errorf(err, "conv: cuDNN has no algorithm for this convolution within memory");
}

/* The plan for (mode, dtype, g), from the cache or made now (conv_lock held). */
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
  if (conv_check(conv_lib.create_tensor(&p->x), "descriptor", err)) goto fail;
  made_x = true;
  if (conv_check(conv_lib.create_tensor(&p->y), "descriptor", err)) goto fail;
  made_y = true;
  if (conv_check(conv_lib.create_filter(&p->w), "descriptor", err)) goto fail;
  made_w = true;
  if (conv_check(conv_lib.create_conv(&p->conv), "descriptor", err)) goto fail;
  made_c = true;
  if (conv_check(conv_lib.set_tensor(p->x, CUDNN_TENSOR_NCHW, data, (int)g->n, (int)g->c, (int)g->h, (int)g->w), "input descriptor", err) ||
      conv_check(conv_lib.set_tensor(p->y, CUDNN_TENSOR_NCHW, data, (int)g->n, (int)g->k, (int)g->p, (int)g->q), "output descriptor", err) ||
      conv_check(conv_lib.set_filter(p->w, data, CUDNN_TENSOR_NCHW, (int)g->k, (int)(g->c / g->groups), (int)g->r, (int)g->s), "filter descriptor", err) ||
      conv_check(conv_lib.set_conv(p->conv, (int)g->pad[0], (int)g->pad[1], (int)g->stride[0], (int)g->stride[1],
                                   (int)g->dilation[0], (int)g->dilation[1], CUDNN_CROSS_CORRELATION, compute), "convolution descriptor", err) ||
      conv_check(conv_lib.set_groups(p->conv, (int)g->groups), "groups", err) ||
      conv_check(conv_lib.set_math(p->conv, math), "math type", err))
    goto fail;
  {
    int n = 0;
    if (mode == QT_CONV_FORWARD) {
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      if (conv_check(conv_lib.fwd_algos(d->handle, p->x, p->w, p->conv, p->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf), "heuristics", err) ||
          conv_pick(perf, n, dev, &p->algo, &p->workspace, err))
        goto fail;
    } else if (mode == QT_CONV_BACKWARD_DATA) {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      if (conv_check(conv_lib.bwd_data_algos(d->handle, p->w, p->y, p->conv, p->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf), "heuristics", err) ||
          conv_pick(perf, n, dev, &p->algo, &p->workspace, err))
        goto fail;
    } else {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      if (conv_check(conv_lib.bwd_filter_algos(d->handle, p->x, p->y, p->conv, p->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf), "heuristics", err) ||
          conv_pick(perf, n, dev, &p->algo, &p->workspace, err))
        goto fail;
    }
  }
  p->used = true;
  return p;
fail:
  if (made_x) conv_lib.destroy_tensor(p->x);
  if (made_y) conv_lib.destroy_tensor(p->y);
  if (made_w) conv_lib.destroy_filter(p->w);
  if (made_c) conv_lib.destroy_conv(p->conv);
  return NULL;
}

static int conv_run(qt_device *dev, qt_conv_mode mode, const qt_conv_geom *g, const qt_view *x,
                    const qt_view *w, const qt_view *y, qt_err *err) {
  conv_device *d = conv_device_of(dev, err);
  if (d == NULL) return -1;
  qt_dtype dt = x->dtype;
  conv_plan *p = conv_plan_for(dev, d, mode, dt, g, err);
  if (p == NULL) return -1;
  void *ws = NULL;
  if (p->workspace > 0 && qt_cuda_scratch(dev, p->workspace, &ws, err) != 0) return -1;
  double one64 = 1, zero64 = 0;
  float one32 = 1, zero32 = 0;
  const void *one = dt == QT_F64 ? (const void *)&one64 : (const void *)&one32;
  const void *zero = dt == QT_F64 ? (const void *)&zero64 : (const void *)&zero32;
  cudnnStatus_t s;
  if (mode == QT_CONV_FORWARD)
    s = conv_lib.fwd(d->handle, one, p->x, x->data, p->w, w->data, p->conv,
                     (cudnnConvolutionFwdAlgo_t)p->algo, ws, p->workspace, zero, p->y, y->data);
  else if (mode == QT_CONV_BACKWARD_DATA)
    s = conv_lib.bwd_data(d->handle, one, p->w, w->data, p->y, y->data, p->conv,
                          (cudnnConvolutionBwdDataAlgo_t)p->algo, ws, p->workspace, zero, p->x, x->data);
  else
    s = conv_lib.bwd_filter(d->handle, one, p->x, x->data, p->y, y->data, p->conv,
                            (cudnnConvolutionBwdFilterAlgo_t)p->algo, ws, p->workspace, zero, p->w, w->data);
  if (ws != NULL) qt_cuda_scratch_free(dev, ws, p->workspace);
  if (conv_check(s, mode == QT_CONV_FORWARD ? "forward" : mode == QT_CONV_BACKWARD_DATA ? "backward data" : "backward filter", err))
    return -1;
  return qt_cuda_check_launch(dev, "conv", err);
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
  pthread_mutex_lock(&conv_lock);
  int rc = conv_load(err);
  if (rc == 0) rc = conv_run(dev, mode, g, x, w, y, err);
  pthread_mutex_unlock(&conv_lock);
  return rc;
}
