/*
** tensor.h — storages, tensors, dtypes and shape/stride math.
**
** No Lua and no CUDA in here: this header is shared by the Lua binding (the runtime/l_ files),
** the tensor core (runtime/core/), the CPU device (runtime/cpu/) and the CUDA device
** (the kernels/ .cu files, compiled as C++), so it is plain C with an extern "C" guard.
**
** Ownership in one paragraph: a qt_storage is a refcounted block of bytes owned by one
** device. A qt_tensor is a plain struct (dtype, shape, strides, offset) that holds one
** reference to a storage; views are tensors sharing a storage. `qt_tensor_release`
** drops the reference; the last release gives the bytes back to the device.
** `qt_storage_free_data` gives the bytes back *now* (t:free()): the storage stays alive
** for the views that still point at it, marked freed, and every later use of any of
** them fails with "tensor has been freed".
**
** Errors: functions that can fail return 0 on success and -1 on failure, with the
** message in a qt_err (never abort, never exit, never longjmp).
*/
#ifndef QLUA_TENSOR_H
#define QLUA_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The reference counts of storages and contexts (ops.h) are atomic, because a reference
** may be released on another thread (qlua.h, "Threads"). C sees C11's _Atomic int; C++
** (the kernels/ .cu files, a C++ embedder) sees std::atomic<int>, the type C++23's
** <stdatomic.h> itself defines _Atomic(int) as: the same size, alignment and lock-free
** representation (the asserts below), so both languages read one struct layout and C++
** code could even use the count correctly. Nobody outside storage.c (its qt_storage_* and
** qt_ctx_* functions) touches it: take and drop references with the functions. (An opaque plain
** int for C++ would also lay out the same, but would let C++ code race on it silently.)
** The extern "C++" keeps <atomic> compiling when a C++ program includes this header,
** or qlua.h, inside its own extern "C" { } block. */
#ifdef __cplusplus
extern "C++" {
#include <atomic>
}
typedef std::atomic<int> qt_refcount;
static_assert(sizeof(qt_refcount) == sizeof(int) && alignof(qt_refcount) == alignof(int),
              "qt_refcount: std::atomic<int> must lay out like int (and _Atomic int)");
static_assert(ATOMIC_INT_LOCK_FREE == 2, "qt_refcount: atomic int must be lock-free");
#else
#include <stdatomic.h>
typedef _Atomic int qt_refcount;
_Static_assert(sizeof(qt_refcount) == sizeof(int) && _Alignof(qt_refcount) == _Alignof(int),
               "qt_refcount: _Atomic int must lay out like int (and std::atomic<int>)");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "qt_refcount: atomic int must be lock-free");
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define QT_MAXDIM 16   /* most dimensions a tensor may have */

/* The 16-bit float dtypes' element types: the bits, in a struct so that each is a type of
** its own (C's _Generic and C++'s overloads tell them apart, and no code does arithmetic
** on the bits by mistake). half.h converts them; scalar.h's QT_HALF_* macros pick the
** conversion by type. */
typedef struct qt_f16 { uint16_t bits; } qt_f16;    /* IEEE binary16 (NumPy's float16) */
typedef struct qt_bf16 { uint16_t bits; } qt_bf16;  /* bfloat16: float32's top half */
#define QT_ERRLEN 320  /* longest error message, with its terminating NUL */

/* ------------------------------------------------------------------ dtypes */

/* Preprocessor helpers for the lists below and in scalar.h (each list is an X-macro
** that takes an extra argument P, passed through to every X(P, ...) call, so that one
** list can be expanded inside another's entries: a table indexed by dtype and op). */
#define QT_PP_CALL(M, ...) M(__VA_ARGS__)
#define QT_PP_UNPAREN(...) __VA_ARGS__
#define QT_PP_EMPTY()
#define QT_PP_DEFER(m) m QT_PP_EMPTY()
#define QT_PP_EXPAND(...) __VA_ARGS__
#define QT_PP_CAT_(a, b) a##b
#define QT_PP_CAT(a, b) QT_PP_CAT_(a, b)

