// baseline.cu — the raw CUDA / cuBLAS side of `make bench`.
//
// Runs each benchmark case the way a hand-written CUDA program would (plain kernels, raw
// cuBLAS calls, cudaMalloc, cudaMemcpy from pinned memory), timed exactly as bench/bench.lua
// times qlua: `calls` back-to-back calls followed by one synchronisation, wall-clock time
// divided by `calls`, the median of `reps` such batches after a warm-up. Using the same
// clock for both sides makes the ratio honest: the host cost of issuing a call counts on
// both sides, and for long kernels the queue hides it on both.
//
// Output: one CSV line per case on stdout: `case,seconds_per_call`.
// A case may be selected by name: `baseline gather_1m matmul_4096`.
//
// User kernels: kernel_launch_16 launches add16 (the same source bench.lua hands
// to qlua.kernel, here compiled by nvcc) with <<<>>>; elementwise_64m is z = x*x + y, one
// element per thread, 256 threads; compile_cold is NVRTC's own cost for add16 (create,
// compile for this GPU's sm, get the cubin, destroy), with NVRTC loaded by dlopen as qlua
// loads it, so this program links nothing more than cuBLAS. It is measured as bench.lua
// measures qlua's cold compile: in fresh processes (this program run again with
// --compile-cold-child), each bringing CUDA up and then compiling add16 under
// COMPILE_VARIANTS distinct first lines (bench.lua's "// qlua bench variant N"); a
// process's time is the median of its compiles after the first (which loads NVRTC), the
// case's the median over COMPILE_PROCESSES processes. On the H200 host one process's NVRTC
// time differs from the next one's by up to 30%, and it falls over a process's first few
// compiles, so a warm process compiling one source 8 times (what this case measured
// before) is not what qlua's fresh child meets: that alone read as 1.0-1.3x "overhead".
//
// 16-bit floats: matmul_{bf16,f16}_{4096,8192} are cublasGemmEx on CUDA_R_16BF /
// CUDA_R_16F operands and result with CUBLAS_COMPUTE_32F, the call PyTorch makes.

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nvrtc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#define CHECK(call)                                                                  \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "baseline: %s: %s\n", #call, cudaGetErrorString(e_));          \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)
#define CHECK_BLAS(call)                                                             \
  do {                                                                               \
    cublasStatus_t s_ = (call);                                                      \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                               \
      fprintf(stderr, "baseline: %s: cuBLAS status %d\n", #call, (int)s_);           \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

static double now() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static cudaStream_t stream;

// Median over `reps` of the per-call time of `calls` back-to-back calls + one sync.
static double time_calls(const std::function<void()> &fn, int calls, int reps) {
  fn();
  CHECK(cudaStreamSynchronize(stream));
  std::vector<double> t(reps);
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    for (int c = 0; c < calls; c++) fn();
    CHECK(cudaStreamSynchronize(stream));
    t[r] = (now() - t0) / calls;
  }
  std::sort(t.begin(), t.end());
  return t[reps / 2];
}

static void report(const char *name, double seconds) { printf("%s,%.9g\n", name, seconds); fflush(stdout); }

// ---- kernels: the plainest correct versions a CUDA programmer would write first

__global__ void gather_1d(float *out, const float *src, const int *idx, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    out[i] = src[idx[i]];
}

// out[r][c] = src[r][idx[r][c]] (torch.gather along the last dim, 0-based indices)
__global__ void gather_rows(float *out, const float *src, const long long *idx, long long rows,
                            long long src_cols, long long cols) {
  long long n = rows * cols;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    long long r = i / cols;
    out[i] = src[r * src_cols + idx[i]];
  }
}

__global__ void add_small(float *out, const float *a, const float *b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

// The user-kernel cases' kernels. ADD16_SRC is bench.lua's ADD16 text, for compile_cold;
// add16 below is the same kernel, compiled by nvcc, for kernel_launch_16.
static const char *ADD16_SRC =
    "extern \"C\" __global__ void add16(float *y, const float *x, int n) {\n"
    "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] += x[i];\n"
    "}\n";

extern "C" __global__ void add16(float *y, const float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += x[i];
}

// z = x*x + y, one element per thread
// Rounds n floats into 16-bit ones (the matmul inputs; not timed).
template <typename H>
__global__ void to_half(H *out, const float *in, long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (H)in[i];
}

__global__ void square_add(float *z, const float *x, const float *y, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) z[i] = x[i] * x[i] + y[i];
}

