/*
** cpu.h — what the CPU device shows the registry (device.c), and nothing else.
**
** The CPU device is the reference implementation of every slot of device.h. It knows no
** other device: where host memory should be page-locked for fast GPU transfers, the
** registry hands it a host allocator (qt_cpu_set_host_allocator), as ggml's CUDA backend
** provides a host buffer type, so the dependency runs one way, registry -> CPU device.
** The device's own files, one per op family, and what they share are in cpu_internal.h.
*/
#ifndef QLUA_CPU_H
#define QLUA_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "device.h"

/* Host memory of another device's kind (pinned, for the GPUs). alloc returns 0 with
** *ptr set, or -1 when it has none to give (the CPU device then uses plain memory);
** free takes back what alloc gave; empty_cache returns its cached blocks. Called on any
** thread. */
typedef struct qt_host_allocator {
  int (*alloc)(size_t nbytes, void **ptr);
  void (*free)(void *ptr, size_t nbytes);
  void (*empty_cache)(void);
} qt_host_allocator;

/* The CPU device's slot table. */
const qt_device_iface *qt_cpu_iface(void);
/* Set once by the registry, before the table is handed out; NULL: plain memory only. */
void qt_cpu_set_host_allocator(const qt_host_allocator *allocator);
/* Bytes the CPU device holds now (process-wide, a relaxed atomic read). */
int64_t qt_cpu_device_allocated(void);
/* The thread pool's size, the caller included, and setting it (clamped to 1 .. 256;
** returns the size set). */
int qt_cpu_threads(void);
int qt_cpu_set_threads(int n);
/* The vector build picked at run time, and OpenBLAS's kernel set (device.h). */
const char *qt_cpu_simd_name(void);
const char *qt_cpu_blas_name(void);

#endif
