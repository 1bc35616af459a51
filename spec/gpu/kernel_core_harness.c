/*
** kernel_core_harness.c — the core's half of user kernels (runtime/core/kernel/kernel.c) on
** the CPU, through a fake device. Built and run by spec/gpu/kernel_core_spec.lua.
**
** Without a GPU, qlua.kernel and qlua.module cannot be reached from Lua, so CI would never
** run the code every GPU launch goes through: the signature parser, the caches and the
** argument checks. Here a device "fake:0" gets the CPU device's slot table (so tensors
** can be allocated on it, through the real core) with the user-code slots filled by
** fakes that record what reaches them:
**   compiler_id  "fake 1.0 sm_00" (F.compiler_id: a test changes it to see the key change)
**   compile      counts its calls; the image is "IMAGE:" + the source, the lowered name of
**                each expression is F.lower_prefix + the expression
**   module_load  copies the image (F.last_image); module_unload frees it, and the count of
**                live modules must come back to 0
**   kernel_get   a layout from the table the test sets (set_table("8,4"): nparams and
**                parameter sizes; NULL: the device cannot tell), with an H100's limits:
**                1024 threads, blocks 1024x1024x64, grids 2147483647x65535x65535, 48 KiB
**                of dynamic shared memory; a name that starts with "missing" is not there
**   launch       records cfg and copies each parameter's bytes (args[k], as many as the
**                kernel's table says), so a test checks what would have reached the GPU
** Tests, in order: 1 signatures from source, 2 signatures from mangled names, 3 launches
** (argument checks, packed bytes, launch limits; no error ever reaches the fake launch),
** 4 the memory and disk caches (corrupt files, keys, QLUA_KERNEL_CACHE=0, clearing, four
** processes compiling one source at once), 5 native streams, 6 release orders of modules,
** kernels and contexts, 7 the sources kernel_codegen.c writes for qlua.elementwise and
** qlua.reduction (the 16-bit floats computed in float32), written to $KERNEL_HARNESS_SOURCES
** when it is set (the spec compiles them with the real NVRTC when the toolkit is there).
**
** Every failure prints "FAIL line N: ..." with the values; the exit status is 1 when any
** check failed, and the last line is "kernel_core_harness: ok" when none did. Bugs found
** in kernel.c and not fixed yet are KNOWN_BUG checks: they print "KNOWN BUG ..." and
** do not fail the run unless KERNEL_HARNESS_STRICT=1 (a fixed one prints "fixed?" so the
** check can become a plain CHECK).
**
**   kernel_core_harness [SCRATCH_DIR]   (default: a fresh directory under $TMPDIR or /tmp)
*/
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cpu/cpu.h"
#include "device.h"
#include "ops.h"
#include "tensor.h"

/* ================================================================== checks */

static int failures = 0, known_bugs = 0, fixed_bugs = 0;
static bool strict = false;

static void fail(int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL line %d: ", line);
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
  failures++;
}

#define CHECK(cond, ...)                     \
  do {                                       \
    if (!(cond)) fail(__LINE__, __VA_ARGS__); \
  } while (0)

/* A bug of kernel.c that is reported and not fixed yet: cond is the right behaviour. */
#define KNOWN_BUG(cond, id, ...)                                                \
  do {                                                                          \
    if (!(cond)) {                                                              \
      printf("KNOWN BUG [%s] (line %d): ", id, __LINE__);                       \
      printf(__VA_ARGS__);                                                      \
      printf("\n");                                                             \
      known_bugs++;                                                             \
      if (strict) failures++;                                                   \
    } else {                                                                    \
      printf("fixed? known bug [%s] (line %d) no longer shows: make it a CHECK\n", id, \
             __LINE__);                                                         \
      fixed_bugs++;                                                             \
    }                                                                           \
  } while (0)

static void check_error_at(int line, const char *what, int rc, const qt_ctx *ctx,
                           const char *const *needles) {
  if (rc != -1) {
    fail(line, "%s: expected an error, got rc %d", what, rc);
    return;
  }
  for (int i = 0; needles[i] != NULL; i++)
    if (strstr(ctx->err.msg, needles[i]) == NULL)
      fail(line, "%s: the message should contain '%s', got '%s'", what, needles[i],
           ctx->err.msg);
}
#define CHECK_ERROR(what, rc, ctx, ...) \
  check_error_at(__LINE__, what, rc, ctx, (const char *const[]){__VA_ARGS__, NULL})

static void check_ok_at(int line, const char *what, int rc, const qt_ctx *ctx) {
  if (rc != 0) fail(line, "%s: expected success, got rc %d: '%s'", what, rc, ctx->err.msg);
}
#define CHECK_OK(what, rc, ctx) check_ok_at(__LINE__, what, rc, ctx)

/* ================================================================== the fake device */

typedef struct fake_module fake_module;

typedef struct fake_kernel {
  fake_module *module;
  char name[256];
  int nparams;  /* -1: unknown */
  size_t sizes[QT_KERNEL_MAXPARAMS];
} fake_kernel;

#define FAKE_MODULE_MAGIC 0x6d6f64756c65u
#define FAKE_MAX_KERNELS 32

struct fake_module {
  unsigned long magic;
  char *image;
  size_t nbytes;
  int nkernels;
  fake_kernel *kernels[FAKE_MAX_KERNELS];
};

static struct {
  char compiler_id[64];
  int compile_calls;
  bool compile_fail;
  int compile_sleep_ms;
  char lower_prefix[32];
  /* the last compile job */
  int job_noptions, job_nheaders, job_nexpressions;
  char job_expr[8][160];
  char job_option0[64];
  char job_header0[64];
  char job_program[64];
  char *job_source;           /* the last source, whole (malloc'd) */
  /* modules */
  int loads, unloads, live;
  bool load_fail;
  char last_image[4096];
  size_t last_image_size;
  /* kernels */
  int kernel_gets;
  char last_get[256];
  int table_n;  /* what kernel_get reports: -1 = the device cannot tell */
  size_t table[QT_KERNEL_MAXPARAMS];
  /* launches */
  int launches;
  fake_kernel *launched;
  qt_launch_cfg cfg;
  int launched_n;
  unsigned char bytes[QT_KERNEL_MAXPARAMS][8];
} F;

static int fake_stream_token;
static qt_device_iface fake_iface;
static qt_device fake_dev;

/* "8,8,4": the layout kernel_get reports; NULL: nparams -1; "": no parameters. */
static void set_table(const char *sizes) {
  memset(F.table, 0, sizeof F.table);
  if (sizes == NULL) {
    F.table_n = -1;
    return;
  }
  F.table_n = 0;
  for (const char *p = sizes; *p;) {
    char *end;
    unsigned long v = strtoul(p, &end, 10);
    if (end == p) break;
    F.table[F.table_n++] = (size_t)v;
    p = *end == ',' ? end + 1 : end;
  }
}

static void *fake_native_stream(qt_device *dev) {
  (void)dev;
  return &fake_stream_token;
}

static int fake_compiler_id(qt_device *dev, char *buf, size_t len, qt_err *err) {
  (void)dev;
  (void)err;
  snprintf(buf, len, "%s", F.compiler_id);
  return 0;
}

static void fake_sleep_ms(int ms) {
  struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static int fake_compile(qt_device *dev, const qt_compile_job *job, qt_compile_result *out,
                        qt_err *err) {
  (void)dev;
  F.compile_calls++;
  F.job_noptions = job->noptions;
  F.job_nheaders = job->nheaders;
  F.job_nexpressions = job->nexpressions;
  snprintf(F.job_program, sizeof F.job_program, "%s", job->program ? job->program : "(null)");
  snprintf(F.job_option0, sizeof F.job_option0, "%s", job->noptions > 0 ? job->options[0] : "");
  snprintf(F.job_header0, sizeof F.job_header0, "%s",
           job->nheaders > 0 ? job->header_names[0] : "");
  for (int i = 0; i < 8; i++)
    snprintf(F.job_expr[i], sizeof F.job_expr[i], "%s",
             i < job->nexpressions ? job->expressions[i] : "");
  free(F.job_source);
  F.job_source = strdup(job->source);
  if (F.compile_sleep_ms > 0) fake_sleep_ms(F.compile_sleep_ms);
  if (F.compile_fail)
    return qt_errorf(err, "kernel: kernel.cu: fake compile error: expected a ';'");
  memset(out, 0, sizeof *out);
  size_t n = strlen(job->source);
  out->image = malloc(n + 6);
  out->lowered = calloc((size_t)job->nexpressions + 1, sizeof(char *));
  if (out->image == NULL || out->lowered == NULL) {
    free(out->image);
    free(out->lowered);
    memset(out, 0, sizeof *out);
    return qt_errorf(err, "kernel: fake compile: out of memory");
  }
  memcpy(out->image, "IMAGE:", 6);
  memcpy(out->image + 6, job->source, n);
  out->image_size = n + 6;
  out->nlowered = job->nexpressions;
  for (int i = 0; i < job->nexpressions; i++) {
    size_t len = strlen(F.lower_prefix) + strlen(job->expressions[i]) + 1;
    out->lowered[i] = malloc(len);
    if (out->lowered[i] == NULL) {
      qt_compile_result_free(out);
      return qt_errorf(err, "kernel: fake compile: out of memory");
    }
    snprintf(out->lowered[i], len, "%s%s", F.lower_prefix, job->expressions[i]);
  }
  return 0;
}

static int fake_module_load(qt_device *dev, const void *image, size_t nbytes, void **module,
                            qt_err *err) {
  (void)dev;
  if (F.load_fail) return qt_errorf(err, "module: fake load error: invalid image");
  fake_module *m = calloc(1, sizeof *m);
  if (m == NULL || (m->image = malloc(nbytes + 1)) == NULL) {
    free(m);
    return qt_errorf(err, "module: fake load: out of memory");
  }
  memcpy(m->image, image, nbytes);
  m->image[nbytes] = '\0';
  m->nbytes = nbytes;
  m->magic = FAKE_MODULE_MAGIC;
  F.loads++;
  F.live++;
  F.last_image_size = nbytes < sizeof F.last_image ? nbytes : sizeof F.last_image;
  memcpy(F.last_image, image, F.last_image_size);
  *module = m;
  return 0;
}

static void fake_module_unload(qt_device *dev, void *module) {
  (void)dev;
  fake_module *m = module;
  if (m == NULL || m->magic != FAKE_MODULE_MAGIC) {
    fail(__LINE__, "module_unload got %p, which is not a live fake module", module);
    return;
  }
  for (int i = 0; i < m->nkernels; i++) free(m->kernels[i]);
  m->magic = 0;
  free(m->image);
  free(m);
  F.unloads++;
  F.live--;
}

/* An image "NAMES:a,b,c" defines the kernels a, b and c; a compiled one none. */
static int fake_module_kernels(qt_device *dev, void *module, void (*each)(const char *, void *),
                               void *arg, qt_err *err) {
  (void)dev;
  (void)err;
  fake_module *m = module;
  if (strncmp(m->image, "NAMES:", 6) != 0) return 0;
  char name[256];
  for (const char *p = m->image + 6; *p;) {
    size_t n = strcspn(p, ",");
    snprintf(name, sizeof name, "%.*s", (int)n, p);
    each(name, arg);
    p += n;
    if (*p == ',') p++;
  }
  return 0;
}

static int fake_kernel_get(qt_device *dev, void *module, const char *name, void **kernel,
                           qt_kernel_info *info, qt_err *err) {
  (void)dev;
  fake_module *m = module;
  F.kernel_gets++;
  snprintf(F.last_get, sizeof F.last_get, "%s", name);
  if (m == NULL || m->magic != FAKE_MODULE_MAGIC)
    return qt_errorf(err, "kernel: fake kernel_get on a module that is not live");
  if (strncmp(name, "missing", 7) == 0 || m->nkernels == FAKE_MAX_KERNELS)
    return qt_errorf(err, "kernel: no kernel '%s' in the module: named symbol not found", name);
  fake_kernel *k = calloc(1, sizeof *k);
  if (k == NULL) return qt_errorf(err, "kernel: fake kernel_get: out of memory");
  k->module = m;
  snprintf(k->name, sizeof k->name, "%s", name);
  k->nparams = F.table_n;
  memcpy(k->sizes, F.table, sizeof k->sizes);
  m->kernels[m->nkernels++] = k;
  memset(info, 0, sizeof *info);
  info->nparams = F.table_n;
  memcpy(info->param_size, F.table, sizeof info->param_size);
  info->num_regs = 32;
  info->max_threads = 1024;
  info->static_shared = 512;
  info->max_dynamic_shared = 48 * 1024;
  info->max_block[0] = 1024, info->max_block[1] = 1024, info->max_block[2] = 64;
  info->max_grid[0] = 2147483647u, info->max_grid[1] = 65535, info->max_grid[2] = 65535;
  *kernel = k;
  return 0;
}

static int fake_launch(qt_device *dev, void *kernel, const qt_launch_cfg *cfg, void **args,
                       qt_err *err) {
  (void)dev;
  fake_kernel *k = kernel;
  if (k == NULL || k->module == NULL || k->module->magic != FAKE_MODULE_MAGIC)
    return qt_errorf(err, "launch: fake launch of a kernel whose module is gone");
  F.launches++;
  F.launched = k;
  F.cfg = *cfg;
  F.launched_n = k->nparams > 0 ? k->nparams : 0;
  memset(F.bytes, 0xAB, sizeof F.bytes);
  for (int i = 0; i < F.launched_n; i++) {
    size_t n = k->sizes[i] < 8 ? k->sizes[i] : 8;
    memcpy(F.bytes[i], args[i], n);
  }
  return 0;
}

static void fake_init(void) {
  fake_iface = *qt_cpu_iface();
  fake_iface.native_stream = fake_native_stream;
  fake_iface.compiler_id = fake_compiler_id;
  fake_iface.compile = fake_compile;
  fake_iface.module_load = fake_module_load;
  fake_iface.module_unload = fake_module_unload;
  fake_iface.module_kernels = fake_module_kernels;
  fake_iface.kernel_get = fake_kernel_get;
  fake_iface.launch = fake_launch;
  fake_dev = *qt_cpu_device();
  fake_dev.iface = &fake_iface;
  snprintf(fake_dev.name, sizeof fake_dev.name, "fake:0");
  snprintf(F.compiler_id, sizeof F.compiler_id, "fake 1.0 sm_00");
  set_table(NULL);
}

/* ================================================================== helpers */

static qt_kernel_arg AT(const qt_tensor *t) {
  qt_kernel_arg a;
  memset(&a, 0, sizeof a);
  a.tensor = t;
  return a;
}

static qt_kernel_arg AI(int64_t v) {
  qt_kernel_arg a;
  memset(&a, 0, sizeof a);
  a.value = qt_scalar_i(v);
  return a;
}

/* A Lua float: both fields filled, as the binding does (.i only where it is defined). */
static qt_kernel_arg AF(double f) {
  qt_kernel_arg a;
  memset(&a, 0, sizeof a);
  a.value.f = f;
  a.value.i = f >= -9.2e18 && f <= 9.2e18 ? (int64_t)f : 0;
  a.is_float = true;
  return a;
}

static qt_kernel_arg AB(bool b) {
  qt_kernel_arg a;
  memset(&a, 0, sizeof a);
  a.value = qt_scalar_i(b ? 1 : 0);
  a.is_bool = true;
  return a;
}

static qt_launch_cfg CFG(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                         unsigned bz, size_t shared) {
  qt_launch_cfg c;
  memset(&c, 0, sizeof c);
  c.grid[0] = gx, c.grid[1] = gy, c.grid[2] = gz;
  c.block[0] = bx, c.block[1] = by, c.block[2] = bz;
  c.shared = shared;
  return c;
}

static const char *kind_name(qt_param_kind k) {
  static const char *const names[] = { "POINTER", "I32", "U32", "I64", "U64", "F32", "F64",
                                       "BOOL", "F16", "BF16" };
  return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

static void check_param_at(int line, const qt_kernel *k, int i, qt_param_kind kind, int dtype,
                           bool is_const, const char *type, const char *name) {
  const qt_param *p = qt_kernel_param(k, i);
  if (p == NULL) {
    fail(line, "kernel '%s': no parameter %d (nparams %d)", qt_kernel_name(k), i + 1,
         qt_kernel_nparams(k));
    return;
  }
  if (p->kind != kind || p->dtype != dtype || p->is_const != is_const ||
      strcmp(p->type, type) != 0 || strcmp(p->name, name) != 0)
    fail(line, "kernel '%s' parameter %d: expected kind %s dtype %d const %d type '%s' name "
         "'%s', got kind %s dtype %d const %d type '%s' name '%s'", qt_kernel_name(k), i + 1,
         kind_name(kind), dtype, is_const, type, name, kind_name(p->kind), p->dtype,
         p->is_const, p->type, p->name);
}
#define CHECK_PARAM(k, i, kind, dtype, is_const, type, name) \
  check_param_at(__LINE__, k, i, kind, dtype, is_const, type, name)

#define ANY QT_PARAM_ANY_DTYPE
#define NONE QT_PARAM_NO_DTYPE

/* Compiles with the layout `sizes`; NULL (and a FAIL) on an error. */
static qt_kernel *compile_at(int line, qt_ctx *ctx, const char *src, const char *name,
                             const qt_kernel_opts *opts, const char *sizes) {
  set_table(sizes);
  qt_kernel *k = NULL;
  int rc = qt_kernel_compile(ctx, &k, &fake_dev, src, name, opts);
  if (rc != 0 || k == NULL) {
    fail(line, "compiling '%s': rc %d: '%s'", name, rc, ctx->err.msg);
    return NULL;
  }
  return k;
}
#define COMPILE(ctx, src, name, opts, sizes) compile_at(__LINE__, ctx, src, name, opts, sizes)

/* A compile that must fail before any compile call, with every needle in the message. */
static void compile_fails_at(int line, qt_ctx *ctx, const char *src, const char *name,
                             const qt_kernel_opts *opts, const char *const *needles) {
  set_table(NULL);
  qt_kernel *k = (qt_kernel *)&k;
  int before = F.compile_calls;
  char what[200];
  snprintf(what, sizeof what, "compiling '%s'", name);
  int rc = qt_kernel_compile(ctx, &k, &fake_dev, src, name, opts);
  check_error_at(line, what, rc, ctx, needles);
  if (k != NULL) fail(line, "%s: *out is not NULL after the error", what);
  if (rc == 0) qt_kernel_release(k);
  if (F.compile_calls != before) fail(line, "%s: the compiler ran before the error", what);
}
#define COMPILE_FAILS(ctx, src, name, opts, ...) \
  compile_fails_at(__LINE__, ctx, src, name, opts, (const char *const[]){__VA_ARGS__, NULL})

static int launch_args(qt_ctx *ctx, qt_kernel *k, qt_launch_cfg cfg, int n,
                       const qt_kernel_arg *args) {
  return qt_kernel_launch(ctx, k, &cfg, n, args);
}

/* A launch that must fail, with every needle in the message, and never reach the fake. */
static void launch_fails_at(int line, const char *what, qt_ctx *ctx, qt_kernel *k,
                            qt_launch_cfg cfg, int n, const qt_kernel_arg *args,
                            const char *const *needles) {
  int before = F.launches;
  int rc = qt_kernel_launch(ctx, k, &cfg, n, args);
  check_error_at(line, what, rc, ctx, needles);
  if (F.launches != before) fail(line, "%s: the device's launch was called on an error", what);
}
#define LAUNCH_FAILS(what, ctx, k, cfg, n, args, ...) \
  launch_fails_at(__LINE__, what, ctx, k, cfg, n, args, (const char *const[]){__VA_ARGS__, NULL})

static bool bytes_are(int i, const void *want, size_t n) {
  return memcmp(F.bytes[i], want, n) == 0;
}

/* The pointer parameter i reached the device as. */
static void *bytes_ptr(int i) {
  void *p;
  memcpy(&p, F.bytes[i], sizeof p);
  return p;
}

static void check_bytes_at(int line, const char *what, int i, const void *want, size_t n) {
  if (bytes_are(i, want, n)) return;
  char got[40] = "", exp[40] = "";
  for (size_t b = 0; b < n && b < 8; b++) {
    snprintf(got + strlen(got), sizeof got - strlen(got), "%02x", F.bytes[i][b]);
    snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%02x", ((const unsigned char *)want)[b]);
  }
  fail(line, "%s: parameter %d reached the device as %s, expected %s", what, i + 1, got, exp);
}
#define CHECK_BYTES(what, i, value)                                  \
  do {                                                               \
    __typeof__(value) v_ = (value);                                  \
    check_bytes_at(__LINE__, what, i, &v_, sizeof v_);               \
  } while (0)

static void *data_ptr(const qt_tensor *t) {
  return (char *)t->storage->data + t->offset * (int64_t)qt_elsize(t->dtype);
}

static qt_tensor make_tensor_at(int line, qt_ctx *ctx, qt_device *dev, qt_dtype dtype, int ndim,
                                int64_t a, int64_t b) {
  qt_tensor t;
  qt_tensor_init(&t);
  int64_t size[2] = { a, b };
  if (qt_empty(ctx, &t, dev, dtype, ndim, size) != 0)
    fail(line, "qt_empty: '%s'", ctx->err.msg);
  return t;
}
#define TENSOR(ctx, dev, dtype, ndim, a, b) make_tensor_at(__LINE__, ctx, dev, dtype, ndim, a, b)

/* ---- files */

static char scratch[512];

static char *read_whole(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  char *buf = NULL;
  size_t cap = 0, len = 0;
  for (;;) {
    if (len == cap) {
      cap = cap ? cap * 2 : 4096;
      char *grown = realloc(buf, cap);
      if (grown == NULL) break;
      buf = grown;
    }
    size_t r = fread(buf + len, 1, cap - len, f);
    len += r;
    if (r == 0) break;
  }
  fclose(f);
  *n = len;
  return buf;
}

static bool write_whole(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (f == NULL) return false;
  bool ok = fwrite(data, 1, n, f) == n;
  return fclose(f) == 0 && ok;
}

static void rm_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    if (d != NULL) {
      struct dirent *e;
      while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char child[1024];
        snprintf(child, sizeof child, "%s/%s", path, e->d_name);
        rm_tree(child);
      }
      closedir(d);
    }
    rmdir(path);
  } else {
    unlink(path);
  }
}

