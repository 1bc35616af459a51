/*
** cpu_scan.h — the CPU device's scan and softmax slots (cpu_scan.c), for the slot table in
** cpu_device.c. Contracts: device.h ("scans and softmax along a dim").
*/
#ifndef QLUA_CPU_SCAN_H
#define QLUA_CPU_SCAN_H

#include <stdbool.h>

#include "device.h"
#include "tensor.h"

int cpu_scan(qt_device *dev, qt_scanop op, const qt_view *dst, const qt_view *indices,
             const qt_view *src, int dim, qt_err *err);
int cpu_softmax(qt_device *dev, bool log, const qt_view *dst, const qt_view *src, int dim,
                qt_err *err);

#endif
