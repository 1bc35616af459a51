/*
** files.h — the core's file writing, shared by the formats (npy.c, safetensors.c): a file
** is saved whole or not at all, and paths are shortened for messages.
**
** qt_file_save writes what a producer function gives it. A regular file (or a new one) is
** written to a temporary file in the same directory (".NAME.PID-N.tmp"), fsync'd and
** renamed over the target, so a reader sees the old file or the new one, never half of
** one, and a failed save (a write error, or the producer's own) leaves the old file as it
** was. Symlinks in the last component are followed to their final target, which is
** replaced (the links stay links). The replaced file keeps its permission bits (owner and
** group too, where the caller may set them); a new one gets 0666 & ~umask. A FIFO or a
** device (/dev/null, /dev/stdout's pipe) is written in place and never removed; a FIFO
** whose reader has gone is an error (EPIPE), never a SIGPIPE, and a file past the
** file-size limit (ulimit -f) one too (EFBIG), never a SIGXFSZ: neither signal's
** disposition is touched (files.c says how). A directory is refused.
** Nothing but our own temporary file is ever removed.
**
** Messages start with the caller's op name ("save: cannot write 'x.npy': No space left on
** device") and show the path as given to qt_path_shorten.
*/
#ifndef QLUA_FILES_H
#define QLUA_FILES_H

#include <stddef.h>

#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* QT_ERRLEN is 320 bytes and a message around a path needs up to about 150 more, so a
** path longer than this is shown as its head and its tail with "..." between them, cut at
** UTF-8 character boundaries: the reason at the end of a message is never cut off. */
#define QT_PATH_SHOWN 120

typedef struct qt_path_shown {
  char text[QT_PATH_SHOWN + 1];
} qt_path_shown;

/* path itself when it is short enough, else its shortened form in *buf. */
const char *qt_path_shorten(const char *path, qt_path_shown *buf);

/* Where a producer writes: an open file and the first write error. */
typedef struct qt_file_sink qt_file_sink;

/* Writes all n bytes; 0, or an errno (remembered by the sink, which then reports it; the
** producer should stop and return -1). */
int qt_file_write(qt_file_sink *sink, const void *data, size_t n);

/* All n bytes written to fd with SIGPIPE and SIGXFSZ held off as qt_file_save holds them
** (for a writer with its own file handling: the kernel disk cache); 0 or the errno. */
int qt_file_write_fd(int fd, const void *data, size_t n);

/* Gives the file's bytes to qt_file_write, in order, once. Returns 0, or -1: after a
** failed qt_file_write, or with its own message in ctx->err (then the save is abandoned
** the same way: a temporary file is removed, the old file stays). */
typedef int (*qt_file_producer)(qt_ctx *ctx, qt_file_sink *sink, void *arg);

/* Saves the bytes produce(ctx, sink, arg) writes at path, as the top of this file says.
** `shown` is the path as messages show it (qt_path_shorten). Returns 0, or -1 with the
** message in ctx->err. */
int qt_file_save(qt_ctx *ctx, const char *op, const char *path, const char *shown,
                 qt_file_producer produce, void *arg);

#ifdef __cplusplus
}
#endif
#endif
