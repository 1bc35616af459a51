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
**   p0, p1, p2  a unary op's parameters, as T (float dtypes; qt_unop_params in device.h);
**   p0_i, p1_i, p2_i  the same as int64_t (integer dtypes);
** and its value is cast to T by the caller (comparisons give 1 or 0). Float expressions
** use C's type-generic math names (exp, pow, fabs): the CPU files that expand them
** include <tgmath.h>, and CUDA C++ has the float overloads. The helpers below are plain
** C99 that nvcc also compiles for the device (QT_HD), as in philox.h.
*/
#ifndef QLUA_SCALAR_H
#define QLUA_SCALAR_H

#include <math.h>
#include <stdint.h>

#include "half.h"
#include "tensor.h"

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

/* The 16-bit floats (kind HALF): qt_half_to_f32(x) widens a qt_f16 or qt_bf16 exactly;
** QT_HALF_FROM(TD, x) rounds a float, double, integer or bool (through double, exact
** up to 2^53), or the other 16-bit type (through float32, exact), to TD once (half.h).
** C picks by type with _Generic; C++ (the CUDA kernels) with overloads. */
QT_HD float qt_half_to_f32_f16(qt_f16 h) { return qt_f16_bits_to_f32(h.bits); }
QT_HD float qt_half_to_f32_bf16(qt_bf16 h) { return qt_bf16_bits_to_f32(h.bits); }
QT_HD qt_f16 qt_f16_make(uint16_t bits) { qt_f16 h; h.bits = bits; return h; }
QT_HD qt_bf16 qt_bf16_make(uint16_t bits) { qt_bf16 h; h.bits = bits; return h; }
QT_HD qt_f16 qt_f16_from_f32(float f) { return qt_f16_make(qt_f32_to_f16_bits(f)); }
QT_HD qt_f16 qt_f16_from_f64(double d) { return qt_f16_make(qt_f64_to_f16_bits(d)); }
QT_HD qt_f16 qt_f16_from_f16(qt_f16 h) { return h; }
QT_HD qt_f16 qt_f16_from_bf16(qt_bf16 b) { return qt_f16_from_f32(qt_half_to_f32_bf16(b)); }
QT_HD qt_bf16 qt_bf16_from_f32(float f) { return qt_bf16_make(qt_f32_to_bf16_bits(f)); }
QT_HD qt_bf16 qt_bf16_from_f64(double d) { return qt_bf16_make(qt_f64_to_bf16_bits(d)); }
QT_HD qt_bf16 qt_bf16_from_bf16(qt_bf16 b) { return b; }
QT_HD qt_bf16 qt_bf16_from_f16(qt_f16 h) { return qt_bf16_from_f32(qt_half_to_f32_f16(h)); }
#ifdef __cplusplus
/* QT_HD for the member functions below: `static inline` is not a member's specifier. */
#ifdef __CUDACC__
#define QT_HD_MEMBER __host__ __device__ __forceinline__
#else
#define QT_HD_MEMBER inline
#endif
QT_HD float qt_half_to_f32(qt_f16 h) { return qt_half_to_f32_f16(h); }
QT_HD float qt_half_to_f32(qt_bf16 h) { return qt_half_to_f32_bf16(h); }
template <typename TD> struct qt_half_from_;
template <> struct qt_half_from_<qt_f16> {
  static QT_HD_MEMBER qt_f16 from(float f) { return qt_f16_from_f32(f); }
  static QT_HD_MEMBER qt_f16 from(double d) { return qt_f16_from_f64(d); }
  static QT_HD_MEMBER qt_f16 from(qt_f16 h) { return h; }
  static QT_HD_MEMBER qt_f16 from(qt_bf16 b) { return qt_f16_from_bf16(b); }
  template <typename I> static QT_HD_MEMBER qt_f16 from(I i) { return qt_f16_from_f64((double)i); }
};
template <> struct qt_half_from_<qt_bf16> {
  static QT_HD_MEMBER qt_bf16 from(float f) { return qt_bf16_from_f32(f); }
  static QT_HD_MEMBER qt_bf16 from(double d) { return qt_bf16_from_f64(d); }
  static QT_HD_MEMBER qt_bf16 from(qt_bf16 b) { return b; }
  static QT_HD_MEMBER qt_bf16 from(qt_f16 h) { return qt_bf16_from_f16(h); }
  template <typename I> static QT_HD_MEMBER qt_bf16 from(I i) { return qt_bf16_from_f64((double)i); }
};
#define QT_HALF_FROM(TD, x) (qt_half_from_<TD>::from(x))
#else
#define qt_half_to_f32(x) _Generic((x), qt_f16: qt_half_to_f32_f16, qt_bf16: qt_half_to_f32_bf16)(x)
#define QT_HALF_FROM(TD, x) \
  _Generic((TD *)0, qt_f16 *: QT_HALF_FROM_F16_(x), qt_bf16 *: QT_HALF_FROM_BF16_(x))(x)
