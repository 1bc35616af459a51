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
**
** Threads, exactly:
**   - A lua_State, and everything reached through it, is single-threaded: one thread at a
**     time runs it (luaopen_qlua, qlua_* calls, scripts, lua_close), with the host's own
**     synchronisation when that thread changes. Borrowed pointers (qlua_checktensor /
**     qlua_totensor) are used only on that thread, and only there may qt_tensor_share
**     take a reference from one. Independent states may run on different threads at once
**     (devices, the device registry and the CPU and GPU allocators are process-wide and
**     thread-safe).
**   - A reference of your own (from qt_tensor_share, or the qt_tensor you built around
**     qt_storage_wrap) may cross threads: hand the qt_tensor struct over with your own
**     synchronisation (a mutex, a queue), then any thread that holds it may release it
**     (qt_tensor_release), or share it further (qt_tensor_share from that reference),
**     while the state keeps using, freeing and collecting its own references, or after
**     lua_close. The reference counts of storages and of the state's context are atomic;
**     the release that drops the last reference is the only one that frees, and does so on
**     its own thread: the bytes go back to the device (the CPU allocator's byte counters
**     are atomic), the context is freed if this was its last storage, and a
**     qt_storage_wrap release callback runs there too. So such a callback must be safe to
**     run on any thread that releases references, including the state's (t:free(),
**     __gc, lua_close) and yours.
**     The GPU bytes a state is charged for (qt_ctx's gpu_live_bytes, which paces its
**     collector) are an atomic count too, so GPU references cross threads the same way.
**   - The bytes themselves are not synchronised: reading a tensor's memory on another
**     thread while the state writes it (in-place ops, t:free(), which gives the bytes back
**     for every reference at once) is the host's race to prevent. Checking a reference
**     for "freed" (qt_tensor_check) reads a flag the state's t:free() writes: same rule.
**   - samples/embed.c --threads does all of this; make tsan runs it under ThreadSanitizer.
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
