/*
** kernel.c — code the user brings: compiled kernels, loaded modules, launches.
**
** The device does the CUDA work (compile, module_load, kernel_get, launch: kernels/kernel.cu);
** this file owns what is the same on any device that runs user code:
**   - a kernel's signature (read by core/kernel/kernel_sig.c), which decides how each Lua value
**     is passed;
**   - the caches: compiled modules in memory (this state's context) and compiled images
**     on disk, keyed by everything the image depends on;
**   - the checks before a launch: argument count and kinds, tensor device, dtype and
**     contiguity, numbers in range, grid and block and shared memory within the limits.
** Nothing reaches the device until every check has passed.
**
** Lifetimes: a module is counted (the memory cache holds one reference, every kernel
** object one more), so clearing the cache never pulls a module from under a live kernel.
** Launches go on the device's one stream, so memory freed after a launch is handed out
** again only to work queued behind that launch.
*/
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/ops_internal.h"
#include "device.h"
#include "core/files.h"
#include "ops.h"

/* ================================================================== objects */

struct qt_module {
  qt_refcount refcount;
  qt_device *device;
  void *handle;               /* the device's */
  /* kernels already looked up (a lookup asks the driver for attributes: ~0.1 ms) */
  int nkernels;
  struct { char *name; void *handle; qt_kernel_info info; } *kernels;
};

struct qt_kernel {
  qt_refcount refcount;
  qt_module *module;
  void *handle;
  char name[128];             /* as the user gave it (a template instantiation included) */
  int nparams;                /* -1: unknown (a module kernel without types) */
  bool packed;                /* made for qt_kernel_launch_packed (generated kernels) */
  qt_param params[QT_KERNEL_MAXPARAMS];
  qt_kernel_info info;
};

static void kernel_module_retain(qt_module *m) {
  atomic_fetch_add_explicit(&m->refcount, 1, memory_order_relaxed);
}

void qt_module_release(qt_module *m) {
  if (m == NULL || atomic_fetch_sub_explicit(&m->refcount, 1, memory_order_acq_rel) != 1) return;
  if (m->device->iface->module_unload != NULL) m->device->iface->module_unload(m->device, m->handle);
  for (int i = 0; i < m->nkernels; i++) free(m->kernels[i].name);
  free(m->kernels);
  free(m);
}

void qt_kernel_release(qt_kernel *k) {
  if (k == NULL || atomic_fetch_sub_explicit(&k->refcount, 1, memory_order_acq_rel) != 1) return;
  qt_module_release(k->module);
  free(k);
}

qt_device *qt_module_device(const qt_module *m) { return m->device; }
const char *qt_kernel_name(const qt_kernel *k) { return k->name; }
qt_device *qt_kernel_device(const qt_kernel *k) { return k->module->device; }
int qt_kernel_nparams(const qt_kernel *k) { return k->nparams; }
const qt_param *qt_kernel_param(const qt_kernel *k, int i) {
  return i >= 0 && i < k->nparams ? &k->params[i] : NULL;
}
const qt_kernel_info *qt_kernel_limits(const qt_kernel *k) { return &k->info; }

/* The device must run user code: on the CPU every entry point says so. */
static int kernel_check_device(qt_ctx *ctx, const char *op, qt_device *dev) {
  if (dev == NULL || dev->iface->module_load == NULL || dev->iface->launch == NULL)
    return qt_errorf(&ctx->err, "%s: user kernels run on a GPU, and %s is not one%s", op,
                     dev != NULL ? dev->name : "the device",
                     qt_gpu_count() == 0 ? " (this qlua sees no GPU)" : "");
  return 0;
}

/* ================================================================== caches */

/* FNV-1a, 64 bits: the file name of a disk entry (the entry holds its whole key, so a
** collision is a miss, never a wrong module). */
static uint64_t kernel_hash(const void *data, size_t n, uint64_t h) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
#define KERNEL_HASH_SEED 0xcbf29ce484222325ull

/* A field of the key: tag, length, bytes (so no two different inputs give one key). */
static void kernel_key_field(ops_buf *b, char tag, const char *text) {
  char head[32];
  size_t n = strlen(text);
  int h = snprintf(head, sizeof head, "%c%zu:", tag, n);
  ops_buf_add(b, head, (size_t)h);
  ops_buf_add(b, text, n);
  ops_buf_add(b, "\n", 1);
}