#define QT_HALF_FROM_F16_(x) _Generic((x), float: qt_f16_from_f32, qt_f16: qt_f16_from_f16, \
  qt_bf16: qt_f16_from_bf16, default: qt_f16_from_f64)
#define QT_HALF_FROM_BF16_(x) _Generic((x), float: qt_bf16_from_f32, qt_bf16: qt_bf16_from_bf16, \
  qt_f16: qt_bf16_from_f16, default: qt_bf16_from_f64)
#endif
/* The conversions of kind HALF: to it from every kind, and from it (through its exact
** float32 value, by the float rules: to an integer saturates, to bool is nonzero). */
#define QT_CONVERT_HALF_FLOAT(TD, UD, x) QT_HALF_FROM(TD, x)
#define QT_CONVERT_HALF_INT(TD, UD, x) QT_HALF_FROM(TD, x)
#define QT_CONVERT_HALF_BOOL(TD, UD, x) QT_HALF_FROM(TD, (int)(x))
#define QT_CONVERT_HALF_HALF(TD, UD, x) QT_HALF_FROM(TD, x)
#define QT_CONVERT_FLOAT_HALF(TD, UD, x) ((TD)qt_half_to_f32(x))
#define QT_CONVERT_INT_HALF(TD, UD, x) QT_CONVERT_INT_FLOAT(TD, UD, qt_half_to_f32(x))
#define QT_CONVERT_BOOL_HALF(TD, UD, x) ((TD)(qt_half_to_f32(x) != 0))

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
** wraps 2^31 back to INT32_MIN). */
QT_HD int64_t qt_intdiv(int64_t x, int64_t y) {
  if (y == 0) return 0;
  if (y == -1) return (int64_t)(0 - (uint64_t)x);
  return x / y;
}

/* C's remainder (fmod: the sign of x), x % 0 = 0 and INT_MIN % -1 = 0 instead of traps. */
QT_HD int64_t qt_intfmod(int64_t x, int64_t y) {
  if (y == 0 || y == -1) return 0;
  return x % y;
}

/* Lua's integer // and % (floor division, and the remainder with the sign of y), with
** x // 0 = x % 0 = 0 where Lua raises, and INT_MIN // -1 wrapping as Lua's does. */
QT_HD int64_t qt_intfloordiv(int64_t x, int64_t y) {
  if (y == 0) return 0;
  if (y == -1) return (int64_t)(0 - (uint64_t)x);
  int64_t q = x / y;
  if (x % y != 0 && (x ^ y) < 0) q -= 1;
  return q;
}
QT_HD int64_t qt_intfloormod(int64_t x, int64_t y) {
  if (y == 0 || y == -1) return 0;
  int64_t m = x % y;
  if (m != 0 && (m ^ y) < 0) m += y;
  return m;
}

/* Lua's float %: fmod's remainder has the sign of x; where x and y differ in sign (and it
** is not 0) it is moved by y, to the sign of y, so that 5.5 % -2 is -0.5, and 5 % inf is 5
** while -5 % inf is inf, as in Lua 5.4. In float and in double. */
QT_HD float qt_floormodf(float x, float y) {
  float m = fmodf(x, y);
  if (m != 0 && (m < 0) != (y < 0)) m += y;
  return m;
}
QT_HD double qt_floormod(double x, double y) {
  double m = fmod(x, y);
  if (m != 0 && (m < 0) != (y < 0)) m += y;
  return m;
}
#define QT_FLOORMOD(T, x, y) \
  (sizeof(T) == sizeof(float) ? (T)qt_floormodf((float)(x), (float)(y)) \
                              : (T)qt_floormod((double)(x), (double)(y)))