/* Names in dir that end with suffix (or start with prefix when suffix is NULL). */
static int count_entries(const char *dir, const char *prefix, const char *suffix, char *first,
                         size_t first_len) {
  DIR *d = opendir(dir);
  if (d == NULL) return 0;
  int count = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    bool match = suffix != NULL ? n > strlen(suffix) && strcmp(e->d_name + n - strlen(suffix), suffix) == 0
                                : strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (!match) continue;
    if (count == 0 && first != NULL) snprintf(first, first_len, "%s/%s", dir, e->d_name);
    count++;
  }
  closedir(d);
  return count;
}

static int count_qkc(const char *dir, char *first, size_t len) {
  return count_entries(dir, NULL, ".qkc", first, len);
}
static int count_tmp(const char *dir) { return count_entries(dir, ".tmp.", NULL, NULL, 0); }

/* XDG_CACHE_HOME = scratch/<name>; the cache directory into kdir. */
static void use_cache_home(const char *name, char *kdir, size_t len) {
  char xdg[700];
  snprintf(xdg, sizeof xdg, "%s/%s", scratch, name);
  mkdir(xdg, 0700);
  setenv("XDG_CACHE_HOME", xdg, 1);
  snprintf(kdir, len, "%s/qlua/kernels", xdg);
}

static qt_ctx *new_ctx(void) {
  qt_ctx *ctx = qt_ctx_new();
  if (ctx == NULL) {
    printf("FAIL: qt_ctx_new returned NULL\n");
    exit(1);
  }
  return ctx;
}

/* ================================================================== 1. signatures from source */

static const char *SRC_PLAIN =
    "// decoys: __global__ void k(struct Nope n)\n"
    "/* __global__ void k(double ***bad) and a ) */\n"
    "#include <stdint.h>\n"
    "static const char *msg = \"__global__ void k(char c) \\\" still a string\";\n"
    "static const char quote = '\"';\n"
    "__device__ float twice(float v) { return 2 * v; }  // not a kernel: k(\n"
    "extern \"C\" __global__ void k(const float *__restrict__ x, float *y, int n, double a,\n"
    "                               long long m, unsigned u, bool b, void *any) {\n"
    "  /* body: k(1) */ if (n > 0 && b) y[0] = twice(x[0]) * (float)a + m + u;\n"
    "}\n";
static const char *SIZES_PLAIN = "8,8,4,8,8,4,1,8";

