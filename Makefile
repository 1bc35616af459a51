# qlua — build, test, demo, bench, install.
#
#   make            build/qlua (the host) and build/qlua.so (the Lua C module)
#   make test       the busted suite, run through build/qlua
#   make demo       a sample script
#   make bench      benchmarks against raw CUDA / cuBLAS (GPU machine)
#   make deps       installs the Debian packages the build and the tests need
#   make install    PREFIX=/usr/local
#
# Lua comes from pkg-config (LUA_CFLAGS / LUA_LIBS override it); CUDA=auto builds the
# CUDA device when nvcc is found, CUDA=0 builds a CPU-only qlua.

PREFIX   ?= /usr/local
BUILD    ?= build
CC       ?= cc
PKG_CONFIG ?= pkg-config

LUA_CFLAGS ?= $(shell $(PKG_CONFIG) --cflags lua5.4 2>/dev/null || echo -I/usr/include/lua5.4)
LUA_LIBS   ?= $(shell $(PKG_CONFIG) --libs lua5.4 2>/dev/null || echo -llua5.4)
BLAS_CFLAGS ?= $(shell $(PKG_CONFIG) --cflags openblas 2>/dev/null)
BLAS_LIBS   ?= $(shell $(PKG_CONFIG) --libs openblas 2>/dev/null || echo -lopenblas)
READLINE_LIBS ?= -lreadline

OPT      ?= -O2
CFLAGS   ?= $(OPT) -g
QCFLAGS  := -std=c11 -D_DEFAULT_SOURCE -D_POSIX_C_SOURCE=200809L -Wall -Wextra -fPIC \
            -Iruntime $(LUA_CFLAGS) $(BLAS_CFLAGS)
LDFLAGS  ?=
LIBS     := $(BLAS_LIBS) -lm -lpthread -ldl

# ---- CUDA: auto-detected, CUDA=0 to leave it out
NVCC     ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
CUDA     ?= auto
ifeq ($(CUDA),auto)
  ifneq ($(strip $(NVCC)),)
    override CUDA := 1
  else
    override CUDA := 0
  endif
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
# sm_90 machine code for the H100/H200, plus compute_90 PTX the driver can JIT for newer GPUs
CUDA_ARCH ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCCFLAGS ?= -O3 -lineinfo
QNVCCFLAGS := -std=c++17 -DQLUA_CUDA $(CUDA_ARCH) -Xcompiler -fPIC,-Wall,-Wextra -Iruntime

RUNTIME_SRC := $(filter-out runtime/qlua.c,$(wildcard runtime/*.c))
RUNTIME_OBJ := $(RUNTIME_SRC:%.c=$(BUILD)/obj/%.o)
HOST_OBJ    := $(BUILD)/obj/runtime/qlua.o
KERNEL_SRC  := $(wildcard kernels/*.cu)
ifeq ($(CUDA),1)
  KERNEL_OBJ := $(KERNEL_SRC:%.cu=$(BUILD)/obj/%.o)
  QCFLAGS    += -DQLUA_CUDA
  LIBS       += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublas -lcudart -lstdc++
else
  KERNEL_OBJ :=
endif
HEADERS := $(wildcard runtime/*.h) $(wildcard kernels/*.h)

QLUA := $(BUILD)/qlua

.PHONY: all test demo bench deps install uninstall clean
all: $(QLUA) $(BUILD)/qlua.so

# The host: -Wl,-E exports the Lua API so C modules loaded by require (lfs, busted's
# term/system) bind to the Lua inside qlua.
$(QLUA): $(HOST_OBJ) $(RUNTIME_OBJ) $(KERNEL_OBJ)
	$(CC) $(LDFLAGS) -Wl,-E -o $@ $^ $(LUA_LIBS) $(READLINE_LIBS) $(LIBS)

# The Lua C module: the Lua API comes from whichever host loads it.
$(BUILD)/qlua.so: $(RUNTIME_OBJ) $(KERNEL_OBJ)
	$(CC) $(LDFLAGS) -shared -o $@ $^ $(LIBS)

$(BUILD)/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(QCFLAGS) $(CFLAGS) -c -o $@ $<

$(BUILD)/obj/%.o: %.cu $(HEADERS)
	@mkdir -p $(dir $@)
	$(NVCC) $(QNVCCFLAGS) $(NVCCFLAGS) -c -o $@ $<

# ---- tests: busted started inside qlua (spec/run.lua), so specs see qlua as scripts do
SPEC ?= spec
test: all
	QLUA=$(QLUA) $(QLUA) spec/run.lua $(SPEC)

demo: all
	$(QLUA) samples/demo.lua

# ---- benchmarks: qlua vs raw CUDA/cuBLAS (bench/baseline.cu) and vs NumPy, in one run
PYTHON ?= $(shell for p in python3 /usr/bin/python3; do $$p -c 'import numpy' 2>/dev/null && { echo $$p; break; }; done)
BENCH_BASELINE := $(if $(filter 1,$(CUDA)),$(BUILD)/bench-baseline)
$(BUILD)/bench-baseline: bench/baseline.cu
	@mkdir -p $(dir $@)
	$(NVCC) -std=c++17 $(CUDA_ARCH) -O3 -o $@ $< -lcublas
bench: all $(BENCH_BASELINE)
	$(QLUA) bench/bench.lua --baseline $(BUILD)/bench-baseline --csv $(BUILD)/bench.csv \
	  $(if $(PYTHON),--python $(PYTHON)) $(CASES)

# ---- packages: Debian's, installed only when missing
DEB_PACKAGES := lua5.4 liblua5.4-dev lua-busted libreadline-dev libopenblas-dev pkg-config
deps:
	@missing=""; for p in $(DEB_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	else echo "make deps: all packages present"; fi

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/lua/5.4
	install -m 755 $(QLUA) $(DESTDIR)$(PREFIX)/bin/qlua
	install -m 755 $(BUILD)/qlua.so $(DESTDIR)$(PREFIX)/lib/lua/5.4/qlua.so

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/qlua $(DESTDIR)$(PREFIX)/lib/lua/5.4/qlua.so

clean:
	rm -rf $(BUILD)
