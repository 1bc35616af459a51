/*
** npy.c — reading and writing NumPy .npy files (see npy.h for what is supported).
**
** The format: the magic "\x93NUMPY", a major and minor version byte, the header length
** (little-endian uint16 for 1.0, uint32 for 2.0 and 3.0), then the header: a Python dict
** literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces
** and ended by '\n', then the raw elements.
**
** Loading never returns a partial tensor: the header is parsed and checked, and the file
** size compared with the data size, before anything is allocated; the tensor is made only
** when every byte has been read. The header parser is a small hand-written scanner for
** the dict literal (strings in either quote, True/False, tuples of integers), tolerant of
** spacing and key order, and it rejects anything else with a message instead of guessing
** (a raw control character, a NUL above all, included).
**
** Saving never destroys what it did not make: files.c replaces a regular file by a
** temporary file written beside it, fsync'd and renamed over it; FIFOs and devices are
** written in place; nothing but our own temporary file is ever removed.
*/
#include "core/format/npy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/files.h"
#include "ops.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_ALIGN 64
#define NPY_MAX_HEADER (1 << 20)  /* sanity bound; NumPy's own headers are < 1 KiB */
#define NPY_SHAPE_LEN 400

static bool npy_host_is_little_endian(void) {
  const uint16_t one = 1;
  unsigned char first;
  memcpy(&first, &one, 1);
  return first == 1;
}

/* Each dtype's .npy code (a format fact, so it is here and not in the dtype list), one
** macro per dtype suffix: the table is made from the dtype list, so a new dtype without
** its NPY_DESCR_<sfx> does not compile. NULL for bfloat16, which NumPy has no code for
** (safetensors files carry it). */
#define NPY_DESCR_f32 "<f4"
#define NPY_DESCR_f64 "<f8"
#define NPY_DESCR_i32 "<i4"
#define NPY_DESCR_i64 "<i8"
#define NPY_DESCR_b8 "|b1"
#define NPY_DESCR_u8 "|u1"
#define NPY_DESCR_f16 "<f2"
#define NPY_DESCR_bf16 NULL
#define NPY_ROW_(P, E, sfx, ...) [E] = NPY_DESCR_##sfx,
static const char *const npy_descr[QT_NDTYPES] = {QT_DTYPE_LIST(NPY_ROW_, ~)};
#undef NPY_ROW_

/* A message from a core function that npy.c called ("empty: cpu: out of memory ...")
** renamed to the user's call ("load: cpu: out of memory ..."); a device name that leads a
** message stays (qt_err_as). */
static int npy_rename_error(qt_ctx *ctx, const char *as) { return qt_err_as(&ctx->err, as); }

/* ================================================================== save */

/* What npy's producer writes: the header, then the data (files.c does the rest). */
typedef struct npy_bytes {
  const void *header;
  size_t header_len;
  const void *data;
  size_t nbytes;
} npy_bytes;

static int npy_produce(qt_ctx *ctx, qt_file_sink *sink, void *arg) {
  (void)ctx;
  const npy_bytes *b = arg;
  if (qt_file_write(sink, b->header, b->header_len) != 0) return -1;
  if (qt_file_write(sink, b->data, b->nbytes) != 0) return -1;
  return 0;
}

/* The header NumPy's write_array would produce for this dtype and shape, preamble
** included; returns its length (a multiple of 64). */
static size_t npy_make_header(char *buf, size_t cap, const qt_tensor *t, int *major) {
  char dict[NPY_SHAPE_LEN + 100];
  int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                   npy_descr[t->dtype]);
  for (int d = 0; d < t->ndim; d++)
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%s%lld", d ? ", " : "",
                  (long long)t->size[d]);
  n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", t->ndim == 1 ? "," : "");

  size_t dict_len = (size_t)n;
  *major = dict_len + 1 + 10 > 65535 ? 2 : 1;
  size_t preamble = *major == 1 ? 10 : 12;
  size_t total = preamble + dict_len + 1;
  total = (total + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
  if (total > cap) return 0;
  size_t header_len = total - preamble;

  memcpy(buf, NPY_MAGIC, NPY_MAGIC_LEN);
  buf[6] = (char)*major;
  buf[7] = 0;
  if (*major == 1) {
    buf[8] = (char)(header_len & 0xff);
    buf[9] = (char)(header_len >> 8);
  } else {
    for (int i = 0; i < 4; i++) buf[8 + i] = (char)((header_len >> (8 * i)) & 0xff);
  }
  memcpy(buf + preamble, dict, dict_len);
  memset(buf + preamble + dict_len, ' ', header_len - dict_len - 1);
  buf[total - 1] = '\n';
  return total;
}