static void test_signatures(void) {
  qt_ctx *ctx = new_ctx();

  /* the plain kernel, among decoys in comments and strings */
  int compiles = F.compile_calls;
  qt_kernel *k = COMPILE(ctx, SRC_PLAIN, "k", NULL, SIZES_PLAIN);
  if (k != NULL) {
    CHECK(F.compile_calls == compiles + 1, "compile calls: %d, expected %d", F.compile_calls,
          compiles + 1);
    CHECK(qt_kernel_nparams(k) == 8, "k: %d parameters, expected 8", qt_kernel_nparams(k));
    CHECK_PARAM(k, 0, QT_PARAM_POINTER, QT_F32, true, "const float *", "x");
    CHECK_PARAM(k, 1, QT_PARAM_POINTER, QT_F32, false, "float *", "y");
    CHECK_PARAM(k, 2, QT_PARAM_I32, NONE, false, "int", "n");
    CHECK_PARAM(k, 3, QT_PARAM_F64, NONE, false, "double", "a");
    CHECK_PARAM(k, 4, QT_PARAM_I64, NONE, false, "long long", "m");
    CHECK_PARAM(k, 5, QT_PARAM_U32, NONE, false, "unsigned", "u");
    CHECK_PARAM(k, 6, QT_PARAM_BOOL, NONE, false, "bool", "b");
    CHECK_PARAM(k, 7, QT_PARAM_POINTER, ANY, false, "void *", "any");
    CHECK(qt_kernel_param(k, 8) == NULL && qt_kernel_param(k, -1) == NULL,
          "qt_kernel_param out of range gave a parameter");
    CHECK(strcmp(qt_kernel_name(k), "k") == 0, "name '%s'", qt_kernel_name(k));
    CHECK(qt_kernel_device(k) == &fake_dev, "qt_kernel_device is not the fake device");
    CHECK(F.job_nexpressions == 1 && strcmp(F.job_expr[0], "k") == 0,
          "the compile job's expressions: %d, first '%s' (expected 1, 'k')", F.job_nexpressions,
          F.job_expr[0]);
    CHECK(strcmp(F.job_program, "kernel.cu") == 0, "program name '%s'", F.job_program);
    CHECK(strcmp(F.last_get, "k") == 0, "kernel_get asked for '%s'", F.last_get);
    CHECK(F.last_image_size == strlen(SRC_PLAIN) + 6 && memcmp(F.last_image, "IMAGE:", 6) == 0,
          "module_load got %zu bytes, expected the compiled image", F.last_image_size);
    const qt_kernel_info *info = qt_kernel_limits(k);
    CHECK(info->max_threads == 1024 && info->max_dynamic_shared == 48 * 1024,
          "limits: %d threads, %zu shared", info->max_threads, info->max_dynamic_shared);
    qt_kernel_release(k);
  }

  /* other spellings, unnamed parameters, const after the star, int32_t/int64_t/size_t */
  static const char *SRC_SPELL =
      "extern \"C\" __global__ void sp(float * const p, const double *, int32_t *i32,\n"
      "  int64_t *i64, unsigned int, unsigned long long ull, size_t sz, signed s,\n"
      "  long int li, const int c, unsigned char *bytes, __half *h) {}\n";
  k = COMPILE(ctx, SRC_SPELL, "sp", NULL, "8,8,8,8,4,8,8,4,8,4,8,8");
  if (k != NULL) {
    CHECK(qt_kernel_nparams(k) == 12, "sp: %d parameters", qt_kernel_nparams(k));
    CHECK_PARAM(k, 0, QT_PARAM_POINTER, QT_F32, false, "float *", "p");
    CHECK_PARAM(k, 1, QT_PARAM_POINTER, QT_F64, true, "const double *", "");
    CHECK_PARAM(k, 2, QT_PARAM_POINTER, QT_I32, false, "int32_t *", "i32");
    CHECK_PARAM(k, 3, QT_PARAM_POINTER, QT_I64, false, "int64_t *", "i64");
    CHECK_PARAM(k, 4, QT_PARAM_U32, NONE, false, "unsigned int", "");
    CHECK_PARAM(k, 5, QT_PARAM_U64, NONE, false, "unsigned long long", "ull");
    CHECK_PARAM(k, 6, QT_PARAM_U64, NONE, false, "size_t", "sz");
    CHECK_PARAM(k, 7, QT_PARAM_I32, NONE, false, "signed", "s");
    CHECK_PARAM(k, 8, QT_PARAM_I64, NONE, false, "long int", "li");
    CHECK_PARAM(k, 9, QT_PARAM_I32, NONE, false, "int", "c");
    CHECK_PARAM(k, 10, QT_PARAM_POINTER, QT_U8, false, "unsigned char *", "bytes");
    CHECK_PARAM(k, 11, QT_PARAM_POINTER, QT_F16, false, "__half *", "h");
    qt_kernel_release(k);
  }

  /* the 16-bit floats: pointers bind float16/bfloat16 tensors, scalars are
  ** numbers; cuda_fp16.h's typedef half and cuda_bf16.h's nv_bfloat16 too */
  static const char *SRC_HALF =
      "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
      "extern \"C\" __global__ void hk(const __half *__restrict__ x, half *y, __nv_bfloat16 *b,\n"
      "  const nv_bfloat16 *c, __half s, __nv_bfloat16 t, half u, const __half v) {}\n";
  k = COMPILE(ctx, SRC_HALF, "hk", NULL, "8,8,8,8,2,2,2,2");
  if (k != NULL) {
    CHECK(qt_kernel_nparams(k) == 8, "hk: %d parameters", qt_kernel_nparams(k));
    CHECK_PARAM(k, 0, QT_PARAM_POINTER, QT_F16, true, "const __half *", "x");
    CHECK_PARAM(k, 1, QT_PARAM_POINTER, QT_F16, false, "half *", "y");
    CHECK_PARAM(k, 2, QT_PARAM_POINTER, QT_BF16, false, "__nv_bfloat16 *", "b");
    CHECK_PARAM(k, 3, QT_PARAM_POINTER, QT_BF16, true, "const nv_bfloat16 *", "c");
    CHECK_PARAM(k, 4, QT_PARAM_F16, NONE, false, "__half", "s");
    CHECK_PARAM(k, 5, QT_PARAM_BF16, NONE, false, "__nv_bfloat16", "t");
    CHECK_PARAM(k, 6, QT_PARAM_F16, NONE, false, "half", "u");
    CHECK_PARAM(k, 7, QT_PARAM_F16, NONE, false, "__half", "v");
    qt_kernel_release(k);
  }
  /* a 16-bit scalar whose compiled size is not 2 bytes is refused like any other */
  set_table("8,4");
  qt_kernel *wrong = NULL;
  int wrc = qt_kernel_compile(ctx, &wrong, &fake_dev,
                              "extern \"C\" __global__ void hw(float *x, __half s) {}", "hw", NULL);
  CHECK_ERROR("a 4-byte __half", wrc, ctx, "'hw' parameter 2 is 4 bytes in the compiled code, "
              "but its signature says __half (2 bytes)");
  if (wrc == 0) qt_kernel_release(wrong);

  /* east const, comments inside the list, __launch_bounds__ before the return type */
  static const char *SRC_STYLE =
      "extern \"C\" __global__ __launch_bounds__(512) void st(float const *in /* (a, b) */,\n"
      "    double *out, // the result, (x, y)\n"
      "    int n) {}\n";
  k = COMPILE(ctx, SRC_STYLE, "st", NULL, "8,8,4");
  if (k != NULL) {
    CHECK(qt_kernel_nparams(k) == 3, "st: %d parameters", qt_kernel_nparams(k));
    CHECK_PARAM(k, 0, QT_PARAM_POINTER, QT_F32, true, "const float *", "in");
    CHECK_PARAM(k, 1, QT_PARAM_POINTER, QT_F64, false, "double *", "out");
    CHECK_PARAM(k, 2, QT_PARAM_I32, NONE, false, "int", "n");
    qt_kernel_release(k);
  }

  /* no parameters: () and (void) */
  k = COMPILE(ctx, "extern \"C\" __global__ void z0() {}\n", "z0", NULL, "");
  if (k != NULL) {
    CHECK(qt_kernel_nparams(k) == 0, "z0(): %d parameters", qt_kernel_nparams(k));
    qt_kernel_release(k);
  }
  k = COMPILE(ctx, "extern \"C\" __global__ void z1(void) {}\n", "z1", NULL, "");
  if (k != NULL) {
    CHECK(qt_kernel_nparams(k) == 0, "z1(void): %d parameters", qt_kernel_nparams(k));
    qt_kernel_release(k);
  }

  /* __launch_bounds__ between the return type and the name */
  static const char *SRC_LB =
      "extern \"C\" __global__ void __launch_bounds__(256) lb(float *x, int n) {}\n"
      "extern \"C\" __global__ void __launch_bounds__(128, 4) lb2(double *x) {}\n";
  k = COMPILE(ctx, SRC_LB, "lb", NULL, "8,4");
  if (k != NULL) {
    CHECK(qt_kernel_nparams(k) == 2, "lb: %d parameters", qt_kernel_nparams(k));
    CHECK_PARAM(k, 0, QT_PARAM_POINTER, QT_F32, false, "float *", "x");
    CHECK_PARAM(k, 1, QT_PARAM_I32, NONE, false, "int", "n");
    qt_kernel_release(k);
  }
  k = COMPILE(ctx, SRC_LB, "lb2", NULL, "8");
  if (k != NULL) {
    CHECK(qt_kernel_nparams(k) == 1, "lb2: %d parameters", qt_kernel_nparams(k));
    CHECK_PARAM(k, 0, QT_PARAM_POINTER, QT_F64, false, "double *", "x");
    qt_kernel_release(k);
  }

  /* several kernels in one source: the one named, not a prefix or a caller of it */
  static const char *SRC_MANY =
      "extern \"C\" __global__ void second(double *b, int n);\n"
      "extern \"C\" __global__ void first(float *a) { }\n"
      "extern \"C\" __global__ void secondary(long long *s) {}\n"
      "extern \"C\" __global__ void caller(int *c) { /* second(c) */ }\n"
      "extern \"C\" __global__ void second(double *b, int n) { b[n] = 0; }\n"
      "extern \"C\" __global__ void third(unsigned long *d, float f) {}\n";
  const struct { const char *name, *sizes; int n; qt_param_kind kind0; int dtype0; } many[] = {
    { "first", "8", 1, QT_PARAM_POINTER, QT_F32 },
    { "second", "8,4", 2, QT_PARAM_POINTER, QT_F64 },
    { "secondary", "8", 1, QT_PARAM_POINTER, QT_I64 },
    { "caller", "8", 1, QT_PARAM_POINTER, QT_I32 },
    { "third", "8,4", 2, QT_PARAM_POINTER, NONE },
  };
  for (size_t i = 0; i < sizeof many / sizeof many[0]; i++) {
    k = COMPILE(ctx, SRC_MANY, many[i].name, NULL, many[i].sizes);
    if (k == NULL) continue;
    const qt_param *p = qt_kernel_param(k, 0);
    CHECK(qt_kernel_nparams(k) == many[i].n && p != NULL && p->kind == many[i].kind0 &&
              p->dtype == many[i].dtype0,
          "%s: %d parameters, first kind %s dtype %d (expected %d, %s, %d)", many[i].name,
          qt_kernel_nparams(k), p ? kind_name(p->kind) : "-", p ? p->dtype : 0, many[i].n,
          kind_name(many[i].kind0), many[i].dtype0);
    CHECK(strcmp(F.last_get, many[i].name) == 0, "kernel_get asked for '%s', expected '%s'",
          F.last_get, many[i].name);
    qt_kernel_release(k);
  }
  k = COMPILE(ctx, SRC_MANY, "third", NULL, "8,4");
  if (k != NULL) {
    CHECK_PARAM(k, 0, QT_PARAM_POINTER, NONE, false, "unsigned long *", "d");
    CHECK_PARAM(k, 1, QT_PARAM_F32, NONE, false, "float", "f");
    qt_kernel_release(k);
  }

  /* templates: the name's arguments replace the template parameters */
  static const char *SRC_TMPL =
      "template <typename T> __device__ T sq(T v) { return v * v; }\n"
      "template <typename T>\n"
      "__global__ void axpy(T *x, T a, int n) { x[0] = sq(a); }\n"
      "template <typename T, int N> __global__ void vec(const T *in, T *out) {}\n";
  snprintf(F.lower_prefix, sizeof F.lower_prefix, "_Zlow_");
  k = COMPILE(ctx, SRC_TMPL, "axpy<float>", NULL, "8,4,4");
  if (k != NULL) {
    CHECK(qt_kernel_nparams(k) == 3, "axpy<float>: %d parameters", qt_kernel_nparams(k));
    CHECK_PARAM(k, 0, QT_PARAM_POINTER, QT_F32, false, "float *", "x");
    CHECK_PARAM(k, 1, QT_PARAM_F32, NONE, false, "float", "a");
    CHECK_PARAM(k, 2, QT_PARAM_I32, NONE, false, "int", "n");
    CHECK(strcmp(F.job_expr[0], "axpy<float>") == 0, "expression '%s'", F.job_expr[0]);
    CHECK(strcmp(F.last_get, "_Zlow_axpy<float>") == 0,
          "kernel_get asked for '%s', expected the lowered name '_Zlow_axpy<float>'", F.last_get);
    CHECK(strcmp(qt_kernel_name(k), "axpy<float>") == 0, "name '%s'", qt_kernel_name(k));
    qt_kernel_release(k);
  }
  k = COMPILE(ctx, SRC_TMPL, "axpy<double>", NULL, "8,8,4");
  if (k != NULL) {
    CHECK_PARAM(k, 0, QT_PARAM_POINTER, QT_F64, false, "double *", "x");
    CHECK_PARAM(k, 1, QT_PARAM_F64, NONE, false, "double", "a");
    CHECK_PARAM(k, 2, QT_PARAM_I32, NONE, false, "int", "n");
    qt_kernel_release(k);
  }
  /* the user's own expressions, the kernel among them (not added twice) */
  const char *exprs[] = { "axpy<int>", "axpy<long long>" };
  qt_kernel_opts eo;
  memset(&eo, 0, sizeof eo);
  eo.nexpressions = 2;
  eo.expressions = exprs;
  k = COMPILE(ctx, SRC_TMPL, "axpy<long long>", &eo, "8,8,4");
  if (k != NULL) {
    CHECK(F.job_nexpressions == 2 && strcmp(F.job_expr[1], "axpy<long long>") == 0,
          "expressions: %d ('%s', '%s'), expected the user's two", F.job_nexpressions,
          F.job_expr[0], F.job_expr[1]);
    CHECK(strcmp(F.last_get, "_Zlow_axpy<long long>") == 0, "kernel_get asked for '%s'",
          F.last_get);
    CHECK_PARAM(k, 0, QT_PARAM_POINTER, QT_I64, false, "long long *", "x");
    CHECK_PARAM(k, 1, QT_PARAM_I64, NONE, false, "long long", "a");
    qt_kernel_release(k);
  }
  k = COMPILE(ctx, SRC_TMPL, "vec<double, 4>", NULL, "8,8");
  if (k != NULL) {
    CHECK_PARAM(k, 0, QT_PARAM_POINTER, QT_F64, true, "const double *", "in");
    CHECK_PARAM(k, 1, QT_PARAM_POINTER, QT_F64, false, "double *", "out");
    CHECK(strcmp(F.last_get, "_Zlow_vec<double, 4>") == 0, "kernel_get asked for '%s'",
          F.last_get);
    qt_kernel_release(k);
  }
  F.lower_prefix[0] = '\0';

  /* types Lua cannot pass: the message names the parameter; nothing is compiled */
  int rc0;
  COMPILE_FAILS(ctx, "struct Pair { int a, b; };\n"
                     "extern \"C\" __global__ void s1(float *x, struct Pair p) {}\n",
                "s1", NULL, "kernel: parameter 2 (", "struct Pair p)", "type 'Pair'",
                "cannot be passed from Lua");
  rc0 = qt_kernel_compile(ctx, &k, &fake_dev, "extern \"C\" __global__ void s0(float *x, float **pp) {}", "s0", NULL);
  CHECK(rc0 != 0 && strstr(ctx->err.msg, "parameter 2 (float **pp)") != NULL,
            "source 'extern \"C\" __global__ void s0(float *x, float **pp)': expected the "
            "message to quote 'parameter 2 (float **pp)', got '%.80s' (the declaration after a "
            "comma is quoted with its leading blank)", ctx->err.msg);
  COMPILE_FAILS(ctx, "extern \"C\" __global__ void s2(float *x, float **pp) {}\n", "s2", NULL,
                "parameter 2 (", "float **pp)", "'float **'");
  COMPILE_FAILS(ctx, "template <typename T> __global__ void s3(T **pp) {}\n", "s3<float>", NULL,
                "parameter 1 (T **pp)", "'float **'");
  COMPILE_FAILS(ctx, "extern \"C\" __global__ void s4(int n, float &r) {}\n", "s4", NULL,
                "parameter 2 (", "float &r)", "references");
  COMPILE_FAILS(ctx, "extern \"C\" __global__ void s5(float x[4]) {}\n", "s5", NULL,
                "parameter 1 (float x[4])", "arrays");
  COMPILE_FAILS(ctx, "extern \"C\" __global__ void s6(char c) {}\n", "s6", NULL,
                "parameter 1 (char c)", "type 'char'");
  COMPILE_FAILS(ctx, "template <typename T> __global__ void s7(T *x) {}\n", "s7", NULL,
                "parameter 1 (T *x)", "'T *'");

  /* no such kernel, a macro declaring it: the message points at opts.signature */
  COMPILE_FAILS(ctx, SRC_PLAIN, "nothere", NULL, "kernel: no __global__ function 'nothere'",
                "opts.signature");
  static const char *SRC_MACRO =
      "#define KERNEL(name) extern \"C\" __global__ void name\n"
      "KERNEL(mk)(float *out, const float *in, int n) { out[0] = in[0]; }\n";
  COMPILE_FAILS(ctx, SRC_MACRO, "mk", NULL, "no __global__ function 'mk'", "opts.signature");
  COMPILE_FAILS(ctx, SRC_PLAIN, "", NULL, "kernel: no kernel name");
  char longname[200];
  memset(longname, 'a', sizeof longname - 1);
  longname[sizeof longname - 1] = '\0';
  COMPILE_FAILS(ctx, SRC_PLAIN, longname, NULL, "is too long");

  /* the signature string overrides the source */
  qt_kernel_opts so;
  memset(&so, 0, sizeof so);
  so.signature = "float *out, const float *in, int n";
  k = COMPILE(ctx, SRC_MACRO, "mk", &so, "8,8,4");
  if (k != NULL) {
    CHECK(qt_kernel_nparams(k) == 3, "mk: %d parameters", qt_kernel_nparams(k));
    CHECK_PARAM(k, 0, QT_PARAM_POINTER, QT_F32, false, "float *", "out");
    CHECK_PARAM(k, 1, QT_PARAM_POINTER, QT_F32, true, "const float *", "in");
    CHECK_PARAM(k, 2, QT_PARAM_I32, NONE, false, "int", "n");
    qt_kernel_release(k);
  }
  so.signature = "double *y, long long n";  /* over a kernel the source declares otherwise */
  k = COMPILE(ctx, "extern \"C\" __global__ void ov(float *x, int n) {}\n", "ov", &so, "8,8");
  if (k != NULL) {
    CHECK(qt_kernel_nparams(k) == 2, "ov with signature: %d parameters", qt_kernel_nparams(k));
    CHECK_PARAM(k, 0, QT_PARAM_POINTER, QT_F64, false, "double *", "y");
    CHECK_PARAM(k, 1, QT_PARAM_I64, NONE, false, "long long", "n");
    qt_kernel_release(k);
  }
  so.signature = "float *x, int &n";
  COMPILE_FAILS(ctx, SRC_MACRO, "mk", &so, "kernel: parameter 2 (", "int &n)", "references");
  so.signature = "";
  k = COMPILE(ctx, "#define K(n) extern \"C\" __global__ void n\nK(es)() {}\n", "es", &so, "");
  if (k != NULL) {
    CHECK(qt_kernel_nparams(k) == 0, "empty signature: %d parameters", qt_kernel_nparams(k));
    qt_kernel_release(k);
  }

  /* the compiled layout must agree with the signature */
  /* (each its own source: a module remembers the layout of a kernel it looked up) */
  set_table("8,4");
  qt_kernel *bad = NULL;
  int rc = qt_kernel_compile(ctx, &bad, &fake_dev, "extern \"C\" __global__ void l1(double *x) {}",
                             "l1", NULL);
  CHECK_ERROR("l1 with 2 compiled parameters", rc, ctx,
              "kernel: 'l1' has 2 parameters in the compiled code, but its signature lists 1");
  CHECK(bad == NULL, "*out set after an error");
  set_table("8,8");
  rc = qt_kernel_compile(ctx, &bad, &fake_dev, "extern \"C\" __global__ void l2(float *x, int n) {}",
                         "l2", NULL);
  CHECK_ERROR("l2 with an 8-byte n", rc, ctx,
              "kernel: 'l2' parameter 2 is 8 bytes in the compiled code, but its signature says "
              "int (4 bytes)");
  set_table("8,4,4");
  rc = qt_kernel_compile(ctx, &bad, &fake_dev,
                         "extern \"C\" __global__ void l3(float *x, int n, bool b) {}", "l3", NULL);
  CHECK_ERROR("l3 with a 4-byte bool", rc, ctx,
              "'l3' parameter 3 is 4 bytes in the compiled code, but its signature says bool (1 "
              "bytes)");
  /* a layout the device cannot tell is not checked */
  k = COMPILE(ctx, "extern \"C\" __global__ void l4(float *x, int n) {}", "l4", NULL, NULL);
  if (k != NULL) {
    CHECK(qt_kernel_nparams(k) == 2, "l4: %d parameters", qt_kernel_nparams(k));
    qt_kernel_release(k);
  }

  /* a compile error: the compiler's message, nothing cached */
  F.compile_fail = true;
  compiles = F.compile_calls;
  rc = qt_kernel_compile(ctx, &bad, &fake_dev, "extern \"C\" __global__ void ce(int n) {}", "ce",
                         NULL);
  CHECK_ERROR("a compile error", rc, ctx, "fake compile error");
  rc = qt_kernel_compile(ctx, &bad, &fake_dev, "extern \"C\" __global__ void ce(int n) {}", "ce",
                         NULL);
  CHECK_ERROR("a compile error again", rc, ctx, "fake compile error");
  CHECK(F.compile_calls == compiles + 2, "a failed compile was cached: %d calls, expected %d",
        F.compile_calls - compiles, 2);
  F.compile_fail = false;
  F.load_fail = true;
  rc = qt_kernel_compile(ctx, &bad, &fake_dev, "extern \"C\" __global__ void le(int n) {}", "le",
                         NULL);
  CHECK_ERROR("a module that does not load", rc, ctx, "fake load error");
  F.load_fail = false;
  k = COMPILE(ctx, "extern \"C\" __global__ void le(int n) {}", "le", NULL, "4");
  if (k != NULL) qt_kernel_release(k);

  /* the CPU device (and none) run no user code */
  rc = qt_kernel_compile(ctx, &bad, qt_cpu_device(), SRC_PLAIN, "k", NULL);
  CHECK_ERROR("compiling for the CPU", rc, ctx,
              "kernel: user kernels run on a GPU, and cpu is not one");
  rc = qt_kernel_compile(ctx, &bad, NULL, SRC_PLAIN, "k", NULL);
  CHECK_ERROR("compiling for no device", rc, ctx, "kernel: user kernels run on a GPU");

  /* ---- probes of the parser's corners (reported bugs are KNOWN_BUG) */
  /* C++14 digit separators are not character literals */
  set_table("8");
  rc = qt_kernel_compile(ctx, &bad, &fake_dev,
                         "constexpr int N = 1'000;\n"
                         "extern \"C\" __global__ void ds(float *x) { x[0] = N; }\n",
                         "ds", NULL);
  CHECK(rc == 0 && bad != NULL && qt_kernel_nparams(bad) == 1,
            "source \"constexpr int N = 1'000; extern \\\"C\\\" __global__ void ds(float *x)\": "
            "expected ds(float *x), got rc %d '%s' (kernel_strip takes the ' of 1'000 for a "
            "character literal and blanks the rest of the source)", rc, rc ? ctx->err.msg : "");
  qt_kernel_release(bad);
  bad = NULL;
  /* ( void ) with spaces */
  set_table("");
  rc = qt_kernel_compile(ctx, &bad, &fake_dev, "extern \"C\" __global__ void sv( void ) {}\n",
                         "sv", NULL);
  CHECK(rc == 0 && bad != NULL && qt_kernel_nparams(bad) == 0,
            "source 'extern \"C\" __global__ void sv( void ) {}': expected 0 parameters, got rc "
            "%d '%s' (kernel_parse_list matches \"void\" only without surrounding blanks)", rc,
            rc ? ctx->err.msg : "");
  qt_kernel_release(bad);
  bad = NULL;
  /* an attribute before the name (the parser's comment says attributes are skipped) */
  set_table("8");
  rc = qt_kernel_compile(ctx, &bad, &fake_dev,
                         "extern \"C\" __global__ void __attribute__((used)) at(float *x) {}\n",
                         "at", NULL);
  CHECK(rc == 0 && bad != NULL && qt_kernel_nparams(bad) == 1,
            "source 'extern \"C\" __global__ void __attribute__((used)) at(float *x)': expected "
            "at(float *x), got rc %d '%s' (only __launch_bounds__(...) is skipped)", rc,
            rc ? ctx->err.msg : "");
  qt_kernel_release(bad);
  bad = NULL;
  /* a default template argument */
  set_table("8,4");
  rc = qt_kernel_compile(ctx, &bad, &fake_dev,
                         "template <typename T = float> __global__ void dt(T *x, int n) {}\n",
                         "dt<double>", NULL);
  const qt_param *p0 = rc == 0 && bad != NULL ? qt_kernel_param(bad, 0) : NULL;
  CHECK(p0 != NULL && p0->dtype == QT_F64,
            "source 'template <typename T = float> __global__ void dt(T *x, int n)', name "
            "'dt<double>': expected x as double *, got rc %d '%s' type '%s' (the template "
            "parameter's name is taken as the last word, 'float', so T is not substituted)",
            rc, rc ? ctx->err.msg : "", p0 ? p0->type : "-");
  qt_kernel_release(bad);
  bad = NULL;
  /* a parameter called like a CUDA type */
  set_table("8,4");
  rc = qt_kernel_compile(ctx, &bad, &fake_dev,
                         "extern \"C\" __global__ void hn(float *half, int n) {}\n", "hn", NULL);
  CHECK(rc == 0 && bad != NULL && qt_kernel_nparams(bad) == 2,
            "source 'extern \"C\" __global__ void hn(float *half, int n)': expected 2 "
            "parameters, got rc %d '%s' (a name that is a type word is read as part of the type)",
            rc, rc ? ctx->err.msg : "");
  qt_kernel_release(bad);

  qt_ctx_release(ctx);
}

