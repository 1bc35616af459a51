# qlua — build, test, demo, bench, install.
#
#   make            build/qlua (the host) and build/qlua.so (the Lua C module)
#   make test       the busted suite, run through build/qlua
#   make demo       a sample script
#   make bench      benchmarks against raw CUDA / cuBLAS (GPU machine)
#   make deps       installs the Debian packages the build and the tests need
#   make install    PREFIX=/usr/local
#   make fuzz / asan / valgrind / embed   reliability checks (see the section at the end)
#   make extension  the sample C extension, $(BUILD)/extension/gather_ext.so (needs CUDA)
#
# Lua comes from pkg-config (LUA_CFLAGS / LUA_LIBS override it). CUDA=auto (the default)
# builds the CUDA device when nvcc is found and this machine has a GPU; CUDA=1 builds it
# wherever nvcc is (CI does, to keep it compiling), CUDA=0 never. Builds run one job per
# core unless the command line says -j.

# One job per core by default: the CUDA files take minutes each, and run side by side.
ifeq ($(filter -j%,$(MAKEFLAGS)),)
  MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 2)
endif

PREFIX   ?= /usr/local
BUILD    ?= build
CC       ?= cc
PKG_CONFIG ?= pkg-config

LUA_CFLAGS ?= $(shell $(PKG_CONFIG) --cflags lua5.4 2>/dev/null || echo -I/usr/include/lua5.4)
LUA_LIBS   ?= $(shell $(PKG_CONFIG) --libs lua5.4 2>/dev/null || echo -llua5.4)
# OpenBLAS is not linked: runtime/cpu/cpu_matmul_blas.c loads it on the first CPU product, after
# choosing its kernel set for this CPU (OPENBLAS_CORETYPE), which it reads when it loads.
READLINE_LIBS ?= -lreadline
# jansson parses and writes the JSON header of .safetensors files (runtime/core/safetensors.c)
JANSSON_CFLAGS ?= $(shell $(PKG_CONFIG) --cflags jansson 2>/dev/null)
JANSSON_LIBS   ?= $(shell $(PKG_CONFIG) --libs jansson 2>/dev/null || echo -ljansson)

OPT      ?= -O2
CFLAGS   ?= $(OPT) -g
QCFLAGS  := -std=c11 -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L -Wall -Wextra -fPIC \
            -Iruntime $(LUA_CFLAGS) $(JANSSON_CFLAGS)
LDFLAGS  ?=
LIBS     := $(JANSSON_LIBS) -lm -lpthread -ldl
# glibc's vector math library (x86-64), when it has every function runtime/cpu.c calls
# (the tanh ones arrived in glibc 2.35): the exp, log, tanh and sigmoid rows then run
# 4 floats or 2 doubles per call. LIBMVEC=0 leaves it out.
LIBMVEC_PROBE := \#include <emmintrin.h>\n__m128 _ZGVbN4v_expf(__m128); __m128 _ZGVbN4v_logf(__m128);\n\
__m128 _ZGVbN4v_tanhf(__m128); __m128d _ZGVbN2v_exp(__m128d); __m128d _ZGVbN2v_log(__m128d);\n\
__m128d _ZGVbN2v_tanh(__m128d);\nint main(void) { volatile __m128 f = _mm_set1_ps(1); volatile __m128d d = _mm_set1_pd(1);\n\
f = _ZGVbN4v_expf(f); f = _ZGVbN4v_logf(f); f = _ZGVbN4v_tanhf(f);\n\
d = _ZGVbN2v_exp(d); d = _ZGVbN2v_log(d); d = _ZGVbN2v_tanh(d); return 0; }\n
ifeq ($(origin LIBMVEC),undefined)
  LIBMVEC := $(shell [ "$$(uname -m)" = x86_64 ] && printf '$(LIBMVEC_PROBE)' \
    | $(CC) -x c - -lmvec -lm -o /dev/null 2>/dev/null && echo 1)
endif
ifeq ($(LIBMVEC),1)
  QCFLAGS += -DQLUA_LIBMVEC
  LIBS    += -lmvec
endif

# ---- CUDA: auto-detected, CUDA=0 to leave it out
ifeq ($(origin NVCC),undefined)
  NVCC := $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
