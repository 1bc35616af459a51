/*
** dispatch.cuh — the dtype list (runtime/tensor.h) as C++ for the CUDA device.
**
** qt_dtype_traits<T> says which dtype a C type is; qt_dtype_switch calls a generic
** lambda with a value of the C type of a run-time dtype, so a launcher is written once
** as a template and every dtype of the list reaches it:
**
**   qt_dtype_switch(dst->dtype, [&](auto zero) {
**     using T = decltype(zero);
**     ew_binary_launch<T>(dev, op, plan);
**   });
**
** CUDA C++ only (included by the .cu files of kernels/).
*/
#ifndef QLUA_DISPATCH_CUH
#define QLUA_DISPATCH_CUH

#include <stdint.h>

#include "scalar.h"
#include "tensor.h"

template <typename T>
struct qt_dtype_traits;

#define QT_DISPATCH_TRAITS_(P, E, sfx, name, T, U, size, kind)         \
  template <>                                                         \
  struct qt_dtype_traits<T> {                                         \
    static constexpr qt_dtype dtype = E;                              \
    static constexpr bool is_float = QT_KIND_IS_FLOAT_##kind;         \
    static constexpr bool is_bool = QT_KIND_IS_BOOL_##kind;           \
    static constexpr bool is_half = QT_KIND_IS_HALF_##kind;           \
    typedef U unsigned_type;                                          \
  };
QT_DTYPE_LIST(QT_DISPATCH_TRAITS_, ~)
#undef QT_DISPATCH_TRAITS_

/* Whether T is a float dtype's type (host and device code alike). */
template <typename T>
constexpr bool qt_is_float_v = qt_dtype_traits<T>::is_float;
/* Whether T is bool's type: values 0 and 1 only, computed by the integer expressions
** read as nonzero (QT_PICK_BOOL). */
template <typename T>
constexpr bool qt_is_bool_v = qt_dtype_traits<T>::is_bool;
/* Whether T is a 16-bit float's type (qt_f16, qt_bf16: bits, computed in float32). */
template <typename T>
constexpr bool qt_is_half_v = qt_dtype_traits<T>::is_half;

/* Calls f(T()) with T the C type of dtype d; false (f not called) for a value outside
** the list, and for the 16-bit floats, which a slot takes only when it has code for
** them (device.h, half_native: the registry gives the others float32 copies). */
template <typename F>
inline bool qt_dtype_switch(qt_dtype d, F &&f) {
  switch (d) {
#define QT_DISPATCH_CASE_(P, E, sfx, name, T, U, size, kind) \
    QT_UNLESS_HALF_##kind(case E: f(T()); return true;)
    QT_DTYPE_LIST(QT_DISPATCH_CASE_, ~)
#undef QT_DISPATCH_CASE_
    default: return false;
  }
}

/* qt_dtype_switch with the 16-bit floats too, for the slots that take them. */
template <typename F>
inline bool qt_dtype_switch_all(qt_dtype d, F &&f) {
  switch (d) {
#define QT_DISPATCH_CASE_(P, E, sfx, name, T, ...) \
    case E: f(T()); return true;
    QT_DTYPE_LIST(QT_DISPATCH_CASE_, ~)
#undef QT_DISPATCH_CASE_
    default: return false;
  }
}

/* A qt_scalar as T, as qt_scalar_store writes it: floats from .f, integers from .i,
** wrapping, bool from .f's nonzero; a 16-bit float rounds .f once. */
template <typename T>
inline T qt_scalar_as(qt_scalar s) {
  if constexpr (qt_is_half_v<T>) return QT_HALF_FROM(T, s.f);
  else if constexpr (qt_is_float_v<T>) return (T)s.f;
  else if constexpr (qt_is_bool_v<T>) return s.f != 0;
  else return (T)(typename qt_dtype_traits<T>::unsigned_type)(uint64_t)s.i;
}

/* The type CUDA's atomics and intrinsics take for T: int64_t is `long` on Linux, for
** which CUDA declares no atomicAdd; `long long` has the same representation. */
template <typename T> struct qt_cuda_word { typedef T type; };
template <> struct qt_cuda_word<int64_t> { typedef long long type; };

#endif