/* ================================================================== 2. mangled names */

typedef struct name_list {
  int n;
  char names[8][64];
} name_list;

static void collect_name(const char *name, void *arg) {
  name_list *l = arg;
  if (l->n < 8) snprintf(l->names[l->n++], 64, "%s", name);
}

static void test_mangled(void) {
  qt_ctx *ctx = new_ctx();
  static const char IMAGE[] =
      "NAMES:_Z6gatherPfPKfPKil,_Z3fooPfS_i,_Z3barPKfS0_,_Z3bazPKfS_,_Z4quuxPiPjS_S0_,"
      "_Z1kv,_Z2pvPv,_Z4axpyIfEvPT_S0_i";
  qt_module *m = NULL;
  int rc = qt_module_load(ctx, &m, &fake_dev, IMAGE, sizeof IMAGE - 1);
  CHECK_OK("qt_module_load", rc, ctx);
  if (m == NULL) {
    qt_ctx_release(ctx);
    return;
  }
  CHECK(qt_module_device(m) == &fake_dev, "qt_module_device is not the fake device");
  CHECK(F.last_image_size == sizeof IMAGE - 1 && memcmp(F.last_image, IMAGE, sizeof IMAGE - 1) == 0,
        "module_load did not get the image (%zu bytes)", F.last_image_size);
  name_list names = { 0 };
  rc = qt_module_kernel_names(ctx, m, collect_name, &names);
  CHECK(rc == 0 && names.n == 8 && strcmp(names.names[0], "_Z6gatherPfPKfPKil") == 0 &&
            strcmp(names.names[7], "_Z4axpyIfEvPT_S0_i") == 0,
        "qt_module_kernel_names: rc %d, %d names, first '%s'", rc, names.n, names.names[0]);

  qt_kernel *k = NULL;
  set_table("8,8,8,8");
  rc = qt_module_kernel(ctx, &k, m, "_Z6gatherPfPKfPKil", NULL);
  CHECK_OK("_Z6gatherPfPKfPKil", rc, ctx);
  if (k != NULL) {
    CHECK(qt_kernel_nparams(k) == 4, "gather: %d parameters", qt_kernel_nparams(k));
    CHECK_PARAM(k, 0, QT_PARAM_POINTER, QT_F32, false, "float *", "");
    CHECK_PARAM(k, 1, QT_PARAM_POINTER, QT_F32, true, "const float *", "");
    CHECK_PARAM(k, 2, QT_PARAM_POINTER, QT_I32, true, "const int *", "");
    CHECK_PARAM(k, 3, QT_PARAM_I64, NONE, false, "long", "");
    CHECK(strcmp(F.last_get, "_Z6gatherPfPKfPKil") == 0, "kernel_get asked for '%s'", F.last_get);
    qt_kernel_release(k);
  }
  /* a second lookup of one name is the module's, not the device's */
  int gets = F.kernel_gets;
  rc = qt_module_kernel(ctx, &k, m, "_Z6gatherPfPKfPKil", NULL);
  CHECK(rc == 0 && F.kernel_gets == gets, "a second lookup asked the device again (%d calls)",
        F.kernel_gets - gets);
  qt_kernel_release(k);

  struct {
    const char *name, *sizes;
    int n;
    struct { qt_param_kind kind; int dtype; bool is_const; const char *type; } p[4];
  } cases[] = {
    { "_Z3fooPfS_i", "8,8,4", 3,
      { { QT_PARAM_POINTER, QT_F32, false, "float *" }, { QT_PARAM_POINTER, QT_F32, false, "float *" },
        { QT_PARAM_I32, NONE, false, "int" } } },
    { "_Z3barPKfS0_", "8,8", 2,
      { { QT_PARAM_POINTER, QT_F32, true, "const float *" },
        { QT_PARAM_POINTER, QT_F32, true, "const float *" } } },
    /* S_ is the const float itself: a float by value */
    { "_Z3bazPKfS_", "8,4", 2,
      { { QT_PARAM_POINTER, QT_F32, true, "const float *" }, { QT_PARAM_F32, NONE, false, "float" } } },
    { "_Z4quuxPiPjS_S0_", "8,8,8,8", 4,
      { { QT_PARAM_POINTER, QT_I32, false, "int *" }, { QT_PARAM_POINTER, NONE, false, "unsigned *" },
        { QT_PARAM_POINTER, QT_I32, false, "int *" }, { QT_PARAM_POINTER, NONE, false, "unsigned *" } } },
    { "_Z1kv", "", 0, { { 0, 0, false, "" } } },
    { "_Z2pvPv", "8", 1, { { QT_PARAM_POINTER, ANY, false, "void *" } } },
    /* source names: __half and __nv_bfloat16 are structs; each name is a substitution
    ** candidate itself, before its qualified and pointer forms */
    { "_Z2hkP6__halfPK13__nv_bfloat16S_S1_", "8,8,2,2", 4,
      { { QT_PARAM_POINTER, QT_F16, false, "__half *" },
        { QT_PARAM_POINTER, QT_BF16, true, "const __nv_bfloat16 *" },
        { QT_PARAM_F16, NONE, false, "__half" }, { QT_PARAM_BF16, NONE, false, "__nv_bfloat16" } } },
    { "_Z2h2PK6__halfS1_", "8,8", 2,
      { { QT_PARAM_POINTER, QT_F16, true, "const __half *" },
        { QT_PARAM_POINTER, QT_F16, true, "const __half *" } } },
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    set_table(cases[c].sizes);
    k = NULL;
    rc = qt_module_kernel(ctx, &k, m, cases[c].name, NULL);
    CHECK_OK(cases[c].name, rc, ctx);
    if (k == NULL) continue;
    CHECK(qt_kernel_nparams(k) == cases[c].n, "%s: %d parameters, expected %d", cases[c].name,
          qt_kernel_nparams(k), cases[c].n);
    for (int i = 0; i < cases[c].n && i < qt_kernel_nparams(k); i++)
      CHECK_PARAM(k, i, cases[c].p[i].kind, cases[c].p[i].dtype, cases[c].p[i].is_const,
                  cases[c].p[i].type, "");
    qt_kernel_release(k);
  }

  /* a template instantiation has no types in its name: sizes only */
  set_table("8,4,4");
  rc = qt_module_kernel(ctx, &k, m, "_Z4axpyIfEvPT_S0_i", NULL);
  CHECK_OK("_Z4axpyIfEvPT_S0_i", rc, ctx);
  if (k != NULL) {
    CHECK(qt_kernel_nparams(k) == -1, "axpy<float> by its mangled name: %d parameters, "
          "expected -1 (unknown)", qt_kernel_nparams(k));
    qt_kernel_release(k);
  }
  /* the signature string gives the types */
  set_table("8,8");
  rc = qt_module_kernel(ctx, &k, m, "_Z3barPKfS0_", "float *out, const float *in");
  CHECK_OK("_Z3barPKfS0_ with a signature", rc, ctx);
  if (k != NULL) {
    CHECK_PARAM(k, 0, QT_PARAM_POINTER, QT_F32, false, "float *", "out");
    CHECK_PARAM(k, 1, QT_PARAM_POINTER, QT_F32, true, "const float *", "in");
    qt_kernel_release(k);
  }
  rc = qt_module_kernel(ctx, &k, m, "_Z3barPKfS0_", "float *out, float **in");
  CHECK_ERROR("a bad module signature", rc, ctx, "module: parameter 2 (", "float **in)");
  /* the layout is checked against the mangled types too */
  set_table("8,4,4");
  rc = qt_module_kernel(ctx, &k, m, "_Z4foo2PfS_i", NULL);  /* a name not looked up yet */
  CHECK_ERROR("_Z4foo2PfS_i with a 4-byte second parameter", rc, ctx,
              "module: '_Z4foo2PfS_i' parameter 2 is 4 bytes in the compiled code, but its "
              "signature says float * (8 bytes)");
  /* not in the module: the device's message */
  rc = qt_module_kernel(ctx, &k, m, "missing_kernel", NULL);
  CHECK_ERROR("a missing kernel", rc, ctx, "no kernel 'missing_kernel' in the module");
  CHECK(k == NULL, "*out set after an error");

  /* loading on the CPU, or nothing */
  qt_module *cm = NULL;
  rc = qt_module_load(ctx, &cm, qt_cpu_device(), IMAGE, sizeof IMAGE - 1);
  CHECK_ERROR("qt_module_load on the CPU", rc, ctx, "module: user kernels run on a GPU, and cpu "
              "is not one");
  rc = qt_module_load(ctx, &cm, &fake_dev, IMAGE, 0);
  CHECK_ERROR("an empty image", rc, ctx, "module: the image is empty");
  qt_module_release(m);
  qt_ctx_release(ctx);
}

/* ================================================================== 3. launches */

