/*
** qlua.h — the public C API for programs that embed the qlua runtime.
**
** A host program opens the runtime in its own lua_State with luaopen_qlua (directly, or
** through luaL_requiref(L, "qlua", luaopen_qlua, 1)), then moves tensors between C and
** Lua with the functions below. The Lua binding itself (runtime/l_*.c) reaches tensor
** userdata only through qlua_checktensor / qlua_totensor / qlua_pushtensor, so what an
** embedder sees is exactly what scripts see.
**
** Ownership, in one paragraph: a tensor pushed to Lua belongs to Lua. qlua_pushtensor
** *moves* the caller's storage reference into a new userdata (the caller's qt_tensor is
** left holding nothing); the userdata's __gc, __close or t:free() gives it back.
** Pointers returned by qlua_checktensor / qlua_totensor are *borrowed*: valid while the
** userdata is reachable from Lua (keep it on the stack or in a table), never to be
** released by the caller. To keep a tensor beyond that, take your own reference with
** qt_tensor_share (tensor.h) and release it with qt_tensor_release when done.
*/
#ifndef QLUA_H
#define QLUA_H

#include <lua.h>

#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define QLUA_VERSION_MAJOR 0
#define QLUA_VERSION_MINOR 1
#define QLUA_VERSION_PATCH 0
#define QLUA_VERSION "0.1.0"
#define QLUA_VERSION_NUM (QLUA_VERSION_MAJOR * 10000 + QLUA_VERSION_MINOR * 100 + \
                          QLUA_VERSION_PATCH)

/* The name of the tensor metatable (its __name, as error messages print it). */
#define QLUA_TENSOR "qlua.Tensor"

/* Opens the runtime in L and pushes the module table (what `require "qlua"` returns).
** Creates this state's tensor context (random seed, current GPU, device-memory
** accounting that drives L's garbage collector) and the "qlua.Tensor" metatable.
** One context per lua_State: a second call in the same state returns the same module
** table (independent contexts come from independent states). */
LUAMOD_API int luaopen_qlua(lua_State *L);

/* The tensor at stack index idx, or a Lua error ("bad argument #idx to 'f'
** (qlua.Tensor expected, got number)"). Borrowed (see above). The tensor may have been
** freed (t:free()); the core's functions report that as "<op>: tensor has been freed",
** and qt_tensor_check tells beforehand. */
qt_tensor *qlua_checktensor(lua_State *L, int idx);

/* Like qlua_checktensor, but NULL (no error) when the value is not a tensor. */
qt_tensor *qlua_totensor(lua_State *L, int idx);

/* Pushes a new tensor userdata that takes over t's storage reference and geometry, and
** returns 1 (values pushed). Ownership always passes: on return *t holds nothing
** (qt_tensor_init). If it raises (a Lua memory error, or luaopen_qlua never ran in this
** state) t's reference has been released first, so nothing leaks either way. Needs two
** free stack slots. t may hold nothing; the tensor then reads as freed. */
int qlua_pushtensor(lua_State *L, qt_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