/* A CPU tensor that is contiguous is written straight from its memory; anything else is
** read into a host buffer first (qt_read_all: strided copy on the CPU, download from a
** GPU). The file is then written by qt_file_save (files.c), which never removes what it
** did not create. */
int qt_npy_save(qt_ctx *ctx, const char *path, const qt_tensor *t) {
  if (qt_tensor_check(t, "save", &ctx->err)) return -1;
  if (!npy_host_is_little_endian())
    return qt_errorf(&ctx->err, "save: .npy files are little-endian; this host is not");
  if ((int)t->dtype < 0 || (int)t->dtype >= QT_NDTYPES)
    return qt_errorf(&ctx->err, "save: unknown dtype %d", (int)t->dtype);
  if (npy_descr[t->dtype] == NULL)
    return qt_errorf(&ctx->err, "save: .npy has no code for %s (qlua.save_safetensors keeps it)",
                     qt_dtypes[t->dtype].name);

  char header[2048];
  int major;
  size_t header_len = npy_make_header(header, sizeof header, t, &major);
  if (header_len == 0) return qt_errorf(&ctx->err, "save: header too long");

  size_t nbytes = (size_t)qt_numel(t) * qt_elsize(t->dtype);
  const void *data = NULL;
  void *buffer = NULL;
  if (nbytes > 0) {
    if (t->storage->device->kind == QT_DEV_CPU && qt_is_contiguous(t)) {
      data = (const char *)t->storage->data + (size_t)t->offset * qt_elsize(t->dtype);
    } else {
      buffer = malloc(nbytes);
      if (buffer == NULL)
        return qt_errorf(&ctx->err, "save: out of host memory (%zu bytes)", nbytes);
      if (qt_read_all(ctx, t, buffer)) {
        free(buffer);
        return npy_rename_error(ctx, "save");
      }
      data = buffer;
    }
  }

  qt_path_shown shown;
  npy_bytes bytes = { header, header_len, data, nbytes };
  int rc = qt_file_save(ctx, "save", path, qt_path_shorten(path, &shown), npy_produce, &bytes);
  free(buffer);
  return rc;
}

/* ================================================================== header parsing */

typedef struct npy_scan {
  const char *p, *end;
  qt_ctx *ctx;
  const char *shown;  /* the path as messages show it (qt_path_shorten) */
} npy_scan;

static int npy_malformed(npy_scan *s, const char *what) {
  return qt_errorf(&s->ctx->err, "load: malformed header in '%s' (%s)", s->shown, what);
}

static void npy_skip_space(npy_scan *s) {
  while (s->p < s->end && (*s->p == ' ' || *s->p == '\t' || *s->p == '\n' || *s->p == '\r'))
    s->p++;
}

static bool npy_accept(npy_scan *s, char c) {
  npy_skip_space(s);
  if (s->p < s->end && *s->p == c) {
    s->p++;
    return true;
  }
  return false;
}

/* A Python string literal in ' or " quotes, without escapes (none of the values NumPy
** writes for these dtypes has one). NumPy writes the header with repr(), which escapes
** every control character, so a raw one (a NUL above all: 'descr': '<f4\0junk' would
** compare equal to '<f4' in C) is a malformed header. */
static int npy_string(npy_scan *s, char *buf, size_t cap) {
  npy_skip_space(s);
  if (s->p >= s->end || (*s->p != '\'' && *s->p != '"')) return npy_malformed(s, "expected a string");
  char quote = *s->p++;
  size_t n = 0;
  while (s->p < s->end && *s->p != quote) {
    unsigned char c = (unsigned char)*s->p;
    if (c == '\0') return npy_malformed(s, "a NUL byte in a string");
    if (c < 0x20 || c == 0x7f) return npy_malformed(s, "a control character in a string");
    if (c == '\\' || n + 1 >= cap) return npy_malformed(s, "string too long or escaped");
    buf[n++] = *s->p++;
  }
  if (s->p >= s->end) return npy_malformed(s, "unterminated string");
  s->p++;
  buf[n] = '\0';
  return 0;
}