static void test_launches(void) {
  qt_ctx *ctx = new_ctx();
  qt_kernel *k = COMPILE(ctx, SRC_PLAIN, "k", NULL, SIZES_PLAIN);
  if (k == NULL) {
    qt_ctx_release(ctx);
    return;
  }
  qt_tensor x = TENSOR(ctx, &fake_dev, QT_F32, 1, 10, 0);
  qt_tensor y = TENSOR(ctx, &fake_dev, QT_F32, 1, 10, 0);
  qt_tensor any = TENSOR(ctx, &fake_dev, QT_I64, 1, 3, 0);
  qt_tensor d = TENSOR(ctx, &fake_dev, QT_F64, 1, 10, 0);
  qt_tensor m23 = TENSOR(ctx, &fake_dev, QT_F32, 2, 2, 3);
  qt_tensor one = TENSOR(ctx, &fake_dev, QT_F32, 1, 1, 0);
  qt_tensor host = TENSOR(ctx, qt_cpu_device(), QT_F32, 1, 10, 0);
  qt_tensor gone = TENSOR(ctx, &fake_dev, QT_F32, 1, 10, 0);
  qt_tensor tr, nar, row, wide;
  qt_tensor_init(&tr), qt_tensor_init(&nar), qt_tensor_init(&row), qt_tensor_init(&wide);
  CHECK_OK("transpose", qt_transpose(ctx, &tr, &m23, 0, 1), ctx);
  CHECK_OK("narrow", qt_narrow(ctx, &nar, &x, 0, 3, 4), ctx);
  CHECK_OK("narrow of a row", qt_narrow(ctx, &row, &m23, 0, 1, 1), ctx);
  int64_t four[1] = { 4 };
  CHECK_OK("expand", qt_expand(ctx, &wide, &one, 1, four), ctx);
  qt_storage_free_data(gone.storage);

  qt_launch_cfg cfg = CFG(4, 2, 1, 128, 2, 1, 1024);
  const int64_t big = (int64_t)1 << 40;
  qt_kernel_arg good[8] = { AT(&x), AT(&y), AI(3), AF(0.5), AI(big), AI(7), AB(true), AT(&any) };
  qt_kernel_arg a[8];
#define WITH(i, arg) (memcpy(a, good, sizeof a), a[i] = (arg), a)

  /* the good launch, and what reached the device */
  int rc = launch_args(ctx, k, cfg, 8, good);
  CHECK_OK("the good launch", rc, ctx);
  CHECK(F.launches == 1, "launch calls: %d", F.launches);
  CHECK(memcmp(&F.cfg, &cfg, sizeof cfg) == 0, "cfg reached the device as grid %ux%ux%u block "
        "%ux%ux%u shared %zu", F.cfg.grid[0], F.cfg.grid[1], F.cfg.grid[2], F.cfg.block[0],
        F.cfg.block[1], F.cfg.block[2], F.cfg.shared);
  CHECK_BYTES("good launch x", 0, data_ptr(&x));
  CHECK_BYTES("good launch y", 1, data_ptr(&y));
  CHECK_BYTES("good launch n", 2, (int32_t)3);
  CHECK_BYTES("good launch a", 3, (double)0.5);
  CHECK_BYTES("good launch m", 4, (int64_t)big);
  CHECK_BYTES("good launch u", 5, (uint32_t)7);
  CHECK_BYTES("good launch b", 6, (unsigned char)1);
  CHECK_BYTES("good launch any", 7, data_ptr(&any));

  /* values that convert */
  rc = launch_args(ctx, k, cfg, 8, WITH(2, AF(-3.0)));
  CHECK(rc == 0 && bytes_are(2, &(int32_t){ -3 }, 4), "int gets -3.0: rc %d '%s'", rc,
        rc ? ctx->err.msg : "");
  rc = launch_args(ctx, k, cfg, 8, WITH(2, AI(INT32_MIN)));
  CHECK(rc == 0 && bytes_are(2, &(int32_t){ INT32_MIN }, 4), "int gets INT32_MIN: rc %d '%s'", rc,
        rc ? ctx->err.msg : "");
  rc = launch_args(ctx, k, cfg, 8, WITH(3, AI(2)));
  CHECK(rc == 0 && bytes_are(3, &(double){ 2.0 }, 8), "double gets the integer 2: rc %d '%s'", rc,
        rc ? ctx->err.msg : "");
  rc = launch_args(ctx, k, cfg, 8, WITH(4, AF(1099511627776.0)));
  CHECK(rc == 0 && bytes_are(4, &(int64_t){ big }, 8), "long long gets 2^40 as a float: rc %d '%s'",
        rc, rc ? ctx->err.msg : "");
  rc = launch_args(ctx, k, cfg, 8, WITH(4, AI(INT64_MIN)));
  CHECK(rc == 0 && bytes_are(4, &(int64_t){ INT64_MIN }, 8), "long long gets INT64_MIN: rc %d",
        rc);
  rc = launch_args(ctx, k, cfg, 8, WITH(5, AI(4294967295LL)));
  CHECK(rc == 0 && bytes_are(5, &(uint32_t){ 4294967295u }, 4), "unsigned gets 2^32-1: rc %d '%s'",
        rc, rc ? ctx->err.msg : "");
  rc = launch_args(ctx, k, cfg, 8, WITH(6, AI(0)));
  CHECK(rc == 0 && F.bytes[6][0] == 0, "bool gets 0: rc %d byte %u", rc, F.bytes[6][0]);
  rc = launch_args(ctx, k, cfg, 8, WITH(6, AB(false)));
  CHECK(rc == 0 && F.bytes[6][0] == 0, "bool gets false: rc %d byte %u", rc, F.bytes[6][0]);
  rc = launch_args(ctx, k, cfg, 8, WITH(7, AT(&d)));
  CHECK(rc == 0 && bytes_are(7, &(void *){ data_ptr(&d) }, 8), "void * gets a float64 tensor: rc %d",
        rc);
  /* a narrowed view: storage->data + offset * elsize */
  rc = launch_args(ctx, k, cfg, 8, WITH(1, AT(&nar)));
  void *nar_ptr = (char *)x.storage->data + 3 * sizeof(float);
  CHECK(rc == 0 && bytes_are(1, &nar_ptr, 8) && data_ptr(&nar) == nar_ptr,
        "a narrowed view (offset 3) reached the device as %p, expected %p (rc %d '%s')",
        bytes_ptr(1), nar_ptr, rc, rc ? ctx->err.msg : "");
  /* the second row of a 2x3 is a contiguous 1x3 at offset 3 */
  rc = launch_args(ctx, k, cfg, 8, WITH(1, AT(&row)));
  void *row_ptr = (char *)m23.storage->data + 3 * sizeof(float);
  CHECK(rc == 0 && bytes_are(1, &row_ptr, 8), "the second row of a 2x3: rc %d '%s', pointer %p "
        "(expected %p)", rc, rc ? ctx->err.msg : "", bytes_ptr(1), row_ptr);

  /* the float params */
  qt_kernel *kf = COMPILE(ctx, "extern \"C\" __global__ void fk(float f, double g, bool b, "
                               "unsigned long long ull) {}", "fk", NULL, "4,8,1,8");
  if (kf != NULL) {
    rc = launch_args(ctx, kf, cfg, 4, (qt_kernel_arg[]){ AF(1.5), AF(-0.1), AB(true), AI(big) });
    CHECK(rc == 0 && bytes_are(0, &(float){ 1.5f }, 4) && bytes_are(1, &(double){ -0.1 }, 8) &&
              F.bytes[2][0] == 1 && bytes_are(3, &(uint64_t){ (uint64_t)big }, 8),
          "fk(1.5, -0.1, true, 2^40): rc %d '%s'", rc, rc ? ctx->err.msg : "");
    CHECK_BYTES("float gets 1.5", 0, 1.5f);
    rc = launch_args(ctx, kf, cfg, 4, (qt_kernel_arg[]){ AI(3), AI(-2), AI(1), AI(0) });
    CHECK(rc == 0 && bytes_are(0, &(float){ 3.0f }, 4) && bytes_are(1, &(double){ -2.0 }, 8),
          "fk(3, -2, 1, 0) with integers: rc %d '%s'", rc, rc ? ctx->err.msg : "");
    CHECK_BYTES("float gets the integer 3", 0, 3.0f);
    LAUNCH_FAILS("a boolean for a float", ctx, kf, cfg, 4,
                 ((qt_kernel_arg[]){ AB(true), AF(1), AB(true), AI(0) }),
                 "argument 1, f (float), wants a number, got a boolean");
    LAUNCH_FAILS("-1 for an unsigned long long", ctx, kf, cfg, 4,
                 ((qt_kernel_arg[]){ AF(1), AF(1), AB(true), AI(-1) }),
                 "argument 4, ull (unsigned long long): -1 is out of range (0 to");
    qt_kernel_release(kf);
  }

  /* the 16-bit floats: tensors of their dtype; numbers rounded to nearest even into the
  ** format's bits (half.h), integers through float64, overflow to inf */
  qt_kernel *kh = COMPILE(ctx, "extern \"C\" __global__ void hk(__half *x, const __nv_bfloat16 "
                               "*y, __half s, __nv_bfloat16 t) {}", "hk", NULL, "8,8,2,2");
  qt_tensor h16 = TENSOR(ctx, &fake_dev, QT_F16, 1, 4, 0);
  qt_tensor b16 = TENSOR(ctx, &fake_dev, QT_BF16, 1, 4, 0);
  if (kh != NULL) {
    rc = launch_args(ctx, kh, cfg, 4, (qt_kernel_arg[]){ AT(&h16), AT(&b16), AF(1.5), AF(1.5) });
    CHECK_OK("hk(h16, b16, 1.5, 1.5)", rc, ctx);
    CHECK_BYTES("__half * gets a float16 tensor", 0, data_ptr(&h16));
    CHECK_BYTES("__nv_bfloat16 * gets a bfloat16 tensor", 1, data_ptr(&b16));
    CHECK_BYTES("__half gets 1.5", 2, (uint16_t)0x3e00);
    CHECK_BYTES("__nv_bfloat16 gets 1.5", 3, (uint16_t)0x3fc0);
    const struct { qt_kernel_arg s, t; uint16_t hs, bt; const char *what; } values[] = {
      { AF(0.1), AF(0.1), 0x2e66, 0x3dcd, "0.1 rounds to nearest" },
      { AF(65520.0), AF(3.0e38), 0x7c00, 0x7f62, "65520 overflows float16 to inf" },
      { AF(-1e-8), AF(-1e-45), 0x8000, 0x8000, "tiny negatives give -0" },
      { AI(2049), AI(-3), 0x6800, 0xc040, "integers: 2049 ties to even 2048" },
      { AF(INFINITY), AF(-INFINITY), 0x7c00, 0xff80, "infinities" },
      { AF(NAN), AF(NAN), 0x7e00, 0x7fc0, "NaN" },
    };
    for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
      rc = launch_args(ctx, kh, cfg, 4,
                       (qt_kernel_arg[]){ AT(&h16), AT(&b16), values[v].s, values[v].t });
      CHECK(rc == 0 && bytes_are(2, &values[v].hs, 2) && bytes_are(3, &values[v].bt, 2),
            "%s: rc %d '%s', bits %02x%02x %02x%02x (expected %04x %04x)", values[v].what, rc,
            rc ? ctx->err.msg : "", F.bytes[2][1], F.bytes[2][0], F.bytes[3][1], F.bytes[3][0],
            values[v].hs, values[v].bt);
    }
    LAUNCH_FAILS("a float32 tensor for __half *", ctx, kh, cfg, 4,
                 ((qt_kernel_arg[]){ AT(&x), AT(&b16), AF(1), AF(1) }),
                 "argument 1, x (__half *), wants a float16 tensor, got float32");
    LAUNCH_FAILS("a float16 tensor for const __nv_bfloat16 *", ctx, kh, cfg, 4,
                 ((qt_kernel_arg[]){ AT(&h16), AT(&h16), AF(1), AF(1) }),
                 "argument 2, y (const __nv_bfloat16 *), wants a bfloat16 tensor, got float16");
    LAUNCH_FAILS("a boolean for __half", ctx, kh, cfg, 4,
                 ((qt_kernel_arg[]){ AT(&h16), AT(&b16), AB(true), AF(1) }),
                 "argument 3, s (__half), wants a number, got a boolean");
    LAUNCH_FAILS("a tensor for __nv_bfloat16", ctx, kh, cfg, 4,
                 ((qt_kernel_arg[]){ AT(&h16), AT(&b16), AF(1), AT(&b16) }),
                 "argument 4, t (__nv_bfloat16), wants a number, got a tensor");
    qt_kernel_release(kh);
  }
  qt_tensor_release(&h16);
  qt_tensor_release(&b16);

  /* wrong argument counts list the signature */
  LAUNCH_FAILS("2 arguments for 8", ctx, k, cfg, 2, good,
               "launch: kernel 'k' takes 8 arguments (x (const float *), y (float *), n (int), "
               "a (double), m (long long), u (unsigned), b (bool), any (void *)), got 2");
  LAUNCH_FAILS("no arguments for 8", ctx, k, cfg, 0, good, "takes 8 arguments", "got 0");

  /* kinds */
  LAUNCH_FAILS("a tensor for int n", ctx, k, cfg, 8, WITH(2, AT(&x)),
               "launch: kernel 'k': argument 3, n (int), wants a number, got a tensor");
  LAUNCH_FAILS("a tensor for bool b", ctx, k, cfg, 8, WITH(6, AT(&x)),
               "argument 7, b (bool), wants a boolean, got a tensor");
  LAUNCH_FAILS("a number for const float *x", ctx, k, cfg, 8, WITH(0, AI(1)),
               "argument 1, x (const float *), wants a tensor, got a number");
  LAUNCH_FAILS("a boolean for float *y", ctx, k, cfg, 8, WITH(1, AB(true)),
               "argument 2, y (float *), wants a tensor, got a boolean");
  LAUNCH_FAILS("a boolean for int n", ctx, k, cfg, 8, WITH(2, AB(true)),
               "argument 3, n (int), wants a number, got a boolean");
  /* tensors */
  LAUNCH_FAILS("a float64 tensor for const float *", ctx, k, cfg, 8, WITH(0, AT(&d)),
               "argument 1, x (const float *), wants a float32 tensor, got float64");
  LAUNCH_FAILS("a transposed view", ctx, k, cfg, 8, WITH(1, AT(&tr)),
               "argument 2, y (float *): the tensor is not contiguous");
  LAUNCH_FAILS("an expanded view (stride 0)", ctx, k, cfg, 8, WITH(1, AT(&wide)),
               "argument 2, y (float *): the tensor is not contiguous");
  LAUNCH_FAILS("a CPU tensor", ctx, k, cfg, 8, WITH(0, AT(&host)),
               "argument 1, x (const float *), is on cpu; the kernel runs on fake:0");
  LAUNCH_FAILS("a freed tensor", ctx, k, cfg, 8, WITH(1, AT(&gone)),
               "launch: tensor has been freed");
  LAUNCH_FAILS("a freed tensor for void *", ctx, k, cfg, 8, WITH(7, AT(&gone)),
               "tensor has been freed");
  /* integers */
  LAUNCH_FAILS("2^31 for int", ctx, k, cfg, 8, WITH(2, AI((int64_t)1 << 31)),
               "argument 3, n (int): 2147483648 is out of range (-2147483648 to 2147483647)");
  LAUNCH_FAILS("-2^31-1 for int", ctx, k, cfg, 8, WITH(2, AI(-((int64_t)1 << 31) - 1)),
               "-2147483649 is out of range (-2147483648 to 2147483647)");
  LAUNCH_FAILS("-1 for unsigned", ctx, k, cfg, 8, WITH(5, AI(-1)),
               "argument 6, u (unsigned): -1 is out of range (0 to 4294967295)");
  LAUNCH_FAILS("2^32 for unsigned", ctx, k, cfg, 8, WITH(5, AI((int64_t)1 << 32)),
               "4294967296 is out of range (0 to 4294967295)");
  LAUNCH_FAILS("1.5 for int", ctx, k, cfg, 8, WITH(2, AF(1.5)),
               "argument 3, n (int), wants an integer, got 1.5");
  LAUNCH_FAILS("NaN for int", ctx, k, cfg, 8, WITH(2, AF(NAN)), "wants an integer, got nan");
  LAUNCH_FAILS("inf for long long", ctx, k, cfg, 8, WITH(4, AF(INFINITY)),
               "argument 5, m (long long), wants an integer, got inf");
  LAUNCH_FAILS("2^63 for long long", ctx, k, cfg, 8, WITH(4, AF(9223372036854775808.0)),
               "argument 5, m (long long), wants an integer");
  LAUNCH_FAILS("2 for bool", ctx, k, cfg, 8, WITH(6, AI(2)),
               "argument 7, b (bool), wants a boolean (or 0 or 1)");
  LAUNCH_FAILS("1.0 for bool", ctx, k, cfg, 8, WITH(6, AF(1.0)), "wants a boolean (or 0 or 1)");

  /* launch limits: the message names them */
  LAUNCH_FAILS("grid.x 0", ctx, k, CFG(0, 1, 1, 32, 1, 1, 0), 8, good,
               "launch: kernel 'k': grid and block sizes must be at least 1 (grid 0x1x1, block "
               "32x1x1)");
  LAUNCH_FAILS("block.z 0", ctx, k, CFG(1, 1, 1, 32, 1, 0, 0), 8, good,
               "must be at least 1 (grid 1x1x1, block 32x1x0)");
  LAUNCH_FAILS("block.x 2048", ctx, k, CFG(1, 1, 1, 2048, 1, 1, 0), 8, good,
               "block.x = 2048 is over the GPU's limit of 1024 (blocks at most 1024x1024x64, "
               "1024 threads)");
  LAUNCH_FAILS("block.z 65", ctx, k, CFG(1, 1, 1, 1, 1, 65, 0), 8, good,
               "block.z = 65 is over the GPU's limit of 64");
  LAUNCH_FAILS("block 32x32x2", ctx, k, CFG(1, 1, 1, 32, 32, 2, 0), 8, good,
               "a block of 32x32x2 is 2048 threads; this kernel allows at most 1024 per block");
  LAUNCH_FAILS("grid.y 70000", ctx, k, CFG(1, 70000, 1, 32, 1, 1, 0), 8, good,
               "grid.y = 70000 is over the GPU's limit of 65535 (grids at most "
               "2147483647x65535x65535)");
  LAUNCH_FAILS("grid.z 65536", ctx, k, CFG(1, 1, 65536, 32, 1, 1, 0), 8, good,
               "grid.z = 65536 is over the GPU's limit of 65535");
  LAUNCH_FAILS("shared 64 KiB", ctx, k, CFG(1, 1, 1, 32, 1, 1, 64 * 1024), 8, good,
               "65536 bytes of dynamic shared memory; this kernel can have at most 49152 (it "
               "uses 512 statically)");
  /* the limits themselves are allowed */
  rc = launch_args(ctx, k, CFG(2147483647u, 65535, 65535, 32, 32, 1, 48 * 1024), 8, good);
  CHECK_OK("a launch at every limit", rc, ctx);
  rc = launch_args(ctx, k, CFG(1, 1, 1, 1, 1, 64, 0), 8, good);
  CHECK_OK("block 1x1x64", rc, ctx);

  /* packed launches: cfg checked, bytes passed through */
  int32_t n0 = 11;
  void *packed_ptr = data_ptr(&x);
  void *packed[2] = { &packed_ptr, &n0 };
  qt_kernel *lb = COMPILE(ctx, "extern \"C\" __global__ void pk(float *x, int n) {}", "pk", NULL,
                          "8,4");
  if (lb != NULL) {
    qt_launch_cfg c1 = CFG(1, 1, 1, 64, 1, 1, 0);
    rc = qt_kernel_launch_packed(ctx, lb, &c1, packed);
    CHECK(rc == 0 && bytes_are(0, &packed_ptr, 8) && bytes_are(1, &n0, 4),
          "a packed launch: rc %d '%s'", rc, rc ? ctx->err.msg : "");
    int before = F.launches;
    qt_launch_cfg c2 = CFG(1, 1, 1, 2048, 1, 1, 0);
    rc = qt_kernel_launch_packed(ctx, lb, &c2, packed);
    CHECK_ERROR("a packed launch with block.x 2048", rc, ctx, "block.x = 2048 is over");
    CHECK(F.launches == before, "a packed launch reached the device after an error");
    qt_kernel_release(lb);
  }

  /* a kernel known by sizes only (a module kernel without types) */
  static const char IMG[] = "NAMES:_Z4axpyIfEvPT_S0_i,_Z3tinyIsEvT_,_Z5axpy2IfEvPT_S0_i";
  qt_module *m = NULL;
  CHECK_OK("module load", qt_module_load(ctx, &m, &fake_dev, IMG, sizeof IMG - 1), ctx);
  qt_kernel *ku = NULL, *ks = NULL;
  set_table("8,4,4");
  if (m != NULL) CHECK_OK("untyped kernel", qt_module_kernel(ctx, &ku, m, "_Z4axpyIfEvPT_S0_i", NULL), ctx);
  set_table("2");
  if (m != NULL) CHECK_OK("untyped 2-byte kernel", qt_module_kernel(ctx, &ks, m, "_Z3tinyIsEvT_", NULL), ctx);
  if (ku != NULL) {
    rc = launch_args(ctx, ku, cfg, 3, (qt_kernel_arg[]){ AT(&nar), AF(2.5), AI(7) });
    CHECK(rc == 0 && bytes_are(0, &nar_ptr, 8) && bytes_are(1, &(float){ 2.5f }, 4) &&
              bytes_are(2, &(uint32_t){ 7 }, 4),
          "untyped launch (tensor, 2.5, 7): rc %d '%s'", rc, rc ? ctx->err.msg : "");
    rc = launch_args(ctx, ku, cfg, 3, (qt_kernel_arg[]){ AT(&x), AI(1), AI(-1) });
    CHECK(rc == 0 && bytes_are(2, &(int32_t){ -1 }, 4), "untyped -1 in 4 bytes: rc %d", rc);
    LAUNCH_FAILS("untyped: wrong count", ctx, ku, cfg, 2, good,
                 "launch: kernel '_Z4axpyIfEvPT_S0_i' takes 3 arguments, got 2");
    LAUNCH_FAILS("untyped: a tensor for 4 bytes", ctx, ku, cfg, 3,
                 ((qt_kernel_arg[]){ AT(&x), AT(&x), AI(1) }),
                 "argument 2 is a tensor, but parameter 2 is 4 bytes (give the module a signature)");
    LAUNCH_FAILS("untyped: 2^32 in 4 bytes", ctx, ku, cfg, 3,
                 ((qt_kernel_arg[]){ AT(&x), AI(1), AI((int64_t)1 << 32) }),
                 "4294967296 is out of range (-2147483648 to 4294967295)");
    LAUNCH_FAILS("untyped: block.x 4096", ctx, ku, CFG(1, 1, 1, 4096, 1, 1, 0), 3,
                 ((qt_kernel_arg[]){ AT(&x), AI(1), AI(1) }), "block.x = 4096 is over");
    /* the tensor checks of typed parameters apply to untyped pointers too */
    /* (in a child: the freed storage's NULL data + offset is undefined behaviour, which
    ** clang's UBSan stops at) */
    int status = -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      int b = F.launches;
      int r = launch_args(ctx, ku, cfg, 3, (qt_kernel_arg[]){ AT(&gone), AI(1), AI(1) });
      _exit(r != 0 && F.launches == b && strstr(ctx->err.msg, "tensor has been freed") ? 0 : 3);
    }
    if (pid > 0) waitpid(pid, &status, 0);
    CHECK(pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "qt_module_kernel(m, \"_Z4axpyIfEvPT_S0_i\", NULL) (sizes 8,4,4), launched with a "
              "freed tensor as argument 1: expected \"launch: tensor has been freed\", got %s "
              "(kernel_pack_untyped skips ops_live and passes storage->data, NULL, + offset)",
              WIFEXITED(status) && WEXITSTATUS(status) == 3
                  ? "a launch with a NULL pointer"
                  : "undefined behaviour (NULL + offset)");
    int before = F.launches;
    rc = launch_args(ctx, ku, cfg, 3, (qt_kernel_arg[]){ AT(&host), AI(1), AI(1) });
    CHECK(rc != 0 && F.launches == before,
              "the same kernel launched with a CPU tensor (host memory) as argument 1: "
              "expected \"... is on cpu; the kernel runs on fake:0\", got rc %d and the device "
              "launched with the host pointer (kernel_pack_untyped checks no device)", rc);
    before = F.launches;
    rc = launch_args(ctx, ku, cfg, 3, (qt_kernel_arg[]){ AT(&tr), AI(1), AI(1) });
    CHECK(rc != 0 && F.launches == before,
              "the same kernel launched with a transposed 3x2 view as argument 1: expected "
              "\"the tensor is not contiguous\", got rc %d and the device launched "
              "(kernel_pack_untyped checks no contiguity)", rc);
    qt_kernel_release(ku);
  }
  if (ks != NULL) {
    LAUNCH_FAILS("untyped: a 2-byte parameter", ctx, ks, cfg, 1, ((qt_kernel_arg[]){ AI(1) }),
                 "parameter 1 is 2 bytes; give the module a signature");
    qt_kernel_release(ks);
  }
  /* no signature and no layout from the device: launches cannot be checked */
  set_table(NULL);
  qt_kernel *kn = NULL;
  if (m != NULL) CHECK_OK("a kernel without a layout", qt_module_kernel(ctx, &kn, m, "_Z5axpy2IfEvPT_S0_i", NULL), ctx);
  if (kn != NULL) {
    int before = F.launches;
    rc = launch_args(ctx, kn, cfg, 1, (qt_kernel_arg[]){ AT(&x) });
    CHECK(rc != 0 && F.launches == before, "a kernel of unknown arity launched (rc %d)", rc);
    CHECK(rc != 0 && strstr(ctx->err.msg, "-1") == NULL,
              "qt_module_kernel(m, \"_Z5axpy2IfEvPT_S0_i\", NULL) on a device whose kernel_get "
              "reports nparams -1, launched with 1 argument: expected a message saying the "
              "parameters are unknown (give a signature), got '%s'", ctx->err.msg);
    qt_kernel_release(kn);
  }
  qt_module_release(m);

  qt_tensor *all[] = { &x, &y, &any, &d, &m23, &one, &host, &gone, &tr, &nar, &row, &wide };
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) qt_tensor_release(all[i]);
  qt_kernel_release(k);
  qt_ctx_release(ctx);
