/*
** kernel.cu — code the user brings, on the GPU: NVRTC compiles, modules load, kernels launch.
**
** NVRTC is loaded on the first compile (dlopen, as matmul.cu loads cuBLAS), so start-up
** stays fast and a machine without it runs everything else; its helper library
** (libnvrtc-builtins.so.<major>.<minor>) is loaded from NVRTC's own directory first,
** because NVRTC opens it by bare name and a RUNPATH does not reach that dlopen.
**
** Modules are CUDA runtime "libraries" (cudaLibraryLoadData: PTX, cubin or fatbin, no
** libcuda link); a kernel is a cudaKernel_t, launched with cudaLaunchKernel on the
** device's stream, in order with the built-in ops. The runtime reports a bad image only
** when a kernel is looked up, so the loader's JIT log is kept with the module for that
** message. Launch limits are checked by the core from qt_kernel_info (the runtime answers
** a bad configuration with a bare "invalid argument"). A kernel's parameters are asked of
** the runtime one by one, for exactly as many as the kernel has (the count from the driver,
** or from the image itself: kernel_image.h), so no query fails on the way (compute-sanitizer
** logs every failed call).
*/
#include <dlfcn.h>
#include <nvrtc.h>
#include <pthread.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels.h"
#include "kernel_image.h"

/* NVRTC's soname carries the toolkit's major version: libnvrtc.so.13 for CUDA 13. */
#define RTC_CUDA_MAJOR (CUDART_VERSION / 1000)

/* ------------------------------------------------------------------ NVRTC, on first use */

/* Entry points typed from nvrtc.h (decltype only: nothing links against NVRTC). */
typedef struct rtc_nvrtc_api {
  decltype(&nvrtcGetErrorString) error_string;
  decltype(&nvrtcVersion) version;
  decltype(&nvrtcCreateProgram) create;
  decltype(&nvrtcDestroyProgram) destroy;
  decltype(&nvrtcCompileProgram) compile;
  decltype(&nvrtcGetCUBINSize) cubin_size;
  decltype(&nvrtcGetCUBIN) cubin;
  decltype(&nvrtcGetPTXSize) ptx_size;
  decltype(&nvrtcGetPTX) ptx;
  decltype(&nvrtcGetProgramLogSize) log_size;
  decltype(&nvrtcGetProgramLog) log;
  decltype(&nvrtcAddNameExpression) add_name;
  decltype(&nvrtcGetLoweredName) lowered_name;
  int major, minor;
} rtc_nvrtc_api;

static rtc_nvrtc_api rtc_nvrtc;
static bool rtc_nvrtc_loaded = false;
static char rtc_nvrtc_error[QT_ERRLEN];  /* why loading failed, said again on every call */
static pthread_mutex_t rtc_nvrtc_lock = PTHREAD_MUTEX_INITIALIZER;

