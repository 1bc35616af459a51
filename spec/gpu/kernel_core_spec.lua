--[[
User kernels in the core without a GPU: spec/gpu/kernel_core_harness.c drives
runtime/core/kernel/kernel.c (the signature parser, the memory and disk caches, the argument
and launch-limit checks, the release orders of modules and kernels) through a fake device
whose compile/module/launch slots record what would have reached the GPU. qlua.kernel and
qlua.module need a GPU, so without this the code every GPU launch goes through would never
run in CI. See the harness for what each part checks.

The harness is compiled with the working tree's runtime/core/*.c and runtime/cpu/*.c (the
code under test, unchanged), without QLUA_CUDA: the registry of a CUDA build references
the CUDA device's objects, which a CPU-side harness has no use for, so compiling the
sources links the same way in a CPU-only build and in a CUDA one, whatever the build under
test ($QLUA) was made with. Under ASan and UBSan when the compiler has them.

Bugs of kernel.c the harness found and that are not fixed yet print "KNOWN BUG [...]"
lines without failing; KERNEL_HARNESS_STRICT=1 makes them fail the run.

The CUDA sources kernel_codegen.c writes for qlua.elementwise and qlua.reduction (every dtype,
the 16-bit floats' helpers included) are also compiled with the real NVRTC for sm_90, as
kernel.cu compiles them (the toolkit's include directories on the path), when the toolkit's
libnvrtc is found ($CUDA_HOME, else /usr/local/cuda): NVRTC needs no GPU, so a generated
source that would not compile on the GPU fails on any machine with the toolkit.

Pending when there is no C compiler (cc, gcc or clang, or $CC).
]]

local P = require("spec.helpers.process")

local function capture(cmd)
  local pipe = io.popen(cmd .. " 2>/dev/null")
  if not pipe then return "" end
  local out = pipe:read("a") or ""
  pipe:close()
  return (out:gsub("%s+$", ""))
end

local function words(s)
  local list = {}
  for w in s:gmatch("%S+") do list[#list + 1] = w end
  return list
end

-- The C compiler: $CC when it runs, else cc, gcc or clang.
local function compiler()
  local cc = os.getenv("CC")
  if cc and cc ~= "" and P.have(cc) then return cc end
  for _, name in ipairs({ "cc", "gcc", "clang" }) do
    if P.have(name) then return name end
  end
  return nil
end

-- The runtime's C files under test (as the Makefile's RUNTIME_SRC, less the binding and
-- the host: the core and the CPU device).
local function runtime_sources()
  local list = words(capture("ls runtime/core/*.c runtime/core/*/*.c runtime/cpu/*.c"))
  assert(#list > 0, "no runtime/core/*.c: the spec runs from the repository root")
  return list
end

-- The toolkit root whose lib64/libnvrtc.so and include/ are there, or nil.
local function cuda_root()
  for _, root in ipairs({ os.getenv("CUDA_HOME"), os.getenv("CUDA_PATH"), "/usr/local/cuda" }) do
    if root and root ~= "" then
      local f = io.open(root .. "/lib64/libnvrtc.so", "rb")
      if f then
        f:close()
        local g = io.open(root .. "/include/cuda_fp16.h", "rb")
        if g then g:close(); return root end
      end
    end
  end
  return nil
end

-- Compiles each NN-what.cu of dir with NVRTC (-arch=sm_90 and kernel.cu's include options).
local NVRTC_CHECK = [==[
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef struct prog *program;
int main(int argc, char **argv) {
  void *h = dlopen(argv[1], RTLD_NOW);
  if (!h) { printf("cannot load %s: %s\n", argv[1], dlerror()); return 2; }
  int (*create)(program *, const char *, const char *, int, const char *const *, const char *const *) =
      (int (*)(program *, const char *, const char *, int, const char *const *, const char *const *))dlsym(h, "nvrtcCreateProgram");
  int (*compile)(program, int, const char *const *) = (int (*)(program, int, const char *const *))dlsym(h, "nvrtcCompileProgram");
  int (*log_size)(program, size_t *) = (int (*)(program, size_t *))dlsym(h, "nvrtcGetProgramLogSize");
  int (*get_log)(program, char *) = (int (*)(program, char *))dlsym(h, "nvrtcGetProgramLog");
  int (*destroy)(program *) = (int (*)(program *))dlsym(h, "nvrtcDestroyProgram");
  if (!create || !compile || !log_size || !get_log || !destroy) { printf("NVRTC lacks an entry\n"); return 2; }
  char i1[1200], i2[1200];
  snprintf(i1, sizeof i1, "-I%s/include", argv[2]);
  snprintf(i2, sizeof i2, "-I%s/include/cccl", argv[2]);
  const char *opts[] = { "-arch=sm_90", i1, i2 };
  DIR *d = opendir(argv[3]);
  if (!d) { printf("no directory %s\n", argv[3]); return 2; }
  int n = 0, bad = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t len = strlen(e->d_name);
    if (len < 4 || strcmp(e->d_name + len - 3, ".cu") != 0) continue;
    char path[2400];
    snprintf(path, sizeof path, "%s/%s", argv[3], e->d_name);
    FILE *f = fopen(path, "rb");
    if (!f) continue;
    static char src[1 << 20];
    size_t got = fread(src, 1, sizeof src - 1, f);
    fclose(f);
    src[got] = '\0';
    program p = NULL;
    n++;
    if (create(&p, src, "kernel.cu", 0, NULL, NULL) != 0) { printf("%s: create failed\n", e->d_name); bad++; continue; }
    if (compile(p, 3, opts) != 0) {
      size_t ls = 0;
      log_size(p, &ls);
      char *log = calloc(ls + 1, 1);
      if (log) get_log(p, log);
      printf("%s does not compile:\n%s\n--- source:\n%s\n", e->d_name, log ? log : "", src);
      free(log);
      bad++;
    }
    destroy(&p);
  }
  closedir(d);
  printf("nvrtc: %d sources, %d failed\n", n, bad);
  return bad > 0 || n == 0;
}
]==]

-- kernels/kernel_image.h (how kernel.cu knows a kernel's parameter count without a failing
-- query) on NVRTC's own output: cubins and PTX of kernels whose parameters are known, a
-- fatbin-like container around the cubin, and every truncation of each (under ASan when it
-- works: an image is the user's bytes).
local RTC_IMAGE_CHECK = [==[
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernel_image.h"
typedef struct prog *program;
static const char *SRC =
  "#include <cuda_fp16.h>\n"
  "extern \"C\" __global__ void copy_kinds(const float *a, double *b, const int *c, long long *d,\n"
  "  int ni, unsigned nu, long long nl, float f, double g, bool flag, int n) { if (n) b[0] = a[0]; }\n"
  "extern \"C\" __global__ void none() {}\n"
  "extern \"C\" __global__ void halves(__half *x, __half s, char c, short t) {}\n"
  "struct Big { int a[33]; };\n"
  "extern \"C\" __global__ void big(Big b, float *x) { x[0] = b.a[3]; }\n"
  "template <typename T> __global__ void axpy(T *y, const T *x, T a, int n) {}\n"
  "extern \"C\" __global__ void dyn(float *x, int n) {\n"  /* a byte-valued record too */
  "  extern __shared__ float s[]; s[threadIdx.x] = x[threadIdx.x]; __syncthreads();\n"
  "  x[threadIdx.x] = s[n - 1 - threadIdx.x]; }\n";
static const struct { const char *expr; int n; unsigned sizes[12]; } WANT[] = {
  { "dyn", 2, { 8, 4 } },
  { "copy_kinds", 11, { 8, 8, 8, 8, 4, 4, 8, 4, 8, 1, 4 } },
  { "none", 0, { 0 } },
  { "halves", 4, { 8, 2, 1, 2 } },
  { "big", 2, { 132, 8 } },
  { "axpy<float>", 4, { 8, 8, 4, 4 } },
  { "axpy<double>", 4, { 8, 8, 8, 4 } },
};
#define NWANT (int)(sizeof WANT / sizeof WANT[0])
static int failures = 0;
static void check(const char *what, const unsigned char *img, size_t n, const char **lowered, bool sized) {
  rtc_image_params t;
  rtc_image_read(&t, img, n);
  for (int i = 0; i < NWANT; i++) {
    const rtc_kernel_params *k = rtc_image_find(&t, lowered[i]);
    if (k == NULL) { printf("%s: no entry for %s\n", what, lowered[i]); failures++; continue; }
    if (k->nparams != WANT[i].n) { printf("%s: %s has %d parameters, expected %d\n", what, lowered[i], k->nparams, WANT[i].n); failures++; }
    if (sized != k->sized) { printf("%s: %s sized %d\n", what, lowered[i], k->sized); failures++; }
    for (int j = 0; sized && j < WANT[i].n && j < k->nparams; j++)
      if (k->size[j] != WANT[i].sizes[j]) { printf("%s: %s parameter %d is %u bytes, expected %u\n", what, lowered[i], j + 1, k->size[j], WANT[i].sizes[j]); failures++; }
  }
  rtc_image_free(&t);
  /* every truncation (and a flipped byte in each) reads without a fault */
  unsigned char *copy = malloc(n + 1);
  for (size_t len = 0; len <= n; len += len < 256 ? 1 : 7) {
    memcpy(copy, img, len);
    if (len > 0) copy[len / 2] ^= 0x5a;
    rtc_image_read(&t, copy, len);
    rtc_image_free(&t);
  }
  free(copy);
}
int main(int argc, char **argv) {
  if (argc < 3) return 2;
  void *h = dlopen(argv[1], RTLD_NOW);
  if (!h) { printf("cannot load %s\n", argv[1]); return 2; }
  int (*create)(program *, const char *, const char *, int, const char *const *, const char *const *) = dlsym(h, "nvrtcCreateProgram");
  int (*add_name)(program, const char *) = dlsym(h, "nvrtcAddNameExpression");
  int (*compile)(program, int, const char *const *) = dlsym(h, "nvrtcCompileProgram");
  int (*lowered_name)(program, const char *, const char **) = dlsym(h, "nvrtcGetLoweredName");
  int (*cubin_size)(program, size_t *) = dlsym(h, "nvrtcGetCUBINSize");
  int (*cubin)(program, char *) = dlsym(h, "nvrtcGetCUBIN");
  int (*ptx_size)(program, size_t *) = dlsym(h, "nvrtcGetPTXSize");
  int (*ptx)(program, char *) = dlsym(h, "nvrtcGetPTX");
  if (!create || !add_name || !compile || !lowered_name || !cubin_size || !cubin || !ptx_size || !ptx) return 2;
  char inc[1200];
  snprintf(inc, sizeof inc, "-I%s/include", argv[2]);
  const char *opts[] = { "-arch=sm_90", inc };
  program p;
  if (create(&p, SRC, "kernel.cu", 0, NULL, NULL) != 0) return 2;
  for (int i = 0; i < NWANT; i++) add_name(p, WANT[i].expr);
  if (compile(p, 2, opts) != 0) { printf("the test source does not compile\n"); return 2; }
  const char *lowered[NWANT];
  for (int i = 0; i < NWANT; i++) {
    const char *l = NULL;
    lowered_name(p, WANT[i].expr, &l);
    lowered[i] = l ? strdup(l) : "";
  }
  size_t nc = 0, np = 0;
  cubin_size(p, &nc);
  ptx_size(p, &np);
  unsigned char *c = malloc(nc), *x = malloc(np);
  cubin(p, (char *)c);
  ptx(p, (char *)x);
  check("cubin", c, nc, lowered, true);
  check("ptx", x, np, lowered, false);
  /* a fatbin-like container: its magic, some bytes, the cubin inside */
  size_t nf = 64 + nc;
  unsigned char *f = calloc(1, nf);
  memcpy(f, "\x50\xed\x55\xba", 4);
  memcpy(f + 64, c, nc);
  check("fatbin", f, nf, lowered, true);
  printf("rtc_image: %d failures\n", failures);
  return failures != 0;
}
]==]

local SAN_FLAGS = { "-fsanitize=address,undefined", "-fno-omit-frame-pointer",
                    "-fno-sanitize-recover=undefined" }

-- Whether cc builds and runs a program with ASan and UBSan.
local function sanitizers_work(cc, dir)
  local src = P.write(dir .. "/probe.c", "#include <stdlib.h>\nint main(void) { "
    .. "char *p = malloc(4); p[0] = 0; int r = p[0]; free(p); return r; }\n")
  local argv = { cc }
  for _, flag in ipairs(SAN_FLAGS) do argv[#argv + 1] = flag end
  for _, arg in ipairs({ src, "-o", dir .. "/probe" }) do argv[#argv + 1] = arg end
  if P.run(argv, { timeout = 60 }).status ~= 0 then return false end
  return P.run({ dir .. "/probe" }, { env = { ASAN_OPTIONS = "detect_leaks=0" } }).status == 0
end

describe("user kernels in the core, through a fake device", function()
  it("parses signatures, caches modules, checks arguments and limits, keeps modules alive", function()
    local cc = compiler()
    if not cc then pending("no C compiler (cc, gcc or clang)"); return end
    local dir = P.tempdir()
    local sanitized = sanitizers_work(cc, dir)
    local binary = dir .. "/kernel_core_harness"
    local argv = { cc, "-std=c11", "-D_DEFAULT_SOURCE", "-D_POSIX_C_SOURCE=200809L", "-O0", "-g",
                   "-Wall", "-Wextra", "-Iruntime" }
    if sanitized then
      for _, flag in ipairs(SAN_FLAGS) do argv[#argv + 1] = flag end
    end
    for _, flag in ipairs(words(capture("pkg-config --cflags openblas"))) do argv[#argv + 1] = flag end
    argv[#argv + 1] = "spec/gpu/kernel_core_harness.c"
    for _, src in ipairs(runtime_sources()) do argv[#argv + 1] = src end
    local blas = words(capture("pkg-config --libs openblas"))
    if #blas == 0 then blas = { "-lopenblas" } end
    for _, flag in ipairs(blas) do argv[#argv + 1] = flag end
    for _, arg in ipairs({ "-ljansson", "-lm", "-lpthread", "-ldl", "-o", binary }) do argv[#argv + 1] = arg end

    local build = P.run(argv, { timeout = 300 })
    if build.status ~= 0 then P.cleanup() end
    assert(build.status == 0, "building the harness failed:\n" .. build.stdout .. build.stderr)
    -- the harness itself builds cleanly (the runtime's own warnings are the build's business)
    local own = {}
    for line in build.stderr:gmatch("[^\n]+") do
      if line:find("kernel_core_harness.c", 1, true) then own[#own + 1] = line end
    end
    assert(#own == 0, "the harness built with warnings:\n" .. table.concat(own, "\n"))

    local env = {
      OPENBLAS_NUM_THREADS = "1",
      ASAN_OPTIONS = "detect_leaks=1:abort_on_error=0:exitcode=99",
      UBSAN_OPTIONS = "print_stacktrace=1:halt_on_error=1:exitcode=99",
    }
    local sources = dir .. "/sources"
    assert(P.run({ "mkdir", "-p", sources }).status == 0)
    env.KERNEL_HARNESS_SOURCES = sources
    local r = P.run({ binary, dir .. "/scratch" }, { env = env, timeout = 300 })
    if r.status ~= 0 and (r.stdout .. r.stderr):find("LeakSanitizer has encountered a fatal error", 1, true) then
      -- LSan cannot run here (ptrace restricted): the rest of ASan still can
      env.ASAN_OPTIONS = "detect_leaks=0:abort_on_error=0:exitcode=99"
      r = P.run({ binary, dir .. "/scratch" }, { env = env, timeout = 300 })
    end
    -- the generated sources through the real NVRTC (no sanitizers: it is not our code)
    local root, nv = cuda_root(), nil
    if root and r.status == 0 then
      local checker = dir .. "/nvrtc_check"
      local c_src = P.write(dir .. "/nvrtc_check.c", NVRTC_CHECK)
      local b = P.run({ cc, "-O1", c_src, "-ldl", "-o", checker }, { timeout = 120 })
      assert(b.status == 0, "building the NVRTC check failed:\n" .. b.stdout .. b.stderr)
      nv = P.run({ checker, root .. "/lib64/libnvrtc.so", root, sources }, { timeout = 600 })
      if nv.status == 0 then  -- and kernel_image.h on NVRTC's cubins and PTX
        local image_check = dir .. "/rtc_image_check"
        local argv2 = { cc, "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Ikernels" }
        if sanitized then for _, flag in ipairs(SAN_FLAGS) do argv2[#argv2 + 1] = flag end end
        for _, a in ipairs({ P.write(dir .. "/rtc_image_check.c", RTC_IMAGE_CHECK), "-ldl", "-o", image_check }) do
          argv2[#argv2 + 1] = a
        end
        local b2 = P.run(argv2, { timeout = 120 })
        assert(b2.status == 0, "building the rtc_image check failed:\n" .. b2.stdout .. b2.stderr)
        nv = P.run({ image_check, root .. "/lib64/libnvrtc.so", root },
                   { env = { ASAN_OPTIONS = "detect_leaks=0:exitcode=99" }, timeout = 300 })
      end
    end
    P.cleanup()
    assert(r.status == 0, "the harness failed with status " .. r.status .. ":\n" .. r.stdout .. r.stderr)
    assert.truthy(r.stdout:find("kernel_core_harness: ok", 1, true), r.stdout .. r.stderr)
    if nv then
      assert(nv.status == 0, "NVRTC refused a generated source:\n" .. nv.stdout .. nv.stderr)
    end
  end)
end)