static bool npy_word(npy_scan *s, const char *word) {
  npy_skip_space(s);
  size_t n = strlen(word);
  if ((size_t)(s->end - s->p) >= n && memcmp(s->p, word, n) == 0) {
    s->p += n;
    return true;
  }
  return false;
}

/* (), (5,), (2, 3) — integers, with Python 2's trailing L tolerated. */
static int npy_shape(npy_scan *s, int *ndim, int64_t *size) {
  if (!npy_accept(s, '(')) return npy_malformed(s, "shape is not a tuple");
  *ndim = 0;
  for (;;) {
    if (npy_accept(s, ')')) return 0;
    npy_skip_space(s);
    if (s->p >= s->end || *s->p < '0' || *s->p > '9')
      return npy_malformed(s, "shape holds something other than non-negative integers");
    int64_t v = 0;
    while (s->p < s->end && *s->p >= '0' && *s->p <= '9') {
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *s->p - '0', &v))
        return npy_malformed(s, "shape size too large");
      s->p++;
    }
    if (s->p < s->end && (*s->p == 'L' || *s->p == 'l')) s->p++;
    if (*ndim == QT_MAXDIM)
      return qt_errorf(&s->ctx->err, "load: '%s' has more than %d dimensions", s->shown,
                       QT_MAXDIM);
    size[(*ndim)++] = v;
    if (npy_accept(s, ',')) continue;
    if (npy_accept(s, ')')) return 0;
    return npy_malformed(s, "expected ',' or ')' in shape");
  }
}

typedef struct npy_header {
  char descr[32];
  bool fortran_order;
  int ndim;
  int64_t size[QT_MAXDIM];
} npy_header;

static int npy_parse_header(npy_scan *s, npy_header *h) {
  bool have_descr = false, have_order = false, have_shape = false;
  if (!npy_accept(s, '{')) return npy_malformed(s, "not a dict");
  for (;;) {
    if (npy_accept(s, '}')) break;
    char key[32];
    if (npy_string(s, key, sizeof key)) return -1;
    if (!npy_accept(s, ':')) return npy_malformed(s, "expected ':' after a key");
    if (strcmp(key, "descr") == 0) {
      npy_skip_space(s);
      if (s->p < s->end && *s->p == '[')
        return qt_errorf(&s->ctx->err, "load: unsupported dtype (a structured array) in '%s'",
                         s->shown);
      if (npy_string(s, h->descr, sizeof h->descr)) return -1;
      have_descr = true;
    } else if (strcmp(key, "fortran_order") == 0) {
      if (npy_word(s, "True")) h->fortran_order = true;
      else if (npy_word(s, "False")) h->fortran_order = false;
      else return npy_malformed(s, "fortran_order is not True or False");
      have_order = true;
    } else if (strcmp(key, "shape") == 0) {
      if (npy_shape(s, &h->ndim, h->size)) return -1;
      have_shape = true;
    } else {
      char what[64];
      snprintf(what, sizeof what, "unexpected key '%s'", key);
      return npy_malformed(s, what);
    }
    if (npy_accept(s, ',')) continue;
    if (npy_accept(s, '}')) break;
    return npy_malformed(s, "expected ',' or '}'");
  }
  npy_skip_space(s);
  if (s->p != s->end) return npy_malformed(s, "text after the dict");
  if (!have_descr) return npy_malformed(s, "no 'descr'");
  if (!have_order) return npy_malformed(s, "no 'fortran_order'");
  if (!have_shape) return npy_malformed(s, "no 'shape'");
  return 0;
}

