/*
** cudnn.cuh — cuDNN for the CUDA device, shared by conv.cu (the convolution API of
** cudnn_cnn.h) and attention_cudnn.cu (the backend graph API of cudnn_graph.h).
**
** cuDNN is loaded on first use (dlopen of libcudnn.so.9, as matmul.cu loads cuBLAS), not
** linked: its start-up would cost every qlua process. Only entry points that cuDNN 9.0 has
** are taken, so the 9.19 headers here and the GPU host's 9.14 library agree, and the loaded
** library's cudnnGetVersion must be 9.x. Each GPU gets one handle bound to its stream.
** Every cuDNN call is made under qt_cudnn_lock: a handle is not to be used from two threads
** at once, and the GPU runs the work in order anyway.
**
** CUDA C++ only (included by the .cu files of kernels/).
*/
#ifndef QLUA_CUDNN_CUH
#define QLUA_CUDNN_CUH

#include <pthread.h>

#include <cudnn.h>

#include "kernels.h"

typedef struct qt_cudnn_api {
  decltype(&cudnnGetVersion) get_version;
  decltype(&cudnnGetErrorString) error_string;
  decltype(&cudnnGetLastErrorString) last_error;
  decltype(&cudnnCreate) create;
  decltype(&cudnnDestroy) destroy;
  decltype(&cudnnSetStream) set_stream;
  /* the convolution API (conv.cu) */
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
  /* the backend graph API (attention_cudnn.cu) */
  decltype(&cudnnBackendCreateDescriptor) be_create;
  decltype(&cudnnBackendDestroyDescriptor) be_destroy;
  decltype(&cudnnBackendSetAttribute) be_set;
  decltype(&cudnnBackendGetAttribute) be_get;
  decltype(&cudnnBackendFinalize) be_finalize;
  decltype(&cudnnBackendExecute) be_execute;
} qt_cudnn_api;

/* The entry points, valid once qt_cudnn_load has succeeded. */
extern qt_cudnn_api qt_cudnn;
extern pthread_mutex_t qt_cudnn_lock;

/* Loads cuDNN once; later calls return at once (or repeat the first failure's message,
** "cannot load cuDNN (libcudnn.so.9): ..."). Caller holds qt_cudnn_lock. */
int qt_cudnn_load(qt_err *err);
/* Whether a load succeeded (qt_cudnn is then filled). */
bool qt_cudnn_loaded(void);
/* The GPU's handle, made on first use and bound to its stream (lock held, loaded). */
int qt_cudnn_handle(qt_device *dev, cudnnHandle_t *handle, qt_err *err);
/* "op: cuDNN what: <status> (<cuDNN's last message>)" unless s is success. */
int qt_cudnn_check(cudnnStatus_t s, const char *op, const char *what, qt_err *err);

/* The attention slot's cuDNN path (attention_cudnn.cu): 0 when it ran (or, plan_only, would
** run) the call, 1 when cuDNN does not take it (why says so: the caller runs its own
** kernels), -1 on an error. */
int qt_cuda_attention_cudnn(qt_device *dev, const qt_attn_opts *o, const qt_view *v, char *why,
                            size_t whylen, qt_err *err);

#endif