typedef struct kernel_entry {
  struct kernel_entry *next;
  uint64_t hash;
  char *key;
  size_t key_len;
  qt_device *device;
  qt_module *module;
  char **lowered;
  int nlowered;
} kernel_entry;

typedef struct kernel_cache {
  kernel_entry *first;
} kernel_cache;

static void kernel_entry_free(kernel_entry *e) {
  qt_module_release(e->module);
  for (int i = 0; i < e->nlowered; i++) free(e->lowered[i]);
  free(e->lowered);
  free(e->key);
  free(e);
}

static void kernel_cache_free(void *cache) {
  kernel_cache *c = cache;
  if (c == NULL) return;
  for (kernel_entry *e = c->first, *next; e != NULL; e = next) {
    next = e->next;
    kernel_entry_free(e);
  }
  free(c);
}

static kernel_cache *kernel_cache_of(qt_ctx *ctx) {
  if (ctx->kernel_cache == NULL) {
    ctx->kernel_cache = calloc(1, sizeof(kernel_cache));
    ctx->kernel_cache_free = kernel_cache_free;
  }
  return ctx->kernel_cache;
}

/* The disk cache directory, or false when it is off. */
static bool kernel_cache_dir(char *buf, size_t len) {
  const char *off = getenv("QLUA_KERNEL_CACHE");
  if (off != NULL && strcmp(off, "0") == 0) return false;
  const char *xdg = getenv("XDG_CACHE_HOME");
  const char *home = getenv("HOME");
  int n;
  if (xdg != NULL && xdg[0] == '/') n = snprintf(buf, len, "%s/qlua/kernels", xdg);
  else if (home != NULL && home[0] != '\0') n = snprintf(buf, len, "%s/.cache/qlua/kernels", home);
  else return false;
  return n > 0 && (size_t)n < len;
}

static int kernel_mkdirs(const char *path) {
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return -1;
  return 0;
}

#define KERNEL_MAGIC "QLUAKC01"
#define KERNEL_MAX_ENTRY ((size_t)512 << 20)

static void kernel_put_u64(ops_buf *b, uint64_t v) {
  unsigned char bytes[8];
  for (int i = 0; i < 8; i++) bytes[i] = (unsigned char)(v >> (8 * i));
  ops_buf_add(b, bytes, 8);
}

static bool kernel_get_u64(const unsigned char **p, const unsigned char *end, uint64_t *v) {
  if ((size_t)(end - *p) < 8) return false;
  *v = 0;
  for (int i = 0; i < 8; i++) *v |= (uint64_t)(*p)[i] << (8 * i);
  *p += 8;
  return true;
}

/* Reads an entry: the key must match byte for byte and the checksum hold, or it is a
** miss (a torn or foreign file is then overwritten by the next compile). */
static bool kernel_disk_read(const char *path, const ops_buf *key, qt_compile_result *out) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "rb");
  if (f == NULL) return false;
  struct stat st;
  bool ok = false;
  unsigned char *data = NULL;
  if (fstat(fileno(f), &st) != 0 || st.st_size < 40 || (size_t)st.st_size > KERNEL_MAX_ENTRY)
    goto done;
  data = malloc((size_t)st.st_size);
  if (data == NULL || fread(data, 1, (size_t)st.st_size, f) != (size_t)st.st_size) goto done;
  const unsigned char *p = data, *end = data + st.st_size - 8;
  uint64_t sum;
  const unsigned char *sum_at = end;
  if (!kernel_get_u64(&sum_at, data + st.st_size, &sum) ||
      kernel_hash(data, (size_t)(end - data), KERNEL_HASH_SEED) != sum)
    goto done;
  if (memcmp(p, KERNEL_MAGIC, 8) != 0) goto done;
  p += 8;
  uint64_t n;
  if (!kernel_get_u64(&p, end, &n) || n != key->len || (size_t)(end - p) < n ||
      memcmp(p, key->data, n) != 0)
    goto done;
  p += n;
  uint64_t nlowered;
  if (!kernel_get_u64(&p, end, &nlowered) || nlowered > (uint64_t)(end - p) / 8) goto done;
  if (nlowered > 0) {
    out->lowered = calloc((size_t)nlowered, sizeof(char *));
    if (out->lowered == NULL) goto done;
    out->nlowered = (int)nlowered;
  }
  for (uint64_t i = 0; i < nlowered; i++) {
    if (!kernel_get_u64(&p, end, &n) || (size_t)(end - p) < n || n > 4096) goto done;
    out->lowered[i] = malloc((size_t)n + 1);
    if (out->lowered[i] == NULL) goto done;
    memcpy(out->lowered[i], p, (size_t)n);
    out->lowered[i][n] = '\0';
    p += n;
  }
  if (!kernel_get_u64(&p, end, &n) || n == 0 || (size_t)(end - p) != n) goto done;
  out->image = malloc((size_t)n);
  if (out->image == NULL) goto done;
  memcpy(out->image, p, (size_t)n);
  out->image_size = (size_t)n;
  ok = true;