/* ================================================================== load */

static int npy_dtype_of(qt_ctx *ctx, const char *shown, const char *descr, qt_dtype *dtype) {
  for (int d = 0; d < QT_NDTYPES; d++) {
    if (npy_descr[d] == NULL) continue;
    /* one byte has no order: '|' is NumPy's mark, and '<', '>', '=' mean the same */
    bool any_order = qt_elsize((qt_dtype)d) == 1 && descr[0] != '\0' &&
                     strchr("<>=|", descr[0]) != NULL;
    if (strcmp(descr, npy_descr[d]) == 0 ||
        (any_order && strcmp(descr + 1, npy_descr[d] + 1) == 0)) {
      *dtype = (qt_dtype)d;
      return 0;
    }
  }
  if (descr[0] == '>') {
    for (int d = 0; d < QT_NDTYPES; d++)
      if (npy_descr[d] != NULL && strcmp(descr + 1, npy_descr[d] + 1) == 0)
        return qt_errorf(&ctx->err,
                         "load: '%s' is big-endian ('%s'); only little-endian data is supported"
                         " (in NumPy: a.astype(a.dtype.newbyteorder('<')))",
                         shown, descr);
  }
  char names[160] = "";  /* "float32, float64, ... and float16" */
  int last = QT_NDTYPES - 1;
  while (npy_descr[last] == NULL) last--;
  for (int d = 0; d <= last; d++) {
    if (npy_descr[d] == NULL) continue;
    size_t used = strlen(names);
    snprintf(names + used, sizeof names - used, "%s%s",
             d == 0 ? "" : d == last ? " and " : ", ", qt_dtypes[d].name);
  }
  return qt_errorf(&ctx->err, "load: unsupported dtype '%s' in '%s' (%s are supported)", descr,
                   shown, names);
}