/* erfinv and lgamma: CUDA has both (float and double overloads). The C library has no
** erfinv, and its lgamma writes the global signgam (a data race between threads), so the
** CPU computes both in double through the functions below. */
#ifdef __CUDACC__
#define QT_ERFINV(T, x) erfinv(x)
#define QT_LGAMMA(T, x) lgamma(x)
#else
/* The inverse of erf: a first guess good to about 2e-3 (from the closed form
** sqrt(sqrt(b^2 - l/a) - b), b = 2/(pi a) + l/2, l = log(1 - y^2), a = 0.147), then
** Halley's iteration on erf(x) = y, or on erfc(x) = 1 - |y| where erf flattens (|y| >
** 0.5: 1 - |y| is exact there), which converges cubically to double precision in 3 steps. */
static inline double qt_erfinv(double y) {
  if (y != y || y < -1 || y > 1) return NAN;
  if (y == 1) return INFINITY;
  if (y == -1) return -INFINITY;
  if (y == 0) return y;
  const double a = 0.147, two_over_sqrt_pi = 1.12837916709551257390;
  double l = log((1 - y) * (1 + y)), b = 2 / (3.14159265358979323846 * a) + l / 2;
  double x = sqrt(sqrt(b * b - l / a) - b);
  double ay = y < 0 ? -y : y, q = 1 - ay;
  for (int i = 0; i < 4; i++) {
    double d = two_over_sqrt_pi * exp(-x * x);
    double t = ay <= 0.5 ? (erf(x) - ay) / d : (q - erfc(x)) / d;
    double step = t / (1 + x * t);
    x -= step;
    if (fabs(step) <= 1e-16 * fabs(x)) break;
  }
  return y < 0 ? -x : x;
}
static inline double qt_lgamma(double x) {
  int sign;
  return lgamma_r(x, &sign);
}
#define QT_ERFINV(T, x) ((T)qt_erfinv((double)(x)))
#define QT_LGAMMA(T, x) ((T)qt_lgamma((double)(x)))
#endif

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

/* ------------------------------------------------------------------ gelu's derivatives */

/* The derivative of gelu_tanh, 0.5 t (1 + tanh(u)) with u = c (t + a t^3):
** 0.5 (1 + tanh u) + 0.5 t (1 - tanh^2 u) c (1 + 3 a t^2), in float (qt_gelu_tanh_gradf)
** or double; the binary op gelu_tanh_backward multiplies it into the gradient. */
#define QT_GELU_TANH_C 0.79788456080286535588
#define QT_GELU_TANH_A 0.044715
QT_HD float qt_gelu_tanh_gradf(float t) {
  float h = tanhf((float)QT_GELU_TANH_C * (t + (float)QT_GELU_TANH_A * t * t * t));
  return 0.5f * (1.0f + h) +
         0.5f * t * (1.0f - h * h) * (float)QT_GELU_TANH_C * (1.0f + 3.0f * (float)QT_GELU_TANH_A * t * t);
}
QT_HD double qt_gelu_tanh_grad(double t) {
  double h = tanh(QT_GELU_TANH_C * (t + QT_GELU_TANH_A * t * t * t));
  return 0.5 * (1.0 + h) + 0.5 * t * (1.0 - h * h) * QT_GELU_TANH_C * (1.0 + 3.0 * QT_GELU_TANH_A * t * t);
}
/* The float expression's helper by T's size (T is float or double where it is used). */
#define QT_GELU_TANH_GRAD(T, t) \
  (sizeof(T) == sizeof(double) ? (T)qt_gelu_tanh_grad((double)(t)) : (T)qt_gelu_tanh_gradf((float)(t)))

/* ------------------------------------------------------------------ histc's bins */

/* The bin of x for histc (device.h): floor((x - lo) / (hi - lo) * bins), at most bins - 1,
** for lo <= x <= hi, lo < hi, all finite, in double on every device. A range wider than
** the largest double (lo = -1e308, hi = 1e308) makes hi - lo inf and every x bin 0: then
** each term is halved first, which is exact for every normal double and so gives the bin
** the formula means. */
QT_HD int64_t qt_histc_bin(double x, double lo, double hi, int64_t bins) {
  double offset = x - lo, width = hi - lo;
  if (width > 1.7976931348623157e308) {  /* inf: overflowed */
    offset = x * 0.5 - lo * 0.5;
    width = hi * 0.5 - lo * 0.5;
  }
  int64_t b = (int64_t)(offset / width * (double)bins);
  return b >= bins ? bins - 1 : b;
}

/* ------------------------------------------------------------------ the op lists */