done:
  fclose(f);
  free(data);
  if (!ok) qt_compile_result_free(out);
  return ok;
}

/* Writes an entry atomically: a private temporary file renamed over the name, so two
** processes compiling at once both succeed and a reader never sees half a file. A
** failure to write is not an error (the cache is an optimisation). */
static void kernel_disk_write(const char *dir, const char *path, const ops_buf *key,
                              const qt_compile_result *r) {
  if (kernel_mkdirs(dir) != 0) return;
  ops_buf b = {0};
  ops_buf_add(&b, KERNEL_MAGIC, 8);
  kernel_put_u64(&b, key->len);
  ops_buf_add(&b, key->data, key->len);
  kernel_put_u64(&b, (uint64_t)r->nlowered);
  for (int i = 0; i < r->nlowered; i++) {
    kernel_put_u64(&b, strlen(r->lowered[i]));
    ops_buf_add(&b, r->lowered[i], strlen(r->lowered[i]));
  }
  kernel_put_u64(&b, r->image_size);
  ops_buf_add(&b, r->image, r->image_size);
  if (!b.failed) kernel_put_u64(&b, kernel_hash(b.data, b.len, KERNEL_HASH_SEED));
  if (!b.failed) {
    static _Atomic unsigned counter;
    char tmp[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/.tmp.%ld.%u", dir, (long)getpid(),
             atomic_fetch_add(&counter, 1));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) {
      /* through files.c's writer: past the file-size limit (ulimit -f) the write fails
      ** with EFBIG instead of the SIGXFSZ that would end the program */
      bool ok = qt_file_write_fd(fd, b.data, b.len) == 0;
      ok = close(fd) == 0 && ok;
      if (!ok || rename(tmp, path) != 0) unlink(tmp);
    }
  }
  free(b.data);
}

void qt_compile_result_free(qt_compile_result *r) {
  free(r->image);
  for (int i = 0; i < r->nlowered; i++) free(r->lowered ? r->lowered[i] : NULL);
  free(r->lowered);
  memset(r, 0, sizeof *r);
}

int qt_kernel_cache_clear(qt_ctx *ctx) {
  kernel_cache *c = ctx->kernel_cache;
  if (c != NULL) {
    for (kernel_entry *e = c->first, *next; e != NULL; e = next) {
      next = e->next;
      kernel_entry_free(e);
    }
    c->first = NULL;
  }
  char dir[PATH_MAX];
  if (!kernel_cache_dir(dir, sizeof dir)) return 0;
  DIR *d = opendir(dir);
  if (d == NULL) return 0;
  struct dirent *ent;
  while ((ent = readdir(d)) != NULL) {
    size_t n = strlen(ent->d_name);
    bool ours = (n > 4 && strcmp(ent->d_name + n - 4, ".qkc") == 0) ||
                strncmp(ent->d_name, ".tmp.", 5) == 0;
    if (!ours) continue;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, ent->d_name) < (int)sizeof path) unlink(path);
  }
  closedir(d);
  return 0;
}

/* ================================================================== modules and kernels */

static int kernel_module_new(qt_ctx *ctx, const char *op, qt_device *dev, const void *image,
                             size_t nbytes, qt_module **out) {
  *out = NULL;
  qt_module *m = calloc(1, sizeof *m);
  if (m == NULL) return qt_errorf(&ctx->err, "%s: out of host memory", op);
  atomic_init(&m->refcount, 1);
  m->device = dev;
  if (dev->iface->module_load(dev, image, nbytes, &m->handle, &ctx->err) != 0) {
    free(m);
    return -1;
  }
  *out = m;
  return 0;
}

int qt_module_load(qt_ctx *ctx, qt_module **out, qt_device *dev, const void *image,
                   size_t nbytes) {
  *out = NULL;
  if (kernel_check_device(ctx, "module", dev)) return -1;
  if (nbytes == 0) return qt_errorf(&ctx->err, "module: the image is empty");
  return kernel_module_new(ctx, "module", dev, image, nbytes, out);
}