#undef WITH
}

/* ================================================================== 4. caches */

static const char *SRC_DISK = "extern \"C\" __global__ void dk(float *x, int n) { x[n] = 1; }\n";

/* A fresh context compiles src/name once; returns how many compile calls it took. */
static int fresh_compile_at(int line, const char *src, const char *name, const char *sizes) {
  qt_ctx *ctx = new_ctx();
  int before = F.compile_calls;
  qt_kernel *k = compile_at(line, ctx, src, name, NULL, sizes);
  if (k != NULL) {
    /* the module is the source's image, and the kernel launches */
    size_t n = strlen(src);
    if (F.last_image_size != n + 6 || memcmp(F.last_image + 6, src, n < 4000 ? n : 4000) != 0)
      fail(line, "the module loaded for '%s' is not its source's image (%zu bytes)", name,
           F.last_image_size);
    qt_kernel_release(k);
  }
  qt_ctx_release(ctx);
  return F.compile_calls - before;
}
#define FRESH_COMPILE(src, name, sizes) fresh_compile_at(__LINE__, src, name, sizes)

static void test_caches(void) {
  char kdir[800], file[1000];
  use_cache_home("xdg1", kdir, sizeof kdir);

  /* memory: one compile, one module, one lookup */
  qt_ctx *ctx = new_ctx();
  int compiles = F.compile_calls, loads = F.loads, gets = F.kernel_gets;
  qt_kernel *k1 = COMPILE(ctx, SRC_DISK, "dk", NULL, "8,4");
  qt_kernel *k2 = COMPILE(ctx, SRC_DISK, "dk", NULL, "8,4");
  CHECK(F.compile_calls == compiles + 1 && F.loads == loads + 1 && F.kernel_gets == gets + 1,
        "the same source and name twice: %d compiles, %d loads, %d lookups (expected 1 each)",
        F.compile_calls - compiles, F.loads - loads, F.kernel_gets - gets);
  CHECK(k1 != NULL && k2 != NULL && k1 != k2, "two compiles should give two kernel objects");
  qt_kernel_release(k1);
  qt_kernel_release(k2);

  /* disk: the first compile wrote one entry, and no temporary file is left */
  int nfiles = count_qkc(kdir, file, sizeof file);
  CHECK(nfiles == 1, "%d .qkc files in %s after the first compile, expected 1", nfiles, kdir);
  CHECK(count_tmp(kdir) == 0, "temporary files left in %s", kdir);
  const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
  CHECK(strlen(base) == 20 && strspn(base, "0123456789abcdef") == 16,
        "the entry's name '%s' is not <16 hex digits>.qkc", base);
  size_t good_len = 0;
  char *good = read_whole(file, &good_len);
  CHECK(good != NULL && good_len > 40 && memcmp(good, "QLUAKC01", 8) == 0,
        "the entry (%zu bytes) does not start with the magic", good_len);
  qt_ctx_release(ctx);

  /* a fresh context finds it on disk */
  loads = F.loads;
  int c = FRESH_COMPILE(SRC_DISK, "dk", "8,4");
  CHECK(c == 0, "a fresh context compiled %d times, expected a disk hit", c);
  CHECK(F.loads == loads + 1, "a disk hit loaded %d modules", F.loads - loads);

  /* corrupt entries are misses, and the next compile writes a valid one back */
  if (good != NULL && good_len > 40) {
    struct { const char *what; size_t len; int flip; bool garbage; } bad[] = {
      { "truncated to half", good_len / 2, -1, false },
      { "truncated to 20 bytes", 20, -1, false },
      { "truncated to 0 bytes", 0, -1, false },
      { "one byte short", good_len - 1, -1, false },
      { "a byte flipped in the middle", good_len, (int)(good_len / 2), false },
      { "a byte of the key flipped", good_len, 20, false },
      { "the checksum's last byte flipped", good_len, (int)good_len - 1, false },
      { "the magic changed", good_len, 0, false },
      { "garbage of the same length", good_len, -1, true },
      { "garbage of 100 bytes", 100, -1, true },
    };
    char *buf = malloc(good_len + 100);
    for (size_t b = 0; buf != NULL && b < sizeof bad / sizeof bad[0]; b++) {
      memcpy(buf, good, good_len);
      if (bad[b].garbage)
        for (size_t i = 0; i < bad[b].len; i++) buf[i] = (char)(i * 131 + 7);
      if (bad[b].flip >= 0) buf[bad[b].flip] ^= 0x20;
      CHECK(write_whole(file, buf, bad[b].len), "cannot write %s", file);
      c = FRESH_COMPILE(SRC_DISK, "dk", "8,4");
      CHECK(c == 1, "an entry %s: a fresh context compiled %d times, expected 1", bad[b].what, c);
      size_t now_len = 0;
      char *now = read_whole(file, &now_len);
      CHECK(now != NULL && now_len == good_len && memcmp(now, good, good_len) == 0,
            "after an entry %s, the rewritten entry differs from the first (%zu bytes, was %zu)",
            bad[b].what, now_len, good_len);
      free(now);
      c = FRESH_COMPILE(SRC_DISK, "dk", "8,4");
      CHECK(c == 0, "after an entry %s was rewritten, a fresh context compiled %d times",
            bad[b].what, c);
    }
    free(buf);
    CHECK(count_tmp(kdir) == 0, "temporary files left in %s", kdir);
  }

  /* an entry with another key under this key's file name (a hash collision) is a miss */
  static const char *SRC_OTHER = "extern \"C\" __global__ void dk(float *x, int n) { x[n] = 2; }\n";
  char other_file[1200] = "";
  c = FRESH_COMPILE(SRC_OTHER, "dk", "8,4");
  CHECK(c == 1, "a new source compiled %d times", c);
  CHECK(count_qkc(kdir, NULL, 0) == 2, "%d entries, expected 2", count_qkc(kdir, NULL, 0));
  {
    DIR *dd = opendir(kdir);
    struct dirent *e;
    while (dd != NULL && (e = readdir(dd)) != NULL) {
      char path[1100];
      snprintf(path, sizeof path, "%s/%s", kdir, e->d_name);
      if (strstr(e->d_name, ".qkc") != NULL && strcmp(path, file) != 0)
        snprintf(other_file, sizeof other_file, "%s", path);
    }
    if (dd != NULL) closedir(dd);
  }
  if (good != NULL && other_file[0]) {
    CHECK(write_whole(other_file, good, good_len), "cannot write %s", other_file);
    c = FRESH_COMPILE(SRC_OTHER, "dk", "8,4");  /* also checks the image is SRC_OTHER's */
    CHECK(c == 1, "an entry of another key was taken for a hit (%d compiles)", c);
    c = FRESH_COMPILE(SRC_OTHER, "dk", "8,4");
    CHECK(c == 0, "the entry was not rewritten (%d compiles)", c);
  }
  free(good);

  /* the lowered names come back from the disk */
  snprintf(F.lower_prefix, sizeof F.lower_prefix, "_Zdisk_");
  static const char *SRC_LOW = "template <typename T> __global__ void lw(T *x) {}\n";
  c = FRESH_COMPILE(SRC_LOW, "lw<float>", "8");
  F.lower_prefix[0] = '\0';
  CHECK(c == 1, "lw<float> compiled %d times", c);
  c = FRESH_COMPILE(SRC_LOW, "lw<float>", "8");
  CHECK(c == 0 && strcmp(F.last_get, "_Zdisk_lw<float>") == 0,
        "a disk hit: %d compiles, kernel_get asked for '%s' (expected 0, '_Zdisk_lw<float>')", c,
        F.last_get);

  /* another compiler (GPU architecture) is another key */
  snprintf(F.compiler_id, sizeof F.compiler_id, "fake 1.0 sm_01");
  c = FRESH_COMPILE(SRC_DISK, "dk", "8,4");
  CHECK(c == 1, "another compiler id took the old entry (%d compiles)", c);
  snprintf(F.compiler_id, sizeof F.compiler_id, "fake 1.0 sm_00");
  c = FRESH_COMPILE(SRC_DISK, "dk", "8,4");
  CHECK(c == 0, "the first compiler id's entry is gone (%d compiles)", c);

  /* options, headers, expressions and names are all in the key */
  ctx = new_ctx();
  static const char *SRC_KEYS =
      "#include \"h.cuh\"\n"
      "extern \"C\" __global__ void ka(float *x) {}\n"
      "extern \"C\" __global__ void kb(float *x) {}\n";
  const char *o1[] = { "-DN=4" }, *o2[] = { "-DN=5" }, *o3[] = { "-DN=4", "--use_fast_math" };
  const char *o4[] = { "a\nb" }, *o5[] = { "a", "b" };
  const char *hn[] = { "h.cuh" }, *hs1[] = { "#define X 1" }, *hs2[] = { "#define X 2" };
  const char *hn2[] = { "g.cuh" };
  const char *hab[] = { "ab" }, *hc[] = { "c" }, *ha[] = { "a" }, *hbc[] = { "bc" };
  const char *ex[] = { "ka" };
  qt_kernel_opts variants[12];
  memset(variants, 0, sizeof variants);
  variants[1].noptions = 1, variants[1].options = o1;
  variants[2].noptions = 1, variants[2].options = o2;
  variants[3].noptions = 2, variants[3].options = o3;
  variants[4].noptions = 1, variants[4].options = o4;
  variants[5].noptions = 2, variants[5].options = o5;
  variants[6].nheaders = 1, variants[6].header_names = hn, variants[6].header_sources = hs1;
  variants[7].nheaders = 1, variants[7].header_names = hn, variants[7].header_sources = hs2;
  variants[8].nheaders = 1, variants[8].header_names = hn2, variants[8].header_sources = hs1;
  variants[9].nheaders = 1, variants[9].header_names = hab, variants[9].header_sources = hc;
  variants[10].nheaders = 1, variants[10].header_names = ha, variants[10].header_sources = hbc;
  variants[11].nexpressions = 1, variants[11].expressions = ex;  /* the same as no expressions */
  const char *variant_names[] = { "no options", "-DN=4", "-DN=5", "-DN=4 --use_fast_math",
                                  "the option 'a\\nb'", "the options 'a' 'b'", "h.cuh X 1",
                                  "h.cuh X 2", "g.cuh X 1", "header 'ab' = 'c'",
                                  "header 'a' = 'bc'", "expressions {ka}" };
  for (int v = 0; v < 12; v++) {
    compiles = F.compile_calls;
    qt_kernel *k = COMPILE(ctx, SRC_KEYS, "ka", &variants[v], "8");
    int want = v == 11 ? 0 : 1;
    CHECK(F.compile_calls - compiles == want, "compiling with %s: %d compiles, expected %d",
          variant_names[v], F.compile_calls - compiles, want);
    if (v == 1) CHECK(F.job_noptions == 1 && strcmp(F.job_option0, "-DN=4") == 0,
                      "the job's options: %d, '%s'", F.job_noptions, F.job_option0);
    if (v == 6) CHECK(F.job_nheaders == 1 && strcmp(F.job_header0, "h.cuh") == 0,
                      "the job's headers: %d, '%s'", F.job_nheaders, F.job_header0);
    qt_kernel_release(k);
  }
  for (int v = 0; v < 11; v++) {  /* all in the memory cache now */
    compiles = F.compile_calls;
    qt_kernel *k = COMPILE(ctx, SRC_KEYS, "ka", &variants[v], "8");
    CHECK(F.compile_calls == compiles, "compiling again with %s: %d compiles, expected 0",
          variant_names[v], F.compile_calls - compiles);
    qt_kernel_release(k);
  }
  compiles = F.compile_calls;
  qt_kernel *kb = COMPILE(ctx, SRC_KEYS, "kb", NULL, "8");
  CHECK(F.compile_calls == compiles + 1, "another kernel name of one source: %d compiles",
        F.compile_calls - compiles);
  qt_kernel_release(kb);
  /* a signature is not part of the key (the image does not depend on it) */
  compiles = F.compile_calls;
  qt_kernel_opts sig;
  memset(&sig, 0, sizeof sig);
  sig.signature = "void *x";
  kb = COMPILE(ctx, SRC_KEYS, "kb", &sig, "8");
  CHECK(F.compile_calls == compiles, "a signature changed the key (%d compiles)",
        F.compile_calls - compiles);
  if (kb != NULL) CHECK_PARAM(kb, 0, QT_PARAM_POINTER, ANY, false, "void *", "x");
  qt_kernel_release(kb);

  /* qt_kernel_cache_clear: memory and disk (ours only); live kernels keep their module */
  qt_kernel *live = COMPILE(ctx, SRC_DISK, "dk", NULL, "8,4");
  char tmpfile[1000], keep[1000];
  snprintf(tmpfile, sizeof tmpfile, "%s/.tmp.99999.0", kdir);
  snprintf(keep, sizeof keep, "%s/keep.txt", kdir);
  CHECK(write_whole(tmpfile, "x", 1) && write_whole(keep, "keep", 4), "cannot write in %s", kdir);
  int unloads = F.unloads;
  CHECK_OK("qt_kernel_cache_clear", qt_kernel_cache_clear(ctx), ctx);
  CHECK(count_qkc(kdir, NULL, 0) == 0 && count_tmp(kdir) == 0,
        "after qt_kernel_cache_clear: %d entries, %d temporary files", count_qkc(kdir, NULL, 0),
        count_tmp(kdir));
  CHECK(access(keep, F_OK) == 0, "qt_kernel_cache_clear removed a file that is not its own");
  CHECK(F.unloads > unloads, "clearing unloaded no module");
  if (live != NULL) {
    qt_tensor x = TENSOR(ctx, &fake_dev, QT_F32, 1, 4, 0);
    int before = F.launches;
    int rc = launch_args(ctx, live, CFG(1, 1, 1, 1, 1, 1, 0), 2,
                         (qt_kernel_arg[]){ AT(&x), AI(1) });
    CHECK(rc == 0 && F.launches == before + 1, "a kernel compiled before the clear does not "
          "launch: rc %d '%s'", rc, rc ? ctx->err.msg : "");
    qt_tensor_release(&x);
    unloads = F.unloads;
    qt_kernel_release(live);
    CHECK(F.unloads == unloads + 1, "releasing the last kernel of a cleared module unloaded %d",
          F.unloads - unloads);
  }
  compiles = F.compile_calls;
  qt_kernel *again = COMPILE(ctx, SRC_DISK, "dk", NULL, "8,4");
  CHECK(F.compile_calls == compiles + 1, "after the clear, compiling took %d compiles",
        F.compile_calls - compiles);
  qt_kernel_release(again);
  qt_ctx_release(ctx);

  /* another GPU of the same architecture: its own module (memory), the same disk entry */
  {
    qt_device dev1 = fake_dev;
    snprintf(dev1.name, sizeof dev1.name, "fake:1");
    qt_ctx *c2 = new_ctx();
    qt_kernel *k0 = COMPILE(c2, SRC_DISK, "dk", NULL, "8,4");
    compiles = F.compile_calls;
    loads = F.loads;
    set_table("8,4");
    qt_kernel *k1d = NULL;
    int rc = qt_kernel_compile(c2, &k1d, &dev1, SRC_DISK, "dk", NULL);
    CHECK(rc == 0 && F.compile_calls == compiles && F.loads == loads + 1,
          "the same kernel on fake:1: rc %d '%s', %d compiles (0: the disk), %d loads (1)", rc,
          rc ? c2->err.msg : "", F.compile_calls - compiles, F.loads - loads);
    if (k1d != NULL) {
      CHECK(qt_kernel_device(k1d) == &dev1, "the kernel for fake:1 is on %s",
            qt_kernel_device(k1d)->name);
      qt_tensor x0 = TENSOR(c2, &fake_dev, QT_F32, 1, 4, 0);
      LAUNCH_FAILS("a fake:0 tensor for a fake:1 kernel", c2, k1d, CFG(1, 1, 1, 1, 1, 1, 0), 2,
                   ((qt_kernel_arg[]){ AT(&x0), AI(1) }),
                   "argument 1, x (float *), is on fake:0; the kernel runs on fake:1");
      qt_tensor_release(&x0);
      qt_kernel_release(k1d);
    }
    qt_kernel_release(k0);
    qt_ctx_release(c2);
  }

  /* more expressions than QT_KERNEL_MAXPARAMS still find their disk entry */
  {
    enum { NEXPR = 70 };
    static char names[NEXPR][16];
    const char *list[NEXPR];
    for (int i = 0; i < NEXPR; i++) {
      snprintf(names[i], sizeof names[i], "many<%d>", i);
      list[i] = names[i];
    }
    static const char *SRC_EXPR = "template <int N> __global__ void many(float *x) {}\n";
    qt_kernel_opts eo;
    memset(&eo, 0, sizeof eo);
    eo.nexpressions = NEXPR;
    eo.expressions = list;
    int counts[2];
    for (int pass = 0; pass < 2; pass++) {
      qt_ctx *c2 = new_ctx();
      compiles = F.compile_calls;
      qt_kernel *km = COMPILE(c2, SRC_EXPR, "many<3>", &eo, "8");
      counts[pass] = F.compile_calls - compiles;
      if (km != NULL)
        CHECK(strcmp(F.last_get, "many<3>") == 0, "many<3>: kernel_get asked for '%s'", F.last_get);
      qt_kernel_release(km);
      qt_ctx_release(c2);
    }
    CHECK(counts[0] == 1, "70 expressions: the first context compiled %d times", counts[0]);
    CHECK(counts[1] == 0,
              "qt_kernel_compile with opts.nexpressions = 70 (\"many<0>\" ... \"many<69>\"), "
              "name \"many<3>\", in two fresh contexts: expected the second to hit the disk, "
              "got %d compiles (kernel_disk_write writes 70 lowered names, kernel_disk_read "
              "rejects nlowered > QT_KERNEL_MAXPARAMS, so the entry is rewritten every time)",
              counts[1]);
  }

  /* QLUA_KERNEL_CACHE=0: no disk at all */
  use_cache_home("xdg-off", kdir, sizeof kdir);
  setenv("QLUA_KERNEL_CACHE", "0", 1);
  c = FRESH_COMPILE(SRC_DISK, "dk", "8,4");
  CHECK(c == 1, "QLUA_KERNEL_CACHE=0: %d compiles", c);
  c = FRESH_COMPILE(SRC_DISK, "dk", "8,4");
  CHECK(c == 1, "QLUA_KERNEL_CACHE=0: a fresh context compiled %d times, expected 1 (no disk)",
        c);
  CHECK(count_qkc(kdir, NULL, 0) == 0, "QLUA_KERNEL_CACHE=0 wrote %d entries",
        count_qkc(kdir, NULL, 0));
  ctx = new_ctx();
  CHECK_OK("qt_kernel_cache_clear with the disk cache off", qt_kernel_cache_clear(ctx), ctx);
  qt_ctx_release(ctx);
  setenv("QLUA_KERNEL_CACHE", "1", 1);
  c = FRESH_COMPILE(SRC_DISK, "dk", "8,4");
  CHECK(c == 1 && count_qkc(kdir, NULL, 0) == 1, "QLUA_KERNEL_CACHE=1: %d compiles, %d entries",
        c, count_qkc(kdir, NULL, 0));
  unsetenv("QLUA_KERNEL_CACHE");

  /* an unwritable cache directory is not an error */
  use_cache_home("xdg-ro", kdir, sizeof kdir);
  char xdg_ro[900];
  snprintf(xdg_ro, sizeof xdg_ro, "%s/xdg-ro", scratch);
  rm_tree(xdg_ro);  /* a file where the directory should be */
  CHECK(write_whole(xdg_ro, "a file, not a directory", 23), "cannot write %s", xdg_ro);
  c = FRESH_COMPILE(SRC_DISK, "dk", "8,4");
  CHECK(c == 1, "with a cache directory that cannot be made: %d compiles", c);
}