/* Binary ops: X(P, ENUM, name, ints, result, float expression, integer expression, help).
** ints is 1 when the op is defined on integer (and bool) dtypes, 0 when it is float-only:
** the core computes it in float64 for integer operands, and the integer expression is a
** placeholder. result is SAME (the operands' dtype) or BOOL: comparisons and the logical
** ops give a bool tensor, computed in the operands' promoted dtype (the expression's 1 or
** 0 is stored as bool); the logical ops take any dtype through nonzero, as in NumPy.
** remainder and floor_divide are Lua's % and // (floor semantics, the sign of y). help is
** qlua.help's line for t:name(x); the binding makes t:name and t:name_ from the row
** (runtime/binding/l_elementwise.c), with their help lines. */
#define QT_BINOP_LIST(X, P)                                                                         \
  X(P, QT_ADD, "add", 1, SAME, x + y, (U)x + (U)y, "t + x")                                         \
  X(P, QT_SUB, "sub", 1, SAME, x - y, (U)x - (U)y, "t - x")                                         \
  X(P, QT_MUL, "mul", 1, SAME, x * y, (U)x * (U)y, "t * x, elementwise")                            \
  X(P, QT_DIV, "div", 0, SAME, x / y, 0, "t / x")                                                   \
  X(P, QT_POW, "pow", 1, SAME, pow(x, y), (U)(uint64_t)qt_intpow(x, y), "t ^ x")                    \
  X(P, QT_EQ, "eq", 1, BOOL, x == y, x == y, "elementwise t == x")                                  \
  X(P, QT_NE, "ne", 1, BOOL, x != y, x != y, "elementwise t ~= x")                                  \
  X(P, QT_LT, "lt", 1, BOOL, x < y, x < y, "elementwise t < x")                                     \
  X(P, QT_LE, "le", 1, BOOL, x <= y, x <= y, "elementwise t <= x")                                  \
  X(P, QT_GT, "gt", 1, BOOL, x > y, x > y, "elementwise t > x")                                     \
  X(P, QT_GE, "ge", 1, BOOL, x >= y, x >= y, "elementwise t >= x")                                  \
  X(P, QT_MAXIMUM, "maximum", 1, SAME, QT_MAX_NAN(x, y), (x > y ? x : y),                           \
    "the elementwise larger of t and x")                                                            \
  X(P, QT_MINIMUM, "minimum", 1, SAME, QT_MIN_NAN(x, y), (x < y ? x : y),                           \
    "the elementwise smaller of t and x")                                                           \
  X(P, QT_LOGICAL_AND, "logical_and", 1, BOOL, (x != 0) & (y != 0), (x != 0) & (y != 0),            \
    "elementwise t and x (nonzero is true)")                                                        \
  X(P, QT_LOGICAL_OR, "logical_or", 1, BOOL, (x != 0) | (y != 0), (x != 0) | (y != 0),              \
    "elementwise t or x (nonzero is true)")                                                         \
  X(P, QT_LOGICAL_XOR, "logical_xor", 1, BOOL, (x != 0) ^ (y != 0), (x != 0) ^ (y != 0),            \
    "elementwise: exactly one of t, x nonzero")                                                     \
  X(P, QT_ATAN2, "atan2", 0, SAME, atan2(x, y), 0,                                                  \
    "the angle of (x, t): atan2(t, x) elementwise")                                                 \
  X(P, QT_HYPOT, "hypot", 0, SAME, hypot(x, y), 0, "sqrt(t^2 + x^2) without overflow")              \
  X(P, QT_FMOD, "fmod", 1, SAME, fmod(x, y), (U)(uint64_t)qt_intfmod(x, y),                         \
    "C's remainder: the sign of t (integer x 0 gives 0)")                                           \
  X(P, QT_REMAINDER, "remainder", 1, SAME, QT_FLOORMOD(T, x, y), (U)(uint64_t)qt_intfloormod(x, y), \
    "Lua's t % x: floor modulo, the sign of x")                                                     \
  X(P, QT_FLOOR_DIVIDE, "floor_divide", 1, SAME, floor(x / y), (U)(uint64_t)qt_intfloordiv(x, y),   \
    "Lua's t // x: floor division")                                                                 \
  X(P, QT_GELU_BACKWARD, "gelu_backward", 0, SAME,                                                  \
    x * ((T)0.5 * ((T)1 + erf(y * (T)0.70710678118654752440)) +                                     \
         y * exp((T)-0.5 * y * y) * (T)0.39894228040143267794), 0,                                  \
    "g:gelu_backward(x): g times gelu's derivative at x (autograd's, fused)")                       \
  X(P, QT_GELU_TANH_BACKWARD, "gelu_tanh_backward", 0, SAME, x * QT_GELU_TANH_GRAD(T, y), 0,        \
    "g:gelu_tanh_backward(x): g times gelu_tanh's derivative at x (autograd's, fused)")

