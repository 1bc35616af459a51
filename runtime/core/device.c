/*
** device.c — the device registry: the host device and the GPUs, opened on first use.
**
** Devices are process-wide (one CUDA context per GPU whatever the number of Lua states),
** so the registry is global state, guarded: the GPU count is computed once
** (pthread_once) and each GPU is opened at most once under a mutex. A qt_device handed
** out stays valid until the process ends. Without QLUA_CUDA there are no GPUs and the
** CUDA side is never referenced, so a CPU-only build links without kernels/.
*/
#include "device.h"
#include "cpu/cpu.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#define DEVICE_MAX_GPUS 64

static qt_device device_cpu = {
  /* .iface   = */ NULL,  /* filled on first use: the CPU device's table is not a constant expression here */
  /* .context = */ NULL,
  /* .kind    = */ QT_DEV_CPU,
  /* .ordinal = */ 0,
  /* .name    = */ "cpu",
  /* .native  = */ NULL,  /* with .iface */
  /* .capture = */ NULL,  /* the CPU never captures */
};
static pthread_once_t device_cpu_once = PTHREAD_ONCE_INIT;

#ifdef QLUA_CUDA
/* Page-locked host memory when a GPU is there, asked on first use (so a process that
** never moves data to a GPU never starts CUDA): the CPU device's host allocator. */
static int device_host_alloc(size_t nbytes, void **ptr) {
  if (qt_gpu_count() == 0) return -1;
  return qt_cuda_host_alloc(nbytes, ptr);
}

static void device_host_empty_cache(void) {
  if (qt_gpu_count() > 0) qt_cuda_host_empty_cache();
}

static const qt_host_allocator device_host_allocator = {
  /* .alloc       = */ device_host_alloc,
  /* .free        = */ qt_cuda_host_free,
  /* .empty_cache = */ device_host_empty_cache,
};
#endif

static void device_cpu_init(void) {
#ifdef QLUA_CUDA
  qt_cpu_set_host_allocator(&device_host_allocator);
#endif
  device_cpu.native = qt_cpu_iface();
  device_cpu.iface = qt_widen_iface(device_cpu.native);
}

int64_t qt_cpu_allocated(void) { return qt_cpu_device_allocated(); }
int qt_cpu_threads_get(void) { return qt_cpu_threads(); }
int qt_cpu_threads_set(int n) { return qt_cpu_set_threads(n); }
const char *qt_cpu_simd(void) { return qt_cpu_simd_name(); }
const char *qt_cpu_blas_core(void) { return qt_cpu_blas_name(); }

qt_device *qt_cpu_device(void) {
  pthread_once(&device_cpu_once, device_cpu_init);
  return &device_cpu;
}

/* ---------------------------------------------------------------- GPUs */

static pthread_once_t device_gpu_count_once = PTHREAD_ONCE_INIT;
static int device_gpu_count_value = 0;

static pthread_mutex_t device_gpu_lock = PTHREAD_MUTEX_INITIALIZER;
static qt_device device_gpus[DEVICE_MAX_GPUS];
static bool device_gpu_open[DEVICE_MAX_GPUS];
static char device_gpu_names[DEVICE_MAX_GPUS][256];
static bool device_gpu_named[DEVICE_MAX_GPUS];

static void device_count_gpus(void) {
#ifdef QLUA_CUDA
  int n = qt_cuda_device_count();
  if (n < 0) n = 0;
  if (n > DEVICE_MAX_GPUS) n = DEVICE_MAX_GPUS;
  device_gpu_count_value = n;
#else
  device_gpu_count_value = 0;
#endif
}

int qt_gpu_count(void) {
  pthread_once(&device_gpu_count_once, device_count_gpus);
  return device_gpu_count_value;
}

/* The "no such GPU" message, shared by qt_gpu_device and qt_gpu_name. */
static int device_no_gpu(int ordinal, qt_err *err) {
  int n = qt_gpu_count();
  if (n == 0) {
#ifdef QLUA_CUDA
    return qt_errorf(err, "gpu: no GPU available (no CUDA device or driver found)");
#else
    return qt_errorf(err, "gpu: no GPU available (qlua was built without CUDA)");
#endif
  }
  return qt_errorf(err, "gpu:%d: no such GPU (qlua sees %d)", ordinal, n);
}

/* Opening a GPU creates its context, stream and allocator (CUDA side); done once, under
** the lock, so two threads asking for gpu:0 at once get the same device. A failed open
** is not cached: a later call tries again and reports afresh. */
qt_device *qt_gpu_device(int ordinal, qt_err *err) {
  if (ordinal < 0 || ordinal >= qt_gpu_count()) {
    device_no_gpu(ordinal, err);
    return NULL;
  }
#ifdef QLUA_CUDA
  qt_device *dev = NULL;
  pthread_mutex_lock(&device_gpu_lock);
  if (device_gpu_open[ordinal]) {
    dev = &device_gpus[ordinal];
  } else if (qt_cuda_device_open(ordinal, &device_gpus[ordinal], err) == 0) {
    dev = &device_gpus[ordinal];
    dev->native = dev->iface;  /* the 16-bit floats through widen.c where it has no code */
    dev->iface = qt_widen_iface(dev->native);
    device_gpu_open[ordinal] = true;
  }
  pthread_mutex_unlock(&device_gpu_lock);
  return dev;
#else
  (void)device_gpus;
  (void)device_gpu_open;
  device_no_gpu(ordinal, err);
  return NULL;
#endif
}

/* Names are cached like devices, so the returned string lives as long as the process. */
const char *qt_gpu_name(int ordinal, qt_err *err) {
  if (ordinal < 0 || ordinal >= qt_gpu_count()) {
    device_no_gpu(ordinal, err);
    return NULL;
  }
#ifdef QLUA_CUDA
  const char *name = NULL;
  pthread_mutex_lock(&device_gpu_lock);
  if (device_gpu_named[ordinal]) {
    name = device_gpu_names[ordinal];
  } else if (qt_cuda_device_name(ordinal, device_gpu_names[ordinal],
                                 sizeof device_gpu_names[ordinal], err) == 0) {
    device_gpu_named[ordinal] = true;
    name = device_gpu_names[ordinal];
  }
  pthread_mutex_unlock(&device_gpu_lock);
  return name;
#else
  (void)device_gpu_names;
  (void)device_gpu_named;
  (void)device_gpu_lock;
  device_no_gpu(ordinal, err);
  return NULL;
#endif
}
