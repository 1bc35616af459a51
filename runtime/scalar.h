/*
** scalar.h — what one element of each elementwise op computes, for every device.
**
** The binary and unary op lists live here with their semantics: each entry gives the
** op's expression for float dtypes and for integer dtypes, and both the CPU device
** (runtime/cpu/cpu_elementwise.c) and the CUDA device (kernels/elementwise.cu) generate
** their per-dtype code from these entries. CPU/GPU parity is therefore the structure,
** not a promise: an op exists once.
**
** An expression sees:
**   x, y        the operands, of the dtype's C type T (QT_DTYPE_LIST);
**   T, U        the C type and its unsigned twin (integer arithmetic wraps through U);
**   lo_f, hi_f  the unary op's two parameters, as T (float dtypes);
**   lo_i, hi_i  the same as int64_t (integer dtypes);
** and its value is cast to T by the caller (comparisons give 1 or 0). Float expressions
** use C's type-generic math names (exp, pow, fabs): the CPU files that expand them
** include <tgmath.h>, and CUDA C++ has the float overloads. The helpers below are plain
** C99 that nvcc also compiles for the device (QT_HD), as in philox.h.
*/
#ifndef QLUA_SCALAR_H
#define QLUA_SCALAR_H

#include <stdint.h>

#ifndef QT_HD
#ifdef __CUDACC__
#define QT_HD __host__ __device__ __forceinline__
#else
#define QT_HD static inline
#endif
#endif

/* ------------------------------------------------------------------ conversions */

/* The range of an integer type T with unsigned twin U, as int64_t constants. */
#define QT_INT_MAX(T, U) ((int64_t)((T)-1 < 0 ? (U)-1 >> 1 : (U)-1))
#define QT_INT_MIN(T, U) ((T)-1 < 0 ? -QT_INT_MAX(T, U) - 1 : (int64_t)0)

/* Float to integer saturates to [lo, hi] and maps NaN to 0 (what CUDA's cvt.rzi does),
** instead of C's undefined behaviour for out-of-range values. (double)hi + 1 is the
** first value above the range (2^31 for int32; 2^63 for int64, where (double)hi
** already rounds up to 2^63). */
QT_HD int64_t qt_sat_int(double x, int64_t lo, int64_t hi) {
  if (x != x) return 0;
  if (x <= (double)lo) return lo;
  if (x >= (double)hi + 1.0) return hi;
  return (int64_t)x;
}

/* QT_CONVERT_<dst kind>_<src kind>(TD, UD, x): x converted to the dtype (TD, UD).
** Integer narrowing keeps the low bits, as C does on every machine we build for. */
#define QT_CONVERT_FLOAT_FLOAT(TD, UD, x) ((TD)(x))
#define QT_CONVERT_FLOAT_INT(TD, UD, x) ((TD)(x))
#define QT_CONVERT_INT_INT(TD, UD, x) ((TD)(UD)(x))
#define QT_CONVERT_INT_FLOAT(TD, UD, x) \
  ((TD)qt_sat_int((double)(x), QT_INT_MIN(TD, UD), QT_INT_MAX(TD, UD)))
/* To bool: nonzero is true (NaN too, as in NumPy), which is what C's and C++'s cast to
** bool does. From bool: 0 or 1. */
#define QT_CONVERT_BOOL_FLOAT(TD, UD, x) ((TD)(x))
#define QT_CONVERT_BOOL_INT(TD, UD, x) ((TD)(x))
#define QT_CONVERT_BOOL_BOOL(TD, UD, x) ((TD)(x))
#define QT_CONVERT_FLOAT_BOOL(TD, UD, x) ((TD)(x))
#define QT_CONVERT_INT_BOOL(TD, UD, x) ((TD)(x))

/* ------------------------------------------------------------------ integer helpers */

/* Integer power by squaring, wrapping like repeated multiplication in two's complement
** (an int32 result is the low 32 bits of this). A negative exponent has no integer
** answer; we define it as the value the real power truncates to: 1 for base 1, +1 or -1
** for base -1 (even or odd exponent), and 0 for every other base (0 included, instead
** of a division by zero). */
QT_HD int64_t qt_intpow(int64_t base, int64_t e) {
  if (e < 0) {
    if (base == 1) return 1;
    if (base == -1) return (e & 1) ? -1 : 1;
    return 0;
  }
  uint64_t result = 1, b = (uint64_t)base, ue = (uint64_t)e;
  while (ue) {
    if (ue & 1) result *= b;
    b *= b;
    ue >>= 1;
  }
  return (int64_t)result;
}

/* Integer division truncates toward zero like C, but never traps: x / 0 gives 0 and
** INT_MIN / -1 wraps to INT_MIN (computed in 64 bits, where the caller's narrowing
** wraps 2^31 back to INT32_MIN; the core computes `/` of integers in float64, so this is
** the integer expression's definition more than a hot path). */
QT_HD int64_t qt_intdiv(int64_t x, int64_t y) {
  if (y == 0) return 0;
  if (y == -1) return (int64_t)(0 - (uint64_t)x);
  return x / y;
}