// NVRTC's entry points, typed from nvrtc.h, found with dlsym (nothing links against NVRTC).
struct nvrtc_api {
  decltype(&nvrtcGetErrorString) error_string;
  decltype(&nvrtcCreateProgram) create;
  decltype(&nvrtcDestroyProgram) destroy;
  decltype(&nvrtcCompileProgram) compile;
  decltype(&nvrtcGetCUBINSize) cubin_size;
  decltype(&nvrtcGetCUBIN) cubin;
  decltype(&nvrtcAddNameExpression) add_name;
  decltype(&nvrtcGetLoweredName) lowered_name;
  decltype(&nvrtcGetProgramLogSize) log_size;
  decltype(&nvrtcGetProgramLog) log;
};

// QLUA_NVRTC, then dlopen's own search, then $CUDA_HOME/lib64 and /usr/local/cuda/lib64.
static bool nvrtc_load(nvrtc_api *api) {
  char soname[64], home[600], local[600];
  snprintf(soname, sizeof soname, "libnvrtc.so.%d", CUDART_VERSION / 1000);
  const char *cuda_home = getenv("CUDA_HOME");
  snprintf(home, sizeof home, "%s/lib64/%s", cuda_home ? cuda_home : "/usr/local/cuda", soname);
  snprintf(local, sizeof local, "/usr/local/cuda/lib64/%s", soname);
  const char *env = getenv("QLUA_NVRTC");
  const char *names[] = { env && env[0] ? env : NULL, soname, home, local };
  void *lib = NULL;
  for (const char *n : names)
    if (n != NULL && (lib = dlopen(n, RTLD_NOW | RTLD_LOCAL)) != NULL) break;
  if (lib == NULL) {
    fprintf(stderr, "baseline: cannot load NVRTC (%s)\n", soname);
    return false;
  }
  struct { void **slot; const char *name; } entries[] = {
    {(void **)&api->error_string, "nvrtcGetErrorString"},
    {(void **)&api->create, "nvrtcCreateProgram"},
    {(void **)&api->destroy, "nvrtcDestroyProgram"},
    {(void **)&api->compile, "nvrtcCompileProgram"},
    {(void **)&api->cubin_size, "nvrtcGetCUBINSize"},
    {(void **)&api->cubin, "nvrtcGetCUBIN"},
    {(void **)&api->add_name, "nvrtcAddNameExpression"},
    {(void **)&api->lowered_name, "nvrtcGetLoweredName"},
    {(void **)&api->log_size, "nvrtcGetProgramLogSize"},
    {(void **)&api->log, "nvrtcGetProgramLog"},
  };
  for (auto &e : entries)
    if ((*e.slot = dlsym(lib, e.name)) == NULL) {
      fprintf(stderr, "baseline: NVRTC lacks %s\n", e.name);
      return false;
    }
  // NVRTC opens its builtins library by bare name: load it from NVRTC's own directory
  // first, as qlua does (kernels/kernel.cu), so a NVRTC found by path works too.
  auto version = (decltype(&nvrtcVersion))dlsym(lib, "nvrtcVersion");
  int major = 0, minor = 0;
  Dl_info where;
  if (version != NULL && version(&major, &minor) == NVRTC_SUCCESS &&
      dladdr((void *)version, &where) != 0 && where.dli_fname != NULL) {
    std::string dir = where.dli_fname;
    size_t slash = dir.rfind('/');
    if (slash != std::string::npos) {
      char builtins[64];
      snprintf(builtins, sizeof builtins, "/libnvrtc-builtins.so.%d.%d", major, minor);
      (void)dlopen((dir.substr(0, slash) + builtins).c_str(), RTLD_NOW | RTLD_LOCAL);
    }
  }
  return true;
}