endif
CUDA     ?= auto
# auto: nvcc, and a GPU to run on (a /dev/nvidia<n> device node, or nvidia-smi seeing one).
# Without a GPU the CUDA device could only be compiled, which takes minutes, so it is
# skipped with one line that says so.
ifeq ($(CUDA),auto)
  ifeq ($(strip $(NVCC)),)
    override CUDA := 0
  else ifneq ($(shell ls /dev/nvidia[0-9]* >/dev/null 2>&1 && echo y || \
                nvidia-smi -L 2>/dev/null | grep -q GPU && echo y),)
    override CUDA := 1
  else
    override CUDA := 0
    ifeq ($(MAKELEVEL),0)
      ifneq ($(filter-out clean deps uninstall,$(or $(MAKECMDGOALS),all)),)
        $(info make: nvcc is here but no GPU, so this qlua is CPU-only (CUDA=1 builds the CUDA device too))
      endif
    endif
  endif
endif
# The toolkit root: where nvcc lives, unless that nvcc is a wrapper elsewhere (e.g. a
# /usr/local/bin/nvcc script); then /usr/local/cuda, the toolkit's default home.
ifeq ($(origin CUDA_HOME),undefined)
  CUDA_HOME := $(shell d='$(patsubst %/bin/nvcc,%,$(NVCC))'; \
    if [ -e "$$d/lib64/libcudart.so" ] || [ ! -e /usr/local/cuda/lib64/libcudart.so ]; \
    then echo "$$d"; else echo /usr/local/cuda; fi)
endif
# sm_90 machine code for the H100/H200, plus compute_90 PTX the driver can JIT for newer GPUs
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCCFLAGS ?= -O3 -lineinfo
QNVCCFLAGS := -std=c++17 -DQLUA_CUDA $(CUDA_ARCH) -Xcompiler -fPIC,-Wall,-Wextra -Iruntime