/* The one list of dtypes: X(P, ENUM, sfx, name, T, U, bytes, kind, digits, emax, short).
**   sfx   a short token for generated names (cpu_copy_f32_i64);
**   name  the Lua API's spelling;
**   T     the C type of one element; U its unsigned twin (integers wrap through it);
**   kind  FLOAT, INT, BOOL or HALF: which expression of an op (scalar.h) and which
**         conversion rule (QT_CONVERT_*) the dtype takes. BOOL takes the integer
**         expressions, and every value stored in a bool is 0 or 1 (the cast to C's bool
**         makes it so). HALF is a 16-bit float stored as its bits: it computes the float
**         expressions in float32 (QT_HALF_COMPUTE) and rounds the result back, as
**         PyTorch does; a device slot that has no HALF code of its own is given float32
**         copies by the registry (device.c, "widening").
**   digits, emax  a float's significand bits (the implicit one counted) and largest
**         exponent, 0 for the others: the integers it holds exactly (2^digits), its
**         largest finite value ((2 - 2^(1-digits)) 2^emax);
**   short PyTorch's shorthand method for a conversion to it (t:float(), t:half() ...).
** Consumers take `...` after the columns they read, so a new column breaks none of them.
** New dtypes go at the end: the enum's values are part of the C API (qlua.h).
** The enum, qt_dtypes and every device's per-dtype tables and switches are made from it
** (docs/ARCHITECTURE.md, "adding a dtype"). */
#define QT_DTYPE_LIST(X, P)                                                             \
  X(P, QT_F32, f32, "float32", float, float, 4, FLOAT, 24, 127, "float")                \
  X(P, QT_F64, f64, "float64", double, double, 8, FLOAT, 53, 1023, "double")            \
  X(P, QT_I32, i32, "int32", int32_t, uint32_t, 4, INT, 0, 0, "int")                    \
  X(P, QT_I64, i64, "int64", int64_t, uint64_t, 8, INT, 0, 0, "long")                   \
  X(P, QT_BOOL, b8, "bool", bool, uint8_t, 1, BOOL, 0, 0, "bool")                       \
  X(P, QT_U8, u8, "uint8", uint8_t, uint8_t, 1, INT, 0, 0, "byte")                      \
  X(P, QT_F16, f16, "float16", qt_f16, uint16_t, 2, HALF, 11, 15, "half")               \
  X(P, QT_BF16, bf16, "bfloat16", qt_bf16, uint16_t, 2, HALF, 8, 127, "bfloat16")

#define QT_KIND_IS_FLOAT_FLOAT 1
#define QT_KIND_IS_FLOAT_INT 0
#define QT_KIND_IS_FLOAT_BOOL 0
#define QT_KIND_IS_FLOAT_HALF 1
#define QT_KIND_IS_BOOL_FLOAT 0
#define QT_KIND_IS_BOOL_INT 0
#define QT_KIND_IS_BOOL_BOOL 1
#define QT_KIND_IS_BOOL_HALF 0
#define QT_KIND_IS_HALF_FLOAT 0
#define QT_KIND_IS_HALF_INT 0
#define QT_KIND_IS_HALF_BOOL 0
#define QT_KIND_IS_HALF_HALF 1
/* QT_PICK_<kind>(float expression, integer expression): the one a dtype of that kind
** computes. A bool takes the integer expression's nonzero (add is logical or, mul
** logical and), written as a comparison so that compilers do not read `x * y` stored
** into a bool as a mistake. */
#define QT_PICK_FLOAT(f, i) f
#define QT_PICK_INT(f, i) i
#define QT_PICK_BOOL(f, i) ((i) != 0)
#define QT_PICK_HALF(f, i) f
/* QT_UNLESS_HALF_<kind>(...): its arguments, or nothing for kind HALF: for code that
** computes in the dtype's own C type, which the 16-bit floats reach only as float32
** copies (a slot without its half_native bit, device.h). */
#define QT_UNLESS_HALF_FLOAT(...) __VA_ARGS__
#define QT_UNLESS_HALF_INT(...) __VA_ARGS__
#define QT_UNLESS_HALF_BOOL(...) __VA_ARGS__
#define QT_UNLESS_HALF_HALF(...)

