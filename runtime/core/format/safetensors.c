/*
** safetensors.c — reading and writing Hugging Face .safetensors files (see safetensors.h
** for the format and what is checked).
**
** Loading reads the 8-byte length and the header, checks the header completely (jansson
** parses the JSON; the rules the format adds are checked here) and only then allocates,
** one tensor at a time in data order, reading each straight into its storage: the file is
** read front to back once, so a FIFO works too. Every tensor's bytes are accounted for by
** the header before anything is allocated, so a load never allocates more than the file
** holds (a FIFO, whose size is unknown, is checked as it is read).
**
** Saving checks everything it can first (freed tensors, names, metadata, sizes), builds
** the header with jansson in a fixed order, then hands a producer to qt_file_save
** (files.c), which writes the file whole or not at all. Non-contiguous and GPU tensors are
** read into a host buffer one at a time, so the file is never assembled in memory.
*/
#include "core/format/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/files.h"

#define ST_MAX_HEADER 100000000u  /* the reference implementation's bound (MAX_HEADER_SIZE) */
#define ST_NAME_SHOWN 48          /* bytes of a tensor name or key shown in a message */

static const char *const st_load_op = "load_safetensors";
static const char *const st_save_op = "save_safetensors";

/* Each dtype's code in the header (a format fact, so it is here and not in the list), one
** macro per dtype suffix: the table is made from the dtype list, so a new dtype without
** its ST_CODE_<sfx> does not compile. */
#define ST_CODE_f32 "F32"
#define ST_CODE_f64 "F64"
#define ST_CODE_i32 "I32"
#define ST_CODE_i64 "I64"
#define ST_CODE_b8 "BOOL"
#define ST_CODE_u8 "U8"
#define ST_CODE_f16 "F16"
#define ST_CODE_bf16 "BF16"
#define ST_CODE_ROW_(P, E, sfx, ...) [E] = ST_CODE_##sfx,
static const char *const st_codes[QT_NDTYPES] = {QT_DTYPE_LIST(ST_CODE_ROW_, ~)};
#undef ST_CODE_ROW_

static bool st_host_is_little_endian(void) {
  const uint16_t one = 1;
  unsigned char first;
  memcpy(&first, &one, 1);
  return first == 1;
}

/* "BOOL, U8, ... and F64": the codes this build reads, for messages. */
static void st_code_list(char *buf, size_t cap) {
  buf[0] = '\0';
  int shown = 0, total = 0;
  for (int d = 0; d < QT_NDTYPES; d++) total += st_codes[d] != NULL;
  for (int d = 0; d < QT_NDTYPES; d++) {
    if (st_codes[d] == NULL) continue;
    size_t used = strlen(buf);
    snprintf(buf + used, cap - used, "%s%s",
             shown == 0 ? "" : shown == total - 1 ? " and " : ", ", st_codes[d]);
    shown++;
  }
}

/* A core function's message ("empty: cpu: out of memory ...") renamed to the user's call. */
static int st_rename_error(qt_ctx *ctx, const char *as) { return qt_err_as(&ctx->err, as); }

/* ================================================================== strings */

