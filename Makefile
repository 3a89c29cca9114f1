# Thin entry points over CMake/CTest. See README.md.
#   make test     install deps if missing, build Debug (ASan+UBSan) and a Release nasgwd, run every test
#   make build    Debug build only
#   make release  Release build (benchmarks)
#   make bench    Release build, then the block benchmark against a lab LUN
#   make tsan     ThreadSanitizer build and the threaded tests (label tsan) under it
#   make tsa      clang's thread-safety analysis over the whole tree (a build, nothing run; make lint runs it too)
#   make lint     clang-format (check only) and clang-tidy (.clang-tidy) over the C++ sources
#   make fuzz     the head-protocol decoder under libFuzzer (clang), for FUZZ_SECONDS
#   make smbtorture  Release build, then smbtorture's SMB2 suites on vfs_nasgw and on stock Samba (XFS), compared
#   make smb-bench  Release build, then the SMB benchmark (vfs_nasgw against stock smbd on XFS, 1-16 clients)
#   make demo     deps, Release build, then a lab SAN + nasgwd + ganesha serving NFS and smbd serving SMB (deploy/demo.py)
#   make demo-stop  stop the demo and remove what it made
#   make format   clang-format the tree (what make lint checks)

SHELL := /bin/bash
JOBS ?= 2
DEBUG_DIR ?= build/debug
RELEASE_DIR ?= build/release
TSAN_DIR ?= build/tsan
TSA_DIR ?= build/tsa
FUZZ_DIR ?= build/fuzz
FUZZ_SECONDS ?= 30
GEN := $(shell command -v ninja >/dev/null 2>&1 && echo -G Ninja)

.PHONY: deps build release release-nasgwd tsan tsan-build tsa lint fuzz fuzz-build beside-integration test unit bench format clean lab-gc demo demo-stop smbtorture smb-bench

deps:
	@bash deploy/install-deps.sh
	@bash deploy/ganesha-headers.sh >/dev/null
	@bash deploy/samba-headers.sh >/dev/null

$(DEBUG_DIR)/CMakeCache.txt:
	cmake -S . -B $(DEBUG_DIR) $(GEN) -DCMAKE_BUILD_TYPE=Debug

$(RELEASE_DIR)/CMakeCache.txt:
	cmake -S . -B $(RELEASE_DIR) $(GEN) -DCMAKE_BUILD_TYPE=Release

build: deps $(DEBUG_DIR)/CMakeCache.txt
	cmake --build $(DEBUG_DIR) -j$(JOBS)

release: deps $(RELEASE_DIR)/CMakeCache.txt
	cmake --build $(RELEASE_DIR) -j$(JOBS)

# nasgwd, Release: the integration test memory_lab measures its RSS
# (under ASan, shadow memory and quarantine would swamp it). Its test takes
# it from build/release (the Debug tree's NASGW_RELEASE_DIR). The heads are
# built too, so that `make test` catches what only the optimiser warns
# about in them (make demo and the benchmarks run these builds).
release-nasgwd: deps $(RELEASE_DIR)/CMakeCache.txt
	cmake --build $(RELEASE_DIR) --target nasgwd nasgw-fuse fsalnasgw vfs_nasgw -j$(JOBS)

# smbtorture's SMB2 suites against a vfs_nasgw share and a stock share of
# XFS on a loop device, in one run (tests/integration/smbtorture_lab.py):
# fails when a test that passes on stock fails on nasgw without a reason
# written in the script. Not part of make test: about twenty minutes.
smbtorture: release lab-gc
	python3 tests/integration/smbtorture_lab.py --build $(RELEASE_DIR) --out $(RELEASE_DIR)/smbtorture.json

# The SMB benchmark (bench/smb_bench.py): 8K random 70/30, 256K sequential
# read and 64K sequential write from 1-16 libsmbclient clients, vfs_nasgw
# against stock smbd on XFS, interleaved, medians of 3 runs; table, JSON and
# chart in the release tree. About fifteen minutes.
smb-bench: release lab-gc
	python3 bench/smb_bench.py --build $(RELEASE_DIR) --out $(RELEASE_DIR)/smb_bench.json --chart $(RELEASE_DIR)/smb_bench.png