/* Every ordered pair of dtypes: X(dst ENUM, sfx, name, T, U, bytes, kind, digits, emax,
** short, src ENUM, sfx, name, T, U, bytes, kind, digits, emax, short), for tables indexed by two dtypes (the CPU's conversions).
** The inner list is deferred one scan (QT_PP_DEFER), because a macro cannot expand
** inside its own expansion; QT_PP_EXPAND gives it that scan. */
#define QT_DTYPE_PAIRS(X) QT_PP_EXPAND(QT_DTYPE_LIST(QT_DTYPE_PAIRS_OUTER_, X))
#define QT_DTYPE_PAIRS_OUTER_(X, ...) \
  QT_PP_DEFER(QT_DTYPE_LIST_AGAIN_)()(QT_DTYPE_PAIRS_INNER_, (X, __VA_ARGS__))
#define QT_DTYPE_LIST_AGAIN_() QT_DTYPE_LIST
#define QT_DTYPE_PAIRS_INNER_(P, ...) \
  QT_PP_CALL(QT_DTYPE_PAIRS_APPLY_, QT_PP_UNPAREN P, __VA_ARGS__)
#define QT_DTYPE_PAIRS_APPLY_(X, ...) X(__VA_ARGS__)

#define QT_DTYPE_ENUM_(P, E, ...) E,
typedef enum qt_dtype { QT_DTYPE_LIST(QT_DTYPE_ENUM_, ~) QT_NDTYPES } qt_dtype;
#undef QT_DTYPE_ENUM_

typedef struct qt_dtype_info {
  const char *name;  /* "float32" ... as the Lua API spells it */
  size_t size;       /* bytes per element */
  bool is_float;     /* float32, float64 and the 16-bit floats */
  bool is_bool;
  bool is_half;      /* float16, bfloat16: stored as bits, computed in float32 */
  int64_t min, max;  /* integer and bool dtypes: the values they hold (0, 0 for floats) */
} qt_dtype_info;

extern const qt_dtype_info qt_dtypes[QT_NDTYPES];

/* The dtype called `name`, or -1. */
int qt_dtype_from_name(const char *name);
static inline size_t qt_elsize(qt_dtype d) { return qt_dtypes[d].size; }
static inline bool qt_is_float(qt_dtype d) { return qt_dtypes[d].is_float; }
static inline bool qt_is_bool(qt_dtype d) { return qt_dtypes[d].is_bool; }
static inline bool qt_is_half(qt_dtype d) { return qt_dtypes[d].is_half; }
/* A float dtype's significand bits (the implicit one counted; 0 for the others): it holds
** every integer of magnitude up to 2^digits exactly. From the dtype list. */
static inline int qt_dtype_digits(qt_dtype d) {
#define QT_DTYPE_DIGITS_(P, E, sfx, name, T, U, size, kind, digits, ...) case E: return digits;
  switch (d) { QT_DTYPE_LIST(QT_DTYPE_DIGITS_, ~) default: return 0; }
#undef QT_DTYPE_DIGITS_
}
/* A float dtype's largest finite value, (2 - 2^(1-digits)) 2^emax, exactly (0 for the
** others): 3.4028234663852886e38 for float32, 65504 for float16. */
static inline double qt_dtype_max_finite(qt_dtype d) {
#define QT_DTYPE_EMAX_(P, E, sfx, name, T, U, size, kind, digits, e, ...) case E: emax = e; break;
  int emax = 0;
  switch (d) { QT_DTYPE_LIST(QT_DTYPE_EMAX_, ~) default: break; }
#undef QT_DTYPE_EMAX_
  int digits = qt_dtype_digits(d);
  if (digits == 0) return 0.0;
  /* (2 - 2^(1-digits)) * 2^emax = (2^digits - 1) * 2^(emax - digits + 1), both exact */
  double m = 1.0, p = 1.0;
  for (int k = 0; k < digits; k++) m *= 2.0;
  m -= 1.0;
  for (int k = 0; k < emax - digits + 1; k++) p *= 2.0;
  return m * p;
}
/* NumPy's promotion: bool with anything gives the other; two integers or two floats give
** the wider (uint8 with int32 gives int32); a float with an integer gives the narrowest
** float that holds every value of both (float32 with bool or uint8, float64 with int32
** or int64). The 16-bit floats follow PyTorch instead: with any integer or bool they
** stay 16-bit; float16 with bfloat16 gives float32; with float32 or float64, that. */
qt_dtype qt_promote(qt_dtype a, qt_dtype b);