/* QLUA_NVRTC names the library to use; else dlopen's own search (the binary's RUNPATH,
** LD_LIBRARY_PATH, ldconfig), then the toolkit directory the build saw. */
static int rtc_nvrtc_load_locked(void) {
  const char *env = getenv("QLUA_NVRTC");
  char own[32];
  snprintf(own, sizeof own, "libnvrtc.so.%d", RTC_CUDA_MAJOR);
  const char *soname = env != NULL && env[0] != '\0' ? env : own;
  void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  char first_error[200];
  snprintf(first_error, sizeof first_error, "%s", lib == NULL ? dlerror() : "");
#ifdef QLUA_CUDA_LIBDIR
  if (lib == NULL && env == NULL) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", QLUA_CUDA_LIBDIR, own);
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
#endif
  if (lib == NULL) {
    snprintf(rtc_nvrtc_error, sizeof rtc_nvrtc_error,
             "NVRTC (the CUDA Toolkit's run-time compiler) is not available: cannot load %.60s "
             "(%.60s); install the toolkit's nvrtc library or set QLUA_NVRTC to its path",
             soname, first_error);
    return -1;
  }
  rtc_nvrtc_api api;
  struct { void **slot; const char *name; } entries[] = {
    {(void **)&api.error_string, "nvrtcGetErrorString"},
    {(void **)&api.version, "nvrtcVersion"},
    {(void **)&api.create, "nvrtcCreateProgram"},
    {(void **)&api.destroy, "nvrtcDestroyProgram"},
    {(void **)&api.compile, "nvrtcCompileProgram"},
    {(void **)&api.cubin_size, "nvrtcGetCUBINSize"},
    {(void **)&api.cubin, "nvrtcGetCUBIN"},
    {(void **)&api.ptx_size, "nvrtcGetPTXSize"},
    {(void **)&api.ptx, "nvrtcGetPTX"},
    {(void **)&api.log_size, "nvrtcGetProgramLogSize"},
    {(void **)&api.log, "nvrtcGetProgramLog"},
    {(void **)&api.add_name, "nvrtcAddNameExpression"},
    {(void **)&api.lowered_name, "nvrtcGetLoweredName"},
  };
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
    *entries[i].slot = dlsym(lib, entries[i].name);
    if (*entries[i].slot == NULL) {
      snprintf(rtc_nvrtc_error, sizeof rtc_nvrtc_error, "NVRTC (%.200s) lacks %s", soname,
               entries[i].name);
      dlclose(lib);
      return -1;
    }
  }
  if (api.version(&api.major, &api.minor) != NVRTC_SUCCESS) api.major = api.minor = 0;
  /* The builtins library, from NVRTC's own directory (see the top). */
  Dl_info where;
  if (dladdr((void *)api.version, &where) != 0 && where.dli_fname != NULL) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s", where.dli_fname);
    char *slash = strrchr(dir, '/');
    if (slash != NULL) {
      *slash = '\0';
      snprintf(path, sizeof path, "%s/libnvrtc-builtins.so.%d.%d", dir, api.major, api.minor);
      (void)dlopen(path, RTLD_NOW | RTLD_LOCAL);  /* absent: NVRTC's own search decides */
    }
  }
  rtc_nvrtc = api;
  rtc_nvrtc_loaded = true;
  return 0;
}

static int rtc_nvrtc_load(const char *op, qt_err *err) {
  pthread_mutex_lock(&rtc_nvrtc_lock);
  int rc = 0;
  if (!rtc_nvrtc_loaded) {
    if (rtc_nvrtc_error[0] != '\0' || rtc_nvrtc_load_locked() != 0) rc = -1;
  }
  pthread_mutex_unlock(&rtc_nvrtc_lock);
  if (rc != 0) return qt_errorf(err, "%s: %s", op, rtc_nvrtc_error);
  return 0;
}

/* ------------------------------------------------------------------ compile */

static int rtc_arch(qt_device *dev, int *major, int *minor, qt_err *err) {
  int ordinal = qt_cuda_context(dev)->ordinal;
  if (qt_cuda_check(dev, cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, ordinal),
                    "kernel", err) ||
      qt_cuda_check(dev, cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, ordinal),
                    "kernel", err))
    return -1;
  return 0;
}

/* Where dlopen would find NVRTC, without loading it: QLUA_NVRTC when it is a path; else the
** soname in LD_LIBRARY_PATH's directories, then in the toolkit directory the build saw (the
** binary's RUNPATH), which is dlopen's own order up to its ldconfig cache. Fills path with
** the real path (libnvrtc.so.13 -> libnvrtc.so.13.0.88) and st with its status; false when
** it is not found there (the caller loads NVRTC to ask its version instead). */
static bool rtc_nvrtc_file(char *path, size_t len, struct stat *st) {
  const char *env = getenv("QLUA_NVRTC");
  char own[32], candidate[PATH_MAX];
  snprintf(own, sizeof own, "libnvrtc.so.%d", RTC_CUDA_MAJOR);
  if (env != NULL && env[0] != '\0') {
    if (strchr(env, '/') == NULL) return false;  /* a bare name: dlopen's search only */
    snprintf(candidate, sizeof candidate, "%s", env);
  } else {
    bool found = false;
    const char *dirs = getenv("LD_LIBRARY_PATH");
    while (!found && dirs != NULL && *dirs != '\0') {
      size_t n = strcspn(dirs, ":");
      if (n > 0 && n < 512) {
        snprintf(candidate, sizeof candidate, "%.*s/%s", (int)n, dirs, own);
        found = access(candidate, R_OK) == 0;
      }
      dirs += n + (dirs[n] == ':');
    }
#ifdef QLUA_CUDA_LIBDIR
    if (!found) {
      snprintf(candidate, sizeof candidate, "%s/%s", QLUA_CUDA_LIBDIR, own);
      found = access(candidate, R_OK) == 0;
    }
#endif
    if (!found) return false;
  }
  char real[PATH_MAX];
  if (realpath(candidate, real) == NULL || stat(real, st) != 0) return false;
  snprintf(path, len, "%s", real);
  return true;
}

