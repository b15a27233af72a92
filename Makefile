# goshim: build, tests, benchmarks.
#
#   make            build/libgoshim.so, build/libsched.a, test programs, unit binary, benches
#   make test       install missing packages, then test-asan, test-tsan and test-unit
#   make test-unit  build, check exports and layers, run the Criterion suites (normal build only)
#   make demo       build, run build/bench/demo_sched with GOSHIM_SCHEDTRACE=$(TRACE), the
#                   blocking-calls demo and the native-vs-goshim comparisons (charts in build/demo)
#   make bench      run every build/bench/bench_* and the bench_*.sh drivers (native vs goshim,
#                   the real programs too), ending with the rows where goshim is slower
#   make test-asan  the same tests built with ASan+UBSan (objects in build/san-address/)
#   make test-tsan  the same tests built with TSan, without the preload suites
#   make test-real  real Debian programs natively and under goshim (installs them), at the
#                   default P, then at GOSHIM_PROCS=1 against native pinned to one CPU
#   make soak SEEDS=N  the real programs under goshim stress, N chaos seeds in all (default
#                   1000, about a quarter of an hour on 2 idle CPUs) at P=1 and P=2; make test runs 2 each
#   make test-peer  GLib's installed tests and CPython's regression tests about threads,
#                   signals, spawning and I/O, natively and under goshim (default P and
#                   GOSHIM_PROCS=1), about an hour; make test runs a quick subset of it
#   make test-posix LTP_DIR=...  the Open POSIX Test Suite of an LTP checkout, natively
#                   and under goshim (default P and GOSHIM_PROCS=1): the tests that differ
#
# Knobs: V=1 (show commands), SAN=address|undefined|thread, DEBUG=1 (-DGOSHIM_DEBUG=1),
# WERROR=0 (warnings stay warnings), LTO=0 (no link-time optimisation), CFLAGS, LDFLAGS,
# PREFIX, DESTDIR, TRACE, TEST_TIMEOUT, SEEDS (make soak).
# Sources are found by wildcard: a new sched/*.c, sched/*.S, shim/*.c, preload/*.c,
# tests/test_*.c, tests/progs/*.c or tests/bench/*.c needs no Makefile change.

VERSION      := 0.0.1
CC           ?= cc
AR           ?= ar
CLANG_FORMAT ?= clang-format
CFLAGS       ?= -O2 -g
LDFLAGS      ?=
PREFIX       ?= /usr/local
DESTDIR      ?=
TRACE        ?= 100
TEST_TIMEOUT ?= 900
WERROR       ?= 1

WARN_COMMON = -Wall -Wextra -Wshadow -Wstrict-prototypes -Wpointer-arith -Wcast-align -Wundef \
              -Werror=implicit-function-declaration -Werror=incompatible-pointer-types
ifeq ($(WERROR),1)
WARN_COMMON += -Werror
endif
WARN      = $(WARN_COMMON) -Wmissing-prototypes
TESTWARN  = $(WARN_COMMON)
BASE      = -std=gnu11 -D_GNU_SOURCE -fPIC -fvisibility=hidden -fno-omit-frame-pointer -MMD -MP
CPPFLAGS += -I. -DGOSHIM_VERSION=\"$(VERSION)\"
ifeq ($(DEBUG),1)
CPPFLAGS += -DGOSHIM_DEBUG=1
endif
ASFLAGS  += -Wa,--noexecstack
LIBS      = -ldl -lpthread
SOLDFLAGS = -shared -Wl,--version-script=preload/exports.map -Wl,-z,defs