/* A number crossing the C/device boundary: both fields always filled, so a device
** uses .f for float dtypes and .i for integer ones without re-deciding. */
typedef struct qt_scalar {
  double f;
  int64_t i;
} qt_scalar;

static inline qt_scalar qt_scalar_f(double f) {
  qt_scalar s; s.f = f; s.i = (int64_t)f; return s;  /* caller range-checks first */
}
static inline qt_scalar qt_scalar_i(int64_t i) {
  qt_scalar s; s.f = (double)i; s.i = i; return s;
}
/* A float as a scalar whose .i saturates (NaN gives 0). */
qt_scalar qt_scalar_from_double(double f);
/* The element at src, of dtype d. */
qt_scalar qt_scalar_load(qt_dtype d, const void *src);
/* Stores s at dst as dtype d: float dtypes take s.f, integer ones s.i, wrapping as C's
** narrowing does (range checks are the caller's: qt_dtypes[d].min/max). */
void qt_scalar_store(qt_dtype d, void *dst, qt_scalar s);
/* Room for one element of any dtype, aligned for all of them. */
typedef union qt_cell {
  int64_t i64;
  double f64;
  unsigned char bytes[8];
} qt_cell;

/* ------------------------------------------------------------------ errors */

typedef struct qt_err {
  char msg[QT_ERRLEN];
} qt_err;