/* The compiler's identity for the kernel cache's keys: the identity of the library file
** dlopen loads (its real path, which carries the full version, its size and its
** modification time), found without loading it, so that a kernel found in the disk cache
** costs no dlopen of NVRTC (about 5 ms, most of a cached compile); where the file is not
** found that way, NVRTC's own version (loading it). Either changes when the compiler does. */
static char rtc_compiler_file_id[PATH_MAX + 64];  /* "nvrtc <path> <size> <mtime>", once */

extern "C" int qt_cuda_compiler_id(qt_device *dev, char *buf, size_t len, qt_err *err) {
  int major, minor;
  if (qt_cuda_enter(dev, "kernel", err) || rtc_arch(dev, &major, &minor, err)) return -1;
  /* The file is found once per process (every qlua.kernel call asks, and the in-memory
  ** cache hit must stay a few microseconds): the library a process loads does not change
  ** under it. */
  pthread_mutex_lock(&rtc_nvrtc_lock);
  if (rtc_compiler_file_id[0] == '\0') {
    char path[PATH_MAX];
    struct stat st;
    if (rtc_nvrtc_file(path, sizeof path, &st))
      snprintf(rtc_compiler_file_id, sizeof rtc_compiler_file_id, "nvrtc %s %lld %lld.%09ld",
               path, (long long)st.st_size, (long long)st.st_mtim.tv_sec,
               (long)st.st_mtim.tv_nsec);
    else
      snprintf(rtc_compiler_file_id, sizeof rtc_compiler_file_id, "-");  /* not found */
  }
  bool have_file = rtc_compiler_file_id[0] != '-';
  pthread_mutex_unlock(&rtc_nvrtc_lock);
  if (have_file) {
    snprintf(buf, len, "%s sm_%d%d", rtc_compiler_file_id, major, minor);
    return 0;
  }
  if (rtc_nvrtc_load("kernel", err)) return -1;
  snprintf(buf, len, "nvrtc %d.%d sm_%d%d", rtc_nvrtc.major, rtc_nvrtc.minor, major, minor);
  return 0;
}

static bool rtc_is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The toolkit's include directories, so that <cuda_fp16.h> and <cuda/std/...> work as
** under nvcc (NVRTC has no default search path). */
static int rtc_include_options(char (*opt)[600], int max) {
  int n = 0;
  const char *roots[] = { getenv("CUDA_HOME"), getenv("CUDA_PATH"),
#ifdef QLUA_CUDA_LIBDIR
                          QLUA_CUDA_LIBDIR "/..",
#endif
                          "/usr/local/cuda" };
  for (size_t r = 0; r < sizeof roots / sizeof roots[0] && n == 0; r++) {
    if (roots[r] == NULL || roots[r][0] == '\0') continue;
    char inc[520];
    snprintf(inc, sizeof inc, "%s/include", roots[r]);
    if (!rtc_is_dir(inc)) continue;
    snprintf(opt[n++], 600, "-I%s", inc);
    snprintf(inc, sizeof inc, "%s/include/cccl", roots[r]);
    if (rtc_is_dir(inc) && n < max) snprintf(opt[n++], 600, "-I%s", inc);
  }
  return n;
}

static bool rtc_has_arch_option(const qt_compile_job *job) {
  for (int i = 0; i < job->noptions; i++) {
    const char *o = job->options[i];
    if (strncmp(o, "-arch", 5) == 0 || strncmp(o, "--gpu-architecture", 18) == 0) return true;
  }
  return false;
}