#define CHECK_NVRTC(api, call)                                                       \
  do {                                                                               \
    nvrtcResult r_ = (call);                                                         \
    if (r_ != NVRTC_SUCCESS) {                                                       \
      fprintf(stderr, "baseline: %s: %s\n", #call, (api).error_string(r_));          \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

// One compile of src as qlua.kernel does it: the kernel's name as a name expression,
// -arch=sm_XY for this GPU and the toolkit's include directories; the cubin is fetched.
static void nvrtc_compile(const nvrtc_api &api, const char *src, const char *name,
                          const std::vector<const char *> &opts) {
  nvrtcProgram prog;
  CHECK_NVRTC(api, api.create(&prog, src, "kernel.cu", 0, NULL, NULL));
  CHECK_NVRTC(api, api.add_name(prog, name));
  nvrtcResult r = api.compile(prog, (int)opts.size(), opts.data());
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    api.log_size(prog, &n);
    std::vector<char> log(n + 1, 0);
    if (n) api.log(prog, log.data());
    fprintf(stderr, "baseline: NVRTC: %s\n%s\n", api.error_string(r), log.data());
    exit(1);
  }
  size_t size = 0;
  CHECK_NVRTC(api, api.cubin_size(prog, &size));
  std::vector<char> cubin(size);
  CHECK_NVRTC(api, api.cubin(prog, cubin.data()));
  const char *lowered = NULL;
  CHECK_NVRTC(api, api.lowered_name(prog, name, &lowered));
  CHECK_NVRTC(api, api.destroy(&prog));
}

// compile_cold's child: CUDA up (as bench.lua's child brings its GPU up first), NVRTC
// loaded, then `variants` compiles of add16 under distinct first lines; prints each
// compile's seconds on its own line.
#define COMPILE_VARIANTS 6
#define COMPILE_PROCESSES 5
static std::vector<const char *> compile_options(std::vector<std::string> &text);

static int compile_cold_child() {
  CHECK(cudaFree(0));
  nvrtc_api api;
  if (!nvrtc_load(&api)) return 1;
  std::vector<std::string> text;
  std::vector<const char *> opts = compile_options(text);
  for (int v = 1; v <= COMPILE_VARIANTS; v++) {
    std::string src = "// qlua bench variant " + std::to_string(v) + "\n" + ADD16_SRC;
    double t0 = now();
    nvrtc_compile(api, src.c_str(), "add16", opts);
    printf("%.9g\n", now() - t0);
  }
  return 0;
}

// The median over COMPILE_PROCESSES fresh children of each one's median compile after its
// first; a negative number when no child ran.
static double compile_cold_seconds() {
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return -1;
  self[len] = '\0';
  std::vector<double> medians;
  for (int c = 0; c < COMPILE_PROCESSES; c++) {
    std::string cmd = std::string("'") + self + "' --compile-cold-child";
    FILE *pipe = popen(cmd.c_str(), "r");
    if (pipe == NULL) continue;
    std::vector<double> t;
    double v;
    while (fscanf(pipe, "%lf", &v) == 1) t.push_back(v);
    if (pclose(pipe) != 0 || t.size() != COMPILE_VARIANTS) continue;
    t.erase(t.begin());
    std::sort(t.begin(), t.end());
    medians.push_back(t[t.size() / 2]);
  }
  if (medians.empty()) return -1;
  std::sort(medians.begin(), medians.end());
  return medians[medians.size() / 2];
}

static unsigned grid_for(long long n, int threads) {
  long long g = (n + threads - 1) / threads;
  return (unsigned)std::min<long long>(std::max<long long>(g, 1), 132LL * 32);
}

static bool wanted(int argc, char **argv, const char *name) {
  if (argc < 2) return true;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], name)) return true;
  return false;
}

static void fill_random(float *d, size_t n) {
  std::vector<float> h(n);
  for (size_t i = 0; i < n; i++) h[i] = (float)rand() / RAND_MAX;
  CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
}