int qt_module_kernel_names(qt_ctx *ctx, qt_module *m, void (*each)(const char *, void *),
                           void *arg) {
  return m->device->iface->module_kernels(m->device, m->handle, each, arg, &ctx->err);
}

/* The kernel `lowered` of m, from the module's list or the device. */
static int kernel_lookup(qt_ctx *ctx, qt_module *m, const char *lowered, void **handle,
                         qt_kernel_info *info) {
  for (int i = 0; i < m->nkernels; i++)
    if (strcmp(m->kernels[i].name, lowered) == 0) {
      *handle = m->kernels[i].handle;
      *info = m->kernels[i].info;
      return 0;
    }
  if (m->device->iface->kernel_get(m->device, m->handle, lowered, handle, info, &ctx->err) != 0)
    return -1;
  void *grown = realloc(m->kernels, sizeof *m->kernels * (size_t)(m->nkernels + 1));
  char *name = strdup(lowered);
  if (grown == NULL || name == NULL) {
    free(name);
    if (grown != NULL) m->kernels = grown;
    return 0;  /* not remembered; still usable */
  }
  m->kernels = grown;
  m->kernels[m->nkernels].name = name;
  m->kernels[m->nkernels].handle = *handle;
  m->kernels[m->nkernels].info = *info;
  m->nkernels++;
  return 0;
}

/* A kernel object over m's `lowered`, with params (nparams -1: unknown). */
static int kernel_make(qt_ctx *ctx, const char *op, qt_module *m, const char *display,
                       const char *lowered, const qt_param *params, int nparams,
                       qt_kernel **out) {
  *out = NULL;
  void *handle;
  qt_kernel_info info;
  if (kernel_lookup(ctx, m, lowered, &handle, &info)) return -1;
  if (nparams >= 0 && info.nparams >= 0 && info.nparams != nparams)
    return qt_errorf(&ctx->err, "%s: '%s' has %d parameters in the compiled code, but its "
                     "signature lists %d", op, display, info.nparams, nparams);
  qt_kernel *k = calloc(1, sizeof *k);
  if (k == NULL) return qt_errorf(&ctx->err, "%s: out of host memory", op);
  atomic_init(&k->refcount, 1);
  kernel_module_retain(m);
  k->module = m;
  k->handle = handle;
  k->info = info;
  snprintf(k->name, sizeof k->name, "%s", display);
  k->nparams = nparams;
  if (nparams > 0) memcpy(k->params, params, sizeof *params * (size_t)nparams);
  /* a parameter's size must be what its type says, or the launch would misplace bytes */
  for (int i = 0; i < nparams && info.nparams == nparams; i++) {
    size_t want = params[i].kind == QT_PARAM_I32 || params[i].kind == QT_PARAM_U32 ||
                          params[i].kind == QT_PARAM_F32 ? 4
                  : params[i].kind == QT_PARAM_F16 || params[i].kind == QT_PARAM_BF16 ? 2
                  : params[i].kind == QT_PARAM_BOOL ? 1 : 8;
    if (info.param_size[i] != want) {
      qt_errorf(&ctx->err, "%s: '%s' parameter %d is %zu bytes in the compiled code, but its "
                "signature says %s (%zu bytes)", op, display, i + 1, info.param_size[i],
                params[i].type, want);
      qt_kernel_release(k);
      return -1;
    }
  }
  *out = k;
  return 0;
}

int qt_module_kernel(qt_ctx *ctx, qt_kernel **out, qt_module *m, const char *name,
                     const char *signature) {
  qt_param params[QT_KERNEL_MAXPARAMS];
  int nparams = -1;
  if (signature != NULL) {
    if (ops_kernel_parse_list(ctx, "module", signature, params, &nparams))
      return -1;
  } else if (ops_kernel_demangle(name, params, &nparams) != 0) {
    nparams = -1;
  }
  return kernel_make(ctx, "module", m, name, name, params, nparams, out);
}