/* Two processes (or more) compile one new source at once: both succeed, one valid entry. */
static void test_concurrent(void) {
  char kdir[800];
  use_cache_home("xdg-race", kdir, sizeof kdir);
  for (int round = 0; round < 2; round++) {
    char src[200];
    snprintf(src, sizeof src, "extern \"C\" __global__ void race(float *x, int n) { /* %d */ }\n",
             round);
    int fds[2];
    if (pipe(fds) != 0) {
      fail(__LINE__, "pipe: %s", strerror(errno));
      return;
    }
    enum { NCHILD = 4 };
    pid_t pids[NCHILD];
    fflush(NULL);
    for (int i = 0; i < NCHILD; i++) {
      pids[i] = fork();
      if (pids[i] == 0) {
        close(fds[1]);
        char byte;
        while (read(fds[0], &byte, 1) < 0 && errno == EINTR) {
        }
        F.compile_sleep_ms = 150;  /* every child misses the disk, and all write at once */
        qt_ctx *ctx = qt_ctx_new();
        set_table("8,4");
        qt_kernel *k = NULL;
        int rc = ctx ? qt_kernel_compile(ctx, &k, &fake_dev, src, "race", NULL) : -1;
        int status = 0;
        if (rc != 0) {
          printf("FAIL: child %d of round %d: compile failed: '%s'\n", i, round,
                 ctx ? ctx->err.msg : "no context");
          status = 1;
        } else {
          qt_tensor x;
          qt_tensor_init(&x);
          int64_t size[1] = { 4 };
          qt_launch_cfg cfg = CFG(1, 1, 1, 4, 1, 1, 0);
          if (qt_empty(ctx, &x, &fake_dev, QT_F32, 1, size) != 0 ||
              qt_kernel_launch(ctx, k, &cfg, 2, (qt_kernel_arg[]){ AT(&x), AI(4) }) != 0) {
            printf("FAIL: child %d of round %d: launch failed: '%s'\n", i, round, ctx->err.msg);
            status = 1;
          }
          qt_tensor_release(&x);
          qt_kernel_release(k);
        }
        qt_ctx_release(ctx);
        fflush(stdout);
        _exit(status);
      }
      if (pids[i] < 0) fail(__LINE__, "fork: %s", strerror(errno));
    }
    close(fds[0]);
    close(fds[1]);  /* all children start */
    for (int i = 0; i < NCHILD; i++) {
      if (pids[i] <= 0) continue;
      int status = 0;
      waitpid(pids[i], &status, 0);
      CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
            "round %d: child %d ended with status %d (signal %d)", round, i,
            WIFEXITED(status) ? WEXITSTATUS(status) : -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    }
    CHECK(count_tmp(kdir) == 0, "round %d: temporary files left after the race", round);
    int c = FRESH_COMPILE(src, "race", "8,4");
    CHECK(c == 0, "round %d: after the race, a fresh context compiled %d times (the entry is "
          "not valid)", round, c);
  }
  CHECK(count_qkc(kdir, NULL, 0) == 2, "%d entries after two races, expected 2",
        count_qkc(kdir, NULL, 0));
}