// The options qlua gives NVRTC (kernels/kernel.cu): -arch=sm_XY for this GPU and the
// toolkit's include directories; text keeps the strings alive.
static std::vector<const char *> compile_options(std::vector<std::string> &text) {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  char arch[32];
  snprintf(arch, sizeof arch, "-arch=sm_%d%d", prop.major, prop.minor);
  text.push_back(arch);
  const char *roots[] = { getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda" };
  for (const char *root : roots) {
    if (root == NULL || root[0] == '\0') continue;
    std::string inc = std::string(root) + "/include";
    struct stat st;
    if (stat(inc.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    text.push_back("-I" + inc);
    if (stat((inc + "/cccl").c_str(), &st) == 0 && S_ISDIR(st.st_mode)) text.push_back("-I" + inc + "/cccl");
    break;
  }
  std::vector<const char *> opts;
  for (auto &t : text) opts.push_back(t.c_str());
  return opts;
}

int main(int argc, char **argv) {
  if (argc == 2 && !strcmp(argv[1], "--compile-cold-child")) return compile_cold_child();
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    fprintf(stderr, "baseline: no GPU\n");
    return 2;
  }
  CHECK(cudaSetDevice(0));
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t blas;
  CHECK_BLAS(cublasCreate(&blas));
  CHECK_BLAS(cublasSetStream(blas, stream));
  srand(1);

  const long long N128M = 128LL << 20;
  if (wanted(argc, argv, "gather_1m") || wanted(argc, argv, "gather_64m")) {
    float *src, *out;
    int *idx;
    long long kmax = 64LL << 20;
    CHECK(cudaMalloc(&src, N128M * sizeof(float)));
    CHECK(cudaMalloc(&out, kmax * sizeof(float)));
    CHECK(cudaMalloc(&idx, kmax * sizeof(int)));
    fill_random(src, 1 << 20);  // values don't change the timing; indices do
    std::vector<int> h(kmax);
    for (long long i = 0; i < kmax; i++) h[i] = (int)(((unsigned long long)rand() * RAND_MAX + rand()) % N128M);
    CHECK(cudaMemcpy(idx, h.data(), kmax * sizeof(int), cudaMemcpyHostToDevice));
    if (wanted(argc, argv, "gather_1m")) {
      long long k = 1 << 20;
      report("gather_1m", time_calls([&] { gather_1d<<<grid_for(k, 256), 256, 0, stream>>>(out, src, idx, k); }, 200, 15));
    }
    if (wanted(argc, argv, "gather_64m")) {
      long long k = kmax;
      report("gather_64m", time_calls([&] { gather_1d<<<grid_for(k, 256), 256, 0, stream>>>(out, src, idx, k); }, 20, 9));
    }
    CHECK(cudaGetLastError());
    cudaFree(src); cudaFree(out); cudaFree(idx);
  }

  if (wanted(argc, argv, "gather_dim2")) {
    long long rows = 8192, src_cols = 8192, cols = 1024;
    float *src, *out;
    long long *idx;
    CHECK(cudaMalloc(&src, rows * src_cols * sizeof(float)));
    CHECK(cudaMalloc(&out, rows * cols * sizeof(float)));
    CHECK(cudaMalloc(&idx, rows * cols * sizeof(long long)));
    std::vector<long long> h(rows * cols);
    for (auto &v : h) v = rand() % src_cols;
    CHECK(cudaMemcpy(idx, h.data(), h.size() * sizeof(long long), cudaMemcpyHostToDevice));
    report("gather_dim2", time_calls([&] {
      gather_rows<<<grid_for(rows * cols, 256), 256, 0, stream>>>(out, src, idx, rows, src_cols, cols);
    }, 50, 11));
    CHECK(cudaGetLastError());
    cudaFree(src); cudaFree(out); cudaFree(idx);
  }

  // SGEMM: C = A B, row-major n x n, via the column-major identity C^T = B^T A^T.
  auto gemm_case = [&](const char *name, int n, bool tf32, int calls, int reps) {
    float *a, *b, *c;
    size_t bytes = (size_t)n * n * sizeof(float);
    CHECK(cudaMalloc(&a, bytes)); CHECK(cudaMalloc(&b, bytes)); CHECK(cudaMalloc(&c, bytes));
    fill_random(a, (size_t)n * n); fill_random(b, (size_t)n * n);
    const float one = 1.0f, zero = 0.0f;
    cublasComputeType_t ct = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    report(name, time_calls([&] {
      CHECK_BLAS(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b, CUDA_R_32F, n, a,
                              CUDA_R_32F, n, &zero, c, CUDA_R_32F, n, ct, CUBLAS_GEMM_DEFAULT));
    }, calls, reps));
    cudaFree(a); cudaFree(b); cudaFree(c);
  };
  // A 16-bit product: dt for the operands and the result, float32 accumulation.
  auto gemm16_case = [&](const char *name, int n, cudaDataType_t dt, int calls, int reps) {
    size_t count = (size_t)n * n;
    float *f;
    void *a, *b, *c;
    CHECK(cudaMalloc(&f, count * sizeof(float)));
    CHECK(cudaMalloc(&a, count * 2)); CHECK(cudaMalloc(&b, count * 2)); CHECK(cudaMalloc(&c, count * 2));
    unsigned blocks = (unsigned)((count + 255) / 256);
    for (void *m : {a, b}) {
      fill_random(f, count);
      if (dt == CUDA_R_16BF) to_half<__nv_bfloat16><<<blocks, 256>>>((__nv_bfloat16 *)m, f, (long long)count);
      else to_half<__half><<<blocks, 256>>>((__half *)m, f, (long long)count);
      CHECK(cudaGetLastError());
    }
    CHECK(cudaDeviceSynchronize());
    const float one = 1.0f, zero = 0.0f;
    report(name, time_calls([&] {
      CHECK_BLAS(cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, b, dt, n, a, dt, n,
                              &zero, c, dt, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }, calls, reps));
    cudaFree(f); cudaFree(a); cudaFree(b); cudaFree(c);
  };
  if (wanted(argc, argv, "matmul_bf16_4096")) gemm16_case("matmul_bf16_4096", 4096, CUDA_R_16BF, 10, 9);
  if (wanted(argc, argv, "matmul_f16_4096")) gemm16_case("matmul_f16_4096", 4096, CUDA_R_16F, 10, 9);
  if (wanted(argc, argv, "matmul_bf16_8192")) gemm16_case("matmul_bf16_8192", 8192, CUDA_R_16BF, 5, 9);
  if (wanted(argc, argv, "matmul_f16_8192")) gemm16_case("matmul_f16_8192", 8192, CUDA_R_16F, 5, 9);
  if (wanted(argc, argv, "matmul_4096")) gemm_case("matmul_4096", 4096, false, 5, 7);
  if (wanted(argc, argv, "matmul_8192")) gemm_case("matmul_8192", 8192, false, 3, 5);
  if (wanted(argc, argv, "matmul_tf32_8192")) gemm_case("matmul_tf32_8192", 8192, true, 5, 7);
  if (wanted(argc, argv, "matmul_64")) {
    // The raw call alone: what cuBLAS costs per 64x64 product issued back to back.
    gemm_case("matmul_64", 64, false, 2000, 9);
  }

  if (wanted(argc, argv, "h2d_256m") || wanted(argc, argv, "d2h_256m")) {
    size_t bytes = 256u << 20;
    void *host, *dev;
    CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
    CHECK(cudaMalloc(&dev, bytes));
    memset(host, 1, bytes);
    if (wanted(argc, argv, "h2d_256m"))
      report("h2d_256m", time_calls([&] { CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream)); CHECK(cudaStreamSynchronize(stream)); }, 3, 7));
    if (wanted(argc, argv, "d2h_256m"))
      report("d2h_256m", time_calls([&] { CHECK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream)); CHECK(cudaStreamSynchronize(stream)); }, 3, 7));
    cudaFreeHost(host); cudaFree(dev);
  }

  if (wanted(argc, argv, "add_16")) {
    float *a, *b, *c;
    CHECK(cudaMalloc(&a, 64)); CHECK(cudaMalloc(&b, 64)); CHECK(cudaMalloc(&c, 64));
    report("add_16", time_calls([&] { add_small<<<1, 32, 0, stream>>>(c, a, b, 16); }, 100000, 5));
    CHECK(cudaGetLastError());
    cudaFree(a); cudaFree(b); cudaFree(c);
  }

  if (wanted(argc, argv, "alloc_1m")) {
    report("alloc_1m", time_calls([&] {
      void *p;
      CHECK(cudaMalloc(&p, 1 << 20));
      CHECK(cudaFree(p));
    }, 200, 7));
  }

  // last: a failure in these (NVRTC missing is only skipped) cannot cost the cases above
  if (wanted(argc, argv, "kernel_launch_16")) {
    float *x, *y;
    CHECK(cudaMalloc(&x, 64)); CHECK(cudaMalloc(&y, 64));
    CHECK(cudaMemset(x, 0, 64)); CHECK(cudaMemset(y, 0, 64));
    report("kernel_launch_16", time_calls([&] { add16<<<1, 32, 0, stream>>>(y, x, 16); }, 100000, 5));
    CHECK(cudaGetLastError());
    cudaFree(x); cudaFree(y);
  }

  if (wanted(argc, argv, "elementwise_64m")) {
    long long n = 64LL << 20;
    float *x, *y, *z;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    CHECK(cudaMalloc(&z, n * sizeof(float)));
    fill_random(x, n); fill_random(y, n);
    unsigned blocks = (unsigned)((n + 255) / 256);
    report("elementwise_64m", time_calls([&] { square_add<<<blocks, 256, 0, stream>>>(z, x, y, n); }, 20, 9));
    CHECK(cudaGetLastError());
    cudaFree(x); cudaFree(y); cudaFree(z);
  }

  if (wanted(argc, argv, "compile_cold")) {
    double seconds = compile_cold_seconds();  // children: see the top of this file
    if (seconds > 0) report("compile_cold", seconds);
  }

  cublasDestroy(blas);
  cudaStreamDestroy(stream);
  return 0;
}
