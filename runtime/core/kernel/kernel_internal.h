/*
** kernel_internal.h — what the user-kernel files of the core share: each dtype's C type in
** CUDA source, one row per dtype suffix of runtime/tensor.h's list, read by the parameter
** parser (kernel_sig.c: which pointee binds which dtype, which scalar takes a number) and
** by the code generator (kernel_codegen.c: the type it writes). A new dtype without its
** KERNEL_CTYPE_<sfx> does not compile.
**
**   KERNEL_CTYPE_<sfx> (spelling, scalar kind, a scalar may be passed, Itanium code or 0)
*/
#ifndef QLUA_KERNEL_INTERNAL_H
#define QLUA_KERNEL_INTERNAL_H

#include "ops.h"
#include "tensor.h"

#define KERNEL_CTYPE_f32 ("float", QT_PARAM_F32, true, 'f')
#define KERNEL_CTYPE_f64 ("double", QT_PARAM_F64, true, 'd')
#define KERNEL_CTYPE_i32 ("int", QT_PARAM_I32, true, 'i')
#define KERNEL_CTYPE_i64 ("long long", QT_PARAM_I64, true, 'x')
#define KERNEL_CTYPE_b8 ("bool", QT_PARAM_BOOL, true, 'b')
#define KERNEL_CTYPE_u8 ("unsigned char", QT_PARAM_POINTER, false, 'h')  /* pointees only */
#define KERNEL_CTYPE_f16 ("__half", QT_PARAM_F16, true, 0)     /* mangled as 6__half */
#define KERNEL_CTYPE_bf16 ("__nv_bfloat16", QT_PARAM_BF16, true, 0)

/* The fields of a row: KERNEL_CTYPE_FIELD(NAME, sfx) with NAME SPELLING, KIND, SCALAR_OK or CODE. */
#define KERNEL_CTYPE_SPELLING_(spelling, kind, scalar_ok, code) spelling
#define KERNEL_CTYPE_KIND_(spelling, kind, scalar_ok, code) kind
#define KERNEL_CTYPE_SCALAR_OK_(spelling, kind, scalar_ok, code) scalar_ok
#define KERNEL_CTYPE_CODE_(spelling, kind, scalar_ok, code) code
#define KERNEL_CTYPE_FIELD(NAME, sfx) KERNEL_CTYPE_FIELD_(KERNEL_CTYPE_##NAME##_, KERNEL_CTYPE_##sfx)
#define KERNEL_CTYPE_FIELD_(M, row) QT_PP_CALL(M, QT_PP_UNPAREN row)

#endif
