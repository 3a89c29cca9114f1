# Thin entry points over CMake/CTest. See README.md.
#   make test     install deps if missing, build Debug (ASan+UBSan), run every test
#   make build    Debug build only
#   make release  Release build (benchmarks)
#   make bench    Release build, then the block benchmark against a lab LUN
#   make tsan     ThreadSanitizer build and every test under it
#   make fuzz     the head-protocol decoder under libFuzzer (clang), for FUZZ_SECONDS
#   make demo     deps, Release build, then a lab SAN + nasgwd + ganesha serving NFS (deploy/demo.py)
#   make demo-stop  stop the demo and remove what it made
#   make format   clang-format the tree

SHELL := /bin/bash
JOBS ?= 2
DEBUG_DIR ?= build/debug
RELEASE_DIR ?= build/release
TSAN_DIR ?= build/tsan
FUZZ_DIR ?= build/fuzz
FUZZ_SECONDS ?= 30
GEN := $(shell command -v ninja >/dev/null 2>&1 && echo -G Ninja)

.PHONY: deps build release tsan fuzz test unit bench format clean lab-gc demo demo-stop

deps:
	@bash deploy/install-deps.sh
	@bash deploy/ganesha-headers.sh >/dev/null

$(DEBUG_DIR)/CMakeCache.txt:
	cmake -S . -B $(DEBUG_DIR) $(GEN) -DCMAKE_BUILD_TYPE=Debug

$(RELEASE_DIR)/CMakeCache.txt:
	cmake -S . -B $(RELEASE_DIR) $(GEN) -DCMAKE_BUILD_TYPE=Release

build: deps $(DEBUG_DIR)/CMakeCache.txt
	cmake --build $(DEBUG_DIR) -j$(JOBS)

release: deps $(RELEASE_DIR)/CMakeCache.txt
	cmake --build $(RELEASE_DIR) -j$(JOBS)

$(TSAN_DIR)/CMakeCache.txt:
	cmake -S . -B $(TSAN_DIR) $(GEN) -DCMAKE_BUILD_TYPE=Debug -DNASGW_TSAN=ON

# The threaded parts under ThreadSanitizer: the block layer's I/O loop and its
# submitters (unit and tgtd tests), MemDevice, the allocator, MetaFs, the
# head server and client library (HeadTest), the metrics endpoint.
# (Tests that drive RocksDB's own threads are left out: RocksDB is not built
# with TSan here, so its internal synchronisation is invisible to it.)
TSAN_TESTS := ^(Status|Result|Histogram|Crc32c|Coding|Log|IscsiUrl|IscsiOptions|IscsiDevice|ScsiStatus|Backoff|MemDevice|Allocator|MetaFsTest|Label|Reserve|BlockLab|HeadProtocol|Access|ConfigTest|Metrics|MetricsHttp|MetricsHttpStart|HeadTest|LockTable)\.
tsan: deps $(TSAN_DIR)/CMakeCache.txt lab-gc
	cmake --build $(TSAN_DIR) -j$(JOBS)
	cd $(TSAN_DIR) && TSAN_OPTIONS=halt_on_error=1 ctest -j1 --output-on-failure --timeout 600 -R '$(TSAN_TESTS)'

$(FUZZ_DIR)/CMakeCache.txt:
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_DIR) $(GEN) -DCMAKE_BUILD_TYPE=Debug -DNASGW_FUZZ=ON

# A bounded libFuzzer run over the head-protocol decoders (ASan+UBSan). The
# corpus it grows is kept in the build tree between runs.
fuzz: deps $(FUZZ_DIR)/CMakeCache.txt
	cmake --build $(FUZZ_DIR) --target proto_head_fuzz -j$(JOBS)
	mkdir -p $(FUZZ_DIR)/corpus
	$(FUZZ_DIR)/proto/proto_head_fuzz -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	  -print_final_stats=1 $(FUZZ_DIR)/corpus

# Unit tests in parallel, then the lab integration tests one at a time (they
# start tgtd targets and namespaces and are timing-sensitive on two cores).
test: build lab-gc
	cd $(DEBUG_DIR) && ctest -L unit -j$(JOBS) --output-on-failure --timeout 300
	cd $(DEBUG_DIR) && ctest -L integration --output-on-failure --timeout 600
	$(MAKE) fuzz
	$(MAKE) tsan

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
	git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf build