extern "C" int qt_cuda_compile(qt_device *dev, const qt_compile_job *job, qt_compile_result *out,
                               qt_err *err) {
  memset(out, 0, sizeof *out);
  int major, minor;
  if (rtc_nvrtc_load("kernel", err) || qt_cuda_enter(dev, "kernel", err) ||
      rtc_arch(dev, &major, &minor, err))
    return -1;
  char extra[3][600];
  int nextra = 0;
  if (!rtc_has_arch_option(job)) snprintf(extra[nextra++], 600, "-arch=sm_%d%d", major, minor);
  nextra += rtc_include_options(extra + nextra, 3 - nextra);
  int nopt = job->noptions + nextra;
  const char **opts = (const char **)malloc(sizeof(char *) * (size_t)(nopt > 0 ? nopt : 1));
  if (opts == NULL) return qt_errorf(err, "kernel: out of host memory");
  for (int i = 0; i < job->noptions; i++) opts[i] = job->options[i];
  for (int i = 0; i < nextra; i++) opts[job->noptions + i] = extra[i];

  nvrtcProgram prog = NULL;
  int rc = -1;
  nvrtcResult r = rtc_nvrtc.create(&prog, job->source, job->program, job->nheaders,
                                   job->header_sources, job->header_names);
  if (r != NVRTC_SUCCESS) {
    qt_errorf(err, "kernel: NVRTC cannot create the program: %s", rtc_nvrtc.error_string(r));
    goto done;
  }
  for (int i = 0; i < job->nexpressions; i++) {
    r = rtc_nvrtc.add_name(prog, job->expressions[i]);
    if (r != NVRTC_SUCCESS) {
      qt_errorf(err, "kernel: name expression '%s': %s", job->expressions[i],
                rtc_nvrtc.error_string(r));
      goto done;
    }
  }
  r = rtc_nvrtc.compile(prog, nopt, opts);
  if (r != NVRTC_SUCCESS) {
    size_t log_size = 0;
    char log[QT_ERRLEN] = "";
    if (rtc_nvrtc.log_size(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
      char *full = (char *)malloc(log_size);
      if (full != NULL && rtc_nvrtc.log(prog, full) == NVRTC_SUCCESS) {
        /* the start of the log says the first errors; keep what fits */
        snprintf(log, sizeof log, "%s", full);
      }
      free(full);
    }
    qt_errorf(err, "kernel: %s in %s:\n%s", r == NVRTC_ERROR_COMPILATION ? "compile error"
                                                                       : rtc_nvrtc.error_string(r),
              job->program, log);
    goto done;
  }
  {
    size_t size = 0;
    bool cubin = rtc_nvrtc.cubin_size(prog, &size) == NVRTC_SUCCESS && size > 0;
    if (!cubin && rtc_nvrtc.ptx_size(prog, &size) != NVRTC_SUCCESS) size = 0;
    if (size == 0) {
      qt_errorf(err, "kernel: NVRTC produced no code");
      goto done;
    }
    out->image = (char *)malloc(size);
    if (out->image == NULL) {
      qt_errorf(err, "kernel: out of host memory");
      goto done;
    }
    r = cubin ? rtc_nvrtc.cubin(prog, out->image) : rtc_nvrtc.ptx(prog, out->image);
    if (r != NVRTC_SUCCESS) {
      qt_errorf(err, "kernel: NVRTC cannot give its output: %s", rtc_nvrtc.error_string(r));
      goto done;
    }
    out->image_size = size;
  }
  if (job->nexpressions > 0) {
    out->lowered = (char **)calloc((size_t)job->nexpressions, sizeof(char *));
    if (out->lowered == NULL) {
      qt_errorf(err, "kernel: out of host memory");
      goto done;
    }
    out->nlowered = job->nexpressions;
    for (int i = 0; i < job->nexpressions; i++) {
      const char *lowered = NULL;
      r = rtc_nvrtc.lowered_name(prog, job->expressions[i], &lowered);
      if (r != NVRTC_SUCCESS || lowered == NULL) {
        qt_errorf(err, "kernel: no kernel named by '%s': %s", job->expressions[i],
                  rtc_nvrtc.error_string(r));
        goto done;
      }
      out->lowered[i] = strdup(lowered);
      if (out->lowered[i] == NULL) {
        qt_errorf(err, "kernel: out of host memory");
        goto done;
      }
    }
  }
  rc = 0;
done:
  if (prog != NULL) rtc_nvrtc.destroy(&prog);
  free(opts);
  if (rc != 0) {
    free(out->image);
    for (int i = 0; i < out->nlowered; i++) free(out->lowered ? out->lowered[i] : NULL);
    free(out->lowered);
    memset(out, 0, sizeof *out);
  }
  return rc;
}

/* ------------------------------------------------------------------ modules */

typedef struct rtc_module {
  cudaLibrary_t library;
  rtc_image_params params;  /* each kernel's parameter count, as the image tells it */
  char log[1024];  /* the loader's JIT messages, for a failed lookup */
} rtc_module;

extern "C" int qt_cuda_module_load(qt_device *dev, const void *image, size_t nbytes, void **module,
                                   qt_err *err) {
  *module = NULL;
  if (qt_cuda_enter(dev, "module", err) != 0) return -1;
  rtc_module *m = (rtc_module *)calloc(1, sizeof *m);
  if (m == NULL) return qt_errorf(err, "module: out of host memory");
  /* PTX is text and must end in a NUL; cubin and fatbin carry their sizes. */
  const unsigned char *bytes = (const unsigned char *)image;
  bool binary = nbytes >= 4 && ((bytes[0] == 0x7f && bytes[1] == 'E' && bytes[2] == 'L' &&
                                 bytes[3] == 'F') ||
                                (bytes[0] == 0x50 && bytes[1] == 0xed && bytes[2] == 0x55 &&
                                 bytes[3] == 0xba));
  char *text = NULL;
  if (!binary) {
    text = (char *)malloc(nbytes + 1);
    if (text == NULL) {
      free(m);
      return qt_errorf(err, "module: out of host memory");
    }
    memcpy(text, image, nbytes);
    text[nbytes] = '\0';
  }
  cudaJitOption options[2] = { cudaJitErrorLogBuffer, cudaJitErrorLogBufferSizeBytes };
  void *values[2] = { m->log, (void *)(uintptr_t)(sizeof m->log - 1) };
  cudaError_t status = cudaLibraryLoadData(&m->library, binary ? image : text, options, values, 2,
                                           NULL, NULL, 0);
  free(text);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    qt_errorf(err, "module: cannot load the image: %s%s%s", cudaGetErrorString(status),
              m->log[0] ? ": " : "", m->log);
    free(m);
    return -1;
  }
  /* The runtime reports a bad image only when a kernel is used: ask for the kernels and
  ** the first one's attributes now, so that a bad image fails here, with its log. */
  unsigned count = 0;
  status = cudaLibraryGetKernelCount(&count, m->library);
  cudaKernel_t first = NULL;
  if (status == cudaSuccess && count > 0) {
    cudaKernel_t *all = (cudaKernel_t *)calloc(count, sizeof *all);
    if (all == NULL) status = cudaErrorMemoryAllocation;
    else status = cudaLibraryEnumerateKernels(all, count, m->library);
    if (status == cudaSuccess) first = all[0];
    free(all);
    if (status == cudaSuccess && first != NULL) {
      cudaFuncAttributes attr;
      status = cudaFuncGetAttributes(&attr, (const void *)first);
    }
  }
  if (status != cudaSuccess || count == 0 || first == NULL) {
    (void)cudaGetLastError();
    qt_errorf(err, "module: %s%s%s", status != cudaSuccess ? cudaGetErrorString(status)
                                                           : "the image defines no kernels",
              m->log[0] ? ": " : "", m->log);
    (void)cudaLibraryUnload(m->library);
    (void)cudaGetLastError();
    free(m);
    return -1;
  }
  rtc_image_read(&m->params, image, nbytes);  /* best effort: a kernel left out is probed */
  *module = m;
  return 0;
}