/* The offset of the first byte of s[0..n) that is not part of well-formed UTF-8 (no
** overlong forms, no surrogates, nothing above U+10FFFF), or n when all of it is. */
static size_t st_utf8_bad(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < n) {
    unsigned c = p[i];
    size_t len;
    unsigned min;
    if (c < 0x80) { i++; continue; }
    if (c >= 0xc2 && c <= 0xdf) { len = 2; min = 0x80; c &= 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { len = 3; min = 0x800; c &= 0x0f; }
    else if (c >= 0xf0 && c <= 0xf4) { len = 4; min = 0x10000; c &= 0x07; }
    else return i;
    if (n - i < len) return i;
    for (size_t k = 1; k < len; k++) {
      if ((p[i + k] & 0xc0) != 0x80) return i;
      c = (c << 6) | (p[i + k] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return i;
    i += len;
  }
  return n;
}

typedef struct st_shown {
  char text[ST_NAME_SHOWN + 8];
} st_shown;

/* A name or key as messages show it: at most ST_NAME_SHOWN bytes (cut at a UTF-8
** boundary, "..." added), control characters and NULs as '?'. */
static const char *st_show(const char *s, size_t n, st_shown *buf) {
  size_t take = n;
  if (take > ST_NAME_SHOWN) {
    take = ST_NAME_SHOWN;
    while (take > 0 && ((unsigned char)s[take] & 0xc0) == 0x80) take--;
  }
  for (size_t i = 0; i < take; i++) {
    unsigned char c = (unsigned char)s[i];
    buf->text[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
  }
  memcpy(buf->text + take, take < n ? "..." : "", take < n ? 4 : 1);
  return buf->text;
}

static int st_compare_strings(const char *a, size_t alen, const char *b, size_t blen) {
  int c = memcmp(a, b, alen < blen ? alen : blen);
  if (c != 0) return c;
  return (alen > blen) - (alen < blen);
}

static char *st_copy(const char *s, size_t n) {
  char *c = malloc(n + 1);
  if (c != NULL) {
    memcpy(c, s, n);
    c[n] = '\0';
  }
  return c;
}

/* ================================================================== the result */

void qt_safetensors_init(qt_safetensors *f) { memset(f, 0, sizeof *f); }

void qt_safetensors_free(qt_safetensors *f) {
  for (size_t i = 0; i < f->ntensors; i++) {
    qt_tensor_release(&f->tensors[i].tensor);
    free((char *)f->tensors[i].name.bytes);
  }
  for (size_t i = 0; i < f->nmeta; i++) {
    free((char *)f->meta[i].key.bytes);
    free((char *)f->meta[i].value.bytes);
  }
  free(f->tensors);
  free(f->meta);
  qt_safetensors_init(f);
}

/* ================================================================== load: the header */

/* One entry of the header, checked; the name points into the parsed JSON. */
typedef struct st_item {
  const char *name;
  size_t name_len;
  qt_dtype dtype;
  int ndim;
  int64_t size[QT_MAXDIM];
  uint64_t begin, end;
} st_item;

typedef struct st_reader {
  qt_ctx *ctx;
  const char *shown;  /* the path as messages show it */
} st_reader;

/* "load_safetensors: 'PATH': <what>" */
static int st_fail(const st_reader *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static int st_fail(const st_reader *r, const char *fmt, ...) {
  char what[QT_ERRLEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return qt_errorf(&r->ctx->err, "%s: '%s': %s", st_load_op, r->shown, what);
}

/* A JSON integer >= 0 into *v. */
static bool st_natural(const json_t *j, uint64_t *v) {
  if (!json_is_integer(j) || json_integer_value(j) < 0) return false;
  *v = (uint64_t)json_integer_value(j);
  return true;
}

static int st_dtype_of(const st_reader *r, const char *shown_name, const json_t *j,
                       qt_dtype *dtype) {
  if (!json_is_string(j))
    return st_fail(r, "tensor '%s': dtype is not a string", shown_name);
  const char *code = json_string_value(j);
  size_t len = json_string_length(j);
  for (int d = 0; d < QT_NDTYPES; d++) {
    if (st_codes[d] != NULL && strlen(st_codes[d]) == len && memcmp(st_codes[d], code, len) == 0) {
      *dtype = (qt_dtype)d;
      return 0;
    }
  }
  char codes[96];
  st_code_list(codes, sizeof codes);
  st_shown c;
  return st_fail(r, "tensor '%s' has dtype '%s', which qlua does not read (%s are supported)",
                 shown_name, st_show(code, len, &c), codes);
}

/* One tensor entry: the object under `name`. */
static int st_parse_entry(const st_reader *r, const char *name, size_t name_len,
                          const json_t *entry, st_item *item) {
  st_shown sn;
  const char *shown_name = st_show(name, name_len, &sn);
  if (!json_is_object(entry))
    return st_fail(r, "tensor '%s' is not an object with dtype, shape and data_offsets",
                   shown_name);
  const json_t *dtype = json_object_get(entry, "dtype");
  const json_t *shape = json_object_get(entry, "shape");
  const json_t *offsets = json_object_get(entry, "data_offsets");
  if (dtype == NULL) return st_fail(r, "tensor '%s' has no dtype", shown_name);
  if (shape == NULL) return st_fail(r, "tensor '%s' has no shape", shown_name);
  if (offsets == NULL) return st_fail(r, "tensor '%s' has no data_offsets", shown_name);

  item->name = name;
  item->name_len = name_len;
  if (st_dtype_of(r, shown_name, dtype, &item->dtype)) return -1;

  if (!json_is_array(shape))
    return st_fail(r, "tensor '%s': shape is not a list of non-negative integers", shown_name);
  size_t ndim = json_array_size(shape);
  if (ndim > QT_MAXDIM)
    return st_fail(r, "tensor '%s' has %zu dimensions (at most %d)", shown_name, ndim,
                   QT_MAXDIM);
  item->ndim = (int)ndim;
  bool empty = false;
  for (size_t d = 0; d < ndim; d++) {
    uint64_t s;
    if (!st_natural(json_array_get(shape, d), &s))
      return st_fail(r, "tensor '%s': shape is not a list of non-negative integers",
                     shown_name);
    item->size[d] = (int64_t)s;  /* s <= INT64_MAX: json_int_t is 64 bits */
    empty = empty || s == 0;
  }
  /* The element count in uint64, checked: an empty dimension makes it 0, whatever the
  ** others' product would be. */
  uint64_t numel = empty ? 0 : 1, nbytes = 0;
  bool overflow = false;
  for (int d = 0; d < item->ndim && !empty; d++)
    overflow = overflow || __builtin_mul_overflow(numel, (uint64_t)item->size[d], &numel);
  if (overflow || numel > (uint64_t)INT64_MAX ||
      __builtin_mul_overflow(numel, (uint64_t)qt_elsize(item->dtype), &nbytes)) {
    char shape_text[400];
    return st_fail(r, "tensor '%s' has shape %s, too large to count its bytes", shown_name,
                   qt_shape_str(item->ndim, item->size, shape_text, sizeof shape_text));
  }

  if (!json_is_array(offsets) || json_array_size(offsets) != 2 ||
      !st_natural(json_array_get(offsets, 0), &item->begin) ||
      !st_natural(json_array_get(offsets, 1), &item->end))
    return st_fail(r, "tensor '%s': data_offsets is not [begin, end] of two non-negative "
                   "integers", shown_name);
  if (item->begin > item->end)
    return st_fail(r, "tensor '%s' has data_offsets [%llu, %llu]: begin is after end",
                   shown_name, (unsigned long long)item->begin, (unsigned long long)item->end);
  if (item->end - item->begin != nbytes) {
    char shape_text[400];
    return st_fail(r, "tensor '%s' of shape %s and dtype %s takes %llu bytes, but its "
                   "data_offsets [%llu, %llu] hold %llu", shown_name,
                   qt_shape_str(item->ndim, item->size, shape_text, sizeof shape_text),
                   st_codes[item->dtype], (unsigned long long)nbytes,
                   (unsigned long long)item->begin, (unsigned long long)item->end,
                   (unsigned long long)(item->end - item->begin));
  }
  return 0;
}

static int st_compare_items(const void *pa, const void *pb) {
  const st_item *a = pa, *b = pb;
  if (a->begin != b->begin) return a->begin < b->begin ? -1 : 1;
  if (a->end != b->end) return a->end < b->end ? -1 : 1;
  return st_compare_strings(a->name, a->name_len, b->name, b->name_len);
}

static int st_compare_pairs(const void *pa, const void *pb) {
  const qt_st_pair *a = pa, *b = pb;
  return st_compare_strings(a->key.bytes, a->key.len, b->key.bytes, b->key.len);
}

/* "__metadata__": an object of strings (null: none), copied into out. */
static int st_parse_metadata(const st_reader *r, const json_t *meta, qt_safetensors *out) {
  if (json_is_null(meta)) return 0;
  if (!json_is_object(meta))
    return st_fail(r, "__metadata__ is not an object of strings");
  size_t n = json_object_size(meta);
  if (n == 0) return 0;
  out->meta = calloc(n, sizeof *out->meta);
  if (out->meta == NULL) return st_fail(r, "out of host memory");
  const char *key;
  json_t *value;
  json_object_foreach((json_t *)meta, key, value) {
    size_t key_len = strlen(key);  /* jansson refuses a NUL in a key */
    st_shown sk;
    if (!json_is_string(value))
      return st_fail(r, "__metadata__ value of '%s' is not a string",
                     st_show(key, key_len, &sk));
    qt_st_pair *p = &out->meta[out->nmeta];
    p->key.bytes = st_copy(key, key_len);
    p->value.bytes = st_copy(json_string_value(value), json_string_length(value));
    p->key.len = key_len;
    p->value.len = json_string_length(value);
    out->nmeta++;
    if (p->key.bytes == NULL || p->value.bytes == NULL) return st_fail(r, "out of host memory");
  }
  qsort(out->meta, out->nmeta, sizeof *out->meta, st_compare_pairs);
  return 0;
}

/* The header text checked and parsed into items (sorted by data offset) and metadata.
** data_len is the data section's size, or UINT64_MAX when unknown (not a regular file). */
static int st_parse_header(const st_reader *r, const char *text, size_t n, uint64_t data_len,
                           json_t **root_out, st_item **items_out, size_t *count_out,
                           qt_safetensors *out) {
  if (n == 0 || text[0] != '{')
    return st_fail(r, "the header does not start with '{' (it is not a safetensors file)");
  size_t bad = st_utf8_bad(text, n);
  if (bad < n) return st_fail(r, "the header is not valid UTF-8 (at byte %zu)", bad);
  json_error_t jerr;
  json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
  if (root == NULL) {
    if (json_error_code(&jerr) == json_error_duplicate_key)
      return st_fail(r, "the header has a duplicate key (%s)", jerr.text);
    if (json_error_code(&jerr) == json_error_out_of_memory)
      return st_fail(r, "out of host memory");
    return st_fail(r, "the header is not valid JSON (%s, at byte %d)", jerr.text,
                   jerr.position);
  }
  *root_out = root;
  if (!json_is_object(root)) return st_fail(r, "the header is not a JSON object");

  size_t count = json_object_size(root);
  st_item *items = calloc(count > 0 ? count : 1, sizeof *items);
  if (items == NULL) return st_fail(r, "out of host memory");
  *items_out = items;
  size_t k = 0;
  const char *key;
  json_t *value;
  json_object_foreach(root, key, value) {
    size_t key_len = strlen(key);  /* jansson refuses a NUL in a key */
    if (key_len == 12 && memcmp(key, "__metadata__", 12) == 0) {
      if (st_parse_metadata(r, value, out)) return -1;
      continue;
    }
    if (st_parse_entry(r, key, key_len, value, &items[k])) return -1;
    k++;
  }
  *count_out = k;

  /* Ordered by offset, the tensors must tile the data section: each begins where the one
  ** before it ends (a gap or an overlap is an error), and the last ends at its end. */
  qsort(items, k, sizeof *items, st_compare_items);
  uint64_t covered = 0;
  for (size_t i = 0; i < k; i++) {
    st_shown sa, sb;
    const st_item *it = &items[i];
    if (data_len != UINT64_MAX && it->end > data_len)
      return st_fail(r, "tensor '%s' ends at byte %llu of the data section, which has %llu "
                     "bytes (is the file truncated?)", st_show(it->name, it->name_len, &sa),
                     (unsigned long long)it->end, (unsigned long long)data_len);
    if (it->begin < covered)
      return st_fail(r, "tensors '%s' and '%s' overlap in the data section (at bytes "
                     "%llu..%llu)", st_show(items[i - 1].name, items[i - 1].name_len, &sa),
                     st_show(it->name, it->name_len, &sb), (unsigned long long)it->begin,
                     (unsigned long long)(covered < it->end ? covered : it->end));
    if (it->begin > covered)
      return st_fail(r, "bytes %llu..%llu of the data section belong to no tensor (a gap "
                     "before '%s'; the tensors must cover the data section exactly)",
                     (unsigned long long)covered, (unsigned long long)it->begin,
                     st_show(it->name, it->name_len, &sa));
    covered = it->end;
  }
  if (data_len != UINT64_MAX && covered != data_len)
    return st_fail(r, "the data section has %llu bytes but the tensors cover %llu (%llu "
                   "trailing bytes belong to no tensor)", (unsigned long long)data_len,
                   (unsigned long long)covered, (unsigned long long)(data_len - covered));
  return 0;
}

/* ================================================================== load: the data */

/* Reads the tensors, in data order, into out->tensors. */
static int st_read_tensors(const st_reader *r, FILE *f, const st_item *items, size_t count,
                           qt_device *dev, qt_safetensors *out) {
  qt_ctx *ctx = r->ctx;
  out->tensors = calloc(count > 0 ? count : 1, sizeof *out->tensors);
  if (out->tensors == NULL) return st_fail(r, "out of host memory");
  for (size_t i = 0; i < count; i++) {
    const st_item *it = &items[i];
    qt_st_entry *e = &out->tensors[i];
    qt_tensor_init(&e->tensor);
    e->source = NULL;
    e->name.bytes = st_copy(it->name, it->name_len);
    e->name.len = it->name_len;
    out->ntensors = i + 1;
    if (e->name.bytes == NULL) return st_fail(r, "out of host memory");
    if (qt_empty(ctx, &e->tensor, qt_cpu_device(), it->dtype, it->ndim, it->size))
      return st_rename_error(ctx, st_load_op);
    size_t nbytes = (size_t)(it->end - it->begin);
    if (nbytes > 0) {
      size_t got = fread(e->tensor.storage->data, 1, nbytes, f);
      if (got != nbytes) {
        st_shown sn;
        if (ferror(f)) return st_fail(r, "cannot read: %s", strerror(errno));
        return st_fail(r, "truncated in tensor '%s' (%zu of its %zu bytes are there)",
                       st_show(it->name, it->name_len, &sn), got, nbytes);
      }
    }
    if (it->dtype == QT_BOOL) {  /* any nonzero byte is true; a C bool must hold 0 or 1 */
      unsigned char *b = (unsigned char *)e->tensor.storage->data;
      for (size_t j = 0; j < nbytes; j++) b[j] = b[j] != 0;
    }
    if (dev != NULL && dev != qt_cpu_device()) {
      qt_tensor moved;
      qt_tensor_init(&moved);
      if (qt_to_device(ctx, &moved, &e->tensor, dev)) return st_rename_error(ctx, st_load_op);
      qt_tensor_release(&e->tensor);
      e->tensor = moved;
    }
  }
  return 0;
}

int qt_safetensors_load(qt_ctx *ctx, qt_safetensors *out, const char *path, qt_device *dev) {
  qt_path_shown shown_buf;
  st_reader r = { ctx, qt_path_shorten(path, &shown_buf) };
  qt_safetensors_init(out);
  if (!st_host_is_little_endian())
    return qt_errorf(&ctx->err, "%s: safetensors files are little-endian; this host is not",
                     st_load_op);
  FILE *f = fopen(path, "rb");
  if (f == NULL)
    return qt_errorf(&ctx->err, "%s: cannot open '%s': %s", st_load_op, r.shown,
                     strerror(errno));
  struct stat st;
  bool regular = false;
  if (fstat(fileno(f), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      fclose(f);
      return qt_errorf(&ctx->err, "%s: cannot open '%s': %s", st_load_op, r.shown,
                       strerror(EISDIR));
    }
    regular = S_ISREG(st.st_mode);
  }

  int rc = -1;
  char *text = NULL;
  json_t *root = NULL;
  st_item *items = NULL;
  size_t count = 0;
  qt_safetensors result;
  qt_safetensors_init(&result);

  unsigned char len_bytes[8];
  size_t got = fread(len_bytes, 1, 8, f);
  if (got != 8) {
    if (ferror(f)) st_fail(&r, "cannot read: %s", strerror(errno));
    else st_fail(&r, "only %zu bytes long: a safetensors file starts with an 8-byte header "
                 "length", got);
    goto cleanup;
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | len_bytes[i];
  if (n > ST_MAX_HEADER) {
    st_fail(&r, "the header length is %llu bytes, more than the %u allowed (it is not a "
            "safetensors file, or is damaged)", (unsigned long long)n, ST_MAX_HEADER);
    goto cleanup;
  }
  uint64_t file_size = regular && st.st_size >= 0 ? (uint64_t)st.st_size : 0;
  if (regular && file_size - 8 < n) {
    st_fail(&r, "truncated: the header length is %llu bytes, but only %llu follow it",
            (unsigned long long)n, (unsigned long long)(file_size - 8));
    goto cleanup;
  }
  text = malloc(n > 0 ? (size_t)n : 1);
  if (text == NULL) {
    st_fail(&r, "out of host memory");
    goto cleanup;
  }
  got = fread(text, 1, (size_t)n, f);
  if (got != n) {
    if (ferror(f)) st_fail(&r, "cannot read: %s", strerror(errno));
    else st_fail(&r, "truncated in the header (%zu of its %llu bytes are there)", got,
                 (unsigned long long)n);
    goto cleanup;
  }
  uint64_t data_len = regular ? file_size - 8 - n : UINT64_MAX;
  if (st_parse_header(&r, text, (size_t)n, data_len, &root, &items, &count, &result))
    goto cleanup;
  free(text);
  text = NULL;
  if (st_read_tensors(&r, f, items, count, dev, &result)) goto cleanup;
  if (!regular && fgetc(f) != EOF) {  /* a FIFO's size is known only now */
    st_fail(&r, "bytes follow the last tensor's data (they belong to no tensor)");
    goto cleanup;
  }
  *out = result;
  qt_safetensors_init(&result);
  rc = 0;
cleanup:
  fclose(f);
  free(text);
  free(items);
  json_decref(root);
  qt_safetensors_free(&result);
  return rc;
}

/* ================================================================== save */

/* One tensor as it is written: the caller's entry and its byte count. */
typedef struct st_out {
  const qt_st_entry *entry;
  uint64_t nbytes;
} st_out;

typedef struct st_writer {
  const st_out *outs;        /* in file order (st_compare_outs) */
  size_t n;
  const char *header;        /* the padded JSON */
  size_t header_len;
} st_writer;

/* The length, the header, then each tensor's bytes in file order: straight from memory
** for a contiguous CPU tensor, through a host buffer for anything else. */
static int st_produce(qt_ctx *ctx, qt_file_sink *sink, void *arg) {
  const st_writer *w = arg;
  unsigned char len_bytes[8];
  uint64_t len = w->header_len;
  for (int i = 0; i < 8; i++) len_bytes[i] = (unsigned char)(len >> (8 * i));
  if (qt_file_write(sink, len_bytes, 8) != 0) return -1;
  if (qt_file_write(sink, w->header, w->header_len) != 0) return -1;
  for (size_t k = 0; k < w->n; k++) {
    const qt_st_entry *e = w->outs[k].entry;
    const qt_tensor *t = e->source;
    size_t nbytes = (size_t)w->outs[k].nbytes;
    if (nbytes == 0) continue;
    if (t->storage->device->kind == QT_DEV_CPU && qt_is_contiguous(t)) {
      const char *data = (const char *)t->storage->data + (size_t)t->offset * qt_elsize(t->dtype);
      if (qt_file_write(sink, data, nbytes) != 0) return -1;
      continue;
    }
    void *buffer = malloc(nbytes);
    if (buffer == NULL) {
      st_shown sn;
      return qt_errorf(&ctx->err, "%s: out of host memory (%zu bytes for tensor '%s')",
                       st_save_op, nbytes, st_show(e->name.bytes, e->name.len, &sn));
    }
    int rc = qt_read_all(ctx, t, buffer);
    if (rc == 0) rc = qt_file_write(sink, buffer, nbytes) != 0 ? -1 : 0;
    else st_rename_error(ctx, st_save_op);
    free(buffer);
    if (rc != 0) return -1;
  }
  return 0;
}

/* A name, a metadata key or value (named by its key): UTF-8, and without NUL unless
** allow_nul. */
static int st_check_text(qt_ctx *ctx, const char *what, const qt_st_string *s,
                         const qt_st_string *named, bool allow_nul) {
  st_shown sn;
  const char *shown = st_show(named->bytes, named->len, &sn);
  if (!allow_nul && memchr(s->bytes, '\0', s->len) != NULL)
    return qt_errorf(&ctx->err, "%s: %s '%s' contains a NUL byte", st_save_op, what, shown);
  size_t bad = st_utf8_bad(s->bytes, s->len);
  if (bad < s->len)
    return qt_errorf(&ctx->err, "%s: %s '%s' is not valid UTF-8 (at byte %zu)", st_save_op,
                     what, shown, bad);
  return 0;
}

/* The order the reference implementation writes tensors in: by dtype, largest element
** first (its Dtype enum's order, reversed: I64, F64, F32, I32, BF16, F16, U8, BOOL), then
** by name. The data section starts 8-byte aligned, so every tensor's data then starts at
** a multiple of its element size, as readers that map the file (PyTorch's view of the
** bytes as a dtype) need; in plain name order an F64 after a U8 would not be aligned.
** The rank is read from the reference's own order of every code, so a new dtype needs
** only its ST_CODE_<sfx>. */
static const char *const st_reference_order[] = {
  "BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32",
  "F64", "I64", "U64",
};
static int st_rank(qt_dtype d) {
  int n = (int)(sizeof st_reference_order / sizeof *st_reference_order);
  for (int k = 0; k < n; k++)
    if (strcmp(st_reference_order[k], st_codes[d]) == 0) return n - 1 - k;
  return n;  /* not in the reference's list: after every dtype it has */
}

static int st_compare_names(const void *pa, const void *pb) {
  const qt_st_string *a = &((const st_out *)pa)->entry->name;
  const qt_st_string *b = &((const st_out *)pb)->entry->name;
  return st_compare_strings(a->bytes, a->len, b->bytes, b->len);
}

static int st_compare_outs(const void *pa, const void *pb) {
  int ra = st_rank(((const st_out *)pa)->entry->source->dtype);
  int rb = st_rank(((const st_out *)pb)->entry->source->dtype);
  if (ra != rb) return ra < rb ? -1 : 1;
  return st_compare_names(pa, pb);
}

static int st_compare_pair_refs(const void *pa, const void *pb) {
  return st_compare_pairs(*(const qt_st_pair *const *)pa, *(const qt_st_pair *const *)pb);
}

/* The JSON header, unpadded: "__metadata__" first (keys sorted), then the tensors in file
** order, each as {"dtype", "shape", "data_offsets"}. jansson keeps insertion order. Only
** calls jansson 2.10 has are used (Debian 11 has 2.13, Debian 12 2.14): names and keys,
** checked to hold no NUL, are passed as C strings. */
static json_t *st_build_header(const st_out *outs, size_t n, const qt_st_pair *const *metas,
                               size_t nmeta) {
  json_t *root = json_object();
  if (root == NULL) return NULL;
  if (nmeta > 0) {
    json_t *m = json_object();
    if (json_object_set_new(root, "__metadata__", m) != 0) goto fail;
    for (size_t k = 0; k < nmeta; k++) {
      const qt_st_pair *p = metas[k];
      if (json_object_set_new(m, p->key.bytes, json_stringn(p->value.bytes, p->value.len)) != 0)
        goto fail;
    }
  }
  uint64_t offset = 0;
  for (size_t k = 0; k < n; k++) {
    const qt_st_entry *e = outs[k].entry;
    const qt_tensor *t = e->source;
    json_t *entry = json_object(), *shape = json_array(), *offsets = json_array();
    if (json_object_set_new(root, e->name.bytes, entry) != 0) {
      json_decref(shape);
      json_decref(offsets);
      goto fail;
    }
    if (json_object_set_new(entry, "dtype", json_string(st_codes[t->dtype])) != 0 ||
        json_object_set_new(entry, "shape", shape) != 0 ||
        json_object_set_new(entry, "data_offsets", offsets) != 0)
      goto fail;
    for (int d = 0; d < t->ndim; d++)
      if (json_array_append_new(shape, json_integer((json_int_t)t->size[d])) != 0) goto fail;
    if (json_array_append_new(offsets, json_integer((json_int_t)offset)) != 0 ||
        json_array_append_new(offsets, json_integer((json_int_t)(offset + outs[k].nbytes))) != 0)
      goto fail;
    offset += outs[k].nbytes;
  }
  return root;
fail:
  json_decref(root);
  return NULL;
}

int qt_safetensors_save(qt_ctx *ctx, const char *path, size_t n, const qt_st_entry *tensors,
                        size_t nmeta, const qt_st_pair *meta) {
  qt_path_shown shown_buf;
  const char *shown = qt_path_shorten(path, &shown_buf);
  if (!st_host_is_little_endian())
    return qt_errorf(&ctx->err, "%s: safetensors files are little-endian; this host is not",
                     st_save_op);
  int rc = -1;
  st_out *outs = malloc((n > 0 ? n : 1) * sizeof *outs);
  const qt_st_pair **metas = malloc((nmeta > 0 ? nmeta : 1) * sizeof *metas);
  json_t *root = NULL;
  char *header = NULL;
  if (outs == NULL || metas == NULL) {
    qt_errorf(&ctx->err, "%s: out of host memory", st_save_op);
    goto cleanup;
  }

  /* Everything that can be refused is refused before the file is touched. */
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) {
    const qt_tensor *t = tensors[i].source;
    st_shown sn;
    const char *name = st_show(tensors[i].name.bytes, tensors[i].name.len, &sn);
    if (st_check_text(ctx, "tensor name", &tensors[i].name, &tensors[i].name, false))
      goto cleanup;
    if (tensors[i].name.len == 12 && memcmp(tensors[i].name.bytes, "__metadata__", 12) == 0) {
      qt_errorf(&ctx->err, "%s: a tensor may not be named '__metadata__' (the format keeps "
                "that key for the metadata)", st_save_op);
      goto cleanup;
    }
    if (qt_tensor_check(t, st_save_op, NULL)) {
      qt_errorf(&ctx->err, "%s: tensor '%s' has been freed", st_save_op, name);
      goto cleanup;
    }
    if ((int)t->dtype < 0 || (int)t->dtype >= QT_NDTYPES || st_codes[t->dtype] == NULL) {
      qt_errorf(&ctx->err, "%s: tensor '%s' has a dtype safetensors files do not hold",
                st_save_op, name);
      goto cleanup;
    }
    int64_t numel = qt_numel(t);
    outs[i].entry = &tensors[i];
    if (numel < 0 ||
        __builtin_mul_overflow((uint64_t)numel, (uint64_t)qt_elsize(t->dtype), &outs[i].nbytes) ||
        __builtin_add_overflow(total, outs[i].nbytes, &total) || total > (uint64_t)INT64_MAX) {
      qt_errorf(&ctx->err, "%s: tensor '%s' makes the file too large", st_save_op, name);
      goto cleanup;
    }
  }
  qsort(outs, n, sizeof *outs, st_compare_names);  /* first by name alone: duplicates */
  for (size_t k = 1; k < n; k++) {
    if (st_compare_names(&outs[k - 1], &outs[k]) == 0) {
      st_shown sn;
      const qt_st_string *a = &outs[k].entry->name;
      qt_errorf(&ctx->err, "%s: two tensors are named '%s'", st_save_op,
                st_show(a->bytes, a->len, &sn));
      goto cleanup;
    }
  }
  qsort(outs, n, sizeof *outs, st_compare_outs);
  for (size_t i = 0; i < nmeta; i++) {
    if (st_check_text(ctx, "metadata key", &meta[i].key, &meta[i].key, false) ||
        st_check_text(ctx, "metadata value of", &meta[i].value, &meta[i].key, true))
      goto cleanup;
    metas[i] = &meta[i];
  }
  qsort(metas, nmeta, sizeof *metas, st_compare_pair_refs);
  for (size_t k = 1; k < nmeta; k++) {
    if (st_compare_pairs(metas[k - 1], metas[k]) == 0) {
      st_shown sn;
      qt_errorf(&ctx->err, "%s: two metadata keys are '%s'", st_save_op,
                st_show(metas[k]->key.bytes, metas[k]->key.len, &sn));
      goto cleanup;
    }
  }

  root = st_build_header(outs, n, metas, nmeta);
  size_t json_len = root != NULL ? json_dumpb(root, NULL, 0, JSON_COMPACT) : 0;
  if (json_len == 0) {
    qt_errorf(&ctx->err, "%s: out of host memory (building the header)", st_save_op);
    goto cleanup;
  }
  size_t header_len = (json_len + 7) / 8 * 8;  /* the data starts 8-byte aligned */
  if (header_len > ST_MAX_HEADER) {
    qt_errorf(&ctx->err, "%s: the header would be %zu bytes, more than the %u a safetensors "
              "file may have", st_save_op, header_len, ST_MAX_HEADER);
    goto cleanup;
  }
  header = malloc(header_len);
  if (header == NULL || json_dumpb(root, header, json_len, JSON_COMPACT) != json_len) {
    qt_errorf(&ctx->err, "%s: out of host memory (building the header)", st_save_op);
    goto cleanup;
  }
  memset(header + json_len, ' ', header_len - json_len);
  json_decref(root);
  root = NULL;

  st_writer w = { outs, n, header, header_len };
  rc = qt_file_save(ctx, st_save_op, path, shown, st_produce, &w);
cleanup:
  json_decref(root);
  free(header);
  free(outs);
  free(metas);
  return rc;
}