int qt_kernel_compile(qt_ctx *ctx, qt_kernel **out, qt_device *dev, const char *source,
                      const char *name, const qt_kernel_opts *opts) {
  const char *op = "kernel";
  *out = NULL;
  if (kernel_check_device(ctx, op, dev)) return -1;
  if (name == NULL || name[0] == '\0') return qt_errorf(&ctx->err, "%s: no kernel name", op);
  if (strlen(name) >= sizeof((qt_kernel *)0)->name)
    return qt_errorf(&ctx->err, "%s: the name '%.40s...' is too long", op, name);
  qt_kernel_opts none;
  memset(&none, 0, sizeof none);
  if (opts == NULL) opts = &none;

  /* the signature first: a bad declaration fails before any compile */
  qt_param params[QT_KERNEL_MAXPARAMS];
  int nparams = 0;
  if (opts->packed) {
    nparams = -1;
  } else if (opts->signature != NULL) {
    if (ops_kernel_parse_list(ctx, op, opts->signature, params, &nparams))
      return -1;
  } else if (ops_kernel_parse_source(ctx, op, source, name, params, &nparams)) {
    return -1;
  }

  /* the expressions: the user's, plus the kernel's own name (so C++ names and templates
  ** are found by their lowered names; an extern "C" name lowers to itself) */
  int nexpr = opts->nexpressions, self = -1;
  for (int i = 0; i < nexpr; i++)
    if (strcmp(opts->expressions[i], name) == 0) self = i;
  const char **expr = malloc(sizeof(char *) * (size_t)(nexpr + 1));
  if (expr == NULL) return qt_errorf(&ctx->err, "%s: out of host memory", op);
  for (int i = 0; i < nexpr; i++) expr[i] = opts->expressions[i];
  if (self < 0) {
    self = nexpr;
    expr[nexpr++] = name;
  }

  char id[128];
  if (dev->iface->compiler_id(dev, id, sizeof id, &ctx->err) != 0) {
    free(expr);
    return -1;
  }
  ops_buf key = {0};
  kernel_key_field(&key, 'v', "qlua kernel 1");
  kernel_key_field(&key, 'c', id);
  for (int i = 0; i < opts->noptions; i++) kernel_key_field(&key, 'o', opts->options[i]);
  for (int i = 0; i < opts->nheaders; i++) {
    kernel_key_field(&key, 'h', opts->header_names[i]);
    kernel_key_field(&key, 'H', opts->header_sources[i]);
  }
  for (int i = 0; i < nexpr; i++) kernel_key_field(&key, 'e', expr[i]);
  kernel_key_field(&key, 's', source);
  if (key.failed) {
    free(expr);
    free(key.data);
    return qt_errorf(&ctx->err, "%s: out of host memory", op);
  }
  uint64_t hash = kernel_hash(key.data, key.len, KERNEL_HASH_SEED);

  int rc = -1;
  kernel_cache *cache = kernel_cache_of(ctx);
  kernel_entry *hit = NULL;
  for (kernel_entry *e = cache ? cache->first : NULL; e != NULL; e = e->next)
    if (e->hash == hash && e->device == dev && e->key_len == key.len &&
        memcmp(e->key, key.data, key.len) == 0) {
      hit = e;
      break;
    }
  if (hit == NULL) {
    char dir[PATH_MAX - 64], path[PATH_MAX];
    bool disk = kernel_cache_dir(dir, sizeof dir);
    if (disk) snprintf(path, sizeof path, "%s/%016llx.qkc", dir, (unsigned long long)hash);
    qt_compile_result result;
    memset(&result, 0, sizeof result);
    bool from_disk = disk && kernel_disk_read(path, &key, &result) && result.nlowered == nexpr;
    if (!from_disk) {
      qt_compile_result_free(&result);
      qt_compile_job job;
      memset(&job, 0, sizeof job);
      job.source = source;
      job.program = "kernel.cu";
      job.noptions = opts->noptions;
      job.options = opts->options;
      job.nheaders = opts->nheaders;
      job.header_names = opts->header_names;
      job.header_sources = opts->header_sources;
      job.nexpressions = nexpr;
      job.expressions = expr;
      if (dev->iface->compile(dev, &job, &result, &ctx->err) != 0) goto done;
      if (disk) kernel_disk_write(dir, path, &key, &result);
    }
    qt_module *m = NULL;
    if (kernel_module_new(ctx, op, dev, result.image, result.image_size, &m) != 0) {
      qt_compile_result_free(&result);
      goto done;
    }
    free(result.image);
    result.image = NULL;
    hit = calloc(1, sizeof *hit);
    if (hit == NULL || cache == NULL) {
      free(hit);
      qt_module_release(m);
      qt_compile_result_free(&result);
      qt_errorf(&ctx->err, "%s: out of host memory", op);
      goto done;
    }
    hit->hash = hash;
    hit->key = key.data;
    hit->key_len = key.len;
    key.data = NULL;
    hit->device = dev;
    hit->module = m;
    hit->lowered = result.lowered;
    hit->nlowered = result.nlowered;
    hit->next = cache->first;
    cache->first = hit;
  }
  rc = kernel_make(ctx, op, hit->module, name, hit->lowered[self], params, nparams, out);
  if (rc == 0) (*out)->packed = opts->packed;
done:
  free(expr);
  free(key.data);
  return rc;
}

