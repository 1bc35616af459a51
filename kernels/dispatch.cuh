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

#define QT_DISPATCH_TRAITS_(P, E, sfx, name, T, U, size, kind, ...)         \
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
#define QT_DISPATCH_CASE_(P, E, sfx, name, T, U, size, kind, ...) \
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

/* ---- Parts: a heavy file compiled as several objects side by side ----
** A file whose per-dtype code takes minutes to compile is built as several objects (the
** Makefile's CU_PARTS): once as its entry, with -DQT_NPARTS=n, and once per part k, with
** -DQT_NPARTS=n -DQT_PART=k. The file writes its per-dtype work as function templates of
** one signature, `template <typename T> R fn(args)`, which its slots reach through
** qt_dtype_switch as usual, and names each once:
**
**   QT_PARTS(int, ew_binary_run, (const ew_binary_call &))
**
** (QT_PARTS_UNLESS_HALF for work that qt_dtype_switch reaches, which leaves the 16-bit
** floats out.) In the entry, that declares fn<T> `extern template` for every dtype, so the entry holds
** the slots and none of the per-dtype code; in part k, it instantiates fn<T> for the dtypes
** whose enum value is k modulo n (QT_PART_HOLDS), and the slots are left out (QT_IF_ENTRY).
** Compiled whole (no QT_NPARTS), the file is one object, as any other. A dtype no part
** instantiates is an undefined symbol at link time, and one instantiated twice is never
** made: the split cannot go wrong silently. */
#ifdef QT_PART
#define QT_IF_ENTRY(...)
#else
#define QT_IF_ENTRY(...) __VA_ARGS__
#endif
/* Whether this object holds dtype d's code: always, unless it is part of a split file. */
constexpr bool qt_part_holds(qt_dtype d) {
#if defined(QT_PART)
  return (int)d % QT_NPARTS == QT_PART;
#elif defined(QT_NPARTS)
  return (void)d, false;
#else
  return (void)d, true;
#endif
}
#if defined(QT_NPARTS) && !defined(QT_PART)
#define QT_PARTS_EXTERN_(P, E, sfx, name, T, ...) QT_PP_CALL(QT_PARTS_EXTERN2_, T, QT_PP_UNPAREN P)
#define QT_PARTS_EXTERN2_(T, R, fn, params) extern template R fn<T> params;
#define QT_PARTS_EXTERN_UNLESS_HALF_(P, E, sfx, name, T, U, size, kind, ...) \
  QT_UNLESS_HALF_##kind(QT_PARTS_EXTERN_(P, E, sfx, name, T))
#define QT_PARTS(R, fn, params) QT_DTYPE_LIST(QT_PARTS_EXTERN_, (R, fn, params))
#define QT_PARTS_UNLESS_HALF(R, fn, params) \
  QT_DTYPE_LIST(QT_PARTS_EXTERN_UNLESS_HALF_, (R, fn, params))
#elif defined(QT_PART)
/* fn<T>'s address, taken in the branch that `if constexpr` keeps, instantiates it (with
** the usual vague linkage, which the entry's calls link to); the table is its anchor. */
template <typename T, typename FP, typename F>
constexpr FP qt_part_pick(F address_of) {
  if constexpr (qt_part_holds(qt_dtype_traits<T>::dtype)) return address_of(T());
  else return (void)address_of, nullptr;
}
#define QT_PARTS_ADDRESS_(P, E, sfx, name, T, ...) QT_PP_CALL(QT_PARTS_ADDRESS2_, T, QT_PP_UNPAREN P)
#define QT_PARTS_ADDRESS2_(T, R, fn, params) \
  qt_part_pick<T, R(*) params>([](auto tag) -> R(*) params { return &fn<decltype(tag)>; }),
#define QT_PARTS_ADDRESS_UNLESS_HALF_(P, E, sfx, name, T, U, size, kind, ...) \
  QT_UNLESS_HALF_##kind(QT_PARTS_ADDRESS_(P, E, sfx, name, T))
#define QT_PARTS_TABLE_(R, fn, params, each)                                             \
  __attribute__((used)) R (*const QT_PP_CAT(QT_PP_CAT(fn, _part), QT_PART)[]) params = { \
      QT_DTYPE_LIST(each, (R, fn, params)) nullptr};
#define QT_PARTS(R, fn, params) QT_PARTS_TABLE_(R, fn, params, QT_PARTS_ADDRESS_)
#define QT_PARTS_UNLESS_HALF(R, fn, params) \
  QT_PARTS_TABLE_(R, fn, params, QT_PARTS_ADDRESS_UNLESS_HALF_)
#else
#define QT_PARTS(R, fn, params)
#define QT_PARTS_UNLESS_HALF(R, fn, params)
#endif

/* The type CUDA's atomics and intrinsics take for T: int64_t is `long` on Linux, for
** which CUDA declares no atomicAdd; `long long` has the same representation. */
template <typename T> struct qt_cuda_word { typedef T type; };
template <> struct qt_cuda_word<int64_t> { typedef long long type; };

#endif