# Sanitizer variants build into their own tree so they never mix with the normal build.
ifeq ($(SAN),)
BUILD    := build
SANFLAGS :=
# The library is linked with link-time optimisation: the hand-off path crosses sched/ and
# shim/ in a few dozen small calls (cond ping-pong 208 -> 195 ns). Fat objects keep
# libsched.a usable by the unit tests, which link it without LTO. LTO=0 turns it off.
ifneq ($(LTO),0)
LTOFLAGS := -flto=auto -ffat-lto-objects
endif
# Not dump.c: tools/goshim-gdb.py reads its reasons[] by file scope, and gdb finds only the
# location-less early debug entry of an LTO'd file-static.
$(BUILD)/sched/dump.o: LTOFLAGS :=
else ifeq ($(SAN),address)
BUILD    := build/san-address
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined
# An ASan-linked libgoshim.so only loads into a program when libasan comes first.
CPPFLAGS += -DGOSHIM_PRELOAD_FIRST=\"$(shell $(CC) -print-file-name=libasan.so)\"
else ifeq ($(SAN),undefined)
BUILD    := build/san-undefined
SANFLAGS := -fsanitize=undefined -fno-sanitize-recover=undefined
else ifeq ($(SAN),thread)
BUILD    := build/san-thread
# TSan does not model atomic_thread_fence: keep gcc's warning, but not as an error.
SANFLAGS := -fsanitize=thread -Wno-error=tsan
else
$(error SAN must be address, undefined or thread, not '$(SAN)')
endif

# Tests locate the tree and the build through these (see tests/helpers.h). No -Isched:
# sched/sched.h would shadow <sched.h>; tests include "../sched/x.h" or "sched/x.h".
TESTDEFS = -I. -Itests -DGOSHIM_TESTING=1 \
           -DGOSHIM_BUILD_DIR=\"$(abspath $(BUILD))\" -DGOSHIM_SRC_DIR=\"$(abspath .)\"

ifneq ($(V),1)
Q   = @
msg = @printf '  %-7s %s\n' $(1) $(2)
else
Q   =
msg =
endif