# runtime/ is layered in folders (docs/ARCHITECTURE.md); the host program (the command
# line and the REPL) is what the executable adds to the library the module is built from.
HOST_SRC    := $(wildcard runtime/host/*.c)
RUNTIME_SRC := $(filter-out $(HOST_SRC),$(wildcard runtime/*.c runtime/*/*.c runtime/*/*/*.c))
RUNTIME_OBJ := $(RUNTIME_SRC:%.c=$(BUILD)/obj/%.o)
HOST_OBJ    := $(HOST_SRC:%.c=$(BUILD)/obj/%.o)
KERNEL_SRC  := $(wildcard kernels/*.cu)
# The CUDA objects depend on nvcc's flags only, not on CC/CFLAGS, so a build with other C
# flags (the rock's, in build/rock) may share another build's: KERNEL_BUILD says whose.
KERNEL_BUILD ?= $(BUILD)
KOBJ := $(KERNEL_BUILD)/obj
# The files whose per-dtype code takes minutes are compiled as several objects side by
# side (kernels/dispatch.cuh, "Parts"): stem:parts. One part per dtype the file's slots
# take (sort's take no 16-bit floats): each then takes about as long as the lighter files.
CU_PARTS := elementwise:8 reduce:8 sort:6
cu_stem  = $(word 1,$(subst :, ,$(1)))
cu_count = $(word 2,$(subst :, ,$(1)))
cu_part_objs = $(foreach k,$(shell seq 0 $$(($(call cu_count,$(1)) - 1))),\
                 $(KOBJ)/kernels/$(call cu_stem,$(1)).part$(k).o)
ifeq ($(CUDA),1)
  # the parts first: make starts jobs in this order, and they are the longest
  KERNEL_OBJ := $(foreach p,$(CU_PARTS),$(call cu_part_objs,$(p))) $(KERNEL_SRC:%.cu=$(KOBJ)/%.o)
  QCFLAGS    += -DQLUA_CUDA
  # cuBLAS is not linked: matmul.cu loads it on the first product that needs it.
  QNVCCFLAGS += -DQLUA_CUDA_LIBDIR='"$(CUDA_HOME)/lib64"'
  LIBS       += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++
else
  KERNEL_OBJ :=
endif
HEADERS := $(wildcard runtime/*.h runtime/*/*.h runtime/*/*/*.h kernels/*.h kernels/*.cuh)
# Each object depends on the headers it includes, as the compiler lists them (-MMD: a .d
# beside the object, read back below), so a header touches only the files that include it:
# a core header no longer recompiles every CUDA file. DEPFLAGS is part of the stamps, so
# objects made before the lists existed are made again once.
DEPFLAGS := -MMD -MP

# The flags each kind of object was built with, one file each: when they change (CUDA=0
# after CUDA=1, another CFLAGS), the objects they made are rebuilt instead of mixed.
C_STAMP  := $(BUILD)/obj/c.flags
CU_STAMP := $(KOBJ)/cu.flags
flags_stamp = $(shell mkdir -p $(dir $(1)) && { [ -f $(1) ] && [ "$$(cat $(1))" = '$(subst ','\'',$(2))' ] || \
                printf '%s\n' '$(subst ','\'',$(2))' > $(1); })
$(call flags_stamp,$(C_STAMP),$(CC) $(QCFLAGS) $(CFLAGS) $(DEPFLAGS))
ifeq ($(CUDA),1)
$(call flags_stamp,$(CU_STAMP),$(NVCC) $(QNVCCFLAGS) $(NVCCFLAGS) $(CU_PARTS) $(DEPFLAGS))
endif

QLUA := $(BUILD)/qlua

.PHONY: all test demo bench deps install install-files uninstall clean
all: $(QLUA) $(BUILD)/qlua.so

# The host: -Wl,-E exports the Lua API so C modules loaded by require (lfs, busted's
# term/system) bind to the Lua inside qlua.
$(QLUA): $(KERNEL_OBJ) $(HOST_OBJ) $(RUNTIME_OBJ)
	$(CC) $(LDFLAGS) -Wl,-E -o $@ $^ $(LUA_LIBS) $(READLINE_LIBS) $(LIBS)

# The Lua C module: the Lua API comes from whichever host loads it.
$(BUILD)/qlua.so: $(KERNEL_OBJ) $(RUNTIME_OBJ)
	$(CC) $(LDFLAGS) -shared -o $@ $^ $(LIBS)

$(BUILD)/obj/%.o: %.c $(C_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(QCFLAGS) $(CFLAGS) $(DEPFLAGS) -c -o $@ $<

$(KOBJ)/%.o: %.cu $(CU_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(QNVCCFLAGS) $(NVCCFLAGS) $(CU_PARTS_FLAGS) $(DEPFLAGS) -MF $(@:.o=.d) -c -o $@ $<

# A file built in parts: its own object is the entry (the slots, dispatching to the parts),
# and part k instantiates the per-dtype code of the dtypes whose enum value is k modulo n.
define cu_parts_rules
$(KOBJ)/kernels/$(1).o: CU_PARTS_FLAGS := -DQT_NPARTS=$(2)
$(KOBJ)/kernels/$(1).part%.o: kernels/$(1).cu $$(CU_STAMP)
	@mkdir -p $$(dir $$@)
	$$(NVCC) $$(QNVCCFLAGS) $$(NVCCFLAGS) -DQT_NPARTS=$(2) -DQT_PART=$$* $$(DEPFLAGS) -MF $$(@:.o=.d) -c -o $$@ $$<
endef
$(foreach p,$(CU_PARTS),$(eval $(call cu_parts_rules,$(call cu_stem,$(p)),$(call cu_count,$(p)))))
-include $(shell find $(BUILD)/obj $(KOBJ) -name '*.d' 2>/dev/null)

# ---- tests: busted started inside qlua (spec/run.lua), so specs see qlua as scripts do
SPEC ?= spec
# The specs that run make themselves get a make of their own: no jobserver or variables
# inherited from this one (its recipe is not a sub-make).
test: all
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL QLUA=$(QLUA) $(QLUA) spec/run.lua $(SPEC)

demo: all
	$(QLUA) samples/demo.lua

# ---- a C extension module with its own CUDA kernel (samples/extension/, docs/API.md "C
# extensions"): nvcc -shared against qlua.h only; the qlua that loads it provides the Lua
# and qlua symbols, so it needs no qlua build. With CUDA=0 it says so and builds nothing
# (status 0); `make all` never builds it.
EXT_DIR := samples/extension
EXT_SO  := $(BUILD)/extension/gather_ext.so
.PHONY: extension
ifeq ($(CUDA),1)
extension: $(EXT_SO)
$(EXT_SO): $(EXT_DIR)/gather_ext.c $(EXT_DIR)/gather_kernel.cu $(EXT_DIR)/gather_kernel.h \
           runtime/qlua.h runtime/tensor.h
	@mkdir -p $(dir $@)
	$(NVCC) -shared $(CUDA_ARCH) -O3 -cudart shared -Xcompiler -fPIC,-Wall,-Wextra \
	  -Xlinker -rpath,$(CUDA_HOME)/lib64 -Iruntime $(LUA_CFLAGS) -o $@ \
	  $(EXT_DIR)/gather_ext.c $(EXT_DIR)/gather_kernel.cu
else
extension:
	@echo "make extension: needs CUDA (nvcc); this build has CUDA=0, so nothing was built"
endif

# ---- benchmarks: qlua vs raw CUDA/cuBLAS (bench/baseline.cu) and vs NumPy, in one run
PYTHON ?= $(shell for p in python3 /usr/bin/python3; do $$p -c 'import numpy' 2>/dev/null && { echo $$p; break; }; done)
BENCH_BASELINE := $(if $(filter 1,$(CUDA)),$(BUILD)/bench-baseline)
$(BUILD)/bench-baseline: bench/baseline.cu
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 $(CUDA_ARCH) -O3 -o $@ $< -lcublas
# bench/kprof.c: a CUPTI kernel profiler loaded by benchmark scripts (package.loadlib)
$(BUILD)/kprof.so: bench/kprof.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -Wall -Wextra -shared -fPIC -I$(CUDA_HOME)/include $(LUA_CFLAGS) -o $@ $< \
	  -L$(CUDA_HOME)/lib64 -Wl,-rpath,'$$ORIGIN' -Wl,-rpath,$(CUDA_HOME)/lib64 -lcupti
bench: all $(BENCH_BASELINE)
	$(QLUA) bench/bench.lua --baseline $(BUILD)/bench-baseline --csv $(BUILD)/bench.csv \
	  $(if $(PYTHON),--python $(PYTHON)) $(CASES)
	$(if $(CASES),,$(QLUA) bench/autograd.lua --csv $(BUILD)/bench_autograd.csv $(if $(PYTHON),--python $(PYTHON)))
	$(if $(CASES),,$(QLUA) bench/nn.lua --csv $(BUILD)/bench_nn.csv $(if $(PYTHON),--python $(PYTHON)))
	$(if $(CASES),,$(QLUA) bench/attention.lua --csv $(BUILD)/bench_attention.csv $(if $(PYTHON),--python $(PYTHON)))
	$(if $(CASES),,$(QLUA) bench/gpt.lua --csv $(BUILD)/bench_gpt.csv $(if $(PYTHON),--python $(PYTHON)))
	$(if $(CASES),,$(QLUA) bench/graph.lua --csv $(BUILD)/bench_graph.csv $(if $(PYTHON),--python $(PYTHON)))
	$(if $(CASES),,$(QLUA) bench/dist.lua --csv $(BUILD)/bench_dist.csv $(if $(PYTHON),--python $(PYTHON)))

# ---- packages: Debian's, installed only when missing
# (luarocks: the rock; python3-numpy: the .npy round trips and the bench's baseline;
# util-linux: `script`, for the REPL's terminal specs)
DEB_PACKAGES := lua5.4 liblua5.4-dev lua-busted libreadline-dev libopenblas-dev libjansson-dev \
                pkg-config luarocks python3-numpy util-linux
deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	else echo "make deps: all packages present"; fi

# the Lua libraries (lua/qlua/: autograd, nn, optim, testing, fuzz) go to share/lua/5.4, where the
# installed qlua looks (next to its bin/) and where a stock lua5.4 looks for PREFIX=/usr/local
LUA_LIBS_SRC := $(shell find lua -name '*.lua' 2>/dev/null)
install: all
	@$(MAKE) --no-print-directory install-files
# (install-files copies what `all` built, and builds nothing: spec/host/build_spec.lua runs it)
install-files:
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/lua/5.4
	install -m 755 $(QLUA) $(DESTDIR)$(PREFIX)/bin/qlua
	install -m 755 $(BUILD)/qlua.so $(DESTDIR)$(PREFIX)/lib/lua/5.4/qlua.so
	for f in $(patsubst lua/%,%,$(LUA_LIBS_SRC)); do \
	  install -D -m 644 lua/$$f $(DESTDIR)$(PREFIX)/share/lua/5.4/$$f || exit 1; done

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/qlua $(DESTDIR)$(PREFIX)/lib/lua/5.4/qlua.so
	rm -rf $(DESTDIR)$(PREFIX)/share/lua/5.4/qlua

clean:
	rm -rf $(BUILD)

# ==== reliability: fuzz, asan, valgrind, embed, tsan ======================================
# The sanitizer and valgrind copies are built in their own build dirs by re-running make
# with CFLAGS/LDFLAGS/BUILD set on the command line: the same rules, other flags.
#
#   make fuzz [N=10000] [SEED=1]     the API fuzzer (lua/qlua/fuzz.lua) on $(QLUA)
#   make asan [ASAN_FUZZ_N=20000]    ASan+UBSan+LSan build in build/asan (CPU only): the spec
#                                    suite, then a fuzz run; fails if either fails
#   make asan-fuzz [N=100000]        only the fuzz run, on the ASan build
#   make valgrind                    build/cpu/qlua under valgrind: the samples, some specs
#   make embed                       builds $(BUILD)/embed (samples/embed.c) and runs it
#   make tsan [TSAN_N=50000]         ThreadSanitizer build in build/tsan (CPU only): embed
#                                    --threads, references released on other threads
#   make gpu-check                   on the GPU machine: the GPU specs and a fuzz run under
#                                    compute-sanitizer memcheck, a plain GPU fuzz run, the soak
#                                    (GPU_FUZZ_N, SAN_FUZZ_N, SOAK_SECONDS, SOAK_GIB)
N           ?= 10000
SEED        ?= 1
ASAN_FUZZ_N ?= 20000
ASAN_BUILD  ?= build/asan
CPU_BUILD   ?= build/cpu
SAN_FLAGS   ?= -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
# A runaway allocation must fail, not take the machine: a CPU-only fuzz runs under ulimit -v
# (ASan and the CUDA runtime reserve terabytes of address space, so they cannot: ASan gets
# max_allocation_size_mb instead).
FUZZ_MEM_KB ?= 8388608
FUZZ_LIMIT  := $(if $(filter 1,$(CUDA)),,ulimit -v $(FUZZ_MEM_KB);)
ASAN_ENV    ?= ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1:max_allocation_size_mb=8192:hard_rss_limit_mb=12288:detect_stack_use_after_return=1:check_initialization_order=1:strict_string_checks=1:exitcode=99 \
               UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=99 \
               OPENBLAS_NUM_THREADS=1
VALGRIND       ?= valgrind
VALGRIND_FLAGS ?= --error-exitcode=1 --leak-check=full --show-leak-kinds=definite,indirect,possible \
                  --errors-for-leak-kinds=definite,indirect,possible --track-origins=yes
VALGRIND_SPECS ?= spec/ops/create_spec.lua spec/ops/shape_spec.lua spec/ops/index_spec.lua \
                  spec/formats/npy_spec.lua spec/host/embed_spec.lua spec/host/cpu_threads_spec.lua
EMBED       := $(BUILD)/embed
TSAN_BUILD  ?= build/tsan
TSAN_N      ?= 50000
TSAN_FLAGS  ?= -fsanitize=thread -fno-omit-frame-pointer
# OpenBLAS's own thread pool is not instrumented: one thread, so TSan sees only ours.
TSAN_ENV    ?= TSAN_OPTIONS=halt_on_error=0:exitcode=66:report_signal_unsafe=0 \
               OPENBLAS_NUM_THREADS=1

.PHONY: fuzz asan asan-build asan-fuzz valgrind cpu-build embed embed-build gpu-check \
        tsan tsan-build

# $(call san_quiet,COMMAND): runs COMMAND with ASan's "failed to allocate" warnings left
# out of its output (with allocator_may_return_null, every deliberately impossible
# allocation prints one) and sets rc to its exit status.
san_quiet = rcfile=$$(mktemp); { $(1); echo $$? >$$rcfile; } 2>&1 \
  | grep -v 'WARNING: AddressSanitizer failed to allocate'; rc=$$(cat $$rcfile); rm -f $$rcfile

# $(call qlua_fuzz,QLUA,N,ENV,PREFIX): runs the fuzzer; when the process dies mid-call, the
# call it was making (left in the --last file) is printed.
qlua_fuzz = last=$(dir $(1))fuzz-last.txt; rm -f $$last; \
  $(call san_quiet,$(4) $(3) $(1) lua/qlua/fuzz.lua $(2) $(SEED) --quiet --last $$last); \
  if [ -s $$last ]; then echo "make: the fuzzer died (status $$rc) during this call:"; sed "s/ *$$//" $$last; \
    it=$$(sed -n 's/^seed [0-9-]* iteration \([0-9]*\):.*/\1/p' $$last); \
    echo "make: its reproducer script: $(1) lua/qlua/fuzz.lua $$it $(SEED) --show $$it"; fi; \
  exit $$rc

fuzz: $(QLUA)
	@$(call qlua_fuzz,$(QLUA),$(N),,$(FUZZ_LIMIT))

# The sanitizer build: the same rules, another BUILD, the flags appended through variables.
asan-build:
	@$(MAKE) --no-print-directory BUILD=$(ASAN_BUILD) CUDA=0 CFLAGS="-O1 -g $(SAN_FLAGS)" \
	  LDFLAGS="$(SAN_FLAGS)" $(ASAN_BUILD)/qlua $(ASAN_BUILD)/embed

asan: asan-build
	@failed=0; \
	echo "make asan: the spec suite under ASan/UBSan/LSan"; \
	$(call san_quiet,$(ASAN_ENV) QLUA=$(abspath $(ASAN_BUILD))/qlua \
	  QLUA_EMBED=$(abspath $(ASAN_BUILD))/embed $(ASAN_BUILD)/qlua spec/run.lua $(SPEC)); \
	[ $$rc = 0 ] || failed=1; \
	echo "make asan: fuzz N=$(ASAN_FUZZ_N) SEED=$(SEED) under ASan/UBSan/LSan"; \
	( $(call qlua_fuzz,$(ASAN_BUILD)/qlua,$(ASAN_FUZZ_N),$(ASAN_ENV)) ) || failed=1; \
	echo "make asan: $$([ $$failed = 0 ] && echo passed || echo FAILED)"; exit $$failed

asan-fuzz: asan-build
	@$(call qlua_fuzz,$(ASAN_BUILD)/qlua,$(N),$(ASAN_ENV))

# valgrind on a CPU-only build of its own (valgrind and the CUDA driver do not mix);
# OPENBLAS_NUM_THREADS=1 keeps OpenBLAS's thread pool out of the leak report.
cpu-build:
	@$(MAKE) --no-print-directory BUILD=$(CPU_BUILD) CUDA=0 $(CPU_BUILD)/qlua $(CPU_BUILD)/embed

# Each run's log is $(CPU_BUILD)/valgrind.log while it runs; its summary lines are printed,
# and the whole log when valgrind reports anything.
valgrind: cpu-build
	@failed=0; log=$(CPU_BUILD)/valgrind.log; export OPENBLAS_NUM_THREADS=1; \
	export QLUA=$(abspath $(CPU_BUILD))/qlua QLUA_EMBED=$(abspath $(CPU_BUILD))/embed; \
	for run in "qlua samples/demo.lua" "qlua samples/gather.lua 100000 1000" "embed" \
	           "embed --threads" "qlua spec/run.lua $(VALGRIND_SPECS)"; do \
	  echo "make valgrind: $$run"; set -- $$run; prog=$(CPU_BUILD)/$$1; shift; \
	  if $(VALGRIND) $(VALGRIND_FLAGS) --log-file=$$log $$prog "$$@" >$$log.out 2>&1; then \
	    grep -E 'ERROR SUMMARY|in use at exit|definitely lost|indirectly lost|possibly lost' $$log \
	      | sed 's/^==[0-9]*== */    /'; \
	  else failed=1; cat $$log.out $$log; fi; \
	done; rm -f $$log $$log.out; \
	echo "make valgrind: $$([ $$failed = 0 ] && echo clean || echo FAILED)"; exit $$failed

# The embedding example: the runtime objects (not the host program's) linked into a C program.
$(EMBED): samples/embed.c $(RUNTIME_OBJ) $(KERNEL_OBJ) $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(QCFLAGS) $(CFLAGS) $(LDFLAGS) -o $@ samples/embed.c $(RUNTIME_OBJ) $(KERNEL_OBJ) \
	  $(LUA_LIBS) $(LIBS)
embed-build: $(EMBED)
embed: $(EMBED)
	$(EMBED)

# ThreadSanitizer on the embedding test's threaded mode: two states on two threads, then
# TSAN_N references kept with qt_tensor_share and released on two other threads while the
# state uses, frees and collects the tensors, some held past lua_close. Any report fails.
tsan-build:
	@$(MAKE) --no-print-directory BUILD=$(TSAN_BUILD) CUDA=0 CFLAGS="-O1 -g $(TSAN_FLAGS)" \
	  LDFLAGS="$(TSAN_FLAGS)" $(TSAN_BUILD)/embed $(TSAN_BUILD)/qlua

# Then the CPU thread pool under TSan: its spec runs every pooled op family on
# 1, 2, 3 and 8 threads, with 4 threads by default.
tsan: tsan-build
	@echo "make tsan: $(TSAN_BUILD)/embed --threads $(TSAN_N) under ThreadSanitizer"; \
	$(TSAN_ENV) $(TSAN_BUILD)/embed --threads $(TSAN_N); rc=$$?; \
	echo "make tsan: the CPU thread pool (spec/host/cpu_threads_spec.lua) under ThreadSanitizer"; \
	$(TSAN_ENV) QLUA_NUM_THREADS=4 QLUA=$(abspath $(TSAN_BUILD))/qlua $(TSAN_BUILD)/qlua \
	  spec/run.lua spec/host/cpu_threads_spec.lua || rc=$$?; \
	echo "make tsan: $$([ $$rc = 0 ] && echo clean || echo "FAILED (status $$rc)")"; exit $$rc
# ==== end of reliability ==================================================================

# The GPU half of the reliability checks, for the GPU machine (about 9 minutes with the
# defaults). memcheck's API-error report is off: the out-of-memory specs provoke cudaMalloc
# failures on purpose, and each would count as an "error". Each step prints its summary
# line; the last line says whether all passed.
GPU_SPECS    ?= spec/gpu/parity_spec.lua spec/gpu/parity_edges_spec.lua
GPU_FUZZ_N   ?= 20000
SAN_FUZZ_N   ?= 2000
SOAK_SECONDS ?= 300
SOAK_GIB     ?= 4
SANITIZER    ?= compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 1
gpu-check: $(QLUA)
	@if ! $(QLUA) -e 'os.exit(qlua.gpu_count() > 0 and 0 or 1)'; then \
	  echo "make gpu-check: no GPU here (qlua.gpu_count() is 0)"; exit 2; fi; \
	failed=0; log=$(BUILD)/gpu-check.log; \
	echo "make gpu-check: $(GPU_SPECS) under compute-sanitizer memcheck"; \
	$(SANITIZER) $(QLUA) spec/run.lua $(GPU_SPECS) >$$log 2>&1 || { failed=1; cat $$log; }; \
	grep -E 'successes|ERROR SUMMARY' $$log; \
	echo "make gpu-check: fuzz N=$(SAN_FUZZ_N) SEED=$(SEED) under compute-sanitizer memcheck"; \
	$(SANITIZER) $(QLUA) lua/qlua/fuzz.lua $(SAN_FUZZ_N) $(SEED) --quiet >$$log 2>&1 \
	  || { failed=1; cat $$log; }; \
	grep -E 'findings|ERROR SUMMARY' $$log; rm -f $$log; \
	echo "make gpu-check: fuzz N=$(GPU_FUZZ_N) SEED=$(SEED) on the GPU build"; \
	( $(call qlua_fuzz,$(QLUA),$(GPU_FUZZ_N),,) ) || failed=1; \
	echo "make gpu-check: soak $(SOAK_SECONDS) s, tensors up to $(SOAK_GIB) GiB"; \
	$(QLUA) samples/soak.lua $(SOAK_SECONDS) $(SOAK_GIB) || failed=1; \
	echo "make gpu-check: $$([ $$failed = 0 ] && echo passed || echo FAILED)"; exit $$failed