/* ================================================================== launches */

static const char *kernel_param_str(const qt_param *p, char *buf, size_t len) {
  if (p->name[0]) snprintf(buf, len, "%s (%s)", p->name, p->type);
  else snprintf(buf, len, "%s", p->type);
  return buf;
}

static int kernel_check_cfg(qt_ctx *ctx, const qt_kernel *k, const qt_launch_cfg *cfg) {
  const qt_kernel_info *in = &k->info;
  const char *axis = "xyz";
  uint64_t threads = 1;
  for (int d = 0; d < 3; d++) {
    if (cfg->block[d] == 0 || cfg->grid[d] == 0)
      return qt_errorf(&ctx->err, "launch: kernel '%s': grid and block sizes must be at least "
                       "1 (grid %ux%ux%u, block %ux%ux%u)", k->name, cfg->grid[0], cfg->grid[1],
                       cfg->grid[2], cfg->block[0], cfg->block[1], cfg->block[2]);
    if (in->max_block[d] && cfg->block[d] > in->max_block[d])
      return qt_errorf(&ctx->err, "launch: kernel '%s': block.%c = %u is over the GPU's "
                       "limit of %u (blocks at most %ux%ux%u, %d threads)", k->name, axis[d],
                       cfg->block[d], in->max_block[d], in->max_block[0], in->max_block[1],
                       in->max_block[2], in->max_threads);
    if (in->max_grid[d] && cfg->grid[d] > in->max_grid[d])
      return qt_errorf(&ctx->err, "launch: kernel '%s': grid.%c = %u is over the GPU's limit "
                       "of %u (grids at most %ux%ux%u)", k->name, axis[d], cfg->grid[d],
                       in->max_grid[d], in->max_grid[0], in->max_grid[1], in->max_grid[2]);
    threads *= cfg->block[d];
  }
  if (in->max_threads > 0 && threads > (uint64_t)in->max_threads)
    return qt_errorf(&ctx->err, "launch: kernel '%s': a block of %ux%ux%u is %llu threads; "
                     "this kernel allows at most %d per block", k->name, cfg->block[0],
                     cfg->block[1], cfg->block[2], (unsigned long long)threads, in->max_threads);
  if (cfg->shared > in->max_dynamic_shared)
    return qt_errorf(&ctx->err, "launch: kernel '%s': %zu bytes of dynamic shared memory; this "
                     "kernel can have at most %zu (it uses %zu statically)", k->name,
                     cfg->shared, in->max_dynamic_shared, in->static_shared);
  return 0;
}

int qt_kernel_launch_packed(qt_ctx *ctx, qt_kernel *k, const qt_launch_cfg *cfg, void **args) {
  if (kernel_check_cfg(ctx, k, cfg)) return -1;
  qt_device *dev = k->module->device;
  return dev->iface->launch(dev, k->handle, cfg, args, &ctx->err);
}

/* A Lua number as an integer of [lo, hi], or an error naming the parameter. */
static int kernel_integer(qt_ctx *ctx, const qt_kernel *k, int i, const char *what,
                          const qt_kernel_arg *a, int64_t lo, int64_t hi, int64_t *out) {
  int64_t v = 0;
  if (a->is_float) {
    double f = a->value.f;
    if (!(f == floor(f)) || !(f >= -9223372036854775808.0 && f < 9223372036854775808.0))
      return qt_errorf(&ctx->err, "launch: kernel '%s': argument %d, %s, wants an integer, "
                       "got %g", k->name, i + 1, what, f);
    v = (int64_t)f;
  } else {
    v = a->value.i;
  }
  if (v < lo || v > hi)
    return qt_errorf(&ctx->err, "launch: kernel '%s': argument %d, %s: %lld is out of range "
                     "(%lld to %lld)", k->name, i + 1, what, (long long)v, (long long)lo,
                     (long long)hi);
  *out = v;
  return 0;
}