/* x < 0 for an integer of any type: a function, so that unsigned and bool types do not
** draw "comparison is always false" warnings from the generic expressions below. */
QT_HD int qt_is_negative(int64_t x) { return x < 0; }

/* Maximum/minimum propagate NaN from either side (x != x is the NaN test; `|`, not
** `||`, so that the CPU's loops stay branch-free and vectorize). */
#define QT_MAX_NAN(x, y) ((((x) > (y)) | ((x) != (x))) ? (x) : (y))
#define QT_MIN_NAN(x, y) ((((x) < (y)) | ((x) != (x))) ? (x) : (y))

/* clamp is min(max(x, lo), hi), as in PyTorch: lo > hi gives hi, and NaN passes. */
#define QT_CLAMP(x, lo, hi) \
  ((x) < (lo) ? ((lo) > (hi) ? (hi) : (lo)) : ((x) > (hi) ? (hi) : (x)))

/* ------------------------------------------------------------------ the op lists */

/* Binary ops: X(P, ENUM, name, result, float expression, integer expression).
** result is SAME (the operands' dtype) or BOOL: comparisons and the logical ops give a
** bool tensor, computed in the operands' promoted dtype (the expression's 1 or 0 is
** stored as bool). The logical ops take any dtype through nonzero, as in NumPy. */
#define QT_BINOP_LIST(X, P)                                                     \
  X(P, QT_ADD, "add", SAME, x + y, (U)x + (U)y)                                 \
  X(P, QT_SUB, "sub", SAME, x - y, (U)x - (U)y)                                 \
  X(P, QT_MUL, "mul", SAME, x * y, (U)x * (U)y)                                 \
  X(P, QT_DIV, "div", SAME, x / y, (U)(uint64_t)qt_intdiv(x, y))                 \
  X(P, QT_POW, "pow", SAME, pow(x, y), (U)(uint64_t)qt_intpow(x, y))            \
  X(P, QT_EQ, "eq", BOOL, x == y, x == y)                                       \
  X(P, QT_NE, "ne", BOOL, x != y, x != y)                                       \
  X(P, QT_LT, "lt", BOOL, x < y, x < y)                                         \
  X(P, QT_LE, "le", BOOL, x <= y, x <= y)                                       \
  X(P, QT_GT, "gt", BOOL, x > y, x > y)                                         \
  X(P, QT_GE, "ge", BOOL, x >= y, x >= y)                                       \
  X(P, QT_MAXIMUM, "maximum", SAME, QT_MAX_NAN(x, y), (x > y ? x : y))          \
  X(P, QT_MINIMUM, "minimum", SAME, QT_MIN_NAN(x, y), (x < y ? x : y))          \
  X(P, QT_LOGICAL_AND, "logical_and", BOOL, (x != 0) & (y != 0), (x != 0) & (y != 0)) \
  X(P, QT_LOGICAL_OR, "logical_or", BOOL, (x != 0) | (y != 0), (x != 0) | (y != 0))   \
  X(P, QT_LOGICAL_XOR, "logical_xor", BOOL, (x != 0) ^ (y != 0), (x != 0) ^ (y != 0))

/* The C type of a binary op's result, by its result column, for operands of type T. */
#define QT_BINOP_TYPE_SAME(T) T
#define QT_BINOP_TYPE_BOOL(T) bool
#define QT_BINOP_IS_BOOL_SAME 0
#define QT_BINOP_IS_BOOL_BOOL 1

/* Unary ops: X(P, ENUM, name, ints, float expression, integer expression). ints is 1
** when the op is defined on integer dtypes, 0 when it is float-only (the core casts
** integer inputs to float64 first, and the integer expression is a placeholder).
** QT_CLAMP uses the two parameters as lo and hi. */
#define QT_UNOP_LIST(X, P)                                                      \
  X(P, QT_NEG, "neg", 1, -x, (U)0 - (U)x)                                       \
  X(P, QT_ABS, "abs", 1, fabs(x), (qt_is_negative(x) ? (U)0 - (U)x : (U)x))     \
  X(P, QT_EXP, "exp", 0, exp(x), 0)                                             \
  X(P, QT_LOG, "log", 0, log(x), 0)                                             \
  X(P, QT_SQRT, "sqrt", 0, sqrt(x), 0)                                          \
  X(P, QT_TANH, "tanh", 0, tanh(x), 0)                                          \
  X(P, QT_SIGMOID, "sigmoid", 0, (T)1 / ((T)1 + exp(-x)), 0)                    \
  X(P, QT_RELU, "relu", 1, (x < 0 ? (T)0 : x), (qt_is_negative(x) ? 0 : x))    \
  X(P, QT_CLAMP, "clamp", 1, QT_CLAMP(x, lo_f, hi_f), QT_CLAMP((int64_t)x, lo_i, hi_i))

#endif