/* printf into err->msg (truncating); always returns -1 so callers can
** `return qt_errorf(err, "...")`. err may be NULL. */
int qt_errorf(qt_err *err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* A message that starts with "<from>:" is made to start with "<to>:" instead (a core
** function serving a differently named op: zeros is built on empty). Always returns -1. */
int qt_err_rename(qt_err *err, const char *from, const char *to);

/* The message of a failed step of a composed op, made to name the op: whatever op name
** leads it ("matmul: ...", "empty: ..." from the steps einsum or multinomial is made of)
** becomes `op`, so the user always reads the function they called and no list of the steps'
** names can go stale. A message led by something else (a device: "cpu: ...", "gpu:0: ...")
** gets "op: " in front; one that already names op is kept. Always returns -1. */
int qt_err_as(qt_err *err, const char *op);

/* ------------------------------------------------------------------ storage and tensor */

struct qt_device;
struct qt_ctx;

typedef struct qt_storage {
  qt_refcount refcount;       /* atomic: see qt_storage_release */
  bool freed;                 /* data given back by t:free(); views see "has been freed" */
  struct qt_device *device;   /* owner of data */
  void *data;                 /* device (or host) pointer; may be NULL when nbytes == 0 */
  size_t nbytes;
  struct qt_ctx *owner;       /* the per-lua_State context charged for the bytes (may be NULL) */
  /* External memory (the embedding API): when release is set, the bytes are not the
  ** device's; release(release_ud, data) is called instead of device->iface->free. */
  void (*release)(void *release_ud, void *data);
  void *release_ud;
  /* Counts the in-place writes into the bytes, through any view (every write passes
  ** ops_check_writable): autograd's check that a tensor it saved is still as it was. */
  uint64_t version;
} qt_storage;

typedef struct qt_tensor {
  qt_storage *storage;        /* one reference held; NULL for a tensor that holds nothing */
  qt_dtype dtype;
  int ndim;                   /* 0 .. QT_MAXDIM; 0 is a scalar (numel 1) */
  int64_t offset;             /* in elements, from storage->data */
  int64_t size[QT_MAXDIM];
  int64_t stride[QT_MAXDIM];  /* in elements, >= 0 (0 for broadcast dimensions) */
} qt_tensor;

/* What a device op sees of a tensor: a pointer to its first element, and its geometry.
** Passed by const pointer to device slots; the CUDA launchers copy it by value into
** kernel parameters. */
typedef struct qt_view {
  void *data;
  qt_dtype dtype;
  int ndim;
  int64_t numel;
  int64_t size[QT_MAXDIM];
  int64_t stride[QT_MAXDIM];
} qt_view;

/* A storage over bytes the caller owns (the embedding API): `data` lives on `dev`
** (qt_cpu_device() for host memory), and release(release_ud, data) is called exactly once,
** when the last reference goes or at t:free(), on the thread that does that (which may
** be another thread than the state's when the embedder releases references there). The
** caller holds the one reference (refcount 1). NULL when out of memory (release is not
** called then). */
qt_storage *qt_storage_wrap(struct qt_device *dev, void *data, size_t nbytes,
                            void (*release)(void *release_ud, void *data), void *release_ud);
/* Takes a reference (an atomic refcount++). The caller must already hold one. */
void qt_storage_retain(qt_storage *s);
/* Drops a reference (an atomic refcount--, acquire-release); the one that drops the last
** gives the bytes back (device free or external release) and frees the struct, after
** every other holder's accesses, on whichever thread that is. Never fails. Any thread
** may release a reference it holds (see qlua.h, "Threads"). */
void qt_storage_release(qt_storage *s);
/* Gives the bytes back now (t:free()); idempotent; the struct lives on while referenced.
** Not atomic with uses of the bytes: only the thread that owns the storage's state. */
void qt_storage_free_data(qt_storage *s);

/* Sets *t to hold nothing (storage NULL, ndim 0). */
void qt_tensor_init(qt_tensor *t);
/* Releases t's storage reference and re-initialises t; idempotent. May run on any
** thread for a reference that thread holds (qlua.h, "Threads"). */
void qt_tensor_release(qt_tensor *t);
/* *dst = a new reference to src's storage with src's geometry (a view of all of src).
** dst must hold nothing. src must hold a reference for the whole call: a tensor of your
** own (any thread), or a borrowed one from Lua (only on that state's thread). */
void qt_tensor_share(qt_tensor *dst, const qt_tensor *src);

/* 0 if t can be used; else -1 with "<op>: tensor has been freed". */
int qt_tensor_check(const qt_tensor *t, const char *op, qt_err *err);

int64_t qt_numel(const qt_tensor *t);
bool qt_is_contiguous(const qt_tensor *t);
/* Row-major strides for size[0..ndim); returns the element count, or -1 when the
** product overflows int64 or a size is negative. */
int64_t qt_contiguous_strides(int ndim, const int64_t *size, int64_t *stride);
/* Fills v from t (t must be live). */
void qt_view_of(qt_view *v, const qt_tensor *t);
/* "2x3x4" (or "scalar" for 0-d) into buf; returns buf. */
const char *qt_shape_str(int ndim, const int64_t *size, char *buf, size_t len);

/* Merges dimensions that are contiguous with each other in *every* view of the set
** (same iteration order), drops size-1 dimensions, and leaves at least one dimension.
** All views must have the same ndim and sizes. Lets devices run N-D strided loops as
** 1-D or 2-D ones: the elementwise fast path. */
void qt_views_collapse(qt_view **views, int nviews);

#ifdef __cplusplus
}
#endif
#endif