typedef union kernel_slot {
  void *ptr;
  qt_cell cell;               /* a __half or __nv_bfloat16: its bits, as a tensor stores them */
  int32_t i32;
  uint32_t u32;
  int64_t i64;
  uint64_t u64;
  float f32;
  double f64;
  bool b;
} kernel_slot;

/* A tensor for pointer parameter p (argument i): live, on the kernel's GPU, of the
** pointee's dtype, contiguous; the slot gets the address of its element 0. */
static int kernel_pack_tensor(qt_ctx *ctx, const qt_kernel *k, int i, const qt_param *p,
                              const qt_tensor *t, kernel_slot *slot) {
  char what[100];
  kernel_param_str(p, what, sizeof what);
  qt_device *dev = k->module->device;
  if (ops_live(ctx, "launch", t)) return -1;
  qt_device *tdev = t->storage->device;
  if (tdev != dev)
    return qt_errorf(&ctx->err, "launch: kernel '%s': argument %d, %s, is on %s; the kernel "
                     "runs on %s", k->name, i + 1, what, tdev->name, dev->name);
  if (p->dtype == QT_PARAM_NO_DTYPE)
    return qt_errorf(&ctx->err, "launch: kernel '%s': argument %d, %s: qlua has no tensor "
                     "dtype for this pointee yet (a void * parameter takes any tensor)",
                     k->name, i + 1, what);
  if (p->dtype != QT_PARAM_ANY_DTYPE && (int)t->dtype != p->dtype)
    return qt_errorf(&ctx->err, "launch: kernel '%s': argument %d, %s, wants a %s tensor, "
                     "got %s", k->name, i + 1, what, qt_dtypes[p->dtype].name,
                     qt_dtypes[t->dtype].name);
  if (!qt_is_contiguous(t))
    return qt_errorf(&ctx->err, "launch: kernel '%s': argument %d, %s: the tensor is not "
                     "contiguous (pass t:contiguous(); a kernel sees only a pointer)",
                     k->name, i + 1, what);
  slot->ptr = (char *)t->storage->data + t->offset * qt_elsize(t->dtype);
  return 0;
}

/* One argument for a parameter known only by its size (a module kernel without types):
** tensors give their pointer, integers an integer and floats a float of that size. */
static int kernel_pack_untyped(qt_ctx *ctx, const qt_kernel *k, int i, const qt_kernel_arg *a,
                               kernel_slot *slot) {
  size_t size = k->info.param_size[i];
  qt_param p;
  memset(&p, 0, sizeof p);
  snprintf(p.type, sizeof p.type, "%zu-byte parameter", size);
  if (a->tensor != NULL) {
    if (size != 8)
      return qt_errorf(&ctx->err, "launch: kernel '%s': argument %d is a tensor, but parameter "
                       "%d is %zu bytes (give the module a signature)", k->name, i + 1, i + 1,
                       size);
    p.kind = QT_PARAM_POINTER;
    p.dtype = QT_PARAM_ANY_DTYPE;
    snprintf(p.type, sizeof p.type, "void *");
    return kernel_pack_tensor(ctx, k, i, &p, a->tensor, slot);
  }
  int64_t v = 0;
  if (size == 4 && !a->is_float) {
    if (kernel_integer(ctx, k, i, p.type, a, INT32_MIN, UINT32_MAX, &v)) return -1;
    slot->u32 = (uint32_t)v;
  } else if (size == 4) {
    slot->f32 = (float)a->value.f;
  } else if (size == 8 && !a->is_float) {
    slot->i64 = a->value.i;
  } else if (size == 8) {
    slot->f64 = a->value.f;
  } else if (size == 1) {
    slot->b = a->value.i != 0;
  } else {
    return qt_errorf(&ctx->err, "launch: kernel '%s': parameter %d is %zu bytes; give the "
                     "module a signature", k->name, i + 1, size);
  }
  return 0;
}