# ---- sources -------------------------------------------------------------------------------
SCHED_C   := $(wildcard sched/*.c)
SCHED_S   := $(wildcard sched/*.S)
SO_C      := $(wildcard preload/*.c) $(wildcard shim/*.c)
TEST_C    := $(wildcard tests/test_*.c)
PROG_C    := $(wildcard tests/progs/*.c)
BENCH_C   := $(wildcard tests/bench/*.c)
FMT_FILES := $(wildcard sched/*.c sched/*.h shim/*.c shim/*.h preload/*.c preload/*.h \
                        tests/*.c tests/*.h tests/*/*.c tests/*/*.h tools/*.c tools/*.h)

SCHED_OBJ := $(SCHED_C:%.c=$(BUILD)/%.o) $(SCHED_S:%.S=$(BUILD)/%.S.o)
SO_OBJ    := $(SO_C:%.c=$(BUILD)/%.o)
TEST_OBJ  := $(TEST_C:%.c=$(BUILD)/%.o)
PROG_CXX  := $(wildcard tests/progs/*.cc)
PROGS     := $(PROG_C:tests/progs/%.c=$(BUILD)/tests/progs/%)
PROGS_CXX := $(PROG_CXX:tests/progs/%.cc=$(BUILD)/tests/progs/%)
PROG_LIBS := $(patsubst tests/progs/lib/%.c,$(BUILD)/tests/progs/libgoshim_%.so,$(wildcard tests/progs/lib/*.c))
BENCHES   := $(BENCH_C:tests/bench/%.c=$(BUILD)/bench/%)
GO        ?= $(shell command -v go 2>/dev/null)
GOBENCH   := $(if $(GO),$(BUILD)/bench/gobench)

LIBSCHED  := $(BUILD)/libsched.a
LIBGOSHIM := $(BUILD)/libgoshim.so
UNIT      := $(BUILD)/tests/unit

# tools/tools.mk adds the launcher (build/goshim) and its man page to TOOLS.
TOOLS     :=
-include tools/tools.mk

# Rebuild everything when the compiler or flags change (e.g. CFLAGS=-O0), and relink
# when a source file appears or disappears.
FLAGS_SIG := $(CC) $(CFLAGS) $(LTOFLAGS) $(CPPFLAGS) $(SANFLAGS) $(WARN) $(BASE) $(TESTDEFS) $(LDFLAGS)
LIST_SIG  := $(SCHED_OBJ) $(SO_OBJ) $(TEST_OBJ)
STAMP     := $(BUILD)/.flags
LSTAMP    := $(BUILD)/.objects
ifeq ($(filter clean uninstall format format-check deps,$(MAKECMDGOALS)),)
ifneq ($(FLAGS_SIG),$(file <$(STAMP)))
$(shell mkdir -p $(BUILD))
$(file >$(STAMP),$(FLAGS_SIG))
endif
ifneq ($(LIST_SIG),$(file <$(LSTAMP)))
$(shell mkdir -p $(BUILD))
$(file >$(LSTAMP),$(LIST_SIG))
endif
endif

# ---- build ---------------------------------------------------------------------------------
.PHONY: all test test-unit test-real test-limits test-soak soak test-peer test-peer-quick test-posix check test-asan test-tsan bench demo install uninstall clean format \
        format-check deps
.DEFAULT_GOAL := all

all: $(LIBSCHED) $(LIBGOSHIM) $(PROGS) $(PROGS_CXX) $(PROG_LIBS) $(UNIT) $(BENCHES) $(GOBENCH) $(TOOLS) \
     docs/knobs.md
	@:

# The reference of the GOSHIM_ variables, written from the list the parser reads. It is
# committed; make test-unit fails when it is stale (scripts/gen-knobs.sh --check).
docs/knobs.md: sched/config.def scripts/gen-knobs.sh
	$(call msg,GEN,$@)
	$(Q)CC="$(CC)" scripts/gen-knobs.sh

# The Go twins of the scale benchmarks (tests/bench/go/), when a Go toolchain is
# installed (golang-go; scripts/setup.sh installs it). Its build cache stays in build/.
$(GOBENCH): $(wildcard tests/bench/go/*.go)
	$(call msg,GO,$@)
	$(Q)mkdir -p $(@D)
	$(Q)GOCACHE=$(abspath $(BUILD))/gocache GO111MODULE=off $(GO) build -o $@ $^

$(BUILD)/sched/%.o: sched/%.c $(STAMP)
	$(call msg,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(BASE) $(WARN) $(CFLAGS) $(LTOFLAGS) $(SANFLAGS) -c -o $@ $<

$(BUILD)/sched/%.S.o: sched/%.S $(STAMP)
	$(call msg,AS,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(BASE) $(CFLAGS) $(ASFLAGS) -c -o $@ $<

$(BUILD)/preload/%.o: preload/%.c $(STAMP)
	$(call msg,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(BASE) $(WARN) $(CFLAGS) $(LTOFLAGS) $(SANFLAGS) -c -o $@ $<

$(BUILD)/shim/%.o: shim/%.c $(STAMP)
	$(call msg,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(BASE) $(WARN) $(CFLAGS) $(LTOFLAGS) $(SANFLAGS) -c -o $@ $<

$(LIBSCHED): $(SCHED_OBJ) $(LSTAMP)
	$(call msg,AR,$@)
	@mkdir -p $(@D)
	$(Q)rm -f $@
	$(Q)$(AR) rcs $@ $(SCHED_OBJ)

$(LIBGOSHIM): $(SO_OBJ) $(SCHED_OBJ) preload/exports.map $(LSTAMP)
	$(call msg,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(LTOFLAGS) $(SANFLAGS) $(LDFLAGS) $(SOLDFLAGS) -o $@ $(SO_OBJ) $(SCHED_OBJ) $(LIBS)

# Unit tests: every tests/test_*.c in one Criterion binary (Criterion provides main).
$(BUILD)/tests/%.o: tests/%.c $(STAMP)
	$(call msg,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(TESTDEFS) $(BASE) $(TESTWARN) $(CFLAGS) $(SANFLAGS) -c -o $@ $<

$(UNIT): $(TEST_OBJ) $(TOOLS_UNIT_OBJ) $(LIBSCHED) $(LSTAMP)
	$(call msg,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(SANFLAGS) $(LDFLAGS) -o $@ $(TEST_OBJ) $(TOOLS_UNIT_OBJ) $(LIBSCHED) -lcriterion $(LIBS)

# Test programs: plain pthread programs, no goshim headers, no sanitizer.
$(PROGS): $(BUILD)/tests/progs/%: tests/progs/%.c $(STAMP)
	$(call msg,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) -std=gnu11 -D_GNU_SOURCE -MMD -MP -MF $@.d $(TESTWARN) $(CFLAGS) $(LDFLAGS) -pthread \
	    -o $@ $< $(PROG_LDLIBS)

# prog_sync_handover is linked against libgoshim_handover.so: a library the program needs is
# initialised before the LD_PRELOAD ones, so its constructor runs before goshim starts.
$(BUILD)/tests/progs/prog_sync_handover: $(BUILD)/tests/progs/libgoshim_handover.so
$(BUILD)/tests/progs/prog_sync_handover: \
    PROG_LDLIBS = -L$(BUILD)/tests/progs -lgoshim_handover -Wl,-rpath,'$$ORIGIN'

# prog_procsig's alarm modes mark the moment main calls pause or flock: bound at load time,
# no lazy binding (microseconds of ld.so's) lies between that mark and the call.
$(BUILD)/tests/progs/prog_procsig: PROG_LDLIBS = -Wl,-z,now

# Libraries the test programs dlopen (tests/progs/lib/NAME.c -> libgoshim_NAME.so).
# The tlsie and tlsouter ones use initial-exec TLS (DF_STATIC_TLS: prog_dlopen_ietls).
$(BUILD)/tests/progs/libgoshim_tlsie.so $(BUILD)/tests/progs/libgoshim_tlsouter.so: \
    PROG_LIB_FLAGS = -ftls-model=initial-exec
$(PROG_LIBS): $(BUILD)/tests/progs/libgoshim_%.so: tests/progs/lib/%.c $(STAMP)
	$(call msg,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) -std=gnu11 -shared -fPIC $(PROG_LIB_FLAGS) -MMD -MP -MF $@.d $(TESTWARN) $(CFLAGS) \
	    $(LDFLAGS) -o $@ $<

$(PROGS_CXX): $(BUILD)/tests/progs/%: tests/progs/%.cc $(STAMP)
	$(call msg,CXX,$<)
	@mkdir -p $(@D)
	$(Q)$(CXX) -std=gnu++17 -MMD -MP -MF $@.d -Wall -Wextra -Werror $(CFLAGS) $(LDFLAGS) -pthread \
	    -o $@ $<

# Benchmarks and the demo: linked like the tests, without Criterion.
$(BUILD)/bench/%.o: tests/bench/%.c $(STAMP)
	$(call msg,CC,$<)
	@mkdir -p $(@D)
	$(Q)$(CC) $(CPPFLAGS) $(TESTDEFS) $(BASE) $(TESTWARN) $(CFLAGS) $(SANFLAGS) -c -o $@ $<

$(BENCHES): $(BUILD)/bench/%: $(BUILD)/bench/%.o $(LIBSCHED)
	$(call msg,LD,$@)
	$(Q)$(CC) $(CFLAGS) $(SANFLAGS) $(LDFLAGS) -o $@ $< $(LIBSCHED) $(LIBS)

.SECONDARY:

$(STAMP) $(LSTAMP):

-include $(wildcard $(addsuffix /*.d,$(addprefix $(BUILD)/,sched preload shim tests tests/progs bench)))

# ---- run -----------------------------------------------------------------------------------
# Sanitizer runtimes cannot coexist with per-G TLS, and they are slow: run them with
# GOSHIM_TLS=errno and loops scaled down (unless GOSHIM_TEST_SCALE is already set).
# A sanitizer report must fail the test that caused it, not just print. ASan leaves
# SIGSEGV to the program: the stack tests expect goshim's own overflow report and a
# native SIGSEGV death.
ifneq ($(SAN),)
TEST_ENV = GOSHIM_TLS=errno GOSHIM_TEST_SCALE=$${GOSHIM_TEST_SCALE:-0.1} \
           TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 handle_segv=0 use_sigaltstack=0 die_after_fork=0 $${TSAN_OPTIONS:-}" \
           ASAN_OPTIONS="handle_segv=0 use_sigaltstack=0 $${ASAN_OPTIONS:-}" \
           LSAN_OPTIONS="suppressions=$(CURDIR)/tests/lsan.supp $${LSAN_OPTIONS:-}" \
           UBSAN_OPTIONS="print_stacktrace=1 $${UBSAN_OPTIONS:-}"
endif
# ASan and TSan intercept pthread_create themselves and give every pthread a sanitizer
# thread on its own OS thread: under LD_PRELOAD they would wrap each G in one, on an M
# that already has one. So sanitized runs cover the runtime (sched/), not the preload.
ifneq ($(filter address thread,$(SAN)),)
TEST_FILTER = '--filter=!(exports|preload*)/*'
endif

deps:
	$(Q)scripts/setup.sh

# make test: the suite under ASan+UBSan and TSan, then as built normally, then the
# real-program suite (about a minute), the limits (test-limits, a minute and a half), two
# chaos seeds of each real program (test-soak, about a minute), then the quick subset of
# the peer suites (about three minutes). The last line is the peer suites' summary.
test:
	$(Q)scripts/setup.sh
	$(Q)$(MAKE) --no-print-directory test-asan
	$(Q)$(MAKE) --no-print-directory test-tsan
	$(Q)$(MAKE) --no-print-directory test-unit
	$(Q)$(MAKE) --no-print-directory test-real
	$(Q)$(MAKE) --no-print-directory test-limits
	$(Q)$(MAKE) --no-print-directory test-soak
	$(Q)$(MAKE) --no-print-directory test-peer-quick

# GLib's and CPython's own tests natively and under goshim (scripts/test_peer.sh).
test-peer:
	$(Q)scripts/setup.sh
	$(Q)$(MAKE) --no-print-directory all
	$(Q)scripts/test_peer.sh

test-peer-quick:
	$(Q)$(MAKE) --no-print-directory all
	$(Q)scripts/test_peer.sh --quick

test-real:
	$(Q)$(MAKE) --no-print-directory all
	$(Q)timeout -k 10 $(TEST_TIMEOUT) scripts/test_real.sh
	$(Q)GOSHIM_REAL_PROCS=1 timeout -k 10 $(TEST_TIMEOUT) scripts/test_real.sh

# Resource limits, seccomp, SIGSTOP and debuggers attaching, natively and under goshim
# (scripts/test_limits.sh, about a minute and a half).
test-limits:
	$(Q)$(MAKE) --no-print-directory all
	$(Q)timeout -k 10 $(TEST_TIMEOUT) scripts/test_limits.sh

# The soak (scripts/soak.sh): every real program under goshim stress, one chaos seed a run,
# at P=1 and P=2. test-soak is make test's share (about a minute): two seeds of each at P=1,
# a tenth of the suite's sizes, and a program that fails on some seeds must be reported with
# replay lines that fail again.
SEEDS ?= 1000
soak:
	$(Q)$(MAKE) --no-print-directory all
	$(Q)scripts/soak.sh --seeds $(SEEDS)

test-soak:
	$(Q)$(MAKE) --no-print-directory all
	$(Q)timeout -k 10 $(TEST_TIMEOUT) scripts/soak.sh --self-test
	$(Q)GOSHIM_TEST_SCALE=0.1 timeout -k 10 $(TEST_TIMEOUT) scripts/soak.sh --per-case 2 --procs 1

check: test

# The Open POSIX Test Suite of an LTP checkout, natively and under goshim (scripts/test_posix.sh).
LTP_DIR ?=
test-posix:
	$(Q)if [ -z "$(LTP_DIR)" ]; then \
	    echo "test-posix: needs an LTP checkout: git clone --depth 1" \
	         "https://github.com/linux-test-project/ltp /path/to/ltp, then" \
	         "make test-posix LTP_DIR=/path/to/ltp (nothing run)"; \
	else \
	    $(MAKE) --no-print-directory all && scripts/test_posix.sh "$(LTP_DIR)"; \
	fi

# One variant (SAN=... or none): build, check the exports and the layers, run the suites.
test-unit:
	$(Q)$(MAKE) --no-print-directory all
	$(Q)scripts/check-exports.sh $(LIBGOSHIM)
	$(Q)scripts/check-layers.sh . $(BUILD)
	$(Q)CC="$(CC)" scripts/gen-knobs.sh --check
	$(Q)$(TEST_ENV) scripts/run_unit.sh timeout -k 10 $(TEST_TIMEOUT) $(UNIT) --jobs 2 --verbose $(TEST_FILTER)

test-asan:
	$(Q)$(MAKE) --no-print-directory SAN=address test-unit

test-tsan:
	$(Q)$(MAKE) --no-print-directory SAN=thread test-unit

# Every driver runs even if one fails (the status says so at the end); each records its rows
# in $(BENCH_SUMMARY) (bench_record in scripts/bench_lib.sh), which bench_summary.sh sums up.
BENCH_SUMMARY := $(BUILD)/bench_summary.tsv
bench:
	$(Q)scripts/setup.sh
	$(Q)$(MAKE) --no-print-directory all
	$(Q)rm -f $(BENCH_SUMMARY); export GOSHIM_BENCH_SUMMARY=$(abspath $(BENCH_SUMMARY)); st=0; \
	scripts/bench.sh $(filter $(BUILD)/bench/bench_%,$(BENCHES)) || st=1; echo; \
	scripts/bench_scale.sh || st=1; echo; \
	scripts/bench_io.sh || st=1; \
	scripts/bench_preempt.sh || st=1; echo; \
	scripts/bench_fs.sh || st=1; echo; \
	scripts/bench_signals.sh || st=1; echo; \
	scripts/bench_real.sh || st=1; \
	[ $$st -eq 0 ] || echo "bench: a driver failed (its output above says which)"; \
	scripts/bench_summary.sh $(BENCH_SUMMARY); exit $$st

demo:
	$(Q)scripts/setup.sh
	$(Q)$(MAKE) --no-print-directory all
	$(Q)if [ -x $(BUILD)/bench/demo_sched ]; then \
	    GOSHIM_SCHEDTRACE=$(TRACE) $(BUILD)/bench/demo_sched; \
	else \
	    echo "demo: $(BUILD)/bench/demo_sched is not built yet (tests/bench/demo_sched.c is missing)"; \
	fi
	$(Q)scripts/demo_io.sh
	$(Q)scripts/demo_compare.sh

# ---- install, clean, format ----------------------------------------------------------------
install: $(LIBGOSHIM) install-tools
	install -d $(DESTDIR)$(PREFIX)/lib
	install -m 0755 $(LIBGOSHIM) $(DESTDIR)$(PREFIX)/lib/libgoshim.so

uninstall: uninstall-tools
	rm -f $(DESTDIR)$(PREFIX)/lib/libgoshim.so

clean:
	rm -rf build

format:
	$(Q)$(if $(FMT_FILES),$(CLANG_FORMAT) -i $(FMT_FILES),true)

format-check:
	$(Q)$(if $(FMT_FILES),$(CLANG_FORMAT) --dry-run --Werror $(FMT_FILES),true)