$(TSAN_DIR)/CMakeCache.txt:
	cmake -S . -B $(TSAN_DIR) $(GEN) -DCMAKE_BUILD_TYPE=Debug -DNASGW_TSAN=ON

# The threaded parts under ThreadSanitizer: the tests labelled tsan, i.e. the
# suites named after TSAN in their nasgw_test() line (and block_lab_test's):
# the block layer's I/O loop and its submitters (unit and tgtd tests),
# MemDevice, the write gate, the allocator, MetaFs, ownership and its
# renewal thread, the head server and client library (HeadTest), the byte-
# range locks, the metrics endpoint, the log, the write-back cache. RocksDB
# is not built with TSan here, so its internal synchronisation is invisible
# to it: suites that mostly drive RocksDB's own threads are left out, and
# tests/tsan.supp drops reports with one side inside librocksdb.
tsan-build: deps $(TSAN_DIR)/CMakeCache.txt
	cmake --build $(TSAN_DIR) --target nasgw_tsan_tests -j$(JOBS)

tsan: tsan-build lab-gc
	cd $(TSAN_DIR) && TSAN_OPTIONS="halt_on_error=1 suppressions=$(CURDIR)/tests/tsan.supp" ctest -L tsan -j1 --output-on-failure --timeout 600

# clang's thread-safety analysis (base/mutex.h: GUARDED_BY, REQUIRES, the
# lock order as ACQUIRED_BEFORE) over everything, as errors. Debug without
# sanitizers or debug info: only the compile matters; nothing is run.
$(TSA_DIR)/CMakeCache.txt:
	CC=clang CXX=clang++ cmake -S . -B $(TSA_DIR) $(GEN) -DCMAKE_BUILD_TYPE=Debug -DNASGW_SANITIZE=OFF \
	  -DNASGW_THREAD_SAFETY=ON -DCMAKE_C_FLAGS_DEBUG=-O0 -DCMAKE_CXX_FLAGS_DEBUG=-O0

tsa: deps $(TSA_DIR)/CMakeCache.txt
	cmake --build $(TSA_DIR) -j$(JOBS)

# The C++ sources clang-format checks. fsal/ganesha (C, and its header) is left
# out: it keeps Ganesha's own style (kernel-like: tabs, a function's brace on
# its own line), that of the code it plugs into, not .clang-format's Google one.
FORMAT_FILES = git ls-files '*.cc' '*.h' ':!:fsal/ganesha/*'
# What clang-tidy checks: every translation unit of ours in $(TSA_DIR)'s
# compile_commands.json (clang's flags; not the generated protobuf code, not
# the C of fsal/ganesha and tests/tools), and our headers they include.
TIDY_DIRS := (base|block|fs|cache|cluster|proto|daemon|fsal/client|fsal/fuse|cli|bench|tests)
TIDY_FILES := ^$(CURDIR)/$(TIDY_DIRS)/.*\.cc$$
TIDY_HEADERS := ^$(CURDIR)/$(TIDY_DIRS)/

# Formatting (check only; make format fixes it), then clang-tidy with the
# checks in .clang-tidy, two translation units at a time. It needs the
# generated admin API headers, not a build.
lint: deps $(TSA_DIR)/CMakeCache.txt
	$(FORMAT_FILES) | xargs clang-format --dry-run --Werror
	cmake --build $(TSA_DIR) --target nasgw_admin_proto_headers
	run-clang-tidy -p $(TSA_DIR) -j $(JOBS) -quiet -header-filter='$(TIDY_HEADERS)' '$(TIDY_FILES)' > $(TSA_DIR)/clang-tidy.log 2>&1 \
	  || { sed 's/\x1b\[[0-9;]*m//g' $(TSA_DIR)/clang-tidy.log | grep -v '^clang-tidy-[0-9]* \|warnings generated\.$$'; \
	       echo 'make lint: clang-tidy found problems (above)'; exit 1; }

$(FUZZ_DIR)/CMakeCache.txt:
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_DIR) $(GEN) -DCMAKE_BUILD_TYPE=Debug -DNASGW_FUZZ=ON