/* The C type of a binary op's result, by its result column, for operands of type T. */
#define QT_BINOP_TYPE_SAME(T) T
#define QT_BINOP_TYPE_BOOL(T) bool
#define QT_BINOP_IS_BOOL_SAME 0
#define QT_BINOP_IS_BOOL_BOOL 1

/* Unary ops: X(P, ENUM, name, ints, result, float expression, integer expression, bind,
** help). ints
** is 1 when the op is defined on integer (and bool) dtypes, 0 when it is float-only (the
** core casts integer inputs to float64 first, and the integer expression is a
** placeholder); result as in the binary list (isnan, isinf, isfinite give bool). The
** parameters p0, p1, p2 (as T; p0_i.. as int64_t) are clamp's lo and hi, and nan_to_num's
** replacements for NaN, +inf and -inf. round is to nearest, ties to even (rint under the
** default rounding mode), as in NumPy and PyTorch. bind is AUTO when the binding makes
** t:name() (and t:name_() for a SAME result) from the row, with help as qlua.help's line,
** or OWN for the ops whose methods take parameters (clamp, nan_to_num: l_elementwise.c). */
#define QT_UNOP_LIST(X, P)                                                                      \
  X(P, QT_NEG, "neg", 1, SAME, -x, (U)0 - (U)x, AUTO, "-t")                                     \
  X(P, QT_ABS, "abs", 1, SAME, fabs(x), (qt_is_negative(x) ? (U)0 - (U)x : (U)x), AUTO, "|t|")  \
  X(P, QT_EXP, "exp", 0, SAME, exp(x), 0, AUTO, "e ^ t")                                        \
  X(P, QT_LOG, "log", 0, SAME, log(x), 0, AUTO, "the natural logarithm")                        \
  X(P, QT_SQRT, "sqrt", 0, SAME, sqrt(x), 0, AUTO, "the square root")                           \
  X(P, QT_TANH, "tanh", 0, SAME, tanh(x), 0, AUTO, "the hyperbolic tangent")                    \
  X(P, QT_SIGMOID, "sigmoid", 0, SAME, (T)1 / ((T)1 + exp(-x)), 0, AUTO, "1 / (1 + e ^ -t)")    \
  X(P, QT_RELU, "relu", 1, SAME, (x < 0 ? (T)0 : x), (qt_is_negative(x) ? 0 : x),               \
    AUTO, "max(t, 0)")                                                                          \
  X(P, QT_CLAMP, "clamp", 1, SAME, QT_CLAMP(x, p0, p1), QT_CLAMP((int64_t)x, p0_i, p1_i),       \
    OWN, "")                                                                                    \
  X(P, QT_SIN, "sin", 0, SAME, sin(x), 0, AUTO, "the sine")                                     \
  X(P, QT_COS, "cos", 0, SAME, cos(x), 0, AUTO, "the cosine")                                   \
  X(P, QT_TAN, "tan", 0, SAME, tan(x), 0, AUTO, "the tangent")                                  \
  X(P, QT_ASIN, "asin", 0, SAME, asin(x), 0, AUTO, "the arcsine")                               \
  X(P, QT_ACOS, "acos", 0, SAME, acos(x), 0, AUTO, "the arccosine")                             \
  X(P, QT_ATAN, "atan", 0, SAME, atan(x), 0, AUTO, "the arctangent")                            \
  X(P, QT_SINH, "sinh", 0, SAME, sinh(x), 0, AUTO, "the hyperbolic sine")                       \
  X(P, QT_COSH, "cosh", 0, SAME, cosh(x), 0, AUTO, "the hyperbolic cosine")                     \
  X(P, QT_ASINH, "asinh", 0, SAME, asinh(x), 0, AUTO, "the inverse hyperbolic sine")            \
  X(P, QT_ACOSH, "acosh", 0, SAME, acosh(x), 0, AUTO, "the inverse hyperbolic cosine")          \
  X(P, QT_ATANH, "atanh", 0, SAME, atanh(x), 0, AUTO, "the inverse hyperbolic tangent")         \
  X(P, QT_FLOOR, "floor", 1, SAME, floor(x), x, AUTO, "rounded down (integers: as they are)")   \
  X(P, QT_CEIL, "ceil", 1, SAME, ceil(x), x, AUTO, "rounded up (integers: as they are)")        \
  X(P, QT_ROUND, "round", 1, SAME, rint(x), x,                                                  \
    AUTO, "rounded to nearest, ties to even (integers: as they are)")                           \
  X(P, QT_TRUNC, "trunc", 1, SAME, trunc(x), x,                                                 \
    AUTO, "rounded toward zero (integers: as they are)")                                        \
  X(P, QT_FRAC, "frac", 0, SAME, x - trunc(x), 0, AUTO, "t - trunc(t)")                         \
  X(P, QT_SIGN,                                                                                 \
    "sign", 1, SAME, (x != x ? x : (T)((x > 0) - (x < 0))), (x > 0) - qt_is_negative(x),        \
    AUTO, "-1, 0 or 1 (NaN stays NaN)")                                                         \
  X(P, QT_LOG1P, "log1p", 0, SAME, log1p(x), 0, AUTO, "log(1 + t), exact for small t")          \
  X(P, QT_EXPM1, "expm1", 0, SAME, expm1(x), 0, AUTO, "e ^ t - 1, exact for small t")           \
  X(P, QT_LOG2, "log2", 0, SAME, log2(x), 0, AUTO, "the base-2 logarithm")                      \
  X(P, QT_LOG10, "log10", 0, SAME, log10(x), 0, AUTO, "the base-10 logarithm")                  \
  X(P, QT_EXP2, "exp2", 0, SAME, exp2(x), 0, AUTO, "2 ^ t")                                     \
  X(P, QT_RSQRT, "rsqrt", 0, SAME, (T)1 / sqrt(x), 0, AUTO, "1 / sqrt(t)")                      \
  X(P, QT_RECIPROCAL, "reciprocal", 0, SAME, (T)1 / x, 0, AUTO, "1 / t")                        \
  X(P, QT_SQUARE, "square", 1, SAME, x * x, (U)x * (U)x, AUTO, "t * t")                         \
  X(P, QT_ERF, "erf", 0, SAME, erf(x), 0, AUTO, "the error function")                           \
  X(P, QT_ERFC, "erfc", 0, SAME, erfc(x), 0, AUTO, "1 - erf(t), exact in the tail")             \
  X(P, QT_ERFINV, "erfinv", 0, SAME, QT_ERFINV(T, x), 0, AUTO, "the inverse of erf")            \
  X(P, QT_LGAMMA, "lgamma", 0, SAME, QT_LGAMMA(T, x), 0, AUTO, "log |gamma(t)|")                \
  X(P, QT_SOFTPLUS, "softplus", 0, SAME, (x > (T)20 ? x : log1p(exp(x))), 0,                    \
    AUTO, "log(1 + e ^ t) (t itself above 20)")                                                 \
  X(P, QT_GELU, "gelu", 0, SAME, (T)0.5 * x * ((T)1 + erf(x * (T)0.70710678118654752440)), 0,   \
    AUTO, "0.5 t (1 + erf(t / sqrt 2))")                                                        \
  X(P, QT_GELU_TANH, "gelu_tanh", 0, SAME,                                                      \
    (T)0.5 * x * ((T)1 + tanh((T)0.79788456080286535588 * (x + (T)0.044715 * x * x * x))), 0,   \
    AUTO, "gelu's tanh approximation, 0.5 t (1 + tanh(sqrt(2 / pi) (t + 0.044715 t^3)))")      \
  X(P, QT_SILU, "silu", 0, SAME, x / ((T)1 + exp(-x)), 0, AUTO, "t * sigmoid(t)")               \
  X(P, QT_ISNAN, "isnan", 1, BOOL, x != x, 0, AUTO, "a bool tensor: true where t is NaN")       \
  X(P, QT_ISINF, "isinf", 1, BOOL, fabs(x) == (T)INFINITY, 0,                                   \
    AUTO, "a bool tensor: true where t is +inf or -inf")                                        \
  X(P, QT_ISFINITE, "isfinite", 1, BOOL, (x == x) & (fabs(x) != (T)INFINITY), 1,                \
    AUTO, "a bool tensor: true where t is neither NaN nor infinite")                            \
  X(P, QT_NAN_TO_NUM, "nan_to_num", 1, SAME,                                                    \
    (x != x ? p0 : x == (T)INFINITY ? p1 : x == -(T)INFINITY ? p2 : x), x,                      \
    OWN, "")

#endif