/* Reads the preamble and the header into *h; leaves f at the first data byte. */
static int npy_read_header(qt_ctx *ctx, FILE *f, const char *shown, npy_header *h) {
  unsigned char pre[12];
  if (fread(pre, 1, 8, f) != 8 || memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
    return qt_errorf(&ctx->err, "load: '%s' is not a .npy file (bad magic)", shown);
  int major = pre[6], minor = pre[7];
  size_t header_len;
  if (major == 1) {
    if (fread(pre + 8, 1, 2, f) != 2)
      return qt_errorf(&ctx->err, "load: '%s' is truncated (in the header)", shown);
    header_len = (size_t)pre[8] | (size_t)pre[9] << 8;
  } else if (major == 2 || major == 3) {
    if (fread(pre + 8, 1, 4, f) != 4)
      return qt_errorf(&ctx->err, "load: '%s' is truncated (in the header)", shown);
    header_len = (size_t)pre[8] | (size_t)pre[9] << 8 | (size_t)pre[10] << 16 |
                 (size_t)pre[11] << 24;
  } else {
    return qt_errorf(&ctx->err, "load: '%s' has .npy format version %d.%d (1.0 to 3.0 are "
                     "supported)", shown, major, minor);
  }
  if (header_len > NPY_MAX_HEADER)
    return qt_errorf(&ctx->err, "load: malformed header in '%s' (%zu bytes long)", shown,
                     header_len);
  char *text = malloc(header_len + 1);
  if (text == NULL) return qt_errorf(&ctx->err, "load: out of host memory");
  if (fread(text, 1, header_len, f) != header_len) {
    free(text);
    return qt_errorf(&ctx->err, "load: '%s' is truncated (in the header)", shown);
  }
  text[header_len] = '\0';
  npy_scan s = { text, text + header_len, ctx, shown };
  memset(h, 0, sizeof *h);
  int rc = npy_parse_header(&s, h);
  free(text);
  return rc;
}

/* Fortran-order data of shape (a, b, c) is C-order data of shape (c, b, a): it is read as
** that, then permuted and copied into a C-order tensor. */
static int npy_from_fortran(qt_ctx *ctx, qt_tensor *t) {
  int perm[QT_MAXDIM];
  for (int d = 0; d < t->ndim; d++) perm[d] = t->ndim - 1 - d;
  qt_tensor permuted, copy;
  qt_tensor_init(&permuted);
  qt_tensor_init(&copy);
  if (qt_permute(ctx, &permuted, t, t->ndim, perm)) return npy_rename_error(ctx, "load");
  int rc = qt_contiguous(ctx, &copy, &permuted);
  qt_tensor_release(&permuted);
  if (rc) return npy_rename_error(ctx, "load");
  qt_tensor_release(t);
  *t = copy;
  return 0;
}

int qt_npy_load(qt_ctx *ctx, qt_tensor *out, const char *path, qt_device *dev) {
  char shape[NPY_SHAPE_LEN];
  if (!npy_host_is_little_endian())
    return qt_errorf(&ctx->err, "load: .npy files are little-endian; this host is not");
  qt_path_shown shown_buf;
  const char *shown = qt_path_shorten(path, &shown_buf);  /* the path in messages */
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return qt_errorf(&ctx->err, "load: cannot open '%s': %s", shown, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
    fclose(f);
    return qt_errorf(&ctx->err, "load: cannot open '%s': %s", shown, strerror(EISDIR));
  }

  int rc = -1;
  qt_tensor t, moved;
  qt_tensor_init(&t);
  qt_tensor_init(&moved);
  npy_header h;
  qt_dtype dtype = QT_F32;
  if (npy_read_header(ctx, f, shown, &h) || npy_dtype_of(ctx, shown, h.descr, &dtype)) goto cleanup;

  int64_t file_size[QT_MAXDIM];  /* the shape as the bytes are laid out */
  for (int d = 0; d < h.ndim; d++)
    file_size[d] = h.fortran_order ? h.size[h.ndim - 1 - d] : h.size[d];
  int64_t numel = qt_contiguous_strides(h.ndim, h.size, NULL);
  if (numel < 0) {
    qt_errorf(&ctx->err, "load: shape %s in '%s' is too large",
              qt_shape_str(h.ndim, h.size, shape, sizeof shape), shown);
    goto cleanup;
  }
  size_t nbytes = (size_t)numel * qt_elsize(dtype);

  /* Refuse a short file before allocating for it. */
  long here = ftell(f);
  if (here >= 0 && fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode)) {
    size_t have = st.st_size > here ? (size_t)(st.st_size - here) : 0;
    if (have < nbytes) {
      qt_errorf(&ctx->err, "load: '%s' is truncated: expected %zu bytes of data, found %zu",
                shown, nbytes, have);
      goto cleanup;
    }
  }

  if (qt_empty(ctx, &t, qt_cpu_device(), dtype, h.ndim, file_size)) {
    npy_rename_error(ctx, "load");
    goto cleanup;
  }
  if (nbytes > 0) {
    size_t got = fread(t.storage->data, 1, nbytes, f);
    if (got != nbytes) {
      if (ferror(f))
        qt_errorf(&ctx->err, "load: cannot read '%s': %s", shown, strerror(errno));
      else
        qt_errorf(&ctx->err, "load: '%s' is truncated: expected %zu bytes of data, found %zu",
                  shown, nbytes, got);
      goto cleanup;
    }
  }
  if (dtype == QT_BOOL) {  /* any nonzero byte is true; a C bool must hold 0 or 1 */
    unsigned char *b = (unsigned char *)t.storage->data;
    for (size_t i = 0; i < nbytes; i++) b[i] = b[i] != 0;
  }
  if (h.fortran_order && h.ndim > 1 && npy_from_fortran(ctx, &t)) goto cleanup;
  if (dev != NULL && dev != qt_cpu_device()) {
    if (qt_to_device(ctx, &moved, &t, dev)) {
      npy_rename_error(ctx, "load");
      goto cleanup;
    }
    qt_tensor_release(&t);
    t = moved;
    qt_tensor_init(&moved);
  }
  *out = t;
  qt_tensor_init(&t);
  rc = 0;
cleanup:
  fclose(f);
  qt_tensor_release(&t);
  qt_tensor_release(&moved);
  return rc;
}