# A bounded libFuzzer run over the head-protocol decoders (ASan+UBSan). The
# corpus it grows is kept in the build tree between runs.
fuzz-build: deps $(FUZZ_DIR)/CMakeCache.txt
	cmake --build $(FUZZ_DIR) --target proto_head_fuzz -j$(JOBS)

fuzz: fuzz-build
	mkdir -p $(FUZZ_DIR)/corpus
	$(FUZZ_DIR)/proto/proto_head_fuzz -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	  -print_final_stats=1 $(FUZZ_DIR)/corpus

# Unit tests in parallel, the Release nasgwd, then the lab integration tests
# one at a time (they start tgtd targets and namespaces and are
# timing-sensitive on two cores), then the fuzzer and ThreadSanitizer.
# The integration tests leave a core idle much of the time (they wait on
# targets, leases, timeouts and clients: about 40% of the machine is idle
# while they run), so the work that needs only CPU runs beside them at the
# idle scheduling class (SCHED_IDLE, and the idle I/O class): the static
# checks (lint) and the fuzzer's and ThreadSanitizer's builds. A SCHED_IDLE
# task runs only on a CPU no other task wants, so the tests' timings are
# those of a machine without it; what it did not finish meanwhile finishes
# after them. Its output is printed after the tests', and its failure fails
# make test as if it had run alone. The thread-safety analysis runs inside
# lint: clang-tidy compiles every translation unit with build/tsa's flags
# (-Wthread-safety -Wthread-safety-beta -Werror), and any error of the
# compile is a finding, so a separate tsa build would compile the same code
# again (make tsa is still there to run it alone). Each phase says when it
# starts, so that a CI log shows where the time went.
PHASE = @echo "== make test: $(1) ($$(date -u +%T))"
BESIDE_LOG = $(DEBUG_DIR)/beside-integration.log
test: build lab-gc
	$(call PHASE,unit tests)
	cd $(DEBUG_DIR) && ctest -L unit -j$(JOBS) --output-on-failure --timeout 300
	$(call PHASE,Release nasgwd and heads)
	$(MAKE) release-nasgwd
	$(call PHASE,integration tests; lint and the fuzzer's and ThreadSanitizer's builds beside them at idle priority)
	@chrt --idle 0 ionice -c 3 $(MAKE) --no-print-directory beside-integration > $(BESIDE_LOG) 2>&1 & beside=$$!; \
	  trap 'kill $$beside 2>/dev/null; wait $$beside' INT TERM; \
	  (cd $(DEBUG_DIR) && ctest -L integration --output-on-failure --timeout 600); tests=$$?; \
	  echo "== make test: integration tests ended ($$(date -u +%T)); waiting for what runs beside them"; \
	  wait $$beside; rc=$$?; \
	  echo "== make test: lint and the builds beside the integration tests ($$(date -u +%T)), their output:"; \
	  cat $(BESIDE_LOG); \
	  [ $$rc = 0 ] || echo "make test: lint or a build beside the integration tests failed (above)"; \
	  [ $$tests = 0 ] && [ $$rc = 0 ]
	$(call PHASE,fuzz)
	$(MAKE) fuzz
	$(call PHASE,ThreadSanitizer)
	$(MAKE) tsan
	$(call PHASE,done)

# What make test runs beside the integration tests (above).
beside-integration:
	$(call PHASE,lint and the thread-safety analysis)
	$(MAKE) lint
	$(call PHASE,the fuzzer's build)
	$(MAKE) fuzz-build
	$(call PHASE,ThreadSanitizer's build)
	$(MAKE) tsan-build
	$(call PHASE,beside-integration done)

unit: build
	cd $(DEBUG_DIR) && ctest -L unit -j$(JOBS) --output-on-failure

# Removes what crashed runs left behind (tgtd, namespaces, bridges).
lab-gc:
	@python3 tests/lab/sanlab gc

bench: release lab-gc
	bash bench/run-block-bench.sh $(RELEASE_DIR)

demo: release
	python3 deploy/demo.py up --build $(RELEASE_DIR)

demo-stop:
	python3 deploy/demo.py down

format:
	$(FORMAT_FILES) | xargs clang-format -i

clean:
	rm -rf build
