/*
** npy.h — NumPy .npy files: qlua.save / qlua.load without Lua.
**
** Writes format 1.0 (2.0 only if a header ever outgrew 64 KiB), reads 1.0, 2.0 and 3.0;
** little-endian float32/float64/int32/int64 ('<f4' '<f8' '<i4' '<i8'); C order on write,
** C or Fortran order on read (Fortran data is transposed into a C-order tensor). The
** header is padded with spaces and a newline so the data starts at a multiple of 64 bytes,
** as NumPy writes it, so NumPy, PyTorch and CuPy read the files unchanged.
**
** Both return 0, or -1 with the message in ctx->err ("load: cannot open 'x.npy': No such
** file or directory"); a failed load leaves `out` holding nothing. A path longer than 120
** bytes is shown as its head and tail around "...", so the reason always fits.
**
** save is all or nothing (through files.c's qt_file_save, which safetensors.c shares): a
** regular file (or a new one) is written to a temporary file in the same directory, fsync'd and renamed into place, so a failed save leaves the old
** file as it was and a reader never sees half a file. Symlinks are followed to their
** final target, which is replaced (the links stay links). The replaced file keeps its
** permission bits (owner and group too, where the caller may set them); a new one gets
** 0666 & ~umask. A FIFO or a device (/dev/null, /dev/stdout's pipe) is written in place
** and never removed; a FIFO whose reader has gone is an error (EPIPE), never a SIGPIPE.
** A directory is refused.
*/
#ifndef QLUA_NPY_H
#define QLUA_NPY_H

#include "device.h"
#include "ops.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif


/* Saves any tensor (any strides, any device: GPU tensors are read back first). */
int qt_npy_save(qt_ctx *ctx, const char *path, const qt_tensor *t);
/* Loads into a new contiguous tensor on dev (NULL means the CPU). */
int qt_npy_load(qt_ctx *ctx, qt_tensor *out, const char *path, qt_device *dev);

#ifdef __cplusplus
}
#endif
#endif