/* Past the file-size limit (RLIMIT_FSIZE, `ulimit -f`) an entry cannot be written: the
** write must fail with EFBIG, not kill the process with SIGXFSZ (the default action), and
** leave no temporary file; the compile itself succeeds (the disk cache is an optimisation).
** In a child, whose limit is 4 KiB and whose source (the fake's image) is 12 KiB. In round
** 1 the caller has SIGXFSZ blocked and one already pending: it must still be pending after
** (it was the caller's, not ours to take). */
static void test_file_limit(void) {
  char kdir[800];
  use_cache_home("xdg-fsize", kdir, sizeof kdir);
  for (int round = 0; round < 2; round++) {
    char *src = malloc(13000);
    if (src == NULL) return;
    int n = snprintf(src, 13000, "extern \"C\" __global__ void big(float *x, int n) { /* %d ",
                     round);
    memset(src + n, 'x', 12000);
    snprintf(src + n + 12000, 13000 - (size_t)(n + 12000), " */ }\n");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      struct rlimit lim = { 4096, 4096 };
      int status = 0;
      if (setrlimit(RLIMIT_FSIZE, &lim) != 0) {
        printf("FAIL: setrlimit: %s\n", strerror(errno));
        _exit(1);
      }
      sigset_t xfsz, pending;
      sigemptyset(&xfsz);
      sigaddset(&xfsz, SIGXFSZ);
      if (round == 1) {
        pthread_sigmask(SIG_BLOCK, &xfsz, NULL);
        raise(SIGXFSZ);
      }
      qt_ctx *ctx = qt_ctx_new();
      set_table("8,4");
      qt_kernel *k = NULL;
      int rc = ctx ? qt_kernel_compile(ctx, &k, &fake_dev, src, "big", NULL) : -1;
      if (rc != 0) {
        printf("FAIL: round %d: the compile failed: '%s'\n", round, ctx ? ctx->err.msg : "");
        status = 1;
      }
      if (round == 1) {
        sigemptyset(&pending);
        if (sigpending(&pending) != 0 || sigismember(&pending, SIGXFSZ) != 1) {
          printf("FAIL: round 1: the caller's pending SIGXFSZ was taken\n");
          status = 1;
        }
        const struct timespec now = { 0, 0 };
        sigtimedwait(&xfsz, NULL, &now);
      }
      if (k != NULL) qt_kernel_release(k);
      if (ctx != NULL) qt_ctx_release(ctx);
      fflush(stdout);
      _exit(status);
    }
    free(src);
    if (pid < 0) {
      fail(__LINE__, "fork: %s", strerror(errno));
      return;
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "round %d: a cache entry past the file-size limit ended the child with status %d "
          "(signal %d)", round, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
          WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    CHECK(count_tmp(kdir) == 0 && count_qkc(kdir, NULL, 0) == 0,
          "round %d: past the file-size limit: %d temporary files and %d entries left", round,
          count_tmp(kdir), count_qkc(kdir, NULL, 0));
  }
}

/* ================================================================== 5. streams */

static void test_streams(void) {
  qt_ctx *ctx = new_ctx();
  void *stream = (void *)&stream;
  int rc = qt_native_stream(ctx, qt_cpu_device(), &stream);
  CHECK_ERROR("qt_native_stream on the CPU", rc, ctx, "stream: cpu has no stream (only GPUs do)");
  CHECK(stream == NULL, "the CPU's stream is %p, expected NULL", stream);
  rc = qt_native_stream(ctx, NULL, &stream);
  CHECK_ERROR("qt_native_stream of no device", rc, ctx, "stream: no device has no stream");
  rc = qt_native_stream(ctx, &fake_dev, &stream);
  CHECK(rc == 0 && stream == &fake_stream_token, "the fake device's stream: rc %d, %p (expected "
        "%p)", rc, stream, (void *)&fake_stream_token);
  qt_ctx_release(ctx);
}

/* ================================================================== 6. release orders */

static void test_release_order(void) {
  qt_ctx *ctx = new_ctx();
  static const char IMG[] = "NAMES:_Z3fooPfS_i";
  qt_tensor x = TENSOR(ctx, &fake_dev, QT_F32, 1, 8, 0);
  qt_tensor y = TENSOR(ctx, &fake_dev, QT_F32, 1, 8, 0);
  qt_launch_cfg cfg = CFG(1, 1, 1, 8, 1, 1, 0);

  /* a module released before its kernel: the kernel holds it */
  qt_module *m = NULL;
  qt_kernel *k = NULL;
  int live = F.live;
  CHECK_OK("module load", qt_module_load(ctx, &m, &fake_dev, IMG, sizeof IMG - 1), ctx);
  set_table("8,8,4");
  if (m != NULL) CHECK_OK("module kernel", qt_module_kernel(ctx, &k, m, "_Z3fooPfS_i", NULL), ctx);
  qt_kernel *k2 = NULL;
  if (m != NULL) CHECK_OK("module kernel again", qt_module_kernel(ctx, &k2, m, "_Z3fooPfS_i", NULL), ctx);
  int unloads = F.unloads;
  qt_module_release(m);
  CHECK(F.unloads == unloads && F.live == live + 1, "releasing the module under two kernels "
        "unloaded it");
  if (k != NULL) {
    int rc = launch_args(ctx, k, cfg, 3, (qt_kernel_arg[]){ AT(&x), AT(&y), AI(8) });
    CHECK(rc == 0 && F.launched != NULL && strcmp(F.launched->name, "_Z3fooPfS_i") == 0,
          "a kernel whose module was released does not launch: rc %d '%s'", rc,
          rc ? ctx->err.msg : "");
    CHECK(rc == 0 && bytes_are(0, &(void *){ data_ptr(&x) }, 8) &&
              bytes_are(1, &(void *){ data_ptr(&y) }, 8) && bytes_are(2, &(int32_t){ 8 }, 4),
          "the launch's bytes");
  }
  qt_kernel_release(k);
  CHECK(F.unloads == unloads, "releasing one of two kernels unloaded the module");
  if (k2 != NULL) CHECK_OK("the second kernel launches",
                           launch_args(ctx, k2, cfg, 3, (qt_kernel_arg[]){ AT(&x), AT(&y), AI(8) }),
                           ctx);
  qt_kernel_release(k2);
  CHECK(F.unloads == unloads + 1 && F.live == live, "the last kernel's release: %d unloads, %d "
        "live modules (expected 1, %d)", F.unloads - unloads, F.live, live);

  /* a compiled kernel outlives its context's cache and its context */
  qt_ctx *other = new_ctx();
  qt_kernel *kc = COMPILE(other, SRC_DISK, "dk", NULL, "8,4");
  unloads = F.unloads;
  qt_ctx_release(other);  /* frees the memory cache: its module reference goes */
  CHECK(F.unloads == unloads, "releasing the context unloaded a module a kernel holds");
  if (kc != NULL) {
    int rc = launch_args(ctx, kc, cfg, 2, (qt_kernel_arg[]){ AT(&x), AI(1) });
    CHECK(rc == 0, "a kernel of a released context does not launch: rc %d '%s'", rc,
          rc ? ctx->err.msg : "");
  }
  qt_kernel_release(kc);
  CHECK(F.unloads == unloads + 1, "the kernel's release after its context's: %d unloads",
        F.unloads - unloads);

  /* a context released with its cache full: every module unloaded */
  other = new_ctx();
  for (int i = 0; i < 3; i++) {
    char src[120];
    snprintf(src, sizeof src, "extern \"C\" __global__ void many(float *x, int n) { /* %d */ }", i);
    qt_kernel *kk = COMPILE(other, src, "many", NULL, "8,4");
    qt_kernel_release(kk);
  }
  live = F.live;
  qt_ctx_release(other);
  CHECK(F.live == live - 3, "releasing a context with 3 cached modules left %d of them",
        F.live - (live - 3));

  qt_tensor_release(&x);
  qt_tensor_release(&y);
  qt_ctx_release(ctx);
}

/* ================================================================== main */

/* ================================================================== 7. generated sources */

/* With KERNEL_HARNESS_SOURCES set, each generated source is also written there as
** NN-what.cu, so the spec can compile them with the real NVRTC (which needs no GPU): a source
** that would not compile on the GPU then fails on any machine with the toolkit. */
static int dumped = 0;
static void dump_source_at(int line, const char *what) {
  const char *dir = getenv("KERNEL_HARNESS_SOURCES");
  if (dir == NULL || dir[0] == '\0' || F.job_source == NULL) return;
  char path[900];
  snprintf(path, sizeof path, "%s/%02d-%s.cu", dir, ++dumped, what);
  if (!write_whole(path, F.job_source, strlen(F.job_source)))
    fail(line, "cannot write %s: %s", path, strerror(errno));
}
#define NVRTC_CHECK(what) dump_source_at(__LINE__, what)

static bool source_has(const char *needle) {
  return F.job_source != NULL && strstr(F.job_source, needle) != NULL;
}
#define CHECK_SOURCE(what, needle) \
  CHECK(source_has(needle), "%s: the source lacks '%s':\n%s", what, needle, F.job_source)

static void test_codegen(void) {
  qt_ctx *ctx = new_ctx();
  setenv("QLUA_KERNEL_CACHE", "0", 1);  /* every variant reaches the fake compile */
  qt_codegen *fma = NULL;
  CHECK_OK("elementwise", qt_elementwise_new(ctx, &fma, "T x, T y, T z", "T w",
                                             "w = x * y + z", "fused", NULL), ctx);
  static const qt_dtype DTYPES[] = { QT_F32, QT_F64, QT_I32, QT_I64, QT_U8, QT_BOOL, QT_F16,
                                     QT_BF16 };
  for (size_t d = 0; fma != NULL && d < sizeof DTYPES / sizeof DTYPES[0]; d++) {
    qt_dtype dt = DTYPES[d];
    const char *name = qt_dtypes[dt].name;
    bool half = dt == QT_F16 || dt == QT_BF16;
    const char *ctype = dt == QT_F16 ? "__half" : dt == QT_BF16 ? "__nv_bfloat16" : NULL;
    qt_tensor x = TENSOR(ctx, &fake_dev, dt, 1, 8, 0), z = TENSOR(ctx, &fake_dev, dt, 1, 8, 0);
    qt_tensor m = TENSOR(ctx, &fake_dev, dt, 2, 8, 8), res[1];
    /* dense: x, z tensors, y a number */
    set_table(NULL);
    qt_kernel_arg y = qt_is_float(dt) ? AF(0.1) : AI(1);
    int rc = qt_codegen_call(ctx, fma, 3, (qt_kernel_arg[]){ AT(&x), y, AT(&z) }, -1, res);
    CHECK(rc == 0, "%s: fused(x, number, z): rc %d '%s'", name, rc, ctx->err.msg);
    if (rc == 0) {
      CHECK(res[0].dtype == dt, "%s: the output is %s", name, qt_dtypes[res[0].dtype].name);
      qt_tensor_release(&res[0]);
      CHECK(source_has("#include <cuda_fp16.h>") == half,
            "%s: the 16-bit helpers are %s the source", name, half ? "missing from" : "in");
      if (half) {
        char want[160];
        CHECK_SOURCE(name, "typedef float T;");
        snprintf(want, sizeof want, "const %s *_qp_x", ctype);
        CHECK_SOURCE(name, want);
        CHECK_SOURCE(name, "float y,");  /* the number, in float32 as PyTorch's */
        CHECK_SOURCE(name, "const float x = _qload(_qp_x[i]);");
        snprintf(want, sizeof want, "_qref<%s> w = { &_qp_w[i] };", ctype);
        CHECK_SOURCE(name, want);
      }
      NVRTC_CHECK(name);
    }
    /* strided: a transposed view and a broadcast row, the output given */
    qt_tensor t, row, out;
    qt_tensor_init(&t), qt_tensor_init(&row), qt_tensor_init(&out);
    int64_t size8[2] = { 8, 8 };
    CHECK_OK("transpose", qt_transpose(ctx, &t, &m, 0, 1), ctx);
    CHECK_OK("expand", qt_expand(ctx, &row, &x, 2, size8), ctx);
    out = TENSOR(ctx, &fake_dev, dt, 2, 8, 8);
    rc = qt_codegen_call(ctx, fma, 4, (qt_kernel_arg[]){ AT(&t), AT(&row), AT(&m), AT(&out) }, -1,
                         res);
    CHECK(rc == 0, "%s: fused(t, row, m, out): rc %d '%s'", name, rc, ctx->err.msg);
    if (rc == 0) {
      qt_tensor_release(&res[0]);
      if (half) CHECK_SOURCE(name, "const float x = _qload(_qp_x[_qo0]);");
      NVRTC_CHECK(name);
    }
    qt_tensor_release(&t), qt_tensor_release(&row), qt_tensor_release(&out);
    qt_tensor_release(&x), qt_tensor_release(&z), qt_tensor_release(&m);
  }
  qt_codegen_release(fma);

  /* a reduction of 16-bit inputs: float32 partials (4 bytes of shared memory a thread),
  ** the output written through a _qref; and one with a float64 reduce type */
  for (int variant = 0; variant < 4; variant++) {
    qt_dtype dt = variant % 2 ? QT_BF16 : QT_F16;
    qt_reduction_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.in_params = "T x, T s";
    spec.out_params = "T y";
    spec.map_expr = "x * x * s";
    spec.reduce_expr = "a + b";
    spec.identity = "0";
    spec.post_map_expr = "y = a; y += 1; y = y * 0.5f";
    spec.reduce_type = variant < 2 ? NULL : "float64";
    spec.name = "sumsq";
    qt_codegen *r = NULL;
    CHECK_OK("reduction", qt_reduction_new(ctx, &r, &spec), ctx);
    if (r == NULL) continue;
    qt_tensor x = TENSOR(ctx, &fake_dev, dt, 2, 6, 70), res[1];
    for (int dim = -1; dim <= 1; dim++) {
      set_table(NULL);
      int rc = qt_codegen_call(ctx, r, 2, (qt_kernel_arg[]){ AT(&x), AF(2) }, dim, res);
      CHECK(rc == 0, "reduction %s dim %d: rc %d '%s'", qt_dtypes[dt].name, dim, rc, ctx->err.msg);
      if (rc != 0) continue;
      CHECK(res[0].dtype == dt, "reduction: the output is %s", qt_dtypes[res[0].dtype].name);
      qt_tensor_release(&res[0]);
      CHECK(F.cfg.shared == 256 * (variant < 2 ? 4u : 8u), "reduction %s: %zu bytes of shared "
            "memory for the partials", qt_dtypes[dt].name, F.cfg.shared);
      CHECK_SOURCE("reduction", variant < 2 ? "typedef float _qR;" : "typedef double _qR;");
      CHECK_SOURCE("reduction", dt == QT_F16 ? "_qref<__half> y = { &_qp_y[_qrow] };"
                                             : "_qref<__nv_bfloat16> y = { &_qp_y[_qrow] };");
      NVRTC_CHECK("reduction");
    }
    qt_tensor_release(&x);
    qt_codegen_release(r);
  }
  unsetenv("QLUA_KERNEL_CACHE");
  free(F.job_source);
  F.job_source = NULL;
  qt_ctx_release(ctx);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *s = getenv("KERNEL_HARNESS_STRICT");
  strict = s != NULL && strcmp(s, "1") == 0;
  bool own_scratch = argc < 2;
  if (!own_scratch) {
    snprintf(scratch, sizeof scratch, "%s", argv[1]);
    mkdir(scratch, 0700);
  } else {
    const char *tmp = getenv("TMPDIR");
    snprintf(scratch, sizeof scratch, "%s/kernel-harness-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (mkdtemp(scratch) == NULL) {
      printf("FAIL: mkdtemp %s: %s\n", scratch, strerror(errno));
      return 1;
    }
  }
  /* never the user's own cache: everything below lives in the scratch directory */
  unsetenv("QLUA_KERNEL_CACHE");
  char kdir[800];
  use_cache_home("xdg0", kdir, sizeof kdir);
  fake_init();

  printf("1. signatures from source\n");
  test_signatures();
  printf("2. signatures from mangled names\n");
  test_mangled();
  printf("3. launches\n");
  test_launches();
  printf("4. caches\n");
  test_caches();
  test_concurrent();
  test_file_limit();
  printf("5. native streams\n");
  test_streams();
  printf("6. release orders\n");
  test_release_order();
  printf("7. generated sources\n");
  test_codegen();

  CHECK(F.live == 0, "%d fake modules still loaded at the end (a module leaked)", F.live);
  if (own_scratch) rm_tree(scratch);
  printf("%d known bug%s of kernel.c reproduced%s; %d no longer reproduce\n", known_bugs,
         known_bugs == 1 ? "" : "s", strict ? " (strict: they fail the run)" : "", fixed_bugs);
  if (failures > 0) {
    printf("kernel_core_harness: %d failure%s\n", failures, failures == 1 ? "" : "s");
    return 1;
  }
  printf("kernel_core_harness: ok\n");
  return 0;
}