extern "C" void qt_cuda_module_unload(qt_device *dev, void *module) {
  (void)dev;
  rtc_module *m = (rtc_module *)module;
  if (m == NULL) return;
  (void)cudaLibraryUnload(m->library);
  (void)cudaGetLastError();
  rtc_image_free(&m->params);
  free(m);
}

/* cuKernelGetParamCount, where the driver has it (drivers after CUDA 13.0; 13.0's headers
** do not declare it): looked up once, for the driver's own version, so that a driver
** without it answers "not found" instead of failing the lookup. */
typedef int (*rtc_param_count_fn)(cudaKernel_t kernel, size_t *count);  /* CUresult (CUkernel, size_t *) */
static rtc_param_count_fn rtc_param_count;
static pthread_once_t rtc_param_count_once = PTHREAD_ONCE_INIT;

static void rtc_param_count_find(void) {
  int driver = 0;
  void *fn = NULL;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0 &&
      cudaGetDriverEntryPointByVersion("cuKernelGetParamCount", &fn, (unsigned)driver,
                                       cudaEnableDefault, &found) == cudaSuccess &&
      found == cudaDriverEntryPointSuccess && fn != NULL)
    rtc_param_count = (rtc_param_count_fn)fn;
}

/* The parameters' sizes into info: exactly `count` of them asked of the runtime, checked
** against the image's own table where it has offsets and sizes; false when any answer
** disagrees (then the caller probes). */
static bool rtc_params_asked(cudaKernel_t k, int count, const rtc_kernel_params *known,
                             qt_kernel_info *info) {
  if (count < 0 || count > QT_KERNEL_MAXPARAMS) return false;
  for (int i = 0; i < count; i++) {
    size_t offset = 0, size = 0;
    if (cudaFuncGetParamInfo((const void *)k, (size_t)i, &offset, &size) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    if (known != NULL && known->sized && (known->offset[i] != offset || known->size[i] != size))
      return false;
    info->param_size[i] = size;
  }
  info->nparams = count;
  return true;
}

extern "C" int qt_cuda_module_kernels(qt_device *dev, void *module,
                                      void (*each)(const char *, void *), void *arg, qt_err *err) {
  rtc_module *m = (rtc_module *)module;
  if (qt_cuda_enter(dev, "module", err) != 0) return -1;
  unsigned count = 0;
  cudaError_t status = cudaLibraryGetKernelCount(&count, m->library);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return qt_errorf(err, "module: cannot list its kernels: %s%s%s", cudaGetErrorString(status),
                     m->log[0] ? ": " : "", m->log);
  }
  if (count == 0) return 0;
  cudaKernel_t *kernels = (cudaKernel_t *)calloc(count, sizeof *kernels);
  if (kernels == NULL) return qt_errorf(err, "module: out of host memory");
  status = cudaLibraryEnumerateKernels(kernels, count, m->library);
  for (unsigned i = 0; status == cudaSuccess && i < count; i++) {
    const char *name = NULL;
    if (kernels[i] == NULL) continue;
    status = cudaFuncGetName(&name, (const void *)kernels[i]);
    if (status == cudaSuccess && name != NULL) each(name, arg);
  }
  free(kernels);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return qt_errorf(err, "module: cannot list its kernels: %s%s%s", cudaGetErrorString(status),
                     m->log[0] ? ": " : "", m->log);
  }
  return 0;
}

