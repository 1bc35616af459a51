/*
** cudnn.cu — loading cuDNN and the GPUs' handles (cudnn.cuh).
*/
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "cudnn.cuh"

#define CUDNN_STR_(x) #x
#define CUDNN_STR(x) CUDNN_STR_(x)
#define CUDNN_SONAME "libcudnn.so." CUDNN_STR(CUDNN_MAJOR)
#define CUDNN_MAX_GPUS 64

qt_cudnn_api qt_cudnn;
pthread_mutex_t qt_cudnn_lock = PTHREAD_MUTEX_INITIALIZER;
static bool cudnn_ok = false;
static char cudnn_load_error[320];
static cudnnHandle_t cudnn_handles[CUDNN_MAX_GPUS];

bool qt_cudnn_loaded(void) { return cudnn_ok; }

int qt_cudnn_load(qt_err *err) {
  if (cudnn_ok) return 0;
  if (cudnn_load_error[0] != '\0') return qt_errorf(err, "%s", cudnn_load_error);
  void *lib = dlopen(CUDNN_SONAME, RTLD_NOW | RTLD_LOCAL);
  char first[256];
  snprintf(first, sizeof first, "%s", lib == NULL ? dlerror() : "");
#ifdef QLUA_CUDA_LIBDIR
  if (lib == NULL) lib = dlopen(QLUA_CUDA_LIBDIR "/" CUDNN_SONAME, RTLD_NOW | RTLD_LOCAL);
#endif
  if (lib == NULL) {
    snprintf(cudnn_load_error, sizeof cudnn_load_error, "cannot load cuDNN (%s): %s", CUDNN_SONAME, first);
    return qt_errorf(err, "%s", cudnn_load_error);
  }
  qt_cudnn_api api;
  struct { void **slot; const char *name; } entries[] = {
    {(void **)&api.get_version, "cudnnGetVersion"},
    {(void **)&api.error_string, "cudnnGetErrorString"},
    {(void **)&api.last_error, "cudnnGetLastErrorString"},
    {(void **)&api.create, "cudnnCreate"},
    {(void **)&api.destroy, "cudnnDestroy"},
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
    {(void **)&api.be_create, "cudnnBackendCreateDescriptor"},
    {(void **)&api.be_destroy, "cudnnBackendDestroyDescriptor"},
    {(void **)&api.be_set, "cudnnBackendSetAttribute"},
    {(void **)&api.be_get, "cudnnBackendGetAttribute"},
    {(void **)&api.be_finalize, "cudnnBackendFinalize"},
    {(void **)&api.be_execute, "cudnnBackendExecute"},
  };
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    *entries[i].slot = dlsym(lib, entries[i].name);
    if (*entries[i].slot == NULL) {
      snprintf(cudnn_load_error, sizeof cudnn_load_error, "cuDNN (%s) lacks %s", CUDNN_SONAME,
               entries[i].name);
      dlclose(lib);
      return qt_errorf(err, "%s", cudnn_load_error);
    }
  }
  size_t version = api.get_version();
  if (version / 10000 != CUDNN_MAJOR) {
    snprintf(cudnn_load_error, sizeof cudnn_load_error, "cuDNN %zu.%zu is loaded (%s); qlua needs %d.x",
             version / 10000, version / 100 % 100, CUDNN_SONAME, CUDNN_MAJOR);
    dlclose(lib);
    return qt_errorf(err, "%s", cudnn_load_error);
  }
  qt_cudnn = api;
  cudnn_ok = true;
  return 0;
}

int qt_cudnn_check(cudnnStatus_t s, const char *op, const char *what, qt_err *err) {
  if (s == CUDNN_STATUS_SUCCESS) return 0;
  char last[200];
  last[0] = '\0';
  qt_cudnn.last_error(last, sizeof last);
  if (last[0] != '\0') return qt_errorf(err, "%s: cuDNN %s: %s (%s)", op, what, qt_cudnn.error_string(s), last);
  return qt_errorf(err, "%s: cuDNN %s: %s", op, what, qt_cudnn.error_string(s));
}

int qt_cudnn_handle(qt_device *dev, cudnnHandle_t *handle, qt_err *err) {
  int o = dev->ordinal;
  if (o < 0 || o >= CUDNN_MAX_GPUS)
    return qt_errorf(err, "cuDNN: GPU %d is past the %d qlua serves", o, CUDNN_MAX_GPUS);
  if (cudnn_handles[o] == NULL) {
    cudnnHandle_t h = NULL;
    if (qt_cudnn_check(qt_cudnn.create(&h), "cuDNN", "create", err)) return -1;
    if (qt_cudnn_check(qt_cudnn.set_stream(h, qt_cuda_context(dev)->stream), "cuDNN", "set stream", err)) {
      qt_cudnn.destroy(h);
      return -1;
    }
    cudnn_handles[o] = h;
  }
  *handle = cudnn_handles[o];
  return 0;
}