int qt_kernel_launch(qt_ctx *ctx, qt_kernel *k, const qt_launch_cfg *cfg, int nargs,
                     const qt_kernel_arg *args) {
  qt_device *dev = k->module->device;
  if (k->packed)
    return qt_errorf(&ctx->err, "launch: kernel '%s' takes packed arguments only", k->name);
  int nparams = k->nparams >= 0 ? k->nparams : k->info.nparams;
  if (nparams < 0)
    return qt_errorf(&ctx->err, "launch: kernel '%s': its parameters are not known (give a "
                     "signature)", k->name);
  char sig[600] = "";
  if (nargs != nparams) {
    for (int i = 0; i < k->nparams; i++) {
      char one[100];
      size_t used = strlen(sig);
      snprintf(sig + used, sizeof sig - used, "%s%s", i ? ", " : "",
               kernel_param_str(&k->params[i], one, sizeof one));
    }
    return qt_errorf(&ctx->err, "launch: kernel '%s' takes %d argument%s%s%s%s, got %d", k->name,
                     nparams, nparams == 1 ? "" : "s", sig[0] ? " (" : "", sig, sig[0] ? ")" : "",
                     nargs);
  }
  if (kernel_check_cfg(ctx, k, cfg)) return -1;
  kernel_slot slots[QT_KERNEL_MAXPARAMS];
  void *pointers[QT_KERNEL_MAXPARAMS];
  for (int i = 0; i < nargs; i++) {
    const qt_kernel_arg *a = &args[i];
    pointers[i] = &slots[i];
    if (k->nparams < 0) {
      if (kernel_pack_untyped(ctx, k, i, a, &slots[i])) return -1;
      continue;
    }
    const qt_param *p = &k->params[i];
    char what[100];
    kernel_param_str(p, what, sizeof what);
    if (p->kind == QT_PARAM_POINTER) {
      if (a->tensor == NULL)
        return qt_errorf(&ctx->err, "launch: kernel '%s': argument %d, %s, wants a tensor, got "
                         "a %s", k->name, i + 1, what, a->is_bool ? "boolean" : "number");
      if (kernel_pack_tensor(ctx, k, i, p, a->tensor, &slots[i])) return -1;
      continue;
    }
    if (a->tensor != NULL)
      return qt_errorf(&ctx->err, "launch: kernel '%s': argument %d, %s, wants a %s, got a "
                       "tensor", k->name, i + 1, what, p->kind == QT_PARAM_BOOL ? "boolean"
                                                                            : "number");
    int64_t v = 0;
    switch (p->kind) {
      case QT_PARAM_BOOL:
        if (!a->is_bool && (a->is_float || (a->value.i != 0 && a->value.i != 1)))
          return qt_errorf(&ctx->err, "launch: kernel '%s': argument %d, %s, wants a boolean "
                           "(or 0 or 1)", k->name, i + 1, what);
        slots[i].b = a->value.i != 0;
        break;
      case QT_PARAM_F32:
      case QT_PARAM_F64:
      case QT_PARAM_F16:
      case QT_PARAM_BF16:
        if (a->is_bool)
          return qt_errorf(&ctx->err, "launch: kernel '%s': argument %d, %s, wants a number, "
                           "got a boolean", k->name, i + 1, what);
        if (p->kind == QT_PARAM_F32) slots[i].f32 = (float)a->value.f;
        else if (p->kind == QT_PARAM_F64) slots[i].f64 = a->value.f;
        else  /* rounded once from the number (.f), as storing it in a 16-bit tensor does */
          qt_scalar_store(p->kind == QT_PARAM_F16 ? QT_F16 : QT_BF16, &slots[i].cell, a->value);
        break;
      default: {
        if (a->is_bool)
          return qt_errorf(&ctx->err, "launch: kernel '%s': argument %d, %s, wants a number, "
                           "got a boolean", k->name, i + 1, what);
        int64_t lo = p->kind == QT_PARAM_I32 ? INT32_MIN : p->kind == QT_PARAM_I64 ? INT64_MIN : 0;
        int64_t hi = p->kind == QT_PARAM_I32 ? INT32_MAX : p->kind == QT_PARAM_U32 ? UINT32_MAX
                                                                                 : INT64_MAX;
        if (kernel_integer(ctx, k, i, what, a, lo, hi, &v)) return -1;
        if (p->kind == QT_PARAM_I32) slots[i].i32 = (int32_t)v;
        else if (p->kind == QT_PARAM_U32) slots[i].u32 = (uint32_t)v;
        else if (p->kind == QT_PARAM_I64) slots[i].i64 = v;
        else slots[i].u64 = (uint64_t)v;
        break;
      }
    }
  }
  return dev->iface->launch(dev, k->handle, cfg, pointers, &ctx->err);
}

int qt_native_stream(qt_ctx *ctx, qt_device *dev, void **stream) {
  *stream = NULL;
  if (dev == NULL || dev->iface->native_stream == NULL)
    return qt_errorf(&ctx->err, "stream: %s has no stream (only GPUs do)",
                     dev != NULL ? dev->name : "no device");
  *stream = dev->iface->native_stream(dev);
  return 0;
}