extern "C" int qt_cuda_kernel_get(qt_device *dev, void *module, const char *name, void **kernel,
                                  qt_kernel_info *info, qt_err *err) {
  rtc_module *m = (rtc_module *)module;
  *kernel = NULL;
  if (qt_cuda_enter(dev, "kernel", err) != 0) return -1;
  cudaKernel_t k = NULL;  /* left unwritten when the lookup fails */
  cudaError_t status = cudaLibraryGetKernel(&k, m->library, name);
  if (status != cudaSuccess || k == NULL) {
    (void)cudaGetLastError();
    const char *why = status == cudaErrorNoKernelImageForDevice
                          ? " (the image has no code for this GPU's architecture)"
                          : "";
    return qt_errorf(err, "kernel: no kernel '%s' in the module: %s%s%s%s", name,
                     cudaGetErrorString(status), why, m->log[0] ? ": " : "", m->log);
  }
  cudaFuncAttributes attr;
  status = cudaFuncGetAttributes(&attr, (const void *)k);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return qt_errorf(err, "kernel: '%s': %s%s%s", name, cudaGetErrorString(status),
                     m->log[0] ? ": " : "", m->log);
  }
  memset(info, 0, sizeof *info);
  info->num_regs = attr.numRegs;
  info->max_threads = attr.maxThreadsPerBlock;
  info->static_shared = attr.sharedSizeBytes;
  int ordinal = qt_cuda_context(dev)->ordinal, optin = 0;
  (void)cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ordinal);
  size_t limit = (size_t)optin > attr.sharedSizeBytes ? (size_t)optin - attr.sharedSizeBytes : 0;
  info->max_dynamic_shared = limit > (size_t)attr.maxDynamicSharedSizeBytes
                                 ? limit : (size_t)attr.maxDynamicSharedSizeBytes;
  const cudaDeviceAttr block_attr[3] = { cudaDevAttrMaxBlockDimX, cudaDevAttrMaxBlockDimY,
                                         cudaDevAttrMaxBlockDimZ };
  const cudaDeviceAttr grid_attr[3] = { cudaDevAttrMaxGridDimX, cudaDevAttrMaxGridDimY,
                                        cudaDevAttrMaxGridDimZ };
  for (int d = 0; d < 3; d++) {
    int b = 0, g = 0;
    (void)cudaDeviceGetAttribute(&b, block_attr[d], ordinal);
    (void)cudaDeviceGetAttribute(&g, grid_attr[d], ordinal);
    info->max_block[d] = (unsigned)b;
    info->max_grid[d] = (unsigned)g;
  }
  /* the parameter count: the driver's, else the image's (a cubin's records, checked by
  ** the runtime's offsets and sizes; PTX's .entry list), else a probe up to the first
  ** parameter the runtime does not know (one failed call: a compressed fatbin) */
  pthread_once(&rtc_param_count_once, rtc_param_count_find);
  const rtc_kernel_params *known = rtc_image_find(&m->params, name);
  size_t driver_count = 0;
  bool asked = false;
  if (rtc_param_count != NULL && rtc_param_count(k, &driver_count) == 0) {
    if (known != NULL && known->nparams != (int)driver_count) known = NULL;
    asked = rtc_params_asked(k, (int)driver_count, known, info);
  } else if (known != NULL) {
    asked = rtc_params_asked(k, known->nparams, known, info);
  }
  if (!asked) {
    info->nparams = 0;
    for (size_t i = 0; i < QT_KERNEL_MAXPARAMS; i++) {
      size_t offset = 0, size = 0;
      if (cudaFuncGetParamInfo((const void *)k, i, &offset, &size) != cudaSuccess) break;
      info->param_size[i] = size;
      info->nparams = (int)i + 1;
    }
    (void)cudaGetLastError();  /* the probe past the last parameter */
  }
  *kernel = (void *)k;
  return 0;
}

extern "C" int qt_cuda_launch(qt_device *dev, void *kernel, const qt_launch_cfg *cfg, void **args,
                              qt_err *err) {
  if (qt_cuda_enter(dev, "launch", err) != 0) return -1;
  const void *k = (const void *)kernel;
  if (cfg->shared > 48 * 1024) {  /* beyond the default, the kernel must opt in */
    cudaError_t status =
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cfg->shared);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      return qt_errorf(err, "launch: %zu bytes of shared memory: %s", cfg->shared,
                       cudaGetErrorString(status));
    }
  }
  dim3 grid(cfg->grid[0], cfg->grid[1], cfg->grid[2]);
  dim3 block(cfg->block[0], cfg->block[1], cfg->block[2]);
  return qt_cuda_check(dev, cudaLaunchKernel(k, grid, block, args, cfg->shared,
                                             qt_cuda_context(dev)->stream),
                       "launch", err);
}

extern "C" void *qt_cuda_native_stream(qt_device *dev) {
  return (void *)qt_cuda_context(dev)->stream;
}
