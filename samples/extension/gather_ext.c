/*
** gather_ext.c — a C extension module for qlua: the seed's Gather, out[i] = src[index[i]],
** run by a CUDA kernel of its own (gather_kernel.cu) on qlua's stream, on qlua's tensors.
** This file is the Lua side, in plain C: it sees qlua.h (the C API) and nothing of CUDA.
**
**   make extension                     builds $(BUILD)/extension/gather_ext.so (nvcc -shared)
**   package.cpath = "build/extension/?.so;" .. package.cpath
**   local ext = require "gather_ext"
**   local out = ext.gather(src, index)  -- src: a 1-D GPU tensor of any dtype; index: a 1-D
**                                       -- int32 or int64 GPU tensor of 1-based positions
**
** The result is a new contiguous tensor of src's dtype and index's length, on src's GPU,
** allocated by qlua (so it is counted, collected and cached as any qlua tensor). src and
** index may be strided views. Errors are Lua errors naming the function and the values:
**   gather: argument #1 is on cpu, expected a GPU tensor
**   gather: index must be int32 or int64, got float32
**   gather: src must be 1-D, got 2-D (2x3)
**   gather: tensors on gpu:0 and gpu:1
**   gather: index 0 out of range (1..100) at position 5
** A bad index is found by the kernel and reported by the call itself: the launcher waits
** for the stream after its kernel (see gather_kernel.cu), so unlike qlua's built-in
** src:gather(index), which reports at the next sync, this one costs a round trip per call.
**
** It must be loaded into a process that runs qlua: the qlua host (build/qlua, which
** exports the Lua and qlua C APIs), or a program that links the runtime with its symbols
** exported (-Wl,-E). The module resolves qlua_* and lua_* from there.
*/
#include <stdint.h>

#include "qlua.h"
#include "gather_kernel.h"

#define OP "gather"

/* A 1-D tensor, or an error naming it and its shape. */
static void check_1d(lua_State *L, const qt_tensor *t, const char *what) {
  if (t->ndim != 1) {
    char shape[96];
    qlua_error(L, OP, "%s must be 1-D, got %d-D (%s)", what, t->ndim,
               qt_shape_str(t->ndim, t->size, shape, sizeof shape));
  }
}

/* gather(src, index) -> a new tensor */
static int ext_gather(lua_State *L) {
  if (lua_gettop(L) > 2)
    return qlua_error(L, OP, "takes 2 arguments (src, index), got %d", lua_gettop(L));
  qt_tensor *src = qlua_checkgpu(L, 1, QLUA_ANY_DTYPE, OP);
  qt_tensor *index = qlua_checkgpu(L, 2, QLUA_ANY_DTYPE, OP);
  if (index->dtype != QT_I32 && index->dtype != QT_I64)
    return qlua_error(L, OP, "index must be int32 or int64, got %s",
                      qt_dtypes[index->dtype].name);
  check_1d(L, src, "src");
  check_1d(L, index, "index");
  int device = qlua_gpu_index(src);
  if (qlua_gpu_index(index) != device)
    return qlua_error(L, OP, "tensors on gpu:%d and gpu:%d", device, qlua_gpu_index(index));

  int64_t n = index->size[0];
  qlua_newtensor(L, src->dtype, 1, &n, src, OP);                  /* the result: slot 3 */
  if (n == 0) return 1;
  int64_t one = 1;
  qt_tensor *flag = qlua_newtensor(L, QT_I64, 1, &one, src, OP);  /* the kernel's report */
  qt_tensor *out = qlua_totensor(L, 3);
  void *stream = qlua_cuda_stream(L, src, OP);

  /* Pointers last: qlua_setfuncs (below) keeps src and index alive whatever a finalizer
  ** run by the allocations does, but reading them after the allocations is right anyway. */
  int64_t bad_position = 0, bad_value = 0;
  char err[256];
  int rc = gather_ext_run(device, stream, qlua_data(out), qlua_data(src), src->size[0],
                          src->stride[0], qt_elsize(src->dtype), qlua_data(index),
                          index->dtype == QT_I64, n, index->stride[0], qlua_data(flag),
                          &bad_position, &bad_value, err, sizeof err);
  if (rc == 1)
    return qlua_error(L, OP, "index %lld out of range (1..%lld) at position %lld",
                      (long long)bad_value, (long long)src->size[0],
                      (long long)bad_position + 1);
  if (rc != 0) return qlua_error(L, OP, "%s", err);
  lua_settop(L, 3);
  return 1;
}

static const luaL_Reg funcs[] = {
  { "gather", ext_gather },
  { NULL, NULL },
};

/* require "gather_ext": the module table. */
LUAMOD_API int luaopen_gather_ext(lua_State *L) {
  lua_newtable(L);
  qlua_setfuncs(L, funcs);  /* run as qlua's own functions: operands held while they run */
  return 1;
}
