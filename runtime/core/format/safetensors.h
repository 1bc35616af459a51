/*
** safetensors.h — Hugging Face .safetensors files: qlua.save_safetensors and
** qlua.load_safetensors without Lua.
**
** The format: an 8-byte little-endian header length N, N bytes of UTF-8 JSON (an object
** whose keys are tensor names, each {"dtype": "F32", "shape": [2, 3], "data_offsets":
** [begin, end]}, plus an optional "__metadata__" object of strings), then the data section:
** every tensor's bytes, row-major, little-endian, at those offsets (relative to the start
** of the data section). dtypes BOOL, U8, I32, I64, F16, BF16, F32 and F64 map to qlua's
** bool, uint8, int32, int64, float16, bfloat16, float32 and float64.
**
** Loading checks the header as the reference implementation (the Rust safetensors crate)
** does, and more: N at most 100,000,000; the header starts with '{', is UTF-8, is JSON
** (jansson, duplicate keys rejected) and an object; each entry has a known dtype, a shape
** of non-negative integers (at most QT_MAXDIM of them) and data_offsets [begin, end] with
** begin <= end and end - begin == numel * element size (computed without overflow); the
** entries, ordered by offset, tile the data section exactly (the first begins at 0, each
** begins where the one before ends, the last ends at the end of the file): no overlap, no
** gap, no trailing byte. Keys of an entry other than those three are ignored, as the
** reference does. Nothing is allocated before the whole header has passed, and then no
** more than the file's own size: a load never returns part of a file.
**
** Saving packs the tensors from offset 0 in the order the reference implementation uses:
** by dtype, largest element first (I64, F64, F32, I32, BF16, F16, U8, BOOL), then by name
** (byte order), so that every tensor's data is aligned to its element size. The header is
** compact JSON written by jansson in the same order ("__metadata__" first when there is
** any metadata, its keys sorted; each entry's keys as dtype, shape, data_offsets), padded
** with spaces to a multiple of 8 bytes. The same tensors give the same bytes. The file is
** written whole or not at all (files.h).
**
** All return 0, or -1 with the message in ctx->err, starting "load_safetensors:" or
** "save_safetensors:" and naming the file (shortened as files.h says).
*/
#ifndef QLUA_SAFETENSORS_H
#define QLUA_SAFETENSORS_H

#include <stddef.h>

#include "device.h"
#include "ops.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A byte string: len bytes at bytes, followed by a '\0' (as Lua's strings are). */
typedef struct qt_st_string {
  const char *bytes;
  size_t len;
} qt_st_string;

/* One tensor of a file being loaded or saved. */
typedef struct qt_st_entry {
  qt_st_string name;
  qt_tensor tensor;          /* load: owned (one reference); save: unused */
  const qt_tensor *source;   /* save: the caller's tensor (any strides, any device) */
} qt_st_entry;

/* One "__metadata__" pair. */
typedef struct qt_st_pair {
  qt_st_string key, value;
} qt_st_pair;

/* What a load gives: the tensors (in the file's data order) and the metadata pairs
** (sorted by key), all owned. */
typedef struct qt_safetensors {
  size_t ntensors;
  qt_st_entry *tensors;
  size_t nmeta;
  qt_st_pair *meta;
} qt_safetensors;

/* An empty result (nothing owned); qt_safetensors_free may be called on it any number of
** times. A tensor moved out of it must be left qt_tensor_init'ed there. */
void qt_safetensors_init(qt_safetensors *f);
void qt_safetensors_free(qt_safetensors *f);

/* Loads every tensor of the file into new contiguous tensors on dev (NULL means the CPU).
** On success *out (which must be empty) holds them; on failure it stays empty. */
int qt_safetensors_load(qt_ctx *ctx, qt_safetensors *out, const char *path, qt_device *dev);

/* Saves the n tensors (entry.name, entry.source) and the nmeta metadata pairs. Names and
** metadata keys must be UTF-8 without NUL, unique, and no name may be "__metadata__";
** metadata values must be UTF-8. */
int qt_safetensors_save(qt_ctx *ctx, const char *path, size_t n, const qt_st_entry *tensors,
                        size_t nmeta, const qt_st_pair *meta);

#ifdef __cplusplus
}
#endif
#endif
